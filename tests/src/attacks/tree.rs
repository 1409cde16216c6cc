//! Inside the sandbox — the process tree: descendants that try to outlive the command (setsid,
//! double fork, ignored or answered SIGTERM), and the sleeper processes they leave.

use super::{arg, Seen};
use crate::sys::{self, Errno};
use std::path::Path;

/// `double-fork-escape`: a double-forked grandchild outlives the command.
pub(crate) fn double_fork_escape(a: &[String]) -> Seen {
    double_fork(arg(a, 2), arg(a, 3), false)
}

/// `sigterm-ignoring-descendant`: a descendant ignoring SIGTERM/SIGHUP outlives the command.
pub(crate) fn sigterm_ignoring_descendant(a: &[String]) -> Seen {
    double_fork(arg(a, 2), arg(a, 3), true)
}

/// `tree-then-wait <me> <marker>`: a grandchild with the marker, then wait to be stopped from
/// outside.
pub(crate) fn tree_then_wait(a: &[String]) -> Seen {
    let _ = spawn_sleeper(arg(a, 2), arg(a, 3), false, false);
    std::thread::sleep(std::time::Duration::from_secs(30));
    Seen::Ok("slept".into())
}

/// `spawn-then-exit <me> <marker> <mode...>`: starts `sleeper <marker> 30 <mode...>` in a new
/// session and exits at once.
pub(crate) fn spawn_then_exit(a: &[String]) -> Seen {
    let me = arg(a, 2);
    let mut argv = vec![
        me.to_string(),
        "sleeper".into(),
        arg(a, 3).to_string(),
        "30".into(),
    ];
    argv.extend(a.iter().skip(4).cloned());
    match sys::fork() {
        Err(e) => Seen::Broken(format!("fork -> {e}")),
        Ok(0) => {
            // Safety: new session in the child before exec.
            unsafe { libc::setsid() };
            let e = sys::execv(Path::new(me), &argv);
            eprintln!("exec -> {e}");
            sys::exit_now(127)
        }
        Ok(_) => {
            std::thread::sleep(std::time::Duration::from_millis(50));
            Seen::Ok("left a process tree behind and exited".into())
        }
    }
}

/// Forks a child that becomes `shofer-containment attack sleeper <marker>` (found later by
/// the marker in its command line). `setsid` and `ignore_term` shape how it tries to survive.
pub(super) fn spawn_sleeper(
    me: &str,
    marker: &str,
    setsid: bool,
    ignore_term: bool,
) -> Result<i32, Errno> {
    let pid = sys::fork()?;
    if pid == 0 {
        // Safety: plain calls in the forked child before exec.
        unsafe {
            if setsid {
                libc::setsid();
            }
            if ignore_term {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                libc::signal(libc::SIGINT, libc::SIG_IGN);
            }
        }
        let e = sys::execv(
            Path::new(me),
            &[me.to_string(), "sleeper".into(), marker.into(), "30".into()],
        );
        eprintln!("exec sleeper -> {e}");
        sys::exit_now(127);
    }
    Ok(pid)
}

/// `setsid-escape`: a setsid() child outlives the command.
pub(crate) fn setsid_escape(a: &[String]) -> Seen {
    let (me, marker) = (arg(a, 2), arg(a, 3));
    match spawn_sleeper(me, marker, true, false) {
        Ok(_) => Seen::Ok("left a setsid() child behind and exited".into()),
        Err(e) => Seen::Broken(format!("fork -> {e}")),
    }
}

fn double_fork(me: &str, marker: &str, ignore_term: bool) -> Seen {
    match sys::fork() {
        Err(e) => Seen::Broken(format!("fork -> {e}")),
        Ok(0) => {
            let _ = spawn_sleeper(me, marker, ignore_term, ignore_term);
            sys::exit_now(0)
        }
        Ok(pid) => {
            let mut st = 0;
            // Safety: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            Seen::Ok("left a double-forked grandchild behind and exited".into())
        }
    }
}

/// `shofer-containment sleeper <marker> <secs>`: sleeps (the marker is only for finding it).
///
/// `sleeper <marker> <secs> respawn`: on SIGTERM, SIGHUP or SIGINT it forks a fresh copy of
/// itself (new session, same marker) and exits, so a supervisor that signals once and stops
/// looking leaves a process behind. `sleeper <marker> <secs> deep <n>`: a chain of `n`
/// processes each ignoring SIGTERM/SIGHUP, each the parent of the next.
pub fn sleeper(args: &[String]) -> i32 {
    let marker = arg(args, 0).to_string();
    let secs: u64 = arg(args, 1).parse().unwrap_or(30);
    match arg(args, 2) {
        "respawn" => respawner(&marker, secs),
        "urg" => {
            extern "C" fn on_urg(_: libc::c_int) {
                // Safety: _exit is async-signal-safe.
                unsafe { libc::_exit(0) }
            }
            // Safety: installing a handler that only calls _exit.
            unsafe { libc::signal(libc::SIGURG, on_urg as *const () as libc::sighandler_t) };
            std::thread::sleep(std::time::Duration::from_secs(secs));
            0
        }
        "deep" => {
            let n: u32 = arg(args, 3).parse().unwrap_or(0);
            // Safety: ignoring signals in this single-threaded process.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
            }
            if n > 0 {
                let me = std::fs::read_link("/proc/self/exe").unwrap_or_default();
                if let Ok(0) = sys::fork() {
                    // Safety: a new session for the next link of the chain.
                    unsafe { libc::setsid() };
                    let e = sys::execv(
                        &me,
                        &[
                            me.display().to_string(),
                            "sleeper".into(),
                            marker.clone(),
                            secs.to_string(),
                            "deep".into(),
                            (n - 1).to_string(),
                        ],
                    );
                    eprintln!("exec -> {e}");
                    sys::exit_now(127);
                }
            }
            std::thread::sleep(std::time::Duration::from_secs(secs));
            0
        }
        _ => {
            std::thread::sleep(std::time::Duration::from_secs(secs));
            0
        }
    }
}

static RESPAWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    RESPAWN.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn respawner(marker: &str, secs: u64) -> i32 {
    let me = std::fs::read_link("/proc/self/exe").unwrap_or_default();
    // Safety: an async-signal-safe handler that only stores to an atomic.
    unsafe {
        for s in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
            libc::signal(s, on_term as *const () as libc::sighandler_t);
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if RESPAWN.swap(false, std::sync::atomic::Ordering::SeqCst) {
            if let Ok(0) = sys::fork() {
                // Safety: new session in the fresh child, then exec a fresh respawner.
                unsafe { libc::setsid() };
                let e = sys::execv(
                    &me,
                    &[
                        me.display().to_string(),
                        "sleeper".into(),
                        marker.to_string(),
                        secs.to_string(),
                        "respawn".into(),
                    ],
                );
                eprintln!("exec -> {e}");
                sys::exit_now(127);
            }
            return 0;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    0
}
