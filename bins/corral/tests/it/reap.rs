//! `corral reap` through the real binary, beside a running `corral serve` (SQLite) with the
//! E2B adapter pointed at its loopback fake: a sandbox planted at the provider under this
//! deployment's tag is an orphan, one deleted at the provider behind Corral's back vanishes;
//! `--dry-run` changes nothing, a pass records both, the events say so, and another
//! deployment's sandbox is left alone.

use std::time::Duration;

use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{Adapter as _, CreateSpec, SandboxProvider as _};
use reqwest::{Client, Method};
use serde_json::{Value, json};

use crate::serve::{Api, cli, set_default_profile, start};

fn reap(data: &std::path::Path, config: &std::path::Path, dry_run: bool) -> Value {
    let mut args = vec!["reap", "--json", "--config", config.to_str().unwrap()];
    if dry_run {
        args.push("--dry-run");
    }
    let out = cli(data, &args, &[]);
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_finds_a_planted_orphan_and_a_vanished_sandbox_and_a_dry_run_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let fake = corral_provider_e2b::fake::Fake::start().await;
    let config = tmp.path().join("corral.toml");
    let c = fake.config();
    std::fs::write(
        &config,
        format!(
            "[providers]\nenabled = [\"e2b\"]\n[providers.e2b]\nbase_url = \"{}\"\n\
             envd_url_template = \"{}\"\ntrusted_hosts = [\"{}\"]\n[reaper]\nenabled = false\n",
            c.base_url, c.envd_url_template, c.trusted_hosts[0]
        ),
    )
    .unwrap();
    let server = start(&data, &config, 1);
    let api = Api {
        client: Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        base: server.base.clone(),
        key: server.first_key(),
    };
    set_default_profile(&data, "e2b", corral_provider_e2b::fake::API_KEY, &[]);

    let kept = api
        .json(
            Method::POST,
            "/v1/sandboxes",
            Some(json!({"provider": "e2b"})),
            &[],
            201,
        )
        .await;
    let gone = api
        .json(
            Method::POST,
            "/v1/sandboxes",
            Some(json!({"provider": "e2b"})),
            &[],
            201,
        )
        .await;
    let gone_native = gone["metadata"]["nativeProviderId"]
        .as_str()
        .unwrap()
        .to_owned();

    let clean = reap(&data, &config, true);
    let deployment = clean["deployment"].as_str().unwrap().to_owned();
    assert!(deployment.starts_with("dep_"), "{clean}");
    assert_eq!(clean["orphans"], json!([]), "{clean}");
    assert_eq!(clean["gone"], json!([]), "{clean}");

    // Behind Corral's back: one sandbox planted under this deployment's tag, one under
    // another's, and one of Corral's deleted at the provider.
    let adapter = corral_provider_e2b::E2bProvider::from_config(fake.config()).unwrap();
    let plant = |dep: &str| {
        let ctx = fake
            .context()
            .with_deployment(dep)
            .with_project("prj_planted");
        let adapter = &adapter;
        async move {
            adapter
                .create(
                    &ctx,
                    &CreateSpec {
                        operation_id: OperationId::new(),
                        request: CreateSandboxRequest::standard(Provider::E2b, None, None),
                        timeout_seconds: Some(3600),
                    },
                )
                .await
                .unwrap()
                .native_id
        }
    };
    let orphan = plant(&deployment).await;
    let _foreign = plant("dep_another_deployment").await;
    adapter.delete(&fake.context(), &gone_native).await.unwrap();

    let dry = reap(&data, &config, true);
    assert_eq!(dry["dryRun"], json!(true));
    let orphans = dry["orphans"].as_array().unwrap();
    assert_eq!(orphans.len(), 1, "{dry}");
    assert_eq!(orphans[0]["nativeId"], json!(orphan));
    assert_eq!(orphans[0]["project"], json!("prj_planted"));
    assert_eq!(
        dry["gone"],
        json!([{"sandboxId": gone["id"], "project": dry["gone"][0]["project"], "reason": "vanished"}]),
    );
    // The dry run recorded nothing: the registry still lists the sandbox as live.
    let listed = api.json(Method::GET, "/v1/sandboxes", None, &[], 200).await;
    let live = |listed: &Value, id: &Value| {
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| &s["id"] == id)
            .map(|s| s["status"].clone())
    };
    assert_eq!(live(&listed, &gone["id"]), Some(json!("running")));

    let done = reap(&data, &config, false);
    assert_eq!(done["orphans"][0]["firstSeen"], json!(true), "{done}");
    assert_eq!(
        done["orphans"][0]["deleted"],
        json!(false),
        "deleting is off by default"
    );
    assert_eq!(done["gone"][0]["reason"], json!("vanished"));
    let listed = api.json(Method::GET, "/v1/sandboxes", None, &[], 200).await;
    assert_eq!(live(&listed, &gone["id"]), Some(json!("expired")));
    assert_eq!(live(&listed, &kept["id"]), Some(json!("running")));
    let events = api
        .json(Method::GET, "/v1/events?after=0", None, &[], 200)
        .await;
    let kinds: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"sandbox.vanished"), "{kinds:?}");
    // The orphan names a project this server never had: reported, but in no project's log.
    assert!(!kinds.contains(&"sandbox.orphan_found"), "{kinds:?}");

    // A second pass sees the same orphan again, not for the first time.
    let again = reap(&data, &config, false);
    assert_eq!(again["orphans"][0]["firstSeen"], json!(false), "{again}");
    assert_eq!(again["gone"], json!([]));
    drop(server);
}
