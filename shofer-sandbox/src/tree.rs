//! Stopping the process tree: every descendant of the supervisor, killed by the shared tree
//! killer ([`shofer_sys::kill`]: SIGTERM per process group where a group can only hold
//! descendants, SIGCONT to stopped ones, the grace period, then SIGKILL until a scan finds
//! none; every signal through a pidfd after re-checking the process's start time, so a
//! recycled PID is never signalled).

use std::time::Duration;

use shofer_sys::kill::{self, Descendants, Targets};
use shofer_sys::proc::{ProcInfo, ProcTable};

/// Grace between SIGTERM and SIGKILL when the tree is stopped.
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(250);

/// The supervisor's descendants, with a hook run before every scan is used (the supervisor
/// reaps its children there, recording the main process's status).
struct Below<F> {
    all: Descendants,
    before_select: F,
}

impl<F: FnMut()> Targets for Below<F> {
    fn select(&mut self, table: &ProcTable) -> Vec<ProcInfo> {
        (self.before_select)();
        self.all.select(table)
    }

    fn owns_session(&self, sid: i32) -> bool {
        // The supervisor is a child subreaper: a session any descendant created holds only
        // descendants.
        self.all.owns_session(sid)
    }
}

/// Kills every descendant of this process (see the module docs), calling `reap` on every
/// round. Returns when a scan finds no live descendant, or after [`kill::GIVE_UP`] of SIGKILL
/// rounds (processes of another user), reporting whether any survived.
pub(crate) fn kill_descendants(grace: Duration, reap: impl FnMut()) -> bool {
    let mut targets = Below {
        all: Descendants::of_self(),
        before_select: reap,
    };
    kill::kill(&mut targets, grace).survivors.is_empty()
}

/// Kills every descendant ([`kill_descendants`]) until no child is left, calling `reap`
/// (which reaps every exited child and returns true when none is left) before each scan and
/// after each round; waits for SIGCHLD (blocked) when only zombies were left.
pub(crate) fn end_all(grace: Duration, reap: &mut dyn FnMut() -> bool) {
    if reap() {
        return;
    }
    loop {
        let mut none_left = false;
        let all_dead = kill_descendants(grace, || none_left = reap());
        // The last zombies are reaped here; survivors (another user's processes) get
        // another round of the killer.
        if none_left || (all_dead && reap()) {
            return;
        }
        if all_dead {
            wait_sigchld(Duration::from_millis(10));
        }
    }
}

/// Waits up to `timeout` for SIGCHLD, which the caller has blocked.
fn wait_sigchld(timeout: Duration) {
    let chld = shofer_sys::process::sigset(&[libc::SIGCHLD]);
    shofer_sys::signal::timed_wait(&chld, timeout);
}
