//! Snapshot records: inserted `creating` before the provider is asked, completed with the
//! provider's id (or failed), tombstoned (never deleted) on delete, listed newest first with
//! the sandbox listing's cursor scheme. `snapshot.created` and `snapshot.deleted` are appended
//! in the transaction of the change they report.

use corral_domain::limits::MAX_PAGE_LIMIT;
use corral_domain::{EventType, SnapshotId, SnapshotStatus};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::create_failures::MAX_FAILURE_REASON;
use crate::db::{run, to_micros, write_tx};
use crate::error::{RegistryError, Result, db_error};
use crate::events::{NewEventRow, append_event};
use crate::model::{NewSnapshot, ProjectId, SnapshotRecord, SnapshotRecordPage};
use crate::registry::{Registry, encode_cursor, split_cursor};
use crate::rows::{SnapshotRow, size_column};
use crate::schema::{sandboxes, snapshots};

const SNAPSHOT: &str = "snapshot";

/// A regular expression matching exactly the cursors [`Registry::list_snapshots`] accepts:
/// `<createdAt micros>_<snapshot id>`, the sandbox listing's scheme
/// ([`cursor_pattern`](crate::cursor_pattern)) over snapshot ids.
pub fn snapshot_cursor_pattern() -> String {
    let id = corral_domain::snapshot_id_pattern();
    format!("^[0-9]{{1,18}}_{}", id.trim_start_matches('^'))
}

/// Parses a client's snapshot cursor into its keyset position.
fn parse_cursor(cursor: &str) -> Result<(i64, String)> {
    let (created, id) = split_cursor(cursor)?;
    let id: SnapshotId = id.parse().map_err(|_| RegistryError::InvalidCursor)?;
    Ok((created, id.to_string()))
}

impl Registry {
    /// Records a snapshot (status `creating`) before the provider is asked for it.
    /// [`RegistryError::NotFound`] when the sandbox is not a record of the project (tombstones
    /// count: the caller decides what may be snapshotted); [`RegistryError::Conflict`] when
    /// the id is taken.
    pub async fn insert_snapshot(&self, new: NewSnapshot) -> Result<SnapshotRecord> {
        let now = to_micros(self.database().now());
        let row = SnapshotRow {
            id: new.id.to_string(),
            project_id: new.project_id.to_string(),
            sandbox_id: new.sandbox_id.to_string(),
            native_id: None,
            name: new.name,
            status: SnapshotStatus::Creating.as_str().to_owned(),
            size_bytes: None,
            failure: None,
            created_at: now,
            updated_at: now,
            deleted_at: None,
        };
        let stored = row.clone().into_record()?;
        write_tx!(self, |c| {
            // The foreign key only proves the sandbox exists somewhere; it must be this
            // project's.
            let sandbox: Option<String> = sandboxes::table
                .filter(sandboxes::project_id.eq(&row.project_id))
                .filter(sandboxes::id.eq(&row.sandbox_id))
                .select(sandboxes::id)
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            if sandbox.is_none() {
                return Err(RegistryError::NotFound { what: "sandbox" });
            }
            diesel::insert_into(snapshots::table)
                .values(&row)
                .execute(c)
                .await
                .map_err(|e| match db_error(e) {
                    RegistryError::Conflict { .. } => RegistryError::Conflict {
                        what: "snapshot id",
                    },
                    other => other,
                })?;
            Ok::<_, RegistryError>(())
        })?;
        Ok(stored)
    }

    /// The provider answered: stores its id, `status` and the size (kept when `None`).
    /// Appends `snapshot.created` exactly once, when the snapshot first becomes `ready`; a
    /// ready snapshot stays ready (a repeated answer refreshes only the id and size). A
    /// tombstone is returned unchanged. `deleted` is [`RegistryError::InvalidInput`] (use
    /// [`Registry::tombstone_snapshot`]); [`RegistryError::NotFound`] if absent.
    pub async fn complete_snapshot(
        &self,
        project: ProjectId,
        id: SnapshotId,
        native_id: &str,
        status: SnapshotStatus,
        size_bytes: Option<u64>,
    ) -> Result<SnapshotRecord> {
        if status == SnapshotStatus::Deleted {
            return Err(RegistryError::InvalidInput {
                message: "a snapshot is deleted by tombstoning it".to_owned(),
            });
        }
        let (project, id) = (project.to_string(), id.to_string());
        let native_id = native_id.to_owned();
        let size = size_column(size_bytes);
        let now = to_micros(self.database().now());
        let (p, i) = (project.clone(), id.clone());
        let updated: Option<SnapshotRow> = write_tx!(self, |c| {
            let target = snapshots::table
                .filter(snapshots::project_id.eq(&project))
                .filter(snapshots::id.eq(&id))
                .filter(snapshots::deleted_at.is_null());
            // Read first, in the write transaction, so the event is appended exactly when this
            // update makes the snapshot ready.
            let before: Option<(String, String, Option<i64>)> = target
                .select((
                    snapshots::sandbox_id,
                    snapshots::status,
                    snapshots::size_bytes,
                ))
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let Some((sandbox, before, old_size)) = before else {
                return Ok(None);
            };
            let was_ready = before == SnapshotStatus::Ready.as_str();
            let status = if was_ready {
                SnapshotStatus::Ready
            } else {
                status
            };
            let failure: Option<String> = if status == SnapshotStatus::Failed {
                // Failed without a reason of its own: keep one given earlier, if any.
                target
                    .select(snapshots::failure)
                    .first(c)
                    .await
                    .map_err(db_error)?
            } else {
                None
            };
            let row: SnapshotRow = diesel::update(target)
                .set((
                    snapshots::native_id.eq(Some(&native_id)),
                    snapshots::status.eq(status.as_str()),
                    snapshots::size_bytes.eq(size.or(old_size)),
                    snapshots::failure.eq(failure),
                    snapshots::updated_at.eq(now),
                ))
                .returning(SnapshotRow::as_returning())
                .get_result(c)
                .await
                .map_err(db_error)?;
            if status == SnapshotStatus::Ready && !was_ready {
                append_event!(
                    c,
                    NewEventRow::snapshot(EventType::SnapshotCreated, &project, &id, &sandbox, now)
                );
            }
            Ok::<_, RegistryError>(Some(row))
        })?;
        match updated {
            Some(row) => row.into_record(),
            None => self.fetch_existing_snapshot(&p, &i).await,
        }
    }

    /// The provider could not make the snapshot (or its making was lost): status `failed`
    /// with `failure` (cut to [`MAX_FAILURE_REASON`] characters). Only a `creating` or
    /// `failed` snapshot changes; a ready one or a tombstone is returned unchanged.
    /// [`RegistryError::NotFound`] if absent.
    pub async fn fail_snapshot(
        &self,
        project: ProjectId,
        id: SnapshotId,
        failure: &str,
    ) -> Result<SnapshotRecord> {
        let (project, id) = (project.to_string(), id.to_string());
        let failure = failure.chars().take(MAX_FAILURE_REASON).collect::<String>();
        let now = to_micros(self.database().now());
        let (p, i) = (project.clone(), id.clone());
        let updated: Option<SnapshotRow> = run!(self, |c| {
            diesel::update(
                snapshots::table
                    .filter(snapshots::project_id.eq(&project))
                    .filter(snapshots::id.eq(&id))
                    .filter(snapshots::deleted_at.is_null())
                    .filter(snapshots::status.eq_any([
                        SnapshotStatus::Creating.as_str(),
                        SnapshotStatus::Failed.as_str(),
                    ])),
            )
            .set((
                snapshots::status.eq(SnapshotStatus::Failed.as_str()),
                snapshots::failure.eq(Some(&failure)),
                snapshots::updated_at.eq(now),
            ))
            .returning(SnapshotRow::as_returning())
            .get_result(c)
            .await
            .optional()
            .map_err(db_error)
        })?;
        match updated {
            Some(row) => row.into_record(),
            None => self.fetch_existing_snapshot(&p, &i).await,
        }
    }

    /// The snapshot `id` if it belongs to `project` (tombstones included).
    pub async fn snapshot(
        &self,
        project: ProjectId,
        id: SnapshotId,
    ) -> Result<Option<SnapshotRecord>> {
        self.fetch_snapshot(&project.to_string(), &id.to_string())
            .await
    }

    async fn fetch_snapshot(&self, project: &str, id: &str) -> Result<Option<SnapshotRecord>> {
        let (project, id) = (project.to_owned(), id.to_owned());
        let row: Option<SnapshotRow> = run!(self, |c| {
            snapshots::table
                .filter(snapshots::project_id.eq(&project))
                .filter(snapshots::id.eq(&id))
                .select(SnapshotRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.map(SnapshotRow::into_record).transpose()
    }

    async fn fetch_existing_snapshot(&self, project: &str, id: &str) -> Result<SnapshotRecord> {
        self.fetch_snapshot(project, id)
            .await?
            .ok_or(RegistryError::NotFound { what: SNAPSHOT })
    }

    /// One page of the project's snapshots, newest first by (createdAt, id), tombstones
    /// included, with [`Registry::list_sandboxes`]'s cursor scheme over snapshot ids
    /// ([`snapshot_cursor_pattern`]). `limit` must be 1–200 ([`RegistryError::InvalidInput`]
    /// otherwise); a cursor not of that form is [`RegistryError::InvalidCursor`]. Never
    /// touches a provider.
    pub async fn list_snapshots(
        &self,
        project: ProjectId,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<SnapshotRecordPage> {
        if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
            return Err(RegistryError::InvalidInput {
                message: format!("limit must be 1–{MAX_PAGE_LIMIT}"),
            });
        }
        let after = cursor.map(parse_cursor).transpose()?;
        let project = project.to_string();
        // One extra row tells whether another page exists.
        let fetch = i64::from(limit) + 1;
        let mut rows: Vec<SnapshotRow> = run!(self, |c| {
            let mut query = snapshots::table
                .filter(snapshots::project_id.eq(&project))
                .order((snapshots::created_at.desc(), snapshots::id.desc()))
                .limit(fetch)
                .select(SnapshotRow::as_select())
                .into_boxed();
            if let Some((created, id)) = &after {
                // `(created_at, id) < cursor`, spelled as the sandbox listing spells it so
                // PostgreSQL seeks the `snapshots_page` index to the cursor.
                query = query.filter(snapshots::created_at.le(*created)).filter(
                    snapshots::created_at
                        .lt(*created)
                        .or(snapshots::id.lt(id.clone())),
                );
            }
            query.load(c).await.map_err(db_error)
        })?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match rows.last() {
            Some(last) if more => Some(encode_cursor(last.created_at, &last.id)),
            _ => None,
        };
        Ok(SnapshotRecordPage {
            items: rows
                .into_iter()
                .map(SnapshotRow::into_record)
                .collect::<Result<_>>()?,
            next_cursor,
        })
    }

    /// Marks the snapshot deleted (status `deleted`, `deletedAt` now) and appends
    /// `snapshot.deleted`. Idempotent: a second call returns the tombstone unchanged, without
    /// a second event. [`RegistryError::NotFound`] if absent.
    pub async fn tombstone_snapshot(
        &self,
        project: ProjectId,
        id: SnapshotId,
    ) -> Result<SnapshotRecord> {
        let (project, id) = (project.to_string(), id.to_string());
        let now = to_micros(self.database().now());
        let (p, i) = (project.clone(), id.clone());
        write_tx!(self, |c| {
            let sandbox: Option<String> = diesel::update(
                snapshots::table
                    .filter(snapshots::project_id.eq(&project))
                    .filter(snapshots::id.eq(&id))
                    .filter(snapshots::deleted_at.is_null()),
            )
            .set((
                snapshots::status.eq(SnapshotStatus::Deleted.as_str()),
                snapshots::deleted_at.eq(Some(now)),
                snapshots::updated_at.eq(now),
            ))
            .returning(snapshots::sandbox_id)
            .get_result(c)
            .await
            .optional()
            .map_err(db_error)?;
            if let Some(sandbox) = sandbox {
                append_event!(
                    c,
                    NewEventRow::snapshot(EventType::SnapshotDeleted, &project, &id, &sandbox, now)
                );
            }
            Ok::<_, RegistryError>(())
        })?;
        self.fetch_existing_snapshot(&p, &i).await
    }

    /// Up to `limit` snapshots still `creating`, across projects, oldest first (for the
    /// follower that settles them after a restart).
    pub async fn pending_snapshots(&self, limit: u32) -> Result<Vec<SnapshotRecord>> {
        let rows: Vec<SnapshotRow> = run!(self, |c| {
            snapshots::table
                .filter(snapshots::status.eq(SnapshotStatus::Creating.as_str()))
                .order((snapshots::created_at.asc(), snapshots::id.asc()))
                .limit(i64::from(limit))
                .select(SnapshotRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(SnapshotRow::into_record).collect()
    }
}
