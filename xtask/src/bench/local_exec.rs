//! Scenario 5 at the provider: exec latency of `true` in a `local` sandbox against a plain
//! `sh -c true` spawn on the same machine, one at a time; and create latency with the
//! sandbox's own disk image (the default 1 GiB, allocated whole), each deleted before the
//! next.
//!
//! Both exec sides go through the same async path (a tokio runtime, output captured), so the
//! ratio is what isolation costs: a request to the sandbox's init, a clone into the
//! command's own pid and mount namespaces, and the exec.

use std::time::{Duration, Instant};

use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{CallContext, CreateSpec, ExecSpec, SandboxProvider};
use corral_provider_local::{InitProgram, LocalConfig, LocalProvider};

/// Untimed runs of each series before the timed ones.
pub(crate) const WARM_UP: usize = 20;

/// Latency percentiles of one series.
pub(crate) struct Summary {
    pub(crate) p50: Duration,
    pub(crate) p90: Duration,
    pub(crate) p99: Duration,
    pub(crate) mean: Duration,
}

pub(crate) fn summarize(mut samples: Vec<Duration>) -> Summary {
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

/// What one provider-level run measured.
pub(crate) struct Measured {
    /// Exec of `true` in a sandbox whose init runs.
    pub(crate) exec: Summary,
    /// A plain `sh -c true` spawn.
    pub(crate) plain: Summary,
    /// Create, with the sandbox's disk image.
    pub(crate) create: Summary,
    /// The first exec in a new sandbox (its init starts).
    pub(crate) first_exec: Summary,
    /// Creates timed.
    pub(crate) creates: usize,
}

/// Creates timed: fewer than execs (each allocates and formats a whole image).
pub(crate) fn creates_for(iterations: usize) -> usize {
    (iterations / 4).max(5)
}

pub(crate) async fn measure(iterations: usize) -> Result<Measured, String> {
    let data = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let mut config = LocalConfig::new(data.path().join("sandboxes"));
    // This executable is the sandboxes' init (`main` runs it when asked).
    config.init = Some(InitProgram::current_exe().map_err(|e| format!("cannot find xtask: {e}"))?);
    let local =
        LocalProvider::new(config).map_err(|e| format!("cannot build the local provider: {e}"))?;
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
    let creates = creates_for(iterations);
    let mut create_samples = Vec::with_capacity(creates);
    let mut first_samples = Vec::with_capacity(creates);
    for i in 0..WARM_UP.min(5) + creates {
        let spec = CreateSpec {
            operation_id: OperationId::new(),
            request: CreateSandboxRequest::standard(Provider::Local, None, None),
            timeout_seconds: None,
        };
        let started = Instant::now();
        let id = local
            .create(&ctx, &spec)
            .await
            .map_err(|e| format!("create failed: {e}"))?
            .native_id;
        let created = started.elapsed();
        let started = Instant::now();
        local
            .exec(&ctx, &id, &exec)
            .await
            .map_err(|e| format!("exec failed: {e}"))?;
        let first = started.elapsed();
        local
            .delete(&ctx, &id)
            .await
            .map_err(|e| format!("delete failed: {e}"))?;
        if i >= WARM_UP.min(5) {
            create_samples.push(created);
            first_samples.push(first);
        }
    }
    Ok(Measured {
        exec: summarize(local_samples),
        plain: summarize(plain_samples),
        create: summarize(create_samples),
        first_exec: summarize(first_samples),
        creates,
    })
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
