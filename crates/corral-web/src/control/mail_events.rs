//! `POST /v1/webhooks/email`: the email service's delivery events (bounces, complaints),
//! signed as Standard Webhooks. Outside the 41 operations: no session, the signature is the
//! authentication. A server without `[control] email_webhook_secret` refuses every event
//! with `invalid_email_webhook` (the route stays, as the document says it exists).

use actix_web::{HttpRequest, post, web};
use corral_control::ControlError;
use corral_errors::ErrorCode;

use crate::doc::errors;
use crate::reply::{ControlFailure, ControlReply, no_content};
use crate::state::AppState;

/// Largest event accepted; delivery events are a few hundred bytes.
const MAX_EVENT_BYTES: usize = 64 * 1024;

errors!(WebhookErrors: &[
    ErrorCode::InvalidEmailWebhook,
    ErrorCode::PayloadTooLarge,
    ErrorCode::RequestTimeout,
    ErrorCode::SandboxRegistryUnavailable,
    ErrorCode::InternalError,
]);

fn invalid(message: impl Into<String>) -> ControlError {
    ControlError::InvalidEmailWebhook {
        message: message.into(),
    }
}

/// Receive an email delivery event.
///
/// Headers `webhook-id`, `webhook-timestamp` and `webhook-signature`
/// (`v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, several separated by spaces);
/// a timestamp more than 5 minutes away, an id seen before, a bad signature or a malformed
/// body is `invalid_email_webhook` and nothing is recorded. Body:
/// `{"type": "email.bounced" | "email.complained", "data": {"email": "…"}}`; the address
/// receives no further mail.
#[utoipa::path(
    operation_id = "receiveEmailEvent", tag = "webhooks", security(()),
    params(
        ("webhook-id" = String, Header, description = "The event's unique id."),
        ("webhook-timestamp" = i64, Header, description = "Seconds since the Unix epoch."),
        ("webhook-signature" = String, Header, description = "`v1,<base64 signature>`, space-separated."),
    ),
    request_body(content = serde_json::Value, content_type = "application/json",
        description = "At most 64 KiB."),
    responses((status = 204, description = "Recorded."), WebhookErrors))]
#[post("/v1/webhooks/email")]
pub(crate) async fn email_webhook(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ControlReply {
    let fail = |e| ControlFailure::new(&req, e);
    // An absent header is passed as empty: the use case refuses it with the rest.
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (id, timestamp, signature) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    );
    // Unauthenticated until the signature is checked, so the body gets the edge's short
    // deadline: a trickled body cannot hold the connection for long.
    let mut payload = payload.into_inner();
    let deadline = crate::edge::unauthenticated_body(&req);
    let body = crate::extract::read_body(&req, &mut payload, MAX_EVENT_BYTES, deadline)
        .await
        .map_err(|source| match source {
            corral_service::error::ServiceError::InvalidRequest { message, .. } => {
                fail(invalid(message))
            }
            source => fail(ControlError::Service { source }),
        })?;
    let headers = corral_control::EmailWebhookHeaders {
        id,
        timestamp,
        signature,
    };
    state
        .control
        .receive_email_event(&headers, &body)
        .await
        .map_err(fail)?;
    Ok(no_content())
}
