//! Together Sandbox on loopback, for tests (feature `fake`): the Bartender control API under
//! `/v1` and each running sandbox's Pint API under `/agent/{sandbox id}` (the sandbox's
//! `agent.url`, which in production is another host).
//!
//! Checks requests as Together's descriptions do: the project key on the control API only, the
//! sandbox's own agent token on its Pint API only; `snapshot_id` (UUID) xor `snapshot_alias`
//! (known aliases, else 404); `ttl` an integer of seconds >= 1; tag keys as documented; Pint's
//! required `command`/`args` and octet-stream file bodies. A new sandbox is `starting` (agent
//! null) until it is first observed, then `running` with an agent URL and token. Execs run for
//! real in a per-sandbox temporary directory; their status goes `RUNNING` → `EXITED` (the
//! values Together's CLI waits for), and `exitCode` reads 0 until the process has ended,
//! as a Go zero value would. A `ttl` runs from creation and ends in `terminated`
//! (`autoterminated`); the terminate call ends in `terminated` (`termination_requested`).
//! Knobs reproduce the other documented states: [`Fake::crash`] (`recovering`, agent gone),
//! [`Fake::recover`], [`Fake::lose`] (`terminated` for another reason, e.g. `evicted`), and
//! [`Fake::set_page_size`] (short listing pages).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use corral_domain::{CreateSandboxRequest, Provider, ProviderContext};
use corral_provider::shell::shell_quote;
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::host_shell::{RunOutcome, run_command};
use serde_json::{Value, json};

struct FakeExec {
    command: String,
    args: Vec<String>,
    status: String,
    exit_code: Option<i32>,
    messages: Vec<Value>,
    task: Option<tokio::task::AbortHandle>,
}

struct FakeSandbox {
    seq: u64,
    created: std::time::Instant,
    dir: tempfile::TempDir,
    body: Value,
    token: Option<String>,
    /// The agent URL given at first boot (a recovered VM keeps it).
    agent_url: Option<String>,
    execs: HashMap<String, Arc<Mutex<FakeExec>>>,
}

struct Shared {
    api_key: String,
    aliases: Vec<String>,
    max_page: AtomicUsize,
    next: AtomicU64,
    sandboxes: Mutex<HashMap<String, FakeSandbox>>,
    /// Where booted agents say they are (`{base}/agent/{id}`); `None`: this server, as the
    /// request's `Host` names it.
    agent_base: Mutex<Option<String>>,
}

type St = State<Arc<Shared>>;

/// The sandbox table, with every `ttl` that ran out applied first (`autoterminated`).
#[allow(clippy::expect_used)] // A poisoned lock means a handler panicked: the test already failed.
fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, HashMap<String, FakeSandbox>> {
    let mut sandboxes = shared.sandboxes.lock().expect("sandboxes lock");
    for sb in sandboxes.values_mut() {
        let expired = sb.body["ttl"]
            .as_u64()
            .is_some_and(|ttl| sb.created.elapsed() >= Duration::from_secs(ttl));
        if expired && sb.body["status"] != "terminated" {
            terminate(sb, "autoterminated");
        }
    }
    sandboxes
}

/// `sb` is `running` with its agent at `url`, taking `token`.
fn boot(sb: &mut FakeSandbox, url: String, token: String) {
    sb.body["status"] = json!("running");
    sb.body["agent"] = json!({ "version": "1.0.0", "token": token, "url": url });
    sb.agent_url = Some(url);
    sb.token = Some(token);
}

/// Kills every exec of `sb` (its VM went away).
fn kill_execs(sb: &mut FakeSandbox) {
    for exec in sb.execs.values() {
        if let Some(task) = lock_exec(exec).task.take() {
            task.abort();
        }
    }
    sb.execs.clear();
}

fn terminate(sb: &mut FakeSandbox, reason: &str) {
    kill_execs(sb);
    sb.token = None;
    sb.body["status"] = json!("terminated");
    sb.body["status_reason"] = json!(reason);
    sb.body["terminated_at"] = json!(NOW);
    sb.body["agent"] = json!({ "version": null, "token": null, "url": null });
}

#[allow(clippy::expect_used)] // As above.
fn lock_exec(e: &Mutex<FakeExec>) -> std::sync::MutexGuard<'_, FakeExec> {
    e.lock().expect("exec lock")
}

/// Bartender's `Error`.
fn error(status: StatusCode, code: &str, message: &str, parameter: Option<&str>) -> Response {
    let errors = match parameter {
        Some(p) => json!([{ "parameter": p, "code": code, "message": message }]),
        None => json!([]),
    };
    (
        status,
        axum::Json(json!({ "code": code, "message": message, "errors": errors })),
    )
        .into_response()
}

fn bad(parameter: &str, message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid", message, Some(parameter))
}

/// Pint's `Error`.
fn pint_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({ "code": status.as_u16(), "message": message })),
    )
        .into_response()
}

fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn valid_tag_key(k: &str) -> bool {
    let b = k.as_bytes();
    !b.is_empty()
        && b.len() <= 59
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

const NOW: &str = "2026-08-18T00:00:00Z";

async fn control_auth(State(shared): St, headers: HeaderMap, req: Request, next: Next) -> Response {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer == Some(shared.api_key.as_str()) {
        next.run(req).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Not authenticated.",
            None,
        )
    }
}

async fn create_sandbox(State(shared): St, body: Bytes) -> Response {
    let Ok(Value::Object(b)) = serde_json::from_slice::<Value>(&body) else {
        return bad("body", "request body must be a JSON object");
    };
    let (snapshot_id, alias) = match (b.get("snapshot_id"), b.get("snapshot_alias")) {
        (Some(Value::String(id)), None) if is_uuid(id) => (id.clone(), None),
        (Some(_), None) => return bad("snapshot_id", "must be a UUID"),
        (None, Some(Value::String(a))) if !a.is_empty() => {
            if !shared.aliases.contains(a) {
                return error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    "Snapshot alias not found.",
                    None,
                );
            }
            (
                "0b7e5c1a-1111-4222-8333-444455556666".to_owned(),
                Some(a.clone()),
            )
        }
        (None, Some(_)) => return bad("snapshot_alias", "must be a non-empty string"),
        _ => {
            return bad(
                "snapshot_id",
                "one of snapshot_id or snapshot_alias is required",
            );
        }
    };
    let ttl = match b.get("ttl") {
        None => None,
        Some(v) => match v.as_u64() {
            Some(t) if t >= 1 && v.is_u64() => Some(t),
            _ => return bad("ttl", "must be an integer number of seconds > 0"),
        },
    };
    if let Some(cpu) = b.get("cpu")
        && !cpu.as_f64().is_some_and(|c| (0.1..=16.0).contains(&c))
    {
        return bad("cpu", "must be a number between 0.1 and 16");
    }
    if let Some(m) = b.get("memory_bytes")
        && !m
            .as_u64()
            .is_some_and(|m| (200_000_000..=32_000_000_000).contains(&m))
    {
        return bad("memory_bytes", "out of range");
    }
    let tags = match b.get("tags") {
        None => serde_json::Map::new(),
        Some(Value::Object(t)) => {
            if let Some((k, _)) = t.iter().find(|(k, v)| !valid_tag_key(k) || !v.is_string()) {
                return bad(&format!("tags.{k}"), "invalid tag");
            }
            t.clone()
        }
        Some(_) => return bad("tags", "must be an object of strings"),
    };
    if let Some(tp) = b.get("termination_policy")
        && !tp.is_object()
    {
        return bad("termination_policy", "must be an object");
    }
    let Ok(dir) = tempfile::tempdir() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "no temp dir",
            None,
        );
    };
    let seq = shared.next.fetch_add(1, Ordering::Relaxed);
    let id = format!("5a3c0000-0000-4000-8000-{seq:012x}");
    let sandbox = json!({
        "id": id,
        "organization_id": null,
        "project_id": "proj_fake",
        "snapshot_id": snapshot_id,
        "cpu": b.get("cpu").cloned().unwrap_or(json!(1)),
        "memory_bytes": b.get("memory_bytes").cloned().unwrap_or(json!(2_000_000_000u64)),
        "agent": { "version": null, "token": null, "url": null },
        "ttl": ttl,
        "tags": tags,
        "termination_policy": b.get("termination_policy").cloned().unwrap_or(Value::Null),
        "status": "starting",
        "status_reason": if alias.is_some() { "cold_start_requested" } else { "restore_requested" },
        "created_at": NOW,
        "started_at": null,
        "resized_at": null,
        "recovery_at": null,
        "terminated_at": null,
        "updated_at": NOW,
    });
    lock(&shared).insert(
        id,
        FakeSandbox {
            seq,
            created: std::time::Instant::now(),
            dir,
            body: sandbox.clone(),
            token: None,
            agent_url: None,
            execs: HashMap::new(),
        },
    );
    (StatusCode::CREATED, axum::Json(sandbox)).into_response()
}

async fn get_sandbox(State(shared): St, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if !is_uuid(&id) {
        return bad("id", "must be a UUID");
    }
    let mut sandboxes = lock(&shared);
    let Some(sb) = sandboxes.get_mut(&id) else {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            "Sandbox not found.",
            None,
        );
    };
    let seen = sb.body.clone();
    // Booting takes one observation; then the agent is reachable.
    if sb.body["status"] == "starting" {
        let host = headers
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or("127.0.0.1");
        // A fresh token per boot: a recovered VM's agent does not take the old one.
        let boot_no = shared.next.fetch_add(1, Ordering::Relaxed);
        let token = format!("agent-token-{}-{boot_no}", sb.seq);
        let restored = sb.body["status_reason"] == "restore_requested";
        sb.body["status_reason"] = json!(if restored { "restored" } else { "cold_started" });
        sb.body["started_at"] = json!(NOW);
        let base = shared
            .agent_base
            .lock()
            .ok()
            .and_then(|b| b.clone())
            .unwrap_or_else(|| format!("http://{host}"));
        boot(sb, format!("{base}/agent/{id}"), token);
    }
    axum::Json(seen).into_response()
}

async fn terminate_sandbox(State(shared): St, Path(id): Path<String>, body: Bytes) -> Response {
    if !is_uuid(&id) {
        return bad("id", "must be a UUID");
    }
    if !body.is_empty() {
        match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(b))
                if b.get("snapshot")
                    .is_none_or(|s| s.is_null() || s.is_object()) => {}
            _ => return bad("snapshot", "must be an object or null"),
        }
    }
    let mut sandboxes = lock(&shared);
    let Some(sb) = sandboxes.get_mut(&id) else {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            "Sandbox not found.",
            None,
        );
    };
    if sb.body["status"] != "terminated" {
        terminate(sb, "termination_requested");
    }
    axum::Json(sb.body.clone()).into_response()
}

async fn list_sandboxes(State(shared): St, Query(query): Query<Vec<(String, String)>>) -> Response {
    let mut limit = 20usize;
    let mut cursor = None;
    let mut tags = Vec::new();
    let mut statuses = Vec::new();
    for (k, v) in &query {
        match k.as_str() {
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=100).contains(&n) => limit = n,
                _ => return bad("limit", "must be an integer between 1 and 100"),
            },
            "cursor" => cursor = Some(v.clone()),
            "statuses[]" => statuses.push(v.clone()),
            _ => {
                if let Some(tag) = k.strip_prefix("tags[").and_then(|r| r.strip_suffix(']')) {
                    tags.push((tag.to_owned(), v.clone()));
                }
            }
        }
    }
    let sandboxes = lock(&shared);
    let mut all: Vec<&FakeSandbox> = sandboxes
        .values()
        .filter(|s| {
            tags.iter()
                .all(|(k, v)| s.body["tags"][k].as_str() == Some(v))
        })
        .filter(|s| {
            statuses.is_empty()
                || statuses
                    .iter()
                    .any(|st| s.body["status"].as_str() == Some(st))
        })
        .collect();
    all.sort_by_key(|s| s.seq);
    let start = match &cursor {
        Some(c) => match all.iter().position(|s| s.body["id"].as_str() == Some(c)) {
            Some(i) => i + 1,
            None => return bad("cursor", "unknown cursor"),
        },
        None => 0,
    };
    // A server may return fewer than `limit` items, with a cursor.
    let page: Vec<Value> = all
        .iter()
        .skip(start)
        .take(limit.min(shared.max_page.load(Ordering::SeqCst)))
        .map(|s| s.body.clone())
        .collect();
    let next_cursor = if start + page.len() < all.len() {
        page.last().map(|s| s["id"].clone()).unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    axum::Json(json!({ "data": page, "next_cursor": next_cursor })).into_response()
}

/// The sandbox's directory and exec table, if `headers` carry its agent token.
#[allow(clippy::result_large_err)] // An axum response is the error of a fake's handler.
fn agent_auth(
    shared: &Shared,
    sid: &str,
    headers: &HeaderMap,
) -> Result<std::path::PathBuf, Response> {
    let sandboxes = lock(shared);
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match sandboxes.get(sid) {
        Some(sb) if sb.token.is_some() && bearer == sb.token.as_deref() => {
            Ok(sb.dir.path().to_owned())
        }
        _ => Err(pint_error(StatusCode::UNAUTHORIZED, "Unauthorized")),
    }
}

fn exec_item(id: &str, e: &FakeExec) -> Value {
    json!({
        "id": id,
        "command": e.command,
        "args": e.args,
        "status": e.status,
        "pid": 4242,
        "pty": false,
        // A Go zero value until the process has exited.
        "exitCode": e.exit_code.unwrap_or(0),
    })
}

async fn create_exec(
    State(shared): St,
    headers: HeaderMap,
    Path(sid): Path<String>,
    body: Bytes,
) -> Response {
    let dir = match agent_auth(&shared, &sid, &headers) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let Ok(Value::Object(b)) = serde_json::from_slice::<Value>(&body) else {
        return pint_error(StatusCode::BAD_REQUEST, "Invalid request body");
    };
    let Some(command) = b.get("command").and_then(Value::as_str).map(str::to_owned) else {
        return pint_error(StatusCode::BAD_REQUEST, "command is required");
    };
    let args: Vec<String> = match b.get("args") {
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => a
            .iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect(),
        _ => return pint_error(StatusCode::BAD_REQUEST, "args is required"),
    };
    let env: BTreeMap<String, String> = match b.get("env") {
        None => BTreeMap::new(),
        Some(Value::Object(m)) if m.values().all(Value::is_string) => m
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect(),
        Some(_) => return pint_error(StatusCode::BAD_REQUEST, "env must map strings to strings"),
    };
    let cwd = match b.get("cwd") {
        None => dir.clone(),
        Some(Value::String(c)) if std::path::Path::new(c).is_dir() => c.into(),
        Some(_) => return pint_error(StatusCode::BAD_REQUEST, "cwd is not a directory"),
    };
    if b.get("autostart").is_some_and(|a| a != &Value::Bool(true)) {
        return pint_error(
            StatusCode::BAD_REQUEST,
            "the fake only runs autostarted execs",
        );
    }
    // `sh -c X` runs X directly, so the process the fake kills is the command itself.
    let line = if command == "sh" && args.len() == 2 && args[0] == "-c" {
        args[1].clone()
    } else {
        std::iter::once(&command)
            .chain(&args)
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let id = format!("exec-{}", shared.next.fetch_add(1, Ordering::Relaxed));
    let exec = Arc::new(Mutex::new(FakeExec {
        command,
        args,
        status: "RUNNING".into(),
        exit_code: None,
        messages: Vec::new(),
        task: None,
    }));
    let runner = exec.clone();
    let task = tokio::spawn(async move {
        let outcome = run_command(&line, &cwd, &env, Duration::from_secs(3600), 16 << 20).await;
        let mut e = lock_exec(&runner);
        let (code, stdout, stderr) = match outcome {
            Ok(RunOutcome::Finished(out)) => (out.exit_code, out.stdout, out.stderr),
            Ok(RunOutcome::TimedOut) => (137, Vec::new(), Vec::new()),
            Err(err) => (127, Vec::new(), err.to_string().into_bytes()),
        };
        let mut seq = 0;
        for (kind, data) in [("stdout", stdout), ("stderr", stderr)] {
            if !data.is_empty() {
                seq += 1;
                e.messages.push(json!({
                    "type": kind,
                    "output": String::from_utf8_lossy(&data),
                    "sequence": seq,
                    "timestamp": NOW,
                }));
            }
        }
        e.messages.push(json!({
            "type": "stdout", "output": "", "sequence": seq + 1, "timestamp": NOW, "exitCode": code,
        }));
        e.exit_code = Some(code);
        e.status = "EXITED".into();
        e.task = None;
    });
    let item = {
        let mut e = lock_exec(&exec);
        if e.status == "RUNNING" {
            e.task = Some(task.abort_handle());
        }
        exec_item(&id, &e)
    };
    if let Some(sb) = lock(&shared).get_mut(&sid) {
        sb.execs.insert(id, exec);
    }
    (StatusCode::CREATED, axum::Json(item)).into_response()
}

fn find_exec(shared: &Shared, sid: &str, eid: &str) -> Option<Arc<Mutex<FakeExec>>> {
    lock(shared)
        .get(sid)
        .and_then(|sb| sb.execs.get(eid).cloned())
}

async fn get_exec(
    State(shared): St,
    headers: HeaderMap,
    Path((sid, eid)): Path<(String, String)>,
) -> Response {
    if let Err(r) = agent_auth(&shared, &sid, &headers) {
        return r;
    }
    match find_exec(&shared, &sid, &eid) {
        Some(e) => axum::Json(exec_item(&eid, &lock_exec(&e))).into_response(),
        None => pint_error(StatusCode::NOT_FOUND, "Exec not found"),
    }
}

async fn exec_io(
    State(shared): St,
    headers: HeaderMap,
    Path((sid, eid)): Path<(String, String)>,
) -> Response {
    if let Err(r) = agent_auth(&shared, &sid, &headers) {
        return r;
    }
    match find_exec(&shared, &sid, &eid) {
        Some(e) => axum::Json(Value::Array(lock_exec(&e).messages.clone())).into_response(),
        None => pint_error(StatusCode::NOT_FOUND, "Not Found - Exec not found"),
    }
}

async fn delete_exec(
    State(shared): St,
    headers: HeaderMap,
    Path((sid, eid)): Path<(String, String)>,
) -> Response {
    if let Err(r) = agent_auth(&shared, &sid, &headers) {
        return r;
    }
    let removed = lock(&shared)
        .get_mut(&sid)
        .and_then(|sb| sb.execs.remove(&eid));
    match removed {
        Some(e) => {
            if let Some(task) = lock_exec(&e).task.take() {
                task.abort();
            }
            axum::Json(json!({ "message": "Exec deleted" })).into_response()
        }
        None => pint_error(StatusCode::NOT_FOUND, "Exec not found"),
    }
}

async fn file_stat(
    State(shared): St,
    headers: HeaderMap,
    Path((sid, path)): Path<(String, String)>,
) -> Response {
    if let Err(r) = agent_auth(&shared, &sid, &headers) {
        return r;
    }
    match std::fs::metadata(&path) {
        Ok(m) => axum::Json(json!({
            "name": std::path::Path::new(&path).file_name().map(|n| n.to_string_lossy()),
            "path": path,
            "isDir": m.is_dir(),
            "size": m.len(),
            "modTime": NOW,
        }))
        .into_response(),
        Err(_) => pint_error(StatusCode::NOT_FOUND, "File not found"),
    }
}

fn file_response(path: &str, bytes: Vec<u8>) -> Value {
    match String::from_utf8(bytes) {
        Ok(text) => json!({ "path": path, "content": text, "encoding": "utf-8" }),
        Err(e) => json!({
            "path": path,
            "content": base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            "encoding": "base64",
        }),
    }
}

async fn read_file(
    State(shared): St,
    headers: HeaderMap,
    Path((sid, path)): Path<(String, String)>,
) -> Response {
    if let Err(r) = agent_auth(&shared, &sid, &headers) {
        return r;
    }
    if std::path::Path::new(&path).is_dir() {
        return pint_error(StatusCode::BAD_REQUEST, "path is a directory");
    }
    match std::fs::read(&path) {
        Ok(bytes) => axum::Json(file_response(&path, bytes)).into_response(),
        Err(_) => pint_error(StatusCode::NOT_FOUND, "File not found"),
    }
}

async fn create_file(
    State(shared): St,
    headers: HeaderMap,
    Path((sid, path)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Err(r) = agent_auth(&shared, &sid, &headers) {
        return r;
    }
    if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/octet-stream")
    {
        return pint_error(
            StatusCode::BAD_REQUEST,
            "body must be application/octet-stream",
        );
    }
    match std::fs::write(&path, &body) {
        Ok(()) => (
            StatusCode::CREATED,
            axum::Json(file_response(&path, body.to_vec())),
        )
            .into_response(),
        Err(_) => pint_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal Server Error - Failed to create file",
        ),
    }
}

/// The API key the fake accepts.
pub const API_KEY: &str = "together_fake_key_0123";
/// The snapshot alias the fake knows (any other alias is 404); [`Fake::config`] boots it by
/// default.
pub const ALIAS: &str = "corral-test@v1";
/// Every `status_reason` Together documents (`Sandbox.status_reason` in `api-openapi.json`).
const STATUS_REASONS: [&str; 13] = [
    "cold_start_requested",
    "restore_requested",
    "cold_started",
    "restored",
    "out_of_capacity",
    "internal_error",
    "autoterminated",
    "termination_requested",
    "crashed",
    "oom_killed",
    "evicted",
    "node_lost",
    "cluster_lost",
];

/// Together's two APIs on one loopback server, accepting [`API_KEY`] on the control API under
/// `/v1` and each running sandbox's agent token under `/agent/{id}`.
pub struct Fake {
    server: FakeServer,
    shared: Arc<Shared>,
}

impl Fake {
    /// Starts the fake (knowing the alias [`ALIAS`]).
    pub async fn start() -> Self {
        let shared = Arc::new(Shared {
            api_key: API_KEY.to_owned(),
            aliases: vec![ALIAS.to_owned()],
            max_page: AtomicUsize::new(100),
            next: AtomicU64::new(1),
            sandboxes: Mutex::new(HashMap::new()),
            agent_base: Mutex::new(None),
        });
        Self {
            server: FakeServer::start(router(shared.clone())).await,
            shared,
        }
    }

    /// The HTTP server: request log and fault injection.
    pub fn server(&self) -> &FakeServer {
        &self.server
    }

    /// The adapter's base URL: the server's address plus the API's `/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.base_url())
    }

    /// The adapter's configuration pointed at the fake, booting [`ALIAS`] by default.
    pub fn config(&self) -> crate::TogetherConfig {
        crate::TogetherConfig {
            base_url: self.base_url(),
            default_snapshot: Some(ALIAS.into()),
            trusted_hosts: vec![self.server.base_url()],
            ..Default::default()
        }
    }

    /// Sandboxes booting from now on name `{base}/agent/{id}` as their `agent.url` (`None`:
    /// this server), as a provider could answer anything there.
    #[allow(clippy::expect_used)] // A poisoned lock means a handler panicked: the test already failed.
    pub fn set_agent_base(&self, base: Option<&str>) {
        *self.shared.agent_base.lock().expect("agent base lock") = base.map(str::to_owned);
    }

    /// A call context carrying [`API_KEY`].
    pub fn context(&self) -> CallContext {
        CallContext::new(
            Some(SecretString::from(API_KEY)),
            ProviderContext::default(),
        )
    }

    /// Cuts listings into pages of at most `sandboxes`, whatever `limit` asks (to exercise
    /// cursor pagination).
    pub fn set_page_size(&self, sandboxes: usize) {
        self.shared
            .max_page
            .store(sandboxes.max(1), Ordering::SeqCst);
    }

    /// The VM of sandbox `id` crashed for `reason` (`crashed`, `oom_killed`, `evicted`, …):
    /// it is `recovering`, its processes are gone and its agent is null until [`Fake::recover`].
    pub fn crash(&self, id: &str, reason: &str) {
        self.with_sandbox(id, reason, |sb| {
            kill_execs(sb);
            sb.token = None;
            sb.body["status"] = json!("recovering");
            sb.body["status_reason"] = json!(reason);
            sb.body["recovery_at"] = json!(NOW);
            sb.body["agent"] = json!({ "version": null, "token": null, "url": null });
        });
    }

    /// The recovery of sandbox `id` succeeded: it is `running` (`restored`) again, at the same
    /// agent URL with a new token.
    pub fn recover(&self, id: &str) {
        let boot_no = self.shared.next.fetch_add(1, Ordering::Relaxed);
        self.with_sandbox(id, "restored", |sb| {
            let url = sb
                .agent_url
                .clone()
                .unwrap_or_else(|| panic!("sandbox {id} never ran, so it cannot recover"));
            let token = format!("agent-token-{}-{boot_no}", sb.seq);
            sb.body["status_reason"] = json!("restored");
            boot(sb, url, token);
        });
    }

    /// Sandbox `id` was terminated by Together for `reason` (`evicted`, `node_lost`, …), not
    /// by a terminate call nor its `ttl`.
    pub fn lose(&self, id: &str, reason: &str) {
        self.with_sandbox(id, reason, |sb| terminate(sb, reason));
    }

    fn with_sandbox(&self, id: &str, reason: &str, change: impl FnOnce(&mut FakeSandbox)) {
        assert!(
            STATUS_REASONS.contains(&reason),
            "`{reason}` is not a documented status_reason"
        );
        let mut sandboxes = lock(&self.shared);
        let sb = sandboxes
            .get_mut(id)
            .unwrap_or_else(|| panic!("no sandbox {id}"));
        change(sb);
        sb.body["updated_at"] = json!(NOW);
    }
}

#[async_trait::async_trait]
impl Harness for Fake {
    fn lists_by_tag() -> bool {
        true
    }

    type Adapter = crate::TogetherProvider;

    async fn start() -> Self {
        Fake::start().await
    }

    fn server(&self) -> &FakeServer {
        &self.server
    }

    fn base_url(&self) -> String {
        Fake::base_url(self)
    }

    fn config_at(&self, base_url: &str, http: HttpConfig) -> crate::TogetherConfig {
        crate::TogetherConfig {
            base_url: base_url.to_owned(),
            http,
            ..self.config()
        }
    }

    fn context(&self) -> CallContext {
        Fake::context(self)
    }

    fn create_call() -> (Method, &'static str) {
        (Method::POST, "/v1/sandboxes")
    }

    fn get_call() -> (Method, &'static str) {
        (Method::GET, "/v1/sandboxes/")
    }

    fn unknown_id() -> &'static str {
        "5a3c0000-0000-4000-8000-0000000fffff"
    }

    fn wrong_credential() -> &'static str {
        "not-the-key"
    }

    /// `CORRAL_LIVE_TOGETHER_API_KEY` and `CORRAL_LIVE_TOGETHER_SNAPSHOT` (a snapshot UUID or
    /// alias to boot).
    fn live() -> Result<(crate::TogetherConfig, CallContext, CreateSandboxRequest), String> {
        let (Ok(key), Ok(snapshot)) = (
            std::env::var("CORRAL_LIVE_TOGETHER_API_KEY"),
            std::env::var("CORRAL_LIVE_TOGETHER_SNAPSHOT"),
        ) else {
            return Err("CORRAL_LIVE_TOGETHER_API_KEY and CORRAL_LIVE_TOGETHER_SNAPSHOT".into());
        };
        let config = crate::TogetherConfig {
            default_snapshot: Some(snapshot),
            ..crate::TogetherConfig::default()
        };
        let ctx = CallContext::new(Some(SecretString::from(key)), ProviderContext::default());
        Ok((
            config,
            ctx,
            CreateSandboxRequest::standard(Provider::Together, None, None),
        ))
    }
}

/// Together's two APIs as one axum router over `shared`.
fn router(shared: Arc<Shared>) -> Router {
    let control = Router::new()
        .route("/sandboxes", post(create_sandbox).get(list_sandboxes))
        .route("/sandboxes/{id}", get(get_sandbox))
        .route("/sandboxes/{id}/terminate", post(terminate_sandbox))
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            control_auth,
        ))
        .with_state(shared.clone());
    let agent = Router::new()
        .route("/{sid}/api/v1/execs", post(create_exec))
        .route(
            "/{sid}/api/v1/execs/{eid}",
            get(get_exec).delete(delete_exec),
        )
        .route("/{sid}/api/v1/execs/{eid}/io", get(exec_io))
        .route("/{sid}/api/v1/file_stat/{*path}", get(file_stat))
        .route(
            "/{sid}/api/v1/files/{*path}",
            get(read_file).post(create_file),
        )
        .with_state(shared);
    Router::new().nest("/v1", control).nest("/agent", agent)
}
