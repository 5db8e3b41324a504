//! Vercel's statuses and error codes in Corral's vocabulary.

use corral_domain::{SandboxStatus, SnapshotStatus};
use corral_provider_http::Failure;

use crate::api::{ErrorResponse, SessionStatus, SnapshotState};

use crate::P;

/// `Sandbox.status` → the normalized status.
///
/// A stopped (or stopping, snapshotting) *persistent* sandbox keeps its filesystem and resumes
/// on the next command: `paused`. One Corral stopped (`held`: it carries the stop tag) is
/// `stopping`, then `stopped`, and resumes only when asked. A stopped non-persistent one has
/// lost its filesystem: `stopped`. An unknown value is logged and treated as still starting:
/// not usable yet and not terminal, so Corral keeps observing rather than giving the sandbox up.
pub(crate) fn status(status: &SessionStatus, persistent: bool, held: bool) -> SandboxStatus {
    match status {
        SessionStatus::Pending => SandboxStatus::Creating,
        SessionStatus::Running => SandboxStatus::Running,
        SessionStatus::Stopping | SessionStatus::Snapshotting if held => SandboxStatus::Stopping,
        SessionStatus::Stopped if held => SandboxStatus::Stopped,
        SessionStatus::Stopping | SessionStatus::Stopped | SessionStatus::Snapshotting => {
            if persistent {
                SandboxStatus::Paused
            } else {
                SandboxStatus::Stopped
            }
        }
        SessionStatus::Failed | SessionStatus::Aborted => SandboxStatus::Failed,
        SessionStatus::Other(value) => {
            tracing::warn!(provider = %P, status = %value, "unknown sandbox status, treated as creating");
            SandboxStatus::Creating
        }
    }
}

/// `Snapshot.status` → the normalized snapshot status. Vercel answers a snapshot once it is
/// made (`created`); an unknown value is logged and treated as still being made, so Corral
/// keeps observing it.
pub(crate) fn snapshot_status(state: &SnapshotState) -> SnapshotStatus {
    match state {
        SnapshotState::Created => SnapshotStatus::Ready,
        SnapshotState::Failed => SnapshotStatus::Failed,
        SnapshotState::Deleted => SnapshotStatus::Deleted,
        SnapshotState::Other(value) => {
            tracing::warn!(provider = %P, status = %value, "unknown snapshot status, treated as creating");
            SnapshotStatus::Creating
        }
    }
}

/// The `error.code` of a Vercel error body, if it has one.
pub(crate) fn error_code(failure: &Failure) -> Option<String> {
    serde_json::from_slice::<ErrorResponse>(&failure.body)
        .ok()
        .map(|e| e.error.code)
}

/// Whether a session-scoped call failed because the session is no longer running (410, or 422
/// `sandbox_stopping` / `sandbox_snapshotting`): the SDK then resumes and retries once.
pub(crate) fn session_gone(failure: &Failure) -> bool {
    match failure.status {
        Some(410) => true,
        Some(422) => matches!(
            error_code(failure).as_deref(),
            Some("sandbox_stopping" | "sandbox_snapshotting")
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_provider::ProviderError;

    #[test]
    fn every_documented_status_maps_and_unknown_values_do_not_fail() {
        let cases = [
            ("pending", true, false, SandboxStatus::Creating),
            ("running", true, false, SandboxStatus::Running),
            ("running", true, true, SandboxStatus::Running),
            ("stopping", true, false, SandboxStatus::Paused),
            ("stopped", true, false, SandboxStatus::Paused),
            ("snapshotting", true, false, SandboxStatus::Paused),
            ("stopping", true, true, SandboxStatus::Stopping),
            ("snapshotting", true, true, SandboxStatus::Stopping),
            ("stopped", true, true, SandboxStatus::Stopped),
            ("stopped", false, false, SandboxStatus::Stopped),
            ("failed", true, false, SandboxStatus::Failed),
            ("aborted", false, false, SandboxStatus::Failed),
            ("brand_new_state", true, false, SandboxStatus::Creating),
        ];
        for (wire, persistent, held, want) in cases {
            let parsed: SessionStatus = serde_json::from_str(&format!("\"{wire}\"")).unwrap();
            assert_eq!(status(&parsed, persistent, held), want, "{wire}");
        }
        let unknown: SessionStatus = serde_json::from_str("\"brand_new_state\"").unwrap();
        assert_eq!(unknown, SessionStatus::Other("brand_new_state".into()));
    }

    #[test]
    fn every_documented_snapshot_status_maps() {
        for (wire, want) in [
            ("created", SnapshotStatus::Ready),
            ("failed", SnapshotStatus::Failed),
            ("deleted", SnapshotStatus::Deleted),
            ("brand_new_state", SnapshotStatus::Creating),
        ] {
            let parsed: SnapshotState = serde_json::from_str(&format!("\"{wire}\"")).unwrap();
            assert_eq!(snapshot_status(&parsed), want, "{wire}");
        }
    }

    #[test]
    fn only_stopped_sessions_call_for_a_resume() {
        let f = |status: u16, body: &str| Failure {
            error: ProviderError::InvalidRequest {
                provider: corral_domain::Provider::Vercel,
                message: String::new(),
            },
            status: Some(status),
            body: bytes::Bytes::from(body.to_owned()),
        };
        assert!(session_gone(&f(
            410,
            r#"{"error":{"code":"sandbox_stopped","message":"x"}}"#
        )));
        assert!(session_gone(&f(
            422,
            r#"{"error":{"code":"sandbox_stopping","message":"x"}}"#
        )));
        assert!(!session_gone(&f(
            422,
            r#"{"error":{"code":"bad_request","message":"x"}}"#
        )));
        assert!(!session_gone(&f(
            404,
            r#"{"error":{"code":"not_found","message":"x"}}"#
        )));
    }
}
