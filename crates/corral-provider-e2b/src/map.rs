//! E2B states, Connect errors and process ends in Corral's terms.

use std::time::Duration;

use corral_domain::SandboxStatus;
use corral_provider::{ProviderError, excerpt};

use crate::api;

use crate::P;

/// `SandboxState` → status. The description documents `running` and `paused`; E2B's
/// orchestrator also has the transitions `pausing`, `snapshotting` and `killing` (research
/// part 1 §1, not exposed, mapped in case they leak). Anything else is logged and read as
/// `creating`: not known to be usable yet, not terminal, so the service keeps observing.
///
/// `paused` is `stopped`, not `paused`: whether Corral paused it (`stop`) or E2B's auto-pause
/// did, nothing runs in it and it does not wake on use (Corral never turns E2B's
/// `autoResume` on, and envd's host answers `409 The sandbox is paused`) — an explicit
/// resume (`connect`) brings it back, memory and processes included.
pub(crate) fn status(state: &str) -> SandboxStatus {
    match state {
        "running" => SandboxStatus::Running,
        "paused" => SandboxStatus::Stopped,
        // A snapshot returns to `running`; a pause ends `paused`.
        "snapshotting" => SandboxStatus::Running,
        "pausing" => SandboxStatus::Stopping,
        // Being killed: it will never run again.
        "killing" => SandboxStatus::Expired,
        unknown => {
            tracing::warn!(
                provider = %P,
                state = %excerpt(unknown, 40),
                "unknown E2B sandbox state, read as creating"
            );
            SandboxStatus::Creating
        }
    }
}

/// A Connect error code (end-of-stream or unary body) → `ProviderError`, as the E2B SDK reads
/// them; `deadline_exceeded` is the command's own deadline.
/// `secrets` (the API key, the sandbox's envd token) are scrubbed from envd's message before it
/// is cut.
pub(crate) fn connect_error(
    err: &api::ConnectError,
    command_timeout: Duration,
    secrets: &[&str],
) -> ProviderError {
    let message = corral_provider_http::redacted_excerpt(&err.message, secrets);
    match err.code.as_str() {
        "deadline_exceeded" => ProviderError::CommandTimedOut {
            after: command_timeout,
        },
        "unauthenticated" | "permission_denied" => ProviderError::Unauthorized {
            provider: P,
            message,
        },
        "not_found" => ProviderError::NotFound {
            provider: P,
            resource: format!("sandbox process ({message})"),
        },
        "resource_exhausted" => ProviderError::RateLimited {
            provider: P,
            retry_after: None,
        },
        // The SDK reads `unavailable` as "the sandbox probably timed out".
        "unavailable" => ProviderError::Unavailable {
            provider: P,
            message,
            retry_after: None,
        },
        "invalid_argument" | "failed_precondition" | "out_of_range" => {
            ProviderError::InvalidRequest {
                provider: P,
                message,
            }
        }
        code => ProviderError::Protocol {
            provider: P,
            message: format!(
                "envd failed the command with `{}`: {message}",
                excerpt(code, 40)
            ),
        },
    }
}

/// The exit code of an `EndEvent`: its `exitCode` when the process exited, `128 + n` when a
/// signal `n` killed it (envd reports `signal: <name>`).
pub(crate) fn exit_code(end: &api::EndEvent) -> i32 {
    if end.exited || end.exit_code != 0 && end.exit_code != -1 {
        return end.exit_code;
    }
    let signal = end.status.strip_prefix("signal: ").map(str::trim);
    let n = match signal {
        Some("hangup") => 1,
        Some("interrupt") => 2,
        Some("quit") => 3,
        Some("aborted") => 6,
        Some("killed") => 9,
        Some("segmentation fault") => 11,
        Some("broken pipe") => 13,
        Some("terminated") => 15,
        _ => return end.exit_code,
    };
    128 + n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_state_maps_and_unknown_ones_do_not_fail() {
        assert_eq!(status("running"), SandboxStatus::Running);
        assert_eq!(status("paused"), SandboxStatus::Stopped);
        assert_eq!(status("pausing"), SandboxStatus::Stopping);
        assert_eq!(status("snapshotting"), SandboxStatus::Running);
        assert_eq!(status("killing"), SandboxStatus::Expired);
        assert_eq!(status("something-new"), SandboxStatus::Creating);
    }

    #[test]
    fn exit_codes_come_from_the_end_event_or_the_signal() {
        let end = |exit_code, exited, status: &str| api::EndEvent {
            exit_code,
            exited,
            status: status.into(),
            error: None,
        };
        assert_eq!(exit_code(&end(3, true, "exit status 3")), 3);
        // protojson omits a zero exit code.
        assert_eq!(exit_code(&end(0, true, "exit status 0")), 0);
        assert_eq!(exit_code(&end(-1, false, "signal: killed")), 137);
        assert_eq!(exit_code(&end(0, false, "signal: terminated")), 143);
    }

    #[test]
    fn deadline_exceeded_is_the_commands_timeout() {
        let e = connect_error(
            &api::ConnectError {
                code: "deadline_exceeded".into(),
                message: String::new(),
            },
            Duration::from_secs(2),
            &[],
        );
        assert!(
            matches!(e, ProviderError::CommandTimedOut { after } if after == Duration::from_secs(2))
        );
    }

    #[test]
    fn an_envd_stream_error_is_scrubbed_of_the_token_before_it_is_cut() {
        let token = "envd-token-CANARY0123456789ABCDEF";
        let e = connect_error(
            &api::ConnectError {
                code: "unauthenticated".into(),
                message: format!("{}{token} is not valid", "z".repeat(290)),
            },
            Duration::from_secs(2),
            &[token],
        );
        let shown = format!("{e} {e:?}");
        assert!(matches!(e, ProviderError::Unauthorized { .. }), "{e:?}");
        assert!(!shown.contains(&token[..8]), "{shown}");
    }
}
