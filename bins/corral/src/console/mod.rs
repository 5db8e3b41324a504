//! The web console under `/console`: server-rendered pages over the same control-plane use
//! cases as the JSON API (`corral-control`), never the database directly.
//!
//! - Templates are Rust (`maud`), compiled in, every value escaped; static files are compiled
//!   in too (`assets`), so the binary is the whole product.
//! - Forms POST to console routes with a hidden `csrf` field (checked with the `Origin`, see
//!   `docs/control-plane.md`), then redirect (POST/redirect/GET) with a flash message in a
//!   short-lived cookie. JavaScript only enhances (the copy button).
//! - Every response carries a strict `Content-Security-Policy` (no inline script or style),
//!   `X-Frame-Options: DENY`, `Referrer-Policy: same-origin` (sign-in links carry a token;
//!   `no-referrer` would make browsers send `Origin: null` on form posts) and, for HTML,
//!   `Cache-Control: no-store`.

mod assets;
pub(crate) mod form;
mod handlers;
pub(crate) mod pages;
pub(crate) mod view;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::{Next, from_fn};
use actix_web::{HttpRequest, HttpResponse, web};
use corral_errors::ErrorCode;
use maud::Markup;

use crate::http::ResponseCode;
use view::{Flash, FlashKind};

/// The policy every console response carries: scripts, styles and images only from this
/// origin (`/console/assets`), no inline code, no framing, forms only to this origin.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const FLASH_COOKIE: &str = "corral_flash";

/// Registers the console's routes under `/console`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    use handlers as h;
    let acc = "/accounts/{account}";
    let prj = "/accounts/{account}/projects/{project}";
    cfg.service(
        web::scope(pages::BASE)
            .wrap(from_fn(security_headers))
            .route("/assets/{name}", web::get().to(assets::serve))
            .route("", web::get().to(h::home))
            .route("/", web::get().to(h::home))
            .route("/sign-in", web::get().to(h::sign_in_page))
            .route("/sign-in/email", web::post().to(h::sign_in_email))
            .route("/sign-in/password", web::post().to(h::sign_in_password))
            .route("/sign-in/check-email", web::get().to(check_email_page))
            .route("/sign-in/verify", web::get().to(h::sign_in_verify))
            .route("/sign-out", web::post().to(h::sign_out))
            .route(
                "/sign-out-everywhere",
                web::post().to(h::sign_out_everywhere),
            )
            .route("/invitations/accept", web::get().to(h::invitation_link))
            .route("/invitations/accept", web::post().to(h::accept_invitation))
            .route("/invitations", web::get().to(h::invitation_page))
            .route("/profile", web::get().to(h::profile_page))
            .route("/profile/password", web::post().to(h::set_password))
            .route("/legal", web::get().to(h::legal_page))
            .route("/legal/accept", web::post().to(h::legal_accept))
            .route("/accounts/new", web::get().to(h::new_organization_page))
            .route("/accounts", web::post().to(h::create_organization))
            .route(acc, web::get().to(h::account_page))
            .route(&format!("{acc}/rename"), web::post().to(h::rename_account))
            .route(&format!("{acc}/delete"), web::post().to(h::delete_account))
            .route(&format!("{acc}/transfer"), web::post().to(h::transfer))
            .route(&format!("{acc}/members"), web::get().to(h::members_page))
            .route(
                &format!("{acc}/members/{{user}}/role"),
                web::post().to(h::change_role),
            )
            .route(
                &format!("{acc}/members/{{user}}/remove"),
                web::post().to(h::remove_member),
            )
            .route(&format!("{acc}/invitations"), web::post().to(h::invite))
            .route(
                &format!("{acc}/invitations/{{invitation}}/revoke"),
                web::post().to(h::revoke_invitation),
            )
            .route(&format!("{acc}/audit"), web::get().to(h::audit_page))
            .route(
                &format!("{acc}/projects"),
                web::post().to(h::create_project),
            )
            .route(prj, web::get().to(h::sandboxes_page))
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}"),
                web::get().to(h::sandbox_page),
            )
            .route(&format!("{prj}/settings"), web::get().to(h::settings_page))
            .route(&format!("{prj}/rename"), web::post().to(h::rename_project))
            .route(&format!("{prj}/delete"), web::post().to(h::delete_project))
            .route(&format!("{prj}/keys"), web::get().to(h::keys_page))
            .route(&format!("{prj}/keys"), web::post().to(h::create_key))
            .route(
                &format!("{prj}/keys/{{key}}/revoke"),
                web::post().to(h::revoke_key),
            )
            .route(
                &format!("{prj}/providers"),
                web::get().to(h::providers_page),
            )
            .route(
                &format!("{prj}/providers/{{provider}}"),
                web::post().to(h::put_profile),
            )
            .route(
                &format!("{prj}/providers/{{provider}}/test"),
                web::post().to(h::test_profile),
            )
            .route(
                &format!("{prj}/providers/{{provider}}/disconnect"),
                web::post().to(h::delete_profile),
            )
            .default_service(web::to(not_found)),
    );
}

/// Middleware: the security headers of every console response.
async fn security_headers(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let mut res = next.call(req).await?;
    let headers = res.headers_mut();
    let fixed = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    // Pages show account data: never cached (assets set their own policy).
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    Ok(res)
}

/// An HTML page with `status`. Clears the flash cookie the page consumed, if any. A failure
/// status is marked as already rendered, so the API's envelope middleware leaves it HTML.
pub(crate) fn html(req: &HttpRequest, status: StatusCode, page: Markup) -> HttpResponse {
    let mut resp = HttpResponse::build(status);
    resp.content_type("text/html; charset=utf-8");
    if cookie(req, FLASH_COOKIE).is_some() {
        resp.append_header((header::SET_COOKIE, expire_cookie(FLASH_COOKIE, pages::BASE)));
    }
    let mut resp = resp.body(page.into_string());
    if status.as_u16() >= 400 {
        let code = if status.is_server_error() {
            ErrorCode::InternalError
        } else {
            ErrorCode::InvalidRequest
        };
        resp.extensions_mut().insert(ResponseCode(code));
    }
    resp
}

/// 303 See Other to `to`, optionally carrying a flash message to the next page.
pub(crate) fn redirect(to: &str, flash: Option<Flash>) -> HttpResponse {
    let mut resp = HttpResponse::SeeOther();
    resp.insert_header((header::LOCATION, to));
    if let Some(f) = flash {
        let value: String = url::form_urlencoded::byte_serialize(
            format!("{}:{}", f.kind.as_str(), f.text).as_bytes(),
        )
        .collect();
        resp.append_header((
            header::SET_COOKIE,
            format!(
                "{FLASH_COOKIE}={value}; Path={}; Max-Age=60; HttpOnly; SameSite=Lax",
                pages::BASE
            ),
        ));
    }
    resp.finish()
}

/// The flash message the previous response left, if any.
pub(crate) fn take_flash(req: &HttpRequest) -> Option<Flash> {
    let raw = cookie(req, FLASH_COOKIE)?;
    let decoded: String = url::form_urlencoded::parse(format!("f={raw}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())?;
    let (kind, text) = decoded.split_once(':')?;
    let kind = FlashKind::parse(kind)?;
    // Bounded: a forged cookie can only show its own sender a short plain-text line.
    let text: String = text.chars().take(300).collect();
    Some(Flash { kind, text })
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie(req: &HttpRequest, name: &str) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// A `Set-Cookie` value that deletes cookie `name` on `path`.
pub(crate) fn expire_cookie(name: &str, path: &str) -> String {
    format!("{name}=; Path={path}; Max-Age=0; HttpOnly; SameSite=Lax")
}

#[derive(serde::Deserialize)]
struct CheckEmailQuery {
    #[serde(default)]
    email: String,
}

async fn check_email_page(req: HttpRequest) -> HttpResponse {
    let email = web::Query::<CheckEmailQuery>::from_query(req.query_string())
        .map(|q| q.into_inner().email)
        .unwrap_or_default();
    html(&req, StatusCode::OK, pages::check_email(&email))
}

async fn not_found(req: HttpRequest) -> HttpResponse {
    html(
        &req,
        StatusCode::NOT_FOUND,
        pages::error_page(
            404,
            "Page not found",
            "There is nothing here, or you do not have access to it.",
        ),
    )
}
