//! Git's handlers of the unix-socket gate's trapped calls ([`crate::gate::handler`]).
//!
//! - [`LockProtocol`]: git's `packed-refs` lock protocol in a common dir the command may not
//!   change at its top level, performed for the command ([`super::packed_refs`]); or, in a
//!   main worktree on the namespace backends, only git's rename of an unchanged `config.lock`
//!   onto the read-only `config`.
//! - [`Freshen`]: git's refresh of an object's time in the read-only store of the object
//!   quarantine, performed on the store's file ([`super::freshen`]).
//!
//! Each performs only the exact step it recognises, as the caller (the gate drops to the
//! caller's identity for a caller without capabilities), and continues every other call: the
//! kernel then runs it under the command's own confinement, granting nothing.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use super::freshen;
use super::packed_refs::{self, CommonDir, Op};
use crate::gate::filter::Traps;
use crate::gate::handler::{Gatekeeper, Handler, Installer, Reply};
use crate::gate::notify::Notif;

/// git's `packed-refs` lock protocol (or the rename of an unchanged `config`) in one
/// directory.
pub(crate) struct LockProtocol {
    /// The directory.
    common: CommonDir,
    /// The whole protocol is performed (a linked worktree's common dir); else only the rename
    /// of an unchanged `config.lock` onto `config` is answered (a main worktree's `.git`).
    whole: bool,
    /// git's `chmod` of the `config.lock` made here is performed too (the namespace backends
    /// bind the directory read-only).
    chmods: bool,
}

impl LockProtocol {
    /// The whole protocol in `common` (with `chmods` where the directory is a read-only bind).
    pub(crate) fn whole(common: CommonDir, chmods: bool) -> LockProtocol {
        LockProtocol {
            common,
            whole: true,
            chmods,
        }
    }

    /// Only the rename of an unchanged `config.lock` onto `config` in `dir`.
    pub(crate) fn config_renames(dir: CommonDir) -> LockProtocol {
        LockProtocol {
            common: dir,
            whole: false,
            chmods: false,
        }
    }
}

impl Handler for LockProtocol {
    fn traps(&self) -> Traps {
        Traps {
            creates: self.whole,
            renames: !self.whole,
            chmods: self.chmods,
            ..Traps::NONE
        }
    }

    fn started(&mut self, installer: &Installer) {
        if self.whole && !installer.available() {
            // Every kernel with Landlock has it (5.9 < 5.13); a backport without it keeps the
            // behaviour of a run without these traps.
            eprintln!("shofer-sandbox: note: git's packed-refs.lock is not created for the command: the kernel lacks SECCOMP_IOCTL_NOTIF_ADDFD (Linux 5.9); git cannot delete refs here");
        }
    }

    /// A trapped `open`/`rename`/`unlink`/`chmod`: performed here when it is exactly a step of
    /// git's `packed-refs` lock protocol in the common dir (or the rename of an unchanged
    /// `config`), else continued (the kernel runs it under the command's Landlock domain or
    /// mount namespace; nothing is granted by that).
    fn handle(&mut self, gate: &mut dyn Gatekeeper, n: &Notif) -> Reply {
        let pid = n.pid;
        let op = packed_refs::decide(pid, n.nr, &n.args, &self.common, &mut |fd| {
            gate.caller_fd(pid, fd)
        });
        let Some(op) = op else {
            return Reply::Continue;
        };
        let installer = gate.installer();
        let performed = match op {
            Op::KeepConfig => true,
            Op::Create { .. } => self.whole && installer.available(),
            _ => self.whole,
        };
        if !performed {
            return Reply::Continue;
        }
        if !gate.still_valid(n) {
            return Reply::Later; // /proc/PID may have named another process meanwhile
        }
        let Some(umask) = packed_refs::umask_of(pid) else {
            return Reply::Continue;
        };
        let Ok(dir) = self.common.fd.try_clone() else {
            return Reply::Now(Err(libc::EMFILE));
        };
        let made = Arc::clone(&self.common.made);
        let id = n.id;
        // With the whole protocol performed here, the command's names are the ones made here;
        // a main worktree's config.lock is the command's own (the kernel made it).
        let only_made = self.whole;
        gate.perform_as_caller(
            n,
            Box::new(move || perform(&dir, op, umask, only_made, &made, id, &installer)),
        )
    }
}

/// Performs `op` in `dir` for notification `id`; `None` once a created file was installed in
/// the caller (which answered the call).
fn perform(
    dir: &OwnedFd,
    op: Op,
    umask: u32,
    only_made: bool,
    made: &packed_refs::Made,
    id: u64,
    installer: &Installer,
) -> Option<Result<i64, i32>> {
    let d = dir.as_fd();
    let theirs = match &op {
        Op::Rename { from: name } | Op::Unlink { name } | Op::Chmod { name, .. } => Some(*name),
        Op::KeepConfig => Some(packed_refs::CONFIG_LOCK),
        Op::Create { .. } => None,
    };
    let ident = match theirs.filter(|_| only_made) {
        Some(name) => match packed_refs::made_here(d, name, made) {
            Some(ident) => Some(ident),
            None => return Some(Err(libc::EACCES)),
        },
        None => None,
    };
    // Once gone from the lock names (removed, or renamed onto packed-refs or config), it
    // leaves the list, which so holds what is there now, a few files at most.
    let leaves = !matches!(op, Op::Create { .. } | Op::Chmod { .. });
    let done = match op {
        Op::Create { name, flags, mode } => {
            let fd = match packed_refs::create(d, name, flags, mode, umask) {
                Ok(fd) => fd,
                Err(e) => return Some(Err(e)),
            };
            if let (Ok(ident), Ok(mut m)) =
                (crate::gate::resolve::ident(fd.as_raw_fd()), made.lock())
            {
                m.push(ident);
            }
            let cloexec = flags & libc::O_CLOEXEC != 0;
            match installer.install(id, fd.as_raw_fd(), cloexec) {
                Ok(_) => return None, // answered with the caller's descriptor number
                Err(e) => {
                    // Nobody holds it: no lock may stay behind.
                    let _ = packed_refs::remove(d, name);
                    Err(e)
                }
            }
        }
        Op::Rename { from } => packed_refs::rename(d, from),
        Op::KeepConfig => packed_refs::keep_config(d),
        Op::Unlink { name } => packed_refs::remove(d, name),
        Op::Chmod { name, mode } => packed_refs::chmod(d, name, mode),
    };
    if let (Some(ident), true, Ok(mut m)) = (ident, leaves && done.is_ok(), made.lock()) {
        m.retain(|i| *i != ident);
    }
    Some(done)
}

/// git's freshen of an object in the read-only store of the object quarantine.
pub(crate) struct Freshen(pub freshen::Store);

impl Handler for Freshen {
    fn traps(&self) -> Traps {
        Traps {
            touches: true,
            ..Traps::NONE
        }
    }

    /// A trapped `utimensat`: performed on the store's file when it is git's freshen of an
    /// object of the quarantine's read-only store, else continued.
    fn handle(&mut self, gate: &mut dyn Gatekeeper, n: &Notif) -> Reply {
        let Some(target) = freshen::decide(n.pid, &n.args, &self.0) else {
            return Reply::Continue;
        };
        if !gate.still_valid(n) {
            return Reply::Later; // /proc/PID may have named another process meanwhile
        }
        gate.perform_as_caller(n, Box::new(move || Some(freshen::perform(&target))))
    }
}
