//! Webhook endpoints over HTTP (project API key): make (the secret shown once), list,
//! remove, rotate the secret, and read recent deliveries. One `corral-service` call each.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, delete, get, post, web};
use corral_domain::{NewWebhook, Webhook, WebhookDeliveryList, WebhookList, WebhookWithSecret};
use corral_errors::ErrorCode;
use utoipa::IntoParams;

use crate::commands::query;
use crate::doc::{ANY, errors};
use crate::extract::{Authenticated, Json, Small};
use crate::reply::{Reply, fail, json_ok};
use crate::state::AppState;

errors!(CreateWebhookErrors: ANY, &[ErrorCode::PayloadTooLarge, ErrorCode::ControlPlaneConflict]);
errors!(WebhookErrors: ANY, &[ErrorCode::SandboxNotFound]);
errors!(ListWebhookErrors: ANY);

/// `GET /v1/webhooks/{id}/deliveries` query.
#[derive(serde::Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeliveriesQuery {
    /// Maximum deliveries returned; default 50.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
}

/// Register a webhook endpoint for the project's lifecycle events.
///
/// The URL is checked as bridge URLs are (http or https, no userinfo; every address it
/// resolves to public unless the operator allows the host), here and at every delivery.
/// Deliveries are signed as Standard Webhooks does; the answer carries the signing secret,
/// shown this once. At most 16 endpoints per project (`control_plane_conflict` past it).
#[utoipa::path(
    operation_id = "createWebhook", tag = "webhook-endpoints",
    request_body(content = NewWebhook, content_type = "application/json", description = "At most 64 KiB."),
    responses(
        (status = 201, description = "Made; the secret is shown only here.", body = WebhookWithSecret),
        CreateWebhookErrors,
    ))]
#[post("/v1/webhook-endpoints")]
pub(crate) async fn create_webhook(
    req: HttpRequest,
    caller: Authenticated,
    body: Json<NewWebhook, Small>,
    state: web::Data<AppState>,
) -> Reply {
    let made = state
        .service
        .create_webhook(&caller.0, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::CREATED, &made))
}

/// List the project's webhook endpoints (without their secrets), oldest first.
#[utoipa::path(
    operation_id = "listWebhooks", tag = "webhook-endpoints",
    responses(
        (status = 200, description = "The endpoints.", body = WebhookList),
        ListWebhookErrors,
    ))]
#[get("/v1/webhook-endpoints")]
pub(crate) async fn list_webhooks(
    req: HttpRequest,
    caller: Authenticated,
    state: web::Data<AppState>,
) -> Reply {
    let list = state
        .service
        .list_webhooks(&caller.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &list))
}

/// Remove a webhook endpoint: nothing more is sent to it; its pending deliveries go dead.
#[utoipa::path(
    operation_id = "deleteWebhook", tag = "webhook-endpoints",
    params(("id" = String, Path, description = "The endpoint's id (`whe_…`).")),
    responses(
        (status = 200, description = "Removed.", body = Webhook),
        WebhookErrors,
    ))]
#[delete("/v1/webhook-endpoints/{id}")]
pub(crate) async fn delete_webhook(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    state: web::Data<AppState>,
) -> Reply {
    let gone = state
        .service
        .delete_webhook(&caller.0, &id)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &gone))
}

/// Rotate an endpoint's signing secret.
///
/// The answer carries the new secret (shown this once); for 24 hours deliveries carry a
/// signature by the previous secret too, so receivers can switch without losing any.
#[utoipa::path(
    operation_id = "rotateWebhookSecret", tag = "webhook-endpoints",
    params(("id" = String, Path, description = "The endpoint's id (`whe_…`).")),
    responses(
        (status = 200, description = "Rotated; the new secret is shown only here.", body = WebhookWithSecret),
        WebhookErrors,
    ))]
#[post("/v1/webhook-endpoints/{id}/rotate")]
pub(crate) async fn rotate_webhook(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    state: web::Data<AppState>,
) -> Reply {
    let rotated = state
        .service
        .rotate_webhook(&caller.0, &id)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &rotated))
}

/// An endpoint's most recent deliveries: state (`pending`, `delivered`, `dead`), attempts,
/// the last status or error, when the next attempt is due.
#[utoipa::path(
    operation_id = "listWebhookDeliveries", tag = "webhook-endpoints",
    params(("id" = String, Path, description = "The endpoint's id (`whe_…`)."), DeliveriesQuery),
    responses(
        (status = 200, description = "Deliveries, newest first.", body = WebhookDeliveryList),
        WebhookErrors,
    ))]
#[get("/v1/webhook-endpoints/{id}/deliveries")]
pub(crate) async fn webhook_deliveries(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    state: web::Data<AppState>,
) -> Reply {
    let q: DeliveriesQuery = query(&req).map_err(fail(&req))?;
    let list = state
        .service
        .webhook_deliveries(&caller.0, &id, q.limit)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &list))
}
