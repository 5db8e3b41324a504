//! The control-plane store's errors of meaning.

use snafu::Snafu;

/// What went wrong in the control-plane store, by meaning. Messages never carry a secret.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
#[non_exhaustive]
pub enum StoreError {
    /// The database could not be reached in time. Retryable.
    #[snafu(display("control-plane store unavailable: {message}"))]
    Unavailable {
        /// What failed (never a secret).
        message: String,
    },
    /// The record does not exist.
    #[snafu(display("{what} not found"))]
    NotFound {
        /// The kind of record, e.g. `"account"`.
        what: &'static str,
    },
    /// A unique constraint or a stale `version` refused the write.
    #[snafu(display("{what}"))]
    Conflict {
        /// What collided, e.g. `"an account with this name already exists"`.
        what: &'static str,
    },
    /// The change would leave an organization without an owner.
    #[snafu(display("an organization must keep at least one owner"))]
    LastOwner,
    /// The change would alter a personal account's ownership or membership.
    #[snafu(display("a personal account's ownership and membership cannot change"))]
    PersonalAccountImmutable,
    /// The account (or the project's account) is being deleted.
    #[snafu(display("the account is being deleted"))]
    AccountDeleting,
    /// Stored data this version cannot read, or an unexpected database failure.
    #[snafu(display("control-plane store internal error: {message}"))]
    Internal {
        /// What was unexpected.
        message: String,
    },
}

impl StoreError {
    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

impl From<corral_registry::RegistryError> for StoreError {
    fn from(e: corral_registry::RegistryError) -> Self {
        use corral_registry::RegistryError as R;
        match e {
            R::Unavailable { message } => StoreError::Unavailable { message },
            R::NotFound { what } => StoreError::NotFound { what },
            R::Conflict { what } => StoreError::Conflict { what },
            other => StoreError::Internal {
                message: other.to_string(),
            },
        }
    }
}

impl From<diesel::result::Error> for StoreError {
    fn from(e: diesel::result::Error) -> Self {
        corral_registry::db_error(e).into()
    }
}

/// Shorthand for store results.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
