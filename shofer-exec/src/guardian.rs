//! The server's guardian: `shofer serve` runs as the child of a small parent that is a child
//! subreaper, so that a server that is SIGKILLed (by its client's timeout, the OOM killer)
//! still leaves nothing running.
//!
//! Without a sandbox (no `--worktree`) a command's processes have no supervisor of their own:
//! when the server dies by SIGKILL, its shutdown never runs, and its children and the orphans
//! re-parented to it (it is a subreaper too) would be re-parented to init and keep running.
//! With the guardian they are re-parented to the guardian instead, which kills everything
//! below it ([`crate::tree::kill_everything_below_us`]: SIGTERM, one grace, SIGKILL) and exits
//! with the server's status. A SIGKILL of the guardian itself (the process the client started)
//! sends the server SIGTERM (`PR_SET_PDEATHSIG`, prctl(2)), which runs the server's normal
//! shutdown. What remains possible: both killed together (`kill -9` of each), or a command
//! that leaves the process tree (another session re-parented elsewhere is impossible below a
//! subreaper; a daemon started through a host service is not a descendant).
//! (ARCHITECTURE §3.5, issue 15.)

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;
use std::time::Duration;

/// Set in the server's environment by its guardian; removed from what commands inherit.
pub const INNER_VAR: &str = "SHOFER_SERVE_GUARDED";

/// Which part of `shofer serve` this process plays.
pub enum Role {
    /// Serve (the guardian's child, or no guardian could be set up).
    Server,
    /// The guardian, done: the server ended and everything below was killed; exit with this.
    Done(u8),
}

/// Starts the server as a child and guards it, or returns [`Role::Server`] in the child (and
/// where the guardian cannot be set up: no subreaper flag, no `/proc/self/exe`).
pub fn split() -> Role {
    if std::env::var_os(INNER_VAR).is_some() {
        // Started as /proc/self/exe, the kernel named us "exe": take the guardian's name.
        // Safety: PR_SET_NAME with a NUL-terminated string of at most 16 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, c"shofer".as_ptr()) };
        return Role::Server;
    }
    if crate::tree::enable_subreaper().is_err() {
        return Role::Server;
    }
    let waited =
        shofer_sys::process::sigset(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD]);
    // Safety: blocking signals of this (still single-threaded) process; restored on failure.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // Safety: as above.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &waited, &mut old) };
    let guardian = shofer_sys::process::getpid();
    // This very binary, even if its file was replaced since it started.
    let mut cmd = Command::new("/proc/self/exe");
    cmd.args(std::env::args_os().skip(1)).env(INNER_VAR, "1");
    if let Some(argv0) = std::env::args_os().next() {
        cmd.arg0(argv0);
    }
    // Safety: only async-signal-safe calls between fork and exec (prctl, getppid, raise,
    // pthread_sigmask on a copied set).
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong);
            if libc::getppid() != guardian {
                libc::raise(libc::SIGTERM); // the guardian died before the flag was set
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(_) => {
            // Safety: restoring the mask saved above.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
            return Role::Server;
        }
    };
    // The client's end of file must depend on the server's copies of stdin/stdout only.
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        // Safety: dup2 onto our own standard descriptors.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
    let server = child.id() as libc::pid_t;
    let status = loop {
        // Safety: an all-zero siginfo_t is valid output space.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // Safety: waiting for the blocked set with our own buffer.
        let sig = unsafe { libc::sigwaitinfo(&waited, &mut info) };
        if sig == libc::SIGCHLD {
            if let Some(s) = reap_all(server) {
                break s;
            }
        } else if sig > 0 {
            // Safety: forwarding a signal to our own child (not yet reaped: its pid is ours).
            unsafe { libc::kill(server, sig) };
        }
    };
    crate::tree::kill_everything_below_us(Duration::from_millis(250));
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Role::Done(code.clamp(0, 255) as u8)
}

/// Reaps every exited child (the server, and orphans re-parented to us); the server's status
/// once it has exited.
fn reap_all(server: libc::pid_t) -> Option<std::process::ExitStatus> {
    let mut found = None;
    loop {
        let mut status = 0;
        // Safety: reaping our own children without blocking.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == server {
            found = Some(std::process::ExitStatus::from_raw(status));
        }
    }
}
