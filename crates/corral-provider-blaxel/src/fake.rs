//! Blaxel's control plane and sandbox API on loopback, for tests (feature `fake`).
//!
//! Built from the sandbox API's published description (`sandbox-api/docs/openapi.yml`) and the
//! control plane's types as the SDK has them. It checks what Blaxel checks: the bearer key
//! (`401 {"code":401,"error":"Unauthorized"}`), the workspace header on every call (and the
//! workspace in the sandbox API's path), field types and the fields each body may carry
//! (`400 {"error": …}` otherwise), unique lower-case names (409). It answers with Blaxel's
//! shapes: a sandbox is `DEPLOYING` until it is first observed, then `DEPLOYED`/`RUNNING`;
//! [`Fake::standby`] puts one in `STANDBY`, which control-plane reads leave alone and any
//! sandbox-API call ends (as on Blaxel, where the data plane resumes a sandbox).
//!
//! Processes run in the background on the host (`corral_provider_testkit::background`), in a
//! per-sandbox temporary directory, and the process routes answer as the sandbox API does
//! (`sandbox-api/src/handler/process*.go`): `POST /process` answers at once unless
//! `waitForCompletion`, refuses a name only while a process of that name runs, and its
//! `timeout` bounds the wait (`422 process timed out after N seconds`) without killing; a wait
//! that outlasts the edge ([`Fake::set_edge_wait`], 60 s by default) is answered `504` while
//! the process goes on. A tailer reads each process's output every 50 ms in chunks of up to
//! 4 KiB, appends them to a combined log (every line prefixed `stdout:`/`stderr:`) and sends
//! them to the log streams as `prefix + chunk`; `GET /process/{identifier}/logs/stream`
//! replays the combined log a line at a time (its tail after the truncation marker past
//! [`Fake::set_max_log_bytes`]), then follows, writes `[keepalive]\n` while the process runs
//! ([`Fake::set_keepalive`]) and closes once the process ended and its output was read. A stop
//! (`DELETE /process/{identifier}`, SIGTERM) or kill (`…/kill`, SIGKILL) of the group writes
//! Blaxel's notice to the followers and sets `stopped`/`killed` at once; the exit code of a
//! process that died of a signal is `-1` (Go's `ExitCode()`), and `completedAt` is set once it
//! was reaped. Identifiers are pids or names (a name finds its most recent process). Files live
//! on the host below the sandbox's directory (paths elsewhere are refused); `PUT /filesystem`
//! creates missing parents, as Blaxel's does (`os.MkdirAll`), and so does a completed multipart
//! upload. Snapshots (`POST/GET /v0/sandboxes/{name}/snapshots`, `DELETE …/{id}`) copy the
//! sandbox's directory when made, are `pending` until first listed and go with their sandbox;
//! `POST /v0/sandboxes/{name}/fork` makes a new sandbox from a ready snapshot's copy (409 if the
//! target exists), carrying the source's metadata and labels.
// Helpers hand their refusal back as the handler's response itself.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use corral_domain::{CreateSandboxRequest, OutputStream, Provider, ProviderContext};
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::background::{Process, Processes, SpawnSpec};
use corral_provider_testkit::fake::{FakeServer, parse_multipart};
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::plumbing::{self, copy_tree, locked};
use serde_json::{Value, json};

/// The API key the fake accepts.
pub const API_KEY: &str = "bl_fake_key_0123";
/// The workspace the fake serves.
pub const WORKSPACE: &str = "corral-fake-ws";

struct FakeSandbox {
    dir: tempfile::TempDir,
    body: Value,
}

/// A snapshot: its JSON and a copy of its sandbox's directory when it was taken.
struct FakeSnapshot {
    body: Value,
    dir: tempfile::TempDir,
}

struct Upload {
    path: PathBuf,
    parts: BTreeMap<u64, (String, Bytes)>,
}

struct Shared {
    api_key: String,
    next: AtomicU64,
    edge_wait: Mutex<Duration>,
    keepalive: Mutex<Duration>,
    max_log_bytes: Mutex<usize>,
    sandboxes: Mutex<HashMap<String, FakeSandbox>>,
    /// Each sandbox's processes, in start order.
    procs: Mutex<HashMap<String, Vec<Arc<FakeProcess>>>>,
    /// The host processes behind them (killed when the fake is dropped).
    host: Processes,
    uploads: Mutex<HashMap<String, Upload>>,
    /// Each sandbox's snapshots, in creation order (they go with their sandbox).
    snapshots: Mutex<HashMap<String, Vec<FakeSnapshot>>>,
}

type St = State<Arc<Shared>>;

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

fn bad(message: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, message)
}

async fn auth(State(shared): St, headers: HeaderMap, req: Request, next: Next) -> Response {
    let key = plumbing::bearer(&headers);
    if key != Some(shared.api_key.as_str()) {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({ "code": 401, "error": "Unauthorized" })),
        )
            .into_response();
    }
    match headers
        .get("x-blaxel-workspace")
        .and_then(|v| v.to_str().ok())
    {
        None => bad("missing X-Blaxel-Workspace header"),
        Some(WORKSPACE) => next.run(req).await,
        Some(_) => error(StatusCode::NOT_FOUND, "workspace not found"),
    }
}

/// Whether `body` (an object) has only `allowed` keys; the offending key otherwise.
fn only(body: &Value, allowed: &[&str]) -> Result<(), String> {
    let o = body.as_object().ok_or("expected a JSON object")?;
    plumbing::unknown_field(o, allowed).map_or(Ok(()), |k| Err(format!("unknown field `{k}`")))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn check_create(body: &Value) -> Result<(), String> {
    only(body, &["metadata", "spec"])?;
    let metadata = &body["metadata"];
    only(metadata, &["name", "displayName", "labels", "externalId"])?;
    match metadata["name"].as_str() {
        Some(n) if valid_name(n) => {}
        _ => return Err("metadata.name must be lower-case letters, digits and hyphens".into()),
    }
    match &metadata["labels"] {
        Value::Null => {}
        Value::Object(l) if l.values().all(Value::is_string) => {}
        _ => return Err("metadata.labels must map strings to strings".into()),
    }
    let spec = &body["spec"];
    if spec.is_null() {
        return Ok(());
    }
    only(
        spec,
        &[
            "region",
            "runtime",
            "lifecycle",
            "volumes",
            "network",
            "enabled",
        ],
    )?;
    if !(spec["region"].is_null() || spec["region"].is_string()) {
        return Err("spec.region must be a string".into());
    }
    let runtime = &spec["runtime"];
    if runtime.is_null() {
        return Ok(());
    }
    only(
        runtime,
        &[
            "image",
            "memory",
            "ports",
            "envs",
            "ttl",
            "expires",
            "generation",
        ],
    )?;
    if !(runtime["image"].is_null() || runtime["image"].is_string()) {
        return Err("spec.runtime.image must be a string".into());
    }
    if !(runtime["memory"].is_null() || runtime["memory"].is_u64()) {
        return Err("spec.runtime.memory must be an integer".into());
    }
    Ok(())
}

async fn create_sandbox(State(shared): St, body: Bytes) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid JSON body");
    };
    if let Err(e) = check_create(&body) {
        return bad(e);
    }
    let name = body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut sandboxes = locked(&shared.sandboxes);
    if sandboxes.contains_key(&name) {
        return error(
            StatusCode::CONFLICT,
            format!("sandbox {name} already exists"),
        );
    }
    let Ok(dir) = tempfile::tempdir() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no temp dir");
    };
    let n = shared.next.fetch_add(1, Ordering::Relaxed);
    let sandbox = json!({
        "metadata": {
            "name": name,
            "labels": body["metadata"]["labels"],
            "workspace": WORKSPACE,
            "url": format!("https://sbx-{name}-{n}.us-pdx-1.bl.run"),
        },
        "spec": {
            "region": body["spec"]["region"].as_str().unwrap_or("us-pdx-1"),
            "runtime": {
                "image": body["spec"]["runtime"]["image"].as_str().unwrap_or("blaxel/base-image:latest"),
                "memory": body["spec"]["runtime"]["memory"].as_u64().unwrap_or(4096),
            },
        },
        "status": "DEPLOYING",
        "events": [],
    });
    sandboxes.insert(
        name,
        FakeSandbox {
            dir,
            body: sandbox.clone(),
        },
    );
    axum::Json(sandbox).into_response()
}

async fn get_sandbox(State(shared): St, Path(name): Path<String>) -> Response {
    let mut sandboxes = locked(&shared.sandboxes);
    let Some(sb) = sandboxes.get_mut(&name) else {
        return error(StatusCode::NOT_FOUND, format!("sandbox {name} not found"));
    };
    let seen = sb.body.clone();
    // Deploying takes one observation; a control-plane read never wakes a standby sandbox.
    if sb.body["status"] == "DEPLOYING" {
        sb.body["status"] = json!("DEPLOYED");
        sb.body["state"] = json!("RUNNING");
    }
    axum::Json(seen).into_response()
}

async fn delete_sandbox(State(shared): St, Path(name): Path<String>) -> Response {
    // The sandbox's processes go with it.
    for p in locked(&shared.procs).remove(&name).unwrap_or_default() {
        shared.host.remove(p.bg.pid());
    }
    locked(&shared.snapshots).remove(&name);
    match locked(&shared.sandboxes).remove(&name) {
        Some(mut sb) => {
            sb.body["status"] = json!("DELETING");
            axum::Json(sb.body).into_response()
        }
        None => error(StatusCode::NOT_FOUND, format!("sandbox {name} not found")),
    }
}

/// `POST /v0/sandboxes/{name}/snapshots {name?}`: the sandbox's directory is copied now (what
/// is written later is not in it); the snapshot is `pending` until first listed, then
/// `ready`.
async fn create_snapshot(State(shared): St, Path(name): Path<String>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid JSON body");
    };
    if let Err(e) = only(&req, &["name"]) {
        return bad(e);
    }
    if req.get("name").is_some_and(|n| !n.is_string()) {
        return bad("`name` must be a string");
    }
    let dir = match locked(&shared.sandboxes).get(&name) {
        Some(sb) => sb.dir.path().to_owned(),
        None => return error(StatusCode::NOT_FOUND, format!("sandbox {name} not found")),
    };
    let Ok(copy) = tempfile::tempdir() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no temp dir");
    };
    if let Err(e) = copy_tree(&dir, copy.path()) {
        return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    }
    let n = shared.next.fetch_add(1, Ordering::Relaxed);
    let mut snapshot = json!({
        "id": format!("snap-{n:06}"), "sandboxName": name, "status": "pending",
        "workspace": WORKSPACE, "createdAt": "2026-11-23T20:00:00Z",
    });
    if let Some(given) = req.get("name") {
        snapshot["name"] = given.clone();
    }
    locked(&shared.snapshots)
        .entry(name)
        .or_default()
        .push(FakeSnapshot {
            body: snapshot.clone(),
            dir: copy,
        });
    axum::Json(snapshot).into_response()
}

async fn list_snapshots(State(shared): St, Path(name): Path<String>) -> Response {
    if !locked(&shared.sandboxes).contains_key(&name) {
        return error(StatusCode::NOT_FOUND, format!("sandbox {name} not found"));
    }
    let mut all = locked(&shared.snapshots);
    let list = all.entry(name).or_default();
    let seen: Vec<Value> = list.iter().map(|s| s.body.clone()).collect();
    // Making one takes an observation.
    for s in list.iter_mut() {
        s.body["status"] = json!("ready");
    }
    axum::Json(seen).into_response()
}

async fn delete_snapshot(State(shared): St, Path((name, id)): Path<(String, String)>) -> Response {
    let mut all = locked(&shared.snapshots);
    let list = all.entry(name).or_default();
    match list.iter().position(|s| s.body["id"] == json!(id)) {
        Some(at) => {
            list.remove(at);
            StatusCode::NO_CONTENT.into_response()
        }
        None => error(StatusCode::NOT_FOUND, format!("snapshot {id} not found")),
    }
}

/// `POST /v0/sandboxes/{name}/fork {targetName, targetType, snapshotId, …}`: a new sandbox,
/// `DEPLOYING`, whose directory starts as a copy of the (ready) snapshot's. It copies the
/// source's metadata, labels included (whether Blaxel does is not documented: the fake takes
/// the harder case). Forks into an application are not modelled (400).
async fn fork_sandbox(State(shared): St, Path(source): Path<String>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid JSON body");
    };
    if let Err(e) = only(
        &req,
        &[
            "customDomain",
            "port",
            "prefix",
            "snapshotId",
            "targetName",
            "targetType",
            "traffic",
        ],
    ) {
        return bad(e);
    }
    let Some(target) = req["targetName"].as_str().filter(|t| valid_name(t)) else {
        return bad("`targetName` must be a valid sandbox name");
    };
    if req["targetType"] != "sandbox" {
        return bad("the fake forks into sandboxes only (`targetType: \"sandbox\"`)");
    }
    let Some(snapshot_id) = req["snapshotId"].as_str() else {
        return bad("the fake forks from a snapshot only (`snapshotId`)");
    };
    let mut sandboxes = locked(&shared.sandboxes);
    let Some(src) = sandboxes.get(&source) else {
        return error(StatusCode::NOT_FOUND, format!("sandbox {source} not found"));
    };
    if sandboxes.contains_key(target) {
        return error(
            StatusCode::CONFLICT,
            format!("sandbox {target} already exists"),
        );
    }
    let mut body = src.body.clone();
    let Ok(dir) = tempfile::tempdir() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no temp dir");
    };
    {
        let all = locked(&shared.snapshots);
        let Some(snap) = all
            .get(&source)
            .and_then(|l| l.iter().find(|s| s.body["id"] == json!(snapshot_id)))
        else {
            return error(
                StatusCode::NOT_FOUND,
                format!("snapshot {snapshot_id} not found"),
            );
        };
        if snap.body["status"] != "ready" {
            return bad(format!("snapshot {snapshot_id} is not ready"));
        }
        if let Err(e) = copy_tree(snap.dir.path(), dir.path()) {
            return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        }
    }
    let n = shared.next.fetch_add(1, Ordering::Relaxed);
    body["metadata"]["name"] = json!(target);
    body["metadata"]["url"] = json!(format!("https://sbx-{target}-{n}.us-pdx-1.bl.run"));
    body["status"] = json!("DEPLOYING");
    if let Some(o) = body.as_object_mut() {
        o.remove("state");
    }
    sandboxes.insert(target.to_owned(), FakeSandbox { dir, body });
    axum::Json(json!({ "name": target, "snapshotId": snapshot_id, "type": "sandbox" }))
        .into_response()
}

/// The sandbox API's view of sandbox `name` in workspace `ws`: its directory, waking it.
fn sandbox_dir(shared: &Shared, ws: &str, name: &str) -> Result<PathBuf, Response> {
    if ws != WORKSPACE {
        return Err(error(StatusCode::NOT_FOUND, "workspace not found"));
    }
    let mut sandboxes = locked(&shared.sandboxes);
    let Some(sb) = sandboxes.get_mut(name) else {
        return Err(error(
            StatusCode::NOT_FOUND,
            format!("sandbox {name} not found"),
        ));
    };
    if sb.body["status"] != "DEPLOYED" {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "sandbox is not deployed yet",
        ));
    }
    // Any sandbox-API call resumes a sandbox from standby.
    sb.body["state"] = json!("RUNNING");
    Ok(sb.dir.path().to_owned())
}

/// `/`-rooted `rest` if it lies below `root` (no `..`), else a refusal.
fn host_path(root: &FsPath, rest: &str) -> Result<PathBuf, Response> {
    let path = PathBuf::from(format!("/{}", rest.trim_start_matches('/')));
    let escapes = path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir));
    if escapes || !path.starts_with(root) {
        return Err(error(StatusCode::FORBIDDEN, "permission denied"));
    }
    Ok(path)
}

fn check_process(body: &Value) -> Result<(), String> {
    only(
        body,
        &[
            "command",
            "env",
            "keepAlive",
            "maxRestarts",
            "name",
            "restartOnFailure",
            "timeout",
            "waitForCompletion",
            "waitForPorts",
            "workingDir",
        ],
    )?;
    if !body["command"].is_string() {
        return Err("command is required and must be a string".into());
    }
    for key in ["name", "workingDir"] {
        if !(body[key].is_null() || body[key].is_string()) {
            return Err(format!("{key} must be a string"));
        }
    }
    for key in ["waitForCompletion", "keepAlive"] {
        if !(body[key].is_null() || body[key].is_boolean()) {
            return Err(format!("{key} must be a boolean"));
        }
    }
    if !(body["timeout"].is_null() || body["timeout"].is_u64()) {
        return Err("timeout must be an integer".into());
    }
    match &body["env"] {
        Value::Null => Ok(()),
        Value::Object(e) if e.values().all(Value::is_string) => Ok(()),
        _ => Err("env must map strings to strings".into()),
    }
}

/// How often the sandbox API reads a process's output files (`tailLogFiles`).
const TAIL_EVERY: Duration = Duration::from_millis(50);
/// Bytes one read of one output file takes at most (`readAndBroadcast`'s buffer).
const TAIL_CHUNK: usize = 4096;
/// How much of each stream `GET /process[/{identifier}]` inlines (`MaxInlinedLogBytes`).
const INLINED_BYTES: usize = 64 * 1024;
/// How much of each stream `GET /process/{identifier}/logs` answers (`maxLogsResponseBytes`).
const LOGS_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
/// What a tail of a longer log starts with (`truncationMarker`).
const TRUNCATION: &str = "[... truncated, see the process log file for the full output ...]\n";
/// What a stop and a kill write to every follower of the process's log stream.
const STOPPING: &[u8] = b"\n[Process is being gracefully terminated]\n";
const KILLING: &[u8] = b"\n[Process is being forcefully killed]\n";
/// `completedAt` of an ended process (the fake's clock is not Blaxel's).
const COMPLETED_AT: &str = "Mon, 23 Nov 2026 20:00:01 GMT";

/// What the sandbox API holds about one process besides the process itself.
struct ProcState {
    /// `running`, `completed`, `failed`, `stopped` or `killed`.
    status: &'static str,
    /// Go's `ExitCode()` once it ended: `-1` after death by a signal; 0 while it runs.
    exit_code: i64,
    completed_at: Option<&'static str>,
    /// The combined log file: every line of every chunk prefixed with its stream.
    combined: Vec<u8>,
    /// Bytes of stdout and stderr the tailer has read.
    read: [u64; 2],
    /// Followers of the log stream, sent each chunk as it is read.
    writers: Vec<tokio::sync::mpsc::UnboundedSender<Bytes>>,
}

struct FakeProcess {
    bg: Process,
    name: String,
    command: String,
    working_dir: String,
    /// Start order: a name finds its most recent process.
    seq: u64,
    state: Mutex<ProcState>,
    /// Set once the process ended and its output was all read (Blaxel's `Done` and
    /// `TailDone`): log streams close then.
    done: tokio::sync::watch::Sender<bool>,
}

impl FakeProcess {
    fn state(&self) -> MutexGuard<'_, ProcState> {
        locked(&self.state)
    }

    fn is_done(&self) -> bool {
        *self.done.borrow()
    }

    /// The `ProcessResponse`, with at most `inline` bytes of each stream.
    fn json(&self, inline: usize) -> Value {
        let stdout = text_tail(&self.bg.read(OutputStream::Stdout, 0), inline);
        let stderr = text_tail(&self.bg.read(OutputStream::Stderr, 0), inline);
        let st = self.state();
        json!({
            "pid": self.bg.pid().to_string(),
            "name": self.name,
            "command": self.command,
            "status": st.status,
            "exitCode": st.exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "logs": format!("{stdout}{stderr}"),
            "startedAt": "Mon, 23 Nov 2026 20:00:00 GMT",
            "completedAt": st.completed_at.unwrap_or(""),
            "workingDir": self.working_dir,
            "keepAlive": false,
            "restartOnFailure": false,
            "maxRestarts": 0,
            "restartCount": 0,
        })
    }
}

/// The last `max` bytes of `bytes` as JSON text (not UTF-8 → U+FFFD, as Go's encoder does),
/// after the truncation marker when cut.
fn text_tail(bytes: &[u8], max: usize) -> String {
    if bytes.len() > max {
        format!(
            "{TRUNCATION}{}",
            String::from_utf8_lossy(&bytes[bytes.len() - max..])
        )
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

/// Reads the process's output as the sandbox API's tailer does: every 50 ms, up to 4 KiB of
/// stdout then of stderr, each chunk appended to the combined log line by line under its
/// prefix and sent to the followers as `prefix + chunk`; once the process ended and both files
/// are drained, the final status, and the followers are let go.
async fn tail(p: Arc<FakeProcess>) {
    loop {
        // Read before the output: once the exit is known, every byte is in.
        let exited = p.bg.exit();
        let mut progressed = false;
        for (i, stream, prefix) in [
            (0, OutputStream::Stdout, &b"stdout:"[..]),
            (1, OutputStream::Stderr, &b"stderr:"[..]),
        ] {
            let at = p.state().read[i];
            let mut data = p.bg.read(stream, at);
            if data.is_empty() {
                continue;
            }
            data.truncate(TAIL_CHUNK);
            progressed = true;
            let mut st = p.state();
            st.read[i] += data.len() as u64;
            for line in data.split_inclusive(|b| *b == b'\n') {
                st.combined.extend_from_slice(prefix);
                st.combined.extend_from_slice(line);
            }
            let mut wire = prefix.to_vec();
            wire.extend_from_slice(&data);
            let wire = Bytes::from(wire);
            st.writers.retain(|w| w.send(wire.clone()).is_ok());
        }
        match exited {
            Some(exit) if !progressed => {
                let mut st = p.state();
                let signalled = matches!(st.status, "stopped" | "killed");
                match exit.status {
                    Some(0) => st.status = "completed",
                    _ if signalled => {}
                    _ => st.status = "failed",
                }
                st.exit_code = exit.status.map_or(-1, i64::from);
                st.completed_at = Some(COMPLETED_AT);
                st.writers.clear();
                drop(st);
                p.done.send_replace(true);
                return;
            }
            // Drains without pausing once the process ended, as Blaxel's tailer does.
            Some(_) => {}
            None => tokio::time::sleep(TAIL_EVERY).await,
        }
    }
}

/// The process `identifier` (a pid, or a name: its most recent process) of sandbox `sandbox`.
fn find_process(shared: &Shared, sandbox: &str, identifier: &str) -> Option<Arc<FakeProcess>> {
    let procs = locked(&shared.procs);
    let list = procs.get(sandbox)?;
    if identifier.parse::<u32>().is_ok() {
        list.iter()
            .find(|p| p.bg.pid().to_string() == identifier)
            .cloned()
    } else {
        list.iter()
            .filter(|p| p.name == identifier)
            .max_by_key(|p| p.seq)
            .cloned()
    }
}

fn process_not_found(identifier: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("process with Identifier {identifier} not found"),
    )
}

async fn run_process(
    State(shared): St,
    Path((ws, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let dir = match sandbox_dir(&shared, &ws, &name) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid JSON body");
    };
    if let Err(e) = check_process(&req) {
        return bad(e);
    }
    let command = req["command"].as_str().unwrap_or_default().to_owned();
    let given = req["name"].as_str().filter(|n| !n.is_empty());
    if let Some(n) = given
        && find_process(&shared, &name, n).is_some_and(|p| p.state().status == "running")
    {
        return bad(format!(
            "process with name '{n}' already exists and is running"
        ));
    }
    let cwd = req["workingDir"]
        .as_str()
        .filter(|w| !w.is_empty())
        .map_or_else(|| dir.clone(), PathBuf::from);
    if !cwd.is_dir() {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "failed to start process: could not execute command '{command}' because folder '{}' does not exist",
                cwd.display()
            ),
        );
    }
    let env: BTreeMap<String, String> = req["env"]
        .as_object()
        .map(|e| {
            e.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let bg = match shared
        .host
        .spawn(SpawnSpec::new(command.clone(), &cwd).with_env(env))
    {
        Ok(bg) => bg,
        Err(e) => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("failed to start process: {e}"),
            );
        }
    };
    let seq = shared.next.fetch_add(1, Ordering::Relaxed);
    let process = Arc::new(FakeProcess {
        name: given.map_or_else(|| format!("{seq:08x}"), str::to_owned),
        command,
        working_dir: req["workingDir"].as_str().unwrap_or_default().to_owned(),
        bg,
        seq,
        state: Mutex::new(ProcState {
            status: "running",
            exit_code: 0,
            completed_at: None,
            combined: Vec::new(),
            read: [0, 0],
            writers: Vec::new(),
        }),
        done: tokio::sync::watch::Sender::new(false),
    });
    locked(&shared.procs)
        .entry(name)
        .or_default()
        .push(process.clone());
    tokio::spawn(tail(process.clone()));
    if req["waitForCompletion"].as_bool() != Some(true) {
        return axum::Json(process.json(INLINED_BYTES)).into_response();
    }
    let edge_wait = *locked(&shared.edge_wait);
    // `timeout` bounds the wait only (0 or absent: none); the process is not killed.
    let timeout = req["timeout"]
        .as_u64()
        .filter(|t| *t > 0)
        .map(Duration::from_secs);
    let wait = timeout.map_or(edge_wait, |t| t.min(edge_wait));
    let mut done = process.done.subscribe();
    if tokio::time::timeout(wait, done.wait_for(|d| *d))
        .await
        .is_err()
    {
        return match timeout {
            Some(t) if t <= edge_wait => error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("process timed out after {} seconds", t.as_secs()),
            ),
            // The edge stops waiting; the process goes on.
            _ => error(StatusCode::GATEWAY_TIMEOUT, "upstream request timeout"),
        };
    }
    axum::Json(process.json(LOGS_RESPONSE_BYTES)).into_response()
}

async fn list_processes(State(shared): St, Path((ws, name)): Path<(String, String)>) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    let list: Vec<Value> = locked(&shared.procs)
        .get(&name)
        .map(|l| l.iter().map(|p| p.json(INLINED_BYTES)).collect())
        .unwrap_or_default();
    axum::Json(list).into_response()
}

async fn get_process(
    State(shared): St,
    Path((ws, name, process)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    match find_process(&shared, &name, &process) {
        Some(p) => axum::Json(p.json(INLINED_BYTES)).into_response(),
        None => process_not_found(&process),
    }
}

async fn process_logs(
    State(shared): St,
    Path((ws, name, process)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    let Some(p) = find_process(&shared, &name, &process) else {
        return process_not_found(&process);
    };
    let stdout = text_tail(&p.bg.read(OutputStream::Stdout, 0), LOGS_RESPONSE_BYTES);
    let stderr = text_tail(&p.bg.read(OutputStream::Stderr, 0), LOGS_RESPONSE_BYTES);
    axum::Json(json!({ "logs": format!("{stdout}{stderr}"), "stdout": stdout, "stderr": stderr }))
        .into_response()
}

/// The backlog as the log stream replays it: the combined log (its last `max` bytes after the
/// truncation marker when longer) a line at a time, each line with its prefix (a line without
/// one as stdout) and a newline (also the last line, which may have had none).
fn replay(combined: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let body = if combined.len() > max {
        out.extend_from_slice(b"stdout:");
        out.extend_from_slice(TRUNCATION.as_bytes());
        &combined[combined.len() - max..]
    } else {
        combined
    };
    for line in body.split(|b| *b == b'\n') {
        let line = &line[line.iter().take_while(|b| **b == 0).count()..];
        if line.starts_with(b"stdout:") || line.starts_with(b"stderr:") {
            out.extend_from_slice(line);
        } else if !line.is_empty() {
            out.extend_from_slice(b"stdout:");
            out.extend_from_slice(line);
        } else {
            continue;
        }
        out.push(b'\n');
    }
    out
}

/// Where a log stream's body is.
struct LogBody {
    process: Arc<FakeProcess>,
    backlog: Option<Bytes>,
    live: Option<tokio::sync::mpsc::UnboundedReceiver<Bytes>>,
    keepalive: Duration,
    sent: bool,
    finished: bool,
}

async fn next_piece(mut b: LogBody) -> Option<(Result<Bytes, std::io::Error>, LogBody)> {
    if let Some(backlog) = b.backlog.take().filter(|x| !x.is_empty()) {
        b.sent = true;
        return Some((Ok(backlog), b));
    }
    if let Some(live) = b.live.as_mut() {
        match tokio::time::timeout(b.keepalive, live.recv()).await {
            Ok(Some(piece)) => {
                b.sent = true;
                return Some((Ok(piece), b));
            }
            Ok(None) => b.live = None,
            Err(_) => {
                // Keep-alives go out while the process is `running` (not once stopped).
                if b.process.state().status == "running" {
                    b.sent = true;
                    return Some((Ok(Bytes::from_static(b"[keepalive]\n")), b));
                }
                return Some((Ok(Bytes::new()), b));
            }
        }
    }
    if b.finished {
        return None;
    }
    b.finished = true;
    // A process too quick for anything to be streamed: the log file as it is.
    let combined = b.process.state().combined.clone();
    if !b.sent && !combined.is_empty() {
        return Some((Ok(Bytes::from(combined)), b));
    }
    None
}

async fn stream_logs(
    State(shared): St,
    Path((ws, name, process)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    // Blaxel itself flushes a 200 before looking the process up and then writes the error as
    // the body; the description (and the fake) answer 404.
    let Some(p) = find_process(&shared, &name, &process) else {
        return process_not_found(&process);
    };
    let max_log = *locked(&shared.max_log_bytes);
    let (backlog, live) = {
        let mut st = p.state();
        let backlog = replay(&st.combined, max_log);
        let live = if p.is_done() {
            None
        } else {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            st.writers.push(tx);
            Some(rx)
        };
        (backlog, live)
    };
    let body = LogBody {
        process: p,
        backlog: Some(Bytes::from(backlog)),
        live,
        keepalive: *locked(&shared.keepalive),
        sent: false,
        finished: false,
    };
    Response::builder()
        .header("content-type", "text/plain; charset=utf-8")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(futures::stream::unfold(body, next_piece)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// `DELETE /process/{identifier}` (SIGTERM, "stop") and `…/kill` (SIGKILL) to the group.
async fn signal_process(shared: &Shared, name: &str, identifier: &str, kill: bool) -> Response {
    let Some(p) = find_process(shared, name, identifier) else {
        return process_not_found(identifier);
    };
    let ended = p.bg.exit().is_some();
    if ended && kill {
        return error(
            StatusCode::NOT_FOUND,
            format!("failed to kill process with Identifier {identifier}: no such process"),
        );
    }
    if !kill && (ended || p.state().status != "running") {
        return error(
            StatusCode::NOT_FOUND,
            format!("process with Identifier {identifier} is not running"),
        );
    }
    {
        let mut st = p.state();
        let notice = Bytes::from_static(if kill { KILLING } else { STOPPING });
        st.writers.retain(|w| w.send(notice.clone()).is_ok());
        st.status = if kill { "killed" } else { "stopped" };
    }
    if let Err(e) = p.bg.signal(if kill { 9 } else { 15 }).await {
        return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string());
    }
    let message = if kill {
        "Process killed successfully"
    } else {
        "Process stopped successfully"
    };
    axum::Json(json!({ "message": message })).into_response()
}

async fn stop_process(
    State(shared): St,
    Path((ws, name, process)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    signal_process(&shared, &name, &process, false).await
}

async fn kill_process(
    State(shared): St,
    Path((ws, name, process)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    signal_process(&shared, &name, &process, true).await
}

fn listing(path: &FsPath) -> Value {
    let mut files = Vec::new();
    let mut subdirectories = Vec::new();
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            let p = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                subdirectories.push(json!({ "name": name, "path": p }));
            } else {
                files.push(json!({
                    "name": name,
                    "path": p,
                    "size": entry.metadata().map_or(0, |m| m.len()),
                    "permissions": "0644",
                    "owner": "root",
                    "group": "root",
                    "lastModified": "2026-11-23T20:00:00Z",
                }));
            }
        }
    }
    json!({
        "name": path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        "path": path,
        "files": files,
        "subdirectories": subdirectories,
    })
}

async fn read_file(
    State(shared): St,
    Path((ws, name, rest)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let root = match sandbox_dir(&shared, &ws, &name) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let path = match host_path(&root, &rest) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if path.is_dir() {
        return axum::Json(listing(&path)).into_response();
    }
    let Ok(content) = std::fs::read(&path) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("file {} not found", path.display()),
        );
    };
    let raw = query.get("download").is_some_and(|d| d == "true")
        || headers
            .get("accept")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("application/octet-stream"));
    if raw {
        return ([("content-type", "application/octet-stream")], content).into_response();
    }
    axum::Json(json!({
        "path": path,
        "name": path.file_name().map(|n| n.to_string_lossy().into_owned()),
        "content": String::from_utf8_lossy(&content),
        "size": content.len(),
        "permissions": "0644",
        "owner": "root",
        "group": "root",
        "lastModified": "2026-11-23T20:00:00Z",
    }))
    .into_response()
}

async fn write_file(
    State(shared): St,
    Path((ws, name, rest)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    let root = match sandbox_dir(&shared, &ws, &name) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let path = match host_path(&root, &rest) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid JSON body");
    };
    if let Err(e) = only(&req, &["content", "isDirectory", "permissions"]) {
        return bad(e);
    }
    let result = if req["isDirectory"].as_bool() == Some(true) {
        std::fs::create_dir_all(&path)
    } else {
        let Some(content) = req["content"].as_str() else {
            return bad("content must be a string");
        };
        // Blaxel's handler creates the parents (`os.MkdirAll`).
        path.parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, content))
    };
    match result {
        Ok(()) => axum::Json(json!({ "message": "File created successfully", "path": path }))
            .into_response(),
        Err(e) => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    }
}

async fn initiate_upload(
    State(shared): St,
    Path((ws, name, rest)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    let root = match sandbox_dir(&shared, &ws, &name) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let path = match host_path(&root, &rest) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if !body.is_empty() {
        let Ok(req) = serde_json::from_slice::<Value>(&body) else {
            return bad("invalid JSON body");
        };
        if let Err(e) = only(&req, &["permissions"]) {
            return bad(e);
        }
        if !(req["permissions"].is_null() || req["permissions"].is_string()) {
            return bad("permissions must be a string");
        }
    }
    let id = format!("upload-{:08x}", shared.next.fetch_add(1, Ordering::Relaxed));
    locked(&shared.uploads).insert(
        id.clone(),
        Upload {
            path: path.clone(),
            parts: BTreeMap::new(),
        },
    );
    axum::Json(json!({ "uploadId": id, "path": path })).into_response()
}

fn etag(data: &[u8]) -> String {
    // FNV-1a: stable and cheap; any digest would do for a fake.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

async fn upload_part(
    State(shared): St,
    Path((ws, name, id)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    let number = match query.get("partNumber").and_then(|n| n.parse::<u64>().ok()) {
        Some(n @ 1..=10000) => n,
        _ => return bad("partNumber must be an integer from 1 to 10000"),
    };
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(parts) = parse_multipart(content_type, &body) else {
        return bad("expected multipart/form-data");
    };
    let Some(file) = parts.into_iter().find(|p| p.name == "file") else {
        return bad("missing form field `file`");
    };
    let mut uploads = locked(&shared.uploads);
    let Some(upload) = uploads.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, "upload not found");
    };
    let tag = etag(&file.data);
    let size = file.data.len();
    upload.parts.insert(number, (tag.clone(), file.data));
    axum::Json(json!({ "etag": tag, "partNumber": number, "size": size })).into_response()
}

async fn complete_upload(
    State(shared): St,
    Path((ws, name, id)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid JSON body");
    };
    if let Err(e) = only(&req, &["parts"]) {
        return bad(e);
    }
    let Some(listed) = req["parts"].as_array() else {
        return bad("parts must be an array");
    };
    let Some(upload) = locked(&shared.uploads).remove(&id) else {
        return error(StatusCode::NOT_FOUND, "upload not found");
    };
    let mut content = Vec::new();
    for part in listed {
        let number = part["partNumber"].as_u64().unwrap_or_default();
        match upload.parts.get(&number) {
            Some((tag, data)) if part["etag"].as_str() == Some(tag.as_str()) => {
                content.extend_from_slice(data);
            }
            _ => return bad(format!("part {number} is missing or its etag differs")),
        }
    }
    let path = upload.path;
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&path, &content));
    match written {
        Ok(()) => {
            axum::Json(json!({ "message": "Upload completed", "path": path })).into_response()
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn abort_upload(
    State(shared): St,
    Path((ws, name, id)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    match locked(&shared.uploads).remove(&id) {
        Some(_) => axum::Json(json!({ "message": "Upload aborted" })).into_response(),
        None => error(StatusCode::NOT_FOUND, "upload not found"),
    }
}

fn router(shared: Arc<Shared>) -> Router {
    let sbx = "/{ws}/sandboxes/{name}";
    Router::new()
        .route("/v0/sandboxes", post(create_sandbox))
        .route(
            "/v0/sandboxes/{name}",
            get(get_sandbox).delete(delete_sandbox),
        )
        .route(
            "/v0/sandboxes/{name}/snapshots",
            get(list_snapshots).post(create_snapshot),
        )
        .route(
            "/v0/sandboxes/{name}/snapshots/{id}",
            delete(delete_snapshot),
        )
        .route("/v0/sandboxes/{name}/fork", post(fork_sandbox))
        .route(
            &format!("{sbx}/process"),
            get(list_processes).post(run_process),
        )
        .route(
            &format!("{sbx}/process/{{process}}"),
            get(get_process).delete(stop_process),
        )
        .route(
            &format!("{sbx}/process/{{process}}/kill"),
            delete(kill_process),
        )
        .route(
            &format!("{sbx}/process/{{process}}/logs"),
            get(process_logs),
        )
        .route(
            &format!("{sbx}/process/{{process}}/logs/stream"),
            get(stream_logs),
        )
        .route(
            &format!("{sbx}/filesystem/{{*path}}"),
            get(read_file).put(write_file),
        )
        .route(
            &format!("{sbx}/filesystem-multipart/initiate/{{*path}}"),
            post(initiate_upload),
        )
        .route(
            &format!("{sbx}/filesystem-multipart/{{id}}/part"),
            put(upload_part),
        )
        .route(
            &format!("{sbx}/filesystem-multipart/{{id}}/complete"),
            post(complete_upload),
        )
        .route(
            &format!("{sbx}/filesystem-multipart/{{id}}/abort"),
            delete(abort_upload),
        )
        .layer(axum::middleware::from_fn_with_state(shared.clone(), auth))
        // Parts of several MiB (axum's own default is 2 MiB).
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
        .with_state(shared)
}

/// Blaxel's two APIs on one loopback port, accepting [`API_KEY`] in [`WORKSPACE`].
pub struct Fake {
    server: FakeServer,
    shared: Arc<Shared>,
}

impl Fake {
    /// Starts the fake.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared {
            api_key: API_KEY.to_owned(),
            next: AtomicU64::new(1),
            edge_wait: Mutex::new(Duration::from_secs(60)),
            keepalive: Mutex::new(Duration::from_secs(30)),
            max_log_bytes: Mutex::new(32 * 1024 * 1024),
            sandboxes: Mutex::new(HashMap::new()),
            procs: Mutex::new(HashMap::new()),
            host: Processes::default(),
            uploads: Mutex::new(HashMap::new()),
            snapshots: Mutex::new(HashMap::new()),
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

    /// The control plane's base URL (`…/v0`).
    pub fn base_url(&self) -> String {
        format!("{}/v0", self.server.base_url())
    }

    /// The adapter's configuration pointed at the fake (both APIs).
    pub fn config(&self) -> crate::BlaxelConfig {
        crate::BlaxelConfig {
            base_url: self.base_url(),
            run_url: self.server.base_url(),
            ..Default::default()
        }
    }

    /// A call context with the key and workspace the fake accepts.
    pub fn context(&self) -> CallContext {
        CallContext::new(
            Some(SecretString::from(API_KEY)),
            ProviderContext {
                workspace: Some(WORKSPACE.into()),
                ..Default::default()
            },
        )
    }

    /// How long the edge waits for a `waitForCompletion` process before answering 504.
    pub fn set_edge_wait(&self, wait: Duration) {
        *locked(&self.shared.edge_wait) = wait;
    }

    /// How often a log stream writes `[keepalive]` while its process runs (30 s on Blaxel).
    pub fn set_keepalive(&self, every: Duration) {
        *locked(&self.shared.keepalive) = every;
    }

    /// The most of a process's combined log a log stream replays (32 MiB on Blaxel, less when
    /// many processes share the sandbox's log budget): past it, the replay is its tail after
    /// the truncation marker.
    pub fn set_max_log_bytes(&self, max: usize) {
        *locked(&self.shared.max_log_bytes) = max;
    }

    /// Puts sandbox `name` in standby, as Blaxel does after ~15 s without traffic.
    pub fn standby(&self, name: &str) {
        if let Some(sb) = locked(&self.shared.sandboxes).get_mut(name) {
            sb.body["state"] = json!("STANDBY");
        }
    }

    /// The runtime state (`RUNNING`, `STANDBY`) of sandbox `name`, as the fake holds it.
    pub fn state(&self, name: &str) -> Option<String> {
        locked(&self.shared.sandboxes)
            .get(name)
            .and_then(|sb| sb.body["state"].as_str().map(str::to_owned))
    }
}

#[async_trait::async_trait]
impl Harness for Fake {
    type Adapter = crate::BlaxelProvider;

    async fn start() -> Self {
        Fake::start().await
    }

    fn server(&self) -> &FakeServer {
        &self.server
    }

    fn base_url(&self) -> String {
        Fake::base_url(self)
    }

    fn config_at(&self, base_url: &str, http: HttpConfig) -> crate::BlaxelConfig {
        crate::BlaxelConfig {
            base_url: base_url.to_owned(),
            http,
            ..self.config()
        }
    }

    fn context(&self) -> CallContext {
        Fake::context(self)
    }

    fn create_call() -> (Method, &'static str) {
        (Method::POST, "/v0/sandboxes")
    }

    fn get_call() -> (Method, &'static str) {
        (Method::GET, "/v0/sandboxes/")
    }

    fn unknown_id() -> &'static str {
        "corral-op-nope"
    }

    /// `CORRAL_LIVE_BLAXEL_API_KEY` and `CORRAL_LIVE_BLAXEL_WORKSPACE`.
    fn live() -> Result<(crate::BlaxelConfig, CallContext, CreateSandboxRequest), String> {
        let (Ok(key), Ok(workspace)) = (
            std::env::var("CORRAL_LIVE_BLAXEL_API_KEY"),
            std::env::var("CORRAL_LIVE_BLAXEL_WORKSPACE"),
        ) else {
            return Err("CORRAL_LIVE_BLAXEL_API_KEY and CORRAL_LIVE_BLAXEL_WORKSPACE".into());
        };
        let ctx = CallContext::new(
            Some(SecretString::from(key)),
            ProviderContext {
                workspace: Some(workspace),
                ..Default::default()
            },
        );
        Ok((
            crate::BlaxelConfig::default(),
            ctx,
            CreateSandboxRequest::standard(Provider::Blaxel, None, None),
        ))
    }
}
