//! What each subcommand does.
#![allow(clippy::print_stdout)] // A command-line tool answers on stdout.

use std::collections::BTreeMap;
use std::io::{BufRead as _, Write as _};
use std::process::ExitCode;
use std::sync::Arc;

use corral_domain::{Provider, ProviderContext};
use corral_provider::{ExposeSecret as _, SecretString};
use corral_registry::{Backend, ProfileInput, Project, ProjectId, Registry};
use corral_web::AppState;

use crate::cli::{
    Cli, Command, E2bTemplateCommand, KeyCommand, LegalCommand, ProfileCommand, ProjectCommand,
    Storage, UserCommand,
};
use crate::config::{self, Overrides, Settings};
use crate::server::{self, open_registry};

/// A failed command: the message printed on stderr.
#[derive(Debug)]
pub struct CommandError(pub String);

impl<E: std::fmt::Display> From<E> for CommandError {
    fn from(e: E) -> Self {
        CommandError(e.to_string())
    }
}

type Outcome = Result<(), CommandError>;

/// Runs one command line.
pub fn run(cli: Cli) -> ExitCode {
    // The client subcommands log nothing: their stderr is the command's.
    if !matches!(cli.command, Command::Client(_)) {
        init_tracing();
    }
    let result = match cli.command {
        Command::Openapi => {
            print!(
                "{}",
                corral_web::openapi::document_json(&crate::wiring::compiled_in_capabilities())
            );
            Ok(())
        }
        Command::Serve { listen, storage } => block_on(serve(listen, storage)),
        Command::Migrate { storage } => block_on(migrate(storage)),
        Command::Reap {
            dry_run,
            json,
            storage,
        } => block_on(reap(dry_run, json, storage)),
        Command::Project { command } => block_on(project(command)),
        Command::Key { command } => block_on(key(command)),
        Command::Profile { command } => block_on(profile(command)),
        Command::E2bTemplate { command } => block_on(e2b_template(command)),
        Command::User { command } => block_on(user(command)),
        Command::Legal { command } => block_on(legal(command)),
        Command::Mcp(args) => block_on(async { args.serve().await.map_err(CommandError) }),
        // A client of a server over HTTP: its own runtime, exit codes and messages.
        Command::Client(command) => return corral_cli::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CommandError(message)) => {
            eprintln!("corral: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr: human-readable, or one JSON object per line with `CORRAL_LOG_FORMAT=json`.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CORRAL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = match std::env::var("CORRAL_LOG_FORMAT").as_deref() {
        Ok("json") => builder.json().try_init(),
        _ => builder.try_init(),
    };
}

fn block_on(fut: impl Future<Output = Outcome>) -> Outcome {
    actix_web::rt::System::new().block_on(fut)
}

fn settings(storage: &Storage, listen: Option<String>) -> Result<Settings, CommandError> {
    Ok(config::load(
        storage.config.as_deref(),
        &Overrides {
            listen,
            data_dir: storage.data_dir.clone(),
            database_url: storage.database_url.clone(),
        },
        &crate::wiring::compiled_in(),
    )?)
}

async fn serve(listen: Option<String>, storage: Storage) -> Outcome {
    let settings = settings(&storage, listen)?;
    let (registry, store) = open_registry(&settings).await?;
    if registry.database().backend() == Backend::Sqlite
        && registry.list_projects().await?.is_empty()
    {
        let project = registry
            .create_project(corral_control::DEFAULT_PROJECT)
            .await?;
        let issued = registry.issue_api_key(project.id).await?;
        print_first_key(&settings, &project, issued.key.expose_secret());
    }
    let providers = crate::wiring::build(&settings).map_err(CommandError)?;
    let names: Vec<&str> = providers.keys().map(|p| p.as_str()).collect();
    tracing::info!(providers = ?names, "providers configured");
    let service = server::service(&settings, providers, registry.clone(), store);
    let _reconciler = service.spawn_reconciler(settings.reconcile_interval);
    // Takes over commands whose capture's owner died (or that ran when this process last
    // stopped), at once and then every few seconds.
    let _captures = service.spawn_command_supervisor(COMMAND_SUPERVISOR_INTERVAL);
    // On PostgreSQL, wakes readers here of commands other replicas capture (LISTEN/NOTIFY).
    let _progress = service.spawn_progress_listener();
    // Stops sandboxes idle past their `idleStopSeconds` and settles snapshots still being
    // made, every few seconds.
    let _lifecycle = service.spawn_lifecycle_sweeper(LIFECYCLE_SWEEP_INTERVAL);
    // Delivers due webhook deliveries (the outbox in the database), every second.
    let _webhooks = service.spawn_webhook_dispatcher(std::time::Duration::from_secs(1));
    let control = server::control(&settings, registry, service.clone())?;
    // Orphan-reaper passes on a schedule, one replica at a time (a lease in the database),
    // their findings in the audit log.
    let auditor = control.clone();
    let _reaper = actix_web::rt::spawn(service.clone().run_reaper(move |report| {
        let auditor = auditor.clone();
        async move {
            if let Err(e) = auditor.audit_reap(&report).await {
                tracing::warn!(error = %e, "reaper: cannot record findings in the audit log");
            }
        }
    }));
    let _deletions = control.spawn_deletion_worker(settings.reconcile_interval);
    // The E2B front door, and its sweeper ending door sandboxes past their E2B timeout.
    let e2b = settings
        .e2b
        .clone()
        .map(|config| corral_e2b::FrontDoor::new(service.clone(), config));
    let _e2b_sweeper = e2b.clone().map(|front| {
        actix_web::rt::spawn(async move {
            let mut tick = actix_web::rt::time::interval(E2B_SWEEP_INTERVAL);
            loop {
                tick.tick().await;
                if let Err(e) = front.sweep_once(100).await {
                    tracing::warn!(error = %e, "e2b: cannot end sandboxes past their timeout");
                }
            }
        })
    });
    let state = AppState {
        service,
        control,
        metrics: Arc::new(corral_web::request_metrics()),
        build: server::build_info(),
        e2b,
    };
    let service = state.service.clone();
    // actix-web's `HttpServer` pipeline, built by hand so each connection passes through the
    // request-head guard (oversized and malformed heads answered with the envelope).
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    tracing::info!(
        max_connections = settings.http.max_connections,
        max_connections_per_address = settings.http.max_connections_per_address,
        trusted_proxies = settings.http.trusted_proxies.len(),
        request_log = settings.http.request_log.mode.as_str(),
        request_log_sample = settings.http.request_log.sample_one_in,
        slow_request_ms = settings.http.request_log.slow.as_millis() as u64,
        "connection caps and request log"
    );
    tracing::info!(origins = ?settings.mcp_allowed_origins, "/mcp allowed origins");
    let bound = server::bind(
        &settings.listen,
        workers,
        state,
        settings.http.clone(),
        &settings.mcp_allowed_origins,
    )
    .map_err(|e| CommandError(format!("cannot listen on {}: {e}", settings.listen)))?;
    for addr in &bound.addrs {
        println!("corral: listening on http://{addr}");
    }
    let _ = std::io::stdout().flush();
    // actix-server stops gracefully on SIGTERM and SIGINT (in-flight requests finish).
    bound.server.await?;
    // Hand running commands' captures over at once (the next start, or another replica,
    // takes them without waiting for the leases to run out).
    service.release_captures().await;
    tracing::info!("stopped");
    Ok(())
}

/// How often the server ends E2B-door sandboxes whose E2B timeout has passed.
const E2B_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// How often the server looks for commands whose capture needs an owner.
const COMMAND_SUPERVISOR_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// How often idle sandboxes are looked for (an idle stop is at most this late; the shortest
/// `idleStopSeconds` is a minute).
const LIFECYCLE_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

fn print_first_key(settings: &Settings, project: &Project, key: &str) {
    let host = settings.listen.replace("0.0.0.0", "127.0.0.1");
    println!(
        "corral: created project `default` ({}) on an empty database.\n\
         Its API key is shown only this once; keep it:\n\n    {key}\n\n\
         Try it:\n\n    curl -s -X POST http://{host}/v1/sandboxes \\\n      \
         -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\\n      \
         -d '{{\"provider\": \"local\"}}'\n",
        project.id
    );
}

/// `corral reap`: one pass now, its findings printed (and, unless a dry run, recorded and
/// audited as a scheduled pass would).
async fn reap(dry_run: bool, json: bool, storage: Storage) -> Outcome {
    let settings = settings(&storage, None)?;
    let (registry, store) = open_registry(&settings).await?;
    let providers = crate::wiring::build(&settings).map_err(CommandError)?;
    let service = server::service(&settings, providers, registry.clone(), store);
    let report = service.reap_once(dry_run).await;
    if !dry_run {
        let control = server::control(&settings, registry, service)?;
        control.audit_reap(&report).await?;
    }
    print!("{}", reap_output(&report, json));
    if report.failures.is_empty() {
        Ok(())
    } else {
        Err(CommandError(format!(
            "{} provider scope(s) could not be checked",
            report.failures.len()
        )))
    }
}

/// What `corral reap` prints.
fn reap_output(report: &corral_service::ReapReport, json: bool) -> String {
    use std::fmt::Write as _;
    if json {
        let value = serde_json::json!({
            "dryRun": report.dry_run,
            "deployment": report.deployment,
            "orphans": report.orphans.iter().map(|o| serde_json::json!({
                "provider": o.provider,
                "nativeId": o.native_id,
                "project": o.project,
                "operationId": o.operation_id.map(|op| op.to_string()),
                "firstSeen": o.first_seen,
                "deleted": o.deleted,
            })).collect::<Vec<_>>(),
            "gone": report.gone.iter().map(|g| serde_json::json!({
                "sandboxId": g.record.id.to_string(),
                "project": g.record.project_id.to_string(),
                "reason": if g.vanished { "vanished" } else { "expired" },
            })).collect::<Vec<_>>(),
            "unlisted": report.unlisted,
            "failures": report.failures.iter().map(|(p, why)| serde_json::json!({
                "provider": p, "error": why,
            })).collect::<Vec<_>>(),
        });
        return format!("{value}\n");
    }
    let mut out = String::new();
    let verb = if report.dry_run { "would be" } else { "is" };
    for o in &report.orphans {
        let _ = writeln!(
            out,
            "orphan   {} {} (project {}){}",
            o.provider,
            o.native_id,
            o.project.as_deref().unwrap_or("unknown"),
            if o.deleted { ": deleted" } else { "" }
        );
    }
    for g in &report.gone {
        let reason = if g.vanished { "vanished" } else { "expired" };
        let _ = writeln!(out, "gone     {} {verb} recorded {reason}", g.record.id);
    }
    for p in &report.unlisted {
        let _ = writeln!(
            out,
            "note     {p} cannot list its sandboxes by tag: orphans there are not found"
        );
    }
    for (p, why) in &report.failures {
        let _ = writeln!(out, "failed   {p}: {why}");
    }
    let _ = writeln!(
        out,
        "reap{}: {} orphan(s), {} record(s) gone",
        if report.dry_run { " (dry run)" } else { "" },
        report.orphans.len(),
        report.gone.len()
    );
    out
}

async fn migrate(storage: Storage) -> Outcome {
    let settings = settings(&storage, None)?;
    let (_registry, _store) = open_registry(&settings).await?;
    println!("corral: migrations applied");
    Ok(())
}

async fn find_project(registry: &Registry, project: &str) -> Result<Project, CommandError> {
    Ok(match project.parse::<ProjectId>() {
        Ok(id) => registry.project(id).await?,
        Err(_) => registry.project_by_name(project).await?,
    })
}

/// The one JSON object `project create` and `key create` print.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct IssuedKey<'a> {
    project_id: String,
    api_key: &'a str,
    /// The key's name, when it was given one.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    /// When the key stops working, if ever.
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<corral_domain::Timestamp>,
}

fn print_key(project: ProjectId, issued: &corral_registry::NewApiKey) {
    let out = IssuedKey {
        project_id: project.to_string(),
        api_key: issued.key.expose_secret(),
        name: issued.info.name.as_deref(),
        expires_at: issued.info.expires_at,
    };
    match serde_json::to_string(&out) {
        Ok(line) => println!("{line}"),
        Err(e) => eprintln!("corral: cannot print the key: {e}"),
    }
}

async fn project(command: ProjectCommand) -> Outcome {
    match command {
        ProjectCommand::Create { name, storage } => {
            let settings = settings(&storage, None)?;
            let (registry, _) = open_registry(&settings).await?;
            let project = registry.create_project(&name).await?;
            let issued = registry.issue_api_key(project.id).await?;
            print_key(project.id, &issued);
            Ok(())
        }
    }
}

async fn key(command: KeyCommand) -> Outcome {
    match command {
        KeyCommand::Create {
            project,
            name,
            expires_in_days,
            storage,
        } => {
            let settings = settings(&storage, None)?;
            let (registry, _) = open_registry(&settings).await?;
            let project = find_project(&registry, &project).await?;
            let now = registry.database().now();
            // The control plane's rules, so a key made here looks like one made there.
            let options =
                corral_control::KeyOptions::lifetime(name, expires_in_days.map(u32::from), now)
                    .checked(now)?;
            let issued = registry
                .issue_api_key_with(
                    project.id,
                    corral_registry::ApiKeyOptions {
                        name: options.name,
                        expires_at: options.expires_at,
                    },
                )
                .await?;
            print_key(project.id, &issued);
            Ok(())
        }
        KeyCommand::Revoke { key_id, storage } => {
            let settings = settings(&storage, None)?;
            let (registry, _) = open_registry(&settings).await?;
            // Accept the key id or a whole key (`crl_<keyid>_<secret>`).
            let id = key_id
                .strip_prefix(corral_registry::API_KEY_PREFIX)
                .map_or(key_id.as_str(), |rest| {
                    rest.split('_').next().unwrap_or(rest)
                });
            let info = registry.revoke_api_key(id).await?;
            let out = serde_json::json!({
                "keyId": info.key_id,
                "projectId": info.project_id.to_string(),
                "revokedAt": info.revoked_at,
            });
            println!("{out}");
            Ok(())
        }
    }
}

async fn e2b_template(command: E2bTemplateCommand) -> Outcome {
    let line = |t: &corral_registry::E2bTemplate| serde_json::json!({"name": t.name, "provider": t.provider.as_str(), "image": t.image});
    match command {
        E2bTemplateCommand::Set {
            project,
            name,
            provider,
            image,
            storage,
        } => {
            let settings = settings(&storage, None)?;
            let provider: Provider = provider.parse()?;
            if !settings.enabled.contains(&provider) {
                return Err(CommandError(format!(
                    "provider `{provider}` is not enabled on this server"
                )));
            }
            let (registry, _) = open_registry(&settings).await?;
            let project = find_project(&registry, &project).await?;
            let template = corral_registry::E2bTemplate {
                name,
                provider,
                image,
            };
            registry.put_e2b_template(project.id, &template).await?;
            println!("{}", line(&template));
        }
        E2bTemplateCommand::Ls { project, storage } => {
            let settings = settings(&storage, None)?;
            let (registry, _) = open_registry(&settings).await?;
            let project = find_project(&registry, &project).await?;
            for t in registry.e2b_templates(project.id).await? {
                println!("{}", line(&t));
            }
        }
        E2bTemplateCommand::Rm {
            project,
            name,
            storage,
        } => {
            let settings = settings(&storage, None)?;
            let (registry, _) = open_registry(&settings).await?;
            let project = find_project(&registry, &project).await?;
            if !registry.remove_e2b_template(project.id, &name).await? {
                return Err(CommandError(format!(
                    "the project has no template `{name}`"
                )));
            }
        }
    }
    Ok(())
}

async fn profile(command: ProfileCommand) -> Outcome {
    let ProfileCommand::Set {
        project,
        provider,
        credential_env,
        no_credential,
        workspace,
        team_id,
        provider_project_id,
        bridge_url,
        storage,
    } = command;
    let provider: Provider = provider.parse()?;
    let credential = if no_credential {
        None
    } else if let Some(var) = credential_env {
        let value = std::env::var(&var)
            .map_err(|_| CommandError(format!("environment variable {var} is not set")))?;
        Some(SecretString::from(value.trim().to_owned()))
    } else {
        eprintln!("corral: reading the {provider} credential from standard input (one line)");
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        let line = line.trim().to_owned();
        if line.is_empty() {
            return Err(CommandError("no credential on standard input".into()));
        }
        Some(SecretString::from(line))
    };
    let settings = settings(&storage, None)?;
    let (registry, _) = open_registry(&settings).await?;
    let project = find_project(&registry, &project).await?;
    let stored = registry
        .put_profile(
            project.id,
            provider,
            ProfileInput {
                context: ProviderContext {
                    workspace,
                    team_id,
                    project_id: provider_project_id,
                    bridge_url,
                },
                settings: serde_json::Map::new(),
                credential,
            },
        )
        .await?;
    let out = serde_json::json!({
        "projectId": project.id.to_string(),
        "provider": provider,
        "context": stored.context,
        "hasCredential": stored.has_credential,
    });
    println!("{out}");
    Ok(())
}

/// The control plane over the configured database, for the operator's commands (no
/// providers: these commands never reach one).
async fn open_control(
    settings: &Settings,
    public_url: Option<String>,
) -> Result<corral_control::Control, CommandError> {
    let (registry, store) = open_registry(settings).await?;
    let service = server::service(settings, BTreeMap::new(), registry.clone(), store);
    let public_url = public_url
        .unwrap_or_else(|| format!("http://{}", settings.listen.replace("0.0.0.0", "127.0.0.1")));
    let config = corral_control::ControlConfig {
        public_url,
        ..corral_control::ControlConfig::default()
    };
    let store = corral_control_store::ControlStore::new(registry.database().clone());
    Ok(corral_control::Control::new(
        store, registry, service, config,
    ))
}

async fn user(command: UserCommand) -> Outcome {
    let UserCommand::Invite {
        email,
        public_url,
        storage,
    } = command;
    let settings = settings(&storage, None)?;
    let control = open_control(&settings, public_url).await?;
    // The operator asked for this link on their own terminal: printing it is the point.
    let link = control.invite_user(&email).await?;
    println!("{link}");
    Ok(())
}

async fn legal(command: LegalCommand) -> Outcome {
    let LegalCommand::Publish {
        document,
        title,
        file,
        storage,
    } = command;
    let body = std::fs::read_to_string(&file)
        .map_err(|e| CommandError(format!("cannot read {}: {e}", file.display())))?;
    let settings = settings(&storage, None)?;
    let control = open_control(&settings, None).await?;
    let release = control.publish_legal(&document, &title, &body).await?;
    println!(
        "{}",
        serde_json::json!({ "document": document, "release": release })
    );
    Ok(())
}
