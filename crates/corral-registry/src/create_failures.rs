//! Why a sandbox's create failed: the answer its caller got, kept for the console (the
//! registry's record says only that it failed).

use corral_domain::{SandboxId, Timestamp};
use diesel::prelude::*;
use diesel::upsert::excluded;
use diesel_async::RunQueryDsl;

use crate::db::{from_micros, run, to_micros, write_tx};
use crate::error::{RegistryError, Result, db_error};
use crate::model::ProjectId;
use crate::registry::Registry;
use crate::schema::create_failures as f;

/// Longest reason kept, in characters (an answer's message is far shorter).
pub const MAX_FAILURE_REASON: usize = 1000;

/// Why a create failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateFailure {
    /// The v3 error code the caller was answered.
    pub code: String,
    /// The answer's message.
    pub reason: String,
    /// When it was recorded.
    pub at: Timestamp,
}

impl Registry {
    /// Records why `sandbox`'s create failed (a later failure of the same create replaces it).
    /// The reason is cut to [`MAX_FAILURE_REASON`] characters.
    pub async fn record_create_failure(
        &self,
        project: ProjectId,
        sandbox: SandboxId,
        code: &str,
        reason: &str,
    ) -> Result<()> {
        let (p, s) = (project.to_string(), sandbox.to_string());
        let (code, reason) = (
            code.to_owned(),
            reason.chars().take(MAX_FAILURE_REASON).collect::<String>(),
        );
        let at = to_micros(self.database().now());
        write_tx!(self, |c| {
            diesel::insert_into(f::table)
                .values((
                    f::project_id.eq(&p),
                    f::sandbox_id.eq(&s),
                    f::code.eq(&code),
                    f::reason.eq(&reason),
                    f::at.eq(at),
                ))
                .on_conflict((f::project_id, f::sandbox_id))
                .do_update()
                .set((
                    f::code.eq(excluded(f::code)),
                    f::reason.eq(excluded(f::reason)),
                    f::at.eq(excluded(f::at)),
                ))
                .execute(c)
                .await
                .map_err(db_error)?;
            Ok::<_, RegistryError>(())
        })
    }

    /// Why `sandbox`'s create failed, if it did and the reason was kept.
    pub async fn create_failure(
        &self,
        project: ProjectId,
        sandbox: SandboxId,
    ) -> Result<Option<CreateFailure>> {
        let (p, s) = (project.to_string(), sandbox.to_string());
        let row: Option<(String, String, i64)> = run!(self, |c| {
            f::table
                .filter(f::project_id.eq(&p))
                .filter(f::sandbox_id.eq(&s))
                .select((f::code, f::reason, f::at))
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.map(|(code, reason, at)| {
            Ok(CreateFailure {
                code,
                reason,
                at: from_micros(at)?,
            })
        })
        .transpose()
    }
}
