//! The web console under `/console`: server-rendered pages over the same control-plane use
//! cases as the JSON API (`corral-control`), never the database directly (it depends on no
//! storage crate; `cargo xtask deps` checks it).
//!
//! - Templates are Rust (`maud`), compiled in, every value escaped; static files are compiled
//!   in too (`assets`), so the binary is the whole product.
//! - Forms POST to console routes with a hidden `csrf` field (checked with the `Origin`, see
//!   `docs/control-plane.md`), then redirect (POST/redirect/GET) with a flash message in a
//!   short-lived cookie. JavaScript only enhances: the copy button, and a running command's
//!   output appended live from the console's event stream (without it, the page shows the
//!   output so far and a reload shows more).
//! - Every response carries a strict `Content-Security-Policy` (no inline script or style),
//!   `X-Frame-Options: DENY`, `Referrer-Policy: same-origin` (sign-in links carry a token;
//!   `no-referrer` would make browsers send `Origin: null` on form posts) and, for HTML,
//!   `Cache-Control: no-store`.
//!
//! The binary mounts it beside the API: `corral_web::app(state, corral_console::configure)`.
//! It shares the web edge's state (`corral_web::AppState`), its session checks
//! (`corral_web::session`) and its request middleware; the web edge never names it.
//!
//! Layers, bottom to top: `view` (view models), `form`, `markdown` (the legal pages' text) →
//! `pages` (maud templates) →
//! `respond` (pages, redirects, flashes), `assets` → `handlers` (one module per area over
//! `handlers::ctx`) → this router.

mod assets;
mod form;
mod handlers;
mod markdown;
mod pages;
mod respond;
mod view;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::{Next, from_fn};
use actix_web::{HttpRequest, web};

/// The policy every console response carries: scripts, styles and images only from this
/// origin (`/console/assets`), no inline code, no framing, forms only to this origin.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Registers the console's routes under `/console`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    use handlers::{account, lifecycle, project, providers, sandboxes, sign_in, work};
    let acc = "/accounts/{account}";
    let prj = "/accounts/{account}/projects/{project}";
    // A browser opening the server's root is led to the console; API clients (which do not
    // ask for HTML) still get the JSON 404 from the web edge's default service.
    // (The guard is the resource's, so a request it refuses is routed on, not answered 405.)
    cfg.service(
        web::resource("/")
            .guard(actix_web::guard::Get())
            .guard(actix_web::guard::fn_guard(wants_html))
            .to(|| async {
                actix_web::HttpResponse::SeeOther()
                    .insert_header((header::LOCATION, pages::BASE))
                    .finish()
            }),
    );
    cfg.app_data(web::Data::new(corral_web::PanicPage(panic_page)));
    cfg.service(
        web::scope(pages::BASE)
            .wrap(from_fn(security_headers))
            .route("/assets/{name}", web::get().to(assets::serve))
            .route("", web::get().to(sign_in::home))
            .route("/", web::get().to(sign_in::home))
            .route("/sign-in", web::get().to(sign_in::sign_in_page))
            .route("/sign-in/email", web::post().to(sign_in::sign_in_email))
            .route(
                "/sign-in/password",
                web::post().to(sign_in::sign_in_password),
            )
            .route(
                "/sign-in/check-email",
                web::get().to(sign_in::check_email_page),
            )
            .route(
                "/sign-in/verify",
                web::get().to(sign_in::sign_in_verify_page),
            )
            .route("/sign-in/verify", web::post().to(sign_in::sign_in_verify))
            .route("/sign-out", web::post().to(sign_in::sign_out))
            .route(
                "/sign-out-everywhere",
                web::post().to(sign_in::sign_out_everywhere),
            )
            .route(
                "/invitations/accept",
                web::get().to(sign_in::invitation_link),
            )
            .route(
                "/invitations/accept",
                web::post().to(sign_in::accept_invitation),
            )
            .route("/invitations", web::get().to(sign_in::invitation_page))
            .route("/profile", web::get().to(sign_in::profile_page))
            .route("/profile/password", web::post().to(sign_in::set_password))
            .route("/legal", web::get().to(sign_in::legal_page))
            .route("/legal/accept", web::post().to(sign_in::legal_accept))
            .route(
                "/accounts/new",
                web::get().to(account::new_organization_page),
            )
            .route("/accounts", web::post().to(account::create_organization))
            .route(acc, web::get().to(account::account_page))
            .route(
                &format!("{acc}/rename"),
                web::post().to(account::rename_account),
            )
            .route(
                &format!("{acc}/delete"),
                web::post().to(account::delete_account),
            )
            .route(
                &format!("{acc}/transfer"),
                web::post().to(account::transfer),
            )
            .route(
                &format!("{acc}/members"),
                web::get().to(account::members_page),
            )
            .route(
                &format!("{acc}/members/{{user}}/role"),
                web::post().to(account::change_role),
            )
            .route(
                &format!("{acc}/members/{{user}}/remove"),
                web::post().to(account::remove_member),
            )
            .route(
                &format!("{acc}/invitations"),
                web::post().to(account::invite),
            )
            .route(
                &format!("{acc}/invitations/{{invitation}}/revoke"),
                web::post().to(account::revoke_invitation),
            )
            .route(&format!("{acc}/audit"), web::get().to(account::audit_page))
            .route(
                &format!("{acc}/projects"),
                web::post().to(project::create_project),
            )
            .route(prj, web::get().to(sandboxes::sandboxes_page))
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}"),
                web::get().to(sandboxes::sandbox_page),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/commands"),
                web::post().to(work::start_command),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/commands/{{command}}"),
                web::get().to(work::command_page),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/commands/{{command}}/output"),
                web::get().to(work::command_output),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/commands/{{command}}/signal"),
                web::post().to(work::signal_command),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/commands/{{command}}/stdin"),
                web::post().to(work::write_stdin),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/events"),
                web::get().to(work::sandbox_events),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/delete"),
                web::post().to(work::delete_sandbox),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/files"),
                web::get().to(work::file_page),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/stop"),
                web::post().to(lifecycle::stop_sandbox),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/resume"),
                web::post().to(lifecycle::resume_sandbox),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/snapshots"),
                web::post().to(lifecycle::snapshot_sandbox),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/fork"),
                web::post().to(lifecycle::fork_sandbox),
            )
            .route(
                &format!("{prj}/snapshots"),
                web::get().to(lifecycle::snapshots_page),
            )
            .route(
                &format!("{prj}/snapshots/{{snapshot}}/delete"),
                web::post().to(lifecycle::delete_snapshot),
            )
            .route(
                &format!("{prj}/sandboxes/{{sandbox}}/files"),
                web::post().to(work::write_file),
            )
            .route(
                &format!("{prj}/settings"),
                web::get().to(project::settings_page),
            )
            .route(
                &format!("{prj}/rename"),
                web::post().to(project::rename_project),
            )
            .route(
                &format!("{prj}/delete"),
                web::post().to(project::delete_project),
            )
            .route(&format!("{prj}/keys"), web::get().to(project::keys_page))
            .route(&format!("{prj}/keys"), web::post().to(project::create_key))
            .route(
                &format!("{prj}/keys/{{key}}/revoke"),
                web::post().to(project::revoke_key),
            )
            .route(
                &format!("{prj}/providers"),
                web::get().to(providers::providers_page),
            )
            .route(
                &format!("{prj}/providers/{{provider}}"),
                web::post().to(providers::put_profile),
            )
            .route(
                &format!("{prj}/providers/{{provider}}/test"),
                web::post().to(providers::test_profile),
            )
            .route(
                &format!("{prj}/providers/{{provider}}/disconnect"),
                web::post().to(providers::delete_profile),
            )
            .default_service(web::to(|req: HttpRequest| async move {
                respond::not_found(&req)
            })),
    );
}

/// Whether a request asks for an HTML page (a browser navigating), by its `Accept` header.
fn wants_html(ctx: &actix_web::guard::GuardContext<'_>) -> bool {
    ctx.head()
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.split(';').next().is_some_and(|t| t.trim() == "text/html"))
        })
}

/// The page for a console request whose handler panicked (the web edge's middleware caught
/// it, above this crate's own middleware, so the security headers are set here too); `None`
/// for any other request, which gets the JSON envelope.
fn panic_page(path: &str) -> Option<actix_web::HttpResponse> {
    if !path.starts_with(pages::BASE) {
        return None;
    }
    let page = pages::error_page(
        500,
        "Something went wrong",
        "Corral could not load this page. Try again in a moment.",
    );
    let mut resp = actix_web::HttpResponse::InternalServerError()
        .content_type("text/html; charset=utf-8")
        .body(page.into_string());
    resp.extensions_mut()
        .insert(corral_web::reply::ResponseCode(
            corral_errors::ErrorCode::InternalError,
        ));
    set_security_headers(resp.headers_mut());
    Some(resp)
}

/// Middleware: the security headers of every console response.
async fn security_headers(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let mut res = next.call(req).await?;
    set_security_headers(res.headers_mut());
    Ok(res)
}

/// The security headers of a console response.
fn set_security_headers(headers: &mut header::HeaderMap) {
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
}
