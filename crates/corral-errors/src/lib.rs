//! The stable error-code set, version 3: every code of the spec's table with its retryable
//! flag, its HTTP status, and the JSON envelope clients receive.
//!
//! The table is data, in one place ([`error_codes!`] below): adding a code is one line plus the
//! test that pins the table. HTTP statuses are plain `u16`, so this crate knows no web
//! framework; only the server turns them into responses.
//!
//! ```
//! use corral_errors::{ErrorCode, ErrorEnvelope};
//!
//! let code = ErrorCode::IdempotencyInProgress;
//! assert_eq!((code.as_str(), code.retryable(), code.http_status()), ("idempotency_in_progress", true, 409));
//! let body = ErrorEnvelope::new(code, "still running", "req_1");
//! assert_eq!(serde_json::to_value(&body).unwrap()["error"]["code"], "idempotency_in_progress");
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

/// The version of the code set.
pub const ERROR_CODE_SET_VERSION: u32 = 3;

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $variant:ident = ($code:literal, retryable: $retry:literal, http: $status:literal) ),+ $(,)?) => {
        /// A stable, public error code of set v3. Clients handle the code, not the message.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant, )+
        }

        impl ErrorCode {
            /// Every code, in the spec's order.
            pub const ALL: &'static [ErrorCode] = &[ $( ErrorCode::$variant, )+ ];

            /// The wire code, e.g. `"sandbox_not_found"`.
            pub const fn as_str(self) -> &'static str {
                match self { $( ErrorCode::$variant => $code, )+ }
            }

            /// Whether the spec marks the code retryable.
            pub const fn retryable(self) -> bool {
                match self { $( ErrorCode::$variant => $retry, )+ }
            }

            /// The HTTP status the server answers with.
            pub const fn http_status(self) -> u16 {
                match self { $( ErrorCode::$variant => $status, )+ }
            }
        }
    };
}

error_codes! {
    /// Request violates the endpoint contract.
    InvalidRequest = ("invalid_request", retryable: false, http: 400),
    /// Body or file content exceeds the size limit.
    PayloadTooLarge = ("payload_too_large", retryable: false, http: 413),
    /// The service stopped waiting before completion.
    RequestTimeout = ("request_timeout", retryable: true, http: 504),
    /// Idempotency-Key missing, malformed or of unsupported length.
    InvalidIdempotencyKey = ("invalid_idempotency_key", retryable: false, http: 400),
    /// Same key reused with a different create request.
    IdempotencyConflict = ("idempotency_conflict", retryable: false, http: 422),
    /// An identical idempotent operation is still running.
    IdempotencyInProgress = ("idempotency_in_progress", retryable: true, http: 409),
    /// Cannot determine whether a prior create reached the provider.
    IdempotencyOutcomeUnknown = ("idempotency_outcome_unknown", retryable: false, http: 409),
    /// Idempotency store temporarily unavailable.
    IdempotencyUnavailable = ("idempotency_unavailable", retryable: true, http: 503),
    /// Registry could not be read or updated.
    SandboxRegistryUnavailable = ("sandbox_registry_unavailable", retryable: true, http: 503),
    /// Provider create outcome could not be confirmed.
    SandboxCreateOutcomeUnknown = ("sandbox_create_outcome_unknown", retryable: false, http: 502),
    /// Content invalid for the declared encoding.
    InvalidFileContent = ("invalid_file_content", retryable: false, http: 400),
    /// File bytes cannot be returned as UTF-8.
    FileNotUtf8 = ("file_not_utf8", retryable: false, http: 422),
    /// Provider could not complete the file operation.
    FileOperationFailed = ("file_operation_failed", retryable: false, http: 422),
    /// No usable project or provider credential.
    MissingApiKey = ("missing_api_key", retryable: false, http: 401),
    /// Connected profiles could not be loaded.
    ProviderProfilesUnavailable = ("provider_profiles_unavailable", retryable: true, http: 503),
    /// No connected profile for the requested provider.
    ProviderProfileNotFound = ("provider_profile_not_found", retryable: false, http: 422),
    /// Deep verification proved the credential cannot perform the operation.
    ProviderOperationUnavailable = ("provider_operation_unavailable", retryable: false, http: 403),
    /// Sandbox ID malformed or its provider does not match the route.
    InvalidSandboxId = ("invalid_sandbox_id", retryable: false, http: 400),
    /// Provider rejected the normalized request.
    ProviderInvalidRequest = ("provider_invalid_request", retryable: false, http: 422),
    /// A project or upstream provider credential was rejected.
    AuthenticationError = ("authentication_error", retryable: false, http: 401),
    /// Account or project mutation conflicts with current control-plane state.
    ControlPlaneConflict = ("control_plane_conflict", retryable: false, http: 409),
    /// Operation would leave an organization without an owner.
    LastAccountOwner = ("last_account_owner", retryable: false, http: 409),
    /// Ownership or membership change not allowed for a personal account.
    PersonalAccountImmutable = ("personal_account_immutable", retryable: false, http: 403),
    /// Account is already being deleted.
    AccountDeleting = ("account_deleting", retryable: false, http: 409),
    /// No sandbox visible to the project matches the ID.
    SandboxNotFound = ("sandbox_not_found", retryable: false, http: 404),
    /// The sandbox is stopped and was not made with `autoResume`: resume it first.
    SandboxStopped = ("sandbox_stopped", retryable: false, http: 409),
    /// No snapshot visible to the project matches the ID.
    SnapshotNotFound = ("snapshot_not_found", retryable: false, http: 404),
    /// The provider cannot do this operation (its catalog entry says so).
    CapabilityUnsupported = ("capability_unsupported", retryable: false, http: 422),
    /// Rate limit of the service or a provider exceeded.
    RateLimited = ("rate_limited", retryable: true, http: 429),
    /// Provider or customer-owned bridge temporarily unavailable.
    ProviderUnavailable = ("provider_unavailable", retryable: true, http: 503),
    /// Unclassified provider failure.
    ProviderError = ("provider_error", retryable: false, http: 502),
    /// Unexpected server-side failure.
    InternalError = ("internal_error", retryable: true, http: 500),
    /// Current legal release must be accepted first.
    LegalAcceptanceRequired = ("legal_acceptance_required", retryable: false, http: 403),
    /// Legal release changed between review and acceptance.
    LegalReleaseChanged = ("legal_release_changed", retryable: false, http: 409),
    /// Legal document or release does not exist.
    LegalNotFound = ("legal_not_found", retryable: false, http: 404),
    /// Legal publication or acceptance store temporarily unavailable.
    LegalUnavailable = ("legal_unavailable", retryable: true, http: 503),
    /// Inbound email webhook signature or payload invalid.
    InvalidEmailWebhook = ("invalid_email_webhook", retryable: false, http: 400),
    /// A browser `Origin` the endpoint does not allow (`/mcp`: DNS rebinding protection).
    OriginNotAllowed = ("origin_not_allowed", retryable: false, http: 403),
}

impl ErrorCode {
    /// Parses a wire code.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_str() == s)
    }

    /// Whether a response with this code carries `Retry-After`: `idempotency_in_progress`,
    /// `rate_limited` and every 503.
    pub const fn carries_retry_after(self) -> bool {
        matches!(
            self,
            ErrorCode::IdempotencyInProgress | ErrorCode::RateLimited
        ) || self.http_status() == 503
    }

    /// The `Retry-After` seconds to send: the hint if there is one (at least 1), else a default
    /// of 1 s; `None` for codes that carry no `Retry-After`.
    pub fn retry_after_seconds(self, hint: Option<u64>) -> Option<u64> {
        self.carries_retry_after()
            .then(|| hint.unwrap_or(DEFAULT_RETRY_AFTER_SECONDS).max(1))
    }
}

/// `Retry-After` sent when nothing better is known.
pub const DEFAULT_RETRY_AFTER_SECONDS: u64 = 1;

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The normalized error, safe to expose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiError {
    /// Stable code of set v3.
    pub code: ErrorCode,
    /// Human-readable explanation; never a secret. Clients must not parse it.
    pub message: String,
    /// Whether retrying (the same request, same Idempotency-Key) may succeed.
    pub retryable: bool,
    /// The request id, as in the `X-Request-Id` response header.
    pub request_id: String,
    /// For `provider_operation_unavailable`: the operation that cannot be performed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// For `provider_operation_unavailable`: why, from the last deep verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For `provider_operation_unavailable`: what to do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<String>,
    /// For the two outcome-unknown codes: the operation id to reconcile by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
}

/// The JSON body of every failure: `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ApiError,
}

impl ErrorEnvelope {
    /// An envelope with the code's retryable flag and no extra fields.
    pub fn new(code: ErrorCode, message: impl Into<String>, request_id: impl Into<String>) -> Self {
        Self {
            error: ApiError {
                code,
                message: message.into(),
                retryable: code.retryable(),
                request_id: request_id.into(),
                operation: None,
                reason: None,
                remediation: None,
                operation_id: None,
            },
        }
    }
}
