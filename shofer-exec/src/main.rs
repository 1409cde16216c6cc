//! `shofer`: run a command the way an agent host would, or read its spilled output.
//!
//! ```text
//! shofer run [--worktree DIR [SANDBOX OPTIONS]] [--profile NAME] [--cwd DIR] [--timeout S]
//!            [--hard-timeout S] [--env K=V]... [--preview small|medium|large]
//!            [--artifacts DIR] [--json] -- <command>
//! shofer read <ARTIFACT_ID> [--search RE] [--offset N] [--limit N] [--artifacts DIR]
//! shofer list [--artifacts DIR]
//! shofer status <ID> [--artifacts DIR]
//! shofer kill <ID>|--all [--artifacts DIR]
//! shofer serve [--worktree DIR|--project [SANDBOX OPTIONS]] [--cwd DIR] [--artifacts DIR]
//!              [--preview SIZE] [--env K=V]...
//!              [--hard-timeout S] [--timeout-allowlist PREFIX]... [--keep-artifacts]
//! shofer init <claude|codex|gemini|cursor> [--scope user|project] [--dry-run] [--undo]
//! shofer doctor [--json] [--agent NAME]...
//! shofer config show [--worktree DIR] [SANDBOX OPTIONS] [--json|--args]
//! shofer completions <bash|zsh|fish> [shofer|shofer-sandbox]
//! shofer man [shofer|shofer-sandbox]
//! ```
//!
//! SANDBOX OPTIONS ([`SandboxOpts`]) are the policy files' settings as flags
//! ([`shofer_exec::policy`]): `--backend`, `--allow-degraded`, `--allow-write`, `--allow-unix`,
//! `--allow-read`, `--hide`, `--keep-env`, `--no-package-caches`, `--net`, `--allow-domain`,
//! `--no-default-domains`, `--limit-procs`, `--limit-memory`, `--limit-cpu`.
//!
//! With `--timeout`, `shofer run` starts the command in a detached supervisor
//! ([`shofer_exec::detach`]): past the soft timeout it prints the still-running text and
//! returns while the command goes on; `list`, `status`, `kill` and `read` reach it later.
//!
//! Exit codes (one place, [`exit_code`]):
//! - `shofer run`: the command's exit code; a signal N that ended it gives 128+N; 124 when the
//!   hard timeout killed it or the soft timeout returned while it still runs (detached);
//!   130/143 when `shofer` itself got SIGINT/SIGTERM and aborted it; 125 when it could not be
//!   started (missing cwd, no `shofer-sandbox` for `--worktree`, spawn failure).
//! - `shofer read`: 0 with the text on stdout; 1 with the message on stderr when the read
//!   failed (bad id, unknown artifact, bad offset or limit, I/O).
//! - `shofer list`, `status`, `kill`: 0 with the text on stdout; 1 with the message on stderr
//!   (no such job, the supervisor gone).
//! - `shofer serve`: 0 when the session ends (stdin closed); 128+N after signal N
//!   (SIGINT/SIGTERM/SIGHUP, commands killed first); 1 when the MCP session failed; 125 when
//!   the server could not start (no `shofer-sandbox` for `--worktree`, bad directory).
//! - `shofer init`, `shofer doctor`: 0 when done / healthy; 1 with one line per problem.
//! - `shofer config show`: 0 with the policy on stdout; 1 when a policy file cannot be used.
//! - `shofer hook`: 0 with the rewrite (or nothing) on stdout; 2 to block the tool call.
//! - All: 2 for a usage error. A broken stdout pipe ends `shofer` quietly with 141 (128+SIGPIPE).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use shofer_core::policyfile::{Layer, Val};
use shofer_core::preview::PreviewSize;
use shofer_exec::childenv;
use shofer_exec::detach::{self, Forked, JobState};
use shofer_exec::docs;
use shofer_exec::reader::{self, ReadRequest};
use shofer_exec::{policy, serve, tree};
use shofer_exec::{
    Background, CancellationToken, Engine, EngineConfig, ExecRequest, Outcome, Sandbox, Status,
};

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

/// The sandbox's policy as flags: the same settings as the policy files
/// ([`shofer_exec::policy`]), passed on to `shofer-sandbox` (with `--worktree`), which checks
/// them again.
#[derive(clap::Args, Debug, Default)]
struct SandboxOpts {
    /// The profile of the user's policy file to use (its [profiles.NAME] tables) instead of
    /// the one its `profile` key names.
    #[arg(long = "profile", value_name = "NAME")]
    profile: Option<String>,
    /// With --worktree: the backend: auto (the strongest that enforces the whole policy),
    /// layered, userns, bwrap or landlock.
    #[arg(long = "backend", value_name = "NAME")]
    backend: Option<String>,
    /// With --worktree: run even where the backend cannot enforce every required protection
    /// (the report names what is missing).
    #[arg(long = "allow-degraded")]
    allow_degraded: bool,
    /// With --worktree: also make PATH writable (repeatable).
    #[arg(long = "allow-write", value_name = "PATH")]
    allow_write: Vec<PathBuf>,
    /// With --worktree: also let commands reach the unix socket PATH (or any beneath the
    /// directory PATH), e.g. $SSH_AUTH_SOCK (repeatable; see shofer-sandbox --help).
    #[arg(long = "allow-unix", value_name = "PATH")]
    allow_unix: Vec<PathBuf>,
    /// With --worktree: pass the secret variable NAME on to commands, which are otherwise
    /// run without the caller's secret variables (repeatable; `*` globs; see shofer-sandbox
    /// --help).
    #[arg(long = "keep-env", value_name = "NAME")]
    keep_env: Vec<String>,
    /// With --worktree: let commands read the secret location PATH after all, or just PATH
    /// inside one (repeatable; see shofer-sandbox --help).
    #[arg(long = "allow-read", value_name = "PATH")]
    allow_read: Vec<PathBuf>,
    /// With --worktree: hide PATH from commands like the default secret locations
    /// (repeatable).
    #[arg(long = "hide", value_name = "PATH")]
    hide: Vec<PathBuf>,
    /// With --worktree: at most N processes and threads at once per command, or `off`
    /// (default 4096; see shofer-sandbox --help).
    #[arg(long = "limit-procs", value_name = "N|off")]
    limit_procs: Option<String>,
    /// With --worktree: at most SIZE of memory per command (512M, 8G), or `off` (default
    /// three quarters of the machine's).
    #[arg(long = "limit-memory", value_name = "SIZE|off")]
    limit_memory: Option<String>,
    /// With --worktree: at most PCT percent of one CPU per command, or `off` (the default).
    #[arg(long = "limit-cpu", value_name = "PCT|off")]
    limit_cpu: Option<String>,
    /// With --worktree: the network of commands: allow (the host's, the default), deny
    /// (none) or proxy (only the supervisor's proxy, to the allow-list; see shofer-sandbox
    /// --help).
    #[arg(long = "net", value_name = "allow|deny|proxy")]
    net: Option<String>,
    /// With --worktree --net proxy: also allow NAME (*.SUFFIX, or an IP address) on PORT
    /// (default 443 and 80) (repeatable).
    #[arg(long = "allow-domain", value_name = "NAME[:PORT[,PORT...]]")]
    allow_domain: Vec<String>,
    /// With --worktree --net proxy: start from an empty allow-list instead of the public
    /// package registries and source hosts.
    #[arg(long = "no-default-domains")]
    no_default_domains: bool,
    /// With --worktree: no private copy-on-write views of the package managers' caches
    /// (npm, pip, cargo, go, uv, pnpm; see shofer-sandbox --help).
    #[arg(long = "no-package-caches")]
    no_package_caches: bool,
}

impl SandboxOpts {
    /// The usage error for options given without --worktree, naming the first.
    fn without_worktree(&self) -> Option<End> {
        let given = if self.backend.is_some() {
            "--backend"
        } else if self.allow_degraded {
            "--allow-degraded"
        } else if !self.allow_write.is_empty() {
            "--allow-write"
        } else if !self.allow_unix.is_empty() {
            "--allow-unix"
        } else if !self.keep_env.is_empty() {
            "--keep-env"
        } else if !self.allow_read.is_empty() {
            "--allow-read"
        } else if !self.hide.is_empty() {
            "--hide"
        } else if self.limit_procs.is_some() {
            "--limit-procs"
        } else if self.limit_memory.is_some() {
            "--limit-memory"
        } else if self.limit_cpu.is_some() {
            "--limit-cpu"
        } else if self.net.is_some() {
            "--net"
        } else if !self.allow_domain.is_empty() {
            "--allow-domain"
        } else if self.no_default_domains {
            "--no-default-domains"
        } else if self.no_package_caches {
            "--no-package-caches"
        } else {
            return None;
        };
        Some(End::Usage(format!(
            "{given} needs --worktree (it is a sandbox option)"
        )))
    }

    /// These flags (and the timeouts) as the policy model's top layer: each value checked
    /// by the parser the policy files use.
    fn layer(&self, soft: Option<f64>, hard: Option<f64>) -> Result<Layer, String> {
        use shofer_core::limits;
        let paths = |v: &[PathBuf], flag: &'static str| {
            (!v.is_empty()).then(|| v.iter().map(|p| Val::flag(p.clone(), flag)).collect())
        };
        let limit =
            |v: &Option<String>, flag: &'static str, parse: fn(&str) -> Result<u64, String>| {
                v.as_deref()
                    .map(|t| {
                        limits::setting(t, parse)
                            .map(|s| Val::flag(s, flag))
                            .map_err(|e| format!("{flag} {e}"))
                    })
                    .transpose()
            };
        // 0 is kept: `--timeout 0` says "no timeout" over a file's.
        let seconds = |v: Option<f64>, flag| v.map(|s| Val::flag(s, flag));
        Ok(Layer {
            backend: self
                .backend
                .as_deref()
                .map(|b| {
                    shofer_core::policy::Backend::parse_choice(b).map(|c| Val::flag(c, "--backend"))
                })
                .transpose()
                .map_err(|e| format!("--backend {e}"))?,
            allow_degraded: self
                .allow_degraded
                .then(|| Val::flag(true, "--allow-degraded")),
            allow_write: paths(&self.allow_write, "--allow-write"),
            allow_unix: paths(&self.allow_unix, "--allow-unix"),
            allow_read: paths(&self.allow_read, "--allow-read"),
            hide: paths(&self.hide, "--hide"),
            keep_env: (!self.keep_env.is_empty()).then(|| {
                self.keep_env
                    .iter()
                    .map(|k| Val::flag(k.clone(), "--keep-env"))
                    .collect()
            }),
            net: self
                .net
                .as_deref()
                .map(|n| shofer_core::policy::NetPolicy::parse(n).map(|n| Val::flag(n, "--net")))
                .transpose()
                .map_err(|e| format!("--net {e}"))?,
            allow_domains: if self.allow_domain.is_empty() {
                None
            } else {
                Some(
                    self.allow_domain
                        .iter()
                        .map(|d| {
                            shofer_core::egress::Rule::parse(d)
                                .map(|r| Val::flag(r, "--allow-domain"))
                        })
                        .collect::<Result<_, _>>()?,
                )
            },
            default_domains: self
                .no_default_domains
                .then(|| Val::flag(false, "--no-default-domains")),
            limit_procs: limit(&self.limit_procs, "--limit-procs", limits::parse_count)?,
            limit_memory: limit(&self.limit_memory, "--limit-memory", limits::parse_size)?,
            limit_cpu: limit(&self.limit_cpu, "--limit-cpu", limits::parse_percent)?,
            package_caches: self
                .no_package_caches
                .then(|| Val::flag(false, "--no-package-caches")),
            soft_timeout: seconds(soft, "--timeout"),
            hard_timeout: seconds(hard, "--hard-timeout"),
        })
    }
}

/// The effective policy of a run or a server: the policy files and the flags. Sandbox
/// settings in the files do nothing without a worktree, and stderr says so when `running`.
fn effective_policy(
    worktree: Option<&std::path::Path>,
    sandbox: &SandboxOpts,
    soft: Option<f64>,
    hard: Option<f64>,
    running: bool,
) -> Result<Layer, Box<End>> {
    if worktree.is_none() {
        if let Some(usage) = sandbox.without_worktree() {
            return Err(Box::new(usage));
        }
    }
    let flags = sandbox
        .layer(soft, hard)
        .map_err(|e| Box::new(End::Usage(e)))?;
    let eff = policy::effective(worktree, sandbox.profile.as_deref(), flags)
        .map_err(|e| Box::new(End::CouldNotRun(format!("policy file: {e}"))))?;
    if running && worktree.is_none() && eff.has_sandbox_settings() {
        eprintln!(
            "shofer: no --worktree: the policy file's sandbox settings do not apply, and the command runs unsandboxed"
        );
    }
    Ok(eff)
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
        #[command(flatten)]
        sandbox: SandboxOpts,
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
        /// total_bytes, background, text, ...) instead of the text.
        #[arg(long)]
        json: bool,
        /// Set an environment variable for the command (repeatable); wins over the
        /// non-interactive defaults (EDITOR=true, PAGER=cat, TERM=dumb, ...).
        #[arg(long = "env", value_name = "K=V", value_parser = childenv::parse_assignment)]
        env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
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
    /// List the commands `shofer run --timeout` left running detached (and the ended ones),
    /// as JSON.
    List {
        /// Artifact directory [default: $XDG_STATE_HOME/shofer/command-output].
        #[arg(long, value_name = "DIR")]
        artifacts: Option<PathBuf>,
    },
    /// Show a detached command: the output so far while it runs, else its final result.
    Status {
        /// The execution id.
        id: u64,
        /// Artifact directory [default: $XDG_STATE_HOME/shofer/command-output].
        #[arg(long, value_name = "DIR")]
        artifacts: Option<PathBuf>,
    },
    /// Stop a detached command (its whole process tree) and print its final result.
    Kill {
        /// The execution id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<u64>,
        /// Every running detached command.
        #[arg(long)]
        all: bool,
        /// Artifact directory [default: $XDG_STATE_HOME/shofer/command-output].
        #[arg(long, value_name = "DIR")]
        artifacts: Option<PathBuf>,
    },
    /// The policy files (~/.config/shofer/config.toml, a worktree's .shofer/config.toml).
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Serve execute_command, read_command_output, terminate_command and list_commands as
    /// an MCP server on stdin/stdout.
    Serve {
        /// Run every command inside `shofer-sandbox DIR --`; also the task cwd.
        #[arg(long, value_name = "DIR", conflicts_with = "project")]
        worktree: Option<PathBuf>,
        /// Like --worktree with the git worktree around the current directory; refuses
        /// $HOME and / (what `shofer init` writes for a user-scope entry).
        #[arg(long)]
        project: bool,
        /// The task's working directory (where `.shofer/shoferignore` is read, and what
        /// relative `cwd` arguments resolve against); relative to the worktree if given
        /// [default: the worktree, else the current directory].
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        #[command(flatten)]
        sandbox: SandboxOpts,
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
        /// Set an environment variable for every command (repeatable); wins over the
        /// non-interactive defaults.
        #[arg(long = "env", value_name = "K=V", value_parser = childenv::parse_assignment)]
        env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
        /// Most bytes of one command's output stored in its artifact (default 4 GiB); past
        /// it the output is counted but not stored, and the result says so.
        #[arg(long = "max-artifact-bytes", value_name = "BYTES",
              default_value_t = shofer_exec::DEFAULT_MAX_ARTIFACT_BYTES)]
        max_artifact_bytes: u64,
    },
    /// Wire shofer into a coding agent: its MCP server entry and, where the agent has a
    /// command hook that can rewrite a shell command, a hook routing its shell tool through
    /// `shofer run --worktree`.
    Init {
        /// claude, codex, gemini or cursor.
        #[arg(value_parser = shofer_exec::setup::Agent::parse)]
        agent: shofer_exec::setup::Agent,
        /// user (the agent's user files, every project) or project (the current git
        /// worktree's files).
        #[arg(long, default_value = "user", value_parser = shofer_exec::setup::Scope::parse)]
        scope: shofer_exec::setup::Scope,
        /// Print what would change, and the resulting files, without writing.
        #[arg(long)]
        dry_run: bool,
        /// Remove what `shofer init` wrote (entries the user changed are left alone).
        #[arg(long)]
        undo: bool,
        /// Write only the MCP server entry, no command hook.
        #[arg(long)]
        no_hook: bool,
    },
    /// The agent's command hook: reads its hook JSON on stdin, prints the rewrite.
    #[command(hide = true)]
    Hook {
        /// claude or gemini.
        #[arg(value_parser = shofer_exec::setup::Agent::parse)]
        agent: shofer_exec::setup::Agent,
        /// The worktree a project-scope hook is pinned to (written by `shofer init --scope
        /// project`); without it, the git worktree around the agent's directory.
        #[arg(long, value_name = "DIR")]
        worktree: Option<PathBuf>,
    },
    /// Check the sandbox this kernel gives, the binaries on PATH and the agents' wiring.
    Doctor {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Count this agent not being wired as a problem (repeatable).
        #[arg(long = "agent", value_name = "NAME", value_parser = shofer_exec::setup::Agent::parse)]
        agents: Vec<shofer_exec::setup::Agent>,
    },
    /// Print the bash, zsh or fish completion script of shofer or shofer-sandbox.
    Completions(shofer_exec::docs::CompletionsArgs),
    /// Print the man page (roff) of shofer or shofer-sandbox, e.g. `shofer man | man -l -`.
    Man(shofer_exec::docs::ManArgs),
}

#[derive(Subcommand, Debug)]
enum ConfigAction {
    /// Print the effective policy of a run with these flags, each value with where it came
    /// from (a file and line, a flag, or the default).
    Show {
        /// The worktree whose .shofer/config.toml applies.
        #[arg(long, value_name = "DIR")]
        worktree: Option<PathBuf>,
        #[command(flatten)]
        sandbox: SandboxOpts,
        /// Soft timeout in seconds, as `shofer run --timeout`.
        #[arg(long, value_name = "S", value_parser = parse_seconds)]
        timeout: Option<f64>,
        /// Hard timeout in seconds, as `--hard-timeout`.
        #[arg(long = "hard-timeout", value_name = "S", value_parser = parse_seconds)]
        hard_timeout: Option<f64>,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// Print the effective sandbox settings as shofer-sandbox options, one shell-quoted
        /// line (shofer-sandbox itself reads no policy file): `eval "shofer-sandbox $(shofer
        /// config show --args --worktree DIR) DIR -- CMD"`. The timeouts are shofer's, not in it.
        #[arg(long, conflicts_with = "json")]
        args: bool,
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

/// The artifact directory of `shofer run|read|list|status|kill`: `--artifacts` as given (the
/// user's choice, as for `shofer serve`; each artifact and the `jobs/` directory are checked
/// on every read), else the default after the check every state directory gets on write and
/// on read ([`shofer_sys::statedir`]: ours, writable by no one else, no symlink on its path;
/// made with mode 0700 when `create` and missing). Under `--worktree` the default must also
/// lie outside what the sandboxed command may write (the check `shofer serve` makes): later
/// invocations read the job records there (`shofer kill` signals the process one names). A
/// reader whose default directory does not exist gets its path back (nothing to read).
fn artifacts_dir(
    explicit: Option<PathBuf>,
    worktree: Option<&std::path::Path>,
    create: bool,
) -> Result<PathBuf, String> {
    if let Some(dir) = explicit {
        return Ok(dir);
    }
    let dir = default_artifacts()?;
    let writable = match worktree {
        Some(w) => serve::sandbox_writable(w),
        None => Vec::new(),
    };
    let checked = if create {
        shofer_sys::statedir::create(&dir, &writable)
    } else if std::fs::symlink_metadata(&dir).is_err() {
        return Ok(dir);
    } else {
        shofer_sys::statedir::check(&dir, &writable)
    };
    checked.map(|d| d.path).map_err(|e| {
        format!(
            "the default artifact directory cannot be used: {e}; pass --artifacts DIR naming a directory of this user's that only it can write{}",
            if writable.is_empty() { "" } else { ", outside the worktree, /tmp, $TMPDIR and /dev/shm" }
        )
    })
}

/// What a subcommand ended with; mapped to an exit code in [`exit_code`] only.
enum End {
    Ran(Outcome),
    CouldNotRun(String),
    ReadOk,
    ReadFailed(String),
    Jobs(Result<String, String>),
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
        End::Jobs(Ok(_)) => 0,
        End::Jobs(Err(_)) => 1,
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
    match &cli.cmd {
        Cmd::Init {
            agent,
            scope,
            dry_run,
            undo,
            no_hook,
        } => {
            return ExitCode::from(shofer_exec::setup::init::main(
                &shofer_exec::setup::init::Options {
                    agent: *agent,
                    scope: *scope,
                    dry_run: *dry_run,
                    undo: *undo,
                    hook: !*no_hook,
                },
            ))
        }
        Cmd::Hook { agent, worktree } => {
            return ExitCode::from(shofer_exec::setup::hook::main(*agent, worktree.as_deref()))
        }
        Cmd::Doctor { json, agents } => {
            return ExitCode::from(shofer_exec::setup::doctor::main(
                &shofer_exec::setup::doctor::Options {
                    json: *json,
                    agents: agents.clone(),
                },
            ))
        }
        _ => {}
    }
    // `shofer serve` runs below a guardian that outlives a SIGKILLed server (guardian.rs).
    if matches!(cli.cmd, Cmd::Serve { .. }) {
        if let shofer_exec::guardian::Role::Done(code) = shofer_exec::guardian::split() {
            return ExitCode::from(code);
        }
    }
    let (end, json) = match cli.cmd {
        // Texts on stdout, or the message on stderr with 1, like `list`.
        Cmd::Completions(a) => (End::Jobs(docs::completions(&a, Cli::command())), false),
        Cmd::Man(a) => (End::Jobs(docs::man(&a, Cli::command())), false),
        Cmd::Run {
            worktree,
            cwd,
            sandbox,
            timeout,
            hard_timeout,
            preview,
            artifacts,
            json,
            env,
            command,
        } => (
            run(
                worktree,
                cwd,
                sandbox,
                timeout,
                hard_timeout,
                preview,
                artifacts,
                env,
                command.join(" "),
            ),
            json,
        ),
        Cmd::List { artifacts } => (jobs(artifacts, list_jobs), false),
        Cmd::Status { id, artifacts } => (jobs(artifacts, |a| status_job(a, id)), false),
        Cmd::Kill { id, all, artifacts } => (jobs(artifacts, |a| kill_jobs(a, id, all)), false),
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
        Cmd::Config {
            action:
                ConfigAction::Show {
                    worktree,
                    sandbox,
                    timeout,
                    hard_timeout,
                    json,
                    args,
                },
        } => (
            config_show(worktree, &sandbox, timeout, hard_timeout, json, args),
            false,
        ),
        Cmd::Serve {
            worktree,
            project,
            cwd,
            sandbox,
            artifacts,
            preview,
            hard_timeout,
            timeout_allowlist,
            keep_artifacts,
            env,
            max_artifact_bytes,
        } => (
            serve_cmd(
                match project_worktree(worktree, project) {
                    Ok(w) => w,
                    Err(m) => {
                        eprintln!("shofer: {m}");
                        return ExitCode::from(125);
                    }
                },
                cwd,
                sandbox,
                artifacts,
                preview,
                hard_timeout,
                timeout_allowlist,
                keep_artifacts,
                env,
                max_artifact_bytes,
            ),
            false,
        ),
        // Dispatched above.
        Cmd::Init { .. } | Cmd::Hook { .. } | Cmd::Doctor { .. } => return ExitCode::from(0),
    };
    let mut out = std::io::stdout().lock();
    let printed = match &end {
        End::Ran(o) | End::Interrupted(o, _) if json => {
            let mut v = serde_json::to_value(o).unwrap_or_default();
            v["exit"] = exit_code(&end).into();
            writeln!(out, "{v}")
        }
        End::Ran(o) | End::Interrupted(o, _) => writeln!(out, "{}", o.text),
        End::Jobs(Ok(t)) => writeln!(out, "{t}"),
        End::CouldNotRun(m)
        | End::ReadFailed(m)
        | End::Usage(m)
        | End::Served(Err(m))
        | End::Jobs(Err(m)) => {
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

/// `shofer config show`: the files considered, then one row per setting.
fn config_show(
    worktree: Option<PathBuf>,
    sandbox: &SandboxOpts,
    timeout: Option<f64>,
    hard_timeout: Option<f64>,
    json: bool,
    args: bool,
) -> End {
    let worktree = match worktree.map(std::fs::canonicalize).transpose() {
        Ok(w) => w,
        Err(e) => return End::Jobs(Err(format!("--worktree: {e}"))),
    };
    let eff = match effective_policy(worktree.as_deref(), sandbox, timeout, hard_timeout, false) {
        Ok(eff) => eff,
        Err(end) => match *end {
            End::Usage(m) | End::CouldNotRun(m) => return End::Jobs(Err(m)),
            other => return other,
        },
    };
    let file = |p: Option<PathBuf>| match p {
        Some(p) if p.exists() => format!("{}", p.display()),
        Some(p) => format!("{} (none)", p.display()),
        None => "(none: neither XDG_CONFIG_HOME nor HOME is set)".into(),
    };
    let user = file(policy::user_file());
    let project = worktree
        .as_ref()
        .map(|w| file(Some(w.join(policy::PROJECT_FILE))));
    if args {
        let words: Vec<String> = policy::sandbox_args(&eff)
            .iter()
            .map(|a| shofer_exec::setup::quote(&a.to_string_lossy()))
            .collect();
        return End::Jobs(Ok(words.join(" ")));
    }
    let rows = eff.rows();
    if json {
        let settings: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|r| {
                (
                    r.key.to_string(),
                    serde_json::json!({"value": r.value, "origin": r.origin}),
                )
            })
            .collect();
        let v = serde_json::json!({
            "user_file": user,
            "project_file": project,
            "settings": settings,
        });
        return End::Jobs(Ok(v.to_string()));
    }
    let mut out = format!("user file:    {user}\n");
    match &project {
        Some(p) => out.push_str(&format!("project file: {p}\n")),
        None => out.push_str("project file: (no --worktree)\n"),
    }
    let width = rows.iter().map(|r| r.key.len()).max().unwrap_or(0);
    let vwidth = rows
        .iter()
        .map(|r| r.value.len())
        .max()
        .unwrap_or(0)
        .min(40);
    for r in &rows {
        out.push_str(&format!(
            "\n{:width$}  {:vwidth$}  {}",
            r.key, r.value, r.origin
        ));
    }
    End::Jobs(Ok(out))
}

#[allow(clippy::too_many_arguments)]
fn run(
    worktree: Option<PathBuf>,
    cwd: Option<String>,
    sandbox: SandboxOpts,
    timeout: Option<f64>,
    hard_timeout: Option<f64>,
    preview: PreviewSize,
    artifacts: Option<PathBuf>,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    command: String,
) -> End {
    // Stage 1: settings, no syscalls beyond reading the environment.
    if let Err(m) = artifacts.clone().map_or_else(default_artifacts, Ok) {
        return End::Usage(m);
    }
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
    let eff = match effective_policy(
        worktree.is_some().then_some(task_cwd.as_path()),
        &sandbox,
        timeout,
        hard_timeout,
        true,
    ) {
        Ok(eff) => eff,
        Err(end) => return *end,
    };
    let timeout = eff.soft_timeout.as_ref().map(|v| v.value);
    let hard_timeout = eff.hard_timeout.as_ref().map(|v| v.value);
    let artifacts = match artifacts_dir(artifacts, worktree.is_some().then_some(&task_cwd), true) {
        Ok(a) => a,
        Err(m) => return End::CouldNotRun(m),
    };
    let mut config = EngineConfig::new(task_cwd, artifacts);
    config.preview = preview;
    config.hard_timeout = hard_timeout
        .filter(|s| s.is_finite() && *s > 0.0)
        // Too large for a Duration (e.g. 1e300): as good as no timeout.
        .and_then(|s| Duration::try_from_secs_f64(s).ok());
    config.subreaper = true;
    config.env = env;
    // One-shot: what the command leaves running is stopped when its main process exits.
    config.background = Background::Stop;
    let grace = config.kill_grace;
    if worktree.is_some() {
        match Sandbox::locate(&config.task_cwd) {
            Ok(mut sb) => {
                sb.extra_args.extend(policy::sandbox_args(&eff));
                config.sandbox = Some(sb);
            }
            Err(e) => return End::CouldNotRun(e.to_string()),
        }
    }
    if timeout.is_some_and(|t| t > 0.0) {
        return run_detached(config, command, cwd, timeout);
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

/// A signal that should abort the command: SIGINT, SIGTERM or SIGHUP (the number), once.
async fn abort_signal() -> i32 {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(mut int), Ok(mut term), Ok(mut hup)) => tokio::select! {
            _ = int.recv() => libc::SIGINT,
            _ = term.recv() => libc::SIGTERM,
            _ = hup.recv() => libc::SIGHUP,
        },
        _ => std::future::pending().await,
    }
}

/// `shofer run --timeout`: the command runs in a detached supervisor (see
/// [`shofer_exec::detach`]); this process prints its first result.
fn run_detached(
    config: EngineConfig,
    command: String,
    cwd: Option<String>,
    timeout: Option<f64>,
) -> End {
    let budget = config.preview.budget();
    // No thread and no runtime exist yet: fork is safe here.
    let pipe = match detach::fork_supervisor() {
        Ok(Forked::Supervisor(pipe)) => {
            supervise(config, command, cwd, timeout, pipe, budget);
            std::process::exit(0);
        }
        Ok(Forked::Cli(pipe)) => pipe,
        Err(e) => return End::CouldNotRun(format!("cannot start the supervisor: {e}")),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return End::CouldNotRun(format!("cannot start the runtime: {e}")),
    };
    rt.block_on(async move {
        // First line: the supervisor's pid (so a signal to us can reach it); second: the result.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(pipe).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        });
        let mut supervisor: Option<i32> = None;
        let mut got_signal = 0;
        let sig = abort_signal();
        tokio::pin!(sig);
        loop {
            tokio::select! {
                line = rx.recv() => {
                    let Some(line) = line else {
                        return End::CouldNotRun("the supervisor ended without a result".into());
                    };
                    if let Some(pid) = line.strip_prefix("pid ") {
                        supervisor = pid.parse().ok();
                        continue;
                    }
                    if let Some(e) = line.strip_prefix("error ") {
                        return End::CouldNotRun(e.to_string());
                    }
                    return match serde_json::from_str::<Outcome>(&line) {
                        Ok(o) if got_signal != 0 => End::Interrupted(o, got_signal),
                        Ok(mut o) => {
                            if o.status == Status::Running {
                                o.text = detached_text(&o.text, o.id);
                            }
                            End::Ran(o)
                        }
                        Err(e) => End::CouldNotRun(format!("the supervisor's result is unreadable: {e}")),
                    };
                }
                s = &mut sig, if got_signal == 0 => {
                    got_signal = s;
                    // The supervisor aborts the command and sends that result.
                    if let Some(pid) = supervisor {
                        // Safety: plain kill(2) of the supervisor we just forked; it cannot have
                        // been reaped and recycled while its pipe end is still open to us.
                        unsafe { libc::kill(pid, libc::SIGTERM) };
                    }
                }
            }
        }
    })
}

/// The still-running text plus where the detached command can be found, before its last line.
fn detached_text(running: &str, id: u64) -> String {
    let note = format!(
        "It keeps running detached from shofer run: `shofer status {id}` shows its output so far, `shofer kill {id}` stops it, `shofer list` lists such commands."
    );
    match running.rsplit_once('\n') {
        Some((body, last)) => format!("{body}\n{note}\n{last}"),
        None => format!("{running}\n{note}"),
    }
}

/// The detached supervisor's life: run the command, send the first result, and if it went to
/// the background keep its state file until it ends.
fn supervise(
    mut config: EngineConfig,
    command: String,
    cwd: Option<String>,
    timeout: Option<f64>,
    mut pipe: std::fs::File,
    budget: usize,
) {
    let _ = writeln!(pipe, "pid {}", std::process::id());
    let artifacts = config.artifacts_dir.clone();
    let grace = config.kill_grace;
    config.subreaper = true;
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        let _ = writeln!(pipe, "error cannot start the supervisor's runtime");
        return;
    };
    let record = artifacts.clone();
    let last = rt.block_on(async move {
        let artifacts = record;
        let engine = match Engine::new(config) {
            Ok(e) => e,
            Err(e) => {
                let _ = writeln!(pipe, "error {e}");
                return None;
            }
        };
        let abort = CancellationToken::new();
        let sig = abort_signal();
        tokio::pin!(sig);
        let req = ExecRequest {
            command,
            cwd,
            timeout,
            abort: Some(abort.clone()),
        };
        let exec = engine.execute(req);
        tokio::pin!(exec);
        let first = tokio::select! {
            r = &mut exec => r,
            _ = &mut sig => {
                abort.cancel();
                exec.await
            }
        };
        let first = match first {
            Ok(o) => o,
            Err(e) => {
                let _ = writeln!(pipe, "error {e}");
                return None;
            }
        };
        if first.status != Status::Running {
            detach::send_result(pipe, &first);
            return None;
        }
        // Detached from here on: the state file is how later invocations find the command.
        let _ = JobState::of(&first, budget).save(&artifacts);
        detach::send_result(pipe, &first);
        let last = tokio::select! {
            o = engine.wait(first.id) => o,
            _ = &mut sig => engine.terminate(first.id).await,
        };
        if let Some(o) = &last {
            let _ = JobState::of(o, budget).save(&artifacts);
        }
        // Dropping the engine (at the end of this block) kills whatever is left of the tree.
        last
    });
    // Then everything else below us, as `shofer run` does at its end: a detached orphan the
    // tree scan never saw (`setsid env -i daemon &` whose shell exited first) was reparented
    // to this subreaper. Nothing outlives the detached command either, and its record names
    // what was stopped.
    let stopped = tree::names_below_us();
    tree::kill_everything_below_us(grace);
    if let (Some(mut o), false) = (last, stopped.is_empty()) {
        o.background.extend(stopped);
        let _ = JobState::of(&o, budget).save(&artifacts);
    }
}

fn jobs(
    artifacts: Option<PathBuf>,
    f: impl FnOnce(&std::path::Path) -> Result<String, String>,
) -> End {
    match artifacts_dir(artifacts, None, false) {
        Ok(a) => End::Jobs(f(&a)),
        Err(m) => End::Jobs(Err(m)),
    }
}

fn list_jobs(artifacts: &std::path::Path) -> Result<String, String> {
    let list: Vec<serde_json::Value> = detach::list(artifacts)
        .map_err(|e| e.to_string())?
        .iter()
        .map(|j| {
            serde_json::json!({
                "id": j.outcome.id,
                "command": j.outcome.command,
                "cwd": j.outcome.cwd,
                "status": j.status_word(),
                "exit_code": j.outcome.exit_code,
                "signal": j.outcome.signal,
                "artifact_id": j.outcome.artifact_id,
                "background": j.outcome.background,
            })
        })
        .collect();
    let v = serde_json::json!({ "commands": list });
    Ok(serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string()))
}

fn no_job(artifacts: &std::path::Path, id: u64, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        format!(
            "no detached command with id {id} in {} (`shofer list` shows them)",
            artifacts.display()
        )
    } else {
        format!("command {id}: {e}")
    }
}

fn status_job(artifacts: &std::path::Path, id: u64) -> Result<String, String> {
    let job = JobState::load(artifacts, id).map_err(|e| no_job(artifacts, id, &e))?;
    Ok(detach::status_text(artifacts, &job))
}

fn kill_jobs(artifacts: &std::path::Path, id: Option<u64>, all: bool) -> Result<String, String> {
    let ids: Vec<u64> = match (id, all) {
        (Some(id), _) => vec![id],
        (None, _) => detach::list(artifacts)
            .map_err(|e| e.to_string())?
            .iter()
            .filter(|j| j.status_word() == "running")
            .map(|j| j.outcome.id)
            .collect(),
    };
    if ids.is_empty() {
        return Ok("No detached command is running.".into());
    }
    let mut out = Vec::new();
    for id in ids {
        // The supervisor's tree kill takes at most its grace plus a few seconds.
        let job = detach::kill(artifacts, id, Duration::from_secs(15))
            .map_err(|e| no_job(artifacts, id, &e))?;
        out.push(match job.outcome.status {
            Status::Running => format!(
                "Command {id} ({}) did not stop in time.",
                job.outcome.command
            ),
            _ => format!(
                "Command {id} ({}) is {}.\n\n{}",
                job.outcome.command,
                job.status_word(),
                job.outcome.text
            ),
        });
    }
    Ok(out.join("\n\n"))
}

fn read(
    id: &str,
    search: Option<&str>,
    offset: i64,
    limit: i64,
    artifacts: Option<PathBuf>,
) -> End {
    let dir = match artifacts_dir(artifacts, None, false) {
        Ok(a) => a,
        Err(m) => return End::ReadFailed(m),
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

/// `shofer serve --project`: the git worktree around the current directory, found without
/// running git; never one holding the home directory, `/`, or one below `/tmp`
/// (`shofer_exec::setup::project`).
fn project_worktree(worktree: Option<PathBuf>, project: bool) -> Result<Option<PathBuf>, String> {
    if !project {
        return Ok(worktree);
    }
    let here =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    shofer_exec::setup::project::worktree_of(&here, home.as_deref())
        .map(Some)
        .map_err(|e| format!("--project: {e}"))
}

/// `shofer serve`: settings first (no syscalls but the directory checks), then the server.
#[allow(clippy::too_many_arguments)]
fn serve_cmd(
    worktree: Option<PathBuf>,
    cwd: Option<PathBuf>,
    sandbox: SandboxOpts,
    artifacts: Option<PathBuf>,
    preview: PreviewSize,
    hard_timeout: Option<f64>,
    timeout_allowlist: Vec<String>,
    keep_artifacts: bool,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
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
    let eff = match effective_policy(
        worktree.as_ref().map(|w| here.join(w)).as_deref(),
        &sandbox,
        None,
        hard_timeout,
        true,
    ) {
        Ok(eff) => eff,
        Err(end) => return *end,
    };
    let hard_timeout = match eff
        .hard_timeout
        .as_ref()
        .map(|v| v.value)
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
    config.env = env;
    if let Some(w) = &worktree {
        match Sandbox::locate(&here.join(w)) {
            Ok(mut sb) => {
                sb.extra_args.extend(policy::sandbox_args(&eff));
                config.sandbox = Some(sb);
            }
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
