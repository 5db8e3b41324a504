//! Wake-ups for readers of a command on other replicas: on PostgreSQL every transaction that
//! moves a command's journal (its start, an append, its end) sends `NOTIFY` on one channel
//! with the command's id, delivered at commit and dropped with a rollback; a replica listens
//! on a connection of its own ([`crate::CommandJournal::progress`]). SQLite serves one process,
//! whose readers are woken in memory, so there it does nothing.
//!
//! A notification says only "look again": a reader always reads the journal itself, so a lost
//! or duplicated one costs at most a bounded poll or a spare read.

use diesel::sql_types::Text;
use diesel_async::{AsyncConnection as _, AsyncPgConnection, RunQueryDsl as _};
use futures::StreamExt as _;
use futures::stream::BoxStream;

use corral_domain::CommandId;

use crate::db::{Backend, Database, PgConn, SqliteConn};
use crate::error::{RegistryError, Result, db_error};

/// The channel the notifications travel on.
const CHANNEL: &str = "corral_command_progress";

/// Tells other replicas, at commit, that a command's journal moved.
pub(crate) trait Announce {
    /// Queues the notification for `id` in the current transaction.
    async fn announce(&mut self, id: &str) -> Result<()>;
}

impl Announce for SqliteConn {
    async fn announce(&mut self, _id: &str) -> Result<()> {
        Ok(())
    }
}

impl Announce for PgConn {
    async fn announce(&mut self, id: &str) -> Result<()> {
        diesel::sql_query("SELECT pg_notify($1, $2)")
            .bind::<Text, _>(CHANNEL)
            .bind::<Text, _>(id)
            .execute(self)
            .await
            .map(drop)
            .map_err(db_error)
    }
}

/// The ids of commands whose journal moved on any replica, as they commit, from a PostgreSQL
/// connection of its own (outside the pool); `None` on SQLite.
pub(crate) async fn listen(db: &Database) -> Result<Option<BoxStream<'static, CommandId>>> {
    if db.backend() != Backend::Postgres {
        return Ok(None);
    }
    let url = db.config().url.clone();
    let connect = async move {
        let mut conn =
            AsyncPgConnection::establish(&url)
                .await
                .map_err(|e| RegistryError::Unavailable {
                    message: format!("cannot open the notification connection: {e}"),
                })?;
        diesel::sql_query(format!("LISTEN {CHANNEL}"))
            .execute(&mut conn)
            .await
            .map_err(db_error)?;
        Ok::<_, RegistryError>(conn)
    };
    let conn = db.timed(connect).await?;
    let ids = futures::stream::unfold(conn, |mut conn| async move {
        // Each call borrows the same receiver: nothing queued is lost between calls. An
        // error is the connection breaking: the stream ends.
        let next = std::pin::pin!(conn.notifications_stream())
            .next()
            .await?
            .ok()?;
        Some((next, conn))
    })
    // A payload that names no command wakes nobody.
    .filter_map(|n| async move { n.payload.parse::<CommandId>().ok() });
    Ok(Some(ids.boxed()))
}
