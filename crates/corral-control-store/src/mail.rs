//! Email suppressions (addresses that bounced or complained) and the ids of accepted email
//! webhook messages (replay protection).

use std::time::Duration;

use corral_registry::RegistryError;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::ControlStore;
use crate::error::Result;
use crate::identity::{read, write_tx};
use crate::schema::{email_suppressions, email_webhook_ids};
use crate::to_micros;

/// Webhook ids older than this are forgotten. Messages are accepted only within a few minutes
/// of their timestamp, so an id older than this could not be replayed anyway.
pub const WEBHOOK_ID_RETENTION: Duration = Duration::from_secs(3600);

impl ControlStore {
    /// Whether mail to `email` (already normalized) is suppressed.
    pub async fn is_email_suppressed(&self, email: &str) -> Result<bool> {
        let email = email.to_owned();
        let n: i64 = read!(self, |c| email_suppressions::table
            .filter(email_suppressions::email.eq(&email))
            .count()
            .get_result(c)
            .await
            .map_err(corral_registry::db_error))?;
        Ok(n > 0)
    }

    /// Records webhook message `id` and, if given, suppresses `(email, reason)`, in one
    /// transaction. Returns `false` (and records nothing) when `id` was seen before.
    pub async fn record_email_webhook(
        &self,
        id: &str,
        suppress: Option<(&str, &str)>,
    ) -> Result<bool> {
        let id = id.to_owned();
        let suppress = suppress.map(|(e, r)| (e.to_owned(), r.to_owned()));
        let now = self.db.now();
        let cutoff = to_micros(
            now - chrono::TimeDelta::from_std(WEBHOOK_ID_RETENTION)
                .unwrap_or(chrono::TimeDelta::MAX),
        );
        let now = to_micros(now);
        let fresh = write_tx!(self, |c| {
            diesel::delete(
                email_webhook_ids::table.filter(email_webhook_ids::received_at.lt(cutoff)),
            )
            .execute(c)
            .await?;
            let n = diesel::insert_into(email_webhook_ids::table)
                .values((
                    email_webhook_ids::id.eq(&id),
                    email_webhook_ids::received_at.eq(now),
                ))
                .on_conflict_do_nothing()
                .execute(c)
                .await?;
            if n == 0 {
                return Ok::<_, RegistryError>(false);
            }
            if let Some((email, reason)) = &suppress {
                diesel::insert_into(email_suppressions::table)
                    .values((
                        email_suppressions::email.eq(email),
                        email_suppressions::reason.eq(reason),
                        email_suppressions::created_at.eq(now),
                    ))
                    .on_conflict_do_nothing()
                    .execute(c)
                    .await?;
            }
            Ok(true)
        })?;
        Ok(fresh)
    }
}
