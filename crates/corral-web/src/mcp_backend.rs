//! The server's `/mcp` tools in process: [`InProcess`] implements `corral_mcp::Backend` over
//! the use cases (`corral-service`) with the caller `/mcp` authenticated and admitted, as the
//! API's handlers call them (no inline provider access: MCP tools take none; creates and
//! deletes audited as the API audits them). No HTTP request is made, so a tool call needs no
//! connection of its own and no second authentication.

use std::time::Duration;

use actix_web::web;
use corral_control::ApiSandboxAction;
use corral_domain::{
    Command, CommandId, CreateSandboxRequest, CreateSnapshotInput, ForkInput, ForkResult,
    OutputPage, ProviderCatalog, ReadFileInput, ReadFileResult, Sandbox, SandboxId, SandboxPage,
    SignalInput, Snapshot, SnapshotId, SnapshotPage, StartCommandInput, WriteFileInput,
    WriteFileResult,
};
use corral_mcp::{Answer, Backend, ToolError};
use corral_service::error::ServiceError;
use corral_service::{Caller, Created, InlineAccess};

use crate::sandbox::audit_sandbox_change;
use crate::state::AppState;

/// The use cases as one authenticated caller of one `/mcp` request.
pub(crate) struct InProcess {
    state: web::Data<AppState>,
    caller: Caller,
    /// The API key's public id, for the audit log.
    key_id: String,
    /// The `/mcp` request's id, quoted in every tool error.
    request_id: String,
}

impl InProcess {
    /// The use cases as `caller` (authenticated with the key `key_id`) for request
    /// `request_id`.
    pub(crate) fn new(
        state: web::Data<AppState>,
        caller: Caller,
        key_id: String,
        request_id: String,
    ) -> Self {
        Self {
            state,
            caller,
            key_id,
            request_id,
        }
    }

    /// A use case's error as the agent reads it: the API's envelope, field for field.
    fn error(&self, e: ServiceError) -> ToolError {
        let envelope = e.envelope(&self.request_id).error;
        ToolError {
            code: envelope.code.as_str().to_owned(),
            message: envelope.message,
            request_id: Some(envelope.request_id),
            retryable: envelope.retryable,
        }
    }

    /// A create-like answer's body (the JSON the API would send) as `T`.
    fn decode<T: serde::de::DeserializeOwned>(&self, created: &Created) -> Result<T, ToolError> {
        serde_json::from_str(&created.body).map_err(|e| {
            self.error(ServiceError::internal(format!(
                "a stored answer is not what the API documents: {e}"
            )))
        })
    }

    async fn audit(&self, action: ApiSandboxAction, sandbox: &Sandbox) {
        audit_sandbox_change(
            &self.state,
            self.caller.project_id(),
            &self.key_id,
            action,
            &sandbox.id.to_string(),
            sandbox.provider.as_str(),
        )
        .await;
    }
}

impl Backend for InProcess {
    fn providers(&self) -> Answer<'_, ProviderCatalog> {
        Box::pin(async move { Ok(self.state.service.providers()) })
    }

    fn create_sandbox(&self, request: CreateSandboxRequest) -> Answer<'_, Sandbox> {
        Box::pin(async move {
            let created = self
                .state
                .service
                .create(&self.caller, InlineAccess::default(), None, request)
                .await
                .map_err(|e| self.error(e))?;
            let sandbox: Sandbox = self.decode(&created)?;
            // As the API: only a new sandbox is audited.
            if created.status == 201 && !created.replayed {
                self.audit(ApiSandboxAction::Create, &sandbox).await;
            }
            Ok(sandbox)
        })
    }

    fn list_sandboxes(
        &self,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Answer<'_, SandboxPage> {
        Box::pin(async move {
            self.state
                .service
                .list(&self.caller, cursor.as_deref(), limit)
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn get_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox> {
        Box::pin(async move {
            self.state
                .service
                .get(&self.caller, InlineAccess::default(), &id.to_string())
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn delete_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox> {
        Box::pin(async move {
            let sandbox = self
                .state
                .service
                .delete(&self.caller, InlineAccess::default(), &id.to_string())
                .await
                .map_err(|e| self.error(e))?;
            self.audit(ApiSandboxAction::Delete, &sandbox).await;
            Ok(sandbox)
        })
    }

    fn stop_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox> {
        Box::pin(async move {
            self.state
                .service
                .stop(&self.caller, InlineAccess::default(), &id.to_string())
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn resume_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox> {
        Box::pin(async move {
            self.state
                .service
                .resume(&self.caller, InlineAccess::default(), &id.to_string())
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn fork_sandbox(&self, id: SandboxId, input: ForkInput) -> Answer<'_, ForkResult> {
        Box::pin(async move {
            let created = self
                .state
                .service
                .fork(
                    &self.caller,
                    InlineAccess::default(),
                    &id.to_string(),
                    None,
                    input,
                )
                .await
                .map_err(|e| self.error(e))?;
            self.decode(&created)
        })
    }

    fn create_snapshot(&self, id: SandboxId, input: CreateSnapshotInput) -> Answer<'_, Snapshot> {
        Box::pin(async move {
            let created = self
                .state
                .service
                .create_snapshot(
                    &self.caller,
                    InlineAccess::default(),
                    &id.to_string(),
                    None,
                    input,
                )
                .await
                .map_err(|e| self.error(e))?;
            self.decode(&created)
        })
    }

    fn list_snapshots(
        &self,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Answer<'_, SnapshotPage> {
        Box::pin(async move {
            self.state
                .service
                .list_snapshots(&self.caller, cursor.as_deref(), limit)
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn delete_snapshot(&self, id: SnapshotId) -> Answer<'_, Snapshot> {
        Box::pin(async move {
            self.state
                .service
                .delete_snapshot(&self.caller, InlineAccess::default(), &id.to_string())
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn start_command(&self, id: SandboxId, input: StartCommandInput) -> Answer<'_, Command> {
        Box::pin(async move {
            let created = self
                .state
                .service
                .start_command(
                    &self.caller,
                    InlineAccess::default(),
                    &id.to_string(),
                    None,
                    input,
                )
                .await
                .map_err(|e| self.error(e))?;
            self.decode(&created)
        })
    }

    fn command(
        &self,
        id: SandboxId,
        cmd: CommandId,
        wait: Option<Duration>,
    ) -> Answer<'_, Command> {
        Box::pin(async move {
            self.state
                .service
                .command(&self.caller, &id.to_string(), &cmd.to_string(), wait)
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn output_page(&self, id: SandboxId, cmd: CommandId, after: u64) -> Answer<'_, OutputPage> {
        Box::pin(async move {
            self.state
                .service
                .command_output(&self.caller, &id.to_string(), &cmd.to_string(), after)
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn signal_command(
        &self,
        id: SandboxId,
        cmd: CommandId,
        input: SignalInput,
    ) -> Answer<'_, Command> {
        Box::pin(async move {
            self.state
                .service
                .signal_command(
                    &self.caller,
                    InlineAccess::default(),
                    &id.to_string(),
                    &cmd.to_string(),
                    input,
                )
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn read_file(&self, id: SandboxId, input: ReadFileInput) -> Answer<'_, ReadFileResult> {
        Box::pin(async move {
            self.state
                .service
                .read_file(
                    &self.caller,
                    InlineAccess::default(),
                    &id.to_string(),
                    input,
                )
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn write_file(&self, id: SandboxId, input: WriteFileInput) -> Answer<'_, WriteFileResult> {
        Box::pin(async move {
            self.state
                .service
                .write_file(
                    &self.caller,
                    InlineAccess::default(),
                    &id.to_string(),
                    input,
                )
                .await
                .map_err(|e| self.error(e))
        })
    }
}
