//! Corral's MCP server: the sandbox API as Model Context Protocol tools, on the official Rust
//! SDK (`rmcp`). The user's guide, with agent configuration, is `docs/mcp.md`.
//!
//! # Tools
//! `providers_list`, `sandbox_create` (also a restore, with `snapshot`), `sandbox_list`,
//! `sandbox_get`, `sandbox_stop`, `sandbox_resume`, `sandbox_fork`, `sandbox_delete`,
//! `snapshot_create`, `snapshot_list`, `snapshot_delete`, `command_run` (short, bounded by
//! `timeoutSeconds`, answers stdout, stderr and the exit code), `command_start` /
//! `command_output` (output since a cursor, with the new cursor and whether the command
//! ended) / `command_signal` for long commands, `file_read` and `file_write` (UTF-8 text, or
//! base64 for binary). Inputs are JSON Schema (schemars, through rmcp's tool
//! macros) and checked before any call; results are structured content with an output schema.
//! A failure is a *tool* error (`isError: true`) whose structured content is
//! `{"error": {"code", "message", "requestId", "retryable"}}` with the v3 code, so an agent
//! reads and reacts to it; protocol errors are left to malformed JSON-RPC.
//!
//! # Backends: one set of tools, two ways to reach the use cases
//! Every tool is one or a few calls of a [`Backend`], the sandbox API's operations as one
//! project's caller. [`HttpBackend`] calls a Corral server over HTTP with
//! [`corral_client::Client`] (the stdio server beside an agent, against any Corral URL: a
//! `sandbox_create`, `snapshot_create`, `sandbox_fork` or `command_start` carries an
//! `Idempotency-Key` reused by the client's retries). The server's own `/mcp` implements
//! [`Backend`] in `corral-web` over the use cases (`corral-service`) with the caller the route
//! authenticated and admitted: no HTTP hop and no second authentication, so MCP users do not
//! share one loopback address's connection cap, and a tool call is checked and limited as
//! the API call it stands for (the same use case, the same project scope). This crate knows
//! neither actix nor the service: the tool definitions and their dispatch are shared, the
//! way to the use cases is not.
//!
//! # Transports
//! - stdio: [`serve_stdio`] (the binary's `corral mcp`).
//! - streamable HTTP: [`handle_http`] answers one HTTP exchange with rmcp's
//!   `StreamableHttpService` in stateless mode with JSON responses. The server's edge is
//!   actix while rmcp's service is a tower/hyper service; rather than a second listener (a
//!   second port, TLS and limits to configure) or a general actix↔tower adapter (streaming
//!   bodies both ways), the edge's `/mcp` route reads the POSTed JSON-RPC message like any
//!   body, hands it to [`handle_http`] and writes back the buffered answer. Stateless JSON
//!   mode makes that exact: no session to keep between requests, no server-initiated stream
//!   (the tools send no notifications), every answer complete when the handler returns. Long
//!   commands fit this because `command_output` is a cursor read, not a stream.

pub mod backend;
mod error;
pub mod tools;

use std::sync::Arc;

use bytes::Bytes;
use corral_client::Client;
use http_body_util::{BodyExt as _, Full};
use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

pub use backend::{Answer, Backend, HttpBackend};
pub use error::ToolError;
pub use tools::CorralTools;

/// Why the stdio server stopped with an error.
#[derive(Debug)]
pub struct ServeError(String);

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServeError {}

/// Serves the tools over stdin/stdout until the client closes the stream.
pub async fn serve_stdio(client: Client) -> Result<(), ServeError> {
    let running = CorralTools::over_http(client)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError(format!("MCP initialization failed: {e}")))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| ServeError(format!("MCP server stopped: {e}")))
}

/// The largest JSON-RPC message `/mcp` accepts: `file_write`'s 1 MiB of content as base64 or
/// escaped text, as the API's own `files/write` body limit.
pub const MAX_MESSAGE_BYTES: usize = 7 * 1024 * 1024;

/// One HTTP answer of [`handle_http`], buffered.
#[derive(Debug)]
pub struct HttpAnswer {
    /// The status code.
    pub status: u16,
    /// The headers rmcp set (content type, `Allow`, …).
    pub headers: Vec<(String, String)>,
    /// The body: a JSON-RPC response, or empty for a notification (202).
    pub body: Bytes,
}

/// Answers one streamable-HTTP exchange (`method`, the request `headers` and `body`) with
/// `tools`, in rmcp's stateless JSON-response mode. `tools` act as one caller (the server's
/// `/mcp` gives them the caller it authenticated).
pub async fn handle_http(
    tools: CorralTools,
    method: &str,
    headers: &[(String, String)],
    body: Bytes,
) -> HttpAnswer {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_sse_retry(None)
        .with_max_request_body_bytes(MAX_MESSAGE_BYTES)
        // The `Host` allow-list guards cookie-less localhost servers from DNS rebinding;
        // `/mcp` is reached at the server's public name and every request carries a key.
        .disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    // rmcp refuses a request without `Host` even with the allow-list off; the caller's own
    // `Host` was checked by the edge, so a fixed one stands in.
    let mut request = http::Request::builder()
        .method(method)
        .uri("/mcp")
        .header("host", "localhost");
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = match request.body(Full::new(body)) {
        Ok(r) => r,
        Err(e) => {
            return HttpAnswer {
                status: 400,
                headers: vec![("content-type".into(), "text/plain".into())],
                body: Bytes::from(format!("invalid request: {e}")),
            };
        }
    };
    let response = service.handle(request).await;
    let (parts, body) = response.into_parts();
    // The body's error type is `Infallible`; in stateless mode the stream ends with the answer.
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    HttpAnswer {
        status: parts.status.as_u16(),
        headers: parts
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect(),
        body,
    }
}
