//! The bridge contract's wire types (docs/bridge-contract.md), named as Cloudflare's bridge
//! Worker names them; Corral's extensions are marked.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /v1/sandbox` body *(extension)*: the tag to store with the new sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// Corral's operation id.
    pub tag: String,
}

/// `POST /v1/sandbox` answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Created {
    /// The new sandbox's id (`^[a-z2-7]{1,128}$`).
    pub id: String,
    /// *(extension)* The tag, echoed when the bridge stored it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// One sandbox *(extension)*: `GET /v1/sandbox/{id}` and the items of a lookup by tag.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SandboxInfo {
    /// The sandbox id.
    pub id: String,
    /// Whether its container is alive.
    pub running: bool,
    /// The tag stored at create, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// *(lifecycle extension)* Where the sandbox is in its life, finer than `running`:
    /// `creating`, `starting`, `running`, `paused`, `stopping`, `stopped` or `failed`
    /// ([`states`]). A bridge with the stop-and-resume extension always sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// The values of [`SandboxInfo::state`] *(lifecycle extension)*.
pub mod states {
    /// Being created.
    pub const CREATING: &str = "creating";
    /// Resuming after a stop.
    pub const STARTING: &str = "starting";
    /// Ready for commands.
    pub const RUNNING: &str = "running";
    /// Asleep; the next call wakes it (Cloudflare's container sleep).
    pub const PAUSED: &str = "paused";
    /// Stopping after a stop.
    pub const STOPPING: &str = "stopping";
    /// Stopped: nothing runs, files are kept; exec, files and processes answer
    /// `409 sandbox_stopped` until a resume.
    pub const STOPPED: &str = "stopped";
    /// Broken.
    pub const FAILED: &str = "failed";
}

/// `POST /v1/sandbox/{id}/snapshots` body *(lifecycle extension)*; both fields are labels the
/// bridge may store with the snapshot (e.g. as its name in the backend).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    /// Corral's snapshot id (`snp_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The client's name for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A snapshot *(lifecycle extension)*: the answer of `POST /v1/sandbox/{id}/snapshots` and
/// `GET /v1/snapshots/{sid}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The snapshot's id (`^[A-Za-z0-9_-]{1,128}$`), chosen by the bridge.
    pub id: String,
    /// `creating`, `ready` or `failed`.
    pub status: String,
    /// Its size in bytes, when the bridge knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
}

/// `POST /v1/snapshots/{sid}/restore` body *(lifecycle extension)*: as a create's, the tag to
/// store with the new sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RestoreRequest {
    /// Corral's operation id.
    pub tag: String,
}

/// `GET /v1/sandbox?tag=…` answer *(extension)*.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SandboxList {
    /// The sandboxes carrying the tag.
    pub sandboxes: Vec<SandboxInfo>,
}

/// `GET /v1/sandbox/{id}/running` answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunningResponse {
    /// Whether the sandbox container is alive and responding.
    pub running: bool,
}

/// `POST /v1/sandbox/{id}/exec` body.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// The argv (Corral sends `["sh", "-c", <script>]`).
    pub argv: Vec<String>,
    /// Per-call timeout in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Working directory (Corral applies it in the script instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// *(extension)* Extra environment (Corral applies it in the script instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

/// The `exit` event's data.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitEvent {
    /// The command's exit code.
    pub exit_code: i32,
}

/// Every error body, and the `error` event's data.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    /// Human-readable description.
    pub error: String,
    /// Stable machine-readable code.
    pub code: String,
}

/// `PUT …/file/…` answer and other acknowledgements.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OkResponse {
    /// Always `true`.
    pub ok: bool,
}

/// `POST /v1/sandbox/{id}/process` body *(extension)*: Cloudflare's `startProcess(command,
/// {processId, cwd, env, timeout})`, with the command as an argv as on exec.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StartProcessRequest {
    /// The argv (Corral sends `["sh", "-c", <script>]`).
    pub argv: Vec<String>,
    /// The process's id, chosen by the caller (Corral's command id); a bridge that already
    /// has it answers `409 process_exists` and starts nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<String>,
    /// Whether the process gets a stdin pipe (otherwise stdin is empty).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin: bool,
    /// Working directory (Corral applies it in the script instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Extra environment (Corral applies it in the script instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Milliseconds after which the bridge kills the process (a backstop; Corral kills at its
    /// own deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A process *(extension)*: the answer of a start and a get, the items of a list (as
/// Cloudflare's `Process`: `id`, `pid`, `status`, `exitCode`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The process id (the `process_id` given at start, or one the bridge chose).
    pub id: String,
    /// The system pid, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// `starting`, `running`, `completed`, `failed`, `killed` or `error`.
    pub status: String,
    /// The exit code once ended (`128 + n` after signal `n`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// `GET /v1/sandbox/{id}/process` answer *(extension)*.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessList {
    /// The sandbox's processes.
    pub processes: Vec<ProcessInfo>,
}

/// The data of a process log stream's `stdout` / `stderr` event *(extension)*.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LogChunk {
    /// Where `data` starts in its stream, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The bytes, base64.
    pub data: String,
}

/// The data of a process log stream's `exit` event *(extension)*.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessExit {
    /// The exit code (`128 + n` after signal `n`), `null` when unknown.
    pub exit_code: Option<i32>,
}

/// `POST …/process/{process_id}/stdin` body *(extension)*.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StdinRequest {
    /// Bytes accepted before `data` (a resend of accepted bytes is skipped).
    pub offset: u64,
    /// The bytes, base64.
    pub data: String,
}

/// `POST …/process/{process_id}/stdin` answer *(extension)*.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StdinAccepted {
    /// Bytes of stdin accepted in all.
    pub accepted: u64,
}

/// `POST …/process/{process_id}/kill` body *(extension)*: Cloudflare's `killProcess(id,
/// signal)`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KillRequest {
    /// `SIGHUP`, `SIGINT`, `SIGQUIT`, `SIGKILL`, `SIGUSR1`, `SIGUSR2` or `SIGTERM`
    /// (absent: `SIGTERM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

/// Error codes Corral reads.
pub mod codes {
    /// *(extension)* The sandbox is unknown (404).
    pub const SANDBOX_NOT_FOUND: &str = "sandbox_not_found";
    /// *(extension)* The command ran past `timeout_ms` and was killed (`error` event).
    pub const EXEC_TIMEOUT: &str = "exec_timeout";
    /// The file does not exist (404).
    pub const WORKSPACE_READ_NOT_FOUND: &str = "workspace_read_not_found";
    /// The request is malformed or refused (400, 403).
    pub const INVALID_REQUEST: &str = "invalid_request";
    /// The key is missing or wrong (401).
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// The command could not be run (`error` event or 5xx).
    pub const EXEC_ERROR: &str = "exec_error";
    /// *(extension)* The process is unknown (404, or an `error` event of a log stream).
    pub const PROCESS_NOT_FOUND: &str = "process_not_found";
    /// *(extension)* A process with this id exists: nothing was started (409).
    pub const PROCESS_EXISTS: &str = "process_exists";
    /// *(extension)* The bridge cannot give processes a stdin (400).
    pub const STDIN_UNSUPPORTED: &str = "stdin_unsupported";
    /// *(extension)* The process's stdin is closed, or it has none (409).
    pub const STDIN_CLOSED: &str = "stdin_closed";
    /// *(extension)* A stdin write starts past what was accepted (409).
    pub const STDIN_OFFSET: &str = "stdin_offset";
    /// *(extension)* The bridge cannot send this signal (400).
    pub const SIGNAL_UNSUPPORTED: &str = "signal_unsupported";
    /// *(lifecycle extension)* The sandbox is stopped: exec, files and processes wait for a
    /// resume (409).
    pub const SANDBOX_STOPPED: &str = "sandbox_stopped";
    /// *(lifecycle extension)* The snapshot is unknown, or deleted (404).
    pub const SNAPSHOT_NOT_FOUND: &str = "snapshot_not_found";
    /// *(lifecycle extension)* The snapshot is still `creating`, or `failed`: nothing to
    /// restore (409).
    pub const SNAPSHOT_NOT_READY: &str = "snapshot_not_ready";
    /// *(lifecycle extension)* This bridge serves the route but its backend cannot do it
    /// (501): read as the extension missing.
    pub const LIFECYCLE_UNSUPPORTED: &str = "lifecycle_unsupported";
}

/// Whether `id` is a process id the contract accepts: `^[A-Za-z0-9_-]{1,128}$`.
pub fn is_process_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `id` is a snapshot id the contract accepts *(lifecycle extension)*: as a process
/// id, `^[A-Za-z0-9_-]{1,128}$`.
pub fn is_snapshot_id(id: &str) -> bool {
    is_process_id(id)
}

/// Whether `id` is a sandbox id the contract accepts: `^[a-z2-7]{1,128}$`.
pub fn is_sandbox_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| matches!(b, b'a'..=b'z' | b'2'..=b'7'))
}

const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Lowercase RFC 4648 base32 without padding: turns any bytes into a valid sandbox id
/// alphabet (a bridge maps its backend's ids this way).
pub fn base32(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(BASE32[((acc >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(BASE32[((acc << (5 - bits)) & 31) as usize]));
    }
    out
}

/// The inverse of [`base32`]; `None` for a character outside the alphabet or stray bits.
pub fn unbase32(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 5 / 8);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = BASE32.iter().position(|&x| x == c)?;
        acc = ((acc << 5) | v as u32) & 0xffff;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    // Leftover bits must be padding zeros of a canonical encoding.
    if bits >= 5 || acc & ((1 << bits) - 1) != 0 {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_round_trips_and_yields_valid_sandbox_ids() {
        for bytes in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar"] {
            let text = base32(bytes);
            assert_eq!(unbase32(&text).as_deref(), Some(bytes));
        }
        assert_eq!(base32(b"foobar"), "mzxw6ytboi");
        let id = base32(b"01jabcdefghjkmnpqrstvwxyz0");
        assert!(is_sandbox_id(&id), "{id}");
        assert_eq!(unbase32("mzxw6ytbo1"), None);
        assert_eq!(unbase32("mzxw6ytbop"), None);
    }

    #[test]
    fn sandbox_ids_follow_the_worker_pattern() {
        assert!(is_sandbox_id("mfrggzdfmy2tqnrzgezdgnbv"));
        for bad in ["", "ABC", "a1", "a-b", "../x", &"a".repeat(129)] {
            assert!(!is_sandbox_id(bad), "{bad}");
        }
    }
}
