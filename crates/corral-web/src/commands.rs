//! Commands as durable jobs over HTTP: start (with `Idempotency-Key`), list, get (with
//! `?wait=`), output as JSON pages or Server-Sent Events that resume with `Last-Event-ID`,
//! stdin and signals. Each handler is one `corral-service` call; the SSE framing and its
//! keep-alive comments are the only logic here.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderMap};
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, get, post, web};
use corral_domain::{
    Command, CommandPage, CommandState, OutputEvent, OutputPage, SignalInput, StartCommandInput,
    StdinInput, StdinResult,
};
use corral_errors::ErrorCode;
use corral_service::commands::MAX_WAIT;
use corral_service::error::ServiceError;
use futures::{Stream, StreamExt as _};
use utoipa::IntoParams;

use crate::doc::{ANY, ON_SANDBOX, errors};
use crate::extract::{
    Authenticated, BodyLimit, ExecBody, IdempotencyKey, Inline, Json, Small, WorkspaceOnly,
};
use crate::reply::{Reply, fail, json_ok};
use crate::state::AppState;

/// A comment sent when an output stream has been quiet this long, so proxies and clients
/// keep the connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// 2 MiB: stdin (1 MiB of decoded bytes may arrive as ~1.4 MiB of base64).
pub struct StdinBody;
impl BodyLimit for StdinBody {
    const BYTES: usize = 2 * 1024 * 1024;
}

errors!(StartErrors: ANY, ON_SANDBOX, &[
    ErrorCode::SandboxStopped,
    ErrorCode::PayloadTooLarge,
    ErrorCode::InvalidIdempotencyKey,
    ErrorCode::IdempotencyConflict,
    ErrorCode::IdempotencyInProgress,
    ErrorCode::IdempotencyOutcomeUnknown,
    ErrorCode::IdempotencyUnavailable,
]);
errors!(CommandErrors: ANY, &[ErrorCode::InvalidSandboxId, ErrorCode::SandboxNotFound]);
errors!(StdinErrors: ANY, ON_SANDBOX, &[ErrorCode::PayloadTooLarge, ErrorCode::InvalidFileContent, ErrorCode::IdempotencyInProgress]);
errors!(SignalErrors: ANY, ON_SANDBOX);

/// Parses a query string into `T` (unknown parameters refused).
pub(crate) fn query<T: serde::de::DeserializeOwned>(req: &HttpRequest) -> Result<T, ServiceError> {
    web::Query::<T>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| ServiceError::invalid(format!("invalid query: {e}")))
}

/// `GET …/commands` query.
#[derive(serde::Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct CommandListQuery {
    /// Only commands in this state.
    #[param(inline)]
    state: Option<CommandState>,
    /// Opaque: the `nextCursor` of the previous page.
    #[param(pattern = r"^[0-9]{1,18}_cmd_[0-7][0-9a-hjkmnp-tv-z]{25}$")]
    cursor: Option<String>,
    /// Maximum commands returned; default 50.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
}

/// `GET …/commands/{cmd}` query.
#[derive(serde::Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct WaitQuery {
    /// Seconds to wait for the command to end before answering (at most 60; default 0).
    #[param(minimum = 0, maximum = 60)]
    wait: Option<u64>,
}

/// `GET …/commands/{cmd}/output` query.
#[derive(serde::Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct OutputQuery {
    /// Events after this sequence number (0, the default: from the start). `Last-Event-ID`
    /// wins when both are sent.
    #[param(minimum = 0)]
    after: Option<u64>,
}

/// The command path: sandbox id and command id.
#[derive(serde::Deserialize)]
pub(crate) struct CommandPath {
    id: String,
    cmd: String,
}

/// Start a command as a durable job.
///
/// Answers at once: 201 with the command (`running`, or `starting` when the provider's answer
/// to the start was lost: it is then looked up again and never started twice). The command
/// keeps running whatever happens to this request; follow it with `…/output`. With an
/// `Idempotency-Key`, the same request replays the stored answer (200,
/// `Idempotent-Replayed: true`).
#[utoipa::path(
    operation_id = "startCommand", tag = "commands",
    params(("id" = corral_domain::SandboxId, Path, description = "The opaque sandbox id from create."), IdempotencyKey, Inline<WorkspaceOnly>),
    request_body(content = StartCommandInput, content_type = "application/json",
        description = "At most 512 KiB."),
    responses(
        (status = 201, description = "Started (or its start is being confirmed: `starting`).", body = Command),
        (status = 200, description = "A replay of a completed start (header `Idempotent-Replayed: true`).", body = Command,
            headers(("Idempotent-Replayed" = String, description = "`true`"))),
        StartErrors,
    ))]
#[post("/v1/sandboxes/{id}/commands")]
pub(crate) async fn start_command(
    req: HttpRequest,
    caller: Authenticated,
    key: IdempotencyKey,
    id: web::Path<String>,
    inline: Inline<WorkspaceOnly>,
    body: Json<StartCommandInput, ExecBody>,
    state: web::Data<AppState>,
) -> Reply {
    let started = state
        .service
        .start_command(&caller.0, inline.access, &id, key.0.as_deref(), body.0)
        .await
        .map_err(fail(&req))?;
    let status = StatusCode::from_u16(started.status).unwrap_or(StatusCode::OK);
    let mut resp = HttpResponse::build(status);
    resp.content_type("application/json");
    if started.replayed {
        resp.insert_header(("Idempotent-Replayed", "true"));
    }
    Ok(resp.body(started.body))
}

/// List a sandbox's commands, newest first.
#[utoipa::path(
    operation_id = "listCommands", tag = "commands",
    params(("id" = corral_domain::SandboxId, Path, description = "The opaque sandbox id from create."), CommandListQuery),
    responses(
        (status = 200, description = "One page of commands, newest first.", body = CommandPage),
        CommandErrors,
    ))]
#[get("/v1/sandboxes/{id}/commands")]
pub(crate) async fn list_commands(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    state: web::Data<AppState>,
) -> Reply {
    let q: CommandListQuery = query(&req).map_err(fail(&req))?;
    let state_name = q.state.map(|s| s.as_str());
    let page = state
        .service
        .list_commands(&caller.0, &id, state_name, q.cursor.as_deref(), q.limit)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &page))
}

/// Get a command: its state, exit code, times and output byte counts.
///
/// With `?wait=N`, answers as soon as the command ends, or after N seconds with its state
/// then.
#[utoipa::path(
    operation_id = "getCommand", tag = "commands",
    params(
        ("id" = corral_domain::SandboxId, Path, description = "The opaque sandbox id from create."),
        ("cmd" = corral_domain::CommandId, Path, description = "The command id from start."),
        WaitQuery),
    responses(
        (status = 200, description = "The command.", body = Command),
        CommandErrors,
    ))]
#[get("/v1/sandboxes/{id}/commands/{cmd}")]
pub(crate) async fn get_command(
    req: HttpRequest,
    caller: Authenticated,
    path: web::Path<CommandPath>,
    state: web::Data<AppState>,
) -> Reply {
    let q: WaitQuery = query(&req).map_err(fail(&req))?;
    let wait = match q.wait {
        Some(w) if w > MAX_WAIT.as_secs() => {
            return Err(fail(&req)(ServiceError::invalid(format!(
                "`wait` must be from 0 to {}",
                MAX_WAIT.as_secs()
            ))));
        }
        w => w.map(Duration::from_secs),
    };
    let command = state
        .service
        .command(&caller.0, &path.id, &path.cmd, wait)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &command))
}

/// The resume point: `Last-Event-ID` (a reconnecting SSE client) or `?after=`.
pub(crate) fn resume_point(headers: &HeaderMap, after: Option<u64>) -> Result<u64, ServiceError> {
    // Ids are stored as signed 64-bit integers: a larger `after` is malformed, whether or not
    // a `Last-Event-ID` overrides it.
    if after.is_some_and(|a| i64::try_from(a).is_err()) {
        return Err(ServiceError::invalid(format!(
            "`after` must be at most {}",
            i64::MAX
        )));
    }
    match headers.get("last-event-id") {
        None => Ok(after.unwrap_or(0)),
        Some(v) => v
            .to_str()
            .ok()
            .map(str::trim)
            .and_then(|s| {
                if s.is_empty() {
                    Some(0)
                } else {
                    // An id past every stored one (ids are signed 64-bit) resumes after the
                    // end: nothing older follows. The header's schema allows 19 digits.
                    s.parse::<u64>()
                        .ok()
                        .map(|n| n.min(i64::MAX.unsigned_abs()))
                }
            })
            .ok_or_else(|| {
                ServiceError::invalid(
                    "Last-Event-ID must be the id of an event (a non-negative integer)",
                )
            }),
    }
}

/// Whether the client asked for Server-Sent Events.
pub(crate) fn wants_sse(req: &HttpRequest) -> bool {
    req.headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"))
}

/// An event that goes out as one `text/event-stream` frame.
pub trait SseEvent {
    /// Its `id` (what a reconnecting client sends back as `Last-Event-ID`).
    fn sse_id(&self) -> u64;
    /// Its `event` name.
    fn sse_name(&self) -> &'static str;
}

impl SseEvent for OutputEvent {
    fn sse_id(&self) -> u64 {
        self.seq()
    }
    fn sse_name(&self) -> &'static str {
        self.name()
    }
}

/// One event in the `text/event-stream` framing: `id`, `event` and the event as JSON `data`
/// (for output: the sequence number; `stdout`, `stderr`, `gap` or `exit`).
pub fn sse_frame<E: SseEvent + serde::Serialize>(event: &E) -> Bytes {
    // An event is plain data (numbers, strings, enums): encoding it cannot fail.
    let data = serde_json::to_string(event).unwrap_or_default();
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        event.sse_id(),
        event.sse_name()
    ))
}

/// The events as SSE frames, with a keep-alive comment whenever [`KEEP_ALIVE`] passes
/// without one; ends when the events do, or (for the client to reconnect) when reading them
/// fails.
pub fn sse_body<E: SseEvent + serde::Serialize + 'static>(
    events: impl Stream<Item = Result<E, ServiceError>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, actix_web::Error>> + 'static {
    let events = Box::pin(events);
    futures::stream::unfold(Some(events), |events| async move {
        let mut events = events?;
        match tokio::time::timeout(KEEP_ALIVE, events.next()).await {
            Err(_) => Some((Ok(Bytes::from_static(b": keep-alive\n\n")), Some(events))),
            Ok(Some(Ok(event))) => Some((Ok(sse_frame(&event)), Some(events))),
            Ok(Some(Err(e))) => {
                tracing::warn!(error = %e, "an event stream ended early; the client resumes");
                None
            }
            Ok(None) => None,
        }
    })
}

/// The headers of an SSE answer: no caching, and no buffering by reverse proxies (nginx
/// must pass each event on at once).
pub(crate) fn sse_response(
    body: impl Stream<Item = Result<Bytes, actix_web::Error>> + 'static,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

/// Read a command's output: every event after a point, in order, to the exit.
///
/// With `Accept: text/event-stream`, Server-Sent Events: one event per chunk (`stdout` or
/// `stderr` with its byte offset, UTF-8 text or base64), `gap` where bytes are lost, `exit`
/// at the end; each `id` is its sequence number, so a client reconnecting with
/// `Last-Event-ID` continues exactly there; a comment every 15 s of silence. Otherwise one
/// JSON page of events (pass `nextAfter` as `after` for the next).
#[utoipa::path(
    operation_id = "getCommandOutput", tag = "commands",
    params(
        ("id" = corral_domain::SandboxId, Path, description = "The opaque sandbox id from create."),
        ("cmd" = corral_domain::CommandId, Path, description = "The command id from start."),
        OutputQuery,
        ("Last-Event-ID" = Option<String>, Header, nullable = false, pattern = "^[0-9]{0,19}$", description = "Resume after this event (SSE reconnection): its id; empty: from the start.")),
    responses(
        (status = 200, description = "The events: a JSON page, or `text/event-stream`.", content(
            (OutputPage = "application/json"),
            (String = "text/event-stream"))),
        CommandErrors,
    ))]
#[get("/v1/sandboxes/{id}/commands/{cmd}/output")]
pub(crate) async fn command_output(
    req: HttpRequest,
    caller: Authenticated,
    path: web::Path<CommandPath>,
    state: web::Data<AppState>,
) -> Reply {
    let q: OutputQuery = query(&req).map_err(fail(&req))?;
    let after = resume_point(req.headers(), q.after).map_err(fail(&req))?;
    if !wants_sse(&req) {
        let page = state
            .service
            .command_output(&caller.0, &path.id, &path.cmd, after)
            .await
            .map_err(fail(&req))?;
        return Ok(json_ok(StatusCode::OK, &page));
    }
    let events = state
        .service
        .follow_output(&caller.0, &path.id, &path.cmd, after)
        .await
        .map_err(fail(&req))?;
    Ok(sse_response(sse_body(events)))
}

/// Write to a command's stdin (with an offset, so a resend after a lost answer writes
/// nothing twice), optionally closing it.
#[utoipa::path(
    operation_id = "writeCommandStdin", tag = "commands",
    params(
        ("id" = corral_domain::SandboxId, Path, description = "The opaque sandbox id from create."),
        ("cmd" = corral_domain::CommandId, Path, description = "The command id from start."),
        Inline<WorkspaceOnly>),
    request_body(content = StdinInput, content_type = "application/json",
        description = "At most 2 MiB of JSON."),
    responses(
        (status = 200, description = "Accepted.", body = StdinResult),
        StdinErrors,
    ))]
#[post("/v1/sandboxes/{id}/commands/{cmd}/stdin")]
pub(crate) async fn write_stdin(
    req: HttpRequest,
    caller: Authenticated,
    path: web::Path<CommandPath>,
    inline: Inline<WorkspaceOnly>,
    body: Json<StdinInput, StdinBody>,
    state: web::Data<AppState>,
) -> Reply {
    let result = state
        .service
        .write_stdin(&caller.0, inline.access, &path.id, &path.cmd, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &result))
}

/// Send a signal to a running command (one its provider's `commands.signals` lists; another
/// is refused before any provider call). An ended command is answered as it is.
#[utoipa::path(
    operation_id = "signalCommand", tag = "commands",
    params(
        ("id" = corral_domain::SandboxId, Path, description = "The opaque sandbox id from create."),
        ("cmd" = corral_domain::CommandId, Path, description = "The command id from start."),
        Inline<WorkspaceOnly>),
    request_body(content = SignalInput, content_type = "application/json",
        description = "At most 64 KiB."),
    responses(
        (status = 200, description = "Sent; the command as it was (follow it to see it end).", body = Command),
        SignalErrors,
    ))]
#[post("/v1/sandboxes/{id}/commands/{cmd}/signal")]
pub(crate) async fn signal_command(
    req: HttpRequest,
    caller: Authenticated,
    path: web::Path<CommandPath>,
    inline: Inline<WorkspaceOnly>,
    body: Json<SignalInput, Small>,
    state: web::Data<AppState>,
) -> Reply {
    let command = state
        .service
        .signal_command(&caller.0, inline.access, &path.id, &path.cmd, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &command))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resume_point_prefers_last_event_id_and_refuses_garbage() {
        let mut h = HeaderMap::new();
        assert_eq!(resume_point(&h, Some(7)).unwrap(), 7);
        assert_eq!(resume_point(&h, None).unwrap(), 0);
        h.insert(
            header::HeaderName::from_static("last-event-id"),
            header::HeaderValue::from_static("12"),
        );
        assert_eq!(resume_point(&h, Some(7)).unwrap(), 12);
        h.insert(
            header::HeaderName::from_static("last-event-id"),
            header::HeaderValue::from_static("-1"),
        );
        assert!(resume_point(&h, None).is_err());
        // Past the largest id: after the end, not an error.
        let mut far = HeaderMap::new();
        far.insert(
            actix_web::http::header::HeaderName::from_static("last-event-id"),
            actix_web::http::header::HeaderValue::from_static("9548238173727684926"),
        );
        assert_eq!(
            resume_point(&far, Some(11)).unwrap(),
            i64::MAX.unsigned_abs()
        );
    }

    #[test]
    fn frames_carry_the_sequence_as_id_and_the_stream_as_event_name() {
        let e = OutputEvent::output(5, corral_domain::OutputStream::Stderr, 10, b"x\n");
        assert_eq!(
            &sse_frame(&e)[..],
            &b"id: 5\nevent: stderr\ndata: {\"type\":\"output\",\"seq\":5,\"stream\":\"stderr\",\"offset\":10,\"data\":\"x\\n\",\"encoding\":\"utf8\"}\n\n"[..]
        );
    }
}
