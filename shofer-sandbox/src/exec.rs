//! The command's exec-time sequence: what the child does between `clone` and `execve`, in
//! this order, each step reported back as a [`Stage`] if it fails:
//!
//! 1. default signal dispositions and the caller's signal mask;
//! 2. a new session unless interactive (no controlling terminal, one process group to
//!    signal);
//! 3. its death signal (SIGKILL), and a check that the expected parent is still there;
//! 4. every descriptor above 2 marked close-on-exec except the passed ones;
//! 5. `no_new_privs` (seccomp and Landlock need it without `CAP_SYS_ADMIN`, and it keeps a
//!    setuid program from regaining what is dropped next);
//! 6. the capability drop;
//! 7. the [`seccomp`] filter against terminal injection;
//! 8. **the seccomp user-notification gate's place** (see below);
//! 9. the Landlock ruleset, last: after it this process can no longer write its own setup;
//! 10. `execve` through the `$PATH` search of [`path_search::exec`].
//!
//! # Where a seccomp user-notification gate plugs in
//! A gate (issue 10: mediate `connect()` to pathname unix sockets below Landlock ABI 9) needs
//! two pieces, and both places are marked `HOOK(seccomp-notify)` in the code:
//! - **child side**, step 8 in [`run`]: after `no_new_privs` and the TIOCSTI filter, before
//!   Landlock, install a filter with `SECCOMP_FILTER_FLAG_NEW_LISTENER` and send the listener
//!   descriptor to the supervisor (`SCM_RIGHTS` over a socketpair created before `clone`,
//!   whose child end is passed here like the failure pipe). The child must not wait for an
//!   answer: with `CLONE_VFORK` the supervisor is suspended until `execve`. A failure is a
//!   new [`Stage`], reported like the others.
//! - **supervisor side**, in [`crate::supervise`] right after the spawn succeeded: receive the
//!   listener and serve its notifications (e.g. on a thread) until the tree is gone; the wait
//!   loop itself stays signal-driven.
//!
//! For the namespace backends the same child sequence runs in process B, so the gate covers
//! them too; A only forwards the socket's child end.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

use landlock::RulesetCreated;

use crate::plan::{CapPolicy, Confinement, ExecSpec};
use crate::spawn::{report_failure, Stage};
use crate::supervise::FORWARDED;
use crate::{capabilities, path_search, seccomp, sys};

/// What the child does, derived from the plan by [`Steps::of`] (before `clone`, so the child
/// only reads it).
#[derive(Clone)]
pub(crate) struct Steps<'a> {
    /// What `execve` runs (the command, or bubblewrap in front of it).
    pub argv: &'a [CString],
    /// Descriptors above 2 that survive exec.
    pub keep_fds: Vec<RawFd>,
    /// Keep the caller's session.
    pub interactive: bool,
    /// Set `no_new_privs` (off only in front of a setuid bubblewrap).
    pub no_new_privs: bool,
    /// Drop every capability.
    pub drop_caps: bool,
    /// Install the TIOCSTI/TIOCLINUX filter (needs `no_new_privs` unless privileged).
    pub seccomp: bool,
    /// The Landlock ruleset to apply last.
    pub landlock: Option<&'a RulesetCreated>,
}

impl<'a> Steps<'a> {
    /// The one place where a backend's variant decides the child's sequence.
    pub fn of(spec: &'a ExecSpec, confinement: &'a Confinement<'_>) -> Steps<'a> {
        let drop = spec.caps == CapPolicy::Drop;
        let mut steps = Steps {
            argv: &spec.argv,
            keep_fds: spec.pass_fds.clone(),
            interactive: spec.interactive,
            no_new_privs: true,
            drop_caps: drop,
            seccomp: seccomp::FILTER_AVAILABLE,
            landlock: None,
        };
        match confinement {
            Confinement::Landlock(l) => {
                steps.drop_caps = drop && l.caller_privileged;
                steps.landlock = Some(&l.ruleset);
            }
            // In a user namespace the command holds capabilities there until exec: drop them
            // whoever the caller is.
            Confinement::Namespaces(ns) => {
                steps.landlock = ns.landlock.as_ref().map(|l| &l.ruleset);
            }
            // bubblewrap needs its privileges to build the sandbox and drops the command's
            // itself (`--cap-drop ALL`); a setuid one must not run under no_new_privs.
            Confinement::Bwrap(b) => {
                steps.argv = &b.argv;
                steps.keep_fds.extend(b.inherited_fds());
                steps.drop_caps = false;
                steps.no_new_privs = !b.setuid;
                steps.seccomp &= !b.setuid;
            }
        }
        steps
    }
}

/// The child between `clone` and `execve`. Never returns: it execs or exits 125 after
/// writing the failed [`Stage`] to `err`.
pub(crate) fn run(
    steps: &Steps<'_>,
    expected_parent: libc::pid_t,
    old_mask: &libc::sigset_t,
    err: RawFd,
) -> ! {
    let fail = |stage: Stage, e: io::Error| -> ! { report_failure(err, stage, e) };
    let check = |stage: Stage, ret: libc::c_int| {
        if ret != 0 {
            fail(stage, io::Error::last_os_error());
        }
    };

    // Safety: restoring default dispositions and the caller's signal mask; valid arguments.
    unsafe {
        for s in [libc::SIGPIPE, libc::SIGCHLD, libc::SIGTERM]
            .into_iter()
            .chain(FORWARDED)
        {
            libc::signal(s, libc::SIG_DFL);
        }
        libc::sigprocmask(libc::SIG_SETMASK, old_mask, std::ptr::null_mut());
    }
    if !steps.interactive {
        // A new session: no controlling terminal, and a process group we can signal whole.
        // Safety: setsid takes no arguments.
        if unsafe { libc::setsid() } < 0 {
            fail(Stage::Session, io::Error::last_os_error());
        }
    }
    // Safety: prctl/getppid with integer arguments.
    unsafe {
        check(
            Stage::DeathSignal,
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0),
        );
        if libc::getppid() != expected_parent {
            libc::_exit(125);
        }
    }
    if let Err(e) = sys::cloexec_from_3(&steps.keep_fds) {
        fail(Stage::Descriptors, e);
    }
    if steps.no_new_privs {
        // Safety: prctl with integer arguments.
        check(Stage::NoNewPrivs, unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        });
    }
    if steps.drop_caps {
        if let Err(e) = capabilities::drop_all() {
            fail(Stage::Capabilities, e);
        }
    }
    if steps.seccomp {
        // Only x86-64 has the filter; elsewhere `steps.seccomp` is always false.
        #[cfg(target_arch = "x86_64")]
        if let Err(e) = seccomp::refuse_terminal_injection() {
            fail(Stage::Seccomp, e);
        }
    }
    // HOOK(seccomp-notify): install the notify filter and send its listener to the
    // supervisor here (module docs).
    if let Some(ruleset) = steps.landlock {
        // A duplicate of the descriptor: the plan stays the supervisor's, in its memory.
        let applied = ruleset
            .try_clone()
            .map_err(|e| io::Error::other(e.to_string()))
            .and_then(|r| {
                r.restrict_self()
                    .map_err(|e| io::Error::other(e.to_string()))
            });
        match applied {
            Ok(status) if status.ruleset == landlock::RulesetStatus::FullyEnforced => {}
            Ok(_) => fail(
                Stage::Landlock,
                io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            ),
            Err(e) => fail(Stage::Landlock, e),
        }
    }
    let e = path_search::exec(steps.argv);
    fail(Stage::Exec, e)
}
