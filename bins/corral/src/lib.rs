//! The Corral server (actix-web, thin) and its admin CLI.
//!
//! Everything of meaning lives in `corral-service`; this crate routes HTTP, reads headers and
//! bodies, renders the JSON envelope, and wires configuration, the registry and the providers
//! together.
//!
//! Routing decisions the spec leaves open: an unknown path answers 404 and a known path with
//! the wrong method 405, both with the `invalid_request` envelope (Stripe answers unrecognized
//! URLs the same way); actix's own failures (bodies too large, malformed JSON, wrong content
//! type, bad query strings) all become envelopes, never HTML or plain text.

pub mod cli;
pub mod commands;
pub mod config;
pub mod console;
pub mod control;
pub mod extract;
pub mod head_guard;
pub mod http;
pub mod local;
pub mod openapi;
mod routes;
pub mod wiring;
