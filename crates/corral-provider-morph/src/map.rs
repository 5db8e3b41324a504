//! Morph's words to Corral's: instance status to [`SandboxStatus`].

use corral_domain::{SandboxStatus, SnapshotStatus};

/// Maps an instance `status` (`InstanceStatus` in the SDK: `pending`, `ready`, `paused`,
/// `saving`, `error`). Unknown values map to `creating`: not usable yet, not terminal, so the
/// service keeps observing rather than giving the sandbox up.
pub(crate) fn status(s: &str) -> SandboxStatus {
    match s {
        "pending" => SandboxStatus::Creating,
        "ready" => SandboxStatus::Running,
        // Pause is Corral's stop (memory and disk kept; `resume` continues it).
        "paused" => SandboxStatus::Stopped,
        // A snapshot is being taken (also on the way to `paused`); the instance still exists
        // and returns to `ready` or `paused`.
        "saving" => SandboxStatus::Running,
        "error" => SandboxStatus::Failed,
        _ => SandboxStatus::Creating,
    }
}

/// Maps a snapshot `status` (`SnapshotStatus` in the SDK: `pending`, `ready`, `failed`,
/// `deleting`, `deleted`); `None` for `deleted`, which the port answers as `NotFound`.
/// `deleting` can no longer be restored: `deleted` already. Unknown values are `creating`:
/// not restorable yet, and not given up on.
pub(crate) fn snapshot_status(s: &str) -> Option<SnapshotStatus> {
    match s {
        "pending" => Some(SnapshotStatus::Creating),
        "ready" => Some(SnapshotStatus::Ready),
        "failed" => Some(SnapshotStatus::Failed),
        "deleting" => Some(SnapshotStatus::Deleted),
        "deleted" => None,
        _ => Some(SnapshotStatus::Creating),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_status_maps_and_unknown_is_not_terminal() {
        assert_eq!(status("pending"), SandboxStatus::Creating);
        assert_eq!(status("ready"), SandboxStatus::Running);
        assert_eq!(status("paused"), SandboxStatus::Stopped);
        assert_eq!(status("saving"), SandboxStatus::Running);
        assert_eq!(status("error"), SandboxStatus::Failed);
        assert!(!status("hibernating-someday").is_terminal());
    }

    #[test]
    fn every_documented_snapshot_status_maps() {
        assert_eq!(snapshot_status("pending"), Some(SnapshotStatus::Creating));
        assert_eq!(snapshot_status("ready"), Some(SnapshotStatus::Ready));
        assert_eq!(snapshot_status("failed"), Some(SnapshotStatus::Failed));
        assert_eq!(snapshot_status("deleting"), Some(SnapshotStatus::Deleted));
        assert_eq!(snapshot_status("deleted"), None);
        assert_eq!(
            snapshot_status("compacting-someday"),
            Some(SnapshotStatus::Creating)
        );
    }
}
