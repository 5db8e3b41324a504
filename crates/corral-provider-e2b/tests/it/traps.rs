//! E2B's known traps, each checked on the requests the fake received.

use std::time::Duration;

use corral_domain::{
    CreateSandboxRequest, OperationId, Provider, SandboxStatus, SnapshotId, SnapshotStatus,
};
use corral_provider::{
    Adapter, CreateSpec, ExecSpec, ProviderError, SandboxProvider, SnapshotSpec,
};
use corral_provider_e2b::E2bProvider;
use corral_provider_e2b::connect::Decoder;
use corral_provider_e2b::fake::{
    API_KEY, OLD_ENVD_VERSION, PAGE_SIZE, SERVER_DEFAULT_TIMEOUT_SECONDS,
};
use corral_provider_http::reqwest::Method;
use serde_json::Value;

use crate::{ctx, spec};

fn body_json(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

#[tokio::test]
async fn create_always_sends_a_lifetime_in_seconds_never_relying_on_the_15s_default() {
    let (fake, p) = crate::world().await;
    // No timeout in the request and none resolved: the advertised default is sent.
    let s = spec(None);
    let created = p.create(&ctx(), &s).await.unwrap();
    let posts = fake.server().log().matching(&Method::POST, "/sandboxes");
    assert_eq!(posts.len(), 1);
    let req = &posts[0];
    assert_eq!(req.path, "/sandboxes");
    assert_eq!(req.headers["x-api-key"], API_KEY);
    let body = body_json(&req.body);
    assert_eq!(body["timeout"], 300, "{body}");
    assert_eq!(body["templateID"], "base");
    assert_eq!(body["secure"], true);
    assert_eq!(
        body["metadata"]["corral_operation_id"],
        s.operation_id.to_string()
    );
    assert_eq!(fake.lifetime_of(&created.native_id), Some(300));

    // A requested lifetime and image are sent as given (seconds, templateID).
    let s = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::E2b, Some("my-tpl".into()), Some(120)),
        timeout_seconds: Some(120),
    };
    let created = p.create(&ctx(), &s).await.unwrap();
    let body = body_json(&fake.server().log().matching(&Method::POST, "/sandboxes")[1].body);
    assert_eq!(body["timeout"], 120);
    assert_eq!(body["templateID"], "my-tpl");
    assert_eq!(fake.lifetime_of(&created.native_id), Some(120));
}

#[tokio::test]
async fn the_fake_applies_e2bs_15s_default_when_no_timeout_is_sent() {
    let (fake, _p) = crate::world().await;
    let client = corral_provider_http::reqwest::Client::new();
    let resp: Value = client
        .post(format!("{}/sandboxes", fake.base_url()))
        .header("X-API-Key", API_KEY)
        .header("content-type", "application/json")
        .body(r#"{"templateID":"base"}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = resp["sandboxID"].as_str().unwrap();
    assert_eq!(fake.lifetime_of(id), Some(SERVER_DEFAULT_TIMEOUT_SECONDS));
}

#[tokio::test]
async fn a_sandbox_past_its_lifetime_is_gone() {
    let (_fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(Some(1))).await.unwrap();
    assert!(p.get(&ctx(), &created.native_id).await.is_ok());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let err = p.get(&ctx(), &created.native_id).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn exec_goes_to_envd_on_its_own_host_with_the_access_token_not_the_api_key() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    let mut exec = ExecSpec::new("echo hi");
    exec.cwd = Some("/".into());
    exec.env.insert("A".into(), "b".into());
    exec.timeout = Duration::from_secs(42);
    p.exec(&ctx(), &created.native_id, &exec).await.unwrap();

    let token = fake.token_of(&created.native_id).unwrap();
    let starts = fake
        .envd()
        .log()
        .matching(&Method::POST, "/process.Process/Start");
    assert_eq!(starts.len(), 1);
    let req = &starts[0];
    assert_eq!(req.path, "/process.Process/Start");
    assert_eq!(req.headers["x-access-token"], token.as_str());
    assert!(
        req.headers.get("x-api-key").is_none(),
        "the API key leaked to envd"
    );
    assert_eq!(req.headers["content-type"], "application/connect+json");
    assert_eq!(req.headers["connect-timeout-ms"], "42000");
    // One envelope: flag 0, big-endian length, StartRequest JSON.
    let mut d = Decoder::new(1 << 20);
    d.push(&req.body);
    let env = d.next_envelope().unwrap().unwrap();
    assert_eq!(env.flags, 0);
    assert_eq!(d.pending(), 0);
    let msg = body_json(&env.data);
    assert_eq!(msg["process"]["cmd"], "/bin/bash");
    assert_eq!(
        msg["process"]["args"],
        serde_json::json!(["-l", "-c", "echo hi"])
    );
    assert_eq!(msg["process"]["cwd"], "/");
    assert_eq!(msg["process"]["envs"]["A"], "b");
    // The control plane never saw an envd call.
    assert!(
        fake.server()
            .log()
            .all()
            .iter()
            .all(|r| !r.path.contains("process"))
    );
}

#[tokio::test]
async fn connect_envelopes_split_across_chunks_decode_with_separate_streams_and_exit_code() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    fake.set_stream_chunk_size(3);
    let out = p
        .exec(
            &ctx(),
            &created.native_id,
            &ExecSpec::new("printf 'out put'; printf 'err' >&2; exit 7"),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, b"out put");
    assert_eq!(out.stderr, b"err");
    assert_eq!(out.exit_code, 7);
    // Exit code 0 is left out of the end event by protojson: still 0.
    let ok = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap();
    assert_eq!(ok.exit_code, 0);
}

#[tokio::test]
async fn an_adapter_without_the_token_cached_fetches_it_from_the_control_api() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    // A new adapter (a restarted server) knows nothing about the sandbox.
    let fresh = E2bProvider::from_config(fake.config()).unwrap();
    let out = fresh
        .exec(&ctx(), &created.native_id, &ExecSpec::new("echo again"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"again\n");
    let gets = fake
        .server()
        .log()
        .matching(&Method::GET, &format!("/sandboxes/{}", created.native_id));
    assert_eq!(gets.len(), 1);
}

#[tokio::test]
async fn find_by_operation_id_filters_the_v2_list_by_metadata() {
    let (fake, p) = crate::world().await;
    let s = spec(None);
    let created = p.create(&ctx(), &s).await.unwrap();
    let found = p
        .find_by_operation_id(&ctx(), &s.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].native_id, created.native_id);
    assert_eq!(found[0].operation_id, Some(s.operation_id));
    let list = &fake.server().log().matching(&Method::GET, "/v2/sandboxes")[0];
    assert_eq!(list.path, "/v2/sandboxes");
    let query = list.query.as_deref().unwrap();
    assert!(
        query.contains(&format!(
            "metadata=corral_operation_id%3D{}",
            s.operation_id
        )),
        "{query}"
    );
    assert!(query.contains("state=running%2Cpaused"), "{query}");
}

#[tokio::test]
async fn write_checks_the_parent_because_envd_would_create_it() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    let err = p
        .write_file(
            &ctx(),
            &created.native_id,
            "/nonexistent-corral-dir/x/y.txt",
            b"x",
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ParentMissing { .. }),
        "{err:?}"
    );
    assert!(fake.envd().log().all().iter().all(|r| r.path != "/files"));
    let stat = &fake
        .envd()
        .log()
        .matching(&Method::POST, "/filesystem.Filesystem/Stat")[0];
    assert_eq!(body_json(&stat.body)["path"], "/nonexistent-corral-dir/x");
}

#[tokio::test]
async fn files_use_envd_routes_with_the_path_query_and_multipart_upload() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = format!("{}/f.bin", dir.path().display());
    p.write_file(&ctx(), &created.native_id, &path, b"\x00\xffdata")
        .await
        .unwrap();
    let ups: Vec<_> = fake
        .envd()
        .log()
        .matching(&Method::POST, "/files")
        .into_iter()
        .filter(|r| r.path == "/files")
        .collect();
    assert_eq!(ups.len(), 1);
    let up = &ups[0];
    assert!(
        up.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("multipart/form-data; boundary=")
    );
    assert!(up.query.as_deref().unwrap().starts_with("path="));
    assert_eq!(
        p.read_file(&ctx(), &created.native_id, &path, 1024)
            .await
            .unwrap(),
        b"\x00\xffdata"
    );
    let err = p
        .read_file(
            &ctx(),
            &created.native_id,
            dir.path().to_str().unwrap(),
            1024,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileRefused { .. }), "{err:?}");
    // Files, like exec, carry the sandbox's token and never the API key.
    let token = fake.token_of(&created.native_id).unwrap();
    for r in fake.envd().log().all() {
        assert!(r.headers.get("x-api-key").is_none(), "{}", r.path);
        assert_eq!(r.headers["x-access-token"], token.as_str(), "{}", r.path);
    }
}

#[test]
fn a_malformed_envd_template_fails_at_construction() {
    let err = E2bProvider::from_config(corral_provider_e2b::E2bConfig {
        envd_url_template: "ftp://{sandboxID}.example".into(),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_fake_rejects_what_e2b_rejects() {
    let (fake, _p) = crate::world().await;
    let client = corral_provider_http::reqwest::Client::new();
    let post = |body: &'static str, key: Option<&'static str>| {
        let mut req = client
            .post(format!("{}/sandboxes", fake.base_url()))
            .header("content-type", "application/json")
            .body(body);
        if let Some(k) = key {
            req = req.header("X-API-Key", k);
        }
        req.send()
    };
    let status = |r: corral_provider_http::reqwest::Response| r.status().as_u16();
    assert_eq!(
        status(post(r#"{"templateID":"base"}"#, None).await.unwrap()),
        401
    );
    assert_eq!(
        status(
            post(r#"{"templateID":"base"}"#, Some("e2b_x"))
                .await
                .unwrap()
        ),
        401
    );
    assert_eq!(
        status(post(r#"{"timeout":30}"#, Some(API_KEY)).await.unwrap()),
        400
    );
    assert_eq!(
        status(
            post(r#"{"templateID":"base","timeout":"30"}"#, Some(API_KEY))
                .await
                .unwrap()
        ),
        400
    );
    assert_eq!(
        status(
            post(r#"{"templateID":"base","timeout":30000}"#, Some(API_KEY))
                .await
                .unwrap()
        ),
        201,
        "30000 s is within 24 h"
    );
    assert_eq!(
        status(
            post(r#"{"templateID":"base","timeout":90000}"#, Some(API_KEY))
                .await
                .unwrap()
        ),
        400,
        "more than 24 h"
    );
    let wrong_path = client
        .post(format!("{}/sandbox", fake.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_path.status().as_u16(), 404);
    let wrong_method = client
        .put(format!("{}/sandboxes", fake.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_method.status().as_u16(), 405);
}

#[tokio::test]
async fn find_by_operation_id_follows_x_next_token_across_pages() {
    let (fake, p) = crate::world().await;
    // Five sandboxes carry the tag (a create applied five times), one does not: with pages
    // of two, newest first, the first two created are only on the third page.
    let s = spec(None);
    let mut created = Vec::new();
    for _ in 0..5 {
        created.push(p.create(&ctx(), &s).await.unwrap().native_id);
    }
    p.create(&ctx(), &spec(None)).await.unwrap();
    assert_eq!(PAGE_SIZE, 2);
    let found = p
        .find_by_operation_id(&ctx(), &s.operation_id)
        .await
        .unwrap();
    let mut ids: Vec<String> = found.iter().map(|f| f.native_id.clone()).collect();
    ids.sort();
    created.sort();
    assert_eq!(ids, created, "every tagged sandbox, on every page");
    assert!(found.iter().all(|f| f.operation_id == Some(s.operation_id)));
    // Three requests: the first without a token, the next two with the `nextToken` the
    // previous answer's `X-Next-Token` named (the fake refuses any other token).
    let lists = fake.server().log().matching(&Method::GET, "/v2/sandboxes");
    assert_eq!(lists.len(), 3, "{lists:?}");
    let queries: Vec<&str> = lists.iter().map(|r| r.query.as_deref().unwrap()).collect();
    assert!(!queries[0].contains("nextToken"), "{}", queries[0]);
    for q in &queries {
        assert!(q.contains("limit=100"), "{q}");
        assert!(q.contains(&format!(
            "metadata=corral_operation_id%3D{}",
            s.operation_id
        )));
    }
    assert!(queries[1].contains("nextToken="), "{}", queries[1]);
    assert!(queries[2].contains("nextToken="), "{}", queries[2]);
    assert_ne!(queries[1], queries[2]);
}

#[tokio::test]
async fn the_fake_pages_the_listing_and_refuses_tokens_it_did_not_issue() {
    let (fake, p) = crate::world().await;
    for _ in 0..3 {
        p.create(&ctx(), &spec(None)).await.unwrap();
    }
    let client = corral_provider_http::reqwest::Client::new();
    let list = |query: String| {
        client
            .get(format!("{}/v2/sandboxes?{query}", fake.base_url()))
            .header("X-API-Key", API_KEY)
            .send()
    };
    let first = list("limit=100".into()).await.unwrap();
    assert_eq!(first.status().as_u16(), 200);
    assert_eq!(first.headers()["x-total-running"], "3");
    let token = first.headers()["x-next-token"].to_str().unwrap().to_owned();
    assert_eq!(first.json::<Vec<Value>>().await.unwrap().len(), 2);
    let encoded: String = url_encode(&token);
    let second = list(format!("limit=100&nextToken={encoded}"))
        .await
        .unwrap();
    assert!(second.headers().get("x-next-token").is_none());
    assert_eq!(second.json::<Vec<Value>>().await.unwrap().len(), 1);
    let limited = list("limit=1".into()).await.unwrap();
    assert_eq!(limited.json::<Vec<Value>>().await.unwrap().len(), 1);
    let forged = list("nextToken=not-a-token".into()).await.unwrap();
    assert_eq!(forged.status().as_u16(), 400);
    assert_eq!(
        list("limit=101".into()).await.unwrap().status().as_u16(),
        400
    );
}

fn url_encode(s: &str) -> String {
    corral_provider_http::Url::parse_with_params("http://x/", &[("v", s)])
        .unwrap()
        .query()
        .unwrap()
        .trim_start_matches("v=")
        .to_owned()
}

#[tokio::test]
async fn an_old_envd_gets_the_user_named_as_the_sdks_name_it() {
    let (fake, p) = crate::world().await;
    fake.set_envd_version(OLD_ENVD_VERSION);
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    let out = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new("echo old"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"old\n");
    let dir = tempfile::tempdir().unwrap();
    let path = format!("{}/f.txt", dir.path().display());
    p.write_file(&ctx(), &created.native_id, &path, b"x")
        .await
        .unwrap();
    assert_eq!(
        p.read_file(&ctx(), &created.native_id, &path, 16)
            .await
            .unwrap(),
        b"x"
    );
    // Connect calls carry `Authorization: Basic base64("user:")`, `/files` `username=user`.
    let log = fake.envd().log().all();
    assert_eq!(log.len(), 4, "start, stat, upload, download");
    for r in &log {
        if r.path == "/files" {
            let query = r.query.as_deref().unwrap();
            assert!(query.ends_with("&username=user"), "{query}");
            assert!(r.headers.get("authorization").is_none());
        } else {
            assert_eq!(r.headers["authorization"], "Basic dXNlcjo=", "{}", r.path);
        }
    }
    // A restarted adapter learns the version from `GET /sandboxes/{id}`.
    let fresh = E2bProvider::from_config(fake.config()).unwrap();
    let out = fresh
        .exec(&ctx(), &created.native_id, &ExecSpec::new("echo again"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"again\n");
}

#[tokio::test]
async fn a_current_envd_gets_no_user_named() {
    let (fake, p) = crate::world().await;
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    p.exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = format!("{}/f.txt", dir.path().display());
    p.write_file(&ctx(), &created.native_id, &path, b"x")
        .await
        .unwrap();
    p.read_file(&ctx(), &created.native_id, &path, 16)
        .await
        .unwrap();
    let log = fake.envd().log().all();
    assert_eq!(log.len(), 4);
    for r in &log {
        assert!(r.headers.get("authorization").is_none(), "{}", r.path);
        assert!(
            !r.query.as_deref().unwrap_or_default().contains("username"),
            "{}",
            r.path
        );
    }
}

#[tokio::test]
async fn the_fakes_old_envd_refuses_requests_that_name_no_user() {
    let (fake, p) = crate::world().await;
    fake.set_envd_version(OLD_ENVD_VERSION);
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    let token = fake.token_of(&created.native_id).unwrap();
    let client = corral_provider_http::reqwest::Client::new();
    let envd = fake.config().envd_url_template;
    let files = |query: &str| {
        client
            .get(format!("{envd}/files?path=%2Fetc%2Fhostname{query}"))
            .header("X-Access-Token", &token)
            .send()
    };
    assert_eq!(files("").await.unwrap().status().as_u16(), 401);
    assert_eq!(
        files("&username=nobody").await.unwrap().status().as_u16(),
        401
    );
    assert_eq!(
        files("&username=user").await.unwrap().status().as_u16(),
        200
    );
    let stat = |auth: Option<&'static str>| {
        let mut req = client
            .post(format!("{envd}/filesystem.Filesystem/Stat"))
            .header("X-Access-Token", &token)
            .header("content-type", "application/json")
            .body(r#"{"path":"/"}"#);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        req.send()
    };
    assert_eq!(stat(None).await.unwrap().status().as_u16(), 401);
    assert_eq!(
        stat(Some("Basic dXNlcjo="))
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    // A stream's refusal is its end-of-stream message.
    let start = client
        .post(format!("{envd}/process.Process/Start"))
        .header("X-Access-Token", &token)
        .header("content-type", "application/connect+json")
        .body(corral_provider_e2b::connect::encode(
            0,
            br#"{"process":{"cmd":"/bin/true"}}"#,
        ))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut d = Decoder::new(1 << 20);
    d.push(&start);
    let eos = d.next_envelope().unwrap().unwrap();
    assert!(eos.is_end_stream());
    assert_eq!(body_json(&eos.data)["error"]["code"], "unauthenticated");
}

/// A provider answer names the envd host: E2B's `domain` is used only when it is a plain host
/// name giving an envd URL on the trusted hosts. The rogue envd (another fake, not trusted)
/// must receive nothing: not the sandbox's token, not a request.
#[tokio::test]
async fn a_domain_naming_another_host_is_refused_and_that_host_receives_nothing() {
    let fake = corral_provider_e2b::fake::Fake::start().await;
    let rogue = corral_provider_e2b::fake::Fake::start().await;
    let rogue_port = rogue.envd().addr().port();
    // The operator's template puts the domain in the host; trusted are the fake's envd and
    // the default domain's envd (a name that never resolves), not the rogue.
    let p = E2bProvider::from_config(corral_provider_e2b::E2bConfig {
        envd_url_template: format!("http://{{domain}}:{rogue_port}"),
        default_domain: "envd.corral.invalid".into(),
        trusted_hosts: vec![
            fake.envd().base_url(),
            format!("http://envd.corral.invalid:{rogue_port}"),
        ],
        ..fake.config()
    })
    .unwrap();
    for domain in [
        "localhost",
        "127.0.0.1",
        "[::1]",
        &format!("127.0.0.1:{rogue_port}"),
        "localhost/x",
        "user@localhost",
        "http://localhost",
    ] {
        fake.set_domain(Some(domain));
        let created = p.create(&ctx(), &spec(None)).await.unwrap();
        let err = p
            .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::Protocol { .. }),
            "{domain}: {err:?}"
        );
        let err = p
            .read_file(&ctx(), &created.native_id, "/etc/hostname", 1024)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::Protocol { .. }),
            "{domain}: {err:?}"
        );
    }
    assert!(rogue.envd().log().all().is_empty());
    assert!(rogue.server().log().all().is_empty());
    assert!(fake.envd().log().all().is_empty());
}

#[tokio::test]
async fn with_the_default_trusted_hosts_a_domain_outside_e2b_is_refused_before_any_lookup() {
    let fake = corral_provider_e2b::fake::Fake::start().await;
    let p = E2bProvider::from_config(corral_provider_e2b::E2bConfig {
        base_url: fake.base_url(),
        ..Default::default()
    })
    .unwrap();
    fake.set_domain(Some("attacker.example"));
    let created = p.create(&ctx(), &spec(None)).await.unwrap();
    let err = p
        .exec(&ctx(), &created.native_id, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    let shown = err.to_string();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
    assert!(shown.contains("attacker.example"), "{shown}");
    let token = fake.token_of(&created.native_id).unwrap();
    assert!(
        !shown.contains(&token) && !shown.contains(API_KEY),
        "{shown}"
    );
}

#[test]
fn an_envd_template_off_the_trusted_hosts_fails_at_construction() {
    let err = E2bProvider::from_config(corral_provider_e2b::E2bConfig {
        envd_url_template: "https://{port}-{sandboxID}.{domain}".into(),
        default_domain: "attacker.example".into(),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn stopping_a_paused_sandbox_reads_e2bs_409_as_the_stop_it_asked_for() {
    let (fake, p) = crate::world().await;
    let s = p.create(&ctx(), &spec(Some(120))).await.unwrap();
    let stopped = p.stop(&ctx(), &s.native_id).await.unwrap();
    assert_eq!(stopped.status, SandboxStatus::Stopped);
    assert_eq!(stopped.operation_id, s.operation_id);
    let pauses = fake.server().log().matching(&Method::POST, "/pause");
    assert_eq!(pauses.len(), 1);
    assert_eq!(pauses[0].path, format!("/sandboxes/{}/pause", s.native_id));
    assert_eq!(pauses[0].headers["x-api-key"], API_KEY);

    // E2B answers a second pause `409 … is already paused`: the adapter reads the sandbox
    // back and answers it stopped.
    let again = p.stop(&ctx(), &s.native_id).await.unwrap();
    assert_eq!(again.status, SandboxStatus::Stopped);
    assert_eq!(
        fake.server().log().matching(&Method::POST, "/pause").len(),
        2
    );

    // A paused sandbox's envd host answers 409: exec is refused, not run.
    let err = p
        .exec(&ctx(), &s.native_id, &ExecSpec::new("echo hi"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );

    // An unknown sandbox stays NotFound.
    let err = p.stop(&ctx(), "inope0000000000000000").await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn resume_connects_with_the_lifetime_of_the_create_and_leaves_a_running_one_alone() {
    let (fake, p) = crate::world().await;
    let s = p.create(&ctx(), &spec(Some(120))).await.unwrap();
    // A running sandbox: answered as it is, no connect (which would extend its lifetime).
    let running = p.resume(&ctx(), &s.native_id).await.unwrap();
    assert_eq!(running.status, SandboxStatus::Running);
    assert!(
        fake.server()
            .log()
            .matching(&Method::POST, "/connect")
            .is_empty()
    );

    p.stop(&ctx(), &s.native_id).await.unwrap();
    let resumed = p.resume(&ctx(), &s.native_id).await.unwrap();
    assert_eq!(resumed.status, SandboxStatus::Running);
    let connects = fake.server().log().matching(&Method::POST, "/connect");
    assert_eq!(connects.len(), 1);
    assert_eq!(
        connects[0].path,
        format!("/sandboxes/{}/connect", s.native_id)
    );
    // `timeout` is required by `ConnectSandbox`: the create's lifetime, from its metadata.
    assert_eq!(
        body_json(&connects[0].body),
        serde_json::json!({"timeout": 120})
    );
    assert_eq!(fake.lifetime_of(&s.native_id), Some(120));
    let out = p
        .exec(&ctx(), &s.native_id, &ExecSpec::new("echo back"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"back\n");
}

#[tokio::test]
async fn a_snapshot_is_an_unnamed_template_restored_by_create_and_deleted_as_a_template() {
    let (fake, p) = crate::world().await;
    let s = p.create(&ctx(), &spec(None)).await.unwrap();
    let snap_spec = SnapshotSpec {
        snapshot_id: SnapshotId::new(Provider::E2b),
        name: Some("my name".into()),
    };
    let snap = p.snapshot(&ctx(), &s.native_id, &snap_spec).await.unwrap();
    // E2B answers 201 once the template exists: ready at once, no size reported.
    assert_eq!(snap.status, SnapshotStatus::Ready);
    assert_eq!(snap.size_bytes, None);
    assert!(snap.native_id.ends_with(":default"), "{}", snap.native_id);
    let posts = fake.server().log().matching(&Method::POST, "/snapshots");
    assert_eq!(
        posts[0].path,
        format!("/sandboxes/{}/snapshots", s.native_id)
    );
    // Never named: a named snapshot's id carries `team-slug/`, and a reused name would add a
    // build to another snapshot's template.
    assert_eq!(body_json(&posts[0].body), serde_json::json!({}));

    let seen = p.get_snapshot(&ctx(), &snap.native_id).await.unwrap();
    assert_eq!(seen, snap);
    let gets = fake.server().log().matching(&Method::GET, "/snapshots");
    assert!(
        gets[0]
            .query
            .as_deref()
            .unwrap()
            .contains(&format!("name={}", snap.native_id.replace(':', "%3A"))),
        "{:?}",
        gets[0].query
    );

    let restore = spec(Some(60));
    let copy = p.restore(&ctx(), &restore, &snap.native_id).await.unwrap();
    let creates = fake.server().log().matching(&Method::POST, "/sandboxes");
    let body = body_json(&creates.last().unwrap().body);
    assert_eq!(body["templateID"], snap.native_id.as_str());
    assert_eq!(
        body["metadata"]["corral_operation_id"],
        restore.operation_id.to_string()
    );
    assert_eq!(copy.operation_id, Some(restore.operation_id));

    p.delete_snapshot(&ctx(), &snap.native_id).await.unwrap();
    let deletes = fake.server().log().matching(&Method::DELETE, "/templates/");
    assert_eq!(deletes[0].path, format!("/templates/{}", snap.native_id));
    let err = p.get_snapshot(&ctx(), &snap.native_id).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    // The adapter answers E2B's 404 as NotFound (the contract wrapper makes it Ok).
    let err = p
        .delete_snapshot(&ctx(), &snap.native_id)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn snapshotting_a_stopped_sandbox_is_refused_not_reported_as_gone() {
    let (_fake, p) = crate::world().await;
    let s = p.create(&ctx(), &spec(None)).await.unwrap();
    p.stop(&ctx(), &s.native_id).await.unwrap();
    let snap_spec = SnapshotSpec {
        snapshot_id: SnapshotId::new(Provider::E2b),
        name: None,
    };
    // E2B answers 404 (its orchestrator holds running sandboxes only); the sandbox exists.
    let err = p
        .snapshot(&ctx(), &s.native_id, &snap_spec)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    // A sandbox that is really gone stays NotFound.
    let err = p
        .snapshot(&ctx(), "inope0000000000000000", &snap_spec)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn a_paused_sandbox_outlives_its_lifetime_until_resumed() {
    let (fake, p) = crate::world().await;
    let s = p.create(&ctx(), &spec(Some(1))).await.unwrap();
    p.stop(&ctx(), &s.native_id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    // E2B keeps paused sandboxes until they are killed.
    assert_eq!(
        p.get(&ctx(), &s.native_id).await.unwrap().status,
        SandboxStatus::Stopped
    );
    p.resume(&ctx(), &s.native_id).await.unwrap();
    assert_eq!(fake.lifetime_of(&s.native_id), Some(1));
}
