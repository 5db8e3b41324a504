//! Morph Cloud's wire types, named as Morph names them (`morphcloud` SDK `api.py`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What happens when an instance's TTL runs out (`ttl_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TtlAction {
    /// The instance is stopped, which on Morph deletes it permanently (the default).
    Stop,
    /// The instance is paused (memory and disk kept).
    Pause,
}

/// Body of `POST /instance?snapshot_id=…` (start an instance from a snapshot).
#[derive(Debug, Clone, Serialize)]
pub struct StartInstanceRequest {
    /// User metadata (string to string), filterable with `metadata[key]=value` on list.
    pub metadata: BTreeMap<String, String>,
    /// Seconds from now until `ttl_action` runs; absent: no TTL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// What happens when the TTL runs out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_action: Option<TtlAction>,
}

/// An instance's TTL settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ttl {
    /// Seconds until the action runs.
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// Unix time at which the instance expires.
    #[serde(default)]
    pub ttl_expire_at: Option<u64>,
    /// The action.
    #[serde(default)]
    pub ttl_action: Option<TtlAction>,
}

/// An instance's snapshot and base image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRefs {
    /// The snapshot it was started from.
    #[serde(default)]
    pub snapshot_id: String,
    /// The base image of that snapshot.
    #[serde(default)]
    pub image_id: String,
}

/// `Instance` (fields Corral does not use are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// The instance id (`morphvm_…`).
    pub id: String,
    /// Always `"instance"`.
    #[serde(default)]
    pub object: String,
    /// Creation time, Unix seconds.
    #[serde(default)]
    pub created: u64,
    /// `pending`, `ready`, `paused`, `saving` or `error` (kept as text: the enum may grow).
    pub status: String,
    /// Snapshot and image.
    #[serde(default)]
    pub refs: InstanceRefs,
    /// TTL settings.
    #[serde(default)]
    pub ttl: Ttl,
    /// User metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// `GET /instance` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceList {
    /// The instances.
    pub data: Vec<Instance>,
}

/// Body of `POST /instance/{id}/exec`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecRequest {
    /// The argv to run (no shell is implied).
    pub command: Vec<String>,
}

/// `InstanceExecResponse`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceExecResponse {
    /// The exit code.
    pub exit_code: i32,
    /// Standard output, as text.
    pub stdout: String,
    /// Standard error, as text.
    pub stderr: String,
}

/// Body of `POST /instance/{id}/snapshot` (the SDK's `Instance.snapshot`).
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotInstanceRequest {
    /// User metadata for the snapshot.
    pub metadata: BTreeMap<String, String>,
}

/// `Snapshot` (fields Corral does not use are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The snapshot id (`snapshot_…`): what `POST /instance?snapshot_id=` boots.
    pub id: String,
    /// `pending`, `ready`, `failed`, `deleting` or `deleted` (kept as text: the enum may grow).
    pub status: String,
    /// User metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}
