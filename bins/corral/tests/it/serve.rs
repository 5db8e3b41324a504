//! The real `corral serve` binary as a child process, and a small client for its API: shared
//! by the end-to-end, fault and crash tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::{Client, Method, StatusCode};
use serde_json::Value;

pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
    pub(crate) stdout: PathBuf,
    pub(crate) stderr: PathBuf,
}

/// `corral serve` on an ephemeral loopback port over `data` with `config`; `run` numbers its
/// log files so restarts keep the earlier logs.
pub(crate) fn start(data: &Path, config: &Path, run: usize) -> Server {
    start_with_env(data, config, run, &[])
}

/// As [`start`], with extra environment variables (failpoints, database URLs).
pub(crate) fn start_with_env(
    data: &Path,
    config: &Path,
    run: usize,
    env: &[(&str, &str)],
) -> Server {
    start_on(data, config, run, env, "127.0.0.1:0")
}

/// As [`start_with_env`], listening on `listen` (a restart on the address clients know).
pub(crate) fn start_on(
    data: &Path,
    config: &Path,
    run: usize,
    env: &[(&str, &str)],
    listen: &str,
) -> Server {
    let stdout = data.with_extension(format!("stdout{run}"));
    let stderr = data.with_extension(format!("stderr{run}"));
    let child = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["serve", "--listen", listen, "--data-dir"])
        .arg(data)
        .arg("--config")
        .arg(config)
        .env("CORRAL_LOG", "debug")
        // Every request's line, as before the request log was sampled by default: the tests
        // that read the logs (no credential in them, request ids) see them all.
        .env("CORRAL_REQUEST_LOG", "all")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    // Owned by `Server` at once, so a failed start still kills and reaps it.
    let mut server = Server {
        child,
        base: String::new(),
        stdout,
        stderr,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = std::fs::read_to_string(&server.stdout).unwrap_or_default();
        if let Some(line) = out.lines().find(|l| l.starts_with("corral: listening on ")) {
            server.base = line.trim_start_matches("corral: listening on ").to_owned();
            return server;
        }
        assert!(
            Instant::now() < deadline,
            "server did not start: {out} {}",
            std::fs::read_to_string(&server.stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Server {
    /// The default project's API key, which a first start over an empty data directory
    /// prints.
    pub(crate) fn first_key(&self) -> String {
        let banner = std::fs::read_to_string(&self.stdout).unwrap();
        banner
            .split_whitespace()
            .find(|w| w.starts_with("crl_"))
            .expect("a first start prints the default project's key")
            .to_owned()
    }

    /// The server's process id (for `/proc/<pid>/status` readings such as its peak memory).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: no chance to finish anything.
    pub(crate) fn crash(mut self) {
        self.child.kill().unwrap();
        let _ = self.child.wait();
    }

    /// Waits up to `within` for the process to end by itself (a failpoint's abort) and says
    /// how it ended; `None` if it is still running then.
    pub(crate) fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        assert!(exit.success(), "graceful shutdown exits 0: {exit}");
        let mut logs = std::fs::read_to_string(&self.stdout).unwrap();
        logs.push_str(&std::fs::read_to_string(&self.stderr).unwrap());
        logs
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) struct Api {
    pub(crate) client: Client,
    pub(crate) base: String,
    pub(crate) key: String,
}

/// An answer of [`Api::timed`].
pub(crate) struct Timed {
    pub(crate) status: StatusCode,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) text: String,
    pub(crate) took: Duration,
}

impl Api {
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (StatusCode, reqwest::header::HeaderMap, String) {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        (status, headers, resp.text().await.unwrap())
    }

    /// A call with an optional `Idempotency-Key`, and how long its answer took.
    pub(crate) async fn timed(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> Timed {
        let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
        let started = Instant::now();
        let (status, headers, text) = self.call(method, path, body, &headers).await;
        Timed {
            status,
            headers,
            text,
            took: started.elapsed(),
        }
    }

    pub(crate) async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
        want: u16,
    ) -> Value {
        let (status, _, text) = self.call(method, path, body, headers).await;
        assert_eq!(status.as_u16(), want, "{path}: {text}");
        serde_json::from_str(&text).unwrap()
    }
}

/// Runs the admin CLI: `corral <args> --data-dir <data>` with `env` (and no `CORRAL_CONFIG`
/// of the caller's); panics unless it succeeds.
pub(crate) fn cli(data: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .envs(env.iter().copied())
        .env_remove("CORRAL_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "corral {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Stores `credential` as the default project's `provider` profile with the admin CLI (through
/// an environment variable, never argv), plus `extra` arguments; panics unless it succeeds.
pub(crate) fn set_default_profile(
    data: &Path,
    provider: &str,
    credential: &str,
    extra: &[&str],
) -> std::process::Output {
    const VAR: &str = "CORRAL_TEST_PROFILE_CREDENTIAL";
    let args = [
        &[
            "profile",
            "set",
            "--project",
            "default",
            "--provider",
            provider,
            "--credential-env",
            VAR,
        ][..],
        extra,
    ]
    .concat();
    cli(data, &args, &[(VAR, credential)])
}

/// `corral project create --name <name>` with the CLI against `url` (which migrates an empty
/// database first): the project's id and its API key, printed only this once.
pub(crate) fn create_project(data: &Path, url: &str, name: &str) -> (String, String) {
    let out = cli(
        data,
        &["project", "create", "--name", name, "--database-url", url],
        &[],
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        printed["projectId"].as_str().unwrap().to_owned(),
        printed["apiKey"].as_str().unwrap().to_owned(),
    )
}

/// A field of a process's `/proc/<pid>/status` in KiB (`VmRSS`, its resident memory now;
/// `VmHWM`, its peak).
pub(crate) fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
