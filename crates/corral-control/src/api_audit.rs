//! Sandbox creates and deletes made through the sandbox API (`/v1/sandboxes`), in the audit
//! log of the account owning the project. The actor is the API key that made the call: no
//! user, the key's public id in the detail (`apiKeyId`, never the secret). Console-made
//! deletes are audited by [`Control::delete_sandbox`] with the signed-in user as the actor.

use corral_control_store::NewAuditEvent;
use corral_registry::ProjectId;

use crate::{Control, Result};

/// What an API call did to a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiSandboxAction {
    /// A new sandbox (a `201`, never an idempotent replay).
    Create,
    /// A deletion (the tombstone answered).
    Delete,
}

impl ApiSandboxAction {
    /// The audit action: `sandbox.create` or `sandbox.delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "sandbox.create",
            Self::Delete => "sandbox.delete",
        }
    }
}

impl Control {
    /// Records that the API key `key_id` (its public id, the part after `crl_`) did `action`
    /// to `sandbox` of `project` at `provider`. A project no account owns here (the CLI's
    /// default project, a project made before the control plane) has no audit log: nothing
    /// is recorded then. The caller has already made the change, so it should log a failure
    /// rather than fail its answer.
    pub async fn audit_api_sandbox(
        &self,
        project: ProjectId,
        key_id: &str,
        action: ApiSandboxAction,
        sandbox: &str,
        provider: &str,
    ) -> Result<()> {
        let Some(owner) = self.store().project_ownership(project).await? else {
            return Ok(());
        };
        self.store()
            .record_audit(NewAuditEvent {
                account_id: Some(owner.account_id),
                actor: None,
                action: action.as_str().to_owned(),
                target: sandbox.to_owned(),
                detail: serde_json::json!({
                    "projectId": project.to_string(),
                    "provider": provider,
                    "apiKeyId": key_id,
                }),
            })
            .await?;
        Ok(())
    }
}
