use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use corral_domain::{
    CredentialSource, OperationId, Provider, SandboxId, SandboxMetadata, SandboxStatus, SnapshotId,
};
use corral_registry::testing::TestDb;
use corral_registry::{
    Clock, CreateState, ManualClock, MasterKey, NewSandbox, ProjectId, Registry, RegistryError,
    SandboxRecord,
};

use crate::{on_both_backends, registry};

on_both_backends!(sandboxes:
    a_sandbox_moves_from_pending_to_created_and_is_scoped_to_its_project,
    tombstoning_is_idempotent_and_freezes_the_record,
    pagination_visits_ten_thousand_records_once_newest_first_with_tombstones,
    a_malformed_cursor_or_limit_is_a_typed_error,
    stale_creates_hand_out_the_least_recently_attempted_first,
    a_failed_creates_reason_is_kept_for_its_project_only,
    the_wire_page_is_the_record_page_item_for_item,
);

fn metadata() -> SandboxMetadata {
    SandboxMetadata {
        native_provider_id: None,
        operation_id: OperationId::new(),
        credential_source: CredentialSource::Profile,
        workspace: None,
        team_id: None,
        project_id: None,
        bridge_url: None,
    }
}

pub(crate) async fn a_sandbox_moves_from_pending_to_created_and_is_scoped_to_its_project(
    db: &TestDb,
) {
    let reg = registry(db).await;
    let p = reg.create_project("p").await.unwrap().id;
    let q = reg.create_project("q").await.unwrap().id;
    let id = SandboxId::new(Provider::E2b);
    let meta = metadata();
    let op = meta.operation_id;
    let pending = reg
        .insert_sandbox(NewSandbox {
            id,
            project_id: p,
            metadata: meta.clone(),
        })
        .await
        .unwrap();
    assert_eq!(pending.create_state, CreateState::Pending);
    assert_eq!(pending.status, SandboxStatus::Creating);
    assert_eq!(pending.native_id, None);

    // The same operation id cannot be used twice.
    let dup = reg
        .insert_sandbox(NewSandbox {
            id: SandboxId::new(Provider::E2b),
            project_id: p,
            metadata: meta,
        })
        .await;
    assert!(
        matches!(dup, Err(RegistryError::Conflict { .. })),
        "{dup:?}"
    );
    // Unknown project.
    let orphan = reg
        .insert_sandbox(NewSandbox {
            id: SandboxId::new(Provider::E2b),
            project_id: ProjectId::new(),
            metadata: metadata(),
        })
        .await;
    assert!(
        matches!(orphan, Err(RegistryError::NotFound { .. })),
        "{orphan:?}"
    );

    assert!(
        reg.sandbox(q, id).await.unwrap().is_none(),
        "other project sees nothing"
    );
    assert_eq!(reg.sandbox_by_operation(op).await.unwrap().unwrap().id, id);

    let created = reg
        .complete_create(p, id, "native-123", SandboxStatus::Running)
        .await
        .unwrap();
    assert_eq!(created.create_state, CreateState::Created);
    assert_eq!(created.native_id.as_deref(), Some("native-123"));
    assert_eq!(
        created.metadata.native_provider_id.as_deref(),
        Some("native-123")
    );
    assert_eq!(created.status, SandboxStatus::Running);
    let item = created.to_list_item();
    assert_eq!(item.provider, Provider::E2b);

    // An older observation does not overwrite a newer one.
    let newer = created.status_observed_at + TimeDelta::seconds(10);
    reg.record_status(p, id, SandboxStatus::Paused, newer)
        .await
        .unwrap();
    let after = reg
        .record_status(p, id, SandboxStatus::Running, newer - TimeDelta::seconds(5))
        .await
        .unwrap();
    assert_eq!(after.status, SandboxStatus::Paused);
    assert!(matches!(
        reg.record_status(q, id, SandboxStatus::Running, newer)
            .await,
        Err(RegistryError::NotFound { .. })
    ));

    // A failed create, and the reconciler's view of unfinished ones.
    let failed_id = SandboxId::new(Provider::Daytona);
    reg.insert_sandbox(NewSandbox {
        id: failed_id,
        project_id: p,
        metadata: metadata(),
    })
    .await
    .unwrap();
    let failed = reg
        .set_create_state(p, failed_id, CreateState::Failed)
        .await
        .unwrap();
    assert_eq!(
        (failed.create_state, failed.status),
        (CreateState::Failed, SandboxStatus::Failed)
    );
    let unknown_id = SandboxId::new(Provider::Daytona);
    reg.insert_sandbox(NewSandbox {
        id: unknown_id,
        project_id: q,
        metadata: metadata(),
    })
    .await
    .unwrap();
    reg.set_create_state(q, unknown_id, CreateState::Unknown)
        .await
        .unwrap();
    let later = reg.database().now() + TimeDelta::seconds(1);
    let stale: Vec<SandboxId> = reg
        .stale_creates(later, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(stale, [unknown_id]);
    let earlier = reg.database().now() - TimeDelta::hours(1);
    assert!(reg.stale_creates(earlier, 10).await.unwrap().is_empty());
}

pub(crate) async fn tombstoning_is_idempotent_and_freezes_the_record(db: &TestDb) {
    let reg = registry(db).await;
    let p = reg.create_project("p").await.unwrap().id;
    let id = SandboxId::new(Provider::Local);
    reg.insert_sandbox(NewSandbox {
        id,
        project_id: p,
        metadata: metadata(),
    })
    .await
    .unwrap();
    reg.complete_create(p, id, "n1", SandboxStatus::Running)
        .await
        .unwrap();
    let first = reg.tombstone(p, id).await.unwrap();
    assert_eq!(first.status, SandboxStatus::Deleted);
    let deleted_at = first.deleted_at.expect("tombstone has deletedAt");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let second = reg.tombstone(p, id).await.unwrap();
    assert_eq!(second, first, "a second tombstone changes nothing");
    // Later observations and completions never resurrect it.
    let later = deleted_at + TimeDelta::seconds(60);
    let still = reg
        .record_status(p, id, SandboxStatus::Running, later)
        .await
        .unwrap();
    assert_eq!(still.status, SandboxStatus::Deleted);
    let still = reg
        .complete_create(p, id, "n2", SandboxStatus::Running)
        .await
        .unwrap();
    assert_eq!(
        (still.status, still.deleted_at),
        (SandboxStatus::Deleted, Some(deleted_at))
    );
    let other = reg.create_project("q").await.unwrap().id;
    assert!(matches!(
        reg.tombstone(other, id).await,
        Err(RegistryError::NotFound { .. })
    ));
    let page = reg.list_sandboxes(p, 10, None).await.unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.into_page().items[0].deleted_at, Some(deleted_at));
}

pub(crate) async fn pagination_visits_ten_thousand_records_once_newest_first_with_tombstones(
    db: &TestDb,
) {
    const N: usize = 10_000;
    let reg = registry(db).await;
    let p = reg.create_project("p").await.unwrap().id;
    let q = reg.create_project("q").await.unwrap().id;
    let base = chrono::DateTime::from_timestamp_micros(1_750_000_000_000_000).unwrap();
    let records: Vec<SandboxRecord> = (0..N)
        .map(|i| {
            // Groups of four share a createdAt, so the id tiebreak is exercised.
            let created_at = base + TimeDelta::microseconds((i / 4) as i64);
            let deleted = i % 7 == 0;
            SandboxRecord {
                id: SandboxId::new(Provider::ALL[i % Provider::ALL.len()]),
                project_id: if i % 10 == 9 { q } else { p },
                native_id: Some(format!("n{i}")),
                status: if deleted {
                    SandboxStatus::Deleted
                } else {
                    SandboxStatus::Running
                },
                status_observed_at: created_at,
                metadata: metadata(),
                create_state: CreateState::Created,
                created_at,
                updated_at: created_at,
                deleted_at: deleted.then_some(created_at),
                expires_at: None,
                end_reason: deleted.then_some(corral_registry::EndReason::Deleted),
                auto_resume: false,
                idle_stop_seconds: None,
                snapshot_id: None,
                last_activity_at: created_at,
            }
        })
        .collect();
    reg.import_sandboxes(&records).await.unwrap();
    let mut expected: Vec<&SandboxRecord> = records.iter().filter(|r| r.project_id == p).collect();
    expected.sort_by_key(|r| std::cmp::Reverse((r.created_at, r.id.to_string())));

    let mut seen = Vec::with_capacity(N);
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = reg.list_sandboxes(p, 200, cursor.as_deref()).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 200);
        seen.extend(page.items);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(pages <= N / 200 + 1, "pagination does not end");
    }
    assert_eq!(seen.len(), expected.len());
    let unique: HashSet<SandboxId> = seen.iter().map(|r| r.id).collect();
    assert_eq!(unique.len(), seen.len(), "a record was visited twice");
    for pair in seen.windows(2) {
        // Newest first, ties broken by id (byte order on both backends).
        assert!(
            (pair[0].created_at, pair[0].id.to_string())
                > (pair[1].created_at, pair[1].id.to_string()),
            "not newest first"
        );
    }
    let seen_ids: Vec<SandboxId> = seen.iter().map(|r| r.id).collect();
    let expected_ids: Vec<SandboxId> = expected.iter().map(|r| r.id).collect();
    assert_eq!(seen_ids, expected_ids);
    assert!(
        seen.iter().any(|r| r.deleted_at.is_some()),
        "tombstones are listed"
    );
    assert_eq!(
        seen.iter().filter(|r| r.deleted_at.is_some()).count(),
        expected.iter().filter(|r| r.deleted_at.is_some()).count()
    );
    assert!(seen.iter().all(|r| r.project_id == p));
}

pub(crate) async fn a_malformed_cursor_or_limit_is_a_typed_error(db: &TestDb) {
    let reg = registry(db).await;
    let p = reg.create_project("p").await.unwrap().id;
    for id in 0..3 {
        let _ = id;
        reg.insert_sandbox(NewSandbox {
            id: SandboxId::new(Provider::Local),
            project_id: p,
            metadata: metadata(),
        })
        .await
        .unwrap();
    }
    let good = reg
        .list_sandboxes(p, 1, None)
        .await
        .unwrap()
        .next_cursor
        .unwrap();
    assert_eq!(
        reg.list_sandboxes(p, 1, Some(&good))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let pattern = corral_registry::cursor_pattern();
    assert!(
        good.starts_with(|c: char| c.is_ascii_digit()),
        "{good} of {pattern}"
    );
    for bad in [
        "".to_owned(),
        "!!!".to_owned(),
        "not-a-cursor".to_owned(),
        "abc_sbx_local_01arz3ndektsv4rrffq69g5fav".to_owned(),
        "-1_sbx_local_01arz3ndektsv4rrffq69g5fav".to_owned(),
        "1234567890123456789_sbx_local_01arz3ndektsv4rrffq69g5fav".to_owned(),
        "1_not-an-id".to_owned(),
        "1_sbx_aws_01arz3ndektsv4rrffq69g5fav".to_owned(),
        "1:sbx_local_01arz3ndektsv4rrffq69g5fav".to_owned(),
        format!("{good}="),
    ] {
        let err = reg.list_sandboxes(p, 10, Some(&bad)).await.unwrap_err();
        assert!(
            matches!(err, RegistryError::InvalidCursor),
            "{bad:?}: {err:?}"
        );
    }
    // Every string of the documented form is a position, whether this registry issued it
    // or not.
    for fine in [
        "0_sbx_local_01arz3ndektsv4rrffq69g5fav",
        "999999999999999999_sbx_e2b_7zzzzzzzzzzzzzzzzzzzzzzzzz",
    ] {
        assert!(
            reg.list_sandboxes(p, 10, Some(fine)).await.is_ok(),
            "{fine}"
        );
    }
    for limit in [0, 201] {
        assert!(matches!(
            reg.list_sandboxes(p, limit, None).await,
            Err(RegistryError::InvalidInput { .. })
        ));
    }
}

/// `list_sandbox_page` (what `GET /v1/sandboxes` answers) reads fewer columns than
/// `list_sandboxes`, straight into the wire items: page for page, cursor for cursor, it is
/// the record page's `into_page`, every optional field and tombstones included; and it
/// refuses what `list_sandboxes` refuses.
pub(crate) async fn the_wire_page_is_the_record_page_item_for_item(db: &TestDb) {
    let reg = registry(db).await;
    let p = reg.create_project("p").await.unwrap().id;
    let q = reg.create_project("q").await.unwrap().id;
    let base = chrono::DateTime::from_timestamp_micros(1_750_000_000_123_456).unwrap();
    let records: Vec<SandboxRecord> = (0..300)
        .map(|i| {
            let created_at = base + TimeDelta::microseconds((i / 3) as i64 * 1_001);
            let deleted = i % 5 == 0;
            let mut metadata = metadata();
            if i % 2 == 0 {
                metadata.workspace = Some(format!("ws-{i}"));
                metadata.bridge_url = Some("https://bridge.example.com/x".into());
                metadata.credential_source = CredentialSource::Inline;
            }
            SandboxRecord {
                id: SandboxId::new(Provider::ALL[i % Provider::ALL.len()]),
                project_id: if i % 11 == 3 { q } else { p },
                native_id: (i % 13 != 0).then(|| format!("native-{i}")),
                status: if deleted {
                    SandboxStatus::Deleted
                } else {
                    SandboxStatus::Running
                },
                status_observed_at: created_at + TimeDelta::milliseconds(7),
                metadata,
                create_state: CreateState::Created,
                created_at,
                updated_at: created_at + TimeDelta::seconds(3),
                deleted_at: deleted.then_some(created_at + TimeDelta::seconds(9)),
                expires_at: None,
                end_reason: deleted.then_some(corral_registry::EndReason::Deleted),
                auto_resume: i % 3 == 0,
                idle_stop_seconds: (i % 4 == 0).then_some(60 * i as u64),
                snapshot_id: (i % 6 == 0).then(|| SnapshotId::new(Provider::Local)),
                last_activity_at: created_at,
            }
        })
        .collect();
    reg.import_sandboxes(&records).await.unwrap();
    for limit in [1, 7, 200] {
        let mut cursor: Option<String> = None;
        let mut seen = 0;
        loop {
            let records = reg
                .list_sandboxes(p, limit, cursor.as_deref())
                .await
                .unwrap()
                .into_page();
            let wire = reg
                .list_sandbox_page(p, limit, cursor.as_deref())
                .await
                .unwrap();
            assert_eq!(wire, records, "limit {limit} at {cursor:?}");
            seen += wire.items.len();
            match wire.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, records.iter().filter(|r| r.project_id == p).count());
    }
    for bad in ["", "not-a-cursor", "1_not-an-id"] {
        assert!(matches!(
            reg.list_sandbox_page(p, 10, Some(bad)).await,
            Err(RegistryError::InvalidCursor)
        ));
    }
    for limit in [0, 201] {
        assert!(matches!(
            reg.list_sandbox_page(p, limit, None).await,
            Err(RegistryError::InvalidInput { .. })
        ));
    }
}

/// Never-attempted creates come first (oldest first), then the ones attempted longest ago; an
/// attempt leaves `updated_at` (the grace period's start) alone.
pub(crate) async fn stale_creates_hand_out_the_least_recently_attempted_first(db: &TestDb) {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let c: Arc<dyn Clock> = clock.clone();
    let reg = Registry::new(
        db.connect_with(db.config(), c).await,
        MasterKey::generate().unwrap(),
    );
    let p = reg.create_project("p").await.unwrap().id;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = SandboxId::new(Provider::Daytona);
        reg.insert_sandbox(NewSandbox {
            id,
            project_id: p,
            metadata: metadata(),
        })
        .await
        .unwrap();
        reg.set_create_state(p, id, CreateState::Unknown)
            .await
            .unwrap();
        ids.push(id);
        clock.advance(Duration::from_millis(1));
    }
    let [a, b, c] = [ids[0], ids[1], ids[2]];
    let stale = async |limit: u32| -> Vec<SandboxId> {
        let cutoff = reg.database().now();
        let records = reg.stale_creates(cutoff, limit).await.unwrap();
        records.into_iter().map(|r| r.id).collect()
    };
    assert_eq!(stale(2).await, [a, b]);

    let before = reg.sandbox(p, a).await.unwrap().unwrap();
    reg.mark_reconcile_attempted(p, a).await.unwrap();
    let after = reg.sandbox(p, a).await.unwrap().unwrap();
    assert_eq!(
        after.updated_at, before.updated_at,
        "an attempt is not an update"
    );
    assert_eq!(stale(2).await, [b, c]);
    assert_eq!(stale(3).await, [b, c, a]);

    // Attempted later than `a`: now `a` is the one waiting longest.
    clock.advance(Duration::from_millis(1));
    reg.mark_reconcile_attempted(p, c).await.unwrap();
    clock.advance(Duration::from_millis(1));
    reg.mark_reconcile_attempted(p, b).await.unwrap();
    assert_eq!(stale(3).await, [a, c, b]);

    // A record that is gone is not an error.
    reg.mark_reconcile_attempted(p, SandboxId::new(Provider::Daytona))
        .await
        .unwrap();
}

pub(crate) async fn a_failed_creates_reason_is_kept_for_its_project_only(db: &TestDb) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let other = reg.create_project("q").await.unwrap().id;
    let id = SandboxId::new(Provider::Local);
    reg.insert_sandbox(NewSandbox {
        id,
        project_id: project,
        metadata: metadata(),
    })
    .await
    .unwrap();
    assert_eq!(reg.create_failure(project, id).await.unwrap(), None);
    reg.record_create_failure(project, id, "provider_invalid_request", "no image `x`")
        .await
        .unwrap();
    let long = "y".repeat(corral_registry::MAX_FAILURE_REASON + 50);
    // A later failure of the same create replaces the reason, cut to the cap.
    reg.record_create_failure(project, id, "provider_error", &long)
        .await
        .unwrap();
    let kept = reg.create_failure(project, id).await.unwrap().unwrap();
    assert_eq!(kept.code, "provider_error");
    assert_eq!(
        kept.reason.chars().count(),
        corral_registry::MAX_FAILURE_REASON
    );
    assert_eq!(reg.create_failure(other, id).await.unwrap(), None);
}
