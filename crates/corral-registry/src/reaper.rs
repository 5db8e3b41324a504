//! What the orphan reaper keeps: this deployment's id, a named lease (one reaper pass at a
//! time across replicas), the orphans it has seen (first seen, so a grace period survives
//! restarts) and the `vanished` tombstones it makes.

use std::time::Duration;

use corral_domain::{EventType, OperationId, Provider, SandboxId, SandboxStatus, Timestamp};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::{from_micros, run, to_micros, write_tx};
use crate::error::{RegistryError, Result, db_error};
use crate::events::{NewEventRow, append_event};
use crate::model::{CreateState, EndReason, ProjectId, SandboxRecord};
use crate::registry::Registry;
use crate::rows::SandboxRow;
use crate::schema::{deployment, leases, orphans, projects, sandboxes};

/// A provider sandbox this deployment made that no live record names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The provider holding it.
    pub provider: Provider,
    /// The provider's id.
    pub native_id: String,
    /// The project its tag names, if any.
    pub project_id: Option<String>,
    /// The operation its tag names, if any.
    pub operation_id: Option<OperationId>,
    /// When a reaper pass first saw it.
    pub first_seen_at: Timestamp,
    /// When one last saw it.
    pub last_seen_at: Timestamp,
    /// When the reaper deleted it at the provider.
    pub deleted_at: Option<Timestamp>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = orphans)]
struct OrphanRow {
    provider: String,
    native_id: String,
    project_id: Option<String>,
    operation_id: Option<String>,
    first_seen_at: i64,
    last_seen_at: i64,
    deleted_at: Option<i64>,
}

impl OrphanRow {
    fn into_orphan(self) -> Result<Orphan> {
        let corrupt = |what: &str| RegistryError::Internal {
            message: format!("stored orphan has an invalid {what}"),
        };
        Ok(Orphan {
            provider: self.provider.parse().map_err(|_| corrupt("provider"))?,
            native_id: self.native_id,
            project_id: self.project_id,
            operation_id: self
                .operation_id
                .map(|o| o.parse().map_err(|_| corrupt("operation id")))
                .transpose()?,
            first_seen_at: from_micros(self.first_seen_at)?,
            last_seen_at: from_micros(self.last_seen_at)?,
            deleted_at: self.deleted_at.map(from_micros).transpose()?,
        })
    }
}

/// The most orphans one listing returns.
pub const MAX_ORPHANS_LISTED: i64 = 1000;

impl Registry {
    /// This deployment's id (`dep_<ulid>`): made by the first caller, the same for every
    /// replica over this database afterwards.
    pub async fn deployment_id(&self) -> Result<String> {
        let fresh = format!(
            "dep_{}",
            ulid::Ulid::generate().to_string().to_ascii_lowercase()
        );
        let now = to_micros(self.database().now());
        // One row (its key is always 1): the first insert wins, later ones do nothing, and
        // every caller reads the winner's id.
        run!(self, |c| {
            diesel::insert_into(deployment::table)
                .values((
                    deployment::singleton.eq(1),
                    deployment::id.eq(&fresh),
                    deployment::created_at.eq(now),
                ))
                .on_conflict(deployment::singleton)
                .do_nothing()
                .execute(c)
                .await
                .map_err(db_error)?;
            deployment::table
                .select(deployment::id)
                .first(c)
                .await
                .map_err(db_error)
        })
    }

    /// Takes or renews the lease `name` for `owner` for `ttl`: `true` when `owner` holds it
    /// now (it was free, expired, or already `owner`'s), `false` when another holder's lease
    /// still runs.
    pub async fn try_lease(&self, name: &str, owner: &str, ttl: Duration) -> Result<bool> {
        let now = to_micros(self.database().now());
        let until = now.saturating_add(i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX));
        let (name, owner) = (name.to_owned(), owner.to_owned());
        write_tx!(self, |c| {
            let held: Option<(String, i64)> = leases::table
                .filter(leases::name.eq(&name))
                .select((leases::owner, leases::until_at))
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            match held {
                None => {
                    diesel::insert_into(leases::table)
                        .values((
                            leases::name.eq(&name),
                            leases::owner.eq(&owner),
                            leases::until_at.eq(until),
                        ))
                        .execute(c)
                        .await
                        .map_err(db_error)?;
                }
                Some((holder, held_until)) if holder == owner || held_until <= now => {
                    diesel::update(leases::table.filter(leases::name.eq(&name)))
                        .set((leases::owner.eq(&owner), leases::until_at.eq(until)))
                        .execute(c)
                        .await
                        .map_err(db_error)?;
                }
                Some(_) => return Ok(false),
            }
            Ok::<_, RegistryError>(true)
        })
    }

    /// Live records on `provider` (in `project`, when given) whose create the provider
    /// confirmed: not tombstones, not known expired. A page in id order after `after`.
    pub async fn live_created_sandboxes(
        &self,
        provider: Provider,
        project: Option<ProjectId>,
        after: Option<SandboxId>,
        limit: u32,
    ) -> Result<Vec<SandboxRecord>> {
        let provider = provider.as_str().to_owned();
        let project = project.map(|p| p.to_string());
        let after = after.map(|a| a.to_string()).unwrap_or_default();
        let rows: Vec<SandboxRow> = run!(self, |c| {
            let mut q = sandboxes::table
                .filter(sandboxes::provider.eq(&provider))
                .filter(sandboxes::deleted_at.is_null())
                .filter(sandboxes::create_state.eq(CreateState::Created.as_str()))
                .filter(sandboxes::status.ne(SandboxStatus::Expired.as_str()))
                .filter(sandboxes::native_id.is_not_null())
                .filter(sandboxes::id.gt(&after))
                .into_boxed();
            if let Some(p) = &project {
                q = q.filter(sandboxes::project_id.eq(p));
            }
            q.order(sandboxes::id.asc())
                .limit(i64::from(limit))
                .select(SandboxRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(SandboxRow::into_record).collect()
    }

    /// Records that a pass saw the orphan `native_id` on `provider` at `now`: keeps the first
    /// sighting, moves the last. Answers the stored orphan and whether this was its first
    /// sighting; the first sighting appends `sandbox.orphan_found` to its project's log when
    /// that project exists here (`sandbox` names the tombstone that still names it, if any).
    pub async fn record_orphan(
        &self,
        provider: Provider,
        native_id: &str,
        project: Option<&str>,
        operation: Option<OperationId>,
        sandbox: Option<SandboxId>,
    ) -> Result<(Orphan, bool)> {
        let now = to_micros(self.database().now());
        let row = OrphanRow {
            provider: provider.as_str().to_owned(),
            native_id: native_id.to_owned(),
            project_id: project.map(str::to_owned),
            operation_id: operation.map(|o| o.to_string()),
            first_seen_at: now,
            last_seen_at: now,
            deleted_at: None,
        };
        let sandbox = sandbox.map(|s| s.to_string());
        let (stored, first): (OrphanRow, bool) = write_tx!(self, |c| {
            let existing: Option<OrphanRow> = orphans::table
                .filter(orphans::provider.eq(&row.provider))
                .filter(orphans::native_id.eq(&row.native_id))
                .select(OrphanRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            if existing.is_some() {
                let stored = diesel::update(
                    orphans::table
                        .filter(orphans::provider.eq(&row.provider))
                        .filter(orphans::native_id.eq(&row.native_id)),
                )
                .set(orphans::last_seen_at.eq(now))
                .returning(OrphanRow::as_returning())
                .get_result(c)
                .await
                .map_err(db_error)?;
                return Ok((stored, false));
            }
            diesel::insert_into(orphans::table)
                .values(&row)
                .execute(c)
                .await
                .map_err(db_error)?;
            if let Some(project) = &row.project_id {
                let known: i64 = projects::table
                    .filter(projects::id.eq(project))
                    .count()
                    .get_result(c)
                    .await
                    .map_err(db_error)?;
                if known > 0 {
                    append_event!(
                        c,
                        NewEventRow {
                            sandbox_id: sandbox.clone(),
                            provider: Some(row.provider.clone()),
                            native_id: Some(row.native_id.clone()),
                            ..NewEventRow::new(project, EventType::SandboxOrphanFound, "", now)
                        }
                    );
                }
            }
            Ok::<_, RegistryError>((row.clone(), true))
        })?;
        Ok((stored.into_orphan()?, first))
    }

    /// Marks the orphan deleted at its provider.
    pub async fn mark_orphan_deleted(&self, provider: Provider, native_id: &str) -> Result<()> {
        let now = to_micros(self.database().now());
        let (provider, native_id) = (provider.as_str().to_owned(), native_id.to_owned());
        run!(self, |c| {
            diesel::update(
                orphans::table
                    .filter(orphans::provider.eq(&provider))
                    .filter(orphans::native_id.eq(&native_id)),
            )
            .set(orphans::deleted_at.eq(Some(now)))
            .execute(c)
            .await
            .map_err(db_error)
        })?;
        Ok(())
    }

    /// The orphans seen, newest sighting first (at most [`MAX_ORPHANS_LISTED`]).
    pub async fn orphans(&self) -> Result<Vec<Orphan>> {
        let rows: Vec<OrphanRow> = run!(self, |c| {
            orphans::table
                .order(orphans::last_seen_at.desc())
                .limit(MAX_ORPHANS_LISTED)
                .select(OrphanRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(OrphanRow::into_orphan).collect()
    }

    /// Makes a live record a tombstone because its provider no longer has it (status
    /// `expired`: the provider dropped it and nobody here deleted it; end reason
    /// `vanished`), appending `sandbox.vanished`. `None` when the record was already a
    /// tombstone or is absent (nothing changes then).
    pub async fn tombstone_vanished(
        &self,
        project: ProjectId,
        id: SandboxId,
    ) -> Result<Option<SandboxRecord>> {
        let (project, id) = (project.to_string(), id.to_string());
        let now = to_micros(self.database().now());
        let row: Option<SandboxRow> = write_tx!(self, |c| {
            let old: Option<String> = sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::id.eq(&id))
                .filter(sandboxes::deleted_at.is_null())
                .select(sandboxes::status)
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let Some(old) = old else {
                return Ok(None);
            };
            let row: SandboxRow = diesel::update(
                sandboxes::table
                    .filter(sandboxes::project_id.eq(&project))
                    .filter(sandboxes::id.eq(&id)),
            )
            .set((
                sandboxes::status.eq(SandboxStatus::Expired.as_str()),
                sandboxes::status_observed_at.eq(now),
                sandboxes::deleted_at.eq(Some(now)),
                sandboxes::updated_at.eq(now),
                sandboxes::end_reason.eq(Some(EndReason::Vanished.as_str())),
            ))
            .returning(SandboxRow::as_returning())
            .get_result(c)
            .await
            .map_err(db_error)?;
            append_event!(
                c,
                NewEventRow {
                    status: Some(SandboxStatus::Expired.as_str().to_owned()),
                    previous_status: Some(old),
                    reason: Some(corral_domain::event_reason::VANISHED.to_owned()),
                    ..NewEventRow::new(&project, EventType::SandboxVanished, &id, now)
                }
            );
            Ok::<_, RegistryError>(Some(row))
        })?;
        row.map(SandboxRow::into_record).transpose()
    }
}
