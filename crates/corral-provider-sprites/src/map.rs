//! Sprites' words to Corral's: a sprite's `status` to [`SandboxStatus`].

use corral_domain::SandboxStatus;

/// Maps a sprite `status` (`cold`, `warm`, `running`). A sprite sleeps by itself after ~30 s
/// idle (`warm`: memory frozen; `cold`: VM stopped, disk kept) and any command or file call
/// wakes it, so both sleeping states are `paused`. Unknown values are logged and map to
/// `creating`: not terminal, so the service keeps observing.
pub(crate) fn status(s: &str) -> SandboxStatus {
    match s {
        "running" => SandboxStatus::Running,
        "warm" | "cold" => SandboxStatus::Paused,
        other => {
            tracing::warn!(status = other, "unknown sprite status; taken as creating");
            SandboxStatus::Creating
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_status_maps_and_unknown_is_not_terminal() {
        assert_eq!(status("running"), SandboxStatus::Running);
        assert_eq!(status("warm"), SandboxStatus::Paused);
        assert_eq!(status("cold"), SandboxStatus::Paused);
        assert!(!status("frozen").is_terminal());
    }
}
