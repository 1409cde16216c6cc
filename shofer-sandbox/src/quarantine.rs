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
//! - before the run, [`Quarantine::take`] takes the worktree's quarantine,
//!   `<common>/shofer-objects-<hex of the worktree's name>.<random>` — an idle one an earlier
//!   run left (settled first), or a new one — with `info/alternates` naming its own path, and
//!   locks it (`flock`);
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
//! - a quarantine whose run was killed is locked by nobody: the worktree's next run, a
//!   Landlock run on the repository or `shofer-sandbox --repair WT` ([`sweep`]) migrates it;
//! - quarantines stay, emptied but for their fan-out directories and the objects the store
//!   already had that the command wrote again (git cannot freshen an object in the read-only
//!   store), which the worktree's next runs find there.
//!
//! While the run lasts, a thread of the supervisor ([`Copier`]) copies each new loose object of
//! up to [`LIVE_MAX`] bytes into the store every [`LIVE_PERIOD`]: a copy, from bytes the
//! supervisor read and verified itself, never the command's file (a rename would let a
//! command that holds a descriptor on it change the object in the store afterwards). So the
//! host's git (an editor polling `git status`, `git log`) sees the command's commits within
//! that period; larger objects and packs reach the store when the run ends.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::objects::{hex, loose_object_id, loose_object_id_of, loose_object_size};
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The prefix of a quarantine's name in the common dir.
const PREFIX: &str = "shofer-objects-";
/// Largest loose object copied into the store while the run lasts (bytes, compressed).
pub const LIVE_MAX: u64 = 4 << 20;
/// Largest object (bytes, as its header declares them) copied while the run lasts.
pub const LIVE_INFLATED_MAX: u64 = 64 << 20;
/// How often the [`Copier`] looks for new loose objects.
pub const LIVE_PERIOD: std::time::Duration = std::time::Duration::from_millis(200);

/// One run's quarantine, locked while the run lasts.
#[derive(Debug)]
pub struct Quarantine {
    /// The repository's object store (`<common>/objects`).
    pub objects: PathBuf,
    /// The quarantine (`<common>/shofer-objects-<hex name>.<random>`): the command's
    /// `objects/`.
    pub dir: PathBuf,
    sha256: bool,
    /// The quarantine's descriptor, holding its `flock`.
    _lock: OwnedFd,
    /// The filesystem's time when this run took it (the ctime of its clean mark, touched
    /// then): a fan-out directory with an older ctime has not changed since.
    taken: Stamp,
}

/// A ctime as (seconds, nanoseconds).
type Stamp = (i64, i64);

/// The ctime of the directory at `path` itself (`None` for anything else, a symlink too).
fn lctime_dir(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    m.is_dir().then(|| (m.ctime(), m.ctime_nsec()))
}

/// The clean mark of the quarantine `dir`: `<dir>.mark` beside it in the common dir, an empty
/// file touched after each emptying, so that its ctime is the filesystem's time of the last
/// emptying. Every fan-out directory changed since has a newer ctime (no system call sets a
/// ctime back), so the next take reads only those. The namespace backends bind every entry of
/// the common dir read-only, so a command cannot touch a mark that existed when it started;
/// without a mark every directory is read.
fn mark_file(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".mark");
    dir.with_file_name(name)
}

/// The ctime of the clean mark of `dir`, if it is a regular file.
fn read_mark(dir: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(mark_file(dir)).ok()?;
    m.is_file().then(|| (m.ctime(), m.ctime_nsec()))
}

/// Marks the quarantine `dir` clean now (touches its mark, made if absent) and returns the
/// mark's new ctime.
fn write_mark(dir: &Path, objects: &Path) -> io::Result<Stamp> {
    let file = mark_file(dir);
    if read_mark(dir).is_none() {
        remove_entry(&file)?;
        std::fs::write(&file, b"")?;
        own_like(&file, objects)?;
    }
    let c = std::ffi::CString::new(file.as_os_str().as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // Safety: a NUL-terminated path; NULL times set both to now (and the ctime with them).
    if unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            std::ptr::null(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    read_mark(dir).ok_or_else(|| io::Error::other("the mark vanished"))
}

/// The thread that copies new loose objects into the store while the run lasts.
#[derive(Debug)]
pub struct Copier {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Copier {
    /// Stops the thread and waits for it (before [`Quarantine::migrate`]).
    pub fn stop(self) {
        self.done.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

/// One pass of the [`Copier`]: each loose object of the quarantine not yet looked at (`seen`)
/// and not in the store is copied in if it verifies. One look per object: what fails here
/// (written slowly, too big, forged) is dealt with at the end. A fan-out directory is read
/// only when its ctime is at least `taken` and differs from the one it had when last read
/// (`listed`).
fn copy_new(
    dir: &Path,
    objects: &Path,
    sha256: bool,
    taken: Stamp,
    listed: &mut HashMap<String, Stamp>,
    seen: &mut HashSet<String>,
) {
    let hexlen = if sha256 { 64 } else { 40 };
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for fan in rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.len() == 2 && is_hex(n))
    {
        let Some(ctime) = lctime_dir(&dir.join(&fan)) else {
            continue;
        };
        if ctime < taken || listed.get(&fan) == Some(&ctime) {
            continue;
        }
        let Some((_fd, from)) = subdir(dir, &fan) else {
            continue;
        };
        let Ok(rd) = std::fs::read_dir(&from) else {
            continue;
        };
        listed.insert(fan.clone(), ctime);
        for name in rd
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.len() == hexlen - 2 && is_hex(n))
        {
            if !seen.insert(format!("{fan}{name}"))
                || std::fs::symlink_metadata(objects.join(&fan).join(&name)).is_ok()
            {
                continue;
            }
            let _ = copy_one(&from.join(&name), objects, &fan, &name, sha256);
        }
    }
}

/// Copies the loose object `src` (named `fan` + `name`) into the store if it is at most
/// [`LIVE_MAX`] bytes and its content hashes to its name: the bytes read once, verified, and
/// written to a new file of the supervisor's, renamed into place without replacing anything.
fn copy_one(src: &Path, objects: &Path, fan: &str, name: &str, sha256: bool) -> io::Result<()> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut bytes = Vec::new();
    crate::paths::open_regular(src)?
        .take(LIVE_MAX + 1)
        .read_to_end(&mut bytes)?;
    // A small file may declare a huge object (a zlib bomb): those wait for the end too.
    if bytes.len() as u64 > LIVE_MAX
        || loose_object_size(&bytes[..])? > LIVE_INFLATED_MAX
        || hex(&loose_object_id_of(
            &bytes[..],
            sha256,
            &Cell::new(u64::MAX),
        )?) != format!("{fan}{name}")
    {
        return Ok(());
    }
    let to = fanout_dir(objects, fan)?;
    let tmp = format!("tmp_shofer_obj_{}", crate::gitguard::random_suffix());
    let tmp_path = PathBuf::from(format!("/proc/self/fd/{}/{tmp}", to.as_raw_fd()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp_path)?;
        f.write_all(&bytes)?;
        drop(f);
        own_like(&tmp_path, objects)?;
        rename_between(&to, &tmp, &to, name)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp_path);
    }
    match written {
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other,
    }
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
    /// Takes a quarantine for this run of the worktree `worktree` (its name under
    /// `<common>/worktrees/`, `""` for the main one) in the repository whose common dir is
    /// `common` (`sha256`: its object format): an idle one an earlier run of this worktree
    /// left — what a killed run left in it moved into the store first, what is not an object
    /// the store holds removed, its fan-out directories kept (git would make them again on
    /// every run, and a directory made and removed per run is slow to make again on ext4
    /// without a journal) — else a new one. Returns it with what settling the idle ones did.
    ///
    /// # Errors
    /// mkdir(2) or writing `info/alternates` (the caller cannot write the common dir).
    pub fn take(common: &Path, sha256: bool, worktree: &str) -> io::Result<(Quarantine, Migrated)> {
        let objects = common.join("objects");
        let mut out = Migrated::default();
        let mut mine = None;
        let prefix = owned_prefix(worktree);
        for dir in quarantines(common, &prefix) {
            // Held: its run is still going.
            let Ok(lock) = lock(&dir) else { continue };
            let since = read_mark(&dir);
            let m = settle(&dir, &objects, sha256, since);
            let clean = m.failed.is_empty();
            out.merge(m);
            if clean && mine.is_none() {
                mine = Some((dir, lock));
            } else if clean {
                let _ = write_mark(&dir, &objects);
            }
        }
        let (dir, lock) = match mine {
            Some(m) => m,
            None => {
                let dir = common.join(format!("{prefix}{}", crate::gitguard::random_suffix()));
                std::fs::DirBuilder::new().mode(0o755).create(&dir)?;
                own_like(&dir, &objects)?;
                (dir.clone(), lock(&dir)?)
            }
        };
        write_alternates(&dir, &objects)?;
        // What changes from here on has a newer ctime than the mark.
        let taken = write_mark(&dir, &objects)?;
        let q = Quarantine {
            objects,
            dir,
            sha256,
            _lock: lock,
            taken,
        };
        Ok((q, out))
    }

    /// Starts the [`Copier`] (call when the command starts).
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start_copier(&self) -> io::Result<Copier> {
        let (dir, objects, sha256) = (self.dir.clone(), self.objects.clone(), self.sha256);
        let taken = self.taken;
        let done = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&done);
        let thread = shofer_sys::process::spawn_signals_blocked("shofer-objects", move || {
            let mut seen = HashSet::new();
            let mut listed = HashMap::new();
            loop {
                std::thread::park_timeout(LIVE_PERIOD);
                // Stopped: what is left moves (renamed, not copied) when the run ends.
                if stop.load(Ordering::Acquire) {
                    break;
                }
                copy_new(&dir, &objects, sha256, taken, &mut listed, &mut seen);
            }
        })?;
        Ok(Copier { done, thread })
    }

    /// Moves what the command wrote into the store and empties the quarantine for the next
    /// run (keeping what could not be moved, for a later try). Call once every process of the
    /// sandbox is gone.
    pub fn migrate(self) -> Migrated {
        let mut m = settle(&self.dir, &self.objects, self.sha256, Some(self.taken));
        if m.failed.is_empty() {
            if let Err(e) = write_mark(&self.dir, &self.objects) {
                m.failed
                    .push((self.dir.clone(), format!("marking it clean: {e}")));
            }
        }
        m
    }
}

/// `info/alternates` of the quarantine `dir`: its own path, where the sandbox shows the store.
/// Checked each run (the command may have changed it) and written afresh, under a new name
/// renamed over the old one, when it differs.
fn write_alternates(dir: &Path, objects: &Path) -> io::Result<()> {
    let info = dir.join("info");
    if subdir(dir, "info").is_none() {
        remove_entry(&info)?;
        std::fs::DirBuilder::new().mode(0o755).create(&info)?;
        own_like(&info, objects)?;
    }
    let mut line = dir.as_os_str().as_encoded_bytes().to_vec();
    line.push(b'\n');
    if crate::paths::read_regular(&info.join("alternates"), 4096).is_ok_and(|now| now == line) {
        return Ok(());
    }
    let tmp = info.join(format!("alternates.{}", crate::gitguard::random_suffix()));
    std::fs::write(&tmp, line)?;
    own_like(&tmp, objects)?;
    std::fs::rename(&tmp, info.join("alternates"))
}

/// The name prefix of the quarantines of the worktree `worktree` (its name under
/// `<common>/worktrees/`, or `""` for the main worktree): [`PREFIX`], the name in hex, a dot.
/// A worktree keeps objects it wrote again in its own quarantines only: another worktree's
/// command, which may have changed them, never reads them.
fn owned_prefix(worktree: &str) -> String {
    format!("{PREFIX}{}.", hex(worktree.as_bytes()))
}

/// The quarantines in the common dir `common` whose names start with `prefix` (directories).
fn quarantines(common: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(common) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// Settles the quarantines of killed runs in `common` (unlocked ones): what they hold is
/// moved into the store.
pub fn sweep(common: &Path, sha256: bool) -> Migrated {
    let mut out = Migrated::default();
    let objects = common.join("objects");
    for dir in quarantines(common, PREFIX) {
        let Ok(_lock) = lock(&dir) else { continue };
        let since = read_mark(&dir);
        let m = settle(&dir, &objects, sha256, since);
        if m.failed.is_empty() {
            let _ = write_mark(&dir, &objects);
        }
        out.merge(m);
    }
    out
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Removes `path` whatever it is (a directory with what it holds; a symlink, not its target).
fn remove_entry(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Empties the fan-out directory `fan` of a quarantine (read through `path`) but for regular
/// files named as objects the store holds and not `rejected`: objects the command wrote again
/// although they existed (git cannot refresh the time of an object in the read-only store, so
/// it writes it anew). Kept, they are found and refreshed here by the worktree's next runs
/// instead of being written once more.
fn keep_duplicates(
    path: &Path,
    fan: &str,
    objects: &Path,
    sha256: bool,
    rejected: &[(String, String)],
) -> io::Result<()> {
    let hexlen = if sha256 { 64 } else { 40 };
    for e in std::fs::read_dir(path)?.flatten() {
        let name = e.file_name();
        let keep = name.to_str().is_some_and(|n| {
            n.len() == hexlen - 2
                && is_hex(n)
                && e.file_type().is_ok_and(|t| t.is_file())
                && !rejected.iter().any(|(o, _)| o[2..] == *n && o[..2] == *fan)
                && std::fs::symlink_metadata(objects.join(fan).join(n)).is_ok()
        });
        if !keep {
            remove_entry(&e.path())?;
        }
    }
    Ok(())
}

/// Removes every entry of the directory read through `path` except `keep`.
fn empty_dir(path: &Path, keep: &[&str]) -> io::Result<()> {
    for e in std::fs::read_dir(path)?.flatten() {
        if !keep.iter().any(|k| e.file_name() == *k) {
            remove_entry(&e.path())?;
        }
    }
    Ok(())
}

/// Moves the verified objects and packs of the quarantine `dir` into the store `objects`,
/// then empties it but for its fan-out directories (given back mode 0755), `pack/` and
/// `info/alternates`; a fan-out directory whose object could not be moved is left as it is.
/// `since`: a filesystem time (this run's take, or the clean mark) — a fan-out directory whose
/// ctime is older has not changed since and is not read; `None` reads them all.
fn settle(dir: &Path, objects: &Path, sha256: bool, since: Option<Stamp>) -> Migrated {
    let mut out = Migrated::default();
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        // One lstat for a fan-out directory that has not changed since (a symlink's ctime
        // says nothing about a directory: it is opened below, and refused).
        if let (Some(t), true) = (since, name.len() == 2 && is_hex(&name)) {
            if lctime_dir(&path).is_some_and(|c| c < t) {
                continue;
            }
        }
        let sub = subdir(dir, &name);
        let cleared = match (name.as_str(), sub) {
            (fan, Some((fd, from))) if fan.len() == 2 && is_hex(fan) => {
                let before = out.failed.len();
                migrate_fanout(dir, fan, &fd, &from, objects, sha256, &mut out);
                if out.failed.len() > before {
                    continue;
                }
                let _ = set_mode(&from, 0o755);
                keep_duplicates(&from, fan, objects, sha256, &out.rejected)
            }
            ("pack", Some((fd, from))) => {
                let before = out.failed.len();
                migrate_packs(dir, &fd, &from, objects, &mut out);
                if out.failed.len() > before {
                    continue;
                }
                empty_dir(&from, &[])
            }
            ("info", Some((_, from))) => empty_dir(&from, &["alternates"]),
            (other, _) => {
                if other.len() == 2 && is_hex(other) || other == "pack" {
                    out.rejected
                        .push((other.to_string(), "not a directory".into()));
                }
                remove_entry(&path)
            }
        };
        if let Err(e) = cleared {
            out.failed.push((path, format!("cannot be emptied: {e}")));
        }
    }
    out
}

/// Sets the mode of the directory at `path` if it differs (the command may have taken its
/// own quarantine's permissions away).
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    if std::fs::metadata(path)?.permissions().mode() & 0o7777 != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Moves each verified loose object of the fan-out directory `fan` (open as `from_dir`, read
/// through `from`) into the store; what does not verify is rejected.
fn migrate_fanout(
    dir: &Path,
    fan: &str,
    from_dir: &OwnedFd,
    from: &Path,
    objects: &Path,
    sha256: bool,
    out: &mut Migrated,
) {
    let hexlen = if sha256 { 64 } else { 40 };
    let Ok(rd) = std::fs::read_dir(from) else {
        return;
    };
    let mut to_dir: Option<OwnedFd> = None;
    for name in rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.len() == hexlen - 2 && is_hex(n))
    {
        let oid = format!("{fan}{name}");
        if std::fs::symlink_metadata(objects.join(fan).join(&name)).is_ok() {
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
            Some(to) => rename_between(from_dir, &name, to, &name),
            None => fanout_dir(objects, fan).and_then(|to| {
                let r = rename_between(from_dir, &name, &to, &name);
                to_dir = Some(to);
                r
            }),
        };
        match moved {
            Ok(()) => out.moved += 1,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => out.failed.push((dir.join(fan).join(&name), e.to_string())),
        }
    }
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
    crate::paths::rename_noreplace_between(from_dir, from.as_ref(), to_dir, to.as_ref())
}

/// Each `pack/pack-*.pack` of the quarantine, given to `git index-pack --stdin` in the
/// repository (which hashes every object of the pack, compares it with any existing object of
/// the same name, and writes the pack and an index of its own into `objects/pack`); the
/// command's own index is never used.
fn migrate_packs(dir: &Path, from: &OwnedFd, pack_dir: &Path, objects: &Path, out: &mut Migrated) {
    let Ok(rd) = std::fs::read_dir(pack_dir) else {
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
                    from,
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

    /// Writes `content` as a blob with git in `repo`, into `objects` when given (what the
    /// mounts give the command: that directory with the store as an alternate) or the
    /// repository's own store; returns its name.
    fn hash_object(repo: &Path, content: &str, objects: Option<&Path>) -> String {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("echo \"$C\" | git hash-object -w --stdin")
            .env("C", content)
            .current_dir(repo);
        if let Some(dir) = objects {
            cmd.env("GIT_OBJECT_DIRECTORY", dir).env(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                repo.join(".git/objects"),
            );
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The files beneath `dir`, relative, sorted.
    fn files(dir: &Path) -> Vec<String> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    walk(root, &e.path(), out);
                } else {
                    let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                    out.push(rel);
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

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
        let q = Quarantine::take(&common, false, "wt").unwrap().0;
        let alternates = std::fs::read_to_string(q.dir.join("info/alternates")).unwrap();
        assert_eq!(alternates.trim_end(), q.dir.to_str().unwrap());
        // Locked while the run lasts: a sweep leaves it alone.
        assert_eq!(sweep(&common, false).moved, 0);
        assert!(q.dir.is_dir());

        // Objects written by a git whose objects directory is the quarantine, the store its
        // alternate (what the mounts give the command).
        let write = |content: &str| hash_object(&repo, content, Some(&q.dir));
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
        assert_eq!(files(&dir), ["info/alternates"]);
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
        let q = Quarantine::take(&common, false, "wt").unwrap().0;
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

    /// A small file that inflates far past the size its header declares (a zlib bomb) is
    /// refused at the declared size, not inflated to the end.
    #[test]
    fn an_object_inflating_past_its_header_is_rejected() {
        use std::io::Write;
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        let q = Quarantine::take(&repo.join(".git"), false, "wt").unwrap().0;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(b"blob 10\0").unwrap();
        z.write_all(&vec![0u8; 64 << 20]).unwrap();
        let bomb = z.finish().unwrap();
        assert!(bomb.len() < 1 << 20);
        std::fs::create_dir_all(q.dir.join("ab")).unwrap();
        std::fs::write(q.dir.join("ab").join("c".repeat(38)), bomb).unwrap();
        let m = q.migrate();
        assert_eq!(m.rejected.len(), 1, "{m:?}");
        assert!(
            m.rejected[0]
                .1
                .contains("past the size its header declares"),
            "{m:?}"
        );
    }

    /// An object the store already has, written again by the command (git cannot refresh the
    /// store's copy), stays in the worktree's quarantine for its next runs; junk does not, and
    /// another worktree takes a quarantine of its own.
    #[test]
    fn objects_written_again_stay_for_the_worktree_and_junk_goes() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        let old = hash_object(&repo, "old", None);
        let common = repo.join(".git");
        let q = Quarantine::take(&common, false, "wt").unwrap().0;
        // Written again without the alternate: what git does when it cannot freshen.
        let again = Command::new("sh")
            .arg("-c")
            .arg("echo old | git hash-object -w --stdin")
            .env("GIT_OBJECT_DIRECTORY", &q.dir)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(again.status.success());
        std::fs::write(q.dir.join(&old[..2]).join("tmp_obj_junk"), b"x").unwrap();
        let dir = q.dir.clone();
        let m = q.migrate();
        assert!(m.failed.is_empty() && m.rejected.is_empty(), "{m:?}");
        assert_eq!(
            files(&dir),
            [
                format!("{}/{}", &old[..2], &old[2..]),
                "info/alternates".into()
            ]
        );
        let (mine, _) = Quarantine::take(&common, false, "wt").unwrap();
        let (other, _) = Quarantine::take(&common, false, "wt-2").unwrap();
        assert_eq!(mine.dir, dir);
        assert_ne!(other.dir, dir);
    }

    /// While the run lasts, a verified object is copied into the store (a file of its own:
    /// a later write to the quarantined one changes nothing there); a forged one is not.
    #[test]
    fn the_copier_copies_verified_objects_while_the_run_lasts() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        let common = repo.join(".git");
        let q = Quarantine::take(&common, false, "wt").unwrap().0;
        let copier = q.start_copier().unwrap();
        let write = |content: &str| hash_object(&repo, content, Some(&q.dir));
        let good = write("copied while running");
        let forged = write("forged while running");
        let other = write("something else");
        let at = |root: &Path, o: &str| root.join(&o[..2]).join(&o[2..]);
        std::fs::remove_file(at(&q.dir, &forged)).unwrap();
        std::fs::copy(at(&q.dir, &other), at(&q.dir, &forged)).unwrap();
        let store = common.join("objects");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !at(&store, &good).exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        copier.stop();
        assert!(at(&store, &good).exists(), "not copied within 10 s");
        assert!(!at(&store, &forged).exists());
        // Its own inode: writing the quarantined file does not reach the store.
        let before = std::fs::read(at(&store, &good)).unwrap();
        let mut perm = std::fs::metadata(at(&q.dir, &good)).unwrap().permissions();
        perm.set_mode(0o644);
        std::fs::set_permissions(at(&q.dir, &good), perm).unwrap();
        std::fs::write(at(&q.dir, &good), b"changed later").unwrap();
        assert_eq!(std::fs::read(at(&store, &good)).unwrap(), before);
        let m = q.migrate();
        assert!(m.failed.is_empty(), "{m:?}");
        assert_eq!(m.rejected.len(), 1, "{m:?}");
        git(&repo, &["cat-file", "-e", &good]);
    }

    #[test]
    fn a_killed_runs_quarantine_is_settled_by_the_next_take() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        let common = repo.join(".git");
        let write = |q: &Quarantine, content: &str| hash_object(&repo, content, Some(&q.dir));
        // A first run ends normally: the quarantine is emptied and marked clean.
        let q = Quarantine::take(&common, false, "wt").unwrap().0;
        let first = write(&q, "first");
        let dir = q.dir.clone();
        let m = q.migrate();
        assert_eq!(
            (m.moved, files(&dir)),
            (1, vec!["info/alternates".to_string()])
        );
        assert!(read_mark(&dir).is_some());
        // A second run takes it again, writes, and its supervisor dies: its descriptor, and
        // so its lock, goes; the mark stays as the first run left it.
        let (q, settled) = Quarantine::take(&common, false, "wt").unwrap();
        assert_eq!((q.dir.clone(), settled.moved), (dir.clone(), 0));
        let oid = write(&q, "left by a killed run");
        drop(q);
        // The next take reads the directory changed since the mark and moves the object.
        let (again, settled) = Quarantine::take(&common, false, "wt").unwrap();
        assert_eq!(
            (again.dir.clone(), settled.moved),
            (dir.clone(), 1),
            "{settled:?}"
        );
        assert!(dir.join(&first[..2]).is_dir());
        assert_eq!(files(&dir), ["info/alternates"]);
        git(&repo, &["cat-file", "-e", &oid]);
    }
}
