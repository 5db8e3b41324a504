//! The client's one error type.

use std::time::Duration;

use corral_errors::{ErrorCode, ErrorEnvelope};
use snafu::Snafu;

/// Why a call failed.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
#[non_exhaustive]
pub enum Error {
    /// The server answered with an error of the v3 set (after the retries it allowed).
    #[snafu(display("{code}: {message} (request {})", request_id.as_deref().unwrap_or("unknown")))]
    Api {
        /// The stable code.
        code: ErrorCode,
        /// The server's explanation (for people, not for parsing).
        message: String,
        /// The request id, to quote to the operator.
        request_id: Option<String>,
        /// Whether the same request may succeed later.
        retryable: bool,
        /// How long the server asked to wait (`Retry-After`).
        retry_after: Option<Duration>,
        /// The HTTP status.
        status: u16,
    },
    /// A create's outcome could not be confirmed: reconcile by `operation_id` (retrying with
    /// the same `Idempotency-Key` does so).
    #[snafu(display("the create's outcome is unknown (operation {operation_id}): {message}"))]
    CreateOutcomeUnknown {
        /// The operation to reconcile by.
        operation_id: String,
        /// The server's explanation.
        message: String,
        /// The request id.
        request_id: Option<String>,
    },
    /// An earlier attempt with this `Idempotency-Key` has an outcome the server cannot
    /// determine yet.
    #[snafu(display("the idempotent operation's outcome is unknown: {message}"))]
    IdempotencyOutcomeUnknown {
        /// The operation to reconcile by, when known.
        operation_id: Option<String>,
        /// The server's explanation.
        message: String,
        /// The request id.
        request_id: Option<String>,
    },
    /// The server could not be reached, or the connection broke before an answer.
    #[snafu(display("cannot reach the server: {message}"))]
    Transport {
        /// What failed.
        message: String,
    },
    /// The answer is not what the API documents.
    #[snafu(display("{message}"))]
    Decode {
        /// What was wrong.
        message: String,
    },
    /// The base URL is unusable.
    #[snafu(display("invalid server URL: {message}"))]
    InvalidUrl {
        /// Why.
        message: String,
    },
}

impl Error {
    /// The v3 code, for errors the server answered.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api { code, .. } => Some(*code),
            Error::CreateOutcomeUnknown { .. } => Some(ErrorCode::SandboxCreateOutcomeUnknown),
            Error::IdempotencyOutcomeUnknown { .. } => Some(ErrorCode::IdempotencyOutcomeUnknown),
            _ => None,
        }
    }

    /// The request id the server gave the failed request, if it answered.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Error::Api { request_id, .. }
            | Error::CreateOutcomeUnknown { request_id, .. }
            | Error::IdempotencyOutcomeUnknown { request_id, .. } => request_id.as_deref(),
            _ => None,
        }
    }

    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Api { retryable, .. } => *retryable,
            Error::Transport { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn transport(e: &reqwest::Error) -> Self {
        // reqwest's Display names the URL, never the Authorization header.
        Error::Transport {
            message: e.to_string(),
        }
    }

    /// The error a server's failure answer means.
    pub(crate) fn from_answer(
        status: u16,
        request_id: Option<String>,
        retry_after: Option<Duration>,
        body: &[u8],
    ) -> Self {
        let Ok(env) = serde_json::from_slice::<ErrorEnvelope>(body) else {
            let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
            return Error::Api {
                code: fallback_code(status),
                message: format!("HTTP {status} without Corral's error envelope: {text}"),
                request_id,
                retryable: matches!(status, 429 | 502..=504),
                retry_after,
                status,
            };
        };
        let e = env.error;
        let request_id = Some(e.request_id).filter(|r| !r.is_empty()).or(request_id);
        match e.code {
            ErrorCode::SandboxCreateOutcomeUnknown => Error::CreateOutcomeUnknown {
                operation_id: e.operation_id.unwrap_or_default(),
                message: e.message,
                request_id,
            },
            ErrorCode::IdempotencyOutcomeUnknown => Error::IdempotencyOutcomeUnknown {
                operation_id: e.operation_id,
                message: e.message,
                request_id,
            },
            code => Error::Api {
                code,
                message: e.message,
                request_id,
                retryable: e.retryable,
                retry_after,
                status,
            },
        }
    }
}

/// The nearest code for an answer that is not Corral's (a proxy's 502, say).
fn fallback_code(status: u16) -> ErrorCode {
    match status {
        401 => ErrorCode::AuthenticationError,
        404 => ErrorCode::SandboxNotFound,
        413 => ErrorCode::PayloadTooLarge,
        429 => ErrorCode::RateLimited,
        503 => ErrorCode::ProviderUnavailable,
        504 => ErrorCode::RequestTimeout,
        500..=599 => ErrorCode::InternalError,
        _ => ErrorCode::InvalidRequest,
    }
}
