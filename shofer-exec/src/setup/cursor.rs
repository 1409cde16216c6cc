//! Cursor: where `init` writes and what.
//!
//! Documented at <https://cursor.com/docs/context/mcp>: `~/.cursor/mcp.json` (every project)
//! or `.cursor/mcp.json` in a project, `mcpServers` with `{"command": …, "args": […],
//! "env": {…}}` for a stdio server.
//!
//! No hook: Cursor's `beforeShellExecution` hook (<https://cursor.com/docs/agent/hooks>) can
//! allow, deny or ask about a command but not rewrite it, so the MCP entry is all `init`
//! writes; the agent's own terminal tool stays unsandboxed.

use super::json::Json;
use super::{Context, Entry, Format, Target, SERVER_NAME};

/// Why `init cursor` writes no hook.
pub const NO_HOOK: &str = "Cursor's hooks can allow or deny a shell command but not rewrite it: only the MCP server is wired; its own terminal tool stays unsandboxed";

/// The files and entries for `ctx`.
pub fn targets(ctx: &Context) -> Vec<Target> {
    vec![Target {
        path: ctx.base().join(".cursor/mcp.json"),
        format: Format::Json,
        entries: vec![Entry::Server {
            at: vec!["mcpServers"],
            key: SERVER_NAME,
            value: Json::obj(vec![
                ("command", Json::str(ctx.exe.display().to_string())),
                ("args", Json::strs(&ctx.serve_args())),
            ]),
        }],
    }]
}
