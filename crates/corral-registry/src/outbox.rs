//! The webhook outbox's rows as an event's transaction writes them: a leaf, so the event log
//! (which queues deliveries) and the webhook store (which reads them) both build on it.

use corral_domain::DeliveryState;
use diesel::prelude::*;

use crate::schema::webhook_deliveries as wd;

/// Whether an endpoint whose type filter is stored as `types` wants `kind`.
pub(crate) fn wants(types: &str, kind: &str) -> bool {
    types == "*" || types.contains(&format!(" {kind} "))
}

/// A delivery about to be queued.
#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = wd)]
pub(crate) struct NewDeliveryRow {
    pub(crate) id: String,
    pub(crate) endpoint_id: String,
    pub(crate) project_id: String,
    pub(crate) event_seq: i64,
    pub(crate) state: String,
    pub(crate) attempts: i32,
    pub(crate) next_attempt_at: i64,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

impl NewDeliveryRow {
    /// A pending delivery of event `seq` to `endpoint`, due at `at`.
    pub(crate) fn new(endpoint: String, project: &str, seq: i64, at: i64) -> Self {
        NewDeliveryRow {
            id: format!("msg_{}_{seq}", endpoint.trim_start_matches("whe_")),
            endpoint_id: endpoint,
            project_id: project.to_owned(),
            event_seq: seq,
            state: DeliveryState::Pending.as_str().to_owned(),
            attempts: 0,
            next_attempt_at: at,
            created_at: at,
            updated_at: at,
        }
    }
}
