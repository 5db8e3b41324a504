//! Pins the whole v3 table: a changed flag, status or a missing code fails here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.

use corral_errors::{ErrorCode, ErrorEnvelope};
use serde_json::json;

/// (code, retryable as the spec's table says, HTTP status as docs/api.md says)
const TABLE: &[(&str, bool, u16)] = &[
    ("invalid_request", false, 400),
    ("payload_too_large", false, 413),
    ("request_timeout", true, 504),
    ("invalid_idempotency_key", false, 400),
    ("idempotency_conflict", false, 422),
    ("idempotency_in_progress", true, 409),
    ("idempotency_outcome_unknown", false, 409),
    ("idempotency_unavailable", true, 503),
    ("sandbox_registry_unavailable", true, 503),
    ("sandbox_create_outcome_unknown", false, 502),
    ("invalid_file_content", false, 400),
    ("file_not_utf8", false, 422),
    ("file_operation_failed", false, 422),
    ("missing_api_key", false, 401),
    ("provider_profiles_unavailable", true, 503),
    ("provider_profile_not_found", false, 422),
    ("provider_operation_unavailable", false, 403),
    ("invalid_sandbox_id", false, 400),
    ("provider_invalid_request", false, 422),
    ("authentication_error", false, 401),
    ("control_plane_conflict", false, 409),
    ("last_account_owner", false, 409),
    ("personal_account_immutable", false, 403),
    ("account_deleting", false, 409),
    ("sandbox_not_found", false, 404),
    // Extensions beside the spec's set (docs/api.md): the sandbox lifecycle.
    ("sandbox_stopped", false, 409),
    ("snapshot_not_found", false, 404),
    ("capability_unsupported", false, 422),
    ("rate_limited", true, 429),
    ("provider_unavailable", true, 503),
    ("provider_error", false, 502),
    ("internal_error", true, 500),
    ("legal_acceptance_required", false, 403),
    ("legal_release_changed", false, 409),
    ("legal_not_found", false, 404),
    ("legal_unavailable", true, 503),
    ("invalid_email_webhook", false, 400),
    ("origin_not_allowed", false, 403),
];

#[test]
fn the_table_has_exactly_the_thirty_four_codes_of_set_v3_the_three_lifecycle_codes_and_origin_not_allowed()
 {
    assert_eq!(TABLE.len(), 38);
    assert_eq!(ErrorCode::ALL.len(), 38);
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    let pinned: Vec<&str> = TABLE.iter().map(|r| r.0).collect();
    assert_eq!(codes, pinned);
}

#[test]
fn every_code_has_the_pinned_retryable_flag_and_status() {
    for &(code, retryable, status) in TABLE {
        let c = ErrorCode::parse(code).unwrap_or_else(|| panic!("missing {code}"));
        assert_eq!(c.retryable(), retryable, "{code} retryable");
        assert_eq!(c.http_status(), status, "{code} status");
        assert_eq!(serde_json::to_value(c).unwrap(), code);
    }
}

#[test]
fn retry_after_goes_with_in_progress_rate_limited_and_every_503() {
    for &c in ErrorCode::ALL {
        let want = matches!(c, ErrorCode::IdempotencyInProgress | ErrorCode::RateLimited)
            || c.http_status() == 503;
        assert_eq!(c.carries_retry_after(), want, "{c}");
        assert_eq!(c.retry_after_seconds(Some(7)).is_some(), want, "{c}");
    }
    assert_eq!(
        ErrorCode::RateLimited.retry_after_seconds(Some(30)),
        Some(30)
    );
    assert_eq!(ErrorCode::RateLimited.retry_after_seconds(Some(0)), Some(1));
    assert_eq!(
        ErrorCode::ProviderUnavailable.retry_after_seconds(None),
        Some(1)
    );
    assert_eq!(
        ErrorCode::SandboxNotFound.retry_after_seconds(Some(5)),
        None
    );
}

#[test]
fn no_bad_input_code_is_a_server_error() {
    for c in [
        ErrorCode::InvalidRequest,
        ErrorCode::PayloadTooLarge,
        ErrorCode::InvalidIdempotencyKey,
        ErrorCode::InvalidFileContent,
        ErrorCode::InvalidSandboxId,
    ] {
        assert!((400..500).contains(&c.http_status()), "{c}");
    }
    let five_hundreds: Vec<_> = ErrorCode::ALL
        .iter()
        .filter(|c| c.http_status() == 500)
        .collect();
    assert_eq!(five_hundreds, [&ErrorCode::InternalError]);
}

#[test]
fn envelope_has_the_designed_shape() {
    let plain = ErrorEnvelope::new(ErrorCode::SandboxNotFound, "no such sandbox", "req_01");
    assert_eq!(
        serde_json::to_value(&plain).unwrap(),
        json!({"error": {"code": "sandbox_not_found", "message": "no such sandbox", "retryable": false, "requestId": "req_01"}})
    );
    let mut unknown = ErrorEnvelope::new(ErrorCode::SandboxCreateOutcomeUnknown, "lost", "req_02");
    unknown.error.operation_id = Some("op_01".into());
    let v = serde_json::to_value(&unknown).unwrap();
    assert_eq!(v["error"]["operationId"], "op_01");
    let mut op = ErrorEnvelope::new(ErrorCode::ProviderOperationUnavailable, "no", "req_03");
    op.error.operation = Some("create".into());
    op.error.reason = Some("key lacks scope".into());
    op.error.remediation = Some("grant sandboxes:write".into());
    let v = serde_json::to_value(&op).unwrap();
    assert_eq!(v["error"]["operation"], "create");
    assert_eq!(v["error"]["reason"], "key lacks scope");
    assert_eq!(v["error"]["remediation"], "grant sandboxes:write");
    let back: ErrorEnvelope = serde_json::from_value(v).unwrap();
    assert_eq!(back, op);
}
