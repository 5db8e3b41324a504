//! Crash failpoints for the crash tests (feature `failpoints`, off by default and never in a
//! release build of the server: only `bins/corral`'s dev-dependencies turn it on, so only the
//! binary cargo builds for its tests carries them).
//!
//! `fail_point!("create.after_claim")` marks a step boundary. When the process was started with
//! `CORRAL_FAILPOINT` naming that point (a comma-separated list may name several), reaching it
//! writes one line to stderr and aborts the process on the spot: no destructor runs, no task
//! gets another poll, nothing buffered is flushed (the equivalent of `kill -9` at that line).
//! Without the feature the macro expands to nothing.
//!
//! The points, in the order a create reaches them:
//!
//! | name | state left behind |
//! |---|---|
//! | `create.after_claim` | key claimed (in progress), no operation attached |
//! | `create.after_attach` | operation id attached to the key, no registry record |
//! | `create.after_pending` | registry record `pending`, provider not called |
//! | `create.after_provider` | the provider created the sandbox and answered; nothing recorded |
//! | `create.after_native_id` | record `created` with its native id; key still in progress |
//! | `create.after_complete` | key completed with the response; not answered yet |
//! | `create.before_response` | everything stored; the request task is about to answer |
//! | `reconcile.before_adopt` | a lookup by operation id found the sandbox; not adopted yet |
//!
//! A crash while the provider holds the create (sent, answer not read) is not a line of this
//! crate: the crash test kills the process from outside while the fake provider holds the
//! answer back.

/// The names a comma-separated environment variable arms.
#[cfg(feature = "failpoints")]
fn armed(var: &str) -> Vec<String> {
    std::env::var(var)
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect())
        .unwrap_or_default()
}

/// Aborts the process if `CORRAL_FAILPOINT` names `name` (see the module docs).
#[cfg(feature = "failpoints")]
pub(crate) fn hit(name: &str) {
    static ARMED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    if ARMED
        .get_or_init(|| armed("CORRAL_FAILPOINT"))
        .iter()
        .any(|a| a == name)
    {
        // Unbuffered: the line is written before the abort, so a test can tell this crash
        // from any other.
        eprintln!("corral: failpoint {name} reached: aborting");
        std::process::abort();
    }
}

/// Panics if `CORRAL_PANICPOINT` names `name`: how the panic-isolation tests make one handler
/// of each front door panic (`api.get_sandbox`, `e2b.get_sandbox`, `console.sign_in`,
/// `mcp.call`). Nothing without the `failpoints` feature.
#[inline]
pub fn panic_point(name: &str) {
    #[cfg(feature = "failpoints")]
    {
        static ARMED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        if ARMED
            .get_or_init(|| armed("CORRAL_PANICPOINT"))
            .iter()
            .any(|a| a == name)
        {
            panic!("panic point {name} reached");
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// Marks a crash point (see [`crate::failpoint`]); nothing without the `failpoints` feature.
macro_rules! fail_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        $crate::failpoint::hit($name);
    };
}

pub(crate) use fail_point;
