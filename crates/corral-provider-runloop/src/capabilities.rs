//! Runloop's honest capabilities.

use corral_domain::{
    CommandCapabilities, CommandResume, ImageMode, LifecycleCapabilities, OutputStreams,
    PricingEvidence, PricingRate, Provider, ProviderCapabilities, RateUnit, Signal, TimeoutMode,
};

/// `keep_alive_time_seconds` when none is sent: one hour.
pub(crate) const DEFAULT_KEEP_ALIVE_SECONDS: u64 = 3600;
/// Largest `keep_alive_time_seconds`: 48 hours.
pub(crate) const MAX_KEEP_ALIVE_SECONDS: u64 = 172_800;

/// Where the pricing figures were read.
const SOURCE: &str = "https://www.runloop.ai/pricing";
/// When they were read.
const READ_ON: &str = "2026-08-22";

/// The capabilities Corral advertises for Runloop.
pub(crate) fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        lifecycle: LifecycleCapabilities {
            // "Note this will not snapshot memory state such as running processes" (suspend,
            // `POST /v1/devboxes/{id}/suspend`); resume says processes must be restarted.
            stop_keeps_memory: false,
            // Disk snapshots (`snapshot_disk_async`) hold the disk only.
            snapshot_keeps_memory: false,
            // `launch_parameters.lifecycle.after_idle {idle_time_seconds, on_idle: suspend}`.
            native_idle_stop: true,
        },
        provider: Provider::Runloop,
        display_name: "Runloop".into(),
        pricing: PricingEvidence {
            summary: "$0.108 per CPU-hour, $0.0252 per GB-hour of memory, disk $0.00034236 per \
                      GB-hour (billed while suspended too), blueprint builds $0.252 per \
                      build-hour; Pro tier $250/month (figures as quoted from the pricing page \
                      by third-party notes)"
                .into(),
            source_url: SOURCE.into(),
            read_on: READ_ON.into(),
            rates: vec![
                PricingRate::new(
                    RateUnit::VcpuHour,
                    "0.108",
                    "USD",
                    "pay as you go",
                    SOURCE,
                    READ_ON,
                )
                .note("quoted from the pricing page by third-party notes; unconfirmed"),
                PricingRate::new(
                    RateUnit::GbMemoryHour,
                    "0.0252",
                    "USD",
                    "pay as you go",
                    SOURCE,
                    READ_ON,
                )
                .note("quoted from the pricing page by third-party notes; unconfirmed"),
                PricingRate::new(
                    RateUnit::GbStorageHour,
                    "0.00034236",
                    "USD",
                    "pay as you go",
                    SOURCE,
                    READ_ON,
                )
                .note("disk, billed while suspended too; quoted by third-party notes; unconfirmed"),
            ],
            size: None,
        },
        image_mode: ImageMode::Blueprint,
        timeout_mode: TimeoutMode::Seconds,
        timeout_default_seconds: Some(DEFAULT_KEEP_ALIVE_SECONDS),
        timeout_maximum_seconds: Some(MAX_KEEP_ALIVE_SECONDS),
        timeout_granularity_seconds: Some(1),
        // Through the adapter's `sh -c` wrapper: the API has no cwd or env fields.
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        // Suspend keeps the disk (not memory) and the same id.
        supports_persistent_resume: true,
        // stop → `suspend`, resume → `resume`.
        supports_explicit_stop: true,
        // `snapshot_disk_async` + `disk_snapshots/{id}/status` + `disk_snapshots/{id}/delete`.
        supports_snapshots: true,
        // A create with `snapshot_id`.
        supports_restore: true,
        supports_delete: true,
        // Native executions: stdin as text through `send_std_in`, `kill` only, and SSE output
        // streams that resume at a byte offset.
        images: Vec::new(),
        commands: CommandCapabilities {
            stdin: true,
            signals: vec![Signal::Kill],
            resume: CommandResume::ProviderOffset,
            binary_output: false,
            emulated: false,
        },
    }
}
