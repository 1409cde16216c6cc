//! Process descriptors (pidfd(2), Linux 5.3) and the identity check every signal of shofer
//! goes through.
//!
//! A pid names whatever process holds it *now*; after the process is reaped, the kernel may
//! hand the number to a new one. A pidfd names one process for as long as the descriptor is
//! open. So to signal a process found by a scan: open a pidfd on its pid, read its start time
//! again, and signal through the pidfd only if the start time is the scanned one — whatever
//! holds the pid after that check is pinned by the descriptor, so a recycled pid is never
//! signalled ([`signal_if_same`]).
//!
//! Before Linux 5.3 (`ENOSYS`, remembered after the first call, as tokio's
//! `process/unix/pidfd_reaper.rs` does) the same check guards a plain `kill(2)`, leaving a
//! window of a few microseconds between the check and the signal.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::process::{PidfdFlags, Signal};

use crate::proc::{ProcDir, ProcInfo};

/// Set once `pidfd_open` answered `ENOSYS` (Linux < 5.3).
static NO_PIDFD: AtomicBool = AtomicBool::new(false);
/// Set once `PIDFD_SIGNAL_PROCESS_GROUP` was refused with `EINVAL` (Linux < 6.9).
static NO_GROUP_SIGNAL: AtomicBool = AtomicBool::new(false);

/// `pidfd_open(pid, 0)` (Linux 5.3). `Ok(None)` when the kernel has no pidfds (remembered:
/// later calls answer at once).
///
/// # Errors
/// `ESRCH` when no process has this pid (it exited and was reaped); `EINVAL` for pid ≤ 0.
pub fn open(pid: i32) -> io::Result<Option<OwnedFd>> {
    if NO_PIDFD.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let pid = crate::process::pid(pid).ok_or(io::ErrorKind::InvalidInput)?;
    match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::NOSYS) => {
            NO_PIDFD.store(true, Ordering::Relaxed);
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)` (Linux 5.1): signals exactly the process the
/// pidfd names.
///
/// # Errors
/// `ESRCH` when it already exited; `EPERM` when it is not ours to signal.
pub fn send_signal(pidfd: impl AsFd, sig: Signal) -> io::Result<()> {
    rustix::process::pidfd_send_signal(pidfd, sig).map_err(Into::into)
}

/// `PIDFD_SIGNAL_PROCESS_GROUP` (`include/uapi/linux/pidfd.h`, Linux 6.9).
const PIDFD_SIGNAL_PROCESS_GROUP: libc::c_uint = 1 << 2;

/// `pidfd_send_signal(pidfd, sig, NULL, PIDFD_SIGNAL_PROCESS_GROUP)` (Linux 6.9): signals the
/// whole process group of the pidfd's process in one call. `Ok(false)` on kernels without the
/// flag (remembered).
///
/// # Errors
/// `ESRCH` when the process is gone; `EPERM` as for `kill(2)`.
pub fn send_signal_group(pidfd: impl AsFd, sig: Signal) -> io::Result<bool> {
    if NO_GROUP_SIGNAL.load(Ordering::Relaxed) {
        return Ok(false);
    }
    // Raw syscall: rustix's pidfd_send_signal has no flags argument.
    // Safety: the fd is a pidfd borrowed for the call; a NULL siginfo is allowed (the kernel
    // fills it in as for kill(2)); no other memory is passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_fd().as_raw_fd(),
            sig.as_raw(),
            std::ptr::null::<libc::siginfo_t>(),
            PIDFD_SIGNAL_PROCESS_GROUP,
        )
    };
    if ret == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINVAL) {
        NO_GROUP_SIGNAL.store(true, Ordering::Relaxed);
        return Ok(false);
    }
    Err(e)
}

/// Waits until every process of `pidfds` has exited (a pidfd turns readable when its process
/// exits, reaped or not: pidfd_open(2)) or `timeout` has passed. Returns how many had not.
pub fn wait_exited(pidfds: &[OwnedFd], timeout: std::time::Duration) -> usize {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let start = std::time::Instant::now();
    let mut waiting: Vec<PollFd<'_>> = pidfds
        .iter()
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    while !waiting.is_empty() {
        let Some(left) = timeout.checked_sub(start.elapsed()) else {
            break;
        };
        let left = Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as i64,
        };
        match poll(&mut waiting, Some(&left)) {
            Ok(0) => break,
            Ok(_) => waiting.retain(|p| p.revents().is_empty()),
            Err(e) if e == rustix::io::Errno::INTR => {}
            Err(_) => break,
        }
    }
    waiting.len()
}

/// Sends `sig` to the scanned process `p` if the process holding its pid now is still `p`
/// (same start time, checked after the pidfd is open). Returns whether the signal was sent.
pub fn signal_if_same(proc_dir: &ProcDir, p: &ProcInfo, sig: Signal) -> bool {
    let same = || proc_dir.stat(p.pid).is_some_and(|q| q.start == p.start);
    match open(p.pid) {
        Ok(Some(fd)) => same() && send_signal(&fd, sig).is_ok(),
        Ok(None) => {
            same()
                && crate::process::pid(p.pid)
                    .is_some_and(|pid| rustix::process::kill_process(pid, sig).is_ok())
        }
        Err(_) => false,
    }
}

/// Sends `sig` to the whole process group of the scanned process `p`, in one call, through a
/// pidfd of the group's leader (`PIDFD_SIGNAL_PROCESS_GROUP` signals the group whose id is
/// the pidfd's pid: through any other member it finds no group, `ESRCH`), if the process
/// holding `p`'s pid is still `p`, in group `p.pgid`, the process holding pid `p.pgid` leads
/// that group, and `may_signal_group` accepts the leader as it is now
/// (the caller checks that its session holds only processes it may signal). Returns whether
/// the signal was sent; `false` also when the leader has exited (the group lives on without
/// it) and on kernels before 6.9: the caller then signals processes one by one.
pub fn signal_group_if_same(
    proc_dir: &ProcDir,
    p: &ProcInfo,
    sig: Signal,
    may_signal_group: impl Fn(&ProcInfo) -> bool,
) -> bool {
    if NO_GROUP_SIGNAL.load(Ordering::Relaxed) {
        return false;
    }
    let Ok(Some(fd)) = open(p.pgid) else {
        return false;
    };
    // `p` is still the scanned process, still in its group; the leader leads that group and
    // the caller accepts it.
    match (proc_dir.stat(p.pid), proc_dir.stat(p.pgid)) {
        (Some(now), Some(leader))
            if now.start == p.start
                && now.pgid == p.pgid
                && leader.pgid == p.pgid
                && may_signal_group(&leader) => {}
        _ => return false,
    }
    send_signal_group(&fd, sig).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_stale_identity_is_never_signalled() {
        let dir = ProcDir::open().unwrap();
        let mut child = Command::new("/bin/sleep").arg("30").spawn().unwrap();
        let real = dir.stat(child.id() as i32).unwrap();
        // The scan saw an earlier process with this pid: its start time differs. This is the
        // state after PID reuse, seen from the killer: it must leave the new process alone.
        let stale = ProcInfo {
            start: real.start - 1,
            ..real
        };
        assert!(!signal_if_same(&dir, &stale, Signal::KILL));
        assert!(!signal_group_if_same(&dir, &stale, Signal::KILL, |_| true));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the new process was hit"
        );
        assert!(signal_if_same(&dir, &real, Signal::KILL));
        let st = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGKILL));
        // Reaped: the pid may be anyone's now, and the old identity must not match it.
        assert!(!signal_if_same(&dir, &real, Signal::KILL));
    }

    /// Through a member that does not lead its group (pidfd of that member: `ESRCH`, and the
    /// killer fell back to one signal per process — 500 pidfd opens and stat reads per round).
    #[test]
    fn a_group_is_signalled_whole_through_any_member() {
        use std::os::unix::process::CommandExt;
        let dir = ProcDir::open().unwrap();
        let mut leader = Command::new("/bin/sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = leader.id() as i32;
        let t = std::time::Instant::now();
        let members = loop {
            let m: Vec<ProcInfo> = dir
                .scan()
                .into_iter()
                .filter(|p| p.pgid == pgid && p.pid != pgid)
                .collect();
            if m.len() == 2 || t.elapsed() > std::time::Duration::from_secs(5) {
                break m;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(members.len(), 2);
        let sent = signal_group_if_same(&dir, &members[0], Signal::KILL, |_| true);
        if !sent && NO_GROUP_SIGNAL.load(Ordering::Relaxed) {
            let _ = leader.kill();
            let _ = leader.wait();
            for m in &members {
                signal_if_same(&dir, m, Signal::KILL);
            }
            return; // Linux < 6.9: nothing to check
        }
        assert!(sent, "the group was not signalled through a member");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(leader.wait().unwrap().signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn open_refuses_bad_pids() {
        assert!(open(0).is_err());
        assert!(open(-5).is_err());
        let me = open(std::process::id() as i32).unwrap();
        assert!(me.is_some() || NO_PIDFD.load(Ordering::Relaxed));
    }
}
