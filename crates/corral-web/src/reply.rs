//! The one reply kernel of every handler, sandbox and control plane alike: request ids, the
//! JSON error envelope, and a use case's failure rendered with its one v3 code (a panic is the
//! request middleware's, [`crate::middleware`]). It imports nothing else from the crate.
//!
//! A failure carries the use case's own error of meanings ([`ServiceError`] or
//! [`ControlError`], both behind [`UseCaseError`]); only here does a v3 code become an HTTP
//! status.

use std::str::FromStr;

use actix_web::body::BoxBody;
use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpMessage as _, HttpRequest, HttpResponse};
use corral_control::ControlError;
use corral_errors::{ErrorCode, ErrorEnvelope};
use corral_service::error::ServiceError;

/// The request id of one request: `req_<ulid>`.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The v3 code a response carried, for metrics and logs, and the mark that a failure response
/// is already rendered, so the envelope middleware leaves it alone (the console marks its
/// HTML error pages with it).
#[derive(Debug, Clone, Copy)]
pub struct ResponseCode(pub ErrorCode);

/// The id of `req`, as the request middleware assigned it.
pub(crate) fn request_id(req: &HttpRequest) -> String {
    req.extensions()
        .get::<RequestId>()
        .map_or_else(|| "req_unknown".to_owned(), |r| r.0.clone())
}

/// The envelope as a response with `status`, `Retry-After` when given, and the
/// [`ResponseCode`] mark.
pub(crate) fn envelope_response(
    code: ErrorCode,
    status: u16,
    body: ErrorEnvelope,
    retry_after: Option<u64>,
) -> HttpResponse {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = HttpResponse::build(status);
    if let Some(secs) = retry_after {
        resp.insert_header((header::RETRY_AFTER, secs.to_string()));
    }
    let mut resp = resp.json(body);
    resp.extensions_mut().insert(ResponseCode(code));
    resp
}

/// A use case's error of meanings, as the kernel renders it: both the sandbox use cases'
/// [`ServiceError`] and the control plane's [`ControlError`] map to exactly one v3 code.
pub trait UseCaseError: std::fmt::Display + std::fmt::Debug {
    /// The one v3 code.
    fn code(&self) -> ErrorCode;
    /// The envelope for request `request_id`.
    fn envelope(&self, request_id: &str) -> ErrorEnvelope;
    /// The `Retry-After` seconds, when the code carries one.
    fn retry_after_seconds(&self) -> Option<u64>;
}

impl UseCaseError for ServiceError {
    fn code(&self) -> ErrorCode {
        ServiceError::code(self)
    }

    fn envelope(&self, request_id: &str) -> ErrorEnvelope {
        ServiceError::envelope(self, request_id)
    }

    fn retry_after_seconds(&self) -> Option<u64> {
        ServiceError::retry_after_seconds(self)
    }
}

impl UseCaseError for ControlError {
    fn code(&self) -> ErrorCode {
        ControlError::code(self)
    }

    fn envelope(&self, request_id: &str) -> ErrorEnvelope {
        ControlError::envelope(self, request_id)
    }

    fn retry_after_seconds(&self) -> Option<u64> {
        ControlError::retry_after_seconds(self)
    }
}

/// A handler failure; renders as the envelope with the request's id.
#[derive(Debug)]
pub struct Failure<E = ServiceError> {
    err: E,
    request_id: String,
}

/// A control-plane handler's failure.
pub(crate) type ControlFailure = Failure<ControlError>;

impl<E> Failure<E> {
    /// `err` for `req`.
    pub(crate) fn new(req: &HttpRequest, err: E) -> Self {
        Self {
            err,
            request_id: request_id(req),
        }
    }
}

impl<E: std::fmt::Display> std::fmt::Display for Failure<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.err)
    }
}

impl<E: UseCaseError> actix_web::ResponseError for Failure<E> {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.err.code().http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse<BoxBody> {
        let code = self.err.code();
        envelope_response(
            code,
            code.http_status(),
            self.err.envelope(&self.request_id),
            self.err.retry_after_seconds(),
        )
    }
}

/// What a handler answers.
pub(crate) type Reply<E = ServiceError> = Result<HttpResponse, Failure<E>>;

/// A control-plane handler's answer.
pub(crate) type ControlReply = Reply<ControlError>;

/// Turns a use case's error into the failure of `req`.
pub(crate) fn fail<E>(req: &HttpRequest) -> impl Fn(E) -> Failure<E> + '_ {
    move |err| Failure::new(req, err)
}

/// `value` as JSON with `status`.
pub(crate) fn json_ok<T: serde::Serialize>(status: StatusCode, value: &T) -> HttpResponse {
    HttpResponse::build(status).json(value)
}

/// `resp`, marked never to be cached: answers that carry a secret or a session's token.
pub(crate) fn no_store(mut resp: HttpResponse) -> HttpResponse {
    resp.headers_mut().insert(
        actix_web::http::header::CACHE_CONTROL,
        actix_web::http::header::HeaderValue::from_static("no-store"),
    );
    resp
}

/// `204 No Content`.
pub(crate) fn no_content() -> HttpResponse {
    HttpResponse::NoContent().finish()
}

/// A path segment parsed as an id; one that does not parse is "no such `<kind>`", the same
/// answer as an id that names nothing the caller can see.
pub(crate) fn parse_id<T: FromStr>(
    req: &HttpRequest,
    raw: &str,
    kind: &str,
) -> Result<T, ControlFailure> {
    raw.parse()
        .map_err(|_| Failure::new(req, ControlError::invalid(format!("no such {kind}"))))
}
