//! Retries as the error taxonomy says: retryable codes always, connection failures only for
//! requests that are safe to repeat; exponential backoff with full jitter, never shorter
//! than `Retry-After`.

use std::time::Duration;

use reqwest::{RequestBuilder, Response};

use crate::{Error, Repeat, Result};

/// How a client retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (1: never retry).
    pub attempts: u32,
    /// The first backoff's ceiling; each next one doubles it.
    pub base: Duration,
    /// The largest backoff (and the largest `Retry-After` honoured).
    pub max: Duration,
}

impl Default for RetryPolicy {
    /// 5 attempts, from 200 ms, at most 10 s apart.
    fn default() -> Self {
        Self {
            attempts: 5,
            base: Duration::from_millis(200),
            max: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// Never retry.
    pub fn none() -> Self {
        Self {
            attempts: 1,
            ..Self::default()
        }
    }

    /// The pause before attempt `n + 1` (after `n` failures): a random time up to the
    /// doubled base, but at least `retry_after`, never more than `max`.
    pub fn backoff(&self, n: u32, retry_after: Option<Duration>) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(2u32.saturating_pow(n.saturating_sub(1)))
            .min(self.max);
        let jittered = ceiling.mul_f64(unit_random());
        jittered.max(retry_after.unwrap_or_default()).min(self.max)
    }
}

/// A random number in [0, 1).
fn unit_random() -> f64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

pub(crate) fn retry_after(resp: &Response) -> Option<Duration> {
    let v = resp.headers().get("retry-after")?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

fn request_id(resp: &Response) -> Option<String> {
    resp.headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Sends the request `make` builds, retrying as the policy and `repeat` allow; answers the
/// first successful response, or the last failure as an [`Error`].
pub(crate) async fn send(
    policy: &RetryPolicy,
    repeat: Repeat,
    make: impl Fn() -> RequestBuilder,
) -> Result<Response> {
    let mut failures = 0u32;
    loop {
        let (err, wait_at_least) = match make().send().await {
            Ok(resp) if resp.status().is_success() => return Ok(resp),
            Ok(resp) => {
                let status = resp.status().as_u16();
                let (rid, after) = (request_id(&resp), retry_after(&resp));
                let body = resp.bytes().await.unwrap_or_default();
                let e = Error::from_answer(status, rid, after, &body);
                (e, after)
            }
            // A failure before any answer: the request may or may not have been applied.
            Err(e) if repeat == Repeat::Safe => (Error::transport(&e), None),
            Err(e) => return Err(Error::transport(&e)),
        };
        failures += 1;
        if !err.is_retryable() || failures >= policy.attempts.max(1) {
            return Err(err);
        }
        tokio::time::sleep(policy.backoff(failures, wait_at_least)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_jitter_honours_retry_after_and_is_capped() {
        let p = RetryPolicy::default();
        for n in 1..=8 {
            let ceiling = (p.base * 2u32.pow(n - 1)).min(p.max);
            for _ in 0..50 {
                assert!(p.backoff(n, None) <= ceiling);
            }
        }
        assert!(p.backoff(1, Some(Duration::from_secs(3))) >= Duration::from_secs(3));
        assert_eq!(p.backoff(1, Some(Duration::from_secs(3600))), p.max);
    }
}
