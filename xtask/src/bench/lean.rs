//! The lean-server figures of the memory section (issue 33): the size of the release binary
//! the bench built and runs, and where an idle server's resident memory is, read from
//! `/proc/<pid>/smaps` (the binary's own mapped pages, other files such as libc, the `brk`
//! heap, and the rest of the anonymous memory: thread stacks, malloc's per-thread arenas and
//! large allocations) with the process's thread count.

use std::path::Path;

use serde_json::{Value, json};

/// Where an idle server's resident memory is, in KiB.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Breakdown {
    /// Pages mapped from the `corral` binary itself (its code and read-only data, and the
    /// written pages of its data segments).
    binary_kib: u64,
    /// Pages mapped from every other file (the C library, the loader, locale data).
    files_kib: u64,
    /// The `brk` heap (`[heap]`): the main thread's malloc arena.
    heap_kib: u64,
    /// Every other anonymous mapping: thread stacks, the other threads' malloc arenas,
    /// allocations malloc serves with `mmap`.
    anonymous_kib: u64,
    /// Threads of the process.
    threads: u64,
}

/// The size in bytes of the binary at `path`.
pub(crate) fn binary_bytes(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// Reads `/proc/<pid>/smaps` and `/proc/<pid>/status` of a running process.
pub(crate) fn breakdown(pid: u32) -> Option<Breakdown> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let mut out = split(&smaps, &exe.to_string_lossy());
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    out.threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Some(out)
}

/// Sums the `Rss:` of each mapping of `smaps` by what it maps (`exe`: the binary's path).
fn split(smaps: &str, exe: &str) -> Breakdown {
    let mut out = Breakdown::default();
    // The mapping the following `Rss:` line belongs to: its path (empty when anonymous).
    let mut path = String::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            // `start-end perms offset dev inode [path]`: the path may hold spaces.
            path = fields.skip(4).collect::<Vec<_>>().join(" ");
            continue;
        }
        if first != "Rss:" {
            continue;
        }
        let kib: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let slot = if path == exe {
            &mut out.binary_kib
        } else if path == "[heap]" {
            &mut out.heap_kib
        } else if path.starts_with('/') {
            &mut out.files_kib
        } else {
            // Unnamed mappings, `[stack]`, `[anon:…]`, `[vdso]`, `[vvar]`.
            &mut out.anonymous_kib
        };
        *slot += kib;
    }
    out
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The section's extra table rows (`| figure | measured | target |`).
pub(crate) fn rows(size: Option<u64>, b: Option<Breakdown>) -> String {
    let mut out = String::new();
    if let Some(bytes) = size {
        out.push_str(&format!(
            "| binary size, `target/release/corral` | {:.1} MiB ({bytes} bytes) | reported |\n",
            bytes as f64 / (1024.0 * 1024.0),
        ));
    }
    if let Some(b) = b {
        out.push_str(&format!(
            "| idle RSS by mapping: the binary's own pages / other files / `[heap]` / other anonymous ({} threads) | {:.1} / {:.1} / {:.1} / {:.1} MiB | |\n",
            b.threads,
            mib(b.binary_kib),
            mib(b.files_kib),
            mib(b.heap_kib),
            mib(b.anonymous_kib),
        ));
    }
    out
}

/// The same figures for the section's JSON.
pub(crate) fn to_json(size: Option<u64>, b: Option<Breakdown>) -> Value {
    json!({
        "binary_bytes": size,
        "idle_rss_kib": b.map(|b| json!({
            "binary": b.binary_kib,
            "files": b.files_kib,
            "heap": b.heap_kib,
            "anonymous": b.anonymous_kib,
            "threads": b.threads,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_rss_is_summed_by_what_each_mapping_maps() {
        let smaps = "\
55d0c0000000-55d0c1000000 r-xp 00000000 fd:00 42 /work/target/release/corral
Size:              16384 kB
Rss:                9000 kB
55d0c1000000-55d0c1100000 rw-p 01000000 fd:00 42 /work/target/release/corral
Rss:                 100 kB
55d0c2000000-55d0c3000000 rw-p 00000000 00:00 0 [heap]
Rss:                2048 kB
7f0000000000-7f0000200000 rw-p 00000000 00:00 0
Rss:                  64 kB
7f0000200000-7f0000400000 r-xp 00000000 fd:00 7 /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                1200 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
Rss:                  36 kB
";
        let b = split(smaps, "/work/target/release/corral");
        assert_eq!(
            (b.binary_kib, b.heap_kib, b.files_kib, b.anonymous_kib),
            (9100, 2048, 1200, 100)
        );
    }
}
