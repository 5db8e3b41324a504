//! The CLI's journey against a live `corral serve` on `local`: the real binary as both the
//! server and the client, as a person or a script would run it.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::serve::{Server, start};

struct Cli {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    server: Server,
    key: String,
}

impl Cli {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        let config = dir.join("corral.toml");
        // Webhooks may go to loopback here (the webhook subcommand's test).
        std::fs::write(
            &config,
            "[providers]\nenabled = [\"local\"]\n[webhooks]\nallow = [\"127.0.0.1\"]\n",
        )
        .unwrap();
        let server = start(&dir.join("data"), &config, 1);
        let key = server.first_key();
        Self {
            _tmp: tmp,
            dir,
            server,
            key,
        }
    }

    /// `corral ARGS…` with the server and key in the environment (and no config file).
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_corral"));
        c.args(args)
            .env("CORRAL_URL", &self.server.base)
            .env("CORRAL_API_KEY", &self.key)
            .env(
                "CORRAL_CLI_CONFIG",
                self.dir.join("absent-is-an-error.toml"),
            )
            .env_remove("XDG_CONFIG_HOME")
            .stdin(Stdio::null());
        // A named config file that does not exist is an error only when it is read, and it is
        // not read when the flags and environment give both settings.
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "corral {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "corral {args:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

#[test]
fn the_cli_creates_execs_streams_copies_lists_and_deletes_on_a_live_server() {
    let cli = Cli::new();

    // Create, parsed as a script would.
    let created = cli.json(&["sandbox", "create", "--provider", "local", "--json"]);
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("sbx_local_"), "{created}");
    assert_eq!(created["status"], "running", "create waits out `creating`");

    // The command's exit code is the CLI's; its stdout and stderr go to the CLI's.
    let out = cli.run(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    let out = cli.run(&["exec", &id, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // Output is streamed: the first line reaches the CLI's stdout while the command still
    // runs (it sleeps 2 s before its second line).
    let started = Instant::now();
    let mut child = cli
        .command(&[
            "exec",
            &id,
            "--",
            "sh -c 'echo first; sleep 2; echo second'",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let first_at = started.elapsed();
    assert_eq!(first, "first");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the CLI had ended before its first line was read"
    );
    let second = lines.next().unwrap().unwrap();
    let second_at = started.elapsed();
    assert_eq!(second, "second");
    assert!(
        second_at - first_at >= Duration::from_millis(1500),
        "the first line arrived at {first_at:?}, only just before the second at {second_at:?}"
    );
    assert!(lines.next().is_none());
    assert!(child.wait().unwrap().success());

    // cp both ways is byte-identical for binary content (every byte value, NULs, invalid
    // UTF-8).
    let blob: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let local = cli.dir.join("blob.bin");
    std::fs::write(&local, &blob).unwrap();
    let remote = format!("{id}:/tmp/blob.bin");
    let out = cli.run(&["cp", local.to_str().unwrap(), &remote]);
    assert!(out.status.success(), "{out:?}");
    let back = cli.dir.join("blob.back");
    let out = cli.run(&["cp", &remote, back.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert!(std::fs::read(&back).unwrap() == blob, "the copy differs");
    // The sandbox saw the same bytes.
    let out = cli.run(&["exec", &id, "--", "wc -c < /tmp/blob.bin"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200000");

    // ls and get, as JSON and as a table.
    let listed = cli.json(&["sandbox", "ls", "--json"]);
    assert!(
        listed.as_array().unwrap().iter().any(|s| s["id"] == id),
        "{listed}"
    );
    let table = cli.run(&["sandbox", "ls"]);
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&id) && l.contains("running"))
    );
    assert_eq!(
        cli.json(&["sandbox", "get", &id, "--json"])["status"],
        "running"
    );

    // rm, then get answers the tombstone.
    let gone = cli.json(&["sandbox", "rm", &id, "--json"]);
    assert_eq!(gone[0]["status"], "deleted", "{gone}");
    assert_eq!(
        cli.json(&["sandbox", "get", &id, "--json"])["status"],
        "deleted"
    );

    // Errors: the v3 code and the request id on stderr, exit 1; a bad key too; no server 3.
    let missing = id.replace("sbx_local_0", "sbx_local_7");
    let out = cli.run(&["sandbox", "get", &missing]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sandbox_not_found") && err.contains("req_"),
        "{err}"
    );
    let out = cli.run(&["providers", "--key", "crl_wrong"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("authentication_error"));
    let out = cli.run(&["providers", "--url", "http://127.0.0.1:9"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // An exec that cannot start is the CLI's failure (125), not the command's.
    let out = cli.run(&["exec", &missing, "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
}

#[test]
fn the_cli_manages_webhook_endpoints_and_shows_their_deliveries() {
    let cli = Cli::new();
    let made = cli.json(&[
        "webhook",
        "create",
        "http://127.0.0.1:9/hook",
        "--type",
        "sandbox.created",
        "--type",
        "sandbox.deleted",
        "--json",
    ]);
    let id = made["id"].as_str().unwrap().to_owned();
    let secret = made["secret"].as_str().unwrap().to_owned();
    assert!(
        id.starts_with("whe_") && secret.starts_with("whsec_"),
        "{made}"
    );
    assert_eq!(
        made["types"],
        serde_json::json!(["sandbox.created", "sandbox.deleted"])
    );

    // The table for people lists it without the secret.
    let listed = cli.run(&["webhook", "ls"]);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success() && text.contains(&id), "{text}");
    assert!(
        !text.contains(&secret),
        "a listing shows the secret: {text}"
    );

    let rotated = cli.json(&["webhook", "rotate", &id, "--json"]);
    assert_ne!(rotated["secret"].as_str().unwrap(), secret);

    // An event makes a delivery (to a port nobody listens on: it stays pending, attempted).
    cli.json(&["sandbox", "create", "--provider", "local", "--json"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let d = cli.json(&["webhook", "deliveries", &id, "--json"]);
        if let Some(first) = d["items"].as_array().and_then(|i| i.first()) {
            assert_eq!(first["state"], "pending", "{d}");
            break;
        }
        assert!(Instant::now() < deadline, "no delivery recorded: {d}");
        std::thread::sleep(Duration::from_millis(200));
    }

    let bad = cli.run(&[
        "webhook",
        "create",
        "http://127.0.0.1:9/x",
        "--type",
        "sandbox.nope",
    ]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an unknown type is a usage error"
    );
    let removed = cli.json(&["webhook", "rm", &id, "--json"]);
    assert_eq!(removed["id"], id.as_str());
    let gone = cli.run(&["webhook", "rm", &id]);
    assert_eq!(
        gone.status.code(),
        Some(1),
        "a second removal is the API's not-found"
    );
    assert_eq!(
        cli.json(&["webhook", "ls", "--json"])["items"],
        serde_json::json!([])
    );
}

/// Issue #26: `corral key create` names a key and gives it a lifetime, by the control plane's
/// rules; a bad name or lifetime issues nothing.
#[test]
fn key_create_takes_a_name_and_a_lifetime() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let corral = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_corral"))
            .args(args)
            .arg("--data-dir")
            .arg(&data)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let ok = |args: &[&str]| {
        let out = corral(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    ok(&["project", "create", "--name", "named"]);
    let before = chrono::Utc::now();
    let named = ok(&[
        "key",
        "create",
        "--project",
        "named",
        "--name",
        " ci ",
        "--expires-in-days",
        "30",
    ]);
    assert_eq!(named["name"], "ci");
    let expires: chrono::DateTime<chrono::Utc> =
        named["expiresAt"].as_str().unwrap().parse().unwrap();
    let days = (expires - before).num_hours();
    assert!((30 * 24..=30 * 24 + 1).contains(&days), "{named}");
    let plain = ok(&["key", "create", "--project", "named"]);
    assert!(
        plain.get("name").is_none() && plain.get("expiresAt").is_none(),
        "{plain}"
    );

    for (args, says) in [
        (vec!["--expires-in-days", "0"], "expires-in-days"),
        (vec!["--expires-in-days", "733"], "expires-in-days"),
        (vec!["--name", "a\u{7}b"], "control characters"),
    ] {
        let mut all = vec!["key", "create", "--project", "named"];
        all.extend(args);
        let out = corral(&all);
        assert!(!out.status.success(), "{all:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{all:?}: {stderr}");
    }
}
