//! Corral's `Idempotency-Key` store: key validation, request fingerprints, atomic claims,
//! byte-for-byte replay, hand-off of crashed claims to reconciliation, and retention. Its
//! table (`idempotency_keys`) lives in the registry's database, on SQLite or PostgreSQL,
//! and is created by `corral-registry`'s migrations.
//!
//! # Using it alone
//!
//! ```no_run
//! # async fn demo(db: corral_registry::Database, project: corral_registry::ProjectId)
//! # -> Result<(), corral_idempotency::IdempotencyError> {
//! use corral_idempotency::{ClaimOutcome, Fingerprint, IdempotencyConfig, IdempotencyKey, IdempotencyStore};
//!
//! let store = IdempotencyStore::new(db, IdempotencyConfig::default());
//! let key = IdempotencyKey::parse("create-42")?; // invalid → `invalid_idempotency_key`
//! let body = serde_json::json!({"provider": "e2b"});
//! let fp = Fingerprint::compute("POST", "/v1/sandboxes", Some(&body), &[("x-provider", "e2b")]);
//! match store.claim(project, &key, &fp).await? {
//!     ClaimOutcome::Claimed(mut claim) => {
//!         store.attach_operation(&mut claim, corral_domain::OperationId::new()).await?;
//!         // … call the provider; then exactly one of:
//!         store.complete(&claim, 201, br#"{"id":"sbx_e2b_..."}"#).await?; // definitive outcome
//!         // store.release(&claim)                               // retryable failure
//!         // store.mark_unknown(&claim, operation_id)            // may have been applied
//!     }
//!     ClaimOutcome::Replay(stored) => { /* answer stored.status + stored.body as is */ }
//!     ClaimOutcome::InProgress { retry_after } => { /* 409 idempotency_in_progress */ }
//!     ClaimOutcome::Conflict => { /* 422 idempotency_conflict */ }
//!     ClaimOutcome::Unknown { operation_id } => { /* reconcile by operation id */ }
//!     ClaimOutcome::NeedsReconciliation(claim) => { /* reconcile; never create again */ }
//! }
//! # Ok(()) }
//! ```
//!
//! # Rules
//!
//! - **Keys**: 1–255 bytes of printable ASCII (`corral_domain::limits::MAX_IDEMPOTENCY_KEY_LEN`),
//!   validated before anything is stored; unique per (project, key), so projects never see
//!   each other's records.
//! - **Fingerprint**: SHA-256 over length-prefixed method, route template, canonical JSON body
//!   (object keys sorted, no whitespace) and the sorted, lowercased non-secret headers that
//!   change behaviour. Headers in [`SECRET_HEADERS`] are dropped even if passed; only the
//!   digest is stored.
//! - **Claim**: a completed record this process has seen is answered from memory (it cannot
//!   change until it expires); otherwise one `INSERT … ON CONFLICT DO NOTHING` decides the
//!   winner (never select-then-insert); losers read the record: same fingerprint + completed → `Replay`;
//!   different fingerprint → `Conflict`; in progress within its lease → `InProgress`; `unknown`
//!   → `Unknown`. An in-progress claim whose lease ran out (its owner died) is taken over by
//!   compare-and-set on the old owner, by exactly one claimant, as `NeedsReconciliation`: the
//!   new owner looks the operation up at the provider and never starts a second create.
//! - **Transitions** (`attach_operation`, `renew`, `complete`, `release`, `mark_unknown`) only
//!   apply while the caller still owns the claim; otherwise [`IdempotencyError::ClaimLost`].
//!   `release` deletes the record (retryable failures and pre-execution rejections are not
//!   stored, so the key can be reused). `take_over_for_reconciliation` and
//!   `needing_reconciliation` serve a background reconciler.
//! - **Retention**: completed records are kept 24 h from completion
//!   ([`IdempotencyConfig::retention`]); after that the key is new again, and `reap` deletes
//!   them. `unknown` and in-progress records are never reaped: reconciliation settles them.
//!   Lease 120 s by default (renew it during long provider calls). Time comes from the
//!   database's clock, so tests use `corral_registry::ManualClock`.
//!
//! # Errors → v3 codes ([`IdempotencyError::code`])
//!
//! | error | code |
//! |---|---|
//! | `Unavailable` (retryable; fail closed, no provider call) | `idempotency_unavailable` |
//! | `InvalidKey` | `invalid_idempotency_key` |
//! | `ClaimLost` | `idempotency_outcome_unknown` |
//! | `Internal` | `internal_error` |

mod error;
mod key;
mod replays;
mod store;

pub use error::{IdempotencyError, Result};
pub use key::{Fingerprint, IdempotencyKey, SECRET_HEADERS, canonical_json};
pub use store::{
    Claim, ClaimOutcome, IdempotencyConfig, IdempotencyStore, ReconcileCandidate, StoredResponse,
};
