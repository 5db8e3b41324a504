//! The MCP server through the real binary (issue 24): `/mcp` on the API's listener driven as
//! an MCP client would (JSON-RPC over streamable HTTP) against Morph's loopback fake, and
//! `corral mcp` on stdio. The official Python SDK's journey on `local` is `cargo xtask mcp`.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::serve::{Server, cli, create_project, set_default_profile, start};

const PROVIDER_KEY: &str = "mcp-morph-key";

struct World {
    _tmp: tempfile::TempDir,
    _morph: corral_provider_morph::fake::Fake,
    server: Server,
    /// The first project's key (`default`).
    key: String,
    /// Every project's key, in the order asked for (`default` first).
    keys: Vec<String>,
    http: reqwest::Client,
}

impl World {
    async fn new() -> Self {
        Self::with("", &["default"]).await
    }

    /// A server over Morph's fake with `extra` configuration, and the projects `names`
    /// (`default` first), each with its own key and Morph profile.
    async fn with(extra: &str, names: &[&str]) -> Self {
        const VAR: &str = "CORRAL_TEST_PROFILE_CREDENTIAL";
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let morph = corral_provider_morph::fake::Fake::start_with_key(PROVIDER_KEY).await;
        let config = tmp.path().join("corral.toml");
        std::fs::write(
            &config,
            format!(
                "[providers]\nenabled = [\"morph\"]\n[providers.morph]\nbase_url = \"{}\"\n{extra}",
                morph.base_url()
            ),
        )
        .unwrap();
        let url = format!("sqlite://{}", data.join("corral.db").display());
        let mut keys = Vec::new();
        for name in names {
            keys.push(create_project(&data, &url, name).1);
            if *name == "default" {
                set_default_profile(&data, "morph", PROVIDER_KEY, &["--database-url", &url]);
            } else {
                cli(
                    &data,
                    &[
                        "profile",
                        "set",
                        "--project",
                        name,
                        "--provider",
                        "morph",
                        "--credential-env",
                        VAR,
                        "--database-url",
                        &url,
                    ],
                    &[(VAR, PROVIDER_KEY)],
                );
            }
        }
        let server = start(&data, &config, 1);
        Self {
            _tmp: tmp,
            _morph: morph,
            server,
            key: keys[0].clone(),
            keys,
            http: reqwest::Client::new(),
        }
    }

    /// One JSON-RPC request to `/mcp` with `key` (none: no `Authorization`).
    async fn post(&self, key: Option<&str>, body: &Value) -> (StatusCode, Value) {
        rpc(&self.http, &self.server.base, key, None, body)
            .await
            .unwrap()
    }

    /// `tools/call`: the structured content and whether it is a tool error.
    async fn call(&self, name: &str, arguments: Value) -> (Value, bool) {
        self.call_as(&self.key, name, arguments).await
    }

    /// [`World::call`] with `key`.
    async fn call_as(&self, key: &str, name: &str, arguments: Value) -> (Value, bool) {
        tool(&self.http, &self.server.base, key, name, arguments)
            .await
            .unwrap()
    }

    async fn ok(&self, name: &str, arguments: Value) -> Value {
        let (content, is_error) = self.call(name, arguments).await;
        assert!(!is_error, "{name} failed: {content}");
        content
    }

    /// A new Morph sandbox of the project of `key`, once it is running: its id.
    async fn running_sandbox(&self, key: &str) -> String {
        let (created, is_error) = self
            .call_as(
                key,
                "sandbox_create",
                json!({"provider": "morph", "image": "snapshot_mcp"}),
            )
            .await;
        assert!(!is_error, "{created}");
        let sid = created["sandbox"]["id"].as_str().unwrap().to_owned();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (got, is_error) = self
                .call_as(key, "sandbox_get", json!({"sandboxId": sid}))
                .await;
            assert!(!is_error, "{got}");
            if got["sandbox"]["status"] == "running" {
                return sid;
            }
            assert!(Instant::now() < deadline, "never running: {got}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One JSON-RPC request to `base`'s `/mcp` with `key` (none: no `Authorization`) and
/// `origin` (none: no `Origin`); a transport failure is `Err`.
async fn rpc(
    http: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    origin: Option<&str>,
    body: &Value,
) -> Result<(StatusCode, Value), String> {
    let mut req = http
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(body);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    if let Some(origin) = origin {
        req = req.header("origin", origin);
    }
    let resp = req.send().await.map_err(|e| format!("{e:?}"))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| format!("{e:?}"))?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

/// `tools/call` of `name` with `key`: the structured content and whether it is a tool
/// error; anything but a 200 JSON-RPC answer is `Err`.
async fn tool(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    name: &str,
    arguments: Value,
) -> Result<(Value, bool), String> {
    let (status, answer) = rpc(
        http,
        base,
        Some(key),
        None,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}}),
    )
    .await?;
    if status != StatusCode::OK {
        return Err(format!("{name}: {status} {answer}"));
    }
    let result = &answer["result"];
    Ok((
        result["structuredContent"].clone(),
        result["isError"] == json!(true),
    ))
}

/// A client whose connections come from `127.0.0.<n>`.
fn client_from(n: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from([127, 0, 0, n]))
        .build()
        .unwrap()
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

/// Issue 34, finding 2: `/mcp`'s tools once called the API over a loopback connection each,
/// so every MCP user shared 127.0.0.1's per-address connection cap: one project's long
/// `command_run` calls held it full, and another project's MCP call and `/healthz` from
/// 127.0.0.1 were refused. In process, a tool call takes no connection but its caller's own.
#[tokio::test]
async fn one_projects_long_mcp_calls_leave_another_projects_calls_and_healthz_served() {
    const CAP: usize = 3;
    let w = World::with(
        &format!("[http]\nmax_connections_per_address = {CAP}\n"),
        &["default", "other"],
    )
    .await;
    let (a, b) = (w.keys[0].clone(), w.keys[1].clone());
    let base = w.server.base.clone();
    let sa = w.running_sandbox(&a).await;
    let sb = w.running_sandbox(&b).await;
    let (from_a, from_b, from_loopback) = (client_from(2), client_from(3), client_from(1));

    // Project A: as many long `command_run` calls at once as its address may hold.
    let long: Vec<_> = (0..CAP)
        .map(|_| {
            let (http, base, key, sid) = (from_a.clone(), base.clone(), a.clone(), sa.clone());
            tokio::spawn(async move {
                tool(
                    &http,
                    &base,
                    &key,
                    "command_run",
                    json!({"sandboxId": sid, "command": "sleep 8; echo done", "timeoutSeconds": 30}),
                )
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Meanwhile project B's call, from an address of its own, and `/healthz` from 127.0.0.1.
    let started = Instant::now();
    let ran = tool(
        &from_b,
        &base,
        &b,
        "command_run",
        json!({"sandboxId": sb, "command": "echo b", "timeoutSeconds": 20}),
    )
    .await;
    let (content, is_error) = ran.expect("project B's MCP call failed");
    assert!(!is_error, "project B's MCP call failed: {content}");
    assert_eq!(content["stdout"], "b\n", "{content}");
    let health = from_loopback
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect("/healthz from 127.0.0.1 was refused");
    assert_eq!(health.status(), StatusCode::OK);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "B waited for A: {:?}",
        started.elapsed()
    );

    for call in long {
        let (content, is_error) = call.await.unwrap().expect("project A's MCP call failed");
        assert!(!is_error, "{content}");
        assert_eq!(content["stdout"], "done\n", "{content}");
    }
    for (key, sid) in [(&a, &sa), (&b, &sb)] {
        let (gone, is_error) = w
            .call_as(key, "sandbox_delete", json!({"sandboxId": sid}))
            .await;
        assert!(!is_error, "{gone}");
    }
}

/// The MCP transport's DNS-rebinding rule: a browser `Origin` other than the public URL's or
/// one configured is refused (403, the envelope, before the key is read); no `Origin` (an
/// agent, a CLI) and an allowed one are served.
#[tokio::test]
async fn mcp_refuses_a_foreign_origin_and_serves_an_allowed_one_or_none() {
    let w = World::with(
        "[control]\npublic_url = \"https://corral.example.com\"\n\
         [mcp]\nallowed_origins = [\"http://localhost:6274\"]\n",
        &["default"],
    )
    .await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}}});
    let base = &w.server.base;
    for (key, origin) in [
        (Some(w.key.as_str()), "https://evil.example"),
        (Some(w.key.as_str()), "http://localhost:6275"),
        (Some(w.key.as_str()), "null"),
        // Refused before authentication: no key, still 403.
        (None, "https://evil.example"),
    ] {
        let (status, body) = rpc(&w.http, base, key, Some(origin), &init).await.unwrap();
        assert_eq!(status, StatusCode::FORBIDDEN, "{origin}: {body}");
        assert_eq!(body["error"]["code"], "origin_not_allowed", "{body}");
        assert_eq!(body["error"]["retryable"], false, "{body}");
        assert!(
            body["error"]["requestId"]
                .as_str()
                .is_some_and(|id| id.starts_with("req_")),
            "{body}"
        );
    }
    for origin in [
        None,
        Some("http://localhost:6274"),
        Some("https://corral.example.com"),
    ] {
        let (status, body) = rpc(&w.http, base, Some(&w.key), origin, &init)
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{origin:?}: {body}");
        assert_eq!(body["result"]["serverInfo"]["name"], "corral", "{body}");
    }
}

/// Issue 34's test gap: one project's key cannot reach another project's sandboxes or
/// commands through `/mcp`: every tool on them answers `sandbox_not_found`, as for an id
/// that names nothing, and leaves them as they were.
#[tokio::test]
async fn a_projects_key_cannot_reach_another_projects_sandboxes_or_commands_through_mcp() {
    let w = World::with("", &["default", "other"]).await;
    let (a, b) = (w.keys[0].clone(), w.keys[1].clone());
    let sid = w.running_sandbox(&a).await;
    // Morph's fake runs commands on this host: a directory of the sandbox's own.
    let dir = w
        .ok(
            "command_run",
            json!({"sandboxId": sid, "command": "mktemp -d"}),
        )
        .await;
    let dir = dir["stdout"].as_str().unwrap().trim().to_owned();
    let path = format!("{dir}/secret.txt");
    let written = w
        .ok(
            "file_write",
            json!({"sandboxId": sid, "path": path, "content": "A's"}),
        )
        .await;
    assert_eq!(written["bytesWritten"], 3, "{written}");
    let started = w
        .ok(
            "command_start",
            json!({"sandboxId": sid, "command": "sleep 30"}),
        )
        .await;
    let cmd = started["commandId"].as_str().unwrap().to_owned();

    let attempts = [
        ("sandbox_get", json!({"sandboxId": sid})),
        (
            "command_run",
            json!({"sandboxId": sid, "command": "echo B"}),
        ),
        (
            "command_start",
            json!({"sandboxId": sid, "command": "echo B"}),
        ),
        (
            "command_output",
            json!({"sandboxId": sid, "commandId": cmd}),
        ),
        (
            "command_signal",
            json!({"sandboxId": sid, "commandId": cmd, "signal": "KILL"}),
        ),
        ("file_read", json!({"sandboxId": sid, "path": path})),
        (
            "file_write",
            json!({"sandboxId": sid, "path": path, "content": "B's"}),
        ),
        ("sandbox_stop", json!({"sandboxId": sid})),
        ("snapshot_create", json!({"sandboxId": sid})),
        ("sandbox_fork", json!({"sandboxId": sid})),
        ("sandbox_delete", json!({"sandboxId": sid})),
    ];
    for (name, arguments) in attempts {
        let (content, is_error) = w.call_as(&b, name, arguments).await;
        assert!(is_error, "{name} reached A's sandbox: {content}");
        assert_eq!(
            content["error"]["code"], "sandbox_not_found",
            "{name}: {content}"
        );
    }
    let (listed, is_error) = w.call_as(&b, "sandbox_list", json!({})).await;
    assert!(!is_error, "{listed}");
    assert_eq!(listed["sandboxes"], json!([]), "{listed}");

    // A's sandbox, file and command are as they were.
    let got = w.ok("sandbox_get", json!({"sandboxId": sid})).await;
    assert_eq!(got["sandbox"]["status"], "running", "{got}");
    let read = w
        .ok("file_read", json!({"sandboxId": sid, "path": path}))
        .await;
    assert_eq!(read["content"], "A's", "{read}");
    let output = w
        .ok(
            "command_output",
            json!({"sandboxId": sid, "commandId": cmd}),
        )
        .await;
    assert_eq!(
        output["exited"], false,
        "B's signal reached A's command: {output}"
    );
    w.ok(
        "command_signal",
        json!({"sandboxId": sid, "commandId": cmd, "signal": "KILL"}),
    )
    .await;
    w.ok(
        "command_run",
        json!({"sandboxId": sid, "command": format!("rm -r {dir}")}),
    )
    .await;
    w.ok("sandbox_delete", json!({"sandboxId": sid})).await;
}
