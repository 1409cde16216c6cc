//! Resolving a socket path the way the calling process would see it, without letting the
//! kernel resolve it again later: component by component from `/proc/PID/root` or
//! `/proc/PID/cwd`, every component opened `O_PATH | O_NOFOLLOW`, symlinks expanded by hand
//! (an absolute target restarts at the caller's root), `..` stopping at the caller's root.
//! The result holds descriptors: the directory the last component was found in and the
//! target itself, so every later check and the operation itself apply to exactly these
//! inodes (a rename or symlink swap after this point changes nothing).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{Mode, OFlags, CWD};
use rustix::io::Errno;

/// Most symlinks followed in one resolution (the kernel's `MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;

/// A device/inode pair, `st_dev` in the C library's encoding.
pub type Ident = (u64, u64);

/// A resolved path: the directory holding the last component, and the target when it exists.
pub struct Resolved {
    /// `O_PATH` descriptor of the directory the last component lives in.
    pub parent: OwnedFd,
    /// `O_PATH` descriptor of the target, `None` when it does not exist.
    pub target: Option<OwnedFd>,
    /// The caller's root directory, where [`beneath`] stops.
    pub root: Ident,
}

/// `openat(dir, name, flags | O_CLOEXEC)`; a name with a NUL byte is `EINVAL`.
fn open_at(dir: impl AsFd, name: &[u8], flags: OFlags) -> Result<OwnedFd, i32> {
    rustix::fs::openat(dir, name, flags | OFlags::CLOEXEC, Mode::empty())
        .map_err(Errno::raw_os_error)
}

/// `fstat` of a descriptor.
pub fn stat_fd(fd: impl AsFd) -> Result<rustix::fs::Stat, i32> {
    rustix::fs::fstat(fd).map_err(Errno::raw_os_error)
}

/// The (device, inode) of a descriptor, by number: the caller holds it open for the call.
pub fn ident(fd: RawFd) -> Result<Ident, i32> {
    // Safety: every caller passes `as_raw_fd` of a descriptor it owns or borrows for the
    // whole call; this borrow ends with the call.
    let st = stat_fd(unsafe { BorrowedFd::borrow_raw(fd) })?;
    Ok((st.st_dev, st.st_ino))
}

/// The target of the symlink `fd` (opened `O_PATH | O_NOFOLLOW`) names: `readlinkat` with an
/// empty path.
fn readlink_fd(fd: &OwnedFd) -> Result<Vec<u8>, i32> {
    let buf = Vec::with_capacity(libc::PATH_MAX as usize);
    rustix::fs::readlinkat(fd, c"", buf)
        .map(std::ffi::CString::into_bytes)
        .map_err(Errno::raw_os_error)
}

/// Opens `/proc/PID/<what>` (`root` or `cwd`) as an `O_PATH` directory.
pub fn proc_dir(pid: libc::pid_t, what: &str) -> Result<OwnedFd, i32> {
    let p = format!("/proc/{pid}/{what}");
    open_at(CWD, p.as_bytes(), OFlags::PATH | OFlags::DIRECTORY)
}

/// Resolves `path` as process `pid` would (relative paths from its working directory).
/// `follow_last`: expand a symlink in the last component (`connect`), or not (`bind`).
///
/// # Errors
/// The errno the kernel would give for the lookup (`ENOENT`, `ENOTDIR`, `ELOOP`, `EACCES`).
pub fn resolve(pid: libc::pid_t, path: &[u8], follow_last: bool) -> Result<Resolved, i32> {
    resolve_at(pid, None, path, follow_last)
}

/// As [`resolve`], with a relative `path` taken from `dir` (the caller's `dirfd` of an
/// `*at` call, as our own descriptor) instead of the working directory when `dir` is given.
///
/// # Errors
/// As [`resolve`].
pub fn resolve_at(
    pid: libc::pid_t,
    dir: Option<OwnedFd>,
    path: &[u8],
    follow_last: bool,
) -> Result<Resolved, i32> {
    if path.is_empty() {
        return Err(libc::ENOENT);
    }
    let root = proc_dir(pid, "root")?;
    let root_id = ident(root.as_raw_fd())?;
    let start = if path[0] == b'/' {
        open_at(&root, b".", OFlags::PATH | OFlags::DIRECTORY)?
    } else if let Some(dir) = dir {
        dir
    } else {
        proc_dir(pid, "cwd")?
    };
    walk(&root, root_id, start, path, follow_last)
}

fn components(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(|c| c.to_vec())
        .collect()
}

fn walk(
    root: &OwnedFd,
    root_id: Ident,
    start: OwnedFd,
    path: &[u8],
    follow_last: bool,
) -> Result<Resolved, i32> {
    let mut dir = start;
    // Pending components, last one at the front of the Vec's end (a stack, reversed).
    let mut todo: Vec<Vec<u8>> = components(path);
    todo.reverse();
    let trailing_slash = path.ends_with(b"/");
    let mut links = 0usize;
    if todo.is_empty() {
        let target = open_at(&dir, b".", OFlags::PATH)?;
        return Ok(Resolved {
            parent: dir,
            target: Some(target),
            root: root_id,
        });
    }
    while let Some(comp) = todo.pop() {
        let last = todo.is_empty();
        if comp == b"." {
            if last {
                let target = open_at(&dir, b".", OFlags::PATH)?;
                return Ok(Resolved {
                    parent: dir,
                    target: Some(target),
                    root: root_id,
                });
            }
            continue;
        }
        if comp == b".." {
            if ident(dir.as_raw_fd())? != root_id {
                dir = open_at(&dir, b"..", OFlags::PATH | OFlags::DIRECTORY)?;
            }
            if last {
                let target = open_at(&dir, b".", OFlags::PATH)?;
                return Ok(Resolved {
                    parent: dir,
                    target: Some(target),
                    root: root_id,
                });
            }
            continue;
        }
        if !last {
            // The common case, a directory, without an fstat; a symlink or a file fails with
            // ENOTDIR and takes the general path below.
            let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY;
            match open_at(&dir, &comp, flags) {
                Ok(fd) => {
                    dir = fd;
                    continue;
                }
                Err(libc::ENOTDIR) => {}
                Err(e) => return Err(e),
            }
        }
        let fd = match open_at(&dir, &comp, OFlags::PATH | OFlags::NOFOLLOW) {
            Ok(fd) => fd,
            Err(libc::ENOENT) if last => {
                return Ok(Resolved {
                    parent: dir,
                    target: None,
                    root: root_id,
                })
            }
            Err(e) => return Err(e),
        };
        let st = stat_fd(&fd)?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFLNK && (!last || follow_last || trailing_slash) {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(libc::ELOOP);
            }
            let target = readlink_fd(&fd)?;
            if target.first() == Some(&b'/') {
                dir = open_at(root, b".", OFlags::PATH | OFlags::DIRECTORY)?;
            }
            let mut more = components(&target);
            if more.is_empty() {
                more.push(b".".to_vec());
            }
            for c in more.into_iter().rev() {
                todo.push(c);
            }
            continue;
        }
        if last {
            return Ok(Resolved {
                parent: dir,
                target: Some(fd),
                root: root_id,
            });
        }
        if kind != libc::S_IFDIR {
            return Err(libc::ENOTDIR);
        }
        dir = fd;
    }
    unreachable!("the loop returns at the last component")
}

/// Whether directory `dir` is `root` or beneath one of `roots` (directory identities), walking
/// `..` until the caller's root `stop` (or the supervisor's root).
pub fn beneath(dir: &OwnedFd, roots: &[Ident], stop: Option<Ident>) -> bool {
    let Ok(mut id) = ident(dir.as_raw_fd()) else {
        return false;
    };
    let mut cur: Option<OwnedFd> = None;
    for _ in 0..4096 {
        if roots.contains(&id) {
            return true;
        }
        if Some(id) == stop {
            return false;
        }
        let here = cur.as_ref().unwrap_or(dir);
        let Ok(up) = open_at(here, b"..", OFlags::PATH | OFlags::DIRECTORY) else {
            return false;
        };
        let Ok(up_id) = ident(up.as_raw_fd()) else {
            return false;
        };
        if up_id == id {
            return false; // the supervisor's root
        }
        id = up_id;
        cur = Some(up);
    }
    false
}

/// `sockaddr_un` for `/proc/self/fd/<fd>`: the pinned inode, named so that the kernel's own
/// lookup cannot land anywhere else.
pub fn pinned_addr(fd: RawFd) -> Vec<u8> {
    let mut a = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
    a.extend_from_slice(format!("/proc/self/fd/{fd}").as_bytes());
    a.push(0);
    a
}

/// Shows a path for messages.
pub fn show(path: &[u8]) -> String {
    std::ffi::OsStr::from_bytes(path)
        .to_string_lossy()
        .into_owned()
}
