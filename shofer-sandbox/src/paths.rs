//! Opening rule paths without following symlinks.
//!
//! Every path that becomes a writable rule is opened one component at a time with
//! `openat(O_PATH | O_NOFOLLOW)`, starting from `/`. A symlink anywhere on the way fails the
//! open (`ELOOP`) instead of silently widening the writable set, and because each step is
//! relative to the previous descriptor, swapping a component for a symlink while we walk
//! cannot redirect us (the attacker would have to win before the walk, where we would see the
//! symlink).

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags, CWD};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// What kind of object a descriptor names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A character or block device, socket or FIFO.
    Special,
    /// A symbolic link (only seen for a final component opened with `O_NOFOLLOW`).
    Symlink,
}

/// Device and inode of the directory at `path` (a symlink there is not followed; `None` for
/// anything else, or nothing).
pub fn dir_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| (m.dev(), m.ino()))
}

/// fstat(2) of `fd` (an `O_PATH` descriptor too).
///
/// # Errors
/// fstat(2)'s: `EBADF` for a descriptor that is not open.
pub fn fstat(fd: &OwnedFd) -> io::Result<rustix::fs::Stat> {
    Ok(rustix::fs::fstat(fd)?)
}

/// (st_dev, st_ino) of what `fd` names.
///
/// # Errors
/// As [`fstat`].
pub fn identity(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    fstat(fd).map(|st| (st.st_dev, st.st_ino))
}

/// Sets the permission bits (`mode & 0o7777`) of what `fd` names, an `O_PATH` descriptor
/// opened without following a symlink: `fchmod` refuses `O_PATH` descriptors (`EBADF`) and
/// `fchmodat` on the name would follow a symlink swapped in there, so the mode is set through
/// `/proc/self/fd/N`, which names the descriptor's own inode.
///
/// # Errors
/// chmod(2)'s: `EPERM` when this process neither owns the inode nor has `CAP_FOWNER`;
/// `ENOENT` without `/proc`.
pub fn chmod_pinned(fd: &OwnedFd, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let at = format!("/proc/self/fd/{}", fd.as_raw_fd());
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(mode & 0o7777))
}

/// The names in the directory `dir` (an `O_PATH` descriptor too), as bytes: a name that is
/// not UTF-8 is listed like any other (it was an error, and callers that took an error for
/// "nothing new" skipped every new name).
///
/// # Errors
/// Opening or reading the directory (`EACCES` for one without read permission).
pub fn list(dir: &OwnedFd) -> io::Result<Vec<std::ffi::OsString>> {
    Ok(entries(dir)?.into_iter().map(|(name, _)| name).collect())
}

/// The entries of the directory `dir` (an `O_PATH` descriptor too; but `.` and `..`) with
/// their types as the directory gives them (`Unknown` on file systems that do not say):
/// one `openat(dir, ".")` and its `getdents64`, no path walk.
///
/// # Errors
/// Opening or reading the directory (`EACCES` for one without read permission).
pub fn entries(dir: &OwnedFd) -> io::Result<Vec<(std::ffi::OsString, rustix::fs::FileType)>> {
    let fd = openat_raw(dir.as_fd(), b".", libc::O_RDONLY | libc::O_DIRECTORY)?;
    let mut out = Vec::new();
    listed(fd, &mut out)?;
    Ok(out)
}

/// The entries of the directory at `path` (symlinks followed), as [`entries`] gives them,
/// and whether the listing reached its end: one cut short by an error keeps what it read
/// before (as `std::fs::read_dir` did), for finding what to hide, where a dropped entry
/// hides less, and says it is incomplete. One `open` and its `getdents64`
/// (`std::fs::read_dir` adds an `fstat`).
///
/// # Errors
/// Opening the directory.
pub fn entries_of(
    path: &Path,
) -> io::Result<(Vec<(std::ffi::OsString, rustix::fs::FileType)>, bool)> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut out = Vec::new();
    let complete = listed(fd, &mut out).is_ok(); // what came before an error stays
    Ok((out, complete))
}

/// Adds the entries of the open directory `fd`, but `.` and `..`, to `out` until the end or
/// an error.
fn listed(
    fd: OwnedFd,
    out: &mut Vec<(std::ffi::OsString, rustix::fs::FileType)>,
) -> io::Result<()> {
    for e in rustix::fs::Dir::new(fd)? {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push((std::ffi::OsStr::from_bytes(name).to_owned(), e.file_type()));
        }
    }
    Ok(())
}

/// The regular file `name` (one component) under `dir`, not followed, at most `max` bytes:
/// its bytes and mode bits; `None` when it is no regular file. One `openat(O_NONBLOCK |
/// O_NOCTTY)`, `fstat`, the reads and `close`, no `/proc` walk: for an entry [`entries`]
/// listed as a regular file, in a directory where nobody who could make a device node swaps
/// one in meanwhile (the repository's control files, a view's copy, which the command writes
/// from a user namespace that cannot make one). Elsewhere [`read_small_file`] never opens
/// anything but a regular file.
///
/// # Errors
/// open(2) and read(2) failures; `InvalidData` for a file larger than `max`.
pub fn read_at(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    max: u64,
) -> io::Result<Option<(Vec<u8>, u32)>> {
    let fd = openat_raw(
        dir.as_fd(),
        name.as_bytes(),
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity((st.st_size as u64).min(max) as usize + 1);
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", name.to_string_lossy()),
        ));
    }
    Ok(Some((bytes, st.st_mode & 0o7777)))
}

/// Gives what `fd` names (an `O_PATH` descriptor too) to `uid`:`gid`: `fchownat(fd, "",
/// AT_EMPTY_PATH)`, the inode the descriptor holds whatever its name is now.
///
/// # Errors
/// chown(2)'s: `EPERM` without `CAP_CHOWN`.
pub fn chown_pinned(fd: &OwnedFd, uid: u32, gid: u32) -> io::Result<()> {
    use rustix::fs::{Gid, Uid};
    rustix::fs::chownat(
        fd,
        c"",
        Some(Uid::from_raw_unchecked(uid)),
        Some(Gid::from_raw_unchecked(gid)),
        rustix::fs::AtFlags::EMPTY_PATH,
    )?;
    Ok(())
}

/// The kind of object `fd` names (`fstat`).
pub fn kind(fd: &OwnedFd) -> io::Result<Kind> {
    let st = fstat(fd)?;
    Ok(match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Special,
    })
}

/// `openat(dir, name, flags | O_CLOEXEC)`; a name with a NUL byte is `EINVAL`.
fn openat_raw(dir: BorrowedFd<'_>, name: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
    let flags = OFlags::from_bits_retain(flags as u32) | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

/// Opens `name` (one component) under `dir` as an `O_PATH` descriptor without following a
/// final symlink. The result may name a symlink: check [`kind`].
pub fn openat_path(dir: &OwnedFd, name: &Path) -> io::Result<OwnedFd> {
    openat_raw(
        dir.as_fd(),
        name.as_os_str().as_bytes(),
        libc::O_PATH | libc::O_NOFOLLOW,
    )
}

/// Opens the directory `name` (one component, `..` too) under `dir` as an `O_PATH`
/// descriptor, refusing a symlink (`ELOOP`/`ENOTDIR`).
pub fn openat_dir_path(dir: &OwnedFd, name: &Path) -> io::Result<OwnedFd> {
    openat_raw(
        dir.as_fd(),
        name.as_os_str().as_bytes(),
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
    )
}

/// Opens the directory `name` (one component) under `dir` for reading its entries, refusing
/// a symlink (`ELOOP`/`ENOTDIR`).
///
/// # Errors
/// open(2) failures: `EACCES` for a directory the caller may not read.
pub fn openat_dir(dir: &OwnedFd, name: &Path) -> io::Result<OwnedFd> {
    openat_raw(
        dir.as_fd(),
        name.as_os_str().as_bytes(),
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
    )
}

/// Opens the absolute, normalised path `path` as an `O_PATH` descriptor, refusing symlinks on
/// every component (`ELOOP`) and `.`/`..` components (`EINVAL`).
pub fn open_nofollow(path: &Path) -> io::Result<OwnedFd> {
    match openat2_no_symlinks(path) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => walk_nofollow(path),
        other => other,
    }
}

/// One `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (Linux 5.6): the kernel refuses
/// a symlink on any component atomically, in one syscall.
fn openat2_no_symlinks(path: &Path) -> io::Result<OwnedFd> {
    if !path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let fd = openat2_path(
        path,
        libc::O_NOFOLLOW,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    )?;
    if kind(&fd)? == Kind::Symlink {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    Ok(fd)
}

/// One `openat2(path, O_PATH | O_CLOEXEC | flags)` with `resolve` (openat2(2), Linux 5.6;
/// `ENOSYS` before).
fn openat2_path(path: &Path, flags: libc::c_int, resolve: u64) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::CLOEXEC | OFlags::from_bits_retain(flags as u32);
    let resolve = rustix::fs::ResolveFlags::from_bits_retain(resolve);
    Ok(rustix::fs::openat2(
        CWD,
        path,
        flags,
        Mode::empty(),
        resolve,
    )?)
}

/// Opens `path` as `O_PATH`, following symlinks: for system paths the caller's machine
/// defines (`/tmp`, `/dev/null`…), which are not attacker-controlled.
pub fn open_following(path: &Path) -> io::Result<OwnedFd> {
    openat_raw(CWD, path.as_os_str().as_bytes(), libc::O_PATH)
}

/// [`open_nofollow`] for kernels without `openat2`: one `openat` per component.
fn walk_nofollow(path: &Path) -> io::Result<OwnedFd> {
    let mut comps = path.components();
    if comps.next() != Some(Component::RootDir) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut fd = openat_raw(CWD, b"/", libc::O_PATH | libc::O_DIRECTORY)?;
    for comp in comps {
        let Component::Normal(name) = comp else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let next = openat_raw(fd.as_fd(), name.as_bytes(), libc::O_PATH | libc::O_NOFOLLOW)?;
        if kind(&next)? == Kind::Symlink {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        fd = next;
    }
    Ok(fd)
}

/// Opens the directory at `path` as an `O_PATH` descriptor, refusing a symlink as its last
/// component (earlier components are followed).
///
/// # Errors
/// open(2) failures: `ELOOP` or `ENOTDIR` for anything but a directory.
pub fn open_dir_at_path(path: &Path) -> io::Result<OwnedFd> {
    openat_raw(
        CWD,
        path.as_os_str().as_bytes(),
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
    )
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: what is at `name` in `dir`, a symlink not
/// followed.
///
/// # Errors
/// fstatat(2) failures; `EINVAL` for a name with a NUL byte.
pub fn stat_at(dir: &OwnedFd, name: &str) -> io::Result<libc::stat> {
    let c = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // Raw libc: callers read `libc::stat` fields whose types rustix's `Stat` does not share
    // (`st_ctime_nsec`, in objects.rs); `rustix::fs::statat` once they take its `Stat`.
    // Safety: an all-zero stat is plain data, which fstatat fills on success; a live dirfd
    // and a NUL-terminated name.
    let (r, st) = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let r = libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        );
        (r, st)
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Opens `name` for reading — relative to `dir`, or a whole path with [`CWD`] —
/// when it is a regular file: a symlink in its last component is not followed
/// (`O_NOFOLLOW`), and only an `O_PATH` descriptor is opened until `fstat` shows a regular
/// file, which is then opened for reading through `/proc/self/fd` (the same inode, whatever
/// is at the path by then). A FIFO, device or socket is never opened for reading
/// (`InvalidData`): for files the command can write or replace, which the supervisor reads,
/// a FIFO would stop it, `/dev/zero` would fill its memory, and opening a device can act
/// (a watchdog, a tape, a serial line).
fn open_regular_at(dir: BorrowedFd<'_>, name: &Path) -> io::Result<std::fs::File> {
    let not_regular = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is {what}, not a regular file", name.display()),
        )
    };
    let fd = openat_raw(
        dir,
        name.as_os_str().as_bytes(),
        libc::O_PATH | libc::O_NOFOLLOW,
    )?;
    match kind(&fd)? {
        Kind::File => {}
        Kind::Symlink => return Err(not_regular("a symlink")),
        Kind::Dir => return Err(not_regular("a directory")),
        Kind::Special => return Err(not_regular("a special file")),
    }
    let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let file = openat_raw(CWD, proc.as_bytes(), libc::O_RDONLY | libc::O_NONBLOCK)?;
    Ok(std::fs::File::from(file))
}

/// [`open_regular_at`] for a whole path (symlinks before its last component are followed:
/// they can only lead to another regular file, which is then read).
///
/// # Errors
/// open(2) or fstat(2) failures; `InvalidData` for anything but a regular file.
pub fn open_regular(path: &Path) -> io::Result<std::fs::File> {
    open_regular_at(CWD, path)
}

/// [`open_regular`] for `name` (one component) in the directory `dir`.
///
/// # Errors
/// As [`open_regular`].
pub fn open_regular_in(dir: &OwnedFd, name: &str) -> io::Result<std::fs::File> {
    open_regular_at(dir.as_fd(), Path::new(name))
}

/// Reads the regular file `file` (from [`open_regular`]) into `buf`, which is cleared first
/// and keeps its capacity (a buffer read again and again is not faulted in again):
/// `InvalidData` when it holds more than `max` bytes.
fn read_bounded(file: std::fs::File, name: &Path, max: usize, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    // Sized once: read_to_end's growing reads cost a call each.
    if let Ok(m) = file.metadata() {
        buf.reserve((m.len() as usize).min(max) + 1);
    }
    file.take(max as u64 + 1).read_to_end(buf)?;
    if buf.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", name.display()),
        ));
    }
    Ok(())
}

/// Reads at most `max` bytes of the regular file at `path` into `buf` ([`open_regular`]).
///
/// # Errors
/// As [`open_regular`], read(2) failures, and `InvalidData` for a file larger than `max`.
pub fn read_regular_into(path: &Path, max: usize, buf: &mut Vec<u8>) -> io::Result<()> {
    read_bounded(open_regular(path)?, path, max, buf)
}

/// [`read_regular_into`] a new buffer.
///
/// # Errors
/// As [`read_regular_into`].
pub fn read_regular(path: &Path, max: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    read_regular_into(path, max, &mut buf)?;
    Ok(buf)
}

/// [`read_regular`] as UTF-8 text (`InvalidData` otherwise).
///
/// # Errors
/// As [`read_regular`].
pub fn read_regular_text(path: &Path, max: usize) -> io::Result<String> {
    String::from_utf8(read_regular(path, max)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads at most `max` bytes of the regular file `name` under `dir` ([`open_regular_at`]):
/// the worktree is attacker-controlled, so `.git` may be anything.
///
/// # Errors
/// As [`read_regular`].
pub fn read_small_file(dir: &OwnedFd, name: &str, max: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let name = Path::new(name);
    read_bounded(open_regular_at(dir.as_fd(), name)?, name, max, &mut buf)?;
    Ok(buf)
}

/// Whether resolving the absolute path `path` passes through a magic link (`/proc/self/cwd`,
/// `/proc/<pid>/root`, `/dev/fd/N`: proc(5)), or starts in `/proc` or `/dev`: a magic link
/// names something else in each process, so such a path means one thing to the supervisor
/// and another to a git run elsewhere. One `openat2(RESOLVE_NO_MAGICLINKS)` (`ELOOP` at a
/// magic link, or past 40 symlinks); where it fails otherwise (a missing component; a kernel
/// without openat2), a walk of the path ([`walk_through_proc_or_dev`]).
pub fn through_proc_or_dev(path: &Path) -> bool {
    if !path.is_absolute() || path.starts_with("/proc") || path.starts_with("/dev") {
        return true;
    }
    match openat2_path(path, 0, libc::RESOLVE_NO_MAGICLINKS) {
        Ok(_) => false,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => true,
        // Where resolution stopped is unknown (`/proc/self/fd/3` is missing here, not in
        // every process): the walk takes the rest as written.
        Err(_) => walk_through_proc_or_dev(path),
    }
}

/// [`through_proc_or_dev`] one component at a time (symlink targets included; 40 symlinks at
/// most, as path_resolution(7), else true; a missing component taken as written): true at any
/// step in `/proc` or `/dev`. False for a path longer than `PATH_MAX`, which no process
/// resolves.
fn walk_through_proc_or_dev(path: &Path) -> bool {
    use std::path::Component;
    use std::path::PathBuf;
    if path.as_os_str().len() > libc::PATH_MAX as usize {
        return false;
    }
    let magic = |p: &Path| p.starts_with("/proc") || p.starts_with("/dev");
    let push_all = |todo: &mut Vec<PathBuf>, p: &Path| {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => todo.push(PathBuf::from(n)),
                Component::ParentDir => todo.push(PathBuf::from("..")),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    };
    if !path.is_absolute() {
        return true;
    }
    let mut todo = Vec::new();
    push_all(&mut todo, path);
    let mut at = PathBuf::from("/");
    let mut links = 0;
    while let Some(c) = todo.pop() {
        if c == Path::new("..") {
            at.pop();
            continue;
        }
        let next = at.join(&c);
        if magic(&next) {
            return true;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                let Ok(target) = std::fs::read_link(&next) else {
                    return true;
                };
                if links > 40 {
                    return true;
                }
                if target.is_absolute() {
                    at = PathBuf::from("/");
                }
                push_all(&mut todo, &target);
            }
            _ => at = next,
        }
    }
    false
}

/// Removes `name` in the directory `dir` (unlinkat(2): `flags` 0 for a file or symlink, never
/// what it names; `AT_REMOVEDIR` for an empty directory).
///
/// # Errors
/// unlinkat(2) failures (`ENOENT`, `EISDIR`, `ENOTEMPTY`, `EACCES`); `InvalidInput` for a name
/// with a NUL.
pub fn unlink_at(dir: &OwnedFd, name: &std::ffi::OsStr, flags: libc::c_int) -> io::Result<()> {
    let c = CString::new(name.as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let flags = rustix::fs::AtFlags::from_bits_retain(flags as u32);
    Ok(rustix::fs::unlinkat(dir, c.as_c_str(), flags)?)
}

/// Renames `from` to `to`, both names in the directory `dir`, unless something is at `to`
/// (renameat2(2) `RENAME_NOREPLACE`): relative to a descriptor, a directory the command
/// swaps for a symlink after it was opened cannot redirect the rename.
///
/// # Errors
/// renameat2(2) failures (`EEXIST` when `to` exists); `InvalidInput` for a name with a NUL.
pub fn rename_noreplace_at(
    dir: &OwnedFd,
    from: &std::ffi::OsStr,
    to: &std::ffi::OsStr,
) -> io::Result<()> {
    rename_noreplace_between(dir, from, dir, to)
}

/// [`rename_noreplace_at`] from `from` in `from_dir` to `to` in `to_dir` (same filesystem).
///
/// # Errors
/// renameat2(2) failures (`EEXIST` when `to` exists, `EXDEV` across filesystems);
/// `InvalidInput` for a name with a NUL.
pub fn rename_noreplace_between(
    from_dir: &OwnedFd,
    from: &std::ffi::OsStr,
    to_dir: &OwnedFd,
    to: &std::ffi::OsStr,
) -> io::Result<()> {
    let cstr = |n: &std::ffi::OsStr| {
        std::ffi::CString::new(n.as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let (f, t) = (cstr(from)?, cstr(to)?);
    let noreplace = rustix::fs::RenameFlags::NOREPLACE;
    Ok(rustix::fs::renameat_with(
        from_dir,
        f.as_c_str(),
        to_dir,
        t.as_c_str(),
        noreplace,
    )?)
}

/// The directories strictly between `root` and `path` (neither of them), deepest first:
/// those a command that can write `root` could rename away with `path` in them.
pub fn dirs_between<'a>(root: &'a Path, path: &'a Path) -> impl Iterator<Item = &'a Path> {
    path.ancestors()
        .skip(1)
        .take_while(move |d| d.starts_with(root) && *d != root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_of_a_path_lists_names_and_types_but_dot_and_dot_dot() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("file"), "x").unwrap();
        std::fs::create_dir(tmp.path().join("dir")).unwrap();
        std::os::unix::fs::symlink("file", tmp.path().join("link")).unwrap();
        let (mut got, complete) = entries_of(tmp.path()).unwrap();
        assert!(complete);
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let names: Vec<_> = got.iter().map(|(n, _)| n.to_str().unwrap()).collect();
        assert_eq!(names, ["dir", "file", "link"]);
        // The types as the directory gives them (tmpfs and ext4 do), or Unknown.
        use rustix::fs::FileType;
        for ((_, kind), want) in got.iter().zip([
            FileType::Directory,
            FileType::RegularFile,
            FileType::Symlink,
        ]) {
            assert!(*kind == want || *kind == FileType::Unknown, "{kind:?}");
        }
        // Through a symlink to a directory; a file is no directory.
        std::os::unix::fs::symlink("dir", tmp.path().join("to-dir")).unwrap();
        assert!(entries_of(&tmp.path().join("to-dir")).unwrap().0.is_empty());
        assert!(entries_of(&tmp.path().join("file")).is_err());
    }

    #[test]
    fn paths_through_proc_or_dev_are_seen_behind_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(tmp.path()).unwrap();
        std::os::unix::fs::symlink("/proc/self/cwd", dir.join("cwd")).unwrap();
        std::os::unix::fs::symlink("cwd/x", dir.join("chain")).unwrap();
        std::os::unix::fs::symlink("loop", dir.join("loop")).unwrap();
        std::fs::create_dir(dir.join("x")).unwrap();
        assert!(through_proc_or_dev(Path::new("/proc/self/cwd/x")));
        assert!(through_proc_or_dev(&dir.join("chain/y")));
        assert!(through_proc_or_dev(&dir.join("x/../../../../dev/fd/3")));
        assert!(through_proc_or_dev(&dir.join("loop")), "ELOOP");
        assert!(!through_proc_or_dev(&dir.join("a/b/../c")));
        assert!(!through_proc_or_dev(&dir));
        // The walk for kernels without openat2 agrees.
        assert!(walk_through_proc_or_dev(&dir.join("chain/y")));
        assert!(walk_through_proc_or_dev(&dir.join("loop")));
        assert!(!walk_through_proc_or_dev(&dir.join("a/b/../c")));
    }

    #[test]
    fn walk_and_openat2_agree() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        for p in ["real", "link", "link/x", "missing"] {
            let a = walk_nofollow(&root.join(p))
                .map(|_| ())
                .map_err(|e| e.raw_os_error());
            let b = openat2_no_symlinks(&root.join(p))
                .map(|_| ())
                .map_err(|e| e.raw_os_error());
            assert_eq!(a, b, "{p}");
        }
    }

    #[test]
    fn open_nofollow_refuses_a_symlink_on_any_component() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        assert!(open_nofollow(&root.join("real")).is_ok());
        let err = open_nofollow(&root.join("link")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
        std::fs::create_dir(root.join("real/sub")).unwrap();
        let err = open_nofollow(&root.join("link/sub")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
    }

    #[test]
    fn open_nofollow_refuses_dot_dot() {
        let err = open_nofollow(Path::new("/usr/../etc")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
        assert!(open_nofollow(Path::new("relative")).is_err());
    }

    #[test]
    fn read_small_file_refuses_fifos_symlinks_and_big_files() {
        let dir = tempfile::tempdir().unwrap();
        let fd = open_nofollow(&std::fs::canonicalize(dir.path()).unwrap()).unwrap();
        std::fs::write(dir.path().join("ok"), b"gitdir: x\n").unwrap();
        assert_eq!(read_small_file(&fd, "ok", 64).unwrap(), b"gitdir: x\n");
        assert!(read_small_file(&fd, "ok", 4).is_err());
        let fifo = CString::new(dir.path().join("fifo").as_os_str().as_bytes()).unwrap();
        let fifo_type = rustix::fs::FileType::Fifo;
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, fifo_type, 0o600.into(), 0).unwrap();
        assert!(read_small_file(&fd, "fifo", 64).is_err());
        std::os::unix::fs::symlink("ok", dir.path().join("sym")).unwrap();
        assert!(read_small_file(&fd, "sym", 64).is_err());
        // A device is refused from its O_PATH descriptor, never opened for reading.
        let dev = open_regular(Path::new("/dev/null")).unwrap_err();
        assert!(dev.to_string().contains("a special file"), "{dev}");
    }
}
