//! The provider port: what Corral needs from a sandbox provider, and nothing more.
//!
//! Every adapter crate (`corral-provider-<id>`) implements [`SandboxProvider`] over its
//! provider's real API; the service holds them as `Arc<dyn SandboxProvider>`. The trait is
//! object-safe, `Send + Sync + 'static`, and speaks Corral's vocabulary: a provider's own words
//! stay inside its adapter.
//!
//! A call carries a [`CallContext`]: the provider credential (a `secrecy` type, never logged or
//! displayed), the non-secret routing context, and a deadline. Failures are [`ProviderError`]s,
//! a taxonomy of *meanings* from which the service picks exactly one public error code — in
//! particular whether a request may have reached the provider (see
//! [`ProviderError::may_have_been_applied`]), which decides whether a failed create is a clean
//! failure or an outcome to reconcile.
//!
//! Providers with no file API implement `read_file`/`write_file` with [`files_via_exec`];
//! [`shell`] and [`files`] hold the command-line and path rules adapters share. An adapter crate
//! exposes its provider as an [`Adapter`] (id, serde configuration, constructor), and the
//! server wraps every adapter in [`Contracted`], which applies the rules every adapter shares
//! (delete of an unknown sandbox is `Ok`, operation tags re-checked, per-call metrics).

mod adapter;
pub mod commands;
pub mod commands_via_exec;
mod context;
pub mod contract;
mod error;
pub mod files;
pub mod files_via_exec;
pub mod net;
mod output;
pub mod shell;
pub mod tags;

use async_trait::async_trait;
use corral_domain::{
    CommandId, CreateSandboxRequest, OperationId, Provider, ProviderCapabilities, SandboxStatus,
    Signal, SnapshotId, SnapshotStatus,
};
use std::collections::BTreeMap;
use std::time::Duration;

pub use adapter::Adapter;
pub use commands::{CommandEvent, CommandEvents, CommandSpec, OutputOffsets, Started};

pub use context::CallContext;
pub use contract::{CallObserver, Contracted, MAX_NATIVE_ID_LEN, check_native_id};
pub use error::{ProviderError, Result, excerpt};
pub use output::CappedOutput;
pub use secrecy::{ExposeSecret, SecretString};

/// What to create: the validated request and the logical operation id to tag the provider
/// resource with, so that a create whose answer was lost can be found again.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    /// The logical operation; adapters tag it onto the resource (name, label, metadata).
    pub operation_id: OperationId,
    /// The validated request (its variant matches the adapter's provider).
    pub request: CreateSandboxRequest,
    /// The lifetime to ask for, in seconds: the request's or the advertised default.
    pub timeout_seconds: Option<u64>,
}

/// A sandbox as the provider reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedSandbox {
    /// The provider-native id.
    pub native_id: String,
    /// The normalized status.
    pub status: SandboxStatus,
    /// The operation id found on the resource, if the provider returned it.
    pub operation_id: Option<OperationId>,
}

/// What to snapshot: the registry's id for it (adapters may name the provider's snapshot
/// after it) and the name the client gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSpec {
    /// The snapshot's Corral id.
    pub snapshot_id: SnapshotId,
    /// The client's name for it, if any.
    pub name: Option<String>,
}

/// A snapshot as the provider reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedSnapshot {
    /// The provider-native id of the snapshot (what restores and deletes name).
    pub native_id: String,
    /// `creating` while the provider is still making it, then `ready` or `failed`.
    pub status: SnapshotStatus,
    /// Its size in bytes, where the provider reports one.
    pub size_bytes: Option<u64>,
}

/// A sandbox found by [`SandboxProvider::list_tagged`]: one this deployment made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaggedSandbox {
    /// The sandbox as the provider reports it (with the operation id it was tagged with).
    pub observed: ObservedSandbox,
    /// The Corral project it was tagged with, if the provider returned that tag.
    pub project: Option<String>,
}

/// One page of [`SandboxProvider::list_tagged`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaggedPage {
    /// The sandboxes on this page.
    pub sandboxes: Vec<TaggedSandbox>,
    /// The token of the next page; `None` on the last.
    pub next: Option<String>,
}

/// A command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    /// The command, with `sh -c` semantics.
    pub command: String,
    /// Working directory, if the provider supports it.
    pub cwd: Option<String>,
    /// Extra environment, if the provider supports it.
    pub env: BTreeMap<String, String>,
    /// How long the command may run before it is killed and `CommandTimedOut` is returned.
    pub timeout: Duration,
    /// Bytes of output kept per stream.
    pub max_output_bytes: usize,
}

impl ExecSpec {
    /// A command with no cwd or env, the default deadline and output cap.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            cwd: None,
            env: BTreeMap::new(),
            timeout: Duration::from_secs(corral_domain::limits::DEFAULT_EXEC_DEADLINE_SECONDS),
            max_output_bytes: corral_domain::limits::MAX_OUTPUT_BYTES_PER_STREAM,
        }
    }
}

/// What a command produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    /// Standard output (all output when the provider combines streams).
    pub stdout: Vec<u8>,
    /// Standard error (empty when combined).
    pub stderr: Vec<u8>,
    /// Exit code; `128 + n` for death by signal `n`.
    pub exit_code: i32,
    /// Whether either stream was cut at `max_output_bytes`.
    pub truncated: bool,
}

/// The port every provider adapter implements.
///
/// `native_id` arguments are the provider-native ids that `create` returned. Implementations
/// must honour `ctx.deadline()`, never log `ctx.credential()`, and return `NotFound` for a
/// sandbox the provider does not know (the service decides whether that means `expired`).
#[async_trait]
pub trait SandboxProvider: Send + Sync + 'static {
    /// Which provider this is.
    fn provider(&self) -> Provider;

    /// The honest capabilities, with display name and pricing evidence.
    fn capabilities(&self) -> &ProviderCapabilities;

    /// Creates a sandbox tagged with `spec.operation_id`.
    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox>;

    /// Observes one sandbox.
    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox>;

    /// Permanently deletes one sandbox. Deleting one the provider no longer has is `Ok`.
    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()>;

    /// Runs a command; a non-zero exit is `Ok` with that exit code.
    async fn exec(&self, ctx: &CallContext, native_id: &str, spec: &ExecSpec)
    -> Result<ExecOutput>;

    /// Reads a whole file of at most `max_bytes` (`FileTooLarge` beyond). By default through
    /// exec ([`files_via_exec`]), for providers with no file API.
    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        files_via_exec::read_file(self, ctx, native_id, path, max_bytes).await
    }

    /// Writes a whole file; its parent directory must exist (`ParentMissing` otherwise). By
    /// default through exec ([`files_via_exec`]), in chunks that keep each command under the
    /// command limit with room for an adapter's wrapper.
    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let chunk_limit = corral_domain::limits::MAX_COMMAND_BYTES - 1024;
        files_via_exec::write_file(self, ctx, native_id, path, content, chunk_limit).await
    }

    /// Finds the sandboxes tagged with `operation_id` (reconciliation of lost creates).
    /// An empty list is not proof of absence: provider listings can lag.
    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>>;

    /// One page of the sandboxes the provider holds that carry `deployment`'s tag (every
    /// create tags its resource with [`CallContext::deployment`] and [`CallContext::project`]
    /// beside the operation id). `page` is a token from an earlier page's `next`. For the
    /// orphan reaper: like [`SandboxProvider::find_by_operation_id`], an absent sandbox is
    /// not proof of absence. `Unsupported` where the provider cannot list by tag.
    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        let _ = (ctx, deployment, page);
        Err(ProviderError::Unsupported {
            provider: self.provider(),
            operation: "list_tagged",
            reason: "this adapter cannot list its sandboxes by tag yet".into(),
        })
    }

    /// Stops a sandbox: nothing runs in it and its files are kept (and its memory, where the
    /// capabilities' `lifecycle.stopKeepsMemory`). Answers `stopping` while the provider is
    /// still at it, then `stopped`; stopping a stopped sandbox answers it as it is.
    /// `Unsupported` unless the capabilities' `supportsExplicitStop`.
    async fn stop(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let _ = (ctx, native_id);
        Err(unsupported(self.provider(), "stop"))
    }

    /// Resumes a stopped sandbox: answers `starting`, then `running`; resuming a running
    /// sandbox answers it as it is. `Unsupported` unless `supportsExplicitStop`.
    async fn resume(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let _ = (ctx, native_id);
        Err(unsupported(self.provider(), "resume"))
    }

    /// Takes a point-in-time snapshot of the sandbox's filesystem. The answer may be
    /// `creating` (asynchronous providers): [`SandboxProvider::get_snapshot`] follows it.
    /// `Unsupported` unless `supportsSnapshots`.
    async fn snapshot(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &SnapshotSpec,
    ) -> Result<ObservedSnapshot> {
        let _ = (ctx, native_id, spec);
        Err(unsupported(self.provider(), "snapshot"))
    }

    /// Observes one snapshot; `NotFound` once the provider no longer has it.
    async fn get_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<ObservedSnapshot> {
        let _ = (ctx, snapshot);
        Err(unsupported(self.provider(), "get_snapshot"))
    }

    /// Deletes one snapshot. Deleting one the provider no longer has is `Ok`.
    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        let _ = (ctx, snapshot);
        Err(unsupported(self.provider(), "delete_snapshot"))
    }

    /// Creates a sandbox whose filesystem starts as the `ready` snapshot `snapshot`'s,
    /// tagged like [`SandboxProvider::create`] (so a lost answer is found by operation id).
    /// A fork is a snapshot restored into each copy. `Unsupported` unless `supportsRestore`.
    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        let _ = (ctx, spec, snapshot);
        Err(unsupported(self.provider(), "restore"))
    }

    /// Starts a command detached: it keeps running whatever happens to this call's caller.
    /// Starting a `command_id` that already started must not run it twice (answer its handle,
    /// or fail). By default through a detached wrapper over exec ([`commands_via_exec`]).
    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        commands_via_exec::start(self, ctx, native_id, spec).await
    }

    /// Follows a started command's output from `from` (as far as the provider can: see
    /// [`CommandEvent::Output`]'s offset); the stream ends after the exit event, or early when
    /// the provider's stream broke. `NotFound` when the provider no longer knows the command.
    async fn attach_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        handle: &str,
        from: OutputOffsets,
    ) -> Result<CommandEvents<'a>> {
        commands_via_exec::attach(self, ctx, native_id, handle, from)
    }

    /// Writes `data` to the command's stdin; `offset` is the count of bytes accepted before
    /// it (providers that can use it to drop a resend do). Answers the total accepted.
    async fn write_stdin(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<u64> {
        commands_via_exec::write_stdin(self, ctx, native_id, handle, offset, data).await
    }

    /// Closes the command's stdin.
    async fn close_stdin(&self, ctx: &CallContext, native_id: &str, handle: &str) -> Result<()> {
        commands_via_exec::close_stdin(self, ctx, native_id, handle).await
    }

    /// Sends `signal` to the command (and what it started, where the provider can). The
    /// service only asks for signals the capabilities advertise. An ended command is `Ok`.
    async fn signal_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        signal: Signal,
    ) -> Result<()> {
        commands_via_exec::signal(self, ctx, native_id, handle, signal).await
    }

    /// The handle of the command started with `command_id`, if the provider has it: how a
    /// start whose answer was lost is found again. `Unsupported` where it cannot be looked up.
    async fn find_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        command_id: &CommandId,
    ) -> Result<Option<String>> {
        commands_via_exec::find(self, ctx, native_id, command_id).await
    }
}

/// The answer of a lifecycle operation an adapter does not implement.
pub fn unsupported(provider: Provider, operation: &'static str) -> ProviderError {
    ProviderError::Unsupported {
        provider,
        operation,
        reason: "this provider's adapter does not offer it (see its capabilities)".into(),
    }
}
