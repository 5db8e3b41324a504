//! Daytona's honest capabilities (research part 1 §2).

use corral_domain::{
    CommandCapabilities, CommandResume, ImageMode, OutputStreams, PricingEvidence, Provider,
    ProviderCapabilities, Signal, TimeoutMode,
};

/// Daytona's own default idle auto-stop: 15 minutes.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 15 * 60;
/// `autoStopInterval` is in minutes.
pub const GRANULARITY_SECONDS: u64 = 60;

/// The capabilities.
pub fn capabilities() -> ProviderCapabilities {
    ProviderCapabilities {
        provider: Provider::Daytona,
        display_name: "Daytona".into(),
        pricing: PricingEvidence {
            summary: "Pay as you go: $0.0504 per vCPU-hour, $0.0162 per GiB-hour of RAM, \
                      storage $0.000108 per GiB-hour beyond 5 GiB free (as quoted from the \
                      official pricing page; not confirmed first-hand)."
                .into(),
            source_url: "https://www.daytona.io/pricing".into(),
            read_on: "2026-08-22".into(),
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
        supports_explicit_stop: true,
        supports_snapshots: true,
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

#[cfg(test)]
mod tests {
    #[test]
    fn capabilities_pass_the_spec_invariants() {
        super::capabilities().check().unwrap();
    }
}
