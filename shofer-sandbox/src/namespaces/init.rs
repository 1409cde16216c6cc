//! Process A of the namespace backends: PID 1 of the new namespaces (step 7 of [`super`]'s
//! module docs).
//!
//! - Entry point: [`run`], called by [`crate::spawn`] in the child of its fork-like `clone`
//!   (a copy of the single-threaded supervisor: A may allocate). It builds the namespaces
//!   ([`super::mounts::build`]), starts the command with [`crate::exec::spawn_child`], then
//!   reaps, forwards signals and exits with the command's status.
//! - Never returns: a setup failure goes to the supervisor through [`crate::childfail`]
//!   (exit 125), everything else ends in `_exit`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use rustix::process::{Pid, Signal};
use shofer_sys::process::sigset;
use shofer_sys::signal;

use super::mounts::{build, NsStep};
use super::Setup;
use crate::childfail::{report_failure, Stage};
use crate::error::SetupError;
use crate::exec::{spawn_child, ChildArgs};
use crate::paths;
use crate::signals::{reap_any, wait_status_to_exit, FORWARDED};

/// Process A (step 7 of the module docs): PID 1 of the new namespaces. Builds them, forks the
/// command (B), then reaps and forwards signals until B exits, and exits with its status (the
/// kernel then kills whatever is left in the namespace). With `keep_descendants` it waits for
/// every process of the namespace first, and writes B's raw wait status to `main_exit` (if
/// given) the moment B exits. With `listener` (`--net proxy`), A first makes the proxy's
/// listener in its network namespace and sends it to the supervisor over that socket; with
/// `ready`, A then waits for the supervisor's byte on it (every id mapped).
pub(crate) fn run(
    args: &ChildArgs<'_>,
    setup: &Setup<'_>,
    keep_descendants: bool,
    main_exit: Option<BorrowedFd<'_>>,
    ready: Option<(BorrowedFd<'_>, RawFd)>,
    listener: Option<RawFd>,
) -> ! {
    let err = args.err;
    let fail = |stage: Stage, e: io::Error| -> ! { report_failure(err, stage, e) };
    crate::phases::forget_marks();
    // SIGKILL for PID 1 takes the namespace with it.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    if let Some(sock) = listener {
        // Safety: A's copy of the supervisor's socket (A owns its copies: it never returns
        // into the code that owns the originals), closed here and never used again.
        let sock = unsafe { OwnedFd::from_raw_fd(sock) };
        let sent =
            crate::egress::make_listener(true).and_then(|l| crate::gate::netns::send_fd(&sock, &l));
        if let Err(e) = sent {
            fail(Stage::ProxyListener, e.into());
        }
    }
    if let Some((read, write)) = ready {
        // Our copy of the write end goes (so a supervisor that gives up means EOF), then a
        // one-byte read from the pipe it writes once the maps are in.
        // Safety: closing our copy of the supervisor's descriptor (A owns its copies: it never
        // returns into the code that owns the originals), never used again.
        unsafe { rustix::io::close(write) };
        let mut byte = [0u8];
        if rustix::io::read(read, &mut byte) != Ok(1) {
            fail(Stage::IdMaps, io::Error::from_raw_os_error(libc::EPERM));
        }
    }
    crate::phases::mark("ready");
    if let Err((step, e)) = build(setup) {
        let stage = match step {
            NsStep::IdMaps => Stage::IdMaps,
            NsStep::Namespace => Stage::NamespaceMounts,
            NsStep::Mounts => Stage::Mounts,
        };
        fail(stage, e);
    }
    crate::phases::mark("readonly");
    // The private /dev/shm and the new devpts are new inodes: Landlock needs rules for them;
    // when it handles reading, so do the new /proc and /dev (a rule on the host's /proc or
    // /dev does not reach the mounts over them: Landlock skips a covered mount point).
    let extended = setup.landlock.as_ref().map(|layered| {
        let mut ruleset = match layered.ruleset.try_clone() {
            Ok(r) => r,
            Err(e) => fail(Stage::Landlock, e),
        };
        let read = if layered.reads {
            landlock::AccessFs::ReadFile | landlock::AccessFs::ReadDir
        } else {
            landlock::BitFlags::EMPTY
        };
        let write = shofer_core::rights::fs_write_rights(layered.abi);
        let rules = [
            (Path::new("/dev/shm"), write | read),
            (Path::new("/dev/pts"), write | read),
            (Path::new("/proc"), read),
            (Path::new("/dev"), read),
        ];
        // The package caches' overlays are new mounts too.
        let overlays = setup
            .overlays
            .iter()
            .map(|o| (o.target.as_path(), write | read));
        for (dir, rights) in rules
            .into_iter()
            .chain(overlays)
            .filter(|(_, r)| !r.is_empty())
        {
            let rule = paths::open_following(dir).map(|fd| {
                // Not RESOLVE_UNIX: only the worktree and --allow-unix paths get it.
                landlock::PathBeneath::new(fd, rights & !landlock::AccessFs::ResolveUnix)
            });
            match rule.map(|r| landlock::RulesetCreatedAttr::add_rule(ruleset, r)) {
                Ok(Ok(r)) => ruleset = r,
                Ok(Err(e)) => fail(Stage::Landlock, io::Error::other(e.to_string())),
                Err(e) => fail(Stage::Landlock, e),
            }
        }
        ruleset
    });
    let mut steps = args.steps.clone();
    if extended.is_some() {
        steps.landlock = extended.as_ref();
    }
    let interactive = steps.interactive;
    let mut command_status = None;
    // The command starts as the supervisor's child does (no page tables copied); A is
    // suspended until it has exec'd.
    let child = ChildArgs {
        steps: &steps,
        supervisor: 1,
        old_mask: args.old_mask,
        err,
        gate_pipe: None,
        helper_fds: [None, None],
    };
    crate::phases::mark("landlock_rules");
    let command = match spawn_child(&child) {
        Ok(pid) => pid,
        Err(SetupError::Syscall { source, .. }) => fail(Stage::Fork, source),
        Err(_) => fail(Stage::Fork, io::Error::from_raw_os_error(libc::EIO)),
    };
    crate::phases::mark("command_started");
    // Safety: closing our copy of the error pipe, so the supervisor sees EOF at exec; A
    // writes to it no more.
    unsafe { rustix::io::close(err.as_raw_fd()) };
    // The unix-socket gate (crate::gate): the command installed it in the table we share
    // until its exec; we hold the listener for the supervisor as long as the run lasts. Our
    // copies of both ends of the helper's link go: the helper reads EOF when the supervisor
    // lets go, and the supervisor when the helper ends.
    if let Some(pipe) = args.gate_pipe {
        if let Err(e) = crate::gate::relay_listener(pipe) {
            fail(Stage::Seccomp, e);
        }
    }
    for fd in args.helper_fds.iter().flatten() {
        // Safety: closing our copies of the supervisor's descriptors.
        unsafe { rustix::io::close(*fd) };
    }

    let mut handled = vec![libc::SIGCHLD, libc::SIGTERM];
    handled.extend(FORWARDED);
    let set = sigset(&handled);
    loop {
        // The set holds signals blocked in this process (inherited mask).
        let (sig, code) = signal::wait_info(&set).unwrap_or((-1, 0));
        if sig == libc::SIGCHLD {
            loop {
                // Reaping any child of init, non-blocking.
                let (pid, status) = reap_any();
                if pid == command {
                    command_status = Some(status);
                    // The supervisor takes the command's raw status from here (to report it
                    // early with --keep-descendants, and to die by its signal). A pipe write
                    // this small is atomic.
                    if let Some(fd) = main_exit {
                        let _ = rustix::io::write(fd, &status.to_ne_bytes());
                    }
                }
                let none_left = pid < 0;
                if let Some(status) = command_status {
                    if !keep_descendants || none_left {
                        // Exiting PID 1; the kernel kills the rest of the namespace.
                        crate::phases::print(" in A");
                        signal::exit_now(wait_status_to_exit(status));
                    }
                }
                if pid <= 0 {
                    break;
                }
            }
        } else if sig > 0 && command_status.is_none() && !(interactive && code == libc::SI_KERNEL) {
            // Signalling our own, unreaped child (or its process group).
            if let (Some(pid), Some(sig)) = (Pid::from_raw(command), Signal::from_named_raw(sig)) {
                let _ = if interactive {
                    rustix::process::kill_process(pid, sig)
                } else {
                    rustix::process::kill_process_group(pid, sig)
                };
            }
        }
    }
}
