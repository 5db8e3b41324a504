#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! The server's tests: in-process HTTP through actix's test utilities, and end to end through
//! the real binary.

mod adapters;
mod api;
mod bridge;
mod bridge_e2e;
mod browser;
mod browser_bugs;
mod cli;
mod cli_control;
mod codes;
mod commands;
mod commands_e2e;
mod config;
mod control_api;
mod control_api_audit;
mod control_codes;
mod control_journey;
mod control_scope;
mod control_support;
mod crash;
mod db_faults;
mod e2b;
mod e2e;
mod edge;
mod events;
mod faults;
mod flood;
mod heads;
mod hostile;
mod idempotency;
mod lifecycle;
mod limits;
mod load;
mod mcp;
mod panics;
mod reap;
mod replicas;
mod request_log;
mod serve;
mod support;
mod tcp_proxy;
mod usage;
mod verify;
mod webhooks;
