//! Morph Cloud adapter.
//!
//! Morph Cloud runs microVM *instances* started from *snapshots* (a base image such as
//! `morphvm-minimal` plus CPU, memory and disk), over a REST API at
//! `https://cloud.morph.so/api` with `Authorization: Bearer <MORPH_API_KEY>`. No other context
//! is needed.
//!
//! | Corral | Morph |
//! |---|---|
//! | create (`image` = snapshot id) | `POST /instance?snapshot_id=…` `{metadata, ttl_seconds, ttl_action: "stop"}` |
//! | `timeout` (seconds) | `ttl_seconds`: whole seconds from the start; at expiry `ttl_action` `stop` deletes the instance (absent: runs until deleted) |
//! | operation id | `metadata.corral_operation_id`; found with `GET /instance?metadata[corral_operation_id]=…` |
//! | get | `GET /instance/{id}`; `pending`→creating, `ready`→running, `paused`→stopped, `saving`→running, `error`→failed |
//! | delete | `DELETE /instance/{id}` (permanent; the SDK calls it "stop") |
//! | exec | `POST /instance/{id}/exec {"command": ["<quoted command line>"]}` → `{exit_code, stdout, stderr}` |
//! | files | no REST file API (the SDK uses SFTP): read and write go through exec with [`corral_provider::files_via_exec`] |
//! | stop / resume | `POST /instance/{id}/pause` / `…/resume` (memory and disk kept), then `GET /instance/{id}` |
//! | snapshot | `POST /instance/{id}/snapshot {metadata: {corral_snapshot_id}}` → `Snapshot` (`pending` → `ready`), followed with `GET /snapshot/{id}` |
//! | delete snapshot | `DELETE /snapshot/{id}` |
//! | restore | `POST /instance?snapshot_id=<snapshot>`, tagged like a create |
//!
//! Morph has no idle policy (`ttl_seconds` counts from the start), so `idleStopSeconds` is
//! Corral's own sweep here.
//!
//! Exec takes a `command` list that Morph runs through a shell when it has one element (the SDKs
//! send `exec("a && b")` as `["a && b"]`), so the adapter sends one quoted line,
//! `'timeout' '-k' '5' '<secs>' 'sh' '-c' '<script>'`, where
//! the script applies cwd and env, runs the command in a subshell with its streams in a
//! temporary directory, and prints at most `max_output_bytes + 1` bytes of each. So cwd and env
//! are honoured, the deadline is enforced *inside* the instance (the whole process group is
//! signalled, so a command that runs too long does not outlive Corral's answer), and a command
//! that prints gigabytes does not send them through the API. This needs `timeout`, `mktemp` and
//! `head` (coreutils or busybox) in the image. Morph returns output as text, so non-UTF-8 output
//! is not byte-exact (files are: they travel as base64).

pub mod api;
mod capabilities;
mod client;
#[cfg(feature = "fake")]
pub mod fake;
mod map;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use corral_domain::{OperationId, Provider, ProviderCapabilities, SandboxStatus};
use corral_provider::shell::{self, shell_quote};
use corral_provider::{
    Adapter, CallContext, CappedOutput, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox,
    ObservedSnapshot, ProviderError, Result, SandboxProvider, SnapshotSpec, TaggedPage,
    TaggedSandbox,
};
use corral_provider_http::{HttpConfig, ProviderHttp};

pub use api::TtlAction;

/// Morph's public API base URL.
pub const DEFAULT_BASE_URL: &str = "https://cloud.morph.so/api";
/// The metadata keys Corral stamps on instances and snapshots.
pub const TAGS: corral_provider::tags::TagKeys = corral_provider::tags::UNDERSCORED;
/// The metadata key that carries Corral's operation id.
pub const OPERATION_ID_METADATA_KEY: &str = TAGS.operation_id;
/// Largest command line sent to exec for file writes (they are chunked under it). The line
/// reaches the instance's shell as one argument, and Linux caps one argument at 128 KiB
/// (`MAX_ARG_STRLEN`); 64 KiB stays well under that and keeps each request small.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// Seconds between the polite signal and `SIGKILL` when a command passes its deadline.
const KILL_GRACE_SECONDS: u64 = 5;
/// Extra time the HTTP request may take beyond the command's deadline (the in-instance
/// `timeout` fires first; this only covers a provider that never answers).
const CLIENT_GRACE: Duration = Duration::from_secs(30);

/// How to reach Morph Cloud: `[providers.morph]` in the server's configuration.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MorphConfig {
    /// API base URL (`https://cloud.morph.so/api`).
    pub base_url: String,
    /// Timeouts and caps.
    pub http: HttpConfig,
    /// Snapshot to start from when a request has no `image` (none: `image` is required);
    /// `default_image` in the configuration file.
    #[serde(rename = "default_image")]
    pub default_snapshot_id: Option<String>,
}

impl Default for MorphConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            http: HttpConfig::default(),
            default_snapshot_id: None,
        }
    }
}

/// The Morph Cloud [`SandboxProvider`].
#[derive(Debug)]
pub struct MorphProvider {
    client: client::Client,
    caps: ProviderCapabilities,
    default_snapshot_id: Option<String>,
}

pub(crate) const P: Provider = Provider::Morph;

impl Adapter for MorphProvider {
    const PROVIDER: Provider = P;
    type Config = MorphConfig;

    /// Fails only on an unusable base URL.
    fn from_config(config: MorphConfig) -> Result<Self> {
        let http = ProviderHttp::new(P, &config.base_url, config.http)?;
        Ok(Self {
            client: client::Client::new(http),
            caps: capabilities::capabilities(),
            default_snapshot_id: config.default_snapshot_id,
        })
    }
}

fn observed(instance: api::Instance) -> ObservedSandbox {
    let operation_id = instance
        .metadata
        .get(TAGS.operation_id)
        .and_then(|s| s.parse::<OperationId>().ok());
    ObservedSandbox {
        status: map::status(&instance.status),
        native_id: instance.id,
        operation_id,
    }
}

/// Runs `inner` in a subshell with its streams in temporary files, then prints at most
/// `cap + 1` bytes of each (one more than is kept, so a cut shows): a command that prints
/// gigabytes does not send them through Morph's API.
fn with_output_cap(inner: &str, cap: usize) -> String {
    let n = cap.saturating_add(1);
    format!(
        "t=$(mktemp -d) || exit 125\n(\n{inner}\n) >\"$t/o\" 2>\"$t/e\"; c=$?\n\
         head -c {n} \"$t/o\"; head -c {n} \"$t/e\" >&2; rm -rf \"$t\"; exit $c"
    )
}

/// The command line sent to Morph: [`exec_argv`] quoted for a shell. Morph runs a
/// one-element `command` through a shell (its SDKs send `exec("cmd && more")` as `["cmd && more"]`)
/// and does not document how it treats several elements, so the whole argv travels as one
/// quoted line that any POSIX shell splits back into exactly these words.
fn exec_command_line(spec: &ExecSpec) -> Result<String> {
    Ok(exec_argv(spec)?
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" "))
}

/// The argv to run: the script under an in-instance deadline and output cap.
fn exec_argv(spec: &ExecSpec) -> Result<Vec<String>> {
    let secs = spec.timeout.as_secs() + u64::from(spec.timeout.subsec_nanos() > 0);
    Ok(vec![
        "timeout".into(),
        "-k".into(),
        KILL_GRACE_SECONDS.to_string(),
        secs.max(1).to_string(),
        "sh".into(),
        "-c".into(),
        with_output_cap(&shell::script(P, spec)?, spec.max_output_bytes),
    ])
}

fn capped(text: String, cap: usize) -> (Vec<u8>, bool) {
    let mut out = CappedOutput::new(cap);
    out.push(text.as_bytes());
    out.finish()
}

impl MorphProvider {
    /// `POST /instance?snapshot_id=…`, tagged with the operation id, deployment and project:
    /// a create (from the image's snapshot) and a restore (from a snapshot Corral took) alike.
    async fn start_from(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot_id: &str,
    ) -> Result<ObservedSandbox> {
        let body = api::StartInstanceRequest {
            metadata: TAGS.stamp(ctx, &spec.operation_id),
            ttl_seconds: spec.timeout_seconds,
            // Explicit, although it is Morph's default: Corral's lifetime ends the sandbox.
            ttl_action: spec.timeout_seconds.map(|_| api::TtlAction::Stop),
        };
        let instance = self.client.start_instance(ctx, snapshot_id, &body).await?;
        Ok(observed(instance))
    }
}

fn observed_snapshot(snapshot: &api::Snapshot) -> Result<ObservedSnapshot> {
    let status = map::snapshot_status(&snapshot.status).ok_or_else(|| ProviderError::NotFound {
        provider: P,
        resource: format!("snapshot {}", snapshot.id),
    })?;
    Ok(ObservedSnapshot {
        native_id: snapshot.id.clone(),
        status,
        // Morph's `Snapshot` has no size.
        size_bytes: None,
    })
}

#[async_trait]
impl SandboxProvider for MorphProvider {
    fn provider(&self) -> Provider {
        P
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        let snapshot_id = spec
            .request
            .image()
            .map(str::to_owned)
            .or_else(|| self.default_snapshot_id.clone())
            .ok_or_else(|| ProviderError::InvalidRequest {
                provider: P,
                message: "`image` (the id of the Morph snapshot to start from) is required".into(),
            })?;
        self.start_from(ctx, spec, &snapshot_id).await
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        Ok(observed(self.client.get_instance(ctx, native_id).await?))
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        self.client.delete_instance(ctx, native_id).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let body = api::ExecRequest {
            command: vec![exec_command_line(spec)?],
        };
        let started = Instant::now();
        let answer = self
            .client
            .exec(ctx, native_id, &body, spec.timeout + CLIENT_GRACE)
            .await;
        let past_deadline = started.elapsed() >= spec.timeout;
        match answer {
            // `timeout` exits 124 after SIGTERM, 137 after the follow-up SIGKILL.
            Ok(resp) if past_deadline && matches!(resp.exit_code, 124 | 137) => {
                Err(ProviderError::CommandTimedOut {
                    after: spec.timeout,
                })
            }
            Ok(resp) => {
                let (stdout, t1) = capped(resp.stdout, spec.max_output_bytes);
                let (stderr, t2) = capped(resp.stderr, spec.max_output_bytes);
                Ok(ExecOutput {
                    stdout,
                    stderr,
                    exit_code: resp.exit_code,
                    truncated: t1 || t2,
                })
            }
            Err(ProviderError::TimedOutAfterSend { .. }) if past_deadline => {
                Err(ProviderError::CommandTimedOut {
                    after: spec.timeout,
                })
            }
            Err(e) => Err(e),
        }
    }

    async fn stop(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        // Pause is synchronous (memory and disk are saved before it answers) and answers an
        // instance already paused unchanged; the instance is then read, as the SDK does.
        self.client.pause_instance(ctx, native_id).await?;
        self.get(ctx, native_id).await
    }

    async fn resume(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        match self.client.resume_instance(ctx, native_id).await {
            Ok(()) => self.get(ctx, native_id).await,
            // What Morph answers for resuming an instance that is not paused is not documented:
            // a refusal of an instance that runs already is the answer "running".
            Err(e @ ProviderError::InvalidRequest { .. }) => {
                let seen = self.get(ctx, native_id).await?;
                match seen.status {
                    SandboxStatus::Running | SandboxStatus::Starting => Ok(seen),
                    _ => Err(e),
                }
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
        let mut metadata =
            BTreeMap::from([(TAGS.snapshot_id.to_owned(), spec.snapshot_id.to_string())]);
        if let Some(name) = &spec.name {
            metadata.insert(TAGS.snapshot_name.to_owned(), name.clone());
        }
        let body = api::SnapshotInstanceRequest { metadata };
        let snapshot = self.client.snapshot_instance(ctx, native_id, &body).await?;
        observed_snapshot(&snapshot)
    }

    async fn get_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<ObservedSnapshot> {
        observed_snapshot(&self.client.get_snapshot(ctx, snapshot).await?)
    }

    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        // An unknown snapshot (404) is `Ok` through the contract wrapper.
        self.client.delete_snapshot(ctx, snapshot).await
    }

    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        // Morph starts instances from snapshots: a restore is a start from Corral's snapshot.
        self.start_from(ctx, spec, snapshot).await
    }

    /// `GET /instance?metadata[corral_deployment]=…`: Morph answers the whole filtered list
    /// at once, so there is one page.
    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        if page.is_some() {
            return Ok(TaggedPage::default());
        }
        let list = self
            .client
            .list_instances(ctx, &[(TAGS.deployment.to_owned(), deployment.to_owned())])
            .await?;
        Ok(TaggedPage {
            sandboxes: list
                .data
                .into_iter()
                .map(|i| TaggedSandbox {
                    project: i.metadata.get(TAGS.project).cloned(),
                    observed: observed(i),
                })
                .collect(),
            next: None,
        })
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        let wanted = operation_id.to_string();
        let list = self
            .client
            .list_instances(ctx, &[(TAGS.operation_id.to_owned(), wanted)])
            .await?;
        // The tag is checked again by the contract wrapper (`corral_provider::Contracted`).
        Ok(list.data.into_iter().map(observed).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_argv_applies_cwd_env_and_a_whole_second_deadline() {
        let mut spec = ExecSpec::new("pwd");
        spec.cwd = Some("/tmp/a b".into());
        spec.env = BTreeMap::from([("A".to_owned(), "it's".to_owned())]);
        spec.timeout = Duration::from_millis(1500);
        let argv = exec_argv(&spec).unwrap();
        assert_eq!(argv[..6], ["timeout", "-k", "5", "2", "sh", "-c"]);
        assert_eq!(
            argv[6],
            format!(
                "t=$(mktemp -d) || exit 125\n(\ncd -- '/tmp/a b' || exit 1\nexport A='it'\\''s'\npwd\n) \
                 >\"$t/o\" 2>\"$t/e\"; c=$?\nhead -c {n} \"$t/o\"; head -c {n} \"$t/e\" >&2; \
                 rm -rf \"$t\"; exit $c",
                n = spec.max_output_bytes + 1
            )
        );
        spec.env = BTreeMap::from([("A;rm".to_owned(), "x".to_owned())]);
        assert!(matches!(
            exec_argv(&spec),
            Err(ProviderError::InvalidRequest { .. })
        ));
    }
}
