//! Cloudflare Sandbox (bridge)'s honest capabilities.

use corral_domain::{
    ImageMode, OutputStreams, PricingEvidence, PricingRate, Provider, ProviderCapabilities,
    RateUnit, TimeoutMode,
};

/// Where the pricing figures were read.
const SOURCE: &str = "https://developers.cloudflare.com/containers/pricing/";
/// When they were read.
const READ_ON: &str = "2026-08-22";

/// What the `cloudflare` bridge kind can do through Corral's bridge contract.
pub(crate) fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        // A backup holds directories' files, never memory; no stop, so no idle stop.
        lifecycle: corral_domain::LifecycleCapabilities {
            stop_keeps_memory: false,
            snapshot_keeps_memory: false,
            native_idle_stop: false,
        },
        provider: Provider::Cloudflare,
        display_name: "Cloudflare Sandbox (bridge)".into(),
        pricing: PricingEvidence {
            summary: "Containers need Workers Paid ($5/month, with 375 vCPU-minutes, 25 GiB-hours of memory and 200 GB-hours of disk included); beyond that $0.000020 per active vCPU-second, $0.0000025 per GiB-second of memory, $0.00000007 per GB-second of disk (figures from secondary transcriptions of the official page); Durable Object and Worker request charges come on top".into(),
            source_url: SOURCE.into(),
            read_on: READ_ON.into(),
            rates: vec![
                PricingRate::new(RateUnit::VcpuSecond, "0.000020", "USD", "Workers Paid, beyond the included usage", SOURCE, READ_ON)
                    .note("active CPU only; from secondary transcriptions of the official page"),
                PricingRate::new(RateUnit::GibMemorySecond, "0.0000025", "USD", "Workers Paid, beyond the included usage", SOURCE, READ_ON)
                    .note("from secondary transcriptions of the official page"),
                PricingRate::new(RateUnit::GbStorageSecond, "0.00000007", "USD", "Workers Paid, beyond the included usage", SOURCE, READ_ON)
                    .note("disk; from secondary transcriptions of the official page"),
            ],
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
        // The container sleeps after `sleepAfter` idle (default 10 minutes) and its disk resets: no persistent resume.
        supports_persistent_resume: false,
        // No explicit stop: the container sleeps on its own after `sleepAfter`, losing its disk.
        supports_explicit_stop: false,
        // The contract's lifecycle extension (a bridge without it answers `Unsupported`
        // naming it): the bridge backs the sandbox's directories up (the SDK's directory
        // backups to R2, or the Worker's `persist` tar of `/workspace`) and restores them
        // into a new sandbox (`restoreBackup`, or `hydrate`).
        supports_snapshots: true,
        supports_restore: true,
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
