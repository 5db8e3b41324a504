//! Create and its Idempotency-Key rules (research §1.8 ID-1…ID-20), with provider calls
//! counted on the double.

use std::time::Duration;

use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderContext};
use corral_errors::ErrorCode;
use corral_provider::{CallContext, CreateSpec, ProviderError, SandboxProvider as _, SecretString};
use corral_service::error::ServiceError;
use corral_service::{Created, InlineAccess, ServiceConfig};

use crate::support::{Setup, World};

pub(crate) fn local() -> CreateSandboxRequest {
    CreateSandboxRequest::standard(Provider::Local, None, None)
}

pub(crate) async fn create(w: &World, key: &str) -> Result<Created, ServiceError> {
    let caller = w.caller().await;
    w.service
        .create(&caller, InlineAccess::default(), Some(key), local())
        .await
}

#[track_caller]
pub(crate) fn code(r: Result<Created, ServiceError>) -> ErrorCode {
    match r {
        Ok(c) => panic!("expected a failure, got {} {}", c.status, c.body),
        Err(e) => e.code(),
    }
}

pub(crate) fn unknown_op(r: Result<Created, ServiceError>) -> OperationId {
    match r {
        Err(ServiceError::CreateOutcomeUnknown { operation_id }) => operation_id,
        other => panic!("expected sandbox_create_outcome_unknown, got {other:?}"),
    }
}

/// Makes a sandbox carrying `op` at the provider behind the service's back (the provider did
/// create it, but its answer never reached us).
pub(crate) async fn made_by_provider(w: &World, op: OperationId) {
    let spec = CreateSpec {
        operation_id: op,
        timeout_seconds: None,
        request: local(),
    };
    w.double
        .create(&CallContext::anonymous(), &spec)
        .await
        .unwrap();
}

#[tokio::test]
async fn id1_malformed_keys_are_refused_before_anything_is_stored_or_called() {
    let w = World::new().await;
    for bad in [
        String::new(),
        "k".repeat(256),
        "tab\there".into(),
        "é".into(),
    ] {
        assert_eq!(
            code(create(&w, &bad).await),
            ErrorCode::InvalidIdempotencyKey
        );
    }
    assert_eq!(w.double.total(), 0);
    let caller = w.caller().await;
    let page = w.service.list(&caller, None, None).await.unwrap();
    assert!(page.items.is_empty());
    assert_eq!(create(&w, &"k".repeat(255)).await.unwrap().status, 201);
}

#[tokio::test]
async fn id2_the_same_key_in_two_projects_makes_two_sandboxes() {
    let w = World::new().await;
    let first = create(&w, "k").await.unwrap();
    let other = w.registry.create_project("other").await.unwrap();
    let key = w.registry.issue_api_key(other.id).await.unwrap();
    let caller = w
        .service
        .authenticate(Some(&format!(
            "Bearer {}",
            corral_provider::ExposeSecret::expose_secret(&key.key)
        )))
        .await
        .unwrap();
    let second = w
        .service
        .create(&caller, InlineAccess::default(), Some("k"), local())
        .await
        .unwrap();
    assert_eq!((first.status, second.status), (201, 201));
    assert_ne!(first.body, second.body);
    assert_eq!(w.double.count("create"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn id3_fifty_concurrent_identical_creates_make_exactly_one_provider_create() {
    let w = std::sync::Arc::new(World::new().await);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let w = w.clone();
        tasks.spawn(async move { create(&w, "same").await });
    }
    let (mut fresh, mut bodies) = (0, std::collections::BTreeSet::new());
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(c) => {
                fresh += usize::from(c.status == 201);
                bodies.insert(c.body);
            }
            Err(e) => assert_eq!(e.code(), ErrorCode::IdempotencyInProgress, "{e}"),
        }
    }
    assert_eq!(fresh, 1);
    assert_eq!(
        bodies.len(),
        1,
        "replays are byte-identical to the fresh answer"
    );
    assert_eq!(w.double.count("create"), 1);
}

#[tokio::test]
async fn id4_id5_the_fingerprint_covers_context_headers_but_never_the_credential() {
    let w = World::with(Setup {
        provider: Provider::E2b,
        ..Setup::default()
    })
    .await;
    let caller = w.caller().await;
    let inline = |secret: &str, workspace: &str| InlineAccess {
        credential: Some(SecretString::from(secret.to_owned())),
        context: ProviderContext {
            workspace: Some(workspace.into()),
            ..ProviderContext::default()
        },
    };
    let req = || CreateSandboxRequest::standard(Provider::E2b, None, None);
    let first = w
        .service
        .create(&caller, inline("canary-secret-one", "w1"), Some("k"), req())
        .await
        .unwrap();
    assert_eq!(first.status, 201);
    // Another credential, same request: the same request (the secret is not fingerprinted).
    let again = w
        .service
        .create(&caller, inline("canary-secret-two", "w1"), Some("k"), req())
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    // Another workspace header: another request.
    let other = w
        .service
        .create(&caller, inline("canary-secret-one", "w2"), Some("k"), req())
        .await;
    assert_eq!(code(other), ErrorCode::IdempotencyConflict);
    assert_eq!(w.double.count("create"), 1);
    assert!(!first.body.contains("canary-secret"));
    // Nothing stored (registry, key table, WAL) holds the credential.
    for entry in std::fs::read_dir(w.data_dir()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(
            !bytes.windows(13).any(|win| win == b"canary-secret"),
            "a stored file holds the credential"
        );
    }
}

/// The fingerprint binds the body, not only the headers: the same key with another body is
/// `idempotency_conflict` whatever field differs, reaches no provider and leaves no record;
/// the first body again still replays. (The HTTP tests caught a fingerprint without the body;
/// this one catches it where the rule lives.)
#[tokio::test]
async fn id4_the_same_key_with_another_body_is_a_conflict_and_reaches_no_provider() {
    let w = World::new().await;
    let caller = w.caller().await;
    let with_timeout = |t: Option<u64>| CreateSandboxRequest::standard(Provider::Local, None, t);
    let first = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            Some("k"),
            with_timeout(Some(600)),
        )
        .await
        .unwrap();
    assert_eq!(first.status, 201);
    for other in [None, Some(601), Some(60)] {
        let r = w
            .service
            .create(
                &caller,
                InlineAccess::default(),
                Some("k"),
                with_timeout(other),
            )
            .await;
        assert_eq!(code(r), ErrorCode::IdempotencyConflict, "timeout {other:?}");
    }
    assert_eq!(
        w.double.count("create"),
        1,
        "a conflict reaches no provider"
    );
    let page = w.service.list(&caller, None, None).await.unwrap();
    assert_eq!(page.items.len(), 1, "a conflict leaves no record");
    let again = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            Some("k"),
            with_timeout(Some(600)),
        )
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
}

#[tokio::test]
async fn id6_a_duplicate_while_the_first_runs_is_in_progress_and_calls_nothing() {
    let w = World::with(Setup {
        gated: true,
        ..Setup::default()
    })
    .await;
    let w = std::sync::Arc::new(w);
    let w2 = w.clone();
    let first = tokio::spawn(async move { create(&w2, "k").await });
    w.until_calls("create_arrived", 1).await;
    assert_eq!(
        code(create(&w, "k").await),
        ErrorCode::IdempotencyInProgress
    );
    w.double.release_creates(1);
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status, 201);
    let replay = create(&w, "k").await.unwrap();
    assert_eq!((replay.status, replay.replayed), (200, true));
    assert_eq!(replay.body, first.body);
    assert_eq!(w.double.count("create_arrived"), 1);
}

#[tokio::test]
async fn id8_retryable_and_provider_refused_creates_free_the_key() {
    let w = World::new().await;
    let p = Provider::Local;
    w.double
        .fail_next("create", move || ProviderError::RateLimited {
            provider: p,
            retry_after: Some(Duration::from_secs(3)),
        });
    w.double
        .fail_next("create", move || ProviderError::Unavailable {
            provider: p,
            message: "connection refused".into(),
            retry_after: None,
        });
    w.double
        .fail_next("create", move || ProviderError::InvalidRequest {
            provider: p,
            message: "no such image".into(),
        });
    assert_eq!(code(create(&w, "k").await), ErrorCode::RateLimited);
    assert_eq!(code(create(&w, "k").await), ErrorCode::ProviderUnavailable);
    assert_eq!(
        code(create(&w, "k").await),
        ErrorCode::ProviderInvalidRequest
    );
    assert_eq!(create(&w, "k").await.unwrap().status, 201);
    assert_eq!(w.double.count("create"), 4);
}

#[tokio::test]
async fn id9_a_rejection_before_execution_leaves_no_record() {
    let w = World::with(Setup {
        provider: Provider::E2b,
        ..Setup::default()
    })
    .await;
    let caller = w.caller().await;
    let req = || CreateSandboxRequest::standard(Provider::E2b, None, None);
    // No profile and no inline credential.
    let r = w
        .service
        .create(&caller, InlineAccess::default(), Some("k"), req())
        .await;
    assert_eq!(code(r), ErrorCode::ProviderProfileNotFound);
    // Refused by capability validation.
    let bad = CreateSandboxRequest::standard(Provider::E2b, Some("img".into()), None);
    let r = w
        .service
        .create(&caller, InlineAccess::default(), Some("k"), bad)
        .await;
    assert_eq!(code(r), ErrorCode::InvalidRequest);
    assert_eq!(w.double.total(), 0);
    let with_credential = InlineAccess {
        credential: Some(SecretString::from("c".to_owned())),
        context: ProviderContext::default(),
    };
    let ok = w
        .service
        .create(&caller, with_credential, Some("k"), req())
        .await
        .unwrap();
    assert_eq!(ok.status, 201);
}

#[tokio::test]
async fn id10_id11_a_lost_answer_is_adopted_by_operation_id_never_created_again() {
    let w = World::new().await;
    let p = Provider::Local;
    w.double
        .fail_next("create", move || ProviderError::TimedOutAfterSend {
            provider: p,
        });
    let op = unknown_op(create(&w, "k").await);
    made_by_provider(&w, op).await;
    let adopted = create(&w, "k").await.unwrap();
    assert_eq!((adopted.status, adopted.replayed), (201, false));
    assert!(adopted.body.contains(&op.to_string()));
    let replay = create(&w, "k").await.unwrap();
    assert_eq!(replay.body, adopted.body);
    // One failed service create, one made behind its back; the retries only looked.
    assert_eq!(w.double.count("create"), 2);
    assert_eq!(w.double.count("find_by_operation_id"), 1);
}

#[tokio::test]
async fn id11_several_sandboxes_with_one_operation_id_are_never_picked() {
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
    made_by_provider(&w, op).await;
    made_by_provider(&w, op).await;
    for _ in 0..2 {
        match create(&w, "k").await {
            Err(ServiceError::IdempotencyOutcomeUnknown { operation_id }) => {
                assert_eq!(operation_id, Some(op));
            }
            other => panic!("expected idempotency_outcome_unknown, got {other:?}"),
        }
    }
    let report = w.service.reconcile_once().await;
    assert_eq!((report.adopted, report.failed), (0, 0), "{report:?}");
    assert_eq!(w.double.count("create"), 3);
}

#[tokio::test]
async fn id13_id14_a_create_whose_task_died_is_reconciled_once_its_lease_runs_out() {
    // A lease long enough that the in-progress check below cannot outlive it on a loaded
    // machine (at 200 ms it did, under a parallel build).
    let w = World::with(Setup {
        lease: Duration::from_secs(2),
        ..Setup::default()
    })
    .await;
    w.double.panic_on.lock().unwrap().push("create");
    let op = unknown_op(create(&w, "k").await);
    // Within the lease the key is still held.
    assert_eq!(
        code(create(&w, "k").await),
        ErrorCode::IdempotencyInProgress
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // The dead owner's claim is taken over into reconciliation: nothing was created, and the
    // grace period is not over, so the outcome stays unknown.
    match create(&w, "k").await {
        Err(ServiceError::IdempotencyOutcomeUnknown { operation_id }) => {
            assert_eq!(operation_id, Some(op));
        }
        other => panic!("expected idempotency_outcome_unknown, got {other:?}"),
    }
    assert_eq!(w.double.count("create"), 1, "never created a second time");
    assert_eq!(w.double.count("find_by_operation_id"), 1);
}

#[tokio::test]
async fn id12_an_unavailable_store_fails_closed_with_no_provider_call() {
    let w = World::with(Setup {
        store_pool_of_one: true,
        ..Setup::default()
    })
    .await;
    let held = w.store_db.as_ref().unwrap().connection().await.unwrap();
    assert_eq!(
        code(create(&w, "k").await),
        ErrorCode::IdempotencyUnavailable
    );
    assert_eq!(w.double.total(), 0);
    drop(held);
    assert_eq!(create(&w, "k").await.unwrap().status, 201);
}

#[tokio::test]
async fn id16_a_completed_key_is_new_again_after_24_hours() {
    let w = World::with(Setup {
        manual_clock: true,
        ..Setup::default()
    })
    .await;
    let first = create(&w, "k").await.unwrap();
    w.clock.advance(Duration::from_secs(24 * 3600 - 1));
    assert!(create(&w, "k").await.unwrap().replayed);
    w.clock.advance(Duration::from_secs(2));
    let fresh = create(&w, "k").await.unwrap();
    assert_eq!(fresh.status, 201);
    assert_ne!(fresh.body, first.body);
    assert_eq!(w.double.count("create"), 2);
}

#[tokio::test]
async fn id17_a_late_duplicate_after_delete_replays_and_creates_nothing() {
    let w = World::new().await;
    let first = create(&w, "k").await.unwrap();
    let id: serde_json::Value = serde_json::from_str(&first.body).unwrap();
    let caller = w.caller().await;
    let deleted = w
        .service
        .delete(&caller, InlineAccess::default(), id["id"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(deleted.status.as_str(), "deleted");
    let late = create(&w, "k").await.unwrap();
    assert_eq!((late.status, late.replayed), (200, true));
    assert_eq!(late.body, first.body);
    assert_eq!(w.double.count("create"), 1);
}

#[tokio::test]
async fn id19_a_revoked_key_is_refused_before_any_replay() {
    let w = World::new().await;
    create(&w, "k").await.unwrap();
    w.registry.revoke_api_key(&w.key_id).await.unwrap();
    let r = w
        .service
        .authenticate(Some(&format!("Bearer {}", w.key)))
        .await;
    // A replay needs a `Caller`, and only `authenticate` makes one.
    assert_eq!(r.unwrap_err().code(), ErrorCode::AuthenticationError);
}

#[tokio::test]
async fn id20_outcome_unknown_answers_carry_the_operation_id_and_say_same_key() {
    let w = World::new().await;
    let p = Provider::Local;
    w.double
        .fail_next("create", move || ProviderError::TimedOutAfterSend {
            provider: p,
        });
    let e = create(&w, "k").await.unwrap_err();
    let env = e.envelope("req_1");
    assert!(env.error.operation_id.is_some());
    assert!(e.to_string().contains("same Idempotency-Key"), "{e}");
    let again = create(&w, "k").await.unwrap_err();
    assert_eq!(again.code(), ErrorCode::IdempotencyOutcomeUnknown);
    assert!(
        again.to_string().contains("do not retry with a new key"),
        "{again}"
    );
}

#[tokio::test]
async fn id16_the_reconciler_reaps_completed_keys_past_retention_only() {
    let w = World::with(Setup {
        manual_clock: true,
        ..Setup::default()
    })
    .await;
    create(&w, "old").await.unwrap();
    w.clock.advance(Duration::from_secs(12 * 3600));
    create(&w, "young").await.unwrap();
    assert_eq!(w.service.reconcile_once().await.reaped, 0);
    w.clock.advance(Duration::from_secs(12 * 3600 + 1));
    assert_eq!(w.service.reconcile_once().await.reaped, 1);
    assert!(create(&w, "young").await.unwrap().replayed);
}

#[tokio::test]
async fn a_bridge_call_carries_the_addresses_the_guard_vetted_and_a_refused_url_calls_nothing() {
    let w = World::with(Setup {
        provider: Provider::Cloudflare,
        ..Setup::default()
    })
    .await;
    let caller = w.caller().await;
    let inline = |url: &str| InlineAccess {
        credential: Some(SecretString::from("bridge-key".to_owned())),
        context: ProviderContext {
            bridge_url: Some(url.into()),
            ..ProviderContext::default()
        },
    };
    let req = || CreateSandboxRequest::standard(Provider::Cloudflare, None, None);
    let created = w
        .service
        .create(&caller, inline("https://1.1.1.1:8443/bridge"), None, req())
        .await
        .unwrap();
    assert_eq!(created.status, 201);
    let pinned = w.double.pinned.lock().unwrap().clone();
    assert_eq!(pinned, [Some(vec!["1.1.1.1:8443".parse().unwrap()])]);
    // A loopback URL is refused before the provider is called.
    let refused = w
        .service
        .create(&caller, inline("http://0x7f000001:8443/"), None, req())
        .await;
    assert_eq!(code(refused), ErrorCode::InvalidRequest);
    assert_eq!(w.double.count("create"), 1);
}
