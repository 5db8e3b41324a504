#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The use cases against the contract, framework-free, over a counting provider double.

mod commands;
mod concurrency;
mod create;
mod events;
mod lifecycle;
mod model;
mod props;
mod races;
mod reaper;
mod sandboxes;
mod starvation;
mod support;
mod verify;
mod webhooks;
