//! The E2B-compatible front door's routes, under `/e2b`: E2B's control API and its envd API
//! on one host (`E2B_API_URL` and `E2B_SANDBOX_URL` both point at `<server>/e2b`; every envd
//! call names its sandbox in `E2b-Sandbox-Id`). Translation lives in `corral-e2b`; this module
//! authenticates, bounds and reads bodies, and writes answers. Not part of the OpenAPI
//! document: the contract is E2B's (`docs/compat/e2b.md`).

use std::convert::Infallible;

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpMessage as _, HttpRequest, HttpResponse, web};
use corral_e2b::files::FilesQuery;
use corral_e2b::process::StreamOptions;
use corral_e2b::snapshots::SnapshotQuery;
use corral_e2b::{E2bError, FrontDoor, SandboxCaller, connect, control::ListQuery};
use corral_errors::ErrorCode;
use corral_service::Caller;
use futures::StreamExt as _;

use crate::extract::{BODY_TOTAL, read_body};
use crate::reply::{ResponseCode, json_ok, no_store};
use crate::sandbox::audit_sandbox_change;
use crate::state::AppState;
use corral_control::ApiSandboxAction;

/// Control-plane bodies (a create is a few hundred bytes).
const CONTROL_BODY: usize = 64 * 1024;
/// envd RPC bodies: a stdin write of up to 1 MiB, base64 and framed.
const RPC_BODY: usize = 2 * 1024 * 1024;
/// Uploads: one largest write and its multipart framing.
const UPLOAD_BODY: usize = corral_domain::limits::MAX_WRITE_BYTES + 64 * 1024;

/// Registers the routes (each answers 404 when the server runs without the door).
pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/e2b")
            .route("/sandboxes", web::post().to(create))
            .route("/v2/sandboxes", web::post().to(create))
            .route("/sandboxes", web::get().to(list_v1))
            .route("/v2/sandboxes", web::get().to(list_v2))
            .route("/sandboxes/{id}", web::get().to(get))
            .route("/sandboxes/{id}", web::delete().to(kill))
            .route("/sandboxes/{id}/timeout", web::post().to(set_timeout))
            .route("/sandboxes/{id}/pause", web::post().to(pause))
            .route("/sandboxes/{id}/resume", web::post().to(resume))
            .route("/sandboxes/{id}/connect", web::post().to(connect_sandbox))
            .route(
                "/v2/sandboxes/{id}/connect",
                web::post().to(connect_sandbox),
            )
            .route("/sandboxes/{id}/snapshots", web::post().to(create_snapshot))
            .route("/sandboxes/{id}/fork", web::post().to(fork))
            .route("/snapshots", web::get().to(list_snapshots))
            .route("/templates/{id}", web::delete().to(delete_template))
            .route(
                "/sandboxes/{id}/{action}",
                web::post().to(unsupported_action),
            )
            .route("/health", web::get().to(health))
            .route("/files", web::get().to(download))
            .route("/files", web::post().to(upload))
            .route("/process.Process/{method}", web::post().to(process))
            .route(
                "/filesystem.Filesystem/{method}",
                web::post().to(filesystem),
            ),
    );
}

/// The control API's answer for `e`: E2B's `{code, message}` body and status.
fn control_error(e: &E2bError) -> HttpResponse {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    marked(HttpResponse::build(status).json(e.body()), e)
}

/// A unary Connect error.
fn rpc_error(e: &E2bError) -> HttpResponse {
    let status =
        StatusCode::from_u16(e.connect_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    marked(HttpResponse::build(status).json(e.connect_body()), e)
}

/// envd's plain-HTTP routes (`/files`, `/health`) answer `{code, message}` like the control
/// API, with the Connect code's status (404 for a missing path, 401 for a bad token).
fn files_error(e: &E2bError) -> HttpResponse {
    let status =
        StatusCode::from_u16(e.files_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    marked(
        HttpResponse::build(status)
            .json(serde_json::json!({"code": status.as_u16(), "message": e.to_string()})),
        e,
    )
}

/// Tells the request middleware this failure is answered already (no envelope over it),
/// and with which v3 code for metrics and logs.
fn marked(mut resp: HttpResponse, e: &E2bError) -> HttpResponse {
    let code = match e {
        E2bError::Service { source } => source.code(),
        E2bError::Unauthenticated { .. } => ErrorCode::AuthenticationError,
        E2bError::NotFound { .. } => ErrorCode::SandboxNotFound,
        E2bError::Unsupported { .. } => ErrorCode::ProviderOperationUnavailable,
        E2bError::Fs { .. } => ErrorCode::FileOperationFailed,
        E2bError::InvalidArgument { .. } | E2bError::FailedPrecondition { .. } => {
            ErrorCode::InvalidRequest
        }
        // The only conflicts: paused already, or running already.
        E2bError::Conflict { .. } => ErrorCode::SandboxStopped,
    };
    resp.extensions_mut().insert(ResponseCode(code));
    resp
}

fn door(req: &HttpRequest) -> Result<(web::Data<AppState>, FrontDoor), E2bError> {
    let state = req
        .app_data::<web::Data<AppState>>()
        .cloned()
        .ok_or_else(|| E2bError::not_found("no such route"))?;
    let front = state
        .e2b
        .clone()
        .ok_or_else(|| E2bError::not_found("the E2B front door is not enabled on this server"))?;
    Ok((state, front))
}

fn header_str<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

fn source(req: &HttpRequest) -> String {
    crate::edge::client_address(req).map_or_else(|| "unknown".to_owned(), |a| a.to_string())
}

/// The control side's caller (`X-API-KEY`), throttled and rate-limited like the API's.
async fn control_caller(req: &HttpRequest) -> Result<(FrontDoor, Caller), E2bError> {
    let (front, caller, _) = control_caller_and_key(req).await?;
    Ok((front, caller))
}

/// [`control_caller`], with the key's public id (for the audit log) and the state.
async fn control_caller_and_key(
    req: &HttpRequest,
) -> Result<(FrontDoor, Caller, String), E2bError> {
    let (state, front) = door(req)?;
    let service = &state.service;
    let source = source(req);
    service.check_source(&source)?;
    let key = header_str(req, "x-api-key");
    let caller = match front.authenticate(key).await {
        Ok(c) => c,
        Err(e) => {
            if key.is_some() {
                service.authentication_failed(&source);
            }
            return Err(e);
        }
    };
    let key_id = key
        .and_then(|k| k.trim().split('_').nth(1))
        .unwrap_or("unknown")
        .to_owned();
    admit(req, &state, &caller, &key_id)?;
    Ok((front, caller, key_id))
}

/// The envd side's caller (`E2b-Sandbox-Id` and `X-Access-Token`), rate-limited per sandbox.
async fn sandbox_caller(req: &HttpRequest) -> Result<(FrontDoor, SandboxCaller), E2bError> {
    let (state, front) = door(req)?;
    let service = &state.service;
    let source = source(req);
    service.check_source(&source)?;
    let sc = match front
        .sandbox_caller(
            header_str(req, "e2b-sandbox-id"),
            header_str(req, "x-access-token"),
        )
        .await
    {
        Ok(sc) => sc,
        Err(e) => {
            if matches!(e, E2bError::Unauthenticated { .. }) {
                service.authentication_failed(&source);
            }
            return Err(e);
        }
    };
    admit(req, &state, &sc.caller, &format!("e2b-{}", sc.sandbox))?;
    Ok((front, sc))
}

fn admit(
    req: &HttpRequest,
    state: &AppState,
    caller: &Caller,
    key_id: &str,
) -> Result<(), E2bError> {
    match state.service.admit(caller, key_id) {
        Ok(admission) => {
            req.extensions_mut().insert(admission);
            Ok(())
        }
        Err((e, admission)) => {
            req.extensions_mut().insert(admission);
            Err(e.into())
        }
    }
}

async fn body(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
) -> Result<web::Bytes, E2bError> {
    let mut payload = payload.into_inner();
    Ok(read_body(req, &mut payload, limit, BODY_TOTAL)
        .await?
        .freeze())
}

async fn create(req: HttpRequest, payload: web::Payload) -> HttpResponse {
    let run = async {
        let (front, caller, key_id) = control_caller_and_key(&req).await?;
        let body = body(&req, payload, CONTROL_BODY).await?;
        let created = front
            .create(&caller, header_str(&req, "idempotency-key"), &body)
            .await?;
        Ok::<_, E2bError>((caller, key_id, created))
    };
    match run.await {
        Ok((caller, key_id, created)) => {
            if !created.replayed
                && let Some(state) = req.app_data::<web::Data<AppState>>()
            {
                audit_sandbox_change(
                    state,
                    caller.project_id(),
                    &key_id,
                    ApiSandboxAction::Create,
                    &created.answer.sandbox_id,
                    created.provider.as_str(),
                )
                .await;
            }
            no_store(json_ok(StatusCode::CREATED, &created.answer))
        }
        Err(e) => control_error(&e),
    }
}

async fn connect_sandbox(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    let run = async {
        let (front, caller) = control_caller(&req).await?;
        let body = body(&req, payload, CONTROL_BODY).await?;
        front.connect(&caller, &path, &body).await
    };
    match run.await {
        // E2B: 201 when the connect resumed a paused sandbox, 200 when it was running.
        Ok((c, true)) => no_store(json_ok(StatusCode::CREATED, &c)),
        Ok((c, false)) => no_store(json_ok(StatusCode::OK, &c)),
        Err(e) => control_error(&e),
    }
}

/// `POST /sandboxes/{id}/pause`: 204 once paused; 409 when it was paused already.
async fn pause(req: HttpRequest, path: web::Path<String>, payload: web::Payload) -> HttpResponse {
    let run = async {
        let (front, caller) = control_caller(&req).await?;
        let body = body(&req, payload, CONTROL_BODY).await?;
        front.pause(&caller, &path, &body).await
    };
    match run.await {
        Ok(()) => HttpResponse::NoContent().finish(),
        Err(e) => control_error(&e),
    }
}

/// `POST /sandboxes/{id}/resume` (E2B's deprecated resume): 201 once it runs; 409 when it
/// was running already.
async fn resume(req: HttpRequest, path: web::Path<String>, payload: web::Payload) -> HttpResponse {
    let run = async {
        let (front, caller) = control_caller(&req).await?;
        let body = body(&req, payload, CONTROL_BODY).await?;
        front.resume(&caller, &path, &body).await
    };
    match run.await {
        Ok(c) => no_store(json_ok(StatusCode::CREATED, &c)),
        Err(e) => control_error(&e),
    }
}

async fn get(req: HttpRequest, path: web::Path<String>) -> HttpResponse {
    corral_service::failpoint::panic_point("e2b.get_sandbox");
    let run = async {
        let (front, caller) = control_caller(&req).await?;
        front.get(&caller, &path).await
    };
    match run.await {
        Ok(d) => no_store(json_ok(StatusCode::OK, &d)),
        Err(e) => control_error(&e),
    }
}

/// `GET /v2/sandboxes`' query parameters; any other is ignored, as E2B's API does.
#[derive(Debug, Default)]
struct ListParams {
    metadata: Option<String>,
    /// Every `state` given, comma-joined: the JavaScript SDK sends `state=running,paused`,
    /// the Python SDK `state=running&state=paused`.
    state: Option<String>,
    limit: Option<String>,
    next_token: Option<String>,
    template: Option<String>,
    started_after: Option<String>,
    order: Option<String>,
}

impl ListParams {
    fn parse(query: &str) -> Result<Self, E2bError> {
        let pairs = web::Query::<Vec<(String, String)>>::from_query(query)
            .map_err(|e| E2bError::invalid(format!("malformed query: {e}")))?
            .into_inner();
        let mut p = ListParams::default();
        for (k, v) in pairs {
            match k.as_str() {
                "state" => {
                    p.state = Some(match p.state.take() {
                        Some(before) => format!("{before},{v}"),
                        None => v,
                    });
                }
                "metadata" => p.metadata = Some(v),
                "limit" => p.limit = Some(v),
                "nextToken" => p.next_token = Some(v),
                "template" => p.template = Some(v),
                "startedAfter" => p.started_after = Some(v),
                "order" => p.order = Some(v),
                _ => {}
            }
        }
        Ok(p)
    }
}

async fn list(
    req: &HttpRequest,
) -> Result<(Vec<corral_e2b::wire::SandboxDetail>, Option<String>), E2bError> {
    let (front, caller) = control_caller(req).await?;
    let params = ListParams::parse(req.query_string())?;
    let limit = params
        .limit
        .map(|l| {
            l.parse::<u32>()
                .map_err(|_| E2bError::invalid("limit must be a whole number"))
        })
        .transpose()?;
    let query = ListQuery {
        metadata: params.metadata,
        state: params.state,
        limit,
        next_token: params.next_token,
        template: params.template,
        started_after: params.started_after,
        order: params.order,
    };
    front.list(&caller, &query).await
}

async fn list_v2(req: HttpRequest) -> HttpResponse {
    match list(&req).await {
        Ok((items, next)) => {
            let mut resp = json_ok(StatusCode::OK, &items);
            if let Some(v) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
                resp.headers_mut()
                    .insert(header::HeaderName::from_static("x-next-token"), v);
            }
            resp
        }
        Err(e) => control_error(&e),
    }
}

async fn list_v1(req: HttpRequest) -> HttpResponse {
    match list(&req).await {
        Ok((items, _)) => json_ok(StatusCode::OK, &items),
        Err(e) => control_error(&e),
    }
}

async fn kill(req: HttpRequest, path: web::Path<String>) -> HttpResponse {
    let run = async {
        let (front, caller, key_id) = control_caller_and_key(&req).await?;
        let provider = front.kill(&caller, &path).await?;
        Ok::<_, E2bError>((caller, key_id, provider))
    };
    match run.await {
        Ok((caller, key_id, provider)) => {
            if let Some(state) = req.app_data::<web::Data<AppState>>() {
                audit_sandbox_change(
                    state,
                    caller.project_id(),
                    &key_id,
                    ApiSandboxAction::Delete,
                    &path,
                    provider.as_str(),
                )
                .await;
            }
            HttpResponse::NoContent().finish()
        }
        Err(e) => control_error(&e),
    }
}

async fn set_timeout(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    let run = async {
        let (front, caller) = control_caller(&req).await?;
        let body = body(&req, payload, CONTROL_BODY).await?;
        front.set_timeout(&caller, &path, &body).await
    };
    match run.await {
        Ok(()) => HttpResponse::NoContent().finish(),
        Err(e) => control_error(&e),
    }
}

/// `POST /sandboxes/{id}/snapshots`: 201 with E2B's `SnapshotInfo` once the snapshot is made.
async fn create_snapshot(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    let run = async {
        let (front, caller) = control_caller(&req).await?;
        let body = body(&req, payload, CONTROL_BODY).await?;
        front
            .create_snapshot(&caller, &path, header_str(&req, "idempotency-key"), &body)
            .await
    };
    match run.await {
        Ok(info) => no_store(json_ok(StatusCode::CREATED, &info)),
        Err(e) => control_error(&e),
    }
}

/// `POST /sandboxes/{id}/fork`: 201 with one entry per copy once they run; each copy is
/// audited as a create.
async fn fork(req: HttpRequest, path: web::Path<String>, payload: web::Payload) -> HttpResponse {
    let run = async {
        let (front, caller, key_id) = control_caller_and_key(&req).await?;
        let body = body(&req, payload, CONTROL_BODY).await?;
        let forked = front
            .fork(&caller, &path, header_str(&req, "idempotency-key"), &body)
            .await?;
        Ok::<_, E2bError>((caller, key_id, forked))
    };
    match run.await {
        Ok((caller, key_id, forked)) => {
            if !forked.replayed
                && let Some(state) = req.app_data::<web::Data<AppState>>()
            {
                for copy in forked.answer.iter().filter_map(|o| o.sandbox.as_ref()) {
                    audit_sandbox_change(
                        state,
                        caller.project_id(),
                        &key_id,
                        ApiSandboxAction::Create,
                        &copy.sandbox_id,
                        forked.provider.as_str(),
                    )
                    .await;
                }
            }
            no_store(json_ok(StatusCode::CREATED, &forked.answer))
        }
        Err(e) => control_error(&e),
    }
}

/// `GET /snapshots`: E2B's `SnapshotInfo`s, `X-Next-Token` when more may follow.
async fn list_snapshots(req: HttpRequest) -> HttpResponse {
    let run = async {
        let (front, caller) = control_caller(&req).await?;
        let pairs = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
            .map_err(|e| E2bError::invalid(format!("malformed query: {e}")))?
            .into_inner();
        let mut query = SnapshotQuery::default();
        for (k, v) in pairs {
            match k.as_str() {
                "sandboxID" => query.sandbox_id = Some(v),
                "name" => query.name = Some(v),
                "nextToken" => query.next_token = Some(v),
                "limit" => {
                    query.limit = Some(
                        v.parse::<u32>()
                            .map_err(|_| E2bError::invalid("limit must be a whole number"))?,
                    );
                }
                _ => {}
            }
        }
        front.list_snapshots(&caller, &query).await
    };
    match run.await {
        Ok((items, next)) => {
            let mut resp = json_ok(StatusCode::OK, &items);
            if let Some(v) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
                resp.headers_mut()
                    .insert(header::HeaderName::from_static("x-next-token"), v);
            }
            resp
        }
        Err(e) => control_error(&e),
    }
}

/// `DELETE /templates/{id}`: a snapshot's id deletes it (204); any other template is not
/// found (404, the SDK's `False`).
async fn delete_template(req: HttpRequest, path: web::Path<String>) -> HttpResponse {
    let run = async {
        let (front, caller) = control_caller(&req).await?;
        front.delete_template(&caller, &path).await
    };
    match run.await {
        Ok(()) => HttpResponse::NoContent().finish(),
        Err(e) => control_error(&e),
    }
}

/// Refreshes and anything else: E2B features the door does not offer.
async fn unsupported_action(req: HttpRequest, path: web::Path<(String, String)>) -> HttpResponse {
    let run = async {
        control_caller(&req).await?;
        let action = &path.1;
        Err::<(), _>(E2bError::Unsupported {
            message: format!(
                "'{}' is not supported by Corral's E2B front door (docs/compat/e2b.md)",
                action.chars().take(40).collect::<String>()
            ),
        })
    };
    match run.await {
        Ok(()) => HttpResponse::NoContent().finish(),
        Err(e) => control_error(&e),
    }
}

/// envd's health: 204 while the sandbox runs, 502 once it is gone (the SDK's
/// `is_running()` reads a 502 as "not running").
async fn health(req: HttpRequest) -> HttpResponse {
    let run = async {
        let (front, sc) = sandbox_caller(&req).await?;
        front.running_now(&sc).await
    };
    match run.await {
        Ok(true) => HttpResponse::NoContent().finish(),
        // The SDKs read a 502 whose message says "was not found" as "killed or past its
        // timeout" (E2B's proxy words it so).
        Ok(false) | Err(E2bError::NotFound { .. }) => {
            let sandbox = header_str(&req, "e2b-sandbox-id").unwrap_or("");
            let mut resp = HttpResponse::BadGateway().json(serde_json::json!({
                "code": 502,
                "message": format!(
                    "The sandbox {} was not found",
                    sandbox.chars().take(80).collect::<String>()
                ),
            }));
            resp.extensions_mut()
                .insert(ResponseCode(ErrorCode::SandboxNotFound));
            resp
        }
        Err(e) => files_error(&e),
    }
}

fn files_query(req: &HttpRequest) -> Result<FilesQuery, E2bError> {
    #[derive(serde::Deserialize)]
    struct Q {
        path: Option<String>,
        username: Option<String>,
    }
    let q = web::Query::<Q>::from_query(req.query_string())
        .map_err(|e| E2bError::invalid(format!("malformed query: {e}")))?
        .into_inner();
    Ok(FilesQuery {
        path: q.path,
        username: q.username,
    })
}

async fn download(req: HttpRequest) -> HttpResponse {
    let run = async {
        let (front, sc) = sandbox_caller(&req).await?;
        let q = files_query(&req)?;
        front.download(&sc, &q).await
    };
    let gzip = header_str(&req, "accept-encoding").is_some_and(|a| {
        a.split(',').any(|c| {
            c.split(';')
                .next()
                .is_some_and(|c| c.trim().eq_ignore_ascii_case("gzip"))
        })
    });
    match run.await {
        Ok(bytes) if gzip => HttpResponse::Ok()
            .content_type("application/octet-stream")
            .insert_header((header::CONTENT_ENCODING, "gzip"))
            .body(corral_e2b::files::gzip(&bytes)),
        Ok(bytes) => HttpResponse::Ok()
            .content_type("application/octet-stream")
            .body(bytes),
        Err(e) => files_error(&e),
    }
}

async fn upload(req: HttpRequest, payload: web::Payload) -> HttpResponse {
    let run = async {
        let (front, sc) = sandbox_caller(&req).await?;
        let q = files_query(&req)?;
        let body = body(&req, payload, UPLOAD_BODY).await?;
        front
            .upload(
                &sc,
                &q,
                header_str(&req, "content-type"),
                header_str(&req, "content-encoding"),
                &body,
            )
            .await
    };
    match run.await {
        Ok(v) => json_ok(StatusCode::OK, &v),
        Err(e) => files_error(&e),
    }
}

fn content_type(req: &HttpRequest) -> String {
    header_str(req, "content-type")
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn stream_options(req: &HttpRequest) -> StreamOptions {
    let num = |name: &str| header_str(req, name).and_then(|v| v.trim().parse::<u64>().ok());
    StreamOptions {
        keepalive_seconds: num("keepalive-ping-interval"),
        timeout_ms: num("connect-timeout-ms"),
    }
}

/// A Connect server-stream answer: HTTP 200 and envelopes; a failure before the first event
/// is the end message alone, as Connect streams fail.
fn stream_reply(result: Result<corral_e2b::process::EnvelopeStream, E2bError>) -> HttpResponse {
    let stream = match result {
        Ok(s) => s,
        Err(e) => futures::stream::iter([connect::end(Some(&e))]).boxed(),
    };
    HttpResponse::Ok()
        .content_type("application/connect+json")
        .streaming(stream.map(|b| Ok::<_, Infallible>(web::Bytes::from(b))))
}

async fn process(req: HttpRequest, path: web::Path<String>, payload: web::Payload) -> HttpResponse {
    let method = path.into_inner();
    let streaming = matches!(method.as_str(), "Start" | "Connect");
    let wanted = if streaming {
        "application/connect+json"
    } else {
        "application/json"
    };
    if content_type(&req) != wanted {
        return HttpResponse::UnsupportedMediaType()
            .insert_header(("accept-post", wanted))
            .finish();
    }
    let prelude = async {
        let (front, sc) = sandbox_caller(&req).await?;
        let body = body(&req, payload, RPC_BODY).await?;
        Ok::<_, E2bError>((front, sc, body))
    };
    let (front, sc, body) = match prelude.await {
        Ok(p) => p,
        Err(e) if streaming => return stream_reply(Err(e)),
        Err(e) => return rpc_error(&e),
    };
    let opts = stream_options(&req);
    let unary = match method.as_str() {
        "Start" => return stream_reply(front.start(&sc, &body, opts).await),
        "Connect" => return stream_reply(front.connect_process(&sc, &body, opts).await),
        "List" => front.list_processes(&sc).await,
        "SendInput" => front.send_input(&sc, &body).await,
        "CloseStdin" => front.close_stdin(&sc, &body).await,
        "SendSignal" => front.send_signal(&sc, &body).await,
        other => Err(E2bError::Unsupported {
            message: format!(
                "process.Process/{} is not supported by Corral's E2B front door",
                other.chars().take(40).collect::<String>()
            ),
        }),
    };
    match unary {
        Ok(v) => json_ok(StatusCode::OK, &v),
        Err(e) => rpc_error(&e),
    }
}

async fn filesystem(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    let method = path.into_inner();
    if content_type(&req) != "application/json" {
        return HttpResponse::UnsupportedMediaType()
            .insert_header(("accept-post", "application/json"))
            .finish();
    }
    let run = async {
        let (front, sc) = sandbox_caller(&req).await?;
        let body = body(&req, payload, RPC_BODY).await?;
        match method.as_str() {
            "Stat" => front.stat(&sc, &body).await,
            "ListDir" => front.list_dir(&sc, &body).await,
            "MakeDir" => front.make_dir(&sc, &body).await,
            "Remove" => front.remove(&sc, &body).await,
            "Move" => front.move_entry(&sc, &body).await,
            other => Err(E2bError::Unsupported {
                message: format!(
                    "filesystem.Filesystem/{} is not supported by Corral's E2B front door",
                    other.chars().take(40).collect::<String>()
                ),
            }),
        }
    };
    match run.await {
        Ok(v) => json_ok(StatusCode::OK, &v),
        Err(e) => rpc_error(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::ListParams;

    #[test]
    fn a_lists_states_come_comma_joined_or_repeated() {
        let js = ListParams::parse("state=running%2Cpaused&limit=5").unwrap();
        assert_eq!(js.state.as_deref(), Some("running,paused"));
        assert_eq!(js.limit.as_deref(), Some("5"));
        let py = ListParams::parse("state=running&state=paused&metadata=k%3Dv").unwrap();
        assert_eq!(py.state.as_deref(), Some("running,paused"));
        assert_eq!(py.metadata.as_deref(), Some("k=v"));
        let none = ListParams::parse("nextToken=abc&other=1").unwrap();
        assert_eq!(none.state, None);
        assert_eq!(none.next_token.as_deref(), Some("abc"));
    }
}
