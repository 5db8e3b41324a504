//! Test support (feature `testing`): a throwaway database on either backend, and a dump of
//! every stored row for "this secret is stored nowhere" checks.
//!
//! PostgreSQL tests read the server URL from `CORRAL_TEST_POSTGRES_URL` and give every test its
//! own schema (dropped afterwards, even when the test panics). When the variable is unset they
//! print that they were skipped — unless `CORRAL_REQUIRE_POSTGRES=1`, where they fail.
#![allow(clippy::expect_used, clippy::panic)] // Test support reports failures by panicking.

use std::sync::Arc;
use std::time::Duration;

use diesel::QueryableByName;
use diesel::sql_types::Text;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

use crate::{Backend, Clock, Database, DatabaseConfig, PooledConnection, SystemClock, with_conn};

/// Environment variable naming the PostgreSQL server used by tests.
pub const POSTGRES_URL_ENV: &str = "CORRAL_TEST_POSTGRES_URL";
/// Environment variable that turns a skipped PostgreSQL test into a failure (CI sets it).
pub const REQUIRE_POSTGRES_ENV: &str = "CORRAL_REQUIRE_POSTGRES";

enum Storage {
    Sqlite(tempfile::TempDir),
    Postgres { base_url: String, schema: String },
}

/// A throwaway database: a SQLite file in a temporary directory, or a fresh PostgreSQL schema.
pub struct TestDb {
    url: String,
    storage: Storage,
}

impl std::fmt::Debug for TestDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDb")
            .field("backend", &self.backend())
            .finish()
    }
}

impl TestDb {
    /// A SQLite database in a new temporary directory.
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite://{}", dir.path().join("corral.db").display());
        Self {
            url,
            storage: Storage::Sqlite(dir),
        }
    }

    /// A fresh schema on the PostgreSQL server named by `CORRAL_TEST_POSTGRES_URL`, or `None`
    /// (after printing why) when the variable is unset. Panics instead of skipping when
    /// `CORRAL_REQUIRE_POSTGRES=1`.
    pub async fn postgres(test: &str) -> Option<Self> {
        let Ok(base_url) = std::env::var(POSTGRES_URL_ENV) else {
            if std::env::var(REQUIRE_POSTGRES_ENV).as_deref() == Ok("1") {
                panic!("{test}: {POSTGRES_URL_ENV} is unset but {REQUIRE_POSTGRES_ENV}=1");
            }
            eprintln!("SKIPPED {test} on PostgreSQL: {POSTGRES_URL_ENV} is not set");
            return None;
        };
        let schema = format!(
            "t_{}",
            ulid::Ulid::generate().to_string().to_ascii_lowercase()
        );
        let mut admin = AsyncPgConnection::establish(&base_url)
            .await
            .expect("connect to the PostgreSQL test server");
        admin
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .expect("create the test schema");
        let sep = if base_url.contains('?') { '&' } else { '?' };
        let url = format!("{base_url}{sep}options=-csearch_path%3D{schema}");
        Some(Self {
            url,
            storage: Storage::Postgres { base_url, schema },
        })
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self.storage {
            Storage::Sqlite(_) => Backend::Sqlite,
            Storage::Postgres { .. } => Backend::Postgres,
        }
    }

    /// The SQLite file, for SQLite databases.
    pub fn sqlite_path(&self) -> Option<std::path::PathBuf> {
        match &self.storage {
            Storage::Sqlite(dir) => Some(dir.path().join("corral.db")),
            Storage::Postgres { .. } => None,
        }
    }

    /// The connection URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A configuration with short test timeouts (2 s wait and create).
    pub fn config(&self) -> DatabaseConfig {
        let mut config = DatabaseConfig::new(self.url.clone());
        config.wait_timeout = Duration::from_secs(2);
        config.create_timeout = Duration::from_secs(2);
        config
    }

    /// Connects (and migrates) with the system clock.
    pub async fn connect(&self) -> Database {
        self.connect_with(self.config(), Arc::new(SystemClock))
            .await
    }

    /// Connects (and migrates) with a given configuration and clock.
    pub async fn connect_with(&self, config: DatabaseConfig, clock: Arc<dyn Clock>) -> Database {
        Database::connect_with_clock(config, clock)
            .await
            .expect("connect to the test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Storage::Postgres { base_url, schema } = &self.storage else {
            return;
        };
        let (base_url, schema) = (base_url.clone(), schema.clone());
        // Drop may run inside a runtime (or while panicking): clean up on a thread of its own.
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            runtime.block_on(async move {
                if let Ok(mut conn) = AsyncPgConnection::establish(&base_url).await {
                    let _ = conn
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                        .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

#[derive(QueryableByName)]
struct Line {
    #[diesel(sql_type = Text)]
    line: String,
}

/// Every row of every table in the database, one line per row, as text (binary columns as
/// hexadecimal). For asserting that a secret is stored nowhere, search the result for the
/// secret and for its hexadecimal form.
pub async fn dump_all_rows(db: &Database) -> String {
    let mut conn = db.connection().await.expect("connection");
    let tables: Vec<Line> = match &mut conn {
        PooledConnection::Sqlite(c) => diesel::sql_query(
            "SELECT name AS line FROM sqlite_master WHERE type = 'table' ORDER BY name",
        )
        .load(&mut **c)
        .await
        .expect("list tables"),
        PooledConnection::Postgres(c) => diesel::sql_query(
            "SELECT table_name::text AS line FROM information_schema.tables \
             WHERE table_schema = current_schema() ORDER BY table_name",
        )
        .load(&mut **c)
        .await
        .expect("list tables"),
    };
    assert!(tables.len() >= 5, "expected the registry's tables");
    let mut out = String::new();
    for Line { line: table } in tables {
        let query = match &mut conn {
            PooledConnection::Sqlite(c) => {
                #[derive(QueryableByName)]
                struct Column {
                    #[diesel(sql_type = Text)]
                    name: String,
                }
                let columns: Vec<Column> =
                    diesel::sql_query(format!("SELECT name FROM pragma_table_info('{table}')"))
                        .load(&mut **c)
                        .await
                        .expect("list columns");
                let parts: Vec<String> = columns
                    .iter()
                    .map(|col| format!("quote(\"{}\")", col.name))
                    .collect();
                format!(
                    "SELECT {} AS line FROM \"{table}\"",
                    parts.join(" || ',' || ")
                )
            }
            PooledConnection::Postgres(_) => format!("SELECT t::text AS line FROM \"{table}\" t"),
        };
        let rows: Vec<Line> = with_conn!(&mut conn, |c| diesel::sql_query(query.clone())
            .load(c)
            .await
            .expect("dump table"));
        for row in rows {
            out.push_str(&table);
            out.push_str(": ");
            out.push_str(&row.line);
            out.push('\n');
        }
    }
    out
}

/// `bytes` as lowercase hexadecimal (how binary columns appear in [`dump_all_rows`]).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
