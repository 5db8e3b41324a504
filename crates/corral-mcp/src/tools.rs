//! The tools: inputs (schemars schemas), structured outputs and the v3 error as a tool error.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use corral_client::Client;
use corral_domain::{
    CommandId, CreateSandboxRequest, CreateSnapshotInput, FileEncoding, ForkInput, OutputEvent,
    OutputStream, Provider, ReadFileInput, SandboxId, Signal, SignalInput, SnapshotId,
    StartCommandInput, WriteFileInput,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{Json, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::backend::{Backend, HttpBackend};
use crate::error::ToolError;

/// What each stream of `command_run` keeps at most (the rest is left out, `truncated`).
const RUN_OUTPUT_CAP: usize = 1024 * 1024;
/// `command_run`'s default and largest bound.
const RUN_DEFAULT_SECONDS: u64 = 60;
const RUN_MAX_SECONDS: u64 = 600;
/// How long `command_output` may wait for new output at most.
const OUTPUT_MAX_WAIT_SECONDS: u64 = 30;
/// One long poll of `command_run`'s wait for the end (the API caps `?wait=` at 60 s).
const WAIT_STEP: Duration = Duration::from_secs(30);
/// Between two reads of a quiet command's output while waiting.
const OUTPUT_POLL: Duration = Duration::from_millis(200);

fn sandbox_id(s: &str) -> Result<SandboxId, ToolError> {
    s.parse()
        .map_err(|_| ToolError::invalid(format!("`{s}` is not a sandbox id")))
}

fn snapshot_id(s: &str) -> Result<SnapshotId, ToolError> {
    s.parse()
        .map_err(|_| ToolError::invalid(format!("`{s}` is not a snapshot id")))
}

fn command_id(s: &str) -> Result<CommandId, ToolError> {
    s.parse()
        .map_err(|_| ToolError::invalid(format!("`{s}` is not a command id")))
}

fn to_value(v: &impl Serialize) -> Value {
    // Domain types serialize to JSON without failure (no maps with non-string keys).
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Content as the API takes it: `utf8` (default) or `base64` for binary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// UTF-8 text.
    #[default]
    Utf8,
    /// Base64 (standard alphabet, padded) for binary content.
    Base64,
}

impl From<Encoding> for FileEncoding {
    fn from(e: Encoding) -> Self {
        match e {
            Encoding::Utf8 => FileEncoding::Utf8,
            Encoding::Base64 => FileEncoding::Base64,
        }
    }
}

/// A signal to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
#[allow(missing_docs)]
pub enum SignalName {
    Hup,
    Int,
    Quit,
    Kill,
    Usr1,
    Usr2,
    Term,
}

impl From<SignalName> for Signal {
    fn from(s: SignalName) -> Self {
        match s {
            SignalName::Hup => Signal::Hup,
            SignalName::Int => Signal::Int,
            SignalName::Quit => Signal::Quit,
            SignalName::Kill => Signal::Kill,
            SignalName::Usr1 => Signal::Usr1,
            SignalName::Usr2 => Signal::Usr2,
            SignalName::Term => Signal::Term,
        }
    }
}

/// `sandbox_create`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateIn {
    /// The provider (`providers_list` names them), e.g. `local`, `e2b`, `daytona`.
    pub provider: String,
    /// The image or template, when the provider takes one.
    #[serde(default)]
    pub image: Option<String>,
    /// The sandbox's lifetime in seconds, within the provider's bounds.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Restore this snapshot (`snp_…`, from `snapshot_create` or `snapshot_list`) instead of
    /// starting from an image: same provider, no `image`.
    #[serde(default)]
    pub snapshot: Option<String>,
    /// Calls on the sandbox while it is stopped resume it first (instead of failing with
    /// `sandbox_stopped`). Needs a provider that can stop (`supportsExplicitStop`).
    #[serde(default)]
    pub auto_resume: Option<bool>,
    /// Stop the sandbox after this many seconds without command, exec or file activity
    /// (60 to 2592000). Needs a provider that can stop (`supportsExplicitStop`).
    #[serde(default)]
    #[schemars(range(min = 60, max = 2_592_000))]
    pub idle_stop_seconds: Option<u64>,
}

/// `snapshot_create`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotCreateIn {
    /// The sandbox id (`sbx_…`).
    pub sandbox_id: String,
    /// A name for people (1 to 128 printable characters).
    #[serde(default)]
    #[schemars(length(min = 1, max = 128))]
    pub name: Option<String>,
}

/// `sandbox_fork`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkIn {
    /// The sandbox id (`sbx_…`).
    pub sandbox_id: String,
    /// How many copies (1–10, default 1).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10))]
    pub count: Option<u64>,
}

/// A snapshot id.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotIn {
    /// The snapshot id (`snp_…`).
    pub snapshot_id: String,
}

/// A sandbox id.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxIn {
    /// The sandbox id (`sbx_…`).
    pub sandbox_id: String,
}

/// `sandbox_list`'s input.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListIn {
    /// The cursor of the next page, from an earlier answer's `nextCursor`.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Page size (1–100).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
}

/// `command_run`'s and `command_start`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandIn {
    /// The sandbox id (`sbx_…`).
    pub sandbox_id: String,
    /// The command, run with `sh -c`.
    pub command: String,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// The time bound in seconds: the command is killed after it (`command_run`: default 60,
    /// at most 600; `command_start`: the server's default and maximum).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<u64>,
}

impl CommandIn {
    fn start_input(&self, timeout: Option<u64>) -> StartCommandInput {
        StartCommandInput {
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            env: self.env.clone(),
            timeout_seconds: timeout,
            tag: Some("mcp".to_owned()),
            ..Default::default()
        }
    }
}

/// `command_output`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OutputIn {
    /// The sandbox id (`sbx_…`).
    pub sandbox_id: String,
    /// The command id (`cmd_…`) `command_start` answered.
    pub command_id: String,
    /// Output after this cursor: 0 (or absent) for the start, else the `cursor` of the
    /// previous answer.
    #[serde(default)]
    pub cursor: Option<u64>,
    /// When nothing new is there yet, wait up to this many seconds (0–30) for output or the
    /// end before answering.
    #[serde(default)]
    #[schemars(range(min = 0, max = 30))]
    pub wait_seconds: Option<u64>,
}

/// `command_signal`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignalIn {
    /// The sandbox id (`sbx_…`).
    pub sandbox_id: String,
    /// The command id (`cmd_…`).
    pub command_id: String,
    /// The signal (the provider's capabilities list the ones it delivers).
    pub signal: SignalName,
}

/// `file_read`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadIn {
    /// The sandbox id (`sbx_…`).
    pub sandbox_id: String,
    /// The file's path in the sandbox.
    pub path: String,
    /// `utf8` (default; fails with `file_not_utf8` on binary) or `base64`.
    #[serde(default)]
    pub encoding: Option<Encoding>,
}

/// `file_write`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteIn {
    /// The sandbox id (`sbx_…`).
    pub sandbox_id: String,
    /// The file's path in the sandbox (created or replaced whole).
    pub path: String,
    /// The content, as `encoding` says (at most 1 MiB decoded).
    pub content: String,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub encoding: Option<Encoding>,
}

/// The providers.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvidersOut {
    /// Each configured provider with its capabilities (the API's `ProviderCapabilities`).
    pub providers: Vec<Value>,
}

/// One sandbox.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxOut {
    /// The sandbox as the API answers it (`id`, `provider`, `status`, …).
    pub sandbox: Value,
}

/// A page of sandboxes.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxListOut {
    /// Newest first, deleted ones included.
    pub sandboxes: Vec<Value>,
    /// The next page's cursor, absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One snapshot.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotOut {
    /// The snapshot as the API answers it (`id`, `sandboxId`, `provider`, `name`, `status`:
    /// `creating`, `ready`, `failed` or `deleted`, …).
    pub snapshot: Value,
}

/// A page of snapshots.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotListOut {
    /// Newest first, deleted ones included.
    pub snapshots: Vec<Value>,
    /// The next page's cursor, absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A fork's snapshot and copies.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForkOut {
    /// The snapshot taken of the sandbox, which every copy was restored from.
    pub snapshot_id: String,
    /// The copies, each a sandbox of its own as the API answers it (they may still be
    /// `creating`).
    pub sandboxes: Vec<Value>,
}

/// A finished short command.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunOut {
    /// The command id (its output stays readable with `command_output`).
    pub command_id: String,
    /// `exited`, `killed`, `timed_out` or `lost`.
    pub state: String,
    /// The exit code, when known.
    pub exit_code: Option<i32>,
    /// Standard output (binary bytes replaced by U+FFFD).
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Whether output was left out (over 1 MiB per stream, or lost).
    pub truncated: bool,
}

/// A started long command.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartOut {
    /// The command id, for `command_output` and `command_signal`.
    pub command_id: String,
    /// Its state now.
    pub state: String,
    /// The cursor to read its output from (0: the start).
    pub cursor: u64,
    /// The time bound the server applies, in seconds.
    pub timeout_seconds: u64,
}

/// Output since a cursor.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputOut {
    /// New standard output.
    pub stdout: String,
    /// New standard error.
    pub stderr: String,
    /// Pass this as `cursor` to read what follows.
    pub cursor: u64,
    /// Whether the command has ended (all its output has then been read once `exited` is
    /// true).
    pub exited: bool,
    /// The final state, once ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The exit code, once ended and known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Byte offset of the end of the standard output read so far.
    pub stdout_offset: u64,
    /// Byte offset of the end of the standard error read so far.
    pub stderr_offset: u64,
    /// Whether some output was lost (dropped by retention).
    pub gap: bool,
}

/// A command after a signal.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommandOut {
    /// The command as the API answers it (`id`, `state`, `exitCode`, …).
    pub command: Value,
}

/// A file's content.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadOut {
    /// The path read.
    pub path: String,
    /// The content, as `encoding` says.
    pub content: String,
    /// `utf8` or `base64`.
    pub encoding: Encoding,
}

/// A written file.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteOut {
    /// The path written.
    pub path: String,
    /// Bytes written.
    pub bytes_written: u64,
}

/// Bytes of one output event, decoded.
fn event_bytes(data: &str, encoding: FileEncoding) -> Vec<u8> {
    match encoding {
        FileEncoding::Utf8 => data.as_bytes().to_vec(),
        FileEncoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap_or_default(),
    }
}

/// Adds a page's events to `out` (stdout and stderr bytes, capped at `cap` each).
#[derive(Default)]
struct Collected {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_offset: u64,
    stderr_offset: u64,
    gap: bool,
    truncated: bool,
    exit: Option<(String, Option<i32>)>,
}

impl Collected {
    fn add(&mut self, events: Vec<OutputEvent>, cap: usize) {
        for event in events {
            match event {
                OutputEvent::Output {
                    stream,
                    offset,
                    data,
                    encoding,
                    ..
                } => {
                    let bytes = event_bytes(&data, encoding);
                    let end = offset + bytes.len() as u64;
                    let (buf, at) = match stream {
                        OutputStream::Stdout => (&mut self.stdout, &mut self.stdout_offset),
                        OutputStream::Stderr => (&mut self.stderr, &mut self.stderr_offset),
                    };
                    *at = (*at).max(end);
                    let room = cap.saturating_sub(buf.len());
                    if bytes.len() > room {
                        self.truncated = true;
                    }
                    buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
                }
                OutputEvent::Gap { .. } => {
                    self.gap = true;
                    self.truncated = true;
                }
                OutputEvent::Exit {
                    state, exit_code, ..
                } => self.exit = Some((state.as_str().to_owned(), exit_code)),
            }
        }
    }
}

/// Corral's tools over one [`Backend`] (one project's caller). Cheap to clone.
#[derive(Clone)]
pub struct CorralTools {
    backend: Arc<dyn Backend>,
    tool_router: ToolRouter<Self>,
}

impl std::fmt::Debug for CorralTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CorralTools").finish_non_exhaustive()
    }
}

#[tool_router]
impl CorralTools {
    /// The tools over `backend` (which decides the server, or process, and the project).
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            tool_router: Self::tool_router(),
        }
    }

    /// The tools over a Corral server's HTTP API (`client`'s URL and key decide which server
    /// and project).
    pub fn over_http(client: Client) -> Self {
        Self::new(Arc::new(HttpBackend(client)))
    }

    /// The names of every tool, in listing order.
    pub fn tool_names(&self) -> Vec<String> {
        self.tool_router
            .list_all()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect()
    }

    /// List the configured providers with their capabilities.
    #[tool(
        description = "List the configured sandbox providers with their capabilities (timeouts, signals, file and command support)."
    )]
    async fn providers_list(&self) -> Result<Json<ProvidersOut>, ToolError> {
        let catalog = self.backend.providers().await?;
        Ok(Json(ProvidersOut {
            providers: catalog.providers.iter().map(to_value).collect(),
        }))
    }

    /// Create a sandbox.
    #[tool(
        description = "Create a sandbox on a provider (e.g. `local`), or restore one from a snapshot (`snapshot`, on the snapshot's provider). Answers the sandbox; it may still be `creating`: `sandbox_get` shows when it is `running`. `autoResume` and `idleStopSeconds` need a provider that can stop."
    )]
    async fn sandbox_create(
        &self,
        Parameters(input): Parameters<CreateIn>,
    ) -> Result<Json<SandboxOut>, ToolError> {
        let provider: Provider = input.provider.parse().map_err(|_| {
            ToolError::invalid(format!(
                "`{}` is not a provider (`providers_list` names them)",
                input.provider
            ))
        })?;
        let request = CreateSandboxRequest::standard(provider, input.image, input.timeout_seconds);
        let request = match input.snapshot.as_deref() {
            Some(s) => {
                let snapshot = snapshot_id(s)?;
                if request.image().is_some() {
                    return Err(ToolError::invalid(
                        "`image` must be absent when restoring a snapshot",
                    ));
                }
                request.restoring(snapshot)
            }
            None => request,
        };
        let request =
            request.with_lifecycle(input.auto_resume.unwrap_or(false), input.idle_stop_seconds);
        let sandbox = self.backend.create_sandbox(request).await?;
        Ok(Json(SandboxOut {
            sandbox: to_value(&sandbox),
        }))
    }

    /// List sandboxes.
    #[tool(description = "List the project's sandboxes, newest first, one page at a time.")]
    async fn sandbox_list(
        &self,
        Parameters(input): Parameters<ListIn>,
    ) -> Result<Json<SandboxListOut>, ToolError> {
        let page = self
            .backend
            .list_sandboxes(input.cursor, input.limit)
            .await?;
        Ok(Json(SandboxListOut {
            sandboxes: page.items.iter().map(to_value).collect(),
            next_cursor: page.next_cursor,
        }))
    }

    /// Get one sandbox.
    #[tool(description = "Get one sandbox: its provider, status and timestamps.")]
    async fn sandbox_get(
        &self,
        Parameters(input): Parameters<SandboxIn>,
    ) -> Result<Json<SandboxOut>, ToolError> {
        let sandbox = self
            .backend
            .get_sandbox(sandbox_id(&input.sandbox_id)?)
            .await?;
        Ok(Json(SandboxOut {
            sandbox: to_value(&sandbox),
        }))
    }

    /// Delete a sandbox.
    #[tool(
        description = "Delete a sandbox (its provider's machine is destroyed). Answers the tombstone."
    )]
    async fn sandbox_delete(
        &self,
        Parameters(input): Parameters<SandboxIn>,
    ) -> Result<Json<SandboxOut>, ToolError> {
        let sandbox = self
            .backend
            .delete_sandbox(sandbox_id(&input.sandbox_id)?)
            .await?;
        Ok(Json(SandboxOut {
            sandbox: to_value(&sandbox),
        }))
    }

    /// Stop a sandbox.
    #[tool(
        description = "Stop a sandbox: nothing runs in it and its files are kept (its memory too where the provider's `lifecycle.stopKeepsMemory`). Commands and files on it then fail with `sandbox_stopped` until `sandbox_resume`, unless it was created with `autoResume`. Answers the sandbox, `stopping` or `stopped`."
    )]
    async fn sandbox_stop(
        &self,
        Parameters(input): Parameters<SandboxIn>,
    ) -> Result<Json<SandboxOut>, ToolError> {
        let sandbox = self
            .backend
            .stop_sandbox(sandbox_id(&input.sandbox_id)?)
            .await?;
        Ok(Json(SandboxOut {
            sandbox: to_value(&sandbox),
        }))
    }

    /// Resume a stopped sandbox.
    #[tool(
        description = "Resume a stopped sandbox. Answers the sandbox, `starting` or `running`: `sandbox_get` shows when it is `running`."
    )]
    async fn sandbox_resume(
        &self,
        Parameters(input): Parameters<SandboxIn>,
    ) -> Result<Json<SandboxOut>, ToolError> {
        let sandbox = self
            .backend
            .resume_sandbox(sandbox_id(&input.sandbox_id)?)
            .await?;
        Ok(Json(SandboxOut {
            sandbox: to_value(&sandbox),
        }))
    }

    /// Fork a sandbox.
    #[tool(
        description = "Fork a sandbox: snapshot it and restore the snapshot into `count` new, independent sandboxes (1–10, default 1). Answers the snapshot id and the copies (they may still be `creating`)."
    )]
    async fn sandbox_fork(
        &self,
        Parameters(input): Parameters<ForkIn>,
    ) -> Result<Json<ForkOut>, ToolError> {
        let id = sandbox_id(&input.sandbox_id)?;
        let fork = ForkInput { count: input.count };
        fork.count()
            .map_err(|e| ToolError::invalid(e.to_string()))?;
        let forked = self.backend.fork_sandbox(id, fork).await?;
        Ok(Json(ForkOut {
            snapshot_id: forked.snapshot_id.to_string(),
            sandboxes: forked.sandboxes.iter().map(to_value).collect(),
        }))
    }

    /// Snapshot a sandbox.
    #[tool(
        description = "Snapshot a sandbox's filesystem (and memory where the provider's `lifecycle.snapshotKeepsMemory`). Answers the snapshot, `creating` until it is `ready` (`snapshot_list` shows it). Restore it with `sandbox_create` and `snapshot`."
    )]
    async fn snapshot_create(
        &self,
        Parameters(input): Parameters<SnapshotCreateIn>,
    ) -> Result<Json<SnapshotOut>, ToolError> {
        let id = sandbox_id(&input.sandbox_id)?;
        let body = CreateSnapshotInput { name: input.name };
        body.validate()
            .map_err(|e| ToolError::invalid(e.to_string()))?;
        let snapshot = self.backend.create_snapshot(id, body).await?;
        Ok(Json(SnapshotOut {
            snapshot: to_value(&snapshot),
        }))
    }

    /// List snapshots.
    #[tool(
        description = "List the project's snapshots, newest first (deleted ones included), one page at a time."
    )]
    async fn snapshot_list(
        &self,
        Parameters(input): Parameters<ListIn>,
    ) -> Result<Json<SnapshotListOut>, ToolError> {
        let page = self
            .backend
            .list_snapshots(input.cursor, input.limit)
            .await?;
        Ok(Json(SnapshotListOut {
            snapshots: page.items.iter().map(to_value).collect(),
            next_cursor: page.next_cursor,
        }))
    }

    /// Delete a snapshot.
    #[tool(description = "Delete a snapshot at its provider. Answers the tombstone (`deleted`).")]
    async fn snapshot_delete(
        &self,
        Parameters(input): Parameters<SnapshotIn>,
    ) -> Result<Json<SnapshotOut>, ToolError> {
        let snapshot = self
            .backend
            .delete_snapshot(snapshot_id(&input.snapshot_id)?)
            .await?;
        Ok(Json(SnapshotOut {
            snapshot: to_value(&snapshot),
        }))
    }

    /// Run a short command to its end.
    #[tool(
        description = "Run a short shell command in a sandbox and wait for it: answers stdout, stderr and the exit code. Killed after `timeoutSeconds` (default 60, at most 600). For longer work use `command_start` and `command_output`."
    )]
    async fn command_run(
        &self,
        Parameters(input): Parameters<CommandIn>,
    ) -> Result<Json<RunOut>, ToolError> {
        let id = sandbox_id(&input.sandbox_id)?;
        let bound = input.timeout_seconds.unwrap_or(RUN_DEFAULT_SECONDS);
        if !(1..=RUN_MAX_SECONDS).contains(&bound) {
            return Err(ToolError::invalid(format!(
                "`timeoutSeconds` must be 1–{RUN_MAX_SECONDS} for command_run (use command_start for longer commands)"
            )));
        }
        let command = self
            .backend
            .start_command(id, input.start_input(Some(bound)))
            .await?;
        // The server kills the command at `bound`; the extra grace covers its reaping.
        let waited = tokio::time::timeout(
            Duration::from_secs(bound + 30),
            self.wait_command(&id, &command.id),
        )
        .await;
        let ended = match waited {
            Ok(ended) => ended?,
            Err(_) => {
                return Err(ToolError {
                    code: corral_errors::ErrorCode::RequestTimeout.as_str().to_owned(),
                    message: format!(
                        "command {} did not end within {bound} s; read it with command_output or signal it",
                        command.id
                    ),
                    request_id: None,
                    retryable: false,
                });
            }
        };
        let mut out = Collected::default();
        let mut after = 0;
        loop {
            let page = self.backend.output_page(id, command.id, after).await?;
            let (next, done, empty) = (page.next_after, page.done, page.events.is_empty());
            out.add(page.events, RUN_OUTPUT_CAP);
            if done || empty || next == after {
                break;
            }
            after = next;
        }
        Ok(Json(RunOut {
            command_id: command.id.to_string(),
            state: ended.state.as_str().to_owned(),
            exit_code: ended.exit_code,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            truncated: out.truncated,
        }))
    }

    /// Start a long command.
    #[tool(
        description = "Start a long-running shell command in a sandbox and answer at once with its id. Read its output with `command_output` (from cursor 0), stop it with `command_signal`."
    )]
    async fn command_start(
        &self,
        Parameters(input): Parameters<CommandIn>,
    ) -> Result<Json<StartOut>, ToolError> {
        let id = sandbox_id(&input.sandbox_id)?;
        let command = self
            .backend
            .start_command(id, input.start_input(input.timeout_seconds))
            .await?;
        Ok(Json(StartOut {
            command_id: command.id.to_string(),
            state: command.state.as_str().to_owned(),
            cursor: 0,
            timeout_seconds: command.timeout_seconds,
        }))
    }

    /// Read a command's output since a cursor.
    #[tool(
        description = "Read a started command's output since `cursor` (0 for the start). Answers the new stdout and stderr, the `cursor` to pass next time, and `exited` (with the exit code) once the command has ended. `waitSeconds` waits for something new first."
    )]
    async fn command_output(
        &self,
        Parameters(input): Parameters<OutputIn>,
    ) -> Result<Json<OutputOut>, ToolError> {
        let id = sandbox_id(&input.sandbox_id)?;
        let cmd = command_id(&input.command_id)?;
        let after = input.cursor.unwrap_or(0);
        let wait = input.wait_seconds.unwrap_or(0);
        if wait > OUTPUT_MAX_WAIT_SECONDS {
            return Err(ToolError::invalid(format!(
                "`waitSeconds` must be at most {OUTPUT_MAX_WAIT_SECONDS}"
            )));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
        let page = loop {
            let page = self.backend.output_page(id, cmd, after).await?;
            if !page.events.is_empty() || page.done || tokio::time::Instant::now() >= deadline {
                break page;
            }
            tokio::time::sleep(OUTPUT_POLL).await;
        };
        let mut out = Collected::default();
        let cursor = page.next_after.max(after);
        let done = page.done;
        out.add(page.events, usize::MAX);
        let (state, exit_code) = match out.exit.take() {
            Some((state, code)) => (Some(state), code),
            None => (None, None),
        };
        Ok(Json(OutputOut {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            cursor,
            exited: done || state.is_some(),
            state,
            exit_code,
            stdout_offset: out.stdout_offset,
            stderr_offset: out.stderr_offset,
            gap: out.gap,
        }))
    }

    /// Signal a command.
    #[tool(description = "Send a signal (TERM, INT, KILL, …) to a started command.")]
    async fn command_signal(
        &self,
        Parameters(input): Parameters<SignalIn>,
    ) -> Result<Json<CommandOut>, ToolError> {
        let id = sandbox_id(&input.sandbox_id)?;
        let cmd = command_id(&input.command_id)?;
        let command = self
            .backend
            .signal_command(
                id,
                cmd,
                SignalInput {
                    signal: input.signal.into(),
                },
            )
            .await?;
        Ok(Json(CommandOut {
            command: to_value(&command),
        }))
    }

    /// Read a file.
    #[tool(
        description = "Read a file from a sandbox, as UTF-8 text (default) or base64 for binary."
    )]
    async fn file_read(
        &self,
        Parameters(input): Parameters<ReadIn>,
    ) -> Result<Json<ReadOut>, ToolError> {
        let id = sandbox_id(&input.sandbox_id)?;
        let result = self
            .backend
            .read_file(
                id,
                ReadFileInput {
                    path: input.path,
                    encoding: input.encoding.map(Into::into),
                },
            )
            .await?;
        Ok(Json(ReadOut {
            path: result.path,
            content: result.content,
            encoding: match result.encoding {
                FileEncoding::Utf8 => Encoding::Utf8,
                FileEncoding::Base64 => Encoding::Base64,
            },
        }))
    }

    /// Write a file.
    #[tool(
        description = "Write a whole file in a sandbox (created or replaced), from UTF-8 text (default) or base64 for binary; at most 1 MiB."
    )]
    async fn file_write(
        &self,
        Parameters(input): Parameters<WriteIn>,
    ) -> Result<Json<WriteOut>, ToolError> {
        let id = sandbox_id(&input.sandbox_id)?;
        let result = self
            .backend
            .write_file(
                id,
                WriteFileInput {
                    path: input.path,
                    content: input.content,
                    encoding: input.encoding.map(Into::into),
                },
            )
            .await?;
        Ok(Json(WriteOut {
            path: result.path,
            bytes_written: result.bytes_written,
        }))
    }
}

impl CorralTools {
    /// Waits until the command ends (the API's long poll, [`WAIT_STEP`] at a time), and
    /// answers it.
    async fn wait_command(
        &self,
        id: &SandboxId,
        cmd: &CommandId,
    ) -> Result<corral_domain::Command, ToolError> {
        loop {
            let c = self.backend.command(*id, *cmd, Some(WAIT_STEP)).await?;
            if c.state.is_final() {
                return Ok(c);
            }
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for CorralTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("corral", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Corral sandboxes: create one (`sandbox_create`, provider from `providers_list`), \
                 run short commands with `command_run`, long ones with `command_start` + \
                 `command_output` (a cursor you pass back), move files with `file_read`/`file_write`, \
                 stop and resume it (`sandbox_stop`, `sandbox_resume`), snapshot it \
                 (`snapshot_create`, restored by `sandbox_create` with `snapshot`) or fork it \
                 (`sandbox_fork`), and `sandbox_delete` when done. Errors carry Corral's v3 `code`.",
            )
    }
}

#[cfg(test)]
mod tests {
    use rmcp::handler::server::tool::IntoCallToolResult;
    use rmcp::model::CallToolResponse;
    use serde_json::json;

    use super::*;

    #[test]
    fn every_tool_is_listed_with_an_object_input_schema_and_an_output_schema() {
        let tools = CorralTools::over_http(Client::new("http://127.0.0.1:9", "k").unwrap());
        let listed = tools.tool_router.list_all();
        let mut names: Vec<_> = listed.iter().map(|t| t.name.to_string()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "command_output",
                "command_run",
                "command_signal",
                "command_start",
                "file_read",
                "file_write",
                "providers_list",
                "sandbox_create",
                "sandbox_delete",
                "sandbox_fork",
                "sandbox_get",
                "sandbox_list",
                "sandbox_resume",
                "sandbox_stop",
                "snapshot_create",
                "snapshot_delete",
                "snapshot_list",
            ]
        );
        for tool in &listed {
            assert_eq!(
                tool.input_schema.get("type"),
                Some(&json!("object")),
                "{}",
                tool.name
            );
            assert!(
                tool.output_schema.is_some(),
                "{} has no output schema",
                tool.name
            );
        }
        let run = listed.iter().find(|t| t.name == "command_run").unwrap();
        let required = run.input_schema.get("required").unwrap();
        assert!(required.as_array().unwrap().contains(&json!("command")));
    }

    #[test]
    fn output_pages_are_decoded_capped_and_end_at_the_exit() {
        let mut c = Collected::default();
        c.add(
            vec![
                OutputEvent::Output {
                    seq: 1,
                    stream: OutputStream::Stdout,
                    offset: 0,
                    data: "hello ".into(),
                    encoding: FileEncoding::Utf8,
                },
                OutputEvent::Output {
                    seq: 2,
                    stream: OutputStream::Stderr,
                    offset: 0,
                    data: base64::engine::general_purpose::STANDARD.encode([0xff, b'x']),
                    encoding: FileEncoding::Base64,
                },
                OutputEvent::Output {
                    seq: 3,
                    stream: OutputStream::Stdout,
                    offset: 6,
                    data: "world".into(),
                    encoding: FileEncoding::Utf8,
                },
                OutputEvent::Exit {
                    seq: 4,
                    state: corral_domain::CommandState::Exited,
                    exit_code: Some(3),
                },
            ],
            8,
        );
        assert_eq!(c.stdout, b"hello wo");
        assert!(c.truncated);
        assert_eq!(c.stdout_offset, 11);
        assert_eq!(c.stderr, [0xff, b'x']);
        assert_eq!(c.stderr_offset, 2);
        assert_eq!(c.exit, Some(("exited".to_owned(), Some(3))));
    }

    #[tokio::test]
    async fn an_unreachable_server_is_a_tool_error_with_a_v3_code_not_a_protocol_error() {
        // Port 9 (discard) on loopback: nothing listens, the connection is refused.
        let client = Client::new("http://127.0.0.1:9", "crl_x_y")
            .unwrap()
            .with_retry(corral_client::RetryPolicy::none());
        let tools = CorralTools::over_http(client);
        let Err(err) = tools.providers_list().await else {
            panic!("an unreachable server answered");
        };
        assert_eq!(err.code, "provider_unavailable");
        assert!(err.retryable);
        let result = err.into_call_tool_result().unwrap();
        let CallToolResponse::Complete(result) = result else {
            panic!("not a complete result");
        };
        assert_eq!(result.is_error, Some(true));
        let structured = result.structured_content.unwrap();
        assert_eq!(structured["error"]["code"], "provider_unavailable");
    }

    #[test]
    fn the_lifecycle_tools_describe_their_inputs() {
        let tools = CorralTools::over_http(Client::new("http://127.0.0.1:9", "k").unwrap());
        let listed = tools.tool_router.list_all();
        let schema = |name: &str| {
            listed
                .iter()
                .find(|t| t.name == name)
                .unwrap()
                .input_schema
                .clone()
        };
        let fork = schema("sandbox_fork");
        assert_eq!(fork["properties"]["count"]["minimum"], json!(1));
        assert_eq!(fork["properties"]["count"]["maximum"], json!(10));
        assert_eq!(fork["required"], json!(["sandboxId"]));
        assert_eq!(schema("snapshot_delete")["required"], json!(["snapshotId"]));
        assert_eq!(schema("sandbox_stop")["required"], json!(["sandboxId"]));
        assert_eq!(schema("sandbox_resume")["required"], json!(["sandboxId"]));
        let snap = schema("snapshot_create");
        assert_eq!(snap["required"], json!(["sandboxId"]));
        assert_eq!(snap["properties"]["name"]["maxLength"], json!(128));
        let create = schema("sandbox_create")["properties"].clone();
        for field in ["snapshot", "autoResume", "idleStopSeconds"] {
            assert!(create.get(field).is_some(), "sandbox_create lacks {field}");
        }
        assert!(
            schema("snapshot_list")["properties"]
                .get("cursor")
                .is_some()
        );
    }

    #[tokio::test]
    async fn lifecycle_input_is_refused_before_any_call() {
        // Nothing listens on port 9: a call that reached the network would answer
        // `provider_unavailable`, so `invalid_request` proves the tool refused first.
        let tools = CorralTools::over_http(
            Client::new("http://127.0.0.1:9", "k")
                .unwrap()
                .with_retry(corral_client::RetryPolicy::none()),
        );
        fn refused<T>(r: Result<T, ToolError>) -> String {
            match r {
                Err(e) => {
                    assert_eq!(e.code, "invalid_request", "{}", e.message);
                    e.message
                }
                Ok(_) => panic!("accepted"),
            }
        }
        let create = |snapshot: &str, image: Option<&str>| CreateIn {
            provider: "local".into(),
            image: image.map(str::to_owned),
            timeout_seconds: None,
            snapshot: Some(snapshot.to_owned()),
            auto_resume: None,
            idle_stop_seconds: None,
        };
        refused(tools.sandbox_create(Parameters(create(SBX, None))).await);
        refused(
            tools
                .sandbox_create(Parameters(create(SNP, Some("alpine"))))
                .await,
        );
        refused(
            tools
                .snapshot_delete(Parameters(SnapshotIn {
                    snapshot_id: SBX.into(),
                }))
                .await,
        );
        refused(
            tools
                .sandbox_stop(Parameters(SandboxIn {
                    sandbox_id: SNP.into(),
                }))
                .await,
        );
        refused(
            tools
                .sandbox_resume(Parameters(SandboxIn {
                    sandbox_id: "x".into(),
                }))
                .await,
        );
        for count in [0, 11] {
            let message = refused(
                tools
                    .sandbox_fork(Parameters(ForkIn {
                        sandbox_id: SBX.into(),
                        count: Some(count),
                    }))
                    .await,
            );
            assert!(message.contains("count"), "{message}");
        }
        refused(
            tools
                .snapshot_create(Parameters(SnapshotCreateIn {
                    sandbox_id: SBX.into(),
                    name: Some(" ".into()),
                }))
                .await,
        );
    }

    const SBX: &str = "sbx_local_01j9zzzzzzzzzzzzzzzzzzzzzz";
    const SNP: &str = "snp_local_01j9zzzzzzzzzzzzzzzzzzzzzz";

    /// Answers one HTTP request on a loopback port with `status` and `body`; the task's
    /// result is the request as received (head and body).
    async fn answer_once(status: u16, body: Value) -> (String, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = conn.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).into_owned();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if got.len() >= end + 4 + length || n == 0 {
                        break;
                    }
                }
                assert!(n > 0, "the client closed before its request was complete");
            }
            let body = body.to_string();
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            conn.write_all(reply.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&got).into_owned()
        });
        (base, task)
    }

    fn sandbox_json(id: &str) -> Value {
        json!({
            "id": id,
            "provider": "local",
            "status": "creating",
            "metadata": {"operationId": "op_01j9zzzzzzzzzzzzzzzzzzzzzz", "credentialSource": "none"}
        })
    }

    #[tokio::test]
    async fn sandbox_fork_asks_for_the_copies_with_a_key_and_answers_them() {
        let copy = "sbx_local_01j9yyyyyyyyyyyyyyyyyyyyyy";
        let (base, request) = answer_once(
            201,
            json!({"sandboxId": SBX, "snapshotId": SNP, "sandboxes": [sandbox_json(copy), sandbox_json(copy)]}),
        )
        .await;
        let tools = CorralTools::over_http(Client::new(&base, "crl_k").unwrap());
        let Json(out) = tools
            .sandbox_fork(Parameters(ForkIn {
                sandbox_id: SBX.into(),
                count: Some(2),
            }))
            .await
            .unwrap();
        assert_eq!(out.snapshot_id, SNP);
        assert_eq!(out.sandboxes.len(), 2);
        assert_eq!(out.sandboxes[0]["id"], copy);
        let request = request.await.unwrap();
        assert!(
            request.starts_with(&format!("POST /v1/sandboxes/{SBX}/fork HTTP/1.1\r\n")),
            "{request}"
        );
        assert!(
            request
                .to_ascii_lowercase()
                .contains("\r\nidempotency-key: corral-client-")
        );
        assert!(request.ends_with(r#"{"count":2}"#), "{request}");
    }

    #[tokio::test]
    async fn snapshot_delete_of_an_unknown_snapshot_is_a_tool_error_with_its_code() {
        let envelope = corral_errors::ErrorEnvelope::new(
            corral_errors::ErrorCode::SnapshotNotFound,
            "no such snapshot",
            "req_1",
        );
        let (base, request) = answer_once(404, serde_json::to_value(envelope).unwrap()).await;
        let tools = CorralTools::over_http(Client::new(&base, "crl_k").unwrap());
        let Err(err) = tools
            .snapshot_delete(Parameters(SnapshotIn {
                snapshot_id: SNP.into(),
            }))
            .await
        else {
            panic!("deleted");
        };
        assert_eq!(err.code, "snapshot_not_found");
        assert_eq!(err.request_id.as_deref(), Some("req_1"));
        assert!(!err.retryable);
        let request = request.await.unwrap();
        assert!(
            request.starts_with(&format!("DELETE /v1/snapshots/{SNP} HTTP/1.1\r\n")),
            "{request}"
        );
    }

    #[tokio::test]
    async fn malformed_ids_are_refused_before_any_call() {
        let tools = CorralTools::over_http(Client::new("http://127.0.0.1:9", "k").unwrap());
        let Err(err) = tools
            .sandbox_get(Parameters(SandboxIn {
                sandbox_id: "not an id".into(),
            }))
            .await
        else {
            panic!("accepted");
        };
        assert_eq!(err.code, "invalid_request");
        let Err(err) = tools
            .sandbox_create(Parameters(CreateIn {
                provider: "nope".into(),
                image: None,
                timeout_seconds: None,
                snapshot: None,
                auto_resume: None,
                idle_stop_seconds: None,
            }))
            .await
        else {
            panic!("accepted");
        };
        assert_eq!(err.code, "invalid_request");
    }
}
