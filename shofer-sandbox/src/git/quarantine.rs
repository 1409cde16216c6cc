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
//! - before the run, [`Quarantine::take`] takes the worktree's quarantine in a directory of
//!   the supervisor's own that no sandboxed command can write
//!   ([`crate::git::guard::state_dir`], `~/.local/state/shofer/objects/`; without one, no
//!   quarantine, and the exit check of [`crate::git::objects`] instead): an entry
//!   `<hash of the store's path>-<hash of the worktree's name>.<random>` holding the
//!   quarantine `q/` and the store's path (`store`) — an idle entry an earlier run of this
//!   worktree left (settled first), or a new one — and locks it (`flock`). `q/` is made anew
//!   for each run (a descriptor on an earlier run's quarantine, which a second sandbox may
//!   hold, leads nowhere a later run looks); `q/info/alternates` names `info/store`, relative
//!   to the quarantine, an empty directory;
//! - in the sandbox the quarantine is bound read-write over `<common>/objects`, and the real
//!   store read-only over its `info/store` (`crate::namespaces`, `crate::bwrap`): git writes
//!   new objects where it always does, and finds the existing ones through the alternate,
//!   read-only (a deletion or rewrite fails with `EROFS`, a rename with `EBUSY`);
//! - when the run has ended, [`Quarantine::migrate`] copies each new loose object whose
//!   content hashes to its name, with git's header and content git can parse, into the store:
//!   a new file of the supervisor's, written as the object is read and hashed, renamed into
//!   place (`RENAME_NOREPLACE`: an existing object is never replaced) — never the command's
//!   file, on which a descriptor may outlive the run in another sandbox (two sandboxes can
//!   pass descriptors over a unix socket); each new pack is handed to `git index-pack --stdin
//!   --fsck-objects`, which hashes and checks every object and writes the pack with an index
//!   of its own into the store (the command's index could name objects the pack does not
//!   hold); what does not verify is named and dropped;
//! - a quarantine whose run was killed is locked by nobody: the worktree's next run, a
//!   Landlock run on the repository or `shofer-sandbox --repair WT` ([`sweep`]) migrates it;
//! - a settled quarantine is removed (renamed into the entry's `trash/` first, so that
//!   nothing the command left in it can keep it); the entry stays for the worktree's next run.
//!   One whose repository is gone is removed by the next take.
//!
//! Nothing the command wrote is read by a later run, and no other worktree or repository ever
//! uses a quarantine.
//!
//! While the run lasts, a thread of the supervisor ([`Copier`]) copies each new loose object of
//! up to [`LIVE_MAX`] bytes into the store at least every [`LIVE_PERIOD`]: a copy, from bytes the
//! supervisor read and verified itself, never the command's file (a rename would let a
//! command that holds a descriptor on it change the object in the store afterwards). So the
//! host's git (an editor polling `git status`, `git log`) sees the command's commits within
//! that period; larger objects and packs reach the store when the run ends.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::git::objects::{hex, loose_object_id_of, loose_object_size, OverBudget, HASH_BUDGET};
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The name of the supervisor's state directory of quarantines ([`crate::git::guard::state_dir`]).
const LEAF: &str = "objects";
/// The relative alternate of every quarantine: the directory the sandbox binds the store on.
const STORE_MOUNT: &str = "info/store";
/// Largest loose object copied into the store while the run lasts (bytes, compressed).
pub const LIVE_MAX: u64 = 4 << 20;
/// Largest object (bytes, as its header declares them) copied while the run lasts.
pub const LIVE_INFLATED_MAX: u64 = 64 << 20;
/// The address space `git index-pack` may use on a command's pack (bytes): what git needs for
/// the largest object with its delta base, and a bound on a delta bomb.
pub const INDEX_PACK_MEMORY: u64 = 8 << 30;
/// The CPU time `git index-pack` may spend on the packs of one migration (a run's end, a
/// start, a sweep: of all the quarantines it settles together; seconds), plus one second per
/// MiB of them ([`INDEX_PACK_CPU_PER_MIB`]): a delta bomb within the memory bound still takes
/// time in proportion to what its deltas declare, a real fetch in proportion to its size.
pub const INDEX_PACK_CPU_SECONDS: u64 = 300;
/// The CPU seconds `git index-pack` may spend per MiB of a run's packs, beyond
/// [`INDEX_PACK_CPU_SECONDS`].
pub const INDEX_PACK_CPU_PER_MIB: u64 = 1;
/// `git index-pack`'s fsck option, with the messages about what an author, committer or
/// tagger line holds turned into warnings (git's Documentation/fsck-msgids.txt).
const IDENTITIES_WARN: &str = "--fsck-objects=badDate=warn,badDateOverflow=warn,badEmail=warn,\
badName=warn,badTimezone=warn,missingEmail=warn,missingNameBeforeEmail=warn,\
missingSpaceBeforeDate=warn,missingSpaceBeforeEmail=warn,zeroPaddedDate=warn,\
multipleAuthors=warn";

/// How often the [`Copier`] looks for new loose objects: every [`LIVE_PERIOD_BUSY`] while
/// it finds some, the wait doubling up to this while it finds none.
pub const LIVE_PERIOD: std::time::Duration = std::time::Duration::from_millis(200);
/// The [`Copier`]'s wait after a look that found new objects (a commit loop's objects then
/// reach the store while it runs, on another core, not at the exit).
pub const LIVE_PERIOD_BUSY: std::time::Duration = std::time::Duration::from_millis(20);

/// One run's quarantine, locked while the run lasts.
#[derive(Debug)]
pub struct Quarantine {
    /// The repository's object store (`<common>/objects`).
    pub objects: PathBuf,
    /// The quarantine (`<state>/objects/<entry>/q`): the command's `objects/`.
    pub dir: PathBuf,
    /// Where the store is bound in the sandbox (`<dir>/info/store`).
    pub store_mount: PathBuf,
    /// The entry that holds it (`<state>/objects/<entry>`).
    entry: PathBuf,
    /// The store's object format is SHA-256 (else SHA-1).
    pub sha256: bool,
    /// The entry's descriptor, holding its `flock`.
    _lock: OwnedFd,
}

/// A ctime as (seconds, nanoseconds).
type Stamp = (i64, i64);

/// The ctime of the directory at `path` itself (`None` for anything else, a symlink too).
fn lctime_dir(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    m.is_dir().then(|| (m.ctime(), m.ctime_nsec()))
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
/// again only when its ctime differs from the one it had when last read (`listed`). Whether
/// it found a new object.
fn copy_new(
    dir: &Path,
    objects: &Path,
    sha256: bool,
    listed: &mut HashMap<String, Stamp>,
    seen: &mut HashSet<String>,
) -> bool {
    let hexlen = if sha256 { 64 } else { 40 };
    let Ok(rd) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut found = false;
    for fan in rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.len() == 2 && is_hex(n))
    {
        let Some(ctime) = lctime_dir(&dir.join(&fan)) else {
            continue;
        };
        if listed.get(&fan) == Some(&ctime) {
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
            found = true;
            let _ = copy_one(&from.join(&name), objects, &fan, &name, sha256);
        }
    }
    found
}

/// Copies the loose object `src` (named `fan` + `name`) into the store if it is at most
/// [`LIVE_MAX`] bytes and its content hashes to its name: the bytes read once, verified, and
/// written to a new file of the supervisor's, renamed into place without replacing anything.
fn copy_one(src: &Path, objects: &Path, fan: &str, name: &str, sha256: bool) -> io::Result<()> {
    use std::io::{Read, Write};
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
    write_new(&to, name, "obj", |f| {
        f.write_all(&bytes)?;
        own_like_file(f, objects)?;
        Ok(Ok(()))
    })
    .map(|_| ())
}

/// Makes `name` in the pinned directory `dir` a new file of the supervisor's: written under a
/// fresh unpredictable name (`tmp_shofer_<what>_<random>`, mode 0444, `O_EXCL | O_NOFOLLOW`,
/// through the descriptor's `/proc/self/fd` path) by `fill`, then renamed to `name` with
/// `RENAME_NOREPLACE` if `fill` accepts what it wrote. The temporary name never stays.
/// `Ok(Ok(true))`: placed; `Ok(Ok(false))`: `name` was there already (never replaced);
/// `Ok(Err(why))`: `fill` refused it.
///
/// # Errors
/// Creating, writing or renaming in `dir`, and `fill`'s own.
fn write_new(
    dir: &OwnedFd,
    name: &str,
    what: &str,
    fill: impl FnOnce(&mut std::fs::File) -> io::Result<Result<(), String>>,
) -> io::Result<Result<bool, String>> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = format!(
        "tmp_shofer_{what}_{}",
        shofer_sys::statedir::random_suffix()
    );
    let tmp_path = PathBuf::from(format!("/proc/self/fd/{}/{tmp}", dir.as_raw_fd()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp_path)?;
    let filled = fill(&mut file);
    drop(file);
    let placed = match filled {
        Ok(Ok(())) => match rename_between(dir, &tmp, dir, name) {
            Ok(()) => return Ok(Ok(true)),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(Ok(false)),
            Err(e) => Err(e),
        },
        Ok(Err(why)) => Ok(Err(why)),
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_file(&tmp_path);
    placed
}

/// What one migration may spend: the bytes it inflates to verify loose objects, and the CPU
/// time `git index-pack` may take beyond one second per MiB of packs.
struct Budget {
    inflate: Cell<u64>,
    index_pack: Cell<std::time::Duration>,
}

impl Budget {
    /// A whole budget: [`HASH_BUDGET`] bytes, [`INDEX_PACK_CPU_SECONDS`].
    fn new() -> Budget {
        Budget::inflating(HASH_BUDGET)
    }

    /// `bytes` to inflate, [`INDEX_PACK_CPU_SECONDS`].
    fn inflating(bytes: u64) -> Budget {
        Budget {
            inflate: Cell::new(bytes),
            index_pack: Cell::new(std::time::Duration::from_secs(INDEX_PACK_CPU_SECONDS)),
        }
    }
}

/// What a migration did.
#[derive(Debug, Default)]
pub struct Migrated {
    /// Objects and packs moved into the store.
    pub moved: usize,
    /// (object or pack, why) not moved because they did not verify; dropped. The first
    /// [`MAX_REJECTED_NAMED`]; the rest are counted in `rejected_more`.
    pub rejected: Vec<(String, String)>,
    /// How many more were rejected than `rejected` names.
    pub rejected_more: usize,
    /// (path, error) that could not be moved: the quarantine is kept for a later try.
    pub failed: Vec<(PathBuf, String)>,
    /// Quarantines of the repository a sweep left alone because a supervisor holds them: a
    /// running sandbox's, or one still exiting (its PID 1 lets go of the lock a moment after
    /// the supervisor was killed).
    pub busy: usize,
}

/// Most rejected objects a [`Migrated`] names (a command can write any number of them: the
/// rest are counted, not named on stderr or in the report).
pub const MAX_REJECTED_NAMED: usize = 20;

impl Migrated {
    fn merge(&mut self, other: Migrated) {
        self.moved += other.moved;
        self.rejected_more += other.rejected_more;
        for (what, why) in other.rejected {
            self.reject(what, why);
        }
        self.failed.extend(other.failed);
        self.busy += other.busy;
    }

    /// Records that `what` was not moved, for `why`.
    fn reject(&mut self, what: String, why: String) {
        if self.rejected.len() < MAX_REJECTED_NAMED {
            self.rejected.push((what, why));
        } else {
            self.rejected_more += 1;
        }
    }
}

/// Opens `dir` and takes its `flock` without waiting.
///
/// # Errors
/// open(2); `WouldBlock` when a running supervisor holds it.
pub(super) fn lock(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)?
        .into();
    // A few tries: a child forked a moment ago (by another thread) holds a copy of a lock
    // descriptor until its exec closes it.
    for _ in 0..5 {
        match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(fd),
            Err(rustix::io::Errno::WOULDBLOCK) => {}
            Err(e) => return Err(e.into()),
        }
        std::thread::sleep(std::time::Duration::from_millis(4));
    }
    Err(io::Error::from(io::ErrorKind::WouldBlock))
}

impl Quarantine {
    /// Takes a quarantine for this run of the worktree `worktree` (its name under
    /// `<common>/worktrees/`, `""` for the main one) in the repository whose common dir is
    /// `common` (`sha256`: its object format), in the supervisor's state directory outside
    /// `writable`: an idle one an earlier run of this worktree left — what a killed run left in
    /// it moved into the store first, everything else removed, its fan-out directories kept —
    /// else a new one. Returns it with what settling the idle ones did.
    ///
    /// # Errors
    /// No state directory outside `writable`; mkdir(2) or writing in it.
    pub fn take(
        common: &Path,
        sha256: bool,
        worktree: &str,
        writable: &shofer_sys::statedir::Writable,
    ) -> io::Result<(Quarantine, Migrated)> {
        let root = crate::git::guard::state_dir(LEAF, writable).ok_or_else(|| {
            io::Error::other(
                "no directory of the supervisor's own outside the writable set ($XDG_STATE_HOME or ~/.local/state)",
            )
        })?;
        Self::take_in(&root, common, sha256, worktree)
    }

    /// [`Quarantine::take`] in the state directory `root`.
    fn take_in(
        root: &Path,
        common: &Path,
        sha256: bool,
        worktree: &str,
    ) -> io::Result<(Quarantine, Migrated)> {
        let objects = common.join("objects");
        forget_gone(root);
        let mut out = Migrated::default();
        let mut mine = None;
        let prefix = owned_prefix(&objects, worktree);
        let budget = Budget::new();
        for entry in entries(root, &prefix) {
            let Some((lock, m)) = settle_idle(&entry, &objects, sha256, &budget) else {
                continue;
            };
            let clean = m.failed.is_empty();
            out.merge(m);
            if clean && mine.is_none() {
                mine = Some((entry, lock));
            }
        }
        let (entry, lock) = match mine {
            Some(m) => m,
            None => {
                let entry = root.join(format!("{prefix}{}", shofer_sys::statedir::random_suffix()));
                std::fs::DirBuilder::new().mode(0o700).create(&entry)?;
                let lock = lock(&entry)?;
                std::fs::write(entry.join("store"), objects.as_os_str().as_bytes())?;
                (entry, lock)
            }
        };
        // A new directory each run: a descriptor on an earlier run's quarantine (passed to
        // another sandbox) leads to a directory no later run uses.
        let dir = entry.join("q");
        discard(&entry, &dir)?;
        make_quarantine(&dir, &objects)?;
        let q = Quarantine {
            objects,
            store_mount: dir.join(STORE_MOUNT),
            dir,
            entry,
            sha256,
            _lock: lock,
        };
        Ok((q, out))
    }

    /// Starts the [`Copier`] (call when the command starts); after each pass it spends
    /// [`TRASH_SLICE`] emptying the entry's trash (what earlier runs left there), off the exit
    /// path.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start_copier(&self) -> io::Result<Copier> {
        let (dir, objects, sha256) = (self.dir.clone(), self.objects.clone(), self.sha256);
        let entry = self.entry.clone();
        let done = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&done);
        let thread = shofer_sys::process::spawn_signals_blocked("shofer-objects", move || {
            let mut seen = HashSet::new();
            let mut listed = HashMap::new();
            let mut wait = LIVE_PERIOD_BUSY;
            loop {
                std::thread::park_timeout(wait);
                // Stopped: what is left moves when the run ends.
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let began = std::time::Instant::now();
                let found = copy_new(&dir, &objects, sha256, &mut listed, &mut seen);
                // A pass that took long (a command can fill a fan-out directory with junk
                // names) waits nine times as long: the copier takes at most a tenth of a core.
                let floor = began.elapsed() * 9;
                wait = if found {
                    LIVE_PERIOD_BUSY
                } else {
                    (wait * 2).min(LIVE_PERIOD)
                }
                .max(floor);
                // Earlier runs' trash, a slice at a time: it never holds up a copy.
                let until = std::time::Instant::now() + TRASH_SLICE;
                empty_trash(&entry, &|| {
                    stop.load(Ordering::Acquire) || std::time::Instant::now() >= until
                });
            }
        })?;
        Ok(Copier { done, thread })
    }

    /// Moves what the command wrote into the store and removes the quarantine (kept if
    /// something could not be moved, for a later try). Call once every process of the
    /// sandbox is gone.
    pub fn migrate(self) -> Migrated {
        settle(&self.entry, &self.objects, self.sha256, &Budget::new())
    }
}

/// Makes the quarantine `dir` (absent): the directory, `info/alternates` naming
/// [`STORE_MOUNT`] (relative to the quarantine, as git reads it) and that directory, empty.
fn make_quarantine(dir: &Path, objects: &Path) -> io::Result<()> {
    let info = dir.join("info");
    for d in [dir, &info] {
        std::fs::DirBuilder::new().mode(0o755).create(d)?;
        own_like(d, objects)?;
    }
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(dir.join(STORE_MOUNT))?;
    let alternates = info.join("alternates");
    std::fs::write(&alternates, format!("{STORE_MOUNT}\n"))?;
    own_like(&alternates, objects)
}

/// The first `n` hex digits of the SHA-256 of `bytes`.
fn digest_hex(bytes: &[u8], n: usize) -> String {
    use sha2::Digest;
    let mut h = hex(&sha2::Sha256::digest(bytes));
    h.truncate(n);
    h
}

/// The name prefix of the quarantines of the store `objects`: a hash of its path, a dash.
fn repo_prefix(objects: &Path) -> String {
    format!("{}-", digest_hex(objects.as_os_str().as_bytes(), 24))
}

/// The name prefix of the quarantines of the worktree `worktree` (its name under
/// `<common>/worktrees/`, or `""` for the main worktree) of the store `objects`: the
/// repository's prefix, a hash of the name, a dot.
pub(super) fn owned_prefix(objects: &Path, worktree: &str) -> String {
    format!(
        "{}{}.",
        repo_prefix(objects),
        digest_hex(worktree.as_bytes(), 16)
    )
}

/// The store the quarantine entry `entry` belongs to, as its `store` file names it.
fn store_of(entry: &Path) -> Option<PathBuf> {
    let bytes = crate::paths::read_regular(&entry.join("store"), 4096).ok()?;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
}

/// The entries of the state directory `root` whose names start with `prefix` (directories).
fn entries(root: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_name().as_bytes().starts_with(prefix.as_bytes()))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// How old an entry without a `store` file must be before [`forget_gone`] removes it: a run
/// that makes an entry names its store right after.
const UNNAMED_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether `entry` names no store (a supervisor killed between making it and writing
/// `store`), holds no quarantine and is older than [`UNNAMED_AGE`]: nothing could be moved
/// out of it, and without its store no later run could tell when its repository is gone.
fn unnamed(entry: &Path) -> bool {
    let no = |name: &str| {
        std::fs::symlink_metadata(entry.join(name))
            .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
    };
    let old = std::fs::symlink_metadata(entry)
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age >= UNNAMED_AGE);
    no("store") && no("q") && old
}

/// Removes the idle entries of `root` whose repository is gone (its common dir no longer
/// exists), or which never named one ([`unnamed`]): nothing could ever be moved out of them.
fn forget_gone(root: &Path) {
    for entry in entries(root, "") {
        let gone = match store_of(&entry) {
            Some(objects) => objects.parent().is_some_and(|common| {
                std::fs::symlink_metadata(common)
                    .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
            }),
            None => unnamed(&entry),
        };
        if !gone {
            continue;
        }
        if let Ok(_held) = lock(&entry) {
            // A killed run's quarantine can hold any tree: taken apart without recursion.
            if discard(&entry, &entry.join("q")).is_err() {
                continue;
            }
            empty_trash_briefly(&entry);
            if std::fs::remove_dir(entry.join("trash"))
                .is_err_and(|e| e.kind() != io::ErrorKind::NotFound)
            {
                continue;
            }
            for name in ["store", "mark"] {
                let _ = std::fs::remove_file(entry.join(name));
            }
            let _ = std::fs::remove_dir(&entry);
        }
    }
}

/// The existing state directories of quarantines that pass the check their creation makes,
/// against `writable` ([`crate::git::guard::checked_state_dirs`]).
fn roots(writable: &shofer_sys::statedir::Writable) -> Vec<PathBuf> {
    crate::git::guard::checked_state_dirs(LEAF, writable)
        .into_iter()
        .map(|d| d.path)
        .collect()
}

/// Locks the entry `entry` of the store `objects` and settles its quarantine. `None` when a
/// running supervisor holds it, or it belongs to another store.
fn settle_idle(
    entry: &Path,
    objects: &Path,
    sha256: bool,
    budget: &Budget,
) -> Option<(OwnedFd, Migrated)> {
    let held = lock(entry).ok()?;
    if store_of(entry).as_deref() != Some(objects) {
        return None;
    }
    let m = settle(entry, objects, sha256, budget);
    Some((held, m))
}

/// Settles the quarantines of killed runs on the repository whose common dir is `common`
/// (unlocked ones): what they hold is moved into the store. Only state directories outside
/// `writable` (the paths a sandboxed command may write) are read.
pub fn sweep(common: &Path, sha256: bool, writable: &shofer_sys::statedir::Writable) -> Migrated {
    sweep_in(&roots(writable), common, sha256)
}

/// [`sweep`] in the state directories `roots`.
fn sweep_in(roots: &[PathBuf], common: &Path, sha256: bool) -> Migrated {
    let mut out = Migrated::default();
    let objects = common.join("objects");
    let prefix = repo_prefix(&objects);
    let budget = Budget::new();
    for root in roots {
        for entry in entries(root, &prefix) {
            let Some((_lock, m)) = settle_idle(&entry, &objects, sha256, &budget) else {
                out.busy += usize::from(store_of(&entry).as_deref() == Some(objects.as_path()));
                continue;
            };
            empty_trash_briefly(&entry);
            out.merge(m);
        }
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

/// Moves the verified objects and packs of the quarantine of `entry` into the store
/// `objects`, then removes the quarantine ([`discard`]: one rename out of it first, so that
/// nothing the command left there can keep it from going). If something could not be moved,
/// the quarantine stays as it is, for a later try. Everything is read through descriptors
/// opened without following symlinks. Loose objects are inflated, and packs indexed, within
/// `budget` (shared by the settles of one exit, take or sweep): loose objects it cannot cover
/// stay for the next one, so that no exit or start waits on zlib bombs for longer than
/// [`HASH_BUDGET`] bytes take, nor on delta bombs for longer than the packs' CPU time.
fn settle(entry: &Path, objects: &Path, sha256: bool, budget: &Budget) -> Migrated {
    let mut out = Migrated::default();
    let shown = entry.join("q");
    let Some((_q, dir)) = subdir(entry, "q") else {
        // Nothing to settle (made by the take); anything else there is removed.
        if let Err(e) = discard(entry, &shown) {
            out.failed.push((shown, format!("cannot be removed: {e}")));
        }
        return out;
    };
    // The command may have taken its own quarantine's permissions away.
    let _ = set_mode(&dir, 0o755);
    // Names are bytes: one that is not UTF-8 is junk, removed with the quarantine.
    let listed: io::Result<Vec<std::ffi::OsString>> =
        std::fs::read_dir(&dir).and_then(|rd| rd.map(|e| e.map(|e| e.file_name())).collect());
    let mut names = match listed {
        Ok(names) => names,
        Err(e) => {
            out.failed.push((shown, format!("cannot be listed: {e}")));
            return out;
        }
    };
    // Sorted: the fan-out directories before `pack/`, whose objects may refer to theirs.
    names.sort();
    let mut waiting = 0;
    let mut linked = HashMap::new();
    for raw in names {
        let name = raw.to_str().unwrap_or("");
        let fanout = name.len() == 2 && is_hex(name);
        if !fanout && name != "pack" {
            continue;
        }
        match subdir(&dir, name) {
            Some((_fd, from)) if fanout => {
                let _ = set_mode(&from, 0o755);
                let to = Budgeted {
                    budget: &budget.inflate,
                    waiting: &mut waiting,
                    linked: &mut linked,
                };
                migrate_fanout(&shown, name, &from, objects, sha256, to, &mut out);
            }
            Some((_fd, from)) => {
                migrate_packs(&shown, &from, objects, &budget.index_pack, &mut out)
            }
            None => out.reject(name.to_string(), "not a directory".into()),
        }
    }
    // One line for them all: a command can write any number.
    if waiting > 0 {
        out.failed.push((
            shown.clone(),
            format!(
                "{waiting} loose objects not verified yet: one migration inflates at most {} MiB of them",
                HASH_BUDGET >> 20
            ),
        ));
    }
    if out.failed.is_empty() {
        if let Err(e) = discard(entry, &shown) {
            out.failed.push((shown, format!("cannot be removed: {e}")));
        }
    }
    out
}

/// Takes `path` out of the quarantine of `entry`: renamed into `<entry>/trash/` (one rename,
/// however deep a tree the command built there), which no sandbox sees; [`empty_trash`]
/// removes it later, off the run's exit path.
fn discard(entry: &Path, path: &Path) -> io::Result<()> {
    let trash = entry.join("trash");
    if subdir(entry, "trash").is_none() {
        remove_entry(&trash)?;
        std::fs::DirBuilder::new().mode(0o700).create(&trash)?;
    }
    match std::fs::rename(path, trash.join(shofer_sys::statedir::random_suffix())) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Removes what `<entry>/trash/` holds, as far as it can (what is left is tried again next
/// time), until `stop` says so: the one remover ([`crate::git::remove::take_apart`]), without
/// recursion, whatever depth and modes the command left. Called by the [`Copier`] while the
/// run lasts, so that no run waits for an earlier one's garbage.
fn empty_trash(entry: &Path, stop: &dyn Fn() -> bool) {
    let Some((trash, _)) = subdir(entry, "trash") else {
        return;
    };
    let Ok(names) = crate::paths::list(&trash) else {
        return;
    };
    let mut budget = crate::git::remove::BUDGET;
    for name in names {
        if stop() {
            return;
        }
        // An error leaves that entry for a later time; the others go on.
        if let Ok(crate::git::remove::Removal::Unfinished) =
            crate::git::remove::take_apart(&trash, &name, &mut budget, stop)
        {
            return;
        }
    }
}

/// How long each pass of the [`Copier`] spends emptying the trash of earlier runs.
const TRASH_SLICE: std::time::Duration = std::time::Duration::from_millis(2);

/// How long a run's start spends emptying the trash of entries it settles or forgets (the
/// rest waits for a later run).
const STARTUP_TRASH_TIME: std::time::Duration = std::time::Duration::from_millis(100);

/// [`empty_trash`] for at most [`STARTUP_TRASH_TIME`].
fn empty_trash_briefly(entry: &Path) {
    let until = std::time::Instant::now() + STARTUP_TRASH_TIME;
    empty_trash(entry, &|| std::time::Instant::now() >= until);
}

/// Sets the mode of the directory at `path` if it differs (the command may have taken its
/// own quarantine's permissions away).
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    if std::fs::metadata(path)?.permissions().mode() & 0o7777 != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Copies each verified loose object of the fan-out directory `fan` (read through `from`, a
/// descriptor's path) into the store ([`copy_verified`]); what does not verify is rejected;
/// what the store already has is left to be removed. `shown`: the quarantine's path, for
/// messages.
fn migrate_fanout(
    shown: &Path,
    fan: &str,
    from: &Path,
    objects: &Path,
    sha256: bool,
    to_verify: Budgeted,
    out: &mut Migrated,
) {
    let Budgeted {
        budget,
        waiting,
        linked,
    } = to_verify;
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
        // Moved or rejected, an object leaves the quarantine at once: one kept for what still
        // waits must not be verified again by every later migration (two bombs, the first
        // rejected and the second waiting, made a quarantine no migration could finish).
        let handled = || drop_handled(from, &name);
        // Looked up whatever its links now: the other names may be gone already.
        let meta = std::fs::symlink_metadata(from.join(&name)).ok();
        let inode = meta.as_ref().map(|m| (m.dev(), m.ino()));
        let many_links = meta.is_some_and(|m| m.nlink() > 1);
        if let Some(hashed) = inode.and_then(|i| linked.get(&i)) {
            if *hashed != oid {
                out.reject(
                    oid,
                    format!("another name of a file holding object {hashed}"),
                );
                handled();
                continue;
            }
        }
        // The budget is spent: the rest waits, unread (no file made and removed for each).
        if budget.get() == 0 {
            *waiting += 1;
            continue;
        }
        let to = match &to_dir {
            Some(to) => to,
            None => match fanout_dir(objects, fan) {
                Ok(to) => to_dir.insert(to),
                Err(e) => {
                    out.failed.push((shown.join(fan), e.to_string()));
                    return;
                }
            },
        };
        let mut hashed = None;
        let copied = copy_verified(
            &from.join(&name),
            to,
            (fan, &name),
            objects,
            sha256,
            budget,
            &mut hashed,
        );
        if let (Some(i), Some(h), true) = (inode, hashed, many_links) {
            linked.insert(i, h);
        }
        match copied {
            Ok(Ok(())) => {
                out.moved += 1;
                handled();
            }
            Ok(Err(why)) => {
                out.reject(oid, why);
                handled();
            }
            Err(e) => match OverBudget::of(&e) {
                // git writes an object this large into a pack (core.bigFileThreshold).
                Some(o) if o.declared > HASH_BUDGET => {
                    out.reject(
                        oid,
                        format!(
                            "a loose object of {} bytes, more than one migration inflates ({} MiB)",
                            o.declared,
                            HASH_BUDGET >> 20
                        ),
                    );
                    handled();
                }
                Some(_) => {
                    budget.set(0);
                    *waiting += 1;
                }
                None => out
                    .failed
                    .push((shown.join(fan).join(&name), e.to_string())),
            },
        }
    }
}

/// Removes `name` (a file the command wrote, never followed) from the quarantine's directory
/// `dir` once it is moved or rejected; a failure leaves it to be handled again.
fn drop_handled(dir: &Path, name: &str) {
    let _ = std::fs::remove_file(dir.join(name));
}

/// The inflation budget of one migration ([`settle`]) and the count of loose objects left for
/// the next one.
struct Budgeted<'a> {
    budget: &'a Cell<u64>,
    waiting: &'a mut usize,
    /// (device, inode) of each file with more than one link inflated so far → the object its
    /// content hashed to: another name of it is decided unread (one bomb linked under
    /// many names would otherwise cost a whole budget per name).
    linked: &'a mut HashMap<(u64, u64), String>,
}

/// Copies the loose object `src` into the store's fan-out directory `to` as `name` (the
/// object `fan` + `name`) if its
/// content hashes to its name: read once, each block written to a new file of the
/// supervisor's as it is hashed, which is renamed into place (`RENAME_NOREPLACE`) only if it
/// verifies. `Ok(Err(why))`: it does not verify (nothing is written); `Err`: writing failed,
/// or [`OverBudget`]: its header declares more bytes than `budget` has left. `hashed` gets
/// the object its content hashed to, if it was read whole.
fn copy_verified(
    src: &Path,
    to: &OwnedFd,
    (fan, name): (&str, &str),
    objects: &Path,
    sha256: bool,
    budget: &Cell<u64>,
    hashed: &mut Option<String>,
) -> io::Result<Result<(), String>> {
    use std::io::{Read, Write};
    /// Reads from `from` and writes what it read to `to`, keeping the first write error.
    struct Tee<'a> {
        from: std::fs::File,
        to: &'a mut std::fs::File,
        failed: Option<io::Error>,
    }
    impl Read for Tee<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.from.read(buf)?;
            if let Err(e) = self.to.write_all(&buf[..n]) {
                let again = io::Error::new(e.kind(), e.to_string());
                self.failed = Some(e);
                return Err(again);
            }
            Ok(n)
        }
    }
    let from = match crate::paths::open_regular(src) {
        Ok(f) => f,
        Err(e) => return Ok(Err(format!("unreadable: {e}"))),
    };
    // Already there (the copier, or another run): fine, and never replaced.
    write_new(to, name, "obj", |file| {
        let mut tee = Tee {
            from,
            to: file,
            failed: None,
        };
        let id = loose_object_id_of(&mut tee, sha256, budget);
        if let Some(e) = tee.failed.take() {
            return Err(e);
        }
        if let Ok(id) = &id {
            *hashed = Some(hex(id));
        }
        let verdict = match id {
            Err(e) if OverBudget::of(&e).is_some() => return Err(e),
            Ok(id) if hex(&id) == format!("{fan}{name}") => Ok(()),
            Ok(_) => Err("its content does not hash to its name".to_string()),
            Err(e) => Err(format!("unreadable: {e}")),
        };
        if verdict.is_ok() {
            own_like_file(file, objects)?;
        }
        Ok(verdict)
    })
    .map(|r| r.map(|_| ()))
}

/// `dir/name` as a directory descriptor (a symlink at `name` is not followed: `dir` is the
/// supervisor's own, or a descriptor's path) and the path to read it through
/// (`/proc/self/fd/N`).
fn subdir(dir: &Path, name: &str) -> Option<(OwnedFd, PathBuf)> {
    let fd = crate::paths::open_dir_at_path(&dir.join(name)).ok()?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    Some((fd, path))
}

/// As root, gives the open file `file` to the owner of the store `objects` (through its
/// descriptor: a name could be swapped for a hard link to another file meanwhile).
fn own_like_file(file: &std::fs::File, objects: &Path) -> io::Result<()> {
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(objects)?;
    std::os::unix::fs::fchown(file, Some(m.uid()), Some(m.gid()))
}

/// As root, gives `path` to the owner of the store (a root caller over a repository another
/// user owns: that user's git must be able to write there later).
fn own_like(path: &Path, objects: &Path) -> io::Result<()> {
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(objects)?;
    std::os::unix::fs::lchown(path, Some(m.uid()), Some(m.gid()))
}

/// `objects/<fan>`, made if absent with the mode and owner of `objects/` (git's
/// core.sharedRepository modes included). Every step goes through descriptors: `objects/` is
/// opened without following symlinks, the directory made with `mkdirat` in it, reopened
/// `O_NOFOLLOW | O_DIRECTORY`, and its mode and owner set through that descriptor — a process
/// that can write the store (a sandbox whose writable set holds the repository) and swaps the
/// new name for a symlink gets `ENOTDIR`, never a `chmod` of what the link names (an attack
/// pass made a root supervisor set a setuid mode on a file of its choosing that way).
fn fanout_dir(objects: &Path, fan: &str) -> io::Result<OwnedFd> {
    let store = crate::paths::open_dir_at_path(objects)?;
    let st = crate::paths::fstat(&store)?;
    let mode = st.st_mode & 0o7777;
    let made = match rustix::fs::mkdirat(&store, fan, rustix::fs::Mode::from_bits_retain(mode)) {
        Ok(()) => true,
        Err(rustix::io::Errno::EXIST) => false,
        Err(e) => return Err(e.into()),
    };
    let fd = crate::paths::openat_path(&store, fan.as_ref())?;
    if crate::paths::kind(&fd)? != crate::paths::Kind::Dir {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a directory", objects.join(fan).display()),
        ));
    }
    if made {
        // What a writer of the store renamed into place between mkdirat and the open is not
        // ours to give mode and owner to.
        if crate::paths::fstat(&fd)?.st_uid != rustix::process::geteuid().as_raw() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} was replaced while it was made",
                    objects.join(fan).display()
                ),
            ));
        }
        // The umask took bits away.
        crate::paths::chmod_pinned(&fd, mode)?;
        if rustix::process::geteuid().is_root() {
            crate::paths::chown_pinned(&fd, st.st_uid, st.st_gid)?;
        }
    }
    Ok(fd)
}

/// renameat2(2) `RENAME_NOREPLACE` from `from_dir/from` to `to_dir/to`.
fn rename_between(from_dir: &OwnedFd, from: &str, to_dir: &OwnedFd, to: &str) -> io::Result<()> {
    crate::paths::rename_noreplace_between(from_dir, from.as_ref(), to_dir, to.as_ref())
}

/// The CPU time (user and system) of this process's waited-for children (getrusage(2)
/// `RUSAGE_CHILDREN`).
fn children_cpu() -> std::time::Duration {
    // Raw call: rustix has no getrusage.
    // Safety: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| {
        std::time::Duration::new(t.tv_sec as u64, (t.tv_usec as u32).saturating_mul(1000))
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Each `pack/pack-*.pack` of the quarantine, given to `git index-pack --stdin` in the
/// repository (which hashes every object of the pack, compares it with any existing object of
/// the same name, and writes the pack and an index of its own into `objects/pack`); the
/// command's own index is never used.
fn migrate_packs(
    dir: &Path,
    pack_dir: &Path,
    objects: &Path,
    base: &Cell<std::time::Duration>,
    out: &mut Migrated,
) {
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
    let bytes: u64 = packs
        .iter()
        .filter_map(|p| std::fs::symlink_metadata(pack_dir.join(p)).ok())
        .map(|m| m.len())
        .sum();
    // Charged what each run really used: a whole second each (RLIMIT_CPU's unit) ran a run of
    // 300 small packs out of budget and dropped the last ones, whose commits the refs named.
    // The base is the migration's, shared with the other quarantines it settles.
    let mut cpu_left =
        base.get() + std::time::Duration::from_secs((bytes >> 20) * INDEX_PACK_CPU_PER_MIB);
    let budget = cpu_left.as_secs();
    // git writes the pack by path; a process that can write the store could swap
    // `objects/pack` for a symlink and have a root supervisor's git write anywhere (an audit
    // did), and a refused pack leaves git's temporary copy where it was written. So git
    // writes into a private object directory beside the quarantine, finds the store's objects
    // through the store's pinned descriptor, and what it made is placed into the store's
    // pinned `pack/` by descriptor ([`place_pack`]); a refused pack's leftovers stay private.
    let pinned = crate::paths::open_dir_at_path(objects)
        .and_then(|store| Ok((fanout_dir(objects, "pack")?, store)))
        .and_then(|(pack_fd, store)| Ok((index_pack_stage(dir)?, pack_fd, store)));
    let ((stage, stage_pack), pack_fd, store) = match pinned {
        Ok(p) => p,
        Err(e) => {
            out.failed
                .push((dir.join("pack"), format!("the store's pack directory: {e}")));
            return;
        }
    };
    let store_raw = store.as_raw_fd();
    let fsck = fsck_option(&git);
    for pack in packs {
        let base = pack.trim_end_matches(".pack");
        let shown = dir.join("pack").join(&pack);
        let Ok(file) = crate::paths::open_regular(&pack_dir.join(&pack)) else {
            out.reject(pack.clone(), "not a regular file".into());
            drop_handled(pack_dir, &pack);
            continue;
        };
        // `--stdin`: git reads the pack from our descriptor and writes it, with its index,
        // into the private stage, as receive-pack does with a pushed pack. A few bytes of
        // deltas can declare gigabytes of objects: its address space and its CPU time are
        // bounded (a pack past them is refused), and it dies with the supervisor.
        if cpu_left.is_zero() {
            out.reject(
                pack.clone(),
                format!("the run's packs took the CPU time git index-pack may spend on them ({budget} s)"),
            );
            drop_handled(pack_dir, &pack);
            continue;
        }
        // RLIMIT_CPU counts whole seconds: what is left, rounded up.
        let cpu_limit = cpu_left.as_secs() + u64::from(cpu_left.subsec_nanos() > 0);
        let mut cmd = Command::new(&git);
        // Safety: setrlimit(2) and prctl(2) are async-signal-safe; nothing else runs between
        // fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                for (resource, value) in [
                    (libc::RLIMIT_AS, INDEX_PACK_MEMORY),
                    (libc::RLIMIT_CPU, cpu_limit),
                ] {
                    let limit = libc::rlimit {
                        rlim_cur: value,
                        rlim_max: value,
                    };
                    if libc::setrlimit(resource, &limit) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The descriptor the alternate's path names stays open across exec.
                if libc::fcntl(store_raw, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let cpu_before = children_cpu();
        let run = cmd
            // --fsck-objects: what git could not parse (a tree or commit that is not one)
            // would make every later `git gc` fail. What an identity line holds only warns,
            // as for loose objects (crate::git::fsck): git fetches such commits, and one refused
            // here would take the whole pack, and the fetched ref's history, with it.
            .args(["index-pack", "--stdin", "--no-rev-index", fsck])
            .current_dir(common)
            .env("GIT_DIR", common)
            .env("GIT_OBJECT_DIRECTORY", &stage)
            .env(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                format!("/proc/self/fd/{store_raw}"),
            )
            .stdin(file)
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .output();
        let spent = children_cpu().saturating_sub(cpu_before);
        cpu_left = cpu_left.saturating_sub(spent);
        let hash = match run {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .last()
                .unwrap_or("")
                .to_string(),
            Ok(o) => {
                empty_dir(&stage_pack);
                out.reject(
                    pack.clone(),
                    format!(
                        "git index-pack refused it: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    ),
                );
                drop_handled(pack_dir, &pack);
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
        let name = format!("pack-{hash}");
        // The pack before its index: git finds a pack by its index.
        let placed = ["pack", "idx"].iter().try_fold(false, |new, ext| {
            let file = format!("{name}.{ext}");
            let placed = place_pack(&stage_pack, &file, &pack_fd)?;
            if placed {
                own_like_at(&pack_fd, &file, &store)?;
            }
            Ok::<_, io::Error>(new || (*ext == "pack" && placed))
        });
        empty_dir(&stage_pack);
        let new = match placed {
            Ok(new) => new,
            Err(e) => {
                out.failed
                    .push((shown, format!("placing it in the store: {e}")));
                continue;
            }
        };
        out.moved += 1;
        // A partial clone's marker (the pack's objects may lack what they refer to): git
        // only asks whether it exists, so the store gets an empty one of the supervisor's,
        // never the command's file.
        // Only for a pack new to the store: a copy of one the store has would mark the host's.
        if new && crate::paths::open_regular(&pack_dir.join(format!("{base}.promisor"))).is_ok() {
            let marker = format!("{name}.promisor");
            use rustix::fs::{Mode, OFlags};
            let flags =
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let made = rustix::fs::openat(
                &pack_fd,
                marker.as_str(),
                flags,
                Mode::from_bits_retain(0o444),
            );
            if made.is_ok() {
                let _ = own_like_at(&pack_fd, &marker, &store);
            }
        }
        // Not indexed again by a later migration of a quarantine kept for something else.
        drop_handled(pack_dir, &pack);
    }
    // What the packs took beyond their own seconds comes out of the shared base.
    base.set(cpu_left.min(base.get()));
    drop(stage_pack);
    let _ = remove_entry(&stage);
}

/// Moves `name` from the private directory `stage` into the store's pack directory `pack_fd`
/// (descriptors both, never a path the store's writers can swap): a rename where both are on
/// one filesystem, else a copy to a new temporary name renamed into place; neither replaces
/// a file of that name already there (the same pack: its name is its checksum), and then ours
/// is dropped. Whether it placed one (false: the store had it).
///
/// # Errors
/// Reading `name`, writing or renaming in `pack_fd`.
fn place_pack(stage: &OwnedFd, name: &str, pack_fd: &OwnedFd) -> io::Result<bool> {
    match crate::paths::rename_noreplace_between(stage, name.as_ref(), pack_fd, name.as_ref()) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {}
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => return Ok(false),
        other => return other.map(|()| true),
    }
    let mut from = crate::paths::open_regular_in(stage, name)?;
    let placed = write_new(pack_fd, name, "pack", |to| {
        std::io::copy(&mut from, to)?;
        to.sync_all()?;
        Ok(Ok(()))
    })?;
    Ok(placed.unwrap_or(false))
}

/// Removes the files of the private directory `dir` (what `git index-pack` left there).
fn empty_dir(dir: &OwnedFd) {
    for name in crate::paths::list(dir).unwrap_or_default() {
        let _ = crate::paths::unlink_at(dir, &name, 0);
    }
}

/// [`IDENTITIES_WARN`] where `git` takes message ids after `--fsck-objects` (2.47 does, 2.39
/// does not), else plain `--fsck-objects`: an older git refuses a pack with a malformed
/// identity line (its `--strict=<ids>` would also refuse every shallow fetch's pack).
fn fsck_option(git: &Path) -> &'static str {
    let probe = Command::new(git)
        .args(["index-pack", "--stdin", IDENTITIES_WARN])
        .current_dir("/")
        .env_remove("GIT_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match probe {
        Ok(o) if o.stderr.starts_with(b"usage:") => "--fsck-objects",
        _ => IDENTITIES_WARN,
    }
}

/// A private object directory for `git index-pack` beside the quarantine `q` (`dir`):
/// `<entry>/index-pack/` with an empty `pack/`, made anew. Returns its path and `pack/`'s
/// descriptor.
fn index_pack_stage(dir: &Path) -> io::Result<(PathBuf, OwnedFd)> {
    let stage = dir.with_file_name("index-pack");
    remove_entry(&stage)?;
    for d in [stage.clone(), stage.join("pack")] {
        std::fs::DirBuilder::new().mode(0o700).create(&d)?;
    }
    let pack = crate::paths::open_dir_at_path(&stage.join("pack"))?;
    Ok((stage, pack))
}

/// As root, gives `name` in the directory `dir` (not following a symlink there) to the owner
/// of the store `store` (descriptors both).
fn own_like_at(dir: &OwnedFd, name: &str, store: &OwnedFd) -> io::Result<()> {
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let st = crate::paths::fstat(store)?;
    let file = crate::paths::openat_path(dir, name.as_ref())?;
    crate::paths::chown_pinned(&file, st.st_uid, st.st_gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that can write the store swaps a fan-out directory the supervisor just made
    /// for a symlink to a file: the supervisor never sets that file's mode (an attack pass won
    /// this race against a root supervisor and got a setuid shell; in-process it is won within
    /// a second when the mode is set by path).
    #[test]
    fn a_fanout_directory_swapped_for_a_symlink_changes_nothing_it_names() {
        let s = tempfile::tempdir().unwrap();
        let objects = s.path().join("objects");
        std::fs::create_dir(&objects).unwrap();
        std::fs::set_permissions(&objects, std::fs::Permissions::from_mode(0o6777)).unwrap();
        let target = s.path().join("target");
        std::fs::write(&target, "x").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, objects, target) = (Arc::clone(&stop), objects.clone(), target.clone());
            std::thread::spawn(move || {
                let (fan, junk) = (objects.join("ab"), objects.join("junk"));
                while !stop.load(Ordering::Relaxed) {
                    // The new directory is moved away and a symlink put in its place; both go
                    // again at once, so that the next try finds the name free.
                    if std::fs::rename(&fan, &junk).is_ok() {
                        let _ = std::os::unix::fs::symlink(&target, &fan);
                        std::thread::yield_now();
                        let _ = std::fs::remove_file(&fan);
                        let _ = std::fs::remove_dir(&junk);
                    }
                }
            })
        };
        let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
        let mut changed = false;
        while std::time::Instant::now() < until && !changed {
            if fanout_dir(&objects, "ab").is_ok() {
                let _ = std::fs::remove_dir(objects.join("ab"));
            }
            changed = std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777 != 0o600;
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(!changed, "the symlink's target got the store's mode");
    }

    /// A command can write any number of objects that do not verify: the first few are named,
    /// the rest counted (an attack pass got 102,000 warning lines on stderr), across merges.
    #[test]
    fn rejected_objects_are_named_up_to_a_limit_and_counted_after() {
        let mut all = Migrated::default();
        for round in 0..3 {
            let mut m = Migrated::default();
            for i in 0..MAX_REJECTED_NAMED {
                m.reject(format!("{round}-{i}"), "bad".into());
            }
            all.merge(m);
        }
        assert_eq!(all.rejected.len(), MAX_REJECTED_NAMED);
        assert_eq!(all.rejected_more, 2 * MAX_REJECTED_NAMED);
        assert_eq!(all.rejected[0].0, "0-0");
    }

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

    /// A scratch directory holding an empty repository `repo` (branch `main`).
    fn new_repo() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        (tmp, repo)
    }

    /// The test's own state directory of quarantines, in `tmp`.
    fn state(tmp: &tempfile::TempDir) -> PathBuf {
        let dir = tmp.path().join("state");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A run's quarantine of the repository whose common dir is `common`, in `tmp`'s state
    /// directory.
    fn taken(tmp: &tempfile::TempDir, common: &Path) -> Quarantine {
        Quarantine::take_in(&state(tmp), common, false, "wt")
            .unwrap()
            .0
    }

    /// Packs the quarantine's objects `ids` into `q/pack/pack-*.pack`, as a command's
    /// `git repack` would, and removes their loose copies.
    fn pack_in_quarantine(repo: &Path, q: &Path, ids: &[&str]) {
        let mut child = Command::new("git")
            .args(["pack-objects", "-q"])
            .arg(q.join("pack/pack"))
            .env("GIT_OBJECT_DIRECTORY", q)
            .env(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                repo.join(".git/objects"),
            )
            .current_dir(repo)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, format!("{}\n", ids.join("\n")).as_bytes()).unwrap();
        drop(stdin);
        assert!(child.wait().unwrap().success());
        for o in ids {
            std::fs::remove_file(q.join(&o[..2]).join(&o[2..])).unwrap();
        }
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
        let (tmp, repo) = new_repo();
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let common = repo.join(".git");
        let q = taken(&tmp, &common);
        let alternates = std::fs::read_to_string(q.dir.join("info/alternates")).unwrap();
        assert_eq!(alternates, "info/store\n");
        // Locked while the run lasts: a sweep leaves it alone.
        assert_eq!(sweep_in(&[state(&tmp)], &common, false).moved, 0);
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
        pack_in_quarantine(&repo, &q.dir, &[&packed[0], &packed[1]]);
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

    /// A process that can write the store (a sandbox whose writable set holds the repository)
    /// replaces `objects/pack` with a symlink to another directory while a run lasts: the
    /// run's pack is not written there (an audit had a root supervisor's `git index-pack`
    /// write and chown pack files into a root-owned directory of its choosing).
    #[test]
    fn a_pack_is_never_written_through_a_symlinked_pack_directory() {
        let (tmp, repo) = new_repo();
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let common = repo.join(".git");
        let q = taken(&tmp, &common);
        let packed = hash_object(&repo, "packed", Some(&q.dir));
        pack_in_quarantine(&repo, &q.dir, &[&packed]);
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let pack = common.join("objects/pack");
        std::fs::rename(&pack, tmp.path().join("real-pack")).unwrap();
        std::os::unix::fs::symlink(&target, &pack).unwrap();
        let m = q.migrate();
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "{m:?}");
        assert!(
            !m.failed.is_empty(),
            "the pack is kept for a later try: {m:?}"
        );
    }

    /// What the command may leave in its quarantine besides objects: a fan-out directory
    /// that is a symlink (to the store itself, to anything), a FIFO under an object's name.
    #[test]
    fn symlinks_and_special_files_in_the_quarantine_are_rejected_not_followed() {
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("pack")).unwrap();
        let q = taken(&tmp, &common);
        std::os::unix::fs::symlink(&elsewhere, q.dir.join("ab")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("pack"), q.dir.join("pack")).unwrap();
        std::fs::create_dir(q.dir.join("cd")).unwrap();
        let fifo = q.dir.join("cd").join("0".repeat(38));
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_bits_retain(0o644),
            0,
        )
        .unwrap();
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

    /// An object named by the hash of its inflated bytes but with a header git refuses (an
    /// unknown type: `git fsck` and `git gc` fail on it in the store) is rejected, not moved.
    #[test]
    fn an_object_with_a_header_git_refuses_is_rejected() {
        use sha1::Digest as _;
        use std::io::Write;
        let (tmp, repo) = new_repo();
        let q = Quarantine::take_in(&state(&tmp), &repo.join(".git"), false, "wt")
            .unwrap()
            .0;
        let inflated = b"evil 5\0hello";
        let oid = hex(&sha1::Sha1::digest(inflated));
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(inflated).unwrap();
        std::fs::create_dir_all(q.dir.join(&oid[..2])).unwrap();
        std::fs::write(q.dir.join(&oid[..2]).join(&oid[2..]), z.finish().unwrap()).unwrap();
        let m = q.migrate();
        assert_eq!(m.moved, 0, "{m:?}");
        assert_eq!(m.rejected.len(), 1, "{m:?}");
        assert!(m.rejected[0].1.contains("type"), "{m:?}");
        let store = repo.join(".git/objects").join(&oid[..2]).join(&oid[2..]);
        assert!(std::fs::symlink_metadata(store).is_err());
    }

    /// A small file that inflates far past the size its header declares (a zlib bomb) is
    /// refused at the declared size, not inflated to the end.
    #[test]
    fn an_object_inflating_past_its_header_is_rejected() {
        use std::io::Write;
        let (tmp, repo) = new_repo();
        let q = Quarantine::take_in(&state(&tmp), &repo.join(".git"), false, "wt")
            .unwrap()
            .0;
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

    /// Loose objects inflate within a budget per migration (zlib bombs once kept an exit
    /// inflating for as long as the command liked): one whose header declares more than a
    /// whole budget is dropped unread; those the budget left cannot cover stay in the
    /// quarantine, counted in one line, and the next migration moves them.
    #[test]
    fn loose_objects_are_inflated_within_a_budget_and_the_rest_waits() {
        use std::io::Write;
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let q = taken(&tmp, &common);
        let n = 100_000;
        let ids: Vec<String> = ["a", "b", "c", "d"]
            .iter()
            .map(|c| hash_object(&repo, &c.repeat(n), Some(&q.dir)))
            .collect();
        // Each inflates to `blob 100001\0` and the content with echo's newline.
        let each = (format!("blob {}\0", n + 1).len() + n + 1) as u64;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(format!("blob {}\0x", HASH_BUDGET * 2).as_bytes())
            .unwrap();
        // First in the quarantine's order (`00`), while the budget lasts.
        std::fs::create_dir_all(q.dir.join("00")).unwrap();
        std::fs::write(q.dir.join("00").join("0".repeat(38)), z.finish().unwrap()).unwrap();
        let (entry, objects, dir) = (q.entry.clone(), q.objects.clone(), q.dir.clone());

        let m = settle(&entry, &objects, false, &Budget::inflating(each * 5 / 2));
        assert_eq!(m.moved, 2, "{m:?}");
        assert_eq!(m.rejected.len(), 1, "{m:?}");
        assert_eq!(m.rejected[0].0, "0".repeat(40));
        assert!(
            m.rejected[0].1.contains("more than one migration inflates"),
            "{m:?}"
        );
        assert_eq!(m.failed.len(), 1, "{m:?}");
        assert!(
            m.failed[0]
                .1
                .starts_with("2 loose objects not verified yet"),
            "{m:?}"
        );
        assert!(dir.is_dir(), "the quarantine waits for the next migration");

        let m = settle(&entry, &objects, false, &Budget::inflating(HASH_BUDGET));
        assert_eq!((m.moved, m.failed.len()), (2, 0), "{m:?}");
        assert!(!dir.exists());
        for id in &ids {
            git(&repo, &["cat-file", "-e", id]);
        }
        drop(q);
    }

    /// A decided object leaves the quarantine, so a kept quarantine does not cost every later
    /// migration the same work: two forged objects that each take nearly a whole budget once
    /// made a quarantine no migration could finish (the first was inflated and rejected
    /// again each time, the second waited). Other names of one file (hard links) are
    /// decided from the first one inflated, unread.
    #[test]
    fn decided_objects_leave_the_quarantine_and_hard_links_are_read_once() {
        use std::io::Write;
        let (tmp, repo) = new_repo();
        let q = taken(&tmp, &repo.join(".git"));
        let budget = 1u64 << 20;
        let forged = |q: &Path, fan: &str| {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            let size = budget - 100;
            z.write_all(format!("blob {size}\0").as_bytes()).unwrap();
            z.write_all(&vec![0u8; size as usize]).unwrap();
            std::fs::create_dir_all(q.join(fan)).unwrap();
            let path = q.join(fan).join("1".repeat(38));
            std::fs::write(&path, z.finish().unwrap()).unwrap();
            path
        };
        forged(&q.dir, "0a");
        forged(&q.dir, "0b");
        let (entry, objects, dir) = (q.entry.clone(), q.objects.clone(), q.dir.clone());
        let m = settle(&entry, &objects, false, &Budget::inflating(budget));
        assert_eq!((m.rejected.len(), m.failed.len()), (1, 1), "{m:?}");
        let m = settle(&entry, &objects, false, &Budget::inflating(budget));
        assert_eq!((m.rejected.len(), m.failed.len()), (1, 0), "{m:?}");
        assert!(!dir.exists());

        let q = taken(&tmp, &repo.join(".git"));
        let first = forged(&q.dir, "0c");
        for fan in ["0d", "0e", "0f", "10"] {
            std::fs::create_dir_all(q.dir.join(fan)).unwrap();
            std::fs::hard_link(&first, q.dir.join(fan).join("1".repeat(38))).unwrap();
        }
        let dir = q.dir.clone();
        let m = settle(&q.entry, &q.objects, false, &Budget::inflating(budget));
        assert_eq!((m.rejected.len(), m.failed.len()), (5, 0), "{m:?}");
        assert!(
            m.rejected[1]
                .1
                .starts_with("another name of a file holding object"),
            "{m:?}"
        );
        assert!(!dir.exists());
        drop(q);
    }

    /// A pack moved into the store leaves a quarantine kept for a loose object that waits:
    /// `git index-pack` does not run on it again at every later migration.
    #[test]
    fn a_moved_pack_leaves_a_kept_quarantine() {
        let (tmp, repo) = new_repo();
        let q = taken(&tmp, &repo.join(".git"));
        let packed = hash_object(&repo, "packed", Some(&q.dir));
        pack_in_quarantine(&repo, &q.dir, &[&packed]);
        let waiting = hash_object(&repo, "waits", Some(&q.dir));
        let m = settle(&q.entry, &q.objects, false, &Budget::inflating(4));
        assert_eq!((m.moved, m.failed.len()), (1, 1), "{m:?}");
        let left: Vec<String> = files(&q.dir)
            .into_iter()
            .filter(|f| f.ends_with(".pack"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        assert!(q.dir.join(&waiting[..2]).join(&waiting[2..]).exists());
        git(&repo, &["cat-file", "-e", &packed]);
    }

    /// The CPU time `git index-pack` may take beyond the packs' own seconds is one budget for
    /// all the quarantines a take or sweep settles (each had its own: killed runs that each
    /// left a delta bomb held a start for 300 s apiece).
    #[test]
    fn quarantines_settled_together_share_index_pack_time() {
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let budget = Budget {
            inflate: Cell::new(HASH_BUDGET),
            index_pack: Cell::new(std::time::Duration::from_millis(1)),
        };
        let mut rejected = Vec::new();
        for content in ["first", "second"] {
            let q = taken(&tmp, &common);
            let id = hash_object(&repo, content, Some(&q.dir));
            pack_in_quarantine(&repo, &q.dir, &[&id]);
            let m = settle(&q.entry, &q.objects, false, &budget);
            rejected.push(m.rejected.len());
            if let Some((_, why)) = m.rejected.first() {
                assert!(why.contains("took the CPU time"), "{m:?}");
            }
        }
        assert_eq!(rejected, [0, 1]);
    }

    /// An object the store already has, written again by the command (git cannot refresh the
    /// store's copy), goes like junk: a file the command made may be written later through a
    /// descriptor another sandbox holds, so no later run may read it. Each worktree takes a
    /// quarantine of its own, and none lies in the repository.
    #[test]
    fn objects_written_again_are_dropped_and_quarantines_stay_out_of_the_repository() {
        let (tmp, repo) = new_repo();
        let old = hash_object(&repo, "old", None);
        let common = repo.join(".git");
        let before = files(&common);
        let q = taken(&tmp, &common);
        assert_eq!(files(&common), before);
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
        assert!(!dir.exists());
        let (mine, _) = Quarantine::take_in(&state(&tmp), &common, false, "wt").unwrap();
        let (other, _) = Quarantine::take_in(&state(&tmp), &common, false, "wt-2").unwrap();
        assert_eq!(mine.dir, dir);
        assert_ne!(other.dir, dir);
    }

    /// While the run lasts, a verified object is copied into the store (a file of its own:
    /// a later write to the quarantined one changes nothing there); a forged one is not.
    #[test]
    fn the_copier_copies_verified_objects_while_the_run_lasts() {
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let q = taken(&tmp, &common);
        let copier = q.start_copier().unwrap();
        let write = |content: &str| hash_object(&repo, content, Some(&q.dir));
        let other = write("something else");
        let at = |root: &Path, o: &str| root.join(&o[..2]).join(&o[2..]);
        // Another object's bytes under this name, from the first pass the copier could make.
        let forged = {
            let out = Command::new("sh")
                .arg("-c")
                .arg("echo forged while running | git hash-object --stdin")
                .current_dir(&repo)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        std::fs::create_dir_all(q.dir.join(&forged[..2])).unwrap();
        std::fs::copy(at(&q.dir, &other), at(&q.dir, &forged)).unwrap();
        let good = write("copied while running");
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
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let write = |q: &Quarantine, content: &str| hash_object(&repo, content, Some(&q.dir));
        // A first run ends normally: its object moves, its quarantine goes.
        let q = taken(&tmp, &common);
        write(&q, "first");
        let dir = q.dir.clone();
        let m = q.migrate();
        assert_eq!(m.moved, 1);
        assert!(!dir.exists());
        // A second run takes the entry again, writes, and its supervisor dies: its
        // descriptor, and so its lock, goes.
        let (q, settled) = Quarantine::take_in(&state(&tmp), &common, false, "wt").unwrap();
        assert_eq!((q.dir.clone(), settled.moved), (dir.clone(), 0));
        let oid = write(&q, "left by a killed run");
        drop(q);
        // The next take moves the object and makes a new quarantine.
        let (again, settled) = Quarantine::take_in(&state(&tmp), &common, false, "wt").unwrap();
        assert_eq!(
            (again.dir.clone(), settled.moved),
            (dir.clone(), 1),
            "{settled:?}"
        );
        assert_eq!(files(&dir), ["info/alternates"]);
        git(&repo, &["cat-file", "-e", &oid]);
    }

    /// Descriptors on a run's quarantine and on one of its fan-out directories, kept after the
    /// run (a second sandbox can hold them): what is written through them after the run never
    /// reaches a later run's quarantine or the store.
    #[test]
    fn a_descriptor_on_an_earlier_quarantine_reaches_no_later_run() {
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let q = taken(&tmp, &common);
        let oid = hash_object(&repo, "first", Some(&q.dir));
        let held_q = crate::paths::open_dir_at_path(&q.dir).unwrap();
        let held_fan = crate::paths::open_dir_at_path(&q.dir.join(&oid[..2])).unwrap();
        let dir = q.dir.clone();
        assert_eq!(q.migrate().moved, 1);
        let forged = format!("{}{}", &oid[..2], "0".repeat(38));
        let plant = |fd: &OwnedFd, name: &str| {
            let at = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
            let _ = std::fs::create_dir(at.join(&forged[..2]));
            let _ = std::fs::write(at.join(name), b"not an object");
        };
        let later = taken(&tmp, &common);
        assert_eq!(later.dir, dir);
        plant(&held_q, &format!("{}/{}", &forged[..2], &forged[2..]));
        plant(&held_fan, &forged[2..]);
        assert_eq!(files(&later.dir), ["info/alternates"]);
        let m = later.migrate();
        assert_eq!((m.moved, m.rejected.len()), (0, 0), "{m:?}");
        assert!(!common
            .join("objects")
            .join(&forged[..2])
            .join(&forged[2..])
            .exists());
    }

    /// An entry another process made in the state directory (one that could write there once)
    /// with a forged object in its quarantine: the next take rejects the object and gives the
    /// run a quarantine of its own, empty.
    #[test]
    fn an_entry_planted_in_the_state_directory_gives_a_run_nothing() {
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let objects = common.join("objects");
        let entry = state(&tmp).join(format!("{}planted", owned_prefix(&objects, "wt")));
        let forged = "ab".to_string() + &"c".repeat(38);
        std::fs::create_dir_all(entry.join("q").join(&forged[..2])).unwrap();
        std::fs::write(entry.join("store"), objects.as_os_str().as_bytes()).unwrap();
        std::fs::write(entry.join("mark"), b"").unwrap();
        std::fs::write(entry.join("q").join(&forged[..2]).join(&forged[2..]), b"x").unwrap();
        let (q, settled) = Quarantine::take_in(&state(&tmp), &common, false, "wt").unwrap();
        assert_eq!(q.dir, entry.join("q"));
        assert_eq!(settled.rejected.len(), 1, "{settled:?}");
        assert_eq!(files(&q.dir), ["info/alternates"]);
        assert!(!objects.join(&forged[..2]).join(&forged[2..]).exists());
    }

    /// A hard link in the quarantine to a new object, named as an object the store already
    /// has: the store's file for the new object keeps no name in the quarantine (a later run
    /// cannot reach it through the link), and the link is dropped.
    #[test]
    fn no_file_of_the_quarantine_enters_the_store() {
        use std::os::unix::fs::MetadataExt;
        let (tmp, repo) = new_repo();
        let existing = hash_object(&repo, "existing", None);
        let common = repo.join(".git");
        let q = taken(&tmp, &common);
        let new = hash_object(&repo, "new", Some(&q.dir));
        let at = |dir: &Path, o: &str| dir.join(&o[..2]).join(&o[2..]);
        std::fs::create_dir_all(q.dir.join(&existing[..2])).unwrap();
        std::fs::hard_link(at(&q.dir, &new), at(&q.dir, &existing)).unwrap();
        let dir = q.dir.clone();
        let m = q.migrate();
        assert_eq!((m.moved, m.failed.len()), (1, 0), "{m:?}");
        // Copied while the link stood, or renamed once it was gone: either way the store's
        // file has no name in the quarantine.
        let stored = std::fs::metadata(at(&common.join("objects"), &new)).unwrap();
        assert_eq!(stored.nlink(), 1);
        assert!(!dir.exists());
        assert_eq!(git(&repo, &["cat-file", "blob", &existing]), "existing");
        git(&repo, &["fsck", "--strict"]);
    }

    /// A tree deeper than any stack or descriptor table allows, left by a command in its
    /// quarantine: emptied from the trash on a thread with a small stack, and a stop request
    /// ends the work at once.
    #[test]
    fn a_deep_tree_in_the_trash_is_taken_apart_without_recursion() {
        let tmp = tempfile::tempdir().unwrap();
        let entry = tmp.path().join("entry");
        let top = entry.join("trash").join("old-q");
        std::fs::create_dir_all(&top).unwrap();
        // 30,000 levels, made through descriptors (the path is far past PATH_MAX).
        let mut fd = crate::paths::open_dir_at_path(&top).unwrap();
        for _ in 0..30_000 {
            let dir = std::fs::File::open(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
            rustix::fs::mkdirat(&dir, "d", rustix::fs::Mode::from_bits_retain(0o755)).unwrap();
            std::fs::write(format!("/proc/self/fd/{}/f", dir.as_raw_fd()), b"x").unwrap();
            fd = crate::paths::openat_path(&fd, Path::new("d")).unwrap();
        }
        drop(fd);
        let stopped = entry.clone();
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || empty_trash(&stopped, &|| true))
            .unwrap()
            .join()
            .unwrap();
        assert!(top.exists(), "a stop request is honoured before any work");
        let e = entry.clone();
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || empty_trash(&e, &|| false))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(std::fs::read_dir(entry.join("trash")).unwrap().count(), 0);
    }

    /// A quarantine whose repository is gone is removed by the next take, of any repository.
    #[test]
    fn a_quarantine_of_a_removed_repository_is_forgotten() {
        let tmp = tempfile::tempdir().unwrap();
        let mut commons = Vec::new();
        for name in ["gone", "kept"] {
            let repo = tmp.path().join(name);
            std::fs::create_dir(&repo).unwrap();
            git(&repo, &["init", "-q", "-b", "main"]);
            commons.push(repo.join(".git"));
        }
        let gone = Quarantine::take_in(&state(&tmp), &commons[0], false, "wt")
            .unwrap()
            .0;
        let entry = gone.entry.clone();
        drop(gone.migrate());
        std::fs::remove_dir_all(tmp.path().join("gone")).unwrap();
        assert!(entry.is_dir());
        let _kept = Quarantine::take_in(&state(&tmp), &commons[1], false, "wt").unwrap();
        assert!(!entry.exists());
    }

    /// A verified pack reaches the store from a stage on another filesystem (the state
    /// directory under `$HOME`, the repository elsewhere): copied under a temporary name and
    /// renamed into place; a pack of that name already there is kept as it is.
    #[test]
    fn a_pack_is_placed_across_filesystems_without_replacing_one_there() {
        let stage_dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let store_dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::MetadataExt;
        let dev = |p: &Path| std::fs::metadata(p).unwrap().dev();
        assert_ne!(
            dev(stage_dir.path()),
            dev(store_dir.path()),
            "/dev/shm and the temporary directory must be two filesystems for this test"
        );
        let stage = crate::paths::open_dir_at_path(stage_dir.path()).unwrap();
        let packs = crate::paths::open_dir_at_path(store_dir.path()).unwrap();
        std::fs::write(stage_dir.path().join("pack-1.pack"), b"PACK one").unwrap();
        assert!(place_pack(&stage, "pack-1.pack", &packs).unwrap());
        std::fs::write(stage_dir.path().join("pack-2.pack"), b"PACK new").unwrap();
        std::fs::write(store_dir.path().join("pack-2.pack"), b"PACK old").unwrap();
        assert!(!place_pack(&stage, "pack-2.pack", &packs).unwrap());
        let read = |n: &str| std::fs::read(store_dir.path().join(n)).unwrap();
        assert_eq!(read("pack-1.pack"), b"PACK one");
        assert_eq!(read("pack-2.pack"), b"PACK old");
        let mut names: Vec<_> = std::fs::read_dir(store_dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["pack-1.pack", "pack-2.pack"]);
    }

    /// A command's copy of a pack the store has, with a `.promisor` beside it: the store's
    /// pack stays as it was, and gets no marker (it would make a host `git repack` treat the
    /// host's own objects as a partial clone's).
    #[test]
    fn a_copy_of_a_store_pack_marks_nothing_in_the_store() {
        let (tmp, repo) = new_repo();
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "one"]);
        git(&repo, &["gc", "-q"]);
        let common = repo.join(".git");
        let store_packs = common.join("objects/pack");
        let names = |dir: &Path| -> Vec<String> {
            let mut n: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            n.sort();
            n
        };
        let before = names(&store_packs);
        let pack = before
            .iter()
            .find(|n| n.ends_with(".pack"))
            .unwrap()
            .clone();
        let q = taken(&tmp, &common);
        std::fs::create_dir_all(q.dir.join("pack")).unwrap();
        std::fs::copy(store_packs.join(&pack), q.dir.join("pack/pack-ffff.pack")).unwrap();
        std::fs::write(q.dir.join("pack/pack-ffff.promisor"), b"").unwrap();
        let m = q.migrate();
        assert!(m.failed.is_empty() && m.rejected.is_empty(), "{m:?}");
        assert_eq!(names(&store_packs), before);
    }

    /// Hundreds of small packs (a command that repacks after every commit) all reach the
    /// store: each `git index-pack` is charged the CPU time it used, not a whole second.
    #[test]
    fn many_small_packs_all_reach_the_store() {
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let q = taken(&tmp, &common);
        let n = INDEX_PACK_CPU_SECONDS as usize + 10;
        let out = Command::new("sh")
            .arg("-c")
            .arg(
                "for i in $(seq \"$N\"); do echo \"blob $i\" | git hash-object -w --stdin \
                 | git pack-objects -q \"$Q/pack/pack\" >/dev/null || exit 1; done",
            )
            .env("N", n.to_string())
            .env("Q", &q.dir)
            .env("GIT_OBJECT_DIRECTORY", &q.dir)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let m = q.migrate();
        assert!(m.failed.is_empty() && m.rejected.is_empty(), "{m:?}");
        for i in [1, n] {
            let out = Command::new("sh")
                .arg("-c")
                .arg("echo \"$C\" | git hash-object --stdin")
                .env("C", format!("blob {i}"))
                .current_dir(&repo)
                .output()
                .unwrap();
            let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
            git(&repo, &["cat-file", "-e", &id]);
        }
    }

    /// Entries left unnamed by supervisors killed right after making them (no run uses one
    /// again): the next take forgets them once they are old, never while new.
    #[test]
    fn an_entry_without_its_store_is_forgotten_once_old() {
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let root = state(&tmp);
        let made = |wt: &str| {
            let q = Quarantine::take_in(&root, &common, false, wt).unwrap().0;
            let entry = q.entry.clone();
            drop(q.migrate());
            std::fs::remove_file(entry.join("store")).unwrap();
            entry
        };
        let (old, new) = (made("a"), made("b"));
        let long_ago = std::time::SystemTime::now() - 2 * UNNAMED_AGE;
        std::fs::File::open(&old)
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_modified(long_ago))
            .unwrap();
        let q = Quarantine::take_in(&root, &common, false, "a").unwrap().0;
        assert_ne!(q.entry, old);
        assert!(!old.exists(), "an old unnamed entry stayed");
        assert!(new.is_dir(), "a new unnamed entry was removed");
    }

    /// A descriptor on a new object that outlives the run (passed to another sandbox over a
    /// socket): writing through it after the migration changes nothing in the store, which got
    /// a file of the supervisor's.
    #[test]
    fn a_descriptor_kept_on_a_new_object_does_not_reach_the_store() {
        use std::io::{Seek, Write};
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let q = taken(&tmp, &common);
        let new = hash_object(&repo, "new", Some(&q.dir));
        let path = q.dir.join(&new[..2]).join(&new[2..]);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut held = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert_eq!(q.migrate().moved, 1);
        held.set_len(0).unwrap();
        held.rewind().unwrap();
        held.write_all(b"forged after the run").unwrap();
        drop(held);
        git(&repo, &["cat-file", "-e", &new]);
        git(&repo, &["fsck", "--strict"]);
    }

    /// A commit git cannot parse (`hello`, written with `--literally`), loose and in a pack: its
    /// name is its hash and its header is git's, but `git gc` would fail on it for good: it is
    /// rejected both ways.
    #[test]
    fn objects_git_cannot_parse_are_rejected_loose_and_packed() {
        let (tmp, repo) = new_repo();
        let common = repo.join(".git");
        let q = taken(&tmp, &common);
        let bogus = |what: &str| {
            let out = Command::new("sh")
                .arg("-c")
                .arg("printf %s \"$C\" | git hash-object -t commit --literally -w --stdin")
                .env("C", what)
                .env("GIT_OBJECT_DIRECTORY", &q.dir)
                .current_dir(&repo)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let loose = bogus("hello");
        let packed = bogus("hello again");
        pack_in_quarantine(&repo, &q.dir, &[&packed]);
        // A host git's fetch in progress: its temporary pack stays.
        let store_packs = common.join("objects/pack");
        std::fs::create_dir_all(&store_packs).unwrap();
        std::fs::write(store_packs.join("tmp_pack_host01"), b"PACK host").unwrap();
        let m = q.migrate();
        assert_eq!(m.moved, 0, "{m:?}");
        assert_eq!(m.rejected.len(), 2, "{m:?}");
        for o in [&loose, &packed] {
            let there = Command::new("git")
                .args(["cat-file", "-e", o])
                .current_dir(&repo)
                .status()
                .unwrap();
            assert!(!there.success(), "{o} reached the store");
        }
        // The refused pack left no copy of itself in the store (git index-pack's
        // `tmp_pack_XXXXXX`, which it does not remove when it dies).
        let mut left: Vec<_> = std::fs::read_dir(&store_packs)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["tmp_pack_host01"]);
    }
}
