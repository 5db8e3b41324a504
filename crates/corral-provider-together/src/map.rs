//! Together's words to Corral's: sandbox status (and its reason) to [`SandboxStatus`].

use corral_domain::{Provider, SandboxStatus};

const P: Provider = Provider::Together;

/// Maps a sandbox `status` and `status_reason`: one arm per value of the `Sandbox.status` enum
/// in `api-openapi.json`.
///
/// - `recovering`: the VM crashed (`crashed`, `oom_killed`, `evicted`, `node_lost`, …) and
///   Together is bringing it back. It is not being created and it cannot run commands now (its
///   agent is null), so it is `failed` — which Corral does not treat as terminal: the service
///   keeps observing and records `running` again once the recovery succeeds. Corral has no
///   "running but degraded" state, and `creating` would claim a create still in progress.
/// - `terminating` / `terminated`: termination cannot be undone, so both are terminal; the
///   reason says which terminal state. `termination_requested` (the terminate call, Corral's
///   delete or anyone else's) is `deleted`; `autoterminated` (the `ttl` ran out) is `expired`,
///   and so is every other reason (the VM was lost: `evicted`, `node_lost`, …) or none: the
///   sandbox is gone and nobody asked for it.
///
/// An unknown status is logged and mapped to `creating`: not usable yet, not terminal, so the
/// service keeps observing rather than giving the sandbox up.
pub(crate) fn status(status: &str, reason: Option<&str>) -> SandboxStatus {
    match status {
        "starting" => SandboxStatus::Creating,
        "running" => SandboxStatus::Running,
        "recovering" | "failed_to_start" | "unrecovered" => SandboxStatus::Failed,
        "terminating" | "terminated" => match reason {
            Some("termination_requested") => SandboxStatus::Deleted,
            _ => SandboxStatus::Expired,
        },
        other => {
            tracing::warn!(provider = %P, status = %other, "unknown sandbox status, treated as creating");
            SandboxStatus::Creating
        }
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
        assert_eq!(
            status("starting", Some("cold_start_requested")),
            SandboxStatus::Creating
        );
        assert_eq!(
            status("running", Some("cold_started")),
            SandboxStatus::Running
        );
        assert_eq!(
            status("failed_to_start", Some("out_of_capacity")),
            SandboxStatus::Failed
        );
        assert_eq!(
            status("unrecovered", Some("node_lost")),
            SandboxStatus::Failed
        );
        assert!(!status("resizing", None).is_terminal());
    }

    #[test]
    fn recovering_is_a_non_terminal_failure_not_a_create() {
        for reason in [
            "crashed",
            "oom_killed",
            "evicted",
            "node_lost",
            "cluster_lost",
        ] {
            let seen = status("recovering", Some(reason));
            assert_eq!(seen, SandboxStatus::Failed, "{reason}");
            assert!(!seen.is_terminal());
        }
    }

    #[test]
    fn termination_is_deleted_when_requested_and_expired_otherwise() {
        for s in ["terminating", "terminated"] {
            assert_eq!(
                status(s, Some("termination_requested")),
                SandboxStatus::Deleted,
                "{s}"
            );
            assert_eq!(status(s, Some("autoterminated")), SandboxStatus::Expired);
            for lost in [
                "evicted",
                "node_lost",
                "cluster_lost",
                "crashed",
                "internal_error",
            ] {
                assert_eq!(status(s, Some(lost)), SandboxStatus::Expired, "{s} {lost}");
            }
            assert_eq!(status(s, None), SandboxStatus::Expired);
        }
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
