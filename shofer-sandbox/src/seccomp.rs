//! A seccomp filter that refuses terminal injection: `ioctl(fd, TIOCSTI, …)` (push bytes into
//! a terminal's input queue) and `ioctl(fd, TIOCLINUX, …)` (console selection paste) fail with
//! `EPERM`; every other syscall is allowed.
//!
//! Written by hand (14 BPF instructions) rather than with a filter compiler because the
//! details are the point: the ioctl request is compared as 32 bits (the kernel truncates
//! `cmd` to `unsigned int`, so high bits must not smuggle it past), and the i386 and x32
//! entry points are covered too (a generic compiler either ignores them or kills every
//! 32-bit process). See seccomp(2) and `Documentation/userspace-api/seccomp_filter.rst`.
//!
//! The program is written for x86-64 (with its i386 and x32 entry points) and exists only
//! there: on any other architecture nothing is installed, [`FILTER_AVAILABLE`] is false and
//! the report lists TIOCSTI as not enforced (a program that only knew x86 numbers would
//! silently allow everything elsewhere).

use std::io;

/// Installs the classic-BPF `filter` on the calling thread with seccomp(2)
/// `SECCOMP_SET_MODE_FILTER` and `flags` (e.g. `SECCOMP_FILTER_FLAG_NEW_LISTENER`, Linux 5.0),
/// and returns what the kernel returned: a new listener descriptor with that flag, else 0. The
/// filter is inherited by children and kept across exec. Requires `no_new_privs` or
/// `CAP_SYS_ADMIN`. The one installer for every filter of this crate (this module's, the host
/// filter's and the unix-socket gate's).
///
/// # Errors
/// The seccomp(2) error: `EINVAL` on a kernel without seccomp filters or the flag, `EBUSY`
/// when `NEW_LISTENER` is asked for and a filter of this task already has a listener.
pub(crate) fn install(filter: &[libc::sock_filter], flags: libc::c_ulong) -> io::Result<i64> {
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // Safety: seccomp(2) copies the program `prog` points at, which outlives the call; libc
    // has no wrapper for seccomp(2) and rustix none for filters. No allocation: callable in
    // the child between clone and exec.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

/// Whether this build has the filter for the architecture it runs on.
pub(crate) const FILTER_AVAILABLE: bool = cfg!(target_arch = "x86_64");

#[cfg(target_arch = "x86_64")]
pub(crate) use x86_64::refuse_terminal_injection;

#[cfg(target_arch = "x86_64")]
mod x86_64 {
    use std::io;

    // struct seccomp_data offsets (include/uapi/linux/seccomp.h).
    const OFF_NR: u32 = 0;
    const OFF_ARCH: u32 = 4;
    const OFF_ARG1_LO: u32 = 16 + 8; // args[1], low 32 bits on little-endian

    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const AUDIT_ARCH_I386: u32 = 0x4000_0003;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const NR_IOCTL_X86_64: u32 = 16;
    const NR_IOCTL_X32: u32 = X32_SYSCALL_BIT | 514;
    const NR_IOCTL_I386: u32 = 54;
    const TIOCSTI: u32 = 0x5412;
    const TIOCLINUX: u32 = 0x541C;

    const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

    const fn stmt(code: u16, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    const fn jeq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
        libc::sock_filter {
            code: BPF_JEQ_K,
            jt,
            jf,
            k,
        }
    }

    /// The filter program. BPF jumps go forward only; `jt`/`jf` count instructions skipped.
    fn program() -> [libc::sock_filter; 14] {
        let allow = libc::SECCOMP_RET_ALLOW;
        let deny = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32);
        [
            /* 0 */ stmt(BPF_LD_W_ABS, OFF_ARCH),
            /* 1 */ jeq(AUDIT_ARCH_I386, 5, 0), // -> 7
            /* 2 */
            jeq(AUDIT_ARCH_X86_64, 0, 3), // else -> 6: an arch we have no rule for
            /* 3 */ stmt(BPF_LD_W_ABS, OFF_NR),
            /* 4 */ jeq(NR_IOCTL_X86_64, 4, 0), // -> 9
            /* 5 */ jeq(NR_IOCTL_X32, 3, 0), // -> 9
            /* 6 */ stmt(BPF_RET_K, allow),
            /* 7 */ stmt(BPF_LD_W_ABS, OFF_NR), // i386
            /* 8 */ jeq(NR_IOCTL_I386, 0, 3), // else -> 12
            /* 9 */ stmt(BPF_LD_W_ABS, OFF_ARG1_LO),
            /* 10 */ jeq(TIOCSTI, 2, 0), // -> 13
            /* 11 */ jeq(TIOCLINUX, 1, 0), // -> 13
            /* 12 */ stmt(BPF_RET_K, allow),
            /* 13 */ stmt(BPF_RET_K, deny),
        ]
    }

    /// Installs the filter on the calling thread (inherited by children and kept across exec).
    /// Requires `no_new_privs` (set by the caller) or `CAP_SYS_ADMIN`.
    ///
    /// # Errors
    /// The seccomp(2) error, e.g. `EINVAL` on a kernel without seccomp filters.
    pub fn refuse_terminal_injection() -> io::Result<()> {
        super::install(&program(), 0).map(drop)
    }
}
