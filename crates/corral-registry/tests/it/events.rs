//! The lifecycle event log: each change reported once, in order, per project, with what a
//! reader needs and nothing secret; pruned by age without reusing sequence numbers.

use std::sync::Arc;
use std::time::Duration;

use corral_domain::{
    CommandId, CommandState, CredentialSource, EventType, OperationId, Provider, SandboxId,
    SandboxMetadata, SandboxStatus,
};
use corral_registry::testing::TestDb;
use corral_registry::{
    Clock, CommandJournal, CreateState, EventLog, ManualClock, MasterKey, NewCommand, NewSandbox,
    ProjectId, Registry,
};

use crate::on_both_backends;

on_both_backends!(events:
    a_sandboxs_life_is_reported_once_per_change_in_order,
    commands_report_their_start_and_end_without_their_command_line,
    each_project_reads_only_its_own_events_and_a_sandbox_filter_narrows_them,
    concurrent_appends_get_distinct_gapless_sequence_numbers,
    pruning_removes_old_events_and_never_reuses_their_numbers,
);

async fn setup(db: &TestDb) -> (Registry, EventLog, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let c: Arc<dyn Clock> = clock.clone();
    let reg = Registry::new(
        db.connect_with(db.config(), c).await,
        MasterKey::generate().unwrap(),
    );
    let log = EventLog::new(reg.database().clone());
    (reg, log, clock)
}

async fn sandbox(reg: &Registry, project: ProjectId) -> SandboxId {
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
    id
}

fn kinds(events: &[corral_domain::LifecycleEvent]) -> Vec<EventType> {
    events.iter().map(|e| e.kind).collect()
}

pub(crate) async fn a_sandboxs_life_is_reported_once_per_change_in_order(db: &TestDb) {
    let (reg, log, clock) = setup(db).await;
    let p = reg.create_project("p").await.unwrap().id;
    let id = sandbox(&reg, p).await;
    // A pending record is not an event: nothing exists at the provider yet.
    assert!(log.after(p, 0, 100, None).await.unwrap().is_empty());
    reg.complete_create(p, id, "n-1", SandboxStatus::Creating)
        .await
        .unwrap();
    // A repeated confirmation is not a second create.
    reg.complete_create(p, id, "n-1", SandboxStatus::Creating)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1));
    reg.record_status(p, id, SandboxStatus::Running, clock.now())
        .await
        .unwrap();
    // The same status seen again, or an older observation, changes nothing.
    reg.record_status(p, id, SandboxStatus::Running, clock.now())
        .await
        .unwrap();
    reg.record_status(
        p,
        id,
        SandboxStatus::Stopped,
        clock.now() - chrono::TimeDelta::seconds(5),
    )
    .await
    .unwrap();
    clock.advance(Duration::from_secs(1));
    reg.tombstone(p, id).await.unwrap();
    reg.tombstone(p, id).await.unwrap();
    // A tombstone ignores later observations, so they report nothing either.
    reg.record_status(p, id, SandboxStatus::Running, clock.now())
        .await
        .unwrap();
    let events = log.after(p, 0, 100, None).await.unwrap();
    assert_eq!(
        kinds(&events),
        [
            EventType::SandboxCreated,
            EventType::SandboxStatusChanged,
            EventType::SandboxDeleted
        ]
    );
    assert_eq!(
        events.iter().map(|e| e.id).collect::<Vec<_>>(),
        [1, 2, 3],
        "one project's numbers start at 1 and have no gaps"
    );
    assert!(events.iter().all(|e| e.sandbox_id == Some(id)));
    assert_eq!(events[0].status, Some(SandboxStatus::Creating));
    let changed = &events[1];
    assert_eq!(changed.previous_status, Some(SandboxStatus::Creating));
    assert_eq!(changed.status, Some(SandboxStatus::Running));
    assert_eq!(changed.reason.as_deref(), Some("observed"));
    assert_eq!(events[2].status, Some(SandboxStatus::Deleted));
    assert!(events[0].occurred_at < events[1].occurred_at);
    // Reading on from a point gives what follows it.
    let rest = log.after(p, 1, 100, None).await.unwrap();
    assert_eq!(rest, events[1..]);
    assert!(log.after(p, 3, 100, None).await.unwrap().is_empty());
    assert_eq!(log.after(p, 0, 2, None).await.unwrap(), events[..2]);

    // A create that fails is a change to `failed`, reported once.
    let failing = sandbox(&reg, p).await;
    reg.set_create_state(p, failing, CreateState::Failed)
        .await
        .unwrap();
    reg.set_create_state(p, failing, CreateState::Failed)
        .await
        .unwrap();
    let failed = log.after(p, 3, 100, None).await.unwrap();
    assert_eq!(kinds(&failed), [EventType::SandboxStatusChanged]);
    assert_eq!(failed[0].previous_status, Some(SandboxStatus::Creating));
    assert_eq!(failed[0].status, Some(SandboxStatus::Failed));
    assert_eq!(failed[0].reason.as_deref(), Some("create_failed"));
}

pub(crate) async fn commands_report_their_start_and_end_without_their_command_line(db: &TestDb) {
    let (reg, log, clock) = setup(db).await;
    let p = reg.create_project("p").await.unwrap().id;
    let id = sandbox(&reg, p).await;
    let journal = CommandJournal::new(reg.database().clone());
    let cmd = CommandId::new();
    journal
        .insert(NewCommand {
            id: cmd,
            project_id: p,
            sandbox_id: id,
            operation_id: OperationId::new(),
            command: "echo s3cr3t-token".into(),
            tag: None,
            stdin: false,
            timeout_seconds: 60,
            owner: "a".into(),
            lease: Duration::from_secs(30),
        })
        .await
        .unwrap();
    // Recorded but not confirmed: no event yet.
    assert!(log.after(p, 0, 100, None).await.unwrap().is_empty());
    journal.started(cmd, "h-1").await.unwrap();
    clock.advance(Duration::from_millis(1500));
    journal
        .finish(cmd, Some("a"), CommandState::Exited, Some(3))
        .await
        .unwrap();
    // An ended command stays ended: no second exit.
    journal
        .finish(cmd, None, CommandState::Killed, None)
        .await
        .unwrap();
    let events = log.after(p, 0, 100, None).await.unwrap();
    assert_eq!(
        kinds(&events),
        [EventType::CommandStarted, EventType::CommandExited]
    );
    assert!(
        events
            .iter()
            .all(|e| e.command_id == Some(cmd) && e.sandbox_id == Some(id))
    );
    let exited = &events[1];
    assert_eq!(exited.command_state, Some(CommandState::Exited));
    assert_eq!(exited.exit_code, Some(3));
    assert_eq!(exited.duration_ms, Some(1500));
    let dump = corral_registry::testing::dump_all_rows(reg.database()).await;
    let events_part = dump
        .split("events")
        .skip(1)
        .collect::<Vec<_>>()
        .join("events");
    assert!(
        !events_part.contains("s3cr3t"),
        "a command line reached the event log"
    );
}

pub(crate) async fn each_project_reads_only_its_own_events_and_a_sandbox_filter_narrows_them(
    db: &TestDb,
) {
    let (reg, log, _) = setup(db).await;
    let p = reg.create_project("p").await.unwrap().id;
    let q = reg.create_project("q").await.unwrap().id;
    let a = sandbox(&reg, p).await;
    let b = sandbox(&reg, p).await;
    let c = sandbox(&reg, q).await;
    for (project, id) in [(p, a), (p, b), (q, c)] {
        reg.complete_create(project, id, "n", SandboxStatus::Running)
            .await
            .unwrap();
    }
    reg.tombstone(p, a).await.unwrap();
    let of_p = log.after(p, 0, 100, None).await.unwrap();
    assert_eq!(of_p.len(), 3);
    assert!(of_p.iter().all(|e| e.sandbox_id != Some(c)));
    let of_q = log.after(q, 0, 100, None).await.unwrap();
    assert_eq!(of_q.len(), 1);
    assert_eq!(
        (of_q[0].id, of_q[0].sandbox_id),
        (1, Some(c)),
        "q's log has its own numbers"
    );
    let of_a = log.after(p, 0, 100, Some(a)).await.unwrap();
    assert_eq!(
        kinds(&of_a),
        [EventType::SandboxCreated, EventType::SandboxDeleted]
    );
    // Another project's sandbox named as a filter reads as nothing.
    assert!(log.after(p, 0, 100, Some(c)).await.unwrap().is_empty());
}

pub(crate) async fn concurrent_appends_get_distinct_gapless_sequence_numbers(db: &TestDb) {
    let (reg, log, _) = setup(db).await;
    let p = reg.create_project("p").await.unwrap().id;
    let mut ids = Vec::new();
    for _ in 0..24 {
        ids.push(sandbox(&reg, p).await);
    }
    let reg = Arc::new(reg);
    let tasks: Vec<_> = ids
        .iter()
        .map(|&id| {
            let reg = reg.clone();
            tokio::spawn(async move {
                reg.complete_create(p, id, "n", SandboxStatus::Running)
                    .await
                    .unwrap();
                reg.tombstone(p, id).await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let events = log.after(p, 0, 500, None).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.id).collect::<Vec<_>>(),
        (1..=48).collect::<Vec<u64>>()
    );
    // Per sandbox, created comes before deleted.
    for id in ids {
        let mine: Vec<_> = events.iter().filter(|e| e.sandbox_id == Some(id)).collect();
        assert_eq!(mine.len(), 2);
        assert_eq!(mine[0].kind, EventType::SandboxCreated);
        assert_eq!(mine[1].kind, EventType::SandboxDeleted);
    }
}

pub(crate) async fn pruning_removes_old_events_and_never_reuses_their_numbers(db: &TestDb) {
    let (reg, log, clock) = setup(db).await;
    let p = reg.create_project("p").await.unwrap().id;
    for _ in 0..5 {
        let id = sandbox(&reg, p).await;
        reg.complete_create(p, id, "n", SandboxStatus::Running)
            .await
            .unwrap();
        clock.advance(Duration::from_secs(60));
    }
    // Events older than 150 s: the first three (at 0, 60 and 120 s before the 4th).
    let cutoff = clock.now() - chrono::TimeDelta::seconds(150);
    // A batch of at most 2 leaves the third for the next pass.
    assert_eq!(log.prune(cutoff, 2).await.unwrap(), 2);
    assert_eq!(log.prune(cutoff, 100).await.unwrap(), 1);
    assert_eq!(log.prune(cutoff, 100).await.unwrap(), 0);
    let left = log.after(p, 0, 100, None).await.unwrap();
    assert_eq!(left.iter().map(|e| e.id).collect::<Vec<_>>(), [4, 5]);
    let id = sandbox(&reg, p).await;
    reg.complete_create(p, id, "n", SandboxStatus::Running)
        .await
        .unwrap();
    let left = log.after(p, 5, 100, None).await.unwrap();
    assert_eq!(left.iter().map(|e| e.id).collect::<Vec<_>>(), [6]);
}
