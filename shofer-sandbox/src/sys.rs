//! The raw kernel interface, quarantined: syscalls the `libc` and `landlock` crates do not
//! wrap the way we need, each with the kernel version it appeared in.

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// `LANDLOCK_CREATE_RULESET_VERSION` (Linux 5.13, `include/uapi/linux/landlock.h`).
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// Why the kernel has no usable Landlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LandlockAbsence {
    /// `ENOSYS`: not built into this kernel (e.g. Linux 5.10).
    NotBuilt,
    /// `EOPNOTSUPP`: built but not enabled at boot (`lsm=` without `landlock`).
    Disabled,
    /// Any other errno (e.g. a seccomp filter refusing the syscall).
    Other(i32),
}

/// The Landlock ABI version of the running kernel (`landlock_create_ruleset(NULL, 0,
/// LANDLOCK_CREATE_RULESET_VERSION)`, see landlock(7)), or why there is none.
pub fn landlock_abi() -> Result<u32, LandlockAbsence> {
    // Safety: with a NULL attribute pointer, size 0 and the VERSION flag, the syscall only
    // returns a number; it reads and writes no memory.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret >= 0 {
        return Ok(ret as u32);
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) => Err(LandlockAbsence::NotBuilt),
        Some(libc::EOPNOTSUPP) => Err(LandlockAbsence::Disabled),
        Some(e) => Err(LandlockAbsence::Other(e)),
        None => Err(LandlockAbsence::Other(0)),
    }
}

/// Marks every descriptor from 3 up close-on-exec except those in `keep` (sorted or not),
/// using `close_range(CLOSE_RANGE_CLOEXEC)` (Linux 5.11) and falling back to walking
/// `/proc/self/fd`. Descriptors in `keep` get `FD_CLOEXEC` cleared so they survive `execve`.
///
/// Marking instead of closing lets the Landlock ruleset fd and the exec-error pipe live until
/// `execve` itself.
pub fn cloexec_from_3(keep: &[RawFd]) -> io::Result<()> {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|&fd| fd > 2).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut start: libc::c_uint = 3;
    let mut ranges = Vec::new();
    for &fd in &keep {
        let fd = fd as libc::c_uint;
        if fd > start {
            ranges.push((start, fd - 1));
        }
        start = fd + 1;
    }
    ranges.push((start, libc::c_uint::MAX));
    for (lo, hi) in ranges {
        // Safety: close_range only changes descriptor flags of this process.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                lo,
                hi,
                libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
            )
        };
        if ret != 0 {
            return cloexec_by_walking(&keep);
        }
    }
    for &fd in &keep {
        set_cloexec(fd, false)?;
    }
    Ok(())
}

fn cloexec_by_walking(keep: &[RawFd]) -> io::Result<()> {
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        if fd > 2 {
            // EBADF: the directory's own fd, already closed; ignore.
            let _ = set_cloexec(fd, !keep.contains(&fd));
        }
    }
    Ok(())
}

/// Sets or clears `FD_CLOEXEC` on `fd`.
pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // Safety: F_GETFD/F_SETFD only touch descriptor flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let new = if on {
        flags | libc::FD_CLOEXEC
    } else {
        flags & !libc::FD_CLOEXEC
    };
    // Safety: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, new) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `fd` is an open descriptor of this process.
pub fn fd_is_open(fd: RawFd) -> bool {
    // Safety: F_GETFD only reads descriptor flags.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// `pidfd_open(pid, 0)` (Linux 5.3): a descriptor that names this process even after its PID
/// is reused.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // Safety: pidfd_open takes two integers and returns a new descriptor or -1.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: the kernel just returned this descriptor to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)` (Linux 5.1).
pub fn pidfd_send_signal(pidfd: &OwnedFd, sig: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // Safety: a NULL siginfo asks the kernel to fill it in as for kill(2).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `uname -r`.
pub fn kernel_release() -> String {
    // Safety: utsname is plain bytes; uname fills it completely on success.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // Safety: `uts` is a valid, writable utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return "unknown".to_string();
    }
    // Safety: the kernel NUL-terminates each utsname field.
    unsafe { CStr::from_ptr(uts.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The name of errno `e` (`ENOSYS`…) for messages and reports, or `errno N`.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EACCES => "EACCES",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ELOOP => "ELOOP",
        libc::ENOTDIR => "ENOTDIR",
        libc::EROFS => "EROFS",
        libc::EXDEV => "EXDEV",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

/// The C library's message for errno `e` ("Permission denied"), without Rust's
/// "(os error N)" suffix.
pub fn strerror(e: i32) -> String {
    let text = io::Error::from_raw_os_error(e).to_string();
    match text.rfind(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // Safety: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: pipe2 just returned these descriptors; each is owned once.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Asks the kernel to send SIGIO to this process when `fd` becomes readable (or its writers
/// are gone): `F_SETOWN` to our PID, then `O_ASYNC` (fcntl(2); pipes since Linux 2.6).
pub fn sigio_when_readable(fd: &OwnedFd) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = fd.as_raw_fd();
    // Safety: fcntl on our own descriptor with integer arguments; getpid cannot fail.
    unsafe {
        if libc::fcntl(fd, libc::F_SETOWN, libc::getpid()) < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
