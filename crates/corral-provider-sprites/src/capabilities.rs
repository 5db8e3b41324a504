//! Fly Sprites' honest capabilities.

use corral_domain::{
    CommandCapabilities, CommandResume, ImageMode, OutputStreams, PricingEvidence, PricingRate,
    Provider, ProviderCapabilities, RateUnit, SandboxSize, Signal, TimeoutMode,
};

/// Where the pricing figures were read.
const SOURCE: &str =
    "https://github.com/superfly/sprites-docs/blob/6818d86/src/content/docs/reference/billing.mdx";
/// When they were read.
const READ_ON: &str = "2026-11-23";

/// What Sprites can do through this adapter.
pub(crate) fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        // Nothing to qualify: no stop, no snapshot (above).
        lifecycle: corral_domain::LifecycleCapabilities::default(),
        provider: Provider::Sprites,
        display_name: "Fly Sprites".into(),
        pricing: PricingEvidence {
            summary: "CPU $0.07 per vCPU-hour, memory $0.04375 per GB-hour, billed per second \
                      only while active; hot storage $0.50 per GB-month, storage $0.02 per \
                      GB-month; Level 10 plan $20/month (figures from a billing page marked \
                      draft)"
                .into(),
            source_url: SOURCE.into(),
            read_on: READ_ON.into(),
            rates: vec![
                PricingRate::new(RateUnit::VcpuHour, "0.07", "USD", "pay as you go", SOURCE, READ_ON)
                    .note("billed per second only while active; from a billing page marked draft"),
                PricingRate::new(RateUnit::GbMemoryHour, "0.04375", "USD", "pay as you go", SOURCE, READ_ON)
                    .note("billed per second only while active; from a billing page marked draft"),
                PricingRate::new(RateUnit::GbStorageMonth, "0.50", "USD", "pay as you go", SOURCE, READ_ON)
                    .note("hot storage; from a billing page marked draft"),
                PricingRate::new(RateUnit::GbStorageMonth, "0.02", "USD", "pay as you go", SOURCE, READ_ON)
                    .note("storage; from a billing page marked draft"),
            ],
            size: Some(SandboxSize {
                vcpus: Some(8),
                memory_mib: None,
                note: "Sprites have fixed resources: 8 vCPU; memory is platform-managed (the billing draft's 4 GB is not confirmed), so it is not estimated".into(),
            }),
        },
        // Every sprite runs the same Ubuntu base image; only the filesystem overlay is yours.
        image_mode: ImageMode::Fixed,
        // Sprites sleep after ~30 s idle and persist until deleted; there is no lifetime.
        timeout_mode: TimeoutMode::ProviderManaged,
        timeout_default_seconds: None,
        timeout_maximum_seconds: None,
        timeout_granularity_seconds: None,
        // Applied by a shell prelude (`cd`, `export`): Sprites' own `env` would replace the
        // default environment, so it is not used.
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        // The disk persists across warm and cold sleeps.
        supports_persistent_resume: true,
        // No stop or suspend endpoint: a sprite sleeps by itself when idle and wakes on use
        // (provider-apis/sprites/openapi.json has none; research part 2 §6.2 "stop/pause:
        // none").
        supports_explicit_stop: false,
        // Checkpoints (`POST /v1/sprites/{name}/checkpoint`, `GET …/checkpoints[/{id}]`) are
        // not offered as snapshots: the description has no way to delete one, and one is
        // usable only by the sprite it was taken of.
        supports_snapshots: false,
        // `POST …/checkpoints/{id}/restore` rewinds the same sprite in place (its processes
        // stop), and a create (`CreateSpriteRequest`: `name`, `url_settings`) takes no
        // checkpoint: a new sandbox cannot start from one (openapi.json; research part 2
        // §6.2).
        supports_restore: false,
        supports_delete: true,
        // Native exec sessions: re-attach streams only new output; the kill endpoint follows
        // any signal with SIGKILL after its timeout, so only TERM and KILL are offered; stdin
        // travels only on the session's own socket.
        images: Vec::new(),
        commands: CommandCapabilities {
            stdin: false,
            signals: vec![Signal::Kill, Signal::Term],
            resume: CommandResume::LiveOnly,
            binary_output: true,
            emulated: false,
        },
    }
}
