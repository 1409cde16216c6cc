//! shofer-sandbox: run a command that may read the whole machine but write only to its
//! worktree (docs/ARCHITECTURE.md).
//!
//! One run is a straight line of steps; each step's result flows into the next, once
//! ([`run`] reads as this list):
//! 1. **parse**: [`cli`] turns the command line into a typed [`cli::RunArgs`] (no syscalls);
//! 2. **kernel facts**: [`backend::Facts`] probes the Landlock ABI (user namespaces and
//!    bubblewrap only when the decision needs them);
//! 3. **choice**: [`backend::choose`] picks the backend and decides, once, every
//!    protection's verdict and its degradations (a [`backend::Choice`]), or refuses naming
//!    each mechanism and why — never a silent downgrade;
//! 4. **opened policy**: [`writable`] builds the writable set, opening every rule path
//!    without following symlinks; [`git::Repo::discover`] adds a validated linked worktree's
//!    metadata; [`git::Run::prepare`] prepares git's protection for the chosen backend and
//!    yields its [`spec::Layers`] and gate handlers; [`secretenv`] withholds the secret
//!    variables (named once on stderr); the `--report` record ([`report`]) is written from
//!    the choice, the opened policy, git's section and the withheld names;
//! 5. **plan**: the chosen backend's module builds its [`plan::Confinement`] ([`ruleset`],
//!    [`namespaces`], [`bwrap`]) around the common [`spec::ExecSpec`] and [`spec::Layers`];
//! 6. **spawn**: [`spawn`] clones the child, which runs the exec-time sequence of [`exec`]
//!    (no_new_privs, capability drop, the [`seccomp`] filter, Landlock, the `$PATH` search
//!    of [`path_search`]); a failure before exec comes back through [`childfail`];
//! 7. **supervise**: [`supervise`] forwards signals, reaps, reports on `--status-fd`
//!    ([`status`]) and stops the whole tree ([`tree`]);
//! 8. **report**: [`git::Run::finish`] puts back what the command changed that the host's git
//!    trusts and moves its new objects into the store, the unix-socket paths the [`gate`]
//!    refused are added to the `--report` record, and the exit status is decided in one
//!    place, [`run`].
//!
//! The [`gate`] — a seccomp user-notification filter installed in step 6 and served by the
//! supervisor from step 7, its calls performed by a helper inside the command's confinement —
//! keeps the command from reaching host processes through unix sockets, and answers the calls
//! other protections register as handlers ([`gate::handler`]; git's lock-file protocol and
//! freshen).
//!
//! With `--net proxy`, [`egress`] is the command's one way out: a listener made in its network
//! namespace during step 6 (on Landlock alone, on the host's loopback before it, the gate
//! admitting inet calls to it and the run's own loopback servers only: [`gate::inet`]), served
//! by supervisor threads from step 7, to the allow-list.
//!
//! Git lives behind one door, [`git`]: outside it, nothing names a git type.
//!
//! # Limitations (Landlock backend)
//! - chmod, chown, utime and xattr changes outside the writable set are not controlled by
//!   Landlock; `--probe` lists them as not enforced.
//! - Unix-socket connects are mediated by the [`gate`] (where it cannot run, `auto` refuses
//!   unless `--allow-degraded`); before ABI 6, signals are not scoped.
//! - File descriptors 0-2 are inherited as they are: a caller that hands the command a
//!   writable file there lets it write that file.
#![deny(missing_docs)]
// The crate is a binary with a small library face; its docs are read with
// `--document-private-items`, where these links resolve.
#![allow(rustdoc::private_intra_doc_links)]

mod apparmor;
mod backend;
mod bwrap;
mod caches;
mod capabilities;
mod childfail;
pub mod cli;
mod devpts;
mod egress;
mod error;
mod exec;
#[doc(hidden)]
pub mod fuzzing;
mod gate;
mod git;
#[doc(hidden)]
pub use git::nestedconfig;

/// The first argument that makes `shofer-sandbox` the unix-socket gate's helper process
/// (started by the sandbox itself, never by a user: see `gate::helper`).
pub const GATE_HELPER_ARG: &str = gate::helper::ARG;

/// The gate helper's process: never returns.
pub fn gate_helper_main(args: &[std::ffi::OsString]) -> ! {
    gate::helper::main(args)
}
mod guardian;
mod hostfilter;
mod limits;
mod namespaces;
mod nofile;
pub mod path_search;
mod paths;
mod phases;
mod plan;
mod report;
mod ruleset;
mod seccomp;
mod secretenv;
mod secretpaths;
mod signalgate;
mod signals;
mod spawn;
mod spec;
mod status;
mod supervise;
mod tree;
mod writable;

pub use error::SetupError;

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use backend::{Choice, Facts};
use cli::RunArgs;
use error::PlanError;
use plan::Plan;
use shofer_core::policy::{Backend, NetPolicy};
use signals::{die_by_signal, wait_status_to_exit};
use spawn::Spawn;
use spec::{CapPolicy, ExecSpec};
use status::StatusFd;
use writable::OpenedPolicy;

pub use signals::EXIT_SETUP;

/// `--probe`: prints what this kernel can enforce with `backend` (`--backend`, default
/// `auto`), and how `limits` would hold (set up as for a run, then handed back). Returns the
/// exit status (0).
pub fn probe(
    json: bool,
    backend: cli::BackendChoice,
    max_abi: Option<u32>,
    net: NetPolicy,
    limits: [shofer_core::limits::Setting; 3],
) -> i32 {
    let facts = Facts::probe();
    // A forced backend is described even where it is partial (its degradations are listed);
    // `auto` says what a run would do.
    let describe_partial = backend != cli::BackendChoice::Auto;
    let choice = backend::choose(backend, &facts, max_abi, net, describe_partial);
    // The probe reports every mechanism, needed for the decision or not.
    let _ = (facts.userns(), facts.bwrap());
    let mut value = report::probe(&facts, &choice, net);
    if let Ok(c) = &choice {
        let [procs, memory, cpu] = limits;
        let enforced = limits::Enforced::prepare(
            shofer_core::limits::Limits::resolve(procs, memory, cpu, shofer_sys::proc::mem_total()),
            matches!(c.backend, Backend::Layered | Backend::Userns),
            rustix::process::geteuid().is_root(),
        );
        value["limits"] = report::limits(&enforced.rows);
        // The probe's cgroups are handed back when `enforced` drops: no path to name.
        for row in value["limits"]
            .as_object_mut()
            .into_iter()
            .flat_map(|l| l.values_mut())
        {
            row.as_object_mut().map(|r| r.remove("cgroup"));
        }
    }
    if json {
        println!("{value}");
    } else {
        print!("{}", report::probe_text(&value));
    }
    0
}

/// `--repair WORKTREE`: finishes the git control-file restores a killed run left and moves its
/// quarantined objects into the repository (see `gitrun`, `quarantine`). Returns the exit
/// status: 0 when nothing is left to do, 1 when something could not be done, 125 when the
/// worktree's path cannot be resolved.
pub fn repair(worktree: &std::path::Path) -> i32 {
    git::repair_command(worktree)
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

/// How a run ended, before mapping to an exit status.
enum Outcome {
    /// The command ran; its raw wait status (or our SIGTERM status if it was killed).
    Ran(i32),
    /// The command could not be executed: 126 or 127 with a message.
    NotExecuted(i32, String),
}

/// Restores `SIGCHLD`'s default disposition, first thing: a caller that ignores it
/// (`SIG_IGN` survives exec) would have the kernel reap our children itself and never queue
/// the signal, and the guardian and the supervisor, which wait for it with `sigwaitinfo`,
/// would wait forever; the probes' `waitpid` would fail.
pub fn take_back_sigchld() {
    shofer_sys::signal::set_default(libc::SIGCHLD);
}

/// Runs one sandboxed command and returns the exit status to use: the command's own status,
/// 126/127 when it could not be executed, 125 when the sandbox could not be set up (after
/// printing why on stderr). A command killed by signal N makes this process die by N
/// ([`die_by_signal`]; 128+N only where that cannot be done).
///
/// A git control file the command changed that could not be restored, or a git object it
/// destroyed, makes the status 125 whatever the command's own: nobody may take such a run for
/// a success.
pub fn run(args: RunArgs) -> i32 {
    phases::start();
    let result = try_run(args);
    phases::print("");
    // The descriptors whose last close would wait in the kernel (git's watcher's inotify
    // instance), to a child that closes them once this process is gone.
    shofer_sys::process::close_deferred();
    match result {
        Ok((_, true)) => EXIT_SETUP,
        Ok((Outcome::Ran(status), false)) if libc::WIFSIGNALED(status) => {
            die_by_signal(libc::WTERMSIG(status))
        }
        Ok((Outcome::Ran(status), false)) => wait_status_to_exit(status),
        Ok((Outcome::NotExecuted(code, msg), false)) => {
            eprintln!("shofer-sandbox: {msg}");
            code
        }
        Err(e) => {
            eprintln!("shofer-sandbox: {e}");
            EXIT_SETUP
        }
    }
}

/// The steps of the crate docs, in order. Also returns whether a git restore failed.
fn try_run(args: RunArgs) -> Result<(Outcome, bool), SetupError> {
    // 1. parse: what the parser could not check without syscalls.
    let owner = foreign_owner(&args.worktree, args.keep_caps);
    exec_spec(&args, owner)?;
    nofile::raise().map_err(SetupError::Limit)?;
    // 2. kernel facts
    let mut facts = Facts::probe();
    phases::mark("facts");
    if args.no_unix_gate {
        facts = facts.with_unix_gate(Err("disabled by --no-unix-gate".into()));
    }
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
    // 3. choice (again, without user namespaces, if building them fails below)
    let choose = |facts: &Facts| {
        backend::choose(
            args.backend,
            facts,
            args.max_abi,
            args.net,
            args.allow_degraded,
        )
        .map(|c| c.with_foreign_owner(owner).with_keep_caps(args.keep_caps))
    };
    let mut choice = choose(&facts)?;
    // One thread beside steps 4 and 5, on another CPU: the secret lookups, taken in step 4
    // (they read the file system, the mount table and the environment, and change nothing
    // the other steps read), then the limits' cgroups, taken before the command starts.
    let (secrets_sent, secrets_found) = shofer_sys::thread::handoff();
    let (ruleset_sent, ruleset_ahead) = shofer_sys::thread::handoff();
    let landlock_abi = (choice.backend == Backend::Landlock).then_some(choice.abi);
    if landlock_abi.is_some() {
        nofile::make_room(); // for the read rules' descriptors, opened there
    }
    let limits_preparing = {
        let (allow_read, hide, keep_env) = (
            args.allow_read.clone(),
            args.hide.clone(),
            args.keep_env.clone(),
        );
        let [procs, memory, cpu] = args.limits;
        let net = args.net;
        Some(limits::Preparing::start(
            move || {
                // std's environment lock orders these reads with the supervisor's own changes
                // (git's settings, the proxy's variables: `std::env::set_var`), and no other
                // thread reads it without the lock; `secretenv::withhold` checks the names
                // this did not see.
                let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
                let paths = secretpaths::find(&env, &allow_read, &hide);
                secrets_sent.give((paths.clone(), secretenv::find(&env, &keep_env)));
                // Landlock alone: its ruleset with the read rules, which step 5 finishes.
                ruleset_sent.give(landlock_abi.and_then(|abi| paths.ahead(abi, net)));
            },
            shofer_core::limits::Limits::resolve(procs, memory, cpu, shofer_sys::proc::mem_total()),
            matches!(choice.backend, Backend::Layered | Backend::Userns),
            rustix::process::geteuid().is_root(),
        ))
    };
    phases::mark("choice");
    // 4. opened policy (once: a second attempt reuses it; first, a restore that a killed
    // run left is finished)
    // Journals are read only from outside this run's writable set (built again when a
    // restore put anything back: it may change the `.git` pointer the build follows).
    let open = || -> Result<(OpenedPolicy, git::Repo), SetupError> {
        let mut opened = writable::build(&args.worktree, &args.allow_write, args.net)?;
        let repo = git::Repo::discover(&mut opened);
        Ok((opened, repo))
    };
    let (before, repo) = open()?;
    phases::mark("writable");
    let restored = git::repair_before_run(&args.worktree, &before)?;
    // (No other thread reads the environment but through std's lock.) Not where git works
    // in a private view: the caller's environment passes unchanged there.
    if !repo.private_view_likely(choice.backend, args.keep_caps, &before.policy.worktree) {
        git::set_git_settings();
    }
    if args.net == NetPolicy::Proxy {
        egress::set_environment(egress::PORT);
    }
    phases::mark("repair");
    let (mut opened, repo) = if restored {
        drop(before);
        open()?
    } else {
        (before, repo)
    };
    phases::mark("writable_again");
    // The package caches (their variables go to the command only, `ExecSpec::env`); their private
    // directories that the command writes directly join the writable set.
    let caches = caches::prepare(
        &opened.policy.worktree,
        &opened
            .policy
            .writable
            .iter()
            .map(|r| r.path.clone())
            .collect::<Vec<_>>(),
        opened.state_writable(),
        overlays_possible(choice.backend, &facts.kernel),
        !args.no_package_caches,
    );
    opened.insert_derived(
        caches.writable.clone(),
        shofer_core::policy::RuleOrigin::PackageCache,
    );
    phases::mark("caches");
    let allow_unix = gate::AllowUnix::open(&args.allow_unix)?;
    let (paths_found, env_found) = secrets_found.take().ok_or_else(|| SetupError::Syscall {
        op: "finding the secret locations and variables",
        source: std::io::Error::other("the thread that looked them up panicked"),
    })?;
    let secrets = paths_found.resolve(&opened);
    secrets.check_cwd()?;
    secrets.check_fds([0, 1, 2].into_iter().chain(args.pass_fds.iter().copied()))?;
    // Before any thread that touches the environment or child exists, so every backend
    // starts the command without them.
    let env_withheld = secretenv::withhold(&args.keep_env, &env_found)?;
    if let Some(note) = secretenv::note(&env_withheld) {
        // Once per run: a second attempt (below) does not withhold again.
        eprintln!("{note}");
    }
    phases::mark("secrets");
    let step4 = Opened {
        policy: &opened,
        repo: &repo,
        allow_unix: &allow_unix,
        env_withheld: &env_withheld,
        secrets: &secrets,
        caches: &caches,
    };
    let mut told = Vec::new();
    let mut beside = Beside {
        limits: limits_preparing,
        ruleset: Some(ruleset_ahead),
    };
    loop {
        match attempt(&args, &facts, &choice, &step4, &mut beside, &mut told) {
            // The namespaces could not be built (before the command ran): `auto` chooses
            // again without them.
            Err(SetupError::Unusable(error::Unusable::Userns(why)))
                if auto
                    && args.report_fd.is_none()
                    && matches!(choice.backend, Backend::Layered | Backend::Userns) =>
            {
                facts.userns_failed(why);
                choice = choose(&facts)?;
            }
            outcome => return outcome,
        }
    }
}

/// What the set-up thread prepares for the first attempt that can use it.
struct Beside {
    /// The limits, for the backend chosen in step 3.
    limits: Option<limits::Preparing>,
    /// Landlock alone's ruleset, begun with the read rules (`None` inside for another backend).
    ruleset: Option<shofer_sys::thread::Take<Option<secretpaths::Ahead>>>,
}

/// What step 4 opened and decided once, for every attempt.
struct Opened<'a> {
    /// The writable set, its rule paths open.
    policy: &'a OpenedPolicy,
    /// The worktree's git layout.
    repo: &'a git::Repo,
    /// The `--allow-unix` sockets and directories, open.
    allow_unix: &'a gate::AllowUnix,
    /// The secret variables withheld from the command (names, sorted).
    env_withheld: &'a [String],
    /// The secret locations hidden, and their read rules.
    secrets: &'a secretpaths::Resolved,
    /// The package caches' private views.
    caches: &'a caches::Plan,
}

/// Whether the package caches can be overlays with `backend` on kernel `release`, or why
/// not (their variables are used instead).
fn overlays_possible(backend: Backend, release: &str) -> Result<(), String> {
    match backend {
        Backend::Layered | Backend::Userns if caches::kernel_overlays_in_userns(release) => Ok(()),
        Backend::Layered | Backend::Userns => Err(format!(
            "Linux {release} does not mount overlayfs in a user namespace (5.11 does)"
        )),
        Backend::Landlock => Err("Landlock alone has no mount namespace to overlay in".into()),
        Backend::Bwrap => Err("the bwrap backend does not overlay the caches".into()),
    }
}

/// Steps 4 (the run's messages and report) to 8 with `choice`. `beside`: the limits and the
/// ruleset being prepared since step 3, taken by the first attempt they suit. `told`
/// collects the stderr lines already printed (a second attempt does not repeat them). Also
/// returns whether a git restore failed (or a git object was destroyed).
fn attempt(
    args: &RunArgs,
    facts: &Facts,
    choice: &Choice,
    step4: &Opened<'_>,
    beside: &mut Beside,
    told: &mut Vec<String>,
) -> Result<(Outcome, bool), SetupError> {
    let Opened {
        policy: opened,
        repo,
        allow_unix,
        env_withheld,
        secrets,
        caches,
    } = *step4;
    // --net proxy on Landlock alone: the proxy listens on the host's loopback, at a port of
    // the kernel's choosing (no other thread reads the environment but under std's lock: the
    // variables follow it), and the gate admits inet calls to it and to the run's own
    // loopback servers only (gate::inet).
    let host_proxy = if args.net == NetPolicy::Proxy && choice.backend == Backend::Landlock {
        let (listener, port) = egress::host_listener().map_err(|source| SetupError::Syscall {
            op: "making the proxy's listener on the host's loopback",
            source,
        })?;
        egress::set_environment(port);
        Some((listener, port))
    } else {
        None
    };
    // The limits are set up beside the next steps (limits::Preparing), joined after git's.
    let userns = matches!(choice.backend, Backend::Layered | Backend::Userns);
    let limits = match beside.limits.take() {
        Some(preparing) if preparing.userns() == userns => preparing,
        _ => {
            let [procs, memory, cpu] = args.limits;
            limits::Preparing::start(
                || {},
                shofer_core::limits::Limits::resolve(
                    procs,
                    memory,
                    cpu,
                    shofer_sys::proc::mem_total(),
                ),
                userns,
                rustix::process::geteuid().is_root(),
            )
        }
    };
    let mut exec = exec_spec(args, choice.foreign_owner)?;
    exec.env = caches
        .env_set
        .iter()
        .map(|(k, v)| (*k, v.clone().into_os_string()))
        .collect();
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
    if let Some(note) = repo.note() {
        tell(note);
    }
    if let Some(note) = secretpaths::note(&secrets.not_hidden) {
        tell(note);
    }
    for (p, why) in &choice.degraded {
        tell(format!(
            "shofer-sandbox: warning: degraded ({}): {why}",
            p.key()
        ));
        if *p == shofer_core::policy::Protection::PathnameSockets {
            if let Err(gate) = facts.unix_gate() {
                tell(format!(
                    "shofer-sandbox: note: the unix socket gate: {gate}"
                ));
            }
        }
    }
    for (p, why) in &choice.hardening {
        tell(format!(
            "shofer-sandbox: hardening not enforced ({}): {why}",
            p.key()
        ));
    }
    if let Some((uid, gid)) = exec.foreign_owner {
        tell(match choice.backend {
            Backend::Landlock => format!("shofer-sandbox: note: the worktree belongs to uid {uid}: the command runs as uid {uid}, gid {gid} (Landlock alone has no read-only root to keep capabilities from reaching outside)"),
            Backend::Userns | Backend::Layered => format!("shofer-sandbox: note: the worktree belongs to uid {uid}: the command keeps CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER and CAP_FSETID inside its user namespace, every id mapped"),
            Backend::Bwrap => format!("shofer-sandbox: note: the worktree belongs to uid {uid}: bubblewrap drops every capability; use --keep-caps or another backend to write in it"),
        });
    }
    let net_refused: egress::serve::Refused = std::sync::Arc::default();
    let git_choice = git::Choice {
        backend: choice.backend,
        keep_caps: args.keep_caps,
        gate: choice.gate.clone(),
    };
    let mut git_run = git::Run::prepare(opened, repo, &git_choice, &mut tell)?;
    phases::mark("git");
    let limits = match limits.join() {
        Ok(limits) => limits,
        Err(why) => {
            git_run.finish(None);
            return Err(SetupError::Syscall {
                op: "setting the limits up",
                source: std::io::Error::other(why),
            });
        }
    };
    phases::mark("limits");
    exec.cgroup_procs = limits.procs_fds();
    exec.nproc = limits.nproc;
    for row in &limits.rows {
        if let Err(why) = &row.how {
            tell(format!(
                "shofer-sandbox: hardening not enforced (limit_{}): {} {}: {why}",
                row.key, row.key, row.value
            ));
        }
    }
    // From here every way out goes through `git_run.finish` (it removes the placeholders).
    let before = (|| -> Result<_, SetupError> {
        let mut report_file = None;
        if let Some(fd) = args.report_fd {
            let record = report::run(
                facts,
                choice,
                opened,
                git_run.report(),
                &allow_unix.paths,
                env_withheld,
                secrets,
            );
            let mut record = record;
            record["limits"] = report::limits(&limits.rows);
            record["package_caches"] = caches.report();
            report_file = Some(write_record(fd, &record)?);
        }
        let sockets = choice.unix_gate;
        // Landlock alone keeps the host's network: `listen` would bind a port unchecked.
        let listens = sockets && choice.backend == Backend::Landlock && args.net == NetPolicy::Deny;
        let inet = host_proxy
            .as_ref()
            .filter(|_| sockets)
            .map(|(_, port)| gate::inet::Inet {
                proxy: std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, *port)),
                refused: net_refused.clone(),
            });
        let mut handlers = git_run.handlers();
        // Landlock alone before ABI 6 scopes no signal (crate::signalgate).
        if choice.backend == Backend::Landlock && choice.abi < 6 && sockets {
            handlers.push(Box::new(signalgate::SignalGate::new()));
        }
        // The gate thread drops its capabilities when the command has none, except:
        // bubblewrap needs its privileges for its own set-up (loopback, mounts), which goes
        // through the gate too; a command switched to the worktree's owner is reached only
        // with CAP_SYS_PTRACE. Then the gate keeps them and drops them per call of an
        // unprivileged caller.
        let drop_caps =
            !args.keep_caps && choice.backend != Backend::Bwrap && exec.foreign_owner.is_none();
        let gate = if sockets || !handlers.is_empty() {
            let setup = gate::Setup::new(
                opened.worktree_fd(),
                allow_unix,
                drop_caps,
                (sockets, listens),
                handlers,
            );
            let setup = setup.map_err(|source| SetupError::Syscall {
                op: "preparing the unix socket gate",
                source,
            })?;
            Some(match inet {
                Some(inet) => setup.with_inet(inet),
                None => setup,
            })
        } else {
            None
        };
        Ok((report_file, gate))
    })();
    phases::mark("gate");
    let (mut report_file, gate) = match before {
        Ok(b) => b,
        Err(e) => {
            git_run.finish(None);
            return Err(e);
        }
    };
    let refused = gate.as_ref().map(|g| g.refused.clone());
    // 5.-7. plan, spawn, supervise
    // Safety: the caller handed us this descriptor with --status-fd and `exec_spec` checked
    // it is open; nothing else here owns it.
    let status = args.status_fd.map(|fd| unsafe { StatusFd::from_raw(fd) });
    // Landlock alone's ruleset as the set-up thread began it (given before it prepared the
    // limits, joined above).
    let ahead = match (choice.backend, beside.ruleset.take()) {
        (Backend::Landlock, Some(ahead)) => ahead.take().flatten(),
        _ => None,
    };
    // Landlock: this process becomes the guardian of the tree and the rest of the run goes on
    // in its child (guardian.rs), forked here while no thread runs yet.
    let outcome =
        guardian::split(choice.backend, exec.interactive).and_then(
            |caller_mask| match Plan::build(
                choice,
                opened,
                allow_unix,
                secrets,
                ahead,
                exec,
                spec::Layers {
                    overlays: caches.overlays.clone(),
                    ..git_run.layers()
                },
            ) {
                Ok(mut plan) => {
                    phases::mark("plan");
                    plan.spawned_gate = git_run.start();
                    let proxy = (args.net == NetPolicy::Proxy)
                        .then_some((&args.allow_domains, host_proxy.map(|(l, _)| l)));
                    supervised(plan, status, gate, proxy, &net_refused, caller_mask)
                }
                Err(PlanError::Setup(e)) => Err(e),
                Err(PlanError::NotRunnable { code, message }) => {
                    Ok(Outcome::NotExecuted(code, message))
                }
            },
        );
    phases::mark("command");
    let refused: Vec<String> = refused
        .and_then(|r| r.lock().ok().map(|r| r.clone()))
        .unwrap_or_default();
    if let (Some(file), false) = (report_file.as_mut(), refused.is_empty()) {
        let _ = writeln!(file, "{}", report::unix_refused(&refused));
    }
    let net_refused = net_refused.lock().map(|r| r.clone()).unwrap_or_default();
    if let (Some(file), false) = (report_file.as_mut(), net_refused.is_empty()) {
        let _ = writeln!(file, "{}", report::net_refused(&net_refused));
    }
    // 8. report: the whole tree is gone (or the command never started): put back what it
    // changed, name what it destroyed.
    let failed = git_run.finish(report_file.as_mut());
    phases::mark("git_finish");
    for line in limits.finish() {
        eprintln!("{line}");
    }
    phases::mark("limits_finish");
    outcome.map(|o| (o, failed))
}

/// The worktree's owner (uid, gid) when a root caller drops capabilities over a worktree that
/// root does not own, in the initial user namespace (where every id is mapped, so the
/// supervisor may map them all or switch to them); `None` otherwise.
fn foreign_owner(worktree: &std::path::Path, keep_caps: bool) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    if keep_caps || !rustix::process::geteuid().is_root() {
        return None;
    }
    let m = std::fs::metadata(worktree).ok()?;
    if m.uid() == 0 {
        return None;
    }
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let initial = map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    initial.then(|| (m.uid(), m.gid()))
}

/// The exec spec of `args` (over a worktree of `owner`, [`foreign_owner`]), after checking
/// the descriptors it names are open.
fn exec_spec(args: &RunArgs, owner: Option<(u32, u32)>) -> Result<ExecSpec, SetupError> {
    let named = args.pass_fds.iter().chain(args.report_fd.iter());
    for (&fd, given_to) in named
        .map(|fd| (fd, "--pass-fd or --report"))
        .chain(args.status_fd.iter().map(|fd| (fd, "--status-fd")))
    {
        if !shofer_sys::fd::fd_is_open(fd) {
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
        interactive: {
            use rustix::stdio::{stderr, stdin, stdout};
            [stdin(), stdout(), stderr()]
                .into_iter()
                .any(rustix::termios::isatty)
        },
        caps: if args.keep_caps {
            CapPolicy::Keep
        } else {
            CapPolicy::Drop
        },
        grace: tree::KILL_GRACE,
        keep_descendants: args.keep_descendants,
        foreign_owner: owner,
        net_deny: args.net == NetPolicy::Deny,
        net_proxy: args.net == NetPolicy::Proxy,
        cgroup_procs: Vec::new(),
        nproc: None,
        env: Vec::new(),
    })
}

/// Writes the `--report` record to `fd` and keeps it, close-on-exec (the command never
/// sees it), for the closing records at the end: the refused unix sockets, and `git_restore`
/// when git files had to be restored (`gitrun`).
fn write_record(fd: i32, record: &serde_json::Value) -> Result<std::fs::File, SetupError> {
    // Safety: the caller handed us this descriptor with --report and we checked it is open;
    // we own it from here.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    writeln!(file, "{record}").map_err(|e| SetupError::Syscall {
        op: "writing the --report record",
        source: e,
    })?;
    shofer_sys::fd::set_cloexec(fd, true).map_err(|e| SetupError::Syscall {
        op: "fcntl on the --report descriptor",
        source: e,
    })?;
    Ok(file)
}

/// Steps 6 and 7: spawn, then supervise until the tree is gone (serving the unix-socket
/// gate, when it runs, from a thread).
fn supervised(
    mut plan: Plan<'_>,
    status: Option<StatusFd>,
    gate: Option<gate::Setup>,
    proxy: Option<(&shofer_core::egress::AllowList, Option<OwnedFd>)>,
    net_refused: &egress::serve::Refused,
    caller_mask: Option<libc::sigset_t>,
) -> Result<Outcome, SetupError> {
    let mut gate = gate;
    match spawn::spawn(&plan, gate.as_mut(), caller_mask)? {
        Spawn::NotExecuted(code, msg) => Ok(Outcome::NotExecuted(code, msg)),
        Spawn::Running(mut running) => {
            phases::mark("spawn");
            if let (Some(setup), Some((listener, diag))) = (gate, running.gate.take()) {
                if let Err(e) = setup.start(listener, diag) {
                    // Nobody would answer the command's gated calls: stop it instead.
                    // Killing our own child.
                    if let Some(pid) = rustix::process::Pid::from_raw(running.main) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                    eprintln!("shofer-sandbox: the unix socket gate could not start: {e}");
                }
            }
            if let Some((allow, host)) = proxy {
                // bubblewrap's child waits (--block-fd) until its listener is made; on
                // Landlock alone it was made on the host's loopback before the command.
                let listener = match &mut plan.confinement {
                    plan::Confinement::Bwrap(launch) => launch.proxy_listener(),
                    _ => host.or_else(|| running.proxy.take()),
                };
                let started = listener.map(|l| egress::serve::start(l, allow.clone(), net_refused));
                if !matches!(started, Some(Ok(()))) {
                    // No way out but the proxy, and no proxy: stop before the command runs on.
                    // Killing our own child.
                    if let Some(pid) = rustix::process::Pid::from_raw(running.main) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                    eprintln!("shofer-sandbox: the proxy of --net proxy could not start");
                }
            }
            let mut supervisor = supervise::Supervisor::new(running, plan, status);
            Ok(Outcome::Ran(supervisor.wait_loop()))
        }
    }
}
