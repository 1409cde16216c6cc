//! The repository's existing objects: detecting, when a run ends, every object it destroyed or
//! changed (docs/ARCHITECTURE.md, "Linked git worktrees").
//!
//! On Landlock `objects/` must stay writable for new objects, so a command can delete or
//! rewrite existing ones (`rm -rf objects`, a loose object replaced under the same name: `git
//! status` stays clean and the next checkout writes the attacker's content). The namespace
//! backends make the store read-only ([`crate::git::quarantine`]) and bind every existing pack
//! read-only over itself ([`crate::git::protect`]) where no quarantine could be made; what they
//! do not prevent, and on the Landlock backend everything, is checked here:
//!
//! - [`ObjectStore::snapshot`] records each loose object's name (a directory listing, no
//!   stat) and the time, and each pack's and index's inode, size, ctime and trailing
//!   checksum, keeping the pack index open so its list survives a deletion;
//! - [`ObjectStore::check`] finds loose objects that are gone and not in any pack now
//!   (`git gc` packs and prunes them legitimately), loose objects whose ctime is not older than
//!   the snapshot and whose content no longer hashes to their name (`git` freshens mtimes of
//!   existing objects, which is not a change), packs whose checksum no longer matches,
//!   objects of a vanished pack that no pack or loose file holds any more, and `objects/` or a
//!   fan-out directory replaced by a symlink (its files, moved along, look unchanged).
//!
//! Why a loose object's ctime suffices: the kernel sets it to the current time on every change
//! of the file (its data, mode, links; a new file under the name), and no system call sets it
//! otherwise; only setting the clock back would (`CAP_SYS_TIME`, which the command never
//! holds). File times come from the kernel's coarse clock, at most a tick (10 ms at HZ=100)
//! behind the time the snapshot reads, and some filesystems keep whole seconds (FAT 2 s, ext4
//! with 128-byte inodes 1 s): "older" means older than [`FINE_MARGIN`] before the snapshot for
//! a ctime with nanoseconds, [`COARSE_MARGIN`] for one of whole seconds. Objects written in that
//! margin are hashed (a 2 s margin for every object hashed again each of an agent's back-to-back
//! commands what the previous one wrote).
//!
//! Formats: git's Documentation/gitformat-pack.txt (index v2) and gitformat-loose.txt (a loose
//! object is the zlib stream of `<type> <size>\0<content>`, named by its hash).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// How much older than the snapshot a ctime with nanoseconds must be to count as unchanged, on
/// a local filesystem: a few ticks of the coarse clock file times come from (module
/// documentation).
const FINE_MARGIN: std::time::Duration = std::time::Duration::from_millis(50);
/// The same for a ctime of whole seconds (FAT keeps 2 s), and on any filesystem not known to
/// take its times from this kernel's clock (a network filesystem's server sets them).
const COARSE_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);
/// Most loose objects snapshotted; a bigger store is checked through its packs only.
const MAX_LOOSE: usize = 200_000;
/// Most damaged objects named one by one; the rest are counted.
const MAX_NAMED: usize = 50;
/// Largest name table read from one pack index (bytes: 1 GiB is 53 million SHA-1 names).
const MAX_IDX_NAMES: usize = 1 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    ctime: (i64, i64),
}

/// When the file last changed (its ctime; one before 1970 counts as the epoch).
fn changed_at(m: &std::fs::Metadata) -> SystemTime {
    ctime_at(m.ctime(), m.ctime_nsec())
}

/// A ctime (`st_ctime`, `st_ctime_nsec`) as a time; one before 1970 counts as the epoch.
fn ctime_at(secs: i64, nsec: i64) -> SystemTime {
    let secs = u64::try_from(secs).unwrap_or(0);
    UNIX_EPOCH + std::time::Duration::new(secs, nsec.clamp(0, 999_999_999) as u32)
}

fn stamp(m: &std::fs::Metadata) -> Stamp {
    Stamp {
        ino: m.ino(),
        size: m.size(),
        ctime: (m.ctime(), m.ctime_nsec()),
    }
}

struct Pack {
    /// `pack-<hash>` (without extension).
    base: String,
    pack: Stamp,
    idx: Stamp,
    pack_trailer: Vec<u8>,
    idx_trailer: Vec<u8>,
    /// The index as it was, readable even if the file is deleted.
    idx_file: File,
}

/// The objects of a repository before a run.
pub struct ObjectStore {
    dir: PathBuf,
    sha256: bool,
    loose: Vec<String>,
    /// `objects/` itself (`""`, when it is a directory) and each fan-out directory, by
    /// (device, inode). Moving a directory keeps its files' ctimes, so a fan-out directory
    /// swapped for another one (made earlier, holding forged objects under the same names) or
    /// for a symlink would pass the ctime test: every object in a directory that is not the
    /// one recorded is hashed, and a symlink or file in its place is damage. (A directory gone,
    /// or made anew, is not damage by itself: git's `prune-packed` removes empty ones.)
    dirs: HashMap<String, (u64, u64)>,
    /// When the snapshot was taken: a loose object whose ctime is older by more than its
    /// margin ([`ObjectStore::unchanged_since_snapshot`]) is as it was then.
    taken: SystemTime,
    /// The store is on a local filesystem whose file times come from this kernel's clock
    /// ([`local_clock_fs`]): [`FINE_MARGIN`] applies.
    local_times: bool,
    /// More loose objects than [`MAX_LOOSE`]: they were not recorded.
    loose_truncated: bool,
    packs: Vec<Pack>,
}

/// One object or pack destroyed or changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The object name or pack file.
    pub what: String,
    /// What happened to it.
    pub how: String,
}

impl ObjectStore {
    /// Records `objects` (the repository's object directory). `sha256`: the repository's
    /// object format.
    pub fn snapshot(objects: &Path, sha256: bool) -> ObjectStore {
        Self::snapshot_at(objects, sha256, SystemTime::now())
    }

    /// [`Self::snapshot`], as if taken at `taken`.
    fn snapshot_at(objects: &Path, sha256: bool, taken: SystemTime) -> ObjectStore {
        let mut store = ObjectStore {
            dir: objects.to_path_buf(),
            sha256,
            loose: Vec::new(),
            dirs: HashMap::new(),
            taken,
            local_times: local_clock_fs(objects),
            loose_truncated: false,
            packs: Vec::new(),
        };
        let hexlen = store.hash_len() * 2;
        if let Some(id) = crate::paths::dir_identity(objects) {
            store.dirs.insert(String::new(), id);
        }
        for (fan, id, names) in loose_dirs(objects) {
            store.dirs.insert(fan.clone(), id);
            for name in names {
                if name.len() + 2 != hexlen || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
                    continue;
                }
                if store.loose.len() >= MAX_LOOSE {
                    store.loose_truncated = true;
                    break;
                }
                store.loose.push(format!("{fan}{name}"));
            }
        }
        let hl = store.hash_len() as u64;
        for base in pack_bases(objects) {
            let pack_path = objects.join("pack").join(format!("{base}.pack"));
            let idx_path = objects.join("pack").join(format!("{base}.idx"));
            let (Ok(pm), Ok(im)) = (
                std::fs::symlink_metadata(&pack_path),
                std::fs::symlink_metadata(&idx_path),
            ) else {
                continue;
            };
            let (Ok(pack_trailer), Ok(idx_file)) = (
                read_tail(&pack_path, hl),
                crate::paths::open_regular(&idx_path),
            ) else {
                continue;
            };
            let Ok(idx_trailer) = read_tail(&idx_path, hl) else {
                continue;
            };
            store.packs.push(Pack {
                base,
                pack: stamp(&pm),
                idx: stamp(&im),
                pack_trailer,
                idx_trailer,
                idx_file,
            });
        }
        store
    }

    fn hash_len(&self) -> usize {
        if self.sha256 {
            32
        } else {
            20
        }
    }

    /// Every recorded object or pack destroyed or changed since the snapshot (hashing at most
    /// [`HASH_BUDGET`] bytes).
    pub fn check(&self) -> Vec<Damage> {
        self.check_within(HASH_BUDGET)
    }

    /// [`Self::check`], hashing at most `budget` bytes.
    fn check_within(&self, budget: u64) -> Vec<Damage> {
        let mut damage = Vec::new();
        let mut present: Option<HashSet<Vec<u8>>> = None;
        let hl = self.hash_len();
        let mut present_now = |oid: &[u8]| -> bool {
            let set = present.get_or_insert_with(|| self.objects_now());
            set.contains(oid)
        };
        let mut named = 0usize;
        let mut unnamed = 0usize;
        let mut record = |damage: &mut Vec<Damage>, what: String, how: String| {
            if named < MAX_NAMED {
                named += 1;
                damage.push(Damage { what, how });
            } else {
                unnamed += 1;
            }
        };
        // Directories that are not the ones recorded: their objects get no ctime shortcut.
        let mut swapped: HashSet<&str> = HashSet::new();
        for (name, id) in &self.dirs {
            let path = self.dir.join(name);
            match std::fs::symlink_metadata(&path) {
                Ok(m) if !m.is_dir() => record(
                    &mut damage,
                    path.display().to_string(),
                    "replaced by a symlink or a file: the objects it held are elsewhere".into(),
                ),
                Ok(m) if (m.dev(), m.ino()) == *id => continue,
                _ => {}
            }
            swapped.insert(name);
        }
        let all_swapped = swapped.contains("");
        let budget = std::cell::Cell::new(budget);
        for (oid, now) in self.loose.iter().zip(loose_now(&self.dir, &self.loose)) {
            let path = self.dir.join(&oid[..2]).join(&oid[2..]);
            match now {
                LooseNow::File(changed)
                    if self.unchanged_since_snapshot(changed)
                        && !all_swapped
                        && !swapped.contains(&oid[..2]) => {}
                LooseNow::Other => {
                    record(&mut damage, oid.clone(), "replaced by a non-file".into())
                }
                LooseNow::File(_) => match self.hash_loose(&path, &budget) {
                    Ok(h) if hex(&h) == *oid => {}
                    Ok(_) => record(
                        &mut damage,
                        oid.clone(),
                        "rewritten: its content no longer hashes to its name".into(),
                    ),
                    Err(e) => record(&mut damage, oid.clone(), format!("unreadable: {e}")),
                },
                LooseNow::Absent => {
                    let raw = unhex(oid).unwrap_or_default();
                    if !present_now(&raw) {
                        record(&mut damage, oid.clone(), "deleted".into());
                    }
                }
            }
        }
        for p in &self.packs {
            let dir = self.dir.join("pack");
            let pack_path = dir.join(format!("{}.pack", p.base));
            let idx_path = dir.join(format!("{}.idx", p.base));
            let pm = std::fs::symlink_metadata(&pack_path).ok();
            let im = std::fs::symlink_metadata(&idx_path).ok();
            if pm.as_ref().map(stamp) == Some(p.pack) && im.as_ref().map(stamp) == Some(p.idx) {
                continue;
            }
            if pm.is_some() && im.is_some() {
                // Still there but touched: its checksums must be what they were.
                for (path, trailer) in [(&pack_path, &p.pack_trailer), (&idx_path, &p.idx_trailer)]
                {
                    let how = match self.checksum_matches(path, trailer, &budget) {
                        Ok(true) => continue,
                        Ok(false) => "rewritten: its checksum changed".to_string(),
                        Err(e) => format!("unreadable: {e}"),
                    };
                    record(&mut damage, path.display().to_string(), how);
                }
                continue;
            }
            // Gone (a repack removes packs it superseded): its objects must be elsewhere.
            let names = match read_idx_names(&p.idx_file, hl) {
                Ok(n) => n,
                Err(e) => {
                    record(
                        &mut damage,
                        pack_path.display().to_string(),
                        format!("deleted, and its old index is unreadable: {e}"),
                    );
                    continue;
                }
            };
            for oid in &names {
                if !present_now(oid) {
                    record(
                        &mut damage,
                        hex(oid),
                        format!("deleted with {}.pack", p.base),
                    );
                }
            }
        }
        if unnamed > 0 {
            damage.push(Damage {
                what: format!("{unnamed} more"),
                how: "destroyed or changed (not listed one by one)".into(),
            });
        }
        damage
    }

    /// Whether a loose object whose ctime is `changed` was last changed before the snapshot:
    /// older than it by more than [`FINE_MARGIN`], or [`COARSE_MARGIN`] for a ctime of whole
    /// seconds (a filesystem that keeps no fraction; one in 10^9 of the others by chance).
    fn unchanged_since_snapshot(&self, changed: SystemTime) -> bool {
        let whole = changed
            .duration_since(UNIX_EPOCH)
            .map_or(true, |d| d.subsec_nanos() == 0);
        let margin = if whole || !self.local_times {
            COARSE_MARGIN
        } else {
            FINE_MARGIN
        };
        changed.checked_add(margin).is_some_and(|t| t < self.taken)
    }

    /// Whether the loose store was too big to record object by object.
    pub fn loose_truncated(&self) -> bool {
        self.loose_truncated
    }

    /// Every object name present now: loose files and every pack index.
    fn objects_now(&self) -> HashSet<Vec<u8>> {
        let hl = self.hash_len();
        let mut set = HashSet::new();
        for (fan, _, names) in loose_dirs(&self.dir) {
            for name in names {
                if let Some(raw) = unhex(&format!("{fan}{name}")) {
                    if raw.len() == hl {
                        set.insert(raw);
                    }
                }
            }
        }
        for base in pack_bases(&self.dir) {
            let idx = self.dir.join("pack").join(format!("{base}.idx"));
            if let Ok(f) = crate::paths::open_regular(&idx) {
                if let Ok(names) = read_idx_names(&f, hl) {
                    set.extend(names);
                }
            }
        }
        set
    }

    fn hasher(&self) -> Hasher {
        hasher(self.sha256)
    }

    /// The hash of a loose object's inflated content (its name when intact).
    ///
    /// # Errors
    /// Opening or inflating it, or `budget` (bytes left to hash in this check) spent.
    fn hash_loose(&self, path: &Path, budget: &std::cell::Cell<u64>) -> io::Result<Vec<u8>> {
        loose_object_id(path, self.sha256, budget)
    }

    /// Whether the file's trailing checksum (a hash of everything before it) is `trailer`
    /// and still correct.
    ///
    /// # Errors
    /// The file cannot be opened as a regular file ([`crate::paths::open_regular`]).
    fn checksum_matches(
        &self,
        path: &Path,
        trailer: &[u8],
        budget: &std::cell::Cell<u64>,
    ) -> io::Result<bool> {
        let hl = self.hash_len() as u64;
        let mut f = crate::paths::open_regular(path)?;
        let len = f.metadata()?.len();
        if len < hl || read_tail(path, hl).ok().as_deref() != Some(trailer) {
            return Ok(false);
        }
        let mut h = self.hasher();
        let mut left = len - hl;
        let mut buf = vec![0u8; 256 * 1024];
        while left > 0 {
            let want = buf.len().min(left as usize);
            if f.read_exact(&mut buf[..want]).is_err() {
                return Ok(false);
            }
            spend(budget, want)?;
            h.update(&buf[..want]);
            left -= want as u64;
        }
        Ok(h.finish() == trailer)
    }
}

/// The repository's object hash.
enum Hasher {
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl Hasher {
    fn update(&mut self, data: &[u8]) {
        use sha1::Digest as _;
        match self {
            Hasher::Sha1(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
        }
    }

    fn finish(self) -> Vec<u8> {
        use sha1::Digest as _;
        match self {
            Hasher::Sha1(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

/// Whether `path` is on a local filesystem that stamps files with this kernel's clock to the
/// nanosecond or to the second (statfs(2) `f_type`: ext2/3/4, XFS, Btrfs, tmpfs, F2FS, ZFS).
/// Anything else gets [`COARSE_MARGIN`]: NFS, CIFS and FUSE (a server's clock), bcachefs (its
/// `time_precision` can truncate a ctime by up to a second and still leave nanoseconds),
/// overlayfs (its upper filesystem's times), unknown types.
fn local_clock_fs(path: &Path) -> bool {
    const LOCAL: [i64; 6] = [
        0xEF53,      // ext2/3/4
        0x5846_5342, // XFS
        0x9123_683E, // Btrfs
        0x0102_1994, // tmpfs
        0xF2F5_2010, // F2FS
        0x2FC1_2FC1, // ZFS
    ];
    let Ok(st) = rustix::fs::statfs(path) else {
        return false;
    };
    #[allow(clippy::unnecessary_cast)] // f_type is i64 on x86-64, u32 elsewhere
    LOCAL.contains(&(st.f_type as i64))
}

/// `(two-hex-digit fan-out dir, its (device, inode), the names in it)` of a loose object
/// store (directories only, never through a symlink).
fn loose_dirs(objects: &Path) -> Vec<(String, (u64, u64), Vec<String>)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(objects) else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(fan) = e.file_name().into_string() else {
            continue;
        };
        if fan.len() != 2 || !fan.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let Some(id) = e.metadata().ok().filter(|m| m.is_dir()) else {
            continue;
        };
        let id = (id.dev(), id.ino());
        let Ok(sub) = std::fs::read_dir(e.path()) else {
            continue;
        };
        let entries = sub
            .flatten()
            .filter_map(|f| f.file_name().into_string().ok())
            .collect();
        out.push((fan, id, entries));
    }
    out
}

/// Most bytes one exit check hashes (inflated loose objects and touched packs together), and
/// one migration of the object quarantine inflates ([`crate::git::quarantine`]): a loose object
/// is the command's to write, and a 20 MB zlib bomb inflates to 21 GB — hard-linked over
/// every recorded object, it kept a supervisor hashing for hours. What is left when this is
/// spent is named as not verified (and fails the run).
pub(crate) const HASH_BUDGET: u64 = 4 << 30;

/// The error (kind `QuotaExceeded`) of [`loose_object_id_of`] for an object whose header
/// declares more bytes than are left of the budget: nothing of it was inflated.
#[derive(Debug)]
pub(crate) struct OverBudget {
    /// The bytes the object inflates to, header included, as its header declares.
    pub(crate) declared: u64,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not verified: it inflates to {} bytes, past the {} MiB budget",
            self.declared,
            HASH_BUDGET >> 20
        )
    }
}

impl std::error::Error for OverBudget {}

impl OverBudget {
    /// The [`OverBudget`] `e` carries, if it is one.
    pub(crate) fn of(e: &io::Error) -> Option<&OverBudget> {
        e.get_ref()?.downcast_ref()
    }
}

/// Takes `n` bytes from `budget`; an error once it is spent.
fn spend(budget: &std::cell::Cell<u64>, n: usize) -> io::Result<()> {
    let left = budget.get().checked_sub(n as u64).ok_or_else(|| {
        io::Error::other(format!(
            "not verified: the exit check hashes at most {} MiB",
            HASH_BUDGET >> 20
        ))
    })?;
    budget.set(left);
    Ok(())
}

/// A recorded loose object's entry when the run has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LooseNow {
    /// Nothing there (or it cannot be looked at).
    Absent,
    /// A regular file, last changed (ctime) then.
    File(SystemTime),
    /// A symlink, directory or special file.
    Other,
}

/// Below this many recorded loose objects, [`loose_now`] uses one thread.
const LOOSE_PER_THREAD: usize = 2048;

/// [`LooseNow`] of each of `oids` (hex names, as recorded: grouped by fan-out directory) in
/// `objects`: one `fstatat(AT_SYMLINK_NOFOLLOW)` each, relative to its fan-out directory
/// (opened once, `O_PATH`), on two threads for a large store. A store of 5,000 loose objects
/// spent ~18 ms here in one full-path `statx` per object (a path walk each) on the test VMs.
/// A fan-out directory that cannot be opened as a directory (a symlink put there) is looked
/// at through its path, as before.
fn loose_now(objects: &Path, oids: &[String]) -> Vec<LooseNow> {
    let part = |oids: &[String]| -> Vec<LooseNow> {
        let mut dir: Option<(&str, Option<std::os::fd::OwnedFd>)> = None;
        oids.iter()
            .map(|oid| {
                let (fan, name) = oid.split_at(2);
                if dir.as_ref().map(|(f, _)| *f) != Some(fan) {
                    let fd = crate::paths::open_dir_at_path(&objects.join(fan)).ok();
                    dir = Some((fan, fd));
                }
                match dir.as_ref().and_then(|(_, fd)| fd.as_ref()) {
                    Some(fd) => crate::paths::stat_at(fd, name).map_or(LooseNow::Absent, |st| {
                        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                            return LooseNow::Other;
                        }
                        LooseNow::File(ctime_at(st.st_ctime, st.st_ctime_nsec))
                    }),
                    None => match std::fs::symlink_metadata(objects.join(fan).join(name)) {
                        Ok(m) if m.is_file() => LooseNow::File(changed_at(&m)),
                        Ok(_) => LooseNow::Other,
                        Err(_) => LooseNow::Absent,
                    },
                }
            })
            .collect()
    };
    if oids.len() < LOOSE_PER_THREAD {
        return part(oids);
    }
    let (first, second) = oids.split_at(oids.len() / 2);
    std::thread::scope(|s| {
        let other = std::thread::Builder::new().spawn_scoped(s, || part(second));
        let mut all = part(first);
        // A thread that cannot start (or run) leaves its half to this one.
        all.extend(
            other
                .ok()
                .and_then(|t| t.join().ok())
                .unwrap_or_else(|| part(second)),
        );
        all
    })
}

/// `pack-<hash>` names that have a `.pack` in `objects/pack`.
fn pack_bases(objects: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(objects.join("pack")) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            n.strip_suffix(".pack").map(str::to_string)
        })
        .collect()
}

fn read_tail(path: &Path, n: u64) -> io::Result<Vec<u8>> {
    let mut f = crate::paths::open_regular(path)?;
    let len = f.metadata()?.len();
    if len < n {
        return Err(io::Error::other("too short"));
    }
    f.seek(SeekFrom::Start(len - n))?;
    let mut buf = vec![0u8; n as usize];
    f.read_exact(&mut buf)?;
    Ok(buf)
}

/// The object names of a pack index (version 2), from the start of `f`.
fn read_idx_names(f: &File, hash_len: usize) -> io::Result<Vec<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 8 + 256 * 4];
    f.read_exact_at(&mut head, 0)?;
    if head[..4] != [0xff, b't', b'O', b'c'] || head[4..8] != [0, 0, 0, 2] {
        return Err(io::Error::other("not a version 2 pack index"));
    }
    let count = u32::from_be_bytes(head[head.len() - 4..].try_into().expect("4 bytes")) as usize;
    // The count is the command's to write: it must fit the file (each entry also has a CRC
    // and an offset) and a bound, and the buffer is reserved, not assumed.
    let bytes = count * hash_len;
    let fits = (head.len() + count * (hash_len + 8)) as u64 <= f.metadata()?.len();
    if !fits || bytes > MAX_IDX_NAMES {
        return Err(io::Error::other(format!(
            "its object count ({count}) does not fit the file or exceeds {} MiB of names",
            MAX_IDX_NAMES >> 20
        )));
    }
    let mut names = Vec::new();
    names
        .try_reserve_exact(bytes)
        .map_err(|e| io::Error::other(format!("{count} object names: {e}")))?;
    names.resize(bytes, 0);
    f.read_exact_at(&mut names, head.len() as u64)?;
    Ok(names.chunks(hash_len).map(<[u8]>::to_vec).collect())
}

/// A new hasher for the object format (`sha256` or SHA-1).
fn hasher(sha256: bool) -> Hasher {
    use sha1::Digest as _;
    if sha256 {
        Hasher::Sha256(sha2::Sha256::new())
    } else {
        Hasher::Sha1(sha1::Sha1::new())
    }
}

/// The object name of the loose object at `path` (a regular file, not followed if a symlink):
/// the hash of its inflated content, `<type> <size>\0<content>` (gitformat-loose.txt).
///
/// # Errors
/// Opening or inflating it ([`crate::paths::open_regular`]), or `budget` (bytes left to
/// hash) spent.
pub(crate) fn loose_object_id(
    path: &Path,
    sha256: bool,
    budget: &std::cell::Cell<u64>,
) -> io::Result<Vec<u8>> {
    loose_object_id_of(crate::paths::open_regular(path)?, sha256, budget)
}

/// [`loose_object_id`] of a loose object's bytes read from `raw`.
///
/// Strict as git's own reader (object-file.c: `unpack_loose_header`, `parse_loose_header`,
/// `check_stream_oid`): a header git would refuse ([`object_header`]), content shorter or
/// longer than the size the header declares, a zlib stream that does not end, or bytes after
/// its end are errors (`InvalidData`). An object that passes here and hashes to its name is
/// one `git fsck` accepts as a loose file.
///
/// # Errors
/// Reading or inflating it, `InvalidData` for any of the above, or [`OverBudget`] when its
/// header declares more than `budget` holds (nothing is taken from it then).
pub(crate) fn loose_object_id_of(
    raw: impl Read,
    sha256: bool,
    budget: &std::cell::Cell<u64>,
) -> io::Result<Vec<u8>> {
    let mut z = Inflater::new(raw);
    let mut h = hasher(sha256);
    let (head, header, size) = read_header(&mut z)?;
    // The header's size bounds the work: git's own reader refuses an object whose stream
    // goes on past it, and a small file inflating without end (a zlib bomb) stops there.
    let limit = header
        .checked_add(size)
        .ok_or_else(|| invalid("its header declares a size that does not fit 64 bits"))?;
    let past = || {
        invalid(format!(
            "it inflates past the size its header declares ({size} bytes)"
        ))
    };
    let mut seen = head.len() as u64;
    if seen > limit {
        return Err(past());
    }
    // The declared size bounds the work below: an object the budget cannot cover whole is
    // not begun (its spent part would buy nothing).
    if limit > budget.get() {
        return Err(io::Error::new(
            io::ErrorKind::QuotaExceeded,
            OverBudget { declared: limit },
        ));
    }
    spend(budget, head.len())?;
    h.update(&head);
    // A tree, commit or tag is kept to be parsed as git would (a blob is any bytes).
    let kind = head
        .split(|&b| b == b' ')
        .next()
        .unwrap_or_default()
        .to_vec();
    let mut content = None;
    if kind != b"blob" {
        if size > MAX_PARSED {
            return Err(invalid(format!(
                "a {} of {size} bytes (more than {MAX_PARSED} are not read)",
                String::from_utf8_lossy(&kind)
            )));
        }
        content = Some(head[header as usize..].to_vec());
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // At most one byte past the declared end: enough to tell it goes on.
        let want = (limit - seen + 1).min(buf.len() as u64) as usize;
        let n = z.read(&mut buf[..want])?;
        if n == 0 {
            break;
        }
        seen += n as u64;
        if seen > limit {
            return Err(past());
        }
        spend(budget, n)?;
        h.update(&buf[..n]);
        if let Some(c) = content.as_mut() {
            c.extend_from_slice(&buf[..n]);
        }
    }
    if seen < limit {
        return Err(invalid(format!(
            "its header declares {size} bytes, it holds {}",
            seen - header
        )));
    }
    z.finish()?;
    if let Some(c) = content {
        crate::git::fsck::check(&kind, &c, if sha256 { 32 } else { 20 })?;
    }
    Ok(h.finish())
}

/// Largest tree, commit or tag read to be parsed (bytes).
const MAX_PARSED: u64 = 64 << 20;

/// The size a loose object's header declares, from its first compressed bytes.
///
/// # Errors
/// Reading or inflating them; `InvalidData` for a header git would not read
/// ([`object_header`]).
pub(crate) fn loose_object_size(raw: impl Read) -> io::Result<u64> {
    Ok(read_header(&mut Inflater::new(raw))?.2)
}

/// The longest loose object header read (`<type> <size>\0`; git's own limit is 32 bytes).
const MAX_HEADER: usize = 64;

/// Inflates the start of a loose object until its header's NUL (or [`MAX_HEADER`] bytes):
/// (the bytes inflated, the header's length with the NUL, the size it declares).
///
/// # Errors
/// Reading or inflating; `InvalidData` for a header git would not read ([`object_header`]).
fn read_header(z: &mut impl Read) -> io::Result<(Vec<u8>, u64, u64)> {
    let mut head = [0u8; MAX_HEADER];
    let mut got = 0;
    while got < head.len() && !head[..got].contains(&0) {
        let n = z.read(&mut head[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let (header, size) = object_header(&head[..got])?;
    Ok((head[..got].to_vec(), header, size))
}

/// An `InvalidData` error saying `why`.
fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// A loose object's header, `<type> <size>\0`, from the start of its inflated bytes: (its
/// length with the NUL, the size it declares). As git's `parse_loose_header`: the type is
/// `blob`, `tree`, `commit` or `tag`, one space, the size in decimal digits (no sign, no
/// leading zero unless it is `0`), the NUL.
///
/// # Errors
/// `InvalidData` when the first [`MAX_HEADER`] bytes hold no NUL, or the header is not as
/// above.
pub(crate) fn object_header(inflated: &[u8]) -> io::Result<(u64, u64)> {
    let head = &inflated[..inflated.len().min(MAX_HEADER)];
    let nul = head
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| invalid(format!("no object header in its first {MAX_HEADER} bytes")))?;
    let (kind, size) = head[..nul]
        .iter()
        .position(|&b| b == b' ')
        .map(|sp| (&head[..sp], &head[sp + 1..nul]))
        .ok_or_else(|| invalid("its header has no space between type and size"))?;
    if !matches!(kind, b"blob" | b"tree" | b"commit" | b"tag") {
        return Err(invalid(format!(
            "its header's type ({:?}) is not blob, tree, commit or tag",
            String::from_utf8_lossy(kind)
        )));
    }
    let canonical = !size.is_empty()
        && size.iter().all(u8::is_ascii_digit)
        && (size.len() == 1 || size[0] != b'0');
    if !canonical {
        return Err(invalid(format!(
            "its header's size ({:?}) is not decimal digits without a sign or leading zero",
            String::from_utf8_lossy(size)
        )));
    }
    let size = std::str::from_utf8(size)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| invalid("its header declares a size that does not fit 64 bits"))?;
    Ok((nul as u64 + 1, size))
}

/// A zlib stream read from a loose object file, strictly: [`Read::read`] returns 0 only at
/// the stream's end (`Z_STREAM_END`), a stream cut short is an error (flate2's readers end
/// it silently), and [`Inflater::finish`] refuses bytes after it in the file.
struct Inflater<R> {
    input: io::BufReader<R>,
    z: flate2::Decompress,
    ended: bool,
}

impl<R: Read> Inflater<R> {
    fn new(raw: R) -> Self {
        Inflater {
            input: io::BufReader::with_capacity(64 * 1024, raw),
            z: flate2::Decompress::new(true),
            ended: false,
        }
    }

    /// Checks the stream has ended and nothing follows it in the file.
    ///
    /// # Errors
    /// Reading; `InvalidData` when the stream has not ended or bytes follow it.
    fn finish(mut self) -> io::Result<()> {
        if !self.ended {
            return Err(invalid("its zlib stream does not end"));
        }
        if !io::BufRead::fill_buf(&mut self.input)?.is_empty() {
            return Err(invalid("bytes follow the end of its zlib stream"));
        }
        Ok(())
    }
}

impl<R: Read> Read for Inflater<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        use io::BufRead as _;
        if self.ended || out.is_empty() {
            return Ok(0);
        }
        loop {
            let input = self.input.fill_buf()?;
            let eof = input.is_empty();
            let flush = if eof {
                flate2::FlushDecompress::Finish
            } else {
                flate2::FlushDecompress::None
            };
            let (before_in, before_out) = (self.z.total_in(), self.z.total_out());
            let status = self
                .z
                .decompress(input, out, flush)
                .map_err(|e| invalid(format!("its zlib stream is corrupt: {e}")))?;
            let used = (self.z.total_in() - before_in) as usize;
            let made = (self.z.total_out() - before_out) as usize;
            self.input.consume(used);
            if status == flate2::Status::StreamEnd {
                self.ended = true;
                return Ok(made);
            }
            if made > 0 {
                return Ok(made);
            }
            if used == 0 {
                // No progress with room to write: the input is spent (or stuck).
                return Err(invalid(if eof {
                    "its zlib stream is cut short"
                } else {
                    "its zlib stream is corrupt"
                }));
            }
        }
    }
}

/// Lower-case hexadecimal of `b` (object ids, journal contents).
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of a hexadecimal string; `None` for odd length or a non-hex digit.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {

    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn repo() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        git(&root, &["init", "-q"]);
        std::fs::write(root.join("a"), "one\n").unwrap();
        git(&root, &["add", "a"]);
        git(&root, &["commit", "-qm", "one"]);
        git(&root, &["repack", "-adq"]);
        std::fs::write(root.join("b"), "two\n").unwrap();
        git(&root, &["add", "b"]);
        git(&root, &["commit", "-qm", "two"]);
        (tmp, root)
    }

    /// `bytes` compressed as git writes a loose object.
    fn deflate(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(bytes).unwrap();
        z.finish().unwrap()
    }

    fn id_of(file: &[u8]) -> io::Result<String> {
        loose_object_id_of(file, false, &std::cell::Cell::new(u64::MAX)).map(|id| hex(&id))
    }

    /// Loose objects whose name would be the hash of their inflated bytes but which git's
    /// reader refuses (`git fsck`/`git gc` fail on them) are refused here too, each saying
    /// why.
    #[test]
    fn loose_objects_git_would_reject_are_refused() {
        let mut cut = deflate(b"blob 5\0hello");
        cut.truncate(cut.len() - 4);
        let mut trailing = deflate(b"blob 5\0hello");
        trailing.extend_from_slice(b"junk");
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("a bad type", deflate(b"evil 5\0hello"), "type"),
            ("no space", deflate(b"blob5\0hello"), "no space"),
            ("no size", deflate(b"blob \0"), "size"),
            (
                "a size longer than the content",
                deflate(b"blob 100\0abc"),
                "its header declares 100 bytes, it holds 3",
            ),
            (
                "a size shorter than the content",
                deflate(b"blob 2\0abc"),
                "past the size its header declares",
            ),
            ("a sign", deflate(b"blob +5\0hello"), "sign"),
            ("a leading zero", deflate(b"blob 05\0hello"), "leading zero"),
            (
                "a zero size written 00",
                deflate(b"blob 00\0"),
                "leading zero",
            ),
            ("a space after the size", deflate(b"blob 5 \0hello"), "size"),
            (
                "a size past 64 bits",
                deflate(b"blob 99999999999999999999\0"),
                "64 bits",
            ),
            (
                "bytes after the content",
                deflate(b"blob 5\0hello, and more"),
                "past the size its header declares",
            ),
            ("no NUL", deflate(&[b'a'; 100]), "no object header"),
            ("bytes after the zlib stream", trailing, "follow the end"),
            ("a zlib stream cut short", cut, "cut short"),
            ("not zlib", b"blob 5\0hello".to_vec(), "corrupt"),
        ];
        for (what, file, says) in cases {
            let err = id_of(&file).expect_err(what);
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{what}: {err}");
            assert!(err.to_string().contains(says), "{what}: {err}");
        }
        for header in ["evil 5\0hello", "blob +5\0hello", "blob 05\0hello"] {
            let err = loose_object_size(&deflate(header.as_bytes())[..]).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{header:?}: {err}");
        }
    }

    /// What git writes is accepted: a blob and a commit from `git hash-object -w` and a real
    /// commit, the empty blob, each type; the size is read from the header alone.
    #[test]
    fn loose_objects_git_writes_are_accepted() {
        let (_t, root) = repo();
        let objects = root.join(".git/objects");
        std::fs::write(root.join("c"), "three\n").unwrap();
        let blob = git(&root, &["hash-object", "-w", "c"]);
        let commit = git(&root, &["rev-parse", "HEAD"]);
        let tree = git(&root, &["rev-parse", "HEAD^{tree}"]);
        let empty = git(&root, &["hash-object", "-w", "/dev/null"]);
        git(&root, &["tag", "-a", "-m", "a tag", "t1"]);
        let tag = git(&root, &["rev-parse", "t1"]);
        for oid in [&blob, &commit, &tree, &empty, &tag] {
            let path = objects.join(&oid[..2]).join(&oid[2..]);
            let budget = std::cell::Cell::new(u64::MAX);
            let id = loose_object_id(&path, false, &budget).unwrap();
            assert_eq!(&hex(&id), oid);
            let size = git(&root, &["cat-file", "-s", oid]);
            let file = std::fs::read(&path).unwrap();
            assert_eq!(loose_object_size(&file[..]).unwrap().to_string(), size);
        }
        assert_eq!(
            id_of(&deflate(b"blob 0\0")).unwrap(),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
        // A header split across reads of the stream (a small first output) still parses.
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::none());
        std::io::Write::write_all(&mut z, b"blob 5\0hello").unwrap();
        assert_eq!(
            id_of(&z.finish().unwrap()).unwrap(),
            "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"
        );
    }

    #[test]
    fn an_untouched_store_and_a_gc_are_not_damage() {
        let (_t, root) = repo();
        let objects = root.join(".git/objects");
        let store = ObjectStore::snapshot(&objects, false);
        assert!(!store.loose.is_empty() && !store.packs.is_empty());
        assert_eq!(store.check(), vec![]);
        git(&root, &["gc", "-q", "--prune=now"]);
        assert_eq!(store.check(), vec![]);
    }

    /// A snapshot taken now with the 50 ms margin whatever filesystem the test directory is on
    /// (a container's overlayfs would get 2 s: these tests change objects 130 ms before it).
    fn snapshot_now(objects: &Path) -> ObjectStore {
        let mut store = ObjectStore::snapshot_at(objects, false, SystemTime::now());
        store.local_times = true;
        store
    }

    /// A ctime with nanoseconds counts as before the snapshot past a few ticks of the coarse
    /// clock; one of whole seconds (a filesystem that keeps no fraction) only past 2 s.
    #[test]
    fn the_margin_before_the_snapshot_follows_the_ctime_s_precision() {
        let dir = tempfile::tempdir().unwrap();
        let taken = UNIX_EPOCH + std::time::Duration::new(1_000_000, 500_000_000);
        let mut store = ObjectStore::snapshot_at(dir.path(), false, taken);
        store.local_times = true;
        let at = |secs: u64, nanos: u32| UNIX_EPOCH + std::time::Duration::new(secs, nanos);
        assert!(store.unchanged_since_snapshot(at(1_000_000, 400_000_000)));
        assert!(!store.unchanged_since_snapshot(at(1_000_000, 460_000_000)));
        assert!(!store.unchanged_since_snapshot(at(1_000_000, 600_000_000)));
        assert!(!store.unchanged_since_snapshot(at(1_000_000, 0)));
        assert!(!store.unchanged_since_snapshot(at(999_999, 0)));
        assert!(store.unchanged_since_snapshot(at(999_998, 0)));
        // A network filesystem's times come from its server's clock: 2 s whatever they hold.
        store.local_times = false;
        assert!(!store.unchanged_since_snapshot(at(1_000_000, 400_000_000)));
        assert!(store.unchanged_since_snapshot(at(999_998, 400_000_000)));
    }

    /// A loose object changed before the snapshot is not this run's doing (and is not read);
    /// one rewritten in place after it, same size, same inode, is found.
    #[test]
    fn only_loose_objects_changed_since_the_snapshot_are_hashed() {
        use std::io::Write;
        let (_t, root) = repo();
        let objects = root.join(".git/objects");
        let blob = git(&root, &["rev-parse", "HEAD:b"]);
        let path = objects.join(&blob[..2]).join(&blob[2..]);
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        let spoil = || {
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all(&vec![b'x'; len]).unwrap();
        };
        let mut perm = std::fs::metadata(&path).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perm.set_readonly(false);
        std::fs::set_permissions(&path, perm).unwrap();
        spoil();
        // The change is 130 ms before the snapshot: past its margin for a ctime with
        // nanoseconds (FINE_MARGIN, 50 ms).
        std::thread::sleep(std::time::Duration::from_millis(130));
        let store = snapshot_now(&objects);
        assert_eq!(store.check(), vec![]);
        spoil();
        let damage = store.check();
        assert_eq!(damage.len(), 1, "{damage:?}");
        assert_eq!(damage[0].what, blob, "{damage:?}");
    }

    /// A rewritten loose object that inflates past what is left of the budget is named as
    /// not verified: a zlib bomb cannot keep the supervisor hashing.
    #[test]
    fn hashing_at_exit_is_bounded() {
        use std::io::Write;
        let (_t, root) = repo();
        let objects = root.join(".git/objects");
        let blob = git(&root, &["rev-parse", "HEAD:b"]);
        let path = objects.join(&blob[..2]).join(&blob[2..]);
        std::thread::sleep(std::time::Duration::from_millis(130));
        let store = snapshot_now(&objects);
        std::fs::remove_file(&path).unwrap();
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(format!("blob {}\0", 4 << 20).as_bytes())
            .unwrap();
        z.write_all(&vec![0u8; 4 << 20]).unwrap();
        std::fs::write(&path, z.finish().unwrap()).unwrap();
        let damage = store.check_within(1 << 20);
        assert_eq!(damage.len(), 1, "{damage:?}");
        assert!(damage[0].how.contains("not verified"), "{damage:?}");
    }

    /// A pack index the command wrote, claiming 2^32-1 objects, is an error, not an
    /// allocation of 80 GiB (which aborted the supervisor).
    #[test]
    fn a_forged_pack_index_count_is_refused() {
        use std::io::Write;
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("pack-0.idx");
        let mut f = File::create(&path).unwrap();
        f.write_all(&[0xff, b't', b'O', b'c', 0, 0, 0, 2]).unwrap();
        f.write_all(&[0u8; 1020]).unwrap();
        f.write_all(&u32::MAX.to_be_bytes()).unwrap();
        drop(f);
        let err = read_idx_names(&File::open(&path).unwrap(), 20).unwrap_err();
        assert!(err.to_string().contains("does not fit"), "{err}");
    }

    /// A store large enough for two threads: an object rewritten in each half of the record,
    /// and one replaced by a FIFO, are named.
    #[test]
    fn a_large_store_is_checked_whole() {
        use std::io::Write;
        let (t, root) = repo();
        let objects = root.join(".git/objects");
        let blobs = t.path().join("blobs");
        std::fs::create_dir(&blobs).unwrap();
        let mut list = String::new();
        for i in 0..LOOSE_PER_THREAD + 100 {
            let f = blobs.join(i.to_string());
            std::fs::write(&f, format!("blob {i}")).unwrap();
            list.push_str(&format!("{}\n", f.display()));
        }
        let mut hash = std::process::Command::new("git")
            .args(["hash-object", "-w", "--stdin-paths"])
            .current_dir(&root)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        hash.stdin
            .take()
            .unwrap()
            .write_all(list.as_bytes())
            .unwrap();
        assert!(hash.wait().unwrap().success());
        std::thread::sleep(std::time::Duration::from_millis(130));
        let store = snapshot_now(&objects);
        assert!(
            store.loose.len() > LOOSE_PER_THREAD,
            "{}",
            store.loose.len()
        );
        assert_eq!(store.check(), vec![]);
        let (first, last) = (&store.loose[0], &store.loose[store.loose.len() - 1]);
        let middle = &store.loose[store.loose.len() / 2];
        for oid in [first, last] {
            let path = objects.join(&oid[..2]).join(&oid[2..]);
            std::fs::remove_file(&path).unwrap();
            std::fs::write(&path, b"forged").unwrap();
        }
        let fifo = objects.join(&middle[..2]).join(&middle[2..]);
        std::fs::remove_file(&fifo).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_bits_retain(0o600),
            0,
        )
        .unwrap();
        let mut named: Vec<(String, String)> =
            store.check().into_iter().map(|d| (d.what, d.how)).collect();
        named.sort();
        let mut want = vec![
            (first.clone(), "unreadable"),
            (last.clone(), "unreadable"),
            (middle.clone(), "replaced by a non-file"),
        ];
        want.sort();
        assert_eq!(named.len(), 3, "{named:?}");
        for ((what, how), (w, h)) in named.iter().zip(&want) {
            assert_eq!(what, w);
            assert!(how.starts_with(h), "{what}: {how}");
        }
    }

    /// A fan-out directory moved out of the store and replaced by a symlink to it keeps every
    /// file as it was (names, ctimes, contents), and git still finds them — until the place it
    /// was moved to goes away. The directory itself is named.
    #[test]
    fn a_fanout_directory_moved_away_behind_a_symlink_is_named() {
        let (_t, root) = repo();
        let objects = root.join(".git/objects");
        let blob = git(&root, &["rev-parse", "HEAD:b"]);
        let store = ObjectStore::snapshot(&objects, false);
        let fan = objects.join(&blob[..2]);
        let away = root.join("away");
        std::fs::rename(&fan, &away).unwrap();
        std::os::unix::fs::symlink(&away, &fan).unwrap();
        git(&root, &["cat-file", "-e", &blob]);
        let damage = store.check();
        assert_eq!(damage.len(), 1, "{damage:?}");
        assert_eq!(damage[0].what, fan.display().to_string());
    }

    /// A fan-out directory swapped for another one holding a forged object under an existing
    /// name, written well before the snapshot (a rename keeps the files' ctimes): the object
    /// is hashed and named.
    #[test]
    fn a_fanout_directory_swapped_for_a_forged_one_is_hashed() {
        let (_t, root) = repo();
        let objects = root.join(".git/objects");
        let blob = git(&root, &["rev-parse", "HEAD:b"]);
        let other = git(&root, &["rev-parse", "HEAD"]);
        let fan = objects.join(&blob[..2]);
        let forged = root.join("forged");
        std::fs::create_dir(&forged).unwrap();
        std::fs::copy(
            objects.join(&other[..2]).join(&other[2..]),
            forged.join(&blob[2..]),
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(130));
        let store = snapshot_now(&objects);
        std::fs::rename(&fan, root.join("old")).unwrap();
        std::fs::rename(&forged, &fan).unwrap();
        let damage = store.check();
        assert!(
            damage
                .iter()
                .any(|d| d.what == blob && d.how.starts_with("rewritten")),
            "{damage:?}"
        );
    }

    #[test]
    fn a_deleted_or_rewritten_loose_object_and_a_deleted_pack_are_named() {
        let (_t, root) = repo();
        let objects = root.join(".git/objects");
        let store = ObjectStore::snapshot(&objects, false);
        let blob = git(&root, &["rev-parse", "HEAD:b"]);
        let first = git(&root, &["rev-parse", "HEAD~1:a"]);
        let path = objects.join(&blob[..2]).join(&blob[2..]);
        // Rewritten under the same name with another object's bytes.
        let other = git(&root, &["rev-parse", "HEAD"]);
        let other_path = objects.join(&other[..2]).join(&other[2..]);
        std::fs::remove_file(&path).unwrap();
        std::fs::copy(&other_path, &path).unwrap();
        std::fs::remove_file(&other_path).unwrap();
        for e in std::fs::read_dir(objects.join("pack")).unwrap().flatten() {
            std::fs::remove_file(e.path()).unwrap();
        }
        let damage = store.check();
        let find = |oid: &str| damage.iter().find(|d| d.what == oid).map(|d| d.how.clone());
        assert!(find(&blob).unwrap().starts_with("rewritten"), "{damage:?}");
        assert_eq!(find(&other).as_deref(), Some("deleted"), "{damage:?}");
        assert!(
            find(&first).unwrap().starts_with("deleted with pack-"),
            "{damage:?}"
        );
    }
}
