//! The control plane's one public error, each variant mapping to exactly one v3 code.

use corral_control_store::StoreError;
use corral_errors::{ErrorCode, ErrorEnvelope};
use corral_registry::RegistryError;
use corral_service::error::ServiceError;
use snafu::Snafu;

/// What a control-plane use case can fail with. Messages never carry a secret.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
#[non_exhaustive]
pub enum ControlError {
    /// Bad input, a target the caller cannot see ("no such account"), or a role below the
    /// one the operation needs → `invalid_request`.
    #[snafu(display("{message}"))]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// No session, an expired or revoked one, a bad CSRF token or origin, a bad sign-in
    /// token or password → `authentication_error`.
    #[snafu(display("{message}"))]
    Unauthenticated {
        /// What is wrong (the same message for an unknown email and a wrong password).
        message: String,
    },
    /// Too many failed sign-ins, requests, creations or mails, or the password hashing pool
    /// is busy → `rate_limited`.
    #[snafu(display("{message}"))]
    Throttled {
        /// Which limit, and when to retry.
        message: String,
        /// Seconds to wait.
        retry_after: u64,
    },
    /// A duplicate name, a stale version, a used invitation → `control_plane_conflict`.
    #[snafu(display("{message}"))]
    Conflict {
        /// What conflicts.
        message: String,
    },
    /// → `last_account_owner`.
    #[snafu(display("an organization must keep at least one owner"))]
    LastOwner,
    /// → `personal_account_immutable`.
    #[snafu(display("a personal account's ownership and membership cannot change"))]
    PersonalAccountImmutable,
    /// → `account_deleting`.
    #[snafu(display("the account is being deleted"))]
    AccountDeleting,
    /// → `legal_acceptance_required`.
    #[snafu(display("accept the current release of `{document}` first"))]
    LegalAcceptanceRequired {
        /// The first document whose current release the user has not accepted.
        document: String,
    },
    /// → `legal_release_changed`.
    #[snafu(display(
        "release {reviewed} of `{document}` is no longer current (release {current} is); review it and accept again"
    ))]
    LegalReleaseChanged {
        /// The document.
        document: String,
        /// The release the user reviewed.
        reviewed: i64,
        /// The current release.
        current: i64,
    },
    /// → `legal_not_found`.
    #[snafu(display("no such legal document or release"))]
    LegalNotFound,
    /// → `legal_unavailable`.
    #[snafu(display("legal releases are temporarily unavailable"))]
    LegalUnavailable,
    /// → `invalid_email_webhook`; nothing was recorded.
    #[snafu(display("{message}"))]
    InvalidEmailWebhook {
        /// What is wrong (signature, timestamp, replay or payload).
        message: String,
    },
    /// The store could not be reached → `sandbox_registry_unavailable`.
    #[snafu(display("the control-plane store is temporarily unavailable"))]
    Unavailable,
    /// A sandbox or profile use case failed; its own code applies.
    #[snafu(display("{source}"))]
    Service {
        /// The use case's error.
        source: ServiceError,
    },
    /// → `internal_error`.
    #[snafu(display("unexpected server-side failure: {message}"))]
    Internal {
        /// What failed (never a secret).
        message: String,
    },
}

impl ControlError {
    /// The one v3 code of this failure.
    pub fn code(&self) -> ErrorCode {
        use ControlError as E;
        match self {
            E::Invalid { .. } => ErrorCode::InvalidRequest,
            E::Unauthenticated { .. } => ErrorCode::AuthenticationError,
            E::Throttled { .. } => ErrorCode::RateLimited,
            E::Conflict { .. } => ErrorCode::ControlPlaneConflict,
            E::LastOwner => ErrorCode::LastAccountOwner,
            E::PersonalAccountImmutable => ErrorCode::PersonalAccountImmutable,
            E::AccountDeleting => ErrorCode::AccountDeleting,
            E::LegalAcceptanceRequired { .. } => ErrorCode::LegalAcceptanceRequired,
            E::LegalReleaseChanged { .. } => ErrorCode::LegalReleaseChanged,
            E::LegalNotFound => ErrorCode::LegalNotFound,
            E::LegalUnavailable => ErrorCode::LegalUnavailable,
            E::InvalidEmailWebhook { .. } => ErrorCode::InvalidEmailWebhook,
            E::Unavailable => ErrorCode::SandboxRegistryUnavailable,
            E::Service { source } => source.code(),
            E::Internal { .. } => ErrorCode::InternalError,
        }
    }

    /// The `Retry-After` seconds to send, if the code carries one.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        match self {
            ControlError::Service { source } => source.retry_after_seconds(),
            ControlError::Throttled { retry_after, .. } => {
                self.code().retry_after_seconds(Some(*retry_after))
            }
            _ => self.code().retry_after_seconds(None),
        }
    }

    /// The error envelope, stamped with `request_id`.
    pub fn envelope(&self, request_id: &str) -> ErrorEnvelope {
        match self {
            ControlError::Service { source } => source.envelope(request_id),
            _ => ErrorEnvelope::new(self.code(), self.to_string(), request_id),
        }
    }

    /// `invalid_request` with a message.
    pub fn invalid(message: impl Into<String>) -> Self {
        ControlError::Invalid {
            message: message.into(),
        }
    }

    /// `authentication_error` with a message.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        ControlError::Unauthenticated {
            message: message.into(),
        }
    }

    /// `internal_error` with a message (never a secret).
    pub fn internal(message: impl Into<String>) -> Self {
        ControlError::Internal {
            message: message.into(),
        }
    }
}

impl From<ServiceError> for ControlError {
    fn from(source: ServiceError) -> Self {
        ControlError::Service { source }
    }
}

/// The one mapping of store failures to meanings. `NotFound` is not mapped here: each use
/// case says what was not found ("no such account"), since that is part of its answer.
impl From<StoreError> for ControlError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable { .. } => ControlError::Unavailable,
            StoreError::Conflict { what } => ControlError::Conflict {
                message: what.to_owned(),
            },
            StoreError::LastOwner => ControlError::LastOwner,
            StoreError::PersonalAccountImmutable => ControlError::PersonalAccountImmutable,
            StoreError::AccountDeleting => ControlError::AccountDeleting,
            StoreError::NotFound { what } => ControlError::Invalid {
                message: format!("no such {what}"),
            },
            other => {
                tracing::error!(error = %other, "control-plane store failure");
                ControlError::internal("the control-plane store failed unexpectedly")
            }
        }
    }
}

impl From<RegistryError> for ControlError {
    fn from(e: RegistryError) -> Self {
        StoreError::from(e).into()
    }
}

/// Shorthand for control-plane results.
pub type Result<T, E = ControlError> = std::result::Result<T, E>;
