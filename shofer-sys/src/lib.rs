//! The kernel interface of shofer, in one place: synchronous, no runtime, small enough for the
//! static `shofer-sandbox` binary.
//!
//! - [`proc`]: `/proc/<pid>/stat` parsing ([`ProcInfo`]), the whole-system scan
//!   ([`ProcTable`]) and the descendant walk.
//! - [`kill`]: the one process-tree killer ([`kill::kill`], [`kill::Targets`]): SIGTERM per
//!   process group where that can only reach targets, SIGCONT to stopped ones, one shared grace
//!   period, then SIGKILL until a scan finds none. Several trees are killed at once by one
//!   [`kill::Targets`] that selects all of them.
//! - [`pidfd`]: `pidfd_open` (its `ENOSYS` remembered), `pidfd_send_signal`, and
//!   [`pidfd::signal_if_same`], the identity check (pid + start time) every signal goes through.
//! - [`fd`]: pipes, `eventfd`, `poll`, `splice`; [`fd::close_from`], the one way to close or
//!   mark close-on-exec every descriptor from N up (safe after fork).
//! - [`process`]: the child-subreaper flag and reaping.
//! - [`signal`]: signal masks, synchronous waits, default dispositions and `_exit`.
//! - [`errno`]: errno names for messages and reports.
//! - [`landlock`]: the Landlock ABI probe.
//! - [`statedir`]: state kept across runs (journals, job records), checked on every read.
//! - [`projectfile`]: a file of the project's `.shofer/` directory, read without trusting it.
//! - [`thread`]: a thread that starts on another CPU than its creator's ([`thread::Beside`]).
//!
//! Plain system calls go through `rustix`; raw `libc` is used only where `rustix` has no
//! wrapper, and each such call says so.
//!
//! ```no_run
//! use std::time::Duration;
//! // Kill everything below this process (a subreaper), with a 250 ms grace period.
//! let report = shofer_sys::kill::kill(&mut shofer_sys::kill::Descendants::of_self(), Duration::from_millis(250));
//! assert!(report.survivors.is_empty());
//! ```
#![deny(missing_docs)]

pub mod errno;
pub mod fd;
pub mod kill;
pub mod landlock;
pub mod pidfd;
pub mod proc;
pub mod process;
pub mod projectfile;
pub mod signal;
pub mod statedir;
pub mod thread;

pub use proc::{ProcInfo, ProcTable};

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}
