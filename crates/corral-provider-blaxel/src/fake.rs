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
//! Processes run with the host's `sh` in a per-sandbox temporary directory; a
//! `waitForCompletion` request that outlasts the edge's wait ([`Fake::set_edge_wait`], 60 s by
//! default) is answered `504` while the process goes on, as Blaxel's edge does. Files live on
//! the host below the sandbox's directory (paths elsewhere are refused); `PUT /filesystem`
//! creates missing parents, as Blaxel's does (`os.MkdirAll`), and so does a completed multipart
//! upload.
// Helpers hand their refusal back as the handler's response itself.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use corral_domain::{CreateSandboxRequest, Provider, ProviderContext};
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::fake::{FakeServer, parse_multipart};
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::host_shell::{RunOutcome, run_command};
use serde_json::{Value, json};

/// The API key the fake accepts.
pub const API_KEY: &str = "bl_fake_key_0123";
/// The workspace the fake serves.
pub const WORKSPACE: &str = "corral-fake-ws";

struct FakeSandbox {
    dir: tempfile::TempDir,
    body: Value,
}

#[derive(Clone)]
struct FakeProcess {
    body: Value,
}

struct Upload {
    path: PathBuf,
    parts: BTreeMap<u64, (String, Bytes)>,
}

struct Shared {
    api_key: String,
    next: AtomicU64,
    edge_wait: Mutex<Duration>,
    sandboxes: Mutex<HashMap<String, FakeSandbox>>,
    processes: Mutex<HashMap<(String, String), FakeProcess>>,
    uploads: Mutex<HashMap<String, Upload>>,
}

type St = State<Arc<Shared>>;

#[allow(clippy::expect_used)] // A poisoned lock means a handler panicked: the test already failed.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect("fake lock")
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

fn bad(message: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, message)
}

async fn auth(State(shared): St, headers: HeaderMap, req: Request, next: Next) -> Response {
    let key = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
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
    match body.as_object() {
        Some(o) => match o.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(format!("unknown field `{k}`")),
            None => Ok(()),
        },
        None => Err("expected a JSON object".into()),
    }
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
    match locked(&shared.sandboxes).remove(&name) {
        Some(mut sb) => {
            sb.body["status"] = json!("DELETING");
            axum::Json(sb.body).into_response()
        }
        None => error(StatusCode::NOT_FOUND, format!("sandbox {name} not found")),
    }
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

fn process_body(req: &Value, pid: u64, status: &str, exit: i64, out: &[u8], err: &[u8]) -> Value {
    let stdout = String::from_utf8_lossy(out);
    let stderr = String::from_utf8_lossy(err);
    json!({
        "pid": pid.to_string(),
        "name": req["name"].as_str().map_or_else(|| pid.to_string(), str::to_owned),
        "command": req["command"],
        "status": status,
        "exitCode": exit,
        "stdout": stdout,
        "stderr": stderr,
        "logs": format!("{stdout}{stderr}"),
        "startedAt": "Mon, 23 Nov 2026 20:00:00 GMT",
        "completedAt": if status == "running" { "" } else { "Mon, 23 Nov 2026 20:00:01 GMT" },
        "workingDir": req["workingDir"],
        "keepAlive": false,
        "restartOnFailure": false,
        "maxRestarts": 0,
        "restartCount": 0,
    })
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
    let cwd = req["workingDir"]
        .as_str()
        .map_or_else(|| dir.clone(), PathBuf::from);
    if !cwd.is_dir() {
        return bad(format!(
            "working directory {} does not exist",
            cwd.display()
        ));
    }
    let env: BTreeMap<String, String> = req["env"]
        .as_object()
        .map(|e| {
            e.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let timeout = match req["timeout"].as_u64() {
        None | Some(0) => Duration::from_secs(24 * 3600),
        Some(s) => Duration::from_secs(s),
    };
    let pid = shared.next.fetch_add(1, Ordering::Relaxed);
    let key = (
        name.clone(),
        req["name"]
            .as_str()
            .map_or_else(|| pid.to_string(), str::to_owned),
    );
    locked(&shared.processes).insert(
        key.clone(),
        FakeProcess {
            body: process_body(&req, pid, "running", -1, b"", b""),
        },
    );
    let command = req["command"].as_str().unwrap_or_default().to_owned();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task_shared = shared.clone();
    let task_key = key.clone();
    let task_req = req.clone();
    tokio::spawn(async move {
        let body = match run_command(&command, &cwd, &env, timeout, 64 << 20).await {
            Ok(RunOutcome::Finished(out)) => {
                let status = if out.exit_code == 0 {
                    "completed"
                } else {
                    "failed"
                };
                process_body(
                    &task_req,
                    pid,
                    status,
                    i64::from(out.exit_code),
                    &out.stdout,
                    &out.stderr,
                )
            }
            Ok(RunOutcome::TimedOut) => process_body(&task_req, pid, "killed", 137, b"", b""),
            Err(e) => process_body(&task_req, pid, "failed", 127, b"", e.to_string().as_bytes()),
        };
        let mut processes = locked(&task_shared.processes);
        // A process killed meanwhile stays killed.
        if processes
            .get(&task_key)
            .is_some_and(|p| p.body["status"] == "running")
        {
            processes.insert(task_key, FakeProcess { body: body.clone() });
        }
        let _ = tx.send(());
    });
    if req["waitForCompletion"].as_bool() != Some(true) {
        return axum::Json(process_body(&req, pid, "running", -1, b"", b"")).into_response();
    }
    let edge_wait = *locked(&shared.edge_wait);
    if tokio::time::timeout(edge_wait, rx).await.is_err() {
        // The edge stops waiting; the process goes on.
        return error(StatusCode::GATEWAY_TIMEOUT, "upstream request timeout");
    }
    let body = locked(&shared.processes)
        .get(&key)
        .map(|p| p.body.clone())
        .unwrap_or_default();
    axum::Json(body).into_response()
}

async fn get_process(
    State(shared): St,
    Path((ws, name, process)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    match locked(&shared.processes).get(&(name, process)) {
        Some(p) => axum::Json(p.body.clone()).into_response(),
        None => error(StatusCode::NOT_FOUND, "process not found"),
    }
}

async fn kill_process(
    State(shared): St,
    Path((ws, name, process)): Path<(String, String, String)>,
) -> Response {
    if let Err(r) = sandbox_dir(&shared, &ws, &name) {
        return r;
    }
    match locked(&shared.processes).get_mut(&(name, process)) {
        Some(p) => {
            p.body["status"] = json!("killed");
            axum::Json(json!({ "message": "process killed" })).into_response()
        }
        None => error(StatusCode::NOT_FOUND, "process not found"),
    }
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
        .route(&format!("{sbx}/process"), post(run_process))
        .route(&format!("{sbx}/process/{{process}}"), get(get_process))
        .route(
            &format!("{sbx}/process/{{process}}/kill"),
            delete(kill_process),
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
            sandboxes: Mutex::new(HashMap::new()),
            processes: Mutex::new(HashMap::new()),
            uploads: Mutex::new(HashMap::new()),
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
