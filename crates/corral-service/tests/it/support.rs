//! A world per test (temporary SQLite registry, the idempotency store, the service) over the
//! testkit's counting provider double, which can hold, fail or hide creates.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use corral_domain::Provider;
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::{ExposeSecret as _, SandboxProvider};
pub(crate) use corral_provider_testkit::counting::Counting;
use corral_registry::{Clock, Database, DatabaseConfig, ManualClock, MasterKey, Registry};
use corral_service::{Caller, Service, ServiceConfig};

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
    /// The double advertises stop, snapshots and restore.
    pub(crate) lifecycle: bool,
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
            lifecycle: true,
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
        let double = Counting::new(setup.provider, setup.gated);
        let double = Arc::new(if setup.lifecycle {
            double
        } else {
            double.without_lifecycle()
        });
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

    /// Another replica of the service over the same database and provider (a restarted
    /// process, or a second server).
    pub(crate) async fn second_replica(&self, config: ServiceConfig) -> Service {
        let store = IdempotencyStore::new(
            self.registry.database().clone(),
            IdempotencyConfig::default(),
        );
        let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
        providers.insert(self.double.provider(), self.double.clone());
        Service::new(providers, self.registry.clone(), store, config)
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
