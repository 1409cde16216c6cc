//! The gate's BPF program: which syscalls reach the supervisor (`SECCOMP_RET_USER_NOTIF`),
//! which fail at once, and which never trap.
//!
//! - `connect`, `bind`, `sendmsg`, `sendmmsg`: always notified (the address of `sendmsg` is
//!   inside the message header, out of BPF's sight; a socket's family is never visible).
//! - `sendto`: notified only when `dest_addr` (argument 4) is not NULL; `send()` and
//!   `sendto(…, NULL, 0)` run untouched, so a connected socket costs nothing.
//! - `io_uring_setup`: `ENOSYS` (`IORING_OP_CONNECT` would bypass a syscall-level gate).
//! - With [`Traps::listens`] (`--net deny` or `--net proxy` on Landlock alone) also `listen`:
//!   the kernel gives an unbound inet socket a port of its own choosing there, on every
//!   interface, which Landlock's bind rule never sees.
//! - Before all of these, [`crate::seccomp::NATIVE_ONLY`], as in every filter of this crate:
//!   an i386 call kills the process, an x32 call fails with `ENOSYS` (the gate reads 64-bit
//!   argument layouts only, and no rule depends on another ABI's numbers).
//!
//! With [`Traps::creates`] (every backend in a linked worktree, git's, see `crate::git::packed_refs`) also
//! the calls git makes for a lock file (x86-64 glibc and musl: `openat`/`open`, `rename`,
//! `unlink`): `open`, and `openat` from `AT_FDCWD`, whose flags hold both `O_CREAT` and `O_EXCL`
//! (every other open never traps); `rename` and `unlink`; `renameat`/`renameat2` with both
//! directories `AT_FDCWD` (and no `renameat2` flags) and `unlinkat` from `AT_FDCWD` without
//! `AT_REMOVEDIR` (Go's `os.Remove`). Calls relative to a directory descriptor — `rm -r`,
//! `shutil.rmtree`, `remove_dir_all` — run untouched: the gate would grant nothing there, so
//! Landlock decides as before, and they cost no round trip. With
//! [`Traps::renames`] (the namespace backends in a main worktree) only those `rename` calls trap.
//! With [`Traps::chmods`] (the namespace backends in a linked worktree) also `chmod(path)` and
//! `fchmodat`/`fchmodat2` from `AT_FDCWD`: git `chmod`s the `config.lock` the gate made in the
//! read-only common dir. With [`Traps::touches`] (the namespace backends with an object quarantine,
//! `crate::git::freshen`) also `utimensat(AT_FDCWD, path, NULL, 0)`, what `utime(path, NULL)` makes:
//! git's refresh of an object's time (a `touch` works on its descriptor, and calls with times never
//! trap).
//!
//! With [`Traps::signals`] (Landlock alone below ABI 6, which does not scope signals:
//! `crate::signalgate`) also every call that names a process to signal: `kill`, `tkill`,
//! `tgkill`, `rt_sigqueueinfo`, `rt_tgsigqueueinfo`, `pidfd_send_signal`, `pidfd_open`, and
//! the calls that name where `SIGIO` goes: `fcntl` with `F_SETOWN` or `F_SETOWN_EX`, or
//! `F_SETFL` with `O_ASYNC`, `ioctl` with `FIOSETOWN`, `SIOCSPGRP`, `FIOASYNC`, `TIOCSPGRP`
//! or `TIOCSWINSZ` (every other `fcntl` and `ioctl` never traps).
//!
//! Written by hand like [`crate::seccomp`], with symbolic jump labels resolved by
//! [`crate::seccomp::assemble`].
//! See seccomp(2) and seccomp_unotify(2).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// `args[N]` of `struct seccomp_data` (offset 16 + N·8), low and high halves (little-endian).
/// An `int` argument is its low half (the kernel truncates the register).
const OFF_ARG0_LO: u32 = 16;
const OFF_ARG1_LO: u32 = 24;
const OFF_ARG2_LO: u32 = 32;
const OFF_ARG2_HI: u32 = 36;
const OFF_ARG3_LO: u32 = 40;
const OFF_ARG4_LO: u32 = 48;
const OFF_ARG4_HI: u32 = 52;
/// `AT_FDCWD` (-100) as the low half of an argument.
const AT_FDCWD: u32 = libc::AT_FDCWD as u32;

// x86_64 (arch/x86/entry/syscalls/syscall_64.tbl).
/// x86-64 syscall numbers: the ones the gate traps are shared with [`super::serve`] and
/// `crate::git::packed_refs`, which dispatch on them.
pub(crate) const NR_CONNECT: u32 = 42;
pub(crate) const NR_SENDTO: u32 = 44;
pub(crate) const NR_SENDMSG: u32 = 46;
pub(crate) const NR_BIND: u32 = 49;
pub(crate) const NR_LISTEN: u32 = 50;
pub(crate) const NR_SENDMMSG: u32 = 307;
const NR_IO_URING_SETUP: u32 = 425;
pub(crate) const NR_OPEN: u32 = 2;
pub(crate) const NR_RENAME: u32 = 82;
pub(crate) const NR_UNLINK: u32 = 87;
pub(crate) const NR_OPENAT: u32 = 257;
pub(crate) const NR_UNLINKAT: u32 = 263;
pub(crate) const NR_RENAMEAT: u32 = 264;
pub(crate) const NR_RENAMEAT2: u32 = 316;
pub(crate) const NR_UTIMENSAT: u32 = 280;
pub(crate) const NR_CHMOD: u32 = 90;
pub(crate) const NR_FCHMODAT: u32 = 268;
pub(crate) const NR_FCHMODAT2: u32 = 452;
pub(crate) const NR_KILL: u32 = 62;
pub(crate) const NR_TKILL: u32 = 200;
pub(crate) const NR_TGKILL: u32 = 234;
pub(crate) const NR_RT_SIGQUEUEINFO: u32 = 129;
pub(crate) const NR_RT_TGSIGQUEUEINFO: u32 = 297;
pub(crate) const NR_PIDFD_SEND_SIGNAL: u32 = 424;
pub(crate) const NR_PIDFD_OPEN: u32 = 434;
pub(crate) const NR_FCNTL: u32 = 72;
pub(crate) const NR_IOCTL: u32 = 16;
/// `fcntl` commands and `ioctl` requests that set where `SIGIO` goes.
pub(crate) const F_SETOWN: u32 = 8;
pub(crate) const F_SETOWN_EX: u32 = 15;
pub(crate) const FIOSETOWN: u32 = 0x8901;
pub(crate) const SIOCSPGRP: u32 = 0x8902;
/// `fcntl(F_SETFL)` with `O_ASYNC`, and `ioctl(FIOASYNC)`: a terminal then names its own
/// `SIGIO` owner (its foreground process group). `ioctl(TIOCSPGRP)`: a terminal's foreground
/// process group, which its signals go to.
pub(crate) const F_SETFL: u32 = 4;
pub(crate) const FIOASYNC: u32 = 0x5452;
pub(crate) const TIOCSPGRP: u32 = 0x5410;
/// `ioctl(TIOCSWINSZ)`: a terminal's new size, which sends `SIGWINCH` to its foreground group.
pub(crate) const TIOCSWINSZ: u32 = 0x5414;

/// The gate program's labels ([`crate::seccomp::Insn`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum L {
    Notify,
    Allow,
    NoSys,
    SendtoArgs,
    SendtoHi,
    OpenatArgs,
    OpenArgs,
    CreatExcl,
    UnlinkatArgs,
    RenameatArgs,
    Renameat2Args,
    Renameat2Hi,
    UtimensatArgs,
    FchmodatArgs,
    FcntlArgs,
    IoctlArgs,
}

/// Which syscalls the gate traps, by shape: what a [`super::handler::Handler`] registers, and
/// the union of all of them is what the filter traps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traps {
    /// The unix-socket calls (below Landlock ABI 9, or behind bubblewrap).
    pub sockets: bool,
    /// Exclusive creates and file unlinks by path from the working directory (`open`/`openat`
    /// with `O_CREAT | O_EXCL`, `unlink`, `unlinkat` without `AT_REMOVEDIR`), and with them
    /// [`Traps::renames`]: a lock-file protocol (git's, `crate::git::packed_refs`).
    pub creates: bool,
    /// Renames by path from the working directory (`rename`, `renameat`/`renameat2` from
    /// `AT_FDCWD` without flags).
    pub renames: bool,
    /// `utimensat(AT_FDCWD, path, NULL, 0)`: a refresh of a file's times to now (git's
    /// freshen of an object, `crate::git::freshen`).
    pub touches: bool,
    /// `chmod(path)` and `fchmodat(AT_FDCWD, path)`.
    pub chmods: bool,
    /// `listen` (the gate refuses it on inet sockets with `--net deny` on Landlock alone, and
    /// on those not bound to loopback with `--net proxy` there).
    pub listens: bool,
    /// The calls that signal a process or name where `SIGIO` goes (Landlock alone below ABI
    /// 6: `crate::signalgate`).
    pub signals: bool,
}

impl Traps {
    /// No call trapped.
    pub const NONE: Traps = Traps {
        sockets: false,
        creates: false,
        renames: false,
        touches: false,
        chmods: false,
        listens: false,
        signals: false,
    };

    /// The unix-socket calls alone.
    pub const SOCKETS: Traps = Traps {
        sockets: true,
        ..Traps::NONE
    };

    /// The calls either traps.
    #[must_use]
    pub fn union(self, other: Traps) -> Traps {
        Traps {
            sockets: self.sockets || other.sockets,
            creates: self.creates || other.creates,
            renames: self.renames || other.renames,
            touches: self.touches || other.touches,
            chmods: self.chmods || other.chmods,
            listens: self.listens || other.listens,
            signals: self.signals || other.signals,
        }
    }

    /// Whether syscall `nr` is one of the calls these traps may deliver (its arguments decide
    /// the rest, in the filter).
    pub fn covers(self, nr: u32) -> bool {
        let renames = self.creates || self.renames;
        match nr {
            NR_CONNECT | NR_BIND | NR_SENDMSG | NR_SENDMMSG | NR_SENDTO => self.sockets,
            NR_OPEN | NR_OPENAT | NR_UNLINK | NR_UNLINKAT => self.creates,
            NR_RENAME | NR_RENAMEAT | NR_RENAMEAT2 => renames,
            NR_UTIMENSAT => self.touches,
            NR_CHMOD | NR_FCHMODAT | NR_FCHMODAT2 => self.chmods,
            NR_LISTEN => self.listens,
            NR_KILL | NR_TKILL | NR_TGKILL | NR_RT_SIGQUEUEINFO | NR_RT_TGSIGQUEUEINFO
            | NR_PIDFD_SEND_SIGNAL | NR_PIDFD_OPEN | NR_FCNTL | NR_IOCTL => self.signals,
            _ => false,
        }
    }
}

/// The gate program for `traps` (see the module documentation): the native-ABI prelude,
/// which leaves the syscall number loaded, then the traps.
pub fn program(traps: Traps) -> Vec<libc::sock_filter> {
    let mut out = crate::seccomp::NATIVE_ONLY.to_vec();
    out.extend(body(traps));
    out
}

fn body(traps: Traps) -> Vec<libc::sock_filter> {
    use crate::seccomp::{assemble, Insn::*};
    let nosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let mut code = Vec::new();
    if traps.sockets {
        code.extend([
            Jeq(NR_CONNECT, Some(L::Notify), None),
            Jeq(NR_BIND, Some(L::Notify), None),
            Jeq(NR_SENDMSG, Some(L::Notify), None),
            Jeq(NR_SENDMMSG, Some(L::Notify), None),
            Jeq(NR_IO_URING_SETUP, Some(L::NoSys), None),
            Jeq(NR_SENDTO, Some(L::SendtoArgs), None),
        ]);
    }
    let renames = traps.creates || traps.renames;
    if traps.creates {
        code.extend([
            Jeq(NR_OPENAT, Some(L::OpenatArgs), None),
            Jeq(NR_OPEN, Some(L::OpenArgs), None),
            Jeq(NR_UNLINK, Some(L::Notify), None),
            Jeq(NR_UNLINKAT, Some(L::UnlinkatArgs), None),
        ]);
    }
    if renames {
        code.extend([
            Jeq(NR_RENAME, Some(L::Notify), None),
            Jeq(NR_RENAMEAT, Some(L::RenameatArgs), None),
            Jeq(NR_RENAMEAT2, Some(L::Renameat2Args), None),
        ]);
    }
    if traps.touches {
        code.push(Jeq(NR_UTIMENSAT, Some(L::UtimensatArgs), None));
    }
    if traps.listens {
        code.push(Jeq(NR_LISTEN, Some(L::Notify), None));
    }
    if traps.chmods {
        code.extend([
            Jeq(NR_CHMOD, Some(L::Notify), None),
            Jeq(NR_FCHMODAT, Some(L::FchmodatArgs), None),
            Jeq(NR_FCHMODAT2, Some(L::FchmodatArgs), None),
        ]);
    }
    if traps.signals {
        code.extend([
            Jeq(NR_KILL, Some(L::Notify), None),
            Jeq(NR_TKILL, Some(L::Notify), None),
            Jeq(NR_TGKILL, Some(L::Notify), None),
            Jeq(NR_RT_SIGQUEUEINFO, Some(L::Notify), None),
            Jeq(NR_RT_TGSIGQUEUEINFO, Some(L::Notify), None),
            Jeq(NR_PIDFD_SEND_SIGNAL, Some(L::Notify), None),
            Jeq(NR_PIDFD_OPEN, Some(L::Notify), None),
            Jeq(NR_FCNTL, Some(L::FcntlArgs), None),
            Jeq(NR_IOCTL, Some(L::IoctlArgs), None),
        ]);
    }
    code.push(Ret(libc::SECCOMP_RET_ALLOW));
    if traps.signals {
        // The command and the request are ints: the low half is what the kernel reads.
        code.extend([
            Label(L::FcntlArgs),
            Load(OFF_ARG1_LO),
            Jeq(F_SETOWN, Some(L::Notify), None),
            Jeq(F_SETOWN_EX, Some(L::Notify), None),
            Jeq(F_SETFL, None, Some(L::Allow)),
            Load(OFF_ARG2_LO),
            Jset(libc::O_ASYNC as u32, Some(L::Notify), Some(L::Allow)),
            Label(L::IoctlArgs),
            Load(OFF_ARG1_LO),
            Jeq(FIOSETOWN, Some(L::Notify), None),
            Jeq(SIOCSPGRP, Some(L::Notify), None),
            Jeq(FIOASYNC, Some(L::Notify), None),
            Jeq(TIOCSWINSZ, Some(L::Notify), None),
            Jeq(TIOCSPGRP, Some(L::Notify), Some(L::Allow)),
        ]);
    }
    if traps.chmods {
        code.extend([
            Label(L::FchmodatArgs),
            Load(OFF_ARG0_LO),
            Jeq(AT_FDCWD, Some(L::Notify), Some(L::Allow)),
        ]);
    }
    if traps.touches {
        // The directory an int (low half); the times a pointer (both halves); flags an int.
        code.extend([
            Label(L::UtimensatArgs),
            Load(OFF_ARG0_LO),
            Jeq(AT_FDCWD, None, Some(L::Allow)),
            Load(OFF_ARG2_LO),
            Jeq(0, None, Some(L::Allow)),
            Load(OFF_ARG2_HI),
            Jeq(0, None, Some(L::Allow)),
            Load(OFF_ARG3_LO),
            Jeq(0, Some(L::Notify), Some(L::Allow)),
        ]);
    }
    if traps.sockets {
        code.extend([
            Label(L::SendtoArgs),
            Load(OFF_ARG4_LO),
            Jeq(0, Some(L::SendtoHi), Some(L::Notify)),
            Label(L::SendtoHi),
            Load(OFF_ARG4_HI),
            Jeq(0, Some(L::Allow), Some(L::Notify)),
        ]);
    }
    if traps.creates {
        // Flags are an int: the low half of the argument is all the kernel reads.
        code.extend([
            Label(L::OpenatArgs),
            Load(OFF_ARG0_LO),
            Jeq(AT_FDCWD, None, Some(L::Allow)),
            Load(OFF_ARG2_LO),
            Jset(libc::O_CREAT as u32, Some(L::CreatExcl), Some(L::Allow)),
            Label(L::OpenArgs),
            Load(OFF_ARG1_LO),
            Jset(libc::O_CREAT as u32, Some(L::CreatExcl), Some(L::Allow)),
            Label(L::CreatExcl),
            Jset(libc::O_EXCL as u32, Some(L::Notify), Some(L::Allow)),
            Label(L::UnlinkatArgs),
            Load(OFF_ARG0_LO),
            Jeq(AT_FDCWD, None, Some(L::Allow)),
            Load(OFF_ARG2_LO),
            Jset(libc::AT_REMOVEDIR as u32, Some(L::Allow), Some(L::Notify)),
        ]);
    }
    if renames {
        code.extend([
            Label(L::Renameat2Args),
            Load(OFF_ARG4_LO),
            Jeq(0, Some(L::Renameat2Hi), Some(L::Allow)),
            Label(L::Renameat2Hi),
            Load(OFF_ARG4_HI),
            Jeq(0, Some(L::RenameatArgs), Some(L::Allow)),
            Label(L::RenameatArgs),
            Load(OFF_ARG0_LO),
            Jeq(AT_FDCWD, None, Some(L::Allow)),
            Load(OFF_ARG2_LO),
            Jeq(AT_FDCWD, Some(L::Notify), Some(L::Allow)),
        ]);
    }
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
/// Where the kernel has it (Linux 5.19), also `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`: once
/// the gate has received a call, only a fatal signal interrupts the caller's wait. Without it
/// a signal arriving while the gate performs the call (a `sendmsg` it completes, a `connect`)
/// makes the kernel restart it, and the caller performs it a second time (seccomp_unotify(2),
/// "Caveats"); the gate then says so on stderr when it happens ([`super::serve`]).
///
/// # Errors
/// The `seccomp(2)` error: `EBUSY` when a filter of this task already has a listener (an
/// outer sandbox's gate), `EINVAL` on kernels without user notification.
pub fn install(traps: Traps) -> io::Result<OwnedFd> {
    let program = program(traps);
    let listener = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER;
    let fd = match crate::seccomp::install(
        &program,
        listener | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
    ) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            crate::seccomp::install(&program, listener)?
        }
        r => r?,
    };
    // Safety: the kernel just returned this descriptor; we are its only owner.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    shofer_sys::fd::set_cloexec(std::os::fd::AsRawFd::as_raw_fd(&fd), true)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

    const ALL: [Traps; 6] = [
        Traps {
            sockets: true,
            creates: false,
            renames: false,
            touches: false,
            chmods: false,
            listens: false,
            signals: false,
        },
        Traps {
            sockets: false,
            creates: true,
            renames: false,
            touches: false,
            chmods: false,
            listens: false,
            signals: false,
        },
        Traps {
            sockets: true,
            creates: true,
            renames: false,
            touches: false,
            chmods: false,
            listens: false,
            signals: false,
        },
        Traps {
            sockets: true,
            creates: false,
            renames: true,
            touches: false,
            chmods: false,
            listens: false,
            signals: false,
        },
        Traps {
            sockets: false,
            creates: false,
            renames: true,
            touches: true,
            chmods: false,
            listens: false,
            signals: false,
        },
        Traps {
            sockets: true,
            creates: true,
            renames: false,
            touches: true,
            chmods: true,
            listens: true,
            signals: true,
        },
    ];

    /// `chmod(path)` and `fchmodat`/`fchmodat2` from `AT_FDCWD` trap with `chmods` only; from
    /// a directory descriptor they never do.
    #[test]
    fn chmods_trap_path_calls_from_the_working_directory_only() {
        let x86 = AUDIT_ARCH_X86_64;
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        let cwd = libc::AT_FDCWD as u32 as u64;
        let with = program(ALL[5]);
        let without = program(ALL[2]);
        for (nr, args, want) in [
            (NR_CHMOD, [0, 0o644, 0, 0, 0, 0], notify),
            (NR_FCHMODAT, [cwd, 0, 0o644, 0, 0, 0], notify),
            (NR_FCHMODAT2, [cwd, 0, 0o644, 0, 0, 0], notify),
            (NR_FCHMODAT, [3, 0, 0o644, 0, 0, 0], allow),
            (NR_FCHMODAT2, [3, 0, 0o644, 0, 0, 0], allow),
        ] {
            assert_eq!(verdict(&with, x86, nr, args), want, "nr {nr} {args:?}");
            assert_eq!(verdict(&without, x86, nr, args), allow, "nr {nr} {args:?}");
        }
    }

    /// With `signals`, every call that names a process to signal traps, and `fcntl`/`ioctl`
    /// only with the commands that set where `SIGIO` goes.
    #[test]
    fn signal_traps_catch_signal_calls_and_sigio_owners_only() {
        let x86 = AUDIT_ARCH_X86_64;
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        let with = program(ALL[5]);
        let without = program(ALL[2]);
        for (nr, args, want) in [
            (NR_KILL, [1, 9, 0, 0, 0, 0], notify),
            (NR_TKILL, [1, 9, 0, 0, 0, 0], notify),
            (NR_TGKILL, [1, 1, 9, 0, 0, 0], notify),
            (NR_RT_SIGQUEUEINFO, [1, 9, 0, 0, 0, 0], notify),
            (NR_RT_TGSIGQUEUEINFO, [1, 1, 9, 0, 0, 0], notify),
            (NR_PIDFD_SEND_SIGNAL, [3, 9, 0, 0, 0, 0], notify),
            (NR_PIDFD_OPEN, [1, 0, 0, 0, 0, 0], notify),
            (NR_FCNTL, [3, u64::from(F_SETOWN), 1, 0, 0, 0], notify),
            (NR_FCNTL, [3, u64::from(F_SETOWN_EX), 1, 0, 0, 0], notify),
            (NR_FCNTL, [3, libc::F_GETFL as u64, 0, 0, 0, 0], allow),
            (NR_FCNTL, [3, libc::F_SETFD as u64, 1, 0, 0, 0], allow),
            (
                NR_FCNTL,
                [3, u64::from(F_SETFL), libc::O_NONBLOCK as u64, 0, 0, 0],
                allow,
            ),
            (
                NR_FCNTL,
                [3, u64::from(F_SETFL), libc::O_ASYNC as u64, 0, 0, 0],
                notify,
            ),
            (NR_IOCTL, [3, u64::from(FIOASYNC), 0, 0, 0, 0], notify),
            (NR_IOCTL, [3, u64::from(TIOCSPGRP), 0, 0, 0, 0], notify),
            (NR_IOCTL, [3, u64::from(TIOCSWINSZ), 0, 0, 0, 0], notify),
            (NR_IOCTL, [3, u64::from(FIOSETOWN), 0, 0, 0, 0], notify),
            (NR_IOCTL, [3, u64::from(SIOCSPGRP), 0, 0, 0, 0], notify),
            (NR_IOCTL, [3, libc::TIOCGWINSZ, 0, 0, 0, 0], allow),
        ] {
            assert_eq!(verdict(&with, x86, nr, args), want, "nr {nr} {args:?}");
            assert_eq!(verdict(&without, x86, nr, args), allow, "nr {nr} {args:?}");
        }
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_returns() {
        for traps in ALL {
            let p = program(traps);
            for (i, ins) in p.iter().enumerate() {
                if ins.code == JEQ_K || ins.code == JSET_K {
                    assert!(i + 1 + (ins.jt as usize) < p.len());
                    assert!(i + 1 + (ins.jf as usize) < p.len());
                }
            }
            assert!(p[p.len() - 3..].iter().all(|i| i.code == RET_K));
            // Every jump is forward and fits BPF's 8-bit offset with room to spare.
            assert!(p.len() < 128, "{traps:?}: {}", p.len());
        }
    }

    use crate::seccomp::verdict;

    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const AUDIT_ARCH_I386: u32 = 0x4000_0003;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;

    #[test]
    fn lockfile_traps_catch_exclusive_creates_renames_and_file_unlinks_only() {
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        let x86 = AUDIT_ARCH_X86_64;
        let excl = (libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC) as u64;
        let creat = (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64;
        let on = program(ALL[1]);
        let off = program(ALL[0]);
        // AT_FDCWD as a caller passes it (sign-extended), and a real directory descriptor.
        let cwd = libc::AT_FDCWD as i64 as u64;
        let dir = 5;
        let cases = [
            (NR_OPENAT, [cwd, 0, excl, 0o666, 0, 0], notify),
            (NR_OPENAT, [cwd & 0xffff_ffff, 0, excl, 0o666, 0, 0], notify),
            (NR_OPENAT, [dir, 0, excl, 0o666, 0, 0], allow),
            (NR_OPENAT, [cwd, 0, creat, 0o666, 0, 0], allow),
            (NR_OPENAT, [cwd, 0, libc::O_RDONLY as u64, 0, 0, 0], allow),
            (NR_OPENAT, [cwd, 0, libc::O_EXCL as u64, 0, 0, 0], allow),
            (NR_OPEN, [0, excl, 0o666, 0, 0, 0], notify),
            (NR_OPEN, [0, creat, 0o666, 0, 0, 0], allow),
            (NR_RENAME, [0; 6], notify),
            (NR_RENAMEAT, [cwd, 0, cwd, 0, 0, 0], notify),
            (NR_RENAMEAT, [dir, 0, cwd, 0, 0, 0], allow),
            (NR_RENAMEAT, [cwd, 0, dir, 0, 0, 0], allow),
            (NR_RENAMEAT2, [cwd, 0, cwd, 0, 0, 0], notify),
            (NR_RENAMEAT2, [cwd, 0, cwd, 0, 1, 0], allow),
            (NR_RENAMEAT2, [dir, 0, cwd, 0, 0, 0], allow),
            (NR_UNLINK, [0; 6], notify),
            (NR_UNLINKAT, [cwd, 0, 0, 0, 0, 0], notify),
            (NR_UNLINKAT, [dir, 0, 0, 0, 0, 0], allow),
            (
                NR_UNLINKAT,
                [cwd, 0, libc::AT_REMOVEDIR as u64, 0, 0, 0],
                allow,
            ),
            (0, [0; 6], allow), // read
        ];
        let renames_only = program(ALL[3]);
        for (nr, args, want) in cases {
            assert_eq!(verdict(&on, x86, nr, args), want, "nr {nr} {args:?}");
            assert_eq!(verdict(&off, x86, nr, args), allow, "sockets only: nr {nr}");
            let is_rename = matches!(nr, NR_RENAME | NR_RENAMEAT | NR_RENAMEAT2);
            let want = if is_rename { want } else { allow };
            assert_eq!(
                verdict(&renames_only, x86, nr, args),
                want,
                "renames only: nr {nr} {args:?}"
            );
        }
        assert_eq!(verdict(&renames_only, x86, NR_CONNECT, [0; 6]), notify);
        // Sockets stay untrapped without `sockets`, and trapped with both.
        assert_eq!(verdict(&on, x86, NR_CONNECT, [0; 6]), allow);
        assert_eq!(verdict(&program(ALL[2]), x86, NR_CONNECT, [0; 6]), notify);
        assert_eq!(verdict(&program(ALL[2]), x86, NR_RENAME, [0; 6]), notify);
        // No other ABI gets past the prelude: i386 is killed, x32 has no such calls.
        for traps in ALL {
            let p = program(traps);
            for nr in [38, 102, 362, 288] {
                let kill = libc::SECCOMP_RET_KILL_PROCESS;
                assert_eq!(verdict(&p, AUDIT_ARCH_I386, nr, [0; 6]), kill);
            }
            let nosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
            for nr in [NR_RENAME, NR_CONNECT, 518, 538] {
                assert_eq!(verdict(&p, x86, X32_SYSCALL_BIT | nr, [0; 6]), nosys);
            }
        }
    }

    #[test]
    fn freshen_traps_catch_utime_of_a_path_without_times_only() {
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        let x86 = AUDIT_ARCH_X86_64;
        let cwd = libc::AT_FDCWD as i64 as u64;
        let on = program(ALL[4]);
        let cases = [
            ([cwd, 0x1000, 0, 0, 0, 0], notify),
            ([cwd & 0xffff_ffff, 0x1000, 0, 0, 0, 0], notify),
            // futimens(fd, NULL) (touch), times given (tar, cp -p), a flag, a directory.
            ([3, 0, 0, 0, 0, 0], allow),
            ([cwd, 0x1000, 0x2000, 0, 0, 0], allow),
            ([cwd, 0x1000, 1 << 32, 0, 0, 0], allow),
            (
                [cwd, 0x1000, 0, libc::AT_SYMLINK_NOFOLLOW as u64, 0, 0],
                allow,
            ),
            ([5, 0x1000, 0, 0, 0, 0], allow),
        ];
        for (args, want) in cases {
            assert_eq!(verdict(&on, x86, NR_UTIMENSAT, args), want, "{args:?}");
            for other in &ALL[..4] {
                assert_eq!(verdict(&program(*other), x86, NR_UTIMENSAT, args), allow);
            }
        }
        assert_eq!(verdict(&on, x86, NR_RENAME, [0; 6]), notify);
        assert_eq!(verdict(&on, x86, NR_CONNECT, [0; 6]), allow);
    }
}
