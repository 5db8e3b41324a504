//! The seccomp filter every command runs under, as classic BPF built here (no libseccomp).
//!
//! Modelled on the default profiles of Docker, Podman and containerd, written as a deny list
//! (they allow a list; the effect on the calls below is the same): a sandbox may not create
//! user namespaces (`unshare`/`clone` with `CLONE_NEWUSER`; `clone3` answers `ENOSYS`, whose
//! flags a filter cannot read, so libc falls back to `clone`), use the kernel keyring, load
//! BPF programs, trace or read other processes' memory, load or remove kernel modules, kexec
//! or reboot, set the clocks, turn on accounting or swap, open files by handle, use
//! `io_uring`, `userfaultfd` or `perf_event_open`, read the kernel log, join namespaces
//! (`setns`) or `pivot_root`. Every other call is allowed; a denied one fails with `EPERM`.
//! Calls of another ABI (32-bit `int 0x80`, x32) are denied outright, so the numbers below
//! cannot be dodged.
//!
//! The filter is loaded by the sandbox's init, in-process, after it has entered the
//! sandbox's user namespace (itself an `unshare(CLONE_NEWUSER)`, which the filter forbids)
//! and before it serves any command: every command inherits it. The program is built here,
//! as classic BPF (it denies x32 calls, which rule-based compilers leave out), and loaded
//! with the `seccompiler` crate (rust-vmm's, as used by Firecracker), which also sets
//! `no_new_privs`.

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;
const CLONE_NEWUSER: u32 = 0x1000_0000;

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

/// `BPF_LD | BPF_W | BPF_ABS`
const LD_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`
const JEQ: u16 = 0x15;
/// `BPF_JMP | BPF_JGE | BPF_K`
#[cfg(target_arch = "x86_64")]
const JGE: u16 = 0x35;
/// `BPF_JMP | BPF_JSET | BPF_K`
const JSET: u16 = 0x45;
/// `BPF_RET | BPF_K`
const RET: u16 = 0x06;

/// Offsets in `struct seccomp_data`.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// Low 32 bits of `args[0]` (little-endian).
const OFF_ARG0_LO: u32 = 16;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// One `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// Calls denied with `EPERM` (numbers of the native ABI).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn denied() -> Vec<libc::c_long> {
    let mut calls = vec![
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_perf_event_open,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_settimeofday,
        libc::SYS_acct,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_quotactl,
        libc::SYS_open_by_handle_at,
        libc::SYS_lookup_dcookie,
        libc::SYS_userfaultfd,
        libc::SYS_syslog,
        libc::SYS_vhangup,
        libc::SYS_setns,
        libc::SYS_pivot_root,
        libc::SYS_fanotify_init,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_nfsservctl,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_uselib,
        libc::SYS_ustat,
        libc::SYS_sysfs,
        libc::SYS__sysctl,
    ]);
    calls
}

/// The filter program, or why this architecture has none.
pub(crate) fn program() -> Result<Vec<u8>, String> {
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return Err("no seccomp filter is defined for this architecture".into());
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let nr = |n: libc::c_long| u32::try_from(n).map_err(|_| format!("syscall number {n}"));
        let deny = SECCOMP_RET_ERRNO | EPERM;
        let mut p = vec![
            insn(LD_ABS, 0, 0, OFF_ARCH),
            insn(JEQ, 1, 0, AUDIT_ARCH),
            insn(RET, 0, 0, deny),
            insn(LD_ABS, 0, 0, OFF_NR),
        ];
        // x32 calls reach the same kernel code under other numbers.
        #[cfg(target_arch = "x86_64")]
        p.extend([insn(JGE, 0, 1, 0x4000_0000), insn(RET, 0, 0, deny)]);
        for call in denied() {
            p.extend([insn(JEQ, 0, 1, nr(call)?), insn(RET, 0, 0, deny)]);
        }
        p.extend([
            insn(JEQ, 0, 1, nr(libc::SYS_clone3)?),
            insn(RET, 0, 0, SECCOMP_RET_ERRNO | ENOSYS),
        ]);
        // `clone` and `unshare` take their flags first on both architectures. The argument is
        // loaded over the call number, so each check ends in a return.
        for call in [libc::SYS_clone, libc::SYS_unshare] {
            p.extend([
                insn(JEQ, 0, 4, nr(call)?),
                insn(LD_ABS, 0, 0, OFF_ARG0_LO),
                insn(JSET, 0, 1, CLONE_NEWUSER),
                insn(RET, 0, 0, deny),
                insn(RET, 0, 0, SECCOMP_RET_ALLOW),
            ]);
        }
        p.push(insn(RET, 0, 0, SECCOMP_RET_ALLOW));
        let mut bytes = Vec::with_capacity(p.len() * 8);
        for i in p {
            bytes.extend_from_slice(&i.code.to_ne_bytes());
            bytes.extend([i.jt, i.jf]);
            bytes.extend_from_slice(&i.k.to_ne_bytes());
        }
        Ok(bytes)
    }
}

/// Loads `program` (as built by [`program`]) on the calling thread, after setting
/// `no_new_privs`; the calling process must be single-threaded for it to cover every
/// thread (the init is).
pub(crate) fn load(program: &[u8]) -> Result<(), String> {
    if program.is_empty() || !program.len().is_multiple_of(8) {
        return Err("the seccomp program is not whole instructions".into());
    }
    let filter: seccompiler::BpfProgram = program
        .chunks_exact(8)
        .map(|i| seccompiler::sock_filter {
            code: u16::from_ne_bytes([i[0], i[1]]),
            jt: i[2],
            jf: i[3],
            k: u32::from_ne_bytes([i[4], i[5], i[6], i[7]]),
        })
        .collect();
    seccompiler::apply_filter(&filter).map_err(|e| format!("cannot load the seccomp filter: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_whole_instructions_and_ends_in_allow() {
        let p = program().unwrap();
        assert_eq!(p.len() % 8, 0);
        assert!(
            p.len() / 8 < 4096,
            "BPF programs are limited to 4096 instructions"
        );
        let last = &p[p.len() - 8..];
        assert_eq!(u16::from_ne_bytes([last[0], last[1]]), RET);
        assert_eq!(
            u32::from_ne_bytes([last[4], last[5], last[6], last[7]]),
            SECCOMP_RET_ALLOW
        );
    }
}
