//! The operational endpoints, outside the contract and outside the document: liveness with
//! build provenance, readiness, metrics, and the OpenAPI document itself.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::reply::{Reply, fail, json_ok};
use crate::state::AppState;

/// Operational endpoints: (path, operation name for metrics).
pub(crate) const OPS: [(&str, &str); 4] = [
    ("/healthz", "healthz"),
    ("/readyz", "readyz"),
    ("/metrics", "metrics"),
    ("/v1/openapi.json", "openapi"),
];

/// Registers every endpoint of [`OPS`] (`GET` only).
pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    for (path, _) in OPS {
        let handler = match path {
            "/healthz" => web::get().to(healthz),
            "/readyz" => web::get().to(readyz),
            "/metrics" => web::get().to(metrics),
            _ => web::get().to(openapi),
        };
        cfg.route(path, handler);
    }
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

async fn metrics(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let mut out = String::new();
    state.metrics.render(&mut out);
    if let Some(edge) = req.app_data::<web::Data<crate::edge::Edge>>() {
        edge.render(&mut out);
    }
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
