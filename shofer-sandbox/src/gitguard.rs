//! Guarding the git files that make the *host's* next git run execute code.
//!
//! Landlock grants whole directory hierarchies, so files inside a writable directory cannot be
//! kept read-only. Two such directories hold files the host's git trusts:
//! - a linked worktree's gitdir `<common>/worktrees/<name>/` (writable so `commit`, `checkout`
//!   and `stash` work): `commondir` tells git where the repository's config and hooks are, and
//!   `config.worktree` is read as configuration when `extensions.worktreeConfig` is on — either
//!   lets a command plant `core.fsmonitor` or `core.hooksPath` for the host's next `git status`;
//! - a main worktree's `.git` directory, which is inside the worktree: `config`,
//!   `config.worktree`, `commondir` and `hooks/`.
//!
//! The supervisor snapshots these before the command starts and, once the whole tree is gone,
//! puts back whatever changed (replacing symlinks and new files, never following them), and
//! says so on stderr. What this cannot cover: a host git run *while* the command still runs,
//! and a supervisor killed with SIGKILL. The report lists `git_metadata` accordingly.

use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::git::GitLayout;
use crate::paths::{self, Kind};

/// Largest guarded file (bytes); a larger one is left unguarded and reported.
const MAX_FILE: usize = 1 << 20;
/// Most entries of a guarded directory (`hooks/`).
const MAX_ENTRIES: usize = 512;

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Absent,
    File {
        data: Vec<u8>,
        mode: u32,
    },
    Dir(Vec<(String, Vec<u8>, u32)>),
    /// Present but not something we can restore (too big, a FIFO, a symlink…).
    Unguardable(String),
}

struct Guarded {
    dir: OwnedFd,
    dir_path: PathBuf,
    name: &'static str,
    original: State,
}

/// The snapshot taken before a run.
pub struct GitGuard {
    entries: Vec<Guarded>,
}

impl GitGuard {
    /// Snapshots the guarded files for `layout` of `worktree` (canonical). Never fails: what cannot be read is noted and reported by [`Self::unguarded`].
    pub fn snapshot(layout: &GitLayout, worktree: &Path) -> GitGuard {
        let mut entries = Vec::new();
        let mut add = |dir_path: PathBuf, names: &[&'static str]| {
            let Ok(dir) = paths::open_nofollow(&dir_path) else {
                return;
            };
            for &name in names {
                let original = read_state(&dir, name);
                entries.push(Guarded {
                    dir: dir.try_clone().expect("dup of an open descriptor"),
                    dir_path: dir_path.clone(),
                    name,
                    original,
                });
            }
        };
        match layout {
            GitLayout::Linked { gitdir, .. } => {
                add(gitdir.clone(), &["commondir", "gitdir", "config.worktree"])
            }
            GitLayout::MainWorktree => add(
                worktree.join(".git"),
                &["config", "config.worktree", "commondir", "hooks"],
            ),
            GitLayout::None | GitLayout::Rejected(_) => {}
        }
        GitGuard { entries }
    }

    /// Guarded paths that could not be snapshotted, with why (for the report).
    pub fn unguarded(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter_map(|g| match &g.original {
                State::Unguardable(why) => {
                    Some(format!("{}/{}: {why}", g.dir_path.display(), g.name))
                }
                _ => None,
            })
            .collect()
    }

    /// The guarded paths.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.entries
            .iter()
            .map(|g| g.dir_path.join(g.name))
            .collect()
    }

    /// After the run: puts back every guarded entry that changed. Returns the paths restored
    /// and the ones that could not be.
    pub fn restore(&self) -> (Vec<PathBuf>, Vec<(PathBuf, io::Error)>) {
        let mut restored = Vec::new();
        let mut failed = Vec::new();
        for g in &self.entries {
            if matches!(g.original, State::Unguardable(_)) {
                continue;
            }
            let now = read_state(&g.dir, g.name);
            if now == g.original {
                continue;
            }
            let path = g.dir_path.join(g.name);
            match put_back(&g.dir, g.name, &g.original, &now) {
                Ok(()) => restored.push(path),
                Err(e) => failed.push((path, e)),
            }
        }
        (restored, failed)
    }
}

fn cname(name: &str) -> CString {
    CString::new(name).expect("guarded names have no NUL")
}

fn read_file(dir: &OwnedFd, name: &str) -> io::Result<(Vec<u8>, u32)> {
    let bytes = paths::read_small_file(dir, name, MAX_FILE)?;
    // Safety: `st` is filled by fstatat on success; NOFOLLOW keeps us off symlinks.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let c = cname(name);
    // Safety: valid dirfd, NUL-terminated name, writable stat buffer.
    if unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok((bytes, st.st_mode & 0o7777))
}

fn read_state(dir: &OwnedFd, name: &str) -> State {
    let fd = match paths::openat_path(dir, Path::new(name)) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return State::Absent,
        Err(e) => return State::Unguardable(e.to_string()),
    };
    match paths::kind(&fd) {
        Ok(Kind::File) => match read_file(dir, name) {
            Ok((data, mode)) => State::File { data, mode },
            Err(e) => State::Unguardable(e.to_string()),
        },
        Ok(Kind::Dir) => match read_dir_files(dir, name) {
            Ok(entries) => State::Dir(entries),
            Err(e) => State::Unguardable(e.to_string()),
        },
        Ok(Kind::Symlink) => State::Unguardable("a symlink".into()),
        Ok(Kind::Special) => State::Unguardable("not a regular file".into()),
        Err(e) => State::Unguardable(e.to_string()),
    }
}

/// The regular files directly in directory `name` (sorted), for `hooks/`.
fn read_dir_files(parent: &OwnedFd, name: &str) -> io::Result<Vec<(String, Vec<u8>, u32)>> {
    let dir = open_dir(parent, name)?;
    let mut out = Vec::new();
    for entry in list(&dir)? {
        if out.len() >= MAX_ENTRIES {
            return Err(io::Error::other(format!("more than {MAX_ENTRIES} entries")));
        }
        let fd = paths::openat_path(&dir, Path::new(&entry))?;
        if paths::kind(&fd)? != Kind::File {
            return Err(io::Error::other(format!("{entry} is not a regular file")));
        }
        let (data, mode) = read_file(&dir, &entry)?;
        out.push((entry, data, mode));
    }
    out.sort();
    Ok(out)
}

fn open_dir(parent: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    let c = cname(name);
    // Safety: valid dirfd and NUL-terminated name; the result is checked.
    let fd = unsafe {
        libc::openat(
            parent.as_raw_fd(),
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: openat just returned this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn list(dir: &OwnedFd) -> io::Result<Vec<String>> {
    let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let mut names = Vec::new();
    for e in std::fs::read_dir(path)? {
        let e = e?;
        names.push(
            e.file_name()
                .into_string()
                .map_err(|_| io::Error::other("a non-UTF-8 name"))?,
        );
    }
    Ok(names)
}

/// Removes `name` under `dir` whatever it is now (file, symlink, or directory tree), without
/// following symlinks.
fn remove(dir: &OwnedFd, name: &str) -> io::Result<()> {
    let c = cname(name);
    // Safety: valid dirfd, NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENOENT) => Ok(()),
        Some(libc::EISDIR) | Some(libc::EPERM) => {
            let sub = open_dir(dir, name)?;
            for entry in list(&sub)? {
                remove(&sub, &entry)?;
            }
            // Safety: as above.
            if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }
        _ => Err(err),
    }
}

/// Writes `data` with `mode` to a fresh temporary name in `dir` and renames it over `name`
/// (which replaces a symlink or file there, never following it).
fn write_over(dir: &OwnedFd, name: &str, data: &[u8], mode: u32) -> io::Result<()> {
    let tmp = format!(".{name}.shofer-restore-{}", std::process::id());
    let ctmp = cname(&tmp);
    // Safety: valid dirfd, NUL-terminated name; O_EXCL|O_NOFOLLOW creates a new file only.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            ctmp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: openat just returned this descriptor.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(data)?;
    drop(file);
    let c = cname(name);
    // Safety: valid dirfd and names.
    let ret =
        unsafe { libc::renameat(dir.as_raw_fd(), ctmp.as_ptr(), dir.as_raw_fd(), c.as_ptr()) };
    if ret != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EISDIR) || err.raw_os_error() == Some(libc::ENOTEMPTY) {
            remove(dir, name)?;
            // Safety: as above.
            if unsafe {
                libc::renameat(dir.as_raw_fd(), ctmp.as_ptr(), dir.as_raw_fd(), c.as_ptr())
            } == 0
            {
                return Ok(());
            }
        }
        let _ = remove(dir, &tmp);
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn put_back(dir: &OwnedFd, name: &str, original: &State, now: &State) -> io::Result<()> {
    match original {
        State::Absent => remove(dir, name),
        State::File { data, mode } => write_over(dir, name, data, *mode),
        State::Dir(entries) => {
            if !matches!(now, State::Dir(_)) {
                remove(dir, name)?;
                let c = cname(name);
                // Safety: valid dirfd and name.
                if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) } != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            let sub = open_dir(dir, name)?;
            let keep: Vec<&str> = entries.iter().map(|(n, _, _)| n.as_str()).collect();
            for entry in list(&sub)? {
                if !keep.contains(&entry.as_str()) {
                    remove(&sub, &entry)?;
                }
            }
            for (n, data, mode) in entries {
                let same = read_file(&sub, n)
                    .map(|(d, m)| &d == data && m == *mode)
                    .unwrap_or(false);
                if !same {
                    write_over(&sub, n, data, *mode)?;
                }
            }
            Ok(())
        }
        State::Unguardable(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, PathBuf, GitLayout) {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let gitdir = root.join("repo/.git/worktrees/wt");
        std::fs::create_dir_all(&gitdir).unwrap();
        std::fs::write(gitdir.join("commondir"), "../..\n").unwrap();
        std::fs::write(gitdir.join("gitdir"), "/x/wt/.git\n").unwrap();
        let layout = GitLayout::Linked {
            gitdir,
            common: root.join("repo/.git"),
        };
        (tmp, root, layout)
    }

    #[test]
    fn a_changed_commondir_and_a_planted_config_worktree_are_put_back() {
        let (_t, root, layout) = setup();
        let guard = GitGuard::snapshot(&layout, &root);
        let GitLayout::Linked { gitdir, .. } = &layout else {
            unreachable!()
        };
        std::fs::write(gitdir.join("commondir"), "/evil\n").unwrap();
        std::fs::write(gitdir.join("config.worktree"), "[core]\nfsmonitor=x\n").unwrap();
        let (restored, failed) = guard.restore();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(restored.len(), 2);
        assert_eq!(
            std::fs::read_to_string(gitdir.join("commondir")).unwrap(),
            "../..\n"
        );
        assert!(!gitdir.join("config.worktree").exists());
    }

    #[test]
    fn a_symlink_or_directory_in_place_of_a_file_is_replaced_not_followed() {
        let (_t, root, layout) = setup();
        let guard = GitGuard::snapshot(&layout, &root);
        let GitLayout::Linked { gitdir, .. } = &layout else {
            unreachable!()
        };
        let victim = root.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::fs::remove_file(gitdir.join("commondir")).unwrap();
        std::os::unix::fs::symlink(&victim, gitdir.join("commondir")).unwrap();
        std::fs::remove_file(gitdir.join("gitdir")).unwrap();
        std::fs::create_dir_all(gitdir.join("gitdir/deep")).unwrap();
        let (_, failed) = guard.restore();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!gitdir.join("commondir").is_symlink());
        assert_eq!(
            std::fs::read_to_string(gitdir.join("gitdir")).unwrap(),
            "/x/wt/.git\n"
        );
    }

    #[test]
    fn main_worktree_hooks_are_put_back() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(wt.join(".git/hooks")).unwrap();
        std::fs::write(wt.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(wt.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        let guard = GitGuard::snapshot(&GitLayout::MainWorktree, &wt);
        std::fs::write(wt.join(".git/hooks/post-checkout"), "rm -rf ~\n").unwrap();
        std::fs::write(wt.join(".git/hooks/pre-commit.sample"), "evil\n").unwrap();
        std::fs::write(wt.join(".git/config"), "[core]\nhooksPath=/x\n").unwrap();
        let (restored, failed) = guard.restore();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(restored.len(), 2);
        assert!(!wt.join(".git/hooks/post-checkout").exists());
        assert_eq!(
            std::fs::read_to_string(wt.join(".git/hooks/pre-commit.sample")).unwrap(),
            "#!/bin/sh\n"
        );
        assert_eq!(
            std::fs::read_to_string(wt.join(".git/config")).unwrap(),
            "[core]\n"
        );
    }
}
