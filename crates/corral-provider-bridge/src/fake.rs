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
//! /v1/sandbox/{id}`, `env` on exec, `sandbox_not_found`, `exec_timeout`);
//! [`Fake::start_plain`] serves only the Worker's routes, where — as with its Durable Objects
//! — any well-formed id names a sandbox, created on first use.

// Helpers answer refusals as ready responses; their size does not matter in a test fake.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use corral_domain::{CreateSandboxRequest, ProviderContext};
use corral_provider::shell::shell_quote;
use corral_provider::{Adapter, CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::host_shell::{RunOutcome, run_command};
use serde_json::{Value, json};

use crate::BridgeConfig;
use crate::api::{self, codes};

/// The bridge key the fake accepts.
pub const API_KEY: &str = "bridge_fake_key_0123";

/// Bytes of the SSE body per network write: small, so events arrive split.
const SSE_PIECE: usize = 7;

struct FakeSandbox {
    dir: tempfile::TempDir,
    tag: Option<String>,
}

struct Shared {
    api_key: String,
    extensions: bool,
    next: AtomicU64,
    sandboxes: Mutex<HashMap<String, FakeSandbox>>,
    exec_bodies: Mutex<Vec<Vec<u8>>>,
}

type St = State<Arc<Shared>>;

type Answer<T> = Result<T, Response>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

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
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
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
            sandboxes.insert(id.to_owned(), FakeSandbox { dir, tag: None });
        }
        sandboxes
            .get(id)
            .map(|s| s.dir.path().to_owned())
            .ok_or_else(|| invalid("unreachable"))
    }

    fn info(&self, id: &str) -> Option<api::SandboxInfo> {
        lock(&self.sandboxes).get(id).map(|s| api::SandboxInfo {
            id: id.to_owned(),
            running: true,
            tag: s.tag.clone(),
        })
    }
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
    let n = shared.next.fetch_add(1, Ordering::Relaxed);
    let id =
        crate::api::base32(format!("fake-{n:08}-{}", corral_domain::OperationId::new()).as_bytes());
    lock(&shared.sandboxes).insert(
        id.clone(),
        FakeSandbox {
            dir,
            tag: tag.clone(),
        },
    );
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
        .map(|(id, s)| api::SandboxInfo {
            id: id.clone(),
            running: true,
            tag: s.tag.clone(),
        })
        .collect();
    axum::Json(api::SandboxList { sandboxes }).into_response()
}

async fn observe(State(shared): St, Path(id): Path<String>) -> Response {
    if !api::is_sandbox_id(&id) {
        return invalid("sandbox id must match ^[a-z2-7]{1,128}$");
    }
    match shared.info(&id) {
        Some(info) => axum::Json(info).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            codes::SANDBOX_NOT_FOUND,
            format!("sandbox {id} does not exist"),
        ),
    }
}

async fn running(State(shared): St, Path(id): Path<String>) -> Response {
    if shared.extensions && api::is_sandbox_id(&id) && shared.info(&id).is_none() {
        return axum::Json(api::RunningResponse { running: false }).into_response();
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
    let shared = Arc::new(Shared {
        api_key: api_key.to_owned(),
        extensions,
        next: AtomicU64::new(1),
        sandboxes: Mutex::new(HashMap::new()),
        exec_bodies: Mutex::new(Vec::new()),
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
    } else {
        api.route("/v1/sandbox", post(create))
            .route("/v1/sandbox/{id}", axum::routing::delete(delete))
    };
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

    /// How many sandboxes exist.
    pub fn sandbox_count(&self) -> usize {
        lock(&self.shared.sandboxes).len()
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

    async fn start_with(extensions: bool) -> Self {
        let (router, handle) = router(API_KEY, extensions);
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
