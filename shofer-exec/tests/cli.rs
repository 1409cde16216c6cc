//! The `shofer` binary: exit codes, `--json`, `shofer read`, field cases 11 and 15 end to end,
//! signals, the worktree sandbox lookup, and ENOSPC while spilling (root only).

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{is_root, kill_leftovers, marker, skip, sleepers, survivors};

const SHOFER: &str = env!("CARGO_BIN_EXE_shofer");

fn shofer(args: &[&str]) -> Output {
    Command::new(SHOFER)
        .args(args)
        .env_remove("SHOFER_SANDBOX")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs a child to completion and returns its output and peak RSS in KiB (`wait4` rusage;
/// std's `wait` cannot return rusage, so the child is reaped here by hand).
#[allow(clippy::zombie_processes)]
fn with_peak_rss(mut cmd: Command) -> (Output, i64) {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let out_thread = {
        let mut so = child.stdout.unwrap();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut so, &mut v).unwrap();
            v
        })
    };
    let mut se = child.stderr.unwrap();
    let mut err = Vec::new();
    std::io::Read::read_to_end(&mut se, &mut err).unwrap();
    let mut status = 0;
    // Safety: a zeroed rusage is a valid out-parameter for wait4.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // Safety: waits for our own child with valid pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid);
    let status = std::os::unix::process::ExitStatusExt::from_raw(status);
    (
        Output {
            status,
            stdout: out_thread.join().unwrap(),
            stderr: err,
        },
        ru.ru_maxrss,
    )
}

#[test]
fn run_exit_code_is_the_commands() {
    let a = tempfile::tempdir().unwrap();
    let dir = a.path().to_str().unwrap();
    let o = shofer(&["run", "--artifacts", dir, "--", "echo hi; exit 42"]);
    assert_eq!(o.status.code(), Some(42));
    assert!(
        stdout(&o).ends_with("Exit code: 42\nOutput:\nhi\n\n"),
        "{}",
        stdout(&o)
    );
    let o = shofer(&["run", "--artifacts", dir, "--", "kill -TERM $$"]);
    assert_eq!(o.status.code(), Some(143));
    assert!(stdout(&o).contains("Process terminated by signal SIGTERM"));
    let o = shofer(&["run", "--artifacts", dir, "--", "echo", "several", "words"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).ends_with("Output:\nseveral words\n\n"));
}

#[test]
fn run_json_and_read_cli() {
    let a = tempfile::tempdir().unwrap();
    let dir = a.path().to_str().unwrap();
    let o = shofer(&[
        "run",
        "--artifacts",
        dir,
        "--preview",
        "small",
        "--json",
        "--",
        "seq 1 3000",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["status"], "exited");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["exit"], 0);
    assert_eq!(v["total_bytes"], 13893);
    let id = v["artifact_id"].as_str().unwrap().to_string();
    assert!(v["text"]
        .as_str()
        .unwrap()
        .contains(&format!("Artifact ID: {id}")));
    let o = shofer(&[
        "read",
        &id,
        "--artifacts",
        dir,
        "--search",
        "^299[0-9]$",
        "--limit",
        "12",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains("Total matches: 10 | Showing first 3\n\n 2990 | 2990\n"),
        "{}",
        stdout(&o)
    );
    let o = shofer(&["read", &id, "--artifacts", dir, "--offset", "-1"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "shofer: Invalid offset: -1. File size is 13893 bytes. Offset must be between 0 and 13892.\n");
    let o = shofer(&["read", "../../etc/passwd", "--artifacts", dir]);
    assert_eq!(o.status.code(), Some(1));
    let o = shofer(&["run", "--preview", "huge", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("expected small (5120 bytes), medium (10240) or large (20480)"));
}

#[test]
fn hard_timeout_exit_124_and_missing_cwd_125() {
    let a = tempfile::tempdir().unwrap();
    let dir = a.path().to_str().unwrap();
    let m = marker();
    let o = shofer(&[
        "run",
        "--artifacts",
        dir,
        "--hard-timeout",
        "0.5",
        "--",
        &format!("setsid sleep {m} & sleep {m}"),
    ]);
    let left = survivors(&m);
    kill_leftovers(&m);
    assert_eq!(o.status.code(), Some(124));
    assert_eq!(stdout(&o), "The command was terminated after exceeding a user-configured 0.5s timeout. Do not try to re-run the command.\n");
    assert!(left.is_empty(), "{left:?}");
    let o = shofer(&[
        "run",
        "--artifacts",
        dir,
        "--cwd",
        "/nonexistent-dir",
        "--",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(125));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "shofer: Working directory '/nonexistent-dir' does not exist.\n"
    );
}

#[test]
fn field_case_11_via_cli_returns_promptly_and_leaves_nothing() {
    let a = tempfile::tempdir().unwrap();
    let m = marker();
    let t = Instant::now();
    let o = shofer(&[
        "run",
        "--artifacts",
        a.path().to_str().unwrap(),
        "--",
        &format!("sleep {m} & echo started"),
    ]);
    assert!(
        t.elapsed() < Duration::from_millis(2500),
        "{:?}",
        t.elapsed()
    );
    assert!(stdout(&o).ends_with("Output:\nstarted\n\n"));
    let left = survivors(&m);
    kill_leftovers(&m);
    assert!(
        left.is_empty(),
        "shofer run leaves no background process behind: {left:?}"
    );
}

#[test]
fn sigint_to_shofer_aborts_and_kills_the_tree() {
    let a = tempfile::tempdir().unwrap();
    let m = marker();
    let child = Command::new(SHOFER)
        .args([
            "run",
            "--artifacts",
            a.path().to_str().unwrap(),
            "--",
            &format!("(setsid sleep {m} &); sleep {m}"),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(common::wait_for_processes(&m, 2) >= 2);
    // Safety: signal our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let left = survivors(&m);
    kill_leftovers(&m);
    assert_eq!(o.status.code(), Some(130));
    assert_eq!(stdout(&o), "Command execution was aborted by the user.\n");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn worktree_without_a_sandbox_binary_is_refused_not_run_unsandboxed() {
    let w = tempfile::tempdir().unwrap();
    let o = Command::new(SHOFER)
        .args([
            "run",
            "--artifacts",
            w.path().to_str().unwrap(),
            "--worktree",
            w.path().to_str().unwrap(),
            "--",
            "touch ran",
        ])
        .env("SHOFER_SANDBOX", "/nonexistent/shofer-sandbox")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("shofer-sandbox not found") && err.contains("never runs unsandboxed"),
        "{err}"
    );
    assert!(!w.path().join("ran").exists());
}

#[test]
fn field_case_15_one_huge_line_bounded_memory_complete_artifact_readable() {
    let a = tempfile::tempdir().unwrap();
    let dir = a.path().to_str().unwrap();
    let mut cmd = Command::new(SHOFER);
    cmd.args([
        "run",
        "--json",
        "--artifacts",
        dir,
        "--",
        "head -c 200000000 /dev/zero | tr '\\0' a; printf NEEDLE",
    ]);
    let (o, rss_kib) = with_peak_rss(cmd);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["total_bytes"], 200_000_006u64);
    let path = v["artifact_path"].as_str().unwrap();
    assert_eq!(std::fs::metadata(path).unwrap().len(), 200_000_006);
    assert!(rss_kib < 20 * 1024, "peak RSS {rss_kib} KiB");
    let id = v["artifact_id"].as_str().unwrap();
    // Page near the end.
    let o = shofer(&[
        "read",
        id,
        "--artifacts",
        dir,
        "--offset",
        "199999996",
        "--limit",
        "100",
    ]);
    assert_eq!(stdout(&o), format!("[Command Output: {id}]\nTotal size: 190.7MB | Showing bytes 199999996-200000006 | COMPLETE\n\n1 | aaaaNEEDLE\n"));
    // Search without loading it whole.
    let mut cmd = Command::new(SHOFER);
    cmd.args(["read", id, "--artifacts", dir, "--search", "needle"]);
    let (o, rss_kib) = with_peak_rss(cmd);
    let s = stdout(&o);
    assert!(
        s.contains("Total matches: 1 | Showing first 1\n\n    1 | [...")
            && s.trim_end().ends_with("aNEEDLE"),
        "{}",
        &s[..s.len().min(300)]
    );
    assert!(rss_kib < 20 * 1024, "search peak RSS {rss_kib} KiB");
}

#[test]
fn enospc_while_spilling_keeps_the_preview_and_says_so() {
    if !is_root() {
        skip(
            "enospc_while_spilling_keeps_the_preview_and_says_so",
            "needs root (mounts a tmpfs in a private mount namespace)",
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_str().unwrap();
    // A private mount namespace (unshare -m): the 1 MiB tmpfs is visible to this child only
    // and disappears with it.
    let script = r#"mount -t tmpfs -o size=1m shofer-enospc "$1" || exit 99; exec "$2" run --artifacts "$1" -- 'head -c 3000000 /dev/zero | tr "\0" e; echo tail-end'"#;
    let o = Command::new("unshare")
        .args([
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            dir,
            SHOFER,
        ])
        .process_group(0)
        .output()
        .unwrap();
    if o.status.code() == Some(99)
        || (!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("unshare"))
    {
        skip(
            "enospc_while_spilling_keeps_the_preview_and_says_so",
            &format!("cannot mount tmpfs: {}", String::from_utf8_lossy(&o.stderr)),
        );
        return;
    }
    let s = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{s}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(s.contains("Output (2.9MB) could not be fully persisted: No space left on device (os error 28). Artifact ID: cmd-"), "{}", &s[..300]);
    assert!(
        s.trim_end()
            .ends_with("tail-end\n\nUse read_command_output tool to view full output if needed.")
            || s.contains("tail-end\n"),
        "{}",
        &s[s.len() - 200..]
    );
    assert!(s.contains("[...") && s.contains("bytes omitted...]"));
    // Nothing leaked into the host's mount table.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains("shofer-enospc"));
    assert_eq!(sleepers("never-used-marker"), 0);
}

#[test]
fn commands_get_no_controlling_terminal_even_under_a_pty() {
    // The command runs in a new session: it cannot open /dev/tty (to read the user's terminal
    // or inject into it with TIOCSTI) even when `shofer` itself runs on a terminal.
    if Command::new("script").arg("--version").output().is_err() {
        skip(
            "commands_get_no_controlling_terminal_even_under_a_pty",
            "script(1) (bsdutils) not installed",
        );
        return;
    }
    let a = tempfile::tempdir().unwrap();
    let inner = format!(
        "{SHOFER} run --artifacts {} -- '( exec 3</dev/tty ) 2>/dev/null && echo has-tty || echo no-tty'",
        a.path().display()
    );
    // Outside any shofer run, the pty is this shell's controlling terminal:
    let o = Command::new("script")
        .args(["-qec", "( exec 3</dev/tty ) && echo has-tty", "/dev/null"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("has-tty"),
        "script gives a controlling terminal"
    );
    let o = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Output:\r\nno-tty") || out.contains("Output:\nno-tty"),
        "{out}"
    );
}

/// A timeout too large for a `Duration` used to panic (exit 101); it means "no timeout".
#[test]
fn run_huge_timeouts_do_not_panic() {
    for flag in ["--timeout", "--hard-timeout"] {
        let out = shofer(&["run", flag, "1e300", "--", "echo fine"]);
        assert_eq!(out.status.code(), Some(0), "{flag}: {out:?}");
        assert!(stdout(&out).contains("fine"));
    }
}
