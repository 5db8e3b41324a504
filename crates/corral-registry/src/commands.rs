//! Commands as durable jobs: their records and their output journal.
//!
//! A command row carries its state, the byte counts of its streams, the next event's sequence
//! number and the lease of the one replica capturing its output. Output lives in
//! `command_events`, one row per chunk in sequence order: clients resume after a sequence
//! number, so what a row holds never changes except that retention may drop its bytes. A
//! command's own budget (bytes and events) replaces the oldest events by one gap per stream
//! at the last dropped sequence numbers — readers saw the same as one gap anyway — so rows
//! are bounded as well as bytes; a project's budget only empties rows (they read as gaps).
//!
//! Every write that follows the provider's stream is checked against the capture lease, so a
//! replica that lost its lease (it stalled, another took over) cannot append or end the
//! command behind the new owner's back.

use std::time::Duration;

use corral_domain::{
    CommandId, CommandState, EventType, OperationId, OutputStream, SandboxId, Timestamp,
};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::{Database, from_micros, run, to_micros, write_tx};
use crate::error::{RegistryError, Result, db_error};
use crate::events::{NewEventRow, append_event};
use crate::model::ProjectId;
use crate::progress::Announce as _;
use crate::schema::{command_events as ev, commands as cm};

/// A command to record before the provider is asked to start it.
#[derive(Debug, Clone)]
pub struct NewCommand {
    /// Its id.
    pub id: CommandId,
    /// The owning project.
    pub project_id: ProjectId,
    /// The sandbox it runs in.
    pub sandbox_id: SandboxId,
    /// The start operation (unique; an idempotent start attaches it to its key).
    pub operation_id: OperationId,
    /// The command line.
    pub command: String,
    /// The caller's label.
    pub tag: Option<String>,
    /// Whether a stdin channel is opened.
    pub stdin: bool,
    /// The deadline Corral enforces.
    pub timeout_seconds: u64,
    /// The replica that starts it: it holds the capture lease from the start.
    pub owner: String,
    /// How long that lease lasts.
    pub lease: Duration,
}

/// One command record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRecord {
    /// Its id.
    pub id: CommandId,
    /// The owning project.
    pub project_id: ProjectId,
    /// The sandbox it runs in.
    pub sandbox_id: SandboxId,
    /// The start operation.
    pub operation_id: OperationId,
    /// The command line.
    pub command: String,
    /// The caller's label.
    pub tag: Option<String>,
    /// Its state.
    pub state: CommandState,
    /// Its exit code, once known.
    pub exit_code: Option<i32>,
    /// The provider's handle, once the start is confirmed.
    pub handle: Option<String>,
    /// Whether stdin is open.
    pub stdin_open: bool,
    /// Bytes of stdin accepted.
    pub stdin_bytes: u64,
    /// The deadline Corral enforces, in seconds from `started_at`.
    pub timeout_seconds: u64,
    /// Bytes of stdout so far (journaled or lost).
    pub stdout_bytes: u64,
    /// Bytes of stderr so far (journaled or lost).
    pub stderr_bytes: u64,
    /// Bytes of output the journal still holds (retention counts these).
    pub kept_bytes: u64,
    /// The sequence number the next event gets; once the command ended, the exit event's.
    pub next_seq: u64,
    /// The state to report when it ends after Corral signalled it (`killed`, `timed_out`).
    pub kill_reason: Option<CommandState>,
    /// The replica capturing its output, and until when.
    pub owner: Option<String>,
    /// Until when `owner` holds the capture lease.
    pub lease_until: Option<Timestamp>,
    /// When it was started.
    pub started_at: Timestamp,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// When the record last changed.
    pub updated_at: Timestamp,
}

impl CommandRecord {
    /// The bytes of `stream` so far.
    pub fn bytes_of(&self, stream: OutputStream) -> u64 {
        match stream {
            OutputStream::Stdout => self.stdout_bytes,
            OutputStream::Stderr => self.stderr_bytes,
        }
    }

    /// The wire form.
    pub fn to_command(&self) -> corral_domain::Command {
        corral_domain::Command {
            id: self.id,
            sandbox_id: self.sandbox_id,
            command: self.command.clone(),
            tag: self.tag.clone(),
            state: self.state,
            exit_code: self.exit_code,
            stdin_open: self.stdin_open,
            stdin_bytes: self.stdin_bytes,
            timeout_seconds: self.timeout_seconds,
            started_at: self.started_at,
            ended_at: self.ended_at,
            stdout_bytes: self.stdout_bytes,
            stderr_bytes: self.stderr_bytes,
        }
    }
}

/// A page of a sandbox's commands, newest first.
#[derive(Debug, Clone)]
pub struct CommandRecordPage {
    /// The records.
    pub items: Vec<CommandRecord>,
    /// The cursor of the next page, if there is one.
    pub next_cursor: Option<String>,
}

/// What to append to a command's journal: bytes of a stream at an offset, or a gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Append {
    /// Bytes of `stream` starting at `offset`.
    Output {
        /// The stream.
        stream: OutputStream,
        /// Where the bytes start in their stream.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Bytes of `stream` from `offset` that are lost; `length` when known.
    Gap {
        /// The stream.
        stream: OutputStream,
        /// Where the loss starts.
        offset: u64,
        /// How many bytes, when known.
        length: Option<u64>,
    },
}

/// One stored journal event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEvent {
    /// Its sequence number.
    pub seq: u64,
    /// Its stream.
    pub stream: OutputStream,
    /// Where it starts in its stream.
    pub offset: u64,
    /// Its bytes; `None` for lost or dropped bytes (a gap).
    pub data: Option<Vec<u8>>,
    /// How many bytes a gap covers, when known.
    pub length: Option<u64>,
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = cm)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
struct CommandRow {
    id: String,
    project_id: String,
    sandbox_id: String,
    operation_id: String,
    command: String,
    tag: Option<String>,
    state: String,
    exit_code: Option<i32>,
    handle: Option<String>,
    stdin_open: bool,
    stdin_bytes: i64,
    timeout_seconds: i64,
    stdout_bytes: i64,
    stderr_bytes: i64,
    kept_bytes: i64,
    next_seq: i64,
    kill_reason: Option<String>,
    owner: Option<String>,
    lease_until: Option<i64>,
    started_at: i64,
    ended_at: Option<i64>,
    updated_at: i64,
}

fn corrupt(what: &str) -> RegistryError {
    RegistryError::Internal {
        message: format!("stored command {what} cannot be read"),
    }
}

fn unsigned(v: i64, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| corrupt(what))
}

fn signed(v: u64) -> i64 {
    // Byte counts and sequence numbers stay far below 2^63.
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl CommandRow {
    fn into_record(self) -> Result<CommandRecord> {
        Ok(CommandRecord {
            id: self.id.parse().map_err(|_| corrupt("id"))?,
            project_id: crate::rows::parse_project_id(&self.project_id)?,
            sandbox_id: self.sandbox_id.parse().map_err(|_| corrupt("sandbox id"))?,
            operation_id: self
                .operation_id
                .parse()
                .map_err(|_| corrupt("operation"))?,
            command: self.command,
            tag: self.tag,
            state: self.state.parse().map_err(|_| corrupt("state"))?,
            exit_code: self.exit_code,
            handle: self.handle,
            stdin_open: self.stdin_open,
            stdin_bytes: unsigned(self.stdin_bytes, "stdin count")?,
            timeout_seconds: unsigned(self.timeout_seconds, "timeout")?,
            stdout_bytes: unsigned(self.stdout_bytes, "stdout count")?,
            stderr_bytes: unsigned(self.stderr_bytes, "stderr count")?,
            kept_bytes: unsigned(self.kept_bytes, "kept count")?,
            next_seq: unsigned(self.next_seq, "sequence")?,
            kill_reason: self
                .kill_reason
                .map(|r| r.parse().map_err(|_| corrupt("kill reason")))
                .transpose()?,
            owner: self.owner,
            lease_until: self.lease_until.map(from_micros).transpose()?,
            started_at: from_micros(self.started_at)?,
            ended_at: self.ended_at.map(from_micros).transpose()?,
            updated_at: from_micros(self.updated_at)?,
        })
    }
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = ev)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
struct EventRow {
    command_id: String,
    seq: i64,
    kind: i16,
    byte_offset: i64,
    length: Option<i64>,
    data: Option<Vec<u8>>,
}

const STDOUT: i16 = 0;
const STDERR: i16 = 1;

fn kind_of(stream: OutputStream) -> i16 {
    match stream {
        OutputStream::Stdout => STDOUT,
        OutputStream::Stderr => STDERR,
    }
}

impl EventRow {
    fn into_event(self) -> Result<JournalEvent> {
        Ok(JournalEvent {
            seq: unsigned(self.seq, "event sequence")?,
            stream: match self.kind {
                STDOUT => OutputStream::Stdout,
                STDERR => OutputStream::Stderr,
                _ => return Err(corrupt("event kind")),
            },
            offset: unsigned(self.byte_offset, "event offset")?,
            length: self
                .length
                .map(|l| unsigned(l, "event length"))
                .transpose()?,
            data: self.data,
        })
    }
}

const LIVE: [&str; 2] = ["starting", "running"];

/// One stored event's place, for a trim: sequence, stream kind, offset, length, bytes held.
type EventPlace = (i64, i16, i64, Option<i64>, bool);

/// The gaps that replace the dropped `places` (oldest first): one per stream, from its first
/// dropped offset to the end of its last (unknown length when any dropped part was), at the
/// last dropped sequence numbers (so a reader resuming anywhere among the dropped events is
/// told what it cannot have, and the stored numbers stay contiguous: counting the events is
/// a subtraction).
fn merged_gaps(id: &str, places: &[EventPlace]) -> Vec<EventRow> {
    let mut gaps: Vec<EventRow> = Vec::with_capacity(2);
    for &(seq, kind, offset, length, _) in places {
        match gaps.iter_mut().find(|g| g.kind == kind) {
            Some(g) => {
                g.seq = seq;
                g.length = match (g.length, length) {
                    (Some(_), Some(l)) => Some(offset + l - g.byte_offset),
                    _ => None,
                };
            }
            None => gaps.push(EventRow {
                command_id: id.to_owned(),
                seq,
                kind,
                byte_offset: offset,
                length,
                data: None,
            }),
        }
    }
    gaps.sort_by_key(|g| g.seq);
    let upto = places.last().map_or(0, |p| p.0);
    let n = gaps.len() as i64;
    for (g, seq) in gaps.iter_mut().zip(upto - n + 1..) {
        g.seq = seq;
    }
    gaps
}

/// Drops a command's oldest events while more than `$max_kept` bytes are held or more than
/// `$keep_rows` events stored; the dropped ones become one gap per stream
/// ([`merged_gaps`]). Evaluates to the bytes still held. Inside a write transaction.
macro_rules! trim_events {
    ($c:expr, $id:expr, $kept:expr, $max_kept:expr, $keep_rows:expr) => {{
        let places: Vec<EventPlace> = ev::table
            .filter(ev::command_id.eq($id))
            .order(ev::seq.asc())
            .select((
                ev::seq,
                ev::kind,
                ev::byte_offset,
                ev::length,
                ev::data.is_not_null(),
            ))
            .load($c)
            .await
            .map_err(db_error)?;
        let (mut kept, mut rows) = ($kept, i64::try_from(places.len()).unwrap_or(i64::MAX));
        let mut dropped = 0;
        for &(_, _, _, length, held) in &places {
            if kept <= $max_kept && rows <= $keep_rows {
                break;
            }
            if held {
                kept -= length.unwrap_or(0);
            }
            rows -= 1;
            dropped += 1;
        }
        let gone = &places[..dropped];
        let gaps = merged_gaps($id, gone);
        // Dropped events that are already one gap per stream stay as they are.
        if gaps.len() < gone.len() || gone.iter().any(|p| p.4) {
            let upto = gone.last().map_or(0, |p| p.0);
            diesel::delete(
                ev::table
                    .filter(ev::command_id.eq($id))
                    .filter(ev::seq.le(upto)),
            )
            .execute($c)
            .await
            .map_err(db_error)?;
            for gap in &gaps {
                diesel::insert_into(ev::table)
                    .values(gap)
                    .execute($c)
                    .await
                    .map_err(db_error)?;
            }
        }
        kept
    }};
}

/// Cursor of a command listing: `<startedAt micros>_<command id>`.
fn encode_cursor(started_at: i64, id: &str) -> String {
    format!("{started_at}_{id}")
}

fn parse_cursor(cursor: &str) -> Result<(i64, String)> {
    let (started, id) = cursor.split_once('_').ok_or(RegistryError::InvalidCursor)?;
    if started.is_empty() || started.len() > 18 || !started.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RegistryError::InvalidCursor);
    }
    let started: i64 = started.parse().map_err(|_| RegistryError::InvalidCursor)?;
    let id: CommandId = id.parse().map_err(|_| RegistryError::InvalidCursor)?;
    Ok((started, id.to_string()))
}

/// A regular expression matching exactly the cursors [`CommandJournal::list`] accepts.
pub fn command_cursor_pattern() -> String {
    format!("^[0-9]{{1,18}}_cmd_{}$", corral_domain::ULID_PATTERN)
}

/// Commands and their output journal, in the registry's database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CommandJournal {
    db: Database,
    max_events: u64,
}

/// Events kept per command by default ([`CommandJournal::with_max_events`]).
pub const DEFAULT_MAX_EVENTS_PER_COMMAND: u64 = 65_536;

impl CommandJournal {
    /// The journal in `db`, keeping at most [`DEFAULT_MAX_EVENTS_PER_COMMAND`] events per
    /// command.
    pub fn new(db: Database) -> Self {
        Self {
            db,
            max_events: DEFAULT_MAX_EVENTS_PER_COMMAND,
        }
    }

    /// Keeps at most `max` events per command (at least 16): past it, an append drops the
    /// oldest events' bytes as it does past the byte budget, down to three quarters of `max`
    /// so that the trim is not repeated at every append. Rows are bounded as well as bytes:
    /// a command printing a byte at a time cannot grow the table without end.
    pub fn with_max_events(mut self, max: u64) -> Self {
        self.max_events = max.max(16);
        self
    }

    /// The database.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// The ids of commands whose journal moved (a start, an append, an end) on any replica,
    /// as each commits: PostgreSQL `LISTEN` on a connection of its own, outside the pool;
    /// `None` on SQLite (one process). The stream ends when that connection breaks, and
    /// notifications sent meanwhile are lost: the caller listens again and, until then, polls.
    pub async fn progress(&self) -> Result<Option<futures::stream::BoxStream<'static, CommandId>>> {
        crate::progress::listen(&self.db).await
    }

    /// Records a command (state `starting`, the lease held by `new.owner`) before the provider
    /// is asked to start it.
    pub async fn insert(&self, new: NewCommand) -> Result<CommandRecord> {
        let now = to_micros(self.db.now());
        let lease = now + lease_micros(new.lease);
        let row = CommandRow {
            id: new.id.to_string(),
            project_id: new.project_id.to_string(),
            sandbox_id: new.sandbox_id.to_string(),
            operation_id: new.operation_id.to_string(),
            command: new.command,
            tag: new.tag,
            state: CommandState::Starting.as_str().to_owned(),
            exit_code: None,
            handle: None,
            stdin_open: new.stdin,
            stdin_bytes: 0,
            timeout_seconds: signed(new.timeout_seconds),
            stdout_bytes: 0,
            stderr_bytes: 0,
            kept_bytes: 0,
            next_seq: 1,
            kill_reason: None,
            owner: Some(new.owner),
            lease_until: Some(lease),
            started_at: now,
            ended_at: None,
            updated_at: now,
        };
        let row: CommandRow = run!(self, |c| diesel::insert_into(cm::table)
            .values(&row)
            .returning(CommandRow::as_returning())
            .get_result(c)
            .await
            .map_err(db_error))?;
        row.into_record()
    }

    /// The project's command `id` in `sandbox`, if there is one.
    pub async fn get(
        &self,
        project: ProjectId,
        sandbox: SandboxId,
        id: CommandId,
    ) -> Result<Option<CommandRecord>> {
        let (project, sandbox, id) = (project.to_string(), sandbox.to_string(), id.to_string());
        let row: Option<CommandRow> = run!(self, |c| cm::table
            .filter(cm::id.eq(id))
            .filter(cm::project_id.eq(project))
            .filter(cm::sandbox_id.eq(sandbox))
            .select(CommandRow::as_select())
            .first(c)
            .await
            .optional()
            .map_err(db_error))?;
        row.map(CommandRow::into_record).transpose()
    }

    /// The command `id`, whatever its project (for the capture, which was handed the id).
    pub async fn by_id(&self, id: CommandId) -> Result<Option<CommandRecord>> {
        let id = id.to_string();
        let row: Option<CommandRow> = run!(self, |c| cm::table
            .filter(cm::id.eq(id))
            .select(CommandRow::as_select())
            .first(c)
            .await
            .optional()
            .map_err(db_error))?;
        row.map(CommandRow::into_record).transpose()
    }

    /// The command started by `operation`, if any (settles an idempotency key).
    pub async fn by_operation(&self, operation: OperationId) -> Result<Option<CommandRecord>> {
        let op = operation.to_string();
        let row: Option<CommandRow> = run!(self, |c| cm::table
            .filter(cm::operation_id.eq(op))
            .select(CommandRow::as_select())
            .first(c)
            .await
            .optional()
            .map_err(db_error))?;
        row.map(CommandRow::into_record).transpose()
    }

    /// Removes a command the provider definitively refused to start (nothing ran).
    pub async fn remove(&self, id: CommandId) -> Result<()> {
        let id = id.to_string();
        run!(self, |c| diesel::delete(cm::table.filter(cm::id.eq(id)))
            .execute(c)
            .await
            .map(|_| ())
            .map_err(db_error))
    }

    /// One page of the sandbox's commands, newest first, optionally only those in `state`.
    pub async fn list(
        &self,
        project: ProjectId,
        sandbox: SandboxId,
        state: Option<CommandState>,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<CommandRecordPage> {
        let after = cursor.map(parse_cursor).transpose()?;
        let (project, sandbox) = (project.to_string(), sandbox.to_string());
        let fetch = i64::from(limit) + 1;
        let mut rows: Vec<CommandRow> = run!(self, |c| {
            let mut q = cm::table
                .filter(cm::project_id.eq(project))
                .filter(cm::sandbox_id.eq(sandbox))
                .order((cm::started_at.desc(), cm::id.desc()))
                .limit(fetch)
                .select(CommandRow::as_select())
                .into_boxed();
            if let Some(state) = state {
                q = q.filter(cm::state.eq(state.as_str()));
            }
            if let Some((started, id)) = after {
                q = q
                    .filter(cm::started_at.le(started))
                    .filter(cm::started_at.lt(started).or(cm::id.lt(id)));
            }
            q.load(c).await.map_err(db_error)
        })?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match rows.last() {
            Some(last) if more => Some(encode_cursor(last.started_at, &last.id)),
            _ => None,
        };
        Ok(CommandRecordPage {
            items: rows
                .into_iter()
                .map(CommandRow::into_record)
                .collect::<Result<_>>()?,
            next_cursor,
        })
    }

    /// Commands of `sandbox` that have not ended.
    pub async fn live_in_sandbox(
        &self,
        project: ProjectId,
        sandbox: SandboxId,
    ) -> Result<Vec<CommandRecord>> {
        let (project, sandbox) = (project.to_string(), sandbox.to_string());
        let rows: Vec<CommandRow> = run!(self, |c| cm::table
            .filter(cm::project_id.eq(project))
            .filter(cm::sandbox_id.eq(sandbox))
            .filter(cm::state.eq_any(LIVE))
            .select(CommandRow::as_select())
            .load(c)
            .await
            .map_err(db_error))?;
        rows.into_iter().map(CommandRow::into_record).collect()
    }

    /// How many commands of the project have not ended.
    pub async fn count_live(&self, project: ProjectId) -> Result<u64> {
        let project = project.to_string();
        let n: i64 = run!(self, |c| cm::table
            .filter(cm::project_id.eq(project))
            .filter(cm::state.eq_any(LIVE))
            .count()
            .get_result(c)
            .await
            .map_err(db_error))?;
        unsigned(n, "live count")
    }

    /// Live commands whose capture lease ran out (their owner died or let go), oldest
    /// lease first: what a replica should take over.
    pub async fn unowned(&self, limit: u32) -> Result<Vec<CommandRecord>> {
        let now = to_micros(self.db.now());
        let rows: Vec<CommandRow> = run!(self, |c| cm::table
            .filter(cm::state.eq_any(LIVE))
            .filter(cm::lease_until.is_null().or(cm::lease_until.le(now)))
            .order(cm::lease_until.asc())
            .limit(i64::from(limit))
            .select(CommandRow::as_select())
            .load(c)
            .await
            .map_err(db_error))?;
        rows.into_iter().map(CommandRow::into_record).collect()
    }

    /// Takes the capture lease of a live command whose lease ran out (or that `owner` already
    /// holds): the record, or `None` when another replica holds it or the command ended.
    pub async fn claim(
        &self,
        id: CommandId,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<CommandRecord>> {
        let now = to_micros(self.db.now());
        let (id, owner) = (id.to_string(), owner.to_owned());
        let until = now + lease_micros(lease);
        let row: Option<CommandRow> = run!(self, |c| diesel::update(
            cm::table
                .filter(cm::id.eq(id))
                .filter(cm::state.eq_any(LIVE))
                .filter(
                    cm::lease_until
                        .is_null()
                        .or(cm::lease_until.le(now))
                        .or(cm::owner.eq(owner.clone()))
                )
        )
        .set((cm::owner.eq(owner.clone()), cm::lease_until.eq(until)))
        .returning(CommandRow::as_returning())
        .get_result(c)
        .await
        .optional()
        .map_err(db_error))?;
        row.map(CommandRow::into_record).transpose()
    }

    /// Extends `owner`'s lease; `false` when it no longer holds it (stop capturing).
    pub async fn renew(&self, id: CommandId, owner: &str, lease: Duration) -> Result<bool> {
        let until = to_micros(self.db.now()) + lease_micros(lease);
        let (id, owner) = (id.to_string(), owner.to_owned());
        let n = run!(self, |c| diesel::update(
            cm::table
                .filter(cm::id.eq(id))
                .filter(cm::owner.eq(owner))
                .filter(cm::state.eq_any(LIVE))
        )
        .set(cm::lease_until.eq(until))
        .execute(c)
        .await
        .map_err(db_error))?;
        Ok(n == 1)
    }

    /// Gives the lease up at once (a graceful shutdown), so another replica or the next start
    /// takes the capture over without waiting for it to run out.
    pub async fn release(&self, id: CommandId, owner: &str) -> Result<()> {
        let (id, owner) = (id.to_string(), owner.to_owned());
        run!(self, |c| diesel::update(
            cm::table.filter(cm::id.eq(id)).filter(cm::owner.eq(owner))
        )
        .set(cm::lease_until.eq(None::<i64>))
        .execute(c)
        .await
        .map(|_| ())
        .map_err(db_error))
    }

    /// Records the provider's handle: the start is confirmed and the command `running`.
    pub async fn started(&self, id: CommandId, handle: &str) -> Result<CommandRecord> {
        let now = to_micros(self.db.now());
        let (id, handle) = (id.to_string(), handle.to_owned());
        let row: Option<CommandRow> = write_tx!(self, |c| {
            let row: Option<CommandRow> = diesel::update(
                cm::table
                    .filter(cm::id.eq(&id))
                    .filter(cm::state.eq(CommandState::Starting.as_str())),
            )
            .set((
                cm::handle.eq(&handle),
                cm::state.eq(CommandState::Running.as_str()),
                cm::updated_at.eq(now),
            ))
            .returning(CommandRow::as_returning())
            .get_result(c)
            .await
            .optional()
            .map_err(db_error)?;
            if let Some(row) = &row {
                c.announce(&row.id).await?;
                append_event!(
                    c,
                    NewEventRow {
                        command_id: Some(row.id.clone()),
                        ..NewEventRow::new(
                            &row.project_id,
                            EventType::CommandStarted,
                            &row.sandbox_id,
                            now,
                        )
                    }
                );
            }
            Ok::<_, RegistryError>(row)
        })?;
        row.ok_or(RegistryError::Conflict {
            what: "start of a command that is no longer starting",
        })?
        .into_record()
    }

    /// Appends output and gaps, in order, for `owner` (who must hold the lease): one event per
    /// append, numbered on from the record's `next_seq`. Then drops the oldest events while
    /// more than `max_kept` bytes are held or more events than the journal keeps are stored
    /// ([`CommandJournal::with_max_events`]); what was dropped reads as one gap per stream,
    /// at the last dropped sequence numbers. Answers the record as it now stands;
    /// `LeaseLost` when `owner` lost the lease.
    pub async fn append(
        &self,
        id: CommandId,
        owner: &str,
        appends: Vec<Append>,
        max_kept: u64,
    ) -> Result<CommandRecord> {
        let now = to_micros(self.db.now());
        let (id, owner) = (id.to_string(), owner.to_owned());
        let max_kept = signed(max_kept);
        let max_events = signed(self.max_events);
        let row: CommandRow = write_tx!(self, |c| {
            let rec: Option<CommandRow> = cm::table
                .filter(cm::id.eq(&id))
                .filter(cm::owner.eq(&owner))
                .filter(cm::state.eq_any(LIVE))
                .select(CommandRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let Some(rec) = rec else {
                return Err(RegistryError::LeaseLost {
                    what: "command capture",
                });
            };
            let (mut seq, mut out, mut err, mut kept) = (
                rec.next_seq,
                rec.stdout_bytes,
                rec.stderr_bytes,
                rec.kept_bytes,
            );
            let mut rows = Vec::with_capacity(appends.len());
            for a in appends {
                let (stream, offset, length, data) = match a {
                    Append::Output {
                        stream,
                        offset,
                        data,
                    } => (stream, offset, Some(data.len() as u64), Some(data)),
                    Append::Gap {
                        stream,
                        offset,
                        length,
                    } => (stream, offset, length, None),
                };
                let end = signed(offset + length.unwrap_or(0));
                match stream {
                    OutputStream::Stdout => out = out.max(end),
                    OutputStream::Stderr => err = err.max(end),
                }
                if data.is_some() {
                    kept += length.map_or(0, signed);
                }
                rows.push(EventRow {
                    command_id: id.clone(),
                    seq,
                    kind: kind_of(stream),
                    byte_offset: signed(offset),
                    length: length.map(signed),
                    data,
                });
                seq += 1;
            }
            // One statement per event (an append holds one or two): the async SQLite
            // connection has no multi-row insert.
            for row in &rows {
                diesel::insert_into(ev::table)
                    .values(row)
                    .execute(c)
                    .await
                    .map_err(db_error)?;
            }
            // Rows are counted only once there could be too many: the first stored event's
            // number by the primary key, one indexed lookup.
            let mut rows = 0;
            if seq - 1 > max_events {
                let first: Option<i64> = ev::table
                    .filter(ev::command_id.eq(&id))
                    .select(diesel::dsl::min(ev::seq))
                    .first(c)
                    .await
                    .map_err(db_error)?;
                rows = seq - first.unwrap_or(seq);
            }
            if kept > max_kept || rows > max_events {
                let target_rows = max_events - max_events / 4;
                let keep_rows = if rows > max_events {
                    target_rows
                } else {
                    i64::MAX
                };
                kept = trim_events!(c, &id, kept, max_kept, keep_rows);
            }
            c.announce(&id).await?;
            diesel::update(cm::table.filter(cm::id.eq(&id)))
                .set((
                    cm::next_seq.eq(seq),
                    cm::stdout_bytes.eq(out),
                    cm::stderr_bytes.eq(err),
                    cm::kept_bytes.eq(kept),
                    cm::updated_at.eq(now),
                ))
                .returning(CommandRow::as_returning())
                .get_result(c)
                .await
                .map_err(db_error)
        })?;
        row.into_record()
    }

    /// Ends a live command: its final state (a `kill_reason` recorded before wins over
    /// `exited`: always `timed_out`, `killed` when the signal ended it), exit code and end
    /// time. With `owner`, only while it holds the lease. An
    /// ended command is left as it is. Answers the record as it now stands.
    pub async fn finish(
        &self,
        id: CommandId,
        owner: Option<&str>,
        state: CommandState,
        exit_code: Option<i32>,
    ) -> Result<CommandRecord> {
        let now = to_micros(self.db.now());
        let (idt, owner) = (id.to_string(), owner.map(str::to_owned));
        let row: Option<CommandRow> = write_tx!(self, |c| {
            let rec: Option<CommandRow> = cm::table
                .filter(cm::id.eq(&idt))
                .select(CommandRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let Some(rec) = rec else { return Ok(None) };
            let live = LIVE.contains(&rec.state.as_str());
            if !live {
                return Ok(Some(rec));
            }
            if let Some(owner) = &owner
                && rec.owner.as_ref() != Some(owner)
            {
                return Err(RegistryError::LeaseLost {
                    what: "command capture",
                });
            }
            // A command signalled through Corral is `killed` only if the signal ended it (no
            // code, or `128 + n`): one that caught it and exited on its own terms `exited`.
            let by_signal = exit_code.is_none_or(|c| c >= 128);
            let state = match (state, rec.kill_reason.as_deref()) {
                (CommandState::Exited, Some("timed_out")) => "timed_out".to_owned(),
                (CommandState::Exited, Some(reason)) if by_signal => reason.to_owned(),
                (s, _) => s.as_str().to_owned(),
            };
            let row: Option<CommandRow> = diesel::update(cm::table.filter(cm::id.eq(&idt)))
                .set((
                    cm::state.eq(&state),
                    cm::exit_code.eq(exit_code),
                    cm::ended_at.eq(now),
                    cm::stdin_open.eq(false),
                    cm::lease_until.eq(None::<i64>),
                    cm::updated_at.eq(now),
                ))
                .returning(CommandRow::as_returning())
                .get_result(c)
                .await
                .optional()
                .map_err(db_error)?;
            c.announce(&idt).await?;
            append_event!(
                c,
                NewEventRow {
                    command_id: Some(rec.id.clone()),
                    command_state: Some(state),
                    exit_code,
                    duration_ms: Some(now.saturating_sub(rec.started_at).max(0) / 1000),
                    ..NewEventRow::new(
                        &rec.project_id,
                        EventType::CommandExited,
                        &rec.sandbox_id,
                        now
                    )
                }
            );
            Ok::<_, RegistryError>(row)
        })?;
        row.ok_or(RegistryError::NotFound { what: "command" })?
            .into_record()
    }

    /// Notes the state to report when a live command ends (`killed` after a signal sent
    /// through Corral, `timed_out` at its deadline); the first reason recorded stays.
    pub async fn set_kill_reason(&self, id: CommandId, reason: CommandState) -> Result<()> {
        let id = id.to_string();
        run!(self, |c| diesel::update(
            cm::table
                .filter(cm::id.eq(id))
                .filter(cm::state.eq_any(LIVE))
                .filter(cm::kill_reason.is_null())
        )
        .set(cm::kill_reason.eq(reason.as_str()))
        .execute(c)
        .await
        .map(|_| ())
        .map_err(db_error))
    }

    /// Moves the stdin count from `before` to `after` (and closes stdin when asked), only if
    /// it still is `before` and stdin was not closed by a write: `false` when another write
    /// moved it first. A command that ended meanwhile still counts the write its provider
    /// took (a `cat` ends at the close it was just sent, and its end closes stdin too).
    pub async fn record_stdin(
        &self,
        id: CommandId,
        before: u64,
        after: u64,
        close: bool,
    ) -> Result<bool> {
        let now = to_micros(self.db.now());
        let id = id.to_string();
        let n = run!(self, |c| {
            let target = cm::table
                .filter(cm::id.eq(id))
                .filter(cm::stdin_open.eq(true).or(cm::ended_at.is_not_null()))
                .filter(cm::stdin_bytes.eq(signed(before)));
            let q = diesel::update(target);
            if close {
                q.set((
                    cm::stdin_bytes.eq(signed(after)),
                    cm::stdin_open.eq(false),
                    cm::updated_at.eq(now),
                ))
                .execute(c)
                .await
            } else {
                q.set((cm::stdin_bytes.eq(signed(after)), cm::updated_at.eq(now)))
                    .execute(c)
                    .await
            }
            .map_err(db_error)
        })?;
        Ok(n == 1)
    }

    /// Events after `after`, in order: at most `max_events`, and no more bytes than
    /// `max_bytes` (always at least one event if any).
    pub async fn events(
        &self,
        id: CommandId,
        after: u64,
        max_events: u32,
        max_bytes: usize,
    ) -> Result<Vec<JournalEvent>> {
        let id = id.to_string();
        let after = signed(after);
        // Lengths first, so that a page never loads more bytes than it returns.
        let idq = id.clone();
        let sizes: Vec<(i64, Option<i64>, bool)> = run!(self, |c| ev::table
            .filter(ev::command_id.eq(idq))
            .filter(ev::seq.gt(after))
            .order(ev::seq.asc())
            .limit(i64::from(max_events))
            .select((ev::seq, ev::length, ev::data.is_not_null()))
            .load(c)
            .await
            .map_err(db_error))?;
        let mut total = 0usize;
        let mut last = None;
        for (i, (seq, len, held)) in sizes.iter().enumerate() {
            let bytes = if *held {
                usize::try_from(len.unwrap_or(0)).unwrap_or(usize::MAX)
            } else {
                0
            };
            if i > 0 && total.saturating_add(bytes) > max_bytes {
                break;
            }
            total = total.saturating_add(bytes);
            last = Some(*seq);
        }
        let Some(last) = last else {
            return Ok(Vec::new());
        };
        let rows: Vec<EventRow> = run!(self, |c| ev::table
            .filter(ev::command_id.eq(id))
            .filter(ev::seq.gt(after))
            .filter(ev::seq.le(last))
            .order(ev::seq.asc())
            .select(EventRow::as_select())
            .load(c)
            .await
            .map_err(db_error))?;
        rows.into_iter().map(EventRow::into_event).collect()
    }

    /// Projects whose commands hold output.
    pub async fn projects_holding_output(&self) -> Result<Vec<ProjectId>> {
        let ids: Vec<String> = run!(self, |c| cm::table
            .filter(cm::kept_bytes.gt(0))
            .select(cm::project_id)
            .distinct()
            .load(c)
            .await
            .map_err(db_error))?;
        ids.iter()
            .map(|s| crate::rows::parse_project_id(s))
            .collect()
    }

    /// Keeps the project's journals within `max_bytes`: drops the held output of its oldest
    /// commands (their events stay, as gaps) until the rest fits. Answers the bytes dropped.
    pub async fn trim_project(&self, project: ProjectId, max_bytes: u64) -> Result<u64> {
        let project = project.to_string();
        let max = signed(max_bytes);
        let dropped = write_tx!(self, |c| {
            let held: Vec<(String, i64)> = cm::table
                .filter(cm::project_id.eq(&project))
                .filter(cm::kept_bytes.gt(0))
                .order((cm::started_at.asc(), cm::id.asc()))
                .select((cm::id, cm::kept_bytes))
                .load(c)
                .await
                .map_err(db_error)?;
            let mut total: i64 = held.iter().map(|(_, k)| *k).sum();
            let mut dropped = 0i64;
            for (id, kept) in held {
                if total <= max {
                    break;
                }
                diesel::update(
                    ev::table
                        .filter(ev::command_id.eq(&id))
                        .filter(ev::data.is_not_null()),
                )
                .set(ev::data.eq(None::<Vec<u8>>))
                .execute(c)
                .await
                .map_err(db_error)?;
                diesel::update(cm::table.filter(cm::id.eq(&id)))
                    .set(cm::kept_bytes.eq(0i64))
                    .execute(c)
                    .await
                    .map_err(db_error)?;
                total -= kept;
                dropped += kept;
            }
            Ok::<_, RegistryError>(dropped)
        })?;
        unsigned(dropped, "dropped count")
    }

    /// Deletes ended commands (and their journals) that ended before `before`; answers how
    /// many.
    pub async fn reap(&self, before: Timestamp, limit: u32) -> Result<u64> {
        let before = to_micros(before);
        let n = run!(self, |c| {
            let ids: Vec<String> = cm::table
                .filter(cm::ended_at.le(before))
                .order(cm::ended_at.asc())
                .limit(i64::from(limit))
                .select(cm::id)
                .load(c)
                .await
                .map_err(db_error)?;
            if ids.is_empty() {
                return Ok(0);
            }
            diesel::delete(ev::table.filter(ev::command_id.eq_any(&ids)))
                .execute(c)
                .await
                .map_err(db_error)?;
            diesel::delete(cm::table.filter(cm::id.eq_any(&ids)))
                .execute(c)
                .await
                .map_err(db_error)
        })?;
        Ok(n as u64)
    }
}

fn lease_micros(lease: Duration) -> i64 {
    i64::try_from(lease.as_micros()).unwrap_or(i64::MAX / 4)
}
