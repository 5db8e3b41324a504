//! A filesystem operation's failure, in the Connect code envd would send.

use std::fmt;

pub use crate::connect_code::ConnectCode;

/// A filesystem operation's failure: the Connect code the SDK turns into its exception
/// (`not_found` → `NotFoundException`/`FileNotFoundException`, `invalid_argument` →
/// `InvalidArgumentException`, …) and a message for the caller.
///
/// A plain struct rather than a snafu enum: its two fields are the wire's own shape, and every
/// producer in this module picks the code explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsError {
    /// The Connect code.
    pub code: ConnectCode,
    /// What went wrong, for the caller.
    pub message: String,
}

impl FsError {
    /// A failure with `code` and `message`.
    pub fn new(code: ConnectCode, message: impl Into<String>) -> Self {
        FsError {
            code,
            message: message.into(),
        }
    }

    pub(super) fn invalid(message: impl Into<String>) -> Self {
        FsError::new(ConnectCode::InvalidArgument, message)
    }

    pub(super) fn internal(message: impl Into<String>) -> Self {
        FsError::new(ConnectCode::Internal, message)
    }

    /// The HTTP status of this failure ([`ConnectCode::http_status`]).
    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }

    /// Connect's unary error body: `{"code": "not_found", "message": "…"}`.
    pub fn connect_body(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.code.as_str(), "message": self.message })
    }

    /// envd's `/files` error body: `{"code": 404, "message": "…"}` (the SDK reads `message`
    /// and maps the HTTP status).
    pub fn files_body(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.http_status(), "message": self.message })
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for FsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_errors_answer_in_connects_and_envds_forms() {
        let e = FsError::new(ConnectCode::NotFound, "file not found: /x");
        assert_eq!(e.to_string(), "not_found: file not found: /x");
        assert_eq!(
            e.connect_body(),
            serde_json::json!({"code": "not_found", "message": "file not found: /x"})
        );
        assert_eq!(
            e.files_body(),
            serde_json::json!({"code": 404, "message": "file not found: /x"})
        );
    }
}
