//! E2B's honest capabilities (research part 1 §1).

use corral_domain::{
    CommandCapabilities, CommandResume, ImageMode, OutputStreams, PricingEvidence, PricingRate,
    Provider, ProviderCapabilities, RateUnit, Signal, TimeoutMode,
};

/// Lifetime sent when the request has none: the SDKs' default (E2B's own server-side default
/// of 15 s is never relied on).
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// Longest lifetime: 24 h on Pro (Hobby teams are limited to 1 h and get a 400 above it).
pub const MAXIMUM_TIMEOUT_SECONDS: u64 = 24 * 3600;

/// Where the pricing figures were read.
const SOURCE: &str = "https://github.com/e2b-dev/docs/blob/d940a4e/docs/legacy/pricing.mdx";
/// When they were read.
const READ_ON: &str = "2025-12-17";

/// The capabilities.
pub fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        // Source: `provider-apis/e2b/openapi.yml` (`/sandboxes/{sandboxID}/pause`,
        // `/connect`, `/snapshots`, `/snapshots`, `/templates/{templateID}`, `NewSandbox`).
        lifecycle: corral_domain::LifecycleCapabilities {
            // A pause keeps memory and processes unless `memory: false` is sent; Corral sends
            // no body, so E2B's default (`true`) applies.
            stop_keeps_memory: true,
            // The description says a snapshot is made "from the sandbox's current state" and
            // does not say that memory is in it (only the fork's description does): not
            // claimed until confirmed.
            snapshot_keeps_memory: false,
            // E2B has no idle stop: `autoPause` pauses when the lifetime (`timeout`, counted
            // from the create or the last `connect`/`timeout` call, not from the last
            // activity) runs out. Corral's idle sweep stops E2B sandboxes.
            native_idle_stop: false,
        },
        provider: Provider::E2b,
        display_name: "E2B".into(),
        pricing: PricingEvidence {
            summary: "Per second of running sandbox on allocated resources: vCPU $0.000014/s \
                      (~$0.05/h), RAM $0.0000045/GiB/s (~$0.018/h), storage free. Plans: Hobby \
                      $0 with a one-time $100 credit, Pro $150/month."
                .into(),
            source_url: SOURCE.into(),
            read_on: READ_ON.into(),
            rates: vec![
                PricingRate::new(RateUnit::VcpuSecond, "0.000014", "USD", "usage, per second of running sandbox (Hobby and Pro)", SOURCE, READ_ON)
                    .note("marked legacy in E2B's docs; the same vCPU rate is transcribed from e2b.dev/pricing in 2026"),
                PricingRate::new(RateUnit::GibMemorySecond, "0.0000045", "USD", "usage, per second of running sandbox (Hobby and Pro)", SOURCE, READ_ON)
                    .note("marked legacy in E2B's docs"),
            ],
            size: None,
        },
        image_mode: ImageMode::Template,
        timeout_mode: TimeoutMode::Seconds,
        timeout_default_seconds: Some(DEFAULT_TIMEOUT_SECONDS),
        timeout_maximum_seconds: Some(MAXIMUM_TIMEOUT_SECONDS),
        timeout_granularity_seconds: Some(1),
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        // Pause keeps memory and filesystem; connect resumes.
        supports_persistent_resume: true,
        // Stop: `POST /sandboxes/{id}/pause`; resume: `POST /sandboxes/{id}/connect`.
        supports_explicit_stop: true,
        // `POST /sandboxes/{id}/snapshots` makes a template; `GET /snapshots?name=` finds it
        // and `DELETE /templates/{id}` deletes it.
        supports_snapshots: true,
        // A restore is `POST /sandboxes` with the snapshot's id as `templateID`.
        supports_restore: true,
        supports_delete: true,
        // Native: envd's process service (Start, Connect, List, SendInput, CloseStdin), the
        // command in a process group of its own so every signal reaches all of it; Connect
        // streams only new output, so a re-attach after a dropped stream is live only.
        images: Vec::new(),
        commands: CommandCapabilities {
            stdin: true,
            signals: Signal::ALL.to_vec(),
            resume: CommandResume::LiveOnly,
            binary_output: true,
            emulated: false,
        },
    }
}
