//! Stop, resume, snapshots, forks and restores.

use corral_client::Error;
use corral_domain::{
    CreateSandboxRequest, CreateSnapshotInput, ForkInput, Provider, ReadFileInput, SandboxId,
    SandboxStatus, SnapshotId, SnapshotStatus,
};
use corral_errors::ErrorCode;
use serde_json::{Value, json};

use crate::fake::{Answer, Fake};

const SBX: &str = "sbx_local_01j9zzzzzzzzzzzzzzzzzzzzzz";
const COPY_1: &str = "sbx_local_01j9yyyyyyyyyyyyyyyyyyyyyy";
const COPY_2: &str = "sbx_local_01j9xxxxxxxxxxxxxxxxxxxxxx";
const SNP: &str = "snp_local_01j9zzzzzzzzzzzzzzzzzzzzzz";

fn sbx() -> SandboxId {
    SBX.parse().unwrap()
}

fn snp() -> SnapshotId {
    SNP.parse().unwrap()
}

/// A sandbox as the API answers it.
fn sandbox(id: &str, status: &str) -> Value {
    json!({
        "id": id,
        "provider": "local",
        "status": status,
        "metadata": {
            "operationId": "op_01j9zzzzzzzzzzzzzzzzzzzzzz",
            "credentialSource": "none"
        }
    })
}

/// A snapshot as the API answers it.
fn snapshot(status: &str) -> Value {
    json!({
        "id": SNP,
        "sandboxId": SBX,
        "provider": "local",
        "name": "before",
        "status": status,
        "sizeBytes": 4096,
        "createdAt": "2026-12-01T15:00:00Z",
        "deletedAt": if status == "deleted" { json!("2026-12-01T16:00:00Z") } else { Value::Null }
    })
}

fn retryable_failures() -> Vec<Answer> {
    vec![
        Answer::error(ErrorCode::ProviderUnavailable).header("retry-after", "0"),
        Answer::error(ErrorCode::RateLimited).header("retry-after", "0"),
        Answer::error(ErrorCode::IdempotencyInProgress).header("retry-after", "0"),
    ]
}

#[tokio::test]
async fn stop_posts_to_the_sandbox_and_reads_it_stopped() {
    let fake = Fake::start(vec![Answer::json(200, sandbox(SBX, "stopped"))]).await;
    let stopped = fake.client().stop_sandbox(&sbx()).await.unwrap();
    assert_eq!(stopped.id, sbx());
    assert_eq!(stopped.status, SandboxStatus::Stopped);
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].target, format!("/v1/sandboxes/{SBX}/stop"));
    assert_eq!(seen[0].header("authorization"), Some("Bearer crl_test"));
    assert_eq!(seen[0].header("idempotency-key"), None);
    assert!(seen[0].body.is_empty());
}

#[tokio::test]
async fn resume_posts_to_the_sandbox_and_is_retried_after_a_retryable_answer() {
    let fake = Fake::start(vec![
        Answer::error(ErrorCode::ProviderUnavailable).header("retry-after", "0"),
        Answer::json(200, sandbox(SBX, "starting")),
    ])
    .await;
    let resumed = fake.client().resume_sandbox(&sbx()).await.unwrap();
    assert_eq!(resumed.status, SandboxStatus::Starting);
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert_eq!(s.method, "POST");
        assert_eq!(s.target, format!("/v1/sandboxes/{SBX}/resume"));
    }
}

#[tokio::test]
async fn create_snapshot_sends_its_name_with_a_key_and_reads_the_snapshot() {
    let fake = Fake::start(vec![Answer::json(201, snapshot("creating"))]).await;
    let made = fake
        .client()
        .create_snapshot(
            &sbx(),
            &CreateSnapshotInput {
                name: Some("before".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(made.id, snp());
    assert_eq!(made.sandbox_id, sbx());
    assert_eq!(made.provider, Provider::Local);
    assert_eq!(made.name.as_deref(), Some("before"));
    assert_eq!(made.status, SnapshotStatus::Creating);
    assert_eq!(made.size_bytes, Some(4096));
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].target, format!("/v1/sandboxes/{SBX}/snapshots"));
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
    assert_eq!(seen[0].json(), json!({"name": "before"}));
    let key = seen[0].header("idempotency-key").unwrap();
    assert!(key.starts_with("corral-client-"), "{key}");
}

#[tokio::test]
async fn a_snapshot_create_retried_keeps_one_idempotency_key_and_the_next_call_takes_a_new_one() {
    let mut script = retryable_failures();
    script.push(Answer::json(201, snapshot("ready")));
    script.push(Answer::json(201, snapshot("ready")));
    let fake = Fake::start(script).await;
    let client = fake.client();
    let made = client
        .create_snapshot(&sbx(), &CreateSnapshotInput::default())
        .await
        .unwrap();
    assert_eq!(made.status, SnapshotStatus::Ready);
    client
        .create_snapshot(&sbx(), &CreateSnapshotInput::default())
        .await
        .unwrap();
    let seen = fake.seen();
    assert_eq!(seen.len(), 5, "three retryable failures, then two answers");
    let keys: Vec<&str> = seen
        .iter()
        .map(|s| s.header("idempotency-key").unwrap())
        .collect();
    assert!(keys[..4].iter().all(|k| *k == keys[0]), "{keys:?}");
    assert_ne!(keys[4], keys[0], "a second call is a second snapshot");
    // An empty input is an empty object (the server takes an empty body or `{}`).
    assert!(seen.iter().all(|s| s.json() == json!({})));
}

#[tokio::test]
async fn create_snapshot_with_key_sends_the_callers_key_and_reads_a_replay() {
    let fake = Fake::start(vec![
        Answer::json(200, snapshot("ready")).header("idempotent-replayed", "true"),
    ])
    .await;
    let made = fake
        .client()
        .create_snapshot_with_key(&sbx(), &CreateSnapshotInput::default(), "my-key-1")
        .await
        .unwrap();
    assert_eq!(made.id, snp());
    assert_eq!(fake.seen()[0].header("idempotency-key"), Some("my-key-1"));
}

#[tokio::test]
async fn a_refused_snapshot_is_not_retried() {
    let fake = Fake::start(vec![Answer::error(ErrorCode::CapabilityUnsupported)]).await;
    let err = fake
        .client()
        .create_snapshot(&sbx(), &CreateSnapshotInput::default())
        .await
        .unwrap_err();
    match &err {
        Error::Api {
            code,
            status,
            retryable,
            request_id,
            ..
        } => {
            assert_eq!(*code, ErrorCode::CapabilityUnsupported);
            assert_eq!(*status, 422);
            assert!(!retryable);
            assert_eq!(request_id.as_deref(), Some("req_fake"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.seen().len(), 1);
}

#[tokio::test]
async fn an_unknown_snapshot_outcome_is_answered_with_its_operation_and_not_retried() {
    let mut envelope = corral_errors::ErrorEnvelope::new(
        ErrorCode::IdempotencyOutcomeUnknown,
        "an earlier attempt's outcome is unknown",
        "req_fake",
    );
    envelope.error.operation_id = Some("op_01j9zzzzzzzzzzzzzzzzzzzzzz".into());
    let fake = Fake::start(vec![Answer::json(
        409,
        serde_json::to_value(envelope).unwrap(),
    )])
    .await;
    let err = fake
        .client()
        .create_snapshot(&sbx(), &CreateSnapshotInput::default())
        .await
        .unwrap_err();
    match err {
        Error::IdempotencyOutcomeUnknown { operation_id, .. } => {
            assert_eq!(
                operation_id.as_deref(),
                Some("op_01j9zzzzzzzzzzzzzzzzzzzzzz")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.seen().len(), 1);
}

#[tokio::test]
async fn fork_sends_its_count_with_a_key_and_reads_the_copies() {
    let fake = Fake::start(vec![Answer::json(
        201,
        json!({
            "sandboxId": SBX,
            "snapshotId": SNP,
            "sandboxes": [sandbox(COPY_1, "running"), sandbox(COPY_2, "creating")]
        }),
    )])
    .await;
    let forked = fake
        .client()
        .fork_sandbox(&sbx(), &ForkInput { count: Some(2) })
        .await
        .unwrap();
    assert_eq!(forked.sandbox_id, sbx());
    assert_eq!(forked.snapshot_id, snp());
    let ids: Vec<String> = forked.sandboxes.iter().map(|s| s.id.to_string()).collect();
    assert_eq!(ids, [COPY_1, COPY_2]);
    assert_eq!(forked.sandboxes[1].status, SandboxStatus::Creating);
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].target, format!("/v1/sandboxes/{SBX}/fork"));
    assert_eq!(seen[0].json(), json!({"count": 2}));
    assert!(seen[0].header("idempotency-key").is_some());
}

#[tokio::test]
async fn a_fork_retried_keeps_one_idempotency_key() {
    let mut script = retryable_failures();
    script.push(Answer::json(
        201,
        json!({"sandboxId": SBX, "snapshotId": SNP, "sandboxes": [sandbox(COPY_1, "running")]}),
    ));
    let fake = Fake::start(script).await;
    let forked = fake
        .client()
        .fork_sandbox(&sbx(), &ForkInput::default())
        .await
        .unwrap();
    assert_eq!(forked.sandboxes.len(), 1);
    let seen = fake.seen();
    assert_eq!(seen.len(), 4);
    let first = seen[0].header("idempotency-key").unwrap();
    assert!(
        seen.iter()
            .all(|s| s.header("idempotency-key") == Some(first))
    );
    assert!(seen.iter().all(|s| s.json() == json!({})));
}

#[tokio::test]
async fn fork_with_key_sends_the_callers_key() {
    let fake = Fake::start(vec![Answer::json(
        201,
        json!({"sandboxId": SBX, "snapshotId": SNP, "sandboxes": []}),
    )])
    .await;
    fake.client()
        .fork_sandbox_with_key(&sbx(), &ForkInput { count: Some(1) }, "fork-key")
        .await
        .unwrap();
    assert_eq!(fake.seen()[0].header("idempotency-key"), Some("fork-key"));
}

#[tokio::test]
async fn list_snapshots_passes_cursor_and_limit_and_reads_the_page() {
    let fake = Fake::start(vec![
        Answer::json(
            200,
            json!({"items": [snapshot("ready"), snapshot("deleted")], "nextCursor": "c2"}),
        ),
        Answer::json(200, json!({"items": [], "nextCursor": null})),
    ])
    .await;
    let client = fake.client();
    let page = client.list_snapshots(Some("c 1"), Some(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.items[1].status, SnapshotStatus::Deleted);
    assert!(page.items[1].deleted_at.is_some());
    assert_eq!(page.next_cursor.as_deref(), Some("c2"));
    let last = client.list_snapshots(None, None).await.unwrap();
    assert!(last.items.is_empty() && last.next_cursor.is_none());
    let seen = fake.seen();
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].target, "/v1/snapshots?cursor=c+1&limit=2");
    assert_eq!(seen[1].target, "/v1/snapshots");
}

#[tokio::test]
async fn get_snapshot_reads_one_and_an_unknown_one_is_snapshot_not_found_once() {
    let fake = Fake::start(vec![
        Answer::json(200, snapshot("ready")),
        Answer::error(ErrorCode::SnapshotNotFound),
    ])
    .await;
    let client = fake.client();
    let got = client.get_snapshot(&snp()).await.unwrap();
    assert_eq!(got.id, snp());
    let err = client.get_snapshot(&snp()).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::SnapshotNotFound));
    assert!(!err.is_retryable());
    let seen = fake.seen();
    assert_eq!(seen.len(), 2, "a 404 is not retried");
    for s in &seen {
        assert_eq!(s.method, "GET");
        assert_eq!(s.target, format!("/v1/snapshots/{SNP}"));
    }
}

#[tokio::test]
async fn delete_snapshot_reads_the_tombstone_and_is_retried_after_a_retryable_answer() {
    let fake = Fake::start(vec![
        Answer::error(ErrorCode::ProviderUnavailable).header("retry-after", "0"),
        Answer::json(200, snapshot("deleted")),
    ])
    .await;
    let gone = fake.client().delete_snapshot(&snp()).await.unwrap();
    assert_eq!(gone.status, SnapshotStatus::Deleted);
    assert!(gone.deleted_at.is_some());
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert_eq!(s.method, "DELETE");
        assert_eq!(s.target, format!("/v1/snapshots/{SNP}"));
    }
}

#[tokio::test]
async fn a_restore_is_a_create_with_the_snapshot_and_the_lifecycle_fields() {
    let mut restored = sandbox(SBX, "running");
    restored["snapshotId"] = json!(SNP);
    restored["autoResume"] = json!(true);
    restored["idleStopSeconds"] = json!(600);
    let fake = Fake::start(vec![Answer::json(201, restored)]).await;
    let request = CreateSandboxRequest::standard(Provider::Local, None, None)
        .restoring(snp())
        .with_lifecycle(true, Some(600));
    let made = fake.client().create_sandbox(&request).await.unwrap();
    assert_eq!(made.snapshot_id, Some(snp()));
    assert!(made.auto_resume);
    assert_eq!(made.idle_stop_seconds, Some(600));
    let seen = fake.seen();
    assert_eq!(seen[0].target, "/v1/sandboxes");
    assert_eq!(
        seen[0].json(),
        json!({"provider": "local", "snapshot": SNP, "autoResume": true, "idleStopSeconds": 600})
    );
    assert!(seen[0].header("idempotency-key").is_some());
}

#[tokio::test]
async fn a_call_on_a_stopped_sandbox_is_sandbox_stopped_and_not_retried() {
    let fake = Fake::start(vec![Answer::error(ErrorCode::SandboxStopped)]).await;
    let err = fake
        .client()
        .read_file(
            &sbx(),
            &ReadFileInput {
                path: "/etc/hostname".into(),
                encoding: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::SandboxStopped));
    assert!(!err.is_retryable());
    assert!(matches!(err, Error::Api { status: 409, .. }));
    assert_eq!(fake.seen().len(), 1);
}
