use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_registry::testing::TestDb;
use corral_registry::{Database, DatabaseConfig, MasterKey, Registry, RegistryError, SystemClock};

use crate::on_both_backends;

on_both_backends!(failures:
    an_exhausted_pool_is_a_retryable_error_within_the_wait_timeout,
    a_write_blocked_by_a_lock_is_a_retryable_error_within_the_query_timeout,
);

pub(crate) async fn an_exhausted_pool_is_a_retryable_error_within_the_wait_timeout(db: &TestDb) {
    let mut config = db.config();
    config.max_connections = 1;
    config.wait_timeout = Duration::from_millis(300);
    let database = db.connect_with(config, Arc::new(SystemClock)).await;
    let reg = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let held = database.connection().await.unwrap();
    let started = Instant::now();
    let err = reg.list_projects().await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, RegistryError::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(
        elapsed >= Duration::from_millis(250),
        "gave up too early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(2),
        "waited too long: {elapsed:?}"
    );
    drop(held);
    assert!(
        reg.list_projects().await.unwrap().is_empty(),
        "recovers once a connection is free"
    );
}

pub(crate) async fn a_write_blocked_by_a_lock_is_a_retryable_error_within_the_query_timeout(
    db: &TestDb,
) {
    use diesel_async::SimpleAsyncConnection as _;
    let mut config = db.config();
    config.max_connections = 2;
    config.query_timeout = Duration::from_millis(300);
    config.sqlite_busy_timeout = Duration::from_secs(5);
    let database = db.connect_with(config, Arc::new(SystemClock)).await;
    let reg = Registry::new(database.clone(), MasterKey::generate().unwrap());
    // Another session holds the write lock and never lets go (a stuck writer or a wedged
    // database, as far as this caller can tell).
    let mut blocker = database.connection().await.unwrap();
    let lock = match database.backend() {
        corral_registry::Backend::Sqlite => "BEGIN IMMEDIATE",
        corral_registry::Backend::Postgres => "BEGIN; LOCK TABLE projects IN ACCESS EXCLUSIVE MODE",
    };
    corral_registry::with_conn!(&mut blocker, |c| c.batch_execute(lock).await).unwrap();
    let started = Instant::now();
    let err = reg.create_project("blocked").await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, RegistryError::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?} {err:?}");
    corral_registry::with_conn!(&mut blocker, |c| c.batch_execute("ROLLBACK").await).unwrap();
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_stopped_postgres_is_a_retryable_error_within_the_pool_timeouts() {
    let mut config = DatabaseConfig::new(format!(
        "postgres://postgres:hunter2@127.0.0.1:{}/corral",
        free_port()
    ));
    config.wait_timeout = Duration::from_millis(500);
    config.create_timeout = Duration::from_millis(500);
    let started = Instant::now();
    let err = Database::connect(config.clone()).await.unwrap_err();
    assert!(matches!(err, RegistryError::Unavailable { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !err.to_string().contains("hunter2"),
        "no password in errors: {err}"
    );
    assert!(
        !format!("{config:?}").contains("hunter2"),
        "no password in Debug"
    );

    // A pool built while the database is down answers each call quickly too.
    let db = Database::open(config, Arc::new(SystemClock)).unwrap();
    let started = Instant::now();
    assert!(db.ping().await.unwrap_err().is_retryable());
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_blackholed_postgres_connection_attempt_times_out_as_unavailable() {
    // A listener that accepts TCP but never speaks: the create timeout must end the wait.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let mut config = DatabaseConfig::new(format!("postgres://postgres@127.0.0.1:{port}/corral"));
    config.wait_timeout = Duration::from_millis(300);
    config.create_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let err = Database::connect(config).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, RegistryError::Unavailable { .. }), "{err:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    hold.abort();
}

#[tokio::test]
async fn an_unusable_sqlite_path_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, b"x").unwrap();
    // A directory under a regular file cannot be created.
    let config = DatabaseConfig::new(format!("sqlite://{}/sub/corral.db", blocker.display()));
    let started = Instant::now();
    let err = Database::connect(config).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn urls_choose_the_backend() {
    use corral_registry::Backend;
    let backend = |url: &str| DatabaseConfig::new(url).backend().ok();
    assert_eq!(
        backend("sqlite:///var/lib/corral/db.sqlite"),
        Some(Backend::Sqlite)
    );
    assert_eq!(backend("sqlite://corral.db"), Some(Backend::Sqlite));
    assert_eq!(backend("/var/lib/corral/db.sqlite"), Some(Backend::Sqlite));
    assert_eq!(backend("postgres://u@h/db"), Some(Backend::Postgres));
    assert_eq!(backend("postgresql://u@h/db"), Some(Backend::Postgres));
    assert_eq!(backend("mysql://u@h/db"), None);
    assert_eq!(backend(""), None);
    assert_eq!(
        backend("sqlite::memory:"),
        None,
        "each pooled connection would be empty"
    );
}

#[test]
fn a_master_key_file_is_created_private_and_reloaded() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys").join("master.key");
    let created = MasterKey::load_or_create(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.trim().len(), 64);
    assert_eq!(format!("{created:?}"), "MasterKey(<redacted>)");
    assert!(!format!("{created:?}").contains(text.trim()));
    let _reloaded = MasterKey::load_or_create(&path).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "an existing key is kept"
    );

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        MasterKey::load(&path),
        Err(RegistryError::MasterKey { .. })
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&path, "not hex").unwrap();
    assert!(matches!(
        MasterKey::load(&path),
        Err(RegistryError::MasterKey { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_master_key_reads_what_the_created_one_sealed() {
    use corral_domain::Provider;
    use secrecy::{ExposeSecret as _, SecretString};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("master.key");
    let test_db = TestDb::sqlite();
    let database = test_db.connect().await;
    let first = Registry::new(database.clone(), MasterKey::load_or_create(&path).unwrap());
    let project = first.create_project("p").await.unwrap();
    first
        .put_profile(
            project.id,
            Provider::Vercel,
            corral_registry::ProfileInput {
                credential: Some(SecretString::from("vercel-token")),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let second = Registry::new(database, MasterKey::load(&path).unwrap());
    let got = second
        .profile(project.id, Provider::Vercel)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.credential.unwrap().expose_secret(), "vercel-token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pools_writing_one_sqlite_file_concurrently_never_see_busy() {
    use corral_domain::{CredentialSource, OperationId, Provider, SandboxId, SandboxMetadata};
    use corral_registry::NewSandbox;
    let test_db = TestDb::sqlite();
    // Two pools on one file stand for two processes; each writes through all its connections.
    let mut config = test_db.config();
    config.sqlite_busy_timeout = Duration::from_secs(10);
    let a = Registry::new(
        test_db
            .connect_with(config.clone(), Arc::new(SystemClock))
            .await,
        MasterKey::generate().unwrap(),
    );
    let b = Registry::new(
        test_db.connect_with(config, Arc::new(SystemClock)).await,
        MasterKey::generate().unwrap(),
    );
    let project = a.create_project("p").await.unwrap().id;
    let writes = (0..100).map(|i| {
        let reg = if i % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(async move {
            let id = SandboxId::new(Provider::Local);
            let metadata = SandboxMetadata {
                native_provider_id: None,
                operation_id: OperationId::new(),
                credential_source: CredentialSource::None,
                workspace: None,
                team_id: None,
                project_id: None,
                bridge_url: None,
            };
            reg.insert_sandbox(NewSandbox {
                id,
                project_id: project,
                metadata,
            })
            .await?;
            reg.complete_create(
                project,
                id,
                &format!("n{i}"),
                corral_domain::SandboxStatus::Running,
            )
            .await?;
            reg.tombstone(project, id).await?;
            // A multi-statement write transaction too.
            reg.put_profile(
                project,
                Provider::Local,
                corral_registry::ProfileInput::default(),
            )
            .await
            .map(|_| ())
        })
    });
    for result in futures::future::join_all(writes).await {
        result.unwrap().unwrap();
    }
    let page = a.list_sandboxes(project, 200, None).await.unwrap();
    assert_eq!(page.items.len(), 100);
    assert!(page.items.iter().all(|r| r.deleted_at.is_some()));
}

#[test]
fn concurrent_starters_all_load_one_complete_master_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("master.key");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || MasterKey::load_or_create(&path).map(|_| ()))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "no temporary file is left behind");
    assert!(MasterKey::load(&path).is_ok());
}

/// actix-web runs handlers on current-thread runtimes and drops a handler's future when the
/// client goes away; a registry call abandoned that way must neither panic nor wedge the pool.
#[tokio::test(flavor = "current_thread")]
async fn an_abandoned_sqlite_call_on_a_current_thread_runtime_neither_panics_nor_wedges() {
    use diesel_async::SimpleAsyncConnection as _;
    let test_db = TestDb::sqlite();
    let mut config = test_db.config();
    config.max_connections = 2;
    config.sqlite_busy_timeout = Duration::from_millis(500);
    let database = test_db.connect_with(config, Arc::new(SystemClock)).await;
    let reg = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let mut blocker = database.connection().await.unwrap();
    corral_registry::with_conn!(&mut blocker, |c| c.batch_execute("BEGIN IMMEDIATE").await)
        .unwrap();
    // The caller gives up while the write waits for the lock.
    let abandoned = tokio::time::timeout(Duration::from_millis(50), reg.create_project("x")).await;
    assert!(abandoned.is_err(), "the call was still waiting");
    corral_registry::with_conn!(&mut blocker, |c| c.batch_execute("ROLLBACK").await).unwrap();
    drop(blocker);
    // The pool still serves; the abandoned insert ran to its own end in the background.
    tokio::time::sleep(Duration::from_millis(600)).await;
    reg.create_project("y").await.unwrap();
    assert!(reg.project_by_name("y").await.is_ok());
}

/// A PostgreSQL restart or failover kills pooled connections; the pool notices on checkout
/// (a verifying query) and opens a fresh one, so callers do not see the dead connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_postgres_connection_is_replaced_on_the_next_call() {
    use diesel::QueryableByName;
    use diesel::sql_types::Integer;
    use diesel_async::{AsyncConnection as _, RunQueryDsl as _};
    #[derive(QueryableByName)]
    struct Pid {
        #[diesel(sql_type = Integer)]
        pid: i32,
    }
    let Some(test_db) =
        TestDb::postgres("failures::a_killed_postgres_connection_is_replaced").await
    else {
        return;
    };
    let mut config = test_db.config();
    config.max_connections = 1;
    let database = test_db.connect_with(config, Arc::new(SystemClock)).await;
    let reg = Registry::new(database.clone(), MasterKey::generate().unwrap());
    reg.create_project("before").await.unwrap();
    let pid = {
        let mut conn = database.connection().await.unwrap();
        corral_registry::with_conn!(&mut conn, |c| diesel::sql_query(
            "SELECT pg_backend_pid() AS pid"
        )
        .get_result::<Pid>(c)
        .await)
        .unwrap()
        .pid
    };
    let admin_url = std::env::var(corral_registry::testing::POSTGRES_URL_ENV).unwrap();
    let mut admin = diesel_async::AsyncPgConnection::establish(&admin_url)
        .await
        .unwrap();
    diesel::sql_query(format!("SELECT pg_terminate_backend({pid})"))
        .execute(&mut admin)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    reg.create_project("after").await.unwrap();
    assert_eq!(reg.list_projects().await.unwrap().len(), 2);
}
