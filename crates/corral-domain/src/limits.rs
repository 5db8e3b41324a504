//! The limits of DESIGN.md §3, in one place.

/// Largest decoded file content accepted by `files/write` (exactly 1 MiB is accepted).
pub const MAX_WRITE_BYTES: usize = 1024 * 1024;
/// Largest file returned by `files/read`.
pub const MAX_READ_BYTES: usize = 8 * 1024 * 1024;
/// Largest `command` accepted by `exec`, in bytes.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// Captured output kept per stream; beyond it the result is truncated and flagged.
pub const MAX_OUTPUT_BYTES_PER_STREAM: usize = 1024 * 1024;
/// Default exec deadline, in seconds.
pub const DEFAULT_EXEC_DEADLINE_SECONDS: u64 = 300;
/// Default page size of the sandbox list.
pub const DEFAULT_PAGE_LIMIT: u32 = 50;
/// Largest page size of the sandbox list.
pub const MAX_PAGE_LIMIT: u32 = 200;
/// Longest accepted `Idempotency-Key`.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
/// Longest accepted file path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Default of the largest `timeoutSeconds` a command started as a durable job may ask for
/// (the server's `[commands] max_timeout_seconds`): a day.
pub const DEFAULT_MAX_COMMAND_TIMEOUT_SECONDS: u64 = 24 * 60 * 60;

/// Shortest accepted `idleStopSeconds`: a minute (an idle check every few seconds would stop
/// a sandbox between two calls of one client).
pub const MIN_IDLE_STOP_SECONDS: u64 = 60;
/// Longest accepted `idleStopSeconds`: 30 days.
pub const MAX_IDLE_STOP_SECONDS: u64 = 30 * 24 * 60 * 60;
/// Most copies one fork makes (each is a create at the provider).
pub const MAX_FORK_COUNT: u32 = 10;
/// Longest snapshot `name`, in characters.
pub const MAX_SNAPSHOT_NAME_CHARS: usize = 128;
