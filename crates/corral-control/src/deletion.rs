//! Asynchronous deletion of projects and accounts.
//!
//! Deleting a project or an account only marks it (`deletingAt`); [`Control::run_deletions`]
//! does the work, for each project being deleted (its own deletion or its account's):
//! revoke its API keys (no new sandboxes), delete each live sandbox at its provider through
//! the sandbox use case (with the project's stored profile), erase its profiles (and so
//! their credentials), then mark it deleted. An account whose projects are all deleted loses
//! its memberships and pending invitations and is marked deleted.
//!
//! Every step is idempotent, so a pass that crashed or failed half-way is simply run again:
//! a project stays "being deleted" until a pass deletes all of its sandboxes. Profiles are
//! erased only after that, since deleting a sandbox needs the credential.
//!
//! Two refusals can never change while the project is being deleted (its profiles can no
//! longer be edited): no profile for the sandbox's provider, and a stored verification proving
//! the credential cannot delete. Such a sandbox is left at its provider rather than blocking
//! the deletion for ever; it is named in the report, the log and the `project.deleted` audit
//! event (`leftAtProvider`), for the owner to delete by hand.

use std::time::Duration;

use corral_control_store::{NewAuditEvent, StoreError};
use corral_domain::limits::MAX_PAGE_LIMIT;
use corral_registry::ProjectId;
use corral_service::error::ServiceError;
use corral_service::{Caller, InlineAccess};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::{Control, ControlError};

/// What one deletion pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionReport {
    /// Projects whose deletion finished in this pass.
    pub projects_finished: usize,
    /// Accounts whose deletion finished in this pass.
    pub accounts_finished: usize,
    /// Sandboxes deleted at their providers.
    pub sandboxes_deleted: usize,
    /// API keys revoked.
    pub keys_revoked: usize,
    /// Provider profiles erased.
    pub profiles_erased: usize,
    /// Projects left for the next pass, with why (never a secret).
    pub failures: Vec<String>,
    /// Sandboxes Corral can never delete (no profile, or a credential proved unable to),
    /// left at their providers.
    pub left_at_provider: Vec<String>,
}

impl Control {
    /// One deletion pass over every project and account being deleted. A project that
    /// cannot be finished now (a provider refused to delete a sandbox) is reported in
    /// [`DeletionReport::failures`] and retried by the next pass; only a store that cannot
    /// be read fails the pass.
    pub async fn run_deletions(&self) -> Result<DeletionReport> {
        let mut report = DeletionReport::default();
        for owned in self.store().projects_being_deleted().await? {
            let project = owned.project_id;
            match self.delete_project_contents(project, &mut report).await {
                Ok(left) => {
                    self.store().finish_project_deletion(project).await?;
                    report.projects_finished += 1;
                    self.store()
                        .record_audit(NewAuditEvent {
                            account_id: Some(owned.account_id),
                            actor: None,
                            action: "project.deleted".to_owned(),
                            target: project.to_string(),
                            detail: serde_json::json!({ "leftAtProvider": left }),
                        })
                        .await?;
                }
                Err(e) => {
                    tracing::warn!(%project, error = %e, "project deletion left for the next pass");
                    report.failures.push(format!("{project}: {e}"));
                }
            }
        }
        for account in self.store().accounts_being_deleted().await? {
            match self.store().finish_account_deletion(account.id).await {
                Ok(()) => {
                    report.accounts_finished += 1;
                    self.store()
                        .record_audit(NewAuditEvent {
                            account_id: Some(account.id),
                            actor: None,
                            action: "account.deleted".to_owned(),
                            target: account.id.to_string(),
                            detail: serde_json::json!({}),
                        })
                        .await?;
                }
                // A project of it is still being deleted: the next pass finishes it.
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(report)
    }

    /// Keys, sandboxes, profiles of one project; `Err` leaves the project for the next pass.
    /// Answers the sandboxes left at their providers.
    async fn delete_project_contents(
        &self,
        project: ProjectId,
        report: &mut DeletionReport,
    ) -> Result<Vec<String>> {
        for key in self.registry().list_api_keys(project).await? {
            if key.revoked_at.is_none() {
                self.registry().revoke_api_key(&key.key_id).await?;
                report.keys_revoked += 1;
            }
        }
        let caller = Caller::trusted(project);
        let mut live = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .service()
                .list(&caller, cursor.as_deref(), Some(MAX_PAGE_LIMIT))
                .await?;
            live.extend(
                page.items
                    .into_iter()
                    .filter(|s| s.deleted_at.is_none())
                    .map(|s| s.id),
            );
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let mut failed = None;
        let mut left = Vec::new();
        for id in live {
            let id = id.to_string();
            match self
                .service()
                .delete(&caller, InlineAccess::default(), &id)
                .await
            {
                Ok(_) => report.sandboxes_deleted += 1,
                Err(
                    ServiceError::ProfileNotFound { .. }
                    | ServiceError::OperationUnavailable { .. },
                ) => {
                    tracing::warn!(%project, sandbox = %id, "sandbox left at its provider: no usable credential");
                    left.push(id);
                }
                // Keep going: each sandbox deleted now is one fewer to pay for.
                Err(e) => failed = Some(ControlError::from(e)),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        for profile in self.registry().list_profiles(project).await? {
            if self
                .registry()
                .delete_profile(project, profile.provider)
                .await?
            {
                report.profiles_erased += 1;
            }
        }
        report.left_at_provider.extend(left.iter().cloned());
        Ok(left)
    }

    /// Runs [`Control::run_deletions`] every `interval` until the task is aborted, logging
    /// what each pass did (never a secret).
    pub fn spawn_deletion_worker(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let control = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                match control.run_deletions().await {
                    Ok(r) if r == DeletionReport::default() => {}
                    Ok(r) => tracing::info!(
                        projects = r.projects_finished,
                        accounts = r.accounts_finished,
                        sandboxes = r.sandboxes_deleted,
                        left = r.failures.len(),
                        "deletion pass"
                    ),
                    Err(e) => tracing::warn!(error = %e, "deletion pass failed"),
                }
            }
        })
    }
}
