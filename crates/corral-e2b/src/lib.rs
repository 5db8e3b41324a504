//! Corral's E2B-compatible front door: E2B's control API (`/sandboxes`, `/v2/sandboxes`) and
//! its in-sandbox daemon API (envd: Connect-RPC `process.Process`, `filesystem.Filesystem`,
//! `/files`, `/health`) answered by Corral's use cases, so the E2B SDKs run unchanged against
//! Corral, on every provider. Framework-free: the web layer (`corral-web`) only carries
//! requests in and bytes out. The user's guide is `docs/compat/e2b.md`.

pub mod fs;
