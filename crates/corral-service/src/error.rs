//! One public error of meanings for every use case, each mapping to exactly one v3 code.

use std::time::Duration;

use corral_domain::{InputError, OperationId, Provider};
use corral_errors::{ApiError, ErrorCode, ErrorEnvelope};
use corral_idempotency::IdempotencyError;
use corral_provider::ProviderError;
use corral_registry::RegistryError;
use snafu::Snafu;

/// What a use case can fail with. Every variant maps to exactly one [`ErrorCode`]
/// ([`ServiceError::code`]); messages never carry a secret.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum ServiceError {
    /// The request violates the endpoint contract.
    #[snafu(display("{message}"))]
    InvalidRequest {
        /// What is wrong, naming the field or header.
        message: String,
    },
    /// A body or file exceeds its size limit.
    #[snafu(display("{message}"))]
    PayloadTooLarge {
        /// Which limit.
        message: String,
    },
    /// The service stopped waiting before the operation completed.
    #[snafu(display("{message}"))]
    RequestTimeout {
        /// What timed out.
        message: String,
    },
    /// The Idempotency-Key is empty, too long or not printable ASCII.
    #[snafu(display("{message}"))]
    InvalidIdempotencyKey {
        /// What is wrong with it.
        message: String,
    },
    /// The key was used with a different create request.
    #[snafu(display(
        "this Idempotency-Key was already used with a different request; use a new key for a new request"
    ))]
    IdempotencyConflict,
    /// A create with the same key is still running.
    #[snafu(display(
        "a create with this Idempotency-Key is still in progress; retry the same request with the same key after Retry-After"
    ))]
    IdempotencyInProgress {
        /// Seconds to wait.
        retry_after: u64,
    },
    /// Whether an earlier create with this key reached the provider cannot be determined.
    #[snafu(display(
        "the outcome of the earlier create with this Idempotency-Key is unknown; do not retry with a new key"
    ))]
    IdempotencyOutcomeUnknown {
        /// The operation to reconcile by, if one was attached.
        operation_id: Option<OperationId>,
    },
    /// The idempotency store is unavailable.
    #[snafu(display("the idempotency store is temporarily unavailable"))]
    IdempotencyUnavailable,
    /// The registry could not be read or updated.
    #[snafu(display("the sandbox registry is temporarily unavailable"))]
    RegistryUnavailable,
    /// The provider's create answer was lost: it may have created the sandbox.
    #[snafu(display(
        "the provider's answer to the create was lost ({operation_id}); retry with the same Idempotency-Key to reconcile"
    ))]
    CreateOutcomeUnknown {
        /// The operation to reconcile by.
        operation_id: OperationId,
    },
    /// File content does not decode in its declared encoding.
    #[snafu(display("{message}"))]
    InvalidFileContent {
        /// What is wrong with it.
        message: String,
    },
    /// The file is not UTF-8 and was asked for as utf8.
    #[snafu(display("file `{path}` is not valid UTF-8; read it with encoding base64"))]
    FileNotUtf8 {
        /// The path.
        path: String,
    },
    /// The provider could not complete the file operation.
    #[snafu(display("{message}"))]
    FileOperationFailed {
        /// What failed.
        message: String,
    },
    /// No usable project or provider credential was supplied.
    #[snafu(display("{message}"))]
    MissingApiKey {
        /// Which credential is missing.
        message: String,
    },
    /// A control-plane write conflicts with the current state (a duplicate name, a stale
    /// version).
    #[snafu(display("{message}"))]
    Conflict {
        /// What conflicts.
        message: String,
    },
    /// Stored provider profiles could not be loaded.
    #[snafu(display("provider profiles are temporarily unavailable"))]
    ProfilesUnavailable,
    /// The project has no profile for the provider and no inline credential was given.
    #[snafu(display(
        "the project has no provider profile for `{provider}`; connect one or send X-Provider-Credential"
    ))]
    ProfileNotFound {
        /// The provider.
        provider: Provider,
    },
    /// The last deep verification showed the stored credential cannot do this.
    #[snafu(display("the stored `{provider}` credential cannot {operation}: {reason}"))]
    OperationUnavailable {
        /// The provider.
        provider: Provider,
        /// The operation, e.g. `create`.
        operation: String,
        /// Why, from the verification.
        reason: String,
        /// What to do about it.
        remediation: String,
    },
    /// The sandbox id is malformed.
    #[snafu(display("{message}"))]
    InvalidSandboxId {
        /// What is wrong with it.
        message: String,
    },
    /// The provider rejected the normalized request.
    #[snafu(display("{message}"))]
    ProviderInvalidRequest {
        /// The provider's reason.
        message: String,
    },
    /// A project key or provider credential was rejected.
    #[snafu(display("{message}"))]
    AuthenticationFailed {
        /// Which credential.
        message: String,
    },
    /// No sandbox visible to the project has this id.
    #[snafu(display("{message}"))]
    SandboxNotFound {
        /// Which sandbox.
        message: String,
    },
    /// The sandbox is stopped (or stopping) and was not made with `autoResume`.
    #[snafu(display("{message}"))]
    SandboxStopped {
        /// Which sandbox, and how to go on.
        message: String,
    },
    /// No snapshot visible to the project has this id.
    #[snafu(display("{message}"))]
    SnapshotNotFound {
        /// Which snapshot.
        message: String,
    },
    /// The provider cannot do this operation: its capabilities say so.
    #[snafu(display("{message}"))]
    CapabilityUnsupported {
        /// Which operation on which provider.
        message: String,
    },
    /// The provider rate-limited the call.
    #[snafu(display("{message}"))]
    RateLimited {
        /// Whose limit.
        message: String,
        /// Seconds to wait, if known.
        retry_after: Option<u64>,
    },
    /// The provider (or bridge) is temporarily unavailable.
    #[snafu(display("{message}"))]
    ProviderUnavailable {
        /// What happened.
        message: String,
        /// Seconds to wait, if known.
        retry_after: Option<u64>,
    },
    /// An unclassified provider failure.
    #[snafu(display("{message}"))]
    ProviderFailed {
        /// What happened.
        message: String,
    },
    /// An unexpected server-side failure.
    #[snafu(display("unexpected server-side failure: {message}"))]
    Internal {
        /// What failed (never a secret).
        message: String,
    },
}

/// The one mapping of registry failures to meanings (and so to v3 codes).
pub fn registry_error(e: RegistryError) -> ServiceError {
    match e {
        RegistryError::Unavailable { .. } => ServiceError::RegistryUnavailable,
        RegistryError::NotFound { .. } => ServiceError::SandboxNotFound {
            message: "no such sandbox in this project".into(),
        },
        RegistryError::InvalidCursor => ServiceError::invalid("`cursor` is malformed"),
        RegistryError::InvalidInput { message } => ServiceError::InvalidRequest { message },
        RegistryError::Conflict { .. } => ServiceError::Conflict {
            message: e.to_string(),
        },
        other => {
            tracing::error!(error = %other, "registry failure");
            ServiceError::internal("the registry failed unexpectedly")
        }
    }
}

/// The one mapping of idempotency-store failures to meanings (and so to v3 codes).
pub(crate) fn idempotency_error(e: IdempotencyError) -> ServiceError {
    match e {
        IdempotencyError::InvalidKey { reason } => ServiceError::InvalidIdempotencyKey {
            message: format!(
                "Idempotency-Key must be 1 to 255 printable ASCII characters ({reason})"
            ),
        },
        IdempotencyError::Unavailable { .. } => ServiceError::IdempotencyUnavailable,
        IdempotencyError::ClaimLost => {
            ServiceError::IdempotencyOutcomeUnknown { operation_id: None }
        }
        other => {
            tracing::error!(error = %other, "idempotency store failure");
            ServiceError::internal("the idempotency store failed unexpectedly")
        }
    }
}

impl ServiceError {
    /// The one v3 code of this failure.
    pub fn code(&self) -> ErrorCode {
        use ServiceError as E;
        match self {
            E::InvalidRequest { .. } => ErrorCode::InvalidRequest,
            E::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            E::RequestTimeout { .. } => ErrorCode::RequestTimeout,
            E::InvalidIdempotencyKey { .. } => ErrorCode::InvalidIdempotencyKey,
            E::IdempotencyConflict => ErrorCode::IdempotencyConflict,
            E::Conflict { .. } => ErrorCode::ControlPlaneConflict,
            E::IdempotencyInProgress { .. } => ErrorCode::IdempotencyInProgress,
            E::IdempotencyOutcomeUnknown { .. } => ErrorCode::IdempotencyOutcomeUnknown,
            E::IdempotencyUnavailable => ErrorCode::IdempotencyUnavailable,
            E::RegistryUnavailable => ErrorCode::SandboxRegistryUnavailable,
            E::CreateOutcomeUnknown { .. } => ErrorCode::SandboxCreateOutcomeUnknown,
            E::InvalidFileContent { .. } => ErrorCode::InvalidFileContent,
            E::FileNotUtf8 { .. } => ErrorCode::FileNotUtf8,
            E::FileOperationFailed { .. } => ErrorCode::FileOperationFailed,
            E::MissingApiKey { .. } => ErrorCode::MissingApiKey,
            E::ProfilesUnavailable => ErrorCode::ProviderProfilesUnavailable,
            E::ProfileNotFound { .. } => ErrorCode::ProviderProfileNotFound,
            E::OperationUnavailable { .. } => ErrorCode::ProviderOperationUnavailable,
            E::InvalidSandboxId { .. } => ErrorCode::InvalidSandboxId,
            E::ProviderInvalidRequest { .. } => ErrorCode::ProviderInvalidRequest,
            E::AuthenticationFailed { .. } => ErrorCode::AuthenticationError,
            E::SandboxNotFound { .. } => ErrorCode::SandboxNotFound,
            E::SandboxStopped { .. } => ErrorCode::SandboxStopped,
            E::SnapshotNotFound { .. } => ErrorCode::SnapshotNotFound,
            E::CapabilityUnsupported { .. } => ErrorCode::CapabilityUnsupported,
            E::RateLimited { .. } => ErrorCode::RateLimited,
            E::ProviderUnavailable { .. } => ErrorCode::ProviderUnavailable,
            E::ProviderFailed { .. } => ErrorCode::ProviderError,
            E::Internal { .. } => ErrorCode::InternalError,
        }
    }

    /// The `Retry-After` seconds to send, if the code carries one.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        let hint = match self {
            ServiceError::IdempotencyInProgress { retry_after } => Some(*retry_after),
            ServiceError::RateLimited { retry_after, .. }
            | ServiceError::ProviderUnavailable { retry_after, .. } => *retry_after,
            _ => None,
        };
        self.code().retry_after_seconds(hint)
    }

    /// The error envelope for this failure, stamped with `request_id`.
    pub fn envelope(&self, request_id: &str) -> ErrorEnvelope {
        let mut env = ErrorEnvelope::new(self.code(), self.to_string(), request_id);
        let e: &mut ApiError = &mut env.error;
        match self {
            ServiceError::IdempotencyOutcomeUnknown { operation_id } => {
                e.operation_id = operation_id.map(|o| o.to_string());
            }
            ServiceError::CreateOutcomeUnknown { operation_id } => {
                e.operation_id = Some(operation_id.to_string());
            }
            ServiceError::OperationUnavailable {
                operation,
                reason,
                remediation,
                ..
            } => {
                e.operation = Some(operation.clone());
                e.reason = Some(reason.clone());
                e.remediation = Some(remediation.clone());
            }
            _ => {}
        }
        env
    }

    /// `invalid_request` with a message.
    pub fn invalid(message: impl Into<String>) -> Self {
        ServiceError::InvalidRequest {
            message: message.into(),
        }
    }

    /// `internal_error` with a message (never a secret).
    pub fn internal(message: impl Into<String>) -> Self {
        ServiceError::Internal {
            message: message.into(),
        }
    }
}

impl From<InputError> for ServiceError {
    fn from(e: InputError) -> Self {
        match e {
            InputError::Invalid { message, .. } => ServiceError::InvalidRequest { message },
            InputError::TooLarge { .. } => ServiceError::PayloadTooLarge {
                message: e.to_string(),
            },
            InputError::BadContent { message } => ServiceError::InvalidFileContent { message },
            InputError::Unsupported { message, .. } => {
                ServiceError::CapabilityUnsupported { message }
            }
            InputError::ProviderMismatch { message, .. } => {
                ServiceError::ProviderInvalidRequest { message }
            }
        }
    }
}

/// Which use case a provider failure happened in: the same provider failure means different
/// things on create (may have been applied) and elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// A create call.
    Create,
    /// Any other call.
    Other,
}

fn secs(d: Option<Duration>) -> Option<u64> {
    d.map(|d| d.as_secs().max(1))
}

/// Maps a provider failure to exactly one service error.
///
/// On create, a failure that may have been applied becomes `sandbox_create_outcome_unknown`
/// with the operation id; the caller passes it in `operation_id`.
pub fn map_provider_error(
    e: ProviderError,
    stage: Stage,
    operation_id: Option<OperationId>,
) -> ServiceError {
    if stage == Stage::Create
        && e.may_have_been_applied()
        && let Some(operation_id) = operation_id
    {
        return ServiceError::CreateOutcomeUnknown { operation_id };
    }
    let message = e.to_string();
    match e {
        ProviderError::MissingCredential { provider } => ServiceError::MissingApiKey {
            message: format!(
                "provider `{provider}` needs a credential: send X-Provider-Credential or connect a profile"
            ),
        },
        ProviderError::MissingContext { field, .. } => ServiceError::InvalidRequest {
            message: format!("{message} (header {})", context_header(field)),
        },
        ProviderError::Unauthorized { .. } => ServiceError::AuthenticationFailed { message },
        ProviderError::InvalidRequest { .. } => ServiceError::ProviderInvalidRequest { message },
        ProviderError::NotFound { .. } => ServiceError::SandboxNotFound {
            message: "the provider no longer has this sandbox".into(),
        },
        ProviderError::RateLimited { retry_after, .. } => ServiceError::RateLimited {
            message,
            retry_after: secs(retry_after),
        },
        ProviderError::CapacityExceeded { .. } => ServiceError::RateLimited {
            message,
            retry_after: None,
        },
        ProviderError::Unavailable { retry_after, .. } => ServiceError::ProviderUnavailable {
            message,
            retry_after: secs(retry_after),
        },
        ProviderError::TimedOutAfterSend { .. } => ServiceError::RequestTimeout { message },
        ProviderError::ServerError { .. } | ProviderError::Protocol { .. } => {
            ServiceError::ProviderFailed { message }
        }
        ProviderError::Unexpected { .. } => ServiceError::ProviderFailed { message },
        ProviderError::Unsupported { .. } => ServiceError::CapabilityUnsupported { message },
        ProviderError::CommandTimedOut { .. } => ServiceError::RequestTimeout { message },
        ProviderError::FileNotFound { .. }
        | ProviderError::ParentMissing { .. }
        | ProviderError::FileRefused { .. }
        | ProviderError::FileOperation { .. } => ServiceError::FileOperationFailed { message },
        ProviderError::FileTooLarge { .. } => ServiceError::PayloadTooLarge { message },
    }
}

/// The request header that carries a context field.
pub fn context_header(field: &str) -> &'static str {
    match field {
        "workspace" => "X-Provider-Workspace",
        "teamId" | "team_id" => "X-Provider-Team-Id",
        "projectId" | "project_id" => "X-Provider-Project-Id",
        "bridgeUrl" | "bridge_url" => "X-Provider-Bridge-Url",
        _ => "X-Provider-*",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_failures_map_to_one_code_each_here() {
        let reg = |e: RegistryError| registry_error(e).code();
        let unavailable = RegistryError::Unavailable {
            message: "down".into(),
        };
        assert_eq!(reg(unavailable), ErrorCode::SandboxRegistryUnavailable);
        let missing = RegistryError::NotFound { what: "sandbox" };
        assert_eq!(reg(missing), ErrorCode::SandboxNotFound);
        assert_eq!(reg(RegistryError::InvalidCursor), ErrorCode::InvalidRequest);
        let bad = RegistryError::InvalidInput {
            message: "x".into(),
        };
        assert_eq!(reg(bad), ErrorCode::InvalidRequest);
        let taken = RegistryError::Conflict {
            what: "project name",
        };
        assert_eq!(reg(taken), ErrorCode::ControlPlaneConflict);
        assert_eq!(
            reg(RegistryError::CredentialUndecryptable),
            ErrorCode::InternalError
        );
        let idem = |e: IdempotencyError| idempotency_error(e).code();
        let down = IdempotencyError::Unavailable {
            message: "down".into(),
        };
        assert_eq!(idem(down), ErrorCode::IdempotencyUnavailable);
        let key = IdempotencyError::InvalidKey { reason: "empty" };
        assert_eq!(idem(key), ErrorCode::InvalidIdempotencyKey);
        assert_eq!(
            idem(IdempotencyError::ClaimLost),
            ErrorCode::IdempotencyOutcomeUnknown
        );
        let broken = IdempotencyError::Internal {
            message: "x".into(),
        };
        assert_eq!(idem(broken), ErrorCode::InternalError);
    }

    #[test]
    fn lost_create_answers_become_outcome_unknown_with_the_operation_id() {
        let op = OperationId::new();
        let e = map_provider_error(
            ProviderError::TimedOutAfterSend {
                provider: Provider::E2b,
            },
            Stage::Create,
            Some(op),
        );
        assert_eq!(e.code(), ErrorCode::SandboxCreateOutcomeUnknown);
        let env = e.envelope("req_1");
        assert_eq!(env.error.operation_id, Some(op.to_string()));
        let elsewhere = map_provider_error(
            ProviderError::TimedOutAfterSend {
                provider: Provider::E2b,
            },
            Stage::Other,
            None,
        );
        assert_eq!(elsewhere.code(), ErrorCode::RequestTimeout);
    }

    #[test]
    fn every_provider_failure_maps_to_its_documented_code() {
        let p = Provider::E2b;
        let cases: Vec<(ProviderError, ErrorCode)> = vec![
            (
                ProviderError::MissingCredential { provider: p },
                ErrorCode::MissingApiKey,
            ),
            (
                ProviderError::MissingContext {
                    provider: p,
                    field: "teamId",
                },
                ErrorCode::InvalidRequest,
            ),
            (
                ProviderError::Unauthorized {
                    provider: p,
                    message: "no".into(),
                },
                ErrorCode::AuthenticationError,
            ),
            (
                ProviderError::InvalidRequest {
                    provider: p,
                    message: "bad image".into(),
                },
                ErrorCode::ProviderInvalidRequest,
            ),
            (
                ProviderError::RateLimited {
                    provider: p,
                    retry_after: Some(Duration::from_secs(7)),
                },
                ErrorCode::RateLimited,
            ),
            (
                ProviderError::Unavailable {
                    provider: p,
                    message: "refused".into(),
                    retry_after: None,
                },
                ErrorCode::ProviderUnavailable,
            ),
            (
                ProviderError::ServerError {
                    provider: p,
                    status: 500,
                    message: String::new(),
                },
                ErrorCode::ProviderError,
            ),
            (
                ProviderError::CommandTimedOut {
                    after: Duration::from_secs(1),
                },
                ErrorCode::RequestTimeout,
            ),
            (
                ProviderError::FileNotFound { path: "/x".into() },
                ErrorCode::FileOperationFailed,
            ),
            (
                ProviderError::ParentMissing { path: "/x".into() },
                ErrorCode::FileOperationFailed,
            ),
            (
                ProviderError::FileTooLarge {
                    path: "/x".into(),
                    limit: 1,
                },
                ErrorCode::PayloadTooLarge,
            ),
        ];
        for (e, want) in cases {
            let shown = e.to_string();
            assert_eq!(
                map_provider_error(e, Stage::Other, None).code(),
                want,
                "{shown}"
            );
        }
        let limited = map_provider_error(
            ProviderError::RateLimited {
                provider: p,
                retry_after: Some(Duration::from_secs(7)),
            },
            Stage::Other,
            None,
        );
        assert_eq!(limited.retry_after_seconds(), Some(7));
    }

    #[test]
    fn missing_context_names_the_header() {
        let e = map_provider_error(
            ProviderError::MissingContext {
                provider: Provider::Vercel,
                field: "teamId",
            },
            Stage::Other,
            None,
        );
        assert!(e.to_string().contains("X-Provider-Team-Id"), "{e}");
    }
}
