//! The email webhook (`POST /v1/webhooks/email`): delivery events from the email service,
//! signed as Standard Webhooks does.
//!
//! - Headers `webhook-id`, `webhook-timestamp` (Unix seconds) and `webhook-signature` (one or
//!   more space-separated `v1,<base64 HMAC-SHA256>` entries, so a secret can be rotated).
//! - The MAC is over `<id>.<timestamp>.<body>`, keyed by the secret `whsec_<base64>`
//!   ([`ControlConfig::email_webhook_secret`]).
//! - The timestamp must be within [`EMAIL_WEBHOOK_TOLERANCE`] of now; each id is accepted once.
//! - The body is JSON: `{"type": "email.bounced" | "email.complained", "data": {"email":
//!   "<address>"}}`. Those two suppress the address; other types are accepted and ignored
//!   (services send many kinds of events).
//!
//! Anything else — no secret configured, bad signature, stale timestamp, replayed id,
//! malformed payload — is `invalid_email_webhook`, and nothing is recorded.
//!
//! [`ControlConfig::email_webhook_secret`]: crate::ControlConfig::email_webhook_secret

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit as _, Mac as _};
use secrecy::ExposeSecret as _;
use serde::Deserialize;
use sha2::Sha256;

use crate::Control;
use crate::error::{ControlError, Result};
use crate::identity::normalize_email;

/// How far a webhook's timestamp may be from now, either way.
pub const EMAIL_WEBHOOK_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// The three Standard Webhooks headers, as received (absent ones as empty strings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmailWebhookHeaders {
    /// `webhook-id`.
    pub id: String,
    /// `webhook-timestamp`.
    pub timestamp: String,
    /// `webhook-signature`.
    pub signature: String,
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    data: Option<EventData>,
}

#[derive(Deserialize)]
struct EventData {
    email: Option<String>,
}

fn refuse(message: &str) -> ControlError {
    ControlError::InvalidEmailWebhook {
        message: message.to_owned(),
    }
}

impl Control {
    /// Verifies and applies one email webhook delivery (see the module docs).
    pub async fn receive_email_event(
        &self,
        headers: &EmailWebhookHeaders,
        body: &[u8],
    ) -> Result<()> {
        let Some(secret) = &self.config().email_webhook_secret else {
            return Err(refuse("the email webhook is not configured"));
        };
        let key = secret
            .expose_secret()
            .strip_prefix("whsec_")
            .and_then(|b64| STANDARD.decode(b64).ok())
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                tracing::error!("the email webhook secret is not `whsec_<base64>`");
                ControlError::internal("the email webhook secret is misconfigured")
            })?;

        let id = headers.id.trim();
        if id.is_empty()
            || id.len() > 256
            || id.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(refuse("missing or malformed webhook-id"));
        }
        let timestamp: i64 = headers
            .timestamp
            .trim()
            .parse()
            .map_err(|_| refuse("missing or malformed webhook-timestamp"))?;
        let now = self.store().now().timestamp();
        let tolerance = i64::try_from(EMAIL_WEBHOOK_TOLERANCE.as_secs()).unwrap_or(i64::MAX);
        if now.abs_diff(timestamp) > tolerance.unsigned_abs() {
            return Err(refuse(
                "webhook-timestamp is outside the 5-minute tolerance",
            ));
        }
        if !signature_matches(&key, id, timestamp, body, &headers.signature) {
            return Err(refuse("webhook-signature does not match"));
        }

        let event: Event =
            serde_json::from_slice(body).map_err(|_| refuse("malformed event payload"))?;
        let suppress = match event.kind.as_str() {
            "email.bounced" | "email.complained" => {
                let email = event
                    .data
                    .and_then(|d| d.email)
                    .ok_or_else(|| refuse("the event has no data.email"))?;
                let email =
                    normalize_email(&email).map_err(|_| refuse("data.email is not an email"))?;
                let reason = if event.kind == "email.bounced" {
                    "bounced"
                } else {
                    "complained"
                };
                Some((email, reason))
            }
            _ => None,
        };
        let fresh = self
            .store()
            .record_email_webhook(id, suppress.as_ref().map(|(e, r)| (e.as_str(), *r)))
            .await?;
        if !fresh {
            return Err(refuse("this webhook-id was already received"));
        }
        if let Some((email, reason)) = suppress {
            tracing::info!(email = %email, reason, "email address suppressed");
        }
        Ok(())
    }
}

/// Whether any `v1,<base64>` entry of `header` is the MAC of `<id>.<timestamp>.<body>`
/// (compared in constant time by the MAC's own verification).
fn signature_matches(key: &[u8], id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    header.split_whitespace().any(|entry| {
        let Some(sig) = entry.strip_prefix("v1,") else {
            return false;
        };
        let Ok(sig) = STANDARD.decode(sig) else {
            return false;
        };
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
            return false;
        };
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.verify_slice(&sig).is_ok()
    })
}

/// Signs a webhook as the email service would (for tests and for operators checking their
/// set-up): the `webhook-signature` value for `id`, `timestamp` and `body` under `secret`
/// (`whsec_<base64>`), or `None` for a malformed secret.
pub fn sign_email_webhook(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix("whsec_")?).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}
