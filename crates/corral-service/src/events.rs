//! Lifecycle events: a project's log read by cursor (`GET /v1/events`), followed as a
//! stream, and kept for a configurable period. The events themselves are appended by the
//! registry and the command journal in the transactions of the changes they report.

use std::collections::VecDeque;
use std::time::Duration;

use corral_domain::{EventPage, LifecycleEvent, SandboxId};
use corral_registry::MAX_EVENTS_PAGE;
use futures::Stream;

use crate::error::{ServiceError, registry_error};
use crate::{Caller, Service};

/// Events one JSON page holds by default.
pub const DEFAULT_EVENTS_PAGE: u32 = 100;
/// How often a follower looks for new events.
const POLL: Duration = Duration::from_millis(500);
/// Events removed per retention pass, at most (one bounded delete).
const PRUNE_BATCH: u32 = 5_000;

/// Event ids are stored as signed 64-bit integers: a point past the largest is malformed.
fn check_after(after: u64) -> Result<(), ServiceError> {
    if i64::try_from(after).is_err() {
        return Err(ServiceError::invalid(format!(
            "`after` (or Last-Event-ID) must be at most {}",
            i64::MAX
        )));
    }
    Ok(())
}

impl Service {
    /// The sandbox filter: `None`, or a sandbox of the caller's project (tombstones
    /// included); another project's id is not found, as everywhere.
    async fn event_filter(
        &self,
        caller: &Caller,
        sandbox: Option<&str>,
    ) -> Result<Option<SandboxId>, ServiceError> {
        match sandbox {
            None => Ok(None),
            Some(s) => Ok(Some(self.record(caller, s).await?.id)),
        }
    }

    /// `GET /v1/events`: the caller's project's events after `after`, oldest first, at most
    /// `limit` (1 to 500, default 100), only `sandbox`'s when given.
    pub async fn events(
        &self,
        caller: &Caller,
        after: u64,
        limit: Option<u32>,
        sandbox: Option<&str>,
    ) -> Result<EventPage, ServiceError> {
        check_after(after)?;
        let limit = limit.unwrap_or(DEFAULT_EVENTS_PAGE);
        if !(1..=MAX_EVENTS_PAGE).contains(&limit) {
            return Err(ServiceError::invalid(format!(
                "`limit` must be from 1 to {MAX_EVENTS_PAGE}"
            )));
        }
        let filter = self.event_filter(caller, sandbox).await?;
        let items = self
            .inner
            .events
            .after(caller.project_id(), after, limit, filter)
            .await
            .map_err(registry_error)?;
        Ok(EventPage {
            next_after: items.last().map_or(after, |e| e.id),
            items,
        })
    }

    /// `GET /v1/events` as a stream: every event after `after`, then new ones as they are
    /// appended, without end (the web edge adds keep-alives). Checks access once, up front;
    /// holds one page at most; a failed read ends the stream (the client resumes from the
    /// last id it saw).
    pub async fn follow_events(
        &self,
        caller: &Caller,
        after: u64,
        sandbox: Option<&str>,
    ) -> Result<
        impl Stream<Item = Result<LifecycleEvent, ServiceError>> + Send + 'static,
        ServiceError,
    > {
        check_after(after)?;
        let filter = self.event_filter(caller, sandbox).await?;
        // Held by the stream, so given back when its client goes.
        let permit = self.inner.streams.acquire(caller)?;
        let (log, project) = (self.inner.events.clone(), caller.project_id());
        struct Follow {
            after: u64,
            buffered: VecDeque<LifecycleEvent>,
            failed: bool,
        }
        let start = Follow {
            after,
            buffered: VecDeque::new(),
            failed: false,
        };
        let stream = futures::stream::unfold(start, move |mut st| {
            let log = log.clone();
            async move {
                loop {
                    if let Some(e) = st.buffered.pop_front() {
                        st.after = e.id;
                        return Some((Ok(e), st));
                    }
                    if st.failed {
                        return None;
                    }
                    match log
                        .after(project, st.after, DEFAULT_EVENTS_PAGE, filter)
                        .await
                    {
                        Ok(page) if page.is_empty() => tokio::time::sleep(POLL).await,
                        Ok(page) => st.buffered.extend(page),
                        Err(e) => {
                            st.failed = true;
                            return Some((Err(registry_error(e)), st));
                        }
                    }
                }
            }
        });
        Ok(futures::StreamExt::map(stream, move |item| {
            let _held = &permit;
            item
        }))
    }

    /// Removes events older than the configured retention, in bounded batches; how many
    /// went. Run by the command supervisor's pass.
    pub async fn prune_events_once(&self) -> u64 {
        let keep = chrono::Duration::from_std(self.inner.config.events_retention)
            .unwrap_or(chrono::Duration::MAX);
        let before = self.inner.registry.database().now() - keep;
        let mut removed = 0;
        // A few batches per pass at most: a large backlog is worked off over several passes.
        for _ in 0..4 {
            match self.inner.events.prune(before, PRUNE_BATCH).await {
                Ok(0) => break,
                Ok(n) => removed += n,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot remove expired events");
                    break;
                }
            }
        }
        removed
    }
}
