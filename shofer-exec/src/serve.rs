//! `shofer serve`: the engine as a Model Context Protocol server on stdio (ARCHITECTURE §3.5,
//! Appendix A), built on the official Rust SDK (`rmcp`).
//!
//! Tools:
//! - `execute_command` (`command`, `cwd`, `timeout`): runs a command through the [`Engine`];
//!   the result is the engine's text (ARCHITECTURE §3.3). Commands reading a file that
//!   `<task cwd>/.shofer/shoferignore` excludes are refused first ([`crate::shoferignore`]).
//!   A client's `notifications/cancelled` for the call aborts the command (tree killed).
//! - `read_command_output` (`artifact_id`, `search`, `offset`, `limit`): ARCHITECTURE §3.4.
//! - `terminate_command` (`execution_id`): kills a command's whole tree.
//! - `list_commands`: the session's commands as JSON: every running one (and every finished
//!   one that left a process behind) and the latest [`crate::MAX_FINISHED_RECORDS`] others.
//!
//! Every line from the client passes [`crate::rpc_gate`] first, so malformed requests get
//! JSON-RPC errors with their id; commands over [`MAX_COMMAND_BYTES`] are refused before
//! any parsing; the default artifact directory is private ([`private_artifacts_dir`]).
//!
//! Errors the model should see (a missing parameter, a refused command, a missing cwd, a bad
//! artifact id) are tool results with `isError: true` and the texts of Appendix A; protocol
//! errors are left to `rmcp`.
//!
//! Lifetime: commands sent to the background by a soft timeout live as long as the server.
//! When stdin closes (the client went away) or the server gets SIGINT/SIGTERM/SIGHUP, every
//! command's tree is killed (also processes left behind by commands that already exited), then
//! the artifacts are removed: the whole directory when it is the server's own temporary one,
//! only this server's `cmd-<id>.txt` files when the user named it with `--artifacts`, nothing
//! with `--keep-artifacts`. A SIGKILL of the server cannot be caught: its [`crate::guardian`]
//! then kills its commands, and its own artifact directory is left to the next server, which
//! removes the directories of servers that are gone ([`crate::sessiondir`]). Commands run in
//! process groups of their own, so killing the server's group does not reach them; each
//! carries `SHOFER_EXEC_TAG=<server pid>-<execution id>` in its environment.
//!
//! Every tool result also carries the engine's pending notes ([`Engine::take_notices`]): a
//! background command whose output reached the artifact cap is read throttled, and the agent
//! hears of it, with `terminate_command` as the remedy, on its next call.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig,
};
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, EngineConfig, ExecError, ExecRequest, Status};
use crate::shoferignore::{access_denied_json, IgnoreFileErrorKind, ShoferIgnore, CHECK_BUDGET};

/// The longest command accepted, in bytes: `/bin/sh -c COMMAND` passes it as one argument,
/// and the kernel refuses a single argument of more than `MAX_ARG_STRLEN` (32 pages, 128 KiB,
/// with its terminating NUL) with E2BIG (`execve(2)`, "Limits on size of arguments"). Longer
/// commands are refused before any parsing.
pub const MAX_COMMAND_BYTES: usize = 128 * 1024 - 1;

/// Largest soft timeout taken from a request, in seconds (larger values are capped to it).
const MAX_SOFT_TIMEOUT_S: f64 = 1.0e9;

/// How `shofer serve` runs: the engine's settings and what to do with artifacts at exit.
#[derive(Debug)]
pub struct ServeOptions {
    /// The engine's settings (task cwd, artifact dir, preview, hard timeout, sandbox, ...).
    pub engine: EngineConfig,
    /// Keep the artifacts at exit (default: remove them).
    pub keep_artifacts: bool,
    /// The server's own temporary artifact directory (removed whole at exit unless kept);
    /// `None` when the user named the directory.
    pub temp_artifacts: Option<tempfile::TempDir>,
}

/// Why the server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeEnd {
    /// stdin closed or the client ended the session.
    Closed,
    /// SIGINT, SIGTERM or SIGHUP (the number).
    Signal(i32),
}

/// Errors of [`run`].
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The engine could not be created (see [`ExecError`]).
    Engine(ExecError),
    /// The MCP handshake failed (e.g. stdin closed or garbage before `initialize`).
    Handshake(String),
    /// Installing the signal handlers failed.
    Signals(std::io::Error),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Engine(e) => write!(f, "cannot start the engine: {e}"),
            ServeError::Handshake(e) => write!(f, "MCP session did not start: {e}"),
            ServeError::Signals(e) => write!(f, "cannot install signal handlers: {e}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// The MCP server: an [`Engine`] behind the four tools.
#[derive(Debug, Clone)]
pub struct ShoferServer {
    engine: Engine,
    tool_router: ToolRouter<Self>,
}

/// The missing-parameter result of Appendix A.
fn missing(name: &str) -> CallToolResult {
    tool_error(&format!(
        "Missing value for required parameter '{name}'. Please retry with complete response."
    ))
}

/// `{"status":"error","message":"The tool execution failed","error":"<error>"}` (fields in
/// this order, as in Appendix A).
fn tool_error(error: &str) -> CallToolResult {
    let error = Value::from(error);
    CallToolResult::error(vec![ContentBlock::text(format!(
        r#"{{"status":"error","message":"The tool execution failed","error":{error}}}"#
    ))])
}

fn invalid(name: &str, expected: &str, got: &Value) -> CallToolResult {
    tool_error(&format!(
        "Invalid value for parameter '{name}': expected {expected}, got {got}. Please retry with a valid value."
    ))
}

/// The refusal of a command longer than [`MAX_COMMAND_BYTES`].
fn too_long_text(len: usize) -> String {
    format!(
        "The command is {len} bytes long; the kernel refuses any single argument of {} bytes or more (MAX_ARG_STRLEN, counting its final NUL), so /bin/sh -c cannot take it. The command was not run. Write the script to a file in smaller pieces and run the file instead.",
        MAX_COMMAND_BYTES + 1
    )
}

fn text_ok(t: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(t)])
}

fn text_err(t: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(t)])
}

/// A string parameter: `Ok(None)` when absent or null.
fn opt_str(args: &JsonObject, name: &str) -> Result<Option<String>, CallToolResult> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(invalid(name, "a string", v)),
    }
}

/// A required, non-empty string parameter.
fn req_str(args: &JsonObject, name: &str) -> Result<String, CallToolResult> {
    match opt_str(args, name)? {
        Some(s) if !s.trim().is_empty() => Ok(s),
        _ => Err(missing(name)),
    }
}

/// A number parameter (a numeric string is accepted too: models send them).
fn opt_f64(args: &JsonObject, name: &str) -> Result<Option<f64>, CallToolResult> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| invalid(name, "a number", &Value::Number(n.clone()))),
        Some(Value::String(s)) if s.trim().parse::<f64>().is_ok_and(f64::is_finite) => {
            Ok(s.trim().parse::<f64>().ok())
        }
        Some(v) => Err(invalid(name, "a number or null", v)),
    }
}

/// An integer parameter (integral floats and numeric strings accepted).
fn opt_i64(args: &JsonObject, name: &str) -> Result<Option<i64>, CallToolResult> {
    let bad = |v: &Value| invalid(name, "an integer", v);
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Some(i)),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(Some(f as i64)),
            _ => Err(bad(&Value::Number(n.clone()))),
        },
        Some(Value::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| bad(&Value::String(s.clone()))),
        Some(v) => Err(bad(v)),
    }
}

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
}

fn execute_schema() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "description": "The shell command line to run (passed to /bin/sh -c). Pipes, lists and redirections work as in sh. Each call starts a new shell: cd, export and shell variables do not carry over to the next call (use cwd, or chain with &&)."
            },
            "cwd": {
                "type": ["string", "null"],
                "description": "Directory to run in: absolute, or relative to the task's working directory. null means the task's working directory (a cd in an earlier call does not change it)."
            },
            "timeout": {
                "type": ["number", "null"],
                "description": "Seconds to wait before returning while the command keeps running in the background (for servers and watchers); the output so far is returned. null or 0 waits until the command ends."
            }
        },
        "required": ["command", "cwd", "timeout"],
        "additionalProperties": false
    }))
}

fn read_schema() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {
            "artifact_id": {
                "type": "string",
                "description": "The artifact named in a command result, e.g. \"cmd-1706119234567.txt\"."
            },
            "search": {
                "type": "string",
                "description": "Only return lines matching this case-insensitive regular expression (taken literally if it is not a valid one). Leave it out to read instead."
            },
            "offset": {
                "type": ["integer", "null"],
                "description": "Byte offset to start reading at; in search mode, where the search starts (a search that ran out of time says where to go on). Default 0."
            },
            "limit": {
                "type": ["integer", "null"],
                "description": "Maximum number of bytes to return. Default 40960."
            }
        },
        "required": ["artifact_id"],
        "additionalProperties": false
    }))
}

fn terminate_schema() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {
            "execution_id": {
                "type": ["integer", "string"],
                "description": "The command's execution id, as shown by list_commands."
            }
        },
        "required": ["execution_id"],
        "additionalProperties": false
    }))
}

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Running => "running",
        Status::Exited => "exited",
        Status::Terminated => "terminated",
        Status::TimedOut => "timed out",
    }
}

#[tool_router]
impl ShoferServer {
    /// A server over `engine`.
    pub fn new(engine: Engine) -> Self {
        ShoferServer {
            engine,
            tool_router: Self::tool_router(),
        }
    }

    /// The engine (for shutting it down after the session).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    #[tool(
        name = "execute_command",
        description = "Run a shell command in the task's working directory and return its exit status and output. Every call is a new /bin/sh: cd and export do not carry over between calls (pass cwd instead). Nothing waits for input: stdin is empty, editors and pagers return at once (EDITOR=true, PAGER=cat; pass -m to git commit), credential prompts fail, and output comes without colours or terminal control codes (progress-bar rewrites keep only the final line). Long output is cut to a head and tail preview and saved whole as an artifact that read_command_output can page through or search. With a timeout, a command still running after that many seconds stays running in the background and the output so far is returned with its artifact id, readable while it runs. Processes a command leaves running in the background (server &) keep running and are named in the result; list_commands shows them and terminate_command stops them. Every result, also after a timeout or a kill, carries the output captured so far. When the sandbox refused a write or a host socket, the result ends with a note saying so and what to do instead.",
        input_schema = execute_schema()
    )]
    async fn execute_command(&self, args: JsonObject, abort: CancellationToken) -> CallToolResult {
        let run = async {
            let command = req_str(&args, "command")?;
            if command.len() > MAX_COMMAND_BYTES {
                return Err(text_err(too_long_text(command.len())));
            }
            let cwd = opt_str(&args, "cwd")?;
            // A soft timeout past ~31 years is "wait for completion" in all but name; the cap
            // keeps `Duration` conversion in range (1e300 would not fit).
            let timeout = opt_f64(&args, "timeout")?.map(|t| t.min(MAX_SOFT_TIMEOUT_S));
            let task_cwd = self.engine.config().task_cwd.clone();
            let run_cwd = self.engine.resolve_cwd(cwd.as_deref());
            // Off the runtime's thread: the check reads the file system (globs, symlinks) and
            // other calls must keep being answered meanwhile.
            let cmd = command.clone();
            // The whole check within its limit (plus the load): a file system that stalls a
            // read gives this call an error, not a hang of every later one.
            let check = tokio::task::spawn_blocking(move || match ShoferIgnore::load(&task_cwd) {
                Ok(Some(ig)) => Ok((ig.denied_path(&cmd, &run_cwd), None)),
                Ok(None) => Ok((None, None)),
                Err(e) if e.kind == IgnoreFileErrorKind::NotAFile => {
                    Ok((None, Some(e.to_string())))
                }
                Err(e) => Err(e.to_string()),
            });
            let (denied, not_applied) =
                tokio::time::timeout(CHECK_BUDGET + std::time::Duration::from_secs(1), check)
                    .await
                    .map_err(|_| {
                        text_err(format!(
                            "The shoferignore check did not finish within {}s (the file system under the task directory is slow or stalled); the command was not run.",
                            CHECK_BUDGET.as_secs() + 1
                        ))
                    })?
                    .map_err(|e| text_err(e.to_string()))?
                    .map_err(|e: String| text_err(e))?;
            if let Some(path) = denied {
                return Err(text_err(access_denied_json(&path)));
            }
            let req = ExecRequest {
                command,
                cwd,
                timeout,
                abort: Some(abort),
            };
            match self.engine.execute(req).await {
                Ok(o) => Ok(text_ok(match not_applied {
                    Some(why) => format!("{}\nNote: {why}", o.text),
                    None => o.text,
                })),
                Err(e) => Err(text_err(e.to_string())),
            }
        };
        self.noted(run.await.unwrap_or_else(|e| e))
    }

    #[tool(
        name = "read_command_output",
        description = "Read or search the full output of a command whose result named an artifact (output too long for the preview, or a command still running: its artifact grows while it runs). Offsets count the same bytes the result sizes do. Read mode returns numbered lines from a byte offset, up to limit bytes; search mode returns the lines matching a case-insensitive regular expression with their line numbers, without loading the whole file.",
        input_schema = read_schema(),
        annotations(read_only_hint = true)
    )]
    async fn read_command_output(
        &self,
        args: JsonObject,
        abort: CancellationToken,
    ) -> CallToolResult {
        let run = async {
            let id = req_str(&args, "artifact_id")?;
            let search = opt_str(&args, "search")?.filter(|s| !s.is_empty());
            let offset = opt_i64(&args, "offset")?;
            let limit = opt_i64(&args, "limit")?;
            // A cancelled call drops the read, which stops a search in progress.
            tokio::select! {
                r = self.engine.read(id, search, offset, limit) => {
                    r.map(text_ok).map_err(|e| text_err(e.to_string()))
                }
                () = abort.cancelled() => Err(text_err("The read was cancelled.")),
            }
        };
        self.noted(run.await.unwrap_or_else(|e| e))
    }

    #[tool(
        name = "terminate_command",
        description = "Stop a command by its execution id: its whole process tree is killed (SIGTERM, then SIGKILL after a short grace), including background processes it started. Returns its final output.",
        input_schema = terminate_schema(),
        annotations(destructive_hint = true)
    )]
    async fn terminate_command(&self, args: JsonObject) -> CallToolResult {
        let r = self.terminate(args).await;
        self.noted(r)
    }

    #[tool(
        name = "list_commands",
        description = "List the commands of this session (all running ones and the latest 1000 finished ones), oldest first, as JSON: execution id, command, working directory, status (running, exited, terminated or timed out), exit code, signal, output size, artifact id if the output was persisted, and the background processes an exited command left running.",
        annotations(read_only_hint = true)
    )]
    async fn list_commands(&self) -> CallToolResult {
        let r = self.list();
        self.noted(r)
    }
}

impl ShoferServer {
    /// `result` with the engine's pending notes ([`Engine::take_notices`]: a background
    /// command throttled at the artifact cap) as further text blocks, so the agent hears of
    /// them on its next call of any tool.
    fn noted(&self, mut result: CallToolResult) -> CallToolResult {
        for n in self.engine.take_notices() {
            result.content.push(ContentBlock::text(n));
        }
        result
    }

    async fn terminate(&self, args: JsonObject) -> CallToolResult {
        let id = match args.get("execution_id") {
            None | Some(Value::Null) => return missing("execution_id"),
            Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap_or(0),
            Some(Value::String(s)) if s.trim().parse::<u64>().is_ok() => {
                s.trim().parse::<u64>().unwrap_or(0)
            }
            Some(v) => {
                return invalid(
                    "execution_id",
                    "an execution id (a non-negative integer)",
                    v,
                )
            }
        };
        let Some(before) = self.engine.status(id) else {
            return text_err(format!(
                "No command with execution id {id}. Use list_commands to see the commands of this session."
            ));
        };
        let Some(after) = self.engine.terminate(id).await else {
            return text_err(format!("No command with execution id {id}."));
        };
        if before.status == Status::Running {
            text_ok(format!(
                "Command {id} ({}) was terminated; its process tree is gone.\n\n{}",
                after.command, after.text
            ))
        } else {
            text_ok(format!(
                "Command {id} ({}) had already {}; any processes it left running were killed.\n\n{}",
                after.command,
                status_word(after.status),
                after.text
            ))
        }
    }

    fn list(&self) -> CallToolResult {
        let list: Vec<Value> = self
            .engine
            .list()
            .into_iter()
            .map(|o| {
                json!({
                    "id": o.id,
                    "command": o.command,
                    "cwd": o.cwd,
                    "status": status_word(o.status),
                    "exit_code": o.exit_code,
                    "signal": o.signal,
                    "output_bytes": o.total_bytes,
                    "artifact_id": o.artifact_id,
                    "background": o.background,
                })
            })
            .collect();
        let v = json!({ "commands": list });
        text_ok(serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string()))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for ShoferServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("shofer", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Runs shell commands for the task (execute_command), with long output saved as \
                 artifacts (read_command_output); background commands can be listed \
                 (list_commands) and stopped (terminate_command). Commands reading files \
                 excluded by .shofer/shoferignore are refused.",
            )
    }
}

/// Creates the server's own artifact directory, fresh and private (mode 0700, a new
/// `shofer-serve-XXXXXX` directory that only this server writes).
///
/// Without a sandbox (`sandboxed` false) it goes under `$TMPDIR` (or `/tmp`): the commands
/// then run with the server's own rights anyway. With `--worktree` the commands may write
/// `/tmp`, `$TMPDIR`, `/dev/shm` and the worktree (see `docs/ARCHITECTURE.md`, the sandbox's
/// writable set), where they could plant links under artifact names or fill the directory;
/// so the directory goes under `$XDG_RUNTIME_DIR/shofer` when that is set (a 0700 per-user
/// tmpfs), else `$XDG_STATE_HOME/shofer/serve` (default `~/.local/state/shofer/serve`), and a
/// place inside the writable set is never used.
///
/// Before creating it, the `shofer-serve-*` directories in the same place whose server is gone
/// are removed ([`crate::sessiondir::sweep`], said on stderr); the new one gets this process's
/// owner record ([`crate::sessiondir::claim`]).
///
/// # Errors
/// A message naming the places tried when none could be created.
pub fn private_artifacts_dir(
    sandbox_writable: Option<&[PathBuf]>,
) -> Result<tempfile::TempDir, String> {
    use std::os::unix::fs::PermissionsExt;
    let builder = || {
        let mut b = tempfile::Builder::new();
        b.prefix("shofer-serve-")
            .permissions(std::fs::Permissions::from_mode(0o700));
        b
    };
    // Directories of servers that are gone first, then ours, with its owner record.
    let fresh = |base: &std::path::Path| {
        sweep_reported(base);
        let t = builder().tempdir_in(base)?;
        if let Err(e) = crate::sessiondir::claim(t.path()) {
            eprintln!(
                "shofer serve: note: no owner record in {} ({e}): should this server be killed, a later one will not remove it",
                t.path().display()
            );
        }
        Ok::<_, std::io::Error>(t)
    };
    let Some(writable) = sandbox_writable else {
        return fresh(&std::env::temp_dir()).map_err(|e| {
            format!("cannot create a temporary artifact directory (set TMPDIR or pass --artifacts DIR): {e}")
        });
    };
    let env_dir = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let mut bases = Vec::new();
    if let Some(r) = env_dir("XDG_RUNTIME_DIR") {
        bases.push(r.join("shofer"));
    }
    if let Some(s) = env_dir("XDG_STATE_HOME") {
        bases.push(s.join("shofer/serve"));
    } else if let Some(h) = env_dir("HOME") {
        bases.push(h.join(".local/state/shofer/serve"));
    }
    let mut tried = Vec::new();
    for base in bases {
        match private_base(&base, writable) {
            Ok(()) => match fresh(&base) {
                Ok(t) => return Ok(t),
                Err(e) => tried.push(format!("{}: {e}", base.display())),
            },
            Err(e) => tried.push(format!("{}: {e}", base.display())),
        }
    }
    if tried.is_empty() {
        tried.push("neither XDG_RUNTIME_DIR, XDG_STATE_HOME nor HOME is set".into());
    }
    Err(format!(
        "no private artifact directory outside the sandbox's writable places ({}); pass --artifacts DIR",
        tried.join("; ")
    ))
}

/// [`crate::sessiondir::sweep`] of `base`, said on stderr when it removed or failed anything.
fn sweep_reported(base: &std::path::Path) {
    let swept = crate::sessiondir::sweep(base);
    if !swept.removed.is_empty() {
        let names: Vec<String> = swept
            .removed
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        eprintln!(
            "shofer serve: removed {} artifact directory(ies) of servers that are gone: {}",
            names.len(),
            names.join(", ")
        );
    }
    for (p, e) in &swept.failed {
        eprintln!(
            "shofer serve: note: {} belongs to a server that is gone but could not be removed: {e}",
            p.display()
        );
    }
}

/// Makes `base` (and missing parents) with mode 0700 and checks it as every state directory
/// is checked ([`shofer_sys::statedir::create`]: ours, writable by no one else, no symlink on
/// its path, neither inside nor holding any of `writable`) — the same check `shofer run`
/// makes of its artifact directory.
fn private_base(base: &std::path::Path, writable: &[PathBuf]) -> std::io::Result<()> {
    shofer_sys::statedir::create(base, writable)
        .map(|_| ())
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// The places a sandboxed command may write besides `--allow-write` paths: the worktree,
/// `/tmp`, `$TMPDIR` and `/dev/shm` ([`crate::Sandbox::default_writable`] with our
/// `$TMPDIR`; see `docs/ARCHITECTURE.md`).
pub fn sandbox_writable(worktree: &std::path::Path) -> Vec<PathBuf> {
    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
    crate::Sandbox::default_writable(worktree, tmpdir.as_deref())
}

/// Kills every command's tree (running ones and leftovers of finished ones) at once, with one
/// shared grace period, and returns how many were still running. With the child-subreaper
/// flag ([`crate::EngineConfig::subreaper`]: the process is ours, as in the `shofer` binary) the
/// targets are simply every process below us ([`Engine::terminate_everything_below_us`]: one
/// signal per command's process group, then walks of `/proc` with no attribution for what
/// left its group), else the commands' trees ([`Engine::terminate_all`]).
pub async fn shutdown(engine: &Engine) -> usize {
    if engine.config().subreaper {
        engine.terminate_everything_below_us().await
    } else {
        engine.terminate_all().await
    }
}

/// Runs the server on stdin/stdout until stdin closes or a signal comes, then kills every
/// command and removes the artifacts (see the module docs). Must run inside a tokio runtime
/// with I/O and time enabled. Messages go to stderr, prefixed `shofer serve: `.
///
/// # Errors
/// [`ServeError`]; every command started so far is killed and artifacts are cleaned up
/// before it is returned.
pub async fn run(opts: ServeOptions) -> Result<ServeEnd, ServeError> {
    use tokio::signal::unix::{signal, SignalKind};
    let ServeOptions {
        engine,
        keep_artifacts,
        temp_artifacts,
    } = opts;
    let artifacts_dir: PathBuf = engine.artifacts_dir.clone();
    let engine = Engine::new(engine).map_err(ServeError::Engine)?;
    let mut int = signal(SignalKind::interrupt()).map_err(ServeError::Signals)?;
    let mut term = signal(SignalKind::terminate()).map_err(ServeError::Signals)?;
    let mut hup = signal(SignalKind::hangup()).map_err(ServeError::Signals)?;
    let server = ShoferServer::new(engine.clone());
    eprintln!(
        "shofer serve: task cwd {}; artifacts in {}",
        engine.config().task_cwd.display(),
        artifacts_dir.display()
    );
    let session = async {
        // Lines are checked before rmcp sees them, so malformed requests get answers.
        let (transport, written) = crate::rpc_gate::stdio();
        let running = server
            .serve(transport)
            .await
            .map_err(|e| ServeError::Handshake(e.to_string()))?;
        let _ = running.waiting().await;
        // Let the last answers reach stdout (bounded: the client may not be reading).
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), written).await;
        Ok(ServeEnd::Closed)
    };
    let end: Result<ServeEnd, ServeError> = tokio::select! {
        r = session => r,
        _ = int.recv() => Ok(ServeEnd::Signal(libc::SIGINT)),
        _ = term.recv() => Ok(ServeEnd::Signal(libc::SIGTERM)),
        _ = hup.recv() => Ok(ServeEnd::Signal(libc::SIGHUP)),
    };
    let killed = shutdown(&engine).await;
    let outputs: Vec<PathBuf> = engine
        .list()
        .into_iter()
        .filter_map(|o| o.artifact_path)
        .collect();
    drop(engine);
    let why = match &end {
        Ok(ServeEnd::Closed) => "session closed".to_string(),
        Ok(ServeEnd::Signal(s)) => format!("signal {s}"),
        // The error itself is reported by the caller.
        Err(_) => "session failed".to_string(),
    };
    let artifacts = if keep_artifacts {
        if let Some(t) = temp_artifacts {
            let _ = t.keep();
        }
        format!("artifacts kept in {}", artifacts_dir.display())
    } else if let Some(t) = temp_artifacts {
        match t.close() {
            Ok(()) => "artifacts removed".to_string(),
            Err(e) => format!("removing {} failed: {e}", artifacts_dir.display()),
        }
    } else {
        let mut failed = 0;
        for p in &outputs {
            if let Err(e) = std::fs::remove_file(p) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    failed += 1;
                }
            }
        }
        format!(
            "{} artifact(s) of this session removed from {}{}",
            outputs.len() - failed,
            artifacts_dir.display(),
            if failed > 0 {
                format!(", {failed} could not be removed")
            } else {
                String::new()
            }
        )
    };
    eprintln!("shofer serve: {why}; {killed} running command(s) killed; {artifacts}; exiting");
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> JsonObject {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn text(r: &CallToolResult) -> String {
        r.content
            .iter()
            .filter_map(|c| match c {
                ContentBlock::Text(t) => Some(t.text.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn missing_parameter_text_is_appendix_a() {
        let r = missing("command");
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            text(&r),
            r#"{"status":"error","message":"The tool execution failed","error":"Missing value for required parameter 'command'. Please retry with complete response."}"#
        );
    }

    #[test]
    fn parameters() {
        let a = args(
            json!({"command": "  ", "cwd": null, "t": "1.5", "n": 3.0, "s": "12", "bad": [1], "f": 2.5}),
        );
        assert!(req_str(&a, "command").is_err());
        assert!(req_str(&a, "absent").is_err());
        assert_eq!(opt_str(&a, "cwd").ok(), Some(None));
        assert_eq!(opt_f64(&a, "t").ok(), Some(Some(1.5)));
        assert_eq!(opt_i64(&a, "n").ok(), Some(Some(3)));
        assert_eq!(opt_i64(&a, "s").ok(), Some(Some(12)));
        assert!(opt_i64(&a, "f").is_err());
        let e = opt_f64(&a, "bad").unwrap_err();
        assert!(text(&e)
            .contains("Invalid value for parameter 'bad': expected a number or null, got [1]"));
    }

    #[test]
    fn status_words() {
        assert_eq!(status_word(Status::TimedOut), "timed out");
        assert_eq!(status_word(Status::Running), "running");
    }
}
