//! Which requests get a log line (the `[http]` table's `request_log`, `request_log_sample` and
//! `slow_request_ms`): none, one in N, or every one; whatever the mode, a request answered
//! with a 5xx status or slower than the threshold is always logged. A bottom module beside
//! `state` and `edge`: it imports nothing else from the crate.
//!
//! Every request is counted in the metrics by operation and code (`/metrics`) whatever is
//! logged, so sampling loses no counts, only the lines; one line per request cost a busy
//! server 345 MB of log for 1.77 M requests (issue 33).

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How many of the ordinary requests (neither failed with a 5xx nor slow) are logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestLogMode {
    /// None of them.
    Off,
    /// One in [`RequestLogConfig::sample_one_in`], counted across the process.
    Sampled,
    /// Every one.
    All,
}

impl FromStr for RequestLogMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" => Ok(Self::Off),
            "sampled" => Ok(Self::Sampled),
            "all" => Ok(Self::All),
            other => Err(format!("`{other}` is not off, sampled or all")),
        }
    }
}

impl RequestLogMode {
    /// The mode's name, as the configuration spells it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Sampled => "sampled",
            Self::All => "all",
        }
    }
}

/// What the request log keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLogConfig {
    /// Which ordinary requests get a line.
    pub mode: RequestLogMode,
    /// `sampled` logs one request in this many (1 logs all of them; 0 is read as 1).
    pub sample_one_in: u64,
    /// A request whose answer took at least this long is always logged.
    pub slow: Duration,
}

/// One line in 100: a server at 20 000 requests/s writes about 200 lines/s (≈ 40 KB/s).
pub const DEFAULT_SAMPLE_ONE_IN: u64 = 100;

/// Longer than any ordinary API answer, and long enough that the requests that legitimately
/// wait (an exec of a long command, a create waiting for its provider, `?wait=`) log at most
/// one line per open connection every 5 s.
pub const DEFAULT_SLOW: Duration = Duration::from_secs(5);

impl Default for RequestLogConfig {
    /// `sampled`, one in [`DEFAULT_SAMPLE_ONE_IN`], slow from [`DEFAULT_SLOW`].
    fn default() -> Self {
        Self {
            mode: RequestLogMode::Sampled,
            sample_one_in: DEFAULT_SAMPLE_ONE_IN,
            slow: DEFAULT_SLOW,
        }
    }
}

/// Why a request is logged (the line's `logged` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logged {
    /// Answered with a 5xx status: always logged, at `warn`.
    ServerError,
    /// Took at least the slow threshold: always logged, at `warn`.
    Slow,
    /// The one in N of `sampled`, at `info`.
    Sampled,
    /// `all`, at `info`.
    All,
}

impl Logged {
    /// The value of the line's `logged` field.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ServerError => "error",
            Self::Slow => "slow",
            Self::Sampled => "sampled",
            Self::All => "all",
        }
    }

    /// Whether the line is a warning (a 5xx or a slow answer) rather than information.
    #[must_use]
    pub fn is_warning(self) -> bool {
        matches!(self, Self::ServerError | Self::Slow)
    }
}

impl RequestLogConfig {
    /// Whether the `seq`-th request (counted from 0 across the process) answered `status`
    /// after `took` gets a line, and why. Pure: [`RequestLog::decide`] supplies `seq`.
    #[must_use]
    pub fn decide(&self, status: u16, took: Duration, seq: u64) -> Option<Logged> {
        if status >= 500 {
            return Some(Logged::ServerError);
        }
        if took >= self.slow {
            return Some(Logged::Slow);
        }
        match self.mode {
            RequestLogMode::Off => None,
            RequestLogMode::All => Some(Logged::All),
            RequestLogMode::Sampled => seq
                .is_multiple_of(self.sample_one_in.max(1))
                .then_some(Logged::Sampled),
        }
    }
}

/// The request log of one server: its configuration and the count the sampling runs on.
#[derive(Debug)]
pub struct RequestLog {
    /// What it keeps.
    pub config: RequestLogConfig,
    seen: AtomicU64,
}

impl RequestLog {
    /// Nothing counted yet: the first ordinary request is the first one sampled.
    #[must_use]
    pub fn new(config: RequestLogConfig) -> Self {
        Self {
            config,
            seen: AtomicU64::new(0),
        }
    }

    /// Whether this request gets a line, and why; counts it (only `sampled` reads the
    /// count, so only `sampled` pays for it).
    pub fn decide(&self, status: u16, took: Duration) -> Option<Logged> {
        let seq = match self.config.mode {
            RequestLogMode::Sampled => self.seen.fetch_add(1, Ordering::Relaxed),
            RequestLogMode::Off | RequestLogMode::All => 0,
        };
        self.config.decide(status, took, seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Duration = Duration::from_millis(3);

    fn config(mode: RequestLogMode) -> RequestLogConfig {
        RequestLogConfig {
            mode,
            sample_one_in: 10,
            slow: Duration::from_secs(1),
        }
    }

    #[test]
    fn server_errors_and_slow_answers_are_logged_in_every_mode() {
        for mode in [
            RequestLogMode::Off,
            RequestLogMode::Sampled,
            RequestLogMode::All,
        ] {
            let c = config(mode);
            // seq 3 is not a sampled one.
            assert_eq!(
                c.decide(500, FAST, 3),
                Some(Logged::ServerError),
                "{mode:?}"
            );
            assert_eq!(
                c.decide(503, FAST, 3),
                Some(Logged::ServerError),
                "{mode:?}"
            );
            assert_eq!(
                c.decide(200, Duration::from_secs(1), 3),
                Some(Logged::Slow),
                "{mode:?}"
            );
            assert_eq!(
                c.decide(404, Duration::from_secs(7), 3),
                Some(Logged::Slow),
                "{mode:?}"
            );
            assert_eq!(
                c.decide(502, Duration::from_secs(7), 3),
                Some(Logged::ServerError),
                "a slow 5xx is an error first"
            );
        }
    }

    #[test]
    fn off_logs_no_ordinary_request_and_all_logs_every_one() {
        let off = config(RequestLogMode::Off);
        let all = config(RequestLogMode::All);
        for seq in 0..25 {
            for status in [200, 201, 204, 304, 400, 401, 404, 429, 499] {
                assert_eq!(off.decide(status, FAST, seq), None);
                assert_eq!(all.decide(status, FAST, seq), Some(Logged::All));
            }
        }
        assert_eq!(
            off.decide(200, Duration::from_millis(999), 0),
            None,
            "just under the threshold"
        );
    }

    #[test]
    fn sampled_logs_one_request_in_n_counted_across_the_process() {
        let log = RequestLog::new(config(RequestLogMode::Sampled));
        let logged = (0..35).filter(|_| log.decide(200, FAST).is_some()).count();
        // Requests 0, 10, 20 and 30.
        assert_eq!(logged, 4);
        let first = RequestLog::new(config(RequestLogMode::Sampled));
        assert_eq!(first.decide(404, FAST), Some(Logged::Sampled), "the first");
        assert_eq!(first.decide(200, FAST), None);
        // Errors and slow answers are logged besides the sample, and counted in it.
        assert_eq!(first.decide(500, FAST), Some(Logged::ServerError));
        let one = RequestLog::new(RequestLogConfig {
            sample_one_in: 0,
            ..config(RequestLogMode::Sampled)
        });
        assert!((0..5).all(|_| one.decide(200, FAST) == Some(Logged::Sampled)));
    }

    #[test]
    fn modes_parse_from_their_names_only() {
        for mode in [
            RequestLogMode::Off,
            RequestLogMode::Sampled,
            RequestLogMode::All,
        ] {
            assert_eq!(mode.as_str().parse::<RequestLogMode>(), Ok(mode));
        }
        assert!("every".parse::<RequestLogMode>().is_err());
        assert!("".parse::<RequestLogMode>().is_err());
        assert_eq!(RequestLogConfig::default().mode, RequestLogMode::Sampled);
    }
}
