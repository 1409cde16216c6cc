//! The object quarantine of the namespace backends: existing objects of the repository cannot
//! be changed or deleted by the command, new ones reach the store only once verified
//! (docs/ARCHITECTURE.md, "Linked git worktrees").
//!
//! The idea is git's own (`receive-pack`'s quarantine, git's tmp-objdir.c): new objects go to
//! a directory of their own, the real store is an alternate of it, and they are moved into
//! the store only after they have been checked. Here the redirection is made with mounts,
//! not with `GIT_OBJECT_DIRECTORY` (which would follow the command into every other
//! repository it touches, `git init` in `/tmp` included):
//!
//! - before the run, [`Quarantine::create`] makes `<common>/shofer-objects-<random>` (the
//!   quarantine) with `info/alternates` naming its own path, and locks it (`flock`);
//! - in the sandbox the quarantine is bound read-write over `<common>/objects`, and the real
//!   store read-only over the quarantine's own path (`crate::namespaces`, `crate::bwrap`):
//!   git writes new objects where it always does, and finds the existing ones through the
//!   alternate, read-only (a deletion or rewrite fails with `EROFS`, a rename with `EBUSY`);
//! - when the run has ended, [`Quarantine::migrate`] moves each new loose object whose
//!   content hashes to its name into the store (`RENAME_NOREPLACE`: an existing object is
//!   never replaced), and each new pack is handed to `git index-pack --stdin`, which hashes
//!   every object and writes the pack with an index of its own into the store (the command's
//!   index could name objects the pack does not hold); what does not verify is named and
//!   dropped;
//! - a quarantine whose run was killed is still locked by nobody: the next run on the
//!   repository, or `shofer-sandbox --repair WT`, migrates it ([`sweep`]).
//!
//! Until the run ends, the host's git does not see the new objects (a host `git log` of a
//! branch the command committed to fails with "bad object"); the report says so.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::objects::{hex, loose_object_id};
use std::cell::Cell;

/// The prefix of a quarantine's name in the common dir.
const PREFIX: &str = "shofer-objects-";

/// One run's quarantine, locked while the run lasts.
#[derive(Debug)]
pub struct Quarantine {
    /// The repository's object store (`<common>/objects`).
    pub objects: PathBuf,
    /// The quarantine (`<common>/shofer-objects-<random>`): the command's `objects/`.
    pub dir: PathBuf,
    sha256: bool,
    /// The quarantine's descriptor, holding its `flock`.
    _lock: OwnedFd,
}

/// What a migration did.
#[derive(Debug, Default)]
pub struct Migrated {
    /// Objects and packs moved into the store.
    pub moved: usize,
    /// (object or pack, why) not moved because they did not verify; dropped.
    pub rejected: Vec<(String, String)>,
    /// (path, error) that could not be moved: the quarantine is kept for a later try.
    pub failed: Vec<(PathBuf, String)>,
}

impl Migrated {
    fn merge(&mut self, other: Migrated) {
        self.moved += other.moved;
        self.rejected.extend(other.rejected);
        self.failed.extend(other.failed);
    }
}

/// Opens `dir` and takes its `flock` without waiting.
///
/// # Errors
/// open(2); `WouldBlock` when a running supervisor holds it.
fn lock(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)?
        .into();
    // Safety: flock(2) on a descriptor we own; rustix's flock needs a feature not built here.
    if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

impl Quarantine {
    /// Makes and locks a new quarantine for the store `common/objects`. `sha256`: the
    /// repository's object format.
    ///
    /// # Errors
    /// mkdir(2) or writing `info/alternates` (the caller cannot write the common dir).
    pub fn create(common: &Path, sha256: bool) -> io::Result<Quarantine> {
        let dir = common.join(format!("{PREFIX}{}", crate::gitguard::random_suffix()));
        std::fs::DirBuilder::new().mode(0o755).create(&dir)?;
        let made = (|| {
            let lock = lock(&dir)?;
            std::fs::DirBuilder::new()
                .mode(0o755)
                .create(dir.join("info"))?;
            // In the sandbox the store is bound over the quarantine's own path.
            let mut line = dir.as_os_str().as_encoded_bytes().to_vec();
            line.push(b'\n');
            std::fs::write(dir.join("info/alternates"), line)?;
            let objects = common.join("objects");
            for p in [dir.clone(), dir.join("info"), dir.join("info/alternates")] {
                own_like(&p, &objects)?;
            }
            Ok(lock)
        })();
        match made {
            Ok(lock) => Ok(Quarantine {
                objects: common.join("objects"),
                dir,
                sha256,
                _lock: lock,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Moves what the command wrote into the store and removes the quarantine, unless
    /// something could not be moved. Call once every process of the sandbox is gone.
    pub fn migrate(self) -> Migrated {
        migrate(&self.dir, &self.objects, self.sha256)
    }
}

/// Migrates the quarantines of killed runs in `common` (unlocked ones).
pub fn sweep(common: &Path, sha256: bool) -> Migrated {
    let mut out = Migrated::default();
    let Ok(rd) = std::fs::read_dir(common) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        if !name.to_str().is_some_and(|n| n.starts_with(PREFIX)) {
            continue;
        }
        let dir = e.path();
        // Held: its run is still going.
        let Ok(_lock) = lock(&dir) else { continue };
        out.merge(migrate(&dir, &common.join("objects"), sha256));
    }
    out
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn migrate(dir: &Path, objects: &Path, sha256: bool) -> Migrated {
    let mut out = Migrated::default();
    let hexlen = if sha256 { 64 } else { 40 };
    let mut fanouts: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.len() == 2 && is_hex(n))
                .collect()
        })
        .unwrap_or_default();
    fanouts.sort();
    for fan in fanouts {
        // Read and renamed through a descriptor: a fan-out directory the command replaced by
        // a symlink leads nowhere else.
        let Some((from_dir, from)) = subdir(dir, &fan) else {
            out.rejected.push((fan, "not a directory".into()));
            continue;
        };
        let Ok(rd) = std::fs::read_dir(&from) else {
            continue;
        };
        let mut to_dir: Option<OwnedFd> = None;
        for name in rd
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.len() == hexlen - 2 && is_hex(n))
        {
            let oid = format!("{fan}{name}");
            if std::fs::symlink_metadata(objects.join(&fan).join(&name)).is_ok() {
                continue;
            }
            let why = match loose_object_id(&from.join(&name), sha256, &Cell::new(u64::MAX)) {
                Ok(id) if hex(&id) == oid => None,
                Ok(_) => Some("its content does not hash to its name".to_string()),
                Err(e) => Some(format!("unreadable: {e}")),
            };
            if let Some(why) = why {
                out.rejected.push((oid, why));
                continue;
            }
            let moved = match &to_dir {
                Some(to) => rename_between(&from_dir, &name, to, &name),
                None => fanout_dir(objects, &fan).and_then(|to| {
                    let r = rename_between(&from_dir, &name, &to, &name);
                    to_dir = Some(to);
                    r
                }),
            };
            match moved {
                Ok(()) => out.moved += 1,
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => out.failed.push((dir.join(&fan).join(&name), e.to_string())),
            }
        }
    }
    migrate_packs(dir, objects, &mut out);
    if out.failed.is_empty() {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            out.failed.push((dir.to_path_buf(), e.to_string()));
        }
    }
    out
}

/// `dir/name` as a directory descriptor (a symlink is not followed) and the path to read it
/// through (`/proc/self/fd/N`).
fn subdir(dir: &Path, name: &str) -> Option<(OwnedFd, PathBuf)> {
    let fd = crate::paths::open_nofollow(&dir.join(name)).ok()?;
    if crate::paths::kind(&fd).ok()? != crate::paths::Kind::Dir {
        return None;
    }
    let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    Some((fd, path))
}

/// As root, gives `path` to the owner of the store (a root caller over a repository another
/// user owns: that user's git must be able to write there later).
fn own_like(path: &Path, objects: &Path) -> io::Result<()> {
    // Safety: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(objects)?;
    std::os::unix::fs::lchown(path, Some(m.uid()), Some(m.gid()))
}

/// `objects/<fan>`, made if absent with the mode of `objects/` (git's core.sharedRepository
/// modes included).
fn fanout_dir(objects: &Path, fan: &str) -> io::Result<OwnedFd> {
    let path = objects.join(fan);
    match crate::paths::open_nofollow(&path) {
        Ok(fd) if crate::paths::kind(&fd)? == crate::paths::Kind::Dir => return Ok(fd),
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not a directory", path.display()),
            ))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) => return Err(e),
    }
    let mode = std::fs::symlink_metadata(objects)?.permissions().mode() & 0o7777;
    match std::fs::DirBuilder::new().mode(mode).create(&path) {
        Ok(()) => {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            own_like(&path, objects)?;
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    crate::paths::open_nofollow(&path)
}

/// renameat2(2) `RENAME_NOREPLACE` from `from_dir/from` to `to_dir/to`.
fn rename_between(from_dir: &OwnedFd, from: &str, to_dir: &OwnedFd, to: &str) -> io::Result<()> {
    let cstr = |n: &str| {
        std::ffi::CString::new(n).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let (f, t) = (cstr(from)?, cstr(to)?);
    // Safety: valid descriptors and NUL-terminated names; RENAME_NOREPLACE never overwrites.
    let ret = unsafe {
        libc::renameat2(
            from_dir.as_raw_fd(),
            f.as_ptr(),
            to_dir.as_raw_fd(),
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Each `pack/pack-*.pack` of the quarantine, given to `git index-pack --stdin` in the
/// repository (which hashes every object of the pack, compares it with any existing object of
/// the same name, and writes the pack and an index of its own into `objects/pack`); the
/// command's own index is never used.
fn migrate_packs(dir: &Path, objects: &Path, out: &mut Migrated) {
    if std::fs::symlink_metadata(dir.join("pack")).is_err() {
        return;
    }
    let Some((from, pack_dir)) = subdir(dir, "pack") else {
        out.rejected.push(("pack".into(), "not a directory".into()));
        return;
    };
    let Ok(rd) = std::fs::read_dir(&pack_dir) else {
        return;
    };
    let mut packs: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("pack-") && n.ends_with(".pack"))
        .collect();
    packs.sort();
    if packs.is_empty() {
        return;
    }
    let common = objects.parent().unwrap_or(objects);
    let git = match crate::path_search::resolve(c"git") {
        Ok(p) => PathBuf::from(std::ffi::OsStr::from_bytes(p.as_bytes())),
        Err(_) => {
            out.failed.push((
                dir.join("pack"),
                "no git on PATH to verify the command's packs with".into(),
            ));
            return;
        }
    };
    for pack in packs {
        let base = pack.trim_end_matches(".pack");
        let shown = dir.join("pack").join(&pack);
        let Ok(file) = crate::paths::open_regular(&pack_dir.join(&pack)) else {
            out.rejected
                .push((pack.clone(), "not a regular file".into()));
            continue;
        };
        // `--stdin`: git reads the pack from our descriptor and writes it into the store
        // itself, as receive-pack does with a pushed pack.
        let run = Command::new(&git)
            .args(["index-pack", "--stdin", "--no-rev-index"])
            .current_dir(common)
            .env("GIT_DIR", common)
            .env_remove("GIT_OBJECT_DIRECTORY")
            .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
            .stdin(file)
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .output();
        let hash = match run {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .last()
                .unwrap_or("")
                .to_string(),
            Ok(o) => {
                out.rejected.push((
                    pack.clone(),
                    format!(
                        "git index-pack refused it: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    ),
                ));
                continue;
            }
            Err(e) => {
                out.failed.push((shown, format!("git index-pack: {e}")));
                continue;
            }
        };
        if hash.len() < 40 || !is_hex(&hash) {
            out.failed.push((
                shown,
                format!("git index-pack printed no pack name: {hash:?}"),
            ));
            continue;
        }
        out.moved += 1;
        let name = format!("pack-{hash}");
        for ext in ["pack", "idx"] {
            let _ = own_like(&objects.join("pack").join(format!("{name}.{ext}")), objects);
        }
        // A partial clone's marker: the pack's objects may lack what they refer to.
        if std::fs::symlink_metadata(pack_dir.join(format!("{base}.promisor"))).is_ok() {
            if let Ok(to) = fanout_dir(objects, "pack") {
                let _ = rename_between(
                    &from,
                    &format!("{base}.promisor"),
                    &to,
                    &format!("{name}.promisor"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t.invalid")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A repository at `dir/repo`, and a second one whose objects are copied into a
    /// quarantine of the first to stand for what a command wrote.
    #[test]
    fn verified_objects_and_packs_move_into_the_store_and_forged_ones_do_not() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let common = repo.join(".git");
        let q = Quarantine::create(&common, false).unwrap();
        let alternates = std::fs::read_to_string(q.dir.join("info/alternates")).unwrap();
        assert_eq!(alternates.trim_end(), q.dir.to_str().unwrap());
        // Locked while the run lasts: a sweep leaves it alone.
        assert_eq!(sweep(&common, false).moved, 0);
        assert!(q.dir.is_dir());

        // Objects written by a git whose objects directory is the quarantine, the store its
        // alternate (what the mounts give the command).
        let write = |content: &str| -> String {
            let out = Command::new("sh")
                .arg("-c")
                .arg("echo \"$C\" | git hash-object -w --stdin")
                .env("C", content)
                .env("GIT_OBJECT_DIRECTORY", &q.dir)
                .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", common.join("objects"))
                .current_dir(&repo)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let good = write("new object");
        let forged = write("forged");
        let forged_path = q.dir.join(&forged[..2]).join(&forged[2..]);
        let other = write("other content");
        let other_path = q.dir.join(&other[..2]).join(&other[2..]);
        std::fs::set_permissions(&forged_path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::copy(&other_path, &forged_path).unwrap();
        // A pack of two more objects, written the same way.
        let packed = [write("packed one"), write("packed two")];
        let out = Command::new("sh")
            .arg("-c")
            .arg("printf '%s\\n' \"$A\" \"$B\" | git pack-objects -q \"$Q/pack/pack\"")
            .env("A", &packed[0])
            .env("B", &packed[1])
            .env("Q", &q.dir)
            .env("GIT_OBJECT_DIRECTORY", &q.dir)
            .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", common.join("objects"))
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        for o in &packed {
            std::fs::remove_file(q.dir.join(&o[..2]).join(&o[2..])).unwrap();
        }
        let dir = q.dir.clone();
        let m = q.migrate();
        assert!(m.failed.is_empty(), "{m:?}");
        assert_eq!(m.rejected.len(), 1, "{m:?}");
        assert_eq!(m.rejected[0].0, forged);
        assert_eq!(m.moved, 3, "{m:?}");
        assert!(!dir.exists());
        for o in [&good, &other, &packed[0], &packed[1]] {
            git(&repo, &["cat-file", "-e", o]);
        }
        let missing = Command::new("git")
            .args(["cat-file", "-e", &forged])
            .current_dir(&repo)
            .status()
            .unwrap();
        assert!(!missing.success());
    }

    /// What the command may leave in its quarantine besides objects: a fan-out directory
    /// that is a symlink (to the store itself, to anything), a FIFO under an object's name.
    #[test]
    fn symlinks_and_special_files_in_the_quarantine_are_rejected_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        let common = repo.join(".git");
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("pack")).unwrap();
        let q = Quarantine::create(&common, false).unwrap();
        std::os::unix::fs::symlink(&elsewhere, q.dir.join("ab")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("pack"), q.dir.join("pack")).unwrap();
        std::fs::create_dir(q.dir.join("cd")).unwrap();
        let fifo = std::ffi::CString::new(
            q.dir
                .join("cd")
                .join("0".repeat(38))
                .as_os_str()
                .as_encoded_bytes(),
        )
        .unwrap();
        // Safety: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let m = q.migrate();
        assert!(m.failed.is_empty(), "{m:?}");
        assert_eq!(m.moved, 0, "{m:?}");
        let rejected: Vec<&str> = m.rejected.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(rejected.len(), 3, "{m:?}");
        assert!(
            rejected.contains(&"ab") && rejected.contains(&"pack"),
            "{m:?}"
        );
        assert!(elsewhere.join("pack").is_dir());
    }

    #[test]
    fn a_killed_runs_quarantine_is_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        let common = repo.join(".git");
        let q = Quarantine::create(&common, false).unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg("echo left | git hash-object -w --stdin")
            .env("GIT_OBJECT_DIRECTORY", &q.dir)
            .current_dir(&repo)
            .output()
            .unwrap();
        let oid = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let dir = q.dir.clone();
        // The run's supervisor dies: its descriptor, and so its lock, goes.
        drop(q);
        let m = sweep(&common, false);
        assert_eq!(m.moved, 1, "{m:?}");
        assert!(!dir.exists());
        git(&repo, &["cat-file", "-e", &oid]);
    }
}
