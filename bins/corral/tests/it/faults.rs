//! Provider faults through the real server: `corral serve` (SQLite) with the Morph adapter
//! pointed at its loopback fake, whose fault injection (testkit `FaultKind`) makes the
//! provider rate-limit, fail, lose answers after acting, trickle, flood or garble its bodies.
//! Each test checks the public answer (code, status, `Retry-After`, time taken), what the
//! fake received (no retry storm, never a second create) and what the server did afterwards
//! (adoption by the reconciler, bounded memory).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_provider_testkit::fake::{FakeServer, Fault, FaultKind};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use crate::serve::{Api, Server, Timed, set_default_profile, start};

/// The Morph credential the fake accepts (stored as the project's profile, so the reconciler
/// can act without a client).
const KEY: &str = "faults-morph-key-1";
/// The adapter's whole-request timeout in these tests (`[providers.morph.http]`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The adapter's response cap in these tests.
const MAX_RESPONSE_BYTES: usize = 8 << 20;
/// The exec deadline in these tests.
const EXEC_DEADLINE: Duration = Duration::from_secs(3);
/// The create path on the fake.
const CREATE: &str = "/api/instance";

struct World {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    morph: corral_provider_morph::fake::Fake,
    _server: Server,
    api: Api,
}

/// A server on SQLite with only Morph enabled (its fake behind it), the profile stored, rate
/// limits off, a reconciler every second with a 2 s grace, and short provider timeouts.
async fn world() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let morph = corral_provider_morph::fake::Fake::start_with_key(KEY).await;
    let config = tmp.path().join("corral.toml");
    std::fs::write(
        &config,
        format!(
            "[providers]\nenabled = [\"morph\"]\n[providers.morph]\nbase_url = \"{}\"\n\
             [providers.morph.http]\nrequest_timeout_seconds = {}\nmax_response_bytes = {}\n\
             [limits]\nexec_deadline_seconds = {}\n\
             [rate_limits]\nenabled = false\n\
             [reconciler]\ninterval_seconds = 1\ngrace_seconds = 2\n",
            morph.base_url(),
            REQUEST_TIMEOUT.as_secs(),
            MAX_RESPONSE_BYTES,
            EXEC_DEADLINE.as_secs(),
        ),
    )
    .unwrap();
    let server = start(&data, &config, 1);
    let key = server.first_key();
    set_profile(&data);
    let api = Api {
        client: Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
        base: server.base.clone(),
        key,
    };
    World {
        _tmp: tmp,
        data,
        morph,
        _server: server,
        api,
    }
}

fn set_profile(data: &Path) {
    set_default_profile(data, "morph", KEY, &[]);
}

/// One answer, parsed.
struct Answer {
    status: StatusCode,
    retry_after: Option<u64>,
    body: Value,
    took: Duration,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// Asserts that this is the error `code` with `status`.
    fn expect_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status.as_u16(), self.code()),
            (status, code),
            "{}",
            self.body
        );
    }
}

impl World {
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> Answer {
        let Timed {
            status,
            headers,
            text,
            took,
        } = self.api.timed(method, path, body, key).await;
        assert_ne!(status, 500, "{path}: a 500: {text}");
        Answer {
            status,
            retry_after: headers
                .get("retry-after")
                .map(|v| v.to_str().unwrap().parse().unwrap()),
            body: serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("{path}: not JSON: {text}")),
            took,
        }
    }

    async fn create(&self, key: Option<&str>) -> Answer {
        let body = json!({"provider": "morph", "image": "snapshot_faults"});
        self.send(Method::POST, "/v1/sandboxes", Some(body), key)
            .await
    }

    fn fake(&self) -> &FakeServer {
        self.morph.server()
    }

    /// Create requests the fake received.
    fn creates_sent(&self) -> usize {
        self.fake()
            .log()
            .all()
            .iter()
            .filter(|r| r.method == Method::POST && r.path == CREATE)
            .count()
    }

    /// The instances the fake holds (asked directly, not through the server).
    async fn instances(&self) -> Vec<Value> {
        let v: Value = Client::new()
            .get(format!("{}{CREATE}", self.fake().base_url()))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["data"].as_array().unwrap().clone()
    }

    /// Instances tagged with `op`.
    async fn instances_of(&self, op: &str) -> usize {
        self.instances()
            .await
            .iter()
            .filter(|i| i["metadata"].as_object().unwrap().values().any(|v| v == op))
            .count()
    }

    /// The sandbox `id` as the registry lists it.
    async fn listed(&self, id: &str) -> Value {
        let page = self
            .send(Method::GET, "/v1/sandboxes?limit=100", None, None)
            .await;
        assert_eq!(page.status, 200, "{}", page.body);
        page.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} is not listed: {}", page.body))
    }

    /// The registry's sandbox carrying operation `op`.
    async fn listed_by_op(&self, op: &str) -> Value {
        let page = self
            .send(Method::GET, "/v1/sandboxes?limit=100", None, None)
            .await;
        page.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["operationId"] == op)
            .cloned()
            .unwrap_or_else(|| panic!("no sandbox has operation {op}: {}", page.body))
    }

    /// A sandbox created cleanly and seen running (the fake boots on first observation).
    async fn running_sandbox(&self) -> String {
        let made = self.create(None).await;
        assert_eq!(made.status, 201, "{}", made.body);
        let id = made.body["id"].as_str().unwrap().to_owned();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = self
                .send(Method::GET, &format!("/v1/sandboxes/{id}"), None, None)
                .await;
            if seen.body["status"] == "running" {
                return id;
            }
            assert!(Instant::now() < deadline, "never ran: {}", seen.body);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn arm(w: &World, method: Method, path: &str, fault: Fault) {
    w.fake().faults().arm(fault.on_method(method).on_path(path));
}

/// The server's peak resident memory (`VmHWM`) in KiB, from /proc.
fn vm_hwm_kib(data: &Path) -> u64 {
    let pid = server_pid(data);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The pid of the `corral serve` running over `data` (its command line names the directory).
fn server_pid(data: &Path) -> u32 {
    let needle = data.to_str().unwrap();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.contains(&b"serve".as_slice()) && args.contains(&needle.as_bytes()) {
            return pid;
        }
    }
    panic!("no corral serve over {needle}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_429_is_rate_limited_with_its_retry_after_and_the_server_never_retries_on_its_own()
 {
    let w = world().await;
    // Three creates in a row meet a 429 with Retry-After 7; the same key then succeeds.
    for _ in 0..3 {
        arm(&w, Method::POST, CREATE, Fault::status(429).retry_after(7));
    }
    for i in 1..=3 {
        let a = w.create(Some("rl-1")).await;
        a.expect_error(429, "rate_limited");
        assert_eq!(a.body["error"]["retryable"], true);
        assert!(
            a.retry_after.is_some_and(|s| s >= 7),
            "Retry-After {:?} is shorter than the provider's 7 s",
            a.retry_after
        );
        assert_eq!(
            w.creates_sent(),
            i,
            "one provider request per client request"
        );
    }
    let ok = w.create(Some("rl-1")).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    let id = ok.body["id"].as_str().unwrap().to_owned();

    // A get meeting a 429 is the same, with one provider request.
    let gets = || {
        w.fake()
            .log()
            .matching(&Method::GET, "/api/instance/")
            .len()
    };
    let before = gets();
    arm(
        &w,
        Method::GET,
        "/api/instance/",
        Fault::status(429).retry_after(7),
    );
    let a = w
        .send(Method::GET, &format!("/v1/sandboxes/{id}"), None, None)
        .await;
    a.expect_error(429, "rate_limited");
    assert!(a.retry_after.is_some_and(|s| s >= 7), "{:?}", a.retry_after);
    assert_eq!(gets(), before + 1);

    // No retry storm behind the client's back: three reconciler passes later, still four
    // create requests and exactly one instance.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.creates_sent(), 4);
    assert_eq!(w.instances().await.len(), 1);
    assert_eq!(gets(), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_before_acceptance_is_retryable_or_reconciled_and_a_same_key_retry_creates_exactly_once()
 {
    let w = world().await;
    // 503 (the provider refused before accepting): provider_unavailable, retryable, with its
    // Retry-After; the key is free again and the retry creates.
    arm(&w, Method::POST, CREATE, Fault::status(503).retry_after(3));
    let a = w.create(Some("5xx-503")).await;
    a.expect_error(503, "provider_unavailable");
    assert_eq!(a.body["error"]["retryable"], true);
    assert!(a.retry_after.is_some_and(|s| s >= 3), "{:?}", a.retry_after);
    let ok = w.create(Some("5xx-503")).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    let again = w.create(Some("5xx-503")).await;
    assert_eq!(
        (again.status.as_u16(), &again.body),
        (200, &ok.body),
        "replayed"
    );
    assert_eq!(w.creates_sent(), 2);
    assert_eq!(w.instances().await.len(), 1);

    // 500 and 502 (here the fake did not act, but a 5xx cannot prove that): the outcome is
    // unknown, with the operation id; same-key retries reconcile (nothing found, so after the
    // grace the key is freed) and then create exactly once.
    for (status, key) in [(500, "5xx-500"), (502, "5xx-502")] {
        arm(&w, Method::POST, CREATE, Fault::status(status));
        let sent = w.creates_sent();
        let a = w.create(Some(key)).await;
        assert_eq!(
            (a.status.as_u16(), a.code()),
            (502, "sandbox_create_outcome_unknown"),
            "{status}: {}",
            a.body
        );
        let op = a.body["error"]["operationId"].as_str().unwrap().to_owned();
        let deadline = Instant::now() + Duration::from_secs(20);
        let created = loop {
            let r = w.create(Some(key)).await;
            match (r.status.as_u16(), r.code()) {
                (200 | 201, _) => break r,
                (409, "idempotency_outcome_unknown" | "idempotency_in_progress") => {}
                other => panic!("{status}: unexpected {other:?}: {}", r.body),
            }
            assert!(
                Instant::now() < deadline,
                "{status}: never created: {}",
                r.body
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert_eq!(
            w.creates_sent(),
            sent + 2,
            "{status}: exactly one more create"
        );
        assert_eq!(
            w.instances_of(&op).await,
            0,
            "{status}: the lost one was never made"
        );
        let new_op = created.body["metadata"]["operationId"].as_str().unwrap();
        assert_eq!(w.instances_of(new_op).await, 1, "{status}: one instance");
    }
    assert_eq!(w.instances().await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_answer_lost_after_send_is_outcome_unknown_never_sent_twice_and_adopted() {
    let w = world().await;
    let kinds = [
        (
            "timeout",
            FaultKind::DelayAfterHandler(Duration::from_secs(8)),
        ),
        ("reset", FaultKind::ResetAfterHeaders),
        ("truncated", FaultKind::Truncated),
    ];
    for (name, kind) in kinds {
        arm(&w, Method::POST, CREATE, Fault::new(kind));
        let sent = w.creates_sent();
        let key = format!("lost-{name}");
        let a = w.create(Some(&key)).await;
        assert_eq!(
            (a.status.as_u16(), a.code()),
            (502, "sandbox_create_outcome_unknown"),
            "{name}: {}",
            a.body
        );
        assert_eq!(a.body["error"]["retryable"], false, "{name}");
        assert!(
            a.took < REQUEST_TIMEOUT + Duration::from_secs(5),
            "{name}: answered after {:?}",
            a.took
        );
        let op = a.body["error"]["operationId"].as_str().unwrap().to_owned();
        assert_eq!(w.creates_sent(), sent + 1, "{name}: sent once");
        assert_eq!(
            w.instances_of(&op).await,
            1,
            "{name}: the provider did create it"
        );

        // The reconciler adopts it without any client.
        let deadline = Instant::now() + Duration::from_secs(20);
        let adopted = loop {
            let item = w.listed_by_op(&op).await;
            if item["metadata"]["nativeProviderId"].is_string() {
                break item;
            }
            assert!(Instant::now() < deadline, "{name}: never adopted: {item}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        // The same key then answers that sandbox; the provider never saw a second create.
        let r = w.create(Some(&key)).await;
        assert!(r.status == 200 || r.status == 201, "{name}: {}", r.body);
        assert_eq!(r.body["id"], adopted["id"], "{name}");
        assert_eq!(w.creates_sent(), sent + 1, "{name}: never sent twice");
        assert_eq!(w.instances_of(&op).await, 1, "{name}");
        let id = adopted["id"].as_str().unwrap();
        assert_eq!(w.listed(id).await["metadata"]["operationId"], op.as_str());
    }
    assert_eq!(w.instances().await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_huge_and_malformed_provider_bodies_are_answered_in_bounded_time_and_memory() {
    let w = world().await;
    let id = w.running_sandbox().await;
    let get_path = format!("/v1/sandboxes/{id}");
    let exec_path = format!("/v1/sandboxes/{id}/exec");
    let exec_body = json!({"command": "echo hi"});
    // Warm: a normal exec, so that the peak below is measured on a server that has done one.
    let ok = w
        .send(Method::POST, &exec_path, Some(exec_body.clone()), None)
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let hwm_before = vm_hwm_kib(&w.data);

    // Trickled bodies (one byte every 100 ms: minutes for a whole answer) end at the
    // adapter's request timeout, or the exec deadline for exec.
    arm(
        &w,
        Method::GET,
        "/api/instance/",
        Fault::new(FaultKind::SlowBody(Duration::from_millis(100))),
    );
    let a = w.send(Method::GET, &get_path, None, None).await;
    a.expect_error(504, "request_timeout");
    assert!(
        a.took < REQUEST_TIMEOUT + Duration::from_secs(5),
        "{:?}",
        a.took
    );
    arm(
        &w,
        Method::POST,
        "/exec",
        Fault::new(FaultKind::SlowBody(Duration::from_secs(1))),
    );
    let a = w
        .send(Method::POST, &exec_path, Some(exec_body.clone()), None)
        .await;
    assert_eq!(a.status.as_u16(), 504, "{}", a.body);
    assert!(
        a.took < EXEC_DEADLINE + Duration::from_secs(15),
        "{:?}",
        a.took
    );
    arm(
        &w,
        Method::POST,
        CREATE,
        Fault::new(FaultKind::SlowBody(Duration::from_millis(100))),
    );
    let a = w.create(Some("slow-create")).await;
    assert_eq!(a.code(), "sandbox_create_outcome_unknown", "{}", a.body);
    assert!(
        a.took < REQUEST_TIMEOUT + Duration::from_secs(5),
        "{:?}",
        a.took
    );

    // Bodies of 256 MiB, streamed without a length: cut at the 8 MiB cap, quickly.
    const HUGE: usize = 256 << 20;
    arm(
        &w,
        Method::GET,
        "/api/instance/",
        Fault::new(FaultKind::StreamedOversized(HUGE)),
    );
    let a = w.send(Method::GET, &get_path, None, None).await;
    a.expect_error(502, "provider_error");
    assert!(a.took < Duration::from_secs(10), "{:?}", a.took);
    arm(
        &w,
        Method::POST,
        "/exec",
        Fault::new(FaultKind::StreamedOversized(HUGE)),
    );
    let a = w
        .send(Method::POST, &exec_path, Some(exec_body.clone()), None)
        .await;
    a.expect_error(502, "provider_error");
    arm(
        &w,
        Method::POST,
        CREATE,
        Fault::new(FaultKind::StreamedOversized(HUGE)),
    );
    let a = w.create(Some("huge-create")).await;
    assert_eq!(a.code(), "sandbox_create_outcome_unknown", "{}", a.body);
    // A declared length past the cap is refused before any of the body is read.
    arm(
        &w,
        Method::GET,
        "/api/instance/",
        Fault::new(FaultKind::Oversized(MAX_RESPONSE_BYTES + 1)),
    );
    let a = w.send(Method::GET, &get_path, None, None).await;
    a.expect_error(502, "provider_error");

    // Invalid JSON: a provider error, or an unknown create outcome; never a 500.
    arm(
        &w,
        Method::GET,
        "/api/instance/",
        Fault::new(FaultKind::Malformed),
    );
    let a = w.send(Method::GET, &get_path, None, None).await;
    a.expect_error(502, "provider_error");
    arm(&w, Method::POST, "/exec", Fault::new(FaultKind::Malformed));
    let a = w
        .send(Method::POST, &exec_path, Some(exec_body.clone()), None)
        .await;
    a.expect_error(502, "provider_error");
    arm(&w, Method::POST, CREATE, Fault::new(FaultKind::Malformed));
    let a = w.create(Some("malformed-create")).await;
    assert_eq!(a.code(), "sandbox_create_outcome_unknown", "{}", a.body);

    // Three 256 MiB answers later, the server's peak memory grew by far less than one of them.
    let hwm_after = vm_hwm_kib(&w.data);
    let grew_mib = hwm_after.saturating_sub(hwm_before) / 1024;
    eprintln!("server VmHWM: {hwm_before} kB before, {hwm_after} kB after (+{grew_mib} MiB)");
    assert!(
        grew_mib < 64,
        "peak memory grew by {grew_mib} MiB reading capped bodies"
    );
    // And it still serves.
    let a = w
        .send(Method::POST, &exec_path, Some(exec_body), None)
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = w.send(Method::GET, &get_path, None, None).await;
    assert_eq!(a.status, 200, "{}", a.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_and_deletes_on_sqlite_answer_2xx_or_a_retryable_code_never_500() {
    const WORKERS: usize = 32;
    const ROUNDS: usize = 5;
    let w = std::sync::Arc::new(world().await);
    let tasks = (0..WORKERS).map(|i| {
        let w = w.clone();
        tokio::spawn(async move {
            let (mut seen, mut left) = (Vec::new(), Vec::new());
            for r in 0..ROUNDS {
                let key = format!("sqlite-{i}-{r}");
                let made = w.create((i % 2 == 0).then_some(key.as_str())).await;
                seen.push((made.status.as_u16(), made.code().to_owned()));
                let Some(id) = made.body["id"].as_str().map(str::to_owned) else {
                    continue;
                };
                let got = w
                    .send(Method::GET, &format!("/v1/sandboxes/{id}"), None, None)
                    .await;
                seen.push((got.status.as_u16(), got.code().to_owned()));
                let gone = w
                    .send(Method::DELETE, &format!("/v1/sandboxes/{id}"), None, None)
                    .await;
                seen.push((gone.status.as_u16(), gone.code().to_owned()));
                if gone.status != 200 {
                    left.push(id);
                }
                let page = w
                    .send(Method::GET, "/v1/sandboxes?limit=10", None, None)
                    .await;
                seen.push((page.status.as_u16(), page.code().to_owned()));
            }
            (seen, left)
        })
    });
    let (mut all, mut left) = (Vec::new(), Vec::new());
    for t in futures::future::join_all(tasks).await {
        let (seen, undeleted) = t.unwrap();
        all.extend(seen);
        left.extend(undeleted);
    }
    let ok = all.iter().filter(|(s, _)| (200..300).contains(s)).count();
    let refused: Vec<_> = all
        .iter()
        .filter(|(s, _)| !(200..300).contains(s))
        .collect();
    eprintln!("{} answers: {ok} 2xx, others {refused:?}", all.len());
    for (status, code) in &refused {
        assert!(
            matches!(
                code.as_str(),
                "sandbox_registry_unavailable" | "idempotency_unavailable"
            ) && *status == 503,
            "{status} {code}: only 2xx or a retryable storage code"
        );
    }
    assert!(ok > 0, "nothing succeeded");
    // Every sandbox whose delete succeeded is gone from the provider; a refused create left
    // nothing behind (the fake holds exactly the undeleted ones).
    assert_eq!(w.instances().await.len(), left.len(), "{left:?}");
}
