//! `cargo xtask bench`: exec latency of `true` in a `local` sandbox against a plain
//! `sh -c true` spawn on the same machine, reported as percentiles and a ratio of medians, and
//! recorded in `docs/benchmarks.md`.
//!
//! Both sides go through the same async path (a tokio runtime, output captured), so the ratio
//! is what isolation costs: fresh namespaces, mounts and `pivot_root` per command.

use std::path::Path;
use std::time::{Duration, Instant};

use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{CallContext, CreateSpec, ExecSpec, SandboxProvider};
use corral_provider_local::{LocalConfig, LocalProvider};

const WARM_UP: usize = 20;
const DEFAULT_ITERATIONS: usize = 200;
const DOC: &str = "docs/benchmarks.md";
const START: &str = "<!-- bench:local-exec:start -->";
const END: &str = "<!-- bench:local-exec:end -->";

/// Latency percentiles of one series.
struct Summary {
    p50: Duration,
    p90: Duration,
    p99: Duration,
    mean: Duration,
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

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// Runs the benchmark (in a release build: a debug build re-runs itself with `--release`).
pub(crate) fn bench(args: &[String]) -> Result<(), String> {
    if cfg!(debug_assertions) {
        let mut forwarded = vec!["run", "--release", "--quiet", "-p", "xtask", "--", "bench"];
        forwarded.extend(args.iter().map(String::as_str));
        return crate::run(&crate::cargo(), &forwarded);
    }
    let mut iterations = DEFAULT_ITERATIONS;
    let mut write = true;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--iterations" => {
                iterations = rest
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--iterations needs a positive number")?;
            }
            "--no-write" => write = false,
            other => return Err(format!("unknown bench argument `{other}`")),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))?;
    let (local, plain) = runtime.block_on(measure(iterations))?;
    let ratio = local.p50.as_secs_f64() / plain.p50.as_secs_f64();
    let machine = machine();
    let table = format!(
        "| series | iterations | p50 (ms) | p90 (ms) | p99 (ms) | mean (ms) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n\
         | `true` in a local sandbox (`LocalProvider::exec`) | {iterations} | {} | {} | {} | {} |\n\
         | plain `sh -c true` spawn (`tokio::process`) | {iterations} | {} | {} | {} | {} |\n\n\
         Ratio of medians (local / plain): **{ratio:.2}×**. Aim: local p50 under 10 ms — {}.\n",
        ms(local.p50),
        ms(local.p90),
        ms(local.p99),
        ms(local.mean),
        ms(plain.p50),
        ms(plain.p90),
        ms(plain.p99),
        ms(plain.mean),
        if local.p50 < Duration::from_millis(10) {
            "met"
        } else {
            "not met"
        },
    );
    println!("{table}");
    println!("machine: {machine}");
    if write {
        let date = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC");
        let section = format!(
            "{START}\n## Exec latency: `local` sandbox vs plain spawn\n\n\
             Measured {date} with `cargo xtask bench` (release build; {WARM_UP} warm-up runs \
             of each series, then {iterations} timed runs, one at a time).\n\n\
             Machine: {machine}.\n\n{table}\n\
             Each local run creates fresh mount, pid, ipc, uts and network namespaces, \
             bind-mounts the host's system directories read-only, `pivot_root`s into the \
             sandbox's persistent root, mounts a fresh `/proc` and a minimal `/dev`, then \
             under a pid-1 shell starts a session (`setsid`), drops to the sandbox's uid \
             (`setpriv`), enters a nested user and mount namespace (`unshare`) and runs \
             `sh -c true`: five `execve`s and three `fork`s where the plain series has one of \
             each, so the local series suffers more \
             when other work competes for the two cores (see the load average).\n{END}\n"
        );
        update_doc(Path::new(DOC), &section)?;
        println!("updated {DOC}");
    }
    Ok(())
}

async fn measure(iterations: usize) -> Result<(Summary, Summary), String> {
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

/// CPU model, core count, memory and kernel, from `/proc`.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        })
        .map_or_else(
            || "?".into(),
            |kb| format!("{:.0}", kb as f64 / 1024.0 / 1024.0),
        );
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    // Other work on the machine moves the numbers: record how busy it was.
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into());
    format!(
        "{model}, {cores} cores, {mem_gib} GiB RAM, Linux {kernel}; 1-minute load average {load} when the run ended"
    )
}

/// Replaces this benchmark's section of the doc, or appends it (creating the doc).
fn update_doc(path: &Path, section: &str) -> Result<(), String> {
    let old = std::fs::read_to_string(path).unwrap_or_else(|_| {
        "# Benchmarks\n\nNumbers measured on the project's machines by `cargo xtask bench`; \
         each section is rewritten by the run that measured it.\n\n"
            .to_owned()
    });
    let new = match (old.find(START), old.find(END)) {
        (Some(start), Some(end)) if end > start => {
            format!(
                "{}{}{}",
                &old[..start],
                section.trim_end(),
                &old[end + END.len()..]
            )
        }
        _ => format!("{}{section}", old),
    };
    std::fs::write(path, new).map_err(|e| format!("cannot write {}: {e}", path.display()))
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

    #[test]
    fn the_section_is_replaced_not_repeated() {
        let dir = tempfile::tempdir().unwrap();
        let doc = dir.path().join("b.md");
        update_doc(&doc, &format!("{START}\nfirst\n{END}\n")).unwrap();
        std::fs::write(
            &doc,
            std::fs::read_to_string(&doc).unwrap() + "\n## Other\nkept\n",
        )
        .unwrap();
        update_doc(&doc, &format!("{START}\nsecond\n{END}\n")).unwrap();
        let text = std::fs::read_to_string(&doc).unwrap();
        assert!(text.contains("second") && !text.contains("first"), "{text}");
        assert!(text.contains("kept"));
        assert_eq!(text.matches(START).count(), 1);
    }
}
