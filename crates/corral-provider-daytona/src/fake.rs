//! A fake of Daytona on loopback, for tests: the control API on one server and the toolbox
//! proxy on another, both checking `Authorization: Bearer`. It reproduces what adapters trip
//! on: create answers `creating` and the sandbox only reaches `started` after a couple of
//! observations (`starting` first); `/process/execute` merges stderr into stdout and answers
//! 408 when its `timeout` (seconds) fires; the upload creates missing parents; names are unique
//! (409) and sandboxes are found by id or name. A sandbox can be put in `error` ([`Fake::fail`],
//! [`Fake::fail_deletion`]); as Daytona does, one whose desired state is `destroyed` is then
//! hidden from `GET /sandbox/{id}` and from the listing unless `includeErroredDeleted=true`.
//! The listing is cursor-paginated (`limit`, `cursor`, `nextCursor`). The toolbox answers 403
//! for paths the sandbox user may not touch ([`Fake::deny`]). Request bodies are validated as
//! Daytona's NestJS/gin handlers would (400 with `{statusCode, message, error}`). Commands run
//! on the host (no isolation) in a per-sandbox temporary directory.
//!
//! The process sessions are asynchronous, as the daemon's: `POST /process/session` (409 for an
//! id taken), `…/exec` (with `runAsync`/`async`: `202 {cmdId}` at once, the command a host
//! process of the testkit's background runner that runs on, its stdin an open pipe as the
//! daemon's input FIFO; without: the answer once it ended), `…/command/{cmdId}` (`exitCode`
//! once ended), `…/logs` (the whole log from byte 0 on every request: plain text with the
//! stream prefixes removed, or JSON `{output, stdout, stderr}` with `X-Daytona-Split-Output:
//! true`), `…/input` (a newline appended, echoed into the log unless `suppressInputEcho`; 410
//! once ended), `…/terminate` (SIGKILL to the group; 410 once ended) and `DELETE` of a session
//! (its commands killed, its logs gone). A labeler task writes each command's log as the
//! daemon's do: complete lines behind a 3-byte stream prefix, a newline added to a last
//! partial line, and the exit code only once that is flushed. A session's commands run at
//! once (the daemon's session shell runs them one after another; Corral uses one session per
//! command).
//!
//! The lifecycle is Daytona's (`provider-apis/daytona/api-openapi.yaml`), asynchronous as its
//! runners are: `POST /sandbox/{id}/stop` answers `stopping` and the sandbox reads `stopping`
//! for the warm-up's observations before `stopped` (its processes and sessions end, its files
//! stay, the toolbox refuses it: `400 Sandbox is not running`); stopping one that is not
//! started is `400 Sandbox is not started`. `POST /sandbox/{id}/start` answers `starting`,
//! then `started` (`400 Sandbox is not stopped` for one that is not). `POST
//! /sandbox/{id}/snapshot {name, includeMemory}` copies the sandbox's directory at once
//! (point in time), answers the sandbox `snapshotting` and makes a snapshot `pending` for the
//! warm-up's observations of `GET /snapshots/{idOrName}`, then `active` (a container sandbox:
//! `includeMemory: true` is refused; a name taken is `409`). A create naming an active
//! snapshot as `snapshot` starts from a copy of it; `DELETE /snapshots/{id}` (the id, not the
//! name) removes it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test double: a poisoned lock is a failed test.
#![allow(clippy::result_large_err)] // Handlers return ready-made responses as errors.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use corral_domain::{CreateSandboxRequest, OutputStream, Provider, ProviderContext};
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::background::{Process, Processes, SpawnSpec};
use corral_provider_testkit::fake::{FakeServer, parse_multipart};
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::host_shell::{RunOutcome, run_command};
use serde_json::{Value, json};

use crate::DaytonaConfig;
use corral_provider_testkit::plumbing::{self, copy_tree, resolve};

struct Sandbox {
    name: String,
    snapshot: String,
    labels: BTreeMap<String, String>,
    auto_stop_interval: u64,
    /// Observations left before the sandbox reports `started`.
    warming: u32,
    /// Why it is in `error`, if it is.
    error_reason: Option<String>,
    /// Whether its desired state is `destroyed` (a deletion the runner could not finish).
    desired_destroyed: bool,
    dir: tempfile::TempDir,
    /// The daemon's sessions, by id.
    sessions: HashMap<String, Session>,
    /// The sandbox's processes: dropping the table (at deletion) kills them.
    processes: Processes,
    /// Stopped (or, while `stopping` > 0, on its way there).
    stopped: bool,
    /// Observations left reading `stopping`.
    stopping: u32,
    /// Observations left reading `snapshotting`.
    snapshotting: u32,
}

/// A snapshot made from a sandbox: a copy of its directory.
struct Snapshot {
    name: String,
    /// Observations left reading `pending`.
    pending: u32,
    dir: tempfile::TempDir,
}

/// A session of the daemon's process API: its commands, in order.
#[derive(Default)]
struct Session {
    commands: Vec<Arc<SessionCommand>>,
}

/// One command of a session, as the daemon keeps it: a log file in which its "labelers" write
/// each complete line of stdout and stderr behind a 3-byte prefix (`\x01\x01\x01` or
/// `\x02\x02\x02`), and an exit-code file written only once the labelers flushed.
struct SessionCommand {
    id: String,
    command: String,
    process: Process,
    suppress_input_echo: bool,
    log: Mutex<Vec<u8>>,
    exit_code: Mutex<Option<i32>>,
}

impl Sandbox {
    /// Errored and meant to be gone: Daytona hides these unless asked.
    fn errored_deleted(&self) -> bool {
        self.error_reason.is_some() && self.desired_destroyed
    }
}

#[derive(Default)]
struct Inner {
    sandboxes: Mutex<HashMap<String, Sandbox>>,
    /// Snapshots by id.
    snapshots: Mutex<HashMap<String, Snapshot>>,
    next: AtomicUsize,
    warmup: AtomicU32,
    /// When set, the next create is rate-limited as Daytona does it (seconds to wait).
    rate_limit_next_create: Mutex<Option<u64>>,
    /// Most sandboxes on one page of the listing, whatever `limit` asks.
    max_page: AtomicUsize,
    /// Paths the toolbox refuses with 403 (the sandbox user lacks the permission).
    denied: Mutex<BTreeSet<PathBuf>>,
    /// The `toolboxProxyUrl` every sandbox record carries (the toolbox server's own, unless
    /// [`Fake::set_toolbox_proxy_url`] said otherwise).
    toolbox_url: Mutex<String>,
}

type Shared = Arc<Inner>;

/// The API key the fake accepts.
pub const API_KEY: &str = "dtn_fake0123456789abcdef";

/// Daytona on loopback: the control API and the toolbox proxy, accepting [`API_KEY`].
pub struct Fake {
    control: FakeServer,
    toolbox: FakeServer,
    inner: Shared,
}

impl Fake {
    /// Starts both servers; new sandboxes report `starting` on their first observation and
    /// `started` from the second on.
    pub async fn start() -> Self {
        let inner: Shared = Arc::new(Inner::default());
        inner.warmup.store(1, Ordering::SeqCst);
        inner.max_page.store(200, Ordering::SeqCst);
        let control = FakeServer::start(control_router(inner.clone())).await;
        let toolbox = FakeServer::start(toolbox_router(inner.clone())).await;
        *inner.toolbox_url.lock().unwrap() = format!("{}/toolbox", toolbox.base_url());
        Self {
            control,
            toolbox,
            inner,
        }
    }

    /// The control API (`app.daytona.io/api`): request log and fault injection.
    pub fn server(&self) -> &FakeServer {
        &self.control
    }

    /// The toolbox proxy (`proxy.app.daytona.io`), serving `/toolbox/{sandboxId}/…`.
    pub fn toolbox(&self) -> &FakeServer {
        &self.toolbox
    }

    /// The adapter's base URL: the control API's address.
    pub fn base_url(&self) -> String {
        self.control.base_url()
    }

    /// The adapter's configuration pointed at this fake (the toolbox URL comes from the
    /// sandbox records, as in production).
    pub fn config(&self) -> DaytonaConfig {
        DaytonaConfig {
            base_url: self.base_url(),
            default_toolbox_proxy_url: format!("{}/toolbox", self.toolbox.base_url()),
            trusted_hosts: vec![self.toolbox.base_url()],
            ..DaytonaConfig::default()
        }
    }

    /// Makes every sandbox record name `url` as its `toolboxProxyUrl` from now on, as a
    /// provider could answer anything there.
    pub fn set_toolbox_proxy_url(&self, url: &str) {
        *self.inner.toolbox_url.lock().unwrap() = url.to_owned();
    }

    /// A call context carrying [`API_KEY`].
    pub fn context(&self) -> CallContext {
        CallContext::new(
            Some(SecretString::from(API_KEY)),
            ProviderContext::default(),
        )
    }

    /// How many observations a new sandbox stays `starting` before it is `started`.
    pub fn set_warmup(&self, observations: u32) {
        self.inner.warmup.store(observations, Ordering::SeqCst);
    }

    /// Cuts listings into pages of at most `sandboxes` (to exercise `nextCursor`).
    pub fn set_page_size(&self, sandboxes: usize) {
        self.inner
            .max_page
            .store(sandboxes.max(1), Ordering::SeqCst);
    }

    /// Rate-limits the next create the way Daytona does: 429, its JSON body, and the
    /// per-bucket `Retry-After-sandbox-create` header (no plain `Retry-After`).
    pub fn rate_limit_next_create(&self, seconds: u64) {
        *self.inner.rate_limit_next_create.lock().unwrap() = Some(seconds);
    }

    /// The `autoStopInterval` (minutes) a sandbox was created with.
    pub fn auto_stop_minutes_of(&self, id: &str) -> Option<u64> {
        self.inner
            .sandboxes
            .lock()
            .unwrap()
            .get(id)
            .map(|s| s.auto_stop_interval)
    }

    /// Puts sandbox `id` in `error` with `reason` (a runner failure); its desired state stays
    /// `started`, so it is still listed and found by id.
    pub fn fail(&self, id: &str, reason: &str) {
        self.set_error(id, reason, false);
    }

    /// Puts sandbox `id` in `error` with desired state `destroyed` (a deletion the runner
    /// could not finish): Daytona then answers 404 for it by id or name and leaves it out of
    /// listings unless `includeErroredDeleted=true`.
    pub fn fail_deletion(&self, id: &str, reason: &str) {
        self.set_error(id, reason, true);
    }

    fn set_error(&self, id: &str, reason: &str, desired_destroyed: bool) {
        let mut sandboxes = self.inner.sandboxes.lock().unwrap();
        let s = sandboxes
            .get_mut(id)
            .unwrap_or_else(|| panic!("no sandbox {id}"));
        s.error_reason = Some(reason.to_owned());
        s.desired_destroyed = desired_destroyed;
    }

    /// Makes the toolbox answer 403 for `path` (absolute, as the sandbox sees it) on file
    /// info, download and upload, as the daemon does when the sandbox user lacks the
    /// permission.
    pub fn deny(&self, path: &str) {
        self.inner
            .denied
            .lock()
            .unwrap()
            .insert(PathBuf::from(path));
    }
}

#[async_trait::async_trait]
impl Harness for Fake {
    fn lists_by_tag() -> bool {
        true
    }

    type Adapter = crate::DaytonaProvider;

    async fn start() -> Self {
        Fake::start().await
    }

    fn server(&self) -> &FakeServer {
        &self.control
    }

    fn base_url(&self) -> String {
        Fake::base_url(self)
    }

    fn config_at(&self, base_url: &str, http: HttpConfig) -> DaytonaConfig {
        DaytonaConfig {
            base_url: base_url.to_owned(),
            http,
            ..self.config()
        }
    }

    fn context(&self) -> CallContext {
        Fake::context(self)
    }

    /// Create answers before `started`: the suite's wait has to see `starting` first.
    fn before_conformance(&self) {
        self.set_warmup(2);
    }

    fn ready_within(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn create_call() -> (Method, &'static str) {
        (Method::POST, "/sandbox")
    }

    fn get_call() -> (Method, &'static str) {
        (Method::GET, "/sandbox/")
    }

    fn unknown_id() -> &'static str {
        "00000000-0000-4000-8000-00000000beef"
    }

    fn wrong_credential() -> &'static str {
        "dtn_wrong"
    }

    /// `CORRAL_LIVE_DAYTONA_API_KEY`; Daytona's default snapshot is booted.
    fn live() -> Result<(DaytonaConfig, CallContext, CreateSandboxRequest), String> {
        let Ok(key) = std::env::var("CORRAL_LIVE_DAYTONA_API_KEY") else {
            return Err("CORRAL_LIVE_DAYTONA_API_KEY".into());
        };
        let ctx = CallContext::new(Some(SecretString::from(key)), ProviderContext::default());
        Ok((
            DaytonaConfig::default(),
            ctx,
            CreateSandboxRequest::standard(Provider::Daytona, None, None),
        ))
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let reason = status.canonical_reason().unwrap_or("Error");
    (
        status,
        axum::Json(json!({
            "statusCode": status.as_u16(),
            "message": message.into(),
            "error": reason,
            "path": "",
            "timestamp": "2026-01-01T00:00:00.000Z",
        })),
    )
        .into_response()
}

fn authorized(headers: &HeaderMap) -> Result<(), Response> {
    let value = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if value.strip_prefix("Bearer ") == Some(API_KEY) {
        Ok(())
    } else {
        Err(error(StatusCode::UNAUTHORIZED, "Unauthorized"))
    }
}

fn state_of(s: &Sandbox) -> &'static str {
    if s.error_reason.is_some() {
        "error"
    } else if s.stopped && s.stopping > 0 {
        "stopping"
    } else if s.stopped {
        "stopped"
    } else if s.warming > 0 {
        "starting"
    } else if s.snapshotting > 0 {
        "snapshotting"
    } else {
        "started"
    }
}

/// One observation of a sandbox: its transitions move on.
fn observe(s: &mut Sandbox) {
    s.warming = s.warming.saturating_sub(1);
    s.stopping = s.stopping.saturating_sub(1);
    s.snapshotting = s.snapshotting.saturating_sub(1);
}

/// The key of the sandbox `id` names (id or name), as Daytona's `findOneByIdOrName`.
fn key_of(sandboxes: &HashMap<String, Sandbox>, id: &str) -> Option<String> {
    sandboxes
        .iter()
        .find(|(key, s)| (*key == id || s.name == id) && !s.errored_deleted())
        .map(|(key, _)| key.clone())
}

/// `POST /sandbox/{id}/stop[?force=]`: `stopping`, then `stopped`.
async fn stop(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    if !matches!(
        q.get("force").map(String::as_str),
        None | Some("true" | "false")
    ) {
        return error(StatusCode::BAD_REQUEST, "force must be a boolean value");
    }
    let mut sandboxes = inner.sandboxes.lock().unwrap();
    let Some(key) = key_of(&sandboxes, &id) else {
        return not_found(&id);
    };
    let s = sandboxes.get_mut(&key).unwrap();
    if state_of(s) != "started" {
        return error(StatusCode::BAD_REQUEST, "Sandbox is not started");
    }
    s.stopped = true;
    s.stopping = inner.warmup.load(Ordering::SeqCst).max(1);
    // Nothing runs in a stopped sandbox: its processes and the daemon's sessions end.
    s.processes = Processes::default();
    s.sessions.clear();
    axum::Json(record(&inner, &key, s, "stopping")).into_response()
}

/// `POST /sandbox/{id}/start`: `starting`, then `started`.
async fn start_sandbox(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let mut sandboxes = inner.sandboxes.lock().unwrap();
    let Some(key) = key_of(&sandboxes, &id) else {
        return not_found(&id);
    };
    let s = sandboxes.get_mut(&key).unwrap();
    if state_of(s) != "stopped" {
        return error(StatusCode::BAD_REQUEST, "Sandbox is not stopped");
    }
    s.stopped = false;
    s.warming = inner.warmup.load(Ordering::SeqCst).max(1);
    axum::Json(record(&inner, &key, s, "starting")).into_response()
}

/// `POST /sandbox/{id}/snapshot {name, includeMemory}`: the copy is taken now; the snapshot
/// is `pending`, then `active`.
async fn snapshot_sandbox(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let m = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let Some(name) = m
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    else {
        return error(StatusCode::BAD_REQUEST, "name must be a string");
    };
    let include_memory = match optional_bool(&m, "includeMemory") {
        Ok(b) => b,
        Err(r) => return r,
    };
    if include_memory {
        return error(
            StatusCode::BAD_REQUEST,
            "Container sandboxes do not support memory snapshots",
        );
    }
    let mut sandboxes = inner.sandboxes.lock().unwrap();
    let Some(key) = key_of(&sandboxes, &id) else {
        return not_found(&id);
    };
    let mut snapshots = inner.snapshots.lock().unwrap();
    if snapshots.values().any(|snap| snap.name == name) {
        return error(
            StatusCode::CONFLICT,
            format!("Snapshot with name {name} already exists"),
        );
    }
    let s = sandboxes.get_mut(&key).unwrap();
    if !matches!(state_of(s), "started" | "stopped") {
        return error(
            StatusCode::BAD_REQUEST,
            "Sandbox must be started or stopped to be snapshotted",
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    copy_tree(s.dir.path(), dir.path()).expect("copy the sandbox");
    let warmup = inner.warmup.load(Ordering::SeqCst).max(1);
    if !s.stopped {
        s.snapshotting = warmup;
    }
    let n = inner.next.fetch_add(1, Ordering::SeqCst);
    snapshots.insert(
        format!("9a2e51c0-0000-4000-8000-{n:012}"),
        Snapshot {
            name: name.to_owned(),
            pending: warmup,
            dir,
        },
    );
    let state = state_of(s);
    axum::Json(record(&inner, &key, s, state)).into_response()
}

fn snapshot_view(id: &str, snap: &Snapshot) -> Value {
    let state = if snap.pending > 0 {
        "pending"
    } else {
        "active"
    };
    json!({
        "id": id,
        "organizationId": "org-fake",
        "general": false,
        "name": snap.name,
        "imageName": "",
        "state": state,
        "size": if snap.pending > 0 { Value::Null } else { json!(0.25) },
        "entrypoint": null,
        "cpu": 1,
        "gpu": 0,
        "mem": 1,
        "disk": 3,
        "errorReason": null,
        "createdAt": "2026-01-01T00:00:00.000Z",
        "updatedAt": "2026-01-01T00:00:00.000Z",
        "lastUsedAt": null,
        "sandboxClass": "container",
    })
}

fn snapshot_not_found(id: &str) -> Response {
    error(StatusCode::NOT_FOUND, format!("Snapshot {id} not found"))
}

/// `GET /snapshots/{idOrName}`.
async fn get_snapshot(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let mut snapshots = inner.snapshots.lock().unwrap();
    match snapshots
        .iter_mut()
        .find(|(key, snap)| **key == id || snap.name == id)
    {
        Some((key, snap)) => {
            let view = snapshot_view(key, snap);
            snap.pending = snap.pending.saturating_sub(1);
            axum::Json(view).into_response()
        }
        None => snapshot_not_found(&id),
    }
}

/// `DELETE /snapshots/{id}`: by id only.
async fn delete_snapshot(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    match inner.snapshots.lock().unwrap().remove(&id) {
        Some(_) => StatusCode::OK.into_response(),
        None => snapshot_not_found(&id),
    }
}

fn record(inner: &Inner, id: &str, s: &Sandbox, state: &str) -> Value {
    json!({
        "id": id,
        "organizationId": "org-fake",
        "name": s.name,
        "snapshot": s.snapshot,
        "user": "daytona",
        "env": {},
        "labels": s.labels,
        "public": false,
        "networkBlockAll": false,
        "target": "us",
        "cpu": 1,
        "gpu": 0,
        "memory": 1,
        "disk": 3,
        "state": state,
        "desiredState": if s.desired_destroyed { "destroyed" } else { "started" },
        "errorReason": s.error_reason,
        "autoStopInterval": s.auto_stop_interval,
        "autoArchiveInterval": 10080,
        "autoDeleteInterval": -1,
        "toolboxProxyUrl": inner.toolbox_url.lock().unwrap().clone(),
    })
}

fn not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("Sandbox with ID or name {id} not found"),
    )
}

fn control_router(inner: Shared) -> Router {
    Router::new()
        .route("/sandbox", post(create).get(list))
        .route("/sandbox/{id}", get(get_one).delete(destroy))
        .route("/sandbox/{id}/stop", post(stop))
        .route("/sandbox/{id}/start", post(start_sandbox))
        .route("/sandbox/{id}/snapshot", post(snapshot_sandbox))
        .route("/snapshots/{id}", get(get_snapshot).delete(delete_snapshot))
        .with_state(inner)
}

async fn create(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    if let Some(wait) = inner.rate_limit_next_create.lock().unwrap().take() {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [
                ("retry-after-sandbox-create", wait.to_string()),
                ("x-ratelimit-remaining-sandbox-create", "0".to_owned()),
            ],
            axum::Json(json!({
                "statusCode": 429,
                "message": "Rate limit exceeded",
                "error": "Too Many Requests",
            })),
        )
            .into_response();
    }
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "Invalid JSON body");
    };
    if !v.is_object() {
        return error(StatusCode::BAD_REQUEST, "body must be an object");
    }
    // class-validator: autoStopInterval must be an integer (minutes), >= 0.
    let auto_stop = match v.get("autoStopInterval") {
        None => 15,
        Some(n) => match n.as_u64() {
            Some(n) => n,
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "autoStopInterval must be an integer number",
                );
            }
        },
    };
    let labels: BTreeMap<String, String> = match v.get("labels") {
        None => BTreeMap::new(),
        Some(l) => match serde_json::from_value(l.clone()) {
            Ok(l) => l,
            Err(_) => return error(StatusCode::BAD_REQUEST, "labels must be an object"),
        },
    };
    let snapshot = match v.get("snapshot") {
        None => "daytonaio/sandbox:latest".to_owned(),
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => return error(StatusCode::BAD_REQUEST, "snapshot must be a string"),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    // A snapshot made from a sandbox (by id or name) starts the new one from its files.
    if let Some(snap) = inner
        .snapshots
        .lock()
        .unwrap()
        .iter()
        .find(|(key, snap)| **key == snapshot || snap.name == snapshot)
        .map(|(_, snap)| snap)
    {
        if snap.pending > 0 {
            return error(
                StatusCode::BAD_REQUEST,
                format!("Snapshot {snapshot} is pending"),
            );
        }
        copy_tree(snap.dir.path(), dir.path()).expect("copy the snapshot");
    }
    let n = inner.next.fetch_add(1, Ordering::SeqCst);
    let id = format!("5f1c0b7e-0000-4000-8000-{n:012}");
    let name = match v.get("name") {
        None => id.clone(),
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        Some(_) => return error(StatusCode::BAD_REQUEST, "name must be a string"),
    };
    if inner
        .sandboxes
        .lock()
        .unwrap()
        .values()
        .any(|s| s.name == name)
    {
        return error(
            StatusCode::CONFLICT,
            format!("Sandbox with name {name} already exists"),
        );
    }
    let sandbox = Sandbox {
        name,
        snapshot,
        labels,
        auto_stop_interval: auto_stop,
        warming: inner.warmup.load(Ordering::SeqCst),
        error_reason: None,
        desired_destroyed: false,
        dir,
        sessions: HashMap::new(),
        processes: Processes::default(),
        stopped: false,
        stopping: 0,
        snapshotting: 0,
    };
    let out = record(&inner, &id, &sandbox, "creating");
    inner.sandboxes.lock().unwrap().insert(id, sandbox);
    (StatusCode::OK, axum::Json(out)).into_response()
}

async fn get_one(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let mut sandboxes = inner.sandboxes.lock().unwrap();
    // As Daytona's `findOneByIdOrName`: errored sandboxes meant to be gone are not found.
    let Some((id, s)) = sandboxes
        .iter_mut()
        .find(|(key, s)| (**key == id || s.name == id) && !s.errored_deleted())
    else {
        return not_found(&id);
    };
    let state = state_of(s);
    observe(s);
    axum::Json(record(&inner, id, s, state)).into_response()
}

async fn destroy(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let mut sandboxes = inner.sandboxes.lock().unwrap();
    let key = sandboxes
        .iter()
        .find(|(key, s)| (**key == id || s.name == id) && !s.errored_deleted())
        .map(|(key, _)| key.clone());
    match key.and_then(|k| sandboxes.remove(&k).map(|s| (k, s))) {
        Some((key, s)) => axum::Json(record(&inner, &key, &s, "destroying")).into_response(),
        None => not_found(&id),
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
    let filter: BTreeMap<String, String> = match q.get("labels") {
        None => BTreeMap::new(),
        Some(l) => match serde_json::from_str(l) {
            Ok(l) => l,
            Err(_) => return error(StatusCode::BAD_REQUEST, "labels must be JSON"),
        },
    };
    let limit = match q.get("limit") {
        None => 100,
        Some(limit) => match limit.parse::<usize>() {
            Ok(n @ 1..=200) => n,
            _ => return error(StatusCode::BAD_REQUEST, "limit must be between 1 and 200"),
        },
    };
    let include_errored_deleted = match q.get("includeErroredDeleted").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "includeErroredDeleted must be a boolean value",
            );
        }
    };
    let sandboxes = inner.sandboxes.lock().unwrap();
    // Ids grow with creation: the order is stable from page to page.
    let mut matching: Vec<(&String, &Sandbox)> = sandboxes
        .iter()
        .filter(|(_, s)| filter.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .filter(|(_, s)| include_errored_deleted || !s.errored_deleted())
        .collect();
    matching.sort_by(|a, b| a.0.cmp(b.0));
    let start = match q.get("cursor") {
        None => 0,
        Some(c) => match matching.iter().position(|(id, _)| *id == c) {
            Some(i) => i + 1,
            None => return error(StatusCode::BAD_REQUEST, "Invalid cursor"),
        },
    };
    let take = limit.min(inner.max_page.load(Ordering::SeqCst));
    let page: Vec<(&String, &Sandbox)> = matching.iter().skip(start).take(take).copied().collect();
    let next_cursor = match page.last() {
        Some((id, _)) if start + page.len() < matching.len() => json!(id),
        _ => Value::Null,
    };
    let items: Vec<Value> = page
        .iter()
        .map(|(id, s)| record(&inner, id, s, state_of(s)))
        .collect();
    axum::Json(json!({"items": items, "nextCursor": next_cursor})).into_response()
}

fn toolbox_router(inner: Shared) -> Router {
    Router::new()
        .route("/toolbox/{id}/process/execute", post(execute))
        .route(
            "/toolbox/{id}/process/session",
            post(create_session).get(list_sessions),
        )
        .route(
            "/toolbox/{id}/process/session/{sid}",
            get(get_session).delete(delete_session),
        )
        .route(
            "/toolbox/{id}/process/session/{sid}/exec",
            post(session_exec),
        )
        .route(
            "/toolbox/{id}/process/session/{sid}/command/{cid}",
            get(get_session_command),
        )
        .route(
            "/toolbox/{id}/process/session/{sid}/command/{cid}/logs",
            get(session_command_logs),
        )
        .route(
            "/toolbox/{id}/process/session/{sid}/command/{cid}/input",
            post(session_command_input),
        )
        .route(
            "/toolbox/{id}/process/session/{sid}/command/{cid}/terminate",
            post(terminate_session_command),
        )
        .route("/toolbox/{id}/files/info", get(info))
        .route("/toolbox/{id}/files/download", get(download))
        .route("/toolbox/{id}/files/upload", post(upload))
        .with_state(inner)
}

/// The directory of a started sandbox (the proxy refuses sandboxes that are not running).
fn sandbox_dir(inner: &Inner, headers: &HeaderMap, id: &str) -> Result<PathBuf, Response> {
    authorized(headers)?;
    let sandboxes = inner.sandboxes.lock().unwrap();
    let s = sandboxes.get(id).ok_or_else(|| not_found(id))?;
    if s.warming > 0 || s.stopped || s.error_reason.is_some() {
        return Err(error(StatusCode::BAD_REQUEST, "Sandbox is not running"));
    }
    Ok(s.dir.path().to_owned())
}

async fn execute(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let home = match sandbox_dir(&inner, &headers, &id) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "invalid request body");
    };
    let Some(command) = v.get("command").and_then(Value::as_str) else {
        return error(StatusCode::BAD_REQUEST, "command is required");
    };
    let timeout = match v.get("timeout") {
        None => 0,
        Some(t) => match t.as_u64() {
            Some(t) => t,
            None => return error(StatusCode::BAD_REQUEST, "timeout must be an integer"),
        },
    };
    let envs: BTreeMap<String, String> = match v.get("envs") {
        None => BTreeMap::new(),
        Some(e) => match serde_json::from_value(e.clone()) {
            Ok(e) => e,
            Err(_) => return error(StatusCode::BAD_REQUEST, "envs must map strings to strings"),
        },
    };
    let cwd = match v.get("cwd") {
        None => home.clone(),
        Some(Value::String(c)) => resolve(&home, c),
        Some(_) => return error(StatusCode::BAD_REQUEST, "cwd must be a string"),
    };
    // The daemon applies a timeout only when it is > 0.
    let deadline = if timeout > 0 {
        Duration::from_secs(timeout)
    } else {
        Duration::from_secs(600)
    };
    // The daemon splits the command with a quote-aware splitter that knows no escapes and
    // runs the argv without a shell; both streams point at one buffer: merge them.
    let argv = split_command(command);
    if argv.is_empty() {
        return error(StatusCode::BAD_REQUEST, "empty command");
    }
    let quoted: Vec<String> = argv
        .iter()
        .map(|a| corral_provider::shell::shell_quote(a))
        .collect();
    let script = format!("exec 2>&1; exec {}", quoted.join(" "));
    match run_command(&script, &cwd, &envs, deadline, 16 << 20).await {
        Ok(RunOutcome::Finished(out)) => axum::Json(json!({
            "exitCode": out.exit_code,
            "result": String::from_utf8_lossy(&out.stdout),
        }))
        .into_response(),
        Ok(RunOutcome::TimedOut) => error(StatusCode::REQUEST_TIMEOUT, "command execution timeout"),
        Err(e) => axum::Json(json!({"exitCode": -1, "result": e.to_string()})).into_response(),
    }
}

/// The daemon's command splitter: spaces separate words, `'` and `"` quote (the other quote is
/// literal inside), and there are no escapes.
fn split_command(command: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    for c in command.chars() {
        match (c, quote) {
            ('"' | '\'', None) => quote = Some(c),
            (c, Some(q)) if c == q => quote = None,
            (' ', None) => {
                if !current.is_empty() {
                    args.push(std::mem::take(&mut current));
                }
            }
            (c, _) => current.push(c),
        }
    }
    if !current.is_empty() {
        args.push(current);
    }
    args
}

/// 403 as the daemon answers it when the sandbox user lacks the permission on `full`.
fn forbidden(inner: &Inner, full: &std::path::Path) -> Option<Response> {
    let denied = inner.denied.lock().unwrap();
    denied.iter().any(|d| full.starts_with(d)).then(|| {
        error(
            StatusCode::FORBIDDEN,
            format!("open {}: permission denied", full.display()),
        )
    })
}

/// An I/O error as the daemon answers it: 403 for a permission, else `otherwise`.
fn io_error(e: &std::io::Error, otherwise: StatusCode) -> Response {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        error(StatusCode::FORBIDDEN, e.to_string())
    } else {
        error(otherwise, e.to_string())
    }
}

fn path_param(q: &HashMap<String, String>) -> Result<String, Response> {
    q.get("path")
        .filter(|p| !p.is_empty())
        .cloned()
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "path is required"))
}

async fn info(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let (home, path) =
        match sandbox_dir(&inner, &headers, &id).and_then(|h| Ok((h, path_param(&q)?))) {
            Ok(x) => x,
            Err(r) => return r,
        };
    let full = resolve(&home, &path);
    if let Some(r) = forbidden(&inner, &full) {
        return r;
    }
    match std::fs::metadata(&full) {
        Ok(m) => axum::Json(json!({
            "name": full.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            "size": m.len(),
            "mode": "drwxr-xr-x",
            "modTime": "2026-01-01 00:00:00 +0000 UTC",
            "modifiedAt": "2026-01-01T00:00:00Z",
            "isDir": m.is_dir(),
            "owner": "1000",
            "group": "1000",
            "permissions": "0755",
        }))
        .into_response(),
        Err(e) => io_error(&e, StatusCode::NOT_FOUND),
    }
}

async fn download(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let (home, path) =
        match sandbox_dir(&inner, &headers, &id).and_then(|h| Ok((h, path_param(&q)?))) {
            Ok(x) => x,
            Err(r) => return r,
        };
    let full = resolve(&home, &path);
    if let Some(r) = forbidden(&inner, &full) {
        return r;
    }
    if full.is_dir() {
        return error(StatusCode::BAD_REQUEST, "path must be a file");
    }
    match std::fs::read(&full) {
        Ok(bytes) => (
            StatusCode::OK,
            [("content-type", "application/octet-stream")],
            bytes,
        )
            .into_response(),
        Err(e) => io_error(&e, StatusCode::NOT_FOUND),
    }
}

async fn upload(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let (home, path) =
        match sandbox_dir(&inner, &headers, &id).and_then(|h| Ok((h, path_param(&q)?))) {
            Ok(x) => x,
            Err(r) => return r,
        };
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(part) = parse_multipart(content_type, &body)
        .and_then(|parts| parts.into_iter().find(|p| p.name == "file"))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "http: no such file (multipart field `file`)",
        );
    };
    let full = resolve(&home, &path);
    if let Some(r) = forbidden(&inner, &full) {
        return r;
    }
    // The daemon creates missing parents, then overwrites.
    if let Some(parent) = full.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return io_error(&e, StatusCode::BAD_REQUEST);
    }
    match std::fs::write(&full, &part.data) {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => io_error(&e, StatusCode::BAD_REQUEST),
    }
}

// The daemon's sessions: `POST /process/session`, `…/exec` (with `runAsync`, answering the
// command id at once), the command's state, its log snapshot, input, terminate.

const STDOUT_PREFIX: &[u8] = b"\x01\x01\x01";
const STDERR_PREFIX: &[u8] = b"\x02\x02\x02";

fn json_object(body: &Bytes) -> Result<serde_json::Map<String, Value>, Response> {
    plumbing::object(body).ok_or_else(|| error(StatusCode::BAD_REQUEST, "invalid request body"))
}

fn optional_bool(m: &serde_json::Map<String, Value>, key: &str) -> Result<bool, Response> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("{key} must be a boolean"),
        )),
    }
}

fn session_not_found() -> Response {
    error(StatusCode::NOT_FOUND, "session not found")
}

fn command_not_found() -> Response {
    error(StatusCode::NOT_FOUND, "command not found")
}

fn command_view(c: &SessionCommand) -> Value {
    let mut v = json!({ "id": c.id, "command": c.command });
    if let Some(code) = *c.exit_code.lock().unwrap() {
        v["exitCode"] = json!(code);
    }
    v
}

fn session_view(id: &str, s: &Session) -> Value {
    json!({
        "sessionId": id,
        "commands": s.commands.iter().map(|c| command_view(c)).collect::<Vec<_>>(),
    })
}

/// The daemon's labelers: each complete line of each stream goes to the log behind its
/// prefix, in the order they are seen; at the end a last line without a newline gets one
/// (`while read -r line || [ -n "$line" ]; do printf '<prefix>%s\n'`), and only then is the
/// exit code written.
async fn label(cmd: Arc<SessionCommand>) {
    let (mut seen_out, mut seen_err) = (0u64, 0u64);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        let ended = cmd.process.exit().is_some();
        for (stream, seen, partial, prefix) in [
            (OutputStream::Stdout, &mut seen_out, &mut out, STDOUT_PREFIX),
            (OutputStream::Stderr, &mut seen_err, &mut err, STDERR_PREFIX),
        ] {
            let new = cmd.process.read(stream, *seen);
            *seen += new.len() as u64;
            partial.extend_from_slice(&new);
            let mut log = cmd.log.lock().unwrap();
            while let Some(nl) = partial.iter().position(|b| *b == b'\n') {
                log.extend_from_slice(prefix);
                log.extend(partial.drain(..=nl));
            }
            if ended && !partial.is_empty() {
                log.extend_from_slice(prefix);
                log.append(partial);
                log.push(b'\n');
            }
        }
        if let (true, Some(exit)) = (ended, cmd.process.exit()) {
            *cmd.exit_code.lock().unwrap() = Some(exit.code());
            return;
        }
        cmd.process
            .wait_output(seen_out, seen_err, Duration::from_secs(1))
            .await;
    }
}

async fn create_session(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = sandbox_dir(&inner, &headers, &id) {
        return r;
    }
    let m = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let Some(sid) = m
        .get("sessionId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return error(StatusCode::BAD_REQUEST, "sessionId is required");
    };
    let mut sandboxes = inner.sandboxes.lock().unwrap();
    let Some(sandbox) = sandboxes.get_mut(&id) else {
        return not_found(&id);
    };
    if sandbox.sessions.contains_key(sid) {
        return error(StatusCode::CONFLICT, "session already exists");
    }
    sandbox.sessions.insert(sid.to_owned(), Session::default());
    StatusCode::CREATED.into_response()
}

async fn list_sessions(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = sandbox_dir(&inner, &headers, &id) {
        return r;
    }
    let sandboxes = inner.sandboxes.lock().unwrap();
    let Some(sandbox) = sandboxes.get(&id) else {
        return not_found(&id);
    };
    let all: Vec<Value> = sandbox
        .sessions
        .iter()
        .map(|(sid, s)| session_view(sid, s))
        .collect();
    axum::Json(all).into_response()
}

async fn get_session(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path((id, sid)): Path<(String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&inner, &headers, &id) {
        return r;
    }
    let sandboxes = inner.sandboxes.lock().unwrap();
    match sandboxes.get(&id).and_then(|s| s.sessions.get(&sid)) {
        Some(s) => axum::Json(session_view(&sid, s)).into_response(),
        None => session_not_found(),
    }
}

async fn delete_session(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path((id, sid)): Path<(String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&inner, &headers, &id) {
        return r;
    }
    let removed = inner
        .sandboxes
        .lock()
        .unwrap()
        .get_mut(&id)
        .and_then(|s| s.sessions.remove(&sid));
    let Some(session) = removed else {
        return session_not_found();
    };
    // The session shell's process group goes, and with it the session's directory (logs).
    for c in &session.commands {
        let _ = c.process.signal(9).await;
    }
    StatusCode::NO_CONTENT.into_response()
}

fn find_command(
    inner: &Inner,
    id: &str,
    sid: &str,
    cid: &str,
) -> Result<Arc<SessionCommand>, Response> {
    let sandboxes = inner.sandboxes.lock().unwrap();
    let session = sandboxes
        .get(id)
        .and_then(|s| s.sessions.get(sid))
        .ok_or_else(session_not_found)?;
    session
        .commands
        .iter()
        .find(|c| c.id == cid)
        .cloned()
        .ok_or_else(command_not_found)
}

async fn session_exec(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path((id, sid)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let home = match sandbox_dir(&inner, &headers, &id) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let m = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let Some(command) = m.get("command").and_then(Value::as_str) else {
        return error(StatusCode::BAD_REQUEST, "command is required");
    };
    // The daemon trims the command before running it.
    let command = command.trim().to_owned();
    let (run_async, deprecated_async, suppress) = match (
        optional_bool(&m, "runAsync"),
        optional_bool(&m, "async"),
        optional_bool(&m, "suppressInputEcho"),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return r,
    };
    let is_async = run_async || deprecated_async;
    let n = inner.next.fetch_add(1, Ordering::SeqCst);
    let cmd_id = format!("0c0ffee0-0000-4000-8000-{n:012}");
    let spawned = {
        let mut sandboxes = inner.sandboxes.lock().unwrap();
        let Some(sandbox) = sandboxes.get_mut(&id) else {
            return not_found(&id);
        };
        if !sandbox.sessions.contains_key(&sid) {
            return session_not_found();
        }
        // The command reads the session's input FIFO: held open (no end of file) for an
        // async command, empty for a synchronous one.
        let spec = SpawnSpec::new(command.clone(), &home)
            .with_stdin()
            .with_tag(&cmd_id);
        match sandbox.processes.spawn(spec) {
            Ok(process) => {
                let cmd = Arc::new(SessionCommand {
                    id: cmd_id.clone(),
                    command: command.clone(),
                    process,
                    suppress_input_echo: suppress,
                    log: Mutex::new(Vec::new()),
                    exit_code: Mutex::new(None),
                });
                if let Some(session) = sandbox.sessions.get_mut(&sid) {
                    session.commands.push(cmd.clone());
                }
                cmd
            }
            Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
        }
    };
    tokio::spawn(label(spawned.clone()));
    if is_async {
        return (StatusCode::ACCEPTED, axum::Json(json!({ "cmdId": cmd_id }))).into_response();
    }
    spawned.process.close_stdin().await;
    loop {
        if let Some(code) = *spawned.exit_code.lock().unwrap() {
            let log = spawned.log.lock().unwrap().clone();
            let (stdout, stderr) = demux(&log);
            return axum::Json(json!({
                "cmdId": cmd_id,
                "output": String::from_utf8_lossy(&strip_prefixes(&log)),
                "stdout": String::from_utf8_lossy(&stdout),
                "stderr": String::from_utf8_lossy(&stderr),
                "exitCode": code,
            }))
            .into_response();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn get_session_command(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path((id, sid, cid)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&inner, &headers, &id) {
        return r;
    }
    match find_command(&inner, &id, &sid, &cid) {
        Ok(c) => axum::Json(command_view(&c)).into_response(),
        Err(r) => r,
    }
}

/// The log without its stream prefixes: what old SDKs (and clients that do not ask for split
/// output) get.
fn strip_prefixes(log: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(log.len());
    let mut i = 0;
    while i < log.len() {
        let rest = &log[i..];
        if rest.starts_with(STDOUT_PREFIX) || rest.starts_with(STDERR_PREFIX) {
            i += 3;
        } else {
            out.push(log[i]);
            i += 1;
        }
    }
    out
}

/// The log split by its prefixes into stdout and stderr.
fn demux(log: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut to_err = false;
    let mut i = 0;
    while i < log.len() {
        let rest = &log[i..];
        if rest.starts_with(STDOUT_PREFIX) {
            to_err = false;
            i += 3;
        } else if rest.starts_with(STDERR_PREFIX) {
            to_err = true;
            i += 3;
        } else {
            if to_err { &mut err } else { &mut out }.push(log[i]);
            i += 1;
        }
    }
    (out, err)
}

/// The whole log, read again from its first byte on every request (the daemon opens the file
/// anew): plain text with the prefixes removed, or, when the client asks for split output
/// (`X-Daytona-Split-Output: true`), JSON `{output, stdout, stderr}`. `follow` is served over
/// WebSocket only, which this fake does not model: over plain HTTP it is ignored.
async fn session_command_logs(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path((id, sid, cid)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = sandbox_dir(&inner, &headers, &id) {
        return r;
    }
    if q.get("follow").is_some_and(|f| f != "true" && f != "false") {
        return error(StatusCode::BAD_REQUEST, "follow must be a boolean");
    }
    let cmd = match find_command(&inner, &id, &sid, &cid) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let log = cmd.log.lock().unwrap().clone();
    let split = headers
        .get("x-daytona-split-output")
        .is_some_and(|v| v.as_bytes() == b"true");
    if split {
        let (stdout, stderr) = demux(&log);
        return axum::Json(json!({
            "output": String::from_utf8_lossy(&strip_prefixes(&log)),
            "stdout": String::from_utf8_lossy(&stdout),
            "stderr": String::from_utf8_lossy(&stderr),
        }))
        .into_response();
    }
    (
        StatusCode::OK,
        [("content-type", "text/plain; charset=utf-8")],
        strip_prefixes(&log),
    )
        .into_response()
}

async fn session_command_input(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path((id, sid, cid)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    if let Err(r) = sandbox_dir(&inner, &headers, &id) {
        return r;
    }
    let m = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let Some(data) = m.get("data").and_then(Value::as_str) else {
        return error(StatusCode::BAD_REQUEST, "data is required");
    };
    let cmd = match find_command(&inner, &id, &sid, &cid) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if let Some(code) = *cmd.exit_code.lock().unwrap() {
        return error(
            StatusCode::GONE,
            format!("command has already completed with exit code {code}"),
        );
    }
    // "Ensure newline for commands like `read`."
    let mut data = data.to_owned();
    if !data.ends_with('\n') {
        data.push('\n');
    }
    if let Err(e) = cmd.process.write_stdin(data.as_bytes()).await {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("failed to write to input pipe: {e}"),
        );
    }
    if !cmd.suppress_input_echo {
        let mut log = cmd.log.lock().unwrap();
        log.extend_from_slice(STDOUT_PREFIX);
        log.extend_from_slice(data.as_bytes());
    }
    StatusCode::NO_CONTENT.into_response()
}

/// SIGKILL to the command's process group; 410 once it completed.
async fn terminate_session_command(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path((id, sid, cid)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&inner, &headers, &id) {
        return r;
    }
    let cmd = match find_command(&inner, &id, &sid, &cid) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if let Some(code) = *cmd.exit_code.lock().unwrap() {
        return error(
            StatusCode::GONE,
            format!("command has already completed with exit code {code}"),
        );
    }
    match cmd.process.signal(9).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
