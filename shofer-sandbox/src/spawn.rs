//! Starting the command: the supervisor's own preparation (subreaper, death signal, blocked
//! signals), the `clone` (the `posix_spawn`-like [`exec::spawn_child`] for the Landlock and
//! bwrap backends, a fork-like one into new namespaces for the others, whose process A runs
//! [`namespaces::init`]), and reading the failure pipe ([`crate::childfail`]) that tells the
//! supervisor whether `execve` happened or which [`Stage`] failed.
//!
//! - Entry points: [`spawn`] (returns [`Spawn`]), and [`reaper_dying_with_parent`], the
//!   prologue shared with the guardian.
//! - Imports flow down only: this module uses [`exec`], [`namespaces`] and the leaves
//!   ([`crate::childfail`], [`crate::signals`]); none of them imports it.
//!
//! The failure pipe is close-on-exec: EOF means `execve` succeeded; a record (stage byte and
//! errno) means a setup step or `execve` failed, and which.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::process::{Signal, WaitOptions};

use crate::childfail::{read_failure, Stage};
use crate::error::{SetupError, Unusable};
use crate::exec::{self, ChildArgs, Steps};
use crate::namespaces;
use crate::path_search::NotRunnable;
use crate::plan::{Confinement, Plan};
use crate::signals::FORWARDED;
use shofer_sys::errno;
use shofer_sys::process::sigset;
use shofer_sys::signal;

/// The command is running (it has exec'd): what the supervisor needs from the spawn.
pub(crate) struct Running {
    /// The main process: the command, bubblewrap, or the namespaces' init (process A).
    pub main: libc::pid_t,
    /// The signals the supervisor takes with `sigwaitinfo` (blocked since before `clone`).
    pub set: libc::sigset_t,
    /// The read end of process A's report of the command's exit (namespace backends with
    /// `--keep-descendants` and `--status-fd`): the raw wait status, 4 bytes, native endian.
    /// It raises SIGIO in the supervisor when readable.
    pub main_exit: Option<OwnedFd>,
    /// The unix-socket gate's listener and, for a namespace, a sock_diag socket in it.
    pub gate: Option<(OwnedFd, Option<OwnedFd>)>,
    /// `--net proxy` on the namespace backends: the proxy's listener, made in the command's
    /// network namespace before the command ran (bubblewrap's comes later:
    /// `crate::bwrap::Launch::proxy_listener`).
    pub proxy: Option<OwnedFd>,
}

/// How the spawn ended.
pub(crate) enum Spawn {
    /// The command runs.
    Running(Running),
    /// `execve` failed: the exit status (126 or 127) and the message.
    NotExecuted(i32, String),
}

/// Makes this process a child subreaper (every orphan of its tree comes back to it) that gets
/// SIGTERM when its parent dies, checking the parent had not died already: the supervisor's
/// and the guardian's prologue.
///
/// # Errors
/// A `prctl` failure, or [`SetupError::CallerExited`].
pub(crate) fn reaper_dying_with_parent() -> Result<(), SetupError> {
    let failed = |op| move |source| SetupError::Syscall { op, source };
    shofer_sys::process::set_child_subreaper().map_err(failed("prctl(PR_SET_CHILD_SUBREAPER)"))?;
    let caller = rustix::process::getppid();
    rustix::process::set_parent_process_death_signal(Some(Signal::TERM))
        .map_err(|e| failed("prctl(PR_SET_PDEATHSIG)")(e.into()))?;
    if rustix::process::getppid() != caller {
        return Err(SetupError::CallerExited);
    }
    Ok(())
}

/// Prepares the supervisor, starts the command of `plan` and waits until it has exec'd.
/// `caller_mask`: the signal mask to give the command when ours was changed before (by the
/// guardian, [`crate::guardian`]); else the one we have.
/// Process A of the namespace backends reports the command's raw exit status over a pipe the
/// moment it exits (for `--status-fd` while descendants are still waited for, and so the
/// sandbox can die by the command's signal, which A, PID 1, cannot pass on by dying).
///
/// # Errors
/// [`SetupError`] when the supervisor cannot be set up (`prctl`, `pipe2`, `clone`) or a
/// child-side step before `execve` fails; the command has then not run.
pub(crate) fn spawn(
    plan: &Plan<'_>,
    gate: Option<&mut crate::gate::Setup>,
    caller_mask: Option<libc::sigset_t>,
) -> Result<Spawn, SetupError> {
    reaper_dying_with_parent()?;

    let namespaced = matches!(plan.confinement, Confinement::Namespaces(_));
    let mut handled = vec![libc::SIGCHLD, libc::SIGTERM];
    handled.extend(FORWARDED);
    let exit_pipe = namespaced;
    if exit_pipe {
        handled.push(libc::SIGIO);
    }
    let set = sigset(&handled);
    // Blocking only defers delivery.
    let old_mask =
        signal::process_mask(signal::How::Block, &set).map_err(|source| SetupError::Syscall {
            op: "sigprocmask",
            source,
        })?;
    // Below a guardian these were blocked before its fork: the caller's mask is the one given.
    let old_mask = caller_mask.unwrap_or(old_mask);

    let pipe =
        |op| shofer_sys::fd::pipe_cloexec().map_err(|source| SetupError::Syscall { op, source });
    let (err_read, err_write) = pipe("pipe2")?;
    let main_exit = if exit_pipe {
        let (read, write) = pipe("pipe2")?;
        shofer_sys::fd::sigio_when_readable(&read).map_err(|source| SetupError::Syscall {
            op: "fcntl(O_ASYNC)",
            source,
        })?;
        Some((read, write))
    } else {
        None
    };

    // The gate's listener comes back through the shared table, or a pipe from process A.
    let gate_pipe = if gate.is_some() && namespaced {
        Some(pipe("pipe2")?)
    } else {
        None
    };
    // The gate's helper: started by the command's first process in its Landlock domain. It
    // waits to be non-dumpable before the command runs only where no Landlock layer keeps the
    // command from ptracing it and it shares the command's PID namespace.
    let mut gate = gate;
    let helper = match gate.as_mut().and_then(|g| g.helper_end.take()) {
        Some(end) => {
            let wait_ready = match &plan.confinement {
                Confinement::Namespaces(ns) => ns.landlock.is_none(),
                _ => false,
            };
            Some(
                crate::gate::helper::Spawn::new(end, wait_ready).map_err(|source| {
                    SetupError::Syscall {
                        op: "preparing the gate's helper",
                        source,
                    }
                })?,
            )
        }
        None => None,
    };
    // The command's own variables (the package caches'), never set in ours.
    let env = exec::command_env(&plan.exec.env);
    let envp: Option<Vec<*const libc::c_char>> = env.as_ref().map(|env| {
        env.iter()
            .map(|e| e.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    });
    let mut steps = Steps::of(&plan.exec, &plan.confinement);
    steps.envp = envp.as_deref();
    let helper_fds = match gate.as_ref() {
        Some(g) => [
            g.helper.as_ref().map(|f| f.as_raw_fd()),
            helper.as_ref().map(|h| h.sock.as_raw_fd()),
        ],
        None => [None, None],
    };
    if let Some(g) = &gate {
        steps.gate_traps = g.traps;
        steps.gate = Some(-1);
        steps.gate_helper = helper.as_ref();
    }
    let args = ChildArgs {
        steps: &steps,
        supervisor: shofer_sys::process::getpid(),
        old_mask,
        err: err_write.as_fd(),
        gate_pipe: gate_pipe.as_ref().map(|(_, w)| w.as_raw_fd()),
        helper_fds,
    };
    let mut proxy = None;
    let main = match &plan.confinement {
        Confinement::Namespaces(setup) => {
            // Only we, with CAP_SETUID over the parent namespace, may map every id: A waits
            // on this pipe until we have (EOF: we could not).
            let ready = if setup.full_map {
                Some(pipe("pipe2")?)
            } else {
                None
            };
            // The proxy's listener: A makes it in its network namespace and sends it here.
            let listener = if setup.proxy {
                Some(
                    crate::gate::helper::pair(rustix::net::SocketType::SEQPACKET).map_err(
                        |source| SetupError::Syscall {
                            op: "socketpair for the proxy's listener",
                            source,
                        },
                    )?,
                )
            } else {
                None
            };
            let pid = spawn_namespaced(
                &args,
                setup,
                plan.exec.keep_descendants,
                main_exit.as_ref().map(|(_, w)| w.as_fd()),
                ready.as_ref().map(|(r, w)| (r.as_fd(), w.as_raw_fd())),
                listener.as_ref().map(|(_, theirs)| theirs.as_raw_fd()),
            )?;
            if let Some((_, ready)) = &ready {
                let written = ["uid_map", "gid_map"].iter().all(|f| {
                    std::fs::write(format!("/proc/{pid}/{f}"), namespaces::FULL_MAP).is_ok()
                });
                if written {
                    let _ = rustix::io::write(ready, b"1");
                }
            }
            if let Some((ours, theirs)) = listener {
                drop(theirs);
                proxy = crate::gate::netns::recv_fd(&ours).filter(crate::egress::is_listener);
                if proxy.is_none() {
                    // Our own child, which failed before sending it: it never runs the command.
                    if let Some(p) = shofer_sys::process::pid(pid) {
                        let _ = rustix::process::kill_process(p, Signal::KILL);
                        let _ = rustix::process::waitpid(Some(p), WaitOptions::empty());
                    }
                    // Its record, when it wrote one (a read would wait for our own copy of
                    // the pipe's write end otherwise).
                    let errno = match rustix::io::ioctl_fionread(&err_read) {
                        Ok(n) if n >= 5 => read_failure(&err_read).map(|(_, errno)| errno),
                        _ => None,
                    };
                    return Err(SetupError::Syscall {
                        op: Stage::ProxyListener.describe(),
                        source: io::Error::from_raw_os_error(errno.unwrap_or(libc::EIO)),
                    });
                }
            }
            pid
        }
        _ => exec::spawn_child(&args)?,
    };
    drop(err_write);
    if let Some(gate) = plan.spawned_gate {
        // Raw libc: the plan holds the watcher's pipe as a bare number, which rustix would
        // have to borrow unsafely all the same.
        // Safety: one byte to the git watcher's pipe, which the caller keeps open.
        unsafe { libc::write(gate, b"s".as_ptr().cast(), 1) };
    }
    let main_exit = main_exit.map(|(read, _write)| read);
    let gate = if gate.is_some() {
        crate::gate::take_listener(main, gate_pipe.map(|(read, _write)| read))
    } else {
        None
    };

    if let Some((stage, errno)) = read_failure(&err_read) {
        // Reaping our own child.
        if let Some(pid) = shofer_sys::process::pid(main) {
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        }
        // What was executed: the command, or bubblewrap in front of it.
        let name = steps.argv[0].to_string_lossy();
        return match stage {
            Stage::Exec if errno == libc::ENOENT || errno == libc::ENOTDIR => Ok(
                Spawn::NotExecuted(127, NotRunnable::NotFound.message(&name)),
            ),
            Stage::Exec => Ok(Spawn::NotExecuted(
                126,
                format!("{name}: {}", errno::strerror(errno)),
            )),
            // Only the namespaces' own making says "unusable" (`auto` then chooses again
            // without them): a later mount addresses paths the caller or the command chose
            // (namespaces::mounts::NsStep), and its failure fails the run; so does running
            // out of descriptors, which says nothing of the namespaces.
            Stage::IdMaps | Stage::NamespaceMounts
                if !matches!(errno, libc::EMFILE | libc::ENFILE) =>
            {
                Err(SetupError::Unusable(Unusable::Userns(
                    namespaces::failure_reason(stage.describe(), errno),
                )))
            }
            _ => Err(SetupError::Syscall {
                op: stage.describe(),
                source: io::Error::from_raw_os_error(errno),
            }),
        };
    }
    Ok(Spawn::Running(Running {
        main,
        set,
        main_exit,
        gate,
        proxy,
    }))
}

/// Starts process A in new user, mount, PID and IPC namespaces (and a network namespace with
/// `--net deny` or `--net proxy`) with a fork-like `clone`: A outlives the exec of the command, so it cannot
/// share our memory. A runs [`namespaces::init::run`].
fn spawn_namespaced(
    args: &ChildArgs<'_>,
    setup: &namespaces::Setup<'_>,
    keep_descendants: bool,
    main_exit: Option<BorrowedFd<'_>>,
    ready: Option<(BorrowedFd<'_>, RawFd)>,
    listener: Option<RawFd>,
) -> Result<libc::pid_t, SetupError> {
    let mut flags =
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
    if setup.own_net {
        flags |= libc::CLONE_NEWNET;
    }
    // Raw syscall: rustix has no clone(2) (and libc's wrapper needs a stack).
    // Safety: no new stack and no CLONE_VM: the child gets a copy of this single-threaded
    // process, like fork(2).
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags | libc::SIGCHLD, 0, 0, 0, 0) };
    if pid < 0 {
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // ENOSPC where the limit is not 0: the user's namespaces are used up, which processes
        // of an earlier run can do on purpose (each namespace held open by a descriptor).
        // Falling back would let a command choose the next runs' weaker backend: refuse.
        if errno == libc::ENOSPC && namespaces::blocked_by_sysctl().is_none() {
            return Err(SetupError::Syscall {
                op: "clone of the user namespace (the user's namespaces are used up, perhaps held by processes of an earlier run; the run is refused rather than started with less)",
                source: io::Error::from_raw_os_error(errno),
            });
        }
        return Err(SetupError::Unusable(Unusable::Userns(
            namespaces::failure_reason("clone", errno),
        )));
    }
    if pid == 0 {
        namespaces::init::run(args, setup, keep_descendants, main_exit, ready, listener);
    }
    Ok(pid as libc::pid_t)
}
