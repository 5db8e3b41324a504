//! Who is signed in: the session cookie, the CSRF token and the origin check, shared by the
//! JSON API (`/v1/control`, CSRF token in the `X-CSRF-Token` header) and the console
//! (`/console`, CSRF token in a `csrf` form field).
//!
//! The rules (docs/control-plane.md, "Security rules"): only the cookie `corral_session`
//! authenticates, never an API key; every state-changing request (POST, PUT, PATCH, DELETE)
//! needs the session's CSRF token and, when the browser sends an `Origin` (else a `Referer`),
//! that origin must be the server's public URL's. Failing any of them is
//! `authentication_error`. The origin check lives here rather than in `corral-control`
//! because only the web layer sees the request.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::{Method, header};
use actix_web::{FromRequest, HttpMessage as _, HttpRequest, web};
use corral_control::{Actor, Control, ControlConfig, ControlError};
use corral_provider::{ExposeSecret as _, SecretString};

use crate::extract::{BodyLimit as _, Small, read_json, read_optional_json};
use crate::reply::Failure;
use crate::state::AppState;

/// The OpenAPI security scheme of the session cookie.
pub const SESSION_SCHEME: &str = "session";
/// The session cookie's name.
pub const SESSION_COOKIE: &str = "corral_session";
/// The JSON API's CSRF header.
pub const CSRF_HEADER: &str = "X-CSRF-Token";
/// Longest cookie value looked up; a session token is 43 base64url characters, so anything
/// far longer is not one (and is not worth hashing).
const MAX_TOKEN_LEN: usize = 256;

/// A request whose session cookie named a live session (and, for a state-changing request,
/// whose CSRF token and origin passed).
pub struct SignedIn {
    /// The signed-in user.
    pub actor: Actor,
    token: SecretString,
}

impl std::fmt::Debug for SignedIn {
    /// Never prints the session token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIn")
            .field("actor", &self.actor.user_id)
            .finish_non_exhaustive()
    }
}

impl SignedIn {
    /// The session token from the cookie (for `Control::csrf_token`); never log or render it.
    pub fn cookie_token(&self) -> &str {
        self.token.expose_secret()
    }
}

/// Whether `method` changes state (and so needs the CSRF token and origin).
pub fn is_state_changing(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// The value of the `corral_session` cookie, if the request carries one of sane length.
pub fn cookie_token(req: &HttpRequest) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim().trim_matches('"').to_owned())
        .filter(|v| !v.is_empty() && v.len() <= MAX_TOKEN_LEN)
}

/// The ASCII origin (`https://host[:port]`) of `url`, or `None` when it has none.
fn origin_of(url: &str) -> Option<String> {
    let origin = url::Url::parse(url).ok()?.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

/// Checks that a browser's `Origin` (or, absent that, `Referer`) is `public_url`'s origin.
/// A request carrying neither (not a browser, or a browser that withholds both) passes: the
/// CSRF token still protects it.
pub fn check_origin(req: &HttpRequest, public_url: &str) -> Result<(), ControlError> {
    let headers = req.headers();
    let sent = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER));
    let Some(sent) = sent else {
        return Ok(());
    };
    let expected = origin_of(public_url);
    let got = sent.to_str().ok().and_then(origin_of);
    match (got, expected) {
        (Some(got), Some(expected)) if got == expected => Ok(()),
        _ => Err(ControlError::unauthenticated(
            "the request's origin is not this server's public URL",
        )),
    }
}

/// Authenticates `req` by its session cookie; for a state-changing request, also checks the
/// origin and that `presented_csrf` is the session's CSRF token.
pub async fn authenticate(
    control: &Control,
    req: &HttpRequest,
    presented_csrf: Option<&str>,
) -> Result<SignedIn, ControlError> {
    let state_changing = is_state_changing(req.method());
    if state_changing {
        check_origin(req, &control.config().public_url)?;
    }
    let Some(token) = cookie_token(req) else {
        return Err(ControlError::unauthenticated(
            "sign in first: no session cookie",
        ));
    };
    let actor = control.authenticate_session(&token).await?;
    // The request middleware answers with the `RateLimit` fields of what it finds here, as
    // for the sandbox API.
    if let Some(policy) = control.request_quota(actor.user_id) {
        req.extensions_mut()
            .insert(corral_service::limiter::Admission {
                policies: vec![policy],
            });
    }
    if state_changing {
        let Some(presented) = presented_csrf else {
            return Err(ControlError::unauthenticated(format!(
                "a state-changing request needs the {CSRF_HEADER} header (from GET /v1/control/me)"
            )));
        };
        control.check_csrf(&token, presented)?;
    }
    Ok(SignedIn {
        actor,
        token: SecretString::from(token),
    })
}

/// The `Set-Cookie` value that starts a session: `HttpOnly`, `SameSite=Lax`, `Path=/`,
/// `Secure` when the public URL is https, and `Max-Age` the absolute session lifetime.
pub fn session_cookie(config: &ControlConfig, token: &str) -> String {
    format!(
        "{SESSION_COOKIE}={token}; HttpOnly; SameSite=Lax; Path=/; Max-Age={}{}",
        config.session_absolute.as_secs(),
        secure(config),
    )
}

/// The `Set-Cookie` value that ends a session in the browser.
pub fn cleared_session_cookie(config: &ControlConfig) -> String {
    format!(
        "{SESSION_COOKIE}=; HttpOnly; SameSite=Lax; Path=/; Max-Age=0{}",
        secure(config)
    )
}

fn secure(config: &ControlConfig) -> &'static str {
    if config.public_url.starts_with("https:") {
        "; Secure"
    } else {
        ""
    }
}

/// The `X-CSRF-Token` header, as documented on every state-changing operation (checked by
/// [`Session`]).
pub struct CsrfToken;

impl utoipa::IntoParams for CsrfToken {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        vec![
            ParameterBuilder::new()
                .name(CSRF_HEADER)
                .parameter_in(ParameterIn::Header)
                .required(utoipa::openapi::Required::True)
                .description(Some(
                    "The session's CSRF token, `csrfToken` of `GET /v1/control/me` or of the sign-in answer.",
                ))
                .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                .build(),
        ]
    }
}

/// The JSON API's extractor: [`authenticate`] with the `X-CSRF-Token` header.
#[derive(Debug)]
pub struct Session(pub SignedIn);

impl FromRequest for Session {
    type Error = Failure<ControlError>;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Failure<ControlError>>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
                return Err(Failure::new(
                    &req,
                    ControlError::internal("the server has no state"),
                ));
            };
            let csrf = req
                .headers()
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            authenticate(&state.control, &req, csrf.as_deref())
                .await
                .map(Session)
                .map_err(|e| Failure::new(&req, e))
        })
    }
}

/// A session and then a JSON body (at most 64 KiB), in that order: a request without a valid
/// session is `authentication_error` whatever its body, so nothing about the body's rules is
/// learned without signing in. (Separate `Session` and `Json` arguments would be extracted
/// concurrently, and the body's error could come first.)
pub struct SessionJson<T>(pub Session, pub Body<T>);

/// The JSON body of a [`SessionJson`].
pub struct Body<T>(pub T);

impl<T: serde::de::DeserializeOwned + 'static> FromRequest for SessionJson<T> {
    type Error = Failure<ControlError>;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Failure<ControlError>>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let mut payload = payload.take();
        Box::pin(async move {
            let session = Session::from_request(&req, &mut Payload::None).await?;
            let body = read_json::<T>(&req, &mut payload, Small::BYTES)
                .await
                .map_err(|e| Failure::new(&req, e.into()))?;
            Ok(SessionJson(session, Body(body)))
        })
    }
}

/// [`SessionJson`] for an optional body: an empty body is `None` (so a client that sends
/// none keeps working), anything else must be the JSON `T`.
pub struct SessionMaybeJson<T>(pub Session, pub Option<T>);

impl<T: serde::de::DeserializeOwned + 'static> FromRequest for SessionMaybeJson<T> {
    type Error = Failure<ControlError>;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Failure<ControlError>>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let mut payload = payload.take();
        Box::pin(async move {
            let session = Session::from_request(&req, &mut Payload::None).await?;
            let body = read_optional_json::<T>(&req, &mut payload, Small::BYTES)
                .await
                .map_err(|e| Failure::new(&req, e.into()))?;
            Ok(SessionMaybeJson(session, body))
        })
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn the_cookie_is_found_among_others_and_absurd_values_are_ignored() {
        let req = TestRequest::default()
            .insert_header((header::COOKIE, "a=1; corral_session=tok_1; b=2"))
            .to_http_request();
        assert_eq!(cookie_token(&req).as_deref(), Some("tok_1"));
        let req = TestRequest::default()
            .insert_header((header::COOKIE, "corral_sessionx=1"))
            .to_http_request();
        assert_eq!(cookie_token(&req), None);
        let long = format!("corral_session={}", "a".repeat(MAX_TOKEN_LEN + 1));
        let req = TestRequest::default()
            .insert_header((header::COOKIE, long))
            .to_http_request();
        assert_eq!(cookie_token(&req), None);
    }

    #[test]
    fn origin_must_be_the_public_urls_when_sent() {
        let public = "https://corral.example.com";
        let check = |name: header::HeaderName, value: &str| {
            let req = TestRequest::post()
                .insert_header((name, value))
                .to_http_request();
            check_origin(&req, public).is_ok()
        };
        assert!(check(header::ORIGIN, "https://corral.example.com"));
        assert!(check(header::ORIGIN, "https://corral.example.com:443"));
        assert!(check(
            header::REFERER,
            "https://corral.example.com/console/x?y=1"
        ));
        assert!(!check(header::ORIGIN, "https://evil.example.com"));
        assert!(!check(header::ORIGIN, "http://corral.example.com"));
        assert!(!check(header::ORIGIN, "null"));
        assert!(!check(
            header::REFERER,
            "https://corral.example.com.evil.net/"
        ));
        assert!(check_origin(&TestRequest::post().to_http_request(), public).is_ok());
    }

    #[test]
    fn cookies_follow_the_public_urls_scheme() {
        let mut config = ControlConfig::default();
        let c = session_cookie(&config, "t");
        assert_eq!(
            c,
            "corral_session=t; HttpOnly; SameSite=Lax; Path=/; Max-Age=604800"
        );
        config.public_url = "https://corral.example.com".into();
        assert!(session_cookie(&config, "t").ends_with("; Secure"));
        assert!(cleared_session_cookie(&config).contains("Max-Age=0"));
    }
}
