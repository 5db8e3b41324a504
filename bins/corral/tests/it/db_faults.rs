//! Database faults through the real server: `corral serve` on PostgreSQL reached through a
//! loopback TCP proxy (`tcp_proxy`) that the test switches to refuse, cut or black-hole, in
//! front of the shared test server (which is never stopped). Each test has its own schema
//! (`TestDb`); every one needs PostgreSQL and has `postgres` in its name.

use std::path::Path;
use std::time::{Duration, Instant};

use corral_registry::testing::TestDb;
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use crate::serve::{Api, Server, Timed, create_project, set_default_profile, start};
use crate::tcp_proxy::{Mode, Proxy};

/// The Morph credential the fake accepts (the project's stored profile).
const KEY: &str = "db-faults-morph-key-1";
/// The configured pool wait (`[database] acquire_timeout_seconds`).
const ACQUIRE: Duration = Duration::from_secs(1);
/// The configured connection open and check timeout (`connect_timeout_seconds`; default 5).
const CONNECT: Duration = Duration::from_secs(2);
/// The configured per-operation timeout (`query_timeout_seconds`; default 10).
const QUERY: Duration = Duration::from_secs(2);
/// What an answer during an outage may take at most: the pool wait, opening and checking a
/// connection, one operation, plus slack. A hang would exceed it by far.
const OUTAGE_BOUND: Duration = Duration::from_secs(1 + 2 + 2 + 2 + 5);
/// What a request that never needed a connection to come back may take at most: the pool
/// wait plus generous slack for a loaded machine.
const FAST_BOUND: Duration = Duration::from_secs(5);

struct World {
    _tmp: tempfile::TempDir,
    _db: TestDb,
    proxy: Proxy,
    morph: corral_provider_morph::fake::Fake,
    server: Server,
    api: Api,
}

/// A server over a fresh PostgreSQL schema reached through a proxy, with a pool of
/// `max_connections`, Morph (fake) enabled and rate limits off; `None` when PostgreSQL tests
/// are skipped.
async fn world(test: &str, max_connections: u32) -> Option<World> {
    let db = TestDb::postgres(test).await?;
    let mut url = url::Url::parse(db.url()).unwrap();
    let upstream = format!(
        "{}:{}",
        url.host_str().unwrap(),
        url.port_or_known_default().unwrap()
    );
    let upstream = tokio::net::lookup_host(upstream)
        .await
        .unwrap()
        .next()
        .unwrap();
    let proxy = Proxy::start(upstream).await;
    url.set_host(Some("127.0.0.1")).unwrap();
    url.set_port(Some(proxy.addr().port())).unwrap();
    let proxied = url.to_string();

    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let morph = corral_provider_morph::fake::Fake::start_with_key(KEY).await;
    let (_, key) = create_project(&data, db.url(), "default");
    set_profile(&data, db.url());
    let config = tmp.path().join("corral.toml");
    std::fs::write(
        &config,
        format!(
            "database_url = \"{proxied}\"\n\
             [database]\nmax_connections = {max_connections}\nacquire_timeout_seconds = {}\n\
             connect_timeout_seconds = {}\nquery_timeout_seconds = {}\n\
             [providers]\nenabled = [\"morph\"]\n[providers.morph]\nbase_url = \"{}\"\n\
             [rate_limits]\nenabled = false\n\
             [reconciler]\ninterval_seconds = 1\n",
            ACQUIRE.as_secs(),
            CONNECT.as_secs(),
            QUERY.as_secs(),
            morph.base_url(),
        ),
    )
    .unwrap();
    let server = start(&data, &config, 1);
    let api = Api {
        client: Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap(),
        base: server.base.clone(),
        key,
    };
    Some(World {
        _tmp: tmp,
        _db: db,
        proxy,
        morph,
        server,
        api,
    })
}

/// The project's Morph profile, stored straight in the database: requests then carry no
/// credential, so the profile is loaded (and cached) like the API key.
fn set_profile(data: &Path, url: &str) {
    set_default_profile(data, "morph", KEY, &["--database-url", url]);
}

/// One answer: status, code (empty on success), body, time taken.
struct Answer {
    status: StatusCode,
    code: String,
    body: String,
    took: Duration,
}

impl World {
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> Answer {
        let Timed {
            status,
            text: body,
            took,
            ..
        } = self.api.timed(method, path, body, key).await;
        let code = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
            .unwrap_or_default();
        Answer {
            status,
            code,
            body,
            took,
        }
    }

    async fn create(&self, key: Option<&str>) -> Answer {
        let body = json!({"provider": "morph", "image": "snapshot_db_faults"});
        self.send(Method::POST, "/v1/sandboxes", Some(body), key)
            .await
    }

    /// Create requests the provider received.
    fn creates_sent(&self) -> usize {
        self.morph
            .server()
            .log()
            .all()
            .iter()
            .filter(|r| r.method == Method::POST && r.path == "/api/instance")
            .count()
    }
}

/// `a` is a retryable storage refusal: 503 with `sandbox_registry_unavailable`,
/// `idempotency_unavailable` or `provider_profiles_unavailable` (whichever store the request
/// reached first), within the outage bound.
fn assert_unavailable(what: &str, a: &Answer) {
    assert_eq!(a.status, 503, "{what}: {}", a.body);
    assert!(
        matches!(
            a.code.as_str(),
            "sandbox_registry_unavailable"
                | "idempotency_unavailable"
                | "provider_profiles_unavailable"
        ),
        "{what}: {}",
        a.body
    );
    assert!(a.body.contains(r#""retryable":true"#), "{what}: {}", a.body);
    assert!(a.took < OUTAGE_BOUND, "{what}: answered after {:?}", a.took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_mid_run_is_unavailable_at_once_without_provider_calls_and_recovers_without_restart()
 {
    let Some(w) = world("db_faults_stopped", 4).await else {
        return;
    };
    let ok = w.create(Some("before")).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    let id = serde_json::from_str::<Value>(&ok.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let sent = w.creates_sent();

    // PostgreSQL "stops": live connections are cut, new ones reset.
    w.proxy.set(Mode::Refuse);
    w.proxy.cut();
    let mut slowest = Duration::ZERO;
    // Twice over, so that both the cached API key (first round) and its expiry (second round,
    // after the 5 s cache) are covered.
    for round in 0..2 {
        let a = w.create(Some("during")).await;
        assert_unavailable("keyed create", &a);
        slowest = slowest.max(a.took);
        let a = w.create(None).await;
        assert_unavailable("create", &a);
        slowest = slowest.max(a.took);
        let a = w.send(Method::GET, "/v1/sandboxes", None, None).await;
        assert_unavailable("list", &a);
        slowest = slowest.max(a.took);
        let a = w
            .send(Method::GET, &format!("/v1/sandboxes/{id}"), None, None)
            .await;
        assert_unavailable("get", &a);
        slowest = slowest.max(a.took);
        let a = w.send(Method::GET, "/readyz", None, None).await;
        assert_eq!(a.status, 503, "readyz: {}", a.body);
        if round == 0 {
            tokio::time::sleep(corral_registry::DEFAULT_CACHE_TTL + Duration::from_secs(1)).await;
        }
    }
    eprintln!("slowest answer while PostgreSQL was down: {slowest:?}");
    // A refused connection fails at once: nothing waits for a timeout.
    assert!(slowest < FAST_BOUND, "{slowest:?}");
    assert_eq!(
        w.creates_sent(),
        sent,
        "a create that could not be claimed reached the provider"
    );

    // PostgreSQL is back: the same server recovers, and the key used during the outage was
    // never claimed, so it creates once.
    w.proxy.set(Mode::Pass);
    let back = Instant::now();
    let deadline = back + Duration::from_secs(20);
    loop {
        let a = w.create(Some("during")).await;
        if a.status == 201 {
            break;
        }
        assert_unavailable("keyed create while recovering", &a);
        assert!(Instant::now() < deadline, "never recovered: {}", a.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("recovered {:?} after PostgreSQL came back", back.elapsed());
    assert_eq!(w.creates_sent(), sent + 1);
    let a = w.send(Method::GET, "/v1/sandboxes", None, None).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let logs = w.server.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_blackholed_with_a_pool_of_one_answers_503_within_the_timeouts_and_recovers() {
    let Some(w) = world("db_faults_blackhole", 1).await else {
        return;
    };
    let ok = w.create(Some("before")).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    let sent = w.creates_sent();

    // The network eats everything: the pooled connection's queries and new connections hang.
    w.proxy.set(Mode::Blackhole);
    let started = Instant::now();
    let requests = (0..8).map(|i| {
        let w = &w;
        async move {
            if i % 2 == 0 {
                w.create(Some(&format!("held-{i}"))).await
            } else {
                w.send(Method::GET, "/v1/sandboxes", None, None).await
            }
        }
    });
    let answers = futures::future::join_all(requests).await;
    let slowest = answers.iter().map(|a| a.took).max().unwrap();
    for a in &answers {
        eprintln!("{:?} {} {}", a.took, a.status, a.code);
    }
    eprintln!(
        "8 concurrent requests on a black-holed database: all answered after {:?} (slowest {slowest:?})",
        started.elapsed()
    );
    for a in &answers {
        assert_unavailable("request on a black-holed database", a);
    }
    // Only the request holding the pool's one connection waits out the per-operation timeout;
    // every other one is refused once the pool wait is over.
    let waited = answers.iter().filter(|a| a.took > FAST_BOUND).count();
    assert!(waited <= 1, "{waited} requests waited past the pool wait");
    // And that one waited the configured 2 s, not the default 10 s.
    assert!(
        slowest < ACQUIRE + QUERY + Duration::from_secs(3),
        "slowest {slowest:?} with a {QUERY:?} query timeout"
    );
    assert_eq!(w.creates_sent(), sent, "no create reached the provider");

    // The partition heals: the same server serves again.
    w.proxy.set(Mode::Pass);
    let back = Instant::now();
    let deadline = back + Duration::from_secs(30);
    loop {
        let a = w.create(Some("after")).await;
        if a.status == 201 {
            break;
        }
        assert_unavailable("create while recovering", &a);
        assert!(Instant::now() < deadline, "never recovered: {}", a.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("recovered {:?} after the partition healed", back.elapsed());
    assert_eq!(w.creates_sent(), sent + 1);
    assert!(w.proxy.accepted() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connections_stranded_by_a_vanished_server_do_not_wedge_the_pool_for_good() {
    use diesel_async::{AsyncConnection as _, SimpleAsyncConnection as _};
    let Some(w) = world("db_faults_stranded", 1).await else {
        return;
    };
    let ok = w.create(Some("before")).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    let sent = w.creates_sent();

    // 1. The idle pooled connection goes silent for good (its server vanished without a
    // reset); the database is reachable at once through new connections. The check on
    // checkout gives up on it and opens another.
    w.proxy.strand();
    let served = served_again_within(&w, Duration::from_secs(30)).await;
    eprintln!("idle connection stranded: served again after {served:?}");

    // 2. The connection goes silent while a query is in flight on it: a lock taken directly
    // (not through the proxy) holds the server's list query inside PostgreSQL, the
    // connection is stranded, the lock released; the query's answer never arrives.
    let mut admin = diesel_async::AsyncPgConnection::establish(w._db.url())
        .await
        .unwrap();
    admin
        .batch_execute("BEGIN; LOCK TABLE sandboxes IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let held = {
        let client = w.api.client.clone();
        let url = format!("{}/v1/sandboxes", w.api.base);
        let key = w.api.key.clone();
        tokio::spawn(async move { client.get(url).bearer_auth(key).send().await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    w.proxy.strand();
    admin.batch_execute("ROLLBACK").await.unwrap();
    let a = held.await.unwrap().unwrap();
    assert_eq!(a.status(), 503, "the stranded query's request");
    let served = served_again_within(&w, Duration::from_secs(45)).await;
    eprintln!("connection stranded mid-query: served again after {served:?}");
    let a = w.create(Some("after")).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(w.creates_sent(), sent + 1);
}

/// Lists until one succeeds (every failure meanwhile a retryable storage refusal), failing
/// after `limit`; how long it took.
async fn served_again_within(w: &World, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut refused = 0;
    loop {
        let a = w.send(Method::GET, "/v1/sandboxes", None, None).await;
        if a.status == 200 {
            return started.elapsed();
        }
        assert_unavailable("list after the connection was stranded", &a);
        refused += 1;
        assert!(
            started.elapsed() < limit,
            "the pool is still wedged {:?} later ({refused} refusals): {}",
            started.elapsed(),
            a.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
