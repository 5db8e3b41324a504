#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Tests report by panicking.
//! The client against a scripted loopback server: each method's request (method, path, query,
//! headers, body) and how it reads the answer, and its retry rules.

mod fake;
mod lifecycle;
