//! The lifecycle event log: append-only, one sequence per project, written in the same
//! transaction as the change each event reports (so an event exists exactly when its change
//! does), read with a cursor, pruned by age.
//!
//! Appends bump the project's row in `event_counters` first; its row lock orders one
//! project's appends on PostgreSQL (SQLite's writers are serialized anyway), so sequence
//! numbers become visible in order and a reader resuming after `n` never misses an event
//! below `n` committed later.

use corral_domain::{
    CommandId, CommandState, EventType, LifecycleEvent, Provider, SandboxId, SandboxStatus,
    SnapshotId, Timestamp,
};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::{Database, from_micros, run, to_micros};
use crate::error::{RegistryError, Result, db_error};
use crate::model::ProjectId;
use crate::schema::events as ev;

/// An event about to be appended (the columns of `events` but the sequence number).
#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = ev)]
pub(crate) struct NewEventRow {
    pub(crate) project_id: String,
    pub(crate) seq: i64,
    pub(crate) kind: String,
    pub(crate) sandbox_id: Option<String>,
    pub(crate) provider: Option<String>,
    pub(crate) native_id: Option<String>,
    pub(crate) command_id: Option<String>,
    pub(crate) status: Option<String>,
    pub(crate) previous_status: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) command_state: Option<String>,
    pub(crate) exit_code: Option<i32>,
    pub(crate) duration_ms: Option<i64>,
    pub(crate) occurred_at: i64,
    pub(crate) snapshot_id: Option<String>,
}

impl NewEventRow {
    /// An event of `kind` about `sandbox` in `project`, at `at` (microseconds); the other
    /// fields are set by the caller.
    pub(crate) fn new(project: &str, kind: EventType, sandbox: &str, at: i64) -> Self {
        NewEventRow {
            project_id: project.to_owned(),
            seq: 0,
            kind: kind.as_str().to_owned(),
            sandbox_id: Some(sandbox.to_owned()),
            provider: None,
            native_id: None,
            command_id: None,
            status: None,
            previous_status: None,
            reason: None,
            command_state: None,
            exit_code: None,
            duration_ms: None,
            occurred_at: at,
            snapshot_id: None,
        }
    }

    /// A `sandbox.status_changed` event.
    pub(crate) fn status_changed(
        project: &str,
        sandbox: &str,
        from: &str,
        to: &str,
        reason: &str,
        at: i64,
    ) -> Self {
        NewEventRow {
            status: Some(to.to_owned()),
            previous_status: Some(from.to_owned()),
            reason: Some(reason.to_owned()),
            ..NewEventRow::new(project, EventType::SandboxStatusChanged, sandbox, at)
        }
    }

    /// A `sandbox.stopped` or `sandbox.resumed` event (`kind`), reported beside the
    /// `sandbox.status_changed` of the same change.
    pub(crate) fn stopped_or_resumed(
        kind: EventType,
        project: &str,
        sandbox: &str,
        (from, to): (&str, &str),
        reason: &str,
        at: i64,
    ) -> Self {
        NewEventRow {
            kind: kind.as_str().to_owned(),
            ..NewEventRow::status_changed(project, sandbox, from, to, reason, at)
        }
    }

    /// A `snapshot.*` event (`kind`) about `snapshot`, taken of `sandbox`.
    pub(crate) fn snapshot(
        kind: EventType,
        project: &str,
        snapshot: &str,
        sandbox: &str,
        at: i64,
    ) -> Self {
        NewEventRow {
            snapshot_id: Some(snapshot.to_owned()),
            ..NewEventRow::new(project, kind, sandbox, at)
        }
    }
}

/// Appends `$event` (a [`NewEventRow`]) on connection `$c`, inside the caller's write
/// transaction: takes the project's next sequence number, then inserts. A macro, not a
/// function, because it runs on either backend's connection type.
macro_rules! append_event {
    ($c:expr, $event:expr) => {{
        use $crate::schema::event_counters as ec;
        let mut event: $crate::events::NewEventRow = $event;
        let seq: i64 = diesel::insert_into(ec::table)
            .values((ec::project_id.eq(&event.project_id), ec::last_seq.eq(1_i64)))
            .on_conflict(ec::project_id)
            .do_update()
            .set(ec::last_seq.eq(ec::last_seq + 1_i64))
            .returning(ec::last_seq)
            .get_result($c)
            .await
            .map_err($crate::error::db_error)?;
        event.seq = seq;
        diesel::insert_into($crate::schema::events::table)
            .values(&event)
            .execute($c)
            .await
            .map_err($crate::error::db_error)?;
        // The outbox: one delivery per endpoint that wants it, in the same transaction.
        use $crate::schema::webhook_endpoints as we;
        let endpoints: Vec<(String, String)> = we::table
            .filter(we::project_id.eq(&event.project_id))
            .filter(we::deleted_at.is_null())
            .select((we::id, we::types))
            .load($c)
            .await
            .map_err($crate::error::db_error)?;
        for (endpoint, types) in endpoints {
            if $crate::outbox::wants(&types, &event.kind) {
                diesel::insert_into($crate::schema::webhook_deliveries::table)
                    .values($crate::outbox::NewDeliveryRow::new(
                        endpoint,
                        &event.project_id,
                        seq,
                        event.occurred_at,
                    ))
                    .execute($c)
                    .await
                    .map_err($crate::error::db_error)?;
            }
        }
    }};
}
pub(crate) use append_event;

/// A stored event.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = ev)]
struct EventRow {
    seq: i64,
    kind: String,
    sandbox_id: Option<String>,
    provider: Option<String>,
    native_id: Option<String>,
    command_id: Option<String>,
    status: Option<String>,
    previous_status: Option<String>,
    reason: Option<String>,
    command_state: Option<String>,
    exit_code: Option<i32>,
    duration_ms: Option<i64>,
    occurred_at: i64,
    snapshot_id: Option<String>,
}

fn corrupt(what: &str) -> RegistryError {
    RegistryError::Internal {
        message: format!("stored event has an invalid {what}"),
    }
}

fn status(s: Option<String>, what: &str) -> Result<Option<SandboxStatus>> {
    s.map(|s| SandboxStatus::parse(&s).ok_or_else(|| corrupt(what)))
        .transpose()
}

impl EventRow {
    fn into_event(self) -> Result<LifecycleEvent> {
        Ok(LifecycleEvent {
            id: u64::try_from(self.seq).map_err(|_| corrupt("sequence"))?,
            kind: self.kind.parse().map_err(|_| corrupt("type"))?,
            sandbox_id: self
                .sandbox_id
                .map(|s| s.parse::<SandboxId>().map_err(|_| corrupt("sandbox id")))
                .transpose()?,
            provider: self
                .provider
                .map(|p| p.parse::<Provider>().map_err(|_| corrupt("provider")))
                .transpose()?,
            native_id: self.native_id,
            command_id: self
                .command_id
                .map(|c| c.parse::<CommandId>().map_err(|_| corrupt("command id")))
                .transpose()?,
            snapshot_id: self
                .snapshot_id
                .map(|s| s.parse::<SnapshotId>().map_err(|_| corrupt("snapshot id")))
                .transpose()?,
            status: status(self.status, "status")?,
            previous_status: status(self.previous_status, "previous status")?,
            reason: self.reason,
            command_state: self
                .command_state
                .map(|s| {
                    s.parse::<CommandState>()
                        .map_err(|_| corrupt("command state"))
                })
                .transpose()?,
            exit_code: self.exit_code,
            duration_ms: self
                .duration_ms
                .map(|d| u64::try_from(d).map_err(|_| corrupt("duration")))
                .transpose()?,
            occurred_at: from_micros(self.occurred_at)?,
        })
    }
}

/// The most events one read returns.
pub const MAX_EVENTS_PAGE: u32 = 500;

/// Reads and prunes the lifecycle event log (appends happen in the registry's and the
/// command journal's own transactions).
#[derive(Clone)]
pub struct EventLog {
    db: Database,
}

impl EventLog {
    /// The log over `db`.
    pub fn new(db: Database) -> Self {
        EventLog { db }
    }

    /// Up to `limit` (at most [`MAX_EVENTS_PAGE`]) of `project`'s events after `after`,
    /// oldest first; only those about `sandbox` when given.
    pub async fn after(
        &self,
        project: ProjectId,
        after: u64,
        limit: u32,
        sandbox: Option<SandboxId>,
    ) -> Result<Vec<LifecycleEvent>> {
        let project = project.to_string();
        // Past i64::MAX nothing can follow: the query's bound saturates.
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::from(limit.clamp(1, MAX_EVENTS_PAGE));
        let sandbox = sandbox.map(|s| s.to_string());
        let rows: Vec<EventRow> = run!(self, |c| {
            let mut q = ev::table
                .filter(ev::project_id.eq(&project))
                .filter(ev::seq.gt(after))
                .into_boxed();
            if let Some(s) = &sandbox {
                q = q.filter(ev::sandbox_id.eq(s));
            }
            q.order(ev::seq.asc())
                .limit(limit)
                .select(EventRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(EventRow::into_event).collect()
    }

    /// `project`'s event `seq`, if it is still kept.
    pub async fn one(&self, project: ProjectId, seq: u64) -> Result<Option<LifecycleEvent>> {
        let project = project.to_string();
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(None);
        };
        let row: Option<EventRow> = run!(self, |c| {
            ev::table
                .filter(ev::project_id.eq(&project))
                .filter(ev::seq.eq(seq))
                .select(EventRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.map(EventRow::into_event).transpose()
    }

    /// Removes up to `limit` events that happened before `before` (retention); how many went.
    /// The counters stay, so sequence numbers are never reused.
    pub async fn prune(&self, before: Timestamp, limit: u32) -> Result<u64> {
        let before = to_micros(before);
        let limit = i64::from(limit.max(1));
        // A bounded batch, so one pass never holds a long write lock: the occurrence time of
        // the `limit`-th oldest event bounds what goes (ties at that time go with it).
        let removed = run!(self, |c| {
            let nth: Option<i64> = ev::table
                .filter(ev::occurred_at.lt(before))
                .order(ev::occurred_at.asc())
                .offset(limit - 1)
                .limit(1)
                .select(ev::occurred_at)
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let bound = nth.map_or(before, |t| t.saturating_add(1).min(before));
            diesel::delete(ev::table.filter(ev::occurred_at.lt(bound)))
                .execute(c)
                .await
                .map_err(db_error)
        })?;
        Ok(removed as u64)
    }
}
