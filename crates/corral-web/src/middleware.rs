//! The request middleware and the answers no handler gives: the request id (header, log span,
//! error bodies), metrics by operation, the request's log line (every one, one in N or none,
//! as [`crate::request_log`] decides; 5xx and slow answers always), the envelope for every
//! failure actix produced on its own and for `head_guard`'s refused heads, the rate-limit
//! headers, and the 404/405 answers of unknown routes. Operation names and `Allow` lists come
//! from the OpenAPI document, so from the one operation list ([`crate::api`]).

use std::time::Instant;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use corral_errors::{ErrorCode, ErrorEnvelope};
use corral_service::error::ServiceError;
use corral_service::limiter::{Admission, PolicyState};
use corral_service::metrics::Histograms;
use futures::FutureExt as _;
use tracing::Instrument as _;

use crate::edge::Edge;
use crate::head_guard::{REFUSED_HEADER, Refusal, refusal_of};
use crate::ops::OPS;
use crate::reply::{RequestId, ResponseCode, envelope_response, request_id};
use crate::request_log::{Logged, RequestLog, RequestLogConfig};
use crate::state::AppState;

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

/// Whether a request gets a log line, by the request log of the listener serving it ([`Edge`],
/// put there by `listen::bind`), or by the default one for an app served without it (a
/// test's `init_service`).
fn decide(edge: Option<&Edge>, status: u16, took: std::time::Duration) -> Option<Logged> {
    static DEFAULT: std::sync::OnceLock<RequestLog> = std::sync::OnceLock::new();
    let log = match edge {
        Some(edge) => &edge.request_log,
        None => DEFAULT.get_or_init(|| RequestLog::new(RequestLogConfig::default())),
    };
    log.decide(status, took)
}

/// Writes the request's line, when there is one: at `warn` for a 5xx or a slow answer, else
/// at `info`. Called inside the request's span (which carries its id, method and path).
fn log_request(logged: Option<Logged>, status: u16, op: &str, code: &str, took_ms: u64) {
    let Some(logged) = logged else {
        return;
    };
    let warning = logged.is_warning();
    let logged = logged.as_str();
    if warning {
        tracing::warn!(status, operation = op, code, took_ms, logged, "request");
    } else {
        tracing::info!(status, operation = op, code, took_ms, logged, "request");
    }
}

/// Middleware: request id (header, log span, error bodies), metrics, the request's log line,
/// and the last-resort conversion of any non-JSON error into the envelope.
pub(crate) async fn request_context(
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
        .get(REFUSED_HEADER)
        .and_then(|v| refusal_of(v.as_bytes()));
    let edge = req
        .app_data::<web::Data<Edge>>()
        .map(|edge| edge.clone().into_inner());
    if let Some(refusal) = refused {
        let logged = decide(edge.as_deref(), refusal.status(), std::time::Duration::ZERO);
        return Ok(refused_head(req, refusal, &id, metrics.as_deref(), logged));
    }
    let method = req.method().clone();
    let path = req.path().to_owned();
    let span = tracing::info_span!("request", request_id = %id, %method, %path);
    let start = Instant::now();
    // (Not the request itself: a clone held here would stop the router from matching it.)
    let panic_page = req.app_data::<web::Data<PanicPage>>().map(|page| page.0);
    let result = std::panic::AssertUnwindSafe(next.call(req).instrument(span.clone()))
        .catch_unwind()
        .await;
    let result = match result {
        Ok(result) => result.map(ServiceResponse::map_into_boxed_body),
        Err(_panic) => Err(panicked(&path, panic_page, &id, &span)),
    };
    let mut res = match result {
        Ok(res) => res,
        Err(e) => {
            // An error no handler turned into a response: it still gets the envelope (a
            // panic's has its own answer already).
            let status = e.as_response_error().status_code();
            let code = code_for_status(status);
            let mut resp = match e.as_error::<Panicked>() {
                Some(panic) => panic.take(),
                None => {
                    let body = ErrorEnvelope::new(code, e.to_string(), id.clone());
                    envelope_response(code, status.as_u16(), body, code.retry_after_seconds(None))
                }
            };
            if let Ok(v) = HeaderValue::from_str(&id) {
                resp.headers_mut()
                    .insert(header::HeaderName::from_static("x-request-id"), v);
            }
            let took = start.elapsed();
            if let Some(m) = &metrics {
                m.observe(&["unmatched", code.as_str()], took);
            }
            let _enter = span.enter();
            log_request(
                decide(edge.as_deref(), status.as_u16(), took),
                status.as_u16(),
                "unmatched",
                code.as_str(),
                took.as_millis() as u64,
            );
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
    let status = res.status().as_u16();
    let _enter = span.enter();
    log_request(
        decide(edge.as_deref(), status, took),
        status,
        op,
        code,
        took.as_millis() as u64,
    );
    Ok(res)
}

/// How a mounted feature (the console) answers a request whose handler panicked, by the
/// request's path, when the request is its own: `None` leaves it the JSON envelope.
/// Registered as app data.
#[derive(Clone, Copy)]
pub struct PanicPage(pub fn(&str) -> Option<HttpResponse>);

/// A handler's panic, as an error carrying its answer.
#[derive(Debug)]
struct Panicked(std::cell::RefCell<Option<HttpResponse>>);

impl Panicked {
    /// The answer (once; an envelope without the request id after that).
    fn take(&self) -> HttpResponse {
        self.0.borrow_mut().take().unwrap_or_else(|| {
            let code = ErrorCode::InternalError;
            envelope_response(
                code,
                code.http_status(),
                ErrorEnvelope::new(code, "the request handler failed", "req_unknown"),
                None,
            )
        })
    }
}

impl std::fmt::Display for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request handler failed")
    }
}

impl actix_web::ResponseError for Panicked {
    fn status_code(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

/// The failure of a request whose handler panicked: a log line (without the panic's message,
/// which may quote a value; the panic hook has already written it and its place to stderr),
/// and `internal_error` as the envelope with the request's id, or the mounted feature's page
/// ([`PanicPage`]). The connection stays up; the request's state is dropped with it.
fn panicked(
    path: &str,
    page: Option<fn(&str) -> Option<HttpResponse>>,
    id: &str,
    span: &tracing::Span,
) -> actix_web::Error {
    span.in_scope(|| tracing::error!("request handler panicked"));
    let resp = page.and_then(|page| page(path)).unwrap_or_else(|| {
        let code = ErrorCode::InternalError;
        envelope_response(
            code,
            code.http_status(),
            ErrorEnvelope::new(code, "the request handler failed", id.to_owned()),
            None,
        )
    });
    Panicked(std::cell::RefCell::new(Some(resp))).into()
}

/// The answer to `head_guard`'s substitute for a request head it refused (too large, or not
/// a request head): the envelope, and the connection closes after it.
fn refused_head(
    req: ServiceRequest,
    refusal: Refusal,
    id: &str,
    metrics: Option<&Histograms>,
    logged: Option<Logged>,
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
    if logged.is_some() {
        tracing::info!(
            request_id = %id,
            status = refusal.status(),
            code = code.as_str(),
            "request head refused"
        );
    }
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

/// No route matched: 405 with `Allow` when the path is known under other methods, else 404;
/// both with the `invalid_request` envelope (Stripe's precedent for unrecognized URLs).
pub(crate) async fn not_found(req: HttpRequest) -> HttpResponse {
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
