//! `--status-fd FD`: what a caller that supervises the sandbox learns while it runs, as JSON
//! lines (one object per line, as bubblewrap's `--json-status-fd`):
//!
//! ```text
//! {"child-pid": 4242}
//! {"exit-status": 7}
//! ```
//!
//! - `child-pid` once the command has started (its `execve` succeeded): the command's PID in
//!   the caller's PID namespace; for the namespace backends the PID of the namespace's init,
//!   which stands for the command (signals sent to it are forwarded to the command, and it
//!   exits with the command's status). Nothing is written when the command could not be
//!   started (exit status 125, 126 or 127).
//! - `exit-status` the moment the command's **main** process exits, in shell style (its exit
//!   code, or 128+N for signal N). With `--keep-descendants` the sandbox itself exits only
//!   when the last descendant has, so this line is how a caller learns the command's result
//!   while its background processes keep running. If the sandbox is stopped (SIGTERM) before
//!   the command exits, it is the status the command ended with.
//!
//! Write errors (a reader that went away) are ignored: the command's run does not depend on
//! anyone reading its status.

use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::time::Duration;

use shofer_sys::signal::{self, How};

/// The `--status-fd` descriptor, owned (closed when the sandbox exits; never inherited by
/// the command).
pub(crate) struct StatusFd(std::fs::File);

impl StatusFd {
    /// Takes ownership of `fd`.
    ///
    /// # Safety
    /// `fd` must be an open descriptor that nothing else in this process owns.
    pub unsafe fn from_raw(fd: RawFd) -> StatusFd {
        // Safety: guaranteed by the caller.
        StatusFd(unsafe { std::fs::File::from_raw_fd(fd) })
    }

    /// `{"child-pid": N}`.
    pub fn child_pid(&self, pid: libc::pid_t) {
        self.line(&child_pid_line(pid));
    }

    /// `{"exit-status": N}`.
    pub fn exit_status(&self, status: i32) {
        self.line(&exit_status_line(status));
    }

    /// Writes one line with SIGPIPE blocked, so a reader that went away costs an `EPIPE`
    /// instead of the supervisor (whose death would kill the command).
    fn line(&self, text: &str) {
        let pipe = shofer_sys::process::sigset(&[libc::SIGPIPE]);
        // Only this thread's mask changes, and it is restored below.
        let old = signal::thread_mask(How::Block, &pipe);
        let broken = (&self.0).write_all(text.as_bytes()).is_err();
        if broken {
            // Consumes the SIGPIPE our failed write raised, if any, without waiting.
            signal::timed_wait(&pipe, Duration::ZERO);
        }
        if let Ok(old) = old {
            let _ = signal::thread_mask(How::Set, &old);
        }
    }
}

fn child_pid_line(pid: libc::pid_t) -> String {
    format!("{{\"child-pid\": {pid}}}\n")
}

fn exit_status_line(status: i32) -> String {
    format!("{{\"exit-status\": {status}}}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_json_objects() {
        let v: serde_json::Value = serde_json::from_str(&child_pid_line(42)).unwrap();
        assert_eq!(v, serde_json::json!({"child-pid": 42}));
        let v: serde_json::Value = serde_json::from_str(&exit_status_line(137)).unwrap();
        assert_eq!(v, serde_json::json!({"exit-status": 137}));
    }
}
