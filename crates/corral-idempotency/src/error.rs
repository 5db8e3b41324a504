//! The idempotency store's errors of meaning.

use snafu::Snafu;

/// What went wrong in the idempotency store, by meaning.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
#[non_exhaustive]
pub enum IdempotencyError {
    /// The store's database could not be reached in time. Retryable; fail closed (no
    /// provider call).
    #[snafu(display("idempotency store unavailable: {message}"))]
    Unavailable {
        /// What failed.
        message: String,
    },
    /// The `Idempotency-Key` is empty, longer than 255 bytes or not printable ASCII.
    #[snafu(display("invalid Idempotency-Key: {reason}"))]
    InvalidKey {
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The claim is no longer held by this owner (its lease ran out and it was taken over into
    /// reconciliation, or it was reaped). The caller must not store a result.
    #[snafu(display("idempotency claim lost (taken over or expired)"))]
    ClaimLost,
    /// Stored data that this version cannot read, or an unexpected database failure.
    #[snafu(display("idempotency store internal error: {message}"))]
    Internal {
        /// What was unexpected.
        message: String,
    },
}

impl IdempotencyError {
    /// Whether retrying later (with the same key) may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, IdempotencyError::Unavailable { .. })
    }
}

impl From<corral_registry::RegistryError> for IdempotencyError {
    fn from(e: corral_registry::RegistryError) -> Self {
        if e.is_retryable() {
            IdempotencyError::Unavailable {
                message: e.to_string(),
            }
        } else {
            IdempotencyError::Internal {
                message: e.to_string(),
            }
        }
    }
}

/// Shorthand for idempotency results.
pub type Result<T, E = IdempotencyError> = std::result::Result<T, E>;
