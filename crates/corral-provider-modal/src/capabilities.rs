//! Modal Sandboxes (bridge)'s honest capabilities.

use corral_domain::{
    ImageMode, OutputStreams, PricingEvidence, PricingRate, Provider, ProviderCapabilities,
    RateUnit, TimeoutMode,
};

/// Where the pricing figures were read.
const SOURCE: &str = "https://modal.com/pricing";
/// When they were read.
const READ_ON: &str = "2026-08-22";

/// What the `modal` bridge kind can do through Corral's bridge contract.
pub(crate) fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        // A filesystem snapshot holds files only; memory snapshots need `enable_snapshot` at
        // create and are not promised for every Modal bridge. No stop, so no idle stop.
        lifecycle: corral_domain::LifecycleCapabilities {
            stop_keeps_memory: false,
            snapshot_keeps_memory: false,
            native_idle_stop: false,
        },
        provider: Provider::Modal,
        display_name: "Modal Sandboxes (bridge)".into(),
        pricing: PricingEvidence {
            summary: "Sandboxes are billed per second on the larger of request and use: $0.00003942 per physical core per second (1 core = 2 vCPU) and $0.00000667 to $0.00000672 per GiB-second of memory (third-party transcriptions of the page); Starter plan includes $30/month of credit".into(),
            source_url: SOURCE.into(),
            read_on: READ_ON.into(),
            rates: vec![
                PricingRate::new(RateUnit::PhysicalCoreSecond, "0.00003942", "USD", "pay as you go (Starter includes $30/month of credit)", SOURCE, READ_ON)
                    .note("1 core = 2 vCPU; billed on the larger of request and use; third-party transcriptions of the page"),
                PricingRate::new(RateUnit::GibMemorySecond, "0.00000667", "USD", "pay as you go (Starter includes $30/month of credit)", SOURCE, READ_ON)
                    .note("transcriptions give $0.00000667 to $0.00000672; the lower figure is used"),
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
        // A terminated Modal sandbox cannot be restarted; state survives only through snapshots: no persistent resume.
        supports_persistent_resume: false,
        // No pause and no restart of a terminated sandbox: no stop that resumes.
        supports_explicit_stop: false,
        // The contract's lifecycle extension (a bridge without it answers `Unsupported`
        // naming it): `snapshot_filesystem()` makes an image of the sandbox's filesystem, and
        // a restore creates a new sandbox from that image.
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
