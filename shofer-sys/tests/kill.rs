//! The tree killer against real process trees.
//!
//! Each scenario runs in a child process (this test binary again, with one test selected and
//! `SHOFER_SYS_SCENARIO` set) that makes itself a child subreaper and kills all its
//! descendants: the parent test's other threads and their children are never in the way, and
//! the parent checks from outside, by a unique marker in the command lines, that nothing
//! survived.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shofer_sys::kill::{self, Descendants, Targets};
use shofer_sys::proc::{ProcInfo, ProcTable};

const SCENARIO: &str = "SHOFER_SYS_SCENARIO";
const MARK: &str = "SHOFER_SYS_MARK";

/// A marker usable as a `sleep` duration (~1000 s): unique to this test process and call.
fn marker(n: u32) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("1000.{}{n:03}{nanos:09}", std::process::id())
}

/// Live processes whose command line contains `mark` (this process excluded).
fn survivors(mark: &str) -> Vec<i32> {
    shofer_sys::proc::live_with_cmdline(|c| String::from_utf8_lossy(c).contains(mark))
        .iter()
        .map(|p| p.pid)
        .collect()
}

fn wait_for(mark: &str, n: usize) -> usize {
    let start = Instant::now();
    loop {
        let k = survivors(mark).len();
        if k >= n || start.elapsed() > Duration::from_secs(30) {
            return k;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs test `name` of this binary in a child process with the scenario variables set;
/// returns its stdout. Kills anything with the marker that the child left behind (after
/// recording it) so one failure does not leak processes.
fn run_scenario(name: &str, mark: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(SCENARIO, "1")
        .env(MARK, mark)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let left = survivors(mark);
    for &pid in &left {
        // Safety: kill(2) of a leftover found by its unique marker.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "scenario {name} failed:\n{text}");
    assert!(left.is_empty(), "survivors {left:?}:\n{text}");
    assert!(text.contains("scenario done"), "{text}");
    text
}

/// Two tests: `$outer` runs `$inner` in a child process (see the module docs) and checks that
/// nothing with the marker survived; `$inner` is the scenario, a no-op in the normal run.
macro_rules! scenario {
    ($outer:ident, $inner:ident, $n:expr, |$m:ident| $body:block) => {
        #[test]
        fn $outer() {
            let text = run_scenario(stringify!($inner), &marker($n));
            println!("{text}");
        }

        #[test]
        fn $inner() {
            let Some($m) = scenario() else { return };
            $body
        }
    };
}

/// In the scenario child: the marker, after making this process a subreaper; `None` in the
/// normal test run (the scenario test is then a no-op, its parent test does the checking).
fn scenario() -> Option<String> {
    std::env::var_os(SCENARIO)?;
    shofer_sys::process::set_child_subreaper().unwrap();
    Some(std::env::var(MARK).unwrap())
}

fn spawn_sh(script: &str, setsid: bool) -> std::process::Child {
    let mut c = Command::new("/bin/sh");
    c.args(["-c", script]).stdin(Stdio::null());
    if setsid {
        // Safety: setsid(2) is async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
    }
    c.spawn().unwrap()
}

scenario!(
    detached_descendants_are_all_killed,
    detached_descendants_scenario,
    1,
    |m| {
        // setsid, double fork, nohup, setsid with an empty environment, a plain background job:
        // five ways to leave the shell, none of them leaves a subreaper.
        let script = format!(
            "setsid sleep {m} & (sleep {m} &) ; nohup sleep {m} >/dev/null 2>&1 & \
         setsid env -i sleep {m} & sleep {m} & exit 0"
        );
        let child = spawn_sh(&script, true);
        wait_all([child]);
        assert!(wait_for(&m, 5) >= 5);
        let report = kill::kill(&mut Descendants::of_self(), Duration::from_millis(200));
        assert!(report.survivors.is_empty(), "{report:?}");
        assert!(report.signalled >= 5, "{report:?}");
        reap_all();
        println!("scenario done");
    }
);

scenario!(
    term_ignoring_and_stopped_processes_are_killed,
    term_ignoring_scenario,
    2,
    |m| {
        let flag = std::env::temp_dir().join(format!("shofer-sys-cont-{m}"));
        // Some ignore SIGTERM; one is stopped with a TERM handler that records it ran (it can only
        // run after SIGCONT). A shell cannot trap a signal ignored on entry, so that one is
        // started on its own.
        let deaf = spawn_sh(
            &format!("trap '' TERM; for i in 1 2 3; do sleep {m} & done; wait"),
            true,
        );
        let stopped = spawn_sh(
        &format!(
            "trap 'echo handled > {f}; exit 0' TERM; kill -STOP $$; while :; do sleep 0.05; done; : {m}",
            f = flag.display()
        ),
        true,
    );
        let plain = spawn_sh(&format!("sleep {m} & sleep {m} & wait"), true);
        assert!(wait_for(&m, 8) >= 8);
        // Wait for the stopped one to be stopped.
        let start = Instant::now();
        while !ProcTable::scan().procs().iter().any(ProcInfo::is_stopped) {
            assert!(start.elapsed() < Duration::from_secs(10), "nothing stopped");
            std::thread::sleep(Duration::from_millis(10));
        }
        let report = kill::kill(&mut Descendants::of_self(), Duration::from_millis(1500));
        assert!(report.survivors.is_empty(), "{report:?}");
        wait_all([deaf, stopped, plain]);
        let handled = std::fs::read_to_string(&flag).unwrap_or_default();
        let _ = std::fs::remove_file(&flag);
        assert_eq!(
            handled.trim(),
            "handled",
            "the stopped process never saw SIGTERM"
        );
        println!("scenario done");
    }
);

scenario!(a_fork_loop_is_outrun, fork_loop_scenario, 3, |m| {
    // Each loop forks as fast as it can, and the children fork too; SIGTERM is ignored.
    let script = format!(
        "trap '' TERM; spin() {{ while :; do sleep {m} & done; }}; spin & spin & (setsid sh -c 'while :; do sleep {m} & done' &) ; wait"
    );
    let child = spawn_sh(&script, true);
    assert!(wait_for(&m, 50) >= 50);
    let report = kill::kill(&mut Descendants::of_self(), Duration::from_millis(100));
    assert!(report.survivors.is_empty(), "{report:?}");
    wait_all([child]);
    println!("scenario done, {} processes", report.signalled);
});

scenario!(
    many_trees_share_one_grace_period,
    many_trees_scenario,
    4,
    |m| {
        // 1,000 processes in 100 sessions of 10, half ignoring SIGTERM: what `shofer serve`
        // leaves when a session with many background commands closes.
        let mut children = Vec::new();
        for i in 0..100 {
            let trap = if i % 2 == 0 { "trap '' TERM;" } else { "" };
            let script =
                format!("{trap} for i in 1 2 3 4 5 6 7 8 9; do sleep {m} & done; exec sleep {m}");
            children.push(spawn_sh(&script, true));
        }
        assert!(wait_for(&m, 1000) >= 1000);
        let grace = Duration::from_millis(250);
        let t = Instant::now();
        let report = kill::kill(&mut Descendants::of_self(), grace);
        let took = t.elapsed();
        assert!(report.survivors.is_empty(), "{report:?}");
        // One shared grace period: one tree after another would take 100 × 250 ms.
        assert!(took < Duration::from_secs(10), "{took:?}");
        wait_all(children);
        println!(
            "scenario done: {} processes in {took:?} (grace {grace:?})",
            report.signalled
        );
    }
);

/// A [`Targets`] over one subtree that is *not* our direct descendant set: the killer works for
/// any selection, and leaves everything else alone.
struct Marked(String);

impl Targets for Marked {
    fn select(&mut self, table: &ProcTable) -> Vec<ProcInfo> {
        let me = shofer_sys::process::getpid();
        table
            .descendants(me)
            .into_iter()
            .map(|i| table.procs()[i])
            .filter(|p| {
                std::fs::read(format!("/proc/{}/cmdline", p.pid))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&self.0))
            })
            .collect()
    }
}

scenario!(
    only_the_selected_processes_are_killed,
    selection_scenario,
    5,
    |m| {
        let other = format!("{m}1");
        let mut keep = spawn_sh(&format!("exec sleep {other}"), false);
        let child = spawn_sh(&format!("sleep {m} & sleep {m} & wait"), true);
        // The kept sleep carries the marker too (as a prefix), and so does the shell.
        assert!(wait_for(&m, 4) >= 4);
        let report = kill::kill(
            &mut Marked(format!("sleep\0{m}\0")),
            Duration::from_millis(100),
        );
        assert!(report.survivors.is_empty(), "{report:?}");
        assert_eq!(report.signalled, 2, "{report:?}");
        assert!(
            keep.try_wait().unwrap().is_none(),
            "an unselected process was killed"
        );
        let _ = keep.kill();
        wait_all([keep, child]);
        println!("scenario done");
    }
);

fn wait_all(children: impl IntoIterator<Item = std::process::Child>) {
    for mut c in children {
        let _ = c.wait();
    }
    reap_all();
}

fn reap_all() {
    // Safety: waitpid on any child, non-blocking; we own every child of this scenario process.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

/// A real PID reuse, in a fresh PID namespace where the next pid can be chosen
/// (`/proc/sys/kernel/ns_last_pid`, CAP_SYS_ADMIN over the namespace): the scanned identity of
/// a reaped process must not match the new process that got its pid. Root only (CI runs as
/// root; under `CI=true` a missing prerequisite fails).
#[test]
fn a_recycled_pid_is_never_signalled() {
    // Safety: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var_os("CI").is_none(), "needs root (CI=true)");
        println!("SKIP: needs root for a PID namespace");
        return;
    }
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "pid_reuse_scenario",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO, "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("reuse checked"), "{text}");
}

#[test]
fn pid_reuse_scenario() {
    if std::env::var_os(SCENARIO).is_none() {
        return;
    }
    let dir = shofer_sys::proc::ProcDir::open().unwrap();
    let spawn = || Command::new("/bin/sleep").arg("100").spawn().unwrap();
    let set_last_pid = |n: i32| std::fs::write("/proc/sys/kernel/ns_last_pid", n.to_string());
    let mut old = spawn();
    let scanned = dir.stat(old.id() as i32).unwrap();
    old.kill().unwrap();
    old.wait().unwrap();
    // Start times are in clock ticks (10 ms): a reuse within one tick is what the identity
    // scheme cannot tell apart, and what needs the whole pid space cycled in 10 ms outside
    // a namespace like this one.
    std::thread::sleep(Duration::from_millis(30));
    set_last_pid(scanned.pid - 1).unwrap();
    let mut new = spawn();
    assert_eq!(new.id() as i32, scanned.pid, "the pid was not reused");
    assert!(!shofer_sys::pidfd::signal_if_same(
        &dir,
        &scanned,
        rustix::process::Signal::KILL
    ));
    assert!(!shofer_sys::pidfd::signal_group_if_same(
        &dir,
        &scanned,
        rustix::process::Signal::KILL,
        |_| true
    ));
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        new.try_wait().unwrap().is_none(),
        "the new process was signalled"
    );
    let now = dir.stat(new.id() as i32).unwrap();
    assert!(shofer_sys::pidfd::signal_if_same(
        &dir,
        &now,
        rustix::process::Signal::KILL
    ));
    let _ = new.wait();
    println!("reuse checked");
}
