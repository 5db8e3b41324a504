//! Each table of the file resolved on its own: defaults, environment overrides and checks,
//! one function per section, into the types the server's crates take.

use std::collections::BTreeMap;
use std::time::Duration;

use corral_domain::Provider;
use corral_web::request_log::{RequestLogConfig, RequestLogMode};

use super::env::{ConfigError, env, env_u64, list};
use super::file::*;

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

/// `[http]` over the defaults for a process allowed `nofile` descriptors: every value
/// positive, the caps below the limit.
pub fn http(
    section: &HttpSection,
    nofile: u64,
) -> Result<corral_web::edge::EdgeConfig, ConfigError> {
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
    let nets = |list: &[String], key: &str| {
        list.iter()
            .map(|p| corral_web::edge::parse_proxy(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ConfigError(format!("http.{key}: {e}")))
    };
    edge.trusted_proxies = nets(&section.trusted_proxies, "trusted_proxies")?;
    edge.priority_addresses = nets(&section.priority_addresses, "priority_addresses")?;
    edge.request_log = request_log(section)?;
    Ok(edge)
}

/// The request log of `[http]`, each key replaced by its variable when set
/// (`CORRAL_REQUEST_LOG`, `CORRAL_REQUEST_LOG_SAMPLE`, `CORRAL_SLOW_REQUEST_MS`).
pub(super) fn request_log(section: &HttpSection) -> Result<RequestLogConfig, ConfigError> {
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

/// `[mcp] allowed_origins` (or `CORRAL_MCP_ALLOWED_ORIGINS`) after the public URL's origin,
/// each an http(s) origin without path, normalized as browsers send it.
pub(super) fn mcp_allowed_origins(
    section: &McpSection,
    public_url: &str,
) -> Result<Vec<String>, ConfigError> {
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
pub(super) fn e2b(
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
pub(super) fn reaper(section: &ReaperSection) -> Result<corral_service::ReaperConfig, ConfigError> {
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
pub(super) fn webhooks(
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
        circuit_failures: positive("circuit_failures", section.circuit_failures)?.map_or(
            Ok(d.circuit_failures),
            |n| {
                u32::try_from(n)
                    .map_err(|_| ConfigError("webhooks.circuit_failures is too large".into()))
            },
        )?,
        circuit_open: positive("circuit_open_seconds", section.circuit_open_seconds)?
            .map_or(d.circuit_open, Duration::from_secs),
        ..d
    })
}

/// `[commands]` over its defaults: every value positive, except a cap of 0 (none).
pub(super) fn commands(
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
pub(super) fn control(
    section: &ControlSection,
    listen: &str,
) -> Result<ControlSettings, ConfigError> {
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
pub(super) fn rate_limits(
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

/// `[providers] enabled` (or `CORRAL_PROVIDERS`): the providers this server offers, each
/// built into this binary (`compiled_in`, also the default).
pub(super) fn enabled_providers(
    section: &ProvidersSection,
    compiled_in: &[Provider],
) -> Result<Vec<Provider>, ConfigError> {
    let enabled_names = match env("CORRAL_PROVIDERS") {
        Some(v) => Some(list(&v)),
        None => section.enabled.clone(),
    };
    Ok(match enabled_names {
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
    })
}

/// The `[providers.<id>]` tables, for the adapters' own configuration types, with each
/// `CORRAL_PROVIDER_<ID>_BASE_URL` over its `base_url`; a table of a provider this binary
/// does not carry (or of `local`) is refused.
pub(super) fn provider_tables(
    section: &ProvidersSection,
    compiled_in: &[Provider],
) -> Result<BTreeMap<String, toml::Table>, ConfigError> {
    let mut providers = section.each.clone();
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
    Ok(providers)
}

/// `[bridge] allow` (or `CORRAL_BRIDGE_ALLOW`).
pub(super) fn bridge_allow(section: &BridgeSection) -> Vec<String> {
    match env("CORRAL_BRIDGE_ALLOW") {
        Some(v) => list(&v),
        None => section.allow.clone(),
    }
}

/// `[local]`, checked ([`corral_provider_local::LocalSettings::check`]), the unguarded host
/// network refused (`allow_network`, or `CORRAL_LOCAL_ALLOW_NETWORK`).
pub(super) fn local(
    section: &corral_provider_local::LocalSettings,
) -> Result<corral_provider_local::LocalSettings, ConfigError> {
    let local = section.clone();
    let env_on =
        env("CORRAL_LOCAL_ALLOW_NETWORK").is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
    if local.allow_network == Some(true) || env_on {
        // A server is shared by its projects: the host's network namespace would give every
        // tenant's commands the host's loopback (the registry's database, this API).
        return Err(ConfigError(
            "local.allow_network (CORRAL_LOCAL_ALLOW_NETWORK) is not offered by the server: it \
             would put every tenant's commands in the host's network namespace, its loopback \
             included (the registry's database, Corral's own API). Use guarded networking \
             instead: [local] network = true (with network_allow for private ranges), and \
             \"network\": true on a create"
                .into(),
        ));
    }
    local.check().map_err(ConfigError)?;
    Ok(local)
}

/// `[limits]`' live-sandbox quotas, per project and per provider.
pub(super) fn quotas(
    section: &LimitsSection,
) -> Result<corral_service::limiter::Quotas, ConfigError> {
    let mut quotas = corral_service::limiter::Quotas {
        live_sandboxes: section.max_live_sandboxes_per_project,
        ..Default::default()
    };
    for (name, n) in &section.max_live_sandboxes_per_provider {
        let p: Provider = name
            .parse()
            .map_err(|e| ConfigError(format!("limits.max_live_sandboxes_per_provider: {e}")))?;
        quotas.live_sandboxes_per_provider.insert(p, *n);
    }
    Ok(quotas)
}

/// `[limits]`' caps on commands running at once (`0` switches one off).
pub(super) fn exec_concurrency(
    section: &LimitsSection,
) -> corral_service::limiter::ExecConcurrency {
    let standard = corral_service::limiter::ExecConcurrency::standard();
    // `0` switches a cap off.
    let cap = |v: Option<u32>, default: Option<u32>| match v {
        Some(0) => None,
        Some(n) => Some(n),
        None => default,
    };
    corral_service::limiter::ExecConcurrency {
        per_project: cap(
            section.max_concurrent_execs_per_project,
            standard.per_project,
        ),
        total: cap(section.max_concurrent_execs, standard.total),
    }
}

/// `[events] retention_days`.
pub(super) fn events_retention(section: &EventsSection) -> Result<Duration, ConfigError> {
    Ok(match section.retention_days {
        Some(0) => return Err(ConfigError("events.retention_days must be positive".into())),
        Some(d) => Duration::from_secs(d.saturating_mul(24 * 3600)),
        None => corral_service::ServiceConfig::default().events_retention,
    })
}
