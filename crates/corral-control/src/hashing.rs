//! Password hashing on a small pool of threads of its own.
//!
//! An argon2id hash or verification with OWASP's parameters takes 19 MiB and tens of
//! milliseconds of CPU. Run on tokio's blocking pool — up to 512 threads, shared with every
//! SQLite call — a burst of sign-ins ran hundreds at once: the server's memory grew by
//! gigabytes, and database checkouts timed out behind them. Here at most
//! [`HashingConfig::threads`] run at once, so their memory is bounded by `threads` times the
//! hash's; a request waits at most [`HashingConfig::queue_wait`] for a thread, and at most
//! [`HashingConfig::max_waiting`] wait at once; past either it is refused with
//! `rate_limited` (`Retry-After: 1`) before any work.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use argon2::password_hash::{self, Output, ParamsString, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use secrecy::{ExposeSecret as _, SecretString};
use subtle::ConstantTimeEq as _;
use tokio::sync::{Semaphore, oneshot};

use crate::error::{ControlError, Result};

/// The most memory a stored hash may ask for, in KiB (ours ask for 19 456): a hash asking
/// for more is treated as not matching rather than allowed to take the pool's memory bound.
const MAX_MEMORY_KIB: u32 = 64 * 1024;

/// `Retry-After` of a refusal by a busy pool: a thread frees within a hash's time.
const BUSY_RETRY_AFTER: u64 = 1;

/// How password hashing is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashingConfig {
    /// Threads hashing at once (each holds one hash's memory, 19 MiB, while it works).
    pub threads: usize,
    /// The longest a request waits for a thread before `rate_limited`.
    pub queue_wait: Duration,
    /// Requests waiting at once at most; more are refused at once.
    pub max_waiting: usize,
}

impl Default for HashingConfig {
    /// Two threads (38 MiB of hashing memory at most; about 20–40 verifications a second on
    /// one core each), a wait of at most 2 s, at most 64 waiting.
    fn default() -> Self {
        Self {
            threads: 2,
            queue_wait: Duration::from_secs(2),
            max_waiting: 64,
        }
    }
}

/// What the pool did since it started (for tests and metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HashingStats {
    /// Passwords verified against a stored hash (or the decoy).
    pub verifications: u64,
    /// Passwords hashed (new passwords, and the decoy once).
    pub hashes: u64,
    /// Requests refused because the pool was busy.
    pub refused: u64,
    /// The most jobs that ran at once.
    pub peak_running: u64,
}

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Debug, Default)]
struct Counters {
    verifications: AtomicU64,
    hashes: AtomicU64,
    refused: AtomicU64,
    running: AtomicU64,
    peak_running: AtomicU64,
}

/// The pool: `threads` workers started on first use, a semaphore of as many permits for
/// admission. Workers end when the pool is dropped.
#[derive(Debug)]
pub(crate) struct PasswordPool {
    config: HashingConfig,
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
    jobs: OnceLock<Mutex<mpsc::Sender<Job>>>,
    counters: Arc<Counters>,
}

/// Gives a waiting place back however the wait ends (a caller that went away included).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PasswordPool {
    pub(crate) fn new(config: HashingConfig) -> Self {
        let threads = config.threads.max(1);
        Self {
            config: HashingConfig { threads, ..config },
            permits: Arc::new(Semaphore::new(threads)),
            waiting: AtomicUsize::new(0),
            jobs: OnceLock::new(),
            counters: Arc::new(Counters::default()),
        }
    }

    pub(crate) fn stats(&self) -> HashingStats {
        let c = &self.counters;
        HashingStats {
            verifications: c.verifications.load(Ordering::SeqCst),
            hashes: c.hashes.load(Ordering::SeqCst),
            refused: c.refused.load(Ordering::SeqCst),
            peak_running: c.peak_running.load(Ordering::SeqCst),
        }
    }

    fn busy(&self) -> ControlError {
        self.counters.refused.fetch_add(1, Ordering::SeqCst);
        ControlError::Throttled {
            message: format!("password checks are busy; retry after {BUSY_RETRY_AFTER} second"),
            retry_after: BUSY_RETRY_AFTER,
        }
    }

    /// The job queue, starting the workers on first use.
    fn sender(&self) -> mpsc::Sender<Job> {
        let jobs = self.jobs.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..self.config.threads {
                let rx = rx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("corral-password-{i}"))
                    .spawn(move || {
                        loop {
                            // The lock is held only to take one job.
                            let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                            let Ok(job) = job else { return };
                            // A panic ends the job (its caller sees an internal error), not
                            // the worker.
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        }
                    });
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot start a password hashing thread");
                }
            }
            Mutex::new(tx)
        });
        jobs.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Runs `work` on a pool thread: waits for one at most `queue_wait`, else `rate_limited`.
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Counters) -> T + Send + 'static,
    ) -> Result<T> {
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.config.max_waiting {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(self.busy());
        }
        let waiting = Waiting(&self.waiting);
        let permit =
            tokio::time::timeout(self.config.queue_wait, self.permits.clone().acquire_owned())
                .await;
        drop(waiting);
        let Ok(Ok(permit)) = permit else {
            return Err(self.busy());
        };
        let (tx, rx) = oneshot::channel();
        let counters = self.counters.clone();
        let job: Job = Box::new(move || {
            // The permit is held until the work is done, even if the caller went away: the
            // thread is busy until then.
            let _permit = permit;
            let running = counters.running.fetch_add(1, Ordering::SeqCst) + 1;
            counters.peak_running.fetch_max(running, Ordering::SeqCst);
            let out = work(&counters);
            counters.running.fetch_sub(1, Ordering::SeqCst);
            let _ = tx.send(out);
        });
        self.sender()
            .send(job)
            .map_err(|_| ControlError::internal("the password hashing threads are gone"))?;
        rx.await
            .map_err(|_| ControlError::internal("password hashing failed"))
    }

    /// Whether `password` matches the PHC string `phc`; `None` verifies against a decoy
    /// (same cost, never matches), so an unknown user takes as long as a wrong password.
    pub(crate) async fn verify(&self, password: SecretString, phc: Option<String>) -> Result<bool> {
        self.run(move |counters| {
            let decoy;
            let (phc, real) = match &phc {
                Some(p) => (p.as_str(), true),
                None => {
                    decoy = decoy_hash(counters);
                    (decoy, false)
                }
            };
            counters.verifications.fetch_add(1, Ordering::SeqCst);
            verify_password(password.expose_secret(), phc) && real
        })
        .await
    }

    /// An argon2id PHC string of `password` with a fresh salt.
    pub(crate) async fn hash(&self, password: SecretString) -> Result<String> {
        self.run(move |counters| {
            counters.hashes.fetch_add(1, Ordering::SeqCst);
            hash_password(password.expose_secret())
        })
        .await?
    }
}

/// Blocks (1 KiB each) reserved for every hash's working memory, at least: 33 MiB.
///
/// argon2's own `hash_password_into` allocates its 19 MiB of blocks with a 64-byte
/// alignment. glibc serves such an allocation from the heap once one of that size has been
/// freed (the mmap threshold follows freed sizes up to 32 MiB), and its aligned path cannot
/// reuse the hole the previous one left: measured, every verification kept another 19 MiB
/// resident, up to about 160 MiB per allocator arena (and tokio's blocking pool gave each of
/// hundreds of threads an arena: the gigabytes of the finding). A reservation above 32 MiB
/// is always mapped fresh and unmapped when dropped; only the pages argon2 touches (19 MiB)
/// become resident, and they are returned after each hash.
const RESERVED_BLOCKS: usize = 33 * 1024;

/// The working memory for `blocks` blocks, allocated as [`RESERVED_BLOCKS`] says.
fn work_memory(blocks: usize) -> Vec<Block> {
    let mut memory = Vec::with_capacity(blocks.max(RESERVED_BLOCKS));
    memory.resize(blocks, Block::default());
    memory
}

/// argon2 of `password` and `salt` into `out`, in working memory of its own.
fn compute(argon: &Argon2<'_>, password: &[u8], salt: &[u8], out: &mut [u8]) -> bool {
    let mut memory = work_memory(argon.params().block_count());
    argon
        .hash_password_into_with_memory(password, salt, out, &mut memory[..])
        .is_ok()
}

/// An argon2id PHC string of `password` with a fresh random salt (default parameters:
/// 19 MiB, 2 passes, 1 lane — OWASP's recommendation).
pub(crate) fn hash_password(password: &str) -> Result<String> {
    let failed = |what: &str| ControlError::internal(format!("password hashing failed: {what}"));
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| {
        ControlError::internal(format!("the operating system's random source failed: {e}"))
    })?;
    let salt_string = SaltString::encode_b64(&salt).map_err(|_| failed("salt"))?;
    let argon = Argon2::default();
    let params = argon.params().clone();
    let len = params.output_len().unwrap_or(Params::DEFAULT_OUTPUT_LEN);
    let output = Output::init_with(len, |out| {
        if compute(&argon, password.as_bytes(), &salt, out) {
            Ok(())
        } else {
            Err(password_hash::Error::Crypto)
        }
    })
    .map_err(|_| failed("argon2"))?;
    let phc = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(&params).map_err(|_| failed("parameters"))?,
        salt: Some(salt_string.as_salt()),
        hash: Some(output),
    };
    Ok(phc.to_string())
}

/// Whether `password` matches the PHC string `phc` (false for a malformed one, or one asking
/// for more than [`MAX_MEMORY_KIB`]).
pub(crate) fn verify_password(password: &str, phc: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    let (Ok(algorithm), Ok(params), Some(expected), Some(salt)) = (
        Algorithm::try_from(parsed.algorithm),
        Params::try_from(&parsed),
        parsed.hash,
        parsed.salt,
    ) else {
        return false;
    };
    if params.m_cost() > MAX_MEMORY_KIB {
        tracing::warn!("a stored password hash asks for more memory than the pool allows");
        return false;
    }
    let version = match parsed.version.map(Version::try_from).transpose() {
        Ok(v) => v.unwrap_or_default(),
        Err(_) => return false,
    };
    let mut salt_buf = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_buf) else {
        return false;
    };
    let argon = Argon2::new(algorithm, version, params);
    let mut out = vec![0u8; expected.len()];
    compute(&argon, password.as_bytes(), salt, &mut out)
        && bool::from(out.as_slice().ct_eq(expected.as_bytes()))
}

/// The decoy hash, made once (on a pool thread, counted as a hash).
fn decoy_hash(counters: &Counters) -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| {
        counters.hashes.fetch_add(1, Ordering::SeqCst);
        hash_password("corral decoy password").unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_hash_to_argon2id_and_verify() {
        let phc = hash_password("correct horse battery").unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(verify_password("correct horse battery", &phc));
        assert!(!verify_password("correct horse batterY", &phc));
        assert!(!verify_password(
            "correct horse battery",
            "not a phc string"
        ));
        assert_ne!(
            phc,
            hash_password("correct horse battery").unwrap(),
            "salted"
        );
        // A hash asking for 1 GiB is refused, not computed.
        let greedy = phc.replace("m=19456", "m=1048576");
        assert!(!verify_password("correct horse battery", &greedy));
    }

    #[test]
    fn hashes_are_those_argon2_itself_makes_and_checks() {
        use argon2::password_hash::{PasswordHasher as _, PasswordVerifier as _};
        let ours = hash_password("correct horse battery").unwrap();
        let parsed = PasswordHash::new(&ours).unwrap();
        assert!(
            Argon2::default()
                .verify_password(b"correct horse battery", &parsed)
                .is_ok()
        );
        let salt = SaltString::encode_b64(b"0123456789abcdef").unwrap();
        let theirs = Argon2::default()
            .hash_password(b"correct horse battery", &salt)
            .unwrap()
            .to_string();
        assert!(verify_password("correct horse battery", &theirs));
        assert!(!verify_password("correct horse batterY", &theirs));
    }

    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// With argon2's own allocation each verification left 19 MiB more resident (about
    /// 160 MiB per thread after eight); with working memory mapped per hash, none stays.
    #[test]
    fn verifications_leave_no_memory_behind() {
        let phc = hash_password("correct horse battery").unwrap();
        verify_password("warm up", &phc);
        let before = resident_kib();
        for _ in 0..8 {
            assert!(!verify_password("wrong", &phc));
        }
        let grew = resident_kib().saturating_sub(before);
        assert!(
            grew < 8 * 1024,
            "resident memory grew by {grew} KiB over 8 verifications"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_threads_run_and_a_full_queue_refuses_after_its_wait() {
        let pool = Arc::new(PasswordPool::new(HashingConfig {
            threads: 2,
            queue_wait: Duration::from_millis(100),
            max_waiting: 3,
        }));
        let gate = Arc::new(std::sync::Barrier::new(3));
        // Two jobs hold both threads until the test lets them go.
        let mut held = Vec::new();
        for _ in 0..2 {
            let (pool, gate) = (pool.clone(), gate.clone());
            held.push(tokio::spawn(async move {
                pool.run(move |_| {
                    gate.wait();
                })
                .await
            }));
        }
        while pool.stats().peak_running < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Three wait and are refused after 100 ms; a fourth is refused at once.
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move { pool.run(|_| ()).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let started = std::time::Instant::now();
        let at_once = pool.run(|_| ()).await;
        assert!(matches!(
            at_once,
            Err(ControlError::Throttled { retry_after: 1, .. })
        ));
        assert!(started.elapsed() < Duration::from_millis(50));
        for w in waiters {
            assert!(matches!(
                w.await.unwrap(),
                Err(ControlError::Throttled { .. })
            ));
        }
        gate.wait();
        for h in held {
            h.await.unwrap().unwrap();
        }
        assert_eq!(pool.stats().peak_running, 2);
        assert_eq!(pool.stats().refused, 4);
        // Free again.
        pool.run(|_| ()).await.unwrap();
    }
}
