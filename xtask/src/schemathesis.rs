//! `cargo xtask schemathesis`: the API tried by a tool written elsewhere. Builds the server,
//! starts `corral serve` on loopback (SQLite in a temporary directory, the `local` provider
//! only), and runs Schemathesis (installed from PyPI into `target/schemathesis-venv` when
//! missing) against its `/v1/openapi.json` with every check but `use_after_free` (see
//! `xtask/schemathesis.toml`), the stateful phase following the
//! document's links, bounded in examples and in time. Zero failures or it fails.
//!
//! Before it, a client generated from the served document by `openapi-python-client` (PyPI)
//! drives create → exec → write → read → list → delete (`xtask/client_journey.py`), proving the
//! document usable as published.
//!
//! Options: `--max-examples N` (default 20), `--max-time SECONDS` (default 240).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The Schemathesis release the suite was made green with.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";
/// The client generator of the journey test.
const CLIENT_GENERATOR: &str = "openapi-python-client==0.29.1";
/// The Standard Webhooks reference verifier for Python (the webhook journey).
const WEBHOOK_VERIFIER: &str = "standardwebhooks==1.1.0";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn option(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} takes a number")),
    }
}

/// The venv under `target/`, with Schemathesis and the client generator installed if missing.
fn venv() -> Result<PathBuf, String> {
    let venv = root().join("target/schemathesis-venv");
    let bin = venv.join("bin");
    let verifier = Command::new(bin.join("python"))
        .args(["-c", "import standardwebhooks"])
        .status()
        .is_ok_and(|s| s.success());
    if bin.join("schemathesis").exists() && bin.join("openapi-python-client").exists() && verifier {
        return Ok(bin);
    }
    if !bin.join("pip").exists() {
        crate::run(
            "python3",
            &["-m", "venv", venv.to_str().ok_or("non-UTF-8 path")?],
        )?;
    }
    crate::run(
        bin.join("pip").to_str().ok_or("non-UTF-8 path")?,
        &[
            "install",
            "--quiet",
            SCHEMATHESIS,
            CLIENT_GENERATOR,
            WEBHOOK_VERIFIER,
        ],
    )?;
    Ok(bin)
}

/// Generates a Python client from the served document and drives create → exec → write →
/// read → list → delete with it (`xtask/client_journey.py`).
fn client_journey(bin: &Path, server: &Server) -> Result<(), String> {
    let out = root().join("target/schemathesis-client");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {out:?}: {e}"))?;
    let package = out.join("corral_client");
    let generator = bin.join("openapi-python-client");
    crate::run(
        generator.to_str().ok_or("non-UTF-8 path")?,
        &[
            "generate",
            "--url",
            &format!("{}/v1/openapi.json", server.base),
            "--output-path",
            package.to_str().ok_or("non-UTF-8 path")?,
            "--meta",
            "none",
        ],
    )?;
    let python = bin.join("python");
    let script = root().join("xtask/client_journey.py");
    crate::run(
        python.to_str().ok_or("non-UTF-8 path")?,
        &[
            script.to_str().ok_or("non-UTF-8 path")?,
            out.to_str().ok_or("non-UTF-8 path")?,
            &server.base,
            &server.key,
        ],
    )
}

/// A running `corral serve`; killed when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
    pub(crate) key: String,
    _dir: TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server's data directory, removed when dropped (after its server): the disks of the
/// `local` sandboxes the run left are unmounted first, or their blocks would stay used.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        crate::strays::unmount_under(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn start_server() -> Result<Server, String> {
    crate::run(&crate::cargo(), &["build", "--quiet", "-p", "corral"])?;
    let dir =
        TempDir(std::env::temp_dir().join(format!("corral-schemathesis-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).map_err(|e| format!("cannot create {:?}: {e}", dir.0))?;
    // One client sending thousands of requests a minute: the service's rate limits would
    // answer most of them 429 (they are tested through HTTP in the test suite instead).
    let config = dir.0.join("corral.toml");
    // Thousands of creates on `local`: small sandbox filesystems (the default 1 GiB is
    // allocated in full at create).
    std::fs::write(
        &config,
        "[rate_limits]\nenabled = false\n\n[local]\ndisk_mib = 32\ndisk_reserve_mib = 256\n\n\
         [webhooks]\nallow = [\"127.0.0.1\"]\nfirst_backoff_seconds = 1\n",
    )
    .map_err(|e| format!("cannot write {config:?}: {e}"))?;
    let log_path = root().join("target/schemathesis-server.log");
    let log =
        std::fs::File::create(&log_path).map_err(|e| format!("cannot create {log_path:?}: {e}"))?;
    let mut child = Command::new(root().join("target/debug/corral"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&dir.0)
        .arg("--config")
        .arg(&config)
        // The local provider only: no call leaves this machine, and no credential is needed.
        .env("CORRAL_PROVIDERS", "local")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| format!("cannot start corral serve: {e}"))?;
    let stdout = child.stdout.take().ok_or("corral serve has no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut key = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let line = line.trim().to_owned();
            if line.starts_with("crl_") && key.is_none() {
                key = Some(line.clone());
            }
            if let Some(base) = line.strip_prefix("corral: listening on ") {
                let _ = tx.send((base.to_owned(), key.take()));
            }
        }
    });
    let (base, key) = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(found) => found,
        Err(_) => {
            let _ = child.kill();
            return Err("corral serve did not start listening within 60 s".into());
        }
    };
    let key = key.ok_or("corral serve printed no API key on its first start")?;
    Ok(Server {
        child,
        base,
        key,
        _dir: dir,
    })
}

pub(crate) fn schemathesis(args: &[String]) -> Result<(), String> {
    let max_examples = option(args, "--max-examples", 20)?;
    let max_time = option(args, "--max-time", 240)?;
    let bin = venv()?;
    let server = start_server()?;
    // First the journey of a generated client: it needs a fresh project with no sandboxes.
    client_journey(&bin, &server)?;
    // Then webhooks, verified by the Standard Webhooks library for Python.
    crate::run(
        bin.join("python").to_str().ok_or("non-UTF-8 path")?,
        &[
            root()
                .join("xtask/webhook_journey.py")
                .to_str()
                .ok_or("non-UTF-8 path")?,
            &server.base,
            &server.key,
        ],
    )?;
    let config = root().join("xtask/schemathesis.toml");
    let report = root().join("target/schemathesis-report");
    let status = Command::new(bin.join("schemathesis"))
        // Schemathesis keeps a cache in its working directory: keep it under target/.
        .current_dir(root().join("target"))
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{}/v1/openapi.json", server.base)])
        .args(["--header", &format!("Authorization: Bearer {}", server.key)])
        .args(["--checks", "all"])
        // The email webhook refuses every unsigned event with 400 `invalid_email_webhook`:
        // nothing a generator can send is accepted (its signature is tested in bins/corral).
        .args(["--exclude-operation-id", "receiveEmailEvent"])
        // JSON-RPC in one documented body: its messages are tried by the MCP SDK
        // (`cargo xtask mcp`), not by generated JSON objects.
        .args(["--exclude-operation-id", "callMcp"])
        // A webhook endpoint's URL must resolve to a public address (or an allowed host): the
        // URLs a generator makes resolve nowhere offline, so every generated create is refused
        // with 400 by design. Tested in bins/corral (webhooks.rs) and by xtask/webhook_journey.py.
        .args(["--exclude-operation-id", "createWebhook"])
        // Get of a tombstone is 200 by design: see xtask/schemathesis.toml.
        .args(["--exclude-checks", "use_after_free"])
        .args(["--max-examples", &max_examples.to_string()])
        .args(["--max-time", &max_time.to_string()])
        // One worker: CPython 3.11's parser is not thread-safe under Hypothesis.
        .args(["--workers", "1"])
        .args(["--request-timeout", "60"])
        .args(["--report", "ndjson", "--report-dir"])
        .arg(&report)
        .arg("--no-color")
        .status()
        .map_err(|e| format!("cannot run schemathesis: {e}"))?;
    drop(server);
    if status.success() {
        println!("schemathesis: no failures");
        Ok(())
    } else {
        Err(format!(
            "schemathesis found failures ({status}); the report is in {}",
            report.display()
        ))
    }
}
