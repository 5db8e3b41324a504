//! How failures are described in the OpenAPI document: the error responses of an operation,
//! from the v3 code sets it can answer with, and the [`errors!`] macro that names them for a
//! handler's `#[utoipa::path]`. Used by the sandbox and the control-plane handlers alike; it
//! imports nothing else from the crate.

use std::collections::BTreeMap;

use corral_errors::ErrorCode;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response};

/// Failures every control-plane operation can answer with.
pub(crate) const CONTROL_COMMON: &[ErrorCode] = &[
    ErrorCode::InvalidRequest,
    ErrorCode::AuthenticationError,
    ErrorCode::RateLimited,
    ErrorCode::SandboxRegistryUnavailable,
    ErrorCode::InternalError,
];

/// Failures every control-plane mutation after sign-in can answer with (legal gating).
pub(crate) const CONTROL_MUTATION: &[ErrorCode] = &[
    ErrorCode::LegalAcceptanceRequired,
    ErrorCode::LegalUnavailable,
];

/// The error responses of an operation: one per HTTP status, naming its codes, each with the
/// envelope, `X-Request-Id`, and `Retry-After` where a code of that status carries it.
pub(crate) fn error_responses(sets: &[&[ErrorCode]]) -> BTreeMap<String, RefOr<Response>> {
    let mut by_status: BTreeMap<u16, Vec<ErrorCode>> = BTreeMap::new();
    for code in sets.iter().flat_map(|s| s.iter()) {
        let codes = by_status.entry(code.http_status()).or_default();
        if !codes.contains(code) {
            codes.push(*code);
        }
    }
    by_status
        .into_iter()
        .map(|(status, codes)| {
            let names: Vec<String> = codes.iter().map(|c| format!("`{c}`")).collect();
            let mut r = ResponseBuilder::new()
                .description(names.join(", "))
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorEnvelope")))
                        .build(),
                )
                .header("X-Request-Id", request_id_header());
            if codes.iter().any(|c| c.retry_after_seconds(None).is_some()) {
                r = r.header(
                    "Retry-After",
                    HeaderBuilder::new()
                        .schema(
                            ObjectBuilder::new()
                                .schema_type(Type::Integer)
                                .minimum(Some(0.0)),
                        )
                        .description(Some("Seconds to wait before retrying."))
                        .build(),
                );
            }
            if status == ErrorCode::RateLimited.http_status() {
                for (name, what) in [
                    (
                        "RateLimit-Policy",
                        "The service's rate policies (IETF draft): `\"per-key\";q=100;w=5, \"per-project\";q=200;w=4`. Absent for a quota or a provider's limit.",
                    ),
                    (
                        "RateLimit",
                        "What is left of each policy: `\"per-key\";r=0;t=5`. Absent for a quota or a provider's limit.",
                    ),
                ] {
                    r = r.header(
                        name,
                        HeaderBuilder::new()
                            .schema(ObjectBuilder::new().schema_type(Type::String))
                            .description(Some(what))
                            .build(),
                    );
                }
            }
            (status.to_string(), RefOr::T(r.build()))
        })
        .collect()
}

fn request_id_header() -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::String))
        .description(Some("The request id, as in the error body's `requestId`."))
        .build()
}

/// Failures every authenticated operation can answer with.
pub(crate) const ANY: &[ErrorCode] = &[
    ErrorCode::InvalidRequest,
    ErrorCode::MissingApiKey,
    ErrorCode::AuthenticationError,
    ErrorCode::RateLimited,
    ErrorCode::SandboxRegistryUnavailable,
    ErrorCode::InternalError,
];

/// Failures of an operation on one existing sandbox that calls its provider.
pub(crate) const ON_SANDBOX: &[ErrorCode] = &[
    ErrorCode::InvalidSandboxId,
    ErrorCode::SandboxNotFound,
    ErrorCode::ProviderProfilesUnavailable,
    ErrorCode::ProviderProfileNotFound,
    ErrorCode::ProviderOperationUnavailable,
    ErrorCode::ProviderInvalidRequest,
    ErrorCode::ProviderUnavailable,
    ErrorCode::ProviderError,
    ErrorCode::RequestTimeout,
];

/// Declares a type whose `IntoResponses` are the error responses of `sets`.
macro_rules! errors {
    ($name:ident: $($set:expr),+) => {
        struct $name;
        impl utoipa::IntoResponses for $name {
            fn responses() -> ::std::collections::BTreeMap<
                String,
                utoipa::openapi::RefOr<utoipa::openapi::Response>,
            > {
                $crate::doc::error_responses(&[$($set),+])
            }
        }
    };
}
pub(crate) use errors;
