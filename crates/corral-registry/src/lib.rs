//! Corral's durable registry: projects, API keys, encrypted provider profiles and sandbox
//! records, over diesel on SQLite (embedded default) or PostgreSQL (several replicas).
//!
//! Placeholder docs; see below for the full contract once implemented.

mod clock;
mod db;
mod error;
mod migrations;
mod model;
mod registry;
mod rows;
pub mod schema;
mod secret;
#[cfg(feature = "testing")]
pub mod testing;

pub use clock::{Clock, ManualClock, SystemClock};
pub use db::{Backend, Database, DatabaseConfig, PgConn, PooledConnection, SqliteConn, db_error};
pub use error::{RegistryError, Result};
pub use migrations::versions as migration_versions;
pub use model::{
    ApiKeyInfo, CreateState, NewApiKey, NewSandbox, ProfileInput, ProfileWithCredential, Project,
    ProjectId, ProviderProfile, SandboxRecord, SandboxRecordPage, Verification,
};
pub use registry::Registry;
pub use secret::{API_KEY_PREFIX, MASTER_KEY_LEN, MasterKey};
