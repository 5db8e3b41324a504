//! The orphan reaper's findings in the audit log of the account owning each project: an
//! orphan's first sighting, its deletion, and a sandbox found vanished. Repeated sightings
//! of a known orphan are not logged again; dry runs change nothing and log nothing.

use corral_control_store::NewAuditEvent;
use corral_registry::ProjectId;
use corral_service::ReapReport;

use crate::{Control, Result};

impl Control {
    /// Records `report`'s findings (nothing for a dry run). A finding whose project is not
    /// owned by an account here (a tag from elsewhere, the CLI's default project) is logged
    /// only in the server's log.
    pub async fn audit_reap(&self, report: &ReapReport) -> Result<()> {
        if report.dry_run {
            return Ok(());
        }
        for o in &report.orphans {
            let Some(project) = o
                .project
                .as_deref()
                .and_then(|p| p.parse::<ProjectId>().ok())
            else {
                continue;
            };
            let detail = serde_json::json!({
                "provider": o.provider,
                "nativeId": o.native_id,
                "operationId": o.operation_id.map(|op| op.to_string()),
            });
            if o.first_seen {
                self.audit_for(project, "sandbox.orphan_found", detail.clone())
                    .await?;
            }
            if o.deleted {
                self.audit_for(project, "sandbox.orphan_deleted", detail)
                    .await?;
            }
        }
        for g in report.gone.iter().filter(|g| g.vanished) {
            let detail = serde_json::json!({
                "provider": g.record.provider(),
                "sandboxId": g.record.id.to_string(),
            });
            self.audit_for(g.record.project_id, "sandbox.vanished", detail)
                .await?;
        }
        Ok(())
    }

    async fn audit_for(
        &self,
        project: ProjectId,
        action: &str,
        detail: serde_json::Value,
    ) -> Result<()> {
        let Some(owner) = self.store().project_ownership(project).await? else {
            return Ok(());
        };
        self.store()
            .record_audit(NewAuditEvent {
                account_id: Some(owner.account_id),
                actor: None,
                action: action.to_owned(),
                target: project.to_string(),
                detail,
            })
            .await?;
        Ok(())
    }
}
