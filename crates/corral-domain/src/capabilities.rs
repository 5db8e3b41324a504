use std::fmt;
use std::str::FromStr;

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
    /// What commands as durable jobs can do on this provider.
    pub commands: CommandCapabilities,
    /// The images a create may name, where the provider lists them (`local`: the images the
    /// operator configured); absent where any name the provider knows may be given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
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

/// A signal a client may send to a running command. Each provider advertises the ones it can
/// deliver ([`CommandCapabilities::signals`]); a request for another is refused before any
/// provider call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum Signal {
    /// Hang-up (1).
    Hup,
    /// Interrupt, as Ctrl-C (2).
    Int,
    /// Quit (3).
    Quit,
    /// Kill, which cannot be caught (9).
    Kill,
    /// User-defined 1 (10).
    Usr1,
    /// User-defined 2 (12).
    Usr2,
    /// Terminate (15).
    Term,
}

impl Signal {
    /// Every signal, in number order.
    pub const ALL: [Signal; 7] = [
        Signal::Hup,
        Signal::Int,
        Signal::Quit,
        Signal::Kill,
        Signal::Usr1,
        Signal::Usr2,
        Signal::Term,
    ];

    /// The name without `SIG`, as on the wire and as `kill -<name>` takes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Signal::Hup => "HUP",
            Signal::Int => "INT",
            Signal::Quit => "QUIT",
            Signal::Kill => "KILL",
            Signal::Usr1 => "USR1",
            Signal::Usr2 => "USR2",
            Signal::Term => "TERM",
        }
    }

    /// The Linux signal number.
    pub const fn number(self) -> i32 {
        match self {
            Signal::Hup => 1,
            Signal::Int => 2,
            Signal::Quit => 3,
            Signal::Kill => 9,
            Signal::Usr1 => 10,
            Signal::Usr2 => 12,
            Signal::Term => 15,
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Signal {
    type Err = String;

    /// Accepts `TERM`, `SIGTERM` and any case of either.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let upper = s.to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        Signal::ALL
            .into_iter()
            .find(|sig| sig.as_str() == name)
            .ok_or_else(|| format!("unknown signal {s:?}"))
    }
}

/// Where a reader's resume point comes from after Corral itself lost the provider's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum CommandResume {
    /// The provider resumes at a byte offset: nothing is lost or repeated.
    ProviderOffset,
    /// The provider replays the output from its start; Corral skips what it has journaled.
    ProviderReplay,
    /// The provider streams only new output: output made while Corral was detached is a `gap`.
    LiveOnly,
}

/// What a provider offers for commands as durable jobs (part of each `GET /v1/providers`
/// entry). Clients always resume from Corral's journal; `resume` says what Corral can recover
/// when its own connection to the provider breaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CommandCapabilities {
    /// Whether a command can be started with a stdin channel.
    pub stdin: bool,
    /// The signals that can be sent to a running command.
    pub signals: Vec<Signal>,
    /// How Corral re-attaches to a running command's output.
    pub resume: CommandResume,
    /// Whether output bytes arrive as they were written. `false` where the provider's API
    /// carries output as text (JSON strings): bytes that are not UTF-8 then arrive replaced
    /// by U+FFFD.
    pub binary_output: bool,
    /// Whether commands run through a detached wrapper over the provider's synchronous exec
    /// (output read back by offset) rather than a native asynchronous API.
    pub emulated: bool,
}

impl CommandCapabilities {
    /// Commands through a detached wrapper over synchronous exec: stdin through a FIFO, every
    /// signal to the command's process group, output resumed by byte offset.
    pub fn emulated() -> Self {
        Self {
            stdin: true,
            signals: Signal::ALL.to_vec(),
            resume: CommandResume::ProviderOffset,
            binary_output: true,
            emulated: true,
        }
    }
}
