//! The one list of documented operations. The router, the OpenAPI paths, the metrics
//! operation names and the 405 `Allow` lists all come from these `service(...)` calls.

/// Registers the public API (the sandbox API, MCP, the control plane and the email webhook): one
/// `service` call per handler, each carrying its own method, path and `#[utoipa::path]`
/// description, so the router and the OpenAPI document are built from the same list.
/// Operational endpoints (health, readiness, metrics, the document itself: `ops.rs`)
/// are outside the contract and outside the document.
pub fn api(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    use crate::{commands, events, lifecycle, sandbox, usage, webhooks};
    cfg.service(sandbox::create_sandbox)
        .service(sandbox::list_sandboxes)
        .service(sandbox::get_sandbox)
        .service(sandbox::delete_sandbox)
        .service(sandbox::run_command)
        .service(sandbox::read_file)
        .service(sandbox::write_file)
        .service(sandbox::list_providers)
        .service(lifecycle::stop_sandbox)
        .service(lifecycle::resume_sandbox)
        .service(lifecycle::create_snapshot)
        .service(lifecycle::fork_sandbox)
        .service(lifecycle::list_snapshots)
        .service(lifecycle::get_snapshot)
        .service(lifecycle::delete_snapshot)
        .service(commands::start_command)
        .service(commands::list_commands)
        .service(commands::get_command)
        .service(commands::command_output)
        .service(commands::write_stdin)
        .service(commands::signal_command)
        .service(events::list_events)
        .service(usage::get_usage)
        .service(usage::get_sandbox_usage)
        .service(webhooks::create_webhook)
        .service(webhooks::list_webhooks)
        .service(webhooks::delete_webhook)
        .service(webhooks::rotate_webhook)
        .service(webhooks::webhook_deliveries)
        .service(crate::mcp::call_mcp)
        .configure(crate::control::control_api)
        .configure(crate::control::webhook_api);
}
