//! E2B's wire model, as its SDKs send and parse it: the control API's JSON (camelCase with
//! E2B's own spellings, `templateID`, `sandboxID`) and envd's process messages in protojson
//! (lowerCamelCase, enums by name, zero values left out).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /sandboxes` and `POST /v2/sandboxes`. Fields Corral does not model (auto-pause,
/// network rules, MCP, IAM, volumes) are accepted and refused by [`NewSandbox::unsupported`]
/// only when they ask for something.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    /// The template: a configured name (`base`), a provider (`local`) or `provider:image`.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Seconds until the sandbox is ended (E2B's default: 300).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Pause instead of kill at the timeout.
    #[serde(default)]
    pub auto_pause: Option<bool>,
    /// The caller's labels.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Environment variables of every process.
    #[serde(default)]
    pub env_vars: Option<BTreeMap<String, String>>,
    /// Volumes to mount.
    #[serde(default)]
    pub volume_mounts: Option<Vec<serde_json::Value>>,
    /// MCP servers to start.
    #[serde(default)]
    pub mcp: Option<serde_json::Value>,
}

impl NewSandbox {
    /// The first requested feature Corral cannot provide, named for the error message.
    pub fn unsupported(&self) -> Option<&'static str> {
        if self.auto_pause == Some(true) {
            return Some(
                "autoPause (a sandbox is killed at its timeout; pause it yourself with POST /sandboxes/{id}/pause)",
            );
        }
        if self.volume_mounts.as_ref().is_some_and(|v| !v.is_empty()) {
            return Some("volumeMounts");
        }
        if self.mcp.as_ref().is_some_and(|m| !m.is_null()) {
            return Some("mcp");
        }
        None
    }
}

/// The answer of a create or a connect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxCreated {
    /// The template as asked.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Corral's sandbox id.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// E2B's client id (unused by the SDKs; Corral's deployment has no such thing).
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// The envd version Corral speaks.
    pub envd_version: String,
    /// The token of the in-sandbox API (`X-Access-Token`).
    pub envd_access_token: String,
    /// No per-sandbox domain: every in-sandbox call goes to Corral, routed by header.
    pub domain: Option<String>,
    /// The template's alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
}

/// One sandbox in `GET /v2/sandboxes` and `GET /sandboxes/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxDetail {
    /// The template.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Corral's sandbox id.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// See [`SandboxCreated::client_id`].
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// RFC 3339.
    pub started_at: String,
    /// RFC 3339: when the timeout ends it.
    pub end_at: String,
    /// Not known across providers: 0.
    pub cpu_count: u32,
    /// Not known across providers: 0.
    #[serde(rename = "memoryMB")]
    pub memory_mb: u32,
    /// Not known across providers: 0.
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u32,
    /// `running`, or `paused` once paused (a Corral sandbox that is stopping or stopped).
    pub state: &'static str,
    /// See [`SandboxCreated::envd_version`].
    pub envd_version: String,
    /// The caller's labels.
    pub metadata: BTreeMap<String, String>,
    /// The in-sandbox API's token (get only, as E2B).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    /// See [`SandboxCreated::domain`].
    pub domain: Option<String>,
    /// The template's alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
}

/// `POST /sandboxes/{id}/timeout`.
#[derive(Debug, Clone, Deserialize)]
pub struct TimeoutRequest {
    /// Seconds from now.
    pub timeout: u64,
}

/// `POST /sandboxes/{id}/connect` and `POST /v2/sandboxes/{id}/connect`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ConnectRequest {
    /// Seconds from now (extends, never shortens).
    #[serde(default)]
    pub timeout: Option<u64>,
}

/// `POST /sandboxes/{id}/pause` (optional body).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseRequest {
    /// Whether memory is kept (E2B's default) or only the filesystem. Accepted; what a pause
    /// keeps is the provider's (`docs/compat/e2b.md`).
    #[serde(default)]
    pub memory: Option<bool>,
}

/// `POST /sandboxes/{id}/resume` (deprecated by E2B for connect; optional body).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeRequest {
    /// Seconds from now until the resumed sandbox ends (E2B's default: 15).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Pause instead of kill at the timeout (refused, as at create).
    #[serde(default)]
    pub auto_pause: Option<bool>,
}

/// `POST /sandboxes/{id}/snapshots` (optional body).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SnapshotRequest {
    /// A name for people (Corral's snapshot `name`).
    #[serde(default)]
    pub name: Option<String>,
    /// Whether memory is kept (E2B's default) or only the filesystem. Accepted; what a
    /// snapshot keeps is the provider's (`docs/compat/e2b.md`).
    #[serde(default)]
    pub memory: Option<bool>,
}

/// E2B's `SnapshotInfo`: a create-snapshot's answer and one item of `GET /snapshots`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotInfo {
    /// Corral's snapshot id (`snp_…`), which a create takes as its template.
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// Its name, when it was given one.
    pub names: Vec<String>,
}

/// `POST /sandboxes/{id}/fork` (optional body).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ForkRequest {
    /// Seconds each copy lives (E2B's default: 15).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// How many copies (default 1).
    #[serde(default)]
    pub count: Option<u64>,
}

/// One entry of a fork's answer (E2B's `SandboxForkResult`): the copy, or why it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ForkOutcome {
    /// The copy, as a create answers it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxCreated>,
    /// Why this copy did not start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}

/// E2B's control-plane error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiError {
    /// The HTTP status again.
    pub code: u16,
    /// What went wrong.
    pub message: String,
}

/// `process.ProcessConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessConfig {
    /// The program.
    pub cmd: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// Working directory (relative: under the user's home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `process.StartRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartRequest {
    /// What to run.
    pub process: ProcessConfig,
    /// A pseudo-terminal (not supported across providers).
    #[serde(default)]
    pub pty: Option<serde_json::Value>,
    /// A label to find it by.
    #[serde(default)]
    pub tag: Option<String>,
    /// Whether stdin stays open (envd's default: yes).
    #[serde(default)]
    pub stdin: Option<bool>,
}

/// `process.ProcessSelector`: by pid or by tag.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProcessSelector {
    /// The pid.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The tag.
    #[serde(default)]
    pub tag: Option<String>,
}

/// Requests naming one process: `Connect`, `CloseStdin`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SelectRequest {
    /// The process.
    #[serde(default)]
    pub process: ProcessSelector,
}

/// `process.ProcessInput`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProcessInput {
    /// Bytes for stdin, base64.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Bytes for a pseudo-terminal (not supported).
    #[serde(default)]
    pub pty: Option<String>,
}

/// `process.SendInputRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SendInputRequest {
    /// The process.
    #[serde(default)]
    pub process: ProcessSelector,
    /// The input.
    #[serde(default)]
    pub input: ProcessInput,
}

/// `process.SendSignalRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SendSignalRequest {
    /// The process.
    #[serde(default)]
    pub process: ProcessSelector,
    /// `SIGNAL_SIGTERM`, `SIGNAL_SIGKILL` (or their numbers).
    #[serde(default)]
    pub signal: serde_json::Value,
}

/// `process.ProcessInfo` in `List`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessInfo {
    /// How it was started.
    pub config: ProcessConfig,
    /// Its pid.
    pub pid: u32,
    /// Its tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}
