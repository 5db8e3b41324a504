//! E2B adapter: Firecracker sandboxes created from templates.
//!
//! Two planes, two credentials:
//! - the **control API** (`https://api.e2b.app`, header `X-API-Key`: the Corral provider
//!   credential) creates (`POST /sandboxes`), observes (`GET /sandboxes/{id}`), lists by
//!   metadata (`GET /v2/sandboxes?metadata=`, following the `X-Next-Token` response header
//!   as `nextToken` page by page) and kills (`DELETE /sandboxes/{id}`);
//! - **envd**, the agent inside each sandbox, on its own host
//!   (`https://49983-<sandboxID>.<domain>`, see [`E2bConfig::envd_url_template`]) with the
//!   per-sandbox `envdAccessToken` from the create answer (header `X-Access-Token`). The
//!   control key is never sent there. Commands run through the Connect-RPC server stream
//!   `/process.Process/Start` (`application/connect+json` envelopes, decoded incrementally with
//!   a per-message cap), files through `GET`/`POST /files`, and the parent check of a write
//!   through the unary `/filesystem.Filesystem/Stat` (envd's upload would create parents).
//!   envd older than 0.4.0 (the sandbox's `envdVersion`) runs nothing without a named user,
//!   so for those the adapter names the SDKs' default user `user`, as the SDKs do: HTTP Basic
//!   on Connect calls, the `username` query parameter on `/files`.
//!
//! Mapping: `image` is the `templateID` (default [`E2bConfig::default_template`]); the
//! lifetime is `timeout` in seconds and is **always sent** (the request's, else the advertised
//! default of 300 s), because E2B kills a sandbox created without one after 15 s. The operation
//! id is stored in `metadata.corral_operation_id` (the lifetime in `corral_timeout`). States:
//! `running` → running, `paused` → stopped (an undocumented one is logged and read as
//! creating); a killed or expired sandbox answers 404. Commands run as `/bin/bash -l -c
//! <command>` with `cwd` and `envs`, stdout and stderr separate; the command deadline is sent
//! as `Connect-Timeout-Ms` and enforced locally as well.
//!
//! Commands as durable jobs are native on envd's process service (see the `process` module and
//! `docs/providers/e2b.md`): `Start` of a small bash wrapper tagged with the command id (its
//! stream is the first attach, offsets from 0), `List` + `Connect` by pid to re-attach (live
//! only: envd has no replay), `SendInput`/`CloseStdin` for stdin; signals go to the command's
//! own process group through `kill` (envd's `SendSignal` knows TERM and KILL only and reaches
//! only the wrapper), and the wrapper records the exit status for after envd forgot the
//! process. Capabilities: stdin, every signal, `resume: live_only`, not emulated.
//!
//! Lifecycle: stop is `POST /sandboxes/{id}/pause` (memory kept; its `409` for a paused
//! sandbox is idempotent success), resume `POST /sandboxes/{id}/connect` with the create's
//! lifetime, snapshot `POST /sandboxes/{id}/snapshots` (an unnamed snapshot template, ready
//! when answered), get `GET /snapshots?name=`, delete `DELETE /templates/{id}`, restore a
//! create with the snapshot as `templateID`. No native idle stop (`autoPause` acts at the end
//! of the lifetime, not on idleness). No context beyond the API key is needed.
//!
//! Configuration ([`E2bConfig`], `[providers.e2b]` in the server's file): `base_url`,
//! `envd_url_template`, `default_domain`, `default_template`, `trusted_hosts` and the `http`
//! table; every key is optional and defaults to E2B's production values.
//!
//! The `domain` of a create or get answer is a provider answer: it is used only when it is a
//! plain host name and the envd URL it gives is on `trusted_hosts` (E2B's domains over https
//! at public addresses, by default; see `corral_provider_http::TrustedHosts`), so the
//! sandbox's token is sent nowhere else.

pub mod api;
pub mod capabilities;
mod client;
pub mod connect;
#[cfg(feature = "fake")]
pub mod fake;
mod map;
pub(crate) mod process;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use corral_domain::{
    CommandId, OperationId, Provider, ProviderCapabilities, SandboxStatus, Signal, SnapshotStatus,
};
use corral_provider::{
    Adapter, CallContext, CappedOutput, CommandEvent, CommandEvents, CommandSpec, CreateSpec,
    ExecOutput, ExecSpec, ExposeSecret as _, ObservedSandbox, ObservedSnapshot, OutputOffsets,
    ProviderError, Result, SandboxProvider, SecretString, SnapshotSpec, Started, TaggedPage,
    TaggedSandbox, files,
};
use corral_provider_http::{
    HttpConfig, ProviderHttp, TrustedHosts, collect_pages, map_body_error, read_file_body,
};
use futures::StreamExt as _;

use crate::client::{API_KEY_AUTH, Client, Envd, envd_user};

pub(crate) const P: Provider = Provider::E2b;
/// The metadata keys Corral stamps on sandboxes; `timeout` carries the lifetime (seconds) asked
/// for at create, so a resume (`connect`, whose `timeout` is required) gives it again.
const TAGS: corral_provider::tags::TagKeys = corral_provider::tags::UNDERSCORED;
/// Largest single Connect message accepted from envd (its data events are far smaller).
const MAX_STREAM_MESSAGE: usize = 4 * 1024 * 1024;
/// Extra time the exec stream may take beyond the command's deadline, for envd to report it.
const EXEC_GRACE: Duration = Duration::from_secs(5);
/// Most pages of the metadata listing read for one lookup (100 sandboxes each): far more
/// sandboxes than one operation ever makes, and a bound on a provider that pages forever.
const MAX_LIST_PAGES: usize = 50;
/// How much longer than Corral's own deadline envd is told to let a command run
/// (`Connect-Timeout-Ms` on its start): a backstop, never the deadline itself.
const COMMAND_BACKSTOP: Duration = Duration::from_secs(60);
/// The keepalive interval asked of envd on command streams (`Keepalive-Ping-Interval`).
const STREAM_KEEPALIVE: Duration = Duration::from_secs(15);
/// Silence after which a command stream is taken as broken (then Corral attaches again).
const STREAM_IDLE: Duration = Duration::from_secs(45);
/// Longest an attach (`Connect`) stream is held open before it is ended and made again.
const ATTACH_LIMIT: Duration = Duration::from_secs(6 * 3600);
/// How long the command that signals a job's process group may take.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach E2B: `[providers.e2b]` in the server's configuration.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct E2bConfig {
    /// Control API base URL.
    pub base_url: String,
    /// envd URL of a sandbox: `{port}` (49983), `{sandboxID}` and `{domain}` (from the create
    /// answer, else [`E2bConfig::default_domain`]) are substituted.
    pub envd_url_template: String,
    /// Domain used when the provider does not name one.
    pub default_domain: String,
    /// Template used when the request has no `image`.
    pub default_template: String,
    /// Hosts an envd URL may be on: host suffixes (https and public addresses only; default
    /// E2B's domains `e2b.app`, `e2b.dev`, `e2b.pro`) or exact origins such as
    /// `http://127.0.0.1:4567` (fakes, self-hosted E2B). The `domain` of a create answer is
    /// used only when the envd URL it gives is on one of these.
    pub trusted_hosts: Vec<String>,
    /// Timeouts and caps (the `http` table).
    pub http: HttpConfig,
}

/// E2B's own domains: the SDKs' default `e2b.app` and the other domains they treat as E2B's
/// (`e2b.dev`, `e2b.pro`; see `docs/providers/e2b.md`).
pub const DEFAULT_TRUSTED_HOSTS: [&str; 3] = ["e2b.app", "e2b.dev", "e2b.pro"];

impl Default for E2bConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.e2b.app".into(),
            envd_url_template: "https://{port}-{sandboxID}.{domain}".into(),
            default_domain: "e2b.app".into(),
            default_template: "base".into(),
            trusted_hosts: DEFAULT_TRUSTED_HOSTS.map(str::to_owned).to_vec(),
            http: HttpConfig::default(),
        }
    }
}

/// The E2B adapter.
#[derive(Debug)]
pub struct E2bProvider {
    client: Client,
    caps: ProviderCapabilities,
    default_template: String,
    /// envd address and token per sandbox, learnt from create/get (the token is a secret).
    envds: Mutex<HashMap<String, Envd>>,
}

impl Adapter for E2bProvider {
    const PROVIDER: Provider = P;
    type Config = E2bConfig;

    /// Fails on an unusable base URL, `trusted_hosts` entry or envd URL template (one that
    /// with `default_domain` does not give an http(s) URL on the trusted hosts).
    fn from_config(config: E2bConfig) -> Result<Self> {
        let trusted = TrustedHosts::parse(P, &config.trusted_hosts)?;
        let http = ProviderHttp::new(P, &config.base_url, config.http)?
            .with_auth(API_KEY_AUTH)
            .with_trusted_hosts(trusted)?;
        let client = Client::new(http, config.envd_url_template, config.default_domain);
        // Validate the template once, so a bad configuration fails at start-up.
        client
            .envd_base("probe", None)
            .map_err(|e| ProviderError::InvalidRequest {
                provider: P,
                message: format!(
                    "envd_url_template with default_domain does not give a usable envd URL: {e}"
                ),
            })?;
        Ok(Self {
            client,
            caps: capabilities::capabilities(),
            default_template: config.default_template,
            envds: Mutex::new(HashMap::new()),
        })
    }
}

impl E2bProvider {
    /// Caches how to reach a sandbox's envd: its address, token and (old envd only) user.
    fn remember(
        &self,
        id: &str,
        domain: Option<&str>,
        token: Option<String>,
        envd_version: &str,
    ) -> Result<Envd> {
        let envd = Envd {
            base: self.client.envd_base(id, domain)?,
            token: token.map(SecretString::from),
            user: envd_user(envd_version),
        };
        self.envds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.to_owned(), envd.clone());
        Ok(envd)
    }

    fn forget(&self, id: &str) {
        self.envds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }

    /// The sandbox's envd, from the cache or (after a restart) from `GET /sandboxes/{id}`.
    async fn envd(&self, ctx: &CallContext, id: &str) -> Result<Envd> {
        let cached = self
            .envds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            .cloned();
        if let Some(e) = cached {
            return Ok(e);
        }
        let detail = self.client.get_sandbox(ctx, id).await?;
        self.remember(
            id,
            detail.domain.as_deref(),
            detail.envd_access_token,
            &detail.envd_version,
        )
    }

    /// `POST /sandboxes` from `template` (a template, or a snapshot's id: snapshots are
    /// templates), tagged with the operation id and the lifetime asked for.
    async fn create_from(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        template: String,
    ) -> Result<ObservedSandbox> {
        let timeout = lifetime(
            spec.timeout_seconds
                .or(spec.request.timeout())
                .unwrap_or(capabilities::DEFAULT_TIMEOUT_SECONDS),
        )?;
        let mut metadata = TAGS.stamp(ctx, &spec.operation_id);
        metadata.insert(TAGS.timeout.to_owned(), timeout.to_string());
        let body = api::NewSandbox {
            template_id: template,
            timeout,
            secure: Some(true),
            metadata,
        };
        let created = self.client.create_sandbox(ctx, &body).await?;
        // The sandbox exists now: failing to remember its envd must not hide that.
        let _ = self.remember(
            &created.sandbox_id,
            created.domain.as_deref(),
            created.envd_access_token,
            &created.envd_version,
        );
        Ok(ObservedSandbox {
            native_id: created.sandbox_id,
            status: SandboxStatus::Running,
            operation_id: Some(spec.operation_id),
        })
    }

    fn observed(detail: &api::SandboxDetail) -> ObservedSandbox {
        ObservedSandbox {
            native_id: detail.sandbox_id.clone(),
            status: map::status(&detail.state),
            operation_id: detail
                .metadata
                .as_ref()
                .and_then(|m| m.get(TAGS.operation_id))
                .and_then(|v| v.parse().ok()),
        }
    }

    async fn run_stream(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let request = api::StartRequest {
            process: api::ProcessConfig {
                cmd: "/bin/bash".into(),
                args: vec!["-l".into(), "-c".into(), spec.command.clone()],
                envs: spec.env.clone(),
                cwd: spec.cwd.clone(),
            },
            tag: None,
            stdin: Some(false),
        };
        let message = serde_json::to_vec(&request).map_err(|e| ProviderError::InvalidRequest {
            provider: P,
            message: format!("cannot encode the command: {e}"),
        })?;
        let started = Instant::now();
        let mut resp = self
            .client
            .process_start(
                ctx,
                envd,
                connect::encode(0, &message),
                spec.timeout,
                EXEC_GRACE,
                Duration::from_secs(50),
            )
            .await
            .map_err(|e| match e {
                // No answer at all by the command's deadline (plus grace): the command's
                // timeout, not a lost request.
                ProviderError::TimedOutAfterSend { .. } if started.elapsed() >= spec.timeout => {
                    ProviderError::CommandTimedOut {
                        after: spec.timeout,
                    }
                }
                other => other,
            })?;
        let protocol = |message: String| ProviderError::Protocol {
            provider: P,
            message,
        };
        let mut decoder = connect::Decoder::new(MAX_STREAM_MESSAGE);
        let mut stdout = CappedOutput::new(spec.max_output_bytes);
        let mut stderr = CappedOutput::new(spec.max_output_bytes);
        let mut end: Option<api::EndEvent> = None;
        let b64 = base64::engine::general_purpose::STANDARD;
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => {
                    return Err(protocol(
                        "the command stream ended without an end-of-stream message".into(),
                    ));
                }
                Err(e) if e.is_timeout() && started.elapsed() >= spec.timeout => {
                    return Err(ProviderError::CommandTimedOut {
                        after: spec.timeout,
                    });
                }
                Err(e) => return Err(map_body_error(P, &e)),
            };
            decoder.push(&chunk);
            while let Some(envelope) = decoder
                .next_envelope()
                .map_err(|e| protocol(e.to_string()))?
            {
                if envelope.is_end_stream() {
                    let eos: api::EndOfStream =
                        corral_provider_http::parse_json(P, &envelope.data)?;
                    if let Some(err) = eos.error {
                        let mut secrets: Vec<&str> = Vec::new();
                        if let Some(token) = &envd.token {
                            secrets.push(token.expose_secret());
                        }
                        if let Some(key) = ctx.credential() {
                            secrets.push(key.expose_secret());
                        }
                        return Err(map::connect_error(&err, spec.timeout, &secrets));
                    }
                    let end = end.ok_or_else(|| {
                        protocol("the command stream closed without an end event".into())
                    })?;
                    let (stdout, so_cut) = stdout.finish();
                    let (stderr, se_cut) = stderr.finish();
                    return Ok(ExecOutput {
                        stdout,
                        stderr,
                        exit_code: map::exit_code(&end),
                        truncated: so_cut || se_cut,
                    });
                }
                let msg: api::StartResponse = corral_provider_http::parse_json(P, &envelope.data)?;
                if let Some(data) = msg.event.data {
                    let decode = |s: &str| {
                        b64.decode(s)
                            .map_err(|e| protocol(format!("malformed output bytes: {e}")))
                    };
                    if let Some(s) = data.stdout.as_deref() {
                        stdout.push(&decode(s)?);
                    }
                    if let Some(s) = data.stderr.as_deref() {
                        stderr.push(&decode(s)?);
                    }
                } else if let Some(e) = msg.event.end {
                    end = Some(e);
                }
            }
        }
    }

    /// Secrets to scrub from envd's messages: the sandbox's token and the API key.
    fn secrets(ctx: &CallContext, envd: &Envd) -> Vec<SecretString> {
        envd.token
            .iter()
            .cloned()
            .chain(ctx.credential().cloned())
            .collect()
    }

    /// The pid of the running process tagged with `id` (`process.Process/List`).
    async fn running_pid(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        id: &CommandId,
    ) -> Result<Option<u32>> {
        let tag = id.to_string();
        Ok(self
            .client
            .process_list(ctx, envd)
            .await?
            .processes
            .iter()
            .find(|p| p.tag.as_deref() == Some(tag.as_str()))
            .map(|p| p.pid))
    }

    /// The exit status the command's wrapper recorded, once it ended (`GET /files`).
    async fn recorded_exit(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        id: &CommandId,
    ) -> Result<Option<i32>> {
        let path = process::exit_file(id);
        let resp = match self.client.download(ctx, envd, &path).await {
            Ok(resp) => resp,
            Err(ProviderError::NotFound { .. } | ProviderError::FileNotFound { .. }) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let body = read_file_body(P, resp, &path, 64).await?;
        process::parse_exit(&body).map(Some)
    }

    fn command_gone(id: &CommandId) -> ProviderError {
        ProviderError::NotFound {
            provider: P,
            resource: format!("command {id}"),
        }
    }
}

#[async_trait]
impl SandboxProvider for E2bProvider {
    fn provider(&self) -> Provider {
        P
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        let template = spec
            .request
            .image()
            .map_or_else(|| self.default_template.clone(), str::to_owned);
        self.create_from(ctx, spec, template).await
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let detail = self.client.get_sandbox(ctx, native_id).await?;
        let _ = self.remember(
            native_id,
            detail.domain.as_deref(),
            detail.envd_access_token.clone(),
            &detail.envd_version,
        );
        Ok(Self::observed(&detail))
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        // An unknown sandbox is `Ok` by the contract wrapper (`corral_provider::Contracted`);
        // either way its envd is no longer worth remembering.
        let outcome = self.client.kill_sandbox(ctx, native_id).await;
        if matches!(outcome, Ok(()) | Err(ProviderError::NotFound { .. })) {
            self.forget(native_id);
        }
        outcome
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let envd = self.envd(ctx, native_id).await?;
        self.run_stream(ctx, &envd, spec).await
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        let envd = self.envd(ctx, native_id).await?;
        let resp = self
            .client
            .download(ctx, &envd, path)
            .await
            .map_err(|e| e.for_file(path))?;
        read_file_body(P, resp, path, max_bytes).await
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let envd = self.envd(ctx, native_id).await?;
        // envd's upload creates missing parents; Corral's contract says it must not.
        let envd_ref = &envd;
        files::check_parent_dir(path, |parent| async move {
            Ok(self
                .client
                .stat(ctx, envd_ref, &parent)
                .await?
                .is_some_and(|s| s.entry.file_type == "FILE_TYPE_DIRECTORY"))
        })
        .await?;
        self.client
            .upload(ctx, &envd, path, content)
            .await
            .map_err(|e| e.for_file(path))?;
        Ok(())
    }

    /// `POST /sandboxes/{id}/pause`, memory kept; E2B answers once it is paused. Its `409`
    /// for a sandbox already paused is read back with a get: paused is this stop's answer.
    async fn stop(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        match self.client.pause_sandbox(ctx, native_id).await {
            Ok(()) => {}
            Err(conflict @ ProviderError::InvalidRequest { .. }) => {
                let detail = self.client.get_sandbox(ctx, native_id).await?;
                let seen = Self::observed(&detail);
                return if seen.status.is_stopped() {
                    Ok(seen)
                } else {
                    Err(conflict)
                };
            }
            Err(e) => return Err(e),
        }
        // The pause is done when E2B answers 204: observe it as it is now.
        let detail = self.client.get_sandbox(ctx, native_id).await?;
        Ok(Self::observed(&detail))
    }

    /// `POST /sandboxes/{id}/connect` for a paused sandbox, with the lifetime it was created
    /// with (`corral_timeout`, else the default): E2B answers once it runs. A running one is
    /// answered as it is, without a call that would extend its lifetime.
    async fn resume(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let detail = self.client.get_sandbox(ctx, native_id).await?;
        let seen = Self::observed(&detail);
        if seen.status == SandboxStatus::Running {
            return Ok(seen);
        }
        let timeout = detail
            .metadata
            .as_ref()
            .and_then(|m| m.get(TAGS.timeout))
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(capabilities::DEFAULT_TIMEOUT_SECONDS);
        let body = api::ConnectSandbox {
            timeout: lifetime(timeout)?,
        };
        let resumed = self.client.connect_sandbox(ctx, native_id, &body).await?;
        let _ = self.remember(
            native_id,
            resumed.domain.as_deref(),
            resumed.envd_access_token,
            &resumed.envd_version,
        );
        Ok(ObservedSandbox {
            status: SandboxStatus::Running,
            ..seen
        })
    }

    /// `POST /sandboxes/{id}/snapshots`, unnamed (see [`api::SandboxSnapshotRequest`]): E2B
    /// answers `201` once the snapshot template exists, so it is `ready` at once. E2B answers
    /// `404` for a paused sandbox too (its orchestrator holds running ones only): a get tells
    /// that apart from a sandbox that is gone, which must not be reported as `NotFound`.
    async fn snapshot(
        &self,
        ctx: &CallContext,
        native_id: &str,
        _spec: &SnapshotSpec,
    ) -> Result<ObservedSnapshot> {
        let made = match self
            .client
            .create_snapshot(ctx, native_id, &api::SandboxSnapshotRequest::default())
            .await
        {
            Ok(made) => made,
            Err(gone @ ProviderError::NotFound { .. }) => {
                let seen = Self::observed(&self.client.get_sandbox(ctx, native_id).await?);
                return Err(if seen.status.is_stopped() {
                    ProviderError::InvalidRequest {
                        provider: P,
                        message: format!(
                            "E2B snapshots running sandboxes only and this one is {}: resume it first",
                            seen.status
                        ),
                    }
                } else {
                    gone
                });
            }
            Err(e) => return Err(e),
        };
        Ok(ready_snapshot(made))
    }

    /// `GET /snapshots?name=<id>`: the one with that id, else `NotFound`.
    async fn get_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<ObservedSnapshot> {
        self.client
            .find_snapshots(ctx, snapshot)
            .await?
            .into_iter()
            .find(|s| s.snapshot_id == snapshot)
            .map(ready_snapshot)
            .ok_or_else(|| ProviderError::NotFound {
                provider: P,
                resource: format!("snapshot {}", corral_provider::excerpt(snapshot, 80)),
            })
    }

    /// `DELETE /templates/{snapshotID}`: a snapshot is a template.
    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        self.client.delete_template(ctx, snapshot).await
    }

    /// `POST /sandboxes` with the snapshot as its `templateID`, tagged like a create.
    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        client::check_snapshot_id(snapshot)?;
        self.create_from(ctx, spec, snapshot.to_owned()).await
    }

    /// The v2 listing filtered by the deployment's metadata tag, one E2B page per call (the
    /// page token is E2B's `X-Next-Token`).
    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        let metadata = format!("{}={deployment}", TAGS.deployment);
        let listed = self
            .client
            .list_sandboxes_page(ctx, &metadata, page.map(str::to_owned))
            .await?;
        Ok(TaggedPage {
            sandboxes: listed
                .items
                .iter()
                .map(|d| TaggedSandbox {
                    observed: Self::observed(d),
                    project: d
                        .metadata
                        .as_ref()
                        .and_then(|m| m.get(TAGS.project))
                        .cloned(),
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
        let metadata = format!("{}={operation_id}", TAGS.operation_id);
        let listed = collect_pages(MAX_LIST_PAGES, |next| {
            self.client.list_sandboxes_page(ctx, &metadata, next)
        })
        .await?;
        // The tag is checked again by the contract wrapper (`corral_provider::Contracted`).
        Ok(listed.iter().map(Self::observed).collect())
    }

    /// `process.Process/Start` of the command's wrapper, tagged with the command id; the
    /// start's own stream is the first attach (offsets counted from 0). A command id envd
    /// still runs (`List`) or whose exit is recorded is not started again.
    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        let envd = self.envd(ctx, native_id).await?;
        let id = spec.command_id;
        let handle = id.to_string();
        if self.running_pid(ctx, &envd, &id).await?.is_some()
            || self.recorded_exit(ctx, &envd, &id).await?.is_some()
        {
            return Ok(Started {
                handle,
                events: None,
            });
        }
        let request = api::StartRequest {
            process: api::ProcessConfig {
                cmd: process::SHELL.into(),
                args: process::wrapper_args(&spec.command, &id),
                envs: spec.env.clone(),
                cwd: spec.cwd.clone(),
            },
            tag: Some(handle.clone()),
            stdin: Some(spec.stdin),
        };
        let message = serde_json::to_vec(&request).map_err(|e| ProviderError::InvalidRequest {
            provider: P,
            message: format!("cannot encode the command: {e}"),
        })?;
        let resp = self
            .client
            .process_start(
                ctx,
                &envd,
                connect::encode(0, &message),
                spec.timeout + COMMAND_BACKSTOP,
                EXEC_GRACE,
                STREAM_KEEPALIVE,
            )
            .await?;
        let mut reader = process::EventReader::new(
            resp,
            MAX_STREAM_MESSAGE,
            true,
            STREAM_IDLE,
            Self::secrets(ctx, &envd),
        );
        reader.started().await?;
        Ok(Started {
            handle,
            events: Some(reader.into_events()),
        })
    }

    /// `process.Process/Connect` to the running process (found by its tag with `List`): only
    /// what it writes from now on, without offsets. Once envd forgot it, the exit the wrapper
    /// recorded.
    async fn attach_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        handle: &str,
        _from: OutputOffsets,
    ) -> Result<CommandEvents<'a>> {
        let id = process::parse_handle(handle)?;
        let envd = self.envd(ctx, native_id).await?;
        if let Some(pid) = self.running_pid(ctx, &envd, &id).await? {
            let request = api::ConnectRequest {
                process: api::ProcessSelector::pid(pid),
            };
            let message =
                serde_json::to_vec(&request).map_err(|e| ProviderError::InvalidRequest {
                    provider: P,
                    message: format!("cannot encode the request: {e}"),
                })?;
            let resp = self
                .client
                .process_connect(
                    ctx,
                    &envd,
                    connect::encode(0, &message),
                    STREAM_KEEPALIVE,
                    ATTACH_LIMIT,
                )
                .await?;
            let mut reader = process::EventReader::new(
                resp,
                MAX_STREAM_MESSAGE,
                false,
                STREAM_IDLE,
                Self::secrets(ctx, &envd),
            );
            match reader.started().await {
                Ok(_) => return Ok(reader.into_events()),
                // It ended between the listing and the connect.
                Err(ProviderError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match self.recorded_exit(ctx, &envd, &id).await? {
            Some(code) => Ok(futures::stream::iter([Ok(CommandEvent::Exit {
                exit_code: Some(code),
            })])
            .boxed()),
            None => Err(Self::command_gone(&id)),
        }
    }

    /// `process.Process/SendInput`. envd cannot recognise a resend: `offset` is taken as
    /// the count accepted before.
    async fn write_stdin(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<u64> {
        let id = process::parse_handle(handle)?;
        let envd = self.envd(ctx, native_id).await?;
        let pid = self
            .running_pid(ctx, &envd, &id)
            .await?
            .ok_or_else(|| Self::command_gone(&id))?;
        let body = api::SendInputRequest {
            process: api::ProcessSelector::pid(pid),
            input: api::ProcessInput {
                stdin: Some(base64::engine::general_purpose::STANDARD.encode(data)),
                pty: None,
            },
        };
        self.client.process_send_input(ctx, &envd, &body).await?;
        Ok(offset + data.len() as u64)
    }

    /// `process.Process/CloseStdin`; an ended command is `Ok`.
    async fn close_stdin(&self, ctx: &CallContext, native_id: &str, handle: &str) -> Result<()> {
        let id = process::parse_handle(handle)?;
        let envd = self.envd(ctx, native_id).await?;
        let Some(pid) = self.running_pid(ctx, &envd, &id).await? else {
            return match self.recorded_exit(ctx, &envd, &id).await? {
                Some(_) => Ok(()),
                None => Err(Self::command_gone(&id)),
            };
        };
        let body = api::CloseStdinRequest {
            process: api::ProcessSelector::pid(pid),
        };
        match self.client.process_close_stdin(ctx, &envd, &body).await {
            Ok(_) | Err(ProviderError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `kill -s <n> -- -<group>` through `process.Process/Start`: envd's `SendSignal` knows
    /// only TERM and KILL and signals only the process it started (the wrapper), which would
    /// leave the command running. An ended command's group is gone: `Ok`.
    async fn signal_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        signal: Signal,
    ) -> Result<()> {
        let id = process::parse_handle(handle)?;
        let envd = self.envd(ctx, native_id).await?;
        let mut spec = ExecSpec::new(process::kill_command(&id, signal.number()));
        spec.timeout = SIGNAL_TIMEOUT;
        spec.max_output_bytes = 4096;
        self.run_stream(ctx, &envd, &spec).await.map(drop)
    }

    /// The process tagged with the command id (`List`), or its recorded exit.
    async fn find_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        command_id: &CommandId,
    ) -> Result<Option<String>> {
        let envd = self.envd(ctx, native_id).await?;
        let known = self.running_pid(ctx, &envd, command_id).await?.is_some()
            || self.recorded_exit(ctx, &envd, command_id).await?.is_some();
        Ok(known.then(|| command_id.to_string()))
    }
}

/// A lifetime in E2B's int32 seconds.
fn lifetime(seconds: u64) -> Result<u32> {
    u32::try_from(seconds)
        .ok()
        .filter(|t| i32::try_from(*t).is_ok())
        .ok_or_else(|| ProviderError::InvalidRequest {
            provider: P,
            message: format!("timeout {seconds} is out of range"),
        })
}

/// A snapshot E2B answered: it exists once answered (E2B has no snapshot states).
fn ready_snapshot(info: api::SnapshotInfo) -> ObservedSnapshot {
    ObservedSnapshot {
        native_id: info.snapshot_id,
        status: SnapshotStatus::Ready,
        size_bytes: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_is_a_key_and_foreign_keys_are_refused() {
        let config: E2bConfig = serde_json::from_value(serde_json::json!({
            "default_template": "my-template",
            "default_domain": "eu.e2b.example",
            "envd_url_template": "https://{port}-{sandboxID}.{domain}",
            "http": {"request_timeout_seconds": 7},
        }))
        .unwrap();
        assert_eq!(config.default_template, "my-template");
        assert_eq!(config.default_domain, "eu.e2b.example");
        assert_eq!(config.base_url, "https://api.e2b.app");
        assert_eq!(config.http.request_timeout, Duration::from_secs(7));
        // A key meant for another provider (Daytona's, Morph's) is an error, not ignored.
        for foreign in ["toolbox_url", "default_image"] {
            let err = serde_json::from_value::<E2bConfig>(serde_json::json!({ foreign: "x" }))
                .unwrap_err();
            assert!(err.to_string().contains(foreign), "{err}");
        }
        // What the server writes back for a fake reads the same.
        let round: E2bConfig =
            serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
        assert_eq!(round.default_domain, config.default_domain);
        assert!(E2bProvider::from_config(E2bConfig::default()).is_ok());
    }
}
