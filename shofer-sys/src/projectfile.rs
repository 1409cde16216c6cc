//! Reading a file of the project's `.shofer/` directory — `shoferignore`, `config.toml` —
//! without trusting what is there: the command may write the task's directory, so it may have
//! put a symlink (to a secret, whose bytes an error message would then echo), a FIFO (which
//! would stop the server), `/dev/zero` or a huge file there.
//!
//! - [`read`]: `.shofer` opened as a directory without following a symlink, the file with
//!   `O_NOFOLLOW | O_NONBLOCK` relative to it (a FIFO opens at once, a symlink fails), and
//!   only a regular file of at most `max` bytes of UTF-8 text read.
//! - [`ReadError`]: not such a file ([`ReadError::NotAFile`]: never read), or a read error.

use std::ffi::CStr;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// Why [`read`] gave no text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// `.shofer` or the file is a symlink, a directory, a FIFO, a socket, a device, or more
    /// than the limit: no user writes that, a command can. It was not read.
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
    let not_a_file = |what: &str| ReadError::NotAFile(what.to_string());
    let shofer_dir = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join(".shofer"))
    {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            return Err(not_a_file(".shofer is a symlink or not a directory"))
        }
        Err(e) => return Err(ReadError::Unreadable(e.to_string())),
    };
    let file = match rustix::fs::openat(
        &shofer_dir,
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
        return Err(not_a_file(&format!("it holds {} bytes", meta.len())));
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
