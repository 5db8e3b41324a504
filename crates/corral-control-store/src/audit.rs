//! The audit log: every control-plane mutation, who did it, to what, and when.

use corral_registry::with_conn;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::error::{Result, StoreError};
use crate::model::{AccountId, AuditEvent, AuditEventId, NewAuditEvent};
use crate::schema::audit_events;
use crate::{ControlStore, from_micros, to_micros};

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = audit_events)]
struct AuditRow {
    id: String,
    account_id: Option<String>,
    actor_user_id: Option<String>,
    action: String,
    target: String,
    detail: String,
    created_at: i64,
}

impl AuditRow {
    fn into_event(self) -> Result<AuditEvent> {
        let bad = |what: &str| StoreError::Internal {
            message: format!("stored audit event has a malformed {what}"),
        };
        Ok(AuditEvent {
            id: self.id.parse().map_err(|_| bad("id"))?,
            account_id: self
                .account_id
                .map(|a| a.parse().map_err(|_| bad("account id")))
                .transpose()?,
            actor: self
                .actor_user_id
                .map(|a| a.parse().map_err(|_| bad("actor")))
                .transpose()?,
            action: self.action,
            target: self.target,
            detail: serde_json::from_str(&self.detail).map_err(|_| bad("detail"))?,
            created_at: from_micros(self.created_at)?,
        })
    }
}

/// A fresh audit event id, greater than every earlier one of this process: events recorded at
/// the same stored time (a fast sequence, or a test's manual clock) still list in the order
/// they happened.
fn next_id() -> AuditEventId {
    static IDS: std::sync::Mutex<Option<ulid::Generator>> = std::sync::Mutex::new(None);
    let mut ids = IDS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let ulid = ids
        .get_or_insert_with(ulid::Generator::new)
        .generate()
        // Only when 2^80 ids were made in one millisecond: any fresh id will do then.
        .unwrap_or_else(|_| ulid::Ulid::generate());
    AuditEventId::from_ulid(ulid)
}

impl ControlStore {
    /// Records one audit event.
    pub async fn record_audit(&self, event: NewAuditEvent) -> Result<AuditEvent> {
        let row = AuditRow {
            id: next_id().to_string(),
            account_id: event.account_id.map(|a| a.to_string()),
            actor_user_id: event.actor.map(|u| u.to_string()),
            action: event.action,
            target: event.target,
            detail: event.detail.to_string(),
            created_at: to_micros(self.db.now()),
        };
        let db = self.db.clone();
        let stored = AuditRow {
            id: row.id.clone(),
            account_id: row.account_id.clone(),
            actor_user_id: row.actor_user_id.clone(),
            action: row.action.clone(),
            target: row.target.clone(),
            detail: row.detail.clone(),
            created_at: row.created_at,
        };
        self.db
            .detached(async move {
                let mut conn = db.connection().await?;
                with_conn!(&mut conn, |c| diesel::insert_into(audit_events::table)
                    .values(&row)
                    .execute(c)
                    .await
                    .map_err(corral_registry::db_error))
            })
            .await?;
        stored.into_event()
    }

    /// The newest `limit` events of an account, newest first.
    pub async fn audit_events(&self, account: AccountId, limit: i64) -> Result<Vec<AuditEvent>> {
        let account = account.to_string();
        let db = self.db.clone();
        let rows: Vec<AuditRow> = self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                with_conn!(&mut conn, |c| audit_events::table
                    .filter(audit_events::account_id.eq(&account))
                    .order((audit_events::created_at.desc(), audit_events::id.desc()))
                    .limit(limit)
                    .select(AuditRow::as_select())
                    .load(c)
                    .await
                    .map_err(corral_registry::db_error))
            })
            .await?;
        rows.into_iter().map(AuditRow::into_event).collect()
    }
}
