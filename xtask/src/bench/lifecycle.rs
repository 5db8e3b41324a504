//! The lifecycle on `local` at the provider (issue 32): create, stop, resume, snapshot and a
//! fork's copy (a restore of that snapshot), one at a time, each series beside the create
//! that is its baseline. A sandbox holds a file of a few MiB so a snapshot copies real data.

use std::time::{Duration, Instant};

use corral_domain::{CreateSandboxRequest, OperationId, Provider, SnapshotId, SnapshotStatus};
use corral_provider::{CallContext, CreateSpec, ExecSpec, SandboxProvider, SnapshotSpec};
use corral_provider_local::{InitProgram, LocalConfig, LocalProvider};
use serde_json::{Value, json};

use super::local_exec::{Summary, summarize};

/// What one run measured.
struct Measured {
    rounds: usize,
    create: Summary,
    stop: Summary,
    resume: Summary,
    snapshot: Summary,
    fork_copy: Summary,
}

fn spec() -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Local, None, None),
        timeout_seconds: None,
    }
}

/// Rounds timed: each makes two sandboxes with their own disk images and one snapshot.
fn rounds_for(iterations: usize) -> usize {
    (iterations / 8).max(10)
}

async fn measure(iterations: usize) -> Result<Measured, String> {
    let data = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let mut config = LocalConfig::new(data.path().join("sandboxes"));
    config.init = Some(InitProgram::current_exe().map_err(|e| format!("cannot find xtask: {e}"))?);
    let local =
        LocalProvider::new(config).map_err(|e| format!("cannot build the local provider: {e}"))?;
    if let Some(why) = local.unavailable_reason() {
        return Err(why);
    }
    let ctx = CallContext::anonymous();
    let fail =
        |what: &'static str| move |e: corral_provider::ProviderError| format!("{what} failed: {e}");
    let rounds = rounds_for(iterations);
    let (mut create, mut stop, mut resume, mut snapshot, mut fork_copy) =
        (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let started = Instant::now();
        let id = local
            .create(&ctx, &spec())
            .await
            .map_err(fail("create"))?
            .native_id;
        create.push(started.elapsed());
        local
            .exec(
                &ctx,
                &id,
                &ExecSpec::new("head -c 4194304 /dev/urandom > data.bin"),
            )
            .await
            .map_err(fail("exec"))?;
        let started = Instant::now();
        local.stop(&ctx, &id).await.map_err(fail("stop"))?;
        stop.push(started.elapsed());
        let started = Instant::now();
        local.resume(&ctx, &id).await.map_err(fail("resume"))?;
        resume.push(started.elapsed());
        let snap_spec = SnapshotSpec {
            snapshot_id: SnapshotId::new(Provider::Local),
            name: None,
        };
        let started = Instant::now();
        let snap = local
            .snapshot(&ctx, &id, &snap_spec)
            .await
            .map_err(fail("snapshot"))?;
        snapshot.push(started.elapsed());
        if snap.status != SnapshotStatus::Ready {
            return Err(format!("a local snapshot answered {}", snap.status));
        }
        let started = Instant::now();
        let copy = local
            .restore(&ctx, &spec(), &snap.native_id)
            .await
            .map_err(fail("restore"))?
            .native_id;
        fork_copy.push(started.elapsed());
        for sandbox in [&copy, &id] {
            local.delete(&ctx, sandbox).await.map_err(fail("delete"))?;
        }
        local
            .delete_snapshot(&ctx, &snap.native_id)
            .await
            .map_err(fail("delete_snapshot"))?;
    }
    Ok(Measured {
        rounds,
        create: summarize(create),
        stop: summarize(stop),
        resume: summarize(resume),
        snapshot: summarize(snapshot),
        fork_copy: summarize(fork_copy),
    })
}

/// The `local-lifecycle` section's Markdown and JSON.
pub(crate) async fn section(iterations: usize) -> Result<(String, Value), String> {
    let m = measure(iterations).await?;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let rows = [
        ("`create` (baseline: a 1 GiB disk image)", &m.create),
        ("`stop` (every process ends, the disk unmounted)", &m.stop),
        ("`resume` (the disk mounted again)", &m.resume),
        (
            "`snapshot` (4 MiB written, the disk frozen and copied)",
            &m.snapshot,
        ),
        ("a fork's copy (`restore` of that snapshot)", &m.fork_copy),
    ];
    let mut md = format!(
        "## 9. `local` lifecycle: stop, resume, snapshot and fork beside a create\n\n\
         {} rounds, one at a time, at the provider (`LocalProvider`): each creates a sandbox, \
         writes 4 MiB of random data into it, stops and resumes it, snapshots it and restores \
         the snapshot into a new sandbox (what each copy of a fork is), then deletes both and \
         the snapshot.\n\n\
         | series | p50 (ms) | p99 (ms) | p50 / create p50 |\n| --- | ---: | ---: | ---: |\n",
        m.rounds
    );
    let mut json = serde_json::Map::new();
    json.insert("rounds".into(), json!(m.rounds));
    for (name, s) in rows {
        md.push_str(&format!(
            "| {name} | {:.2} | {:.2} | {:.2}× |\n",
            ms(s.p50),
            ms(s.p99),
            ms(s.p50) / ms(m.create.p50)
        ));
    }
    for (key, s) in [
        ("create", &m.create),
        ("stop", &m.stop),
        ("resume", &m.resume),
        ("snapshot", &m.snapshot),
        ("fork_copy", &m.fork_copy),
    ] {
        json.insert(
            key.into(),
            json!({"p50_ms": ms(s.p50), "p90_ms": ms(s.p90), "p99_ms": ms(s.p99), "mean_ms": ms(s.mean)}),
        );
    }
    Ok((md, Value::Object(json)))
}
