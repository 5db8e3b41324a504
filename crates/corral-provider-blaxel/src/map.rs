//! Blaxel's words to Corral's: a sandbox's deployment `status` and runtime `state` to
//! [`SandboxStatus`].

use corral_domain::SandboxStatus;

/// Maps a sandbox's `status` (deployment) and `state` (runtime). Unknown values are logged and
/// map to `creating`: not usable yet, not terminal, so the service keeps observing.
pub(crate) fn status(status: Option<&str>, state: Option<&str>) -> SandboxStatus {
    match status.unwrap_or("DEPLOYING") {
        "UPLOADING" | "BUILDING" | "BUILT" | "DEPLOYING" => SandboxStatus::Creating,
        "DEPLOYED" => match state {
            // Standby: memory and filesystem snapshotted, resumed on the next data-plane call.
            Some("STANDBY") => SandboxStatus::Paused,
            Some("RUNNING") | None => SandboxStatus::Running,
            Some(other) => {
                tracing::warn!(
                    state = other,
                    "unknown Blaxel sandbox state; taken as running"
                );
                SandboxStatus::Running
            }
        },
        "FAILED" => SandboxStatus::Failed,
        // `spec.enabled = false`: the sandbox exists but does not run.
        "DEACTIVATING" | "DEACTIVATED" => SandboxStatus::Stopped,
        // Kept for `terminatedRetention` after a delete or an expiration policy: gone for good.
        "DELETING" | "TERMINATED" => SandboxStatus::Expired,
        other => {
            tracing::warn!(
                status = other,
                "unknown Blaxel sandbox status; taken as creating"
            );
            SandboxStatus::Creating
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_status_and_state_maps_and_unknown_is_not_terminal() {
        for s in ["UPLOADING", "BUILDING", "BUILT", "DEPLOYING"] {
            assert_eq!(status(Some(s), None), SandboxStatus::Creating);
        }
        assert_eq!(
            status(Some("DEPLOYED"), Some("RUNNING")),
            SandboxStatus::Running
        );
        assert_eq!(
            status(Some("DEPLOYED"), Some("STANDBY")),
            SandboxStatus::Paused
        );
        assert_eq!(status(Some("FAILED"), None), SandboxStatus::Failed);
        assert_eq!(status(Some("DEACTIVATED"), None), SandboxStatus::Stopped);
        assert_eq!(status(Some("DEACTIVATING"), None), SandboxStatus::Stopped);
        assert_eq!(status(Some("TERMINATED"), None), SandboxStatus::Expired);
        assert_eq!(status(Some("DELETING"), None), SandboxStatus::Expired);
        assert!(!status(Some("HIBERNATING"), None).is_terminal());
        assert_eq!(status(None, None), SandboxStatus::Creating);
    }
}
