//! Daytona wire types, named as Daytona names them (control API `CreateSandbox`, `Sandbox`,
//! `ListSandboxesResponse`; toolbox `ExecuteRequest`, `ExecuteResponse`, `FileInfo`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `CreateSandbox`: the body of `POST /sandbox` (the fields Corral sends).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSandbox {
    /// Unique name in the organization; Corral uses the operation id, so a repeated create
    /// answers 409 instead of making a second sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Snapshot id or name; the server's default snapshot when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Labels; Corral stores the operation id here.
    pub labels: BTreeMap<String, String>,
    /// Idle auto-stop, in **minutes** (0 disables it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_stop_interval: Option<u64>,
}

/// `Sandbox` (the fields Corral reads; the rest is ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// Sandbox id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `SandboxState` (kept as text: unknown values must not fail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why it is in `error`, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// Auto-stop interval in minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_stop_interval: Option<f64>,
    /// Base URL of the toolbox proxy (`{toolboxProxyUrl}/{sandboxId}/...`).
    #[serde(default)]
    pub toolbox_proxy_url: String,
}

/// `ListSandboxesResponse` (`GET /sandbox`); older deployments answered a bare array.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ListSandboxes {
    /// `{items, nextCursor}`.
    Page {
        /// The sandboxes.
        items: Vec<Sandbox>,
        /// The cursor of the next page; null on the last.
        #[serde(default, rename = "nextCursor")]
        next_cursor: Option<String>,
    },
    /// A bare array (one page).
    Array(Vec<Sandbox>),
}

impl ListSandboxes {
    /// The sandboxes listed and the next page's cursor.
    pub fn into_page(self) -> corral_provider_http::Page<Sandbox> {
        match self {
            ListSandboxes::Page { items, next_cursor } => corral_provider_http::Page {
                items,
                next: next_cursor,
            },
            ListSandboxes::Array(items) => corral_provider_http::Page { items, next: None },
        }
    }
}

/// `CreateSandboxSnapshot`: the body of `POST /sandbox/{id}/snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSandboxSnapshot {
    /// The new snapshot's name (required; unique in the organization).
    pub name: String,
    /// Include the VM's memory (VM sandboxes only); Corral sends `false`.
    pub include_memory: bool,
}

/// `SnapshotDto` (the fields Corral reads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotDto {
    /// Snapshot id (what `DELETE /snapshots/{id}` takes).
    pub id: String,
    /// Name (what a create's `snapshot` and `GET /snapshots/{id}` take as well).
    pub name: String,
    /// `SnapshotState` (kept as text: unknown values must not fail).
    #[serde(default)]
    pub state: String,
    /// Size in GB, once known.
    #[serde(default)]
    pub size: Option<f64>,
}

/// Toolbox `ExecuteRequest` (`POST /process/execute`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    /// The command (run by the sandbox's shell).
    pub command: String,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Extra environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// Timeout in **seconds** (the daemon applies one only when > 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// Toolbox `ExecuteResponse`: stdout and stderr **combined** in `result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteResponse {
    /// Exit code.
    #[serde(default)]
    pub exit_code: i32,
    /// Combined output.
    pub result: String,
}

/// Toolbox `FileInfo` (the fields Corral reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileInfo {
    /// Base name.
    #[serde(default)]
    pub name: String,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// Size in bytes.
    #[serde(default)]
    pub size: u64,
}

/// Toolbox `CreateSessionRequest` (`POST /process/session`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionRequest {
    /// The session's id, chosen by the client (unique in the sandbox: 409 when taken).
    pub session_id: String,
}

/// Toolbox `Command`: one command of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Command {
    /// The command id (`cmdId`).
    pub id: String,
    /// The command as run.
    #[serde(default)]
    pub command: String,
    /// Its exit code, once it ended (absent while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// Toolbox `Session`: a shell session and the commands run in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The session id.
    pub session_id: String,
    /// Its commands, in the order they were run.
    #[serde(default)]
    pub commands: Vec<Command>,
}

/// Toolbox `SessionExecuteRequest` (`POST /process/session/{sessionId}/exec`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionExecuteRequest {
    /// The command, run by the session's shell.
    pub command: String,
    /// Answer with the command id at once (`async` is its deprecated name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_async: Option<bool>,
}

/// Toolbox `SessionExecuteResponse`: with `runAsync`, the command id only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionExecuteResponse {
    /// The command id.
    pub cmd_id: String,
    /// Its exit code (synchronous executions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}
