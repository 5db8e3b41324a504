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
    /// The same figures as structured per-unit rates, where the provider publishes them
    /// (empty where it publishes none, or, for `local`, where nothing is charged).
    #[serde(default)]
    pub rates: Vec<PricingRate>,
    /// The resources a sandbox created through Corral gets, where documented: create
    /// requests carry no size, so this is the provider's default (or the adapter's fixed
    /// choice). Absent: unknown, and per-resource rates cannot be applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<SandboxSize>,
}

/// What a rate is charged per. Time-based units are applied to a sandbox's running time;
/// the others (storage, creations) are published for reference and not estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum RateUnit {
    /// One vCPU for one second.
    VcpuSecond,
    /// One vCPU for one hour.
    VcpuHour,
    /// One physical core (2 vCPU) for one second (Modal's unit).
    PhysicalCoreSecond,
    /// One GiB (2^30 bytes) of memory for one second.
    GibMemorySecond,
    /// One GiB of memory for one hour.
    GibMemoryHour,
    /// One GB (10^9 bytes) of memory for one second.
    GbMemorySecond,
    /// One GB of memory for one hour.
    GbMemoryHour,
    /// One running sandbox for one second, whatever its size.
    SandboxSecond,
    /// One running sandbox for one hour, whatever its size.
    SandboxHour,
    /// One GB of disk for one second.
    GbStorageSecond,
    /// One GiB of disk for one hour.
    GibStorageHour,
    /// One GB of disk for one hour.
    GbStorageHour,
    /// One GB of stored data (snapshots, volumes) for one month.
    GbStorageMonth,
    /// One sandbox created.
    SandboxCreation,
}

impl RateUnit {
    /// The wire value, e.g. `"vcpu_second"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RateUnit::VcpuSecond => "vcpu_second",
            RateUnit::VcpuHour => "vcpu_hour",
            RateUnit::PhysicalCoreSecond => "physical_core_second",
            RateUnit::GibMemorySecond => "gib_memory_second",
            RateUnit::GibMemoryHour => "gib_memory_hour",
            RateUnit::GbMemorySecond => "gb_memory_second",
            RateUnit::GbMemoryHour => "gb_memory_hour",
            RateUnit::SandboxSecond => "sandbox_second",
            RateUnit::SandboxHour => "sandbox_hour",
            RateUnit::GbStorageSecond => "gb_storage_second",
            RateUnit::GibStorageHour => "gib_storage_hour",
            RateUnit::GbStorageHour => "gb_storage_hour",
            RateUnit::GbStorageMonth => "gb_storage_month",
            RateUnit::SandboxCreation => "sandbox_creation",
        }
    }
}

/// One published per-unit price.
///
/// `rate` is a decimal string (`"0.000014"`), not a JSON number: published prices are
/// decimal figures with up to eight places, which binary floating point cannot hold exactly,
/// and a string keeps the figure exactly as read; estimates are computed in fixed point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PricingRate {
    /// What the rate is charged per.
    pub unit: RateUnit,
    /// The price of one unit: a non-negative decimal, at most 6 digits before the point and 12 after.
    #[cfg_attr(
        feature = "utoipa",
        schema(pattern = "^[0-9]{1,6}(\\.[0-9]{1,12})?$", example = "0.000014")
    )]
    pub rate: String,
    /// ISO 4217 currency code, e.g. `USD`.
    pub currency: String,
    /// The plan or tier the rate belongs to, e.g. `pay as you go`.
    pub plan: String,
    /// Where the figure was read.
    pub source_url: String,
    /// The date it was read, `YYYY-MM-DD`.
    pub read_on: String,
    /// What the figure leaves out or how it was read (e.g. from a third-party transcription).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A sandbox's resources, as the pricing evidence assumes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SandboxSize {
    /// vCPUs; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<u32>,
    /// Memory in MiB; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// Where the size comes from.
    pub note: String,
}

/// Whether `s` is a `YYYY-MM-DD` shaped date.
fn is_date(s: &str) -> bool {
    let date = s.as_bytes();
    date.len() == 10
        && date.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        })
}

impl PricingRate {
    /// A rate without a note.
    pub fn new(
        unit: RateUnit,
        rate: &str,
        currency: &str,
        plan: &str,
        source_url: &str,
        read_on: &str,
    ) -> Self {
        PricingRate {
            unit,
            rate: rate.to_owned(),
            currency: currency.to_owned(),
            plan: plan.to_owned(),
            source_url: source_url.to_owned(),
            read_on: read_on.to_owned(),
            note: None,
        }
    }

    /// The same rate with `note`.
    pub fn note(mut self, note: &str) -> Self {
        self.note = Some(note.to_owned());
        self
    }

    /// Checks the rate: a decimal figure, a currency code, a plan, an https source, a date.
    pub fn check(&self) -> Result<(), String> {
        let unit = self.unit.as_str();
        if crate::money::Money::parse(&self.rate).is_none() {
            return Err(format!(
                "pricing rate {unit}: rate must be a non-negative decimal (at most 6 digits before the point, 12 after)"
            ));
        }
        if self.currency.len() != 3 || !self.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "pricing rate {unit}: currency must be an ISO 4217 code"
            ));
        }
        if self.plan.trim().is_empty() {
            return Err(format!("pricing rate {unit}: plan is empty"));
        }
        if !self.source_url.starts_with("https://") {
            return Err(format!(
                "pricing rate {unit}: sourceUrl must be an https URL"
            ));
        }
        if !is_date(&self.read_on) {
            return Err(format!("pricing rate {unit}: readOn must be YYYY-MM-DD"));
        }
        Ok(())
    }
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
    /// What a stop, a snapshot and the idle stop keep and how they are done (alongside the
    /// `supports*` flags, which say whether they can be done at all).
    #[serde(default)]
    pub lifecycle: LifecycleCapabilities,
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
        if !is_date(&self.pricing.read_on) {
            return Err("pricing.readOn must be YYYY-MM-DD".into());
        }
        for rate in &self.pricing.rates {
            rate.check()?;
        }
        let l = &self.lifecycle;
        if l.stop_keeps_memory && !self.supports_explicit_stop {
            return Err(
                "lifecycle.stopKeepsMemory is set but supportsExplicitStop is false".into(),
            );
        }
        if l.native_idle_stop && !self.supports_explicit_stop {
            return Err("lifecycle.nativeIdleStop is set but supportsExplicitStop is false".into());
        }
        if l.snapshot_keeps_memory && !self.supports_snapshots {
            return Err(
                "lifecycle.snapshotKeepsMemory is set but supportsSnapshots is false".into(),
            );
        }
        Ok(())
    }

    /// Whether `POST /v1/sandboxes/{id}/fork` works here: a fork is a snapshot restored into
    /// each copy.
    pub const fn supports_fork(&self) -> bool {
        self.supports_snapshots && self.supports_restore
    }
}

/// The details of a provider's lifecycle operations that clients choose by (part of each
/// `GET /v1/providers` entry). Every flag is `false` where the operation itself is unsupported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct LifecycleCapabilities {
    /// Whether a stopped sandbox resumes with its processes and memory (a pause), not only
    /// its files.
    pub stop_keeps_memory: bool,
    /// Whether a snapshot holds memory and processes as well as the filesystem.
    pub snapshot_keeps_memory: bool,
    /// Whether `idleStopSeconds` is handed to the provider's own auto-stop (otherwise Corral's
    /// idle sweep stops the sandbox).
    pub native_idle_stop: bool,
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
