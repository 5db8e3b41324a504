//! Crash safety of a create (issue 14): the real binary, built for the tests with
//! corral-service's `failpoints`, is killed at each step boundary of a create with an
//! Idempotency-Key (the failpoint aborts the process: no destructor, no flush), then restarted
//! without it. The client retries the same create and the reconciler runs; afterwards:
//!
//! - the fake provider received exactly one create and holds exactly one sandbox for the key
//!   (so at most one per operation id);
//! - the create the client was finally answered (and one answered before the crash) names that
//!   sandbox, is still in the registry, and the key replays it;
//! - zero orphans: every sandbox at the provider is a live registry record with its native id,
//!   and every other record of the key is settled `failed` (nothing left pending or unknown).
//!
//! Every scenario runs on SQLite and, in `crash::postgres`, on a fresh PostgreSQL schema.
//!
//! The key's lease (120 s) is what keeps a dead owner's key from being taken over at once; the
//! test does not wait it out but moves every stored time of the database ten minutes back while
//! the server is down, as if it had stayed down that long.

use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use corral_provider_testkit::fake::{Fault, FaultKind};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use corral_registry::testing::TestDb;

use crate::serve::{Api, Server, create_project, set_default_profile, start_with_env};

/// The provider credential the fake accepts (stored as the project's Morph profile).
const PROVIDER_KEY: &str = "crash-morph-key-2";
/// The client's Idempotency-Key, the same on every attempt.
const IDEMPOTENCY_KEY: &str = "crash-create-1";
/// SIGABRT: how a failpoint ends the process.
const SIGABRT: i32 = 6;

/// Where the server is killed.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// At this failpoint (`CORRAL_FAILPOINT`).
    At(&'static str),
    /// From outside (SIGKILL) while the provider has made the sandbox but holds its answer.
    WhileTheProviderHoldsTheAnswer,
    /// From outside (SIGKILL) right after the client was answered 201.
    AfterTheAnswer,
}

/// One server's data directory, database, configuration and fake provider, across restarts.
struct World {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    config: PathBuf,
    /// A fresh PostgreSQL schema, or `None` for SQLite in the data directory.
    postgres: Option<TestDb>,
    morph: corral_provider_morph::fake::Fake,
    api_key: Option<String>,
    runs: usize,
}

impl World {
    async fn new(postgres: Option<TestDb>) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let morph = corral_provider_morph::fake::Fake::start_with_key(PROVIDER_KEY).await;
        let config = tmp.path().join("corral.toml");
        let database = postgres
            .as_ref()
            .map(|db| format!("database_url = \"{}\"\n", db.url()))
            .unwrap_or_default();
        std::fs::write(
            &config,
            format!(
                "{database}[providers]\nenabled = [\"morph\"]\n[providers.morph]\n\
                 base_url = \"{}\"\n[reconciler]\ninterval_seconds = 1\ngrace_seconds = 1\n",
                morph.base_url()
            ),
        )
        .unwrap();
        Self {
            _tmp: tmp,
            data,
            config,
            postgres,
            morph,
            api_key: None,
            runs: 0,
        }
    }

    /// The database URL the server and the CLI use.
    fn database_url(&self) -> String {
        self.postgres.as_ref().map_or_else(
            || format!("sqlite://{}", self.data.join("corral.db").display()),
            |db| db.url().to_owned(),
        )
    }

    /// Starts the server, with `failpoint` armed if given. Before the first start the CLI
    /// makes the project (migrating the database) and stores the Morph credential as its
    /// profile, so the reconciler can act on its own.
    fn start(&mut self, failpoint: Option<&str>) -> Server {
        self.runs += 1;
        let env: Vec<(&str, &str)> = failpoint
            .map(|f| vec![("CORRAL_FAILPOINT", f)])
            .unwrap_or_default();
        if self.api_key.is_none() {
            let url = self.database_url();
            self.api_key = Some(create_project(&self.data, &url, "default").1);
            set_default_profile(&self.data, "morph", PROVIDER_KEY, &["--database-url", &url]);
        }
        start_with_env(&self.data, &self.config, self.runs, &env)
    }

    fn api(&self, server: &Server) -> Api {
        Api {
            client: Client::new(),
            base: server.base.clone(),
            key: self.api_key.clone().unwrap(),
        }
    }

    /// The create, always the same request with the same key.
    async fn post_create(&self, base: &str) -> reqwest::Result<(StatusCode, String)> {
        let client = Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let resp = client
            .post(format!("{base}/v1/sandboxes"))
            .bearer_auth(self.api_key.as_deref().unwrap())
            .header("Idempotency-Key", IDEMPOTENCY_KEY)
            .json(&json!({"provider": "morph", "image": "snapshot_crash"}))
            .send()
            .await?;
        let status = resp.status();
        Ok((status, resp.text().await?))
    }

    /// Retries the create as a client would until it is answered with a sandbox (201, or 200
    /// for a replay); `idempotency_in_progress` and the outcome-unknown answers are retried.
    async fn create_until_answered(&self, base: &str) -> (StatusCode, Value) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = self.post_create(base).await.unwrap();
            if status == StatusCode::CREATED || status == StatusCode::OK {
                return (status, serde_json::from_str(&body).unwrap());
            }
            let code = serde_json::from_str::<Value>(&body).unwrap()["error"]["code"].clone();
            assert!(
                [
                    "idempotency_in_progress",
                    "idempotency_outcome_unknown",
                    "sandbox_create_outcome_unknown"
                ]
                .iter()
                .any(|c| code == *c),
                "a retry is answered only with a sandbox or a retryable wait: {status} {body}"
            );
            assert!(
                Instant::now() < deadline,
                "never answered with a sandbox: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// As if the server had stayed down ten minutes: every stored time moves back (leases of
    /// dead owners run out, the reconcile grace period is over).
    async fn time_passes(&self) {
        const BACK: i64 = 600_000_000; // microseconds
        let url = self.database_url();
        let db = corral_registry::Database::connect(corral_registry::DatabaseConfig::new(url))
            .await
            .unwrap();
        raw_sql(
            &db,
            &format!(
                "UPDATE idempotency_keys SET lease_until = lease_until - {BACK}, \
                 created_at = created_at - {BACK}, updated_at = updated_at - {BACK}, \
                 expires_at = expires_at - {BACK}"
            ),
        )
        .await;
        raw_sql(
            &db,
            &format!(
                "UPDATE sandboxes SET created_at = created_at - {BACK}, \
                 updated_at = updated_at - {BACK}, \
                 status_observed_at = status_observed_at - {BACK}, \
                 reconcile_attempted_at = reconcile_attempted_at - {BACK}"
            ),
        )
        .await;
    }

    /// The sandboxes the fake provider holds.
    async fn instances(&self) -> Vec<Value> {
        let list: Value = Client::new()
            .get(format!("{}/instance", self.morph.base_url()))
            .bearer_auth(PROVIDER_KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        list["data"].as_array().unwrap().clone()
    }

    /// How many creates the fake provider received.
    fn creates_sent(&self) -> usize {
        self.morph
            .server()
            .log()
            .all()
            .iter()
            .filter(|r| r.method == "POST" && r.path == "/api/instance")
            .count()
    }
}

/// Runs one statement on `db`.
async fn raw_sql(db: &corral_registry::Database, sql: &str) {
    use diesel_async::RunQueryDsl as _;
    let mut conn = db.connection().await.unwrap();
    match &mut conn {
        corral_registry::PooledConnection::Sqlite(c) => {
            diesel::sql_query(sql).execute(&mut **c).await.unwrap()
        }
        corral_registry::PooledConnection::Postgres(c) => {
            diesel::sql_query(sql).execute(&mut **c).await.unwrap()
        }
    };
}

/// Waits for `server` to end by the failpoint `point`: it must abort (SIGABRT, not a clean
/// exit nor a SIGKILL from anyone else) and say which point it reached.
fn died_at(server: &mut Server, point: &str) {
    let status = tokio::task::block_in_place(|| server.wait_exit(Duration::from_secs(20)))
        .unwrap_or_else(|| panic!("the server did not die at {point}"));
    assert_eq!(status.signal(), Some(SIGABRT), "{point}: {status}");
    let stderr = std::fs::read_to_string(&server.stderr).unwrap();
    assert!(
        stderr.contains(&format!("corral: failpoint {point} reached")),
        "{point}: {stderr}"
    );
}

/// The registry's records (tombstones included), once none is left pending or unknown: each
/// has a native id, or is settled failed, or is deleted.
async fn settled_registry(api: &Api) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = api.json(Method::GET, "/v1/sandboxes", None, &[], 200).await;
        let items = page["items"].as_array().unwrap().clone();
        let settled = items.iter().all(|i| {
            i["metadata"]["nativeProviderId"].is_string()
                || i["status"] == "failed"
                || i["deletedAt"].is_string()
        });
        if settled {
            return items;
        }
        assert!(Instant::now() < deadline, "never settled: {page}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The invariants after recovery, for the sandbox `acked` the client was answered.
async fn assert_recovered(w: &World, api: &Api, acked: &Value) {
    let registry = settled_registry(api).await;
    let instances = w.instances().await;
    assert_eq!(
        w.creates_sent(),
        1,
        "one provider create for the key: {instances:?}"
    );
    assert_eq!(
        instances.len(),
        1,
        "one provider sandbox for the key: {instances:?}"
    );
    let instance = &instances[0];
    let op = &instance["metadata"]["corral_operation_id"];
    assert!(op.is_string(), "{instance}");
    // No orphan: every provider sandbox is a live record with its native id and operation.
    for i in &instances {
        assert!(
            registry
                .iter()
                .any(|r| r["metadata"]["nativeProviderId"] == i["id"]
                    && r["metadata"]["operationId"] == i["metadata"]["corral_operation_id"]
                    && r["deletedAt"].is_null()),
            "orphan {i} not in the registry {registry:?}"
        );
    }
    // Every other record is settled failed: nothing of the key was lost or left hanging.
    let live: Vec<&Value> = registry
        .iter()
        .filter(|r| r["status"] != "failed")
        .collect();
    assert_eq!(live.len(), 1, "{registry:?}");
    // The answered create is that sandbox, still there.
    let id = acked["id"].as_str().unwrap();
    let got = api
        .json(Method::GET, &format!("/v1/sandboxes/{id}"), None, &[], 200)
        .await;
    assert!(got["deletedAt"].is_null(), "{got}");
    assert_eq!(got["metadata"]["nativeProviderId"], instance["id"], "{got}");
    assert_eq!(&got["metadata"]["operationId"], op, "{got}");
    // And the key keeps answering that sandbox, never another.
    let (status, body) = w.post_create(&api.base).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let replay: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(replay["id"], acked["id"], "{replay}");
    assert_eq!(w.creates_sent(), 1, "a replay makes no provider call");
}

/// Kills the server at `kill` during a create, restarts it, retries and checks the invariants.
async fn crash_and_recover(kill: Kill, postgres: Option<TestDb>) {
    let mut w = World::new(postgres).await;
    let failpoint = match kill {
        Kill::At(point) => Some(point),
        _ => None,
    };
    let mut server = w.start(failpoint);
    let mut acked_before_the_crash = None;
    match kill {
        Kill::At(point) => {
            let answer = w.post_create(&server.base).await;
            assert!(answer.is_err(), "{point}: answered {answer:?}");
            died_at(&mut server, point);
        }
        Kill::WhileTheProviderHoldsTheAnswer => {
            w.morph.server().faults().arm(
                Fault::new(FaultKind::DelayAfterHandler(Duration::from_secs(20)))
                    .on_method(Method::POST)
                    .on_path("/api/instance"),
            );
            let base = server.base.clone();
            let key = w.api_key.clone().unwrap();
            let pending = tokio::spawn(async move {
                Client::new()
                    .post(format!("{base}/v1/sandboxes"))
                    .bearer_auth(key)
                    .header("Idempotency-Key", IDEMPOTENCY_KEY)
                    .json(&json!({"provider": "morph", "image": "snapshot_crash"}))
                    .send()
                    .await
            });
            let deadline = Instant::now() + Duration::from_secs(20);
            while w.instances().await.is_empty() {
                assert!(Instant::now() < deadline, "the provider never made it");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            server.crash();
            let answer = pending.await.unwrap();
            assert!(answer.is_err(), "answered {answer:?}");
        }
        Kill::AfterTheAnswer => {
            let (status, body) = w.post_create(&server.base).await.unwrap();
            assert_eq!(status, StatusCode::CREATED, "{body}");
            acked_before_the_crash = Some(serde_json::from_str::<Value>(&body).unwrap());
            server.crash();
        }
    }
    w.time_passes().await;
    let server = w.start(None);
    let api = w.api(&server);
    let (_, acked) = w.create_until_answered(&server.base).await;
    if let Some(before) = &acked_before_the_crash {
        assert_eq!(
            acked["id"], before["id"],
            "the acknowledged create survives"
        );
    }
    assert_recovered(&w, &api, &acked).await;
    server.stop();
}

/// Each crash scenario, on SQLite here and on PostgreSQL in `postgres` (a fresh schema each;
/// skipped, and said so, without `CORRAL_TEST_POSTGRES_URL`).
macro_rules! crash_tests {
    ($($name:ident => $kill:expr;)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                crash_and_recover($kill, None).await;
            }
        )*

        mod postgres {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(db) = TestDb::postgres(stringify!($name)).await {
                        crash_and_recover($kill, Some(db)).await;
                    }
                }
            )*

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn killed_in_the_reconciler_before_adopting_the_next_start_adopts_it() {
                if let Some(db) = TestDb::postgres("crash_in_the_reconciler").await {
                    reconciler_killed_before_adopting(Some(db)).await;
                }
            }
        }
    };
}

crash_tests! {
    killed_after_claiming_the_key_one_sandbox_and_no_orphan => Kill::At("create.after_claim");
    killed_after_attaching_the_operation_one_sandbox_and_no_orphan => Kill::At("create.after_attach");
    killed_after_recording_the_pending_sandbox_one_sandbox_and_no_orphan =>
        Kill::At("create.after_pending");
    killed_while_the_provider_holds_the_answer_one_sandbox_and_no_orphan =>
        Kill::WhileTheProviderHoldsTheAnswer;
    killed_after_the_provider_answered_one_sandbox_and_no_orphan =>
        Kill::At("create.after_provider");
    killed_after_recording_the_native_id_one_sandbox_and_no_orphan =>
        Kill::At("create.after_native_id");
    killed_after_completing_the_key_one_sandbox_and_no_orphan => Kill::At("create.after_complete");
    killed_before_the_response_one_sandbox_and_no_orphan => Kill::At("create.before_response");
    killed_after_the_answer_the_acknowledged_create_survives => Kill::AfterTheAnswer;
}

/// The reconciler itself killed before it adopts a create found at the provider: the next
/// start adopts it, with no client at all; the client's retry then gets that sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_in_the_reconciler_before_adopting_the_next_start_adopts_it() {
    reconciler_killed_before_adopting(None).await;
}

async fn reconciler_killed_before_adopting(postgres: Option<TestDb>) {
    let mut w = World::new(postgres).await;
    let mut server = w.start(Some("create.after_provider"));
    let answer = w.post_create(&server.base).await;
    assert!(answer.is_err(), "answered {answer:?}");
    died_at(&mut server, "create.after_provider");
    w.time_passes().await;
    // No client: the reconciler's own pass finds the sandbox and dies before adopting it.
    let mut server = w.start(Some("reconcile.before_adopt"));
    died_at(&mut server, "reconcile.before_adopt");
    drop(server);
    let server = w.start(None);
    let api = w.api(&server);
    let registry = settled_registry(&api).await;
    assert_eq!(registry.len(), 1, "{registry:?}");
    assert!(
        registry[0]["metadata"]["nativeProviderId"].is_string(),
        "adopted by the reconciler, before any retry: {registry:?}"
    );
    let (_, acked) = w.create_until_answered(&server.base).await;
    assert_eq!(acked["id"], registry[0]["id"]);
    assert_recovered(&w, &api, &acked).await;
    server.stop();
}
