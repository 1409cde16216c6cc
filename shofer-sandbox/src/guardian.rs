//! The guardian (Landlock backend): the process the caller started stays a small parent of
//! the supervisor, so that a supervisor that dies anyway — SIGKILLed, aborted — still takes
//! the command's whole tree with it (issue 29; docs/ARCHITECTURE.md §2.2).
//!
//! Entry point: [`split`], called once just before the command is planned and spawned. It
//! returns only in the child, which goes on as the supervisor; the original process becomes
//! the guardian and never returns. It must never do more than below: no threads, no
//! allocation after the fork that a copied lock could block, nothing the supervisor owns.
//!
//! # How
//! - **Why a second process**: without a PID namespace nothing kills a tree whose supervisor
//!   died: the supervisor is a child subreaper, and when it dies its orphans go to the next
//!   subreaper up, or init. The namespace backends do not need this: their command runs
//!   below PID 1 of a PID namespace (process A), whose death kills every process in it, and
//!   A dies with the supervisor (`PR_SET_PDEATHSIG(SIGKILL)`).
//! - **Order**: the fork happens while the process is still single-threaded (before the git
//!   watcher and the unix-socket gate start their threads), after the guardian has
//!   - blocked the signals it takes with `sigwaitinfo` (so none is lost between the fork and
//!     its wait; the caller's mask goes to [`crate::spawn`] for the command),
//!   - become a child subreaper (`PR_SET_CHILD_SUBREAPER`, Linux 3.4): every orphan of the
//!     run, the supervisor's own descendants included, is re-parented to the guardian once
//!     the supervisor is gone,
//!   - taken `PR_SET_PDEATHSIG(SIGTERM)` towards the caller (as the supervisor did before):
//!     the caller's death reaches the supervisor as a forwarded SIGTERM.
//! - **Supervisor (the child)**: sets `PR_SET_PDEATHSIG(SIGTERM)` towards the guardian and
//!   checks the guardian is still its parent, so a SIGKILL of the caller's pid makes the
//!   supervisor stop the tree as on SIGTERM; a non-interactive run's supervisor also takes a
//!   process group of its own, so that a SIGKILL of the caller's process group (`kill -9
//!   %1`, `timeout -s KILL`) reaches the guardian only. (An interactive command must stay in
//!   the terminal's foreground group, which is the guardian's.)
//! - **Guardian (the parent)**: non-dumpable (no ptrace, no core), every descriptor closed
//!   (it holds none of the caller's pipes, the `--report` or `--status-fd` descriptors, or a
//!   lock), then it blocks in `sigwaitinfo`: SIGTERM and the forwarded signals
//!   ([`crate::signals::FORWARDED`]) go to the supervisor — except one the terminal sent
//!   to the whole foreground group (`SI_KERNEL`), which the supervisor got too — and SIGCHLD
//!   reaps. When the supervisor has died by a signal, every descendant left is killed by the
//!   tree killer ([`crate::tree::end_all`]: SIGTERM, grace, SIGKILL, until no child is left);
//!   one that exited has ended the tree itself (it exits only when no child of its is left),
//!   so its exit costs no wait for its last helper. The guardian then ends as the supervisor
//!   did: the same exit code, or the same signal (its
//!   default action restored, unblocked, raised), so the caller sees the status it saw
//!   before.
//!
//! # Caveats
//! - The command cannot signal the guardian or the supervisor from Landlock ABI 6 (signal
//!   scoping). Below ABI 6 it can: killing either one still ends the tree (the supervisor's
//!   death signal, the guardian's cleanup) — a stop the command inflicts on itself — but
//!   killing both together lets its descendants outlive the run, so `sigkill_kills_tree` is
//!   reported not enforced below ABI 6 (`shofer_core::policy`).
//! - A caller that kills the guardian and the supervisor at once (both pids, or the process
//!   group of an interactive run, which holds both) leaves the command's other sessions
//!   running, as before.
//! - The supervisor's end-of-run work (the git restore, the closing `--report` records) does
//!   not run when it is killed; the git guard's journal is finished by the next run or
//!   `--repair`, and with the guardian no process of the run is left to change a file again.

use crate::error::SetupError;
use crate::signals::FORWARDED;
use rustix::process::{Pid, Signal};
use shofer_core::policy::Backend;
use shofer_sys::process::sigset;
use shofer_sys::signal::{self, How};

/// On the Landlock backend, forks: the child returns the caller's signal mask (for the
/// command: the guardian blocked its signals before the fork) and goes on as the supervisor;
/// the original process becomes the guardian and never returns. Any other backend returns
/// `None` at once. `interactive`: the command keeps the caller's terminal (and so the supervisor stays
/// in the caller's process group).
///
/// # Errors
/// `prctl`, `sigprocmask` or `fork` failed, or the caller (or, in the child, the guardian)
/// exited before the death signal was set ([`SetupError::CallerExited`]); the command has not
/// started.
pub(crate) fn split(
    backend: Backend,
    interactive: bool,
) -> Result<Option<libc::sigset_t>, SetupError> {
    if backend != Backend::Landlock {
        return Ok(None);
    }
    debug_assert!(
        single_threaded(),
        "the guardian forks before any thread starts"
    );
    crate::spawn::reaper_dying_with_parent()?;
    let mut handled = vec![libc::SIGCHLD, libc::SIGTERM];
    handled.extend(FORWARDED);
    let set = sigset(&handled);
    // Blocking only defers delivery.
    let old = signal::process_mask(How::Block, &set).map_err(|source| SetupError::Syscall {
        op: "sigprocmask",
        source,
    })?;
    let guardian = rustix::process::getpid();
    // Raw libc: rustix has no fork(2) outside its experimental runtime API.
    // Safety: this process is single-threaded (asserted above), so the child's copy of every
    // lock is consistent; the parent branch never returns into the code that follows.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = SetupError::last_os("fork (the guardian)");
        let _ = signal::process_mask(How::Set, &old);
        return Err(e);
    }
    if pid > 0 {
        guard(pid, &set, interactive)
    }
    // The supervisor: it dies with the guardian, which must still be there.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::TERM));
    if rustix::process::getppid() != Some(guardian) {
        return Err(SetupError::CallerExited);
    }
    if !interactive {
        let _ = rustix::process::setpgid(None, None);
    }
    Ok(Some(old))
}

/// Whether this process has one thread (`/proc/self/task`). A thread that was just joined
/// may still be listed for a moment while the kernel releases it: wait up to 100 ms.
fn single_threaded() -> bool {
    for _ in 0..100 {
        match std::fs::read_dir("/proc/self/task").map(Iterator::count) {
            Ok(n) if n > 1 => std::thread::sleep(std::time::Duration::from_millis(1)),
            _ => return true, // one thread, or no /proc to check with
        }
    }
    false
}

/// The guardian's life: forward signals to `supervisor` until it exits, kill every process
/// left below, end as it ended.
fn guard(supervisor: libc::pid_t, set: &libc::sigset_t, interactive: bool) -> ! {
    // Safety: prctl with integer arguments; close_range on our own table (the guardian uses
    // no descriptor it holds now: the tree killer opens what it needs).
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        shofer_sys::fd::close_from(0, shofer_sys::fd::CloseFrom::Close);
    }
    let session_leader = shofer_sys::process::session_id() == shofer_sys::process::getpid();
    let status = loop {
        // `set` holds only signals blocked in this process.
        let (sig, code) = signal::wait_info(set).unwrap_or((-1, 0));
        if sig == libc::SIGCHLD {
            if let (Some(status), _) = reap(supervisor) {
                break status;
            }
        } else if sig > 0 {
            // The terminal sends its signals to the whole foreground process group, which
            // holds the supervisor of an interactive run; a hangup's SIGHUP goes to the
            // session leader only.
            let from_terminal = code == libc::SI_KERNEL;
            let reached_it = interactive && !(sig == libc::SIGHUP && session_leader);
            if !(from_terminal && reached_it) {
                // Signalling our child, not yet reaped (its pid cannot be reused).
                if let (Some(pid), Some(sig)) =
                    (Pid::from_raw(supervisor), Signal::from_named_raw(sig))
                {
                    let _ = rustix::process::kill_process(pid, sig);
                }
            }
        }
    };
    // A supervisor that exited, rather than died by a signal, has ended the tree itself: it
    // exits only once waitpid reports no child left, and as a subreaper it has every
    // descendant below a child. What may be left is its own helper (the close of the git
    // watcher's inotify instance, 5-25 ms in the kernel: waiting for it would cost every run
    // in a git worktree that much), so nothing is killed or waited for. After a signal, any
    // of the run's processes may be left: all are killed and reaped.
    if !libc::WIFEXITED(status) {
        crate::tree::end_all(crate::tree::KILL_GRACE, &mut || reap(0).1);
    }
    let code = if libc::WIFSIGNALED(status) {
        // Default action restored, unblocked, raised; non-dumpable: no core.
        crate::signals::die_by_signal(libc::WTERMSIG(status))
    } else if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        crate::signals::EXIT_SETUP
    };
    // _exit runs nothing of the supervisor's state we hold a copy of.
    signal::exit_now(code)
}

/// Reaps every exited child. Returns the raw wait status of `supervisor` if it was among
/// them, and whether no child is left.
fn reap(supervisor: libc::pid_t) -> (Option<i32>, bool) {
    let mut found = None;
    loop {
        let (pid, status) = crate::signals::reap_any();
        if pid == 0 {
            return (found, false);
        }
        if pid < 0 {
            return (found, true); // ECHILD
        }
        if pid == supervisor {
            found = Some(status);
        }
    }
}
