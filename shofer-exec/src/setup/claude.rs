//! Claude Code: where `init` writes and what.
//!
//! Documented at <https://code.claude.com/docs/en/mcp> (MCP scopes) and
//! <https://code.claude.com/docs/en/hooks> (hooks):
//! - MCP servers: user scope in `~/.claude.json`, top-level `mcpServers`; project scope in
//!   `.mcp.json` at the project root, `mcpServers`. A stdio entry is
//!   `{"type": "stdio", "command": …, "args": […], "env": {…}}`. Claude Code starts stdio servers
//!   in the directory it was launched from (its desktop app: in `$HOME`), which is why a
//!   user-scope entry runs `shofer serve --project` (see [`super::project`]).
//! - Hooks: `~/.claude/settings.json` (user) or `.claude/settings.json` (project),
//!   `hooks.PreToolUse`: `[{"matcher": "Bash", "hooks": [{"type": "command", "command": …}]}]`.
//!   A PreToolUse hook reads `{"tool_name", "tool_input": {"command", …}, "cwd", …}` on stdin
//!   and may print `{"hookSpecificOutput": {"hookEventName": "PreToolUse",
//!   "permissionDecision": "allow", "updatedInput": {…}}}`; `updatedInput` replaces the whole
//!   input and is applied together with `allow` (with `ask` some versions ignore it:
//!   anthropics/claude-code#11282), and deny and ask rules are still evaluated. Exit code 2
//!   blocks the call, with stderr shown to Claude.

use super::json::Json;
use super::{Context, Entry, Format, Scope, Target, SERVER_NAME};

/// The hook event.
pub const EVENT: &str = "PreToolUse";
/// The shell tool's name (the hook's matcher).
pub const SHELL_TOOL: &str = "Bash";

/// The files and entries for `ctx`.
pub fn targets(ctx: &Context) -> Vec<Target> {
    let server = Entry::Server {
        at: vec!["mcpServers"],
        key: SERVER_NAME,
        value: Json::obj(vec![
            ("type", Json::str("stdio")),
            ("command", Json::str(ctx.exe.display().to_string())),
            ("args", Json::strs(&ctx.serve_args())),
        ]),
    };
    let (mcp_file, settings) = match ctx.scope {
        Scope::User => (
            ctx.home.join(".claude.json"),
            ctx.home.join(".claude/settings.json"),
        ),
        Scope::Project => (
            ctx.base().join(".mcp.json"),
            ctx.base().join(".claude/settings.json"),
        ),
    };
    let mut out = vec![Target {
        path: mcp_file,
        format: Format::Json,
        entries: vec![server],
    }];
    if ctx.hook {
        let command = ctx.hook_command(super::Agent::Claude);
        out.push(Target {
            path: settings,
            format: Format::Json,
            entries: vec![Entry::Hook {
                at: vec!["hooks", EVENT],
                value: Json::obj(vec![
                    ("matcher", Json::str(SHELL_TOOL)),
                    (
                        "hooks",
                        Json::Array(vec![Json::obj(vec![
                            ("type", Json::str("command")),
                            ("command", Json::str(command.clone())),
                        ])]),
                    ),
                ]),
                command,
            }],
        });
    }
    out
}
