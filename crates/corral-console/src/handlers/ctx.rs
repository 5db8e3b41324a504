//! What every console handler shares: the signed-in context (the session cookie; on POST
//! also the `csrf` field and the origin), the answers to a failure (a page for a GET, the
//! form's page with a flash for a POST), the chrome of account and project pages, and dates
//! for people.

use std::net::IpAddr;
use std::str::FromStr;

use actix_web::HttpRequest;
use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use chrono::Utc;
use corral_control::{AccountId, AccountKind, AccountView, Control, ControlError, ProjectId};
use corral_domain::Timestamp;
use corral_web::AppState;
use corral_web::session::{self, SignedIn};

use crate::form::Form;
use crate::pages::{self, BASE};
use crate::respond::{html, not_found, redirect, take_flash};
use crate::view::{self, Chrome, Flash, Nav};

/// What a handler answers: a page, a redirect, or the page that says why not.
pub(crate) type Page = HttpResponse;

/// Authenticates a form post, or answers with the page that says why not.
macro_rules! post_ctx {
    ($state:expr, $req:expr, $form:expr) => {
        match $crate::handlers::ctx::auth(&$state, &$req, Some(&$form)).await {
            Ok(c) => c,
            Err(p) => return p,
        }
    };
}

/// Authenticates a page request (GET), or answers with the page that says why not.
macro_rules! get_ctx {
    ($state:expr, $req:expr) => {
        match $crate::handlers::ctx::auth(&$state, &$req, None).await {
            Ok(c) => c,
            Err(p) => return p,
        }
    };
}

/// The value of an `Ok`, or returns the page of an `Err`.
macro_rules! try_page {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(p) => return p,
        }
    };
}

pub(crate) use {get_ctx, post_ctx, try_page};

pub(crate) fn control(state: &AppState) -> &Control {
    &state.control
}

pub(crate) fn sign_in_url() -> String {
    format!("{BASE}/sign-in")
}

pub(crate) fn client_ip(req: &HttpRequest) -> Option<IpAddr> {
    req.peer_addr().map(|a| a.ip())
}

/// A signed-in request: the actor and the session's CSRF token for the page's forms.
pub(crate) struct Ctx {
    pub(crate) signed: SignedIn,
    pub(crate) csrf: String,
}

/// Authenticates a request. GET: the session cookie. POST: also the `csrf` field and the
/// origin. A missing or expired session redirects to sign-in; a bad CSRF field or origin with
/// a live session is a 403 page (the form is stale or came from elsewhere).
pub(crate) async fn auth(
    state: &AppState,
    req: &HttpRequest,
    form: Option<&Form>,
) -> Result<Ctx, Page> {
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
pub(crate) fn failure_page(req: &HttpRequest, e: &ControlError) -> Page {
    match e {
        ControlError::Unauthenticated { .. } => redirect(&sign_in_url(), None),
        ControlError::Invalid { message } if message.starts_with("no such ") => not_found(req),
        ControlError::Invalid { .. } => html(
            req,
            StatusCode::BAD_REQUEST,
            pages::error_page(400, "Not allowed", &e.to_string()),
        ),
        ControlError::Throttled { retry_after, .. } => html(
            req,
            StatusCode::TOO_MANY_REQUESTS,
            pages::error_page(429, "Slow down", &throttled_words(*retry_after, false)),
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
pub(crate) fn failed(to: &str, e: &ControlError) -> Page {
    match e {
        ControlError::LegalAcceptanceRequired { .. } => redirect(
            &format!("{BASE}/legal"),
            Some(Flash::info("Please accept the current terms first.")),
        ),
        ControlError::Unauthenticated { .. } => redirect(&sign_in_url(), None),
        ControlError::Throttled { retry_after, .. } => {
            redirect(to, Some(Flash::error(throttled_words(*retry_after, false))))
        }
        _ => redirect(to, Some(Flash::error(sentence(&e.to_string())))),
    }
}

/// A throttle's refusal in words people use: "Too many attempts — try again in about 12
/// minutes", never raw seconds; for a password sign-in, also the way around it (the emailed
/// link is never throttled by password failures).
pub(crate) fn throttled_words(retry_after_secs: u64, password: bool) -> String {
    let minutes = retry_after_secs.div_ceil(60);
    let wait = match minutes {
        0 | 1 => "about a minute".to_owned(),
        m if m < 120 => format!("about {m} minutes"),
        m => format!("about {} hours", m.div_ceil(60)),
    };
    let around = if password {
        ", or sign in with an emailed link"
    } else {
        ""
    };
    format!("Too many attempts — try again in {wait}{around}.")
}

pub(crate) fn sentence(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => {
            f.to_uppercase().chain(c).collect::<String>() + if s.ends_with('.') { "" } else { "." }
        }
        None => String::new(),
    }
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

pub(crate) fn when(t: Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// A span of time for people: "850 ms", "2.4 s", "3 min 5 s", "2 h 10 min".
pub(crate) fn span(ms: u64) -> String {
    match ms {
        m if m < 1000 => format!("{m} ms"),
        m if m < 60_000 => format!("{:.1} s", m as f64 / 1000.0),
        m if m < 3_600_000 => format!("{} min {} s", m / 60_000, (m / 1000) % 60),
        m => format!("{} h {} min", m / 3_600_000, (m / 60_000) % 60),
    }
}

/// A command as one row of a sandbox's history.
pub(crate) fn command_row(c: &corral_domain::Command, href: String) -> view::CommandRow {
    let duration = match c.ended_at {
        Some(end) => span(
            (end - c.started_at)
                .num_milliseconds()
                .max(0)
                .unsigned_abs(),
        ),
        None if c.state.is_final() => "—".to_owned(),
        None => format!(
            "running for {}",
            span(
                (Utc::now() - c.started_at)
                    .num_milliseconds()
                    .max(0)
                    .unsigned_abs()
            )
        ),
    };
    view::CommandRow {
        id: c.id.to_string(),
        command: c.command.clone(),
        state: c.state.as_str().to_owned(),
        exit_code: c.exit_code,
        started: format!("{} ({})", when(c.started_at), ago(c.started_at)),
        duration,
        href,
    }
}

/// What each provider this server runs can do to its sandboxes, from its capabilities (the
/// catalog `GET /v1/providers` answers); a provider it does not run can do nothing.
pub(crate) fn lifecycle_support(
    control: &Control,
) -> std::collections::BTreeMap<corral_domain::Provider, view::LifecycleSupport> {
    control
        .service()
        .providers()
        .providers
        .iter()
        .map(|c| {
            let can = view::LifecycleSupport {
                stop: c.supports_explicit_stop,
                snapshots: c.supports_snapshots,
                fork: c.supports_fork(),
            };
            (c.provider, can)
        })
        .collect()
}

/// A snapshot as one row of a list.
pub(crate) fn snapshot_row(s: &corral_domain::Snapshot) -> view::SnapshotRow {
    view::SnapshotRow {
        id: s.id.to_string(),
        sandbox: s.sandbox_id.to_string(),
        name: s.name.clone().unwrap_or_default(),
        status: s.status.as_str().to_owned(),
        size: view::size(s.size_bytes),
        failure: s.failure.clone(),
        created: format!("{} ({})", when(s.created_at), ago(s.created_at)),
        deleted: s.deleted_at.map(when),
    }
}

/// A fresh idempotency key for one form of a page (`console-<what>-<ulid>`): rendered into
/// the form, so a resent form carries the same key and acts once, while a new page makes a
/// new key for the next deliberate action.
pub(crate) fn form_key(what: &str) -> String {
    format!(
        "console-{what}-{}",
        corral_domain::OperationId::new().ulid()
    )
}

pub(crate) fn link(a: &AccountView) -> view::AccountLink {
    view::AccountLink {
        id: a.id.clone(),
        name: a.name.clone(),
        personal: a.kind == AccountKind::Personal,
        role: a.role.as_str().to_owned(),
    }
}

pub(crate) fn account_view(a: &AccountView) -> view::AccountView {
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
pub(crate) async fn account_chrome(
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
                deleting: p.deleting_at.is_some(),
            })
            .collect(),
        project: None,
        nav,
        flash: take_flash(req),
    };
    Ok((chrome, account_view(current), id))
}

/// As [`account_chrome`], for a project of the account.
pub(crate) async fn project_chrome(
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
    let deleting = found.deleting_at.is_some();
    account.deleting |= deleting;
    Ok((
        chrome,
        view::ProjectView {
            id: found.id,
            name: found.name,
            created: when(found.created_at),
            deleting,
            account,
        },
        pid,
    ))
}

pub(crate) fn parse<T: FromStr>(req: &HttpRequest, s: &str) -> Result<T, Page> {
    T::from_str(s).map_err(|_| not_found(req))
}

#[cfg(test)]
mod tests {
    use super::throttled_words;

    #[test]
    fn spans_of_time_are_said_in_the_unit_people_read() {
        use super::span;
        assert_eq!(span(850), "850 ms");
        assert_eq!(span(2400), "2.4 s");
        assert_eq!(span(185_000), "3 min 5 s");
        assert_eq!(span(7_800_000), "2 h 10 min");
    }

    #[test]
    fn throttle_waits_are_said_in_minutes_never_seconds() {
        assert_eq!(
            throttled_words(720, true),
            "Too many attempts — try again in about 12 minutes, or sign in with an emailed link."
        );
        assert_eq!(
            throttled_words(30, false),
            "Too many attempts — try again in about a minute."
        );
        // Rounded up: 61 s is about 2 minutes, not 1.
        assert!(throttled_words(61, false).contains("about 2 minutes"));
        assert!(throttled_words(3 * 3600, false).contains("about 3 hours"));
        for secs in [1, 59, 60, 90, 899, 900, 7200] {
            let words = throttled_words(secs, true);
            assert!(!words.contains("second"), "{words}");
            assert!(!words.contains(&format!("{secs} ")), "{words}");
        }
    }
}
