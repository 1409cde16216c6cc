//! shofer-sandbox: run a command that may read the whole machine but write only to its
//! worktree (DESIGN §2).
//!
//! The flow, one module per step:
//! 1. [`cli`] parses the command line into a typed [`cli::Invocation`] (no syscalls);
//! 2. [`backend`] probes the kernel ([`backend::Facts`]) and chooses a backend, refusing
//!    rather than silently downgrading;
//! 3. [`writable`] builds the writable set, opening every rule path without following
//!    symlinks, with [`git`] adding a validated linked worktree's metadata;
//! 4. [`ruleset`] turns it into a Landlock ruleset (created, not yet applied);
//! 5. [`supervisor`] forks the command, applies no_new_privs, capability drop, the
//!    [`seccomp`] filter and the ruleset in the child, and supervises the tree;
//! 6. [`report`] renders what is enforced for `--probe` and `--report`.
//!
//! Exit statuses (DESIGN §2.6) are decided in one place, [`run`].
//!
//! # Limitations (Landlock backend)
//! - chmod, chown, utime and xattr changes outside the writable set are not controlled by
//!   Landlock; `--probe` lists them as not enforced.
//! - Before Landlock ABI 9, `connect()` to a pathname unix socket outside the writable set is
//!   not stopped; before ABI 6, signals and abstract unix sockets are not scoped.
//! - File descriptors 0-2 are inherited as they are: a caller that hands the command a
//!   writable file there lets it write that file.
#![deny(missing_docs)]

pub mod backend;
pub mod bwrap;
pub mod capabilities;
pub mod cli;
pub mod error;
pub mod git;
pub mod gitguard;
pub mod gitprotect;
pub mod gitrun;
pub mod namespaces;
pub mod nested;
pub mod objects;
pub mod paths;
pub mod report;
pub mod ruleset;
pub mod seccomp;
pub mod supervisor;
pub mod sys;
pub mod writable;

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use cli::RunArgs;
use error::SetupError;
use shofer_core::policy::Backend;
use supervisor::{Launch, Outcome};

/// Exit status when the sandbox could not be set up (DESIGN §2.6).
pub const EXIT_SETUP: i32 = 125;

/// Grace between SIGTERM and SIGKILL when the tree is stopped.
pub const KILL_GRACE: Duration = Duration::from_millis(250);

/// `--probe`: prints what this kernel can enforce. Returns the exit status (0).
pub fn probe(json: bool, max_abi: Option<u32>, net: shofer_core::policy::NetPolicy) -> i32 {
    let facts = backend::Facts::probe();
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

/// Runs one sandboxed command and returns the exit status to use: the command's own status,
/// 128+N for signal N, 126/127 when it could not be executed, 125 when the sandbox could not
/// be set up (after printing why on stderr).
pub fn run(args: RunArgs) -> i32 {
    match try_run(args) {
        Ok((outcome, git_restore_failed)) => {
            let code = match outcome {
                Outcome::Ran(status) => wait_status_to_exit(status),
                Outcome::NotExecuted(code, msg) => {
                    eprintln!("shofer-sandbox: {msg}");
                    code
                }
            };
            if git_restore_failed {
                // A git control file the host trusts may still hold the command's version:
                // nobody may take this run for a success (docs/ARCHITECTURE.md).
                EXIT_SETUP
            } else {
                code
            }
        }
        Err(e) => {
            eprintln!("shofer-sandbox: {e}");
            EXIT_SETUP
        }
    }
}

/// Maps a raw `waitpid` status to a shell-style exit status: the exit code, or 128+N for a
/// process killed by signal N (as bash and bubblewrap report it).
pub fn wait_status_to_exit(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        EXIT_SETUP
    }
}

fn try_run(args: RunArgs) -> Result<(Outcome, bool), SetupError> {
    for &fd in args.pass_fds.iter().chain(args.report_fd.iter()) {
        if !sys::fd_is_open(fd) {
            return Err(SetupError::Usage(format!(
                "file descriptor {fd} is not open (given to --pass-fd or --report)"
            )));
        }
    }
    let facts = backend::Facts::probe();
    let choice = backend::choose(
        args.backend,
        &facts,
        args.max_abi,
        args.net,
        args.allow_degraded,
    )
    .map_err(SetupError::NoBackend)?;
    // A run killed before it restored git control files left a journal: finish it first.
    gitrun::repair_before_run(&args.worktree)?;
    let opened = writable::build(&args.worktree, &args.allow_write, args.net)?;
    if let crate::git::GitLayout::Rejected(why) = &opened.git {
        eprintln!("shofer-sandbox: note: git metadata not made writable: {why}");
    }
    for (p, why) in &choice.degraded {
        eprintln!("shofer-sandbox: warning: degraded ({}): {why}", p.key());
    }
    let mut git_run = gitrun::GitRun::prepare(&opened, choice.backend)?;
    let mut report_file = None;
    if let Some(fd) = args.report_fd {
        let record = report::run(&facts, &choice, &opened, &git_run);
        // Safety: the caller handed us this descriptor with --report and we checked it is
        // open; we own it from here. It is close-on-exec for the command (the child closes
        // every descriptor not passed); a closing record follows only if git files had to be
        // restored.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        writeln!(file, "{record}").map_err(|e| SetupError::Syscall {
            op: "writing the --report record",
            source: e,
        })?;
        report_file = Some(file);
    }
    let argv = args
        .command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| SetupError::Usage("the command contains a NUL byte".into()))?;
    // Safety: isatty only inspects the descriptors.
    let interactive = (0..3).any(|fd| unsafe { libc::isatty(fd) } == 1);
    // Safety: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let landlock = if choice.abi > 0 && choice.backend != Backend::Bwrap {
        let mut created = ruleset::create(&opened, choice.abi)?;
        // The namespace backends bind a linked worktree's common dir writable, with read-only
        // binds on top (gitprotect): Landlock must allow what the mounts allow.
        if matches!(choice.backend, Backend::Userns | Backend::Layered) {
            if let Some(layer) = &opened.controls.common {
                created = ruleset::add_dir(created, &layer.common, choice.abi)?;
            }
        }
        Some(created)
    } else {
        None
    };
    let mut launch = Launch {
        argv,
        interactive,
        pass_fds: args.pass_fds,
        drop_caps: !args.keep_caps && (root || capabilities::holds_any()),
        landlock,
        keep_descendants: args.keep_descendants,
        grace: KILL_GRACE,
        namespaces: None,
        no_new_privs: true,
        seccomp: true,
        bwrap_info: None,
        spawned_gate: None,
    };
    // Kept alive until the command has exec'd.
    let mut _bwrap_args = None;
    match choice.backend {
        Backend::Landlock => {}
        Backend::Userns | Backend::Layered => {
            // In a user namespace the command holds capabilities there until exec: drop them
            // whoever the caller is.
            launch.drop_caps = !args.keep_caps;
            launch.namespaces = Some(namespace_setup(&opened, choice.abi));
        }
        Backend::Bwrap => {
            if args.keep_descendants {
                return Err(SetupError::Usage(
                    "--keep-descendants is not available with the bwrap backend (bubblewrap's init kills them when the command exits); use landlock or userns".into(),
                ));
            }
            match supervisor::resolve_command(&launch.argv[0]) {
                Ok(path) => launch.argv[0] = path,
                Err((code, msg)) => {
                    let failed = git_run.finish(None);
                    return Ok((Outcome::NotExecuted(code, msg), failed));
                }
            }
            let b = choice
                .bwrap
                .as_ref()
                .expect("bwrap choice carries its binary");
            let info = sys::pipe_cloexec().map_err(|e| SetupError::Syscall {
                op: "pipe2",
                source: e,
            })?;
            let (fd, argv) = bwrap::argv(
                b,
                &opened,
                &launch.argv,
                !args.keep_caps,
                info.1.as_raw_fd(),
            )
            .map_err(|e| SetupError::Syscall {
                op: "preparing the bubblewrap arguments",
                source: e,
            })?;
            launch.pass_fds.push(info.1.as_raw_fd());
            launch.bwrap_info = Some(info);
            launch.pass_fds.push(fd.as_raw_fd());
            launch.argv = argv;
            _bwrap_args = Some(fd);
            // bubblewrap needs its privileges to build the sandbox and drops them itself; a
            // setuid one must not run under no_new_privs.
            launch.drop_caps = false;
            launch.no_new_privs = !b.setuid;
            launch.seccomp = !b.setuid;
        }
    }
    launch.spawned_gate = git_run.start();
    let outcome = supervisor::run(launch);
    drop(opened);
    // The whole tree is gone (or the command never started): put back what it changed.
    let failed = git_run.finish(report_file.as_mut());
    outcome.map(|o| (o, failed))
}

/// The plan for process A of the namespace backends: every writable path except the device
/// nodes and `/dev/shm`, which the minimal `/dev` provides (plus any other terminal the caller
/// sits on).
fn namespace_setup(opened: &writable::OpenedPolicy, abi: u32) -> supervisor::NsSetup {
    use shofer_core::policy::RuleOrigin;
    let mut devices = namespaces::standard_devices();
    let mut binds = Vec::new();
    for (rule, fd) in opened.policy.writable.iter().zip(&opened.fds) {
        match rule.origin {
            RuleOrigin::Device | RuleOrigin::SharedMemory => {}
            RuleOrigin::Terminal => {
                let name = rule.path.strip_prefix("/dev").ok().and_then(|p| p.to_str());
                if let Some(name) = name {
                    // ptmx and pts come from the namespace's own devpts instance.
                    let covered = devices.iter().any(|(d, _)| name == d)
                        || name == "ptmx"
                        || name == "pts"
                        || name.starts_with("pts/");
                    if !covered && !name.contains('/') {
                        devices.push((name.to_string(), true));
                    }
                }
            }
            _ => binds.push(namespaces::Bind {
                path: rule.path.clone(),
                fd: fd.as_raw_fd(),
                origin: rule.origin,
            }),
        }
    }
    // Safety: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    supervisor::NsSetup {
        plan: namespaces::Plan {
            binds,
            uid,
            gid,
            devices,
            git_layers: opened.controls.layers(),
        },
        net_deny: opened.policy.net == shofer_core::policy::NetPolicy::Deny,
        landlock_abi: abi,
    }
}
