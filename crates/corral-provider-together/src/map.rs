//! Together's words to Corral's: sandbox status to [`SandboxStatus`].

use corral_domain::SandboxStatus;

/// Maps a sandbox `status` (every value of the `Sandbox.status` enum in `api-openapi.json`).
/// Unknown values map to `creating`: not usable, not terminal, so the service keeps observing.
pub(crate) fn status(s: &str) -> SandboxStatus {
    match s {
        "starting" => SandboxStatus::Creating,
        "running" => SandboxStatus::Running,
        // A crashed sandbox being recovered automatically; it returns to `running`.
        "recovering" => SandboxStatus::Creating,
        // Termination cannot be undone ("cannot be used again"): the sandbox is gone for
        // Corral as soon as it starts; whether Corral or the TTL ended it is the service's call.
        "terminating" | "terminated" => SandboxStatus::Expired,
        "failed_to_start" | "unrecovered" => SandboxStatus::Failed,
        _ => SandboxStatus::Creating,
    }
}

/// Whether an exec `status` says the process has ended. `ExecItem.status` is free text in the
/// description ("e.g., running, stopped, finished"); Together's CLI waits for `EXITED` or
/// `STOPPED`. Anything but a running-like value counts as ended, in any case.
pub(crate) fn exec_finished(status: &str) -> bool {
    !matches!(
        status.to_ascii_lowercase().as_str(),
        "running" | "starting" | "pending" | "created" | ""
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_status_maps_and_unknown_is_not_terminal() {
        assert_eq!(status("starting"), SandboxStatus::Creating);
        assert_eq!(status("running"), SandboxStatus::Running);
        assert_eq!(status("recovering"), SandboxStatus::Creating);
        assert_eq!(status("terminating"), SandboxStatus::Expired);
        assert_eq!(status("terminated"), SandboxStatus::Expired);
        assert_eq!(status("failed_to_start"), SandboxStatus::Failed);
        assert_eq!(status("unrecovered"), SandboxStatus::Failed);
        assert!(!status("resizing").is_terminal());
    }

    #[test]
    fn exec_status_running_is_not_finished() {
        assert!(!exec_finished("running"));
        assert!(!exec_finished("RUNNING"));
        assert!(exec_finished("finished"));
        assert!(exec_finished("stopped"));
        assert!(exec_finished("EXITED"));
    }
}
