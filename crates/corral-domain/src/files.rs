use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::id::SandboxId;
use crate::input::{InputError, check_path};
use crate::limits::MAX_WRITE_BYTES;

/// How file content is carried in JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum FileEncoding {
    /// UTF-8 text (the default).
    #[default]
    Utf8,
    /// Standard base64 (RFC 4648, with padding), for binary content.
    Base64,
}

/// `POST /v1/sandboxes/{id}/files/read` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadFileInput {
    /// File path inside the sandbox.
    pub path: String,
    /// Encoding of the returned content; default `utf8`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<FileEncoding>,
}

impl ReadFileInput {
    /// Checks the path.
    pub fn validate(&self) -> Result<(), InputError> {
        check_path(&self.path)
    }
}

/// `files/read` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ReadFileResult {
    /// The sandbox read from.
    pub sandbox_id: SandboxId,
    /// The path as requested.
    pub path: String,
    /// The content in `encoding`.
    pub content: String,
    /// The encoding of `content`.
    pub encoding: FileEncoding,
}

/// `POST /v1/sandboxes/{id}/files/write` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteFileInput {
    /// Destination path; its parent directory must already exist.
    pub path: String,
    /// Content in the declared encoding.
    pub content: String,
    /// Encoding of `content`; default `utf8`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<FileEncoding>,
}

impl WriteFileInput {
    /// Checks the path and decodes the content, enforcing the 1 MiB limit on decoded bytes.
    pub fn decode(&self) -> Result<Vec<u8>, InputError> {
        check_path(&self.path)?;
        decode_content("content", &self.content, self.encoding, MAX_WRITE_BYTES)
    }
}

/// Decodes `text` (field `field`) in `encoding` (default UTF-8) into at most `limit` bytes.
pub(crate) fn decode_content(
    field: &'static str,
    text: &str,
    encoding: Option<FileEncoding>,
    limit: usize,
) -> Result<Vec<u8>, InputError> {
    let bytes = match encoding.unwrap_or_default() {
        FileEncoding::Utf8 => text.as_bytes().to_vec(),
        FileEncoding::Base64 => {
            // Base64 of `limit` bytes is ~4/3 of it: refuse far larger inputs before decoding.
            if text.len() > limit / 3 * 4 + 8 {
                return Err(InputError::TooLarge { field, limit });
            }
            base64::engine::general_purpose::STANDARD
                .decode(text.as_bytes())
                .map_err(|e| InputError::BadContent {
                    message: format!("`{field}` is not valid base64: {e}"),
                })?
        }
    };
    if bytes.len() > limit {
        return Err(InputError::TooLarge { field, limit });
    }
    Ok(bytes)
}

/// `files/write` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct WriteFileResult {
    /// The sandbox written to.
    pub sandbox_id: SandboxId,
    /// The path as requested.
    pub path: String,
    /// Decoded bytes written.
    pub bytes_written: u64,
}

impl ReadFileResult {
    /// Encodes raw file bytes as requested; `None` when `utf8` was asked for and the bytes are
    /// not UTF-8 (the caller answers `file_not_utf8`).
    pub fn encode(
        sandbox_id: SandboxId,
        path: String,
        bytes: Vec<u8>,
        encoding: FileEncoding,
    ) -> Option<Self> {
        let content = match encoding {
            FileEncoding::Utf8 => String::from_utf8(bytes).ok()?,
            FileEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
        };
        Some(Self {
            sandbox_id,
            path,
            content,
            encoding,
        })
    }
}
