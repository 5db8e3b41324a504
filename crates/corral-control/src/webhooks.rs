//! A project's webhook endpoints from the control plane: the sandbox API's use cases behind
//! the project's roles — members read endpoints and deliveries, admins add, rotate and remove
//! them (audited; the signing secret is in the answer only, never in the audit detail).

use corral_control_store::Role;
use corral_domain::{NewWebhook, Webhook, WebhookDeliveryList, WebhookList, WebhookWithSecret};
use corral_registry::ProjectId;
use corral_service::Caller;

use crate::error::Result;
use crate::{Actor, Control};

impl Control {
    /// `GET /projects/{project}/webhooks` (member): the endpoints, no secrets.
    pub async fn list_webhooks(&self, actor: &Actor, project: ProjectId) -> Result<WebhookList> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .list_webhooks(&Caller::trusted(project))
            .await?)
    }

    /// `POST /projects/{project}/webhooks` (admin): a new endpoint with its secret, shown
    /// this once.
    pub async fn create_webhook(
        &self,
        actor: &Actor,
        project: ProjectId,
        input: NewWebhook,
    ) -> Result<WebhookWithSecret> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let made = self
            .service()
            .create_webhook(&Caller::trusted(project), input)
            .await?;
        self.audit(
            actor,
            owned.account_id,
            "webhook.create",
            project.to_string(),
            serde_json::json!({ "webhookId": made.id, "url": made.url }),
        )
        .await?;
        Ok(made)
    }

    /// `POST /projects/{project}/webhooks/{id}/rotate` (admin): a new secret, shown this once;
    /// the previous one keeps signing during the overlap.
    pub async fn rotate_webhook(
        &self,
        actor: &Actor,
        project: ProjectId,
        id: &str,
    ) -> Result<WebhookWithSecret> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let rotated = self
            .service()
            .rotate_webhook(&Caller::trusted(project), id)
            .await?;
        self.audit(
            actor,
            owned.account_id,
            "webhook.rotate",
            project.to_string(),
            serde_json::json!({ "webhookId": rotated.id }),
        )
        .await?;
        Ok(rotated)
    }

    /// `DELETE /projects/{project}/webhooks/{id}` (admin).
    pub async fn delete_webhook(
        &self,
        actor: &Actor,
        project: ProjectId,
        id: &str,
    ) -> Result<Webhook> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let removed = self
            .service()
            .delete_webhook(&Caller::trusted(project), id)
            .await?;
        self.audit(
            actor,
            owned.account_id,
            "webhook.delete",
            project.to_string(),
            serde_json::json!({ "webhookId": removed.id }),
        )
        .await?;
        Ok(removed)
    }

    /// `GET /projects/{project}/webhooks/{id}/deliveries` (member): the latest deliveries.
    pub async fn webhook_deliveries(
        &self,
        actor: &Actor,
        project: ProjectId,
        id: &str,
        limit: Option<u32>,
    ) -> Result<WebhookDeliveryList> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .webhook_deliveries(&Caller::trusted(project), id, limit)
            .await?)
    }
}
