//! A reference bridge: Corral's bridge contract (`docs/bridge-contract.md`) served over any
//! [`SandboxProvider`] — in the `corral-bridge` binary, the `local` provider — so the whole
//! bridge path (client → `corral` → bridge client → bridge → sandbox) runs on one machine.
//!
//! It implements every route Corral uses and all of Corral's extensions (tag on create, lookup
//! by tag, observe by id, `env` on exec). Bridge ids are the backend's native ids in lowercase
//! base32, so they match the contract's `^[a-z2-7]{1,128}$`. Differences from Cloudflare's
//! Worker: paths are not confined to `/workspace` (the backend confines them to the sandbox),
//! a write into a missing directory is refused rather than creating it, and exec output is
//! sent when the command ends (as events all the same), since the backend's exec is not
//! streamed.
//!
//! Use it alone: `router(Arc::new(provider), key)` is an axum `Router`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use corral_domain::{CreateSandboxRequest, OperationId, SandboxStatus, limits};
use corral_provider::shell::shell_quote;
use corral_provider::{
    CallContext, CreateSpec, ExecSpec, ExposeSecret as _, ObservedSandbox, ProviderError,
    SandboxProvider, SecretString,
};
use corral_provider_bridge::api::{self, codes};
use subtle::ConstantTimeEq as _;

/// Largest file read or written, as Cloudflare's Worker (32 MiB).
pub const MAX_FILE_BYTES: usize = 32 * 1024 * 1024;
/// Deadline of a command that names none.
const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(300);
/// Base64 output bytes per event.
const CHUNK: usize = 16 * 1024;

struct Bridge {
    provider: Arc<dyn SandboxProvider>,
    key: SecretString,
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
    }
}

fn ctx() -> CallContext {
    CallContext::anonymous()
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
    match bridge.provider.create(&ctx(), &spec).await {
        Ok(created) => axum::Json(api::Created {
            id: api::base32(created.native_id.as_bytes()),
            tag: tag.map(|t| t.to_string()),
        })
        .into_response(),
        Err(e) => backend(&e),
    }
}

async fn lookup(State(bridge): St, Query(query): Query<HashMap<String, String>>) -> Response {
    let (Some(tag), 1) = (query.get("tag"), query.len()) else {
        return invalid("the query must be exactly `tag=<operation id>`");
    };
    let Ok(op) = tag.parse::<OperationId>() else {
        // Nothing this bridge created carries anything else.
        return axum::Json(api::SandboxList { sandboxes: vec![] }).into_response();
    };
    match bridge.provider.find_by_operation_id(&ctx(), &op).await {
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
    match bridge.provider.get(&ctx(), &native).await {
        Ok(s) if s.status.is_terminal() => Err(not_found(id)),
        Ok(s) => Ok(s),
        Err(ProviderError::NotFound { .. }) => Err(not_found(id)),
        Err(e) => Err(backend(&e)),
    }
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
        match bridge.provider.delete(&ctx(), &native).await {
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
    let native = match observed(&bridge, &id).await {
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
    match bridge.provider.exec(&ctx(), &native, &spec).await {
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
    let native = match observed(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    let path = format!("/{path}");
    match bridge
        .provider
        .read_file(&ctx(), &native, &path, MAX_FILE_BYTES)
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
    let native = match observed(&bridge, &id).await {
        Ok(s) => s.native_id,
        Err(r) => return r,
    };
    let path = format!("/{path}");
    match bridge
        .provider
        .write_file(&ctx(), &native, &path, &body)
        .await
    {
        Ok(()) => axum::Json(api::OkResponse { ok: true }).into_response(),
        Err(e) => file_error(&id, &path, &e),
    }
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

/// The bridge contract over `provider`, accepting only `key` as the bearer key.
pub fn router(provider: Arc<dyn SandboxProvider>, key: SecretString) -> Router {
    let bridge = Arc::new(Bridge { provider, key });
    let api = Router::new()
        .route("/v1/sandbox", post(create).get(lookup))
        .route("/v1/sandbox/{id}", get(observe).delete(delete))
        .route("/v1/sandbox/{id}/running", get(running))
        .route("/v1/sandbox/{id}/exec", post(exec))
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
