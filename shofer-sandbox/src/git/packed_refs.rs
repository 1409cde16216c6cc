//! The one write into a linked worktree's common dir that the supervisor performs for the
//! command: git's `packed-refs` lock protocol (docs/ARCHITECTURE.md, "Linked git worktrees").
//!
//! Git deletes a ref (and rewrites `packed-refs`) by creating `packed-refs.lock` with
//! `O_CREAT | O_EXCL`, writing the new list to `packed-refs.new` (also `O_CREAT | O_EXCL`),
//! renaming that onto `packed-refs`, and unlinking the lock (`refs/packed-backend.c`,
//! `lockfile.c`, `tempfile.c`). Landlock can only grant the whole common dir, with its
//! `config` and `hooks/`, so the directory stays outside the writable set, and the namespace
//! backends bind it read-only (a writable top level let the command add any name there); the
//! gate
//! ([`crate::gate::filter::Traps::creates`]) traps these calls instead. For each one this module
//! decides, from the caller's own view of the path ([`crate::gate::resolve`]), whether it is exactly
//! one of:
//! - create `packed-refs.lock` or `packed-refs.new` (`O_CREAT | O_EXCL`: never an existing
//!   file, never through a symlink);
//! - rename `packed-refs.lock` or `packed-refs.new` onto `packed-refs`;
//! - unlink `packed-refs.lock` or `packed-refs.new`;
//!
//! in the directory whose (device, inode) is the common dir's, recorded when the supervisor
//! opened it before the command started. Anything else is answered "continue": the kernel
//! runs the call under the command's Landlock domain as if never trapped, so nothing is
//! granted by that answer. A matching call is performed by the supervisor relative to its own
//! descriptor of the common dir, never by re-resolving a path the command can swap, with the
//! caller's identity and umask; a created file's descriptor is installed in the caller with
//! `SECCOMP_IOCTL_NOTIF_ADDFD` (Linux 5.9).
//!
//! Only these three names can therefore come to exist in the common dir, only as regular
//! files created here, and `packed-refs` can only be replaced by one of them: `config`,
//! `hooks/`, `info/` and other worktrees' files stay out of reach. `packed-refs` is data git
//! parses (a garbage one makes git report a broken ref, it runs nothing).
//!
//! One more step is answered, on every backend: git rewrites the read-only `config` even when
//! nothing in it changes (`git branch -d` always drops the branch's section,
//! `repo_config_copy_or_rename_section_in_file` in `config.c`): it creates `config.lock` (`O_CREAT
//! | O_EXCL`, created here like the names above; the kernel creates it in a main worktree's
//! `.git`), `chmod`s it like `config` ([`Op::Chmod`], performed here in the namespace backends'
//! read-only bind), writes it, and renames it onto `config`. That rename is [`Op::KeepConfig`]:
//! when `config.lock` holds exactly the bytes of `config`, the lock is removed and the rename
//! reported done ([`keep_config`]); else it fails with `EACCES`, and `config` is never replaced.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{openat, renameat, statat, unlinkat, AtFlags, Mode, OFlags};
use std::path::Path;

use crate::gate::filter::{
    NR_CHMOD, NR_FCHMODAT, NR_FCHMODAT2, NR_OPEN, NR_OPENAT, NR_RENAME, NR_RENAMEAT, NR_RENAMEAT2,
    NR_UNLINK, NR_UNLINKAT,
};
use crate::gate::resolve::{self, Ident};

/// The file git replaces.
pub const PACKED: &[u8] = b"packed-refs";
/// The names git creates beside it: the lock, and the new list renamed onto `packed-refs`.
pub const TRANSIENT: [&[u8]; 2] = [b"packed-refs.lock", b"packed-refs.new"];
/// The repository's configuration, read-only for the command.
pub const CONFIG: &[u8] = b"config";
/// Git's lock of [`CONFIG`], holding the rewritten file.
pub const CONFIG_LOCK: &[u8] = b"config.lock";
/// Every name the command may create and remove in the common dir.
const CREATABLE: [&[u8]; 3] = [TRANSIENT[0], TRANSIENT[1], CONFIG_LOCK];

/// Open flags performed as given; a create with any other flag (`O_PATH`, `O_DIRECTORY`,
/// `O_TMPFILE`, `O_DIRECT`, …) is left to the kernel (and Landlock).
const PASSED_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_CREAT
    | libc::O_EXCL
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DSYNC
    | libc::O_SYNC
    | libc::O_TRUNC
    | libc::O_NOCTTY
    | libc::O_LARGEFILE
    | libc::O_CLOEXEC
    | libc::O_NOFOLLOW;

/// The common dir, opened by the supervisor before the command starts.
pub struct CommonDir {
    /// `O_PATH` descriptor of the directory every operation is performed in.
    pub fd: OwnedFd,
    /// Its (device, inode).
    pub id: Ident,
    /// The files [`create`] made for the command in this run: only those may it rename,
    /// unlink or `chmod` through the gate ([`made_here`]), never a lock the host's own git
    /// holds there (a concurrent `git pack-refs`, `git config`).
    pub made: Made,
}

/// (device, inode) of the files the gate made, shared with the threads that perform calls (a
/// few a run: a list).
pub type Made = std::sync::Arc<std::sync::Mutex<Vec<Ident>>>;

/// The identity of `name` in `dir` (not followed) if it is one of the files the gate made
/// (`made`).
pub fn made_here(dir: BorrowedFd<'_>, name: &[u8], made: &Made) -> Option<Ident> {
    // NOFOLLOW: the name itself.
    let st = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    let ident = (st.st_dev, st.st_ino);
    made.lock().ok()?.contains(&ident).then_some(ident)
}

impl CommonDir {
    /// Opens `path` (a validated linked worktree's common dir) without following symlinks.
    ///
    /// # Errors
    /// The `open`/`fstat` error.
    pub fn open(path: &Path) -> std::io::Result<CommonDir> {
        let fd = crate::paths::open_nofollow(path)?;
        let id = resolve::ident(fd.as_raw_fd()).map_err(std::io::Error::from_raw_os_error)?;
        Ok(CommonDir {
            fd,
            id,
            made: Made::default(),
        })
    }
}

/// A trapped call that is exactly one of the `packed-refs` operations.
#[derive(Debug, PartialEq, Eq)]
pub enum Op {
    /// `open(name, flags, mode)` with `O_CREAT | O_EXCL`.
    Create {
        name: &'static [u8],
        flags: i32,
        mode: u32,
    },
    /// `rename(from, "packed-refs")`.
    Rename { from: &'static [u8] },
    /// `rename("config.lock", "config")`: [`keep_config`].
    KeepConfig,
    /// `unlink(name)`.
    Unlink { name: &'static [u8] },
    /// `chmod(name, mode)` (git copies `config`'s mode to `config.lock`), permission bits
    /// only.
    Chmod { name: &'static [u8], mode: u32 },
}

fn last_component(path: &[u8]) -> Option<&[u8]> {
    if path.ends_with(b"/") {
        return None;
    }
    Some(path.rsplit(|&b| b == b'/').next().unwrap_or(path))
}

fn transient(path: &[u8]) -> Option<&'static [u8]> {
    let last = last_component(path)?;
    TRANSIENT.into_iter().find(|n| *n == last)
}

fn creatable(path: &[u8]) -> Option<&'static [u8]> {
    let last = last_component(path)?;
    CREATABLE.into_iter().find(|n| *n == last)
}

/// Decides what the trapped call `nr` with `args` of thread `pid` is: `Some` only for one of
/// the operations above in `common`. `dirfd` gives the caller's descriptor as ours (for the
/// `*at` calls). Reads the caller's memory: the caller must be checked with `ID_VALID` after
/// this and before acting.
pub fn decide(
    pid: libc::pid_t,
    nr: u32,
    args: &[u64; 6],
    common: &CommonDir,
    dirfd: &mut dyn FnMut(u64) -> Result<OwnedFd, i32>,
) -> Option<Op> {
    let here = |dir: u64, path: &[u8], dirfd: &mut dyn FnMut(u64) -> Result<OwnedFd, i32>| {
        let start = if dir as i32 == libc::AT_FDCWD || path.first() == Some(&b'/') {
            None
        } else {
            Some(dirfd(dir).ok()?)
        };
        let r = resolve::resolve_at(pid, start, path, false).ok()?;
        (resolve::ident(r.parent.as_raw_fd()).ok()? == common.id).then_some(())
    };
    let path_at = |addr: u64| crate::gate::notify::read_path(pid, addr).ok();
    match nr {
        NR_OPEN | NR_OPENAT => {
            let (dir, path, flags, mode) = if nr == NR_OPEN {
                (libc::AT_FDCWD as u64, args[0], args[1], args[2])
            } else {
                (args[0], args[1], args[2], args[3])
            };
            let flags = flags as i32;
            let excl = libc::O_CREAT | libc::O_EXCL;
            if flags & excl != excl || flags & !PASSED_FLAGS != 0 {
                return None;
            }
            let path = path_at(path)?;
            let name = creatable(&path)?;
            here(dir, &path, dirfd)?;
            Some(Op::Create {
                name,
                flags,
                mode: mode as u32 & 0o7777,
            })
        }
        NR_RENAME | NR_RENAMEAT | NR_RENAMEAT2 => {
            let (old_dir, old, new_dir, new) = if nr == NR_RENAME {
                let cwd = libc::AT_FDCWD as u64;
                (cwd, args[0], cwd, args[1])
            } else {
                (args[0], args[1], args[2], args[3])
            };
            if nr == NR_RENAMEAT2 && args[4] as u32 != 0 {
                return None; // RENAME_EXCHANGE / NOREPLACE / WHITEOUT: not git's
            }
            let new = path_at(new)?;
            let target = last_component(&new)?;
            if target != PACKED && target != CONFIG {
                return None; // most renames: decided without reading the other path
            }
            let old = path_at(old)?;
            let op = if target == PACKED {
                Op::Rename {
                    from: transient(&old)?,
                }
            } else if last_component(&old)? == CONFIG_LOCK {
                Op::KeepConfig
            } else {
                return None;
            };
            here(old_dir, &old, dirfd)?;
            here(new_dir, &new, dirfd)?;
            Some(op)
        }
        NR_UNLINK | NR_UNLINKAT => {
            let (dir, path) = if nr == NR_UNLINK {
                (libc::AT_FDCWD as u64, args[0])
            } else {
                if args[2] as i32 & libc::AT_REMOVEDIR != 0 {
                    return None;
                }
                (args[0], args[1])
            };
            let path = path_at(path)?;
            let name = creatable(&path)?;
            here(dir, &path, dirfd)?;
            Some(Op::Unlink { name })
        }
        NR_CHMOD | NR_FCHMODAT | NR_FCHMODAT2 => {
            let (dir, path, mode) = if nr == NR_CHMOD {
                (libc::AT_FDCWD as u64, args[0], args[1])
            } else {
                if nr == NR_FCHMODAT2 && args[3] as u32 != 0 {
                    return None; // AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH: not git's
                }
                (args[0], args[1], args[2])
            };
            let path = path_at(path)?;
            let name = creatable(&path)?;
            here(dir, &path, dirfd)?;
            Some(Op::Chmod {
                name,
                mode: mode as u32 & 0o777,
            })
        }
        _ => None,
    }
}

/// The file-creation mask of thread `pid` (`Umask:` of `/proc/PID/status`, Linux 4.7).
pub fn umask_of(pid: libc::pid_t) -> Option<u32> {
    u32::from_str_radix(shofer_sys::proc::Status::read(pid)?.first("Umask")?, 8).ok()
}

std::thread_local! {
    /// Whether this thread has its own umask (its own `fs_struct`).
    static OWN_FS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Sets the calling thread's umask to `mask` without touching the rest of the supervisor's:
/// the thread first stops sharing its filesystem attributes (`unshare(CLONE_FS)`, allowed in
/// a multi-threaded process; the thread's root and working directory stay what they were).
fn thread_umask(mask: u32) -> Result<(), i32> {
    if !OWN_FS.with(|c| c.get()) {
        // Safety: CLONE_FS only gives this thread its own root, working directory and umask;
        // no descriptor table is unshared (rustix's `unshare_unsafe` contract is about FILES).
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) }
            .map_err(|e| e.raw_os_error())?;
        OWN_FS.with(|c| c.set(true));
    }
    // It now applies to this thread alone.
    rustix::process::umask(Mode::from_bits_retain(mask));
    Ok(())
}

/// Performs [`Op::Create`] in `dir` with the caller's `umask`: the kernel's own
/// `O_CREAT | O_EXCL` (no existing file, no symlink followed). The descriptor is ours,
/// close-on-exec; the caller's `O_CLOEXEC` is applied when it is installed there.
///
/// # Errors
/// The `openat` errno (`EEXIST` while another git holds the lock).
pub fn create(
    dir: BorrowedFd<'_>,
    name: &[u8],
    flags: i32,
    mode: u32,
    umask: u32,
) -> Result<OwnedFd, i32> {
    thread_umask(umask)?;
    let flags = (flags & PASSED_FLAGS) | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    let flags = OFlags::from_bits_retain(flags as u32) | OFlags::CLOEXEC;
    openat(dir, name, flags, Mode::from_bits_retain(mode)).map_err(|e| e.raw_os_error())
}

/// Performs [`Op::Chmod`] in `dir`: on a regular file only, never through a symlink.
///
/// # Errors
/// `EACCES` for anything but a regular file, else the `openat`/`chmod` errno.
pub fn chmod(dir: BorrowedFd<'_>, name: &[u8], mode: u32) -> Result<i64, i32> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = openat(dir, name, flags, Mode::empty()).map_err(|e| e.raw_os_error())?;
    match crate::paths::kind(&fd) {
        Ok(crate::paths::Kind::File) => {}
        _ => return Err(libc::EACCES),
    }
    crate::paths::chmod_pinned(&fd, mode)
        .map(|()| 0)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// Removes `name` from `dir` (a created file the caller could not be given).
pub fn remove(dir: BorrowedFd<'_>, name: &[u8]) -> Result<i64, i32> {
    unlinkat(dir, name, AtFlags::empty()).map_err(|e| e.raw_os_error())?;
    Ok(0)
}

/// Performs [`Op::Rename`] in `dir`: only a regular file with one link becomes `packed-refs`
/// (the names can only have been created by [`create`] or the host's git; the check keeps a
/// hard link to another file out all the same).
///
/// # Errors
/// `EACCES` for anything but a single-link regular file, else the `renameat` errno.
pub fn rename(dir: BorrowedFd<'_>, from: &[u8]) -> Result<i64, i32> {
    // NOFOLLOW: the name itself.
    let st = statat(dir, from, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| e.raw_os_error())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_nlink != 1 {
        return Err(libc::EACCES);
    }
    renameat(dir, from, dir, PACKED).map_err(|e| e.raw_os_error())?;
    Ok(0)
}

/// Largest `config` compared by [`keep_config`] (16 MiB); a larger one is never kept.
const CONFIG_MAX: u64 = 16 << 20;

/// The whole content of the regular file `name` in `dir` (not followed if a symlink), when it
/// has at most [`CONFIG_MAX`] bytes.
fn read_regular(dir: BorrowedFd<'_>, name: &[u8]) -> Result<Vec<u8>, i32> {
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = openat(dir, name, flags, Mode::empty()).map_err(|e| e.raw_os_error())?;
    let mut file = std::fs::File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    if !meta.file_type().is_file() || meta.len() > CONFIG_MAX {
        return Err(libc::EACCES);
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(CONFIG_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    Ok(bytes)
}

/// Performs [`Op::KeepConfig`] in `dir`: when `config.lock` holds exactly the bytes of
/// `config` (both regular files), removes the lock — `config` already is what git wanted —
/// and reports the rename done.
///
/// # Errors
/// `EACCES` when the contents differ (the command would change the configuration) or either
/// is not a regular file; the errno of reading them.
pub fn keep_config(dir: BorrowedFd<'_>) -> Result<i64, i32> {
    let new = read_regular(dir, CONFIG_LOCK)?;
    if new != read_regular(dir, CONFIG)? {
        return Err(libc::EACCES);
    }
    remove(dir, CONFIG_LOCK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn only_the_exact_names_match() {
        assert_eq!(
            transient(b"/r/.git/packed-refs.lock"),
            Some(&b"packed-refs.lock"[..])
        );
        assert_eq!(transient(b"packed-refs.new"), Some(&b"packed-refs.new"[..]));
        assert_eq!(transient(b"/r/.git/packed-refs.lock/"), None);
        assert_eq!(transient(b"/r/.git/config.lock"), None);
        assert_eq!(creatable(b"/r/.git/config.lock"), Some(CONFIG_LOCK));
        assert_eq!(creatable(b"/r/.git/config"), None);
        assert_eq!(creatable(b"/r/.git/index.lock"), None);
        assert_eq!(transient(b"/r/.git/packed-refs"), None);
        assert_eq!(transient(b"/r/.git/xpacked-refs.lock"), None);
        assert_eq!(last_component(b"packed-refs"), Some(PACKED));
    }

    #[test]
    fn an_unchanged_config_is_kept_and_a_changed_one_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = crate::paths::open_nofollow(d.path()).unwrap();
        let fd = dir.as_fd();
        std::fs::write(d.path().join("config"), "[core]\n\tbare = false\n").unwrap();
        std::fs::write(d.path().join("config.lock"), "[core]\n\tbare = false\n").unwrap();
        assert_eq!(keep_config(fd), Ok(0));
        assert!(!d.path().join("config.lock").exists());
        std::fs::write(d.path().join("config.lock"), "[core]\n\tfsmonitor = x\n").unwrap();
        assert_eq!(keep_config(fd), Err(libc::EACCES));
        assert!(d.path().join("config.lock").exists());
        std::fs::remove_file(d.path().join("config.lock")).unwrap();
        // A symlink to a file with the same bytes is not the lock git wrote.
        std::fs::write(d.path().join("copy"), "[core]\n\tbare = false\n").unwrap();
        std::os::unix::fs::symlink(d.path().join("copy"), d.path().join("config.lock")).unwrap();
        assert_eq!(keep_config(fd), Err(libc::ELOOP));
    }

    #[test]
    fn the_umask_is_read_from_proc() {
        // umask to read it, then set back.
        let mine = rustix::process::umask(Mode::from_bits_retain(0o027));
        rustix::process::umask(mine);
        let mine = mine.bits();
        assert_eq!(umask_of(std::process::id() as libc::pid_t), Some(mine));
    }
}
