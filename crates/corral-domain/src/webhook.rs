//! Webhook endpoints: where a project's lifecycle events are delivered, signed as Standard
//! Webhooks does (`webhook-id`, `webhook-timestamp`, `webhook-signature`).

use serde::{Deserialize, Serialize};

use crate::{EventType, Timestamp};

/// `POST /v1/webhook-endpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct NewWebhook {
    /// Where events are POSTed: `https://…` (or `http://` to a host the operator allows).
    /// Loopback, private and link-local addresses are refused unless allowed.
    #[cfg_attr(
        feature = "utoipa",
        schema(format = "uri", min_length = 8, max_length = 2048)
    )]
    pub url: String,
    /// Only these event types (omitted, null or empty: every type).
    #[serde(default)]
    pub types: Option<Vec<EventType>>,
}

/// A webhook endpoint (its secret is shown only when made or rotated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Webhook {
    /// `whe_<ulid>`.
    pub id: String,
    /// Where events are POSTed.
    pub url: String,
    /// The event types delivered (empty: every type).
    pub types: Vec<EventType>,
    /// When it was made.
    #[serde(with = "crate::wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
}

/// A webhook endpoint with its signing secret: the answer of create and rotate, the only
/// time the secret is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct WebhookWithSecret {
    /// `whe_<ulid>`.
    pub id: String,
    /// Where events are POSTed.
    pub url: String,
    /// The event types delivered (empty: every type).
    pub types: Vec<EventType>,
    /// When it was made.
    #[serde(with = "crate::wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// `whsec_<base64>`: verify deliveries with it (any Standard Webhooks library). After a
    /// rotation, deliveries carry signatures by the new and the previous secret for 24 hours.
    pub secret: String,
}

impl WebhookWithSecret {
    /// The endpoint with its secret.
    pub fn new(webhook: Webhook, secret: String) -> Self {
        WebhookWithSecret {
            id: webhook.id,
            url: webhook.url,
            types: webhook.types,
            created_at: webhook.created_at,
            secret,
        }
    }
}

/// Webhook endpoints, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct WebhookList {
    /// The project's endpoints.
    pub items: Vec<Webhook>,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum DeliveryState {
    /// Not delivered yet: attempted again at `nextAttemptAt`.
    Pending,
    /// The endpoint answered 2xx.
    Delivered,
    /// Given up after the last attempt (or its endpoint or event is gone).
    Dead,
}

impl DeliveryState {
    /// The wire value.
    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
        }
    }

    /// The state of a wire value.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Delivered, Self::Dead]
            .into_iter()
            .find(|d| d.as_str() == s)
    }
}

/// One event's delivery to one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct WebhookDelivery {
    /// The `webhook-id` sent (the same for every attempt: receivers deduplicate by it).
    pub id: String,
    /// The event delivered.
    pub event_id: u64,
    /// Where it stands.
    pub state: DeliveryState,
    /// Attempts made.
    pub attempts: u32,
    /// When the next attempt is due (pending deliveries).
    #[serde(default, with = "crate::wire_time::option")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub next_attempt_at: Option<Timestamp>,
    /// The HTTP status of the last attempt, if one was received.
    #[serde(default)]
    pub last_status: Option<u16>,
    /// Why the last attempt failed, if it did.
    #[serde(default)]
    pub last_error: Option<String>,
    /// When the delivery was queued.
    #[serde(with = "crate::wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
}

/// An endpoint's most recent deliveries, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct WebhookDeliveryList {
    /// Deliveries, newest first.
    pub items: Vec<WebhookDelivery>,
}
