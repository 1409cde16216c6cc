//! Handlers: the calls a protection asks the gate to trap besides the unix-socket ones, and
//! how it answers them.
//!
//! - [`Handler`]: what a protection registers ([`super::Setup::new`]): the calls it traps
//!   ([`Handler::traps`]; the filter traps exactly the union, [`super::filter::Traps::union`])
//!   and its answer to each ([`Handler::handle`]).
//! - [`Gatekeeper`]: what the gate offers a handler for one notification: the caller's
//!   descriptors, whether the notification still stands, a descriptor installed in the
//!   caller, and a call performed as the caller.
//!
//! The gate knows no protection by name: git's lock-file protocol and freshen
//! (`crate::git::gate`) are handlers like any other. A handler must never grant what the
//! kernel would refuse the caller without saying so in its own module's docs; a call it does
//! not recognise is continued ([`Reply::Continue`]), so the kernel decides under the
//! command's own confinement.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use super::filter::Traps;
use super::notify::{self, AddFd, Notif};

/// A handler's answer to one trapped call.
pub(crate) enum Reply {
    /// Answer now with this result (a value, or an errno).
    Now(Result<i64, i32>),
    /// Let the kernel run the call as the caller made it.
    Continue,
    /// Answered by a helper thread, or not at all (the caller is gone).
    Later,
}

/// Installs descriptors in the caller of a notification (`SECCOMP_IOCTL_NOTIF_ADDFD`); it can
/// be moved to the thread that performs a call.
#[derive(Clone)]
pub(crate) struct Installer {
    listener: Arc<OwnedFd>,
    how: AddFd,
}

impl Installer {
    pub(super) fn new(listener: Arc<OwnedFd>, how: AddFd) -> Installer {
        Installer { listener, how }
    }

    /// Whether this kernel can install descriptors at all (Linux 5.9).
    pub(crate) fn available(&self) -> bool {
        self.how != AddFd::Missing
    }

    /// Installs our `fd` into the caller of notification `id` (close-on-exec there when
    /// `cloexec`) and answers its call with the caller's descriptor number.
    ///
    /// # Errors
    /// The errno of `ADDFD` (`ENOENT`: the caller is gone).
    pub(crate) fn install(&self, id: u64, fd: RawFd, cloexec: bool) -> Result<i32, i32> {
        notify::addfd(self.listener.as_raw_fd(), id, fd, cloexec, self.how)
    }
}

/// A call performed for the caller: `None` when it answered the notification itself (through
/// [`Installer::install`]).
pub(crate) type Performed = Box<dyn FnOnce() -> Option<Result<i64, i32>> + Send>;

/// What the gate offers a [`Handler`] for one notification.
pub(crate) trait Gatekeeper {
    /// The caller `pid`'s descriptor `fd`, as ours (`pidfd_getfd`).
    ///
    /// # Errors
    /// The errno to answer with.
    fn caller_fd(&mut self, pid: libc::pid_t, fd: u64) -> Result<OwnedFd, i32>;
    /// Whether notification `n` still waits for its answer, so that what `/proc/PID` said
    /// while deciding was about its caller.
    fn still_valid(&self, n: &Notif) -> bool;
    /// How descriptors reach the caller.
    fn installer(&self) -> Installer;
    /// Performs `op` as the caller of `n` would: here when the command keeps the gate's
    /// privileges, else on a thread that takes the caller's identity and no capabilities.
    fn perform_as_caller(&self, n: &Notif, op: Performed) -> Reply;
}

/// Calls a protection answers for the command (registered with [`super::Setup::new`]).
pub(crate) trait Handler: Send {
    /// The calls this handler answers: the gate's filter traps them.
    fn traps(&self) -> Traps;
    /// Once, when the gate starts serving, with what it can install in callers.
    fn started(&mut self, _installer: &Installer) {}
    /// The answer to `n`, one of [`Handler::traps`]'s calls.
    fn handle(&mut self, gate: &mut dyn Gatekeeper, n: &Notif) -> Reply;
}
