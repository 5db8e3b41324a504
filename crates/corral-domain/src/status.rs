use std::fmt;

use serde::{Deserialize, Serialize};

/// The provider-neutral lifecycle state of a sandbox, as last observed by Corral.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum SandboxStatus {
    /// Accepted; the provider has not reported it ready yet.
    Creating,
    /// Resuming after a stop: the provider is bringing it back.
    Starting,
    /// Ready for commands.
    Running,
    /// Asleep, standby or hibernated; resumes on use.
    Paused,
    /// A stop was asked for and the provider is still stopping it.
    Stopping,
    /// Stopped: nothing runs and its files are kept; `resume` brings it back.
    Stopped,
    /// The provider reports it broken.
    Failed,
    /// The provider no longer has it and Corral did not delete it (e.g. its lifetime ran out).
    Expired,
    /// Deleted through Corral; only the registry tombstone remains.
    Deleted,
}

impl SandboxStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [SandboxStatus; 9] = [
        SandboxStatus::Creating,
        SandboxStatus::Starting,
        SandboxStatus::Running,
        SandboxStatus::Paused,
        SandboxStatus::Stopping,
        SandboxStatus::Stopped,
        SandboxStatus::Failed,
        SandboxStatus::Expired,
        SandboxStatus::Deleted,
    ];

    /// The wire value, e.g. `"running"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            SandboxStatus::Creating => "creating",
            SandboxStatus::Starting => "starting",
            SandboxStatus::Running => "running",
            SandboxStatus::Paused => "paused",
            SandboxStatus::Stopping => "stopping",
            SandboxStatus::Stopped => "stopped",
            SandboxStatus::Failed => "failed",
            SandboxStatus::Expired => "expired",
            SandboxStatus::Deleted => "deleted",
        }
    }

    /// Parses a wire value (as stored in the registry).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the sandbox can never run again (no provider call can change it).
    pub const fn is_terminal(self) -> bool {
        matches!(self, SandboxStatus::Expired | SandboxStatus::Deleted)
    }

    /// Whether the sandbox is stopped or on its way there: commands, exec and files are
    /// refused (`sandbox_stopped`) unless it resumes first.
    pub const fn is_stopped(self) -> bool {
        matches!(self, SandboxStatus::Stopping | SandboxStatus::Stopped)
    }
}

impl fmt::Display for SandboxStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_values_round_trip_through_serde_and_parse() {
        for st in SandboxStatus::ALL {
            let json = serde_json::to_string(&st).unwrap();
            assert_eq!(json, format!("\"{}\"", st.as_str()));
            assert_eq!(serde_json::from_str::<SandboxStatus>(&json).unwrap(), st);
            assert_eq!(SandboxStatus::parse(st.as_str()), Some(st));
        }
        assert_eq!(SandboxStatus::parse("Running"), None);
    }
}
