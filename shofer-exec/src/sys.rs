//! The raw kernel interface of shofer-exec, in one place: pidfds, the child-subreaper flag,
//! pipes, `poll`, `eventfd` and `waitpid`. Everything else calls these safe wrappers.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};

fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Whether `pidfd_open` works here: 0 unknown, 1 yes, 2 no (ENOSYS, Linux < 5.3). A negative
/// answer is remembered so the fallback is taken without another failing syscall.
static PIDFD_SUPPORT: AtomicU8 = AtomicU8::new(0);

/// `pidfd_open(pid, 0)` (Linux 5.3). `Ok(None)` when the kernel lacks pidfds; the caller then
/// falls back to `kill(2)` after re-checking the process's identity.
///
/// # Errors
/// `ESRCH` when no such process exists (it may have exited and been reaped).
pub fn pidfd_open(pid: i32) -> io::Result<Option<OwnedFd>> {
    if PIDFD_SUPPORT.load(Ordering::Relaxed) == 2 {
        return Ok(None);
    }
    // Safety: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is passed.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    match cvt(ret) {
        Ok(fd) => {
            PIDFD_SUPPORT.store(1, Ordering::Relaxed);
            // Safety: the kernel just returned this fd to us and nothing else owns it.
            Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            PIDFD_SUPPORT.store(2, Ordering::Relaxed);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)` (Linux 5.1): signals exactly the process the pidfd
/// refers to, never a later process that reused its pid.
///
/// # Errors
/// `ESRCH` when the process already exited; `EPERM` when it is not ours to signal.
pub fn pidfd_send_signal(pidfd: &OwnedFd, sig: i32) -> io::Result<()> {
    // Safety: the fd is a valid pidfd owned by the caller; the siginfo pointer may be NULL.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    cvt(ret).map(drop)
}

/// `PIDFD_SIGNAL_PROCESS_GROUP` from `<linux/pidfd.h>` (Linux 6.9): signal the process group
/// of the pidfd's process.
const PIDFD_SIGNAL_PROCESS_GROUP: libc::c_uint = 1 << 2;

/// `pidfd_send_signal(pidfd, sig, NULL, PIDFD_SIGNAL_PROCESS_GROUP)` (Linux 6.9): signals the
/// whole process group the pidfd's process is in, in one call.
///
/// # Errors
/// `EINVAL` on kernels before 6.9 (unknown flag); `ESRCH` when the process is gone.
pub fn pidfd_send_signal_group(pidfd: &OwnedFd, sig: i32) -> io::Result<()> {
    // Safety: as pidfd_send_signal above, with a flags word.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            PIDFD_SIGNAL_PROCESS_GROUP,
        )
    };
    cvt(ret).map(drop)
}

/// `kill(pid, sig)`, the fallback where pidfds are missing.
///
/// # Errors
/// As `kill(2)`.
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // Safety: kill takes plain integers.
    let ret = unsafe { libc::kill(pid, sig) };
    cvt(ret as libc::c_long).map(drop)
}

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`, Linux 3.4): orphaned
/// descendants (a `setsid`/double-forked daemon whose parent exited) are reparented to us
/// instead of to init, so they stay findable by walking parent links from our pid.
///
/// # Errors
/// As `prctl(2)`.
pub fn set_child_subreaper() -> io::Result<()> {
    // Safety: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag; no memory is passed.
    let ret = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    cvt(ret as libc::c_long).map(drop)
}

/// A pipe `(read, write)`, both ends close-on-exec (the child gets dup2'd copies, which are
/// not). The pipe's capacity is raised to 1 MiB when the system allows (fewer wakeups for
/// chatty commands); failing that, the default stays.
///
/// # Errors
/// As `pipe2(2)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // Safety: fds is a valid array of two ints for the kernel to fill.
    let ret = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    cvt(ret as libc::c_long)?;
    // Safety: pipe2 succeeded, so both fds are new and owned by us alone.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Safety: F_SETPIPE_SZ takes an int; failure (EPERM over pipe-max-size) is harmless.
    unsafe { libc::fcntl(r.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
    Ok((r, w))
}

/// An `eventfd` (close-on-exec), used to wake the output pump.
///
/// # Errors
/// As `eventfd(2)`.
pub fn eventfd() -> io::Result<OwnedFd> {
    // Safety: eventfd takes integers and returns a new fd.
    let ret = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    cvt(ret as libc::c_long)?;
    // Safety: a new fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(ret) })
}

/// Adds 1 to an eventfd's counter, waking its pollers. Errors (a full counter) are ignored:
/// the fd is already readable then.
pub fn eventfd_signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // Safety: writes 8 bytes from a valid u64 to an eventfd we own.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd's counter (non-blocking read; nothing to read is fine).
pub fn eventfd_drain(fd: &OwnedFd) {
    let mut v: u64 = 0;
    // Safety: reads 8 bytes into a valid u64 from an eventfd we own.
    unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}

/// Waits until one of `fds` is readable (or hung up), or `timeout_ms` passes (-1: forever).
/// Returns the readiness of each fd in order.
///
/// # Errors
/// As `poll(2)`, except that `EINTR` is retried.
pub fn poll_readable(fds: &[RawFd], timeout_ms: i32) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // Safety: pfds is a valid, correctly sized array of pollfd structs.
        let ret = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
        if ret >= 0 {
            return Ok(pfds.iter().map(|p| p.revents != 0).collect());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `read(2)` into `buf`, retrying `EINTR`.
///
/// # Errors
/// As `read(2)`.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // Safety: buf is valid for writes of buf.len() bytes.
        let ret = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if ret >= 0 {
            return Ok(ret as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps the zombie child `pid` if it has exited (`waitpid(pid, WNOHANG)`); used for orphans
/// reparented to us as subreaper, never for a child that tokio waits on.
pub fn reap(pid: i32) {
    let mut status = 0;
    // Safety: waitpid on one specific pid with a valid status pointer.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
}

/// This process's pid.
pub fn getpid() -> i32 {
    std::process::id() as i32
}

/// Reads up to `buf.len()` bytes of the file at `path` (NUL-terminated, relative to the open
/// directory `dir`), with `openat(O_RDONLY|O_CLOEXEC)`, one `read` and `close`.
///
/// # Errors
/// As `openat(2)`/`read(2)`; a `path` without a trailing NUL is `InvalidInput`.
pub fn read_at(dir: &std::fs::File, path: &[u8], buf: &mut [u8]) -> io::Result<usize> {
    if path.last() != Some(&0) {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    // Safety: path is NUL-terminated (checked above) and dir is an open directory.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    cvt(fd as libc::c_long)?;
    // Safety: a new fd owned by nobody else; closed when `f` drops.
    let f = unsafe { OwnedFd::from_raw_fd(fd) };
    read(f.as_raw_fd(), buf)
}
