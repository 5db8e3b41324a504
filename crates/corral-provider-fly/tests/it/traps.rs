//! Fly's traps: the app every machine lives in (request, context, configuration), a native id
//! that carries it, destroy with `force`, exec as an argv with a whole-second `timeout` and no
//! cwd or env of its own, and files through exec only.

use std::time::Duration;

use corral_domain::{FlyCreate, ProviderContext, SandboxStatus};
use corral_provider::{
    Adapter, CallContext, ExecSpec, ProviderError, SandboxProvider, SecretString,
};
use corral_provider_fly::fake::{API_TOKEN, APP, IMAGE};
use corral_provider_fly::{FlyConfig, FlyProvider};
use corral_provider_http::reqwest::{Client, Method, StatusCode};
use corral_provider_testkit::fake::Recorded;
use serde_json::{Value, json};

use crate::{running, setup, spec};

fn body(r: &Recorded) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn ctx_with_app(app: &str) -> CallContext {
    CallContext::new(
        Some(SecretString::from(API_TOKEN)),
        ProviderContext {
            project_id: Some(app.into()),
            ..Default::default()
        },
    )
}

#[tokio::test]
async fn create_sends_image_metadata_name_and_keep_alive_init_and_the_id_carries_the_app() {
    let (fake, provider, ctx) = setup().await;
    let s = spec(FlyCreate {
        image: Some("alpine:3.20".into()),
        region: Some("ams".into()),
        ..FlyCreate::default()
    });
    let created = provider.create(&ctx, &s).await.unwrap();
    assert!(created.native_id.starts_with(&format!("{APP}:")));
    assert_eq!(created.status, SandboxStatus::Creating);
    assert_eq!(created.operation_id, Some(s.operation_id));
    let r = &fake.server().log().matching(&Method::POST, "/machines")[0];
    assert_eq!(r.path, format!("/v1/apps/{APP}/machines"));
    assert_eq!(
        r.headers["authorization"],
        format!("Bearer {API_TOKEN}").as_str()
    );
    assert_eq!(
        body(r),
        json!({
            "name": format!("corral-{}", s.operation_id.to_string().replace('_', "-")),
            "region": "ams",
            "config": {
                "image": "alpine:3.20",
                "metadata": { "corral_operation_id": s.operation_id.to_string() },
                "init": { "exec": ["sleep", "inf"] },
                "auto_destroy": false,
            },
        })
    );
}

#[tokio::test]
async fn the_app_comes_from_the_request_then_the_context_then_the_configuration() {
    let (fake, _, ctx) = setup().await;
    let bare = FlyProvider::from_config(FlyConfig {
        app: None,
        ..fake.config()
    })
    .unwrap();
    let err = bare
        .create(&ctx, &spec(FlyCreate::default()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    assert!(
        fake.server().log().all().is_empty(),
        "a request went out without an app"
    );

    // The context's projectId names the app.
    let created = bare
        .create(&ctx_with_app(APP), &spec(FlyCreate::default()))
        .await
        .unwrap();
    assert!(created.native_id.starts_with(&format!("{APP}:")));
    // The request's app wins over both (the fake has no such app).
    let err = bare
        .create(
            &ctx_with_app(APP),
            &spec(FlyCreate {
                app: Some("other-app".into()),
                ..FlyCreate::default()
            }),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err:?}");
    let paths: Vec<String> = fake
        .server()
        .log()
        .all()
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert_eq!(
        paths,
        [
            format!("/v1/apps/{APP}/machines"),
            "/v1/apps/other-app/machines".to_owned()
        ]
    );
}

#[tokio::test]
async fn find_filters_by_metadata_in_the_context_and_configured_apps() {
    let (fake, provider, ctx) = setup().await;
    let s = spec(FlyCreate::default());
    let created = provider.create(&ctx, &s).await.unwrap();
    provider
        .create(&ctx, &spec(FlyCreate::default()))
        .await
        .unwrap();
    fake.server().log().clear();
    let found = provider
        .find_by_operation_id(&ctx_with_app("gone-app"), &s.operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].native_id, created.native_id);
    let log = fake.server().log().all();
    assert_eq!(log.len(), 2, "the context's app, then the configured one");
    assert_eq!(log[0].path, "/v1/apps/gone-app/machines");
    assert_eq!(log[1].path, format!("/v1/apps/{APP}/machines"));
    assert_eq!(
        log[1].query.as_deref(),
        Some(format!("metadata.corral_operation_id={}", s.operation_id).as_str())
    );
}

#[tokio::test]
async fn delete_forces_the_destroy_of_a_started_machine() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    provider.delete(&ctx, &id).await.unwrap();
    let r = &fake.server().log().matching(&Method::DELETE, "/machines/")[0];
    assert_eq!(r.query.as_deref(), Some("force=true"));
    let machine = id.split_once(':').unwrap().1;
    assert_eq!(fake.state(machine).as_deref(), Some("destroyed"));
    assert_eq!(
        provider.get(&ctx, &id).await.unwrap().status,
        SandboxStatus::Expired
    );
    // Without force, Fly refuses to destroy a started machine.
    let other = running(&provider, &ctx).await;
    let url = format!(
        "{}/apps/{APP}/machines/{}",
        fake.base_url(),
        other.split_once(':').unwrap().1
    );
    let refused = Client::new()
        .delete(url)
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::PRECONDITION_FAILED);
}

#[tokio::test]
async fn exec_sends_sh_c_with_the_prelude_and_a_whole_second_timeout() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    fake.server().log().clear();
    let mut spec = ExecSpec::new("pwd; printf %s \"$GREETING\" >&2");
    spec.cwd = Some("/".into());
    spec.env.insert("GREETING".into(), "it's here".into());
    spec.timeout = Duration::from_millis(2200);
    let out = provider.exec(&ctx, &id, &spec).await.unwrap();
    assert_eq!(out.stdout, b"/\n");
    assert_eq!(out.stderr, b"it's here");
    let r = &fake.server().log().all()[0];
    assert_eq!(
        r.path,
        format!(
            "/v1/apps/{APP}/machines/{}/exec",
            id.split_once(':').unwrap().1
        )
    );
    assert_eq!(
        body(r),
        json!({
            "command": [
                "sh",
                "-c",
                "cd -- '/' || exit 1\nexport GREETING='it'\\''s here'\npwd; printf %s \"$GREETING\" >&2",
            ],
            "timeout": 3,
        })
    );
    // A command killed by Fly's timeout is reported as timed out.
    let mut slow = ExecSpec::new("sleep 30");
    slow.timeout = Duration::from_secs(1);
    let err = provider.exec(&ctx, &id, &slow).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::CommandTimedOut { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn files_travel_through_exec_calls_under_the_argument_limit() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let dir = String::from_utf8(
        provider
            .exec(&ctx, &id, &ExecSpec::new("mktemp -d"))
            .await
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    fake.server().log().clear();
    let path = format!("{dir}/bin");
    let content: Vec<u8> = (0..=255u8).cycle().take(150_000).collect();
    provider
        .write_file(&ctx, &id, &path, &content)
        .await
        .unwrap();
    assert_eq!(
        provider.read_file(&ctx, &id, &path, 1 << 20).await.unwrap(),
        content
    );
    let log = fake.server().log().all();
    assert!(log.len() > 4, "a chunked write takes several commands");
    for r in &log {
        assert!(r.path.ends_with("/exec"), "{}", r.path);
        let script = body(r)["command"][2].as_str().unwrap().to_owned();
        assert!(script.len() <= corral_provider_fly::MAX_COMMAND_BYTES);
    }
}

#[tokio::test]
async fn the_fake_rejects_what_fly_rejects() {
    let (fake, provider, ctx) = setup().await;
    let id = running(&provider, &ctx).await;
    let client = Client::new();
    let machines = format!("{}/apps/{APP}/machines", fake.base_url());
    for bad in [
        json!({ "config": {} }),
        json!({ "config": { "image": IMAGE, "metadata": { "a": 1 } } }),
        json!({ "config": { "image": IMAGE, "init": { "exec": "sleep inf" } } }),
        json!({ "config": { "image": IMAGE }, "timeout": 5 }),
    ] {
        let r = client
            .post(&machines)
            .bearer_auth(API_TOKEN)
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let exec = format!("{machines}/{}/exec", id.split_once(':').unwrap().1);
    for bad in [
        json!({ "command": "ls" }),
        json!({ "command": ["ls"], "timeout": "5" }),
        json!({ "command": ["ls"], "cwd": "/" }),
    ] {
        let r = client
            .post(&exec)
            .bearer_auth(API_TOKEN)
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let other_app = format!("{}/apps/nope/machines", fake.base_url());
    let r = client
        .get(other_app)
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = client.get(&machines).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    drop(ctx);
}
