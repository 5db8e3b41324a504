//! Signing in and out (email link, password), the invitation link, the user's own profile
//! (password) and the legal terms: who the user is, before any account page.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, web};
use corral_control::{AcceptInvitation, ControlError};
use corral_web::AppState;
use corral_web::session;

use super::ctx::{
    Page, auth, client_ip, control, failed, failure_page, get_ctx, link, post_ctx, sentence,
    sign_in_url, throttled_words, when,
};
use crate::form::Form;
use crate::pages::{self, BASE, paths};
use crate::respond::{cookie, expire_cookie, html, redirect, take_flash};
use crate::view::{self, Chrome, Flash, Nav};

// --- sign-in -------------------------------------------------------------------------------------

/// `GET /console`: sign-in, the terms, or the user's personal account.
pub(crate) async fn home(req: HttpRequest, state: web::Data<AppState>) -> Page {
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
    if cookie(&req, INVITATION_COOKIE).is_some() {
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
pub(crate) async fn sign_in_page(req: HttpRequest, state: web::Data<AppState>) -> Page {
    corral_web::panic_point("console.sign_in");
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
pub(crate) async fn sign_in_email(
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
        Err(e) => sign_in_again(&req, email, &e, false),
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct CheckEmailQuery {
    #[serde(default)]
    email: String,
}

/// `GET /console/sign-in/check-email?email=…`: after requesting a link.
pub(crate) async fn check_email_page(req: HttpRequest) -> Page {
    let email = web::Query::<CheckEmailQuery>::from_query(req.query_string())
        .map(|q| q.into_inner().email)
        .unwrap_or_default();
    html(&req, StatusCode::OK, pages::check_email(&email))
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
pub(crate) async fn sign_in_password(
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
        Err(e) => sign_in_again(&req, email, &e, true),
    }
}

/// A refused sign-in: the sign-in page again, at once (no redirect, so the email typed stays
/// in the form without travelling in a URL or cookie), saying why in words — a wrong password,
/// or too many attempts and about how long to wait. Other failures go the usual way.
fn sign_in_again(req: &HttpRequest, email: &str, e: &ControlError, password: bool) -> Page {
    let (status, text) = match e {
        ControlError::Unauthenticated { .. } if password => (
            StatusCode::UNAUTHORIZED,
            "That email and password do not match. Check them and try again, or sign in with an emailed link."
                .to_owned(),
        ),
        ControlError::Throttled { retry_after, .. } => (
            StatusCode::TOO_MANY_REQUESTS,
            throttled_words(*retry_after, password),
        ),
        ControlError::Invalid { message } if !password => {
            (StatusCode::BAD_REQUEST, sentence(message))
        }
        other => return failed(&sign_in_url(), other),
    };
    let page = view::SignInPage {
        flash: Some(Flash::error(text)),
        email: email.to_owned(),
    };
    let mut resp = html(req, status, pages::sign_in(&page));
    if let ControlError::Throttled { retry_after, .. } = e
        && let Ok(v) = header::HeaderValue::from_str(&retry_after.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

#[derive(serde::Deserialize)]
pub(crate) struct TokenQuery {
    #[serde(default)]
    token: String,
}

/// `GET /console/sign-in/verify?token=…`: the emailed link. Renders a confirmation page whose
/// button POSTs the token back; it neither consumes the token (mail scanners prefetch links)
/// nor signs in (a foreign page could send a visitor here with the attacker's own token).
pub(crate) async fn sign_in_verify_page(req: HttpRequest) -> Page {
    let token = web::Query::<TokenQuery>::from_query(req.query_string())
        .map(|q| q.into_inner().token)
        .unwrap_or_default();
    if !plausible_token(&token) {
        return redirect(&sign_in_url(), Some(bad_link()));
    }
    html(&req, StatusCode::OK, pages::confirm_sign_in(&token))
}

/// `POST /console/sign-in/verify` (`token=…`): the confirmation. Only a same-origin POST
/// consumes the token, sets the session cookie and redirects.
pub(crate) async fn sign_in_verify(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    if !same_site_fetch(&req)
        || session::check_origin(&req, &control(&state).config().public_url).is_err()
    {
        return redirect(
            &sign_in_url(),
            Some(Flash::error(
                "That sign-in confirmation did not come from this site. Open the emailed link again.",
            )),
        );
    }
    let token = form.raw("token").unwrap_or_default();
    match control(&state)
        .sign_in_with_token(token, client_ip(&req))
        .await
    {
        Ok((_, session_token)) => signed_in_response(&state, &session_token),
        Err(ControlError::Unauthenticated { .. }) => redirect(&sign_in_url(), Some(bad_link())),
        Err(e) => failed(&sign_in_url(), &e),
    }
}

fn bad_link() -> Flash {
    Flash::error("That sign-in link is invalid, already used or expired. Request a new one.")
}

/// Tokens are base64url; anything else cannot be one (and is never echoed into a page).
fn plausible_token(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= 128
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A browser that sends `Sec-Fetch-Site` says whether the request came from this origin; a
/// cross-site one is refused even if it managed to omit `Origin`. Clients that send neither
/// header are not browsers and cannot be the victim of login CSRF.
fn same_site_fetch(req: &HttpRequest) -> bool {
    match req.headers().get("sec-fetch-site") {
        None => true,
        Some(v) => matches!(v.to_str(), Ok("same-origin" | "none")),
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
pub(crate) async fn sign_out(
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
pub(crate) async fn sign_out_everywhere(
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
pub(crate) async fn invitation_link(req: HttpRequest, state: web::Data<AppState>) -> Page {
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
    if plausible_token(&token)
        && let Ok(v) = header::HeaderValue::from_str(&format!(
            "{INVITATION_COOKIE}={token}; Path={BASE}; Max-Age=3600; HttpOnly; SameSite=Lax{secure}"
        ))
    {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

/// `GET /console/invitations`: the accept button, once signed in.
pub(crate) async fn invitation_page(req: HttpRequest, state: web::Data<AppState>) -> Page {
    if cookie(&req, INVITATION_COOKIE).is_none() {
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
    let offer = match cookie(&req, INVITATION_COOKIE) {
        Some(token) => match control(&state)
            .invitation_preview(&ctx.signed.actor, &token)
            .await
        {
            Ok(p) => p.map(|p| view::InvitationOffer {
                organization: p.account_name,
                inviter: p.inviter_email,
                role: p.role.as_str().to_owned(),
            }),
            Err(e) => return failure_page(&req, &e),
        },
        None => None,
    };
    html(
        &req,
        StatusCode::OK,
        pages::invitation(&ctx.signed.actor.email, &ctx.csrf, offer.as_ref()),
    )
}

/// `POST /console/invitations/accept`.
pub(crate) async fn accept_invitation(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let Some(token) = cookie(&req, INVITATION_COOKIE) else {
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
    if let Ok(v) = header::HeaderValue::from_str(&expire_cookie(INVITATION_COOKIE, BASE)) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

// --- the user's profile ---------------------------------------------------------------------------

/// `GET /console/profile`: password and sessions.
pub(crate) async fn profile_page(req: HttpRequest, state: web::Data<AppState>) -> Page {
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
pub(crate) async fn set_password(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let back = format!("{BASE}/profile");
    // Not trimmed: a password is taken exactly as typed.
    let password = form.raw("password").unwrap_or_default();
    let current = form.raw("current_password").filter(|p| !p.is_empty());
    match control(&state)
        .set_password(&ctx.signed.actor, current, password)
        .await
    {
        Ok(()) => redirect(&back, Some(Flash::ok("Password saved."))),
        Err(e) => failed(&back, &e),
    }
}

// --- legal ---------------------------------------------------------------------------------------

/// `GET /console/legal`.
pub(crate) async fn legal_page(req: HttpRequest, state: web::Data<AppState>) -> Page {
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
pub(crate) async fn legal_accept(
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
