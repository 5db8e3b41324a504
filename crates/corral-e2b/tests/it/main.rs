#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The door over a real service (SQLite, the host-shell double as `local`): what only the
//! door's own code decides, tested without HTTP.

mod tokens;
