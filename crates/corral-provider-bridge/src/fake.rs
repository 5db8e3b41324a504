//! The bridge contract on loopback, for tests (feature `fake`).
//!
//! Built from Cloudflare's bridge description: bearer auth (`401 {"error","code":
//! "unauthorized"}`), ids matching `^[a-z2-7]{1,128}$` (`400 invalid_request` otherwise), an
//! `ExecRequest` of `argv` (non-empty strings), `timeout_ms` (integer) and `cwd` (string),
//! `{"error","code"}` bodies, `204` deletes also for unknown ids, `{"running"}` always `200`,
//! raw-byte files, and exec as SSE (base64 chunks, then `exit` or `error`). As the Worker does,
//! the argv is shell-quoted, joined and run by a shell (here the host's `sh`, in a per-sandbox
//! temporary directory) and a file write creates missing parents. The SSE body is sent in
//! small pieces, so events arrive split across reads.
//!
//! [`Fake::start`] serves Corral's extensions too (tag on create, lookup by tag, `GET
//! /v1/sandbox/{id}`, `env` on exec, `sandbox_not_found`, `exec_timeout`, and the process
//! routes: processes run in the background on the host with a stdin pipe when asked, every
//! byte of output kept, logs as SSE from any byte offset with a comment every 15 s of
//! silence, stdin by offset, signals to the process group, `timeout_ms` as a kill;
//! [`FakeHandle::refuse_stdin`] makes it answer `stdin_unsupported` as a bridge on
//! Cloudflare's background processes must);
//! and the lifecycle extension: a stop kills the sandbox's processes and refuses exec, files
//! and processes with `409 sandbox_stopped` until a resume; a snapshot copies the sandbox's
//! directory at once (answered `creating`, then `ready` from the first read on, so callers
//! poll); a restore makes a new sandbox, tagged, from a copy of a ready snapshot's);
//! [`Fake::start_without_lifecycle`] serves every extension but the lifecycle one (a bridge
//! built before it: its routes answer 404);
//! [`Fake::start_plain`] serves only the Worker's routes, where — as with its Durable Objects
//! — any well-formed id names a sandbox, created on first use.

// Helpers answer refusals as ready responses; their size does not matter in a test fake.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use corral_domain::{CreateSandboxRequest, OutputStream, ProviderContext, Signal};
use corral_provider::shell::shell_quote;
use corral_provider::{Adapter, CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::background::{Process, Processes, SpawnSpec};
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::host_shell::{RunOutcome, run_command};
use serde_json::{Value, json};

use crate::BridgeConfig;
use crate::api::{self, codes};
use corral_provider_testkit::plumbing::{self, copy_tree, locked as lock};

/// The bridge key the fake accepts.
pub const API_KEY: &str = "bridge_fake_key_0123";

/// Bytes of the SSE body per network write: small, so events arrive split.
const SSE_PIECE: usize = 7;

struct FakeSandbox {
    dir: tempfile::TempDir,
    tag: Option<String>,
    /// *(lifecycle extension)* Stopped: exec, files and processes are refused.
    stopped: bool,
}

impl FakeSandbox {
    fn new(dir: tempfile::TempDir, tag: Option<String>) -> Self {
        Self {
            dir,
            tag,
            stopped: false,
        }
    }

    fn info(&self, id: &str, lifecycle: bool) -> api::SandboxInfo {
        api::SandboxInfo {
            id: id.to_owned(),
            running: !self.stopped,
            tag: self.tag.clone(),
            state: lifecycle.then(|| {
                if self.stopped {
                    api::states::STOPPED
                } else {
                    api::states::RUNNING
                }
                .to_owned()
            }),
        }
    }
}

/// A snapshot *(lifecycle extension)*: a copy of a sandbox's directory.
struct FakeSnapshot {
    dir: tempfile::TempDir,
    size: u64,
    /// `false` until it was read once: answered `creating` until then.
    ready: bool,
}

impl FakeSnapshot {
    fn info(&self, id: &str) -> api::SnapshotInfo {
        api::SnapshotInfo {
            id: id.to_owned(),
            status: if self.ready { "ready" } else { "creating" }.into(),
            size_bytes: Some(self.size),
        }
    }
}

struct Shared {
    api_key: String,
    extensions: bool,
    /// Whether the lifecycle extension is served (stop, resume, snapshots, restore).
    lifecycle: bool,
    /// Snapshots *(lifecycle extension)*, by id.
    snapshots: Mutex<HashMap<String, FakeSnapshot>>,
    next: AtomicU64,
    sandboxes: Mutex<HashMap<String, FakeSandbox>>,
    exec_bodies: Mutex<Vec<Vec<u8>>>,
    /// Processes *(extension)*, by sandbox id and process id.
    processes: Mutex<HashMap<(String, String), Arc<FakeProcess>>>,
    /// The host processes behind them (killed when the fake is dropped).
    host: Processes,
    /// Whether a start with stdin is refused (`stdin_unsupported`), as a bridge on
    /// Cloudflare's background processes must.
    refuse_stdin: Mutex<bool>,
}

type St = State<Arc<Shared>>;

type Answer<T> = Result<T, Response>;

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(api::ErrorBody {
            error: message.into(),
            code: code.to_owned(),
        }),
    )
        .into_response()
}

fn invalid(message: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, codes::INVALID_REQUEST, message)
}

async fn auth(State(shared): St, headers: HeaderMap, req: Request, next: Next) -> Response {
    let key = plumbing::bearer(&headers);
    if key == Some(shared.api_key.as_str()) {
        next.run(req).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            codes::UNAUTHORIZED,
            "Unauthorized",
        )
    }
}

impl Shared {
    /// The sandbox's directory; in plain mode an unknown well-formed id is created on use.
    fn dir(&self, id: &str) -> Answer<std::path::PathBuf> {
        if !api::is_sandbox_id(id) {
            return Err(invalid("sandbox id must match ^[a-z2-7]{1,128}$"));
        }
        let mut sandboxes = lock(&self.sandboxes);
        if !sandboxes.contains_key(id) {
            if self.extensions {
                return Err(error(
                    StatusCode::NOT_FOUND,
                    codes::SANDBOX_NOT_FOUND,
                    format!("sandbox {id} does not exist"),
                ));
            }
            let dir = tempfile::tempdir().map_err(|e| {
                error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    codes::EXEC_ERROR,
                    e.to_string(),
                )
            })?;
            sandboxes.insert(id.to_owned(), FakeSandbox::new(dir, None));
        }
        match sandboxes.get(id) {
            Some(s) if s.stopped => Err(error(
                StatusCode::CONFLICT,
                codes::SANDBOX_STOPPED,
                format!("sandbox {id} is stopped: resume it first"),
            )),
            Some(s) => Ok(s.dir.path().to_owned()),
            None => Err(invalid("unreachable")),
        }
    }

    fn info(&self, id: &str) -> Option<api::SandboxInfo> {
        lock(&self.sandboxes)
            .get(id)
            .map(|s| s.info(id, self.lifecycle))
    }

    /// A fresh sandbox id.
    fn new_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        api::base32(format!("fake-{n:08}-{}", corral_domain::OperationId::new()).as_bytes())
    }
}

fn sandbox_not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        codes::SANDBOX_NOT_FOUND,
        format!("sandbox {id} does not exist"),
    )
}

fn snapshot_not_found(sid: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        codes::SNAPSHOT_NOT_FOUND,
        format!("snapshot {sid} does not exist"),
    )
}

fn internal(e: impl std::fmt::Display) -> Response {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        codes::EXEC_ERROR,
        e.to_string(),
    )
}

/// A new temporary directory holding a copy of `from`, and the bytes copied.
async fn copied(from: std::path::PathBuf) -> Result<(tempfile::TempDir, u64), Response> {
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir()?;
        let size = copy_tree(&from, dir.path())?;
        Ok::<_, std::io::Error>((dir, size))
    })
    .await
    .map_err(internal)?
    .map_err(internal)
}

/// `POST /v1/sandbox/{id}/stop` *(lifecycle extension)*: its processes are killed, and exec,
/// files and processes answer `409 sandbox_stopped` until a resume. Stopping a stopped sandbox
/// answers it as it is.
async fn stop(State(shared): St, Path(id): Path<String>) -> Response {
    if !api::is_sandbox_id(&id) {
        return invalid("sandbox id must match ^[a-z2-7]{1,128}$");
    }
    let info = {
        let mut sandboxes = lock(&shared.sandboxes);
        let Some(sandbox) = sandboxes.get_mut(&id) else {
            return sandbox_not_found(&id);
        };
        sandbox.stopped = true;
        sandbox.info(&id, true)
    };
    let running: Vec<Arc<FakeProcess>> = lock(&shared.processes)
        .iter()
        .filter(|((sandbox, _), _)| *sandbox == id)
        .map(|(_, p)| p.clone())
        .collect();
    for process in running {
        if process.bg.exit().is_none() {
            let _ = process.bg.signal(9).await;
        }
    }
    axum::Json(info).into_response()
}

/// `POST /v1/sandbox/{id}/resume` *(lifecycle extension)*; resuming a running sandbox answers
/// it as it is.
async fn resume(State(shared): St, Path(id): Path<String>) -> Response {
    if !api::is_sandbox_id(&id) {
        return invalid("sandbox id must match ^[a-z2-7]{1,128}$");
    }
    let mut sandboxes = lock(&shared.sandboxes);
    let Some(sandbox) = sandboxes.get_mut(&id) else {
        return sandbox_not_found(&id);
    };
    sandbox.stopped = false;
    axum::Json(sandbox.info(&id, true)).into_response()
}

/// `POST /v1/sandbox/{id}/snapshots` *(lifecycle extension)*: the directory is copied before
/// the answer (a point in time), which still says `creating` so callers poll.
async fn take_snapshot(State(shared): St, Path(id): Path<String>, body: Bytes) -> Response {
    if !api::is_sandbox_id(&id) {
        return invalid("sandbox id must match ^[a-z2-7]{1,128}$");
    }
    if !body.is_empty() && serde_json::from_slice::<api::SnapshotRequest>(&body).is_err() {
        return invalid("body must be {\"tag\"?, \"name\"?}");
    }
    // Stopped sandboxes keep their files: they can be snapshotted.
    let Some(from) = lock(&shared.sandboxes)
        .get(&id)
        .map(|s| s.dir.path().to_owned())
    else {
        return sandbox_not_found(&id);
    };
    let (dir, size) = match copied(from).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let sid = format!("snap-{:08}", shared.next.fetch_add(1, Ordering::Relaxed));
    let snapshot = FakeSnapshot {
        dir,
        size,
        ready: false,
    };
    let info = snapshot.info(&sid);
    lock(&shared.snapshots).insert(sid, snapshot);
    axum::Json(info).into_response()
}

/// `GET /v1/snapshots/{sid}` *(lifecycle extension)*: `ready` from the first read on.
async fn get_snapshot(State(shared): St, Path(sid): Path<String>) -> Response {
    let mut snapshots = lock(&shared.snapshots);
    let Some(snapshot) = snapshots.get_mut(&sid) else {
        return snapshot_not_found(&sid);
    };
    snapshot.ready = true;
    axum::Json(snapshot.info(&sid)).into_response()
}

/// `DELETE /v1/snapshots/{sid}` *(lifecycle extension)*.
async fn delete_snapshot(State(shared): St, Path(sid): Path<String>) -> Response {
    match lock(&shared.snapshots).remove(&sid) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => snapshot_not_found(&sid),
    }
}

/// `POST /v1/snapshots/{sid}/restore` *(lifecycle extension)*: a new sandbox, tagged, from a
/// copy of the snapshot.
async fn restore(State(shared): St, Path(sid): Path<String>, body: Bytes) -> Response {
    let tag = match serde_json::from_slice::<api::RestoreRequest>(&body) {
        Ok(r) if !r.tag.is_empty() && r.tag.len() <= 256 => r.tag,
        _ => return invalid("body must be {\"tag\": <1 to 256 characters>}"),
    };
    let from = match lock(&shared.snapshots).get(&sid) {
        None => return snapshot_not_found(&sid),
        Some(s) if !s.ready => {
            return error(
                StatusCode::CONFLICT,
                codes::SNAPSHOT_NOT_READY,
                format!("snapshot {sid} is still being made"),
            );
        }
        Some(s) => s.dir.path().to_owned(),
    };
    let (dir, _) = match copied(from).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let id = shared.new_id();
    lock(&shared.sandboxes).insert(id.clone(), FakeSandbox::new(dir, Some(tag.clone())));
    axum::Json(api::Created { id, tag: Some(tag) }).into_response()
}

async fn create(State(shared): St, body: Bytes) -> Response {
    let tag = if shared.extensions && !body.is_empty() {
        match serde_json::from_slice::<api::CreateRequest>(&body) {
            Ok(r) if !r.tag.is_empty() && r.tag.len() <= 256 => Some(r.tag),
            _ => return invalid("body must be {\"tag\": <1 to 256 characters>}"),
        }
    } else {
        // The Worker's create takes no body and ignores one.
        None
    };
    let Ok(dir) = tempfile::tempdir() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            codes::EXEC_ERROR,
            "no temp dir",
        );
    };
    let id = shared.new_id();
    lock(&shared.sandboxes).insert(id.clone(), FakeSandbox::new(dir, tag.clone()));
    axum::Json(api::Created { id, tag }).into_response()
}

async fn list(State(shared): St, Query(query): Query<HashMap<String, String>>) -> Response {
    let Some(tag) = query.get("tag") else {
        return invalid("query parameter `tag` is required");
    };
    if query.len() != 1 {
        return invalid("only the `tag` query parameter is accepted");
    }
    let sandboxes = lock(&shared.sandboxes)
        .iter()
        .filter(|(_, s)| s.tag.as_deref() == Some(tag.as_str()))
        .map(|(id, s)| s.info(id, shared.lifecycle))
        .collect();
    axum::Json(api::SandboxList { sandboxes }).into_response()
}

async fn observe(State(shared): St, Path(id): Path<String>) -> Response {
    if !api::is_sandbox_id(&id) {
        return invalid("sandbox id must match ^[a-z2-7]{1,128}$");
    }
    match shared.info(&id) {
        Some(info) => axum::Json(info).into_response(),
        None => sandbox_not_found(&id),
    }
}

async fn running(State(shared): St, Path(id): Path<String>) -> Response {
    if shared.extensions && api::is_sandbox_id(&id) {
        let running = shared.info(&id).is_some_and(|i| i.running);
        return axum::Json(api::RunningResponse { running }).into_response();
    }
    // The Worker runs `true` in the container, which starts it.
    match shared.dir(&id) {
        Ok(_) => axum::Json(api::RunningResponse { running: true }).into_response(),
        Err(r) => r,
    }
}

async fn delete(State(shared): St, Path(id): Path<String>) -> Response {
    if !api::is_sandbox_id(&id) {
        return invalid("sandbox id must match ^[a-z2-7]{1,128}$");
    }
    lock(&shared.sandboxes).remove(&id);
    // Its processes go with it.
    lock(&shared.processes).retain(|(sandbox, _), p| {
        if *sandbox == id {
            shared.host.remove(p.bg.pid());
        }
        *sandbox != id
    });
    StatusCode::NO_CONTENT.into_response()
}

/// Checks an `ExecRequest` as the description types it.
fn exec_request(shared: &Shared, body: &[u8]) -> Answer<api::ExecRequest> {
    let v: Value = serde_json::from_slice(body).map_err(|_| invalid("body must be JSON"))?;
    let Value::Object(fields) = &v else {
        return Err(invalid("body must be an object"));
    };
    for key in fields.keys() {
        let known = matches!(key.as_str(), "argv" | "timeout_ms" | "cwd")
            || (shared.extensions && key == "env");
        if !known {
            return Err(invalid(format!("unknown field `{key}`")));
        }
    }
    match &v["argv"] {
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_string) => {}
        _ => return Err(invalid("argv must be a non-empty array of strings")),
    }
    if !(v["timeout_ms"].is_null() || v["timeout_ms"].is_u64()) {
        return Err(invalid("timeout_ms must be an integer"));
    }
    if !(v["cwd"].is_null() || v["cwd"].is_string()) {
        return Err(invalid("cwd must be a string"));
    }
    serde_json::from_value(v).map_err(|e| invalid(e.to_string()))
}

fn sse(event: &str, data: &str) -> Vec<u8> {
    format!("event: {event}\ndata: {data}\n\n").into_bytes()
}

/// `body` streamed in pieces of [`SSE_PIECE`] bytes.
fn split_stream(body: Vec<u8>) -> Response {
    let pieces: Vec<Result<Bytes, std::io::Error>> = body
        .chunks(SSE_PIECE)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(futures::stream::iter(pieces)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn exec(State(shared): St, Path(id): Path<String>, body: Bytes) -> Response {
    let request = match exec_request(&shared, &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let dir = match shared.dir(&id) {
        Ok(d) => d,
        Err(r) => return r,
    };
    if let Some(scripted) = lock(&shared.exec_bodies).pop() {
        return split_stream(scripted);
    }
    let cwd = match &request.cwd {
        Some(c) if !std::path::Path::new(c).is_absolute() => {
            return error(
                StatusCode::FORBIDDEN,
                codes::INVALID_REQUEST,
                "cwd must be absolute",
            );
        }
        Some(c) => std::path::PathBuf::from(c),
        None => dir,
    };
    let line = request
        .argv
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    let env: BTreeMap<String, String> = request.env.unwrap_or_default();
    let timeout = Duration::from_millis(request.timeout_ms.unwrap_or(600_000));
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut out = Vec::new();
    match run_command(&line, &cwd, &env, timeout, 64 << 20).await {
        Ok(RunOutcome::Finished(result)) => {
            for chunk in result.stdout.chunks(1000) {
                out.extend(sse("stdout", &b64(chunk)));
            }
            for chunk in result.stderr.chunks(1000) {
                out.extend(sse("stderr", &b64(chunk)));
            }
            out.extend(sse(
                "exit",
                &json!({ "exit_code": result.exit_code }).to_string(),
            ));
        }
        Ok(RunOutcome::TimedOut) => {
            let code = if shared.extensions {
                codes::EXEC_TIMEOUT
            } else {
                codes::EXEC_ERROR
            };
            out.extend(sse(
                "error",
                &json!({ "error": "command timed out", "code": code }).to_string(),
            ));
        }
        Err(e) => {
            return error(
                StatusCode::BAD_GATEWAY,
                "exec_transport_error",
                e.to_string(),
            );
        }
    }
    split_stream(out)
}

/// How long a process log stream waits for output before it sends a comment.
const LOGS_KEEPALIVE: Duration = Duration::from_secs(15);

/// A process started through the process routes *(extension)*.
struct FakeProcess {
    bg: Process,
    /// Whether it was started with a stdin pipe.
    stdin: bool,
    /// Bytes of stdin accepted so far.
    accepted: tokio::sync::Mutex<u64>,
}

impl FakeProcess {
    fn info(&self, id: &str) -> api::ProcessInfo {
        let exit = self.bg.exit();
        api::ProcessInfo {
            id: id.to_owned(),
            pid: Some(self.bg.pid()),
            status: match exit {
                None => "running",
                Some(e) if e.signal.is_some() => "killed",
                Some(e) if e.status == Some(0) => "completed",
                Some(_) => "failed",
            }
            .into(),
            exit_code: exit.map(|e| e.code()),
        }
    }
}

fn process_not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        codes::PROCESS_NOT_FOUND,
        format!("process {id} does not exist"),
    )
}

impl Shared {
    /// Process `pid` of sandbox `id`.
    fn process(&self, id: &str, pid: &str) -> Answer<Arc<FakeProcess>> {
        self.dir(id)?;
        lock(&self.processes)
            .get(&(id.to_owned(), pid.to_owned()))
            .cloned()
            .ok_or_else(|| process_not_found(pid))
    }
}

/// Checks a `StartProcessRequest` as the contract types it.
fn start_request(body: &[u8]) -> Answer<api::StartProcessRequest> {
    let v: Value = serde_json::from_slice(body).map_err(|_| invalid("body must be JSON"))?;
    let Value::Object(fields) = &v else {
        return Err(invalid("body must be an object"));
    };
    for key in fields.keys() {
        if !matches!(
            key.as_str(),
            "argv" | "process_id" | "stdin" | "cwd" | "env" | "timeout_ms"
        ) {
            return Err(invalid(format!("unknown field `{key}`")));
        }
    }
    match &v["argv"] {
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_string) => {}
        _ => return Err(invalid("argv must be a non-empty array of strings")),
    }
    match &v["process_id"] {
        Value::Null => {}
        Value::String(id) if api::is_process_id(id) => {}
        _ => return Err(invalid("process_id must match ^[A-Za-z0-9_-]{1,128}$")),
    }
    if !(v["stdin"].is_null() || v["stdin"].is_boolean()) {
        return Err(invalid("stdin must be a boolean"));
    }
    if !(v["timeout_ms"].is_null() || v["timeout_ms"].is_u64()) {
        return Err(invalid("timeout_ms must be an integer"));
    }
    if !(v["cwd"].is_null() || v["cwd"].is_string()) {
        return Err(invalid("cwd must be a string"));
    }
    match &v["env"] {
        Value::Null => {}
        Value::Object(e) if e.values().all(Value::is_string) => {}
        _ => return Err(invalid("env must map strings to strings")),
    }
    serde_json::from_value(v).map_err(|e| invalid(e.to_string()))
}

async fn start_process(State(shared): St, Path(id): Path<String>, body: Bytes) -> Response {
    let request = match start_request(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let dir = match shared.dir(&id) {
        Ok(d) => d,
        Err(r) => return r,
    };
    if request.stdin && lock(&shared.refuse_stdin).to_owned() {
        return error(
            StatusCode::BAD_REQUEST,
            codes::STDIN_UNSUPPORTED,
            "processes of this bridge have no standard input",
        );
    }
    let pid = request
        .process_id
        .clone()
        .unwrap_or_else(|| format!("proc-{:08}", shared.next.fetch_add(1, Ordering::Relaxed)));
    let key = (id.clone(), pid.clone());
    if lock(&shared.processes).contains_key(&key) {
        return error(
            StatusCode::CONFLICT,
            codes::PROCESS_EXISTS,
            format!("process {pid} already exists"),
        );
    }
    let cwd = match &request.cwd {
        Some(c) if !std::path::Path::new(c).is_absolute() => {
            return error(
                StatusCode::FORBIDDEN,
                codes::INVALID_REQUEST,
                "cwd must be absolute",
            );
        }
        Some(c) => std::path::PathBuf::from(c),
        None => dir,
    };
    // The argv is the process (the shell that parses the line execs it), so a signal to the
    // group reaches it and not a wrapper.
    let line = request
        .argv
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    let mut spec = SpawnSpec::new(format!("exec {line}"), cwd)
        .with_env(request.env.unwrap_or_default())
        .with_tag(pid.clone());
    if request.stdin {
        spec = spec.with_stdin();
    }
    let bg = match shared.host.spawn(spec) {
        Ok(bg) => bg,
        Err(e) => {
            return error(
                StatusCode::BAD_GATEWAY,
                "exec_transport_error",
                e.to_string(),
            );
        }
    };
    if let Some(ms) = request.timeout_ms {
        let backstop = bg.clone();
        tokio::spawn(async move {
            if backstop
                .wait_exit(Duration::from_millis(ms))
                .await
                .is_none()
            {
                let _ = backstop.signal(9).await;
            }
        });
    }
    let process = Arc::new(FakeProcess {
        bg,
        stdin: request.stdin,
        accepted: tokio::sync::Mutex::new(0),
    });
    let info = process.info(&pid);
    lock(&shared.processes).insert(key, process);
    axum::Json(info).into_response()
}

async fn list_processes(State(shared): St, Path(id): Path<String>) -> Response {
    if let Err(r) = shared.dir(&id) {
        return r;
    }
    let processes = lock(&shared.processes)
        .iter()
        .filter(|((sandbox, _), _)| *sandbox == id)
        .map(|((_, pid), p)| p.info(pid))
        .collect();
    axum::Json(api::ProcessList { processes }).into_response()
}

async fn get_process(State(shared): St, Path((id, pid)): Path<(String, String)>) -> Response {
    match shared.process(&id, &pid) {
        Ok(p) => axum::Json(p.info(&pid)).into_response(),
        Err(r) => r,
    }
}

/// Where a process log stream is.
struct LogBody {
    process: Arc<FakeProcess>,
    at: [u64; 2],
    done: bool,
}

fn log_event(stream: &str, at: u64, data: &[u8]) -> Bytes {
    let chunk = api::LogChunk {
        offset: Some(at),
        data: base64::engine::general_purpose::STANDARD.encode(data),
    };
    let data = serde_json::to_string(&chunk).unwrap_or_default();
    Bytes::from(format!("event: {stream}\ndata: {data}\n\n"))
}

async fn next_log_piece(mut b: LogBody) -> Option<(Result<Bytes, std::io::Error>, LogBody)> {
    if b.done {
        return None;
    }
    loop {
        // Read the exit before the output: once it is known, every byte is in.
        let exit = b.process.bg.exit();
        let mut out = Vec::new();
        for (i, stream, name) in [
            (0, OutputStream::Stdout, "stdout"),
            (1, OutputStream::Stderr, "stderr"),
        ] {
            let data = b.process.bg.read(stream, b.at[i]);
            if !data.is_empty() {
                out.extend_from_slice(&log_event(name, b.at[i], &data));
                b.at[i] += data.len() as u64;
            }
        }
        if let Some(exit) = exit {
            let data = serde_json::to_string(&api::ProcessExit {
                exit_code: Some(exit.code()),
            })
            .unwrap_or_default();
            out.extend_from_slice(format!("event: exit\ndata: {data}\n\n").as_bytes());
            b.done = true;
        }
        if !out.is_empty() {
            return Some((Ok(Bytes::from(out)), b));
        }
        if !b
            .process
            .bg
            .wait_output(b.at[0], b.at[1], LOGS_KEEPALIVE)
            .await
        {
            return Some((Ok(Bytes::from_static(b": keepalive\n\n")), b));
        }
    }
}

async fn process_logs(
    State(shared): St,
    Path((id, pid)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let process = match shared.process(&id, &pid) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let mut at = [0u64; 2];
    for (i, name) in ["stdout", "stderr"].into_iter().enumerate() {
        match query.get(name).map(|v| v.parse::<u64>()) {
            None => {}
            Some(Ok(n)) => at[i] = n,
            Some(Err(_)) => return invalid(format!("`{name}` must be a byte offset")),
        }
    }
    if let Some(other) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "stdout" | "stderr"))
    {
        return invalid(format!("unknown query parameter `{other}`"));
    }
    let body = LogBody {
        process,
        at,
        done: false,
    };
    // Sent in small pieces, so events arrive split across reads.
    let pieces =
        futures::StreamExt::flat_map(futures::stream::unfold(body, next_log_piece), |piece| {
            let parts: Vec<Result<Bytes, std::io::Error>> = match piece {
                Ok(bytes) => bytes
                    .chunks(SSE_PIECE * 5)
                    .map(|c| Ok(Bytes::copy_from_slice(c)))
                    .collect(),
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(parts)
        });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(pieces))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn write_stdin(
    State(shared): St,
    Path((id, pid)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let process = match shared.process(&id, &pid) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let request: api::StdinRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return invalid(format!("body must be {{\"offset\", \"data\"}}: {e}")),
    };
    let Ok(data) = base64::engine::general_purpose::STANDARD.decode(&request.data) else {
        return invalid("data must be base64");
    };
    let mut accepted = process.accepted.lock().await;
    if !process.stdin || !process.bg.stdin_open().await {
        return error(
            StatusCode::CONFLICT,
            codes::STDIN_CLOSED,
            format!("process {pid} has no open stdin"),
        );
    }
    if request.offset > *accepted {
        return error(
            StatusCode::CONFLICT,
            codes::STDIN_OFFSET,
            format!(
                "offset {} is past the {} bytes accepted",
                request.offset, *accepted
            ),
        );
    }
    let skip = usize::try_from(*accepted - request.offset).unwrap_or(usize::MAX);
    if skip < data.len() {
        if let Err(e) = process.bg.write_stdin(&data[skip..]).await {
            return error(
                StatusCode::CONFLICT,
                codes::STDIN_CLOSED,
                format!("writing stdin failed: {e}"),
            );
        }
        *accepted = request.offset + data.len() as u64;
    }
    axum::Json(api::StdinAccepted {
        accepted: *accepted,
    })
    .into_response()
}

async fn close_stdin(State(shared): St, Path((id, pid)): Path<(String, String)>) -> Response {
    match shared.process(&id, &pid) {
        Ok(p) => {
            p.bg.close_stdin().await;
            axum::Json(api::OkResponse { ok: true }).into_response()
        }
        Err(r) => r,
    }
}

async fn kill_process(
    State(shared): St,
    Path((id, pid)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let process = match shared.process(&id, &pid) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let request: api::KillRequest = if body.is_empty() {
        api::KillRequest { signal: None }
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => return invalid(format!("body must be {{\"signal\"}}: {e}")),
        }
    };
    let name = request.signal.unwrap_or_else(|| "SIGTERM".into());
    let Some(signal) = name
        .strip_prefix("SIG")
        .and_then(|n| n.parse::<Signal>().ok())
    else {
        return invalid(format!("unknown signal {name:?}"));
    };
    if let Err(e) = process.bg.signal(signal.number()).await {
        return error(
            StatusCode::BAD_GATEWAY,
            "exec_transport_error",
            e.to_string(),
        );
    }
    axum::Json(api::OkResponse { ok: true }).into_response()
}

async fn read_file(State(shared): St, Path((id, path)): Path<(String, String)>) -> Response {
    if let Err(r) = shared.dir(&id) {
        return r;
    }
    let path = format!("/{path}");
    match tokio::fs::read(&path).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => error(
            StatusCode::NOT_FOUND,
            codes::WORKSPACE_READ_NOT_FOUND,
            format!("File not found: {path}"),
        ),
        Err(e) => error(
            StatusCode::BAD_GATEWAY,
            "exec_transport_error",
            format!("read failed: {e}"),
        ),
    }
}

async fn write_file(
    State(shared): St,
    Path((id, path)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = shared.dir(&id) {
        return r;
    }
    if headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        != Some("application/octet-stream")
    {
        return invalid("Content-Type must be application/octet-stream");
    }
    if body.len() > 32 * 1024 * 1024 {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "file exceeds 32 MiB",
        );
    }
    let path = std::path::PathBuf::from(format!("/{path}"));
    // As the Worker's `Bun.write`, missing parents are created.
    if let Some(parent) = path.parent()
        && let Err(e) = tokio::fs::create_dir_all(parent).await
    {
        return error(
            StatusCode::BAD_GATEWAY,
            "exec_transport_error",
            format!("write failed: {e}"),
        );
    }
    match tokio::fs::write(&path, &body).await {
        Ok(()) => axum::Json(api::OkResponse { ok: true }).into_response(),
        Err(e) => error(
            StatusCode::BAD_GATEWAY,
            "exec_transport_error",
            format!("write failed: {e}"),
        ),
    }
}

async fn health() -> Response {
    axum::Json(json!({ "ok": true })).into_response()
}

/// The bridge contract as an axum router accepting only `api_key`; with `extensions`, Corral's
/// extensions too.
pub fn router(api_key: &str, extensions: bool) -> (Router, FakeHandle) {
    router_with(api_key, extensions, extensions)
}

/// As [`router`], choosing the lifecycle extension apart (it is served only with the others).
pub fn router_with(api_key: &str, extensions: bool, lifecycle: bool) -> (Router, FakeHandle) {
    let lifecycle = extensions && lifecycle;
    let shared = Arc::new(Shared {
        api_key: api_key.to_owned(),
        extensions,
        lifecycle,
        snapshots: Mutex::new(HashMap::new()),
        next: AtomicU64::new(1),
        sandboxes: Mutex::new(HashMap::new()),
        exec_bodies: Mutex::new(Vec::new()),
        processes: Mutex::new(HashMap::new()),
        host: Processes::default(),
        refuse_stdin: Mutex::new(false),
    });
    let mut api = Router::new()
        .route("/v1/sandbox/{id}/exec", post(exec))
        .route("/v1/sandbox/{id}/running", get(running))
        .route(
            "/v1/sandbox/{id}/file/{*path}",
            get(read_file).put(write_file),
        );
    api = if extensions {
        api.route("/v1/sandbox", post(create).get(list))
            .route("/v1/sandbox/{id}", get(observe).delete(delete))
            .route(
                "/v1/sandbox/{id}/process",
                post(start_process).get(list_processes),
            )
            .route("/v1/sandbox/{id}/process/{pid}", get(get_process))
            .route("/v1/sandbox/{id}/process/{pid}/logs", get(process_logs))
            .route(
                "/v1/sandbox/{id}/process/{pid}/stdin",
                post(write_stdin).delete(close_stdin),
            )
            .route("/v1/sandbox/{id}/process/{pid}/kill", post(kill_process))
    } else {
        api.route("/v1/sandbox", post(create))
            .route("/v1/sandbox/{id}", axum::routing::delete(delete))
    };
    if lifecycle {
        api = api
            .route("/v1/sandbox/{id}/stop", post(stop))
            .route("/v1/sandbox/{id}/resume", post(resume))
            .route("/v1/sandbox/{id}/snapshots", post(take_snapshot))
            .route(
                "/v1/snapshots/{sid}",
                get(get_snapshot).delete(delete_snapshot),
            )
            .route("/v1/snapshots/{sid}/restore", post(restore));
    }
    let router = Router::new()
        .merge(api.layer(axum::middleware::from_fn_with_state(shared.clone(), auth)))
        .route("/health", get(health))
        .with_state(shared.clone());
    (router, FakeHandle { shared })
}

/// Test control over a running fake.
#[derive(Clone)]
pub struct FakeHandle {
    shared: Arc<Shared>,
}

impl FakeHandle {
    /// Answers the next exec with `body` (raw SSE bytes, sent in small pieces) instead of
    /// running the command: for streams that break the contract.
    pub fn script_next_exec(&self, body: impl Into<Vec<u8>>) {
        lock(&self.shared.exec_bodies).push(body.into());
    }

    /// Makes starts with stdin answer `400 stdin_unsupported`, as a bridge on Cloudflare's
    /// background processes (which take no stdin) must.
    pub fn refuse_stdin(&self, refuse: bool) {
        *lock(&self.shared.refuse_stdin) = refuse;
    }

    /// How many processes the process routes started.
    pub fn process_count(&self) -> usize {
        lock(&self.shared.processes).len()
    }

    /// How many sandboxes exist.
    pub fn sandbox_count(&self) -> usize {
        lock(&self.shared.sandboxes).len()
    }

    /// How many snapshots exist *(lifecycle extension)*.
    pub fn snapshot_count(&self) -> usize {
        lock(&self.shared.snapshots).len()
    }
}

/// The bridge contract served on a loopback port for adapter `A` (a bridge kind), accepting
/// [`API_KEY`].
pub struct Fake<A> {
    server: FakeServer,
    handle: FakeHandle,
    _adapter: PhantomData<fn() -> A>,
}

impl<A: Adapter<Config = BridgeConfig>> Fake<A> {
    /// Starts the fake with Corral's extensions.
    pub async fn start() -> Self {
        Self::start_with(true).await
    }

    /// Starts the fake with Cloudflare's Worker routes only.
    pub async fn start_plain() -> Self {
        Self::start_with(false).await
    }

    /// Starts the fake with every extension but the lifecycle one (a bridge built before it).
    pub async fn start_without_lifecycle() -> Self {
        Self::start_modes(true, false).await
    }

    async fn start_with(extensions: bool) -> Self {
        Self::start_modes(extensions, extensions).await
    }

    async fn start_modes(extensions: bool, lifecycle: bool) -> Self {
        let (router, handle) = router_with(API_KEY, extensions, lifecycle);
        Self {
            server: FakeServer::start(router).await,
            handle,
            _adapter: PhantomData,
        }
    }

    /// The HTTP server: request log and fault injection.
    pub fn server(&self) -> &FakeServer {
        &self.server
    }

    /// Test control (scripted exec streams, sandbox count).
    pub fn handle(&self) -> &FakeHandle {
        &self.handle
    }

    /// The bridge's base URL.
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// The adapter's configuration with the fake as the operator's bridge.
    pub fn config(&self) -> BridgeConfig {
        BridgeConfig {
            bridge_url: Some(self.base_url()),
            http: HttpConfig::default(),
        }
    }

    /// A call context carrying the key the fake accepts (the bridge comes from the config).
    pub fn context(&self) -> CallContext {
        CallContext::new(
            Some(SecretString::from(API_KEY)),
            ProviderContext::default(),
        )
    }
}

impl<A: Adapter<Config = BridgeConfig>> Fake<A> {
    /// The trap every bridge kind shares: a bridge with Cloudflare's Worker routes only serves
    /// the kind (create, observe, exec), but cannot find a create by its tag, so a lost create
    /// stays unknown (`Unsupported`) instead of being retried blindly. Panics on a breach.
    pub async fn check_plain_bridge_serves_the_kind_but_cannot_find_lost_creates() {
        let fake = Self::start_plain().await;
        let adapter = A::from_config(fake.config())
            .unwrap_or_else(|e| panic!("{}: cannot build the adapter: {e}", A::PROVIDER));
        let ctx = fake.context();
        let spec = corral_provider::CreateSpec {
            operation_id: corral_domain::OperationId::new(),
            request: CreateSandboxRequest::standard(A::PROVIDER, None, None),
            timeout_seconds: None,
        };
        let expect = |what: &str, e: corral_provider::ProviderError| -> ! {
            panic!("{}: {what} failed: {e}", A::PROVIDER)
        };
        let created = adapter
            .create(&ctx, &spec)
            .await
            .unwrap_or_else(|e| expect("create", e));
        let seen = adapter
            .get(&ctx, &created.native_id)
            .await
            .unwrap_or_else(|e| expect("get", e));
        assert_eq!(seen.status, corral_domain::SandboxStatus::Running);
        let out = adapter
            .exec(
                &ctx,
                &created.native_id,
                &corral_provider::ExecSpec::new("echo hi; exit 4"),
            )
            .await
            .unwrap_or_else(|e| expect("exec", e));
        assert_eq!((out.stdout.as_slice(), out.exit_code), (&b"hi\n"[..], 4));
        match adapter.find_by_operation_id(&ctx, &spec.operation_id).await {
            Err(corral_provider::ProviderError::Unsupported { provider, .. })
                if provider == A::PROVIDER => {}
            other => panic!(
                "{}: a plain bridge's lookup by tag gave {other:?}",
                A::PROVIDER
            ),
        }
    }
}

impl<A: Adapter<Config = BridgeConfig>> Fake<A> {
    /// The caveat of static capabilities: the kind may advertise stop, snapshots or restore,
    /// but a given bridge may lack the lifecycle extension. Through the contract wrapper (as
    /// the server calls it), each operation the kind advertises reaches such a bridge — one
    /// with the other extensions, and one with the Worker's routes only — and answers
    /// `Unsupported` naming the missing extension; a restore there never falls back to a
    /// plain create (which would give an empty sandbox). Panics on a breach.
    pub async fn check_bridge_without_the_lifecycle_extension_answers_unsupported() {
        for fake in [
            Self::start_without_lifecycle().await,
            Self::start_plain().await,
        ] {
            let provider = corral_provider_testkit::harness::contracted::<A>(fake.config());
            let caps = corral_provider::SandboxProvider::capabilities(&provider).clone();
            let ctx = fake.context();
            let fail = |what: &str, e: corral_provider::ProviderError| -> ! {
                panic!("{}: {what} failed: {e}", A::PROVIDER)
            };
            let spec = corral_provider::CreateSpec {
                operation_id: corral_domain::OperationId::new(),
                request: CreateSandboxRequest::standard(A::PROVIDER, None, None),
                timeout_seconds: None,
            };
            let id = corral_provider::SandboxProvider::create(&provider, &ctx, &spec)
                .await
                .unwrap_or_else(|e| fail("create", e))
                .native_id;
            let sandboxes = fake.handle.sandbox_count();
            let unsupported =
                |what: &str, extension: &str, r: Option<corral_provider::ProviderError>| match r {
                    Some(corral_provider::ProviderError::Unsupported { reason, .. })
                        if reason.contains(extension) && reason.contains("bridge-contract") => {}
                    other => panic!(
                        "{}: {what} on a bridge without the lifecycle extension gave {other:?}",
                        A::PROVIDER
                    ),
                };
            use corral_provider::SandboxProvider as _;
            if caps.supports_explicit_stop {
                unsupported(
                    "stop",
                    "stop-and-resume",
                    provider.stop(&ctx, &id).await.err(),
                );
                unsupported(
                    "resume",
                    "stop-and-resume",
                    provider.resume(&ctx, &id).await.err(),
                );
            }
            if caps.supports_snapshots {
                let snap = corral_provider::SnapshotSpec {
                    snapshot_id: corral_domain::SnapshotId::new(A::PROVIDER),
                    name: None,
                };
                unsupported(
                    "snapshot",
                    "snapshots",
                    provider.snapshot(&ctx, &id, &snap).await.err(),
                );
                unsupported(
                    "get_snapshot",
                    "snapshots",
                    provider.get_snapshot(&ctx, "snap-1").await.err(),
                );
                unsupported(
                    "delete_snapshot",
                    "snapshots",
                    provider.delete_snapshot(&ctx, "snap-1").await.err(),
                );
            }
            if caps.supports_restore {
                let mut again = spec.clone();
                again.operation_id = corral_domain::OperationId::new();
                unsupported(
                    "restore",
                    "snapshots",
                    provider.restore(&ctx, &again, "snap-1").await.err(),
                );
                assert_eq!(
                    fake.handle.sandbox_count(),
                    sandboxes,
                    "{}: a restore on a bridge without the extension created a sandbox",
                    A::PROVIDER
                );
            }
            // The sandbox itself still works.
            let out = provider
                .exec(&ctx, &id, &corral_provider::ExecSpec::new("echo ok"))
                .await
                .unwrap_or_else(|e| fail("exec", e));
            assert_eq!(out.stdout, b"ok\n", "{}", A::PROVIDER);
        }
    }
}

/// Reads a command through `adapter` from byte 0 to its exit: stdout and the exit code.
async fn run_to_end<A: Adapter<Config = BridgeConfig>>(
    adapter: &A,
    ctx: &CallContext,
    id: &str,
    handle: &str,
) -> (Vec<u8>, Option<i32>) {
    use futures::StreamExt as _;
    let mut stdout = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let from = corral_provider::OutputOffsets {
            stdout: stdout.len() as u64,
            stderr: 0,
        };
        let mut events = adapter
            .attach_command(ctx, id, handle, from)
            .await
            .unwrap_or_else(|e| panic!("{}: attach failed: {e}", A::PROVIDER));
        while let Some(event) = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("{}: the command did not end", A::PROVIDER))
        {
            match event.unwrap_or_else(|e| panic!("{}: the stream failed: {e}", A::PROVIDER)) {
                corral_provider::CommandEvent::Output {
                    stream: OutputStream::Stdout,
                    offset,
                    data,
                } => {
                    let at = usize::try_from(offset.unwrap_or(stdout.len() as u64))
                        .unwrap_or(usize::MAX);
                    let skip = stdout.len().saturating_sub(at).min(data.len());
                    stdout.extend_from_slice(&data[skip..]);
                }
                corral_provider::CommandEvent::Output { .. } => {}
                corral_provider::CommandEvent::Exit { exit_code } => return (stdout, exit_code),
            }
        }
    }
}

impl<A: Adapter<Config = BridgeConfig>> Fake<A> {
    /// A bridge with Cloudflare's Worker routes only runs commands through the exec wrapper
    /// (the process routes answer 404 there): started, fed, followed to the exit, found.
    /// Panics on a breach.
    pub async fn check_plain_bridge_runs_commands_through_the_exec_wrapper() {
        let fake = Self::start_plain().await;
        let adapter = A::from_config(fake.config())
            .unwrap_or_else(|e| panic!("{}: cannot build the adapter: {e}", A::PROVIDER));
        let ctx = fake.context();
        Self::check_commands_through_the_exec_wrapper(&fake, &adapter, &ctx).await;
    }

    /// A bridge whose processes take no stdin (`stdin_unsupported`) runs a command with stdin
    /// through the exec wrapper, and one without through its process routes. Panics on a
    /// breach.
    pub async fn check_stdin_refused_by_the_bridge_goes_through_the_exec_wrapper() {
        let fake = Self::start().await;
        fake.handle.refuse_stdin(true);
        let adapter = A::from_config(fake.config())
            .unwrap_or_else(|e| panic!("{}: cannot build the adapter: {e}", A::PROVIDER));
        let ctx = fake.context();
        Self::check_commands_through_the_exec_wrapper(&fake, &adapter, &ctx).await;
        // Only the command without stdin became a bridge process.
        assert_eq!(fake.handle.process_count(), 1, "{}", A::PROVIDER);
    }

    async fn check_commands_through_the_exec_wrapper(fake: &Self, adapter: &A, ctx: &CallContext) {
        let fail = |what: &str, e: corral_provider::ProviderError| -> ! {
            panic!("{}: {what} failed: {e}", A::PROVIDER)
        };
        let spec = corral_provider::CreateSpec {
            operation_id: corral_domain::OperationId::new(),
            request: CreateSandboxRequest::standard(A::PROVIDER, None, None),
            timeout_seconds: None,
        };
        let id = adapter
            .create(ctx, &spec)
            .await
            .unwrap_or_else(|e| fail("create", e))
            .native_id;
        let command = corral_provider::CommandSpec {
            command_id: corral_domain::CommandId::new(),
            command: "read line; echo got $line; exit 3".into(),
            cwd: None,
            env: BTreeMap::new(),
            stdin: true,
            timeout: Duration::from_secs(60),
        };
        let handle = adapter
            .start_command(ctx, &id, &command)
            .await
            .unwrap_or_else(|e| fail("start_command", e))
            .handle;
        assert_eq!(
            handle,
            command.command_id.to_string(),
            "{}: not the exec wrapper's handle",
            A::PROVIDER
        );
        let accepted = adapter
            .write_stdin(ctx, &id, &handle, 0, b"hi\n")
            .await
            .unwrap_or_else(|e| fail("write_stdin", e));
        assert_eq!(accepted, 3, "{}", A::PROVIDER);
        adapter
            .close_stdin(ctx, &id, &handle)
            .await
            .unwrap_or_else(|e| fail("close_stdin", e));
        let (stdout, exit) = run_to_end(adapter, ctx, &id, &handle).await;
        assert_eq!((stdout.as_slice(), exit), (&b"got hi\n"[..], Some(3)));
        let found = adapter
            .find_command(ctx, &id, &command.command_id)
            .await
            .unwrap_or_else(|e| fail("find_command", e));
        assert_eq!(found.as_deref(), Some(handle.as_str()), "{}", A::PROVIDER);
        // Without stdin, a bridge with the process routes runs the command natively.
        let mut plain = command.clone();
        plain.command_id = corral_domain::CommandId::new();
        plain.stdin = false;
        plain.command = "echo native".into();
        let handle = adapter
            .start_command(ctx, &id, &plain)
            .await
            .unwrap_or_else(|e| fail("start_command", e))
            .handle;
        let (stdout, exit) = run_to_end(adapter, ctx, &id, &handle).await;
        assert_eq!((stdout.as_slice(), exit), (&b"native\n"[..], Some(0)));
        let native = handle.starts_with("process:");
        assert_eq!(
            native,
            fake.handle.shared.extensions,
            "{}: handle {handle}",
            A::PROVIDER
        );
    }
}

#[async_trait::async_trait]
impl<A: Adapter<Config = BridgeConfig>> Harness for Fake<A> {
    type Adapter = A;

    async fn start() -> Self {
        Fake::start().await
    }

    fn server(&self) -> &FakeServer {
        &self.server
    }

    fn config_at(&self, base_url: &str, http: HttpConfig) -> BridgeConfig {
        BridgeConfig {
            bridge_url: Some(base_url.to_owned()),
            http,
        }
    }

    fn context(&self) -> CallContext {
        Fake::context(self)
    }

    fn create_call() -> (Method, &'static str) {
        (Method::POST, "/v1/sandbox")
    }

    fn get_call() -> (Method, &'static str) {
        (Method::GET, "/v1/sandbox/")
    }

    fn unknown_id() -> &'static str {
        "unknownsandbox"
    }

    /// `CORRAL_LIVE_<ID>_BRIDGE_URL` and `CORRAL_LIVE_<ID>_BRIDGE_KEY` (a deployed bridge).
    fn live() -> Result<(BridgeConfig, CallContext, CreateSandboxRequest), String> {
        let id = A::PROVIDER.to_string().to_ascii_uppercase();
        let url_var = format!("CORRAL_LIVE_{id}_BRIDGE_URL");
        let key_var = format!("CORRAL_LIVE_{id}_BRIDGE_KEY");
        let (Ok(url), Ok(key)) = (std::env::var(&url_var), std::env::var(&key_var)) else {
            return Err(format!("{url_var} and {key_var}"));
        };
        let config = BridgeConfig {
            bridge_url: Some(url),
            http: HttpConfig::default(),
        };
        let ctx = CallContext::new(Some(SecretString::from(key)), ProviderContext::default());
        Ok((
            config,
            ctx,
            CreateSandboxRequest::standard(A::PROVIDER, None, None),
        ))
    }
}
