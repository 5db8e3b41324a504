//! `cargo xtask e2b-venv`: the published E2B Python SDK (PyPI `e2b`, pinned) in
//! `target/e2b-venv`, for the E2B front door's journey tests (`bins/corral/tests/it/e2b.rs`
//! runs `bins/corral/tests/e2b/journey.py` with it against the real binary). `cargo xtask ci`
//! makes it before the test suite.

use std::path::{Path, PathBuf};

/// The SDK release the journey was made green with.
pub(crate) const E2B_SDK: &str = "e2b==2.63.0";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv's `bin`, with the SDK installed at the pinned version if missing.
pub(crate) fn venv() -> Result<PathBuf, String> {
    let venv = root().join("target/e2b-venv");
    let bin = venv.join("bin");
    let marker = venv.join(E2B_SDK);
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
        &["install", "--quiet", E2B_SDK],
    )?;
    std::fs::write(&marker, "").map_err(|e| format!("cannot write {marker:?}: {e}"))?;
    Ok(bin)
}
