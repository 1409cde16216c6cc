//! The engine: runs commands, races their timeouts, keeps a registry of them, and reads their
//! artifacts (ARCHITECTURE §3.1).
//!
//! One [`Engine`] serves one task: it has a task working directory, an artifact directory and
//! the user's settings ([`EngineConfig`]). [`Engine::execute`] spawns `/bin/sh -c <command>`
//! (inside `shofer-sandbox <worktree> --` when a [`Sandbox`] is configured) as the leader of
//! a new session (no controlling terminal; stdin `/dev/null`; `LANG`/`LC_ALL` `C.UTF-8`; the
//! non-interactive environment of [`crate::childenv`]; no descriptor above 2 of ours;
//! `SHOFER_EXEC_TAG` set, see [`TAG_VAR`]), pumps its merged output through an
//! [`Interceptor`](crate::intercept::Interceptor) (control bytes stripped, artifact created at
//! the start), and returns when the first of these happens:
//! - the main process exits (plus a bounded drain of the pipe): the inline or persisted text;
//!   descendants still running then are stopped and named ([`Background::Stop`]) or stay part
//!   of the command ([`Background::Keep`]: named in the result, listed, their output still
//!   flowing into the artifact). Under the sandbox, `--keep-descendants --status-fd 3` makes
//!   the sandbox wait for them and report the main process's exit;
//! - the soft (agent) timeout of the request: the output so far and the artifact id, the
//!   command keeps running in the background, registered, killable with [`Engine::terminate`];
//! - the abort token is cancelled: the tree is killed,
//!   [`ABORTED_TEXT`](shofer_core::text::ABORTED_TEXT) plus the output so far.
//!
//! The hard (user) timeout runs in the command's supervisor task, independent of the call: it
//! kills the tree even after the command went to the background, unless the command starts
//! with a prefix on the allowlist; its text keeps the output too. A sandboxed command that
//! failed with a refused write outside the writable set gets the hint of
//! [`shofer_core::denial`].
//!
//! Past the artifact cap ([`EngineConfig::max_artifact_bytes`]) a command no call waits for any
//! more (past its soft timeout, or the background processes of one that exited) is read
//! throttled, so that a runaway writer (`yes &`) blocks instead of burning CPU (see
//! `crate::pump`); [`Engine::take_notices`] gives the note that tells the agent, once.
//!
//! Every command stays in the registry ([`Engine::list`]) while it or a process it left behind
//! runs; finished ones are compact (their result text, no buffers or descriptors) and only the
//! latest [`MAX_FINISHED_RECORDS`] of them are kept (their artifacts stay on disk and
//! readable). Dropping the last clone of the engine kills every command's tree, including the
//! leftover background processes of commands that already exited.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use shofer_core::artifact::next_unique;
use shofer_core::denial::{denial_hint, proxy_hint};
use shofer_core::preview::PreviewSize;
use shofer_core::text::{self, ExitStatus, KilledOutput, Persisted};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::childenv;
use crate::intercept::{Intercepted, Interceptor, Spill};
use crate::pump::{self, PumpCtl};
use crate::reader::{self, ReadError, ReadRequest};
use crate::tree::{self, Tree};

/// The last execution id handed out in this process.
static LAST_ID: AtomicU64 = AtomicU64::new(0);

/// How often the tree of an exited command that left background processes is rescanned
/// (to reap their zombies once they exit).
const LEFTOVER_RESCAN: Duration = Duration::from_millis(500);

/// The default cap of one artifact: 4 GiB.
pub const DEFAULT_MAX_ARTIFACT_BYTES: u64 = 4 << 30;

/// How many finished commands (with no process left) the registry keeps; past it the oldest
/// are forgotten, so a long session's memory is bounded by what runs, not by its history.
pub const MAX_FINISHED_RECORDS: usize = 1000;

/// The environment variable every command inherits, `<engine pid>-<execution id>`; the tree
/// scan finds escaped descendants by it.
pub const TAG_VAR: &str = "SHOFER_EXEC_TAG";

/// The sandbox wrapper for worktree tasks: commands run as
/// `<binary> [extra_args] <worktree> -- /bin/sh -c <command>`.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The `shofer-sandbox` binary.
    pub binary: PathBuf,
    /// The worktree the command may write to.
    pub worktree: PathBuf,
    /// Options passed before the worktree (e.g. `--allow-write /x`). Default none.
    pub extra_args: Vec<OsString>,
}

impl Sandbox {
    /// Finds `shofer-sandbox`: the `SHOFER_SANDBOX` environment variable if set (it must name
    /// an executable file), else the file next to the current executable, else the first
    /// executable `shofer-sandbox` on `PATH`. Both paths are made absolute.
    ///
    /// # Errors
    /// [`ExecError::SandboxNotFound`] when none is found: a worktree task never runs
    /// unsandboxed.
    pub fn locate(worktree: &Path) -> Result<Sandbox, ExecError> {
        let mut tried = Vec::new();
        let found = if let Some(p) = std::env::var_os("SHOFER_SANDBOX") {
            let p = PathBuf::from(p);
            tried.push(format!("SHOFER_SANDBOX={}", p.display()));
            is_executable(&p).then_some(p)
        } else {
            let next = std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(|d| d.join("shofer-sandbox")));
            if let Some(n) = &next {
                tried.push(n.display().to_string());
            }
            next.filter(|n| is_executable(n)).or_else(|| {
                tried.push("PATH".to_string());
                std::env::var_os("PATH").and_then(|path| {
                    std::env::split_paths(&path)
                        .map(|d| d.join("shofer-sandbox"))
                        .find(|p| is_executable(p))
                })
            })
        };
        match found {
            // Absolute paths: the child changes directory before exec, and the sandbox gets
            // the worktree while already inside it.
            Some(binary) => Ok(Sandbox {
                binary: std::path::absolute(&binary).unwrap_or(binary),
                worktree: std::path::absolute(worktree).unwrap_or_else(|_| worktree.to_path_buf()),
                extra_args: Vec::new(),
            }),
            None => Err(ExecError::SandboxNotFound {
                tried: tried.join(", "),
            }),
        }
    }
}

impl Sandbox {
    /// The places a command sandboxed in `worktree` may write besides `--allow-write` paths,
    /// `tmpdir` being its `$TMPDIR`: the worktree and the directories of the sandbox's default
    /// writable set ([`shofer_core::policy::default_writable_dirs`]: `/tmp`, `$TMPDIR`,
    /// `/dev/shm`).
    pub fn default_writable(worktree: &Path, tmpdir: Option<&Path>) -> Vec<PathBuf> {
        let mut w = vec![worktree.to_path_buf()];
        w.extend(shofer_core::policy::default_writable_dirs(tmpdir));
        w
    }

    /// The directories a command under this sandbox may write: [`Sandbox::default_writable`]
    /// and every `--allow-write DIR` among the extra arguments. `env`: the caller's explicit
    /// variables ([`EngineConfig::env`]), which set the command's `$TMPDIR` as they set the
    /// sandbox's.
    pub fn writable(&self, env: &[(OsString, OsString)]) -> Vec<String> {
        let tmpdir = childenv::var(env, "TMPDIR").map(PathBuf::from);
        let mut w: Vec<String> = Self::default_writable(&self.worktree, tmpdir.as_deref())
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let mut args = self.extra_args.iter();
        while let Some(a) = args.next() {
            if a == "--allow-write" {
                if let Some(d) = args.next() {
                    w.push(d.to_string_lossy().into_owned());
                }
            } else if let Some(d) = a.to_str().and_then(|a| a.strip_prefix("--allow-write=")) {
                w.push(d.to_string());
            }
        }
        w
    }

    /// Whether the sandbox's options say `--net proxy`.
    pub fn proxied(&self) -> bool {
        let mut args = self.extra_args.iter();
        while let Some(a) = args.next() {
            if a == "--net=proxy" || (a == "--net" && args.next().is_some_and(|v| v == "proxy")) {
                return true;
            }
        }
        false
    }
}

impl Sandbox {
    /// The secret locations the sandbox hides from commands, by name (for the denial hint):
    /// [`shofer_core::secretpaths`]'s default set for the same users the sandbox takes
    /// ([`shofer_core::secretpaths::users`]), without the `--allow-read` paths and with the
    /// `--hide` ones among the extra arguments. Which of them exist is not looked up.
    pub fn secret_locations(&self) -> Vec<String> {
        use shofer_core::secretpaths;
        use std::os::unix::fs::MetadataExt;
        let users = secretpaths::users(
            |n| std::env::var_os(n).map(PathBuf::from),
            rustix::process::getuid().as_raw(),
            rustix::process::geteuid().is_root(),
            &std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
            |uid, home| std::fs::metadata(home).is_ok_and(|m| m.is_dir() && m.uid() == uid),
        );
        let flag = |name: &str| -> Vec<PathBuf> {
            let mut out = Vec::new();
            let mut args = self.extra_args.iter();
            while let Some(a) = args.next() {
                if a == name {
                    out.extend(args.next().map(PathBuf::from));
                }
            }
            out
        };
        let set = secretpaths::default_set(&users);
        secretpaths::adjust(set, &flag("--allow-read"), &flag("--hide"))
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    /// The `--keep-env NAME` globs among the extra arguments.
    pub fn keep_env(&self) -> Vec<OsString> {
        let mut keep = Vec::new();
        let mut args = self.extra_args.iter();
        while let Some(a) = args.next() {
            if a == "--keep-env" {
                keep.extend(args.next().cloned());
            } else if let Some(k) = a.to_str().and_then(|a| a.strip_prefix("--keep-env=")) {
                keep.push(k.into());
            }
        }
        keep
    }

    /// The inherited variables this sandbox withholds from every command
    /// ([`shofer_core::secretenv`]): secret names that no `--keep-env` glob keeps and the
    /// caller does not set explicitly (`env`, which the command gets). Names only, sorted.
    pub fn withheld(&self, env: &[(OsString, OsString)]) -> Vec<OsString> {
        use std::os::unix::ffi::OsStrExt;
        let keep = self.keep_env();
        let keep: Vec<&[u8]> = keep.iter().map(|k| k.as_bytes()).collect();
        let mut names: Vec<OsString> = std::env::vars_os()
            .map(|(k, _)| k)
            .filter(|k| !env.iter().any(|(e, _)| e == k))
            .filter(|k| shofer_core::secretenv::withheld(k.as_bytes(), &keep))
            .collect();
        names.sort();
        names
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The engine's settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The task's working directory: relative request cwds resolve against it.
    pub task_cwd: PathBuf,
    /// Where artifacts `cmd-<id>.txt` go (created 0700 on first spill).
    pub artifacts_dir: PathBuf,
    /// Preview budget. Default medium (10240 bytes).
    pub preview: PreviewSize,
    /// The user's hard timeout; `None` (default) = none.
    pub hard_timeout: Option<Duration>,
    /// Commands starting with one of these prefixes (after leading whitespace) are exempt
    /// from the hard timeout. Default empty.
    pub hard_timeout_allowlist: Vec<String>,
    /// SIGTERM-to-SIGKILL grace of a tree kill. Default 250 ms; 0 = SIGKILL at once.
    pub kill_grace: Duration,
    /// Longest drain of the pipe after the main process exits. Default 2 s.
    pub drain_max: Duration,
    /// The drain also ends after this much silence. Default 200 ms.
    pub drain_idle: Duration,
    /// Run commands inside this sandbox. Default none.
    pub sandbox: Option<Sandbox>,
    /// Most bytes of one command's output stored in its artifact; past it the output is
    /// counted but not stored, and the result says so; a command no call waits for any more
    /// is then read throttled ([`Engine::take_notices`] tells of it). Default
    /// [`DEFAULT_MAX_ARTIFACT_BYTES`].
    pub max_artifact_bytes: u64,
    /// Make this process a child subreaper on engine creation (see [`crate::tree`]).
    /// Default false; set it when the engine owns its process (the `shofer` binary does).
    pub subreaper: bool,
    /// Environment variables the caller sets explicitly: they win over the engine's
    /// non-interactive defaults ([`crate::childenv`]). Default none.
    pub env: Vec<(OsString, OsString)>,
    /// What happens to descendants still running when a command's main process exits.
    /// Default [`Background::Keep`].
    pub background: Background,
}

/// What becomes of a command's descendants that outlive its main process (`server &`,
/// `nohup x &`, `setsid daemon`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Background {
    /// They stay part of the command (`shofer serve`): the result says
    /// `K background process(es) still running (names)`, their output keeps flowing into the
    /// command's artifact, and [`Engine::terminate`] or dropping the engine stops them.
    #[default]
    Keep,
    /// They are killed when the main process exits (one-shot `shofer run`), and the result
    /// names them.
    Stop,
}

impl EngineConfig {
    /// Defaults for a task in `task_cwd` spilling into `artifacts_dir`.
    pub fn new(task_cwd: impl Into<PathBuf>, artifacts_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            task_cwd: task_cwd.into(),
            artifacts_dir: artifacts_dir.into(),
            preview: PreviewSize::Medium,
            hard_timeout: None,
            hard_timeout_allowlist: Vec::new(),
            kill_grace: Duration::from_millis(250),
            drain_max: Duration::from_secs(2),
            drain_idle: Duration::from_millis(200),
            sandbox: None,
            max_artifact_bytes: DEFAULT_MAX_ARTIFACT_BYTES,
            subreaper: false,
            env: Vec::new(),
            background: Background::Keep,
        }
    }
}

/// Errors of [`Engine::execute`] (and [`Engine::new`]). `Display` is the text for the model.
#[derive(Debug)]
#[non_exhaustive]
pub enum ExecError {
    /// The working directory does not exist (checked before spawning).
    MissingCwd {
        /// The resolved directory.
        dir: PathBuf,
    },
    /// No `shofer-sandbox` binary was found for a worktree task.
    SandboxNotFound {
        /// Where it was looked for.
        tried: String,
    },
    /// `spawn` (fork/exec) failed.
    Spawn {
        /// The program.
        program: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Creating the output pipe or the pump thread failed.
    Pipe(std::io::Error),
    /// `prctl(PR_SET_CHILD_SUBREAPER)` failed.
    Subreaper(std::io::Error),
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecError::MissingCwd { dir } => f.write_str(&text::missing_cwd_text(&dir.display().to_string())),
            ExecError::SandboxNotFound { tried } => write!(
                f,
                "shofer-sandbox not found (looked at: {tried}); set SHOFER_SANDBOX or install it next to shofer. The command was not run: a worktree task never runs unsandboxed."
            ),
            ExecError::Spawn { program, source } => write!(f, "Could not start {}: {source}", program.display()),
            ExecError::Pipe(e) => write!(f, "Could not set up the command's output pipe: {e}"),
            ExecError::Subreaper(e) => write!(f, "prctl(PR_SET_CHILD_SUBREAPER) failed: {e}"),
        }
    }
}

impl std::error::Error for ExecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ExecError::Spawn { source, .. }
            | ExecError::Pipe(source)
            | ExecError::Subreaper(source) => Some(source),
            _ => None,
        }
    }
}

/// A command's state in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Still running (its main process has not exited).
    Running,
    /// Exited on its own (any code, or a signal not sent by the engine).
    Exited,
    /// Killed by [`Engine::terminate`] or an abort.
    Terminated,
    /// Killed by the hard timeout.
    TimedOut,
}

/// Why the engine killed a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillReason {
    Terminate,
    Abort,
    HardTimeout,
}

/// What the engine tells about one command: the result of [`Engine::execute`], the first
/// result a detached command's supervisor sends, and (with its supervisor) the record of a
/// detached command ([`crate::detach::JobState`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The execution id.
    pub id: u64,
    /// The command line.
    pub command: String,
    /// The resolved working directory.
    pub cwd: String,
    /// Its state now.
    pub status: Status,
    /// The exit code, once exited with one.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// The artifact id, once the output spilled.
    pub artifact_id: Option<String>,
    /// The artifact's path, once the output spilled. (Not in a job record: none when read
    /// from one.)
    #[serde(default)]
    pub artifact_path: Option<PathBuf>,
    /// Bytes of output so far (terminal control bytes stripped). (Not in a job record: 0 when
    /// read from one.)
    #[serde(default)]
    pub total_bytes: u64,
    /// Names of the descendants still running after the main process exited (with
    /// [`Background::Keep`]), or stopped then (with [`Background::Stop`]).
    pub background: Vec<String>,
    /// The result text for the model (ARCHITECTURE §3.3).
    pub text: String,
}

/// The final state of a finished command.
#[derive(Debug, Clone)]
struct Final {
    status: Status,
    exit: ExitStatus,
    intercepted: Intercepted,
    background: Vec<String>,
    text: String,
}

#[derive(Debug)]
struct Record {
    id: u64,
    command: String,
    cwd: String,
    tree: Tree,
    interceptor: Arc<Mutex<Interceptor>>,
    pump: Arc<PumpCtl>,
    kill_reason: Mutex<Option<KillReason>>,
    /// A pidfd of the main process, opened before it could be reaped: a handle on its process
    /// group (the command's session) that no recycled pid can alias, for signalling the whole
    /// group in one call ([`tree::signal_groups`]). Dropped once the tree is gone, so open
    /// descriptors follow what is running.
    group: Mutex<Option<OwnedFd>>,
    done: watch::Sender<Option<Final>>,
    hard_timeout_secs: Option<f64>,
    /// Finished and no process of its tree left: may be forgotten past the cap.
    settled: std::sync::atomic::AtomicBool,
    /// The agent was told that its output is read throttled ([`Engine::take_notices`]).
    throttle_told: std::sync::atomic::AtomicBool,
}

impl Record {
    fn snapshot(&self) -> Outcome {
        let fin = self.done.borrow().clone();
        match fin {
            Some(f) => self.outcome_from(&f),
            None => {
                let snap = {
                    let mut i = self.interceptor.lock().unwrap_or_else(|e| e.into_inner());
                    // The agent may be shown the artifact id now: keep the file.
                    i.keep_artifact();
                    i.snapshot()
                };
                let so_far = match snap.spill {
                    Spill::Inline => text::compress_output(&snap.preview.text),
                    _ => snap.preview.text.clone(),
                };
                let (artifact_id, artifact_path) = artifact_of(&snap, &self.interceptor);
                let note = artifact_id
                    .as_ref()
                    .map(|id| text::running_artifact_note(id, snap.preview.total))
                    .unwrap_or_default();
                let txt = text::running_result_noted(&self.cwd, &so_far, &note);
                Outcome {
                    id: self.id,
                    command: self.command.clone(),
                    cwd: self.cwd.clone(),
                    status: Status::Running,
                    exit_code: None,
                    signal: None,
                    artifact_id,
                    artifact_path,
                    total_bytes: snap.preview.total,
                    background: Vec::new(),
                    text: txt,
                }
            }
        }
    }

    fn outcome_from(&self, f: &Final) -> Outcome {
        let (exit_code, signal) = match f.exit {
            ExitStatus::Code(c) => (Some(c), None),
            ExitStatus::Signal { signal, .. } => (None, Some(signal)),
        };
        let (artifact_id, artifact_path) = artifact_of(&f.intercepted, &self.interceptor);
        Outcome {
            id: self.id,
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            status: f.status,
            exit_code,
            signal,
            artifact_id,
            artifact_path,
            total_bytes: f.intercepted.preview.total,
            background: f.background.clone(),
            text: f.text.clone(),
        }
    }

    async fn wait_final(&self) -> Final {
        let mut rx = self.done.subscribe();
        loop {
            if let Some(f) = rx.borrow_and_update().clone() {
                return f;
            }
            if rx.changed().await.is_err() {
                // The supervisor is gone without a result (runtime shut down): report what we have.
                let snap = self
                    .interceptor
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .snapshot();
                return Final {
                    status: Status::Terminated,
                    exit: ExitStatus::from_signal(9, false),
                    intercepted: snap,
                    background: Vec::new(),
                    text: text::ABORTED_TEXT.to_string(),
                };
            }
        }
    }

    fn is_running(&self) -> bool {
        self.done.borrow().is_none()
    }
}

fn artifact_of(
    i: &Intercepted,
    interceptor: &Mutex<Interceptor>,
) -> (Option<String>, Option<PathBuf>) {
    let id = match (&i.spill, &i.artifact) {
        (
            Spill::Complete(id)
            | Spill::Failed {
                artifact: Some(id), ..
            },
            _,
        )
        | (Spill::Inline, Some(id)) => id,
        _ => return (None, None),
    };
    let path = interceptor
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .artifact_path();
    (Some(id.to_string()), Some(path))
}

#[derive(Debug)]
struct Inner {
    config: EngineConfig,
    records: Mutex<BTreeMap<u64, Arc<Record>>>,
    /// Every process below us was killed ([`Engine::terminate_everything_below_us`]).
    swept: std::sync::atomic::AtomicBool,
}

impl Inner {
    /// Every record now, oldest first.
    fn all_records(&self) -> Vec<Arc<Record>> {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let records = self.all_records();
        // After `terminate_everything_below_us` no process below us is left to kill, and a
        // scan per tree would only delay the server's exit.
        if !self.swept.load(Ordering::SeqCst) {
            let trees: Vec<&Tree> = records.iter().map(|r| &r.tree).collect();
            tree::kill_trees(&trees, self.config.kill_grace);
        }
        for r in &records {
            r.pump.stop();
        }
    }
}

/// A command to run.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    /// The shell command line (`/bin/sh -c`).
    pub command: String,
    /// Working directory: absolute, or relative to the task cwd; `None` = the task cwd.
    pub cwd: Option<String>,
    /// Soft (agent) timeout in seconds; `None` or ≤ 0 = wait for completion.
    pub timeout: Option<f64>,
    /// Cancelling this token aborts the command (kills its tree).
    pub abort: Option<CancellationToken>,
}

/// The command engine. Cheap to clone (shared); dropping the last clone kills every command's
/// tree. [`Engine::execute`] needs a tokio runtime with the IO and time drivers (tokio's
/// `process` support runs on the IO driver): build it with `enable_all()`.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl Engine {
    /// An engine with `config`; sets the child-subreaper flag when `config.subreaper`.
    ///
    /// # Errors
    /// [`ExecError::Subreaper`] when the flag cannot be set.
    pub fn new(config: EngineConfig) -> Result<Self, ExecError> {
        if config.subreaper {
            tree::enable_subreaper().map_err(ExecError::Subreaper)?;
        }
        // Said once per session (one `shofer run`, one `shofer serve`), names only; every
        // sandboxed command then runs without them (`configure_child`).
        if let Some(sb) = &config.sandbox {
            let withheld = sb.withheld(&config.env);
            if !withheld.is_empty() {
                let names: Vec<_> = withheld.iter().map(|n| n.to_string_lossy()).collect();
                eprintln!(
                    "shofer: note: secret variables withheld from the sandboxed commands: {} (keep one with --keep-env NAME)",
                    names.join(", ")
                );
            }
        }
        Ok(Engine {
            inner: Arc::new(Inner {
                config,
                records: Mutex::new(BTreeMap::new()),
                swept: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// The settings.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// A candidate for the next execution id: the time in milliseconds, made unique within
    /// the process (all engines share one counter). The interceptor then claims the artifact
    /// file with `O_EXCL`, moving on past ids that other processes hold.
    fn next_id() -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut last = LAST_ID.load(Ordering::SeqCst);
        loop {
            let id = next_unique(now, last);
            match LAST_ID.compare_exchange(last, id, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return id,
                Err(cur) => last = cur,
            }
        }
    }

    /// Resolves a request's cwd against the task cwd.
    pub fn resolve_cwd(&self, cwd: Option<&str>) -> PathBuf {
        match cwd {
            None => self.inner.config.task_cwd.clone(),
            Some("") => self.inner.config.task_cwd.clone(),
            Some(c) => self.inner.config.task_cwd.join(c),
        }
    }

    /// Runs a command (see the module docs for when it returns).
    ///
    /// # Errors
    /// [`ExecError::MissingCwd`] (nothing is spawned), [`ExecError::Spawn`], [`ExecError::Pipe`].
    ///
    /// # Cancel safety
    /// Dropping the future leaves the command running and registered, as a soft timeout does.
    pub async fn execute(&self, req: ExecRequest) -> Result<Outcome, ExecError> {
        let rec = self.spawn(&req)?;
        let soft = req
            .timeout
            .filter(|t| t.is_finite() && *t > 0.0)
            // Too large for a Duration (e.g. 1e300): as good as no timeout.
            .and_then(|t| Duration::try_from_secs_f64(t).ok());
        let abort = req.abort.clone().unwrap_or_default();
        tokio::select! {
            f = rec.wait_final() => Ok(rec.outcome_from(&f)),
            () = sleep_or_forever(soft) => {
                // No call waits on its output any more: past the artifact cap, it is read
                // throttled (see `crate::pump`).
                rec.pump.set_background();
                Ok(rec.snapshot())
            }
            () = abort.cancelled() => {
                self.kill(&rec, KillReason::Abort).await;
                Ok(rec.outcome_from(&rec.wait_final().await))
            }
        }
    }

    /// Starts the command and its supervisor task, and registers it: the artifact first (its
    /// claim fixes the id), then the pipes, the child ([`command_line`], [`configure_child`],
    /// [`child_prologue`]), the pump, the record ([`Engine::register`]) and [`supervise`].
    fn spawn(&self, req: &ExecRequest) -> Result<Arc<Record>, ExecError> {
        let cfg = &self.inner.config;
        let cwd = self.resolve_cwd(req.cwd.as_deref());
        if !cwd.is_dir() {
            return Err(ExecError::MissingCwd { dir: cwd });
        }
        // The artifact is created first: its O_EXCL claim fixes the execution id.
        let interceptor =
            Interceptor::create(&cfg.artifacts_dir, Self::next_id(), cfg.preview.budget())
                .with_cap(cfg.max_artifact_bytes);
        let id = interceptor.execution_id();
        LAST_ID.fetch_max(id, Ordering::SeqCst);
        let tag = format!("{}-{id}", shofer_sys::process::getpid());
        let pipes = Pipes::new(cfg)?;
        let status_w: Option<RawFd> = pipes.status.as_ref().map(|(_, w)| w.as_raw_fd());
        let (program, mut cmd) = command_line(cfg, &req.command, status_w.is_some());
        configure_child(&mut cmd, cfg, &cwd, &tag, pipes.stdout, pipes.stderr);
        // Safety: child_prologue makes only async-signal-safe system calls on the child's own
        // state and allocates nothing (see there).
        unsafe {
            cmd.pre_exec(move || child_prologue(status_w));
        }
        let spawned = cmd.spawn();
        // Close our copies of the pipe's write end now, or EOF could never come.
        drop(cmd);
        let status_r = pipes.status.map(|(r, _w)| r);
        let mut child = spawned.map_err(|source| ExecError::Spawn { program, source })?;
        let pid = child.id().map_or(0, |p| p as i32);
        // Not reaped before `child.wait()` is polled, so the pid is still this child's.
        let group = shofer_sys::pidfd::open(pid).ok().flatten();
        let tree = Tree::new(pid, tag);
        let interceptor = Arc::new(Mutex::new(interceptor));
        let (pump_ctl, pump_done) = match pump::start(pipes.output, Arc::clone(&interceptor)) {
            Ok(p) => p,
            Err(e) => {
                let _ = child.start_kill();
                return Err(ExecError::Pipe(e));
            }
        };
        let supervision = Supervision {
            hard: hard_timeout(cfg, &req.command),
            drain_max: cfg.drain_max,
            drain_idle: cfg.drain_idle,
            grace: cfg.kill_grace,
            background: cfg.background,
            writable: cfg.sandbox.as_ref().map(|sb| sb.writable(&cfg.env)),
            secrets: cfg
                .sandbox
                .as_ref()
                .map(Sandbox::secret_locations)
                .unwrap_or_default(),
            proxied: cfg.sandbox.as_ref().is_some_and(Sandbox::proxied),
        };
        let rec = self.register(Record {
            id,
            command: req.command.clone(),
            cwd: cwd.display().to_string(),
            tree,
            interceptor,
            pump: pump_ctl,
            kill_reason: Mutex::new(None),
            group: Mutex::new(group),
            done: watch::channel(None).0,
            hard_timeout_secs: supervision.hard.map(|d| d.as_secs_f64()),
            settled: std::sync::atomic::AtomicBool::new(false),
            throttle_told: std::sync::atomic::AtomicBool::new(false),
        });
        tokio::spawn(supervise(
            Arc::clone(&rec),
            child,
            pump_done,
            status_r,
            supervision,
            Arc::downgrade(&self.inner),
        ));
        Ok(rec)
    }

    /// Puts a new command's record in the registry.
    fn register(&self, rec: Record) -> Arc<Record> {
        let rec = Arc::new(rec);
        self.inner
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(rec.id, Arc::clone(&rec));
        rec
    }

    async fn kill(&self, rec: &Arc<Record>, reason: KillReason) {
        {
            let mut r = rec.kill_reason.lock().unwrap_or_else(|e| e.into_inner());
            if rec.is_running() && r.is_none() {
                *r = Some(reason);
            }
        }
        kill_blocking(rec, self.inner.config.kill_grace).await;
    }

    /// Kills the whole tree of command `id` (also the leftover background processes of a
    /// command that already exited) and waits for it to finish. Returns its outcome, or `None`
    /// for an unknown id.
    pub async fn terminate(&self, id: u64) -> Option<Outcome> {
        let rec = self
            .inner
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()?;
        self.kill(&rec, KillReason::Terminate).await;
        Some(rec.outcome_from(&rec.wait_final().await))
    }

    /// Kills every command's tree at once — running commands and the leftovers of finished
    /// ones — with one grace period for all ([`tree::kill_trees`]), then waits for the running
    /// ones to finish. Returns how many were still running. For the end of a session: 1,000
    /// background commands stop within the grace period and a few scans, not one by one.
    pub async fn terminate_all(&self) -> usize {
        self.terminate_with(|recs, grace| {
            let trees: Vec<&Tree> = recs.iter().map(|r| &r.tree).collect();
            tree::kill_trees(&trees, grace);
        })
        .await
    }

    /// Like [`Engine::terminate_all`], but the targets are every descendant of this process
    /// ([`tree::kill_groups_then_everything_below_us`]): each command's process group gets
    /// SIGTERM and, after the grace period, SIGKILL in one call per group with no `/proc`
    /// reads, then a sweep of every descendant (walks of `/proc`, no attribution to commands)
    /// finds what left its group. For a program that owns its process and made it a child
    /// subreaper ([`EngineConfig::subreaper`]), at its end: it also kills children the engine
    /// did not start. Returns how many commands were still running.
    pub async fn terminate_everything_below_us(&self) -> usize {
        let running = self
            .terminate_with(|recs, grace| {
                let groups: Vec<OwnedFd> = recs
                    .iter()
                    .filter_map(|r| r.group.lock().unwrap_or_else(|e| e.into_inner()).take())
                    .collect();
                let mut sessions: Vec<i32> = recs.iter().map(|r| r.tree.root_pid()).collect();
                sessions.sort_unstable();
                tree::kill_groups_then_everything_below_us(&groups, &sessions, grace);
            })
            .await;
        self.inner
            .swept
            .store(tree::everything_below_us_killed(), Ordering::SeqCst);
        running
    }

    /// Marks the running commands terminated, runs `kill(records, grace)` off the runtime's
    /// thread, then waits for the running commands' results (their processes are gone, so
    /// their pipes are at EOF and the drains end at once).
    async fn terminate_with(
        &self,
        kill: impl FnOnce(&[Arc<Record>], Duration) + Send + 'static,
    ) -> usize {
        let recs = self.inner.all_records();
        let mut running = 0;
        for r in &recs {
            let mut reason = r.kill_reason.lock().unwrap_or_else(|e| e.into_inner());
            if r.is_running() {
                running += 1;
                reason.get_or_insert(KillReason::Terminate);
            }
        }
        let grace = self.inner.config.kill_grace;
        let all = recs.clone();
        let _ = tokio::task::spawn_blocking(move || kill(&all, grace)).await;
        for r in &recs {
            r.wait_final().await;
        }
        running
    }

    /// The current outcome of command `id` (the still-running text while it runs).
    pub fn status(&self, id: u64) -> Option<Outcome> {
        self.inner
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .map(|r| r.snapshot())
    }

    /// Waits for command `id` to finish and returns its final outcome; `None` for an unknown id.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future changes nothing.
    pub async fn wait(&self, id: u64) -> Option<Outcome> {
        let rec = self
            .inner
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()?;
        Some(rec.outcome_from(&rec.wait_final().await))
    }

    /// The notes the agent has not been given yet, one per command whose output became
    /// throttled in the background at the artifact cap ([`text::throttled_note`], naming
    /// `terminate_command`); each is returned once. `shofer serve` adds them to its next tool
    /// result, whichever tool it is.
    pub fn take_notices(&self) -> Vec<String> {
        let cap = self.inner.config.max_artifact_bytes;
        self.inner
            .all_records()
            .iter()
            .filter(|r| !r.settled.load(Ordering::SeqCst) && r.pump.throttled())
            .filter(|r| !r.throttle_told.swap(true, Ordering::SeqCst))
            .map(|r| text::throttled_note(r.id, &r.command, cap))
            .collect()
    }

    /// Every command of the engine's life, oldest first; for a command that exited leaving
    /// background processes, [`Outcome::background`] names those still running now.
    pub fn list(&self) -> Vec<Outcome> {
        let recs = self.inner.all_records();
        recs.iter()
            .map(|r| {
                let mut o = r.snapshot();
                if o.status != Status::Running && !o.background.is_empty() {
                    // Those of its background processes that still run now.
                    o.background = background_of(&r.tree, false)
                        .into_iter()
                        .map(process_name)
                        .collect();
                }
                o
            })
            .collect()
    }

    /// Removes artifacts from the artifact directory: every `cmd-*` file when `keep` is
    /// `None` (the original host's `cleanup`, on task disposal), else the `cmd-<digits>.txt`
    /// files whose execution id is not in `keep` (`cleanupByIds`). Returns how many were removed.
    ///
    /// # Errors
    /// Reading the directory or removing a file failed.
    pub fn cleanup_artifacts(&self, keep: Option<&[u64]>) -> std::io::Result<usize> {
        let dir = &self.inner.config.artifacts_dir;
        match keep {
            None => crate::intercept::cleanup(dir),
            Some(ids) => crate::intercept::cleanup_by_ids(dir, ids),
        }
    }

    /// read_command_output against this engine's artifact directory (see [`crate::reader`]).
    ///
    /// # Errors
    /// [`ReadError`], whose text is the message for the model.
    pub async fn read(
        &self,
        artifact_id: String,
        search: Option<String>,
        offset: Option<i64>,
        limit: Option<i64>,
    ) -> Result<String, ReadError> {
        let dir = self.inner.config.artifacts_dir.clone();
        // Dropping this future (the client cancelled the call) stops a search in progress.
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let _stop_on_drop = SetOnDrop(Arc::clone(&cancel));
        tokio::task::spawn_blocking(move || {
            let req = ReadRequest {
                artifact_id: &artifact_id,
                search: search.as_deref(),
                offset: offset.unwrap_or(0),
                limit: limit.unwrap_or(reader::DEFAULT_LIMIT),
            };
            reader::read_output_cancellable(&dir, &req, &cancel)
        })
        .await
        .unwrap_or_else(|e| {
            Err(ReadError::Io {
                id: String::new(),
                source: std::io::Error::other(e),
            })
        })
    }
}

/// A command's descriptors, made before it is spawned.
struct Pipes {
    /// The read end of its merged output, for the pump.
    output: OwnedFd,
    /// Its stdout and stderr: two copies of the output's write end.
    stdout: OwnedFd,
    stderr: OwnedFd,
    /// `(read end, write end)` of the sandbox's `--status-fd 3` report, when the sandbox keeps
    /// background processes.
    status: Option<(OwnedFd, OwnedFd)>,
}

impl Pipes {
    fn new(cfg: &EngineConfig) -> Result<Pipes, ExecError> {
        let (output, stdout) = shofer_sys::fd::pipe_large().map_err(ExecError::Pipe)?;
        let stderr = stdout.try_clone().map_err(ExecError::Pipe)?;
        // Keeping background processes under the sandbox: it waits for them
        // (`--keep-descendants`) and reports the main process's exit on descriptor 3
        // (`--status-fd 3`), which is when the command is done.
        let status = match (&cfg.sandbox, cfg.background) {
            (Some(_), Background::Keep) => {
                Some(shofer_sys::fd::pipe_cloexec().map_err(ExecError::Pipe)?)
            }
            _ => None,
        };
        Ok(Pipes {
            output,
            stdout,
            stderr,
            status,
        })
    }
}

/// The program and its arguments: `/bin/sh -c <command>`, inside the sandbox when there is
/// one (`status_fd`: it reports the main process's exit on descriptor 3).
fn command_line(
    cfg: &EngineConfig,
    command: &str,
    status_fd: bool,
) -> (PathBuf, tokio::process::Command) {
    match &cfg.sandbox {
        None => {
            let mut c = tokio::process::Command::new("/bin/sh");
            c.arg("-c").arg(command);
            (PathBuf::from("/bin/sh"), c)
        }
        Some(sb) => {
            let mut c = tokio::process::Command::new(&sb.binary);
            if status_fd {
                c.args(["--keep-descendants", "--status-fd", "3"]);
            }
            c.args(&sb.extra_args);
            // A secret variable the caller sets explicitly (`--env K=V`) is meant for the
            // command: the sandbox keeps that name (a name with a glob character could keep
            // more, and is left to the sandbox's list).
            for (k, _) in &cfg.env {
                let name = k.as_encoded_bytes();
                if shofer_core::secretenv::secret_rule(name).is_some() && !name.contains(&b'*') {
                    c.arg("--keep-env").arg(k);
                }
            }
            c.arg(&sb.worktree)
                .arg("--")
                .arg("/bin/sh")
                .arg("-c")
                .arg(command);
            (sb.binary.clone(), c)
        }
    }
}

/// The child's working directory, standard descriptors (stdin `/dev/null`, stdout and stderr
/// the output pipe) and environment (`C.UTF-8`, [`childenv`], [`TAG_VAR`]).
fn configure_child(
    cmd: &mut tokio::process::Command,
    cfg: &EngineConfig,
    cwd: &Path,
    tag: &str,
    stdout: OwnedFd,
    stderr: OwnedFd,
) {
    cmd.current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .env("LANG", "C.UTF-8")
        .env("LC_ALL", "C.UTF-8");
    // The sandbox would withhold them too, and say so on the command's stderr each time:
    // the engine said it once (`Engine::new`).
    if let Some(sb) = &cfg.sandbox {
        for k in sb.withheld(&cfg.env) {
            cmd.env_remove(k);
        }
    }
    for (k, v) in childenv::changes(&cfg.env) {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.env(TAG_VAR, tag).kill_on_drop(false);
}

/// Runs in the child between fork and exec (async-signal-safe: system calls only, nothing
/// allocated). A new session (and so a new process group): no controlling terminal, as in
/// shofer-sandbox's supervisor, so the command cannot read or inject into the user's terminal
/// (TIOCSTI); and every process in this session is the command's, which the tree kill relies
/// on (see `tree`). `status_w`: the sandbox's status descriptor, made descriptor 3 and
/// inherited. Descriptors above that which the caller left open without close-on-exec (a
/// shell's `3<file`, a harness's pipes) must not reach the command: marked close-on-exec
/// here, so exec closes them (and std's own exec-error pipe keeps working).
fn child_prologue(status_w: Option<RawFd>) -> std::io::Result<()> {
    // Safety: setsid(2), fcntl(2) and dup2(2) on this process's own state, with integer
    // arguments; no memory of the parent is touched.
    let first_closed = unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        match status_w {
            Some(3) => {
                libc::fcntl(3, libc::F_SETFD, 0);
                4
            }
            Some(fd) => {
                if libc::dup2(fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                4
            }
            None => 3,
        }
    };
    shofer_sys::fd::close_from(first_closed, shofer_sys::fd::CloseFrom::Cloexec);
    Ok(())
}

/// The user's hard timeout for `command`, unless it starts with a prefix on the allowlist.
fn hard_timeout(cfg: &EngineConfig, command: &str) -> Option<Duration> {
    let exempt = cfg
        .hard_timeout_allowlist
        .iter()
        .any(|p| !p.is_empty() && command.trim_start().starts_with(p.as_str()));
    cfg.hard_timeout.filter(|_| !exempt)
}

/// What a command's supervisor task needs of the engine's settings.
struct Supervision {
    hard: Option<Duration>,
    drain_max: Duration,
    drain_idle: Duration,
    grace: Duration,
    background: Background,
    /// The sandbox's writable places, for the denial hint; `None` without a sandbox.
    writable: Option<Vec<String>>,
    /// The secret locations the sandbox hides, for the denial hint (empty without a sandbox).
    secrets: Vec<String>,
    /// The sandbox runs with `--net proxy`: a client around the proxy gets its note.
    proxied: bool,
}

/// A command's supervisor task: waits for the main process (or the hard timeout), deals
/// with what it left running, collects the output, publishes the final result, then keeps
/// the record until no process of the command is left.
async fn supervise(
    r: Arc<Record>,
    mut child: tokio::process::Child,
    mut pump_done: tokio::sync::oneshot::Receiver<()>,
    status_r: Option<OwnedFd>,
    s: Supervision,
    engine: std::sync::Weak<Inner>,
) {
    let (status, sandbox_waits) = main_exit(&r, &mut child, status_r, s.hard, s.grace).await;
    let killed = r
        .kill_reason
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_some();
    let (background, keep_pumping) = if killed {
        (Vec::new(), false)
    } else {
        left_behind(&r, s.background, s.grace).await
    };
    if sandbox_waits {
        reap_sandbox(child, keep_pumping, s.drain_max).await;
    }
    let intercepted = output_at_end(&r, &mut pump_done, keep_pumping, &s).await;
    let exit = status.unwrap_or(ExitStatus::from_signal(9, false));
    let (st, txt) = final_text(&r, &exit, &intercepted, &background, keep_pumping, &s);
    // Compact: the result text stays; the preview (already in it) and buffers go.
    let mut intercepted = intercepted;
    intercepted.preview.text = String::new();
    r.done.send_replace(Some(Final {
        status: st,
        exit,
        intercepted,
        background,
        text: txt,
    }));
    if keep_pumping {
        // The result is out: past the artifact cap the background writers are throttled.
        r.pump.set_background();
        // Until the background processes close the pipe (they exit, or are killed by
        // terminate) or the engine stops the pump.
        let _ = pump_done.await;
        r.interceptor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .finish();
    }
    // Compact: a finished command's record keeps only its result text.
    r.interceptor
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .release_buffers();
    if !killed {
        reap_leftovers(&r).await;
    }
    r.group.lock().unwrap_or_else(|e| e.into_inner()).take();
    r.settled.store(true, Ordering::SeqCst);
    if let Some(inner) = engine.upgrade() {
        forget_oldest_settled(&inner);
    }
}

/// Waits for the first of: the main process's exit, the sandbox's report of it on the status
/// pipe (`status_r`), the hard timeout (which kills the tree unless another kill came first).
/// Returns the exit status and whether the sandbox reported it (and so still runs, waiting
/// for the background processes).
async fn main_exit(
    r: &Arc<Record>,
    child: &mut tokio::process::Child,
    status_r: Option<OwnedFd>,
    hard: Option<Duration>,
    grace: Duration,
) -> (std::io::Result<ExitStatus>, bool) {
    // The sandbox's report of the main process's exit (pending without a sandbox, or when it
    // ends without one).
    let reported = async move {
        match status_r {
            Some(r) => match tokio::task::spawn_blocking(move || read_exit_status(r)).await {
                Ok(Some(code)) => code,
                _ => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        s = child.wait() => (s.map(exit_status_of), false),
        code = reported => (Ok(ExitStatus::Code(code)), true),
        () = sleep_or_forever(hard) => {
            if r.kill_reason.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(KillReason::HardTimeout) == &KillReason::HardTimeout {
                kill_blocking(r, grace).await;
            }
            (child.wait().await.map(exit_status_of), false)
        }
    }
}

/// The names of the descendants still running now that the main process is gone (not the
/// sandbox itself, which waits for them), and whether their output keeps flowing into the
/// command ([`Background::Keep`]); with [`Background::Stop`] they are killed.
async fn left_behind(r: &Arc<Record>, policy: Background, grace: Duration) -> (Vec<String>, bool) {
    let t = Arc::clone(r);
    let left: Vec<i32> = tokio::task::spawn_blocking(move || background_of(&t.tree, true))
        .await
        .unwrap_or_default();
    let background = left.iter().map(|&p| process_name(p)).collect();
    let mut keep_pumping = false;
    if !left.is_empty() {
        match policy {
            Background::Stop => kill_blocking(r, grace).await,
            Background::Keep => keep_pumping = true,
        }
    }
    (background, keep_pumping)
}

/// Reaps a sandbox that reported the main process's exit: whenever it ends while background
/// processes run (`keep_pumping`), else now (nothing is left for it to wait for), waiting at
/// most `drain_max`.
async fn reap_sandbox(mut child: tokio::process::Child, keep_pumping: bool, drain_max: Duration) {
    if keep_pumping {
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
    } else {
        let _ = tokio::time::timeout(drain_max, child.wait()).await;
    }
}

/// The output for the result: with background processes still writing (`keep_pumping`),
/// what came until the output settled, the pump still running; else all of it, after the
/// bounded drain of the pipe.
async fn output_at_end(
    r: &Record,
    pump_done: &mut tokio::sync::oneshot::Receiver<()>,
    keep_pumping: bool,
    s: &Supervision,
) -> Intercepted {
    if keep_pumping {
        settle(&r.interceptor, s.drain_max, s.drain_idle).await;
        let mut i = r.interceptor.lock().unwrap_or_else(|e| e.into_inner());
        i.keep_artifact();
        i.snapshot()
    } else {
        r.pump.begin_drain(s.drain_max, s.drain_idle);
        let _ = pump_done.await;
        r.interceptor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .finish()
    }
}

/// The final status and result text: the kill's text when the engine killed the command,
/// else the result with the background note and, for a failed sandboxed command, the denial
/// hint.
fn final_text(
    r: &Record,
    exit: &ExitStatus,
    intercepted: &Intercepted,
    background: &[String],
    keep_pumping: bool,
    s: &Supervision,
) -> (Status, String) {
    let reason = *r.kill_reason.lock().unwrap_or_else(|e| e.into_inner());
    match reason {
        Some(KillReason::HardTimeout) => (
            Status::TimedOut,
            killed_text(
                &text::hard_timeout_text(r.hard_timeout_secs.unwrap_or(0.0)),
                intercepted,
            ),
        ),
        Some(KillReason::Abort) => (
            Status::Terminated,
            killed_text(text::ABORTED_TEXT, intercepted),
        ),
        Some(KillReason::Terminate) => (
            Status::Terminated,
            result_text(&r.cwd, exit, intercepted, ""),
        ),
        None => {
            let mut note = text::background_note(background, s.background == Background::Keep);
            if keep_pumping {
                if let Some(a) = &intercepted.artifact {
                    note.push_str(&text::background_artifact_note(a.as_str(), r.id));
                }
            }
            let mut t = result_text(&r.cwd, exit, intercepted, &note);
            if let (Some(w), true) = (&s.writable, *exit != ExitStatus::Code(0)) {
                let w: Vec<&str> = w.iter().map(String::as_str).collect();
                let secrets: Vec<&str> = s.secrets.iter().map(String::as_str).collect();
                let hint = denial_hint(&intercepted.preview.text, &w, &secrets).or_else(|| {
                    s.proxied
                        .then(|| proxy_hint(&intercepted.preview.text))
                        .flatten()
                });
                if let Some(h) = hint {
                    t.push('\n');
                    t.push_str(&h);
                }
            }
            (Status::Exited, t)
        }
    }
}

/// Background leftovers (`daemon &`) stay in the tree; while any lives, rescan now and then
/// so that their zombies, reparented to us as subreaper, get reaped. (A killed tree has none:
/// the killer scanned until it found no member.)
async fn reap_leftovers(r: &Arc<Record>) {
    loop {
        let t = Arc::clone(r);
        let live = tokio::task::spawn_blocking(move || t.tree.members().len()).await;
        if live.map_or(true, |n| n == 0) {
            break;
        }
        tokio::time::sleep(LEFTOVER_RESCAN).await;
    }
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Forgets the oldest settled records past [`MAX_FINISHED_RECORDS`].
fn forget_oldest_settled(inner: &Inner) {
    let mut records = inner.records.lock().unwrap_or_else(|e| e.into_inner());
    let settled: Vec<u64> = records
        .values()
        .filter(|r| r.settled.load(Ordering::SeqCst))
        .map(|r| r.id)
        .collect();
    let excess = settled.len().saturating_sub(MAX_FINISHED_RECORDS);
    for id in &settled[..excess] {
        records.remove(id);
    }
}

async fn kill_blocking(rec: &Arc<Record>, grace: Duration) {
    let r = Arc::clone(rec);
    let _ = tokio::task::spawn_blocking(move || tree::kill_trees(&[&r.tree], grace)).await;
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

fn exit_status_of(s: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => ExitStatus::Code(c),
        (None, Some(sig)) => ExitStatus::from_signal(sig, s.core_dumped()),
        (None, None) => ExitStatus::Code(-1),
    }
}

/// Reads `shofer-sandbox --status-fd` lines until `{"exit-status": N}` (the main process's
/// exit, shell style); `None` when the pipe ends without one.
fn read_exit_status(pipe: OwnedFd) -> Option<i32> {
    use std::io::BufRead;
    let lines = std::io::BufReader::new(std::fs::File::from(pipe)).lines();
    for line in lines.map_while(Result::ok) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
            if let Some(code) = v.get("exit-status").and_then(serde_json::Value::as_i64) {
                return i32::try_from(code).ok();
            }
        }
    }
    None
}

/// Waits until the output has been quiet for `idle`, at most `max`.
async fn settle(interceptor: &Mutex<Interceptor>, max: Duration, idle: Duration) {
    let total = || {
        interceptor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .total()
    };
    let start = tokio::time::Instant::now();
    let step = idle
        .min(Duration::from_millis(50))
        .max(Duration::from_millis(1));
    let mut last = total();
    let mut quiet_since = start;
    while start.elapsed() < max && quiet_since.elapsed() < idle {
        tokio::time::sleep(step).await;
        let now = total();
        if now != last {
            last = now;
            quiet_since = tokio::time::Instant::now();
        }
    }
}

/// The live members of a command's tree other than its main process and the sandbox (which,
/// with `--keep-descendants`, waits for them): the processes it left in the background. `fresh`:
/// from a new /proc scan rather than the shared one (see [`Tree::members_now`]).
fn background_of(tree: &Tree, fresh: bool) -> Vec<i32> {
    let root = tree.root_pid();
    let members = if fresh {
        tree.members_now()
    } else {
        tree.members()
    };
    members
        .iter()
        .map(|p| p.pid)
        .filter(|&p| p != root && process_name(p) != "shofer-sandbox")
        .collect()
}

/// A process's name (`/proc/<pid>/comm`), or its pid when it is gone.
fn process_name(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| format!("pid {pid}"))
}

/// The text of a command the engine killed: the fixed headline plus what it printed.
fn killed_text(headline: &str, i: &Intercepted) -> String {
    let out = match &i.spill {
        Spill::Inline => KilledOutput::Inline(&i.preview.text),
        Spill::Complete(id) => KilledOutput::Persisted {
            total: i.preview.total,
            persisted: Persisted::Complete {
                artifact_id: id.as_str(),
            },
            preview: &i.preview.text,
        },
        Spill::Failed {
            artifact,
            written,
            error,
        } => KilledOutput::Persisted {
            total: i.preview.total,
            persisted: Persisted::Failed {
                artifact_id: artifact.as_ref().map(|a| a.as_str()),
                written: *written,
                error,
            },
            preview: &i.preview.text,
        },
    };
    text::killed_result(headline, out)
}

/// The inline or persisted result text for a finished command.
fn result_text(cwd: &str, exit: &ExitStatus, i: &Intercepted, note: &str) -> String {
    match &i.spill {
        Spill::Inline => text::inline_result_noted(cwd, exit, note, &i.preview.text),
        Spill::Complete(id) => text::persisted_result_noted(
            cwd,
            exit,
            note,
            i.preview.total,
            &Persisted::Complete {
                artifact_id: id.as_str(),
            },
            &i.preview.text,
        ),
        Spill::Failed {
            artifact,
            written,
            error,
        } => text::persisted_result_noted(
            cwd,
            exit,
            note,
            i.preview.total,
            &Persisted::Failed {
                artifact_id: artifact.as_ref().map(|a| a.as_str()),
                written: *written,
                error,
            },
            &i.preview.text,
        ),
    }
}
