//! A fake of E2B on loopback, for tests: the control API on one server and envd on another
//! (a separate host, as in production). It checks requests as E2B would — `X-API-Key` on the
//! control API, the per-sandbox `X-Access-Token` on envd (which identifies the sandbox),
//! required fields and types — applies E2B's 15 s default lifetime when no `timeout` is sent
//! and removes sandboxes whose lifetime ran out, and speaks Connect streaming for
//! `/process.Process/Start`. Commands run on the host (no isolation) in a per-sandbox
//! temporary directory.
//!
//! The lifecycle is E2B's (`provider-apis/e2b/openapi.yml`, with the API's handlers for the
//! status codes the description leaves out): `POST /sandboxes/{id}/pause` (`204`; `409` when
//! already paused) freezes the sandbox's processes, and its envd host then answers `409 The
//! sandbox is paused` as E2B's proxy does; a paused sandbox does not expire;
//! `POST /sandboxes/{id}/connect` resumes it (`201`, a new lifetime) or answers a running one
//! (`200`, its lifetime only extended). `POST /sandboxes/{id}/snapshots` copies the sandbox's
//! directory into a snapshot template (`<templateID>:default`; `404` for a paused sandbox,
//! which E2B's orchestrator does not hold), `GET /snapshots?name=` lists it, a create naming
//! it as `templateID` starts from a copy of that copy, and `DELETE /templates/{id}` removes
//! it (`404` once gone).
//!
//! Two of E2B's behaviours are on by default or one knob away, so the adapter cannot pass
//! without handling them:
//! - the metadata listing answers pages of at most [`PAGE_SIZE`] sandboxes (E2B: `limit`, at
//!   most 100) and names the next one in the `X-Next-Token` header, taken back as
//!   `nextToken`;
//! - [`Fake::set_envd_version`] makes new sandboxes run an old envd (below 0.4.0), which
//!   refuses requests that do not name a user: Connect calls without `Authorization: Basic`,
//!   `/files` without `username`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test double: a poisoned lock is a failed test.
#![allow(clippy::result_large_err)] // Handlers return ready-made responses as errors.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use corral_domain::OutputStream;
use corral_domain::{CreateSandboxRequest, Provider, ProviderContext};
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::background::{Process, Processes, SpawnSpec};
use corral_provider_testkit::fake::{FakeServer, parse_multipart};
use corral_provider_testkit::harness::Harness;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use serde_json::{Value, json};

use crate::E2bConfig;
use crate::connect::{self, END_STREAM};
use corral_provider_testkit::plumbing::{copy_tree, resolve};

/// The API key the fake accepts.
pub const API_KEY: &str = "e2b_fake0123456789abcdef";
/// E2B's server-side lifetime when a create sends no `timeout`.
pub const SERVER_DEFAULT_TIMEOUT_SECONDS: u64 = 15;
/// The envd version of new sandboxes unless [`Fake::set_envd_version`] says otherwise.
pub const ENVD_VERSION: &str = "0.5.7";
/// An envd version older than 0.4.0, which needs the user named on every request.
pub const OLD_ENVD_VERSION: &str = "0.3.9";
/// The largest page the metadata listing answers unless [`Fake::set_page_size`] says
/// otherwise: far below E2B's 100, so any lookup finding more than two sandboxes pages.
pub const PAGE_SIZE: usize = 2;
/// The users an envd knows (E2B's base image: `user`, the default, and `root`).
const USERS: [&str; 2] = ["user", "root"];

struct Sandbox {
    /// Creation order: the listing is newest first, and its tokens point into this order.
    seq: usize,
    template_id: String,
    metadata: BTreeMap<String, String>,
    token: String,
    envd_version: String,
    dir: tempfile::TempDir,
    expires: Instant,
    timeout_seconds: u64,
    /// The `domain` its answers carry (`null` unless [`Fake::set_domain`] said otherwise).
    domain: Option<String>,
    /// What its envd runs (killed with the sandbox).
    processes: Arc<EnvdProcesses>,
    /// `paused` (a pause froze its processes); else `running`.
    paused: bool,
}

/// A snapshot template: a copy of a sandbox's directory.
struct Snapshot {
    seq: usize,
    source: String,
    dir: tempfile::TempDir,
}

impl Sandbox {
    /// Whether this sandbox's envd needs the user named (below 0.4.0).
    fn needs_user(&self) -> bool {
        crate::client::envd_user(&self.envd_version).is_some()
    }
}

#[derive(Default)]
struct Inner {
    sandboxes: Mutex<HashMap<String, Sandbox>>,
    /// Snapshot templates by template id (without the tag).
    snapshots: Mutex<HashMap<String, Snapshot>>,
    next: AtomicUsize,
    chunk: AtomicUsize,
    page_size: AtomicUsize,
    envd_version: Mutex<String>,
    domain: Mutex<Option<String>>,
    /// `Connect` streams opened.
    connects: AtomicUsize,
    /// `SendInput` calls that reached a process.
    stdin_writes: AtomicUsize,
}

type Shared = Arc<Inner>;

/// E2B on loopback: the control API and envd, accepting [`API_KEY`].
pub struct Fake {
    /// The control API (`api.e2b.app`).
    control: FakeServer,
    /// envd (`49983-<id>.e2b.app`): one server for every sandbox, told apart by token.
    envd: FakeServer,
    inner: Shared,
}

impl Fake {
    /// Starts both servers.
    pub async fn start() -> Self {
        let inner: Shared = Arc::new(Inner::default());
        inner.chunk.store(64 * 1024, Ordering::SeqCst);
        inner.page_size.store(PAGE_SIZE, Ordering::SeqCst);
        *inner.envd_version.lock().unwrap() = ENVD_VERSION.to_owned();
        let control = FakeServer::start(control_router(inner.clone())).await;
        let envd = FakeServer::start(envd_router(inner.clone())).await;
        Self {
            control,
            envd,
            inner,
        }
    }

    /// The control API's server: request log and fault injection.
    pub fn server(&self) -> &FakeServer {
        &self.control
    }

    /// envd's server (every sandbox's): request log and fault injection.
    pub fn envd(&self) -> &FakeServer {
        &self.envd
    }

    /// The control API's base URL.
    pub fn base_url(&self) -> String {
        self.control.base_url()
    }

    /// A configuration pointing the adapter at this fake: the control API, and envd as every
    /// sandbox's envd host.
    pub fn config(&self) -> E2bConfig {
        E2bConfig {
            base_url: self.control.base_url(),
            envd_url_template: self.envd.base_url(),
            trusted_hosts: vec![self.envd.base_url()],
            ..E2bConfig::default()
        }
    }

    /// A call context carrying [`API_KEY`].
    pub fn context(&self) -> CallContext {
        CallContext::new(
            Some(SecretString::from(API_KEY)),
            ProviderContext::default(),
        )
    }

    /// Answers metadata listings in pages of at most `n` sandboxes.
    pub fn set_page_size(&self, n: usize) {
        self.inner.page_size.store(n.max(1), Ordering::SeqCst);
    }

    /// Sandboxes created from now on run envd `version` (see [`OLD_ENVD_VERSION`]).
    pub fn set_envd_version(&self, version: &str) {
        *self.inner.envd_version.lock().unwrap() = version.to_owned();
    }

    /// Sandboxes created from now on carry `domain` in their create and get answers (the
    /// envd host is then `49983-<id>.<domain>` under E2B's template), as a provider could
    /// answer anything there.
    pub fn set_domain(&self, domain: Option<&str>) {
        *self.inner.domain.lock().unwrap() = domain.map(str::to_owned);
    }

    /// Sends exec streams in pieces of `n` bytes (envelopes then straddle pieces).
    pub fn set_stream_chunk_size(&self, n: usize) {
        self.inner.chunk.store(n.max(1), Ordering::SeqCst);
    }

    /// How many `process.Process/Connect` streams envd opened.
    pub fn connects(&self) -> usize {
        self.inner.connects.load(Ordering::SeqCst)
    }

    /// How many `process.Process/SendInput` calls reached a process.
    pub fn stdin_writes(&self) -> usize {
        self.inner.stdin_writes.load(Ordering::SeqCst)
    }

    /// The processes a sandbox's envd runs now: (pid, tag).
    pub fn processes_of(&self, id: &str) -> Vec<(u32, Option<String>)> {
        let sandboxes = self.inner.sandboxes.lock().unwrap();
        let Some(s) = sandboxes.get(id) else {
            return Vec::new();
        };
        s.processes
            .table
            .list()
            .into_iter()
            .filter(|p| p.exit.is_none())
            .map(|p| (p.pid, p.spec.tag))
            .collect()
    }

    /// The envd access token of a sandbox, if it exists.
    pub fn token_of(&self, id: &str) -> Option<String> {
        self.inner
            .sandboxes
            .lock()
            .unwrap()
            .get(id)
            .map(|s| s.token.clone())
    }

    /// The lifetime (seconds) the fake applied to a sandbox, if it exists.
    pub fn lifetime_of(&self, id: &str) -> Option<u64> {
        self.inner
            .sandboxes
            .lock()
            .unwrap()
            .get(id)
            .map(|s| s.timeout_seconds)
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"code": status.as_u16(), "message": message.into()})),
    )
        .into_response()
}

fn authorized(headers: &HeaderMap) -> Result<(), Response> {
    match headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        Some(API_KEY) => Ok(()),
        Some(_) => Err(error(StatusCode::UNAUTHORIZED, "Invalid API key")),
        None => Err(error(
            StatusCode::UNAUTHORIZED,
            "authorization header is missing",
        )),
    }
}

/// Removes expired sandboxes, as E2B kills them at the end of their lifetime (a paused
/// sandbox has none: it stays until killed).
fn reap(inner: &Inner) {
    let now = Instant::now();
    inner
        .sandboxes
        .lock()
        .unwrap()
        .retain(|_, s| s.paused || s.expires > now);
}

fn detail(id: &str, s: &Sandbox, with_token: bool) -> Value {
    let mut v = json!({
        "templateID": s.template_id,
        "sandboxID": id,
        "clientID": "6532622b",
        "startedAt": "2026-01-01T00:00:00Z",
        "endAt": "2026-01-01T00:15:00Z",
        "cpuCount": 2,
        "memoryMB": 512,
        "diskSizeMB": 2048,
        "envdVersion": s.envd_version,
        "metadata": s.metadata,
        "state": if s.paused { "paused" } else { "running" },
        "domain": s.domain,
    });
    if with_token {
        v["envdAccessToken"] = json!(s.token);
    }
    v
}

fn control_router(inner: Shared) -> Router {
    Router::new()
        .route("/sandboxes", post(create))
        .route("/sandboxes/{id}", get(get_one).delete(kill))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/connect", post(connect_sandbox))
        .route("/sandboxes/{id}/snapshots", post(snapshot))
        .route("/snapshots", get(list_snapshots))
        .route("/templates/{id}", axum::routing::delete(delete_template))
        .route("/v2/sandboxes", get(list))
        .with_state(inner)
}

async fn create(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "request body has an error: invalid JSON",
        );
    };
    let Some(template_id) = v.get("templateID").and_then(Value::as_str) else {
        return error(
            StatusCode::BAD_REQUEST,
            "request body has an error: property \"templateID\" is missing",
        );
    };
    let timeout = match v.get("timeout") {
        None => SERVER_DEFAULT_TIMEOUT_SECONDS,
        Some(t) => match t.as_u64().filter(|t| *t <= i32::MAX as u64) {
            Some(t) => t,
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "request body has an error: \"timeout\" must be an int32 >= 0",
                );
            }
        },
    };
    if timeout > 24 * 3600 {
        return error(
            StatusCode::BAD_REQUEST,
            "Timeout cannot be greater than 24 hours",
        );
    }
    if v.get("secure").is_some_and(|s| !s.is_boolean()) {
        return error(StatusCode::BAD_REQUEST, "\"secure\" must be a boolean");
    }
    let metadata: BTreeMap<String, String> = match v.get("metadata") {
        None => BTreeMap::new(),
        Some(m) => match serde_json::from_value(m.clone()) {
            Ok(m) => m,
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "\"metadata\" must map strings to strings",
                );
            }
        },
    };
    let n = inner.next.fetch_add(1, Ordering::SeqCst);
    let id = format!("i{n:04}fake{}", std::process::id());
    let token = format!("envd-token-{n}-{}", corral_domain::OperationId::new());
    let dir = tempfile::tempdir().expect("temp dir");
    // A snapshot template starts the sandbox from its files; any other template is empty.
    let (template, _tag) = template_id
        .split_once(':')
        .unwrap_or((template_id, "default"));
    if let Some(snap) = inner.snapshots.lock().unwrap().get(template) {
        copy_tree(snap.dir.path(), dir.path()).expect("copy the snapshot");
    }
    let secure = v.get("secure").and_then(Value::as_bool).unwrap_or(false);
    let envd_version = inner.envd_version.lock().unwrap().clone();
    let domain = inner.domain.lock().unwrap().clone();
    let sandbox = Sandbox {
        seq: n,
        template_id: template_id.to_owned(),
        metadata,
        token: token.clone(),
        envd_version: envd_version.clone(),
        dir,
        expires: Instant::now() + Duration::from_secs(timeout),
        timeout_seconds: timeout,
        domain: domain.clone(),
        processes: Arc::default(),
        paused: false,
    };
    inner.sandboxes.lock().unwrap().insert(id.clone(), sandbox);
    let mut out = json!({
        "templateID": template_id,
        "sandboxID": id,
        "clientID": "6532622b",
        "envdVersion": envd_version,
        "domain": domain,
    });
    if secure {
        out["envdAccessToken"] = json!(token);
    }
    (StatusCode::CREATED, axum::Json(out)).into_response()
}

async fn get_one(
    State(inner): State<Shared>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    reap(&inner);
    let sandboxes = inner.sandboxes.lock().unwrap();
    match sandboxes.get(&id) {
        Some(s) => axum::Json(detail(&id, s, true)).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
        ),
    }
}

async fn kill(
    State(inner): State<Shared>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    reap(&inner);
    match inner.sandboxes.lock().unwrap().remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(StatusCode::NOT_FOUND, format!("sandbox \"{id}\" not found")),
    }
}

/// The 404 of a sandbox E2B does not hold.
fn no_sandbox(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
    )
}

/// An optional JSON body: absent, or an object (`Err`: the 400).
fn optional_object(body: &[u8]) -> Result<Value, Response> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                "request body has an error: doesn't match schema",
            )
        })
}

/// Sends `signal` to every process of a sandbox's envd (SIGSTOP on pause, SIGCONT on
/// resume: a pause keeps memory and processes).
async fn signal_all(processes: &EnvdProcesses, signal: i32) {
    for info in processes.table.list() {
        if let Some(p) = processes.table.get(info.pid) {
            let _ = p.signal(signal).await;
        }
    }
}

/// `POST /sandboxes/{id}/pause` (`SandboxPauseRequest`, optional): `204` once paused, `409`
/// when already paused.
async fn pause(
    State(inner): State<Shared>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let req = match optional_object(&body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    if req.get("memory").is_some_and(|m| !m.is_boolean()) {
        return error(StatusCode::BAD_REQUEST, "\"memory\" must be a boolean");
    }
    reap(&inner);
    let processes = {
        let mut sandboxes = inner.sandboxes.lock().unwrap();
        let Some(s) = sandboxes.get_mut(&id) else {
            return no_sandbox(&id);
        };
        if s.paused {
            return error(
                StatusCode::CONFLICT,
                format!("Error pausing sandbox - sandbox '{id}' is already paused"),
            );
        }
        s.paused = true;
        s.processes.clone()
    };
    signal_all(&processes, 19).await;
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /sandboxes/{id}/connect` (`ConnectSandbox`, `timeout` required): `201` after
/// resuming a paused sandbox with a new lifetime, `200` for a running one (its lifetime only
/// extended).
async fn connect_sandbox(
    State(inner): State<Shared>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "request body has an error: value is required but missing",
        );
    };
    let Some(timeout) = v
        .get("timeout")
        .and_then(Value::as_u64)
        .filter(|t| *t <= i32::MAX as u64)
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "request body has an error: property \"timeout\" is missing or not an int32 >= 0",
        );
    };
    reap(&inner);
    let (status, out, processes) = {
        let mut sandboxes = inner.sandboxes.lock().unwrap();
        let Some(s) = sandboxes.get_mut(&id) else {
            return no_sandbox(&id);
        };
        let until = Instant::now() + Duration::from_secs(timeout);
        let resumed = s.paused;
        if resumed {
            s.paused = false;
            s.expires = until;
            s.timeout_seconds = timeout;
        } else {
            s.expires = s.expires.max(until);
        }
        let out = json!({
            "templateID": s.template_id,
            "sandboxID": id,
            "clientID": "6532622b",
            "envdVersion": s.envd_version,
            "envdAccessToken": s.token,
            "domain": s.domain,
        });
        let status = if resumed {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        (status, out, resumed.then(|| s.processes.clone()))
    };
    if let Some(processes) = processes {
        signal_all(&processes, 18).await;
    }
    (status, axum::Json(out)).into_response()
}

/// `POST /sandboxes/{id}/snapshots` (`SandboxSnapshotRequest`, required): a copy of the
/// running sandbox's directory as a new snapshot template, `201 SnapshotInfo`.
async fn snapshot(
    State(inner): State<Shared>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "Error when parsing request: value is required but missing",
        );
    };
    if req.get("name").is_some_and(|n| !n.is_string()) {
        return error(
            StatusCode::BAD_REQUEST,
            "Error when parsing request: \"name\" must be a string",
        );
    }
    if req.get("name").is_some() {
        // A named snapshot's id is `team-slug/name:tag`: not modelled, Corral never names one.
        return error(
            StatusCode::BAD_REQUEST,
            "the fake makes unnamed snapshots only",
        );
    }
    reap(&inner);
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let sandboxes = inner.sandboxes.lock().unwrap();
        // E2B's orchestrator holds running sandboxes only: a paused one is not found.
        let Some(s) = sandboxes.get(&id).filter(|s| !s.paused) else {
            return no_sandbox(&id);
        };
        copy_tree(s.dir.path(), dir.path()).expect("copy the sandbox");
    }
    let n = inner.next.fetch_add(1, Ordering::SeqCst);
    let template = format!("s{n:04}snap{}", std::process::id());
    inner.snapshots.lock().unwrap().insert(
        template.clone(),
        Snapshot {
            seq: n,
            source: id,
            dir,
        },
    );
    (
        StatusCode::CREATED,
        axum::Json(json!({"snapshotID": format!("{template}:default"), "names": []})),
    )
        .into_response()
}

/// `GET /snapshots?sandboxID=&name=&limit=`: the team's snapshots, newest first (one page:
/// the fake never holds more than a page of them).
async fn list_snapshots(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    if let Some(l) = q.get("limit")
        && !matches!(l.parse::<usize>(), Ok(1..=100))
    {
        return error(StatusCode::BAD_REQUEST, "limit must be between 1 and 100");
    }
    // `name` is a name or id, optionally tag-qualified.
    let wanted = q
        .get("name")
        .map(|n| n.split_once(':').map_or(n.as_str(), |(t, _)| t).to_owned());
    let snapshots = inner.snapshots.lock().unwrap();
    let mut found: Vec<(&String, &Snapshot)> = snapshots
        .iter()
        .filter(|(t, s)| {
            wanted.as_ref().is_none_or(|w| w == *t)
                && q.get("sandboxID").is_none_or(|id| *id == s.source)
        })
        .collect();
    found.sort_by_key(|(_, s)| std::cmp::Reverse(s.seq));
    let items: Vec<Value> = found
        .iter()
        .map(|(t, _)| json!({"snapshotID": format!("{t}:default"), "names": []}))
        .collect();
    axum::Json(items).into_response()
}

/// `DELETE /templates/{templateID}` (the tag, if any, parsed off): `204`, `404` when unknown.
async fn delete_template(
    State(inner): State<Shared>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let template = id.split_once(':').map_or(id.as_str(), |(t, _)| t);
    match inner.snapshots.lock().unwrap().remove(template) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(StatusCode::NOT_FOUND, format!("Template '{id}' not found")),
    }
}

async fn list(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    reap(&inner);
    // `limit`: int32 in 1..=100, default 100.
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => 100,
        Some(Ok(l @ 1..=100)) => l,
        Some(_) => return error(StatusCode::BAD_REQUEST, "limit must be between 1 and 100"),
    };
    // `nextToken`: only a token this listing handed out (`X-Next-Token`).
    let after = match q.get("nextToken").map(|t| page_token_seq(t)) {
        None => None,
        Some(Some(seq)) => Some(seq),
        Some(None) => return error(StatusCode::BAD_REQUEST, "invalid next token"),
    };
    if let Some(states) = q.get("state")
        && states
            .split(',')
            .any(|s| !matches!(s, "running" | "paused"))
    {
        return error(StatusCode::BAD_REQUEST, "invalid state filter");
    }
    // `metadata` is `k=v&k2=v2`, each key and value URL-encoded.
    let mut filter = Vec::new();
    if let Some(m) = q.get("metadata") {
        for pair in m.split('&') {
            let Some((k, v)) = pair.split_once('=') else {
                return error(StatusCode::BAD_REQUEST, "invalid metadata filter");
            };
            filter.push((k.to_owned(), v.to_owned()));
        }
    }
    let sandboxes = inner.sandboxes.lock().unwrap();
    let mut matching: Vec<(&String, &Sandbox)> = sandboxes
        .iter()
        .filter(|(_, s)| {
            filter
                .iter()
                .all(|(k, v)| s.metadata.get(k).is_some_and(|x| x == v))
        })
        .collect();
    let total = matching.len();
    // Newest first (E2B's default order), resuming after the token's sandbox.
    matching.sort_by_key(|(_, s)| std::cmp::Reverse(s.seq));
    matching.retain(|(_, s)| after.is_none_or(|after| s.seq < after));
    let page_size = limit.min(inner.page_size.load(Ordering::SeqCst));
    let more = matching.len() > page_size;
    matching.truncate(page_size);
    let items: Vec<Value> = matching
        .iter()
        .map(|(id, s)| detail(id, s, false))
        .collect();
    let mut response = axum::Json(items).into_response();
    let headers = response.headers_mut();
    headers.insert("x-total-running", total.into());
    if more && let Some((_, last)) = matching.last() {
        headers.insert(
            "x-next-token",
            page_token(last.seq)
                .parse()
                .expect("base64 is a header value"),
        );
    }
    response
}

/// The opaque token of the page after the sandbox created `seq`-th.
fn page_token(seq: usize) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("fake-cursor:{seq}"))
}

/// The sequence number a [`page_token`] names, `None` for anything else.
fn page_token_seq(token: &str) -> Option<usize> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()?;
    String::from_utf8(raw)
        .ok()?
        .strip_prefix("fake-cursor:")?
        .parse()
        .ok()
}

fn envd_router(inner: Shared) -> Router {
    Router::new()
        .route("/process.Process/Start", post(start))
        .route("/process.Process/Connect", post(connect_process))
        .route("/process.Process/List", post(list_processes))
        .route("/process.Process/SendInput", post(send_input))
        .route("/process.Process/CloseStdin", post(close_stdin))
        .route("/process.Process/SendSignal", post(send_signal))
        .route("/filesystem.Filesystem/Stat", post(stat))
        .route("/files", get(download).post(upload))
        .with_state(inner)
}

/// The processes one sandbox's envd runs, with how each was started.
#[derive(Default)]
struct EnvdProcesses {
    table: Processes,
    configs: Mutex<HashMap<u32, crate::api::ProcessConfig>>,
}

impl EnvdProcesses {
    /// Forgets an ended process, as envd does once it ended.
    fn forget(&self, pid: u32) {
        self.table.remove(pid);
        self.configs.lock().unwrap().remove(&pid);
    }
}

/// What envd needs of the sandbox an access token belongs to.
struct Envd {
    dir: PathBuf,
    processes: Arc<EnvdProcesses>,
    /// Below envd 0.4.0 every request must name its user.
    needs_user: bool,
}

/// The sandbox the access token belongs to.
fn sandbox_envd(inner: &Inner, headers: &HeaderMap) -> Result<Envd, Response> {
    reap(inner);
    let token = headers
        .get("x-access-token")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| error(StatusCode::UNAUTHORIZED, "missing access token"))?;
    let sandboxes = inner.sandboxes.lock().unwrap();
    let (id, s) = sandboxes
        .iter()
        .find(|(_, s)| s.token == token)
        .ok_or_else(|| error(StatusCode::UNAUTHORIZED, "invalid access token"))?;
    if s.paused {
        // E2B's proxy, for a paused sandbox without auto-resume.
        return Err((
            StatusCode::CONFLICT,
            axum::Json(json!({
                "sandboxId": id,
                "message": "The sandbox is paused",
                "code": 409,
                "canAutoResume": false,
            })),
        )
            .into_response());
    }
    Ok(Envd {
        dir: s.dir.path().to_owned(),
        processes: s.processes.clone(),
        needs_user: s.needs_user(),
    })
}

/// Checks the user a Connect call names (`Authorization: Basic base64("<user>:")`): it must
/// be one envd knows, and old envd needs one. `Err` is the `unauthenticated` message.
fn check_rpc_user(headers: &HeaderMap, envd: &Envd) -> Result<(), String> {
    let Some(value) = headers.get("authorization") else {
        return if envd.needs_user {
            Err("invalid authorization header: no user named".into())
        } else {
            Ok(())
        };
    };
    let user = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|raw| String::from_utf8(raw).ok())
        .and_then(|up| up.split_once(':').map(|(u, _)| u.to_owned()))
        .ok_or_else(|| "invalid authorization header".to_owned())?;
    if USERS.contains(&user.as_str()) {
        Ok(())
    } else {
        Err(format!("invalid username: '{user}'"))
    }
}

/// Checks the `username` a `/files` request names, as [`check_rpc_user`] does.
fn check_files_user(q: &HashMap<String, String>, envd: &Envd) -> Result<(), Response> {
    let user = match q.get("username") {
        Some(u) => u.as_str(),
        None if envd.needs_user => "",
        None => return Ok(()),
    };
    if USERS.contains(&user) {
        Ok(())
    } else {
        Err(error(
            StatusCode::UNAUTHORIZED,
            format!("error looking up user '{user}': user: unknown user {user}"),
        ))
    }
}

fn connect_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"code": code, "message": message})),
    )
        .into_response()
}

fn event(v: Value) -> Vec<u8> {
    connect::encode(0, &serde_json::to_vec(&json!({ "event": v })).unwrap())
}

fn end_stream(trailer: &Value) -> Vec<u8> {
    connect::encode(END_STREAM, &serde_json::to_vec(trailer).unwrap())
}

/// A Connect streaming answer that is only an end-of-stream message carrying `code`: how a
/// streaming call fails (HTTP 200, the error in the trailer).
fn stream_error(inner: &Inner, code: &str, message: &str) -> Response {
    let trailer = json!({"error": {"code": code, "message": message}});
    connect_stream(inner, futures::stream::iter([end_stream(&trailer)]).boxed())
}

/// Checks what every envd Connect call checks: the token, the named user. `Err` is the
/// ready answer (`streaming`: in an end-of-stream message).
fn rpc_envd(inner: &Inner, headers: &HeaderMap, streaming: bool) -> Result<Envd, Response> {
    let envd = sandbox_envd(inner, headers)?;
    let (wanted, given) = (
        if streaming {
            "application/connect+json"
        } else {
            "application/json"
        },
        headers.get("content-type").and_then(|v| v.to_str().ok()),
    );
    if given != Some(wanted) {
        return Err(StatusCode::UNSUPPORTED_MEDIA_TYPE.into_response());
    }
    if let Err(message) = check_rpc_user(headers, &envd) {
        return Err(if streaming {
            stream_error(inner, "unauthenticated", &message)
        } else {
            connect_error(StatusCode::UNAUTHORIZED, "unauthenticated", &message)
        });
    }
    Ok(envd)
}

/// The one request message of a server-streaming call.
fn stream_request<T: serde::de::DeserializeOwned>(body: &[u8]) -> Option<T> {
    let mut decoder = connect::Decoder::new(1 << 20);
    decoder.push(body);
    match decoder.next_envelope() {
        Ok(Some(e)) if decoder.pending() == 0 && !e.is_end_stream() => {
            serde_json::from_slice(&e.data).ok()
        }
        _ => None,
    }
}

/// `Keepalive-Ping-Interval` (seconds), envd's default when absent.
fn keepalive_of(headers: &HeaderMap) -> Duration {
    headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(Duration::from_secs(90), Duration::from_secs)
}

/// The process a selector names, if envd still runs it (an ended process is forgotten).
fn select(procs: &EnvdProcesses, selector: &Value) -> Result<Process, String> {
    let found = if let Some(pid) = selector.get("pid").and_then(Value::as_u64) {
        procs
            .table
            .get(pid as u32)
            .ok_or(format!("process with pid {pid} not found"))
    } else if let Some(tag) = selector.get("tag").and_then(Value::as_str) {
        procs
            .table
            .by_tag(tag)
            .ok_or(format!("process with tag {tag} not found"))
    } else {
        return Err("invalid input type".into());
    }?;
    if found.exit().is_some() {
        procs.forget(found.pid());
        return Err(format!("process with pid {} not found", found.pid()));
    }
    Ok(found)
}

/// envd's chunk size when it reads a process's pipes (`stdChunkSize`).
const READ_CHUNK: usize = 32 * 1024;

/// What a process stream has sent so far.
struct Follow {
    process: Process,
    sent: [u64; 2],
    keepalive: Duration,
    /// When envd gives up on the call and kills the process (`Connect-Timeout-Ms`).
    deadline: Option<tokio::time::Instant>,
    done: bool,
}

impl Follow {
    /// The next envelopes: new output, the end event and end of stream, a keepalive after a
    /// quiet interval, or the deadline's error.
    async fn step(&mut self) -> Option<Vec<u8>> {
        if self.done {
            return None;
        }
        let mut wait = self.keepalive;
        if let Some(d) = self.deadline {
            wait = wait.min(d.saturating_duration_since(tokio::time::Instant::now()));
        }
        self.process
            .wait_output(self.sent[0], self.sent[1], wait)
            .await;
        // Read the exit first: once it is set, all output is in.
        let exit = self.process.exit();
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut out = Vec::new();
        for (i, (stream, name)) in [
            (OutputStream::Stdout, "stdout"),
            (OutputStream::Stderr, "stderr"),
        ]
        .into_iter()
        .enumerate()
        {
            let bytes = self.process.read(stream, self.sent[i]);
            self.sent[i] += bytes.len() as u64;
            for piece in bytes.chunks(READ_CHUNK) {
                out.extend(event(json!({"data": { name: b64.encode(piece) }})));
            }
        }
        if let Some(exit) = exit {
            // protojson leaves out zero values; Go's ProcessState: exit code -1 after a signal.
            let mut end = json!({});
            match (exit.status, exit.signal) {
                (Some(code), _) => {
                    end["exited"] = json!(true);
                    end["status"] = json!(format!("exit status {code}"));
                    if code != 0 {
                        end["exitCode"] = json!(code);
                    }
                }
                (None, signal) => {
                    end["exitCode"] = json!(-1);
                    end["status"] = json!(format!("signal: {}", signal_name(signal.unwrap_or(0))));
                    end["error"] = json!(format!("signal: {}", signal_name(signal.unwrap_or(0))));
                }
            }
            out.extend(event(json!({ "end": end })));
            out.extend(end_stream(&json!({})));
            self.done = true;
        } else if self
            .deadline
            .is_some_and(|d| tokio::time::Instant::now() >= d)
        {
            // envd's process context ends at the deadline and kills it (the fake kills its
            // whole group, so nothing of it outlives the test).
            let _ = self.process.signal(9).await;
            out.extend(end_stream(
                &json!({"error": {"code": "deadline_exceeded", "message": "context deadline exceeded"}}),
            ));
            self.done = true;
        } else if out.is_empty() {
            out.extend(event(json!({"keepalive": {}})));
        }
        Some(out)
    }

    fn into_stream(self, first: Vec<u8>) -> BoxStream<'static, Vec<u8>> {
        futures::stream::iter([first])
            .chain(futures::stream::unfold(self, |mut f| async move {
                let next = f.step().await?;
                Some((next, f))
            }))
            .boxed()
    }
}

/// Go's names of the signals (`ProcessState.String()`).
fn signal_name(n: i32) -> &'static str {
    match n {
        1 => "hangup",
        2 => "interrupt",
        3 => "quit",
        9 => "killed",
        10 => "user defined signal 1",
        12 => "user defined signal 2",
        15 => "terminated",
        _ => "unknown signal",
    }
}

async fn start(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let envd = match rpc_envd(&inner, &headers, true) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let Some(req) = stream_request::<crate::api::StartRequest>(&body) else {
        return connect_error(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            "malformed StartRequest",
        );
    };
    let p = req.process;
    // `bash -l -c X` / `sh -c X` run X with the host's sh; anything else runs the argv as
    // given.
    let command = match p.args.as_slice() {
        [c, script] | [_, c, script] if c == "-c" => script.clone(),
        args => std::iter::once(&p.cmd)
            .chain(args)
            .map(|a| corral_provider::shell::shell_quote(a))
            .collect::<Vec<_>>()
            .join(" "),
    };
    let deadline = headers
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let home = envd.dir.clone();
    let cwd = p.cwd.as_ref().map_or(home.clone(), |c| resolve(&home, c));
    if !cwd.is_dir() {
        return stream_error(
            &inner,
            "invalid_argument",
            &format!("cwd '{}' does not exist", cwd.display()),
        );
    }
    // envd sets HOME to the user's home (here: the sandbox's directory), then the envs.
    let mut env = BTreeMap::from([("HOME".to_owned(), home.to_string_lossy().into_owned())]);
    env.extend(p.envs.clone());
    let mut spawn = SpawnSpec::new(command, cwd).with_env(env);
    // envd opens stdin unless told not to (backwards compatibility).
    if req.stdin != Some(false) {
        spawn = spawn.with_stdin();
    }
    if let Some(tag) = &req.tag {
        spawn = spawn.with_tag(tag.clone());
    }
    let process = match envd.processes.table.spawn(spawn) {
        Ok(p) => p,
        Err(e) => {
            return stream_error(
                &inner,
                "invalid_argument",
                &format!("error starting process: {e}"),
            );
        }
    };
    envd.processes
        .configs
        .lock()
        .unwrap()
        .insert(process.pid(), p);
    let first = event(json!({"start": {"pid": process.pid()}}));
    let follow = Follow {
        process,
        sent: [0, 0],
        keepalive: keepalive_of(&headers),
        deadline,
        done: false,
    };
    connect_stream(&inner, follow.into_stream(first))
}

/// `process.Process/Connect`: the process's events from now on (no replay).
async fn connect_process(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let envd = match rpc_envd(&inner, &headers, true) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let Some(req) = stream_request::<Value>(&body) else {
        return connect_error(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            "malformed ConnectRequest",
        );
    };
    let process = match select(&envd.processes, &req["process"]) {
        Ok(p) => p,
        Err(message) => return stream_error(&inner, "not_found", &message),
    };
    inner.connects.fetch_add(1, Ordering::SeqCst);
    let first = event(json!({"start": {"pid": process.pid()}}));
    let sent = [
        process.len(OutputStream::Stdout),
        process.len(OutputStream::Stderr),
    ];
    let follow = Follow {
        process,
        sent,
        keepalive: keepalive_of(&headers),
        deadline: None,
        done: false,
    };
    connect_stream(&inner, follow.into_stream(first))
}

/// The body of a unary Connect call, as JSON.
fn unary_request(body: &[u8]) -> Result<Value, Response> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| {
            connect_error(
                StatusCode::BAD_REQUEST,
                "invalid_argument",
                "malformed request",
            )
        })
}

async fn list_processes(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let envd = match rpc_envd(&inner, &headers, false) {
        Ok(e) => e,
        Err(r) => return r,
    };
    if let Err(r) = unary_request(&body) {
        return r;
    }
    let configs = envd.processes.configs.lock().unwrap();
    let processes: Vec<Value> = envd
        .processes
        .table
        .list()
        .into_iter()
        .filter(|p| p.exit.is_none())
        .map(|p| {
            let mut v = json!({"pid": p.pid, "config": configs.get(&p.pid)});
            if let Some(tag) = p.spec.tag {
                v["tag"] = json!(tag);
            }
            v
        })
        .collect();
    axum::Json(json!({ "processes": processes })).into_response()
}

async fn send_input(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let envd = match rpc_envd(&inner, &headers, false) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let req = match unary_request(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let process = match select(&envd.processes, &req["process"]) {
        Ok(p) => p,
        Err(message) => return connect_error(StatusCode::NOT_FOUND, "not_found", &message),
    };
    let input = &req["input"];
    if input.get("pty").is_some() {
        return connect_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "error writing to tty: tty not assigned to process",
        );
    }
    let Some(b64) = input.get("stdin").and_then(Value::as_str) else {
        return connect_error(
            StatusCode::NOT_IMPLEMENTED,
            "unimplemented",
            "invalid input type <nil>",
        );
    };
    let Ok(data) = base64::engine::general_purpose::STANDARD.decode(b64) else {
        return connect_error(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            "invalid base64",
        );
    };
    inner.stdin_writes.fetch_add(1, Ordering::SeqCst);
    if !process.stdin_open().await {
        return connect_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "error writing to stdin: stdin not enabled or closed",
        );
    }
    match process.write_stdin(&data).await {
        Ok(()) => axum::Json(json!({})).into_response(),
        Err(e) => connect_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &format!(
                "error writing to stdin: error writing to stdin of process '{}': {e}",
                process.pid()
            ),
        ),
    }
}

async fn close_stdin(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let envd = match rpc_envd(&inner, &headers, false) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let req = match unary_request(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    match select(&envd.processes, &req["process"]) {
        Ok(p) => {
            p.close_stdin().await;
            axum::Json(json!({})).into_response()
        }
        Err(message) => connect_error(StatusCode::NOT_FOUND, "not_found", &message),
    }
}

/// `process.Process/SendSignal`: TERM or KILL, to the process envd started only (Go's
/// `cmd.Process.Signal`), not to what it started.
async fn send_signal(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let envd = match rpc_envd(&inner, &headers, false) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let req = match unary_request(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let process = match select(&envd.processes, &req["process"]) {
        Ok(p) => p,
        Err(message) => return connect_error(StatusCode::NOT_FOUND, "not_found", &message),
    };
    let signal = match &req["signal"] {
        Value::String(s) if s == "SIGNAL_SIGTERM" => 15,
        Value::String(s) if s == "SIGNAL_SIGKILL" => 9,
        Value::Number(n) if n.as_u64() == Some(15) => 15,
        Value::Number(n) if n.as_u64() == Some(9) => 9,
        other => {
            return connect_error(
                StatusCode::NOT_IMPLEMENTED,
                "unimplemented",
                &format!("invalid signal: {other}"),
            );
        }
    };
    match process.signal_leader(signal).await {
        Ok(()) => axum::Json(json!({})).into_response(),
        Err(e) => connect_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &format!("error sending signal: {e}"),
        ),
    }
}

/// A Connect streaming answer of `stream`'s envelopes, sent in pieces of the configured size.
fn connect_stream(inner: &Inner, stream: BoxStream<'static, Vec<u8>>) -> Response {
    let chunk = inner.chunk.load(Ordering::SeqCst);
    let pieces = stream.flat_map(move |bytes| {
        let pieces: Vec<Result<Bytes, std::io::Error>> = bytes
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        futures::stream::iter(pieces)
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/connect+json")
        .body(Body::from_stream(pieces))
        .unwrap()
}

async fn stat(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let envd = match sandbox_envd(&inner, &headers) {
        Ok(e) => e,
        Err(r) => return r,
    };
    if let Err(message) = check_rpc_user(&headers, &envd) {
        return connect_error(StatusCode::UNAUTHORIZED, "unauthenticated", &message);
    }
    let home = envd.dir;
    let Ok(req) = serde_json::from_slice::<crate::api::StatRequest>(&body) else {
        return connect_error(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            "malformed StatRequest",
        );
    };
    let path = resolve(&home, &req.path);
    match std::fs::metadata(&path) {
        Ok(m) => axum::Json(json!({"entry": {
            "name": path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            "type": if m.is_dir() { "FILE_TYPE_DIRECTORY" } else { "FILE_TYPE_FILE" },
            "path": path.to_string_lossy(),
        }}))
        .into_response(),
        Err(_) => connect_error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("no such file or directory: {}", req.path),
        ),
    }
}

async fn download(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let envd = match sandbox_envd(&inner, &headers) {
        Ok(e) => e,
        Err(r) => return r,
    };
    if let Err(r) = check_files_user(&q, &envd) {
        return r;
    }
    let home = envd.dir;
    let Some(path) = q.get("path") else {
        return error(StatusCode::BAD_REQUEST, "path is required");
    };
    let full = resolve(&home, path);
    if full.is_dir() {
        return error(
            StatusCode::BAD_REQUEST,
            format!("path '{path}' is a directory"),
        );
    }
    match std::fs::read(&full) {
        Ok(bytes) => (
            StatusCode::OK,
            [("content-type", "application/octet-stream")],
            bytes,
        )
            .into_response(),
        Err(_) => error(
            StatusCode::NOT_FOUND,
            format!("path '{path}' does not exist"),
        ),
    }
}

async fn upload(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let envd = match sandbox_envd(&inner, &headers) {
        Ok(e) => e,
        Err(r) => return r,
    };
    if let Err(r) = check_files_user(&q, &envd) {
        return r;
    }
    let home = envd.dir;
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let content = if content_type.starts_with("multipart/form-data") {
        match parse_multipart(content_type, &body)
            .and_then(|parts| parts.into_iter().find(|p| p.name == "file"))
        {
            Some(part) => part.data,
            None => return error(StatusCode::BAD_REQUEST, "multipart field `file` is missing"),
        }
    } else if content_type == "application/octet-stream" {
        body
    } else {
        return error(StatusCode::BAD_REQUEST, "unsupported content type");
    };
    let Some(path) = q.get("path") else {
        return error(StatusCode::BAD_REQUEST, "path is required");
    };
    let full = resolve(&home, path);
    if full.is_dir() {
        return error(
            StatusCode::BAD_REQUEST,
            format!("path '{path}' is a directory"),
        );
    }
    // envd creates missing parents and overwrites.
    if let Some(parent) = full.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if let Err(e) = std::fs::write(&full, &content) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error writing file '{path}': {e}"),
        );
    }
    let name = full
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    axum::Json(json!([{"path": full.to_string_lossy(), "name": name, "type": "file"}]))
        .into_response()
}

#[async_trait::async_trait]
impl Harness for Fake {
    fn lists_by_tag() -> bool {
        true
    }

    type Adapter = crate::E2bProvider;

    async fn start() -> Self {
        Fake::start().await
    }

    fn server(&self) -> &FakeServer {
        &self.control
    }

    fn base_url(&self) -> String {
        Fake::base_url(self)
    }

    fn config_at(&self, base_url: &str, http: HttpConfig) -> E2bConfig {
        E2bConfig {
            base_url: base_url.to_owned(),
            http,
            ..self.config()
        }
    }

    fn context(&self) -> CallContext {
        Fake::context(self)
    }

    fn create_call() -> (Method, &'static str) {
        (Method::POST, "/sandboxes")
    }

    fn get_call() -> (Method, &'static str) {
        (Method::GET, "/sandboxes/")
    }

    fn unknown_id() -> &'static str {
        "inope0000000000000000"
    }

    fn wrong_credential() -> &'static str {
        "e2b_wrong"
    }

    /// `CORRAL_LIVE_E2B_API_KEY` (the `base` template is booted).
    fn live() -> Result<(E2bConfig, CallContext, CreateSandboxRequest), String> {
        let Ok(key) = std::env::var("CORRAL_LIVE_E2B_API_KEY") else {
            return Err("CORRAL_LIVE_E2B_API_KEY".into());
        };
        if key.is_empty() {
            return Err("a non-empty CORRAL_LIVE_E2B_API_KEY".into());
        }
        let ctx = CallContext::new(Some(SecretString::from(key)), ProviderContext::default());
        Ok((
            E2bConfig::default(),
            ctx,
            CreateSandboxRequest::standard(Provider::E2b, None, None),
        ))
    }
}
