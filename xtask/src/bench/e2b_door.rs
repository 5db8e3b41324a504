//! The `e2b` scenario: `true` through the published E2B Python SDK's `commands.run` (envd's
//! `process.Process/Start`, a Connect server stream, through Corral's E2B front door) against
//! `POST /v1/sandboxes/{id}/exec` of `true` from the same Python process (an `httpx` client,
//! the SDK's own HTTP library, keeping its connection), both on `local`, alternating.

use std::path::Path;

use serde_json::{Value, json};

use super::server::Corral;

/// Timed rounds of each series (after 20 warm-up rounds).
const ROUNDS: usize = 300;

const SCRIPT: &str = r#"
import json, sys, time
import httpx
from e2b import Sandbox

base, key, sbx_id, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"})

def exec_once():
    t = time.perf_counter()
    r = client.post(f"/v1/sandboxes/{sbx_id}/exec", json={"command": "true"})
    r.raise_for_status()
    return time.perf_counter() - t

sbx = Sandbox.create("base", timeout=600)

def run_once():
    t = time.perf_counter()
    r = sbx.commands.run("true")
    assert r.exit_code == 0, r
    return time.perf_counter() - t

for _ in range(20):
    exec_once()
    run_once()
ex, rn = [], []
for _ in range(rounds):
    ex.append(exec_once())
    rn.append(run_once())
sbx.kill()
print(json.dumps({"exec": ex, "run": rn}))
"#;

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)] * 1000.0
}

fn series(v: &Value, name: &str) -> Result<Vec<f64>, String> {
    let mut s: Vec<f64> = v[name]
        .as_array()
        .ok_or_else(|| format!("the script answered no `{name}`"))?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    s.sort_by(f64::total_cmp);
    Ok(s)
}

/// Runs the scenario against `corral` (which must enable `local`); its section.
pub(crate) async fn run(
    client: &reqwest::Client,
    corral: &Corral,
    key: &str,
    tmp: &Path,
) -> Result<(String, Value), String> {
    let venv = crate::e2b::venv()?;
    let base = &corral.base;
    let sbx = super::commands::create_local(client, base, key).await?;
    let script = tmp.join("e2b_bench.py");
    std::fs::write(&script, SCRIPT).map_err(|e| e.to_string())?;
    let door = format!("{base}/e2b");
    let out = tokio::process::Command::new(venv.join("python"))
        .arg(&script)
        .arg(base)
        .arg(key)
        .arg(&sbx)
        .arg(ROUNDS.to_string())
        .env("E2B_API_URL", &door)
        .env("E2B_SANDBOX_URL", &door)
        .env("E2B_API_KEY", key)
        .env("E2B_VALIDATE_API_KEY", "false")
        .env_remove("E2B_DOMAIN")
        .env_remove("E2B_DEBUG")
        .env_remove("E2B_HTTP_VERSION")
        .output()
        .await
        .map_err(|e| format!("cannot run the SDK: {e}"));
    let _ = client
        .delete(format!("{base}/v1/sandboxes/{sbx}"))
        .bearer_auth(key)
        .send()
        .await;
    let out = out?;
    if !out.status.success() {
        return Err(format!(
            "the SDK script failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("the SDK script's answer: {e}"))?;
    let (exec, run) = (series(&v, "exec")?, series(&v, "run")?);
    let ratio = quantile(&run, 0.5) / quantile(&exec, 0.5);
    let md = format!(
        "## 10. The E2B door: `commands.run(\"true\")` through the E2B Python SDK vs `/v1` exec\n\n\
         One `local` sandbox each, SQLite; {ROUNDS} timed rounds alternating the two series \
         (after 20 warm-up rounds), from one Python process (the published `{sdk}`; the \
         baseline with `httpx`, the SDK's own HTTP client, keeping its connection).\n\n\
         | series | runs | p50 (ms) | p90 (ms) | p99 (ms) |\n| --- | ---: | ---: | ---: | ---: |\n\
         | `POST /v1/sandboxes/{{id}}/exec` of `true` (baseline) | {} | {:.2} | {:.2} | {:.2} |\n\
         | `sandbox.commands.run(\"true\")` (E2B door: `process.Process/Start`) | {} | {:.2} | {:.2} | {:.2} |\n\n\
         E2B door p50 / exec p50: **{ratio:.2}×** (target ≤ 1.5: {}).\n",
        exec.len(),
        quantile(&exec, 0.5),
        quantile(&exec, 0.9),
        quantile(&exec, 0.99),
        run.len(),
        quantile(&run, 0.5),
        quantile(&run, 0.9),
        quantile(&run, 0.99),
        if ratio <= 1.5 { "met" } else { "**not met**" },
        sdk = crate::e2b::E2B_SDK,
    );
    Ok((
        md,
        json!({
            "exec_p50_ms": quantile(&exec, 0.5), "exec_p99_ms": quantile(&exec, 0.99),
            "run_p50_ms": quantile(&run, 0.5), "run_p99_ms": quantile(&run, 0.99),
            "ratio_p50": ratio,
        }),
    ))
}
