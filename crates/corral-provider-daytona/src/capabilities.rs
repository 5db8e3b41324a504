//! Daytona's honest capabilities (research part 1 §2).

use corral_domain::{
    CommandCapabilities, CommandResume, ImageMode, OutputStreams, PricingEvidence, PricingRate,
    Provider, ProviderCapabilities, RateUnit, SandboxSize, Signal, TimeoutMode,
};

/// Daytona's own default idle auto-stop: 15 minutes.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 15 * 60;
/// `autoStopInterval` is in minutes.
pub const GRANULARITY_SECONDS: u64 = 60;

/// Where the pricing figures were read.
const SOURCE: &str = "https://www.daytona.io/pricing";
/// When they were read.
const READ_ON: &str = "2026-08-22";

/// The capabilities.
pub fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        // Source: `provider-apis/daytona/api-openapi.yaml` (`/sandbox/{sandboxIdOrName}/stop`,
        // `/start`, `/snapshot`, `/snapshots/{id}`, `CreateSandbox.snapshot`,
        // `CreateSandbox.autoStopInterval`, `CreateSandboxSnapshot`).
        lifecycle: corral_domain::LifecycleCapabilities {
            // A stop ends every process (SIGTERM, `force`: SIGKILL) and keeps the disk; on VM
            // runners it may keep memory, but a container sandbox does not: not claimed.
            stop_keeps_memory: false,
            // Snapshots are taken with `includeMemory: false` (memory is for VM sandboxes
            // only, and they must be started for it).
            snapshot_keeps_memory: false,
            // `idleStopSeconds` is sent as `autoStopInterval` (minutes, rounded up): Daytona
            // stops the sandbox itself after that long without activity.
            native_idle_stop: true,
        },
        provider: Provider::Daytona,
        display_name: "Daytona".into(),
        pricing: PricingEvidence {
            summary: "Pay as you go: $0.0504 per vCPU-hour, $0.0162 per GiB-hour of RAM, \
                      storage $0.000108 per GiB-hour beyond 5 GiB free (as quoted from the \
                      official pricing page; not confirmed first-hand)."
                .into(),
            source_url: SOURCE.into(),
            read_on: READ_ON.into(),
            rates: vec![
                PricingRate::new(RateUnit::VcpuHour, "0.0504", "USD", "pay as you go", SOURCE, READ_ON)
                    .note("quoted from the official page by third-party notes; not confirmed first-hand"),
                PricingRate::new(RateUnit::GibMemoryHour, "0.0162", "USD", "pay as you go", SOURCE, READ_ON)
                    .note("quoted from the official page by third-party notes; not confirmed first-hand"),
                PricingRate::new(RateUnit::GibStorageHour, "0.000108", "USD", "pay as you go", SOURCE, READ_ON)
                    .note("beyond 5 GiB free; quoted from the official page by third-party notes"),
            ],
            size: Some(SandboxSize {
                vcpus: Some(1),
                memory_mib: Some(1024),
                note: "Daytona's default for a create that names no resources: 1 vCPU, 1 GB RAM (read as GiB, the unit of its memory price), 3 GiB disk".into(),
            }),
        },
        // A Daytona "snapshot" is a named, pre-built image.
        image_mode: ImageMode::Template,
        // The lifetime is the idle auto-stop interval, sent in whole minutes.
        timeout_mode: TimeoutMode::Seconds,
        timeout_default_seconds: Some(DEFAULT_TIMEOUT_SECONDS),
        timeout_maximum_seconds: None,
        timeout_granularity_seconds: Some(GRANULARITY_SECONDS),
        supports_cwd: true,
        supports_env: true,
        // `/process/execute` merges stderr into stdout.
        output_streams: OutputStreams::Combined,
        supports_persistent_resume: true,
        // `POST /sandbox/{id}/stop` and `/start`, both asynchronous (`stopping`, `starting`).
        supports_explicit_stop: true,
        // `POST /sandbox/{id}/snapshot` (asynchronous), followed and deleted through
        // `/snapshots/{id}`.
        supports_snapshots: true,
        // A create naming the snapshot as `snapshot`.
        supports_restore: true,
        supports_delete: true,
        // Native session commands: the log is a snapshot from byte 0 (replayed, skipped by
        // offset), terminate is SIGKILL, and the session input can neither be closed nor
        // written byte for byte (a newline is appended to each write).
        images: Vec::new(),
        commands: CommandCapabilities {
            stdin: false,
            signals: vec![Signal::Kill],
            resume: CommandResume::ProviderReplay,
            binary_output: true,
            emulated: false,
        },
    }
}
