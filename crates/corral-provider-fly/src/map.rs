//! Fly's words to Corral's: a machine's `state` to [`SandboxStatus`].

use corral_domain::SandboxStatus;

/// Maps a machine `state` (fly.io/docs/machines/machine-states). Unknown values are logged and
/// map to `creating`: not usable yet, not terminal, so the service keeps observing.
pub(crate) fn status(state: &str) -> SandboxStatus {
    match state {
        "created" | "starting" => SandboxStatus::Creating,
        "started" => SandboxStatus::Running,
        // A config update swaps the machine underneath; it comes back `started`.
        "replacing" | "updating" => SandboxStatus::Creating,
        "stopping" => SandboxStatus::Stopping,
        "stopped" => SandboxStatus::Stopped,
        "suspending" | "suspended" => SandboxStatus::Paused,
        "failed" | "launch_failed" => SandboxStatus::Failed,
        "destroying" | "destroyed" => SandboxStatus::Expired,
        other => {
            tracing::warn!(
                state = other,
                "unknown Fly machine state; taken as creating"
            );
            SandboxStatus::Creating
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_state_maps_and_unknown_is_not_terminal() {
        for s in ["created", "starting", "replacing", "updating"] {
            assert_eq!(status(s), SandboxStatus::Creating, "{s}");
        }
        assert_eq!(status("started"), SandboxStatus::Running);
        assert_eq!(status("stopped"), SandboxStatus::Stopped);
        assert_eq!(status("stopping"), SandboxStatus::Stopping);
        assert_eq!(status("suspended"), SandboxStatus::Paused);
        assert_eq!(status("suspending"), SandboxStatus::Paused);
        assert_eq!(status("failed"), SandboxStatus::Failed);
        assert_eq!(status("launch_failed"), SandboxStatus::Failed);
        assert_eq!(status("destroyed"), SandboxStatus::Expired);
        assert_eq!(status("destroying"), SandboxStatus::Expired);
        assert!(!status("teleporting").is_terminal());
    }
}
