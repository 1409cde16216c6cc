//! Removing a tree the command built, through descriptors: the git guard's restore
//! ([`crate::git::guard`]) and the emptying of a quarantine's trash ([`crate::git::quarantine`]).
//!
//! The command chooses the shape: any depth (an audit crashed the supervisor's stack with a
//! tree 19,000 deep), symlinks swapped in at any moment, and modes its owner can set — 000
//! (cannot be listed) or 0500 (nothing can be moved or removed out of it, and a directory
//! that is not writable cannot move to another parent, its `..` changes: rename(2)). So there
//! is no recursion and no path: a directory's files are removed and the entries of its
//! subdirectories moved up into it under unpredictable names (never replacing an entry),
//! level by level, with three descriptors open however deep the tree; a directory the caller
//! may not list or change gets its owner's bits (0700) back first, through a descriptor opened
//! without following a symlink. The same work as root or as the tree's owner (uid 65534 in
//! the tests).

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use crate::paths;

/// The most entries one removal takes by default (a process that holds a descriptor on a
/// directory in the tree can keep adding entries to it): the guard's restore and the trash.
pub const BUDGET: usize = 1 << 20;

/// How far [`take_apart`] got.
#[derive(Debug, PartialEq, Eq)]
pub enum Removal {
    /// The name is gone (or was never there).
    Gone,
    /// Stopped early (the budget spent, or asked to stop): what is left is a smaller tree at
    /// the same name, which a later call continues.
    Unfinished,
}

/// Removes `name` under the directory `dir` whatever it is now — file, symlink (never what
/// it names) or directory tree — as the module documentation describes. Each entry removed or
/// moved spends one of `budget` (a process that holds a descriptor on a directory in the tree
/// can keep adding entries); it stops with [`Removal::Unfinished`] when that is spent or
/// `stop()` says so, checked before each entry.
///
/// # Errors
/// `unlinkat(2)`, `openat(2)` or listing errors other than the ones the module handles (for example
/// `EROFS`, `EBUSY` on a mount point, `ENOTDIR` when `dir` is not a directory).
pub fn take_apart(
    dir: &OwnedFd,
    name: &OsStr,
    budget: &mut usize,
    stop: &dyn Fn() -> bool,
) -> io::Result<Removal> {
    match paths::unlink_at(dir, name, 0) {
        Ok(()) => return Ok(Removal::Gone),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Removal::Gone),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EISDIR | libc::EPERM)) => {}
        Err(e) => return Err(e),
    }
    let top = match open_listable(dir, name) {
        Ok(top) => top,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Removal::Gone),
        Err(e) => return Err(e),
    };
    writable(&top)?;
    loop {
        let names = paths::list(&top)?;
        if names.is_empty() {
            break;
        }
        // A pass that removes or moves nothing would be repeated until the budget is spent
        // (an entry of another owner that this caller may not touch): it is an error at once.
        let mut progress = false;
        let mut last = None;
        for n in names {
            if !spend(budget, stop) {
                return Ok(Removal::Unfinished);
            }
            match paths::unlink_at(&top, &n, 0) {
                Ok(()) => {
                    progress = true;
                    continue;
                }
                Err(e) => last = Some(e),
            }
            // A directory (or gone meanwhile: the next pass sees).
            let child = match open_listable(&top, &n) {
                Ok(child) => child,
                Err(e) => {
                    progress |= e.raw_os_error() == Some(libc::ENOENT);
                    last = Some(e);
                    continue;
                }
            };
            // Entries move out of it only if it is writable, and a directory among them only
            // if that one is writable too (its `..` changes).
            writable(&child)?;
            for g in paths::list(&child)? {
                if !spend(budget, stop) {
                    return Ok(Removal::Unfinished);
                }
                let up = format!(".shofer-removing-{}", shofer_sys::statedir::random_suffix());
                let mut moved = paths::rename_noreplace_between(&child, &g, &top, up.as_ref());
                if moved
                    .as_ref()
                    .is_err_and(|e| e.raw_os_error() == Some(libc::EACCES))
                {
                    owner_bits(&child, &g);
                    moved = paths::rename_noreplace_between(&child, &g, &top, up.as_ref());
                }
                match moved {
                    Ok(()) => progress = true,
                    Err(e) => last = Some(e),
                }
            }
            // Fails (and the next pass tries again) if something came in meanwhile.
            match paths::unlink_at(&top, &n, libc::AT_REMOVEDIR) {
                Ok(()) => progress = true,
                Err(e) => last = Some(e),
            }
        }
        if !progress {
            return Err(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::ENOTEMPTY)));
        }
    }
    match paths::unlink_at(dir, name, libc::AT_REMOVEDIR) {
        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
        _ => Ok(Removal::Gone),
    }
}

/// Spends one of `budget`, unless it is spent or `stop()` says so (then false).
fn spend(budget: &mut usize, stop: &dyn Fn() -> bool) -> bool {
    if *budget == 0 || stop() {
        return false;
    }
    *budget -= 1;
    true
}

/// The directory `name` under `dir`, opened for listing without following a symlink; one its
/// owner made unreadable (000) gets its owner's bits back first ([`owner_bits`]).
fn open_listable(dir: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    let open = || paths::openat_dir(dir, Path::new(name));
    match open() {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            owner_bits(dir, name);
            open()
        }
        other => other,
    }
}

/// Gives the directory `name` under `dir` mode 0700 through an `O_PATH | O_NOFOLLOW`
/// descriptor (never what a symlink swapped in there names). A failure shows in the next step.
fn owner_bits(dir: &OwnedFd, name: &OsStr) {
    if let Ok(pinned) = paths::openat_path(dir, Path::new(name)) {
        if paths::kind(&pinned).is_ok_and(|k| k == paths::Kind::Dir) {
            let _ = paths::chmod_pinned(&pinned, 0o700);
        }
    }
}

/// Makes the directory `dir` (a descriptor of it) writable and searchable by its owner if it
/// is not: the command may have set 0500 on its own directory.
fn writable(dir: &OwnedFd) -> io::Result<()> {
    let mode = paths::fstat(dir)?.st_mode & 0o7777;
    if mode & 0o700 == 0o700 {
        return Ok(());
    }
    // Opened for reading or O_PATH: fchmod refuses the latter, then the /proc path does it.
    if rustix::fs::fchmod(dir, rustix::fs::Mode::from_bits_retain(mode | 0o700)).is_ok() {
        return Ok(());
    }
    match paths::chmod_pinned(dir, mode | 0o700) {
        // Someone else's directory (root removing another user's tree can, see above): the
        // removal goes on and fails where it must.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tree(top: &Path) {
        std::fs::create_dir_all(top.join("a/b/c/d")).unwrap();
        std::fs::write(top.join("a/b/f"), "x").unwrap();
        std::fs::create_dir_all(top.join("e/g")).unwrap();
        std::os::unix::fs::symlink("/etc", top.join("a/link")).unwrap();
        for (d, mode) in [("a/b/c", 0o500), ("a/b", 0o500), ("a", 0o500), ("e", 0o000)] {
            std::fs::set_permissions(top.join(d), std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }

    /// A budget too small, or a stop request, leaves a smaller tree that a later call removes.
    #[test]
    fn an_unfinished_removal_is_finished_by_the_next_call() {
        let s = tempfile::tempdir().unwrap();
        let top = s.path().join("top");
        tree(&top);
        let dir = paths::open_dir_at_path(s.path()).unwrap();
        let mut budget = 2;
        let r = take_apart(&dir, "top".as_ref(), &mut budget, &|| false).unwrap();
        assert_eq!((r, budget), (Removal::Unfinished, 0));
        let mut plenty = usize::MAX;
        let r = take_apart(&dir, "top".as_ref(), &mut plenty, &|| true).unwrap();
        assert_eq!(r, Removal::Unfinished);
        assert!(top.exists());
        let r = take_apart(&dir, "top".as_ref(), &mut 1000, &|| false).unwrap();
        assert_eq!(r, Removal::Gone);
        assert!(!top.exists());
        assert!(
            Path::new("/etc").is_dir(),
            "a symlink's target is never entered"
        );
    }

    /// A file, a symlink and an absent name.
    #[test]
    fn what_is_not_a_directory_is_unlinked() {
        let s = tempfile::tempdir().unwrap();
        std::fs::write(s.path().join("f"), "x").unwrap();
        std::os::unix::fs::symlink(s.path().join("f"), s.path().join("l")).unwrap();
        let dir = paths::open_dir_at_path(s.path()).unwrap();
        for name in ["l", "f", "absent"] {
            let r = take_apart(&dir, name.as_ref(), &mut 10, &|| false).unwrap();
            assert_eq!(r, Removal::Gone, "{name}");
        }
        assert_eq!(std::fs::read_dir(s.path()).unwrap().count(), 0);
    }
}
