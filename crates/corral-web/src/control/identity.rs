//! Operations 1–10: sign-in (email link, token, password), sign-out, the signed-in user,
//! their password, and legal releases.

use actix_web::http::StatusCode;
use actix_web::http::header::SET_COOKIE;
use actix_web::{HttpRequest, HttpResponse, delete, get, post, put, web};
use corral_control::{Actor, Control};
use corral_errors::ErrorCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::doc::{CONTROL_COMMON, errors};
use crate::extract::{Json, Unauthenticated};
use crate::reply::{ControlFailure, ControlReply, fail, json_ok, no_content, no_store};
use crate::session::{
    CsrfToken, Session, SessionJson, check_origin, cleared_session_cookie, session_cookie,
};
use crate::state::AppState;

pub(super) fn register(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(sign_in_email)
        .service(sign_in_token)
        .service(sign_in_password)
        .service(sign_out)
        .service(sign_out_everywhere)
        .service(me)
        .service(set_password)
        .service(legal_status)
        .service(legal_release)
        .service(accept_legal);
}

errors!(Common: CONTROL_COMMON);
// Sign-in bodies have the edge's short deadline (`[http] unauthenticated_body_seconds`).
errors!(SignInErrors: CONTROL_COMMON, &[ErrorCode::PayloadTooLarge, ErrorCode::RequestTimeout]);
errors!(LegalReadErrors: CONTROL_COMMON, &[ErrorCode::LegalUnavailable]);
errors!(LegalReleaseErrors: CONTROL_COMMON, &[ErrorCode::LegalNotFound, ErrorCode::LegalUnavailable]);
errors!(AcceptErrors: CONTROL_COMMON, &[
    ErrorCode::LegalNotFound,
    ErrorCode::LegalReleaseChanged,
    ErrorCode::LegalUnavailable,
]);

/// `POST /v1/control/sign-in/email`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignInEmail {
    /// The address to mail a sign-in link to.
    #[schema(format = Email, max_length = 254)]
    email: String,
}

/// `POST /v1/control/sign-in/token`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignInToken {
    /// The token from the emailed link.
    token: String,
}

/// `POST /v1/control/sign-in/password`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignInPassword {
    /// The account's email.
    #[schema(format = Email, max_length = 254)]
    email: String,
    /// Its password.
    #[schema(format = Password)]
    password: String,
}

/// `PUT /v1/control/me/password`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewPassword {
    /// The new password: at least 12 characters and at most 1024 bytes of UTF-8.
    #[schema(min_length = 12, format = Password)]
    password: String,
    /// The current password. Needed unless the session signed in within the last 10
    /// minutes (a first password, or a forgotten one after an emailed link).
    #[serde(default, rename = "currentPassword")]
    #[schema(format = Password)]
    current_password: Option<String>,
}

/// `POST /v1/control/legal/acceptances`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Acceptance {
    /// `terms`, `privacy` or `acceptable-use`.
    document: String,
    /// The release the user reviewed.
    release: i64,
}

/// A sign-in link was mailed, or not: the answer is the same either way.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SignInRequested {
    /// Always `true`.
    accepted: bool,
}

/// A new session (its token is only in the `Set-Cookie` header).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SignedInBody {
    /// The user.
    user_id: String,
    /// Their email.
    email: String,
    /// The token state-changing requests send in `X-CSRF-Token`.
    csrf_token: String,
}

/// The client address for sign-in throttling: the peer's, or the client a trusted proxy
/// names in `X-Forwarded-For` (`[http] trusted_proxies`; anyone else's header is the
/// client's to forge).
fn client_address(req: &HttpRequest) -> Option<std::net::IpAddr> {
    crate::edge::client_address(req)
}

/// A sign-in answer: the body and the session cookie.
fn signed_in(control: &Control, actor: &Actor, token: &str) -> HttpResponse {
    let body = SignedInBody {
        user_id: actor.user_id.to_string(),
        email: actor.email.clone(),
        csrf_token: control.csrf_token(token),
    };
    let mut resp = json_ok(StatusCode::OK, &body);
    if let Ok(v) = session_cookie(control.config(), token).parse() {
        resp.headers_mut().append(SET_COOKIE, v);
    }
    no_store(resp)
}

fn cleared(control: &Control) -> HttpResponse {
    let mut resp = no_content();
    if let Ok(v) = cleared_session_cookie(control.config()).parse() {
        resp.headers_mut().append(SET_COOKIE, v);
    }
    resp
}

/// The origin check of the sign-in operations (no session yet, so no CSRF token: the origin
/// keeps another site from signing a browser into an account of its choosing).
fn origin(req: &HttpRequest, control: &Control) -> Result<(), ControlFailure> {
    check_origin(req, &control.config().public_url).map_err(|e| ControlFailure::new(req, e))
}

/// Mail a sign-in link.
///
/// 202 whether or not the address belongs to a user (nothing is learned from the answer);
/// only known, unsuppressed users get mail.
#[utoipa::path(
    operation_id = "requestSignInLink", tag = "control-plane", security(()),
    request_body(content = SignInEmail, content_type = "application/json"),
    responses(
        (status = 202, description = "Accepted.", body = SignInRequested),
        SignInErrors,
    ))]
#[post("/v1/control/sign-in/email")]
pub(crate) async fn sign_in_email(
    req: HttpRequest,
    body: Json<SignInEmail, Unauthenticated>,
    state: web::Data<AppState>,
) -> ControlReply {
    let control = &state.control;
    origin(&req, control)?;
    control
        .request_sign_in(&body.0.email, client_address(&req))
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(
        StatusCode::ACCEPTED,
        &SignInRequested { accepted: true },
    ))
}

/// Sign in with the token of an emailed link (single use, 15 minutes).
///
/// Sets the session cookie. A bad, used or expired token is `authentication_error`.
#[utoipa::path(
    operation_id = "signInWithToken", tag = "control-plane", security(()),
    request_body(content = SignInToken, content_type = "application/json"),
    responses(
        (status = 200, description = "Signed in; `Set-Cookie: corral_session=…; HttpOnly; SameSite=Lax; Path=/`.", body = SignedInBody),
        SignInErrors,
    ))]
#[post("/v1/control/sign-in/token")]
pub(crate) async fn sign_in_token(
    req: HttpRequest,
    body: Json<SignInToken, Unauthenticated>,
    state: web::Data<AppState>,
) -> ControlReply {
    let control = &state.control;
    origin(&req, control)?;
    let (actor, token) = control
        .sign_in_with_token(&body.0.token, client_address(&req))
        .await
        .map_err(fail(&req))?;
    Ok(signed_in(control, &actor, &token))
}

/// Sign in with email and password.
///
/// Sets the session cookie. Failed attempts are throttled per email and per client address
/// (`rate_limited` with `Retry-After`).
#[utoipa::path(
    operation_id = "signInWithPassword", tag = "control-plane", security(()),
    request_body(content = SignInPassword, content_type = "application/json"),
    responses(
        (status = 200, description = "Signed in; `Set-Cookie: corral_session=…; HttpOnly; SameSite=Lax; Path=/`.", body = SignedInBody),
        SignInErrors,
    ))]
#[post("/v1/control/sign-in/password")]
pub(crate) async fn sign_in_password(
    req: HttpRequest,
    body: Json<SignInPassword, Unauthenticated>,
    state: web::Data<AppState>,
) -> ControlReply {
    let control = &state.control;
    origin(&req, control)?;
    let SignInPassword { email, password } = body.0;
    let (actor, token) = control
        .sign_in_with_password(&email, &password, client_address(&req))
        .await
        .map_err(fail(&req))?;
    Ok(signed_in(control, &actor, &token))
}

/// Sign out this session; clears the cookie.
#[utoipa::path(
    operation_id = "signOut", tag = "control-plane", security(("session" = [])), params(CsrfToken),
    responses((status = 204, description = "Signed out; the cookie is cleared."), Common))]
#[post("/v1/control/sign-out")]
pub(crate) async fn sign_out(
    req: HttpRequest,
    session: Session,
    state: web::Data<AppState>,
) -> ControlReply {
    state
        .control
        .sign_out(&session.0.actor)
        .await
        .map_err(fail(&req))?;
    Ok(cleared(&state.control))
}

/// Sign out every session of the user; clears the cookie.
#[utoipa::path(
    operation_id = "signOutEverywhere", tag = "control-plane", security(("session" = [])), params(CsrfToken),
    responses((status = 204, description = "Every session revoked; the cookie is cleared."), Common))]
#[delete("/v1/control/sessions")]
pub(crate) async fn sign_out_everywhere(
    req: HttpRequest,
    session: Session,
    state: web::Data<AppState>,
) -> ControlReply {
    state
        .control
        .sign_out_everywhere(&session.0.actor)
        .await
        .map_err(fail(&req))?;
    Ok(cleared(&state.control))
}

/// The signed-in user, their accounts and the session's CSRF token.
#[utoipa::path(
    operation_id = "getMe", tag = "control-plane", security(("session" = [])),
    responses((status = 200, description = "The user.", body = MeBody), Common))]
#[get("/v1/control/me")]
pub(crate) async fn me(
    req: HttpRequest,
    session: Session,
    state: web::Data<AppState>,
) -> ControlReply {
    let user = state
        .control
        .me(&session.0.actor)
        .await
        .map_err(fail(&req))?;
    let body = MeBody::new(user, state.control.csrf_token(session.0.cookie_token()));
    Ok(no_store(json_ok(StatusCode::OK, &body)))
}

/// `GET /v1/control/me`: the user, their accounts and the session's CSRF token.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MeBody {
    /// The user (`usr_<ulid>`).
    user_id: String,
    /// Their verified, lower-cased email.
    email: String,
    /// Whether they set a password (else they sign in by email link only).
    has_password: bool,
    /// Their personal account.
    personal_account_id: String,
    /// Every account they belong to, with their role.
    accounts: Vec<AccountRoleBody>,
    /// When the user was created.
    #[schema(value_type = String, format = DateTime)]
    created_at: corral_domain::Timestamp,
    /// The token state-changing requests send in `X-CSRF-Token`.
    csrf_token: String,
}

/// One account of the user, with their role in it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AccountRoleBody {
    /// The account (`acc_<ulid>`).
    account_id: String,
    /// Its name.
    name: String,
    /// `personal` or `organization`.
    #[schema(value_type = String, pattern = "^(personal|organization)$")]
    kind: corral_control::AccountKind,
    /// `owner`, `admin` or `member`.
    #[schema(value_type = String, pattern = "^(owner|admin|member)$")]
    role: corral_control::Role,
}

impl MeBody {
    fn new(user: corral_control::Me, csrf_token: String) -> Self {
        Self {
            user_id: user.user_id.to_string(),
            email: user.email,
            has_password: user.has_password,
            personal_account_id: user.personal_account_id.to_string(),
            accounts: user
                .accounts
                .into_iter()
                .map(|a| AccountRoleBody {
                    account_id: a.account_id.to_string(),
                    name: a.name,
                    kind: a.kind,
                    role: a.role,
                })
                .collect(),
            created_at: user.created_at,
            csrf_token,
        }
    }
}

/// The current release of each published legal document.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LegalStatusBody {
    /// One per published document.
    items: Vec<LegalDocumentStatus>,
}

/// One document's current release and whether the user accepted it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LegalDocumentStatus {
    /// `terms`, `privacy` or `acceptable-use`.
    document: String,
    /// The current release.
    release: i64,
    /// Its title.
    title: String,
    /// When it was published.
    #[schema(value_type = String, format = DateTime)]
    published_at: corral_domain::Timestamp,
    /// Whether the user accepted this release.
    accepted: bool,
}

/// One release of a legal document.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LegalReleaseBody {
    /// `terms`, `privacy` or `acceptable-use`.
    document: String,
    /// The release number.
    release: i64,
    /// Its title.
    title: String,
    /// Its text (Markdown).
    body: String,
    /// When it was published.
    #[schema(value_type = String, format = DateTime)]
    published_at: corral_domain::Timestamp,
}

/// Set the user's password (at least 12 characters).
///
/// Give `currentPassword`, unless the session signed in within the last 10 minutes.
#[utoipa::path(
    operation_id = "setPassword", tag = "control-plane", security(("session" = [])), params(CsrfToken),
    request_body(content = NewPassword, content_type = "application/json"),
    responses((status = 204, description = "Set."), Common))]
#[put("/v1/control/me/password")]
pub(crate) async fn set_password(
    req: HttpRequest,
    session_body: SessionJson<NewPassword>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    state
        .control
        .set_password(
            &session.0.actor,
            body.0.current_password.as_deref(),
            &body.0.password,
        )
        .await
        .map_err(fail(&req))?;
    Ok(no_content())
}

/// The current release of each published legal document, and whether the user accepted it.
#[utoipa::path(
    operation_id = "getLegalStatus", tag = "control-plane", security(("session" = [])),
    responses((status = 200, description = "Each published document.", body = LegalStatusBody), LegalReadErrors))]
#[get("/v1/control/legal")]
pub(crate) async fn legal_status(
    req: HttpRequest,
    session: Session,
    state: web::Data<AppState>,
) -> ControlReply {
    let status = state
        .control
        .legal_status(&session.0.actor)
        .await
        .map_err(fail(&req))?;
    let items = status
        .into_iter()
        .map(|s| LegalDocumentStatus {
            document: s.document,
            release: s.release,
            title: s.title,
            published_at: s.published_at,
            accepted: s.accepted,
        })
        .collect();
    Ok(json_ok(StatusCode::OK, &LegalStatusBody { items }))
}

/// One release of a legal document, with its text.
#[utoipa::path(
    operation_id = "getLegalRelease", tag = "control-plane", security(("session" = [])),
    params(
        ("document" = String, Path, description = "`terms`, `privacy` or `acceptable-use`."),
        ("release" = i64, Path, description = "The release number."),
    ),
    responses((status = 200, description = "The release.", body = LegalReleaseBody), LegalReleaseErrors))]
#[get("/v1/control/legal/{document}/releases/{release}")]
pub(crate) async fn legal_release(
    req: HttpRequest,
    _session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ControlReply {
    let (document, release) = path.into_inner();
    // A release that is not a number names no release.
    let Ok(release) = release.parse::<i64>() else {
        return Err(ControlFailure::new(
            &req,
            corral_control::ControlError::LegalNotFound,
        ));
    };
    let found = state
        .control
        .legal_release(&document, release)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(
        StatusCode::OK,
        &LegalReleaseBody {
            document: found.document,
            release: found.release,
            title: found.title,
            body: found.body,
            published_at: found.published_at,
        },
    ))
}

/// Accept the release of a legal document the user reviewed.
///
/// `legal_release_changed` when a newer release was published since.
#[utoipa::path(
    operation_id = "acceptLegalRelease", tag = "control-plane", security(("session" = [])), params(CsrfToken),
    request_body(content = Acceptance, content_type = "application/json"),
    responses((status = 204, description = "Accepted (and kept as an audit trail)."), AcceptErrors))]
#[post("/v1/control/legal/acceptances")]
pub(crate) async fn accept_legal(
    req: HttpRequest,
    session_body: SessionJson<Acceptance>,
    state: web::Data<AppState>,
) -> ControlReply {
    let SessionJson(session, body) = session_body;
    let Acceptance { document, release } = body.0;
    state
        .control
        .accept_legal(&session.0.actor, &document, release)
        .await
        .map_err(fail(&req))?;
    Ok(no_content())
}
