//! An account's pages and forms: overview, create an organization, rename, delete, members,
//! roles, invitations, ownership transfer and the audit log.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use corral_control::{
    AccountId, ChangeRole, ControlError, CreateInvitation, CreateOrganization, InvitationId,
    RenameAccount, Role, TransferOwnership, UserId,
};
use corral_web::AppState;

use super::ctx::{
    Page, account_chrome, ago, control, failed, failure_page, get_ctx, link, parse, post_ctx,
    try_page, when,
};
use crate::form::Form;
use crate::pages::{self, BASE, paths};
use crate::respond::{html, redirect, take_flash};
use crate::view::{self, Chrome, Flash, Nav};

// --- accounts ------------------------------------------------------------------------------------

/// `GET /console/accounts/{account}`.
pub(crate) async fn account_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (chrome, account, id) =
        try_page!(account_chrome(&req, control, &ctx, &path, Nav::Overview).await);
    let projects = match control.list_projects(&ctx.signed.actor, id).await {
        Ok(p) => p,
        Err(e) => return failure_page(&req, &e),
    };
    let members = match control.list_members(&ctx.signed.actor, id).await {
        Ok(m) => m.len(),
        Err(e) => return failure_page(&req, &e),
    };
    let page = view::OverviewPage {
        chrome,
        account,
        projects: projects
            .into_iter()
            .map(|p| view::ProjectRow {
                deleting: p.deleting_at.is_some(),
                id: p.id,
                name: p.name,
                created: ago(p.created_at),
            })
            .collect(),
        members,
    };
    html(&req, StatusCode::OK, pages::overview(&page))
}

/// `GET /console/accounts/new`.
pub(crate) async fn new_organization_page(req: HttpRequest, state: web::Data<AppState>) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let accounts = match control.list_accounts(&ctx.signed.actor).await {
        Ok(a) => a,
        Err(e) => return failure_page(&req, &e),
    };
    let chrome = Chrome {
        email: ctx.signed.actor.email.clone(),
        csrf: ctx.csrf.clone(),
        accounts: accounts.iter().map(link).collect(),
        account: None,
        projects: Vec::new(),
        project: None,
        nav: Nav::NewOrganization,
        flash: take_flash(&req),
    };
    html(
        &req,
        StatusCode::OK,
        pages::new_organization(&view::NewOrganizationPage { chrome }),
    )
}

/// `POST /console/accounts`: creates an organization.
pub(crate) async fn create_organization(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let request = CreateOrganization {
        name: form.get("name").unwrap_or_default().to_owned(),
    };
    match control(&state)
        .create_organization(&ctx.signed.actor, request)
        .await
    {
        Ok(a) => redirect(
            &paths::account(&a.id),
            Some(Flash::ok(format!("Created {}.", a.name))),
        ),
        Err(e) => failed(&format!("{BASE}/accounts/new"), &e),
    }
}

/// `POST /console/accounts/{account}/rename`.
pub(crate) async fn rename_account(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let id: AccountId = try_page!(parse(&req, &path));
    let back = paths::account(&path);
    let request = RenameAccount {
        name: form.get("name").unwrap_or_default().to_owned(),
        version: form
            .get("version")
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1),
    };
    match control(&state)
        .rename_account(&ctx.signed.actor, id, request)
        .await
    {
        Ok(_) => redirect(&back, Some(Flash::ok("Renamed."))),
        Err(e) => failed(&back, &e),
    }
}

/// `POST /console/accounts/{account}/delete`.
pub(crate) async fn delete_account(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let id: AccountId = try_page!(parse(&req, &path));
    match control(&state).delete_account(&ctx.signed.actor, id).await {
        Ok(a) => redirect(
            BASE,
            Some(Flash::ok(format!(
                "{} is being deleted: its sandboxes, keys and provider connections are being removed.",
                a.name
            ))),
        ),
        Err(e) => failed(&paths::account(&path), &e),
    }
}

/// `GET /console/accounts/{account}/members`.
pub(crate) async fn members_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (chrome, account, id) =
        try_page!(account_chrome(&req, control, &ctx, &path, Nav::Members).await);
    let actor = &ctx.signed.actor;
    let members = match control.list_members(actor, id).await {
        Ok(m) => m,
        Err(e) => return failure_page(&req, &e),
    };
    let invitations = if account.is_admin() && !account.personal {
        match control.list_invitations(actor, id).await {
            Ok(i) => i,
            Err(e) => return failure_page(&req, &e),
        }
    } else {
        Vec::new()
    };
    let me = actor.user_id.to_string();
    let page = view::MembersPage {
        chrome,
        account,
        members: members
            .into_iter()
            .map(|m| view::MemberRow {
                is_me: m.user_id == me,
                user_id: m.user_id,
                email: m.email,
                role: m.role.as_str().to_owned(),
                since: ago(m.joined_at),
            })
            .collect(),
        invitations: invitations
            .into_iter()
            .map(|i| view::InvitationRow {
                id: i.id,
                email: i.email,
                role: i.role.as_str().to_owned(),
                expires: when(i.expires_at),
            })
            .collect(),
    };
    html(&req, StatusCode::OK, pages::members(&page))
}

fn role_field(form: &Form) -> Result<Role, ControlError> {
    form.get("role")
        .and_then(Role::parse)
        .ok_or_else(|| ControlError::invalid("choose a role: owner, admin or member"))
}

/// `POST /console/accounts/{account}/invitations`.
pub(crate) async fn invite(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let id: AccountId = try_page!(parse(&req, &path));
    let back = paths::members(&path);
    let role = match role_field(&form) {
        Ok(r) => r,
        Err(e) => return failed(&back, &e),
    };
    let email = form.get("email").unwrap_or_default().to_owned();
    match control(&state)
        .invite(&ctx.signed.actor, id, CreateInvitation { email, role })
        .await
    {
        Ok(i) => redirect(
            &back,
            Some(Flash::ok(format!("Invitation sent to {}.", i.email))),
        ),
        Err(e) => failed(&back, &e),
    }
}

/// `POST /console/accounts/{account}/invitations/{invitation}/revoke`.
pub(crate) async fn revoke_invitation(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let id: AccountId = try_page!(parse(&req, &path.0));
    let inv: InvitationId = try_page!(parse(&req, &path.1));
    let back = paths::members(&path.0);
    match control(&state)
        .revoke_invitation(&ctx.signed.actor, id, inv)
        .await
    {
        Ok(()) => redirect(&back, Some(Flash::ok("Invitation revoked."))),
        Err(e) => failed(&back, &e),
    }
}

/// `POST /console/accounts/{account}/members/{user}/role`.
pub(crate) async fn change_role(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let id: AccountId = try_page!(parse(&req, &path.0));
    let user: UserId = try_page!(parse(&req, &path.1));
    let back = paths::members(&path.0);
    let role = match role_field(&form) {
        Ok(r) => r,
        Err(e) => return failed(&back, &e),
    };
    match control(&state)
        .change_role(&ctx.signed.actor, id, user, ChangeRole { role })
        .await
    {
        Ok(()) => redirect(&back, Some(Flash::ok("Role changed."))),
        Err(e) => failed(&back, &e),
    }
}

/// `POST /console/accounts/{account}/members/{user}/remove` (or leave, for oneself).
pub(crate) async fn remove_member(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let id: AccountId = try_page!(parse(&req, &path.0));
    let user: UserId = try_page!(parse(&req, &path.1));
    let back = paths::members(&path.0);
    let leaving = user == ctx.signed.actor.user_id;
    match control(&state)
        .remove_member(&ctx.signed.actor, id, user)
        .await
    {
        Ok(()) if leaving => redirect(BASE, Some(Flash::ok("You left the organization."))),
        Ok(()) => redirect(&back, Some(Flash::ok("Member removed."))),
        Err(e) => failed(&back, &e),
    }
}

/// `POST /console/accounts/{account}/transfer`.
pub(crate) async fn transfer(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let id: AccountId = try_page!(parse(&req, &path));
    let back = paths::members(&path);
    let user_id = form.get("user").unwrap_or_default().to_owned();
    match control(&state)
        .transfer_ownership(&ctx.signed.actor, id, TransferOwnership { user_id })
        .await
    {
        Ok(()) => redirect(&back, Some(Flash::ok("Ownership transferred."))),
        Err(e) => failed(&back, &e),
    }
}

/// `GET /console/accounts/{account}/audit` (owners).
pub(crate) async fn audit_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (chrome, account, id) =
        try_page!(account_chrome(&req, control, &ctx, &path, Nav::Audit).await);
    let events = match control.audit_log(&ctx.signed.actor, id, Some(200)).await {
        Ok(e) => e,
        Err(e) => return failure_page(&req, &e),
    };
    // Audit events name users by id; show the member's email where we know it.
    let members = control
        .list_members(&ctx.signed.actor, id)
        .await
        .unwrap_or_default();
    let name = |id: &str| {
        members
            .iter()
            .find(|m| m.user_id == id)
            .map_or_else(|| id.to_owned(), |m| m.email.clone())
    };
    let projects = control
        .list_projects(&ctx.signed.actor, id)
        .await
        .unwrap_or_default();
    let acc = path.as_str();
    let target = |e: &corral_control::AuditEventView| -> (String, Option<String>) {
        let t = e.target.as_str();
        let project = e.detail.get("projectId").and_then(|p| p.as_str());
        if let Some(p) = projects.iter().find(|p| p.id == t) {
            return (p.name.clone(), Some(paths::project(acc, &p.id)));
        }
        if t == acc {
            return (t.to_owned(), Some(paths::account(acc)));
        }
        if let (Some(prj), true) = (project, t.starts_with("sbx_")) {
            let live = projects.iter().any(|p| p.id == prj);
            let command = e.detail.get("commandId").and_then(|c| c.as_str());
            let href = match command {
                Some(cmd) => paths::command(acc, prj, t, cmd),
                None => paths::sandbox(acc, prj, t),
            };
            return (t.to_owned(), live.then_some(href));
        }
        if members.iter().any(|m| m.user_id == t) {
            return (name(t), Some(paths::members(acc)));
        }
        (t.to_owned(), None)
    };
    let rows: Vec<view::AuditRow> = events
        .iter()
        .map(|e| {
            let (target, target_href) = target(e);
            view::AuditRow {
                at: when(e.created_at),
                actor: match (e.actor.as_deref(), e.actor_api_key.as_deref()) {
                    (Some(user), _) => name(user),
                    (None, Some(key)) => api_key_actor(key),
                    (None, None) => system_actor(&e.action, &e.detail).to_owned(),
                },
                action: e.action.clone(),
                target,
                target_href,
            }
        })
        .collect();
    let distinct = |f: fn(&view::AuditRow) -> &String| {
        let mut v: Vec<String> = rows.iter().map(|r| f(r).clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let (actors, actions) = (distinct(|r| &r.actor), distinct(|r| &r.action));
    let query = web::Query::<AuditQuery>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let blank = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    let (actor, action) = (blank(query.actor), blank(query.action));
    let page = view::AuditPage {
        chrome,
        account,
        events: rows
            .into_iter()
            .filter(|r| actor.as_ref().is_none_or(|a| &r.actor == a))
            .filter(|r| action.as_ref().is_none_or(|a| &r.action == a))
            .collect(),
        actor,
        action,
        actors,
        actions,
    };
    html(&req, StatusCode::OK, pages::audit(&page))
}

/// The audit log's filters: who (as shown) and what (the action).
#[derive(serde::Deserialize, Default)]
pub(crate) struct AuditQuery {
    actor: Option<String>,
    action: Option<String>,
}

/// An API key as the actor of a sandbox change made through the sandbox API, named as the
/// keys page shows its public part (never the secret).
fn api_key_actor(key_id: &str) -> String {
    format!("API key crl_{key_id}")
}

/// Who did what an audit event records without a user: the operator at the command line
/// (`corral user invite`, `corral legal publish`), or Corral itself (the deletion worker that
/// finishes deleting projects and accounts).
fn system_actor(action: &str, detail: &serde_json::Value) -> &'static str {
    match action {
        _ if detail.get("by").and_then(|b| b.as_str()) == Some("cli") => "operator (CLI)",
        "project.deleted" | "account.deleted" => "Corral (deletion worker)",
        "legal.publish" | "user.create" => "operator (CLI)",
        _ => "Corral",
    }
}

#[cfg(test)]
mod tests {
    use super::{api_key_actor, system_actor};

    #[test]
    fn an_api_key_actor_is_named_by_its_public_id() {
        assert_eq!(
            api_key_actor("0123456789abcdef"),
            "API key crl_0123456789abcdef"
        );
    }

    #[test]
    fn events_without_a_user_name_the_cli_or_the_deletion_worker() {
        let none = serde_json::json!({});
        let cli = serde_json::json!({ "by": "cli" });
        assert_eq!(system_actor("user.create", &cli), "operator (CLI)");
        assert_eq!(system_actor("legal.publish", &none), "operator (CLI)");
        assert_eq!(
            system_actor(
                "project.deleted",
                &serde_json::json!({ "leftAtProvider": 0 })
            ),
            "Corral (deletion worker)"
        );
        assert_eq!(
            system_actor("account.deleted", &none),
            "Corral (deletion worker)"
        );
        assert_eq!(system_actor("something.new", &none), "Corral");
    }
}
