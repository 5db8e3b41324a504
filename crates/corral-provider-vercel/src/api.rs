//! Vercel Sandbox's wire types, named as its API and SDK (`@vercel/sandbox`) name them.
//!
//! Responses are read leniently: unknown fields are ignored and unknown status values kept as
//! `Other` (with the value, for the log), since the REST reference and the SDK already disagree
//! on the status enum.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /v3/sandboxes` (no runtime) or `POST /v2/sandboxes` (with runtime) body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSandboxRequest {
    /// The project the sandbox belongs to.
    pub project_id: String,
    /// Session timeout in **milliseconds**.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// `node22`, `node24`, `node26` or `python3.13` (sent to `/v2/sandboxes` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// A container image (exclusive with `runtime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Whether stopping keeps the filesystem (snapshot) for a later resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
    /// Up to five tags: Corral tags the operation id here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Where the filesystem comes from: Corral's restore sends a snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
}

/// `source` of a create: only the `snapshot` kind is sent by Corral (git and tarball sources
/// exist too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// A new sandbox whose filesystem starts as the snapshot's.
    Snapshot {
        /// The snapshot's id.
        #[serde(rename = "snapshotId")]
        snapshot_id: String,
    },
}

/// `PATCH /v2/sandboxes/{name}` body, as far as Corral uses it: the whole tag map replaces
/// the sandbox's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateSandboxRequest {
    /// The sandbox's tags, all of them.
    pub tags: BTreeMap<String, String>,
}

/// `{sandbox, routes?}`: the answer of `PATCH` and `DELETE /v2/sandboxes/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxResponse {
    /// The sandbox.
    pub sandbox: Sandbox,
}

/// `POST /v2/sandboxes/sessions/{sessionId}/stop` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StopSessionResponse {
    /// The stopped session.
    pub session: Session,
    /// Its sandbox.
    #[serde(default)]
    pub sandbox: Option<Sandbox>,
}

/// `POST /v2/sandboxes/sessions/{sessionId}/snapshot` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshotRequest {
    /// Milliseconds until the snapshot expires (Vercel's default: 30 days); `0` never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration: Option<u64>,
}

/// `Snapshot.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // The provider's documented values, one each.
pub enum SnapshotState {
    Created,
    Deleted,
    Failed,
    /// A value this adapter does not know yet, as sent.
    #[serde(untagged)]
    Other(String),
}

/// `Snapshot`: a point-in-time copy of a session's filesystem.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Its id: what a create's `source` and the snapshot endpoints name.
    pub id: String,
    /// Its status.
    pub status: SnapshotState,
    /// Its size.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// The session it was taken from.
    #[serde(default)]
    pub source_session_id: String,
}

/// `{snapshot, session}` (create) and `{snapshot}` (get, delete).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotResponse {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// The session it was taken from, terminated by the snapshot (create only).
    #[serde(default)]
    pub session: Option<Session>,
}

/// `Session.status` (also used for `Sandbox.status`): the SDK's validator enum, a superset of
/// the REST reference's `NamedSandboxStatus` (`running`, `stopped`, `stopping`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // The provider's documented values, one each.
pub enum SessionStatus {
    Pending,
    Running,
    Stopping,
    Stopped,
    Failed,
    Aborted,
    Snapshotting,
    /// A value this adapter does not know yet, as sent.
    #[serde(untagged)]
    Other(String),
}

/// `Sandbox`: the named, long-lived object.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// The name, unique in the project: Corral's native id.
    pub name: String,
    /// Whether stopping keeps the filesystem (snapshot, resumed on use).
    #[serde(default)]
    pub persistent: bool,
    /// The current session's status.
    pub status: SessionStatus,
    /// The current session.
    #[serde(default)]
    pub current_session_id: String,
    /// Tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// `Session`: one VM boot of a sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The session id: command and file endpoints are addressed through it.
    pub id: String,
    /// Its status.
    pub status: SessionStatus,
    /// Its working directory.
    #[serde(default)]
    pub cwd: String,
    /// Its timeout in milliseconds.
    #[serde(default)]
    pub timeout: u64,
}

/// `{sandbox, session, routes, resumed?}` (create, get).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxAndSessionResponse {
    /// The sandbox.
    pub sandbox: Sandbox,
    /// Its current session.
    pub session: Session,
    /// Whether this call started a new session from the latest snapshot.
    #[serde(default)]
    pub resumed: Option<bool>,
}

/// `{count, next}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CursorPagination {
    /// Items in this page.
    pub count: u64,
    /// Cursor of the next page, if any.
    pub next: Option<String>,
}

/// `GET /v2/sandboxes` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxesPaginationResponse {
    /// One page of sandboxes.
    pub sandboxes: Vec<Sandbox>,
    /// Paging.
    pub pagination: CursorPagination,
}

/// `POST /v2/sandboxes/sessions/{sessionId}/cmd` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCommandRequest {
    /// The executable (exec'd directly, no shell).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Run as root.
    pub sudo: bool,
    /// Answer with an NDJSON stream that ends when the command does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
    /// Include the output in that stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<bool>,
    /// Milliseconds after which the sandbox kills the command with SIGKILL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Open a stdin channel (`…/cmd/{cmdId}/stdin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_stdin: Option<bool>,
}

/// `Command` (`SessionCommand` in the REST reference).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Command {
    /// Command id (for kill and logs).
    pub id: String,
    /// Its arguments (where Corral's tag is found again).
    #[serde(default)]
    pub args: Vec<String>,
    /// Exit code, once finished.
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// `GET /v2/sandboxes/sessions/{sessionId}/cmd` answer: the session's commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommandsResponse {
    /// The commands.
    pub commands: Vec<Command>,
}

/// `POST …/cmd/{cmdId}/stdin` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteStdinRequest {
    /// Bytes for stdin, as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Where `data` starts in stdin: bytes the command already received are skipped, and an
    /// offset past them is a 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Close stdin (after `data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close: Option<bool>,
}

/// `POST …/cmd/{cmdId}/stdin` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteStdinResponse {
    /// Bytes written to stdin so far, in all; absent from sandboxes that predate offsets
    /// (which ignored the offset).
    #[serde(default)]
    pub bytes_written: Option<u64>,
}

/// A `{"command": …}` line of the command stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommandResponse {
    /// The command.
    pub command: Command,
}

/// The `data` of an error log line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogError {
    /// Error code.
    pub code: String,
    /// Message.
    pub message: String,
}

/// A log line of the command stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "stream", rename_all = "snake_case")]
pub enum LogLine {
    /// Standard output.
    Stdout {
        /// The text.
        data: String,
    },
    /// Standard error.
    Stderr {
        /// The text.
        data: String,
    },
    /// The stream failed.
    Error {
        /// What failed.
        data: LogError,
    },
}

/// `POST …/cmd/{cmdId}/kill` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KillCommandRequest {
    /// A POSIX signal **number** (`9` for SIGKILL, `15` for SIGTERM), as the SDK's
    /// `killCommand` sends it: a signal name is refused.
    pub signal: u8,
}

/// `POST …/fs/read` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadFileRequest {
    /// The path (relative paths are resolved against `cwd` or the session's).
    pub path: String,
    /// Base for a relative path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// The error body: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorResponse {
    /// The error.
    pub error: ErrorDetail,
}

/// The error inside [`ErrorResponse`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Machine-readable code (`not_found`, `sandbox_stopped`, …).
    #[serde(default)]
    pub code: String,
    /// Explanation.
    #[serde(default)]
    pub message: String,
}
