//! Fly Machines' honest capabilities.

use corral_domain::{
    ImageMode, OutputStreams, PricingEvidence, Provider, ProviderCapabilities, TimeoutMode,
};

/// What Fly Machines can do through this adapter.
pub(crate) fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        // Every lifecycle flag is false: no stop, no snapshots (above).
        lifecycle: corral_domain::LifecycleCapabilities::default(),
        provider: Provider::Fly,
        display_name: "Fly Machines".into(),
        pricing: PricingEvidence {
            summary: "Usage-based: Machines are billed per second for the CPU and RAM \
                      provisioned while they run, by preset size and region; a stopped \
                      Machine is charged only for its root filesystem"
                .into(),
            source_url: "https://fly.io/docs/about/pricing/".into(),
            read_on: "2026-11-23".into(),
            // No per-unit price is published (see the summary): nothing to estimate with.
            rates: Vec::new(),
            size: None,
        },
        image_mode: ImageMode::Container,
        // A machine runs until it is stopped or destroyed; Fly has no lifetime setting.
        timeout_mode: TimeoutMode::ProviderManaged,
        timeout_default_seconds: None,
        timeout_maximum_seconds: None,
        timeout_granularity_seconds: None,
        // The exec endpoint takes an argv only; the adapter applies cwd and env in `sh -c`.
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        // Suspend keeps memory (when its resume works; see below).
        supports_persistent_resume: true,
        // No honest mapping for Corral's stop, which keeps files: Fly resets a machine's root
        // filesystem when it stops ("when a machine is stopped … an ephemeral volume … is what
        // we now reset", https://community.fly.io/t/a-new-way-to-rootfs/19196), and the start
        // after `POST …/suspend` "will attempt (but is not guaranteed) to resume the Machine
        // from a snapshot" (the Machines API description), falling back to that cold boot.
        supports_explicit_stop: false,
        // The Machines API snapshots volumes only (`/volumes/{id}/snapshots`); this adapter's
        // machines have no volume, and a machine's root filesystem cannot be snapshotted or
        // restored into a new machine.
        supports_snapshots: false,
        supports_restore: false,
        supports_delete: true,
        images: Vec::new(),
        commands: corral_domain::CommandCapabilities::emulated(),
    }
}
