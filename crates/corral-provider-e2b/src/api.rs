//! E2B wire types, named as E2B names them: the control API (`spec/openapi.yml`) and the
//! envd process/filesystem messages in protojson form (`process.proto`, `filesystem.proto`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `NewSandbox`: the body of `POST /sandboxes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    /// Template id or alias (required).
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Time to live in seconds; E2B defaults to 15 when absent, so Corral always sends it.
    pub timeout: u32,
    /// Ask for an envd access token (the SDK always sends `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure: Option<bool>,
    /// User metadata; Corral stores the operation id here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// `Sandbox`: the answer to a create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// Template id.
    #[serde(rename = "templateID", default)]
    pub template_id: String,
    /// Sandbox id.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// Deprecated client id.
    #[serde(rename = "clientID", default)]
    pub client_id: String,
    /// envd version.
    #[serde(default)]
    pub envd_version: String,
    /// Token for envd (`X-Access-Token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    /// Base domain of the sandbox's traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

/// `SandboxDetail` (`GET /sandboxes/{id}`) and `ListedSandbox` (`GET /v2/sandboxes`), which
/// share the fields Corral reads. Only `sandboxID` and `state` are insisted on: the rest is
/// informative, so a provider that drops a field does not break observation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxDetail {
    /// Template id.
    #[serde(rename = "templateID", default)]
    pub template_id: String,
    /// Sandbox id.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// Deprecated client id.
    #[serde(rename = "clientID", default)]
    pub client_id: String,
    /// Start time (RFC 3339).
    #[serde(default)]
    pub started_at: String,
    /// Expiry time (RFC 3339).
    #[serde(default)]
    pub end_at: String,
    /// CPU count.
    #[serde(default)]
    pub cpu_count: u32,
    /// Memory in MB.
    #[serde(rename = "memoryMB", default)]
    pub memory_mb: u32,
    /// Disk in MB.
    #[serde(rename = "diskSizeMB", default)]
    pub disk_size_mb: u32,
    /// `SandboxState`: `running` or `paused` (kept as text: unknown values must not fail).
    pub state: String,
    /// envd version.
    #[serde(default)]
    pub envd_version: String,
    /// Token for envd (detail only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    /// Base domain (detail only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// User metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// `ConnectSandbox`: the body of `POST /sandboxes/{sandboxID}/connect`, which resumes a
/// paused sandbox (or answers a running one as it is, only extending its lifetime).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectSandbox {
    /// Seconds from now after which the sandbox expires (required).
    pub timeout: u32,
}

/// `SandboxSnapshotRequest`: the body of `POST /sandboxes/{sandboxID}/snapshots`. Corral
/// never names a snapshot (see `docs/providers/e2b.md`): a named one's id carries the team
/// namespace (`team-slug/name:tag`), and a name already used adds a build to that template.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSnapshotRequest {
    /// The snapshot template's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `SnapshotInfo`: a snapshot (a template E2B can create sandboxes from).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// The snapshot template's id with its tag (`<templateID>:default` when unnamed): what a
    /// create names as `templateID`.
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// Its full names, empty when unnamed.
    #[serde(default)]
    pub names: Vec<String>,
}

/// `Error`: the control API's error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    /// HTTP-like code.
    pub code: i32,
    /// Message.
    pub message: String,
}

/// `process.ProcessConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessConfig {
    /// Executable.
    pub cmd: String,
    /// Arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `process.StartRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartRequest {
    /// The process to start.
    pub process: ProcessConfig,
    /// A name the process is listed with (`ProcessInfo.tag`); envd does not require it to be
    /// unique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Whether stdin is a pipe (`SendInput`, `CloseStdin`); envd opens one when this is
    /// absent (backwards compatibility), the SDK sends `false` unless asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<bool>,
}

/// `process.ProcessSelector`: exactly one of `pid` and `tag`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSelector {
    /// The process id envd answered in the start event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The start's `tag`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

impl ProcessSelector {
    /// Selects by pid.
    pub fn pid(pid: u32) -> Self {
        Self {
            pid: Some(pid),
            tag: None,
        }
    }
}

/// `process.ConnectRequest`: follow a running process's events from now on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectRequest {
    /// Which process.
    pub process: ProcessSelector,
}

/// `process.ListRequest` (no fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListRequest {}

/// `process.ProcessInfo`: one running process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// How it was started.
    pub config: ProcessConfig,
    /// Its pid (protojson omits zero).
    #[serde(default)]
    pub pid: u32,
    /// Its start's tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// `process.ListResponse`: the processes envd runs (ended ones are gone).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResponse {
    /// The processes (protojson omits an empty list).
    #[serde(default)]
    pub processes: Vec<ProcessInfo>,
}

/// `process.ProcessInput`: exactly one field, base64 bytes (protojson).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInput {
    /// Bytes for stdin, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Bytes for the pty, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<String>,
}

/// `process.SendInputRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendInputRequest {
    /// Which process.
    pub process: ProcessSelector,
    /// The bytes.
    pub input: ProcessInput,
}

/// `process.CloseStdinRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseStdinRequest {
    /// Which process.
    pub process: ProcessSelector,
}

/// `process.SendSignalRequest`; `signal` is the protojson name of `process.Signal`:
/// `SIGNAL_SIGTERM` or `SIGNAL_SIGKILL` (envd refuses anything else as `unimplemented`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendSignalRequest {
    /// Which process.
    pub process: ProcessSelector,
    /// The signal's enum name.
    pub signal: String,
}

/// The empty answer of `SendInput`, `CloseStdin` and `SendSignal`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// `process.StartResponse`, and `process.ConnectResponse` (the same shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartResponse {
    /// The event.
    pub event: ProcessEvent,
}

/// `process.ProcessEvent`: exactly one field is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEvent {
    /// The process started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<StartEvent>,
    /// Output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataEvent>,
    /// The process ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<EndEvent>,
    /// Keepalive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<serde_json::Value>,
}

/// `ProcessEvent.StartEvent`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartEvent {
    /// Process id (protojson omits zero).
    #[serde(default)]
    pub pid: u32,
}

/// `ProcessEvent.DataEvent`: base64 bytes (protojson), one stream per event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataEvent {
    /// stdout bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// stderr bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// pty bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<String>,
}

/// `ProcessEvent.EndEvent` (protojson omits zero/false fields, hence the defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndEvent {
    /// Exit code (`sint32`).
    #[serde(default)]
    pub exit_code: i32,
    /// Whether the process exited (rather than being killed).
    #[serde(default)]
    pub exited: bool,
    /// e.g. `exit status 3`, `signal: killed`.
    #[serde(default)]
    pub status: String,
    /// Error text, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The Connect end-of-stream message (flag `0x02`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndOfStream {
    /// The RPC's error, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ConnectError>,
}

/// A Connect error (`{code, message}`), in end-of-stream messages and unary error bodies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectError {
    /// e.g. `deadline_exceeded`, `not_found`.
    pub code: String,
    /// Message.
    #[serde(default)]
    pub message: String,
}

/// `filesystem.StatRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatRequest {
    /// Path.
    pub path: String,
}

/// `filesystem.StatResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatResponse {
    /// The entry.
    pub entry: FsEntryInfo,
}

/// `filesystem.EntryInfo` (the fields Corral reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsEntryInfo {
    /// Base name.
    #[serde(default)]
    pub name: String,
    /// `FILE_TYPE_FILE`, `FILE_TYPE_DIRECTORY`, … (protojson enum names).
    #[serde(default, rename = "type")]
    pub file_type: String,
    /// Full path.
    #[serde(default)]
    pub path: String,
}

/// envd `EntryInfo`: one element of the `POST /files` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryInfo {
    /// Path.
    pub path: String,
    /// Name.
    pub name: String,
    /// `file`.
    #[serde(rename = "type")]
    pub entry_type: String,
}
