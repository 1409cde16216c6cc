//! Signal masks, synchronous waits for a signal, default dispositions and `_exit`, without
//! `unsafe` at the call.
//!
//! - Entry points: [`process_mask`], [`thread_mask`], [`wait_info`], [`timed_wait`],
//!   [`set_default`], [`exit_now`]; the sets come from [`crate::process::sigset`].
//! - Raw libc throughout: rustix offers these calls only in its experimental, hidden
//!   `runtime` API (`kernel_sigprocmask` and the like, themselves `unsafe`).
//! - Every function is one async-signal-safe call (signal-safety(7)) and allocates nothing:
//!   all may be used between fork/clone and exec.

use std::io;
use std::time::Duration;

/// How [`process_mask`] and [`thread_mask`] change the mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// Add the set (`SIG_BLOCK`).
    Block,
    /// Remove the set (`SIG_UNBLOCK`).
    Unblock,
    /// Replace the mask by the set (`SIG_SETMASK`).
    Set,
}

impl How {
    fn raw(self) -> libc::c_int {
        match self {
            How::Block => libc::SIG_BLOCK,
            How::Unblock => libc::SIG_UNBLOCK,
            How::Set => libc::SIG_SETMASK,
        }
    }
}

/// An empty signal set, as the out-parameter of the calls below.
fn empty() -> libc::sigset_t {
    crate::process::sigset(&[])
}

/// `sigprocmask(how, set)`: changes this process's (single thread's) signal mask and returns
/// the mask it had.
///
/// # Errors
/// As sigprocmask(2).
pub fn process_mask(how: How, set: &libc::sigset_t) -> io::Result<libc::sigset_t> {
    let mut old = empty();
    // Safety: both sets are valid for the call; `old` is written on success.
    if unsafe { libc::sigprocmask(how.raw(), set, &mut old) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(old)
}

/// `pthread_sigmask(how, set)`: changes the calling thread's signal mask only, and returns
/// the mask it had.
///
/// # Errors
/// As pthread_sigmask(3) (which returns the error number instead of setting errno).
pub fn thread_mask(how: How, set: &libc::sigset_t) -> io::Result<libc::sigset_t> {
    let mut old = empty();
    // Safety: both sets are valid for the call; `old` is written on success.
    match unsafe { libc::pthread_sigmask(how.raw(), set, &mut old) } {
        0 => Ok(old),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// `sigwaitinfo(set)`: takes one pending signal of `set` (which must be blocked), waiting for
/// one. Returns the signal and the `si_code` of its `siginfo_t` (`SI_KERNEL`: the terminal
/// sent it, `SI_USER`: `kill`…).
///
/// # Errors
/// As sigwaitinfo(2): `EINTR` when a handled signal outside `set` interrupted the wait.
pub fn wait_info(set: &libc::sigset_t) -> io::Result<(libc::c_int, libc::c_int)> {
    // Safety: siginfo_t is plain data; an all-zero one is valid output space.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // Safety: a valid set and output space for the call.
    let sig = unsafe { libc::sigwaitinfo(set, &mut info) };
    if sig < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((sig, info.si_code))
}

/// `sigtimedwait(set, timeout)`: takes one pending signal of `set` (which must be blocked),
/// waiting at most `timeout` (zero: only one already pending). `None` when none came (or the
/// wait was interrupted).
pub fn timed_wait(set: &libc::sigset_t, timeout: Duration) -> Option<libc::c_int> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // Safety: a valid set and timeout; a NULL info pointer is allowed.
    let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

/// `signal(sig, SIG_DFL)`: restores the default action of `sig` (an invalid `sig` is
/// ignored, as signal(2) refuses it).
pub fn set_default(sig: libc::c_int) {
    // Safety: installs no handler; only the disposition of `sig` changes.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// `_exit(code)`: ends this process at once, running no destructor, `atexit` handler or
/// stdio flush (a forked or `CLONE_VM` child must not run its parent's).
pub fn exit_now(code: libc::c_int) -> ! {
    // Safety: _exit takes any status and does not return.
    unsafe { libc::_exit(code) }
}
