//! Deno Sandbox (bridge): the `deno` provider, reached through a customer-owned bridge.
//!
//! Deno Sandbox's exec and file API is WebSocket JSON-RPC only, so the customer deploys a small Deno Deploy app that serves Corral's bridge contract with `@deno/sandbox` (docs/providers/deno.md has one).
//!
//! Everything that talks to the bridge lives once, in `corral-provider-bridge` (the contract's
//! wire types, its client, the status mapping and the fake); this crate is the kind's id, its
//! honest capabilities and pricing evidence, and its documentation
//! (`docs/providers/deno.md`). The bridge URL comes from `X-Provider-Bridge-Url`, the
//! profile's `bridgeUrl`, or `bridge_url` in `[providers.deno]`; the bridge key is the call's
//! credential. What maps to what is in `docs/bridge-contract.md`.
//!
//! Commands as durable jobs run natively on a bridge with the contract's process routes, and
//! through the exec wrapper on one without them (or, for a command with stdin, on one whose
//! processes take none): stdin, every signal and resume by offset either way.
//!
//! Unsupported: choosing an image or a lifetime per sandbox (both are set inside the bridge),
//! stop and resume (Deno sandboxes have no pause; they are killed at their timeout), and
//! snapshots and restores: Deno's snapshots are read-only images of a *volume*, not of a
//! running sandbox, and a sandbox booted from one has no volume to snapshot again, so the
//! contract's lifecycle extension cannot be served honestly by a Deno bridge.

mod capabilities;

use corral_domain::Provider;

/// `[providers.deno]`: the operator's own bridge (optional) and the HTTP settings.
pub type DenoConfig = corral_provider_bridge::BridgeConfig;

corral_provider_bridge::bridge_adapter!(
    /// The `deno` [`corral_provider::SandboxProvider`]: the bridge client for this kind.
    DenoProvider,
    Provider::Deno,
    capabilities::capabilities
);

/// The bridge contract on loopback with this kind's harness (feature `fake`).
#[cfg(feature = "fake")]
pub mod fake {
    pub use corral_provider_bridge::fake::API_KEY;

    /// The contract's fake, driving a [`DenoProvider`](crate::DenoProvider).
    pub type Fake = corral_provider_bridge::fake::Fake<crate::DenoProvider>;
}
