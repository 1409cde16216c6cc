//! shofer-sandbox: run a command that may read the whole machine but write only to its
//! worktree (docs/ARCHITECTURE.md).
//!
//! One run is a straight line of steps; each step's result flows into the next, once
//! ([`run`] reads as this list):
//! 1. **parse**: [`cli`] turns the command line into a typed [`cli::RunArgs`] (no syscalls);
//! 2. **kernel facts**: [`backend::Facts`] probes the Landlock ABI (user namespaces and
//!    bubblewrap only when the decision needs them);
//! 3. **choice**: [`backend::choose`] picks the backend and computes its degradations, or
//!    refuses naming each mechanism and why — never a silent downgrade;
//! 4. **opened policy**: [`writable`] builds the writable set, opening every rule path
//!    without following symlinks, with [`git`] adding a validated linked worktree's metadata
//!    and [`gitguard`] snapshotting what the host's git trusts; the `--report` record
//!    ([`report`]) is written from the choice and the opened policy;
//! 5. **plan**: the chosen backend's module builds its [`plan::Confinement`] ([`ruleset`],
//!    [`namespaces`], [`bwrap`]) around the common [`plan::ExecSpec`];
//! 6. **spawn**: [`spawn`] clones the child, which runs the exec-time sequence of [`exec`]
//!    (no_new_privs, capability drop, the [`seccomp`] filter, Landlock, the `$PATH` search
//!    of [`path_search`]);
//! 7. **supervise**: [`supervise`] forwards signals, reaps, reports on `--status-fd`
//!    ([`status`]) and stops the whole tree ([`tree`]);
//! 8. **report**: what the command changed that the host's git trusts is put back, and the
//!    exit status is decided in one place, [`run`].
//!
//! # Limitations (Landlock backend)
//! - chmod, chown, utime and xattr changes outside the writable set are not controlled by
//!   Landlock; `--probe` lists them as not enforced.
//! - Before Landlock ABI 9, `connect()` to a pathname unix socket outside the writable set is
//!   not stopped; before ABI 6, signals and abstract unix sockets are not scoped.
//! - File descriptors 0-2 are inherited as they are: a caller that hands the command a
//!   writable file there lets it write that file.
#![deny(missing_docs)]

mod backend;
mod bwrap;
mod capabilities;
pub mod cli;
mod error;
mod exec;
mod git;
mod gitguard;
mod namespaces;
pub mod path_search;
mod paths;
mod plan;
mod report;
mod ruleset;
mod seccomp;
mod spawn;
mod status;
mod supervise;
mod sys;
mod tree;
mod writable;

pub use error::SetupError;

use std::ffi::CString;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use backend::{Choice, Facts};
use cli::RunArgs;
use error::PlanError;
use plan::{CapPolicy, Confinement, ExecSpec, Plan};
use shofer_core::policy::{Backend, NetPolicy};
use spawn::Spawn;
use status::StatusFd;
use writable::OpenedPolicy;

/// Exit status when the sandbox could not be set up (docs/ARCHITECTURE.md).
pub const EXIT_SETUP: i32 = 125;

/// Grace between SIGTERM and SIGKILL when the tree is stopped.
const KILL_GRACE: Duration = Duration::from_millis(250);

/// `--probe`: prints what this kernel can enforce. Returns the exit status (0).
pub fn probe(json: bool, max_abi: Option<u32>, net: NetPolicy) -> i32 {
    let facts = Facts::probe();
    let choice = backend::choose(cli::BackendChoice::Auto, &facts, max_abi, net, false);
    // The probe reports every mechanism, needed for the decision or not.
    let _ = (facts.userns(), facts.bwrap());
    let value = report::probe(&facts, &choice, net);
    if json {
        println!("{value}");
    } else {
        print!("{}", report::probe_text(&value));
    }
    0
}

/// How a run ended, before mapping to an exit status.
enum Outcome {
    /// The command ran; its raw wait status (or our SIGTERM status if it was killed).
    Ran(i32),
    /// The command could not be executed: 126 or 127 with a message.
    NotExecuted(i32, String),
}

/// Runs one sandboxed command and returns the exit status to use: the command's own status,
/// 128+N for signal N, 126/127 when it could not be executed, 125 when the sandbox could not
/// be set up (after printing why on stderr).
pub fn run(args: RunArgs) -> i32 {
    match try_run(args) {
        Ok(Outcome::Ran(status)) => wait_status_to_exit(status),
        Ok(Outcome::NotExecuted(code, msg)) => {
            eprintln!("shofer-sandbox: {msg}");
            code
        }
        Err(e) => {
            eprintln!("shofer-sandbox: {e}");
            EXIT_SETUP
        }
    }
}

/// Maps a raw `waitpid` status to a shell-style exit status: the exit code, or 128+N for a
/// process killed by signal N (as bash and bubblewrap report it).
pub(crate) fn wait_status_to_exit(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        EXIT_SETUP
    }
}

/// The steps of the crate docs, in order.
fn try_run(args: RunArgs) -> Result<Outcome, SetupError> {
    // 1. parse: what the parser could not check without syscalls.
    let exec = exec_spec(&args)?;
    // 2. kernel facts
    let facts = Facts::probe();
    // 3. choice
    let choice = backend::choose(
        args.backend,
        &facts,
        args.max_abi,
        args.net,
        args.allow_degraded,
    )?;
    // 4. opened policy
    let opened = writable::build(&args.worktree, &args.allow_write, args.net)?;
    if let git::GitLayout::Rejected(why) = &opened.git {
        eprintln!("shofer-sandbox: note: git metadata not made writable: {why}");
    }
    for (p, why) in &choice.degraded {
        eprintln!("shofer-sandbox: warning: degraded ({}): {why}", p.key());
    }
    let guard = gitguard::GitGuard::snapshot(&opened.git, &opened.policy.worktree);
    if matches!(opened.git, git::GitLayout::MainWorktree) {
        eprintln!(
            "shofer-sandbox: warning: {}/.git is a directory inside the worktree: its config and hooks are writable while the command runs (restored when it ends); a linked worktree keeps them read-only",
            opened.policy.worktree.display()
        );
    }
    if let Some(fd) = args.report_fd {
        write_record(fd, &report::run(&facts, &choice, &opened, &guard))?;
    }
    // 5.-7. plan, spawn, supervise
    // Safety: the caller handed us this descriptor with --status-fd and `exec_spec` checked
    // it is open; nothing else here owns it.
    let status = args.status_fd.map(|fd| unsafe { StatusFd::from_raw(fd) });
    let outcome = match plan(&choice, &opened, exec) {
        Ok(plan) => supervised(plan, status),
        Err(PlanError::Setup(e)) => Err(e),
        Err(PlanError::NotRunnable { code, message }) => Ok(Outcome::NotExecuted(code, message)),
    };
    drop(opened);
    // 8. report: the whole tree is gone (or the command never started): put back what it
    // changed.
    let (restored, failed) = guard.restore();
    for path in restored {
        eprintln!(
            "shofer-sandbox: warning: the command changed {}, which the host's git trusts; restored",
            path.display()
        );
    }
    for (path, e) in failed {
        eprintln!(
            "shofer-sandbox: error: the command changed {} and it could not be restored: {e}",
            path.display()
        );
    }
    outcome
}

/// The exec spec of `args`, after checking the descriptors it names are open.
fn exec_spec(args: &RunArgs) -> Result<ExecSpec, SetupError> {
    let named = args.pass_fds.iter().chain(args.report_fd.iter());
    for (&fd, given_to) in named
        .map(|fd| (fd, "--pass-fd or --report"))
        .chain(args.status_fd.iter().map(|fd| (fd, "--status-fd")))
    {
        if !sys::fd_is_open(fd) {
            return Err(SetupError::FdNotOpen { fd, given_to });
        }
    }
    let argv = args
        .command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| SetupError::NulInCommand)?;
    Ok(ExecSpec {
        argv,
        pass_fds: args.pass_fds.clone(),
        // Safety: isatty only inspects the descriptors.
        interactive: (0..3).any(|fd| unsafe { libc::isatty(fd) } == 1),
        caps: if args.keep_caps {
            CapPolicy::Keep
        } else {
            CapPolicy::Drop
        },
        grace: KILL_GRACE,
        keep_descendants: args.keep_descendants,
    })
}

/// Writes the `--report` record to `fd` and closes it (before the command starts).
fn write_record(fd: i32, record: &serde_json::Value) -> Result<(), SetupError> {
    // Safety: the caller handed us this descriptor with --report and we checked it is open;
    // we own it from here and close it before the command starts.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    writeln!(file, "{record}").map_err(|e| SetupError::Syscall {
        op: "writing the --report record",
        source: e,
    })
}

/// Step 5: the chosen backend builds its confinement.
fn plan<'a>(
    choice: &Choice,
    opened: &'a OpenedPolicy,
    exec: ExecSpec,
) -> Result<Plan<'a>, PlanError> {
    let confinement = match choice.backend {
        Backend::Landlock => Confinement::Landlock(ruleset::plan(opened, choice.abi)?),
        Backend::Userns | Backend::Layered => {
            Confinement::Namespaces(namespaces::plan(opened, choice.abi)?)
        }
        Backend::Bwrap => {
            let b = choice
                .bwrap
                .as_ref()
                .expect("bwrap choice carries its binary");
            Confinement::Bwrap(bwrap::plan(b, opened, &exec)?)
        }
    };
    Ok(Plan { exec, confinement })
}

/// Steps 6 and 7: spawn, then supervise until the tree is gone.
fn supervised(plan: Plan<'_>, status: Option<StatusFd>) -> Result<Outcome, SetupError> {
    // Only process A of the namespace backends can tell the command's exit apart from the
    // tree's; it needs the pipe only when someone asks and it waits for descendants.
    let exit_pipe = status.is_some() && plan.exec.keep_descendants;
    match spawn::spawn(&plan, exit_pipe)? {
        Spawn::NotExecuted(code, msg) => Ok(Outcome::NotExecuted(code, msg)),
        Spawn::Running(running) => {
            let mut supervisor = supervise::Supervisor::new(running, plan, status);
            Ok(Outcome::Ran(supervisor.wait_loop()))
        }
    }
}
