//! Answering a notification the gate decided: the result (said once on stderr when the
//! caller no longer waited for it, so the kernel restarts the call), and the `SIGPIPE` the
//! kernel would have raised for the caller. Used by the gate thread ([`super::serve`]) and by
//! the reader of the helper's replies ([`super::helper`]).

use std::os::fd::RawFd;

use super::notify;

/// The kernel raises SIGPIPE in the sending thread on `EPIPE` unless `MSG_NOSIGNAL`: done for
/// the caller `tid`, as the helper sends with `MSG_NOSIGNAL`.
pub(super) fn raise_sigpipe(tid: libc::pid_t) {
    if let Some(tgid) = shofer_sys::proc::Status::tgid(tid) {
        // Raw syscall: rustix has no tgkill.
        // Safety: tgkill takes integers only, here a thread of the sandboxed run.
        unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, libc::SIGPIPE) };
    }
}

/// Answers notification `id` with `result`. A performed call whose caller no longer waits
/// was interrupted by a signal on a kernel without `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`
/// ([`super::filter::install`]; or its caller died): the kernel restarts it and the command
/// performs it again. Said once per run, as it happens.
pub(super) fn answer(listener: RawFd, id: u64, result: Result<i64, i32>) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !notify::answer(listener, id, result)
        && result.is_ok()
        && !notify::killable_recv_known()
        && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        eprintln!("shofer-sandbox: note: a signal interrupted a call the unix socket gate had performed, so the command performs it again (a repeated send or connect); Linux 5.19 (SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV) prevents this");
    }
}
