//! What the E2B-compatible front door remembers per sandbox it created: E2B's template id,
//! alias, metadata, the create's env vars (stored sealed, never in clear) and when E2B's
//! timeout would end the sandbox; and the stateless per-sandbox access tokens E2B's SDK sends
//! to the in-sandbox API.

use std::collections::BTreeMap;
use std::fmt;

use corral_domain::limits::MAX_PAGE_LIMIT;
use corral_domain::{SandboxId, Timestamp};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use secrecy::{ExposeSecret as _, SecretString};
use zeroize::Zeroizing;

use crate::db::{from_micros, run, to_micros, write_tx};
use crate::error::{RegistryError, Result, db_error};
use crate::model::ProjectId;
use crate::registry::{ListCursor, Registry};
use crate::schema::{e2b_sandboxes as e2b, sandboxes};
use crate::secret::E2bTokenClaims;

/// What the E2B door keeps about one sandbox it created. `Debug` shows the env var names,
/// never their values.
#[derive(Clone, PartialEq, Eq)]
pub struct E2bRecord {
    /// The owning project.
    pub project_id: ProjectId,
    /// The Corral sandbox.
    pub sandbox_id: SandboxId,
    /// E2B's `templateID`.
    pub template_id: String,
    /// E2B's template alias, if any.
    pub alias: Option<String>,
    /// E2B's sandbox metadata.
    pub metadata: BTreeMap<String, String>,
    /// The create's `envVars` (stored sealed under the master key).
    pub env: BTreeMap<String, String>,
    /// When E2B's timeout would end the sandbox.
    pub end_at: Timestamp,
    /// When it was created (the listing's order).
    pub created_at: Timestamp,
}

impl fmt::Debug for E2bRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Redacted<'a>(&'a BTreeMap<String, String>);
        impl fmt::Debug for Redacted<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(self.0.keys().map(|k| (k, "<redacted>")))
                    .finish()
            }
        }
        f.debug_struct("E2bRecord")
            .field("project_id", &self.project_id)
            .field("sandbox_id", &self.sandbox_id)
            .field("template_id", &self.template_id)
            .field("alias", &self.alias)
            .field("metadata", &self.metadata)
            .field("env", &Redacted(&self.env))
            .field("end_at", &self.end_at)
            .field("created_at", &self.created_at)
            .finish()
    }
}

/// One page of [`Registry::list_e2b`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bPage {
    /// Newest first.
    pub records: Vec<E2bRecord>,
    /// The cursor of the next page; `Some` when more may follow.
    pub next: Option<String>,
}

#[derive(Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = e2b)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
struct E2bRow {
    project_id: String,
    sandbox_id: String,
    template_id: String,
    alias: Option<String>,
    metadata: String,
    env_sealed: Option<Vec<u8>>,
    end_at: i64,
    created_at: i64,
}

/// Which E2B-door records a listing keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct E2bFilter {
    /// Pairs every kept record's metadata holds.
    pub metadata: BTreeMap<String, String>,
    /// The template every kept record was created from.
    pub template: Option<String>,
    /// Kept records were created after this.
    pub started_after: Option<Timestamp>,
    /// Oldest first instead of newest first (a cursor continues in the order it was made in).
    pub oldest_first: bool,
}

/// The associated data binding sealed env vars to their project and sandbox.
fn env_aad(project: &str, sandbox: &str) -> Vec<u8> {
    format!("corral/e2b-env/v1\0{project}\0{sandbox}").into_bytes()
}

fn corrupt(what: &str) -> RegistryError {
    RegistryError::Internal {
        message: format!("stored E2B sandbox {what} cannot be read"),
    }
}

/// The most rows read per query while a filtered listing fills its page.
const SCAN_BATCH: i64 = 200;

impl Registry {
    fn e2b_row(&self, rec: &E2bRecord) -> Result<E2bRow> {
        let (project, sandbox) = (rec.project_id.to_string(), rec.sandbox_id.to_string());
        let metadata =
            serde_json::to_string(&rec.metadata).map_err(|e| RegistryError::Internal {
                message: format!("cannot serialize E2B metadata: {e}"),
            })?;
        let env_sealed = if rec.env.is_empty() {
            None
        } else {
            // A map of strings always serializes; the error arm only keeps `?` honest. The
            // JSON is wiped from memory once sealed.
            let json = Zeroizing::new(serde_json::to_string(&rec.env).map_err(|_| {
                RegistryError::Internal {
                    message: "cannot serialize E2B env vars".to_owned(),
                }
            })?);
            let secret = SecretString::from(json.as_str().to_owned());
            Some(self.key.seal(&env_aad(&project, &sandbox), &secret)?)
        };
        Ok(E2bRow {
            project_id: project,
            sandbox_id: sandbox,
            template_id: rec.template_id.clone(),
            alias: rec.alias.clone(),
            metadata,
            env_sealed,
            end_at: to_micros(rec.end_at),
            created_at: to_micros(rec.created_at),
        })
    }

    fn e2b_record(&self, row: E2bRow) -> Result<E2bRecord> {
        let metadata: BTreeMap<String, String> =
            serde_json::from_str(&row.metadata).map_err(|_| corrupt("metadata"))?;
        let env = match &row.env_sealed {
            None => BTreeMap::new(),
            Some(sealed) => {
                let opened = self
                    .key
                    .open(&env_aad(&row.project_id, &row.sandbox_id), sealed)?;
                serde_json::from_str(opened.expose_secret()).map_err(|_| corrupt("env vars"))?
            }
        };
        Ok(E2bRecord {
            project_id: crate::rows::parse_project_id(&row.project_id)?,
            sandbox_id: row.sandbox_id.parse().map_err(|_| corrupt("id"))?,
            template_id: row.template_id,
            alias: row.alias,
            metadata,
            env,
            end_at: from_micros(row.end_at)?,
            created_at: from_micros(row.created_at)?,
        })
    }

    /// Inserts the record of a sandbox created through the E2B door; a repeated put of the
    /// same (project, sandbox) keeps the first record (insert-or-nothing, so a replayed create
    /// changes nothing). The env vars are stored sealed under the master key, bound to the
    /// project and sandbox. `NotFound` when the sandbox is not the project's.
    pub async fn put_e2b(&self, rec: &E2bRecord) -> Result<()> {
        let row = self.e2b_row(rec)?;
        write_tx!(self, |c| {
            let owned: bool = diesel::select(diesel::dsl::exists(
                sandboxes::table
                    .filter(sandboxes::project_id.eq(&row.project_id))
                    .filter(sandboxes::id.eq(&row.sandbox_id)),
            ))
            .get_result(c)
            .await
            .map_err(db_error)?;
            if !owned {
                return Err(RegistryError::NotFound { what: "sandbox" });
            }
            diesel::insert_into(e2b::table)
                .values(&row)
                .on_conflict((e2b::project_id, e2b::sandbox_id))
                .do_nothing()
                .execute(c)
                .await
                .map_err(db_error)?;
            Ok::<_, RegistryError>(())
        })
    }

    /// The E2B record of `sandbox` in `project` (tombstoned sandboxes included), env opened.
    pub async fn get_e2b(
        &self,
        project: ProjectId,
        sandbox: SandboxId,
    ) -> Result<Option<E2bRecord>> {
        let (p, s) = (project.to_string(), sandbox.to_string());
        let row: Option<E2bRow> = run!(self, |c| {
            e2b::table
                .filter(e2b::project_id.eq(&p))
                .filter(e2b::sandbox_id.eq(&s))
                .select(E2bRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.map(|r| self.e2b_record(r)).transpose()
    }

    /// Sets when E2B's timeout ends the sandbox (E2B's set-timeout and connect-with-timeout).
    /// `Ok(false)` when the project has no E2B record of that sandbox.
    pub async fn set_e2b_end(
        &self,
        project: ProjectId,
        sandbox: SandboxId,
        end_at: Timestamp,
    ) -> Result<bool> {
        let (p, s, end) = (project.to_string(), sandbox.to_string(), to_micros(end_at));
        let n = run!(self, |c| {
            diesel::update(
                e2b::table
                    .filter(e2b::project_id.eq(&p))
                    .filter(e2b::sandbox_id.eq(&s)),
            )
            .set(e2b::end_at.eq(end))
            .execute(c)
            .await
            .map_err(db_error)
        })?;
        Ok(n > 0)
    }

    /// One page of the project's E2B-door sandboxes that are not deleted, newest first by
    /// (createdAt, sandbox id), keeping those whose metadata holds every pair of `filter`.
    /// The page is filled (reading further as filtered rows drop out) up to `limit` (1–200;
    /// else [`RegistryError::InvalidInput`]); `next` is the cursor after the page when another
    /// match follows. The cursor has the form of [`Registry::list_sandboxes`]' cursors; any
    /// other string is [`RegistryError::InvalidCursor`].
    pub async fn list_e2b(
        &self,
        project: ProjectId,
        filter: &BTreeMap<String, String>,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<E2bPage> {
        let filter = E2bFilter {
            metadata: filter.clone(),
            ..E2bFilter::default()
        };
        self.list_e2b_matching(project, &filter, limit, cursor)
            .await
    }

    /// As [`Registry::list_e2b`], keeping the records `filter` admits (metadata pairs, and
    /// optionally one template and a lower bound on the creation time), newest first or, with
    /// [`E2bFilter::oldest_first`], oldest first.
    pub async fn list_e2b_matching(
        &self,
        project: ProjectId,
        filter: &E2bFilter,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<E2bPage> {
        let started_after = filter.started_after.map(to_micros);
        if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
            return Err(RegistryError::InvalidInput {
                message: format!("limit must be 1–{MAX_PAGE_LIMIT}"),
            });
        }
        let mut after = cursor
            .map(ListCursor::parse)
            .transpose()?
            .map(|c| (c.created_at_micros, c.id.to_string()));
        let want = limit as usize;
        // One match past the page tells whether another page exists. The first read is the
        // page and that one row; while filtered-out rows leave it short, reads double in size
        // up to SCAN_BATCH.
        let mut batch = i64::from(limit) + 1;
        let max_batch = SCAN_BATCH.max(batch);
        let mut matched: Vec<E2bRow> = Vec::with_capacity(want + 1);
        loop {
            let rows = self
                .e2b_batch(project, after.clone(), batch, filter.oldest_first)
                .await?;
            let exhausted = rows.len() < usize::try_from(batch).unwrap_or(usize::MAX);
            batch = batch.saturating_mul(2).min(max_batch);
            if let Some(last) = rows.last() {
                after = Some((last.created_at, last.sandbox_id.clone()));
            }
            for row in rows {
                let admitted = filter
                    .template
                    .as_ref()
                    .is_none_or(|t| *t == row.template_id)
                    && started_after.is_none_or(|after| row.created_at > after);
                if admitted && metadata_matches(&row.metadata, &filter.metadata)? {
                    matched.push(row);
                    if matched.len() > want {
                        break;
                    }
                }
            }
            if matched.len() > want || exhausted {
                break;
            }
        }
        let more = matched.len() > want;
        matched.truncate(want);
        let next = match matched.last() {
            Some(last) if more => Some(
                ListCursor {
                    created_at_micros: last.created_at,
                    id: last.sandbox_id.parse().map_err(|_| corrupt("id"))?,
                }
                .to_string(),
            ),
            _ => None,
        };
        let records = matched
            .into_iter()
            .map(|r| self.e2b_record(r))
            .collect::<Result<_>>()?;
        Ok(E2bPage { records, next })
    }

    /// Up to `limit` live E2B rows of `project` after the keyset position `after`, newest first.
    async fn e2b_batch(
        &self,
        project: ProjectId,
        after: Option<(i64, String)>,
        limit: i64,
        oldest_first: bool,
    ) -> Result<Vec<E2bRow>> {
        let p = project.to_string();
        run!(self, |c| {
            let mut query = e2b::table
                .inner_join(sandboxes::table.on(sandboxes::id.eq(e2b::sandbox_id)))
                .filter(e2b::project_id.eq(&p))
                .filter(sandboxes::project_id.eq(&p))
                .filter(sandboxes::deleted_at.is_null())
                .limit(limit)
                .select(E2bRow::as_select())
                .into_boxed();
            query = if oldest_first {
                query.order((e2b::created_at.asc(), e2b::sandbox_id.asc()))
            } else {
                query.order((e2b::created_at.desc(), e2b::sandbox_id.desc()))
            };
            match (&after, oldest_first) {
                (None, _) => {}
                // `(created_at, sandbox_id) < cursor`, spelled so the page index can seek.
                (Some((created, id)), false) => {
                    query = query.filter(e2b::created_at.le(*created)).filter(
                        e2b::created_at
                            .lt(*created)
                            .or(e2b::sandbox_id.lt(id.clone())),
                    );
                }
                // `(created_at, sandbox_id) > cursor`.
                (Some((created, id)), true) => {
                    query = query.filter(e2b::created_at.ge(*created)).filter(
                        e2b::created_at
                            .gt(*created)
                            .or(e2b::sandbox_id.gt(id.clone())),
                    );
                }
            }
            query.load(c).await.map_err(db_error)
        })
    }

    /// The access token E2B's SDK sends to the in-sandbox API (`X-Access-Token`) for `sandbox`
    /// of `project`, issued to API key `key_id` for [`E2B_TOKEN_LIFETIME`]:
    /// `<project id>.<key id>.<expiry>.<base64url HMAC-SHA256>` under a subkey of the master
    /// key used for nothing else. Stateless: every replica issues and checks the same token;
    /// revoking the key ends it ([`Registry::authorize_e2b_access_token`]).
    pub fn e2b_access_token(&self, project: ProjectId, key_id: &str, sandbox: SandboxId) -> String {
        let ends = self.db.now() + E2B_TOKEN_LIFETIME;
        self.e2b_access_token_ending(project, key_id, sandbox, ends)
    }

    /// [`Registry::e2b_access_token`] ending at `ends` (second precision).
    pub fn e2b_access_token_ending(
        &self,
        project: ProjectId,
        key_id: &str,
        sandbox: SandboxId,
        ends: Timestamp,
    ) -> String {
        self.key
            .e2b_access_token(project, key_id, ends.timestamp(), sandbox)
    }

    /// What a presented access token says when it is valid for `sandbox` under this master key
    /// (compared in constant time) and has not ended; `None` otherwise (malformed, another
    /// sandbox's, another master key's, past its end). Neither whether the sandbox exists nor
    /// whether the key is still live is checked here.
    pub fn check_e2b_access_token(
        &self,
        sandbox: SandboxId,
        token: &str,
    ) -> Option<E2bTokenClaims> {
        let claims = self.key.check_e2b_access_token(sandbox, token)?;
        (self.db.now().timestamp() < claims.expires_at).then_some(claims)
    }

    /// The project a presented access token opens `sandbox` for: a valid token
    /// ([`Registry::check_e2b_access_token`]) whose API key is still live (not revoked, not
    /// expired, of that project). The key's state is read as [`Registry::authenticate`] reads
    /// it: revoking through this registry takes effect at once, through another process
    /// within the cache TTL.
    pub async fn authorize_e2b_access_token(
        &self,
        sandbox: SandboxId,
        token: &str,
    ) -> Result<Option<ProjectId>> {
        let Some(claims) = self.check_e2b_access_token(sandbox, token) else {
            return Ok(None);
        };
        let Some((key, _)) = self.key_state(&claims.key_id).await? else {
            return Ok(None);
        };
        let live = key
            .expires_at
            .is_none_or(|at| to_micros(self.db.now()) < at);
        Ok((live && key.project == claims.project).then_some(claims.project))
    }
}

/// How long an E2B access token opens its sandbox: a day, as long as E2B's longest sandbox
/// timeout, so an SDK's `Sandbox` object never outlives its token before its sandbox ends; an
/// SDK that reconnects (`Sandbox.connect`) gets a fresh one.
pub const E2B_TOKEN_LIFETIME: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// Whether stored metadata JSON holds every pair of `filter`.
fn metadata_matches(stored: &str, filter: &BTreeMap<String, String>) -> Result<bool> {
    if filter.is_empty() {
        return Ok(true);
    }
    let metadata: BTreeMap<String, String> =
        serde_json::from_str(stored).map_err(|_| corrupt("metadata"))?;
    Ok(filter
        .iter()
        .all(|(k, v)| metadata.get(k).is_some_and(|m| m == v)))
}
