use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A sandbox provider. Ids are lowercase ASCII letters and digits only, because they sit inside
/// sandbox ids (`sbx_<provider>_<ulid>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum Provider {
    /// E2B: REST control API plus the in-sandbox envd API.
    E2b,
    /// Daytona: REST control API plus the toolbox API.
    Daytona,
    /// Vercel Sandbox.
    Vercel,
    /// Runloop devboxes.
    Runloop,
    /// Together Sandbox (formerly CodeSandbox).
    Together,
    /// Morph Cloud instances.
    Morph,
    /// Blaxel sandboxes.
    Blaxel,
    /// Fly Sprites.
    Sprites,
    /// Fly Machines.
    Fly,
    /// Cloudflare, through a customer-owned bridge.
    Cloudflare,
    /// Modal, through a customer-owned bridge.
    Modal,
    /// Deno, through a customer-owned bridge.
    Deno,
    /// This machine, isolated with Linux namespaces: the embedded default.
    Local,
}

impl Provider {
    /// Every provider, in a stable order.
    pub const ALL: [Provider; 13] = [
        Provider::E2b,
        Provider::Daytona,
        Provider::Vercel,
        Provider::Runloop,
        Provider::Together,
        Provider::Morph,
        Provider::Blaxel,
        Provider::Sprites,
        Provider::Fly,
        Provider::Cloudflare,
        Provider::Modal,
        Provider::Deno,
        Provider::Local,
    ];

    /// The wire identifier, e.g. `"e2b"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Provider::E2b => "e2b",
            Provider::Daytona => "daytona",
            Provider::Vercel => "vercel",
            Provider::Runloop => "runloop",
            Provider::Together => "together",
            Provider::Morph => "morph",
            Provider::Blaxel => "blaxel",
            Provider::Sprites => "sprites",
            Provider::Fly => "fly",
            Provider::Cloudflare => "cloudflare",
            Provider::Modal => "modal",
            Provider::Deno => "deno",
            Provider::Local => "local",
        }
    }

    /// Whether the provider is reached through a customer-owned bridge (image and timeout are
    /// configured in the bridge, and `X-Provider-Bridge-Url` names it).
    pub const fn is_bridge(self) -> bool {
        matches!(
            self,
            Provider::Cloudflare | Provider::Modal | Provider::Deno
        )
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text is not one of the provider ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseProviderError {
    /// What was given (truncated to 64 characters).
    pub given: String,
}

impl fmt::Display for ParseProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown provider `{}`", self.given)
    }
}

impl std::error::Error for ParseProviderError {}

impl FromStr for Provider {
    type Err = ParseProviderError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| ParseProviderError {
                given: s.chars().take(64).collect(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_lowercase_alphanumeric_and_round_trip() {
        for p in Provider::ALL {
            let s = p.as_str();
            assert!(
                s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
                "{s}"
            );
            assert_eq!(s.parse::<Provider>().unwrap(), p);
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{s}\""));
            assert_eq!(
                serde_json::from_str::<Provider>(&format!("\"{s}\"")).unwrap(),
                p
            );
        }
    }

    #[test]
    fn unknown_and_miscased_ids_are_rejected() {
        for bad in ["", "E2B", "aws", "local ", "loc"] {
            assert!(bad.parse::<Provider>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn exactly_three_bridge_kinds() {
        let bridges: Vec<_> = Provider::ALL
            .into_iter()
            .filter(|p| p.is_bridge())
            .collect();
        assert_eq!(
            bridges,
            [Provider::Cloudflare, Provider::Modal, Provider::Deno]
        );
    }
}
