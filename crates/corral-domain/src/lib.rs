//! Corral's domain: every type that crosses the public API, and the rules that need no I/O.
//!
//! This crate is pure (serde, chrono and ulid only; no async runtime, no HTTP, no database), so
//! any Rust service can depend on it to speak Corral's wire format. Field names are camelCase
//! exactly as `spec/sandbox-orchestration-api.md` writes them; requests reject unknown fields
//! with a message naming the field.
//!
//! ```
//! use corral_domain::{Provider, SandboxId};
//!
//! let id = SandboxId::new(Provider::Local);
//! let parsed: SandboxId = id.to_string().parse().unwrap();
//! assert_eq!(parsed, id);
//! assert_eq!(parsed.provider(), Provider::Local);
//! ```

mod capabilities;
mod command;
mod context;
mod create;
mod event;
mod exec;
mod files;
mod id;
mod input;
pub mod limits;
mod money;
#[cfg(feature = "utoipa")]
pub mod openapi;
mod provider;
mod sandbox;
mod snapshot;
pub mod sse;
mod status;
pub mod usage;
mod webhook;

pub use capabilities::{
    CommandCapabilities, CommandResume, ImageMode, LifecycleCapabilities, OutputStreams,
    PricingEvidence, PricingRate, ProviderCapabilities, ProviderCatalog, RateUnit, SandboxSize,
    Signal, TimeoutMode,
};
pub use command::{
    Command, CommandPage, CommandState, MAX_STDIN_BYTES, MAX_TAG_BYTES, OutputEvent, OutputPage,
    OutputStream, SignalInput, StartCommandInput, StdinInput, StdinResult,
};
pub use context::{CredentialSource, ProviderContext};
pub use create::{CreateSandboxRequest, FlyCreate, LocalCreate, StandardCreate};
pub use event::{EventPage, EventType, LifecycleEvent, reason as event_reason};
pub use exec::{CommandResult, RunCommandInput};
pub use files::{FileEncoding, ReadFileInput, ReadFileResult, WriteFileInput, WriteFileResult};
pub use id::{
    CommandId, OperationId, ParseIdError, SandboxId, SnapshotId, ULID_PATTERN, sandbox_id_pattern,
    snapshot_id_pattern,
};
pub use input::InputError;
pub use provider::{ParseProviderError, Provider};
pub use sandbox::{Sandbox, SandboxListItem, SandboxMetadata, SandboxPage};
pub use snapshot::{
    CreateSnapshotInput, ForkInput, ForkResult, Snapshot, SnapshotPage, SnapshotStatus,
};
pub use status::SandboxStatus;
pub use usage::{CostAmount, SandboxUsage, UsageReport, UsageRow};
pub use webhook::{
    DeliveryState, NewWebhook, Webhook, WebhookDelivery, WebhookDeliveryList, WebhookList,
    WebhookWithSecret,
};

/// Timestamps on the wire: ISO 8601 in UTC, written with millisecond precision
/// (`2026-11-22T10:00:00.000Z`) whatever the clock or database gave, so one instant has one
/// spelling in create, get and list responses.
pub type Timestamp = chrono::DateTime<chrono::Utc>;

/// Serde for [`Timestamp`] fields: writes milliseconds and `Z`, reads any RFC 3339 form.
pub(crate) mod wire_time {
    use chrono::SecondsFormat;
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::Timestamp;

    pub(crate) fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        Timestamp::deserialize(d)
    }

    /// The same for `Option<Timestamp>`.
    pub(crate) mod option {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(
            t: &Option<Timestamp>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => super::serialize(t, s),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Timestamp>, D::Error> {
            Option::<Timestamp>::deserialize(d)
        }
    }
}
