//! This process's place in the process tree: the child-subreaper flag, reaping, its pid.

use std::io;

use rustix::process::{Pid, WaitOptions};

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`, Linux 3.4, prctl(2)):
/// orphaned descendants — a `setsid` or double-forked daemon whose parent exited — are
/// re-parented to us instead of to init, so they stay below us and findable by
/// [`crate::ProcTable::descendants`].
///
/// # Errors
/// As `prctl(2)`.
pub fn set_child_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Pid::from_raw(1)).map_err(Into::into)
}

/// Whether this process is a child subreaper (`PR_GET_CHILD_SUBREAPER`); false when the
/// kernel cannot say.
pub fn is_child_subreaper() -> bool {
    rustix::process::child_subreaper().is_ok_and(|p| p.is_some())
}

/// Reaps the child `pid` if it has exited (`waitpid(pid, WNOHANG)`). For orphans re-parented
/// to us, never for a child someone else waits on (tokio, `std::process::Child`).
pub fn reap(pid: i32) {
    if let Some(pid) = self::pid(pid) {
        let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
    }
}

/// `raw` as a rustix [`Pid`], `None` unless positive (rustix asserts a pid is not negative;
/// 0 and negative numbers name groups or "any" in kill(2)/waitpid(2), never one process).
pub fn pid(raw: i32) -> Option<Pid> {
    if raw > 0 {
        Pid::from_raw(raw)
    } else {
        None
    }
}

/// This process's pid.
pub fn getpid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}
