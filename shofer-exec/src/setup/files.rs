//! Reading and writing agents' configuration files without trusting what is on the way.
//!
//! - [`Location`]: a file as a trusted root directory and a relative path below it. A
//!   project-scope file's root is the worktree, which sandboxed commands may write: no
//!   component below it is followed if it is a symlink ([`Location::beneath`]). A user-scope
//!   file lives in the user's own home, which they may not: a symlinked file there (a dotfiles
//!   manager's `~/.claude.json -> dotfiles/claude.json`) is resolved once and its target
//!   read and written, so it stays a symlink ([`Location::resolved`]).
//! - [`read`]: only a regular file of at most [`MAX_BYTES`], opened without following a
//!   symlink or blocking on a FIFO (`shofer_sys::projectfile`); absent is not an error.
//! - [`write_atomic`]: a temporary file created in the file's directory (opened as above) and
//!   renamed over it there, the original's mode kept, so a reader never sees half a file;
//!   [`remove`]: unlinked in that directory.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use shofer_sys::projectfile::{self, ReadError};

/// The most bytes of a configuration file read (Claude Code's `~/.claude.json` keeps per
/// project history and grows to megabytes).
pub const MAX_BYTES: u64 = 64 << 20;

/// A configuration file: a trusted `root` and a path `rel` below it, no component of which is
/// followed when it is a symlink.
#[derive(Debug, Clone)]
pub struct Location {
    /// The trusted directory (may itself be reached through symlinks).
    pub root: PathBuf,
    /// The file below it (plain names only).
    pub rel: PathBuf,
    /// The symlink this location was resolved from, if it was one.
    pub via: Option<PathBuf>,
}

impl Location {
    /// `rel` below `root`, nothing below `root` followed.
    pub fn beneath(root: &Path, rel: &Path) -> Location {
        Location {
            root: root.to_path_buf(),
            rel: rel.to_path_buf(),
            via: None,
        }
    }

    /// `path` in the user's own files: when it is a symlink, its target, resolved now.
    ///
    /// # Errors
    /// A symlink whose target does not exist, or a path without a file name.
    pub fn resolved(path: &Path) -> Result<Location, String> {
        let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        let (real, via) = if is_link {
            let real = std::fs::canonicalize(path).map_err(|e| {
                format!(
                    "{} is a symlink whose target cannot be resolved ({e}); fix or remove it",
                    path.display()
                )
            })?;
            (real, Some(path.to_path_buf()))
        } else {
            (path.to_path_buf(), None)
        };
        match (real.parent(), real.file_name()) {
            (Some(dir), Some(name)) => Ok(Location {
                root: dir.to_path_buf(),
                rel: PathBuf::from(name),
                via,
            }),
            _ => Err(format!("{}: not a file name", path.display())),
        }
    }

    /// The full path (for messages).
    pub fn path(&self) -> PathBuf {
        self.root.join(&self.rel)
    }

    fn split(&self) -> (&Path, &OsStr) {
        (
            self.rel.parent().unwrap_or(Path::new("")),
            self.rel.file_name().unwrap_or_default(),
        )
    }

    /// The file's directory, opened without following anything below `root`; created (mode
    /// 0700) when `create`.
    fn dir(&self, create: bool) -> Result<Option<OwnedFd>, String> {
        let (parent, _) = self.split();
        if create && !self.root.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.root)
                .map_err(|e| {
                    format!(
                        "{}: cannot create its directory: {e}",
                        self.path().display()
                    )
                })?;
        }
        projectfile::open_dir(&self.root, parent, create.then_some(0o700))
            .map_err(|e| self.refused(&e))
    }

    fn refused(&self, e: &ReadError) -> String {
        match e {
            ReadError::NotAFile(why) => format!(
                "{}: {why}; not followed or read (a command in the sandbox may have put it there): remove it",
                self.path().display()
            ),
            ReadError::Unreadable(why) => format!("{}: cannot read: {why}", self.path().display()),
        }
    }
}

/// Where `path`, one of `ctx`'s targets, is read and written: below the project (nothing
/// below it followed) for a project-scope file, else resolved as the user's own file.
///
/// # Errors
/// See [`Location::resolved`].
pub fn locate(path: &Path, ctx: &super::Context) -> Result<Location, String> {
    match (&ctx.scope, &ctx.project) {
        (super::Scope::Project, Some(p)) => match path.strip_prefix(p) {
            Ok(rel) => Ok(Location::beneath(p, rel)),
            Err(_) => Location::resolved(path),
        },
        _ => Location::resolved(path),
    }
}

/// The file's text, or `None` when it (or its directory) does not exist.
///
/// # Errors
/// A message naming the file when it is not a regular file of at most [`MAX_BYTES`] of UTF-8
/// text, or something on the way is a symlink.
pub fn read(loc: &Location) -> Result<Option<String>, String> {
    projectfile::read_beneath(&loc.root, &loc.rel, MAX_BYTES).map_err(|e| match e {
        ReadError::Unreadable(why) if why.contains("UTF-8") => {
            format!("{}: not UTF-8 text; left untouched", loc.path().display())
        }
        e => loc.refused(&e),
    })
}

/// Replaces the file with `text` atomically, keeping the original's mode (new files get 0600:
/// agents' files may hold tokens). Creates missing directories (mode 0700).
///
/// # Errors
/// A message naming the file; the original is untouched.
pub fn write_atomic(loc: &Location, text: &str) -> Result<(), String> {
    let shown = loc.path();
    let err = |what: &str, e: rustix::io::Errno| {
        format!(
            "{}: cannot {what}: {}",
            shown.display(),
            std::io::Error::from(e)
        )
    };
    let dir = loc.dir(true)?.ok_or_else(|| {
        format!(
            "{}: its directory {} does not exist",
            shown.display(),
            loc.root.display()
        )
    })?;
    let (_, name) = loc.split();
    let mode = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
            st.st_mode & 0o7777
        }
        Ok(_) => {
            return Err(format!(
                "{}: not a regular file; left untouched",
                shown.display()
            ))
        }
        Err(rustix::io::Errno::NOENT) => 0o600,
        Err(e) => return Err(err("inspect", e)),
    };
    let (tmp_name, tmp) =
        create_temp(&dir).map_err(|e| err("create a temporary file beside it", e))?;
    let written = write_all(&tmp, text.as_bytes())
        .and_then(|()| rustix::fs::fchmod(&tmp, Mode::from_raw_mode(mode)))
        .and_then(|()| rustix::fs::fsync(&tmp))
        .map_err(|e| err("write", e))
        .and_then(|()| {
            rustix::fs::renameat(&dir, &tmp_name, &dir, name).map_err(|e| err("replace", e))
        });
    if written.is_err() {
        let _ = rustix::fs::unlinkat(&dir, &tmp_name, AtFlags::empty());
    }
    written
}

/// A new file `.shofer-init-<random>` in `dir`, never an existing one.
fn create_temp(dir: &OwnedFd) -> Result<(String, OwnedFd), rustix::io::Errno> {
    let mut last = rustix::io::Errno::EXIST;
    for _ in 0..16 {
        let mut r = [0u8; 8];
        rustix::rand::getrandom(&mut r, rustix::rand::GetRandomFlags::empty())?;
        let name = format!(".shofer-init-{:016x}", u64::from_ne_bytes(r));
        match rustix::fs::openat(
            dir,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => return Ok((name, fd)),
            Err(rustix::io::Errno::EXIST) => last = rustix::io::Errno::EXIST,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

fn write_all(fd: &OwnedFd, mut buf: &[u8]) -> Result<(), rustix::io::Errno> {
    while !buf.is_empty() {
        match rustix::io::write(fd.as_fd(), buf) {
            Ok(0) => return Err(rustix::io::Errno::IO),
            Ok(n) => buf = &buf[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Removes the file (init created it and undo emptied it), in its directory opened as
/// [`read`] does.
///
/// # Errors
/// A message naming the file.
pub fn remove(loc: &Location) -> Result<(), String> {
    let Some(dir) = loc.dir(false)? else {
        return Ok(());
    };
    let (_, name) = loc.split();
    rustix::fs::unlinkat(&dir, name, AtFlags::empty()).map_err(|e| {
        format!(
            "{}: cannot remove: {}",
            loc.path().display(),
            std::io::Error::from(e)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn write_keeps_the_mode_and_replaces_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let loc = Location::beneath(d.path(), Path::new("a.json"));
        write_atomic(&loc, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        // Only the file itself is left: the temporary file was renamed.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        let fresh = Location::beneath(d.path(), Path::new("sub/b.json"));
        write_atomic(&fresh, "x").unwrap();
        let mode = std::fs::metadata(fresh.path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(read(&fresh).unwrap().as_deref(), Some("x"));
        remove(&fresh).unwrap();
        assert_eq!(read(&fresh).unwrap(), None);
    }

    #[test]
    fn symlinks_below_the_root_are_refused_and_a_users_is_written_through() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        let root = d.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("dir")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("f")).unwrap();
        let f = Location::beneath(&root, Path::new("f"));
        assert!(read(&f).unwrap_err().contains("symbolic link"));
        assert!(write_atomic(&f, "x").is_err());
        assert_eq!(
            std::fs::read_to_string(outside.join("secret")).unwrap(),
            "s"
        );
        let under = Location::beneath(&root, Path::new("dir/new.json"));
        assert!(write_atomic(&under, "x").unwrap_err().contains("symlink"));
        assert!(!outside.join("new.json").exists());
        let mine = Location::resolved(&root.join("f")).unwrap();
        assert_eq!(
            mine.path(),
            std::fs::canonicalize(outside.join("secret")).unwrap()
        );
        write_atomic(&mine, "new").unwrap();
        assert_eq!(
            std::fs::read_to_string(outside.join("secret")).unwrap(),
            "new"
        );
        assert!(std::fs::symlink_metadata(root.join("f"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
