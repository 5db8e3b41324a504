use std::time::Duration;

use corral_domain::OperationId;
use corral_idempotency::{ClaimOutcome, Fingerprint, IdempotencyError, IdempotencyKey};
use corral_registry::testing::TestDb;
use serde_json::json;

use crate::{on_both_backends, world};

on_both_backends!(lifecycle:
    a_claim_whose_owner_died_is_handed_to_reconciliation_after_its_lease,
    an_unknown_outcome_is_reported_until_a_reconciler_settles_it,
    completed_keys_are_kept_24_hours_then_reaped,
    keys_that_stay_unresolved_rotate_to_the_back_of_the_reconcilers_queue,
);

fn fp() -> Fingerprint {
    Fingerprint::compute(
        "POST",
        "/v1/sandboxes",
        Some(&json!({"provider": "local"})),
        &[],
    )
}

pub(crate) async fn a_claim_whose_owner_died_is_handed_to_reconciliation_after_its_lease(
    db: &TestDb,
) {
    let w = world(db).await;
    let lease = w.store.config().lease;
    let key = IdempotencyKey::parse("crash").unwrap();
    let ClaimOutcome::Claimed(mut dead) = w.store.claim(w.p, &key, &fp()).await.unwrap() else {
        panic!("claimed");
    };
    let op = OperationId::new();
    w.store.attach_operation(&mut dead, op).await.unwrap();
    // The owner "dies" here: it never completes, releases or renews.

    w.clock.advance(lease - Duration::from_secs(1));
    assert!(matches!(
        w.store.claim(w.p, &key, &fp()).await.unwrap(),
        ClaimOutcome::InProgress { .. }
    ));
    assert!(w.store.needing_reconciliation(10).await.unwrap().is_empty());

    w.clock.advance(Duration::from_secs(2));
    let candidates = w.store.needing_reconciliation(10).await.unwrap();
    assert_eq!(candidates.len(), 1);
    assert_eq!(
        (candidates[0].operation_id, candidates[0].unknown),
        (Some(op), false)
    );

    // A retry after the lease: the caller reconciles operation `op`; it does not create again.
    let ClaimOutcome::NeedsReconciliation(reconciler) =
        w.store.claim(w.p, &key, &fp()).await.unwrap()
    else {
        panic!("stale claim must go to reconciliation");
    };
    assert_eq!(reconciler.operation_id, Some(op));
    assert_ne!(reconciler.owner, dead.owner);
    // Only one taker: the next retry waits behind the reconciler.
    assert!(matches!(
        w.store.claim(w.p, &key, &fp()).await.unwrap(),
        ClaimOutcome::InProgress { .. }
    ));
    // The old owner, should it wake up, can no longer record anything.
    assert!(matches!(
        w.store.complete(&dead, 201, b"late").await,
        Err(IdempotencyError::ClaimLost)
    ));
    assert!(matches!(
        w.store.release(&dead).await,
        Err(IdempotencyError::ClaimLost)
    ));
    w.store
        .complete(&reconciler, 201, b"adopted")
        .await
        .unwrap();
    let ClaimOutcome::Replay(stored) = w.store.claim(w.p, &key, &fp()).await.unwrap() else {
        panic!("replay");
    };
    assert_eq!(stored.body, b"adopted");
}

pub(crate) async fn an_unknown_outcome_is_reported_until_a_reconciler_settles_it(db: &TestDb) {
    let w = world(db).await;
    let key = IdempotencyKey::parse("lost-answer").unwrap();
    let ClaimOutcome::Claimed(claim) = w.store.claim(w.p, &key, &fp()).await.unwrap() else {
        panic!("claimed");
    };
    let op = OperationId::new();
    w.store.mark_unknown(&claim, op).await.unwrap();
    assert_eq!(
        w.store.claim(w.p, &key, &fp()).await.unwrap(),
        ClaimOutcome::Unknown {
            operation_id: Some(op)
        }
    );
    let candidates = w.store.needing_reconciliation(10).await.unwrap();
    assert_eq!(candidates.len(), 1);
    assert!(candidates[0].unknown);
    assert_eq!(candidates[0].key, key);

    let taken = w
        .store
        .take_over_for_reconciliation(w.p, &key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.operation_id, Some(op));
    assert!(
        w.store
            .take_over_for_reconciliation(w.p, &key)
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        w.store.claim(w.p, &key, &fp()).await.unwrap(),
        ClaimOutcome::InProgress { .. }
    ));
    // Reconciliation found nothing yet: back to unknown.
    w.store.mark_unknown(&taken, op).await.unwrap();
    let again = w
        .store
        .take_over_for_reconciliation(w.p, &key)
        .await
        .unwrap()
        .unwrap();
    w.store.complete(&again, 201, b"found").await.unwrap();
    assert!(matches!(
        w.store.claim(w.p, &key, &fp()).await.unwrap(),
        ClaimOutcome::Replay(_)
    ));
    assert!(w.store.needing_reconciliation(10).await.unwrap().is_empty());
    // Unknown records survive the reaper.
    let key2 = IdempotencyKey::parse("lost-2").unwrap();
    let ClaimOutcome::Claimed(c2) = w.store.claim(w.p, &key2, &fp()).await.unwrap() else {
        panic!("claimed");
    };
    w.store.mark_unknown(&c2, OperationId::new()).await.unwrap();
    let far = w.registry.database().now() + chrono::TimeDelta::days(30);
    w.store.reap(far).await.unwrap();
    assert!(matches!(
        w.store.claim(w.p, &key2, &fp()).await.unwrap(),
        ClaimOutcome::Unknown { .. }
    ));
}

pub(crate) async fn completed_keys_are_kept_24_hours_then_reaped(db: &TestDb) {
    let w = world(db).await;
    assert!(w.store.config().retention >= Duration::from_secs(24 * 3600));
    let day = w.store.config().retention;
    let a = IdempotencyKey::parse("a").unwrap();
    let b = IdempotencyKey::parse("b").unwrap();
    for key in [&a, &b] {
        let ClaimOutcome::Claimed(c) = w.store.claim(w.p, key, &fp()).await.unwrap() else {
            panic!("claimed");
        };
        w.store.complete(&c, 201, b"first").await.unwrap();
    }
    w.clock.advance(day - Duration::from_secs(1));
    assert_eq!(w.store.reap(w.registry.database().now()).await.unwrap(), 0);
    assert!(matches!(
        w.store.claim(w.p, &a, &fp()).await.unwrap(),
        ClaimOutcome::Replay(_)
    ));

    w.clock.advance(Duration::from_secs(1));
    // Expired but not yet reaped: the key is new again (even for another request).
    let other = Fingerprint::compute("POST", "/v1/sandboxes", Some(&json!({"x": 1})), &[]);
    let ClaimOutcome::Claimed(fresh) = w.store.claim(w.p, &a, &other).await.unwrap() else {
        panic!("an expired key is new");
    };
    w.store.complete(&fresh, 201, b"second").await.unwrap();
    // The reaper removes `b` (expired) and keeps the renewed `a`.
    assert_eq!(w.store.reap(w.registry.database().now()).await.unwrap(), 1);
    assert!(matches!(
        w.store.claim(w.p, &b, &fp()).await.unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    let ClaimOutcome::Replay(stored) = w.store.claim(w.p, &a, &other).await.unwrap() else {
        panic!("replay");
    };
    assert_eq!(stored.body, b"second");
}

/// A key the reconciler cannot settle (e.g. its create used an inline credential the server
/// never kept) must not hold the head of a bounded batch forever.
pub(crate) async fn keys_that_stay_unresolved_rotate_to_the_back_of_the_reconcilers_queue(
    db: &TestDb,
) {
    let w = world(db).await;
    let mut keys = Vec::new();
    for name in ["first", "second"] {
        let key = IdempotencyKey::parse(name).unwrap();
        let ClaimOutcome::Claimed(mut claim) = w.store.claim(w.p, &key, &fp()).await.unwrap()
        else {
            panic!("a new key is claimed");
        };
        let op = OperationId::new();
        w.store.attach_operation(&mut claim, op).await.unwrap();
        w.store.mark_unknown(&claim, op).await.unwrap();
        keys.push((key, op));
        w.clock.advance(Duration::from_secs(1));
    }
    let head = w.store.needing_reconciliation(1).await.unwrap();
    assert_eq!(head[0].key, keys[0].0);
    // The reconciler tries the first, cannot settle it, and puts it back.
    let taken = w
        .store
        .take_over_for_reconciliation(w.p, &keys[0].0)
        .await
        .unwrap()
        .unwrap();
    w.clock.advance(Duration::from_secs(1));
    w.store.mark_unknown(&taken, keys[0].1).await.unwrap();
    let head = w.store.needing_reconciliation(1).await.unwrap();
    assert_eq!(head[0].key, keys[1].0, "the other key gets its turn");
}
