//! The Corral server and admin CLI: composes the crates, holds no HTTP of its own.
//!
//! - [`cli`] parses the command line and [`commands`] runs each subcommand (`serve`,
//!   `migrate`, `project`, `key`, `profile`, `user`, `legal`, `openapi`); the client
//!   subcommands (`sandbox`, `exec`, `cp`, `providers`) are `corral-cli`'s, only mounted here.
//! - [`config`] resolves the TOML file, the environment and the flags into [`config::Settings`]
//!   (a leaf: it is handed the list of providers compiled in).
//! - [`wiring`] is the registration list of the adapters compiled in and builds the enabled
//!   providers from their `[providers.<id>]` tables (and `local` from `[local]`).
//! - [`server`] composes the server: the registry, the use cases (`corral-service`,
//!   `corral-control`), and the web edge (`corral-web`) with the console (`corral-console`)
//!   mounted into it.

pub mod cli;
pub mod commands;
pub mod config;
pub mod server;
pub mod wiring;
