//! Operations 37–41: a project's webhook endpoints from the control plane — the sandbox API's
//! `/v1/webhook-endpoints` behind the session and the project's roles (members read, admins
//! change; changes audited). The signing secret is in the create and rotate answers only,
//! with `Cache-Control: no-store`.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, delete, get, post, web};
use corral_control::ProjectId;
use corral_domain::{NewWebhook, Webhook, WebhookDeliveryList, WebhookList, WebhookWithSecret};
use corral_errors::ErrorCode;

use crate::doc::{CONTROL_COMMON, CONTROL_MUTATION, errors};
use crate::reply::{ControlFailure, ControlReply, fail, json_ok, no_store, parse_id};
use crate::session::{CsrfToken, Session, SessionJson};
use crate::state::AppState;

pub(super) fn register(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(list_project_webhooks)
        .service(create_project_webhook)
        .service(rotate_project_webhook)
        .service(delete_project_webhook)
        .service(list_project_webhook_deliveries);
}

errors!(Read: CONTROL_COMMON);
errors!(Create: CONTROL_COMMON, CONTROL_MUTATION, &[
    ErrorCode::ControlPlaneConflict,
    ErrorCode::AccountDeleting,
]);
errors!(Change: CONTROL_COMMON, CONTROL_MUTATION, &[
    ErrorCode::SandboxNotFound,
    ErrorCode::AccountDeleting,
]);
errors!(ReadOne: CONTROL_COMMON, &[ErrorCode::SandboxNotFound]);

fn project_id(req: &HttpRequest, raw: &str) -> Result<ProjectId, ControlFailure> {
    parse_id(req, raw, "project")
}

/// The project's webhook endpoints, without secrets (any member).
#[utoipa::path(
    operation_id = "listProjectWebhooks", tag = "control-plane", security(("session" = [])),
    params(("project" = String, Path, description = "The project id.")),
    responses((status = 200, description = "The endpoints.", body = WebhookList), Read))]
#[get("/v1/control/projects/{project}/webhooks")]
pub(crate) async fn list_project_webhooks(
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path)?;
    let list = state
        .control
        .list_webhooks(&session.0.actor, project)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &list))
}

/// Add a webhook endpoint (admin); its signing secret is in this answer only.
#[utoipa::path(
    operation_id = "createProjectWebhook", tag = "control-plane", security(("session" = [])),
    params(CsrfToken, ("project" = String, Path, description = "The project id.")),
    request_body(content = NewWebhook, content_type = "application/json"),
    responses((status = 201, description = "Added; the secret is shown this once.", body = WebhookWithSecret), Create))]
#[post("/v1/control/projects/{project}/webhooks")]
pub(crate) async fn create_project_webhook(
    req: HttpRequest,
    session_body: SessionJson<NewWebhook>,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let project = project_id(&req, &path)?;
    let made = state
        .control
        .create_webhook(&session.0.actor, project, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(no_store(json_ok(StatusCode::CREATED, &made)))
}

/// Give an endpoint a new signing secret (admin), shown this once; the previous one keeps
/// signing during the overlap.
#[utoipa::path(
    operation_id = "rotateProjectWebhook", tag = "control-plane", security(("session" = [])),
    params(
        CsrfToken,
        ("project" = String, Path, description = "The project id."),
        ("id" = String, Path, description = "The endpoint id (`whe_…`)."),
    ),
    responses((status = 200, description = "Rotated; the new secret is shown this once.", body = WebhookWithSecret), Change))]
#[post("/v1/control/projects/{project}/webhooks/{id}/rotate")]
pub(crate) async fn rotate_project_webhook(
    req: HttpRequest,
    session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path.0)?;
    let rotated = state
        .control
        .rotate_webhook(&session.0.actor, project, &path.1)
        .await
        .map_err(fail(&req))?;
    Ok(no_store(json_ok(StatusCode::OK, &rotated)))
}

/// Remove an endpoint (admin); its pending deliveries are dropped.
#[utoipa::path(
    operation_id = "deleteProjectWebhook", tag = "control-plane", security(("session" = [])),
    params(
        CsrfToken,
        ("project" = String, Path, description = "The project id."),
        ("id" = String, Path, description = "The endpoint id (`whe_…`)."),
    ),
    responses((status = 200, description = "Removed.", body = Webhook), Change))]
#[delete("/v1/control/projects/{project}/webhooks/{id}")]
pub(crate) async fn delete_project_webhook(
    req: HttpRequest,
    session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path.0)?;
    let removed = state
        .control
        .delete_webhook(&session.0.actor, project, &path.1)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &removed))
}

/// An endpoint's latest deliveries, newest first (any member).
#[utoipa::path(
    operation_id = "listProjectWebhookDeliveries", tag = "control-plane", security(("session" = [])),
    params(
        ("project" = String, Path, description = "The project id."),
        ("id" = String, Path, description = "The endpoint id (`whe_…`)."),
    ),
    responses((status = 200, description = "Deliveries, newest first (at most 50).", body = WebhookDeliveryList), ReadOne))]
#[get("/v1/control/projects/{project}/webhooks/{id}/deliveries")]
pub(crate) async fn list_project_webhook_deliveries(
    req: HttpRequest,
    session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path.0)?;
    let list = state
        .control
        .webhook_deliveries(&session.0.actor, project, &path.1, None)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &list))
}
