//! End to end: the real `corral serve` binary over HTTP, on the `local` provider and on the
//! Morph adapter pointed at its loopback fake.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::{Client, Method};

use crate::serve::{Api, set_default_profile, start};
use serde_json::{Value, json};

/// The inline provider credential that must never reach disk or logs.
const CANARY: &str = "canary-credential-5b1e7c93";

fn grep_tree(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file()
                && let Ok(bytes) = std::fs::read(&p)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                hits.push(p);
            }
        }
    }
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_every_endpoint_persists_across_restarts_and_keeps_projects_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let morph = corral_provider_morph::fake::Fake::start_with_key(CANARY).await;
    let config = tmp.path().join("corral.toml");
    std::fs::write(
        &config,
        format!(
            "[providers]\nenabled = [\"local\", \"morph\"]\n[providers.morph]\nbase_url = \"{}\"\n\
             [local]\ndisk_mib = 32\ndisk_reserve_mib = 256\n",
            morph.base_url()
        ),
    )
    .unwrap();

    let server = start(&data, &config, 1);
    let key = server.first_key();
    let banner = std::fs::read_to_string(&server.stdout).unwrap();
    assert!(banner.contains("curl"), "{banner}");
    let api = Api {
        client: Client::new(),
        base: server.base.clone(),
        key,
    };
    let get = Method::GET;
    let post = Method::POST;

    // Providers: local and the wired adapter.
    let cat = api.json(get.clone(), "/v1/providers", None, &[], 200).await;
    let names: Vec<&str> = cat["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["provider"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["morph", "local"]);

    // Create with a key, replay, conflict.
    let k = [("Idempotency-Key", "e2e-1")];
    let (st, _, first) = api
        .call(
            post.clone(),
            "/v1/sandboxes",
            Some(json!({"provider": "local"})),
            &k,
        )
        .await;
    assert_eq!(st, 201, "{first}");
    let (st, h, again) = api
        .call(
            post.clone(),
            "/v1/sandboxes",
            Some(json!({"provider": "local"})),
            &k,
        )
        .await;
    assert_eq!(
        (
            st.as_u16(),
            h.get("idempotent-replayed").unwrap().to_str().unwrap()
        ),
        (200, "true")
    );
    assert_eq!(again, first);
    assert!(first.contains(r#""status":"creating""#), "{first}");
    let (st, h, _) = api
        .call(
            post.clone(),
            "/v1/sandboxes",
            Some(json!({"provider": "local", "timeout": 60})),
            &k,
        )
        .await;
    assert_eq!(st, 422);
    assert!(h.contains_key("x-request-id"));
    let sb: Value = serde_json::from_str(&first).unwrap();
    let id = sb["id"].as_str().unwrap().to_owned();

    // Get, exec, files.
    let got = api
        .json(get.clone(), &format!("/v1/sandboxes/{id}"), None, &[], 200)
        .await;
    assert_eq!(got["status"], "running");
    let ran = api
        .json(
            post.clone(),
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"command": "echo hello > /workspace/note && cat /workspace/note"})),
            &[],
            200,
        )
        .await;
    assert_eq!(ran["stdout"], "hello\n");
    api.json(
        post.clone(),
        &format!("/v1/sandboxes/{id}/files/write"),
        Some(json!({"path": "/workspace/f.txt", "content": "persisted"})),
        &[],
        200,
    )
    .await;
    let read = api
        .json(
            post.clone(),
            &format!("/v1/sandboxes/{id}/files/read"),
            Some(json!({"path": "/workspace/f.txt"})),
            &[],
            200,
        )
        .await;
    assert_eq!(read["content"], "persisted");

    // List pages: three sandboxes, two per page, newest first.
    let mut made = vec![id.clone()];
    for _ in 0..2 {
        let s = api
            .json(
                post.clone(),
                "/v1/sandboxes",
                Some(json!({"provider": "local"})),
                &[],
                201,
            )
            .await;
        made.push(s["id"].as_str().unwrap().to_owned());
    }
    made.reverse();
    let p1 = api
        .json(get.clone(), "/v1/sandboxes?limit=2", None, &[], 200)
        .await;
    let cursor = p1["nextCursor"].as_str().unwrap().to_owned();
    let p2 = api
        .json(
            get.clone(),
            &format!("/v1/sandboxes?limit=2&cursor={cursor}"),
            None,
            &[],
            200,
        )
        .await;
    assert!(p2["nextCursor"].is_null());
    let listed: Vec<String> = p1["items"]
        .as_array()
        .unwrap()
        .iter()
        .chain(p2["items"].as_array().unwrap())
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, made);

    // Delete and the tombstone.
    let doomed = made[0].clone();
    let tomb = api
        .json(
            Method::DELETE,
            &format!("/v1/sandboxes/{doomed}"),
            None,
            &[],
            200,
        )
        .await;
    assert_eq!(tomb["status"], "deleted");
    assert_eq!(
        api.json(
            get.clone(),
            &format!("/v1/sandboxes/{doomed}"),
            None,
            &[],
            200
        )
        .await,
        tomb
    );
    api.json(
        post.clone(),
        &format!("/v1/sandboxes/{doomed}/exec"),
        Some(json!({"command": "true"})),
        &[],
        404,
    )
    .await;

    // The Morph adapter, through its fake, with an inline credential.
    let cred = [("X-Provider-Credential", CANARY)];
    // Keyed, so the idempotency record is on disk too when the data dir is searched below.
    let keyed = [
        ("X-Provider-Credential", CANARY),
        ("Idempotency-Key", "e2e-morph"),
    ];
    let m = api
        .json(
            post.clone(),
            "/v1/sandboxes",
            Some(json!({"provider": "morph", "image": "snapshot_e2e"})),
            &keyed,
            201,
        )
        .await;
    assert_eq!(m["metadata"]["credentialSource"], "inline");
    let mid = m["id"].as_str().unwrap().to_owned();
    // A new instance boots: poll get (which asks the provider) until it runs.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = api
            .json(
                get.clone(),
                &format!("/v1/sandboxes/{mid}"),
                None,
                &cred,
                200,
            )
            .await;
        if seen["status"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "morph sandbox never ran: {seen}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ran = api
        .json(
            post.clone(),
            &format!("/v1/sandboxes/{mid}/exec"),
            Some(json!({"command": "echo from-morph"})),
            &cred,
            200,
        )
        .await;
    assert_eq!(ran["stdout"], "from-morph\n");
    let dir = api
        .json(
            post.clone(),
            &format!("/v1/sandboxes/{mid}/exec"),
            Some(json!({"command": "mktemp -d"})),
            &cred,
            200,
        )
        .await;
    let path = format!("{}/m.txt", dir["stdout"].as_str().unwrap().trim());
    api.json(
        post.clone(),
        &format!("/v1/sandboxes/{mid}/files/write"),
        Some(json!({"path": path, "content": "via morph"})),
        &cred,
        200,
    )
    .await;
    let back = api
        .json(
            post.clone(),
            &format!("/v1/sandboxes/{mid}/files/read"),
            Some(json!({"path": path})),
            &cred,
            200,
        )
        .await;
    assert_eq!(back["content"], "via morph");
    // Without the credential: no profile.
    api.json(get.clone(), &format!("/v1/sandboxes/{mid}"), None, &[], 422)
        .await;
    // A wrong credential is the provider rejecting it.
    let (st, _, text) = api
        .call(
            get.clone(),
            &format!("/v1/sandboxes/{mid}"),
            None,
            &[("X-Provider-Credential", "wrong")],
        )
        .await;
    assert_eq!(st, 401, "{text}");
    assert!(
        morph
            .server()
            .log()
            .all()
            .iter()
            .any(|r| r.path.contains("/instance")),
        "the fake was reached"
    );
    // A stored profile (credential from an environment variable, never argv) replaces the
    // header; it is encrypted at rest, so the plaintext search below still finds nothing.
    let out = set_default_profile(&data, "morph", CANARY, &[]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains(CANARY));
    let seen = api
        .json(get.clone(), &format!("/v1/sandboxes/{mid}"), None, &[], 200)
        .await;
    assert_eq!(seen["status"], "running");
    api.json(
        Method::DELETE,
        &format!("/v1/sandboxes/{mid}"),
        None,
        &[],
        200,
    )
    .await;

    // A second project, made by the CLI while the server runs, sees nothing of the first.
    let out = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["project", "create", "--name", "second", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value =
        serde_json::from_slice(&out.stdout).expect("exactly one JSON object on stdout");
    assert!(created["projectId"].as_str().unwrap().starts_with("prj_"));
    let second = Api {
        client: Client::new(),
        base: server.base.clone(),
        key: created["apiKey"].as_str().unwrap().to_owned(),
    };
    let empty = second
        .json(get.clone(), "/v1/sandboxes", None, &[], 200)
        .await;
    assert_eq!(empty["items"].as_array().unwrap().len(), 0);
    second
        .json(get.clone(), &format!("/v1/sandboxes/{id}"), None, &[], 404)
        .await;
    second
        .json(
            post.clone(),
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"command": "true"})),
            &[],
            404,
        )
        .await;

    // Another key for the second project, then its revocation.
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_corral"))
            .args(args)
            .arg("--data-dir")
            .arg(&data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("one JSON object on stdout")
    };
    let issued = cli(&["key", "create", "--project", "second"]);
    assert_eq!(issued["projectId"], created["projectId"]);
    let extra = Api {
        client: Client::new(),
        base: server.base.clone(),
        key: issued["apiKey"].as_str().unwrap().to_owned(),
    };
    extra
        .json(get.clone(), "/v1/sandboxes", None, &[], 200)
        .await;
    let key_id = extra.key.split('_').nth(1).unwrap().to_owned();
    let revoked = cli(&["key", "revoke", "--key-id", &key_id]);
    assert!(revoked["revokedAt"].is_string());
    // Revoked by another process (the CLI): the server, which cached the verified key, refuses
    // it once its cache entry is older than the documented bound.
    let deadline = Instant::now() + corral_registry::DEFAULT_CACHE_TTL + Duration::from_secs(10);
    loop {
        let (status, _, _) = extra.call(get.clone(), "/v1/sandboxes", None, &[]).await;
        if status == 401 {
            break;
        }
        assert_eq!(status, 200, "until then the cached key still works");
        assert!(Instant::now() < deadline, "the revoked key still works");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    second
        .json(get.clone(), "/v1/sandboxes", None, &[], 200)
        .await;

    // Restart on the same data dir: records, files and exec survive; no new banner.
    let mut logs = server.stop();
    let server = start(&data, &config, 2);
    assert!(
        !std::fs::read_to_string(&server.stdout)
            .unwrap()
            .contains("crl_"),
        "the key is printed once"
    );
    let api = Api {
        client: Client::new(),
        base: server.base.clone(),
        key: api.key,
    };
    let page = api.json(get.clone(), "/v1/sandboxes", None, &[], 200).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 4);
    let read = api
        .json(
            post.clone(),
            &format!("/v1/sandboxes/{id}/files/read"),
            Some(json!({"path": "/workspace/f.txt"})),
            &[],
            200,
        )
        .await;
    assert_eq!(read["content"], "persisted");
    let ran = api
        .json(
            post.clone(),
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"command": "cat /workspace/note"})),
            &[],
            200,
        )
        .await;
    assert_eq!(ran["stdout"], "hello\n");
    logs.push_str(&server.stop());

    // The inline credential reached neither disk nor logs.
    assert!(
        logs.contains("request_id=req_"),
        "log lines carry the request id"
    );
    assert!(
        !logs.contains(CANARY),
        "the canary credential is in the logs"
    );
    let hits = grep_tree(&data, CANARY.as_bytes());
    assert!(
        hits.is_empty(),
        "the canary credential is on disk: {hits:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_cut_off_by_a_crash_is_adopted_by_the_reconciler_after_restart() {
    const KEY: &str = "crash-morph-key-1";
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let morph = corral_provider_morph::fake::Fake::start_with_key(KEY).await;
    let config = tmp.path().join("corral.toml");
    std::fs::write(
        &config,
        format!(
            "[providers]\nenabled = [\"local\", \"morph\"]\n[providers.morph]\nbase_url = \"{}\"\n\
             [reconciler]\ninterval_seconds = 1\ngrace_seconds = 1\n",
            morph.base_url()
        ),
    )
    .unwrap();
    let server = start(&data, &config, 1);
    let key = server.first_key();
    // A stored credential, so the reconciler can act without the client.
    set_default_profile(&data, "morph", KEY, &[]);

    // The provider starts the instance but answers late; the server dies meanwhile.
    morph.server().faults().arm(
        corral_provider_testkit::fake::Fault::new(
            corral_provider_testkit::fake::FaultKind::DelayAfterHandler(Duration::from_secs(10)),
        )
        .on_path("/api/instance"),
    );
    let client = Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let pending = client
        .post(format!("{}/v1/sandboxes", server.base))
        .bearer_auth(&key)
        .header("Idempotency-Key", "crash-1")
        .json(&json!({"provider": "morph", "image": "snapshot_crash"}))
        .send();
    let _ = pending.await; // The client gives up after 1 s.
    let started = |m: &corral_provider_testkit::fake::FakeServer| {
        m.log()
            .all()
            .iter()
            .filter(|r| r.method == "POST" && r.path == "/api/instance")
            .count()
    };
    assert_eq!(started(morph.server()), 1, "the instance was started");
    server.crash();

    let server = start(&data, &config, 2);
    let api = Api {
        client: Client::new(),
        base: server.base.clone(),
        key,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = api.json(Method::GET, "/v1/sandboxes", None, &[], 200).await;
        let item = &page["items"][0];
        if item["metadata"]["nativeProviderId"].is_string() {
            break;
        }
        assert!(Instant::now() < deadline, "never adopted: {page}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Adopted: get asks the provider (with the stored credential) and sees it run.
    let id = api.json(Method::GET, "/v1/sandboxes", None, &[], 200).await["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while api
        .json(Method::GET, &format!("/v1/sandboxes/{id}"), None, &[], 200)
        .await["status"]
        != "running"
    {
        assert!(Instant::now() < deadline, "adopted sandbox never ran");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(started(morph.server()), 1, "adopted, never started twice");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_arriving_is_answered_request_timeout_and_the_connection_closed() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config = tmp.path().join("corral.toml");
    std::fs::write(&config, "[local]\ndisk_mib = 32\n").unwrap();
    let server = start(&data, &config, 1);
    let key = server.first_key();
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // An authenticated create that promises 1000 bytes and sends 10, then nothing.
    let head = format!(
        "POST /v1/sandboxes HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"provider"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection")
        .unwrap();
    let waited = started.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(20),
        "answered after {waited:?}"
    );
}
