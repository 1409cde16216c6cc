//! Issue 34, limits: a fork bomb and a runaway allocation inside the sandbox stop at the run's
//! limits while the host keeps working, on every backend, as root (a cgroup of the run's) and
//! as uid 65534 (`RLIMIT_NPROC` in the run's user namespace where there is one; elsewhere the
//! report and stderr say the limit does not hold). Each bomb runs inside a bound of the test's
//! own — a cgroup v1 `pids` group as root, `RLIMIT_NPROC` for uid 65534 (who owns no other
//! process here) — so a build without the protection cannot take the machine down.
mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A cgroup v1 `pids` group of the test's own, removed when dropped.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(max: u64) -> Option<TestCgroup> {
        let dir =
            Path::new("/sys/fs/cgroup/pids").join(format!("shofer-test-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        std::fs::write(dir.join("pids.max"), max.to_string()).ok()?;
        Some(TestCgroup(dir))
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The sandbox running `script` with `args`, as `uid` (from a reachable copy), inside the
/// test's bound: the cgroup `cg` (root), or `RLIMIT_NPROC` of `bound` (uid 65534).
fn sandbox(
    s: &Scratch,
    uid: Option<u32>,
    backend: &str,
    args: &[&str],
    script: &str,
    cg: Option<&TestCgroup>,
    bound: u64,
) -> (Command, Option<ReachableCopy>) {
    let copy = uid.map(|u| ReachableCopy::new(Path::new(SANDBOX), u));
    let program = copy.as_ref().map_or(Path::new(SANDBOX), |c| c.path());
    let mut cmd = Command::new(program);
    cmd.current_dir(s.path())
        .args(["--backend", backend, "--report", "9"])
        .args(args)
        .arg(s.path())
        .args(["--", "/bin/sh", "-c", script])
        .env("HOME", s.path())
        .env("XDG_STATE_HOME", s.path().join("state"));
    let procs = cg.map(|c| c.0.join("cgroup.procs"));
    let report = s.path().join("report.json");
    // Safety: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(
                std::ffi::CString::new(report.as_os_str().as_encoded_bytes())
                    .unwrap()
                    .as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                0o666,
            );
            if fd < 0 || libc::dup2(fd, 9) != 9 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(p) = &procs {
                std::fs::write(p, "0")?;
            }
            if let Some(uid) = uid {
                let limit = libc::rlimit {
                    rlim_cur: bound,
                    rlim_max: bound,
                };
                if libc::setrlimit(libc::RLIMIT_NPROC, &limit) != 0
                    || libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    (cmd, copy)
}

/// A scratch directory for a run as `uid` (owned by it).
fn scratch_for(uid: Option<u32>) -> Scratch {
    let s = Scratch::new();
    if let Some(u) = uid {
        s.chown_all(u);
    }
    s
}

fn report_limit(s: &Scratch, key: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(s.path().join("report.json")).unwrap_or_default();
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap_or("{}")).unwrap_or_default();
    first["limits"][key].clone()
}

#[test]
fn a_fork_bomb_stops_at_the_process_limit_while_the_host_keeps_forking() {
    if skip_unless_root("a_fork_bomb_stops_at_the_process_limit_while_the_host_keeps_forking") {
        return;
    }
    let Some(cg) = TestCgroup::new(2048) else {
        assert!(
            !in_ci(),
            "CI: no cgroup v1 pids hierarchy to bound the test's fork bomb"
        );
        skip(
            "a_fork_bomb_stops_at_the_process_limit",
            "no cgroup v1 pids hierarchy",
        );
        return;
    };
    let mut failures = Vec::new();
    let bomb = "bomb() { bomb | bomb & }; bomb; sleep 3";
    for b in backends() {
        for uid in [None, Some(UNPRIV)] {
            let cell = format!("{b} / uid {uid:?}");
            let s = scratch_for(uid);
            let (mut cmd, _copy) = sandbox(
                &s,
                uid,
                b,
                &["--limit-procs", "64"],
                bomb,
                uid.is_none().then_some(&cg),
                1024,
            );
            // A file, not a pipe: thousands of "Cannot fork" lines would fill a pipe nobody
            // reads while the test waits.
            let log = s.path().join("stderr");
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap());
            let started = Instant::now();
            let mut child = cmd.spawn().unwrap();
            // The host keeps forking meanwhile.
            let mut host_failed = 0;
            while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(60)
            {
                if !Command::new("true").status().is_ok_and(|s| s.success()) {
                    host_failed += 1;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if child.try_wait().unwrap().is_none() {
                let _ = child.kill();
                failures.push(format!("{cell}: the sandbox did not end within 60 s"));
            }
            child.wait().unwrap();
            let err = std::fs::read_to_string(&log).unwrap_or_default();
            // The sandbox's own lines (the command's thousands of refusals aside).
            let err: String = err
                .lines()
                .filter(|l| l.starts_with("shofer-sandbox"))
                .collect::<Vec<_>>()
                .join("\n");
            if host_failed > 0 {
                failures.push(format!("{cell}: {host_failed} host forks failed"));
            }
            let row = report_limit(&s, "procs");
            let enforced = row["status"] == "enforced";
            // Where it holds, it holds by a cgroup (root) or the user namespace's count.
            let expected = uid.is_none() || matches!(b, "layered" | "userns");
            if enforced != expected {
                failures.push(format!(
                    "{cell}: procs row {row} (expected enforced: {expected})\n{err}"
                ));
            }
            if !enforced && !err.contains("hardening not enforced (limit_procs)") {
                failures.push(format!("{cell}: the missing limit is not named\n{err}"));
            }
            if uid.is_none() && !err.contains("the process limit refused") {
                failures.push(format!("{cell}: the refused forks are not named\n{err}"));
            }
            println!("{cell}: {:?}, procs {row}", started.elapsed());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn an_allocation_past_the_memory_limit_is_killed_and_named() {
    if skip_unless_root("an_allocation_past_the_memory_limit_is_killed_and_named") {
        return;
    }
    let mut failures = Vec::new();
    let hog = "python3 -c 'x = bytearray(256 << 20); print(len(x))'";
    for b in backends() {
        for uid in [None, Some(UNPRIV)] {
            let cell = format!("{b} / uid {uid:?}");
            let s = scratch_for(uid);
            let (mut cmd, _copy) = sandbox(&s, uid, b, &["--limit-memory", "64M"], hog, None, 1024);
            let out = cmd.stdin(Stdio::null()).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let row = report_limit(&s, "memory");
            if uid.is_none() {
                // Root: a cgroup of the run's holds it.
                if out.status.code() != Some(137)
                    || !err.contains("the memory limit stopped the command")
                    || row["status"] != "enforced"
                {
                    failures.push(format!("{cell}: {row}\n{}", show(&out)));
                }
            } else if row["status"] != "not_enforced"
                || !err.contains("hardening not enforced (limit_memory)")
            {
                failures.push(format!(
                    "{cell}: an unprivileged caller has no cgroup here: {row}\n{}",
                    show(&out)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
