//! What every handler shares: the use cases, the request metrics and the build provenance.
//! The bottom of the crate: it imports nothing else from it.

use std::sync::Arc;

use corral_service::Service;
use corral_service::metrics::Histograms;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The use cases.
    pub service: Service,
    /// The control plane's use cases (`/v1/control` and the console).
    pub control: corral_control::Control,
    /// Request metrics.
    pub metrics: Arc<Histograms>,
    /// Build provenance for `/healthz`.
    pub build: BuildInfo,
    /// The E2B-compatible front door (`/e2b`), when enabled.
    pub e2b: Option<corral_e2b::FrontDoor>,
}

/// Build provenance, captured at compile time by the binary (whose build script knows the
/// commit and the time), for `/healthz`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildInfo {
    /// The crate version.
    pub version: &'static str,
    /// The git commit, when the build knew it (`CORRAL_GIT_COMMIT`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<&'static str>,
    /// The build time, when the build knew it (`CORRAL_BUILD_TIME`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_time: Option<&'static str>,
}

/// The request metric family.
pub fn request_metrics() -> Histograms {
    Histograms::new(
        "corral_http_request_duration_seconds",
        "HTTP requests by operation and outcome code (ok or a v3 error code)",
        &["operation", "code"],
    )
}
