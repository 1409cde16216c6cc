//! Agents' and editors' project files at the worktree's top (`.claude/`, `.mcp.json`,
//! `.vscode/`, …) stay the user's: a command that wrote a hook into `.claude/settings.json`
//! or a folder-open task into `.vscode/tasks.json` would have the agent host or the editor run
//! it on the host. On every backend, as root and as uid 65534, in a plain directory and in a
//! git worktree, every way of writing them fails or is undone: during the run on the namespace
//! backends (read-only binds), at once on Landlock (the guard); after the run nothing of the
//! command's is there and no placeholder is left. `--allow-write` of one of them makes it the
//! command's.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

/// What the user had before the run: (path under the worktree, content).
const USERS: &[(&str, &str)] = &[
    (".vscode/tasks.json", "users-tasks-1a2b"),
    (".claude/settings.json", "users-claude-settings-3c4d"),
];

/// Names absent before the run, which must be absent after it.
const ABSENT: &[&str] = &[".mcp.json", ".gemini", ".codex", ".cursor", ".idea", ".zed"];

/// Every way the command tries; each step may fail (`;`).
const ATTACK: &str = "echo evil > .claude/settings.json; \
    mkdir -p .claude/commands; echo evil > .claude/commands/x.md; \
    echo '{\"mcpServers\":{}}' > .mcp.json; \
    mkdir .gemini; echo evil > .gemini/settings.json; \
    mv .vscode .vscode-old; mkdir .vscode; echo evil > .vscode/tasks.json; \
    rmdir .codex; ln -s /tmp .codex; \
    rm -rf .idea; mkdir -p t/.zed && mv t/.zed .zed; echo evil > .zed/tasks.json; \
    echo done > ok";

fn worktree(s: &Scratch, git: bool) -> std::path::PathBuf {
    let wt = s.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    if git {
        common::git(&wt, &["init", "-q", "-b", "main"]);
    }
    for (path, content) in USERS {
        let p = wt.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    wt
}

/// What is wrong with the user's files in `wt` now.
fn tampered_users(wt: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (path, content) in USERS {
        match std::fs::read_to_string(wt.join(path)) {
            Ok(c) if c == *content => {}
            other => out.push(format!("{path}: {other:?}")),
        }
    }
    out
}

/// What is wrong in `wt` now: the user's files, and anything at a protected name.
fn tampered(wt: &Path) -> Vec<String> {
    let mut out = tampered_users(wt);
    for name in [
        ".claude/commands",
        ".gemini/settings.json",
        ".zed/tasks.json",
    ] {
        if std::fs::symlink_metadata(wt.join(name)).is_ok() {
            out.push(format!("{name} exists"));
        }
    }
    for name in ABSENT {
        if std::fs::symlink_metadata(wt.join(name)).is_ok() {
            out.push(format!("{name} exists"));
        }
    }
    out
}

/// `body`, then the file `ready` made, then a wait for the file `go`: the run stays up while
/// the test looks at the worktree.
fn held(body: &str, ready: &Path, go: &Path) -> String {
    format!(
        "{body}; touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done",
        ready.display(),
        go.display()
    )
}

/// Waits up to `secs` seconds for `done`; whether it came.
fn wait_for(secs: u64, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
fn agents_and_editors_project_files_stay_the_users() {
    let mut failures = Vec::new();
    for git in [false, true] {
        for b in backends() {
            for uid in [None, Some(UNPRIV)]
                .into_iter()
                .filter(|u| u.is_none() || is_root())
            {
                let cell = format!("git {git} / {b} / uid {uid:?}");
                let s = Scratch::new();
                let wt = worktree(&s, git);
                let tmp = Scratch::new_in("/tmp");
                if let Some(u) = uid {
                    s.chown_all(u);
                    tmp.chown_all(u);
                }
                let ready = tmp.path().join("ready");
                let go = s.path().join("go");
                let mut run = Run::new(&wt)
                    .args(["--backend", b])
                    .sh(&held(ATTACK, &ready, &go));
                if let Some(u) = uid {
                    run = run.with_uid(u);
                }
                let (child, _copy) = run.spawn();
                assert!(
                    wait_for(20, || ready.exists()),
                    "{cell}: the command never got ready"
                );
                // The user's files are read-only binds on the namespace backends; what the
                // command made at an absent name, and on Landlock anything it changed, is
                // undone at once by the guard's watcher: while the command still runs.
                if b != "landlock" {
                    for t in tampered_users(&wt) {
                        failures.push(format!("{cell}: during the run: {t}"));
                    }
                }
                wait_for(5, || tampered(&wt).is_empty());
                for t in tampered(&wt) {
                    failures.push(format!("{cell}: during the run, 5 s on: {t}"));
                }
                std::fs::write(&go, "").unwrap();
                let out = child.wait_with_output().unwrap();
                assert!(out.status.success(), "{cell}: {}", show(&out));
                assert!(wt.join("ok").exists(), "{cell}: the command did not finish");
                for t in tampered(&wt) {
                    failures.push(format!("{cell}: after the run: {t}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_named_allow_write_makes_one_of_them_the_commands() {
    for b in backends() {
        let s = Scratch::new();
        let wt = worktree(&s, false);
        let out = Run::new(&wt)
            .args(["--backend", b, "--allow-write"])
            .arg(wt.join(".vscode"))
            .arg("--report")
            .arg("9")
            .fd9(std::fs::File::create(s.path().join("report")).unwrap())
            // Landlock's guard undoes the write when it has happened.
            .sh(if b == "landlock" {
                "echo mine > .vscode/tasks.json && echo evil > .claude/settings.json"
            } else {
                "echo mine > .vscode/tasks.json && ! echo evil > .claude/settings.json"
            })
            .output();
        assert!(out.status.success(), "{b}: {}", show(&out));
        assert_eq!(
            std::fs::read_to_string(wt.join(".vscode/tasks.json")).unwrap(),
            "mine\n",
            "{b}"
        );
        assert_eq!(
            std::fs::read_to_string(wt.join(".claude/settings.json")).unwrap(),
            "users-claude-settings-3c4d",
            "{b}"
        );
        let report = std::fs::read_to_string(s.path().join("report")).unwrap();
        let first: serde_json::Value =
            serde_json::from_str(report.lines().next().unwrap()).unwrap();
        let protected = first["git"]["protected"].as_array().unwrap();
        let row = |name: &str| {
            protected
                .iter()
                .find(|r| r["path"] == wt.join(name).to_string_lossy().as_ref())
                .cloned()
        };
        assert!(row(".vscode").is_none(), "{b}: {protected:?}");
        let claude = row(".claude").unwrap_or_else(|| panic!("{b}: {protected:?}"));
        assert!(
            claude["what"].as_str().unwrap().contains("Claude Code"),
            "{b}: {claude}"
        );
    }
}

/// Issue 29 (a fresh attack): a tree at a protected name too big to take apart in one pass
/// (millions of hard links that list before the file that matters) outlasted every removal,
/// and the next run took the planted `.claude/settings.json` for the user's (here `.gemini/`,
/// absent before: the user's `.claude/` is a read-only bind). The name goes
/// first, in one rename to a `.shofer-removed-*` name no program reads: it is gone while the
/// command runs and after, whatever the tree holds; the aside stays for the user to look at.
#[test]
fn a_big_tree_at_a_protected_name_goes_at_once() {
    let mut failures = Vec::new();
    for b in backends() {
        let s = Scratch::new();
        let wt = worktree(&s, true);
        let tmp = Scratch::new_in("/tmp");
        let ready = tmp.path().join("ready");
        let go = s.path().join("go");
        let plant = "python3 -c '
import os
os.makedirs(\".stage/d\")
open(\".stage/d/f\", \"w\").close()
for i in range(10000):
    os.link(\".stage/d/f\", \".stage/d/%d\" % i)
open(\".stage/settings.json\", \"w\").write(\"{}\")
os.rename(\".stage\", \".gemini\")
'";
        let (child, _copy) = Run::new(&wt)
            .args(["--backend", b])
            .env("XDG_STATE_HOME", s.path().join("state"))
            .sh(&held(plant, &ready, &go))
            .spawn();
        wait_for(60, || ready.exists());
        if !wait_for(5, || !wt.join(".gemini").exists()) {
            failures.push(format!(
                "{b}: the planted tree is at .gemini during the run"
            ));
        }
        std::fs::write(&go, "").unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !tampered_users(&wt).is_empty() || wt.join(".gemini").exists() {
            failures.push(format!(
                "{b}: after the run: {:?}; {stderr}",
                tampered_users(&wt)
            ));
        }
        // Kept aside, for the user to look at: the supervisor never takes apart what the
        // command could have put under that name.
        let aside = std::fs::read_dir(&wt).unwrap().flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".shofer-removed-")
        });
        if !aside || !stderr.contains("moved to .shofer-removed-* names") {
            failures.push(format!("{b}: no aside, or not said: {stderr}"));
        }
        // The next run finds nothing to adopt.
        let out = Run::new(&wt)
            .args(["--backend", b])
            .env("XDG_STATE_HOME", s.path().join("state"))
            .sh("test ! -e .gemini && cat .claude/settings.json")
            .output();
        if !String::from_utf8_lossy(&out.stdout).contains("users-claude-settings") {
            failures.push(format!("{b}: the next run reads {}", show(&out)));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Issue 29 (a fresh attack): a supervisor killed (the engine's hard timeout sends SIGKILL)
/// while the command kept writing `.mcp.json` left it in place on the namespace backends, with
/// no journal, and the next run bound it read-only as the user's. The journal names the absent
/// names on every backend; the next run removes what the command left there.
#[test]
fn a_killed_supervisor_leaves_no_planted_file_for_the_next_run() {
    let mut failures = Vec::new();
    for b in backends() {
        let s = Scratch::new();
        let wt = worktree(&s, false);
        let tmp = Scratch::new_in("/tmp");
        let ready = tmp.path().join("ready");
        // A bounded writer: it stops by itself where SIGKILL does not take the tree along.
        let script = format!(
            "touch '{r}'; i=0; while [ $i -lt 300 ]; do echo '{{}}' > .mcp.json 2>/dev/null; \
             mkdir -p .gemini 2>/dev/null; echo x > .gemini/settings.json 2>/dev/null; \
             i=$((i+1)); sleep 0.01; done",
            r = ready.display()
        );
        let (mut child, _copy) = Run::new(&wt)
            .args(["--backend", b])
            .env("XDG_STATE_HOME", s.path().join("state"))
            .sh(&script)
            .spawn();
        wait_for(20, || ready.exists());
        std::thread::sleep(Duration::from_millis(300));
        child.kill().unwrap();
        child.wait().unwrap();
        // The writer's own end (3 s at most), wherever SIGKILL left it.
        std::thread::sleep(Duration::from_secs(4));
        let out = Run::new(&wt)
            .args(["--backend", b])
            .env("XDG_STATE_HOME", s.path().join("state"))
            .sh("test ! -e .mcp.json && test ! -e .gemini")
            .output();
        if !out.status.success() {
            failures.push(format!("{b}: the next run finds the plant: {}", show(&out)));
        }
        for name in [".mcp.json", ".gemini"] {
            if std::fs::symlink_metadata(wt.join(name)).is_ok() {
                failures.push(format!("{b}: {name} after the next run"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Issue 29 (a second fresh attack): the command owns the worktree and took its write bit
/// away (`chmod 555 .`) right after moving its `.claude/` in: the guard's rename failed with
/// EACCES and the plant stayed for the whole run on the namespace backends. The guard puts the
/// directory's mode back and removes it, however often the command takes the bit away.
#[test]
fn a_worktree_made_read_only_does_not_keep_a_plant() {
    let mut failures = Vec::new();
    for b in backends() {
        for uid in [None, Some(UNPRIV)]
            .into_iter()
            .filter(|u| u.is_none() || is_root())
        {
            let cell = format!("{b} / uid {uid:?}");
            let s = Scratch::new();
            let wt = worktree(&s, false);
            let tmp = Scratch::new_in("/tmp");
            if let Some(u) = uid {
                s.chown_all(u);
                tmp.chown_all(u);
            }
            let ready = tmp.path().join("ready");
            let go = s.path().join("go");
            let plant = "python3 -c '
import os, time
def stage():
    os.makedirs(\"s/.gemini\", exist_ok=True)
    open(\"s/.gemini/settings.json\", \"w\").write(\"evil\")
for i in range(100):
    try:
        stage()
        os.rename(\"s/.gemini\", \".gemini\")
    except OSError:
        pass
    os.chmod(\".\", 0o555)
    time.sleep(0.02)
    won = os.path.exists(\".gemini/settings.json\")
    os.chmod(\".\", 0o755)
    if won:
        os.chmod(\".\", 0o555)
        break
'";
            let mut run = Run::new(&wt)
                .args(["--backend", b])
                .sh(&held(plant, &ready, &go));
            if let Some(u) = uid {
                run = run.with_uid(u);
            }
            let (child, _copy) = run.spawn();
            wait_for(30, || ready.exists());
            if !wait_for(5, || !wt.join(".gemini").exists()) {
                failures.push(format!("{cell}: .gemini stays during the run"));
            }
            std::fs::write(&go, "").unwrap();
            let out = child.wait_with_output().unwrap();
            if wt.join(".gemini").exists() {
                failures.push(format!("{cell}: .gemini after the run: {}", show(&out)));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Issue 29 (a second fresh attack): on Landlock alone `chmod 777` of a guarded directory
/// (`.claude/`, `.vscode/`, `.git/hooks`) stayed after the run, and another local user could
/// then plant a hook. Its own mode is put back; the namespace backends refuse the chmod
/// (read-only binds).
#[test]
fn a_guarded_directorys_mode_is_put_back() {
    for b in backends() {
        let s = Scratch::new();
        let wt = worktree(&s, true);
        let hooks = wt.join(".git/hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        let mode = |p: &Path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
        };
        let before: Vec<u32> = [".claude", ".vscode"]
            .iter()
            .map(|n| mode(&wt.join(n)))
            .chain([mode(&hooks)])
            .collect();
        let out = Run::new(&wt)
            .args(["--backend", b])
            .sh("chmod 777 .claude .vscode .git/hooks; sleep 0.3")
            .output();
        let after: Vec<u32> = [".claude", ".vscode"]
            .iter()
            .map(|n| mode(&wt.join(n)))
            .chain([mode(&hooks)])
            .collect();
        assert_eq!(before, after, "{b}: {}", show(&out));
    }
}

/// Issue 29 (a third fresh attack): the supervisor took apart the asides when the run ended,
/// whatever the command had moved under their names since: a directory holding the user's
/// read-only hooks (an in-tree `core.hooksPath`) was destroyed on the host. Asides are never
/// taken apart by the supervisor.
#[test]
fn what_lies_under_an_aside_name_is_never_taken_apart() {
    for b in backends() {
        let s = Scratch::new();
        let wt = worktree(&s, true);
        common::git(&wt, &["config", "core.hooksPath", "tools/hooks"]);
        std::fs::create_dir_all(wt.join("tools/hooks")).unwrap();
        std::fs::write(wt.join("tools/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        let out = Run::new(&wt)
            .args(["--backend", b])
            .sh("mkdir .gemini; i=0; while [ $i -lt 200 ] && ! ls -A | grep -q shofer-removed; do sleep 0.01; i=$((i+1)); done; \
                 a=$(ls -A | grep shofer-removed | head -1); mv \"$a\" junk && mv tools \"$a\"; true")
            .output();
        assert!(
            wt.join("junk").exists() || b == "landlock",
            "{b}: the aside never appeared: {}",
            show(&out)
        );
        let kept = std::fs::read_dir(&wt)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".shofer-removed-")
            })
            .any(|e| e.path().join("hooks/pre-commit").exists())
            || wt.join("tools/hooks/pre-commit").exists();
        assert!(kept, "{b}: the user's hook is gone: {}", show(&out));
    }
}
