//! The threads commands are watched from: their own, never tokio's blocking pool.
//!
//! A command holds its thread for as long as it runs (up to its deadline, minutes: the
//! thread reads its output and waits for its exit). On tokio's blocking pool, slow commands
//! would take the threads the database layer (SQLite) and every other `spawn_blocking` need,
//! and stall them all. So each command gets an OS thread of the pool's own, and at most
//! `size` commands hold one at once: a semaphore of `size` permits, each held until the
//! command's work is done (also when the caller has gone away, since the command runs until
//! it is killed). Threads are kept once started and reused (starting one per command cost
//! more than the rest of a short command's path on a loaded machine): a job goes to an idle
//! thread if there is one, else a thread is started for it, so there are never more threads
//! than jobs ever ran at once (at most `size`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Work for a pool thread.
type Job = Box<dyn FnOnce() + Send + 'static>;

/// The pool's threads: idle ones wait on a shared queue.
struct Workers {
    queue: Mutex<std::sync::mpsc::Sender<Job>>,
    jobs: Arc<Mutex<std::sync::mpsc::Receiver<Job>>>,
    /// Threads waiting for work that no job has claimed.
    idle: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("idle", &self.idle.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A bounded set of dedicated threads for commands.
#[derive(Debug)]
pub(crate) struct ExecPool {
    permits: Arc<Semaphore>,
    size: usize,
    workers: Arc<Workers>,
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
pub(crate) struct Reserved(OwnedSemaphorePermit, Arc<Workers>);

impl ExecPool {
    /// At most `size` command threads at once (at least 1; at most what a semaphore counts).
    pub(crate) fn new(size: usize) -> Self {
        let size = size.clamp(1, Semaphore::MAX_PERMITS);
        let (queue, jobs) = std::sync::mpsc::channel();
        Self {
            permits: Arc::new(Semaphore::new(size)),
            size,
            workers: Arc::new(Workers {
                queue: Mutex::new(queue),
                jobs: Arc::new(Mutex::new(jobs)),
                idle: Arc::new(AtomicUsize::new(0)),
            }),
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
            return Ok(Reserved(permit, self.workers.clone()));
        }
        match tokio::time::timeout(wait, self.permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Reserved(permit, self.workers.clone())),
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
    /// Runs `f` on a pool thread that holds the reservation until `f` returns (or panics),
    /// and waits for its answer. Dropping the returned future does not stop `f`: the caller
    /// stops it by other means (the command's cancel pipe).
    pub(crate) async fn run<T: Send + 'static>(
        self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let Self(permit, workers) = self;
        let job: Job = Box::new(move || {
            // Declared in this order so that, should `f` panic, the place is given back
            // before the caller hears of it (locals drop in reverse order).
            let tx = tx;
            let permit = permit;
            let out = f();
            // The work is as good as done: let the next command have its place before the
            // answer is even read.
            drop(permit);
            // The caller may have gone away: nobody to tell.
            let _ = tx.send(out);
        });
        // An idle thread is claimed (counted out of the idle ones) before the job is queued
        // for it, so two jobs never wait for one thread; with none idle, a thread is started
        // with the job in hand.
        let claimed = workers
            .idle
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if claimed {
            workers
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .send(job)
                .map_err(|_| "the command threads are gone".to_owned())?;
        } else {
            let jobs = workers.jobs.clone();
            let idle = workers.idle.clone();
            std::thread::Builder::new()
                .name("corral-local-exec".into())
                .spawn(move || work(job, &jobs, &idle))
                .map_err(|e| format!("cannot start a thread for the command: {e}"))?;
        }
        rx.await
            .map_err(|_| "the thread running the command failed".to_owned())
    }
}

/// A pool thread: runs `first`, then, idle, takes work from the queue until the pool is
/// gone. A job that panics ends its thread (it is never counted idle again).
fn work(first: Job, jobs: &Mutex<std::sync::mpsc::Receiver<Job>>, idle: &AtomicUsize) {
    first();
    loop {
        idle.fetch_add(1, Ordering::SeqCst);
        let job = jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .recv();
        // The claimer counted this thread out of the idle ones.
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_jobs_never_wait_for_one_idle_thread() {
        let pool = ExecPool::new(4);
        // One thread, idle once its job is done.
        let first = pool.reserve(Duration::ZERO).await.unwrap();
        assert_eq!(first.run(|| 1).await.unwrap(), 1);
        // Two jobs that can only finish together: run one after the other, they never would.
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let (a, b) = (barrier.clone(), barrier);
        let (ra, rb) = (
            pool.reserve(Duration::ZERO).await.unwrap(),
            pool.reserve(Duration::ZERO).await.unwrap(),
        );
        let both = async { tokio::join!(ra.run(move || a.wait()), rb.run(move || b.wait())) };
        let (x, y) = tokio::time::timeout(Duration::from_secs(10), both)
            .await
            .expect("the second job waited for the first one's thread");
        assert!(x.is_ok() && y.is_ok());
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
