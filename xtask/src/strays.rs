//! `local` sandboxes that tests left mounted. A test's temporary data directory is removed when
//! the test ends, but a `local` sandbox it did not delete keeps its disk image mounted (the
//! provider keeps sandboxes across restarts, by design): the removal fails at the mount point
//! or unlinks an image that stays mounted, and either way the blocks stay used. Run after run,
//! a CI machine's disk fills up. `cargo xtask ci` unmounts such strays before and after its
//! runs, and the Schemathesis server's directory lets go of its sandboxes when dropped.
//!
//! A stray is an ext4 mount at `<temp dir>/…/sandboxes/<id>/fs` that is either
//! - an image whose file was deleted (its data directory is gone: nothing can use it again),
//! - in a test's temporary directory (`.tmp…`, the `tempfile` crate's names; so run
//!   `cargo xtask strays` only when no test is running), or
//! - in the directory of a Schemathesis run (`corral-schemathesis-<pid>`) whose process ended.
//!
//! Each is unmounted lazily (a process still inside lets go later) and its sandbox directory
//! removed. Nothing else is touched, and a failure only says so: it never fails the run.

use std::path::{Path, PathBuf};

/// Unmounts the strays and removes their sandbox directories; how many.
pub(crate) fn unmount() -> usize {
    let tmp = std::env::temp_dir();
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
    let strays = sandbox_mounts(&mountinfo(), |point, source| {
        point.starts_with(&tmp) && is_stray(point, &tmp, source, backing_file, alive)
    });
    let done = release(&strays);
    if done > 0 {
        println!("xtask: unmounted {done} disk(s) of local sandboxes that tests left behind");
    }
    done
}

/// Unmounts every `local` sandbox disk under `dir` (a server's data directory, its server
/// gone) and removes their sandbox directories, so that `dir` can be removed.
pub(crate) fn unmount_under(dir: &Path) -> usize {
    release(&sandbox_mounts(&mountinfo(), |point, _| {
        point.starts_with(dir)
    }))
}

fn mountinfo() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()
}

fn release(mounts: &[PathBuf]) -> usize {
    let mut done = 0;
    for point in mounts {
        let ok = std::process::Command::new("umount")
            .arg("-l")
            .arg(point)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "xtask: could not unmount the sandbox disk at {}",
                point.display()
            );
            continue;
        }
        done += 1;
        // The sandbox's directory (its image, the emptied mount point).
        if let Some(sandbox) = point.parent() {
            let _ = std::fs::remove_dir_all(sandbox);
        }
    }
    done
}

/// Whether the sandbox disk mounted at `point` (from the loop device `source`) is a stray.
fn is_stray(
    point: &Path,
    tmp: &Path,
    source: &str,
    backing: impl Fn(&str) -> Option<String>,
    alive: impl Fn(u32) -> bool,
) -> bool {
    if backing(source).is_some_and(|f| f.ends_with("(deleted)")) {
        return true;
    }
    let Some(top) = point
        .strip_prefix(tmp)
        .ok()
        .and_then(|p| p.components().next())
        .and_then(|c| c.as_os_str().to_str())
    else {
        return false;
    };
    if top.starts_with(".tmp") {
        return true;
    }
    top.strip_prefix("corral-schemathesis-")
        .and_then(|pid| pid.parse().ok())
        .is_some_and(|pid| !alive(pid))
}

/// The `local` sandbox disks in `mountinfo` (the kernel's format: the mount point is the
/// fifth field; after the ` - ` separator come the type and the source) that `keep` accepts,
/// given each mount point and its device.
fn sandbox_mounts(mountinfo: &str, keep: impl Fn(&Path, &str) -> bool) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let point = PathBuf::from(head.split(' ').nth(4)?);
            let mut tail = tail.split(' ');
            let (fstype, source) = (tail.next()?, tail.next()?);
            let sandbox_disk = fstype == "ext4"
                && point.file_name()? == "fs"
                && point.parent()?.parent()?.file_name()? == "sandboxes";
            (sandbox_disk && keep(&point, source)).then_some(point)
        })
        .collect()
}

/// What `/sys` says a loop device (`/dev/loopN`) reads from.
fn backing_file(device: &str) -> Option<String> {
    let name = device.strip_prefix("/dev/")?;
    std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file"))
        .ok()
        .map(|s| s.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
36 25 7:1 / /tmp/.tmpA/sandboxes/01a/fs rw,nosuid - ext4 /dev/loop1 rw
37 25 7:2 / /tmp/kept/data/sandboxes/01b/fs rw,nosuid - ext4 /dev/loop2 rw
38 25 7:3 / /tmp/kept/sandboxes/01c/fs rw,nosuid - ext4 /dev/loop3 rw
39 25 7:4 / /srv/corral/sandboxes/01d/fs rw,nosuid - ext4 /dev/loop4 rw
40 25 0:5 / /tmp/.tmpE/sandboxes/01e/fs rw shared:1 - tmpfs tmpfs rw
41 25 7:6 / /tmp/.tmpF/other/01f/fs rw - ext4 /dev/loop6 rw
42 25 7:7 / /tmp/corral-schemathesis-7/sandboxes/01g/fs rw - ext4 /dev/loop7 rw
43 25 7:8 / /tmp/corral-schemathesis-8/sandboxes/01h/fs rw - ext4 /dev/loop8 rw
";

    fn found(keep: impl Fn(&Path, &str) -> bool) -> Vec<String> {
        sandbox_mounts(INFO, keep)
            .into_iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    #[test]
    fn strays_are_deleted_images_test_directories_and_ended_schemathesis_runs() {
        let tmp = Path::new("/tmp");
        // Only loop2's image was deleted; pid 8 still runs.
        let backing = |dev: &str| {
            Some(if dev == "/dev/loop2" {
                "/tmp/kept/data/sandboxes/01b/disk.img (deleted)".to_owned()
            } else {
                format!("/x{dev}/disk.img")
            })
        };
        let strays = found(|point, source| {
            point.starts_with(tmp) && is_stray(point, tmp, source, backing, |pid| pid == 8)
        });
        assert_eq!(
            strays,
            [
                "/tmp/.tmpA/sandboxes/01a/fs",
                "/tmp/kept/data/sandboxes/01b/fs",
                "/tmp/corral-schemathesis-7/sandboxes/01g/fs",
            ]
        );
    }

    #[test]
    fn under_a_directory_every_sandbox_disk_is_taken_and_nothing_else() {
        assert_eq!(
            found(|point, _| point.starts_with("/tmp/kept")),
            [
                "/tmp/kept/data/sandboxes/01b/fs",
                "/tmp/kept/sandboxes/01c/fs"
            ]
        );
    }
}
