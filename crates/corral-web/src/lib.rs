//! Corral's HTTP edge, as a library: everything between a TCP connection and a use case of
//! `corral-service` or `corral-control`, over actix-web.
//!
//! - [`app()`] builds the application: the request middleware (request ids, metrics, logs, the
//!   JSON envelope for every failure, actix's own included), the one list of documented
//!   operations ([`api::api`]: the eight sandbox operations, the 41 control-plane operations
//!   and the email webhook), whatever the caller mounts beside them (the binary mounts the
//!   console, `corral-console`; this crate never names it), the operational endpoints
//!   (`/healthz`, `/readyz`, `/metrics`, `/v1/openapi.json`) and the 404/405 envelope.
//! - `/e2b`: the E2B-compatible front door's routes (`corral-e2b` translates; see
//!   `docs/compat/e2b.md`), answered when [`AppState::e2b`] holds the door.
//! - [`listen::bind`] serves it on a socket, each connection through [`head_guard`] (request
//!   heads over Corral's limits, or malformed, answered with the envelope).
//! - [`openapi::document`] derives the OpenAPI document from the same operation list.
//!
//! Use it alone by building an [`AppState`] (a `Service`, a `Control`, metrics and build
//! provenance) and calling `app(state, |_| {})` (no console), for instance under
//! `actix_web::test::init_service`.
//!
//! Layers, bottom to top (each module imports only from the ones before it; `cargo xtask
//! deps` rejects a module import circle):
//! `state`, `request_log` (which requests get a log line), `edge` (connection caps, body
//! deadlines, trusted proxies), `reply` (the one reply/error kernel), `doc` (error responses in the document),
//! `head_guard` (pure framing) → `extract`, `session`, `mcp_origin` → `sandbox`, `control`, `e2b`
//! (the handlers) → `mcp_backend` (the MCP tools over the use cases) → `mcp`
//! → `api` (the operation list) → `openapi` → `ops`, `middleware` → `app` → `listen`.
//!
//! Routing decisions the spec leaves open: an unknown path answers 404 and a known path with
//! the wrong method 405, both with the `invalid_request` envelope (Stripe answers unrecognized
//! URLs the same way); actix's own failures (bodies too large, malformed JSON, wrong content
//! type, bad query strings) all become envelopes, never HTML or plain text.

pub mod api;
mod app;
pub mod commands;
pub mod control;
mod doc;
mod e2b;
pub mod edge;
mod events;
pub mod extract;
pub mod head_guard;
mod lifecycle;
pub mod listen;
mod mcp;
mod mcp_backend;
pub mod mcp_origin;
mod middleware;
pub mod openapi;
mod ops;
pub mod reply;
pub mod request_log;
mod sandbox;
pub mod session;
pub mod state;
mod usage;
mod webhooks;

pub use app::{Mount, app};
pub use corral_service::failpoint::panic_point;
pub use middleware::PanicPage;
pub use state::{AppState, BuildInfo, request_metrics};
