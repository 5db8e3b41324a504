//! Together Sandbox's wire types, named as Together names them: the Bartender control API
//! (`api-openapi.json`, snake_case) and the in-VM Pint API (`sandbox-openapi.json`, camelCase).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Body of `POST /v1/sandboxes` (fields Corral leaves to Together's defaults are omitted:
/// `cpu` 1, `memory_bytes` 2 GB, no `termination_policy` = ephemeral).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CreateSandboxRequest {
    /// Snapshot UUID to boot from (one of `snapshot_id` / `snapshot_alias`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// Snapshot alias (`name@tag`) to boot from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_alias: Option<String>,
    /// Seconds after creation before the sandbox is terminated; absent: never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    /// User labels, filterable with `tags[key]=value` on list.
    pub tags: BTreeMap<String, String>,
}

/// `Sandbox.agent`: how to reach the in-VM API; both null unless the sandbox is running.
/// `Debug` never shows the token.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    /// Agent version.
    #[serde(default)]
    pub version: Option<String>,
    /// Bearer token for the in-VM API.
    #[serde(default)]
    pub token: Option<String>,
    /// Base URL of the in-VM API.
    #[serde(default)]
    pub url: Option<String>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("version", &self.version)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("url", &self.url)
            .finish()
    }
}

/// `Sandbox` (fields Corral does not use are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sandbox {
    /// UUID.
    pub id: String,
    /// `starting`, `running`, `terminating`, `terminated`, `failed_to_start`, `recovering`,
    /// `unrecovered` (kept as text: the enum may grow).
    pub status: String,
    /// Why the sandbox is in its status.
    #[serde(default)]
    pub status_reason: Option<String>,
    /// Snapshot it booted from.
    #[serde(default)]
    pub snapshot_id: Option<String>,
    /// In-VM API access.
    #[serde(default)]
    pub agent: Agent,
    /// Lifetime in seconds from creation, or null.
    #[serde(default)]
    pub ttl: Option<u64>,
    /// User labels.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// `SandboxPage`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxPage {
    /// This page.
    pub data: Vec<Sandbox>,
    /// Cursor for the next page; null at the end.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// Body of `POST /v1/sandboxes/{id}/terminate`: `snapshot: null` makes the teardown
/// ephemeral (no snapshot is taken).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TerminateRequest {
    /// The snapshot to take, or null for none.
    pub snapshot: Option<serde_json::Value>,
}

/// Pint `CreateExecRequest`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateExecRequest {
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Working directory (default: the workspace directory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Extra environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub env: BTreeMap<String, String>,
    /// Start at once (the default, sent explicitly).
    pub autostart: bool,
}

/// Pint `ExecItem`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecItem {
    /// Exec id.
    pub id: String,
    /// e.g. `running`, `stopped`, `finished`.
    pub status: String,
    /// Exit code, meaningful only once the process has exited.
    #[serde(rename = "exitCode", default)]
    pub exit_code: Option<i32>,
}

/// Pint `ExecStdout`: one output message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecStdout {
    /// `stdout` or `stderr`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text.
    pub output: String,
    /// Sequence number.
    pub sequence: i64,
    /// Exit code, on the message sent when the process exited.
    #[serde(rename = "exitCode", default)]
    pub exit_code: Option<i32>,
}

/// Pint `FileInfo` (`GET /api/v1/file_stat/{path}`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileInfo {
    /// Name.
    pub name: String,
    /// Full path.
    pub path: String,
    /// Whether it is a directory.
    #[serde(rename = "isDir")]
    pub is_dir: bool,
    /// Size in bytes.
    pub size: u64,
}

/// Pint `FileReadResponse`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileReadResponse {
    /// Path.
    pub path: String,
    /// Content, encoded as `encoding` says.
    pub content: String,
    /// `utf-8` or `base64`.
    pub encoding: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_agent_token() {
        let agent = Agent {
            version: None,
            token: Some("agent-secret-77".into()),
            url: Some("https://vm.example".into()),
        };
        let shown = format!("{agent:?}");
        assert!(
            !shown.contains("agent-secret-77") && shown.contains("[redacted]"),
            "{shown}"
        );
    }
}
