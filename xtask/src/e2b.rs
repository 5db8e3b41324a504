//! `cargo xtask e2b-venv` and `cargo xtask e2b-js`: the published E2B SDKs, pinned, for the
//! E2B front door's journey tests (`bins/corral/tests/it/e2b.rs` runs
//! `bins/corral/tests/e2b/journey.py` and `journey.mjs` with them against the real binary):
//! the Python SDK (PyPI `e2b`) in `target/e2b-venv`, the JavaScript SDK (npm `e2b`) in
//! `target/e2b-js`. `cargo xtask ci` installs both before the test suite.

use std::path::PathBuf;

/// The Python SDK release the journey was made green with.
pub(crate) const E2B_SDK: &str = "e2b==2.63.0";

/// The JavaScript SDK release the journey was made green with (the tests check for it too).
const E2B_JS_SDK: &str = "2.51.0";

/// The venv's `bin`, with the SDK installed at the pinned version if missing.
pub(crate) fn venv() -> Result<PathBuf, String> {
    crate::mcp::pinned_venv("e2b-venv", E2B_SDK)
}

/// `target/e2b-js`, with the JavaScript SDK installed at the pinned version if missing.
pub(crate) fn js() -> Result<PathBuf, String> {
    crate::pinned_npm("e2b-js", "e2b", E2B_JS_SDK)
}
