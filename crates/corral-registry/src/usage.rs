//! What usage estimates are computed from: each sandbox's recorded statuses, read from the
//! lifecycle event log (every `sandbox.*` event that carries a status: created, status
//! changed, deleted, vanished — but not stopped and resumed, which repeat the status change
//! beside them), in the log's order. The computation itself is pure and lives in
//! `corral_domain::usage`.

use std::collections::BTreeMap;

use corral_domain::usage::{SandboxLifecycle, StatusMark};
use corral_domain::{EventType, SandboxId, SandboxStatus, Timestamp};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::{Database, from_micros, run, to_micros};
use crate::error::{RegistryError, Result, db_error};
use crate::model::ProjectId;
use crate::schema::events as ev;
use crate::schema::sandboxes;

/// The most sandboxes one usage read covers; a range holding more answers
/// [`Lifecycles::TooMany`], so one read's memory stays bounded.
pub const MAX_USAGE_SANDBOXES: usize = 10_000;
/// Sandbox ids per `IN (…)` list (well under SQLite's and PostgreSQL's parameter limits).
const CHUNK: usize = 500;

/// Reads sandboxes' recorded lifecycles for usage estimates.
#[derive(Clone)]
pub struct UsageLog {
    db: Database,
}

/// The lifecycles a usage read found, or that the range held too many sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifecycles {
    /// Every sandbox that may have run in the range, with its statuses.
    Found(Vec<SandboxLifecycle>),
    /// More than [`MAX_USAGE_SANDBOXES`] sandboxes may have run in the range.
    TooMany,
}

fn corrupt(what: &str) -> RegistryError {
    RegistryError::Internal {
        message: format!("stored event has an invalid {what}"),
    }
}

impl UsageLog {
    /// The reader over `db`.
    pub fn new(db: Database) -> Self {
        UsageLog { db }
    }

    /// The lifecycles of `project`'s sandboxes that may have run in `[from, to)`: recorded
    /// before `to` and not deleted before `from`, with their status events before `to`.
    pub async fn lifecycles(
        &self,
        project: ProjectId,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Lifecycles> {
        let project = project.to_string();
        let (from_us, to_us) = (to_micros(from), to_micros(to));
        let cap = i64::try_from(MAX_USAGE_SANDBOXES + 1).unwrap_or(i64::MAX);
        let p = project.clone();
        let ids: Vec<String> = run!(self, |c| {
            sandboxes::table
                .filter(sandboxes::project_id.eq(&p))
                .filter(sandboxes::created_at.lt(to_us))
                .filter(
                    sandboxes::deleted_at
                        .is_null()
                        .or(sandboxes::deleted_at.ge(from_us)),
                )
                .order(sandboxes::id.asc())
                .limit(cap)
                .select(sandboxes::id)
                .load(c)
                .await
                .map_err(db_error)
        })?;
        if ids.len() > MAX_USAGE_SANDBOXES {
            return Ok(Lifecycles::TooMany);
        }
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(CHUNK) {
            out.extend(self.marks(&project, chunk, to_us).await?);
        }
        Ok(Lifecycles::Found(out))
    }

    /// One sandbox's lifecycle (its statuses up to now).
    pub async fn lifecycle(
        &self,
        project: ProjectId,
        sandbox: SandboxId,
    ) -> Result<SandboxLifecycle> {
        let id = sandbox.to_string();
        let mut found = self
            .marks(&project.to_string(), std::slice::from_ref(&id), i64::MAX)
            .await?;
        Ok(found.pop().unwrap_or(SandboxLifecycle {
            id: sandbox,
            provider: sandbox.provider(),
            marks: Vec::new(),
        }))
    }

    /// The status events of `ids` before `to_us`, grouped by sandbox, each in log order.
    async fn marks(
        &self,
        project: &str,
        ids: &[String],
        to_us: i64,
    ) -> Result<Vec<SandboxLifecycle>> {
        let (project, wanted) = (project.to_owned(), ids.to_vec());
        let rows: Vec<(String, String, i64)> = run!(self, |c| {
            ev::table
                .filter(ev::project_id.eq(&project))
                .filter(ev::sandbox_id.eq_any(&wanted))
                .filter(ev::kind.like("sandbox.%"))
                // `sandbox.stopped` and `sandbox.resumed` repeat the status of the
                // `sandbox.status_changed` appended with them: one mark per change.
                .filter(ev::kind.ne_all([
                    EventType::SandboxStopped.as_str(),
                    EventType::SandboxResumed.as_str(),
                ]))
                .filter(ev::occurred_at.lt(to_us))
                .filter(ev::status.is_not_null())
                .order(ev::seq.asc())
                .select((
                    // Filtered to named sandboxes above, so never null here.
                    ev::sandbox_id.assume_not_null(),
                    ev::status.assume_not_null(),
                    ev::occurred_at,
                ))
                .load(c)
                .await
                .map_err(db_error)
        })?;
        let mut by_id: BTreeMap<String, Vec<StatusMark>> = BTreeMap::new();
        for id in ids {
            by_id.insert(id.clone(), Vec::new());
        }
        for (id, status, at) in rows {
            let status = SandboxStatus::parse(&status).ok_or_else(|| corrupt("status"))?;
            let at = from_micros(at)?;
            by_id.entry(id).or_default().push(StatusMark { at, status });
        }
        by_id
            .into_iter()
            .map(|(id, marks)| {
                let id: SandboxId = id.parse().map_err(|_| corrupt("sandbox id"))?;
                Ok(SandboxLifecycle {
                    id,
                    provider: id.provider(),
                    marks,
                })
            })
            .collect()
    }
}
