//! Webhooks through the use cases: the destination guard, signed deliveries to a loopback
//! receiver, a retry after a 500, a dead delivery after the last attempt, one delivery across
//! two replicas, secrets shown once, and one project's slow failing endpoints not holding up
//! another project's deliveries (on SQLite and PostgreSQL).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::collections::BTreeMap;

use corral_domain::{CreateSandboxRequest, DeliveryState, NewWebhook, Provider};
use corral_errors::ErrorCode;
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::{ExposeSecret as _, SandboxProvider};
use corral_registry::testing::TestDb;
use corral_registry::{MasterKey, Registry};
use corral_service::webhooks::{WebhooksConfig, sign};
use corral_service::{Caller, InlineAccess, Service, ServiceConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{Counting, Setup, World};

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
struct Received {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// When it had been read whole.
    at: std::time::Instant,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// A loopback HTTP receiver answering each request with the next status of `statuses`
/// (then 200), recording what it got.
async fn receiver(statuses: Vec<u16>) -> (String, Arc<Mutex<Vec<Received>>>) {
    let (url, seen, _) = slow_receiver(statuses, Duration::ZERO).await;
    (url, seen)
}

/// [`receiver`], answering each request only `delay` after reading it; also the most
/// requests it held at once.
async fn slow_receiver(
    statuses: Vec<u16>,
    delay: Duration,
) -> (String, Arc<Mutex<Vec<Received>>>, Arc<AtomicUsize>) {
    let (held, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let most = peak.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let statuses = Arc::new(Mutex::new(statuses.into_iter()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (log, statuses) = (log.clone(), statuses.clone());
            let (held, peak) = (held.clone(), peak.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head_end, length) = loop {
                    let n = conn.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break (end + 4, length);
                    }
                };
                while buf.len() < head_end + length {
                    let n = conn.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                let headers = head
                    .lines()
                    .skip(1)
                    .filter_map(|l| l.split_once(':'))
                    .map(|(n, v)| (n.trim().to_lowercase(), v.trim().to_owned()))
                    .collect();
                log.lock().unwrap().push(Received {
                    headers,
                    body: buf[head_end..].to_vec(),
                    at: std::time::Instant::now(),
                });
                let status = statuses.lock().unwrap().next().unwrap_or(200);
                peak.fetch_max(held.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                held.fetch_sub(1, Ordering::SeqCst);
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, seen, most)
}

fn config(attempts: u32) -> ServiceConfig {
    ServiceConfig {
        webhooks: WebhooksConfig {
            allow: vec!["127.0.0.1".into()],
            attempts,
            first_backoff: Duration::from_secs(5),
            ..WebhooksConfig::default()
        },
        ..ServiceConfig::default()
    }
}

async fn world(attempts: u32) -> World {
    World::with(Setup {
        manual_clock: true,
        config: config(attempts),
        ..Setup::default()
    })
    .await
}

async fn create_sandbox(w: &World) {
    let caller = w.caller().await;
    w.service
        .create(
            &caller,
            InlineAccess::default(),
            None,
            CreateSandboxRequest::standard(Provider::Local, None, None),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_or_private_destination_is_refused_unless_allowed() {
    let w = World::new().await;
    let caller = w.caller().await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest",
        "http://10.1.2.3/",
        "ftp://example.com/",
        "not a url",
    ] {
        let e = w
            .service
            .create_webhook(
                &caller,
                NewWebhook {
                    url: url.into(),
                    types: None,
                },
            )
            .await
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidRequest, "{url}");
        assert!(e.to_string().contains("webhook url"), "{e}");
    }
    assert!(
        w.service
            .list_webhooks(&caller)
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_signed_retried_after_a_500_and_recorded() {
    let w = world(8).await;
    let caller = w.caller().await;
    let (url, seen) = receiver(vec![500]).await;
    let hook = w
        .service
        .create_webhook(&caller, NewWebhook { url, types: None })
        .await
        .unwrap();
    assert!(hook.secret.starts_with("whsec_"));
    // The list never shows the secret.
    let listed = serde_json::to_string(&w.service.list_webhooks(&caller).await.unwrap()).unwrap();
    assert!(!listed.contains(&hook.secret) && listed.contains(&hook.id));

    create_sandbox(&w).await;
    assert_eq!(w.service.deliver_webhooks_once().await, 1);
    // The 500 leaves it pending, due after the backoff; nothing is due before.
    let list = w
        .service
        .webhook_deliveries(&caller, &hook.id, None)
        .await
        .unwrap();
    let d = &list.items[0];
    assert_eq!(
        (d.state, d.attempts, d.last_status),
        (DeliveryState::Pending, 1, Some(500))
    );
    assert_eq!(w.service.deliver_webhooks_once().await, 0);
    w.clock.advance(Duration::from_secs(7));
    assert_eq!(w.service.deliver_webhooks_once().await, 1);
    let list = w
        .service
        .webhook_deliveries(&caller, &hook.id, None)
        .await
        .unwrap();
    let d = &list.items[0];
    assert_eq!(
        (d.state, d.attempts, d.last_status),
        (DeliveryState::Delivered, 2, Some(200))
    );

    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 2);
    // Both attempts carry the same id (receivers deduplicate by it) and a valid signature.
    assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
    assert_eq!(got[0].header("webhook-id"), d.id);
    for r in &got {
        let ts: i64 = r.header("webhook-timestamp").parse().unwrap();
        let expected = sign(
            r.header("webhook-id"),
            ts,
            &r.body,
            &[secrecy::SecretString::from(hook.secret.clone())],
        );
        assert_eq!(r.header("webhook-signature"), expected);
        assert_eq!(r.header("content-type"), "application/json");
    }
    let body: serde_json::Value = serde_json::from_slice(&got[1].body).unwrap();
    assert_eq!(body["type"], "sandbox.created");
    assert_eq!(body["data"]["type"], "sandbox.created");
    assert_eq!(body["data"]["id"].as_u64(), Some(d.event_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_keeps_failing_goes_dead_after_its_last_attempt() {
    let w = world(2).await;
    let caller = w.caller().await;
    let (url, seen) = receiver(vec![503, 503, 503]).await;
    let hook = w
        .service
        .create_webhook(&caller, NewWebhook { url, types: None })
        .await
        .unwrap();
    create_sandbox(&w).await;
    assert_eq!(w.service.deliver_webhooks_once().await, 1);
    w.clock.advance(Duration::from_secs(3600));
    assert_eq!(w.service.deliver_webhooks_once().await, 1);
    w.clock.advance(Duration::from_secs(3600));
    assert_eq!(
        w.service.deliver_webhooks_once().await,
        0,
        "dead: never tried again"
    );
    let d = &w
        .service
        .webhook_deliveries(&caller, &hook.id, None)
        .await
        .unwrap()
        .items[0];
    assert_eq!((d.state, d.attempts), (DeliveryState::Dead, 2));
    assert_eq!(
        d.last_error.as_deref(),
        Some("the endpoint answered HTTP 503")
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_deliver_each_event_once_and_rotation_signs_with_both_secrets() {
    let w = world(8).await;
    let caller = w.caller().await;
    let (url, seen) = receiver(vec![]).await;
    let hook = w
        .service
        .create_webhook(&caller, NewWebhook { url, types: None })
        .await
        .unwrap();
    let other = w.second_replica(config(8)).await;
    for _ in 0..10 {
        create_sandbox(&w).await;
    }
    let (a, b) = tokio::join!(
        w.service.deliver_webhooks_once(),
        other.deliver_webhooks_once()
    );
    assert_eq!(a + b, 10, "{a} + {b}");
    let got = seen.lock().unwrap().clone();
    let mut ids: Vec<&str> = got.iter().map(|r| r.header("webhook-id")).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((got.len(), ids.len()), (10, 10));

    // After a rotation, a delivery verifies with the new secret and with the old one.
    let rotated = w.service.rotate_webhook(&caller, &hook.id).await.unwrap();
    assert_ne!(rotated.secret, hook.secret);
    create_sandbox(&w).await;
    assert_eq!(w.service.deliver_webhooks_once().await, 1);
    let last = seen.lock().unwrap().last().unwrap().clone();
    let ts: i64 = last.header("webhook-timestamp").parse().unwrap();
    let signatures: Vec<&str> = last.header("webhook-signature").split(' ').collect();
    assert_eq!(signatures.len(), 2);
    for (secret, got) in [
        (&rotated.secret, signatures[0]),
        (&hook.secret, signatures[1]),
    ] {
        let one = sign(
            last.header("webhook-id"),
            ts,
            &last.body,
            &[secrecy::SecretString::from(secret.clone())],
        );
        assert_eq!(got, one);
    }
    // A removed endpoint gets nothing more.
    w.service.delete_webhook(&caller, &hook.id).await.unwrap();
    create_sandbox(&w).await;
    assert_eq!(w.service.deliver_webhooks_once().await, 0);
    let e = w
        .service
        .delete_webhook(&caller, &hook.id)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::SandboxNotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_failing_project_does_not_hold_up_another_projects_delivery_sqlite() {
    a_slow_failing_project_does_not_hold_up_another_projects_delivery(&TestDb::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_failing_project_does_not_hold_up_another_projects_delivery_postgres() {
    let Some(db) = TestDb::postgres("service::webhooks::fair").await else {
        return;
    };
    a_slow_failing_project_does_not_hold_up_another_projects_delivery(&db).await;
}

/// A project's key, made into a caller.
async fn project_caller(service: &Service, registry: &Registry, name: &str) -> Caller {
    let project = registry.create_project(name).await.unwrap();
    let issued = registry.issue_api_key(project.id).await.unwrap();
    service
        .authenticate(Some(&format!("Bearer {}", issued.key.expose_secret())))
        .await
        .unwrap()
}

/// Project A has 16 endpoints whose receiver answers 500 only after 2.5 s (the attempt
/// deadline is 5 s), and a backlog of deliveries to them; project B has one healthy endpoint.
/// While A's deliveries keep failing, B's event is delivered within a second (it was held up
/// for as long as A's batches took, 2.5 s each, when a pass waited for its whole batch).
async fn a_slow_failing_project_does_not_hold_up_another_projects_delivery(db: &TestDb) {
    let database = db.connect().await;
    let registry = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let store = IdempotencyStore::new(database, IdempotencyConfig::default());
    let double = Arc::new(Counting::new(Provider::Local, false));
    let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
    providers.insert(Provider::Local, double);
    let service = Service::new(
        providers,
        registry.clone(),
        store,
        ServiceConfig {
            webhooks: WebhooksConfig {
                allow: vec!["127.0.0.1".into()],
                first_backoff: Duration::from_secs(1),
                timeout: Duration::from_secs(5),
                ..WebhooksConfig::default()
            },
            ..ServiceConfig::default()
        },
    );
    let a = project_caller(&service, &registry, "a").await;
    let b = project_caller(&service, &registry, "b").await;
    let (slow, slow_seen, slow_peak) =
        slow_receiver(vec![500; 10_000], Duration::from_millis(2500)).await;
    for _ in 0..16 {
        service
            .create_webhook(
                &a,
                NewWebhook {
                    url: slow.clone(),
                    types: None,
                },
            )
            .await
            .unwrap();
    }
    let (healthy, healthy_seen) = receiver(vec![]).await;
    let hook_b = service
        .create_webhook(
            &b,
            NewWebhook {
                url: healthy,
                types: None,
            },
        )
        .await
        .unwrap();
    let create = |caller: Caller| {
        let service = service.clone();
        async move {
            service
                .create(
                    &caller,
                    InlineAccess::default(),
                    None,
                    CreateSandboxRequest::standard(Provider::Local, None, None),
                )
                .await
                .unwrap();
        }
    };
    // A backlog for A: three events, 48 deliveries, all due before B's.
    for _ in 0..3 {
        create(a).await;
    }
    let dispatcher = service.spawn_webhook_dispatcher(Duration::from_millis(100));
    // A's receiver is busy (its answers take 2.5 s) before B's event exists.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while slow_seen.lock().unwrap().len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "A's receiver got nothing"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let made = std::time::Instant::now();
    create(b).await;
    let delivered = loop {
        if let Some(r) = healthy_seen.lock().unwrap().first() {
            break r.at;
        }
        assert!(
            made.elapsed() < Duration::from_secs(30),
            "B's delivery never arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let latency = delivered - made;
    eprintln!("B's delivery arrived {latency:?} after its event");
    assert!(
        latency < Duration::from_secs(1),
        "B's delivery took {latency:?} while A's endpoints were failing"
    );
    // A's endpoints were answering 500 all along: once its first attempts are recorded, none
    // was delivered, and A never held more than its share (8) of the 32 slots.
    let a_hooks = service.list_webhooks(&a).await.unwrap().items;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut failed = 0;
        for hook in &a_hooks {
            let list = service
                .webhook_deliveries(&a, &hook.id, None)
                .await
                .unwrap();
            for d in &list.items {
                assert_ne!(d.state, DeliveryState::Delivered, "{d:?}");
                failed += usize::from(d.last_status == Some(500));
            }
        }
        if failed >= 16 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "A's attempts: {failed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    dispatcher.abort();
    let peak = slow_peak.load(Ordering::SeqCst);
    assert!((1..=8).contains(&peak), "A held {peak} requests at once");
    let d = &service
        .webhook_deliveries(&b, &hook_b.id, None)
        .await
        .unwrap()
        .items[0];
    assert_eq!(d.state, DeliveryState::Delivered);
}
