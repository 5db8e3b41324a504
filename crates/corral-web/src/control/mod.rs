//! The control plane over HTTP: the 41 cookie-authenticated JSON operations under
//! `/v1/control` (tag `control-plane`, security scheme `session`) and the email webhook
//! `POST /v1/webhooks/email` (tag `webhooks`). As for the sandbox API, each handler carries its
//! method, path and `#[utoipa::path]`, and [`control_api`] registers them into the one
//! operation list ([`crate::api`]), so the router and the OpenAPI document come from the same
//! list.
//!
//! Handlers only parse and render: every rule (membership, roles, legal gating, versions) is
//! a use case of `corral-control`, whose `ControlError` maps to exactly one v3 code. The
//! session, CSRF and origin checks are in [`crate::session`], shared with the console. This
//! module only registers its children; they share nothing through it.

mod accounts;
mod endpoints;
mod identity;
mod mail_events;
mod projects;

/// Registers the 41 control-plane operations (see docs/control-plane.md, "Operations").
pub fn control_api(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    identity::register(cfg);
    accounts::register(cfg);
    projects::register(cfg);
    endpoints::register(cfg);
}

/// Registers `POST /v1/webhooks/email`.
pub fn webhook_api(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(mail_events::email_webhook);
}
