//! Corral's control-plane store: users, accounts (personal and organizations), memberships,
//! invitations, sessions, sign-in tokens, which account owns which registry project, legal
//! releases and acceptances, the audit log, email suppressions and webhook ids.
//!
//! It lives in the registry's database ([`corral_registry::Database`], SQLite or PostgreSQL);
//! its tables are created by the registry's migration runner (version `0003_control_plane`).
//! Like the registry, every operation runs detached under the database's operation timeout, and
//! every rule that must hold under concurrency (the last owner of an organization, a stale
//! `version`, an account being deleted) is checked inside the write transaction that would
//! break it, never by a read before it.
//!
//! Secrets are never stored: sessions, sign-in tokens and invitation tokens are kept as
//! SHA-256 hashes of random 256-bit values, passwords as argon2id PHC strings computed by the
//! caller.
//!
//! The rules of meaning (who may do what, legal gating, sign-in) are in `corral-control`; this
//! crate stores and enforces only what the database must.

mod accounts;
mod audit;
mod error;
mod identity;
mod legal;
mod mail;
mod model;
pub mod schema;

use corral_domain::Timestamp;
use corral_registry::Database;

pub use accounts::{Account, Invitation, Member, NewInvitation, ProjectOwnership};
pub use error::{Result, StoreError};
pub use identity::{Session, User, UserAccountRole};
pub use legal::{LegalAcceptOutcome, LegalRelease};
pub use mail::WEBHOOK_ID_RETENTION;
pub use model::{
    AccountId, AccountKind, AuditEvent, AuditEventId, InvitationId, NewAuditEvent, Role, UserId,
};

/// The control-plane store over the registry's [`Database`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ControlStore {
    db: Database,
}

impl ControlStore {
    /// A store over `db` (connected and migrated by [`Database::connect`]).
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    /// The underlying database.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// The database clock's current time.
    pub fn now(&self) -> Timestamp {
        self.db.now()
    }
}

/// Microseconds since the Unix epoch, the stored form of every timestamp.
pub(crate) fn to_micros(t: Timestamp) -> i64 {
    t.timestamp_micros()
}

/// A stored timestamp back.
pub(crate) fn from_micros(us: i64) -> Result<Timestamp> {
    chrono::DateTime::from_timestamp_micros(us).ok_or_else(|| StoreError::Internal {
        message: format!("stored timestamp {us} is out of range"),
    })
}
