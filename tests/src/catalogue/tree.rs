//! Host side — the process tree: descendants that try to outlive the command (setsid, double fork,
//! ignored or answered SIGTERM), and the sleeper processes they leave.

use super::{nothing, reap_marked, Case, Scope};
use crate::attacks::Attack;
use crate::runner::{marked, Cmd, Ctx, Outcome, Sb};
use crate::sys;
use shofer_core::policy::Protection;
use std::time::{Duration, Instant};

/// This family's cases, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "setsid-escape",
            "a setsid() child outlives the command",
            None,
            |c| tree_case(c, Attack::SetsidEscape)
        ),
        case!(
            "double-fork-escape",
            "a double-forked grandchild outlives the command",
            None,
            |c| tree_case(c, Attack::DoubleForkEscape)
        ),
        case!(
            "sigterm-ignoring-descendant",
            "a descendant ignoring SIGTERM/SIGHUP outlives the command",
            None,
            |c| tree_case(c, Attack::SigtermIgnoringDescendant)
        ),
        case!(
            "respawn-on-sigterm",
            "a descendant that forks a fresh copy of itself on every SIGTERM/SIGHUP",
            None,
            |c| tree_spawn(c, &["respawn"])
        ),
        case!(
            "deep-tree-escape",
            "a chain of 5 setsid()/SIGTERM-ignoring processes, each the parent of the next",
            None,
            |c| tree_spawn(c, &["deep", "5"])
        ),
        case!(
            "supervisor-sigterm",
            "SIGTERM to shofer-sandbox kills the whole tree",
            None,
            supervisor_sigterm
        ),
        case!(
            "sandbox-sigkill",
            "SIGKILL to shofer-sandbox (the pid its caller knows) while a child of the command runs",
            Some(Protection::SigkillKillsTree),
            sandbox_sigkill
        ),
        case!(
            "supervisor-sigkill",
            "issue 34: SIGKILL from outside to the command's own supervisor (its parent), not the pid the caller knows",
            Some(Protection::SigkillKillsTree),
            supervisor_sigkill
        ),
        case!(
            "parent-death",
            "the caller of shofer-sandbox is SIGKILLed: the tree dies too",
            None,
            parent_death
        ),
    ]
}

fn tree_case(c: &Ctx, attack: Attack) -> Outcome {
    let marker = c.w.marker();
    let me = c.w.me.display().to_string();
    let run = c.sb(Sb::new(Cmd::Attack(attack, vec![me, marker.clone()])));
    let left = reap_marked(&marker);
    if !left.is_empty() {
        return Outcome::Escaped(format!(
            "after shofer-sandbox exited, pids {left:?} with the marker were still alive ({})",
            run.how()
        ));
    }
    match run.outcome() {
        Outcome::Works(d) => Outcome::Blocked(format!(
            "{d}; nothing with the marker alive after the sandbox exited"
        )),
        o => o,
    }
}

fn tree_spawn(c: &Ctx, mode: &[&str]) -> Outcome {
    let marker = c.w.marker();
    let mut args = vec![c.w.me.display().to_string(), marker.clone()];
    args.extend(mode.iter().map(|s| s.to_string()));
    let run = c.sb(Sb::new(Cmd::Attack(Attack::SpawnThenExit, args)));
    // Give a respawned copy the chance to show up.
    std::thread::sleep(Duration::from_millis(150));
    let left = reap_marked(&marker);
    if !left.is_empty() {
        // Respawners keep forking: sweep a few more times.
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(20));
            reap_marked(&marker);
        }
        return Outcome::Escaped(format!(
            "after shofer-sandbox exited, pids {left:?} with the marker were alive ({})",
            run.how()
        ));
    }
    match run.outcome() {
        Outcome::Works(d) => Outcome::Blocked(format!(
            "{d}; nothing with the marker alive after the sandbox exited"
        )),
        o => o,
    }
}

/// Runs a command that builds a tree of marked processes and waits; `sig` goes to
/// shofer-sandbox 400 ms in. Returns the tree's marker and the run.
fn tree_then_signal(c: &Ctx, sig: i32) -> (String, crate::runner::Run) {
    let marker = c.w.marker();
    let me = c.w.me.display().to_string();
    let mut spec = Sb::new(Cmd::Attack(Attack::TreeThenWait, vec![me, marker.clone()]));
    spec.timeout = Duration::from_secs(15);
    spec.during = Some(Box::new(move |pid| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            let _ = sys::kill(pid, sig);
        });
    }));
    (marker, c.sb(spec))
}

fn supervisor_sigterm(c: &Ctx) -> Outcome {
    let (marker, run) = tree_then_signal(c, libc::SIGTERM);
    let left = reap_marked(&marker);
    if !left.is_empty() {
        return Outcome::Escaped(format!(
            "after SIGTERM to shofer-sandbox, pids {left:?} were still alive ({})",
            run.how()
        ));
    }
    if run.timed_out {
        return Outcome::Escaped("shofer-sandbox did not stop on SIGTERM".into());
    }
    Outcome::Blocked(format!("the tree is gone after SIGTERM ({})", run.how()))
}

/// Issue 29: on Landlock (no PID namespace) the guardian, the process the caller started,
/// kills the tree when it or the supervisor below it is killed.
fn sandbox_sigkill(c: &Ctx) -> Outcome {
    let (marker, run) = tree_then_signal(c, libc::SIGKILL);
    if run.timed_out {
        reap_marked(&marker);
        return Outcome::Error(format!(
            "shofer-sandbox outlived its SIGKILL ({})",
            run.how()
        ));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if marked(&marker).is_empty() {
            return Outcome::Blocked(format!(
                "the tree was gone {} ms after shofer-sandbox was SIGKILLed",
                start.elapsed().as_millis()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = reap_marked(&marker);
    Outcome::Escaped(format!(
        "5 s after shofer-sandbox was SIGKILLed, pids {left:?} of its tree were alive ({})",
        run.how()
    ))
}

/// The parent (in this PID namespace) of the command started with `marker`: the first
/// process of `attack`'s tree, whose parent is not of that tree.
fn command_parent(attack: Attack, marker: &str) -> Option<i32> {
    let tree = shofer_sys::proc::live_with_cmdline(|cl| {
        let a: Vec<&[u8]> = cl.split(|b| *b == 0).collect();
        a.get(1) == Some(&&b"attack"[..])
            && a.get(2) == Some(&attack.name().as_bytes())
            && a.contains(&marker.as_bytes())
    });
    tree.iter()
        .find(|p| !tree.iter().any(|q| q.pid == p.ppid))
        .map(|p| p.ppid)
}

/// Issue 34: whatever supervises the command directly (the supervisor below the guardian on
/// Landlock, a namespace's init elsewhere) is SIGKILLed from outside — as the OOM killer or
/// a user's `kill -9` would — while the command has a child: nothing of the tree survives,
/// and shofer-sandbox ends.
fn supervisor_sigkill(c: &Ctx) -> Outcome {
    let marker = c.w.marker();
    let me = c.w.me.display().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut spec = Sb::new(Cmd::Attack(Attack::TreeThenWait, vec![me, marker.clone()]));
    spec.timeout = Duration::from_secs(15);
    let m = marker.clone();
    spec.during = Some(Box::new(move |_| {
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5) {
                // Its child, the sleeper, up too.
                let sleeper = !shofer_sys::proc::live_with_cmdline(|cl| {
                    let a: Vec<&[u8]> = cl.split(|b| *b == 0).collect();
                    a.get(1) == Some(&&b"sleeper"[..]) && a.contains(&m.as_bytes())
                })
                .is_empty();
                if sleeper {
                    if let Some(sup) = command_parent(Attack::TreeThenWait, &m) {
                        // Never the harness (a "sandbox" that execs the command).
                        if sup == std::process::id() as i32 {
                            let _ = tx.send(Ok(0));
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(200));
                        let _ = tx.send(sys::kill(sup, libc::SIGKILL).map(|()| sup));
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    }));
    let run = c.sb(spec);
    let killed = match rx.recv_timeout(Duration::from_secs(1)) {
        Ok(Ok(0)) => {
            reap_marked(&marker);
            return Outcome::Error(format!(
                "the command's parent is the harness itself: no supervisor to kill ({})",
                run.how()
            ));
        }
        Ok(Ok(pid)) => pid,
        Ok(Err(e)) => {
            reap_marked(&marker);
            return Outcome::Error(format!("harness: kill the supervisor: {e} ({})", run.how()));
        }
        Err(_) => {
            reap_marked(&marker);
            return Outcome::Error(format!(
                "harness: the command's tree never showed up ({})",
                run.how()
            ));
        }
    };
    if run.timed_out {
        reap_marked(&marker);
        return Outcome::Escaped(format!(
            "shofer-sandbox did not end after its supervisor {killed} was SIGKILLed ({})",
            run.how()
        ));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if marked(&marker).is_empty() {
            return Outcome::Blocked(format!(
                "the tree was gone {} ms after its supervisor {killed} was SIGKILLed; shofer-sandbox ended ({})",
                start.elapsed().as_millis(),
                run.how()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = reap_marked(&marker);
    Outcome::Escaped(format!(
        "5 s after the supervisor {killed} was SIGKILLed, pids {left:?} of its tree were alive ({})",
        run.how()
    ))
}

fn parent_death(c: &Ctx) -> Outcome {
    // run-wrapped: an intermediate process runs the sandbox and is SIGKILLed.
    let marker = c.w.marker();
    let me = c.w.me.display().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut spec = Sb::new(Cmd::Attack(Attack::TreeThenWait, vec![me, marker.clone()]));
    spec.timeout = Duration::from_secs(10);
    spec.env
        .push(("SHOFER_CONTAINMENT_WRAP".into(), "1".into()));
    spec.during = Some(Box::new(move |pid| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = tx.send(());
        });
    }));
    let _run = c.sb(spec);
    let _ = rx.recv_timeout(Duration::from_secs(2));
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if marked(&marker).is_empty() {
            return Outcome::Blocked(format!(
                "the tree died {} ms after its caller was killed",
                start.elapsed().as_millis()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = reap_marked(&marker);
    Outcome::Escaped(format!(
        "5 s after the caller was SIGKILLed, pids {left:?} (sandbox or tree) were alive"
    ))
}
