//! Issue 34, limits: a fork bomb and a runaway allocation inside the sandbox stop at the run's
//! limits while the host keeps working, on every backend, as root (a cgroup of the run's) and
//! as uid 65534 (`RLIMIT_NPROC` in the run's user namespace where there is one; elsewhere the
//! report and stderr say the limit does not hold). Each bomb runs inside a bound of the test's
//! own — a cgroup v1 `pids` group as root, `RLIMIT_NPROC` for uid 65534 (who owns no other
//! process here) — so a build without the protection cannot take the machine down. As root the
//! runs also show the pool of spare cgroups at work (`limits::pool`): a second run reuses the
//! first one's cgroups, each run counts its own kills, a CPU quota does not carry over, and
//! eight runs at once keep the pool bounded.
mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Held by every test here: they share the pool of spare cgroups of the test process's own
/// cgroups, and one test's runs must not take the spares another test is watching.
static POOL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn pool_lock() -> std::sync::MutexGuard<'static, ()> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

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
        // The spares the runs left in it (the pool's, inside the test's own group) first.
        for (name, _) in spares(&self.0) {
            let _ = std::fs::remove_dir(self.0.join(name));
        }
        // A removed child stays online until the kernel's offline work has run (after an RCU
        // grace period): until then its parent is busy.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("left {}", self.0.display());
    }
}

/// The spare cgroups of the pool under `parent`: names and inode numbers.
fn spares(parent: &Path) -> Vec<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.starts_with("shofer-spare-")
                .then(|| Some((name, e.metadata().ok()?.ino())))?
        })
        .collect()
}

/// The run's cgroup of the report's row `key` (its path), if one holds it.
fn report_cgroup(s: &Scratch, key: &str) -> Option<PathBuf> {
    report_limit(s, key)["cgroup"].as_str().map(PathBuf::from)
}

/// A shell line printing `<controller> <inode>` of the command's own cgroup in each cgroup v1
/// hierarchy named, as /proc/self/cgroup shows it.
fn print_own_cgroups(controllers: &[&str]) -> String {
    controllers
        .iter()
        .map(|c| {
            format!(
                "echo {c} $(stat -c %i /sys/fs/cgroup/{c}$(grep ':{c}:' /proc/self/cgroup | cut -d: -f3))"
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The `<controller> <inode>` lines of [`print_own_cgroups`].
fn own_cgroups(stdout: &[u8]) -> Vec<(String, u64)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| {
            let (c, ino) = l.split_once(' ')?;
            Some((c.to_string(), ino.trim().parse().ok()?))
        })
        .collect()
}

/// Root, and cgroup v1 `pids` and `memory` hierarchies (where the pool lives), or the reason
/// the caller skips (a failure under CI).
fn pool_prerequisites(test: &str) -> bool {
    if skip_unless_root(test) {
        return false;
    }
    let v1 = ["pids", "memory"].iter().all(|c| {
        Path::new("/sys/fs/cgroup")
            .join(c)
            .join("cgroup.procs")
            .exists()
    });
    if !v1 {
        assert!(!in_ci(), "CI: no cgroup v1 pids and memory hierarchies");
        skip(test, "no cgroup v1 pids and memory hierarchies");
    }
    v1
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
    let _pool = pool_lock();
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
            // The sandbox's own lines (the command's thousands of refusals aside). One may
            // follow a fragment of a refusal on the same line: a bomb killed in the middle of
            // its message leaves no newline.
            let err: String = err
                .lines()
                .filter_map(|l| l.find("shofer-sandbox").map(|at| &l[at..]))
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

/// The number in the memory limit's closing line (`… 1 process killed at …`).
fn killed_count(stderr: &str) -> Option<u64> {
    let line = stderr
        .lines()
        .find(|l| l.contains("the memory limit stopped the command"))?;
    line.split(": ").nth(2)?.split(' ').next()?.parse().ok()
}

#[test]
fn an_allocation_past_the_memory_limit_is_killed_and_named() {
    let _pool = pool_lock();
    if skip_unless_root("an_allocation_past_the_memory_limit_is_killed_and_named") {
        return;
    }
    let mut failures = Vec::new();
    let hog = "python3 -c 'x = bytearray(256 << 20); print(len(x))'";
    for b in backends() {
        for uid in [None, Some(UNPRIV)] {
            let cell = format!("{b} / uid {uid:?}");
            // As root twice in a row: the second run likely reuses the first one's memory
            // cgroup (the pool), whose kill counter is cumulative; each run names its own.
            let mut counts = Vec::new();
            for _ in 0..if uid.is_none() { 2 } else { 1 } {
                let s = scratch_for(uid);
                let (mut cmd, _copy) =
                    sandbox(&s, uid, b, &["--limit-memory", "64M"], hog, None, 1024);
                let out = cmd.stdin(Stdio::null()).output().unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                let row = report_limit(&s, "memory");
                if uid.is_none() {
                    // Root: a cgroup of the run's holds it.
                    counts.push(killed_count(&err));
                    if out.status.code() != Some(137)
                        || !err.contains("the memory limit stopped the command")
                        || row["status"] != "enforced"
                    {
                        failures.push(format!("{cell}: {row}\n{}", show(&out)));
                    }
                    if report_cgroup(&s, "memory").is_some_and(|d| d.exists()) {
                        failures.push(format!("{cell}: the run's memory cgroup is left: {row}"));
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
            if uid.is_none() && (counts[0] != counts[1] || counts[0].is_none()) {
                failures.push(format!(
                    "{cell}: processes killed in two runs in a row: {counts:?} (each run counts its own)"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_second_run_reuses_the_first_runs_cgroups_from_the_pool() {
    let _pool = pool_lock();
    if !pool_prerequisites("a_second_run_reuses_the_first_runs_cgroups_from_the_pool") {
        return;
    }
    let mut failures = Vec::new();
    let script = print_own_cgroups(&["pids", "memory"]);
    for b in backends() {
        let first = Scratch::new();
        let (mut cmd, _) = sandbox(&first, None, b, &[], "true", None, 0);
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "{b}: {}", show(&out));
        let mut pooled = Vec::new();
        for key in ["procs", "memory"] {
            match report_cgroup(&first, key) {
                Some(dir) if !dir.exists() => {
                    let parent = dir.parent().unwrap().to_path_buf();
                    pooled.extend(spares(&parent).into_iter().map(|(_, ino)| ino));
                }
                other => failures.push(format!(
                    "{b}: run 1's {key} cgroup: {other:?} (a path that is gone after the run)"
                )),
            }
        }
        let second = Scratch::new();
        let (mut cmd, _) = sandbox(&second, None, b, &[], &script, None, 0);
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        let own = own_cgroups(&out.stdout);
        if own.len() != 2 {
            failures.push(format!("{b}: run 2's cgroups unseen: {}", show(&out)));
        }
        for (controller, ino) in own {
            if !pooled.contains(&ino) {
                failures.push(format!(
                    "{b}: run 2's {controller} cgroup (inode {ino}) is not one of the spares run 1 left ({pooled:?})"
                ));
            }
        }
        for key in ["procs", "memory"] {
            if let Some(dir) = report_cgroup(&second, key).filter(|d| d.exists()) {
                failures.push(format!("{b}: run 2 left {}", dir.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_cpu_limit_does_not_carry_into_the_next_run() {
    let _pool = pool_lock();
    if !pool_prerequisites("a_cpu_limit_does_not_carry_into_the_next_run") {
        return;
    }
    let quota = "cat /sys/fs/cgroup/cpu$(grep -E ':(cpu|cpu,cpuacct|cpuacct,cpu):' /proc/self/cgroup | cut -d: -f3)/cpu.cfs_quota_us";
    let mut failures = Vec::new();
    for b in backends() {
        // 50 %, then 20 % (a spare of the first, its quota written again), then none.
        for (cpu, expected) in [("50", "50000"), ("20", "20000"), ("off", "-1")] {
            let s = Scratch::new();
            let args = [
                "--limit-cpu",
                cpu,
                "--limit-procs",
                "off",
                "--limit-memory",
                "off",
            ];
            let (mut cmd, _) = sandbox(&s, None, b, &args, quota, None, 0);
            let out = cmd.stdin(Stdio::null()).output().unwrap();
            let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if got != expected {
                failures.push(format!(
                    "{b}: --limit-cpu {cpu}: cpu.cfs_quota_us {got:?}, expected {expected}\n{}",
                    show(&out)
                ));
            }
            if let Some(dir) = report_cgroup(&s, "cpu").filter(|d| d.exists()) {
                failures.push(format!("{b}: the run left {}", dir.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn eight_runs_at_once_each_get_their_own_cgroups_and_the_pool_stays_bounded() {
    let _pool = pool_lock();
    if !pool_prerequisites(
        "eight_runs_at_once_each_get_their_own_cgroups_and_the_pool_stays_bounded",
    ) {
        return;
    }
    let mut failures = Vec::new();
    // Long enough that all eight hold their cgroups at the same time.
    let script = format!("{}; sleep 1", print_own_cgroups(&["pids", "memory"]));
    for b in backends() {
        let runs: Vec<_> = (0..8)
            .map(|_| {
                let s = Scratch::new();
                let (mut cmd, copy) = sandbox(&s, None, b, &[], &script, None, 0);
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                (cmd.spawn().unwrap(), s, copy)
            })
            .collect();
        let mut seen = Vec::new();
        let mut parents = Vec::new();
        for (child, s, _) in runs {
            let out = child.wait_with_output().unwrap();
            for key in ["procs", "memory"] {
                let row = report_limit(&s, key);
                match report_cgroup(&s, key) {
                    Some(dir) if row["status"] == "enforced" => {
                        if dir.exists() {
                            failures.push(format!("{b}: a run left {}", dir.display()));
                        }
                        parents.push(dir.parent().unwrap().to_path_buf());
                    }
                    _ => failures.push(format!("{b}: {key}: {row}\n{}", show(&out))),
                }
            }
            let own = own_cgroups(&out.stdout);
            if own.len() != 2 {
                failures.push(format!("{b}: a run's cgroups unseen: {}", show(&out)));
            }
            seen.extend(own);
        }
        let mut distinct = seen.clone();
        distinct.sort();
        distinct.dedup();
        if distinct.len() != seen.len() {
            failures.push(format!(
                "{b}: runs at the same time shared a cgroup: {seen:?}"
            ));
        }
        parents.sort();
        parents.dedup();
        for parent in parents {
            let n = spares(&parent).len();
            if n > 4 {
                failures.push(format!("{b}: {n} spares in {}", parent.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_dead_runs_empty_cgroup_becomes_a_spare_and_a_busy_one_stays() {
    let _pool = pool_lock();
    if !pool_prerequisites("a_dead_runs_empty_cgroup_becomes_a_spare_and_a_busy_one_stays") {
        return;
    }
    // A pids group of the test's own as the parent: its pool starts empty, so the run makes
    // its cgroup and sweeps at the end.
    let cg = TestCgroup::new(4096).expect("a pids cgroup of the test's own");
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        c.wait().unwrap();
        c.id()
    };
    let old = |name: &str| {
        let dir = cg.0.join(name);
        std::fs::create_dir(&dir).unwrap();
        let st = Command::new("touch")
            .args(["-d", "5 minutes ago"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success());
        dir
    };
    let empty = old(&format!("shofer-{dead}-0123456789abcdef"));
    let busy = old(&format!("shofer-{dead}-fedcba9876543210"));
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    std::fs::write(busy.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
    // Not a run's name: never touched.
    let foreign = cg.0.join("shofer-other");
    std::fs::create_dir(&foreign).unwrap();

    let s = Scratch::new();
    let (mut cmd, _) = sandbox(
        &s,
        None,
        "layered",
        &["--limit-memory", "off"],
        "true",
        Some(&cg),
        0,
    );
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let spares_after = spares(&cg.0);
    let left = [&empty, &busy, &foreign].map(|d| d.exists());
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    // Leave nothing but spares (the TestCgroup removes those).
    for dir in [&busy, &empty, &foreign] {
        let _ = std::fs::remove_dir(dir);
    }
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        left,
        [false, true, true],
        "left after the sweep: the dead run's empty cgroup, its busy one, a foreign name"
    );
    // Outside the initial PID namespace (a test run under `unshare -p`) the sweep removes
    // the dead run's empty cgroup instead of pooling it: there `cgroup.procs` hides the tasks
    // of other namespaces (limits::pool::sweep).
    use std::os::unix::fs::MetadataExt;
    let initial_pid_ns =
        std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() == 0xEFFF_FFFC);
    assert_eq!(
        spares_after.len(),
        if initial_pid_ns { 2 } else { 1 },
        "the run's cgroup and (in the initial PID namespace) the dead run's empty one are the pool's: {spares_after:?}"
    );
}

/// A sandbox started in a child PID namespace (a container sharing the cgroup hierarchy)
/// reads an empty `cgroup.procs` in a cgroup whose tasks are all outside its namespace: its
/// sweep must not take a live run's cgroup into the pool for the next run to claim.
#[test]
fn a_sweep_from_a_child_pid_namespace_leaves_a_busy_cgroup_alone() {
    let _pool = pool_lock();
    if !pool_prerequisites("a_sweep_from_a_child_pid_namespace_leaves_a_busy_cgroup_alone") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    // The test's own pids group as the parent: its pool starts empty, so the run sweeps.
    let cg = TestCgroup::new(4096).expect("a pids cgroup of the test's own");
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        c.wait().unwrap();
        c.id()
    };
    // A run's cgroup, old, whose supervisor this namespace cannot see, holding a process of
    // the host's (the test's) namespace.
    let busy = cg.0.join(format!("shofer-{dead}-fedcba9876543210"));
    std::fs::create_dir(&busy).unwrap();
    let st = Command::new("touch")
        .args(["-d", "5 minutes ago"])
        .arg(&busy)
        .status()
        .unwrap();
    assert!(st.success());
    let busy_ino = std::fs::metadata(&busy).unwrap().ino();
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    std::fs::write(busy.join("cgroup.procs"), sleeper.id().to_string()).unwrap();

    let s = Scratch::new();
    let mut cmd = Command::new("unshare");
    cmd.current_dir(s.path())
        .args(["--pid", "--fork", "--mount-proc", SANDBOX])
        .args(["--backend", "layered", "--limit-memory", "off"])
        .arg(s.path())
        .args(["--", "/bin/true"])
        .env("HOME", s.path())
        .env("XDG_STATE_HOME", s.path().join("state"));
    let procs = cg.0.join("cgroup.procs");
    // Safety: only a write to a file between fork and exec.
    unsafe {
        cmd.pre_exec(move || std::fs::write(&procs, "0"));
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let still_there = busy.exists();
    let spares_after = spares(&cg.0);
    let held = std::fs::read_to_string(
        spares_after
            .iter()
            .find(|(_, ino)| *ino == busy_ino)
            .map_or(busy.join("cgroup.procs"), |(name, _)| {
                cg.0.join(name).join("cgroup.procs")
            }),
    )
    .unwrap_or_default();
    // Leave nothing but spares (the TestCgroup removes those): the sleeper first, wherever
    // its cgroup went.
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let _ = std::fs::remove_dir(&busy);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        still_there && spares_after.iter().all(|(_, ino)| *ino != busy_ino),
        "the busy cgroup (holding {}) went into the pool: {spares_after:?}",
        held.trim()
    );
}

/// A run that leaves a file in `/dev/shm` (Landlock alone shares the host's) leaves its
/// memory cgroup charged with pages the kernel cannot reclaim without swap: pooled, that
/// cgroup would hand the next run that much less than its limit.
#[test]
fn shared_memory_a_run_leaves_does_not_shrink_the_next_runs_limit() {
    let _pool = pool_lock();
    if !pool_prerequisites("shared_memory_a_run_leaves_does_not_shrink_the_next_runs_limit") {
        return;
    }
    // A memory group of the test's own (below its own, which it may not leave) as the
    // parent: the pool the two runs share, and nobody else.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = own
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
        .expect("a memory line in /proc/self/cgroup");
    let parent = Path::new("/sys/fs/cgroup/memory")
        .join(own.trim_start_matches('/'))
        .join(format!("shofer-test-mem-{}", std::process::id()));
    std::fs::create_dir(&parent).unwrap();
    let shm = PathBuf::from(format!("/dev/shm/shofer-test-{}", std::process::id()));
    let run = |script: &str| {
        let s = Scratch::new();
        let mut cmd = Command::new(SANDBOX);
        cmd.current_dir(s.path())
            .args(["--backend", "landlock", "--limit-procs", "off"])
            .args(["--limit-memory", "256M"])
            .arg(s.path())
            .args(["--", "/bin/sh", "-c", script])
            .env("HOME", s.path())
            .env("XDG_STATE_HOME", s.path().join("state"));
        let procs = parent.join("cgroup.procs");
        // Safety: only a write to a file between fork and exec.
        unsafe {
            cmd.pre_exec(move || std::fs::write(&procs, "0"));
        }
        cmd.stdin(Stdio::null()).output().unwrap()
    };
    let first = run(&format!("head -c 160M /dev/zero > {}", shm.display()));
    let second = run("python3 -c 'x = bytearray(160 << 20); print(len(x))'");
    let _ = std::fs::remove_file(&shm);
    for (name, _) in spares(&parent) {
        let _ = std::fs::remove_dir(parent.join(name));
    }
    for _ in 0..50 {
        if std::fs::remove_dir(&parent).is_ok() || !parent.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(first.status.success(), "{}", show(&first));
    assert!(
        second.status.success(),
        "160M of 256M after a run left 160M in /dev/shm: {}",
        show(&second)
    );
}
