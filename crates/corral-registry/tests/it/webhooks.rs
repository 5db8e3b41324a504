//! Webhook endpoints and their outbox: deliveries queued in the event's transaction for the
//! endpoints that want it, claimed by one owner at a time, retried or given up, secrets
//! sealed at rest and rotated with an overlap.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use corral_domain::{
    CredentialSource, DeliveryState, EventType, OperationId, Provider, SandboxId, SandboxMetadata,
    SandboxStatus,
};
use corral_registry::testing::TestDb;
use corral_registry::{
    AttemptOutcome, CircuitPolicy, Clock, DeliveryRecord, FairClaim, ManualClock, MasterKey,
    NewSandbox, ProjectId, Registry, RegistryError,
};
use secrecy::ExposeSecret as _;

use crate::on_both_backends;

on_both_backends!(webhooks:
    events_queue_one_delivery_per_endpoint_that_wants_them,
    a_delivery_is_held_by_one_owner_and_retried_or_given_up,
    secrets_are_sealed_at_rest_and_rotation_signs_with_both_for_the_overlap,
    a_fair_claim_keeps_each_endpoint_and_project_within_its_share,
    an_endpoint_that_keeps_failing_waits_behind_its_circuit_until_one_probe_succeeds,
);

async fn setup(db: &TestDb) -> (Registry, Arc<ManualClock>, ProjectId) {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let c: Arc<dyn Clock> = clock.clone();
    let reg = Registry::new(
        db.connect_with(db.config(), c).await,
        MasterKey::generate().unwrap(),
    );
    let p = reg.create_project("p").await.unwrap().id;
    (reg, clock, p)
}

async fn created(reg: &Registry, project: ProjectId) -> SandboxId {
    let id = SandboxId::new(Provider::Local);
    reg.insert_sandbox(NewSandbox {
        id,
        project_id: project,
        metadata: SandboxMetadata {
            native_provider_id: None,
            operation_id: OperationId::new(),
            credential_source: CredentialSource::Profile,
            workspace: None,
            team_id: None,
            project_id: None,
            bridge_url: None,
        },
    })
    .await
    .unwrap();
    reg.complete_create(project, id, "n", SandboxStatus::Running)
        .await
        .unwrap();
    id
}

pub(crate) async fn events_queue_one_delivery_per_endpoint_that_wants_them(db: &TestDb) {
    let (reg, _, p) = setup(db).await;
    let q = reg.create_project("q").await.unwrap().id;
    // Events before an endpoint exists are not delivered to it.
    created(&reg, p).await;
    let (all, _) = reg
        .create_webhook(p, "https://a.example/h", &[])
        .await
        .unwrap();
    let (deletes, _) = reg
        .create_webhook(p, "https://b.example/h", &[EventType::SandboxDeleted])
        .await
        .unwrap();
    let (theirs, _) = reg
        .create_webhook(q, "https://c.example/h", &[])
        .await
        .unwrap();
    let listed = reg.list_webhooks(p).await.unwrap();
    assert_eq!(listed, [all.clone(), deletes.clone()]);
    assert_eq!(listed[1].types, [EventType::SandboxDeleted]);

    let id = created(&reg, p).await;
    reg.tombstone(p, id).await.unwrap();
    let of_all = reg.list_deliveries(p, &all.id, 50).await.unwrap();
    assert_eq!(
        of_all.iter().map(|d| d.event_id).collect::<Vec<_>>(),
        [3, 2],
        "newest first: the create (2) and the delete (3)"
    );
    assert!(
        of_all
            .iter()
            .all(|d| d.state == DeliveryState::Pending && d.attempts == 0)
    );
    let of_deletes = reg.list_deliveries(p, &deletes.id, 50).await.unwrap();
    assert_eq!(of_deletes.len(), 1);
    assert_eq!(of_deletes[0].event_id, 3);
    assert!(
        reg.list_deliveries(q, &theirs.id, 50)
            .await
            .unwrap()
            .is_empty()
    );
    // Another project's endpoint is not found, as a missing one.
    assert!(matches!(
        reg.list_deliveries(q, &all.id, 50).await,
        Err(RegistryError::NotFound { .. })
    ));

    // A removed endpoint gets nothing more, and what was pending for it is dead.
    reg.delete_webhook(p, &all.id).await.unwrap();
    assert!(
        reg.list_webhooks(p)
            .await
            .unwrap()
            .iter()
            .all(|w| w.id != all.id)
    );
    created(&reg, p).await;
    let after = reg.list_deliveries(p, &all.id, 50).await.unwrap();
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|d| d.state == DeliveryState::Dead));
    assert!(matches!(
        reg.delete_webhook(p, &all.id).await,
        Err(RegistryError::NotFound { .. })
    ));
    assert!(reg.webhook_target(&all.id).await.unwrap().is_none());

    // At most 16 live endpoints per project.
    for i in 0..15 {
        reg.create_webhook(q, &format!("https://x{i}.example/"), &[])
            .await
            .unwrap();
    }
    assert!(matches!(
        reg.create_webhook(q, "https://y.example/", &[]).await,
        Err(RegistryError::Conflict { .. })
    ));
}

pub(crate) async fn a_delivery_is_held_by_one_owner_and_retried_or_given_up(db: &TestDb) {
    let (reg, clock, p) = setup(db).await;
    let (hook, _) = reg
        .create_webhook(p, "https://a.example/h", &[])
        .await
        .unwrap();
    created(&reg, p).await;
    created(&reg, p).await;
    let lease = Duration::from_secs(30);
    let a = reg.claim_deliveries("a", lease, 10).await.unwrap();
    assert_eq!(a.len(), 2);
    assert!(
        a.iter()
            .all(|d| d.endpoint_id == hook.id && d.project_id == p)
    );
    // While a holds them, b gets nothing; a lapsed lease is taken over.
    assert!(
        reg.claim_deliveries("b", lease, 10)
            .await
            .unwrap()
            .is_empty()
    );
    clock.advance(Duration::from_secs(31));
    let b = reg.claim_deliveries("b", lease, 10).await.unwrap();
    assert_eq!(b.len(), 2);
    // a's late outcome is not recorded: b holds them now.
    let ok = AttemptOutcome::Delivered { status: 204 };
    assert!(!reg.record_attempt(&a[0].id, "a", &ok).await.unwrap());
    assert!(reg.record_attempt(&b[0].id, "b", &ok).await.unwrap());
    // A failure with a retry goes back to pending, due later; without one it is dead.
    let retry_at = clock.now() + chrono::TimeDelta::seconds(5);
    let failed = AttemptOutcome::Failed {
        status: Some(500),
        error: "HTTP 500".into(),
        retry_at: Some(retry_at),
    };
    assert!(reg.record_attempt(&b[1].id, "b", &failed).await.unwrap());
    assert!(
        reg.claim_deliveries("c", lease, 10)
            .await
            .unwrap()
            .is_empty(),
        "not due yet"
    );
    clock.advance(Duration::from_secs(6));
    let again = reg.claim_deliveries("c", lease, 10).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].id.as_str(), again[0].attempts),
        (b[1].id.as_str(), 1)
    );
    let given_up = AttemptOutcome::Failed {
        status: None,
        error: "connection refused".into(),
        retry_at: None,
    };
    assert!(
        reg.record_attempt(&again[0].id, "c", &given_up)
            .await
            .unwrap()
    );
    let list = reg.list_deliveries(p, &hook.id, 50).await.unwrap();
    let by_id = |id: &str| list.iter().find(|d| d.id == id).unwrap().clone();
    let done = by_id(&b[0].id);
    assert_eq!(
        (done.state, done.attempts, done.last_status),
        (DeliveryState::Delivered, 1, Some(204))
    );
    let dead = by_id(&b[1].id);
    assert_eq!((dead.state, dead.attempts), (DeliveryState::Dead, 2));
    assert_eq!(dead.last_error.as_deref(), Some("connection refused"));
    assert_eq!(dead.next_attempt_at, None);
    // Nothing is left to claim.
    clock.advance(Duration::from_secs(3600));
    assert!(
        reg.claim_deliveries("d", lease, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub(crate) async fn secrets_are_sealed_at_rest_and_rotation_signs_with_both_for_the_overlap(
    db: &TestDb,
) {
    let (reg, clock, p) = setup(db).await;
    let (hook, first) = reg
        .create_webhook(p, "https://a.example/h", &[])
        .await
        .unwrap();
    assert!(first.expose_secret().starts_with("whsec_"));
    assert_eq!(
        corral_registry::secret_bytes(&first).map(|b| b.len()),
        Some(32)
    );
    let target = reg.webhook_target(&hook.id).await.unwrap().unwrap();
    assert_eq!(target.url, "https://a.example/h");
    assert_eq!(target.secrets.len(), 1);
    assert_eq!(target.secrets[0].expose_secret(), first.expose_secret());
    let dump = corral_registry::testing::dump_all_rows(reg.database()).await;
    let b64 = first.expose_secret().trim_start_matches("whsec_");
    assert!(!dump.contains(b64), "a webhook secret is stored in clear");

    let (_, second) = reg
        .rotate_webhook_secret(p, &hook.id, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_ne!(second.expose_secret(), first.expose_secret());
    let target = reg.webhook_target(&hook.id).await.unwrap().unwrap();
    let secrets: Vec<&str> = target.secrets.iter().map(|s| s.expose_secret()).collect();
    assert_eq!(secrets, [second.expose_secret(), first.expose_secret()]);
    clock.advance(Duration::from_secs(3601));
    let target = reg.webhook_target(&hook.id).await.unwrap().unwrap();
    assert_eq!(target.secrets.len(), 1);
    assert_eq!(target.secrets[0].expose_secret(), second.expose_secret());
    let other = reg.create_project("q").await.unwrap().id;
    assert!(matches!(
        reg.rotate_webhook_secret(other, &hook.id, Duration::ZERO)
            .await,
        Err(RegistryError::NotFound { .. })
    ));
}

/// A fair claim by `owner` of at most `limit`, 2 per endpoint and 3 per project, with what
/// `owner` holds already; circuits trip at 3 failures.
async fn fair(
    reg: &Registry,
    owner: &str,
    limit: u32,
    held: &[&DeliveryRecord],
) -> Vec<DeliveryRecord> {
    let (mut endpoints, mut projects) = (HashMap::new(), HashMap::new());
    for d in held {
        *endpoints.entry(d.endpoint_id.clone()).or_insert(0) += 1;
        *projects.entry(d.project_id).or_insert(0) += 1;
    }
    reg.claim_deliveries_fairly(&FairClaim {
        owner,
        lease: Duration::from_secs(30),
        limit,
        per_endpoint: 2,
        per_project: 3,
        in_flight_endpoints: &endpoints,
        in_flight_projects: &projects,
        circuit_failures: 3,
    })
    .await
    .unwrap()
}

pub(crate) async fn a_fair_claim_keeps_each_endpoint_and_project_within_its_share(db: &TestDb) {
    let (reg, clock, p) = setup(db).await;
    let q = reg.create_project("q").await.unwrap().id;
    let (e1, _) = reg
        .create_webhook(p, "https://a.example/1", &[])
        .await
        .unwrap();
    let (e2, _) = reg
        .create_webhook(p, "https://a.example/2", &[])
        .await
        .unwrap();
    let (f, _) = reg
        .create_webhook(q, "https://b.example/", &[])
        .await
        .unwrap();
    // p's backlog (80 deliveries, more than one claim looks at) is older than q's one.
    for _ in 0..40 {
        created(&reg, p).await;
        clock.advance(Duration::from_millis(1));
    }
    created(&reg, q).await;
    clock.advance(Duration::from_secs(1));

    // A claim of 4 looks at the 64 oldest due: p's, of which it takes p's share (3).
    let first = fair(&reg, "a", 4, &[]).await;
    let of = |list: &[DeliveryRecord], e: &str| list.iter().filter(|d| d.endpoint_id == e).count();
    assert_eq!(first.len(), 3, "{first:?}");
    assert!(of(&first, &e1.id) <= 2 && of(&first, &e2.id) <= 2);
    // The next leaves p out of the query itself: q's delivery is not hidden by p's backlog.
    let held: Vec<&DeliveryRecord> = first.iter().collect();
    let second = fair(&reg, "a", 4, &held).await;
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0].endpoint_id, f.id);
    // With p at its share, nothing more of p's is claimed however much is due.
    let held: Vec<&DeliveryRecord> = first.iter().chain(&second).collect();
    assert!(fair(&reg, "a", 32, &held).await.is_empty());
    // Once one of p's ends, one more of p's.
    let ok = AttemptOutcome::Delivered { status: 200 };
    let done = first.iter().find(|d| d.project_id == p).unwrap();
    assert!(reg.record_attempt(&done.id, "a", &ok).await.unwrap());
    let held: Vec<&DeliveryRecord> = first
        .iter()
        .chain(&second)
        .filter(|d| d.id != done.id)
        .collect();
    let next = fair(&reg, "a", 32, &held).await;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].project_id, p);
}

pub(crate) async fn an_endpoint_that_keeps_failing_waits_behind_its_circuit_until_one_probe_succeeds(
    db: &TestDb,
) {
    let (reg, clock, p) = setup(db).await;
    let (bad, _) = reg
        .create_webhook(p, "https://a.example/bad", &[])
        .await
        .unwrap();
    for _ in 0..5 {
        created(&reg, p).await;
    }
    clock.advance(Duration::from_secs(1));
    let policy = CircuitPolicy {
        failures: 3,
        open: Duration::from_secs(60),
        max_open: Duration::from_secs(3600),
    };
    assert_eq!(
        fair(&reg, "a", 32, &[]).await.len(),
        2,
        "two in flight to one endpoint"
    );
    assert_eq!(
        reg.record_circuit(&bad.id, false, &policy).await.unwrap(),
        None
    );
    assert_eq!(
        reg.record_circuit(&bad.id, false, &policy).await.unwrap(),
        None
    );
    // Stored times are whole microseconds.
    let about = |got: Option<chrono::DateTime<chrono::Utc>>, seconds: i64| {
        let want = clock.now() + chrono::TimeDelta::seconds(seconds);
        let got = got.expect("the circuit opened");
        assert!(
            (got - want).abs() < chrono::TimeDelta::microseconds(1),
            "{got} != {want}"
        );
    };
    about(
        reg.record_circuit(&bad.id, false, &policy).await.unwrap(),
        60,
    );
    // A late failure of a delivery still in flight does not reopen it further.
    assert_eq!(
        reg.record_circuit(&bad.id, false, &policy).await.unwrap(),
        None
    );
    // Open: its deliveries wait (even the two whose lease lapses).
    clock.advance(Duration::from_secs(31));
    assert!(fair(&reg, "b", 32, &[]).await.is_empty());
    // Half-open: one probe, for every replica.
    clock.advance(Duration::from_secs(30));
    let probe = fair(&reg, "b", 32, &[]).await;
    assert_eq!(probe.len(), 1);
    assert!(
        fair(&reg, "c", 32, &[]).await.is_empty(),
        "the probe is out"
    );
    // The probe fails: open again, twice as long.
    about(
        reg.record_circuit(&bad.id, false, &policy).await.unwrap(),
        120,
    );
    clock.advance(Duration::from_secs(119));
    assert!(fair(&reg, "c", 32, &[]).await.is_empty());
    clock.advance(Duration::from_secs(31));
    let probe = fair(&reg, "c", 32, &[]).await;
    assert_eq!(probe.len(), 1);
    // The probe succeeds: closed, and the endpoint's share is back.
    assert_eq!(
        reg.record_circuit(&bad.id, true, &policy).await.unwrap(),
        None
    );
    let held: Vec<&DeliveryRecord> = probe.iter().collect();
    assert_eq!(fair(&reg, "c", 32, &held).await.len(), 1);
}
