//! The front door's failures, answered the way E2B's SDKs read them: the control API as
//! `{"code": <status>, "message"}` with E2B's statuses, envd as Connect errors (a code name,
//! and for unary calls its HTTP status; a stream carries it in its end message).

use corral_errors::ErrorCode;
use corral_service::error::ServiceError;
use snafu::Snafu;

use crate::connect_code::ConnectCode;
use crate::wire::ApiError;

/// What went wrong at the E2B door.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum E2bError {
    /// No or a wrong API key / access token.
    #[snafu(display("{message}"))]
    Unauthenticated {
        /// Why.
        message: String,
    },
    /// Unknown sandbox, process or path.
    #[snafu(display("{message}"))]
    NotFound {
        /// What was not found.
        message: String,
    },
    /// A malformed or out-of-range request.
    #[snafu(display("{message}"))]
    InvalidArgument {
        /// Why.
        message: String,
    },
    /// Something E2B offers that Corral does not (or not on this provider).
    #[snafu(display("{message}"))]
    Unsupported {
        /// What.
        message: String,
    },
    /// The sandbox is not in the state the call needs (a pause of a paused sandbox, a
    /// legacy resume of a running one): E2B's 409.
    #[snafu(display("{message}"))]
    Conflict {
        /// Why.
        message: String,
    },
    /// The operation cannot be done in the current state (a closed stdin).
    #[snafu(display("{message}"))]
    FailedPrecondition {
        /// Why.
        message: String,
    },
    /// A use case failed.
    #[snafu(display("{source}"))]
    Service {
        /// The failure, with its v3 code.
        source: ServiceError,
    },
    /// A filesystem operation failed in the sandbox.
    #[snafu(display("{message}"))]
    Fs {
        /// The Connect code envd would send.
        code: &'static str,
        /// What happened.
        message: String,
    },
}

impl From<ServiceError> for E2bError {
    fn from(source: ServiceError) -> Self {
        E2bError::Service { source }
    }
}

impl E2bError {
    /// Shorthand for [`E2bError::InvalidArgument`].
    pub fn invalid(message: impl Into<String>) -> Self {
        E2bError::InvalidArgument {
            message: message.into(),
        }
    }

    /// Shorthand for [`E2bError::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        E2bError::NotFound {
            message: message.into(),
        }
    }

    /// The control API's status: E2B's own (400, 401, 404, 409, 429, 500, 502, 503).
    pub fn http_status(&self) -> u16 {
        match self {
            E2bError::Unauthenticated { .. } => 401,
            E2bError::NotFound { .. } => 404,
            E2bError::Conflict { .. } => 409,
            E2bError::InvalidArgument { .. }
            | E2bError::Unsupported { .. }
            | E2bError::FailedPrecondition { .. } => 400,
            E2bError::Fs { code, .. } => connect_status(code),
            E2bError::Service { source } => match source.code() {
                ErrorCode::InvalidSandboxId
                | ErrorCode::SandboxNotFound
                | ErrorCode::SnapshotNotFound => 404,
                // A paused sandbox: E2B's proxy answers 409.
                ErrorCode::SandboxStopped => 409,
                // E2B answers what it cannot do with a 400; 422/403 are Corral's spellings.
                ErrorCode::ProviderInvalidRequest
                | ErrorCode::ProviderOperationUnavailable
                | ErrorCode::CapabilityUnsupported
                | ErrorCode::ProviderProfileNotFound
                | ErrorCode::FileOperationFailed
                | ErrorCode::FileNotUtf8
                | ErrorCode::IdempotencyConflict => 400,
                code => code.http_status(),
            },
        }
    }

    /// The Connect code for envd's calls.
    pub fn connect_code(&self) -> &'static str {
        match self {
            E2bError::Unauthenticated { .. } => "unauthenticated",
            E2bError::NotFound { .. } => "not_found",
            E2bError::InvalidArgument { .. } => "invalid_argument",
            E2bError::Unsupported { .. } => "unimplemented",
            E2bError::FailedPrecondition { .. } | E2bError::Conflict { .. } => {
                "failed_precondition"
            }
            E2bError::Fs { code, .. } => code,
            E2bError::Service { source } => match source.code() {
                ErrorCode::InvalidRequest
                | ErrorCode::InvalidFileContent
                | ErrorCode::InvalidIdempotencyKey
                | ErrorCode::ProviderInvalidRequest => "invalid_argument",
                ErrorCode::InvalidSandboxId
                | ErrorCode::SandboxNotFound
                | ErrorCode::SnapshotNotFound => "not_found",
                ErrorCode::MissingApiKey | ErrorCode::AuthenticationError => "unauthenticated",
                ErrorCode::RateLimited | ErrorCode::PayloadTooLarge => "resource_exhausted",
                ErrorCode::RequestTimeout => "deadline_exceeded",
                ErrorCode::ProviderOperationUnavailable | ErrorCode::CapabilityUnsupported => {
                    "unimplemented"
                }
                // A paused sandbox's envd cannot be reached until it is resumed.
                ErrorCode::SandboxStopped => "failed_precondition",
                ErrorCode::ProviderUnavailable
                | ErrorCode::SandboxRegistryUnavailable
                | ErrorCode::IdempotencyUnavailable
                | ErrorCode::ProviderProfilesUnavailable => "unavailable",
                ErrorCode::FileOperationFailed | ErrorCode::FileNotUtf8 => "failed_precondition",
                _ => "internal",
            },
        }
    }

    /// The status of a unary Connect error.
    pub fn connect_status(&self) -> u16 {
        connect_status(self.connect_code())
    }

    /// The status of envd's plain HTTP file routes (`GET`/`POST /files`): the Connect
    /// status, except that a body too large is HTTP's own 413 (Connect's
    /// `resource_exhausted` is a 429, which the SDKs retry, though the same body can only be
    /// refused again).
    pub fn files_status(&self) -> u16 {
        match self {
            E2bError::Service { source } if source.code() == ErrorCode::PayloadTooLarge => 413,
            _ => self.connect_status(),
        }
    }

    /// The control API's error body.
    pub fn body(&self) -> ApiError {
        ApiError {
            code: self.http_status(),
            message: self.to_string(),
        }
    }

    /// A unary Connect error body: `{"code", "message"}`.
    pub fn connect_body(&self) -> serde_json::Value {
        serde_json::json!({"code": self.connect_code(), "message": self.to_string()})
    }
}

/// Connect's HTTP status of the code named `code` ([`ConnectCode::http_status`]); an unknown
/// name is `unknown`'s 500.
pub fn connect_status(code: &str) -> u16 {
    ConnectCode::from_name(code).map_or(500, ConnectCode::http_status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_failures_answer_in_e2bs_forms() {
        let paused = E2bError::Conflict {
            message: "sandbox 'x' is already paused".into(),
        };
        assert_eq!(paused.http_status(), 409);
        assert_eq!(paused.body().code, 409);
        // A provider without stop: E2B's "not supported" (400), envd's `unimplemented`.
        let unsupported = E2bError::from(ServiceError::CapabilityUnsupported {
            message: "provider `vercel` cannot stop a sandbox".into(),
        });
        assert_eq!(unsupported.http_status(), 400);
        assert_eq!(unsupported.connect_code(), "unimplemented");
        // A command on a paused sandbox: 409, and a Connect error the SDK raises.
        let stopped = E2bError::from(ServiceError::SandboxStopped {
            message: "sandbox is stopped".into(),
        });
        assert_eq!(stopped.http_status(), 409);
        assert_eq!(stopped.connect_code(), "failed_precondition");
        assert_eq!(stopped.connect_status(), 400);
    }
}
