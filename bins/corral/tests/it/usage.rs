//! Usage and cost estimates through the real `corral serve` binary: a `local` sandbox's
//! running time appears in `GET /v1/usage` and `GET /v1/sandboxes/{id}/usage`, stops growing
//! once it is deleted, costs nothing (no rates), and bad ranges are `invalid_request`.

use std::time::Duration;

use reqwest::{Client, Method};
use serde_json::{Value, json};

use crate::serve::{Api, start};

/// The sum of `runningSeconds` over the report's `local` rows, and their sandbox counts.
fn local_totals(report: &Value) -> (u64, u64) {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["provider"] == "local")
        .fold((0, 0), |(s, n), r| {
            (
                s + r["runningSeconds"].as_u64().unwrap(),
                n.max(r["sandboxes"].as_u64().unwrap()),
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_sandboxs_running_time_is_reported_as_a_free_estimate() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config = tmp.path().join("corral.toml");
    std::fs::write(
        &config,
        "[providers]\nenabled = [\"local\"]\n[local]\ndisk_mib = 32\ndisk_reserve_mib = 256\n",
    )
    .unwrap();
    let server = start(&data, &config, 1);
    let api = Api {
        client: Client::new(),
        base: server.base.clone(),
        key: server.first_key(),
    };
    let (get, post, delete) = (Method::GET, Method::POST, Method::DELETE);

    // `local` publishes no rates: it costs nothing.
    let cat = api.json(get.clone(), "/v1/providers", None, &[], 200).await;
    assert_eq!(cat["providers"][0]["pricing"]["rates"], json!([]));

    let empty = api.json(get.clone(), "/v1/usage", None, &[], 200).await;
    assert_eq!(empty["rows"], json!([]));
    assert!(empty["basis"].as_str().unwrap().starts_with("Estimates"));

    let sb = api
        .json(
            post.clone(),
            "/v1/sandboxes",
            Some(json!({"provider": "local"})),
            &[],
            201,
        )
        .await;
    let id = sb["id"].as_str().unwrap().to_owned();
    // A get observes it running; from then on it counts.
    let seen = api
        .json(get.clone(), &format!("/v1/sandboxes/{id}"), None, &[], 200)
        .await;
    assert_eq!(seen["status"], "running", "{seen}");
    tokio::time::sleep(Duration::from_millis(2200)).await;

    let report = api.json(get.clone(), "/v1/usage", None, &[], 200).await;
    let (secs, count) = local_totals(&report);
    assert!((2..60).contains(&secs), "{report}");
    assert_eq!(count, 1, "{report}");
    let row = &report["rows"][0];
    assert_eq!(row["estimatedCost"], json!([]), "{report}");
    assert_eq!(row["evidence"]["rates"], json!([]), "{report}");
    assert!(
        row["evidence"]["sourceUrl"]
            .as_str()
            .unwrap()
            .starts_with("https://")
    );

    let mine = api
        .json(
            get.clone(),
            &format!("/v1/sandboxes/{id}/usage"),
            None,
            &[],
            200,
        )
        .await;
    assert_eq!(mine["sandboxId"], id.as_str());
    assert!(mine["runningSeconds"].as_u64().unwrap() >= 2, "{mine}");

    // Deleted: its running time stops growing.
    api.json(
        delete.clone(),
        &format!("/v1/sandboxes/{id}"),
        None,
        &[],
        200,
    )
    .await;
    let after = api
        .json(
            get.clone(),
            &format!("/v1/sandboxes/{id}/usage"),
            None,
            &[],
            200,
        )
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = api
        .json(
            get.clone(),
            &format!("/v1/sandboxes/{id}/usage"),
            None,
            &[],
            200,
        )
        .await;
    assert_eq!(after["runningSeconds"], later["runningSeconds"]);
    let report = api.json(get.clone(), "/v1/usage", None, &[], 200).await;
    assert_eq!(
        local_totals(&report).0,
        later["runningSeconds"].as_u64().unwrap()
    );

    // A range before the sandbox existed has no rows.
    let old = api
        .json(
            get.clone(),
            "/v1/usage?from=2020-01-01&to=2020-01-02",
            None,
            &[],
            200,
        )
        .await;
    assert_eq!(old["rows"], json!([]));

    // A range longer than 93 days is cut to the days before `to`; a reversed one is empty.
    let cut = api
        .json(
            get.clone(),
            "/v1/usage?from=2026-01-01&to=2026-11-01",
            None,
            &[],
            200,
        )
        .await;
    assert_eq!(cut["from"], json!("2026-07-31T00:00:00.000Z"), "{cut}");
    let reversed = api
        .json(
            get.clone(),
            "/v1/usage?to=2020-01-01&from=2020-01-02",
            None,
            &[],
            200,
        )
        .await;
    assert_eq!(reversed["rows"], json!([]), "{reversed}");
    // Bad input is a 400 invalid_request, never a 500.
    for q in ["from=yesterday", "to=0000-00-00", "since=2026-01-01"] {
        let (st, _, body) = api
            .call(get.clone(), &format!("/v1/usage?{q}"), None, &[])
            .await;
        assert_eq!(st, 400, "{q}: {body}");
        assert!(body.contains(r#""code":"invalid_request""#), "{q}: {body}");
    }
    let (st, _, body) = api
        .call(get.clone(), "/v1/sandboxes/sbx_nope/usage", None, &[])
        .await;
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("invalid_sandbox_id"), "{body}");
}

/// Every compiled-in provider's pricing evidence passes the checks, and each structured rate
/// is a figure its prose summary publishes (no invented figures): the rate appears in the
/// summary, except Vercel's creations, published as "$0.60 per 1M".
#[test]
fn every_structured_rate_is_a_figure_the_summary_publishes() {
    use corral_domain::usage::Money;
    use corral_domain::{Provider, RateUnit};
    let all = corral::wiring::compiled_in_capabilities();
    assert!(all.len() > 1, "adapters are compiled in");
    let mut rated = Vec::new();
    for caps in &all {
        caps.check()
            .unwrap_or_else(|e| panic!("{}: {e}", caps.provider));
        for rate in &caps.pricing.rates {
            if caps.provider == Provider::Vercel && rate.unit == RateUnit::SandboxCreation {
                assert!(caps.pricing.summary.contains("$0.60 per 1M"));
                assert_eq!(
                    Money::parse(&rate.rate).unwrap().picos() * 1_000_000,
                    Money::parse("0.60").unwrap().picos()
                );
                continue;
            }
            assert!(
                caps.pricing.summary.contains(&rate.rate),
                "{}: {} {} is not in the summary {:?}",
                caps.provider,
                rate.unit.as_str(),
                rate.rate,
                caps.pricing.summary
            );
        }
        if !caps.pricing.rates.is_empty() {
            rated.push(caps.provider);
        }
    }
    // `local` costs nothing: no rates.
    assert!(!rated.contains(&Provider::Local));
}
