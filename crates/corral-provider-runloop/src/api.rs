//! Runloop's wire types, named as its API names them (`DevboxView`, `launch_parameters`, …).
//!
//! Responses are read leniently (unknown fields ignored, unknown enum values kept): Runloop's
//! status enum has grown before (`queued`, `scheduled`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /v1/devboxes` body (`DevboxCreateParameters`), the fields Corral sets.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevboxCreateParameters {
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Blueprint by id (`bpt_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blueprint_id: Option<String>,
    /// Blueprint by name (the latest successful build of that name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blueprint_name: Option<String>,
    /// Disk snapshot to boot from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// User metadata: Corral tags the operation id here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Resources and lifetime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_parameters: Option<LaunchParameters>,
}

/// `LaunchParameters`, the fields Corral sets.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LaunchParameters {
    /// Seconds after which the devbox shuts down (deleted). Default 3600, maximum 172800.
    /// Ignored by Runloop once an `after_idle` policy is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive_time_seconds: Option<u64>,
    /// Idle policy and resume triggers (`LifecycleConfigurationParameters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<LifecycleConfigurationParameters>,
}

/// `LifecycleConfigurationParameters`, the field Corral sets (the description prefers it to
/// the deprecated top-level `launch_parameters.after_idle`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleConfigurationParameters {
    /// What happens after the devbox has been idle for a while.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_idle: Option<IdleConfigurationParameters>,
}

/// `IdleConfigurationParameters`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleConfigurationParameters {
    /// Idle seconds before `on_idle` (`int32`).
    pub idle_time_seconds: u32,
    /// What to do then.
    pub on_idle: IdleAction,
}

/// `IdleAction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleAction {
    /// Shut the devbox down (permanent).
    Shutdown,
    /// Suspend it (the disk is kept; `resume` boots it again).
    Suspend,
}

/// `POST /v1/devboxes/{id}/snapshot_disk_async` body (`DevboxSnapshotRequest`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevboxSnapshotRequest {
    /// A name for the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// User metadata: Corral tags its snapshot id here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// `DevboxDiskSnapshotView`, the fields Corral reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DevboxDiskSnapshotView {
    /// Snapshot id (what `snapshot_id` on a create names).
    pub id: String,
    /// The devbox it was taken of.
    #[serde(default)]
    pub source_devbox_id: Option<String>,
    /// User metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Size in bytes, "relative to the base blueprint".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
}

/// `DevboxSnapshotStatus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // The provider's documented values, one each.
pub enum DevboxSnapshotStatus {
    InProgress,
    Error,
    Complete,
    Deleted,
    /// A value this adapter does not know yet, as sent.
    #[serde(untagged)]
    Other(String),
}

/// `GET /v1/devboxes/disk_snapshots/{id}/status` (`DevboxSnapshotAsyncStatusView`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DevboxSnapshotAsyncStatusView {
    /// Where the snapshot operation is.
    pub status: DevboxSnapshotStatus,
    /// The snapshot, once complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<DevboxDiskSnapshotView>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

/// `DevboxViewStatus`: the published description's values, and `scheduled` and `queued`,
/// which Runloop has answered besides them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // The provider's documented values, one each.
pub enum DevboxStatus {
    Scheduled,
    Queued,
    Provisioning,
    Initializing,
    Running,
    Suspending,
    Suspended,
    Resuming,
    Failure,
    Shutdown,
    /// A value this adapter does not know yet, as sent.
    #[serde(untagged)]
    Other(String),
}

/// `DevboxView`, the fields Corral reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DevboxView {
    /// Devbox id (`dbx_…`).
    pub id: String,
    /// Lifecycle status.
    pub status: DevboxStatus,
    /// User metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Why it shut down (`DevboxViewShutdownReason`: `api_shutdown`, `keep_alive_timeout`,
    /// `entrypoint_exit`, `idle`, `ttl_expired`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_reason: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
}

/// `DevboxListView`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DevboxListView {
    /// One page of devboxes.
    pub devboxes: Vec<DevboxView>,
    /// Whether more pages follow (`starting_after` the last id).
    pub has_more: bool,
}

/// `POST /v1/devboxes/{id}/execute` body (`DevboxStartExecutionParameters`). There is no cwd
/// or env field: the adapter wraps the command in `sh -c`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevboxStartExecutionParameters {
    /// UUIDv7 chosen by the client, "for idempotency".
    pub command_id: String,
    /// The shell command.
    pub command: String,
    /// Seconds to wait for completion before answering with a running execution (≤ 25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimistic_timeout: Option<u32>,
}

/// `DevboxExecutionStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // The provider's documented values, one each.
pub enum ExecutionStatus {
    Queued,
    Running,
    Completed,
    /// A value this adapter does not know yet.
    #[serde(other)]
    Unknown,
}

/// `DevboxAsyncExecutionDetailView`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DevboxAsyncExecutionDetailView {
    /// The devbox.
    pub devbox_id: String,
    /// The execution, for polling and kill.
    pub execution_id: String,
    /// Whether it finished.
    pub status: ExecutionStatus,
    /// The last `last_n` lines of stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// The last `last_n` lines of stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Exit status, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// Whether stdout was cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_truncated: Option<bool>,
    /// Whether stderr was cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_truncated: Option<bool>,
}

/// `POST …/executions/{eid}/wait_for_status` body (`DevboxWaitForCommandRequest`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevboxWaitForCommandRequest {
    /// Statuses to wait for.
    pub statuses: Vec<ExecutionStatus>,
    /// Seconds to wait (≤ 25); `408` when they pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
}

/// `POST …/executions/{eid}/kill` body (`DevboxKillExecutionRequest`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevboxKillExecutionRequest {
    /// Kill the whole process group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_process_group: Option<bool>,
}

/// `POST /v1/devboxes/{id}/download_file` body (`DevboxDownloadFileParameters`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevboxDownloadFileParameters {
    /// File path (relative paths are under the user's home).
    pub path: String,
}

/// `POST /v1/devboxes/{id}/execute_async` body (`DevboxCreateExecutionParameters`): no
/// command id (so no idempotency), but the only start that can attach stdin.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevboxCreateExecutionParameters {
    /// The shell command.
    pub command: String,
    /// Open a stdin channel for `send_std_in`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_stdin: Option<bool>,
}

/// `SignalType`: what `send_std_in` can send besides text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SignalType {
    /// End of file: closes the execution's stdin.
    Eof,
    /// An interrupt sent *through stdin*.
    Interrupt,
}

/// `POST …/executions/{eid}/send_std_in` body (`DevboxSendStdInRequest`): text only.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevboxSendStdInRequest {
    /// Text for stdin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A signal for stdin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<SignalType>,
}

/// `DevboxSendStdInResult` (read leniently: older SDKs describe the execution view here).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DevboxSendStdInResult {
    /// Whether the stdin was sent.
    #[serde(default)]
    pub success: Option<bool>,
}

/// One `data:` event of `stream_stdout_updates` / `stream_stderr_updates`
/// (`ExecUpdateChunkView`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecUpdateChunkView {
    /// "The byte offset of this chunk of log stream": whether it is where the chunk starts
    /// or ends, the description does not say (the SDKs resume from the last one seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The chunk, as text.
    pub output: String,
}
