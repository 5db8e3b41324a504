//! The HTTP layer: routing, request ids, bodies, the error envelope. Thin by design: every
//! decision of meaning is made in `corral-service`.

use std::sync::Arc;
use std::time::Instant;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::{Next, from_fn};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use corral_errors::{ErrorCode, ErrorEnvelope};
use corral_service::Service;
use corral_service::error::ServiceError;
use corral_service::limiter::{Admission, PolicyState};
use corral_service::metrics::Histograms;
use futures::FutureExt as _;
use tracing::Instrument as _;
use utoipa_actix_web::AppExt as _;

use crate::extract::BodyLimit;

/// Largest body of `files/write` (see [`crate::extract::WriteBody`]).
pub const MAX_WRITE_BODY_BYTES: usize = <crate::extract::WriteBody as BodyLimit>::BYTES;
/// Largest body of `exec`.
pub const MAX_EXEC_BODY_BYTES: usize = <crate::extract::ExecBody as BodyLimit>::BYTES;
/// Largest body of every other endpoint.
pub const MAX_SMALL_BODY_BYTES: usize = <crate::extract::Small as BodyLimit>::BYTES;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The use cases.
    pub service: Service,
    /// The control plane's use cases (`/v1/control` and the console).
    pub control: corral_control::Control,
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

/// The v3 code a response carried, for metrics and logs (and the mark that a failure response
/// is already rendered, so the envelope middleware leaves it alone).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResponseCode(pub(crate) ErrorCode);

pub(crate) fn request_id(req: &HttpRequest) -> String {
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

pub(crate) fn envelope_response(
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

pub(crate) type Reply = Result<HttpResponse, Failure>;

/// Runs a use case; a panic in it answers `internal_error` instead of dropping the connection.
pub(crate) async fn caught<T>(
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

pub(crate) fn fail(req: &HttpRequest) -> impl Fn(ServiceError) -> Failure + '_ {
    move |err| Failure {
        err,
        request_id: request_id(req),
    }
}

/// Registers the public API (the sandbox API, the control plane and the email webhook): one
/// `service` call per handler, each carrying its own method,
/// path and `#[utoipa::path]` description, so the router and the OpenAPI document are built
/// from the same list. Operational endpoints (health, readiness, metrics, the document itself)
/// are outside the contract and outside the document.
pub fn api(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(crate::routes::create_sandbox)
        .service(crate::routes::list_sandboxes)
        .service(crate::routes::get_sandbox)
        .service(crate::routes::delete_sandbox)
        .service(crate::routes::run_command)
        .service(crate::routes::read_file)
        .service(crate::routes::write_file)
        .service(crate::routes::list_providers)
        .configure(crate::control::control_api)
        .configure(crate::control::webhook_api);
}

/// Operational endpoints: (path, operation name for metrics).
const OPS: [(&str, &str); 4] = [
    ("/healthz", "healthz"),
    ("/readyz", "readyz"),
    ("/metrics", "metrics"),
    ("/v1/openapi.json", "openapi"),
];

/// Every route: method, path template and operation id, read from the OpenAPI document (the
/// API) and [`OPS`]. Drives metrics names and the 405 answers.
fn route_table() -> &'static [(Method, String, String)] {
    static TABLE: std::sync::OnceLock<Vec<(Method, String, String)>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let doc = crate::openapi::document(&[]);
        let mut table = Vec::new();
        for (path, item) in &doc.paths.paths {
            let ops = [
                (Method::GET, &item.get),
                (Method::POST, &item.post),
                (Method::DELETE, &item.delete),
                (Method::PUT, &item.put),
                (Method::PATCH, &item.patch),
            ];
            for (method, op) in ops {
                if let Some(op) = op {
                    let id = op.operation_id.clone().unwrap_or_else(|| path.clone());
                    table.push((method, path.clone(), id));
                }
            }
        }
        for (path, name) in OPS {
            table.push((Method::GET, path.to_owned(), name.to_owned()));
        }
        table
    })
}

/// Whether `path` matches the route template (`{name}` matches one non-empty segment).
fn template_matches(template: &str, path: &str) -> bool {
    let (mut t, mut p) = (template.split('/'), path.split('/'));
    loop {
        match (t.next(), p.next()) {
            (None, None) => return true,
            (Some(ts), Some(ps)) => {
                let var = ts.starts_with('{') && ts.ends_with('}');
                if (var && ps.is_empty()) || (!var && ts != ps) {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

/// The operation id of the spec (or the ops endpoint) for a matched route, for metrics.
fn operation_name(method: &Method, pattern: Option<&str>) -> &'static str {
    let Some(pattern) = pattern else {
        return "unmatched";
    };
    route_table()
        .iter()
        .find(|(m, p, _)| m == method && p == pattern)
        .map_or("unmatched", |(_, _, id)| id.as_str())
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
    let refused = req
        .headers()
        .get(crate::head_guard::REFUSED_HEADER)
        .and_then(|v| crate::head_guard::refusal_of(v.as_bytes()));
    if let Some(refusal) = refused {
        return Ok(refused_head(req, refusal, &id, metrics.as_deref()));
    }
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
    let admission = res.request().extensions().get::<Admission>().cloned();
    if let Some(admission) = admission {
        rate_limit_headers(res.headers_mut(), &admission);
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

/// The answer to `head_guard`'s substitute for a request head it refused (too large, or not
/// a request head): the envelope, and the connection closes after it.
fn refused_head(
    req: ServiceRequest,
    refusal: crate::head_guard::Refusal,
    id: &str,
    metrics: Option<&Histograms>,
) -> ServiceResponse<BoxBody> {
    let code = ErrorCode::InvalidRequest;
    let mut resp = envelope_response(
        code,
        refusal.status(),
        ErrorEnvelope::new(code, refusal.message(), id.to_owned()),
        None,
    );
    resp.head_mut()
        .set_connection_type(actix_web::http::ConnectionType::Close);
    if let Ok(v) = HeaderValue::from_str(id) {
        resp.headers_mut()
            .insert(header::HeaderName::from_static("x-request-id"), v);
    }
    if let Some(m) = metrics {
        m.observe(&["unmatched", code.as_str()], std::time::Duration::ZERO);
    }
    tracing::info!(
        request_id = %id,
        status = refusal.status(),
        code = code.as_str(),
        "request head refused"
    );
    req.into_response(resp)
}

/// The `RateLimit-Policy` and `RateLimit` fields of the IETF draft
/// (draft-ietf-httpapi-ratelimit-headers): every policy that applied, as
/// `"per-key";q=100;w=5` (quota, window in seconds) and `"per-key";r=99;t=1` (remaining,
/// seconds until the quota is whole again).
fn rate_limit_headers(headers: &mut header::HeaderMap, admission: &Admission) {
    if admission.policies.is_empty() {
        return;
    }
    let join = |f: &dyn Fn(&PolicyState) -> String| {
        admission
            .policies
            .iter()
            .map(f)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let policy = join(&|p| {
        format!(
            "\"{}\";q={};w={}",
            p.name,
            p.rate.burst,
            p.rate.window_seconds()
        )
    });
    let state = join(&|p| format!("\"{}\";r={};t={}", p.name, p.remaining, p.reset_seconds));
    for (name, value) in [("ratelimit-policy", policy), ("ratelimit", state)] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(header::HeaderName::from_static(name), v);
        }
    }
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
    let mut app = actix_web::App::new()
        .app_data(web::Data::new(state))
        .wrap(from_fn(request_context))
        .into_utoipa_app()
        .configure(api)
        .into_app()
        .configure(crate::console::configure);
    for (path, _) in OPS {
        let handler = match path {
            "/healthz" => web::get().to(healthz),
            "/readyz" => web::get().to(readyz),
            "/metrics" => web::get().to(metrics),
            _ => web::get().to(openapi),
        };
        app = app.route(path, handler);
    }
    app.default_service(web::to(not_found))
}

/// No route matched: 405 with `Allow` when the path is known under other methods, else 404;
/// both with the `invalid_request` envelope (Stripe's precedent for unrecognized URLs).
async fn not_found(req: HttpRequest) -> HttpResponse {
    let path = req.path();
    let mut allowed: Vec<&str> = route_table()
        .iter()
        .filter(|(_, template, _)| template_matches(template, path))
        .map(|(m, _, _)| m.as_str())
        .collect();
    allowed.sort_unstable();
    allowed.dedup();
    let id = request_id(&req);
    if allowed.is_empty() {
        let err = ServiceError::invalid(format!(
            "no route {} {}; see /v1/openapi.json",
            req.method(),
            path
        ));
        return envelope_response(ErrorCode::InvalidRequest, 404, err.envelope(&id), None);
    }
    let allow = allowed.join(", ");
    let err = ServiceError::invalid(format!(
        "method {} is not allowed on {} (allowed: {allow})",
        req.method(),
        path,
    ));
    let mut resp = envelope_response(ErrorCode::InvalidRequest, 405, err.envelope(&id), None);
    if let Ok(v) = HeaderValue::from_str(&allow) {
        resp.headers_mut().insert(header::ALLOW, v);
    }
    resp
}

pub(crate) fn json_ok<T: serde::Serialize>(status: StatusCode, value: &T) -> HttpResponse {
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

async fn openapi(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(crate::openapi::document_json(
            &state.service.providers().providers,
        ))
}
