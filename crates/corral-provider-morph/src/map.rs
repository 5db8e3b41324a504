//! Morph's words to Corral's: instance status to [`SandboxStatus`].

use corral_domain::SandboxStatus;

/// Maps an instance `status` (`InstanceStatus` in the SDK: `pending`, `ready`, `paused`,
/// `saving`, `error`). Unknown values map to `creating`: not usable yet, not terminal, so the
/// service keeps observing rather than giving the sandbox up.
pub(crate) fn status(s: &str) -> SandboxStatus {
    match s {
        "pending" => SandboxStatus::Creating,
        "ready" => SandboxStatus::Running,
        "paused" => SandboxStatus::Paused,
        // A snapshot is being taken (also on the way to `paused`); the instance still exists
        // and returns to `ready` or `paused`.
        "saving" => SandboxStatus::Running,
        "error" => SandboxStatus::Failed,
        _ => SandboxStatus::Creating,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_status_maps_and_unknown_is_not_terminal() {
        assert_eq!(status("pending"), SandboxStatus::Creating);
        assert_eq!(status("ready"), SandboxStatus::Running);
        assert_eq!(status("paused"), SandboxStatus::Paused);
        assert_eq!(status("saving"), SandboxStatus::Running);
        assert_eq!(status("error"), SandboxStatus::Failed);
        assert!(!status("hibernating-someday").is_terminal());
    }
}
