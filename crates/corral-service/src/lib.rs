//! Corral's use cases, framework-free: create, get, list, delete, exec, read and write files,
//! and the provider catalog, over `Arc<dyn SandboxProvider>`s, the registry and the
//! idempotency store.
//!
//! Every failure is a [`ServiceError`](error::ServiceError) that maps to exactly one v3 error
//! code; the HTTP server only renders it. Usable without any web framework:
//!
//! ```no_run
//! # async fn demo(service: corral_service::Service, key: &str) -> Result<(), corral_service::error::ServiceError> {
//! use corral_domain::{CreateSandboxRequest, Provider};
//! use corral_service::InlineAccess;
//!
//! let caller = service.authenticate(Some(&format!("Bearer {key}"))).await?;
//! let req = CreateSandboxRequest::standard(Provider::Local, None, None);
//! let created = service.create(&caller, InlineAccess::default(), Some("key-1"), req).await?;
//! assert_eq!(created.status, 201);
//! # Ok(()) }
//! ```

mod access;
pub mod bridge;
mod capture;
pub mod commands;
mod create;
pub mod error;
pub mod events;
pub mod failpoint;
pub mod lifecycle;
pub mod limiter;
mod live;
pub mod metrics;
pub mod reaper;
mod reconciler;
mod sandboxes;
pub mod streams;
pub mod usage;
pub mod verify;
pub mod webhooks;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use corral_domain::{OperationId, Provider, ProviderCatalog, ProviderContext, limits};
use corral_idempotency::IdempotencyStore;
use corral_provider::{Contracted, SandboxProvider, SecretString};
use corral_registry::{CommandJournal, EventLog, ProjectId, Registry};

use crate::bridge::BridgeGuard;
use crate::error::{ServiceError, registry_error};
use crate::metrics::ProviderCalls;

pub use reaper::{OrphanFinding, ReapReport, ReaperConfig, VanishedFinding};
pub use reconciler::ReconcileReport;

/// Tunables of the use cases.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// How long a command may run before `request_timeout`.
    pub exec_deadline: Duration,
    /// How long a create request waits for the provider before answering
    /// `sandbox_create_outcome_unknown` (the create goes on and is recorded).
    pub create_wait: Duration,
    /// Deadline of get, delete and file calls to a provider.
    pub provider_call_timeout: Duration,
    /// Hosts exempt from the bridge URL address rules.
    pub bridge_allow: Vec<String>,
    /// How long after we last heard of an unconfirmed create (recorded, or its answer lost)
    /// finding nothing at the provider still counts as "not listed yet"; after it the create
    /// is recorded failed and its key freed. Must cover the provider's late processing plus
    /// its listing lag.
    pub reconcile_grace: Duration,
    /// Request rates per API key and per project, and the failed-authentication throttle
    /// (none by default; the server configures [`limiter::RateLimits::standard`]).
    pub rate_limits: limiter::RateLimits,
    /// Quotas on live sandboxes per project (none by default).
    pub quotas: limiter::Quotas,
    /// Caps on commands running at once, per project and in all
    /// ([`limiter::ExecConcurrency::standard`] by default).
    pub exec_concurrency: limiter::ExecConcurrency,
    /// Commands as durable jobs: deadlines, capture leases, output retention.
    pub commands: commands::CommandsConfig,
    /// How long lifecycle events stay readable (`GET /v1/events`).
    pub events_retention: Duration,
    /// Webhook delivery: allowed hosts, attempts, backoff, deadline, rotation overlap.
    pub webhooks: webhooks::WebhooksConfig,
    /// The orphan reaper: schedule, whether orphans are deleted, grace period.
    pub reaper: reaper::ReaperConfig,
    /// Live streams (event and output follows) one API key holds at once
    /// ([`streams::DEFAULT_STREAMS_PER_KEY`] by default).
    pub streams_per_key: usize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            exec_deadline: Duration::from_secs(limits::DEFAULT_EXEC_DEADLINE_SECONDS),
            create_wait: Duration::from_secs(120),
            provider_call_timeout: Duration::from_secs(60),
            bridge_allow: Vec::new(),
            reconcile_grace: Duration::from_secs(300),
            rate_limits: limiter::RateLimits::default(),
            quotas: limiter::Quotas::default(),
            exec_concurrency: limiter::ExecConcurrency::standard(),
            commands: commands::CommandsConfig::default(),
            events_retention: Duration::from_secs(30 * 24 * 60 * 60),
            webhooks: webhooks::WebhooksConfig::default(),
            reaper: reaper::ReaperConfig::default(),
            streams_per_key: streams::DEFAULT_STREAMS_PER_KEY,
        }
    }
}

/// An authenticated caller: the project its API key belongs to, and that key's public id.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    project: ProjectId,
    key: Option<KeyRef>,
}

/// The public id of the API key a caller authenticated with (the id part of `crl_<id>_…`,
/// never the secret): what credentials derived from the key (the E2B door's access tokens)
/// name, so that revoking the key ends them.
#[derive(Clone, Copy, PartialEq, Eq)]
struct KeyRef {
    bytes: [u8; KeyRef::MAX],
    len: u8,
}

impl KeyRef {
    const MAX: usize = 32;

    fn new(id: &str) -> Option<Self> {
        let mut bytes = [0; Self::MAX];
        bytes.get_mut(..id.len())?.copy_from_slice(id.as_bytes());
        Some(Self {
            bytes,
            len: u8::try_from(id.len()).ok()?,
        })
    }

    fn as_str(&self) -> &str {
        // Built from a `&str` of `len` bytes in `new`, so always UTF-8.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::fmt::Debug for KeyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Caller {
    /// A caller for `project` authorized by other means than an API key: the control plane
    /// (after its membership and role checks) and embedding services. It bypasses API-key
    /// authentication, so never build one from unchecked input.
    pub fn trusted(project: ProjectId) -> Self {
        Self { project, key: None }
    }

    /// The public id of the API key the caller authenticated with; `None` for a
    /// [`Caller::trusted`] one.
    pub fn key_id(&self) -> Option<&str> {
        self.key.as_ref().map(KeyRef::as_str)
    }

    /// The caller's project.
    pub fn project_id(&self) -> ProjectId {
        self.project
    }
}

/// The request's inline provider access: `X-Provider-Credential` (never stored, logged or
/// echoed) and the `X-Provider-*` context headers, which override the profile's context.
#[derive(Debug, Clone, Default)]
pub struct InlineAccess {
    /// The inline credential.
    pub credential: Option<SecretString>,
    /// The inline context.
    pub context: ProviderContext,
}

/// A create's answer: 201 with a new sandbox, or 200 replaying the stored body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// 201 (new) or 200 (replay).
    pub status: u16,
    /// The exact JSON body (byte-identical on replay).
    pub body: String,
    /// Whether this is a replay (`Idempotent-Replayed: true`).
    pub replayed: bool,
}

/// The use cases. Cheap to clone.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

struct Inner {
    providers: BTreeMap<Provider, Arc<dyn SandboxProvider>>,
    catalog: ProviderCatalog,
    /// `catalog` as JSON, encoded once: it never changes while the service runs.
    catalog_json: Arc<str>,
    registry: Registry,
    idempotency: IdempotencyStore,
    config: ServiceConfig,
    bridge: BridgeGuard,
    provider_latency: Arc<ProviderCalls>,
    /// Creates whose provider call is running in this process: the reconciler leaves them be.
    in_flight: Arc<Mutex<HashSet<OperationId>>>,
    /// Token buckets of the request-rate limits (per replica).
    buckets: limiter::Buckets,
    /// Commands running now (per replica).
    exec_slots: Arc<limiter::ExecSlots>,
    /// Commands as durable jobs and their output, in the registry's database.
    journal: CommandJournal,
    /// The lifecycle event log, in the registry's database.
    events: EventLog,
    /// This process's name as the owner of command captures (fresh at every start).
    replica: String,
    /// The captures this process runs, for readers to wake on.
    live: Arc<live::Hub>,
    /// This deployment's id, read from the registry once.
    deployment: tokio::sync::OnceCell<Arc<str>>,
    /// The reaper's counters.
    reaper_stats: reaper::ReaperStats,
    /// The live streams each key holds.
    streams: Arc<streams::Streams>,
}

/// The API key in an `Authorization` header value: `Bearer <key>`, the scheme in any case,
/// surrounding spaces ignored; `missing_api_key` when absent or of another form. The key is
/// not checked here ([`Service::authenticate`] does).
pub fn bearer_key(authorization: Option<&str>) -> Result<&str, ServiceError> {
    let missing = |m: &str| ServiceError::MissingApiKey {
        message: m.to_owned(),
    };
    let Some(value) = authorization.map(str::trim).filter(|v| !v.is_empty()) else {
        return Err(missing(
            "send the project API key as `Authorization: Bearer <API key>`",
        ));
    };
    let (scheme, key) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") || key.trim().is_empty() {
        return Err(missing(
            "the Authorization header must be `Bearer <API key>`",
        ));
    }
    Ok(key.trim())
}

/// Marks an operation in flight until dropped (also when its task panics).
pub(crate) struct InFlight {
    set: Arc<Mutex<HashSet<OperationId>>>,
    op: OperationId,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.op);
    }
}

impl Service {
    /// The use cases over `providers`, the registry and the idempotency store. Every provider
    /// is wrapped in [`Contracted`], which applies the port's shared rules and reports each
    /// call to the provider-call metrics.
    pub fn new(
        providers: BTreeMap<Provider, Arc<dyn SandboxProvider>>,
        registry: Registry,
        idempotency: IdempotencyStore,
        config: ServiceConfig,
    ) -> Self {
        let provider_latency = Arc::new(ProviderCalls::default());
        let providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = providers
            .into_iter()
            .map(|(id, adapter)| {
                let wrapped: Arc<dyn SandboxProvider> =
                    Arc::new(Contracted::new(adapter, provider_latency.clone()));
                (id, wrapped)
            })
            .collect();
        let catalog = ProviderCatalog {
            providers: providers
                .values()
                .map(|p| p.capabilities().clone())
                .collect(),
        };
        // Plain data (strings, numbers, enums): serde_json cannot fail on it; an empty body
        // would show up in every test of the route.
        let catalog_json = serde_json::to_string(&catalog).unwrap_or_default().into();
        let journal = CommandJournal::new(registry.database().clone())
            .with_max_events(config.commands.max_output_events_per_command);
        let events = EventLog::new(registry.database().clone());
        Self {
            inner: Arc::new(Inner {
                bridge: BridgeGuard::new(&config.bridge_allow),
                streams: streams::Streams::new(config.streams_per_key),
                providers,
                catalog,
                catalog_json,
                registry,
                idempotency,
                config,
                in_flight: Arc::default(),
                buckets: limiter::Buckets::default(),
                exec_slots: Arc::default(),
                provider_latency,
                journal,
                events,
                replica: format!("replica-{}", OperationId::new()),
                live: Arc::default(),
                deployment: tokio::sync::OnceCell::new(),
                reaper_stats: reaper::ReaperStats::default(),
            }),
        }
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The configured providers.
    pub fn provider_ids(&self) -> Vec<Provider> {
        self.inner.providers.keys().copied().collect()
    }

    /// Resolves `Authorization: Bearer <key>` to the caller's project.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, ServiceError> {
        let key = bearer_key(authorization)?;
        match self.inner.registry.authenticate(key).await {
            Ok(Some(project)) => Ok(Caller {
                project,
                key: corral_registry::api_key_id(key).and_then(KeyRef::new),
            }),
            Ok(None) => Err(ServiceError::AuthenticationFailed {
                message: "the project API key was rejected".into(),
            }),
            Err(e) => Err(registry_error(e)),
        }
    }

    /// `GET /v1/providers`: every configured provider's capabilities.
    pub fn providers(&self) -> ProviderCatalog {
        self.inner.catalog.clone()
    }

    /// [`Service::providers`] as the JSON body, encoded once when the service was built.
    pub fn providers_json(&self) -> Arc<str> {
        self.inner.catalog_json.clone()
    }

    /// Whether the database answers (`/readyz`).
    pub async fn ready(&self) -> Result<(), ServiceError> {
        self.inner
            .registry
            .database()
            .ping()
            .await
            .map_err(registry_error)
    }

    /// Appends the provider-call metrics, and the commands running now with the server's
    /// cap on them (`0`: none), in the Prometheus text format.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        self.inner.provider_latency.render(out);
        let cap = self.inner.config.exec_concurrency.total.unwrap_or(0);
        let _ = write!(
            out,
            "# HELP corral_execs_running Commands (exec calls) running now on this replica.\n\
             # TYPE corral_execs_running gauge\ncorral_execs_running {}\n\
             # HELP corral_execs_max Most commands this replica runs at once (0: no cap).\n\
             # TYPE corral_execs_max gauge\ncorral_execs_max {cap}\n",
            self.execs_running(None)
        );
        self.inner.reaper_stats.render(out);
    }

    /// This deployment's id (`dep_…`), shared by every replica over the registry: creates
    /// tag provider resources with it, and the reaper lists by it.
    pub async fn deployment(&self) -> Result<Arc<str>, ServiceError> {
        self.inner
            .deployment
            .get_or_try_init(|| async {
                self.inner
                    .registry
                    .deployment_id()
                    .await
                    .map(Arc::from)
                    .map_err(registry_error)
            })
            .await
            .cloned()
    }

    fn provider(&self, p: Provider) -> Result<&Arc<dyn SandboxProvider>, ServiceError> {
        self.inner
            .providers
            .get(&p)
            .ok_or_else(|| ServiceError::ProviderUnavailable {
                message: format!("provider `{p}` is not configured on this server"),
                retry_after: None,
            })
    }

    /// Marks `op`'s provider create as running here until the guard drops.
    pub(crate) fn enter_flight(&self, op: OperationId) -> InFlight {
        let set = self.inner.in_flight.clone();
        set.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(op);
        InFlight { set, op }
    }

    /// Whether `op`'s provider create is still running in this process.
    pub(crate) fn in_flight(&self, op: OperationId) -> bool {
        self.inner
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&op)
    }
}
