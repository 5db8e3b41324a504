use serde::{Deserialize, Serialize};

use crate::provider::Provider;

/// How the `image` field of a create request is interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum ImageMode {
    /// A provider template (E2B, Together, Morph snapshot).
    Template,
    /// A container image reference.
    Container,
    /// A provider blueprint (Runloop).
    Blueprint,
    /// Not selectable: the provider has one image.
    Fixed,
}

/// How a sandbox's lifetime is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum TimeoutMode {
    /// `timeout` in seconds, within the advertised bounds and granularity.
    Seconds,
    /// The provider decides (sleeps, auto-stops); `timeout` is not accepted.
    ProviderManaged,
}

/// Whether stdout and stderr come back apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum OutputStreams {
    /// stdout and stderr are kept apart.
    Separate,
    /// The provider merges them: everything arrives in `stdout`.
    Combined,
}

/// Official pricing evidence: the figures as published, where, and when they were read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PricingEvidence {
    /// The published price figures, in the provider's own terms.
    pub summary: String,
    /// Where the figures were read.
    pub source_url: String,
    /// The date they were read, `YYYY-MM-DD`.
    pub read_on: String,
}

/// What a provider can do: identity, pricing evidence, runtime and lifecycle behaviour.
///
/// Plain data, built in one function per adapter; validation before a provider call reads it,
/// and nothing else hard-codes what a provider can do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ProviderCapabilities {
    /// The provider.
    pub provider: Provider,
    /// Human-readable name, e.g. "E2B".
    pub display_name: String,
    /// Official pricing evidence.
    pub pricing: PricingEvidence,
    /// How `image` is interpreted.
    pub image_mode: ImageMode,
    /// How the lifetime is set.
    pub timeout_mode: TimeoutMode,
    /// Lifetime used when `timeout` is absent (absent: persists until deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_default_seconds: Option<u64>,
    /// Largest accepted `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_maximum_seconds: Option<u64>,
    /// `timeout` must be a multiple of this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_granularity_seconds: Option<u64>,
    /// Whether exec honours `cwd`.
    pub supports_cwd: bool,
    /// Whether exec honours `env`.
    pub supports_env: bool,
    /// Whether stdout and stderr are kept apart.
    pub output_streams: OutputStreams,
    /// Whether a sandbox keeps its state across sleep/resume.
    pub supports_persistent_resume: bool,
    /// Whether the provider has an explicit stop.
    pub supports_explicit_stop: bool,
    /// Whether the provider can snapshot a sandbox.
    pub supports_snapshots: bool,
    /// Whether the provider can restore from a snapshot.
    pub supports_restore: bool,
    /// Whether delete permanently removes the sandbox.
    pub supports_delete: bool,
}

/// Every configured provider's capabilities (`GET /v1/providers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ProviderCatalog {
    /// One entry per configured provider.
    pub providers: Vec<ProviderCapabilities>,
}

impl ProviderCapabilities {
    /// Checks the invariants the spec puts on capabilities (bounds >= 1, default within the
    /// maximum and on the granularity, no timeout bounds for provider-managed lifetimes).
    /// Every adapter's capabilities pass this; a test in each adapter calls it.
    pub fn check(&self) -> Result<(), String> {
        let bounds = [
            ("timeoutDefaultSeconds", self.timeout_default_seconds),
            ("timeoutMaximumSeconds", self.timeout_maximum_seconds),
            (
                "timeoutGranularitySeconds",
                self.timeout_granularity_seconds,
            ),
        ];
        for (name, value) in bounds {
            if value == Some(0) {
                return Err(format!("{name} must be >= 1"));
            }
            if self.timeout_mode == TimeoutMode::ProviderManaged && value.is_some() {
                return Err(format!("{name} is set but timeoutMode is provider_managed"));
            }
        }
        if let (Some(d), Some(m)) = (self.timeout_default_seconds, self.timeout_maximum_seconds)
            && d > m
        {
            return Err("timeoutDefaultSeconds exceeds timeoutMaximumSeconds".into());
        }
        if let (Some(d), Some(g)) = (
            self.timeout_default_seconds,
            self.timeout_granularity_seconds,
        ) && !d.is_multiple_of(g)
        {
            return Err("timeoutDefaultSeconds is not a multiple of the granularity".into());
        }
        if self.display_name.trim().is_empty() {
            return Err("displayName is empty".into());
        }
        if !self.pricing.source_url.starts_with("https://") {
            return Err("pricing.sourceUrl must be an https URL".into());
        }
        let date = self.pricing.read_on.as_bytes();
        let date_ok = date.len() == 10
            && date.iter().enumerate().all(|(i, b)| match i {
                4 | 7 => *b == b'-',
                _ => b.is_ascii_digit(),
            });
        if !date_ok {
            return Err("pricing.readOn must be YYYY-MM-DD".into());
        }
        Ok(())
    }
}
