//! `--status-fd` (issue 13): the command's PID once it runs, and its exit status the moment
//! its main process exits — also while `--keep-descendants` still waits for background
//! processes, which is how a caller learns the command's result before the sandbox ends.

mod common;

use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use common::*;

fn scratch_with_wt() -> (Scratch, PathBuf) {
    let s = Scratch::new();
    let wt = s.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    (s, wt)
}

/// Starts the sandbox with `--status-fd 9` on the write end of a pipe; returns it and the
/// read end, line by line.
fn start(
    wt: &Path,
    backend: &str,
    extra: &[&str],
    script: &str,
) -> (Child, BufReader<std::fs::File>) {
    let mut fds = [0; 2];
    // Safety: pipe2 writes two new descriptors into the array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // Safety: pipe2 just returned these descriptors; each is owned once.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let raw = write.as_raw_fd();
    let mut cmd = Run::new(wt)
        .backend(backend)
        .args(extra)
        .args(["--status-fd", "9"])
        .sh(script)
        .command();
    // Safety: dup2 and fcntl are async-signal-safe; the new descriptor 9 is not
    // close-on-exec. When the pipe's write end already is 9 (other tests' threads open and
    // close descriptors concurrently), dup2(9, 9) would keep its close-on-exec flag, so the
    // flag is cleared instead.
    unsafe {
        cmd.pre_exec(move || {
            let r = if raw == 9 {
                libc::fcntl(9, libc::F_SETFD, 0)
            } else {
                libc::dup2(raw, 9)
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.stdin(Stdio::null()).spawn().unwrap();
    drop(write);
    (child, BufReader::new(std::fs::File::from(read)))
}

/// The next JSON line, or `None` at EOF.
fn next(lines: &mut BufReader<std::fs::File>) -> Option<serde_json::Value> {
    let mut line = String::new();
    if lines.read_line(&mut line).unwrap() == 0 {
        return None;
    }
    Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
}

/// `sleep` of about three seconds with an argument unique to this test process and `tag`.
fn three_seconds(tag: u32) -> String {
    format!("3.0{:05}{tag}", std::process::id() % 100000)
}

#[test]
fn with_keep_descendants_the_exit_status_comes_at_once_and_the_sandbox_waits() {
    for (i, b) in backends().into_iter().filter(|b| *b != "bwrap").enumerate() {
        let (_s, wt) = scratch_with_wt();
        let sleep = three_seconds(i as u32);
        let (mut child, mut lines) = start(
            &wt,
            b,
            &["--keep-descendants"],
            &format!("(sleep {sleep}; touch late) & exit 7"),
        );
        let started = next(&mut lines).expect("a child-pid line");
        assert!(started["child-pid"].as_i64().unwrap() > 0, "{b}: {started}");
        let exited = next(&mut lines).expect("an exit-status line");
        assert_eq!(exited, serde_json::json!({"exit-status": 7}), "{b}");
        // Reported while the background job still runs and the sandbox still waits for it.
        assert!(
            child.try_wait().unwrap().is_none(),
            "{b}: the sandbox exited before the exit status was read"
        );
        assert!(
            !processes_with(&format!("sleep {sleep}")).is_empty(),
            "{b}: the background job is gone already"
        );
        assert!(!wt.join("late").exists(), "{b}");
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(7), "{b}");
        assert!(
            wt.join("late").exists(),
            "{b}: the background job was killed"
        );
        assert_eq!(next(&mut lines), None, "{b}: one exit status only");
    }
}

#[test]
fn without_keep_descendants_the_status_is_written_and_background_processes_end() {
    for (i, b) in backends().into_iter().enumerate() {
        let (_s, wt) = scratch_with_wt();
        let sleep = unique_sleep(20 + i as u32);
        let (mut child, mut lines) = start(
            &wt,
            b,
            &[],
            &format!("echo $$ > pid; sleep {sleep} & exit 7"),
        );
        let started = next(&mut lines).expect("a child-pid line");
        assert_eq!(
            next(&mut lines),
            Some(serde_json::json!({"exit-status": 7})),
            "{b}"
        );
        assert_eq!(next(&mut lines), None, "{b}");
        assert_eq!(child.wait().unwrap().code(), Some(7), "{b}");
        assert!(
            processes_with(&sleep).is_empty(),
            "{b}: survivor sleep {sleep}"
        );
        if b == "landlock" {
            // Without a PID namespace the reported PID is the shell's own.
            let pid: i64 = std::fs::read_to_string(wt.join("pid"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert_eq!(started["child-pid"], pid);
        }
    }
}

#[test]
fn a_command_that_cannot_start_writes_no_status() {
    for b in backends() {
        let (_s, wt) = scratch_with_wt();
        let (mut child, mut lines) = start(&wt, b, &[], "exec shofer-no-such-command-4711");
        // The shell starts, then its exec fails: 127 from the shell, reported as an exit.
        assert!(next(&mut lines).is_some(), "{b}");
        assert_eq!(
            next(&mut lines),
            Some(serde_json::json!({"exit-status": 127})),
            "{b}"
        );
        assert_eq!(child.wait().unwrap().code(), Some(127), "{b}");

        let out = Run::new(&wt)
            .backend(b)
            .args(["--status-fd", "1", "--", "shofer-no-such-command-4711"])
            .output();
        assert_eq!(out.status.code(), Some(127), "{b}: {}", show(&out));
        assert!(out.stdout.is_empty(), "{b}: {}", show(&out));
    }
}

#[test]
fn a_status_fd_that_is_not_open_is_refused() {
    let (_s, wt) = scratch_with_wt();
    let out = Run::new(&wt)
        .args(["--status-fd", "77", "--", "true"])
        .output();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("file descriptor 77 is not open (given to --status-fd)"),
        "{}",
        show(&out)
    );
}
