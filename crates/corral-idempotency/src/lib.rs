//! Corral's `Idempotency-Key` store (placeholder docs; full contract below once implemented).

mod error;
mod key;
mod store;

pub use error::{IdempotencyError, Result};
pub use key::{Fingerprint, IdempotencyKey, SECRET_HEADERS, canonical_json};
pub use store::{
    Claim, ClaimOutcome, IdempotencyConfig, IdempotencyStore, ReconcileCandidate, StoredResponse,
};
