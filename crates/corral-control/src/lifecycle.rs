//! The sandbox lifecycle from the control plane (the console's sandbox page, its list's row
//! actions and the snapshots page): stop, resume, snapshot, fork, and the project's snapshot
//! registry — the sandbox API's use cases behind the project's roles. Listing needs `member`;
//! every change needs `admin` on a project that is not being deleted and is audited
//! (`sandbox.stop`, `sandbox.resume`, `snapshot.create`, `sandbox.fork`, `snapshot.delete`).

use corral_control_store::Role;
use corral_domain::{CreateSnapshotInput, ForkInput, ForkResult, Sandbox, Snapshot, SnapshotPage};
use corral_registry::ProjectId;
use corral_service::{Caller, InlineAccess};

use crate::error::Result;
use crate::{Actor, Control, ControlError};

impl Control {
    /// Stops the sandbox (admin).
    pub async fn stop_sandbox(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
    ) -> Result<Sandbox> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let stopped = self
            .service()
            .stop(&Caller::trusted(project), InlineAccess::default(), sandbox)
            .await?;
        let details = serde_json::json!({ "projectId": project.to_string() });
        self.audit(
            actor,
            owned.account_id,
            "sandbox.stop",
            stopped.id.to_string(),
            details,
        )
        .await?;
        Ok(stopped)
    }

    /// Resumes the sandbox (admin).
    pub async fn resume_sandbox(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
    ) -> Result<Sandbox> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let resumed = self
            .service()
            .resume(&Caller::trusted(project), InlineAccess::default(), sandbox)
            .await?;
        let details = serde_json::json!({ "projectId": project.to_string() });
        self.audit(
            actor,
            owned.account_id,
            "sandbox.resume",
            resumed.id.to_string(),
            details,
        )
        .await?;
        Ok(resumed)
    }

    /// Snapshots the sandbox (admin). `key` makes a resent form take one snapshot.
    pub async fn snapshot_sandbox(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        name: Option<String>,
        key: Option<&str>,
    ) -> Result<Snapshot> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let created = self
            .service()
            .create_snapshot(
                &Caller::trusted(project),
                InlineAccess::default(),
                sandbox,
                key,
                CreateSnapshotInput { name },
            )
            .await?;
        let snapshot: Snapshot = serde_json::from_str(&created.body)
            .map_err(|_| ControlError::internal("a snapshot's answer is not a snapshot"))?;
        if !created.replayed {
            let details = serde_json::json!({
                "projectId": project.to_string(),
                "sandboxId": snapshot.sandbox_id.to_string(),
            });
            self.audit(
                actor,
                owned.account_id,
                "snapshot.create",
                snapshot.id.to_string(),
                details,
            )
            .await?;
        }
        Ok(snapshot)
    }

    /// Forks the sandbox into `count` copies (admin). `key` makes a resent form fork once.
    pub async fn fork_sandbox(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        count: u64,
        key: Option<&str>,
    ) -> Result<ForkResult> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let created = self
            .service()
            .fork(
                &Caller::trusted(project),
                InlineAccess::default(),
                sandbox,
                key,
                ForkInput { count: Some(count) },
            )
            .await?;
        let fork: ForkResult = serde_json::from_str(&created.body)
            .map_err(|_| ControlError::internal("a fork's answer is not a fork"))?;
        if !created.replayed {
            let copies: Vec<String> = fork.sandboxes.iter().map(|s| s.id.to_string()).collect();
            let details = serde_json::json!({
                "projectId": project.to_string(),
                "snapshotId": fork.snapshot_id.to_string(),
                "copies": copies,
            });
            self.audit(
                actor,
                owned.account_id,
                "sandbox.fork",
                fork.sandbox_id.to_string(),
                details,
            )
            .await?;
        }
        Ok(fork)
    }

    /// One page of the project's snapshots, newest first (member).
    pub async fn list_snapshots(
        &self,
        actor: &Actor,
        project: ProjectId,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<SnapshotPage> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .list_snapshots(&Caller::trusted(project), cursor, limit)
            .await?)
    }

    /// Deletes a snapshot (admin).
    pub async fn delete_snapshot(
        &self,
        actor: &Actor,
        project: ProjectId,
        snapshot: &str,
    ) -> Result<Snapshot> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let deleted = self
            .service()
            .delete_snapshot(&Caller::trusted(project), InlineAccess::default(), snapshot)
            .await?;
        let details = serde_json::json!({ "projectId": project.to_string() });
        self.audit(
            actor,
            owned.account_id,
            "snapshot.delete",
            deleted.id.to_string(),
            details,
        )
        .await?;
        Ok(deleted)
    }
}
