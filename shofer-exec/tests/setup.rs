//! `shofer init`, `shofer hook` and `shofer doctor` on realistic sample files of each agent's
//! format, under a scratch HOME (never the user's own files): init, init again (no change),
//! undo (byte-identical), dry-run (nothing written), a broken file (untouched, an error naming
//! it), a file the user changed (left alone); the hook's rewrite run for real in a sandbox; the
//! doctor's healthy case, a wired entry whose binary is gone, and a foreign `shofer-sandbox`
//! earlier on PATH.

mod common;
use common::sandbox_binary;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SHOFER: &str = env!("CARGO_BIN_EXE_shofer");

/// A scratch home outside /tmp (the sandbox makes /tmp writable, so shofer refuses state
/// directories there), with a git repository `proj` in it.
struct Home {
    _dir: tempfile::TempDir,
    home: PathBuf,
    proj: PathBuf,
}

fn scratch_home() -> Home {
    let real = std::env::var_os("HOME").expect("HOME");
    let dir = tempfile::Builder::new()
        .prefix("shofer-setup-test-")
        .tempdir_in(&real)
        .unwrap();
    let home = std::fs::canonicalize(dir.path()).unwrap().join("h");
    let proj = home.join("proj");
    std::fs::create_dir_all(proj.join("sub")).unwrap();
    let st = Command::new("git")
        .args(["init", "-q"])
        .arg(&proj)
        .status()
        .unwrap();
    assert!(st.success());
    Home {
        _dir: dir,
        home,
        proj,
    }
}

fn shofer(h: &Home, args: &[&str]) -> Output {
    shofer_in(h, &h.proj, args)
}

/// `shofer ARGS` started in `dir` with the scratch home (stdin empty: `serve` ends at once).
fn shofer_in(h: &Home, dir: &Path, args: &[&str]) -> Output {
    Command::new(SHOFER)
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .env("HOME", &h.home)
        .env_remove("CODEX_HOME")
        .env_remove("SHOFER_SANDBOX")
        .env("XDG_STATE_HOME", h.home.join(".local/state"))
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

/// Claude Code's files as it writes them (JSON.stringify(v, null, 2)), with another server,
/// other keys and another PreToolUse hook.
const CLAUDE_JSON: &str = r#"{
  "numStartups": 12,
  "theme": "dark",
  "mcpServers": {
    "github": {
      "type": "stdio",
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-github"
      ],
      "env": {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_example"
      }
    }
  },
  "projects": {
    "/home/u/app": {
      "allowedTools": [],
      "hasTrustDialogAccepted": true
    }
  },
  "userID": "abc123"
}
"#;

const CLAUDE_SETTINGS: &str = r#"{
  "permissions": {
    "allow": [
      "Bash(npm test:*)"
    ],
    "deny": [
      "Read(./.env)"
    ]
  },
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Edit|Write",
        "hooks": [
          {
            "type": "command",
            "command": "$CLAUDE_PROJECT_DIR/.claude/hooks/check.sh",
            "timeout": 30
          }
        ]
      }
    ],
    "PostToolUse": [
      {
        "matcher": "Write",
        "hooks": [
          {
            "type": "command",
            "command": "prettier --write"
          }
        ]
      }
    ]
  },
  "model": "opus"
}
"#;

const CODEX_TOML: &str = r#"# Codex settings
model = "o3"
approval_policy = "on-request" # ask before running

[mcp_servers.docs]
command = "npx"
args = ["-y", "mcp-docs"]
startup_timeout_sec = 20

[mcp_servers.docs.env]
DOCS_TOKEN = "x" # token

# profiles below
[profiles.fast]
model = "o4-mini"
"#;

const GEMINI_SETTINGS: &str = r#"{
  "theme": "GitHub",
  "mcpServers": {
    "files": {
      "command": "node",
      "args": [
        "server.js"
      ],
      "cwd": "/opt/files",
      "timeout": 30000
    }
  },
  "hooks": {
    "BeforeTool": [
      {
        "matcher": "write_file|replace",
        "hooks": [
          {
            "name": "secret-scanner",
            "type": "command",
            "command": "$GEMINI_PROJECT_DIR/.gemini/hooks/scan.sh"
          }
        ]
      }
    ]
  }
}
"#;

/// init, init again, dry-run undo, undo: what every format must do.
fn cycle(agent: &str, files: &[(PathBuf, Option<&str>)], must_contain: &[(usize, &str)]) {
    let h = scratch_home();
    let files: Vec<(PathBuf, Option<&str>)> =
        files.iter().map(|(p, t)| (h.home.join(p), *t)).collect();
    for (p, t) in &files {
        if let Some(t) = t {
            write(p, t);
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o640)).unwrap();
        }
    }
    let snapshot = || files.iter().map(|(p, _)| read(p)).collect::<Vec<_>>();
    let original = snapshot();

    // Dry run: prints the result, writes nothing.
    let o = shofer(&h, &["init", agent, "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("would add"), "{}", text(&o));
    assert_eq!(snapshot(), original, "--dry-run wrote");

    let o = shofer(&h, &["init", agent]);
    assert!(o.status.success(), "{}", text(&o));
    let wired = snapshot();
    assert_ne!(wired, original);
    for (i, needle) in must_contain {
        let t = wired[*i].as_deref().unwrap_or("");
        assert!(
            t.contains(needle),
            "{}: no {needle:?} in\n{t}",
            files[*i].0.display()
        );
    }
    // Every original line is still there (other servers, hooks, comments, keys).
    for (before, after) in original.iter().zip(&wired) {
        if let (Some(b), Some(a)) = (before, after) {
            for line in b.lines() {
                assert!(a.contains(line), "lost {line:?}:\n{a}");
            }
        }
    }
    for (p, t) in &files {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode,
            if t.is_some() { 0o640 } else { 0o600 },
            "{}",
            p.display()
        );
    }

    // Again: nothing changes.
    let o = shofer(&h, &["init", agent]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already in place"), "{}", text(&o));
    assert_eq!(snapshot(), wired);

    let o = shofer(&h, &["init", agent, "--undo", "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(snapshot(), wired, "--undo --dry-run wrote");

    // Undo: byte-identical to the original (files init created are gone again).
    let o = shofer(&h, &["init", agent, "--undo"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(snapshot(), original, "{}", text(&o));
    let o = shofer(&h, &["init", agent, "--undo"]);
    assert!(text(&o).contains("to remove"), "{}", text(&o));
    assert_eq!(snapshot(), original);
}

#[test]
fn claude_user_scope_cycle() {
    cycle(
        "claude",
        &[
            (".claude.json".into(), Some(CLAUDE_JSON)),
            (".claude/settings.json".into(), Some(CLAUDE_SETTINGS)),
        ],
        &[
            (0, "\"shofer\": {\n      \"type\": \"stdio\""),
            (0, "\"--project\""),
            (1, "\"matcher\": \"Bash\""),
            (1, "hook claude\""),
        ],
    );
}

#[test]
fn claude_fresh_home_cycle() {
    cycle(
        "claude",
        &[
            (".claude.json".into(), None),
            (".claude/settings.json".into(), None),
        ],
        &[(0, "\"mcpServers\""), (1, "\"PreToolUse\"")],
    );
}

#[test]
fn codex_toml_cycle_keeps_comments() {
    cycle(
        "codex",
        &[(".codex/config.toml".into(), Some(CODEX_TOML))],
        &[
            (0, "[mcp_servers.shofer]"),
            (0, "args = [\"serve\", \"--project\"]"),
        ],
    );
}

#[test]
fn gemini_cycle() {
    cycle(
        "gemini",
        &[(".gemini/settings.json".into(), Some(GEMINI_SETTINGS))],
        &[
            (0, "\"matcher\": \"run_shell_command\""),
            (0, "hook gemini\""),
            (0, "\"secret-scanner\""),
        ],
    );
}

#[test]
fn cursor_cycle_creates_and_removes_its_file() {
    cycle(
        "cursor",
        &[(".cursor/mcp.json".into(), None)],
        &[(0, "\"mcpServers\"")],
    );
}

#[test]
fn project_scope_names_the_worktree() {
    let h = scratch_home();
    let o = shofer(&h, &["init", "claude", "--scope", "project"]);
    assert!(o.status.success(), "{}", text(&o));
    let mcp = read(&h.proj.join(".mcp.json")).unwrap();
    assert!(
        mcp.contains(&format!(
            "\"--worktree\",\n        \"{}\"",
            h.proj.display()
        )),
        "{mcp}"
    );
    assert!(read(&h.proj.join(".claude/settings.json"))
        .unwrap()
        .contains("hook claude"));
    assert!(read(&h.home.join(".claude.json")).is_none());
    // Outside a repository there is no project: a clear error, nothing written.
    let o = shofer_in(&h, &h.home, &["init", "gemini", "--scope", "project"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("not inside a git worktree"),
        "{}",
        text(&o)
    );
    // A home that is itself a repository (dotfiles) is still refused.
    let st = Command::new("git")
        .args(["init", "-q"])
        .arg(&h.home)
        .status()
        .unwrap();
    assert!(st.success());
    let o = shofer_in(&h, &h.home, &["init", "gemini", "--scope", "project"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("home directory"), "{}", text(&o));
    assert!(read(&h.home.join(".gemini/settings.json")).is_none());
}

#[test]
fn a_broken_file_is_an_error_and_nothing_is_written() {
    let h = scratch_home();
    let broken = "{\n  \"numStartups\": 3,\n  \"mcpServers\": {\n";
    write(&h.home.join(".claude.json"), broken);
    let o = shofer(&h, &["init", "claude"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains(".claude.json") && t.contains("not valid JSON"),
        "{t}"
    );
    assert_eq!(read(&h.home.join(".claude.json")).unwrap(), broken);
    // The other file of the pair was not written either.
    assert!(read(&h.home.join(".claude/settings.json")).is_none());

    write(
        &h.home.join(".codex/config.toml"),
        "model = \"o3\"\n[mcp_servers\n",
    );
    let o = shofer(&h, &["init", "codex"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("config.toml") && text(&o).contains("not valid TOML"));
    assert_eq!(
        read(&h.home.join(".codex/config.toml")).unwrap(),
        "model = \"o3\"\n[mcp_servers\n"
    );
}

#[test]
fn an_entry_the_user_changed_is_left_alone() {
    let h = scratch_home();
    assert!(shofer(&h, &["init", "gemini"]).status.success());
    let p = h.home.join(".gemini/settings.json");
    let mine = read(&p).unwrap().replace(
        "\"--project\"",
        "\"--project\",\n        \"--net\",\n        \"deny\"",
    );
    write(&p, &mine);
    let o = shofer(&h, &["init", "gemini", "--undo"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("left alone"), "{}", text(&o));
    let after = read(&p).unwrap();
    assert!(after.contains("\"deny\""), "{after}");
    // The hook, which is exactly init's, went.
    assert!(!after.contains("hook gemini"), "{after}");
    // init does not overwrite it either, and says the wiring is not complete.
    let o = shofer(&h, &["init", "gemini"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(read(&p).unwrap().contains("\"deny\""));
}

fn hook(h: &Home, agent: &str, input: &str) -> Output {
    use std::io::Write;
    let mut c = Command::new(SHOFER)
        .args(["hook", agent])
        .env("HOME", &h.home)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    c.wait_with_output().unwrap()
}

#[test]
fn the_claude_hook_routes_bash_through_the_sandbox() {
    let h = scratch_home();
    let sub = h.proj.join("sub");
    let input = serde_json::json!({
        "session_id": "s", "transcript_path": "/dev/null", "cwd": sub,
        "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": "echo 'in' > inside.txt; touch ../../outside.txt; echo \"$(pwd)\"", "description": "try", "timeout": 5000}
    });
    let o = hook(&h, "claude", &input.to_string());
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let out = &v["hookSpecificOutput"];
    assert_eq!(out["hookEventName"], "PreToolUse");
    assert_eq!(out["permissionDecision"], "allow");
    // The whole input comes back, with only the command changed.
    assert_eq!(out["updatedInput"]["description"], "try");
    assert_eq!(out["updatedInput"]["timeout"], 5000);
    let cmd = out["updatedInput"]["command"].as_str().unwrap().to_string();
    assert!(cmd.contains(" run --worktree "), "{cmd}");

    // Already wrapped for this project: passed through unchanged.
    let again =
        serde_json::json!({"cwd": sub, "tool_name": "Bash", "tool_input": {"command": cmd}});
    let o = hook(&h, "claude", &again.to_string());
    assert!(o.status.success() && o.stdout.is_empty(), "{}", text(&o));
    // Wrapped for another worktree (the model naming `/`): blocked.
    let other = cmd.replace(&format!("'{}'", h.proj.display()), "'/'");
    let sneaky =
        serde_json::json!({"cwd": sub, "tool_name": "Bash", "tool_input": {"command": other}});
    let o = hook(&h, "claude", &sneaky.to_string());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));

    // Run what the agent would run, in its shell, from the directory it is in.
    let sb = sandbox_binary();
    let usable = Command::new(&sb)
        .arg(&h.proj)
        .args(["--", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !usable {
        common::skip(
            "the_claude_hook_routes_bash_through_the_sandbox",
            "shofer-sandbox cannot run here",
        );
        return;
    }
    let o = Command::new("sh")
        .arg("-c")
        .arg(&cmd)
        .current_dir(&sub)
        .env("HOME", &h.home)
        .env("XDG_STATE_HOME", h.home.join(".local/state"))
        .env_remove("SHOFER_SANDBOX")
        .output()
        .unwrap();
    let t = text(&o);
    assert!(t.contains(&sub.display().to_string()), "{t}");
    assert_eq!(
        read(&sub.join("inside.txt")).as_deref(),
        Some("in\n"),
        "{t}"
    );
    assert!(!h.home.join("outside.txt").exists(), "{t}");
}

#[test]
fn the_gemini_hook_merges_the_command_and_fails_closed() {
    let h = scratch_home();
    let input = serde_json::json!({
        "session_id": "s", "cwd": h.proj, "hook_event_name": "BeforeTool",
        "tool_name": "run_shell_command",
        "tool_input": {"command": "ls", "description": "list", "dir_path": "sub"}
    });
    let o = hook(&h, "gemini", &input.to_string());
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cmd = v["hookSpecificOutput"]["tool_input"]["command"]
        .as_str()
        .unwrap();
    assert!(cmd.ends_with(" --cwd \"$PWD\" -- 'ls'"), "{cmd}");
    assert!(
        cmd.contains(&format!("--worktree '{}'", h.proj.display())),
        "{cmd}"
    );

    // Another tool: let through, untouched.
    let o = hook(
        &h,
        "gemini",
        r#"{"tool_name": "read_file", "tool_input": {"file_path": "a"}}"#,
    );
    assert!(o.status.success() && o.stdout.is_empty(), "{}", text(&o));
    // Anything else blocks (exit 2) with the reason on stderr, never a silent unwrapped run.
    for bad in [
        "not json",
        r#"{"tool_name": "run_shell_command"}"#,
        r#"{"tool_name": "run_shell_command", "tool_input": {"command": 3}}"#,
    ] {
        let o = hook(&h, "gemini", bad);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(o.stdout.is_empty());
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("blocked"),
            "{}",
            text(&o)
        );
    }
    // In the home directory itself (no repository): blocked, it would make $HOME writable.
    let home = serde_json::json!({"cwd": h.home, "tool_name": "run_shell_command", "tool_input": {"command": "ls"}});
    let o = hook(&h, "gemini", &home.to_string());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// PATH with the directory of this shofer (and its shofer-sandbox) first.
fn path_with(dirs: &[&Path]) -> std::ffi::OsString {
    let mut all: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    all.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(all).unwrap()
}

fn doctor(h: &Home, exe: &Path, path: &std::ffi::OsStr, args: &[&str]) -> Output {
    Command::new(exe)
        .arg("doctor")
        .args(args)
        .current_dir(&h.proj)
        .env("HOME", &h.home)
        .env("PATH", path)
        .env_remove("SHOFER_SANDBOX")
        .output()
        .unwrap()
}

#[test]
fn doctor_healthy_missing_binary_and_foreign_sandbox_on_path() {
    let sb = sandbox_binary();
    let h = scratch_home();
    let bin_dir = PathBuf::from(SHOFER).parent().unwrap().to_path_buf();
    let path = path_with(&[&bin_dir]);
    assert!(shofer(&h, &["init", "claude"]).status.success());

    // Healthy: the sandbox beside shofer, the PATH binaries are these, claude is wired.
    let o = doctor(&h, Path::new(SHOFER), &path, &["--agent", "claude"]);
    let t = text(&o);
    let probe_ok = Command::new(&sb)
        .args(["--probe", "--json"])
        .output()
        .is_ok_and(|p| String::from_utf8_lossy(&p.stdout).contains("\"degraded\":[]"));
    if probe_ok {
        assert_eq!(o.status.code(), Some(0), "{t}");
        assert!(
            t.contains("healthy") && t.contains("backend (auto): "),
            "{t}"
        );
        assert!(t.contains(".claude.json: wired"), "{t}");
    } else {
        common::skip(
            "doctor healthy case",
            "the auto backend is degraded on this kernel",
        );
    }
    let o = doctor(&h, Path::new(SHOFER), &path, &["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["probe"]["backend"].is_string(), "{v}");
    assert!(v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["agent"] == "claude" && a["ok"] == true));
    // An agent asked for but not wired is a problem.
    let o = doctor(&h, Path::new(SHOFER), &path, &["--agent", "gemini"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("problem: gemini is not wired"),
        "{}",
        text(&o)
    );

    // A wired entry whose binary is gone: init with a copy of shofer, then remove the copy.
    let gone = tempfile::tempdir_in(&h.home).unwrap();
    let copy = gone.path().join("shofer");
    std::fs::copy(SHOFER, &copy).unwrap();
    std::fs::copy(&sb, gone.path().join("shofer-sandbox")).unwrap();
    assert!(shofer(&h, &["init", "claude", "--undo"]).status.success());
    let o = Command::new(&copy)
        .args(["init", "claude"])
        .current_dir(&h.proj)
        .env("HOME", &h.home)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    drop(gone);
    let o = doctor(&h, Path::new(SHOFER), &path, &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.lines().any(
            |l| l.starts_with("problem: claude MCP server in ") && l.contains("does not exist")
        ),
        "{t}"
    );
    assert!(
        t.lines().any(|l| l.starts_with("problem: claude hook in ")),
        "{t}"
    );

    // A different shofer-sandbox earlier on PATH than the one shofer uses.
    let h2 = scratch_home();
    let foreign = tempfile::tempdir_in(&h2.home).unwrap();
    let fake = foreign.path().join("shofer-sandbox");
    std::fs::write(&fake, "#!/bin/sh\necho shofer-sandbox 0.0.1\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path2 = path_with(&[foreign.path(), &bin_dir]);
    let o = doctor(&h2, Path::new(SHOFER), &path2, &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.lines()
            .any(|l| l.starts_with("problem: shofer-sandbox on PATH is ") && l.contains("0.0.1")),
        "{t}"
    );
}

#[test]
fn serve_project_serves_the_repository_and_refuses_home() {
    let h = scratch_home();
    let serve = |dir: &Path| {
        Command::new(SHOFER)
            .args(["serve", "--project"])
            .current_dir(dir)
            .env("HOME", &h.home)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let st = Command::new("git")
        .args(["init", "-q"])
        .arg(&h.home)
        .status()
        .unwrap();
    assert!(st.success());
    let o = serve(&h.home);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(
        text(&o).contains("--project: refusing the home directory"),
        "{}",
        text(&o)
    );
    // Inside the project (a subdirectory too) it serves the repository (and, with no client
    // on stdin, ends: the MCP session never started).
    sandbox_binary();
    let o = serve(&h.proj.join("sub"));
    assert!(
        text(&o).contains(&format!("task cwd {};", h.proj.display())),
        "{}",
        text(&o)
    );
}

fn git(args: &[&str], dir: &Path) {
    let st = Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success(), "git {args:?} in {}", dir.display());
}

/// The `--worktree` a hook's rewrite names, or the hook's error.
fn hooked_worktree(o: &Output) -> Result<String, String> {
    if o.status.code() != Some(0) {
        return Err(text(o));
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).map_err(|e| e.to_string())?;
    let out = &v["hookSpecificOutput"];
    let cmd = out["updatedInput"]["command"]
        .as_str()
        .or(out["tool_input"]["command"].as_str())
        .unwrap_or_default();
    let rest = cmd
        .split_once(" run --worktree '")
        .map(|(_, r)| r)
        .unwrap_or_default();
    Ok(rest
        .split_once('\'')
        .map(|(w, _)| w.to_string())
        .unwrap_or_default())
}

#[test]
fn a_planted_nested_repository_cannot_move_the_worktree() {
    let h = scratch_home();
    // What a sandboxed command may do in the worktree: a repository whose core.worktree
    // points at the user's configuration.
    let sub = h.proj.join("planted");
    std::fs::create_dir_all(&sub).unwrap();
    git(&["init", "-q"], &sub);
    let target = h.home.join(".config");
    std::fs::create_dir_all(&target).unwrap();
    git(
        &["config", "core.worktree", &target.display().to_string()],
        &sub,
    );
    let input = serde_json::json!({"cwd": sub, "tool_name": "Bash",
        "tool_input": {"command": "echo x > ~/.config/git/config"}});
    let w = hooked_worktree(&hook(&h, "claude", &input.to_string()));
    // The nested repository's own directory (a part of the worktree), never its core.worktree.
    assert_eq!(w, Ok(sub.display().to_string()));

    // Gemini's model-chosen dir_path does not choose the worktree.
    let other = h.home.join("other");
    std::fs::create_dir_all(&other).unwrap();
    git(&["init", "-q"], &other);
    for dir in ["../other", "/", "../", other.to_str().unwrap()] {
        let input = serde_json::json!({"cwd": h.proj, "tool_name": "run_shell_command",
            "tool_input": {"command": "ls", "dir_path": dir}});
        let o = hook(&h, "gemini", &input.to_string());
        assert_eq!(o.status.code(), Some(2), "{dir}: {}", text(&o));
        assert!(text(&o).contains("dir_path"), "{}", text(&o));
    }
    let input = serde_json::json!({"cwd": h.proj, "tool_name": "run_shell_command",
        "tool_input": {"command": "ls", "dir_path": "sub"}});
    let w = hooked_worktree(&hook(&h, "gemini", &input.to_string()));
    assert_eq!(w, Ok(h.proj.display().to_string()));

    // A repository under /tmp (any command may have made it) is never a project.
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    std::fs::create_dir_all(tmp.path().join("a")).unwrap();
    git(&["init", "-q"], tmp.path());
    let input = serde_json::json!({"cwd": tmp.path().join("a"), "tool_name": "Bash",
        "tool_input": {"command": "ls"}});
    let o = hook(&h, "claude", &input.to_string());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("/tmp"), "{}", text(&o));

    // A project-scope hook is pinned to the worktree init found: a repository planted later
    // below it changes nothing.
    let o = shofer(&h, &["init", "claude", "--scope", "project"]);
    assert!(o.status.success(), "{}", text(&o));
    let settings: serde_json::Value =
        serde_json::from_str(&read(&h.proj.join(".claude/settings.json")).unwrap()).unwrap();
    let hook_cmd = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        hook_cmd.ends_with(&format!(" hook claude --worktree {}", h.proj.display())),
        "{hook_cmd}"
    );
    let o = {
        use std::io::Write;
        let mut c = Command::new("sh")
            .arg("-c")
            .arg(&hook_cmd)
            .current_dir(&sub)
            .env("HOME", &h.home)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let input = serde_json::json!({"cwd": sub, "tool_name": "Bash",
            "tool_input": {"command": "ls"}});
        c.stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        c.wait_with_output().unwrap()
    };
    assert_eq!(hooked_worktree(&o), Ok(h.proj.display().to_string()));
    // doctor still recognises the pinned hook as shofer's.
    let bin_dir = PathBuf::from(SHOFER).parent().unwrap().to_path_buf();
    let o = doctor(&h, Path::new(SHOFER), &path_with(&[&bin_dir]), &[]);
    assert!(
        text(&o).contains("claude hook in ") && text(&o).contains(".claude/settings.json: wired"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_repository_around_the_home_directory_is_refused() {
    let h = scratch_home();
    // A repository above HOME (say /home/.git), the agent started in a plain directory of
    // the home: the worktree would hold the whole home.
    let above = h.home.parent().unwrap().to_path_buf();
    git(&["init", "-q"], &above);
    let plain = h.home.join("notrepo");
    std::fs::create_dir_all(&plain).unwrap();
    let o = shofer_in(&h, &plain, &["serve", "--project"]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("home directory"), "{}", text(&o));
    let input = serde_json::json!({"cwd": plain, "tool_name": "Bash",
        "tool_input": {"command": "ls"}});
    let o = hook(&h, "claude", &input.to_string());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("home directory"), "{}", text(&o));
    // The project below it is still fine.
    let input = serde_json::json!({"cwd": h.proj, "tool_name": "Bash",
        "tool_input": {"command": "ls"}});
    assert_eq!(
        hooked_worktree(&hook(&h, "claude", &input.to_string())),
        Ok(h.proj.display().to_string())
    );
}
#[test]
fn project_init_refuses_symlinks_planted_in_the_worktree() {
    let h = scratch_home();
    let secret = "{\n  \"oauthAccount\": \"secret-token\"\n}\n";
    write(&h.home.join(".claude.json"), secret);
    std::fs::create_dir_all(h.home.join(".ssh")).unwrap();
    std::os::unix::fs::symlink(h.home.join(".claude.json"), h.proj.join(".mcp.json")).unwrap();
    std::os::unix::fs::symlink(h.home.join(".ssh"), h.proj.join(".claude")).unwrap();
    let o = shofer(&h, &["init", "claude", "--scope", "project"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("symbolic link"), "{}", text(&o));
    assert!(!text(&o).contains("secret-token"), "{}", text(&o));
    assert!(std::fs::symlink_metadata(h.proj.join(".mcp.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(read(&h.home.join(".claude.json")).unwrap(), secret);
    assert!(!h.home.join(".ssh/settings.json").exists());
    // A symlinked directory on the way is refused too, even when the file is fresh.
    std::fs::remove_file(h.proj.join(".mcp.json")).unwrap();
    let o = shofer(&h, &["init", "claude", "--scope", "project"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains(".claude"), "{}", text(&o));
    assert!(!h.proj.join(".mcp.json").exists(), "nothing is written");
    assert!(!h.home.join(".ssh/settings.json").exists());

    // User scope: a dotfiles manager's symlinked ~/.claude.json is written through, and
    // stays a symlink.
    let h = scratch_home();
    let real = h.home.join("dotfiles/claude.json");
    write(&real, CLAUDE_JSON);
    std::os::unix::fs::symlink(&real, h.home.join(".claude.json")).unwrap();
    let o = shofer(&h, &["init", "claude"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(std::fs::symlink_metadata(h.home.join(".claude.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(read(&real).unwrap().contains("\"shofer\""));
    let o = shofer(&h, &["init", "claude", "--undo"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(read(&real).unwrap(), CLAUDE_JSON);
    assert!(std::fs::symlink_metadata(h.home.join(".claude.json"))
        .unwrap()
        .file_type()
        .is_symlink());
}

/// Runs `c`, killing it when it has not ended after 60 s.
fn output_within(mut c: Command) -> Output {
    let child = c
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            // Safety: kill(2) of the child this test started, which has not been reaped.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{c:?} hung for 60 s");
        }
    }
}

#[test]
fn special_files_in_the_worktree_are_refused_not_read() {
    let h = scratch_home();
    std::fs::create_dir_all(h.proj.join(".claude")).unwrap();
    let fifo = h.proj.join(".claude/settings.json");
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let bin_dir = PathBuf::from(SHOFER).parent().unwrap().to_path_buf();
    let mut c = Command::new(SHOFER);
    c.arg("doctor")
        .current_dir(&h.proj)
        .env("HOME", &h.home)
        .env("PATH", path_with(&[&bin_dir]))
        .env_remove("SHOFER_SANDBOX");
    let o = output_within(c);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("settings.json") && text(&o).contains("FIFO"),
        "{}",
        text(&o)
    );
    let mut c = Command::new(SHOFER);
    c.args(["init", "claude", "--scope", "project"])
        .current_dir(&h.proj)
        .env("HOME", &h.home);
    let o = output_within(c);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("FIFO"), "{}", text(&o));

    // An endless file behind a symlink is never read.
    std::fs::remove_file(&fifo).unwrap();
    std::os::unix::fs::symlink("/dev/zero", h.proj.join(".mcp.json")).unwrap();
    for args in [&["init", "claude", "--scope", "project"][..], &["doctor"]] {
        let mut c = Command::new(SHOFER);
        c.args(args)
            .current_dir(&h.proj)
            .env("HOME", &h.home)
            .env("PATH", path_with(&[&bin_dir]));
        let o = output_within(c);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(".mcp.json"), "{}", text(&o));
    }
    // A huge regular file neither.
    std::fs::remove_file(h.proj.join(".mcp.json")).unwrap();
    let big = std::fs::File::create(h.proj.join(".mcp.json")).unwrap();
    big.set_len(1 << 30).unwrap();
    let o = shofer(&h, &["init", "claude", "--scope", "project"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("bytes"), "{}", text(&o));
}
#[test]
fn undo_keeps_files_and_containers_the_user_had() {
    let h = scratch_home();
    // As Claude Code writes them (no final newline), before shofer init.
    let claude_json = "{\n  \"mcpServers\": {}\n}";
    let settings = "{}";
    write(&h.home.join(".claude.json"), claude_json);
    write(&h.home.join(".claude/settings.json"), settings);
    assert!(shofer(&h, &["init", "claude"]).status.success());
    let o = shofer(&h, &["init", "claude", "--undo"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        read(&h.home.join(".claude.json")).as_deref(),
        Some(claude_json)
    );
    let after = read(&h.home.join(".claude/settings.json")).expect("settings.json kept");
    assert!(!after.contains("hook claude"), "{after}");
    // A file init created from nothing still goes.
    let h = scratch_home();
    assert!(shofer(&h, &["init", "cursor"]).status.success());
    assert!(h.home.join(".cursor/mcp.json").exists());
    assert!(shofer(&h, &["init", "cursor", "--undo"]).status.success());
    assert!(!h.home.join(".cursor/mcp.json").exists());
}
