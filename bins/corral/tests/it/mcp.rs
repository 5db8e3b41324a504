//! The MCP server through the real binary (issue 24): `/mcp` on the API's listener driven as
//! an MCP client would (JSON-RPC over streamable HTTP) against Morph's loopback fake, and
//! `corral mcp` on stdio. The official Python SDK's journey on `local` is `cargo xtask mcp`.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::serve::{Server, create_project, set_default_profile, start};

const PROVIDER_KEY: &str = "mcp-morph-key";

struct World {
    _tmp: tempfile::TempDir,
    _morph: corral_provider_morph::fake::Fake,
    server: Server,
    key: String,
    http: reqwest::Client,
}

impl World {
    async fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let morph = corral_provider_morph::fake::Fake::start_with_key(PROVIDER_KEY).await;
        let config = tmp.path().join("corral.toml");
        std::fs::write(
            &config,
            format!(
                "[providers]\nenabled = [\"morph\"]\n[providers.morph]\nbase_url = \"{}\"\n",
                morph.base_url()
            ),
        )
        .unwrap();
        let url = format!("sqlite://{}", data.join("corral.db").display());
        let key = create_project(&data, &url, "default").1;
        set_default_profile(&data, "morph", PROVIDER_KEY, &["--database-url", &url]);
        let server = start(&data, &config, 1);
        Self {
            _tmp: tmp,
            _morph: morph,
            server,
            key,
            http: reqwest::Client::new(),
        }
    }

    /// One JSON-RPC request to `/mcp` with `key` (none: no `Authorization`).
    async fn post(&self, key: Option<&str>, body: &Value) -> (StatusCode, Value) {
        let mut req = self
            .http
            .post(format!("{}/mcp", self.server.base))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(body);
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `tools/call`: the structured content and whether it is a tool error.
    async fn call(&self, name: &str, arguments: Value) -> (Value, bool) {
        let (status, answer) = self
            .post(
                Some(&self.key),
                &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                        "params": {"name": name, "arguments": arguments}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{name}: {answer}");
        let result = &answer["result"];
        (
            result["structuredContent"].clone(),
            result["isError"] == json!(true),
        )
    }

    async fn ok(&self, name: &str, arguments: Value) -> Value {
        let (content, is_error) = self.call(name, arguments).await;
        assert!(!is_error, "{name} failed: {content}");
        content
    }
}

#[tokio::test]
async fn mcp_over_http_runs_commands_on_a_provider_fake_with_the_api_key_and_v3_codes() {
    let w = World::new().await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}}});

    // Authenticated as the API: no key, a wrong key, never the console's cookie.
    let (status, body) = w.post(None, &init).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "missing_api_key");
    let (status, body) = w.post(Some("crl_nope_nope"), &init).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    let (status, body) = w.post(Some(&w.key), &init).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"]["serverInfo"]["name"], "corral");
    let (status, body) = w
        .post(
            Some(&w.key),
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // The eleven tools of before and the six of the sandbox lifecycle.
    let mut names: Vec<&str> = body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names.len(), 17, "{names:?}");
    for lifecycle in [
        "sandbox_fork",
        "sandbox_resume",
        "sandbox_stop",
        "snapshot_create",
        "snapshot_delete",
        "snapshot_list",
    ] {
        assert!(names.contains(&lifecycle), "{lifecycle} missing: {names:?}");
    }

    // A create's input is checked by its schema before any call.
    let (content, is_error) = w.call("sandbox_create", json!({"provider": "nope"})).await;
    assert!(is_error);
    assert_eq!(content["error"]["code"], "invalid_request");

    let created = w
        .ok(
            "sandbox_create",
            json!({"provider": "morph", "image": "snapshot_mcp"}),
        )
        .await;
    let sid = created["sandbox"]["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = w.ok("sandbox_get", json!({"sandboxId": sid})).await;
        if got["sandbox"]["status"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "never running: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let ran = w
        .ok(
            "command_run",
            json!({"sandboxId": sid, "command": "echo hi; echo oops >&2; exit 4", "timeoutSeconds": 20}),
        )
        .await;
    assert_eq!(ran["stdout"], "hi\n", "{ran}");
    assert_eq!(ran["stderr"], "oops\n", "{ran}");
    assert_eq!(ran["exitCode"], 4);

    let started = w
        .ok(
            "command_start",
            json!({"sandboxId": sid, "command": "echo one; sleep 1; echo two"}),
        )
        .await;
    let cmd = started["commandId"].as_str().unwrap().to_owned();
    let (mut cursor, mut seen, mut before_exit) = (0, String::new(), false);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = w
            .ok(
                "command_output",
                json!({"sandboxId": sid, "commandId": cmd, "cursor": cursor, "waitSeconds": 5}),
            )
            .await;
        let next = page["cursor"].as_u64().unwrap();
        assert!(next >= cursor, "{page}");
        cursor = next;
        seen.push_str(page["stdout"].as_str().unwrap());
        if page["exited"] == json!(true) {
            assert_eq!(page["exitCode"], 0, "{page}");
            break;
        }
        before_exit |= seen.contains("one");
        assert!(Instant::now() < deadline, "never ended: {seen:?}");
    }
    assert_eq!(seen, "one\ntwo\n");
    assert!(before_exit, "no output was read before the command ended");

    let gone = w.ok("sandbox_delete", json!({"sandboxId": sid})).await;
    assert_eq!(gone["sandbox"]["status"], "deleted");
    let (content, is_error) = w
        .call("command_run", json!({"sandboxId": sid, "command": "true"}))
        .await;
    assert!(is_error, "{content}");
    assert_eq!(content["error"]["code"], "sandbox_not_found", "{content}");
}

#[tokio::test]
async fn corral_mcp_serves_the_tools_on_stdio() {
    let w = World::new().await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_corral"))
        .arg("mcp")
        .env("CORRAL_URL", &w.server.base)
        .env("CORRAL_API_KEY", &w.key)
        .env("CORRAL_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut exchange = |message: Value| -> Value {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        if message.get("id").is_none() {
            // A notification: no answer.
            return Value::Null;
        }
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    };
    let init = exchange(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}}}),
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "corral", "{init}");
    exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let providers = exchange(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "providers_list", "arguments": {}}}));
    let listed = &providers["result"]["structuredContent"]["providers"];
    assert_eq!(listed[0]["provider"], "morph", "{providers}");
    // Unknown ids are refused by the tool, not by the protocol.
    let missing = exchange(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "sandbox_get", "arguments": {"sandboxId": "sbx_morph_01m8dak91d8x6avqqe8zfq036y"}}}));
    assert_eq!(missing["result"]["isError"], true, "{missing}");
    assert_eq!(
        missing["result"]["structuredContent"]["error"]["code"], "sandbox_not_found",
        "{missing}"
    );
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "corral mcp exited {status}");
}
