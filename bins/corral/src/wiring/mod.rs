//! Which providers this binary carries, and how each is built from the configuration.
//!
//! Adding a provider is one line in the `adapters!` list below (plus the crate in the workspace
//! members and this binary's dependencies and `fakes` feature): its `[providers.<id>]` table is handed to the adapter's own
//! configuration type, which refuses keys it does not know.

use std::collections::BTreeMap;
use std::sync::Arc;

use corral_domain::Provider;
use corral_provider::{Adapter, SandboxProvider};

use crate::config::Settings;

mod local;

/// One adapter compiled into the binary: its id and how to build it from its table.
#[derive(Clone, Copy)]
pub struct Registration {
    /// The provider the adapter serves.
    pub provider: Provider,
    build: fn(toml::Table) -> Result<Arc<dyn SandboxProvider>, String>,
}

impl Registration {
    /// The registration of adapter `A`.
    pub const fn of<A: Adapter>() -> Self {
        Self {
            provider: A::PROVIDER,
            build: build_one::<A>,
        }
    }
}

fn build_one<A: Adapter>(table: toml::Table) -> Result<Arc<dyn SandboxProvider>, String> {
    let config: A::Config = table
        .try_into()
        .map_err(|e| format!("[providers.{}]: {e}", A::PROVIDER))?;
    let adapter = A::from_config(config).map_err(|e| format!("provider `{}`: {e}", A::PROVIDER))?;
    Ok(Arc::new(adapter))
}

/// The registration list: one line per adapter, `<crate>::<Adapter type>`. It makes
/// [`ADAPTERS`] and, with the `fakes` feature, [`visit_fakes`] over each crate's
/// `fake::Fake` harness.
macro_rules! adapters {
    ($($krate:ident :: $adapter:ident),+ $(,)?) => {
        /// Every adapter compiled in besides `local` (which is built from `[local]` and the
        /// data directory).
        pub const ADAPTERS: &[Registration] = &[$(Registration::of::<$krate::$adapter>()),+];

        /// Calls `visitor` with every adapter's loopback fake harness, in registration order:
        /// the server's tests drive each adapter through HTTP this way.
        #[cfg(feature = "fakes")]
        pub async fn visit_fakes<V: FakeVisitor>(visitor: &mut V) {
            $(visitor.visit::<$krate::fake::Fake>().await;)+
        }
    };
}

adapters![
    corral_provider_e2b::E2bProvider,
    corral_provider_daytona::DaytonaProvider,
    corral_provider_vercel::VercelProvider,
    corral_provider_runloop::RunloopProvider,
    corral_provider_together::TogetherProvider,
    corral_provider_morph::MorphProvider,
    corral_provider_blaxel::BlaxelProvider,
    corral_provider_fly::FlyProvider,
    corral_provider_sprites::SpritesProvider,
    corral_provider_cloudflare::CloudflareProvider,
    corral_provider_modal::ModalProvider,
    corral_provider_deno::DenoProvider,
];

/// Visits adapter fakes (see [`visit_fakes`]).
#[cfg(feature = "fakes")]
pub trait FakeVisitor {
    /// Called once per registered adapter with its fake's harness type.
    fn visit<H: corral_provider_testkit::harness::Harness>(
        &mut self,
    ) -> impl std::future::Future<Output = ()>;
}

/// The providers this binary can run, `local` first.
pub fn compiled_in() -> Vec<Provider> {
    let mut all = vec![Provider::Local];
    all.extend(ADAPTERS.iter().map(|r| r.provider));
    all
}

/// Builds every enabled provider. `local` is skipped (with a warning) when this machine cannot
/// run it. Every `[providers.<id>]` table is checked, enabled or not, so a mistyped or
/// misplaced key is an error at start-up rather than a silently ignored setting.
pub fn build(settings: &Settings) -> Result<BTreeMap<Provider, Arc<dyn SandboxProvider>>, String> {
    let mut out: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
    if settings.enabled.contains(&Provider::Local) {
        match local::build(settings) {
            Ok(local) => {
                out.insert(Provider::Local, local);
            }
            Err(why) => tracing::warn!("provider `local` is disabled: {why}"),
        }
    }
    for registration in ADAPTERS {
        let p = registration.provider;
        let table = settings.providers.get(p.as_str()).cloned();
        let enabled = settings.enabled.contains(&p);
        if table.is_none() && !enabled {
            continue;
        }
        let provider = (registration.build)(table.unwrap_or_default())?;
        if enabled {
            out.insert(p, provider);
        }
    }
    Ok(out)
}

/// The capabilities of every provider compiled in, as their default configuration advertises
/// them, in provider order: the providers of the committed OpenAPI document. Builds no
/// provider that does I/O (HTTP adapters only make a client).
pub fn compiled_in_capabilities() -> Vec<corral_domain::ProviderCapabilities> {
    let mut out = vec![corral_provider_local::capabilities()];
    for registration in ADAPTERS {
        match (registration.build)(toml::Table::new()) {
            Ok(adapter) => out.push(adapter.capabilities().clone()),
            Err(e) => tracing::warn!(
                "provider `{}` cannot describe itself: {e}",
                registration.provider
            ),
        }
    }
    out.sort_by_key(|c| c.provider);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FileConfig, Overrides, resolve};

    fn built(text: &str) -> Result<Vec<Provider>, String> {
        let file: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        let settings = resolve(file, &Overrides::default(), &compiled_in()).map_err(|e| e.0)?;
        build(&settings).map(|m| m.into_keys().collect())
    }

    #[test]
    fn each_table_is_read_by_its_adapter_and_foreign_or_mistyped_keys_fail_at_start_up() {
        let ok = built(
            "[providers]\nenabled = [\"morph\"]\n[providers.morph]\nbase_url = \"http://127.0.0.1:9/api\"\ndefault_image = \"snap\"\n[providers.morph.http]\nrequest_timeout_seconds = 5",
        );
        assert_eq!(ok.unwrap(), [Provider::Morph]);
        let foreign = built("[providers.morph]\nenvd_url_template = \"https://{port}\"");
        assert!(foreign.unwrap_err().contains("envd_url_template"));
        let typo = built("[providers.e2b]\nbase_urll = \"http://x\"");
        assert!(typo.unwrap_err().contains("base_urll"));
        // A disabled provider's table is checked too.
        let disabled = built("[providers]\nenabled = [\"morph\"]\n[providers.e2b]\nnope = 1");
        assert!(disabled.unwrap_err().contains("nope"));
        let zero = built("[providers.morph.http]\nrequest_timeout_seconds = 0");
        assert!(zero.is_err());
    }

    #[test]
    fn every_adapter_crate_is_registered_once_and_every_registration_is_a_provider() {
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates");
        let mut on_disk: Vec<Provider> = std::fs::read_dir(&crates)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_prefix("corral-provider-")?
                    .parse::<Provider>()
                    .ok()
            })
            .collect();
        on_disk.sort();
        let mut registered = compiled_in();
        registered.sort();
        let before = registered.len();
        registered.dedup();
        assert_eq!(before, registered.len(), "a provider is registered twice");
        assert_eq!(
            registered, on_disk,
            "the registration list and the corral-provider-<id> crates disagree"
        );
        for p in &registered {
            assert!(Provider::ALL.contains(p));
        }
    }
}
