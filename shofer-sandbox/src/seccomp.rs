//! A seccomp filter that refuses terminal injection: `ioctl(fd, TIOCSTI, …)` (push bytes into
//! a terminal's input queue) and `ioctl(fd, TIOCLINUX, …)` (console selection paste) fail with
//! `EPERM`; every other syscall is allowed.
//!
//! Written by hand (12 BPF instructions) rather than with a filter compiler because the
//! details are the point: the ioctl request is compared as 32 bits (the kernel truncates
//! `cmd` to `unsigned int`, so high bits must not smuggle it past). Every filter of this
//! crate starts with [`NATIVE_ONLY`]: only x86-64's own entry point gets past it (i386 calls
//! kill the process, x32 calls fail with `ENOSYS`), so no rule depends on listing another
//! ABI's numbers; 32-bit programs do not run inside. See seccomp(2) and
//! `Documentation/userspace-api/seccomp_filter.rst`.
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

/// One classic-BPF instruction of this crate's filters, with symbolic jump targets (labels of
/// type `L`; `None` is the next instruction) that [`assemble`] resolves: the one assembler of
/// the host filter ([`crate::hostfilter`]) and the gate's ([`crate::gate::filter`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Insn<L> {
    /// A = the 32-bit word at offset `k` of `struct seccomp_data`.
    Load(u32),
    /// A &= k.
    And(u32),
    /// If A == k go to the first target, else to the second.
    Jeq(u32, Option<L>, Option<L>),
    /// If A & k go to the first target, else to the second.
    Jset(u32, Option<L>, Option<L>),
    /// Return k.
    Ret(u32),
    /// Where a jump to this label lands: the next real instruction.
    Label(L),
}

/// Resolves the labels of `prog` into jump offsets (classic BPF jumps go forward only, by at
/// most 255 instructions).
///
/// # Panics
/// On a jump to an undefined label, backwards or too far: a mistake in a program written in
/// this crate, which every filter's tests build.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn assemble<L: Copy + PartialEq + std::fmt::Debug>(
    prog: &[Insn<L>],
) -> Vec<libc::sock_filter> {
    let mut at: Vec<(L, usize)> = Vec::new();
    let mut n = 0usize;
    for insn in prog {
        match insn {
            Insn::Label(l) => at.push((*l, n)),
            _ => n += 1,
        }
    }
    let mut out = Vec::with_capacity(n);
    for insn in prog {
        let here = out.len();
        let rel = |target: Option<L>| -> u8 {
            target.map_or(0, |l| {
                let to = at
                    .iter()
                    .find(|(k, _)| *k == l)
                    .unwrap_or_else(|| panic!("seccomp label {l:?} defined"))
                    .1;
                u8::try_from(to - here - 1).expect("seccomp jump forward within 255 instructions")
            })
        };
        let op = |class: u32, code: u32| (class | code) as u16;
        let (code, jt, jf, k) = match *insn {
            Insn::Label(_) => continue,
            Insn::Load(k) => (op(libc::BPF_LD, libc::BPF_W | libc::BPF_ABS), 0, 0, k),
            Insn::And(k) => (op(libc::BPF_ALU, libc::BPF_AND | libc::BPF_K), 0, 0, k),
            Insn::Jeq(k, t, f) => (
                op(libc::BPF_JMP, libc::BPF_JEQ | libc::BPF_K),
                rel(t),
                rel(f),
                k,
            ),
            Insn::Jset(k, t, f) => (
                op(libc::BPF_JMP, libc::BPF_JSET | libc::BPF_K),
                rel(t),
                rel(f),
                k,
            ),
            Insn::Ret(k) => (op(libc::BPF_RET, libc::BPF_K), 0, 0, k),
        };
        out.push(libc::sock_filter { code, jt, jf, k });
    }
    out
}

/// Whether this build has the filter for the architecture it runs on.
pub(crate) const FILTER_AVAILABLE: bool = cfg!(target_arch = "x86_64");

#[cfg(target_arch = "x86_64")]
pub(crate) use x86_64::{refuse_terminal_injection, NATIVE_ONLY};

#[cfg(target_arch = "x86_64")]
mod x86_64 {
    use std::io;

    // struct seccomp_data offsets (include/uapi/linux/seccomp.h).
    const OFF_NR: u32 = 0;
    const OFF_ARCH: u32 = 4;
    const OFF_ARG1_LO: u32 = 16 + 8; // args[1], low 32 bits on little-endian

    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const NR_IOCTL: u32 = 16;
    const TIOCSTI: u32 = 0x5412;
    const TIOCLINUX: u32 = 0x541C;

    const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const BPF_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

    const fn stmt(code: u16, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
        libc::sock_filter { code, jt, jf, k }
    }

    /// The first instructions of every filter this crate installs: only the native x86-64
    /// entry point gets past them, so no rule after them depends on knowing another ABI's
    /// numbers (the keyring calls were refused on x86-64 and x32 only, and `int $0x80` from a
    /// 64-bit program reached `keyctl` as i386 number 288).
    ///
    /// - An i386 call (`int $0x80`, `sysenter`, any 32-bit program) kills the process
    ///   (`SECCOMP_RET_KILL_PROCESS`, Linux 4.14; older kernels kill the thread). `ENOSYS`
    ///   would not stop a 32-bit program: musl's `_Exit` retries `exit` forever.
    /// - An x32 call (bit 30 of the number) fails with `ENOSYS`, what a kernel without x32
    ///   support answers.
    ///
    /// After them the accumulator holds the syscall number.
    pub(crate) const NATIVE_ONLY: [libc::sock_filter; 6] = [
        stmt(BPF_LD_W_ABS, OFF_ARCH),
        jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, OFF_NR),
        jump(BPF_JSET_K, X32_SYSCALL_BIT, 0, 1),
        stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | (libc::ENOSYS as u32)),
    ];

    /// The filter program: [`NATIVE_ONLY`], then the ioctl check. BPF jumps go forward
    /// only; `jt`/`jf` count instructions skipped.
    fn program() -> Vec<libc::sock_filter> {
        let allow = libc::SECCOMP_RET_ALLOW;
        let deny = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32);
        let mut p = NATIVE_ONLY.to_vec();
        p.extend([
            /* 0 */ jump(BPF_JEQ_K, NR_IOCTL, 0, 3), // else -> 4
            /* 1 */ stmt(BPF_LD_W_ABS, OFF_ARG1_LO),
            /* 2 */ jump(BPF_JEQ_K, TIOCSTI, 2, 0), // -> 5
            /* 3 */ jump(BPF_JEQ_K, TIOCLINUX, 1, 0), // -> 5
            /* 4 */ stmt(BPF_RET_K, allow),
            /* 5 */ stmt(BPF_RET_K, deny),
        ]);
        p
    }

    /// Installs the filter on the calling thread (inherited by children and kept across exec).
    /// Requires `no_new_privs` (set by the caller) or `CAP_SYS_ADMIN`.
    ///
    /// # Errors
    /// The seccomp(2) error, e.g. `EINVAL` on a kernel without seccomp filters.
    pub fn refuse_terminal_injection() -> io::Result<()> {
        super::install(&program(), 0).map(drop)
    }

    #[cfg(test)]
    mod tests {
        use super::super::verdict;
        use super::*;

        const I386: u32 = 0x4000_0003;

        #[test]
        fn terminal_injection_is_refused_and_other_abis_never_get_past_the_prelude() {
            let p = program();
            let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
            let ok = libc::SECCOMP_RET_ALLOW;
            let x86 = AUDIT_ARCH_X86_64;
            assert_eq!(
                verdict(&p, x86, NR_IOCTL, [1, TIOCSTI as u64, 0, 0, 0, 0]),
                eperm
            );
            // The kernel truncates the request to 32 bits: high bits do not smuggle it past.
            let high = (1u64 << 32) | TIOCLINUX as u64;
            assert_eq!(verdict(&p, x86, NR_IOCTL, [1, high, 0, 0, 0, 0]), eperm);
            assert_eq!(verdict(&p, x86, NR_IOCTL, [1, 0x5401, 0, 0, 0, 0]), ok);
            assert_eq!(verdict(&p, x86, 0, [0; 6]), ok);
            assert_eq!(
                verdict(
                    &p,
                    x86,
                    X32_SYSCALL_BIT | 514,
                    [1, TIOCSTI as u64, 0, 0, 0, 0]
                ),
                libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
            );
            for nr in [0, 54, 288] {
                assert_eq!(
                    verdict(&p, I386, nr, [0; 6]),
                    libc::SECCOMP_RET_KILL_PROCESS
                );
            }
            assert_eq!(
                verdict(&p, 0xC000_00B7, 0, [0; 6]),
                libc::SECCOMP_RET_KILL_PROCESS
            );
        }
    }
}

/// Runs a classic-BPF seccomp program on one `struct seccomp_data` (the instructions this
/// crate's programs use: `LD|W|ABS`, `ALU|AND|K`, `JEQ`, `JSET`, `RET`): the one interpreter every
/// filter's tests decide with, instead of installing the filter.
#[cfg(test)]
pub(crate) fn verdict(p: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    const AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
    let mut data = Vec::new();
    data.extend(nr.to_ne_bytes());
    data.extend(arch.to_ne_bytes());
    data.extend(0u64.to_ne_bytes());
    for a in args {
        data.extend(a.to_ne_bytes());
    }
    let (mut pc, mut acc) = (0usize, 0u32);
    loop {
        let i = p[pc];
        pc += 1;
        match i.code {
            LD_W_ABS => {
                let k = i.k as usize;
                acc = u32::from_ne_bytes(data[k..k + 4].try_into().unwrap());
            }
            JEQ_K | JSET_K => {
                let hit = if i.code == JEQ_K {
                    acc == i.k
                } else {
                    acc & i.k != 0
                };
                pc += if hit { i.jt } else { i.jf } as usize;
            }
            AND_K => acc &= i.k,
            RET_K => return i.k,
            c => panic!("unexpected instruction {c:#x}"),
        }
    }
}
