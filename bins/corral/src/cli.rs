//! The command line: `corral serve | migrate | reap | project | key | profile | user | legal |
//! openapi | mcp`,
//! and the client subcommands `sandbox | exec | cp | providers` (defined in `corral-cli`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Corral: a provider-neutral control API for persistent sandboxes.
#[derive(Debug, Parser)]
#[command(name = "corral", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the registry lives.
#[derive(Debug, Clone, Args)]
pub struct Storage {
    /// Data directory: the SQLite file, the master key and local sandboxes.
    #[arg(long, env = "CORRAL_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Database URL (`sqlite://PATH` or `postgres://…`); default SQLite in the data directory.
    #[arg(long, env = "CORRAL_DATABASE_URL")]
    pub database_url: Option<String>,
    /// TOML configuration file.
    #[arg(long, env = "CORRAL_CONFIG")]
    pub config: Option<PathBuf>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server.
    Serve {
        /// Listen address.
        #[arg(long, env = "CORRAL_LISTEN")]
        listen: Option<String>,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
    /// Apply database migrations and exit.
    Migrate {
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
    /// Manage projects.
    Project {
        /// What to do.
        #[command(subcommand)]
        command: ProjectCommand,
    },
    /// Manage project API keys.
    Key {
        /// What to do.
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Manage provider profiles.
    Profile {
        /// What to do.
        #[command(subcommand)]
        command: ProfileCommand,
    },
    /// Manage a project's E2B templates: which provider and image an E2B SDK's
    /// `Sandbox.create(<name>)` uses for that project (docs/compat/e2b.md).
    E2bTemplate {
        /// What to do.
        #[command(subcommand)]
        command: E2bTemplateCommand,
    },
    /// Manage control-plane users.
    User {
        /// What to do.
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Publish legal documents users must accept.
    Legal {
        /// What to do.
        #[command(subcommand)]
        command: LegalCommand,
    },
    /// Run one orphan-reaper pass and print what it found (docs/operations.md): provider
    /// sandboxes this deployment made that no live record names, and records whose sandbox
    /// is gone at its provider.
    Reap {
        /// Find and print only; change nothing anywhere.
        #[arg(long)]
        dry_run: bool,
        /// Print one JSON object instead of lines for people.
        #[arg(long)]
        json: bool,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
    /// Print the OpenAPI document (regenerate docs/openapi.json with it).
    Openapi,
    /// The client subcommands (`sandbox`, `exec`, `cp`, `providers`): a server's API over
    /// HTTP, with `--url` and `--key`.
    #[command(flatten)]
    Client(corral_cli::ClientCommand),
    /// Serve Corral's MCP tools over stdin/stdout to one agent, against a running server.
    Mcp(McpArgs),
}

/// `corral mcp`: which server and project the tools act on.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The server's base URL.
    #[arg(long, env = "CORRAL_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// A project API key (`crl_…`).
    #[arg(long, env = "CORRAL_API_KEY", hide_env_values = true)]
    pub api_key: String,
}

impl McpArgs {
    /// Serves the tools on stdio until the agent closes stdin. Stdout carries only the
    /// protocol; logs go to stderr.
    pub async fn serve(self) -> Result<(), String> {
        let client =
            corral_client::Client::new(&self.url, &self.api_key).map_err(|e| e.to_string())?;
        corral_mcp::serve_stdio(client)
            .await
            .map_err(|e| e.to_string())
    }
}

/// `corral user …`.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user (and their personal account) if missing and print a sign-in link for
    /// them on stdout (it works once, for 15 minutes). Bootstraps the first owner.
    Invite {
        /// The user's email address.
        #[arg(long)]
        email: String,
        /// The server's public URL the link points at; default `http://<listen address>`.
        #[arg(long, env = "CORRAL_PUBLIC_URL")]
        public_url: Option<String>,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
}

/// `corral legal …`.
#[derive(Debug, Subcommand)]
pub enum LegalCommand {
    /// Publish the next release of a document (`terms`, `privacy` or `acceptable-use`) from a
    /// Markdown file; prints `{"document": …, "release": …}`. Every user must accept it
    /// before changing anything in the control plane.
    Publish {
        /// `terms`, `privacy` or `acceptable-use`.
        #[arg(long)]
        document: String,
        /// The release's title.
        #[arg(long)]
        title: String,
        /// The release's text (Markdown).
        #[arg(long)]
        file: PathBuf,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
}

/// `corral project …`.
#[derive(Debug, Subcommand)]
pub enum ProjectCommand {
    /// Create a project; prints `{"projectId": …, "apiKey": …}` on stdout.
    Create {
        /// Unique project name.
        #[arg(long)]
        name: String,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
}

/// `corral key …`.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Issue another API key for a project; prints `{"projectId": …, "apiKey": …}`.
    Create {
        /// The project id (`prj_…`) or name.
        #[arg(long)]
        project: String,
        /// A name shown in key lists (at most 64 characters).
        #[arg(long)]
        name: Option<String>,
        /// Days until the key stops working (1–732); without it the key never expires.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=732))]
        expires_in_days: Option<u16>,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
    /// Revoke an API key by its id (the part after `crl_`) or the full key.
    Revoke {
        /// The key id.
        #[arg(long)]
        key_id: String,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
}

/// `corral e2b-template …`.
#[derive(Debug, Subcommand)]
pub enum E2bTemplateCommand {
    /// Set (or replace) one of the project's templates.
    Set {
        /// The project id (`prj_…`) or name.
        #[arg(long)]
        project: String,
        /// The template's name, as the SDK passes it (`base`, `python`, …).
        #[arg(long)]
        name: String,
        /// The provider its sandboxes are made on, e.g. `daytona`.
        #[arg(long)]
        provider: String,
        /// The image (the provider's default when absent).
        #[arg(long)]
        image: Option<String>,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
    /// Print the project's templates, one JSON object per line.
    Ls {
        /// The project id (`prj_…`) or name.
        #[arg(long)]
        project: String,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
    /// Remove one of the project's templates (the server's own applies again).
    Rm {
        /// The project id (`prj_…`) or name.
        #[arg(long)]
        project: String,
        /// The template's name.
        #[arg(long)]
        name: String,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
}

/// `corral profile …`.
#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Store a project's provider profile. The credential is read from standard input (one
    /// line) or from the environment variable named by `--credential-env`; never from argv.
    Set {
        /// The project id (`prj_…`) or name.
        #[arg(long)]
        project: String,
        /// The provider id, e.g. `e2b`.
        #[arg(long)]
        provider: String,
        /// Read the credential from this environment variable instead of standard input.
        #[arg(long)]
        credential_env: Option<String>,
        /// Store no credential (providers that need none).
        #[arg(long, conflicts_with = "credential_env")]
        no_credential: bool,
        /// Workspace context.
        #[arg(long)]
        workspace: Option<String>,
        /// Team id context.
        #[arg(long)]
        team_id: Option<String>,
        /// Project id context (the provider's, not Corral's).
        #[arg(long)]
        provider_project_id: Option<String>,
        /// Bridge URL context.
        #[arg(long)]
        bridge_url: Option<String>,
        /// Storage.
        #[command(flatten)]
        storage: Storage,
    },
}
