//! `corral serve` processes for the benchmark: configuration, the first project and key, the
//! provider profile, start-up timed to the first ready answer, and resource figures read
//! from `/proc`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One benchmark world: a data directory, a database URL, a config file.
pub(crate) struct World {
    pub(crate) dir: PathBuf,
    pub(crate) database_url: String,
    config: PathBuf,
    /// The project's API key.
    pub(crate) api_key: String,
    /// The project's id.
    pub(crate) project_id: String,
}

/// A running `corral serve`.
pub(crate) struct Corral {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub(crate) base: String,
    /// From spawning the process to the first `200` from `/readyz`.
    pub(crate) ready_after: Duration,
}

impl Drop for Corral {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Corral {
    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size now, in MiB.
    pub(crate) fn rss_mib(&self) -> Option<f64> {
        rss_mib(self.pid())
    }
}

/// The release `corral` binary next to this (release) xtask.
pub(crate) fn binary() -> PathBuf {
    PathBuf::from("target/release/corral")
}

/// A free loopback port (bound and released: good enough on a quiet loopback).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn corral(args: &[&str], config: &Path, env: &[(&str, &str)]) -> Result<String, String> {
    let out = Command::new(binary())
        .args(args)
        .arg("--config")
        .arg(config)
        .envs(env.iter().copied())
        .env("CORRAL_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run corral: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "corral {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl World {
    /// Writes the config (morph at `morph_url`, and `local`), migrates, creates project
    /// `bench` with a key, and stores its morph profile.
    pub(crate) fn new(dir: &Path, database_url: &str, morph_url: &str) -> Result<Self, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let config = dir.join("corral.toml");
        // The request-rate limiter and the exec caps stay in the path (their cost is part of
        // every figure) with budgets no run can spend, so no request is refused: the memory
        // scenario holds 1 000 execs of one project in flight, past the default cap of 32.
        let text = format!(
            "data_dir = {data:?}\ndatabase_url = {database_url:?}\n\n\
             [reconciler]\ninterval_seconds = 3600\n\n\
             [local]\ndisk_mib = 32\ndisk_reserve_mib = 256\n\n\
             [limits]\nmax_concurrent_execs_per_project = 1000000\n\
             max_concurrent_execs = 1000000\n\n\
             [rate_limits]\nenabled = true\n\
             per_key = {{ per_second = 1000000000.0, burst = 1000000000 }}\n\
             per_project = {{ per_second = 1000000000.0, burst = 1000000000 }}\n\n\
             [providers]\nenabled = [\"morph\", \"local\"]\n\
             [providers.morph]\nbase_url = {morph_url:?}\ndefault_image = \"snapshot_bench\"\n",
            data = dir.join("data").display().to_string(),
        );
        std::fs::write(&config, text).map_err(|e| format!("cannot write the config: {e}"))?;
        let out = corral(&["project", "create", "--name", "bench"], &config, &[])?;
        let issued: serde_json::Value = serde_json::from_str(out.trim())
            .map_err(|e| format!("unexpected `project create` output: {e}"))?;
        let field = |name: &str| {
            issued[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("`project create` printed no {name}"))
        };
        let (api_key, project_id) = (field("apiKey")?, field("projectId")?);
        corral(
            &[
                "profile",
                "set",
                "--project",
                "bench",
                "--provider",
                "morph",
                "--credential-env",
                "BENCH_MORPH_KEY",
            ],
            &config,
            &[("BENCH_MORPH_KEY", super::fake::API_KEY)],
        )?;
        Ok(Self {
            dir: dir.to_owned(),
            database_url: database_url.to_owned(),
            config,
            api_key,
            project_id,
        })
    }

    /// Starts `corral serve` on a free port and waits (polling every millisecond) until
    /// `/readyz` answers 200.
    pub(crate) async fn serve(&self, client: &reqwest::Client) -> Result<Corral, String> {
        let port = free_port()?;
        let log = std::fs::File::create(self.dir.join(format!("serve-{port}.log")))
            .map_err(|e| format!("cannot create the server log: {e}"))?;
        let started = Instant::now();
        let child = Command::new(binary())
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start corral serve: {e}"))?;
        let mut server = Corral {
            child,
            base: format!("http://127.0.0.1:{port}"),
            ready_after: Duration::ZERO,
        };
        let readyz = format!("{}/readyz", server.base);
        loop {
            if let Ok(resp) = client.get(&readyz).send().await
                && resp.status().is_success()
            {
                server.ready_after = started.elapsed();
                return Ok(server);
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err("corral serve was not ready within 30 s".into());
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("corral serve exited: {status}"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Resident set size of `pid` in MiB.
pub(crate) fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// CPU seconds (user + system) used so far by `pid`.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the state.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    ticks / 100.0
}

/// CPU seconds used so far by every process whose command name is `comm`.
pub(crate) fn cpu_seconds_of(comm: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        })
        .map(cpu_seconds)
        .sum()
}
