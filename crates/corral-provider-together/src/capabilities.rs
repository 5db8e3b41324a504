//! Together Sandbox's honest capabilities.

use corral_domain::{
    ImageMode, OutputStreams, PricingEvidence, Provider, ProviderCapabilities, TimeoutMode,
};

/// What Together Sandbox can do through this adapter.
pub(crate) fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        // Nothing to qualify: no stop, no snapshot (above).
        lifecycle: corral_domain::LifecycleCapabilities::default(),
        provider: Provider::Together,
        display_name: "Together Sandbox".into(),
        pricing: PricingEvidence {
            summary: "No Together Sandbox price list is published; the CodeSandbox SDK it \
                      replaces bills VM credits at $0.01486 per credit, per minute (Pico 5 \
                      credits/h = $0.0743/h, Nano 10 credits/h = $0.1486/h)"
                .into(),
            source_url: "https://docs.together.ai/docs/together-code-sandbox".into(),
            read_on: "2026-08-18".into(),
            // No per-unit price is published (see the summary): nothing to estimate with.
            rates: Vec::new(),
            size: None,
        },
        // `image` is a snapshot UUID or alias (`name@tag`).
        image_mode: ImageMode::Template,
        // `ttl`: whole seconds from creation; omitted, the sandbox runs until terminated, so
        // there is no provider default and no documented maximum.
        timeout_mode: TimeoutMode::Seconds,
        timeout_default_seconds: None,
        timeout_maximum_seconds: None,
        timeout_granularity_seconds: Some(1),
        // Pint's CreateExecRequest has `cwd` and `env`.
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        // No pause or resume: a terminated sandbox cannot be used again.
        supports_persistent_resume: false,
        // No stop: `POST /sandboxes/{id}/terminate` is final ("the sandbox cannot be used
        // again"), and the API has no pause or start (provider-apis/together/api-openapi.json).
        supports_explicit_stop: false,
        // A sandbox's snapshot is taken only by its termination (`termination_policy`, or
        // the terminate call's `snapshot`), which ends it; `POST /snapshots` builds one from a
        // container image. A snapshot that destroys its sandbox is not Corral's snapshot
        // (the sandbox must go on), so none is offered (api-openapi.json; research part 1
        // §6B).
        supports_snapshots: false,
        // A create from `snapshot_id` exists, but with no Corral snapshot there is nothing of
        // Corral's to restore.
        supports_restore: false,
        supports_delete: true,
        images: Vec::new(),
        commands: corral_domain::CommandCapabilities::emulated(),
    }
}
