//! The sandbox lifecycle through the real binary on `local` (issue 32): stop → resume keeps
//! files and frees the sandbox's processes, a call on a stopped sandbox is `sandbox_stopped`,
//! snapshot → write → restore sees the old content, a keyed fork ×3 gives three independent
//! sandboxes and its retry makes none more, an idle sandbox is stopped, and every step is in
//! `/v1/events`. On SQLite and on a fresh PostgreSQL schema.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use corral_registry::testing::TestDb;
use serde_json::{Value, json};

use crate::serve::{Server, create_project, start};

struct World {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    config: PathBuf,
    key: Option<String>,
    _db: Option<TestDb>,
}

impl World {
    fn new(db: Option<TestDb>) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let config = tmp.path().join("corral.toml");
        let database = db
            .as_ref()
            .map(|db| format!("database_url = \"{}\"\n", db.url()))
            .unwrap_or_default();
        std::fs::write(
            &config,
            format!("{database}[providers]\nenabled = [\"local\"]\n"),
        )
        .unwrap();
        // On PostgreSQL the first start prints no key: make the project beforehand.
        let key = db
            .as_ref()
            .map(|db| create_project(&data, db.url(), "default").1);
        Self {
            _tmp: tmp,
            data,
            config,
            key,
            _db: db,
        }
    }
}

struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Api {
    fn new(server: &Server, key: String) -> Self {
        Self {
            http: reqwest::Client::new(),
            base: server.base.clone(),
            key,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_keyed(method, path, body, None).await
    }

    async fn call_keyed(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .timeout(Duration::from_secs(120));
        if let Some(body) = body {
            req = req.json(&body);
        }
        if let Some(key) = key {
            req = req.header("Idempotency-Key", key);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> Value {
        let (status, body) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    async fn create(&self, body: Value) -> String {
        let (status, made) = self.post("/v1/sandboxes", body).await;
        assert_eq!(status, 201, "{made}");
        let id = made["id"].as_str().unwrap().to_owned();
        self.wait_status(&id, "running").await;
        id
    }

    async fn wait_status(&self, id: &str, want: &str) {
        let start = Instant::now();
        loop {
            let seen = self.get(&format!("/v1/sandboxes/{id}")).await;
            if seen["status"] == want {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "{id} stayed {} (wanted {want})",
                seen["status"]
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn exec(&self, id: &str, command: &str) -> (u16, Value) {
        self.post(
            &format!("/v1/sandboxes/{id}/exec"),
            json!({ "command": command }),
        )
        .await
    }

    async fn cat(&self, id: &str) -> String {
        let (status, out) = self.exec(id, "cat keep.txt").await;
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["exitCode"], 0, "{out}");
        out["stdout"].as_str().unwrap().to_owned()
    }

    async fn put(&self, id: &str, content: &str) {
        let (status, out) = self
            .exec(id, &format!("printf '%s' '{content}' > keep.txt"))
            .await;
        assert_eq!((status, &out["exitCode"]), (200, &json!(0)), "{out}");
    }

    async fn ready_snapshot(&self, snapshot: &Value) -> String {
        let id = snapshot["id"].as_str().unwrap().to_owned();
        let start = Instant::now();
        loop {
            let seen = self.get(&format!("/v1/snapshots/{id}")).await;
            match seen["status"].as_str().unwrap() {
                "ready" => return id,
                "creating" if start.elapsed() < Duration::from_secs(60) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => panic!("snapshot {id} is {other}: {seen}"),
            }
        }
    }

    async fn events(&self) -> Vec<Value> {
        let page = self.get("/v1/events?limit=500").await;
        page["items"].as_array().unwrap().clone()
    }
}

/// Host processes whose command line contains `needle`.
fn processes_with(needle: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| {
            String::from_utf8_lossy(c)
                .replace('\0', " ")
                .contains(needle)
        })
        .count()
}

async fn journey(db: Option<TestDb>) {
    let w = World::new(db);
    let server = start(&w.data, &w.config, 1);
    let key = w.key.clone().unwrap_or_else(|| server.first_key());
    let api = Api::new(&server, key);
    let caps = api.get("/v1/providers").await;
    let local = caps["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["provider"] == "local")
        .unwrap()
        .clone();
    assert_eq!(local["supportsExplicitStop"], true, "{local}");
    assert_eq!(local["supportsSnapshots"], true, "{local}");
    assert_eq!(local["supportsRestore"], true, "{local}");

    let id = api.create(json!({ "provider": "local" })).await;
    api.put(&id, "v1").await;
    // A running command that only a stop can end (a unique duration to find it by).
    let marker = format!("sleep 4{}.25", std::process::id() % 100_000);
    let (status, out) = api
        .post(
            &format!("/v1/sandboxes/{id}/commands"),
            json!({ "command": marker }),
        )
        .await;
    assert_eq!(status, 201, "{out}");
    let seen = Instant::now();
    while processes_with(&marker) == 0 {
        assert!(
            seen.elapsed() < Duration::from_secs(10),
            "the command never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Stop: the sandbox's processes end, calls are refused, a second stop changes nothing.
    let (status, stopped) = api
        .post(&format!("/v1/sandboxes/{id}/stop"), json!({}))
        .await;
    assert_eq!(status, 200, "{stopped}");
    assert!(
        ["stopping", "stopped"].contains(&stopped["status"].as_str().unwrap()),
        "{stopped}"
    );
    api.wait_status(&id, "stopped").await;
    assert_eq!(processes_with(&marker), 0, "a process outlived the stop");
    let (status, refused) = api.exec(&id, "true").await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "sandbox_stopped", "{refused}");
    let (status, again) = api
        .post(&format!("/v1/sandboxes/{id}/stop"), json!({}))
        .await;
    assert_eq!((status, again["status"].as_str()), (200, Some("stopped")));

    // Resume: the file is there.
    let (status, resumed) = api
        .post(&format!("/v1/sandboxes/{id}/resume"), json!({}))
        .await;
    assert_eq!(status, 200, "{resumed}");
    api.wait_status(&id, "running").await;
    assert_eq!(api.cat(&id).await, "v1");

    // Snapshot → write → restore sees the old content; the original keeps the new one.
    let (status, snap) = api
        .post(
            &format!("/v1/sandboxes/{id}/snapshots"),
            json!({ "name": "before v2" }),
        )
        .await;
    assert_eq!(status, 201, "{snap}");
    assert_eq!(snap["name"], "before v2");
    assert_eq!(snap["sandboxId"], id.as_str());
    let snap_id = api.ready_snapshot(&snap).await;
    assert!(snap_id.starts_with("snp_local_"), "{snap_id}");
    api.put(&id, "v2").await;
    let restored = api
        .create(json!({ "provider": "local", "snapshot": snap_id }))
        .await;
    let record = api.get(&format!("/v1/sandboxes/{restored}")).await;
    assert_eq!(record["snapshotId"], snap_id.as_str(), "{record}");
    assert_eq!(api.cat(&restored).await, "v1");
    assert_eq!(api.cat(&id).await, "v2");
    // A restore is made on the snapshot's own provider.
    let elsewhere = snap_id.replace("snp_local_", "snp_e2b_");
    let (status, refused) = api
        .post(
            "/v1/sandboxes",
            json!({ "provider": "local", "snapshot": elsewhere }),
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "provider_invalid_request");

    // Fork ×3 with a key: three independent copies; the retry replays, making none more.
    let (status, fork) = api
        .call_keyed(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/fork"),
            Some(json!({ "count": 3 })),
            Some("fork-three"),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    let copies: Vec<String> = fork["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(copies.len(), 3, "{fork}");
    let (status, replay) = api
        .call_keyed(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/fork"),
            Some(json!({ "count": 3 })),
            Some("fork-three"),
        )
        .await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay, fork);
    for (i, copy) in copies.iter().enumerate() {
        api.wait_status(copy, "running").await;
        assert_eq!(api.cat(copy).await, "v2");
        api.put(copy, &format!("copy{i}")).await;
    }
    for (i, copy) in copies.iter().enumerate() {
        assert_eq!(api.cat(copy).await, format!("copy{i}"));
    }
    assert_eq!(api.cat(&id).await, "v2");
    let listed = api.get("/v1/sandboxes?limit=200").await;
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        5,
        "the original, the restore and three copies: {listed}"
    );

    // Snapshots are listed (the fork's too) and deleted into tombstones.
    let snaps = api.get("/v1/snapshots").await;
    assert_eq!(snaps["items"].as_array().unwrap().len(), 2, "{snaps}");
    let (status, tomb) = api
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/snapshots/{snap_id}"),
            None,
        )
        .await;
    assert_eq!(
        (status, tomb["status"].as_str()),
        (200, Some("deleted")),
        "{tomb}"
    );
    let (status, gone) = api
        .post(
            "/v1/sandboxes",
            json!({ "provider": "local", "snapshot": snap_id }),
        )
        .await;
    assert_eq!(status, 422, "a deleted snapshot cannot be restored: {gone}");

    // Every step is in the event log.
    let events = api.events().await;
    let has = |kind: &str, reason: Option<&str>| {
        events
            .iter()
            .any(|e| e["type"] == kind && reason.is_none_or(|r| e["reason"] == r))
    };
    assert!(has("sandbox.stopped", Some("requested")), "{events:?}");
    assert!(has("sandbox.resumed", Some("requested")), "{events:?}");
    assert!(has("snapshot.created", None), "{events:?}");
    assert!(has("snapshot.deleted", None), "{events:?}");

    for sandbox in copies.iter().chain([&restored, &id]) {
        let (status, _) = api
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/sandboxes/{sandbox}"),
                None,
            )
            .await;
        assert_eq!(status, 200);
    }
    let snaps = api.get("/v1/snapshots").await;
    for s in snaps["items"].as_array().unwrap() {
        let sid = s["id"].as_str().unwrap();
        let (status, _) = api
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/snapshots/{sid}"),
                None,
            )
            .await;
        assert_eq!(status, 200);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_sqlite_local_sandboxes_stop_resume_snapshot_restore_and_fork() {
    journey(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_local_sandboxes_stop_resume_snapshot_restore_and_fork() {
    let Some(db) = TestDb::postgres("lifecycle::journey").await else {
        return;
    };
    journey(Some(db)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_sandbox_is_stopped_and_an_auto_resume_one_wakes_on_use() {
    let w = World::new(None);
    let server = start(&w.data, &w.config, 1);
    let api = Api::new(&server, server.first_key());
    let idle = api
        .create(json!({ "provider": "local", "idleStopSeconds": 60, "autoResume": true }))
        .await;
    api.put(&idle, "before the nap").await;
    // The shortest idle stop is a minute; the sweep runs every few seconds.
    let start_wait = Instant::now();
    loop {
        let listed = api.get("/v1/sandboxes").await;
        let rec = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == idle.as_str())
            .unwrap()
            .clone();
        if rec["status"] == "stopped" {
            break;
        }
        assert!(
            start_wait.elapsed() < Duration::from_secs(100),
            "an idle sandbox was not stopped: {rec}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let events = api.events().await;
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "sandbox.stopped" && e["reason"] == "idle"),
        "{events:?}"
    );
    // autoResume: the next call resumes it first and sees the file.
    assert_eq!(api.cat(&idle).await, "before the nap");
    let events = api.events().await;
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "sandbox.resumed" && e["reason"] == "auto_resume"),
        "{events:?}"
    );
    let (status, _) = api
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/sandboxes/{idle}"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    server.stop();
}

/// The new surface under attack: another project's sandboxes and snapshots answer exactly as
/// missing ones (read, delete, restore, stop, fork), no key is no entry, and a burst of
/// concurrent snapshots of one sandbox gets only clean answers, each one counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_projects_snapshots_are_invisible_and_a_burst_of_snapshots_stays_clean() {
    let w = World::new(None);
    let server = start(&w.data, &w.config, 1);
    let owner = Api::new(&server, server.first_key());
    let url = format!("sqlite://{}", w.data.join("corral.db").display());
    let stranger = Api::new(&server, create_project(&w.data, &url, "other").1);
    let id = owner.create(json!({ "provider": "local" })).await;
    let (status, snap) = owner
        .post(&format!("/v1/sandboxes/{id}/snapshots"), json!({}))
        .await;
    assert_eq!(status, 201, "{snap}");
    let snap_id = owner.ready_snapshot(&snap).await;

    let missing = |(status, body): (u16, Value), code: &str| {
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["error"]["code"], code, "{body}");
    };
    missing(
        stranger
            .call(
                reqwest::Method::GET,
                &format!("/v1/snapshots/{snap_id}"),
                None,
            )
            .await,
        "snapshot_not_found",
    );
    missing(
        stranger
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/snapshots/{snap_id}"),
                None,
            )
            .await,
        "snapshot_not_found",
    );
    missing(
        stranger
            .post(
                "/v1/sandboxes",
                json!({ "provider": "local", "snapshot": snap_id }),
            )
            .await,
        "snapshot_not_found",
    );
    for op in ["stop", "resume", "snapshots", "fork"] {
        missing(
            stranger
                .post(&format!("/v1/sandboxes/{id}/{op}"), json!({}))
                .await,
            "sandbox_not_found",
        );
    }
    // Bodies are objects or nothing; a snapshot's name is printable.
    for body in [
        json!([]),
        json!("x"),
        json!({ "name": "a\u{80}b" }),
        json!({ "copies": 2 }),
    ] {
        let (status, refused) = owner
            .post(&format!("/v1/sandboxes/{id}/snapshots"), body.clone())
            .await;
        assert_eq!(status, 400, "{body} answered {refused}");
    }
    let (status, refused) = owner
        .call(
            reqwest::Method::GET,
            "/v1/snapshots?cursor=0_sbx_e2b_00000000000000000000000000",
            None,
        )
        .await;
    assert_eq!(
        status, 400,
        "a sandbox cursor is not a snapshot cursor: {refused}"
    );
    let theirs = stranger.get("/v1/snapshots").await;
    assert_eq!(theirs["items"], json!([]), "{theirs}");
    let anonymous = reqwest::Client::new()
        .post(format!("{}/v1/sandboxes/{id}/snapshots", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);

    // A burst: every answer is a snapshot or a clean refusal, never a server failure.
    const BURST: usize = 12;
    let path = format!("/v1/sandboxes/{id}/snapshots");
    let answers = futures::future::join_all(
        (0..BURST).map(|i| owner.post(&path, json!({ "name": format!("burst {i}") }))),
    )
    .await;
    let made = answers.iter().filter(|(status, _)| *status == 201).count();
    for (status, body) in &answers {
        assert!(
            [201, 429, 503].contains(status),
            "a burst answered {status}: {body}"
        );
    }
    let listed = owner.get("/v1/snapshots?limit=200").await;
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        made + 1,
        "every snapshot answered is listed, and no other: {listed}"
    );
    let health = reqwest::get(format!("{}/healthz", server.base))
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);

    for s in listed["items"].as_array().unwrap() {
        let sid = s["id"].as_str().unwrap();
        let (status, _) = owner
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/snapshots/{sid}"),
                None,
            )
            .await;
        assert_eq!(status, 200);
    }
    let (status, _) = owner
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/sandboxes/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    server.stop();
}
