//! The eight public sandbox operations: each handler carries its method and path (actix's
//! route macro) and its OpenAPI description (`#[utoipa::path]`), so the router and the document
//! are built from the same items (registered once, in [`crate::api`]). Handlers are a few
//! lines: the extractors of [`crate::extract`] do the repeated work, `corral-service` the rest;
//! a create (201, not a replay) or delete is then recorded in the owning account's audit log
//! (`corral-control`), with the API key as the actor.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, delete, get, post, web};
use corral_control::ApiSandboxAction;
use corral_domain::{
    CommandResult, CreateSandboxRequest, ProviderCatalog, ReadFileInput, ReadFileResult,
    RunCommandInput, Sandbox, SandboxId, SandboxPage, WriteFileInput, WriteFileResult,
};
use corral_errors::ErrorCode;

use crate::doc::{ANY, ON_SANDBOX, errors};
use crate::extract::{
    AllContext, Authenticated, ExecBody, IdempotencyKey, Inline, Json, ListQuery, Small,
    WorkspaceOnly, WriteBody,
};
use crate::reply::{Reply, fail, json_ok};
use crate::state::AppState;

errors!(CreateErrors: ANY, ON_SANDBOX, &[
    ErrorCode::CapabilityUnsupported,
    ErrorCode::SnapshotNotFound,
    ErrorCode::PayloadTooLarge,
    ErrorCode::InvalidIdempotencyKey,
    ErrorCode::IdempotencyConflict,
    ErrorCode::IdempotencyInProgress,
    ErrorCode::IdempotencyOutcomeUnknown,
    ErrorCode::IdempotencyUnavailable,
    ErrorCode::SandboxCreateOutcomeUnknown,
]);
errors!(ListErrors: ANY);
errors!(SandboxErrors: ANY, ON_SANDBOX);
errors!(ExecErrors: ANY, ON_SANDBOX, &[ErrorCode::PayloadTooLarge, ErrorCode::SandboxStopped]);
errors!(ReadErrors: ANY, ON_SANDBOX, &[
    ErrorCode::SandboxStopped,
    ErrorCode::PayloadTooLarge,
    ErrorCode::FileNotUtf8,
    ErrorCode::FileOperationFailed,
]);
errors!(WriteErrors: ANY, ON_SANDBOX, &[
    ErrorCode::SandboxStopped,
    ErrorCode::PayloadTooLarge,
    ErrorCode::InvalidFileContent,
    ErrorCode::FileOperationFailed,
]);
errors!(ProvidersErrors: &[
    ErrorCode::MissingApiKey,
    ErrorCode::AuthenticationError,
    ErrorCode::RateLimited,
    ErrorCode::SandboxRegistryUnavailable,
    ErrorCode::InternalError,
]);

/// Create a sandbox.
///
/// 201 with the new sandbox, status `creating`; with an `Idempotency-Key`, the same request
/// again replays the stored answer byte for byte (200, `Idempotent-Replayed: true`).
#[utoipa::path(
    operation_id = "createSandbox", tag = "sandboxes",
    params(IdempotencyKey, Inline<AllContext>),
    request_body(content = CreateSandboxRequest, content_type = "application/json",
        description = "At most 64 KiB."),
    responses(
        (status = 201, description = "Created; status `creating`.", body = Sandbox),
        (status = 200, description = "A replay of a completed create (header `Idempotent-Replayed: true`).", body = Sandbox,
            headers(("Idempotent-Replayed" = String, description = "`true`"))),
        CreateErrors,
    ))]
#[post("/v1/sandboxes")]
pub(crate) async fn create_sandbox(
    req: HttpRequest,
    caller: Authenticated,
    key: IdempotencyKey,
    inline: Inline<AllContext>,
    body: Json<CreateSandboxRequest, Small>,
    state: web::Data<AppState>,
) -> Reply {
    let created = state
        .service
        .create(&caller.0, inline.access, key.0.as_deref(), body.0)
        .await
        .map_err(fail(&req))?;
    let status = StatusCode::from_u16(created.status).unwrap_or(StatusCode::OK);
    let mut resp = HttpResponse::build(status);
    resp.content_type("application/json");
    if created.replayed {
        resp.insert_header(("Idempotent-Replayed", "true"));
    }
    // Only a new sandbox is audited: a replay (200) answers one made, and audited, before.
    if status == StatusCode::CREATED && !created.replayed {
        match serde_json::from_str::<Sandbox>(&created.body) {
            Ok(sandbox) => audit(&state, &caller, ApiSandboxAction::Create, &sandbox).await,
            Err(_) => tracing::warn!("a created sandbox's answer is not a sandbox: not audited"),
        }
    }
    Ok(resp.body(created.body))
}

/// Records an API call's sandbox create or delete in the owning account's audit log. The
/// sandbox is made or deleted already, so a failure to record is logged, never answered.
async fn audit(
    state: &AppState,
    caller: &Authenticated,
    action: ApiSandboxAction,
    sandbox: &Sandbox,
) {
    audit_sandbox_change(
        state,
        caller.0.project_id(),
        &caller.1,
        action,
        &sandbox.id.to_string(),
        sandbox.provider.as_str(),
    )
    .await;
}

/// [`audit`] for any door (the API, the E2B door): the project, the key's public id, the
/// sandbox and its provider.
pub(crate) async fn audit_sandbox_change(
    state: &AppState,
    project: corral_registry::ProjectId,
    key_id: &str,
    action: ApiSandboxAction,
    sandbox: &str,
    provider: &str,
) {
    let recorded = state
        .control
        .audit_api_sandbox(project, key_id, action, sandbox, provider)
        .await;
    if let Err(e) = recorded {
        tracing::warn!(
            error = %e,
            action = action.as_str(),
            sandbox,
            "an API sandbox change was not audited"
        );
    }
}

/// List the project's sandbox registry, newest first, tombstones included. Never calls a
/// provider: each status is the last one observed, with its `statusObservedAt`.
#[utoipa::path(
    operation_id = "listSandboxes", tag = "sandboxes",
    params(ListQuery),
    responses(
        (status = 200, description = "A page; `nextCursor` is null on the last one.", body = SandboxPage),
        ListErrors,
    ))]
#[get("/v1/sandboxes")]
pub(crate) async fn list_sandboxes(
    req: HttpRequest,
    caller: Authenticated,
    query: ListQuery,
    state: web::Data<AppState>,
) -> Reply {
    let page = state
        .service
        .list(&caller.0, query.cursor.as_deref(), query.limit)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &page))
}

/// Get a sandbox: asks its provider and records what it saw. A tombstone is returned without
/// calling the provider.
#[utoipa::path(
    operation_id = "getSandbox", tag = "sandboxes",
    params(("id" = SandboxId, Path, description = "The opaque sandbox id from create."), Inline<AllContext>),
    responses(
        (status = 200, description = "The sandbox as its provider reports it now.", body = Sandbox),
        SandboxErrors,
    ))]
#[get("/v1/sandboxes/{id}")]
pub(crate) async fn get_sandbox(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    inline: Inline<AllContext>,
    state: web::Data<AppState>,
) -> Reply {
    corral_service::failpoint::panic_point("api.get_sandbox");
    let sandbox = state
        .service
        .get(&caller.0, inline.access, &id)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &sandbox))
}

/// Delete a sandbox at its provider and record the tombstone (kept in listings). Deleting a
/// tombstone returns it.
#[utoipa::path(
    operation_id = "deleteSandbox", tag = "sandboxes",
    params(("id" = SandboxId, Path, description = "The opaque sandbox id from create."), Inline<AllContext>),
    responses(
        (status = 200, description = "The tombstone (status `deleted`).", body = Sandbox),
        SandboxErrors,
    ))]
#[delete("/v1/sandboxes/{id}")]
pub(crate) async fn delete_sandbox(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    inline: Inline<AllContext>,
    state: web::Data<AppState>,
) -> Reply {
    let sandbox = state
        .service
        .delete(&caller.0, inline.access, &id)
        .await
        .map_err(fail(&req))?;
    audit(&state, &caller, ApiSandboxAction::Delete, &sandbox).await;
    Ok(json_ok(StatusCode::OK, &sandbox))
}

/// Run a command in a sandbox; its filesystem and state persist.
#[utoipa::path(
    operation_id = "runSandboxCommand", tag = "sandboxes",
    params(("id" = SandboxId, Path, description = "The opaque sandbox id from create."), Inline<WorkspaceOnly>),
    request_body(content = RunCommandInput, content_type = "application/json",
        description = "At most 512 KiB."),
    responses(
        (status = 200, description = "The command's result.", body = CommandResult),
        ExecErrors,
    ))]
#[post("/v1/sandboxes/{id}/exec")]
pub(crate) async fn run_command(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    inline: Inline<WorkspaceOnly>,
    body: Json<RunCommandInput, ExecBody>,
    state: web::Data<AppState>,
) -> Reply {
    let result = state
        .service
        .exec(&caller.0, inline.access, &id, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &result))
}

/// Read a file from a sandbox.
#[utoipa::path(
    operation_id = "readSandboxFile", tag = "sandboxes",
    params(("id" = SandboxId, Path, description = "The opaque sandbox id from create."), Inline<WorkspaceOnly>),
    request_body(content = ReadFileInput, content_type = "application/json",
        description = "At most 64 KiB."),
    responses(
        (status = 200, description = "The file's content.", body = ReadFileResult),
        ReadErrors,
    ))]
#[post("/v1/sandboxes/{id}/files/read")]
pub(crate) async fn read_file(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    inline: Inline<WorkspaceOnly>,
    body: Json<ReadFileInput, Small>,
    state: web::Data<AppState>,
) -> Reply {
    let result = state
        .service
        .read_file(&caller.0, inline.access, &id, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &result))
}

/// Write a file into a sandbox (at most 1 MiB decoded; the parent directory must exist).
#[utoipa::path(
    operation_id = "writeSandboxFile", tag = "sandboxes",
    params(("id" = SandboxId, Path, description = "The opaque sandbox id from create."), Inline<WorkspaceOnly>),
    request_body(content = WriteFileInput, content_type = "application/json",
        description = "At most 7 MiB of JSON."),
    responses(
        (status = 200, description = "Written.", body = WriteFileResult),
        WriteErrors,
    ))]
#[post("/v1/sandboxes/{id}/files/write")]
pub(crate) async fn write_file(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    inline: Inline<WorkspaceOnly>,
    body: Json<WriteFileInput, WriteBody>,
    state: web::Data<AppState>,
) -> Reply {
    let result = state
        .service
        .write_file(&caller.0, inline.access, &id, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &result))
}

/// List every configured provider with its capabilities and pricing evidence.
#[utoipa::path(
    operation_id = "listProviders", tag = "providers",
    responses(
        (status = 200, description = "Every configured provider.", body = ProviderCatalog),
        ProvidersErrors,
    ))]
#[get("/v1/providers")]
pub(crate) async fn list_providers(_caller: Authenticated, state: web::Data<AppState>) -> Reply {
    // The catalog never changes while the server runs: its JSON was encoded once.
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(state.service.providers_json().to_string()))
}
