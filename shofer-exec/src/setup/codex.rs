//! Codex CLI: where `init` writes and what.
//!
//! Documented at <https://developers.openai.com/codex/mcp> and
//! <https://github.com/openai/codex/blob/main/docs/config.md>: `$CODEX_HOME/config.toml`
//! (default `~/.codex/config.toml`), or `.codex/config.toml` in a trusted project, with a
//! table `[mcp_servers.<name>]` holding `command`, `args` and optionally `env` and `cwd`.
//!
//! No hook: Codex's `PreToolUse` hooks (`hooks.json`, behind the `codex_hooks` feature) accept
//! an `updatedInput` rewrite only together with `permissionDecision: "allow"`
//! (openai/codex#20527), which would also skip Codex's own approval of every command, and the
//! contract is still moving (openai/codex#46664). Only the MCP entry is written.

use super::json::Json;
use super::{Context, Entry, Format, Scope, Target, SERVER_NAME};

/// Why `init codex` writes no hook.
pub const NO_HOOK: &str = "Codex's PreToolUse hook can rewrite a command only by also approving it (skipping Codex's own approval): only the MCP server is wired; its own shell tool stays as Codex sandboxes it";

/// The files and entries for `ctx`.
pub fn targets(ctx: &Context) -> Vec<Target> {
    let path = match ctx.scope {
        Scope::User => std::env::var_os("CODEX_HOME")
            .filter(|h| !h.is_empty())
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| ctx.home.join(".codex"))
            .join("config.toml"),
        Scope::Project => ctx.base().join(".codex/config.toml"),
    };
    vec![Target {
        path,
        format: Format::Toml,
        entries: vec![Entry::Server {
            at: vec!["mcp_servers"],
            key: SERVER_NAME,
            value: Json::obj(vec![
                ("command", Json::str(ctx.exe.display().to_string())),
                ("args", Json::strs(&ctx.serve_args())),
            ]),
        }],
    }]
}
