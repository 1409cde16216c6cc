//! Signals and how a process of the sandbox ends.
//!
//! - [`FORWARDED`]: the signals the supervisor, the guardian and the namespaces' init pass on
//!   to the command (one list for all three, and for the child that resets them).
//! - [`wait_status_to_exit`]: a raw wait status as a shell-style exit status.
//! - [`die_by_signal`]: ending this process by the command's signal.
//! - [`EXIT_SETUP`]: the status of a sandbox that could not be set up.
//!
//! A leaf: it imports no other module of the crate, so every process of the spawn path
//! ([`crate::spawn`], [`crate::exec`], [`crate::namespaces::init`], [`crate::supervise`],
//! [`crate::guardian`]) can use it.

use std::io::Write;

use rustix::process::DumpableBehavior;
use shofer_sys::signal::{self, How};

/// Exit status when the sandbox could not be set up (docs/ARCHITECTURE.md).
pub const EXIT_SETUP: i32 = 125;

/// Signals forwarded to the command.
pub(crate) const FORWARDED: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGWINCH,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Ends this process by signal `sig`, as the command ended, so the caller's shell sees what it
/// would have seen without the sandbox (a `for` loop stops on Ctrl-C: bash breaks out only
/// when its child *died* by SIGINT, not when it exited 130). No core dump is written
/// (`PR_SET_DUMPABLE` 0 stops dumps to files and to a `core_pattern` pipe alike), and the
/// signal is unblocked and its default action restored first. Returns 128+`sig` only if the
/// signal's default action does not end a process.
pub(crate) fn die_by_signal(sig: i32) -> i32 {
    let _ = std::io::stdout().flush();
    let _ = rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable);
    signal::set_default(sig);
    let set = shofer_sys::process::sigset(&[sig]);
    // Raw libc: `sig` may be a real-time signal, which rustix's `Signal` names only unsafely.
    // Safety: kill of this very process with the signal it is to die by.
    unsafe { libc::kill(libc::getpid(), sig) };
    let _ = signal::process_mask(How::Unblock, &set);
    128 + sig
}

/// Maps a raw `waitpid` status to a shell-style exit status: the exit code, or 128+N for a
/// process killed by signal N (as bash and bubblewrap report it).
pub(crate) fn wait_status_to_exit(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        EXIT_SETUP
    }
}

/// `waitpid(-1, WNOHANG)` in the raw call's terms: (pid, raw wait status) of one child that
/// changed state; pid 0 when none has, -1 on failure (`ECHILD`: no child is left).
pub(crate) fn reap_any() -> (libc::pid_t, i32) {
    // rustix::process::wait is waitpid(-1); its waitpid(None) would be waitpid(0), the group.
    match rustix::process::wait(rustix::process::WaitOptions::NOHANG) {
        Ok(Some((pid, status))) => (pid.as_raw_nonzero().get(), status.as_raw()),
        Ok(None) => (0, 0),
        Err(_) => (-1, 0),
    }
}
