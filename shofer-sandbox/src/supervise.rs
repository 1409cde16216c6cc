//! Supervising a running command (docs/ARCHITECTURE.md): the wait loop, signal
//! forwarding, and the end of the tree.
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
//! - **Signals** are blocked before `clone` ([`crate::spawn`]), so none is lost between the
//!   clone and the wait loop; the child restores the caller's mask and default dispositions
//!   (including SIGPIPE) before exec. The loop takes them synchronously with `sigwaitinfo`:
//!   SIGCHLD reaps; SIGINT, SIGHUP, SIGQUIT, SIGWINCH, SIGUSR1 and SIGUSR2 are forwarded to
//!   the command (its process group when it has its own session); SIGTERM kills the tree. A
//!   signal the terminal itself generated (`si_code == SI_KERNEL`) already reached the command
//!   in the same foreground process group and is not sent twice.
//! - **The end**: when the main process exits, remaining descendants get SIGTERM (and
//!   SIGCONT, so stopped ones can act on it), a grace period, then SIGKILL, repeated until
//!   `waitpid` reports no children — a fork loop cannot outrun it because each pass kills
//!   every process it sees and orphans come back to us. `--keep-descendants` waits for them
//!   instead. See [`crate::tree`].
//! - **`--status-fd`** ([`crate::status`]): the command's PID once it runs, and its exit
//!   status the moment the main process exits, even while descendants are still waited for.
//!
//! If the supervisor is SIGKILLed (or aborts), the command gets SIGKILL (its own death
//! signal) and its descendants are re-parented to the next subreaper up: on the namespace
//! backends that is inside the dying PID namespace, whose init's death ends them all; on
//! Landlock it is the guardian ([`crate::guardian`]), the process the caller started, which
//! kills them. The supervisor's end-of-run work (the git restore) is then left to the next
//! run's journal repair.

use std::io::Read;
use std::time::Duration;

use rustix::process::{Pid, Signal};

use crate::plan::{Confinement, Plan};
use crate::spawn::Running;
use crate::status::StatusFd;
use crate::tree;

/// Raw wait status of a process killed by SIGTERM, used when the tree is stopped before the
/// main process is reaped.
const TERMINATED: i32 = libc::SIGTERM;

/// The supervisor of one running command.
pub(crate) struct Supervisor {
    main: libc::pid_t,
    /// Where forwarded signals go: a PID, or a process group as its negation.
    forward_target: libc::pid_t,
    interactive: bool,
    keep_descendants: bool,
    grace: Duration,
    main_status: Option<i32>,
    set: libc::sigset_t,
    status: Option<StatusFd>,
    /// Process A's report of the command's exit (see [`Running::main_exit`]).
    main_exit: Option<std::fs::File>,
    exit_reported: bool,
    /// The command's raw wait status as process A reported it (namespace backends).
    command_status: Option<i32>,
    /// The caller stopped us with SIGTERM.
    stopped: bool,
}

impl Supervisor {
    /// Takes over a running command. Consumes the plan: what the command no longer needs
    /// (bubblewrap's arguments and info pipe, the ruleset, the namespace plan) is closed here.
    /// Writes `{"child-pid": N}` to `status`.
    pub fn new(running: Running, plan: Plan<'_>, status: Option<StatusFd>) -> Supervisor {
        let Plan {
            exec,
            mut confinement,
            ..
        } = plan;
        let main = running.main;
        let namespaced = matches!(confinement, Confinement::Namespaces(_));
        // Behind bubblewrap, signals go to the command's own session (bwrap --new-session).
        let command = match &mut confinement {
            Confinement::Bwrap(launch) => launch.command_pid(),
            _ => None,
        };
        let forward_target = match command {
            Some(command) => -command,
            None if !exec.interactive && !namespaced => -main,
            // In a namespace, init (the main process) forwards to the command itself.
            None => main,
        };
        if let Some(s) = &status {
            s.child_pid(command.unwrap_or(main));
        }
        // HOOK(seccomp-notify): receive the listener here and serve it until the tree is
        // gone (crate::exec module docs).
        Supervisor {
            main,
            forward_target,
            interactive: exec.interactive,
            keep_descendants: exec.keep_descendants,
            grace: exec.grace,
            main_status: None,
            set: running.set,
            status,
            main_exit: running.main_exit.map(std::fs::File::from),
            exit_reported: false,
            command_status: None,
            stopped: false,
        }
    }

    /// Waits for the main process, forwarding signals; then ends the tree. Returns the
    /// command's raw wait status: the main process's, or, behind a namespace's init, the one
    /// the init reported; a raw SIGTERM status when the caller stopped us with SIGTERM (we
    /// then die by it).
    pub fn wait_loop(&mut self) -> i32 {
        let main = self.wait_main();
        if main == TERMINATED && self.stopped {
            return TERMINATED;
        }
        // A has exited (or was killed): its report, if it made one, is in the pipe.
        self.read_main_exit();
        self.command_status.unwrap_or(main)
    }

    fn wait_main(&mut self) -> i32 {
        loop {
            // `set` holds only signals blocked in this process.
            let Ok((sig, code)) = shofer_sys::signal::wait_info(&self.set) else {
                continue; // EINTR
            };
            match sig {
                libc::SIGCHLD => {
                    let none_left = self.reap();
                    if self.main_status.is_some() && (!self.keep_descendants || none_left) {
                        break;
                    }
                }
                libc::SIGTERM => {
                    // Told to stop: the tree goes, and so do we, by the signal we were sent.
                    self.kill_tree();
                    self.stopped = true;
                    return TERMINATED;
                }
                libc::SIGIO => self.read_main_exit(),
                _ => self.forward(sig, code),
            }
        }
        self.kill_tree();
        self.main_status.unwrap_or(TERMINATED)
    }

    /// Passes `sig` (whose `si_code` is `code`) on to the command.
    fn forward(&self, sig: libc::c_int, code: libc::c_int) {
        if self.main_status.is_some() {
            return;
        }
        if self.interactive && code == libc::SI_KERNEL {
            return; // the terminal sent it to the whole foreground group already
        }
        // Signalling our own descendant (or its process group); the main process is not
        // reaped yet, so its tree's PIDs cannot have been recycled under us.
        let Some(sig) = Signal::from_named_raw(sig) else {
            return;
        };
        let target = self.forward_target;
        let _ = match Pid::from_raw(target.abs()) {
            Some(pid) if target > 0 => rustix::process::kill_process(pid, sig),
            Some(pid) => rustix::process::kill_process_group(pid, sig),
            None => return,
        };
    }

    /// Writes the command's exit status to `--status-fd`, once.
    fn report_exit(&mut self, raw: i32) {
        if self.exit_reported {
            return;
        }
        self.exit_reported = true;
        if let Some(s) = &self.status {
            s.exit_status(crate::signals::wait_status_to_exit(raw));
        }
    }

    /// Process A said the command exited (namespace backends keeping descendants).
    fn read_main_exit(&mut self) {
        let Some(pipe) = &self.main_exit else {
            return;
        };
        let mut buf = [0u8; 4];
        if (&*pipe).read_exact(&mut buf).is_ok() {
            self.main_exit = None;
            let raw = i32::from_ne_bytes(buf);
            self.command_status = Some(raw);
            self.report_exit(raw);
        }
    }

    /// Reaps every exited child; records the main process's status. Returns true when no
    /// child is left.
    fn reap(&mut self) -> bool {
        loop {
            let (pid, status) = crate::signals::reap_any();
            if pid == self.main {
                self.main_status = Some(status);
                self.report_exit(status);
            } else if pid == 0 {
                return false;
            } else if pid < 0 {
                return true; // ECHILD
            }
        }
    }

    /// SIGTERM (with SIGCONT) to every descendant, the grace period, then SIGKILL until no
    /// child is left ([`tree::end_all`]), reaping as they go.
    fn kill_tree(&mut self) {
        let grace = self.grace;
        tree::end_all(grace, &mut || self.reap());
    }
}
