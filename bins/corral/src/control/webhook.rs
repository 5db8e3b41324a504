//! `POST /v1/webhooks/email`: the email service's delivery events (bounces, complaints),
//! signed as Standard Webhooks. Outside the 36 operations: no session, the signature is the
//! authentication. A server without `[control] email_webhook_secret` refuses every event
//! with `invalid_email_webhook` (the route stays, as the document says it exists).

use actix_web::{HttpRequest, post, web};
use corral_control::ControlError;
use corral_errors::ErrorCode;
use futures::StreamExt as _;

use super::{Failure, Reply, no_content, run};
use crate::http::AppState;
use crate::routes::errors;

/// Largest event accepted; delivery events are a few hundred bytes.
const MAX_EVENT_BYTES: usize = 64 * 1024;

errors!(WebhookErrors: &[
    ErrorCode::InvalidEmailWebhook,
    ErrorCode::PayloadTooLarge,
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
    mut payload: web::Payload,
    state: web::Data<AppState>,
) -> Reply {
    let fail = |e| Failure::new(&req, e);
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
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| fail(invalid(format!("cannot read the body: {e}"))))?;
        if body.len() + chunk.len() > MAX_EVENT_BYTES {
            return Err(fail(ControlError::Service {
                source: corral_service::error::ServiceError::PayloadTooLarge {
                    message: format!("an email event is at most {MAX_EVENT_BYTES} bytes"),
                },
            }));
        }
        body.extend_from_slice(&chunk);
    }
    let headers = corral_control::EmailWebhookHeaders {
        id,
        timestamp,
        signature,
    };
    run(&req, state.control.receive_email_event(&headers, &body)).await?;
    Ok(no_content())
}
