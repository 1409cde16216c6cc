//! The supervisor: `shofer-sandbox` itself, between its caller and the sandboxed command
//! (DESIGN §2.2).
//!
//! # What the kernel gives us, and the order things happen in
//!
//! - **Child subreaper** (`PR_SET_CHILD_SUBREAPER`, Linux 3.4): a descendant whose parent dies
//!   is re-parented to us instead of to init, so `setsid` and double forks cannot leave the
//!   tree; every descendant is always either our child or below one.
//! - **Dying with the caller**: `PR_SET_PDEATHSIG(SIGTERM)`, then a `getppid()` check for the
//!   race where the caller died before the prctl. SIGTERM kills the tree (below). Caveat: the
//!   kernel sends it when the *thread* that forked us exits, as with bubblewrap's
//!   `--die-with-parent`.
//! - **Signals** are blocked before `fork`, so none is lost between fork and the wait loop; the
//!   child restores the caller's mask and default dispositions (including SIGPIPE, which the
//!   Rust runtime ignores) before exec. The loop takes them synchronously with `sigwaitinfo`:
//!   SIGCHLD reaps; SIGINT, SIGHUP, SIGQUIT, SIGWINCH, SIGUSR1 and SIGUSR2 are forwarded to
//!   the command (its process group when it has its own session); SIGTERM kills the tree. A
//!   signal the terminal itself generated (`si_code == SI_KERNEL`) already reached the command
//!   in the same foreground process group and is not sent twice.
//! - **Exec errors** come back over a close-on-exec pipe: EOF means `execve` succeeded; a
//!   record means a setup step or `execve` failed, and which.
//! - **The end**: when the main process exits, remaining descendants get SIGTERM (and
//!   SIGCONT, so stopped ones can act on it), a grace period, then SIGKILL, repeated until
//!   `waitpid` reports no children — a fork loop cannot outrun it because each pass kills
//!   every process it sees and orphans come back to us. `--keep-descendants` waits for them
//!   instead. Descendants are found through `/proc/*/stat` and signalled through pidfds
//!   (Linux 5.3), re-checking the parent after opening, so a recycled PID is never signalled.
//!
//! What this does not guarantee: if the supervisor is SIGKILLed, the command gets SIGKILL
//! (its own death signal) but its descendants are re-parented to the next subreaper up.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use landlock::RulesetCreated;

use crate::error::SetupError;
use crate::{capabilities, namespaces, seccomp, sys};

/// Everything the child needs between `fork` and `execve`.
pub struct Launch {
    /// `argv`, `argv[0]` looked up in `$PATH` as by `execvp(3)`.
    pub argv: Vec<CString>,
    /// A terminal is on stdin, stdout or stderr: keep the session (job control, SIGWINCH).
    pub interactive: bool,
    /// Descriptors above 2 that survive exec.
    pub pass_fds: Vec<RawFd>,
    /// Drop every capability (root, or file capabilities) before exec.
    pub drop_caps: bool,
    /// The Landlock ruleset to apply last before exec.
    pub landlock: Option<RulesetCreated>,
    /// Wait for descendants after the main process exits instead of killing them.
    pub keep_descendants: bool,
    /// Build user, mount and PID namespaces first (the `userns` and `layered` backends).
    pub namespaces: Option<NsSetup>,
    /// Set `no_new_privs` before exec (off only in front of a setuid bubblewrap).
    pub no_new_privs: bool,
    /// Install the TIOCSTI/TIOCLINUX seccomp filter (needs `no_new_privs` unless privileged).
    pub seccomp: bool,
    /// bubblewrap's `--info-fd` pipe (read end, write end): the supervisor learns the
    /// command's PID from it, to forward signals past bubblewrap, which does not.
    pub bwrap_info: Option<(OwnedFd, OwnedFd)>,
    /// Time between SIGTERM and SIGKILL when killing the tree.
    pub grace: Duration,
    /// Written to (one byte) once the command's process exists: the git watcher's gate
    /// (`crate::gitguard::Watcher`), which must not run during a fork-like clone.
    pub spawned_gate: Option<RawFd>,
}

/// The namespace backends' part of a [`Launch`].
pub struct NsSetup {
    /// What process A mounts and maps.
    pub plan: namespaces::Plan,
    /// Also unshare the network namespace (`--net deny`).
    pub net_deny: bool,
    /// The Landlock ABI of `Launch::landlock`, to add the private `/dev/shm` rule.
    pub landlock_abi: u32,
}

/// Child-side setup steps, reported back to the supervisor when one fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Stage {
    Session = 1,
    DeathSignal,
    Descriptors,
    NoNewPrivs,
    Capabilities,
    Seccomp,
    Landlock,
    Exec,
    IdMaps,
    Mounts,
    Fork,
}

impl Stage {
    fn from_u8(b: u8) -> Option<Stage> {
        use Stage::*;
        [
            Session,
            DeathSignal,
            Descriptors,
            NoNewPrivs,
            Capabilities,
            Seccomp,
            Landlock,
            Exec,
            IdMaps,
            Mounts,
            Fork,
        ]
        .into_iter()
        .find(|s| *s as u8 == b)
    }

    fn describe(self) -> &'static str {
        match self {
            Stage::Session => "setsid",
            Stage::DeathSignal => "prctl(PR_SET_PDEATHSIG)",
            Stage::Descriptors => "closing inherited descriptors",
            Stage::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)",
            Stage::Capabilities => "dropping capabilities",
            Stage::Seccomp => "installing the seccomp filter",
            Stage::Landlock => "landlock_restrict_self",
            Stage::Exec => "execve",
            Stage::IdMaps => "writing uid_map/gid_map",
            Stage::Mounts => "mount",
            Stage::Fork => "fork",
        }
    }
}

const FORWARDED: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGWINCH,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// How a run ended, before mapping to an exit status.
pub enum Outcome {
    /// The command ran; its raw wait status (or our SIGTERM status if it was killed).
    Ran(i32),
    /// The command could not be executed: 126 or 127 with a message.
    NotExecuted(i32, String),
}

fn sigset(signals: &[libc::c_int]) -> libc::sigset_t {
    // Safety: sigemptyset initialises the set; sigaddset with valid signal numbers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Runs `launch` under supervision and returns how it ended.
///
/// # Errors
/// [`SetupError`] when the supervisor cannot be set up (`fork`, `pipe2`) or a child-side
/// setup step before `execve` fails; the command has then not run.
pub fn run(mut launch: Launch) -> Result<Outcome, SetupError> {
    // Safety: prctl with integer arguments only changes this process's attributes.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(SetupError::last_os("prctl(PR_SET_CHILD_SUBREAPER)"));
    }
    // Safety: getppid cannot fail.
    let caller = unsafe { libc::getppid() };
    // Safety: as above.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) } != 0 {
        return Err(SetupError::last_os("prctl(PR_SET_PDEATHSIG)"));
    }
    // Safety: getppid cannot fail.
    if unsafe { libc::getppid() } != caller {
        return Err(SetupError::Usage(
            "the caller exited before the command started".into(),
        ));
    }

    let mut handled = vec![libc::SIGCHLD, libc::SIGTERM];
    handled.extend(FORWARDED);
    let set = sigset(&handled);
    // Safety: an all-zero sigset_t is a valid out-parameter for sigprocmask.
    let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // Safety: both sets are valid; blocking only defers delivery.
    if unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old_mask) } != 0 {
        return Err(SetupError::last_os("sigprocmask"));
    }

    let (err_read, err_write) = sys::pipe_cloexec().map_err(|source| SetupError::Syscall {
        op: "pipe2",
        source,
    })?;

    // Safety: getpid cannot fail.
    let supervisor = unsafe { libc::getpid() };
    let argv0 = launch.argv[0].clone();
    let keep_descendants = launch.keep_descendants;
    let interactive = launch.interactive;
    let namespaced = launch.namespaces.is_some();
    let grace = launch.grace;
    let bwrap_info = launch.bwrap_info.take();
    let spawned_gate = launch.spawned_gate.take();
    let args = ChildArgs {
        launch: Some(launch),
        supervisor,
        old_mask,
        err: err_write.as_raw_fd(),
    };
    let pid = if namespaced {
        spawn_namespaced(args)?
    } else {
        spawn_child(args)?
    };
    drop(err_write);
    if let Some(gate) = spawned_gate {
        // Safety: one byte to the watcher's pipe, which the caller keeps open.
        unsafe { libc::write(gate, b"s".as_ptr().cast(), 1) };
    }
    let bwrap_info = bwrap_info.map(|(read, write)| {
        drop(write);
        read
    });

    let main = pid;
    if let Some((stage, errno)) = read_failure(&err_read) {
        let mut status = 0;
        // Safety: reaping our own child.
        unsafe { libc::waitpid(main, &mut status, 0) };
        let err = io::Error::from_raw_os_error(errno);
        let name = argv0.to_string_lossy();
        return match stage {
            Stage::Exec if errno == libc::ENOENT || errno == libc::ENOTDIR => Ok(
                Outcome::NotExecuted(127, format!("{name}: command not found")),
            ),
            Stage::Exec => Ok(Outcome::NotExecuted(
                126,
                format!("{name}: {}", crate::sys::strerror(errno)),
            )),
            Stage::IdMaps | Stage::Mounts => Err(SetupError::NoBackend(format!(
                "user namespaces: {}",
                namespaces::failure_reason(stage.describe(), errno)
            ))),
            _ => Err(SetupError::Syscall {
                op: stage.describe(),
                source: err,
            }),
        };
    }
    drop(err_read);
    // Behind bubblewrap, signals go to the command's own session (bwrap --new-session).
    let forward_target = match bwrap_info.and_then(crate::bwrap::child_pid) {
        Some(command) => -command,
        None if !interactive && !namespaced => -main,
        // In a namespace, init (the main process) forwards to the command itself.
        None => main,
    };

    let mut sup = Supervisor {
        main,
        forward_target,
        interactive,
        grace,
        main_status: None,
        set,
    };
    Ok(Outcome::Ran(sup.wait_loop(keep_descendants)))
}

/// Writes the failure record (stage byte + errno) for the supervisor and exits 125 without
/// running destructors (in the `CLONE_VM` child they would free memory the supervisor owns).
fn report_failure(err: RawFd, stage: Stage, e: io::Error) -> ! {
    let mut rec = [0u8; 5];
    rec[0] = stage as u8;
    rec[1..].copy_from_slice(&e.raw_os_error().unwrap_or(libc::EIO).to_ne_bytes());
    // Safety: writing a small buffer to our pipe, then _exit.
    unsafe {
        libc::write(err, rec.as_ptr().cast(), rec.len());
        libc::_exit(125)
    }
}

/// Reads one failure record (stage byte + errno) from the exec-error pipe; `None` on EOF.
fn read_failure(fd: &OwnedFd) -> Option<(Stage, i32)> {
    let mut buf = [0u8; 5];
    let mut got = 0;
    while got < buf.len() {
        // Safety: reading into the unfilled tail of `buf`.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf[got..].as_mut_ptr().cast(),
                buf.len() - got,
            )
        };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    if got < buf.len() {
        return None;
    }
    let errno = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
    Some((Stage::from_u8(buf[0])?, errno))
}

/// What the child needs; lives on the supervisor's stack while the child runs.
struct ChildArgs {
    launch: Option<Launch>,
    supervisor: libc::pid_t,
    old_mask: libc::sigset_t,
    err: RawFd,
}

/// Size of the child's own stack while it shares our memory (bytes).
const CHILD_STACK: usize = 256 * 1024;

/// Starts the child with `clone(CLONE_VM | CLONE_VFORK)`, as glibc's `posix_spawn` does: no
/// page tables are copied and no copy-on-write faults are taken (on these VMs a plain `fork`
/// costs more than everything else the supervisor does). The supervisor stays suspended until
/// the child has exec'd or exited, so the child may use the shared heap without racing it;
/// the child runs on its own stack, and everything it changes (signal mask and dispositions,
/// session, credentials, seccomp, Landlock) is per task, not per address space.
fn spawn_child(mut args: ChildArgs) -> Result<libc::pid_t, SetupError> {
    // Safety: an anonymous private mapping; checked for MAP_FAILED below.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            CHILD_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(SetupError::last_os("mmap"));
    }
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // Safety: `arg` is the `ChildArgs` below, alive while the parent is suspended.
        let args = unsafe { &mut *(arg as *mut ChildArgs) };
        let launch = args.launch.take().expect("launch is set once");
        child(launch, args.supervisor, &args.old_mask, args.err)
    }
    // Safety: the stack grows down from the top of our mapping; `args` outlives the child's
    // use of it because CLONE_VFORK suspends us until the child execs or exits.
    let pid = unsafe {
        libc::clone(
            entry,
            (stack as *mut u8).add(CHILD_STACK).cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut args as *mut ChildArgs).cast(),
        )
    };
    let clone_err = io::Error::last_os_error();
    // Safety: unmapping the stack we mapped; the child no longer runs on it.
    unsafe { libc::munmap(stack, CHILD_STACK) };
    if pid < 0 {
        return Err(SetupError::Syscall {
            op: "clone",
            source: clone_err,
        });
    }
    Ok(pid)
}

/// Starts process A in new user, mount and PID namespaces (and a network namespace with
/// `--net deny`) with a fork-like `clone`: A outlives the exec of the command, so it cannot
/// share our memory.
fn spawn_namespaced(args: ChildArgs) -> Result<libc::pid_t, SetupError> {
    let net = args
        .launch
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .is_some_and(|n| n.net_deny);
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID;
    if net {
        flags |= libc::CLONE_NEWNET;
    }
    // Safety: no new stack and no CLONE_VM: the child gets a copy of this single-threaded
    // process, like fork(2).
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags | libc::SIGCHLD, 0, 0, 0, 0) };
    if pid < 0 {
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return Err(SetupError::NoBackend(format!(
            "user namespaces: {}",
            namespaces::failure_reason("clone", errno)
        )));
    }
    if pid == 0 {
        namespace_init(args);
    }
    Ok(pid as libc::pid_t)
}

/// Process A: PID 1 of the new namespace. Builds it, forks the command, then reaps and
/// forwards signals until the command exits, and exits with its status (the kernel then kills
/// whatever is left in the namespace).
fn namespace_init(mut args: ChildArgs) -> ! {
    let err = args.err;
    let fail = |stage: Stage, e: io::Error| -> ! { report_failure(err, stage, e) };
    let mut launch = args.launch.take().expect("launch is set once");
    // Safety: prctl with integer arguments. SIGKILL for PID 1 takes the namespace with it.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    let ns = launch.namespaces.take().expect("namespaced launch");
    if let Err((step, e)) = namespaces::build(&ns.plan) {
        let stage = match step {
            namespaces::NsStep::IdMaps => Stage::IdMaps,
            namespaces::NsStep::Mounts => Stage::Mounts,
        };
        fail(stage, e);
    }
    // The private /dev/shm and the new devpts are new inodes: Landlock needs rules for them.
    for dir in ["/dev/shm", "/dev/pts"] {
        let Some(ruleset) = launch.landlock.take() else {
            break;
        };
        let rule = crate::paths::open_following(std::path::Path::new(dir)).map(|fd| {
            landlock::PathBeneath::new(fd, shofer_core::rights::fs_write_rights(ns.landlock_abi))
        });
        match rule.map(|r| landlock::RulesetCreatedAttr::add_rule(ruleset, r)) {
            Ok(Ok(ruleset)) => launch.landlock = Some(ruleset),
            Ok(Err(e)) => fail(Stage::Landlock, io::Error::other(e.to_string())),
            Err(e) => fail(Stage::Landlock, e),
        }
    }
    drop(ns);
    let interactive = launch.interactive;
    let keep_descendants = launch.keep_descendants;
    let mut command_status = None;
    // Safety: single-threaded; the child execs or exits.
    let command = unsafe { libc::fork() };
    if command < 0 {
        fail(Stage::Fork, io::Error::last_os_error());
    }
    if command == 0 {
        child(launch, 1, &args.old_mask, err);
    }
    drop(launch);
    // Safety: closing our copy of the error pipe, so the supervisor sees EOF at exec.
    unsafe { libc::close(err) };

    let mut handled = vec![libc::SIGCHLD, libc::SIGTERM];
    handled.extend(FORWARDED);
    let set = sigset(&handled);
    loop {
        // Safety: siginfo_t is plain data filled by sigwaitinfo.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // Safety: the set holds signals blocked in this process (inherited mask).
        let sig = unsafe { libc::sigwaitinfo(&set, &mut info) };
        if sig == libc::SIGCHLD {
            loop {
                let mut status = 0;
                // Safety: reaping any child of init, non-blocking.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if pid == command {
                    command_status = Some(status);
                }
                let none_left = pid < 0;
                if let Some(status) = command_status {
                    if !keep_descendants || none_left {
                        // Safety: exiting PID 1; the kernel kills the rest of the namespace.
                        unsafe { libc::_exit(crate::wait_status_to_exit(status)) };
                    }
                }
                if pid <= 0 {
                    break;
                }
            }
        } else if sig > 0
            && command_status.is_none()
            && !(interactive && info.si_code == libc::SI_KERNEL)
        {
            let target = if interactive { command } else { -command };
            // Safety: signalling our own, unreaped child (or its process group).
            unsafe { libc::kill(target, sig) };
        }
    }
}

/// The child between `clone` and `execve`. Never returns: it execs or exits 125.
fn child(launch: Launch, expected_parent: libc::pid_t, old_mask: &libc::sigset_t, err: RawFd) -> ! {
    let fail = |stage: Stage, e: io::Error| -> ! { report_failure(err, stage, e) };
    let check = |stage: Stage, ret: libc::c_int| {
        if ret != 0 {
            fail(stage, io::Error::last_os_error());
        }
    };

    // Safety: restoring default dispositions and the caller's signal mask; valid arguments.
    unsafe {
        for s in [libc::SIGPIPE, libc::SIGCHLD, libc::SIGTERM]
            .into_iter()
            .chain(FORWARDED)
        {
            libc::signal(s, libc::SIG_DFL);
        }
        libc::sigprocmask(libc::SIG_SETMASK, old_mask, std::ptr::null_mut());
    }
    if !launch.interactive {
        // A new session: no controlling terminal, and a process group we can signal whole.
        // Safety: setsid takes no arguments.
        if unsafe { libc::setsid() } < 0 {
            fail(Stage::Session, io::Error::last_os_error());
        }
    }
    // Safety: prctl/getppid with integer arguments.
    unsafe {
        check(
            Stage::DeathSignal,
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0),
        );
        if libc::getppid() != expected_parent {
            libc::_exit(125);
        }
    }
    if let Err(e) = sys::cloexec_from_3(&launch.pass_fds) {
        fail(Stage::Descriptors, e);
    }
    // no_new_privs first: seccomp and Landlock need it without CAP_SYS_ADMIN, and it keeps a
    // setuid program from regaining what we drop below.
    if launch.no_new_privs {
        // Safety: prctl with integer arguments.
        check(Stage::NoNewPrivs, unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        });
    }
    if launch.drop_caps {
        if let Err(e) = capabilities::drop_all() {
            fail(Stage::Capabilities, e);
        }
    }
    if launch.seccomp {
        if let Err(e) = seccomp::refuse_terminal_injection() {
            fail(Stage::Seccomp, e);
        }
    }
    // Landlock last before exec: after it, this process can no longer write its own setup.
    if let Some(ruleset) = launch.landlock {
        match ruleset.restrict_self() {
            Ok(status) if status.ruleset == landlock::RulesetStatus::FullyEnforced => {}
            Ok(_) => fail(
                Stage::Landlock,
                io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            ),
            Err(e) => fail(Stage::Landlock, io::Error::other(e.to_string())),
        }
    }
    let e = exec_search(&launch.argv);
    std::mem::forget(launch.argv);
    fail(Stage::Exec, e)
}

/// `execvp(3)` with a shell's choice of error: `$PATH` is searched in order, directories we
/// cannot search or that lack the name are skipped, and the error is `EACCES` (126) only when
/// a matching regular file exists but cannot be executed, else `ENOENT` (127). A file the
/// kernel cannot execute (`ENOEXEC`) is run by `/bin/sh`, as `execvp` and shells do.
/// Returns only on failure.
fn exec_search(argv: &[CString]) -> io::Error {
    if argv[0].as_bytes().contains(&b'/') {
        return exec_one(&argv[0], argv);
    }
    let mut denied = false;
    for candidate in path_candidates(&argv[0]) {
        let err = exec_one(&candidate, argv);
        match err.raw_os_error() {
            Some(libc::EACCES) => denied |= is_regular_file(&candidate),
            Some(
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ELOOP | libc::ENAMETOOLONG,
            ) => {}
            _ => return err,
        }
    }
    io::Error::from_raw_os_error(if denied { libc::EACCES } else { libc::ENOENT })
}

/// Where `$PATH` lookup would find `name`, as [`exec_search`] decides it, without executing
/// anything: for bubblewrap, which reports every exec failure as exit 1. The sandbox sees the
/// host's root read-only, so the host's answer is the sandbox's.
///
/// # Errors
/// `(126 or 127, message)` as for a failed exec.
pub fn resolve_command(name: &CString) -> Result<CString, (i32, String)> {
    let shown = name.to_string_lossy().into_owned();
    let executable = |p: &CString| {
        // Safety: NUL-terminated path.
        is_regular_file(p) && unsafe { libc::access(p.as_ptr(), libc::X_OK) } == 0
    };
    let not_executable = || (126, format!("{shown}: {}", sys::strerror(libc::EACCES)));
    if name.as_bytes().contains(&b'/') {
        if executable(name) {
            return Ok(name.clone());
        }
        if is_regular_file(name) || std::path::Path::new(&shown).is_dir() {
            return Err(not_executable());
        }
        return Err((127, format!("{shown}: command not found")));
    }
    let mut denied = false;
    for candidate in path_candidates(name) {
        if executable(&candidate) {
            return Ok(candidate);
        }
        denied |= is_regular_file(&candidate);
    }
    Err(if denied {
        not_executable()
    } else {
        (127, format!("{shown}: command not found"))
    })
}

/// `<dir>/<name>` for each directory of `$PATH` in order (an empty entry is `.`; no `$PATH`
/// means `/usr/local/bin:/usr/bin:/bin`), as `execvp(3)` searches them.
fn path_candidates(name: &CString) -> Vec<CString> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())
        .split(|&b| b == b':')
        .filter_map(|dir| {
            let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
            let mut candidate = dir.to_vec();
            candidate.push(b'/');
            candidate.extend_from_slice(name.as_bytes());
            CString::new(candidate).ok()
        })
        .collect()
}

fn exec_one(path: &CString, argv: &[CString]) -> io::Error {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // Safety: NULL-terminated arrays of NUL-terminated strings that outlive the call.
    unsafe { libc::execv(path.as_ptr(), ptrs.as_ptr()) };
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::ENOEXEC) {
        return err;
    }
    let sh = c"/bin/sh";
    let mut script: Vec<*const libc::c_char> = vec![sh.as_ptr(), path.as_ptr()];
    script.extend(argv[1..].iter().map(|a| a.as_ptr()));
    script.push(std::ptr::null());
    // Safety: as above.
    unsafe { libc::execv(sh.as_ptr(), script.as_ptr()) };
    io::Error::last_os_error()
}

fn is_regular_file(path: &CString) -> bool {
    // Safety: `st` is filled by stat on success; `path` is NUL-terminated.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::stat(path.as_ptr(), &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG
    }
}

struct Supervisor {
    main: libc::pid_t,
    /// Where forwarded signals go: a PID, or a process group as its negation.
    forward_target: libc::pid_t,
    interactive: bool,
    grace: Duration,
    main_status: Option<i32>,
    set: libc::sigset_t,
}

/// Raw wait status of a process killed by SIGTERM, used when the tree is stopped before the
/// main process is reaped.
const TERMINATED: i32 = libc::SIGTERM;

impl Supervisor {
    /// Waits for the main process, forwarding signals; then ends the tree. Returns the main
    /// process's raw wait status.
    fn wait_loop(&mut self, keep_descendants: bool) -> i32 {
        loop {
            // Safety: siginfo_t is plain data filled by sigwaitinfo.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // Safety: `set` holds only signals blocked in this process.
            let sig = unsafe { libc::sigwaitinfo(&self.set, &mut info) };
            if sig < 0 {
                continue; // EINTR
            }
            match sig {
                libc::SIGCHLD => {
                    let none_left = self.reap();
                    if self.main_status.is_some() && (!keep_descendants || none_left) {
                        break;
                    }
                }
                libc::SIGTERM => {
                    self.kill_tree();
                    return self.main_status.unwrap_or(TERMINATED);
                }
                _ => self.forward(sig, &info),
            }
        }
        self.kill_tree();
        self.main_status.unwrap_or(TERMINATED)
    }

    fn forward(&self, sig: libc::c_int, info: &libc::siginfo_t) {
        if self.main_status.is_some() {
            return;
        }
        if self.interactive && info.si_code == libc::SI_KERNEL {
            return; // the terminal sent it to the whole foreground group already
        }
        // Safety: signalling our own descendant (or its process group); the main process is
        // not reaped yet, so its tree's PIDs cannot have been recycled under us.
        unsafe { libc::kill(self.forward_target, sig) };
    }

    /// Reaps every exited child; records the main process's status. Returns true when no
    /// child is left.
    fn reap(&mut self) -> bool {
        loop {
            let mut status = 0;
            // Safety: waitpid on any child, non-blocking.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid == self.main {
                self.main_status = Some(status);
            } else if pid == 0 {
                return false;
            } else if pid < 0 {
                return true; // ECHILD
            }
        }
    }

    /// SIGTERM (with SIGCONT) to every descendant, the grace period, then SIGKILL until no
    /// child is left.
    fn kill_tree(&mut self) {
        if self.reap() {
            return;
        }
        signal_descendants(libc::SIGTERM);
        signal_descendants(libc::SIGCONT);
        let deadline = Instant::now() + self.grace;
        while Instant::now() < deadline {
            if self.reap() {
                return;
            }
            self.wait_sigchld(deadline.saturating_duration_since(Instant::now()));
        }
        loop {
            signal_descendants(libc::SIGKILL);
            if self.reap() {
                return;
            }
            self.wait_sigchld(Duration::from_millis(10));
        }
    }

    fn wait_sigchld(&self, timeout: Duration) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        let chld = sigset(&[libc::SIGCHLD]);
        // Safety: valid set and timeout; a NULL info pointer is allowed.
        unsafe { libc::sigtimedwait(&chld, std::ptr::null_mut(), &ts) };
    }
}

/// Every descendant of this process, from `/proc/*/stat`.
fn descendants() -> Vec<(libc::pid_t, libc::pid_t)> {
    // Safety: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let mut procs: Vec<(libc::pid_t, libc::pid_t)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if let Some(ppid) = parent_of(pid) {
                procs.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![me];
    let mut found = Vec::new();
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for &(pid, ppid) in &procs {
            if ppid == parent && pid != me {
                tree.push(pid);
                found.push((pid, ppid));
            }
        }
        i += 1;
    }
    found
}

/// The parent PID from `/proc/<pid>/stat` (the field after the `)` that ends `comm`).
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Sends `sig` to every descendant through a pidfd, after checking that the process behind
/// the pidfd still has the parent we saw (so a recycled PID is left alone).
fn signal_descendants(sig: libc::c_int) {
    for (pid, ppid) in descendants() {
        match sys::pidfd_open(pid) {
            Ok(pidfd) => {
                if parent_of(pid) == Some(ppid) {
                    let _ = sys::pidfd_send_signal(&pidfd, sig);
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                // Before Linux 5.3: plain kill, racing PID reuse as every tool did then.
                // Safety: kill with a PID we just saw below us.
                unsafe { libc::kill(pid, sig) };
            }
            Err(_) => {} // already gone
        }
    }
}
