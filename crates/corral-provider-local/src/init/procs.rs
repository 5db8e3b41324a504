//! Process plumbing the init and its user-namespace helpers share: waiting for a child,
//! writing a process's id maps.

use rustix::process::{Pid, WaitOptions};

/// Waits for child `pid`; its exit code (`128 + n` for death by signal `n`).
pub(super) fn wait_for(pid: Pid) -> i32 {
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Ok(Some((_, status))) => {
                return status
                    .exit_status()
                    .unwrap_or_else(|| 128 + status.terminating_signal().unwrap_or(0));
            }
            Err(rustix::io::Errno::INTR) => {}
            Ok(None) | Err(_) => return 125,
        }
    }
}

/// Writes the id maps of process `who` (`self` or a pid); `deny_setgroups` first where the
/// writer holds no `CAP_SETGID` over the parent namespace.
pub(super) fn write_id_maps(
    who: &str,
    uid_map: &str,
    gid_map: &str,
    deny_setgroups: bool,
) -> Result<(), String> {
    let write = |file: &str, content: &str| {
        std::fs::write(format!("/proc/{who}/{file}"), content)
            .map_err(|e| format!("/proc/{who}/{file}: {e}"))
    };
    if deny_setgroups {
        write("setgroups", "deny")?;
    }
    write("uid_map", uid_map)?;
    write("gid_map", gid_map)
}
