//! envd's file routes over Corral's file use cases: `GET /files` (download) and
//! `POST /files` (multipart or octet-stream upload), plus the `filesystem.Filesystem`
//! calls the SDKs' file functions use, each one shell command in the sandbox ([`crate::fs`]
//! builds and reads them), so they work on every provider that runs commands.

use base64::Engine as _;
use serde_json::{Value, json};

use corral_domain::limits::{MAX_READ_BYTES, MAX_WRITE_BYTES};
use corral_domain::{FileEncoding, ReadFileInput, RunCommandInput, WriteFileInput};
use corral_errors::ErrorCode;
use corral_service::InlineAccess;

use crate::fs::{self, FsError};
use crate::{E2bError, FrontDoor, SandboxCaller};

/// `GET /files` and `POST /files`'s query.
#[derive(Debug, Clone, Default)]
pub struct FilesQuery {
    /// The path (relative: under the user's home).
    pub path: Option<String>,
    /// The user (`user` or `root`: Corral runs every command as the provider's user).
    pub username: Option<String>,
}

/// `body` inflated from gzip, refused beyond `max` bytes (a small body must not become an
/// unbounded one).
pub fn gunzip(body: &[u8], max: usize) -> Result<Vec<u8>, E2bError> {
    use std::io::Read as _;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| E2bError::invalid(format!("the gzip body could not be read: {e}")))?;
    if out.len() > max {
        return Err(E2bError::Service {
            source: corral_service::error::ServiceError::PayloadTooLarge {
                message: format!("the upload inflates past {max} bytes"),
            },
        });
    }
    Ok(out)
}

/// `bytes` compressed with gzip (`GET /files` with `Accept-Encoding: gzip`).
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default()
}

fn fs_error(e: FsError) -> E2bError {
    E2bError::Fs {
        code: e.code.as_str(),
        message: e.message,
    }
}

fn resolve(path: Option<&str>) -> Result<String, E2bError> {
    let path = path
        .filter(|p| !p.is_empty())
        .ok_or_else(|| E2bError::invalid("the path parameter is missing"))?;
    fs::resolve(path).map_err(fs_error)
}

impl FrontDoor {
    /// Runs one script in the sandbox: (stdout, stderr, exit code).
    async fn sh(
        &self,
        sc: &SandboxCaller,
        script: String,
    ) -> Result<(String, String, i32), E2bError> {
        let r = self
            .service()
            .exec(
                &sc.caller,
                InlineAccess::default(),
                &sc.id(),
                RunCommandInput {
                    command: script,
                    cwd: None,
                    env: None,
                },
            )
            .await?;
        Ok((r.stdout, r.stderr, r.exit_code))
    }

    /// Whether `path` exists in the sandbox.
    async fn exists(&self, sc: &SandboxCaller, path: &str) -> Result<bool, E2bError> {
        let (_, _, code) = self
            .sh(sc, format!("test -e {}", fs::shell_quote(path)))
            .await?;
        Ok(code == 0)
    }

    /// `GET /files`: the file's bytes.
    pub async fn download(&self, sc: &SandboxCaller, q: &FilesQuery) -> Result<Vec<u8>, E2bError> {
        let path = resolve(q.path.as_deref())?;
        let read = self
            .service()
            .read_file(
                &sc.caller,
                InlineAccess::default(),
                &sc.id(),
                ReadFileInput {
                    path: path.clone(),
                    encoding: Some(FileEncoding::Base64),
                },
            )
            .await;
        match read {
            Ok(r) => base64::engine::general_purpose::STANDARD
                .decode(r.content.as_bytes())
                .map_err(|_| E2bError::invalid("the file's content could not be decoded")),
            Err(e) if e.code() == ErrorCode::FileOperationFailed => {
                if self.exists(sc, &path).await? {
                    Err(E2bError::Fs {
                        code: "invalid_argument",
                        message: format!(
                            "cannot read '{path}' (a directory, or larger than {MAX_READ_BYTES} bytes?): {e}"
                        ),
                    })
                } else {
                    Err(E2bError::not_found(format!("path '{path}' does not exist")))
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// `POST /files`: writes each file (parents made as needed, as envd does) and answers
    /// their entries.
    pub async fn upload(
        &self,
        sc: &SandboxCaller,
        q: &FilesQuery,
        content_type: Option<&str>,
        content_encoding: Option<&str>,
        body: &[u8],
    ) -> Result<Value, E2bError> {
        let inflated;
        let body = match content_encoding.map(|e| e.trim().to_ascii_lowercase()) {
            None => body,
            Some(e) if e.is_empty() || e == "identity" => body,
            Some(e) if e == "gzip" => {
                inflated = gunzip(body, MAX_WRITE_BYTES + 64 * 1024)?;
                &inflated[..]
            }
            Some(e) => {
                return Err(E2bError::invalid(format!(
                    "Content-Encoding {} is not supported (gzip is)",
                    e.chars().take(40).collect::<String>()
                )));
            }
        };
        let content_type = content_type.unwrap_or("application/octet-stream");
        let files: Vec<(String, Vec<u8>)> = if content_type
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("multipart/form-data")
        {
            let parts = fs::parse_multipart(content_type, body).map_err(fs_error)?;
            let mut files = Vec::with_capacity(parts.len());
            for part in parts {
                // envd: the query's path wins for one file; otherwise each part names its own.
                let path = q
                    .path
                    .as_deref()
                    .filter(|p| !p.is_empty())
                    .or(part.filename.as_deref())
                    .map(str::to_owned);
                files.push((resolve(path.as_deref())?, part.data.to_vec()));
            }
            files
        } else {
            vec![(resolve(q.path.as_deref())?, body.to_vec())]
        };
        if files.is_empty() {
            return Err(E2bError::invalid("the upload holds no file"));
        }
        let mut entries = Vec::with_capacity(files.len());
        for (path, data) in files {
            if data.len() > MAX_WRITE_BYTES {
                return Err(E2bError::Service {
                    source: corral_service::error::ServiceError::PayloadTooLarge {
                        message: format!(
                            "a file of {} bytes exceeds the largest write, {MAX_WRITE_BYTES} bytes",
                            data.len()
                        ),
                    },
                });
            }
            self.write_one(sc, &path, &data).await?;
            entries.push(fs::write_info(&path));
        }
        Ok(Value::Array(entries))
    }

    async fn write_one(&self, sc: &SandboxCaller, path: &str, data: &[u8]) -> Result<(), E2bError> {
        if let Some((parent, _)) = path.rsplit_once('/').filter(|(p, _)| !p.is_empty()) {
            let (_, stderr, code) = self
                .sh(sc, format!("mkdir -p {}", fs::shell_quote(parent)))
                .await?;
            if code != 0 {
                return Err(E2bError::Fs {
                    code: "invalid_argument",
                    message: format!("cannot make '{parent}': {}", stderr.trim()),
                });
            }
        }
        let input = WriteFileInput {
            path: path.to_owned(),
            content: base64::engine::general_purpose::STANDARD.encode(data),
            encoding: Some(FileEncoding::Base64),
        };
        self.service()
            .write_file(&sc.caller, InlineAccess::default(), &sc.id(), input)
            .await?;
        Ok(())
    }

    /// `filesystem.Filesystem/Stat`.
    pub async fn stat(&self, sc: &SandboxCaller, body: &[u8]) -> Result<Value, E2bError> {
        let req: fs::StatRequest = crate::process::unary(body)?;
        let req = fs::StatRequest {
            path: fs::resolve(&req.path).map_err(fs_error)?,
        };
        let (out, err, code) = self
            .sh(sc, fs::stat_script(&req).map_err(fs_error)?)
            .await?;
        let resp = fs::parse_stat(&out, &err, code).map_err(fs_error)?;
        Ok(json!(resp))
    }

    /// `filesystem.Filesystem/ListDir`.
    pub async fn list_dir(&self, sc: &SandboxCaller, body: &[u8]) -> Result<Value, E2bError> {
        let mut req: fs::ListDirRequest = crate::process::unary(body)?;
        req.path = fs::resolve(&req.path).map_err(fs_error)?;
        let (out, err, code) = self
            .sh(sc, fs::list_dir_script(&req).map_err(fs_error)?)
            .await?;
        let resp = fs::parse_list_dir(&out, &err, code).map_err(fs_error)?;
        Ok(json!(resp))
    }

    /// `filesystem.Filesystem/MakeDir`.
    pub async fn make_dir(&self, sc: &SandboxCaller, body: &[u8]) -> Result<Value, E2bError> {
        let mut req: fs::MakeDirRequest = crate::process::unary(body)?;
        req.path = fs::resolve(&req.path).map_err(fs_error)?;
        let (out, err, code) = self
            .sh(sc, fs::make_dir_script(&req).map_err(fs_error)?)
            .await?;
        let resp = fs::parse_make_dir(&out, &err, code).map_err(fs_error)?;
        Ok(json!(resp))
    }

    /// `filesystem.Filesystem/Remove`.
    pub async fn remove(&self, sc: &SandboxCaller, body: &[u8]) -> Result<Value, E2bError> {
        let mut req: fs::RemoveRequest = crate::process::unary(body)?;
        req.path = fs::resolve(&req.path).map_err(fs_error)?;
        let (out, err, code) = self
            .sh(sc, fs::remove_script(&req).map_err(fs_error)?)
            .await?;
        fs::parse_remove(&out, &err, code).map_err(fs_error)?;
        Ok(json!({}))
    }

    /// `filesystem.Filesystem/Move`.
    pub async fn move_entry(&self, sc: &SandboxCaller, body: &[u8]) -> Result<Value, E2bError> {
        let mut req: fs::MoveRequest = crate::process::unary(body)?;
        req.source = fs::resolve(&req.source).map_err(fs_error)?;
        req.destination = fs::resolve(&req.destination).map_err(fs_error)?;
        let (out, err, code) = self
            .sh(sc, fs::move_script(&req).map_err(fs_error)?)
            .await?;
        let resp = fs::parse_move(&out, &err, code).map_err(fs_error)?;
        Ok(json!(resp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_round_trips_and_a_bomb_is_refused() {
        let data = b"hello, gzip ".repeat(100);
        assert_eq!(gunzip(&gzip(&data), 10_000).unwrap(), data);
        let bomb = gzip(&vec![0u8; 100_000]);
        assert!(bomb.len() < 1_000);
        let e = gunzip(&bomb, 10_000).unwrap_err();
        assert_eq!(e.http_status(), 413, "{e}");
        assert_eq!(gunzip(b"not gzip", 100).unwrap_err().http_status(), 400);
    }
}
