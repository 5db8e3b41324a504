//! The `local` provider, built from the configuration (`[local]` and the data directory):
//! the one provider `wiring` does not build from a `[providers.<id>]` table.

use std::sync::Arc;

use corral_provider::SandboxProvider;
use corral_provider_local::{InitProgram, LocalProvider};

use crate::config::Settings;

/// Builds `local` under `<data_dir>/sandboxes` (or `[local] root`). A machine that cannot run
/// it still gets the provider (every call then answers `provider_unavailable` with the reason).
pub(super) fn build(settings: &Settings) -> Result<Arc<dyn SandboxProvider>, String> {
    let l = &settings.local;
    // Each sandbox's init is this executable (`main` runs it when asked).
    let init = InitProgram::current_exe()
        .map_err(|e| format!("cannot find the corral executable: {e}"))?;
    let mut config = l.config(settings.data_dir.join("sandboxes"), Some(init))?;
    // Refused when set (`config::sections::local`): the server never shares the host's
    // network namespace.
    config.allow_network = false;
    let provider = LocalProvider::new(config).map_err(|e| e.to_string())?;
    if let Some(why) = provider.unavailable_reason() {
        tracing::warn!("provider `local` cannot run sandboxes on this machine: {why}");
    }
    Ok(Arc::new(provider))
}
