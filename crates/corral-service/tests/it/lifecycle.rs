//! The lifecycle use cases over the counting double (the host-shell double underneath stops,
//! resumes, snapshots as a directory copy and restores): stop and resume are idempotent and
//! move the record with their events, a stopped sandbox refuses work unless `autoResume`,
//! the idle sweep stops exactly the idle sandboxes, restores check their snapshot before any
//! provider call, keyed snapshots and forks never act twice.

use std::time::Duration;

use corral_domain::{
    CreateSandboxRequest, CreateSnapshotInput, ForkInput, ForkResult, RunCommandInput, Sandbox,
    SandboxStatus, Snapshot, SnapshotStatus,
};
use corral_errors::ErrorCode;
use corral_service::InlineAccess;

use crate::support::{Setup, World};

fn local(extra: serde_json::Value) -> CreateSandboxRequest {
    let mut body = serde_json::json!({ "provider": "local" });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    serde_json::from_value(body).unwrap()
}

async fn create(w: &World, request: CreateSandboxRequest) -> Sandbox {
    let caller = w.caller().await;
    let made = w
        .service
        .create(&caller, InlineAccess::default(), None, request)
        .await
        .unwrap();
    serde_json::from_str(&made.body).unwrap()
}

async fn exec(w: &World, id: &str, command: &str) -> Result<String, ErrorCode> {
    let caller = w.caller().await;
    let input: RunCommandInput =
        serde_json::from_value(serde_json::json!({ "command": command })).unwrap();
    w.service
        .exec(&caller, InlineAccess::default(), id, input)
        .await
        .map(|r| r.stdout)
        .map_err(|e| e.code())
}

async fn status(w: &World, id: &str) -> SandboxStatus {
    let caller = w.caller().await;
    let page = w.service.list(&caller, None, Some(200)).await.unwrap();
    page.items
        .into_iter()
        .find(|s| s.id.to_string() == id)
        .unwrap()
        .status
}

async fn event_types(w: &World) -> Vec<(String, Option<String>)> {
    let caller = w.caller().await;
    let page = w.service.events(&caller, 0, Some(500), None).await.unwrap();
    page.items
        .into_iter()
        .map(|e| (e.kind.as_str().to_owned(), e.reason))
        .collect()
}

#[tokio::test]
async fn stop_and_resume_are_idempotent_keep_files_and_record_their_events() {
    let w = World::new().await;
    let sbx = create(&w, local(serde_json::json!({}))).await;
    let id = sbx.id.to_string();
    exec(&w, &id, "echo kept > f").await.unwrap();
    let caller = w.caller().await;
    let stopped = w
        .service
        .stop(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(stopped.status, SandboxStatus::Stopped);
    assert_eq!(status(&w, &id).await, SandboxStatus::Stopped);
    let calls = w.double.count("stop");
    let again = w
        .service
        .stop(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(again.status, SandboxStatus::Stopped);
    assert_eq!(
        w.double.count("stop"),
        calls,
        "a stopped sandbox's stop calls nobody"
    );
    assert_eq!(
        exec(&w, &id, "cat f").await,
        Err(ErrorCode::SandboxStopped),
        "work on a stopped sandbox without autoResume is refused"
    );
    assert_eq!(w.double.count("exec"), 1, "the refusal called no provider");
    let resumed = w
        .service
        .resume(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(resumed.status, SandboxStatus::Running);
    assert_eq!(exec(&w, &id, "cat f").await.unwrap(), "kept\n");
    let events = event_types(&w).await;
    assert!(
        events.contains(&("sandbox.stopped".into(), Some("requested".into()))),
        "{events:?}"
    );
    assert!(
        events.contains(&("sandbox.resumed".into(), Some("requested".into()))),
        "{events:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|(t, _)| t == "sandbox.stopped")
            .count(),
        1,
        "the second stop changed nothing: {events:?}"
    );
}

#[tokio::test]
async fn an_auto_resume_sandbox_resumes_on_use() {
    let w = World::new().await;
    let sbx = create(&w, local(serde_json::json!({ "autoResume": true }))).await;
    let id = sbx.id.to_string();
    assert!(sbx.auto_resume);
    exec(&w, &id, "echo kept > f").await.unwrap();
    let caller = w.caller().await;
    w.service
        .stop(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(exec(&w, &id, "cat f").await.unwrap(), "kept\n");
    assert_eq!(status(&w, &id).await, SandboxStatus::Running);
    let events = event_types(&w).await;
    assert!(
        events.contains(&("sandbox.resumed".into(), Some("auto_resume".into()))),
        "{events:?}"
    );
}

#[tokio::test]
async fn the_idle_sweep_stops_exactly_the_sandboxes_idle_past_their_limit() {
    let w = World::with(Setup {
        manual_clock: true,
        ..Setup::default()
    })
    .await;
    let idle = create(&w, local(serde_json::json!({ "idleStopSeconds": 60 }))).await;
    let busy = create(&w, local(serde_json::json!({ "idleStopSeconds": 60 }))).await;
    let forever = create(&w, local(serde_json::json!({}))).await;
    w.clock.advance(Duration::from_secs(45));
    exec(&w, &busy.id.to_string(), "true").await.unwrap();
    assert_eq!(
        w.service.idle_stop_once().await,
        0,
        "nobody is idle a minute yet"
    );
    w.clock.advance(Duration::from_secs(20));
    assert_eq!(w.service.idle_stop_once().await, 1);
    assert_eq!(
        status(&w, &idle.id.to_string()).await,
        SandboxStatus::Stopped
    );
    assert_eq!(
        status(&w, &busy.id.to_string()).await,
        SandboxStatus::Running
    );
    assert_eq!(
        status(&w, &forever.id.to_string()).await,
        SandboxStatus::Running
    );
    let events = event_types(&w).await;
    assert!(
        events.contains(&("sandbox.stopped".into(), Some("idle".into()))),
        "{events:?}"
    );
    w.clock.advance(Duration::from_secs(60));
    assert_eq!(
        w.service.idle_stop_once().await,
        1,
        "the busy one, a minute after its call"
    );
    assert_eq!(
        w.service.idle_stop_once().await,
        0,
        "a stopped sandbox is not stopped again"
    );
}

#[tokio::test]
async fn a_snapshot_restores_into_an_independent_sandbox_and_keyed_creates_replay() {
    let w = World::new().await;
    let sbx = create(&w, local(serde_json::json!({}))).await;
    let id = sbx.id.to_string();
    exec(&w, &id, "echo one > f").await.unwrap();
    let caller = w.caller().await;
    let input = CreateSnapshotInput {
        name: Some("first".into()),
    };
    let made = w
        .service
        .create_snapshot(
            &caller,
            InlineAccess::default(),
            &id,
            Some("snap-1"),
            input.clone(),
        )
        .await
        .unwrap();
    assert_eq!(made.status, 201);
    let snap: Snapshot = serde_json::from_str(&made.body).unwrap();
    assert_eq!(snap.status, SnapshotStatus::Ready);
    assert_eq!(snap.sandbox_id, sbx.id);
    let replay = w
        .service
        .create_snapshot(&caller, InlineAccess::default(), &id, Some("snap-1"), input)
        .await
        .unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.body, made.body);
    assert_eq!(
        w.double.count("snapshot"),
        1,
        "a replay takes no second snapshot"
    );
    exec(&w, &id, "echo two > f").await.unwrap();

    let copy = create(
        &w,
        local(serde_json::json!({ "snapshot": snap.id.to_string() })),
    )
    .await;
    assert_eq!(copy.snapshot_id, Some(snap.id));
    assert_eq!(
        exec(&w, &copy.id.to_string(), "cat f").await.unwrap(),
        "one\n"
    );
    assert_eq!(exec(&w, &id, "cat f").await.unwrap(), "two\n");

    // A deleted snapshot is a tombstone and cannot be restored; no provider call is made.
    let tomb = w
        .service
        .delete_snapshot(&caller, InlineAccess::default(), &snap.id.to_string())
        .await
        .unwrap();
    assert_eq!(tomb.status, SnapshotStatus::Deleted);
    let restores = w.double.count("restore");
    let refused = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            None,
            local(serde_json::json!({ "snapshot": snap.id.to_string() })),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::ProviderInvalidRequest);
    assert_eq!(w.double.count("restore"), restores);
    let page = w.service.list_snapshots(&caller, None, None).await.unwrap();
    assert_eq!(page.items.len(), 1, "tombstones stay listed");
}

#[tokio::test]
async fn a_keyed_fork_makes_its_copies_once() {
    let w = World::new().await;
    let sbx = create(&w, local(serde_json::json!({ "autoResume": true }))).await;
    let id = sbx.id.to_string();
    exec(&w, &id, "echo base > f").await.unwrap();
    let caller = w.caller().await;
    let fork = |key| {
        let w = &w;
        let id = id.clone();
        async move {
            w.service
                .fork(
                    &caller,
                    InlineAccess::default(),
                    &id,
                    Some(key),
                    ForkInput { count: Some(3) },
                )
                .await
                .unwrap()
        }
    };
    let first = fork("fork-1").await;
    assert_eq!(first.status, 201);
    let result: ForkResult = serde_json::from_str(&first.body).unwrap();
    assert_eq!(result.sandboxes.len(), 3);
    for copy in &result.sandboxes {
        assert!(copy.auto_resume, "a copy keeps autoResume");
        assert_eq!(copy.snapshot_id, Some(result.snapshot_id));
        assert_eq!(
            exec(&w, &copy.id.to_string(), "cat f").await.unwrap(),
            "base\n"
        );
    }
    let again = fork("fork-1").await;
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    assert_eq!(w.double.count("restore"), 3, "the retry made no copy");
    let listed = w.service.list(&caller, None, Some(200)).await.unwrap();
    assert_eq!(listed.items.len(), 4);
}

#[tokio::test]
async fn bad_fork_counts_unknown_snapshots_and_other_providers_snapshots_are_refused() {
    let w = World::new().await;
    let sbx = create(&w, local(serde_json::json!({}))).await;
    let caller = w.caller().await;
    let bad = w
        .service
        .fork(
            &caller,
            InlineAccess::default(),
            &sbx.id.to_string(),
            None,
            ForkInput { count: Some(11) },
        )
        .await
        .unwrap_err();
    assert_eq!(bad.code(), ErrorCode::InvalidRequest);
    let missing = w
        .service
        .get_snapshot(&caller, "snp_local_01jdq3n4k5m6p7q8r9s0t1v2w3")
        .await
        .unwrap_err();
    assert_eq!(missing.code(), ErrorCode::SnapshotNotFound);
    let elsewhere = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            None,
            local(serde_json::json!({ "snapshot": "snp_e2b_01jdq3n4k5m6p7q8r9s0t1v2w3" })),
        )
        .await
        .unwrap_err();
    assert_eq!(elsewhere.code(), ErrorCode::ProviderInvalidRequest);
    assert_eq!(w.double.count("restore"), 0);
}

#[tokio::test]
async fn operations_the_provider_lacks_are_capability_unsupported_before_any_call() {
    let w = World::with(Setup {
        lifecycle: false,
        ..Setup::default()
    })
    .await;
    let sbx = create(&w, local(serde_json::json!({}))).await;
    let id = sbx.id.to_string();
    let caller = w.caller().await;
    let calls = w.double.total();
    let codes = [
        w.service
            .stop(&caller, InlineAccess::default(), &id)
            .await
            .map(|_| ())
            .unwrap_err()
            .code(),
        w.service
            .resume(&caller, InlineAccess::default(), &id)
            .await
            .map(|_| ())
            .unwrap_err()
            .code(),
        w.service
            .create_snapshot(
                &caller,
                InlineAccess::default(),
                &id,
                None,
                Default::default(),
            )
            .await
            .map(|_| ())
            .unwrap_err()
            .code(),
        w.service
            .fork(
                &caller,
                InlineAccess::default(),
                &id,
                None,
                Default::default(),
            )
            .await
            .map(|_| ())
            .unwrap_err()
            .code(),
        w.service
            .create(
                &caller,
                InlineAccess::default(),
                None,
                local(serde_json::json!({ "idleStopSeconds": 600 })),
            )
            .await
            .map(|_| ())
            .unwrap_err()
            .code(),
    ];
    assert_eq!(codes, [ErrorCode::CapabilityUnsupported; 5]);
    assert_eq!(w.double.total(), calls, "no provider call was made");
}

#[tokio::test]
async fn a_keyed_restore_replays_after_its_snapshot_is_deleted() {
    let w = World::new().await;
    let sbx = create(&w, local(serde_json::json!({}))).await;
    let caller = w.caller().await;
    let made = w
        .service
        .create_snapshot(
            &caller,
            InlineAccess::default(),
            &sbx.id.to_string(),
            None,
            CreateSnapshotInput::default(),
        )
        .await
        .unwrap();
    let snap: Snapshot = serde_json::from_str(&made.body).unwrap();
    let restore = || local(serde_json::json!({ "snapshot": snap.id.to_string() }));
    let first = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            Some("restore-1"),
            restore(),
        )
        .await
        .unwrap();
    assert_eq!(first.status, 201);
    w.service
        .delete_snapshot(&caller, InlineAccess::default(), &snap.id.to_string())
        .await
        .unwrap();
    let again = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            Some("restore-1"),
            restore(),
        )
        .await
        .unwrap();
    assert!(again.replayed, "a replay is never refused");
    assert_eq!(again.body, first.body);
    assert_eq!(w.double.count("restore"), 1);
}

#[tokio::test]
async fn a_sandbox_running_a_command_is_busy_not_idle() {
    let w = World::with(Setup {
        manual_clock: true,
        ..Setup::default()
    })
    .await;
    let sbx = create(&w, local(serde_json::json!({ "idleStopSeconds": 60 }))).await;
    let caller = w.caller().await;
    let input: corral_domain::StartCommandInput =
        serde_json::from_value(serde_json::json!({ "command": "sleep 30" })).unwrap();
    w.service
        .start_command(
            &caller,
            InlineAccess::default(),
            &sbx.id.to_string(),
            None,
            input,
        )
        .await
        .unwrap();
    w.clock.advance(Duration::from_secs(120));
    assert_eq!(w.service.idle_stop_once().await, 0);
    assert_eq!(
        status(&w, &sbx.id.to_string()).await,
        SandboxStatus::Running
    );
}
