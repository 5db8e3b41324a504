//! Blaxel's words to Corral's: a sandbox's deployment `status` and runtime `state` to
//! [`SandboxStatus`]; a process's `status` and `exitCode` to whether it ended and how.

use corral_domain::{SandboxStatus, Signal, SnapshotStatus};

use crate::api::ProcessResponse;

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

/// A snapshot's `status` (`pending`, `ready`, `failed`). Unknown values are logged and taken
/// as still being made, so the service keeps observing.
pub(crate) fn snapshot_status(status: &str) -> SnapshotStatus {
    match status {
        "pending" => SnapshotStatus::Creating,
        "ready" => SnapshotStatus::Ready,
        "failed" => SnapshotStatus::Failed,
        other => {
            tracing::warn!(
                status = other,
                "unknown Blaxel snapshot status; taken as creating"
            );
            SnapshotStatus::Creating
        }
    }
}

/// Whether the process has ended: `completedAt` is set once it was reaped (`status` alone is
/// not enough: a stop or kill sets `stopped`/`killed` at once, while the process may still be
/// exiting, or ignore SIGTERM).
pub(crate) fn process_ended(p: &ProcessResponse) -> bool {
    match p.completed_at.as_deref() {
        Some(at) => !at.is_empty(),
        None => p.status != "running",
    }
}

/// An ended process's exit code: its own, or `128 + n` for death by signal `n` where Blaxel
/// says which (Go reports `-1` for any signal death; `stopped` means Blaxel sent SIGTERM and
/// `killed` SIGKILL). Unknown values are logged and give no code.
pub(crate) fn exit_code(p: &ProcessResponse) -> Option<i32> {
    if p.exit_code >= 0 {
        return Some(p.exit_code);
    }
    match p.status.as_str() {
        "stopped" => Some(128 + Signal::Term.number()),
        "killed" => Some(128 + Signal::Kill.number()),
        // Killed by a signal Blaxel did not send (out of memory, a `kill` inside the sandbox).
        "failed" | "completed" | "running" => None,
        other => {
            tracing::warn!(status = other, "unknown Blaxel process status");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(status: &str, completed_at: Option<&str>, exit_code: i32) -> ProcessResponse {
        ProcessResponse {
            name: "p".into(),
            pid: "1".into(),
            status: status.into(),
            completed_at: completed_at.map(Into::into),
            exit_code,
            stdout: None,
            stderr: None,
        }
    }

    #[test]
    fn a_process_has_ended_once_completed_at_is_set_whatever_its_status() {
        let at = Some("Mon, 23 Nov 2026 20:00:01 GMT");
        assert!(!process_ended(&process("running", Some(""), -1)));
        // SIGTERM sent, not yet dead (or ignoring it).
        assert!(!process_ended(&process("stopped", Some(""), -1)));
        assert!(process_ended(&process("stopped", at, -1)));
        assert!(process_ended(&process("completed", at, 0)));
        // Without `completedAt`, the status decides.
        assert!(process_ended(&process("failed", None, 3)));
        assert!(!process_ended(&process("running", None, -1)));
    }

    #[test]
    fn signal_deaths_map_to_128_plus_the_signal_blaxel_sent() {
        assert_eq!(exit_code(&process("failed", None, 3)), Some(3));
        assert_eq!(exit_code(&process("completed", None, 0)), Some(0));
        assert_eq!(exit_code(&process("stopped", None, -1)), Some(143));
        assert_eq!(exit_code(&process("killed", None, -1)), Some(137));
        // A process that traps SIGTERM and exits with its own code keeps it.
        assert_eq!(exit_code(&process("stopped", None, 5)), Some(5));
        assert_eq!(exit_code(&process("failed", None, -1)), None);
        assert_eq!(exit_code(&process("zombie", None, -1)), None);
    }

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
