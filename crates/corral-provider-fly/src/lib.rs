//! Fly Machines adapter.
//!
//! A Fly Machine is a fast-booting VM running a container image, inside a Fly **app**. Corral
//! drives the Machines API at `https://api.machines.dev/v1` with
//! `Authorization: Bearer <Fly API token>`.
//!
//! **The app.** Every machine lives in an app, chosen per create: the request's `app` field,
//! else the call context's `projectId` (the profile's `projectId` or `X-Provider-Project-Id`,
//! which for Fly names the app), else `[providers.fly] app`. A create with none is refused
//! before any request. The native id is `<app>:<machine id>`, so later calls know the app.
//! Reconciliation (`find_by_operation_id`) searches the context's app and the configured one:
//! a lost create that named another app in its request is not found there.
//!
//! | Corral | Fly Machines |
//! |---|---|
//! | create (`image` = container image) | `POST /apps/{app}/machines {name, region?, config: {image, metadata, init: {exec}, auto_destroy: false}}` |
//! | operation id | `config.metadata.corral_operation_id` and the name `corral-op-<ulid>`; found with `GET /apps/{app}/machines?metadata.corral_operation_id=…` |
//! | get | `GET /apps/{app}/machines/{id}`; states in `map.rs` |
//! | delete | `DELETE /apps/{app}/machines/{id}?force=true` (a running machine cannot be destroyed without `force`) |
//! | exec | `POST /apps/{app}/machines/{id}/exec {command: ["sh", "-c", <script>], timeout}` → `{stdout, stderr, exit_code, exit_signal}` |
//! | files | no file API: through exec with [`corral_provider::files_via_exec`] |
//!
//! The image's own entrypoint may exit at once (a sandbox image often has no server), which
//! would stop the machine; so the machine runs `init.exec` instead, `["sleep", "inf"]` by
//! default (`[providers.fly] init_exec`; an empty list keeps the image's own).
//!
//! Exec has an argv and a `timeout` in seconds but no cwd or env: the adapter runs
//! `sh -c '<prelude><command>'` ([`corral_provider::shell::script`]) with `timeout` set to the
//! deadline in whole seconds, rounded up; an answer after the deadline with a signal, a
//! failure, or an exit of 124/137, is `CommandTimedOut`. Output is capped by Corral after it
//! arrives (the whole answer is bounded by the HTTP client's body cap, 16 MiB by default).

pub mod api;
mod capabilities;
mod client;
#[cfg(feature = "fake")]
pub mod fake;
mod map;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderCapabilities};
use corral_provider::{
    Adapter, CallContext, CappedOutput, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox,
    ProviderError, Result, SandboxProvider, TaggedPage, TaggedSandbox, shell,
};
use corral_provider_http::{HttpConfig, ProviderHttp};

/// The Machines API's base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.machines.dev/v1";
/// The metadata keys Corral stamps on machines.
pub const TAGS: corral_provider::tags::TagKeys = corral_provider::tags::UNDERSCORED;
/// Largest command sent to exec for file writes (chunked under it): one argv element reaches
/// `sh -c`, and Linux caps a single argument at 128 KiB.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// Extra time the exec request may take beyond the command's deadline.
const CLIENT_GRACE: Duration = Duration::from_secs(30);

/// How to reach Fly Machines: `[providers.fly]` in the server's configuration.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlyConfig {
    /// API base URL (`https://api.machines.dev/v1`).
    pub base_url: String,
    /// Timeouts and caps.
    pub http: HttpConfig,
    /// The app when neither the request nor the context names one.
    pub app: Option<String>,
    /// The region when the request names none (absent: Fly picks one).
    pub region: Option<String>,
    /// Image when a request has none (absent: `image` is required).
    pub default_image: Option<String>,
    /// What the machine runs instead of the image's entrypoint (empty: the image's own).
    pub init_exec: Vec<String>,
}

impl Default for FlyConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            http: HttpConfig::default(),
            app: None,
            region: None,
            default_image: None,
            init_exec: vec!["sleep".into(), "inf".into()],
        }
    }
}

/// The Fly Machines [`SandboxProvider`].
#[derive(Debug)]
pub struct FlyProvider {
    client: client::Client,
    caps: ProviderCapabilities,
    config: FlyConfig,
}

const P: Provider = Provider::Fly;

impl Adapter for FlyProvider {
    const PROVIDER: Provider = P;
    type Config = FlyConfig;

    /// Fails only on an unusable base URL.
    fn from_config(config: FlyConfig) -> Result<Self> {
        let http = ProviderHttp::new(P, &config.base_url, config.http.clone())?;
        Ok(Self {
            client: client::Client::new(http),
            caps: capabilities::capabilities(),
            config,
        })
    }
}

/// `<app>:<machine id>`.
pub fn native_id(app: &str, machine_id: &str) -> String {
    format!("{app}:{machine_id}")
}

/// The app and machine id of a native id; an id of another shape names no machine.
fn split(native_id: &str) -> Result<(&str, &str)> {
    native_id
        .split_once(':')
        .filter(|(app, id)| !app.is_empty() && !id.is_empty())
        .ok_or_else(|| ProviderError::NotFound {
            provider: P,
            resource: format!("machine {native_id}"),
        })
}

fn observed(app: &str, machine: api::Machine) -> ObservedSandbox {
    let operation_id = machine
        .config
        .as_ref()
        .and_then(|c| c.metadata.as_ref())
        .and_then(|m| m.get(TAGS.operation_id))
        .and_then(|s| s.parse::<OperationId>().ok());
    ObservedSandbox {
        status: map::status(&machine.state),
        native_id: native_id(app, &machine.id),
        operation_id,
    }
}

fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

impl FlyProvider {
    /// The app for a create: the request's, the context's `projectId`, the configured one.
    fn app_for(&self, ctx: &CallContext, request: &CreateSandboxRequest) -> Result<String> {
        let from_request = match request {
            CreateSandboxRequest::Fly(f) => f.app.clone(),
            _ => None,
        };
        from_request
            .or_else(|| ctx.context().project_id.clone())
            .or_else(|| self.config.app.clone())
            .filter(|a| !a.is_empty())
            .ok_or_else(|| ProviderError::InvalidRequest {
                provider: P,
                message: "a Fly app is required: set `app` in the request, the profile's \
                          projectId (or X-Provider-Project-Id), or `[providers.fly] app`"
                    .into(),
            })
    }

    /// The apps a lost create may be in: the context's, then the configured one.
    fn search_apps(&self, ctx: &CallContext) -> Vec<String> {
        let mut apps: Vec<String> = [ctx.context().project_id.clone(), self.config.app.clone()]
            .into_iter()
            .flatten()
            .filter(|a| !a.is_empty())
            .collect();
        apps.dedup();
        apps
    }
}

#[async_trait]
impl SandboxProvider for FlyProvider {
    fn provider(&self) -> Provider {
        P
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        let app = self.app_for(ctx, &spec.request)?;
        let image = spec
            .request
            .image()
            .map(str::to_owned)
            .or_else(|| self.config.default_image.clone())
            .ok_or_else(|| ProviderError::InvalidRequest {
                provider: P,
                message: "`image` (the container image the machine runs) is required".into(),
            })?;
        let region = match &spec.request {
            CreateSandboxRequest::Fly(f) => f.region.clone(),
            _ => None,
        }
        .or_else(|| self.config.region.clone());
        let body = api::CreateMachineRequest {
            name: format!("corral-{}", spec.operation_id.to_string().replace('_', "-")),
            region,
            config: api::MachineConfig {
                image,
                metadata: TAGS
                    .stamp(ctx, &spec.operation_id)
                    .into_iter()
                    .collect::<BTreeMap<_, _>>(),
                init: (!self.config.init_exec.is_empty()).then(|| api::MachineInit {
                    exec: self.config.init_exec.clone(),
                }),
                auto_destroy: false,
            },
        };
        let machine = self.client.create_machine(ctx, &app, &body).await?;
        Ok(observed(&app, machine))
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let (app, id) = split(native_id)?;
        Ok(observed(app, self.client.get_machine(ctx, app, id).await?))
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        let (app, id) = split(native_id)?;
        self.client.destroy_machine(ctx, app, id).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let (app, id) = split(native_id)?;
        let body = api::MachineExecRequest {
            command: vec!["sh".into(), "-c".into(), shell::script(P, spec)?],
            timeout: whole_seconds(spec.timeout),
        };
        let started = Instant::now();
        let answer = self
            .client
            .exec(ctx, app, id, &body, spec.timeout + CLIENT_GRACE)
            .await;
        let past_deadline = started.elapsed() >= spec.timeout;
        let timed_out = ProviderError::CommandTimedOut {
            after: spec.timeout,
        };
        match answer {
            Ok(resp)
                if past_deadline
                    && (resp.exit_signal.is_some() || matches!(resp.exit_code, -1 | 124 | 137)) =>
            {
                Err(timed_out)
            }
            Ok(resp) => {
                let cap = |text: String| {
                    let mut out = CappedOutput::new(spec.max_output_bytes);
                    out.push(text.as_bytes());
                    out.finish()
                };
                let (stdout, t1) = cap(resp.stdout);
                let (stderr, t2) = cap(resp.stderr);
                // Death by signal n is reported as 128 + n, as a shell would.
                let exit_code = match resp.exit_signal {
                    Some(signal) if signal > 0 && resp.exit_code <= 0 => 128 + signal,
                    _ => resp.exit_code,
                };
                Ok(ExecOutput {
                    stdout,
                    stderr,
                    exit_code,
                    truncated: t1 || t2,
                })
            }
            // Whatever Fly answers once the command's own timeout has passed, the command did
            // not finish in time.
            Err(e) if past_deadline && !matches!(e, ProviderError::Unauthorized { .. }) => {
                tracing::debug!(error = %e, "Fly exec failed past the command's deadline");
                Err(timed_out)
            }
            Err(e) => Err(e),
        }
    }

    /// `GET /apps/{app}/machines?metadata.corral_deployment=…`, one page per app searched
    /// (the token is the next app's position).
    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        let apps = self.search_apps(ctx);
        let at = match page {
            None => 0,
            Some(p) => p
                .parse::<usize>()
                .map_err(|_| ProviderError::InvalidRequest {
                    provider: P,
                    message: "not a page token of this listing".into(),
                })?,
        };
        let Some(app) = apps.get(at) else {
            return Ok(TaggedPage::default());
        };
        let machines = match self
            .client
            .list_machines(ctx, app, TAGS.deployment, deployment)
            .await
        {
            Ok(m) => m,
            // An app that does not exist holds no machine.
            Err(ProviderError::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(TaggedPage {
            sandboxes: machines
                .into_iter()
                .map(|m| TaggedSandbox {
                    project: m
                        .config
                        .as_ref()
                        .and_then(|c| c.metadata.as_ref())
                        .and_then(|md| md.get(TAGS.project))
                        .cloned(),
                    observed: observed(app, m),
                })
                .collect(),
            next: (at + 1 < apps.len()).then(|| (at + 1).to_string()),
        })
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        let wanted = operation_id.to_string();
        let mut found = Vec::new();
        for app in self.search_apps(ctx) {
            let machines = match self
                .client
                .list_machines(ctx, &app, TAGS.operation_id, &wanted)
                .await
            {
                Ok(m) => m,
                // An app that does not exist holds no machine.
                Err(ProviderError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            found.extend(machines.into_iter().map(|m| observed(&app, m)));
        }
        // The tag is checked again by the contract wrapper (`corral_provider::Contracted`).
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_table_is_read_strictly() {
        let empty: FlyConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.base_url, DEFAULT_BASE_URL);
        assert_eq!(empty.init_exec, ["sleep", "inf"]);
        assert_eq!((empty.app, empty.default_image), (None, None));
        let set: FlyConfig = serde_json::from_value(serde_json::json!({
            "app": "sandboxes",
            "region": "ams",
            "init_exec": [],
            "http": { "request_timeout_seconds": 5 },
        }))
        .unwrap();
        assert_eq!(set.app.as_deref(), Some("sandboxes"));
        assert!(set.init_exec.is_empty());
        assert_eq!(set.http.request_timeout, Duration::from_secs(5));
        // A key meant for another provider is refused, not ignored.
        let foreign = serde_json::json!({ "workspace": "w" });
        assert!(serde_json::from_value::<FlyConfig>(foreign).is_err());
    }

    #[test]
    fn native_ids_carry_the_app_and_malformed_ones_name_no_machine() {
        assert_eq!(native_id("my-app", "3d8d9"), "my-app:3d8d9");
        assert_eq!(split("my-app:3d8d9").unwrap(), ("my-app", "3d8d9"));
        for bad in ["3d8d9", ":3d8d9", "my-app:"] {
            assert!(
                matches!(split(bad), Err(ProviderError::NotFound { .. })),
                "{bad}"
            );
        }
        assert_eq!(whole_seconds(Duration::from_millis(1001)), 2);
    }
}
