//! Lifecycle events through the use cases: a sandbox's and a command's life in order, scoped
//! to the project, bounded pages, a follower that sees new events as they happen, retention.

use std::time::Duration;

use corral_domain::{
    Command, CreateSandboxRequest, EventType, LifecycleEvent, Provider, Sandbox, StartCommandInput,
};
use corral_errors::ErrorCode;
use corral_provider::ExposeSecret as _;
use corral_service::{InlineAccess, ServiceConfig};
use futures::StreamExt as _;

use crate::support::{Setup, World};

async fn create(w: &World) -> Sandbox {
    let caller = w.caller().await;
    let c = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            None,
            CreateSandboxRequest::standard(Provider::Local, None, None),
        )
        .await
        .unwrap();
    serde_json::from_str(&c.body).unwrap()
}

/// The next item, within 10 s.
async fn within<T>(next: impl std::future::Future<Output = Option<T>>) -> T {
    tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .expect("no event within 10 s")
        .expect("the stream ended")
}

fn kinds(events: &[LifecycleEvent]) -> Vec<EventType> {
    events
        .iter()
        .map(|e| e.kind)
        .filter(|k| *k != EventType::SandboxStatusChanged)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_and_its_command_are_reported_in_order_to_their_project_only() {
    let w = World::new().await;
    let caller = w.caller().await;
    let sbx = create(&w).await;
    let id = sbx.id.to_string();
    let started = w
        .service
        .start_command(
            &caller,
            InlineAccess::default(),
            &id,
            None,
            serde_json::from_value::<StartCommandInput>(
                serde_json::json!({"command": "echo secret-value; exit 3"}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let cmd: Command = serde_json::from_str(&started.body).unwrap();
    let mut ended = false;
    for _ in 0..30 {
        let c = w
            .service
            .command(
                &caller,
                &id,
                &cmd.id.to_string(),
                Some(Duration::from_secs(1)),
            )
            .await
            .unwrap();
        if c.state.is_final() {
            ended = true;
            break;
        }
    }
    assert!(ended, "the command did not end");
    w.service
        .delete(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();

    let page = w.service.events(&caller, 0, None, None).await.unwrap();
    assert_eq!(
        kinds(&page.items),
        [
            EventType::SandboxCreated,
            EventType::CommandStarted,
            EventType::CommandExited,
            EventType::SandboxDeleted
        ]
    );
    assert!(page.items.iter().all(|e| e.sandbox_id == Some(sbx.id)));
    assert!(page.items.windows(2).all(|p| p[0].id < p[1].id));
    assert_eq!(page.next_after, page.items.last().unwrap().id);
    let exited = page
        .items
        .iter()
        .find(|e| e.kind == EventType::CommandExited)
        .unwrap();
    assert_eq!(
        (exited.command_id, exited.exit_code),
        (Some(cmd.id), Some(3))
    );
    assert!(
        !serde_json::to_string(&page)
            .unwrap()
            .contains("secret-value"),
        "command output or its line reached an event"
    );
    // Read on from the end: nothing, and the cursor stays.
    let rest = w
        .service
        .events(&caller, page.next_after, Some(10), Some(&id))
        .await
        .unwrap();
    assert!(rest.items.is_empty());
    assert_eq!(rest.next_after, page.next_after);

    // Another project sees none of it, and cannot name this project's sandbox.
    let other = w.registry.create_project("other").await.unwrap();
    let key = w.registry.issue_api_key(other.id).await.unwrap();
    let stranger = w
        .service
        .authenticate(Some(&format!("Bearer {}", key.key.expose_secret())))
        .await
        .unwrap();
    assert!(
        w.service
            .events(&stranger, 0, None, None)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let hidden = w
        .service
        .events(&stranger, 0, None, Some(&id))
        .await
        .unwrap_err();
    assert_eq!(hidden.code(), ErrorCode::SandboxNotFound);
    let malformed = w
        .service
        .events(&caller, 0, None, Some("sbx_nope"))
        .await
        .unwrap_err();
    assert_eq!(malformed.code(), ErrorCode::InvalidSandboxId);
    for limit in [0, 501] {
        let e = w
            .service
            .events(&caller, 0, Some(limit), None)
            .await
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidRequest, "limit {limit}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_sees_what_happens_after_it_started_and_resumes_where_it_stopped() {
    let w = World::new().await;
    let caller = w.caller().await;
    let first = create(&w).await;
    let stream = w.service.follow_events(&caller, 0, None).await.unwrap();
    let mut stream = Box::pin(stream);
    let seen: LifecycleEvent = within(stream.next()).await.unwrap();
    assert_eq!(
        (seen.kind, seen.sandbox_id),
        (EventType::SandboxCreated, Some(first.id))
    );
    let second = create(&w).await;
    let later: LifecycleEvent = within(stream.next()).await.unwrap();
    assert_eq!(later.sandbox_id, Some(second.id));
    assert!(later.id > seen.id);
    drop(stream);
    // A new follower from the first event's id starts exactly after it.
    let resumed = w
        .service
        .follow_events(&caller, seen.id, None)
        .await
        .unwrap();
    let got: Vec<LifecycleEvent> = tokio::time::timeout(
        Duration::from_secs(10),
        resumed.take(1).map(Result::unwrap).collect(),
    )
    .await
    .unwrap();
    assert_eq!(got[0].id, later.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_older_than_the_retention_are_removed() {
    let w = World::with(Setup {
        manual_clock: true,
        config: ServiceConfig {
            events_retention: Duration::from_secs(3600),
            ..ServiceConfig::default()
        },
        ..Setup::default()
    })
    .await;
    let caller = w.caller().await;
    create(&w).await;
    assert_eq!(w.service.prune_events_once().await, 0);
    w.clock.advance(Duration::from_secs(3601));
    let kept = create(&w).await;
    assert_eq!(w.service.prune_events_once().await, 1);
    let left = w
        .service
        .events(&caller, 0, None, None)
        .await
        .unwrap()
        .items;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].sandbox_id, Some(kept.id));
}
