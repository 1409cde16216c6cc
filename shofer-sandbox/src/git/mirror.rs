//! Keeping a tree of the supervisor's state equal to another one, writing only what differs:
//! the persistent private view ([`crate::git::view`]) brought up to date with the repository's
//! control files before each run.
//!
//! - [`mirror`]: the whole tree — every directory, regular file and symlink of the source made
//!   to hold what the source holds, everything else removed;
//! - [`put`], [`remove`], [`dir_at`], [`empty`]: one file written (unless it holds those
//!   bytes already) or removed, one directory made or emptied: what earlier runs kept
//!   private, the empty `objects/`.
//!
//! The mirrored tree is the command's: a run may have left any shape there (symlinks where
//! directories were, a FIFO where a file was, a directory of mode 000, hard links). So every
//! step on its side goes through descriptors opened without following a symlink, a file is
//! compared only when it is a regular file with one link and the wanted mode, and anything
//! else is taken apart ([`crate::git::remove::take_apart`]) and made anew. A file that differs
//! is replaced (a new inode), never written in place. Nothing runs in the tree meanwhile: the
//! caller holds the view's lock and no command of it is running.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::remove;
use crate::paths;

/// How much a mirror may still take.
pub struct Budget {
    /// Bytes of file contents.
    pub bytes: u64,
    /// Directory entries.
    pub entries: usize,
}

/// A file's contents, hashed: what a view's finish compares the command's files with.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Makes the tree in `dst` (a directory descriptor) hold what the tree of `src` (another)
/// holds — directories, regular files (their mode without set-id bits) and symlinks — but
/// the paths relative to `src` that `skip` names, and `keep` at the top (left as they are);
/// removes everything else in `dst`. Hands each source file's path and bytes to `seen`.
/// Nothing is followed on either side; every step is relative to a directory descriptor (a
/// path walk, or `/proc/self/fd`, per file was most of the cost).
///
/// # Errors
/// Any failure, or the budget spent: `dst` is then in some state between the two.
pub fn mirror(
    src: &OwnedFd,
    dst: &OwnedFd,
    skip: &dyn Fn(&Path) -> bool,
    keep: &[&str],
    seen: &mut dyn FnMut(PathBuf, &[u8]),
    budget: &mut Budget,
) -> io::Result<()> {
    let mut todo = vec![(
        PathBuf::new(),
        open_dir(src, OsStr::new("."))?,
        open_dir(dst, OsStr::new("."))?,
    )];
    while let Some((rel, from, to)) = todo.pop() {
        let mut wanted: HashSet<OsString> = HashSet::new();
        for (name, ft) in paths::entries(&from)? {
            let rel = rel.join(&name);
            if skip(&rel) {
                continue;
            }
            budget.entries = budget
                .entries
                .checked_sub(1)
                .ok_or_else(|| io::Error::other("too many files"))?;
            let ft = match ft {
                FileType::Unknown => {
                    let st = rustix::fs::statat(&from, &*name, AtFlags::SYMLINK_NOFOLLOW)?;
                    FileType::from_raw_mode(st.st_mode)
                }
                ft => ft,
            };
            match ft {
                FileType::Directory => {
                    let sub = open_dir(&from, &name)?;
                    let mode = rustix::fs::fstat(&sub)?.st_mode & 0o777;
                    todo.push((rel, sub, dir_in(&to, &name, Some(mode | 0o700))?));
                }
                FileType::RegularFile => {
                    let Some((bytes, mode)) = paths::read_at(&from, &name, budget.bytes)? else {
                        continue;
                    };
                    budget.bytes -= bytes.len() as u64;
                    file_in(&to, &name, &bytes, mode & 0o777)?;
                    seen(rel, &bytes);
                }
                FileType::Symlink => {
                    let target = rustix::fs::readlinkat(&from, &*name, Vec::new())?;
                    symlink_in(&to, &name, Path::new(OsStr::from_bytes(target.as_bytes())))?;
                }
                _ => continue,
            }
            wanted.insert(name);
        }
        let top = rel.as_os_str().is_empty();
        let kept = |name: &OsStr| top && keep.iter().any(|k| OsStr::new(k) == name);
        for (name, _) in paths::entries(&to)? {
            if !wanted.contains(&name) && !kept(&name) {
                take_apart(&to, &name)?;
            }
        }
    }
    Ok(())
}

/// Writes `bytes` with `mode` at `rel` (relative, normal components) under `root`, making the
/// directories on the way (0755), unless the file there holds them already.
///
/// # Errors
/// Any failure on the way.
pub fn put(root: &OwnedFd, rel: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let (dir, name) = parent_of(root, rel, true)?;
    match dir {
        Some(dir) => file_in(&dir, name, bytes, mode),
        None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
    }
}

/// Makes `rel` under `root` a directory (0755 when made), the directories on the way too.
///
/// # Errors
/// Any failure on the way.
pub fn dir_at(root: &OwnedFd, rel: &Path) -> io::Result<()> {
    match parent_of(root, rel, true)? {
        (Some(dir), name) => dir_in(&dir, name, None).map(drop),
        (None, _) => Err(io::Error::from_raw_os_error(libc::ENOENT)),
    }
}

/// Empties the directory `rel` under `root` (which exists).
///
/// # Errors
/// Any failure on the way.
pub fn empty(root: &OwnedFd, rel: &Path) -> io::Result<()> {
    let (Some(parent), name) = parent_of(root, rel, false)? else {
        return Ok(());
    };
    let dir = open_dir(&parent, name)?;
    for (entry, _) in paths::entries(&dir)? {
        take_apart(&dir, &entry)?;
    }
    Ok(())
}

/// Removes whatever is at `rel` under `root` (nothing to do when its directory is absent).
///
/// # Errors
/// Any failure on the way.
pub fn remove(root: &OwnedFd, rel: &Path) -> io::Result<()> {
    match parent_of(root, rel, false)? {
        (Some(dir), name) => take_apart(&dir, name),
        (None, _) => Ok(()),
    }
}

/// The directory holding `rel`'s last component under `root` (made when `make`; `None` when
/// absent and not made), and that component.
fn parent_of<'a>(
    root: &OwnedFd,
    rel: &'a Path,
    make: bool,
) -> io::Result<(Option<OwnedFd>, &'a OsStr)> {
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => parts.push(n),
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }
    let name = parts
        .pop()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut dir = open_dir(root, OsStr::new("."))?;
    for p in parts {
        dir = if make {
            dir_in(&dir, p, None)?
        } else {
            match open_dir(&dir, p) {
                Ok(d) => d,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
                    ) =>
                {
                    return Ok((None, name))
                }
                Err(e) => return Err(e),
            }
        };
    }
    Ok((Some(dir), name))
}

/// `name` under `dir`, whatever it is, removed.
fn take_apart(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let mut budget = remove::BUDGET;
    match remove::take_apart(dir, name, &mut budget, &|| false)? {
        remove::Removal::Gone => Ok(()),
        remove::Removal::Unfinished => Err(io::Error::other(format!(
            "{} could not be removed whole",
            name.to_string_lossy()
        ))),
    }
}

/// Opens the directory `name` under `dir` for listing, not following a symlink.
fn open_dir(dir: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The directory `name` under `dir`, open: the one there (given `mode` when asked), or a new
/// one (`mode`, else 0755) in place of whatever else was there.
fn dir_in(dir: &OwnedFd, name: &OsStr, mode: Option<u32>) -> io::Result<OwnedFd> {
    let existing = match open_dir(dir, name) {
        Ok(fd) => Some(fd),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
        // A symlink, a file, or a directory the command made unreadable: anew.
        Err(_) => {
            take_apart(dir, name)?;
            None
        }
    };
    if let Some(fd) = existing {
        if let Some(mode) = mode {
            let st = rustix::fs::fstat(&fd)?;
            if st.st_mode & 0o7777 != mode {
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
            }
        }
        return Ok(fd);
    }
    let mode = mode.unwrap_or(0o755);
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode))?;
    let fd = open_dir(dir, name)?;
    // Past the umask.
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    Ok(fd)
}

/// Whether `name` under `dir` is a regular file with one link, mode `mode`, holding `bytes`.
fn holds(dir: &OwnedFd, name: &OsStr, bytes: &[u8], mode: u32) -> bool {
    let Ok(fd) = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let Ok(st) = rustix::fs::fstat(&fd) else {
        return false;
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
        || st.st_mode & 0o7777 != mode
        || st.st_nlink != 1
        || st.st_size as u64 != bytes.len() as u64
    {
        return false;
    }
    let mut have = Vec::with_capacity(bytes.len() + 1);
    fs::File::from(fd)
        .take(bytes.len() as u64 + 1)
        .read_to_end(&mut have)
        .is_ok_and(|_| have == bytes)
}

/// The file `name` under `dir` holding `bytes` with `mode`: left when it does, else made anew
/// in place of whatever was there.
fn file_in(dir: &OwnedFd, name: &OsStr, bytes: &[u8], mode: u32) -> io::Result<()> {
    if holds(dir, name, bytes, mode) {
        return Ok(());
    }
    take_apart(dir, name)?;
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?;
    // Past the umask.
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    fs::File::from(fd).write_all(bytes)
}

/// The symlink `name` under `dir` pointing at `target`: left when it does, else made anew.
fn symlink_in(dir: &OwnedFd, name: &OsStr, target: &Path) -> io::Result<()> {
    if rustix::fs::readlinkat(dir, name, Vec::new())
        .is_ok_and(|t| t.as_bytes() == target.as_os_str().as_bytes())
    {
        return Ok(());
    }
    take_apart(dir, name)?;
    Ok(rustix::fs::symlinkat(target, dir.as_fd(), name)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn dirfd(p: &Path) -> OwnedFd {
        open_dir(&paths::open_nofollow(p).unwrap(), OsStr::new(".")).unwrap()
    }

    fn budget() -> Budget {
        Budget {
            bytes: 1 << 20,
            entries: 1000,
        }
    }

    #[test]
    fn a_mirror_holds_the_source_and_nothing_else_and_follows_nothing() {
        let t = tempfile::tempdir().unwrap();
        let (src, dst, outside) = (
            t.path().join("src"),
            t.path().join("dst"),
            t.path().join("out"),
        );
        for d in [&src, &dst, &outside] {
            fs::create_dir(d).unwrap();
        }
        fs::create_dir_all(src.join("refs/heads")).unwrap();
        fs::write(src.join("refs/heads/main"), "a\n").unwrap();
        fs::write(src.join("config"), "[core]\n").unwrap();
        fs::set_permissions(src.join("config"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::create_dir(src.join("objects")).unwrap();
        symlink("elsewhere", src.join("link")).unwrap();
        // What a command may leave: a symlink where a directory goes, a FIFO where a file
        // goes, a file it hard-linked, an extra tree, a stale copy.
        symlink(&outside, dst.join("refs")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dst.join("config"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        fs::create_dir_all(dst.join("extra/deep")).unwrap();
        fs::write(dst.join("extra/deep/f"), "x").unwrap();
        fs::create_dir(dst.join("objects")).unwrap();
        fs::write(dst.join("objects/mine"), "kept").unwrap();
        let mut prints = HashMap::new();
        let mut seen = |rel: PathBuf, b: &[u8]| {
            prints.insert(rel, fingerprint(b));
        };
        let skip = |rel: &Path| rel == Path::new("objects");
        mirror(
            &dirfd(&src),
            &dirfd(&dst),
            &skip,
            &["objects"],
            &mut seen,
            &mut budget(),
        )
        .unwrap();
        assert_eq!(fs::read(dst.join("refs/heads/main")).unwrap(), b"a\n");
        assert_eq!(fs::read(dst.join("config")).unwrap(), b"[core]\n");
        let mode = fs::metadata(dst.join("config"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            fs::read_link(dst.join("link")).unwrap(),
            Path::new("elsewhere")
        );
        assert!(!dst.join("extra").exists());
        assert_eq!(fs::read(dst.join("objects/mine")).unwrap(), b"kept");
        assert_eq!(
            fs::read_dir(&outside).unwrap().count(),
            0,
            "wrote through a symlink"
        );
        assert_eq!(prints.len(), 2);
        assert_eq!(
            prints.get(Path::new("config")),
            Some(&fingerprint(b"[core]\n"))
        );
    }

    #[test]
    fn a_file_that_holds_the_bytes_is_left_and_one_that_differs_is_replaced() {
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        fs::create_dir(&src).unwrap();
        fs::create_dir(&dst).unwrap();
        fs::write(src.join("same"), "1").unwrap();
        fs::write(src.join("changed"), "2").unwrap();
        let fd = dirfd(&dst);
        let sync = || {
            mirror(
                &dirfd(&src),
                &fd,
                &|_| false,
                &[],
                &mut |_, _| {},
                &mut budget(),
            )
        };
        sync().unwrap();
        use std::os::unix::fs::MetadataExt;
        let ino = |n: &str| fs::metadata(dst.join(n)).unwrap().ino();
        let (same, changed) = (ino("same"), ino("changed"));
        // A hard link elsewhere in the tree must not be written through.
        fs::hard_link(dst.join("changed"), dst.join("alias")).unwrap();
        fs::write(src.join("changed"), "3").unwrap();
        sync().unwrap();
        assert_eq!(ino("same"), same);
        assert_ne!(ino("changed"), changed);
        assert_eq!(fs::read(dst.join("changed")).unwrap(), b"3");
        assert!(!dst.join("alias").exists());
    }

    #[test]
    fn put_and_remove_go_through_no_symlink() {
        let t = tempfile::tempdir().unwrap();
        let (dst, outside) = (t.path().join("dst"), t.path().join("out"));
        fs::create_dir(&dst).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("victim"), "v").unwrap();
        symlink(&outside, dst.join("refs")).unwrap();
        let fd = dirfd(&dst);
        put(&fd, Path::new("refs/stash"), b"oid\n", 0o644).unwrap();
        assert_eq!(fs::read(dst.join("refs/stash")).unwrap(), b"oid\n");
        assert!(!outside.join("stash").exists());
        symlink(&outside, dst.join("logs")).unwrap();
        remove(&fd, Path::new("logs/victim")).unwrap();
        assert!(outside.join("victim").exists());
        remove(&fd, Path::new("refs/stash")).unwrap();
        assert!(!dst.join("refs/stash").exists());
        assert!(put(&fd, Path::new("../x"), b"", 0o644).is_err());
    }
}
