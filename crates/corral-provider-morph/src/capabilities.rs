//! Morph Cloud's honest capabilities.

use corral_domain::{
    ImageMode, OutputStreams, PricingEvidence, Provider, ProviderCapabilities, TimeoutMode,
};

/// What Morph Cloud can do through this adapter.
pub(crate) fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        lifecycle: corral_domain::LifecycleCapabilities {
            // "`pause` keeps memory and disk" (research part 2 §8.3, from the SDK's
            // `ttl_action` and Morph's pause documentation).
            stop_keeps_memory: true,
            // Unconfirmed: pause is described as taking a snapshot and billing counts
            // `snapshot_memory_time`, but no source read says an instance started from a
            // snapshot resumes its processes. False until a live check shows it.
            snapshot_keeps_memory: false,
            // Morph has no idle policy: `ttl_seconds` counts from the start, `wake_on` only
            // wakes. Corral's own sweep stops idle sandboxes here.
            native_idle_stop: false,
        },
        provider: Provider::Morph,
        display_name: "Morph Cloud".into(),
        pricing: PricingEvidence {
            summary: "Developer plan includes 300 free compute hours per month, then \
                      pay-as-you-go; per-unit prices are not published on the page read"
                .into(),
            source_url: "https://cloud.morph.so/docs/faq".into(),
            read_on: "2026-11-22".into(),
            // No per-unit price is published (see the summary): nothing to estimate with.
            rates: Vec::new(),
            size: None,
        },
        // `image` is the snapshot id an instance starts from.
        image_mode: ImageMode::Template,
        // `ttl_seconds` counts whole seconds from the start; with no TTL an instance runs until
        // deleted, so there is no provider default, and no documented maximum.
        timeout_mode: TimeoutMode::Seconds,
        timeout_default_seconds: None,
        timeout_maximum_seconds: None,
        timeout_granularity_seconds: Some(1),
        // The exec endpoint takes only an argv; the adapter applies cwd and env in `sh -c`.
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        // Pause keeps memory and disk; resume continues the same instance.
        supports_persistent_resume: true,
        // Corral's stop is Morph's pause (`POST /instance/{id}/pause`), its resume `…/resume`;
        // Morph's own "stop" is deletion and is not used for it.
        supports_explicit_stop: true,
        // `POST /instance/{id}/snapshot`, `GET`/`DELETE /snapshot/{id}`.
        supports_snapshots: true,
        // An instance started from the snapshot (`POST /instance?snapshot_id=`).
        supports_restore: true,
        supports_delete: true,
        images: Vec::new(),
        commands: corral_domain::CommandCapabilities::emulated(),
    }
}
