//! Morph Cloud's REST API on loopback, for tests (feature `fake`).
//!
//! Checks requests as Morph does (bearer key, `snapshot_id` query, JSON field types and the
//! `ttl_action` enum, FastAPI-style `422 {"detail": …}` otherwise) and answers with Morph's
//! shapes. Exec joins the `command` words with spaces and runs them with the host's `sh` in a
//! per-instance temporary directory (SSH-exec semantics); there is no file
//! endpoint, as on Morph. A new instance is `pending` until it is first observed, then `ready`.
//! A TTL runs from the start: at expiry `stop` deletes the instance and `pause` pauses it.
//!
//! Lifecycle, as the SDK (`morphcloud/api.py`) and Morph's pause documentation describe it:
//! `pause` is synchronous (a `ready` instance is `paused` when it answers; a paused one is
//! answered unchanged) and a paused instance refuses exec; `resume` makes a paused instance
//! `ready` (an instance that is not paused is refused with `409`: Morph does not document this
//! case). `POST /instance/{id}/snapshot` copies the instance's directory at the call and
//! answers a `Snapshot` that is `pending` until it is first read (`GET /snapshot/{id}`), then
//! `ready`; an instance started from it (`POST /instance?snapshot_id=`) gets a copy of that
//! directory; `DELETE /snapshot/{id}` removes it (then `404`). Snapshot ids the fake did not
//! make are base images: their instances start with an empty directory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use corral_domain::{CreateSandboxRequest, Provider, ProviderContext};
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::host_shell::{RunOutcome, run_command};
use corral_provider_testkit::plumbing::copy_tree;
use serde_json::{Value, json};

struct FakeInstance {
    dir: tempfile::TempDir,
    body: Value,
    started: Instant,
}

/// A snapshot taken of an instance: a copy of its directory.
struct FakeSnapshot {
    dir: tempfile::TempDir,
    body: Value,
}

struct Shared {
    api_key: String,
    next: AtomicU64,
    instances: Mutex<HashMap<String, FakeInstance>>,
    snapshots: Mutex<HashMap<String, FakeSnapshot>>,
}

type St = State<Arc<Shared>>;

fn detail(status: StatusCode, detail: impl Into<Value>) -> Response {
    (status, axum::Json(json!({ "detail": detail.into() }))).into_response()
}

fn invalid(loc: &[&str], msg: &str) -> Response {
    detail(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!([{ "loc": loc, "msg": msg, "type": "value_error" }]),
    )
}

/// The instance table, with every TTL that ran out applied first: `stop` deletes the instance,
/// `pause` pauses it.
#[allow(clippy::expect_used)] // A poisoned lock means a handler panicked: the test already failed.
fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, HashMap<String, FakeInstance>> {
    let mut instances = shared.instances.lock().expect("instances lock");
    instances.retain(|_, i| {
        let Some(ttl) = i.body["ttl"]["ttl_seconds"].as_u64() else {
            return true;
        };
        if i.started.elapsed() < Duration::from_secs(ttl) {
            return true;
        }
        if i.body["ttl"]["ttl_action"] == "pause" {
            i.body["status"] = json!("paused");
            true
        } else {
            false
        }
    });
    instances
}

async fn auth(State(shared): St, headers: HeaderMap, req: Request, next: Next) -> Response {
    match headers.get("authorization").and_then(|v| v.to_str().ok()) {
        // FastAPI's HTTPBearer answers a missing header with 403.
        None => detail(StatusCode::FORBIDDEN, "Not authenticated"),
        Some(v) if v.strip_prefix("Bearer ") == Some(shared.api_key.as_str()) => {
            next.run(req).await
        }
        Some(_) => detail(StatusCode::UNAUTHORIZED, "Invalid API key"),
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn start_instance(
    State(shared): St,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let Some(snapshot_id) = query.get("snapshot_id").filter(|s| !s.is_empty()) else {
        return invalid(&["query", "snapshot_id"], "Field required");
    };
    let body: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            _ => return invalid(&["body"], "Input should be a valid dictionary"),
        }
    };
    let metadata = match &body["metadata"] {
        Value::Null => json!({}),
        Value::Object(m) if m.values().all(Value::is_string) => Value::Object(m.clone()),
        _ => return invalid(&["body", "metadata"], "Input should be a dict of strings"),
    };
    let ttl_seconds = match &body["ttl_seconds"] {
        Value::Null => None,
        Value::Number(n) => match n.as_u64() {
            Some(s) if s > 0 => Some(s),
            _ => {
                return invalid(
                    &["body", "ttl_seconds"],
                    "ttl_seconds must be greater than zero",
                );
            }
        },
        _ => return invalid(&["body", "ttl_seconds"], "Input should be a valid integer"),
    };
    let ttl_action = match &body["ttl_action"] {
        Value::Null => "stop".to_owned(),
        Value::String(s) if s == "stop" || s == "pause" => s.clone(),
        _ => return invalid(&["body", "ttl_action"], "Input should be 'stop' or 'pause'"),
    };
    let Ok(dir) = tempfile::tempdir() else {
        return detail(StatusCode::INTERNAL_SERVER_ERROR, "no temp dir");
    };
    // An instance started from a snapshot the fake took starts with a copy of its directory.
    let image_id = {
        let snapshots = lock_snapshots(&shared);
        match snapshots.get(snapshot_id.as_str()) {
            Some(snap) if snap.body["status"] != "ready" => {
                return detail(StatusCode::CONFLICT, "Snapshot is not ready");
            }
            Some(snap) => {
                if let Err(e) = copy_tree(snap.dir.path(), dir.path()) {
                    return detail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
                }
                snap.body["refs"]["image_id"].clone()
            }
            None => json!("morphvm-minimal"),
        }
    };
    let id = format!(
        "morphvm_{:08x}",
        shared.next.fetch_add(1, Ordering::Relaxed)
    );
    let created = now();
    let instance = json!({
        "id": id,
        "object": "instance",
        "created": created,
        "status": "pending",
        "spec": { "vcpus": 1, "memory": 4096, "disk_size": 8192 },
        "refs": { "snapshot_id": snapshot_id, "image_id": image_id },
        "networking": { "internal_ip": "10.0.0.2", "http_services": [] },
        "ttl": {
            "ttl_seconds": ttl_seconds,
            "ttl_expire_at": ttl_seconds.map(|s| created + s),
            "ttl_action": ttl_action,
        },
        "wake_on": { "wake_on_ssh": false, "wake_on_http": false },
        "metadata": metadata,
    });
    lock(&shared).insert(
        id,
        FakeInstance {
            dir,
            body: instance.clone(),
            started: Instant::now(),
        },
    );
    (StatusCode::OK, axum::Json(instance)).into_response()
}

async fn get_instance(State(shared): St, Path(id): Path<String>) -> Response {
    let mut instances = lock(&shared);
    let Some(inst) = instances.get_mut(&id) else {
        return detail(StatusCode::NOT_FOUND, "Instance not found");
    };
    let seen = inst.body.clone();
    // Booting takes one observation.
    if inst.body["status"] == "pending" {
        inst.body["status"] = json!("ready");
    }
    axum::Json(seen).into_response()
}

async fn list_instances(
    State(shared): St,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let mut filters = Vec::new();
    for (k, v) in &query {
        match k
            .strip_prefix("metadata[")
            .and_then(|r| r.strip_suffix(']'))
        {
            Some(key) => filters.push((key.to_owned(), v.clone())),
            None => return invalid(&["query", k], "Unknown query parameter"),
        }
    }
    let data: Vec<Value> = lock(&shared)
        .values()
        .filter(|i| {
            filters
                .iter()
                .all(|(k, v)| i.body["metadata"][k].as_str() == Some(v))
        })
        .map(|i| i.body.clone())
        .collect();
    axum::Json(json!({ "data": data })).into_response()
}

async fn delete_instance(State(shared): St, Path(id): Path<String>) -> Response {
    match lock(&shared).remove(&id) {
        Some(_) => axum::Json(json!({})).into_response(),
        None => detail(StatusCode::NOT_FOUND, "Instance not found"),
    }
}

async fn exec(State(shared): St, Path(id): Path<String>, body: Bytes) -> Response {
    let argv: Vec<String> = match serde_json::from_slice::<Value>(&body) {
        Ok(v) => match v["command"].as_array() {
            Some(items) if !items.is_empty() && items.iter().all(Value::is_string) => items
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect(),
            _ => return invalid(&["body", "command"], "Input should be a list of strings"),
        },
        Err(_) => return invalid(&["body"], "JSON decode error"),
    };
    let dir = {
        let instances = lock(&shared);
        let Some(inst) = instances.get(&id) else {
            return detail(StatusCode::NOT_FOUND, "Instance not found");
        };
        if inst.body["status"] != "ready" {
            return detail(StatusCode::CONFLICT, "Instance is not ready");
        }
        inst.dir.path().to_owned()
    };
    // As Morph's SDK usage shows (`exec("a && b")` is sent as `["a && b"]`), the words are
    // joined with spaces and run by a shell, as SSH's exec does.
    let line = argv.join(" ");
    let env = std::collections::BTreeMap::new();
    match run_command(&line, &dir, &env, Duration::from_secs(3600), 64 << 20).await {
        Ok(RunOutcome::Finished(out)) => axum::Json(json!({
            "exit_code": out.exit_code,
            "stdout": String::from_utf8_lossy(&out.stdout),
            "stderr": String::from_utf8_lossy(&out.stderr),
        }))
        .into_response(),
        Ok(RunOutcome::TimedOut) => detail(StatusCode::GATEWAY_TIMEOUT, "exec timed out"),
        Err(e) => detail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[allow(clippy::expect_used)] // A poisoned lock means a handler panicked: the test already failed.
fn lock_snapshots(shared: &Shared) -> std::sync::MutexGuard<'_, HashMap<String, FakeSnapshot>> {
    shared.snapshots.lock().expect("snapshots lock")
}

/// `POST /instance/{id}/pause`: synchronous; a paused instance is answered unchanged.
async fn pause_instance(State(shared): St, Path(id): Path<String>) -> Response {
    let mut instances = lock(&shared);
    let Some(inst) = instances.get_mut(&id) else {
        return detail(StatusCode::NOT_FOUND, "Instance not found");
    };
    match inst.body["status"].as_str() {
        Some("ready") => inst.body["status"] = json!("paused"),
        Some("paused") => {}
        _ => return detail(StatusCode::CONFLICT, "Instance is not ready"),
    }
    axum::Json(inst.body.clone()).into_response()
}

/// `POST /instance/{id}/resume`: a paused instance is `ready` again.
async fn resume_instance(State(shared): St, Path(id): Path<String>) -> Response {
    let mut instances = lock(&shared);
    let Some(inst) = instances.get_mut(&id) else {
        return detail(StatusCode::NOT_FOUND, "Instance not found");
    };
    if inst.body["status"] != "paused" {
        return detail(StatusCode::CONFLICT, "Instance is not paused");
    }
    inst.body["status"] = json!("ready");
    axum::Json(inst.body.clone()).into_response()
}

/// `POST /instance/{id}/snapshot[?digest=]` `{metadata?, ttl_seconds?}`.
async fn snapshot_instance(
    State(shared): St,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    if let Some(k) = query.keys().find(|k| k.as_str() != "digest") {
        return invalid(&["query", k], "Unknown query parameter");
    }
    let body: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            _ => return invalid(&["body"], "Input should be a valid dictionary"),
        }
    };
    let metadata = match &body["metadata"] {
        Value::Null => json!({}),
        Value::Object(m) if m.values().all(Value::is_string) => Value::Object(m.clone()),
        _ => return invalid(&["body", "metadata"], "Input should be a dict of strings"),
    };
    let ttl_seconds = match &body["ttl_seconds"] {
        Value::Null => None,
        v => match v.as_u64() {
            Some(s) if s > 0 => Some(s),
            _ => {
                return invalid(
                    &["body", "ttl_seconds"],
                    "ttl_seconds must be greater than zero",
                );
            }
        },
    };
    let (home, image_id) = {
        let instances = lock(&shared);
        let Some(inst) = instances.get(&id) else {
            return detail(StatusCode::NOT_FOUND, "Instance not found");
        };
        if inst.body["status"] != "ready" && inst.body["status"] != "paused" {
            return detail(StatusCode::CONFLICT, "Instance is not ready");
        }
        (
            inst.dir.path().to_owned(),
            inst.body["refs"]["image_id"].clone(),
        )
    };
    let Ok(dir) = tempfile::tempdir() else {
        return detail(StatusCode::INTERNAL_SERVER_ERROR, "no temp dir");
    };
    if let Err(e) = copy_tree(&home, dir.path()) {
        return detail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    }
    let sid = format!(
        "snapshot_fake{:08x}",
        shared.next.fetch_add(1, Ordering::Relaxed)
    );
    let created = now();
    let snapshot = json!({
        "id": sid,
        "object": "snapshot",
        "created": created,
        "status": "pending",
        "spec": { "vcpus": 1, "memory": 4096, "disk_size": 8192 },
        "refs": { "image_id": image_id },
        "digest": query.get("digest"),
        "metadata": metadata,
        "ttl": {
            "ttl_seconds": ttl_seconds,
            "ttl_expire_at": ttl_seconds.map(|s| created + s),
        },
    });
    lock_snapshots(&shared).insert(
        sid,
        FakeSnapshot {
            dir,
            body: snapshot.clone(),
        },
    );
    axum::Json(snapshot).into_response()
}

/// `GET /snapshot/{id}`: `pending` for the first read, then `ready`.
async fn get_snapshot(State(shared): St, Path(id): Path<String>) -> Response {
    let mut snapshots = lock_snapshots(&shared);
    let Some(snap) = snapshots.get_mut(&id) else {
        return detail(StatusCode::NOT_FOUND, "Snapshot not found");
    };
    let seen = snap.body.clone();
    if snap.body["status"] == "pending" {
        snap.body["status"] = json!("ready");
    }
    axum::Json(seen).into_response()
}

/// `DELETE /snapshot/{id}`: the copy is removed.
async fn delete_snapshot(State(shared): St, Path(id): Path<String>) -> Response {
    match lock_snapshots(&shared).remove(&id) {
        Some(_) => axum::Json(json!({})).into_response(),
        None => detail(StatusCode::NOT_FOUND, "Snapshot not found"),
    }
}

/// Morph's API as an axum router accepting only `api_key`.
pub fn router(api_key: &str) -> Router {
    let shared = Arc::new(Shared {
        api_key: api_key.to_owned(),
        next: AtomicU64::new(1),
        instances: Mutex::new(HashMap::new()),
        snapshots: Mutex::new(HashMap::new()),
    });
    let api = Router::new()
        .route("/instance", post(start_instance).get(list_instances))
        .route("/instance/{id}", get(get_instance).delete(delete_instance))
        .route("/instance/{id}/exec", post(exec))
        .route("/instance/{id}/pause", post(pause_instance))
        .route("/instance/{id}/resume", post(resume_instance))
        .route("/instance/{id}/snapshot", post(snapshot_instance))
        .route("/snapshot/{id}", get(get_snapshot).delete(delete_snapshot))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), auth))
        .with_state(shared);
    // Morph's base URL carries the `/api` prefix.
    Router::new().nest("/api", api)
}

/// The API key the fake accepts.
pub const API_KEY: &str = "morph_fake_key_0123";
/// The snapshot [`Fake::config`] boots when a create names none.
pub const SNAPSHOT: &str = "snapshot_corraltest";

/// Morph's API served on a loopback port, accepting [`API_KEY`] (or the key it was started
/// with).
pub struct Fake {
    server: FakeServer,
    api_key: String,
}

impl Fake {
    /// Starts the fake.
    pub async fn start() -> Self {
        Self::start_with_key(API_KEY).await
    }

    /// Starts the fake accepting `api_key` instead (tests that look for a canary key).
    pub async fn start_with_key(api_key: &str) -> Self {
        Self {
            server: FakeServer::start(router(api_key)).await,
            api_key: api_key.to_owned(),
        }
    }

    /// The HTTP server: request log and fault injection.
    pub fn server(&self) -> &FakeServer {
        &self.server
    }

    /// The adapter's base URL: the server's address plus Morph's `/api` prefix.
    pub fn base_url(&self) -> String {
        format!("{}/api", self.server.base_url())
    }

    /// The adapter's configuration pointed at the fake, booting [`SNAPSHOT`] by default.
    pub fn config(&self) -> crate::MorphConfig {
        crate::MorphConfig {
            base_url: self.base_url(),
            default_snapshot_id: Some(SNAPSHOT.into()),
            ..Default::default()
        }
    }

    /// A call context carrying the key the fake accepts.
    pub fn context(&self) -> CallContext {
        CallContext::new(
            Some(SecretString::from(self.api_key.clone())),
            ProviderContext::default(),
        )
    }
}

#[async_trait::async_trait]
impl Harness for Fake {
    fn lists_by_tag() -> bool {
        true
    }

    type Adapter = crate::MorphProvider;

    async fn start() -> Self {
        Fake::start().await
    }

    fn server(&self) -> &FakeServer {
        &self.server
    }

    fn base_url(&self) -> String {
        Fake::base_url(self)
    }

    fn config_at(&self, base_url: &str, http: HttpConfig) -> crate::MorphConfig {
        crate::MorphConfig {
            base_url: base_url.to_owned(),
            http,
            ..self.config()
        }
    }

    fn context(&self) -> CallContext {
        Fake::context(self)
    }

    fn create_call() -> (Method, &'static str) {
        (Method::POST, "/api/instance")
    }

    fn get_call() -> (Method, &'static str) {
        (Method::GET, "/api/instance/")
    }

    fn unknown_id() -> &'static str {
        "morphvm_nope"
    }

    /// `CORRAL_LIVE_MORPH_API_KEY` and `CORRAL_LIVE_MORPH_SNAPSHOT_ID` (the snapshot to boot).
    fn live() -> Result<(crate::MorphConfig, CallContext, CreateSandboxRequest), String> {
        let (Ok(key), Ok(snapshot)) = (
            std::env::var("CORRAL_LIVE_MORPH_API_KEY"),
            std::env::var("CORRAL_LIVE_MORPH_SNAPSHOT_ID"),
        ) else {
            return Err("CORRAL_LIVE_MORPH_API_KEY and CORRAL_LIVE_MORPH_SNAPSHOT_ID".into());
        };
        let config = crate::MorphConfig {
            default_snapshot_id: Some(snapshot),
            ..crate::MorphConfig::default()
        };
        let ctx = CallContext::new(Some(SecretString::from(key)), ProviderContext::default());
        Ok((
            config,
            ctx,
            CreateSandboxRequest::standard(Provider::Morph, None, None),
        ))
    }
}
