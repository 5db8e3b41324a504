//! What the orphan reaper keeps: one deployment id per database, one lease holder at a time,
//! orphans with their first sighting, and `vanished` tombstones reported once.

use std::sync::Arc;
use std::time::Duration;

use corral_domain::{
    CredentialSource, EventType, OperationId, Provider, SandboxId, SandboxMetadata, SandboxStatus,
};
use corral_registry::testing::TestDb;
use corral_registry::{
    Clock, EndReason, EventLog, ManualClock, MasterKey, NewSandbox, ProjectId, Registry,
};

use crate::on_both_backends;

on_both_backends!(reaper:
    the_deployment_id_is_made_once_and_shared,
    a_lease_has_one_holder_until_it_runs_out,
    an_orphan_keeps_its_first_sighting_and_is_reported_once,
    a_vanished_sandbox_becomes_a_tombstone_once_and_leaves_the_live_list,
);

async fn setup(db: &TestDb) -> (Registry, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let c: Arc<dyn Clock> = clock.clone();
    let reg = Registry::new(
        db.connect_with(db.config(), c).await,
        MasterKey::generate().unwrap(),
    );
    (reg, clock)
}

async fn created(reg: &Registry, project: ProjectId, native: &str) -> SandboxId {
    let id = SandboxId::new(Provider::E2b);
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
    reg.complete_create(project, id, native, SandboxStatus::Running)
        .await
        .unwrap();
    id
}

async fn the_deployment_id_is_made_once_and_shared(db: &TestDb) {
    let (reg, _) = setup(db).await;
    let (a, b) = tokio::join!(reg.deployment_id(), reg.deployment_id());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.starts_with("dep_"), "{a}");
    assert_eq!(a, b);
    assert_eq!(reg.deployment_id().await.unwrap(), a);
}

async fn a_lease_has_one_holder_until_it_runs_out(db: &TestDb) {
    let (reg, clock) = setup(db).await;
    let ttl = Duration::from_secs(60);
    assert!(reg.try_lease("reaper", "replica-a", ttl).await.unwrap());
    assert!(!reg.try_lease("reaper", "replica-b", ttl).await.unwrap());
    // The holder renews.
    assert!(reg.try_lease("reaper", "replica-a", ttl).await.unwrap());
    // Another name is another lease.
    assert!(reg.try_lease("other", "replica-b", ttl).await.unwrap());
    clock.advance(Duration::from_secs(61));
    assert!(reg.try_lease("reaper", "replica-b", ttl).await.unwrap());
    assert!(!reg.try_lease("reaper", "replica-a", ttl).await.unwrap());
}

async fn an_orphan_keeps_its_first_sighting_and_is_reported_once(db: &TestDb) {
    let (reg, clock) = setup(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let log = EventLog::new(reg.database().clone());
    let op = OperationId::new();
    let p = project.to_string();
    let (first, new) = reg
        .record_orphan(Provider::E2b, "isb_1", Some(&p), Some(op), None)
        .await
        .unwrap();
    assert!(new);
    clock.advance(Duration::from_secs(30));
    let (again, new) = reg
        .record_orphan(Provider::E2b, "isb_1", Some(&p), Some(op), None)
        .await
        .unwrap();
    assert!(!new);
    assert_eq!(again.first_seen_at, first.first_seen_at);
    assert!(again.last_seen_at > first.last_seen_at);
    assert_eq!(again.operation_id, Some(op));
    // A tag naming a project this database never had is kept, with no event anywhere.
    let (_, new) = reg
        .record_orphan(Provider::E2b, "isb_2", Some("prj_elsewhere"), None, None)
        .await
        .unwrap();
    assert!(new);
    let events = log.after(project, 0, 100, None).await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e.kind, EventType::SandboxOrphanFound);
    assert_eq!(e.provider, Some(Provider::E2b));
    assert_eq!(e.native_id.as_deref(), Some("isb_1"));
    assert_eq!(e.sandbox_id, None);

    reg.mark_orphan_deleted(Provider::E2b, "isb_1")
        .await
        .unwrap();
    let listed = reg.orphans().await.unwrap();
    assert_eq!(listed.len(), 2);
    let one = listed.iter().find(|o| o.native_id == "isb_1").unwrap();
    assert!(one.deleted_at.is_some());
    assert!(
        listed
            .iter()
            .any(|o| o.native_id == "isb_2" && o.deleted_at.is_none())
    );
}

async fn a_vanished_sandbox_becomes_a_tombstone_once_and_leaves_the_live_list(db: &TestDb) {
    let (reg, _) = setup(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let log = EventLog::new(reg.database().clone());
    let gone = created(&reg, project, "isb_gone").await;
    let kept = created(&reg, project, "isb_kept").await;
    let live = reg
        .live_created_sandboxes(Provider::E2b, Some(project), None, 10)
        .await
        .unwrap();
    assert_eq!(live.len(), 2);

    let rec = reg
        .tombstone_vanished(project, gone)
        .await
        .unwrap()
        .expect("a live record becomes a tombstone");
    assert_eq!(rec.status, SandboxStatus::Expired);
    assert!(rec.deleted_at.is_some());
    assert_eq!(rec.end_reason, Some(EndReason::Vanished));
    assert!(
        reg.tombstone_vanished(project, gone)
            .await
            .unwrap()
            .is_none()
    );

    let live = reg
        .live_created_sandboxes(Provider::E2b, None, None, 10)
        .await
        .unwrap();
    assert_eq!(live.iter().map(|r| r.id).collect::<Vec<_>>(), vec![kept]);
    // A delete by request is told apart.
    let deleted = reg.tombstone(project, kept).await.unwrap();
    assert_eq!(deleted.end_reason, Some(EndReason::Deleted));

    let events = log.after(project, 0, 100, Some(gone)).await.unwrap();
    let vanished: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventType::SandboxVanished)
        .collect();
    assert_eq!(vanished.len(), 1, "{events:?}");
    assert_eq!(vanished[0].previous_status, Some(SandboxStatus::Running));
    assert_eq!(vanished[0].reason.as_deref(), Some("vanished"));
}
