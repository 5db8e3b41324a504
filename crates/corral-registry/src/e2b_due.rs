//! The E2B door's sweep: which door sandboxes have outlived their E2B timeout.

use corral_domain::{SandboxId, Timestamp};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::{run, to_micros};
use crate::error::{RegistryError, Result, db_error};
use crate::model::ProjectId;
use crate::registry::Registry;
use crate::schema::{e2b_sandboxes as e2b, sandboxes};

impl Registry {
    /// Up to `limit` live (not deleted) E2B-door sandboxes whose `end_at` is at or before
    /// `now`, the longest overdue first, across every project.
    pub async fn due_e2b(&self, now: Timestamp, limit: u32) -> Result<Vec<(ProjectId, SandboxId)>> {
        let now = to_micros(now);
        let rows: Vec<(String, String)> = run!(self, |c| {
            e2b::table
                .inner_join(
                    sandboxes::table.on(sandboxes::id
                        .eq(e2b::sandbox_id)
                        .and(sandboxes::project_id.eq(e2b::project_id))),
                )
                .filter(sandboxes::deleted_at.is_null())
                .filter(e2b::end_at.le(now))
                .order(e2b::end_at.asc())
                .limit(i64::from(limit))
                .select((e2b::project_id, e2b::sandbox_id))
                .load(c)
                .await
                .map_err(db_error)
        })?;
        let corrupt = || RegistryError::Internal {
            message: "a stored E2B sandbox id cannot be read".into(),
        };
        rows.into_iter()
            .map(|(p, s)| {
                Ok((
                    p.parse().map_err(|_| corrupt())?,
                    s.parse().map_err(|_| corrupt())?,
                ))
            })
            .collect()
    }
}
