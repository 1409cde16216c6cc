//! Stopping the process tree: every descendant of the supervisor, killed by the shared tree
//! killer ([`shofer_sys::kill`]: SIGTERM per process group where a group can only hold
//! descendants, SIGCONT to stopped ones, the grace period, then SIGKILL until a scan finds
//! none; every signal through a pidfd after re-checking the process's start time, so a
//! recycled PID is never signalled).

use std::time::Duration;

use shofer_sys::kill::{self, Descendants, Targets};
use shofer_sys::proc::{ProcInfo, ProcTable};

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
