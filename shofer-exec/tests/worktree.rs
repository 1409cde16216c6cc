//! The same scenarios through the worktree path: `shofer-sandbox <worktree> -- /bin/sh -c ...`
//! on a linked git worktree outside /tmp (field cases 11–16).

mod common;
use common::sandbox_binary;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{kill_leftovers, marker, survivors, wait_for_processes};
use shofer_exec::{CancellationToken, Engine, EngineConfig, ExecRequest, Outcome, Sandbox, Status};

struct Wt {
    _root: tempfile::TempDir,
    wt: PathBuf,
    artifacts: PathBuf,
}

/// A repository and a linked worktree under $HOME (outside /tmp, which the policy makes
/// writable and would hide failures).
fn linked_worktree() -> Wt {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/root".into());
    let root = tempfile::Builder::new()
        .prefix("shofer-exec-wt-")
        .tempdir_in(&home)
        .unwrap();
    let repo = root.path().join("repo");
    let wt = root.path().join("wt");
    let git = |args: &[&str], dir: &Path| {
        let o = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    std::fs::create_dir(&repo).unwrap();
    git(&["init", "-q"], &repo);
    git(
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ],
        &repo,
    );
    git(&["worktree", "add", "-q", wt.to_str().unwrap()], &repo);
    let artifacts = root.path().join("artifacts");
    Wt {
        _root: root,
        wt,
        artifacts,
    }
}

fn engine(w: &Wt, hard: Option<Duration>) -> Engine {
    let mut c = EngineConfig::new(&w.wt, &w.artifacts);
    c.subreaper = true;
    c.hard_timeout = hard;
    c.sandbox = Some(Sandbox {
        binary: sandbox_binary(),
        worktree: w.wt.clone(),
        extra_args: Vec::new(),
    });
    Engine::new(c).unwrap()
}

async fn run(e: &Engine, cmd: &str) -> Outcome {
    e.execute(ExecRequest {
        command: cmd.into(),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn preview_of(text: &str) -> &str {
    let start = text.find("\nPreview:\n").unwrap() + "\nPreview:\n".len();
    let end = text.rfind("\n\nUse read_command_output tool").unwrap();
    &text[start..end]
}

#[tokio::test]
async fn worktree_commands_are_sandboxed() {
    let w = linked_worktree();
    let e = engine(&w, None);
    let outside = w.wt.parent().unwrap().join("outside");
    let o = run(
        &e,
        &format!(
            "echo in > inside && cat inside; touch {} && echo escaped",
            outside.display()
        ),
    )
    .await;
    assert!(o.text.contains("Output:\nin\n"), "{}", o.text);
    assert!(
        !o.text.contains("escaped") && !outside.exists(),
        "{}",
        o.text
    );
    assert!(w.wt.join("inside").exists());
}

#[tokio::test]
async fn worktree_field_case_11_background_grandchild() {
    let w = linked_worktree();
    let e = engine(&w, None);
    let m = marker();
    let t = Instant::now();
    let o = run(&e, &format!("sleep {m} & echo started")).await;
    assert!(
        t.elapsed() < Duration::from_millis(2500),
        "{:?}",
        t.elapsed()
    );
    assert!(o.text.ends_with("Output:\nstarted\n"), "{}", o.text);
    drop(e);
    let left = survivors(&m);
    kill_leftovers(&m);
    assert!(left.is_empty(), "{left:?}");
}

/// Issue 13, case 3: under the sandbox too, background processes outliving the main process
/// keep running as part of the command, are named, their output keeps flowing into its
/// artifact, and terminate stops them (`shofer-sandbox --keep-descendants --status-fd`).
#[tokio::test]
async fn worktree_background_processes_keep_running_and_are_named() {
    let w = linked_worktree();
    let e = engine(&w, None);
    let m = marker();
    let t = Instant::now();
    let o = run(
        &e,
        // The main process exits only once all three background processes exist (the
        // subshell creates `ready` after forking its sleep), so the count is fixed; their
        // names are not (a child forked but not yet exec'd is still `sh`).
        &format!(
            "(sleep 0.8 & : > ready; wait; echo later-{m}) & sleep {m} & \
             until [ -e ready ]; do :; done; echo started; exit 3"
        ),
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(
        o.text
            .contains("Exit code: 3; 3 background process(es) still running (")
            && o.text.contains(&format!(
                "); their output keeps going to artifact cmd-{}.txt",
                o.id
            )),
        "{}",
        o.text
    );
    assert!(o.text.ends_with("Output:\nstarted\n"), "{}", o.text);
    assert_eq!(
        common::sleepers(&m),
        1,
        "the background sleep keeps running"
    );
    let art = o.artifact_path.clone().expect("an artifact");
    let t = Instant::now();
    while !std::fs::read_to_string(&art)
        .unwrap_or_default()
        .contains("later-")
        && t.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        std::fs::read_to_string(&art)
            .unwrap()
            .ends_with(&format!("started\nlater-{m}\n")),
        "output of background processes reaches the artifact"
    );
    let listed = e.list().into_iter().find(|x| x.id == o.id).unwrap();
    assert_eq!(listed.background, ["sleep"]);
    e.terminate(o.id).await.unwrap();
    let left = survivors(&m);
    kill_leftovers(&m);
    assert!(left.is_empty(), "terminate stops them: {left:?}");
}

#[tokio::test]
async fn worktree_field_case_12_no_survivor_after_hard_timeout_or_abort() {
    for kind in ["hard", "abort"] {
        let w = linked_worktree();
        let e = engine(&w, (kind == "hard").then_some(Duration::from_millis(1500)));
        let (a, b, c) = (marker(), marker(), marker());
        let abort = CancellationToken::new();
        let script = format!("setsid sleep {a} & (nohup sleep {b} >/dev/null 2>&1 &); sleep {c}");
        let req = ExecRequest {
            command: script,
            abort: Some(abort.clone()),
            ..Default::default()
        };
        if kind == "abort" {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                abort.cancel();
            });
        }
        let a2 = a.clone();
        let seen = tokio::task::spawn_blocking(move || wait_for_processes(&a2, 1));
        let o = e.execute(req).await.unwrap();
        assert!(seen.await.unwrap() >= 1);
        let left: Vec<i32> = [&a, &b, &c].iter().flat_map(|m| survivors(m)).collect();
        for m in [&a, &b, &c] {
            kill_leftovers(m);
        }
        assert!(left.is_empty(), "{kind}: {left:?}");
        assert_eq!(
            o.status,
            if kind == "hard" {
                Status::TimedOut
            } else {
                Status::Terminated
            }
        );
    }
}

#[tokio::test]
async fn worktree_field_cases_13_14_16_output_shapes() {
    let w = linked_worktree();
    let e = engine(&w, None);
    let o = run(
        &e,
        "i=0; while [ $i -lt 20000 ]; do printf '━'; i=$((i+1)); done",
    )
    .await;
    assert_eq!(o.total_bytes, 60_000);
    let p = preview_of(&o.text);
    assert!(!p.contains('\u{FFFD}'));
    let o = run(&e, "i=0; while [ $i -lt 50000 ]; do printf '%5d%%\\r' $((i % 100)); i=$((i+1)); done; echo done").await;
    // Carriage-return rewrites keep only the final line (issue 13, case 5).
    assert!(o.text.ends_with("Output:\ndone\n"), "{}", o.text);
    assert_eq!(o.total_bytes, 5);
    let o = run(&e, "printf 'a%.0s' $(seq 1 30000); printf 'END'").await;
    assert!(preview_of(&o.text).ends_with("aEND"));
    assert!(std::fs::read(o.artifact_path.unwrap())
        .unwrap()
        .ends_with(b"aEND"));
}

#[tokio::test]
async fn worktree_field_case_15_huge_line_is_spilled_whole_and_searchable() {
    let w = linked_worktree();
    let e = engine(&w, None);
    let o = run(&e, "head -c 30000000 /dev/zero | tr '\\0' a; printf NEEDLE").await;
    assert_eq!(o.total_bytes, 30_000_006);
    let id = o.artifact_id.clone().unwrap();
    assert_eq!(
        std::fs::metadata(o.artifact_path.unwrap()).unwrap().len(),
        30_000_006
    );
    let r = e.read(id, Some("needle".into()), None, None).await.unwrap();
    assert!(
        r.contains("Total matches: 1") && r.ends_with("aNEEDLE"),
        "{}",
        &r[..200]
    );
}

#[test]
fn cli_worktree_relative_path_runs_sandboxed_in_the_worktree() {
    let w = linked_worktree();
    let root = w.wt.parent().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_shofer"))
        .current_dir(root)
        .args([
            "run",
            "--artifacts",
            "artifacts",
            "--worktree",
            "wt",
            "--",
            "pwd; echo x > made; touch ../escaped",
        ])
        .env("SHOFER_SANDBOX", sandbox_binary())
        // The sandbox's object quarantines go with the scratch tree.
        .env("XDG_STATE_HOME", root.join("state"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let wt = std::fs::canonicalize(&w.wt).unwrap();
    assert!(
        out.contains(&format!("Output:\n{}\n", wt.display())),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "touch outside the worktree fails: {out}"
    );
    assert!(wt.join("made").exists() && !root.join("escaped").exists());
}

#[test]
fn cli_allow_unix_is_passed_to_the_sandbox() {
    // A host socket outside the worktree: refused, unless `--allow-unix` names it.
    let w = linked_worktree();
    let root = w.wt.parent().unwrap();
    let sock = root.join("host.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let connect = format!(
        "/usr/bin/python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('{}')\"",
        sock.display()
    );
    let run = |allow: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_shofer"));
        c.current_dir(root)
            .args(["run", "--artifacts", "artifacts", "--worktree", "wt"]);
        if allow {
            c.arg("--allow-unix").arg(&sock);
        }
        c.args(["--", &connect])
            .env("SHOFER_SANDBOX", sandbox_binary())
            .env("XDG_STATE_HOME", root.join("state"))
            // The sandbox's object quarantines go with the scratch tree.
            .env("XDG_STATE_HOME", root.join("state"))
            .output()
            .unwrap()
    };
    let denied = run(false);
    assert_eq!(denied.status.code(), Some(1), "{denied:?}");
    assert!(listener.accept().is_err(), "reached without --allow-unix");
    let allowed = run(true);
    assert_eq!(allowed.status.code(), Some(0), "{allowed:?}");
    assert!(
        listener.accept().is_ok(),
        "--allow-unix did not reach the sandbox"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_shofer"))
        .args(["run", "--allow-unix", "/x", "--", "true"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--allow-unix needs --worktree"));
}

#[test]
fn cli_allow_read_and_hide_are_passed_to_the_sandbox_and_a_refused_secret_explained() {
    // A scratch home with a secret location (~/.netrc) and a file only --hide hides.
    let w = linked_worktree();
    let root = w.wt.parent().unwrap();
    let home = root.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".netrc"), "netrc-secret-in-home").unwrap();
    std::fs::write(home.join("notes"), "notes-hidden-by-flag").unwrap();
    let script = format!(
        "cat {h}/.netrc; echo; cat {h}/notes; true",
        h = home.display()
    );
    let run_script = |flags: &[&str], script: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_shofer"));
        c.current_dir(root)
            .args(["run", "--artifacts", "artifacts", "--worktree", "wt"])
            .args(flags)
            .arg("--")
            .arg(script)
            .env("SHOFER_SANDBOX", sandbox_binary())
            .env("HOME", &home)
            .env("XDG_STATE_HOME", root.join("state"));
        let o = c.output().unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let run = |flags: &[&str]| run_script(flags, &script);
    let plain = run(&[]);
    assert!(!plain.contains("netrc-secret-in-home"), "{plain}");
    // A failed read of it: the engine's note names the location and the one flag.
    let failed = run_script(&[], &format!("cat {}/.netrc", home.display()));
    assert!(
        failed.contains("a secret location the sandbox hides by default (credentials)")
            && failed.contains(&format!("--allow-read {}/.netrc", home.display())),
        "{failed}"
    );
    assert!(plain.contains("notes-hidden-by-flag"), "{plain}");
    let netrc = home.join(".netrc");
    let notes = home.join("notes");
    let flagged = run(&[
        "--allow-read",
        netrc.to_str().unwrap(),
        "--hide",
        notes.to_str().unwrap(),
    ]);
    assert!(flagged.contains("netrc-secret-in-home"), "{flagged}");
    assert!(!flagged.contains("notes-hidden-by-flag"), "{flagged}");
    let o = Command::new(env!("CARGO_BIN_EXE_shofer"))
        .args(["run", "--hide", "/x", "--", "true"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--hide needs --worktree"));
}

#[test]
fn cli_secret_variables_are_withheld_said_once_and_kept_when_named() {
    // An inherited secret (GITHUB_TOKEN), one given explicitly (--env NPM_TOKEN=…) and an
    // ordinary variable, through `shofer run --worktree` and the sandbox.
    let w = linked_worktree();
    let root = w.wt.parent().unwrap();
    let run = |keep: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_shofer"));
        c.current_dir(root)
            .args(["run", "--artifacts", "artifacts", "--worktree", "wt"])
            .args(["--env", "NPM_TOKEN=explicit-npm"]);
        if let Some(k) = keep {
            c.args(["--keep-env", k]);
        }
        c.args(["--", "env"])
            .env("SHOFER_SANDBOX", sandbox_binary())
            .env("XDG_STATE_HOME", root.join("state"))
            .env("GITHUB_TOKEN", "inherited-gh-value")
            .env("SHOFER_TEST_ORDINARY", "plain")
            .output()
            .unwrap()
    };
    let o = run(None);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(!out.contains("GITHUB_TOKEN"), "{out}");
    assert!(out.contains("NPM_TOKEN=explicit-npm"), "{out}");
    assert!(out.contains("SHOFER_TEST_ORDINARY=plain"), "{out}");
    // Said by shofer, once, names only; not by the sandbox in the command's output.
    assert_eq!(err.matches("secret variables withheld").count(), 1, "{err}");
    assert!(
        err.contains("GITHUB_TOKEN") && !err.contains("inherited-gh-value"),
        "{err}"
    );
    assert!(!out.contains("secret variables withheld"), "{out}");
    let kept = run(Some("GITHUB_TOKEN"));
    let out = String::from_utf8_lossy(&kept.stdout);
    assert!(out.contains("GITHUB_TOKEN=inherited-gh-value"), "{out}");
    assert!(
        !String::from_utf8_lossy(&kept.stderr).contains("secret variables withheld"),
        "{kept:?}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_shofer"))
        .args(["run", "--keep-env", "X", "--", "true"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--keep-env needs --worktree"));
}
