//! Finds the PostgreSQL server the tests use, starting the machine's local cluster when it is
//! installed but down, and creates the test database — what `.ci/run` does, so that
//! `cargo xtask ci` alone runs the PostgreSQL tests on a machine that has PostgreSQL.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The variable naming the server (read by `corral_registry::testing::TestDb`).
pub(crate) const URL_ENV: &str = "CORRAL_TEST_POSTGRES_URL";
/// The variable that makes a PostgreSQL test fail instead of returning early when it has no
/// server.
pub(crate) const REQUIRE_ENV: &str = "CORRAL_REQUIRE_POSTGRES";

const HOST: &str = "127.0.0.1";
const PORT: &str = "5432";
const DATABASE: &str = "corral_test";

/// The URL of a reachable server with the test database: `CORRAL_TEST_POSTGRES_URL` when set,
/// else the local cluster on 127.0.0.1:5432 (started if installed and down). `Err` says why
/// none is available.
pub(crate) fn find_or_start() -> Result<String, String> {
    if let Ok(url) = std::env::var(URL_ENV) {
        return Ok(url);
    }
    if !ready() {
        start_local_clusters()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready() {
            if Instant::now() > deadline {
                return Err(format!(
                    "nothing answers on {HOST}:{PORT} after starting it"
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let exists = psql(&format!(
        "select 1 from pg_database where datname = '{DATABASE}'"
    ))?;
    if exists.trim() != "1" {
        psql(&format!("create database {DATABASE}"))?;
    }
    Ok(format!("postgres://postgres@{HOST}:{PORT}/{DATABASE}"))
}

fn ready() -> bool {
    Command::new("pg_isready")
        .args(["-h", HOST, "-p", PORT, "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts every Debian cluster named `main` (`pg_ctlcluster`), as `.ci/run` does.
fn start_local_clusters() -> Result<(), String> {
    let versions = std::fs::read_dir("/etc/postgresql")
        .map_err(|_| "PostgreSQL is not installed (no /etc/postgresql)".to_owned())?;
    let mut started = false;
    for v in versions.flatten() {
        let version = v.file_name().to_string_lossy().into_owned();
        println!("xtask: starting PostgreSQL {version}");
        started |= Command::new("pg_ctlcluster")
            .args(["--skip-systemctl-redirect", &version, "main", "start"])
            .status()
            .is_ok_and(|s| s.success());
    }
    if started {
        Ok(())
    } else {
        Err("no local PostgreSQL cluster could be started".to_owned())
    }
}

/// Runs one statement as the `postgres` user over TCP (trust authentication), falling back to
/// the local socket as the `postgres` system user.
fn psql(sql: &str) -> Result<String, String> {
    let tcp = Command::new("psql")
        .args(["-h", HOST, "-p", PORT, "-U", "postgres", "-d", "postgres"])
        .args(["-v", "ON_ERROR_STOP=1", "-tAc", sql])
        .output();
    if let Ok(out) = &tcp
        && out.status.success()
    {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let out = Command::new("su")
        .args(["postgres", "-c"])
        .arg(format!(
            "psql -d postgres -v ON_ERROR_STOP=1 -tAc \"{sql}\""
        ))
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "psql failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
