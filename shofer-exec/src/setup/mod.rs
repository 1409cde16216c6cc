//! Wiring shofer into coding agents: `shofer init <agent>`, the command hook `shofer hook
//! <agent>`, and `shofer doctor`.
//!
//! - [`Agent`] names the four agents; each has a module with its documented file locations and
//!   entries ([`claude`], [`codex`], [`gemini`], [`cursor`]), returning [`Target`]s: a file and
//!   the [`Entry`]s `init` owns in it.
//! - [`init`] applies or undoes the targets ([`json`] edits JSON in its key order, [`toml`]
//!   edits TOML with `toml_edit`, comments kept; [`files`] writes atomically).
//! - [`hook`]: what the agents' hooks run: a shell tool's command rewritten to `shofer run
//!   --worktree <project> -- <command>`, failing closed.
//! - [`project`]: which directory is "the project" (the git worktree around a directory, found
//!   without running git; never one holding the home directory, `/`, or one below `/tmp`),
//!   shared by `init`, the hook and `shofer serve --project`.
//! - [`doctor`]: what the kernel enforces, whether the wiring and the binaries on `PATH` are the
//!   installed ones.

pub mod claude;
pub mod codex;
pub mod cursor;
pub mod doctor;
pub mod files;
pub mod gemini;
pub mod hook;
pub mod init;
pub mod json;
pub mod project;
pub mod toml;

use std::path::{Path, PathBuf};

/// The name of the MCP server entry `init` writes in every agent's file.
pub const SERVER_NAME: &str = "shofer";

/// A coding agent `shofer init` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Claude Code.
    Claude,
    /// OpenAI's Codex CLI.
    Codex,
    /// Gemini CLI.
    Gemini,
    /// Cursor.
    Cursor,
}

impl Agent {
    /// Every agent, in the order `doctor` reports them.
    pub const ALL: [Agent; 4] = [Agent::Claude, Agent::Codex, Agent::Gemini, Agent::Cursor];

    /// The agent named `s` (`claude`, `codex`, `gemini`, `cursor`).
    ///
    /// # Errors
    /// A message naming `s` and the valid names.
    pub fn parse(s: &str) -> Result<Agent, String> {
        match s {
            "claude" | "claude-code" => Ok(Agent::Claude),
            "codex" => Ok(Agent::Codex),
            "gemini" | "gemini-cli" => Ok(Agent::Gemini),
            "cursor" => Ok(Agent::Cursor),
            _ => Err(format!(
                "unknown agent {s:?}: expected claude, codex, gemini or cursor"
            )),
        }
    }

    /// The short name used on the command line and in hook commands.
    pub fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
            Agent::Cursor => "cursor",
        }
    }

    /// The agent's files and the entries `init` owns in them, for `scope`.
    pub fn targets(self, ctx: &Context) -> Vec<Target> {
        match self {
            Agent::Claude => claude::targets(ctx),
            Agent::Codex => codex::targets(ctx),
            Agent::Gemini => gemini::targets(ctx),
            Agent::Cursor => cursor::targets(ctx),
        }
    }

    /// Why no hook is written for this agent, or `None` when one is.
    pub fn no_hook_reason(self) -> Option<&'static str> {
        match self {
            Agent::Claude | Agent::Gemini => None,
            Agent::Codex => Some(codex::NO_HOOK),
            Agent::Cursor => Some(cursor::NO_HOOK),
        }
    }
}

/// Where `init` writes: the user's files (every project) or the project's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The user's configuration, used in every project.
    User,
    /// The current project's configuration (the git worktree around the current directory).
    Project,
}

impl Scope {
    /// `user` or `project`.
    ///
    /// # Errors
    /// A message naming `s` and the valid values.
    pub fn parse(s: &str) -> Result<Scope, String> {
        match s {
            "user" => Ok(Scope::User),
            "project" => Ok(Scope::Project),
            _ => Err(format!("invalid scope {s:?}: expected user or project")),
        }
    }
}

/// What the targets are computed from.
#[derive(Debug, Clone)]
pub struct Context {
    /// The user's home directory.
    pub home: PathBuf,
    /// User or project scope.
    pub scope: Scope,
    /// The project directory (for project scope, and the MCP entry's `--worktree`).
    pub project: Option<PathBuf>,
    /// The absolute, canonical path of this `shofer`.
    pub exe: PathBuf,
    /// Whether to include the command hook where the agent has one.
    pub hook: bool,
}

impl Context {
    /// The MCP server entry's arguments: a project-scope entry names its worktree; a user-scope
    /// entry uses `--project`, the git worktree around the directory the agent starts the
    /// server in (never `$HOME` or `/`: see [`project`]).
    pub fn serve_args(&self) -> Vec<String> {
        match (&self.scope, &self.project) {
            (Scope::Project, Some(p)) => {
                vec!["serve".into(), "--worktree".into(), p.display().to_string()]
            }
            _ => vec!["serve".into(), "--project".into()],
        }
    }

    /// The hook command line for `agent`, as the agent's shell runs it. A project-scope hook
    /// names its worktree (pinned: nothing planted in the project later moves it).
    pub fn hook_command(&self, agent: Agent) -> String {
        let mut c = format!(
            "{} hook {}",
            quote(&self.exe.display().to_string()),
            agent.name()
        );
        if let (Scope::Project, Some(p)) = (&self.scope, &self.project) {
            c.push_str(" --worktree ");
            c.push_str(&quote(&p.display().to_string()));
        }
        c
    }

    /// `path` under the project directory (project scope) or the home directory (user scope).
    pub fn base(&self) -> &Path {
        match (&self.scope, &self.project) {
            (Scope::Project, Some(p)) => p,
            _ => &self.home,
        }
    }
}

/// One file and the entries `init` owns in it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The file.
    pub path: PathBuf,
    /// JSON or TOML.
    pub format: Format,
    /// What `init` adds there.
    pub entries: Vec<Entry>,
}

/// A configuration file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON (key order kept).
    Json,
    /// TOML (comments and order kept).
    Toml,
}

/// What `init` adds to a file.
#[derive(Debug, Clone)]
pub enum Entry {
    /// The MCP server `key` in the object (table) at `at`.
    Server {
        /// The path of the object holding the servers, e.g. `["mcpServers"]`.
        at: Vec<&'static str>,
        /// The server's name.
        key: &'static str,
        /// The entry.
        value: json::Json,
    },
    /// A hook group: an element of the array at `at`.
    Hook {
        /// The path of the array, e.g. `["hooks", "PreToolUse"]`.
        at: Vec<&'static str>,
        /// The group.
        value: json::Json,
        /// The hook command inside the group (recognises a group the user changed).
        command: String,
    },
}

impl Entry {
    /// A short description for messages, e.g. `mcpServers.shofer`.
    pub fn describe(&self) -> String {
        match self {
            Entry::Server { at, key, .. } => format!("{}.{key}", at.join(".")),
            Entry::Hook { at, .. } => format!("the hook in {}", at.join(".")),
        }
    }
}

/// `s` quoted for a POSIX shell: as is when it needs no quoting, else in single quotes.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:=@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// This `shofer`'s absolute, canonical path.
///
/// # Errors
/// A message when `/proc/self/exe` cannot be read.
pub fn current_exe() -> Result<PathBuf, String> {
    std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot find this shofer's path (/proc/self/exe): {e}"))
}

/// The user's home directory (`$HOME`).
///
/// # Errors
/// A message when `HOME` is unset or empty.
pub fn home() -> Result<PathBuf, String> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| "HOME is not set: the agents' configuration files live under it".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_leaves_plain_paths_and_quotes_the_rest() {
        assert_eq!(quote("/usr/bin/shofer"), "/usr/bin/shofer");
        assert_eq!(quote("/a b/shofer"), "'/a b/shofer'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn agents_and_scopes_parse_with_clear_errors() {
        assert_eq!(Agent::parse("claude").unwrap(), Agent::Claude);
        assert!(Agent::parse("vim")
            .unwrap_err()
            .contains("claude, codex, gemini or cursor"));
        assert_eq!(Scope::parse("project").unwrap(), Scope::Project);
        assert!(Scope::parse("global")
            .unwrap_err()
            .contains("user or project"));
    }
}
