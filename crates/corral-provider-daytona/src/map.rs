//! Daytona states in Corral's terms.

use corral_domain::{Provider, SandboxStatus};

const P: Provider = Provider::Daytona;

/// `SandboxState` → status: one arm per value of the `SandboxState` enum in Daytona's API
/// description. A value it does not list (a newer Daytona) is logged; it, or no state at all, is
/// `creating`: not known to be usable, not terminal, so the service keeps observing instead of
/// giving the sandbox up.
pub(crate) fn status(state: Option<&str>) -> SandboxStatus {
    match state.unwrap_or("unknown") {
        "started" => SandboxStatus::Running,
        // Operations on a live sandbox that end back in `started`.
        "snapshotting" | "forking" | "resizing" => SandboxStatus::Running,
        "creating" | "restoring" | "starting" | "pulling_snapshot" | "pending_build"
        | "building_snapshot" | "resuming" | "unknown" => SandboxStatus::Creating,
        "pausing" | "paused" => SandboxStatus::Paused,
        // Stopped and archived sandboxes keep their disk but need an explicit start.
        "stopping" | "stopped" | "archiving" | "archived" => SandboxStatus::Stopped,
        "error" | "build_failed" => SandboxStatus::Failed,
        "destroying" | "destroyed" => SandboxStatus::Deleted,
        other => {
            tracing::warn!(provider = %P, state = %other, "unknown sandbox state, treated as creating");
            SandboxStatus::Creating
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
            ("stopping", SandboxStatus::Stopped),
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
            assert_eq!(status(Some(state)), want, "{state}");
        }
        assert_eq!(status(Some("teleporting")), SandboxStatus::Creating);
        assert_eq!(status(None), SandboxStatus::Creating);
    }
}
