//! `shofer`: run a command the way an agent host would, or read its spilled output.
//!
//! ```text
//! shofer run [--worktree DIR [--allow-unix PATH]...] [--cwd DIR] [--timeout S]
//!            [--hard-timeout S] [--preview small|medium|large] [--artifacts DIR] [--json]
//!            -- <command>
//! shofer read <ARTIFACT_ID> [--search RE] [--offset N] [--limit N] [--artifacts DIR]
//! shofer serve [--worktree DIR [--allow-unix PATH]...] [--cwd DIR] [--artifacts DIR] [--preview SIZE]
//!              [--hard-timeout S] [--timeout-allowlist PREFIX]... [--keep-artifacts]
//! ```
//!
//! Exit codes (one place, [`exit_code`]):
//! - `shofer run`: the command's exit code; a signal N that ended it gives 128+N; 124 when the
//!   hard timeout killed it or the soft timeout returned while it still ran (it is then killed,
//!   since the registry dies with this process); 130/143 when `shofer` itself got SIGINT/SIGTERM
//!   and aborted it; 125 when it could not be started (missing cwd, no `shofer-sandbox` for
//!   `--worktree`, spawn failure).
//! - `shofer read`: 0 with the text on stdout; 1 with the message on stderr when the read
//!   failed (bad id, unknown artifact, bad offset or limit, I/O).
//! - `shofer serve`: 0 when the session ends (stdin closed); 128+N after signal N
//!   (SIGINT/SIGTERM/SIGHUP, commands killed first); 1 when the MCP session failed; 125 when
//!   the server could not start (no `shofer-sandbox` for `--worktree`, bad directory).
//! - All: 2 for a usage error. A broken stdout pipe ends `shofer` quietly with 141 (128+SIGPIPE).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use shofer_core::preview::PreviewSize;
use shofer_exec::reader::{self, ReadRequest};
use shofer_exec::{serve, tree};
use shofer_exec::{CancellationToken, Engine, EngineConfig, ExecRequest, Outcome, Sandbox, Status};

#[derive(Parser, Debug)]
#[command(
    name = "shofer",
    version,
    about = "Run an agent's shell commands with bounded, spilled, searchable output"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a shell command (/bin/sh -c) and print the agent's result text.
    Run {
        /// Run inside `shofer-sandbox DIR --` (writes allowed only in DIR); also the task cwd.
        #[arg(long, value_name = "DIR")]
        worktree: Option<PathBuf>,
        /// Working directory, relative to the task cwd (the worktree, else the current dir).
        #[arg(long, value_name = "DIR")]
        cwd: Option<String>,
        /// With --worktree: also let the command reach the unix socket PATH (or any beneath
        /// the directory PATH), e.g. $SSH_AUTH_SOCK (repeatable; see shofer-sandbox --help).
        #[arg(long = "allow-unix", value_name = "PATH")]
        allow_unix: Vec<PathBuf>,
        /// Soft (agent) timeout in seconds: print the output so far and stop waiting.
        #[arg(long, value_name = "S", value_parser = parse_seconds)]
        timeout: Option<f64>,
        /// Hard (user) timeout in seconds: kill the whole process tree.
        #[arg(long = "hard-timeout", value_name = "S", value_parser = parse_seconds)]
        hard_timeout: Option<f64>,
        /// Preview budget: small (5120 bytes), medium (10240), large (20480).
        #[arg(long, value_name = "SIZE", default_value = "medium", value_parser = PreviewSize::parse)]
        preview: PreviewSize,
        /// Artifact directory [default: $XDG_STATE_HOME/shofer/command-output].
        #[arg(long, value_name = "DIR")]
        artifacts: Option<PathBuf>,
        /// Print one JSON object (id, status, exit_code, signal, artifact_id, artifact_path,
        /// total_bytes, text, ...) instead of the text.
        #[arg(long)]
        json: bool,
        /// The command line; several words are joined with spaces.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Read or search a spilled output artifact (read_command_output).
    Read {
        /// The artifact id, `cmd-<digits>.txt`.
        artifact_id: String,
        /// Case-insensitive regex (searched literally if invalid).
        #[arg(long, value_name = "RE")]
        search: Option<String>,
        /// Byte offset to read from.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        offset: i64,
        /// Maximum bytes to return.
        #[arg(long, default_value_t = reader::DEFAULT_LIMIT, allow_negative_numbers = true)]
        limit: i64,
        /// Artifact directory [default: $XDG_STATE_HOME/shofer/command-output].
        #[arg(long, value_name = "DIR")]
        artifacts: Option<PathBuf>,
    },
    /// Serve execute_command, read_command_output, terminate_command and list_commands as
    /// an MCP server on stdin/stdout.
    Serve {
        /// Run every command inside `shofer-sandbox DIR --`; also the task cwd.
        #[arg(long, value_name = "DIR")]
        worktree: Option<PathBuf>,
        /// The task's working directory (where `.shofer/shoferignore` is read, and what
        /// relative `cwd` arguments resolve against); relative to the worktree if given
        /// [default: the worktree, else the current directory].
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        /// With --worktree: also let commands reach the unix socket PATH (or any beneath the
        /// directory PATH) (repeatable; see shofer-sandbox --help).
        #[arg(long = "allow-unix", value_name = "PATH")]
        allow_unix: Vec<PathBuf>,
        /// Artifact directory [default: a fresh temporary directory, removed at exit].
        #[arg(long, value_name = "DIR")]
        artifacts: Option<PathBuf>,
        /// Preview budget: small (5120 bytes), medium (10240), large (20480).
        #[arg(long, value_name = "SIZE", default_value = "medium", value_parser = PreviewSize::parse)]
        preview: PreviewSize,
        /// Hard (user) timeout in seconds for every command: kill the whole tree.
        #[arg(long = "hard-timeout", value_name = "S", value_parser = parse_seconds)]
        hard_timeout: Option<f64>,
        /// Commands starting with PREFIX are exempt from the hard timeout (repeatable).
        #[arg(long = "timeout-allowlist", value_name = "PREFIX")]
        timeout_allowlist: Vec<String>,
        /// Keep the artifacts at exit (default: remove them).
        #[arg(long)]
        keep_artifacts: bool,
        /// Most bytes of one command's output stored in its artifact (default 4 GiB); past
        /// it the output is counted but not stored, and the result says so.
        #[arg(long = "max-artifact-bytes", value_name = "BYTES",
              default_value_t = shofer_exec::DEFAULT_MAX_ARTIFACT_BYTES)]
        max_artifact_bytes: u64,
    },
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "invalid seconds {s:?}: expected a non-negative number, e.g. 30 or 0.5"
        )),
    }
}

fn default_artifacts() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("shofer/command-output"));
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".local/state/shofer/command-output")),
        None => Err(
            "no artifact directory: pass --artifacts DIR (neither XDG_STATE_HOME nor HOME is set)"
                .into(),
        ),
    }
}

/// What a subcommand ended with; mapped to an exit code in [`exit_code`] only.
enum End {
    Ran(Outcome),
    CouldNotRun(String),
    ReadOk,
    ReadFailed(String),
    Usage(String),
    Interrupted(Outcome, i32),
    Served(Result<serve::ServeEnd, String>),
}

fn exit_code(end: &End) -> u8 {
    match end {
        End::Ran(o) => match o.status {
            // The command's own status; a signal N gives 128+N, like a shell.
            Status::Exited | Status::Terminated => match (o.exit_code, o.signal) {
                (Some(c), _) => c.clamp(0, 255) as u8,
                (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
                (None, None) => 1,
            },
            // Killed by the hard timeout, or still running at the soft timeout: like timeout(1).
            Status::TimedOut | Status::Running => 124,
        },
        // We got SIGINT/SIGTERM and aborted the command: 128 + that signal.
        End::Interrupted(_, sig) => (128 + sig) as u8,
        // Nothing was started.
        End::CouldNotRun(_) => 125,
        End::ReadOk => 0,
        End::ReadFailed(_) => 1,
        End::Usage(_) => 2,
        End::Served(Ok(serve::ServeEnd::Closed)) => 0,
        End::Served(Ok(serve::ServeEnd::Signal(sig))) => (128 + sig).clamp(0, 255) as u8,
        End::Served(Err(_)) => 1,
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let (end, json) = match cli.cmd {
        Cmd::Run {
            worktree,
            cwd,
            allow_unix,
            timeout,
            hard_timeout,
            preview,
            artifacts,
            json,
            command,
        } => (
            run(
                worktree,
                cwd,
                allow_unix,
                timeout,
                hard_timeout,
                preview,
                artifacts,
                command.join(" "),
            ),
            json,
        ),
        Cmd::Read {
            artifact_id,
            search,
            offset,
            limit,
            artifacts,
        } => (
            read(&artifact_id, search.as_deref(), offset, limit, artifacts),
            false,
        ),
        Cmd::Serve {
            worktree,
            cwd,
            allow_unix,
            artifacts,
            preview,
            hard_timeout,
            timeout_allowlist,
            keep_artifacts,
            max_artifact_bytes,
        } => (
            serve_cmd(
                worktree,
                cwd,
                allow_unix,
                artifacts,
                preview,
                hard_timeout,
                timeout_allowlist,
                keep_artifacts,
                max_artifact_bytes,
            ),
            false,
        ),
    };
    let mut out = std::io::stdout().lock();
    let printed = match &end {
        End::Ran(o) | End::Interrupted(o, _) if json => {
            let mut v = serde_json::to_value(o).unwrap_or_default();
            v["exit"] = exit_code(&end).into();
            writeln!(out, "{v}")
        }
        End::Ran(o) | End::Interrupted(o, _) => writeln!(out, "{}", o.text),
        End::CouldNotRun(m) | End::ReadFailed(m) | End::Usage(m) | End::Served(Err(m)) => {
            eprintln!("shofer: {m}");
            Ok(())
        }
        End::ReadOk | End::Served(Ok(_)) => Ok(()),
    };
    if let Err(e) = printed.and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return ExitCode::from(141);
        }
        eprintln!("shofer: writing the result failed: {e}");
        return ExitCode::from(1);
    }
    ExitCode::from(exit_code(&end))
}

#[allow(clippy::too_many_arguments)]
fn run(
    worktree: Option<PathBuf>,
    cwd: Option<String>,
    allow_unix: Vec<PathBuf>,
    timeout: Option<f64>,
    hard_timeout: Option<f64>,
    preview: PreviewSize,
    artifacts: Option<PathBuf>,
    command: String,
) -> End {
    // Stage 1: settings, no syscalls beyond reading the environment.
    let artifacts = match artifacts.map_or_else(default_artifacts, Ok) {
        Ok(a) => a,
        Err(m) => return End::Usage(m),
    };
    let task_cwd = match &worktree {
        Some(w) => match std::fs::canonicalize(w) {
            Ok(w) if w.is_dir() => w,
            _ => {
                return End::CouldNotRun(format!(
                    "worktree '{}' is not an existing directory",
                    w.display()
                ))
            }
        },
        None => match std::env::current_dir() {
            Ok(d) => d,
            Err(e) => return End::CouldNotRun(format!("cannot read the current directory: {e}")),
        },
    };
    let mut config = EngineConfig::new(task_cwd, artifacts);
    config.preview = preview;
    config.hard_timeout = hard_timeout
        .filter(|s| s.is_finite() && *s > 0.0)
        // Too large for a Duration (e.g. 1e300): as good as no timeout.
        .and_then(|s| Duration::try_from_secs_f64(s).ok());
    config.subreaper = true;
    let grace = config.kill_grace;
    if worktree.is_some() {
        match Sandbox::locate(&config.task_cwd) {
            Ok(sb) => config.sandbox = Some(with_allow_unix(sb, &allow_unix)),
            Err(e) => return End::CouldNotRun(e.to_string()),
        }
    } else if !allow_unix.is_empty() {
        return End::Usage("--allow-unix needs --worktree (it is a sandbox option)".into());
    }
    // Stage 2: the engine and the runtime.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return End::CouldNotRun(format!("cannot start the runtime: {e}")),
    };
    rt.block_on(async move {
        let engine = match Engine::new(config) {
            Ok(e) => e,
            Err(e) => return End::CouldNotRun(e.to_string()),
        };
        let abort = CancellationToken::new();
        let got_signal = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
        {
            let (abort, got) = (abort.clone(), got_signal.clone());
            use tokio::signal::unix::{signal, SignalKind};
            if let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
                signal(SignalKind::hangup()),
            ) {
                tokio::spawn(async move {
                    let sig = tokio::select! {
                        _ = int.recv() => libc::SIGINT,
                        _ = term.recv() => libc::SIGTERM,
                        _ = hup.recv() => libc::SIGHUP,
                    };
                    got.store(sig, std::sync::atomic::Ordering::SeqCst);
                    abort.cancel();
                });
            }
        }
        let req = ExecRequest {
            command,
            cwd,
            timeout,
            abort: Some(abort),
        };
        let end = match engine.execute(req).await {
            Ok(o) => match got_signal.load(std::sync::atomic::Ordering::SeqCst) {
                0 => End::Ran(o),
                sig => End::Interrupted(o, sig),
            },
            Err(e) => End::CouldNotRun(e.to_string()),
        };
        // Dropping the engine kills what is left of the tree (a soft timeout's command, or
        // background processes of one that exited).
        drop(engine);
        // Then everything else below us: a detached orphan the tree scan never saw (`setsid
        // env -i daemon &` whose shell exited first) is still our descendant (subreaper).
        // Nothing outlives `shofer run`.
        tree::kill_everything_below_us(grace);
        end
    })
}

fn read(
    id: &str,
    search: Option<&str>,
    offset: i64,
    limit: i64,
    artifacts: Option<PathBuf>,
) -> End {
    let dir = match artifacts.map_or_else(default_artifacts, Ok) {
        Ok(a) => a,
        Err(m) => return End::Usage(m),
    };
    let req = ReadRequest {
        artifact_id: id,
        search,
        offset,
        limit,
    };
    match reader::read_output(&dir, &req) {
        Ok(text) => {
            let mut out = std::io::stdout().lock();
            match writeln!(out, "{text}").and_then(|()| out.flush()) {
                Ok(()) => End::ReadOk,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(141),
                Err(e) => End::ReadFailed(format!("writing the result failed: {e}")),
            }
        }
        Err(e) => End::ReadFailed(e.to_string()),
    }
}

/// `shofer serve`: settings first (no syscalls but the directory checks), then the server.
#[allow(clippy::too_many_arguments)]
fn serve_cmd(
    worktree: Option<PathBuf>,
    cwd: Option<PathBuf>,
    allow_unix: Vec<PathBuf>,
    artifacts: Option<PathBuf>,
    preview: PreviewSize,
    hard_timeout: Option<f64>,
    timeout_allowlist: Vec<String>,
    keep_artifacts: bool,
    max_artifact_bytes: u64,
) -> End {
    let here = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return End::CouldNotRun(format!("cannot read the current directory: {e}")),
    };
    let task_cwd = match (&cwd, &worktree) {
        // Like `shofer run --cwd`: relative to the worktree when there is one.
        (Some(c), Some(w)) => here.join(w).join(c),
        (Some(c), None) => here.join(c),
        (None, Some(w)) => here.join(w),
        (None, None) => here.clone(),
    };
    if !task_cwd.is_dir() {
        return End::CouldNotRun(format!(
            "--cwd {}: not a directory (the task's working directory must exist)",
            task_cwd.display()
        ));
    }
    let (artifacts, temp) = match artifacts {
        Some(a) => (here.join(a), None),
        // The server's own 0700 directory, outside what a sandboxed command may write.
        None => {
            let writable = worktree
                .as_ref()
                .map(|w| serve::sandbox_writable(&here.join(w)));
            match serve::private_artifacts_dir(writable.as_deref()) {
                Ok(t) => (t.path().to_path_buf(), Some(t)),
                Err(e) => return End::CouldNotRun(e),
            }
        }
    };
    let hard_timeout = match hard_timeout
        .filter(|s| *s > 0.0)
        .map(Duration::try_from_secs_f64)
    {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(_)) => {
            return End::Usage("--hard-timeout: too large (seconds, e.g. 600)".into());
        }
    };
    let mut config = EngineConfig::new(task_cwd, artifacts);
    config.max_artifact_bytes = max_artifact_bytes;
    config.preview = preview;
    config.hard_timeout = hard_timeout;
    config.hard_timeout_allowlist = timeout_allowlist;
    config.subreaper = true;
    if worktree.is_none() && !allow_unix.is_empty() {
        return End::Usage("--allow-unix needs --worktree (it is a sandbox option)".into());
    }
    if let Some(w) = &worktree {
        match Sandbox::locate(&here.join(w)) {
            Ok(sb) => config.sandbox = Some(with_allow_unix(sb, &allow_unix)),
            Err(e) => return End::CouldNotRun(e.to_string()),
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return End::CouldNotRun(format!("cannot start the runtime: {e}")),
    };
    let opts = serve::ServeOptions {
        engine: config,
        keep_artifacts,
        temp_artifacts: temp,
    };
    let grace = opts.engine.kill_grace;
    let end = rt.block_on(serve::run(opts));
    // What no command's tree claimed (see `shofer run`) ends with the server too; the
    // server's shutdown has usually swept everything below us already.
    if !tree::everything_below_us_killed() {
        tree::kill_everything_below_us(grace);
    }
    // The stdin reader may sit in a blocking read forever (a signal ended the session while
    // the client keeps stdin open): do not wait for it.
    rt.shutdown_background();
    match end {
        Err(e @ serve::ServeError::Engine(_)) => End::CouldNotRun(e.to_string()),
        other => End::Served(other.map_err(|e| e.to_string())),
    }
}

/// Passes each `--allow-unix PATH` on to `shofer-sandbox`, which checks it.
fn with_allow_unix(mut sb: Sandbox, paths: &[PathBuf]) -> Sandbox {
    for p in paths {
        sb.extra_args.push("--allow-unix".into());
        sb.extra_args.push(p.clone().into_os_string());
    }
    sb
}
