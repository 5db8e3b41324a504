//! The one client of Corral's bridge HTTP contract (`docs/bridge-contract.md`), shared by the
//! three bridge kinds — `cloudflare`, `modal`, `deno` — whose crates differ only in id,
//! capabilities, pricing evidence and documented bridge set-up.
//!
//! A bridge is a small HTTP service the customer deploys, modelled on Cloudflare's sandbox
//! bridge Worker; Corral reaches it at the call's `X-Provider-Bridge-Url` (or the profile's, or
//! the operator's `bridge_url`) with the call's credential as a bearer key.
//!
//! | Corral | bridge |
//! |---|---|
//! | create | `POST /v1/sandbox {"tag": <operation id>}` → `{"id"}` |
//! | find by operation id | `GET /v1/sandbox?tag=` *(extension)*; absent → `Unsupported` (the outcome stays unknown) |
//! | get | `GET /v1/sandbox/{id}` *(extension)* → `{"running"}`; absent → `GET …/running` |
//! | delete | `DELETE /v1/sandbox/{id}` |
//! | exec | `POST …/exec {"argv": ["sh", "-c", <cwd/env prelude + command>], "timeout_ms"}` → SSE |
//! | read / write file | `GET` / `PUT …/file/{path}`, raw bytes; the parent is checked with `test -d` first |
//! | stop / resume | `POST …/stop`, `POST …/resume` *(lifecycle extension)* → `{"id", "running", "state"}`; absent → `Unsupported` naming the extension |
//! | snapshot / get / delete | `POST …/snapshots {"tag", "name"}`, `GET` / `DELETE /v1/snapshots/{sid}` *(lifecycle extension)* → `{"id", "status", "size_bytes"}` |
//! | restore | `POST /v1/snapshots/{sid}/restore {"tag": <operation id>}` *(lifecycle extension)* → `{"id"}`, a new sandbox found by its tag like a create's |
//! | commands | the process routes *(extension)*: `POST …/process`, `GET …/process/{id}/logs` (SSE from offsets), `POST`/`DELETE …/stdin`, `POST …/kill {signal}`, `GET …/process/{id}`; a bridge without them, and a command with stdin on a bridge that has none, get the exec wrapper (`process.rs`) |
//!
//! **Pinning.** A URL from the call's context is reached only at the addresses the server's
//! guard vetted ([`CallContext::pinned_addrs`]): the client resolves the host to exactly those
//! (no second DNS lookup), follows no redirects and uses no environment proxy. A context URL
//! without pinned addresses (an embedder calling the adapter without Corral's service) is
//! resolved normally: whoever builds the context is then the guard. The operator's
//! `bridge_url` is trusted like any provider base URL.
//!
//! Use it alone: build a [`BridgeProvider`] with [`BridgeProvider::new`]; the thin crates wrap
//! it with [`bridge_adapter!`]. Feature `fake` adds the contract on loopback
//! ([`fake::Fake`]) and its test harness.

pub mod api;
mod client;
pub mod exec;
#[cfg(feature = "fake")]
pub mod fake;
mod process;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use corral_domain::{
    CommandId, OperationId, Provider, ProviderCapabilities, SandboxStatus, Signal, SnapshotStatus,
};
use corral_provider::shell::{self, shell_quote};
use corral_provider::{
    CallContext, CommandEvents, CommandSpec, CreateSpec, ExecOutput, ExecSpec, ExposeSecret as _,
    ObservedSandbox, ObservedSnapshot, OutputOffsets, ProviderError, Result, SandboxProvider,
    SnapshotSpec, Started, commands_via_exec, files,
};
use corral_provider_http::{HttpConfig, map_body_error, path_segment, read_file_body};

#[doc(hidden)]
pub use async_trait as __async_trait;

use crate::api::codes;
use crate::exec::ExecStream;

/// Extra time an exec's HTTP exchange may take beyond the command's deadline (the bridge
/// kills the command at `timeout_ms` first; this only covers a bridge that never answers).
pub const EXEC_GRACE: Duration = Duration::from_secs(10);
/// Deadline of the `test -d` that checks a write's parent directory.
const PARENT_CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach a bridge: `[providers.<cloudflare|modal|deno>]` in the server's configuration.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BridgeConfig {
    /// The operator's own bridge, used when a call names none (`X-Provider-Bridge-Url` and the
    /// profile's `bridgeUrl` take precedence). Trusted like any provider base URL.
    pub bridge_url: Option<String>,
    /// Timeouts and caps.
    pub http: HttpConfig,
}

/// A bridge kind's [`SandboxProvider`]: the contract client for `provider`.
#[derive(Debug)]
pub struct BridgeProvider {
    provider: Provider,
    caps: ProviderCapabilities,
    client: client::Client,
}

fn observed(info: api::SandboxInfo) -> ObservedSandbox {
    ObservedSandbox {
        status: info
            .state
            .as_deref()
            .and_then(state)
            .unwrap_or_else(|| status(info.running)),
        operation_id: info.tag.and_then(|t| t.parse::<OperationId>().ok()),
        native_id: info.id,
    }
}

/// The contract has one status bit: a container that is not running sleeps (Cloudflare's
/// restarts on the next call) until deleted.
fn status(running: bool) -> SandboxStatus {
    if running {
        SandboxStatus::Running
    } else {
        SandboxStatus::Paused
    }
}

/// The lifecycle extension's finer `state`; `None` for a value Corral does not know (the
/// running bit then decides).
fn state(s: &str) -> Option<SandboxStatus> {
    use api::states;
    Some(match s {
        states::CREATING => SandboxStatus::Creating,
        states::STARTING => SandboxStatus::Starting,
        states::RUNNING => SandboxStatus::Running,
        states::PAUSED => SandboxStatus::Paused,
        states::STOPPING => SandboxStatus::Stopping,
        states::STOPPED => SandboxStatus::Stopped,
        states::FAILED => SandboxStatus::Failed,
        _ => return None,
    })
}

/// A snapshot's `status`; `None` for a value outside the contract.
fn snapshot_status(s: &str) -> Option<SnapshotStatus> {
    match s {
        "creating" => Some(SnapshotStatus::Creating),
        "ready" => Some(SnapshotStatus::Ready),
        "failed" => Some(SnapshotStatus::Failed),
        _ => None,
    }
}

/// The two optional lifecycle extensions, as their refusals name them.
const STOP_EXTENSION: &str = "stop-and-resume";
const SNAPSHOT_EXTENSION: &str = "snapshots";

/// A refusal of a lifecycle route: the route absent (404 without a contract code, 405, 501)
/// is `Unsupported` naming the missing extension, whatever the kind's capabilities promise;
/// `snapshot_not_found` is the snapshot unknown; the rest as every other route.
fn lifecycle_error(
    r: client::Refusal,
    provider: Provider,
    ctx: &CallContext,
    operation: &'static str,
    extension: &'static str,
    id: &str,
) -> ProviderError {
    if r.route_absent() {
        let said = if r.code().as_deref() == Some(codes::LIFECYCLE_UNSUPPORTED) {
            format!(" (it said: {})", r.1)
        } else {
            String::new()
        };
        return redacted(
            ctx,
            ProviderError::Unsupported {
                provider,
                operation,
                reason: format!(
                    "this bridge does not implement the `{extension}` lifecycle extension of \
                     the bridge contract (docs/bridge-contract.md){said}; deploy a bridge that \
                     does"
                ),
            },
        );
    }
    if r.code().as_deref() == Some(codes::SNAPSHOT_NOT_FOUND) {
        return ProviderError::NotFound {
            provider,
            resource: format!("snapshot {id}"),
        };
    }
    redacted(ctx, r.into_error(provider, id))
}

/// `/file/<segments>` for an absolute `path`, each segment percent-encoded; a relative path,
/// or one with `.` or `..` segments (which URL normalisation would fold), is refused.
fn file_route(path: &str) -> Result<String> {
    let refuse = |reason: &str| ProviderError::FileRefused {
        path: path.to_owned(),
        reason: reason.into(),
    };
    let Some(rest) = path.strip_prefix('/') else {
        return Err(refuse("the path must be absolute"));
    };
    let mut route = String::from("/file");
    for segment in rest.split('/').filter(|s| !s.is_empty()) {
        if segment == "." || segment == ".." {
            return Err(refuse("the path must not contain `.` or `..` segments"));
        }
        route.push('/');
        route.push_str(&path_segment(segment));
    }
    if route == "/file" {
        return Err(refuse("the path names no file"));
    }
    Ok(route)
}

/// A file route's failure as a file error about `path`; `sandbox_not_found` stays the sandbox
/// missing.
fn file_error(r: client::Refusal, provider: Provider, id: &str, path: &str) -> ProviderError {
    let sandbox_gone = r.code().as_deref() == Some(codes::SANDBOX_NOT_FOUND);
    let e = r.into_error(provider, id);
    if sandbox_gone { e } else { e.for_file(path) }
}

/// `e` with the call's credential scrubbed from its message.
fn redacted(ctx: &CallContext, e: ProviderError) -> ProviderError {
    match ctx.credential() {
        Some(secret) => e.redact(secret.expose_secret()),
        None => e,
    }
}

/// A refusal of a process route as an error about command `handle`: `process_not_found` is
/// the command unknown.
fn command_error(
    r: client::Refusal,
    provider: Provider,
    ctx: &CallContext,
    id: &str,
    handle: &str,
) -> ProviderError {
    if r.code().as_deref() == Some(codes::PROCESS_NOT_FOUND) {
        return ProviderError::NotFound {
            provider,
            resource: format!("command {handle}"),
        };
    }
    redacted(ctx, r.into_error(provider, id))
}

impl BridgeProvider {
    /// The client for `provider` (a bridge kind) advertising `caps`; fails only on an unusable
    /// configured `bridge_url`.
    pub fn new(
        provider: Provider,
        config: BridgeConfig,
        caps: ProviderCapabilities,
    ) -> Result<Self> {
        Ok(Self {
            client: client::Client::new(provider, config.bridge_url, config.http)?,
            provider,
            caps,
        })
    }

    /// A create's (or a restore's) answer: a new sandbox of this call's operation.
    fn created(&self, spec: &CreateSpec, created: api::Created) -> Result<ObservedSandbox> {
        if !api::is_sandbox_id(&created.id) {
            return Err(ProviderError::Protocol {
                provider: self.provider,
                message: "the bridge answered a sandbox id outside `^[a-z2-7]{1,128}$`".into(),
            });
        }
        Ok(ObservedSandbox {
            // A bridge without the tag extension does not echo it: the sandbox is still ours.
            operation_id: Some(spec.operation_id),
            native_id: created.id,
            // The bridge accepted it; any call reaches it (Cloudflare starts the container on
            // the first one).
            status: SandboxStatus::Running,
        })
    }

    /// A stop's or a resume's answer, which must be about `native_id` and in a state the
    /// operation leads to (`expected`).
    fn lifecycle_answer(
        &self,
        native_id: &str,
        info: api::SandboxInfo,
        operation: &str,
        expected: impl Fn(SandboxStatus) -> bool,
    ) -> Result<ObservedSandbox> {
        let protocol = |message: String| ProviderError::Protocol {
            provider: self.provider,
            message,
        };
        if info.id != native_id {
            return Err(protocol(format!(
                "the bridge answered a {operation} about another sandbox"
            )));
        }
        let Some(seen) = info.state.as_deref().and_then(state) else {
            return Err(protocol(format!(
                "the bridge answered a {operation} without a known `state`"
            )));
        };
        if !expected(seen) {
            return Err(protocol(format!(
                "the bridge answered a {operation} with state `{seen}`"
            )));
        }
        Ok(observed(info))
    }

    /// A snapshot as the contract answers it, checked.
    fn snapshot_answer(&self, info: api::SnapshotInfo) -> Result<ObservedSnapshot> {
        let protocol = |message: &str| ProviderError::Protocol {
            provider: self.provider,
            message: message.into(),
        };
        if !api::is_snapshot_id(&info.id) {
            return Err(protocol(
                "the bridge answered a snapshot id outside `^[A-Za-z0-9_-]{1,128}$`",
            ));
        }
        let Some(status) = snapshot_status(&info.status) else {
            return Err(protocol(
                "the bridge answered a snapshot status other than creating, ready or failed",
            ));
        };
        Ok(ObservedSnapshot {
            native_id: info.id,
            status,
            size_bytes: info.size_bytes,
        })
    }

    async fn is_dir(&self, ctx: &CallContext, native_id: &str, dir: &str) -> Result<bool> {
        let mut spec = ExecSpec::new(format!("test -d {}", shell_quote(dir)));
        spec.timeout = PARENT_CHECK_TIMEOUT;
        spec.max_output_bytes = 1024;
        Ok(self.exec(ctx, native_id, &spec).await?.exit_code == 0)
    }
}

#[async_trait]
impl SandboxProvider for BridgeProvider {
    fn provider(&self) -> Provider {
        self.provider
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        let created = self
            .client
            .create(ctx, &spec.operation_id.to_string())
            .await?;
        self.created(spec, created)
    }

    async fn stop(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let info = self.client.stop(ctx, native_id).await.map_err(|r| {
            lifecycle_error(r, self.provider, ctx, "stop", STOP_EXTENSION, native_id)
        })?;
        self.lifecycle_answer(native_id, info, "stop", SandboxStatus::is_stopped)
    }

    async fn resume(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let info = self.client.resume(ctx, native_id).await.map_err(|r| {
            lifecycle_error(r, self.provider, ctx, "resume", STOP_EXTENSION, native_id)
        })?;
        self.lifecycle_answer(native_id, info, "resume", |s| {
            matches!(s, SandboxStatus::Starting | SandboxStatus::Running)
        })
    }

    async fn snapshot(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &SnapshotSpec,
    ) -> Result<ObservedSnapshot> {
        let body = api::SnapshotRequest {
            tag: Some(spec.snapshot_id.to_string()),
            name: spec.name.clone(),
        };
        let info = self
            .client
            .snapshot(ctx, native_id, &body)
            .await
            .map_err(|r| {
                lifecycle_error(
                    r,
                    self.provider,
                    ctx,
                    "snapshot",
                    SNAPSHOT_EXTENSION,
                    native_id,
                )
            })?;
        self.snapshot_answer(info)
    }

    async fn get_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<ObservedSnapshot> {
        let info = self.client.get_snapshot(ctx, snapshot).await.map_err(|r| {
            lifecycle_error(
                r,
                self.provider,
                ctx,
                "get_snapshot",
                SNAPSHOT_EXTENSION,
                snapshot,
            )
        })?;
        if info.id != snapshot {
            return Err(ProviderError::Protocol {
                provider: self.provider,
                message: "the bridge answered another snapshot than the one asked".into(),
            });
        }
        self.snapshot_answer(info)
    }

    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        self.client
            .delete_snapshot(ctx, snapshot)
            .await
            .map_err(|r| {
                lifecycle_error(
                    r,
                    self.provider,
                    ctx,
                    "delete_snapshot",
                    SNAPSHOT_EXTENSION,
                    snapshot,
                )
            })
    }

    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        let created = self
            .client
            .restore(ctx, snapshot, &spec.operation_id.to_string())
            .await
            .map_err(|r| {
                lifecycle_error(
                    r,
                    self.provider,
                    ctx,
                    "restore",
                    SNAPSHOT_EXTENSION,
                    snapshot,
                )
            })?;
        self.created(spec, created)
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        if let Some(info) = self.client.observe(ctx, native_id).await? {
            return Ok(observed(info));
        }
        // Without the extension, only the running bit is known.
        let running = self.client.running(ctx, native_id).await?;
        Ok(ObservedSandbox {
            native_id: native_id.to_owned(),
            status: status(running.running),
            operation_id: None,
        })
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        self.client.delete(ctx, native_id).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let body = api::ExecRequest {
            argv: vec![
                "sh".into(),
                "-c".into(),
                shell::script(self.provider, spec)?,
            ],
            timeout_ms: Some(
                u64::try_from(spec.timeout.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            ),
            cwd: None,
            env: None,
        };
        let started = Instant::now();
        let timed_out = |e: ProviderError| match e {
            ProviderError::TimedOutAfterSend { .. } if started.elapsed() >= spec.timeout => {
                ProviderError::CommandTimedOut {
                    after: spec.timeout,
                }
            }
            other => other,
        };
        let mut resp = self
            .client
            .exec(ctx, native_id, &body, spec.timeout + EXEC_GRACE)
            .await
            .map_err(|r| timed_out(r.into_error(self.provider, native_id)))?;
        let mut stream = ExecStream::new(self.provider, spec.timeout, spec.max_output_bytes);
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| timed_out(map_body_error(self.provider, &e)))?
        {
            if stream.push(&chunk).map_err(|e| redacted(ctx, e))? {
                break;
            }
        }
        // An error event quotes the bridge, which could echo the key. A bridge without the
        // `exec_timeout` code (Cloudflare's Worker) ends a command it killed at `timeout_ms`
        // with another error: past the deadline, that is the command timing out.
        stream.finish().map_err(|e| match e {
            ProviderError::ServerError { .. } if started.elapsed() >= spec.timeout => {
                ProviderError::CommandTimedOut {
                    after: spec.timeout,
                }
            }
            e => redacted(ctx, e),
        })
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        let route = file_route(path)?;
        match self.client.read_file(ctx, native_id, &route).await {
            Ok(resp) => read_file_body(self.provider, resp, path, max_bytes).await,
            Err(r) => match r.code().as_deref() {
                Some(codes::WORKSPACE_READ_NOT_FOUND) => Err(ProviderError::FileNotFound {
                    path: path.to_owned(),
                }),
                _ => Err(file_error(r, self.provider, native_id, path)),
            },
        }
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let route = file_route(path)?;
        // Cloudflare's Worker creates missing parents; Corral's contract refuses them.
        files::check_parent_dir(path, |parent| async move {
            self.is_dir(ctx, native_id, &parent).await
        })
        .await?;
        match self
            .client
            .write_file(ctx, native_id, &route, content)
            .await
        {
            Ok(()) => Ok(()),
            Err(r) => Err(file_error(r, self.provider, native_id, path)),
        }
    }

    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        let script = shell::script(
            self.provider,
            &ExecSpec {
                command: spec.command.clone(),
                cwd: spec.cwd.clone(),
                env: spec.env.clone(),
                ..ExecSpec::new("")
            },
        )?;
        let id = spec.command_id.to_string();
        let body = api::StartProcessRequest {
            argv: vec!["sh".into(), "-c".into(), script],
            process_id: Some(id.clone()),
            stdin: spec.stdin,
            cwd: None,
            env: None,
            timeout_ms: Some(
                u64::try_from(spec.timeout.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            ),
        };
        match self.client.start_process(ctx, native_id, &body).await {
            Ok(p) => Ok(Started {
                handle: process::handle(&p.id),
                events: None,
            }),
            // A retried start: the process runs already.
            Err(r) if r.code().as_deref() == Some(codes::PROCESS_EXISTS) => Ok(Started {
                handle: process::handle(&id),
                events: None,
            }),
            Err(r)
                if r.route_absent()
                    || (spec.stdin && r.code().as_deref() == Some(codes::STDIN_UNSUPPORTED)) =>
            {
                tracing::debug!(
                    provider = %self.provider,
                    "the bridge has no process routes (or no stdin for them): the exec wrapper runs the command"
                );
                commands_via_exec::start(self, ctx, native_id, spec).await
            }
            Err(r) => Err(redacted(ctx, r.into_error(self.provider, native_id))),
        }
    }

    async fn attach_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        handle: &str,
        from: OutputOffsets,
    ) -> Result<CommandEvents<'a>> {
        let Some(pid) = process::process_id(handle) else {
            return commands_via_exec::attach(self, ctx, native_id, handle, from);
        };
        let resp = self
            .client
            .process_logs(
                ctx,
                native_id,
                pid,
                (from.stdout, from.stderr),
                process::STREAM_LIMIT,
            )
            .await
            .map_err(|r| command_error(r, self.provider, ctx, native_id, handle))?;
        Ok(process::attach(
            self.provider,
            ctx,
            resp,
            from,
            process::SILENCE_LIMIT,
        ))
    }

    async fn write_stdin(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<u64> {
        let Some(pid) = process::process_id(handle) else {
            return commands_via_exec::write_stdin(self, ctx, native_id, handle, offset, data)
                .await;
        };
        let body = api::StdinRequest {
            offset,
            data: base64::engine::general_purpose::STANDARD.encode(data),
        };
        self.client
            .write_stdin(ctx, native_id, pid, &body)
            .await
            .map(|a| a.accepted)
            .map_err(|r| command_error(r, self.provider, ctx, native_id, handle))
    }

    async fn close_stdin(&self, ctx: &CallContext, native_id: &str, handle: &str) -> Result<()> {
        let Some(pid) = process::process_id(handle) else {
            return commands_via_exec::close_stdin(self, ctx, native_id, handle).await;
        };
        self.client
            .close_stdin(ctx, native_id, pid)
            .await
            .map_err(|r| command_error(r, self.provider, ctx, native_id, handle))
    }

    async fn signal_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        signal: Signal,
    ) -> Result<()> {
        let Some(pid) = process::process_id(handle) else {
            return commands_via_exec::signal(self, ctx, native_id, handle, signal).await;
        };
        let body = api::KillRequest {
            signal: Some(format!("SIG{}", signal.as_str())),
        };
        self.client
            .kill_process(ctx, native_id, pid, &body)
            .await
            .map_err(|r| command_error(r, self.provider, ctx, native_id, handle))
    }

    async fn find_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        command_id: &CommandId,
    ) -> Result<Option<String>> {
        match self
            .client
            .get_process(ctx, native_id, &command_id.to_string())
            .await
        {
            Ok(p) => Ok(Some(process::handle(&p.id))),
            // Not a bridge process: it may have gone through the exec wrapper.
            Err(r) if r.route_absent() || r.code().as_deref() == Some(codes::PROCESS_NOT_FOUND) => {
                commands_via_exec::find(self, ctx, native_id, command_id).await
            }
            Err(r) => Err(redacted(ctx, r.into_error(self.provider, native_id))),
        }
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        match self.client.find(ctx, &operation_id.to_string()).await? {
            // The tag is checked again by the contract wrapper (`corral_provider::Contracted`).
            Some(list) => Ok(list.sandboxes.into_iter().map(observed).collect()),
            None => Err(ProviderError::Unsupported {
                provider: self.provider,
                operation: "find_by_operation_id",
                reason: "the bridge does not implement the lookup-by-tag extension \
                         (docs/bridge-contract.md), so a create whose answer was lost stays \
                         unknown"
                    .into(),
            }),
        }
    }
}

/// Defines a thin bridge-kind adapter: `$name` wraps a [`BridgeProvider`] for `$provider`
/// with the capabilities `$caps()`, implements `corral_provider::Adapter` (configuration:
/// [`BridgeConfig`]) and forwards every `SandboxProvider` call.
#[macro_export]
macro_rules! bridge_adapter {
    ($(#[$meta:meta])* $name:ident, $provider:expr, $caps:path) => {
        $(#[$meta])*
        #[derive(Debug)]
        pub struct $name($crate::BridgeProvider);

        impl ::corral_provider::Adapter for $name {
            const PROVIDER: ::corral_domain::Provider = $provider;
            type Config = $crate::BridgeConfig;

            fn from_config(config: $crate::BridgeConfig) -> ::corral_provider::Result<Self> {
                $crate::BridgeProvider::new($provider, config, $caps()).map(Self)
            }
        }

        #[$crate::__async_trait::async_trait]
        impl ::corral_provider::SandboxProvider for $name {
            fn provider(&self) -> ::corral_domain::Provider {
                self.0.provider()
            }
            fn capabilities(&self) -> &::corral_domain::ProviderCapabilities {
                self.0.capabilities()
            }
            async fn create(
                &self,
                ctx: &::corral_provider::CallContext,
                spec: &::corral_provider::CreateSpec,
            ) -> ::corral_provider::Result<::corral_provider::ObservedSandbox> {
                self.0.create(ctx, spec).await
            }
            async fn get(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
            ) -> ::corral_provider::Result<::corral_provider::ObservedSandbox> {
                self.0.get(ctx, native_id).await
            }
            async fn delete(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
            ) -> ::corral_provider::Result<()> {
                self.0.delete(ctx, native_id).await
            }
            async fn exec(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
                spec: &::corral_provider::ExecSpec,
            ) -> ::corral_provider::Result<::corral_provider::ExecOutput> {
                self.0.exec(ctx, native_id, spec).await
            }
            async fn read_file(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
                path: &str,
                max_bytes: usize,
            ) -> ::corral_provider::Result<Vec<u8>> {
                self.0.read_file(ctx, native_id, path, max_bytes).await
            }
            async fn write_file(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
                path: &str,
                content: &[u8],
            ) -> ::corral_provider::Result<()> {
                self.0.write_file(ctx, native_id, path, content).await
            }
            async fn find_by_operation_id(
                &self,
                ctx: &::corral_provider::CallContext,
                operation_id: &::corral_domain::OperationId,
            ) -> ::corral_provider::Result<Vec<::corral_provider::ObservedSandbox>> {
                self.0.find_by_operation_id(ctx, operation_id).await
            }
            async fn stop(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
            ) -> ::corral_provider::Result<::corral_provider::ObservedSandbox> {
                self.0.stop(ctx, native_id).await
            }
            async fn resume(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
            ) -> ::corral_provider::Result<::corral_provider::ObservedSandbox> {
                self.0.resume(ctx, native_id).await
            }
            async fn snapshot(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
                spec: &::corral_provider::SnapshotSpec,
            ) -> ::corral_provider::Result<::corral_provider::ObservedSnapshot> {
                self.0.snapshot(ctx, native_id, spec).await
            }
            async fn get_snapshot(
                &self,
                ctx: &::corral_provider::CallContext,
                snapshot: &str,
            ) -> ::corral_provider::Result<::corral_provider::ObservedSnapshot> {
                self.0.get_snapshot(ctx, snapshot).await
            }
            async fn delete_snapshot(
                &self,
                ctx: &::corral_provider::CallContext,
                snapshot: &str,
            ) -> ::corral_provider::Result<()> {
                self.0.delete_snapshot(ctx, snapshot).await
            }
            async fn restore(
                &self,
                ctx: &::corral_provider::CallContext,
                spec: &::corral_provider::CreateSpec,
                snapshot: &str,
            ) -> ::corral_provider::Result<::corral_provider::ObservedSandbox> {
                self.0.restore(ctx, spec, snapshot).await
            }
            async fn start_command<'a>(
                &'a self,
                ctx: &'a ::corral_provider::CallContext,
                native_id: &'a str,
                spec: &::corral_provider::CommandSpec,
            ) -> ::corral_provider::Result<::corral_provider::Started<'a>> {
                self.0.start_command(ctx, native_id, spec).await
            }
            async fn attach_command<'a>(
                &'a self,
                ctx: &'a ::corral_provider::CallContext,
                native_id: &'a str,
                handle: &str,
                from: ::corral_provider::OutputOffsets,
            ) -> ::corral_provider::Result<::corral_provider::CommandEvents<'a>> {
                self.0.attach_command(ctx, native_id, handle, from).await
            }
            async fn write_stdin(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
                handle: &str,
                offset: u64,
                data: &[u8],
            ) -> ::corral_provider::Result<u64> {
                self.0.write_stdin(ctx, native_id, handle, offset, data).await
            }
            async fn close_stdin(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
                handle: &str,
            ) -> ::corral_provider::Result<()> {
                self.0.close_stdin(ctx, native_id, handle).await
            }
            async fn signal_command(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
                handle: &str,
                signal: ::corral_domain::Signal,
            ) -> ::corral_provider::Result<()> {
                self.0.signal_command(ctx, native_id, handle, signal).await
            }
            async fn find_command(
                &self,
                ctx: &::corral_provider::CallContext,
                native_id: &str,
                command_id: &::corral_domain::CommandId,
            ) -> ::corral_provider::Result<Option<String>> {
                self.0.find_command(ctx, native_id, command_id).await
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_routes_encode_segments_and_refuse_dot_segments_and_relative_paths() {
        assert_eq!(
            file_route("/tmp/a b/c?.txt").unwrap(),
            "/file/tmp/a%20b/c%3F.txt"
        );
        assert_eq!(file_route("/workspace//x").unwrap(), "/file/workspace/x");
        for bad in ["tmp/x", "/tmp/../etc/passwd", "/./x", "/", ""] {
            assert!(
                matches!(file_route(bad), Err(ProviderError::FileRefused { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_running_bit_maps_to_running_or_paused() {
        assert_eq!(status(true), SandboxStatus::Running);
        assert_eq!(status(false), SandboxStatus::Paused);
    }

    #[test]
    fn a_known_state_wins_over_the_running_bit_and_an_unknown_one_does_not() {
        let info = |running: bool, state: Option<&str>| api::SandboxInfo {
            id: "abc".into(),
            running,
            tag: None,
            state: state.map(str::to_owned),
        };
        for (wire, want) in [
            ("creating", SandboxStatus::Creating),
            ("starting", SandboxStatus::Starting),
            ("running", SandboxStatus::Running),
            ("paused", SandboxStatus::Paused),
            ("stopping", SandboxStatus::Stopping),
            ("stopped", SandboxStatus::Stopped),
            ("failed", SandboxStatus::Failed),
        ] {
            assert_eq!(observed(info(false, Some(wire))).status, want, "{wire}");
            assert_eq!(want.as_str(), wire);
        }
        assert_eq!(
            observed(info(true, Some("hibernating"))).status,
            SandboxStatus::Running
        );
        assert_eq!(observed(info(false, None)).status, SandboxStatus::Paused);
        for (wire, want) in [
            ("creating", Some(SnapshotStatus::Creating)),
            ("ready", Some(SnapshotStatus::Ready)),
            ("failed", Some(SnapshotStatus::Failed)),
            ("deleted", None),
        ] {
            assert_eq!(snapshot_status(wire), want, "{wire}");
        }
    }
}
