//! The child-failure pipe: how a child between `clone` and `execve` tells the supervisor
//! which setup step failed, and with which errno.
//!
//! - Owns [`Stage`] (the step names) and the record format: one stage byte, then the errno as
//!   4 native-endian bytes.
//! - Entry points: [`report_failure`] (child side: write the record, `_exit(125)`) and
//!   [`read_failure`] (supervisor side: one record, or `None` on EOF).
//! - The pipe is close-on-exec: EOF means `execve` succeeded. [`report_failure`] runs in a
//!   `CLONE_VM` child: it must never allocate, lock or run destructors.
//!
//! Used by [`crate::spawn`] (reading) and by [`crate::exec`] and [`crate::namespaces::init`]
//! (writing); it imports neither.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

/// Child-side setup steps, reported back to the supervisor when one fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    Session = 1,
    DeathSignal,
    Descriptors,
    NoNewPrivs,
    Capabilities,
    Seccomp,
    Landlock,
    Exec,
    IdMaps,
    Mounts,
    Fork,
    Identity,
    Limits,
    NamespaceMounts,
    ProxyListener,
}

impl Stage {
    fn from_u8(b: u8) -> Option<Stage> {
        use Stage::*;
        [
            Session,
            DeathSignal,
            Descriptors,
            NoNewPrivs,
            Capabilities,
            Seccomp,
            Landlock,
            Exec,
            IdMaps,
            Mounts,
            Fork,
            Identity,
            Limits,
            NamespaceMounts,
            ProxyListener,
        ]
        .into_iter()
        .find(|s| *s as u8 == b)
    }

    /// The step as the supervisor's message names it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Stage::Session => "setsid",
            Stage::DeathSignal => "prctl(PR_SET_PDEATHSIG)",
            Stage::Descriptors => "closing inherited descriptors",
            Stage::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)",
            Stage::Capabilities => "dropping capabilities",
            Stage::Seccomp => "installing the seccomp filter",
            Stage::Landlock => "landlock_restrict_self",
            Stage::Exec => "execve",
            Stage::IdMaps => "writing uid_map/gid_map",
            Stage::Mounts => "mounting the writable set, git's layers and the package caches in the new namespaces",
            Stage::NamespaceMounts => "mount",
            Stage::Fork => "fork",
            Stage::Identity => "switching to the worktree's owner (setgroups/setresgid/setresuid)",
            Stage::Limits => "entering the run's cgroup or setting RLIMIT_NPROC",
            Stage::ProxyListener => "making the proxy's listener in the command's network namespace",
        }
    }
}

/// Writes the failure record (stage byte + errno) for the supervisor and exits 125 without
/// running destructors (in the `CLONE_VM` child they would free memory the supervisor owns).
pub(crate) fn report_failure(err: BorrowedFd<'_>, stage: Stage, e: io::Error) -> ! {
    let mut rec = [0u8; 5];
    rec[0] = stage as u8;
    rec[1..].copy_from_slice(&e.raw_os_error().unwrap_or(libc::EIO).to_ne_bytes());
    let _ = rustix::io::write(err, &rec);
    shofer_sys::signal::exit_now(125)
}

/// Reads one failure record (stage byte + errno) from the exec-error pipe; `None` on EOF.
pub(crate) fn read_failure(fd: &OwnedFd) -> Option<(Stage, i32)> {
    let mut buf = [0u8; 5];
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::read(fd, &mut buf[got..]) {
            Err(rustix::io::Errno::INTR) => continue,
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    if got < buf.len() {
        return None;
    }
    let errno = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
    Some((Stage::from_u8(buf[0])?, errno))
}
