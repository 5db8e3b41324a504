//! The console's static files, compiled into the binary.

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::pages::error_page;
use crate::respond::html;

/// (name, content type, bytes).
const FILES: [(&str, &str, &[u8]); 3] = [
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("../assets/console.css"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/console.js"),
    ),
    (
        "logo.svg",
        "image/svg+xml",
        include_bytes!("../assets/logo.svg"),
    ),
];

/// `GET /console/assets/{name}`. Links carry the version (`?v=`), so a day of caching is safe.
pub(crate) async fn serve(req: HttpRequest, name: web::Path<String>) -> HttpResponse {
    match FILES.iter().find(|(n, _, _)| *n == name.as_str()) {
        Some((_, content_type, bytes)) => HttpResponse::Ok()
            .content_type(*content_type)
            .insert_header((header::CACHE_CONTROL, "public, max-age=86400"))
            .body(*bytes),
        None => html(
            &req,
            StatusCode::NOT_FOUND,
            error_page(404, "Not found", "No such file."),
        ),
    }
}
