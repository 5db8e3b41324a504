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
        let value: String =
            url::form_urlencoded::byte_serialize(flash_value(&f).as_bytes()).collect();
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

/// A flash as its cookie holds it (before URL encoding): `kind:text`, or
/// `kind;sbx_a,sbx_b:text` when it links sandboxes (ids never hold `,`, `;` or `:`).
fn flash_value(f: &Flash) -> String {
    if f.sandboxes.is_empty() {
        format!("{}:{}", f.kind.as_str(), f.text)
    } else {
        format!("{};{}:{}", f.kind.as_str(), f.sandboxes.join(","), f.text)
    }
}

/// Reads [`flash_value`]'s form back. Only well-formed sandbox ids are kept as links, so a
/// forged cookie cannot put anything but a sandbox id into a link's address.
fn parse_flash(decoded: &str) -> Option<Flash> {
    let (head, text) = decoded.split_once(':')?;
    let (kind, ids) = head.split_once(';').unwrap_or((head, ""));
    let kind = FlashKind::parse(kind)?;
    // Bounded: a forged cookie can only show its own sender a short plain-text line.
    let text: String = text.chars().take(300).collect();
    let sandboxes = ids
        .split(',')
        .filter(|id| id.parse::<corral_domain::SandboxId>().is_ok())
        .take(Flash::MAX_SANDBOXES)
        .map(str::to_owned)
        .collect();
    Some(Flash {
        kind,
        text,
        sandboxes,
    })
}

/// The flash message the previous response left, if any.
pub(crate) fn take_flash(req: &HttpRequest) -> Option<Flash> {
    let raw = cookie(req, FLASH_COOKIE)?;
    let decoded: String = url::form_urlencoded::parse(format!("f={raw}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())?;
    parse_flash(&decoded)
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

#[cfg(test)]
mod tests {
    use super::{flash_value, parse_flash};
    use crate::view::{Flash, FlashKind};

    #[test]
    fn a_flash_round_trips_with_its_sandbox_links_and_drops_forged_ones() {
        let plain = Flash::ok("Stopped it: now stopped.");
        assert_eq!(parse_flash(&flash_value(&plain)), Some(plain));
        let ids = vec![
            "sbx_local_01hzy3q8d1v2k3m4n5p6q7r8s9".to_owned(),
            "sbx_e2b_01hzy3q8d1v2k3m4n5p6q7r8sa".to_owned(),
        ];
        let forked = Flash::ok("Forked into 2 copies: a: b.").linking(ids.clone());
        let back = parse_flash(&flash_value(&forked)).unwrap();
        assert_eq!(back.sandboxes, ids);
        assert_eq!(
            back.text, "Forked into 2 copies: a: b.",
            "colons in the text survive"
        );
        let forged = parse_flash("ok;javascript:alert(1),sbx_local_01hzy3q8d1v2k3m4n5p6q7r8s9:hi");
        // `javascript` is no id; the `:` after it ends the head, so the rest is text.
        let forged = forged.unwrap();
        assert!(forged.sandboxes.is_empty(), "{forged:?}");
        let forged = parse_flash("error;../../x,sbx_nope:hi").unwrap();
        assert_eq!((forged.kind, forged.sandboxes.len()), (FlashKind::Error, 0));
    }
}
