//! How the console answers: an HTML page, a redirect carrying a flash message, the flash the
//! previous response left, cookies, and the 404 page. Below the router and every handler.

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};
use corral_errors::ErrorCode;
use corral_web::reply::ResponseCode;
use maud::Markup;

use crate::pages;
use crate::view::{Flash, FlashKind};

const FLASH_COOKIE: &str = "corral_flash";

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

/// The 404 page: nothing here, or nothing this user may see (the same answer).
pub(crate) fn not_found(req: &HttpRequest) -> HttpResponse {
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
