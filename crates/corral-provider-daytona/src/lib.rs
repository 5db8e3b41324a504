//! Daytona adapter: persistent sandboxes created from snapshots (named images).
//!
//! Two planes, one credential (`Authorization: Bearer <API key>`, the Corral provider
//! credential; no organization header is needed with an API key):
//! - the **control API** (`https://app.daytona.io/api`): `POST /sandbox`,
//!   `GET /sandbox/{id}`, `DELETE /sandbox/{id}`, `GET /sandbox?labels=&includeErroredDeleted=true`
//!   (lookup by label, errored sandboxes included);
//! - the **toolbox** of each sandbox at `{toolboxProxyUrl}/{sandboxId}` (the URL comes from the
//!   sandbox's own record; on Daytona Cloud `https://proxy.app.daytona.io/toolbox`):
//!   `POST /process/execute`, `GET /files/info`, `GET /files/download`, `POST /files/upload`.
//!
//! Mapping: `image` is the `snapshot`; the lifetime is the idle **auto-stop** interval
//! `autoStopInterval`, in **minutes** (so `timeout` must be a multiple of 60 seconds; the
//! default is Daytona's 15 minutes). A stopped sandbox keeps its disk and is not deleted. The
//! operation id is the label `corral-operation-id` and also the sandbox `name`, which Daytona
//! keeps unique: a repeated create answers 409, and the adapter then returns the sandbox the
//! earlier attempt made (`GET /sandbox/{name}`), so creates are idempotent per operation. Create answers before the sandbox is
//! `started` (`creating`/`starting` → creating; `started` → running); every documented state
//! is mapped in `map.rs`.
//!
//! Lifecycle (asynchronous, as Daytona's runners are): stop `POST /sandbox/{id}/stop`
//! (`stopping`, then `stopped`; its `400` for a sandbox not started is idempotent success once
//! a get shows it stopped), resume `POST /sandbox/{id}/start` (`starting`, then `started`),
//! snapshot `POST /sandbox/{id}/snapshot` named after the Corral snapshot id (followed with
//! `GET /snapshots/{name}`, deleted with `DELETE /snapshots/{id}`), restore a create whose
//! `snapshot` is that name; `idleStopSeconds` is `autoStopInterval`.
//!
//! Exec: `/process/execute` **merges stderr into stdout** (`result`), so output streams are
//! advertised as `combined` and everything arrives in `stdout`; the result is a JSON string, so
//! non-UTF-8 output bytes are replaced. The command travels base64-encoded inside
//! `sh -c 's=$(echo <b64> | base64 -d) && eval "$s"'` (see `wire_command`: robust to both
//! ways Daytona daemons have read the command; needs `base64` in the image, as Daytona's own
//! SDKs do), with `cwd`, `envs` and `timeout` (seconds, rounded up) as the toolbox API takes
//! them; the daemon answers 408 when the timeout fires.
//! Commands (native, `commands` module): one toolbox session per command, named after
//! Corral's command id (a retried start finds it), the command run with `runAsync`; its log
//! polled as a snapshot from byte 0 (combined, plain text: `provider_replay`); `terminate`
//! (SIGKILL) the only signal; no stdin (the session input appends newlines and cannot be
//! closed).
//! Files: the upload creates missing parents, so a write checks the parent with
//! `/files/info` first (Corral's contract is that the parent must exist). The daemon answers
//! 403 for a file the sandbox user may not read or write: a file operation failure, not a
//! rejected key.
//!
//! Configuration (`[providers.daytona]`, [`DaytonaConfig`]): `base_url`, `toolbox_url`,
//! `trusted_hosts` and the `http` table. A sandbox record's `toolboxProxyUrl` is a provider
//! answer and the API key goes there, so it is used only when it is on `trusted_hosts`
//! (`daytona.io` over https at public addresses, by default; see
//! `corral_provider_http::TrustedHosts`).

pub mod api;
pub mod capabilities;
mod client;
mod commands;
#[cfg(feature = "fake")]
pub mod fake;
mod map;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use corral_domain::{
    CommandId, OperationId, Provider, ProviderCapabilities, SandboxStatus, Signal, SnapshotStatus,
};
use corral_provider::files::check_parent_dir;
use corral_provider::{
    Adapter, CallContext, CappedOutput, CommandEvent, CommandEvents, CommandSpec, CreateSpec,
    ExecOutput, ExecSpec, ObservedSandbox, ObservedSnapshot, OutputOffsets, ProviderError, Result,
    SandboxProvider, SnapshotSpec, Started, TaggedPage, TaggedSandbox,
};
use corral_provider_http::{HttpConfig, ProviderHttp, TrustedHosts, TrustedUrl, read_file_body};
use futures::stream::{self, StreamExt as _};

use crate::client::{Client, toolbox_base};

/// The labels Corral stamps on sandboxes (Daytona labels take dashes).
const TAGS: corral_provider::tags::TagKeys = corral_provider::tags::DASHED;
pub use crate::commands::session_id;

pub(crate) const P: Provider = Provider::Daytona;
/// Extra time the HTTP exchange of an exec may take beyond the command's deadline.
const EXEC_GRACE: Duration = Duration::from_secs(5);

/// How to reach Daytona: `[providers.daytona]` in the server's configuration.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaytonaConfig {
    /// Control API base URL (`https://app.daytona.io/api`).
    pub base_url: String,
    /// Toolbox proxy used when a sandbox record names none; `toolbox_url` in the
    /// configuration file.
    #[serde(rename = "toolbox_url")]
    pub default_toolbox_proxy_url: String,
    /// Hosts a toolbox URL may be on, since the API key is sent there: host suffixes (https
    /// and public addresses only; default Daytona's `daytona.io`) or exact origins such as
    /// `http://127.0.0.1:4567` (fakes, self-hosted Daytona). A sandbox record's
    /// `toolboxProxyUrl` off these hosts is refused, and so is a `toolbox_url` at start-up.
    pub trusted_hosts: Vec<String>,
    /// Timeouts and caps.
    pub http: HttpConfig,
}

/// Daytona Cloud's domain: its API (`app.daytona.io`) and toolbox proxy
/// (`proxy.app.daytona.io`) are under it.
pub const DEFAULT_TRUSTED_HOSTS: [&str; 1] = ["daytona.io"];

impl Default for DaytonaConfig {
    fn default() -> Self {
        Self {
            base_url: "https://app.daytona.io/api".into(),
            default_toolbox_proxy_url: "https://proxy.app.daytona.io/toolbox".into(),
            trusted_hosts: DEFAULT_TRUSTED_HOSTS.map(str::to_owned).to_vec(),
            http: HttpConfig::default(),
        }
    }
}

/// The Daytona adapter.
#[derive(Debug)]
pub struct DaytonaProvider {
    client: Client,
    caps: ProviderCapabilities,
    default_toolbox_proxy_url: String,
    /// Toolbox base per sandbox, learnt from create/get (and checked against the trusted
    /// hosts).
    toolboxes: Mutex<HashMap<String, TrustedUrl>>,
    /// Sandboxes this adapter started again and has not yet seen `started`: their `starting`
    /// is a resume's (`starting`), not a create's (`creating`). Lost on restart, when
    /// `starting` reads as `creating` again (not usable yet either way).
    resumed: Mutex<HashSet<String>>,
}

impl Adapter for DaytonaProvider {
    const PROVIDER: Provider = P;
    type Config = DaytonaConfig;

    /// Fails on an unusable base URL, `trusted_hosts` entry or toolbox URL (one off the
    /// trusted hosts included).
    fn from_config(config: DaytonaConfig) -> Result<Self> {
        let trusted = TrustedHosts::parse(P, &config.trusted_hosts)?;
        let http =
            ProviderHttp::new(P, &config.base_url, config.http)?.with_trusted_hosts(trusted)?;
        toolbox_base(&http, &config.default_toolbox_proxy_url, "probe").map_err(|e| {
            ProviderError::InvalidRequest {
                provider: P,
                message: format!("toolbox_url is not usable: {e}"),
            }
        })?;
        Ok(Self {
            client: Client::new(http),
            caps: capabilities::capabilities(),
            default_toolbox_proxy_url: config.default_toolbox_proxy_url,
            toolboxes: Mutex::new(HashMap::new()),
            resumed: Mutex::new(HashSet::new()),
        })
    }
}

impl DaytonaProvider {
    /// Caches the sandbox's toolbox base, when its `toolboxProxyUrl` is on the trusted hosts
    /// (the API key is sent there).
    fn remember(&self, sandbox: &api::Sandbox) -> Result<TrustedUrl> {
        let proxy = if sandbox.toolbox_proxy_url.is_empty() {
            &self.default_toolbox_proxy_url
        } else {
            &sandbox.toolbox_proxy_url
        };
        let base = toolbox_base(self.client.http(), proxy, &sandbox.id)?;
        self.toolboxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(sandbox.id.clone(), base.clone());
        Ok(base)
    }

    /// The sandbox's toolbox base, from the cache or from `GET /sandbox/{id}`.
    async fn toolbox(&self, ctx: &CallContext, id: &str) -> Result<TrustedUrl> {
        let cached = self
            .toolboxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            .cloned();
        match cached {
            Some(url) => Ok(url),
            None => {
                let sandbox = self.client.get_sandbox(ctx, id).await?;
                self.remember(&sandbox)
            }
        }
    }

    /// `POST /sandbox` from `snapshot` (a Daytona snapshot name; the server's default when
    /// `None`), named and labelled with the operation id, stopping after the idle interval
    /// (see [`auto_stop_minutes`]).
    async fn create_from(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: Option<String>,
    ) -> Result<ObservedSandbox> {
        let name = spec.operation_id.to_string();
        let body = api::CreateSandbox {
            name: Some(name.clone()),
            snapshot,
            labels: TAGS.stamp(ctx, &spec.operation_id),
            auto_stop_interval: Some(auto_stop_minutes(spec)),
        };
        let created = match self.client.create_sandbox(ctx, &body).await? {
            Some(created) => created,
            None => {
                // The name (the operation id) is taken: an earlier attempt of this very
                // operation made it, unless its label says otherwise.
                let existing = self.client.get_sandbox(ctx, &name).await?;
                if existing.labels.get(TAGS.operation_id) != Some(&name) {
                    return Err(ProviderError::InvalidRequest {
                        provider: P,
                        message: format!(
                            "a sandbox named {name} exists that was not created for this operation"
                        ),
                    });
                }
                existing
            }
        };
        // The sandbox exists now: failing to remember its toolbox must not hide that.
        let _ = self.remember(&created);
        let mut observed = self.observed(&created);
        observed.operation_id = Some(spec.operation_id);
        Ok(observed)
    }

    fn observed(&self, sandbox: &api::Sandbox) -> ObservedSandbox {
        let mut resumed = self
            .resumed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let status = map::status(sandbox.state.as_deref(), resumed.contains(&sandbox.id));
        // Forgotten once the start is over (a `stopped` answered before Daytona moved on is
        // not over).
        if !matches!(
            status,
            SandboxStatus::Starting | SandboxStatus::Stopped | SandboxStatus::Stopping
        ) {
            resumed.remove(&sandbox.id);
        }
        ObservedSandbox {
            native_id: sandbox.id.clone(),
            status,
            operation_id: sandbox
                .labels
                .get(TAGS.operation_id)
                .and_then(|v| v.parse().ok()),
        }
    }
}

/// The command as `/process/execute` gets it: `sh -c 's=$(echo <base64> | base64 -d) && eval
/// "$s"'`. Daytona daemons have either split the command with a quote-aware splitter that knows
/// no escapes, or fed it to the sandbox shell's stdin; this form survives both (only base64
/// characters inside the single quotes), keeps every byte of the command (an assignment does
/// no word splitting or globbing), and does not leave the script on stdin for the command to
/// read.
fn wire_command(command: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(command);
    format!("sh -c 's=$(echo {encoded} | base64 -d) && eval \"$s\"'")
}

fn no_stdin() -> ProviderError {
    ProviderError::Unsupported {
        provider: P,
        operation: "command stdin",
        reason: "Daytona's session input appends a newline to every write and cannot be closed"
            .into(),
    }
}

/// Whole minutes for `seconds`, rounded up (validation makes it a multiple of 60 already).
fn minutes(seconds: u64) -> u64 {
    seconds.div_ceil(60)
}

/// `autoStopInterval`, in minutes: Daytona's one idle stop carries both the lifetime
/// (`timeout`, which on Daytona always was the idle interval) and `idleStopSeconds`. With
/// both in the request the shorter wins (it is the one that would stop the sandbox first);
/// `idleStopSeconds` alone wins over the advertised default lifetime. Rounded up to whole
/// minutes.
fn auto_stop_minutes(spec: &CreateSpec) -> u64 {
    let lifetime = spec
        .timeout_seconds
        .or(spec.request.timeout())
        .unwrap_or(capabilities::DEFAULT_TIMEOUT_SECONDS);
    let seconds = match (spec.request.idle_stop_seconds(), spec.request.timeout()) {
        (Some(idle), Some(asked)) => idle.min(asked),
        (Some(idle), None) => idle,
        (None, _) => lifetime,
    };
    minutes(seconds)
}

#[async_trait]
impl SandboxProvider for DaytonaProvider {
    fn provider(&self) -> Provider {
        P
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        self.create_from(ctx, spec, spec.request.image().map(str::to_owned))
            .await
    }

    /// `POST /sandbox/{id}/stop`: Daytona answers `stopping` and stops in the background
    /// (`get` follows it to `stopped`). Its `400` for a sandbox that is not started is read
    /// back with a get: stopping or stopped is this stop's answer.
    async fn stop(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        match self.client.sandbox_action(ctx, native_id, "stop").await {
            Ok(sandbox) => Ok(self.observed(&sandbox)),
            Err(refused @ ProviderError::InvalidRequest { .. }) => {
                let seen = self.observed(&self.client.get_sandbox(ctx, native_id).await?);
                if seen.status.is_stopped() {
                    Ok(seen)
                } else {
                    Err(refused)
                }
            }
            Err(e) => Err(e),
        }
    }

    /// `POST /sandbox/{id}/start` for a sandbox that is not running: Daytona answers
    /// `starting` and starts it in the background (`get` follows it to `started`). A running
    /// one is answered as it is, without a call.
    async fn resume(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let seen = self.observed(&self.client.get_sandbox(ctx, native_id).await?);
        if seen.status == SandboxStatus::Running {
            return Ok(seen);
        }
        self.resumed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(seen.native_id.clone());
        let started = self.client.sandbox_action(ctx, native_id, "start").await?;
        let mut answer = self.observed(&started);
        // The start was accepted; a record that still says `stopped` only lags behind it.
        if answer.status.is_stopped() {
            answer.status = SandboxStatus::Starting;
        }
        Ok(answer)
    }

    /// `POST /sandbox/{id}/snapshot {name: <Corral snapshot id>, includeMemory: false}`:
    /// asynchronous, so `creating`; the snapshot's native id is that name (Daytona answers
    /// with the sandbox, not the snapshot). A name already taken is this snapshot made by an
    /// earlier attempt (Corral snapshot ids are unique): it is observed.
    async fn snapshot(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &SnapshotSpec,
    ) -> Result<ObservedSnapshot> {
        let name = spec.snapshot_id.to_string();
        let body = api::CreateSandboxSnapshot {
            name: name.clone(),
            include_memory: false,
        };
        if self
            .client
            .create_sandbox_snapshot(ctx, native_id, &body)
            .await?
        {
            Ok(ObservedSnapshot {
                native_id: name,
                status: SnapshotStatus::Creating,
                size_bytes: None,
            })
        } else {
            self.get_snapshot(ctx, &name).await
        }
    }

    /// `GET /snapshots/{name}`.
    async fn get_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<ObservedSnapshot> {
        let dto = self.client.get_snapshot(ctx, snapshot).await?;
        Ok(ObservedSnapshot {
            native_id: snapshot.to_owned(),
            status: map::snapshot_status(&dto.state),
            // Daytona reports GB; Corral bytes.
            size_bytes: dto
                .size
                .filter(|gb| gb.is_finite() && *gb >= 0.0)
                .map(|gb| (gb * 1e9).round() as u64),
        })
    }

    /// `GET /snapshots/{name}` for its id, then `DELETE /snapshots/{id}` (which takes the id
    /// only).
    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        let dto = self.client.get_snapshot(ctx, snapshot).await?;
        self.client.delete_snapshot(ctx, &dto.id).await
    }

    /// `POST /sandbox` with the snapshot's name as `snapshot`, named and labelled like a
    /// create.
    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        client::check_id(snapshot)?;
        self.create_from(ctx, spec, Some(snapshot.to_owned())).await
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let sandbox = self.client.get_sandbox(ctx, native_id).await?;
        let _ = self.remember(&sandbox);
        Ok(self.observed(&sandbox))
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        let deleted = self.client.delete_sandbox(ctx, native_id).await;
        if matches!(deleted, Ok(()) | Err(ProviderError::NotFound { .. })) {
            self.toolboxes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(native_id);
        }
        // An unknown sandbox's `NotFound` is made `Ok` by the contract wrapper.
        deleted
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let toolbox = self.toolbox(ctx, native_id).await?;
        let seconds = u64::try_from(spec.timeout.as_millis().div_ceil(1000))
            .unwrap_or(u64::MAX)
            .max(1);
        let body = api::ExecuteRequest {
            command: wire_command(&spec.command),
            cwd: spec.cwd.clone(),
            envs: spec.env.clone(),
            timeout: Some(seconds),
        };
        let started = Instant::now();
        let timed_out = |e: ProviderError| match e {
            // The daemon killed the command at its timeout.
            ProviderError::Unexpected { status: 408, .. } => ProviderError::CommandTimedOut {
                after: spec.timeout,
            },
            ProviderError::TimedOutAfterSend { .. } if started.elapsed() >= spec.timeout => {
                ProviderError::CommandTimedOut {
                    after: spec.timeout,
                }
            }
            other => other,
        };
        let answer = self
            .client
            .execute(ctx, &toolbox, &body, spec.timeout + EXEC_GRACE)
            .await
            .map_err(timed_out)?;
        let mut stdout = CappedOutput::new(spec.max_output_bytes);
        stdout.push(answer.result.as_bytes());
        let (stdout, truncated) = stdout.finish();
        Ok(ExecOutput {
            stdout,
            stderr: Vec::new(),
            exit_code: answer.exit_code,
            truncated,
        })
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        let toolbox = self.toolbox(ctx, native_id).await?;
        let resp = self.client.download(ctx, &toolbox, path).await?;
        read_file_body(P, resp, path, max_bytes).await
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let toolbox = self.toolbox(ctx, native_id).await?;
        // The daemon's upload creates missing parents; Corral's contract says it must not.
        check_parent_dir(path, |parent| {
            let toolbox = &toolbox;
            async move {
                let info = self.client.file_info(ctx, toolbox, &parent).await?;
                Ok(info.is_some_and(|info| info.is_dir))
            }
        })
        .await?;
        self.client.upload(ctx, &toolbox, path, content).await
    }

    /// `GET /sandbox` filtered by the deployment's label, one Daytona page per call (the page
    /// token is Daytona's cursor).
    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        let listed = self
            .client
            .list_page_by_label(ctx, TAGS.deployment, deployment, page)
            .await?;
        Ok(TaggedPage {
            sandboxes: listed
                .items
                .iter()
                .map(|s| TaggedSandbox {
                    observed: self.observed(s),
                    project: s.labels.get(TAGS.project).cloned(),
                })
                .collect(),
            next: listed.next,
        })
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        let value = operation_id.to_string();
        let listed = self
            .client
            .list_sandboxes_by_label(ctx, TAGS.operation_id, &value)
            .await?;
        // The label is checked again by the contract wrapper (`corral_provider::Contracted`).
        Ok(listed.iter().map(|s| self.observed(s)).collect())
    }

    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        if spec.stdin {
            return Err(no_stdin());
        }
        let toolbox = self.toolbox(ctx, native_id).await?;
        let sid = commands::session_id(&spec.command_id);
        if !self.client.create_session(ctx, &toolbox, &sid).await? {
            // The session exists: an earlier attempt of this start made it, and may have
            // started the command already.
            if let Some(cmd) = self
                .client
                .get_session(ctx, &toolbox, &sid)
                .await?
                .and_then(|s| s.commands.into_iter().next())
            {
                return Ok(Started {
                    handle: commands::handle(&sid, &cmd.id),
                    events: None,
                });
            }
        }
        let script = corral_provider::shell::script(
            P,
            &ExecSpec {
                command: spec.command.clone(),
                cwd: spec.cwd.clone(),
                env: spec.env.clone(),
                ..ExecSpec::new("")
            },
        )?;
        let body = api::SessionExecuteRequest {
            command: format!("{} </dev/null", wire_command(&script)),
            run_async: Some(true),
        };
        let started = self
            .client
            .session_execute(ctx, &toolbox, &sid, &body)
            .await?;
        Ok(Started {
            handle: commands::handle(&sid, &started.cmd_id),
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
        let (sid, cid) = commands::parse_handle(handle)?;
        let (sid, cid) = (sid.to_owned(), cid.to_owned());
        let toolbox = self.toolbox(ctx, native_id).await?;
        // Fails here (not in the stream) when Daytona no longer knows the command.
        let first = self
            .client
            .get_session_command(ctx, &toolbox, &sid, &cid)
            .await?;
        let start = commands::Poll {
            at: from.of(commands::LOG_STREAM),
            state: Some(first),
            pause: commands::POLL_MIN,
            done: false,
        };
        let events = stream::unfold(start, move |mut st| {
            let toolbox = toolbox.clone();
            let (sid, cid) = (sid.clone(), cid.clone());
            async move {
                if st.done {
                    return None;
                }
                let state = match st.state.take() {
                    Some(state) => state,
                    None => {
                        tokio::time::sleep(st.pause).await;
                        st.pause = (st.pause * 2).min(commands::POLL_MAX);
                        match self
                            .client
                            .get_session_command(ctx, &toolbox, &sid, &cid)
                            .await
                        {
                            Ok(state) => state,
                            Err(e) => return st.ended_by(e),
                        }
                    }
                };
                // The exit code was read first: a log read after it is complete.
                let log = match self
                    .client
                    .get_session_command_logs(ctx, &toolbox, &sid, &cid)
                    .await
                {
                    Ok(log) => log,
                    Err(e) => return st.ended_by(e),
                };
                let mut out = Vec::new();
                let at = usize::try_from(st.at).unwrap_or(usize::MAX);
                if let Some(new) = log.get(at..).filter(|new| !new.is_empty()) {
                    out.push(Ok(CommandEvent::Output {
                        stream: commands::LOG_STREAM,
                        offset: Some(st.at),
                        data: new.to_vec(),
                    }));
                    st.at = log.len() as u64;
                    st.pause = commands::POLL_MIN;
                }
                if let Some(code) = state.exit_code {
                    out.push(Ok(CommandEvent::Exit {
                        exit_code: Some(code),
                    }));
                    st.done = true;
                }
                Some((out, st))
            }
        })
        .flat_map(stream::iter);
        Ok(events.boxed())
    }

    async fn write_stdin(
        &self,
        _ctx: &CallContext,
        _native_id: &str,
        _handle: &str,
        _offset: u64,
        _data: &[u8],
    ) -> Result<u64> {
        Err(no_stdin())
    }

    async fn close_stdin(&self, _ctx: &CallContext, _native_id: &str, _handle: &str) -> Result<()> {
        Err(no_stdin())
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
                reason: format!(
                    "Daytona terminates a session command with SIGKILL only, not {signal}"
                ),
            });
        }
        let (sid, cid) = commands::parse_handle(handle)?;
        let toolbox = self.toolbox(ctx, native_id).await?;
        // `false`: it had ended already, which is fine.
        self.client
            .terminate_session_command(ctx, &toolbox, sid, cid)
            .await
            .map(drop)
    }

    async fn find_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        command_id: &CommandId,
    ) -> Result<Option<String>> {
        let toolbox = self.toolbox(ctx, native_id).await?;
        let sid = commands::session_id(command_id);
        Ok(self
            .client
            .get_session(ctx, &toolbox, &sid)
            .await?
            .and_then(|s| s.commands.into_iter().next())
            .map(|cmd| commands::handle(&sid, &cmd.id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_reads_toolbox_url_and_refuses_other_providers_keys() {
        let config: DaytonaConfig = serde_json::from_value(serde_json::json!({
            "toolbox_url": "http://127.0.0.1:9/toolbox",
            "http": { "request_timeout_seconds": 7 },
        }))
        .unwrap();
        assert_eq!(
            config.default_toolbox_proxy_url,
            "http://127.0.0.1:9/toolbox"
        );
        assert_eq!(config.base_url, DaytonaConfig::default().base_url);
        assert_eq!(config.http.request_timeout, Duration::from_secs(7));
        let foreign = serde_json::from_value::<DaytonaConfig>(serde_json::json!({
            "envd_url_template": "https://{port}-{sandboxID}.{domain}",
        }));
        assert!(foreign.is_err());
        let written = serde_json::to_value(DaytonaConfig::default()).unwrap();
        assert!(written.get("toolbox_url").is_some(), "{written}");
    }
}
