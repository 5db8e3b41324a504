//! The capture of running commands: one task per command, on the replica holding its lease,
//! reads the provider's output once and appends it to the journal; a supervisor hands
//! commands whose owner died (or that were running when this process started) to a new
//! capture, and applies retention.
//!
//! A capture merges what the provider sends by byte offset: bytes the journal already holds
//! are skipped (a provider that replays from the start, or a resume that overlaps), a hole
//! becomes a `gap` of known length, and output whose position the provider cannot say, after
//! Corral lost the stream of a provider that streams only new output, is preceded by a `gap`
//! of unknown length. Memory is bounded per command whatever the output rate: at most one
//! batch ([`BATCH_BYTES`] per stream) is held before it is written, and the provider's stream
//! is not read meanwhile.

use std::sync::Arc;
use std::time::Duration;

use corral_domain::{CommandId, CommandResume, CommandState, OutputStream, Signal};
use corral_provider::{
    CallContext, CommandEvent, CommandSpec, OutputOffsets, ProviderError, SandboxProvider,
};
use corral_registry::{Append, CommandRecord, JournalEvent, RegistryError};
use futures::{FutureExt as _, StreamExt as _};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::Service;
use crate::live::{Feed, exit_event, wire_events};

/// Bytes of one stream held before they are written to the journal.
pub(crate) const BATCH_BYTES: usize = 64 * 1024;
/// The shortest time between two writes of one command's output: output arriving sooner
/// after a write is held (up to [`BATCH_BYTES`]) and written together, so a command that
/// prints a byte at a time costs at most one write (of one event per stream) per period.
/// Output after a quiet spell is written at once.
const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// How long a command may go on after Corral sent `KILL` at its deadline before it is
/// recorded `timed_out` without an exit code.
const KILL_GRACE: Duration = Duration::from_secs(30);
/// The longest pause between two attempts to re-attach to a provider.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What a capture task starts with.
pub(crate) enum Begin {
    /// Start the command at the provider first, and report the outcome on `done`.
    Start {
        spec: CommandSpec,
        done: oneshot::Sender<Result<CommandRecord, ProviderError>>,
    },
    /// Re-attach to a command recorded as running (or find a start whose answer was lost).
    Resume,
}

/// One capture: the command, where its provider is, and how to reach it.
pub(crate) struct Job {
    pub(crate) record: CommandRecord,
    pub(crate) provider: Arc<dyn SandboxProvider>,
    pub(crate) ctx: CallContext,
    pub(crate) native: String,
}

/// The merge of provider events into journal appends, per stream.
struct Merge {
    at: OutputOffsets,
    /// Output with no offset is at an unknown position (a live-only provider re-attached):
    /// the first such chunk of each stream is preceded by a gap of unknown length.
    unknown_position: [bool; 2],
    pending: Vec<Append>,
    pending_bytes: usize,
}

fn index(stream: OutputStream) -> usize {
    match stream {
        OutputStream::Stdout => 0,
        OutputStream::Stderr => 1,
    }
}

impl Merge {
    fn new(rec: &CommandRecord) -> Self {
        Self {
            at: OutputOffsets {
                stdout: rec.stdout_bytes,
                stderr: rec.stderr_bytes,
            },
            unknown_position: [false; 2],
            pending: Vec::new(),
            pending_bytes: 0,
        }
    }

    fn advance(&mut self, stream: OutputStream, to: u64) {
        match stream {
            OutputStream::Stdout => self.at.stdout = self.at.stdout.max(to),
            OutputStream::Stderr => self.at.stderr = self.at.stderr.max(to),
        }
    }

    fn push(&mut self, stream: OutputStream, offset: Option<u64>, mut data: Vec<u8>) {
        let have = self.at.of(stream);
        let start = match offset {
            Some(at) => at,
            None if self.unknown_position[index(stream)] => {
                self.unknown_position[index(stream)] = false;
                self.pending.push(Append::Gap {
                    stream,
                    offset: have,
                    length: None,
                });
                have
            }
            None => have,
        };
        let end = start + data.len() as u64;
        if end <= have {
            return; // Already journaled (a replay or an overlapping resume).
        }
        if start < have {
            data.drain(..(have - start) as usize);
        } else if start > have {
            self.pending.push(Append::Gap {
                stream,
                offset: have,
                length: Some(start - have),
            });
        }
        let from = start.max(have);
        self.pending_bytes += data.len();
        // Contiguous bytes join the stream's last pending chunk, up to a batch, even past the
        // other stream's: a batch holds about one event per stream (the order across streams
        // is kept to within a batch).
        let last_of_stream = self.pending.iter_mut().rev().find(|a| match a {
            Append::Output { stream: s, .. } | Append::Gap { stream: s, .. } => *s == stream,
        });
        if let Some(Append::Output {
            offset: o, data: d, ..
        }) = last_of_stream
            && *o + d.len() as u64 == from
            && d.len() + data.len() <= BATCH_BYTES
        {
            d.extend_from_slice(&data);
        } else {
            self.pending.push(Append::Output {
                stream,
                offset: from,
                data,
            });
        }
        self.advance(stream, end);
    }

    fn take(&mut self) -> Vec<Append> {
        self.pending_bytes = 0;
        std::mem::take(&mut self.pending)
    }
}

/// How a capture ended.
enum Ended {
    /// The command ended and is recorded so.
    Finished,
    /// Another replica holds the lease now, or the command was ended by someone else.
    LeaseLost,
}

impl Service {
    /// Runs a capture in a task of its own (it outlives the request that started it).
    pub(crate) fn spawn_capture(&self, job: Job, begin: Begin) {
        let this = self.clone();
        let id = job.record.id;
        let span = tracing::info_span!("capture", command_id = %id);
        // Opened before the task runs: a reader arriving after this call finds the feed.
        let feed = self.inner.live.open(id, job.record.next_seq);
        tokio::spawn(
            async move {
                match this.capture(job, begin, &feed).await {
                    Ok(Ended::Finished) => {}
                    Ok(Ended::LeaseLost) => {
                        tracing::info!("another replica captures the command now");
                    }
                    Err(e) => tracing::warn!(error = %e, "the capture stopped; the supervisor takes the command over when its lease runs out"),
                }
                // Followers see the feed end and waiters wake: the record tells them the rest.
                this.inner.live.close(id, &feed);
            }
            .instrument(span),
        );
    }

    async fn capture(&self, job: Job, begin: Begin, feed: &Feed) -> Result<Ended, RegistryError> {
        let Job {
            mut record,
            provider,
            ctx,
            native,
        } = job;
        let journal = &self.inner.journal;
        let owner = self.inner.replica.as_str();
        let config = &self.inner.config.commands;
        let caps = provider.capabilities().commands.clone();
        let id = record.id;

        // The start, or finding a start whose answer was lost.
        let mut first = None;
        match begin {
            Begin::Start { spec, done } => {
                // The job's context has no deadline: a start that streams its output hands
                // that stream on, and it must outlive the start call, which alone is bounded.
                let started = tokio::time::timeout(
                    self.inner.config.provider_call_timeout,
                    provider.start_command(&ctx, &native, &spec),
                )
                .await
                .unwrap_or(Err(ProviderError::TimedOutAfterSend {
                    provider: provider.provider(),
                }));
                match started {
                    Ok(started) => {
                        record = journal.started(id, &started.handle).await?;
                        feed.publish(record.next_seq, Vec::new());
                        // The start's own stream only lives as long as the start's context.
                        if let Some(events) = started.events {
                            first = Some(events);
                        }
                        let _ = done.send(Ok(record.clone()));
                    }
                    Err(e) if !e.may_have_been_applied() => {
                        // Nothing ran: no record stays.
                        journal.remove(id).await?;
                        let _ = done.send(Err(e));
                        return Ok(Ended::Finished);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the start's answer was lost; looking for the command");
                        let _ = done.send(Ok(record.clone()));
                    }
                }
            }
            Begin::Resume => {}
        }
        if record.state == CommandState::Starting {
            match self
                .find_lost_start(&record, &provider, &ctx, &native)
                .await?
            {
                Some(r) => record = r,
                None => return Ok(Ended::Finished),
            }
        }
        let Some(handle) = record.handle.clone() else {
            return Ok(Ended::Finished);
        };

        let deadline = Instant::now()
            + remaining(&record, self.inner.journal.database().now()).unwrap_or(Duration::ZERO);
        let mut killed_at: Option<Instant> = None;
        let mut merge = Merge::new(&record);
        let mut attached_once = first.is_some();
        let mut backoff = Duration::from_millis(100);
        let lease = config.lease;
        let mut renew_at = Instant::now() + lease / 3;
        // The first output is written at once (a clock younger than a period cannot be).
        let mut last_write = Instant::now()
            .checked_sub(FLUSH_EVERY)
            .unwrap_or_else(Instant::now);

        loop {
            // Attach (again): from what the journal holds.
            let mut events = match first.take() {
                Some(events) => events,
                None => {
                    let attach = provider.attach_command(&ctx, &native, &handle, merge.at);
                    match tokio::time::timeout(self.inner.config.provider_call_timeout, attach)
                        .await
                        .unwrap_or(Err(ProviderError::TimedOutAfterSend {
                            provider: provider.provider(),
                        })) {
                        Ok(events) => {
                            if attached_once && caps.resume == CommandResume::LiveOnly {
                                merge.unknown_position = [true; 2];
                            }
                            attached_once = true;
                            events
                        }
                        Err(ProviderError::NotFound { .. }) => {
                            let done = journal
                                .finish(id, Some(owner), CommandState::Lost, None)
                                .await;
                            return self.ended(done, feed);
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "cannot attach yet");
                            if !self.pause(id, &mut backoff, &mut renew_at).await? {
                                return Ok(Ended::LeaseLost);
                            }
                            continue;
                        }
                    }
                }
            };
            // Follow the stream until it ends, writing in batches.
            let mut exit: Option<Option<i32>> = None;
            let mut broken = false;
            loop {
                let now = Instant::now();
                if now >= renew_at {
                    if !journal.renew(id, owner, lease).await? {
                        return Ok(Ended::LeaseLost);
                    }
                    renew_at = now + lease / 3;
                }
                if killed_at.is_none() && now >= deadline {
                    killed_at = Some(now);
                    self.kill_at_deadline(&record, &provider, &ctx, &native, &handle)
                        .await;
                }
                if let Some(at) = killed_at
                    && now >= at + KILL_GRACE
                {
                    let done = journal
                        .finish(id, Some(owner), CommandState::TimedOut, None)
                        .await;
                    return self.ended(done, feed);
                }
                let wake = renew_at
                    .min(if killed_at.is_none() {
                        deadline
                    } else {
                        now + KILL_GRACE
                    })
                    .min(now + Duration::from_secs(1));
                // Wait for output when none is pending; with output pending, take more until
                // the write is due, then whatever is ready without waiting.
                let due = last_write + FLUSH_EVERY;
                let next = if merge.pending.is_empty() {
                    tokio::time::timeout_at(wake, events.next()).await.ok()
                } else if now < due {
                    tokio::time::timeout_at(due.min(wake), events.next())
                        .await
                        .ok()
                } else {
                    events.next().now_or_never()
                };
                let idle = next.is_none() && Instant::now() >= due;
                match next {
                    None => {}
                    Some(Some(Ok(CommandEvent::Output {
                        stream,
                        offset,
                        data,
                    }))) => merge.push(stream, offset, data),
                    Some(Some(Ok(CommandEvent::Exit { exit_code }))) => {
                        exit = Some(exit_code);
                    }
                    Some(Some(Err(ProviderError::NotFound { .. }))) => {
                        exit = Some(None);
                        broken = true;
                    }
                    Some(Some(Err(e))) => {
                        tracing::debug!(error = %e, "the provider's stream broke");
                        broken = true;
                    }
                    Some(None) => broken = true,
                }
                // Output that never pauses is written once a period past due all the same.
                let overdue = Instant::now() >= due + FLUSH_EVERY;
                let flush = exit.is_some()
                    || broken
                    || merge.pending_bytes >= BATCH_BYTES
                    || ((idle || overdue) && !merge.pending.is_empty());
                if flush && !merge.pending.is_empty() {
                    let appends = merge.take();
                    let count = appends.len() as u64;
                    // What followers here get from memory, numbered once the write answers.
                    let copy = feed.followed().then(|| appends.clone());
                    last_write = Instant::now();
                    match journal
                        .append(id, owner, appends, config.max_output_bytes_per_command)
                        .await
                    {
                        Ok(r) => {
                            let first = r.next_seq.saturating_sub(count);
                            feed.publish(
                                r.next_seq,
                                copy.map_or_else(Vec::new, |a| numbered(first, a)),
                            );
                            record = r;
                        }
                        Err(RegistryError::LeaseLost { .. }) => return Ok(Ended::LeaseLost),
                        Err(e) => return Err(e),
                    }
                    backoff = Duration::from_millis(100);
                }
                if let Some(code) = exit {
                    let state = if broken && code.is_none() {
                        CommandState::Lost
                    } else {
                        CommandState::Exited
                    };
                    let done = journal.finish(id, Some(owner), state, code).await;
                    return self.ended(done, feed);
                }
                if broken {
                    break;
                }
            }
            drop(events);
            if !self.pause(id, &mut backoff, &mut renew_at).await? {
                return Ok(Ended::LeaseLost);
            }
        }
    }

    fn ended(
        &self,
        done: Result<CommandRecord, RegistryError>,
        feed: &Feed,
    ) -> Result<Ended, RegistryError> {
        match done {
            Ok(r) => {
                feed.publish(r.next_seq, vec![exit_event(&r)]);
                Ok(Ended::Finished)
            }
            Err(RegistryError::LeaseLost { .. }) => Ok(Ended::LeaseLost),
            Err(e) => Err(e),
        }
    }

    /// Waits before re-attaching (exponential, capped), keeping the lease; `false` when the
    /// lease is lost.
    async fn pause(
        &self,
        id: CommandId,
        backoff: &mut Duration,
        renew_at: &mut Instant,
    ) -> Result<bool, RegistryError> {
        tokio::time::sleep(*backoff).await;
        *backoff = (*backoff * 2).min(MAX_BACKOFF);
        let lease = self.inner.config.commands.lease;
        if !self
            .inner
            .journal
            .renew(id, &self.inner.replica, lease)
            .await?
        {
            return Ok(false);
        }
        *renew_at = Instant::now() + lease / 3;
        Ok(true)
    }

    /// Sends the strongest signal the provider can deliver at a command's deadline, and notes
    /// that it timed out.
    async fn kill_at_deadline(
        &self,
        record: &CommandRecord,
        provider: &Arc<dyn SandboxProvider>,
        ctx: &CallContext,
        native: &str,
        handle: &str,
    ) {
        let _ = self
            .inner
            .journal
            .set_kill_reason(record.id, CommandState::TimedOut)
            .await;
        let signals = &provider.capabilities().commands.signals;
        let Some(sig) = [Signal::Kill, Signal::Term]
            .into_iter()
            .find(|s| signals.contains(s))
        else {
            return;
        };
        let ctx = ctx
            .clone()
            .with_timeout(self.inner.config.provider_call_timeout);
        if let Err(e) = provider.signal_command(&ctx, native, handle, sig).await {
            tracing::warn!(error = %e, "cannot kill the command at its deadline");
        }
    }

    /// A command whose start's answer was lost: looks it up at the provider until it is found
    /// (then it runs) or the grace period has passed (then it is `lost`: it never ran, or
    /// cannot be found again). `None` when it was settled as lost.
    async fn find_lost_start(
        &self,
        record: &CommandRecord,
        provider: &Arc<dyn SandboxProvider>,
        ctx: &CallContext,
        native: &str,
    ) -> Result<Option<CommandRecord>, RegistryError> {
        let journal = &self.inner.journal;
        let owner = self.inner.replica.as_str();
        let mut backoff = Duration::from_millis(200);
        let mut renew_at = Instant::now();
        loop {
            let call_ctx = ctx
                .clone()
                .with_timeout(self.inner.config.provider_call_timeout);
            match provider.find_command(&call_ctx, native, &record.id).await {
                Ok(Some(handle)) => {
                    tracing::info!("found the command whose start answer was lost");
                    return match journal.started(record.id, &handle).await {
                        Ok(r) => Ok(Some(r)),
                        Err(RegistryError::Conflict { .. }) => Ok(None),
                        Err(e) => Err(e),
                    };
                }
                Ok(None)
                | Err(ProviderError::NotFound { .. } | ProviderError::Unsupported { .. })
                    if self.start_grace_over(record) =>
                {
                    let _ = journal
                        .finish(record.id, Some(owner), CommandState::Lost, None)
                        .await?;
                    return Ok(None);
                }
                Ok(None) | Err(_) => {}
            }
            if !self.pause(record.id, &mut backoff, &mut renew_at).await? {
                return Ok(None);
            }
        }
    }

    fn start_grace_over(&self, record: &CommandRecord) -> bool {
        let grace =
            chrono::Duration::from_std(self.inner.config.reconcile_grace).unwrap_or_default();
        record.started_at + grace < self.inner.journal.database().now()
    }

    /// One supervisor pass: takes over live commands whose capture lease ran out (their
    /// owner died, or this process restarted), then applies retention. Answers how many
    /// captures it started.
    pub async fn supervise_commands_once(&self) -> usize {
        let journal = &self.inner.journal;
        let mut started = 0;
        match journal.unowned(64).await {
            Ok(records) => {
                for rec in records {
                    if self.inner.live.captures(rec.id) {
                        continue;
                    }
                    match journal
                        .claim(
                            rec.id,
                            &self.inner.replica,
                            self.inner.config.commands.lease,
                        )
                        .await
                    {
                        Ok(Some(claimed)) => {
                            if self.resume_capture(claimed).await {
                                started += 1;
                            }
                        }
                        Ok(None) => {}
                        Err(e) => tracing::warn!(error = %e, "cannot claim a command's capture"),
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot list commands needing a capture"),
        }
        self.apply_command_retention().await;
        started
    }

    /// Starts a capture of a claimed command, with the project's stored access; a command
    /// whose sandbox is gone, or whose provider cannot be reached without the inline
    /// credential its start used (never stored), is recorded `lost`.
    async fn resume_capture(&self, rec: CommandRecord) -> bool {
        let journal = &self.inner.journal;
        let caller = crate::Caller::trusted(rec.project_id);
        let sandbox = match self
            .inner
            .registry
            .sandbox(rec.project_id, rec.sandbox_id)
            .await
        {
            Ok(Some(s)) => s,
            Ok(None) => {
                let _ = journal.finish(rec.id, None, CommandState::Lost, None).await;
                return false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the command's sandbox");
                let _ = journal.release(rec.id, &self.inner.replica).await;
                return false;
            }
        };
        let (Some(native), None) = (sandbox.native_id.clone(), sandbox.deleted_at) else {
            let _ = journal
                .finish(rec.id, None, CommandState::Killed, None)
                .await;
            return false;
        };
        let Ok(provider) = self.provider(sandbox.provider()).cloned() else {
            let _ = journal.release(rec.id, &self.inner.replica).await;
            return false;
        };
        let access = self
            .access(
                &caller,
                sandbox.provider(),
                crate::InlineAccess::default(),
                Some(&crate::access::recorded_context(&sandbox.metadata)),
                "exec",
            )
            .await;
        let access = match access {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(command_id = %rec.id, error = %e, "cannot reach the command's provider again: recorded lost");
                let _ = journal.finish(rec.id, None, CommandState::Lost, None).await;
                return false;
            }
        };
        self.spawn_capture(
            Job {
                record: rec,
                provider,
                ctx: access.ctx,
                native,
            },
            Begin::Resume,
        );
        true
    }

    async fn apply_command_retention(&self) {
        let journal = &self.inner.journal;
        let config = &self.inner.config.commands;
        if let Ok(projects) = journal.projects_holding_output().await {
            for project in projects {
                if let Err(e) = journal
                    .trim_project(project, config.max_output_bytes_per_project)
                    .await
                {
                    tracing::warn!(error = %e, "cannot apply the project's output retention");
                }
            }
        }
        let keep = chrono::Duration::from_std(config.retention).unwrap_or(chrono::Duration::MAX);
        let before = journal.database().now() - keep;
        if let Err(e) = journal.reap(before, 500).await {
            tracing::warn!(error = %e, "cannot remove expired commands");
        }
        self.prune_events_once().await;
    }

    /// Runs [`Service::supervise_commands_once`] every `interval` until the runtime shuts
    /// down. The first pass runs at once: commands running when the process last stopped are
    /// taken over as soon as their leases run out.
    pub fn spawn_command_supervisor(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                this.supervise_commands_once().await;
            }
        })
    }

    /// Wakes this replica's readers of commands captured by other replicas as those commit
    /// (PostgreSQL `LISTEN`, on a connection of its own, re-connected after a pause when it
    /// breaks); nothing on SQLite, whose one process captures every command.
    pub fn spawn_progress_listener(&self) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(100);
            loop {
                match this.inner.journal.progress().await {
                    Ok(None) => return,
                    Ok(Some(mut ids)) => {
                        this.inner.live.set_listening(true);
                        backoff = Duration::from_millis(100);
                        while let Some(id) = ids.next().await {
                            this.inner.live.wake(id);
                        }
                        this.inner.live.set_listening(false);
                        tracing::warn!(
                            "the command notification connection broke; polling until it is back"
                        );
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot listen for command notifications; polling meanwhile");
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        })
    }

    /// Gives up the leases of every capture this process runs (a graceful shutdown), so the
    /// next process, or another replica, takes them over at once.
    pub async fn release_captures(&self) {
        for id in self.inner.live.ids() {
            let _ = self.inner.journal.release(id, &self.inner.replica).await;
        }
    }
}

/// Appended output and gaps as the wire events the journal now holds for them, numbered from
/// `first` (one event per append, in order).
fn numbered(first: u64, appends: Vec<Append>) -> Vec<corral_domain::OutputEvent> {
    let events = appends
        .into_iter()
        .zip(first..)
        .map(|(a, seq)| match a {
            Append::Output {
                stream,
                offset,
                data,
            } => JournalEvent {
                seq,
                stream,
                offset,
                length: Some(data.len() as u64),
                data: Some(data),
            },
            Append::Gap {
                stream,
                offset,
                length,
            } => JournalEvent {
                seq,
                stream,
                offset,
                data: None,
                length,
            },
        })
        .collect();
    wire_events(events)
}

/// Time left before the command's deadline, as of `now`.
pub(crate) fn remaining(rec: &CommandRecord, now: corral_domain::Timestamp) -> Option<Duration> {
    let end = rec.started_at
        + chrono::Duration::seconds(i64::try_from(rec.timeout_seconds).unwrap_or(i64::MAX / 2));
    (end - now).to_std().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> CommandRecord {
        CommandRecord {
            id: CommandId::new(),
            project_id: corral_registry::ProjectId::new(),
            sandbox_id: corral_domain::SandboxId::new(corral_domain::Provider::Local),
            operation_id: corral_domain::OperationId::new(),
            command: "x".into(),
            tag: None,
            state: CommandState::Running,
            exit_code: None,
            handle: Some("h".into()),
            stdin_open: false,
            stdin_bytes: 0,
            timeout_seconds: 60,
            stdout_bytes: 5,
            stderr_bytes: 0,
            kept_bytes: 5,
            next_seq: 2,
            kill_reason: None,
            owner: None,
            lease_until: None,
            started_at: chrono::Utc::now(),
            ended_at: None,
            updated_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn the_merge_skips_what_is_held_and_marks_holes_and_unknown_positions() {
        let mut m = Merge::new(&rec());
        // A replay from the start: the first five bytes are held already.
        m.push(OutputStream::Stdout, Some(0), b"hello world".to_vec());
        // A hole: bytes 11..14 never came.
        m.push(OutputStream::Stdout, Some(14), b"!".to_vec());
        // Stderr with no position on a first attach continues at 0.
        m.push(OutputStream::Stderr, None, b"e1".to_vec());
        m.unknown_position = [true; 2];
        m.push(OutputStream::Stderr, None, b"e2".to_vec());
        m.push(OutputStream::Stderr, None, b"e3".to_vec());
        assert_eq!(
            m.take(),
            [
                Append::Output {
                    stream: OutputStream::Stdout,
                    offset: 5,
                    data: b" world".to_vec()
                },
                Append::Gap {
                    stream: OutputStream::Stdout,
                    offset: 11,
                    length: Some(3)
                },
                Append::Output {
                    stream: OutputStream::Stdout,
                    offset: 14,
                    data: b"!".to_vec()
                },
                Append::Output {
                    stream: OutputStream::Stderr,
                    offset: 0,
                    data: b"e1".to_vec()
                },
                Append::Gap {
                    stream: OutputStream::Stderr,
                    offset: 2,
                    length: None
                },
                Append::Output {
                    stream: OutputStream::Stderr,
                    offset: 2,
                    data: b"e2e3".to_vec()
                },
            ]
        );
        assert_eq!(
            m.at,
            OutputOffsets {
                stdout: 15,
                stderr: 6
            }
        );
        // Everything again: nothing new.
        m.push(OutputStream::Stdout, Some(0), b"hello world!!!!".to_vec());
        assert!(m.take().is_empty());
    }
}
