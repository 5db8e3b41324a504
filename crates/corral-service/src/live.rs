//! What readers on this replica learn of commands as it happens, with no timer on the path.
//!
//! - A command captured here has a [`Feed`]: each batch of events the capture journaled (and
//!   at the end the exit) is broadcast to its followers, who read the journal only to catch
//!   up or to resume; and a progress number (the journal's next sequence number, bumped at
//!   the end too) wakes `?wait` callers.
//! - A command captured on another replica is waited for through [`Hub::wake`], which the
//!   PostgreSQL notification listener calls as other replicas commit; polling is only the
//!   fallback when no listener runs (SQLite, whose single process captures everything, or a
//!   listener being re-connected).
//!
//! A waiter subscribes *before* it reads the record it waits on, so no change after that read
//! can be missed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use corral_domain::{CommandId, OutputEvent};
use corral_registry::{CommandRecord, JournalEvent};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

/// Batches a follower may fall behind by before it catches up from the journal instead.
const FEED_DEPTH: usize = 64;
/// How often a waiter looks again for a command captured elsewhere while no notification
/// listener runs.
const POLL: Duration = Duration::from_millis(250);
/// The same while a listener runs: only for a notification lost while it re-connected.
const POLL_LISTENING: Duration = Duration::from_secs(2);

/// A batch of events as the capture journaled them, in sequence order.
pub(crate) type Batch = Arc<[OutputEvent]>;

/// One captured command's live channels.
pub(crate) struct Feed {
    progress: watch::Sender<u64>,
    events: broadcast::Sender<Batch>,
}

impl Feed {
    /// Whether anyone follows the feed (else its events need not be built).
    pub(crate) fn followed(&self) -> bool {
        self.events.receiver_count() > 0
    }

    /// Tells followers and waiters what was just journaled (`events` may be empty: an end, a
    /// start); `next_seq` is the journal's next sequence number after it.
    pub(crate) fn publish(&self, next_seq: u64, events: Vec<OutputEvent>) {
        if !events.is_empty() && self.events.receiver_count() > 0 {
            // No follower left is not an error: nobody is reading.
            let _ = self.events.send(events.into());
        }
        self.progress.send_modify(|n| *n = next_seq);
    }
}

/// The live channels of every command this process captures, and the waiters on commands it
/// does not.
#[derive(Default)]
pub(crate) struct Hub {
    feeds: Mutex<HashMap<CommandId, Arc<Feed>>>,
    remote: Mutex<HashMap<CommandId, watch::Sender<u64>>>,
    listening: AtomicBool,
}

impl Hub {
    /// Opens the feed of a capture starting here (its journal at `next_seq`).
    pub(crate) fn open(&self, id: CommandId, next_seq: u64) -> Arc<Feed> {
        let feed = Arc::new(Feed {
            progress: watch::channel(next_seq).0,
            events: broadcast::channel(FEED_DEPTH).0,
        });
        lock(&self.feeds).insert(id, feed.clone());
        // Whoever waited on it as a remote command looks again.
        self.wake(id);
        feed
    }

    /// Closes a capture's feed: its followers see the channel end, its waiters wake.
    pub(crate) fn close(&self, id: CommandId, feed: &Arc<Feed>) {
        let mut feeds = lock(&self.feeds);
        if feeds.get(&id).is_some_and(|f| Arc::ptr_eq(f, feed)) {
            feeds.remove(&id);
        }
        drop(feeds);
        feed.progress.send_modify(|_| {});
        self.wake(id);
    }

    /// Whether this process captures `id`.
    pub(crate) fn captures(&self, id: CommandId) -> bool {
        lock(&self.feeds).contains_key(&id)
    }

    /// How many captures this process runs.
    pub(crate) fn count(&self) -> usize {
        lock(&self.feeds).len()
    }

    /// The commands this process captures.
    pub(crate) fn ids(&self) -> Vec<CommandId> {
        lock(&self.feeds).keys().copied().collect()
    }

    /// The batches `id`'s capture journals from now on, if this process captures it.
    pub(crate) fn follow(&self, id: CommandId) -> Option<broadcast::Receiver<Batch>> {
        lock(&self.feeds).get(&id).map(|f| f.events.subscribe())
    }

    /// A waiter on `id`, woken by every change from now on.
    pub(crate) fn waiter(self: &Arc<Self>, id: CommandId) -> Waiter {
        let rx = match lock(&self.feeds).get(&id) {
            Some(feed) => Watch::Local(feed.progress.subscribe()),
            None => Watch::Remote(
                lock(&self.remote)
                    .entry(id)
                    .or_insert_with(|| watch::channel(0).0)
                    .subscribe(),
            ),
        };
        Waiter {
            hub: self.clone(),
            id,
            rx: Some(rx),
        }
    }

    /// Wakes the waiters on `id` that wait for another replica (a notification arrived).
    pub(crate) fn wake(&self, id: CommandId) {
        if let Some(tx) = lock(&self.remote).get(&id) {
            tx.send_modify(|n| *n += 1);
        }
    }

    /// Whether notifications from other replicas arrive (the listener is connected).
    pub(crate) fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::Relaxed);
    }

    fn forget_remote(&self, id: CommandId) {
        let mut remote = lock(&self.remote);
        // The waiter being dropped holds the last receiver.
        if remote.get(&id).is_some_and(|tx| tx.receiver_count() <= 1) {
            remote.remove(&id);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

enum Watch {
    Local(watch::Receiver<u64>),
    Remote(watch::Receiver<u64>),
}

/// Waits for changes of one command; made before the record it waits on is read.
pub(crate) struct Waiter {
    hub: Arc<Hub>,
    id: CommandId,
    rx: Option<Watch>,
}

impl Waiter {
    /// Waits for the next change, at most until `until`: `true` when the caller should read
    /// the record again (something changed, the capture ended, or a fallback poll is due),
    /// `false` at `until`.
    pub(crate) async fn changed(&mut self, until: Instant) -> bool {
        let now = Instant::now();
        if now >= until {
            return false;
        }
        match &mut self.rx {
            Some(Watch::Local(rx)) => tokio::select! {
                r = rx.changed() => {
                    if r.is_err() {
                        // The capture ended (or moved to another replica): look again, and
                        // wait the next time as for a command captured elsewhere.
                        self.resubscribe();
                    }
                    true
                }
                () = tokio::time::sleep_until(until) => false,
            },
            Some(Watch::Remote(rx)) => {
                let poll = if self.hub.listening.load(Ordering::Relaxed) {
                    POLL_LISTENING
                } else {
                    POLL
                };
                let due = (now + poll).min(until);
                tokio::select! {
                    _ = rx.changed() => true,
                    () = tokio::time::sleep_until(due) => due < until,
                }
            }
            None => {
                self.resubscribe();
                true
            }
        }
    }

    fn resubscribe(&mut self) {
        self.drop_rx();
        let fresh = self.hub.waiter(self.id);
        self.rx = fresh.into_rx();
    }

    fn into_rx(mut self) -> Option<Watch> {
        self.rx.take()
    }

    fn drop_rx(&mut self) {
        if let Some(Watch::Remote(_)) = &self.rx {
            self.hub.forget_remote(self.id);
        }
        self.rx = None;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.drop_rx();
    }
}

/// Turns journal events into wire events, merging runs of lost or dropped bytes of one
/// stream into one `gap` (with the sequence number of the last, so resuming after it is
/// exact).
pub(crate) fn wire_events(events: Vec<JournalEvent>) -> Vec<OutputEvent> {
    let mut out: Vec<OutputEvent> = Vec::with_capacity(events.len());
    for e in events {
        match e.data {
            Some(bytes) => out.push(OutputEvent::output(e.seq, e.stream, e.offset, &bytes)),
            None => {
                if let Some(OutputEvent::Gap {
                    seq,
                    stream,
                    offset,
                    length,
                }) = out.last_mut()
                    && *stream == e.stream
                    && length.is_some_and(|l| *offset + l == e.offset)
                {
                    *seq = e.seq;
                    *length = match (*length, e.length) {
                        (Some(a), Some(b)) => Some(a + b),
                        _ => None,
                    };
                    continue;
                }
                out.push(OutputEvent::Gap {
                    seq: e.seq,
                    stream: e.stream,
                    offset: e.offset,
                    length: e.length,
                });
            }
        }
    }
    out
}

/// The exit event of an ended command.
pub(crate) fn exit_event(rec: &CommandRecord) -> OutputEvent {
    OutputEvent::Exit {
        seq: rec.next_seq,
        state: rec.state,
        exit_code: rec.exit_code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_domain::OutputStream;

    fn ev(
        seq: u64,
        stream: OutputStream,
        offset: u64,
        data: Option<&[u8]>,
        length: Option<u64>,
    ) -> JournalEvent {
        JournalEvent {
            seq,
            stream,
            offset,
            data: data.map(<[u8]>::to_vec),
            length,
        }
    }

    #[test]
    fn runs_of_dropped_bytes_read_as_one_gap_per_stream_ending_at_the_last_sequence() {
        use OutputStream::{Stderr, Stdout};
        let events = wire_events(vec![
            ev(1, Stdout, 0, None, Some(10)),
            ev(2, Stdout, 10, None, Some(5)),
            ev(3, Stderr, 0, None, Some(4)),
            ev(4, Stdout, 15, None, Some(1)),
            ev(5, Stdout, 16, Some(b"ok"), Some(2)),
            ev(6, Stdout, 18, None, None),
            ev(7, Stdout, 18, Some(b"!"), Some(1)),
        ]);
        let kinds: Vec<(u64, &str)> = events.iter().map(|e| (e.seq(), e.name())).collect();
        assert_eq!(
            kinds,
            [
                (2, "gap"),
                (3, "gap"),
                (4, "gap"),
                (5, "stdout"),
                (6, "gap"),
                (7, "stdout")
            ]
        );
        assert_eq!(
            events[0],
            OutputEvent::Gap {
                seq: 2,
                stream: Stdout,
                offset: 0,
                length: Some(15)
            }
        );
        assert_eq!(
            events[4],
            OutputEvent::Gap {
                seq: 6,
                stream: Stdout,
                offset: 18,
                length: None
            }
        );
    }

    fn out(seq: u64) -> OutputEvent {
        OutputEvent::output(seq, OutputStream::Stdout, seq, b"x")
    }

    // Under a paused clock a timer would move time on; a wake-up by the change itself does not.
    #[tokio::test(start_paused = true)]
    async fn a_waiter_made_before_a_change_wakes_at_it_not_at_a_timer() {
        let hub = Arc::new(Hub::default());
        let id = CommandId::new();
        let feed = hub.open(id, 1);
        let mut waiter = hub.waiter(id);
        let t0 = Instant::now();
        // The change lands before the wait starts (the race the subscription order closes).
        feed.publish(2, vec![out(1)]);
        assert!(waiter.changed(t0 + Duration::from_secs(60)).await);
        assert_eq!(Instant::now(), t0, "woken by the change, not a timer");
        // An end (the feed closed) wakes it too, and so does each later change.
        let waiting = tokio::spawn(async move {
            let woke = waiter.changed(t0 + Duration::from_secs(60)).await;
            (woke, Instant::now())
        });
        tokio::task::yield_now().await;
        hub.close(id, &feed);
        assert_eq!(waiting.await.unwrap(), (true, t0));
        // Nothing changing: the wait ends at its deadline, answering false.
        let mut idle = hub.waiter(CommandId::new());
        hub.set_listening(true);
        assert!(!idle.changed(t0 + Duration::from_secs(1)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_on_a_command_captured_elsewhere_wakes_at_a_notification() {
        let hub = Arc::new(Hub::default());
        hub.set_listening(true);
        let id = CommandId::new();
        let mut waiter = hub.waiter(id);
        let t0 = Instant::now();
        hub.wake(id);
        assert!(waiter.changed(t0 + Duration::from_secs(60)).await);
        assert_eq!(Instant::now(), t0);
        // Without a notification it looks again only at the listening fallback, bounded.
        assert!(waiter.changed(t0 + Duration::from_secs(60)).await);
        assert_eq!(Instant::now(), t0 + POLL_LISTENING);
        // A capture starting here wakes it as well (it then follows the feed).
        let woke = tokio::spawn(async move { waiter.changed(t0 + Duration::from_secs(60)).await });
        tokio::task::yield_now().await;
        let _feed = hub.open(id, 1);
        assert!(woke.await.unwrap());
        // The last waiter gone, nothing is kept for it.
        assert!(lock(&hub.remote).is_empty());
    }

    #[tokio::test]
    async fn followers_get_each_batch_once_and_a_lagging_one_is_told() {
        let hub = Arc::new(Hub::default());
        let id = CommandId::new();
        let feed = hub.open(id, 1);
        assert!(!feed.followed());
        let mut rx = hub.follow(id).expect("captured here");
        assert!(feed.followed());
        feed.publish(2, vec![out(1)]);
        assert_eq!(rx.recv().await.unwrap().as_ref(), [out(1)]);
        for seq in 2..(2 + FEED_DEPTH as u64 + 1) {
            feed.publish(seq + 1, vec![out(seq)]);
        }
        assert!(matches!(
            rx.recv().await,
            Err(broadcast::error::RecvError::Lagged(_))
        ));
        hub.close(id, &feed);
        drop(feed);
        assert!(hub.follow(id).is_none());
        assert_eq!(hub.count(), 0);
    }
}
