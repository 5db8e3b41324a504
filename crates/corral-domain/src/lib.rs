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
pub mod shell;
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
        let mut buf = [0; 24];
        match millis(t, &mut buf) {
            Some(text) => s.serialize_str(text),
            None => s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true)),
        }
    }

    /// `t` as chrono's `to_rfc3339_opts(SecondsFormat::Millis, true)` writes it
    /// (`2026-12-01T18:50:59.123Z`), written into `buf` without an allocation: a list page
    /// carries 400 timestamps. `None` (left to chrono) for years outside 0–9999 and leap
    /// seconds.
    pub(crate) fn millis<'b>(t: &Timestamp, buf: &'b mut [u8; 24]) -> Option<&'b str> {
        use chrono::{Datelike as _, Timelike as _};
        let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
        let nanos = t.nanosecond();
        if nanos >= 1_000_000_000 {
            return None;
        }
        let mut put = |at: usize, width: usize, mut value: u32| {
            for i in (at..at + width).rev() {
                // A decimal digit: `value % 10` is below 10.
                buf[i] = b'0' + (value % 10) as u8;
                value /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, t.month());
        put(8, 2, t.day());
        put(11, 2, t.hour());
        put(14, 2, t.minute());
        put(17, 2, t.second());
        put(20, 3, nanos / 1_000_000);
        for (at, c) in [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'.'),
        ] {
            buf[at] = c;
        }
        buf[23] = b'Z';
        // Only ASCII digits and separators were written.
        std::str::from_utf8(buf).ok()
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

    #[cfg(test)]
    mod tests {
        use chrono::{SecondsFormat, TimeZone as _, Utc};
        use proptest::prelude::*;

        use super::millis;

        fn chrono_text(t: &crate::Timestamp) -> String {
            t.to_rfc3339_opts(SecondsFormat::Millis, true)
        }

        proptest! {
            #[test]
            fn millis_are_written_as_chrono_writes_them(
                secs in -62_135_596_800_i64..253_402_300_800_i64,
                nanos in 0u32..1_000_000_000,
            ) {
                let t = Utc.timestamp_opt(secs, nanos).single().unwrap();
                let mut buf = [0; 24];
                let expected = chrono_text(&t);
                prop_assert_eq!(millis(&t, &mut buf), Some(expected.as_str()));
            }
        }

        #[test]
        fn what_chrono_must_write_is_left_to_it() {
            let mut buf = [0; 24];
            // Year 10000 and a year before 0 take more than four digits.
            let late = Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap();
            let early = Utc.with_ymd_and_hms(-1, 1, 1, 0, 0, 0).unwrap();
            assert_eq!(millis(&late, &mut buf), None);
            assert_eq!(millis(&early, &mut buf), None);
            // A leap second's nanoseconds run past a billion.
            let leap = Utc.timestamp_opt(1_483_228_799, 1_500_000_000).unwrap();
            assert_eq!(millis(&leap, &mut buf), None);
            // And the serializer still writes them.
            let json = |t| {
                let mut out = Vec::new();
                super::serialize(&t, &mut serde_json::Serializer::new(&mut out)).unwrap();
                String::from_utf8(out).unwrap()
            };
            for t in [late, early, leap] {
                assert_eq!(json(t), format!("\"{}\"", chrono_text(&t)));
            }
        }
    }
}
