//! Races between a slow create, its same-key retries and the background reconciler.

use std::time::Duration;

use corral_domain::{OperationId, Provider};
use corral_errors::ErrorCode;
use corral_provider::ProviderError;
use corral_registry::CreateState;
use corral_service::error::ServiceError;
use corral_service::{Created, ServiceConfig};

use crate::create::{code, create, made_by_provider, unknown_op};
use crate::support::{Setup, World};

/// Waits (real time) until the record of `op` reaches `state`.
async fn until_state(w: &World, op: OperationId, state: CreateState) {
    for _ in 0..500 {
        if let Ok(Some(rec)) = w.registry.sandbox_by_operation(op).await
            && rec.create_state == state
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the record of {op} never reached {state:?}");
}

/// Retries `key` until it replays; returns the replay.
async fn until_replayed(w: &World, key: &str) -> Created {
    for _ in 0..500 {
        if let Ok(c) = create(w, key).await
            && c.replayed
        {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("`{key}` never replayed");
}

#[tokio::test]
async fn a_create_slower_than_its_lease_keeps_the_key_so_retries_never_create_twice() {
    let w = World::with(Setup {
        gated: true,
        lease: Duration::from_millis(300),
        config: ServiceConfig {
            create_wait: Duration::from_millis(50),
            reconcile_grace: Duration::ZERO,
            ..ServiceConfig::default()
        },
        ..Setup::default()
    })
    .await;
    let op = unknown_op(create(&w, "k").await);
    // The provider is still working, well past the lease.
    tokio::time::sleep(Duration::from_millis(800)).await;
    for _ in 0..2 {
        assert_eq!(
            code(create(&w, "k").await),
            ErrorCode::IdempotencyInProgress
        );
    }
    w.double.release_creates(2);
    let replay = until_replayed(&w, "k").await;
    assert!(replay.body.contains(&op.to_string()));
    assert_eq!(w.double.count("create_arrived"), 1, "one provider create");
    assert_eq!(w.double.count("find_by_operation_id"), 0);
}

#[tokio::test]
async fn the_reconciler_leaves_a_create_still_in_flight_alone() {
    let w = World::with(Setup {
        gated: true,
        config: ServiceConfig {
            create_wait: Duration::from_millis(50),
            reconcile_grace: Duration::ZERO,
            ..ServiceConfig::default()
        },
        ..Setup::default()
    })
    .await;
    let op = unknown_op(create(&w, "k").await);
    let report = w.service.reconcile_once().await;
    assert_eq!((report.failed, report.adopted), (0, 0), "{report:?}");
    let rec = w.registry.sandbox_by_operation(op).await.unwrap().unwrap();
    assert_eq!(rec.create_state, CreateState::Pending);
    assert_eq!(rec.status.as_str(), "creating");
    w.double.release_creates(1);
    until_state(&w, op, CreateState::Created).await;
    let replayed = until_replayed(&w, "k").await.body;
    assert!(replayed.contains(r#""status":"creating""#), "{replayed}");
    assert!(replayed.contains("nativeProviderId"), "{replayed}");
    let rec = w.registry.sandbox_by_operation(op).await.unwrap().unwrap();
    assert_eq!(
        rec.status.as_str(),
        "running",
        "the observed status is recorded"
    );
    assert_eq!(w.double.count("create"), 1);
}

#[tokio::test]
async fn the_grace_period_runs_from_when_the_outcome_became_unknown() {
    let w = World::with(Setup {
        gated: true,
        manual_clock: true,
        config: ServiceConfig {
            create_wait: Duration::from_millis(50),
            reconcile_grace: Duration::from_secs(300),
            ..ServiceConfig::default()
        },
        ..Setup::default()
    })
    .await;
    let op = unknown_op(create(&w, "k").await);
    // The provider call outlives the grace period, then its answer is lost; the provider's
    // listing lags behind the create.
    w.clock.advance(Duration::from_secs(400));
    let p = Provider::Local;
    w.double
        .fail_next("create", move || ProviderError::TimedOutAfterSend {
            provider: p,
        });
    *w.double.listing_lags.lock().unwrap() = true;
    w.double.release_creates(1);
    until_state(&w, op, CreateState::Unknown).await;
    // Just lost: nothing found is no proof of absence yet.
    match create(&w, "k").await {
        Err(ServiceError::IdempotencyOutcomeUnknown { operation_id }) => {
            assert_eq!(operation_id, Some(op));
        }
        other => panic!("expected idempotency_outcome_unknown, got {other:?}"),
    }
    assert_eq!(w.service.reconcile_once().await.failed, 0);
    // A full grace period after the loss, absence is accepted and the key is freed.
    w.clock.advance(Duration::from_secs(301));
    assert_eq!(
        code(create(&w, "k").await),
        ErrorCode::IdempotencyInProgress
    );
    w.double.release_creates(1);
    assert_eq!(create(&w, "k").await.unwrap().status, 201);
    assert_eq!(w.double.count("create_arrived"), 2);
}

#[tokio::test]
async fn deleting_an_unconfirmed_create_settles_it_so_nothing_looks_for_it_again() {
    let w = World::with(Setup {
        config: ServiceConfig {
            reconcile_grace: Duration::ZERO,
            ..ServiceConfig::default()
        },
        ..Setup::default()
    })
    .await;
    let p = Provider::Local;
    w.double
        .fail_next("create", move || ProviderError::TimedOutAfterSend {
            provider: p,
        });
    let op = unknown_op(create(&w, "k").await);
    let rec = w.registry.sandbox_by_operation(op).await.unwrap().unwrap();
    let caller = w.caller().await;
    let tomb = w
        .service
        .delete(
            &caller,
            corral_service::InlineAccess::default(),
            &rec.id.to_string(),
        )
        .await
        .unwrap();
    assert_eq!(tomb.status.as_str(), "deleted");
    let finds = w.double.count("find_by_operation_id");
    w.service.reconcile_once().await;
    let second = w.service.reconcile_once().await;
    assert_eq!(second, corral_service::ReconcileReport::default());
    assert_eq!(
        w.double.count("find_by_operation_id"),
        finds,
        "no more lookups"
    );
    // A late same-key retry answers the tombstone and creates nothing.
    let late = create(&w, "k").await.unwrap();
    assert!(late.body.contains("deleted"), "{}", late.body);
    assert_eq!(w.double.count("create"), 1);
}

#[tokio::test]
async fn a_sandbox_deleted_while_its_create_runs_is_removed_when_the_create_lands() {
    let w = World::with(Setup {
        gated: true,
        config: ServiceConfig {
            create_wait: Duration::from_millis(50),
            ..ServiceConfig::default()
        },
        ..Setup::default()
    })
    .await;
    let op = unknown_op(create(&w, "k").await);
    let rec = w.registry.sandbox_by_operation(op).await.unwrap().unwrap();
    let caller = w.caller().await;
    w.service
        .delete(
            &caller,
            corral_service::InlineAccess::default(),
            &rec.id.to_string(),
        )
        .await
        .unwrap();
    w.double.release_creates(1);
    let replay = until_replayed(&w, "k").await;
    assert!(replay.body.contains("deleted"), "{}", replay.body);
    let left = corral_provider::SandboxProvider::find_by_operation_id(
        &*w.double,
        &corral_provider::CallContext::anonymous(),
        &op,
    )
    .await
    .unwrap();
    assert!(left.is_empty(), "the provider still holds {left:?}");
}

#[tokio::test]
async fn a_reconciling_retry_does_not_wait_forever_on_a_provider_listing_that_hangs() {
    let w = World::with(Setup {
        config: ServiceConfig {
            provider_call_timeout: Duration::from_millis(100),
            ..ServiceConfig::default()
        },
        ..Setup::default()
    })
    .await;
    let p = Provider::Local;
    w.double
        .fail_next("create", move || ProviderError::TimedOutAfterSend {
            provider: p,
        });
    let op = unknown_op(create(&w, "k").await);
    *w.double.listing_hangs.lock().unwrap() = true;
    let retry = tokio::time::timeout(Duration::from_secs(5), create(&w, "k"))
        .await
        .expect("the retry answers within the provider call timeout");
    match retry {
        Err(ServiceError::IdempotencyOutcomeUnknown { operation_id }) => {
            assert_eq!(operation_id, Some(op));
        }
        other => panic!("expected idempotency_outcome_unknown, got {other:?}"),
    }
    let report = tokio::time::timeout(Duration::from_secs(5), w.service.reconcile_once())
        .await
        .expect("a reconciler pass is not stuck on one provider");
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(w.double.count("create"), 1);
}

/// Two replicas on one database: replica B's reconciler cannot see replica A's in-flight set,
/// so a `pending` record whose create A still waits on (a provider slower than the grace, but
/// within the create deadline) must not be failed by B before that deadline is past: had A
/// then died after the provider made the sandbox, it would be an orphan (the gap the model
/// check found, `model::model_checker_finds_the_gap_of_…`).
#[tokio::test]
async fn another_replicas_reconciler_leaves_a_pending_create_alone_until_its_deadline_is_past() {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
    use corral_provider::SandboxProvider;
    use corral_service::Service;

    let config = ServiceConfig {
        create_wait: Duration::from_millis(50),
        reconcile_grace: Duration::from_secs(300),
        ..ServiceConfig::default()
    };
    let w = World::with(Setup {
        gated: true,
        manual_clock: true,
        config: config.clone(),
        ..Setup::default()
    })
    .await;
    let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
    providers.insert(Provider::Local, w.double.clone());
    let replica_b = Service::new(
        providers,
        w.registry.clone(),
        IdempotencyStore::new(w.registry.database().clone(), IdempotencyConfig::default()),
        config,
    );
    let op = unknown_op(create(&w, "k").await);
    // Past the grace, well within the 15-minute create deadline: A still waits.
    w.clock.advance(Duration::from_secs(400));
    let report = replica_b.reconcile_once().await;
    assert_eq!(report.failed, 0, "{report:?}");
    let rec = w.registry.sandbox_by_operation(op).await.unwrap().unwrap();
    assert_eq!(rec.create_state, CreateState::Pending);
    // Past the deadline and a grace: A has recorded the outcome, or is gone. B fails the
    // record only after looking (nothing is there).
    w.clock.advance(Duration::from_secs(15 * 60 + 1));
    let lookups = w.double.count("find_by_operation_id");
    let report = replica_b.reconcile_once().await;
    assert_eq!(report.failed, 1, "{report:?}");
    assert_eq!(
        w.double.count("find_by_operation_id"),
        lookups + 1,
        "failed only after asking the provider"
    );
}

/// The owner wrote the `pending` record, the provider made the sandbox, and the owner died
/// before recording it (its create task panicked: no `unknown`, nothing in flight). Once the
/// create deadline and the grace are past, the reconciler must look the operation id up and
/// adopt what it finds; failing the record without asking would orphan that sandbox. The
/// crash tests move time back by less than the deadline plus grace, and the test above finds
/// nothing at the provider, so neither can tell "looked" from "did not look".
#[tokio::test]
async fn a_pending_create_whose_owner_died_is_adopted_after_its_deadline_never_failed_unasked() {
    let w = World::with(Setup {
        manual_clock: true,
        config: ServiceConfig {
            create_wait: Duration::from_secs(5),
            reconcile_grace: Duration::from_secs(300),
            ..ServiceConfig::default()
        },
        ..Setup::default()
    })
    .await;
    w.double.panic_on.lock().unwrap().push("create");
    let op = unknown_op(create(&w, "k").await);
    made_by_provider(&w, op).await;
    let rec = w.registry.sandbox_by_operation(op).await.unwrap().unwrap();
    assert_eq!(rec.create_state, CreateState::Pending);

    // Past the grace, within the deadline, the provider's listing lagging: not failed.
    *w.double.listing_lags.lock().unwrap() = true;
    w.clock.advance(Duration::from_secs(400));
    let report = w.service.reconcile_once().await;
    assert_eq!((report.adopted, report.failed), (0, 0), "{report:?}");

    // Past the create deadline plus the grace, the listing caught up: looked up and adopted.
    *w.double.listing_lags.lock().unwrap() = false;
    w.clock.advance(Duration::from_secs(15 * 60 + 1));
    let lookups = w.double.count("find_by_operation_id");
    let report = w.service.reconcile_once().await;
    assert_eq!(report.failed, 0, "{report:?}");
    assert!(report.adopted >= 1, "{report:?}");
    assert_eq!(w.double.count("find_by_operation_id"), lookups + 1);
    let rec = w.registry.sandbox_by_operation(op).await.unwrap().unwrap();
    assert_eq!(rec.create_state, CreateState::Created);
    assert!(rec.native_id.is_some(), "{rec:?}");

    // The key answers that sandbox; nothing was created again.
    let answered = create(&w, "k").await.unwrap();
    assert!(answered.body.contains(&op.to_string()), "{}", answered.body);
    assert_eq!(
        w.double.count("create"),
        2,
        "the dead owner's and the provider's own"
    );
}
