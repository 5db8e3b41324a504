//! Lifecycle events: what happened to a project's sandboxes and commands, in the order it
//! happened, as `GET /v1/events` answers them. An event carries ids, states, exit codes and
//! durations only — never a command line, its output or a secret.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{CommandId, CommandState, Provider, SandboxId, SandboxStatus, SnapshotId, Timestamp};

/// What an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum EventType {
    /// The provider confirmed a create (`status` is the sandbox's first).
    #[serde(rename = "sandbox.created")]
    SandboxCreated,
    /// A sandbox's status changed (`previousStatus`, `status`, `reason`).
    #[serde(rename = "sandbox.status_changed")]
    SandboxStatusChanged,
    /// A sandbox was deleted by request.
    #[serde(rename = "sandbox.deleted")]
    SandboxDeleted,
    /// The orphan reaper found a live sandbox gone at its provider before its lifetime ended
    /// and nobody here deleted it; its record is now a tombstone (`reason`: `vanished`).
    #[serde(rename = "sandbox.vanished")]
    SandboxVanished,
    /// The orphan reaper found a sandbox this deployment made that no live record here names
    /// (`provider`, `nativeId`; `sandboxId` when a tombstone still names it).
    #[serde(rename = "sandbox.orphan_found")]
    SandboxOrphanFound,
    /// A sandbox stopped (`status` `stopped`, `reason`: `requested`, `idle` or `observed`);
    /// reported beside the `sandbox.status_changed` of the same change.
    #[serde(rename = "sandbox.stopped")]
    SandboxStopped,
    /// A stopped (or stopping, or starting) sandbox is running again (`status` `running`,
    /// `reason`: `requested`, `auto_resume` or `observed`); reported beside the
    /// `sandbox.status_changed` of the same change.
    #[serde(rename = "sandbox.resumed")]
    SandboxResumed,
    /// A snapshot became ready (`snapshotId`, `sandboxId`: the sandbox it was taken of).
    #[serde(rename = "snapshot.created")]
    SnapshotCreated,
    /// A snapshot was deleted by request (`snapshotId`, `sandboxId`).
    #[serde(rename = "snapshot.deleted")]
    SnapshotDeleted,
    /// The provider confirmed a command's start.
    #[serde(rename = "command.started")]
    CommandStarted,
    /// A command ended (`commandState`, `exitCode`, `durationMs`).
    #[serde(rename = "command.exited")]
    CommandExited,
}

impl EventType {
    /// Every type.
    pub const ALL: [EventType; 11] = [
        EventType::SandboxCreated,
        EventType::SandboxStatusChanged,
        EventType::SandboxDeleted,
        EventType::SandboxVanished,
        EventType::SandboxOrphanFound,
        EventType::SandboxStopped,
        EventType::SandboxResumed,
        EventType::SnapshotCreated,
        EventType::SnapshotDeleted,
        EventType::CommandStarted,
        EventType::CommandExited,
    ];

    /// The wire value.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::SandboxCreated => "sandbox.created",
            EventType::SandboxStatusChanged => "sandbox.status_changed",
            EventType::SandboxDeleted => "sandbox.deleted",
            EventType::SandboxVanished => "sandbox.vanished",
            EventType::SandboxOrphanFound => "sandbox.orphan_found",
            EventType::SandboxStopped => "sandbox.stopped",
            EventType::SandboxResumed => "sandbox.resumed",
            EventType::SnapshotCreated => "snapshot.created",
            EventType::SnapshotDeleted => "snapshot.deleted",
            EventType::CommandStarted => "command.started",
            EventType::CommandExited => "command.exited",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| format!("unknown event type `{s}`"))
    }
}

/// Why a sandbox's status changed (`reason` of `sandbox.status_changed`, `sandbox.stopped`
/// and `sandbox.resumed`).
pub mod reason {
    /// Corral asked the provider (a get, a list refresh, the reconciler) and saw a new status.
    pub const OBSERVED: &str = "observed";
    /// The create failed: the provider refused it or reconciliation found nothing.
    pub const CREATE_FAILED: &str = "create_failed";
    /// The provider no longer has the sandbox, and neither a delete here nor its lifetime
    /// explains it (`sandbox.vanished`).
    pub const VANISHED: &str = "vanished";
    /// A client asked for it (a stop or resume request).
    pub const REQUESTED: &str = "requested";
    /// Corral stopped the sandbox after it was idle for its `idleStopSeconds`.
    pub const IDLE: &str = "idle";
    /// Corral resumed a stopped sandbox because a request needed it running (`autoResume`).
    pub const AUTO_RESUME: &str = "auto_resume";
}

/// One lifecycle event. `id` orders a project's events (gaps are possible where retention
/// has removed older ones); fields that do not apply to the event's type are `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct LifecycleEvent {
    /// Position in the project's log: pass it as `after` (or `Last-Event-ID`) to read on.
    pub id: u64,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// The sandbox it happened to (or that runs the command, or that a snapshot was taken
    /// of); `null` for `sandbox.orphan_found` when no record here names the provider's
    /// sandbox.
    #[serde(default)]
    pub sandbox_id: Option<SandboxId>,
    /// The provider holding the sandbox (`sandbox.orphan_found`).
    #[serde(default)]
    pub provider: Option<Provider>,
    /// The provider's own id of the sandbox (`sandbox.orphan_found`).
    #[serde(default)]
    pub native_id: Option<String>,
    /// The command, for `command.*` events.
    #[serde(default)]
    pub command_id: Option<CommandId>,
    /// The snapshot, for `snapshot.*` events.
    #[serde(default)]
    pub snapshot_id: Option<SnapshotId>,
    /// The sandbox's status after the event (`sandbox.*` events).
    #[serde(default)]
    pub status: Option<SandboxStatus>,
    /// The status before it (`sandbox.status_changed`, `sandbox.stopped`, `sandbox.resumed`,
    /// `sandbox.vanished`).
    #[serde(default)]
    pub previous_status: Option<SandboxStatus>,
    /// Why the status changed (`sandbox.status_changed`, `sandbox.stopped`,
    /// `sandbox.resumed`, `sandbox.vanished`): `observed`, `create_failed`, `vanished`,
    /// `requested`, `idle` or `auto_resume`.
    #[serde(default)]
    pub reason: Option<String>,
    /// How the command ended (`command.exited`).
    #[serde(default)]
    pub command_state: Option<CommandState>,
    /// The command's exit code, when known (`command.exited`).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Milliseconds from the command's start to its end (`command.exited`).
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// When it happened.
    #[serde(with = "crate::wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub occurred_at: Timestamp,
}

/// A page of a project's events, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct EventPage {
    /// Events after the requested point, oldest first.
    pub items: Vec<LifecycleEvent>,
    /// Pass as `after` to read on (the last event's id, or the requested point when there
    /// was none).
    pub next_after: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_reads_back_from_its_wire_value() {
        for t in EventType::ALL {
            assert_eq!(t.as_str().parse::<EventType>(), Ok(t));
            assert_eq!(
                serde_json::to_value(t).unwrap(),
                serde_json::Value::String(t.as_str().into())
            );
        }
        assert!("sandbox.exploded".parse::<EventType>().is_err());
    }
}
