//! Blaxel's honest capabilities.

use corral_domain::{
    CommandCapabilities, CommandResume, ImageMode, OutputStreams, PricingEvidence, PricingRate,
    Provider, ProviderCapabilities, RateUnit, SandboxSize, Signal, TimeoutMode,
};

/// Where the pricing figures were read.
const SOURCE: &str = "https://blaxel.ai/pricing";
/// When they were read.
const READ_ON: &str = "2026-10-07";

/// What Blaxel can do through this adapter.
pub(crate) fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        // No stop; whether an API snapshot holds memory (standby's does) is not documented,
        // so none is promised.
        lifecycle: corral_domain::LifecycleCapabilities::default(),
        provider: Provider::Blaxel,
        display_name: "Blaxel".into(),
        pricing: PricingEvidence {
            summary: "Sandbox active time $0.0000115 per GB of RAM per second (CPU not charged \
                      separately; nothing while in standby); snapshot storage $0.20 per \
                      GB-month; volumes $0.12 per GB-month; up to $200 free credits"
                .into(),
            source_url: SOURCE.into(),
            read_on: READ_ON.into(),
            rates: vec![
                PricingRate::new(RateUnit::GbMemorySecond, "0.0000115", "USD", "pay as you go", SOURCE, READ_ON)
                    .note("active time only (nothing in standby); CPU is not charged separately"),
                PricingRate::new(RateUnit::GbStorageMonth, "0.20", "USD", "pay as you go", SOURCE, READ_ON)
                    .note("snapshot storage"),
                PricingRate::new(RateUnit::GbStorageMonth, "0.12", "USD", "pay as you go", SOURCE, READ_ON)
                    .note("volumes"),
            ],
            size: Some(SandboxSize {
                vcpus: Some(2),
                memory_mib: Some(u64::from(crate::DEFAULT_MEMORY_MB)),
                note: "the adapter's default memory (4096 MB, read as MiB; CPU = memory / 2048); a configured memory_mb is not reflected here".into(),
            }),
        },
        // `spec.runtime.image`: a public `blaxel/*` image or a custom template image.
        image_mode: ImageMode::Container,
        // Sandboxes go to standby on their own after ~15 s idle and are never deleted without
        // an expiration policy; Blaxel's `ttl` is a maximum age that deletes, which Corral's
        // `timeout` would not describe honestly, so none is accepted.
        timeout_mode: TimeoutMode::ProviderManaged,
        timeout_default_seconds: None,
        timeout_maximum_seconds: None,
        timeout_granularity_seconds: None,
        // `POST /process` takes `workingDir` and `env`.
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        // Standby snapshots memory and filesystem; the next call resumes in under 25 ms.
        supports_persistent_resume: true,
        // No stop endpoint: standby is automatic (research part 2 §5.2 "stop/pause/resume:
        // none explicit"). `spec.enabled = false` disables a sandbox, but nothing documents
        // that its files survive being enabled again, so it is not offered as a stop.
        supports_explicit_stop: false,
        // `POST /v0/sandboxes/{name}/snapshots`, listed and deleted below it, and forked into
        // a new sandbox with `POST /v0/sandboxes/{name}/fork {snapshotId}` (the control
        // plane's types in blaxel-ai/sdk-typescript `@blaxel/core/src/client/types.gen.ts`;
        // research part 2 §5.2). Both endpoints are marked work in progress by Blaxel.
        supports_snapshots: true,
        supports_restore: true,
        supports_delete: true,
        // The process API (`commands.rs`): no stdin (processes get none), stop (SIGTERM) and
        // kill (SIGKILL), a log stream that replays from the start.
        images: Vec::new(),
        commands: CommandCapabilities {
            stdin: false,
            signals: vec![Signal::Kill, Signal::Term],
            resume: CommandResume::ProviderReplay,
            binary_output: true,
            emulated: false,
        },
    }
}
