#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Idempotency store behaviour, each scenario written once and run on SQLite and PostgreSQL.

mod claims;
mod keys;
mod lifecycle;
mod props;

use std::sync::Arc;

use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_registry::testing::TestDb;
use corral_registry::{ManualClock, MasterKey, ProjectId, Registry};

/// Defines `mod <scenario> { sqlite, postgres }` tests that run `module::scenario(&TestDb)`.
macro_rules! on_both_backends {
    ($module:ident: $($scenario:ident),+ $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let db = $crate::TestDb::sqlite();
                    $crate::$module::$scenario(&db).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let name = concat!(stringify!($module), "::", stringify!($scenario));
                    let Some(db) = $crate::TestDb::postgres(name).await else {
                        return;
                    };
                    $crate::$module::$scenario(&db).await;
                }
            }
        )+
    };
}
pub(crate) use on_both_backends;

/// A store on `db` with a manual clock, and two projects.
pub(crate) struct World {
    pub(crate) store: IdempotencyStore,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) registry: Registry,
    pub(crate) p: ProjectId,
    pub(crate) q: ProjectId,
}

pub(crate) async fn world(db: &TestDb) -> World {
    world_with(db, db.config()).await
}

pub(crate) async fn world_with(db: &TestDb, config: corral_registry::DatabaseConfig) -> World {
    let start = chrono::DateTime::from_timestamp_micros(1_760_000_000_000_000).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let database = db.connect_with(config, clock.clone()).await;
    let registry = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let p = registry.create_project("p").await.unwrap().id;
    let q = registry.create_project("q").await.unwrap().id;
    World {
        store: IdempotencyStore::new(database, IdempotencyConfig::default()),
        clock,
        registry,
        p,
        q,
    }
}

impl World {
    /// The database both stores share.
    pub(crate) fn store_db(&self) -> &corral_registry::Database {
        self.registry.database()
    }
}
