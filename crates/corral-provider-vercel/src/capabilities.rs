//! Vercel Sandbox's honest capabilities.

use corral_domain::{
    ImageMode, OutputStreams, PricingEvidence, PricingRate, Provider, ProviderCapabilities,
    RateUnit, TimeoutMode,
};

/// Session timeout when none is given: 5 minutes.
pub(crate) const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// Largest session timeout on any plan: 24 hours on Pro/Enterprise per Vercel's knowledge-base
/// article of 2026-06-29 (Hobby stops at 45 minutes; Vercel refuses more for such a team).
pub(crate) const MAX_TIMEOUT_SECONDS: u64 = 86_400;

/// Where the pricing figures were read.
const SOURCE: &str = "https://vercel.com/docs/vercel-sandbox/pricing";
/// When they were read.
const READ_ON: &str = "2026-08-22";

/// The capabilities Corral advertises for Vercel Sandbox.
pub(crate) fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        // A stop ends the VM (`POST …/sessions/{id}/stop`) and keeps only the filesystem, as
        // the snapshot Vercel takes of a persistent sandbox; a resume boots a new session
        // from it. A snapshot (`POST …/sessions/{id}/snapshot`) is the filesystem alone. No
        // idle stop is handed to Vercel: a session ends at its timeout, idle or not
        // (research/providers-part1.md §4.2, §4.3).
        lifecycle: corral_domain::LifecycleCapabilities {
            stop_keeps_memory: false,
            snapshot_keeps_memory: false,
            native_idle_stop: false,
        },
        provider: Provider::Vercel,
        display_name: "Vercel Sandbox".into(),
        pricing: PricingEvidence {
            summary: "Active CPU $0.128/hour (only time the CPU is used), provisioned memory \
                      $0.0212/GB-hour, creations $0.60 per 1M, data transfer $0.15/GB, \
                      snapshot storage $0.08/GB-month; Hobby includes 5 CPU-hours, 420 GB-hours, \
                      5,000 creations, 20 GB transfer and 15 GB storage (page last updated \
                      2025-11-26)"
                .into(),
            source_url: SOURCE.into(),
            read_on: READ_ON.into(),
            rates: vec![
                PricingRate::new(RateUnit::VcpuHour, "0.128", "USD", "beyond the plan's included usage", SOURCE, READ_ON)
                    .note("active CPU: only the time the CPU is busy is charged, so running time overstates it"),
                PricingRate::new(RateUnit::GbMemoryHour, "0.0212", "USD", "beyond the plan's included usage", SOURCE, READ_ON)
                    .note("provisioned memory"),
                PricingRate::new(RateUnit::SandboxCreation, "0.0000006", "USD", "beyond the plan's included usage", SOURCE, READ_ON)
                    .note("$0.60 per 1M creations"),
                PricingRate::new(RateUnit::GbStorageMonth, "0.08", "USD", "beyond the plan's included usage", SOURCE, READ_ON)
                    .note("snapshot storage"),
            ],
            size: None,
        },
        image_mode: ImageMode::Container,
        timeout_mode: TimeoutMode::Seconds,
        timeout_default_seconds: Some(DEFAULT_TIMEOUT_SECONDS),
        timeout_maximum_seconds: Some(MAX_TIMEOUT_SECONDS),
        // Sent in milliseconds; Corral's unit is the second.
        timeout_granularity_seconds: Some(1),
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        // Persistent sandboxes snapshot their filesystem on stop and resume on use.
        supports_persistent_resume: true,
        // Stop, resume (a new session from the stop's filesystem snapshot), snapshots and
        // creates from them (`source: {type: "snapshot"}`).
        supports_explicit_stop: true,
        supports_snapshots: true,
        supports_restore: true,
        supports_delete: true,
        // Detached commands: stdin with offsets, any POSIX signal by number, logs that replay
        // from the start.
        images: Vec::new(),
        commands: corral_domain::CommandCapabilities {
            stdin: true,
            signals: corral_domain::Signal::ALL.to_vec(),
            resume: corral_domain::CommandResume::ProviderReplay,
            binary_output: false,
            emulated: false,
        },
    }
}
