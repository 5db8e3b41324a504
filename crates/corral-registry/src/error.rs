//! The registry's errors of meaning.

use diesel::result::{DatabaseErrorKind, Error as DieselError};
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
    /// This replica no longer holds the lease a write needed (another replica took the work
    /// over, or it ended): stop working on it.
    #[snafu(display("the lease on this {what} is held elsewhere or ended"))]
    LeaseLost {
        /// What the lease was on, e.g. `"command capture"`.
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
        db_error(e)
    }
}

/// Classifies a diesel failure by meaning: lost connections, lock contention and
/// serialization failures are [`RegistryError::Unavailable`] (retryable).
pub fn db_error(e: DieselError) -> RegistryError {
    match e {
        DieselError::NotFound => RegistryError::NotFound { what: "record" },
        DieselError::DatabaseError(kind, info) => match kind {
            DatabaseErrorKind::UniqueViolation => RegistryError::Conflict { what: "record" },
            // Every foreign key in the schema references `projects`.
            DatabaseErrorKind::ForeignKeyViolation => RegistryError::NotFound { what: "project" },
            DatabaseErrorKind::ClosedConnection
            | DatabaseErrorKind::UnableToSendCommand
            | DatabaseErrorKind::SerializationFailure
            | DatabaseErrorKind::ReadOnlyTransaction => RegistryError::Unavailable {
                message: info.message().to_owned(),
            },
            _ if is_transient_message(info.message()) => RegistryError::Unavailable {
                message: info.message().to_owned(),
            },
            _ => RegistryError::Internal {
                message: info.message().to_owned(),
            },
        },
        DieselError::BrokenTransactionManager => RegistryError::Unavailable {
            message: "the connection's transaction state is broken".to_owned(),
        },
        other => {
            let message = other.to_string();
            if is_transient_message(&message) {
                RegistryError::Unavailable { message }
            } else {
                RegistryError::Internal { message }
            }
        }
    }
}

/// Database messages that mean "busy or gone", which diesel reports without a kind.
pub(crate) fn is_transient_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "database is locked",
        "database is busy",
        "connection",
        "terminating",
        "shutting down",
        "i/o error",
        "deadlock detected",
        "timeout",
    ]
    .iter()
    .any(|needle| m.contains(needle))
}

/// Shorthand for registry results.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;
