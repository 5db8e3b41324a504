//! What the tools call: [`Backend`], the sandbox API's operations the tools need, answered
//! either over HTTP by a Corral server ([`HttpBackend`], the stdio server beside an agent) or
//! by the use cases in the server's own process (`corral-web`'s `/mcp`, which implements this
//! trait over `corral-service` with the caller it authenticated: no HTTP hop, no second
//! authentication, no loopback connection sharing one address's connection cap).
//!
//! The tools own everything above one call (input checks, the `command_run` wait loop, output
//! collection, the agent-facing error); a backend is one call each, with the v3 error of the
//! API as a [`ToolError`].

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use corral_client::Client;
use corral_domain::{
    Command, CommandId, CreateSandboxRequest, CreateSnapshotInput, ForkInput, ForkResult,
    OutputPage, ProviderCatalog, ReadFileInput, ReadFileResult, Sandbox, SandboxId, SandboxPage,
    SignalInput, Snapshot, SnapshotId, SnapshotPage, StartCommandInput, WriteFileInput,
    WriteFileResult,
};

use crate::error::ToolError;

/// One backend call's answer: a `Send` future (the tools run on rmcp's multi-threaded
/// handlers) borrowing the backend.
pub type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, ToolError>> + Send + 'a>>;

/// The sandbox API operations the tools call, as one project's caller. Each method is the
/// API operation of the same name (`docs/api.md`), with its checks, limits and v3 codes.
pub trait Backend: Send + Sync + 'static {
    /// `GET /v1/providers`.
    fn providers(&self) -> Answer<'_, ProviderCatalog>;
    /// `POST /v1/sandboxes` (a create or a restore).
    fn create_sandbox(&self, request: CreateSandboxRequest) -> Answer<'_, Sandbox>;
    /// `GET /v1/sandboxes`: one page, newest first.
    fn list_sandboxes(&self, cursor: Option<String>, limit: Option<u32>)
    -> Answer<'_, SandboxPage>;
    /// `GET /v1/sandboxes/{id}`.
    fn get_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox>;
    /// `DELETE /v1/sandboxes/{id}`: the tombstone.
    fn delete_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox>;
    /// `POST /v1/sandboxes/{id}/stop`.
    fn stop_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox>;
    /// `POST /v1/sandboxes/{id}/resume`.
    fn resume_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox>;
    /// `POST /v1/sandboxes/{id}/fork`.
    fn fork_sandbox(&self, id: SandboxId, input: ForkInput) -> Answer<'_, ForkResult>;
    /// `POST /v1/sandboxes/{id}/snapshots`.
    fn create_snapshot(&self, id: SandboxId, input: CreateSnapshotInput) -> Answer<'_, Snapshot>;
    /// `GET /v1/snapshots`: one page, newest first.
    fn list_snapshots(
        &self,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Answer<'_, SnapshotPage>;
    /// `DELETE /v1/snapshots/{id}`: the tombstone.
    fn delete_snapshot(&self, id: SnapshotId) -> Answer<'_, Snapshot>;
    /// `POST /v1/sandboxes/{id}/commands`.
    fn start_command(&self, id: SandboxId, input: StartCommandInput) -> Answer<'_, Command>;
    /// `GET /v1/sandboxes/{id}/commands/{cmd}`, with `?wait=` when `wait` is given.
    fn command(&self, id: SandboxId, cmd: CommandId, wait: Option<Duration>)
    -> Answer<'_, Command>;
    /// `GET …/commands/{cmd}/output` as JSON: one page of events after `after`.
    fn output_page(&self, id: SandboxId, cmd: CommandId, after: u64) -> Answer<'_, OutputPage>;
    /// `POST …/commands/{cmd}/signal`.
    fn signal_command(
        &self,
        id: SandboxId,
        cmd: CommandId,
        input: SignalInput,
    ) -> Answer<'_, Command>;
    /// `POST /v1/sandboxes/{id}/files/read`.
    fn read_file(&self, id: SandboxId, input: ReadFileInput) -> Answer<'_, ReadFileResult>;
    /// `POST /v1/sandboxes/{id}/files/write`.
    fn write_file(&self, id: SandboxId, input: WriteFileInput) -> Answer<'_, WriteFileResult>;
}

/// The API of a Corral server over HTTP ([`corral_client::Client`]: its URL and key decide
/// which server and project). Creates, snapshots, forks and command starts carry a fresh
/// `Idempotency-Key` reused by the client's retries.
#[derive(Debug, Clone)]
pub struct HttpBackend(pub Client);

impl Backend for HttpBackend {
    fn providers(&self) -> Answer<'_, ProviderCatalog> {
        Box::pin(async move { Ok(self.0.providers().await?) })
    }

    fn create_sandbox(&self, request: CreateSandboxRequest) -> Answer<'_, Sandbox> {
        Box::pin(async move { Ok(self.0.create_sandbox(&request).await?) })
    }

    fn list_sandboxes(
        &self,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Answer<'_, SandboxPage> {
        Box::pin(async move { Ok(self.0.list_sandboxes(cursor.as_deref(), limit).await?) })
    }

    fn get_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox> {
        Box::pin(async move { Ok(self.0.get_sandbox(&id).await?) })
    }

    fn delete_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox> {
        Box::pin(async move { Ok(self.0.delete_sandbox(&id).await?) })
    }

    fn stop_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox> {
        Box::pin(async move { Ok(self.0.stop_sandbox(&id).await?) })
    }

    fn resume_sandbox(&self, id: SandboxId) -> Answer<'_, Sandbox> {
        Box::pin(async move { Ok(self.0.resume_sandbox(&id).await?) })
    }

    fn fork_sandbox(&self, id: SandboxId, input: ForkInput) -> Answer<'_, ForkResult> {
        Box::pin(async move { Ok(self.0.fork_sandbox(&id, &input).await?) })
    }

    fn create_snapshot(&self, id: SandboxId, input: CreateSnapshotInput) -> Answer<'_, Snapshot> {
        Box::pin(async move { Ok(self.0.create_snapshot(&id, &input).await?) })
    }

    fn list_snapshots(
        &self,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Answer<'_, SnapshotPage> {
        Box::pin(async move { Ok(self.0.list_snapshots(cursor.as_deref(), limit).await?) })
    }

    fn delete_snapshot(&self, id: SnapshotId) -> Answer<'_, Snapshot> {
        Box::pin(async move { Ok(self.0.delete_snapshot(&id).await?) })
    }

    fn start_command(&self, id: SandboxId, input: StartCommandInput) -> Answer<'_, Command> {
        Box::pin(async move { Ok(self.0.start_command(&id, &input).await?) })
    }

    fn command(
        &self,
        id: SandboxId,
        cmd: CommandId,
        wait: Option<Duration>,
    ) -> Answer<'_, Command> {
        Box::pin(async move { Ok(self.0.command(&id, &cmd, wait).await?) })
    }

    fn output_page(&self, id: SandboxId, cmd: CommandId, after: u64) -> Answer<'_, OutputPage> {
        Box::pin(async move { Ok(self.0.output_page(&id, &cmd, after).await?) })
    }

    fn signal_command(
        &self,
        id: SandboxId,
        cmd: CommandId,
        input: SignalInput,
    ) -> Answer<'_, Command> {
        Box::pin(async move { Ok(self.0.signal_command(&id, &cmd, &input).await?) })
    }

    fn read_file(&self, id: SandboxId, input: ReadFileInput) -> Answer<'_, ReadFileResult> {
        Box::pin(async move { Ok(self.0.read_file(&id, &input).await?) })
    }

    fn write_file(&self, id: SandboxId, input: WriteFileInput) -> Answer<'_, WriteFileResult> {
        Box::pin(async move { Ok(self.0.write_file(&id, &input).await?) })
    }
}
