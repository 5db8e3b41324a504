#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Registry behaviour, each scenario written once and run on SQLite and on PostgreSQL.

mod commands;
mod e2b;
mod events;
mod failures;
mod keys;
mod lifecycle;
mod profiles;
mod projects;
mod props;
mod reaper;
mod sandboxes;
mod usage;
mod webhooks;

use corral_registry::testing::TestDb;

/// Defines `mod <scenario> { sqlite, postgres }` tests that run `path::scenario(&TestDb)`.
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

/// A registry with a random master key over `db`.
pub(crate) async fn registry(db: &TestDb) -> corral_registry::Registry {
    corral_registry::Registry::new(
        db.connect().await,
        corral_registry::MasterKey::generate().unwrap(),
    )
}
