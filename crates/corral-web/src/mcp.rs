//! `POST /mcp`: the MCP server over streamable HTTP (`corral-mcp`), on the API's listener.
//!
//! The route first checks the browser `Origin` ([`crate::mcp_origin`]), then authenticates
//! and admits the caller exactly as every API operation does (the project API key as
//! `Authorization: Bearer`; never the console's cookie), reads the JSON-RPC message under the
//! API's largest body limit, and hands it to `corral-mcp`, whose rmcp service answers it
//! statelessly with JSON. The tools call the use cases in this process as that caller
//! ([`crate::mcp_backend::InProcess`]): no HTTP request back to this listener, no second
//! authentication, the same use cases, project scope and v3 codes as the API. Why a route and
//! not a second listener or a tower adapter: `corral-mcp`'s crate docs.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, post, web};
use corral_errors::ErrorCode;
use corral_service::error::ServiceError;

use crate::doc::errors;
use crate::extract::{Authenticated, BodyLimit, Json};
use crate::mcp_backend::InProcess;
use crate::mcp_origin::AllowedOrigin;
use crate::reply::{Reply, fail, request_id};
use crate::state::AppState;

errors!(McpErrors: &[
    ErrorCode::OriginNotAllowed,
    ErrorCode::InvalidRequest,
    ErrorCode::MissingApiKey,
    ErrorCode::AuthenticationError,
    ErrorCode::PayloadTooLarge,
    ErrorCode::RateLimited,
    ErrorCode::RequestTimeout,
    ErrorCode::SandboxRegistryUnavailable,
    ErrorCode::InternalError,
]);

/// `/mcp`'s body limit: `file_write`'s content, as the API's own `files/write`.
pub(crate) struct McpBody;
impl BodyLimit for McpBody {
    const BYTES: usize = corral_mcp::MAX_MESSAGE_BYTES;
}

/// The request headers rmcp reads (content negotiation and protocol version); the key and
/// any cookie stay here.
const FORWARDED: [&str; 4] = [
    "content-type",
    "accept",
    "mcp-protocol-version",
    "mcp-session-id",
];

/// Call Corral's MCP tools (Model Context Protocol, streamable HTTP, stateless).
///
/// One JSON-RPC 2.0 message per request (`initialize`, `tools/list`, `tools/call`, …), as the
/// MCP streamable-HTTP transport sends it (`Accept: application/json, text/event-stream`);
/// the answer is the JSON-RPC response (200), or nothing for a notification (202). A tool's
/// failure is a successful JSON-RPC answer with `isError: true` and the v3 code in its
/// structured content. A browser `Origin` other than the server's public URL's or one of
/// `[mcp] allowed_origins` is refused with 403 `origin_not_allowed` (DNS rebinding
/// protection, as the MCP transport requires); a request without `Origin` is served.
/// docs/mcp.md lists the tools.
#[utoipa::path(
    operation_id = "callMcp", tag = "mcp",
    params(
        ("Accept" = String, Header, pattern = "application/json.*text/event-stream|text/event-stream.*application/json",
            example = "application/json, text/event-stream",
            description = "Must list both `application/json` and `text/event-stream` (the MCP streamable-HTTP transport); otherwise 400 `invalid_request`."),
        ("Origin" = Option<String>, Header, nullable = false,
            description = "Sent by browsers: must be the server's public URL's origin or one of `[mcp] allowed_origins`, else 403 `origin_not_allowed`. Absent for agents and other non-browser clients.")),
    request_body(content = Object, content_type = "application/json",
        description = "A JSON-RPC 2.0 message of the MCP protocol. At most 7 MiB."),
    responses(
        (status = 200, description = "The JSON-RPC response.", body = Object),
        (status = 202, description = "A notification, accepted."),
        McpErrors,
    ))]
#[post("/mcp")]
pub(crate) async fn call_mcp(
    req: HttpRequest,
    // First: a foreign origin is refused before the key is read.
    _origin: AllowedOrigin,
    caller: Authenticated,
    body: Json<serde_json::Value, McpBody>,
    state: web::Data<AppState>,
) -> Reply {
    corral_service::failpoint::panic_point("mcp.call");
    let Authenticated(caller, key_id) = caller;
    let backend = InProcess::new(state, caller, key_id, request_id(&req));
    let tools = corral_mcp::CorralTools::new(Arc::new(backend));
    let headers: Vec<(String, String)> = FORWARDED
        .iter()
        .filter_map(|name| {
            let value = req.headers().get(*name)?.to_str().ok()?;
            Some(((*name).to_owned(), value.to_owned()))
        })
        .collect();
    // A `serde_json::Value` always serializes.
    let bytes = serde_json::to_vec(&body.0).unwrap_or_default();
    let answer = corral_mcp::handle_http(tools, "POST", &headers, bytes.into()).await;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    if status.is_client_error() || status.is_server_error() {
        // rmcp's own refusals (wrong `Accept`, an unknown protocol version, …) are plain
        // text; the API answers every failure with the envelope.
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        let err = match status {
            StatusCode::PAYLOAD_TOO_LARGE => ServiceError::PayloadTooLarge { message: text },
            s if s.is_server_error() => ServiceError::internal(format!("MCP: {text}")),
            _ => ServiceError::invalid(format!("MCP: {text}")),
        };
        return Err(fail(&req)(err));
    }
    let mut response = HttpResponse::build(status);
    for (name, value) in &answer.headers {
        if matches!(name.as_str(), "content-type" | "mcp-session-id") {
            response.insert_header((name.as_str(), value.as_str()));
        }
    }
    Ok(response.body(answer.body))
}
