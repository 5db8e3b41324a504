//! E2B's snapshots and fork over Corral's lifecycle use cases.
//!
//! An E2B snapshot is a template: the SDK creates sandboxes from its id and deletes it with
//! `DELETE /templates/{id}`. The door answers Corral's snapshot id (`snp_<provider>_<ulid>`) as
//! that id, so a create whose template parses as one restores the snapshot
//! ([`snapshot_template`]; `control.rs`), and a template delete of one deletes the snapshot.
//! A fork is Corral's fork: one snapshot, restored into each copy; every copy gets the door's
//! record of its source (template, metadata, environment) and its own timeout.

use chrono::Utc;
use corral_domain::{
    CreateSnapshotInput, ForkInput, ForkResult, Snapshot, SnapshotId, SnapshotStatus,
};
use corral_registry::E2bRecord;
use corral_service::error::ServiceError;
use corral_service::{Caller, InlineAccess};

use crate::control::{READY_WAIT, STATE_SCAN_PAGES, parse_body, registry_err, seconds};
use crate::wire::{ForkOutcome, ForkRequest, SnapshotInfo, SnapshotRequest};
use crate::{E2bError, FrontDoor};

/// E2B's default lifetime of a fork's copies (its description's `SandboxForkRequest`).
pub const FORK_DEFAULT_TIMEOUT_SECONDS: u64 = 15;

/// Largest page of `GET /snapshots` (E2B's `paginationLimit`).
const MAX_LIMIT: u32 = 100;

/// The snapshot a template names, when it is a Corral snapshot id.
pub fn snapshot_template(template: &str) -> Option<SnapshotId> {
    template.parse().ok()
}

/// E2B's `SnapshotInfo` of `snap`.
pub fn snapshot_info(snap: &Snapshot) -> SnapshotInfo {
    SnapshotInfo {
        snapshot_id: snap.id.to_string(),
        names: snap.name.iter().cloned().collect(),
    }
}

/// Whether `GET /snapshots` lists `snap`: E2B lists no deleted or failed template.
fn listed(snap: &Snapshot) -> bool {
    matches!(
        snap.status,
        SnapshotStatus::Ready | SnapshotStatus::Creating
    )
}

/// `GET /snapshots`' query.
#[derive(Debug, Clone, Default)]
pub struct SnapshotQuery {
    /// `sandboxID`: only snapshots of this sandbox.
    pub sandbox_id: Option<String>,
    /// `name`: only the snapshot with this id or name.
    pub name: Option<String>,
    /// `limit` (default and cap 100).
    pub limit: Option<u32>,
    /// `nextToken`.
    pub next_token: Option<String>,
}

/// A fork's answer, whether it replayed an earlier one, and where the copies are.
#[derive(Debug, Clone)]
pub struct DoorFork {
    /// E2B's answer: one entry per copy.
    pub answer: Vec<ForkOutcome>,
    /// An `Idempotency-Key` replay (nothing new was made).
    pub replayed: bool,
    /// The copies' provider.
    pub provider: corral_domain::Provider,
}

fn not_found_template(id: &str) -> E2bError {
    E2bError::not_found(format!(
        "template '{}' not found",
        id.chars().take(80).collect::<String>()
    ))
}

impl FrontDoor {
    /// Checks that `snapshot` can be created from: the project's, not deleted (a deleted
    /// one is an unknown template, as E2B's). Anything else is the restore's to refuse.
    pub(crate) async fn restorable(
        &self,
        caller: &Caller,
        snapshot: SnapshotId,
    ) -> Result<(), E2bError> {
        let id = snapshot.to_string();
        match self.service().get_snapshot(caller, &id).await {
            Ok(s) if s.deleted_at.is_none() && s.status != SnapshotStatus::Deleted => Ok(()),
            Ok(_) => Err(not_found_template(&id)),
            Err(e) if e.code() == corral_errors::ErrorCode::SnapshotNotFound => {
                Err(not_found_template(&id))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Waits (bounded by [`READY_WAIT`]) while the provider makes the snapshot.
    async fn wait_snapshot(
        &self,
        caller: &Caller,
        mut snap: Snapshot,
    ) -> Result<Snapshot, E2bError> {
        let until = tokio::time::Instant::now() + READY_WAIT;
        let mut pause = std::time::Duration::from_millis(100);
        while snap.status == SnapshotStatus::Creating && tokio::time::Instant::now() < until {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_secs(2));
            snap = self
                .service()
                .get_snapshot(caller, &snap.id.to_string())
                .await?;
        }
        Ok(snap)
    }

    /// `POST /sandboxes/{id}/snapshots`: Corral's snapshot of the sandbox, answered once the
    /// provider has made it (E2B's 201 `SnapshotInfo`); its id is a template to create from.
    /// A provider without snapshots is refused (400) before anything is done.
    pub async fn create_snapshot(
        &self,
        caller: &Caller,
        id: &str,
        idempotency_key: Option<&str>,
        body: &[u8],
    ) -> Result<SnapshotInfo, E2bError> {
        let req: SnapshotRequest = parse_body(body)?;
        self.live_record(caller, id).await?;
        let created = self
            .service()
            .create_snapshot(
                caller,
                InlineAccess::default(),
                id,
                idempotency_key,
                CreateSnapshotInput { name: req.name },
            )
            .await?;
        let snap: Snapshot = serde_json::from_str(&created.body)
            .map_err(|_| ServiceError::internal("the snapshot's answer could not be read"))?;
        let snap = self.wait_snapshot(caller, snap).await?;
        if snap.status == SnapshotStatus::Failed {
            return Err(ServiceError::ProviderFailed {
                message: format!(
                    "snapshot '{}' failed: {}",
                    snap.id,
                    snap.failure
                        .as_deref()
                        .unwrap_or("the provider gave no reason")
                ),
            }
            .into());
        }
        Ok(snapshot_info(&snap))
    }

    /// `GET /snapshots`: the project's snapshots, newest first, deleted and failed ones left
    /// out; `sandboxID` and `name` (an id or a name) filter; the next page's token when more
    /// may follow.
    pub async fn list_snapshots(
        &self,
        caller: &Caller,
        query: &SnapshotQuery,
    ) -> Result<(Vec<SnapshotInfo>, Option<String>), E2bError> {
        let limit = query.limit.unwrap_or(MAX_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(E2bError::invalid(format!(
                "limit must be from 1 to {MAX_LIMIT}"
            )));
        }
        let sandbox = query.sandbox_id.as_deref().filter(|s| !s.is_empty());
        let name = query.name.as_deref().filter(|s| !s.is_empty());
        let wanted = |s: &Snapshot| {
            listed(s)
                && sandbox.is_none_or(|id| s.sandbox_id.to_string() == id)
                && name.is_none_or(|n| s.id.to_string() == n || s.name.as_deref() == Some(n))
        };
        let mut cursor = query.next_token.clone().filter(|t| !t.is_empty());
        // Filtered after each page is read; pages that keep nothing are read past.
        for _ in 0..STATE_SCAN_PAGES {
            let page = self
                .service()
                .list_snapshots(caller, cursor.as_deref(), Some(limit))
                .await
                .map_err(|e| match e.code() {
                    corral_errors::ErrorCode::InvalidRequest => {
                        E2bError::invalid("nextToken is not one this server gave")
                    }
                    _ => E2bError::from(e),
                })?;
            let items: Vec<SnapshotInfo> = page
                .items
                .iter()
                .filter(|s| wanted(s))
                .map(snapshot_info)
                .collect();
            if !items.is_empty() || page.next_cursor.is_none() {
                return Ok((items, page.next_cursor));
            }
            cursor = page.next_cursor;
        }
        Ok((Vec::new(), cursor))
    }

    /// `DELETE /templates/{id}`: a snapshot's id deletes the snapshot (E2B's 204). Any other
    /// template, an unknown snapshot and a deleted one are not found (the SDK's `False`):
    /// the door's other templates are configuration (`corral e2b-template rm`).
    pub async fn delete_template(&self, caller: &Caller, id: &str) -> Result<(), E2bError> {
        let Some(snapshot) = snapshot_template(id) else {
            return Err(not_found_template(id));
        };
        self.restorable(caller, snapshot).await?;
        self.service()
            .delete_snapshot(caller, InlineAccess::default(), &snapshot.to_string())
            .await?;
        Ok(())
    }

    /// `POST /sandboxes/{id}/fork`: Corral's fork (one snapshot, restored `count` times),
    /// answered once the copies run (E2B's 201, one entry per copy). Each copy lives
    /// `timeout` seconds (default 15) and keeps its source's template, metadata and
    /// environment. A provider without snapshots and restores is refused (400) before
    /// anything is done; Corral makes at most 10 copies (E2B: 20).
    pub async fn fork(
        &self,
        caller: &Caller,
        id: &str,
        idempotency_key: Option<&str>,
        body: &[u8],
    ) -> Result<DoorFork, E2bError> {
        let req: ForkRequest = parse_body(body)?;
        let timeout = self.check_timeout(req.timeout.unwrap_or(FORK_DEFAULT_TIMEOUT_SECONDS))?;
        let (source, _) = self.live_record(caller, id).await?;
        let created = self
            .service()
            .fork(
                caller,
                InlineAccess::default(),
                id,
                idempotency_key,
                ForkInput { count: req.count },
            )
            .await?;
        let forked: ForkResult = serde_json::from_str(&created.body)
            .map_err(|_| ServiceError::internal("the fork's answer could not be read"))?;
        let registry = self.service().registry();
        let mut answer = Vec::with_capacity(forked.sandboxes.len());
        for copy in forked.sandboxes {
            let made = async {
                let copy = self.wait_running(caller, copy).await?;
                if !created.replayed {
                    self.prepare_home(caller, &copy.id.to_string()).await;
                }
                let now = Utc::now();
                let record = E2bRecord {
                    project_id: caller.project_id(),
                    sandbox_id: copy.id,
                    template_id: source.template_id.clone(),
                    alias: source.alias.clone(),
                    metadata: source.metadata.clone(),
                    env: source.env.clone(),
                    end_at: now + seconds(timeout),
                    created_at: now,
                };
                registry.put_e2b(&record).await.map_err(registry_err)?;
                // A replay answers the record the first fork stored.
                let stored = registry
                    .get_e2b(caller.project_id(), copy.id)
                    .await
                    .map_err(registry_err)?
                    .unwrap_or(record);
                Ok::<_, E2bError>(self.created(caller, &stored))
            };
            answer.push(match made.await {
                Ok(sandbox) => ForkOutcome {
                    sandbox: Some(sandbox),
                    error: None,
                },
                Err(e) => ForkOutcome {
                    sandbox: None,
                    error: Some(e.body()),
                },
            });
        }
        Ok(DoorFork {
            answer,
            replayed: created.replayed,
            provider: forked.snapshot_id.provider(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_domain::Provider;

    #[test]
    fn a_snapshot_id_is_a_template_and_names_are_not() {
        let id = SnapshotId::new(Provider::Local);
        assert_eq!(snapshot_template(&id.to_string()), Some(id));
        for other in [
            "base",
            "local",
            "daytona:python:3.12",
            "snp_",
            "snp_local_x",
            "",
        ] {
            assert_eq!(snapshot_template(other), None, "{other}");
        }
    }

    fn snap(status: SnapshotStatus, name: Option<&str>) -> Snapshot {
        serde_json::from_value(serde_json::json!({
            "id": SnapshotId::new(Provider::Local).to_string(),
            "sandboxId": corral_domain::SandboxId::new(Provider::Local).to_string(),
            "provider": "local",
            "name": name,
            "status": status.as_str(),
            "sizeBytes": null,
            "createdAt": "2026-01-01T00:00:00Z",
            "deletedAt": null,
        }))
        .unwrap()
    }

    #[test]
    fn a_snapshots_info_is_its_id_and_name_and_only_live_ones_are_listed() {
        let named = snap(SnapshotStatus::Ready, Some("before"));
        let info = snapshot_info(&named);
        assert_eq!(info.snapshot_id, named.id.to_string());
        assert_eq!(info.names, vec!["before".to_owned()]);
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(json["snapshotID"], named.id.to_string());
        assert!(
            snapshot_info(&snap(SnapshotStatus::Ready, None))
                .names
                .is_empty()
        );
        for status in SnapshotStatus::ALL {
            let want = matches!(status, SnapshotStatus::Ready | SnapshotStatus::Creating);
            assert_eq!(listed(&snap(status, None)), want, "{status:?}");
        }
    }
}
