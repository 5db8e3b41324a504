//! Runloop's statuses in Corral's vocabulary.

use corral_domain::{SandboxStatus, SnapshotStatus};

use crate::api::{DevboxSnapshotStatus, DevboxStatus};

use crate::P;

/// `DevboxViewStatus` (+ the shutdown reason) → the normalized status.
///
/// An unknown status is logged and treated as still starting: not usable yet and not
/// terminal, so Corral keeps observing rather than giving the devbox up.
pub(crate) fn status(status: &DevboxStatus, shutdown_reason: Option<&str>) -> SandboxStatus {
    match status {
        DevboxStatus::Scheduled
        | DevboxStatus::Queued
        | DevboxStatus::Provisioning
        | DevboxStatus::Initializing => SandboxStatus::Creating,
        DevboxStatus::Running => SandboxStatus::Running,
        // Suspend is Corral's stop: the disk is kept, processes end, `resume` boots it again
        // (asked for, or by Runloop's idle policy: both are a stop).
        DevboxStatus::Suspending => SandboxStatus::Stopping,
        DevboxStatus::Suspended => SandboxStatus::Stopped,
        DevboxStatus::Resuming => SandboxStatus::Starting,
        DevboxStatus::Failure => SandboxStatus::Failed,
        DevboxStatus::Shutdown => shutdown(shutdown_reason),
        DevboxStatus::Other(value) => {
            tracing::warn!(provider = %P, status = %value, "unknown devbox status, treated as creating");
            SandboxStatus::Creating
        }
    }
}

/// `DevboxSnapshotStatus` → the snapshot's status; `None` for `deleted`, which the port
/// answers as `NotFound` (Runloop no longer has anything to restore).
///
/// An unknown value is logged and treated as still in progress: not restorable yet, and not
/// given up on.
pub(crate) fn snapshot_status(status: &DevboxSnapshotStatus) -> Option<SnapshotStatus> {
    match status {
        DevboxSnapshotStatus::InProgress => Some(SnapshotStatus::Creating),
        DevboxSnapshotStatus::Complete => Some(SnapshotStatus::Ready),
        DevboxSnapshotStatus::Error => Some(SnapshotStatus::Failed),
        DevboxSnapshotStatus::Deleted => None,
        DevboxSnapshotStatus::Other(value) => {
            tracing::warn!(provider = %P, status = %value, "unknown disk snapshot status, treated as in progress");
            Some(SnapshotStatus::Creating)
        }
    }
}

/// `shutdown` is final: the disk is gone. It is `deleted` when an API shutdown caused it, else
/// `expired` (`DevboxViewShutdownReason`: keep-alive, TTL or idle timeout, entrypoint exit).
/// A missing or unknown reason is `expired` too: the devbox is gone either way, and only a
/// shutdown Corral asked for is reported as deleted.
fn shutdown(reason: Option<&str>) -> SandboxStatus {
    match reason {
        Some("api_shutdown") => SandboxStatus::Deleted,
        Some("keep_alive_timeout" | "ttl_expired" | "idle" | "entrypoint_exit") | None => {
            SandboxStatus::Expired
        }
        Some(other) => {
            tracing::warn!(provider = %P, reason = %other, "unknown devbox shutdown reason, treated as expired");
            SandboxStatus::Expired
        }
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
            ("suspending", SandboxStatus::Stopping),
            ("suspended", SandboxStatus::Stopped),
            ("resuming", SandboxStatus::Starting),
            ("failure", SandboxStatus::Failed),
            ("shutdown", SandboxStatus::Expired),
            ("hibernating-someday", SandboxStatus::Creating),
        ];
        for (wire, want) in cases {
            let parsed: DevboxStatus = serde_json::from_str(&format!("\"{wire}\"")).unwrap();
            assert_eq!(status(&parsed, None), want, "{wire}");
        }
        let unknown: DevboxStatus = serde_json::from_str("\"hibernating-someday\"").unwrap();
        assert_eq!(unknown, DevboxStatus::Other("hibernating-someday".into()));
        assert_eq!(
            status(&DevboxStatus::Shutdown, Some("api_shutdown")),
            SandboxStatus::Deleted
        );
        for reason in [
            "keep_alive_timeout",
            "ttl_expired",
            "idle",
            "entrypoint_exit",
            "a-new-reason",
        ] {
            assert_eq!(
                status(&DevboxStatus::Shutdown, Some(reason)),
                SandboxStatus::Expired,
                "{reason}"
            );
        }
    }

    #[test]
    fn every_documented_snapshot_status_maps() {
        let cases = [
            ("in_progress", Some(SnapshotStatus::Creating)),
            ("complete", Some(SnapshotStatus::Ready)),
            ("error", Some(SnapshotStatus::Failed)),
            ("deleted", None),
            ("compacting-someday", Some(SnapshotStatus::Creating)),
        ];
        for (wire, want) in cases {
            let parsed: DevboxSnapshotStatus =
                serde_json::from_str(&format!("\"{wire}\"")).unwrap();
            assert_eq!(snapshot_status(&parsed), want, "{wire}");
        }
    }
}
