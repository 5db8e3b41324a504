//! The load generator: open loop at a constant rate (latency counted from each request's
//! intended send time, so a slow server cannot hide queueing by slowing the sender down), and
//! a closed loop of N workers for the highest throughput. Latencies go to HDR histograms.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// What one load run measured.
pub(crate) struct Run {
    /// Latency in microseconds of every request that succeeded.
    pub(crate) hist: Histogram<u64>,
    /// Requests that failed (transport error or an unexpected status).
    pub(crate) errors: u64,
    /// Wall time from the first intended send to the last answer.
    pub(crate) elapsed: Duration,
}

impl Run {
    /// Successful requests per second.
    pub(crate) fn throughput(&self) -> f64 {
        self.hist.len() as f64 / self.elapsed.as_secs_f64()
    }

    /// Latency percentile in milliseconds.
    pub(crate) fn ms(&self, quantile: f64) -> f64 {
        self.hist.value_at_quantile(quantile) as f64 / 1000.0
    }

    /// The figures written to the JSON report.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "requests": self.hist.len(),
            "errors": self.errors,
            "seconds": self.elapsed.as_secs_f64(),
            "throughput_per_second": self.throughput(),
            "p50_ms": self.ms(0.50),
            "p90_ms": self.ms(0.90),
            "p99_ms": self.ms(0.99),
            "max_ms": self.hist.max() as f64 / 1000.0,
        })
    }
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 100 s at 3 significant digits: constant bounds that the crate accepts.
    match Histogram::new_with_bounds(1, 100_000_000, 3) {
        Ok(h) => h,
        Err(e) => unreachable!("constant histogram bounds are valid: {e}"),
    }
}

struct Shared {
    hist: Mutex<Histogram<u64>>,
    errors: Mutex<u64>,
}

impl Shared {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            hist: Mutex::new(histogram()),
            errors: Mutex::new(0),
        })
    }

    fn record(&self, ok: bool, took: Duration) {
        if ok {
            let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
            let _ = self
                .hist
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .record(us.min(100_000_000));
        } else {
            *self.errors.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        }
    }

    fn finish(self: Arc<Self>, elapsed: Duration) -> Run {
        let hist = std::mem::replace(
            &mut *self.hist.lock().unwrap_or_else(PoisonError::into_inner),
            histogram(),
        );
        let errors = *self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        Run {
            hist,
            errors,
            elapsed,
        }
    }
}

/// Sends `rate` requests per second for `duration`, request `i` built and sent by `send(i)`
/// (true when it succeeded), each in a task of its own whatever the earlier ones are doing.
pub(crate) async fn open_loop<F, Fut>(rate: u32, duration: Duration, send: F) -> Run
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    let shared = Shared::new();
    let total = (f64::from(rate) * duration.as_secs_f64()).round() as u64;
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let send = Arc::new(send);
    let start = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..total {
        let intended = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(intended).await;
        let (send, shared) = (send.clone(), shared.clone());
        tasks.spawn(async move {
            let ok = send(i).await;
            shared.record(ok, intended.elapsed());
        });
        // Reap finished tasks as we go so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    shared.finish(start.elapsed())
}

/// `workers` loops each sending one request after the other for `duration` (request `i` by
/// `send(i)`): the highest throughput the target sustains at that concurrency.
pub(crate) async fn closed_loop<F, Fut>(workers: usize, duration: Duration, send: F) -> Run
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    let shared = Shared::new();
    let send = Arc::new(send);
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let (send, shared) = (send.clone(), shared.clone());
        tasks.spawn(async move {
            let mut i = w as u64;
            while Instant::now() < deadline {
                let sent = Instant::now();
                let ok = send(i).await;
                shared.record(ok, sent.elapsed());
                i += workers as u64;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    shared.finish(start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_open_loop_never_waits_for_answers_and_counts_from_the_intended_send_time() {
        // Every request waits until the last one has been sent. A sender that waited for
        // answers would never send the last one; an open loop sends all 50, and the first
        // one's latency covers the whole 49 ms it waited (latency measured from its intended
        // send time, not from when the server got to it).
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let run = open_loop(1000, Duration::from_millis(50), move |i| {
            let gate = gate.clone();
            async move {
                if i == 49 {
                    gate.add_permits(100);
                }
                gate.acquire().await.map(|p| p.forget()).is_ok()
            }
        })
        .await;
        assert_eq!(run.hist.len(), 50);
        assert_eq!(run.errors, 0);
        assert!(run.hist.max() >= 49_000, "max {} us", run.hist.max());
    }

    #[tokio::test]
    async fn failures_are_counted_apart_from_latencies() {
        let run = closed_loop(2, Duration::from_millis(10), |i| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            i % 2 == 0
        })
        .await;
        assert!(run.errors > 0);
        assert!(!run.hist.is_empty());
    }
}
