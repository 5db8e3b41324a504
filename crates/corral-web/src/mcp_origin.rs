//! `/mcp`'s `Origin` check, as the MCP Streamable HTTP transport requires of a server
//! ("Servers MUST validate the Origin header on all incoming connections to prevent DNS
//! rebinding attacks"). A request without `Origin` (an agent, a CLI, any non-browser client)
//! passes; one with an `Origin` passes only when it is the server's public URL's origin or one
//! of [`McpOrigins`] (`[mcp] allowed_origins`); anything else, `null` included, is refused
//! with 403 `origin_not_allowed` before the key is even read.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, web};
use corral_errors::{ErrorCode, ErrorEnvelope};

use crate::reply::{envelope_response, request_id};
use crate::state::AppState;

/// The browser origins `/mcp` accepts besides the public URL's, each `scheme://host[:port]`
/// as a browser sends it (lower-case host, no default port).
#[derive(Debug, Clone, Default)]
pub struct McpOrigins(Vec<String>);

impl McpOrigins {
    /// `origins` (URLs or origins), normalized; one that is no http(s) origin is left out.
    pub fn new<S: AsRef<str>>(origins: impl IntoIterator<Item = S>) -> Self {
        Self(
            origins
                .into_iter()
                .filter_map(|o| origin_of(o.as_ref()))
                .collect(),
        )
    }

    /// Whether `origin` (already normalized) is one of these.
    fn contains(&self, origin: &str) -> bool {
        self.0.iter().any(|o| o == origin)
    }
}

/// The ASCII origin of `url`, when it is an http(s) URL with a host.
fn origin_of(url: &str) -> Option<String> {
    let url = url::Url::parse(url.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let origin = url.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

/// Whether `req` may reach `/mcp` by its `Origin`.
fn allowed(req: &HttpRequest) -> bool {
    let Some(sent) = req.headers().get(header::ORIGIN) else {
        return true;
    };
    let Some(sent) = sent.to_str().ok().and_then(origin_of) else {
        return false;
    };
    let public = req
        .app_data::<web::Data<AppState>>()
        .and_then(|s| origin_of(&s.control.config().public_url));
    if public.as_deref() == Some(sent.as_str()) {
        return true;
    }
    req.app_data::<web::Data<McpOrigins>>()
        .is_some_and(|allowed| allowed.contains(&sent))
}

/// Extracted first by `/mcp`: refuses a foreign `Origin` with the envelope (403
/// `origin_not_allowed`) before authentication runs.
pub(crate) struct AllowedOrigin;

impl FromRequest for AllowedOrigin {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, actix_web::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        if allowed(req) {
            return ready(Ok(AllowedOrigin));
        }
        let code = ErrorCode::OriginNotAllowed;
        let envelope = ErrorEnvelope::new(
            code,
            "this Origin may not call /mcp: a browser page may reach it only from the server's \
             public URL or an origin in [mcp] allowed_origins",
            request_id(req),
        );
        let response = envelope_response(code, code.http_status(), envelope, None);
        ready(Err(actix_web::error::InternalError::from_response(
            "origin not allowed",
            response,
        )
        .into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_normalized_as_browsers_send_them() {
        let o = McpOrigins::new([
            "https://Agent.Example.com:443/",
            "http://localhost:6274",
            "not an origin",
            "file:///x",
        ]);
        assert_eq!(o.0, ["https://agent.example.com", "http://localhost:6274"]);
        assert!(o.contains("http://localhost:6274"));
        assert!(!o.contains("http://localhost:6275"));
    }

    #[test]
    fn a_request_without_origin_passes_and_a_foreign_one_is_refused() {
        let none = actix_web::test::TestRequest::default().to_http_request();
        assert!(allowed(&none));
        let foreign = actix_web::test::TestRequest::default()
            .insert_header((header::ORIGIN, "https://evil.example"))
            .to_http_request();
        assert!(!allowed(&foreign));
        let null = actix_web::test::TestRequest::default()
            .insert_header((header::ORIGIN, "null"))
            .to_http_request();
        assert!(!allowed(&null));
        let listed = actix_web::test::TestRequest::default()
            .insert_header((header::ORIGIN, "http://localhost:6274"))
            .app_data(web::Data::new(McpOrigins::new(["http://localhost:6274"])))
            .to_http_request();
        assert!(allowed(&listed));
    }
}
