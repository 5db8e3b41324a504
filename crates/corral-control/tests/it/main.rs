//! The control plane's tenancy use cases, each scenario on SQLite and on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod abuse;
mod accounts;
mod api_audit;
mod deletion;
mod gates;
mod identity;
mod projects;
mod reaper;
mod scoping;
mod support;

/// Runs `async fn $name(db: TestDb)` once on SQLite and once on PostgreSQL.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name(corral_registry::testing::TestDb::sqlite()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    if let Some(db) =
                        corral_registry::testing::TestDb::postgres(stringify!($name)).await
                    {
                        super::$name(db).await;
                    }
                }
            }
        )*
    };
}
