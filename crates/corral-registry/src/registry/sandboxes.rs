//! Sandbox records: inserted before the provider is asked, completed, observed, touched,
//! tombstoned, counted and listed.

use corral_domain::limits::MAX_PAGE_LIMIT;
use corral_domain::{
    EventType, OperationId, SandboxId, SandboxPage, SandboxStatus, Timestamp, event_reason,
};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::{PooledConnection, run, to_micros, write_tx};
use crate::error::{RegistryError, Result, db_error};
use crate::events::{NewEventRow, append_event};
use crate::model::{
    CreateState, EndReason, NewSandbox, ProjectId, SandboxLifecycle, SandboxRecord,
    SandboxRecordPage,
};
use crate::rows::{SandboxListRow, SandboxRow};
use crate::schema::sandboxes;

use super::{ListCursor, Registry, encode_cursor};

const SANDBOX: &str = "sandbox";

impl Registry {
    /// Records a sandbox before the provider is called: create state `pending`, status
    /// `creating`. [`RegistryError::Conflict`] when the id or operation id is taken.
    pub async fn insert_sandbox(&self, new: NewSandbox) -> Result<SandboxRecord> {
        self.insert_sandbox_until(new, None).await
    }

    /// [`Registry::insert_sandbox`], remembering when the lifetime asked for ends (so a
    /// sandbox the provider no longer has can be told expired from vanished).
    pub async fn insert_sandbox_until(
        &self,
        new: NewSandbox,
        expires_at: Option<Timestamp>,
    ) -> Result<SandboxRecord> {
        self.insert_sandbox_with(new, expires_at, SandboxLifecycle::default())
            .await
    }

    /// [`Registry::insert_sandbox_until`] with what the sandbox is created with for its
    /// lifecycle (auto-resume, idle stop, the snapshot it is restored from). Its last activity
    /// starts at its creation. An idle stop too long to add to a timestamp (past 292 000
    /// years) is [`RegistryError::InvalidInput`]; callers check the API's limits.
    pub async fn insert_sandbox_with(
        &self,
        new: NewSandbox,
        expires_at: Option<Timestamp>,
        lifecycle: SandboxLifecycle,
    ) -> Result<SandboxRecord> {
        let now = self.db.now();
        let record = SandboxRecord {
            id: new.id,
            project_id: new.project_id,
            native_id: new.metadata.native_provider_id.clone(),
            status: SandboxStatus::Creating,
            status_observed_at: now,
            metadata: new.metadata,
            create_state: CreateState::Pending,
            created_at: now,
            updated_at: now,
            deleted_at: None,
            expires_at,
            end_reason: None,
            auto_resume: lifecycle.auto_resume,
            idle_stop_seconds: lifecycle.idle_stop_seconds,
            snapshot_id: lifecycle.snapshot_id,
            last_activity_at: now,
        };
        let row = SandboxRow::from_record(&record)?;
        let stored = row.clone().into_record()?;
        run!(self, |c| {
            diesel::insert_into(sandboxes::table)
                .values(&row)
                .execute(c)
                .await
                .map_err(|e| match db_error(e) {
                    RegistryError::Conflict { .. } => RegistryError::Conflict {
                        what: "sandbox id or operation id",
                    },
                    other => other,
                })
        })?;
        Ok(stored)
    }

    /// Stores records exactly as given, in one transaction (restores, bulk loads, tests).
    pub async fn import_sandboxes(&self, records: &[SandboxRecord]) -> Result<()> {
        let rows = records
            .iter()
            .map(SandboxRow::from_record)
            .collect::<Result<Vec<_>>>()?;
        let db = self.db.clone();
        self.db
            .detached(async move {
                let mut conn = db.connection().await?;
                match &mut conn {
                    PooledConnection::Sqlite(c) => {
                        // One blocking task for the whole import, in one `BEGIN IMMEDIATE`
                        // transaction; 18 columns × 500 rows stays below SQLite's bind limit
                        // (32 766).
                        c.spawn_blocking(move |c| {
                            c.immediate_transaction(|c| {
                                for chunk in rows.chunks(500) {
                                    diesel::RunQueryDsl::execute(
                                        diesel::insert_into(sandboxes::table).values(chunk),
                                        c,
                                    )?;
                                }
                                Ok::<_, diesel::result::Error>(())
                            })
                        })
                        .await
                        .map_err(db_error)?;
                    }
                    PooledConnection::Postgres(c) => {
                        use diesel_async::AsyncConnection as _;
                        let rows = &rows;
                        c.transaction(async |c| {
                            // 18 columns × 1000 rows stays below PostgreSQL's 65535 binds.
                            for chunk in rows.chunks(1000) {
                                diesel_async::RunQueryDsl::execute(
                                    diesel::insert_into(sandboxes::table).values(chunk),
                                    c,
                                )
                                .await?;
                            }
                            Ok::<_, RegistryError>(())
                        })
                        .await?;
                    }
                }
                Ok(())
            })
            .await
    }

    async fn fetch_sandbox(&self, project: &str, id: &str) -> Result<Option<SandboxRecord>> {
        let (project, id) = (project.to_owned(), id.to_owned());
        let row: Option<SandboxRow> = run!(self, |c| {
            sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::id.eq(&id))
                .select(SandboxRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.map(SandboxRow::into_record).transpose()
    }

    async fn fetch_existing(&self, project: &str, id: &str) -> Result<SandboxRecord> {
        self.fetch_sandbox(project, id)
            .await?
            .ok_or(RegistryError::NotFound { what: SANDBOX })
    }

    /// The sandbox `id` if it belongs to `project` (tombstones included).
    pub async fn sandbox(
        &self,
        project: ProjectId,
        id: SandboxId,
    ) -> Result<Option<SandboxRecord>> {
        self.fetch_sandbox(&project.to_string(), &id.to_string())
            .await
    }

    /// The sandbox created by `operation` (in any project; operation ids are unique).
    pub async fn sandbox_by_operation(
        &self,
        operation: OperationId,
    ) -> Result<Option<SandboxRecord>> {
        let operation = operation.to_string();
        let row: Option<SandboxRow> = run!(self, |c| {
            sandboxes::table
                .filter(sandboxes::operation_id.eq(&operation))
                .select(SandboxRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.map(SandboxRow::into_record).transpose()
    }

    /// The provider confirmed the create: stores the native id (column and metadata), the
    /// status, and create state `created`. [`RegistryError::NotFound`] if absent.
    pub async fn complete_create(
        &self,
        project: ProjectId,
        id: SandboxId,
        native_id: &str,
        status: SandboxStatus,
    ) -> Result<SandboxRecord> {
        let (project, id) = (project.to_string(), id.to_string());
        let native_id = native_id.to_owned();
        let now = to_micros(self.db.now());
        let (p, i) = (project.clone(), id.clone());
        // `sandbox.created` once: only when this update moves the create to `created` (a
        // repeated confirmation refreshes the native id and status without a second event).
        let updated: Option<SandboxRow> = write_tx!(self, |c| {
            let target = sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::id.eq(&id))
                .filter(sandboxes::deleted_at.is_null());
            let before: Option<String> = target
                .select(sandboxes::create_state)
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let Some(before) = before else {
                return Ok(None);
            };
            let row: Option<SandboxRow> = diesel::update(target)
                .set((
                    sandboxes::native_id.eq(Some(&native_id)),
                    sandboxes::status.eq(status.as_str()),
                    sandboxes::status_observed_at.eq(now),
                    sandboxes::create_state.eq(CreateState::Created.as_str()),
                    sandboxes::updated_at.eq(now),
                ))
                .returning(SandboxRow::as_returning())
                .get_result(c)
                .await
                .optional()
                .map_err(db_error)?;
            if row.is_some() && before != CreateState::Created.as_str() {
                append_event!(
                    c,
                    NewEventRow {
                        status: Some(status.as_str().to_owned()),
                        ..NewEventRow::new(&project, EventType::SandboxCreated, &id, now)
                    }
                );
            }
            Ok::<_, RegistryError>(row)
        })?;
        match updated {
            Some(row) => row.into_record(),
            None => self.fetch_existing(&p, &i).await,
        }
    }

    /// Moves the create state (e.g. to `failed` or `unknown`); a `failed` create also gets
    /// status `failed`. [`RegistryError::NotFound`] if absent.
    pub async fn set_create_state(
        &self,
        project: ProjectId,
        id: SandboxId,
        state: CreateState,
    ) -> Result<SandboxRecord> {
        let (project, id) = (project.to_string(), id.to_string());
        let now = to_micros(self.db.now());
        let (p, i) = (project.clone(), id.clone());
        write_tx!(self, |c| {
            let target = sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::id.eq(&id));
            if state == CreateState::Failed {
                let before: Option<(String, String)> = target
                    .filter(sandboxes::deleted_at.is_null())
                    .select((sandboxes::status, sandboxes::create_state))
                    .first(c)
                    .await
                    .optional()
                    .map_err(db_error)?;
                let Some((old_status, old_state)) = before else {
                    return Ok(());
                };
                diesel::update(target.filter(sandboxes::deleted_at.is_null()))
                    .set((
                        sandboxes::create_state.eq(state.as_str()),
                        sandboxes::status.eq(SandboxStatus::Failed.as_str()),
                        sandboxes::status_observed_at.eq(now),
                        sandboxes::updated_at.eq(now),
                    ))
                    .execute(c)
                    .await
                    .map_err(db_error)?;
                if old_state != CreateState::Failed.as_str()
                    && old_status != SandboxStatus::Failed.as_str()
                {
                    append_event!(
                        c,
                        NewEventRow::status_changed(
                            &project,
                            &id,
                            &old_status,
                            SandboxStatus::Failed.as_str(),
                            event_reason::CREATE_FAILED,
                            now,
                        )
                    );
                }
            } else {
                diesel::update(target)
                    .set((
                        sandboxes::create_state.eq(state.as_str()),
                        sandboxes::updated_at.eq(now),
                    ))
                    .execute(c)
                    .await
                    .map_err(db_error)?;
            }
            Ok::<_, RegistryError>(())
        })?;
        self.fetch_existing(&p, &i).await
    }

    /// Caches a status observed at `observed_at`. Ignored for tombstones and when a newer
    /// observation is already stored. [`RegistryError::NotFound`] if absent.
    /// [`Registry::record_status_for`] with reason `observed`.
    pub async fn record_status(
        &self,
        project: ProjectId,
        id: SandboxId,
        status: SandboxStatus,
        observed_at: Timestamp,
    ) -> Result<SandboxRecord> {
        self.record_status_for(project, id, status, observed_at, event_reason::OBSERVED)
            .await
    }

    /// Stores `status` as of `at` for `reason` (one of [`corral_domain::event_reason`]), in one
    /// transaction with the events it causes: when the status changed, `sandbox.status_changed`;
    /// besides, `sandbox.stopped` when it became `stopped`, and `sandbox.resumed` when it
    /// became `running` from `stopped`, `stopping` or `starting` (each with `reason`). Becoming
    /// `running` is activity: the last activity moves up to `at`. Ignored for tombstones and
    /// when a newer observation is already stored. [`RegistryError::NotFound`] if absent.
    pub async fn record_status_for(
        &self,
        project: ProjectId,
        id: SandboxId,
        status: SandboxStatus,
        at: Timestamp,
        reason: &str,
    ) -> Result<SandboxRecord> {
        let (project, id) = (project.to_string(), id.to_string());
        let observed = to_micros(at);
        let now = to_micros(self.db.now());
        let reason = reason.to_owned();
        let (p, i) = (project.clone(), id.clone());
        // A read of the stored status first, in the same write transaction, so a change is
        // reported exactly once, with what it changed from; a second read only when the update
        // did not apply (a tombstone, a newer observation, or no such record).
        let updated: Option<SandboxRow> = write_tx!(self, |c| {
            let target = sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::id.eq(&id))
                .filter(sandboxes::deleted_at.is_null())
                .filter(sandboxes::status_observed_at.le(observed));
            let old: Option<String> = target
                .select(sandboxes::status)
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let Some(old) = old else {
                return Ok(None);
            };
            let changed = old != status.as_str();
            if changed && status == SandboxStatus::Running {
                // Only ever forward, in the statement itself, so a concurrent
                // `touch_activity` with a later time is never overwritten.
                diesel::update(target.filter(sandboxes::last_activity_at.lt(observed)))
                    .set(sandboxes::last_activity_at.eq(observed))
                    .execute(c)
                    .await
                    .map_err(db_error)?;
            }
            let row: Option<SandboxRow> = diesel::update(target)
                .set((
                    sandboxes::status.eq(status.as_str()),
                    sandboxes::status_observed_at.eq(observed),
                    sandboxes::updated_at.eq(now),
                ))
                .returning(SandboxRow::as_returning())
                .get_result(c)
                .await
                .optional()
                .map_err(db_error)?;
            if row.is_some() && changed {
                let change = (old.as_str(), status.as_str());
                append_event!(
                    c,
                    NewEventRow::status_changed(
                        &project, &id, change.0, change.1, &reason, observed,
                    )
                );
                let resumed_from = [
                    SandboxStatus::Stopped,
                    SandboxStatus::Stopping,
                    SandboxStatus::Starting,
                ];
                let also = match status {
                    SandboxStatus::Stopped => Some(EventType::SandboxStopped),
                    SandboxStatus::Running
                        if resumed_from.iter().any(|s| s.as_str() == old.as_str()) =>
                    {
                        Some(EventType::SandboxResumed)
                    }
                    _ => None,
                };
                if let Some(kind) = also {
                    append_event!(
                        c,
                        NewEventRow::stopped_or_resumed(
                            kind, &project, &id, change, &reason, observed,
                        )
                    );
                }
            }
            Ok::<_, RegistryError>(row)
        })?;
        match updated {
            Some(row) => row.into_record(),
            None => self.fetch_existing(&p, &i).await,
        }
    }

    /// Records activity on the sandbox at `at`: its last activity becomes the later of the
    /// stored one and `at` (never earlier). One `UPDATE`, no event, so it is cheap enough for
    /// every request that reaches a sandbox; a tombstone or an absent record is left alone,
    /// without an error.
    pub async fn touch_activity(
        &self,
        project: ProjectId,
        id: SandboxId,
        at: Timestamp,
    ) -> Result<()> {
        let (project, id) = (project.to_string(), id.to_string());
        let at = to_micros(at);
        run!(self, |c| {
            diesel::update(
                sandboxes::table
                    .filter(sandboxes::project_id.eq(&project))
                    .filter(sandboxes::id.eq(&id))
                    .filter(sandboxes::deleted_at.is_null())
                    .filter(sandboxes::last_activity_at.lt(at)),
            )
            .set(sandboxes::last_activity_at.eq(at))
            .execute(c)
            .await
            .map_err(db_error)
        })?;
        Ok(())
    }

    /// Up to `limit` sandboxes, across projects, due for an idle stop at `now`: not deleted,
    /// `running`, with an idle stop whose seconds have passed since their last activity
    /// (`lastActivityAt + idleStopSeconds <= now`); the longest idle first.
    pub async fn idle_sandboxes(&self, now: Timestamp, limit: u32) -> Result<Vec<SandboxRecord>> {
        use diesel::IntoSql as _;
        use diesel::sql_types::{BigInt, Nullable};
        let now = to_micros(now);
        let rows: Vec<SandboxRow> = run!(self, |c| {
            sandboxes::table
                .filter(sandboxes::idle_stop_seconds.is_not_null())
                .filter(sandboxes::deleted_at.is_null())
                .filter(sandboxes::status.eq(SandboxStatus::Running.as_str()))
                // `last + idle * 10^6 <= now` spelled as a subtraction from `now`: stored idle
                // stops are at most i64::MAX / 10^6 seconds, so neither side can overflow.
                .filter(
                    sandboxes::last_activity_at
                        .nullable()
                        .le(now.into_sql::<Nullable<BigInt>>()
                            - sandboxes::idle_stop_seconds * 1_000_000_i64),
                )
                .order((sandboxes::last_activity_at.asc(), sandboxes::id.asc()))
                .limit(i64::from(limit))
                .select(SandboxRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(SandboxRow::into_record).collect()
    }

    /// Marks the sandbox deleted (status `deleted`, `deletedAt` now). Idempotent: a second call
    /// returns the tombstone unchanged. [`RegistryError::NotFound`] if absent.
    pub async fn tombstone(&self, project: ProjectId, id: SandboxId) -> Result<SandboxRecord> {
        let (project, id) = (project.to_string(), id.to_string());
        let now = to_micros(self.db.now());
        let (p, i) = (project.clone(), id.clone());
        write_tx!(self, |c| {
            let n = diesel::update(
                sandboxes::table
                    .filter(sandboxes::project_id.eq(&project))
                    .filter(sandboxes::id.eq(&id))
                    .filter(sandboxes::deleted_at.is_null()),
            )
            .set((
                sandboxes::status.eq(SandboxStatus::Deleted.as_str()),
                sandboxes::status_observed_at.eq(now),
                sandboxes::deleted_at.eq(Some(now)),
                sandboxes::updated_at.eq(now),
                sandboxes::end_reason.eq(Some(EndReason::Deleted.as_str())),
            ))
            .execute(c)
            .await
            .map_err(db_error)?;
            if n > 0 {
                append_event!(
                    c,
                    NewEventRow {
                        status: Some(SandboxStatus::Deleted.as_str().to_owned()),
                        ..NewEventRow::new(&project, EventType::SandboxDeleted, &id, now)
                    }
                );
            }
            Ok::<_, RegistryError>(())
        })?;
        self.fetch_existing(&p, &i).await
    }

    /// How many live sandboxes `project` has on each provider: not deleted, not expired, and
    /// not a create known to have failed (pending and unconfirmed creates count: they may
    /// exist). For quotas, checked before a provider is called.
    pub async fn count_live_sandboxes(
        &self,
        project: ProjectId,
    ) -> Result<std::collections::BTreeMap<corral_domain::Provider, u64>> {
        let project = project.to_string();
        let rows: Vec<(String, i64)> = run!(self, |c| {
            sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::deleted_at.is_null())
                .filter(sandboxes::create_state.ne("failed"))
                .filter(sandboxes::status.ne("expired"))
                .group_by(sandboxes::provider)
                .select((sandboxes::provider, diesel::dsl::count_star()))
                .load(c)
                .await
                .map_err(db_error)
        })?;
        let mut out = std::collections::BTreeMap::new();
        for (provider, n) in rows {
            let provider = provider.parse().map_err(|_| RegistryError::Internal {
                message: format!("unknown provider `{provider}` in the registry"),
            })?;
            out.insert(provider, u64::try_from(n).unwrap_or(0));
        }
        Ok(out)
    }

    /// One page of the project's records, newest first by (createdAt, id), tombstones included.
    /// `limit` must be 1–200 (the caller validates; out of range is
    /// [`RegistryError::InvalidInput`]); a cursor not issued here is
    /// [`RegistryError::InvalidCursor`]. Never touches a provider.
    pub async fn list_sandboxes(
        &self,
        project: ProjectId,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<SandboxRecordPage> {
        if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
            return Err(RegistryError::InvalidInput {
                message: format!("limit must be 1–{MAX_PAGE_LIMIT}"),
            });
        }
        let after = cursor
            .map(ListCursor::parse)
            .transpose()?
            .map(|c| (c.created_at_micros, c.id.to_string()));
        let project = project.to_string();
        // One extra row tells whether another page exists.
        let fetch = i64::from(limit) + 1;
        // The page query, for whichever backend `$c` is.
        macro_rules! page {
            ($project:expr, $after:expr) => {{
                let mut query = sandboxes::table
                    .filter(sandboxes::project_id.eq($project))
                    .order((sandboxes::created_at.desc(), sandboxes::id.desc()))
                    .limit(fetch)
                    .select(SandboxRow::as_select())
                    .into_boxed();
                if let Some((created, id)) = $after {
                    // `(created_at, id) < cursor`, spelled so that PostgreSQL seeks the
                    // `sandboxes_page` index (project_id, created_at DESC, id DESC) to the
                    // cursor: with the `OR` alone it ranged on project_id only and filtered
                    // every newer row (15 000 rows read for one page 15 000 deep).
                    query = query
                        .filter(sandboxes::created_at.le(created))
                        .filter(sandboxes::created_at.lt(created).or(sandboxes::id.lt(id)));
                }
                query
            }};
        }
        let db = self.db.clone();
        let mut rows: Vec<SandboxRow> = self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                match &mut conn {
                    // Synchronous diesel on the connection's blocking thread: rows are decoded
                    // in place, where the async wrapper copies every value of every row into an
                    // owned row first (allocations were the largest item in the profile of a
                    // 100-row page).
                    PooledConnection::Sqlite(c) => c
                        .spawn_blocking(move |c| {
                            diesel::RunQueryDsl::load(page!(&project, after), c)
                        })
                        .await
                        .map_err(db_error),
                    PooledConnection::Postgres(c) => {
                        page!(&project, after).load(c).await.map_err(db_error)
                    }
                }
            })
            .await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match rows.last() {
            Some(last) if more => Some(encode_cursor(last.created_at, &last.id)),
            _ => None,
        };
        Ok(SandboxRecordPage {
            items: rows
                .into_iter()
                .map(SandboxRow::into_record)
                .collect::<Result<_>>()?,
            next_cursor,
        })
    }

    /// [`Registry::list_sandboxes`] as the wire page itself, for `GET /v1/sandboxes`: the same
    /// rows, order, cursors and errors, but only the columns a
    /// [`SandboxListItem`](corral_domain::SandboxListItem) shows are read, each row becomes its
    /// item directly (no whole record in between), and the query
    /// is one of two fixed statements (first page, or after a cursor), so both backends keep
    /// it prepared instead of building and parsing its SQL on every call.
    pub async fn list_sandbox_page(
        &self,
        project: ProjectId,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<SandboxPage> {
        if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
            return Err(RegistryError::InvalidInput {
                message: format!("limit must be 1–{MAX_PAGE_LIMIT}"),
            });
        }
        let after = cursor
            .map(ListCursor::parse)
            .transpose()?
            .map(|c| (c.created_at_micros, c.id.to_string()));
        let project = project.to_string();
        // One extra row tells whether another page exists.
        let fetch = i64::from(limit) + 1;
        // Runs `$load` on the page query for `$after` (see `list_sandboxes` for why the
        // keyset condition is spelled this way).
        macro_rules! page {
            ($project:expr, $after:expr, |$q:ident| $load:expr) => {{
                let $q = sandboxes::table
                    .filter(sandboxes::project_id.eq($project))
                    .order((sandboxes::created_at.desc(), sandboxes::id.desc()))
                    .limit(fetch)
                    .select(SandboxListRow::as_select());
                match $after {
                    None => $load,
                    Some((created, id)) => {
                        let $q = $q
                            .filter(sandboxes::created_at.le(created))
                            .filter(sandboxes::created_at.lt(created).or(sandboxes::id.lt(id)));
                        $load
                    }
                }
            }};
        }
        let db = self.db.clone();
        let mut rows: Vec<SandboxListRow> = self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                match &mut conn {
                    // Synchronous diesel on the connection's blocking thread, rows decoded in
                    // place (as in `list_sandboxes`).
                    PooledConnection::Sqlite(c) => c
                        .spawn_blocking(move |c| {
                            page!(&project, after, |q| diesel::RunQueryDsl::load(q, c))
                        })
                        .await
                        .map_err(db_error),
                    PooledConnection::Postgres(c) => {
                        page!(&project, after, |q| q.load(c).await).map_err(db_error)
                    }
                }
            })
            .await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match rows.last() {
            Some(last) if more => Some(encode_cursor(last.created_at, &last.id)),
            _ => None,
        };
        Ok(SandboxPage {
            items: rows
                .into_iter()
                .map(SandboxListRow::into_item)
                .collect::<Result<_>>()?,
            next_cursor,
        })
    }

    /// Creates still `pending` or `unknown` that were recorded before `older_than`, across
    /// projects (for the reconciler): those never attempted first, oldest first, then the
    /// longest since [`Registry::mark_reconcile_attempted`].
    pub async fn stale_creates(
        &self,
        older_than: Timestamp,
        limit: u32,
    ) -> Result<Vec<SandboxRecord>> {
        let before = to_micros(older_than);
        let rows: Vec<SandboxRow> = run!(self, |c| {
            sandboxes::table
                .filter(
                    sandboxes::create_state
                        .eq_any([CreateState::Pending.as_str(), CreateState::Unknown.as_str()]),
                )
                .filter(sandboxes::created_at.lt(before))
                // Least recently attempted first, so records the reconciler cannot settle
                // rotate to the back instead of filling every batch forever. A stamp column
                // rather than an in-memory cursor: the rotation survives restarts and is
                // shared by replicas. `IS NOT NULL` ascending is `NULLS FIRST` spelled the
                // same on SQLite and PostgreSQL (whose own default puts NULLs last).
                .order((
                    sandboxes::reconcile_attempted_at.is_not_null().asc(),
                    sandboxes::reconcile_attempted_at.asc(),
                    sandboxes::created_at.asc(),
                    sandboxes::id.asc(),
                ))
                .limit(i64::from(limit))
                .select(SandboxRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(SandboxRow::into_record).collect()
    }

    /// Records that the reconciler just tried to settle this create (whatever came of it), so
    /// [`Registry::stale_creates`] hands it out after the ones tried longer ago. Leaves
    /// `updated_at` alone: the reconcile grace period counts from that. A record that is gone
    /// is not an error.
    pub async fn mark_reconcile_attempted(&self, project: ProjectId, id: SandboxId) -> Result<()> {
        let (project, id) = (project.to_string(), id.to_string());
        let now = to_micros(self.db.now());
        run!(self, |c| {
            diesel::update(
                sandboxes::table
                    .filter(sandboxes::project_id.eq(&project))
                    .filter(sandboxes::id.eq(&id)),
            )
            .set(sandboxes::reconcile_attempted_at.eq(Some(now)))
            .execute(c)
            .await
            .map_err(db_error)
        })?;
        Ok(())
    }
}
