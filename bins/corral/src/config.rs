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
//! [http]                         # the edge (docs/reliability.md); defaults from RLIMIT_NOFILE
//! max_connections = 512           # open at once; default half the descriptor limit (≥ 64 kept back)
//! max_connections_per_address = 32  # per client address (IPv6: per /64); default a sixteenth, ≥ 8
//! unauthenticated_body_seconds = 10 # sign-in and the email webhook: the whole body within this
//! trusted_proxies = ["10.0.0.0/8"]  # peers whose X-Forwarded-For names the client; default none
//! request_log = "sampled"         # a log line per request: "off", "sampled" (default) or "all";
//!                                 # 5xx answers and slow ones are logged whatever this says
//! request_log_sample = 100        # "sampled" logs one request in this many
//! slow_request_ms = 5000          # an answer this slow is always logged (at warn)
//!
//! [reconciler]
//! interval_seconds = 30
//! grace_seconds = 300
//!
//! [commands]                      # commands as durable jobs (docs/commands.md)
//! max_timeout_seconds = 86400     # largest (and default) timeoutSeconds of a command
//! lease_seconds = 15              # a replica's hold on a command's capture, renewed every third
//! max_output_mib_per_command = 16 # kept per command; the oldest output beyond it is dropped
//! max_output_mib_per_project = 256
//! max_output_events_per_command = 65536 # stored chunks kept per command (rows, not bytes)
//! retention_hours = 168           # how long an ended command stays readable
//! max_running_per_project = 100   # 0 = no cap
//!
//! [events]                        # lifecycle events (docs/operations.md)
//! retention_days = 30             # how long an event stays readable at GET /v1/events
//!
//! [webhooks]                      # delivery of events to webhook endpoints (docs/operations.md)
//! allow = ["hooks.internal:8443"] # hosts exempt from the address rules (as [bridge] allow)
//! attempts = 8                    # attempts before a delivery is dead
//! first_backoff_seconds = 5       # doubled after each failed attempt (with jitter), at most 1 h
//! timeout_seconds = 10            # deadline of one attempt
//! concurrency = 32                # deliveries in flight at once (per replica)
//! per_endpoint = 2                # of those, to one endpoint
//! per_project = 8                 # of those, for one project
//! circuit_failures = 5            # consecutive failures that open an endpoint's circuit
//! circuit_open_seconds = 30       # how long it stays open (doubled at each reopening, at most 1 h)
//!
//! [e2b]                           # the E2B-compatible front door under /e2b (docs/compat/e2b.md)
//! enabled = true                  # default true
//! max_timeout_seconds = 86400     # longest sandbox timeout a create or set-timeout may ask for
//! [e2b.templates]                 # E2B template names → provider and image; default base → local
//! base = { provider = "local" }
//! python = { provider = "daytona", image = "python:3.12" }
//!
//! [mcp]                           # the server's `/mcp` endpoint (docs/mcp.md)
//! allowed_origins = ["https://agent.example.com"]  # browser origins allowed besides the public URL's
//!
//! [reaper]                        # the orphan reaper (docs/operations.md)
//! enabled = true                  # scheduled passes (`corral reap` runs one by hand)
//! interval_seconds = 600          # between passes, plus up to a tenth of jitter
//! delete_orphans = false          # only report orphans unless set
//! grace_seconds = 3600            # an orphan is deleted only this long after it was first seen
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
//! password_hashing_threads = 2                 # argon2 at once (19 MiB each); default 2
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
//! network = false          # guarded networking for sandboxes that ask for it (pasta, from Debian's passt)
//! network_allow = ["10.1.0.0/16"]  # ranges those sandboxes may reach despite the guard
//! # dns_upstream = "1.1.1.1"       # their resolver (default: the host's first nameserver)
//! [local.images]                   # images a create may name (`image`); default none
//! tools = { dir = "/srv/corral/rootfs/tools" }          # a root filesystem directory
//! debian = { oci = "/srv/corral/oci/debian", tag = "12" }  # an OCI image layout, unpacked once
//! [local.capacity]                 # caps across sandboxes; default derived from the machine
//! disk_mib = 102400                # disk reserved by every sandbox's image together
//! memory_mib = 16384               # memory of every sandbox together (their parent cgroup)
//! max_processes = 100000
//! project_disk_mib = 25600         # the same, per project
//! project_memory_mib = 4096
//! project_max_processes = 25000
//! sandboxes_per_project = 32       # live sandboxes per project
//! ```
//!
//! Each `[providers.<id>]` table is read by that adapter's configuration type, which documents
//! its keys (`docs/providers/<id>.md`) and refuses unknown ones at start-up.
//!
//! Environment overrides: `CORRAL_PROVIDERS` (comma-separated), `CORRAL_PROVIDER_<ID>_BASE_URL`,
//! `CORRAL_EXEC_DEADLINE_SECONDS`, `CORRAL_CREATE_WAIT_SECONDS`, `CORRAL_BRIDGE_ALLOW`
//! (comma-separated), `CORRAL_DB_MAX_CONNECTIONS`, `CORRAL_LOCAL_ALLOW_NETWORK` (`true`/`false`),
//! `CORRAL_RECONCILE_INTERVAL_SECONDS`, `CORRAL_PUBLIC_URL`, `CORRAL_SMTP_PASSWORD`,
//! `CORRAL_EMAIL_WEBHOOK_SECRET` (the last two keep secrets out of the file),
//! `CORRAL_REQUEST_LOG`, `CORRAL_REQUEST_LOG_SAMPLE`, `CORRAL_SLOW_REQUEST_MS` (the request
//! log of `[http]`), `CORRAL_MCP_ALLOWED_ORIGINS` (comma-separated; replaces
//! `[mcp] allowed_origins`). Logs go to stderr, filtered by `CORRAL_LOG` (a
//! `tracing` filter such as `info` or `corral=debug`; default `info`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_domain::{Provider, limits};
use corral_web::request_log::{RequestLogConfig, RequestLogMode};
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
    /// Which ordinary requests get a log line: `off`, `sampled` (default) or `all`.
    pub request_log: Option<String>,
    /// `sampled` logs one request in this many; default 100.
    pub request_log_sample: Option<u64>,
    /// A request answered after this many milliseconds is always logged; default 5000.
    pub slow_request_ms: Option<u64>,
}

/// `[http]` over the defaults for a process allowed `nofile` descriptors: every value
/// positive, the caps below the limit.
fn http(section: &HttpSection, nofile: u64) -> Result<corral_web::edge::EdgeConfig, ConfigError> {
    let mut edge = corral_web::edge::EdgeConfig::for_descriptor_limit(nofile);
    if let Some(n) = section.max_connections {
        if n == 0 || n as u64 >= nofile {
            return Err(ConfigError(format!(
                "http.max_connections must be between 1 and the descriptor limit ({nofile}), less a reserve"
            )));
        }
        edge.max_connections = n;
        edge.max_connections_per_address = edge.max_connections_per_address.min(n);
    }
    if let Some(n) = section.max_connections_per_address {
        if n == 0 || n > edge.max_connections {
            return Err(ConfigError(
                "http.max_connections_per_address must be between 1 and http.max_connections"
                    .into(),
            ));
        }
        edge.max_connections_per_address = n;
    }
    if let Some(s) = section.unauthenticated_body_seconds {
        if s == 0 {
            return Err(ConfigError(
                "http.unauthenticated_body_seconds must be at least 1".into(),
            ));
        }
        edge.unauthenticated_body = Duration::from_secs(s);
    }
    edge.trusted_proxies = section
        .trusted_proxies
        .iter()
        .map(|p| corral_web::edge::parse_proxy(p))
        .collect::<Result<_, _>>()
        .map_err(|e| ConfigError(format!("http.trusted_proxies: {e}")))?;
    edge.request_log = request_log(section)?;
    Ok(edge)
}

/// The request log of `[http]`, each key replaced by its variable when set
/// (`CORRAL_REQUEST_LOG`, `CORRAL_REQUEST_LOG_SAMPLE`, `CORRAL_SLOW_REQUEST_MS`).
fn request_log(section: &HttpSection) -> Result<RequestLogConfig, ConfigError> {
    let mut config = RequestLogConfig::default();
    if let Some(mode) = env("CORRAL_REQUEST_LOG").or(section.request_log.clone()) {
        config.mode = mode
            .parse::<RequestLogMode>()
            .map_err(|e| ConfigError(format!("http.request_log: {e}")))?;
    }
    match env_u64("CORRAL_REQUEST_LOG_SAMPLE")?.or(section.request_log_sample) {
        Some(0) => {
            return Err(ConfigError(
                "http.request_log_sample must be at least 1 (1 logs every request)".into(),
            ));
        }
        Some(n) => config.sample_one_in = n,
        None => {}
    }
    match env_u64("CORRAL_SLOW_REQUEST_MS")?.or(section.slow_request_ms) {
        Some(0) => {
            return Err(ConfigError(
                "http.slow_request_ms must be at least 1".into(),
            ));
        }
        Some(ms) => config.slow = Duration::from_millis(ms),
        None => {}
    }
    Ok(config)
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
    pub local: LocalSection,
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
    /// Password hashes computed at once.
    pub password_hashing_threads: usize,
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
    /// Guarded networking for sandboxes that ask for it; default off.
    pub network: Option<bool>,
    /// Ranges (`a.b.c.d/n`) sandboxes with a network may reach despite the guard.
    pub network_allow: Option<Vec<String>>,
    /// The resolver their DNS queries are relayed to (an IPv4 address); default the host's.
    pub dns_upstream: Option<String>,
    /// Images a create may name.
    pub images: Option<BTreeMap<String, LocalImage>>,
    /// Caps across sandboxes; each default is derived from the machine.
    pub capacity: Option<LocalCapacitySection>,
}

/// `[local.images] <name> = { dir = … }` or `{ oci = …, tag = … }`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LocalImage {
    /// A root filesystem directory.
    pub dir: Option<PathBuf>,
    /// An OCI image layout directory.
    pub oci: Option<PathBuf>,
    /// The tag (`org.opencontainers.image.ref.name`) in the layout, when it holds several.
    pub tag: Option<String>,
}

/// `[local.capacity]`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LocalCapacitySection {
    /// Disk reserved by every sandbox's image together, MiB.
    pub disk_mib: Option<u64>,
    /// Memory of every sandbox together, MiB.
    pub memory_mib: Option<u64>,
    /// Processes of every sandbox together.
    pub max_processes: Option<u64>,
    /// Disk reserved by one project's sandboxes, MiB.
    pub project_disk_mib: Option<u64>,
    /// Memory of one project's sandboxes, MiB.
    pub project_memory_mib: Option<u64>,
    /// Processes of one project's sandboxes.
    pub project_max_processes: Option<u64>,
    /// Live sandboxes of one project.
    pub sandboxes_per_project: Option<u64>,
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
    let enabled_names = match env("CORRAL_PROVIDERS") {
        Some(v) => Some(list(&v)),
        None => fc.providers.enabled.clone(),
    };
    let enabled = match enabled_names {
        None => compiled_in.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| {
                let p: Provider = n
                    .parse()
                    .map_err(|e| ConfigError(format!("providers.enabled: {e}")))?;
                if !compiled_in.contains(&p) {
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
            .is_ok_and(|p| p != Provider::Local && compiled_in.contains(&p));
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
    for (name, image) in local.images.iter().flatten() {
        if image.dir.is_some() == image.oci.is_some() {
            return Err(ConfigError(format!(
                "local.images.{name} needs exactly one of `dir` and `oci`"
            )));
        }
        if image.dir.is_some() && image.tag.is_some() {
            return Err(ConfigError(format!(
                "local.images.{name}: `tag` goes with `oci`"
            )));
        }
    }
    for range in local.network_allow.iter().flatten() {
        range
            .parse::<corral_provider_local::Ipv4Net>()
            .map_err(|e| ConfigError(format!("local.network_allow: {e}")))?;
    }
    if let Some(dns) = &local.dns_upstream {
        dns.parse::<std::net::Ipv4Addr>().map_err(|_| {
            ConfigError(format!("local.dns_upstream `{dns}` is not an IPv4 address"))
        })?;
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
    let commands = commands(&fc.commands)?;
    let events_retention = match fc.events.retention_days {
        Some(0) => return Err(ConfigError("events.retention_days must be positive".into())),
        Some(d) => Duration::from_secs(d.saturating_mul(24 * 3600)),
        None => corral_service::ServiceConfig::default().events_retention,
    };
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

/// `[mcp] allowed_origins` (or `CORRAL_MCP_ALLOWED_ORIGINS`) after the public URL's origin,
/// each an http(s) origin without path, normalized as browsers send it.
fn mcp_allowed_origins(section: &McpSection, public_url: &str) -> Result<Vec<String>, ConfigError> {
    let configured = match env("CORRAL_MCP_ALLOWED_ORIGINS") {
        Some(v) => list(&v),
        None => section.allowed_origins.clone().unwrap_or_default(),
    };
    let mut origins = Vec::new();
    for (name, value) in std::iter::once(("control.public_url", public_url)).chain(
        configured
            .iter()
            .map(|o| ("mcp.allowed_origins", o.as_str())),
    ) {
        let origin = url::Url::parse(value)
            .ok()
            .filter(|u| {
                matches!(u.scheme(), "http" | "https")
                    && u.has_host()
                    && (name == "control.public_url"
                        || (matches!(u.path(), "" | "/") && u.query().is_none()))
            })
            .map(|u| u.origin().ascii_serialization())
            .ok_or_else(|| {
                ConfigError(format!(
                    "{name}: `{value}` is not an http or https origin (scheme://host[:port])"
                ))
            })?;
        if !origins.contains(&origin) {
            origins.push(origin);
        }
    }
    Ok(origins)
}

/// `[e2b]` over its defaults: templates name enabled providers; a positive timeout cap.
fn e2b(
    section: &E2bSection,
    enabled: &[corral_domain::Provider],
) -> Result<Option<corral_e2b::E2bConfig>, ConfigError> {
    if section.enabled == Some(false) {
        return Ok(None);
    }
    let mut config = corral_e2b::E2bConfig::default();
    match section.max_timeout_seconds {
        Some(0) => {
            return Err(ConfigError(
                "e2b.max_timeout_seconds must be positive".into(),
            ));
        }
        Some(n) => config.max_timeout_seconds = n,
        None => {}
    }
    if let Some(templates) = &section.templates {
        config.templates.clear();
        for (name, t) in templates {
            let provider: corral_domain::Provider = t.provider.parse().map_err(|_| {
                ConfigError(format!(
                    "e2b.templates.{name}: unknown provider `{}`",
                    t.provider
                ))
            })?;
            if !enabled.contains(&provider) {
                return Err(ConfigError(format!(
                    "e2b.templates.{name}: provider `{provider}` is not enabled"
                )));
            }
            config.templates.insert(
                name.clone(),
                corral_e2b::Template {
                    provider,
                    image: t.image.clone(),
                },
            );
        }
    }
    Ok(Some(config))
}

/// `[reaper]` over its defaults: a positive interval.
fn reaper(section: &ReaperSection) -> Result<corral_service::ReaperConfig, ConfigError> {
    let d = corral_service::ReaperConfig::default();
    Ok(corral_service::ReaperConfig {
        enabled: section.enabled.unwrap_or(d.enabled),
        interval: match section.interval_seconds {
            Some(0) => {
                return Err(ConfigError(
                    "reaper.interval_seconds must be positive".into(),
                ));
            }
            Some(n) => Duration::from_secs(n),
            None => d.interval,
        },
        delete_orphans: section.delete_orphans.unwrap_or(d.delete_orphans),
        grace: section.grace_seconds.map_or(d.grace, Duration::from_secs),
    })
}

/// `[webhooks]` over its defaults: every number positive; `CORRAL_WEBHOOKS_ALLOW` (a list)
/// replaces `allow`.
fn webhooks(
    section: &WebhooksSection,
) -> Result<corral_service::webhooks::WebhooksConfig, ConfigError> {
    let d = corral_service::webhooks::WebhooksConfig::default();
    let positive = |name: &str, v: Option<u64>| match v {
        Some(0) => Err(ConfigError(format!("webhooks.{name} must be positive"))),
        other => Ok(other),
    };
    let count = |name: &str, v: Option<u64>, default: usize| {
        positive(name, v)?.map_or(Ok(default), |n| {
            usize::try_from(n).map_err(|_| ConfigError(format!("webhooks.{name} is too large")))
        })
    };
    let allow = env("CORRAL_WEBHOOKS_ALLOW").map_or_else(|| section.allow.clone(), |v| list(&v));
    Ok(corral_service::webhooks::WebhooksConfig {
        allow,
        attempts: match section.attempts {
            Some(0) => return Err(ConfigError("webhooks.attempts must be positive".into())),
            Some(n) => n,
            None => d.attempts,
        },
        first_backoff: positive("first_backoff_seconds", section.first_backoff_seconds)?
            .map_or(d.first_backoff, Duration::from_secs),
        timeout: positive("timeout_seconds", section.timeout_seconds)?
            .map_or(d.timeout, Duration::from_secs),
        concurrency: count("concurrency", section.concurrency, d.concurrency)?,
        per_endpoint: count("per_endpoint", section.per_endpoint, d.per_endpoint)?,
        per_project: count("per_project", section.per_project, d.per_project)?,
        circuit_failures: positive("circuit_failures", section.circuit_failures)?
            .map_or(Ok(d.circuit_failures), |n| {
                u32::try_from(n)
                    .map_err(|_| ConfigError("webhooks.circuit_failures is too large".into()))
            })?,
        circuit_open: positive("circuit_open_seconds", section.circuit_open_seconds)?
            .map_or(d.circuit_open, Duration::from_secs),
        ..d
    })
}

/// `[commands]` over its defaults: every value positive, except a cap of 0 (none).
fn commands(
    section: &CommandsSection,
) -> Result<corral_service::commands::CommandsConfig, ConfigError> {
    let d = corral_service::commands::CommandsConfig::default();
    let positive = |name: &str, v: Option<u64>| match v {
        Some(0) => Err(ConfigError(format!("commands.{name} must be positive"))),
        other => Ok(other),
    };
    const MIB: u64 = 1024 * 1024;
    let lease = positive("lease_seconds", section.lease_seconds)?;
    Ok(corral_service::commands::CommandsConfig {
        max_timeout: positive("max_timeout_seconds", section.max_timeout_seconds)?
            .map_or(d.max_timeout, Duration::from_secs),
        lease: lease.map_or(d.lease, Duration::from_secs),
        max_output_bytes_per_command: positive(
            "max_output_mib_per_command",
            section.max_output_mib_per_command,
        )?
        .map_or(d.max_output_bytes_per_command, |m| m.saturating_mul(MIB)),
        max_output_bytes_per_project: positive(
            "max_output_mib_per_project",
            section.max_output_mib_per_project,
        )?
        .map_or(d.max_output_bytes_per_project, |m| m.saturating_mul(MIB)),
        max_output_events_per_command: positive(
            "max_output_events_per_command",
            section.max_output_events_per_command,
        )?
        .map_or(d.max_output_events_per_command, |n| n.max(16)),
        retention: positive("retention_hours", section.retention_hours)?
            .map_or(d.retention, |h| Duration::from_secs(h.saturating_mul(3600))),
        max_live_per_project: match section.max_running_per_project {
            None => d.max_live_per_project,
            Some(0) => None,
            Some(n) => Some(n),
        },
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
        password_hashing_threads: match section.password_hashing_threads {
            None => defaults.hashing.threads,
            Some(n @ 1..=64) => n as usize,
            Some(_) => {
                return Err(ConfigError(
                    "control.password_hashing_threads must be from 1 to 64".into(),
                ));
            }
        },
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
        resolve(fc, &Overrides::default(), &Provider::ALL)
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
    fn mcp_origins_start_with_the_public_urls_and_are_checked() {
        let s = parse("").unwrap();
        assert_eq!(s.mcp_allowed_origins, ["http://127.0.0.1:8080"]);
        let s = parse(
            "[control]\npublic_url = \"https://Corral.example.com:443/x\"\n[mcp]\nallowed_origins = [\"http://localhost:6274\", \"https://corral.example.com\"]",
        )
        .unwrap();
        assert_eq!(
            s.mcp_allowed_origins,
            ["https://corral.example.com", "http://localhost:6274"]
        );
        assert!(parse("[mcp]\nallowed_origins = [\"https://a.example/path\"]").is_err());
        assert!(parse("[mcp]\nallowed_origins = [\"*\"]").is_err());
        assert!(parse("[mcp]\nallowed = []").is_err());
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
        assert_eq!(s.control.password_hashing_threads, 2);
        let threads = parse("[control]\npassword_hashing_threads = 4").unwrap();
        assert_eq!(threads.control.password_hashing_threads, 4);
        assert!(parse("[control]\npassword_hashing_threads = 0").is_err());
        assert!(parse("[control]\npublik_url = \"http://x\"").is_err());
        assert!(parse("[control.smtp]\nhost = \"h\"\nfrom = \"f@x\"\nsecurity = \"ssl\"").is_err());
    }

    #[test]
    fn http_section_defaults_from_the_descriptor_limit_and_is_checked() {
        let at = |text: &str, nofile| http(&toml::from_str(text).unwrap(), nofile);
        let d = at("", 1024).unwrap();
        assert_eq!(
            (d.max_connections, d.max_connections_per_address),
            (512, 32)
        );
        assert_eq!(d.unauthenticated_body, Duration::from_secs(10));
        assert!(d.trusted_proxies.is_empty());
        let c = at(
            "max_connections = 100
unauthenticated_body_seconds = 3
trusted_proxies = [\"10.0.0.0/8\", \"::1\"]",
            1024,
        )
        .unwrap();
        assert_eq!(
            (c.max_connections, c.max_connections_per_address),
            (100, 32)
        );
        assert_eq!(c.unauthenticated_body, Duration::from_secs(3));
        assert_eq!(c.trusted_proxies.len(), 2);
        assert_eq!(
            at("max_connections = 10", 1024)
                .unwrap()
                .max_connections_per_address,
            10
        );
        for bad in [
            "max_connections = 1024",
            "max_connections = 0",
            "max_connections = 10\nmax_connections_per_address = 11",
            "unauthenticated_body_seconds = 0",
            "trusted_proxies = [\"lb.internal\"]",
        ] {
            assert!(at(bad, 1024).is_err(), "{bad}");
        }
        assert!(
            parse("[http]\nmax_connection = 5").is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn request_log_defaults_to_sampled_and_its_keys_are_checked() {
        let at = |text: &str| http(&toml::from_str(text).unwrap(), 1024);
        let d = at("").unwrap().request_log;
        assert_eq!(d, RequestLogConfig::default());
        assert_eq!(
            (d.mode, d.sample_one_in, d.slow),
            (RequestLogMode::Sampled, 100, Duration::from_secs(5))
        );
        let c = at("request_log = \"all\"\nrequest_log_sample = 7\nslow_request_ms = 250")
            .unwrap()
            .request_log;
        assert_eq!(
            (c.mode, c.sample_one_in, c.slow),
            (RequestLogMode::All, 7, Duration::from_millis(250))
        );
        assert_eq!(
            at("request_log = \"off\"").unwrap().request_log.mode,
            RequestLogMode::Off
        );
        for bad in [
            "request_log = \"every\"",
            "request_log_sample = 0",
            "slow_request_ms = 0",
        ] {
            assert!(at(bad).is_err(), "{bad}");
        }
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
            &Provider::ALL,
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
    fn only_the_providers_built_in_may_be_enabled_or_configured_and_they_are_the_default() {
        let built_in = [Provider::Local, Provider::Morph];
        let resolve_with = |text: &str| {
            let fc: FileConfig = toml::from_str(text).unwrap();
            resolve(fc, &Overrides::default(), &built_in)
        };
        assert_eq!(resolve_with("").unwrap().enabled, built_in);
        let err = resolve_with("[providers]\nenabled = [\"e2b\"]").unwrap_err();
        assert!(err.0.contains("not built into this binary"), "{err}");
        assert!(resolve_with("[providers.e2b]\nbase_url = \"http://x\"").is_err());
        assert!(resolve_with("[providers.morph]\nbase_url = \"http://x\"").is_ok());
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

    #[test]
    fn local_images_networking_and_capacity_are_read_and_checked() {
        let s = parse(
            "[local]\nnetwork = true\nnetwork_allow = [\"10.1.0.0/16\"]\ndns_upstream = \"1.1.1.1\"\n\
             [local.images]\ntools = { dir = \"/srv/tools\" }\ndebian = { oci = \"/srv/oci\", tag = \"12\" }\n\
             [local.capacity]\nsandboxes_per_project = 4\nproject_memory_mib = 2048",
        )
        .unwrap();
        assert_eq!(s.local.network, Some(true));
        let images = s.local.images.unwrap();
        assert_eq!(images["debian"].tag.as_deref(), Some("12"));
        assert_eq!(s.local.capacity.unwrap().sandboxes_per_project, Some(4));
        assert!(parse("[local.images]\nx = { dir = \"/a\", oci = \"/b\" }").is_err());
        assert!(parse("[local.images]\nx = {}").is_err());
        assert!(parse("[local]\nnetwork_allow = [\"10.1.0.0/33\"]").is_err());
        assert!(parse("[local]\ndns_upstream = \"resolver\"").is_err());
        assert!(parse("[local.capacity]\nunknown = 1").is_err());
    }
}
