//! Scenario 5 at the provider: exec latency of `true` in a `local` sandbox against a plain
//! `sh -c true` spawn on the same machine, one at a time.
//!
//! Both sides go through the same async path (a tokio runtime, output captured), so the ratio
//! is what isolation costs: fresh namespaces, mounts and `pivot_root` per command.

use std::time::{Duration, Instant};

use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{CallContext, CreateSpec, ExecSpec, SandboxProvider};
use corral_provider_local::{LocalConfig, LocalProvider};

/// Untimed runs of each series before the timed ones.
pub(crate) const WARM_UP: usize = 20;

/// Latency percentiles of one series.
pub(crate) struct Summary {
    pub(crate) p50: Duration,
    pub(crate) p90: Duration,
    pub(crate) p99: Duration,
    pub(crate) mean: Duration,
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    // Nearest-rank percentile.
    let at = |p: usize| samples[(samples.len() * p).div_ceil(100).saturating_sub(1)];
    let total: Duration = samples.iter().sum();
    Summary {
        p50: at(50),
        p90: at(90),
        p99: at(99),
        mean: total / u32::try_from(samples.len()).unwrap_or(u32::MAX),
    }
}

pub(crate) async fn measure(iterations: usize) -> Result<(Summary, Summary), String> {
    let data = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let local = LocalProvider::new(LocalConfig::new(data.path().join("sandboxes")))
        .map_err(|e| format!("cannot build the local provider: {e}"))?;
    if let Some(why) = local.unavailable_reason() {
        return Err(why);
    }
    let ctx = CallContext::anonymous();
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Local, None, None),
        timeout_seconds: None,
    };
    let id = local
        .create(&ctx, &spec)
        .await
        .map_err(|e| format!("create failed: {e}"))?
        .native_id;
    let exec = ExecSpec::new("true");
    let mut local_samples = Vec::with_capacity(iterations);
    for i in 0..WARM_UP + iterations {
        let started = Instant::now();
        let out = local
            .exec(&ctx, &id, &exec)
            .await
            .map_err(|e| format!("exec failed: {e}"))?;
        let took = started.elapsed();
        if out.exit_code != 0 {
            return Err(format!("`true` exited with {}", out.exit_code));
        }
        if i >= WARM_UP {
            local_samples.push(took);
        }
    }
    let mut plain_samples = Vec::with_capacity(iterations);
    for i in 0..WARM_UP + iterations {
        let started = Instant::now();
        let out = tokio::process::Command::new("sh")
            .args(["-c", "true"])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot spawn sh: {e}"))?;
        let took = started.elapsed();
        if !out.status.success() {
            return Err("plain `sh -c true` failed".into());
        }
        if i >= WARM_UP {
            plain_samples.push(took);
        }
    }
    local
        .delete(&ctx, &id)
        .await
        .map_err(|e| format!("delete failed: {e}"))?;
    Ok((summarize(local_samples), summarize(plain_samples)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = summarize(samples);
        assert_eq!(s.p50, Duration::from_millis(50));
        assert_eq!(s.p90, Duration::from_millis(90));
        assert_eq!(s.p99, Duration::from_millis(99));
    }
}
