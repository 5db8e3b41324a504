//! Deno Sandbox (bridge)'s honest capabilities.

use corral_domain::{
    ImageMode, OutputStreams, PricingEvidence, Provider, ProviderCapabilities, TimeoutMode,
};

/// What the `deno` bridge kind can do through Corral's bridge contract.
pub(crate) fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        lifecycle: corral_domain::LifecycleCapabilities::default(),
        provider: Provider::Deno,
        display_name: "Deno Sandbox (bridge)".into(),
        pricing: PricingEvidence {
            summary: "Deno Sandbox pricing was not found in the public sources read; see Deno Deploy's pricing page".into(),
            source_url: "https://deno.com/deploy/pricing".into(),
            read_on: "2026-08-22".into(),
            // No per-unit price is published (see the summary): nothing to estimate with.
            rates: Vec::new(),
            size: None,
        },
        // The image is chosen inside the bridge, not per sandbox.
        image_mode: ImageMode::Fixed,
        // The lifetime is set inside the bridge (idle sleep, sandbox timeout).
        timeout_mode: TimeoutMode::ProviderManaged,
        timeout_default_seconds: None,
        timeout_maximum_seconds: None,
        timeout_granularity_seconds: None,
        // cwd and env travel inside the `sh -c` script, which every bridge runs.
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        // A Deno sandbox is ephemeral and killed at its timeout: no persistent resume.
        supports_persistent_resume: false,
        // No pause or stop: a sandbox is killed at its timeout.
        supports_explicit_stop: false,
        // Deno snapshots are read-only images of a volume, not of a running sandbox, and a
        // sandbox booted from one has no volume to snapshot again: a bridge cannot serve the
        // contract's lifecycle extension honestly.
        supports_snapshots: false,
        supports_restore: false,
        supports_delete: true,
        // The bridge's process routes (an extension of the contract): stdin with offsets,
        // every signal, logs from byte offsets. A bridge without them, and a command with
        // stdin on a bridge whose processes take none, go through the exec wrapper, which
        // promises the same.
        images: Vec::new(),
        commands: corral_domain::CommandCapabilities {
            stdin: true,
            signals: corral_domain::Signal::ALL.to_vec(),
            resume: corral_domain::CommandResume::ProviderOffset,
            binary_output: true,
            emulated: false,
        },
    }
}
