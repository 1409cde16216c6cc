//! The process-tree killer: one for the sandbox supervisor, the engine and their tests.
//!
//! # How
//! The caller says which processes are targets ([`Targets::select`], called on every fresh
//! scan, so processes forked meanwhile are found) and which sessions hold targets only
//! ([`Targets::owns_session`]). [`kill`] then
//! 1. sends SIGTERM to every target, and SIGCONT to stopped ones so they can act on it,
//!    rescanning so that processes forked meanwhile get it too, until no target is left or
//!    the grace period ends (one grace period for everything selected, however many trees);
//! 2. sends SIGKILL to every target of the latest scan and rescans, until a scan finds none.
//!    A fork loop converges: SIGKILL reaches the forking parent in the same round as its
//!    latest children, and each round kills what the last one missed.
//!
//! Every signal goes through [`pidfd::signal_if_same`] (pidfd + start time), so a recycled
//! pid is never signalled. Where a target's session holds only targets and the kernel has
//! `PIDFD_SIGNAL_PROCESS_GROUP` (Linux 6.9), its whole process group gets the signal in one
//! call (a session cannot be joined from outside, so the group holds only targets).
//!
//! Killing many trees at once (a server ending its session with 1,000 background commands)
//! is one call with a [`Targets`] that selects all of them: everything gets SIGTERM first,
//! the grace period is shared, then everything gets SIGKILL — never one tree after another.
//!
//! # Not guaranteed
//! - Processes of another user (a setuid program) cannot be signalled (`EPERM`): after
//!   [`GIVE_UP`] of SIGKILL rounds they are reported as survivors.
//! - Zombies are not targets (they are dead already); reaping them is the caller's business
//!   (in [`Targets::select`], which runs before every scan is used).

use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::pidfd;
use crate::proc::{ProcDir, ProcInfo, ProcTable};

/// How long [`kill`] keeps sending SIGKILL before it reports survivors.
pub const GIVE_UP: Duration = Duration::from_secs(10);

/// Pause between SIGTERM rounds (the grace period is not slept in one piece, so it ends as
/// soon as the targets are gone).
const TERM_ROUND: Duration = Duration::from_millis(5);
/// Pause between SIGKILL rounds: long enough for the kernel to tear the processes down.
/// Doubled while a round finds only processes already killed, up to [`MAX_KILL_ROUND`].
const KILL_ROUND: Duration = Duration::from_millis(1);
/// The longest pause between SIGKILL rounds.
const MAX_KILL_ROUND: Duration = Duration::from_millis(16);

/// Which processes [`kill`] kills.
pub trait Targets {
    /// The targets among the processes of a fresh scan. Dead ones (zombies) are dropped by
    /// the killer. Called once per round; a good place to reap zombies.
    fn select(&mut self, table: &ProcTable) -> Vec<ProcInfo>;

    /// Whether every process in session `sid` is a target, so that the whole process group
    /// of a target in it may be signalled in one call. Default: no session.
    fn owns_session(&self, sid: i32) -> bool {
        let _ = sid;
        false
    }
}

/// Every descendant of this process. Its sessions other than ours are owned when this process
/// is a child subreaper (see [`crate::process::set_child_subreaper`]): every ancestor of a
/// descendant, up to us, is then a descendant too, so a session a descendant created holds
/// only descendants.
#[derive(Debug, Clone)]
pub struct Descendants {
    me: i32,
    own_sid: i32,
    subreaper: bool,
}

impl Descendants {
    /// The descendants of the calling process.
    pub fn of_self() -> Descendants {
        let me = crate::process::getpid();
        Descendants {
            me,
            own_sid: crate::proc::read(me).map_or(0, |p| p.sid),
            subreaper: crate::process::is_child_subreaper(),
        }
    }

    /// The pid whose descendants are selected.
    pub fn root(&self) -> i32 {
        self.me
    }
}

impl Targets for Descendants {
    fn select(&mut self, table: &ProcTable) -> Vec<ProcInfo> {
        let procs = table.procs();
        table
            .descendants(self.me)
            .into_iter()
            .map(|i| procs[i])
            .collect()
    }

    fn owns_session(&self, sid: i32) -> bool {
        self.subreaper && self.own_sid != 0 && sid != self.own_sid
    }
}

/// What [`kill`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Distinct processes that were targets (and were signalled).
    pub signalled: usize,
    /// Pids still alive when it gave up (not ours to kill, or unkillable within [`GIVE_UP`]).
    pub survivors: Vec<i32>,
}

/// Kills every target: SIGTERM (+ SIGCONT to stopped ones), up to `grace` (ended early when
/// no target is left; zero skips SIGTERM), then SIGKILL until a scan finds none. Blocking;
/// returns within `grace` + [`GIVE_UP`] plus one scan. See the module docs.
pub fn kill(targets: &mut dyn Targets, grace: Duration) -> KillReport {
    let Ok(dir) = ProcDir::open() else {
        // Without /proc nothing can be found, so nothing can be shown to be gone.
        return KillReport::default();
    };
    let live = |t: &mut dyn Targets| -> Vec<ProcInfo> {
        let mut v = t.select(&ProcTable::new(dir.scan()));
        v.retain(|p| !p.is_dead());
        v
    };
    let mut seen: Set<(i32, u64)> = Set::default();
    let mut members = live(targets);
    let start = Instant::now();
    if !grace.is_zero() {
        let mut termed: Set<(i32, u64)> = Set::default();
        loop {
            if members.is_empty() {
                return KillReport {
                    signalled: termed.len(),
                    survivors: Vec::new(),
                };
            }
            // Groups holding a target that has not had SIGTERM yet get it (the others in such
            // a group may get it twice; a pending signal is not queued twice).
            let fresh: Vec<ProcInfo> = members
                .iter()
                .filter(|p| termed.insert(p.identity()))
                .copied()
                .collect();
            signal_round(&dir, &*targets, &fresh, Signal::TERM);
            for p in members.iter().filter(|p| p.is_stopped()) {
                pidfd::signal_if_same(&dir, p, Signal::CONT);
            }
            std::thread::sleep(grace.saturating_sub(start.elapsed()).min(TERM_ROUND));
            members = live(targets);
            if start.elapsed() >= grace {
                seen = termed;
                break;
            }
        }
    }
    let kill_start = Instant::now();
    let mut survivors = Vec::new();
    let mut killed: Set<(i32, u64)> = Set::default();
    let mut pause = KILL_ROUND;
    while !members.is_empty() {
        if kill_start.elapsed() > GIVE_UP {
            survivors = members.iter().map(|p| p.pid).collect();
            break;
        }
        for p in &members {
            seen.insert(p.identity());
        }
        // A process that has had SIGKILL is dying: signalling it again and rescanning at once
        // only takes CPU from the teardown of thousands. New ones (forked meanwhile) get it
        // at once; everything again once the pause has grown (in case a signal failed).
        let fresh: Vec<ProcInfo> = members
            .iter()
            .filter(|p| killed.insert(p.identity()))
            .copied()
            .collect();
        if fresh.is_empty() && pause < MAX_KILL_ROUND {
            pause *= 2;
        } else {
            let again = fresh.is_empty();
            signal_round(
                &dir,
                &*targets,
                if again { &members } else { &fresh },
                Signal::KILL,
            );
            pause = KILL_ROUND;
        }
        std::thread::sleep(pause);
        members = live(targets);
    }
    KillReport {
        signalled: seen.len(),
        survivors,
    }
}

/// Sends `sig` to each of `procs`: one call per process group where the group may be signalled
/// whole, else one per process. Members that left their group meanwhile are found by the
/// next scan.
fn signal_round(dir: &ProcDir, targets: &dyn Targets, procs: &[ProcInfo], sig: Signal) {
    let mut groups_done: Set<i32> = Set::default();
    // Groups that could not be signalled whole (their leader gone): asked once per round.
    let mut groups_failed: Set<i32> = Set::default();
    for p in procs {
        if groups_done.contains(p.pgid) {
            continue;
        }
        if targets.owns_session(p.sid)
            && !groups_failed.contains(p.pgid)
            && pidfd::signal_group_if_same(dir, p, sig, |q| targets.owns_session(q.sid))
        {
            groups_done.insert(p.pgid);
        } else {
            groups_failed.insert(p.pgid);
            pidfd::signal_if_same(dir, p, sig);
        }
    }
}

/// A set as a sorted list: a few thousand entries at most, and less code in the static
/// sandbox binary than a hash set.
#[derive(Default)]
struct Set<T>(Vec<T>);

impl<T: Ord + Copy> Set<T> {
    /// Adds `v`; false when it was there already.
    fn insert(&mut self, v: T) -> bool {
        match self.0.binary_search(&v) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, v);
                true
            }
        }
    }

    fn contains(&self, v: T) -> bool {
        self.0.binary_search(&v).is_ok()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}
