//! Corral's client subcommands: `corral sandbox create|ls|get|rm|stop|resume|snapshot|fork`,
//! `corral snapshot ls|get|rm`, `corral exec`, `corral cp` and `corral providers`, over
//! [`corral_client`].
//!
//! This crate holds the clap definitions ([`ClientCommand`]) and the run functions
//! ([`run`]); the `corral` binary only mounts them beside its server and admin subcommands,
//! so one binary is both the server and its client (see `docs/clients.md` for why).
//!
//! - [`config`] resolves the server URL and API key: flags, then the environment
//!   (`CORRAL_URL`, `CORRAL_API_KEY`), then the config file (`~/.config/corral/cli.toml`).
//! - [`exec`] starts a command through the commands resource and streams its output live.
//! - [`cp`] copies files between the local disk and a sandbox, binary-safe.
//! - [`render`] prints tables for people, JSON for scripts, and the progress indicator.
//!
//! Exit codes: 0 success; 1 the server refused (an API error, its v3 code printed); 2 a usage
//! or configuration error; 3 the server could not be reached or an outcome is unknown. `exec`
//! exits with the command's own exit code, 124 when the command timed out, and 125 when the
//! CLI itself failed (so a failure of the CLI never looks like the command's exit 1).
#![allow(clippy::print_stdout, clippy::print_stderr)] // A command-line tool answers on stdout and stderr.

pub mod config;
pub mod cp;
pub mod exec;
pub mod render;

use std::process::ExitCode;

use clap::{Args, Subcommand};
use corral_client::Client;
use corral_domain::{
    CreateSandboxRequest, CreateSnapshotInput, ForkInput, Provider, Sandbox, SandboxId,
    SandboxStatus, Snapshot, SnapshotId, SnapshotStatus,
};

use crate::render::{Progress, Table};

/// How to reach the server and how to answer; given after the client subcommand's name
/// (`corral sandbox --json ls` and `corral sandbox ls --json` both work).
#[derive(Debug, Clone, Default, Args)]
pub struct Connection {
    /// The server's base URL [env: CORRAL_URL; else `url` in the config file].
    #[arg(long, global = true)]
    pub url: Option<String>,
    /// The project API key (`crl_…`) [env: CORRAL_API_KEY; else `api_key` in the config file].
    /// Prefer the environment or the file: a flag is visible to other users in `ps`.
    #[arg(long, global = true)]
    pub key: Option<String>,
    /// The CLI's config file [env: CORRAL_CLI_CONFIG; default `~/.config/corral/cli.toml`].
    #[arg(long = "cli-config", global = true)]
    pub cli_config: Option<std::path::PathBuf>,
    /// Print JSON (the API's own bodies) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The client subcommands, mounted into the `corral` binary's command list.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Create, list, show, stop, resume, snapshot, fork and delete sandboxes.
    Sandbox {
        /// What to do.
        #[command(subcommand)]
        command: SandboxCommand,
        /// The server, the key, the output format.
        #[command(flatten)]
        conn: Connection,
    },
    /// List, show and delete the project's snapshots (`corral sandbox snapshot` takes one;
    /// `corral sandbox create --snapshot` restores one).
    Snapshot {
        /// What to do.
        #[command(subcommand)]
        command: SnapshotCommand,
        /// The server, the key, the output format.
        #[command(flatten)]
        conn: Connection,
    },
    /// Run a command in a sandbox, streaming its output live; exits with its exit code.
    /// Ctrl-C sends SIGINT to the command (a second Ctrl-C sends SIGKILL).
    Exec(exec::ExecArgs),
    /// Copy a file between the local disk and a sandbox (binary-safe):
    /// `corral cp ./f SBX:/path` or `corral cp SBX:/path ./f` (`-` is stdin or stdout).
    Cp(cp::CpArgs),
    /// List the server's providers and what they can do.
    Providers {
        /// The server, the key, the output format.
        #[command(flatten)]
        conn: Connection,
    },
    /// Manage the project's webhook endpoints (signed lifecycle events; docs/operations.md).
    Webhook {
        /// What to do.
        #[command(subcommand)]
        command: WebhookCommand,
        /// The server, the key, the output format.
        #[command(flatten)]
        conn: Connection,
    },
}

/// `corral webhook …`.
#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Add an endpoint; prints it with its signing secret, shown only this once.
    Create {
        /// Where events are POSTed (`https://…`); positional (`--url` names the server).
        #[arg(value_name = "ENDPOINT_URL")]
        endpoint: String,
        /// An event type to send (repeat for several; default: every type).
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<corral_domain::EventType>,
    },
    /// List the project's endpoints (no secrets).
    #[command(alias = "list")]
    Ls,
    /// Remove an endpoint; its pending deliveries are dropped.
    #[command(alias = "delete")]
    Rm {
        /// The endpoint id (`whe_…`).
        id: String,
    },
    /// Give an endpoint a new secret (shown only this once); the old one keeps signing
    /// during the overlap.
    Rotate {
        /// The endpoint id (`whe_…`).
        id: String,
    },
    /// An endpoint's most recent deliveries, newest first.
    Deliveries {
        /// The endpoint id (`whe_…`).
        id: String,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
}

/// `corral sandbox …`.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Create a sandbox and wait until it has left `creating`; prints it.
    Create {
        /// The provider, e.g. `local` or `e2b` (see `corral providers`).
        #[arg(long, short)]
        provider: Provider,
        /// The image (where the provider takes one).
        #[arg(long)]
        image: Option<String>,
        /// The sandbox's lifetime in seconds (where the provider takes one).
        #[arg(long)]
        timeout: Option<u64>,
        /// Restore this snapshot (`snp_…`, on the same provider) instead of starting from an
        /// image.
        #[arg(long, value_name = "SNP", conflicts_with = "image")]
        snapshot: Option<SnapshotId>,
        /// Calls on the sandbox while it is stopped resume it first (instead of failing with
        /// `sandbox_stopped`).
        #[arg(long)]
        auto_resume: bool,
        /// Stop the sandbox after this many seconds without activity.
        #[arg(long = "idle-stop", value_name = "SECONDS")]
        idle_stop: Option<u64>,
        /// Answer as soon as the server accepted the create (status `creating`), without
        /// waiting for the sandbox to leave it.
        #[arg(long)]
        no_wait: bool,
        /// How long to wait for the sandbox to leave `creating`, in seconds.
        #[arg(long, default_value_t = 300)]
        wait_seconds: u64,
    },
    /// List the project's sandboxes, newest first (deleted ones included).
    #[command(alias = "list")]
    Ls {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Show one sandbox with its live status.
    Get {
        /// The sandbox id (`sbx_…`).
        id: SandboxId,
    },
    /// Delete sandboxes; prints each tombstone.
    #[command(alias = "delete")]
    Rm {
        /// The sandbox ids (`sbx_…`).
        #[arg(required = true)]
        ids: Vec<SandboxId>,
    },
    /// Stop sandboxes (their files are kept; `resume` brings them back) and wait until they
    /// are `stopped`; prints each.
    Stop {
        /// The sandbox ids (`sbx_…`).
        #[arg(required = true)]
        ids: Vec<SandboxId>,
        /// How long to wait, and whether to.
        #[command(flatten)]
        wait: Wait,
    },
    /// Resume stopped sandboxes and wait until they are `running`; prints each.
    Resume {
        /// The sandbox ids (`sbx_…`).
        #[arg(required = true)]
        ids: Vec<SandboxId>,
        /// How long to wait, and whether to.
        #[command(flatten)]
        wait: Wait,
    },
    /// Snapshot a sandbox (idempotently, retried) and wait until the snapshot is `ready`;
    /// prints it. Restore it with `corral sandbox create --snapshot SNP`.
    Snapshot {
        /// The sandbox id (`sbx_…`).
        id: SandboxId,
        /// A name for people (1 to 128 printable characters).
        #[arg(long)]
        name: Option<String>,
        /// How long to wait, and whether to.
        #[command(flatten)]
        wait: Wait,
    },
    /// Fork a sandbox: snapshot it and restore the snapshot into new sandboxes (idempotently,
    /// retried), then wait until they have left `creating`; prints the copies.
    Fork {
        /// The sandbox id (`sbx_…`).
        id: SandboxId,
        /// How many copies (1 to 10).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=u64::from(corral_domain::limits::MAX_FORK_COUNT)))]
        count: u64,
        /// How long to wait, and whether to.
        #[command(flatten)]
        wait: Wait,
    },
}

/// Whether and how long a lifecycle command waits for its transitional status to end.
#[derive(Debug, Clone, Copy, Args)]
pub struct Wait {
    /// Answer as soon as the server accepted the request (`stopping`, `starting`,
    /// `creating`), without waiting for it to be done.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait, in seconds.
    #[arg(long, default_value_t = 300)]
    pub wait_seconds: u64,
}

/// `corral snapshot …`.
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// List the project's snapshots, newest first (deleted ones included).
    #[command(alias = "list")]
    Ls {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Show one snapshot.
    Get {
        /// The snapshot id (`snp_…`).
        id: SnapshotId,
    },
    /// Delete snapshots at their provider; prints each tombstone.
    #[command(alias = "delete")]
    Rm {
        /// The snapshot ids (`snp_…`).
        #[arg(required = true)]
        ids: Vec<SnapshotId>,
    },
}

/// How a client command failed, and the exit code that says so.
#[derive(Debug)]
pub struct Failure {
    /// The message printed on stderr.
    pub message: String,
    /// The process's exit code.
    pub code: u8,
}

/// The server refused (an API error).
pub const EXIT_API: u8 = 1;
/// A usage or configuration error.
pub const EXIT_USAGE: u8 = 2;
/// The server could not be reached, or an outcome is unknown.
pub const EXIT_UNREACHABLE: u8 = 3;
/// `exec`: the command timed out.
pub const EXIT_TIMED_OUT: u8 = 124;
/// `exec`: the CLI itself failed.
pub const EXIT_EXEC_FAILED: u8 = 125;

impl Failure {
    /// A usage or configuration error.
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: EXIT_USAGE,
        }
    }
}

impl From<corral_client::Error> for Failure {
    fn from(e: corral_client::Error) -> Self {
        use corral_client::Error as E;
        let code = match &e {
            E::Api { .. } => EXIT_API,
            E::InvalidUrl { .. } => EXIT_USAGE,
            _ => EXIT_UNREACHABLE,
        };
        // The client's Display carries the v3 code and the request id; say so when a retry
        // may succeed, and how to reconcile an unknown outcome.
        let mut message = e.to_string();
        if let E::CreateOutcomeUnknown { request_id, .. }
        | E::IdempotencyOutcomeUnknown { request_id, .. } = &e
        {
            message.push_str(&format!(
                " (request {}; list the sandboxes, or the snapshots for a snapshot, to see whether it was made)",
                request_id.as_deref().unwrap_or("unknown")
            ));
        } else if e.is_retryable() {
            message.push_str(" (retryable: trying again later may succeed)");
        }
        Self { message, code }
    }
}

/// Runs one client command on a runtime of its own; prints failures as `corral: …`.
pub fn run(command: ClientCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("corral: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let exec = matches!(command, ClientCommand::Exec(_));
    match runtime.block_on(dispatch(command)) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("corral: {}", f.message);
            // `exec` keeps its own exit codes for the command's: the CLI's failures are 125.
            ExitCode::from(if exec && f.code != EXIT_USAGE {
                EXIT_EXEC_FAILED
            } else {
                f.code
            })
        }
    }
}

async fn dispatch(command: ClientCommand) -> Result<u8, Failure> {
    match command {
        ClientCommand::Sandbox { command, conn } => {
            sandbox(&config::client(&conn)?, command, conn.json).await?;
            Ok(0)
        }
        ClientCommand::Snapshot { command, conn } => {
            snapshot(&config::client(&conn)?, command, conn.json).await?;
            Ok(0)
        }
        ClientCommand::Exec(args) => exec::exec(args).await,
        ClientCommand::Cp(args) => {
            cp::cp(args).await?;
            Ok(0)
        }
        ClientCommand::Providers { conn } => {
            providers(&config::client(&conn)?, conn.json).await?;
            Ok(0)
        }
        ClientCommand::Webhook { command, conn } => {
            webhook(&config::client(&conn)?, command, conn.json).await?;
            Ok(0)
        }
    }
}

async fn webhook(client: &Client, command: WebhookCommand, json: bool) -> Result<(), Failure> {
    let types = |t: &[corral_domain::EventType]| {
        if t.is_empty() {
            "*".to_owned()
        } else {
            t.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",")
        }
    };
    match command {
        WebhookCommand::Create {
            endpoint,
            types: wanted,
        } => {
            let made = client
                .create_webhook(&corral_domain::NewWebhook {
                    url: endpoint,
                    types: (!wanted.is_empty()).then_some(wanted),
                })
                .await?;
            if json {
                return render::json(&made);
            }
            let mut table = Table::new(&["ID", "URL", "TYPES", "SECRET (shown once)"]);
            table.row(vec![
                made.id.clone(),
                made.url.clone(),
                types(&made.types),
                made.secret.clone(),
            ]);
            table.print();
        }
        WebhookCommand::Ls => {
            let list = client.list_webhooks().await?;
            if json {
                return render::json(&list);
            }
            let mut table = Table::new(&["ID", "URL", "TYPES", "CREATED"]);
            for w in &list.items {
                table.row(vec![
                    w.id.clone(),
                    w.url.clone(),
                    types(&w.types),
                    render::time(&w.created_at),
                ]);
            }
            table.print();
        }
        WebhookCommand::Rm { id } => {
            let removed = client.delete_webhook(&id).await?;
            if json {
                return render::json(&removed);
            }
            println!("removed {}", removed.id);
        }
        WebhookCommand::Rotate { id } => {
            let rotated = client.rotate_webhook(&id).await?;
            if json {
                return render::json(&rotated);
            }
            println!("{} secret (shown once): {}", rotated.id, rotated.secret);
        }
        WebhookCommand::Deliveries { id, limit } => {
            let list = client.webhook_deliveries(&id, Some(limit)).await?;
            if json {
                return render::json(&list);
            }
            let mut table = Table::new(&["ID", "EVENT", "STATE", "ATTEMPTS", "LAST"]);
            for d in &list.items {
                table.row(vec![
                    d.id.clone(),
                    d.event_id.to_string(),
                    d.state.as_str().to_owned(),
                    d.attempts.to_string(),
                    d.last_status
                        .map(|s| s.to_string())
                        .or_else(|| d.last_error.clone())
                        .unwrap_or_else(|| "-".to_owned()),
                ]);
            }
            table.print();
        }
    }
    Ok(())
}

async fn sandbox(client: &Client, command: SandboxCommand, json: bool) -> Result<(), Failure> {
    match command {
        SandboxCommand::Create {
            provider,
            image,
            timeout,
            snapshot,
            auto_resume,
            idle_stop,
            no_wait,
            wait_seconds,
        } => {
            let request =
                create_request(provider, image, timeout, snapshot, auto_resume, idle_stop);
            let label = match snapshot {
                Some(snp) => format!("restoring {snp}"),
                None => format!("creating a {provider} sandbox"),
            };
            let progress = Progress::start(&label);
            let created = create_and_wait(client, &request, !no_wait, wait_seconds).await;
            progress.finish();
            let sandbox = created?;
            if json {
                render::json(&sandbox)?;
            } else {
                render::sandboxes_table(std::slice::from_ref(&sandbox)).print();
            }
        }
        SandboxCommand::Ls { limit } => {
            let mut items = Vec::new();
            let mut cursor: Option<String> = None;
            while items.len() < limit as usize {
                let want = (limit as usize - items.len()).min(100) as u32;
                let page = client.list_sandboxes(cursor.as_deref(), Some(want)).await?;
                items.extend(page.items);
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            items.truncate(limit as usize);
            if json {
                render::json(&items)?;
            } else {
                let mut table = Table::new(&["ID", "PROVIDER", "STATUS", "CREATED", "DELETED"]);
                for s in &items {
                    table.row(vec![
                        s.id.to_string(),
                        s.provider.to_string(),
                        s.status.to_string(),
                        render::time(&s.created_at),
                        s.deleted_at.as_ref().map_or_else(String::new, render::time),
                    ]);
                }
                table.print();
            }
        }
        SandboxCommand::Get { id } => {
            let sandbox = client.get_sandbox(&id).await?;
            if json {
                render::json(&sandbox)?;
            } else {
                render::sandboxes_table(std::slice::from_ref(&sandbox)).print();
            }
        }
        SandboxCommand::Rm { ids } => {
            let mut gone = Vec::new();
            for id in &ids {
                gone.push(client.delete_sandbox(id).await?);
            }
            if json {
                render::json(&gone)?;
            } else {
                render::sandboxes_table(&gone).print();
            }
        }
        SandboxCommand::Stop { ids, wait } => {
            let mut done = Vec::new();
            for id in &ids {
                let progress = Progress::start(&format!("stopping {id}"));
                let stopped = async {
                    let sandbox = client.stop_sandbox(id).await?;
                    settle(client, sandbox, SandboxStatus::Stopping, wait).await
                }
                .await;
                progress.finish();
                done.push(stopped?);
            }
            print_sandboxes(&done, json)?;
        }
        SandboxCommand::Resume { ids, wait } => {
            let mut done = Vec::new();
            for id in &ids {
                let progress = Progress::start(&format!("resuming {id}"));
                let resumed = async {
                    let sandbox = client.resume_sandbox(id).await?;
                    settle(client, sandbox, SandboxStatus::Starting, wait).await
                }
                .await;
                progress.finish();
                done.push(resumed?);
            }
            print_sandboxes(&done, json)?;
        }
        SandboxCommand::Snapshot { id, name, wait } => {
            let progress = Progress::start(&format!("snapshotting {id}"));
            let taken = async {
                let snapshot = client
                    .create_snapshot(&id, &CreateSnapshotInput { name })
                    .await?;
                settle_snapshot(client, snapshot, wait).await
            }
            .await;
            progress.finish();
            let snapshot = taken?;
            if json {
                render::json(&snapshot)?;
            } else {
                render::snapshots_table(std::slice::from_ref(&snapshot)).print();
            }
        }
        SandboxCommand::Fork { id, count, wait } => {
            let progress = Progress::start(&format!("forking {id}"));
            let forked = async {
                let mut forked = client
                    .fork_sandbox(&id, &ForkInput { count: Some(count) })
                    .await?;
                let mut copies = Vec::new();
                for copy in forked.sandboxes {
                    copies.push(settle(client, copy, SandboxStatus::Creating, wait).await?);
                }
                forked.sandboxes = copies;
                Ok::<_, Failure>(forked)
            }
            .await;
            progress.finish();
            let forked = forked?;
            if json {
                render::json(&forked)?;
            } else {
                println!("snapshot {}", forked.snapshot_id);
                render::sandboxes_table(&forked.sandboxes).print();
            }
        }
    }
    Ok(())
}

fn print_sandboxes(items: &[Sandbox], json: bool) -> Result<(), Failure> {
    if json {
        render::json(&items)
    } else {
        render::sandboxes_table(items).print();
        Ok(())
    }
}

/// The create body the flags ask for: a restore when `snapshot` is given (which takes no
/// image: clap refuses `--snapshot` with `--image`).
pub fn create_request(
    provider: Provider,
    image: Option<String>,
    timeout: Option<u64>,
    snapshot: Option<SnapshotId>,
    auto_resume: bool,
    idle_stop: Option<u64>,
) -> CreateSandboxRequest {
    let request = CreateSandboxRequest::standard(provider, image, timeout);
    let request = match snapshot {
        Some(snp) => request.restoring(snp),
        None => request,
    };
    request.with_lifecycle(auto_resume, idle_stop)
}

/// Polls the sandbox while it is `transitional` (with `wait`), and answers it.
async fn settle(
    client: &Client,
    mut sandbox: Sandbox,
    transitional: SandboxStatus,
    wait: Wait,
) -> Result<Sandbox, Failure> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait.wait_seconds);
    while !wait.no_wait && sandbox.status == transitional {
        if std::time::Instant::now() >= deadline {
            return Err(still(
                &sandbox.id.to_string(),
                transitional.as_str(),
                wait,
                "sandbox",
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        sandbox = client.get_sandbox(&sandbox.id).await?;
    }
    Ok(sandbox)
}

/// Polls the snapshot while it is `creating` (with `wait`), and answers it.
async fn settle_snapshot(
    client: &Client,
    mut snapshot: Snapshot,
    wait: Wait,
) -> Result<Snapshot, Failure> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait.wait_seconds);
    while !wait.no_wait && snapshot.status == SnapshotStatus::Creating {
        if std::time::Instant::now() >= deadline {
            return Err(still(
                &snapshot.id.to_string(),
                "creating",
                wait,
                "snapshot",
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        snapshot = client.get_snapshot(&snapshot.id).await?;
    }
    Ok(snapshot)
}

fn still(id: &str, status: &str, wait: Wait, noun: &str) -> Failure {
    Failure {
        message: format!(
            "{noun} {id} is still {status} after {}s (see `corral {noun} get {id}`)",
            wait.wait_seconds
        ),
        code: EXIT_UNREACHABLE,
    }
}

async fn snapshot(client: &Client, command: SnapshotCommand, json: bool) -> Result<(), Failure> {
    let items = match command {
        SnapshotCommand::Ls { limit } => {
            let mut items = Vec::new();
            let mut cursor: Option<String> = None;
            while items.len() < limit as usize {
                let want = (limit as usize - items.len()).min(100) as u32;
                let page = client.list_snapshots(cursor.as_deref(), Some(want)).await?;
                items.extend(page.items);
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            items.truncate(limit as usize);
            if json {
                return render::json(&items);
            }
            items
        }
        SnapshotCommand::Get { id } => {
            let snapshot = client.get_snapshot(&id).await?;
            if json {
                return render::json(&snapshot);
            }
            vec![snapshot]
        }
        SnapshotCommand::Rm { ids } => {
            let mut gone = Vec::new();
            for id in &ids {
                gone.push(client.delete_snapshot(id).await?);
            }
            if json {
                return render::json(&gone);
            }
            gone
        }
    };
    render::snapshots_table(&items).print();
    Ok(())
}

/// Creates, then (with `wait`) polls the sandbox until it leaves `creating`.
async fn create_and_wait(
    client: &Client,
    request: &CreateSandboxRequest,
    wait: bool,
    wait_seconds: u64,
) -> Result<corral_domain::Sandbox, Failure> {
    let mut sandbox = client.create_sandbox(request).await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_seconds);
    while wait && sandbox.status == SandboxStatus::Creating {
        if std::time::Instant::now() >= deadline {
            return Err(Failure {
                message: format!(
                    "sandbox {} is still creating after {wait_seconds}s (see `corral sandbox get {}`)",
                    sandbox.id, sandbox.id
                ),
                code: EXIT_UNREACHABLE,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        sandbox = client.get_sandbox(&sandbox.id).await?;
    }
    Ok(sandbox)
}

async fn providers(client: &Client, json: bool) -> Result<(), Failure> {
    let catalog = client.providers().await?;
    if json {
        return render::json(&catalog);
    }
    let mut table = Table::new(&["PROVIDER", "NAME", "TIMEOUT", "STDIN", "SIGNALS"]);
    for p in &catalog.providers {
        let timeout = match (p.timeout_default_seconds, p.timeout_maximum_seconds) {
            (Some(d), Some(m)) => format!("{d}s (max {m}s)"),
            (Some(d), None) => format!("{d}s"),
            (None, Some(m)) => format!("max {m}s"),
            (None, None) => "-".to_owned(),
        };
        let signals: Vec<&str> = p.commands.signals.iter().map(|s| s.as_str()).collect();
        table.row(vec![
            p.provider.to_string(),
            p.display_name.clone(),
            timeout,
            if p.commands.stdin { "yes" } else { "no" }.to_owned(),
            if signals.is_empty() {
                "-".to_owned()
            } else {
                signals.join(",")
            },
        ]);
    }
    table.print();
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use clap::Parser;
    use serde_json::json;

    use super::*;

    const SBX: &str = "sbx_local_01j9zzzzzzzzzzzzzzzzzzzzzz";
    const SBX2: &str = "sbx_local_01j9yyyyyyyyyyyyyyyyyyyyyy";
    const SNP: &str = "snp_local_01j9zzzzzzzzzzzzzzzzzzzzzz";

    /// The client subcommands as the `corral` binary mounts them.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: ClientCommand,
    }

    fn parse(args: &[&str]) -> Result<ClientCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("corral").chain(args.iter().copied()))
            .map(|c| c.command)
    }

    fn sandbox(args: &[&str]) -> SandboxCommand {
        match parse(args).unwrap() {
            ClientCommand::Sandbox { command, .. } => command,
            other => panic!("{other:?}"),
        }
    }

    fn create_body(args: &[&str]) -> serde_json::Value {
        match sandbox(args) {
            SandboxCommand::Create {
                provider,
                image,
                timeout,
                snapshot,
                auto_resume,
                idle_stop,
                ..
            } => serde_json::to_value(create_request(
                provider,
                image,
                timeout,
                snapshot,
                auto_resume,
                idle_stop,
            ))
            .unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_definitions_are_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn create_restores_a_snapshot_with_the_lifecycle_flags() {
        assert_eq!(
            create_body(&[
                "sandbox",
                "create",
                "-p",
                "local",
                "--snapshot",
                SNP,
                "--auto-resume",
                "--idle-stop",
                "600",
            ]),
            json!({"provider": "local", "snapshot": SNP, "autoResume": true, "idleStopSeconds": 600})
        );
        // Without them, the body is what it was before they existed.
        assert_eq!(
            create_body(&["sandbox", "create", "-p", "local", "--image", "alpine"]),
            json!({"provider": "local", "image": "alpine"})
        );
        // A restore takes no image, and the snapshot must be a snapshot id.
        assert!(
            parse(&[
                "sandbox",
                "create",
                "-p",
                "local",
                "--snapshot",
                SNP,
                "--image",
                "alpine"
            ])
            .is_err()
        );
        assert!(parse(&["sandbox", "create", "-p", "local", "--snapshot", SBX]).is_err());
    }

    #[test]
    fn stop_resume_snapshot_and_fork_parse_their_ids_and_flags() {
        match sandbox(&["sandbox", "stop", SBX, SBX2, "--no-wait"]) {
            SandboxCommand::Stop { ids, wait } => {
                assert_eq!(ids.len(), 2);
                assert!(wait.no_wait);
            }
            other => panic!("{other:?}"),
        }
        match sandbox(&["sandbox", "resume", SBX, "--wait-seconds", "9"]) {
            SandboxCommand::Resume { ids, wait } => {
                assert_eq!(ids[0].to_string(), SBX);
                assert!(!wait.no_wait);
                assert_eq!(wait.wait_seconds, 9);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse(&["sandbox", "stop"]).is_err());
        match sandbox(&["sandbox", "snapshot", SBX, "--name", "before upgrade"]) {
            SandboxCommand::Snapshot { id, name, .. } => {
                assert_eq!(id.to_string(), SBX);
                assert_eq!(name.as_deref(), Some("before upgrade"));
            }
            other => panic!("{other:?}"),
        }
        match sandbox(&["sandbox", "fork", SBX]) {
            SandboxCommand::Fork { count, .. } => assert_eq!(count, 1),
            other => panic!("{other:?}"),
        }
        match sandbox(&["sandbox", "fork", SBX, "--count", "10"]) {
            SandboxCommand::Fork { count, .. } => assert_eq!(count, 10),
            other => panic!("{other:?}"),
        }
        assert!(parse(&["sandbox", "fork", SBX, "--count", "0"]).is_err());
        assert!(parse(&["sandbox", "fork", SBX, "--count", "11"]).is_err());
        assert!(parse(&["sandbox", "fork", SNP]).is_err());
    }

    #[test]
    fn snapshot_ls_get_and_rm_parse() {
        let snapshot = |args: &[&str]| match parse(args).unwrap() {
            ClientCommand::Snapshot { command, conn } => (command, conn.json),
            other => panic!("{other:?}"),
        };
        assert!(matches!(
            snapshot(&["snapshot", "ls", "--limit", "5", "--json"]),
            (SnapshotCommand::Ls { limit: 5 }, true)
        ));
        assert!(matches!(
            snapshot(&["snapshot", "list"]),
            (SnapshotCommand::Ls { limit: 100 }, false)
        ));
        match snapshot(&["snapshot", "get", SNP]) {
            (SnapshotCommand::Get { id }, _) => assert_eq!(id.to_string(), SNP),
            other => panic!("{other:?}"),
        }
        match snapshot(&["snapshot", "rm", SNP, SNP]) {
            (SnapshotCommand::Rm { ids }, _) => assert_eq!(ids.len(), 2),
            other => panic!("{other:?}"),
        }
        assert!(parse(&["snapshot", "rm"]).is_err());
        assert!(parse(&["snapshot", "get", SBX]).is_err());
    }
}
