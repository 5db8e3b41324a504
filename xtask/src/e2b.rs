//! `cargo xtask e2b-venv`: the published E2B Python SDK (PyPI `e2b`, pinned) in
//! `target/e2b-venv`, for the E2B front door's journey tests (`bins/corral/tests/it/e2b.rs`
//! runs `bins/corral/tests/e2b/journey.py` with it against the real binary). `cargo xtask ci`
//! makes it before the test suite.

use std::path::PathBuf;

/// The SDK release the journey was made green with.
pub(crate) const E2B_SDK: &str = "e2b==2.63.0";

/// The venv's `bin`, with the SDK installed at the pinned version if missing.
pub(crate) fn venv() -> Result<PathBuf, String> {
    crate::mcp::pinned_venv("e2b-venv", E2B_SDK)
}
