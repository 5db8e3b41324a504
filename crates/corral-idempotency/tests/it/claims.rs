use std::time::{Duration, Instant};

use corral_idempotency::{ClaimOutcome, Fingerprint, IdempotencyError, IdempotencyKey};
use corral_registry::testing::{TestDb, dump_all_rows, hex};
use serde_json::json;

use crate::{on_both_backends, world, world_with};

on_both_backends!(claims:
    fifty_concurrent_claims_of_one_key_have_exactly_one_winner,
    a_completed_key_replays_byte_for_byte_and_a_different_request_conflicts,
    keys_are_scoped_per_project_and_released_keys_can_be_reused,
    no_credential_reaches_the_idempotency_table,
    an_unavailable_store_is_a_retryable_error_within_the_pool_timeout,
    a_key_completed_here_replays_and_conflicts_without_the_database,
);

fn fingerprint(body: serde_json::Value) -> Fingerprint {
    Fingerprint::compute(
        "POST",
        "/v1/sandboxes",
        Some(&body),
        &[("x-provider", "e2b")],
    )
}

pub(crate) async fn fifty_concurrent_claims_of_one_key_have_exactly_one_winner(db: &TestDb) {
    let w = world(db).await;
    let key = IdempotencyKey::parse("create-1").unwrap();
    let fp = fingerprint(json!({"provider": "e2b"}));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (store, key, p) = (w.store.clone(), key.clone(), w.p);
            tokio::spawn(async move {
                let outcome = store.claim(p, &key, &fp).await.unwrap();
                if let ClaimOutcome::Claimed(claim) = &outcome {
                    // The winner finishes while others are still arriving: they see the
                    // claim in progress or the replay, never a second win.
                    store
                        .complete(claim, 201, b"{\"id\":\"sbx\"}")
                        .await
                        .unwrap();
                }
                outcome
            })
        })
        .collect();
    let mut claimed = 0;
    for task in tasks {
        match task.await.unwrap() {
            ClaimOutcome::Claimed(_) => claimed += 1,
            ClaimOutcome::InProgress { retry_after } => assert!(retry_after > Duration::ZERO),
            ClaimOutcome::Replay(stored) => {
                assert_eq!(
                    (stored.status, &stored.body[..]),
                    (201, &b"{\"id\":\"sbx\"}"[..])
                );
            }
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(claimed, 1, "exactly one claimant wins");
    assert!(matches!(
        w.store.claim(w.p, &key, &fp).await.unwrap(),
        ClaimOutcome::Replay(_)
    ));
}

pub(crate) async fn a_completed_key_replays_byte_for_byte_and_a_different_request_conflicts(
    db: &TestDb,
) {
    let w = world(db).await;
    let key = IdempotencyKey::parse("k").unwrap();
    let fp = fingerprint(json!({"provider": "e2b", "timeoutSeconds": 60}));
    let ClaimOutcome::Claimed(mut claim) = w.store.claim(w.p, &key, &fp).await.unwrap() else {
        panic!("first claim wins");
    };
    // While in progress, a duplicate waits.
    assert!(matches!(
        w.store.claim(w.p, &key, &fp).await.unwrap(),
        ClaimOutcome::InProgress { .. }
    ));
    let op = corral_domain::OperationId::new();
    w.store.attach_operation(&mut claim, op).await.unwrap();
    assert_eq!(claim.operation_id, Some(op));
    // Every byte value, including invalid UTF-8 and NUL, comes back as stored.
    let body: Vec<u8> = (0..=255u8)
        .chain(b"\r\n  {\"a\": 1}  ".iter().copied())
        .collect();
    w.store.complete(&claim, 201, &body).await.unwrap();
    let ClaimOutcome::Replay(stored) = w.store.claim(w.p, &key, &fp).await.unwrap() else {
        panic!("replay expected");
    };
    assert_eq!(stored.status, 201);
    assert_eq!(stored.body, body);
    // Same key, different request: conflict, and the record is untouched.
    let other = fingerprint(json!({"provider": "e2b", "timeoutSeconds": 61}));
    assert_eq!(
        w.store.claim(w.p, &key, &other).await.unwrap(),
        ClaimOutcome::Conflict
    );
    assert!(matches!(
        w.store.claim(w.p, &key, &fp).await.unwrap(),
        ClaimOutcome::Replay(_)
    ));
    // The finished claim cannot be released or completed again.
    assert!(matches!(
        w.store.release(&claim).await,
        Err(IdempotencyError::ClaimLost)
    ));
    assert!(matches!(
        w.store.complete(&claim, 500, b"x").await,
        Err(IdempotencyError::ClaimLost)
    ));
}

pub(crate) async fn keys_are_scoped_per_project_and_released_keys_can_be_reused(db: &TestDb) {
    let w = world(db).await;
    let key = IdempotencyKey::parse("shared").unwrap();
    let fp = fingerprint(json!({}));
    let ClaimOutcome::Claimed(in_p) = w.store.claim(w.p, &key, &fp).await.unwrap() else {
        panic!("p claims");
    };
    let ClaimOutcome::Claimed(in_q) = w.store.claim(w.q, &key, &fp).await.unwrap() else {
        panic!("q claims the same key independently");
    };
    w.store.complete(&in_q, 201, b"q").await.unwrap();
    // A retryable failure in p is not stored: the same key runs again, even with a fixed body.
    w.store.release(&in_p).await.unwrap();
    let fixed = fingerprint(json!({"fixed": true}));
    let ClaimOutcome::Claimed(again) = w.store.claim(w.p, &key, &fixed).await.unwrap() else {
        panic!("a released key is free");
    };
    w.store.complete(&again, 201, b"p").await.unwrap();
    let ClaimOutcome::Replay(p_body) = w.store.claim(w.p, &key, &fixed).await.unwrap() else {
        panic!("replay");
    };
    let ClaimOutcome::Replay(q_body) = w.store.claim(w.q, &key, &fp).await.unwrap() else {
        panic!("replay");
    };
    assert_eq!((p_body.body, q_body.body), (b"p".to_vec(), b"q".to_vec()));
}

pub(crate) async fn no_credential_reaches_the_idempotency_table(db: &TestDb) {
    let w = world(db).await;
    let canary = "CANARY-provider-credential-51c0";
    let key = IdempotencyKey::parse("canary-key").unwrap();
    let fp = Fingerprint::compute(
        "POST",
        "/v1/sandboxes",
        Some(&json!({"provider": "e2b"})),
        &[("x-provider", "e2b"), ("x-provider-credential", canary)],
    );
    let ClaimOutcome::Claimed(claim) = w.store.claim(w.p, &key, &fp).await.unwrap() else {
        panic!("claimed");
    };
    w.store
        .complete(&claim, 201, b"{\"id\":\"sbx_e2b_x\"}")
        .await
        .unwrap();
    let dump = dump_all_rows(w.store_db()).await;
    assert!(
        dump.contains("canary-key"),
        "the dump covers the idempotency table"
    );
    assert!(
        !dump.contains(canary) && !dump.contains(&hex(canary.as_bytes())),
        "{dump}"
    );
}

pub(crate) async fn an_unavailable_store_is_a_retryable_error_within_the_pool_timeout(db: &TestDb) {
    let mut config = db.config();
    config.max_connections = 1;
    config.wait_timeout = Duration::from_millis(300);
    let w = world_with(db, config).await;
    let held = w.registry.database().connection().await.unwrap();
    let started = Instant::now();
    let err = w
        .store
        .claim(
            w.p,
            &IdempotencyKey::parse("k").unwrap(),
            &fingerprint(json!({})),
        )
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(err, IdempotencyError::Unavailable { .. }),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    drop(held);
}

/// A completed record cannot change until it expires, so the process that completed it (or
/// read it) answers its replays from memory: here with the pool's only connection held.
pub(crate) async fn a_key_completed_here_replays_and_conflicts_without_the_database(db: &TestDb) {
    let mut config = db.config();
    config.max_connections = 1;
    config.wait_timeout = Duration::from_millis(300);
    let w = world_with(db, config).await;
    let key = IdempotencyKey::parse("done-here").unwrap();
    let fp = fingerprint(json!({"provider": "e2b"}));
    let ClaimOutcome::Claimed(claim) = w.store.claim(w.p, &key, &fp).await.unwrap() else {
        panic!("a new key is claimed");
    };
    w.store
        .complete(&claim, 201, b"{\"id\":\"sbx_1\"}")
        .await
        .unwrap();

    let held = w.registry.database().connection().await.unwrap();
    let ClaimOutcome::Replay(stored) = w.store.claim(w.p, &key, &fp).await.unwrap() else {
        panic!("replayed from memory");
    };
    assert_eq!(
        (stored.status, stored.body.as_slice()),
        (201, &b"{\"id\":\"sbx_1\"}"[..])
    );
    let other = fingerprint(json!({"provider": "daytona"}));
    assert!(matches!(
        w.store.claim(w.p, &key, &other).await.unwrap(),
        ClaimOutcome::Conflict
    ));
    // The same key in another project is another record: it needs the database.
    let err = w.store.claim(w.q, &key, &fp).await.unwrap_err();
    assert!(
        matches!(err, IdempotencyError::Unavailable { .. }),
        "{err:?}"
    );
    drop(held);
}
