//! If the supervisor dies anyway, the command dies with it, on every backend (issue 29,
//! deliverable 4): a SIGKILL of the `shofer-sandbox` process the caller started, a SIGKILL or
//! an abort of the supervisor below it (the Landlock backend's guardian keeps the tree), and
//! the exit status a caller sees through the guardian.
//!
//! Each run starts a few descendants — a background `sleep`, a `setsid` daemon whose parent
//! exits at once, a double-forked one in a new session that ignores SIGTERM and SIGHUP — which
//! write their pids to a file; the test waits for all of them, kills, then waits (bounded) for
//! every one to be gone. Whatever is left is killed by pid before the assertion fails.

mod common;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The uids each test runs as: root (CI) and 65534.
fn uids() -> Vec<Option<u32>> {
    if is_root() {
        vec![None, Some(UNPRIV)]
    } else {
        vec![None]
    }
}

/// Lines the script writes to the pid file: its own pid and four descendants'.
const PIDS: usize = 5;

/// One sandbox run with its descendants started.
struct Started {
    child: Child,
    /// The binary that runs (a copy another uid can reach, or the build's).
    program: PathBuf,
    _copy: Option<ReachableCopy>,
    _scratch: Scratch,
    marker: String,
    /// Pids as the script saw them (the caller's PID namespace on Landlock).
    pids: Vec<i32>,
}

impl Started {
    fn new(backend: &str, uid: Option<u32>, tag: u32) -> Started {
        let scratch = Scratch::new();
        if let Some(u) = uid {
            scratch.chown_all(u);
        }
        let marker = unique_sleep(tag);
        let file = scratch.path().join("pids");
        let script = format!(
            "P={p}; sleep {m}1 & echo $! >> $P; \
             setsid sh -c 'sleep {m}2 </dev/null >/dev/null 2>&1 & echo $! >> {p}' & \
             (setsid sh -c 'trap \"\" TERM HUP; sleep {m}3 & echo $! >> {p}; echo $$ >> {p}; wait' &); \
             echo $$ >> $P; wait; sleep {m}4",
            p = file.display(),
            m = marker
        );
        let copy = uid.map(|u| ReachableCopy::new(Path::new(SANDBOX), u));
        let program = copy
            .as_ref()
            .map_or(PathBuf::from(SANDBOX), |c| c.path().to_path_buf());
        let mut cmd = Command::new(&program);
        cmd.current_dir(scratch.path())
            .arg(scratch.path())
            .args(["--backend", backend, "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Safety: only async-signal-safe syscalls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // An aborting supervisor must not leave a core file behind.
                let zero = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &zero);
                if let Some(uid) = uid {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(uid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        let mut started = Started {
            child,
            program,
            _copy: copy,
            _scratch: scratch,
            marker,
            pids: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            started.pids = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if started.pids.len() >= PIDS {
                break;
            }
            if Instant::now() > deadline {
                started.cleanup();
                panic!("{backend} {uid:?}: the command's descendants did not start: {text:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        started
    }

    /// The supervisor: a child of the sandbox's pid running the same binary (on Landlock,
    /// below the guardian).
    fn supervisor(&self) -> Option<i32> {
        let me = self.child.id() as i32;
        let exe = std::fs::canonicalize(&self.program).ok()?;
        shofer_sys::proc::live_with_cmdline(|_| true)
            .into_iter()
            .filter(|p| p.ppid == me)
            .map(|p| p.pid)
            .find(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).ok().as_ref() == Some(&exe))
    }

    /// The run's processes still alive after up to `limit`: the marked ones, and on Landlock
    /// (host pids) those of the pid file. Kills them before returning.
    fn survivors(&self, landlock: bool, limit: Duration) -> Vec<i32> {
        let deadline = Instant::now() + limit;
        loop {
            let mut left = processes_with(&self.marker);
            if landlock {
                let listed: Vec<i32> = self
                    .pids
                    .iter()
                    .filter(|p| alive(**p) && !left.contains(p))
                    .copied()
                    .collect();
                left.extend(listed);
            }
            if left.is_empty() || Instant::now() > deadline {
                for &pid in &left {
                    // Safety: killing a process this test started (marked or listed).
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                return left;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills everything the run started, by pid, and reaps the sandbox.
    fn cleanup(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.survivors(true, Duration::ZERO);
    }
}

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: i32) -> bool {
    shofer_sys::proc::read(pid).is_some_and(|p| !p.is_dead())
}

/// How a run is killed.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// SIGKILL to the process the caller started.
    Sandbox,
    /// This signal to the supervisor below it (Landlock: the guardian's child).
    Supervisor(libc::c_int),
}

fn kill_and_check(backend: &str, uid: Option<u32>, how: Kill, tag: u32) {
    let mut s = Started::new(backend, uid, tag);
    match how {
        Kill::Sandbox => s.child.kill().unwrap(),
        Kill::Supervisor(sig) => {
            let Some(pid) = s.supervisor() else {
                s.cleanup();
                panic!("{backend} {uid:?}: no supervisor process below the sandbox's pid (no guardian)");
            };
            // Safety: signalling the supervisor this test started.
            unsafe { libc::kill(pid, sig) };
        }
    }
    let status = s.child.wait().unwrap();
    let left = s.survivors(backend == "landlock", Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "{backend} {uid:?} {how:?}: pids {left:?} outlived the sandbox (pids of the run: {:?})",
        s.pids
    );
    // The guardian ends as the supervisor did.
    let expected = match how {
        Kill::Sandbox => libc::SIGKILL,
        Kill::Supervisor(sig) => sig,
    };
    assert_eq!(
        status.signal(),
        Some(expected),
        "{backend} {uid:?} {how:?}: {status:?}"
    );
}

/// Regression test for issue 29: on Landlock, a SIGKILL of `shofer-sandbox` left every
/// descendant but the command's main process running (re-parented to init).
#[test]
fn a_sigkilled_sandbox_leaves_no_descendant_on_every_backend() {
    let mut tag = 0;
    for backend in backends() {
        if backend == "bwrap" {
            continue; // reported not enforced (hardened.rs checks the report says so)
        }
        for uid in uids() {
            tag += 1;
            kill_and_check(backend, uid, Kill::Sandbox, 100 + tag);
        }
    }
}

/// Landlock: the supervisor itself SIGKILLed, or aborting (a panic is an abort), below the
/// guardian: the guardian kills the tree and dies by the same signal.
#[test]
fn a_killed_or_aborted_landlock_supervisor_leaves_no_descendant() {
    if !backends().contains(&"landlock") {
        return;
    }
    let mut tag = 0;
    for uid in uids() {
        for sig in [libc::SIGKILL, libc::SIGABRT] {
            tag += 1;
            kill_and_check("landlock", uid, Kill::Supervisor(sig), 200 + tag);
        }
    }
}

/// Through the guardian the caller sees the command's status as before: its exit code, and
/// a death by SIGTERM as the sandbox's own death by SIGTERM.
#[test]
fn the_guardian_passes_on_the_commands_exit_status() {
    if !backends().contains(&"landlock") {
        return;
    }
    let s = Scratch::new();
    for uid in uids() {
        if let Some(u) = uid {
            s.chown_all(u);
        }
        let run = |script: &str| {
            let mut r = Run::new(&s.path()).backend("landlock").sh(script);
            if let Some(u) = uid {
                r = r.with_uid(u);
            }
            r.output()
        };
        let out = run("exit 7");
        assert_eq!(out.status.code(), Some(7), "{uid:?}: {}", show(&out));
        let out = run("kill -TERM $$");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGTERM),
            "{uid:?}: {}",
            show(&out)
        );
        let out = run("echo out; echo err >&2");
        assert_eq!(out.status.code(), Some(0), "{uid:?}: {}", show(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    }
}

/// SIGTERM to the sandbox the caller started reaches the supervisor (through the guardian on
/// Landlock): the tree goes, and the sandbox dies by SIGTERM.
#[test]
fn a_sigterm_of_the_sandbox_stops_the_tree_through_the_guardian() {
    if !backends().contains(&"landlock") {
        return;
    }
    for uid in uids() {
        let mut s = Started::new("landlock", uid, 300 + uid.map_or(0, |_| 1));
        // Safety: signalling the sandbox this test started.
        unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
        let status = s.child.wait().unwrap();
        let left = s.survivors(true, Duration::from_secs(5));
        assert!(left.is_empty(), "{uid:?}: {left:?} outlived a SIGTERM");
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{uid:?}: {status:?}");
    }
}
