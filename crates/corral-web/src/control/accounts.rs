//! Operations 11–23: accounts, members, ownership transfer, invitations and the audit log.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, delete, get, patch, post, web};
use corral_control::ControlError;
use corral_control::{
    AcceptInvitation, AccountView, AuditEventView, ChangeRole, CreateInvitation,
    CreateOrganization, InvitationView, MemberView, RenameAccount, TransferOwnership,
};
use corral_control::{AccountId, InvitationId, UserId};
use corral_errors::ErrorCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::doc::{CONTROL_COMMON, CONTROL_MUTATION, errors};
use crate::reply::{ControlFailure, ControlReply, fail, json_ok, no_content, parse_id};
use crate::session::{CsrfToken, Session, SessionJson};
use crate::state::AppState;

pub(super) fn register(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(list_accounts)
        .service(create_account)
        .service(update_account)
        .service(delete_account)
        .service(list_members)
        .service(update_member)
        .service(remove_member)
        .service(transfer_ownership)
        .service(list_invitations)
        .service(create_invitation)
        .service(revoke_invitation)
        .service(accept_invitation)
        .service(audit_log);
}

errors!(Common: CONTROL_COMMON);
errors!(CreateErrors: CONTROL_COMMON, CONTROL_MUTATION, &[ErrorCode::ControlPlaneConflict]);
errors!(UpdateErrors: CONTROL_COMMON, CONTROL_MUTATION, &[
    ErrorCode::ControlPlaneConflict,
    ErrorCode::PersonalAccountImmutable,
    ErrorCode::AccountDeleting,
]);
errors!(DeleteErrors: CONTROL_COMMON, CONTROL_MUTATION, &[
    ErrorCode::PersonalAccountImmutable,
    ErrorCode::AccountDeleting,
]);
errors!(MemberErrors: CONTROL_COMMON, CONTROL_MUTATION, &[
    ErrorCode::PersonalAccountImmutable,
    ErrorCode::LastAccountOwner,
    ErrorCode::AccountDeleting,
]);
errors!(InviteErrors: CONTROL_COMMON, CONTROL_MUTATION, &[
    ErrorCode::PersonalAccountImmutable,
    ErrorCode::ControlPlaneConflict,
    ErrorCode::AccountDeleting,
]);
errors!(RevokeErrors: CONTROL_COMMON, CONTROL_MUTATION, &[ErrorCode::AccountDeleting]);
errors!(AcceptErrors: CONTROL_COMMON, CONTROL_MUTATION, &[
    ErrorCode::ControlPlaneConflict,
    ErrorCode::AccountDeleting,
]);

/// A list.
#[derive(Serialize, ToSchema)]
pub(crate) struct Items<T: ToSchema> {
    /// The items.
    pub(crate) items: Vec<T>,
}

/// `GET …/audit` query.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct AuditQuery {
    /// Most recent events returned, 1 to 500; default 100.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// The audit query; a malformed one or a `limit` out of range is `invalid_request`.
fn audit_query(req: &HttpRequest) -> Result<Option<u32>, ControlFailure> {
    let query = web::Query::<AuditQuery>::from_query(req.query_string()).map_err(|e| {
        ControlFailure::new(req, ControlError::invalid(format!("invalid query: {e}")))
    })?;
    match query.limit {
        Some(l) if !(1..=corral_control::MAX_AUDIT_LIMIT).contains(&l) => Err(ControlFailure::new(
            req,
            ControlError::invalid(format!(
                "`limit` must be an integer from 1 to {}",
                corral_control::MAX_AUDIT_LIMIT
            )),
        )),
        limit => Ok(limit),
    }
}

const ACCOUNT: &str = "account";

/// The accounts the user is a member of, with their role.
#[utoipa::path(
    operation_id = "listAccounts", tag = "control-plane", security(("session" = [])),
    responses((status = 200, description = "Every account of the user.", body = Items<AccountView>), Common))]
#[get("/v1/control/accounts")]
pub(crate) async fn list_accounts(
    req: HttpRequest,
    session: Session,
    state: web::Data<AppState>,
) -> ControlReply {
    let items = state
        .control
        .list_accounts(&session.0.actor)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &Items { items }))
}

/// Create an organization; the caller is its owner.
#[utoipa::path(
    operation_id = "createAccount", tag = "control-plane", security(("session" = [])), params(CsrfToken),
    request_body(content = CreateOrganization, content_type = "application/json"),
    responses((status = 201, description = "Created.", body = AccountView), CreateErrors))]
#[post("/v1/control/accounts")]
pub(crate) async fn create_account(
    req: HttpRequest,
    session_body: SessionJson<CreateOrganization>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let account = state
        .control
        .create_organization(&session.0.actor, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::CREATED, &account))
}

/// Rename an account (admin). `version` must be the current one.
#[utoipa::path(
    operation_id = "updateAccount", tag = "control-plane", security(("session" = [])),
    params(CsrfToken, ("account" = String, Path, description = "`acc_<ulid>`.")),
    request_body(content = RenameAccount, content_type = "application/json"),
    responses((status = 200, description = "Renamed; `version` incremented.", body = AccountView), UpdateErrors))]
#[patch("/v1/control/accounts/{account}")]
pub(crate) async fn update_account(
    req: HttpRequest,
    session_body: SessionJson<RenameAccount>,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let account: AccountId = parse_id(&req, &path, ACCOUNT)?;
    let account = state
        .control
        .rename_account(&session.0.actor, account, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &account))
}

/// Delete an organization (owner): 202, its sandboxes, keys and profiles are removed in the
/// background; meanwhile every mutation of it answers `account_deleting`.
#[utoipa::path(
    operation_id = "deleteAccount", tag = "control-plane", security(("session" = [])),
    params(CsrfToken, ("account" = String, Path, description = "`acc_<ulid>`.")),
    responses((status = 202, description = "Deletion started (`deletingAt` set).", body = AccountView), DeleteErrors))]
#[delete("/v1/control/accounts/{account}")]
pub(crate) async fn delete_account(
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let account: AccountId = parse_id(&req, &path, ACCOUNT)?;
    let account = state
        .control
        .delete_account(&session.0.actor, account)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::ACCEPTED, &account))
}

/// The account's members and their roles (any member).
#[utoipa::path(
    operation_id = "listMembers", tag = "control-plane", security(("session" = [])),
    params(("account" = String, Path, description = "`acc_<ulid>`.")),
    responses((status = 200, description = "The members.", body = Items<MemberView>), Common))]
#[get("/v1/control/accounts/{account}/members")]
pub(crate) async fn list_members(
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let account: AccountId = parse_id(&req, &path, ACCOUNT)?;
    let items = state
        .control
        .list_members(&session.0.actor, account)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &Items { items }))
}

/// Change a member's role (owner; an admin may move members between member and admin).
#[utoipa::path(
    operation_id = "updateMember", tag = "control-plane", security(("session" = [])),
    params(
        CsrfToken,
        ("account" = String, Path, description = "`acc_<ulid>`."),
        ("user" = String, Path, description = "`usr_<ulid>`."),
    ),
    request_body(content = ChangeRole, content_type = "application/json"),
    responses((status = 204, description = "Changed."), MemberErrors))]
#[patch("/v1/control/accounts/{account}/members/{user}")]
pub(crate) async fn update_member(
    req: HttpRequest,
    session_body: SessionJson<ChangeRole>,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let account: AccountId = parse_id(&req, &path.0, ACCOUNT)?;
    let user: UserId = parse_id(&req, &path.1, "member")?;
    state
        .control
        .change_role(&session.0.actor, account, user, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(no_content())
}

/// Remove a member (admin; any member may remove themself, which is leaving).
#[utoipa::path(
    operation_id = "removeMember", tag = "control-plane", security(("session" = [])),
    params(
        CsrfToken,
        ("account" = String, Path, description = "`acc_<ulid>`."),
        ("user" = String, Path, description = "`usr_<ulid>`."),
    ),
    responses((status = 204, description = "Removed."), MemberErrors))]
#[delete("/v1/control/accounts/{account}/members/{user}")]
pub(crate) async fn remove_member(
    req: HttpRequest,
    session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let account: AccountId = parse_id(&req, &path.0, ACCOUNT)?;
    let user: UserId = parse_id(&req, &path.1, "member")?;
    state
        .control
        .remove_member(&session.0.actor, account, user)
        .await
        .map_err(fail(&req))?;
    Ok(no_content())
}

/// Make another member the owner (owner); the caller becomes admin, in one transaction.
#[utoipa::path(
    operation_id = "transferOwnership", tag = "control-plane", security(("session" = [])),
    params(CsrfToken, ("account" = String, Path, description = "`acc_<ulid>`.")),
    request_body(content = TransferOwnership, content_type = "application/json"),
    responses((status = 204, description = "Transferred."), DeleteErrors))]
#[post("/v1/control/accounts/{account}/ownership-transfer")]
pub(crate) async fn transfer_ownership(
    req: HttpRequest,
    session_body: SessionJson<TransferOwnership>,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let account: AccountId = parse_id(&req, &path, ACCOUNT)?;
    state
        .control
        .transfer_ownership(&session.0.actor, account, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(no_content())
}

/// The account's pending invitations (admin).
#[utoipa::path(
    operation_id = "listInvitations", tag = "control-plane", security(("session" = [])),
    params(("account" = String, Path, description = "`acc_<ulid>`.")),
    responses((status = 200, description = "Pending invitations.", body = Items<InvitationView>), Common))]
#[get("/v1/control/accounts/{account}/invitations")]
pub(crate) async fn list_invitations(
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let account: AccountId = parse_id(&req, &path, ACCOUNT)?;
    let items = state
        .control
        .list_invitations(&session.0.actor, account)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &Items { items }))
}

/// Invite someone by email (admin); the link is mailed, never returned.
#[utoipa::path(
    operation_id = "createInvitation", tag = "control-plane", security(("session" = [])),
    params(CsrfToken, ("account" = String, Path, description = "`acc_<ulid>`.")),
    request_body(content = CreateInvitation, content_type = "application/json"),
    responses((status = 201, description = "Invited.", body = InvitationView), InviteErrors))]
#[post("/v1/control/accounts/{account}/invitations")]
pub(crate) async fn create_invitation(
    req: HttpRequest,
    session_body: SessionJson<CreateInvitation>,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let account: AccountId = parse_id(&req, &path, ACCOUNT)?;
    let invitation = state
        .control
        .invite(&session.0.actor, account, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::CREATED, &invitation))
}

/// Revoke a pending invitation (admin).
#[utoipa::path(
    operation_id = "revokeInvitation", tag = "control-plane", security(("session" = [])),
    params(
        CsrfToken,
        ("account" = String, Path, description = "`acc_<ulid>`."),
        ("invitation" = String, Path, description = "`inv_<ulid>`."),
    ),
    responses((status = 204, description = "Revoked."), RevokeErrors))]
#[delete("/v1/control/accounts/{account}/invitations/{invitation}")]
pub(crate) async fn revoke_invitation(
    req: HttpRequest,
    session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let account: AccountId = parse_id(&req, &path.0, ACCOUNT)?;
    let invitation: InvitationId = parse_id(&req, &path.1, "invitation")?;
    state
        .control
        .revoke_invitation(&session.0.actor, account, invitation)
        .await
        .map_err(fail(&req))?;
    Ok(no_content())
}

/// Accept an invitation with the token from its link (single use; the signed-in user's email
/// must be the invited one).
#[utoipa::path(
    operation_id = "acceptInvitation", tag = "control-plane", security(("session" = [])), params(CsrfToken),
    request_body(content = AcceptInvitation, content_type = "application/json"),
    responses((status = 200, description = "Joined; the account.", body = AccountView), AcceptErrors))]
#[post("/v1/control/invitations/accept")]
pub(crate) async fn accept_invitation(
    req: HttpRequest,
    session_body: SessionJson<AcceptInvitation>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let account = state
        .control
        .accept_invitation(&session.0.actor, body.0)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &account))
}

/// The account's audit log, newest first (owner).
#[utoipa::path(
    operation_id = "getAuditLog", tag = "control-plane", security(("session" = [])),
    params(("account" = String, Path, description = "`acc_<ulid>`."), AuditQuery),
    responses((status = 200, description = "Events, newest first.", body = Items<AuditEventView>), Common))]
#[get("/v1/control/accounts/{account}/audit")]
pub(crate) async fn audit_log(
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ControlReply {
    let account: AccountId = parse_id(&req, &path, ACCOUNT)?;
    let limit = audit_query(&req)?;
    let items = state
        .control
        .audit_log(&session.0.actor, account, limit)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &Items { items }))
}
