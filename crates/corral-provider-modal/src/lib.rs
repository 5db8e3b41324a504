//! Modal Sandboxes (bridge): the `modal` provider, reached through a customer-owned bridge.
//!
//! Modal's only programmatic surface is gRPC through its SDKs (its protobuf header discourages direct use), so the customer deploys a small Modal web app that serves Corral's bridge contract with `modal.Sandbox` (docs/providers/modal.md has one).
//!
//! Everything that talks to the bridge lives once, in `corral-provider-bridge` (the contract's
//! wire types, its client, the status mapping and the fake); this crate is the kind's id, its
//! honest capabilities and pricing evidence, and its documentation
//! (`docs/providers/modal.md`). The bridge URL comes from `X-Provider-Bridge-Url`, the
//! profile's `bridgeUrl`, or `bridge_url` in `[providers.modal]`; the bridge key is the call's
//! credential. What maps to what is in `docs/bridge-contract.md`.
//!
//! Commands as durable jobs run natively on a bridge with the contract's process routes, and
//! through the exec wrapper on one without them (or, for a command with stdin, on one whose
//! processes take none): stdin, every signal and resume by offset either way.
//!
//! Snapshots and restores go through the contract's lifecycle extension: a Modal bridge takes
//! a filesystem snapshot (`Sandbox.snapshot_filesystem()`, an image) and restores it as a new
//! sandbox created from that image. Memory snapshots need `enable_snapshot` at create and are
//! not promised. A bridge without the extension answers `Unsupported` naming it.
//!
//! Unsupported: choosing an image or a lifetime per sandbox (both are set inside the bridge),
//! and stop and resume (a terminated Modal sandbox cannot be restarted; there is no pause).

mod capabilities;

use corral_domain::Provider;

/// `[providers.modal]`: the operator's own bridge (optional) and the HTTP settings.
pub type ModalConfig = corral_provider_bridge::BridgeConfig;

corral_provider_bridge::bridge_adapter!(
    /// The `modal` [`corral_provider::SandboxProvider`]: the bridge client for this kind.
    ModalProvider,
    Provider::Modal,
    capabilities::capabilities
);

/// The bridge contract on loopback with this kind's harness (feature `fake`).
#[cfg(feature = "fake")]
pub mod fake {
    pub use corral_provider_bridge::fake::API_KEY;

    /// The contract's fake, driving a [`ModalProvider`](crate::ModalProvider).
    pub type Fake = corral_provider_bridge::fake::Fake<crate::ModalProvider>;
}
