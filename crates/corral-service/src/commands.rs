//! Commands as durable jobs: start (idempotent), get (with `?wait=`), list, output (pages or
//! a follow stream that resumes after any event), stdin (with offsets) and signals.
//!
//! A start records the command (`starting`) before the provider is asked, under a capture
//! lease held by this replica; the provider call and everything after it run in the
//! capture's own task (see [`crate::capture`]), so a client that goes away cancels nothing.
//! The request waits only for the provider's answer to the start.

use std::time::Duration;

use corral_domain::{
    Command, CommandId, CommandPage, CommandState, OperationId, OutputEvent, OutputPage, SandboxId,
    Signal, SignalInput, StartCommandInput, StdinInput, StdinResult, limits,
};
use corral_idempotency::{Claim, ClaimOutcome, Fingerprint, IdempotencyKey};
use corral_provider::{CommandSpec, ProviderError};
use corral_registry::{CommandRecord, NewCommand, RegistryError};
use futures::Stream;
use tokio::sync::oneshot;

use crate::access::recorded_context;
use crate::capture::{Begin, Job};
use crate::error::{ServiceError, Stage, idempotency_error, map_provider_error, registry_error};
use crate::live::{Batch, Waiter, exit_event, wire_events};
use crate::{Caller, Created, InlineAccess, Service};

/// Tunables of commands as durable jobs.
#[derive(Debug, Clone)]
pub struct CommandsConfig {
    /// Largest `timeoutSeconds` a start may ask for (also the default).
    pub max_timeout: Duration,
    /// How long a replica's hold on a command's capture lasts unless renewed (renewed every
    /// third of it): after a crash, another replica (or the restarted one) takes the command
    /// over within about this long.
    pub lease: Duration,
    /// Output bytes kept per command; past it the oldest are dropped (readers get a gap).
    pub max_output_bytes_per_command: u64,
    /// Output bytes kept per project; past it the oldest commands' output is dropped.
    pub max_output_bytes_per_project: u64,
    /// Output events (stored chunks) kept per command (at least 16); past it the oldest
    /// become one gap per stream. Rows are bounded as well as bytes.
    pub max_output_events_per_command: u64,
    /// How long an ended command (and its output) stays readable.
    pub retention: Duration,
    /// Commands a project may have running at once (`None`: no cap).
    pub max_live_per_project: Option<u32>,
}

impl Default for CommandsConfig {
    fn default() -> Self {
        Self {
            max_timeout: Duration::from_secs(limits::DEFAULT_MAX_COMMAND_TIMEOUT_SECONDS),
            lease: Duration::from_secs(15),
            max_output_bytes_per_command: 16 * 1024 * 1024,
            max_output_bytes_per_project: 256 * 1024 * 1024,
            max_output_events_per_command: corral_registry::DEFAULT_MAX_EVENTS_PER_COMMAND,
            retention: Duration::from_secs(7 * 24 * 60 * 60),
            max_live_per_project: Some(100),
        }
    }
}

/// Events of one output page, at most.
const PAGE_EVENTS: u32 = 256;
/// Bytes of one output page, at most (one event may exceed it alone).
const PAGE_BYTES: usize = 256 * 1024;
/// Longest `?wait=` on a command's state.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

fn command_not_found(id: &str) -> ServiceError {
    ServiceError::SandboxNotFound {
        message: format!(
            "no command `{}` in this sandbox",
            id.chars().take(80).collect::<String>()
        ),
    }
}

fn parse_command_id(id: &str) -> Result<CommandId, ServiceError> {
    id.parse().map_err(|_| ServiceError::InvalidRequest {
        message: format!(
            "`{}` is not a command id (`cmd_<ulid>`)",
            id.chars().take(80).collect::<String>()
        ),
    })
}

/// The body a start answers (and replays byte for byte).
fn start_body(rec: &CommandRecord) -> Result<String, ServiceError> {
    serde_json::to_string(&rec.to_command())
        .map_err(|_| ServiceError::internal("cannot serialize the command"))
}

impl Service {
    /// The caller's command `cmd` in sandbox `sandbox` (tombstoned sandboxes included).
    async fn command_record(
        &self,
        caller: &Caller,
        sandbox: &str,
        cmd: &str,
    ) -> Result<CommandRecord, ServiceError> {
        let rec = self.record(caller, sandbox).await?;
        let id = parse_command_id(cmd)?;
        self.inner
            .journal
            .get(caller.project_id(), rec.id, id)
            .await
            .map_err(registry_error)?
            .ok_or_else(|| command_not_found(cmd))
    }

    /// The longest command timeout this server takes (`[commands] max_timeout_seconds`).
    pub fn commands_max_timeout(&self) -> Duration {
        self.inner.config.commands.max_timeout
    }

    /// `POST /v1/sandboxes/{id}/commands`: starts a command and answers once the provider
    /// confirmed the start (201, state `running`), or once its answer was lost (201, state
    /// `starting`: the command is looked up again and settles to `running` or `lost`, never
    /// started twice). With an `Idempotency-Key`, the same request replays the stored answer.
    pub async fn start_command(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        sandbox: &str,
        idempotency_key: Option<&str>,
        input: StartCommandInput,
    ) -> Result<Created, ServiceError> {
        let rec = self.record(caller, sandbox).await?;
        let rec = self.ready_for_work(caller, rec, sandbox).await?;
        let native = self.live_native(&rec, sandbox)?.to_owned();
        let p = rec.provider();
        let provider = self.provider(p)?.clone();
        let config = &self.inner.config.commands;
        input.validate(provider.capabilities(), config.max_timeout.as_secs())?;
        let key = idempotency_key
            .map(IdempotencyKey::parse)
            .transpose()
            .map_err(idempotency_error)?;
        let body_value = serde_json::to_value(&input)
            .map_err(|_| ServiceError::internal("cannot serialize the request"))?;
        let route = format!("/v1/sandboxes/{}/commands", rec.id);
        let workspace = inline.context.workspace.clone();
        let headers: Vec<(&str, &str)> = workspace
            .as_deref()
            .map(|w| vec![("x-provider-workspace", w)])
            .unwrap_or_default();
        let fingerprint = Fingerprint::compute("POST", &route, Some(&body_value), &headers);
        let access = self
            .access(
                caller,
                p,
                crate::sandboxes::workspace_only(inline),
                Some(&recorded_context(&rec.metadata)),
                "exec",
            )
            .await?;
        let Some(key) = key else {
            self.check_live_commands(caller).await?;
            return self
                .run_start(caller, rec.id, provider, access.ctx, native, input, None)
                .await;
        };
        let store = &self.inner.idempotency;
        match store
            .claim(caller.project_id(), &key, &fingerprint)
            .await
            .map_err(idempotency_error)?
        {
            ClaimOutcome::Claimed(mut claim) => {
                if let Err(e) = self.check_live_commands(caller).await {
                    let _ = store.release(&claim).await;
                    return Err(e);
                }
                if let Err(e) = store.attach_operation(&mut claim, OperationId::new()).await {
                    let _ = store.release(&claim).await;
                    return Err(idempotency_error(e));
                }
                self.run_start(
                    caller,
                    rec.id,
                    provider,
                    access.ctx,
                    native,
                    input,
                    Some(claim),
                )
                .await
            }
            ClaimOutcome::Replay(stored) => Ok(Created {
                status: 200,
                body: String::from_utf8_lossy(&stored.body).into_owned(),
                replayed: true,
            }),
            ClaimOutcome::InProgress { retry_after } => Err(ServiceError::IdempotencyInProgress {
                retry_after: retry_after.as_secs().max(1),
            }),
            ClaimOutcome::Conflict => Err(ServiceError::IdempotencyConflict),
            ClaimOutcome::Unknown { .. } | ClaimOutcome::NeedsReconciliation(_) => {
                // Its owner died between recording the command and storing the answer: the
                // record (and its capture, which the supervisor resumes) says what happened.
                self.settle_start_key(caller, &key).await
            }
        }
    }

    /// A same-key retry whose first attempt's owner died: answers the command it recorded,
    /// or frees the key when it recorded none (the provider was never asked).
    async fn settle_start_key(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Created, ServiceError> {
        let store = &self.inner.idempotency;
        let Some(claim) = store
            .take_over_for_reconciliation(caller.project_id(), key)
            .await
            .map_err(idempotency_error)?
        else {
            return Err(ServiceError::IdempotencyInProgress { retry_after: 1 });
        };
        let Some(op) = claim.operation_id else {
            store.release(&claim).await.map_err(idempotency_error)?;
            return Err(ServiceError::IdempotencyInProgress { retry_after: 1 });
        };
        match self.inner.journal.by_operation(op).await {
            Ok(Some(rec)) if rec.project_id == caller.project_id() => {
                let body = start_body(&rec)?;
                store
                    .complete(&claim, 201, body.as_bytes())
                    .await
                    .map_err(idempotency_error)?;
                Ok(Created {
                    status: 201,
                    body,
                    replayed: false,
                })
            }
            Ok(_) => {
                store.release(&claim).await.map_err(idempotency_error)?;
                Err(ServiceError::IdempotencyInProgress { retry_after: 1 })
            }
            Err(_) => {
                let _ = store.mark_unknown(&claim, op).await;
                Err(ServiceError::IdempotencyOutcomeUnknown {
                    operation_id: Some(op),
                })
            }
        }
    }

    async fn check_live_commands(&self, caller: &Caller) -> Result<(), ServiceError> {
        let Some(max) = self.inner.config.commands.max_live_per_project else {
            return Ok(());
        };
        let live = self
            .inner
            .journal
            .count_live(caller.project_id())
            .await
            .map_err(registry_error)?;
        if live >= u64::from(max) {
            return Err(ServiceError::RateLimited {
                message: format!(
                    "the project has {live} commands running, its limit; wait for one to end"
                ),
                retry_after: Some(5),
            });
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)] // One start's parts, passed on once.
    async fn run_start(
        &self,
        caller: &Caller,
        sandbox: SandboxId,
        provider: std::sync::Arc<dyn corral_provider::SandboxProvider>,
        ctx: corral_provider::CallContext,
        native: String,
        input: StartCommandInput,
        claim: Option<Claim>,
    ) -> Result<Created, ServiceError> {
        let config = &self.inner.config.commands;
        let timeout = input
            .timeout_seconds
            .map_or(config.max_timeout, Duration::from_secs);
        let id = CommandId::new();
        let operation = claim
            .as_ref()
            .and_then(|c| c.operation_id)
            .unwrap_or_default();
        let new = NewCommand {
            id,
            project_id: caller.project_id(),
            sandbox_id: sandbox,
            operation_id: operation,
            command: input.command.clone(),
            tag: input.tag.clone(),
            stdin: input.stdin,
            timeout_seconds: timeout.as_secs(),
            owner: self.inner.replica.clone(),
            lease: config.lease,
        };
        let store = &self.inner.idempotency;
        let record = match self.inner.journal.insert(new).await {
            Ok(r) => r,
            Err(e) => {
                if let Some(claim) = &claim {
                    let _ = store.release(claim).await;
                }
                return Err(registry_error(e));
            }
        };
        let spec = CommandSpec {
            command_id: id,
            command: input.command,
            cwd: input.cwd,
            env: input.env.unwrap_or_default(),
            stdin: input.stdin,
            timeout,
        };
        let (done, started) = oneshot::channel();
        self.spawn_capture(
            Job {
                record: record.clone(),
                provider,
                ctx,
                native,
            },
            Begin::Start { spec, done },
        );
        // The capture task reports the start; it records the outcome even if this request
        // goes away. The key is settled here, or by a retry (`settle_start_key`).
        let outcome = started.await.unwrap_or(Ok(record));
        match outcome {
            Ok(rec) => {
                let body = start_body(&rec)?;
                if let Some(claim) = &claim
                    && let Err(e) = store.complete(claim, 201, body.as_bytes()).await
                {
                    tracing::warn!(command_id = %id, error = %e, "cannot store the idempotent response");
                }
                Ok(Created {
                    status: 201,
                    body,
                    replayed: false,
                })
            }
            Err(e) => {
                if let Some(claim) = &claim {
                    let _ = store.release(claim).await;
                }
                Err(map_provider_error(e, Stage::Other, None))
            }
        }
    }

    /// `GET /v1/sandboxes/{id}/commands/{cmd}`; with `wait`, answers as soon as the command
    /// has ended, or after `wait` (at most [`MAX_WAIT`]) with its state then. Woken by the
    /// command's end itself, never by a timer (see [`crate::live`]).
    pub async fn command(
        &self,
        caller: &Caller,
        sandbox: &str,
        cmd: &str,
        wait: Option<Duration>,
    ) -> Result<Command, ServiceError> {
        let Some(wait) = wait.filter(|w| !w.is_zero()) else {
            return Ok(self
                .command_record(caller, sandbox, cmd)
                .await?
                .to_command());
        };
        let until = tokio::time::Instant::now() + wait.min(MAX_WAIT);
        let id = parse_command_id(cmd)?;
        // Subscribed before the first read: an end after it cannot be missed.
        let mut waiter = self.inner.live.waiter(id);
        let mut rec = self.command_record(caller, sandbox, cmd).await?;
        while !rec.state.is_final() && waiter.changed(until).await {
            rec = self
                .inner
                .journal
                .get(rec.project_id, rec.sandbox_id, id)
                .await
                .map_err(registry_error)?
                .ok_or_else(|| command_not_found(cmd))?;
        }
        Ok(rec.to_command())
    }

    /// `GET /v1/sandboxes/{id}/commands`: newest first, optionally one state, by cursor.
    pub async fn list_commands(
        &self,
        caller: &Caller,
        sandbox: &str,
        state: Option<&str>,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<CommandPage, ServiceError> {
        let rec = self.record(caller, sandbox).await?;
        let limit = limit.unwrap_or(limits::DEFAULT_PAGE_LIMIT);
        if !(1..=limits::MAX_PAGE_LIMIT).contains(&limit) {
            return Err(ServiceError::invalid(format!(
                "`limit` must be from 1 to {}",
                limits::MAX_PAGE_LIMIT
            )));
        }
        let state = state
            .map(|s| {
                s.parse::<CommandState>().map_err(|_| {
                    ServiceError::invalid(format!(
                        "`state` must be one of starting, running, exited, killed, timed_out, lost; not {:?}",
                        s.chars().take(40).collect::<String>()
                    ))
                })
            })
            .transpose()?;
        let page = self
            .inner
            .journal
            .list(caller.project_id(), rec.id, state, limit, cursor)
            .await
            .map_err(registry_error)?;
        Ok(CommandPage {
            items: page.items.iter().map(CommandRecord::to_command).collect(),
            next_cursor: page.next_cursor,
        })
    }

    /// `GET …/commands/{cmd}/output` as JSON: the events after `after` (0: from the start),
    /// one bounded page; `done` once the page ends with the exit event.
    pub async fn command_output(
        &self,
        caller: &Caller,
        sandbox: &str,
        cmd: &str,
        after: u64,
    ) -> Result<OutputPage, ServiceError> {
        let rec = self.command_record(caller, sandbox, cmd).await?;
        self.output_page(&rec, after).await
    }

    async fn output_page(
        &self,
        rec: &CommandRecord,
        after: u64,
    ) -> Result<OutputPage, ServiceError> {
        let stored = self
            .inner
            .journal
            .events(rec.id, after, PAGE_EVENTS, PAGE_BYTES)
            .await
            .map_err(registry_error)?;
        let mut events = wire_events(stored);
        // The record was read before the events: if it had ended then, every event is
        // written, and the exit follows the last of them.
        let last = events.last().map_or(after, OutputEvent::seq);
        let done = rec.state.is_final() && last + 1 >= rec.next_seq && after < rec.next_seq;
        if done {
            events.push(exit_event(rec));
        }
        Ok(OutputPage {
            next_after: events.last().map_or(after, OutputEvent::seq),
            events,
            done: done || (rec.state.is_final() && after >= rec.next_seq),
        })
    }

    /// `GET …/commands/{cmd}/output` as a stream: every event after `after`, then new ones
    /// as they are journaled, ending with the exit event. Checks access once, up front. A
    /// reader catches up from the journal, a page at a time; then, on the replica capturing
    /// the command, it is fed from memory (the capture's broadcast of what it journals) and
    /// goes back to the journal only when it fell behind; elsewhere it reads the journal each
    /// time it is woken (see [`crate::live`]).
    pub async fn follow_output(
        &self,
        caller: &Caller,
        sandbox: &str,
        cmd: &str,
        after: u64,
    ) -> Result<impl Stream<Item = Result<OutputEvent, ServiceError>> + Send + 'static, ServiceError>
    {
        let rec = self.command_record(caller, sandbox, cmd).await?;
        // Held by the stream, so given back when its client goes.
        let permit = self.inner.streams.acquire(caller)?;
        let this = self.clone();
        let state = Follow {
            ids: (rec.project_id, rec.sandbox_id, rec.id),
            after,
            buffered: Default::default(),
            done: false,
            feed: None,
            live: false,
            waiter: None,
        };
        let stream = futures::stream::unfold(state, move |mut st| {
            let this = this.clone();
            async move {
                loop {
                    if let Some(e) = st.buffered.pop_front() {
                        st.after = e.seq();
                        st.done |= matches!(e, OutputEvent::Exit { .. });
                        return Some((Ok(e), st));
                    }
                    if st.done {
                        return None;
                    }
                    let step = if st.live {
                        st.read_feed().await;
                        Ok(())
                    } else {
                        st.read_journal(&this).await
                    };
                    if let Err(e) = step {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                }
            }
        });
        Ok(futures::StreamExt::map(stream, move |item| {
            let _held = &permit;
            item
        }))
    }

    /// A live command's provider, context and handle, for stdin and signals.
    async fn live_command(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        sandbox: &str,
        cmd: &str,
        operation: &str,
    ) -> Result<(CommandRecord, LiveCall), ServiceError> {
        let rec = self.record(caller, sandbox).await?;
        let native = self.live_native(&rec, sandbox)?.to_owned();
        let id = parse_command_id(cmd)?;
        let command = self
            .inner
            .journal
            .get(caller.project_id(), rec.id, id)
            .await
            .map_err(registry_error)?
            .ok_or_else(|| command_not_found(cmd))?;
        let p = rec.provider();
        let provider = self.provider(p)?.clone();
        let access = self
            .access(
                caller,
                p,
                crate::sandboxes::workspace_only(inline),
                Some(&recorded_context(&rec.metadata)),
                operation,
            )
            .await?;
        let ctx = access
            .ctx
            .with_timeout(self.inner.config.provider_call_timeout);
        Ok((
            command,
            LiveCall {
                provider,
                ctx,
                native,
            },
        ))
    }

    /// `POST …/commands/{cmd}/stdin`: writes at `offset` (default: after what was accepted);
    /// bytes already accepted are skipped, so a resend after a lost answer writes nothing
    /// twice. `close` closes stdin after writing.
    pub async fn write_stdin(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        sandbox: &str,
        cmd: &str,
        input: StdinInput,
    ) -> Result<StdinResult, ServiceError> {
        let data = input.decode()?;
        let (rec, call) = self
            .live_command(caller, inline, sandbox, cmd, "exec")
            .await?;
        let accepted = rec.stdin_bytes;
        let offset = input.offset.unwrap_or(accepted);
        if offset > accepted {
            // Well-formed, refused by the command's state: 422, as closed stdin is.
            return Err(ServiceError::ProviderInvalidRequest {
                message: format!(
                    "`offset` {offset} is past the {accepted} bytes of stdin accepted so far"
                ),
            });
        }
        let skip = usize::try_from(accepted - offset).unwrap_or(usize::MAX);
        let fresh = data.get(skip..).unwrap_or_default();
        if !rec.stdin_open || rec.state.is_final() {
            if fresh.is_empty() {
                // A resend of writes (and a close) already accepted.
                return Ok(StdinResult {
                    stdin_bytes: accepted,
                    stdin_open: rec.stdin_open && !rec.state.is_final(),
                });
            }
            // A well-formed write the command's current state refuses: 422, as a file that
            // does not exist is (docs/commands.md).
            return Err(ServiceError::ProviderInvalidRequest {
                message:
                    "the command's stdin is not open (started without `stdin`, closed, or ended)"
                        .into(),
            });
        }
        let Some(handle) = rec.handle.as_deref() else {
            // Its start is still being confirmed: the same answer as a start in progress.
            return Err(ServiceError::IdempotencyInProgress { retry_after: 1 });
        };
        let provider = &call.provider;
        let mut total = accepted;
        if !fresh.is_empty() {
            total = provider
                .write_stdin(&call.ctx, &call.native, handle, accepted, fresh)
                .await
                .map_err(|e| self.command_call_failed(e))?;
        }
        if input.close {
            provider
                .close_stdin(&call.ctx, &call.native, handle)
                .await
                .map_err(|e| self.command_call_failed(e))?;
        }
        let moved = self
            .inner
            .journal
            .record_stdin(rec.id, accepted, total, input.close)
            .await
            .map_err(registry_error)?;
        if !moved {
            return Err(ServiceError::IdempotencyInProgress { retry_after: 1 });
        }
        Ok(StdinResult {
            stdin_bytes: total,
            stdin_open: !input.close,
        })
    }

    /// `POST …/commands/{cmd}/signal`: a signal the provider advertises; an ended command is
    /// answered as it is.
    pub async fn signal_command(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        sandbox: &str,
        cmd: &str,
        input: SignalInput,
    ) -> Result<Command, ServiceError> {
        let sandbox_rec = self.record(caller, sandbox).await?;
        let provider = self.provider(sandbox_rec.provider())?;
        let signals = &provider.capabilities().commands.signals;
        if !signals.contains(&input.signal) {
            return Err(ServiceError::invalid(format!(
                "provider `{}` cannot send {} to a command (capability commands.signals: {})",
                sandbox_rec.provider(),
                input.signal,
                signals
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let current = self.command_record(caller, sandbox, cmd).await?;
        if current.state.is_final() {
            return Ok(current.to_command());
        }
        let (rec, call) = self
            .live_command(caller, inline, sandbox, cmd, "exec")
            .await?;
        let Some(handle) = rec.handle.as_deref() else {
            return Err(ServiceError::invalid(
                "the command is still starting; retry when it is running",
            ));
        };
        self.inner
            .journal
            .set_kill_reason(rec.id, CommandState::Killed)
            .await
            .map_err(registry_error)?;
        call.provider
            .signal_command(&call.ctx, &call.native, handle, input.signal)
            .await
            .map_err(|e| self.command_call_failed(e))?;
        Ok(rec.to_command())
    }

    fn command_call_failed(&self, e: ProviderError) -> ServiceError {
        match e {
            ProviderError::NotFound { .. } => ServiceError::SandboxNotFound {
                message: "the provider no longer has this command".into(),
            },
            e => map_provider_error(e, Stage::Other, None),
        }
    }

    /// Ends the live commands of a sandbox being deleted: `KILL` where the provider can (best
    /// effort: the sandbox goes anyway), then `killed` in the journal. Their records stay.
    pub(crate) async fn end_commands_of(
        &self,
        caller: &Caller,
        sandbox: &corral_registry::SandboxRecord,
        call: Option<(
            &dyn corral_provider::SandboxProvider,
            &corral_provider::CallContext,
        )>,
    ) -> Result<(), ServiceError> {
        let journal = &self.inner.journal;
        let live = journal
            .live_in_sandbox(caller.project_id(), sandbox.id)
            .await
            .map_err(registry_error)?;
        for cmd in live {
            let _ = journal.set_kill_reason(cmd.id, CommandState::Killed).await;
            if let (Some((provider, ctx)), Some(native), Some(handle)) =
                (call, sandbox.native_id.as_deref(), cmd.handle.as_deref())
                && provider
                    .capabilities()
                    .commands
                    .signals
                    .contains(&Signal::Kill)
                && let Err(e) = provider
                    .signal_command(ctx, native, handle, Signal::Kill)
                    .await
            {
                tracing::debug!(command_id = %cmd.id, error = %e, "cannot kill a command of a deleted sandbox");
            }
            match journal
                .finish(cmd.id, None, CommandState::Killed, None)
                .await
            {
                Ok(_) | Err(RegistryError::NotFound { .. }) => {}
                Err(e) => return Err(registry_error(e)),
            }
        }
        Ok(())
    }

    /// How many captures this replica runs now.
    pub fn captures_running(&self) -> usize {
        self.inner.live.count()
    }
}

/// A follower of one command's output.
struct Follow {
    ids: (corral_registry::ProjectId, SandboxId, CommandId),
    /// The last event handed out.
    after: u64,
    buffered: std::collections::VecDeque<OutputEvent>,
    done: bool,
    /// The capture's broadcast, when this replica captures the command.
    feed: Option<tokio::sync::broadcast::Receiver<Batch>>,
    /// Caught up with the journal: the feed alone carries what comes next.
    live: bool,
    /// Wakes a follower of a command captured elsewhere.
    waiter: Option<Waiter>,
}

impl Follow {
    /// The next batch from the capture's broadcast; back to the journal when this follower
    /// fell behind (a batch was missed) or the capture ended here.
    async fn read_feed(&mut self) {
        let Some(feed) = &mut self.feed else {
            self.live = false;
            return;
        };
        match feed.recv().await {
            Ok(batch) => {
                // A batch that does not follow on from what was handed out means one was
                // missed (or gaps were merged): the journal has it all.
                if batch.first().is_some_and(|e| e.seq() > self.after + 1) {
                    self.live = false;
                    return;
                }
                self.buffered
                    .extend(batch.iter().filter(|e| e.seq() > self.after).cloned());
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => self.live = false,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                self.feed = None;
                self.live = false;
            }
        }
    }

    /// One page from the journal, subscribed first (to the capture's broadcast here, or to
    /// wake-ups from elsewhere) so that nothing journaled after the read is missed.
    async fn read_journal(&mut self, service: &Service) -> Result<(), ServiceError> {
        let (project, sandbox, id) = self.ids;
        if self.feed.is_none() {
            self.feed = service.inner.live.follow(id);
        }
        if self.feed.is_none() && self.waiter.is_none() {
            self.waiter = Some(service.inner.live.waiter(id));
        }
        let Some(rec) = service
            .inner
            .journal
            .get(project, sandbox, id)
            .await
            .map_err(registry_error)?
        else {
            self.done = true;
            return Ok(());
        };
        let page = service.output_page(&rec, self.after).await?;
        self.done = page.done;
        // The page reached what the record held when read: the rest is in the feed.
        let caught_up = page.next_after + 1 >= rec.next_seq;
        if self.feed.is_some() {
            self.live = caught_up && !page.done;
        } else if page.events.is_empty()
            && !page.done
            && let Some(waiter) = &mut self.waiter
        {
            waiter.changed(tokio::time::Instant::now() + MAX_WAIT).await;
        }
        self.buffered.extend(page.events);
        Ok(())
    }
}

/// What a call on a live command runs with.
struct LiveCall {
    provider: std::sync::Arc<dyn corral_provider::SandboxProvider>,
    ctx: corral_provider::CallContext,
    native: String,
}
