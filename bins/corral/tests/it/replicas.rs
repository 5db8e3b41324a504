//! Several stateless replicas sharing one PostgreSQL database (DESIGN.md): the real binary
//! twice on one schema (shared keys, shared idempotency, one sandbox seen through both, racing
//! migrations on an empty schema), and the in-process service's core rules on PostgreSQL.
//!
//! Every test here needs `CORRAL_TEST_POSTGRES_URL`; without it each prints that it was
//! skipped, unless `CORRAL_REQUIRE_POSTGRES=1`, where it fails (the registry's `TestDb`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::test;
use corral_domain::Provider;
use corral_provider::SandboxProvider;
use corral_registry::testing::TestDb;
use corral_service::ServiceConfig;
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use crate::serve::create_project;
use crate::support::{Counting, Providers, World, delete, get, post, send};

// ---------------------------------------------------------------------------------------------
// The real binary.

/// One `corral serve` process; killed and reaped when dropped.
struct Replica {
    child: Child,
    base: String,
    stdout: PathBuf,
    stderr: PathBuf,
}

/// Starts `corral serve` on a free port over `url`, with `data` as its data directory (the
/// master key and the `local` sandboxes root), without waiting for it to listen.
fn spawn(data: &Path, url: &str, name: &str) -> Replica {
    let logs = data.parent().unwrap();
    let stdout = logs.join(format!("{name}.stdout"));
    let stderr = logs.join(format!("{name}.stderr"));
    let child = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .args(["--database-url", url])
        .env("CORRAL_PROVIDERS", "local")
        .env("CORRAL_LOG", "info")
        .env_remove("CORRAL_CONFIG")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    Replica {
        child,
        base: String::new(),
        stdout,
        stderr,
    }
}

impl Replica {
    /// Waits for the "listening on" line and records the address.
    async fn listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = std::fs::read_to_string(&self.stdout).unwrap_or_default();
            if let Some(line) = out.lines().find(|l| l.starts_with("corral: listening on ")) {
                self.base = line.trim_start_matches("corral: listening on ").to_owned();
                return;
            }
            if let Some(exit) = self.child.try_wait().unwrap() {
                panic!("replica exited before listening ({exit}): {}", self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "replica did not start: {}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn logs(&self) -> String {
        let mut logs = std::fs::read_to_string(&self.stdout).unwrap_or_default();
        logs.push_str(&std::fs::read_to_string(&self.stderr).unwrap_or_default());
        logs
    }

    /// SIGTERM, then the exit status must be success; returns everything it logged.
    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        assert!(exit.success(), "graceful shutdown exits 0: {exit}");
        self.logs()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP call to one replica: (status, headers, body).
async fn call(
    client: &Client,
    base: &str,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let mut req = client
        .request(method, format!("{base}{path}"))
        .bearer_auth(key);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.unwrap())
}

/// [`call`] without extra headers, expecting `want`; the body as JSON.
async fn json_call(
    client: &Client,
    base: &str,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    want: u16,
) -> Value {
    let (status, _, text) = call(client, base, key, method, path, body, &[]).await;
    assert_eq!(status.as_u16(), want, "{base}{path}: {text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_postgres_schema_share_keys_idempotency_and_sandboxes() {
    let Some(db) = TestDb::postgres("two_replicas_share_keys_idempotency_and_sandboxes").await
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // The CLI migrates the schema, writes the master key both replicas then read from the
    // shared data directory, and prints the only copy of the key.
    let (_project, key) = create_project(&data, db.url(), "replicas");
    // Both at once on one sandboxes root: `local`'s probes and setups must not collide
    // (the migration race on an empty schema is the next test's).
    let mut a = spawn(&data, db.url(), "a");
    let mut b = spawn(&data, db.url(), "b");
    a.listening().await;
    b.listening().await;
    assert_ne!(a.base, b.base);
    let bases = [a.base.clone(), b.base.clone()];
    let client = Client::new();

    // The key issued by the CLI authenticates on both replicas.
    for base in &bases {
        let page = json_call(&client, base, &key, Method::GET, "/v1/sandboxes", None, 200).await;
        assert_eq!(page["items"].as_array().unwrap().len(), 0, "{base}");
    }

    // Twenty concurrent creates under one Idempotency-Key, alternating between the replicas.
    let idem = [("Idempotency-Key", "replicas-storm")];
    let answers = futures::future::join_all((0..20).map(|i| {
        let (client, base, key) = (&client, &bases[i % 2], &key);
        async move {
            let (st, h, text) = call(
                client,
                base,
                key,
                Method::POST,
                "/v1/sandboxes",
                Some(json!({"provider": "local"})),
                &idem,
            )
            .await;
            (i, st, h, text)
        }
    }))
    .await;
    let mut ids = BTreeSet::new();
    let mut created = None;
    for (i, st, h, text) in &answers {
        let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        match st.as_u16() {
            201 => {
                assert!(created.is_none(), "a second 201 (request {i}): {text}");
                created = Some(text.clone());
                ids.insert(body["id"].as_str().unwrap().to_owned());
            }
            200 => {
                assert_eq!(
                    h.get("idempotent-replayed").map(|v| v.to_str().unwrap()),
                    Some("true"),
                    "a 200 to a create is a replay (request {i}): {text}"
                );
                ids.insert(body["id"].as_str().unwrap().to_owned());
            }
            409 => {
                assert_eq!(body["error"]["code"], "idempotency_in_progress", "{text}");
                assert!(h.contains_key("retry-after"), "{text}");
            }
            other => panic!(
                "request {i} to {}: unexpected {other}: {text}",
                bases[i % 2]
            ),
        }
    }
    let created = created.expect("exactly one create answered 201");
    assert_eq!(ids.len(), 1, "every success names one sandbox: {ids:?}");
    let id = ids.into_iter().next().unwrap();
    for base in &bases {
        let page = json_call(&client, base, &key, Method::GET, "/v1/sandboxes", None, 200).await;
        let items = page["items"].as_array().unwrap();
        assert_eq!(items.len(), 1, "{base}: {page}");
        assert_eq!(items[0]["id"], id.as_str());
        // The stored answer replays byte for byte on either replica.
        let (st, h, text) = call(
            &client,
            base,
            &key,
            Method::POST,
            "/v1/sandboxes",
            Some(json!({"provider": "local"})),
            &idem,
        )
        .await;
        assert_eq!(st.as_u16(), 200, "{base}: {text}");
        assert_eq!(h.get("idempotent-replayed").unwrap(), "true");
        assert_eq!(text, created, "{base}");
    }

    // Created (above, wherever it landed) and written through A; read, exec'd and deleted
    // through B.
    let (ra, rb) = (&bases[0], &bases[1]);
    json_call(
        &client,
        ra,
        &key,
        Method::POST,
        &format!("/v1/sandboxes/{id}/files/write"),
        Some(json!({"path": "/workspace/from-a.txt", "content": "written via A"})),
        200,
    )
    .await;
    let got = json_call(
        &client,
        rb,
        &key,
        Method::GET,
        &format!("/v1/sandboxes/{id}"),
        None,
        200,
    )
    .await;
    assert_eq!(got["status"], "running", "{got}");
    let ran = json_call(
        &client,
        rb,
        &key,
        Method::POST,
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"command": "cat /workspace/from-a.txt; echo; echo via-b"})),
        200,
    )
    .await;
    assert_eq!(ran["stdout"], "written via A\nvia-b\n", "{ran}");
    assert_eq!(ran["exitCode"], 0, "{ran}");
    let tomb = json_call(
        &client,
        rb,
        &key,
        Method::DELETE,
        &format!("/v1/sandboxes/{id}"),
        None,
        200,
    )
    .await;
    assert_eq!(tomb["status"], "deleted", "{tomb}");
    assert!(tomb["deletedAt"].is_string(), "{tomb}");
    for base in &bases {
        let seen = json_call(
            &client,
            base,
            &key,
            Method::GET,
            &format!("/v1/sandboxes/{id}"),
            None,
            200,
        )
        .await;
        assert_eq!(seen, tomb, "{base}: the same tombstone");
        let page = json_call(&client, base, &key, Method::GET, "/v1/sandboxes", None, 200).await;
        assert_eq!(page["items"][0]["status"], "deleted", "{base}: {page}");
        let (st, _, text) = call(
            &client,
            base,
            &key,
            Method::POST,
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"command": "true"})),
            &[],
        )
        .await;
        assert_eq!(st.as_u16(), 404, "{base}: {text}");
    }

    for (name, replica) in [("A", a), ("B", b)] {
        let logs = replica.stop();
        assert!(!logs.contains(&key), "replica {name} logged the API key");
        assert!(
            !logs.contains("panicked"),
            "replica {name} panicked: {logs}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_started_at_once_on_an_empty_postgres_schema_both_migrate_and_come_up_ready() {
    let Some(db) = TestDb::postgres("two_replicas_race_migrations_on_an_empty_schema").await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // Not even the data directory exists: both race to create it, the master key and the
    // schema's tables.
    let data = tmp.path().join("data");
    let mut a = spawn(&data, db.url(), "a");
    let mut b = spawn(&data, db.url(), "b");
    a.listening().await;
    b.listening().await;
    let client = Client::new();
    for base in [&a.base, &b.base] {
        let resp = client.get(format!("{base}/readyz")).send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert_eq!(status.as_u16(), 200, "{base}/readyz: {text}");
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap()["status"],
            "ready"
        );
    }
    // A PostgreSQL server never creates a default project, so the schema is complete but
    // empty; a project made afterwards works on both, so both hold the one master key.
    let (_project, key) = create_project(&data, db.url(), "after-the-race");
    for base in [&a.base, &b.base] {
        let page = json_call(&client, base, &key, Method::GET, "/v1/sandboxes", None, 200).await;
        assert_eq!(page["items"].as_array().unwrap().len(), 0, "{base}");
    }
    for (name, replica) in [("A", a), ("B", b)] {
        let logs = replica.stop();
        assert!(
            !logs.contains("panicked"),
            "replica {name} panicked: {logs}"
        );
        assert!(
            !logs.contains("created project"),
            "replica {name} made a default project on PostgreSQL: {logs}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The in-process service on PostgreSQL.

/// A world over a fresh PostgreSQL schema (`local`, plus what `extra` builds), or `None` when
/// PostgreSQL tests are skipped. The schema goes when the returned `TestDb` drops, so bind it
/// first: `let Some((_db, w)) = …`.
async fn pg_world(
    test: &str,
    extra: impl FnOnce(&Path) -> Providers,
    config: ServiceConfig,
) -> Option<(TestDb, World)> {
    let db = TestDb::postgres(test).await?;
    let dir = tempfile::tempdir().unwrap();
    let w = World::with_db(dir, db.connect().await, extra, config, None).await;
    Some((db, w))
}

fn keyed(w: &World, key: &str, body: Value) -> actix_web::test::TestRequest {
    post(w, "/v1/sandboxes", body).insert_header(("Idempotency-Key", key))
}

#[actix_web::test]
async fn on_postgres_a_keyed_create_is_in_progress_then_replays_and_conflicts_on_another_body() {
    let s = Arc::new(Counting::new(Provider::Local, true));
    let gate = s.gate.clone().unwrap();
    let s2 = s.clone();
    let Some((_db, w)) = pg_world(
        "create_in_progress_replay_conflict",
        move |_| {
            let mut m = Providers::new();
            m.insert(Provider::Local, s2 as Arc<dyn SandboxProvider>);
            m
        },
        ServiceConfig::default(),
    )
    .await
    else {
        return;
    };
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let first = send(&app, keyed(&w, "pg-1", json!({"provider": "local"})));
    let second = async {
        while s.count("create_arrived") == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let r = send(&app, keyed(&w, "pg-1", json!({"provider": "local"}))).await;
        gate.add_permits(1);
        r
    };
    let (first, second) = futures::join!(first, second);
    first.expect_ok(201);
    second.expect_error(409, "idempotency_in_progress");
    assert!(second.headers.get("retry-after").is_some());

    let again = send(&app, keyed(&w, "pg-1", json!({"provider": "local"}))).await;
    again.expect_ok(200);
    assert_eq!(again.headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(again.text, first.text);
    send(
        &app,
        keyed(&w, "pg-1", json!({"provider": "local", "timeout": 60})),
    )
    .await
    .expect_error(422, "idempotency_conflict");
    assert_eq!(s.count("create"), 1);
    // The same key in another project is independent.
    let other = format!("Bearer {}", w.other_project_key("other").await);
    gate.add_permits(1);
    let r = send(
        &app,
        keyed(&w, "pg-1", json!({"provider": "local"})).insert_header(("Authorization", other)),
    )
    .await;
    r.expect_ok(201);
    assert_ne!(r.json["id"], first.json["id"]);
}

#[actix_web::test]
async fn on_postgres_twenty_concurrent_creates_with_one_key_make_exactly_one_sandbox() {
    let Some((_db, w)) = pg_world(
        "twenty_concurrent_creates_one_key",
        |_| Providers::new(),
        ServiceConfig::default(),
    )
    .await
    else {
        return;
    };
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let all = futures::future::join_all(
        (0..20).map(|_| send(&app, keyed(&w, "same", json!({"provider": "local"})))),
    )
    .await;
    let mut ids = BTreeSet::new();
    for r in &all {
        match r.status.as_u16() {
            200 | 201 => {
                ids.insert(r.json["id"].as_str().unwrap().to_owned());
            }
            409 => assert_eq!(r.code(), "idempotency_in_progress", "{}", r.text),
            other => panic!("unexpected {other}: {}", r.text),
        }
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(all.iter().filter(|r| r.status == 201).count(), 1);
    let page = send(&app, get(&w, "/v1/sandboxes")).await;
    let items = page.expect_ok(200)["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["id"], ids.first().unwrap().as_str());
}

#[actix_web::test]
async fn on_postgres_lists_page_newest_first_and_a_tombstone_stays_listed() {
    let Some((_db, w)) = pg_world(
        "list_pages_and_tombstone",
        |_| Providers::new(),
        ServiceConfig::default(),
    )
    .await
    else {
        return;
    };
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        let r = send(
            &app,
            post(&w, "/v1/sandboxes", json!({"provider": "local"})),
        )
        .await;
        ids.push(r.expect_ok(201)["id"].as_str().unwrap().to_owned());
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/sandboxes?limit=2&cursor={c}"),
            None => "/v1/sandboxes?limit=2".to_owned(),
        };
        let page = send(&app, get(&w, &path)).await;
        let body = page.expect_ok(200);
        let items = body["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        seen.extend(items.iter().map(|i| i["id"].as_str().unwrap().to_owned()));
        pages += 1;
        match body["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    assert_eq!(pages, 3);

    // Delete the middle one: the tombstone answers get and a second delete, stays in its
    // place in the list, and exec on it is not found.
    let doomed = ids[2].clone();
    let gone = send(&app, delete(&w, &format!("/v1/sandboxes/{doomed}"))).await;
    let gone = gone.expect_ok(200).clone();
    assert_eq!(gone["status"], "deleted");
    assert!(gone["deletedAt"].is_string());
    let again = send(&app, delete(&w, &format!("/v1/sandboxes/{doomed}"))).await;
    assert_eq!(again.expect_ok(200), &gone);
    let tomb = send(&app, get(&w, &format!("/v1/sandboxes/{doomed}"))).await;
    assert_eq!(tomb.expect_ok(200), &gone);
    let page = send(&app, get(&w, "/v1/sandboxes")).await;
    let items = page.expect_ok(200)["items"].as_array().unwrap();
    let listed: Vec<&str> = items.iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(listed, ids);
    // A list item is the summary (no createdAt/updatedAt); its state is the tombstone's.
    for field in ["id", "status", "deletedAt", "statusObservedAt"] {
        assert_eq!(items[2][field], gone[field], "{field}");
    }
    send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{doomed}/exec"),
            json!({"command": "true"}),
        ),
    )
    .await
    .expect_error(404, "sandbox_not_found");
}
