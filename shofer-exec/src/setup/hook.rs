//! `shofer hook <agent>`: the command hook `shofer init` installs. It reads the agent's hook
//! JSON on stdin and prints the rewrite that routes the shell tool's command through
//! `shofer run --worktree <project> --cwd "$PWD" -- '<command>'`.
//!
//! - The project is the git worktree around the hook input's `cwd` ([`super::project`]: found
//!   without running git, never one holding the home directory, `/`, or one below `/tmp`), or,
//!   for a project-scope hook, the worktree `shofer init` found and wrote into the hook command
//!   (`shofer hook <agent> --worktree DIR`), which then must hold `cwd`. Gemini's `dir_path`
//!   is chosen by the model, so it never chooses the worktree: the call is blocked unless it
//!   lies inside the worktree.
//! - The original command is passed as ONE single-quoted argument (`shofer run` joins its
//!   command words with spaces, and runs them with `/bin/sh -c`), so the agent's shell does
//!   not split or expand it; `$PWD` is expanded by the agent's shell where it would have run
//!   the command.
//! - A command that is already exactly this wrapping for the same project passes unchanged
//!   (never wrapped twice); one wrapped for another worktree is blocked (the model could
//!   otherwise name `--worktree /` itself).
//! - Fail closed: input that is not the agent's hook JSON, a shell call without a command, or
//!   no project is an error on stderr with exit code 2, which both Claude Code and Gemini CLI
//!   document as "block this tool call". Never a silent unwrapped run.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{claude, gemini, project, Agent};

/// Exit code both agents document as "block the tool call".
pub const BLOCK: u8 = 2;

/// Most bytes of hook input read.
const MAX_INPUT: u64 = 16 << 20;

/// Runs the hook for `agent` on stdin/stdout, with the worktree `pinned` by a project-scope
/// hook; returns the exit code.
pub fn main(agent: Agent, pinned: Option<&Path>) -> u8 {
    let mut input = String::new();
    if let Err(e) = std::io::stdin().take(MAX_INPUT).read_to_string(&mut input) {
        eprintln!("shofer hook: cannot read the hook input on stdin: {e}; the command is blocked");
        return BLOCK;
    }
    let exe = match super::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("shofer hook: {e}; the command is blocked");
            return BLOCK;
        }
    };
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    match rewrite(agent, &input, &exe, home.as_deref(), pinned) {
        Ok(Some(out)) => {
            println!("{out}");
            0
        }
        Ok(None) => 0,
        Err(e) => {
            eprintln!("shofer hook: {e}; the command is blocked (fail closed)");
            BLOCK
        }
    }
}

/// The hook's stdout for `input`: `Some(json)` to rewrite, `None` to let the call through
/// unchanged (not a shell call, or already routed through `shofer run` for this project).
/// `pinned`: the worktree of a project-scope hook.
///
/// # Errors
/// Why the call must be blocked.
pub fn rewrite(
    agent: Agent,
    input: &str,
    exe: &Path,
    home: Option<&Path>,
    pinned: Option<&Path>,
) -> Result<Option<Value>, String> {
    let shell_tool = match agent {
        Agent::Claude => claude::SHELL_TOOL,
        Agent::Gemini => gemini::SHELL_TOOL,
        Agent::Codex | Agent::Cursor => {
            return Err(format!(
                "shofer init writes no hook for {}: {}",
                agent.name(),
                agent.no_hook_reason().unwrap_or_default()
            ))
        }
    };
    let v: Value = serde_json::from_str(input).map_err(|e| {
        format!(
            "the hook input is not JSON ({e}): expected the {} hook's JSON object on stdin",
            agent.name()
        )
    })?;
    let tool = v
        .get("tool_name")
        .and_then(Value::as_str)
        .ok_or("the hook input has no \"tool_name\" string: expected the agent's tool hook JSON")?;
    if tool != shell_tool {
        return Ok(None);
    }
    let tool_input = v
        .get("tool_input")
        .and_then(Value::as_object)
        .ok_or("the hook input has no \"tool_input\" object")?;
    let command = tool_input
        .get("command")
        .and_then(Value::as_str)
        .ok_or("the shell call has no \"command\" string in \"tool_input\"")?;
    let cwd = match v.get("cwd").and_then(Value::as_str) {
        Some(c) if c.starts_with('/') => PathBuf::from(c),
        Some(c) => {
            return Err(format!(
                "the hook input's \"cwd\" {c:?} is not an absolute path"
            ))
        }
        None => std::env::current_dir()
            .map_err(|e| format!("no \"cwd\" in the hook input and none of our own: {e}"))?,
    };
    let worktree = match pinned {
        None => project::worktree_of(&cwd, home)?,
        Some(p) => {
            let p = std::fs::canonicalize(p)
                .map_err(|e| format!("the hook's --worktree {}: {e}", p.display()))?;
            project::check_worktree(&p, home)?;
            let here = std::fs::canonicalize(&cwd)
                .map_err(|e| format!("cannot resolve the directory {}: {e}", cwd.display()))?;
            if !here.starts_with(&p) {
                return Err(format!(
                    "the agent's directory {} is outside the worktree {} this hook was set up for",
                    cwd.display(),
                    p.display()
                ));
            }
            p
        }
    };
    // Gemini's shell tool may run in a directory of the model's choosing: allowed inside the
    // worktree only, and it never chooses the worktree.
    if let Some(d) = ["dir_path", "directory"]
        .iter()
        .find_map(|k| tool_input.get(*k).and_then(Value::as_str))
        .filter(|d| !d.is_empty())
    {
        let inside =
            std::fs::canonicalize(cwd.join(d)).is_ok_and(|real| real.starts_with(&worktree));
        if !inside {
            return Err(format!(
                "the shell call's dir_path {d:?} is not an existing directory inside the worktree {}",
                worktree.display()
            ));
        }
    }
    if let Some(wrapped_for) = unwrap(command, exe) {
        if wrapped_for == worktree {
            return Ok(None);
        }
        return Err(format!(
            "the command is already routed through shofer run, but for {} instead of this project's worktree {}",
            wrapped_for.display(),
            worktree.display()
        ));
    }
    let wrapped = wrap(command, exe, &worktree);
    Ok(Some(match agent {
        Agent::Claude => {
            let mut updated = tool_input.clone();
            updated.insert("command".into(), Value::String(wrapped));
            json!({
                "hookSpecificOutput": {
                    "hookEventName": claude::EVENT,
                    "permissionDecision": "allow",
                    "permissionDecisionReason": format!("shofer: sandboxed in {}", worktree.display()),
                    "updatedInput": updated,
                }
            })
        }
        _ => json!({ "hookSpecificOutput": { "tool_input": { "command": wrapped } } }),
    }))
}

/// `'s'` for a POSIX shell, always quoted.
fn sq(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command line that runs `command` through `shofer run` in `worktree`.
pub fn wrap(command: &str, exe: &Path, worktree: &Path) -> String {
    format!(
        "{} run --worktree {} --cwd \"$PWD\" -- {}",
        sq(&exe.display().to_string()),
        sq(&worktree.display().to_string()),
        sq(command)
    )
}

/// The worktree when `command` is exactly [`wrap`]'s output for this `exe`, else `None`.
fn unwrap(command: &str, exe: &Path) -> Option<PathBuf> {
    let rest = command.strip_prefix(&format!(
        "{} run --worktree ",
        sq(&exe.display().to_string())
    ))?;
    let (worktree, rest) = take_sq(rest)?;
    let rest = rest.strip_prefix(" --cwd \"$PWD\" -- ")?;
    let (inner, rest) = take_sq(rest)?;
    (rest.is_empty() && wrap(&inner, exe, Path::new(&worktree)) == command)
        .then(|| PathBuf::from(worktree))
}

/// One single-quoted word as [`sq`] writes it at the start of `s`, and what follows it.
pub(super) fn take_sq(s: &str) -> Option<(String, &str)> {
    let mut rest = s.strip_prefix('\'')?;
    let mut word = String::new();
    loop {
        let end = rest.find('\'')?;
        word.push_str(&rest[..end]);
        rest = &rest[end + 1..];
        match rest.strip_prefix("\\''") {
            Some(r) => {
                word.push('\'');
                rest = r;
            }
            None => return Some((word, rest)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_and_unwrap_agree_on_hard_commands() {
        let exe = Path::new("/opt/my tools/shofer");
        let wt = Path::new("/home/u/it's repo");
        for cmd in [
            "ls",
            "echo 'a' \"$HOME\" && rm -f x; `id`",
            "'",
            "",
            "a'\\''b",
        ] {
            let w = wrap(cmd, exe, wt);
            assert_eq!(unwrap(&w, exe).as_deref(), Some(wt), "{w}");
            // Something appended after the wrapping is not the wrapping.
            assert_eq!(unwrap(&format!("{w}; rm -rf ~"), exe), None);
            assert_eq!(unwrap(&format!("{w}'; rm -rf ~; '"), exe), None);
        }
        assert_eq!(unwrap("ls", exe), None);
    }

    #[test]
    fn the_wrapped_command_runs_the_original_as_one_word() {
        let w = wrap("printf '%s|' a   \"b c\"", Path::new("/x"), Path::new("/w"));
        // What a shell hands `shofer run` after `--`: one argument, the original text.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "set -- {}; printf '%s\\n' \"$#\" \"$7\"",
                w.replacen("'/x'", "", 1)
            ))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text, "7\nprintf '%s|' a   \"b c\"\n", "{w}");
    }
}
