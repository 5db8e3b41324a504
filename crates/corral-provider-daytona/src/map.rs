//! Daytona states in Corral's terms.

use corral_domain::{SandboxStatus, SnapshotStatus};

use crate::P;

/// `SandboxState` → status: one arm per value of the `SandboxState` enum in Daytona's API
/// description. A value it does not list (a newer Daytona) is logged; it, or no state at all, is
/// `creating`: not known to be usable, not terminal, so the service keeps observing instead of
/// giving the sandbox up.
///
/// `starting` is the state both of a new sandbox on its way up and of a stopped one being
/// started again, and nothing in the record tells them apart: it is `starting` when
/// `resumed` (this adapter asked for the start), else `creating`.
pub(crate) fn status(state: Option<&str>, resumed: bool) -> SandboxStatus {
    match state.unwrap_or("unknown") {
        "started" => SandboxStatus::Running,
        // Operations on a live sandbox that end back in `started`.
        "snapshotting" | "forking" | "resizing" => SandboxStatus::Running,
        "starting" if resumed => SandboxStatus::Starting,
        "creating" | "restoring" | "starting" | "pulling_snapshot" | "pending_build"
        | "building_snapshot" | "resuming" | "unknown" => SandboxStatus::Creating,
        "pausing" | "paused" => SandboxStatus::Paused,
        "stopping" => SandboxStatus::Stopping,
        // Stopped and archived sandboxes keep their disk but need an explicit start.
        "stopped" | "archiving" | "archived" => SandboxStatus::Stopped,
        "error" | "build_failed" => SandboxStatus::Failed,
        "destroying" | "destroyed" => SandboxStatus::Deleted,
        other => {
            tracing::warn!(provider = %P, state = %other, "unknown sandbox state, treated as creating");
            SandboxStatus::Creating
        }
    }
}

/// `SnapshotState` → snapshot status: one arm per value of the enum. `inactive` (a snapshot
/// Daytona deactivated; `POST /snapshots/{id}/activate` brings it back) still exists and is
/// read as ready; an unknown value is logged and read as creating.
pub(crate) fn snapshot_status(state: &str) -> SnapshotStatus {
    match state {
        "building" | "pending" | "pulling" => SnapshotStatus::Creating,
        "active" | "inactive" => SnapshotStatus::Ready,
        "error" | "build_failed" => SnapshotStatus::Failed,
        "removing" => SnapshotStatus::Deleted,
        other => {
            tracing::warn!(provider = %P, state = %other, "unknown snapshot state, treated as creating");
            SnapshotStatus::Creating
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_state_maps_and_unknown_ones_do_not_fail() {
        let documented = [
            ("creating", SandboxStatus::Creating),
            ("restoring", SandboxStatus::Creating),
            ("destroyed", SandboxStatus::Deleted),
            ("destroying", SandboxStatus::Deleted),
            ("started", SandboxStatus::Running),
            ("stopped", SandboxStatus::Stopped),
            ("starting", SandboxStatus::Creating),
            ("stopping", SandboxStatus::Stopping),
            ("error", SandboxStatus::Failed),
            ("build_failed", SandboxStatus::Failed),
            ("pending_build", SandboxStatus::Creating),
            ("building_snapshot", SandboxStatus::Creating),
            ("unknown", SandboxStatus::Creating),
            ("pulling_snapshot", SandboxStatus::Creating),
            ("archived", SandboxStatus::Stopped),
            ("archiving", SandboxStatus::Stopped),
            ("resizing", SandboxStatus::Running),
            ("snapshotting", SandboxStatus::Running),
            ("forking", SandboxStatus::Running),
            ("pausing", SandboxStatus::Paused),
            ("paused", SandboxStatus::Paused),
            ("resuming", SandboxStatus::Creating),
        ];
        for (state, want) in documented {
            assert_eq!(status(Some(state), false), want, "{state}");
        }
        assert_eq!(status(Some("teleporting"), false), SandboxStatus::Creating);
        assert_eq!(status(None, false), SandboxStatus::Creating);
        // A start this adapter asked for.
        assert_eq!(status(Some("starting"), true), SandboxStatus::Starting);
        assert_eq!(status(Some("started"), true), SandboxStatus::Running);
    }

    #[test]
    fn every_documented_snapshot_state_maps() {
        for (state, want) in [
            ("building", SnapshotStatus::Creating),
            ("pending", SnapshotStatus::Creating),
            ("pulling", SnapshotStatus::Creating),
            ("active", SnapshotStatus::Ready),
            ("inactive", SnapshotStatus::Ready),
            ("error", SnapshotStatus::Failed),
            ("build_failed", SnapshotStatus::Failed),
            ("removing", SnapshotStatus::Deleted),
            ("brand-new", SnapshotStatus::Creating),
        ] {
            assert_eq!(snapshot_status(state), want, "{state}");
        }
    }
}
