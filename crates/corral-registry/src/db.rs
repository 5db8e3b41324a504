//! The connection pool over SQLite or PostgreSQL and its configuration (the migrations and
//! their runner, `Database::migrate`, are in `migrations.rs`; failures are classified in
//! `error.rs`).

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use diesel::SqliteConnection;
use diesel_async::pooled_connection::deadpool::{Object, Pool, PoolError};
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};

use crate::clock::{Clock, SystemClock};
use crate::error::{RegistryError, Result, db_error, is_transient_message};
use corral_domain::Timestamp;

/// The SQLite connection type used by the pool.
pub type SqliteConn = SyncConnectionWrapper<SqliteConnection>;
/// The PostgreSQL connection type used by the pool.
pub type PgConn = AsyncPgConnection;

/// Which database engine a [`Database`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite in a local file (the embedded default; one server process).
    Sqlite,
    /// PostgreSQL (several stateless replicas may share it).
    Postgres,
}

/// How to reach the database and how long to wait for it.
#[derive(Clone)]
pub struct DatabaseConfig {
    /// `sqlite://<path>`, a plain file path (SQLite), or `postgres://…` / `postgresql://…`.
    pub url: String,
    /// Largest number of pooled connections.
    pub max_connections: usize,
    /// Longest wait for a free pooled connection before [`RegistryError::Unavailable`].
    pub wait_timeout: Duration,
    /// Longest wait to open a new connection.
    pub create_timeout: Duration,
    /// Longest wait to check a returned connection before reuse.
    pub recycle_timeout: Duration,
    /// Longest time one registry operation may take once it holds a connection.
    pub query_timeout: Duration,
    /// SQLite only: how long a writer waits for the write lock (`PRAGMA busy_timeout`).
    pub sqlite_busy_timeout: Duration,
}

impl DatabaseConfig {
    /// Sensible defaults for `url`: 8 connections (SQLite: 4), 5 s wait, 5 s create, 5 s
    /// recycle, 10 s per operation, 5 s SQLite busy timeout.
    pub fn new(url: impl Into<String>) -> Self {
        let url = url.into();
        let max_connections = if is_postgres_url(&url) { 8 } else { 4 };
        Self {
            url,
            max_connections,
            wait_timeout: Duration::from_secs(5),
            create_timeout: Duration::from_secs(5),
            recycle_timeout: Duration::from_secs(5),
            query_timeout: Duration::from_secs(10),
            sqlite_busy_timeout: Duration::from_secs(5),
        }
    }

    /// The backend the URL selects, or [`RegistryError::UnsupportedUrl`].
    pub fn backend(&self) -> Result<Backend> {
        if is_postgres_url(&self.url) {
            Ok(Backend::Postgres)
        } else if sqlite_path(&self.url).is_some() {
            Ok(Backend::Sqlite)
        } else {
            Err(RegistryError::UnsupportedUrl)
        }
    }
}

impl fmt::Debug for DatabaseConfig {
    // The URL may carry a PostgreSQL password: show only the scheme.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("url", &redacted_url(&self.url))
            .field("max_connections", &self.max_connections)
            .field("wait_timeout", &self.wait_timeout)
            .field("create_timeout", &self.create_timeout)
            .field("recycle_timeout", &self.recycle_timeout)
            .field("query_timeout", &self.query_timeout)
            .field("sqlite_busy_timeout", &self.sqlite_busy_timeout)
            .finish()
    }
}

fn redacted_url(url: &str) -> String {
    // Only a SQLite path is shown whole; any other URL (PostgreSQL, or an unsupported one such
    // as `mysql://user:password@host`) may carry a password, so only its scheme is.
    if url.starts_with("sqlite:") || (!url.contains("://") && !url.contains('@')) {
        return url.to_owned();
    }
    match url.split_once("://") {
        Some((scheme, _)) => format!("{scheme}://…"),
        None => "…".to_owned(),
    }
}

fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The SQLite file a URL names, if it names one. In-memory databases are refused: every pooled
/// connection would see a different, empty database.
fn sqlite_path(url: &str) -> Option<PathBuf> {
    if url.contains(":memory:") || url.contains("mode=memory") {
        return None;
    }
    if let Some(rest) = url.strip_prefix("sqlite://") {
        return (!rest.is_empty()).then(|| PathBuf::from(rest));
    }
    if let Some(rest) = url.strip_prefix("sqlite:") {
        return (!rest.is_empty()).then(|| PathBuf::from(rest));
    }
    (!url.is_empty() && !url.contains("://")).then(|| PathBuf::from(url))
}

/// One pooled connection on either backend. Use [`with_conn!`](crate::with_conn) to run the
/// same diesel code on whichever it is.
// Short-lived (one per checked-out connection, on the stack of one call): boxing the larger
// variant would cost an allocation per query for nothing.
#[allow(clippy::large_enum_variant)]
pub enum PooledConnection {
    /// A SQLite connection.
    Sqlite(Object<SqliteConn>),
    /// A PostgreSQL connection.
    Postgres(Object<PgConn>),
}

/// Runs `$body` with `$c` bound to `&mut` the concrete connection (SQLite or PostgreSQL) of
/// `$conn` (a `&mut PooledConnection`). The body is compiled once per backend, which is how one
/// piece of diesel code serves both.
#[macro_export]
macro_rules! with_conn {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::PooledConnection::Sqlite($c) => {
                let $c: &mut $crate::SqliteConn = &mut **$c;
                $body
            }
            $crate::PooledConnection::Postgres($c) => {
                let $c: &mut $crate::PgConn = &mut **$c;
                $body
            }
        }
    };
}

/// Runs `$body` (which yields `Result<T>`) on a pooled connection of either backend, under the
/// database's operation timeout (`$self.db` is the [`Database`]).
macro_rules! run {
    ($self:ident, |$c:ident| $body:expr) => {{
        let db = $self.db.clone();
        $self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                $crate::with_conn!(&mut conn, |$c| $body)
            })
            .await
    }};
}

/// Runs `$body` in a write transaction: `BEGIN IMMEDIATE` on SQLite (the write lock is taken
/// up front, so the busy timeout applies and no reader-to-writer upgrade can fail with
/// `SQLITE_BUSY`), an ordinary transaction on PostgreSQL. Detached like `run!`.
macro_rules! write_tx {
    ($self:ident, |$c:ident| $body:expr) => {{
        let db = $self.db.clone();
        $self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                match &mut conn {
                    $crate::PooledConnection::Sqlite(c0) => {
                        c0.immediate_transaction(async |$c| $body).await
                    }
                    $crate::PooledConnection::Postgres(c0) => {
                        use diesel_async::AsyncConnection as _;
                        c0.transaction(async |$c| $body).await
                    }
                }
            })
            .await
    }};
}

pub(crate) use {run, write_tx};

enum Pools {
    Sqlite(Pool<SqliteConn>),
    Postgres(Pool<PgConn>),
}

struct Inner {
    pools: Pools,
    config: DatabaseConfig,
    clock: Arc<dyn Clock>,
}

/// A pool over the registry database (SQLite or PostgreSQL, chosen by URL). Cheap to clone.
#[derive(Clone)]
pub struct Database {
    inner: Arc<Inner>,
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Database")
            .field("backend", &self.backend())
            .field("config", &self.inner.config)
            .finish()
    }
}

impl Database {
    /// Opens the pool and applies pending migrations (see [`Database::migrate`]).
    pub async fn connect(config: DatabaseConfig) -> Result<Self> {
        Self::connect_with_clock(config, Arc::new(SystemClock)).await
    }

    /// [`Database::connect`] with an injected clock (for tests of time-based rules).
    pub async fn connect_with_clock(config: DatabaseConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        let db = Self::open(config, clock)?;
        db.migrate().await?;
        Ok(db)
    }

    /// Builds the pool without touching the database (connections open lazily) and without
    /// migrating.
    pub fn open(config: DatabaseConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        let pools = match config.backend()? {
            Backend::Sqlite => Pools::Sqlite(sqlite_pool(&config)?),
            Backend::Postgres => Pools::Postgres(pg_pool(&config)?),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                pools,
                config,
                clock,
            }),
        })
    }

    /// Which engine this database runs on.
    pub fn backend(&self) -> Backend {
        match self.inner.pools {
            Pools::Sqlite(_) => Backend::Sqlite,
            Pools::Postgres(_) => Backend::Postgres,
        }
    }

    /// The configuration the pool was built with.
    pub fn config(&self) -> &DatabaseConfig {
        &self.inner.config
    }

    /// The clock used for every stored timestamp.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The current time according to [`Database::clock`].
    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// Takes a connection from the pool, waiting at most `wait_timeout` (plus `create_timeout`
    /// when a new one must be opened). Failures are [`RegistryError::Unavailable`].
    pub async fn connection(&self) -> Result<PooledConnection> {
        match &self.inner.pools {
            Pools::Sqlite(pool) => pool
                .get()
                .await
                .map(PooledConnection::Sqlite)
                .map_err(pool_error),
            Pools::Postgres(pool) => pool
                .get()
                .await
                .map(PooledConnection::Postgres)
                .map_err(pool_error),
        }
    }

    /// Runs `fut` under the configured `query_timeout`; a timeout is
    /// [`RegistryError::Unavailable`]. Unlike [`Database::detached`] the future is dropped on
    /// timeout, which on SQLite blocks until a running query ends: prefer `detached`.
    pub async fn timed<T>(&self, fut: impl Future<Output = Result<T>>) -> Result<T> {
        let limit = self.inner.config.query_timeout;
        match tokio::time::timeout(limit, fut).await {
            Ok(result) => result,
            Err(_) => Err(RegistryError::Unavailable {
                message: format!("database operation took longer than {limit:?}"),
            }),
        }
    }

    /// Runs `fut` as a task of its own and waits for it at most `query_timeout`; a timeout is
    /// [`RegistryError::Unavailable`]. Every registry and idempotency operation goes through
    /// here, for two reasons: a stalled database never hangs a request, and the operation is
    /// never dropped half-way (neither by the timeout nor by a caller that gives up, e.g. a
    /// disconnected HTTP client). The latter matters for SQLite, whose connection wrapper, when
    /// a query future is dropped mid-flight, blocks until the query finishes (and panics on a
    /// current-thread runtime); a detached task simply runs to completion and returns its
    /// connection to the pool.
    ///
    /// On PostgreSQL the task itself is bounded by `query_timeout` too: a connection whose
    /// server vanished mid-query (no reset, say a failover that moved the address) never
    /// answers, and an unbounded task would hold its pool slot for good — a pool of `n`
    /// wedged by `n` such queries until a restart. Dropping the operation there is safe: the
    /// late answer is discarded by the driver, and a transaction cut short leaves the
    /// connection marked broken, so the pool discards it rather than reuse it.
    pub async fn detached<T, F>(&self, fut: F) -> Result<T>
    where
        F: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let limit = self.inner.config.query_timeout;
        let task = match self.backend() {
            Backend::Sqlite => tokio::spawn(fut),
            Backend::Postgres => tokio::spawn(async move {
                tokio::time::timeout(limit, fut).await.unwrap_or_else(|_| {
                    Err(RegistryError::Unavailable {
                        message: format!("database operation took longer than {limit:?}"),
                    })
                })
            }),
        };
        match tokio::time::timeout(limit, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(RegistryError::Internal {
                message: format!("database task failed: {join}"),
            }),
            Err(_) => Err(RegistryError::Unavailable {
                message: format!("database operation took longer than {limit:?}"),
            }),
        }
    }

    /// Readiness: takes a connection and runs `SELECT 1`.
    pub async fn ping(&self) -> Result<()> {
        let db = self.clone();
        self.detached(async move {
            let mut conn = db.connection().await?;
            with_conn!(&mut conn, |c| c.batch_execute("SELECT 1").await).map_err(db_error)
        })
        .await
    }
}

fn sqlite_pool(config: &DatabaseConfig) -> Result<Pool<SqliteConn>> {
    let Some(path) = sqlite_path(&config.url) else {
        return Err(RegistryError::UnsupportedUrl);
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| RegistryError::Unavailable {
            message: format!("cannot create the directory of the SQLite file: {e}"),
        })?;
    }
    restrict_sqlite_files(&path)?;
    let busy = config.sqlite_busy_timeout;
    let busy_ms = busy.as_millis();
    let mut manager_config = ManagerConfig::<SqliteConn>::default();
    // No `SELECT 1` on every checkout (the default): on SQLite that ping is a round trip to the
    // blocking pool before every operation, and a connection to a local file cannot be lost
    // the way a network connection can. A broken transaction state is still checked.
    manager_config.recycling_method = RecyclingMethod::Fast;
    manager_config.custom_setup = Box::new(move |url| {
        let url = url.to_owned();
        Box::pin(async move {
            let mut conn = SqliteConn::establish(&url).await?;
            conn.batch_execute(&format!(
                "PRAGMA busy_timeout = {busy_ms}; PRAGMA synchronous = NORMAL; \
                 PRAGMA foreign_keys = ON;"
            ))
            .await
            .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
            // Switching a fresh file to WAL needs an exclusive lock and SQLite does not run the
            // busy handler for it, so connections opened at the same moment retry here (within
            // the busy timeout). WAL is persistent: later opens find it already set.
            let started = std::time::Instant::now();
            loop {
                match conn.batch_execute("PRAGMA journal_mode = WAL;").await {
                    Ok(()) => break,
                    Err(e) if is_transient_message(&e.to_string()) && started.elapsed() < busy => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => return Err(diesel::ConnectionError::CouldntSetupConfiguration(e)),
                }
            }
            Ok(conn)
        })
    });
    let manager = AsyncDieselConnectionManager::<SqliteConn>::new_with_config(
        path.to_string_lossy().into_owned(),
        manager_config,
    );
    build_pool!(manager, config)
}

/// Makes the SQLite file (created empty here if missing) and any `-wal`/`-shm` beside it
/// readable by the server's user only: they hold API-key hashes and encrypted credentials.
/// SQLite gives the `-wal` and `-shm` files it creates later the database file's mode.
fn restrict_sqlite_files(path: &std::path::Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(RegistryError::Unavailable {
                    message: format!("cannot create the SQLite file: {e}"),
                });
            }
        }
        for suffix in ["", "-wal", "-shm"] {
            let mut file = path.as_os_str().to_owned();
            file.push(suffix);
            let file = PathBuf::from(file);
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            if meta.permissions().mode() & 0o077 != 0 {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).map_err(
                    |e| RegistryError::Unavailable {
                        message: format!("cannot restrict {} to mode 0600: {e}", file.display()),
                    },
                )?;
                tracing::warn!(file = %file.display(), "restricted a database file to mode 0600");
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

fn pg_pool(config: &DatabaseConfig) -> Result<Pool<PgConn>> {
    let manager = AsyncDieselConnectionManager::<PgConn>::new(config.url.clone());
    build_pool!(manager, config)
}

/// Builds a pool with every timeout set: deadpool has none by default, and without them an
/// exhausted pool or an unreachable database would hang requests.
macro_rules! build_pool {
    ($manager:expr, $config:expr) => {
        Pool::builder($manager)
            .max_size($config.max_connections.max(1))
            .runtime(deadpool::Runtime::Tokio1)
            .wait_timeout(Some($config.wait_timeout))
            .create_timeout(Some($config.create_timeout))
            .recycle_timeout(Some($config.recycle_timeout))
            .build()
            .map_err(|e| RegistryError::Internal {
                message: format!("cannot build the connection pool: {e}"),
            })
    };
}
use build_pool;

/// Classifies a pool failure: every one of them means "try again later".
pub(crate) fn pool_error(e: PoolError) -> RegistryError {
    let message = match e {
        PoolError::Timeout(kind) => {
            format!("timed out waiting for a database connection ({kind:?})")
        }
        PoolError::Backend(e) => format!("cannot connect to the database: {e}"),
        PoolError::Closed => "the connection pool is closed".to_owned(),
        PoolError::NoRuntimeSpecified => "the connection pool has no runtime".to_owned(),
        PoolError::PostCreateHook(e) => format!("connection setup failed: {e}"),
    };
    RegistryError::Unavailable { message }
}

/// Converts a timestamp to the stored form: microseconds since the Unix epoch.
pub(crate) fn to_micros(t: Timestamp) -> i64 {
    t.timestamp_micros()
}

/// Converts a stored timestamp back.
pub(crate) fn from_micros(us: i64) -> Result<Timestamp> {
    chrono::DateTime::from_timestamp_micros(us).ok_or_else(|| RegistryError::Internal {
        message: format!("stored timestamp {us} is out of range"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[tokio::test]
    async fn the_sqlite_files_are_private_even_when_they_existed_with_a_wider_mode() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("corral.db");
        let mode = |p: &std::path::Path| {
            std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777
        };
        let url = format!("sqlite://{}", path.display());
        let db = Database::connect(DatabaseConfig::new(url.clone()))
            .await
            .expect("connect");
        db.ping().await.expect("ping");
        for suffix in ["", "-wal", "-shm"] {
            let file = PathBuf::from(format!("{}{suffix}", path.display()));
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
        drop(db);
        // An older install left the file world-readable: the next start narrows it.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let db = Database::connect(DatabaseConfig::new(url))
            .await
            .expect("connect");
        db.ping().await.expect("ping");
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn debug_never_shows_a_password_of_any_url() {
        for url in [
            "postgres://corral:hunter2@db/corral",
            "postgresql://db/corral?password=hunter2",
            "mysql://corral:hunter2@db/corral",
            "corral:hunter2@db",
        ] {
            let shown = format!("{:?}", DatabaseConfig::new(url));
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        let shown = format!(
            "{:?}",
            DatabaseConfig::new("sqlite:///var/lib/corral/corral.db")
        );
        assert!(shown.contains("/var/lib/corral/corral.db"), "{shown}");
    }
}
