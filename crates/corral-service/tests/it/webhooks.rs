//! Webhooks through the use cases: the destination guard, signed deliveries to a loopback
//! receiver, a retry after a 500, a dead delivery after the last attempt, one delivery across
//! two replicas, and secrets shown once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_domain::{CreateSandboxRequest, DeliveryState, NewWebhook, Provider};
use corral_errors::ErrorCode;
use corral_service::webhooks::{WebhooksConfig, sign};
use corral_service::{InlineAccess, ServiceConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{Setup, World};

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
struct Received {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let statuses = Arc::new(Mutex::new(statuses.into_iter()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (log, statuses) = (log.clone(), statuses.clone());
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
                });
                let status = statuses.lock().unwrap().next().unwrap_or(200);
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, seen)
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
