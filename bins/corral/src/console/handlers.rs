//! The console's handlers: authenticate (session cookie; CSRF field and origin on POST), call
//! one control-plane use case, then render a page or redirect with a flash message. Failures
//! of a form become a flash on the page it came from; a target the user cannot see is the
//! 404 page; an expired session goes back to sign-in.

// Helpers answer `Err(page)` with the page to send (an HttpResponse, large): boxing it would
// buy nothing at one response per request.
#![allow(clippy::result_large_err)]

use std::net::IpAddr;
use std::str::FromStr;

use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use corral_control::{
    AcceptInvitation, AccountView, ChangeRole, Control, ControlError, CreateInvitation,
    CreateOrganization, ProfileView, ProjectName, PutProfile, RenameAccount, TransferOwnership,
};
use corral_control_store::{AccountId, AccountKind, InvitationId, Role, UserId};
use corral_domain::{Provider, ProviderContext, Timestamp};
use corral_provider::SecretString;
use corral_registry::ProjectId;

use super::form::Form;
use super::pages::{self, BASE, paths};
use super::view::{self, Chrome, Flash, Nav};
use super::{html, redirect, take_flash};
use crate::control::session::{self, SignedIn};
use crate::http::AppState;

type Page = HttpResponse;

/// Authenticates a form post, or answers with the page that says why not.
macro_rules! post_ctx {
    ($state:expr, $req:expr, $form:expr) => {
        match auth(&$state, &$req, Some(&$form)).await {
            Ok(c) => c,
            Err(p) => return p,
        }
    };
}

macro_rules! get_ctx {
    ($state:expr, $req:expr) => {
        match auth(&$state, &$req, None).await {
            Ok(c) => c,
            Err(p) => return p,
        }
    };
}

macro_rules! try_page {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(p) => return p,
        }
    };
}

fn control(state: &AppState) -> &Control {
    &state.control
}

fn sign_in_url() -> String {
    format!("{BASE}/sign-in")
}

fn client_ip(req: &HttpRequest) -> Option<IpAddr> {
    req.peer_addr().map(|a| a.ip())
}

/// A signed-in request: the actor and the session's CSRF token for the page's forms.
struct Ctx {
    signed: SignedIn,
    csrf: String,
}

/// Authenticates a request. GET: the session cookie. POST: also the `csrf` field and the
/// origin. A missing or expired session redirects to sign-in; a bad CSRF field or origin with
/// a live session is a 403 page (the form is stale or came from elsewhere).
async fn auth(state: &AppState, req: &HttpRequest, form: Option<&Form>) -> Result<Ctx, Page> {
    let control = control(state);
    let csrf = form.and_then(|f| f.get("csrf"));
    match session::authenticate(control, req, csrf).await {
        Ok(signed) => {
            let csrf = control.csrf_token(signed.cookie_token());
            Ok(Ctx { signed, csrf })
        }
        Err(ControlError::Unauthenticated { .. }) => {
            let live = match session::cookie_token(req) {
                Some(t) => control.authenticate_session(&t).await.is_ok(),
                None => false,
            };
            if live && form.is_some() {
                Err(html(
                    req,
                    StatusCode::FORBIDDEN,
                    pages::error_page(
                        403,
                        "This form could not be verified",
                        "It may be stale or may have come from another site. Go back, reload the page and try again.",
                    ),
                ))
            } else {
                let flash = session::cookie_token(req)
                    .map(|_| Flash::info("Your session has ended. Sign in again."));
                Err(redirect(&sign_in_url(), flash))
            }
        }
        Err(e) => Err(failure_page(req, &e)),
    }
}

/// A failure while rendering a page (GET).
fn failure_page(req: &HttpRequest, e: &ControlError) -> Page {
    match e {
        ControlError::Unauthenticated { .. } => redirect(&sign_in_url(), None),
        ControlError::Invalid { message } if message.starts_with("no such ") => not_found(req),
        ControlError::Invalid { .. } => html(
            req,
            StatusCode::BAD_REQUEST,
            pages::error_page(400, "Not allowed", &e.to_string()),
        ),
        ControlError::Throttled { .. } => html(
            req,
            StatusCode::TOO_MANY_REQUESTS,
            pages::error_page(429, "Slow down", &e.to_string()),
        ),
        _ => {
            tracing::warn!(error = %e, "console page failed");
            html(
                req,
                StatusCode::SERVICE_UNAVAILABLE,
                pages::error_page(
                    503,
                    "Something went wrong",
                    "Corral could not load this page. Try again in a moment.",
                ),
            )
        }
    }
}

/// A failed form: back to `to` with the reason (messages never carry a secret), or to the
/// terms when they need accepting first.
fn failed(to: &str, e: &ControlError) -> Page {
    match e {
        ControlError::LegalAcceptanceRequired { .. } => redirect(
            &format!("{BASE}/legal"),
            Some(Flash::info("Please accept the current terms first.")),
        ),
        ControlError::Unauthenticated { .. } => redirect(&sign_in_url(), None),
        _ => redirect(to, Some(Flash::error(sentence(&e.to_string())))),
    }
}

fn sentence(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => {
            f.to_uppercase().chain(c).collect::<String>() + if s.ends_with('.') { "" } else { "." }
        }
        None => String::new(),
    }
}

fn not_found(req: &HttpRequest) -> Page {
    html(
        req,
        StatusCode::NOT_FOUND,
        pages::error_page(
            404,
            "Page not found",
            "There is nothing here, or you do not have access to it.",
        ),
    )
}

/// When something happened, for people: "3 min ago", or a date for older events.
pub(crate) fn ago(t: Timestamp) -> String {
    let secs = (Utc::now() - t).num_seconds();
    match secs {
        s if s < 5 => "just now".to_owned(),
        s if s < 60 => format!("{s} s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        _ => t.format("%b %-d, %Y").to_string(),
    }
}

fn when(t: Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn link(a: &AccountView) -> view::AccountLink {
    view::AccountLink {
        id: a.id.clone(),
        name: a.name.clone(),
        personal: a.kind == AccountKind::Personal,
        role: a.role.as_str().to_owned(),
    }
}

fn account_view(a: &AccountView) -> view::AccountView {
    view::AccountView {
        id: a.id.clone(),
        name: a.name.clone(),
        personal: a.kind == AccountKind::Personal,
        role: a.role.as_str().to_owned(),
        version: a.version,
        deleting: a.deleting_at.is_some(),
    }
}

/// Everything an account page needs: the chrome (switcher, sidebar) and the account.
async fn account_chrome(
    req: &HttpRequest,
    control: &Control,
    ctx: &Ctx,
    account: &str,
    nav: Nav,
) -> Result<(Chrome, view::AccountView, AccountId), Page> {
    let id = AccountId::from_str(account).map_err(|_| not_found(req))?;
    let actor = &ctx.signed.actor;
    let accounts = control
        .list_accounts(actor)
        .await
        .map_err(|e| failure_page(req, &e))?;
    let current = accounts
        .iter()
        .find(|a| a.id == account)
        .ok_or_else(|| not_found(req))?;
    let projects = control
        .list_projects(actor, id)
        .await
        .map_err(|e| failure_page(req, &e))?;
    let chrome = Chrome {
        email: actor.email.clone(),
        csrf: ctx.csrf.clone(),
        accounts: accounts.iter().map(link).collect(),
        account: Some(link(current)),
        projects: projects
            .iter()
            .map(|p| view::ProjectLink {
                id: p.id.clone(),
                name: p.name.clone(),
            })
            .collect(),
        project: None,
        nav,
        flash: take_flash(req),
    };
    Ok((chrome, account_view(current), id))
}

/// As [`account_chrome`], for a project of the account.
async fn project_chrome(
    req: &HttpRequest,
    control: &Control,
    ctx: &Ctx,
    account: &str,
    project: &str,
) -> Result<(Chrome, view::ProjectView, ProjectId), Page> {
    let (mut chrome, acc, acc_id) =
        account_chrome(req, control, ctx, account, Nav::Project).await?;
    let pid = ProjectId::from_str(project).map_err(|_| not_found(req))?;
    let found = control
        .list_projects(&ctx.signed.actor, acc_id)
        .await
        .map_err(|e| failure_page(req, &e))?
        .into_iter()
        .find(|p| p.id == project)
        .ok_or_else(|| not_found(req))?;
    chrome.project = Some(found.id.clone());
    let mut account = acc;
    account.deleting |= found.deleting_at.is_some();
    Ok((
        chrome,
        view::ProjectView {
            id: found.id,
            name: found.name,
            created: when(found.created_at),
            account,
        },
        pid,
    ))
}

// --- sign-in -------------------------------------------------------------------------------------

/// `GET /console`: sign-in, the terms, or the user's personal account.
pub(super) async fn home(req: HttpRequest, state: web::Data<AppState>) -> Page {
    let ctx = match auth(&state, &req, None).await {
        Ok(c) => c,
        Err(page) => return page,
    };
    let control = control(&state);
    let actor = &ctx.signed.actor;
    match control.require_legal(actor).await {
        Ok(()) => {}
        Err(ControlError::LegalAcceptanceRequired { .. }) => {
            return redirect(&format!("{BASE}/legal"), take_flash(&req));
        }
        Err(e) => return failure_page(&req, &e),
    }
    if super::cookie(&req, INVITATION_COOKIE).is_some() {
        return redirect(&format!("{BASE}/invitations"), take_flash(&req));
    }
    match control.me(actor).await {
        Ok(me) => redirect(
            &paths::account(&me.personal_account_id.to_string()),
            take_flash(&req),
        ),
        Err(e) => failure_page(&req, &e),
    }
}

/// `GET /console/sign-in`.
pub(super) async fn sign_in_page(req: HttpRequest, state: web::Data<AppState>) -> Page {
    if let Some(token) = session::cookie_token(&req)
        && control(&state).authenticate_session(&token).await.is_ok()
    {
        return redirect(BASE, None);
    }
    let page = view::SignInPage {
        flash: take_flash(&req),
        ..Default::default()
    };
    html(&req, StatusCode::OK, pages::sign_in(&page))
}

/// `POST /console/sign-in/email`: mails a link (the answer is the same for unknown emails).
pub(super) async fn sign_in_email(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    if let Err(e) = session::check_origin(&req, &control(&state).config().public_url) {
        return failed(&sign_in_url(), &e);
    }
    let email = form.get("email").unwrap_or_default();
    match control(&state)
        .request_sign_in(email, client_ip(&req))
        .await
    {
        Ok(()) => {
            let q: String = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("email", email)
                .finish();
            redirect(&format!("{BASE}/sign-in/check-email?{q}"), None)
        }
        Err(e) => failed(&sign_in_url(), &e),
    }
}

fn signed_in_response(state: &AppState, token: &str) -> Page {
    let mut resp = redirect(BASE, None);
    if let Ok(v) =
        header::HeaderValue::from_str(&session::session_cookie(control(state).config(), token))
    {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

/// `POST /console/sign-in/password`.
pub(super) async fn sign_in_password(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    if let Err(e) = session::check_origin(&req, &control(&state).config().public_url) {
        return failed(&sign_in_url(), &e);
    }
    let (email, password) = (
        form.get("email").unwrap_or_default(),
        form.raw("password").unwrap_or_default(),
    );
    match control(&state)
        .sign_in_with_password(email, password, client_ip(&req))
        .await
    {
        Ok((_, token)) => signed_in_response(&state, &token),
        Err(e) => failed(&sign_in_url(), &e),
    }
}

#[derive(serde::Deserialize)]
pub(super) struct TokenQuery {
    #[serde(default)]
    token: String,
}

/// `GET /console/sign-in/verify?token=…`: the emailed link. Consumes the token, sets the
/// session cookie and redirects (so the token leaves the address bar at once).
pub(super) async fn sign_in_verify(req: HttpRequest, state: web::Data<AppState>) -> Page {
    let token = web::Query::<TokenQuery>::from_query(req.query_string())
        .map(|q| q.into_inner().token)
        .unwrap_or_default();
    match control(&state)
        .sign_in_with_token(&token, client_ip(&req))
        .await
    {
        Ok((_, session_token)) => signed_in_response(&state, &session_token),
        Err(ControlError::Unauthenticated { .. }) => redirect(
            &sign_in_url(),
            Some(Flash::error(
                "That sign-in link is invalid, already used or expired. Request a new one.",
            )),
        ),
        Err(e) => failed(&sign_in_url(), &e),
    }
}

fn cleared(state: &AppState, to: &str, flash: Flash) -> Page {
    let mut resp = redirect(to, Some(flash));
    if let Ok(v) =
        header::HeaderValue::from_str(&session::cleared_session_cookie(control(state).config()))
    {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

/// `POST /console/sign-out`.
pub(super) async fn sign_out(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = match auth(&state, &req, Some(&form)).await {
        Ok(c) => c,
        Err(p) => return p,
    };
    if let Err(e) = control(&state).sign_out(&ctx.signed.actor).await {
        return failed(BASE, &e);
    }
    cleared(&state, &sign_in_url(), Flash::ok("You are signed out."))
}

/// `POST /console/sign-out-everywhere`.
pub(super) async fn sign_out_everywhere(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = match auth(&state, &req, Some(&form)).await {
        Ok(c) => c,
        Err(p) => return p,
    };
    if let Err(e) = control(&state).sign_out_everywhere(&ctx.signed.actor).await {
        return failed(BASE, &e);
    }
    cleared(
        &state,
        &sign_in_url(),
        Flash::ok("You are signed out on every device."),
    )
}

// --- invitations -------------------------------------------------------------------------------

/// Holds an invitation link's token between the link and the accept button (and across
/// sign-in), so the token never appears in a page and a foreign site cannot make a signed-in
/// user accept an invitation with one GET.
const INVITATION_COOKIE: &str = "corral_invitation";

/// `GET /console/invitations/accept?token=…`: the emailed invitation link.
pub(super) async fn invitation_link(req: HttpRequest, state: web::Data<AppState>) -> Page {
    let secure = if control(&state).config().public_url.starts_with("https:") {
        "; Secure"
    } else {
        ""
    };
    let token = web::Query::<TokenQuery>::from_query(req.query_string())
        .map(|q| q.into_inner().token)
        .unwrap_or_default();
    let mut resp = redirect(&format!("{BASE}/invitations"), None);
    // Tokens are base64url; anything else cannot be one and is not stored.
    let plausible = !token.is_empty()
        && token.len() <= 128
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plausible
        && let Ok(v) = header::HeaderValue::from_str(&format!(
            "{INVITATION_COOKIE}={token}; Path={BASE}; Max-Age=3600; HttpOnly; SameSite=Lax{secure}"
        ))
    {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

/// `GET /console/invitations`: the accept button, once signed in.
pub(super) async fn invitation_page(req: HttpRequest, state: web::Data<AppState>) -> Page {
    if super::cookie(&req, INVITATION_COOKIE).is_none() {
        return redirect(BASE, None);
    }
    let ctx = match auth(&state, &req, None).await {
        Ok(c) => c,
        Err(_) => {
            return redirect(
                &sign_in_url(),
                Some(Flash::info(
                    "Sign in with the invited email address to accept the invitation.",
                )),
            );
        }
    };
    html(
        &req,
        StatusCode::OK,
        pages::invitation(&ctx.signed.actor.email, &ctx.csrf),
    )
}

/// `POST /console/invitations/accept`.
pub(super) async fn accept_invitation(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let Some(token) = super::cookie(&req, INVITATION_COOKIE) else {
        return redirect(BASE, None);
    };
    let mut resp = match control(&state)
        .accept_invitation(&ctx.signed.actor, AcceptInvitation { token })
        .await
    {
        Ok(a) => redirect(
            &paths::account(&a.id),
            Some(Flash::ok(format!("Welcome to {}.", a.name))),
        ),
        Err(ControlError::LegalAcceptanceRequired { .. }) => {
            // Keep the invitation for after the terms.
            return redirect(
                &format!("{BASE}/legal"),
                Some(Flash::info("Please accept the current terms first.")),
            );
        }
        Err(e) => redirect(
            BASE,
            Some(Flash::error(format!(
                "The invitation could not be accepted: {}",
                sentence(&e.to_string())
            ))),
        ),
    };
    if let Ok(v) = header::HeaderValue::from_str(&super::expire_cookie(INVITATION_COOKIE, BASE)) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

// --- the user's profile ---------------------------------------------------------------------------

/// `GET /console/profile`: password and sessions.
pub(super) async fn profile_page(req: HttpRequest, state: web::Data<AppState>) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (accounts, me) = match (
        control.list_accounts(&ctx.signed.actor).await,
        control.me(&ctx.signed.actor).await,
    ) {
        (Ok(a), Ok(m)) => (a, m),
        (Err(e), _) | (_, Err(e)) => return failure_page(&req, &e),
    };
    let chrome = Chrome {
        email: ctx.signed.actor.email.clone(),
        csrf: ctx.csrf.clone(),
        accounts: accounts.iter().map(link).collect(),
        account: None,
        projects: Vec::new(),
        project: None,
        nav: Nav::Profile,
        flash: take_flash(&req),
    };
    html(
        &req,
        StatusCode::OK,
        pages::profile(&chrome, me.has_password),
    )
}

/// `POST /console/profile/password`.
pub(super) async fn set_password(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let back = format!("{BASE}/profile");
    // Not trimmed: a password is taken exactly as typed.
    let password = form.raw("password").unwrap_or_default();
    match control(&state)
        .set_password(&ctx.signed.actor, password)
        .await
    {
        Ok(()) => redirect(&back, Some(Flash::ok("Password saved."))),
        Err(e) => failed(&back, &e),
    }
}

// --- legal ---------------------------------------------------------------------------------------

/// `GET /console/legal`.
pub(super) async fn legal_page(req: HttpRequest, state: web::Data<AppState>) -> Page {
    let ctx = match auth(&state, &req, None).await {
        Ok(c) => c,
        Err(p) => return p,
    };
    let control = control(&state);
    let statuses = match control.legal_status(&ctx.signed.actor).await {
        Ok(s) => s,
        Err(e) => return failure_page(&req, &e),
    };
    let mut docs = Vec::new();
    for s in statuses {
        let body = match control.legal_release(&s.document, s.release).await {
            Ok(r) => r.body,
            Err(_) => String::new(),
        };
        docs.push(view::LegalDoc {
            document: s.document,
            release: s.release,
            title: s.title,
            body,
            published: when(s.published_at),
            accepted: s.accepted,
        });
    }
    let page = view::LegalPage {
        email: ctx.signed.actor.email.clone(),
        csrf: ctx.csrf,
        flash: take_flash(&req),
        docs,
    };
    html(&req, StatusCode::OK, pages::legal(&page))
}

/// `POST /console/legal/accept`: accepts each `release=<document>:<number>` reviewed.
pub(super) async fn legal_accept(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = match auth(&state, &req, Some(&form)).await {
        Ok(c) => c,
        Err(p) => return p,
    };
    let back = format!("{BASE}/legal");
    for pair in form.all("release") {
        let Some((document, release)) = pair.split_once(':') else {
            return failed(&back, &ControlError::invalid("a release is malformed"));
        };
        let Ok(release) = release.parse::<i64>() else {
            return failed(&back, &ControlError::invalid("a release is malformed"));
        };
        if let Err(e) = control(&state)
            .accept_legal(&ctx.signed.actor, document, release)
            .await
        {
            return failed(&back, &e);
        }
    }
    redirect(BASE, Some(Flash::ok("Thanks — you're all set.")))
}

// --- accounts ------------------------------------------------------------------------------------

fn parse<T: FromStr>(req: &HttpRequest, s: &str) -> Result<T, Page> {
    T::from_str(s).map_err(|_| not_found(req))
}

/// `GET /console/accounts/{account}`.
pub(super) async fn account_page(
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
pub(super) async fn new_organization_page(req: HttpRequest, state: web::Data<AppState>) -> Page {
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
pub(super) async fn create_organization(
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
pub(super) async fn rename_account(
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
pub(super) async fn delete_account(
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
pub(super) async fn members_page(
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
pub(super) async fn invite(
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
pub(super) async fn revoke_invitation(
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
pub(super) async fn change_role(
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
pub(super) async fn remove_member(
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
pub(super) async fn transfer(
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
pub(super) async fn audit_page(
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
    let page = view::AuditPage {
        chrome,
        account,
        events: events
            .into_iter()
            .map(|e| view::AuditRow {
                at: when(e.created_at),
                actor: e
                    .actor
                    .as_deref()
                    .map_or_else(|| "operator (CLI)".to_owned(), name),
                action: e.action,
                target: e.target,
            })
            .collect(),
    };
    html(&req, StatusCode::OK, pages::audit(&page))
}

// --- projects ------------------------------------------------------------------------------------

/// `POST /console/accounts/{account}/projects`.
pub(super) async fn create_project(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let id: AccountId = try_page!(parse(&req, &path));
    let name = form.get("name").unwrap_or_default().to_owned();
    match control(&state)
        .create_project(&ctx.signed.actor, id, ProjectName { name })
        .await
    {
        Ok(p) => redirect(
            &paths::keys(&path, &p.id),
            Some(Flash::ok(format!(
                "Created project {}. Next: create an API key and connect a provider.",
                p.name
            ))),
        ),
        Err(e) => failed(&paths::account(&path), &e),
    }
}

/// `POST …/projects/{project}/rename`.
pub(super) async fn rename_project(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let back = paths::settings(&path.0, &path.1);
    let name = form.get("name").unwrap_or_default().to_owned();
    match control(&state)
        .rename_project(&ctx.signed.actor, pid, ProjectName { name })
        .await
    {
        Ok(_) => redirect(&back, Some(Flash::ok("Renamed."))),
        Err(e) => failed(&back, &e),
    }
}

/// `POST …/projects/{project}/delete`.
pub(super) async fn delete_project(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    match control(&state).delete_project(&ctx.signed.actor, pid).await {
        Ok(p) => redirect(
            &paths::account(&path.0),
            Some(Flash::ok(format!("{} is being deleted.", p.name))),
        ),
        Err(e) => failed(&paths::settings(&path.0, &path.1), &e),
    }
}

/// `GET …/projects/{project}/settings`.
pub(super) async fn settings_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let (chrome, project, _) =
        try_page!(project_chrome(&req, control(&state), &ctx, &path.0, &path.1).await);
    html(
        &req,
        StatusCode::OK,
        pages::project_settings(&view::ProjectSettingsPage { chrome, project }),
    )
}

// --- keys ----------------------------------------------------------------------------------------

async fn keys_response(
    req: &HttpRequest,
    state: &AppState,
    ctx: &Ctx,
    path: &(String, String),
    new_key: Option<String>,
) -> Page {
    let control = control(state);
    let (chrome, project, pid) =
        try_page!(project_chrome(req, control, ctx, &path.0, &path.1).await);
    let keys = match control.list_keys(&ctx.signed.actor, pid).await {
        Ok(k) => k,
        Err(e) => return failure_page(req, &e),
    };
    let mut keys: Vec<_> = keys
        .into_iter()
        .map(|k| view::KeyRow {
            prefix: format!("crl_{}_…", k.key_id),
            key_id: k.key_id,
            created: ago(k.created_at),
            last_used: k.last_used_at.map_or_else(|| "never".to_owned(), ago),
            revoked: k.revoked_at.map(when),
        })
        .collect();
    // Active keys first, then newest first.
    keys.sort_by_key(|k| k.revoked.is_some());
    let page = view::KeysPage {
        chrome,
        project,
        keys,
        new_key,
    };
    html(req, StatusCode::OK, pages::keys(&page))
}

/// `GET …/projects/{project}/keys`.
pub(super) async fn keys_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    keys_response(&req, &state, &ctx, &path, None).await
}

/// `POST …/projects/{project}/keys`: the answer shows the new key once (`no-store`; no
/// redirect, so the key never travels in a cookie or a URL).
pub(super) async fn create_key(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let back = paths::keys(&path.0, &path.1);
    match control(&state).create_key(&ctx.signed.actor, pid).await {
        Ok(created) => keys_response(&req, &state, &ctx, &path, Some(created.key)).await,
        Err(e) => failed(&back, &e),
    }
}

/// `POST …/projects/{project}/keys/{key}/revoke`.
pub(super) async fn revoke_key(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let back = paths::keys(&path.0, &path.1);
    match control(&state)
        .revoke_key(&ctx.signed.actor, pid, &path.2)
        .await
    {
        Ok(_) => redirect(
            &back,
            Some(Flash::ok("Key revoked. It stops working at once.")),
        ),
        Err(e) => failed(&back, &e),
    }
}

// --- provider profiles ---------------------------------------------------------------------------

/// The context fields of a provider's form: (form name, label, hint, wire name).
fn context_fields(provider: Provider) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut out = Vec::new();
    for field in corral_control::required_context(provider) {
        out.push(match *field {
            "workspace" => ("workspace", "Workspace", "Your provider workspace's name."),
            "teamId" => ("teamId", "Team id", "The team that owns the sandboxes."),
            "projectId" => ("projectId", "Project id", "The provider project to bill."),
            "bridgeUrl" => (
                "bridgeUrl",
                "Bridge URL",
                "The https URL of the Corral bridge you deployed in your account.",
            ),
            other => (other, other, ""),
        });
    }
    if provider == Provider::Fly {
        out.push(("app", "Fly app", "The Fly app the machines run in."));
    }
    out
}

fn context_value(profile: Option<&ProfileView>, name: &str) -> String {
    let Some(p) = profile else {
        return String::new();
    };
    let c = &p.context;
    match name {
        "workspace" => c.workspace.clone(),
        "teamId" => c.team_id.clone(),
        "projectId" => c.project_id.clone(),
        "bridgeUrl" => c.bridge_url.clone(),
        other => p
            .settings
            .get(other)
            .and_then(|v| v.as_str())
            .map(str::to_owned),
    }
    .unwrap_or_default()
}

/// The display name of a provider.
fn label(p: Provider) -> &'static str {
    match p {
        Provider::Local => "Local",
        Provider::E2b => "E2B",
        Provider::Daytona => "Daytona",
        Provider::Vercel => "Vercel Sandbox",
        Provider::Runloop => "Runloop",
        Provider::Together => "Together",
        Provider::Morph => "Morph Cloud",
        Provider::Blaxel => "Blaxel",
        Provider::Fly => "Fly Machines",
        Provider::Sprites => "Sprites",
        Provider::Cloudflare => "Cloudflare",
        Provider::Modal => "Modal",
        Provider::Deno => "Deno Deploy",
    }
}

/// `GET …/projects/{project}/providers`.
pub(super) async fn providers_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (chrome, project, pid) =
        try_page!(project_chrome(&req, control, &ctx, &path.0, &path.1).await);
    let profiles = match control.list_profiles(&ctx.signed.actor, pid).await {
        Ok(p) => p,
        Err(e) => return failure_page(&req, &e),
    };
    let enabled = control.service().provider_ids();
    // Connected providers first, then the ones this server runs, then the rest.
    let mut providers: Vec<Provider> = Provider::ALL
        .into_iter()
        .filter(|p| *p != Provider::Local)
        .collect();
    providers.sort_by_key(|p| {
        (
            !profiles.iter().any(|x| x.provider == *p),
            !enabled.contains(p),
        )
    });
    let cards = providers
        .into_iter()
        .map(|p| {
            let profile = profiles.iter().find(|x| x.provider == p);
            view::ProviderCard {
                provider: p.as_str().to_owned(),
                label: label(p).to_owned(),
                enabled: enabled.contains(&p),
                connected: profile.is_some(),
                has_credential: profile.is_some_and(|x| x.has_credential),
                needs_credential: !p.is_bridge(),
                fields: context_fields(p)
                    .into_iter()
                    .map(|(name, label, hint)| view::ContextField {
                        name,
                        label,
                        hint,
                        value: context_value(profile, name),
                    })
                    .collect(),
                missing: profile
                    .map(|x| x.readiness.missing.clone())
                    .unwrap_or_default(),
                checks: profile.map(checks).unwrap_or_default(),
            }
        })
        .collect();
    html(
        &req,
        StatusCode::OK,
        pages::providers(&view::ProvidersPage {
            chrome,
            project,
            cards,
        }),
    )
}

/// A profile's verification results in the order the test runs them (the store sorts them by
/// name).
fn checks(profile: &ProfileView) -> Vec<view::CheckRow> {
    const ORDER: [&str; 6] = ["create", "exec", "write_file", "read_file", "get", "delete"];
    let mut rows: Vec<view::CheckRow> = profile
        .verifications
        .iter()
        .map(|v| view::CheckRow {
            operation: v.operation.clone(),
            ok: v.ok,
            reason: v.reason.clone(),
            remediation: v.remediation.clone(),
            checked: ago(v.checked_at),
        })
        .collect();
    rows.sort_by_key(|r| {
        ORDER
            .iter()
            .position(|o| *o == r.operation)
            .unwrap_or(ORDER.len())
    });
    rows
}

fn provider_of(req: &HttpRequest, s: &str) -> Result<Provider, Page> {
    Provider::from_str(s).map_err(|_| not_found(req))
}

/// `POST …/projects/{project}/providers/{provider}`: connects or updates. An empty
/// credential field keeps the stored credential.
pub(super) async fn put_profile(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let provider = try_page!(provider_of(&req, &path.2));
    let back = paths::providers(&path.0, &path.1);
    let control = control(&state);
    let mut credential = form
        .get("credential")
        .map(|c| SecretString::from(c.to_owned()));
    let existing = control
        .list_profiles(&ctx.signed.actor, pid)
        .await
        .ok()
        .and_then(|ps| ps.into_iter().find(|p| p.provider == provider));
    if credential.is_none() && existing.as_ref().is_some_and(|p| p.has_credential) {
        // Keep the stored credential: read it back only to store it again, never to show it.
        match control.registry().profile(pid, provider).await {
            Ok(Some(with)) => credential = with.credential,
            Ok(None) => {}
            Err(e) => return failed(&back, &ControlError::from(e)),
        }
    }
    let text = |name: &str| form.get(name).map(str::to_owned);
    let context = ProviderContext {
        workspace: text("workspace"),
        team_id: text("teamId"),
        project_id: text("projectId"),
        bridge_url: text("bridgeUrl"),
    };
    let mut settings = serde_json::Map::new();
    if let Some(app) = text("app") {
        settings.insert("app".to_owned(), serde_json::Value::String(app));
    }
    let request = PutProfile {
        credential,
        context,
        settings,
    };
    match control
        .put_profile(&ctx.signed.actor, pid, provider, request)
        .await
    {
        Ok(_) => redirect(
            &back,
            Some(Flash::ok(format!(
                "{} connected. Run a test to check what the credential can do.",
                label(provider)
            ))),
        ),
        Err(e) => failed(&back, &e),
    }
}

/// `POST …/projects/{project}/providers/{provider}/test`: deep verification.
pub(super) async fn test_profile(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let provider = try_page!(provider_of(&req, &path.2));
    let back = paths::providers(&path.0, &path.1);
    match control(&state)
        .test_profile(&ctx.signed.actor, pid, provider)
        .await
    {
        Ok(p) => {
            let failed_ops = p.verifications.iter().filter(|v| !v.ok).count();
            let flash = if failed_ops == 0 {
                Flash::ok(format!("{}: every operation passed.", label(provider)))
            } else {
                Flash::error(format!(
                    "{}: {failed_ops} of {} operations failed. See the results below.",
                    label(provider),
                    p.verifications.len()
                ))
            };
            redirect(&back, Some(flash))
        }
        Err(e) => failed(&back, &e),
    }
}

/// `POST …/projects/{project}/providers/{provider}/disconnect`.
pub(super) async fn delete_profile(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let provider = try_page!(provider_of(&req, &path.2));
    let back = paths::providers(&path.0, &path.1);
    match control(&state)
        .delete_profile(&ctx.signed.actor, pid, provider)
        .await
    {
        Ok(()) => redirect(
            &back,
            Some(Flash::ok(format!(
                "{} disconnected; its credential is erased.",
                label(provider)
            ))),
        ),
        Err(e) => failed(&back, &e),
    }
}

// --- sandboxes -----------------------------------------------------------------------------------

#[derive(serde::Deserialize)]
pub(super) struct CursorQuery {
    cursor: Option<String>,
}

/// `GET …/projects/{project}` (the sandboxes tab).
pub(super) async fn sandboxes_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (chrome, project, pid) =
        try_page!(project_chrome(&req, control, &ctx, &path.0, &path.1).await);
    let cursor = web::Query::<CursorQuery>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.into_inner().cursor);
    let page = match control
        .list_sandboxes(&ctx.signed.actor, pid, cursor.as_deref(), Some(50))
        .await
    {
        Ok(p) => p,
        Err(ControlError::Invalid { .. }) if cursor.is_some() => {
            return redirect(&paths::project(&path.0, &path.1), None);
        }
        Err(e) => return failure_page(&req, &e),
    };
    let rows = page
        .items
        .into_iter()
        .map(|s| view::SandboxRow {
            id: s.id.to_string(),
            provider: s.provider.as_str().to_owned(),
            status: s.status.as_str().to_owned(),
            observed: ago(s.status_observed_at),
            created: ago(s.created_at),
            deleted: s.deleted_at.map(ago),
        })
        .collect();
    html(
        &req,
        StatusCode::OK,
        pages::sandboxes(&view::SandboxesPage {
            chrome,
            project,
            rows,
            next: page.next_cursor,
        }),
    )
}

/// `GET …/projects/{project}/sandboxes/{sandbox}`.
pub(super) async fn sandbox_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (chrome, project, pid) =
        try_page!(project_chrome(&req, control, &ctx, &path.0, &path.1).await);
    let s = match control.get_sandbox(&ctx.signed.actor, pid, &path.2).await {
        Ok(s) => s,
        Err(ControlError::Invalid { .. }) => return not_found(&req),
        Err(e)
            if e.code().as_str() == "sandbox_not_found"
                || e.code().as_str() == "invalid_sandbox_id" =>
        {
            return not_found(&req);
        }
        Err(e) => return failure_page(&req, &e),
    };
    let m = &s.metadata;
    let mut facts = vec![
        ("Operation".to_owned(), m.operation_id.to_string()),
        (
            "Credential".to_owned(),
            serde_json::to_value(m.credential_source)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        ),
    ];
    let optional = [
        ("Native id", &m.native_provider_id),
        ("Workspace", &m.workspace),
        ("Team id", &m.team_id),
        ("Provider project", &m.project_id),
        ("Bridge", &m.bridge_url),
    ];
    for (k, v) in optional {
        if let Some(v) = v {
            facts.push((k.to_owned(), v.clone()));
        }
    }
    let row = view::SandboxRow {
        id: s.id.to_string(),
        provider: s.provider.as_str().to_owned(),
        status: s.status.as_str().to_owned(),
        observed: s.status_observed_at.map_or_else(|| "—".to_owned(), ago),
        created: String::new(),
        deleted: s.deleted_at.map(when),
    };
    html(
        &req,
        StatusCode::OK,
        pages::sandbox(&view::SandboxPage {
            chrome,
            project,
            row,
            facts,
        }),
    )
}
