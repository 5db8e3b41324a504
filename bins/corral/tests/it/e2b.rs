//! The E2B-compatible front door through the real binary: the published `e2b` SDKs' journeys
//! (Python `bins/corral/tests/e2b/journey.py`, JavaScript `journey.mjs`, each configured only
//! by its SDK's environment variables) on `local` and through the E2B adapter's loopback fake;
//! the door's authorization, its errors in E2B's and Connect's forms, and its timeout sweep
//! over HTTP.
//!
//! The SDKs live in `target/e2b-venv` (`cargo xtask e2b-venv`) and `target/e2b-js` (`cargo
//! xtask e2b-js`, with Node.js on the PATH); `cargo xtask ci` installs both first. Without one
//! its journeys fail under `CI=true` and print SKIPPED otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

use crate::serve::{Server, cli, set_default_profile, start};

/// A published E2B SDK, installed, and how it runs its journey.
enum Sdk {
    /// `target/e2b-venv/bin/python`.
    Python(PathBuf),
    /// `target/e2b-js`, the npm prefix the SDK is installed under.
    Js(PathBuf),
}

impl Sdk {
    /// `target/e2b-venv/bin/python`, when the Python SDK is installed.
    fn python(test: &str) -> Option<Sdk> {
        let venv = target().join("e2b-venv");
        let missing = (!venv.join("e2b==2.63.0").exists()).then(|| {
            format!(
                "the e2b Python SDK is missing from {}: `cargo xtask e2b-venv` installs it",
                venv.display()
            )
        });
        required(test, missing).then(|| Sdk::Python(venv.join("bin/python")))
    }

    /// `target/e2b-js`, when the JavaScript SDK (the version `xtask/src/e2b.rs` pins) is
    /// installed there and Node.js runs.
    fn js(test: &str) -> Option<Sdk> {
        let prefix = target().join("e2b-js");
        let version = std::fs::read_to_string(prefix.join("node_modules/e2b/package.json"))
            .ok()
            .and_then(|p| serde_json::from_str::<Value>(&p).ok())
            .map(|p| p["version"].clone());
        let node = Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        let missing = if !node {
            Some("Node.js (`node`) is not on the PATH".to_owned())
        } else if version != Some(json!("2.51.0")) {
            Some(format!(
                "the e2b JavaScript SDK 2.51.0 is missing from {}: `cargo xtask e2b-js` installs it",
                prefix.display()
            ))
        } else {
            None
        };
        required(test, missing).then_some(Sdk::Js(prefix))
    }

    /// The journey for `template`, not yet configured.
    fn journey(&self, template: &str) -> Command {
        let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2b");
        match self {
            Sdk::Python(python) => {
                let mut c = Command::new(python);
                c.arg(scripts.join("journey.py")).arg(template);
                c
            }
            Sdk::Js(prefix) => {
                let mut c = Command::new("node");
                c.arg(scripts.join("journey.mjs")).arg(template).arg(prefix);
                c
            }
        }
    }

    /// The line a journey that passed ends with.
    fn passed(&self) -> &'static str {
        match self {
            Sdk::Python(_) => "e2b journey: 19 steps passed",
            Sdk::Js(_) => "e2b js journey: 19 steps passed",
        }
    }
}

/// The cargo target directory.
fn target() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(&tmp).to_path_buf()
}

/// Whether `test` can run: nothing it needs is `missing`. Otherwise it fails under `CI=true`
/// and says SKIPPED.
fn required(test: &str, missing: Option<String>) -> bool {
    let Some(why) = missing else {
        return true;
    };
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(!ci, "{test}: {why}");
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// Runs `sdk`'s journey with the SDK's own settings pointed at `server`; its output.
fn run_journey(sdk: &Sdk, server: &Server, key: &str, template: &str) -> String {
    let door = format!("{}/e2b", server.base);
    let out = sdk
        .journey(template)
        .env("E2B_API_URL", &door)
        .env("E2B_SANDBOX_URL", &door)
        .env("E2B_API_KEY", key)
        // Python's key check (the JavaScript SDK has none).
        .env("E2B_VALIDATE_API_KEY", "false")
        // The SDKs' defaults, whatever the machine's environment says.
        .env_remove("E2B_DOMAIN")
        .env_remove("E2B_DEBUG")
        .env_remove("E2B_HTTP_VERSION")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the e2b journey failed on {template}:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&server.stderr)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(stdout.contains(sdk.passed()), "{stdout}");
    stdout
}

/// The journey of `sdk` on `local`.
fn journey_on_local(sdk: &Sdk) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config = tmp.path().join("corral.toml");
    std::fs::write(&config, "[providers]\nenabled = [\"local\"]\n").unwrap();
    let server = start(&data, &config, 1);
    run_journey(sdk, &server, &server.first_key(), "base");
}

/// The journey of `sdk` through the E2B adapter's fake. The fake runs commands on this machine
/// (its sandboxes are directories), so the journey's `/home/user` and `/tmp/<run id>` are made
/// here; the run id keeps runs apart.
async fn journey_through_the_e2b_adapters_fake(sdk: Sdk) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let fake = corral_provider_e2b::fake::Fake::start().await;
    let c = fake.config();
    let config = tmp.path().join("corral.toml");
    std::fs::write(
        &config,
        format!(
            "[providers]\nenabled = [\"e2b\"]\n[providers.e2b]\nbase_url = \"{}\"\n\
             envd_url_template = \"{}\"\ntrusted_hosts = [\"{}\"]\n\
             [e2b.templates]\nbase = {{ provider = \"e2b\" }}\n",
            c.base_url, c.envd_url_template, c.trusted_hosts[0]
        ),
    )
    .unwrap();
    let server = start(&data, &config, 1);
    let key = server.first_key();
    set_default_profile(&data, "e2b", corral_provider_e2b::fake::API_KEY, &[]);
    tokio::task::spawn_blocking(move || {
        run_journey(&sdk, &server, &key, "base");
        drop(server);
    })
    .await
    .unwrap();
}

#[test]
fn the_published_e2b_sdk_runs_its_journey_on_local() {
    if let Some(sdk) = Sdk::python("the_published_e2b_sdk_runs_its_journey_on_local") {
        journey_on_local(&sdk);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_e2b_sdk_runs_its_journey_through_the_e2b_adapters_fake() {
    if let Some(sdk) =
        Sdk::python("the_published_e2b_sdk_runs_its_journey_through_the_e2b_adapters_fake")
    {
        journey_through_the_e2b_adapters_fake(sdk).await;
    }
}

#[test]
fn the_published_e2b_js_sdk_runs_its_journey_on_local() {
    if let Some(sdk) = Sdk::js("the_published_e2b_js_sdk_runs_its_journey_on_local") {
        journey_on_local(&sdk);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_e2b_js_sdk_runs_its_journey_through_the_e2b_adapters_fake() {
    if let Some(sdk) =
        Sdk::js("the_published_e2b_js_sdk_runs_its_journey_through_the_e2b_adapters_fake")
    {
        journey_through_the_e2b_adapters_fake(sdk).await;
    }
}

/// A small client of the door's control side.
struct Door {
    client: Client,
    base: String,
    key: String,
}

impl Door {
    /// The door of `server`, with its first key.
    fn new(server: &Server) -> Self {
        Door {
            client: Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            base: server.base.clone(),
            key: server.first_key(),
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .client
            .request(method, format!("{}/e2b{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn create(&self, body: Value) -> Value {
        let (status, v) = self
            .call(
                reqwest::Method::POST,
                "/v2/sandboxes",
                &[("X-API-KEY", &self.key)],
                Some(body),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        v
    }

    /// A unary envd call.
    async fn rpc(
        &self,
        path: &str,
        sandbox: &str,
        token: Option<&str>,
        body: Value,
    ) -> (StatusCode, Value) {
        let mut headers = vec![
            ("E2b-Sandbox-Id", sandbox),
            ("Content-Type", "application/json"),
        ];
        if let Some(t) = token {
            headers.push(("X-Access-Token", t));
        }
        self.call(reqwest::Method::POST, path, &headers, Some(body))
            .await
    }
}

fn local_server(tmp: &Path, extra: &str) -> Server {
    let data = tmp.join("data");
    let config = tmp.join("corral.toml");
    std::fs::write(
        &config,
        format!("[providers]\nenabled = [\"local\"]\n{extra}"),
    )
    .unwrap();
    start(&data, &config, 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_door_opens_a_sandbox_only_with_its_own_token_and_answers_in_e2bs_forms() {
    let tmp = tempfile::tempdir().unwrap();
    let server = local_server(tmp.path(), "");
    let door = Door::new(&server);
    let a = door
        .create(json!({"templateID": "base", "metadata": {"n": "a"}}))
        .await;
    let b = door.create(json!({"templateID": "local"})).await;
    let (a_id, a_token) = (
        a["sandboxID"].as_str().unwrap(),
        a["envdAccessToken"].as_str().unwrap(),
    );
    let b_id = b["sandboxID"].as_str().unwrap();
    assert_eq!(a["envdVersion"], "0.5.7");
    assert_eq!(a["templateID"], "base");
    assert_eq!(b["templateID"], "local");

    // The control side: the project key as X-API-KEY, E2B's error body otherwise.
    let (status, body) = door
        .call(reqwest::Method::GET, "/v2/sandboxes", &[], None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["code"], 401, "{body}");
    let (status, _) = door
        .call(
            reqwest::Method::GET,
            "/v2/sandboxes",
            &[("X-API-KEY", "crl_wrong_key")],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = door
        .call(
            reqwest::Method::POST,
            "/v2/sandboxes",
            &[("X-API-KEY", &door.key)],
            Some(json!({"templateID": "no-such-template"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("no-such-template"),
        "{body}"
    );
    let (status, body) = door
        .call(
            reqwest::Method::POST,
            "/v2/sandboxes",
            &[("X-API-KEY", &door.key)],
            Some(json!({"templateID": "base", "timeout": 0})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = door
        .call(
            reqwest::Method::POST,
            &format!("/sandboxes/{a_id}/refreshes"),
            &[("X-API-KEY", &door.key)],
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("refreshes"),
        "{body}"
    );

    // The envd side: a's token opens a, never b; no token, a forged one or an unknown
    // sandbox are all refused alike.
    let (status, body) = door
        .rpc("/process.Process/List", a_id, Some(a_token), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (sandbox, token) in [
        (b_id, Some(a_token)),
        (a_id, None),
        (a_id, Some("prj_x.forged")),
        ("sbx_local_01hzx5z8q0t7w3m1n2p3q4r5s6", Some(a_token)),
    ] {
        let (status, body) = door
            .rpc("/process.Process/List", sandbox, token, json!({}))
            .await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{sandbox} {token:?}: {body}"
        );
        assert_eq!(body["code"], "unauthenticated", "{body}");
    }
    // Connect errors for the unknown and the malformed.
    let (status, body) = door
        .rpc(
            "/process.Process/SendSignal",
            a_id,
            Some(a_token),
            json!({"process": {"pid": 7}, "signal": "SIGNAL_SIGKILL"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "not_found");
    let (status, body) = door
        .rpc(
            "/filesystem.Filesystem/Stat",
            a_id,
            Some(a_token),
            json!({"path": "/no/such/path"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = door
        .rpc(
            "/filesystem.Filesystem/WatchDir",
            a_id,
            Some(a_token),
            json!({"path": "/"}),
        )
        .await;
    assert_eq!(status.as_u16(), 501, "{body}");
    assert_eq!(body["code"], "unimplemented");

    // A sandbox made through Corral's own API can be connected to, and then listed.
    let (status, native) = {
        let resp = door
            .client
            .post(format!("{}/v1/sandboxes", door.base))
            .bearer_auth(&door.key)
            .json(&json!({"provider": "local"}))
            .send()
            .await
            .unwrap();
        (resp.status(), resp.json::<Value>().await.unwrap())
    };
    assert_eq!(status, StatusCode::CREATED, "{native}");
    let native_id = native["id"].as_str().unwrap();
    let (status, connected) = door
        .call(
            reqwest::Method::POST,
            &format!("/v2/sandboxes/{native_id}/connect"),
            &[("X-API-KEY", &door.key)],
            Some(json!({"timeout": 60})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{connected}");
    assert_eq!(connected["templateID"], "local");
    // It keeps its own lifetime: connecting with a timeout does not give it a short one.
    let (_, detail) = door
        .call(
            reqwest::Method::GET,
            &format!("/sandboxes/{native_id}"),
            &[("X-API-KEY", &door.key)],
            None,
        )
        .await;
    let end = chrono::DateTime::parse_from_rfc3339(detail["endAt"].as_str().unwrap()).unwrap();
    assert!(
        end.timestamp() > chrono::Utc::now().timestamp() + 365 * 86_400,
        "{detail}"
    );
    let (_, listed) = door
        .call(
            reqwest::Method::GET,
            "/v2/sandboxes?limit=2",
            &[("X-API-KEY", &door.key)],
            None,
        )
        .await;
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    let (_, filtered) = door
        .call(
            reqwest::Method::GET,
            "/v2/sandboxes?metadata=n%3Da",
            &[("X-API-KEY", &door.key)],
            None,
        )
        .await;
    let ids: Vec<&str> = filtered
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sandboxID"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![a_id], "{filtered}");

    // Killed: 204 once, then not found; its token opens nothing that runs.
    let (status, _) = door
        .call(
            reqwest::Method::DELETE,
            &format!("/sandboxes/{a_id}"),
            &[("X-API-KEY", &door.key)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = door
        .call(
            reqwest::Method::DELETE,
            &format!("/sandboxes/{a_id}"),
            &[("X-API-KEY", &door.key)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = door
        .call(
            reqwest::Method::GET,
            "/health",
            &[("E2b-Sandbox-Id", a_id), ("X-Access-Token", a_token)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    // The words the SDK reads as "killed or past its timeout".
    assert!(
        body["message"].as_str().unwrap().contains("was not found"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_past_its_e2b_timeout_is_ended_and_set_timeout_moves_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let server = local_server(tmp.path(), "");
    let door = Door::new(&server);
    let short = door
        .create(json!({"templateID": "base", "timeout": 2}))
        .await;
    let kept = door
        .create(json!({"templateID": "base", "timeout": 2}))
        .await;
    let (short_id, kept_id) = (
        short["sandboxID"].as_str().unwrap(),
        kept["sandboxID"].as_str().unwrap(),
    );
    let (status, _) = door
        .call(
            reqwest::Method::POST,
            &format!("/sandboxes/{kept_id}/timeout"),
            &[("X-API-KEY", &door.key)],
            Some(json!({"timeout": 300})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // The sweep runs every 5 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    let record = |id: String| {
        let client = door.client.clone();
        let (base, key) = (door.base.clone(), door.key.clone());
        async move {
            client
                .get(format!("{base}/v1/sandboxes/{id}"))
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    loop {
        let s = record(short_id.to_owned()).await;
        if s["status"] == "deleted" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ended after its timeout: {s}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let k = record(kept_id.to_owned()).await;
    assert_eq!(k["status"], "running", "{k}");
    let (status, detail) = door
        .call(
            reqwest::Method::GET,
            &format!("/sandboxes/{kept_id}"),
            &[("X-API-KEY", &door.key)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let end = chrono::DateTime::parse_from_rfc3339(detail["endAt"].as_str().unwrap()).unwrap();
    assert!(
        end.timestamp() - chrono::Utc::now().timestamp() > 250,
        "{detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_own_template_decides_where_an_e2b_create_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let server = local_server(tmp.path(), "");
    let data = tmp.path().join("data");
    let door = Door::new(&server);
    let create = |template: &'static str| {
        let door = &door;
        async move {
            door.call(
                reqwest::Method::POST,
                "/v2/sandboxes",
                &[("X-API-KEY", &door.key)],
                Some(json!({"templateID": template})),
            )
            .await
        }
    };
    // Unknown to the server's configuration: not found.
    let (status, body) = create("team-tools").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let out = cli(
        &data,
        &[
            "e2b-template",
            "set",
            "--project",
            "default",
            "--name",
            "team-tools",
            "--provider",
            "local",
        ],
        &[],
    );
    let set: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        set,
        json!({"name": "team-tools", "provider": "local", "image": null})
    );
    let (status, body) = create("team-tools").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["templateID"], "team-tools");
    assert!(
        body["sandboxID"]
            .as_str()
            .unwrap()
            .starts_with("sbx_local_"),
        "{body}"
    );
    let listed = cli(&data, &["e2b-template", "ls", "--project", "default"], &[]);
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).lines().count(),
        1,
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    // A provider this server does not run is refused before anything is stored.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_corral"))
        .args([
            "e2b-template",
            "set",
            "--project",
            "default",
            "--name",
            "x",
            "--provider",
            "daytona",
            "--data-dir",
        ])
        .arg(&data)
        .arg("--config")
        .arg(tmp.path().join("corral.toml"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not enabled"));
    cli(
        &data,
        &[
            "e2b-template",
            "rm",
            "--project",
            "default",
            "--name",
            "team-tools",
        ],
        &[],
    );
    let (status, _) = create("team-tools").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_a_sandbox_connect_resumes_it_and_the_list_tells_them_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let server = local_server(tmp.path(), "");
    let door = Door::new(&server);
    let key = door.key.clone();
    let auth = [("X-API-KEY", key.as_str())];
    let paused = door
        .create(json!({"templateID": "base", "metadata": {"n": "p"}}))
        .await;
    let running = door
        .create(json!({"templateID": "base", "metadata": {"n": "r"}}))
        .await;
    let (p_id, p_token) = (
        paused["sandboxID"].as_str().unwrap(),
        paused["envdAccessToken"].as_str().unwrap(),
    );
    let r_id = running["sandboxID"].as_str().unwrap();
    let post = |path: String, body: Option<Value>| {
        let door = &door;
        async move { door.call(reqwest::Method::POST, &path, &auth, body).await }
    };
    let get = |path: String| {
        let door = &door;
        async move { door.call(reqwest::Method::GET, &path, &auth, None).await }
    };
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["sandboxID"].as_str().unwrap().to_owned())
            .collect()
    };

    // A file to find after the resume.
    let (status, body) = door
        .rpc("/process.Process/List", p_id, Some(p_token), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let up = door
        .client
        .post(format!("{}/e2b/files?path=/home/user/kept.txt", door.base))
        .header("E2b-Sandbox-Id", p_id)
        .header("X-Access-Token", p_token)
        .header("Content-Type", "application/octet-stream")
        .body("kept across the pause")
        .send()
        .await
        .unwrap();
    assert_eq!(up.status(), StatusCode::OK);

    // The legacy resume of a running sandbox: E2B's 409.
    let (status, body) = post(format!("/sandboxes/{p_id}/resume"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["code"], 409, "{body}");

    // Pause: 204 once stopped (Corral's stop), 409 the second time.
    let (status, body) = post(format!("/sandboxes/{p_id}/pause"), Some(json!({}))).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let native = door
        .client
        .get(format!("{}/v1/sandboxes/{p_id}", door.base))
        .bearer_auth(&door.key)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(native["status"], "stopped", "{native}");
    let (status, body) = post(format!("/sandboxes/{p_id}/pause"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    // Get and list say paused; the state filter tells them apart.
    let (status, detail) = get(format!("/sandboxes/{p_id}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["state"], "paused", "{detail}");
    let (_, only_paused) = get("/v2/sandboxes?state=paused".into()).await;
    assert_eq!(ids(&only_paused), vec![p_id.to_owned()], "{only_paused}");
    assert_eq!(only_paused[0]["state"], "paused");
    let (_, only_running) = get("/v2/sandboxes?state=running".into()).await;
    assert_eq!(ids(&only_running), vec![r_id.to_owned()], "{only_running}");
    let (_, both) = get("/v2/sandboxes?state=running%2Cpaused".into()).await;
    assert_eq!(both.as_array().unwrap().len(), 2, "{both}");
    let (_, all) = get("/v2/sandboxes".into()).await;
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    let (status, body) = get("/v2/sandboxes?state=asleep".into()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // While paused: no timeout to set, and envd refuses work (the sandbox is stopped).
    let (status, body) = post(
        format!("/sandboxes/{p_id}/timeout"),
        Some(json!({"timeout": 60})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, body) = door
        .rpc(
            "/filesystem.Filesystem/Stat",
            p_id,
            Some(p_token),
            json!({"path": "/home/user/kept.txt"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "failed_precondition", "{body}");

    // Connect resumes it (201) with a new lifetime; a second connect finds it running (200).
    let (status, connected) = post(
        format!("/v2/sandboxes/{p_id}/connect"),
        Some(json!({"timeout": 120})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{connected}");
    assert_eq!(connected["sandboxID"], p_id);
    // A fresh token (each names its end), which opens the resumed sandbox.
    let fresh = connected["envdAccessToken"].as_str().unwrap();
    let (status, body) = door
        .rpc(
            "/filesystem.Filesystem/Stat",
            p_id,
            Some(fresh),
            json!({"path": "/home/user/kept.txt"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, detail) = get(format!("/sandboxes/{p_id}")).await;
    assert_eq!(detail["state"], "running", "{detail}");
    let end = chrono::DateTime::parse_from_rfc3339(detail["endAt"].as_str().unwrap()).unwrap();
    let left = end.timestamp() - chrono::Utc::now().timestamp();
    assert!((60..=125).contains(&left), "{detail}");
    let (status, body) = post(
        format!("/sandboxes/{p_id}/connect"),
        Some(json!({"timeout": 60})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let kept = door
        .client
        .get(format!("{}/e2b/files?path=/home/user/kept.txt", door.base))
        .header("E2b-Sandbox-Id", p_id)
        .header("X-Access-Token", p_token)
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status(), StatusCode::OK);
    assert_eq!(kept.text().await.unwrap(), "kept across the pause");

    // The legacy resume after another pause: 201 and E2B's `Sandbox`.
    let (status, body) = post(format!("/sandboxes/{p_id}/pause"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = post(
        format!("/sandboxes/{p_id}/resume"),
        Some(json!({"timeout": 60})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["sandboxID"], p_id, "{body}");
    let (_, detail) = get(format!("/sandboxes/{p_id}")).await;
    assert_eq!(detail["state"], "running", "{detail}");

    // Killed while paused: gone, as any killed sandbox.
    let (status, body) = post(format!("/sandboxes/{r_id}/pause"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _) = door
        .call(
            reqwest::Method::DELETE,
            &format!("/sandboxes/{r_id}"),
            &auth,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = post(
        format!("/sandboxes/{r_id}/connect"),
        Some(json!({"timeout": 60})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshots_are_templates_to_create_from_list_and_delete_and_a_fork_answers_its_copies() {
    let tmp = tempfile::tempdir().unwrap();
    let server = local_server(tmp.path(), "");
    let door = Door::new(&server);
    let key = door.key.clone();
    let auth = [("X-API-KEY", key.as_str())];
    let call = |method: reqwest::Method, path: String, body: Option<Value>| {
        let door = &door;
        async move { door.call(method, &path, &auth, body).await }
    };
    let (post, get, delete) = (
        reqwest::Method::POST,
        reqwest::Method::GET,
        reqwest::Method::DELETE,
    );
    let source = door
        .create(json!({"templateID": "base", "metadata": {"n": "s"}, "envVars": {"V": "kept"}}))
        .await;
    let (id, token) = (
        source["sandboxID"].as_str().unwrap(),
        source["envdAccessToken"].as_str().unwrap(),
    );
    let write = |sandbox: String, token: String, content: &'static str| {
        let door = &door;
        async move {
            let up = door
                .client
                .post(format!("{}/e2b/files?path=/home/user/note.txt", door.base))
                .header("E2b-Sandbox-Id", sandbox)
                .header("X-Access-Token", token)
                .header("Content-Type", "application/octet-stream")
                .body(content)
                .send()
                .await
                .unwrap();
            assert_eq!(up.status(), StatusCode::OK);
        }
    };
    let read = |sandbox: String, token: String| {
        let door = &door;
        async move {
            let got = door
                .client
                .get(format!("{}/e2b/files?path=/home/user/note.txt", door.base))
                .header("E2b-Sandbox-Id", sandbox)
                .header("X-Access-Token", token)
                .send()
                .await
                .unwrap();
            assert_eq!(got.status(), StatusCode::OK);
            got.text().await.unwrap()
        }
    };
    write(id.into(), token.into(), "before").await;

    // A snapshot: 201 with E2B's SnapshotInfo, its id Corral's.
    let (status, snap) = call(
        post.clone(),
        format!("/sandboxes/{id}/snapshots"),
        Some(json!({"name": "first"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{snap}");
    let snap_id = snap["snapshotID"].as_str().unwrap().to_owned();
    assert!(snap_id.starts_with("snp_local_"), "{snap}");
    assert_eq!(snap["names"], json!(["first"]), "{snap}");
    let (status, unnamed) = call(post.clone(), format!("/sandboxes/{id}/snapshots"), None).await;
    assert_eq!(status, StatusCode::CREATED, "{unnamed}");
    assert_eq!(unnamed["names"], json!([]), "{unnamed}");
    let unnamed_id = unnamed["snapshotID"].as_str().unwrap().to_owned();
    // Bad input, unknown sandboxes: E2B's 400 and 404.
    let (status, body) = call(
        post.clone(),
        format!("/sandboxes/{id}/snapshots"),
        Some(json!({"name": ""})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], 400, "{body}");
    let ghost = "sbx_local_01jz0000000000000000000000";
    let (status, body) = call(post.clone(), format!("/sandboxes/{ghost}/snapshots"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], 404, "{body}");
    write(id.into(), token.into(), "after").await;

    // The list: newest first, filtered by sandbox and by name or id, paged by X-Next-Token.
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["snapshotID"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, all) = call(get.clone(), "/snapshots".into(), None).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(
        ids(&all),
        vec![unnamed_id.clone(), snap_id.clone()],
        "{all}"
    );
    let (_, mine) = call(get.clone(), format!("/snapshots?sandboxID={id}"), None).await;
    assert_eq!(ids(&mine).len(), 2, "{mine}");
    let (_, other) = call(get.clone(), format!("/snapshots?sandboxID={ghost}"), None).await;
    assert_eq!(ids(&other), Vec::<String>::new(), "{other}");
    let (_, named) = call(get.clone(), "/snapshots?name=first".into(), None).await;
    assert_eq!(ids(&named), vec![snap_id.clone()], "{named}");
    let (_, by_id) = call(get.clone(), format!("/snapshots?name={unnamed_id}"), None).await;
    assert_eq!(ids(&by_id), vec![unnamed_id.clone()], "{by_id}");
    let first = door
        .client
        .get(format!("{}/e2b/snapshots?limit=1", door.base))
        .header("X-API-KEY", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let next = first.headers()["x-next-token"].to_str().unwrap().to_owned();
    assert_eq!(ids(&first.json().await.unwrap()), vec![unnamed_id.clone()]);
    let (_, second) = call(
        get.clone(),
        format!("/snapshots?limit=1&nextToken={next}"),
        None,
    )
    .await;
    assert_eq!(ids(&second), vec![snap_id.clone()], "{second}");
    for bad in ["limit=0", "limit=101", "limit=x", "nextToken=nonsense"] {
        let (status, body) = call(get.clone(), format!("/snapshots?{bad}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }

    // A create whose template is the snapshot's id restores it.
    let restored = door
        .create(json!({"templateID": snap_id, "timeout": 60}))
        .await;
    let r_id = restored["sandboxID"].as_str().unwrap();
    assert_ne!(r_id, id);
    assert_eq!(restored["templateID"], snap_id.as_str(), "{restored}");
    assert_eq!(
        read(
            r_id.into(),
            restored["envdAccessToken"].as_str().unwrap().into()
        )
        .await,
        "before"
    );
    assert_eq!(read(id.into(), token.into()).await, "after");

    // A fork: 201, one entry per copy, each a running sandbox with its own token and the
    // source's metadata; counts past Corral's 10 and unknown sandboxes are refused.
    let (status, forks) = call(
        post.clone(),
        format!("/sandboxes/{id}/fork"),
        Some(json!({"count": 2, "timeout": 60})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{forks}");
    let forks = forks.as_array().unwrap().clone();
    assert_eq!(forks.len(), 2);
    for f in &forks {
        assert!(f.get("error").is_none(), "{f}");
        let (f_id, f_token) = (
            f["sandbox"]["sandboxID"].as_str().unwrap(),
            f["sandbox"]["envdAccessToken"].as_str().unwrap(),
        );
        assert_ne!(f_id, id);
        assert_eq!(read(f_id.into(), f_token.into()).await, "after");
        let (status, detail) = call(get.clone(), format!("/sandboxes/{f_id}"), None).await;
        assert_eq!(status, StatusCode::OK, "{detail}");
        assert_eq!(detail["metadata"]["n"], "s", "{detail}");
        let end = chrono::DateTime::parse_from_rfc3339(detail["endAt"].as_str().unwrap()).unwrap();
        let left = end.timestamp() - chrono::Utc::now().timestamp();
        assert!((30..=65).contains(&left), "{detail}");
    }
    let (status, body) = call(
        post.clone(),
        format!("/sandboxes/{id}/fork"),
        Some(json!({"count": 11})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = call(post.clone(), format!("/sandboxes/{ghost}/fork"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // Delete: 204, then 404 (the SDK's False); other templates are not found; a deleted
    // snapshot is no template to create from, nor listed.
    let (status, body) = call(delete.clone(), format!("/templates/{snap_id}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(delete.clone(), format!("/templates/{snap_id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], 404, "{body}");
    let (status, _) = call(delete.clone(), "/templates/base".into(), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = call(
        post.clone(),
        "/v2/sandboxes".into(),
        Some(json!({"templateID": snap_id})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (_, named) = call(get.clone(), "/snapshots?name=first".into(), None).await;
    assert_eq!(ids(&named), Vec::<String>::new(), "{named}");
    // Without a key: 401, as every control call.
    let (status, _) = door.call(get.clone(), "/snapshots", &[], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A sandbox's access token is issued to the API key that created (or fetched) it: once that
/// key is revoked — here by another process, the admin CLI — the token no longer runs
/// commands or reads files, within the server's key cache bound; a token fetched with another
/// live key of the project keeps working (and an upload too large for it is a 413).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_api_key_ends_the_access_tokens_issued_to_it() {
    let tmp = tempfile::tempdir().unwrap();
    let server = local_server(tmp.path(), "");
    let door = Door::new(&server);
    let data = tmp.path().join("data");
    let created = door.create(json!({"templateID": "base"})).await;
    let (id, token) = (
        created["sandboxID"].as_str().unwrap(),
        created["envdAccessToken"].as_str().unwrap(),
    );
    let (status, body) = door
        .rpc("/process.Process/List", id, Some(token), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // A second key of the same project fetches the sandbox: its token is its own.
    let out = cli(&data, &["key", "create", "--project", "default"], &[]);
    let issued: Value = serde_json::from_slice(&out.stdout).unwrap();
    let second = issued["apiKey"].as_str().unwrap();
    let (status, detail) = door
        .call(
            reqwest::Method::GET,
            &format!("/sandboxes/{id}"),
            &[("X-API-KEY", second)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let second_token = detail["envdAccessToken"].as_str().unwrap().to_owned();
    assert_ne!(second_token, token);

    let key_id = door.key.split('_').nth(1).unwrap();
    cli(&data, &["key", "revoke", "--key-id", key_id], &[]);
    let deadline = Instant::now() + corral_registry::DEFAULT_CACHE_TTL + Duration::from_secs(10);
    loop {
        let (status, body) = door
            .rpc("/process.Process/List", id, Some(token), json!({}))
            .await;
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        assert_eq!(status, StatusCode::OK, "until the cache bound: {body}");
        assert!(
            Instant::now() < deadline,
            "the revoked key's token still works"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Files too, and the other key's token still opens the sandbox.
    let (status, _) = door
        .call(
            reqwest::Method::GET,
            "/files?path=/etc/hostname",
            &[("E2b-Sandbox-Id", id), ("X-Access-Token", token)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = door
        .rpc("/process.Process/List", id, Some(&second_token), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // A file larger than the largest write is 413 (not a 429 the SDKs would retry).
    let too_large = vec![b'x'; corral_domain::limits::MAX_WRITE_BYTES + 1];
    let resp = door
        .client
        .post(format!("{}/e2b/files?path=/tmp/big", door.base))
        .header("E2b-Sandbox-Id", id)
        .header("X-Access-Token", second_token.as_str())
        .header("Content-Type", "application/octet-stream")
        .body(too_large)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
}
