//! Descriptors: pipes, `eventfd`, `poll`, `read`, `splice`, and closing (or marking
//! close-on-exec) every descriptor from one up: [`close_from`], the one version of it that is
//! safe between fork and exec, and [`cloexec_from_3`], which keeps a few; [`canonicalize`],
//! the canonical path of an existing file as the kernel names what it opened.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::pipe::{PipeFlags, SpliceFlags};

/// The canonical path of the existing `path` (symlinks followed), as the kernel names the
/// object it opens: one `open(O_PATH)` and one `readlink` of `/proc/self/fd/N`, where
/// `std::fs::canonicalize` (realpath(3)) costs a `readlink` per component — hundreds a start
/// across the writable set, the state directories and the secret locations. Falls back to
/// `std::fs::canonicalize` where `/proc` does not answer with a reachable path.
///
/// # Errors
/// As open(2) (`ENOENT`, `EACCES`, `ELOOP`).
pub fn canonicalize(path: &std::path::Path) -> io::Result<std::path::PathBuf> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
    match path_of(&fd) {
        Some(p) => Ok(p),
        None => std::fs::canonicalize(path),
    }
}

/// The canonical path of what `fd` names, as the kernel shows it (`/proc/self/fd/N`: one
/// `readlink`); `None` for an object deleted since, or one with no path from this process's
/// root.
pub fn path_of(fd: impl AsFd) -> Option<std::path::PathBuf> {
    match std::fs::read_link(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())) {
        Ok(p) if p.is_absolute() && !p.as_os_str().as_encoded_bytes().ends_with(b" (deleted)") => {
            Some(p)
        }
        _ => None,
    }
}

/// Retries `f` while it fails with `EINTR`.
fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(Errno::INTR) => continue,
            r => return r.map_err(Into::into),
        }
    }
}

/// `pipe2(O_CLOEXEC)`: (read end, write end).
///
/// # Errors
/// As `pipe2(2)` (`EMFILE`, `ENFILE`).
pub fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(Into::into)
}

/// Pipe capacity asked for by [`pipe_large`].
pub const LARGE_PIPE: usize = 1 << 20;

/// A close-on-exec pipe whose capacity is raised to [`LARGE_PIPE`] bytes when the system
/// allows (`F_SETPIPE_SZ`; over `/proc/sys/fs/pipe-max-size` without `CAP_SYS_RESOURCE` the
/// default 64 KiB stays): fewer wake-ups for a chatty writer.
///
/// # Errors
/// As `pipe2(2)`.
pub fn pipe_large() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = pipe_cloexec()?;
    let _ = rustix::pipe::fcntl_setpipe_size(&r, LARGE_PIPE);
    Ok((r, w))
}

/// A non-blocking, close-on-exec `eventfd` with counter 0.
///
/// # Errors
/// As `eventfd(2)`.
pub fn eventfd() -> io::Result<OwnedFd> {
    rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).map_err(Into::into)
}

/// Adds 1 to an eventfd's counter, waking its pollers. A full counter (`EAGAIN`) is ignored:
/// the eventfd is readable then anyway.
pub fn eventfd_signal(fd: impl AsFd) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Resets a non-blocking eventfd's counter to 0 (nothing to read is fine).
pub fn eventfd_drain(fd: impl AsFd) {
    let mut v = [0u8; 8];
    let _ = rustix::io::read(fd, &mut v);
}

/// Waits until one of `fds` is readable or hung up, or `timeout_ms` passes (negative: no
/// limit). Returns the readiness of each descriptor, in order. `EINTR` is retried with the
/// full timeout.
///
/// # Errors
/// As `poll(2)` (`ENOMEM`, `EINVAL` for too many descriptors).
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::from_borrowed_fd(*fd, PollFlags::IN))
        .collect();
    let timeout = (timeout_ms >= 0).then(|| Timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    });
    retry(|| rustix::event::poll(&mut pfds, timeout.as_ref()))?;
    Ok(pfds.iter().map(|p| !p.revents().is_empty()).collect())
}

/// Waits, without a time limit, until `fd` is readable or hung up. True when there is
/// something to read (`POLLIN`), false when it only reports `POLLHUP`/`POLLERR` — for a
/// seccomp listener: no process uses its filter any more (seccomp_unotify(2)).
///
/// # Errors
/// As `poll(2)`.
pub fn wait_readable(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut pfd = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
    retry(|| rustix::event::poll(&mut pfd, None))?;
    Ok(pfd[0].revents().contains(PollFlags::IN))
}

/// `read(2)` into `buf`, retrying `EINTR`. 0 is end of file.
///
/// # Errors
/// As `read(2)`.
pub fn read(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    let fd = fd.as_fd();
    retry(|| rustix::io::read(fd, &mut *buf))
}

/// `splice(pipe, NULL, file, NULL, len, SPLICE_F_MOVE)`: moves up to `len` bytes from a pipe to
/// a file at the file's position without copying them through user space, retrying `EINTR`.
/// 0 is the pipe's end of file.
///
/// # Errors
/// As `splice(2)`: `EINVAL` when the file's filesystem cannot take spliced data, `ENOSPC`,
/// `EIO` from the write. On an error no byte was moved by that call.
pub fn splice(pipe: impl AsFd, file: impl AsFd, len: usize) -> io::Result<usize> {
    let (pipe, file) = (pipe.as_fd(), file.as_fd());
    retry(|| rustix::pipe::splice(pipe, None, file, None, len, SpliceFlags::MOVE))
}

/// What [`close_from`] does to each descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseFrom {
    /// Close it now.
    Close,
    /// Mark it close-on-exec: it stays usable until `execve`, which closes it.
    Cloexec,
}

/// Most descriptors the fallback of [`close_from`] walks (`RLIMIT_NOFILE` may be unlimited).
const FALLBACK_MAX_FDS: u64 = 1 << 20;

/// `close_range(first, last, flags)` (Linux 5.9; `CLOSE_RANGE_CLOEXEC` 5.11); true when it
/// succeeded. A raw system call on integers: async-signal-safe.
fn close_range(first: libc::c_uint, last: libc::c_uint, mode: CloseFrom) -> bool {
    let flags = match mode {
        CloseFrom::Close => 0,
        CloseFrom::Cloexec => libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
    };
    // Raw syscall: rustix has no close_range.
    // Safety: close_range changes (closes, or sets flags on) only this process's descriptors
    // in the range; no memory is passed.
    unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) == 0 }
}

/// Closes, or marks close-on-exec (`mode`), every descriptor from `first` up. For the child
/// between `fork` and `execve` (or a forked process that lives on): async-signal-safe, it
/// allocates nothing and takes no lock.
///
/// One `close_range(2)` call (Linux 5.9; [`CloseFrom::Cloexec`] needs 5.11). Where that
/// fails (an older kernel: `ENOSYS`, or `EINVAL` for the flag), the fallback handles each
/// descriptor number from `first` below the soft `RLIMIT_NOFILE` (at most 2^20 of them) with
/// `close(2)` or `fcntl(F_SETFD, FD_CLOEXEC)`, ignoring the numbers that are not open. It
/// cannot fail: afterwards no descriptor from `first` up is left open (or without
/// close-on-exec).
pub fn close_from(first: RawFd, mode: CloseFrom) {
    let first = libc::c_uint::try_from(first).unwrap_or(0);
    if !close_range(first, libc::c_uint::MAX, mode) {
        close_each_from(first, mode);
    }
}

/// The fallback of [`close_from`]: one call per descriptor number below the soft
/// `RLIMIT_NOFILE` (at most [`FALLBACK_MAX_FDS`]). Async-signal-safe.
fn close_each_from(first: libc::c_uint, mode: CloseFrom) {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .map_or(FALLBACK_MAX_FDS, |n| n.min(FALLBACK_MAX_FDS));
    for fd in u64::from(first)..limit {
        let fd = fd as RawFd;
        // Raw close/fcntl: `fd` is a number that may not be open, which rustix's OwnedFd and
        // BorrowedFd must not represent.
        // Safety: close and F_SETFD act on this process's descriptor table only; a number
        // that is not open is EBADF.
        unsafe {
            match mode {
                CloseFrom::Close => libc::close(fd),
                CloseFrom::Cloexec => libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC),
            };
        }
    }
}

/// Marks every descriptor from 3 up close-on-exec except those in `keep` (any order;
/// duplicates and fds ≤ 2 ignored), which get `FD_CLOEXEC` cleared so they survive `execve`.
/// Uses `close_range(CLOSE_RANGE_CLOEXEC)` (Linux 5.11), falling back to walking
/// `/proc/self/fd`.
///
/// Marking instead of closing lets descriptors the caller still needs (a Landlock ruleset, an
/// exec-error pipe) live until `execve` itself.
///
/// # Errors
/// Listing `/proc/self/fd` failed (fallback only), or clearing the flag on a kept descriptor
/// failed (`EBADF`: it is not open).
pub fn cloexec_from_3(keep: &[RawFd]) -> io::Result<()> {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|&fd| fd > 2).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut lo: libc::c_uint = 3;
    let mut ranges = Vec::with_capacity(keep.len() + 1);
    for &fd in &keep {
        let fd = fd as libc::c_uint;
        if fd > lo {
            ranges.push((lo, fd - 1));
        }
        lo = fd + 1;
    }
    ranges.push((lo, libc::c_uint::MAX));
    for (lo, hi) in ranges {
        if !close_range(lo, hi, CloseFrom::Cloexec) {
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
            // EBADF: the directory's own descriptor, closed by now.
            let _ = set_cloexec(fd, !keep.contains(&fd));
        }
    }
    Ok(())
}

/// Sets or clears `FD_CLOEXEC` on descriptor number `fd`.
///
/// # Errors
/// `EBADF` when `fd` is not open.
pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // Raw fcntl: `fd` is a number that may not be open, which rustix's BorrowedFd must not
    // represent.
    // Safety: F_GETFD/F_SETFD read and write only descriptor flags; a closed fd is EBADF.
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

/// Asks the kernel to send SIGIO to this process when `fd` becomes readable (or its writers
/// are gone): `F_SETOWN` to our pid, then `O_ASYNC` (fcntl(2); pipes since Linux 2.6).
///
/// # Errors
/// As `fcntl(2)`.
pub fn sigio_when_readable(fd: impl AsFd) -> io::Result<()> {
    let fd = fd.as_fd();
    // Raw fcntl: rustix has no F_SETOWN.
    // Safety: fcntl on a descriptor borrowed for the call, with integer arguments.
    if unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_SETOWN,
            rustix::process::getpid().as_raw_nonzero().get(),
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::ASYNC)?;
    Ok(())
}

/// Whether descriptor number `fd` is open in this process.
pub fn fd_is_open(fd: RawFd) -> bool {
    // Raw fcntl: as in set_cloexec, `fd` may not be open.
    // Safety: F_GETFD only reads descriptor flags; a closed fd is EBADF.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn pipe_poll_read_and_eventfd() {
        let (r, w) = pipe_large().unwrap();
        let ev = eventfd().unwrap();
        assert_eq!(
            poll_readable(&[r.as_fd(), ev.as_fd()], 0).unwrap(),
            [false, false]
        );
        eventfd_signal(&ev);
        assert_eq!(
            poll_readable(&[r.as_fd(), ev.as_fd()], 1000).unwrap(),
            [false, true]
        );
        eventfd_drain(&ev);
        assert_eq!(poll_readable(&[ev.as_fd()], 0).unwrap(), [false]);
        std::fs::File::from(w).write_all(b"hello").unwrap();
        assert_eq!(poll_readable(&[r.as_fd()], 1000).unwrap(), [true]);
        let mut buf = [0u8; 16];
        assert_eq!(read(&r, &mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        // The writer is gone: end of file.
        assert_eq!(read(&r, &mut buf).unwrap(), 0);
    }

    #[test]
    fn splice_moves_pipe_data_into_a_file() {
        let (r, w) = pipe_cloexec().unwrap();
        let mut f = tempfile_in_tmp();
        std::fs::File::from(w).write_all(b"spliced bytes").unwrap();
        assert_eq!(splice(&r, &f, 1 << 20).unwrap(), 13);
        assert_eq!(splice(&r, &f, 1 << 20).unwrap(), 0);
        use std::io::{Read, Seek};
        f.rewind().unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "spliced bytes");
    }

    fn tempfile_in_tmp() -> std::fs::File {
        let p = std::env::temp_dir().join(format!(
            "shofer-sys-splice-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        std::fs::remove_file(&p).unwrap();
        f
    }

    #[test]
    fn cloexec_flags_set_and_cleared() {
        let (r, w) = pipe_cloexec().unwrap();
        let (r, w) = (r.as_raw_fd(), w.as_raw_fd());
        set_cloexec(r, false).unwrap();
        // Safety: F_GETFD on a descriptor we own.
        let flags = |fd| unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_eq!(flags(r) & libc::FD_CLOEXEC, 0);
        assert_ne!(flags(w) & libc::FD_CLOEXEC, 0);
        assert!(fd_is_open(r));
        assert!(!fd_is_open(-1));
        assert!(set_cloexec(-1, true).is_err());
    }

    /// Runs the test `fd::tests::<child>` in a child process with `var` set (descriptor changes
    /// hold for the whole process) and checks that it succeeded and printed `ok`.
    fn in_child(child: &str, var: &str, ok: &str) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &format!("fd::tests::{child}"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(var, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(ok), "{text}");
    }

    #[test]
    fn cloexec_from_3_keeps_only_what_is_asked() {
        in_child("cloexec_child", "SHOFER_SYS_CLOEXEC_CHILD", "cloexec ok");
    }

    #[test]
    fn close_from_closes_or_marks_from_its_first_descriptor_up() {
        in_child(
            "close_from_child",
            "SHOFER_SYS_CLOSE_FROM_CHILD",
            "close_from ok",
        );
    }

    #[test]
    fn close_from_child() {
        if std::env::var_os("SHOFER_SYS_CLOSE_FROM_CHILD").is_none() {
            return;
        }
        // Safety: F_GETFD on descriptor numbers, open or not.
        let flags = |fd| unsafe { libc::fcntl(fd, libc::F_GETFD) };
        let four = || {
            let fds: Vec<OwnedFd> = (0..2)
                .flat_map(|_| {
                    let (r, w) = pipe_cloexec().unwrap();
                    [r, w]
                })
                .collect();
            for fd in &fds {
                set_cloexec(fd.as_raw_fd(), false).unwrap();
            }
            let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
            // Closed below, or left to exec: not ours to close again.
            fds.into_iter().for_each(std::mem::forget);
            raw
        };
        for (mode, each) in [
            (CloseFrom::Cloexec, false),
            (CloseFrom::Close, false),
            (CloseFrom::Cloexec, true),
            (CloseFrom::Close, true),
        ] {
            let fds = four();
            let cut = fds[2];
            if each {
                close_each_from(cut as libc::c_uint, mode);
            } else {
                close_from(cut, mode);
            }
            for &fd in &fds {
                let f = flags(fd);
                if fd < cut {
                    assert_eq!(f, 0, "{fd} below {cut} untouched");
                } else if mode == CloseFrom::Close {
                    assert!(f < 0, "{fd} closed ({mode:?}, fallback {each})");
                } else {
                    assert_eq!(
                        f,
                        libc::FD_CLOEXEC,
                        "{fd} marked ({mode:?}, fallback {each})"
                    );
                }
            }
            close_from(fds[0], CloseFrom::Close);
        }
        println!("close_from ok");
    }

    #[test]
    fn cloexec_child() {
        if std::env::var_os("SHOFER_SYS_CLOEXEC_CHILD").is_none() {
            return;
        }
        let (a, b) = pipe_cloexec().unwrap();
        let (a, b) = (a.as_raw_fd(), b.as_raw_fd());
        set_cloexec(a, false).unwrap();
        set_cloexec(b, false).unwrap();
        cloexec_from_3(&[b, 1, b]).unwrap();
        // Safety: F_GETFD on descriptors we own.
        let flags = |fd| unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_ne!(flags(a) & libc::FD_CLOEXEC, 0);
        assert_eq!(flags(b) & libc::FD_CLOEXEC, 0);
        println!("cloexec ok");
    }
}
