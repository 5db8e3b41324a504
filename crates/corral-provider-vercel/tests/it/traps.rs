//! Vercel's known traps, each checked on the request the fake received.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::time::Duration;

use corral_domain::{CreateSandboxRequest, OperationId, Provider, SandboxStatus};
use corral_provider::{CreateSpec, ExecSpec, ProviderError, SandboxProvider};
use corral_provider_http::reqwest::Method;
use corral_provider_testkit::fake::{FakeServer, Recorded};
use corral_provider_vercel::fake::{API_KEY, PROJECT_ID, TEAM_ID};
use corral_provider_vercel::{OPERATION_ID_TAG, VercelProvider};
use serde_json::Value;

use crate::{ctx, setup};

fn spec(image: Option<&str>, timeout: Option<u64>) -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Vercel, image.map(Into::into), timeout),
        timeout_seconds: timeout,
    }
}

fn body(r: &Recorded) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn query(r: &Recorded) -> Vec<(String, String)> {
    r.query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.replace("%3A", ":"))
        })
        .collect()
}

fn param(r: &Recorded, name: &str) -> Option<String> {
    query(r)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

async fn running(vercel: &VercelProvider) -> String {
    let created = vercel.create(&ctx(), &spec(None, Some(600))).await.unwrap();
    assert_eq!(created.status, SandboxStatus::Creating);
    let seen = vercel.get(&ctx(), &created.native_id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Creating);
    let seen = vercel.get(&ctx(), &created.native_id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Running);
    created.native_id
}

#[tokio::test]
async fn timeouts_go_out_in_milliseconds() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let with = spec(None, Some(2700));
    let created = vercel.create(&ctx(), &with).await.unwrap();
    assert_eq!(created.operation_id, Some(with.operation_id));
    vercel.create(&ctx(), &spec(None, None)).await.unwrap();
    let creates = server.log().matching(&Method::POST, "/v3/sandboxes");
    assert_eq!(creates.len(), 2);
    assert_eq!(body(&creates[0])["timeout"], 2_700_000, "2700 s in ms");
    assert!(body(&creates[0])["timeout"].is_u64());
    assert_eq!(
        body(&creates[1])["timeout"],
        300_000,
        "the 300 s default in ms"
    );
    assert_eq!(
        body(&creates[0])["tags"][OPERATION_ID_TAG],
        with.operation_id.to_string()
    );
    // A command's deadline also travels in ms, and the sandbox kills it then.
    let id = running(&vercel).await;
    let mut slow = ExecSpec::new("sleep 30");
    slow.timeout = Duration::from_secs(1);
    let started = std::time::Instant::now();
    let err = vercel.exec(&ctx(), &id, &slow).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let cmd = server.log().matching(&Method::POST, "/cmd");
    assert_eq!(body(cmd.last().unwrap())["timeout"], 1000);
}

#[tokio::test]
async fn runtimes_go_to_v2_and_images_to_v3_as_the_sdk_does() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    vercel
        .create(&ctx(), &spec(Some("python3.13"), Some(60)))
        .await
        .unwrap();
    vercel
        .create(&ctx(), &spec(Some("node:22"), Some(60)))
        .await
        .unwrap();
    let v2 = &server.log().matching(&Method::POST, "/v2/sandboxes")[0];
    assert_eq!(v2.path, "/v2/sandboxes");
    assert_eq!(body(v2)["runtime"], "python3.13");
    assert!(body(v2).get("image").is_none());
    let v3 = &server.log().matching(&Method::POST, "/v3/sandboxes")[0];
    assert_eq!(body(v3)["image"], "node:22");
    assert!(body(v3).get("runtime").is_none());
    let keys: Vec<String> = body(v3).as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        ["image", "persistent", "projectId", "tags", "timeout"]
    );
    assert_eq!(body(v3)["persistent"], true);
}

#[tokio::test]
async fn every_call_carries_the_token_and_team_and_sandbox_calls_the_project() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    let op = OperationId::new();
    vercel
        .exec(&ctx(), &id, &ExecSpec::new("echo hi"))
        .await
        .unwrap();
    let dir = vercel
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    vercel
        .write_file(&ctx(), &id, &format!("{dir}/f.txt"), b"x")
        .await
        .unwrap();
    assert_eq!(
        vercel
            .read_file(&ctx(), &id, &format!("{dir}/f.txt"), 16)
            .await
            .unwrap(),
        b"x"
    );
    vercel.find_by_operation_id(&ctx(), &op).await.unwrap();
    vercel.delete(&ctx(), &id).await.unwrap();
    let all = server.log().all();
    assert!(all.len() >= 9, "{}", all.len());
    for r in &all {
        assert_eq!(
            r.headers["authorization"].to_str().unwrap(),
            format!("Bearer {API_KEY}"),
            "{} {}",
            r.method,
            r.path
        );
        assert_eq!(
            param(r, "teamId").as_deref(),
            Some(TEAM_ID),
            "{} {}",
            r.method,
            r.path
        );
        let sandbox_call = r.path.starts_with("/v2/sandboxes/") && !r.path.contains("/sessions/");
        if sandbox_call {
            assert_eq!(
                param(r, "projectId").as_deref(),
                Some(PROJECT_ID),
                "{}",
                r.path
            );
        }
        if r.method == Method::POST && r.path.ends_with("/v3/sandboxes") {
            assert_eq!(body(r)["projectId"], PROJECT_ID);
        }
    }
    let list = &server
        .log()
        .matching(&Method::GET, "/v2/sandboxes")
        .into_iter()
        .find(|r| r.path == "/v2/sandboxes")
        .unwrap()
        .clone();
    assert_eq!(param(list, "project").as_deref(), Some(PROJECT_ID));
    assert_eq!(
        param(list, "tags"),
        Some(format!("{OPERATION_ID_TAG}:{op}"))
    );
    let del = &server.log().matching(&Method::DELETE, "/v2/sandboxes/")[0];
    assert_eq!(del.path, format!("/v2/sandboxes/{id}"));
}

async fn stop_session(server: &FakeServer, session: &str) {
    let resp = corral_provider_http::reqwest::Client::new()
        .post(format!(
            "{}/v2/sandboxes/sessions/{session}/stop?teamId={TEAM_ID}",
            server.base_url()
        ))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
}

fn session_of(r: &Recorded) -> String {
    r.path
        .strip_prefix("/v2/sandboxes/sessions/")
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_stopped_session_is_resumed_under_a_new_id_and_the_call_retried() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    let dir = vercel
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    let file = format!("{dir}/kept.txt");
    vercel
        .write_file(&ctx(), &id, &file, b"before")
        .await
        .unwrap();
    let first = session_of(server.log().matching(&Method::POST, "/cmd").last().unwrap());

    stop_session(server, &first).await;
    assert_eq!(
        vercel.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Paused,
        "a stopped persistent sandbox is paused"
    );
    server.log().clear();
    let out = vercel
        .exec(&ctx(), &id, &ExecSpec::new(format!("cat {dir}/kept.txt")))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"before", "the filesystem survived the stop");
    let cmds = server.log().matching(&Method::POST, "/cmd");
    assert_eq!(
        cmds.len(),
        2,
        "one refused on the old session, one on the new"
    );
    assert_eq!(session_of(&cmds[0]), first);
    let second = session_of(&cmds[1]);
    assert_ne!(second, first, "the resumed session has a new id");
    let resumes: Vec<Recorded> = server
        .log()
        .matching(&Method::GET, &format!("/v2/sandboxes/{id}"))
        .into_iter()
        .filter(|r| param(r, "resume").as_deref() == Some("true"))
        .collect();
    assert_eq!(resumes.len(), 1);

    // Files follow the session too.
    stop_session(server, &second).await;
    server.log().clear();
    assert_eq!(
        vercel.read_file(&ctx(), &id, &file, 1024).await.unwrap(),
        b"before"
    );
    let reads = server.log().matching(&Method::POST, "/fs/read");
    assert_eq!(reads.len(), 2);
    assert_eq!(session_of(&reads[0]), second);
    assert_ne!(session_of(&reads[1]), second);
}

#[tokio::test]
async fn writes_are_one_gzipped_tar_entry_extracted_at_the_root() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    let dir = vercel
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    let path = format!("{dir}/data.bin");
    let content: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    server.log().clear();
    vercel
        .write_file(&ctx(), &id, &path, &content)
        .await
        .unwrap();
    let w = &server.log().matching(&Method::POST, "/fs/write")[0];
    assert_eq!(w.headers["content-type"], "application/gzip");
    assert_eq!(w.headers["x-cwd"], "/");
    assert_eq!(&w.body[..2], &[0x1f, 0x8b], "gzip magic");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&w.body[..]));
    let mut entries = archive.entries().unwrap();
    let mut entry = entries.next().unwrap().unwrap();
    assert_eq!(
        entry.path().unwrap().to_str().unwrap(),
        path.trim_start_matches('/')
    );
    let mut got = Vec::new();
    entry.read_to_end(&mut got).unwrap();
    assert_eq!(got, content);
    assert!(entries.next().is_none());
    assert_eq!(
        vercel.read_file(&ctx(), &id, &path, 4096).await.unwrap(),
        content
    );
    let r = &server.log().matching(&Method::POST, "/fs/read")[0];
    assert_eq!(body(r)["path"], path);

    // A missing parent is reported, and the tarball (which would create it) is never sent.
    server.log().clear();
    let err = vercel
        .write_file(&ctx(), &id, &format!("{dir}/no/such.txt"), b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ParentMissing { .. }),
        "{err:?}"
    );
    assert!(server.log().matching(&Method::POST, "/fs/write").is_empty());
}

#[tokio::test]
async fn the_fake_refuses_archives_that_are_not_gzipped_tars() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    vercel
        .exec(&ctx(), &id, &ExecSpec::new("true"))
        .await
        .unwrap();
    let session = session_of(&server.log().matching(&Method::POST, "/cmd")[0]);
    let post = |body: Vec<u8>| {
        corral_provider_http::reqwest::Client::new()
            .post(format!(
                "{}/v2/sandboxes/sessions/{session}/fs/write?teamId={TEAM_ID}",
                server.base_url()
            ))
            .bearer_auth(API_KEY)
            .header("content-type", "application/gzip")
            .header("x-cwd", "/")
            .body(body)
            .send()
    };
    let plain = post(b"not gzip at all".to_vec()).await.unwrap();
    assert_eq!(plain.status(), 400);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &[7u8; 700]).unwrap();
    let junk = post(gz.finish().unwrap()).await.unwrap();
    assert_eq!(junk.status(), 400);
    let v: Value = junk.json().await.unwrap();
    assert_eq!(v["error"]["code"], "bad_request");
}

#[tokio::test]
async fn exec_sends_sh_c_with_native_cwd_and_env() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    let mut spec = ExecSpec::new("echo \"$X\"; pwd");
    spec.cwd = Some("/tmp".into());
    spec.env = BTreeMap::from([("X".to_owned(), "a b".to_owned())]);
    server.log().clear();
    let out = vercel.exec(&ctx(), &id, &spec).await.unwrap();
    assert_eq!(out.stdout, b"a b\n/tmp\n");
    let b = body(&server.log().matching(&Method::POST, "/cmd")[0]);
    assert_eq!(b["command"], "sh");
    assert_eq!(b["args"], serde_json::json!(["-c", "echo \"$X\"; pwd"]));
    assert_eq!(b["cwd"], "/tmp");
    assert_eq!(b["env"]["X"], "a b");
    assert_eq!(b["wait"], true);
    assert_eq!(b["logs"], true);
    assert_eq!(b["sudo"], false);
}

#[tokio::test]
async fn reading_a_directory_is_refused_and_a_missing_file_is_not_found() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    let dir = vercel
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    let err = vercel.read_file(&ctx(), &id, &dir, 1024).await.unwrap_err();
    assert!(matches!(err, ProviderError::FileRefused { .. }), "{err:?}");
    server.log().clear();
    let err = vercel
        .read_file(&ctx(), &id, &format!("{dir}/nope"), 1024)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
    assert!(
        server.log().matching(&Method::POST, "/cmd").is_empty(),
        "a 404 needs no probe"
    );
}

#[tokio::test]
async fn a_command_past_its_deadline_is_killed_with_the_signal_number_9() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    // The sandbox lets the command outlive its own timeout, so the adapter's kill ends it.
    fake.enforce_command_timeouts(false);
    let mut slow = ExecSpec::new("sleep 30");
    slow.timeout = Duration::from_secs(1);
    server.log().clear();
    let err = vercel.exec(&ctx(), &id, &slow).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
    let kills = server.log().matching(&Method::POST, "/kill");
    assert_eq!(kills.len(), 1);
    assert_eq!(
        body(&kills[0]),
        serde_json::json!({ "signal": 9 }),
        "Vercel's kill takes a POSIX signal number"
    );
}

#[tokio::test]
async fn the_fake_refuses_a_kill_signal_given_by_name() {
    let (fake, vercel) = setup().await;
    let server = fake.server();
    let id = running(&vercel).await;
    vercel
        .exec(&ctx(), &id, &ExecSpec::new("true"))
        .await
        .unwrap();
    let session = session_of(&server.log().matching(&Method::POST, "/cmd")[0]);
    let client = corral_provider_http::reqwest::Client::new();
    let url = |rest: &str| {
        format!(
            "{}/v2/sandboxes/sessions/{session}/cmd{rest}?teamId={TEAM_ID}",
            server.base_url()
        )
    };
    let started: Value = client
        .post(url(""))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!({ "command": "sleep", "args": ["30"], "wait": false }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cmd = started["command"]["id"].as_str().unwrap().to_owned();
    let kill = |signal: Value| {
        client
            .post(url(&format!("/{cmd}/kill")))
            .bearer_auth(API_KEY)
            .json(&serde_json::json!({ "signal": signal }))
            .send()
    };
    let by_name = kill(Value::from("SIGKILL")).await.unwrap();
    assert_eq!(by_name.status(), 400, "a signal name is not a number");
    let v: Value = by_name.json().await.unwrap();
    assert_eq!(v["error"]["code"], "bad_request");
    let by_number = kill(Value::from(9)).await.unwrap();
    assert_eq!(by_number.status(), 200);
}
