//! Legal releases and acceptances. Releases are numbered per document from 1 and never
//! change; acceptances are kept for ever (the audit trail of who accepted what, when).

use corral_domain::Timestamp;
use corral_registry::RegistryError;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::error::Result;
use crate::identity::{read, write_tx};
use crate::model::UserId;
use crate::schema::{legal_acceptances, legal_releases};
use crate::{ControlStore, from_micros, to_micros};

/// One published release of a legal document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegalRelease {
    /// `terms`, `privacy` or `acceptable-use`.
    pub document: String,
    /// Its number, from 1.
    pub release: i64,
    /// The title.
    pub title: String,
    /// The text (Markdown).
    pub body: String,
    /// When it was published.
    pub published_at: Timestamp,
}

/// The result of an acceptance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LegalAcceptOutcome {
    /// Recorded (or already recorded before: accepting twice is harmless).
    Accepted,
    /// The release exists but a newer one is current.
    Changed {
        /// The current release.
        current: i64,
    },
    /// No such document or release.
    NotFound,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = legal_releases)]
struct ReleaseRow {
    document: String,
    release_number: i64,
    title: String,
    body: String,
    published_at: i64,
}

impl ReleaseRow {
    fn into_release(self) -> Result<LegalRelease> {
        Ok(LegalRelease {
            document: self.document,
            release: self.release_number,
            title: self.title,
            body: self.body,
            published_at: from_micros(self.published_at)?,
        })
    }
}

impl ControlStore {
    /// Publishes the next release of `document`; returns its number.
    pub async fn publish_legal_release(
        &self,
        document: &str,
        title: &str,
        body: &str,
    ) -> Result<i64> {
        let (document, title, body) = (document.to_owned(), title.to_owned(), body.to_owned());
        let now = to_micros(self.db.now());
        let n = write_tx!(self, |c| {
            let last: Option<i64> = legal_releases::table
                .filter(legal_releases::document.eq(&document))
                .select(diesel::dsl::max(legal_releases::release_number))
                .first(c)
                .await?;
            let next = last.unwrap_or(0) + 1;
            diesel::insert_into(legal_releases::table)
                .values((
                    legal_releases::document.eq(&document),
                    legal_releases::release_number.eq(next),
                    legal_releases::title.eq(&title),
                    legal_releases::body.eq(&body),
                    legal_releases::published_at.eq(now),
                ))
                .execute(c)
                .await?;
            Ok::<_, RegistryError>(next)
        })?;
        Ok(n)
    }

    /// The current (newest) release of every published document, by document.
    pub async fn current_legal_releases(&self) -> Result<Vec<LegalRelease>> {
        let rows: Vec<ReleaseRow> = read!(self, |c| {
            let newest = diesel::alias!(legal_releases as newest);
            legal_releases::table
                .filter(diesel::dsl::not(diesel::dsl::exists(
                    newest
                        .filter(
                            newest
                                .field(legal_releases::document)
                                .eq(legal_releases::document),
                        )
                        .filter(
                            newest
                                .field(legal_releases::release_number)
                                .gt(legal_releases::release_number),
                        ),
                )))
                .order(legal_releases::document.asc())
                .select(ReleaseRow::as_select())
                .load(c)
                .await
                .map_err(corral_registry::db_error)
        })?;
        rows.into_iter().map(ReleaseRow::into_release).collect()
    }

    /// Release `release` of `document`, if published.
    pub async fn legal_release(
        &self,
        document: &str,
        release: i64,
    ) -> Result<Option<LegalRelease>> {
        let document = document.to_owned();
        let row: Option<ReleaseRow> = read!(self, |c| legal_releases::table
            .filter(legal_releases::document.eq(&document))
            .filter(legal_releases::release_number.eq(release))
            .select(ReleaseRow::as_select())
            .first(c)
            .await
            .optional()
            .map_err(corral_registry::db_error))?;
        row.map(ReleaseRow::into_release).transpose()
    }

    /// Every (document, release) the user has accepted.
    pub async fn legal_acceptances(&self, user: UserId) -> Result<Vec<(String, i64)>> {
        let id = user.to_string();
        Ok(read!(self, |c| legal_acceptances::table
            .filter(legal_acceptances::user_id.eq(&id))
            .order((
                legal_acceptances::document.asc(),
                legal_acceptances::release_number.asc(),
            ))
            .select((
                legal_acceptances::document,
                legal_acceptances::release_number
            ))
            .load(c)
            .await
            .map_err(corral_registry::db_error))?)
    }

    /// Records that `user` accepted `release` of `document`, if it is the current release —
    /// checked in the same transaction, so a release published concurrently is never
    /// accepted unseen.
    pub async fn accept_legal_release(
        &self,
        user: UserId,
        document: &str,
        release: i64,
    ) -> Result<LegalAcceptOutcome> {
        let (id, document) = (user.to_string(), document.to_owned());
        let now = to_micros(self.db.now());
        let outcome = write_tx!(self, |c| {
            let current: Option<i64> = legal_releases::table
                .filter(legal_releases::document.eq(&document))
                .select(diesel::dsl::max(legal_releases::release_number))
                .first(c)
                .await?;
            let Some(current) = current else {
                return Ok::<_, RegistryError>(LegalAcceptOutcome::NotFound);
            };
            if release < 1 || release > current {
                return Ok(LegalAcceptOutcome::NotFound);
            }
            if release != current {
                return Ok(LegalAcceptOutcome::Changed { current });
            }
            diesel::insert_into(legal_acceptances::table)
                .values((
                    legal_acceptances::user_id.eq(&id),
                    legal_acceptances::document.eq(&document),
                    legal_acceptances::release_number.eq(release),
                    legal_acceptances::accepted_at.eq(now),
                ))
                .on_conflict_do_nothing()
                .execute(c)
                .await?;
            Ok(LegalAcceptOutcome::Accepted)
        })?;
        Ok(outcome)
    }
}
