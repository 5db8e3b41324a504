//! Runloop's API on loopback, for tests (feature `fake`).
//!
//! Checks requests as Runloop's published description does: `Authorization: Bearer <key>`
//! (401 otherwise), known paths and methods only, `additionalProperties: false` bodies with
//! their required fields and types, `keep_alive_time_seconds` within 1..=172800,
//! `optimistic_timeout`/`timeout_seconds` ≤ 25, a UUIDv7 `command_id`, and an integer
//! `last_n` (default 100 lines, as Runloop). Files are host paths.
//!
//! Executions are asynchronous, as Runloop's are: each is a host process (the testkit's
//! background runner, `sh -c` in a temporary directory per devbox, its "home") that runs on
//! after the call that started it. `execute` waits up to `optimistic_timeout` and answers a
//! running execution past it, a repeated `command_id` naming the same execution;
//! `execute_async` answers at once and may attach stdin; `send_std_in` writes text or closes
//! stdin (`EOF`), refused for an execution started without `attach_stdin`; `kill` kills the
//! process group; the execution view leaves `stdout`, `stderr` and `exit_status` unset until
//! it completed. `stream_stdout_updates` / `stream_stderr_updates` are SSE streams of
//! `{"output", "offset"}` chunks from the byte `?offset=` (where each chunk starts, in the
//! fake's reading of the description), as text (bytes that are not UTF-8 are replaced);
//! they end once the execution completed and all was sent, or after an idle time without
//! output ([`Fake::set_stream_idle`]).
//!
//! Lifecycle as Runloop describes it: `suspend` (a running devbox only; its processes end, its
//! home is kept) answers `suspending`, then `suspended` at the next observation; `resume` (a
//! suspended devbox only) answers `resuming`, then `running`; a devbox that is not running
//! refuses executions and files. `lifecycle.after_idle` suspends (or shuts down) a devbox left
//! without executions, file calls or `keep_alive` for `idle_time_seconds`.
//! `snapshot_disk_async` copies the home at the call and reads `in_progress` once, then
//! `complete`; a create with `snapshot_id` starts its home from that copy; deleting a
//! snapshot (complete only, `409` otherwise) removes the copy and leaves status `deleted`.
//!
//! [`Fake::start`] serves it on loopback; [`Fake::config`] and [`Fake::context`] point the
//! adapter at it, and its [`Harness`] implementation runs the shared suites.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::result_large_err)] // Test double: a poisoned lock is a bug; error responses are returned early by value.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use corral_domain::{CreateSandboxRequest, OutputStream, Provider, ProviderContext};
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::background::{Process, Processes, SpawnSpec};
use corral_provider_testkit::fake::{FakeServer, parse_multipart};
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::plumbing::{self, copy_tree, resolve};
use serde_json::{Value, json};

/// The API key [`Fake`] accepts.
pub const API_KEY: &str = "ak_fake_runloop_key";

const CREATE_FIELDS: &[&str] = &[
    "name",
    "environment_variables",
    "secrets",
    "file_mounts",
    "entrypoint",
    "blueprint_id",
    "blueprint_name",
    "repo_connection_id",
    "launch_parameters",
    "snapshot_id",
    "metadata",
    "code_mounts",
    "mounts",
    "tunnel",
    "gateways",
    "mcp",
];
const LAUNCH_FIELDS: &[&str] = &[
    "launch_commands",
    "resource_size_request",
    "available_ports",
    "keep_alive_time_seconds",
    "after_idle",
    "custom_cpu_cores",
    "custom_gb_memory",
    "custom_disk_size",
    "architecture",
    "user_parameters",
    "lifecycle",
    "network_policy_id",
];

/// One execution: a host process running on after the call that started it.
struct Execution {
    process: Process,
    /// Started by `execute_async` with `attach_stdin: true`.
    stdin: bool,
}

struct Devbox {
    view: Value,
    /// The devbox's disk: kept across a suspend, gone at shutdown.
    dir: Option<tempfile::TempDir>,
    /// `lifecycle.after_idle`: idle seconds and the action (`suspend` or `shutdown`).
    after_idle: Option<(u64, String)>,
    /// The last call that used the devbox (an execution, a file), for the idle policy.
    active_at: Instant,
    /// The devbox's processes: dropping the table (at shutdown) kills them.
    processes: Option<Processes>,
    executions: HashMap<String, Arc<Execution>>,
    /// `execute`'s `command_id` → execution id: a repeated id names the same execution.
    command_ids: HashMap<String, String>,
}

/// A disk snapshot: a copy of the devbox's directory made when it was asked for.
struct Snapshot {
    view: Value,
    /// `in_progress` (for one observation), `complete` or `deleted`.
    status: &'static str,
    dir: Option<tempfile::TempDir>,
}

#[derive(Default)]
struct Inner {
    devboxes: HashMap<String, Devbox>,
    snapshots: HashMap<String, Snapshot>,
    order: Vec<String>,
    next: u64,
}

/// The router's state: the key it accepts, the world of devboxes, and how long an update
/// stream stays open without new output.
#[derive(Clone)]
struct Api {
    key: Arc<str>,
    inner: Arc<Mutex<Inner>>,
    idle: Arc<Mutex<Duration>>,
}

/// How long an update stream stays open while its execution prints nothing, by default (then
/// it ends, as Runloop's do on their idle timeout; clients resume at their offset).
pub const DEFAULT_STREAM_IDLE: Duration = Duration::from_secs(20);

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "message": message }))).into_response()
}

fn bad(message: impl AsRef<str>) -> Response {
    error(StatusCode::BAD_REQUEST, message.as_ref())
}

fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "Devbox not found.")
}

async fn auth(State(fake): State<Api>, req: Request, next: Next) -> Response {
    let want = format!("Bearer {}", fake.key);
    match req.headers().get("authorization").map(|v| v.to_str()) {
        Some(Ok(got)) if got == want => next.run(req).await,
        _ => error(StatusCode::UNAUTHORIZED, "Unauthorized: invalid API key"),
    }
}

/// The Runloop API as an axum router accepting `api_key`.
pub fn router(api_key: &str) -> Router {
    router_with_idle(api_key, Arc::new(Mutex::new(DEFAULT_STREAM_IDLE)))
}

fn router_with_idle(api_key: &str, idle: Arc<Mutex<Duration>>) -> Router {
    let fake = Api {
        key: Arc::from(api_key),
        inner: Arc::default(),
        idle,
    };
    Router::new()
        .route("/v1/devboxes", post(create).get(list))
        .route("/v1/devboxes/{id}", get(get_devbox))
        .route("/v1/devboxes/{id}/shutdown", post(shutdown))
        .route("/v1/devboxes/{id}/suspend", post(suspend))
        .route("/v1/devboxes/{id}/resume", post(resume))
        .route("/v1/devboxes/{id}/keep_alive", post(keep_alive))
        .route(
            "/v1/devboxes/{id}/snapshot_disk_async",
            post(snapshot_disk_async),
        )
        .route(
            "/v1/devboxes/disk_snapshots/{id}/status",
            get(snapshot_status),
        )
        .route(
            "/v1/devboxes/disk_snapshots/{id}/delete",
            post(delete_snapshot),
        )
        .route("/v1/devboxes/{id}/execute", post(execute))
        .route("/v1/devboxes/{id}/execute_async", post(execute_async))
        .route("/v1/devboxes/{id}/executions/{eid}", get(get_execution))
        .route(
            "/v1/devboxes/{id}/executions/{eid}/wait_for_status",
            post(wait_for_status),
        )
        .route("/v1/devboxes/{id}/executions/{eid}/kill", post(kill))
        .route(
            "/v1/devboxes/{id}/executions/{eid}/send_std_in",
            post(send_std_in),
        )
        .route(
            "/v1/devboxes/{id}/executions/{eid}/stream_stdout_updates",
            get(stream_stdout_updates),
        )
        .route(
            "/v1/devboxes/{id}/executions/{eid}/stream_stderr_updates",
            get(stream_stderr_updates),
        )
        .route("/v1/devboxes/{id}/download_file", post(download_file))
        .route("/v1/devboxes/{id}/upload_file", post(upload_file))
        .layer(axum::middleware::from_fn_with_state(fake.clone(), auth))
        .with_state(fake)
}

fn json_body(body: &Bytes) -> Result<serde_json::Map<String, Value>, Response> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(bad("request body must be a JSON object")),
    }
}

fn only_fields(map: &serde_json::Map<String, Value>, allowed: &[&str]) -> Result<(), Response> {
    plumbing::unknown_field(map, allowed)
        .map_or(Ok(()), |k| Err(bad(format!("Unrecognized field \"{k}\""))))
}

fn string_map(v: &Value) -> bool {
    plumbing::string_map(v).is_some()
}

async fn create(State(fake): State<Api>, body: Bytes) -> Response {
    let map = if body.is_empty() {
        serde_json::Map::new()
    } else {
        match json_body(&body) {
            Ok(m) => m,
            Err(r) => return r,
        }
    };
    if let Err(r) = only_fields(&map, CREATE_FIELDS) {
        return r;
    }
    for field in ["name", "blueprint_id", "blueprint_name", "snapshot_id"] {
        if map
            .get(field)
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            return bad(format!("{field} must be a string"));
        }
    }
    let sources = ["blueprint_id", "blueprint_name", "snapshot_id"]
        .iter()
        .filter(|f| map.get(**f).is_some_and(|v| !v.is_null()))
        .count();
    if sources > 1 {
        return bad("Only one of (Snapshot ID, Blueprint ID, Blueprint name) should be specified");
    }
    if map.get("metadata").is_some_and(|v| !string_map(v)) {
        return bad("metadata must be a map of strings");
    }
    let mut launch = json!({});
    let mut after_idle = None;
    if let Some(lp) = map.get("launch_parameters").filter(|v| !v.is_null()) {
        let Some(lp_map) = lp.as_object() else {
            return bad("launch_parameters must be an object");
        };
        if let Err(r) = only_fields(lp_map, LAUNCH_FIELDS) {
            return r;
        }
        if let Some(lc) = lp_map.get("lifecycle").filter(|v| !v.is_null()) {
            match idle_policy(lc) {
                Ok(policy) => after_idle = policy,
                Err(r) => return r,
            }
        }
        if let Some(k) = lp_map.get("keep_alive_time_seconds") {
            match k.as_u64() {
                Some(1..=172_800) => {}
                _ => {
                    return bad(
                        "keep_alive_time_seconds must be an integer number of seconds between 1 and 172800",
                    );
                }
            }
        }
        launch = lp.clone();
    }
    if launch.get("keep_alive_time_seconds").is_none() {
        launch["keep_alive_time_seconds"] = json!(3600);
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut inner = fake.inner.lock().unwrap();
    // A devbox booted from a disk snapshot starts with a copy of that disk.
    if let Some(snapshot) = map.get("snapshot_id").and_then(Value::as_str) {
        match inner.snapshots.get(snapshot) {
            Some(Snapshot {
                status: "complete",
                dir: Some(disk),
                ..
            }) => {
                if let Err(e) = copy_tree(disk.path(), dir.path()) {
                    return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string());
                }
            }
            Some(_) => return bad("Snapshot is not complete"),
            None => return error(StatusCode::NOT_FOUND, "Snapshot not found."),
        }
    }
    inner.next += 1;
    let id = format!("dbx_fake{:08}", inner.next);
    let view = json!({
        "id": id,
        "name": map.get("name").cloned().unwrap_or(Value::Null),
        "status": "provisioning",
        "create_time_ms": 1_790_000_000_000u64,
        "end_time_ms": null,
        "blueprint_id": map.get("blueprint_id").cloned().unwrap_or(Value::Null),
        "snapshot_id": map.get("snapshot_id").cloned().unwrap_or(Value::Null),
        "metadata": map.get("metadata").cloned().unwrap_or(json!({})),
        "launch_parameters": launch,
        "capabilities": [],
        "state_transitions": [{"status": "provisioning", "transition_time_ms": 1_790_000_000_000u64}],
    });
    inner.devboxes.insert(
        id.clone(),
        Devbox {
            view: view.clone(),
            dir: Some(dir),
            after_idle,
            active_at: Instant::now(),
            processes: Some(Processes::default()),
            executions: HashMap::new(),
            command_ids: HashMap::new(),
        },
    );
    inner.order.push(id);
    axum::Json(view).into_response()
}

async fn get_devbox(State(fake): State<Api>, UrlPath(id): UrlPath<String>) -> Response {
    let mut inner = fake.inner.lock().unwrap();
    let Some(d) = inner.devboxes.get_mut(&id) else {
        return not_found();
    };
    // Booting, suspending and resuming each take one observation.
    let next = match d.view["status"].as_str() {
        Some("provisioning" | "resuming") => Some("running"),
        Some("suspending") => Some("suspended"),
        _ => None,
    };
    if let Some(next) = next {
        let view = d.view.clone();
        transition(d, next);
        return axum::Json(view).into_response();
    }
    idle_check(d);
    axum::Json(d.view.clone()).into_response()
}

/// Moves `d` to `status`, noting the transition as Runloop's view does.
fn transition(d: &mut Devbox, status: &str) {
    d.view["status"] = json!(status);
    if let Some(t) = d.view["state_transitions"].as_array_mut() {
        t.push(json!({"status": status, "transition_time_ms": 1_790_000_050_000u64}));
    }
}

/// Runloop's idle policy: a running devbox with no execution running and no call using it
/// for `idle_time_seconds` is suspended (its processes end, its disk is kept) or shut down.
fn idle_check(d: &mut Devbox) {
    let Some((secs, action)) = d.after_idle.clone() else {
        return;
    };
    let busy = d.executions.values().any(|e| e.process.exit().is_none());
    if d.view["status"] != "running" || busy {
        return;
    }
    if d.active_at.elapsed() < Duration::from_secs(secs) {
        return;
    }
    d.processes = None;
    if action == "suspend" {
        transition(d, "suspended");
    } else {
        transition(d, "shutdown");
        d.view["shutdown_reason"] = json!("idle");
        d.dir = None;
    }
}

/// Checks `launch_parameters.lifecycle` and answers its idle policy.
fn idle_policy(lifecycle: &Value) -> Result<Option<(u64, String)>, Response> {
    let Some(lc) = lifecycle.as_object() else {
        return Err(bad("lifecycle must be an object"));
    };
    only_fields(lc, &["after_idle", "resume_triggers"])?;
    let Some(after) = lc.get("after_idle").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Some(after) = after.as_object() else {
        return Err(bad("after_idle must be an object"));
    };
    only_fields(after, &["idle_time_seconds", "on_idle"])?;
    let secs = after
        .get("idle_time_seconds")
        .and_then(Value::as_u64)
        .filter(|s| i32::try_from(*s).is_ok())
        .ok_or_else(|| bad("idle_time_seconds is required and must be an int32"))?;
    match after.get("on_idle").and_then(Value::as_str) {
        Some(action @ ("suspend" | "shutdown")) => Ok(Some((secs, action.to_owned()))),
        _ => Err(bad("on_idle is required: shutdown or suspend")),
    }
}

/// The bytes of the files under `dir`.
fn tree_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(k) if k.is_dir() => tree_size(&e.path()),
            Ok(k) if k.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// `POST /v1/devboxes/{id}/suspend`: the disk is saved, processes end; `suspending` until
/// the next observation. A devbox that is not running is refused, as Runloop does.
async fn suspend(State(fake): State<Api>, UrlPath(id): UrlPath<String>) -> Response {
    let mut inner = fake.inner.lock().unwrap();
    let Some(d) = inner.devboxes.get_mut(&id) else {
        return not_found();
    };
    idle_check(d);
    if d.view["status"] != "running" {
        return bad("Devbox is not running.");
    }
    // Memory is not kept: every process ends.
    d.processes = None;
    transition(d, "suspending");
    axum::Json(d.view.clone()).into_response()
}

/// `POST /v1/devboxes/{id}/resume`: boots the saved disk again; `resuming` until the next
/// observation. A devbox that is not suspended is refused, as Runloop does.
async fn resume(State(fake): State<Api>, UrlPath(id): UrlPath<String>) -> Response {
    let mut inner = fake.inner.lock().unwrap();
    let Some(d) = inner.devboxes.get_mut(&id) else {
        return not_found();
    };
    idle_check(d);
    if d.view["status"] != "suspended" {
        return bad("Devbox is not suspended.");
    }
    d.processes = Some(Processes::default());
    d.active_at = Instant::now();
    transition(d, "resuming");
    axum::Json(d.view.clone()).into_response()
}

/// `POST /v1/devboxes/{id}/keep_alive`: resets the idle timer of a running devbox.
async fn keep_alive(State(fake): State<Api>, UrlPath(id): UrlPath<String>) -> Response {
    let mut inner = fake.inner.lock().unwrap();
    let Some(d) = inner.devboxes.get_mut(&id) else {
        return not_found();
    };
    idle_check(d);
    if d.view["status"] != "running" {
        return bad("Devbox is not running.");
    }
    d.active_at = Instant::now();
    axum::Json(json!({})).into_response()
}

/// `POST /v1/devboxes/{id}/snapshot_disk_async`: the disk as it is now is copied at once;
/// the status says `in_progress` for one observation, then `complete`.
async fn snapshot_disk_async(
    State(fake): State<Api>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    let map = if body.is_empty() {
        serde_json::Map::new()
    } else {
        match json_body(&body) {
            Ok(m) => m,
            Err(r) => return r,
        }
    };
    if let Err(r) = only_fields(&map, &["name", "metadata", "commit_message"]) {
        return r;
    }
    for field in ["name", "commit_message"] {
        if map
            .get(field)
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            return bad(format!("{field} must be a string"));
        }
    }
    if map
        .get("metadata")
        .is_some_and(|v| !v.is_null() && !string_map(v))
    {
        return bad("metadata must be a map of strings");
    }
    let mut inner = fake.inner.lock().unwrap();
    let home = match running_dir(&mut inner, &id) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let disk = tempfile::tempdir().expect("temp dir");
    if let Err(e) = copy_tree(&home, disk.path()) {
        return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string());
    }
    inner.next += 1;
    let sid = format!("snp_fake{:08}", inner.next);
    let view = json!({
        "id": sid,
        "name": map.get("name").cloned().unwrap_or(Value::Null),
        "create_time_ms": 1_790_000_060_000u64,
        "metadata": map.get("metadata").filter(|v| !v.is_null()).cloned().unwrap_or(json!({})),
        "source_devbox_id": id,
        "source_blueprint_id": null,
        "commit_message": map.get("commit_message").cloned().unwrap_or(Value::Null),
        "size_bytes": null,
    });
    if let Some(d) = inner.devboxes.get_mut(&id) {
        d.active_at = Instant::now();
    }
    inner.snapshots.insert(
        sid,
        Snapshot {
            view: view.clone(),
            status: "in_progress",
            dir: Some(disk),
        },
    );
    axum::Json(view).into_response()
}

/// `GET /v1/devboxes/disk_snapshots/{id}/status`.
async fn snapshot_status(State(fake): State<Api>, UrlPath(sid): UrlPath<String>) -> Response {
    let mut inner = fake.inner.lock().unwrap();
    let Some(snap) = inner.snapshots.get_mut(&sid) else {
        return error(StatusCode::NOT_FOUND, "Snapshot not found.");
    };
    let answer = match snap.status {
        "in_progress" => {
            snap.status = "complete";
            json!({"status": "in_progress", "snapshot": null, "error_message": null})
        }
        "complete" => {
            if let Some(disk) = &snap.dir {
                snap.view["size_bytes"] = json!(tree_size(disk.path()));
            }
            json!({"status": "complete", "snapshot": snap.view, "error_message": null})
        }
        other => json!({"status": other, "snapshot": null, "error_message": null}),
    };
    axum::Json(answer).into_response()
}

/// `POST /v1/devboxes/disk_snapshots/{id}/delete`: only a complete snapshot (`409`
/// otherwise); its disk is gone, its status says `deleted`, and a second delete is `404`.
async fn delete_snapshot(State(fake): State<Api>, UrlPath(sid): UrlPath<String>) -> Response {
    let mut inner = fake.inner.lock().unwrap();
    match inner.snapshots.get_mut(&sid) {
        Some(snap) if snap.status == "complete" => {
            snap.status = "deleted";
            snap.dir = None;
            axum::Json(json!({})).into_response()
        }
        Some(snap) if snap.status == "in_progress" => error(
            StatusCode::CONFLICT,
            "Only successfully created snapshots can be deleted.",
        ),
        _ => error(StatusCode::NOT_FOUND, "Snapshot not found."),
    }
}

async fn list(State(fake): State<Api>, Query(q): Query<HashMap<String, String>>) -> Response {
    if let Some(k) = q.keys().find(|k| {
        !["status", "limit", "starting_after", "include_total_count"].contains(&k.as_str())
    }) {
        return bad(format!("unknown query parameter {k}"));
    }
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => 20,
        Some(Ok(n @ 1..=5000)) => n,
        _ => return bad("limit must be an integer up to 5000"),
    };
    let inner = fake.inner.lock().unwrap();
    let start = match q.get("starting_after") {
        None => 0,
        Some(after) => match inner.order.iter().position(|id| id == after) {
            Some(i) => i + 1,
            None => return bad("starting_after is not a devbox id"),
        },
    };
    let ids: Vec<&String> = inner.order.iter().skip(start).collect();
    let page: Vec<Value> = ids
        .iter()
        .take(limit)
        .map(|id| inner.devboxes[*id].view.clone())
        .collect();
    axum::Json(json!({
        "devboxes": page,
        "has_more": ids.len() > limit,
        "total_count": null,
    }))
    .into_response()
}

async fn shutdown(
    State(fake): State<Api>,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if q.get("force").is_some_and(|f| f != "true" && f != "false") {
        return bad("force must be true or false");
    }
    let mut inner = fake.inner.lock().unwrap();
    let Some(d) = inner.devboxes.get_mut(&id) else {
        return not_found();
    };
    if d.view["status"] == "shutdown" {
        return bad("Devbox is not running");
    }
    d.view["status"] = json!("shutdown");
    d.view["shutdown_reason"] = json!("api_shutdown");
    d.view["end_time_ms"] = json!(1_790_000_100_000u64);
    // Dropping the table kills every process group still running.
    d.processes = None;
    d.dir = None;
    axum::Json(d.view.clone()).into_response()
}

/// The home of a devbox that can take a call (which counts as activity for the idle
/// policy); a suspended, suspending or resuming devbox refuses it, as Runloop does.
fn running_dir(inner: &mut Inner, id: &str) -> Result<PathBuf, Response> {
    let d = inner.devboxes.get_mut(id).ok_or_else(not_found)?;
    idle_check(d);
    match (&d.view["status"], &d.dir) {
        (s, Some(dir)) if s == "running" || s == "provisioning" => {
            let home = dir.path().to_owned();
            d.active_at = Instant::now();
            Ok(home)
        }
        _ => Err(bad("Devbox is not running")),
    }
}

fn last_n(q: &HashMap<String, String>) -> Result<usize, Response> {
    match q.get("last_n") {
        None => Ok(100),
        Some(n) => n
            .parse::<usize>()
            .map_err(|_| bad("last_n must be an integer")),
    }
}

/// The last `n` lines of `out`, and whether any were dropped.
fn tail(out: &[u8], n: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(out);
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let skip = lines.len().saturating_sub(n);
    (lines[skip..].concat(), skip > 0)
}

fn execution_view(id: &str, eid: &str, exec: &Execution, n: usize) -> Value {
    match exec.process.exit() {
        // "This field will remain unset until the execution has completed."
        None => json!({
            "devbox_id": id, "execution_id": eid, "status": "running",
            "stdout": null, "stderr": null, "exit_status": null,
        }),
        Some(exit) => {
            let (stdout, out_cut) = tail(&exec.process.read(OutputStream::Stdout, 0), n);
            let (stderr, err_cut) = tail(&exec.process.read(OutputStream::Stderr, 0), n);
            json!({
                "devbox_id": id, "execution_id": eid, "status": "completed",
                "stdout": stdout, "stderr": stderr, "exit_status": exit.code(),
                "stdout_truncated": out_cut, "stderr_truncated": err_cut,
            })
        }
    }
}

fn is_uuid_v7(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
        && b[14] == b'7'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b' | b'A' | b'B')
}

/// Starts `command` in devbox `id` (its home as cwd and `HOME`), as execution `eid`.
fn spawn(
    fake: &Api,
    id: &str,
    command: &str,
    stdin: bool,
) -> Result<(String, Arc<Execution>), Response> {
    let mut inner = fake.inner.lock().unwrap();
    let dir = running_dir(&mut inner, id)?;
    inner.next += 1;
    let eid = format!("exe_fake{:08}", inner.next);
    let d = inner.devboxes.get_mut(id).ok_or_else(not_found)?;
    let processes = d
        .processes
        .as_ref()
        .ok_or_else(|| bad("Devbox is not running"))?;
    let env = BTreeMap::from([("HOME".to_owned(), dir.display().to_string())]);
    let mut spec = SpawnSpec::new(command, &dir).with_env(env).with_tag(&eid);
    if stdin {
        spec = spec.with_stdin();
    }
    let process = processes
        .spawn(spec)
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))?;
    let exec = Arc::new(Execution { process, stdin });
    d.executions.insert(eid.clone(), exec.clone());
    Ok((eid, exec))
}

async fn execute(
    State(fake): State<Api>,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let n = match last_n(&q) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let map = match json_body(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = only_fields(
        &map,
        &["command_id", "command", "shell_name", "optimistic_timeout"],
    ) {
        return r;
    }
    let Some(command) = map.get("command").and_then(Value::as_str) else {
        return bad("command is required and must be a string");
    };
    let command_id = match map.get("command_id").and_then(Value::as_str) {
        Some(cid) if is_uuid_v7(cid) => cid.to_owned(),
        _ => return bad("command_id is required and must be a UUIDv7"),
    };
    let optimistic = match map.get("optimistic_timeout") {
        None | Some(Value::Null) => 25,
        Some(v) => match v.as_u64() {
            Some(s @ 0..=25) => s,
            _ => return bad("optimistic_timeout must be an integer of at most 25 seconds"),
        },
    };
    // The command id is "for idempotency": the same id names the same execution.
    let known = {
        let inner = fake.inner.lock().unwrap();
        inner.devboxes.get(&id).and_then(|d| {
            let eid = d.command_ids.get(&command_id)?;
            Some((eid.clone(), d.executions.get(eid)?.clone()))
        })
    };
    let (eid, exec) = match known {
        Some(found) => found,
        None => match spawn(&fake, &id, command, false) {
            Ok((eid, exec)) => {
                if let Some(d) = fake.inner.lock().unwrap().devboxes.get_mut(&id) {
                    d.command_ids.insert(command_id, eid.clone());
                }
                (eid, exec)
            }
            Err(r) => return r,
        },
    };
    exec.process
        .wait_exit(Duration::from_secs(optimistic))
        .await;
    axum::Json(execution_view(&id, &eid, &exec, n)).into_response()
}

async fn execute_async(
    State(fake): State<Api>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    let map = match json_body(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = only_fields(&map, &["command", "shell_name", "attach_stdin"]) {
        return r;
    }
    let Some(command) = map.get("command").and_then(Value::as_str) else {
        return bad("command is required and must be a string");
    };
    let stdin = match map.get("attach_stdin") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return bad("attach_stdin must be a boolean"),
    };
    match spawn(&fake, &id, command, stdin) {
        Ok((eid, exec)) => axum::Json(execution_view(&id, &eid, &exec, 100)).into_response(),
        Err(r) => r,
    }
}

fn find_execution(fake: &Api, id: &str, eid: &str) -> Result<Arc<Execution>, Response> {
    let inner = fake.inner.lock().unwrap();
    inner
        .devboxes
        .get(id)
        .and_then(|d| d.executions.get(eid))
        .cloned()
        .ok_or_else(|| error(StatusCode::NOT_FOUND, "Devbox or Execution not found."))
}

async fn get_execution(
    State(fake): State<Api>,
    UrlPath((id, eid)): UrlPath<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let n = match last_n(&q) {
        Ok(n) => n,
        Err(r) => return r,
    };
    match find_execution(&fake, &id, &eid) {
        Ok(exec) => axum::Json(execution_view(&id, &eid, &exec, n)).into_response(),
        Err(r) => r,
    }
}

async fn wait_for_status(
    State(fake): State<Api>,
    UrlPath((id, eid)): UrlPath<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let n = match last_n(&q) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let map = match json_body(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = only_fields(&map, &["statuses", "timeout_seconds"]) {
        return r;
    }
    let statuses_ok = map
        .get("statuses")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            !a.is_empty()
                && a.iter()
                    .all(|s| matches!(s.as_str(), Some("queued" | "running" | "completed")))
        });
    if !statuses_ok {
        return bad("statuses is required: queued, running or completed");
    }
    let wants_running = map["statuses"]
        .as_array()
        .is_some_and(|a| a.iter().any(|s| s != "completed"));
    let wait = match map.get("timeout_seconds") {
        None | Some(Value::Null) => 10,
        Some(v) => match v.as_u64() {
            Some(s @ 1..=25) => s,
            _ => return bad("timeout_seconds must be between 1 and 25"),
        },
    };
    let exec = match find_execution(&fake, &id, &eid) {
        Ok(e) => e,
        Err(r) => return r,
    };
    if wants_running && exec.process.exit().is_none() {
        return axum::Json(execution_view(&id, &eid, &exec, n)).into_response();
    }
    match exec.process.wait_exit(Duration::from_secs(wait)).await {
        Some(_) => axum::Json(execution_view(&id, &eid, &exec, n)).into_response(),
        None => error(
            StatusCode::REQUEST_TIMEOUT,
            "Timeout waiting for command completion.",
        ),
    }
}

async fn kill(
    State(fake): State<Api>,
    UrlPath((id, eid)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    if !body.is_empty() {
        match json_body(&body) {
            Ok(map) => {
                if let Err(r) = only_fields(&map, &["kill_process_group"]) {
                    return r;
                }
                if map
                    .get("kill_process_group")
                    .is_some_and(|v| !v.is_boolean() && !v.is_null())
                {
                    return bad("kill_process_group must be a boolean");
                }
            }
            Err(r) => return r,
        }
    }
    let exec = match find_execution(&fake, &id, &eid) {
        Ok(e) => e,
        Err(r) => return r,
    };
    // The fake always kills the whole group (its processes each lead one).
    if let Err(e) = exec.process.signal(9).await {
        return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string());
    }
    exec.process.wait_exit(Duration::from_secs(10)).await;
    axum::Json(execution_view(&id, &eid, &exec, 100)).into_response()
}

async fn send_std_in(
    State(fake): State<Api>,
    UrlPath((id, eid)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    let map = if body.is_empty() {
        serde_json::Map::new()
    } else {
        match json_body(&body) {
            Ok(m) => m,
            Err(r) => return r,
        }
    };
    if let Err(r) = only_fields(&map, &["text", "signal"]) {
        return r;
    }
    let text = match map.get("text") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(t.clone()),
        Some(_) => return bad("text must be a string"),
    };
    let signal = match map.get("signal") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "EOF" || s == "INTERRUPT" => Some(s.clone()),
        Some(_) => return bad("signal must be EOF or INTERRUPT"),
    };
    let exec = match find_execution(&fake, &id, &eid) {
        Ok(e) => e,
        Err(r) => return r,
    };
    if !exec.stdin {
        return bad("Execution was not started with attach_stdin");
    }
    if exec.process.exit().is_some() {
        return bad("Execution is not running");
    }
    if let Some(text) = text
        && exec.process.write_stdin(text.as_bytes()).await.is_err()
    {
        return bad("Execution stdin is closed");
    }
    match signal.as_deref() {
        Some("EOF") => exec.process.close_stdin().await,
        // What INTERRUPT does is not described; the fake sends what a terminal's interrupt
        // key would (ETX).
        Some(_) if exec.process.write_stdin(b"\x03").await.is_err() => {
            return bad("Execution stdin is closed");
        }
        _ => {}
    }
    axum::Json(json!({ "devbox_id": id, "execution_id": eid, "success": true })).into_response()
}

async fn stream_stdout_updates(
    State(fake): State<Api>,
    UrlPath((id, eid)): UrlPath<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    updates(&fake, &id, &eid, &q, OutputStream::Stdout)
}

async fn stream_stderr_updates(
    State(fake): State<Api>,
    UrlPath((id, eid)): UrlPath<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    updates(&fake, &id, &eid, &q, OutputStream::Stderr)
}

/// The length of `bytes` without a trailing UTF-8 sequence that more bytes may complete.
fn complete_utf8(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    }
}

/// `text/event-stream` of `ExecUpdateChunkView`s from byte `offset` (0 when absent), each
/// chunk's `offset` being where it starts; it ends once the execution completed and every
/// byte was sent, or after the idle time with nothing new.
fn updates(
    fake: &Api,
    id: &str,
    eid: &str,
    q: &HashMap<String, String>,
    stream: OutputStream,
) -> Response {
    if let Some(k) = q.keys().find(|k| k.as_str() != "offset") {
        return bad(format!("unknown query parameter {k}"));
    }
    let from = match q.get("offset").map(String::as_str) {
        None | Some("") => 0,
        Some(o) => match o.parse::<u64>() {
            Ok(n) => n,
            Err(_) => return bad("offset must be a byte offset"),
        },
    };
    let exec = match find_execution(fake, id, eid) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let idle = *fake.idle.lock().unwrap();
    let events = futures::stream::unfold(Some(from), move |at| {
        let exec = exec.clone();
        async move {
            let mut at = at?;
            loop {
                let ended = exec.process.exit().is_some();
                let bytes = exec.process.read(stream, at);
                // While it runs, a character split between two reads waits for its end.
                let take = if ended {
                    bytes.len()
                } else {
                    complete_utf8(&bytes)
                };
                if take > 0 {
                    let chunk = json!({
                        "offset": at,
                        "output": String::from_utf8_lossy(&bytes[..take]),
                    });
                    let event = format!("data: {chunk}\n\n");
                    at += take as u64;
                    return Some((Ok::<_, std::io::Error>(event), Some(at)));
                }
                if ended {
                    return None;
                }
                let (o, e) = match stream {
                    OutputStream::Stdout => (at + bytes.len() as u64, u64::MAX),
                    OutputStream::Stderr => (u64::MAX, at + bytes.len() as u64),
                };
                if !exec.process.wait_output(o, e, idle).await {
                    // Idle: the stream ends while the execution runs on.
                    return None;
                }
            }
        }
    });
    (
        StatusCode::OK,
        [("content-type", "text/event-stream")],
        axum::body::Body::from_stream(events),
    )
        .into_response()
}

async fn download_file(
    State(fake): State<Api>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    let map = match json_body(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = only_fields(&map, &["path"]) {
        return r;
    }
    let Some(path) = map.get("path").and_then(Value::as_str) else {
        return bad("path is required");
    };
    let home = match running_dir(&mut fake.inner.lock().unwrap(), &id) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let file = resolve(&home, path);
    if file.is_dir() {
        return bad("path is a directory");
    }
    match std::fs::read(&file) {
        Ok(bytes) => (
            StatusCode::OK,
            [
                ("content-type", "application/octet-stream"),
                ("content-disposition", "attachment"),
            ],
            bytes,
        )
            .into_response(),
        Err(_) => error(StatusCode::NOT_FOUND, "File not found"),
    }
}

async fn upload_file(
    State(fake): State<Api>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(parts) = parse_multipart(content_type, &body) else {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected multipart/form-data",
        );
    };
    let Some(path) = parts
        .iter()
        .find(|p| p.name == "path" && p.filename.is_none())
        .map(|p| String::from_utf8_lossy(&p.data).into_owned())
    else {
        return bad("path is required");
    };
    let Some(file) = parts.iter().find(|p| p.name == "file") else {
        return bad("file is required");
    };
    let home = match running_dir(&mut fake.inner.lock().unwrap(), &id) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let target = resolve(&home, &path);
    // Like many upload endpoints, parents are created: the adapter checks them first.
    if let Some(parent) = target.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::write(&target, &file.data) {
        Ok(()) => axum::Json(json!({})).into_response(),
        Err(e) => bad(e.to_string()),
    }
}

/// Runloop's API served on a loopback port, accepting [`API_KEY`].
pub struct Fake {
    server: FakeServer,
    idle: Arc<Mutex<Duration>>,
}

impl Fake {
    /// Starts the fake.
    pub async fn start() -> Self {
        let idle = Arc::new(Mutex::new(DEFAULT_STREAM_IDLE));
        Self {
            server: FakeServer::start(router_with_idle(API_KEY, idle.clone())).await,
            idle,
        }
    }

    /// Makes update streams end after `idle` without new output (default
    /// [`DEFAULT_STREAM_IDLE`]).
    pub fn set_stream_idle(&self, idle: Duration) {
        *self.idle.lock().unwrap() = idle;
    }

    /// The HTTP server: request log and fault injection.
    pub fn server(&self) -> &FakeServer {
        &self.server
    }

    /// The adapter's base URL.
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// The adapter's configuration pointed at the fake.
    pub fn config(&self) -> crate::RunloopConfig {
        crate::RunloopConfig {
            base_url: self.base_url(),
            ..Default::default()
        }
    }

    /// A call context carrying [`API_KEY`].
    pub fn context(&self) -> CallContext {
        CallContext::new(
            Some(SecretString::from(API_KEY)),
            ProviderContext::default(),
        )
    }
}

#[async_trait::async_trait]
impl Harness for Fake {
    fn lists_by_tag() -> bool {
        true
    }

    type Adapter = crate::RunloopProvider;

    async fn start() -> Self {
        Fake::start().await
    }

    fn server(&self) -> &FakeServer {
        &self.server
    }

    fn config_at(&self, base_url: &str, http: HttpConfig) -> crate::RunloopConfig {
        crate::RunloopConfig {
            base_url: base_url.to_owned(),
            http,
            ..self.config()
        }
    }

    fn context(&self) -> CallContext {
        Fake::context(self)
    }

    fn create_call() -> (Method, &'static str) {
        (Method::POST, "/v1/devboxes")
    }

    fn get_call() -> (Method, &'static str) {
        (Method::GET, "/v1/devboxes/")
    }

    fn unknown_id() -> &'static str {
        "dbx_nope"
    }

    fn wrong_credential() -> &'static str {
        "ak_wrong"
    }

    /// `CORRAL_LIVE_RUNLOOP_API_KEY`.
    fn live() -> Result<(crate::RunloopConfig, CallContext, CreateSandboxRequest), String> {
        let Ok(key) = std::env::var("CORRAL_LIVE_RUNLOOP_API_KEY") else {
            return Err("CORRAL_LIVE_RUNLOOP_API_KEY".into());
        };
        let ctx = CallContext::new(Some(SecretString::from(key)), ProviderContext::default());
        Ok((
            crate::RunloopConfig::default(),
            ctx,
            CreateSandboxRequest::standard(Provider::Runloop, None, Some(600)),
        ))
    }
}
