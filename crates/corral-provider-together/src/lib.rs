//! Together Sandbox adapter (formerly CodeSandbox SDK; the "Bartender" API).
//!
//! A Together sandbox is a VM booted from a *snapshot* (a disk image built from a Docker image),
//! addressed by UUID or by alias (`name@tag`). Two APIs are involved:
//!
//! - the control plane at `https://api.bartender.codesandbox.io/v1` with
//!   `Authorization: Bearer <TOGETHER_API_KEY>` (keys are per Together project; no other context);
//! - the in-VM *Pint* API of each running sandbox, at the sandbox's `agent.url` with
//!   `Authorization: Bearer <agent.token>`. Both are null until the sandbox runs. The project key is
//!   never sent to the VM, and the agent token never to the control plane.
//!
//! | Corral | Together |
//! |---|---|
//! | create (`image` = snapshot UUID or alias) | `POST /v1/sandboxes {snapshot_id \| snapshot_alias, ttl?, tags}`; no `termination_policy`, so the sandbox is ephemeral |
//! | `timeout` (seconds) | `ttl`: seconds after creation before automatic termination (absent: never) |
//! | operation id | `tags["corral-operation-id"]`; found with `GET /v1/sandboxes?tags[corral-operation-id]=…` (cursor-paginated) |
//! | get | `GET /v1/sandboxes/{id}`; `starting`→creating, `running`→running, `recovering` (crash recovery)/`failed_to_start`/`unrecovered`→failed (not terminal), `terminating`/`terminated`→deleted when `status_reason` is `termination_requested`, else expired (`autoterminated`: the `ttl` ran out; or the VM was lost) |
//! | delete | `POST /v1/sandboxes/{id}/terminate {"snapshot": null}` (no snapshot; cannot be undone) |
//! | exec | Pint `POST /api/v1/execs {command: "sh", args: ["-c", …], cwd, env}`, polled with `GET /api/v1/execs/{id}` until it has ended (`EXITED`/`STOPPED`, as Together's CLI waits), output from `GET /api/v1/execs/{id}/io`, then `DELETE` (which also kills a command past its deadline) |
//! | read / write | Pint `GET /api/v1/file_stat/{path}` (existence, type, size), `GET /api/v1/files/{path}` (`utf-8` or `base64` content), `POST /api/v1/files/{path}` (raw octet-stream body) |
//!
//! The file path is sent as one percent-encoded path segment (slashes included), as Together's
//! generated SDK clients do. Exec output arrives as text, so non-UTF-8 command output is not
//! byte-exact; files are.
//!
//! Configuration (`[providers.together]`, [`TogetherConfig`]): `base_url`, `default_image` (the
//! snapshot booted when a request has no `image`), `trusted_hosts` and the `http` table. The
//! agent token goes to `agent.url`, a provider answer, so that URL is used only when it is on
//! `trusted_hosts` (`codesandbox.io` over https at public addresses, by default; see
//! `corral_provider_http::TrustedHosts`).

pub mod api;
mod capabilities;
mod client;
#[cfg(feature = "fake")]
pub mod fake;
mod map;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use corral_domain::{OperationId, Provider, ProviderCapabilities};
use corral_provider::files::check_parent_dir;
use corral_provider::{
    Adapter, CallContext, CappedOutput, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox,
    ProviderError, Result, SandboxProvider, TaggedPage, TaggedSandbox,
};
use corral_provider_http::{HttpConfig, ProviderHttp, TrustedHosts};

/// Together's public control-plane base URL (the SDK's default, plus the API's `/v1`).
pub const DEFAULT_BASE_URL: &str = "https://api.bartender.codesandbox.io/v1";
/// The tag keys Corral stamps on sandboxes (keys: letters, digits, `-`, `_`, `.`).
pub const TAGS: corral_provider::tags::TagKeys = corral_provider::tags::DASHED;
/// First and longest pause between polls of a running exec.
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(250);

/// How to reach Together Sandbox: `[providers.together]` in the server's configuration.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TogetherConfig {
    /// Control-plane base URL including `/v1`.
    pub base_url: String,
    /// Timeouts and caps (used for the in-VM API too).
    pub http: HttpConfig,
    /// Snapshot (UUID or alias) to boot when a request has no `image` (none: `image` is
    /// required); `default_image` in the configuration file.
    #[serde(rename = "default_image")]
    pub default_snapshot: Option<String>,
    /// Hosts a sandbox's `agent.url` may be on, since its agent token is sent there: host
    /// suffixes (https and public addresses only; default `codesandbox.io`, the domain of
    /// Together Sandbox's API and of the Pint API's description) or exact origins such as
    /// `http://127.0.0.1:4567` (fakes). An agent URL off these hosts is refused.
    pub trusted_hosts: Vec<String>,
}

/// The domain Together Sandbox's published descriptions name (`api.bartender.codesandbox.io`,
/// the Pint API's `https://codesandbox.io`); agent hosts elsewhere are added by the operator.
pub const DEFAULT_TRUSTED_HOSTS: [&str; 1] = ["codesandbox.io"];

impl Default for TogetherConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            http: HttpConfig::default(),
            default_snapshot: None,
            trusted_hosts: DEFAULT_TRUSTED_HOSTS.map(str::to_owned).to_vec(),
        }
    }
}

/// The Together Sandbox [`SandboxProvider`].
#[derive(Debug)]
pub struct TogetherProvider {
    control: client::Control,
    caps: ProviderCapabilities,
    default_snapshot: Option<String>,
}

pub(crate) const P: Provider = Provider::Together;

impl Adapter for TogetherProvider {
    const PROVIDER: Provider = P;
    type Config = TogetherConfig;

    /// Fails on an unusable base URL or `trusted_hosts` entry.
    fn from_config(config: TogetherConfig) -> Result<Self> {
        let trusted = TrustedHosts::parse(P, &config.trusted_hosts)?;
        let http =
            ProviderHttp::new(P, &config.base_url, config.http)?.with_trusted_hosts(trusted)?;
        Ok(Self {
            control: client::Control::new(http),
            caps: capabilities::capabilities(),
            default_snapshot: config.default_snapshot,
        })
    }
}

impl TogetherProvider {
    /// The running sandbox's in-VM API (its URL and token are fetched fresh: they exist only
    /// while it runs).
    async fn agent(&self, ctx: &CallContext, native_id: &str) -> Result<client::Agent<'_>> {
        known_shape(native_id)?;
        let sandbox = self.control.get_sandbox(ctx, native_id).await?;
        let status = map::status(&sandbox.status, sandbox.status_reason.as_deref());
        match (sandbox.agent.url, sandbox.agent.token) {
            (Some(url), Some(token)) if sandbox.status == "running" => {
                client::Agent::new(self.control.http(), &url, token)
            }
            _ if status.is_terminal() => Err(ProviderError::NotFound {
                provider: P,
                resource: format!("running sandbox {native_id} (it is {})", sandbox.status),
            }),
            _ => Err(ProviderError::InvalidRequest {
                provider: P,
                message: format!("sandbox {native_id} is {}, not running", sandbox.status),
            }),
        }
    }
}

fn observed(sandbox: api::Sandbox) -> ObservedSandbox {
    let operation_id = sandbox
        .tags
        .get(TAGS.operation_id)
        .and_then(|s| s.parse::<OperationId>().ok());
    ObservedSandbox {
        status: map::status(&sandbox.status, sandbox.status_reason.as_deref()),
        native_id: sandbox.id,
        operation_id,
    }
}

/// Whether `s` is a UUID (8-4-4-4-12 hex digits): a snapshot id rather than an alias.
fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Together answers 400 for an id that is not a UUID (the path parameter's format) and 404 for
/// an unknown one; either way no such sandbox exists, so a malformed id is `NotFound` without a
/// call.
fn known_shape(native_id: &str) -> Result<()> {
    if is_uuid(native_id) {
        Ok(())
    } else {
        Err(ProviderError::NotFound {
            provider: P,
            resource: format!("sandbox {native_id}"),
        })
    }
}

#[async_trait]
impl SandboxProvider for TogetherProvider {
    fn provider(&self) -> Provider {
        P
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        let snapshot = spec
            .request
            .image()
            .map(str::to_owned)
            .or_else(|| self.default_snapshot.clone())
            .ok_or_else(|| ProviderError::InvalidRequest {
                provider: P,
                message: "`image` (a Together snapshot UUID or alias) is required".into(),
            })?;
        let (snapshot_id, snapshot_alias) = if is_uuid(&snapshot) {
            (Some(snapshot), None)
        } else {
            (None, Some(snapshot))
        };
        let body = api::CreateSandboxRequest {
            snapshot_id,
            snapshot_alias,
            ttl: spec.timeout_seconds,
            tags: TAGS.stamp(ctx, &spec.operation_id).into_iter().collect(),
        };
        match self.control.create_sandbox(ctx, &body).await {
            Ok(sandbox) => Ok(observed(sandbox)),
            // On create, 404 names the snapshot, not a sandbox.
            Err(ProviderError::NotFound { .. }) => Err(ProviderError::InvalidRequest {
                provider: P,
                message: "the snapshot (`image`) was not found".into(),
            }),
            Err(e) => Err(e),
        }
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        known_shape(native_id)?;
        Ok(observed(self.control.get_sandbox(ctx, native_id).await?))
    }

    /// An unknown or malformed id is `NotFound`, which the contract wrapper makes `Ok`.
    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        known_shape(native_id)?;
        let body = api::TerminateRequest { snapshot: None };
        self.control
            .terminate_sandbox(ctx, native_id, &body)
            .await
            .map(drop)
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let agent = self.agent(ctx, native_id).await?;
        let body = api::CreateExecRequest {
            command: "sh".into(),
            args: vec!["-c".into(), spec.command.clone()],
            cwd: spec.cwd.clone(),
            env: spec.env.clone(),
            autostart: true,
        };
        let started = Instant::now();
        let mut item = agent.create_exec(ctx, &body).await?;
        let mut pause = POLL_FIRST;
        while !map::exec_finished(&item.status) {
            if started.elapsed() >= spec.timeout {
                // Deleting an exec kills its process.
                let _ = agent.delete_exec(ctx, &item.id).await;
                return Err(ProviderError::CommandTimedOut {
                    after: spec.timeout,
                });
            }
            tokio::time::sleep(pause.min(spec.timeout.saturating_sub(started.elapsed()))).await;
            pause = (pause * 2).min(POLL_MAX);
            item = agent.get_exec(ctx, &item.id).await?;
        }
        let messages = agent.exec_output(ctx, &item.id).await?;
        // The exec is done; removing it keeps the agent's list short. Failure changes nothing.
        let _ = agent.delete_exec(ctx, &item.id).await;
        let mut stdout = CappedOutput::new(spec.max_output_bytes);
        let mut stderr = CappedOutput::new(spec.max_output_bytes);
        let mut exit_code = item.exit_code;
        let mut ordered = messages;
        ordered.sort_by_key(|m| m.sequence);
        for m in &ordered {
            match m.kind.as_str() {
                "stderr" => stderr.push(m.output.as_bytes()),
                _ => stdout.push(m.output.as_bytes()),
            }
            if m.exit_code.is_some() {
                exit_code = exit_code.or(m.exit_code);
            }
        }
        let exit_code = exit_code.ok_or_else(|| ProviderError::Protocol {
            provider: P,
            message: format!("exec ended ({}) without an exit code", item.status),
        })?;
        let (stdout, t1) = stdout.finish();
        let (stderr, t2) = stderr.finish();
        Ok(ExecOutput {
            stdout,
            stderr,
            exit_code,
            truncated: t1 || t2,
        })
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        let agent = self.agent(ctx, native_id).await?;
        let info = agent
            .file_stat(ctx, path)
            .await
            .map_err(|e| e.for_file(path))?;
        if info.is_dir {
            return Err(ProviderError::FileRefused {
                path: path.to_owned(),
                reason: "not a regular file".into(),
            });
        }
        let too_large = || ProviderError::FileTooLarge {
            path: path.to_owned(),
            limit: max_bytes,
        };
        if info.size > max_bytes as u64 {
            return Err(too_large());
        }
        let file = agent
            .read_file(ctx, path)
            .await
            .map_err(|e| e.for_file(path))?;
        let bytes = match file.encoding.as_str() {
            "base64" => base64::engine::general_purpose::STANDARD
                .decode(file.content.as_bytes())
                .map_err(|e| ProviderError::Protocol {
                    provider: P,
                    message: format!("file content is not valid base64: {e}"),
                })?,
            "utf-8" => file.content.into_bytes(),
            other => {
                return Err(ProviderError::Protocol {
                    provider: P,
                    message: format!("unknown file content encoding `{other}`"),
                });
            }
        };
        // The file may have grown between stat and read.
        if bytes.len() > max_bytes {
            return Err(too_large());
        }
        Ok(bytes)
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let agent = self.agent(ctx, native_id).await?;
        // Pint's createFile does not document what a missing parent does: check it first.
        check_parent_dir(path, |parent| {
            let agent = &agent;
            async move {
                match agent.file_stat(ctx, &parent).await {
                    Ok(info) => Ok(info.is_dir),
                    Err(ProviderError::NotFound { .. }) => Ok(false),
                    Err(e) => Err(e.for_file(&parent)),
                }
            }
        })
        .await?;
        match agent.file_stat(ctx, path).await {
            Ok(info) if info.is_dir => {
                return Err(ProviderError::FileRefused {
                    path: path.to_owned(),
                    reason: "a directory is in the way".into(),
                });
            }
            Ok(_) | Err(ProviderError::NotFound { .. }) => {}
            Err(e) => return Err(e.for_file(path)),
        }
        agent
            .create_file(ctx, path, content)
            .await
            .map_err(|e| e.for_file(path))?;
        Ok(())
    }

    /// `GET /sandboxes?tags[corral-deployment]=…`, one Together page per call (the token is
    /// its cursor).
    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        let listed = self
            .control
            .list_sandboxes_page(ctx, (TAGS.deployment, deployment), page)
            .await?;
        Ok(TaggedPage {
            sandboxes: listed
                .items
                .into_iter()
                .map(|s| TaggedSandbox {
                    project: s.tags.get(TAGS.project).cloned(),
                    observed: observed(s),
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
        let wanted = operation_id.to_string();
        let listed = self
            .control
            .list_sandboxes(ctx, (TAGS.operation_id, &wanted))
            .await?;
        // The tag is checked again by the contract wrapper (`corral_provider::Contracted`).
        Ok(listed.into_iter().map(observed).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_snapshot_ids_and_anything_else_an_alias() {
        assert!(is_uuid("3f1c8a9e-5b2d-4e7a-9c10-6d8f2b4a1e33"));
        assert!(!is_uuid("my-app@v1"));
        assert!(!is_uuid("3f1c8a9e-5b2d-4e7a-9c10-6d8f2b4a1e3"));
    }

    #[test]
    fn the_configuration_reads_default_image_and_refuses_other_providers_keys() {
        let config: TogetherConfig = serde_json::from_value(serde_json::json!({
            "default_image": "corral-base@v1",
            "http": { "request_timeout_seconds": 7 },
        }))
        .unwrap();
        assert_eq!(config.default_snapshot.as_deref(), Some("corral-base@v1"));
        assert_eq!(config.base_url, DEFAULT_BASE_URL);
        assert_eq!(config.http.request_timeout, Duration::from_secs(7));
        let foreign = serde_json::from_value::<TogetherConfig>(serde_json::json!({
            "toolbox_url": "https://proxy.app.daytona.io/toolbox",
        }));
        assert!(foreign.is_err());
    }
}
