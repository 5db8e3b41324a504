//! Operations 24–36: an account's projects, their API keys, provider profiles (readiness and
//! deep verification) and the read-only view of their sandboxes.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, delete, get, patch, post, put, web};
use corral_control::AccountId;
use corral_control::ProjectId;
use corral_control::{
    CreatedKey, KeyOptions, KeyView, NewKey, ProfileView, ProjectName, ProjectView, PutProfile,
};
use corral_domain::{Provider, Sandbox, SandboxPage};
use corral_errors::ErrorCode;

use super::accounts::Items;
use crate::doc::{CONTROL_COMMON, CONTROL_MUTATION, errors};
use crate::extract::ListQuery;
use crate::reply::{ControlFailure, ControlReply, fail, json_ok, no_content, no_store, parse_id};
use crate::session::{CsrfToken, Session, SessionJson, SessionMaybeJson};
use crate::state::AppState;

pub(super) fn register(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(list_projects)
        .service(create_project)
        .service(update_project)
        .service(delete_project)
        .service(list_keys)
        .service(create_key)
        .service(revoke_key)
        .service(list_profiles)
        .service(put_profile)
        .service(delete_profile)
        .service(test_profile)
        .service(list_project_sandboxes)
        .service(get_project_sandbox);
}

errors!(Common: CONTROL_COMMON);
errors!(CreateErrors: CONTROL_COMMON, CONTROL_MUTATION, &[
    ErrorCode::ControlPlaneConflict,
    ErrorCode::AccountDeleting,
]);
errors!(Deleting: CONTROL_COMMON, CONTROL_MUTATION, &[ErrorCode::AccountDeleting]);
errors!(ProfilesRead: CONTROL_COMMON, &[ErrorCode::ProviderProfilesUnavailable]);
errors!(ProfilePut: CONTROL_COMMON, CONTROL_MUTATION, &[
    ErrorCode::ProviderProfilesUnavailable,
    ErrorCode::AccountDeleting,
]);
errors!(ProfileGone: CONTROL_COMMON, CONTROL_MUTATION, &[
    ErrorCode::ProviderProfileNotFound,
    ErrorCode::AccountDeleting,
]);
errors!(SandboxRead: CONTROL_COMMON, &[ErrorCode::InvalidSandboxId, ErrorCode::SandboxNotFound]);

const PROJECT: &str = "project";

fn project_id(req: &HttpRequest, raw: &str) -> Result<ProjectId, ControlFailure> {
    parse_id(req, raw, PROJECT)
}

/// A provider path segment: one this server knows of, else `invalid_request`.
fn provider(req: &HttpRequest, raw: &str) -> Result<Provider, ControlFailure> {
    raw.parse().map_err(|_| {
        ControlFailure::new(
            req,
            corral_control::ControlError::invalid(format!("no such provider `{raw}`")),
        )
    })
}

/// The account's projects (any member).
#[utoipa::path(
    operation_id = "listProjects", tag = "control-plane", security(("session" = [])),
    params(("account" = String, Path, description = "`acc_<ulid>`.")),
    responses((status = 200, description = "The projects.", body = Items<ProjectView>), Common))]
#[get("/v1/control/accounts/{account}/projects")]
pub(crate) async fn list_projects(
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let account: AccountId = parse_id(&req, &path, "account")?;
    let items = state
        .control
        .list_projects(&session.0.actor, account)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &Items { items }))
}

/// Create a project in the account (admin).
#[utoipa::path(
    operation_id = "createProject", tag = "control-plane", security(("session" = [])),
    params(CsrfToken, ("account" = String, Path, description = "`acc_<ulid>`.")),
    request_body(content = ProjectName, content_type = "application/json"),
    responses((status = 201, description = "Created.", body = ProjectView), CreateErrors))]
#[post("/v1/control/accounts/{account}/projects")]
pub(crate) async fn create_project(
    req: HttpRequest,
    session_body: SessionJson<ProjectName>,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let account: AccountId = parse_id(&req, &path, "account")?;
    let project = state
        .control
        .create_project(&session.0.actor, account, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::CREATED, &project))
}

/// Rename a project (admin).
#[utoipa::path(
    operation_id = "updateProject", tag = "control-plane", security(("session" = [])),
    params(CsrfToken, ("project" = String, Path, description = "The project id.")),
    request_body(content = ProjectName, content_type = "application/json"),
    responses((status = 200, description = "Renamed.", body = ProjectView), CreateErrors))]
#[patch("/v1/control/projects/{project}")]
pub(crate) async fn update_project(
    req: HttpRequest,
    session_body: SessionJson<ProjectName>,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let project = project_id(&req, &path)?;
    let project = state
        .control
        .rename_project(&session.0.actor, project, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &project))
}

/// Delete a project (admin): 202, its sandboxes, keys and profiles are removed in the
/// background.
#[utoipa::path(
    operation_id = "deleteProject", tag = "control-plane", security(("session" = [])),
    params(CsrfToken, ("project" = String, Path, description = "The project id.")),
    responses((status = 202, description = "Deletion started.", body = ProjectView), Deleting))]
#[delete("/v1/control/projects/{project}")]
pub(crate) async fn delete_project(
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path)?;
    let project = state
        .control
        .delete_project(&session.0.actor, project)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::ACCEPTED, &project))
}

/// The project's API keys (admin): ids and dates, never the keys.
#[utoipa::path(
    operation_id = "listKeys", tag = "control-plane", security(("session" = [])),
    params(("project" = String, Path, description = "The project id.")),
    responses((status = 200, description = "The keys.", body = Items<KeyView>), Common))]
#[get("/v1/control/projects/{project}/keys")]
pub(crate) async fn list_keys(
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path)?;
    let items = state
        .control
        .list_keys(&session.0.actor, project)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &Items { items }))
}

/// Issue an API key (admin), optionally named and expiring (an empty body: unnamed, never
/// expires). The key is in this answer only (`Cache-Control: no-store`).
#[utoipa::path(
    operation_id = "createKey", tag = "control-plane", security(("session" = [])),
    params(CsrfToken, ("project" = String, Path, description = "The project id.")),
    request_body(content = Option<NewKey>, content_type = "application/json",
        description = "Optional; at most 64 KiB."),
    responses((status = 201, description = "Issued; the key is shown this once.", body = CreatedKey), Deleting))]
#[post("/v1/control/projects/{project}/keys")]
pub(crate) async fn create_key(
    req: HttpRequest,
    body: SessionMaybeJson<NewKey>,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionMaybeJson(session, body) = body;
    let project = project_id(&req, &path)?;
    let options = match body {
        Some(body) => KeyOptions::try_from(body).map_err(|e| ControlFailure::new(&req, e))?,
        None => KeyOptions::default(),
    };
    let key = state
        .control
        .create_key(&session.0.actor, project, options)
        .await
        .map_err(fail(&req))?;
    Ok(no_store(json_ok(StatusCode::CREATED, &key)))
}

/// Revoke an API key of the project (admin).
#[utoipa::path(
    operation_id = "revokeKey", tag = "control-plane", security(("session" = [])),
    params(
        CsrfToken,
        ("project" = String, Path, description = "The project id."),
        ("key" = String, Path, description = "The key id (the part after `crl_`)."),
    ),
    responses((status = 204, description = "Revoked."), Deleting))]
#[delete("/v1/control/projects/{project}/keys/{key}")]
pub(crate) async fn revoke_key(
    req: HttpRequest,
    session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path.0)?;
    let key = state
        .control
        .revoke_key(&session.0.actor, project, &path.1)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &key))
}

/// The project's provider profiles with readiness and the last verification (any member).
#[utoipa::path(
    operation_id = "listProfiles", tag = "control-plane", security(("session" = [])),
    params(("project" = String, Path, description = "The project id.")),
    responses((status = 200, description = "The profiles.", body = Items<ProfileView>), ProfilesRead))]
#[get("/v1/control/projects/{project}/profiles")]
pub(crate) async fn list_profiles(
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path)?;
    let items = state
        .control
        .list_profiles(&session.0.actor, project)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &Items { items }))
}

/// Connect (or replace) the project's profile for a provider (admin). Clears earlier
/// verification results.
#[utoipa::path(
    operation_id = "putProfile", tag = "control-plane", security(("session" = [])),
    params(
        CsrfToken,
        ("project" = String, Path, description = "The project id."),
        ("provider" = Provider, Path, description = "The provider id."),
    ),
    request_body(content = PutProfile, content_type = "application/json"),
    responses((status = 200, description = "Stored; the credential is never shown again.", body = ProfileView), ProfilePut))]
#[put("/v1/control/projects/{project}/profiles/{provider}")]
pub(crate) async fn put_profile(
    req: HttpRequest,
    session_body: SessionJson<PutProfile>,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let project = project_id(&req, &path.0)?;
    let provider = provider(&req, &path.1)?;
    let profile = state
        .control
        .put_profile(&session.0.actor, project, provider, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &profile))
}

/// Remove the project's profile for a provider (admin); its credential is erased.
#[utoipa::path(
    operation_id = "deleteProfile", tag = "control-plane", security(("session" = [])),
    params(
        CsrfToken,
        ("project" = String, Path, description = "The project id."),
        ("provider" = Provider, Path, description = "The provider id."),
    ),
    responses((status = 204, description = "Removed."), ProfileGone))]
#[delete("/v1/control/projects/{project}/profiles/{provider}")]
pub(crate) async fn delete_profile(
    req: HttpRequest,
    session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path.0)?;
    let provider = provider(&req, &path.1)?;
    state
        .control
        .delete_profile(&session.0.actor, project, provider)
        .await
        .map_err(fail(&req))?;
    Ok(no_content())
}

/// Verify the profile deeply (admin): create, exec, write, read, delete a probe sandbox with
/// the stored credential; one result per operation.
#[utoipa::path(
    operation_id = "testProfile", tag = "control-plane", security(("session" = [])),
    params(
        CsrfToken,
        ("project" = String, Path, description = "The project id."),
        ("provider" = Provider, Path, description = "The provider id."),
    ),
    responses((status = 200, description = "The profile with one verification per operation.", body = ProfileView), ProfileGone))]
#[post("/v1/control/projects/{project}/profiles/{provider}/test")]
pub(crate) async fn test_profile(
    req: HttpRequest,
    session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path.0)?;
    let provider = provider(&req, &path.1)?;
    let profile = state
        .control
        .test_profile(&session.0.actor, project, provider)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &profile))
}

/// The project's sandbox registry, newest first, tombstones included (any member).
#[utoipa::path(
    operation_id = "listProjectSandboxes", tag = "control-plane", security(("session" = [])),
    params(("project" = String, Path, description = "The project id."), ListQuery),
    responses((status = 200, description = "A page.", body = SandboxPage), Common))]
#[get("/v1/control/projects/{project}/sandboxes")]
pub(crate) async fn list_project_sandboxes(
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
    query: ListQuery,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path)?;
    let page = state
        .control
        .list_sandboxes(
            &session.0.actor,
            project,
            query.cursor.as_deref(),
            query.limit,
        )
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &page))
}

/// One sandbox of the project (any member).
#[utoipa::path(
    operation_id = "getProjectSandbox", tag = "control-plane", security(("session" = [])),
    params(
        ("project" = String, Path, description = "The project id."),
        ("sandbox" = String, Path, description = "The sandbox id."),
    ),
    responses((status = 200, description = "The sandbox.", body = Sandbox), SandboxRead))]
#[get("/v1/control/projects/{project}/sandboxes/{sandbox}")]
pub(crate) async fn get_project_sandbox(
    req: HttpRequest,
    session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let project = project_id(&req, &path.0)?;
    let sandbox = state
        .control
        .get_sandbox(&session.0.actor, project, &path.1)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &sandbox))
}
