//! `cargo xtask mcp`: Corral's MCP server driven by a client written elsewhere, the official
//! MCP Python SDK (PyPI `mcp`, pinned), over both transports against a live `corral serve`:
//! stdio (`corral mcp`, which the SDK starts) and streamable HTTP (`/mcp` with the project's
//! API key). The journey is `xtask/mcp_journey.py`; the SDK is installed into
//! `target/mcp-venv` when missing.

use std::path::{Path, PathBuf};

/// The SDK release the journey was made green with.
const MCP_SDK: &str = "mcp==2.3.0";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv under `target/`, with the SDK installed at the pinned version if missing.
fn venv() -> Result<PathBuf, String> {
    pinned_venv("mcp-venv", MCP_SDK)
}

/// `target/<name>`, a Python venv with `requirement` (one pinned package) installed once
/// (a marker file named after it says so); its `bin`.
pub(crate) fn pinned_venv(name: &str, requirement: &str) -> Result<PathBuf, String> {
    let venv = root().join("target").join(name);
    let bin = venv.join("bin");
    let marker = venv.join(requirement);
    if marker.exists() {
        return Ok(bin);
    }
    if !bin.join("pip").exists() {
        crate::run(
            "python3",
            &["-m", "venv", venv.to_str().ok_or("non-UTF-8 path")?],
        )?;
    }
    crate::run(
        bin.join("pip").to_str().ok_or("non-UTF-8 path")?,
        &["install", "--quiet", requirement],
    )?;
    std::fs::write(&marker, "").map_err(|e| format!("cannot write {marker:?}: {e}"))?;
    Ok(bin)
}

pub(crate) fn mcp() -> Result<(), String> {
    let bin = venv()?;
    let server = crate::schemathesis::start_server()?;
    let python = bin.join("python");
    let script = root().join("xtask/mcp_journey.py");
    let corral = root().join("target/debug/corral");
    // The key by environment, so the echoed command line does not show it.
    crate::run_env(
        python.to_str().ok_or("non-UTF-8 path")?,
        &[
            script.to_str().ok_or("non-UTF-8 path")?,
            corral.to_str().ok_or("non-UTF-8 path")?,
            &server.base,
        ],
        &[("CORRAL_API_KEY", server.key.clone())],
    )
}
