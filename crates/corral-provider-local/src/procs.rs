//! Host processes, read from `/proc`: the processes of a sandbox's host ids (which must all
//! be gone before the ids are given to another sandbox).

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

/// Pids of the processes that hold one of `ids` in any of their uids and whose root directory is on
/// `root`'s filesystem (its own image: the same device) or is `root` itself (no image). The
/// root check matters because two sandboxes roots on one host pick their uids independently.
fn of_sandbox(ids: &std::ops::Range<u32>, root: (u64, u64), own_device: bool) -> Vec<i32> {
    all()
        .into_iter()
        .filter(|(_, _, uids)| uids.iter().any(|u| ids.contains(u)))
        .filter(|(pid, _, _)| {
            rustix::fs::stat(format!("/proc/{pid}/root"))
                .is_ok_and(|st| st.st_dev == root.0 && (own_device || st.st_ino == root.1))
        })
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Every effective uid some process runs as: the owner of its `/proc/<pid>` (one `stat` per
/// process, no parsing). A sandbox's processes can take no uid outside its range, so a
/// process holding one of its ids in any way runs as one of them.
pub(crate) fn uids_in_use() -> std::collections::BTreeSet<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = fs::read_dir("/proc") else {
        return Default::default();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .as_encoded_bytes()
                .first()
                .is_some_and(u8::is_ascii_digit)
        })
        .filter_map(|e| e.metadata().ok().map(|m| m.uid()))
        .collect()
}

/// Kills every process of the sandbox whose root is `fs_root` and host uids `ids`, and waits until
/// none is left (zombies included: they count against the uid's process limit until
/// reaped). `Err` with the pids still there if that takes longer than `patience`. A root
/// that is gone has no processes left to kill.
pub(crate) fn kill_sandbox(
    ids: &std::ops::Range<u32>,
    fs_root: &Path,
    patience: Duration,
) -> Result<(), Vec<i32>> {
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
        let left = of_sandbox(ids, root, own_device);
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
