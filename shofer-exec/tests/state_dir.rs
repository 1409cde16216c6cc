//! Issue 29 (F8): what `shofer run` keeps for later invocations — job records and artifacts
//! in its artifact directory — is checked when read as when written. `shofer run --worktree`
//! kept them under `$XDG_STATE_HOME/shofer/command-output` without the check `shofer serve`
//! makes (outside what the sandboxed command may write), and `shofer list|status|kill` read
//! `jobs/*.json` as trusted: a planted record made `shofer kill` signal another process of
//! the user's, a FIFO there hung `shofer list`.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SHOFER: &str = env!("CARGO_BIN_EXE_shofer");

/// `shofer ARGS`, killed (and the test failed) past 20 s.
fn shofer(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(SHOFER);
    cmd.args(args)
        .env_remove("XDG_STATE_HOME")
        .env_remove("SHOFER_SANDBOX")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("shofer {args:?} hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The default artifact directory under `HOME=/tmp/…` lies where every sandboxed command may
/// write: `shofer run --worktree` refuses it (as `shofer serve` does) and says what is valid.
#[test]
fn run_under_a_worktree_refuses_a_default_artifact_dir_a_command_can_write() {
    let home = tempfile::tempdir_in("/tmp").unwrap();
    let wt = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = shofer(
        &[
            "run",
            "--worktree",
            wt.path().to_str().unwrap(),
            "--",
            "echo ran",
        ],
        &[("HOME", home.path())],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(125), "{t}");
    assert!(
        t.contains("the default artifact directory cannot be used")
            && t.contains("which sandboxed commands may write")
            && t.contains("pass --artifacts DIR")
            && !t.contains("ran"),
        "{t}"
    );
}

/// The start time (clock ticks after boot) of `pid`, field 22 of `/proc/<pid>/stat`.
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(19).unwrap().parse().unwrap()
}

fn record(id: u64, pid: u32, start: u64, artifact: Option<&str>) -> String {
    serde_json::json!({
        "id": id, "command": "planted", "cwd": "/", "status": "running",
        "exit_code": null, "signal": null, "artifact_id": artifact, "background": [],
        "text": "", "supervisor_pid": pid, "supervisor_start": start, "preview_budget": 10240,
    })
    .to_string()
}

/// Records planted in `jobs/`: one naming another process of the user's (with its real start
/// time) is not signalled by `shofer kill` or `--all`; a FIFO and a symlink to `/dev/zero`
/// under record names neither hang nor fill `shofer list`; a record naming another file as its
/// artifact is refused by `shofer status`.
#[test]
fn planted_job_records_are_not_acted_on() {
    let a = tempfile::tempdir().unwrap();
    let jobs = a.path().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    /// Killed and reaped however the test ends.
    struct Victim(std::process::Child);
    impl Drop for Victim {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut victim = Victim(Command::new("sleep").arg("1000").spawn().unwrap());
    let pid = victim.0.id();
    let start = start_time(pid);
    std::fs::write(jobs.join("7.json"), record(7, pid, start, None)).unwrap();
    let fifo = std::ffi::CString::new(jobs.join("8.json").as_os_str().as_bytes()).unwrap();
    // Safety: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink("/dev/zero", jobs.join("9.json")).unwrap();
    std::fs::write(
        jobs.join("10.json"),
        record(10, pid, start, Some("../../../../etc/passwd")),
    )
    .unwrap();
    let dir = a.path().to_str().unwrap();
    let outcomes = [
        shofer(&["kill", "7", "--artifacts", dir], &[]),
        shofer(&["kill", "--all", "--artifacts", dir], &[]),
        shofer(&["list", "--artifacts", dir], &[]),
        shofer(&["status", "10", "--artifacts", dir], &[]),
    ];
    std::thread::sleep(Duration::from_millis(200));
    let alive = victim.0.try_wait().unwrap().is_none();
    drop(victim);
    let all: Vec<String> = outcomes.iter().map(text).collect();
    assert!(
        alive,
        "a planted record got the user's process killed: {all:#?}"
    );
    assert!(
        all[0].contains("supervisor (pid") && all[0].contains("is gone"),
        "{}",
        all[0]
    );
    assert!(
        all[1].contains("No detached command is running"),
        "{}",
        all[1]
    );
    // The record naming a user process is listed (as lost: no shofer supervisor), the FIFO
    // and the symlink are not records.
    assert!(
        all[2].contains("\"id\": 7")
            && all[2].contains("\"lost\"")
            && !all[2].contains("\"id\": 8"),
        "{}",
        all[2]
    );
    assert!(
        outcomes[3].status.code() == Some(1) && all[3].contains("is not the record of command 10"),
        "{}",
        all[3]
    );
}

/// A job directory others may write, or a symlink, is refused, naming what is valid.
#[test]
fn a_shared_or_symlinked_jobs_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let a = tempfile::tempdir().unwrap();
    let jobs = a.path().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    std::fs::set_permissions(&jobs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = a.path().to_str().unwrap();
    for args in [
        &["list", "--artifacts", dir][..],
        &["kill", "--all", "--artifacts", dir],
    ] {
        let o = shofer(args, &[]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(
            t.contains("group or others may write it")
                && t.contains("a directory of this user's that only it can write"),
            "{t}"
        );
    }
    // `jobs` a symlink to a directory that would pass: refused too.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir(elsewhere.path().join("jobs")).unwrap();
    std::fs::write(elsewhere.path().join("jobs/3.json"), record(3, 1, 0, None)).unwrap();
    std::fs::remove_dir(&jobs).unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join("jobs"), &jobs).unwrap();
    let o = shofer(&["list", "--artifacts", dir], &[]);
    let t = text(&o);
    assert!(
        o.status.code() == Some(1) && !t.contains("\"id\": 3"),
        "{t}"
    );
}
