//! Sprites' traps: a fixed image whose sprites sleep (a status read must not wake one), exec
//! over the WebSocket protocol only (binary stream frames, the exit as a frame or as JSON, a
//! socket that closes without an exit), `env` that would replace the environment, and file
//! calls that need `workingDir`.

use std::time::Duration;

use corral_domain::SandboxStatus;
use corral_provider::{CallContext, ExecSpec, ProviderError, SandboxProvider, SecretString};
use corral_provider_http::reqwest::{Client, Method, StatusCode};
use corral_provider_sprites::fake::TOKEN;
use corral_provider_testkit::fake::Recorded;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use crate::{created, setup, spec};

fn query_pairs(r: &Recorded) -> Vec<(String, String)> {
    url_pairs(r.query.as_deref().unwrap_or_default())
}

fn url_pairs(query: &str) -> Vec<(String, String)> {
    corral_provider_http::Url::parse(&format!("http://x/?{query}"))
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

#[tokio::test]
async fn create_names_the_sprite_after_the_operation_and_find_reads_it_by_name() {
    let (fake, provider, ctx) = setup().await;
    let s = spec();
    let sprite = provider.create(&ctx, &s).await.unwrap();
    let name = corral_provider_sprites::sprite_name(&s.operation_id);
    assert_eq!(sprite.native_id, name);
    assert_eq!(sprite.operation_id, Some(s.operation_id));
    let r = &fake.server().log().matching(&Method::POST, "/v1/sprites")[0];
    assert_eq!(
        serde_json::from_slice::<Value>(&r.body).unwrap(),
        json!({ "name": name })
    );
    fake.server().log().clear();
    let found = provider
        .find_by_operation_id(&ctx, &s.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].native_id, name);
    let log = fake.server().log().all();
    assert_eq!(
        (log.len(), log[0].path.as_str()),
        (1, format!("/v1/sprites/{name}").as_str())
    );
}

#[tokio::test]
async fn a_status_read_leaves_a_sleeping_sprite_asleep_and_a_command_wakes_it() {
    let (fake, provider, ctx) = setup().await;
    let name = created(&provider, &ctx).await;
    for sleep in ["warm", "cold"] {
        fake.sleep(&name, sleep);
        let seen = provider.get(&ctx, &name).await.unwrap();
        assert_eq!(seen.status, SandboxStatus::Paused);
        assert_eq!(
            fake.status(&name).as_deref(),
            Some(sleep),
            "the read woke it"
        );
    }
    let out = provider
        .exec(&ctx, &name, &ExecSpec::new("echo up"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"up\n");
    assert_eq!(
        provider.get(&ctx, &name).await.unwrap().status,
        SandboxStatus::Running
    );
}

#[tokio::test]
async fn exec_opens_the_websocket_with_the_argv_and_never_sends_env_or_dir() {
    let (fake, provider, ctx) = setup().await;
    let name = created(&provider, &ctx).await;
    fake.server().log().clear();
    let mut spec = ExecSpec::new("printf '%s|%s' \"$GREETING\" \"${PATH:+path-kept}\"; pwd >&2");
    spec.env.insert("GREETING".into(), "hi there".into());
    spec.cwd = Some("/".into());
    spec.timeout = Duration::from_millis(1500);
    let out = provider.exec(&ctx, &name, &spec).await.unwrap();
    // env is added to the sprite's environment, not swapped for it.
    assert_eq!(out.stdout, b"hi there|path-kept");
    assert_eq!(out.stderr, b"/\n");
    let log = fake.server().log().matching(&Method::GET, "/exec");
    assert_eq!(log.len(), 1);
    let r = &log[0];
    assert_eq!(r.path, format!("/v1/sprites/{name}/exec"));
    assert_eq!(r.headers["upgrade"], "websocket");
    assert_eq!(
        r.headers["authorization"],
        format!("Bearer {TOKEN}").as_str()
    );
    let pairs = query_pairs(r);
    let cmd: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "cmd")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(cmd[..6], ["timeout", "-k", "5", "2", "sh", "-c"]);
    assert!(cmd[6].starts_with("cd -- '/' || exit 1\nexport GREETING='hi there'\n"));
    assert!(
        pairs.iter().all(|(k, _)| k != "env" && k != "dir"),
        "{pairs:?}"
    );
    assert!(pairs.contains(&("tty".into(), "false".into())));
}

#[tokio::test]
async fn sprites_own_env_would_replace_the_environment() {
    // What the adapter avoids: with an `env` parameter the command loses PATH and the rest.
    let (fake, provider, ctx) = setup().await;
    let name = created(&provider, &ctx).await;
    let url = format!(
        "ws://{}/v1/sprites/{name}/exec?cmd=/bin/sh&cmd=-c&cmd=printf%20%22%25s%7C%25s%22%20%22%24GREETING%22%20%22%24HOME%22&env=GREETING%3Dhi&tty=false",
        fake.server().addr()
    );
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    ws.send(Message::binary(vec![4u8])).await.unwrap();
    let mut stdout = Vec::new();
    while let Some(Ok(m)) = ws.next().await {
        if let Message::Binary(b) = m {
            match b.first() {
                Some(1) => stdout.extend_from_slice(&b[1..]),
                Some(3) => break,
                _ => {}
            }
        }
    }
    assert_eq!(stdout, b"hi|", "HOME survived an env parameter");
}

#[tokio::test]
async fn the_exit_may_come_as_json_and_a_socket_without_exit_is_an_error() {
    let (fake, provider, ctx) = setup().await;
    let name = created(&provider, &ctx).await;
    fake.exit_as_text(true);
    let out = provider
        .exec(&ctx, &name, &ExecSpec::new("printf '\\377\\000'; exit 7"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, 7);
    assert_eq!(out.stdout, [0xff, 0x00], "binary frames are byte-exact");
    fake.drop_exit(true);
    let err = provider
        .exec(&ctx, &name, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
}

#[tokio::test]
async fn a_wrong_token_on_the_socket_is_unauthorized_without_showing_it() {
    let (_fake, provider, ctx) = setup().await;
    let name = created(&provider, &ctx).await;
    let wrong = CallContext::new(
        Some(SecretString::from("corral-org/x/y/wrong-token-canary")),
        ctx.context().clone(),
    );
    let err = provider
        .exec(&wrong, &name, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("wrong-token-canary"));
    let none = CallContext::new(None, ctx.context().clone());
    let err = provider
        .exec(&none, &name, &ExecSpec::new("true"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::MissingCredential { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn file_calls_carry_working_dir_and_writes_never_create_parents() {
    let (fake, provider, ctx) = setup().await;
    let name = created(&provider, &ctx).await;
    let dir = String::from_utf8(
        provider
            .exec(&ctx, &name, &ExecSpec::new("mktemp -d"))
            .await
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    fake.server().log().clear();
    let path = format!("{dir}/f.bin");
    provider
        .write_file(&ctx, &name, &path, &[0, 1, 255])
        .await
        .unwrap();
    assert_eq!(
        provider.read_file(&ctx, &name, &path, 3).await.unwrap(),
        [0, 1, 255]
    );
    let log = fake.server().log().all();
    let write = log.iter().find(|r| r.path.ends_with("/fs/write")).unwrap();
    let pairs = query_pairs(write);
    for (k, v) in [
        ("path", path.as_str()),
        ("workingDir", "/"),
        ("mkdir", "false"),
        ("mode", "0644"),
    ] {
        assert!(
            pairs.contains(&(k.to_owned(), v.to_owned())),
            "{k} in {pairs:?}"
        );
    }
    assert_eq!(write.body.as_ref(), [0, 1, 255]);
    for r in &log {
        assert!(
            query_pairs(r).iter().any(|(k, _)| k == "workingDir"),
            "{}",
            r.path
        );
    }
    fake.server().log().clear();
    let err = provider
        .write_file(&ctx, &name, &format!("{dir}/missing/f"), b"x")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ParentMissing { .. }),
        "{err:?}"
    );
    assert!(
        fake.server()
            .log()
            .matching(&Method::PUT, "/fs/write")
            .is_empty()
    );
    // Sprites requires workingDir beside path.
    let url = format!("{}/v1/sprites/{name}/fs/read?path={path}", fake.base_url());
    let r = Client::new()
        .get(url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_fake_rejects_what_sprites_rejects() {
    let (fake, provider, ctx) = setup().await;
    let name = created(&provider, &ctx).await;
    let client = Client::new();
    let create = format!("{}/v1/sprites", fake.base_url());
    for bad in [
        json!({}),
        json!({ "name": "Not_Valid" }),
        json!({ "name": "ok", "url_settings": { "auth": "everyone" } }),
        json!({ "name": "ok", "image": "ubuntu" }),
        json!({ "name": name }),
    ] {
        let r = client
            .post(&create)
            .bearer_auth(TOKEN)
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let r = client.get(format!("{create}/{name}")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let big = vec![0u8; corral_provider_sprites::fake::MAX_WRITE_BYTES + 1];
    let r = client
        .put(format!("{create}/{name}/fs/write?path=/tmp/x&workingDir=/"))
        .bearer_auth(TOKEN)
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    drop(ctx);
}
