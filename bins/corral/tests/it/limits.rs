//! The service's own limits, through HTTP: request rates per API key and per project with
//! `Retry-After` and the IETF draft `RateLimit`/`RateLimit-Policy` headers, the throttle on
//! failed authentication per source address, quotas on live sandboxes refused before any
//! provider call, and caps on commands running at once per project and per server.

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::test::{self, TestRequest};
use corral_domain::Provider;
use corral_provider::{ExposeSecret as _, SandboxProvider};
use corral_provider_testkit::held::HeldExecs;
use corral_service::ServiceConfig;
use corral_service::limiter::{ExecConcurrency, Quotas, Rate, RateLimits};
use serde_json::json;

use crate::support::{Counting, Providers, Resp, World, delete, get, post, send};

/// A rate that does not refill within a test: exactly `burst` requests pass.
fn burst(burst: u32) -> Option<Rate> {
    Some(Rate {
        per_second: 0.001,
        burst,
    })
}

fn header<'a>(r: &'a Resp, name: &str) -> &'a str {
    r.headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", r.headers))
        .to_str()
        .unwrap()
}

#[actix_web::test]
async fn the_per_key_rate_answers_rate_limited_with_retry_after_and_ratelimit_headers() {
    let w = World::with(
        |_| Providers::new(),
        ServiceConfig {
            rate_limits: RateLimits {
                per_key: burst(3),
                ..RateLimits::default()
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    for left in [2, 1, 0] {
        let r = send(&app, get(&w, "/v1/sandboxes")).await;
        r.expect_ok(200);
        assert_eq!(header(&r, "ratelimit-policy"), "\"per-key\";q=3;w=3000");
        assert!(
            header(&r, "ratelimit").starts_with(&format!("\"per-key\";r={left};t=")),
            "{:?}",
            r.headers
        );
    }
    let refused = send(&app, get(&w, "/v1/sandboxes")).await;
    refused.expect_error(429, "rate_limited");
    assert!(header(&refused, "retry-after").parse::<u64>().unwrap() >= 1);
    assert!(header(&refused, "ratelimit").starts_with("\"per-key\";r=0;"));
    assert_eq!(refused.json["error"]["retryable"], true);
    // Another key of the same project has its own bucket.
    let other = w.registry.issue_api_key(w.project).await.unwrap();
    let r = send(
        &app,
        TestRequest::get().uri("/v1/sandboxes").insert_header((
            "Authorization",
            format!("Bearer {}", other.key.expose_secret()),
        )),
    )
    .await;
    r.expect_ok(200);
}

#[actix_web::test]
async fn the_per_project_rate_counts_every_key_of_the_project() {
    let w = World::with(
        |_| Providers::new(),
        ServiceConfig {
            rate_limits: RateLimits {
                per_project: burst(2),
                ..RateLimits::default()
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let other = w.registry.issue_api_key(w.project).await.unwrap();
    let with_other = || {
        TestRequest::get().uri("/v1/providers").insert_header((
            "Authorization",
            format!("Bearer {}", other.key.expose_secret()),
        ))
    };
    send(&app, get(&w, "/v1/providers")).await.expect_ok(200);
    send(&app, with_other()).await.expect_ok(200);
    let refused = send(&app, with_other()).await;
    refused.expect_error(429, "rate_limited");
    assert!(header(&refused, "ratelimit").starts_with("\"per-project\";r=0;"));
    // Another project is not affected.
    let stranger = w.other_project_key("stranger").await;
    let r = send(
        &app,
        TestRequest::get()
            .uri("/v1/providers")
            .insert_header(("Authorization", format!("Bearer {stranger}"))),
    )
    .await;
    r.expect_ok(200);
}

#[actix_web::test]
async fn failed_authentications_are_throttled_per_source_address() {
    let w = World::with(
        |_| Providers::new(),
        ServiceConfig {
            rate_limits: RateLimits {
                auth_failures: burst(2),
                ..RateLimits::default()
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let from = |ip: &str, key: &str| {
        TestRequest::get()
            .uri("/v1/sandboxes")
            .peer_addr(format!("{ip}:40000").parse::<SocketAddr>().unwrap())
            .insert_header(("Authorization", format!("Bearer {key}")))
    };
    let wrong = "crl_aaaaaaaaaaaaaaaa_wrong";
    for _ in 0..2 {
        send(&app, from("10.0.0.1", wrong))
            .await
            .expect_error(401, "authentication_error");
    }
    // The third attempt from that address is refused before the key is looked at, even a
    // good key.
    let refused = send(&app, from("10.0.0.1", &w.key)).await;
    refused.expect_error(429, "rate_limited");
    assert!(header(&refused, "retry-after").parse::<u64>().unwrap() >= 1);
    // Another address is unaffected; successful requests do not count.
    for _ in 0..3 {
        send(&app, from("10.0.0.2", &w.key)).await.expect_ok(200);
    }
    send(&app, from("10.0.0.2", wrong))
        .await
        .expect_error(401, "authentication_error");
}

#[actix_web::test]
async fn quotas_on_live_sandboxes_are_refused_before_any_provider_call() {
    let scripted = Arc::new(Counting::new(Provider::E2b, false));
    let s2 = scripted.clone();
    let w = World::with(
        move |_| {
            let mut m = Providers::new();
            m.insert(Provider::E2b, s2 as Arc<dyn SandboxProvider>);
            m
        },
        ServiceConfig {
            quotas: Quotas {
                live_sandboxes: Some(2),
                live_sandboxes_per_provider: [(Provider::E2b, 1)].into(),
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let create = |provider: &str| {
        post(&w, "/v1/sandboxes", json!({"provider": provider}))
            .insert_header(("X-Provider-Credential", "inline-cred-1"))
    };
    let e2b = send(&app, create("e2b")).await;
    let e2b_id = e2b.expect_ok(201)["id"].as_str().unwrap().to_owned();
    // The per-provider quota: refused with a clear message, the provider never asked.
    let refused = send(&app, create("e2b")).await;
    refused.expect_error(429, "rate_limited");
    let message = refused.json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("quota") && message.contains("e2b"),
        "{message}"
    );
    assert_eq!(scripted.count("create"), 1);
    // The project-wide quota.
    send(&app, create("local")).await.expect_ok(201);
    let refused = send(&app, create("local")).await;
    refused.expect_error(429, "rate_limited");
    assert!(
        refused.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("quota"),
        "{}",
        refused.text
    );
    // Deleting frees a place (tombstones do not count).
    send(
        &app,
        delete(&w, &format!("/v1/sandboxes/{e2b_id}"))
            .insert_header(("X-Provider-Credential", "inline-cred-1")),
    )
    .await
    .expect_ok(200);
    send(&app, create("e2b")).await.expect_ok(201);
    assert_eq!(scripted.count("create"), 2);
    // Listing shows the two live sandboxes and the tombstone.
    let page = send(&app, get(&w, "/v1/sandboxes")).await;
    assert_eq!(page.expect_ok(200)["items"].as_array().unwrap().len(), 3);
}

#[actix_web::test]
async fn a_replay_is_never_refused_by_the_quota() {
    let w = World::with(
        |_| Providers::new(),
        ServiceConfig {
            quotas: Quotas {
                live_sandboxes: Some(1),
                ..Quotas::default()
            },
            ..ServiceConfig::default()
        },
    )
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let keyed = |key: &str| {
        post(&w, "/v1/sandboxes", json!({"provider": "local"}))
            .insert_header(("Idempotency-Key", key))
    };
    let first = send(&app, keyed("q-1")).await;
    first.expect_ok(201);
    let replay = send(&app, keyed("q-1")).await;
    replay.expect_ok(200);
    assert_eq!(replay.text, first.text);
    // A new key is a new create: refused, and the key stays free for later.
    send(&app, keyed("q-2"))
        .await
        .expect_error(429, "rate_limited");
    let id = first.json["id"].as_str().unwrap();
    send(&app, delete(&w, &format!("/v1/sandboxes/{id}")))
        .await
        .expect_ok(200);
    send(&app, keyed("q-2")).await.expect_ok(201);
}

/// Two replicas on one PostgreSQL database: the live-sandbox quota is counted in the registry,
/// so a create on one replica counts on the other (request rates are per replica, by design).
#[actix_web::test]
async fn on_postgres_the_quota_holds_across_two_replicas() {
    let Some(db) = corral_registry::testing::TestDb::postgres("quota_two_replicas").await else {
        return;
    };
    let config = ServiceConfig {
        quotas: Quotas {
            live_sandboxes: Some(1),
            ..Quotas::default()
        },
        ..ServiceConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let a = World::with_db(
        dir,
        db.connect().await,
        |_| Providers::new(),
        config.clone(),
        None,
    )
    .await;
    // Replica B: its own service, providers and pools over the same database and master key.
    let mut providers = Providers::new();
    providers.insert(Provider::Local, crate::support::local(a.dir.path()));
    let b_db = db.connect().await;
    let b_service = corral_service::Service::new(
        providers,
        corral_registry::Registry::new(
            b_db.clone(),
            corral_registry::MasterKey::load_or_create(&a.dir.path().join("master.key")).unwrap(),
        ),
        corral_idempotency::IdempotencyStore::new(
            b_db,
            corral_idempotency::IdempotencyConfig::default(),
        ),
        config,
    );
    let b_state = corral_web::AppState {
        service: b_service,
        // The control plane is not exercised here; A's serves as well as any.
        control: a.state.control.clone(),
        metrics: Arc::new(corral_web::request_metrics()),
        build: corral::server::build_info(),
        e2b: None,
    };
    let app_a = test::init_service(corral::server::app(a.state.clone())).await;
    let app_b = test::init_service(corral::server::app(b_state)).await;
    let created = send(
        &app_a,
        post(&a, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await;
    let id = created.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let refused = send(
        &app_b,
        post(&a, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await;
    refused.expect_error(429, "rate_limited");
    assert!(refused.text.contains("quota"), "{}", refused.text);
    send(&app_b, delete(&a, &format!("/v1/sandboxes/{id}")))
        .await
        .expect_ok(200);
    send(
        &app_b,
        post(&a, "/v1/sandboxes", json!({"provider": "local"})),
    )
    .await
    .expect_ok(201);
}

/// A world whose `local` is the held-exec double: every exec waits until the test lets it go.
async fn held_world(config: ServiceConfig) -> (World, Arc<HeldExecs>) {
    let double = Arc::new(HeldExecs::new(Provider::Local));
    let d2 = double.clone();
    let w = World::with(
        move |_| {
            let mut m = Providers::new();
            m.insert(Provider::Local, d2 as Arc<dyn SandboxProvider>);
            m
        },
        config,
    )
    .await;
    (w, double)
}

fn bearer(key: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {key}"))
}

fn exec_as(key: &str, sandbox: &str) -> TestRequest {
    TestRequest::post()
        .uri(&format!("/v1/sandboxes/{sandbox}/exec"))
        .insert_header(bearer(key))
        .set_json(json!({"command": "echo ok"}))
}

fn create_as(key: &str) -> TestRequest {
    TestRequest::post()
        .uri("/v1/sandboxes")
        .insert_header(bearer(key))
        .set_json(json!({"provider": "local"}))
}

/// Sends an exec that must be answered without waiting for any running command.
async fn send_now<S, B>(app: &S, req: TestRequest) -> Resp
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    tokio::time::timeout(std::time::Duration::from_secs(5), send(app, req))
        .await
        .expect("an exec over the cap must be refused at once, not queued")
}

#[track_caller]
fn assert_exec_refused(r: &Resp) {
    r.expect_error(429, "rate_limited");
    assert_eq!(header(r, "retry-after"), "1");
    assert_eq!(r.json["error"]["retryable"], true);
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("commands"),
        "{}",
        r.text
    );
}

/// The finding: 80 concurrent long execs from one key all ran. With the default caps, the
/// 33rd concurrent exec of a project is refused at once, while another project's exec runs.
#[actix_web::test]
async fn the_33rd_concurrent_exec_of_a_project_is_429_with_retry_after_and_other_projects_still_run()
 {
    let (w, double) = held_world(ServiceConfig::default()).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let other = w.other_project_key("other").await;
    let mine = send(&app, create_as(&w.key)).await.expect_ok(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let theirs = send(&app, create_as(&other)).await.expect_ok(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let held = futures::future::join_all(
        (0..32)
            .map(|_| exec_as(&w.key, &mine))
            .chain([exec_as(&other, &theirs)])
            .map(|req| send(&app, req)),
    );
    let probe = async {
        // 32 of this project and 1 of the other are inside the provider at once.
        double.until_arrived(33).await;
        let refused = send_now(&app, exec_as(&w.key, &mine)).await;
        assert_exec_refused(&refused);
        assert_eq!(
            double.arrived(),
            33,
            "the refused exec never reached the provider"
        );
        double.release(33);
    };
    let (answers, ()) = futures::join!(held, probe);
    for r in &answers {
        assert_eq!(r.expect_ok(200)["stdout"], "ok\n");
    }
    // Every place was given back.
    assert_eq!(w.service.execs_running(None), 0);
    double.release(1);
    send(&app, exec_as(&w.key, &mine)).await.expect_ok(200);
}

#[actix_web::test]
async fn the_server_cap_refuses_any_project_once_the_server_runs_its_most() {
    let (w, double) = held_world(ServiceConfig {
        exec_concurrency: ExecConcurrency {
            per_project: Some(10),
            total: Some(2),
        },
        ..ServiceConfig::default()
    })
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let (b, c) = (
        w.other_project_key("b").await,
        w.other_project_key("c").await,
    );
    let mut ids = Vec::new();
    for key in [&w.key, &b, &c] {
        let r = send(&app, create_as(key)).await;
        ids.push(r.expect_ok(201)["id"].as_str().unwrap().to_owned());
    }
    let held = futures::future::join(
        send(&app, exec_as(&w.key, &ids[0])),
        send(&app, exec_as(&b, &ids[1])),
    );
    let probe = async {
        double.until_arrived(2).await;
        let refused = send_now(&app, exec_as(&c, &ids[2])).await;
        assert_exec_refused(&refused);
        assert!(refused.text.contains("server"), "{}", refused.text);
        // Operators see it: the gauge of running commands is at the cap.
        let m = send_now(&app, TestRequest::get().uri("/metrics")).await;
        for line in ["corral_execs_running 2\n", "corral_execs_max 2\n"] {
            assert!(m.text.contains(line), "{line}: {}", m.text);
        }
        double.release(2);
    };
    let ((one, two), ()) = futures::join!(held, probe);
    one.expect_ok(200);
    two.expect_ok(200);
    double.release(1);
    send(&app, exec_as(&c, &ids[2])).await.expect_ok(200);
}

/// One place per project: after a client that went away, and after a command's deadline,
/// the next exec is admitted (answered for itself, not `rate_limited`).
#[actix_web::test]
async fn an_exec_place_is_given_back_after_a_cancelled_request_and_after_a_timeout() {
    let (w, double) = held_world(ServiceConfig {
        exec_concurrency: ExecConcurrency {
            per_project: Some(1),
            total: Some(1),
        },
        exec_deadline: std::time::Duration::from_millis(300),
        ..ServiceConfig::default()
    })
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let id = send(&app, create_as(&w.key)).await.expect_ok(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The command's deadline passes: request_timeout, and the place is free again.
    let timed_out = send(&app, exec_as(&w.key, &id)).await;
    timed_out.expect_error(504, "request_timeout");
    assert_eq!(w.service.execs_running(None), 0);

    // A client that goes away while its command is held: the request future is dropped.
    {
        let abandoned = send(&app, exec_as(&w.key, &id));
        futures::pin_mut!(abandoned);
        let probe = async {
            double.until_arrived(2).await;
            // Meanwhile the project's one place is taken.
            let refused = send_now(&app, exec_as(&w.key, &id)).await;
            assert_exec_refused(&refused);
        };
        futures::pin_mut!(probe);
        match futures::future::select(abandoned, probe).await {
            futures::future::Either::Right(((), _abandoned)) => {}
            futures::future::Either::Left((r, _)) => panic!("the held exec answered: {r:?}"),
        }
    }
    assert_eq!(w.service.execs_running(None), 0);
    assert_eq!(
        double.running(),
        0,
        "the provider call was dropped with the request"
    );
    double.release(1);
    send(&app, exec_as(&w.key, &id)).await.expect_ok(200);
}

/// The real binary reads `[limits] max_concurrent_execs_per_project` and `[local]
/// exec_threads`: with two places, the third concurrent `sleep` on `local` is refused with
/// 429 and `Retry-After`, and once the two finish, an exec runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_takes_the_exec_caps_from_its_configuration() {
    use reqwest::Method;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config = tmp.path().join("corral.toml");
    std::fs::write(
        &config,
        "[limits]\nmax_concurrent_execs_per_project = 2\n[local]\ndisk_mib = 32\nexec_threads = 4\n",
    )
    .unwrap();
    let server = crate::serve::start(&data, &config, 1);
    let key = server.first_key();
    let api = crate::serve::Api {
        client: reqwest::Client::new(),
        base: server.base.clone(),
        key,
    };
    let created = api
        .json(
            Method::POST,
            "/v1/sandboxes",
            Some(json!({"provider": "local"})),
            &[],
            201,
        )
        .await;
    let exec = format!("/v1/sandboxes/{}/exec", created["id"].as_str().unwrap());
    let native = created["metadata"]["nativeProviderId"].as_str().unwrap();
    let workspace = data.join("sandboxes").join(native).join("fs/workspace");
    let marker = |n: u32| json!({"command": format!("touch /workspace/started-{n}; sleep 3; echo done-{n}")});
    let slow = |n: u32| api.json(Method::POST, &exec, Some(marker(n)), &[], 200);
    let probe = async {
        // Both commands have started (each left its marker) and have 3 s to go.
        for n in [1, 2] {
            let started = workspace.join(format!("started-{n}"));
            for _ in 0..1000 {
                if started.exists() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(started.exists(), "command {n} never started");
        }
        let (status, headers, text) = api
            .call(
                Method::POST,
                &exec,
                Some(json!({"command": "echo third"})),
                &[],
            )
            .await;
        assert_eq!(status.as_u16(), 429, "{text}");
        assert!(text.contains("\"rate_limited\""), "{text}");
        assert_eq!(headers["retry-after"], "1");
    };
    let (one, two, ()) = futures::join!(slow(1), slow(2), probe);
    assert_eq!(one["stdout"], "done-1\n");
    assert_eq!(two["stdout"], "done-2\n");
    let again = api
        .json(
            Method::POST,
            &exec,
            Some(json!({"command": "echo again"})),
            &[],
            200,
        )
        .await;
    assert_eq!(again["stdout"], "again\n");
    server.stop();
}
