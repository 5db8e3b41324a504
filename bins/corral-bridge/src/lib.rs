//! A reference bridge: Corral's bridge contract (`docs/bridge-contract.md`) served over any
//! [`SandboxProvider`] — in the `corral-bridge` binary, the `local` provider — so the whole
//! bridge path (client → `corral` → bridge client → bridge → sandbox) runs on one machine.
//!
//! It implements every route Corral uses and all of Corral's extensions (tag on create, lookup
//! by tag, observe by id, `env` on exec, and the process routes over the backend's commands:
//! start, attach, stdin, signal and find of the port). Bridge ids are the backend's native ids
//! in lowercase base32, so they match the contract's `^[a-z2-7]{1,128}$`; process ids are
//! Corral command ids, which the backend tags its commands with. Differences from Cloudflare's
//! Worker: paths are not confined to `/workspace` (the backend confines them to the sandbox),
//! a write into a missing directory is refused rather than creating it, and exec output is
//! sent when the command ends (as events all the same), since the backend's exec is not
//! streamed. Processes offer what the backend's commands do: stdin and the signals its
//! capabilities advertise (otherwise `stdin_unsupported`, `signal_unsupported`), logs from an
//! offset as the backend resumes (a replay is trimmed to the offset asked; a backend that only
//! streams what comes next sends chunks without positions), and a process's `status` is
//! `running` until one of its log streams reached the end (the port has no status read).
//!
//! The lifecycle extension forwards to the backend's port: `…/stop` and `…/resume` to `stop`
//! and `resume` (a stopped sandbox's exec, files and process starts answer `409
//! sandbox_stopped`), `…/snapshots` to `snapshot` (Corral's snapshot id in `tag` names it),
//! `GET`/`DELETE /v1/snapshots/{sid}` to `get_snapshot`/`delete_snapshot`, and
//! `/v1/snapshots/{sid}/restore` to `restore` (a ready snapshot only: `409 snapshot_not_ready`
//! otherwise). Snapshot ids are the backend's in lowercase base32, as sandbox ids are. What the
//! backend does not offer (`Unsupported`) answers `501 lifecycle_unsupported`, which Corral
//! reads as the extension missing.
//!
//! Use it alone: `router(Arc::new(provider), key)` is an axum `Router`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use corral_domain::{
    CommandId, CreateSandboxRequest, OperationId, SandboxStatus, Signal, SnapshotId,
    SnapshotStatus, limits,
};
use corral_provider::shell::shell_quote;
use corral_provider::{
    CallContext, CommandEvent, CommandSpec, CreateSpec, ExecSpec, ExposeSecret as _,
    ObservedSandbox, ObservedSnapshot, OutputOffsets, ProviderError, SandboxProvider, SecretString,
    SnapshotSpec,
};
use corral_provider_bridge::api::{self, codes};
use futures::StreamExt as _;
use subtle::ConstantTimeEq as _;

/// Largest file read or written, as Cloudflare's Worker (32 MiB).
pub const MAX_FILE_BYTES: usize = 32 * 1024 * 1024;
/// How long a create waits for a backend sandbox that is still being created.
const CREATE_WAIT: Duration = Duration::from_secs(60);
/// Deadline of a command that names none.
const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(300);
/// Base64 output bytes per event.
const CHUNK: usize = 16 * 1024;

struct Bridge {
    provider: Arc<dyn SandboxProvider>,
    key: SecretString,
    /// Processes started or found, by bridge sandbox id and process id.
    processes: Mutex<HashMap<(String, String), ProcessEntry>>,
    /// The context of every backend call (credential and routing context of the backend).
    backend: CallContext,
}

impl Bridge {
    fn ctx(&self) -> CallContext {
        self.backend.clone()
    }
}

type St = State<Arc<Bridge>>;

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

fn not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        codes::SANDBOX_NOT_FOUND,
        format!("sandbox {id} does not exist"),
    )
}

/// A backend failure that is not the caller's: 503 when the backend is unavailable, else 502.
fn backend(e: &ProviderError) -> Response {
    let status = match e {
        ProviderError::Unavailable { .. } | ProviderError::RateLimited { .. } => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::BAD_GATEWAY,
    };
    error(status, "exec_transport_error", e.to_string())
}

/// The backend's native id for bridge id `id`, if it is one this bridge could have issued.
fn native(id: &str) -> Option<String> {
    if !api::is_sandbox_id(id) {
        return None;
    }
    String::from_utf8(api::unbase32(id)?).ok()
}

fn info(sandbox: &ObservedSandbox) -> api::SandboxInfo {
    api::SandboxInfo {
        id: api::base32(sandbox.native_id.as_bytes()),
        running: sandbox.status == SandboxStatus::Running,
        tag: sandbox.operation_id.map(|o| o.to_string()),
        state: state(sandbox.status).map(str::to_owned),
    }
}

/// The lifecycle extension's `state` of a backend status (terminal ones are answered as
/// unknown sandboxes before this).
fn state(status: SandboxStatus) -> Option<&'static str> {
    use api::states;
    Some(match status {
        SandboxStatus::Creating => states::CREATING,
        SandboxStatus::Starting => states::STARTING,
        SandboxStatus::Running => states::RUNNING,
        SandboxStatus::Paused => states::PAUSED,
        SandboxStatus::Stopping => states::STOPPING,
        SandboxStatus::Stopped => states::STOPPED,
        SandboxStatus::Failed => states::FAILED,
        SandboxStatus::Expired | SandboxStatus::Deleted => return None,
    })
}

fn stopped(id: &str) -> Response {
    error(
        StatusCode::CONFLICT,
        codes::SANDBOX_STOPPED,
        format!("sandbox {id} is stopped: resume it first"),
    )
}

fn snapshot_not_found(sid: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        codes::SNAPSHOT_NOT_FOUND,
        format!("snapshot {sid} does not exist"),
    )
}

/// A lifecycle call's failure: what the backend does not offer is `501
/// lifecycle_unsupported`; an unknown resource is `missing`'s answer.
fn lifecycle_failure(e: &ProviderError, missing: impl FnOnce() -> Response) -> Response {
    match e {
        ProviderError::Unsupported { reason, .. } => error(
            StatusCode::NOT_IMPLEMENTED,
            codes::LIFECYCLE_UNSUPPORTED,
            format!("this bridge's backend cannot do it: {reason}"),
        ),
        ProviderError::NotFound { .. } => missing(),
        ProviderError::InvalidRequest { .. } => invalid(e.to_string()),
        other => backend(other),
    }
}

/// The backend's native snapshot id for bridge snapshot id `sid`.
fn native_snapshot(sid: &str) -> Option<String> {
    if !api::is_snapshot_id(sid) {
        return None;
    }
    String::from_utf8(api::unbase32(sid)?).ok()
}

/// A snapshot's answer: its contract form, or the refusal of one the contract cannot carry.
fn snapshot_answer(snapshot: &ObservedSnapshot) -> Response {
    let id = api::base32(snapshot.native_id.as_bytes());
    if !api::is_snapshot_id(&id) {
        return error(
            StatusCode::BAD_GATEWAY,
            "exec_transport_error",
            "the backend's snapshot id is too long for the contract",
        );
    }
    let status = match snapshot.status {
        SnapshotStatus::Creating => "creating",
        SnapshotStatus::Ready => "ready",
        SnapshotStatus::Failed => "failed",
        SnapshotStatus::Deleted => return snapshot_not_found(&id),
    };
    axum::Json(api::SnapshotInfo {
        id,
        status: status.into(),
        size_bytes: snapshot.size_bytes,
    })
    .into_response()
}

async fn auth(State(bridge): St, headers: HeaderMap, req: Request, next: Next) -> Response {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if bool::from(
        given
            .as_bytes()
            .ct_eq(bridge.key.expose_secret().as_bytes()),
    ) {
        next.run(req).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            codes::UNAUTHORIZED,
            "Unauthorized",
        )
    }
}

async fn create(State(bridge): St, body: Bytes) -> Response {
    let tag = if body.is_empty() {
        None
    } else {
        match serde_json::from_slice::<api::CreateRequest>(&body) {
            Ok(r) => match r.tag.parse::<OperationId>() {
                Ok(op) => Some(op),
                Err(_) => return invalid("tag must be a Corral operation id"),
            },
            Err(e) => return invalid(format!("body must be {{\"tag\": …}}: {e}")),
        }
    };
    let provider = bridge.provider.provider();
    let spec = CreateSpec {
        operation_id: tag.unwrap_or_else(OperationId::new),
        request: CreateSandboxRequest::standard(provider, None, None),
        timeout_seconds: None,
    };
    let created = match bridge.provider.create(&bridge.ctx(), &spec).await {
        Ok(created) => created,
        Err(e) => return backend(&e),
    };
    if let Err(r) = settled(&bridge, &created).await {
        return r;
    }
    axum::Json(api::Created {
        id: api::base32(created.native_id.as_bytes()),
        tag: tag.map(|t| t.to_string()),
    })
    .into_response()
}

/// Waits while a new backend sandbox is `creating`: the contract's one status bit (`running`)
/// would read it as asleep, so a create (or a restore) answers once it runs (or failed, or the
/// wait is over).
async fn settled(bridge: &Bridge, created: &ObservedSandbox) -> Result<(), Response> {
    let mut status = created.status;
    let started = std::time::Instant::now();
    while status == SandboxStatus::Creating && started.elapsed() < CREATE_WAIT {
        tokio::time::sleep(Duration::from_millis(100)).await;
        status = match bridge.provider.get(&bridge.ctx(), &created.native_id).await {
            Ok(s) => s.status,
            Err(e) => return Err(backend(&e)),
        };
    }
    Ok(())
}

async fn lookup(State(bridge): St, Query(query): Query<HashMap<String, String>>) -> Response {
    let (Some(tag), 1) = (query.get("tag"), query.len()) else {
        return invalid("the query must be exactly `tag=<operation id>`");
    };
    let Ok(op) = tag.parse::<OperationId>() else {
        // Nothing this bridge created carries anything else.
        return axum::Json(api::SandboxList { sandboxes: vec![] }).into_response();
    };
    match bridge
        .provider
        .find_by_operation_id(&bridge.ctx(), &op)
        .await
    {
        Ok(found) => axum::Json(api::SandboxList {
            sandboxes: found
                .iter()
                .filter(|s| !s.status.is_terminal())
                .map(info)
                .collect(),
        })
        .into_response(),
        Err(e) => backend(&e),
    }
}

/// The sandbox, or the answer for one that does not exist (any more).
async fn observed(bridge: &Bridge, id: &str) -> Result<ObservedSandbox, Response> {
    let Some(native) = native(id) else {
        return Err(not_found(id));
    };
    match bridge.provider.get(&bridge.ctx(), &native).await {
        Ok(s) if s.status.is_terminal() => Err(not_found(id)),
        Ok(s) => Ok(s),
        Err(ProviderError::NotFound { .. }) => Err(not_found(id)),
        Err(e) => Err(backend(&e)),
    }
}

/// The sandbox, refused when it is stopped (or stopping): exec, files and process starts wait
/// for a resume.
async fn live(bridge: &Bridge, id: &str) -> Result<ObservedSandbox, Response> {
    let s = observed(bridge, id).await?;
    if s.status.is_stopped() {
        return Err(stopped(id));
    }
    Ok(s)
}

async fn observe(State(bridge): St, Path(id): Path<String>) -> Response {
    match observed(&bridge, &id).await {
        Ok(s) => axum::Json(info(&s)).into_response(),
        Err(r) => r,
    }
}

async fn running(State(bridge): St, Path(id): Path<String>) -> Response {
    let running = match observed(&bridge, &id).await {
        Ok(s) => s.status == SandboxStatus::Running,
        Err(_) => false,
    };
    axum::Json(api::RunningResponse { running }).into_response()
}

async fn delete(State(bridge): St, Path(id): Path<String>) -> Response {
    if let Some(native) = native(&id) {
        match bridge.provider.delete(&bridge.ctx(), &native).await {
            Ok(()) | Err(ProviderError::NotFound { .. }) => {}
            Err(e) => return backend(&e),
        }
    } else if !api::is_sandbox_id(&id) {
        return invalid("sandbox id must match ^[a-z2-7]{1,128}$");
    }
    StatusCode::NO_CONTENT.into_response()
}

fn event(name: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

async fn exec(State(bridge): St, Path(id): Path<String>, body: Bytes) -> Response {
    let request: api::ExecRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return invalid(format!("invalid exec request: {e}")),
    };
    if request.argv.is_empty() {
        return invalid("argv must not be empty");
    }
    if let Some(cwd) = &request.cwd
        && !cwd.starts_with('/')
    {
        return error(
            StatusCode::FORBIDDEN,
            codes::INVALID_REQUEST,
            "cwd must be absolute",
        );
    }
    let native = match live(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    let timeout = request
        .timeout_ms
        .map_or(DEFAULT_EXEC_TIMEOUT, Duration::from_millis);
    let spec = ExecSpec {
        command: request
            .argv
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" "),
        cwd: request.cwd,
        env: request.env.unwrap_or_default(),
        timeout,
        // One byte over the client's cap, so the client sees the cut and flags it.
        max_output_bytes: limits::MAX_OUTPUT_BYTES_PER_STREAM + 1,
    };
    let mut events: Vec<Bytes> = Vec::new();
    match bridge.provider.exec(&bridge.ctx(), &native, &spec).await {
        Ok(out) => {
            let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
            events.extend(out.stdout.chunks(CHUNK).map(|c| event("stdout", &b64(c))));
            events.extend(out.stderr.chunks(CHUNK).map(|c| event("stderr", &b64(c))));
            let exit = serde_json::json!({ "exit_code": out.exit_code });
            events.push(event("exit", &exit.to_string()));
        }
        Err(ProviderError::CommandTimedOut { after }) => {
            let data = serde_json::json!({
                "error": format!("the command did not finish within {}ms", after.as_millis()),
                "code": codes::EXEC_TIMEOUT,
            });
            events.push(event("error", &data.to_string()));
        }
        Err(ProviderError::NotFound { .. }) => return not_found(&id),
        Err(e @ ProviderError::InvalidRequest { .. }) => return invalid(e.to_string()),
        Err(e) => return backend(&e),
    }
    let stream = futures::stream::iter(events.into_iter().map(Ok::<_, std::io::Error>));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// Deadline of a process started without `timeout_ms`.
const DEFAULT_PROCESS_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// How long a process log stream stays silent before it sends a comment.
const LOGS_KEEPALIVE: Duration = Duration::from_secs(15);

/// A process this bridge started (or found): the backend's handle on the command, and how it
/// ended once one of its log streams reached the end.
struct ProcessEntry {
    handle: String,
    exit: Option<Option<i32>>,
}

fn process_not_found(pid: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        codes::PROCESS_NOT_FOUND,
        format!("process {pid} does not exist"),
    )
}

fn process_info(pid: &str, entry: &ProcessEntry) -> api::ProcessInfo {
    let (status, exit_code) = match entry.exit {
        None => ("running", None),
        Some(Some(0)) => ("completed", Some(0)),
        Some(Some(code)) if code > 128 => ("killed", Some(code)),
        Some(Some(code)) => ("failed", Some(code)),
        Some(None) => ("failed", None),
    };
    api::ProcessInfo {
        id: pid.to_owned(),
        pid: None,
        status: status.into(),
        exit_code,
    }
}

impl Bridge {
    fn processes(&self) -> MutexGuard<'_, HashMap<(String, String), ProcessEntry>> {
        self.processes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The backend's handle on process `pid` of sandbox `id` (native id `native`): from the
    /// table, else found again by its command id (after a restart of the bridge).
    async fn handle_of(&self, id: &str, native: &str, pid: &str) -> Result<String, Response> {
        let key = (id.to_owned(), pid.to_owned());
        if let Some(entry) = self.processes().get(&key) {
            return Ok(entry.handle.clone());
        }
        let Ok(command_id) = pid.parse::<CommandId>() else {
            return Err(process_not_found(pid));
        };
        match self
            .provider
            .find_command(&self.ctx(), native, &command_id)
            .await
        {
            Ok(Some(handle)) => {
                self.processes().insert(
                    key,
                    ProcessEntry {
                        handle: handle.clone(),
                        exit: None,
                    },
                );
                Ok(handle)
            }
            Ok(None) | Err(ProviderError::NotFound { .. } | ProviderError::Unsupported { .. }) => {
                Err(process_not_found(pid))
            }
            Err(e) => Err(backend(&e)),
        }
    }
}

async fn start_process(State(bridge): St, Path(id): Path<String>, body: Bytes) -> Response {
    let request: api::StartProcessRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return invalid(format!("invalid process request: {e}")),
    };
    if request.argv.is_empty() {
        return invalid("argv must not be empty");
    }
    if let Some(cwd) = &request.cwd
        && !cwd.starts_with('/')
    {
        return error(
            StatusCode::FORBIDDEN,
            codes::INVALID_REQUEST,
            "cwd must be absolute",
        );
    }
    // The backend tags commands with Corral command ids.
    let command_id = match &request.process_id {
        None => CommandId::new(),
        Some(pid) => match pid.parse::<CommandId>() {
            Ok(c) => c,
            Err(_) => return invalid("process_id must be a Corral command id (cmd_…)"),
        },
    };
    let pid = command_id.to_string();
    let native = match live(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    if request.stdin && !bridge.provider.capabilities().commands.stdin {
        return error(
            StatusCode::BAD_REQUEST,
            codes::STDIN_UNSUPPORTED,
            "this bridge's backend gives commands no stdin",
        );
    }
    if bridge.processes().contains_key(&(id.clone(), pid.clone())) {
        return error(
            StatusCode::CONFLICT,
            codes::PROCESS_EXISTS,
            format!("process {pid} already exists"),
        );
    }
    let line = request
        .argv
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    let spec = CommandSpec {
        command_id,
        // The argv is the process: signals reach it, not a wrapper shell.
        command: format!("exec {line}"),
        cwd: request.cwd,
        env: request.env.unwrap_or_default(),
        stdin: request.stdin,
        timeout: request
            .timeout_ms
            .map_or(DEFAULT_PROCESS_TIMEOUT, Duration::from_millis),
    };
    let ctx = bridge.ctx();
    let handle = match bridge.provider.start_command(&ctx, &native, &spec).await {
        // A start stream is not needed: the logs route attaches.
        Ok(started) => started.handle,
        Err(ProviderError::NotFound { .. }) => return not_found(&id),
        Err(e @ ProviderError::InvalidRequest { .. }) => return invalid(e.to_string()),
        Err(e) => return backend(&e),
    };
    let entry = ProcessEntry { handle, exit: None };
    let info = process_info(&pid, &entry);
    bridge.processes().insert((id, pid), entry);
    axum::Json(info).into_response()
}

async fn list_processes(State(bridge): St, Path(id): Path<String>) -> Response {
    if let Err(r) = observed(&bridge, &id).await {
        return r;
    }
    let mut processes: Vec<api::ProcessInfo> = bridge
        .processes()
        .iter()
        .filter(|((sandbox, _), _)| *sandbox == id)
        .map(|((_, pid), entry)| process_info(pid, entry))
        .collect();
    processes.sort_by(|a, b| a.id.cmp(&b.id));
    axum::Json(api::ProcessList { processes }).into_response()
}

async fn get_process(State(bridge): St, Path((id, pid)): Path<(String, String)>) -> Response {
    let native = match observed(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    if let Err(r) = bridge.handle_of(&id, &native, &pid).await {
        return r;
    }
    match bridge.processes().get(&(id, pid.clone())) {
        Some(entry) => axum::Json(process_info(&pid, entry)).into_response(),
        None => process_not_found(&pid),
    }
}

fn sse(name: &str, data: &impl serde::Serialize) -> Bytes {
    let data = serde_json::to_string(data).unwrap_or_default();
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

async fn process_logs(
    State(bridge): St,
    Path((id, pid)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let mut from = OutputOffsets::default();
    for (name, value) in &query {
        let Ok(n) = value.parse::<u64>() else {
            return invalid(format!("`{name}` must be a byte offset"));
        };
        match name.as_str() {
            "stdout" => from.stdout = n,
            "stderr" => from.stderr = n,
            other => return invalid(format!("unknown query parameter `{other}`")),
        }
    }
    let native = match observed(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    let handle = match bridge.handle_of(&id, &native, &pid).await {
        Ok(h) => h,
        Err(r) => return r,
    };
    // The backend's events borrow it: they are read by a task of their own and handed over.
    let (opened_tx, opened_rx) = tokio::sync::oneshot::channel::<Result<(), ProviderError>>();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let task_bridge = bridge.clone();
    let task_pid = pid.clone();
    tokio::spawn(async move {
        let (bridge, pid) = (task_bridge, task_pid);
        let ctx = bridge.ctx();
        let mut events = match bridge
            .provider
            .attach_command(&ctx, &native, &handle, from)
            .await
        {
            Ok(events) => {
                let _ = opened_tx.send(Ok(()));
                events
            }
            Err(e) => {
                let _ = opened_tx.send(Err(e));
                return;
            }
        };
        loop {
            let piece = match tokio::time::timeout(LOGS_KEEPALIVE, events.next()).await {
                Err(_) => Bytes::from_static(b": keepalive\n\n"),
                // The backend's stream was cut: so is this one (the caller asks again).
                Ok(None) => return,
                Ok(Some(Ok(CommandEvent::Output {
                    stream,
                    offset,
                    mut data,
                }))) => {
                    let offset = match offset {
                        Some(at) => {
                            // A backend that replays from the start: only what was asked.
                            let have = from.of(stream);
                            let skip = usize::try_from(have.saturating_sub(at))
                                .unwrap_or(usize::MAX)
                                .min(data.len());
                            data.drain(..skip);
                            if data.is_empty() {
                                continue;
                            }
                            Some(at.max(have))
                        }
                        None => None,
                    };
                    let chunk = api::LogChunk {
                        offset,
                        data: base64::engine::general_purpose::STANDARD.encode(&data),
                    };
                    sse(stream.as_str(), &chunk)
                }
                Ok(Some(Ok(CommandEvent::Exit { exit_code }))) => {
                    if let Some(entry) = bridge.processes().get_mut(&(id.clone(), pid.clone())) {
                        entry.exit = Some(exit_code);
                    }
                    let _ = tx
                        .send(Ok(sse("exit", &api::ProcessExit { exit_code })))
                        .await;
                    return;
                }
                Ok(Some(Err(ProviderError::NotFound { .. }))) => {
                    let body = api::ErrorBody {
                        error: format!("process {pid} went away"),
                        code: codes::PROCESS_NOT_FOUND.into(),
                    };
                    let _ = tx.send(Ok(sse("error", &body))).await;
                    return;
                }
                Ok(Some(Err(_))) => return,
            };
            if tx.send(Ok(piece)).await.is_err() {
                return; // The caller went away.
            }
        }
    });
    match opened_rx.await {
        Ok(Ok(())) => {}
        Ok(Err(ProviderError::NotFound { .. })) => return process_not_found(&pid),
        Ok(Err(e)) => return backend(&e),
        Err(_) => {
            return error(
                StatusCode::BAD_GATEWAY,
                "exec_transport_error",
                "the log stream could not be opened",
            );
        }
    }
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(tokio_stream_of(rx)),
    )
        .into_response()
}

/// The receiver as a stream of body pieces.
fn tokio_stream_of(
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|p| (p, rx)) })
}

async fn write_stdin(
    State(bridge): St,
    Path((id, pid)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let request: api::StdinRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return invalid(format!("body must be {{\"offset\", \"data\"}}: {e}")),
    };
    let Ok(data) = base64::engine::general_purpose::STANDARD.decode(&request.data) else {
        return invalid("data must be base64");
    };
    let native = match observed(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    let handle = match bridge.handle_of(&id, &native, &pid).await {
        Ok(h) => h,
        Err(r) => return r,
    };
    match bridge
        .provider
        .write_stdin(&bridge.ctx(), &native, &handle, request.offset, &data)
        .await
    {
        Ok(accepted) => axum::Json(api::StdinAccepted { accepted }).into_response(),
        Err(ProviderError::NotFound { .. }) => process_not_found(&pid),
        // The backend refuses a gap or a closed stdin; its message says which.
        Err(ProviderError::InvalidRequest { message, .. }) => {
            let code = if message.contains("offset") {
                codes::STDIN_OFFSET
            } else {
                codes::STDIN_CLOSED
            };
            error(StatusCode::CONFLICT, code, message)
        }
        Err(ProviderError::Unsupported { reason, .. }) => {
            error(StatusCode::CONFLICT, codes::STDIN_CLOSED, reason)
        }
        Err(e) => backend(&e),
    }
}

async fn close_stdin(State(bridge): St, Path((id, pid)): Path<(String, String)>) -> Response {
    let native = match observed(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    let handle = match bridge.handle_of(&id, &native, &pid).await {
        Ok(h) => h,
        Err(r) => return r,
    };
    match bridge
        .provider
        .close_stdin(&bridge.ctx(), &native, &handle)
        .await
    {
        Ok(()) => axum::Json(api::OkResponse { ok: true }).into_response(),
        Err(ProviderError::NotFound { .. }) => process_not_found(&pid),
        Err(e) => backend(&e),
    }
}

async fn kill_process(
    State(bridge): St,
    Path((id, pid)): Path<(String, String)>,
    body: Bytes,
) -> Response {
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
    if !bridge
        .provider
        .capabilities()
        .commands
        .signals
        .contains(&signal)
    {
        return error(
            StatusCode::BAD_REQUEST,
            codes::SIGNAL_UNSUPPORTED,
            format!("this bridge's backend cannot send {name}"),
        );
    }
    let native = match observed(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    let handle = match bridge.handle_of(&id, &native, &pid).await {
        Ok(h) => h,
        Err(r) => return r,
    };
    match bridge
        .provider
        .signal_command(&bridge.ctx(), &native, &handle, signal)
        .await
    {
        Ok(()) => axum::Json(api::OkResponse { ok: true }).into_response(),
        Err(ProviderError::NotFound { .. }) => process_not_found(&pid),
        Err(e) => backend(&e),
    }
}

fn file_error(id: &str, path: &str, e: &ProviderError) -> Response {
    match e {
        ProviderError::NotFound { .. } => not_found(id),
        ProviderError::FileNotFound { .. } => error(
            StatusCode::NOT_FOUND,
            codes::WORKSPACE_READ_NOT_FOUND,
            format!("File not found: {path}"),
        ),
        ProviderError::FileTooLarge { .. } => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("{path} exceeds {MAX_FILE_BYTES} bytes"),
        ),
        ProviderError::FileRefused { reason, .. } => error(
            StatusCode::FORBIDDEN,
            codes::INVALID_REQUEST,
            reason.clone(),
        ),
        ProviderError::ParentMissing { .. } => {
            invalid(format!("the parent directory of {path} does not exist"))
        }
        other => backend(other),
    }
}

async fn read_file(State(bridge): St, Path((id, path)): Path<(String, String)>) -> Response {
    let native = match live(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    let path = format!("/{path}");
    match bridge
        .provider
        .read_file(&bridge.ctx(), &native, &path, MAX_FILE_BYTES)
        .await
    {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) => file_error(&id, &path, &e),
    }
}

async fn write_file(
    State(bridge): St,
    Path((id, path)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let native = match live(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    let path = format!("/{path}");
    match bridge
        .provider
        .write_file(&bridge.ctx(), &native, &path, &body)
        .await
    {
        Ok(()) => axum::Json(api::OkResponse { ok: true }).into_response(),
        Err(e) => file_error(&id, &path, &e),
    }
}

/// `POST /v1/sandbox/{id}/stop` *(lifecycle extension)*: the backend's `stop`.
async fn stop(State(bridge): St, Path(id): Path<String>) -> Response {
    let native = match observed(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    match bridge.provider.stop(&bridge.ctx(), &native).await {
        Ok(s) => axum::Json(info(&s)).into_response(),
        Err(e) => lifecycle_failure(&e, || not_found(&id)),
    }
}

/// `POST /v1/sandbox/{id}/resume` *(lifecycle extension)*: the backend's `resume`.
async fn resume(State(bridge): St, Path(id): Path<String>) -> Response {
    let native = match observed(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    match bridge.provider.resume(&bridge.ctx(), &native).await {
        Ok(s) => axum::Json(info(&s)).into_response(),
        Err(e) => lifecycle_failure(&e, || not_found(&id)),
    }
}

/// `POST /v1/sandbox/{id}/snapshots` *(lifecycle extension)*: the backend's `snapshot`, named
/// after Corral's snapshot id when the `tag` is one.
async fn take_snapshot(State(bridge): St, Path(id): Path<String>, body: Bytes) -> Response {
    let request: api::SnapshotRequest = if body.is_empty() {
        api::SnapshotRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => return invalid(format!("body must be {{\"tag\"?, \"name\"?}}: {e}")),
        }
    };
    let native = match observed(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    let spec = SnapshotSpec {
        snapshot_id: request
            .tag
            .and_then(|t| t.parse::<SnapshotId>().ok())
            .unwrap_or_else(|| SnapshotId::new(bridge.provider.provider())),
        name: request.name,
    };
    match bridge
        .provider
        .snapshot(&bridge.ctx(), &native, &spec)
        .await
    {
        Ok(s) => snapshot_answer(&s),
        Err(e) => lifecycle_failure(&e, || not_found(&id)),
    }
}

/// The backend's snapshot for bridge snapshot id `sid`.
async fn snapshot_of(bridge: &Bridge, sid: &str) -> Result<ObservedSnapshot, Response> {
    let Some(native) = native_snapshot(sid) else {
        return Err(snapshot_not_found(sid));
    };
    match bridge.provider.get_snapshot(&bridge.ctx(), &native).await {
        Ok(s) if s.status == SnapshotStatus::Deleted => Err(snapshot_not_found(sid)),
        Ok(s) => Ok(s),
        Err(e) => Err(lifecycle_failure(&e, || snapshot_not_found(sid))),
    }
}

/// `GET /v1/snapshots/{sid}` *(lifecycle extension)*: the backend's `get_snapshot`.
async fn get_snapshot(State(bridge): St, Path(sid): Path<String>) -> Response {
    match snapshot_of(&bridge, &sid).await {
        Ok(s) => snapshot_answer(&s),
        Err(r) => r,
    }
}

/// `DELETE /v1/snapshots/{sid}` *(lifecycle extension)*: the backend's `delete_snapshot`; an
/// unknown snapshot is `404 snapshot_not_found`.
async fn delete_snapshot(State(bridge): St, Path(sid): Path<String>) -> Response {
    let native = match snapshot_of(&bridge, &sid).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    match bridge
        .provider
        .delete_snapshot(&bridge.ctx(), &native)
        .await
    {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => lifecycle_failure(&e, || snapshot_not_found(&sid)),
    }
}

/// `POST /v1/snapshots/{sid}/restore` *(lifecycle extension)*: the backend's `restore` of a
/// ready snapshot into a new sandbox tagged like a create's.
async fn restore(State(bridge): St, Path(sid): Path<String>, body: Bytes) -> Response {
    let tag = match serde_json::from_slice::<api::RestoreRequest>(&body) {
        Ok(r) => match r.tag.parse::<OperationId>() {
            Ok(op) => op,
            Err(_) => return invalid("tag must be a Corral operation id"),
        },
        Err(e) => return invalid(format!("body must be {{\"tag\": …}}: {e}")),
    };
    let snapshot = match snapshot_of(&bridge, &sid).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    if snapshot.status != SnapshotStatus::Ready {
        return error(
            StatusCode::CONFLICT,
            codes::SNAPSHOT_NOT_READY,
            format!(
                "snapshot {sid} is {}: nothing to restore yet",
                snapshot.status
            ),
        );
    }
    let provider = bridge.provider.provider();
    let spec = CreateSpec {
        operation_id: tag,
        request: CreateSandboxRequest::standard(provider, None, None),
        timeout_seconds: None,
    };
    let created = match bridge
        .provider
        .restore(&bridge.ctx(), &spec, &snapshot.native_id)
        .await
    {
        Ok(created) => created,
        Err(e) => return lifecycle_failure(&e, || snapshot_not_found(&sid)),
    };
    if let Err(r) = settled(&bridge, &created).await {
        return r;
    }
    axum::Json(api::Created {
        id: api::base32(created.native_id.as_bytes()),
        tag: Some(tag.to_string()),
    })
    .into_response()
}

async fn health() -> Response {
    axum::Json(serde_json::json!({ "ok": true })).into_response()
}

async fn payload_too_large(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    if resp.status() == StatusCode::PAYLOAD_TOO_LARGE
        && resp
            .headers()
            .get(header::CONTENT_TYPE)
            .is_none_or(|v| v != "application/json")
    {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the body exceeds {MAX_FILE_BYTES} bytes"),
        );
    }
    resp
}

/// The bridge contract over `provider`, accepting only `key` as the bearer key; the backend is
/// called without a credential (as `local` needs none).
pub fn router(provider: Arc<dyn SandboxProvider>, key: SecretString) -> Router {
    router_with_context(provider, key, CallContext::anonymous())
}

/// As [`router`], calling the backend with `backend` (its credential and routing context).
pub fn router_with_context(
    provider: Arc<dyn SandboxProvider>,
    key: SecretString,
    backend: CallContext,
) -> Router {
    let bridge = Arc::new(Bridge {
        provider,
        key,
        processes: Mutex::new(HashMap::new()),
        backend,
    });
    let api = Router::new()
        .route("/v1/sandbox", post(create).get(lookup))
        .route("/v1/sandbox/{id}", get(observe).delete(delete))
        .route("/v1/sandbox/{id}/running", get(running))
        .route("/v1/sandbox/{id}/exec", post(exec))
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
        .route("/v1/sandbox/{id}/stop", post(stop))
        .route("/v1/sandbox/{id}/resume", post(resume))
        .route("/v1/sandbox/{id}/snapshots", post(take_snapshot))
        .route(
            "/v1/snapshots/{sid}",
            get(get_snapshot).delete(delete_snapshot),
        )
        .route("/v1/snapshots/{sid}/restore", post(restore))
        .route(
            "/v1/sandbox/{id}/file/{*path}",
            get(read_file).put(write_file),
        )
        .layer(axum::middleware::from_fn_with_state(bridge.clone(), auth));
    Router::new()
        .merge(api)
        .route("/health", get(health))
        .layer(DefaultBodyLimit::max(MAX_FILE_BYTES))
        .layer(axum::middleware::from_fn(payload_too_large))
        .with_state(bridge)
}
