//! Vercel Sandbox's API on loopback, for tests (feature `fake`).
//!
//! Checks requests as the API and the official SDK shape them: `Authorization: Bearer
//! <token>` (401 otherwise), `teamId` in the query of **every** request (403 when missing or
//! another team), `projectId` in the create body and the query of sandbox calls and `project`
//! in the query of the list (404 for another project), known fields only, a `timeout` in whole
//! milliseconds (1 s to 24 h: a value in seconds is refused), `runtime` only on
//! `/v2/sandboxes` and never with `image`, at most five tags. Sessions are real: a stop
//! (`POST …/sessions/{id}/stop`) makes the session's command and file endpoints answer 410
//! `sandbox_stopped`, and `GET …?resume=true` then starts a session with a **new id**.
//! Commands are asynchronous, as Vercel's: each is a host process (the testkit's background
//! runner, in a temporary directory per sandbox) that runs on after the call that started
//! it. `POST …/cmd` without `wait` answers the command at once, with `wait` an NDJSON stream
//! (the command, its `{"stream", "data"}` lines as they come with `logs`, the finished
//! command); `GET …/cmd` lists the session's commands, `GET …/cmd/{id}` answers one (with
//! `?wait=true` once it finished), `GET …/cmd/{id}/logs` replays its output from the first
//! byte as NDJSON and ends with the command; output is text (bytes that are not UTF-8 are
//! replaced). A command is killed at its `timeout` (unless a test turns that off) or by
//! `…/kill`, whose `signal` must be a POSIX signal **number** (a name such as `"SIGKILL"` is a
//! 400, as Vercel's model refuses it; a command no longer running is a 400).
//! `…/stdin` (for a command started with `attachStdin`) takes `{data, offset, close}`: bytes
//! the command already received are skipped, an offset past them is a 409, and the answer
//! is `{bytesWritten}`. A stopped session's commands die with it. `PATCH /v2/sandboxes/{name}`
//! replaces `tags` (at most five) and `persistent`. `POST …/sessions/{id}/snapshot` copies the
//! sandbox directory (later writes are not in it) and terminates the session, as Vercel's
//! does; `GET`/`DELETE /v2/sandboxes/snapshots/{id}` read and delete it (404 afterwards); a
//! create with `source: {type: "snapshot", snapshotId}` starts from a copy of it (404 for an
//! unknown snapshot); `fs/write` un-gzips and un-tars the body (a malformed archive
//! is a 400); `fs/read` answers `application/octet-stream` or 404.
//!
//! [`Fake::start`] serves it on loopback; [`Fake::config`] and [`Fake::context`] point the
//! adapter at it, and its [`Harness`] implementation runs the shared suites.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::result_large_err)] // Test double: a poisoned lock is a bug; error responses are returned early by value.

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use corral_domain::{CreateSandboxRequest, OutputStream, Provider, ProviderContext};
use corral_provider::shell::shell_quote;
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::background::{Process, Processes, SpawnSpec};
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::plumbing::{self, string_map};
use futures::StreamExt as _;
use serde_json::{Map, Value, json};

/// The access token the fake accepts.
pub const API_KEY: &str = "vercel_fake_token";
/// The team the token belongs to.
pub const TEAM_ID: &str = "team_fake";
/// The project sandboxes are created in.
pub const PROJECT_ID: &str = "prj_fake";

const CREATE_FIELDS: &[&str] = &[
    "projectId",
    "ports",
    "source",
    "timeout",
    "resources",
    "runtime",
    "image",
    "name",
    "persistent",
    "networkPolicy",
    "networkId",
    "env",
    "tags",
    "snapshotExpiration",
    "keepLastSnapshots",
    "mounts",
    "region",
    "failoverRegions",
];
const RUNTIMES: &[&str] = &["node22", "node24", "node26", "python3.13"];
const NOW_MS: u64 = 1_790_000_000_000;
/// Longer than any test: how long the fake waits for a command that is waited for.
const FOREVER: Duration = Duration::from_secs(24 * 3600);

struct Sbx {
    sandbox: Value,
    session: Value,
    dir: tempfile::TempDir,
    /// The sandbox's processes: dropping the table (at deletion) kills them.
    processes: Processes,
}

/// A command: a host process running on after the call that started it.
struct Cmd {
    /// `{id, name, args, cwd, sessionId, exitCode, startedAt}` without the exit code.
    json: Value,
    process: Process,
    /// Started with `attachStdin`.
    stdin: bool,
    /// Bytes of stdin the command received (the offset of the next write).
    stdin_written: tokio::sync::Mutex<u64>,
}

impl Cmd {
    fn view(&self) -> Value {
        let mut v = self.json.clone();
        if let Some(exit) = self.process.exit() {
            v["exitCode"] = json!(exit.code());
            v["durationMs"] = json!(1);
        }
        v
    }
}

#[derive(Default)]
struct Inner {
    sandboxes: HashMap<String, Sbx>,
    order: Vec<String>,
    /// Every session id ever issued → its sandbox name.
    sessions: HashMap<String, String>,
    /// Commands by id, with their session id.
    commands: HashMap<String, (String, Arc<Cmd>)>,
    /// Snapshots by id: their JSON and a copy of the sandbox directory when taken.
    snapshots: HashMap<String, (Value, tempfile::TempDir)>,
    next: u64,
}

impl Inner {
    fn next_id(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{:06}", self.next)
    }
}

/// The router's state: the world of sandboxes, and the knobs tests turn.
#[derive(Clone)]
struct Api {
    inner: Arc<Mutex<Inner>>,
    /// Whether a command's own `timeout` kills it (Vercel's behaviour); off, only a `kill`
    /// does, which lets a test reach the adapter's own kill.
    enforce_command_timeouts: Arc<AtomicBool>,
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({ "error": { "code": code, "message": message } })),
    )
        .into_response()
}

fn bad(message: impl AsRef<str>) -> Response {
    error(StatusCode::BAD_REQUEST, "bad_request", message.as_ref())
}

fn not_found(what: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("{what} not found"),
    )
}

fn query_map(query: Option<&str>) -> Vec<(String, String)> {
    url_pairs(query.unwrap_or_default())
}

fn url_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn auth(req: Request, next: Next) -> Response {
    let want = format!("Bearer {API_KEY}");
    match req.headers().get("authorization").map(|v| v.to_str()) {
        Some(Ok(got)) if got == want => {}
        _ => {
            return error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Not authenticated",
            );
        }
    }
    let team = query_map(req.uri().query())
        .into_iter()
        .find(|(k, _)| k == "teamId")
        .map(|(_, v)| v);
    if team.as_deref() != Some(TEAM_ID) {
        return error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "You don't have permission to access this scope (teamId)",
        );
    }
    next.run(req).await
}

/// The Vercel Sandbox API as an axum router.
pub fn router() -> Router {
    router_with(Api {
        inner: Arc::default(),
        enforce_command_timeouts: Arc::new(AtomicBool::new(true)),
    })
}

fn router_with(fake: Api) -> Router {
    Router::new()
        .route("/v3/sandboxes", post(create_v3))
        .route("/v2/sandboxes", post(create_v2).get(list))
        .route(
            "/v2/sandboxes/{name}",
            get(get_sandbox)
                .delete(delete_sandbox)
                .patch(update_sandbox),
        )
        .route("/v2/sandboxes/sessions/{sid}/stop", post(stop))
        .route("/v2/sandboxes/sessions/{sid}/snapshot", post(snapshot))
        .route(
            "/v2/sandboxes/snapshots/{id}",
            get(get_snapshot).delete(delete_snapshot),
        )
        .route(
            "/v2/sandboxes/sessions/{sid}/cmd",
            post(run_cmd).get(list_cmds),
        )
        .route("/v2/sandboxes/sessions/{sid}/cmd/{cid}", get(get_cmd))
        .route("/v2/sandboxes/sessions/{sid}/cmd/{cid}/logs", get(cmd_logs))
        .route("/v2/sandboxes/sessions/{sid}/cmd/{cid}/kill", post(kill))
        .route(
            "/v2/sandboxes/sessions/{sid}/cmd/{cid}/stdin",
            post(write_stdin),
        )
        .route("/v2/sandboxes/sessions/{sid}/fs/read", post(fs_read))
        .route("/v2/sandboxes/sessions/{sid}/fs/write", post(fs_write))
        .layer(axum::middleware::from_fn(auth))
        .with_state(fake)
}

fn json_object(body: &Bytes) -> Result<Map<String, Value>, Response> {
    plumbing::object(body).ok_or_else(|| bad("Invalid JSON body"))
}

fn only_fields(map: &Map<String, Value>, allowed: &[&str]) -> Result<(), Response> {
    plumbing::unknown_field(map, allowed)
        .map_or(Ok(()), |k| Err(bad(format!("Unknown field `{k}`"))))
}

fn project_from_query(q: &HashMap<String, String>, name: &str) -> Result<(), Response> {
    match q.get(name).map(String::as_str) {
        None => Err(bad(format!("Missing query parameter `{name}`"))),
        Some(PROJECT_ID) => Ok(()),
        Some(_) => Err(not_found("Project")),
    }
}

fn session_json(id: &str, dir: &Path, timeout: u64, status: &str) -> Value {
    json!({
        "id": id, "memory": 2048, "vcpus": 1, "region": "iad1", "timeout": timeout,
        "status": status, "requestedAt": NOW_MS, "createdAt": NOW_MS, "updatedAt": NOW_MS,
        "cwd": dir.display().to_string(),
    })
}

async fn create_v3(state: State<Api>, body: Bytes) -> Response {
    create(state, body, false)
}

async fn create_v2(state: State<Api>, body: Bytes) -> Response {
    create(state, body, true)
}

fn create(State(fake): State<Api>, body: Bytes, v2: bool) -> Response {
    let map = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = only_fields(&map, CREATE_FIELDS) {
        return r;
    }
    match map.get("projectId").and_then(Value::as_str) {
        None => return bad("`projectId` is required"),
        Some(PROJECT_ID) => {}
        Some(_) => return not_found("Project"),
    }
    let timeout = match map.get("timeout") {
        None => 300_000,
        Some(v) => match v.as_u64() {
            Some(ms @ 1000..=86_400_000) => ms,
            _ => {
                return bad(
                    "`timeout` must be an integer number of milliseconds between 1000 and 86400000",
                );
            }
        },
    };
    let runtime = map.get("runtime").and_then(Value::as_str);
    let image = map.get("image").and_then(Value::as_str);
    if map.contains_key("runtime") && !v2 {
        return bad("`runtime` is accepted by /v2/sandboxes only");
    }
    if runtime.is_some() && image.is_some() {
        return bad("`runtime` and `image` cannot be used together");
    }
    if let Some(r) = runtime
        && !RUNTIMES.contains(&r)
    {
        return bad(format!("unknown runtime `{r}`"));
    }
    let tags = map.get("tags").cloned().unwrap_or(json!({}));
    if !tags_ok(&tags) {
        return bad("`tags` must be at most 5 string values");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut inner = fake.inner.lock().unwrap();
    match map.get("source") {
        None => {}
        Some(source) => {
            let snapshot_id = match source.as_object() {
                Some(o) if o.get("type") == Some(&json!("snapshot")) && o.len() == 2 => {
                    o.get("snapshotId").and_then(Value::as_str)
                }
                // Git and tarball sources exist too; Corral sends none, so the fake has none.
                _ => None,
            };
            let Some(snapshot_id) = snapshot_id else {
                return bad("`source` must be {type: \"snapshot\", snapshotId}");
            };
            let Some((_, copy)) = inner.snapshots.get(snapshot_id) else {
                return not_found("Snapshot");
            };
            // The new sandbox's filesystem starts as the snapshot's.
            if let Err(e) = copy_dir(copy.path(), dir.path()) {
                return error(StatusCode::INTERNAL_SERVER_ERROR, "internal", &e);
            }
        }
    }
    let name = inner.next_id("sandbox-");
    let sid = inner.next_id("sess_");
    let session = session_json(&sid, dir.path(), timeout, "pending");
    let sandbox = json!({
        "name": name, "persistent": map.get("persistent").and_then(Value::as_bool).unwrap_or(true),
        "region": "iad1", "status": "pending", "currentSessionId": sid, "tags": tags,
        "timeout": timeout, "runtime": runtime, "image": image,
        "createdAt": NOW_MS, "updatedAt": NOW_MS,
    });
    inner.sessions.insert(sid, name.clone());
    inner.order.push(name.clone());
    inner.sandboxes.insert(
        name,
        Sbx {
            sandbox: sandbox.clone(),
            session: session.clone(),
            dir,
            processes: Processes::default(),
        },
    );
    axum::Json(json!({ "sandbox": sandbox, "session": session, "routes": [] })).into_response()
}

async fn get_sandbox(
    State(fake): State<Api>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = project_from_query(&q, "projectId") {
        return r;
    }
    let resume = match q.get("resume").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return bad("`resume` must be true or false"),
    };
    let mut inner = fake.inner.lock().unwrap();
    let new_sid = inner.next_id("sess_");
    let Some(sbx) = inner.sandboxes.get_mut(&name) else {
        return not_found("Sandbox");
    };
    let mut resumed = false;
    match sbx.session["status"].as_str() {
        // Booting takes one observation.
        Some("pending") => {
            let answer = json!({ "sandbox": sbx.sandbox, "session": sbx.session, "routes": [] });
            sbx.session["status"] = json!("running");
            sbx.sandbox["status"] = json!("running");
            return axum::Json(answer).into_response();
        }
        Some("stopped") if resume => {
            let timeout = sbx.session["timeout"].as_u64().unwrap_or(300_000);
            sbx.session = session_json(&new_sid, sbx.dir.path(), timeout, "running");
            sbx.sandbox["status"] = json!("running");
            sbx.sandbox["currentSessionId"] = json!(new_sid);
            resumed = true;
        }
        _ => {}
    }
    let answer = json!({
        "sandbox": sbx.sandbox, "session": sbx.session, "routes": [], "resumed": resumed,
    });
    if resumed {
        inner.sessions.insert(new_sid, name);
    }
    axum::Json(answer).into_response()
}

async fn list(State(fake): State<Api>, req: Request) -> Response {
    let pairs = query_map(req.uri().query());
    let q: HashMap<String, String> = pairs.iter().cloned().collect();
    if q.contains_key("projectId") {
        return bad("the list takes `project`, not `projectId`");
    }
    if let Err(r) = project_from_query(&q, "project") {
        return r;
    }
    let tags: Vec<(String, String)> = pairs
        .iter()
        .filter(|(k, _)| k == "tags")
        .map(|(_, v)| match v.split_once(':') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (v.clone(), String::new()),
        })
        .collect();
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => 50,
        Some(Ok(n @ 1..)) => n,
        _ => return bad("`limit` must be a positive integer"),
    };
    let start = match q.get("cursor").map(|c| c.parse::<usize>()) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return bad("invalid cursor"),
    };
    let inner = fake.inner.lock().unwrap();
    let matching: Vec<Value> = inner
        .order
        .iter()
        .filter_map(|n| inner.sandboxes.get(n))
        .map(|s| s.sandbox.clone())
        .filter(|s| tags.iter().all(|(k, v)| s["tags"][k] == json!(v)))
        .collect();
    let page: Vec<Value> = matching.iter().skip(start).take(limit).cloned().collect();
    let next = (start + limit < matching.len()).then(|| (start + limit).to_string());
    axum::Json(json!({
        "sandboxes": page,
        "pagination": { "count": page.len(), "next": next },
    }))
    .into_response()
}

async fn delete_sandbox(
    State(fake): State<Api>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = project_from_query(&q, "projectId") {
        return r;
    }
    let mut inner = fake.inner.lock().unwrap();
    match inner.sandboxes.remove(&name) {
        Some(sbx) => {
            inner.order.retain(|n| *n != name);
            let mut sandbox = sbx.sandbox;
            sandbox["status"] = json!("stopped");
            axum::Json(json!({ "sandbox": sandbox })).into_response()
        }
        None => not_found("Sandbox"),
    }
}

/// The sandbox directory and session cwd of a *running* session, or the error Vercel gives.
fn running_session(inner: &Inner, sid: &str) -> Result<(String, PathBuf), Response> {
    let Some(name) = inner.sessions.get(sid) else {
        return Err(not_found("Session"));
    };
    let Some(sbx) = inner.sandboxes.get(name) else {
        return Err(error(
            StatusCode::GONE,
            "sandbox_stopped",
            "Sandbox was deleted",
        ));
    };
    if sbx.session["id"] != json!(sid) || sbx.session["status"] != json!("running") {
        return Err(error(
            StatusCode::GONE,
            "sandbox_stopped",
            "The sandbox session is stopped",
        ));
    }
    Ok((name.clone(), sbx.dir.path().to_owned()))
}

/// Stops the running session `sid` of sandbox `name`: its VM ends, and the commands it ran
/// with it (returned, to be killed once the lock is released).
fn end_session(inner: &mut Inner, name: &str, sid: &str) -> Vec<Arc<Cmd>> {
    let sbx = inner.sandboxes.get_mut(name).unwrap();
    sbx.session["status"] = json!("stopped");
    sbx.sandbox["status"] = json!("stopped");
    inner
        .commands
        .values()
        .filter(|(s, _)| *s == sid)
        .map(|(_, c)| c.clone())
        .collect()
}

async fn kill_all(dying: Vec<Arc<Cmd>>) {
    for c in dying {
        let _ = c.process.signal(9).await;
    }
}

/// Blocks until the session stopped, as Vercel's does (a persistent sandbox keeps its
/// filesystem for the next session).
async fn stop(State(fake): State<Api>, UrlPath(sid): UrlPath<String>) -> Response {
    let (answer, dying) = {
        let mut inner = fake.inner.lock().unwrap();
        let (name, _) = match running_session(&inner, &sid) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let dying = end_session(&mut inner, &name, &sid);
        let sbx = &inner.sandboxes[&name];
        let answer = json!({ "session": sbx.session, "sandbox": sbx.sandbox });
        (answer, dying)
    };
    kill_all(dying).await;
    axum::Json(answer).into_response()
}

fn tags_ok(tags: &Value) -> bool {
    tags.as_object()
        .is_some_and(|t| t.len() <= 5 && t.values().all(Value::is_string))
}

/// Copies the directory `from` into the existing directory `to`, attributes kept.
fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from.join("."))
        .arg(to)
        .status()
        .map_err(|e| format!("cannot run cp: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cp -a failed: {status}"))
    }
}

const UPDATE_FIELDS: &[&str] = &[
    "persistent",
    "resources",
    "timeout",
    "networkPolicy",
    "tags",
    "ports",
    "snapshotExpiration",
    "keepLastSnapshots",
    "currentSnapshotId",
    "region",
    "failoverRegions",
];

/// `PATCH /v2/sandboxes/{name}`: the fake keeps `tags` (the whole map replaces the old one)
/// and `persistent`; other known fields are accepted and ignored.
async fn update_sandbox(
    State(fake): State<Api>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    if let Err(r) = project_from_query(&q, "projectId") {
        return r;
    }
    let map = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = only_fields(&map, UPDATE_FIELDS) {
        return r;
    }
    if let Some(tags) = map.get("tags")
        && !tags_ok(tags)
    {
        return bad("`tags` must be at most 5 string values");
    }
    if map.get("persistent").is_some_and(|p| !p.is_boolean()) {
        return bad("`persistent` must be a boolean");
    }
    let mut inner = fake.inner.lock().unwrap();
    let Some(sbx) = inner.sandboxes.get_mut(&name) else {
        return not_found("Sandbox");
    };
    for field in ["tags", "persistent"] {
        if let Some(v) = map.get(field) {
            sbx.sandbox[field] = v.clone();
        }
    }
    axum::Json(json!({ "sandbox": sbx.sandbox })).into_response()
}

/// `POST …/sessions/{sid}/snapshot {expiration?}`: the session must be running; its
/// directory is copied (what is written later is not in the snapshot), then the session is
/// terminated, as Vercel's is.
async fn snapshot(State(fake): State<Api>, UrlPath(sid): UrlPath<String>, body: Bytes) -> Response {
    // The body is optional.
    let map = if body.is_empty() {
        Map::new()
    } else {
        match json_object(&body) {
            Ok(m) => m,
            Err(r) => return r,
        }
    };
    if let Err(r) = only_fields(&map, &["expiration"]) {
        return r;
    }
    if map.get("expiration").is_some_and(|e| e.as_u64().is_none()) {
        return bad("`expiration` must be a non-negative integer of milliseconds");
    }
    let (answer, dying) = {
        let mut inner = fake.inner.lock().unwrap();
        let (name, dir) = match running_session(&inner, &sid) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let copy = tempfile::tempdir().expect("temp dir");
        if let Err(e) = copy_dir(&dir, copy.path()) {
            return error(StatusCode::INTERNAL_SERVER_ERROR, "internal", &e);
        }
        let id = inner.next_id("snap_");
        let snapshot = json!({
            "id": id, "sourceSessionId": sid, "region": "iad1", "status": "created",
            "sizeBytes": dir_size(copy.path()), "createdAt": NOW_MS, "updatedAt": NOW_MS,
            "lastUsedAt": NOW_MS, "expiresAt": NOW_MS + 30 * 24 * 3600 * 1000,
        });
        inner.snapshots.insert(id, (snapshot.clone(), copy));
        let dying = end_session(&mut inner, &name, &sid);
        let session = inner.sandboxes[&name].session.clone();
        (json!({ "snapshot": snapshot, "session": session }), dying)
    };
    kill_all(dying).await;
    axum::Json(answer).into_response()
}

/// The bytes of the regular files under `dir`.
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

async fn get_snapshot(State(fake): State<Api>, UrlPath(id): UrlPath<String>) -> Response {
    match fake.inner.lock().unwrap().snapshots.get(&id) {
        Some((snapshot, _)) => axum::Json(json!({ "snapshot": snapshot })).into_response(),
        None => not_found("Snapshot"),
    }
}

/// Deletes the snapshot and its copy; it is not found afterwards.
async fn delete_snapshot(State(fake): State<Api>, UrlPath(id): UrlPath<String>) -> Response {
    match fake.inner.lock().unwrap().snapshots.remove(&id) {
        Some((mut snapshot, _copy)) => {
            snapshot["status"] = json!("deleted");
            axum::Json(json!({ "snapshot": snapshot })).into_response()
        }
        None => not_found("Snapshot"),
    }
}

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

async fn run_cmd(State(fake): State<Api>, UrlPath(sid): UrlPath<String>, body: Bytes) -> Response {
    let map = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = only_fields(
        &map,
        &[
            "command",
            "args",
            "cwd",
            "env",
            "sudo",
            "wait",
            "logs",
            "timeout",
            "attachStdin",
        ],
    ) {
        return r;
    }
    let Some(command) = map.get("command").and_then(Value::as_str) else {
        return bad("`command` is required");
    };
    let args: Vec<String> = match map.get("args") {
        None => Vec::new(),
        Some(v) => match v
            .as_array()
            .and_then(|a| a.iter().map(|s| s.as_str().map(str::to_owned)).collect())
        {
            Some(a) => a,
            None => return bad("`args` must be an array of strings"),
        },
    };
    let env = match map.get("env") {
        None => BTreeMap::new(),
        Some(v) => match string_map(v) {
            Some(e) => e,
            None => return bad("`env` must map strings to strings"),
        },
    };
    for flag in ["sudo", "wait", "logs", "attachStdin"] {
        if map.get(flag).is_some_and(|v| !v.is_boolean()) {
            return bad(format!("`{flag}` must be a boolean"));
        }
    }
    let timeout = match map.get("timeout") {
        None => None,
        Some(v) => match v.as_u64() {
            Some(ms @ 1..) => Some(Duration::from_millis(ms)),
            _ => return bad("`timeout` must be a positive integer of milliseconds"),
        },
    };
    let cwd = match map.get("cwd") {
        None => None,
        Some(Value::String(c)) => Some(PathBuf::from(c)),
        Some(_) => return bad("`cwd` must be a string"),
    };
    let flag = |k: &str| map.get(k).and_then(Value::as_bool) == Some(true);
    let (wait, logs, stdin) = (flag("wait"), flag("logs"), flag("attachStdin"));
    let (cid, cmd) = {
        let mut inner = fake.inner.lock().unwrap();
        let (name, dir) = match running_session(&inner, &sid) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let cid = inner.next_id("cmd_");
        // Vercel execs the command directly; the host runs the same argv through sh.
        let argv: Vec<String> = std::iter::once(command.to_owned())
            .chain(args.iter().cloned())
            .map(|a| shell_quote(&a))
            .collect();
        let mut env = env;
        env.entry("HOME".into())
            .or_insert_with(|| dir.display().to_string());
        let mut spec = SpawnSpec::new(argv.join(" "), cwd.unwrap_or_else(|| dir.clone()))
            .with_env(env)
            .with_tag(&cid);
        if stdin {
            spec = spec.with_stdin();
        }
        let process = match inner.sandboxes[&name].processes.spawn(spec) {
            Ok(p) => p,
            Err(e) => return bad(format!("cannot run `{command}`: {e}")),
        };
        let cmd = Arc::new(Cmd {
            json: json!({
                "id": cid, "name": command, "args": args, "cwd": "/", "sessionId": sid,
                "exitCode": null, "startedAt": NOW_MS,
            }),
            process,
            stdin,
            stdin_written: tokio::sync::Mutex::new(0),
        });
        inner
            .commands
            .insert(cid.clone(), (sid.clone(), cmd.clone()));
        (cid, cmd)
    };
    // Vercel kills a command past its `timeout` with SIGKILL (unless a test turned that off).
    if let Some(t) = timeout
        && fake.enforce_command_timeouts.load(Ordering::SeqCst)
    {
        let process = cmd.process.clone();
        tokio::spawn(async move {
            if process.wait_exit(t).await.is_none() {
                let _ = process.signal(9).await;
            }
        });
    }
    let _ = cid;
    if !wait {
        return axum::Json(json!({ "command": cmd.view() })).into_response();
    }
    let first = futures::stream::once({
        let started = line(&json!({ "command": cmd.view() }));
        async move { started }
    });
    let output = log_lines(cmd.clone(), logs);
    let finished = futures::stream::once(async move {
        cmd.process.wait_exit(FOREVER).await;
        line(&json!({ "command": cmd.view() }))
    });
    ndjson(first.chain(output).chain(finished))
}

fn ndjson(lines: impl futures::Stream<Item = Bytes> + Send + 'static) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/x-ndjson")],
        Body::from_stream(lines.map(Ok::<_, std::io::Error>)),
    )
        .into_response()
}

/// The length of `bytes` without a trailing UTF-8 sequence that more bytes may complete.
fn complete_utf8(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    }
}

/// `{"stream", "data"}` lines of the command's output from its first byte, as it comes,
/// ending when the command ended (nothing when `logs` is false). `data` is text: bytes that
/// are not UTF-8 are replaced.
fn log_lines(cmd: Arc<Cmd>, logs: bool) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    futures::stream::unfold((0u64, 0u64, logs), move |(out, err, logs)| {
        let cmd = cmd.clone();
        async move {
            if !logs {
                return None;
            }
            let (mut out, mut err) = (out, err);
            loop {
                let ended = cmd.process.exit().is_some();
                let mut lines = Vec::new();
                for (stream, at, name) in [
                    (OutputStream::Stdout, &mut out, "stdout"),
                    (OutputStream::Stderr, &mut err, "stderr"),
                ] {
                    let bytes = cmd.process.read(stream, *at);
                    let take = if ended {
                        bytes.len()
                    } else {
                        complete_utf8(&bytes)
                    };
                    if take > 0 {
                        lines.extend_from_slice(&line(&json!({
                            "stream": name, "data": String::from_utf8_lossy(&bytes[..take]),
                        })));
                        *at += take as u64;
                    }
                }
                if !lines.is_empty() {
                    return Some((Bytes::from(lines), (out, err, true)));
                }
                if ended {
                    return None;
                }
                // Waits past bytes held back as an incomplete character too.
                let held_out = cmd.process.len(OutputStream::Stdout);
                let held_err = cmd.process.len(OutputStream::Stderr);
                cmd.process.wait_output(held_out, held_err, FOREVER).await;
            }
        }
    })
}

fn find_cmd(fake: &Api, sid: &str, cid: &str) -> Result<Arc<Cmd>, Response> {
    let inner = fake.inner.lock().unwrap();
    running_session(&inner, sid)?;
    match inner.commands.get(cid) {
        Some((s, c)) if s == sid => Ok(c.clone()),
        _ => Err(not_found("Command")),
    }
}

async fn list_cmds(State(fake): State<Api>, UrlPath(sid): UrlPath<String>) -> Response {
    let inner = fake.inner.lock().unwrap();
    if let Err(r) = running_session(&inner, &sid) {
        return r;
    }
    let mut commands: Vec<(&String, Value)> = inner
        .commands
        .iter()
        .filter(|(_, (s, _))| *s == sid)
        .map(|(id, (_, c))| (id, c.view()))
        .collect();
    commands.sort_by(|a, b| a.0.cmp(b.0));
    let commands: Vec<Value> = commands.into_iter().map(|(_, v)| v).collect();
    axum::Json(json!({ "commands": commands })).into_response()
}

async fn get_cmd(
    State(fake): State<Api>,
    UrlPath((sid, cid)): UrlPath<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let wait = match q.get("wait").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return bad("`wait` must be true or false"),
    };
    let cmd = match find_cmd(&fake, &sid, &cid) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if wait {
        cmd.process.wait_exit(FOREVER).await;
    }
    axum::Json(json!({ "command": cmd.view() })).into_response()
}

async fn cmd_logs(
    State(fake): State<Api>,
    UrlPath((sid, cid)): UrlPath<(String, String)>,
) -> Response {
    match find_cmd(&fake, &sid, &cid) {
        Ok(cmd) => ndjson(log_lines(cmd, true)),
        Err(r) => r,
    }
}

async fn kill(
    State(fake): State<Api>,
    UrlPath((sid, cid)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    let map = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    // A POSIX signal number, as Vercel's model (and the SDK's `killCommand`) has it.
    let signal = match map.get("signal") {
        None => return bad("`signal` is required"),
        Some(v) => match v.as_u64() {
            Some(n @ 1..=64) => n as i32,
            _ => return bad("`signal` must be a signal number"),
        },
    };
    let cmd = match find_cmd(&fake, &sid, &cid) {
        Ok(c) => c,
        Err(r) => return r,
    };
    // "The command must still be running for this operation to succeed."
    if cmd.process.exit().is_some() {
        return bad("The command is not running");
    }
    if let Err(e) = cmd.process.signal(signal).await {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &e.to_string(),
        );
    }
    axum::Json(json!({ "command": cmd.view() })).into_response()
}

/// `{data?, offset?, close?}` → `{bytesWritten}`: bytes before `offset`'s position that the
/// command already received are skipped, an offset past them is a 409.
async fn write_stdin(
    State(fake): State<Api>,
    UrlPath((sid, cid)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    let map = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = only_fields(&map, &["data", "offset", "close"]) {
        return r;
    }
    let data = match map.get("data") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => return bad("`data` must be a string"),
    };
    let offset = match map.get("offset") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(o) => Some(o),
            None => return bad("`offset` must be a non-negative integer"),
        },
    };
    let close = match map.get("close") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return bad("`close` must be a boolean"),
    };
    let cmd = match find_cmd(&fake, &sid, &cid) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if !cmd.stdin {
        return bad("The command was not started with `attachStdin`");
    }
    let mut written = cmd.stdin_written.lock().await;
    if let Some(data) = data {
        let bytes = data.as_bytes();
        let at = offset.unwrap_or(*written);
        if at > *written {
            return error(
                StatusCode::CONFLICT,
                "conflict",
                &format!("`offset` {at} is past the {} bytes written", *written),
            );
        }
        let skip = usize::try_from(*written - at).unwrap_or(usize::MAX);
        if let Some(fresh) = bytes.get(skip..).filter(|f| !f.is_empty()) {
            if cmd.process.exit().is_some() || cmd.process.write_stdin(fresh).await.is_err() {
                return error(
                    StatusCode::CONFLICT,
                    "stdin_closed",
                    "The command's stdin is closed",
                );
            }
            *written += fresh.len() as u64;
        }
    }
    if close {
        cmd.process.close_stdin().await;
    }
    axum::Json(json!({ "bytesWritten": *written })).into_response()
}

async fn fs_read(State(fake): State<Api>, UrlPath(sid): UrlPath<String>, body: Bytes) -> Response {
    let map = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = only_fields(&map, &["path", "cwd"]) {
        return r;
    }
    let Some(path) = map.get("path").and_then(Value::as_str) else {
        return bad("`path` is required");
    };
    let dir = match running_session(&fake.inner.lock().unwrap(), &sid) {
        Ok((_, d)) => d,
        Err(r) => return r,
    };
    let base = map
        .get("cwd")
        .and_then(Value::as_str)
        .map_or(dir, PathBuf::from);
    let file = base.join(path);
    if file.is_dir() {
        return bad("path is a directory");
    }
    match std::fs::read(&file) {
        Ok(bytes) => (
            StatusCode::OK,
            [("content-type", "application/octet-stream")],
            bytes,
        )
            .into_response(),
        Err(_) => error(StatusCode::NOT_FOUND, "file_not_found", "File not found"),
    }
}

/// Un-gzips and un-tars `body` into `(relative path, mode, content)` entries.
fn untar(body: &[u8]) -> Result<Vec<(PathBuf, u32, Vec<u8>)>, String> {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut raw)
        .map_err(|e| format!("not gzip: {e}"))?;
    let mut archive = tar::Archive::new(&raw[..]);
    let mut files = Vec::new();
    for entry in archive.entries().map_err(|e| format!("not a tar: {e}"))? {
        let mut entry = entry.map_err(|e| format!("not a tar: {e}"))?;
        let path = entry.path().map_err(|e| e.to_string())?.into_owned();
        if !path.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(format!("unsafe path in tar: {}", path.display()));
        }
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err("only regular files are accepted".into());
        }
        let mode = entry.header().mode().map_err(|e| e.to_string())?;
        let mut content = Vec::new();
        entry
            .read_to_end(&mut content)
            .map_err(|e| format!("truncated tar: {e}"))?;
        files.push((path, mode, content));
    }
    if files.is_empty() {
        return Err("the archive holds no file".into());
    }
    Ok(files)
}

async fn fs_write(
    State(fake): State<Api>,
    UrlPath(sid): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    if header("content-type") != Some("application/gzip") {
        return bad("Content-Type must be application/gzip");
    }
    let Some(extract_dir) = header("x-cwd").filter(|d| d.starts_with('/')) else {
        return bad("x-cwd must be an absolute directory");
    };
    if let Err(r) = running_session(&fake.inner.lock().unwrap(), &sid) {
        return r;
    }
    let files = match untar(&body) {
        Ok(f) => f,
        Err(e) => return bad(format!("invalid tarball: {e}")),
    };
    for (path, _mode, content) in files {
        let target = Path::new(extract_dir).join(path);
        // Tar extraction creates missing parents.
        if let Some(parent) = target.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        if let Err(e) = std::fs::write(&target, content) {
            return bad(e.to_string());
        }
    }
    axum::Json(json!({})).into_response()
}

/// Vercel Sandbox's API served on a loopback port, accepting [`API_KEY`] for [`TEAM_ID`] and
/// [`PROJECT_ID`].
pub struct Fake {
    server: FakeServer,
    api: Api,
}

impl Fake {
    /// Starts the fake.
    pub async fn start() -> Self {
        let api = Api {
            inner: Arc::default(),
            enforce_command_timeouts: Arc::new(AtomicBool::new(true)),
        };
        Self {
            server: FakeServer::start(router_with(api.clone())).await,
            api,
        }
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
    pub fn config(&self) -> crate::VercelConfig {
        crate::VercelConfig {
            base_url: self.base_url(),
            ..Default::default()
        }
    }

    /// A call context carrying [`API_KEY`], [`TEAM_ID`] and [`PROJECT_ID`].
    pub fn context(&self) -> CallContext {
        CallContext::new(
            Some(SecretString::from(API_KEY)),
            ProviderContext {
                team_id: Some(TEAM_ID.into()),
                project_id: Some(PROJECT_ID.into()),
                ..ProviderContext::default()
            },
        )
    }

    /// Whether a command's own `timeout` kills it, as Vercel does (the default); turned off,
    /// a command runs until the adapter kills it, so tests can watch that kill.
    pub fn enforce_command_timeouts(&self, enforce: bool) {
        self.api
            .enforce_command_timeouts
            .store(enforce, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Harness for Fake {
    fn lists_by_tag() -> bool {
        true
    }

    type Adapter = crate::VercelProvider;

    async fn start() -> Self {
        Fake::start().await
    }

    fn server(&self) -> &FakeServer {
        &self.server
    }

    fn config_at(&self, base_url: &str, http: HttpConfig) -> crate::VercelConfig {
        crate::VercelConfig {
            base_url: base_url.to_owned(),
            http,
        }
    }

    fn context(&self) -> CallContext {
        Fake::context(self)
    }

    fn create_call() -> (Method, &'static str) {
        (Method::POST, "/v3/sandboxes")
    }

    fn get_call() -> (Method, &'static str) {
        (Method::GET, "/v2/sandboxes/")
    }

    fn unknown_id() -> &'static str {
        "sandbox-nope"
    }

    fn wrong_credential() -> &'static str {
        "vercel_wrong_token"
    }

    /// `CORRAL_LIVE_VERCEL_TOKEN`, `CORRAL_LIVE_VERCEL_TEAM_ID` and
    /// `CORRAL_LIVE_VERCEL_PROJECT_ID`.
    fn live() -> Result<(crate::VercelConfig, CallContext, CreateSandboxRequest), String> {
        let (Ok(token), Ok(team), Ok(project)) = (
            std::env::var("CORRAL_LIVE_VERCEL_TOKEN"),
            std::env::var("CORRAL_LIVE_VERCEL_TEAM_ID"),
            std::env::var("CORRAL_LIVE_VERCEL_PROJECT_ID"),
        ) else {
            return Err("CORRAL_LIVE_VERCEL_TOKEN, CORRAL_LIVE_VERCEL_TEAM_ID and \
                        CORRAL_LIVE_VERCEL_PROJECT_ID"
                .into());
        };
        let ctx = CallContext::new(
            Some(SecretString::from(token)),
            ProviderContext {
                team_id: Some(team),
                project_id: Some(project),
                ..ProviderContext::default()
            },
        );
        Ok((
            crate::VercelConfig::default(),
            ctx,
            CreateSandboxRequest::standard(Provider::Vercel, None, Some(300)),
        ))
    }
}
