//! State a later process trusts because shofer wrote it — the sandbox's git-guard journals and
//! object quarantines, `shofer run`'s job records and artifacts — lives in a directory of the
//! user's that no sandboxed command may write. What is read back from there is checked again
//! on every read, as on write (issue 29, F8): a command that could reach the place (a state
//! directory under `HOME=/tmp`, a run with `--allow-write ~`) could otherwise plant a record
//! that a later run acts on.
//!
//! - [`check`]: the directory — not a symlink itself, no symlink on its path once the
//!   caller's parent is resolved (`HOME` may hold one), a directory owned by this
//!   user that neither group nor others can write, and neither inside nor holding a path of
//!   the writable set given. Returns it open, so what is read next is read relative to it.
//! - [`create`]: makes it (mode 0700, parents too), then [`check`]s it; [`create_below`]:
//!   directories below a checked one, level by level relative to its descriptor.
//! - [`open_file`] / [`read_file`]: a file in a checked directory — opened relative to its
//!   descriptor with `O_NOFOLLOW | O_NONBLOCK` (a symlink fails, a FIFO opens at once), and
//!   only a regular file of this user with one link, not writable by group or others, and
//!   (for [`read_file`]) of at most the size the caller allows.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Why a state directory is refused ([`check`]); each names the directory and what is valid.
#[derive(Debug)]
#[non_exhaustive]
pub enum StateDirError {
    /// It cannot be created, resolved or opened (`ELOOP`: a symlink appeared on its path).
    Open {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Not a directory.
    NotADirectory {
        /// The directory.
        path: PathBuf,
    },
    /// Owned by another user.
    Owner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// Group or others may write it.
    Mode {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It lies inside a writable path, or holds one.
    Writable {
        /// The directory.
        path: PathBuf,
        /// The writable path.
        root: PathBuf,
    },
}

impl fmt::Display for StateDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open { path, source } => write!(f, "{}: {source}", path.display()),
            Self::NotADirectory { path } => {
                write!(
                    f,
                    "{} is not a directory (a symlink is not followed)",
                    path.display()
                )
            }
            Self::Owner { path, uid } => write!(
                f,
                "{} belongs to uid {uid}, not to this user ({})",
                path.display(),
                rustix::process::geteuid().as_raw()
            ),
            Self::Mode { path, mode } => write!(
                f,
                "{} has mode {mode:04o}: group or others may write it (expected e.g. 0700)",
                path.display()
            ),
            Self::Writable { path, root } => write!(
                f,
                "{} lies inside or holds {}, which sandboxed commands may write",
                path.display(),
                root.display()
            ),
        }
    }
}

impl std::error::Error for StateDirError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A checked state directory: its canonical path and a descriptor on it (read, directory).
#[derive(Debug)]
pub struct StateDir {
    /// The canonical path.
    pub path: PathBuf,
    /// The directory, opened without following a symlink on any component.
    pub fd: OwnedFd,
}

/// Checks the existing directory `path` (see the module docs). `writable`: the paths a
/// sandboxed command may write (canonicalised here where they exist).
///
/// # Errors
/// [`StateDirError`], naming the directory and what is wrong.
pub fn check(path: &Path, writable: &[PathBuf]) -> Result<StateDir, StateDirError> {
    check_in(path, &Writable::canonical(writable))
}

/// [`check`] against a [`Writable`] made once for several checks.
///
/// # Errors
/// As [`check`].
pub fn check_in(path: &Path, writable: &Writable) -> Result<StateDir, StateDirError> {
    check_among(path, &writable.0)
}

/// The writable set a state directory must stay outside of, its paths canonical: made once
/// for the several checks of one run ([`check_in`], [`create_in`]), rather than resolved again
/// at each.
#[derive(Clone, Debug, Default)]
pub struct Writable(Vec<PathBuf>);

impl Writable {
    /// `paths` canonicalised where they exist, as given where they do not (an `open`, a
    /// `readlink` and a `close` each).
    pub fn canonical(paths: &[PathBuf]) -> Writable {
        Writable(canonical_all(paths))
    }

    /// Paths that are canonical already: those the kernel shows for descriptors the caller
    /// holds ([`crate::fd::path_of`]).
    pub fn of_canonical(paths: Vec<PathBuf>) -> Writable {
        Writable(paths)
    }
}

/// [`check`] with `writable` canonical already.
fn check_among(path: &Path, writable: &[PathBuf]) -> Result<StateDir, StateDirError> {
    let open_err = |source| StateDirError::Open {
        path: path.to_path_buf(),
        source,
    };
    // The caller's environment names the place (HOME may hold a symlink): its parent is
    // resolved once, the directory itself must not be a symlink, and the whole is opened with
    // no symlink allowed anywhere, so a swap after the resolution fails.
    let canon = match (path.parent(), path.file_name()) {
        (Some(parent), Some(leaf)) if !parent.as_os_str().is_empty() => {
            crate::fd::canonicalize(parent)
                .map_err(open_err)?
                .join(leaf)
        }
        _ => crate::fd::canonicalize(path).map_err(open_err)?,
    };
    let fd = rustix::fs::openat2(
        rustix::fs::CWD,
        &canon,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .or_else(|e| {
        if e == rustix::io::Errno::NOSYS {
            walk_nofollow(&canon)
        } else {
            Err(e)
        }
    })
    .map_err(|e| match e {
        rustix::io::Errno::NOTDIR => StateDirError::NotADirectory {
            path: canon.clone(),
        },
        e => open_err(e.into()),
    })?;
    let canon = judge_opened(&fd, canon)?;
    if let Some(root) = writable_around(&canon, writable) {
        return Err(StateDirError::Writable { path: canon, root });
    }
    Ok(StateDir { path: canon, fd })
}

/// `fd`, opened at `path`: a directory of this user that neither group nor others can write.
/// Returns `path`.
fn judge_opened(fd: &OwnedFd, path: PathBuf) -> Result<PathBuf, StateDirError> {
    let st = rustix::fs::fstat(fd).map_err(|e| StateDirError::Open {
        path: path.clone(),
        source: e.into(),
    })?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory {
        return Err(StateDirError::NotADirectory { path });
    }
    if st.st_uid != rustix::process::geteuid().as_raw() {
        return Err(StateDirError::Owner {
            path,
            uid: st.st_uid,
        });
    }
    if st.st_mode & 0o022 != 0 {
        return Err(StateDirError::Mode {
            path,
            mode: st.st_mode & 0o7777,
        });
    }
    Ok(path)
}

/// Makes `rel` (relative, plain names; missing levels with mode 0700) below the checked
/// directory `parent`, each level made and opened relative to the one above (`mkdirat`, then
/// `openat` with `O_NOFOLLOW`) and held to [`check`]'s rules. No path is resolved again and
/// the writable set is not consulted: `parent` neither lies inside a writable path nor holds
/// one, so nothing below it does either. The cheap way to the many directories of one
/// checked place (a run's package caches: a [`create`] each cost about 0.3 ms in path
/// resolutions).
///
/// # Errors
/// As [`check`]; a `rel` that is not plain names as [`StateDirError::Open`] (`EINVAL`).
pub fn create_below(parent: &StateDir, rel: &Path) -> Result<StateDir, StateDirError> {
    use std::path::Component;
    let path = parent.path.join(rel);
    let open_err = |source: rustix::io::Errno| StateDirError::Open {
        path: path.clone(),
        source: source.into(),
    };
    let mut fd: Option<OwnedFd> = None;
    let mut level = parent.path.clone();
    for comp in rel.components() {
        let Component::Normal(name) = comp else {
            return Err(open_err(rustix::io::Errno::INVAL));
        };
        level.push(name);
        let open_err = |source: rustix::io::Errno| StateDirError::Open {
            path: level.clone(),
            source: source.into(),
        };
        let at = fd.as_ref().unwrap_or(&parent.fd);
        match rustix::fs::mkdirat(at, name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(open_err(e)),
        }
        let next = rustix::fs::openat(
            at,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::NOTDIR => StateDirError::NotADirectory {
                path: level.clone(),
            },
            e => open_err(e),
        })?;
        judge_opened(&next, level.clone())?;
        fd = Some(next);
    }
    let fd = fd.ok_or_else(|| open_err(rustix::io::Errno::INVAL))?;
    Ok(StateDir { path, fd })
}

/// `writable` canonicalised where it exists (as given where it does not).
fn canonical_all(writable: &[PathBuf]) -> Vec<PathBuf> {
    writable
        .iter()
        .map(|w| crate::fd::canonicalize(w).unwrap_or_else(|_| w.clone()))
        .collect()
}

/// The first of `writable` (canonical: [`canonical_all`]) that `canon` lies inside or holds.
fn writable_around(canon: &Path, writable: &[PathBuf]) -> Option<PathBuf> {
    writable
        .iter()
        .find(|w| canon.starts_with(w) || w.starts_with(canon))
        .cloned()
}

/// Makes `path` (and missing parents) with mode 0700, then [`check`]s it. Nothing is made
/// inside a writable path: the place is judged first from its deepest existing ancestor (a
/// directory made there would be the command's to fill, and named on every later read).
///
/// # Errors
/// As [`check`]; mkdir(2) failures as [`StateDirError::Open`].
pub fn create(path: &Path, writable: &[PathBuf]) -> Result<StateDir, StateDirError> {
    create_in(path, &Writable::canonical(writable))
}

/// [`create`] against a [`Writable`] made once for several checks.
///
/// # Errors
/// As [`create`].
pub fn create_in(path: &Path, writable: &Writable) -> Result<StateDir, StateDirError> {
    use std::os::unix::fs::DirBuilderExt;
    let writable = &writable.0;
    let mut existing = path;
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(existing).is_err() {
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = parent;
            }
            _ => break,
        }
    }
    if let Ok(base) = crate::fd::canonicalize(existing) {
        let would_be = rest.iter().rev().fold(base, |p, n| p.join(n));
        if let Some(root) = writable_around(&would_be, writable) {
            return Err(StateDirError::Writable {
                path: would_be,
                root,
            });
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| StateDirError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    check_among(path, writable)
}

/// [`check`] for kernels without `openat2` (before Linux 5.6): one `openat(O_NOFOLLOW)` per
/// component of the absolute path `path`.
fn walk_nofollow(path: &Path) -> rustix::io::Result<OwnedFd> {
    use std::path::Component;
    let mut fd = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for comp in path.components() {
        match comp {
            Component::RootDir => {}
            Component::Normal(name) => {
                fd = rustix::fs::openat(
                    &fd,
                    name,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
            }
            _ => return Err(rustix::io::Errno::INVAL),
        }
    }
    rustix::fs::openat(
        &fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Opens `name` (one component) in the checked directory `dir` for reading when it is a
/// regular file of this user with one link that neither group nor others can write (see the
/// module docs).
///
/// # Errors
/// open(2) failures (`ELOOP` for a symlink, `ENOENT`), and `InvalidData` naming what was
/// found instead of such a file.
pub fn open_file(dir: &OwnedFd, name: &str) -> io::Result<File> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a file name"),
        ));
    }
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    let bad = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{name} {what}, not a regular file of this user's that only it can write"),
        )
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(bad("is a special file or directory".into()));
    }
    if st.st_uid != rustix::process::geteuid().as_raw() {
        return Err(bad(format!("belongs to uid {}", st.st_uid)));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(bad(format!("has mode {:04o}", st.st_mode & 0o7777)));
    }
    if st.st_nlink != 1 {
        return Err(bad(format!("has {} links", st.st_nlink)));
    }
    Ok(File::from(fd))
}

/// Reads `name` in the checked directory `dir` ([`open_file`]): at most `max` bytes.
///
/// # Errors
/// As [`open_file`]; read(2) failures; `InvalidData` for a file larger than `max`.
pub fn read_file(dir: &OwnedFd, name: &str, max: u64) -> io::Result<Vec<u8>> {
    let file = open_file(dir, name)?;
    let mut buf = Vec::new();
    file.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{name} is larger than {max} bytes"),
        ));
    }
    Ok(buf)
}

/// The names in the checked directory `dir` (a fresh descriptor on it is read, so `dir`'s own
/// position is untouched).
///
/// # Errors
/// Reading the directory.
pub fn list(dir: &OwnedFd) -> io::Result<Vec<std::ffi::OsString>> {
    let fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(&fd)? {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            use std::os::unix::ffi::OsStrExt;
            out.push(std::ffi::OsStr::from_bytes(name).to_os_string());
        }
    }
    Ok(out)
}

/// A name part for the supervisor's temporary entries in directories the command can write
/// (and its cgroups): random, so the command cannot plant something at the name first.
pub fn random_suffix() -> String {
    let mut buf = [0u8; 8];
    let n = rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty());
    if n.ok() != Some(buf.len()) {
        // Never predictable from inside: nanoseconds and our PID mixed in.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        buf = (t ^ ((std::process::id() as u64) << 32)).to_ne_bytes();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn below_a_checked_dir_levels_are_made_and_a_planted_symlink_or_shared_level_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let top = create(&tmp.path().join("state"), &[]).unwrap();
        let made = create_below(&top, Path::new("npm/upper")).unwrap();
        assert_eq!(made.path, top.path.join("npm/upper"));
        let mode = std::fs::metadata(&made.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Again: the same directories, no error.
        assert!(create_below(&top, Path::new("npm/upper")).is_ok());
        // A symlink planted at a level is never followed.
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, top.path.join("cargo")).unwrap();
        let e = create_below(&top, Path::new("cargo/upper")).unwrap_err();
        assert!(e.to_string().contains("cargo"), "{e}");
        assert!(!elsewhere.join("upper").exists());
        // A level others may write, or a file where a level should be.
        std::fs::set_permissions(top.path.join("npm"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let e = create_below(&top, Path::new("npm/work")).unwrap_err();
        assert!(matches!(e, StateDirError::Mode { .. }), "{e}");
        std::fs::write(top.path.join("pip"), b"x").unwrap();
        let e = create_below(&top, Path::new("pip/env")).unwrap_err();
        assert!(matches!(e, StateDirError::NotADirectory { .. }), "{e}");
        // Only plain names.
        for bad in ["../x", "/abs", ""] {
            assert!(create_below(&top, Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn state_dirs_and_files_are_refused_when_shared_special_or_inside_a_writable_path() {
        let tmp = std::env::temp_dir().join(format!("shofer-statedir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        // Nothing is made inside a writable path.
        let e = create(&tmp.join("a/state"), std::slice::from_ref(&tmp)).unwrap_err();
        assert!(matches!(e, StateDirError::Writable { .. }), "{e}");
        assert!(!tmp.exists());
        let ok = create(&tmp.join("a/state"), &[]).unwrap();
        assert!(ok.path.ends_with("a/state"));
        // Inside, or holding, a writable path.
        let e = check(&tmp.join("a/state"), std::slice::from_ref(&tmp)).unwrap_err();
        assert!(matches!(e, StateDirError::Writable { .. }), "{e}");
        let e = check(&tmp.join("a"), &[tmp.join("a/state/x")]).unwrap_err();
        assert!(matches!(e, StateDirError::Writable { .. }), "{e}");
        // Writable by others.
        std::fs::set_permissions(tmp.join("a/state"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let e = check(&tmp.join("a/state"), &[]).unwrap_err();
        assert!(
            matches!(e, StateDirError::Mode { .. }) && e.to_string().contains("0777"),
            "{e}"
        );
        std::fs::set_permissions(tmp.join("a/state"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        // A file where the directory should be.
        std::fs::write(tmp.join("f"), b"").unwrap();
        assert!(matches!(
            check(&tmp.join("f"), &[]).unwrap_err(),
            StateDirError::NotADirectory { .. }
        ));
        // A symlink as the directory itself (its target would pass).
        std::os::unix::fs::symlink(tmp.join("a/state"), tmp.join("link")).unwrap();
        let e = check(&tmp.join("link"), &[]).unwrap_err();
        assert!(matches!(e, StateDirError::NotADirectory { .. }), "{e}");
        // Files: a symlink, a FIFO, a second link, a group-writable file, too large.
        let dir = ok.fd;
        std::fs::write(tmp.join("a/state/rec"), b"12345").unwrap();
        assert_eq!(read_file(&dir, "rec", 5).unwrap(), b"12345");
        assert!(read_file(&dir, "rec", 4).is_err());
        std::os::unix::fs::symlink("rec", tmp.join("a/state/sym")).unwrap();
        assert!(read_file(&dir, "sym", 64).is_err());
        std::fs::hard_link(tmp.join("a/state/rec"), tmp.join("a/state/link")).unwrap();
        assert!(read_file(&dir, "rec", 64)
            .unwrap_err()
            .to_string()
            .contains("2 links"));
        std::fs::remove_file(tmp.join("a/state/link")).unwrap();
        let fifo = std::ffi::CString::new(tmp.join("a/state/fifo").to_str().unwrap()).unwrap();
        // Safety: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(
            read_file(&dir, "fifo", 64).is_err(),
            "a FIFO opens at once and is refused"
        );
        std::fs::set_permissions(
            tmp.join("a/state/rec"),
            std::fs::Permissions::from_mode(0o620),
        )
        .unwrap();
        assert!(read_file(&dir, "rec", 64).is_err());
        assert!(read_file(&dir, "../f", 64).is_err());
        let mut names = list(&dir).unwrap();
        names.sort();
        assert_eq!(names, ["fifo", "rec", "sym"]);
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
