//! Which providers this binary carries, and how each is built from the configuration.
//!
//! Table-driven: wiring another HTTP adapter is one line in [`HTTP_ADAPTERS`] (plus its
//! dependency in `Cargo.toml`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use corral_domain::Provider;
use corral_provider::{ProviderError, SandboxProvider};

use crate::config::{ProviderSection, Settings};

type BuildHttp = fn(&ProviderSection) -> Result<Arc<dyn SandboxProvider>, ProviderError>;

/// Builds an HTTP adapter from its `<Id>Config` (`Default` = the real URLs) with the section's
/// base URL and request timeout applied.
macro_rules! http_adapter {
    ($krate:ident :: $config:ident, $provider:ident) => {
        |section: &ProviderSection| -> Result<Arc<dyn SandboxProvider>, ProviderError> {
            let mut config = $krate::$config::default();
            if let Some(url) = &section.base_url {
                config.base_url = url.clone();
            }
            if let Some(t) = section.request_timeout_seconds {
                config.http.request_timeout = Duration::from_secs(t);
            }
            Ok(Arc::new($krate::$provider::new(config)?))
        }
    };
}

/// Every HTTP adapter compiled in.
const HTTP_ADAPTERS: &[(Provider, BuildHttp)] = &[
    (
        Provider::E2b,
        http_adapter!(corral_provider_e2b::E2bConfig, E2bProvider),
    ),
    (
        Provider::Runloop,
        http_adapter!(corral_provider_runloop::RunloopConfig, RunloopProvider),
    ),
    (
        Provider::Morph,
        http_adapter!(corral_provider_morph::MorphConfig, MorphProvider),
    ),
];

/// The providers this binary can run, `local` first.
pub fn compiled_in() -> Vec<Provider> {
    let mut all = vec![Provider::Local];
    all.extend(HTTP_ADAPTERS.iter().map(|(p, _)| *p));
    all
}

/// Builds every enabled provider. `local` is skipped (with a warning) when this machine cannot
/// run it; an adapter whose configuration is invalid is an error.
pub fn build(settings: &Settings) -> Result<BTreeMap<Provider, Arc<dyn SandboxProvider>>, String> {
    let mut out: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
    for p in &settings.enabled {
        if *p == Provider::Local {
            match crate::local::build(settings) {
                Ok(local) => {
                    out.insert(Provider::Local, local);
                }
                Err(why) => tracing::warn!("provider `local` is disabled: {why}"),
            }
            continue;
        }
        let Some((_, build)) = HTTP_ADAPTERS.iter().find(|(q, _)| q == p) else {
            return Err(format!("provider `{p}` is not built into this binary"));
        };
        let section = settings
            .providers
            .get(p.as_str())
            .cloned()
            .unwrap_or_default();
        let provider = build(&section).map_err(|e| format!("provider `{p}`: {e}"))?;
        out.insert(*p, provider);
    }
    Ok(out)
}
