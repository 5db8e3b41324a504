#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Integration tests of the shared HTTP plumbing's pure parts.

mod http;
mod props;
