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
                let script = format!(
                    "{ATTACK}; touch '{r}'; while [ ! -e '{g}' ]; do sleep 0.02; done",
                    r = ready.display(),
                    g = go.display()
                );
                let mut run = Run::new(&wt).args(["--backend", b]).sh(&script);
                if let Some(u) = uid {
                    run = run.with_uid(u);
                }
                let (child, _copy) = run.spawn();
                let deadline = Instant::now() + Duration::from_secs(20);
                while !ready.exists() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                assert!(ready.exists(), "{cell}: the command never got ready");
                // The user's files are read-only binds on the namespace backends; what the
                // command made at an absent name, and on Landlock anything it changed, is
                // undone at once by the guard's watcher: while the command still runs.
                if b != "landlock" {
                    for t in tampered_users(&wt) {
                        failures.push(format!("{cell}: during the run: {t}"));
                    }
                }
                let deadline = Instant::now() + Duration::from_secs(5);
                while !tampered(&wt).is_empty() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
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
