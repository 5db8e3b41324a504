//! The control plane over HTTP: the 36 cookie-authenticated JSON operations under
//! `/v1/control` (tag `control-plane`, security scheme `session`) and the email webhook
//! `POST /v1/webhooks/email` (tag `webhooks`). As for the sandbox API, each handler carries its
//! method, path and `#[utoipa::path]`, and [`control_api`] registers them once, so the router
//! and the OpenAPI document come from the same list.
//!
//! Handlers only parse and render: every rule (membership, roles, legal gating, versions) is
//! a use case of `corral-control`, whose [`ControlError`] maps to exactly one v3 code. The
//! session, CSRF and origin checks are in [`session`], shared with the console.

mod accounts;
mod identity;
mod projects;
pub mod session;
mod webhook;

use std::str::FromStr;

use actix_web::body::BoxBody;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use corral_control::ControlError;
use corral_errors::ErrorCode;
use futures::FutureExt as _;

use crate::http::{envelope_response, request_id};

/// The OpenAPI tag of the 36 operations.
pub const TAG: &str = "control-plane";
/// The OpenAPI security scheme of the session cookie.
pub const SESSION_SCHEME: &str = "session";

/// Failures every control-plane operation can answer with.
pub(crate) const COMMON: &[ErrorCode] = &[
    ErrorCode::InvalidRequest,
    ErrorCode::AuthenticationError,
    ErrorCode::RateLimited,
    ErrorCode::SandboxRegistryUnavailable,
    ErrorCode::InternalError,
];

/// Failures every mutation after sign-in can answer with (legal gating).
pub(crate) const MUTATION: &[ErrorCode] = &[
    ErrorCode::LegalAcceptanceRequired,
    ErrorCode::LegalUnavailable,
];

/// A control-plane handler failure; renders as the error envelope with the request's id.
#[derive(Debug)]
pub struct Failure {
    err: ControlError,
    request_id: String,
}

impl Failure {
    /// `err` for `req`.
    pub fn new(req: &HttpRequest, err: ControlError) -> Self {
        Self {
            err,
            request_id: request_id(req),
        }
    }

    /// The failure's use-case error.
    pub fn error(&self) -> &ControlError {
        &self.err
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.err)
    }
}

impl actix_web::ResponseError for Failure {
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

pub(crate) type Reply = Result<HttpResponse, Failure>;

/// Runs a use case; a panic in it answers `internal_error` instead of dropping the connection.
pub(crate) async fn run<T>(
    req: &HttpRequest,
    fut: impl Future<Output = Result<T, ControlError>>,
) -> Result<T, Failure> {
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(result) => result.map_err(|e| Failure::new(req, e)),
        Err(_panic) => {
            tracing::error!("a control-plane handler panicked");
            Err(Failure::new(
                req,
                ControlError::internal("the request handler failed"),
            ))
        }
    }
}

/// A path segment parsed as an id; one that does not parse is "no such <kind>", the same
/// answer as an id that names nothing the caller can see.
pub(crate) fn parse_id<T: FromStr>(req: &HttpRequest, raw: &str, kind: &str) -> Result<T, Failure> {
    raw.parse()
        .map_err(|_| Failure::new(req, ControlError::invalid(format!("no such {kind}"))))
}

/// `204 No Content`.
pub(crate) fn no_content() -> HttpResponse {
    HttpResponse::NoContent().finish()
}

/// Registers the 36 control-plane operations (see docs/control-plane.md, "Operations").
pub fn control_api(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    identity::register(cfg);
    accounts::register(cfg);
    projects::register(cfg);
}

/// Registers `POST /v1/webhooks/email`.
pub fn webhook_api(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(webhook::email_webhook);
}
