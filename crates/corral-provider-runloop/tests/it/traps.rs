//! Runloop's known traps, each checked on the request the fake received.

use std::collections::BTreeMap;

use corral_domain::{CreateSandboxRequest, OperationId, Provider, SandboxStatus};
use corral_provider::shell::{self, shell_quote};
use corral_provider::{Adapter, CreateSpec, ExecSpec, ProviderError, SandboxProvider};
use corral_provider_http::reqwest::Method;
use corral_provider_runloop::fake::API_KEY;
use corral_provider_runloop::{OPERATION_ID_METADATA_KEY, RunloopProvider, wrap_command};
use corral_provider_testkit::fake::FakeServer;
use serde_json::Value;

use crate::{ctx, setup};

fn spec(image: Option<&str>, timeout: Option<u64>) -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Runloop, image.map(Into::into), timeout),
        timeout_seconds: timeout,
    }
}

fn body(r: &corral_provider_testkit::fake::Recorded) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn query(r: &corral_provider_testkit::fake::Recorded) -> BTreeMap<String, String> {
    r.query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

async fn running(server: &FakeServer, runloop: &RunloopProvider) -> String {
    let created = runloop
        .create(&ctx(), &spec(None, Some(600)))
        .await
        .unwrap();
    assert_eq!(created.status, SandboxStatus::Creating);
    let seen = runloop.get(&ctx(), &created.native_id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Creating);
    let seen = runloop.get(&ctx(), &created.native_id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Running);
    server.log().clear();
    created.native_id
}

#[tokio::test]
async fn create_sends_keep_alive_in_seconds_the_operation_id_and_the_bearer_key() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let spec = spec(Some("bpt_abc123"), Some(7200));
    let created = runloop.create(&ctx(), &spec).await.unwrap();
    assert_eq!(created.operation_id, Some(spec.operation_id));
    let reqs = server.log().matching(&Method::POST, "/v1/devboxes");
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/devboxes");
    assert_eq!(
        r.headers["authorization"].to_str().unwrap(),
        format!("Bearer {API_KEY}")
    );
    assert_eq!(
        r.headers["x-request-id"].to_str().unwrap(),
        spec.operation_id.to_string()
    );
    let b = body(r);
    assert_eq!(b["launch_parameters"]["keep_alive_time_seconds"], 7200);
    assert!(b["launch_parameters"]["keep_alive_time_seconds"].is_u64());
    assert_eq!(b["blueprint_id"], "bpt_abc123");
    assert!(b.get("blueprint_name").is_none());
    assert_eq!(
        b["metadata"][OPERATION_ID_METADATA_KEY],
        spec.operation_id.to_string()
    );
    let keys: Vec<&String> = b.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["blueprint_id", "launch_parameters", "metadata", "name"],
        "no field beyond the documented ones"
    );
}

#[tokio::test]
async fn a_blueprint_name_and_the_default_lifetime_are_sent_as_runloop_names_them() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    // No timeout in the spec: the advertised default (3600 s) goes on the wire, not nothing.
    runloop
        .create(&ctx(), &spec(Some("my-blueprint"), None))
        .await
        .unwrap();
    let b = body(&server.log().all()[0]);
    assert_eq!(b["blueprint_name"], "my-blueprint");
    assert_eq!(b["launch_parameters"]["keep_alive_time_seconds"], 3600);
    // Runloop's maximum is 48 h: more is refused as the provider would.
    let err = runloop
        .create(&ctx(), &spec(None, Some(172_801)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn cwd_and_env_travel_in_a_quoted_sh_wrapper_that_survives_hostile_values() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let hostile_dir = "it's a \"dir\" $(touch pwned) `x`; rm -rf nothing";
    let mk = runloop
        .exec(
            &ctx(),
            &id,
            &ExecSpec::new(format!("mkdir -p {}", shell_quote(hostile_dir))),
        )
        .await
        .unwrap();
    assert_eq!(mk.exit_code, 0);
    let mut spec = ExecSpec::new("pwd; printf '%s|%s' \"$A\" \"$B_2\"");
    spec.cwd = Some(hostile_dir.to_owned());
    spec.env = BTreeMap::from([
        ("A".to_owned(), "'; exit 9; echo '".to_owned()),
        ("B_2".to_owned(), "$HOME `id` \"q\"\nnext".to_owned()),
    ]);
    server.log().clear();
    let out = runloop.exec(&ctx(), &id, &spec).await.unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (pwd, vars) = stdout.split_once('\n').unwrap();
    assert!(pwd.ends_with(hostile_dir), "{pwd}");
    assert_eq!(vars, "'; exit 9; echo '|$HOME `id` \"q\"\nnext");
    // Nothing was executed from the values.
    let probe = runloop
        .exec(
            &ctx(),
            &id,
            &ExecSpec::new("ls pwned 2>/dev/null || echo absent"),
        )
        .await
        .unwrap();
    assert_eq!(probe.stdout, b"absent\n");

    let r = &server.log().matching(&Method::POST, "/execute")[0];
    assert_eq!(r.path, format!("/v1/devboxes/{id}/execute"));
    let b = body(r);
    let mut keys: Vec<&String> = b.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["command", "command_id", "optimistic_timeout"],
        "no cwd/env fields"
    );
    assert_eq!(b["command"], wrap_command(&spec).unwrap());
    // One `sh -c` word holding the shared prelude (quoted cwd, quoted exports), then the command.
    let script = shell::script(Provider::Runloop, &spec).unwrap();
    assert!(
        script.starts_with(&format!(
            "cd -- {} || exit 1\nexport A=",
            shell_quote(hostile_dir)
        )),
        "{script}"
    );
    assert_eq!(b["command"], format!("sh -c {}", shell_quote(&script)));
    assert!(b["optimistic_timeout"].as_u64().unwrap() <= 25);
}

#[test]
fn an_env_name_that_is_not_a_shell_name_is_refused() {
    let mut spec = ExecSpec::new("true");
    spec.env = BTreeMap::from([("A=B; x".to_owned(), "1".to_owned())]);
    assert!(matches!(
        wrap_command(&spec),
        Err(ProviderError::InvalidRequest { .. })
    ));
    let plain = ExecSpec::new("echo 'hi'");
    assert_eq!(wrap_command(&plain).unwrap(), r"sh -c 'echo '\''hi'\'''");
}

#[tokio::test]
async fn last_n_is_raised_so_output_beyond_a_hundred_lines_is_kept() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let spec = ExecSpec::new("i=1; while [ $i -le 250 ]; do echo line$i; i=$((i+1)); done");
    let out = runloop.exec(&ctx(), &id, &spec).await.unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 250);
    assert!(text.starts_with("line1\n"), "the first lines are kept");
    assert!(!out.truncated);
    let r = &server.log().matching(&Method::POST, "/execute")[0];
    assert_eq!(query(r)["last_n"], spec.max_output_bytes.to_string());

    // The trap itself: without last_n, Runloop (and its fake) keeps only the last 100 lines.
    let raw = corral_provider_http::reqwest::Client::new()
        .post(format!("{}/v1/devboxes/{id}/execute", server.base_url()))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!({
            "command_id": "01890a5d-ac96-774b-bcce-b302099a8057",
            "command": "i=1; while [ $i -le 250 ]; do echo line$i; i=$((i+1)); done",
        }))
        .send()
        .await
        .unwrap();
    let v: Value = raw.json().await.unwrap();
    assert_eq!(v["stdout"].as_str().unwrap().lines().count(), 100);
    assert_eq!(v["stdout_truncated"], true);
}

#[tokio::test]
async fn a_long_command_is_polled_and_a_deadline_kills_it() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    // Server-side waits of 1 s, so a 3 s command is polled without a 25 s test.
    let runloop = RunloopProvider::from_config(corral_provider_runloop::RunloopConfig {
        max_wait_seconds: 1,
        ..fake.config()
    })
    .unwrap();
    let polled = runloop
        .exec(&ctx(), &id, &ExecSpec::new("sleep 2; echo finished"))
        .await
        .unwrap();
    assert_eq!(polled.stdout, b"finished\n");
    let waits = server.log().matching(&Method::POST, "/wait_for_status");
    assert!(!waits.is_empty());
    assert_eq!(
        body(&waits[0])["statuses"],
        serde_json::json!(["completed"])
    );
    assert_eq!(body(&waits[0])["timeout_seconds"], 1);
    server.log().clear();
    let mut spec = ExecSpec::new("sleep 30");
    spec.timeout = std::time::Duration::from_secs(2);
    let err = runloop.exec(&ctx(), &id, &spec).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
    let log = server.log();
    assert!(!log.matching(&Method::POST, "/wait_for_status").is_empty());
    let kills = log.matching(&Method::POST, "/kill");
    assert_eq!(kills.len(), 1);
    assert_eq!(body(&kills[0])["kill_process_group"], true);
}

#[tokio::test]
async fn files_use_the_binary_endpoints_and_a_missing_parent_never_reaches_upload() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let dir = runloop
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    let path = format!("{dir}/bin.dat");
    let content: Vec<u8> = (0..=255u8).rev().collect();
    server.log().clear();
    runloop
        .write_file(&ctx(), &id, &path, &content)
        .await
        .unwrap();
    let up = &server.log().matching(&Method::POST, "/upload_file")[0];
    assert!(
        up.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("multipart/form-data; boundary=")
    );
    assert_eq!(
        runloop.read_file(&ctx(), &id, &path, 1024).await.unwrap(),
        content
    );
    let down = &server.log().matching(&Method::POST, "/download_file")[0];
    assert_eq!(body(down)["path"], path);

    server.log().clear();
    let err = runloop
        .write_file(&ctx(), &id, &format!("{dir}/missing/x"), b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ParentMissing { .. }),
        "{err:?}"
    );
    assert!(
        server
            .log()
            .matching(&Method::POST, "/upload_file")
            .is_empty()
    );
}

#[tokio::test]
async fn a_devbox_shut_down_through_corral_reads_as_deleted() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    runloop.delete(&ctx(), &id).await.unwrap();
    let r = &server.log().matching(&Method::POST, "/shutdown")[0];
    assert_eq!(r.path, format!("/v1/devboxes/{id}/shutdown"));
    assert_eq!(query(r)["force"], "true");
    assert_eq!(
        runloop.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Deleted
    );
    // A second delete is refused by Runloop (not running) and is still a success.
    runloop.delete(&ctx(), &id).await.unwrap();
}

#[tokio::test]
async fn a_failed_download_is_explained_as_missing_or_not_a_file() {
    let (fake, runloop) = setup().await;
    let server = fake.server();
    let id = running(server, &runloop).await;
    let dir = runloop
        .exec(&ctx(), &id, &ExecSpec::new("mktemp -d"))
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout).unwrap().trim().to_owned();
    let err = runloop
        .read_file(&ctx(), &id, &dir, 1024)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileRefused { .. }), "{err:?}");
    let err = runloop
        .read_file(&ctx(), &id, &format!("{dir}/nope"), 1024)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
    // A devbox that is gone is reported as such, not as a missing file.
    runloop.delete(&ctx(), &id).await.unwrap();
    let err = runloop
        .read_file(&ctx(), &id, &format!("{dir}/nope"), 1024)
        .await
        .unwrap_err();
    assert!(
        !matches!(err, ProviderError::FileNotFound { .. }),
        "{err:?}"
    );
}
