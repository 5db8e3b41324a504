//! Configuration: a TOML file (`--config` / `CORRAL_CONFIG`), then environment overrides, then
//! command-line flags. Every key is optional; the defaults run the embedded default.
//!
//! ```toml
//! listen = "127.0.0.1:8080"
//! data_dir = ".corral"
//! database_url = "postgres://corral@localhost/corral"  # default: SQLite in data_dir
//!
//! [database]
//! max_connections = 8
//! acquire_timeout_seconds = 5   # wait for a pooled connection
//! connect_timeout_seconds = 5   # open a connection, or check a pooled one before reuse
//! query_timeout_seconds = 10    # one registry operation once it holds a connection
//!
//! [limits]
//! exec_deadline_seconds = 300     # exec → request_timeout beyond it
//! create_wait_seconds = 120       # create → sandbox_create_outcome_unknown beyond it (recording goes on)
//! provider_call_timeout_seconds = 60
//! max_live_sandboxes_per_project = 100                       # quota; default none
//! max_live_sandboxes_per_provider = { e2b = 20 }             # quota per provider; default none
//! max_concurrent_execs_per_project = 32   # commands running at once per project; 0 = no cap
//! max_concurrent_execs = 256              # commands running at once on this server; 0 = no cap
//!
//! [rate_limits]                   # token buckets, kept per replica (see docs/api.md)
//! enabled = true
//! per_key = { per_second = 20.0, burst = 100 }
//! per_project = { per_second = 50.0, burst = 200 }
//! auth_failures = { per_second = 0.5, burst = 30 }            # per source address
//!
//! [reconciler]
//! interval_seconds = 30
//! grace_seconds = 300
//!
//! [bridge]
//! allow = ["bridge.internal.example:8443"]
//!
//! [providers]
//! enabled = ["local", "e2b"]      # default: every provider compiled in
//! [providers.e2b]                 # the adapter's own configuration type (`E2bConfig`, …)
//! base_url = "http://127.0.0.1:9000"
//! [providers.e2b.http]
//! request_timeout_seconds = 60    # also connect_timeout_seconds, max_response_bytes
//! [providers.morph]
//! default_image = "snapshot_…"
//!
//! [control]                     # the control plane (docs/control-plane.md)
//! public_url = "https://corral.example.com"   # default: http://<listen address>
//! session_idle_seconds = 43200                 # 12 h
//! session_absolute_seconds = 604800            # 7 days
//! email_webhook_secret = "whsec_…"             # default none: the webhook refuses every event
//! [control.smtp]                  # default none: mail (sign-in links) is written to the log
//! host = "smtp.example.com"
//! port = 587                      # default 587
//! security = "starttls"           # "starttls" (default), "tls" or "plain"
//! username = "corral"             # optional, with password
//! password = "…"
//! from = "Corral <corral@example.com>"
//!
//! [local]
//! allow_network = false
//! memory_mib = 4096
//! max_processes = 1024
//! file_size_mib = 1024
//! cpu_seconds = 600
//! cpu_weight = 100
//! disk_mib = 1024          # each sandbox's own filesystem; 0 = none
//! disk_reserve_mib = 1024  # free space every create leaves on the data volume
//! io_read_mib_per_second = 256   # each sandbox's disk bandwidth and operations; 0 = no limit
//! io_write_mib_per_second = 128
//! io_read_iops = 4000
//! io_write_iops = 2000
//! # cgroup_parent = "system.slice/corral.service"  # a delegated cgroup: limits for a non-root server
//! exec_threads = 64        # commands running at once, each on a thread of its own (not tokio's blocking pool)
//! exec_queue_wait_seconds = 5  # an exec waits this long for a free command thread, then provider_unavailable
//! ```
//!
//! Each `[providers.<id>]` table is read by that adapter's configuration type, which documents
//! its keys (`docs/providers/<id>.md`) and refuses unknown ones at start-up.
//!
//! Environment overrides: `CORRAL_PROVIDERS` (comma-separated), `CORRAL_PROVIDER_<ID>_BASE_URL`,
//! `CORRAL_EXEC_DEADLINE_SECONDS`, `CORRAL_CREATE_WAIT_SECONDS`, `CORRAL_BRIDGE_ALLOW`
//! (comma-separated), `CORRAL_DB_MAX_CONNECTIONS`, `CORRAL_LOCAL_ALLOW_NETWORK` (`true`/`false`),
//! `CORRAL_RECONCILE_INTERVAL_SECONDS`, `CORRAL_PUBLIC_URL`, `CORRAL_SMTP_PASSWORD`,
//! `CORRAL_EMAIL_WEBHOOK_SECRET` (the last two keep secrets out of the file). Logs go to stderr, filtered by `CORRAL_LOG` (a
//! `tracing` filter such as `info` or `corral=debug`; default `info`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_domain::{Provider, limits};
use serde::Deserialize;

/// The TOML file, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Listen address.
    pub listen: Option<String>,
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// Database URL.
    pub database_url: Option<String>,
    /// Database pool.
    #[serde(default)]
    pub database: DatabaseSection,
    /// Limits.
    #[serde(default)]
    pub limits: LimitsSection,
    /// Request-rate limits.
    #[serde(default)]
    pub rate_limits: RateLimitsSection,
    /// Background reconciler.
    #[serde(default)]
    pub reconciler: ReconcilerSection,
    /// Bridge URL guard.
    #[serde(default)]
    pub bridge: BridgeSection,
    /// Providers.
    #[serde(default)]
    pub providers: ProvidersSection,
    /// The local provider.
    #[serde(default)]
    pub local: LocalSection,
    /// The control plane.
    #[serde(default)]
    pub control: ControlSection,
}

/// `[control]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlSection {
    /// The server's public base URL; default `http://<listen address>`.
    pub public_url: Option<String>,
    /// Idle session expiry.
    pub session_idle_seconds: Option<u64>,
    /// Absolute session expiry.
    pub session_absolute_seconds: Option<u64>,
    /// The email webhook's Standard Webhooks secret (`whsec_<base64>`).
    pub email_webhook_secret: Option<String>,
    /// Outgoing mail; absent → mail is logged.
    pub smtp: Option<SmtpSection>,
}

/// `[control.smtp]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpSection {
    /// Server host.
    pub host: String,
    /// Server port; default 587.
    pub port: Option<u16>,
    /// `starttls` (default), `tls` or `plain`.
    pub security: Option<String>,
    /// User name, when the server needs one.
    pub username: Option<String>,
    /// Password (or `CORRAL_SMTP_PASSWORD`).
    pub password: Option<String>,
    /// The sender (`Corral <corral@example.com>`).
    pub from: String,
}

impl std::fmt::Debug for SmtpSection {
    /// Never prints the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpSection")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("from", &self.from)
            .finish()
    }
}

/// The resolved `[control]` settings.
#[derive(Debug, Clone)]
pub struct ControlSettings {
    /// The public base URL (scheme, host and port; no trailing slash).
    pub public_url: String,
    /// Idle session expiry.
    pub session_idle: Duration,
    /// Absolute session expiry.
    pub session_absolute: Duration,
    /// The email webhook secret, when configured.
    pub email_webhook_secret: Option<corral_provider::SecretString>,
    /// Outgoing mail, when configured.
    pub smtp: Option<SmtpSection>,
}

/// `[database]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSection {
    /// Pool size.
    pub max_connections: Option<u32>,
    /// How long a request waits for a connection before `sandbox_registry_unavailable`.
    pub acquire_timeout_seconds: Option<u64>,
    /// Longest wait to open a new connection, and to check a pooled one before reuse.
    pub connect_timeout_seconds: Option<u64>,
    /// Longest time one registry operation may take once it holds a connection.
    pub query_timeout_seconds: Option<u64>,
}

/// `[limits]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Exec deadline.
    pub exec_deadline_seconds: Option<u64>,
    /// How long a create request waits for the provider before answering.
    pub create_wait_seconds: Option<u64>,
    /// Deadline of get, delete and file calls to a provider.
    pub provider_call_timeout_seconds: Option<u64>,
    /// Quota: live sandboxes per project, all providers together.
    pub max_live_sandboxes_per_project: Option<u64>,
    /// Quota: live sandboxes per project on one provider, by provider id.
    #[serde(default)]
    pub max_live_sandboxes_per_provider: BTreeMap<String, u64>,
    /// Commands (exec calls) running at once per project; default 32, `0` = no cap.
    pub max_concurrent_execs_per_project: Option<u32>,
    /// Commands running at once on this server, every project together; default 256, `0` =
    /// no cap.
    pub max_concurrent_execs: Option<u32>,
}

/// One token bucket of `[rate_limits]`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateSection {
    /// Tokens added per second.
    pub per_second: f64,
    /// Bucket size.
    pub burst: u32,
}

/// `[rate_limits]`: each key replaces its default; `enabled = false` turns them all off.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitsSection {
    /// Default true.
    pub enabled: Option<bool>,
    /// Requests per API key.
    pub per_key: Option<RateSection>,
    /// Requests per project.
    pub per_project: Option<RateSection>,
    /// Failed authentications per source address.
    pub auth_failures: Option<RateSection>,
}

/// `[reconciler]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcilerSection {
    /// Seconds between passes.
    pub interval_seconds: Option<u64>,
    /// How long an unconfirmed create stays unknown before it is given up as failed.
    pub grace_seconds: Option<u64>,
}

/// `[bridge]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeSection {
    /// Hosts (`host` or `host:port`) exempt from the address rules.
    #[serde(default)]
    pub allow: Vec<String>,
}

/// `[providers]`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProvidersSection {
    /// Enabled providers; default every provider compiled in.
    pub enabled: Option<Vec<String>>,
    /// `[providers.<id>]` tables, each read by its adapter's configuration type.
    #[serde(flatten)]
    pub each: BTreeMap<String, toml::Table>,
}

/// `[local]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalSection {
    /// Where sandboxes live; default `<data_dir>/sandboxes`.
    pub root: Option<PathBuf>,
    /// Whether sandboxes may reach the network.
    pub allow_network: Option<bool>,
    /// Memory of the whole sandbox, swap off (its cgroup), and address space per process, in
    /// MiB.
    pub memory_mib: Option<u64>,
    /// Processes of the whole sandbox (its cgroup's `pids.max`, and `RLIMIT_NPROC`).
    pub max_processes: Option<u64>,
    /// Size of each sandbox's own filesystem, in MiB, allocated in full at create; `0` puts
    /// sandboxes directly on the data volume (no quota).
    pub disk_mib: Option<u64>,
    /// Free space a create must leave on the data volume, in MiB.
    pub disk_reserve_mib: Option<u64>,
    /// The sandbox's CPU weight against other sandboxes (cgroup `cpu.weight`, 1–10000).
    pub cpu_weight: Option<u64>,
    /// A hard CPU cap per sandbox in thousandths of a core (cgroup `cpu.max`); none by default.
    pub cpu_max_millicores: Option<u64>,
    /// Disk reads per sandbox on its own filesystem, MiB/s (cgroup `io.max` / v1
    /// `blkio.throttle`); default 256, `0` = no limit.
    pub io_read_mib_per_second: Option<u64>,
    /// Disk writes per sandbox, MiB/s; default 128, `0` = no limit.
    pub io_write_mib_per_second: Option<u64>,
    /// Disk read operations per sandbox per second; default 4000, `0` = no limit.
    pub io_read_iops: Option<u64>,
    /// Disk write operations per sandbox per second; default 2000, `0` = no limit.
    pub io_write_iops: Option<u64>,
    /// Where the sandboxes' cgroups go, below the cgroup mount (e.g. a systemd unit's own
    /// group with `Delegate=yes`); default `corral` at the root, which needs a root server.
    pub cgroup_parent: Option<PathBuf>,
    /// Largest file a command may write, in MiB (`RLIMIT_FSIZE`).
    pub file_size_mib: Option<u64>,
    /// CPU seconds per command process (`RLIMIT_CPU`).
    pub cpu_seconds: Option<u64>,
    /// Commands running at once, each on a thread of its own; default 64, at least 1.
    pub exec_threads: Option<u64>,
    /// How long an exec waits for a free command thread before `provider_unavailable`;
    /// default 5.
    pub exec_queue_wait_seconds: Option<u64>,
}

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
    pub local: LocalSection,
    /// Request-rate limits.
    pub rate_limits: corral_service::limiter::RateLimits,
    /// Live-sandbox quotas.
    pub quotas: corral_service::limiter::Quotas,
    /// Caps on commands running at once.
    pub exec_concurrency: corral_service::limiter::ExecConcurrency,
    /// The control plane.
    pub control: ControlSettings,
}

/// Reading or resolving the configuration failed.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

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

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn env_u64(name: &str) -> Result<Option<u64>, ConfigError> {
    env(name)
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| ConfigError(format!("{name} must be a non-negative integer")))
        })
        .transpose()
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Reads the file (if any) and resolves everything.
pub fn load(file: Option<&Path>, cli: &Overrides) -> Result<Settings, ConfigError> {
    let fc = match file {
        None => FileConfig::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
            toml::from_str(&text)
                .map_err(|e| ConfigError(format!("invalid config {}: {e}", path.display())))?
        }
    };
    resolve(fc, cli)
}

/// Applies environment overrides and flags to a parsed file.
pub fn resolve(fc: FileConfig, cli: &Overrides) -> Result<Settings, ConfigError> {
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
    let enabled_names = match env("CORRAL_PROVIDERS") {
        Some(v) => Some(list(&v)),
        None => fc.providers.enabled.clone(),
    };
    let enabled = match enabled_names {
        None => crate::wiring::compiled_in(),
        Some(names) => names
            .iter()
            .map(|n| {
                let p: Provider = n
                    .parse()
                    .map_err(|e| ConfigError(format!("providers.enabled: {e}")))?;
                if !crate::wiring::compiled_in().contains(&p) {
                    return Err(ConfigError(format!(
                        "providers.enabled: provider `{p}` is not built into this binary"
                    )));
                }
                Ok(p)
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    let mut providers = fc.providers.each.clone();
    for p in Provider::ALL {
        let name = format!(
            "CORRAL_PROVIDER_{}_BASE_URL",
            p.as_str().to_ascii_uppercase()
        );
        if let Some(url) = env(&name) {
            providers
                .entry(p.as_str().to_owned())
                .or_default()
                .insert("base_url".into(), toml::Value::String(url));
        }
    }
    for key in providers.keys() {
        let known = key
            .parse::<Provider>()
            .is_ok_and(|p| p != Provider::Local && crate::wiring::compiled_in().contains(&p));
        if !known {
            return Err(ConfigError(format!(
                "unknown provider section [providers.{key}] (`local` is configured under [local])"
            )));
        }
    }
    let mut bridge_allow = fc.bridge.allow.clone();
    if let Some(v) = env("CORRAL_BRIDGE_ALLOW") {
        bridge_allow = list(&v);
    }
    let mut local = fc.local.clone();
    if let Some(v) = env("CORRAL_LOCAL_ALLOW_NETWORK") {
        local.allow_network = Some(matches!(v.trim(), "1" | "true" | "yes"));
    }
    let secs = Duration::from_secs;
    let rate_limits = rate_limits(&fc.rate_limits)?;
    let mut quotas = corral_service::limiter::Quotas {
        live_sandboxes: fc.limits.max_live_sandboxes_per_project,
        ..Default::default()
    };
    for (name, n) in &fc.limits.max_live_sandboxes_per_provider {
        let p: Provider = name
            .parse()
            .map_err(|e| ConfigError(format!("limits.max_live_sandboxes_per_provider: {e}")))?;
        quotas.live_sandboxes_per_provider.insert(p, *n);
    }
    if local.exec_threads == Some(0) {
        return Err(ConfigError("local.exec_threads must be at least 1".into()));
    }
    let standard = corral_service::limiter::ExecConcurrency::standard();
    // `0` switches a cap off.
    let cap = |v: Option<u32>, default: Option<u32>| match v {
        Some(0) => None,
        Some(n) => Some(n),
        None => default,
    };
    let exec_concurrency = corral_service::limiter::ExecConcurrency {
        per_project: cap(
            fc.limits.max_concurrent_execs_per_project,
            standard.per_project,
        ),
        total: cap(fc.limits.max_concurrent_execs, standard.total),
    };
    let listen = cli
        .listen
        .clone()
        .or(fc.listen.clone())
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let control = control(&fc.control, &listen)?;
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
        control,
    })
}

/// `[control]` over its defaults and the environment.
fn control(section: &ControlSection, listen: &str) -> Result<ControlSettings, ConfigError> {
    let public_url = match env("CORRAL_PUBLIC_URL").or(section.public_url.clone()) {
        Some(u) => u,
        // A wildcard listen address is no address a browser can use: name the loopback.
        None => format!("http://{}", listen.replace("0.0.0.0", "127.0.0.1")),
    };
    let parsed = url::Url::parse(&public_url)
        .map_err(|e| ConfigError(format!("control.public_url: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
        return Err(ConfigError(
            "control.public_url must be an http or https URL with a host".into(),
        ));
    }
    let defaults = corral_control::ControlConfig::default();
    let positive = |name: &str, v: Option<u64>, default: Duration| match v {
        None => Ok(default),
        Some(0) => Err(ConfigError(format!("control.{name} must be positive"))),
        Some(s) => Ok(Duration::from_secs(s)),
    };
    let mut smtp = section.smtp.clone();
    if let Some(smtp) = smtp.as_mut() {
        if let Some(password) = env("CORRAL_SMTP_PASSWORD") {
            smtp.password = Some(password);
        }
        let security = smtp.security.as_deref().unwrap_or("starttls");
        if !matches!(security, "starttls" | "tls" | "plain") {
            return Err(ConfigError(format!(
                "control.smtp.security must be starttls, tls or plain, not `{security}`"
            )));
        }
    }
    Ok(ControlSettings {
        public_url: public_url.trim_end_matches('/').to_owned(),
        session_idle: positive(
            "session_idle_seconds",
            section.session_idle_seconds,
            defaults.session_idle,
        )?,
        session_absolute: positive(
            "session_absolute_seconds",
            section.session_absolute_seconds,
            defaults.session_absolute,
        )?,
        email_webhook_secret: env("CORRAL_EMAIL_WEBHOOK_SECRET")
            .or(section.email_webhook_secret.clone())
            .map(corral_provider::SecretString::from),
        smtp,
    })
}

/// `[rate_limits]` over the standard limits.
fn rate_limits(
    section: &RateLimitsSection,
) -> Result<corral_service::limiter::RateLimits, ConfigError> {
    use corral_service::limiter::{Rate, RateLimits};
    if section.enabled == Some(false) {
        return Ok(RateLimits::default());
    }
    let rate = |name: &str, over: Option<RateSection>, default: Option<Rate>| match over {
        None => Ok(default),
        Some(r) if r.per_second > 0.0 && r.per_second.is_finite() && r.burst >= 1 => {
            Ok(Some(Rate {
                per_second: r.per_second,
                burst: r.burst,
            }))
        }
        Some(_) => Err(ConfigError(format!(
            "rate_limits.{name}: per_second must be positive and burst at least 1"
        ))),
    };
    let standard = RateLimits::standard();
    Ok(RateLimits {
        per_key: rate("per_key", section.per_key, standard.per_key)?,
        per_project: rate("per_project", section.per_project, standard.per_project)?,
        auth_failures: rate(
            "auth_failures",
            section.auth_failures,
            standard.auth_failures,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Settings, ConfigError> {
        let fc: FileConfig = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        resolve(fc, &Overrides::default())
    }

    #[test]
    fn defaults_run_the_embedded_default() {
        let s = parse("").unwrap();
        assert_eq!(s.listen, "127.0.0.1:8080");
        assert_eq!(s.data_dir, PathBuf::from(".corral"));
        assert_eq!(s.database_url, "sqlite://.corral/corral.db");
        assert_eq!(s.exec_deadline, Duration::from_secs(300));
        assert!(s.enabled.contains(&Provider::Local));
        assert_eq!(s.control.public_url, "http://127.0.0.1:8080");
        assert!(s.control.smtp.is_none() && s.control.email_webhook_secret.is_none());
    }

    #[test]
    fn control_section_is_read_and_checked() {
        let s = parse("listen = \"0.0.0.0:9\"").unwrap();
        assert_eq!(s.control.public_url, "http://127.0.0.1:9");
        let s = parse(
            "[control]\npublic_url = \"https://corral.example.com/\"\nsession_idle_seconds = 60\n[control.smtp]\nhost = \"127.0.0.1\"\nport = 2525\npassword = \"hunter2-hunter2\"\nfrom = \"c@example.com\"",
        )
        .unwrap();
        assert_eq!(s.control.public_url, "https://corral.example.com");
        assert_eq!(s.control.session_idle, Duration::from_secs(60));
        let smtp = s.control.smtp.unwrap();
        assert_eq!((smtp.host.as_str(), smtp.port), ("127.0.0.1", Some(2525)));
        assert!(!format!("{smtp:?}").contains("hunter2"));
        assert!(parse("[control]\npublic_url = \"ftp://x\"").is_err());
        assert!(parse("[control]\npublic_url = \"not a url\"").is_err());
        assert!(parse("[control]\nsession_idle_seconds = 0").is_err());
        assert!(parse("[control]\npublik_url = \"http://x\"").is_err());
        assert!(parse("[control.smtp]\nhost = \"h\"\nfrom = \"f@x\"\nsecurity = \"ssl\"").is_err());
    }

    #[test]
    fn flags_override_the_file() {
        let fc: FileConfig = toml::from_str("listen = \"0.0.0.0:1\"\ndata_dir = \"/a\"").unwrap();
        let s = resolve(
            fc,
            &Overrides {
                listen: Some("127.0.0.1:2".into()),
                data_dir: None,
                database_url: Some("postgres://db/corral".into()),
            },
        )
        .unwrap();
        assert_eq!(s.listen, "127.0.0.1:2");
        assert_eq!(s.data_dir, PathBuf::from("/a"));
        assert_eq!(s.database_url, "postgres://db/corral");
    }

    #[test]
    fn unknown_keys_providers_and_sections_are_refused() {
        assert!(parse("lisen = \"x\"").is_err());
        assert!(parse("[providers]\nenabled = [\"aws\"]").is_err());
        assert!(parse("[providers.aws]\nbase_url = \"http://x\"").is_err());
        assert!(parse("[providers.local]\nroot = \"/x\"").is_err());
        let s = parse("[providers]\nenabled = [\"local\", \"e2b\"]\n[providers.e2b]\nbase_url = \"http://127.0.0.1:9\"\n[bridge]\nallow = [\"b.example:443\"]\n[limits]\nexec_deadline_seconds = 5").unwrap();
        assert_eq!(s.enabled, [Provider::Local, Provider::E2b]);
        assert_eq!(
            s.providers["e2b"]["base_url"].as_str(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(s.bridge_allow, ["b.example:443"]);
        assert_eq!(s.exec_deadline, Duration::from_secs(5));
    }

    #[test]
    fn exec_caps_default_to_32_per_project_and_256_per_server_and_0_switches_one_off() {
        use corral_service::limiter::ExecConcurrency;
        let s = parse("").unwrap();
        assert_eq!(s.exec_concurrency, ExecConcurrency::standard());
        assert_eq!(
            (s.exec_concurrency.per_project, s.exec_concurrency.total),
            (Some(32), Some(256))
        );
        let s = parse("[limits]\nmax_concurrent_execs_per_project = 4\nmax_concurrent_execs = 0")
            .unwrap();
        assert_eq!(
            s.exec_concurrency,
            ExecConcurrency {
                per_project: Some(4),
                total: None
            }
        );
        assert!(parse("[limits]\nmax_concurrent_execs = -1").is_err());
        let s = parse("[local]\nexec_threads = 3\nexec_queue_wait_seconds = 1").unwrap();
        assert_eq!(
            (s.local.exec_threads, s.local.exec_queue_wait_seconds),
            (Some(3), Some(1))
        );
        assert!(parse("[local]\nexec_threads = 0").is_err());
    }
}
