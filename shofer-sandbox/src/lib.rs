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

pub mod apparmor;
pub mod backend;
pub mod bwrap;
pub mod capabilities;
pub mod cli;
pub mod devpts;
pub mod error;
pub mod git;
pub mod gitguard;
pub mod hostfilter;
pub mod namespaces;
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

/// `--probe`: prints what this kernel can enforce with `backend` (`--backend`, default
/// `auto`). Returns the exit status (0).
pub fn probe(
    json: bool,
    backend: cli::BackendChoice,
    max_abi: Option<u32>,
    net: shofer_core::policy::NetPolicy,
) -> i32 {
    let facts = backend::Facts::probe();
    // A forced backend is described even where it is partial (its degradations are listed);
    // `auto` says what a run would do.
    let describe_partial = backend != cli::BackendChoice::Auto;
    let choice = backend::choose(backend, &facts, max_abi, net, describe_partial);
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

/// `--print-apparmor-profile`: prints the profile for this binary's real path. Returns the
/// exit status: 0, or 125 when the binary's own path cannot be found.
pub fn print_apparmor_profile() -> i32 {
    match std::env::current_exe().and_then(std::fs::canonicalize) {
        Ok(exe) => {
            print!("{}", apparmor::profile(&exe));
            0
        }
        Err(e) => {
            eprintln!("shofer-sandbox: cannot find this binary's path (/proc/self/exe): {e}");
            EXIT_SETUP
        }
    }
}

/// Runs one sandboxed command and returns the exit status to use: the command's own status,
/// 128+N for signal N, 126/127 when it could not be executed, 125 when the sandbox could not
/// be set up (after printing why on stderr).
pub fn run(args: RunArgs) -> i32 {
    match try_run(args) {
        Ok(Outcome::Ran(status)) if libc::WIFSIGNALED(status) => {
            die_by_signal(libc::WTERMSIG(status))
        }
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

/// Ends this process by signal `sig`, as the command ended, so the caller's shell sees what it
/// would have seen without the sandbox (a `for` loop stops on Ctrl-C: bash breaks out only
/// when its child *died* by SIGINT, not when it exited 130). No core dump is written
/// (`PR_SET_DUMPABLE` 0 stops dumps to files and to a `core_pattern` pipe alike), and the
/// signal is unblocked and its default action restored first. Returns 128+`sig` only if the
/// signal's default action does not end a process.
pub fn die_by_signal(sig: i32) -> i32 {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // Safety: prctl/signal/sigprocmask/kill with valid arguments on this process only.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::kill(libc::getpid(), sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    128 + sig
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

fn try_run(args: RunArgs) -> Result<Outcome, SetupError> {
    for &fd in args.pass_fds.iter().chain(args.report_fd.iter()) {
        if !sys::fd_is_open(fd) {
            return Err(SetupError::Usage(format!(
                "file descriptor {fd} is not open (given to --pass-fd or --report)"
            )));
        }
    }
    let mut facts = backend::Facts::probe();
    let auto = args.backend == cli::BackendChoice::Auto;
    let forced_namespaces = matches!(
        args.backend,
        cli::BackendChoice::Forced(Backend::Userns | Backend::Layered)
    );
    if (auto && args.report_fd.is_none()) || forced_namespaces {
        // The run's own clone tests user namespaces (a report must be right before it, so
        // `auto` with --report probes); a sysctl that already says "blocked" saves the clone.
        facts.assume_userns();
    }
    let opened = writable::build(&args.worktree, &args.allow_write, args.net)?;
    let mut told = Vec::new();
    loop {
        let choice = backend::choose(
            args.backend,
            &facts,
            args.max_abi,
            args.net,
            args.allow_degraded,
        )
        .map_err(SetupError::NoBackend)?;
        match launch(&args, &facts, &choice, &opened, &mut told) {
            Err(SetupError::NoBackend(why))
                if auto
                    && args.report_fd.is_none()
                    && matches!(choice.backend, Backend::Layered | Backend::Userns) =>
            {
                // Set-up failed before the command ran: choose again without namespaces.
                let why = why
                    .strip_prefix("user namespaces: ")
                    .unwrap_or(&why)
                    .to_string();
                facts.userns_failed(why);
            }
            outcome => return outcome,
        }
    }
}

/// One attempt at running the command with `choice`. `told` collects the stderr lines
/// already printed (a second attempt does not repeat them).
fn launch(
    args: &RunArgs,
    facts: &backend::Facts,
    choice: &backend::Choice,
    opened: &writable::OpenedPolicy,
    told: &mut Vec<String>,
) -> Result<Outcome, SetupError> {
    let mut tell = |line: String| {
        if !told.contains(&line) {
            eprintln!("{line}");
            told.push(line);
        }
    };
    if args.backend == cli::BackendChoice::Auto && choice.backend == Backend::Landlock {
        if let Some(Err(why)) = facts.userns_if_probed() {
            tell(format!(
                "shofer-sandbox: note: Landlock alone, without namespaces: user namespaces: {why}"
            ));
        }
    }
    if let crate::git::GitLayout::Rejected(why) = &opened.git {
        tell(format!(
            "shofer-sandbox: note: git metadata not made writable: {why}"
        ));
    }
    for (p, why) in &choice.degraded {
        tell(format!(
            "shofer-sandbox: warning: degraded ({}): {why}",
            p.key()
        ));
    }
    for (p, why) in &choice.hardening {
        tell(format!(
            "shofer-sandbox: hardening not enforced ({}): {why}",
            p.key()
        ));
    }
    let guard = gitguard::GitGuard::snapshot(&opened.git, &opened.policy.worktree);
    if matches!(opened.git, git::GitLayout::MainWorktree) {
        eprintln!(
            "shofer-sandbox: warning: {}/.git is a directory inside the worktree: its config and hooks are writable while the command runs (restored when it ends); a linked worktree keeps them read-only",
            opened.policy.worktree.display()
        );
    }
    // Safety: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    // A root caller over a worktree owned by someone else (a container over a bind-mounted
    // checkout) must be able to work in it without getting back what the drop closed.
    let owner = foreign_owner(opened, root && !args.keep_caps);
    if let Some(fd) = args.report_fd {
        let mut record = report::run(facts, choice, opened, &guard);
        if let Some((uid, gid)) = owner {
            let how = if choice.backend == Backend::Landlock {
                format!("dropped; the command runs as the worktree's owner, uid {uid} gid {gid}")
            } else if choice.backend == Backend::Bwrap {
                String::new()
            } else {
                format!("CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER and CAP_FSETID kept inside the user namespace (every id mapped) for a worktree owned by uid {uid}; every other capability dropped, no_new_privs")
            };
            if !how.is_empty() {
                record["protections"]["capabilities"] =
                    serde_json::json!({"enforced": false, "reason": how, "tier": "info"});
            }
        }
        // Safety: the caller handed us this descriptor with --report and we checked it is
        // open; we own it from here and close it before the command starts.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        writeln!(file, "{record}").map_err(|e| SetupError::Syscall {
            op: "writing the --report record",
            source: e,
        })?;
    }
    let argv = args
        .command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| SetupError::Usage("the command contains a NUL byte".into()))?;
    // Safety: isatty only inspects the descriptors.
    let interactive = (0..3).any(|fd| unsafe { libc::isatty(fd) } == 1);
    let landlock = if choice.abi > 0 && choice.backend != Backend::Bwrap {
        Some(ruleset::create(opened, choice.abi)?)
    } else {
        None
    };
    let mut launch = Launch {
        argv,
        interactive,
        pass_fds: args.pass_fds.clone(),
        drop_caps: !args.keep_caps && (root || capabilities::holds_any()),
        landlock,
        keep_descendants: args.keep_descendants,
        grace: KILL_GRACE,
        namespaces: None,
        no_new_privs: true,
        seccomp: true,
        refuse_id_changes: !args.keep_caps,
        kept_caps: &[],
        run_as: None,
        bwrap_info: None,
    };
    // Kept alive until the command has exec'd.
    let mut _bwrap_args = None;
    match choice.backend {
        Backend::Landlock => {
            if let Some((uid, gid)) = owner {
                tell(format!("shofer-sandbox: note: the worktree belongs to uid {uid}: the command runs as uid {uid}, gid {gid} (Landlock alone has no read-only root to keep capabilities from reaching outside)"));
                launch.run_as = Some((uid, gid));
            }
        }
        Backend::Userns | Backend::Layered => {
            // In a user namespace the command holds capabilities there until exec: drop them
            // whoever the caller is.
            launch.drop_caps = !args.keep_caps;
            let mut setup = namespace_setup(opened, choice.abi);
            if let Some((uid, _)) = owner {
                tell(format!("shofer-sandbox: note: the worktree belongs to uid {uid}: the command keeps CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER and CAP_FSETID inside its user namespace, every id mapped"));
                setup.plan.full_map = true;
                launch.kept_caps = &capabilities::FOREIGN_WORKTREE;
            }
            launch.namespaces = Some(setup);
        }
        Backend::Bwrap => {
            if args.keep_descendants {
                return Err(SetupError::Usage(
                    "--keep-descendants is not available with the bwrap backend (bubblewrap's init kills them when the command exits); use landlock or userns".into(),
                ));
            }
            match supervisor::resolve_command(&launch.argv[0]) {
                Ok(path) => launch.argv[0] = path,
                Err((code, msg)) => return Ok(Outcome::NotExecuted(code, msg)),
            }
            let b = choice
                .bwrap
                .as_ref()
                .expect("bwrap choice carries its binary");
            let info = sys::pipe_cloexec().map_err(|e| SetupError::Syscall {
                op: "pipe2",
                source: e,
            })?;
            let (fd, argv) =
                bwrap::argv(b, opened, &launch.argv, !args.keep_caps, info.1.as_raw_fd()).map_err(
                    |e| SetupError::Syscall {
                        op: "preparing the bubblewrap arguments",
                        source: e,
                    },
                )?;
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
    let outcome = supervisor::run(launch);
    // The whole tree is gone (or the command never started): put back what it changed.
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

/// The worktree's owner (uid, gid) when `root_drops_caps` and it is not root, in the initial
/// user namespace (where every id is mapped, so the supervisor may map them all or switch to
/// them); `None` otherwise.
fn foreign_owner(opened: &writable::OpenedPolicy, root_drops_caps: bool) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    if !root_drops_caps {
        return None;
    }
    let m = std::fs::metadata(&opened.policy.worktree).ok()?;
    if m.uid() == 0 {
        return None;
    }
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let initial = map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    initial.then(|| (m.uid(), m.gid()))
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
            full_map: false,
        },
        net_deny: opened.policy.net == shofer_core::policy::NetPolicy::Deny,
        landlock_abi: abi,
    }
}
