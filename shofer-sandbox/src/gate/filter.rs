//! The gate's BPF program: which syscalls reach the supervisor (`SECCOMP_RET_USER_NOTIF`),
//! which fail at once, and which never trap.
//!
//! - `connect`, `bind`, `sendmsg`, `sendmmsg`: always notified (the address of `sendmsg` is
//!   inside the message header, out of BPF's sight; a socket's family is never visible).
//! - `sendto`: notified only when `dest_addr` (argument 4) is not NULL; `send()` and
//!   `sendto(…, NULL, 0)` run untouched, so a connected socket costs nothing.
//! - `io_uring_setup`: `ENOSYS` (`IORING_OP_CONNECT` would bypass a syscall-level gate).
//! - The i386 and x32 entry points of all of these (and i386 `socketcall`): `ENOSYS`; the gate
//!   reads 64-bit argument layouts only.
//!
//! Written by hand like [`crate::seccomp`], with symbolic jump labels resolved at build time.
//! See seccomp(2) and seccomp_unotify(2).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// `args[4]` of `struct seccomp_data` (offset 16 + 4·8), low and high halves (little-endian).
const OFF_ARG4_LO: u32 = 48;
const OFF_ARG4_HI: u32 = 52;

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// x86_64 (arch/x86/entry/syscalls/syscall_64.tbl).
const NR_CONNECT: u32 = 42;
const NR_SENDTO: u32 = 44;
const NR_SENDMSG: u32 = 46;
const NR_BIND: u32 = 49;
const NR_SENDMMSG: u32 = 307;
const NR_IO_URING_SETUP: u32 = 425;
// x32-only numbers of sendmsg and sendmmsg.
const NR_X32_SENDMSG: u32 = 518;
const NR_X32_SENDMMSG: u32 = 538;
// i386 (syscall_32.tbl).
const NR_I386_SOCKETCALL: u32 = 102;
const NR_I386_SENDMMSG: u32 = 345;
const NR_I386_BIND: u32 = 361;
const NR_I386_CONNECT: u32 = 362;
const NR_I386_SENDTO: u32 = 369;
const NR_I386_SENDMSG: u32 = 370;
const NR_I386_IO_URING_SETUP: u32 = 425;

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum L {
    Next,
    Notify,
    Allow,
    NoSys,
    X32,
    I386,
    SendtoArgs,
    SendtoHi,
}

enum Ins {
    Ld(u32),
    Jeq(u32, L, L),
    Jset(u32, L, L),
    Ret(u32),
    Label(L),
}

fn assemble(code: &[Ins]) -> Vec<libc::sock_filter> {
    // Position of each label (index of the next real instruction).
    let mut pos = Vec::new();
    let mut n = 0usize;
    for i in code {
        match i {
            Ins::Label(l) => pos.push((*l, n)),
            _ => n += 1,
        }
    }
    let at = |l: L, here: usize| -> u8 {
        if l == L::Next {
            return 0;
        }
        let target = pos.iter().find(|(k, _)| *k == l).expect("label defined").1;
        let off = target - here - 1;
        u8::try_from(off).expect("BPF jump fits in 8 bits")
    };
    let mut out = Vec::with_capacity(n);
    for i in code {
        let here = out.len();
        let ins = match *i {
            Ins::Label(_) => continue,
            Ins::Ld(k) => (LD_W_ABS, 0, 0, k),
            Ins::Ret(k) => (RET_K, 0, 0, k),
            Ins::Jeq(k, t, f) => (JEQ_K, at(t, here), at(f, here), k),
            Ins::Jset(k, t, f) => (JSET_K, at(t, here), at(f, here), k),
        };
        out.push(libc::sock_filter {
            code: ins.0,
            jt: ins.1,
            jf: ins.2,
            k: ins.3,
        });
    }
    out
}

/// The gate program (see the module documentation).
pub fn program() -> Vec<libc::sock_filter> {
    use Ins::*;
    let nosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let mut code = vec![
        Ld(OFF_ARCH),
        Jeq(AUDIT_ARCH_I386, L::I386, L::Next),
        Jeq(AUDIT_ARCH_X86_64, L::Next, L::NoSys),
        Ld(OFF_NR),
        Jset(X32_SYSCALL_BIT, L::X32, L::Next),
        Jeq(NR_CONNECT, L::Notify, L::Next),
        Jeq(NR_BIND, L::Notify, L::Next),
        Jeq(NR_SENDMSG, L::Notify, L::Next),
        Jeq(NR_SENDMMSG, L::Notify, L::Next),
        Jeq(NR_IO_URING_SETUP, L::NoSys, L::Next),
        Jeq(NR_SENDTO, L::SendtoArgs, L::Allow),
        Label(L::SendtoArgs),
        Ld(OFF_ARG4_LO),
        Jeq(0, L::SendtoHi, L::Notify),
        Label(L::SendtoHi),
        Ld(OFF_ARG4_HI),
        Jeq(0, L::Allow, L::Notify),
        Label(L::X32),
    ];
    for nr in [
        NR_CONNECT,
        NR_SENDTO,
        NR_BIND,
        NR_IO_URING_SETUP,
        NR_X32_SENDMSG,
        NR_X32_SENDMMSG,
    ] {
        code.push(Jeq(X32_SYSCALL_BIT | nr, L::NoSys, L::Next));
    }
    code.push(Jeq(X32_SYSCALL_BIT | NR_SENDMSG, L::NoSys, L::Next));
    code.push(Jeq(X32_SYSCALL_BIT | NR_SENDMMSG, L::NoSys, L::Allow));
    code.push(Label(L::I386));
    code.push(Ld(OFF_NR));
    for nr in [
        NR_I386_SOCKETCALL,
        NR_I386_SENDMMSG,
        NR_I386_BIND,
        NR_I386_CONNECT,
        NR_I386_SENDTO,
        NR_I386_SENDMSG,
    ] {
        code.push(Jeq(nr, L::NoSys, L::Next));
    }
    code.push(Jeq(NR_I386_IO_URING_SETUP, L::NoSys, L::Allow));
    code.extend([
        Label(L::Allow),
        Ret(libc::SECCOMP_RET_ALLOW),
        Label(L::Notify),
        Ret(libc::SECCOMP_RET_USER_NOTIF),
        Label(L::NoSys),
        Ret(nosys),
    ]);
    assemble(&code)
}

/// Installs the gate filter on the calling thread with `SECCOMP_FILTER_FLAG_NEW_LISTENER`
/// (Linux 5.0) and returns the listener, close-on-exec. Requires `no_new_privs` or
/// `CAP_SYS_ADMIN`.
///
/// # Errors
/// The `seccomp(2)` error: `EBUSY` when a filter of this task already has a listener (an
/// outer sandbox's gate), `EINVAL` on kernels without user notification.
pub fn install() -> io::Result<OwnedFd> {
    let fd = crate::seccomp::install(&program(), libc::SECCOMP_FILTER_FLAG_NEW_LISTENER)?;
    // Safety: the kernel just returned this descriptor; we are its only owner.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    shofer_sys::fd::set_cloexec(std::os::fd::AsRawFd::as_raw_fd(&fd), true)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_returns() {
        let p = program();
        for (i, ins) in p.iter().enumerate() {
            if ins.code == JEQ_K || ins.code == JSET_K {
                assert!(i + 1 + (ins.jt as usize) < p.len());
                assert!(i + 1 + (ins.jf as usize) < p.len());
            }
        }
        assert!(p[p.len() - 3..].iter().all(|i| i.code == RET_K));
        assert!(p.len() < 64);
    }
}
