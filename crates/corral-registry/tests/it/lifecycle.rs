//! The sandbox lifecycle in the registry: what a sandbox is created with (auto-resume, idle
//! stop, its snapshot), its last activity and the idle sweep, stops and resumes reported with
//! their reason in the change's transaction, and snapshot records with their events.

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use corral_domain::{
    CredentialSource, EventType, LifecycleEvent, OperationId, Provider, SandboxId, SandboxMetadata,
    SandboxStatus, SnapshotId, SnapshotStatus, event_reason,
};
use corral_registry::testing::TestDb;
use corral_registry::{
    Clock, EventLog, ManualClock, MasterKey, NewSandbox, NewSnapshot, ProjectId, Registry,
    RegistryError, SandboxLifecycle, SnapshotRecord, UsageLog,
};

use crate::on_both_backends;

on_both_backends!(lifecycle:
    insert_sandbox_with_round_trips_the_lifecycle,
    touch_activity_never_moves_backwards,
    idle_sandboxes_picks_exactly_the_idle_running_ones,
    stops_and_resumes_are_reported_with_their_reason_beside_the_status_change,
    a_snapshot_is_created_once_ready_and_scoped_to_its_project,
    a_snapshot_fails_with_its_reason_unless_it_is_ready,
    snapshots_list_newest_first_by_cursor_with_tombstones,
    tombstoning_a_snapshot_is_idempotent_with_one_event,
    pending_snapshots_are_the_creating_ones_oldest_first_across_projects,
);

struct World {
    reg: Registry,
    log: EventLog,
    clock: Arc<ManualClock>,
}

async fn world(db: &TestDb) -> World {
    // Whole microseconds, as the database keeps them.
    let start = chrono::DateTime::from_timestamp_micros(1_780_000_000_000_000).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let c: Arc<dyn Clock> = clock.clone();
    let reg = Registry::new(
        db.connect_with(db.config(), c).await,
        MasterKey::generate().unwrap(),
    );
    let log = EventLog::new(reg.database().clone());
    World { reg, log, clock }
}

fn new_sandbox(project: ProjectId) -> NewSandbox {
    NewSandbox {
        id: SandboxId::new(Provider::Local),
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
    }
}

/// A confirmed sandbox with an idle stop of `idle` seconds (if any), `running`.
async fn running(w: &World, project: ProjectId, idle: Option<u64>) -> SandboxId {
    let lifecycle = SandboxLifecycle {
        idle_stop_seconds: idle,
        ..SandboxLifecycle::default()
    };
    let id = w
        .reg
        .insert_sandbox_with(new_sandbox(project), None, lifecycle)
        .await
        .unwrap()
        .id;
    w.reg
        .complete_create(project, id, &format!("n-{id}"), SandboxStatus::Running)
        .await
        .unwrap();
    id
}

async fn events(w: &World, project: ProjectId) -> Vec<LifecycleEvent> {
    w.log.after(project, 0, 500, None).await.unwrap()
}

fn kinds(events: &[LifecycleEvent]) -> Vec<EventType> {
    events.iter().map(|e| e.kind).collect()
}

pub(crate) async fn insert_sandbox_with_round_trips_the_lifecycle(db: &TestDb) {
    let w = world(db).await;
    let p = w.reg.create_project("p").await.unwrap().id;
    let from = SnapshotId::new(Provider::Local);
    let lifecycle = SandboxLifecycle {
        auto_resume: true,
        idle_stop_seconds: Some(600),
        snapshot_id: Some(from),
    };
    let expires = w.clock.now() + TimeDelta::hours(1);
    let inserted = w
        .reg
        .insert_sandbox_with(new_sandbox(p), Some(expires), lifecycle)
        .await
        .unwrap();
    assert_eq!(inserted.lifecycle(), lifecycle);
    assert_eq!(inserted.expires_at, Some(expires));
    assert_eq!(inserted.last_activity_at, inserted.created_at);

    let read = w.reg.sandbox(p, inserted.id).await.unwrap().unwrap();
    assert_eq!(read, inserted);
    let wire = read.to_sandbox();
    assert!(wire.auto_resume);
    assert_eq!(wire.idle_stop_seconds, Some(600));
    assert_eq!(wire.snapshot_id, Some(from));
    let listed = w.reg.list_sandboxes(p, 10, None).await.unwrap();
    assert_eq!(listed.items, std::slice::from_ref(&inserted));
    let item = &listed.into_page().items[0];
    assert!(item.auto_resume);
    assert_eq!(item.idle_stop_seconds, Some(600));
    assert_eq!(item.snapshot_id, Some(from));

    // The older entry points store none of it.
    let plain = w.reg.insert_sandbox(new_sandbox(p)).await.unwrap();
    assert_eq!(plain.lifecycle(), SandboxLifecycle::default());
    let plain = w.reg.sandbox(p, plain.id).await.unwrap().unwrap();
    assert_eq!(plain.lifecycle(), SandboxLifecycle::default());
    assert_eq!(plain.last_activity_at, plain.created_at);

    // An idle stop whose microseconds do not fit a timestamp is refused before any write.
    let huge = SandboxLifecycle {
        idle_stop_seconds: Some(u64::MAX),
        ..SandboxLifecycle::default()
    };
    let refused = w.reg.insert_sandbox_with(new_sandbox(p), None, huge).await;
    assert!(
        matches!(refused, Err(RegistryError::InvalidInput { .. })),
        "{refused:?}"
    );
    assert_eq!(
        w.reg.list_sandboxes(p, 10, None).await.unwrap().items.len(),
        2
    );
}

pub(crate) async fn touch_activity_never_moves_backwards(db: &TestDb) {
    let w = world(db).await;
    let p = w.reg.create_project("p").await.unwrap().id;
    let q = w.reg.create_project("q").await.unwrap().id;
    let id = running(&w, p, Some(60)).await;
    let t0 = w
        .reg
        .sandbox(p, id)
        .await
        .unwrap()
        .unwrap()
        .last_activity_at;
    let activity = |w: &World| {
        let reg = w.reg.clone();
        async move { reg.sandbox(p, id).await.unwrap().unwrap().last_activity_at }
    };

    w.reg
        .touch_activity(p, id, t0 + TimeDelta::seconds(10))
        .await
        .unwrap();
    assert_eq!(activity(&w).await, t0 + TimeDelta::seconds(10));
    // An older report (a slow request, another replica's clock) changes nothing.
    w.reg
        .touch_activity(p, id, t0 + TimeDelta::seconds(5))
        .await
        .unwrap();
    assert_eq!(activity(&w).await, t0 + TimeDelta::seconds(10));
    // Nor does another project's caller naming the same id.
    w.reg
        .touch_activity(q, id, t0 + TimeDelta::seconds(50))
        .await
        .unwrap();
    assert_eq!(activity(&w).await, t0 + TimeDelta::seconds(10));
    w.reg
        .touch_activity(p, id, t0 + TimeDelta::seconds(20))
        .await
        .unwrap();
    assert_eq!(activity(&w).await, t0 + TimeDelta::seconds(20));

    // Activity is not an event, and does not touch `updatedAt`.
    let before = w.reg.sandbox(p, id).await.unwrap().unwrap();
    assert_eq!(kinds(&events(&w, p).await), [EventType::SandboxCreated]);
    assert!(before.updated_at < before.last_activity_at);

    // A tombstone keeps its last activity; an unknown sandbox is not an error.
    w.reg.tombstone(p, id).await.unwrap();
    w.reg
        .touch_activity(p, id, t0 + TimeDelta::seconds(30))
        .await
        .unwrap();
    assert_eq!(activity(&w).await, t0 + TimeDelta::seconds(20));
    w.reg
        .touch_activity(p, SandboxId::new(Provider::Local), t0)
        .await
        .unwrap();
}

pub(crate) async fn idle_sandboxes_picks_exactly_the_idle_running_ones(db: &TestDb) {
    let w = world(db).await;
    let p = w.reg.create_project("p").await.unwrap().id;
    let q = w.reg.create_project("q").await.unwrap().id;
    let t0 = w.clock.now();
    let idle = running(&w, p, Some(60)).await;
    let touched = running(&w, p, Some(60)).await;
    w.reg
        .touch_activity(p, touched, t0 + TimeDelta::seconds(30))
        .await
        .unwrap();
    let never = running(&w, p, None).await;
    let stopped = running(&w, p, Some(60)).await;
    w.reg
        .record_status_for(
            p,
            stopped,
            SandboxStatus::Stopped,
            t0,
            event_reason::REQUESTED,
        )
        .await
        .unwrap();
    let deleted = running(&w, p, Some(60)).await;
    w.reg.tombstone(p, deleted).await.unwrap();
    let pending = w
        .reg
        .insert_sandbox_with(
            new_sandbox(p),
            None,
            SandboxLifecycle {
                idle_stop_seconds: Some(60),
                ..SandboxLifecycle::default()
            },
        )
        .await
        .unwrap()
        .id;
    // Another project's, with a longer idle stop: the sweep is across projects, oldest
    // activity first.
    w.clock.advance(Duration::from_secs(1));
    let theirs = running(&w, q, Some(120)).await;
    w.reg
        .touch_activity(q, theirs, t0 - TimeDelta::seconds(100))
        .await
        .unwrap();
    let theirs_at = w
        .reg
        .sandbox(q, theirs)
        .await
        .unwrap()
        .unwrap()
        .last_activity_at;
    assert_eq!(theirs_at, t0 + TimeDelta::seconds(1), "never moves back");

    let ids = |found: Vec<corral_registry::SandboxRecord>| -> Vec<SandboxId> {
        found.into_iter().map(|r| r.id).collect()
    };
    // Just before a minute has passed: nothing.
    let found = w
        .reg
        .idle_sandboxes(t0 + TimeDelta::seconds(59), 100)
        .await
        .unwrap();
    assert!(found.is_empty(), "{found:?}");
    // At exactly a minute the untouched one is due (`<=`), the touched one is not.
    let found = w
        .reg
        .idle_sandboxes(t0 + TimeDelta::seconds(60), 100)
        .await
        .unwrap();
    assert_eq!(ids(found), [idle]);
    let found = w
        .reg
        .idle_sandboxes(t0 + TimeDelta::seconds(90), 100)
        .await
        .unwrap();
    assert_eq!(ids(found), [idle, touched]);
    let found = w
        .reg
        .idle_sandboxes(t0 + TimeDelta::seconds(121), 100)
        .await
        .unwrap();
    assert_eq!(ids(found), [idle, theirs, touched]);
    let found = w
        .reg
        .idle_sandboxes(t0 + TimeDelta::days(365), 2)
        .await
        .unwrap();
    assert_eq!(ids(found), [idle, theirs], "bounded by the limit");
    for other in [never, stopped, deleted, pending] {
        assert!(
            !ids(w
                .reg
                .idle_sandboxes(t0 + TimeDelta::days(365), 100)
                .await
                .unwrap())
            .contains(&other)
        );
    }
    // Resuming is activity: a stopped sandbox that runs again is idle from its resume on.
    let resumed_at = t0 + TimeDelta::seconds(200);
    w.reg
        .record_status_for(
            p,
            stopped,
            SandboxStatus::Running,
            resumed_at,
            event_reason::AUTO_RESUME,
        )
        .await
        .unwrap();
    let due = |at| {
        let reg = w.reg.clone();
        async move { ids(reg.idle_sandboxes(at, 100).await.unwrap()) }
    };
    assert!(
        !due(resumed_at + TimeDelta::seconds(59))
            .await
            .contains(&stopped)
    );
    assert!(
        due(resumed_at + TimeDelta::seconds(60))
            .await
            .contains(&stopped)
    );
}

pub(crate) async fn stops_and_resumes_are_reported_with_their_reason_beside_the_status_change(
    db: &TestDb,
) {
    let w = world(db).await;
    let p = w.reg.create_project("p").await.unwrap().id;
    let id = w.reg.insert_sandbox(new_sandbox(p)).await.unwrap().id;
    w.reg
        .complete_create(p, id, "n-1", SandboxStatus::Creating)
        .await
        .unwrap();
    let t0 = w.clock.now();
    let at = |s: i64| t0 + TimeDelta::seconds(s);
    let steps = [
        // From creating: running, but not a resume.
        (SandboxStatus::Running, event_reason::OBSERVED, 1),
        (SandboxStatus::Stopping, event_reason::REQUESTED, 2),
        (SandboxStatus::Stopped, event_reason::REQUESTED, 3),
        (SandboxStatus::Starting, event_reason::AUTO_RESUME, 4),
        (SandboxStatus::Running, event_reason::AUTO_RESUME, 5),
        (SandboxStatus::Stopped, event_reason::IDLE, 6),
        // Seen again: no change, nothing reported.
        (SandboxStatus::Stopped, event_reason::OBSERVED, 7),
        (SandboxStatus::Running, event_reason::OBSERVED, 8),
    ];
    for (status, reason, s) in steps {
        let record = w
            .reg
            .record_status_for(p, id, status, at(s), reason)
            .await
            .unwrap();
        assert_eq!(record.status, status);
        assert_eq!(record.status_observed_at, at(s));
    }
    let record = w.reg.sandbox(p, id).await.unwrap().unwrap();
    assert_eq!(
        record.last_activity_at,
        at(8),
        "the last resume is activity"
    );
    // `record_status` is the same with reason `observed`; an older observation is ignored.
    w.reg
        .record_status(p, id, SandboxStatus::Stopped, at(7))
        .await
        .unwrap();

    let all = events(&w, p).await;
    use EventType::{SandboxCreated as Created, SandboxStatusChanged as Changed};
    use EventType::{SandboxResumed as Resumed, SandboxStopped as Stopped};
    assert_eq!(
        kinds(&all),
        [
            Created, Changed, Changed, Changed, Stopped, Changed, Changed, Resumed, Changed,
            Stopped, Changed, Resumed,
        ]
    );
    assert_eq!(
        all.iter().map(|e| e.id).collect::<Vec<_>>(),
        (1..=12).collect::<Vec<u64>>()
    );
    // Each stop or resume follows its status change directly (appended in the same
    // transaction), with the same moment, statuses and reason.
    for (i, e) in all.iter().enumerate() {
        if matches!(e.kind, Stopped | Resumed) {
            let change = &all[i - 1];
            assert_eq!(change.kind, Changed);
            assert_eq!(e.occurred_at, change.occurred_at);
            assert_eq!(e.status, change.status);
            assert_eq!(e.previous_status, change.previous_status);
            assert_eq!(e.reason, change.reason);
            assert_eq!(e.sandbox_id, Some(id));
            assert_eq!(e.snapshot_id, None);
        }
    }
    let reported = |kind| {
        all.iter()
            .filter(|e| e.kind == kind)
            .map(|e| (e.previous_status.unwrap(), e.reason.clone().unwrap()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        reported(Stopped),
        [
            (SandboxStatus::Stopping, "requested".to_owned()),
            (SandboxStatus::Running, "idle".to_owned()),
        ]
    );
    assert_eq!(
        reported(Resumed),
        [
            (SandboxStatus::Starting, "auto_resume".to_owned()),
            (SandboxStatus::Stopped, "observed".to_owned()),
        ]
    );

    // Usage still reads one mark per change: stops and resumes are not counted twice.
    let usage = UsageLog::new(w.reg.database().clone());
    let marks: Vec<_> = usage
        .lifecycle(p, id)
        .await
        .unwrap()
        .marks
        .into_iter()
        .map(|m| (m.status, m.at))
        .collect();
    assert_eq!(
        marks,
        [
            (SandboxStatus::Creating, t0),
            (SandboxStatus::Running, at(1)),
            (SandboxStatus::Stopping, at(2)),
            (SandboxStatus::Stopped, at(3)),
            (SandboxStatus::Starting, at(4)),
            (SandboxStatus::Running, at(5)),
            (SandboxStatus::Stopped, at(6)),
            (SandboxStatus::Running, at(8)),
        ]
    );
}

async fn snapshot_of(w: &World, project: ProjectId, sandbox: SandboxId) -> SnapshotRecord {
    w.reg
        .insert_snapshot(NewSnapshot {
            id: SnapshotId::new(sandbox.provider()),
            project_id: project,
            sandbox_id: sandbox,
            name: Some("before".to_owned()),
        })
        .await
        .unwrap()
}

pub(crate) async fn a_snapshot_is_created_once_ready_and_scoped_to_its_project(db: &TestDb) {
    let w = world(db).await;
    let p = w.reg.create_project("p").await.unwrap().id;
    let q = w.reg.create_project("q").await.unwrap().id;
    let (hook, _) = w
        .reg
        .create_webhook(p, "https://a.example/h", &[EventType::SnapshotCreated])
        .await
        .unwrap();
    let sandbox = running(&w, p, None).await;
    let theirs = running(&w, q, None).await;

    let snap = snapshot_of(&w, p, sandbox).await;
    assert_eq!(snap.status, SnapshotStatus::Creating);
    assert_eq!(snap.project_id, p);
    assert_eq!(snap.sandbox_id, sandbox);
    assert_eq!((snap.native_id.as_deref(), snap.size_bytes), (None, None));
    assert_eq!(snap.created_at, snap.updated_at);
    assert_eq!(
        w.reg.snapshot(p, snap.id).await.unwrap(),
        Some(snap.clone())
    );
    // Another project sees nothing, and cannot change it.
    assert_eq!(w.reg.snapshot(q, snap.id).await.unwrap(), None);
    let other = w
        .reg
        .complete_snapshot(q, snap.id, "x", SnapshotStatus::Ready, None)
        .await;
    assert!(
        matches!(other, Err(RegistryError::NotFound { .. })),
        "{other:?}"
    );
    // A snapshot names a sandbox of its own project, and its id once.
    let foreign = w
        .reg
        .insert_snapshot(NewSnapshot {
            id: SnapshotId::new(Provider::Local),
            project_id: p,
            sandbox_id: theirs,
            name: None,
        })
        .await;
    assert!(
        matches!(foreign, Err(RegistryError::NotFound { .. })),
        "{foreign:?}"
    );
    let twice = w
        .reg
        .insert_snapshot(NewSnapshot {
            id: snap.id,
            project_id: p,
            sandbox_id: sandbox,
            name: None,
        })
        .await;
    assert!(
        matches!(twice, Err(RegistryError::Conflict { .. })),
        "{twice:?}"
    );

    // The provider's answer while it is still being made: not yet an event.
    w.clock.advance(Duration::from_secs(1));
    let making = w
        .reg
        .complete_snapshot(p, snap.id, "native-1", SnapshotStatus::Creating, None)
        .await
        .unwrap();
    assert_eq!(making.status, SnapshotStatus::Creating);
    assert_eq!(making.native_id.as_deref(), Some("native-1"));
    assert!(events(&w, p).await.iter().all(|e| e.snapshot_id.is_none()));

    w.clock.advance(Duration::from_secs(1));
    let ready = w
        .reg
        .complete_snapshot(p, snap.id, "native-1", SnapshotStatus::Ready, Some(4096))
        .await
        .unwrap();
    assert_eq!(ready.status, SnapshotStatus::Ready);
    assert_eq!(ready.size_bytes, Some(4096));
    assert_eq!(ready.updated_at, w.clock.now());
    // Confirmed again (a follower after a restart): no second event, the size is kept, and a
    // ready snapshot does not go back.
    let again = w
        .reg
        .complete_snapshot(p, snap.id, "native-1", SnapshotStatus::Creating, None)
        .await
        .unwrap();
    assert_eq!(again.status, SnapshotStatus::Ready);
    assert_eq!(again.size_bytes, Some(4096));
    w.reg
        .complete_snapshot(p, snap.id, "native-1", SnapshotStatus::Ready, None)
        .await
        .unwrap();

    let created: Vec<_> = events(&w, p)
        .await
        .into_iter()
        .filter(|e| e.kind == EventType::SnapshotCreated)
        .collect();
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0].snapshot_id, Some(snap.id));
    assert_eq!(created[0].sandbox_id, Some(sandbox));
    assert_eq!(created[0].occurred_at, ready.updated_at);
    // The endpoint that wants `snapshot.created` got exactly that event, queued with it.
    let deliveries = w.reg.list_deliveries(p, &hook.id, 10).await.unwrap();
    assert_eq!(
        deliveries.iter().map(|d| d.event_id).collect::<Vec<_>>(),
        [created[0].id]
    );
    assert!(events(&w, q).await.iter().all(|e| e.snapshot_id.is_none()));

    let wire = w
        .reg
        .snapshot(p, snap.id)
        .await
        .unwrap()
        .unwrap()
        .to_snapshot();
    assert_eq!(wire.id, snap.id);
    assert_eq!(wire.provider, Provider::Local);
    assert_eq!(wire.sandbox_id, sandbox);
    assert_eq!(wire.name.as_deref(), Some("before"));
    assert_eq!(wire.status, SnapshotStatus::Ready);
    assert_eq!(wire.size_bytes, Some(4096));
    assert_eq!(wire.deleted_at, None);

    // `deleted` is reached by tombstoning only; an unknown snapshot is not found.
    let deleted = w
        .reg
        .complete_snapshot(p, snap.id, "native-1", SnapshotStatus::Deleted, None)
        .await;
    assert!(
        matches!(deleted, Err(RegistryError::InvalidInput { .. })),
        "{deleted:?}"
    );
    let unknown = w
        .reg
        .complete_snapshot(
            p,
            SnapshotId::new(Provider::Local),
            "n",
            SnapshotStatus::Ready,
            None,
        )
        .await;
    assert!(
        matches!(unknown, Err(RegistryError::NotFound { .. })),
        "{unknown:?}"
    );
}

pub(crate) async fn a_snapshot_fails_with_its_reason_unless_it_is_ready(db: &TestDb) {
    let w = world(db).await;
    let p = w.reg.create_project("p").await.unwrap().id;
    let q = w.reg.create_project("q").await.unwrap().id;
    let sandbox = running(&w, p, None).await;

    let doomed = snapshot_of(&w, p, sandbox).await;
    w.clock.advance(Duration::from_secs(1));
    let failed = w
        .reg
        .fail_snapshot(p, doomed.id, "provider refused: disk busy")
        .await
        .unwrap();
    assert_eq!(failed.status, SnapshotStatus::Failed);
    assert_eq!(
        failed.failure.as_deref(),
        Some("provider refused: disk busy")
    );
    assert_eq!(failed.updated_at, w.clock.now());
    assert_eq!(
        failed.to_snapshot().failure.as_deref(),
        Some("provider refused: disk busy")
    );
    // A reason is bounded.
    let long = w
        .reg
        .fail_snapshot(p, doomed.id, &"x".repeat(5000))
        .await
        .unwrap();
    assert_eq!(
        long.failure.map(|f| f.chars().count()),
        Some(corral_registry::MAX_FAILURE_REASON)
    );
    // Failing is not an event; another project cannot fail it.
    assert!(events(&w, p).await.iter().all(|e| e.snapshot_id.is_none()));
    let other = w.reg.fail_snapshot(q, doomed.id, "no").await;
    assert!(
        matches!(other, Err(RegistryError::NotFound { .. })),
        "{other:?}"
    );

    // A ready snapshot does not fail afterwards.
    let kept = snapshot_of(&w, p, sandbox).await;
    w.reg
        .complete_snapshot(p, kept.id, "native-2", SnapshotStatus::Ready, None)
        .await
        .unwrap();
    let still = w.reg.fail_snapshot(p, kept.id, "late").await.unwrap();
    assert_eq!(still.status, SnapshotStatus::Ready);
    assert_eq!(still.failure, None);
    let unknown = w
        .reg
        .fail_snapshot(p, SnapshotId::new(Provider::Local), "x")
        .await;
    assert!(
        matches!(unknown, Err(RegistryError::NotFound { .. })),
        "{unknown:?}"
    );
}

pub(crate) async fn snapshots_list_newest_first_by_cursor_with_tombstones(db: &TestDb) {
    let w = world(db).await;
    let p = w.reg.create_project("p").await.unwrap().id;
    let q = w.reg.create_project("q").await.unwrap().id;
    let sandbox = running(&w, p, None).await;
    let theirs = running(&w, q, None).await;
    let mut made = Vec::new();
    for i in 0..11 {
        // Pairs share a createdAt, so the id tiebreak is exercised.
        if i % 2 == 0 {
            w.clock.advance(Duration::from_millis(3));
        }
        let snap = snapshot_of(&w, p, sandbox).await;
        snapshot_of(&w, q, theirs).await;
        made.push(if i % 3 == 0 {
            w.reg.tombstone_snapshot(p, snap.id).await.unwrap()
        } else {
            snap
        });
    }
    let mut expected = made.clone();
    expected.sort_by_key(|s| std::cmp::Reverse((s.created_at, s.id.to_string())));

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = w.reg.list_snapshots(p, 4, cursor.as_deref()).await.unwrap();
        assert!(page.items.len() <= 4);
        if let Some(c) = &page.next_cursor {
            // `<createdAt micros>_<snapshot id>`, as `snapshot_cursor_pattern` says.
            let (micros, id) = c.split_once('_').unwrap();
            assert!(micros.bytes().all(|b| b.is_ascii_digit()), "{c}");
            assert!(id.parse::<SnapshotId>().is_ok(), "{c}");
        }
        seen.extend(page.items);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(
        seen, expected,
        "every snapshot once, newest first, tombstones included"
    );
    assert_eq!(
        seen.iter().filter(|s| s.deleted_at.is_some()).count(),
        4,
        "tombstones are listed"
    );
    let wire = w
        .reg
        .list_snapshots(p, 200, None)
        .await
        .unwrap()
        .into_page();
    assert_eq!(wire.items.len(), 11);
    assert_eq!(wire.next_cursor, None);
    assert_eq!(wire.items[0].id, expected[0].id);
    assert!(
        w.reg
            .list_snapshots(q, 200, None)
            .await
            .unwrap()
            .items
            .iter()
            .all(|s| s.project_id == q && s.sandbox_id == theirs)
    );

    // The sandbox listing's cursor is not a snapshot cursor; nor is anything else.
    let sandbox_cursor = format!("{}_{}", 1_780_000_000_000_000_i64, sandbox);
    for bad in [sandbox_cursor.as_str(), "", "abc", "12_snp_local_x", "_snp"] {
        let r = w.reg.list_snapshots(p, 10, Some(bad)).await;
        assert!(
            matches!(r, Err(RegistryError::InvalidCursor)),
            "{bad}: {r:?}"
        );
    }
    for limit in [0, 201] {
        let r = w.reg.list_snapshots(p, limit, None).await;
        assert!(
            matches!(r, Err(RegistryError::InvalidInput { .. })),
            "{r:?}"
        );
    }
}

pub(crate) async fn tombstoning_a_snapshot_is_idempotent_with_one_event(db: &TestDb) {
    let w = world(db).await;
    let p = w.reg.create_project("p").await.unwrap().id;
    let q = w.reg.create_project("q").await.unwrap().id;
    let sandbox = running(&w, p, None).await;
    let snap = snapshot_of(&w, p, sandbox).await;
    w.reg
        .complete_snapshot(p, snap.id, "native-1", SnapshotStatus::Ready, Some(1))
        .await
        .unwrap();

    let other = w.reg.tombstone_snapshot(q, snap.id).await;
    assert!(
        matches!(other, Err(RegistryError::NotFound { .. })),
        "{other:?}"
    );
    w.clock.advance(Duration::from_secs(1));
    let gone = w.reg.tombstone_snapshot(p, snap.id).await.unwrap();
    assert_eq!(gone.status, SnapshotStatus::Deleted);
    assert_eq!(gone.deleted_at, Some(w.clock.now()));
    assert_eq!(gone.to_snapshot().deleted_at, Some(w.clock.now()));
    w.clock.advance(Duration::from_secs(1));
    assert_eq!(w.reg.tombstone_snapshot(p, snap.id).await.unwrap(), gone);
    // A tombstone ignores later answers.
    let late = w
        .reg
        .complete_snapshot(p, snap.id, "native-2", SnapshotStatus::Ready, Some(2))
        .await
        .unwrap();
    assert_eq!(late, gone);
    assert_eq!(w.reg.fail_snapshot(p, snap.id, "late").await.unwrap(), gone);
    assert_eq!(
        w.reg.snapshot(p, snap.id).await.unwrap(),
        Some(gone.clone())
    );

    let snapshot_events: Vec<_> = events(&w, p)
        .await
        .into_iter()
        .filter(|e| e.snapshot_id.is_some())
        .collect();
    assert_eq!(
        kinds(&snapshot_events),
        [EventType::SnapshotCreated, EventType::SnapshotDeleted]
    );
    let deleted = &snapshot_events[1];
    assert_eq!(deleted.snapshot_id, Some(snap.id));
    assert_eq!(deleted.sandbox_id, Some(sandbox));
    assert_eq!(Some(deleted.occurred_at), gone.deleted_at);
    let unknown = w
        .reg
        .tombstone_snapshot(p, SnapshotId::new(Provider::Local))
        .await;
    assert!(
        matches!(unknown, Err(RegistryError::NotFound { .. })),
        "{unknown:?}"
    );
}

pub(crate) async fn pending_snapshots_are_the_creating_ones_oldest_first_across_projects(
    db: &TestDb,
) {
    let w = world(db).await;
    let p = w.reg.create_project("p").await.unwrap().id;
    let q = w.reg.create_project("q").await.unwrap().id;
    let mine = running(&w, p, None).await;
    let theirs = running(&w, q, None).await;
    let first = snapshot_of(&w, p, mine).await;
    w.clock.advance(Duration::from_secs(1));
    let second = snapshot_of(&w, q, theirs).await;
    w.clock.advance(Duration::from_secs(1));
    let ready = snapshot_of(&w, p, mine).await;
    w.reg
        .complete_snapshot(p, ready.id, "n", SnapshotStatus::Ready, None)
        .await
        .unwrap();
    let failed = snapshot_of(&w, p, mine).await;
    w.reg.fail_snapshot(p, failed.id, "no").await.unwrap();
    let deleted = snapshot_of(&w, p, mine).await;
    w.reg.tombstone_snapshot(p, deleted.id).await.unwrap();
    w.clock.advance(Duration::from_secs(1));
    // Answered but still being made: still pending.
    let third = snapshot_of(&w, q, theirs).await;
    w.reg
        .complete_snapshot(q, third.id, "n3", SnapshotStatus::Creating, None)
        .await
        .unwrap();

    let ids = |found: Vec<SnapshotRecord>| found.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(
        ids(w.reg.pending_snapshots(100).await.unwrap()),
        [first.id, second.id, third.id]
    );
    assert_eq!(
        ids(w.reg.pending_snapshots(2).await.unwrap()),
        [first.id, second.id]
    );
}
