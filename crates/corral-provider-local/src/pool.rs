//! The threads commands run on: their own, never tokio's blocking pool.
//!
//! A command holds its thread for as long as it runs (up to its deadline, minutes), and the
//! thread must live until the command ends (the supervisor's parent-death signal is tied to
//! the thread that forked it). On tokio's blocking pool, slow commands would take the threads
//! the database layer (SQLite) and every other `spawn_blocking` need, and stall them all. So
//! each command gets an OS thread of its own, and at most `size` such threads exist at once:
//! a semaphore of `size` permits, each held by its thread until the thread's work is done
//! (also when the caller has gone away, since the command runs until it is killed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A bounded set of dedicated threads for commands.
#[derive(Debug)]
pub(crate) struct ExecPool {
    permits: Arc<Semaphore>,
    size: usize,
}

/// No thread became free in time.
#[derive(Debug)]
pub(crate) struct Busy {
    /// The pool's size.
    pub(crate) size: usize,
    /// How long the call waited.
    pub(crate) waited: Duration,
}

/// A thread reserved for one command; given back if dropped unused.
#[derive(Debug)]
pub(crate) struct Reserved(OwnedSemaphorePermit);

impl ExecPool {
    /// At most `size` command threads at once (at least 1; at most what a semaphore counts).
    pub(crate) fn new(size: usize) -> Self {
        let size = size.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(size)),
            size,
        }
    }

    /// Reserves a thread, waiting at most `wait` for one to become free.
    pub(crate) async fn reserve(&self, wait: Duration) -> Result<Reserved, Busy> {
        let started = Instant::now();
        let busy = |waited| Busy {
            size: self.size,
            waited,
        };
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Ok(Reserved(permit));
        }
        match tokio::time::timeout(wait, self.permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Reserved(permit)),
            // The semaphore is never closed; and a timeout is what it says.
            Ok(Err(_)) | Err(_) => Err(busy(started.elapsed())),
        }
    }

    /// Threads running commands now.
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.size - self.permits.available_permits()
    }
}

impl Reserved {
    /// Runs `f` on a new OS thread that holds the reservation until `f` returns (or panics),
    /// and waits for its answer. Dropping the returned future does not stop `f`: the caller
    /// stops it by other means (the command's cancel pipe).
    pub(crate) async fn run<T: Send + 'static>(
        self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let permit = self.0;
        std::thread::Builder::new()
            .name("corral-local-exec".into())
            .spawn(move || {
                // Declared in this order so that, should `f` panic, the place is given back
                // before the caller hears of it (locals drop in reverse order).
                let tx = tx;
                let permit = permit;
                let out = f();
                // The thread is as good as gone: let the next command have its place before
                // the answer is even read.
                drop(permit);
                // The caller may have gone away: nobody to tell.
                let _ = tx.send(out);
            })
            .map_err(|e| format!("cannot start a thread for the command: {e}"))?;
        rx.await
            .map_err(|_| "the thread running the command failed".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_pool_refuses_after_the_wait_and_a_finished_thread_frees_its_place() {
        let pool = ExecPool::new(1);
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let held = pool.reserve(Duration::ZERO).await.unwrap();
        let running = tokio::spawn(held.run(move || wait.recv().is_ok()));
        assert_eq!(pool.in_use(), 1);
        let busy = pool.reserve(Duration::from_millis(50)).await.unwrap_err();
        assert_eq!(busy.size, 1);
        assert!(busy.waited >= Duration::from_millis(50));
        go.send(()).unwrap();
        assert!(running.await.unwrap().unwrap());
        let again = pool.reserve(Duration::from_secs(10)).await.unwrap();
        assert_eq!(again.run(|| 7).await.unwrap(), 7);
        assert_eq!(pool.in_use(), 0);
    }

    #[tokio::test]
    async fn a_panicking_command_thread_gives_its_place_back() {
        let pool = ExecPool::new(1);
        let r = pool.reserve(Duration::ZERO).await.unwrap();
        let out: Result<(), String> = r.run(|| panic!("boom")).await;
        assert!(out.is_err());
        assert_eq!(pool.in_use(), 0);
    }
}
