//! Snapshots and forks: the wire types of `POST /v1/sandboxes/{id}/snapshots`,
//! `GET /v1/snapshots`, `POST /v1/sandboxes/{id}/fork` and their answers.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::input::InputError;
use crate::limits::{MAX_FORK_COUNT, MAX_SNAPSHOT_NAME_CHARS};
use crate::{Provider, Sandbox, SandboxId, SnapshotId, Timestamp};

/// Where a snapshot is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum SnapshotStatus {
    /// Asked for; the provider has not finished it. It cannot be restored yet.
    Creating,
    /// Complete: it can be restored or forked from.
    Ready,
    /// The provider could not make it (or its making was interrupted); nothing to restore.
    Failed,
    /// Deleted through Corral; only the registry tombstone remains.
    Deleted,
}

impl SnapshotStatus {
    /// Every status.
    pub const ALL: [SnapshotStatus; 4] = [
        SnapshotStatus::Creating,
        SnapshotStatus::Ready,
        SnapshotStatus::Failed,
        SnapshotStatus::Deleted,
    ];

    /// The wire value, e.g. `"ready"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            SnapshotStatus::Creating => "creating",
            SnapshotStatus::Ready => "ready",
            SnapshotStatus::Failed => "failed",
            SnapshotStatus::Deleted => "deleted",
        }
    }

    /// Parses a wire value (as stored in the registry).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for SnapshotStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot of a sandbox's filesystem (and memory, where the provider's
/// `lifecycle.snapshotKeepsMemory`), as the project's registry holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Snapshot {
    /// Opaque project-scoped id: `snp_<provider>_<ulid>`.
    pub id: SnapshotId,
    /// The sandbox it was taken of.
    pub sandbox_id: SandboxId,
    /// The provider holding it (restores happen there).
    pub provider: Provider,
    /// The name given at creation, if any.
    #[serde(default)]
    pub name: Option<String>,
    /// Where it is in its life.
    pub status: SnapshotStatus,
    /// Its size in bytes, where the provider reports it.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// Why it failed (`failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// When it was asked for.
    #[serde(with = "crate::wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When it was deleted (tombstones only; `null` otherwise).
    #[serde(default, with = "crate::wire_time::option")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub deleted_at: Option<Timestamp>,
}

/// A page of the snapshot registry, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SnapshotPage {
    /// Snapshots, newest first; tombstones included.
    pub items: Vec<Snapshot>,
    /// Cursor of the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// `POST /v1/sandboxes/{id}/snapshots` body (it may be empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CreateSnapshotInput {
    /// A name for people: 1 to 128 printable characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(
            min_length = 1,
            max_length = 128,
            pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"
        )
    )]
    pub name: Option<String>,
}

impl CreateSnapshotInput {
    /// Checks the name.
    pub fn validate(&self) -> Result<(), InputError> {
        if let Some(name) = &self.name
            && (name.trim().is_empty()
                || name.chars().count() > MAX_SNAPSHOT_NAME_CHARS
                || name.contains(char::is_control))
        {
            return Err(InputError::invalid(
                "name",
                format!("`name` must be 1 to {MAX_SNAPSHOT_NAME_CHARS} printable characters"),
            ));
        }
        Ok(())
    }
}

/// `POST /v1/sandboxes/{id}/fork` body (it may be empty: one copy).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ForkInput {
    /// How many copies, 1 to 10; default 1.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::create::whole_number"
    )]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 10, value_type = Option<u64>))]
    pub count: Option<u64>,
}

impl ForkInput {
    /// The number of copies asked for, checked.
    pub fn count(&self) -> Result<u32, InputError> {
        match self.count {
            None => Ok(1),
            Some(n) if (1..=u64::from(MAX_FORK_COUNT)).contains(&n) => {
                // In range, so it fits.
                Ok(n as u32)
            }
            Some(_) => Err(InputError::invalid(
                "count",
                format!("`count` must be from 1 to {MAX_FORK_COUNT}"),
            )),
        }
    }
}

/// What a fork answers: the snapshot the copies start from and the copies, each a full
/// registry record with its own id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ForkResult {
    /// The sandbox forked.
    pub sandbox_id: SandboxId,
    /// The snapshot taken of it, which every copy was restored from.
    pub snapshot_id: SnapshotId,
    /// The copies, in order.
    pub sandboxes: Vec<Sandbox>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for st in SnapshotStatus::ALL {
            let json = serde_json::to_string(&st).unwrap();
            assert_eq!(json, format!("\"{}\"", st.as_str()));
            assert_eq!(SnapshotStatus::parse(st.as_str()), Some(st));
        }
    }

    #[test]
    fn fork_counts_are_bounded() {
        assert_eq!(ForkInput::default().count().unwrap(), 1);
        assert_eq!(ForkInput { count: Some(10) }.count().unwrap(), 10);
        assert!(ForkInput { count: Some(0) }.count().is_err());
        assert!(ForkInput { count: Some(11) }.count().is_err());
        assert!(serde_json::from_str::<ForkInput>(r#"{"count": 2.5}"#).is_err());
        assert!(serde_json::from_str::<ForkInput>(r#"{"copies": 2}"#).is_err());
    }

    #[test]
    fn snapshot_names_are_printable_and_bounded() {
        let named = |n: &str| CreateSnapshotInput {
            name: Some(n.to_owned()),
        };
        assert!(named("before migration").validate().is_ok());
        assert!(CreateSnapshotInput::default().validate().is_ok());
        assert!(named(" ").validate().is_err());
        assert!(named("a\nb").validate().is_err());
        assert!(named(&"x".repeat(129)).validate().is_err());
    }
}
