//! The request log through the real binary: `off` logs no ordinary request but still every
//! 5xx and every slow answer; `sampled` logs one request in N (`[http]` request_log,
//! request_log_sample, slow_request_ms, here through their environment variables).

use std::time::Duration;

use reqwest::{Client, Method};
use serde_json::json;

use crate::serve::{Api, set_default_profile, start_with_env};

/// The request lines of a server's log (the middleware's, which alone carry `took_ms`).
fn request_lines(logs: &str) -> Vec<&str> {
    logs.lines().filter(|l| l.contains("took_ms=")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_still_logs_server_errors_and_slow_answers_and_sampled_logs_one_in_n() {
    use corral_provider_testkit::fake::{Fault, FaultKind};
    const KEY: &str = "request-log-morph-key";
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let morph = corral_provider_morph::fake::Fake::start_with_key(KEY).await;
    let config = tmp.path().join("corral.toml");
    // The file says `all`; the environment wins.
    std::fs::write(
        &config,
        format!(
            "[http]\nrequest_log = \"all\"\n\
             [providers]\nenabled = [\"local\", \"morph\"]\n[providers.morph]\nbase_url = \"{}\"\n",
            morph.base_url()
        ),
    )
    .unwrap();
    let off = [
        ("CORRAL_REQUEST_LOG", "off"),
        ("CORRAL_SLOW_REQUEST_MS", "700"),
    ];
    let server = start_with_env(&data, &config, 1, &off);
    let api = Api {
        client: Client::new(),
        base: server.base.clone(),
        key: server.first_key(),
    };
    set_default_profile(&data, "morph", KEY, &[]);
    for _ in 0..5 {
        api.json(Method::GET, "/healthz", None, &[], 200).await;
    }
    let anonymous = Client::new()
        .get(format!("{}/v1/sandboxes", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    // A provider refusing the create: 503.
    morph.server().faults().arm(
        Fault::status(503)
            .on_path("/api/instance")
            .on_method(Method::POST),
    );
    let create = json!({"provider": "morph", "image": "snapshot_log"});
    let (status, _, text) = api
        .call(Method::POST, "/v1/sandboxes", Some(create.clone()), &[])
        .await;
    assert_eq!(status, 503, "{text}");
    // A provider answering after 1 s: a slow 201.
    morph.server().faults().arm(
        Fault::new(FaultKind::DelayAfterHandler(Duration::from_secs(1)))
            .on_path("/api/instance")
            .on_method(Method::POST),
    );
    let created = api
        .json(Method::POST, "/v1/sandboxes", Some(create), &[], 201)
        .await;
    let id = created["id"].as_str().unwrap();
    let (status, _, text) = api
        .call(Method::DELETE, &format!("/v1/sandboxes/{id}"), None, &[])
        .await;
    assert!(status.is_success(), "{text}");
    let logs = server.stop();
    let lines = request_lines(&logs);
    assert_eq!(
        lines.len(),
        2,
        "only the 503 and the slow create: {lines:#?}"
    );
    assert!(
        lines[0].contains("WARN") && lines[0].contains("status=503") && lines[0].contains("error"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("WARN") && lines[1].contains("status=201") && lines[1].contains("slow"),
        "{}",
        lines[1]
    );
    assert!(
        lines.iter().all(|l| l.contains("request_id=req_")),
        "each line carries its request id: {lines:#?}"
    );
    assert!(logs.contains("request_log=\"off\"") || logs.contains("request_log=off"));

    // Sampled, one in three: requests 0 and 3 of six.
    let sampled = [
        ("CORRAL_REQUEST_LOG", "sampled"),
        ("CORRAL_REQUEST_LOG_SAMPLE", "3"),
    ];
    let server = start_with_env(&data, &config, 2, &sampled);
    let api = Api {
        client: Client::new(),
        base: server.base.clone(),
        key: api.key,
    };
    for _ in 0..6 {
        api.json(Method::GET, "/healthz", None, &[], 200).await;
    }
    let logs = server.stop();
    let lines = request_lines(&logs);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("INFO") && l.contains("status=200") && l.contains("sampled")),
        "{lines:#?}"
    );
}
