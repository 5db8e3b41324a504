//! Runloop's statuses and errors in Corral's vocabulary.

use corral_domain::SandboxStatus;

use crate::api::DevboxStatus;

/// `DevboxViewStatus` (+ the shutdown reason) → the normalized status.
///
/// `shutdown` is final: the disk is gone. It is `deleted` when an API shutdown caused it, else
/// `expired` (keep-alive or idle timeout, entrypoint exit). Unknown values are treated as
/// still starting, the state from which Corral keeps observing.
pub(crate) fn status(status: DevboxStatus, shutdown_reason: Option<&str>) -> SandboxStatus {
    match status {
        DevboxStatus::Scheduled
        | DevboxStatus::Queued
        | DevboxStatus::Provisioning
        | DevboxStatus::Initializing
        | DevboxStatus::Unknown => SandboxStatus::Creating,
        DevboxStatus::Running => SandboxStatus::Running,
        // Suspended devboxes keep their disk and resume on request.
        DevboxStatus::Suspending | DevboxStatus::Suspended | DevboxStatus::Resuming => {
            SandboxStatus::Paused
        }
        DevboxStatus::Failure => SandboxStatus::Failed,
        DevboxStatus::Shutdown => match shutdown_reason {
            Some("api_shutdown") => SandboxStatus::Deleted,
            _ => SandboxStatus::Expired,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_status_maps_and_unknown_values_do_not_fail() {
        let cases = [
            ("scheduled", SandboxStatus::Creating),
            ("queued", SandboxStatus::Creating),
            ("provisioning", SandboxStatus::Creating),
            ("initializing", SandboxStatus::Creating),
            ("running", SandboxStatus::Running),
            ("suspending", SandboxStatus::Paused),
            ("suspended", SandboxStatus::Paused),
            ("resuming", SandboxStatus::Paused),
            ("failure", SandboxStatus::Failed),
            ("shutdown", SandboxStatus::Expired),
            ("hibernating-someday", SandboxStatus::Creating),
        ];
        for (wire, want) in cases {
            let parsed: DevboxStatus = serde_json::from_str(&format!("\"{wire}\"")).unwrap();
            assert_eq!(status(parsed, None), want, "{wire}");
        }
        assert_eq!(
            status(DevboxStatus::Shutdown, Some("api_shutdown")),
            SandboxStatus::Deleted
        );
        assert_eq!(
            status(DevboxStatus::Shutdown, Some("keep_alive_timeout")),
            SandboxStatus::Expired
        );
    }
}
