//! Corral's durable registry: projects, API keys, encrypted provider profiles and sandbox
//! records, over diesel on SQLite (the embedded default) or PostgreSQL (several stateless
//! server replicas sharing one database). One API serves both backends.
//!
//! # Using it alone
//!
//! ```no_run
//! # async fn demo() -> Result<(), corral_registry::RegistryError> {
//! use corral_registry::{Database, DatabaseConfig, MasterKey, Registry};
//! use secrecy::ExposeSecret as _;
//!
//! // `sqlite://<path>` or a plain path → SQLite; `postgres://…` → PostgreSQL.
//! let db = Database::connect(DatabaseConfig::new("sqlite:///var/lib/corral/corral.db")).await?;
//! let key = MasterKey::load_or_create("/var/lib/corral/master.key".as_ref())?;
//! let registry = Registry::new(db, key);
//! let project = registry.create_project("acme").await?;
//! let issued = registry.issue_api_key(project.id).await?; // shown once
//! assert_eq!(registry.authenticate(issued.key.expose_secret()).await?, Some(project.id));
//! # Ok(()) }
//! ```
//!
//! # Rules
//!
//! - **Connections.** [`Database`] is a deadpool pool with every timeout set
//!   ([`DatabaseConfig`]: wait 5 s, create 5 s, recycle 5 s, 10 s per operation by default):
//!   an exhausted pool, a database that refuses or never answers, or a stalled query gives
//!   [`RegistryError::Unavailable`] within those bounds, never a hang. SQLite runs in WAL mode
//!   with `busy_timeout`, `foreign_keys = ON` and `synchronous = NORMAL`; every write is a
//!   single statement or a `BEGIN IMMEDIATE` transaction, so writers queue on the busy timeout
//!   instead of failing with `SQLITE_BUSY`.
//! - **Cancellation.** Every operation runs as a detached task ([`Database::detached`]): a
//!   caller that gives up (timeout, disconnected client) never drops a query half-way, which
//!   on SQLite would block the thread and, on a current-thread runtime such as actix-web's
//!   workers, panic. Abandoned operations finish in the background and return their
//!   connection to the pool. Call the registry from inside a tokio runtime.
//! - **Migrations** are SQL files embedded from `migrations/sqlite` and `migrations/postgres`
//!   (same versions, same meaning), recorded in `corral_migrations`, and applied by
//!   [`Database::connect`] or [`Database::migrate`] (`corral migrate`). Several replicas may
//!   start at once: PostgreSQL serializes them with an advisory lock scoped to the current
//!   schema, SQLite with `BEGIN IMMEDIATE`. The idempotency store's table is migrated here too.
//! - **Timestamps** are stored as microseconds since the Unix epoch (`BIGINT`) on both
//!   backends and come from the database's [`Clock`] (injectable for tests).
//! - **API keys** look like `crl_<keyid>_<secret><checksum>`: a 16-character key id (stored in
//!   clear, for lookup and revocation), a 256-bit secret and a CRC-32 checksum, all lowercase
//!   Crockford base32. A key with a bad shape or checksum is refused before any database
//!   access ([`api_key_id`]). Only HMAC-SHA256(subkey, key id + secret) is stored, compared in constant time.
//!   A key may carry a name and an expiry ([`ApiKeyOptions`]); once expired it is refused like
//!   an unknown key, cached or not. Keys list newest first.
//! - **Master key**: 32 bytes in a file (64 hex characters, mode 0600, refused when group or
//!   others can access it) outside the database. Independent subkeys are derived from it for
//!   the API-key hash, for credential encryption and for E2B access tokens.
//! - **Provider credentials** are encrypted with XChaCha20-Poly1305 (random 192-bit nonce per
//!   write); the associated data binds project id, provider and profile id, so a ciphertext
//!   copied to another row, a flipped bit or another master key gives
//!   [`RegistryError::CredentialUndecryptable`]. Every put gives the profile a fresh id, which
//!   retires the verifications recorded for the previous credential.
//! - **Sandbox records** are inserted `pending` before the provider is called, completed with
//!   the native id, and tombstoned (never deleted) on delete; a tombstone ignores later status
//!   observations. Operation ids are unique.
//! - **Lifecycle.** A sandbox record keeps what it was created with
//!   ([`SandboxLifecycle`]: auto-resume, idle stop, the snapshot it came from) and its last
//!   activity, which starts at its creation and only moves forward
//!   ([`Registry::touch_activity`], a resume); [`Registry::idle_sandboxes`] is the idle
//!   sweep's query. [`Registry::record_status_for`] reports a stop (`sandbox.stopped`) or a
//!   resume (`sandbox.resumed`) beside the status change, with its reason, in the same
//!   transaction. Snapshot records ([`SnapshotRecord`]) are inserted `creating` before the
//!   provider is asked, completed (`snapshot.created` once, when first ready) or failed, and
//!   tombstoned (`snapshot.deleted` once) on delete.
//! - **Pagination** is newest first on (createdAt, id) — byte order of ids on both backends —
//!   with an opaque cursor (`<createdAt micros>_<sandbox id>` of the last record, of the form
//!   [`cursor_pattern`] says, parsed by [`ListCursor`]); any other string is [`RegistryError::InvalidCursor`]. Listing includes tombstones and never calls a provider.
//!   Snapshots list the same way (`<createdAt micros>_<snapshot id>`,
//!   [`snapshot_cursor_pattern`]).
//!
//! - **E2B door records** ([`E2bRecord`]) keep per sandbox created through the E2B-compatible
//!   front door what E2B exposes and the sandbox record does not: template, alias, metadata,
//!   timeout end and the create's env vars, sealed like credentials (bound to project and
//!   sandbox) since they may hold secrets. The in-sandbox access token
//!   ([`Registry::e2b_access_token`]) is stateless: `<project id>.<base64url HMAC-SHA256>` over
//!   project and sandbox ids under its own subkey, checked in constant time.
//!
//! # Errors → v3 codes ([`RegistryError::code`])
//!
//! | error | code |
//! |---|---|
//! | `Unavailable` (retryable) | `sandbox_registry_unavailable` (the service uses `provider_profiles_unavailable` on profile routes) |
//! | `NotFound` | `sandbox_not_found` (or the route's own not-found code) |
//! | `InvalidCursor`, `InvalidInput` | `invalid_request` |
//! | `Conflict` | `control_plane_conflict` |
//! | `CredentialUndecryptable`, `MasterKey`, `UnsupportedUrl`, `Migration`, `Internal` | `internal_error` |
//!
//! # Tests
//!
//! The `testing` feature provides `testing::TestDb` (a temporary SQLite file, or a fresh
//! PostgreSQL schema on the server named by `CORRAL_TEST_POSTGRES_URL`; skipped with a message
//! when unset, failing instead when `CORRAL_REQUIRE_POSTGRES=1`) and
//! `testing::dump_all_rows`.

mod cache;
mod clock;
mod commands;
mod create_failures;
mod db;
mod e2b;
mod e2b_due;
mod e2b_templates;
mod error;
mod events;
mod migrations;
mod model;
mod outbox;
mod progress;
mod reaper;
mod registry;
mod rows;
pub mod schema;
mod secret;
mod snapshots;
#[cfg(feature = "testing")]
pub mod testing;
mod usage;
mod webhooks;

pub use cache::DEFAULT_CACHE_TTL;
pub use clock::{Clock, ManualClock, SystemClock};
pub use commands::{
    Append, CommandJournal, CommandRecord, CommandRecordPage, DEFAULT_MAX_EVENTS_PER_COMMAND,
    JournalEvent, NewCommand, command_cursor_pattern,
};
pub use create_failures::{CreateFailure, MAX_FAILURE_REASON};
pub use db::{Backend, Database, DatabaseConfig, PgConn, PooledConnection, SqliteConn};
pub use e2b::{E2B_TOKEN_LIFETIME, E2bFilter, E2bPage, E2bRecord};
pub use e2b_templates::{E2bTemplate, MAX_TEMPLATE_NAME};
pub use error::{RegistryError, Result, db_error};
pub use events::{EventLog, MAX_EVENTS_PAGE};
pub use migrations::versions as migration_versions;
pub use model::{
    ApiKeyInfo, ApiKeyOptions, CreateState, EndReason, NewApiKey, NewSandbox, NewSnapshot,
    ProfileInput, ProfileWithCredential, Project, ProjectId, ProviderProfile, SandboxLifecycle,
    SandboxRecord, SandboxRecordPage, SnapshotRecord, SnapshotRecordPage, Verification,
};
pub use reaper::{MAX_ORPHANS_LISTED, Orphan};
pub use registry::{LAST_USE_PRECISION, ListCursor, Registry, cursor_pattern};
pub use secret::{API_KEY_PREFIX, E2bTokenClaims, MASTER_KEY_LEN, MasterKey, api_key_id};
pub use snapshots::snapshot_cursor_pattern;
pub use usage::{Lifecycles, MAX_USAGE_SANDBOXES, UsageLog};
pub use webhooks::{
    AttemptOutcome, CircuitPolicy, DeliveryRecord, EndpointTarget, FairClaim,
    MAX_WEBHOOKS_PER_PROJECT, secret_bytes,
};
