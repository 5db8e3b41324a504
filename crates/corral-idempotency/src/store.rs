//! The store: atomic claims, transitions, reconciliation hand-off and retention.

use std::time::Duration;

use corral_domain::{OperationId, Timestamp};
use corral_registry::{Database, ProjectId};

use crate::error::{IdempotencyError, Result};
use crate::key::{Fingerprint, IdempotencyKey};

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
}

fn not_yet<T>(what: &'static str) -> Result<T> {
    Err(IdempotencyError::NotImplemented { what })
}

impl IdempotencyStore {
    /// A store over `db` (connected and migrated: the table comes with the registry's
    /// migrations). Time comes from the database's clock.
    pub fn new(db: Database, config: IdempotencyConfig) -> Self {
        Self { db, config }
    }

    /// The configuration.
    pub fn config(&self) -> &IdempotencyConfig {
        &self.config
    }

    /// Claims `key` in `project` for a request with `fingerprint`, atomically: one
    /// unique-constrained insert decides the winner; everyone else reads the existing record.
    pub async fn claim(
        &self,
        project: ProjectId,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Result<ClaimOutcome> {
        let _ = (project, key, fingerprint);
        not_yet("claim")
    }

    /// Attaches the logical operation id (call before the provider call).
    pub async fn attach_operation(&self, claim: &mut Claim, operation: OperationId) -> Result<()> {
        let _ = (claim, operation);
        not_yet("attach_operation")
    }

    /// Extends the lease of a claim still held (long provider calls).
    pub async fn renew(&self, claim: &mut Claim) -> Result<()> {
        let _ = claim;
        not_yet("renew")
    }

    /// Stores the definitive response; later claims with the same fingerprint replay it.
    pub async fn complete(&self, claim: &Claim, status: u16, body: &[u8]) -> Result<()> {
        let _ = (claim, status, body);
        not_yet("complete")
    }

    /// Forgets the claim (retryable failure, or a rejection before execution): the key can be
    /// used again.
    pub async fn release(&self, claim: &Claim) -> Result<()> {
        let _ = claim;
        not_yet("release")
    }

    /// Records that the outcome could not be confirmed; later claims get
    /// [`ClaimOutcome::Unknown`] until reconciliation completes or releases the key.
    pub async fn mark_unknown(&self, claim: &Claim, operation: OperationId) -> Result<()> {
        let _ = (claim, operation);
        not_yet("mark_unknown")
    }

    /// Takes ownership of an `unknown` or stale in-progress record to reconcile it (for the
    /// background reconciler); `None` when it is neither (someone else holds or finished it).
    pub async fn take_over_for_reconciliation(
        &self,
        project: ProjectId,
        key: &IdempotencyKey,
    ) -> Result<Option<Claim>> {
        let _ = (project, key);
        not_yet("take_over_for_reconciliation")
    }

    /// Keys with unknown outcomes or stale claims, oldest first (for the reconciler).
    pub async fn needing_reconciliation(&self, limit: u32) -> Result<Vec<ReconcileCandidate>> {
        let _ = limit;
        not_yet("needing_reconciliation")
    }

    /// Deletes completed records whose retention ended before `now`; returns how many.
    pub async fn reap(&self, now: Timestamp) -> Result<u64> {
        let _ = now;
        not_yet("reap")
    }
}
