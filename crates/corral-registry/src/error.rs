//! The registry's errors of meaning.

use snafu::Snafu;

/// What went wrong in the registry, by meaning. Messages never carry a secret.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
#[non_exhaustive]
pub enum RegistryError {
    /// The database could not be reached in time (down, refusing connections, pool exhausted
    /// past its wait timeout, or a transient database failure). Retryable.
    #[snafu(display("registry database unavailable: {message}"))]
    Unavailable {
        /// What failed (never a secret nor the database password).
        message: String,
    },
    /// The record does not exist (or belongs to another project).
    #[snafu(display("{what} not found"))]
    NotFound {
        /// The kind of record, e.g. `"sandbox"`.
        what: &'static str,
    },
    /// A unique constraint refused the write (e.g. a project name or operation id taken).
    #[snafu(display("{what} already exists"))]
    Conflict {
        /// What collided, e.g. `"project name"`.
        what: &'static str,
    },
    /// A pagination cursor that this registry did not issue.
    #[snafu(display("malformed pagination cursor"))]
    InvalidCursor,
    /// An argument outside its contract (e.g. an empty project name).
    #[snafu(display("invalid input: {message}"))]
    InvalidInput {
        /// Which rule was broken.
        message: String,
    },
    /// A stored credential failed authentication on decryption: wrong master key, or the
    /// ciphertext was tampered with or moved to another project or provider.
    #[snafu(display(
        "stored provider credential cannot be decrypted (wrong master key or tampered record)"
    ))]
    CredentialUndecryptable,
    /// The master key file could not be read, created or trusted.
    #[snafu(display("master key: {message}"))]
    MasterKey {
        /// Why (path and reason; never key material).
        message: String,
    },
    /// The database URL is not one this registry understands.
    #[snafu(display(
        "unsupported database URL (expected sqlite://<path>, a file path, or postgres://…)"
    ))]
    UnsupportedUrl,
    /// A migration failed to apply.
    #[snafu(display("database migration {version} failed: {message}"))]
    Migration {
        /// The migration that failed.
        version: String,
        /// The database's reason.
        message: String,
    },
    /// Stored data that this version cannot read, or another unexpected database failure.
    #[snafu(display("registry internal error: {message}"))]
    Internal {
        /// What was unexpected.
        message: String,
    },
}

impl RegistryError {
    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, RegistryError::Unavailable { .. })
    }
}

impl From<diesel::result::Error> for RegistryError {
    fn from(e: diesel::result::Error) -> Self {
        crate::db::db_error(e)
    }
}

/// Shorthand for registry results.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;
