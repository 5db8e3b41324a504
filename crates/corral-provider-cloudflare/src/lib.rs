//! Cloudflare Sandbox (bridge): the `cloudflare` provider, reached through a customer-owned bridge.
//!
//! Cloudflare's Sandbox SDK runs only inside Workers, so Cloudflare ships a reference *bridge* Worker (`cloudflare/sandbox-sdk`, `bridge/worker`) that a customer deploys into their own account; it is the model of Corral's bridge contract.
//!
//! Everything that talks to the bridge lives once, in `corral-provider-bridge` (the contract's
//! wire types, its client, the status mapping and the fake); this crate is the kind's id, its
//! honest capabilities and pricing evidence, and its documentation
//! (`docs/providers/cloudflare.md`). The bridge URL comes from `X-Provider-Bridge-Url`, the
//! profile's `bridgeUrl`, or `bridge_url` in `[providers.cloudflare]`; the bridge key is the call's
//! credential. What maps to what is in `docs/bridge-contract.md`.
//!
//! Commands as durable jobs run natively on a bridge with the contract's process routes, and
//! through the exec wrapper on one without them (or, for a command with stdin, on one whose
//! processes take none): stdin, every signal and resume by offset either way.
//!
//! Snapshots and restores go through the contract's lifecycle extension: a Cloudflare bridge
//! backs the sandbox's directories up (the SDK's directory backups to R2, or the Worker's
//! `persist` tar of `/workspace`) and restores them into a new sandbox. What a snapshot holds
//! is those directories (at least `/workspace`, where commands run), not the image's other
//! paths, and never memory. A bridge without the extension answers `Unsupported` naming it.
//!
//! Unsupported: choosing an image or a lifetime per sandbox (both are set inside the bridge),
//! and stop and resume (the container only sleeps on its own, and its disk resets then).

mod capabilities;

use corral_domain::Provider;

/// `[providers.cloudflare]`: the operator's own bridge (optional) and the HTTP settings.
pub type CloudflareConfig = corral_provider_bridge::BridgeConfig;

corral_provider_bridge::bridge_adapter!(
    /// The `cloudflare` [`corral_provider::SandboxProvider`]: the bridge client for this kind.
    CloudflareProvider,
    Provider::Cloudflare,
    capabilities::capabilities
);

/// The bridge contract on loopback with this kind's harness (feature `fake`).
#[cfg(feature = "fake")]
pub mod fake {
    pub use corral_provider_bridge::fake::API_KEY;

    /// The contract's fake, driving a [`CloudflareProvider`](crate::CloudflareProvider).
    pub type Fake = corral_provider_bridge::fake::Fake<crate::CloudflareProvider>;
}
