//! The HTTP layer: routing, request ids, bodies, the error envelope. Thin by design: every
//! decision of meaning is made in `corral-service`.

use std::sync::Arc;
use std::time::Instant;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::{Next, from_fn};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use corral_domain::{
    CreateSandboxRequest, ProviderContext, ReadFileInput, RunCommandInput, WriteFileInput, limits,
};
use corral_errors::{ErrorCode, ErrorEnvelope};
use corral_provider::SecretString;
use corral_service::error::ServiceError;
use corral_service::metrics::Histograms;
use corral_service::{Caller, InlineAccess, Service};
use futures::{FutureExt as _, StreamExt as _};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tracing::Instrument as _;

/// Largest body of `files/write`: 1 MiB of decoded content may arrive as ~1.4 MiB of base64,
/// or as up to 6 MiB of JSON-escaped text; the decoded limit is enforced by the service.
pub const MAX_WRITE_BODY_BYTES: usize = 7 * 1024 * 1024;
/// Largest body of `exec`: the command and the environment (64 KiB each) plus JSON escaping.
pub const MAX_EXEC_BODY_BYTES: usize = 512 * 1024;
/// Largest body of every other endpoint.
pub const MAX_SMALL_BODY_BYTES: usize = 64 * 1024;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The use cases.
    pub service: Service,
    /// Request metrics.
    pub metrics: Arc<Histograms>,
    /// Build provenance for `/healthz`.
    pub build: BuildInfo,
}

/// Build provenance, captured at compile time.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildInfo {
    /// The crate version.
    pub version: &'static str,
    /// The git commit, when the build knew it (`CORRAL_GIT_COMMIT`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<&'static str>,
    /// The build time, when the build knew it (`CORRAL_BUILD_TIME`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_time: Option<&'static str>,
}

impl BuildInfo {
    /// This binary's provenance.
    pub fn current() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION"),
            git_commit: option_env!("CORRAL_GIT_COMMIT"),
            build_time: option_env!("CORRAL_BUILD_TIME"),
        }
    }
}

/// The request metric family.
pub fn request_metrics() -> Histograms {
    Histograms::new(
        "corral_http_request_duration_seconds",
        "HTTP requests by operation and outcome code (ok or a v3 error code)",
        &["operation", "code"],
    )
}

/// The request id of one request: `req_<ulid>`.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The v3 code a response carried, for metrics and logs.
#[derive(Debug, Clone, Copy)]
struct ResponseCode(ErrorCode);

fn request_id(req: &HttpRequest) -> String {
    req.extensions()
        .get::<RequestId>()
        .map_or_else(|| "req_unknown".to_owned(), |r| r.0.clone())
}

/// A failure rendered as the JSON envelope.
pub fn error_response(err: &ServiceError, request_id: &str) -> HttpResponse {
    envelope_response(
        err.code(),
        err.code().http_status(),
        err.envelope(request_id),
        err.retry_after_seconds(),
    )
}

fn envelope_response(
    code: ErrorCode,
    status: u16,
    body: ErrorEnvelope,
    retry_after: Option<u64>,
) -> HttpResponse {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = HttpResponse::build(status);
    if let Some(secs) = retry_after {
        resp.insert_header((header::RETRY_AFTER, secs.to_string()));
    }
    let mut resp = resp.json(body);
    resp.extensions_mut().insert(ResponseCode(code));
    resp
}

/// A handler failure; renders as the envelope with the request's id.
#[derive(Debug)]
pub struct Failure {
    err: ServiceError,
    request_id: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.err)
    }
}

impl actix_web::ResponseError for Failure {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.err.code().http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse<BoxBody> {
        error_response(&self.err, &self.request_id)
    }
}

type Reply = Result<HttpResponse, Failure>;

/// Runs a use case; a panic in it answers `internal_error` instead of dropping the connection.
async fn caught<T>(
    req: &HttpRequest,
    fut: impl Future<Output = Result<T, ServiceError>>,
) -> Result<T, Failure> {
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(result) => result.map_err(fail(req)),
        Err(_panic) => {
            tracing::error!("a request handler panicked");
            Err(fail(req)(ServiceError::internal(
                "the request handler failed",
            )))
        }
    }
}

fn fail(req: &HttpRequest) -> impl Fn(ServiceError) -> Failure + '_ {
    move |err| Failure {
        err,
        request_id: request_id(req),
    }
}

/// Routes every endpoint. Unknown paths answer 404 and wrong methods 405, both with the
/// `invalid_request` envelope (Stripe's precedent for unrecognized URLs).
pub fn routes(cfg: &mut web::ServiceConfig) {
    let resource = |path: &str| web::resource(path).default_service(web::to(method_not_allowed));
    cfg.service(resource("/healthz").route(web::get().to(healthz)))
        .service(resource("/readyz").route(web::get().to(readyz)))
        .service(resource("/metrics").route(web::get().to(metrics)))
        .service(resource("/v1/openapi.json").route(web::get().to(openapi)))
        .service(resource("/v1/providers").route(web::get().to(list_providers)))
        .service(
            resource("/v1/sandboxes")
                .route(web::post().to(create_sandbox))
                .route(web::get().to(list_sandboxes)),
        )
        .service(
            resource("/v1/sandboxes/{id}")
                .route(web::get().to(get_sandbox))
                .route(web::delete().to(delete_sandbox)),
        )
        .service(resource("/v1/sandboxes/{id}/exec").route(web::post().to(run_command)))
        .service(resource("/v1/sandboxes/{id}/files/read").route(web::post().to(read_file)))
        .service(resource("/v1/sandboxes/{id}/files/write").route(web::post().to(write_file)))
        .default_service(web::to(not_found));
}

/// The operation id of the spec (or the ops endpoint) for a matched route, for metrics.
fn operation_name(method: &Method, pattern: Option<&str>) -> &'static str {
    match (method.as_str(), pattern.unwrap_or("")) {
        ("POST", "/v1/sandboxes") => "createSandbox",
        ("GET", "/v1/sandboxes") => "listSandboxes",
        ("GET", "/v1/sandboxes/{id}") => "getSandbox",
        ("DELETE", "/v1/sandboxes/{id}") => "deleteSandbox",
        ("POST", "/v1/sandboxes/{id}/exec") => "runSandboxCommand",
        ("POST", "/v1/sandboxes/{id}/files/read") => "readSandboxFile",
        ("POST", "/v1/sandboxes/{id}/files/write") => "writeSandboxFile",
        ("GET", "/v1/providers") => "listProviders",
        ("GET", "/v1/openapi.json") => "openapi",
        ("GET", "/healthz") => "healthz",
        ("GET", "/readyz") => "readyz",
        ("GET", "/metrics") => "metrics",
        _ => "unmatched",
    }
}

/// Middleware: request id (header, log span, error bodies), metrics, one log line per
/// request, and the last-resort conversion of any non-JSON error into the envelope.
pub async fn request_context(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let id = format!(
        "req_{}",
        ulid::Ulid::generate().to_string().to_ascii_lowercase()
    );
    req.extensions_mut().insert(RequestId(id.clone()));
    let metrics = req
        .app_data::<web::Data<AppState>>()
        .map(|s| s.metrics.clone());
    let method = req.method().clone();
    let path = req.path().to_owned();
    let span = tracing::info_span!("request", request_id = %id, %method, %path);
    let start = Instant::now();
    let result = next.call(req).instrument(span.clone()).await;
    let mut res = match result {
        Ok(res) => res.map_into_boxed_body(),
        Err(e) => {
            // An error no handler turned into a response: it still gets the envelope.
            let status = e.as_response_error().status_code();
            let code = code_for_status(status);
            let body = ErrorEnvelope::new(code, e.to_string(), id.clone());
            let mut resp =
                envelope_response(code, status.as_u16(), body, code.retry_after_seconds(None));
            if let Ok(v) = HeaderValue::from_str(&id) {
                resp.headers_mut()
                    .insert(header::HeaderName::from_static("x-request-id"), v);
            }
            if let Some(m) = &metrics {
                m.observe(&["unmatched", code.as_str()], start.elapsed());
            }
            return Err(actix_web::error::InternalError::from_response(e, resp).into());
        }
    };
    if res.status().as_u16() >= 400 && res.response().extensions().get::<ResponseCode>().is_none() {
        let status = res.status();
        let code = code_for_status(status);
        let message = status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_owned();
        let resp = envelope_response(
            code,
            status.as_u16(),
            ErrorEnvelope::new(code, message, id.clone()),
            code.retry_after_seconds(None),
        );
        res = res.into_response(resp);
    }
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut()
            .insert(header::HeaderName::from_static("x-request-id"), v);
    }
    let code = res
        .response()
        .extensions()
        .get::<ResponseCode>()
        .map_or("ok", |c| c.0.as_str());
    let op = operation_name(&method, res.request().match_pattern().as_deref());
    let took = start.elapsed();
    if let Some(m) = metrics {
        m.observe(&[op, code], took);
    }
    let _enter = span.enter();
    tracing::info!(
        status = res.status().as_u16(),
        operation = op,
        code,
        took_ms = took.as_millis() as u64,
        "request"
    );
    Ok(res)
}

/// The v3 code for a status actix produced on its own (before any handler ran).
fn code_for_status(status: StatusCode) -> ErrorCode {
    match status.as_u16() {
        413 => ErrorCode::PayloadTooLarge,
        408 | 504 => ErrorCode::RequestTimeout,
        404 => ErrorCode::InvalidRequest,
        503 => ErrorCode::ProviderUnavailable,
        s if s >= 500 => ErrorCode::InternalError,
        _ => ErrorCode::InvalidRequest,
    }
}

/// The whole application: state, middleware and routes.
pub fn app(
    state: AppState,
) -> actix_web::App<
    impl actix_web::dev::ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    actix_web::App::new()
        .app_data(web::Data::new(state))
        .wrap(from_fn(request_context))
        .configure(routes)
}

async fn not_found(req: HttpRequest) -> HttpResponse {
    let err = ServiceError::invalid(format!(
        "no route {} {}; see /v1/openapi.json",
        req.method(),
        req.path()
    ));
    let mut env = err.envelope(&request_id(&req));
    env.error.code = ErrorCode::InvalidRequest;
    envelope_response(ErrorCode::InvalidRequest, 404, env, None)
}

async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    let pattern = req.match_pattern();
    let allowed: Vec<&str> = ["GET", "POST", "DELETE"]
        .into_iter()
        .filter(|m| {
            let method = Method::from_bytes(m.as_bytes()).unwrap_or(Method::GET);
            operation_name(&method, pattern.as_deref()) != "unmatched"
        })
        .collect();
    let err = ServiceError::invalid(format!(
        "method {} is not allowed on {} (allowed: {})",
        req.method(),
        req.path(),
        allowed.join(", ")
    ));
    let mut resp = envelope_response(
        ErrorCode::InvalidRequest,
        405,
        err.envelope(&request_id(&req)),
        None,
    );
    if let Ok(v) = HeaderValue::from_str(&allowed.join(", ")) {
        resp.headers_mut().insert(header::ALLOW, v);
    }
    resp
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ServiceError> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => {
            let text = v.to_str().map_err(|_| {
                ServiceError::invalid(format!("header {name} must be visible ASCII"))
            })?;
            let text = text.trim();
            if text.is_empty() {
                return Err(ServiceError::invalid(format!(
                    "header {name} must not be empty"
                )));
            }
            Ok(Some(text))
        }
    }
}

async fn authenticate(state: &AppState, req: &HttpRequest) -> Result<Caller, ServiceError> {
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""));
    state.service.authenticate(auth).await
}

/// The inline provider access of a request: `X-Provider-Credential` and the context headers.
fn inline_access(req: &HttpRequest) -> Result<InlineAccess, ServiceError> {
    let h = req.headers();
    let credential = header_text(h, "x-provider-credential")?.map(SecretString::from);
    let own = |name| header_text(h, name).map(|v| v.map(str::to_owned));
    Ok(InlineAccess {
        credential,
        context: ProviderContext {
            workspace: own("x-provider-workspace")?,
            team_id: own("x-provider-team-id")?,
            project_id: own("x-provider-project-id")?,
            bridge_url: own("x-provider-bridge-url")?,
        },
    })
}

/// Reads a JSON body of at most `limit` bytes and parses it into `T`.
async fn read_json<T: DeserializeOwned>(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<T, ServiceError> {
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
        let essence = ct.split(';').next().unwrap_or("").trim();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ServiceError::invalid(
                "Content-Type must be application/json",
            ));
        }
    }
    let too_large = || ServiceError::PayloadTooLarge {
        message: format!("the request body exceeds {limit} bytes"),
    };
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        && len > limit
    {
        return Err(too_large());
    }
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|e| ServiceError::invalid(format!("cannot read the body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    if body.is_empty() {
        return Err(ServiceError::invalid("a JSON request body is required"));
    }
    serde_json::from_slice(&body)
        .map_err(|e| ServiceError::invalid(format!("invalid JSON body: {e}")))
}

fn json_ok<T: serde::Serialize>(status: StatusCode, value: &T) -> HttpResponse {
    HttpResponse::build(status).json(value)
}

async fn healthz(state: web::Data<AppState>) -> HttpResponse {
    json_ok(
        StatusCode::OK,
        &serde_json::json!({"status": "ok", "build": state.build}),
    )
}

async fn readyz(req: HttpRequest, state: web::Data<AppState>) -> Reply {
    state.service.ready().await.map_err(fail(&req))?;
    Ok(json_ok(
        StatusCode::OK,
        &serde_json::json!({"status": "ready"}),
    ))
}

async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let mut out = String::new();
    state.metrics.render(&mut out);
    state.service.render_metrics(&mut out);
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(out)
}

async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(crate::openapi::document_json())
}

async fn list_providers(req: HttpRequest, state: web::Data<AppState>) -> Reply {
    authenticate(&state, &req).await.map_err(fail(&req))?;
    // The catalog never changes while the server runs: its JSON was encoded once.
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(state.service.providers_json().to_string()))
}

async fn create_sandbox(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Reply {
    let f = fail(&req);
    let caller = authenticate(&state, &req).await.map_err(&f)?;
    let access = inline_access(&req).map_err(&f)?;
    let key = match req.headers().get("idempotency-key") {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| {
            f(ServiceError::InvalidIdempotencyKey {
                message: "Idempotency-Key must be 1 to 255 printable ASCII characters".into(),
            })
        })?),
    };
    let body: CreateSandboxRequest = read_json(&req, payload, MAX_SMALL_BODY_BYTES)
        .await
        .map_err(&f)?;
    let created = caught(&req, state.service.create(&caller, access, key, body)).await?;
    let status = StatusCode::from_u16(created.status).unwrap_or(StatusCode::OK);
    let mut resp = HttpResponse::build(status);
    resp.content_type("application/json");
    if created.replayed {
        resp.insert_header(("Idempotent-Replayed", "true"));
    }
    Ok(resp.body(created.body))
}

/// `GET /v1/sandboxes` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    cursor: Option<String>,
    limit: Option<String>,
}

async fn list_sandboxes(req: HttpRequest, state: web::Data<AppState>) -> Reply {
    let f = fail(&req);
    let caller = authenticate(&state, &req).await.map_err(&f)?;
    let q = web::Query::<ListQuery>::from_query(req.query_string())
        .map_err(|e| f(ServiceError::invalid(format!("invalid query: {e}"))))?
        .into_inner();
    let limit = match q.limit {
        None => None,
        Some(l) => Some(l.parse::<u32>().map_err(|_| {
            f(ServiceError::invalid(format!(
                "`limit` must be an integer from 1 to {}",
                limits::MAX_PAGE_LIMIT
            )))
        })?),
    };
    let page = caught(
        &req,
        state.service.list(&caller, q.cursor.as_deref(), limit),
    )
    .await?;
    Ok(json_ok(StatusCode::OK, &page))
}

async fn get_sandbox(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Reply {
    let f = fail(&req);
    let caller = authenticate(&state, &req).await.map_err(&f)?;
    let access = inline_access(&req).map_err(&f)?;
    let sandbox = caught(&req, state.service.get(&caller, access, &path)).await?;
    Ok(json_ok(StatusCode::OK, &sandbox))
}

async fn delete_sandbox(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Reply {
    let f = fail(&req);
    let caller = authenticate(&state, &req).await.map_err(&f)?;
    let access = inline_access(&req).map_err(&f)?;
    let sandbox = caught(&req, state.service.delete(&caller, access, &path)).await?;
    Ok(json_ok(StatusCode::OK, &sandbox))
}

async fn run_command(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Reply {
    let f = fail(&req);
    let caller = authenticate(&state, &req).await.map_err(&f)?;
    let access = inline_access(&req).map_err(&f)?;
    let input: RunCommandInput = read_json(&req, payload, MAX_EXEC_BODY_BYTES)
        .await
        .map_err(&f)?;
    let result = caught(&req, state.service.exec(&caller, access, &path, input)).await?;
    Ok(json_ok(StatusCode::OK, &result))
}

async fn read_file(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Reply {
    let f = fail(&req);
    let caller = authenticate(&state, &req).await.map_err(&f)?;
    let access = inline_access(&req).map_err(&f)?;
    let input: ReadFileInput = read_json(&req, payload, MAX_SMALL_BODY_BYTES)
        .await
        .map_err(&f)?;
    let result = caught(&req, state.service.read_file(&caller, access, &path, input)).await?;
    Ok(json_ok(StatusCode::OK, &result))
}

async fn write_file(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Reply {
    let f = fail(&req);
    let caller = authenticate(&state, &req).await.map_err(&f)?;
    let access = inline_access(&req).map_err(&f)?;
    let input: WriteFileInput = read_json(&req, payload, MAX_WRITE_BODY_BYTES)
        .await
        .map_err(&f)?;
    let result = caught(
        &req,
        state.service.write_file(&caller, access, &path, input),
    )
    .await?;
    Ok(json_ok(StatusCode::OK, &result))
}
