//! The server, composed: the registry and idempotency store over the configured database, the
//! sandbox use cases, the control plane beside them, and the web edge (`corral-web`) with the
//! console (`corral-console`) mounted into it. `serve` and the tests build the server here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use corral_domain::Provider;
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::{SandboxProvider, SecretString};
use corral_registry::{Database, DatabaseConfig, MasterKey, Registry, RegistryError};
use corral_service::{Service, ServiceConfig};
use corral_web::listen::Bound;
use corral_web::{AppState, BuildInfo};
use snafu::{ResultExt as _, Snafu};

use crate::config::Settings;

/// Why the server could not be put together.
#[derive(Debug, Snafu)]
pub enum ComposeError {
    /// The data directory could not be created.
    #[snafu(display("cannot create {}: {source}", path.display()))]
    CreateDataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The data directory's mode could not be read.
    #[snafu(display("cannot read {}: {source}", path.display()))]
    ReadDataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The data directory could not be narrowed to its owner.
    #[snafu(display("cannot restrict {} to mode 0700: {source}", path.display()))]
    RestrictDataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The master key or the database could not be opened.
    #[snafu(display("{source}"), context(false))]
    Registry {
        /// Why.
        source: RegistryError,
    },
    /// `[control.smtp]` does not make a mailer.
    #[snafu(display("[control.smtp]: {source}"))]
    Smtp {
        /// Why.
        source: corral_control::MailError,
    },
}

/// The whole application, with the console mounted beside the API.
pub fn app(
    state: AppState,
) -> actix_web::App<
    impl actix_web::dev::ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    corral_web::app(state, corral_console::configure)
}

/// Binds `listen` and builds the HTTP server for [`app`] (see `corral_web::listen::bind`),
/// under the edge's limits `http`, `/mcp` accepting the browser origins `mcp_origins`.
pub fn bind(
    listen: &str,
    workers: usize,
    state: AppState,
    http: corral_web::edge::EdgeConfig,
    mcp_origins: &[String],
) -> std::io::Result<Bound> {
    let edge = corral_web::edge::Edge::new(http);
    let mcp = corral_web::mcp_origin::McpOrigins::new(mcp_origins);
    corral_web::listen::bind(listen, workers, state, corral_console::configure, edge, mcp)
}

/// This binary's provenance (its build script sets the commit and the time).
pub fn build_info() -> BuildInfo {
    BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        git_commit: option_env!("CORRAL_GIT_COMMIT"),
        build_time: option_env!("CORRAL_BUILD_TIME"),
    }
}

/// The registry and the idempotency store over the configured database (migrated).
pub async fn open_registry(
    settings: &Settings,
) -> Result<(Registry, IdempotencyStore), ComposeError> {
    create_private_dir(&settings.data_dir)?;
    let key = MasterKey::load_or_create(&settings.data_dir.join("master.key"))?;
    let mut db_config = DatabaseConfig::new(settings.database_url.clone());
    db_config.max_connections = settings.max_connections as usize;
    db_config.wait_timeout = settings.acquire_timeout;
    db_config.create_timeout = settings.connect_timeout;
    db_config.recycle_timeout = settings.connect_timeout;
    db_config.query_timeout = settings.query_timeout;
    let db = Database::connect(db_config).await?;
    let store = IdempotencyStore::new(db.clone(), IdempotencyConfig::default());
    Ok((Registry::new(db, key), store))
}

fn create_private_dir(dir: &Path) -> Result<(), ComposeError> {
    if dir.exists() {
        return restrict_dir(dir);
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .context(CreateDataDirSnafu { path: dir })
}

/// Narrows an existing data directory to the server's user (it holds the master key and the
/// SQLite database); an operator's wider mode from an older install is corrected with a warning.
fn restrict_dir(dir: &Path) -> Result<(), ComposeError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let meta = std::fs::metadata(dir).context(ReadDataDirSnafu { path: dir })?;
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .context(RestrictDataDirSnafu { path: dir })?;
            tracing::warn!(dir = %dir.display(), "restricted the data directory to mode 0700");
        }
    }
    Ok(())
}

/// Builds the service from settings and providers (used by `serve` and by tests).
pub fn service(
    settings: &Settings,
    providers: BTreeMap<Provider, Arc<dyn SandboxProvider>>,
    registry: Registry,
    store: IdempotencyStore,
) -> Service {
    Service::new(
        providers,
        registry,
        store,
        ServiceConfig {
            exec_deadline: settings.exec_deadline,
            create_wait: settings.create_wait,
            provider_call_timeout: settings.provider_call_timeout,
            bridge_allow: settings.bridge_allow.clone(),
            reconcile_grace: settings.reconcile_grace,
            rate_limits: settings.rate_limits.clone(),
            quotas: settings.quotas.clone(),
            exec_concurrency: settings.exec_concurrency,
            commands: settings.commands.clone(),
            events_retention: settings.events_retention,
            webhooks: settings.webhooks.clone(),
            reaper: settings.reaper.clone(),
            streams_per_key: corral_service::streams::DEFAULT_STREAMS_PER_KEY,
        },
    )
}

/// Builds the control plane beside `service`, over the same database and registry, with the
/// SMTP mailer when `[control.smtp]` is set (else mail goes to the log). Used by `serve` and
/// by tests.
pub fn control(
    settings: &Settings,
    registry: Registry,
    service: Service,
) -> Result<corral_control::Control, ComposeError> {
    use corral_control::{SmtpConfig, SmtpMailer, SmtpSecurity};
    let c = &settings.control;
    let config = corral_control::ControlConfig {
        public_url: c.public_url.clone(),
        session_idle: c.session_idle,
        session_absolute: c.session_absolute,
        email_webhook_secret: c.email_webhook_secret.clone(),
        hashing: corral_control::HashingConfig {
            threads: c.password_hashing_threads,
            ..corral_control::HashingConfig::default()
        },
        ..corral_control::ControlConfig::default()
    };
    let store = corral_control_store::ControlStore::new(registry.database().clone());
    let control = corral_control::Control::new(store, registry, service, config);
    let Some(smtp) = &c.smtp else {
        tracing::info!("no [control.smtp]: mail, sign-in links included, is written to the log");
        return Ok(control);
    };
    let security = match smtp.security.as_deref() {
        Some("plain") => SmtpSecurity::Plain,
        Some("tls") => SmtpSecurity::Tls,
        _ => SmtpSecurity::StartTls,
    };
    let mailer = SmtpMailer::new(&SmtpConfig {
        host: smtp.host.clone(),
        port: smtp.port.unwrap_or(587),
        security,
        username: smtp.username.clone(),
        password: smtp.password.clone().map(SecretString::from),
        from: smtp.from.clone(),
        timeout: std::time::Duration::from_secs(30),
    })
    .context(SmtpSnafu)?;
    Ok(control.with_mailer(Arc::new(mailer)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn an_existing_data_directory_with_a_wider_mode_is_narrowed_to_the_owner() {
        use std::os::unix::fs::PermissionsExt as _;
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let fresh = parent.path().join("fresh");
        create_private_dir(&fresh).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }
}
