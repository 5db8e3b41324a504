//! Configuration: a TOML file, then environment overrides, then command-line flags
//! (`docs/configuration.md`, the reference, is this module's documentation).
#![doc = include_str!("../../../../docs/configuration.md")]

mod env;
mod file;
mod sections;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_domain::{Provider, limits};

pub use env::ConfigError;
use env::env_u64;
pub use file::*;
use sections::*;
pub use sections::{ControlSettings, http};

/// The resolved settings the server runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Listen address.
    pub listen: String,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Database URL.
    pub database_url: String,
    /// Pool size.
    pub max_connections: u32,
    /// Pool wait.
    pub acquire_timeout: Duration,
    /// Connection open and check timeout.
    pub connect_timeout: Duration,
    /// Per-operation timeout.
    pub query_timeout: Duration,
    /// Exec deadline.
    pub exec_deadline: Duration,
    /// Create wait.
    pub create_wait: Duration,
    /// Provider call deadline for everything but create and exec.
    pub provider_call_timeout: Duration,
    /// Reconciler period.
    pub reconcile_interval: Duration,
    /// Reconciler grace period.
    pub reconcile_grace: Duration,
    /// Bridge allow-list.
    pub bridge_allow: Vec<String>,
    /// Enabled providers.
    pub enabled: Vec<Provider>,
    /// Per-provider tables, for the adapters' own configuration types.
    pub providers: BTreeMap<String, toml::Table>,
    /// Local provider settings.
    pub local: corral_provider_local::LocalSettings,
    /// Request-rate limits.
    pub rate_limits: corral_service::limiter::RateLimits,
    /// Live-sandbox quotas.
    pub quotas: corral_service::limiter::Quotas,
    /// Caps on commands running at once.
    pub exec_concurrency: corral_service::limiter::ExecConcurrency,
    /// Commands as durable jobs.
    pub commands: corral_service::commands::CommandsConfig,
    /// How long lifecycle events stay readable.
    pub events_retention: Duration,
    /// Webhook delivery.
    pub webhooks: corral_service::webhooks::WebhooksConfig,
    /// The orphan reaper.
    pub reaper: corral_service::ReaperConfig,
    /// The E2B front door, when enabled.
    pub e2b: Option<corral_e2b::E2bConfig>,
    /// The control plane.
    pub control: ControlSettings,
    /// The edge's limits (`[http]`).
    pub http: corral_web::edge::EdgeConfig,
    /// The origins `/mcp` accepts in an `Origin` header (`[mcp] allowed_origins` and the
    /// public URL's origin), each `scheme://host[:port]`, lower-case.
    pub mcp_allowed_origins: Vec<String>,
}

/// Command-line values that override the file and the environment (clap already folded the
/// `CORRAL_LISTEN`, `CORRAL_DATA_DIR` and `CORRAL_DATABASE_URL` variables into them).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--database-url`.
    pub database_url: Option<String>,
}

/// Reads the file (if any) and resolves everything; `compiled_in` is the providers this binary
/// carries (`wiring::compiled_in`).
pub fn load(
    file: Option<&Path>,
    cli: &Overrides,
    compiled_in: &[Provider],
) -> Result<Settings, ConfigError> {
    let fc = match file {
        None => FileConfig::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
            toml::from_str(&text)
                .map_err(|e| ConfigError(format!("invalid config {}: {e}", path.display())))?
        }
    };
    resolve(fc, cli, compiled_in)
}

/// Applies environment overrides and flags to a parsed file. `compiled_in` is the providers
/// this binary carries: the default of `providers.enabled`, and all it may name. (Passed in,
/// not looked up, so the configuration depends on nothing else of the binary.)
pub fn resolve(
    fc: FileConfig,
    cli: &Overrides,
    compiled_in: &[Provider],
) -> Result<Settings, ConfigError> {
    let data_dir = cli
        .data_dir
        .clone()
        .or(fc.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(".corral"));
    let database_url = cli
        .database_url
        .clone()
        .or(fc.database_url.clone())
        .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("corral.db").display()));
    let enabled = enabled_providers(&fc.providers, compiled_in)?;
    let providers = provider_tables(&fc.providers, compiled_in)?;
    let bridge_allow = bridge_allow(&fc.bridge);
    let secs = Duration::from_secs;
    let rate_limits = rate_limits(&fc.rate_limits)?;
    let quotas = quotas(&fc.limits)?;
    let local = local(&fc.local)?;
    let exec_concurrency = exec_concurrency(&fc.limits);
    let listen = cli
        .listen
        .clone()
        .or(fc.listen.clone())
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let control = control(&fc.control, &listen)?;
    let commands = commands(&fc.commands)?;
    let events_retention = events_retention(&fc.events)?;
    let webhooks = webhooks(&fc.webhooks)?;
    let reaper = reaper(&fc.reaper)?;
    let e2b = e2b(&fc.e2b, &enabled)?;
    let http = http(&fc.http, corral_web::edge::descriptor_limit())?;
    let mcp_allowed_origins = mcp_allowed_origins(&fc.mcp, &control.public_url)?;
    Ok(Settings {
        listen,
        data_dir,
        database_url,
        max_connections: env_u64("CORRAL_DB_MAX_CONNECTIONS")?
            .map(|v| v as u32)
            .or(fc.database.max_connections)
            .unwrap_or(8),
        acquire_timeout: secs(fc.database.acquire_timeout_seconds.unwrap_or(5)),
        connect_timeout: secs(fc.database.connect_timeout_seconds.unwrap_or(5).max(1)),
        query_timeout: secs(fc.database.query_timeout_seconds.unwrap_or(10).max(1)),
        exec_deadline: secs(
            env_u64("CORRAL_EXEC_DEADLINE_SECONDS")?
                .or(fc.limits.exec_deadline_seconds)
                .unwrap_or(limits::DEFAULT_EXEC_DEADLINE_SECONDS),
        ),
        create_wait: secs(
            env_u64("CORRAL_CREATE_WAIT_SECONDS")?
                .or(fc.limits.create_wait_seconds)
                .unwrap_or(120),
        ),
        provider_call_timeout: secs(fc.limits.provider_call_timeout_seconds.unwrap_or(60)),
        reconcile_interval: secs(
            env_u64("CORRAL_RECONCILE_INTERVAL_SECONDS")?
                .or(fc.reconciler.interval_seconds)
                .unwrap_or(30),
        ),
        reconcile_grace: secs(fc.reconciler.grace_seconds.unwrap_or(300)),
        bridge_allow,
        enabled,
        providers,
        local,
        rate_limits,
        quotas,
        exec_concurrency,
        commands,
        events_retention,
        webhooks,
        reaper,
        e2b,
        control,
        http,
        mcp_allowed_origins,
    })
}
