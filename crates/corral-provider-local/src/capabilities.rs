//! The honest capabilities of the local provider.

use corral_domain::{
    ImageMode, OutputStreams, PricingEvidence, Provider, ProviderCapabilities, TimeoutMode,
};

/// Longest lifetime a local sandbox may be given: 30 days.
pub const MAX_TIMEOUT_SECONDS: u64 = 30 * 24 * 60 * 60;

/// What `local` can do with its default configuration: one fixed image (the host's system
/// directories), a lifetime in seconds (absent: persists until deleted), separate streams,
/// cwd and env, state that persists across commands and server restarts, permanent delete,
/// stop and resume (files kept, processes ended), snapshots of the filesystem and restores.
pub fn capabilities() -> ProviderCapabilities {
    with_images(false)
}

/// The same, with `imageMode: template` when the operator named images (`image` then picks
/// one by name; without it, the host's system directories as before).
pub(crate) fn with_images(images: bool) -> ProviderCapabilities {
    ProviderCapabilities {
        // Stop keeps the files only (every process ends); a snapshot is a copy of the
        // sandbox's filesystem image; idle stops are Corral's sweep.
        lifecycle: corral_domain::LifecycleCapabilities {
            stop_keeps_memory: false,
            snapshot_keeps_memory: false,
            native_idle_stop: false,
        },
        provider: Provider::Local,
        display_name: "Local (this machine)".into(),
        pricing: PricingEvidence {
            summary: "No charge: runs on the server's own machine (Linux namespaces)".into(),
            source_url: "https://man7.org/linux/man-pages/man7/namespaces.7.html".into(),
            read_on: "2026-11-22".into(),
            // Nothing is charged: no rates, so estimates for `local` are empty.
            rates: Vec::new(),
            size: None,
        },
        image_mode: if images {
            ImageMode::Template
        } else {
            ImageMode::Fixed
        },
        timeout_mode: TimeoutMode::Seconds,
        timeout_default_seconds: None,
        timeout_maximum_seconds: Some(MAX_TIMEOUT_SECONDS),
        timeout_granularity_seconds: Some(1),
        supports_cwd: true,
        supports_env: true,
        output_streams: OutputStreams::Separate,
        supports_persistent_resume: true,
        supports_explicit_stop: true,
        // Both need the sandbox's own filesystem image (a root server with loop devices):
        // `LocalProvider::new` turns them off where there are none.
        supports_snapshots: true,
        supports_restore: true,
        supports_delete: true,
        images: Vec::new(),
        // Native: the sandbox's init runs each command as a job of its own, its output in
        // files read back by byte offset (also after a restart of the server).
        commands: corral_domain::CommandCapabilities {
            stdin: true,
            signals: corral_domain::Signal::ALL.to_vec(),
            resume: corral_domain::CommandResume::ProviderOffset,
            binary_output: true,
            emulated: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_pass_the_invariants() {
        assert_eq!(capabilities().check(), Ok(()));
        assert_eq!(capabilities().timeout_maximum_seconds, Some(2_592_000));
        assert_eq!(with_images(true).check(), Ok(()));
        assert_eq!(with_images(true).image_mode, ImageMode::Template);
    }
}
