//! The sandbox lifecycle beside the spec's operations (extensions under `/v1`): stop and
//! resume, snapshots (made of a sandbox, listed, read and deleted from the project's registry)
//! and forks. Restores are creates with `snapshot` (`sandbox.rs`). Each handler is extractors
//! in, one `Service` call (a panic below it is the `middleware`'s), JSON out.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, delete, get, post, web};
use corral_domain::{
    CreateSnapshotInput, ForkInput, ForkResult, Sandbox, SandboxId, Snapshot, SnapshotId,
    SnapshotPage,
};
use corral_errors::ErrorCode;
use corral_service::Created;

use crate::doc::{ANY, ON_SANDBOX, errors};
use crate::extract::{
    Authenticated, IdempotencyKey, Inline, OptionalJson, Small, SnapshotListQuery, WorkspaceOnly,
};
use crate::reply::{Reply, fail, json_ok};
use crate::state::AppState;

errors!(StopErrors: ANY, ON_SANDBOX, &[ErrorCode::CapabilityUnsupported]);
errors!(SnapshotCreateErrors: ANY, ON_SANDBOX, &[
    ErrorCode::CapabilityUnsupported,
    ErrorCode::InvalidIdempotencyKey,
    ErrorCode::IdempotencyConflict,
    ErrorCode::IdempotencyInProgress,
    ErrorCode::IdempotencyOutcomeUnknown,
    ErrorCode::IdempotencyUnavailable,
]);
errors!(SnapshotListErrors: ANY);
errors!(SnapshotGetErrors: ANY, &[ErrorCode::SnapshotNotFound]);
errors!(SnapshotDeleteErrors: ANY, &[
    ErrorCode::SnapshotNotFound,
    ErrorCode::ProviderProfilesUnavailable,
    ErrorCode::ProviderProfileNotFound,
    ErrorCode::ProviderOperationUnavailable,
    ErrorCode::ProviderUnavailable,
    ErrorCode::ProviderError,
    ErrorCode::RequestTimeout,
]);

/// 201, or 200 with `Idempotent-Replayed: true` for a replay.
fn created(answer: Created) -> HttpResponse {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let mut resp = HttpResponse::build(status);
    resp.content_type("application/json");
    if answer.replayed {
        resp.insert_header(("Idempotent-Replayed", "true"));
    }
    resp.body(answer.body)
}

/// Stop a sandbox: nothing runs in it and its files are kept (its memory too where the
/// provider's `lifecycle.stopKeepsMemory`); its running commands end. Answers `stopping` while
/// the provider is at it, then `stopped`; a stopped sandbox is answered as it is. A command,
/// exec or file call on it is `sandbox_stopped` until it is resumed, unless it was made with
/// `autoResume`.
#[utoipa::path(
    operation_id = "stopSandbox", tag = "lifecycle",
    params(("id" = SandboxId, Path, description = "The opaque sandbox id from create."), Inline<WorkspaceOnly>),
    responses(
        (status = 200, description = "The sandbox, `stopping` or `stopped`.", body = Sandbox),
        StopErrors,
    ))]
#[post("/v1/sandboxes/{id}/stop")]
pub(crate) async fn stop_sandbox(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    inline: Inline<WorkspaceOnly>,
    state: web::Data<AppState>,
) -> Reply {
    let sandbox = state
        .service
        .stop(&caller.0, inline.access, &id)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &sandbox))
}

/// Resume a stopped sandbox. Answers `starting` while the provider is at it, then `running`;
/// a running sandbox is answered as it is.
#[utoipa::path(
    operation_id = "resumeSandbox", tag = "lifecycle",
    params(("id" = SandboxId, Path, description = "The opaque sandbox id from create."), Inline<WorkspaceOnly>),
    responses(
        (status = 200, description = "The sandbox, `starting` or `running`.", body = Sandbox),
        StopErrors,
    ))]
#[post("/v1/sandboxes/{id}/resume")]
pub(crate) async fn resume_sandbox(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    inline: Inline<WorkspaceOnly>,
    state: web::Data<AppState>,
) -> Reply {
    let sandbox = state
        .service
        .resume(&caller.0, inline.access, &id)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &sandbox))
}

/// Snapshot a sandbox's filesystem (and memory, where the provider's
/// `lifecycle.snapshotKeepsMemory`). 201 with the snapshot: `creating` while the provider
/// works, then `ready` (read it with `GET /v1/snapshots/{id}`). Restore it with
/// `POST /v1/sandboxes` and `"snapshot"`. With an `Idempotency-Key`, the same request replays
/// the stored answer (200, `Idempotent-Replayed: true`).
#[utoipa::path(
    operation_id = "createSnapshot", tag = "lifecycle",
    params(("id" = SandboxId, Path, description = "The opaque sandbox id from create."), IdempotencyKey, Inline<WorkspaceOnly>),
    request_body(content = Option<CreateSnapshotInput>, content_type = "application/json",
        description = "Optional; at most 64 KiB."),
    responses(
        (status = 201, description = "Taken (`ready`) or being taken (`creating`).", body = Snapshot),
        (status = 200, description = "A replay (header `Idempotent-Replayed: true`).", body = Snapshot,
            headers(("Idempotent-Replayed" = String, description = "`true`"))),
        SnapshotCreateErrors,
    ))]
#[post("/v1/sandboxes/{id}/snapshots")]
pub(crate) async fn create_snapshot(
    req: HttpRequest,
    caller: Authenticated,
    key: IdempotencyKey,
    id: web::Path<String>,
    inline: Inline<WorkspaceOnly>,
    body: OptionalJson<CreateSnapshotInput, Small>,
    state: web::Data<AppState>,
) -> Reply {
    let answer = state
        .service
        .create_snapshot(&caller.0, inline.access, &id, key.0.as_deref(), body.0)
        .await
        .map_err(fail(&req))?;
    Ok(created(answer))
}

/// Fork a sandbox: snapshot it, then restore that snapshot into `count` new sandboxes, each
/// a full registry record with its own id, independent of the others. With an
/// `Idempotency-Key`, a retry replays the answer and never makes extra copies.
#[utoipa::path(
    operation_id = "forkSandbox", tag = "lifecycle",
    params(("id" = SandboxId, Path, description = "The opaque sandbox id from create."), IdempotencyKey, Inline<WorkspaceOnly>),
    request_body(content = Option<ForkInput>, content_type = "application/json",
        description = "Optional (one copy); at most 64 KiB."),
    responses(
        (status = 201, description = "The snapshot and the copies.", body = ForkResult),
        (status = 200, description = "A replay (header `Idempotent-Replayed: true`).", body = ForkResult,
            headers(("Idempotent-Replayed" = String, description = "`true`"))),
        SnapshotCreateErrors,
    ))]
#[post("/v1/sandboxes/{id}/fork")]
pub(crate) async fn fork_sandbox(
    req: HttpRequest,
    caller: Authenticated,
    key: IdempotencyKey,
    id: web::Path<String>,
    inline: Inline<WorkspaceOnly>,
    body: OptionalJson<ForkInput, Small>,
    state: web::Data<AppState>,
) -> Reply {
    let answer = state
        .service
        .fork(&caller.0, inline.access, &id, key.0.as_deref(), body.0)
        .await
        .map_err(fail(&req))?;
    Ok(created(answer))
}

/// List the project's snapshot registry, newest first, tombstones included. Never calls a
/// provider.
#[utoipa::path(
    operation_id = "listSnapshots", tag = "lifecycle",
    params(SnapshotListQuery),
    responses(
        (status = 200, description = "A page; `nextCursor` is null on the last one.", body = SnapshotPage),
        SnapshotListErrors,
    ))]
#[get("/v1/snapshots")]
pub(crate) async fn list_snapshots(
    req: HttpRequest,
    caller: Authenticated,
    query: SnapshotListQuery,
    state: web::Data<AppState>,
) -> Reply {
    let query = query.0;
    let page = state
        .service
        .list_snapshots(&caller.0, query.cursor.as_deref(), query.limit)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &page))
}

/// Get one snapshot from the registry (never calls a provider).
#[utoipa::path(
    operation_id = "getSnapshot", tag = "lifecycle",
    params(("id" = SnapshotId, Path, description = "The opaque snapshot id.")),
    responses(
        (status = 200, description = "The snapshot.", body = Snapshot),
        SnapshotGetErrors,
    ))]
#[get("/v1/snapshots/{id}")]
pub(crate) async fn get_snapshot(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    state: web::Data<AppState>,
) -> Reply {
    let snapshot = state
        .service
        .get_snapshot(&caller.0, &id)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &snapshot))
}

/// Delete a snapshot at its provider and record the tombstone (kept in listings). Deleting a
/// tombstone returns it.
#[utoipa::path(
    operation_id = "deleteSnapshot", tag = "lifecycle",
    params(("id" = SnapshotId, Path, description = "The opaque snapshot id."), Inline<WorkspaceOnly>),
    responses(
        (status = 200, description = "The tombstone (status `deleted`).", body = Snapshot),
        SnapshotDeleteErrors,
    ))]
#[delete("/v1/snapshots/{id}")]
pub(crate) async fn delete_snapshot(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    inline: Inline<WorkspaceOnly>,
    state: web::Data<AppState>,
) -> Reply {
    let snapshot = state
        .service
        .delete_snapshot(&caller.0, inline.access, &id)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &snapshot))
}
