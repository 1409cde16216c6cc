//! `shofer doctor [--json] [--agent NAME]...`: is this machine ready to run agents' commands
//! sandboxed?
//!
//! - The sandbox: the `shofer-sandbox` the engine would use ([`crate::Sandbox::locate`]), its
//!   `--probe --json` (what `auto` picks, what this kernel enforces) and, when user namespaces
//!   are blocked by Ubuntu's `kernel.apparmor_restrict_unprivileged_userns=1`, the one command
//!   that enables the stronger backends.
//! - The binaries on `PATH`: `shofer` must be this file, `shofer-sandbox` the one the engine
//!   uses, both of this version.
//! - Each agent's wiring ([`super::init`]'s targets, user scope and, inside a git worktree,
//!   project scope): the MCP entry and hook, each pointing at an existing executable that is
//!   this `shofer`.
//!
//! What counts as a problem (exit 1, one `problem:` line each): no sandbox, a probe that fails
//! or a backend that cannot enforce every required protection, a `PATH` binary that is not the
//! installed one or of another version, a configuration file that does not parse, a wired
//! entry or hook pointing at a missing or different binary, and an agent named with
//! `--agent` that is not wired. An agent not wired otherwise, a missing hook and a blocked
//! stronger backend are notes.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use super::{init, json::Json, project, Agent, Entry, Scope};

/// `shofer doctor`'s options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Print one JSON object instead of text.
    pub json: bool,
    /// Agents whose wiring must be in place.
    pub agents: Vec<Agent>,
}

/// What `doctor` found.
#[derive(Debug, Default)]
struct Report {
    lines: Vec<String>,
    problems: Vec<String>,
    notes: Vec<String>,
    agents: Vec<Value>,
    sandbox: Value,
    probe: Value,
}

/// Runs `shofer doctor`; returns the exit code (0 healthy, 1 problems).
pub fn main(opts: &Options) -> u8 {
    let mut r = Report::default();
    let exe = super::current_exe();
    let home = super::home();
    match (&exe, &home) {
        (Ok(exe), Ok(home)) => {
            sandbox(&mut r);
            path_binaries(&mut r, exe);
            wiring(&mut r, exe, home, &opts.agents);
        }
        (Err(e), _) | (_, Err(e)) => r.problems.push(e.clone()),
    }
    if opts.json {
        let v = json!({
            "healthy": r.problems.is_empty(),
            "problems": r.problems,
            "notes": r.notes,
            "sandbox": r.sandbox,
            "probe": r.probe,
            "agents": r.agents,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        for l in &r.lines {
            println!("{l}");
        }
        for n in &r.notes {
            println!("note: {n}");
        }
        for p in &r.problems {
            println!("problem: {p}");
        }
        if r.problems.is_empty() {
            println!("healthy");
        }
    }
    u8::from(!r.problems.is_empty())
}

/// The sandbox the engine would use and its probe.
fn sandbox(r: &mut Report) {
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let sb = match crate::Sandbox::locate(&here) {
        Ok(sb) => sb.binary,
        Err(e) => {
            r.problems.push(e.to_string());
            return;
        }
    };
    let version = version_of(&sb);
    r.lines.push(format!(
        "sandbox: {} ({})",
        sb.display(),
        version.as_deref().unwrap_or("version unknown")
    ));
    r.sandbox = json!({ "path": sb, "version": version });
    let ours = format!("shofer-sandbox {}", env!("CARGO_PKG_VERSION"));
    if version.as_deref() != Some(ours.as_str()) {
        r.problems.push(format!(
            "{} reports {:?}, not {ours:?}: install shofer and shofer-sandbox together",
            sb.display(),
            version.unwrap_or_default()
        ));
    }
    let out = Command::new(&sb).args(["--probe", "--json"]).output();
    let probe: Value = match out {
        Ok(o) if o.status.success() => match serde_json::from_slice(&o.stdout) {
            Ok(v) => v,
            Err(e) => {
                r.problems.push(format!(
                    "{} --probe --json printed no JSON: {e}",
                    sb.display()
                ));
                return;
            }
        },
        Ok(o) => {
            r.problems.push(format!(
                "{} --probe --json failed ({}): {}",
                sb.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            return;
        }
        Err(e) => {
            r.problems.push(format!("cannot run {}: {e}", sb.display()));
            return;
        }
    };
    let s = |v: &Value| v.as_str().unwrap_or("?").to_string();
    r.lines.push(format!(
        "backend (auto): {} — {}",
        s(&probe["backend"]),
        s(&probe["backend_reason"])
    ));
    r.lines.push(format!(
        "kernel {}: Landlock {}{}, user namespaces {}, bwrap {}",
        s(&probe["kernel"]),
        s(&probe["landlock"]["status"]),
        probe["landlock"]["abi"]
            .as_u64()
            .map(|a| format!(" (ABI {a})"))
            .unwrap_or_default(),
        if probe["user_namespaces"]["usable"].as_bool() == Some(true) {
            "usable".to_string()
        } else {
            format!("blocked ({})", s(&probe["user_namespaces"]["reason"]))
        },
        if probe["bwrap"]["usable"].as_bool() == Some(true) {
            "usable".to_string()
        } else {
            "not usable".to_string()
        },
    ));
    if let Some(d) = probe["degraded"].as_array().filter(|d| !d.is_empty()) {
        let names: Vec<String> = d
            .iter()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
            .collect();
        r.problems.push(format!(
            "the auto backend cannot enforce every required protection here ({}): runs fail unless --allow-degraded",
            names.join(", ")
        ));
    }
    if probe["user_namespaces"]["usable"].as_bool() == Some(false) && apparmor_restricts_userns() {
        r.notes.push(format!(
            "AppArmor blocks user namespaces (kernel.apparmor_restrict_unprivileged_userns=1), so the stronger layered backend is off; enable it with: {} --print-apparmor-profile | sudo tee /etc/apparmor.d/shofer-sandbox && sudo apparmor_parser -r /etc/apparmor.d/shofer-sandbox",
            super::quote(&sb.display().to_string())
        ));
    }
    r.probe = probe;
}

fn apparmor_restricts_userns() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
        .is_ok_and(|s| s.trim() == "1")
}

/// The first line of `<bin> --version`.
fn version_of(bin: &Path) -> Option<String> {
    let o = Command::new(bin).arg("--version").output().ok()?;
    let s = String::from_utf8_lossy(&o.stdout);
    s.lines().next().map(|l| l.trim().to_string())
}

/// The first executable `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// `shofer` and `shofer-sandbox` on `PATH` against the running ones.
fn path_binaries(r: &mut Report, exe: &Path) {
    match on_path("shofer") {
        Some(p) if same_file(&p, exe) => r
            .lines
            .push(format!("shofer on PATH: {} (this one)", p.display())),
        Some(p) => r.problems.push(format!(
            "shofer on PATH is {} ({}), not this {} ({}): put the installed one first on PATH",
            p.display(),
            version_of(&p).unwrap_or_else(|| "version unknown".into()),
            exe.display(),
            concat!("shofer ", env!("CARGO_PKG_VERSION"))
        )),
        None => r.notes.push(format!(
            "shofer is not on PATH (agents' entries name {} directly)",
            exe.display()
        )),
    }
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let engine = crate::Sandbox::locate(&here).ok().map(|s| s.binary);
    match (on_path("shofer-sandbox"), engine) {
        (Some(p), Some(e)) if same_file(&p, &e) => {
            r.lines.push(format!("shofer-sandbox on PATH: {} (the one shofer uses)", p.display()));
        }
        (Some(p), Some(e)) => r.problems.push(format!(
            "shofer-sandbox on PATH is {} ({}), but shofer uses {}: a user running shofer-sandbox gets another binary; remove it or put the installed one first",
            p.display(),
            version_of(&p).unwrap_or_else(|| "version unknown".into()),
            e.display()
        )),
        (None, Some(_)) => r.notes.push("shofer-sandbox is not on PATH (shofer uses the one beside it)".into()),
        (_, None) => {}
    }
}

/// Each agent's entries, in the user's files and the current project's.
fn wiring(r: &mut Report, exe: &Path, home: &Path, asked: &[Agent]) {
    let here = std::env::current_dir().ok();
    let project = here
        .as_deref()
        .and_then(|h| project::worktree_of(h, Some(home)).ok());
    for agent in Agent::ALL {
        let mut wired = false;
        for scope in [Scope::User, Scope::Project] {
            if scope == Scope::Project && project.is_none() {
                continue;
            }
            let ctx = super::Context {
                home: home.to_path_buf(),
                scope,
                project: project.clone(),
                exe: exe.to_path_buf(),
                hook: true,
            };
            for t in agent.targets(&ctx) {
                let text = match super::files::locate(&t.path, &ctx)
                    .and_then(|loc| super::files::read(&loc))
                {
                    Ok(Some(t)) => t,
                    Ok(None) => continue,
                    Err(e) => {
                        r.problems.push(e);
                        continue;
                    }
                };
                let doc = match init::parse(&t, Some(&text)) {
                    Ok(d) => d,
                    Err(e) => {
                        r.problems.push(e);
                        continue;
                    }
                };
                for e in &t.entries {
                    let (what, commands) = match e {
                        Entry::Server { at, key, .. } => (
                            "MCP server",
                            doc.server(at, key)
                                .map(|v| {
                                    vec![v
                                        .get("command")
                                        .and_then(Json::as_str)
                                        .unwrap_or("")
                                        .to_string()]
                                })
                                .unwrap_or_default(),
                        ),
                        Entry::Hook { at, .. } => (
                            "hook",
                            doc.hook_commands(at, &format!(" hook {}", agent.name()))
                                .iter()
                                .map(|c| first_word(c))
                                .collect(),
                        ),
                    };
                    for cmd in commands {
                        let state = check_binary(Path::new(&cmd), exe);
                        let place = format!("{} {what} in {}", agent.name(), t.path.display());
                        match &state {
                            Ok(()) => {
                                wired |= what == "MCP server";
                                r.lines.push(format!("{place}: wired"));
                            }
                            Err(why) => r.problems.push(format!("{place}: {why}")),
                        }
                        r.agents.push(json!({
                            "agent": agent.name(),
                            "scope": if scope == Scope::User { "user" } else { "project" },
                            "kind": if what == "hook" { "hook" } else { "mcp" },
                            "file": t.path,
                            "command": cmd,
                            "ok": state.is_ok(),
                            "problem": state.err(),
                        }));
                    }
                }
            }
        }
        if !wired {
            let msg = format!(
                "{} is not wired (shofer init {})",
                agent.name(),
                agent.name()
            );
            if asked.contains(&agent) {
                r.problems.push(msg);
            } else {
                r.notes.push(msg);
            }
        }
    }
}

/// Whether `cmd` (an entry's command) is an existing executable that is this `shofer`.
fn check_binary(cmd: &Path, exe: &Path) -> Result<(), String> {
    if cmd.as_os_str().is_empty() {
        return Err("the entry names no command".into());
    }
    if !cmd.exists() {
        return Err(format!(
            "points at {}, which does not exist (run shofer init again)",
            cmd.display()
        ));
    }
    if !is_executable(cmd) {
        return Err(format!(
            "points at {}, which is not executable",
            cmd.display()
        ));
    }
    if !same_file(cmd, exe) {
        return Err(format!(
            "points at {}, which is not this shofer ({}); run shofer init --undo with that one, then shofer init with this one",
            cmd.display(),
            exe.display()
        ));
    }
    Ok(())
}

/// The first shell word of a hook command (as [`super::quote`] writes it).
fn first_word(c: &str) -> String {
    if c.starts_with('\'') {
        return super::hook::take_sq(c).map(|(w, _)| w).unwrap_or_default();
    }
    c.split(' ').next().unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_word_reads_what_quote_writes() {
        for p in ["/usr/bin/shofer", "/a b/it's/shofer"] {
            assert_eq!(
                first_word(&format!("{} hook claude", super::super::quote(p))),
                p
            );
        }
    }
}
