//! A world per test (temporary SQLite registry, the idempotency store, the service) and a
//! provider double that counts every call and can hold, fail or hide creates.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use corral_domain::{OperationId, Provider, ProviderCapabilities};
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::{
    CallContext, CreateSpec, ExecOutput, ExecSpec, ExposeSecret as _, ObservedSandbox,
    ProviderError, Result, SandboxProvider,
};
use corral_provider_testkit::host_shell::HostShellProvider;
use corral_registry::{Clock, Database, DatabaseConfig, ManualClock, MasterKey, Registry};
use corral_service::{Caller, Service, ServiceConfig};

type MakeError = Box<dyn Fn() -> ProviderError + Send + Sync>;

/// A provider double posing as `provider` over the host-shell double: counts calls, can hold
/// creates at a gate, fail calls once each, panic in create, and hide sandboxes from
/// `find_by_operation_id` (a provider whose listing lags).
pub(crate) struct Counting {
    provider: Provider,
    caps: ProviderCapabilities,
    inner: HostShellProvider,
    faults: Mutex<HashMap<&'static str, VecDeque<MakeError>>>,
    calls: Mutex<Vec<&'static str>>,
    /// Creates wait here for a permit (when set) before doing anything.
    pub(crate) gate: Option<Arc<tokio::sync::Semaphore>>,
    /// The next create panics (after waiting at the gate).
    pub(crate) panic_next_create: Mutex<bool>,
    /// `find_by_operation_id` finds nothing while set.
    pub(crate) listing_lags: Mutex<bool>,
    /// `find_by_operation_id` never answers while set.
    pub(crate) listing_hangs: Mutex<bool>,
    /// The credentials seen, exposed, in call order.
    pub(crate) credentials: Mutex<Vec<Option<String>>>,
}

impl Counting {
    pub(crate) fn new(provider: Provider, gated: bool) -> Self {
        let inner = HostShellProvider::new();
        let mut caps = inner.capabilities().clone();
        caps.provider = provider;
        Self {
            provider,
            caps,
            inner,
            faults: Mutex::new(HashMap::new()),
            calls: Mutex::new(Vec::new()),
            gate: gated.then(|| Arc::new(tokio::sync::Semaphore::new(0))),
            panic_next_create: Mutex::new(false),
            listing_lags: Mutex::new(false),
            listing_hangs: Mutex::new(false),
            credentials: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn fail_next(
        &self,
        call: &'static str,
        make: impl Fn() -> ProviderError + Send + Sync + 'static,
    ) {
        self.faults
            .lock()
            .unwrap()
            .entry(call)
            .or_default()
            .push_back(Box::new(make));
    }

    /// How many times `call` was made.
    pub(crate) fn count(&self, call: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| **c == call)
            .count()
    }

    /// Every call so far.
    pub(crate) fn total(&self) -> usize {
        self.calls.lock().unwrap().len()
    }

    pub(crate) fn release_creates(&self, n: usize) {
        self.gate.as_ref().unwrap().add_permits(n);
    }

    fn enter(&self, call: &'static str, ctx: &CallContext) -> Result<()> {
        self.calls.lock().unwrap().push(call);
        self.credentials
            .lock()
            .unwrap()
            .push(ctx.credential().map(|c| c.expose_secret().to_owned()));
        match self
            .faults
            .lock()
            .unwrap()
            .get_mut(call)
            .and_then(VecDeque::pop_front)
        {
            Some(make) => Err(make()),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl SandboxProvider for Counting {
    fn provider(&self) -> Provider {
        self.provider
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        if let Some(gate) = &self.gate {
            // Counted once it arrives, so a test can wait for "the provider saw it".
            self.calls.lock().unwrap().push("create_arrived");
            gate.acquire().await.unwrap().forget();
        }
        self.enter("create", ctx)?;
        let panics = std::mem::take(&mut *self.panic_next_create.lock().unwrap());
        assert!(!panics, "scripted panic in create");
        self.inner.create(ctx, spec).await
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.enter("get", ctx)?;
        self.inner.get(ctx, native_id).await
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        self.enter("delete", ctx)?;
        self.inner.delete(ctx, native_id).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        self.enter("exec", ctx)?;
        self.inner.exec(ctx, native_id, spec).await
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max: usize,
    ) -> Result<Vec<u8>> {
        self.enter("read_file", ctx)?;
        self.inner.read_file(ctx, native_id, path, max).await
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        self.enter("write_file", ctx)?;
        self.inner.write_file(ctx, native_id, path, content).await
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        op: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        self.enter("find_by_operation_id", ctx)?;
        let hangs = *self.listing_hangs.lock().unwrap();
        if hangs {
            std::future::pending::<()>().await;
        }
        if *self.listing_lags.lock().unwrap() {
            return Ok(Vec::new());
        }
        self.inner.find_by_operation_id(ctx, op).await
    }
}

/// Everything one test needs.
pub(crate) struct World {
    _dir: tempfile::TempDir,
    pub(crate) registry: Registry,
    pub(crate) service: Service,
    pub(crate) double: Arc<Counting>,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) key: String,
    pub(crate) key_id: String,
    /// The store's own pool, with `store_pool_of_one`.
    pub(crate) store_db: Option<Database>,
}

/// How to build a world.
pub(crate) struct Setup {
    pub(crate) provider: Provider,
    pub(crate) gated: bool,
    pub(crate) config: ServiceConfig,
    pub(crate) lease: Duration,
    /// Database time stands still unless the test moves it.
    pub(crate) manual_clock: bool,
    /// The idempotency store gets a pool of its own with one connection (a test can hold it).
    pub(crate) store_pool_of_one: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            provider: Provider::Local,
            gated: false,
            config: ServiceConfig::default(),
            lease: IdempotencyConfig::default().lease,
            manual_clock: false,
            store_pool_of_one: false,
        }
    }
}

impl World {
    pub(crate) async fn new() -> Self {
        Self::with(Setup::default()).await
    }

    pub(crate) async fn with(setup: Setup) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("corral.db").display());
        let store_db = if setup.store_pool_of_one {
            let mut tight = DatabaseConfig::new(url.clone());
            tight.max_connections = 1;
            tight.wait_timeout = Duration::from_millis(200);
            Some(Database::connect(tight).await.unwrap())
        } else {
            None
        };
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        let db = if setup.manual_clock {
            let c: Arc<dyn Clock> = clock.clone();
            Database::connect_with_clock(DatabaseConfig::new(url), c)
                .await
                .unwrap()
        } else {
            Database::connect(DatabaseConfig::new(url)).await.unwrap()
        };
        let registry = Registry::new(
            db.clone(),
            MasterKey::load_or_create(&dir.path().join("master.key")).unwrap(),
        );
        let store = IdempotencyStore::new(
            store_db.clone().unwrap_or(db),
            IdempotencyConfig {
                lease: setup.lease,
                ..IdempotencyConfig::default()
            },
        );
        let double = Arc::new(Counting::new(setup.provider, setup.gated));
        let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
        providers.insert(setup.provider, double.clone());
        let service = Service::new(providers, registry.clone(), store, setup.config);
        let project = registry.create_project("default").await.unwrap();
        let issued = registry.issue_api_key(project.id).await.unwrap();
        World {
            _dir: dir,
            registry,
            service,
            double,
            clock,
            key: issued.key.expose_secret().to_owned(),
            key_id: issued.info.key_id.clone(),
            store_db,
        }
    }

    /// Where the database files live.
    pub(crate) fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    pub(crate) async fn caller(&self) -> Caller {
        self.service
            .authenticate(Some(&format!("Bearer {}", self.key)))
            .await
            .unwrap()
    }

    /// Waits (real time) until the double has seen `n` calls named `call`.
    pub(crate) async fn until_calls(&self, call: &str, n: usize) {
        for _ in 0..500 {
            if self.double.count(call) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the provider never saw {n} `{call}` calls");
    }
}
