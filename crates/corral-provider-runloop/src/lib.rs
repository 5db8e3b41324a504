//! Corral adapter for [Runloop](https://runloop.ai) devboxes.
//!
//! Runloop is a REST API at `https://api.runloop.ai`, authenticated with
//! `Authorization: Bearer <RUNLOOP_API_KEY>` (the `X-Provider-Credential`); it needs no other
//! context. What maps to what:
//!
//! - **create** → `POST /v1/devboxes`: `image` is a blueprint (`bpt_…` is sent as
//!   `blueprint_id`, anything else as `blueprint_name`; none boots Runloop's default image);
//!   the lifetime is `launch_parameters.keep_alive_time_seconds` (seconds, default 3600,
//!   maximum 172800), after which Runloop shuts the devbox down for good; the operation id is
//!   the `metadata` entry `corral_operation_id`, and also the `x-request-id` header the official
//!   SDKs use as an idempotency key.
//! - **get** → `GET /v1/devboxes/{id}`; **delete** → `POST /v1/devboxes/{id}/shutdown?force=true`
//!   (permanent: the disk is deleted).
//! - **find by operation id** → `GET /v1/devboxes` pages (`starting_after` the last id),
//!   filtered on the metadata here: the published API has no metadata filter on the list.
//! - **exec** → `POST /v1/devboxes/{id}/execute?last_n=…` with a UUIDv7 `command_id`, then
//!   `…/executions/{eid}/wait_for_status` until completed, and `…/kill` past the deadline.
//!   Runloop's execute has **no cwd or env fields**: the adapter sends `sh -c '<script>'`,
//!   the script being the shared shell prelude (`corral_provider::shell`: `cd -- '<cwd>' ||
//!   exit 1`, then `export K='V'` per variable) and the command, every part single-quoted, so
//!   cwd and env are advertised as supported through that wrapper. Runloop returns only the
//!   last `last_n` lines of each stream (100 by default): the adapter asks for as many lines
//!   as the output cap has bytes, so nothing under the cap is dropped.
//! - **commands** (native, `commands` module): start → `execute` with a `command_id` derived
//!   from Corral's (a retried start names the same execution), or `execute_async` with
//!   `attach_stdin` when stdin is wanted; attach → the `stream_stdout_updates` /
//!   `stream_stderr_updates` SSE streams from the byte offsets held (`provider_offset`);
//!   stdin → `send_std_in` (text; resends skipped by the adapter); signal → `kill` (`KILL`
//!   only); find → `Unsupported` (no list of executions). Output arrives as text: bytes that
//!   are not UTF-8 are replaced.
//! - **files** → the binary-safe `download_file` / multipart `upload_file` (the
//!   `*_file_contents` endpoints are UTF-8 only). Runloop does not document what they do for a
//!   missing file or parent, so a write first checks its parent through exec, and a failed read
//!   is explained through exec (`FileNotFound`, `FileRefused`).
//!
//! Configuration ([`RunloopConfig`], `[providers.runloop]`): `base_url`, `max_wait_seconds`
//! and the `http` table.
//!
//! - **stop / resume** → `POST /v1/devboxes/{id}/suspend` / `…/resume` (`suspending` →
//!   `suspended`, `resuming` → `running`; the disk is kept, memory is not). Runloop refuses
//!   both (`400`) unless the devbox is in the state they start from: the adapter then answers
//!   the devbox as it is when it is already where the call leads.
//! - **snapshot** → `POST /v1/devboxes/{id}/snapshot_disk_async` (tagged `corral_snapshot_id`
//!   in its metadata), followed on `GET /v1/devboxes/disk_snapshots/{id}/status`; **delete
//!   snapshot** → `POST /v1/devboxes/disk_snapshots/{id}/delete`; **restore** → a create with
//!   `snapshot_id`. `idleStopSeconds` → `launch_parameters.lifecycle.after_idle` with
//!   `on_idle: suspend` (Runloop's own idle stop).

pub mod api;
mod capabilities;
mod client;
mod commands;
#[cfg(feature = "fake")]
pub mod fake;
mod map;

use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use corral_domain::{
    CommandId, CreateSandboxRequest, OperationId, OutputStream, Provider, ProviderCapabilities,
    SandboxStatus, Signal,
};
use corral_provider::files_via_exec::{check_write_target, explain_read_failure};
use corral_provider::shell::{self, shell_quote};
use corral_provider::{
    Adapter, CallContext, CappedOutput, CommandEvent, CommandEvents, CommandSpec, CreateSpec,
    ExecOutput, ExecSpec, ObservedSandbox, ObservedSnapshot, OutputOffsets, ProviderError, Result,
    SandboxProvider, SnapshotSpec, Started, TaggedPage, TaggedSandbox,
};
use corral_provider_http::{Auth, HttpConfig, Page, ProviderHttp, collect_pages};
use futures::stream::{self, StreamExt as _};

use crate::api::{
    DevboxCreateExecutionParameters, DevboxCreateParameters, DevboxDiskSnapshotView,
    DevboxSendStdInRequest, DevboxSnapshotRequest, DevboxSnapshotStatus,
    DevboxStartExecutionParameters, DevboxView, DevboxWaitForCommandRequest, ExecutionStatus,
    IdleAction, IdleConfigurationParameters, LaunchParameters, LifecycleConfigurationParameters,
    SignalType,
};
use crate::client::Client;
use crate::commands::{EXIT_WAIT_SECONDS, STREAM_LIMIT, StdinCounts};

pub use crate::commands::command_uuid;

/// The metadata keys Corral stamps on devboxes and disk snapshots.
pub const TAGS: corral_provider::tags::TagKeys = corral_provider::tags::UNDERSCORED;
/// Runloop's public API.
pub const DEFAULT_BASE_URL: &str = "https://api.runloop.ai";

/// The longest single wait Runloop allows (`optimistic_timeout`, `wait_for_status`).
const MAX_WAIT_SECONDS: u32 = 25;
/// Extra HTTP time beyond a server-side wait, for the answer to arrive.
const WAIT_GRACE: Duration = Duration::from_secs(15);
/// Page size and page count of a search by operation id.
const LIST_PAGE_LIMIT: u32 = 500;
const LIST_MAX_PAGES: usize = 20;

pub(crate) const P: Provider = Provider::Runloop;

/// Configuration of the Runloop adapter: `[providers.runloop]` in the server's configuration.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunloopConfig {
    /// API base URL (default `https://api.runloop.ai`).
    pub base_url: String,
    /// Timeouts and caps (the `http` table).
    pub http: HttpConfig,
    /// Longest single server-side wait for a command, in seconds (`optimistic_timeout`,
    /// `wait_for_status`): Runloop allows at most 25, the default.
    pub max_wait_seconds: u32,
}

impl Default for RunloopConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            http: HttpConfig::default(),
            max_wait_seconds: MAX_WAIT_SECONDS,
        }
    }
}

/// The Runloop adapter.
#[derive(Debug, Clone)]
pub struct RunloopProvider {
    client: Client,
    caps: ProviderCapabilities,
    max_wait_seconds: u32,
    /// Stdin bytes written per execution (Runloop's `send_std_in` has no offset).
    stdin: Arc<StdinCounts>,
}

impl Adapter for RunloopProvider {
    const PROVIDER: Provider = P;
    type Config = RunloopConfig;

    /// Fails only on an unusable base URL.
    fn from_config(config: RunloopConfig) -> Result<Self> {
        let http = ProviderHttp::new(P, &config.base_url, config.http)?.with_auth(Auth::Bearer);
        Ok(Self {
            client: Client::new(http),
            caps: capabilities::capabilities(),
            max_wait_seconds: config.max_wait_seconds.clamp(1, MAX_WAIT_SECONDS),
            stdin: Arc::default(),
        })
    }
}

fn observed(view: DevboxView) -> ObservedSandbox {
    ObservedSandbox {
        status: map::status(&view.status, view.shutdown_reason.as_deref()),
        operation_id: view
            .metadata
            .get(TAGS.operation_id)
            .and_then(|s| s.parse().ok()),
        native_id: view.id,
    }
}

/// A fresh UUIDv7 for `command_id`.
fn uuid_v7() -> String {
    commands::uuid_v7_of(ulid::Ulid::generate())
}

/// The command line sent to Runloop: its execute has no cwd or env, so they travel in the
/// shared shell prelude ([`shell::script`]) of one `sh -c` script, quoted as a single word.
pub fn wrap_command(spec: &ExecSpec) -> Result<String> {
    Ok(format!("sh -c {}", shell_quote(&shell::script(P, spec)?)))
}

/// Whole seconds to wait server-side: what is left, at least 1, at most `max`.
fn wait_seconds(left: Duration, max: u32) -> u32 {
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    u32::try_from(secs).map_or(max, |s| s.clamp(1, max))
}

impl RunloopProvider {
    /// `POST /v1/devboxes` for a create (`snapshot` none) or a restore (`snapshot_id`): both
    /// tagged with the operation id, both with the lifetime and the idle policy asked for.
    async fn launch(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: Option<&str>,
    ) -> Result<ObservedSandbox> {
        let op = spec.operation_id.to_string();
        // Runloop takes one source: a restore boots the snapshot's disk, not a blueprint (the
        // domain refuses an image beside a snapshot before this).
        let (blueprint_id, blueprint_name) = match (snapshot, spec.request.image()) {
            (Some(_), _) | (None, None) => (None, None),
            (None, Some(image)) if image.starts_with("bpt_") => (Some(image.to_owned()), None),
            (None, Some(image)) => (None, Some(image.to_owned())),
        };
        let body = DevboxCreateParameters {
            name: Some(format!("corral-{op}")),
            blueprint_id,
            blueprint_name,
            snapshot_id: snapshot.map(str::to_owned),
            metadata: Some(TAGS.stamp(ctx, &spec.operation_id).into_iter().collect()),
            launch_parameters: Some(LaunchParameters {
                keep_alive_time_seconds: Some(
                    spec.timeout_seconds
                        .unwrap_or(capabilities::DEFAULT_KEEP_ALIVE_SECONDS),
                ),
                lifecycle: idle_policy(&spec.request)?,
            }),
        };
        // The operation id is the idempotency key: a retried create of the same operation
        // carries the same `x-request-id` (server-side dedupe is Runloop's, undocumented).
        let request_id = spec.operation_id.to_string();
        let view = self.client.create_devbox(ctx, &body, &request_id).await?;
        Ok(observed(view))
    }

    /// After a `400` from suspend or resume (Runloop refuses both unless the devbox is in
    /// the state they leave), the devbox as it is when it already is where `done` says the
    /// call would have taken it; else the refusal.
    async fn already(
        &self,
        ctx: &CallContext,
        native_id: &str,
        refused: ProviderError,
        done: fn(SandboxStatus) -> bool,
    ) -> Result<ObservedSandbox> {
        let seen = observed(self.client.get_devbox(ctx, native_id).await?);
        if done(seen.status) {
            Ok(seen)
        } else {
            Err(refused)
        }
    }
}

/// `lifecycle.after_idle` for the request's `idleStopSeconds`: Runloop's own idle suspend.
fn idle_policy(request: &CreateSandboxRequest) -> Result<Option<LifecycleConfigurationParameters>> {
    let Some(secs) = request.idle_stop_seconds() else {
        return Ok(None);
    };
    // `idle_time_seconds` is an int32; the domain bounds idleStopSeconds far below that.
    let idle_time_seconds = i32::try_from(secs)
        .ok()
        .and_then(|s| u32::try_from(s).ok())
        .ok_or_else(|| ProviderError::InvalidRequest {
            provider: P,
            message: format!("idleStopSeconds {secs} is beyond Runloop's idle_time_seconds"),
        })?;
    Ok(Some(LifecycleConfigurationParameters {
        after_idle: Some(IdleConfigurationParameters {
            idle_time_seconds,
            on_idle: IdleAction::Suspend,
        }),
    }))
}

/// A disk snapshot as the port reports it; `NotFound` once Runloop reports it `deleted`.
fn observed_snapshot(
    id: &str,
    status: &DevboxSnapshotStatus,
    view: Option<&DevboxDiskSnapshotView>,
) -> Result<ObservedSnapshot> {
    let status = map::snapshot_status(status).ok_or_else(|| ProviderError::NotFound {
        provider: P,
        resource: format!("disk snapshot {id}"),
    })?;
    Ok(ObservedSnapshot {
        native_id: id.to_owned(),
        status,
        size_bytes: view.and_then(|v| v.size_bytes),
    })
}

#[async_trait]
impl SandboxProvider for RunloopProvider {
    fn provider(&self) -> Provider {
        P
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        self.launch(ctx, spec, None).await
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        Ok(observed(self.client.get_devbox(ctx, native_id).await?))
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        // A devbox Runloop does not know is `NotFound`, which the contract wrapper
        // (`corral_provider::Contracted`) reports as a successful delete.
        match self.client.shutdown_devbox(ctx, native_id).await {
            Ok(_) => Ok(()),
            // Shutting down a devbox that is already shut down is refused; that is success.
            Err(e @ ProviderError::InvalidRequest { .. }) => {
                match self.client.get_devbox(ctx, native_id).await {
                    Ok(view)
                        if map::status(&view.status, view.shutdown_reason.as_deref())
                            .is_terminal() =>
                    {
                        Ok(())
                    }
                    Err(gone @ ProviderError::NotFound { .. }) => Err(gone),
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let command = wrap_command(spec)?;
        // Lines are at least one byte, so this many lines cover everything under the cap.
        let last_n = spec.max_output_bytes.max(1);
        let deadline = Instant::now() + spec.timeout;
        let first_wait = wait_seconds(spec.timeout, self.max_wait_seconds);
        let body = DevboxStartExecutionParameters {
            command_id: uuid_v7(),
            command,
            optimistic_timeout: Some(first_wait),
        };
        let http_limit = |secs: u32| Duration::from_secs(u64::from(secs)) + WAIT_GRACE;
        let mut view = self
            .client
            .execute(ctx, native_id, last_n, &body, http_limit(first_wait))
            .await?;
        while view.status != ExecutionStatus::Completed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // Best effort: the deadline is reported whether or not the kill lands.
                let _ = self
                    .client
                    .kill_execution(ctx, native_id, &view.execution_id)
                    .await;
                return Err(ProviderError::CommandTimedOut {
                    after: spec.timeout,
                });
            }
            let wait = wait_seconds(left, self.max_wait_seconds);
            let req = DevboxWaitForCommandRequest {
                statuses: vec![ExecutionStatus::Completed],
                timeout_seconds: Some(wait),
            };
            if let Some(next) = self
                .client
                .wait_for_execution(
                    ctx,
                    native_id,
                    &view.execution_id,
                    last_n,
                    &req,
                    http_limit(wait),
                )
                .await?
            {
                view = next;
            }
        }
        let exit_code = view.exit_status.ok_or_else(|| ProviderError::Protocol {
            provider: P,
            message: "a completed execution has no exit_status".into(),
        })?;
        let mut stdout = CappedOutput::new(spec.max_output_bytes);
        stdout.push(view.stdout.unwrap_or_default().as_bytes());
        let mut stderr = CappedOutput::new(spec.max_output_bytes);
        stderr.push(view.stderr.unwrap_or_default().as_bytes());
        let (stdout, out_cut) = stdout.finish();
        let (stderr, err_cut) = stderr.finish();
        Ok(ExecOutput {
            stdout,
            stderr,
            exit_code,
            truncated: out_cut
                || err_cut
                || view.stdout_truncated == Some(true)
                || view.stderr_truncated == Some(true),
        })
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        match self
            .client
            .download_file(ctx, native_id, path, max_bytes)
            .await
        {
            Ok(Some(content)) => Ok(content),
            Ok(None) => Err(ProviderError::FileTooLarge {
                path: path.to_owned(),
                limit: max_bytes,
            }),
            Err(
                e @ (ProviderError::NotFound { .. }
                | ProviderError::InvalidRequest { .. }
                | ProviderError::Unexpected { .. }
                | ProviderError::ServerError { .. }),
            ) => Err(explain_read_failure(self, ctx, native_id, path, e).await),
            Err(e) => Err(e),
        }
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        check_write_target(self, ctx, native_id, path).await?;
        self.client.upload_file(ctx, native_id, path, content).await
    }

    /// One Runloop page of devboxes (the token is the last id of the page before), kept to
    /// those carrying the deployment's metadata: the published list has no metadata filter,
    /// so a page may hold none of them and still have a next.
    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        let listed = self
            .client
            .list_devboxes(ctx, LIST_PAGE_LIMIT, page)
            .await?;
        let next = match listed.devboxes.last() {
            Some(last) if listed.has_more => Some(last.id.clone()),
            _ => None,
        };
        Ok(TaggedPage {
            sandboxes: listed
                .devboxes
                .into_iter()
                .filter(|d| d.metadata.get(TAGS.deployment).map(String::as_str) == Some(deployment))
                .map(|d| TaggedSandbox {
                    project: d.metadata.get(TAGS.project).cloned(),
                    observed: observed(d),
                })
                .collect(),
            next,
        })
    }

    async fn stop(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        match self.client.suspend_devbox(ctx, native_id).await {
            Ok(view) => Ok(observed(view)),
            // Suspending a suspended (or suspending) devbox is refused: answer it as it is.
            Err(e @ ProviderError::InvalidRequest { .. }) => {
                self.already(ctx, native_id, e, SandboxStatus::is_stopped)
                    .await
            }
            Err(e) => Err(e),
        }
    }

    async fn resume(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        match self.client.resume_devbox(ctx, native_id).await {
            Ok(view) => Ok(observed(view)),
            // Resuming a devbox that is not suspended is refused: running or resuming is done.
            Err(e @ ProviderError::InvalidRequest { .. }) => {
                self.already(ctx, native_id, e, |s| {
                    matches!(s, SandboxStatus::Running | SandboxStatus::Starting)
                })
                .await
            }
            Err(e) => Err(e),
        }
    }

    async fn snapshot(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &SnapshotSpec,
    ) -> Result<ObservedSnapshot> {
        let body = DevboxSnapshotRequest {
            name: Some(
                spec.name
                    .clone()
                    .unwrap_or_else(|| spec.snapshot_id.to_string()),
            ),
            metadata: Some([(TAGS.snapshot_id.to_owned(), spec.snapshot_id.to_string())].into()),
        };
        // The asynchronous call answers at once with the snapshot's id; its status endpoint
        // says when the disk is saved (the synchronous one holds the call for all of it).
        let view = self
            .client
            .snapshot_disk_async(ctx, native_id, &body)
            .await?;
        observed_snapshot(&view.id, &DevboxSnapshotStatus::InProgress, Some(&view))
    }

    async fn get_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<ObservedSnapshot> {
        let seen = self.client.snapshot_status(ctx, snapshot).await?;
        observed_snapshot(snapshot, &seen.status, seen.snapshot.as_ref())
    }

    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        // `404` (unknown or already deleted) is `Ok` through the contract wrapper; `409`
        // (not complete yet) stays a refusal.
        self.client.delete_snapshot(ctx, snapshot).await
    }

    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        self.launch(ctx, spec, Some(snapshot)).await
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        let client = &self.client;
        let wanted = operation_id.to_string();
        let wanted = wanted.as_str();
        collect_pages(LIST_MAX_PAGES, |after| async move {
            let page = client
                .list_devboxes(ctx, LIST_PAGE_LIMIT, after.as_deref())
                .await?;
            // The next page starts after this page's last devbox.
            let next = match page.devboxes.last() {
                Some(last) if page.has_more => Some(last.id.clone()),
                _ => None,
            };
            // Runloop's list has no metadata filter: this is the search itself, not a re-check
            // (the contract wrapper checks the tag again all the same).
            let items = page
                .devboxes
                .into_iter()
                .filter(|d| d.metadata.get(TAGS.operation_id).map(String::as_str) == Some(wanted))
                .map(observed)
                .collect();
            Ok(Page { items, next })
        })
        .await
    }

    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        let command = wrap_command(&ExecSpec {
            command: spec.command.clone(),
            cwd: spec.cwd.clone(),
            env: spec.env.clone(),
            ..ExecSpec::new("")
        })?;
        let view = if spec.stdin {
            let body = DevboxCreateExecutionParameters {
                command,
                attach_stdin: Some(true),
            };
            self.client.execute_async(ctx, native_id, &body).await?
        } else {
            // `execute` takes a command id "for idempotency": a retry of this start names
            // the execution the first attempt made.
            let body = DevboxStartExecutionParameters {
                command_id: commands::command_uuid(&spec.command_id),
                command,
                optimistic_timeout: Some(0),
            };
            let limit = Duration::from_secs(u64::from(self.max_wait_seconds)) + WAIT_GRACE;
            self.client.execute(ctx, native_id, 1, &body, limit).await?
        };
        Ok(Started {
            handle: view.execution_id,
            events: None,
        })
    }

    async fn attach_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        handle: &str,
        from: OutputOffsets,
    ) -> Result<CommandEvents<'a>> {
        let eid = handle.to_owned();
        let out = self
            .client
            .stream_stdout_updates(ctx, native_id, &eid, from.stdout, STREAM_LIMIT)
            .await?;
        let err = self
            .client
            .stream_stderr_updates(ctx, native_id, &eid, from.stderr, STREAM_LIMIT)
            .await?;
        let broken = Arc::new(AtomicBool::new(false));
        let output = stream::select(
            commands::updates(out, OutputStream::Stdout, from.stdout, broken.clone()),
            commands::updates(err, OutputStream::Stderr, from.stderr, broken.clone()),
        );
        let end = stream::once(async move {
            if broken.load(Ordering::SeqCst) {
                return None;
            }
            // Both streams ended: the execution completed, or the provider closed them
            // early (then this attach ends without an exit, and the next resumes).
            let req = DevboxWaitForCommandRequest {
                statuses: vec![ExecutionStatus::Completed],
                timeout_seconds: Some(EXIT_WAIT_SECONDS),
            };
            let limit = Duration::from_secs(u64::from(EXIT_WAIT_SECONDS)) + WAIT_GRACE;
            match self
                .client
                .wait_for_execution(ctx, native_id, &eid, 1, &req, limit)
                .await
            {
                Ok(Some(view)) if view.status == ExecutionStatus::Completed => {
                    // Its stdin is over: nothing left to deduplicate.
                    self.stdin.forget(&(native_id.to_owned(), eid.clone()));
                    Some(Ok(CommandEvent::Exit {
                        exit_code: view.exit_status,
                    }))
                }
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            }
        })
        .filter_map(|end| async move { end });
        Ok(output.chain(end).boxed())
    }

    async fn write_stdin(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<u64> {
        let key = (native_id.to_owned(), handle.to_owned());
        let (skip, total) = self.stdin.fresh(&key, offset, data.len() as u64);
        let fresh = data
            .get(usize::try_from(skip).unwrap_or(usize::MAX)..)
            .unwrap_or_default();
        if fresh.is_empty() {
            return Ok(total);
        }
        let text = std::str::from_utf8(fresh).map_err(|_| ProviderError::InvalidRequest {
            provider: P,
            message: "Runloop's send_std_in takes text: stdin bytes must be UTF-8".into(),
        })?;
        let body = DevboxSendStdInRequest {
            text: Some(text.to_owned()),
            signal: None,
        };
        let sent = self
            .client
            .send_std_in(ctx, native_id, handle, &body)
            .await?;
        if sent.success == Some(false) {
            return Err(ProviderError::InvalidRequest {
                provider: P,
                message: "Runloop did not accept the stdin (success: false)".into(),
            });
        }
        self.stdin.wrote(key, total);
        Ok(total)
    }

    async fn close_stdin(&self, ctx: &CallContext, native_id: &str, handle: &str) -> Result<()> {
        let body = DevboxSendStdInRequest {
            text: None,
            signal: Some(SignalType::Eof),
        };
        self.client
            .send_std_in(ctx, native_id, handle, &body)
            .await?;
        self.stdin
            .forget(&(native_id.to_owned(), handle.to_owned()));
        Ok(())
    }

    async fn signal_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        signal: Signal,
    ) -> Result<()> {
        if signal != Signal::Kill {
            return Err(ProviderError::Unsupported {
                provider: P,
                operation: "signal_command",
                reason: format!("Runloop can only kill an execution, not send it {signal}"),
            });
        }
        match self.client.kill_execution(ctx, native_id, handle).await {
            Ok(()) => Ok(()),
            // Killing an execution that already completed may be refused: that is done.
            Err(e) => match self.client.get_execution(ctx, native_id, handle, 1).await {
                Ok(view) if view.status == ExecutionStatus::Completed => Ok(()),
                _ => Err(e),
            },
        }
    }

    async fn find_command(
        &self,
        _ctx: &CallContext,
        _native_id: &str,
        _command_id: &CommandId,
    ) -> Result<Option<String>> {
        Err(ProviderError::Unsupported {
            provider: P,
            operation: "find_command",
            reason: "Runloop cannot list or look up executions".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_table_is_read_strictly() {
        let empty: RunloopConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.base_url, DEFAULT_BASE_URL);
        assert_eq!(empty.max_wait_seconds, MAX_WAIT_SECONDS);
        let set: RunloopConfig = serde_json::from_value(serde_json::json!({
            "base_url": "http://127.0.0.1:9",
            "max_wait_seconds": 3,
            "http": { "request_timeout_seconds": 5 },
        }))
        .unwrap();
        assert_eq!(set.base_url, "http://127.0.0.1:9");
        assert_eq!(set.max_wait_seconds, 3);
        assert_eq!(set.http.request_timeout, Duration::from_secs(5));
        // A key meant for another provider is refused, not ignored.
        let foreign = serde_json::json!({ "toolbox_url": "https://x" });
        assert!(serde_json::from_value::<RunloopConfig>(foreign).is_err());
    }

    #[test]
    fn command_ids_are_uuid_v7() {
        let id = uuid_v7();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "7", "{id}");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(uuid_v7(), id);
    }

    #[test]
    fn waits_are_whole_seconds_between_one_and_twenty_five() {
        assert_eq!(wait_seconds(Duration::from_millis(10), 25), 1);
        assert_eq!(wait_seconds(Duration::from_millis(2500), 25), 3);
        assert_eq!(wait_seconds(Duration::from_secs(300), 25), 25);
        assert_eq!(wait_seconds(Duration::from_secs(300), 2), 2);
    }
}
