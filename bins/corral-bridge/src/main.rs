//! `corral-bridge`: serves Corral's bridge contract backed by the `local` provider.
//!
//! ```sh
//! CORRAL_BRIDGE_KEY=<a long random key> corral-bridge --listen 127.0.0.1:8787 --root /var/lib/corral-bridge
//! ```
//!
//! Then point Corral at it: `X-Provider-Bridge-Url: http://127.0.0.1:8787` and
//! `X-Provider-Credential: <the key>` with `"provider": "cloudflare"` (or `modal`, `deno`), with
//! the address allow-listed in Corral's `[bridge] allow` (it is loopback).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use corral_provider::SecretString;
use corral_provider_local::{LocalConfig, LocalProvider};

/// Serves Corral's bridge contract (docs/bridge-contract.md) over local sandboxes.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:8787")]
    listen: SocketAddr,
    /// Directory the sandboxes live in (created if missing).
    #[arg(long)]
    root: PathBuf,
    /// Give commands the host's network, unguarded (default: none). For a bridge serving one
    /// user only: every command then reaches what this host reaches, its loopback included.
    #[arg(long)]
    allow_network: bool,
    /// The bearer key callers must present (required: a bridge never runs without one).
    #[arg(long = "key", env = "CORRAL_BRIDGE_KEY", hide_env_values = true)]
    key: String,
}

fn main() -> ExitCode {
    // Started as a `local` sandbox's init: that, and nothing else (before any thread).
    corral_provider_local::run_init_if_requested();
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "corral-bridge: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "corral-bridge: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    if args.key.trim().len() < 16 {
        return Err("the key (CORRAL_BRIDGE_KEY) must be at least 16 characters".into());
    }
    let mut config = LocalConfig::new(&args.root);
    config.allow_network = args.allow_network;
    if args.allow_network {
        let _ = writeln!(
            std::io::stderr(),
            "corral-bridge: warning: --allow-network puts every command in this host's network \
             namespace, unguarded: commands reach the host's loopback (its databases, this \
             bridge, any local service) and everything the host reaches. Run it only for a \
             single user you trust with this host."
        );
    }
    // Each sandbox's init is this executable (`main` runs it when asked).
    config.init = Some(
        corral_provider_local::InitProgram::current_exe()
            .map_err(|e| format!("cannot find the corral-bridge executable: {e}"))?,
    );
    let local = LocalProvider::new(config).map_err(|e| e.to_string())?;
    if let Some(why) = local.unavailable_reason() {
        let _ = writeln!(
            std::io::stderr(),
            "corral-bridge: the local provider cannot run sandboxes here: {why}"
        );
    }
    let router = corral_bridge::router(Arc::new(local), SecretString::from(args.key));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let _ = writeln!(
        std::io::stdout(),
        "corral-bridge: listening on http://{addr}"
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| e.to_string())
}
