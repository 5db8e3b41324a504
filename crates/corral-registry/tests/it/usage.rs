//! Usage reads: each sandbox's recorded statuses, in order, for the sandboxes that may have
//! run in a range; the estimate computed from them on both backends.

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeZone;
use corral_domain::usage::{StatusMark, rollup};
use corral_domain::{
    CredentialSource, OperationId, PricingEvidence, PricingRate, Provider, RateUnit, SandboxId,
    SandboxMetadata, SandboxStatus,
};
use corral_registry::testing::TestDb;
use corral_registry::{
    Clock, Lifecycles, ManualClock, MasterKey, NewSandbox, ProjectId, Registry, UsageLog,
};

use crate::on_both_backends;

on_both_backends!(usage:
    lifecycles_follow_the_recorded_statuses_and_the_rollup_prices_them,
);

async fn sandbox(reg: &Registry, project: ProjectId, provider: Provider) -> SandboxId {
    let id = SandboxId::new(provider);
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

pub(crate) async fn lifecycles_follow_the_recorded_statuses_and_the_rollup_prices_them(
    db: &TestDb,
) {
    // 23:00 UTC, so the running sandbox crosses midnight.
    let start = chrono::Utc.with_ymd_and_hms(2026, 11, 1, 23, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let c: Arc<dyn Clock> = clock.clone();
    let reg = Registry::new(
        db.connect_with(db.config(), c).await,
        MasterKey::generate().unwrap(),
    );
    let usage = UsageLog::new(reg.database().clone());
    let p = reg.create_project("p").await.unwrap().id;
    let other = reg.create_project("other").await.unwrap().id;

    // Runs from 23:00 and is deleted at 23:30.
    let deleted = sandbox(&reg, p, Provider::E2b).await;
    reg.complete_create(p, deleted, "n-1", SandboxStatus::Running)
        .await
        .unwrap();
    // Created at 23:00, never ready: fails.
    let failed = sandbox(&reg, p, Provider::E2b).await;
    reg.complete_create(p, failed, "n-2", SandboxStatus::Creating)
        .await
        .unwrap();
    // Creating at 23:00, running from 23:10, still running.
    let running = sandbox(&reg, p, Provider::E2b).await;
    reg.complete_create(p, running, "n-3", SandboxStatus::Creating)
        .await
        .unwrap();
    // Another project's sandbox is never read.
    let foreign = sandbox(&reg, other, Provider::E2b).await;
    reg.complete_create(other, foreign, "n-4", SandboxStatus::Running)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(600));
    reg.record_status(p, running, SandboxStatus::Running, clock.now())
        .await
        .unwrap();
    reg.record_status(p, failed, SandboxStatus::Failed, clock.now())
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1200));
    reg.tombstone(p, deleted).await.unwrap();
    clock.advance(Duration::from_secs(3600)); // now: 00:30 on the 2nd
    let now = clock.now();

    let one = usage.lifecycle(p, running).await.unwrap();
    assert_eq!(
        one.marks,
        vec![
            StatusMark {
                at: start,
                status: SandboxStatus::Creating
            },
            StatusMark {
                at: start + chrono::Duration::seconds(600),
                status: SandboxStatus::Running
            },
        ]
    );
    let Lifecycles::Found(all) = usage
        .lifecycles(p, start - chrono::Duration::days(1), now)
        .await
        .unwrap()
    else {
        panic!("three sandboxes are not too many");
    };
    let mut ids: Vec<SandboxId> = all.iter().map(|l| l.id).collect();
    ids.sort();
    let mut want = vec![deleted, failed, running];
    want.sort();
    assert_eq!(ids, want);
    let del = all.iter().find(|l| l.id == deleted).unwrap();
    assert_eq!(
        del.marks.iter().map(|m| m.status).collect::<Vec<_>>(),
        vec![SandboxStatus::Running, SandboxStatus::Deleted]
    );

    // A range after the deletion leaves the deleted sandbox out.
    let Lifecycles::Found(later) = usage
        .lifecycles(p, start + chrono::Duration::hours(1), now)
        .await
        .unwrap()
    else {
        panic!("not too many");
    };
    assert!(later.iter().all(|l| l.id != deleted));

    let ev = PricingEvidence {
        summary: "test".into(),
        source_url: "https://example.com/pricing".into(),
        read_on: "2026-11-27".into(),
        rates: vec![PricingRate::new(
            RateUnit::SandboxHour,
            "0.6",
            "USD",
            "test",
            "https://example.com/pricing",
            "2026-11-27",
        )],
        size: None,
    };
    let report = rollup(
        &all,
        |_| Some(&ev),
        start - chrono::Duration::hours(23),
        now,
        now,
    );
    let rows: Vec<(String, u64, u64, String)> = report
        .rows
        .iter()
        .map(|r| {
            (
                r.day.to_string(),
                r.running_seconds,
                r.sandboxes,
                r.estimated_cost[0].amount.clone(),
            )
        })
        .collect();
    // The 1st: 30 min (deleted) + 50 min (running, to midnight); the 2nd: 30 min.
    assert_eq!(
        rows,
        vec![
            ("2026-11-01".into(), 80 * 60, 2, "0.8".into()),
            ("2026-11-02".into(), 30 * 60, 1, "0.3".into()),
        ]
    );
}
