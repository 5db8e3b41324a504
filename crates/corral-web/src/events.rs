//! Lifecycle events over HTTP: `GET /v1/events` as JSON pages or Server-Sent Events that
//! resume with `Last-Event-ID`. One `corral-service` call per request; the framing is
//! shared with command output.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, get, web};
use corral_domain::{EventPage, LifecycleEvent};
use corral_errors::ErrorCode;
use utoipa::IntoParams;

use crate::commands::{SseEvent, query, resume_point, sse_body, sse_response, wants_sse};
use crate::doc::{ANY, errors};
use crate::extract::Authenticated;
use crate::reply::{Reply, fail, json_ok};
use crate::state::AppState;

errors!(EventErrors: ANY, &[ErrorCode::InvalidSandboxId, ErrorCode::SandboxNotFound]);

impl SseEvent for LifecycleEvent {
    fn sse_id(&self) -> u64 {
        self.id
    }
    fn sse_name(&self) -> &'static str {
        self.kind.as_str()
    }
}

/// `GET /v1/events` query.
#[derive(serde::Deserialize, IntoParams)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct EventQuery {
    /// Events after this id (0, the default: from the oldest kept). `Last-Event-ID` wins
    /// when both are sent.
    #[param(minimum = 0)]
    after: Option<u64>,
    /// Maximum events in a JSON page; default 100.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// Only this sandbox's events (a sandbox of the key's project, deleted ones included).
    #[param(value_type = Option<corral_domain::SandboxId>)]
    sandbox_id: Option<String>,
}

/// Read the project's lifecycle events, oldest first.
///
/// `sandbox.created`, `sandbox.status_changed`, `sandbox.deleted`, `command.started` and
/// `command.exited`, each appended in the same transaction as the change it reports, with
/// ids, states, exit codes and durations only (never a command line or output). Ids order
/// the project's events; events older than the server's retention (30 days by default) are
/// removed. With `Accept: text/event-stream`, Server-Sent Events without end: each `id` is
/// the event's, `event` its type, so a client reconnecting with `Last-Event-ID` continues
/// exactly there; a comment every 15 s of silence. Otherwise one JSON page (pass
/// `nextAfter` as `after` for the next).
#[utoipa::path(
    operation_id = "listEvents", tag = "events",
    params(
        EventQuery,
        ("Last-Event-ID" = Option<String>, Header, nullable = false, pattern = "^[0-9]{0,19}$", description = "Resume after this event (SSE reconnection): its id; empty: from the start.")),
    responses(
        (status = 200, description = "The events: a JSON page, or `text/event-stream`.", content(
            (EventPage = "application/json"),
            (String = "text/event-stream"))),
        EventErrors,
    ))]
#[get("/v1/events")]
pub(crate) async fn list_events(
    req: HttpRequest,
    caller: Authenticated,
    state: web::Data<AppState>,
) -> Reply {
    let q: EventQuery = query(&req).map_err(fail(&req))?;
    let after = resume_point(req.headers(), q.after).map_err(fail(&req))?;
    let sandbox = q.sandbox_id.as_deref();
    if !wants_sse(&req) {
        let page = state
            .service
            .events(&caller.0, after, q.limit, sandbox)
            .await
            .map_err(fail(&req))?;
        return Ok(json_ok(StatusCode::OK, &page));
    }
    let events = state
        .service
        .follow_events(&caller.0, after, sandbox)
        .await
        .map_err(fail(&req))?;
    Ok(sse_response(sse_body(events)))
}
