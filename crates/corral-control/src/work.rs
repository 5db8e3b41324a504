//! Working with one sandbox from the control plane (the console's sandbox page): its commands
//! (start, stdin, history, one command, its output as a page or a follow stream), its files
//! (read, write), its lifecycle events and its estimated cost so far — the sandbox API's use
//! cases behind the project's roles. Reading needs `member`; what changes the sandbox (starting,
//! signalling or writing to a command, writing a file, deleting it) needs `admin` on a project
//! that is not being deleted and is audited (the command's id, never its text, its input or a
//! file's content).

use corral_control_store::Role;
use corral_domain::UsageReport;
use corral_domain::{
    Command, CommandPage, LifecycleEvent, OutputEvent, OutputPage, ReadFileInput, ReadFileResult,
    Sandbox, SandboxUsage, Signal, SignalInput, StartCommandInput, StdinInput, StdinResult,
    WriteFileInput, WriteFileResult,
};
use corral_registry::ProjectId;
use corral_service::error::ServiceError;
use corral_service::{Caller, InlineAccess};
use futures::StreamExt as _;
use futures::stream::BoxStream;

use crate::error::Result;
use crate::{Actor, Control, ControlError};

/// Events read from the log for one sandbox's page, at most (its newest are shown).
const MAX_EVENTS_READ: usize = 5000;
/// One page of the event log.
const EVENTS_PAGE: u32 = 500;

impl Control {
    /// Starts `input` in the sandbox (admin): answers once the provider confirmed the start
    /// (or its answer was lost: the command is then `starting` and settles on its own).
    pub async fn start_command(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        input: StartCommandInput,
    ) -> Result<Command> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let created = self
            .service()
            .start_command(
                &Caller::trusted(project),
                InlineAccess::default(),
                sandbox,
                None,
                input,
            )
            .await?;
        let command: Command = serde_json::from_str(&created.body)
            .map_err(|_| ControlError::internal("the command's answer is not a command"))?;
        self.audit(
            actor,
            owned.account_id,
            "command.start",
            command.sandbox_id.to_string(),
            serde_json::json!({ "projectId": project.to_string(), "commandId": command.id.to_string() }),
        )
        .await?;
        Ok(command)
    }

    /// Sends `signal` to a running command (admin; audited).
    pub async fn signal_command(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        cmd: &str,
        signal: Signal,
    ) -> Result<Command> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let command = self
            .service()
            .signal_command(
                &Caller::trusted(project),
                InlineAccess::default(),
                sandbox,
                cmd,
                SignalInput { signal },
            )
            .await?;
        self.audit(
            actor,
            owned.account_id,
            "command.signal",
            command.sandbox_id.to_string(),
            serde_json::json!({ "projectId": project.to_string(), "commandId": command.id.to_string(), "signal": signal }),
        )
        .await?;
        Ok(command)
    }

    /// Writes to a running command's stdin (admin; audited with the byte counts, never the
    /// bytes). The input's `offset` makes a resent form write nothing twice.
    pub async fn write_command_stdin(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        cmd: &str,
        input: StdinInput,
    ) -> Result<StdinResult> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let close = input.close;
        let written = self
            .service()
            .write_stdin(
                &Caller::trusted(project),
                InlineAccess::default(),
                sandbox,
                cmd,
                input,
            )
            .await?;
        self.audit(
            actor,
            owned.account_id,
            "command.stdin",
            sandbox.to_owned(),
            serde_json::json!({
                "projectId": project.to_string(),
                "commandId": cmd,
                "stdinBytes": written.stdin_bytes,
                "closed": close,
            }),
        )
        .await?;
        Ok(written)
    }

    /// Deletes the sandbox at its provider and keeps its tombstone (admin; audited). A
    /// tombstone is answered unchanged, as by the sandbox API.
    pub async fn delete_sandbox(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
    ) -> Result<Sandbox> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let deleted = self
            .service()
            .delete(&Caller::trusted(project), InlineAccess::default(), sandbox)
            .await?;
        self.audit(
            actor,
            owned.account_id,
            "sandbox.delete",
            deleted.id.to_string(),
            serde_json::json!({ "projectId": project.to_string(), "provider": deleted.provider.as_str() }),
        )
        .await?;
        Ok(deleted)
    }

    /// The sandbox's commands, newest first, one page (member).
    pub async fn list_commands(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<CommandPage> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .list_commands(&Caller::trusted(project), sandbox, None, cursor, limit)
            .await?)
    }

    /// One command of the sandbox (member).
    pub async fn command(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        cmd: &str,
    ) -> Result<Command> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .command(&Caller::trusted(project), sandbox, cmd, None)
            .await?)
    }

    /// One bounded page of a command's output events after `after` (member).
    pub async fn command_output(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        cmd: &str,
        after: u64,
    ) -> Result<OutputPage> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .command_output(&Caller::trusted(project), sandbox, cmd, after)
            .await?)
    }

    /// A command's output events after `after`, then new ones as they come, to the exit
    /// (member). Access is checked once, up front.
    pub async fn follow_output(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        cmd: &str,
        after: u64,
    ) -> Result<BoxStream<'static, std::result::Result<OutputEvent, ServiceError>>> {
        self.project_role(actor, project, Role::Member).await?;
        // Boxed: the service's stream owns everything it reads, but its type still names the
        // caller made here.
        Ok(self
            .service()
            .follow_output(&Caller::trusted(project), sandbox, cmd, after)
            .await?
            .boxed())
    }

    /// Reads a file of the sandbox (member).
    pub async fn read_file(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        input: ReadFileInput,
    ) -> Result<ReadFileResult> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .read_file(
                &Caller::trusted(project),
                InlineAccess::default(),
                sandbox,
                input,
            )
            .await?)
    }

    /// Writes a file of the sandbox (admin; audited with its path and size, not its content).
    pub async fn write_file(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        input: WriteFileInput,
    ) -> Result<WriteFileResult> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let written = self
            .service()
            .write_file(
                &Caller::trusted(project),
                InlineAccess::default(),
                sandbox,
                input,
            )
            .await?;
        self.audit(
            actor,
            owned.account_id,
            "file.write",
            written.sandbox_id.to_string(),
            serde_json::json!({ "projectId": project.to_string(), "path": written.path, "bytes": written.bytes_written }),
        )
        .await?;
        Ok(written)
    }

    /// The sandbox's newest `limit` lifecycle events, newest first (member). The log is read
    /// oldest first, at most [`MAX_EVENTS_READ`] events; past that the newest of those show.
    pub async fn sandbox_events(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        limit: usize,
    ) -> Result<Vec<LifecycleEvent>> {
        self.project_role(actor, project, Role::Member).await?;
        let caller = Caller::trusted(project);
        let mut kept = std::collections::VecDeque::with_capacity(limit + 1);
        let (mut after, mut read) = (0, 0);
        while read < MAX_EVENTS_READ {
            let page = self
                .service()
                .events(&caller, after, Some(EVENTS_PAGE), Some(sandbox))
                .await?;
            let n = page.items.len();
            read += n;
            after = page.next_after;
            for e in page.items {
                kept.push_back(e);
                if kept.len() > limit {
                    kept.pop_front();
                }
            }
            if n < EVENTS_PAGE as usize {
                break;
            }
        }
        Ok(kept.into_iter().rev().collect())
    }

    /// The sandbox's lifecycle events after `after`, then new ones as they are appended,
    /// without end (member). Access is checked once, up front.
    pub async fn follow_sandbox_events(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
        after: u64,
    ) -> Result<BoxStream<'static, std::result::Result<LifecycleEvent, ServiceError>>> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .follow_events(&Caller::trusted(project), after, Some(sandbox))
            .await?
            .boxed())
    }

    /// The project's estimated usage per provider and UTC day over the last seven days
    /// (member).
    pub async fn project_usage(&self, actor: &Actor, project: ProjectId) -> Result<UsageReport> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .usage(&Caller::trusted(project), None, None)
            .await?)
    }

    /// The sandbox's estimated usage so far (member).
    pub async fn sandbox_usage(
        &self,
        actor: &Actor,
        project: ProjectId,
        sandbox: &str,
    ) -> Result<SandboxUsage> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .sandbox_usage(&Caller::trusted(project), sandbox)
            .await?)
    }
}
