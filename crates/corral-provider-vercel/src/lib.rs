//! Corral adapter for [Vercel Sandbox](https://vercel.com/docs/vercel-sandbox).
//!
//! Vercel Sandbox is a REST API at `https://api.vercel.com`, authenticated with
//! `Authorization: Bearer <token>` (the `X-Provider-Credential`: a Vercel access token). It
//! **needs a team id and a project id** (`X-Provider-Team-Id`, `X-Provider-Project-Id`, or the
//! profile's settings; missing → `MissingContext`): `teamId` goes in the query of every
//! request, `projectId` in the create body and the query of sandbox calls, `project` in the
//! query of the list — the parameter names differ by endpoint, as in the official SDK
//! (`@vercel/sandbox`). What maps to what:
//!
//! - **create** → `POST /v3/sandboxes`, or `POST /v2/sandboxes` when `image` names a runtime
//!   (`node22`, `node24`, `node26`, `python3.13`, sent as `runtime`); any other `image` is a
//!   container image (`image`); none is Vercel's default image. The lifetime is the session
//!   `timeout`, sent in **milliseconds** (Corral's seconds × 1000; default 300 s, maximum 24 h
//!   on Pro/Enterprise, 45 min on Hobby). `persistent: true` is always sent. The operation
//!   id is the tag `corral-operation-id`.
//!   The native id is the sandbox `name` Vercel assigns.
//! - **get** → `GET /v2/sandboxes/{name}`; **delete** → `DELETE /v2/sandboxes/{name}` (the
//!   sandbox and all its snapshots); **find** → `GET /v2/sandboxes?tags=corral-operation-id:<op>`
//!   (pages followed with `cursor`).
//! - A sandbox is long-lived; a **session** is one VM boot, and commands and files are
//!   addressed through `/v2/sandboxes/sessions/{sessionId}/…`. When a session stops (timeout,
//!   stop), a persistent sandbox keeps a snapshot and the next `GET …?resume=true` starts a
//!   **new session with a new id**. The adapter remembers each sandbox's session and, when a
//!   session call answers 410 (or 422 `sandbox_stopping`/`sandbox_snapshotting`), resumes and
//!   retries once — what the SDK's `withResume` does.
//! - **exec** → `POST …/cmd` `{command: "sh", args: ["-c", …], cwd, env, wait, logs, timeout
//!   (ms)}`, read as the NDJSON stream (`{"command"}`, then `{"stream": "stdout"|"stderr",
//!   "data"}` lines, then the finished `{"command"}` with `exitCode`): stdout and stderr stay
//!   separate. Past the deadline the command is killed (`…/cmd/{id}/kill` with `signal: 9`,
//!   a POSIX signal number as Vercel's model takes it).
//! - **commands** (native, `commands` module): start → `POST …/cmd` without `wait` (answered
//!   at once), the script's first line a comment naming Corral's command id, which the
//!   session's command list shows (a retried start and `find_command` find it); attach →
//!   `…/cmd/{id}/logs`, NDJSON replayed from the first byte (`provider_replay`), then
//!   `?wait=true` for the exit code; stdin → `…/stdin {data, offset}` (Vercel skips what it
//!   already received); signals → `…/kill {signal: <number>}`, all of them. Output and stdin
//!   are text.
//! - **files** → read: `POST …/fs/read` (`application/octet-stream`, 404 when missing); write:
//!   `POST …/fs/write` with a **gzipped tarball** of the one file (`x-cwd: /`). Tar extraction
//!   would create missing parents, so a write first checks its parent through exec.
//!
//! - **stop** → tag `corral-stopped` (`PATCH /v2/sandboxes/{name}`), then
//!   `POST …/sessions/{id}/stop`: the VM ends, the filesystem is kept as the snapshot Vercel
//!   takes of a persistent sandbox. The tag tells an explicit stop (held until `resume`) from
//!   a session that timed out (`paused`, resumed on use). **resume** → the tag removed, then
//!   `GET …?resume=true`: a new session from that filesystem (no memory or process survives).
//! - **snapshot** → `POST …/sessions/{id}/snapshot` (Vercel then terminates the session: the
//!   sandbox is paused and its next use boots from the snapshot); **get/delete_snapshot** →
//!   `GET`/`DELETE /v2/sandboxes/snapshots/{id}`; **restore** → a create with
//!   `source: {type: "snapshot", snapshotId}`, tagged as a create is.
//!
//! Configuration ([`VercelConfig`], `[providers.vercel]`): `base_url` and the `http` table.
//!
//! Unsupported through Corral's port: ports and network policies (Vercel has them; Corral does
//! not drive them yet); a stop or a snapshot that keeps memory (Vercel has neither).

pub mod api;
mod capabilities;
mod client;
mod commands;
#[cfg(feature = "fake")]
pub mod fake;
mod map;
mod tarball;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use corral_domain::{
    CommandId, OperationId, Provider, ProviderCapabilities, SandboxStatus, Signal,
};
use corral_provider::files_via_exec::{check_write_target, explain_read_failure};
use corral_provider::{
    Adapter, CallContext, CappedOutput, CommandEvent, CommandEvents, CommandSpec, CreateSpec,
    ExecOutput, ExecSpec, ObservedSandbox, OutputOffsets, ProviderError, Result, SandboxProvider,
    Started, TaggedPage, TaggedSandbox,
};
use corral_provider_http::reqwest::Response;
use corral_provider_http::{
    Auth, Failure, HttpConfig, Page, ProviderHttp, collect_pages, map_body_error,
};
use futures::stream::{self, StreamExt as _};

use crate::api::{
    CommandResponse, CreateSandboxRequest, LogLine, RunCommandRequest, Sandbox, WriteStdinRequest,
};
use crate::client::{Client, Scope, failure};
use crate::commands::{Logs, LogsEnd};

pub use crate::commands::tag_line;

/// The tags Corral stamps on sandboxes; `stopped` marks a sandbox Corral stopped: Vercel
/// reports a stop and a session timeout alike (`stopped`), and only an explicit stop must wait
/// for an explicit resume.
pub const TAGS: corral_provider::tags::TagKeys = corral_provider::tags::DASHED;
/// Vercel's public API.
pub const DEFAULT_BASE_URL: &str = "https://api.vercel.com";
/// `image` values sent as `runtime` rather than as a container image.
pub const RUNTIMES: [&str; 4] = ["node22", "node24", "node26", "python3.13"];

pub(crate) const P: Provider = Provider::Vercel;
/// HTTP time beyond a command's own deadline, for its last lines to arrive.
const STREAM_GRACE: Duration = Duration::from_secs(30);
/// How long after the deadline the adapter stops waiting for the sandbox's own kill.
const KILL_GRACE: Duration = Duration::from_secs(3);
/// Longest NDJSON line accepted.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Pages read by a search by operation id.
const LIST_MAX_PAGES: usize = 20;
/// SIGKILL's number: Vercel's kill takes signal numbers, not names.
const SIGKILL: u8 = 9;
/// Exit code of a command killed by SIGKILL.
const SIGKILL_EXIT: i32 = 128 + SIGKILL as i32;

/// Configuration of the Vercel Sandbox adapter: `[providers.vercel]` in the server's
/// configuration.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct VercelConfig {
    /// API base URL (default `https://api.vercel.com`).
    pub base_url: String,
    /// Timeouts and caps (the `http` table).
    pub http: HttpConfig,
}

impl Default for VercelConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            http: HttpConfig::default(),
        }
    }
}

/// The session a sandbox's commands and files currently go through.
#[derive(Debug, Clone)]
struct SessionRef {
    id: String,
    cwd: String,
}

/// Sessions by (team, project, sandbox name): names are unique per project only.
type SessionKey = (String, String, String);

/// The Vercel Sandbox adapter.
#[derive(Debug)]
pub struct VercelProvider {
    client: Client,
    caps: ProviderCapabilities,
    sessions: Mutex<HashMap<SessionKey, SessionRef>>,
}

fn scope(ctx: &CallContext) -> Result<Scope<'_>> {
    // A missing credential is reported before a missing team or project.
    ctx.require_credential(P)?;
    fn field<'a>(v: &'a Option<String>, name: &'static str) -> Result<&'a str> {
        v.as_deref()
            .filter(|s| !s.trim().is_empty())
            .ok_or(ProviderError::MissingContext {
                provider: P,
                field: name,
            })
    }
    let context = ctx.context();
    Ok(Scope {
        team_id: field(&context.team_id, "teamId")?,
        project_id: field(&context.project_id, "projectId")?,
    })
}

/// Whether Corral stopped the sandbox (it carries `TAGS.stopped`).
fn held(sandbox: &Sandbox) -> bool {
    sandbox.tags.contains_key(TAGS.stopped)
}

/// The refusal of a call that would resume a sandbox Corral stopped.
fn stopped(name: &str) -> ProviderError {
    ProviderError::InvalidRequest {
        provider: P,
        message: format!("sandbox {name} is stopped: resume it first"),
    }
}

fn observed(sandbox: &Sandbox) -> ObservedSandbox {
    ObservedSandbox {
        native_id: sandbox.name.clone(),
        status: map::status(&sandbox.status, sandbox.persistent, held(sandbox)),
        operation_id: sandbox
            .tags
            .get(TAGS.operation_id)
            .and_then(|s| s.parse().ok()),
    }
}

fn observed_snapshot(snapshot: &api::Snapshot) -> corral_provider::ObservedSnapshot {
    corral_provider::ObservedSnapshot {
        native_id: snapshot.id.clone(),
        status: map::snapshot_status(&snapshot.status),
        size_bytes: snapshot.size_bytes,
    }
}

/// A failure of a call about one command: a stopped session (410) took the command with it.
fn command_failure(f: Failure, handle: &str) -> ProviderError {
    match f.status {
        Some(410) => ProviderError::NotFound {
            provider: P,
            resource: format!("command {handle} (its session stopped)"),
        },
        _ => f.error,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The create body for `spec`: `image` is a runtime or a container image, the timeout is in
/// milliseconds, the operation id is a tag.
pub fn create_body(spec: &CreateSpec, project_id: &str) -> CreateSandboxRequest {
    let (runtime, image) = match spec.request.image() {
        Some(i) if RUNTIMES.contains(&i) => (Some(i.to_owned()), None),
        Some(i) => (None, Some(i.to_owned())),
        None => (None, None),
    };
    let seconds = spec
        .timeout_seconds
        .unwrap_or(capabilities::DEFAULT_TIMEOUT_SECONDS);
    CreateSandboxRequest {
        project_id: project_id.to_owned(),
        timeout: Some(seconds.saturating_mul(1000)),
        runtime,
        image,
        // Sent although it is Vercel's default since persistence went GA: Corral advertises
        // sandboxes that sleep and resume, and older defaults (and the official mock) differ.
        persistent: Some(true),
        tags: [(TAGS.operation_id.to_owned(), spec.operation_id.to_string())].into(),
        source: None,
    }
}

/// The create body for `spec` as [`create_body`], with the deployment and project tags the
/// context names (three of Vercel's five tags).
fn tagged_create_body(
    ctx: &CallContext,
    spec: &CreateSpec,
    project_id: &str,
) -> CreateSandboxRequest {
    let mut body = create_body(spec, project_id);
    body.tags.extend(TAGS.stamp(ctx, &spec.operation_id));
    body
}

/// Reads the command's NDJSON stream, noting the command id in `command_id` as soon as it is
/// known (so the caller can kill it if the deadline passes first).
async fn read_command_stream(
    mut resp: Response,
    cap: usize,
    command_id: &mut Option<String>,
) -> Result<ExecOutput> {
    let protocol = |message: String| ProviderError::Protocol {
        provider: P,
        message,
    };
    let mut stdout = CappedOutput::new(cap);
    let mut stderr = CappedOutput::new(cap);
    let mut pending: Vec<u8> = Vec::new();
    let mut ended = false;
    loop {
        if !ended {
            match resp.chunk().await.map_err(|e| map_body_error(P, &e))? {
                Some(chunk) => pending.extend_from_slice(&chunk),
                None => ended = true,
            }
        }
        loop {
            let line = match pending.iter().position(|b| *b == b'\n') {
                Some(pos) => pending.drain(..=pos).collect::<Vec<u8>>(),
                // The last line may lack its newline.
                None if ended && !pending.is_empty() => std::mem::take(&mut pending),
                None => break,
            };
            let text = String::from_utf8_lossy(&line);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| protocol(format!("malformed command stream line: {e}")))?;
            if value.get("command").is_some() {
                let cmd: CommandResponse = serde_json::from_value(value)
                    .map_err(|e| protocol(format!("malformed command line: {e}")))?;
                if let Some(exit_code) = cmd.command.exit_code {
                    let (stdout, out_cut) = stdout.finish();
                    let (stderr, err_cut) = stderr.finish();
                    return Ok(ExecOutput {
                        stdout,
                        stderr,
                        exit_code,
                        truncated: out_cut || err_cut,
                    });
                }
                *command_id = Some(cmd.command.id);
                continue;
            }
            match serde_json::from_value::<LogLine>(value)
                .map_err(|e| protocol(format!("malformed log line: {e}")))?
            {
                LogLine::Stdout { data } => stdout.push(data.as_bytes()),
                LogLine::Stderr { data } => stderr.push(data.as_bytes()),
                LogLine::Error { data } => {
                    return Err(protocol(format!(
                        "the command stream failed: {}: {}",
                        data.code,
                        corral_provider::excerpt(&data.message, 300)
                    )));
                }
            }
        }
        if pending.len() > MAX_LINE_BYTES {
            return Err(protocol("a command stream line is too long".into()));
        }
        if ended {
            return Err(protocol(
                "the command stream ended before the command finished".into(),
            ));
        }
    }
}

impl Adapter for VercelProvider {
    const PROVIDER: Provider = P;
    type Config = VercelConfig;

    /// Fails only on an unusable base URL.
    fn from_config(config: VercelConfig) -> Result<Self> {
        let http = ProviderHttp::new(P, &config.base_url, config.http)?.with_auth(Auth::Bearer);
        Ok(Self {
            client: Client::new(http),
            caps: capabilities::capabilities(),
            sessions: Mutex::new(HashMap::new()),
        })
    }
}

impl VercelProvider {
    fn key(scope: Scope<'_>, name: &str) -> SessionKey {
        (
            scope.team_id.to_owned(),
            scope.project_id.to_owned(),
            name.to_owned(),
        )
    }

    fn remember(&self, scope: Scope<'_>, name: &str, session: &api::Session) {
        // A poisoned lock only means another call panicked mid-insert: the map is still usable.
        let mut sessions = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.insert(
            Self::key(scope, name),
            SessionRef {
                id: session.id.clone(),
                cwd: session.cwd.clone(),
            },
        );
    }

    fn forget(&self, scope: Scope<'_>, name: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&Self::key(scope, name));
    }

    /// The session to address `name` through: the remembered one, or (with `refresh`, or when
    /// none is known) the one `GET …?resume=true` answers, which resumes a stopped sandbox.
    async fn session(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        name: &str,
        refresh: bool,
    ) -> Result<SessionRef> {
        if !refresh {
            let known = self
                .sessions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&Self::key(scope, name))
                .cloned();
            if let Some(s) = known {
                return Ok(s);
            }
        }
        // A sandbox Corral stopped stays stopped until `resume`: look before resuming.
        let seen = self
            .client
            .get_sandbox(ctx, scope, name, false)
            .await
            .map_err(|f| f.error)?;
        let resp = if seen.session.status == api::SessionStatus::Running {
            seen
        } else if held(&seen.sandbox) {
            return Err(stopped(name));
        } else {
            self.client
                .get_sandbox(ctx, scope, name, true)
                .await
                .map_err(|f| f.error)?
        };
        self.remember(scope, name, &resp.session);
        Ok(SessionRef {
            id: resp.session.id,
            cwd: resp.session.cwd,
        })
    }

    /// Replaces the sandbox's tags with `tags` (`PATCH` takes the whole map).
    async fn retag(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        name: &str,
        tags: std::collections::BTreeMap<String, String>,
    ) -> Result<Sandbox> {
        let body = api::UpdateSandboxRequest { tags };
        Ok(self
            .client
            .update_tags(ctx, scope, name, &body)
            .await?
            .sandbox)
    }

    async fn exec_in(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session: &SessionRef,
        spec: &ExecSpec,
    ) -> Result<ExecOutput, Failure> {
        let body = RunCommandRequest {
            command: "sh".into(),
            args: vec!["-c".into(), spec.command.clone()],
            cwd: spec.cwd.clone(),
            env: spec.env.clone(),
            sudo: false,
            wait: Some(true),
            logs: Some(true),
            timeout: Some(millis(spec.timeout)),
            attach_stdin: None,
        };
        let started = Instant::now();
        let resp = self
            .client
            .run_command(ctx, scope, &session.id, &body, spec.timeout + STREAM_GRACE)
            .await?;
        let ndjson = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-ndjson"));
        if !ndjson {
            return Err(failure(ProviderError::Protocol {
                provider: P,
                message: "expected a stream of command data (application/x-ndjson)".into(),
            }));
        }
        let mut command_id = None;
        let read = tokio::time::timeout(
            spec.timeout + KILL_GRACE,
            read_command_stream(resp, spec.max_output_bytes, &mut command_id),
        )
        .await;
        let timed_out = ProviderError::CommandTimedOut {
            after: spec.timeout,
        };
        match read {
            Err(_) => {
                if let Some(id) = command_id {
                    // Best effort: the deadline is reported whether or not the kill lands.
                    let _ = self
                        .client
                        .kill_command(ctx, scope, &session.id, &id, SIGKILL)
                        .await;
                }
                Err(failure(timed_out))
            }
            // The sandbox enforced `timeout` itself, with SIGKILL.
            Ok(Ok(out)) if out.exit_code == SIGKILL_EXIT && started.elapsed() >= spec.timeout => {
                Err(failure(timed_out))
            }
            Ok(result) => result.map_err(failure),
        }
    }
}

#[async_trait]
impl SandboxProvider for VercelProvider {
    fn provider(&self) -> Provider {
        P
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        let scope = scope(ctx)?;
        let body = tagged_create_body(ctx, spec, scope.project_id);
        let resp = self.client.create_sandbox(ctx, scope, &body).await?;
        self.remember(scope, &resp.sandbox.name, &resp.session);
        Ok(observed(&resp.sandbox))
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let scope = scope(ctx)?;
        match self.client.get_sandbox(ctx, scope, native_id, false).await {
            Ok(resp) => {
                // A stopped session is of no use to later calls: they resume instead.
                if resp.session.status == api::SessionStatus::Running {
                    self.remember(scope, native_id, &resp.session);
                }
                Ok(observed(&resp.sandbox))
            }
            // `snapshot_not_found`: the stopped sandbox's snapshot expired; it cannot run again.
            Err(f) if f.status == Some(410) => Ok(ObservedSandbox {
                native_id: native_id.to_owned(),
                status: SandboxStatus::Expired,
                operation_id: None,
            }),
            Err(f) => Err(f.error),
        }
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        let scope = scope(ctx)?;
        self.forget(scope, native_id);
        self.client.delete_sandbox(ctx, scope, native_id).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let scope = scope(ctx)?;
        let mut refresh = false;
        loop {
            let session = self.session(ctx, scope, native_id, refresh).await?;
            match self.exec_in(ctx, scope, &session, spec).await {
                Err(f) if !refresh && map::session_gone(&f) => refresh = true,
                result => return result.map_err(|f| f.error),
            }
        }
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        let scope = scope(ctx)?;
        let mut refresh = false;
        loop {
            let session = self.session(ctx, scope, native_id, refresh).await?;
            match self
                .client
                .read_file(ctx, scope, &session.id, path, max_bytes)
                .await
            {
                Ok(Some(content)) => return Ok(content.to_vec()),
                Ok(None) => {
                    return Err(ProviderError::FileTooLarge {
                        path: path.to_owned(),
                        limit: max_bytes,
                    });
                }
                Err(f) if !refresh && map::session_gone(&f) => refresh = true,
                // The SDK reads a 404 as "no such file".
                Err(f) if f.status == Some(404) => {
                    return Err(ProviderError::FileNotFound {
                        path: path.to_owned(),
                    });
                }
                // What a directory or unreadable path gets is undocumented: ask the sandbox.
                Err(f) if matches!(f.status, Some(400 | 422 | 500)) => {
                    return Err(explain_read_failure(self, ctx, native_id, path, f.error).await);
                }
                Err(f) => return Err(f.error),
            }
        }
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let scope = scope(ctx)?;
        check_write_target(self, ctx, native_id, path).await?;
        let mut refresh = false;
        loop {
            let session = self.session(ctx, scope, native_id, refresh).await?;
            let name = tarball::entry_name(path, &session.cwd);
            let archive =
                tarball::single_file(&name, content).map_err(|e| ProviderError::FileOperation {
                    path: path.to_owned(),
                    message: format!("cannot build the tarball: {e}"),
                })?;
            match self
                .client
                .write_files(ctx, scope, &session.id, "/", archive)
                .await
            {
                Ok(()) => return Ok(()),
                Err(f) if !refresh && map::session_gone(&f) => refresh = true,
                Err(f) => return Err(f.error),
            }
        }
    }

    /// `GET /v2/sandboxes?tags=corral-deployment:<id>` in the context's project, one Vercel
    /// page per call (the token is Vercel's cursor).
    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        let scope = scope(ctx)?;
        let tag = format!("{}:{deployment}", TAGS.deployment);
        let listed = self.client.list_sandboxes(ctx, scope, &tag, page).await?;
        Ok(TaggedPage {
            sandboxes: listed
                .sandboxes
                .iter()
                .map(|s| TaggedSandbox {
                    observed: observed(s),
                    project: s.tags.get(TAGS.project).cloned(),
                })
                .collect(),
            next: listed.pagination.next,
        })
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        let scope = scope(ctx)?;
        let tag = format!("{}:{operation_id}", TAGS.operation_id);
        let client = &self.client;
        let tag = tag.as_str();
        let sandboxes = collect_pages(LIST_MAX_PAGES, |cursor| async move {
            let page = client
                .list_sandboxes(ctx, scope, tag, cursor.as_deref())
                .await?;
            Ok(Page {
                items: page.sandboxes,
                next: page.pagination.next,
            })
        })
        .await?;
        // The filter is Vercel's; the tag is checked again by the contract wrapper
        // (`corral_provider::Contracted`), which reads it from `operation_id`.
        Ok(sandboxes.iter().map(observed).collect())
    }

    /// Tags the sandbox stopped, then `POST …/sessions/{id}/stop`: the VM ends (processes
    /// and memory with it) and Vercel snapshots the filesystem, which `resume` boots a new
    /// session from. A non-persistent sandbox would lose its filesystem: refused.
    async fn stop(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let scope = scope(ctx)?;
        let seen = self
            .client
            .get_sandbox(ctx, scope, native_id, false)
            .await
            .map_err(|f| f.error)?;
        if !seen.sandbox.persistent {
            return Err(ProviderError::InvalidRequest {
                provider: P,
                message: format!(
                    "sandbox {native_id} is not persistent: Vercel discards its filesystem when \
                     it stops, so it could not resume"
                ),
            });
        }
        // Tagged first: should the stop fail, the sandbox is at worst held for a resume.
        let mut sandbox = seen.sandbox;
        if !held(&sandbox) {
            let mut tags = sandbox.tags.clone();
            tags.insert(TAGS.stopped.to_owned(), "true".to_owned());
            sandbox = self.retag(ctx, scope, native_id, tags).await?;
        }
        self.forget(scope, native_id);
        if !matches!(
            seen.session.status,
            api::SessionStatus::Pending | api::SessionStatus::Running
        ) {
            sandbox.status = seen.session.status;
            return Ok(observed(&sandbox));
        }
        match self.client.stop_session(ctx, scope, &seen.session.id).await {
            Ok(resp) => {
                let mut after = resp.sandbox.unwrap_or(sandbox);
                after.status = resp.session.status;
                // The answer may predate the tag: it is on the sandbox now.
                after
                    .tags
                    .insert(TAGS.stopped.to_owned(), "true".to_owned());
                Ok(observed(&after))
            }
            // It stopped meanwhile (its timeout): it is as a stop leaves it.
            Err(f) if map::session_gone(&f) => self.get(ctx, native_id).await,
            Err(f) => Err(f.error),
        }
    }

    /// Removes the stop tag, then `GET …?resume=true`: a **new session** boots from the
    /// filesystem the stop saved (no process or memory survives). Resuming a running sandbox
    /// answers it as it is.
    async fn resume(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let scope = scope(ctx)?;
        let seen = self
            .client
            .get_sandbox(ctx, scope, native_id, false)
            .await
            .map_err(|f| f.error)?;
        // Untagged first: should the resume fail, the sandbox resumes on its next use.
        let mut sandbox = seen.sandbox;
        if held(&sandbox) {
            let mut tags = sandbox.tags.clone();
            tags.remove(TAGS.stopped);
            sandbox = self.retag(ctx, scope, native_id, tags).await?;
        }
        if seen.session.status == api::SessionStatus::Running {
            self.remember(scope, native_id, &seen.session);
            sandbox.status = seen.session.status;
            return Ok(observed(&sandbox));
        }
        let resp = self
            .client
            .get_sandbox(ctx, scope, native_id, true)
            .await
            .map_err(|f| f.error)?;
        if resp.session.status == api::SessionStatus::Running {
            self.remember(scope, native_id, &resp.session);
        }
        let mut after = resp.sandbox;
        after.tags.remove(TAGS.stopped);
        Ok(observed(&after))
    }

    /// `POST …/sessions/{id}/snapshot` on the running session (a paused sandbox is resumed
    /// first, a stopped one refused). Vercel **terminates the session** once the snapshot is
    /// made: the sandbox is then paused and its next use boots a new session from the
    /// snapshot; running commands end.
    async fn snapshot(
        &self,
        ctx: &CallContext,
        native_id: &str,
        _spec: &corral_provider::SnapshotSpec,
    ) -> Result<corral_provider::ObservedSnapshot> {
        let scope = scope(ctx)?;
        let body = api::CreateSnapshotRequest::default();
        let mut refresh = false;
        let made = loop {
            let session = self.session(ctx, scope, native_id, refresh).await?;
            match self
                .client
                .snapshot_session(ctx, scope, &session.id, &body)
                .await
            {
                Ok(made) => break made,
                Err(f) if !refresh && map::session_gone(&f) => refresh = true,
                Err(f) => return Err(f.error),
            }
        };
        self.forget(scope, native_id);
        Ok(observed_snapshot(&made.snapshot))
    }

    /// `GET /v2/sandboxes/snapshots/{id}`; one Vercel reports `deleted` is not found.
    async fn get_snapshot(
        &self,
        ctx: &CallContext,
        snapshot: &str,
    ) -> Result<corral_provider::ObservedSnapshot> {
        let scope = scope(ctx)?;
        let found = self.client.get_snapshot(ctx, scope, snapshot).await?;
        let observed = observed_snapshot(&found.snapshot);
        if observed.status == corral_domain::SnapshotStatus::Deleted {
            return Err(ProviderError::NotFound {
                provider: P,
                resource: format!("snapshot {snapshot} (deleted)"),
            });
        }
        Ok(observed)
    }

    /// `DELETE /v2/sandboxes/snapshots/{id}`.
    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        let scope = scope(ctx)?;
        self.client.delete_snapshot(ctx, scope, snapshot).await?;
        Ok(())
    }

    /// A create (`POST /v3/sandboxes`) with `source: {type: "snapshot", snapshotId}`, tagged
    /// as `create` tags. The snapshot is the filesystem: no runtime or image is sent.
    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        let scope = scope(ctx)?;
        let mut body = tagged_create_body(ctx, spec, scope.project_id);
        body.runtime = None;
        body.image = None;
        body.source = Some(api::Source::Snapshot {
            snapshot_id: snapshot.to_owned(),
        });
        let resp = self.client.create_sandbox(ctx, scope, &body).await?;
        self.remember(scope, &resp.sandbox.name, &resp.session);
        Ok(observed(&resp.sandbox))
    }

    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        let scope = scope(ctx)?;
        let body = RunCommandRequest {
            command: "sh".into(),
            args: vec![
                "-c".into(),
                format!("{}{}", tag_line(&spec.command_id), spec.command),
            ],
            cwd: spec.cwd.clone(),
            env: spec.env.clone(),
            sudo: false,
            wait: None,
            logs: None,
            timeout: Some(millis(spec.timeout + commands::BACKSTOP)),
            attach_stdin: spec.stdin.then_some(true),
        };
        let mut refresh = false;
        loop {
            let session = self.session(ctx, scope, native_id, refresh).await?;
            // A retried start finds the command the first attempt started, by its tag.
            let started = match self.client.list_commands(ctx, scope, &session.id).await {
                Ok(list) => match commands::tagged(&list.commands, &spec.command_id) {
                    Some(found) => Ok(found.id.clone()),
                    None => self
                        .client
                        .start_command(ctx, scope, &session.id, &body)
                        .await
                        .map(|r| r.command.id),
                },
                Err(f) => Err(f),
            };
            match started {
                Ok(id) => {
                    return Ok(Started {
                        handle: commands::handle(&session.id, &id),
                        events: None,
                    });
                }
                Err(f) if !refresh && map::session_gone(&f) => refresh = true,
                Err(f) => return Err(f.error),
            }
        }
    }

    async fn attach_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        _native_id: &'a str,
        handle: &str,
        from: OutputOffsets,
    ) -> Result<CommandEvents<'a>> {
        let scope = scope(ctx)?;
        let (sid, cid) = commands::parse_handle(handle)?;
        let (sid, cid, handle) = (sid.to_owned(), cid.to_owned(), handle.to_owned());
        let resp = self
            .client
            .command_logs(ctx, scope, &sid, &cid, commands::LOGS_LIMIT)
            .await
            .map_err(|f| command_failure(f, &handle))?;
        let logs = Logs::new(resp, from);
        let events = stream::unfold(Some(logs), move |logs| {
            let (sid, cid, handle) = (sid.clone(), cid.clone(), handle.clone());
            async move {
                let mut logs = logs?;
                if let Some(ev) = logs.next().await {
                    return Some((Some(ev), Some(logs)));
                }
                if logs.end() != Some(LogsEnd::Finished) {
                    return None;
                }
                // The log ended with the command: its exit code is due.
                match self
                    .client
                    .get_command(ctx, scope, &sid, &cid, true, commands::EXIT_WAIT)
                    .await
                {
                    Ok(done) => done.command.exit_code.map(|exit_code| {
                        (
                            Some(Ok(CommandEvent::Exit {
                                exit_code: Some(exit_code),
                            })),
                            None,
                        )
                    }),
                    Err(f) if matches!(f.status, Some(404 | 410)) => {
                        Some((Some(Err(command_failure(f, &handle))), None))
                    }
                    // Not finished in time after all: this attach ends, the next resumes.
                    Err(_) => None,
                }
            }
        })
        .filter_map(|ev| async move { ev });
        Ok(events.boxed())
    }

    async fn write_stdin(
        &self,
        ctx: &CallContext,
        _native_id: &str,
        handle: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<u64> {
        let scope = scope(ctx)?;
        let (sid, cid) = commands::parse_handle(handle)?;
        let text = std::str::from_utf8(data).map_err(|_| ProviderError::InvalidRequest {
            provider: P,
            message: "Vercel's stdin takes text: stdin bytes must be UTF-8".into(),
        })?;
        let body = WriteStdinRequest {
            data: Some(text.to_owned()),
            offset: Some(offset),
            close: None,
        };
        let written = self
            .client
            .write_stdin(ctx, scope, sid, cid, &body)
            .await
            .map_err(|f| match f.status {
                Some(409) => ProviderError::InvalidRequest {
                    provider: P,
                    message: format!(
                        "stdin offset {offset} is past the bytes the command received"
                    ),
                },
                _ => command_failure(f, handle),
            })?;
        // Without `bytesWritten` the sandbox predates offsets and ignored this one: the write
        // went through whole.
        Ok(written.bytes_written.unwrap_or(offset + data.len() as u64))
    }

    async fn close_stdin(&self, ctx: &CallContext, _native_id: &str, handle: &str) -> Result<()> {
        let scope = scope(ctx)?;
        let (sid, cid) = commands::parse_handle(handle)?;
        let body = WriteStdinRequest {
            data: None,
            offset: None,
            close: Some(true),
        };
        self.client
            .write_stdin(ctx, scope, sid, cid, &body)
            .await
            .map(drop)
            .map_err(|f| command_failure(f, handle))
    }

    async fn signal_command(
        &self,
        ctx: &CallContext,
        _native_id: &str,
        handle: &str,
        signal: Signal,
    ) -> Result<()> {
        let scope = scope(ctx)?;
        let (sid, cid) = commands::parse_handle(handle)?;
        let number = u8::try_from(signal.number()).unwrap_or(SIGKILL);
        match self.client.kill_command(ctx, scope, sid, cid, number).await {
            Ok(()) => Ok(()),
            // "The command must still be running": one that ended is fine.
            Err(f) => {
                let limit = self.client.request_timeout();
                match self
                    .client
                    .get_command(ctx, scope, sid, cid, false, limit)
                    .await
                {
                    Ok(c) if c.command.exit_code.is_some() => Ok(()),
                    _ => Err(command_failure(f, handle)),
                }
            }
        }
    }

    async fn find_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        command_id: &CommandId,
    ) -> Result<Option<String>> {
        let scope = scope(ctx)?;
        let session = self.session(ctx, scope, native_id, false).await?;
        let list = self
            .client
            .list_commands(ctx, scope, &session.id)
            .await
            .map_err(|f| command_failure(f, "list"))?;
        Ok(commands::tagged(&list.commands, command_id)
            .map(|c| commands::handle(&session.id, &c.id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_table_is_read_strictly() {
        let empty: VercelConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.base_url, DEFAULT_BASE_URL);
        let set: VercelConfig = serde_json::from_value(serde_json::json!({
            "base_url": "http://127.0.0.1:9",
            "http": { "request_timeout_seconds": 5 },
        }))
        .unwrap();
        assert_eq!(set.base_url, "http://127.0.0.1:9");
        assert_eq!(set.http.request_timeout, Duration::from_secs(5));
        // A key meant for another provider is refused, not ignored.
        let foreign = serde_json::json!({ "default_image": "snapshot_x" });
        assert!(serde_json::from_value::<VercelConfig>(foreign).is_err());
    }
}
