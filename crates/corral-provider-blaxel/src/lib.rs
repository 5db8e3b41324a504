//! Blaxel adapter.
//!
//! Blaxel runs sandboxes (container images on microVMs) that go to *standby* on their own after
//! about 15 s without traffic (memory and filesystem snapshotted, no compute charge) and resume
//! in under 25 ms on the next call. Two APIs take the same credential
//! (`Authorization: Bearer <API key>`) and the **workspace** (`X-Blaxel-Workspace`) on every
//! call: the control plane at `https://api.blaxel.ai/v0`, and each sandbox's own API ("sandbox
//! API") reached through `https://run.blaxel.ai/{workspace}/sandboxes/{name}`. The workspace
//! comes from the call's context (`X-Provider-Workspace`, or the profile's `workspace`); a call
//! without one is refused before any request.
//!
//! | Corral | Blaxel |
//! |---|---|
//! | create (`image` = container image) | `POST /v0/sandboxes {metadata: {name, labels}, spec: {region?, runtime: {image, memory}}}` |
//! | operation id | the name, `corral-op-<ulid>`, and the label `corral-operation-id`; found with `GET /v0/sandboxes/{name}` |
//! | get | `GET /v0/sandboxes/{name}` on the **control plane**, so a status read never wakes a sandbox in standby; `DEPLOYED` + `RUNNING` → running, `DEPLOYED` + `STANDBY` → paused (see `map.rs`) |
//! | delete | `DELETE /v0/sandboxes/{name}` (permanent) |
//! | exec | sandbox API `POST /process {command, name, workingDir, env, waitForCompletion: true, timeout}` → `{status, exitCode, stdout, stderr}`; when Blaxel's edge cuts the wait (502/504 after ~60 s) the process is followed with `GET /process/{name}` until it ends or its deadline passes (then `DELETE /process/{name}/kill`); at `timeout` Blaxel stops waiting (`422`) without killing, so the adapter kills |
//! | commands | sandbox API process routes (`commands.rs`): `POST /process {command, name: <command id>, waitForCompletion: false}`, `GET /process/{name}/logs/stream` (replayed from the start, read back by `logs.rs`), `DELETE /process/{name}` (TERM) and `…/kill` (KILL), `GET /process/{name}`. `commands = {stdin: false, signals: [KILL, TERM], resume: provider_replay, emulated: false}` |
//! | read file | sandbox API `GET /filesystem/{path}` with `Accept: application/octet-stream` (raw bytes) |
//! | write file | the parent is checked with `GET /filesystem/{parent}` (Blaxel's writes create missing parents, Corral's contract refuses them), then the binary-safe multipart upload: `POST /filesystem-multipart/initiate/{path}`, `PUT /filesystem-multipart/{uploadId}/part?partNumber=n` per 5 MiB, `POST …/complete` |
//! | snapshot | `POST /v0/sandboxes/{name}/snapshots`, native id `<sandbox>:<snapshot id>`; read from `GET …/snapshots` (no read of one), deleted with `DELETE …/snapshots/{id}` |
//! | restore | `POST /v0/sandboxes/{source}/fork {targetName: corral-op-<ulid>, targetType: "sandbox", snapshotId}`: named after the operation, as a create (a fork takes no labels) |
//!
//! `timeout` is not accepted: Blaxel's lifetime is provider-managed (standby, then kept until
//! deleted; its `ttl` is a maximum age that *deletes*, which is not what Corral's `timeout`
//! promises). There is no stop (standby is automatic). Volumes, ports and previews are not used.

pub mod api;
mod capabilities;
mod client;
mod commands;
#[cfg(feature = "fake")]
pub mod fake;
mod logs;
mod map;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use corral_domain::{CommandId, OperationId, Provider, ProviderCapabilities, Signal};
use corral_provider::files::check_parent_dir;
use corral_provider::{
    Adapter, CallContext, CappedOutput, CommandEvents, CommandSpec, CreateSpec, ExecOutput,
    ExecSpec, ObservedSandbox, OutputOffsets, ProviderError, Result, SandboxProvider, Started,
};
use corral_provider_http::{HttpConfig, ProviderHttp, Url, read_file_body};

pub use client::WORKSPACE_HEADER;

/// Blaxel's control-plane base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.blaxel.ai/v0";
/// Where each sandbox's own API is reached (`/{workspace}/sandboxes/{name}` below it).
pub const DEFAULT_RUN_URL: &str = "https://run.blaxel.ai";
/// The image a create without `image` runs (Blaxel's own default).
pub const DEFAULT_IMAGE: &str = "blaxel/base-image:latest";
/// Memory in MB when the configuration sets none (Blaxel's default; CPU = memory / 2048).
pub const DEFAULT_MEMORY_MB: u32 = 4096;
/// The labels Corral stamps on sandboxes (Blaxel carries only the operation id).
pub const TAGS: corral_provider::tags::TagKeys = corral_provider::tags::DASHED;
/// Bytes per part of a multipart upload.
pub const PART_BYTES: usize = 5 * 1024 * 1024;
/// Extra time the exec request may take beyond the command's deadline (Blaxel's own `timeout`
/// fires first; this only covers an answer that never comes).
const CLIENT_GRACE: Duration = Duration::from_secs(30);
/// How often a process is looked at again after the edge cut the wait.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// How to reach Blaxel: `[providers.blaxel]` in the server's configuration.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlaxelConfig {
    /// Control-plane base URL (`https://api.blaxel.ai/v0`).
    pub base_url: String,
    /// Base of the sandbox APIs (`https://run.blaxel.ai`).
    pub run_url: String,
    /// Timeouts and caps.
    pub http: HttpConfig,
    /// Image when a request has none.
    pub default_image: String,
    /// Memory of each sandbox, in MB.
    pub memory_mb: u32,
    /// Region to create in (absent: Blaxel picks one).
    pub region: Option<String>,
}

impl Default for BlaxelConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            run_url: DEFAULT_RUN_URL.into(),
            http: HttpConfig::default(),
            default_image: DEFAULT_IMAGE.into(),
            memory_mb: DEFAULT_MEMORY_MB,
            region: None,
        }
    }
}

/// The Blaxel [`SandboxProvider`].
#[derive(Debug)]
pub struct BlaxelProvider {
    client: client::Client,
    caps: ProviderCapabilities,
    config: BlaxelConfig,
}

pub(crate) const P: Provider = Provider::Blaxel;

impl Adapter for BlaxelProvider {
    const PROVIDER: Provider = P;
    type Config = BlaxelConfig;

    /// Fails only on an unusable base or run URL.
    fn from_config(config: BlaxelConfig) -> Result<Self> {
        let http = ProviderHttp::new(P, &config.base_url, config.http.clone())?;
        let run = Url::parse(&config.run_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| ProviderError::InvalidRequest {
                provider: P,
                message: "`run_url` must be an http(s) URL with a host".into(),
            })?;
        Ok(Self {
            client: client::Client::new(http, run),
            caps: capabilities::capabilities(),
            config,
        })
    }
}

/// The sandbox name for an operation, `corral-op-<ulid>`: Blaxel names are lower-case letters,
/// digits and hyphens.
pub fn sandbox_name(operation_id: &OperationId) -> String {
    format!("corral-{}", operation_id.to_string().replace('_', "-"))
}

/// The call's workspace, or `MissingContext` before any request.
fn workspace(ctx: &CallContext) -> Result<&str> {
    ctx.context()
        .workspace
        .as_deref()
        .filter(|w| !w.is_empty())
        .ok_or(ProviderError::MissingContext {
            provider: P,
            field: "workspace",
        })
}

/// The operation a sandbox name was derived from ([`sandbox_name`]), if it is one.
fn operation_of_name(name: &str) -> Option<OperationId> {
    let op: OperationId = name
        .strip_prefix("corral-op-")
        .and_then(|ulid| format!("op_{ulid}").parse().ok())?;
    (sandbox_name(&op) == name).then_some(op)
}

fn observed(sandbox: api::Sandbox) -> ObservedSandbox {
    // The name is the tag a fork can set (it takes no labels, and may carry its source's):
    // the label only where the name is not one of Corral's.
    let operation_id = operation_of_name(&sandbox.metadata.name).or_else(|| {
        sandbox
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(TAGS.operation_id))
            .and_then(|s| s.parse::<OperationId>().ok())
    });
    ObservedSandbox {
        status: map::status(sandbox.status.as_deref(), sandbox.state.as_deref()),
        native_id: sandbox.metadata.name,
        operation_id,
    }
}

/// `<sandbox>:<snapshot id>` (sandbox names have no `:`).
fn split_snapshot(native_id: &str) -> Result<(&str, &str)> {
    native_id
        .split_once(':')
        .filter(|(sandbox, id)| !sandbox.is_empty() && !id.is_empty())
        .ok_or_else(|| ProviderError::NotFound {
            provider: P,
            resource: format!("snapshot {native_id} (not of the form <sandbox>:<snapshot id>)"),
        })
}

fn observed_snapshot(
    sandbox: &str,
    snapshot: &api::SandboxSnapshot,
) -> corral_provider::ObservedSnapshot {
    corral_provider::ObservedSnapshot {
        native_id: format!("{sandbox}:{}", snapshot.id),
        status: map::snapshot_status(&snapshot.status),
        // Blaxel reports no size.
        size_bytes: None,
    }
}

fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

fn finished(resp: api::ProcessResponse, spec: &ExecSpec) -> Result<ExecOutput> {
    match resp.status.as_str() {
        // Blaxel's own `timeout` kills the process; Corral never stops or kills one otherwise.
        "killed" | "stopped" => Err(ProviderError::CommandTimedOut {
            after: spec.timeout,
        }),
        _ => {
            let cap = |text: String| {
                let mut out = CappedOutput::new(spec.max_output_bytes);
                out.push(text.as_bytes());
                out.finish()
            };
            let (stdout, t1) = cap(resp.stdout.unwrap_or_default());
            let (stderr, t2) = cap(resp.stderr.unwrap_or_default());
            Ok(ExecOutput {
                stdout,
                stderr,
                exit_code: resp.exit_code,
                truncated: t1 || t2,
            })
        }
    }
}

/// Whether an exec failure means the edge stopped waiting while the process may still run
/// (502/504, or no answer in time). A 503 is not one: the edge refuses while a sandbox wakes,
/// before the command starts, and that is `Unavailable` for the caller to retry.
fn edge_cut(e: &ProviderError) -> bool {
    matches!(
        e,
        ProviderError::ServerError {
            status: 502 | 504,
            ..
        } | ProviderError::TimedOutAfterSend { .. }
    )
}

/// Whether an exec failure is the sandbox giving up its wait at the `timeout` it was sent
/// (`422 process timed out after N seconds`): the process goes on running.
fn wait_timed_out(e: &ProviderError) -> bool {
    matches!(e, ProviderError::InvalidRequest { message, .. } if message.contains("process timed out"))
}

/// The refusal of stdin: Blaxel starts every process with no standard input.
fn no_stdin(operation: &'static str) -> ProviderError {
    ProviderError::Unsupported {
        provider: P,
        operation,
        reason: "Blaxel's process API gives a process no standard input".into(),
    }
}

/// Whether a failure while following a process is worth another look.
fn transient(e: &ProviderError) -> bool {
    edge_cut(e) || matches!(e, ProviderError::Unavailable { .. })
}

impl BlaxelProvider {
    /// Follows process `process` after the edge cut the wait, until it ends or the deadline
    /// (counted from `started`) passes; then it is killed.
    async fn follow(
        &self,
        ctx: &CallContext,
        ws: &str,
        native_id: &str,
        process: &str,
        spec: &ExecSpec,
        started: Instant,
    ) -> Result<ExecOutput> {
        loop {
            if started.elapsed() >= spec.timeout {
                // Best effort: the sandbox's own timeout kills it too.
                if let Err(e) = self.client.kill_process(ctx, ws, native_id, process).await {
                    tracing::debug!(error = %e, "killing a Blaxel process past its deadline failed");
                }
                return Err(ProviderError::CommandTimedOut {
                    after: spec.timeout,
                });
            }
            tokio::time::sleep(POLL_EVERY.min(spec.timeout.saturating_sub(started.elapsed())))
                .await;
            match self.client.get_process(ctx, ws, native_id, process).await {
                Ok(resp) if resp.status == "running" => {}
                Ok(resp) => return finished(resp, spec),
                Err(e) if transient(&e) => {}
                // No such process: the edge failed before the sandbox started the command, or
                // the sandbox itself is gone; the control plane says which, and neither is
                // this command's answer.
                Err(ProviderError::NotFound { .. }) => {
                    self.client.get_sandbox(ctx, ws, native_id).await?;
                    return Err(ProviderError::Unavailable {
                        provider: P,
                        message:
                            "the sandbox did not start the command; it may be waking, try again"
                                .into(),
                        retry_after: None,
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn upload(
        &self,
        ctx: &CallContext,
        ws: &str,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let upload = self
            .client
            .initiate_upload(ctx, ws, native_id, path)
            .await?;
        let id = upload.upload_id;
        let mut parts = Vec::new();
        let chunks: Vec<&[u8]> = if content.is_empty() {
            vec![content]
        } else {
            content.chunks(PART_BYTES).collect()
        };
        let mut sent = Ok(());
        for (i, chunk) in chunks.into_iter().enumerate() {
            let number = u32::try_from(i + 1).unwrap_or(u32::MAX);
            match self
                .client
                .upload_part(ctx, ws, native_id, &id, number, chunk)
                .await
            {
                Ok(part) => parts.push(part),
                Err(e) => {
                    sent = Err(e);
                    break;
                }
            }
        }
        if sent.is_ok() {
            sent = self
                .client
                .complete_upload(ctx, ws, native_id, &id, parts)
                .await;
        }
        if sent.is_err()
            && let Err(e) = self.client.abort_upload(ctx, ws, native_id, &id).await
        {
            tracing::debug!(error = %e, "aborting a Blaxel upload failed");
        }
        sent
    }
}

#[async_trait]
impl SandboxProvider for BlaxelProvider {
    fn provider(&self) -> Provider {
        P
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        let ws = workspace(ctx)?;
        let image = spec
            .request
            .image()
            .unwrap_or(&self.config.default_image)
            .to_owned();
        let body = api::SandboxCreate {
            metadata: api::MetadataIn {
                name: sandbox_name(&spec.operation_id),
                labels: BTreeMap::from([(
                    TAGS.operation_id.to_owned(),
                    spec.operation_id.to_string(),
                )]),
            },
            spec: api::SpecIn {
                region: self.config.region.clone(),
                runtime: api::RuntimeIn {
                    image,
                    memory: self.config.memory_mb,
                },
            },
        };
        Ok(observed(self.client.create_sandbox(ctx, ws, &body).await?))
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let ws = workspace(ctx)?;
        Ok(observed(self.client.get_sandbox(ctx, ws, native_id).await?))
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        let ws = workspace(ctx)?;
        self.client.delete_sandbox(ctx, ws, native_id).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let ws = workspace(ctx)?;
        let process = format!("corral-exec-{}", OperationId::new().ulid()).to_ascii_lowercase();
        let body = api::ProcessRequest {
            command: spec.command.clone(),
            name: process.clone(),
            working_dir: spec.cwd.clone(),
            env: spec.env.clone(),
            wait_for_completion: true,
            timeout: Some(whole_seconds(spec.timeout)),
        };
        let started = Instant::now();
        match self
            .client
            .run_process(ctx, ws, native_id, &body, spec.timeout + CLIENT_GRACE)
            .await
        {
            Ok(resp) if resp.status == "running" => {
                self.follow(ctx, ws, native_id, &process, spec, started)
                    .await
            }
            Ok(resp) => finished(resp, spec),
            Err(e) if edge_cut(&e) && started.elapsed() < spec.timeout + CLIENT_GRACE => {
                self.follow(ctx, ws, native_id, &process, spec, started)
                    .await
            }
            // Blaxel stops waiting at `timeout` but kills nothing: Corral does.
            Err(e) if wait_timed_out(&e) => {
                if let Err(e) = self.client.kill_process(ctx, ws, native_id, &process).await {
                    tracing::debug!(error = %e, "killing a Blaxel process past its deadline failed");
                }
                Err(ProviderError::CommandTimedOut {
                    after: spec.timeout,
                })
            }
            Err(ProviderError::TimedOutAfterSend { .. }) => Err(ProviderError::CommandTimedOut {
                after: spec.timeout,
            }),
            Err(e) => Err(e),
        }
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        let ws = workspace(ctx)?;
        let resp = self
            .client
            .download(ctx, ws, native_id, path)
            .await
            .map_err(|e| e.for_file(path))?;
        // Asked for raw bytes, a directory still answers with its JSON listing.
        let is_json = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if is_json {
            return Err(ProviderError::FileRefused {
                path: path.to_owned(),
                reason: "not a regular file".into(),
            });
        }
        read_file_body(P, resp, path, max_bytes).await
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let ws = workspace(ctx)?;
        check_parent_dir(path, |parent| async move {
            match self.client.stat(ctx, ws, native_id, &parent).await {
                Ok(listing) => Ok(listing.get("subdirectories").is_some()),
                Err(ProviderError::NotFound { .. }) => Ok(false),
                Err(e) => Err(e.for_file(&parent)),
            }
        })
        .await?;
        self.upload(ctx, ws, native_id, path, content)
            .await
            .map_err(|e| e.for_file(path))
    }

    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        let ws = workspace(ctx)?;
        if spec.stdin {
            return Err(no_stdin("start_command"));
        }
        let name = spec.command_id.to_string();
        let started = Started {
            handle: name.clone(),
            events: None,
        };
        // Blaxel would start a second process under the name of one that ended.
        match self.client.get_process(ctx, ws, native_id, &name).await {
            Ok(_) => return Ok(started),
            Err(ProviderError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        let body = api::ProcessRequest {
            command: spec.command.clone(),
            name,
            working_dir: spec.cwd.clone(),
            env: spec.env.clone(),
            wait_for_completion: false,
            timeout: None,
        };
        match self
            .client
            .run_process(ctx, ws, native_id, &body, self.config.http.request_timeout)
            .await
        {
            Ok(_) => Ok(started),
            // Started meanwhile by a retry that overtook this one.
            Err(ProviderError::InvalidRequest { message, .. })
                if message.contains("already exists and is running") =>
            {
                Ok(started)
            }
            Err(e) => Err(e),
        }
    }

    async fn attach_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        handle: &str,
        from: OutputOffsets,
    ) -> Result<CommandEvents<'a>> {
        let ws = workspace(ctx)?;
        // Blaxel answers the stream of an unknown name with 200 and an error body.
        match self.client.get_process(ctx, ws, native_id, handle).await {
            Ok(_) => {}
            Err(ProviderError::NotFound { .. }) => return Err(commands::unknown(handle)),
            Err(e) => return Err(e),
        }
        let resp = self
            .client
            .stream_process_logs(ctx, ws, native_id, handle, commands::STREAM_LIMIT)
            .await
            .map_err(|e| match e {
                ProviderError::NotFound { .. } => commands::unknown(handle),
                e => e,
            })?;
        let handle = handle.to_owned();
        let ended: commands::Ended<'a> = Box::new(move || {
            Box::pin(async move {
                match self.client.get_process(ctx, ws, native_id, &handle).await {
                    Ok(p) if map::process_ended(&p) => Ok(Some(map::exit_code(&p))),
                    Ok(_) => Ok(None),
                    Err(ProviderError::NotFound { .. }) => Err(commands::unknown(&handle)),
                    Err(e) => Err(e),
                }
            })
        });
        Ok(commands::attach(resp, from, commands::SILENCE_LIMIT, ended))
    }

    async fn write_stdin(
        &self,
        _ctx: &CallContext,
        _native_id: &str,
        _handle: &str,
        _offset: u64,
        _data: &[u8],
    ) -> Result<u64> {
        Err(no_stdin("write_stdin"))
    }

    async fn close_stdin(&self, _ctx: &CallContext, _native_id: &str, _handle: &str) -> Result<()> {
        Err(no_stdin("close_stdin"))
    }

    async fn signal_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        signal: Signal,
    ) -> Result<()> {
        let ws = workspace(ctx)?;
        let sent = match signal {
            Signal::Term => self.client.stop_process(ctx, ws, native_id, handle).await,
            Signal::Kill => self.client.kill_process(ctx, ws, native_id, handle).await,
            other => {
                return Err(ProviderError::Unsupported {
                    provider: P,
                    operation: "signal_command",
                    reason: format!(
                        "Blaxel stops a process (SIGTERM) or kills it (SIGKILL); it cannot send {other}"
                    ),
                });
            }
        };
        match sent {
            Ok(()) => Ok(()),
            // Blaxel answers 404 for a process that is not running (any more).
            Err(ProviderError::NotFound { .. }) => {
                match self.client.get_process(ctx, ws, native_id, handle).await {
                    Ok(_) => Ok(()),
                    Err(ProviderError::NotFound { .. }) => Err(commands::unknown(handle)),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn find_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        command_id: &CommandId,
    ) -> Result<Option<String>> {
        let ws = workspace(ctx)?;
        let name = command_id.to_string();
        match self.client.get_process(ctx, ws, native_id, &name).await {
            Ok(_) => Ok(Some(name)),
            Err(ProviderError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /v0/sandboxes/{name}/snapshots {name}`. The native id is `<sandbox>:<snapshot
    /// id>`: Blaxel reaches a snapshot only through its sandbox.
    async fn snapshot(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &corral_provider::SnapshotSpec,
    ) -> Result<corral_provider::ObservedSnapshot> {
        let ws = workspace(ctx)?;
        let body = api::SnapshotRequest {
            name: Some(spec.snapshot_id.to_string().replace('_', "-")),
        };
        let made = self
            .client
            .create_snapshot(ctx, ws, native_id, &body)
            .await?;
        Ok(observed_snapshot(native_id, &made))
    }

    /// The snapshot in `GET /v0/sandboxes/{name}/snapshots` (Blaxel has no read of one).
    async fn get_snapshot(
        &self,
        ctx: &CallContext,
        snapshot: &str,
    ) -> Result<corral_provider::ObservedSnapshot> {
        let ws = workspace(ctx)?;
        let (sandbox, id) = split_snapshot(snapshot)?;
        let all = self.client.list_snapshots(ctx, ws, sandbox).await?;
        all.iter()
            .find(|s| s.id == id)
            .map(|s| observed_snapshot(sandbox, s))
            .ok_or_else(|| ProviderError::NotFound {
                provider: P,
                resource: format!("snapshot {snapshot}"),
            })
    }

    /// `DELETE /v0/sandboxes/{name}/snapshots/{id}`.
    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        let ws = workspace(ctx)?;
        let (sandbox, id) = split_snapshot(snapshot)?;
        self.client.delete_snapshot(ctx, ws, sandbox, id).await
    }

    /// `POST /v0/sandboxes/{source}/fork {targetName, targetType: "sandbox", snapshotId}`: the
    /// new sandbox is named after the operation, as a create's is (a fork takes no labels).
    /// A retried restore whose first answer was lost meets 409 and answers that sandbox.
    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        let ws = workspace(ctx)?;
        let (source, id) = split_snapshot(snapshot)?;
        let target = sandbox_name(&spec.operation_id);
        let body = api::ForkRequest {
            target_name: target.clone(),
            target_type: "sandbox".into(),
            snapshot_id: id.to_owned(),
        };
        match self.client.fork(ctx, ws, source, &body).await {
            Ok(_) => Ok(ObservedSandbox {
                native_id: target,
                status: corral_domain::SandboxStatus::Creating,
                operation_id: Some(spec.operation_id),
            }),
            // 409: the target exists, made by an earlier attempt of this restore.
            Err(e @ ProviderError::InvalidRequest { .. }) => {
                match self.client.get_sandbox(ctx, ws, &target).await {
                    Ok(made) => Ok(observed(made)),
                    Err(_) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        let ws = workspace(ctx)?;
        // The name is derived from the operation id: one read, no listing to page through.
        match self
            .client
            .get_sandbox(ctx, ws, &sandbox_name(operation_id))
            .await
        {
            Ok(sandbox) => Ok(vec![observed(sandbox)]),
            Err(ProviderError::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_table_is_read_strictly() {
        let empty: BlaxelConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.base_url, DEFAULT_BASE_URL);
        assert_eq!(empty.run_url, DEFAULT_RUN_URL);
        assert_eq!(
            (empty.default_image.as_str(), empty.memory_mb),
            (DEFAULT_IMAGE, 4096)
        );
        let set: BlaxelConfig = serde_json::from_value(serde_json::json!({
            "region": "eu-lon-1",
            "memory_mb": 2048,
            "http": { "request_timeout_seconds": 5 },
        }))
        .unwrap();
        assert_eq!(set.region.as_deref(), Some("eu-lon-1"));
        assert_eq!(set.memory_mb, 2048);
        assert_eq!(set.http.request_timeout, Duration::from_secs(5));
        // A key meant for another provider is refused, not ignored; so is the workspace,
        // which is call context, not configuration.
        for foreign in [
            serde_json::json!({ "app": "x" }),
            serde_json::json!({ "workspace": "w" }),
        ] {
            assert!(serde_json::from_value::<BlaxelConfig>(foreign).is_err());
        }
        let bad_run = BlaxelConfig {
            run_url: "not a url".into(),
            ..BlaxelConfig::default()
        };
        assert!(BlaxelProvider::from_config(bad_run).is_err());
    }

    #[test]
    fn names_are_lower_case_and_carry_the_operation_id() {
        let op = OperationId::new();
        let name = sandbox_name(&op);
        assert_eq!(
            name,
            format!("corral-op-{}", op.ulid()).to_ascii_lowercase()
        );
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
    }

    #[test]
    fn file_routes_encode_segments_and_refuse_dot_segments_and_relative_paths() {
        assert_eq!(
            client::file_route("/filesystem", "/tmp/a b/x?y").unwrap(),
            "/filesystem/tmp/a%20b/x%3Fy"
        );
        assert!(client::file_route("/filesystem", "/tmp/../etc").is_err());
        assert!(client::file_route("/filesystem", "tmp/x").is_err());
    }
}
