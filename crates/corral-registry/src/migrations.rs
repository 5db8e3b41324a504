//! Embedded migrations, one folder per backend, and the runner.
//!
//! Each migration is a plain SQL file compiled into the binary; applied versions are recorded
//! in `corral_migrations`. Both folders hold the same versions with the same meaning.

use diesel::sql_types::Text;
use diesel::{QueryableByName, sql_query};
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};

use crate::db::{Database, PgConn, PooledConnection, SqliteConn};
use crate::error::{RegistryError, Result, db_error};

/// One embedded migration.
struct Migration {
    version: &'static str,
    up: &'static str,
}

const SQLITE: &[Migration] = &[
    Migration {
        version: "0001_init",
        up: include_str!("../migrations/sqlite/0001_init/up.sql"),
    },
    Migration {
        version: "0002_reconcile_attempted_at",
        up: include_str!("../migrations/sqlite/0002_reconcile_attempted_at/up.sql"),
    },
    Migration {
        version: "0003_control_plane",
        up: include_str!("../migrations/sqlite/0003_control_plane/up.sql"),
    },
    Migration {
        version: "0004_api_key_last_used",
        up: include_str!("../migrations/sqlite/0004_api_key_last_used/up.sql"),
    },
    Migration {
        version: "0006_commands",
        up: include_str!("../migrations/sqlite/0006_commands/up.sql"),
    },
    Migration {
        version: "0007_events",
        up: include_str!("../migrations/sqlite/0007_events/up.sql"),
    },
    Migration {
        version: "0008_webhooks",
        up: include_str!("../migrations/sqlite/0008_webhooks/up.sql"),
    },
    Migration {
        version: "0009_reaper",
        up: include_str!("../migrations/sqlite/0009_reaper/up.sql"),
    },
    Migration {
        version: "0010_e2b",
        up: include_str!("../migrations/sqlite/0010_e2b/up.sql"),
    },
    Migration {
        version: "0011_key_names",
        up: include_str!("../migrations/sqlite/0011_key_names/up.sql"),
    },
    Migration {
        version: "0012_e2b_templates",
        up: include_str!("../migrations/sqlite/0012_e2b_templates/up.sql"),
    },
    Migration {
        version: "0013_create_failures",
        up: include_str!("../migrations/sqlite/0013_create_failures/up.sql"),
    },
    Migration {
        version: "0014_lifecycle",
        up: include_str!("../migrations/sqlite/0014_lifecycle/up.sql"),
    },
    Migration {
        version: "0015_webhook_circuits",
        up: include_str!("../migrations/sqlite/0015_webhook_circuits/up.sql"),
    },
];

const POSTGRES: &[Migration] = &[
    Migration {
        version: "0001_init",
        up: include_str!("../migrations/postgres/0001_init/up.sql"),
    },
    Migration {
        version: "0002_reconcile_attempted_at",
        up: include_str!("../migrations/postgres/0002_reconcile_attempted_at/up.sql"),
    },
    Migration {
        version: "0003_control_plane",
        up: include_str!("../migrations/postgres/0003_control_plane/up.sql"),
    },
    Migration {
        version: "0004_api_key_last_used",
        up: include_str!("../migrations/postgres/0004_api_key_last_used/up.sql"),
    },
    Migration {
        version: "0006_commands",
        up: include_str!("../migrations/postgres/0006_commands/up.sql"),
    },
    Migration {
        version: "0007_events",
        up: include_str!("../migrations/postgres/0007_events/up.sql"),
    },
    Migration {
        version: "0008_webhooks",
        up: include_str!("../migrations/postgres/0008_webhooks/up.sql"),
    },
    Migration {
        version: "0009_reaper",
        up: include_str!("../migrations/postgres/0009_reaper/up.sql"),
    },
    Migration {
        version: "0010_e2b",
        up: include_str!("../migrations/postgres/0010_e2b/up.sql"),
    },
    Migration {
        version: "0011_key_names",
        up: include_str!("../migrations/postgres/0011_key_names/up.sql"),
    },
    Migration {
        version: "0012_e2b_templates",
        up: include_str!("../migrations/postgres/0012_e2b_templates/up.sql"),
    },
    Migration {
        version: "0013_create_failures",
        up: include_str!("../migrations/postgres/0013_create_failures/up.sql"),
    },
    Migration {
        version: "0014_lifecycle",
        up: include_str!("../migrations/postgres/0014_lifecycle/up.sql"),
    },
    Migration {
        version: "0015_webhook_circuits",
        up: include_str!("../migrations/postgres/0015_webhook_circuits/up.sql"),
    },
];

/// Every embedded version, in order (the same on both backends).
pub fn versions() -> Vec<&'static str> {
    SQLITE.iter().map(|m| m.version).collect()
}

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS corral_migrations \
     (version TEXT PRIMARY KEY NOT NULL, applied_at BIGINT NOT NULL)";

/// Advisory-lock class for migrations; the second key is a hash of the current schema, so
/// replicas sharing one schema serialize while tests in separate schemas do not.
const PG_LOCK: &str = "SELECT pg_advisory_lock(7252731, hashtext(current_schema()))";
const PG_UNLOCK: &str = "SELECT pg_advisory_unlock(7252731, hashtext(current_schema()))";

#[derive(QueryableByName)]
struct Applied {
    #[diesel(sql_type = Text)]
    version: String,
}

fn failed(version: &str, e: diesel::result::Error) -> RegistryError {
    match db_error(e) {
        RegistryError::Unavailable { message } => RegistryError::Unavailable { message },
        other => RegistryError::Migration {
            version: version.to_owned(),
            message: other.to_string(),
        },
    }
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

// The runner is a method of `Database` defined here, beside the migrations it runs, so the
// pool (`db`) does not import this module.
impl Database {
    /// Applies the embedded migrations that are not applied yet (one folder per backend, in
    /// version order, each in its own transaction). Safe when several replicas start at once:
    /// on PostgreSQL the run holds an advisory lock scoped to the current schema; on SQLite
    /// each migration runs in a `BEGIN IMMEDIATE` transaction and re-checks what is applied.
    pub async fn migrate(&self) -> Result<()> {
        let db = self.clone();
        // Detached (without the per-operation timeout: a migration may take long) so that a
        // cancelled start-up never leaves a migration half-applied on this connection.
        let task = tokio::spawn(async move {
            let mut conn = db.connection().await?;
            match &mut conn {
                PooledConnection::Sqlite(c) => run_sqlite(c).await,
                PooledConnection::Postgres(c) => run_postgres(c).await,
            }
        });
        task.await.map_err(|join| RegistryError::Internal {
            message: format!("migration task failed: {join}"),
        })?
    }
}

pub(crate) async fn run_sqlite(conn: &mut SqliteConn) -> Result<()> {
    conn.batch_execute(CREATE_TABLE)
        .await
        .map_err(|e| failed("corral_migrations", e))?;
    for m in SQLITE {
        // BEGIN IMMEDIATE takes the write lock first, so two processes starting at once run
        // each migration exactly once: the second sees the version recorded and skips it.
        conn.immediate_transaction(async |c| {
            let applied: Vec<Applied> = sql_query("SELECT version FROM corral_migrations")
                .load(c)
                .await?;
            if applied.iter().any(|a| a.version == m.version) {
                return Ok(());
            }
            c.batch_execute(m.up).await?;
            sql_query("INSERT INTO corral_migrations (version, applied_at) VALUES (?, ?)")
                .bind::<Text, _>(m.version)
                .bind::<diesel::sql_types::BigInt, _>(now_micros())
                .execute(c)
                .await?;
            Ok::<_, diesel::result::Error>(())
        })
        .await
        .map_err(|e| failed(m.version, e))?;
    }
    Ok(())
}

pub(crate) async fn run_postgres(conn: &mut PgConn) -> Result<()> {
    conn.batch_execute(PG_LOCK)
        .await
        .map_err(|e| failed("advisory lock", e))?;
    let result = apply_postgres(conn).await;
    // Session-level lock: release it even when a migration failed; the connection may be
    // broken, in which case closing it releases the lock anyway.
    let unlock = conn.batch_execute(PG_UNLOCK).await;
    result?;
    unlock.map_err(|e| failed("advisory unlock", e))
}

async fn apply_postgres(conn: &mut PgConn) -> Result<()> {
    conn.batch_execute(CREATE_TABLE)
        .await
        .map_err(|e| failed("corral_migrations", e))?;
    let applied: Vec<Applied> = sql_query("SELECT version FROM corral_migrations")
        .load(conn)
        .await
        .map_err(|e| failed("corral_migrations", e))?;
    for m in POSTGRES {
        if applied.iter().any(|a| a.version == m.version) {
            continue;
        }
        conn.transaction(async |c| {
            c.batch_execute(m.up).await?;
            sql_query("INSERT INTO corral_migrations (version, applied_at) VALUES ($1, $2)")
                .bind::<Text, _>(m.version)
                .bind::<diesel::sql_types::BigInt, _>(now_micros())
                .execute(c)
                .await?;
            Ok::<_, diesel::result::Error>(())
        })
        .await
        .map_err(|e| failed(m.version, e))?;
    }
    Ok(())
}
