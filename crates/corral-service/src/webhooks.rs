//! Webhooks: endpoints a project registers for its lifecycle events, and the dispatcher that
//! delivers the outbox the registry fills in each event's own transaction.
//!
//! Deliveries are signed as Standard Webhooks does: `webhook-id` (the same for every attempt
//! of one delivery, so receivers deduplicate), `webhook-timestamp` (Unix seconds) and
//! `webhook-signature` (`v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, one per secret that
//! signs now: two during a rotation's overlap). The destination is guarded like a bridge URL
//! (no loopback, private or metadata addresses unless the operator allows the host), checked
//! when the endpoint is made and again, with the connection pinned to the vetted addresses and
//! no redirects, at every attempt. A delivery is held by one replica at a time (a lease), so two
//! replicas never send it at once; after a crash it is sent again once its lease lapses —
//! at least once, never lost.
//!
//! Deliveries are fair across projects and endpoints ([`dispatch`]): each runs as its own task
//! within a replica-wide limit, an endpoint and a project only within their shares of it, and
//! an endpoint that keeps failing has its circuit opened (shared by every replica, in the
//! database): its deliveries wait, then one probe decides whether it closes or reopens.

mod dispatch;

use std::time::Duration;

use base64::Engine as _;
use corral_domain::{
    LifecycleEvent, NewWebhook, WebhookDeliveryList, WebhookList, WebhookWithSecret,
};
use corral_registry::{AttemptOutcome, DeliveryRecord, secret_bytes};
use hmac::{Hmac, KeyInit as _, Mac as _};
use secrecy::{ExposeSecret as _, SecretString};
use sha2::Sha256;

use crate::bridge::BridgeGuard;
use crate::error::{ServiceError, registry_error};
use crate::{Caller, Service};

/// Tunables of webhook delivery.
#[derive(Debug, Clone)]
pub struct WebhooksConfig {
    /// Hosts (`host` or `host:port`) exempt from the address rules (as `[bridge] allow`).
    pub allow: Vec<String>,
    /// Attempts before a delivery is given up (dead).
    pub attempts: u32,
    /// The wait after the first failed attempt; each later one doubles it (with jitter),
    /// up to [`WebhooksConfig::max_backoff`].
    pub first_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// Deadline of one attempt (connect, send, answer).
    pub timeout: Duration,
    /// How long the previous secret keeps signing after a rotation.
    pub rotation_overlap: Duration,
    /// Deliveries this replica has in flight at once, at most.
    pub concurrency: usize,
    /// Of those, to one endpoint at most (a slow endpoint holds only these).
    pub per_endpoint: usize,
    /// Of those, for one project at most (its share of [`WebhooksConfig::concurrency`]).
    pub per_project: usize,
    /// Consecutive failed attempts to an endpoint that open its circuit: its deliveries
    /// then wait instead of each being tried.
    pub circuit_failures: u32,
    /// How long a circuit stays open the first time; each reopening after a failed probe
    /// doubles it, up to [`WebhooksConfig::max_backoff`].
    pub circuit_open: Duration,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            attempts: 8,
            first_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(3600),
            timeout: Duration::from_secs(10),
            rotation_overlap: Duration::from_secs(24 * 3600),
            concurrency: 32,
            per_endpoint: 2,
            per_project: 8,
            circuit_failures: 5,
            circuit_open: Duration::from_secs(30),
        }
    }
}

/// Bytes of an endpoint's answer read, at most (the body is ignored).
const ANSWER_BYTES: usize = 4096;

/// `webhook-signature` for `body` sent as `id` at `timestamp`, one `v1,` entry per secret.
pub fn sign(id: &str, timestamp: i64, body: &[u8], secrets: &[SecretString]) -> String {
    secrets
        .iter()
        .filter_map(|secret| {
            let key = secret_bytes(secret)?;
            // HMAC takes keys of any length: `new_from_slice` cannot fail.
            let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
            mac.update(format!("{id}.{timestamp}.").as_bytes());
            mac.update(body);
            Some(format!(
                "v1,{}",
                base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
            ))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The body of a delivery: Standard Webhooks' envelope around the event.
fn envelope(event: &LifecycleEvent) -> Vec<u8> {
    let body = serde_json::json!({
        "type": event.kind.as_str(),
        "timestamp": event.occurred_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": event,
    });
    // Plain data (strings, numbers, enums): encoding it cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

fn webhook_not_found(id: &str) -> ServiceError {
    ServiceError::SandboxNotFound {
        message: format!(
            "no webhook `{}` in this project",
            id.chars().take(40).collect::<String>()
        ),
    }
}

fn from_registry(id: &str) -> impl Fn(corral_registry::RegistryError) -> ServiceError + '_ {
    move |e| match e {
        corral_registry::RegistryError::NotFound { .. } => webhook_not_found(id),
        other => registry_error(other),
    }
}

impl Service {
    fn webhook_guard(&self) -> BridgeGuard {
        BridgeGuard::named(&self.inner.config.webhooks.allow, "the webhook url")
    }

    /// `POST /v1/webhook-endpoints`: checks the URL (parsed, resolved, every address public unless
    /// allowed) and makes the endpoint; the answer carries its secret, shown this once.
    pub async fn create_webhook(
        &self,
        caller: &Caller,
        input: NewWebhook,
    ) -> Result<WebhookWithSecret, ServiceError> {
        if input.url.len() > 2048 {
            return Err(ServiceError::invalid("`url` is longer than 2048 bytes"));
        }
        let vetted = self.webhook_guard().check(&input.url).await?;
        let mut types = input.types.unwrap_or_default();
        types.sort_by_key(|t| t.as_str());
        types.dedup();
        let (webhook, secret) = self
            .inner
            .registry
            .create_webhook(caller.project_id(), vetted.url.as_str(), &types)
            .await
            .map_err(registry_error)?;
        Ok(WebhookWithSecret::new(
            webhook,
            secret.expose_secret().to_owned(),
        ))
    }

    /// `GET /v1/webhook-endpoints`.
    pub async fn list_webhooks(&self, caller: &Caller) -> Result<WebhookList, ServiceError> {
        let items = self
            .inner
            .registry
            .list_webhooks(caller.project_id())
            .await
            .map_err(registry_error)?;
        Ok(WebhookList { items })
    }

    /// `DELETE /v1/webhook-endpoints/{id}`: nothing more is sent to it; pending deliveries go dead.
    pub async fn delete_webhook(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<corral_domain::Webhook, ServiceError> {
        self.inner
            .registry
            .delete_webhook(caller.project_id(), id)
            .await
            .map_err(from_registry(id))
    }

    /// `POST /v1/webhook-endpoints/{id}/rotate`: a new secret; the previous one keeps signing for the
    /// configured overlap (24 h by default).
    pub async fn rotate_webhook(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<WebhookWithSecret, ServiceError> {
        let (webhook, secret) = self
            .inner
            .registry
            .rotate_webhook_secret(
                caller.project_id(),
                id,
                self.inner.config.webhooks.rotation_overlap,
            )
            .await
            .map_err(from_registry(id))?;
        Ok(WebhookWithSecret::new(
            webhook,
            secret.expose_secret().to_owned(),
        ))
    }

    /// `GET /v1/webhook-endpoints/{id}/deliveries`: the most recent, newest first.
    pub async fn webhook_deliveries(
        &self,
        caller: &Caller,
        id: &str,
        limit: Option<u32>,
    ) -> Result<WebhookDeliveryList, ServiceError> {
        let limit = limit.unwrap_or(50);
        if !(1..=200).contains(&limit) {
            return Err(ServiceError::invalid("`limit` must be from 1 to 200"));
        }
        let items = self
            .inner
            .registry
            .list_deliveries(caller.project_id(), id, limit)
            .await
            .map_err(from_registry(id))?;
        Ok(WebhookDeliveryList { items })
    }

    /// One dispatcher pass: claims due deliveries (within the shares of each endpoint and
    /// project, and as slots free up) and attempts each, until nothing is due or in flight;
    /// how many were attempted.
    pub async fn deliver_webhooks_once(&self) -> usize {
        self.dispatch(None).await
    }

    /// The outcome of one attempt of `d` (never an error: a failure is an outcome), and
    /// whether the endpoint took it: `None` when it was not tried (removed, the event gone,
    /// the registry failing), else whether it was delivered.
    async fn attempt(&self, d: &DeliveryRecord) -> (AttemptOutcome, Option<bool>) {
        let gone = |why: &str| AttemptOutcome::Failed {
            status: None,
            error: why.to_owned(),
            retry_at: None,
        };
        let target = match self.inner.registry.webhook_target(&d.endpoint_id).await {
            Ok(Some(t)) => t,
            Ok(None) => return (gone("the endpoint was removed"), None),
            Err(e) => {
                return (
                    self.retry(d, None, format!("the registry failed: {e}")),
                    None,
                );
            }
        };
        let event = match self.inner.events.one(d.project_id, d.event_seq).await {
            Ok(Some(e)) => e,
            Ok(None) => return (gone("the event is past its retention"), None),
            Err(e) => {
                return (
                    self.retry(d, None, format!("the registry failed: {e}")),
                    None,
                );
            }
        };
        // Checked again at every attempt, and the connection pinned to what was vetted: DNS
        // may answer differently now than when the endpoint was made.
        let vetted = match self.webhook_guard().check(&target.url).await {
            Ok(v) => v,
            Err(e) => return (self.retry(d, None, e.to_string()), Some(false)),
        };
        let body = envelope(&event);
        let timestamp = chrono::Utc::now().timestamp();
        let signature = sign(&d.id, timestamp, &body, &target.secrets);
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(self.inner.config.webhooks.timeout)
            .user_agent("corral-webhooks");
        if let Some(host) = vetted.url.host_str() {
            builder = builder.resolve_to_addrs(host, &vetted.pinned);
        }
        let client = match builder.build() {
            Ok(c) => c,
            Err(e) => {
                return (
                    self.retry(d, None, format!("cannot build a client: {e}")),
                    None,
                );
            }
        };
        let sent = client
            .post(vetted.url.clone())
            .header("content-type", "application/json")
            .header("webhook-id", &d.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await;
        match sent {
            Ok(resp) => {
                let status = resp.status().as_u16();
                // Read a little of the answer so the connection ends cleanly; ignore it.
                let mut resp = resp;
                let mut read = 0;
                while read < ANSWER_BYTES {
                    match resp.chunk().await {
                        Ok(Some(c)) => read += c.len(),
                        _ => break,
                    }
                }
                if (200..300).contains(&status) {
                    (AttemptOutcome::Delivered { status }, Some(true))
                } else {
                    let outcome = self.retry(
                        d,
                        Some(status),
                        format!("the endpoint answered HTTP {status}"),
                    );
                    (outcome, Some(false))
                }
            }
            Err(e) => {
                let why = if e.is_timeout() {
                    "no answer within the deadline"
                } else if e.is_connect() {
                    "cannot connect"
                } else {
                    "the request failed"
                };
                (self.retry(d, None, why.to_owned()), Some(false))
            }
        }
    }

    /// A failed attempt: due again after an exponential backoff with jitter, or dead after
    /// the last attempt.
    fn retry(&self, d: &DeliveryRecord, status: Option<u16>, error: String) -> AttemptOutcome {
        let config = &self.inner.config.webhooks;
        let made = d.attempts.saturating_add(1);
        let retry_at = (made < config.attempts).then(|| {
            let base = config
                .first_backoff
                .saturating_mul(1_u32 << d.attempts.min(20))
                .min(config.max_backoff);
            // Up to a quarter more, so many failed deliveries do not all come back at once.
            let jitter = base.mul_f64(f64::from(rand_fraction()) / 4.0);
            let wait = chrono::Duration::from_std(base + jitter).unwrap_or(chrono::Duration::MAX);
            self.inner.registry.database().now() + wait
        });
        AttemptOutcome::Failed {
            status,
            error,
            retry_at,
        }
    }

    /// Runs the dispatcher until the runtime shuts down: deliveries start as they are
    /// claimed, more are claimed whenever one ends, and new due ones are looked for every
    /// `interval`. No delivery waits for another (see [`dispatch`]).
    pub fn spawn_webhook_dispatcher(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            this.dispatch(Some(interval)).await;
        })
    }
}

/// A fraction in [0, 1) from the clock's nanoseconds: jitter needs spread, not secrecy.
fn rand_fraction() -> f32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos % 1000) as f32 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard Webhooks' published test vector (its specification's example).
    #[test]
    fn the_signature_matches_the_standard_webhooks_example() {
        let secret = SecretString::from("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned());
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, &[secret]),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}
