//! The orphan reaper through the use cases, over the counting double (posing as `local`):
//! orphans planted at the provider are found, reported once and deleted only when enabled
//! and past their grace; live records gone at the provider become `vanished` tombstones, or
//! `expired` when their lifetime had ended; a dry run changes nothing.

use std::time::Duration;

use corral_domain::{CreateSandboxRequest, EventType, OperationId, Provider, Sandbox};
use corral_provider::{CallContext, CreateSpec, SandboxProvider as _};
use corral_registry::EndReason;
use corral_service::{InlineAccess, ReaperConfig, ServiceConfig};

use crate::support::{Setup, World};

async fn create(w: &World, timeout: Option<u64>) -> (Sandbox, String) {
    let caller = w.caller().await;
    let c = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            None,
            CreateSandboxRequest::standard(Provider::Local, None, timeout),
        )
        .await
        .unwrap();
    let sbx: Sandbox = serde_json::from_str(&c.body).unwrap();
    let rec = w
        .registry
        .sandbox(caller.project_id(), sbx.id)
        .await
        .unwrap()
        .unwrap();
    (sbx, rec.native_id.unwrap())
}

/// A sandbox made at the provider under `deployment`'s tag, with no record here.
async fn plant(w: &World, deployment: &str, project: &str) -> String {
    let ctx = CallContext::anonymous()
        .with_deployment(deployment)
        .with_project(project);
    w.double
        .create(
            &ctx,
            &CreateSpec {
                operation_id: OperationId::new(),
                request: CreateSandboxRequest::standard(Provider::Local, None, None),
                timeout_seconds: None,
            },
        )
        .await
        .unwrap()
        .native_id
}

async fn at_provider(w: &World, native: &str) -> bool {
    w.double
        .get(&CallContext::anonymous(), native)
        .await
        .is_ok()
}

fn config(delete_orphans: bool, grace: Duration) -> ServiceConfig {
    ServiceConfig {
        reaper: ReaperConfig {
            enabled: false,
            delete_orphans,
            grace,
            ..ReaperConfig::default()
        },
        ..ServiceConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_and_vanished_sandboxes_are_found_and_a_dry_run_changes_nothing() {
    let w = World::with(Setup {
        config: config(false, Duration::ZERO),
        ..Setup::default()
    })
    .await;
    let caller = w.caller().await;
    let project = caller.project_id().to_string();
    let deployment = w.service.deployment().await.unwrap();
    // Enough sandboxes to cross the double's listing pages (two per page).
    let (kept, _) = create(&w, None).await;
    let (_, _) = create(&w, None).await;
    let (gone, gone_native) = create(&w, None).await;
    let orphan = plant(&w, &deployment, &project).await;
    let foreign = plant(&w, "dep_someone_else", &project).await;
    w.double
        .delete(&CallContext::anonymous(), &gone_native)
        .await
        .unwrap();

    let dry = w.service.reap_once(true).await;
    assert!(dry.dry_run);
    assert_eq!(
        dry.orphans
            .iter()
            .map(|o| o.native_id.as_str())
            .collect::<Vec<_>>(),
        vec![orphan.as_str()],
        "another deployment's sandbox is not ours to reap: {dry:?}"
    );
    assert_eq!(dry.gone.len(), 1, "{dry:?}");
    assert_eq!(dry.gone[0].record.id, gone.id);
    assert!(dry.gone[0].vanished);
    // Nothing changed.
    assert!(w.registry.orphans().await.unwrap().is_empty());
    let rec = w
        .registry
        .sandbox(caller.project_id(), gone.id)
        .await
        .unwrap()
        .unwrap();
    assert!(rec.deleted_at.is_none());

    let report = w.service.reap_once(false).await;
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(report.orphans.len(), 1);
    assert!(!report.orphans[0].deleted, "deleting orphans is off");
    assert_eq!(report.orphans[0].project.as_deref(), Some(project.as_str()));
    assert!(at_provider(&w, &orphan).await);
    assert!(at_provider(&w, &foreign).await);
    let rec = w
        .registry
        .sandbox(caller.project_id(), gone.id)
        .await
        .unwrap()
        .unwrap();
    assert!(rec.deleted_at.is_some());
    assert_eq!(rec.end_reason, Some(EndReason::Vanished));
    let kept = w
        .registry
        .sandbox(caller.project_id(), kept.id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        kept.deleted_at.is_none(),
        "a sandbox still there stays live"
    );

    // A second pass reports the orphan again but appends no second event; the tombstone
    // is not found gone again.
    let again = w.service.reap_once(false).await;
    assert_eq!(again.orphans.len(), 1);
    assert!(again.gone.is_empty(), "{again:?}");
    let events = w
        .service
        .events(&caller, 0, None, None)
        .await
        .unwrap()
        .items;
    let count = |k: EventType| events.iter().filter(|e| e.kind == k).count();
    assert_eq!(count(EventType::SandboxOrphanFound), 1, "{events:?}");
    assert_eq!(count(EventType::SandboxVanished), 1, "{events:?}");

    let mut metrics = String::new();
    w.service.render_metrics(&mut metrics);
    assert!(
        metrics.contains("corral_reaper_vanished_total{provider=\"local\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("corral_reaper_orphans_seen_total{provider=\"local\"} 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_is_deleted_only_after_its_grace_and_a_deleted_records_leftover_is_one() {
    let w = World::with(Setup {
        config: config(true, Duration::from_secs(3600)),
        manual_clock: true,
        ..Setup::default()
    })
    .await;
    let caller = w.caller().await;
    let deployment = w.service.deployment().await.unwrap();
    let orphan = plant(&w, &deployment, &caller.project_id().to_string()).await;
    // A record deleted here whose sandbox the provider kept (a delete that did not reach it).
    let (left, left_native) = create(&w, None).await;
    w.registry
        .tombstone(caller.project_id(), left.id)
        .await
        .unwrap();

    let first = w.service.reap_once(false).await;
    assert_eq!(first.orphans.len(), 2, "{first:?}");
    assert!(first.orphans.iter().all(|o| !o.deleted), "within the grace");
    assert!(at_provider(&w, &orphan).await);

    w.clock.advance(Duration::from_secs(3601));
    let later = w.service.reap_once(false).await;
    assert_eq!(later.orphans.len(), 2);
    assert!(later.orphans.iter().all(|o| o.deleted), "{later:?}");
    assert!(!at_provider(&w, &orphan).await);
    assert!(!at_provider(&w, &left_native).await);
    let stored = w.registry.orphans().await.unwrap();
    assert!(stored.iter().all(|o| o.deleted_at.is_some()), "{stored:?}");
    // The orphan whose tombstone still names it carries that id in its event.
    let events = w
        .service
        .events(&caller, 0, None, None)
        .await
        .unwrap()
        .items;
    assert!(
        events
            .iter()
            .any(|e| e.kind == EventType::SandboxOrphanFound && e.sandbox_id == Some(left.id)),
        "{events:?}"
    );
    // Gone now: nothing more to find.
    let after = w.service.reap_once(false).await;
    assert!(after.orphans.is_empty(), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_gone_after_its_lifetime_is_expired_not_vanished() {
    let w = World::with(Setup {
        config: config(false, Duration::ZERO),
        manual_clock: true,
        ..Setup::default()
    })
    .await;
    let caller = w.caller().await;
    let (sbx, native) = create(&w, Some(60)).await;
    w.double
        .delete(&CallContext::anonymous(), &native)
        .await
        .unwrap();
    w.clock.advance(Duration::from_secs(120));
    let report = w.service.reap_once(false).await;
    assert_eq!(report.gone.len(), 1, "{report:?}");
    assert!(!report.gone[0].vanished);
    let rec = w
        .registry
        .sandbox(caller.project_id(), sbx.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.status, corral_domain::SandboxStatus::Expired);
    assert!(rec.deleted_at.is_none(), "an expiry is not a tombstone");
    assert_eq!(rec.end_reason, None);
}
