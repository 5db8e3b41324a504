//! The store: atomic claims, transitions, reconciliation hand-off and retention.

use std::sync::Arc;
use std::time::Duration;

use corral_domain::{OperationId, Timestamp};
use corral_registry::schema::idempotency_keys as ik;
use corral_registry::{Database, ProjectId, db_error, with_conn};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use ulid::Ulid;

use crate::error::{IdempotencyError, Result};
use crate::key::{Fingerprint, IdempotencyKey};
use crate::replays::{Completed, Replays};

/// Tunables of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdempotencyConfig {
    /// How long a claim stays owned without renewal; after it, the claim is stale and the next
    /// claimant gets [`ClaimOutcome::NeedsReconciliation`].
    pub lease: Duration,
    /// How long a record is kept (at least 24 h).
    pub retention: Duration,
    /// The `Retry-After` suggested while another request holds the key.
    pub in_progress_retry_after: Duration,
}

impl Default for IdempotencyConfig {
    /// Lease 120 s, retention 24 h, retry after 1 s.
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(120),
            retention: Duration::from_secs(24 * 60 * 60),
            in_progress_retry_after: Duration::from_secs(1),
        }
    }
}

/// A claim held by this process: the right to run (or reconcile) the request of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The project the key belongs to.
    pub project_id: ProjectId,
    /// The key.
    pub key: IdempotencyKey,
    /// This holder's random owner token (the store only accepts transitions from it).
    pub owner: String,
    /// Until when the claim is owned without renewal.
    pub lease_until: Timestamp,
    /// The create operation attached to the claim, if any.
    pub operation_id: Option<OperationId>,
    /// The request's fingerprint, remembered with the response on completion.
    fingerprint: [u8; 32],
}

/// A stored response, replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status code.
    pub status: u16,
    /// The exact body bytes.
    pub body: Vec<u8>,
}

/// The answer to [`IdempotencyStore::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// New key: the caller owns it and runs the request (attach the operation id before the
    /// provider call, then `complete`, `release` or `mark_unknown`).
    Claimed(Claim),
    /// Already completed with the same fingerprint: replay this response.
    Replay(StoredResponse),
    /// Another request holds the key; retry after this long (`idempotency_in_progress`).
    InProgress {
        /// Suggested `Retry-After`.
        retry_after: Duration,
    },
    /// The key was used with a different request (`idempotency_conflict`).
    Conflict,
    /// A previous attempt's outcome could not be confirmed (`idempotency_outcome_unknown` /
    /// `sandbox_create_outcome_unknown`); reconcile by operation id.
    Unknown {
        /// The logical create operation, if one was attached.
        operation_id: Option<OperationId>,
    },
    /// The previous owner's lease ran out while the request was in progress (it likely died).
    /// The caller now owns the claim ONLY to reconcile: it must look the operation up at the
    /// provider and never start a second create. `operation_id` is `None` when none was
    /// attached, which (by the attach-before-call contract) means no provider call started.
    NeedsReconciliation(Claim),
}

/// A key that needs a reconciler's attention (unknown outcome or stale in-progress claim).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileCandidate {
    /// The project.
    pub project_id: ProjectId,
    /// The key.
    pub key: IdempotencyKey,
    /// The attached operation, if any.
    pub operation_id: Option<OperationId>,
    /// `true` for an unknown outcome, `false` for a stale in-progress claim.
    pub unknown: bool,
}

/// The idempotency store, in the registry's database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct IdempotencyStore {
    db: Database,
    config: IdempotencyConfig,
    /// Completed records seen by this process (shared by its clones): replays without a
    /// database round trip.
    replays: Arc<Replays>,
}

const IN_PROGRESS: &str = "in_progress";
const COMPLETED: &str = "completed";
const UNKNOWN: &str = "unknown";

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = ik)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
struct Row {
    project_id: String,
    idempotency_key: String,
    fingerprint: Vec<u8>,
    state: String,
    owner: String,
    lease_until: i64,
    operation_id: Option<String>,
    response_status: Option<i32>,
    response_body: Option<Vec<u8>>,
    created_at: i64,
    updated_at: i64,
    expires_at: i64,
}

fn micros(t: Timestamp) -> i64 {
    t.timestamp_micros()
}

fn from_micros(us: i64) -> Result<Timestamp> {
    chrono::DateTime::from_timestamp_micros(us).ok_or_else(|| IdempotencyError::Internal {
        message: format!("stored timestamp {us} is out of range"),
    })
}

fn span(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn parse_operation(s: Option<&str>) -> Result<Option<OperationId>> {
    s.map(|s| {
        s.parse().map_err(|_| IdempotencyError::Internal {
            message: "stored operation id cannot be read".to_owned(),
        })
    })
    .transpose()
}

fn new_owner() -> String {
    format!("own_{}", Ulid::generate().to_string().to_ascii_lowercase())
}

/// Runs `$body` (yielding `Result<T, RegistryError>`) on a pooled connection of either
/// backend, as a detached task under the database's operation timeout (see
/// `corral_registry::Database::detached`: an operation is never dropped half-way).
macro_rules! run {
    ($self:ident, |$c:ident| $body:expr) => {{
        let db = $self.db.clone();
        $self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                with_conn!(&mut conn, |$c| $body)
            })
            .await
            .map_err(IdempotencyError::from)
    }};
}

impl IdempotencyStore {
    /// A store over `db` (connected and migrated: the table comes with the registry's
    /// migrations). Time comes from the database's clock.
    pub fn new(db: Database, config: IdempotencyConfig) -> Self {
        Self {
            db,
            config,
            replays: Arc::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &IdempotencyConfig {
        &self.config
    }

    async fn fetch(&self, project: &str, key: &str) -> Result<Option<Row>> {
        let (project, key) = (project.to_owned(), key.to_owned());
        run!(self, |c| ik::table
            .filter(ik::project_id.eq(&project))
            .filter(ik::idempotency_key.eq(&key))
            .select(Row::as_select())
            .first(c)
            .await
            .optional()
            .map_err(db_error))
    }

    /// Claims `key` in `project` for a request with `fingerprint`, atomically: one
    /// unique-constrained insert decides the winner; everyone else reads the existing record.
    pub async fn claim(
        &self,
        project: ProjectId,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Result<ClaimOutcome> {
        let project_text = project.to_string();
        // A record can vanish between the insert and the read (released or reaped): then the
        // insert is simply tried again. Three rounds are plenty; a fourth means churn.
        for _ in 0..3 {
            let now = self.db.now();
            let owner = new_owner();
            let lease_until = micros(now).saturating_add(span(self.config.lease));
            let row = Row {
                project_id: project_text.clone(),
                idempotency_key: key.as_str().to_owned(),
                fingerprint: fingerprint.as_bytes().to_vec(),
                state: IN_PROGRESS.to_owned(),
                owner: owner.clone(),
                lease_until,
                operation_id: None,
                response_status: None,
                response_body: None,
                created_at: micros(now),
                updated_at: micros(now),
                expires_at: micros(now).saturating_add(span(self.config.retention)),
            };
            let now_us = micros(now);
            if let Some(done) = self.replays.get(&project_text, key.as_str(), now_us) {
                return Ok(if &done.fingerprint == fingerprint.as_bytes() {
                    ClaimOutcome::Replay(StoredResponse {
                        status: done.status,
                        body: done.body.to_vec(),
                    })
                } else {
                    ClaimOutcome::Conflict
                });
            }
            let claim = Claim {
                project_id: project,
                key: key.clone(),
                owner,
                lease_until: from_micros(lease_until)?,
                operation_id: None,
                fingerprint: *fingerprint.as_bytes(),
            };
            let candidate = row.clone();
            let inserted = run!(self, |c| diesel::insert_into(ik::table)
                .values(&candidate)
                .on_conflict((ik::project_id, ik::idempotency_key))
                .do_nothing()
                .execute(c)
                .await
                .map_err(db_error))?;
            if inserted == 1 {
                return Ok(ClaimOutcome::Claimed(claim));
            }
            let Some(existing) = self.fetch(&project_text, key.as_str()).await? else {
                continue;
            };
            if existing.state == COMPLETED && existing.expires_at <= now_us {
                // Past retention and not reaped yet: the key is new again.
                if self.replace_expired(&row, now_us).await? {
                    return Ok(ClaimOutcome::Claimed(claim));
                }
                continue;
            }
            if existing.fingerprint != fingerprint.as_bytes() {
                return Ok(ClaimOutcome::Conflict);
            }
            let operation_id = parse_operation(existing.operation_id.as_deref())?;
            match existing.state.as_str() {
                COMPLETED => {
                    let status = existing
                        .response_status
                        .and_then(|s| u16::try_from(s).ok())
                        .ok_or_else(|| IdempotencyError::Internal {
                            message: "completed record without a status".to_owned(),
                        })?;
                    let body = existing.response_body.unwrap_or_default();
                    if let Ok(fingerprint) = <[u8; 32]>::try_from(existing.fingerprint.as_slice()) {
                        let completed = Completed {
                            fingerprint,
                            status,
                            body: Arc::from(body.as_slice()),
                            expires_at: existing.expires_at,
                        };
                        self.replays
                            .put(&project_text, key.as_str(), completed, now_us);
                    }
                    return Ok(ClaimOutcome::Replay(StoredResponse { status, body }));
                }
                UNKNOWN => return Ok(ClaimOutcome::Unknown { operation_id }),
                _ if existing.lease_until > now_us => {
                    return Ok(ClaimOutcome::InProgress {
                        retry_after: self.config.in_progress_retry_after,
                    });
                }
                _ => {
                    // The owner's lease ran out: take the claim over, but only to reconcile.
                    // The compare-and-set on the old owner lets exactly one claimant win.
                    let won = self
                        .take_over_stale(&existing, &claim.owner, lease_until, now_us)
                        .await?;
                    if won {
                        return Ok(ClaimOutcome::NeedsReconciliation(Claim {
                            operation_id,
                            ..claim
                        }));
                    }
                    return Ok(ClaimOutcome::InProgress {
                        retry_after: self.config.in_progress_retry_after,
                    });
                }
            }
        }
        Ok(ClaimOutcome::InProgress {
            retry_after: self.config.in_progress_retry_after,
        })
    }

    async fn replace_expired(&self, row: &Row, now: i64) -> Result<bool> {
        let row = row.clone();
        let n = run!(self, |c| diesel::update(
            ik::table
                .filter(ik::project_id.eq(&row.project_id))
                .filter(ik::idempotency_key.eq(&row.idempotency_key))
                .filter(ik::state.eq(COMPLETED))
                .filter(ik::expires_at.le(now)),
        )
        .set((
            ik::fingerprint.eq(&row.fingerprint),
            ik::state.eq(IN_PROGRESS),
            ik::owner.eq(&row.owner),
            ik::lease_until.eq(row.lease_until),
            ik::operation_id.eq(None::<String>),
            ik::response_status.eq(None::<i32>),
            ik::response_body.eq(None::<Vec<u8>>),
            ik::created_at.eq(row.created_at),
            ik::updated_at.eq(row.updated_at),
            ik::expires_at.eq(row.expires_at),
        ))
        .execute(c)
        .await
        .map_err(db_error))?;
        Ok(n == 1)
    }

    async fn take_over_stale(
        &self,
        existing: &Row,
        owner: &str,
        lease_until: i64,
        now: i64,
    ) -> Result<bool> {
        let existing = existing.clone();
        let owner = owner.to_owned();
        let n = run!(self, |c| diesel::update(
            ik::table
                .filter(ik::project_id.eq(&existing.project_id))
                .filter(ik::idempotency_key.eq(&existing.idempotency_key))
                .filter(ik::state.eq(IN_PROGRESS))
                .filter(ik::owner.eq(&existing.owner))
                .filter(ik::lease_until.le(now)),
        )
        .set((
            ik::owner.eq(&owner),
            ik::lease_until.eq(lease_until),
            ik::updated_at.eq(now),
        ))
        .execute(c)
        .await
        .map_err(db_error))?;
        Ok(n == 1)
    }

    /// Attaches the logical operation id (call before the provider call).
    pub async fn attach_operation(&self, claim: &mut Claim, operation: OperationId) -> Result<()> {
        let (project, owner) = (claim.project_id.to_string(), claim.owner.clone());
        let key = claim.key.as_str().to_owned();
        let now = micros(self.db.now());
        let op = operation.to_string();
        let n = run!(self, |c| diesel::update(
            ik::table
                .filter(ik::project_id.eq(&project))
                .filter(ik::idempotency_key.eq(&key))
                .filter(ik::owner.eq(&owner))
                .filter(ik::state.eq(IN_PROGRESS)),
        )
        .set((ik::operation_id.eq(Some(&op)), ik::updated_at.eq(now)))
        .execute(c)
        .await
        .map_err(db_error))?;
        if n != 1 {
            return Err(IdempotencyError::ClaimLost);
        }
        claim.operation_id = Some(operation);
        Ok(())
    }

    /// Extends the lease of a claim still held (long provider calls).
    pub async fn renew(&self, claim: &mut Claim) -> Result<()> {
        let (project, owner) = (claim.project_id.to_string(), claim.owner.clone());
        let key = claim.key.as_str().to_owned();
        let now = self.db.now();
        let lease_until = micros(now).saturating_add(span(self.config.lease));
        let n = run!(self, |c| diesel::update(
            ik::table
                .filter(ik::project_id.eq(&project))
                .filter(ik::idempotency_key.eq(&key))
                .filter(ik::owner.eq(&owner))
                .filter(ik::state.eq(IN_PROGRESS)),
        )
        .set((
            ik::lease_until.eq(lease_until),
            ik::updated_at.eq(micros(now))
        ))
        .execute(c)
        .await
        .map_err(db_error))?;
        if n != 1 {
            return Err(IdempotencyError::ClaimLost);
        }
        claim.lease_until = from_micros(lease_until)?;
        Ok(())
    }

    /// Stores the definitive response; later claims with the same fingerprint replay it.
    /// Retention restarts now.
    pub async fn complete(&self, claim: &Claim, status: u16, body: &[u8]) -> Result<()> {
        let kept = body;
        let body = body.to_vec();
        let (project, owner) = (claim.project_id.to_string(), claim.owner.clone());
        let key = claim.key.as_str().to_owned();
        let now = micros(self.db.now());
        let expires = now.saturating_add(span(self.config.retention));
        let n = run!(self, |c| diesel::update(
            ik::table
                .filter(ik::project_id.eq(&project))
                .filter(ik::idempotency_key.eq(&key))
                .filter(ik::owner.eq(&owner))
                .filter(ik::state.ne(COMPLETED)),
        )
        .set((
            ik::state.eq(COMPLETED),
            ik::response_status.eq(Some(i32::from(status))),
            ik::response_body.eq(Some(&body)),
            ik::updated_at.eq(now),
            ik::expires_at.eq(expires),
        ))
        .execute(c)
        .await
        .map_err(db_error))?;
        if n != 1 {
            return Err(IdempotencyError::ClaimLost);
        }
        let completed = Completed {
            fingerprint: claim.fingerprint,
            status,
            body: Arc::from(kept),
            expires_at: expires,
        };
        let project = claim.project_id.to_string();
        self.replays
            .put(&project, claim.key.as_str(), completed, now);
        Ok(())
    }

    /// Forgets the claim (retryable failure, or a rejection before execution): the key can be
    /// used again.
    pub async fn release(&self, claim: &Claim) -> Result<()> {
        let (project, owner) = (claim.project_id.to_string(), claim.owner.clone());
        let key = claim.key.as_str().to_owned();
        let n = run!(self, |c| diesel::delete(
            ik::table
                .filter(ik::project_id.eq(&project))
                .filter(ik::idempotency_key.eq(&key))
                .filter(ik::owner.eq(&owner))
                .filter(ik::state.ne(COMPLETED)),
        )
        .execute(c)
        .await
        .map_err(db_error))?;
        if n != 1 {
            return Err(IdempotencyError::ClaimLost);
        }
        Ok(())
    }

    /// Records that the outcome could not be confirmed; later claims get
    /// [`ClaimOutcome::Unknown`] until reconciliation completes or releases the key.
    pub async fn mark_unknown(&self, claim: &Claim, operation: OperationId) -> Result<()> {
        let (project, owner) = (claim.project_id.to_string(), claim.owner.clone());
        let key = claim.key.as_str().to_owned();
        let now = micros(self.db.now());
        let op = operation.to_string();
        let n = run!(self, |c| diesel::update(
            ik::table
                .filter(ik::project_id.eq(&project))
                .filter(ik::idempotency_key.eq(&key))
                .filter(ik::owner.eq(&owner))
                .filter(ik::state.ne(COMPLETED)),
        )
        .set((
            ik::state.eq(UNKNOWN),
            ik::operation_id.eq(Some(&op)),
            ik::updated_at.eq(now),
        ))
        .execute(c)
        .await
        .map_err(db_error))?;
        if n != 1 {
            return Err(IdempotencyError::ClaimLost);
        }
        Ok(())
    }

    /// Takes ownership of an `unknown` or stale in-progress record to reconcile it (for the
    /// background reconciler); `None` when it is neither (someone else holds or finished it).
    /// While reconciliation runs, clients see [`ClaimOutcome::InProgress`].
    pub async fn take_over_for_reconciliation(
        &self,
        project: ProjectId,
        key: &IdempotencyKey,
    ) -> Result<Option<Claim>> {
        let project_text = project.to_string();
        let now = micros(self.db.now());
        let owner = new_owner();
        let lease_until = now.saturating_add(span(self.config.lease));
        let (p, k, o) = (project_text.clone(), key.as_str().to_owned(), owner.clone());
        let n = run!(self, |c| diesel::update(
            ik::table
                .filter(ik::project_id.eq(&p))
                .filter(ik::idempotency_key.eq(&k))
                .filter(
                    ik::state
                        .eq(UNKNOWN)
                        .or(ik::state.eq(IN_PROGRESS).and(ik::lease_until.le(now))),
                ),
        )
        .set((
            ik::state.eq(IN_PROGRESS),
            ik::owner.eq(&o),
            ik::lease_until.eq(lease_until),
            ik::updated_at.eq(now),
        ))
        .execute(c)
        .await
        .map_err(db_error))?;
        if n != 1 {
            return Ok(None);
        }
        let Some(row) = self.fetch(&project_text, key.as_str()).await? else {
            return Ok(None);
        };
        if row.owner != owner {
            return Ok(None);
        }
        Ok(Some(Claim {
            project_id: project,
            key: key.clone(),
            owner,
            lease_until: from_micros(lease_until)?,
            operation_id: parse_operation(row.operation_id.as_deref())?,
            fingerprint: <[u8; 32]>::try_from(row.fingerprint.as_slice()).map_err(|_| {
                IdempotencyError::Internal {
                    message: "stored fingerprint is not 32 bytes".to_owned(),
                }
            })?,
        }))
    }

    /// Keys with unknown outcomes or stale claims, least recently touched first (for the
    /// reconciler): a key that a pass took over and put back (`mark_unknown`) goes to the back,
    /// so keys that cannot be settled yet never hold a bounded batch forever.
    pub async fn needing_reconciliation(&self, limit: u32) -> Result<Vec<ReconcileCandidate>> {
        let now = micros(self.db.now());
        let rows: Vec<Row> = run!(self, |c| ik::table
            .filter(
                ik::state
                    .eq(UNKNOWN)
                    .or(ik::state.eq(IN_PROGRESS).and(ik::lease_until.le(now))),
            )
            .order((ik::updated_at.asc(), ik::idempotency_key.asc()))
            .limit(i64::from(limit))
            .select(Row::as_select())
            .load(c)
            .await
            .map_err(db_error))?;
        rows.into_iter()
            .map(|row| {
                Ok(ReconcileCandidate {
                    project_id: row
                        .project_id
                        .parse()
                        .map_err(|_| IdempotencyError::Internal {
                            message: "stored project id cannot be read".to_owned(),
                        })?,
                    key: IdempotencyKey::parse(&row.idempotency_key)?,
                    operation_id: parse_operation(row.operation_id.as_deref())?,
                    unknown: row.state == UNKNOWN,
                })
            })
            .collect()
    }

    /// Deletes completed records whose retention ended at or before `now`; returns how many.
    /// Unknown and in-progress records are kept until reconciliation settles them.
    pub async fn reap(&self, now: Timestamp) -> Result<u64> {
        let now = micros(now);
        let n = run!(self, |c| diesel::delete(
            ik::table
                .filter(ik::state.eq(COMPLETED))
                .filter(ik::expires_at.le(now)),
        )
        .execute(c)
        .await
        .map_err(db_error))?;
        Ok(n as u64)
    }
}
