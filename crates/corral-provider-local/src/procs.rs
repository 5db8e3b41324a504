//! Host processes, read from `/proc`: the children of a supervisor, and the processes of a
//! sandbox's uid (which must all be gone before the uid is given to another sandbox).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// Every process on the host: (pid, parent pid, uids real/effective/saved/fs).
fn all() -> Vec<(i32, i32, [u32; 4])> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::trim)
            };
            let ppid = field("PPid:")?.parse().ok()?;
            let mut uids = [0u32; 4];
            let mut parts = field("Uid:")?.split_whitespace();
            for u in &mut uids {
                *u = parts.next()?.parse().ok()?;
            }
            Some((pid, ppid, uids))
        })
        .collect()
}

/// The parent pid of `pid`, from `/proc/<pid>/stat` (after the command name, which may hold
/// spaces and parentheses: hence the last `)`).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Host pids of the children of `parent`. A child forked just now usually has one of the
/// next few pids, so those are looked at first; otherwise every process is.
pub(crate) fn children_of(parent: u32) -> Vec<u32> {
    let Ok(parent) = i32::try_from(parent) else {
        return Vec::new();
    };
    let near: Vec<u32> = (parent.saturating_add(1)..parent.saturating_add(16))
        .filter(|pid| parent_of(*pid) == Some(parent))
        .filter_map(|pid| u32::try_from(pid).ok())
        .collect();
    if !near.is_empty() {
        return near;
    }
    all()
        .into_iter()
        .filter(|(_, ppid, _)| *ppid == parent)
        .filter_map(|(pid, _, _)| u32::try_from(pid).ok())
        .collect()
}

/// Pids of the processes that hold `uid` in any of their ids and whose root directory is on
/// `root`'s filesystem (its own image: the same device) or is `root` itself (no image). The
/// root check matters because two sandboxes roots on one host pick their uids independently.
fn of_sandbox(uid: u32, root: (u64, u64), own_device: bool) -> Vec<i32> {
    all()
        .into_iter()
        .filter(|(_, _, uids)| uids.contains(&uid))
        .filter(|(pid, _, _)| {
            rustix::fs::stat(format!("/proc/{pid}/root"))
                .is_ok_and(|st| st.st_dev == root.0 && (own_device || st.st_ino == root.1))
        })
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Every uid some process holds (real, effective, saved or filesystem).
pub(crate) fn uids_in_use() -> std::collections::BTreeSet<u32> {
    all().into_iter().flat_map(|(_, _, uids)| uids).collect()
}

/// Kills every process of the sandbox whose root is `fs_root` and uid `uid`, and waits until
/// none is left (zombies included: they count against the uid's process limit until
/// reaped). `Err` with the pids still there if that takes longer than `patience`. A root
/// that is gone has no processes left to kill.
pub(crate) fn kill_sandbox(uid: u32, fs_root: &Path, patience: Duration) -> Result<(), Vec<i32>> {
    let Ok(root) = rustix::fs::stat(fs_root) else {
        return Ok(());
    };
    let own_device = fs_root
        .parent()
        .and_then(|p| rustix::fs::stat(p).ok())
        .is_some_and(|parent| parent.st_dev != root.st_dev);
    let root = (root.st_dev, root.st_ino);
    let started = Instant::now();
    loop {
        let left = of_sandbox(uid, root, own_device);
        if left.is_empty() {
            return Ok(());
        }
        if started.elapsed() > patience {
            return Err(left);
        }
        for pid in left {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
