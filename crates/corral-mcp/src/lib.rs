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
//! # Why the tools call the API through `corral_client::Client`
//! Every tool is one or a few calls of [`corral_client::Client`], never of the use cases
//! directly. Authentication, per-key rate limits, body limits, provider checks and
//! idempotency (a `sandbox_create`, `snapshot_create`, `sandbox_fork` or `command_start`
//! carries an `Idempotency-Key` reused by the client's retries) are then exactly the HTTP
//! API's, with no second path to keep in step, and the same crate serves a local agent
//! (stdio, against any Corral URL) and the server's own `/mcp` (which points the client at
//! its own listener with the caller's key: one loopback hop, ~1 ms, for that guarantee).
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

pub mod tools;

use std::sync::Arc;

use bytes::Bytes;
use corral_client::Client;
use http_body_util::{BodyExt as _, Full};
use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

pub use tools::{CorralTools, ToolError};

/// Where a server's own `/mcp` sends its tools' API calls: its own listener, over one shared
/// connection pool, each call with the key of the caller the route authenticated.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// `None` when the pool could not be built (no TLS backend to initialize): each call
    /// then builds its own client, which reports that failure as an error.
    http: Option<reqwest::Client>,
    base: String,
}

impl Upstream {
    /// The API at `addr`, the address a listener is bound to (an unspecified address,
    /// `0.0.0.0` or `::`, is reached on the loopback of its family).
    pub fn at(addr: std::net::SocketAddr) -> Self {
        let ip = match addr.ip() {
            std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
                std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
            }
            std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
                std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
            }
            ip => ip,
        };
        let base = format!("http://{}", std::net::SocketAddr::new(ip, addr.port()));
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .user_agent(concat!("corral-mcp/", env!("CARGO_PKG_VERSION")))
            .build()
            .ok();
        Self { http, base }
    }

    /// A client of this API with `api_key`.
    pub fn client(&self, api_key: &str) -> Result<Client, corral_client::Error> {
        match &self.http {
            Some(http) => Client::with_http(http.clone(), &self.base, api_key),
            None => Client::new(&self.base, api_key),
        }
    }
}

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
    let running = CorralTools::new(client)
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

/// Answers one streamable-HTTP exchange (`method`, the request `headers` and `body`) with the
/// tools over `client`, in rmcp's stateless JSON-response mode. `client` carries the caller's
/// key, so each tool call is authenticated and limited as the caller's own API call.
pub async fn handle_http(
    client: Client,
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
        move || Ok(CorralTools::new(client.clone())),
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
