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
/// base URL and request timeout applied, then `extra` (adapter-specific keys).
macro_rules! http_adapter {
    ($krate:ident :: $config:ident, $provider:ident) => {
        http_adapter!($krate::$config, $provider, |_c, _s| {})
    };
    ($krate:ident :: $config:ident, $provider:ident, $extra:expr) => {
        |section: &ProviderSection| -> Result<Arc<dyn SandboxProvider>, ProviderError> {
            let mut config = $krate::$config::default();
            if let Some(url) = &section.base_url {
                config.base_url = url.clone();
            }
            if let Some(t) = section.request_timeout_seconds {
                config.http.request_timeout = Duration::from_secs(t);
            }
            let extra: fn(&mut $krate::$config, &ProviderSection) = $extra;
            extra(&mut config, section);
            Ok(Arc::new($krate::$provider::new(config)?))
        }
    };
}

/// Every HTTP adapter compiled in: one line each.
#[rustfmt::skip]
const HTTP_ADAPTERS: &[(Provider, BuildHttp)] = &[
    (Provider::E2b, http_adapter!(corral_provider_e2b::E2bConfig, E2bProvider, |c, s| {
        if let Some(t) = &s.envd_url_template { c.envd_url_template = t.clone(); }
    })),
    (Provider::Daytona, http_adapter!(corral_provider_daytona::DaytonaConfig, DaytonaProvider, |c, s| {
        if let Some(u) = &s.toolbox_url { c.default_toolbox_proxy_url = u.clone(); }
    })),
    (Provider::Vercel, http_adapter!(corral_provider_vercel::VercelConfig, VercelProvider)),
    (Provider::Runloop, http_adapter!(corral_provider_runloop::RunloopConfig, RunloopProvider)),
    (Provider::Together, http_adapter!(corral_provider_together::TogetherConfig, TogetherProvider, |c, s| {
        if s.default_image.is_some() { c.default_snapshot.clone_from(&s.default_image); }
    })),
    (Provider::Morph, http_adapter!(corral_provider_morph::MorphConfig, MorphProvider, |c, s| {
        if s.default_image.is_some() { c.default_snapshot_id.clone_from(&s.default_image); }
    })),
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

/// The capabilities of every provider compiled in, as their default configuration advertises
/// them, in provider order: the providers of the committed OpenAPI document. Builds no
/// provider that does I/O (HTTP adapters only make a client).
pub fn compiled_in_capabilities() -> Vec<corral_domain::ProviderCapabilities> {
    let mut out = vec![corral_provider_local::capabilities()];
    for (p, build) in HTTP_ADAPTERS {
        match build(&ProviderSection::default()) {
            Ok(adapter) => out.push(adapter.capabilities().clone()),
            Err(e) => tracing::warn!("provider `{p}` cannot describe itself: {e}"),
        }
    }
    out.sort_by_key(|c| c.provider);
    out
}
