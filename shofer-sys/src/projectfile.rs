//! Reading a file the sandboxed command may have written — the project's `.shofer/` files, an
//! agent's project configuration — without trusting what is there: the command may write the
//! task's directory, so it may have put a symlink (to a secret, whose bytes an error message
//! would then echo), a FIFO (which would stop the reader), `/dev/zero` or a huge file there.
//!
//! - [`open_dir`]: a directory below a trusted root, opened one component at a time with
//!   `O_DIRECTORY | O_NOFOLLOW` (a symlinked component fails), optionally creating missing
//!   ones.
//! - [`read_at`]: a file in such a directory, opened with `O_NOFOLLOW | O_NONBLOCK` (a FIFO
//!   opens at once, a symlink fails); only a regular file of at most `max` bytes of UTF-8 text
//!   is read.
//! - [`read_beneath`]: both, for `<root>/<relative path>`; [`read`]: `<dir>/.shofer/<name>`.
//! - [`ReadError`]: not such a file ([`ReadError::NotAFile`]: never read), or a read error.

use std::ffi::{CStr, OsStr};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path};

use rustix::fs::{Mode, OFlags};

/// Why [`read`] gave no text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// A directory on the way or the file is a symlink, a directory, a FIFO, a socket, a
    /// device, or more than the limit: no user writes that, a command can. It was not read.
    NotAFile(String),
    /// A regular file that could not be read, or is not UTF-8 text.
    Unreadable(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::NotAFile(why) | ReadError::Unreadable(why) => f.write_str(why),
        }
    }
}

/// The text of `<dir>/.shofer/<name>`, `Ok(None)` when there is no such file.
///
/// # Errors
/// [`ReadError`]: what was found there instead, or why it could not be read.
pub fn read(dir: &Path, name: &CStr, max: u64) -> Result<Option<String>, ReadError> {
    let name = Path::new(OsStr::from_bytes(name.to_bytes()));
    read_beneath(dir, &Path::new(".shofer").join(name), max)
}

/// The text of `<root>/<rel>`, `Ok(None)` when it or a directory on the way does not exist.
/// `root` is trusted (followed like any path); every component of `rel` is not.
///
/// # Errors
/// [`ReadError`]: a symlink, a non-directory on the way, a special or too large file, a `rel`
/// that is not a plain relative path, or why it could not be read.
pub fn read_beneath(root: &Path, rel: &Path, max: u64) -> Result<Option<String>, ReadError> {
    let (parent, name) = split(rel)?;
    match open_dir(root, parent, None)? {
        Some(dir) => read_at(dir.as_fd(), name, max),
        None => Ok(None),
    }
}

/// `rel` split into its directory and file name.
fn split(rel: &Path) -> Result<(&Path, &OsStr), ReadError> {
    match (rel.parent(), rel.file_name()) {
        (Some(p), Some(n)) => Ok((p, n)),
        _ => Err(ReadError::Unreadable(format!(
            "{}: not a file name",
            rel.display()
        ))),
    }
}

/// The directory `<root>/<rel>`, each component of `rel` opened relative to the one before
/// without following a symlink; `Ok(None)` when one does not exist and `create` is `None`,
/// else missing ones are made with mode `create`.
///
/// # Errors
/// [`ReadError::NotAFile`] naming the component that is a symlink or not a directory, or a
/// `rel` with `..`, `/` or `.` in it; [`ReadError::Unreadable`] for other errors.
pub fn open_dir(
    root: &Path,
    rel: &Path,
    create: Option<u32>,
) -> Result<Option<OwnedFd>, ReadError> {
    let io =
        |what: &Path, e: std::io::Error| ReadError::Unreadable(format!("{}: {e}", what.display()));
    let mut dir: OwnedFd = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(root)
    {
        Ok(d) => d.into(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create.is_none() => return Ok(None),
        Err(e) => return Err(io(root, e)),
    };
    let mut walked = std::path::PathBuf::new();
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(ReadError::NotAFile(format!(
                "{}: only plain names below {} are followed",
                rel.display(),
                root.display()
            )));
        };
        walked.push(name);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let opened = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
            Err(rustix::io::Errno::NOENT) => match create {
                None => return Ok(None),
                Some(mode) => {
                    match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(io(&walked, e.into())),
                    }
                    rustix::fs::openat(&dir, name, flags, Mode::empty())
                }
            },
            other => other,
        };
        dir = match opened {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                return Err(ReadError::NotAFile(format!(
                    "{} is a symlink or not a directory",
                    walked.display()
                )))
            }
            Err(e) => return Err(io(&walked, e.into())),
        };
    }
    Ok(Some(dir))
}

/// The text of the file `name` in `dir`, `Ok(None)` when there is none: opened without
/// following a symlink or blocking on a FIFO, and read only when it is a regular file of at
/// most `max` bytes.
///
/// # Errors
/// [`ReadError`]: what was found there instead, or why it could not be read.
pub fn read_at(dir: BorrowedFd<'_>, name: &OsStr, max: u64) -> Result<Option<String>, ReadError> {
    let not_a_file = |what: &str| ReadError::NotAFile(what.to_string());
    let file = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => std::fs::File::from(fd),
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => return Err(not_a_file("it is a symbolic link")),
        Err(e) => return Err(ReadError::Unreadable(std::io::Error::from(e).to_string())),
    };
    let meta = file
        .metadata()
        .map_err(|e| ReadError::Unreadable(e.to_string()))?;
    let ft = meta.file_type();
    if !ft.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if ft.is_dir() {
            "it is a directory"
        } else if ft.is_fifo() {
            "it is a FIFO"
        } else if ft.is_socket() {
            "it is a socket"
        } else {
            "it is a device"
        };
        return Err(not_a_file(what));
    }
    if meta.len() > max {
        return Err(not_a_file(&format!(
            "it holds {} bytes, more than the {max} read",
            meta.len()
        )));
    }
    let mut raw = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut raw)
        .map_err(|e| ReadError::Unreadable(e.to_string()))?;
    if raw.len() as u64 > max {
        return Err(not_a_file("it grew past the limit while read"));
    }
    String::from_utf8(raw)
        .map(Some)
        .map_err(|_| ReadError::Unreadable("it is not UTF-8 text".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_without_following_and_refuses_special_files() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f"), "text").unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(root.join("a/b/f"), root.join("a/b/flink")).unwrap();
        assert_eq!(
            read_beneath(root, Path::new("a/b/f"), 100)
                .unwrap()
                .as_deref(),
            Some("text")
        );
        assert_eq!(read_beneath(root, Path::new("a/x/f"), 100), Ok(None));
        let e = read_beneath(root, Path::new("link/b/f"), 100).unwrap_err();
        assert_eq!(
            e,
            ReadError::NotAFile("link is a symlink or not a directory".into())
        );
        let e = read_beneath(root, Path::new("a/b/flink"), 100).unwrap_err();
        assert_eq!(e, ReadError::NotAFile("it is a symbolic link".into()));
        let e = read_beneath(root, Path::new("a/../a/b/f"), 100).unwrap_err();
        assert!(matches!(e, ReadError::NotAFile(_)), "{e}");
        let e = read_beneath(root, Path::new("a/b/f"), 3).unwrap_err();
        assert!(e.to_string().contains("holds 4 bytes"), "{e}");
        let dir = open_dir(root, Path::new("n/m"), Some(0o700)).unwrap();
        assert!(dir.is_some() && root.join("n/m").is_dir());
        assert!(open_dir(root, Path::new("link/c"), Some(0o700)).is_err());
        assert!(!root.join("a/c").exists());
    }
}
