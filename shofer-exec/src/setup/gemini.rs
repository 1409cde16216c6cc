//! Gemini CLI: where `init` writes and what.
//!
//! Documented at <https://geminicli.com/docs/tools/mcp-server/> (MCP servers) and
//! <https://geminicli.com/docs/hooks/reference> (hooks):
//! - `~/.gemini/settings.json` (user) or `.gemini/settings.json` (project): `mcpServers` with
//!   `{"command": …, "args": […], "env": {…}, "cwd": …}` for a stdio server (started in the
//!   CLI's working directory unless `cwd` is given).
//! - Hooks in the same file: `hooks.BeforeTool`: `[{"matcher": "run_shell_command",
//!   "hooks": [{"name": …, "type": "command", "command": …}]}]`. A BeforeTool hook reads
//!   `{"tool_name", "tool_input": {"command", "dir_path", …}, "cwd", …}` on stdin and may print
//!   `{"hookSpecificOutput": {"tool_input": {…}}}`, which "merges with and overrides the
//!   model's arguments before execution"; exit code 2 blocks the tool, stderr being the
//!   reason sent to the agent.

use super::json::Json;
use super::{Agent, Context, Entry, Format, Target, SERVER_NAME};

/// The hook event.
pub const EVENT: &str = "BeforeTool";
/// The shell tool's name (the hook's matcher).
pub const SHELL_TOOL: &str = "run_shell_command";

/// The files and entries for `ctx`.
pub fn targets(ctx: &Context) -> Vec<Target> {
    let mut entries = vec![Entry::Server {
        at: vec!["mcpServers"],
        key: SERVER_NAME,
        value: Json::obj(vec![
            ("command", Json::str(ctx.exe.display().to_string())),
            ("args", Json::strs(&ctx.serve_args())),
        ]),
    }];
    if ctx.hook {
        let command = ctx.hook_command(Agent::Gemini);
        entries.push(Entry::Hook {
            at: vec!["hooks", EVENT],
            value: Json::obj(vec![
                ("matcher", Json::str(SHELL_TOOL)),
                (
                    "hooks",
                    Json::Array(vec![Json::obj(vec![
                        ("name", Json::str(SERVER_NAME)),
                        ("type", Json::str("command")),
                        ("command", Json::str(command.clone())),
                    ])]),
                ),
            ]),
            command,
        });
    }
    vec![Target {
        path: ctx.base().join(".gemini/settings.json"),
        format: Format::Json,
        entries,
    }]
}
