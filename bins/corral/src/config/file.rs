//! The configuration file's schema, as written: one type per table, every key optional,
//! unknown keys refused. What a key means once resolved is `config::sections`' and the
//! crate docs'.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// `[http]`: the edge's connection caps, body deadline, trusted proxies and request log.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    /// Connections open at once, in total.
    pub max_connections: Option<usize>,
    /// Connections open at once from one client address.
    pub max_connections_per_address: Option<usize>,
    /// Seconds an unauthenticated route waits for its whole body.
    pub unauthenticated_body_seconds: Option<u64>,
    /// Addresses or CIDR blocks of the proxies in front of the server.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// Addresses or CIDR blocks whose connections are never shed (a health checker).
    #[serde(default)]
    pub priority_addresses: Vec<String>,
    /// Which ordinary requests get a log line: `off`, `sampled` (default) or `all`.
    pub request_log: Option<String>,
    /// `sampled` logs one request in this many; default 100.
    pub request_log_sample: Option<u64>,
    /// A request answered after this many milliseconds is always logged; default 5000.
    pub slow_request_ms: Option<u64>,
}

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
    /// `[http]`.
    #[serde(default)]
    pub http: HttpSection,
    /// Commands as durable jobs.
    #[serde(default)]
    pub commands: CommandsSection,
    /// Lifecycle events.
    #[serde(default)]
    pub events: EventsSection,
    /// Webhook delivery.
    #[serde(default)]
    pub webhooks: WebhooksSection,
    /// `[reaper]`.
    #[serde(default)]
    pub reaper: ReaperSection,
    /// `[e2b]`.
    #[serde(default)]
    pub e2b: E2bSection,
    /// Bridge URL guard.
    #[serde(default)]
    pub bridge: BridgeSection,
    /// Providers.
    #[serde(default)]
    pub providers: ProvidersSection,
    /// The local provider.
    #[serde(default)]
    pub local: corral_provider_local::LocalSettings,
    /// The control plane.
    #[serde(default)]
    pub control: ControlSection,
    /// `[mcp]`.
    #[serde(default)]
    pub mcp: McpSection,
}

/// `[mcp]`: the server's `/mcp` endpoint.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    /// Browser origins (`https://host[:port]`) allowed to call `/mcp` besides the public
    /// URL's own; a request with any other `Origin` is refused (403).
    pub allowed_origins: Option<Vec<String>>,
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
    /// Password hashes computed at once (each takes 19 MiB); default 2.
    pub password_hashing_threads: Option<u64>,
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

/// `[commands]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandsSection {
    /// Largest (and default) `timeoutSeconds`.
    pub max_timeout_seconds: Option<u64>,
    /// Seconds a replica holds a command's capture unless it renews it.
    pub lease_seconds: Option<u64>,
    /// MiB of output kept per command.
    pub max_output_mib_per_command: Option<u64>,
    /// MiB of output kept per project.
    pub max_output_mib_per_project: Option<u64>,
    /// Output events (stored chunks) kept per command; the oldest beyond it become a gap.
    pub max_output_events_per_command: Option<u64>,
    /// Hours an ended command stays readable.
    pub retention_hours: Option<u64>,
    /// Commands running at once per project (0: no cap).
    pub max_running_per_project: Option<u32>,
}

/// `[events]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsSection {
    /// Days an event stays readable.
    pub retention_days: Option<u64>,
}

/// `[webhooks]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhooksSection {
    /// Hosts (`host` or `host:port`) exempt from the address rules.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Attempts before a delivery is given up.
    pub attempts: Option<u32>,
    /// Seconds before the second attempt (doubled after each failure).
    pub first_backoff_seconds: Option<u64>,
    /// Seconds one attempt may take.
    pub timeout_seconds: Option<u64>,
    /// Deliveries in flight at once (per replica).
    pub concurrency: Option<u64>,
    /// Of those, to one endpoint.
    pub per_endpoint: Option<u64>,
    /// Of those, for one project.
    pub per_project: Option<u64>,
    /// Consecutive failures that open an endpoint's circuit.
    pub circuit_failures: Option<u64>,
    /// Seconds a circuit stays open the first time.
    pub circuit_open_seconds: Option<u64>,
}

/// `[reaper]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReaperSection {
    /// Whether passes run on a schedule.
    pub enabled: Option<bool>,
    /// Seconds between passes.
    pub interval_seconds: Option<u64>,
    /// Whether orphans are deleted at their provider.
    pub delete_orphans: Option<bool>,
    /// Seconds after its first sighting before an orphan may be deleted.
    pub grace_seconds: Option<u64>,
}

/// `[e2b]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct E2bSection {
    /// Whether `/e2b` answers.
    pub enabled: Option<bool>,
    /// Longest timeout a sandbox may be given, in seconds.
    pub max_timeout_seconds: Option<u64>,
    /// Template names and where their sandboxes are made (replacing the default `base`).
    pub templates: Option<std::collections::BTreeMap<String, E2bTemplateSection>>,
}

/// One `[e2b.templates]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct E2bTemplateSection {
    /// The provider's id.
    pub provider: String,
    /// The image (the provider's default when absent).
    pub image: Option<String>,
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
