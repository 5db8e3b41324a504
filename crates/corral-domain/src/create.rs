use serde::{Deserialize, Serialize};

use crate::capabilities::{ImageMode, ProviderCapabilities, TimeoutMode};
use crate::id::SnapshotId;
use crate::input::InputError;
use crate::provider::Provider;

/// The longest accepted `image`, in characters.
pub(crate) const MAX_IMAGE_LEN: usize = 512;

/// An optional non-negative whole number, written as JSON Schema's `integer` allows: `60` or
/// `60.0` (a number with a zero fractional part is an integer there), never `60.5` or `-1`.
pub(crate) fn whole_number<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<u64>, D::Error> {
    struct Whole;
    impl<'de> serde::de::Visitor<'de> for Whole {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a non-negative whole number")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: serde::Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(Whole)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            u64::try_from(v)
                .map(Some)
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            // Below 2^53 every whole f64 is exact, and no timeout is anywhere near that.
            if v.fract() == 0.0 && (0.0..9_007_199_254_740_992.0).contains(&v) {
                Ok(Some(v as u64))
            } else {
                Err(E::invalid_value(serde::de::Unexpected::Float(v), &self))
            }
        }
    }
    d.deserialize_option(Whole)
}

/// Create fields shared by most providers: what the spec shows for every variant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StandardCreate {
    /// Runtime image or template; meaning depends on the provider's `imageMode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Lifetime in seconds, where the provider's `timeoutMode` is `seconds`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_number"
    )]
    pub timeout: Option<u64>,
    /// Restore: the new sandbox's filesystem is this snapshot's (same provider; `image` must
    /// be absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotId>,
    /// A command, exec or file call on the stopped sandbox resumes it first (instead of
    /// `sandbox_stopped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<bool>,
    /// Corral stops the sandbox after this many seconds without command, exec or file
    /// activity (the provider's own auto-stop where it has one).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_number"
    )]
    pub idle_stop_seconds: Option<u64>,
}

/// Create fields for Fly Machines, which needs an app to place the machine in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlyCreate {
    /// Container image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Not accepted (Fly lifetimes are provider-managed); present so the refusal names it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_number"
    )]
    pub timeout: Option<u64>,
    /// The Fly app; falls back to the profile's setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// The Fly region, e.g. `iad`; the provider picks one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Restore: the new sandbox's filesystem is this snapshot's (same provider; `image` must
    /// be absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotId>,
    /// A command, exec or file call on the stopped sandbox resumes it first (instead of
    /// `sandbox_stopped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<bool>,
    /// Corral stops the sandbox after this many seconds without command, exec or file
    /// activity (the provider's own auto-stop where it has one).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_number"
    )]
    pub idle_stop_seconds: Option<u64>,
}

/// Create fields for `local`: image and lifetime, and a network of the sandbox's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalCreate {
    /// An image the operator named (imageMode template when some are configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Lifetime in seconds; without it the sandbox persists until deleted.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_number"
    )]
    pub timeout: Option<u64>,
    /// A guarded network of the sandbox's own (the outside world, never the host's loopback,
    /// link-local or private ranges); refused where the operator allows none. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Restore: the new sandbox's filesystem is this snapshot's (same provider; `image` must
    /// be absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotId>,
    /// A command, exec or file call on the stopped sandbox resumes it first (instead of
    /// `sandbox_stopped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<bool>,
    /// Corral stops the sandbox after this many seconds without command, exec or file
    /// activity (the provider's own auto-stop where it has one).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_number"
    )]
    pub idle_stop_seconds: Option<u64>,
}

/// `POST /v1/sandboxes` body: a union discriminated by `provider`, one variant per provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "provider", rename_all = "lowercase")]
#[allow(missing_docs)] // One variant per provider; see `Provider` for each.
pub enum CreateSandboxRequest {
    E2b(StandardCreate),
    Daytona(StandardCreate),
    Vercel(StandardCreate),
    Runloop(StandardCreate),
    Together(StandardCreate),
    Morph(StandardCreate),
    Blaxel(StandardCreate),
    Sprites(StandardCreate),
    Fly(FlyCreate),
    Cloudflare(StandardCreate),
    Modal(StandardCreate),
    Deno(StandardCreate),
    Local(LocalCreate),
}

impl CreateSandboxRequest {
    /// A request with only image and timeout, for any provider.
    pub fn standard(provider: Provider, image: Option<String>, timeout: Option<u64>) -> Self {
        let s = StandardCreate {
            image,
            timeout,
            ..StandardCreate::default()
        };
        match provider {
            Provider::E2b => Self::E2b(s),
            Provider::Daytona => Self::Daytona(s),
            Provider::Vercel => Self::Vercel(s),
            Provider::Runloop => Self::Runloop(s),
            Provider::Together => Self::Together(s),
            Provider::Morph => Self::Morph(s),
            Provider::Blaxel => Self::Blaxel(s),
            Provider::Sprites => Self::Sprites(s),
            Provider::Fly => Self::Fly(FlyCreate {
                image: s.image,
                timeout: s.timeout,
                ..FlyCreate::default()
            }),
            Provider::Cloudflare => Self::Cloudflare(s),
            Provider::Modal => Self::Modal(s),
            Provider::Deno => Self::Deno(s),
            Provider::Local => Self::Local(LocalCreate {
                image: s.image,
                timeout: s.timeout,
                ..LocalCreate::default()
            }),
        }
    }

    /// The selected provider.
    pub fn provider(&self) -> Provider {
        match self {
            Self::E2b(_) => Provider::E2b,
            Self::Daytona(_) => Provider::Daytona,
            Self::Vercel(_) => Provider::Vercel,
            Self::Runloop(_) => Provider::Runloop,
            Self::Together(_) => Provider::Together,
            Self::Morph(_) => Provider::Morph,
            Self::Blaxel(_) => Provider::Blaxel,
            Self::Sprites(_) => Provider::Sprites,
            Self::Fly(_) => Provider::Fly,
            Self::Cloudflare(_) => Provider::Cloudflare,
            Self::Modal(_) => Provider::Modal,
            Self::Deno(_) => Provider::Deno,
            Self::Local(_) => Provider::Local,
        }
    }

    fn common(&self) -> (Option<&str>, Option<u64>) {
        match self {
            Self::Fly(f) => (f.image.as_deref(), f.timeout),
            Self::Local(l) => (l.image.as_deref(), l.timeout),
            Self::E2b(s)
            | Self::Daytona(s)
            | Self::Vercel(s)
            | Self::Runloop(s)
            | Self::Together(s)
            | Self::Morph(s)
            | Self::Blaxel(s)
            | Self::Sprites(s)
            | Self::Cloudflare(s)
            | Self::Modal(s)
            | Self::Deno(s) => (s.image.as_deref(), s.timeout),
        }
    }

    fn lifecycle(&self) -> (Option<SnapshotId>, Option<bool>, Option<u64>) {
        match self {
            Self::Fly(f) => (f.snapshot, f.auto_resume, f.idle_stop_seconds),
            Self::Local(l) => (l.snapshot, l.auto_resume, l.idle_stop_seconds),
            Self::E2b(s)
            | Self::Daytona(s)
            | Self::Vercel(s)
            | Self::Runloop(s)
            | Self::Together(s)
            | Self::Morph(s)
            | Self::Blaxel(s)
            | Self::Sprites(s)
            | Self::Cloudflare(s)
            | Self::Modal(s)
            | Self::Deno(s) => (s.snapshot, s.auto_resume, s.idle_stop_seconds),
        }
    }

    /// The snapshot to restore from, if any.
    pub fn snapshot(&self) -> Option<SnapshotId> {
        self.lifecycle().0
    }

    /// Whether calls on the stopped sandbox resume it first.
    pub fn auto_resume(&self) -> bool {
        self.lifecycle().1.unwrap_or(false)
    }

    /// Seconds without activity after which Corral stops the sandbox, if asked for.
    pub fn idle_stop_seconds(&self) -> Option<u64> {
        self.lifecycle().2
    }

    /// The same request restoring `snapshot` (a fork's copies), with no image.
    pub fn restoring(&self, snapshot: SnapshotId) -> Self {
        let mut out = self.clone();
        match &mut out {
            Self::Fly(f) => {
                f.snapshot = Some(snapshot);
                f.image = None;
            }
            Self::Local(l) => {
                l.snapshot = Some(snapshot);
                l.image = None;
            }
            Self::E2b(s)
            | Self::Daytona(s)
            | Self::Vercel(s)
            | Self::Runloop(s)
            | Self::Together(s)
            | Self::Morph(s)
            | Self::Blaxel(s)
            | Self::Sprites(s)
            | Self::Cloudflare(s)
            | Self::Modal(s)
            | Self::Deno(s) => {
                s.snapshot = Some(snapshot);
                s.image = None;
            }
        }
        out
    }

    /// The same request with `autoResume` and `idleStopSeconds` set (a fork's copies keep
    /// the original's).
    pub fn with_lifecycle(mut self, auto_resume: bool, idle_stop_seconds: Option<u64>) -> Self {
        let auto_resume = auto_resume.then_some(true);
        match &mut self {
            Self::Fly(f) => (f.auto_resume, f.idle_stop_seconds) = (auto_resume, idle_stop_seconds),
            Self::Local(l) => {
                (l.auto_resume, l.idle_stop_seconds) = (auto_resume, idle_stop_seconds)
            }
            Self::E2b(s)
            | Self::Daytona(s)
            | Self::Vercel(s)
            | Self::Runloop(s)
            | Self::Together(s)
            | Self::Morph(s)
            | Self::Blaxel(s)
            | Self::Sprites(s)
            | Self::Cloudflare(s)
            | Self::Modal(s)
            | Self::Deno(s) => {
                (s.auto_resume, s.idle_stop_seconds) = (auto_resume, idle_stop_seconds)
            }
        }
        self
    }

    /// The requested image, if any.
    pub fn image(&self) -> Option<&str> {
        self.common().0
    }

    /// The requested lifetime in seconds, if any.
    pub fn timeout(&self) -> Option<u64> {
        self.common().1
    }

    /// The lifetime the provider should be asked for: the request's, else the advertised
    /// default (providers such as E2B apply a short server-side default when none is sent).
    pub fn effective_timeout(&self, caps: &ProviderCapabilities) -> Option<u64> {
        self.timeout().or(caps.timeout_default_seconds)
    }

    /// Checks the request against the provider's advertised capabilities, before the provider
    /// is called. Errors name the field and the provider.
    pub fn validate(&self, caps: &ProviderCapabilities) -> Result<(), InputError> {
        let provider = self.provider();
        if caps.provider != provider {
            return Err(InputError::invalid(
                "provider",
                format!("provider `{provider}` is not configured"),
            ));
        }
        if let Some(image) = self.image() {
            if provider.is_bridge() {
                return Err(InputError::invalid(
                    "image",
                    format!(
                        "`image` is configured in the bridge for provider `{provider}`, not in the request"
                    ),
                ));
            }
            if caps.image_mode == ImageMode::Fixed {
                return Err(InputError::invalid(
                    "image",
                    format!(
                        "`image` is not selectable for provider `{provider}` (imageMode fixed)"
                    ),
                ));
            }
            if image.trim().is_empty()
                || image.chars().count() > MAX_IMAGE_LEN
                || image.contains(char::is_control)
            {
                return Err(InputError::invalid(
                    "image",
                    format!("`image` must be 1 to {MAX_IMAGE_LEN} printable characters"),
                ));
            }
        }
        if let Some(timeout) = self.timeout() {
            check_timeout(provider, caps, timeout)?;
        }
        self.validate_lifecycle(caps)
    }

    /// The lifecycle fields against the capabilities: each needs the operation it relies on.
    fn validate_lifecycle(&self, caps: &ProviderCapabilities) -> Result<(), InputError> {
        let provider = caps.provider;
        let (snapshot, auto_resume, idle) = self.lifecycle();
        if let Some(snapshot) = snapshot {
            if !caps.supports_restore {
                return Err(InputError::unsupported(
                    "snapshot",
                    format!(
                        "provider `{provider}` cannot restore a snapshot (supportsRestore false)"
                    ),
                ));
            }
            if snapshot.provider() != provider {
                return Err(InputError::provider_mismatch(
                    "snapshot",
                    format!(
                        "snapshot `{snapshot}` is on provider `{}`; a restore makes its sandbox on the snapshot's provider",
                        snapshot.provider()
                    ),
                ));
            }
            if self.image().is_some() {
                return Err(InputError::provider_mismatch(
                    "image",
                    "`image` must be absent when restoring a snapshot: the sandbox starts from the snapshot's filesystem",
                ));
            }
        }
        let needs_stop = auto_resume == Some(true) || idle.is_some();
        if needs_stop && !caps.supports_explicit_stop {
            let field = if idle.is_some() {
                "idleStopSeconds"
            } else {
                "autoResume"
            };
            return Err(InputError::unsupported(
                field,
                format!(
                    "provider `{provider}` cannot stop and resume a sandbox (supportsExplicitStop false)"
                ),
            ));
        }
        if let Some(idle) = idle
            && !(crate::limits::MIN_IDLE_STOP_SECONDS..=crate::limits::MAX_IDLE_STOP_SECONDS)
                .contains(&idle)
        {
            return Err(InputError::invalid(
                "idleStopSeconds",
                format!(
                    "`idleStopSeconds` must be from {} to {}",
                    crate::limits::MIN_IDLE_STOP_SECONDS,
                    crate::limits::MAX_IDLE_STOP_SECONDS
                ),
            ));
        }
        Ok(())
    }
}

fn check_timeout(
    provider: Provider,
    caps: &ProviderCapabilities,
    t: u64,
) -> Result<(), InputError> {
    let invalid = |msg: String| Err(InputError::invalid("timeout", msg));
    if provider.is_bridge() {
        return invalid(format!(
            "`timeout` is configured in the bridge for provider `{provider}`, not in the request"
        ));
    }
    if caps.timeout_mode == TimeoutMode::ProviderManaged {
        return invalid(format!(
            "`timeout` is not accepted for provider `{provider}` (timeoutMode provider_managed)"
        ));
    }
    if t == 0 {
        return invalid(format!(
            "`timeout` must be at least 1 second for provider `{provider}`"
        ));
    }
    if let Some(max) = caps.timeout_maximum_seconds
        && t > max
    {
        return invalid(format!(
            "`timeout` {t} exceeds the maximum of {max} seconds for provider `{provider}`"
        ));
    }
    if let Some(g) = caps.timeout_granularity_seconds
        && !t.is_multiple_of(g)
    {
        return invalid(format!(
            "`timeout` {t} is not a multiple of {g} seconds for provider `{provider}`"
        ));
    }
    Ok(())
}
