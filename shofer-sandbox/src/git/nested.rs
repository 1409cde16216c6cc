//! Nested repositories the host's git would enter through a gitlink.
//!
//! `git status` recurses into every gitlink (a submodule entry, mode 160000) of the index
//! whose directory holds a repository, and runs git there: that repository's `config` is read,
//! so a `core.fsmonitor` naming a program runs it on the host; and that git recurses into the
//! gitlinks of *its* index in turn. The command can create such repositories inside the
//! worktree and register them (`git add sub`), since the index is writable. Registered
//! submodules normally keep their gitdir in `<common>/modules/`, which is protected
//! ([`crate::git::protect`]); a repository whose gitdir lies in the writable set is the
//! command's to write.
//!
//! [`NestedScan::check`] reads the index (format: git's Documentation/gitformat-index.txt,
//! versions 2-4, with a split index's shared index), follows each gitlink to its gitdir and
//! common dir, reads that repository's index and follows its gitlinks the same way (from its
//! `core.worktree`, when set), and *quarantines* every configuration file in the writable set
//! that [`crate::git::nestedconfig::judge`] does not keep (an allow-list: every key must be one git
//! reads as data): it is renamed to `<name>.shofer-quarantined-<random>` (kept, never
//! deleted), so the host's git reads no configuration there. It runs whenever
//! the index changes, periodically while gitlinks exist (the watcher of
//! [`crate::git::guard`]), and when the command ends; between the command's write and the check
//! a host git could still read the file: a named gap on every backend
//! ([`crate::git::guard::NESTED_GAP`]). A nested
//! repository's `hooks/` holding anything but samples is moved aside too. One check follows
//! at most [`MAX_GITLINKS`] gitlinks, [`MAX_DEPTH`] deep, and reads at most [`CHECK_BUDGET`]
//! bytes of nested indexes and configurations: what it leaves unread (a configuration, an
//! index, the `.git` of a gitlink past the limit) is moved aside, so that git cannot read
//! it either.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

/// Most bytes of an index read into memory, where its entries must lie; past them only the
/// extension headers are read ([`IndexBytes`]).
const MAX_INDEX: usize = 256 << 20;
/// Largest nested configuration checked (bytes); a bigger one is moved aside unread.
const MAX_CONFIG: usize = 4 << 20;
/// Largest `.git` or `commondir` pointer file followed (bytes; git refuses a larger `.git`).
const MAX_POINTER: usize = 1 << 20;
/// Longest gitlink path followed (`PATH_MAX`: git cannot reach a longer one either).
const MAX_PATH: usize = libc::PATH_MAX as usize;
/// Most gitlinks followed per check, over every level.
const MAX_GITLINKS: usize = 4096;
/// Longest chain of repositories followed (a gitlink in a gitlinked repository, …).
const MAX_DEPTH: usize = 16;
/// Bytes of nested indexes and configurations one check reads (besides the worktree's own
/// index): the check is bounded however many or large the repositories the command makes.
pub const CHECK_BUDGET: usize = 256 << 20;

/// One configuration file taken out of the host's reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// Where it was.
    pub path: PathBuf,
    /// Where it is now.
    pub moved_to: PathBuf,
    /// The key that named a program.
    pub key: String,
}

/// What one check did.
#[derive(Debug, Default)]
pub struct Checked {
    /// Files moved aside.
    pub quarantined: Vec<Quarantined>,
    /// Files that should have been moved aside (or read) but could not be, with why.
    pub failed: Vec<(PathBuf, String)>,
}

/// The index to read, the worktree it belongs to and the writable set.
#[derive(Debug, Clone)]
pub struct NestedScan {
    worktree: PathBuf,
    /// The writable set's roots (canonical): a nested repository's configuration beneath one
    /// is the command's to write.
    writable: Vec<PathBuf>,
    /// The index file (`<gitdir>/index`).
    pub index: PathBuf,
    hash_len: usize,
    /// The index's bytes, read again into the same buffer at every check (a fresh buffer of a
    /// large index costs a page fault per page each time).
    buf: Vec<u8>,
}

/// A repository git enters at a gitlink.
struct Entered {
    /// Its gitdir (canonical).
    gitdir: PathBuf,
    /// The configuration files git reads there, in git's order (the common dir's `config`,
    /// then the gitdir's `config.worktree`), whatever is at their path: each as the directory
    /// it is in (opened once, so that what is judged and what is moved aside are in the
    /// directory git resolved, whatever the command renames meanwhile), that directory's
    /// path and the name.
    configs: Vec<Config>,
    /// Its hooks directory (`<common>/hooks`), whatever is at that path.
    hooks: PathBuf,
}

/// A configuration file of an entered repository.
struct Config {
    dir: std::os::fd::OwnedFd,
    /// The path of `dir` as the kernel names it (`/proc/self/fd`): what decides whether the
    /// file is the command's to write.
    dir_path: PathBuf,
    name: &'static str,
}

impl Config {
    fn path(&self) -> PathBuf {
        self.dir_path.join(self.name)
    }
}

/// The directory at `path` (followed, as git follows it), opened, and its path as the kernel
/// names the opened directory.
fn open_dir(path: &Path) -> Option<(std::os::fd::OwnedFd, PathBuf)> {
    let fd = crate::paths::open_following(path).ok()?;
    if crate::paths::kind(&fd).ok()? != crate::paths::Kind::Dir {
        return None;
    }
    let named = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    ))
    .or_else(|_| std::fs::canonicalize(path))
    .ok()?;
    Some((fd, named))
}

/// One check's state: what it read, and how much more it may read.
struct Pass {
    out: Checked,
    budget: usize,
    /// Configurations judged safe (device, inode), with the `core.worktree` values they
    /// set: one file behind many gitlinks is read once.
    configs_seen: Vec<((u64, u64), Vec<String>)>,
    /// Repositories followed: gitdir and the worktree its gitlinks were taken relative to
    /// (their bytes, joined by a NUL).
    entered: HashSet<Vec<u8>>,
    links: usize,
}

/// Most entries of a nested `hooks/` directory looked at; one with more is moved aside.
const MAX_HOOKS: usize = 4096;

impl NestedScan {
    /// A scan for the worktree whose gitdir is `gitdir` (`sha256`: the repository's
    /// `extensions.objectFormat`), with the writable set's roots `writable` (canonical; the
    /// worktree is one).
    pub fn new(worktree: &Path, gitdir: &Path, sha256: bool, writable: &[PathBuf]) -> NestedScan {
        NestedScan {
            worktree: worktree.to_path_buf(),
            writable: writable.to_vec(),
            index: gitdir.join("index"),
            hash_len: if sha256 { 32 } else { 20 },
            buf: Vec::new(),
        }
    }

    /// Reads the index and quarantines every program-naming configuration of a nested
    /// repository (in the writable set) that a chain of gitlinks leads the host's git to.
    /// Also returns how many gitlinks it followed, over every level.
    pub fn check(&mut self) -> (Checked, usize) {
        let mut pass = Pass {
            out: Checked::default(),
            budget: CHECK_BUDGET,
            configs_seen: Vec::new(),
            entered: HashSet::new(),
            links: 0,
        };
        // Read whole at every check: no stamp tells it unchanged (a write through a shared
        // mapping moves its ctime only at the first fault).
        let links = match index_gitlinks(&self.index, &[self.hash_len], MAX_INDEX, &mut self.buf) {
            Ok((l, _)) => l,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return (pass.out, 0),
            Err(e) => {
                pass.out
                    .failed
                    .push((self.index.clone(), format!("reading the index: {e}")));
                return (pass.out, 0);
            }
        };
        // Depth first, each repository with the worktree its gitlinks are relative to.
        let mut todo = vec![(self.worktree.clone(), links, 0)];
        let mut nested_buf = Vec::new();
        while let Some((worktree, links, depth)) = todo.pop() {
            for rel in links {
                pass.links += 1;
                let dir = worktree.join(&rel);
                if pass.links > MAX_GITLINKS {
                    // Not followed: git must not enter it either.
                    let dot = dir.join(".git");
                    if std::fs::symlink_metadata(&dot).is_ok() {
                        let why = format!("(beyond the {MAX_GITLINKS} gitlinks a check follows)");
                        self.quarantine(&dot, why, &mut pass.out);
                    }
                    continue;
                }
                let Some(repo) = self.enter(&dir, &mut pass) else {
                    continue;
                };
                self.judge_hooks(&repo.hooks, &mut pass.out);
                // Git runs in the gitlink's directory, or where `core.worktree` says (when
                // it honours it: every value is followed, wherever git would take it from).
                let mut worktrees = vec![dir];
                worktrees.extend(self.judge_configs(&repo, &mut pass));
                let index = repo.gitdir.join("index");
                // Its object format is the command's to set: read with either.
                let max = pass.budget.min(MAX_INDEX);
                let links = match index_gitlinks(&index, &[20, 32], max, &mut nested_buf) {
                    Ok((links, read)) => {
                        pass.budget -= read.min(pass.budget);
                        links
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                    // Git may enter gitlinks this one names; they cannot be followed.
                    Err(e) => {
                        let why = not_checkable(&e);
                        self.quarantine(&index, why, &mut pass.out);
                        Vec::new()
                    }
                };
                if links.is_empty() {
                    continue;
                }
                for worktree in worktrees {
                    let mut key = repo.gitdir.as_os_str().as_encoded_bytes().to_vec();
                    key.push(0);
                    key.extend_from_slice(worktree.as_os_str().as_encoded_bytes());
                    if !pass.entered.insert(key) {
                        continue;
                    }
                    if depth + 1 >= MAX_DEPTH {
                        let why = format!("(gitlinks nested more than {MAX_DEPTH} deep)");
                        self.quarantine(&index, why, &mut pass.out);
                        break;
                    }
                    todo.push((worktree, links.clone(), depth + 1));
                }
            }
        }
        (pass.out, pass.links)
    }

    /// Whether `p` is beneath a root of the writable set.
    fn writable(&self, p: &Path) -> bool {
        self.writable.iter().any(|w| p.starts_with(w))
    }

    /// The repository git enters at `dir`, if any. `dir/.git` is followed as git follows it
    /// (`read_gitfile_gently` and `get_common_dir_noenv` in git's setup.c): a symlink to a
    /// directory is a gitdir; a file of at most 1 MiB starting `gitdir: ` names one, up to
    /// its first NUL, without its trailing newlines and carriage returns (any other byte, a
    /// space too, is part of the path); `commondir` the same, without prefix. A pointer file
    /// in the writable set that cannot be followed is moved aside.
    fn enter(&self, dir: &Path, pass: &mut Pass) -> Option<Entered> {
        use std::os::unix::ffi::OsStrExt;
        let pointer = |bytes: &[u8]| -> PathBuf {
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            let mut b = &bytes[..end];
            while let [rest @ .., b'\n' | b'\r'] = b {
                b = rest;
            }
            PathBuf::from(std::ffi::OsStr::from_bytes(b))
        };
        // A pointer through /proc or /dev (`/proc/self/cwd/…`) leads each git process
        // elsewhere: moved aside.
        let magic = |p: &Path| crate::paths::through_proc_or_dev(p);
        let why_magic = || "(leads through /proc or /dev)".to_string();
        let dot_path = dir.join(".git");
        if magic(&dot_path) {
            self.quarantine(&dot_path, why_magic(), &mut pass.out);
            return None;
        }
        let dot = std::fs::canonicalize(&dot_path).ok()?;
        let gitdir = if dot.is_dir() {
            dot
        } else {
            match crate::paths::read_regular(&dot, MAX_POINTER) {
                Ok(bytes) => dir.join(pointer(bytes.strip_prefix(b"gitdir: ")?)),
                Err(e) => {
                    self.quarantine(&dot_path, not_checkable(&e), &mut pass.out);
                    return None;
                }
            }
        };
        if magic(&gitdir) {
            self.quarantine(&dot_path, why_magic(), &mut pass.out);
            return None;
        }
        let gitdir = std::fs::canonicalize(&gitdir).ok()?;
        let mut dirs = vec![gitdir.clone()];
        let commondir = gitdir.join("commondir");
        match crate::paths::read_regular(&commondir, MAX_POINTER) {
            Ok(bytes) => {
                let common = gitdir.join(pointer(&bytes));
                if magic(&common) {
                    self.quarantine(&commondir, why_magic(), &mut pass.out);
                    return None;
                }
                if let Ok(common) = std::fs::canonicalize(common) {
                    dirs.insert(0, common);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => self.quarantine(&commondir, not_checkable(&e), &mut pass.out),
        }
        let mut configs: Vec<Config> = Vec::new();
        for d in &dirs {
            let Some((dir, dir_path)) = open_dir(d) else {
                continue;
            };
            for name in ["config", "config.worktree"] {
                let known = configs
                    .iter()
                    .any(|c| c.dir_path == dir_path && c.name == name);
                if !known && crate::paths::stat_at(&dir, name).is_ok() {
                    let Ok(dir) = dir.try_clone() else { continue };
                    configs.push(Config {
                        dir,
                        dir_path: dir_path.clone(),
                        name,
                    });
                }
            }
        }
        let hooks = dirs[0].join("hooks");
        Some(Entered {
            gitdir,
            configs,
            hooks,
        })
    }

    /// Moves a nested repository's `hooks/` aside (when it is the command's to write) if it
    /// holds anything but git's `*.sample` files, or is not a directory: git runs a hook
    /// there from the host's `git status` (`post-index-change`, when it refreshes the
    /// index), with no configuration needed.
    fn judge_hooks(&self, hooks: &Path, out: &mut Checked) {
        let why = match std::fs::symlink_metadata(hooks) {
            Err(_) => return,
            Ok(m) if !m.is_dir() => "(not a directory)".to_string(),
            Ok(_) => match std::fs::read_dir(hooks) {
                Err(e) => not_checkable(&e),
                Ok(entries) => {
                    let mut entries = entries.take(MAX_HOOKS + 1).enumerate();
                    let found = entries.find_map(|(i, e)| {
                        let name = match e {
                            Ok(e) => e.file_name(),
                            Err(e) => return Some(not_checkable(&e)),
                        };
                        if i == MAX_HOOKS {
                            return Some(format!("(more than {MAX_HOOKS} entries)"));
                        }
                        let name = name.to_string_lossy();
                        (!name.ends_with(".sample")).then(|| format!("hooks/{name}"))
                    });
                    match found {
                        Some(why) => why,
                        None => return,
                    }
                }
            },
        };
        self.quarantine(hooks, why, out);
    }

    /// Reads `repo`'s configuration files: each one in the writable set that names a program
    /// (or cannot be read as git would read it: a symlink, a FIFO, too large, past the
    /// budget) is moved aside. Returns every `core.worktree` the remaining ones set
    /// (relative to the gitdir, resolved): git may run there, and take its gitlinks relative
    /// to it.
    fn judge_configs(&self, repo: &Entered, pass: &mut Pass) -> Vec<PathBuf> {
        let mut values = Vec::new();
        for config in &repo.configs {
            match self.judge_config(config, &repo.gitdir, pass) {
                Some(v) => values.extend(v),
                None => continue,
            }
        }
        values
            .iter()
            .filter_map(|v| std::fs::canonicalize(repo.gitdir.join(v)).ok())
            .collect()
    }

    /// One configuration file: its `core.worktree` values when it stays, `None` when it is
    /// moved aside or cannot be read. One in the writable set stays only when every key is
    /// on the allow-list ([`crate::git::nestedconfig`]) and its `core.worktree` leads nowhere
    /// through /proc or /dev; one outside is the user's own, read only for its worktree.
    fn judge_config(&self, config: &Config, gitdir: &Path, pass: &mut Pass) -> Option<Vec<String>> {
        let writable = self.writable(&config.dir_path);
        let ((dev, ino), bytes) = match read_config(config, pass) {
            Ok((id, bytes)) => match pass.configs_seen.iter().find(|(seen, _)| *seen == id) {
                Some((_, values)) => return Some(values.clone()),
                None => (id, bytes),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.quarantine_in(config, not_checkable(&e), &mut pass.out);
                return None;
            }
        };
        let worktrees = |entries: Vec<(String, String, String)>| -> Vec<String> {
            entries
                .into_iter()
                .filter(|(s, k, _)| s == "core" && k == "worktree")
                .map(|(_, _, v)| v)
                .collect()
        };
        let values = if writable {
            let entries = match crate::git::nestedconfig::judge(&bytes) {
                Ok(entries) => entries,
                Err(why) => {
                    self.quarantine_in(config, why.to_string(), &mut pass.out);
                    return None;
                }
            };
            let values = worktrees(
                entries
                    .into_iter()
                    .map(|e| (e.section, e.key, e.value.unwrap_or_default()))
                    .collect(),
            );
            // A worktree through /proc or /dev is another one for each git process.
            if values
                .iter()
                .any(|v| crate::paths::through_proc_or_dev(&gitdir.join(v)))
            {
                let why = "core.worktree (leads through /proc or /dev)".to_string();
                self.quarantine_in(config, why, &mut pass.out);
                return None;
            }
            values
        } else {
            worktrees(crate::git::protect::config_entries(
                &String::from_utf8_lossy(&bytes),
            ))
        };
        pass.configs_seen.push(((dev, ino), values.clone()));
        Some(values)
    }

    /// Moves the configuration `config` aside ([`Self::quarantine`]), relative to the
    /// directory it was read from.
    fn quarantine_in(&self, config: &Config, key: String, out: &mut Checked) {
        let path = config.path();
        if !self.writable(&config.dir_path) {
            return;
        }
        let mut new_name = std::ffi::OsString::from(config.name);
        new_name.push(format!(
            ".shofer-quarantined-{}",
            shofer_sys::statedir::random_suffix()
        ));
        match crate::paths::rename_noreplace_at(&config.dir, config.name.as_ref(), &new_name) {
            Ok(()) => out.quarantined.push(Quarantined {
                moved_to: config.dir_path.join(&new_name),
                path,
                key,
            }),
            Err(e) => out.failed.push((path, e.to_string())),
        }
    }

    /// Moves `path` aside to `<path>.shofer-quarantined-<random>` when it is in the writable
    /// set, noting it (with `key`, what it named) or the failure in `out`. The rename is made
    /// relative to its directory, opened with no symlink on the way (`paths::open_nofollow`):
    /// the command cannot redirect it outside the writable set by swapping a directory for a
    /// symlink after the check.
    fn quarantine(&self, path: &Path, key: String, out: &mut Checked) {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return;
        };
        // A parent through a magic link is another directory for us (git enters no gitlink
        // behind a symlink anyway).
        if crate::paths::through_proc_or_dev(parent) {
            return;
        }
        let Ok(parent) = std::fs::canonicalize(parent) else {
            return;
        };
        if !self.writable(&parent) {
            return;
        }
        let path = parent.join(name);
        // Built from the path's bytes: `display()` would replace a non-UTF-8 byte.
        let mut new_name = name.to_os_string();
        new_name.push(format!(
            ".shofer-quarantined-{}",
            shofer_sys::statedir::random_suffix()
        ));
        let moved = crate::paths::open_nofollow(&parent)
            .and_then(|dir| crate::paths::rename_noreplace_at(&dir, name, &new_name));
        match moved {
            Ok(()) => out.quarantined.push(Quarantined {
                moved_to: parent.join(&new_name),
                path,
                key,
            }),
            Err(e) => out.failed.push((path, e.to_string())),
        }
    }
}

/// The key noted for what is moved aside because it could not be read: why.
fn not_checkable(e: &io::Error) -> String {
    format!("(not checkable: {e})")
}

/// The identity (device, inode) and bytes of the configuration file `config` (a regular
/// file of at most [`MAX_CONFIG`] bytes, within `pass`'s budget); the bytes are empty, unread,
/// when that file was judged already this pass.
fn read_config(config: &Config, pass: &mut Pass) -> io::Result<((u64, u64), Vec<u8>)> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let file = crate::paths::open_regular_in(&config.dir, config.name)?;
    let meta = file.metadata()?;
    let id = (meta.dev(), meta.ino());
    if pass.configs_seen.iter().any(|(seen, _)| *seen == id) {
        return Ok((id, Vec::new()));
    }
    let max = MAX_CONFIG.min(pass.budget);
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes (the check reads at most {CHECK_BUDGET} bytes)"),
        ));
    }
    pass.budget -= bytes.len();
    Ok((id, bytes))
}

/// Gitlink paths of the index at `index`, with a split index's shared index
/// (`sharedindex.<id>` beside it): `hash_lens` are the object-name lengths to read it with
/// (one, or both when the repository's format is the command's to set). Each file is read as
/// a regular file (a symlink to one is followed, as git follows it; the command can put a
/// FIFO or a symlink to `/dev/zero` there): its first `max` bytes (the two files together),
/// where the entries must lie, and past them only the extensions' headers and the few git
/// acts on ([`IndexBytes`]: git skips an extension it does not know, so padding one must not
/// hide the rest). Also returns the bytes read into memory.
///
/// # Errors
/// open(2) and read(2) failures; `InvalidData` for something else than a regular file, or
/// one that is not an index with any of `hash_lens` within those bounds.
fn index_gitlinks(
    index: &Path,
    hash_lens: &[usize],
    max: usize,
    buf: &mut Vec<u8>,
) -> io::Result<(Vec<PathBuf>, usize)> {
    let file = read_head(index, max, buf)?;
    let src = IndexBytes::of(buf, &file)?;
    let mut read = buf.len();
    let mut links = Vec::new();
    let mut parsed = false;
    for &hash_len in hash_lens {
        let Some(found) = parse_index(&src, hash_len) else {
            continue;
        };
        parsed = true;
        links.extend(found.gitlinks);
        for (base, replaced) in found.shared {
            // Git reads `<gitdir>/sharedindex.<id>`, else the one beside the index: the same
            // directory here.
            let shared = index.with_file_name(format!("sharedindex.{base}"));
            let mut bytes = Vec::new();
            let file = match read_head(&shared, max.saturating_sub(read), &mut bytes) {
                Ok(file) => file,
                // Git stops at a missing shared index: it enters nothing.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let shared_src = IndexBytes::of(&bytes, &file)?;
            let shared_links =
                shared_gitlinks(&shared_src, hash_len, &replaced).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "malformed shared index")
                })?;
            read += bytes.len() + shared_src.from_file.get();
            links.extend(shared_links);
        }
    }
    read += src.from_file.get();
    if !parsed {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "malformed index",
        ));
    }
    links.sort();
    links.dedup();
    Ok((links, read))
}

/// Opens the index file at `path` (resolved, as git follows a symlink there) as a regular
/// file and reads its first `max` bytes into `buf`; returns the file for the rest.
fn read_head(path: &Path, max: usize, buf: &mut Vec<u8>) -> io::Result<std::fs::File> {
    use std::io::Read;
    if crate::paths::through_proc_or_dev(path) {
        // `/proc/self/cwd/…` is another file for each git process.
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "it leads through /proc or /dev",
        ));
    }
    let file = crate::paths::open_regular(&std::fs::canonicalize(path)?)?;
    buf.clear();
    (&file).take(max as u64).read_to_end(buf)?;
    Ok(file)
}

/// Largest extension body read from past an index's first bytes (a `link` extension's
/// bitmaps, an offset table): bigger is no index git wrote.
const MAX_EXTENSION: usize = 64 << 20;
/// Most extension headers walked: more is no index git wrote.
const MAX_EXTENSIONS: usize = 1024;

/// An index file's bytes: its first ones in memory (`head`, where the entries must lie) and
/// the rest read from the file when asked for (extension headers and bodies).
struct IndexBytes<'a> {
    head: &'a [u8],
    len: usize,
    rest: Option<&'a std::fs::File>,
    /// Bytes read from the file past `head` (counted against the check's budget).
    from_file: std::cell::Cell<usize>,
}

impl<'a> IndexBytes<'a> {
    /// A whole index in memory (tests, [`crate::fuzzing`]).
    pub(crate) fn whole(data: &'a [u8]) -> IndexBytes<'a> {
        IndexBytes {
            head: data,
            len: data.len(),
            rest: None,
            from_file: Default::default(),
        }
    }

    /// `head`, the first bytes of `file`, and the rest of it.
    fn of(head: &'a [u8], file: &'a std::fs::File) -> io::Result<IndexBytes<'a>> {
        let len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
        Ok(IndexBytes {
            head,
            len: len.max(head.len()),
            rest: (len > head.len()).then_some(file),
            from_file: Default::default(),
        })
    }

    /// `n` bytes at `at`: `None` past the end, or for more than [`MAX_EXTENSION`] bytes
    /// from the file.
    fn get(&self, at: usize, n: usize) -> Option<std::borrow::Cow<'a, [u8]>> {
        use std::os::unix::fs::FileExt;
        let end = at.checked_add(n)?;
        if end > self.len {
            return None;
        }
        if end <= self.head.len() {
            return Some(std::borrow::Cow::Borrowed(&self.head[at..end]));
        }
        if n > MAX_EXTENSION {
            return None;
        }
        let mut bytes = vec![0; n];
        self.rest?.read_exact_at(&mut bytes, at as u64).ok()?;
        self.from_file.set(self.from_file.get() + n);
        Some(std::borrow::Cow::Owned(bytes))
    }
}

/// What an index names: its gitlinks, and for a split index (the `link` extension) each
/// shared index's id (hex) with the positions in it of entries the split index replaces by
/// a gitlink.
#[derive(Debug, Default, PartialEq, Eq)]
struct IndexLinks {
    /// Paths of the gitlink entries (mode 160000).
    gitlinks: Vec<PathBuf>,
    /// Shared indexes: id and replaced positions.
    shared: Vec<(String, Vec<usize>)>,
}

/// Gitlink paths of an index file, read as git's read-cache.c reads it, which the command
/// can exploit wherever a stricter reader would differ: every entry is read in order from
/// the header (`load_all_cache_entries`), and also block by block from the offsets of an
/// entry offset table (`EOIE` + `IEOT` extensions: git's threaded load, each block starting
/// without a previous name); a name is taken as git takes it (the flags' 12-bit length
/// unless 0xFFF, then up to the NUL; in version 4 a prefix of the previous name plus a
/// suffix); and the extensions are read from both places git starts them. `None` when no
/// reading gets through the entries.
fn parse_index(src: &IndexBytes, hash_len: usize) -> Option<IndexLinks> {
    let mut out = IndexLinks::default();
    // Ordinals of gitlink entries without a name: in a split index, replacements.
    let mut stripped: Vec<usize> = Vec::new();
    let starts = visit_entries(src, hash_len, &mut |ordinal, mode, _, raw, name| {
        if mode & 0o170000 != 0o160000 {
            return;
        }
        if raw.is_empty() {
            stripped.push(ordinal);
        } else if !name.is_empty() && name.len() <= MAX_PATH {
            out.gitlinks.push(PathBuf::from(
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name),
            ));
        }
    })?;
    for start in starts {
        for (sig, at, size) in extensions(src, start, hash_len)? {
            if &sig != b"link" {
                continue;
            }
            let body = src.get(at, size)?;
            if let Some(shared) = link_extension(&body, hash_len, &stripped) {
                if !out.shared.contains(&shared) {
                    out.shared.push(shared);
                }
            }
        }
    }
    Some(out)
}

/// The gitlinks of a shared index, and the names of its entries at `replaced` (which the
/// split index turned into gitlinks).
fn shared_gitlinks(src: &IndexBytes, hash_len: usize, replaced: &[usize]) -> Option<Vec<PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    visit_entries(src, hash_len, &mut |ordinal, mode, _, _, name| {
        let wanted = mode & 0o170000 == 0o160000 || replaced.contains(&ordinal);
        if wanted && !name.is_empty() && name.len() <= MAX_PATH {
            out.push(PathBuf::from(std::ffi::OsStr::from_bytes(name)));
        }
    })?;
    Some(out)
}

/// What [`visit_entries`] calls for each entry: ordinal, mode, object id and flags, raw name,
/// name (one
/// instance of the reader for every caller: the static binary has a size budget).
type EntryFn<'a> = dyn FnMut(usize, u32, &[u8], &[u8], &[u8]) + 'a;

/// Whether the indexes `a` and `b` list the same entries — name, mode, object and flags
/// (stage, assume-valid, skip-worktree, intent-to-add), in order — their stat data aside:
/// what `git status` rewrites when it refreshes an index. `false` when either is no index git
/// reads, or a split one.
pub(crate) fn same_entries(a: &[u8], b: &[u8], hash_len: usize) -> bool {
    // (mode, object id and flags, name) of each entry.
    type Entry = (u32, Vec<u8>, Vec<u8>);
    let entries = |data: &[u8]| -> Option<Vec<Entry>> {
        let mut out = Vec::new();
        let src = IndexBytes::whole(data);
        let starts = visit_entries(&src, hash_len, &mut |_, mode, oid, raw, _| {
            out.push((mode, oid.to_vec(), raw.to_vec()));
        })?;
        for start in starts {
            if extensions(&src, start, hash_len)?
                .iter()
                .any(|(sig, _, _)| sig == b"link")
            {
                return None;
            }
        }
        Some(out)
    };
    matches!((entries(a), entries(b)), (Some(x), Some(y)) if x == y)
}

/// [`parse_index`] of a whole index in memory: the gitlinks and the shared indexes' ids
/// ([`crate::fuzzing`]).
pub(crate) fn parse_index_bytes(
    data: &[u8],
    hash_len: usize,
) -> Option<(Vec<PathBuf>, Vec<String>)> {
    let links = parse_index(&IndexBytes::whole(data), hash_len)?;
    Some((
        links.gitlinks,
        links.shared.into_iter().map(|(id, _)| id).collect(),
    ))
}

/// The most bytes the names of an index carried back may expand to.
const MAX_NAME_BYTES: usize = 64 << 20;

/// Whether the whole index `data` may replace the host's: its trailing checksum holds (or is
/// zero, `index.skipHash`), it is no split index (its shared index would not come with it),
/// and git's `verify_path` would accept every entry's name (no empty, `.` or `..` component,
/// no leading `/`, no `.git` in any case or with the trailing dots and spaces, or the short
/// name, that other filesystems fold onto it, no backslash): git does not check the names
/// when it reads an index, and a checkout writes each where it names.
///
/// # Errors
/// Why not, in words.
pub(crate) fn index_fit_for_host(data: &[u8], hash_len: usize) -> Result<(), String> {
    use sha1::Digest as _;
    let body_len = data
        .len()
        .checked_sub(hash_len)
        .ok_or("shorter than a checksum")?;
    let (body, sum) = data.split_at(body_len);
    let ok = sum.iter().all(|&b| b == 0)
        || match hash_len {
            32 => sha2::Sha256::digest(body).as_slice() == sum,
            _ => sha1::Sha1::digest(body).as_slice() == sum,
        };
    if !ok {
        return Err("its checksum does not match".into());
    }
    let mut bad: Option<String> = None;
    // A version-4 index names each entry by a prefix of the one before: 400 KB can expand to
    // gigabytes of names, which every git that reads it would hold.
    let mut names_left = MAX_NAME_BYTES;
    let src = IndexBytes::whole(data);
    let starts = visit_entries(&src, hash_len, &mut |_, _, _, _, name| {
        if bad.is_some() {
            return;
        }
        names_left = names_left.saturating_sub(name.len());
        if name.len() > MAX_PATH || names_left == 0 {
            bad = Some(format!(
                "{} (names beyond what a worktree holds)",
                String::from_utf8_lossy(&name[..name.len().min(64)])
            ));
        } else if !path_git_accepts(name) {
            bad = Some(String::from_utf8_lossy(name).into_owned());
        }
    })
    .ok_or("it is no index git reads")?;
    // A split index first: its entries' names may be empty (the shared index holds them).
    for start in starts {
        let exts = extensions(&src, start, hash_len).ok_or("its extensions are malformed")?;
        if exts.iter().any(|(sig, _, _)| sig == b"link") {
            return Err("it is a split index (core.splitIndex)".into());
        }
    }
    if let Some(name) = bad {
        return Err(format!("it names a path git refuses ({name:?})"));
    }
    Ok(())
}

/// git's `verify_path` with `core.protectNTFS` and `core.protectHFS` (see
/// [`index_fit_for_host`]).
fn path_git_accepts(name: &[u8]) -> bool {
    !name.is_empty()
        && !name.contains(&b'\\')
        && name.split(|&b| b == b'/').all(|c| {
            let trimmed = {
                let mut t = c;
                while let [rest @ .., b' ' | b'.'] = t {
                    t = rest;
                }
                t
            };
            !c.is_empty()
                && c != b"."
                && c != b".."
                && !trimmed.eq_ignore_ascii_case(b".git")
                && !c.eq_ignore_ascii_case(b"git~1")
        })
}

/// Calls `f(ordinal, mode, raw name, name)` for every entry of index `src` as git reads it
/// ([`parse_index`]; `name` is the raw name up to a NUL, as git's C string is), and
/// returns the offsets where git starts reading extensions. The entries must lie in the
/// bytes in memory. Runs at every index change while the command runs and at its exit, so
/// it allocates nothing per entry (version 4 rebuilds each name in one buffer).
fn visit_entries(src: &IndexBytes, hash_len: usize, f: &mut EntryFn) -> Option<Vec<usize>> {
    let data = src.head;
    let be32 = |at: usize| be32_of(data, at);
    if data.get(0..4)? != b"DIRC" {
        return None;
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(8)? as usize;
    let mut name: Vec<u8> = Vec::new();
    // Where the first NUL of `name` is, once looked for (version 4).
    let mut nul: Option<usize> = None;
    // One block of `nr` entries from `pos`, the first without a previous name; its end.
    let mut block = |mut pos: usize, first: usize, nr: usize| -> Option<usize> {
        let mut previous = false;
        for ordinal in first..first + nr {
            let start = pos;
            let mode = be32(pos + 24)?;
            let flags = u16::from_be_bytes(
                data.get(pos + 40 + hash_len..pos + 42 + hash_len)?
                    .try_into()
                    .ok()?,
            );
            let extended = if flags & 0x4000 != 0 { 4 } else { 2 };
            // The object id and the flags (the stage, assume-valid, skip-worktree,
            // intent-to-add): what an entry is, its stat data aside.
            let oid = data.get(pos + 40..pos + 40 + hash_len + extended)?;
            pos += 40 + hash_len + extended;
            let short = (flags & 0xFFF) as usize;
            let c_str = |b: &[u8]| -> usize { b.iter().position(|&c| c == 0).unwrap_or(b.len()) };
            if version == 4 {
                let (mut c, mut strip) = (*data.get(pos)?, 0usize);
                pos += 1;
                strip |= (c & 127) as usize;
                while c & 128 != 0 {
                    c = *data.get(pos)?;
                    pos += 1;
                    strip = (strip.checked_add(1)?.checked_mul(128)?) | (c & 127) as usize;
                }
                let copy = if previous {
                    name.len().checked_sub(strip)?
                } else {
                    0
                };
                let suffix = if short == 0xFFF {
                    c_str(data.get(pos..)?)
                } else {
                    short.checked_sub(copy)?
                };
                name.truncate(copy);
                // The first NUL of the name is kept across entries: looking for it again in
                // the whole name at each entry would make a long name shared by many entries
                // cost their product.
                nul = nul.filter(|&n| n < copy);
                // Git copies the suffix and the byte after it (its NUL).
                name.extend_from_slice(data.get(pos..pos + suffix + 1)?);
                pos += suffix + 1;
                let len = copy + suffix;
                let end = *nul.get_or_insert_with(|| copy + c_str(&name[copy..]));
                f(ordinal, mode, oid, &name[..len], &name[..end]);
                name.truncate(len);
            } else {
                let len = if short == 0xFFF {
                    c_str(data.get(pos..)?)
                } else {
                    short
                };
                // Git copies the name and the byte after it.
                let raw = data.get(pos..pos + len + 1)?;
                f(ordinal, mode, oid, &raw[..len], &raw[..c_str(raw)]);
                pos = start + (pos + len + 8 - start) / 8 * 8;
            }
            previous = true;
        }
        Some(pos)
    };
    let mut starts = Vec::new();
    let in_order = block(12, 0, count);
    starts.extend(in_order);
    let offsets = entry_offsets(src, hash_len);
    let offsets_read = offsets.is_some();
    if let Some((extensions_at, table)) = offsets {
        // Git's entry array holds the header's count, and each entry takes at least the
        // fixed part: a table asking for more (blocks that repeat, to make the reading cost
        // blocks × entries) is no index git reads.
        let asked = table
            .iter()
            .fold(0usize, |sum, (_, nr)| sum.saturating_add(*nr));
        // (The entries must lie in the bytes in memory.)
        if asked > count || asked.saturating_mul(40 + hash_len + 2) > data.len() {
            return None;
        }
        starts.push(extensions_at);
        let mut first = 0usize;
        for (offset, nr) in table {
            // A block that cannot be read here may be read by git: the index is not checkable.
            block(offset, first, nr)?;
            first = first.saturating_add(nr);
        }
    }
    (in_order.is_some() || offsets_read).then_some(starts)
}

/// The extension headers (signature, offset of the body, its size) of index `src` from
/// `pos` on, as git walks them (`load_index_extensions`): while a header fits before the
/// trailing hash. `None` past [`MAX_EXTENSIONS`] of them.
fn extensions(
    src: &IndexBytes,
    mut pos: usize,
    hash_len: usize,
) -> Option<Vec<([u8; 4], usize, usize)>> {
    let mut out = Vec::new();
    let end = src.len.saturating_sub(hash_len);
    while pos.checked_add(8)? <= end {
        if out.len() == MAX_EXTENSIONS {
            return None;
        }
        let header = src.get(pos, 8)?;
        let sig: [u8; 4] = header.get(..4)?.try_into().ok()?;
        let size = be32_of(&header, 4)? as usize;
        out.push((sig, pos + 8, size));
        pos = pos.checked_add(8)?.checked_add(size)?;
    }
    Some(out)
}

/// The end-of-entries extension's offset (`EOIE`, last before the trailing hash; its hash of
/// the extension headers is not checked, so that every table git might use is read) and the
/// entry offset table it leads to (`IEOT` version 1: offset and count per block), as git's
/// `read_eoie_extension` and `read_ieot_extension` find them.
fn entry_offsets(src: &IndexBytes, hash_len: usize) -> Option<(usize, Vec<(usize, usize)>)> {
    const EOIE_SIZE: usize = 4 + 20;
    let eoie = src.len.checked_sub(8 + EOIE_SIZE + hash_len)?;
    let tail = src.get(eoie, 12)?;
    if eoie < 12 || &tail[..4] != b"EOIE" || be32_of(&tail, 4)? as usize != EOIE_SIZE {
        return None;
    }
    let offset = be32_of(&tail, 8)? as usize;
    if offset < 12 || offset >= eoie {
        return None;
    }
    let (_, at, size) = extensions(src, offset, hash_len)?
        .into_iter()
        .find(|(sig, _, _)| sig == b"IEOT")?;
    let table = src.get(at, size)?;
    if table.len() < 12 || be32_of(&table, 0)? != 1 {
        return None;
    }
    let blocks = table[4..]
        .chunks_exact(8)
        .map(|c| {
            (
                be32_of(c, 0).unwrap_or(0) as usize,
                be32_of(c, 4).unwrap_or(0) as usize,
            )
        })
        .collect();
    Some((offset, blocks))
}

fn be32_of(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// A `link` extension's body (git's split-index.c `read_link_extension`: the shared index's
/// id, then the delete and the replace EWAH bitmaps): the shared index's id in hex, and the
/// positions in it that the split index's nameless entries at ordinals `stripped` replace
/// (the n-th nameless entry replaces the n-th set bit's entry: `merge_base_index`). `None`
/// for a null id (no shared index).
fn link_extension(
    body: &[u8],
    hash_len: usize,
    stripped: &[usize],
) -> Option<(String, Vec<usize>)> {
    let id = body.get(..hash_len)?;
    if id.iter().all(|&b| b == 0) {
        return None;
    }
    // Without readable bitmaps nothing is replaced (git fails there).
    let replaced = stripped.iter().max().and_then(|wanted| {
        let rest = &body[hash_len..];
        let (_, delete_len) = ewah_bits(rest, 0)?;
        let (bits, _) = ewah_bits(rest.get(delete_len..)?, wanted + 1)?;
        Some(
            stripped
                .iter()
                .filter_map(|&k| bits.get(k).copied())
                .collect(),
        )
    });
    Some((crate::git::objects::hex(id), replaced.unwrap_or_default()))
}

/// The positions of the first `n` set bits of the EWAH bitmap at the start of `data`, and
/// its length in bytes (git's ewah/ewah_io.c `ewah_read_mmap` and `ewah_each_bit`: bit count,
/// word count, the 64-bit words — each run-length word holding a run bit, a 32-bit run
/// length in words and a 31-bit count of literal words that follow it — and the last
/// run-length word's position).
fn ewah_bits(data: &[u8], n: usize) -> Option<(Vec<usize>, usize)> {
    let words = be32_of(data, 4)? as usize;
    let len = 12usize.checked_add(words.checked_mul(8)?)?;
    let body = data.get(8..len - 4)?;
    let word = |i: usize| -> Option<u64> {
        let at = i.checked_mul(8)?;
        Some(u64::from_be_bytes(
            body.get(at..at.checked_add(8)?)?.try_into().ok()?,
        ))
    };
    let mut bits = Vec::new();
    let (mut i, mut pos) = (0usize, 0usize);
    while i < words && bits.len() < n {
        let rlw = word(i)?;
        let run = ((rlw >> 1) & 0xFFFF_FFFF) as usize * 64;
        if rlw & 1 != 0 {
            bits.extend((pos..pos.saturating_add(run)).take(n - bits.len()));
        }
        pos = pos.saturating_add(run);
        i += 1;
        for _ in 0..(rlw >> 33) {
            let Some(lit) = (i < words).then(|| word(i)).flatten() else {
                break;
            };
            for b in 0..64 {
                if lit & (1 << b) != 0 && bits.len() < n {
                    bits.push(pos.saturating_add(b));
                }
            }
            pos = pos.saturating_add(64);
            i += 1;
        }
    }
    Some((bits, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// An index file in memory, read as [`parse_index`] reads one.
    fn parse_gitlinks(data: &[u8], hash_len: usize) -> Option<IndexLinks> {
        parse_index(&IndexBytes::whole(data), hash_len)
    }

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(ok.status.success(), "{args:?}: {ok:?}");
    }

    #[test]
    fn indexes_that_differ_in_stat_data_alone_have_the_same_entries() {
        for version in ["2", "3", "4"] {
            let t = tempfile::tempdir().unwrap();
            let dir = t.path();
            git(dir, &["init", "-q"]);
            git(dir, &["config", "index.version", version]);
            std::fs::write(dir.join("a"), "a\n").unwrap();
            std::fs::write(dir.join("b"), "b\n").unwrap();
            git(dir, &["add", "a", "b"]);
            git(dir, &["update-index", "--index-version", version]);
            let read = || std::fs::read(dir.join(".git/index")).unwrap();
            let start = read();
            // Stat data only: a file's time changed, the index refreshed.
            let a = std::fs::File::options()
                .write(true)
                .open(dir.join("a"))
                .unwrap();
            a.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30))
                .unwrap();
            git(dir, &["update-index", "--refresh"]);
            let refreshed = read();
            assert_ne!(start, refreshed, "v{version}: the refresh rewrote nothing");
            assert!(same_entries(&start, &refreshed, 20), "v{version}");
            // A flag (skip-worktree), an object, a new entry: not the same.
            git(dir, &["update-index", "--skip-worktree", "b"]);
            assert!(
                !same_entries(&refreshed, &read(), 20),
                "v{version}: skip-worktree"
            );
            git(dir, &["update-index", "--no-skip-worktree", "b"]);
            std::fs::write(dir.join("b"), "c\n").unwrap();
            git(dir, &["add", "b"]);
            assert!(
                !same_entries(&refreshed, &read(), 20),
                "v{version}: an object"
            );
            assert!(!same_entries(&refreshed, b"DIRC", 20));
        }
    }

    #[test]
    fn gitlinks_are_found_in_every_index_version() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        git(&root, &["init", "-q"]);
        std::fs::write(root.join("a-file"), "x").unwrap();
        for sub in ["sub", "deeper/sub2"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
            git(&root.join(sub), &["init", "-q"]);
            git(
                &root.join(sub),
                &["commit", "-q", "--allow-empty", "-m", "s"],
            );
        }
        git(&root, &["add", "a-file", "sub", "deeper/sub2"]);
        // A name longer than the flags' 12 bits (0xFFF means "look for the NUL"), and a
        // gitlink after it: its offset depends on the long name being skipped right.
        let long = format!("{}file", format!("{}/", "x".repeat(200)).repeat(21));
        let blob = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"; // the empty blob
        let commit = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"; // any id will do
        for (mode, id, path) in [("100644", blob, long.as_str()), ("160000", commit, "zz")] {
            git(
                &root,
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("{mode},{id},{path}"),
                ],
            );
        }
        for v in ["2", "3", "4"] {
            git(&root, &["update-index", "--index-version", v]);
            let data = std::fs::read(root.join(".git/index")).unwrap();
            assert_eq!(
                parse_gitlinks(&data, 20).unwrap().gitlinks,
                vec![
                    PathBuf::from("deeper/sub2"),
                    PathBuf::from("sub"),
                    PathBuf::from("zz")
                ],
                "index v{v}"
            );
            // A cut inside the entries is malformed, never a panic or a shorter list.
            let last = data.windows(3).rposition(|w| w == b"zz\0").unwrap();
            for cut in [13, data.len() / 2, last + 2] {
                assert_eq!(parse_gitlinks(&data[..cut], 20), None, "v{v} cut at {cut}");
            }
        }
    }

    #[test]
    fn a_gitlinked_repository_naming_a_program_is_quarantined() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        git(&root, &["init", "-q"]);
        std::fs::create_dir(root.join("sub")).unwrap();
        git(&root.join("sub"), &["init", "-q"]);
        git(
            &root.join("sub"),
            &["commit", "-q", "--allow-empty", "-m", "s"],
        );
        git(&root, &["add", "sub"]);
        let mut scan = scan_of(&root);
        assert!(scan.check().0.quarantined.is_empty());
        git(
            &root.join("sub"),
            &["config", "core.fsmonitor", "/bin/evil"],
        );
        let (c, links) = scan.check();
        assert_eq!(links, 1);
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, root.join("sub/.git/config"));
        assert!(c.quarantined[0].key.starts_with("core.fsmonitor "), "{c:?}");
        assert!(!root.join("sub/.git/config").exists());
        assert!(c.quarantined[0].moved_to.exists());
    }

    /// The scan of the repository at `root`, whose worktree is the only writable root.
    fn scan_of(root: &Path) -> NestedScan {
        NestedScan::new(root, &root.join(".git"), false, &[root.to_path_buf()])
    }

    /// A repository at `root/sub` registered as a gitlink of `root`.
    fn gitlinked(root: &Path) {
        git(root, &["init", "-q"]);
        std::fs::create_dir(root.join("sub")).unwrap();
        git(&root.join("sub"), &["init", "-q"]);
        git(
            &root.join("sub"),
            &["commit", "-q", "--allow-empty", "-m", "s"],
        );
        git(root, &["add", "sub"]);
    }

    /// Rewrites the index of the repository at `root` as version 4 with an entry offset table
    /// of two blocks (git's `index.threads`), and returns its bytes.
    fn index_with_offset_table(root: &Path) -> Vec<u8> {
        git(
            root,
            &[
                "-c",
                "index.recordOffsetTable=true",
                "-c",
                "index.recordEndOfIndexEntries=true",
                "-c",
                "index.threads=2",
                "update-index",
                "--index-version",
                "4",
            ],
        );
        std::fs::read(root.join(".git/index")).unwrap()
    }

    /// Registers `path` in the index at `root` as a gitlink (to any commit id).
    fn add_gitlink(root: &Path, path: &str) {
        let commit = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        let link = format!("160000,{commit},{path}");
        git(root, &["update-index", "--add", "--cacheinfo", &link]);
    }

    /// A worktree `wt` in a new temporary directory with a gitlinked repository `sub`
    /// ([`gitlinked`]), and a program that leaves a marker ([`marker_program`]).
    fn gitlinked_scene() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap().join("wt");
        let (program, marker) = marker_program(root.parent().unwrap());
        std::fs::create_dir(&root).unwrap();
        gitlinked(&root);
        (tmp, root, program, marker)
    }

    /// Sets `core.fsmonitor` of the repository at `dir` to `program`.
    fn names_program(dir: &Path, program: &Path) {
        git(
            dir,
            &["config", "core.fsmonitor", program.to_str().unwrap()],
        );
    }

    /// The attack built at `root` works (a host `git status` runs the program), one check
    /// moves exactly `path` aside, and then it does not.
    fn moved_aside_stops_it(root: &Path, marker: &Path, path: &Path) {
        assert!(status_runs(root, marker), "the attack works");
        let (c, _) = scan_of(root).check();
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, path);
        assert!(!status_runs(root, marker));
    }

    /// `f` on another thread, or a failure after 10 s (a hang must not hang the suite).
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the check returns")
    }

    fn mkfifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_bits_retain(0o600),
            0,
        )
        .unwrap();
    }

    #[test]
    fn a_nested_config_git_would_read_is_moved_aside_whatever_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let other = tempfile::tempdir().unwrap(); // another writable root (as /tmp is)
        let other = std::fs::canonicalize(other.path()).unwrap();
        gitlinked(&root);
        let config = root.join("sub/.git/config");
        let evil = b"[core]\n\tfsmonitor = /bin/evil\n";
        type Plant<'a> = Box<dyn Fn() + 'a>;
        let cases: Vec<(&str, Plant)> = vec![
            // git reads any bytes; a Rust string cannot hold this one
            (
                "not UTF-8",
                Box::new(|| {
                    std::fs::write(&config, [b"# \xff\n".as_slice(), evil].concat()).unwrap()
                }),
            ),
            // git follows the symlink
            (
                "a symlink",
                Box::new(|| {
                    std::fs::write(root.join("evil-config"), evil).unwrap();
                    std::os::unix::fs::symlink(root.join("evil-config"), &config).unwrap();
                }),
            ),
            // a FIFO would stop the supervisor's read
            ("a FIFO", Box::new(|| mkfifo(&config))),
        ];
        for (what, plant) in cases {
            let _ = std::fs::remove_file(&config);
            plant();
            let mut scan = scan_of(&root);
            let (c, _) = within_10s(move || scan.check());
            assert_eq!(c.quarantined.len(), 1, "{what}: {c:?}");
            assert_eq!(c.quarantined[0].path, config, "{what}");
            assert!(std::fs::symlink_metadata(&config).is_err(), "{what}");
        }
        // The nested repository's gitdir in another writable root, through a `.git` file and
        // through a `.git` symlink: both are followed, as git follows them.
        git(&other, &["init", "-q", "--bare", "elsewhere.git"]);
        let elsewhere = other.join("elsewhere.git");
        git(&elsewhere, &["config", "core.fsmonitor", "/bin/evil"]);
        for pointer in ["file", "symlink"] {
            std::fs::remove_dir_all(root.join("sub/.git")).ok();
            std::fs::remove_file(root.join("sub/.git")).ok();
            if pointer == "file" {
                let text = format!("gitdir: {}\n", elsewhere.display());
                std::fs::write(root.join("sub/.git"), text).unwrap();
            } else {
                std::os::unix::fs::symlink(&elsewhere, root.join("sub/.git")).unwrap();
            }
            let mut outside_only = scan_of(&root);
            assert!(
                outside_only.check().0.quarantined.is_empty(),
                "{pointer}: not the command's"
            );
            let mut scan = NestedScan::new(
                &root,
                &root.join(".git"),
                false,
                &[root.clone(), other.clone()],
            );
            let (c, _) = scan.check();
            assert_eq!(c.quarantined.len(), 1, "{pointer}: {c:?}");
            assert_eq!(c.quarantined[0].path, elsewhere.join("config"), "{pointer}");
            let back = "[core]\n\tbare = true\n\tfsmonitor = /bin/evil\n";
            std::fs::write(elsewhere.join("config"), back).unwrap();
        }
    }

    /// `.git` and `commondir` read as git reads them: trailing newlines of any number, a
    /// leading space that is part of the path, bytes that are not UTF-8.
    #[test]
    fn pointer_files_are_followed_as_git_follows_them() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        gitlinked(&root);
        let sub = root.join("sub");
        let cases: [(&str, &[u8], &[u8]); 3] = [
            ("5,000 newlines", b"gd", &[b'\n'; 5000]),
            ("a leading space", b" gd", b"\n"),
            ("not UTF-8", b"gd\xff", b"\r\n"),
        ];
        for (what, name, tail) in cases {
            let gd = sub.join(std::ffi::OsStr::from_bytes(name));
            std::fs::rename(sub.join(".git"), &gd).unwrap();
            std::fs::write(
                sub.join(".git"),
                [b"gitdir: ".as_slice(), name, tail].concat(),
            )
            .unwrap();
            git(&sub, &["config", "core.fsmonitor", "/bin/evil"]);
            let mut scan = scan_of(&root);
            let (c, _) = scan.check();
            assert_eq!(c.quarantined.len(), 1, "{what}: {c:?}");
            assert_eq!(c.quarantined[0].path, gd.join("config"), "{what}");
            std::fs::rename(&c.quarantined[0].moved_to, gd.join("config")).unwrap();
            git(&sub, &["config", "--unset", "core.fsmonitor"]);
            std::fs::remove_file(sub.join(".git")).unwrap();
            std::fs::rename(&gd, sub.join(".git")).unwrap();
        }
        // A pointer too large to follow is moved aside itself.
        std::fs::rename(sub.join(".git"), sub.join("gd")).unwrap();
        let big = [b"gitdir: gd".as_slice(), &vec![b'\n'; MAX_POINTER]].concat();
        std::fs::write(sub.join(".git"), big).unwrap();
        let mut scan = scan_of(&root);
        let (c, _) = scan.check();
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, sub.join(".git"));
    }

    /// Past the gitlinks one check follows, a gitlink's repository is made one git cannot
    /// enter (its `.git` moved aside), unread: here `sub`, which sorts after 4,097 others.
    #[test]
    fn gitlinks_beyond_those_a_check_follows_are_made_unenterable() {
        use std::io::Write;
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        gitlinked(&root);
        let commit = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        let mut info = String::new();
        for i in 0..=MAX_GITLINKS {
            info.push_str(&format!("160000 {commit}\ta{i:05}\n"));
        }
        let mut child = std::process::Command::new("git")
            .args(["update-index", "--index-info"])
            .current_dir(&root)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(info.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success());
        let mut scan = scan_of(&root);
        let (c, links) = scan.check();
        assert_eq!(links, MAX_GITLINKS + 2);
        assert!(c.failed.is_empty(), "{c:?}");
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, root.join("sub/.git"));
        assert!(c.quarantined[0].key.contains("beyond"), "{c:?}");
    }

    #[test]
    fn an_index_that_is_not_a_regular_file_fails_the_check_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        gitlinked(&root);
        let index = root.join(".git/index");
        for what in ["a FIFO", "a symlink to /dev/zero"] {
            std::fs::remove_file(&index).unwrap();
            if what == "a FIFO" {
                mkfifo(&index);
            } else {
                std::os::unix::fs::symlink("/dev/zero", &index).unwrap();
            }
            let mut scan = scan_of(&root);
            let (c, links) = within_10s(move || scan.check());
            assert_eq!(links, 0, "{what}");
            assert_eq!(c.failed.len(), 1, "{what}: {c:?}");
            assert!(
                c.failed[0].1.starts_with("reading the index"),
                "{what}: {c:?}"
            );
        }
    }

    /// Whether a host `git status` in `root` runs the program `marker_program` (a script
    /// that creates `marker`), for the tests to show first that an attack works.
    fn status_runs(root: &Path, marker: &Path) -> bool {
        let _ = std::fs::remove_file(marker);
        let _ = Command::new("git")
            .args(["status", "--short"])
            .current_dir(root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        marker.exists()
    }

    /// A script that creates `<dir>/ran`, and that marker's path.
    fn marker_program(dir: &Path) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let marker = dir.join("ran");
        let program = dir.join("evil.sh");
        std::fs::write(
            &program,
            format!("#!/bin/sh\ntouch '{}'\n", marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        (program, marker)
    }

    /// `git status` recurses: a gitlink in a gitlinked repository's own index leads the host's
    /// git further, also from the worktree that repository's `core.worktree` names (here in a
    /// second writable root, as `/tmp` is).
    #[test]
    fn repositories_nested_in_nested_ones_are_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap().join("wt");
        let other = root.with_file_name("other");
        let (program, marker) = marker_program(root.parent().unwrap());
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        git(&root, &["init", "-q"]);
        git(&root.join("a"), &["init", "-q"]);
        git(&root.join("a/b"), &["init", "-q"]);
        git(
            &root.join("a/b"),
            &["commit", "-q", "--allow-empty", "-m", "b"],
        );
        git(&root.join("a"), &["add", "b"]);
        git(&root.join("a"), &["commit", "-q", "-m", "a"]);
        git(&root, &["add", "a"]);
        let evil = program.to_str().unwrap();
        git(&root.join("a/b"), &["config", "core.fsmonitor", evil]);
        let mut scan = NestedScan::new(
            &root,
            &root.join(".git"),
            false,
            &[root.clone(), other.clone()],
        );
        assert!(status_runs(&root, &marker), "the attack works");
        let (c, links) = scan.check();
        assert_eq!(links, 2);
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, root.join("a/b/.git/config"));
        assert!(!status_runs(&root, &marker));

        std::fs::create_dir_all(other.join("c")).unwrap();
        git(&other.join("c"), &["init", "-q"]);
        git(
            &other.join("c"),
            &["commit", "-q", "--allow-empty", "-m", "c"],
        );
        git(&other.join("c"), &["config", "core.fsmonitor", evil]);
        git(
            &root.join("a"),
            &["config", "core.worktree", other.to_str().unwrap()],
        );
        let commit = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        git(
            &root.join("a"),
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{commit},c"),
            ],
        );
        assert!(status_runs(&root, &marker), "the attack works");
        let (c, _) = scan.check();
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, other.join("c/.git/config"));
        assert!(!status_runs(&root, &marker));
    }

    /// A split index keeps most entries in `sharedindex.<id>`: a gitlink there, and an entry
    /// there that the split index replaces by a gitlink, are followed.
    #[test]
    fn a_split_index_is_read_with_its_shared_index() {
        let (_tmp, root, program, marker) = gitlinked_scene();
        std::fs::write(root.join("f"), "f").unwrap();
        git(&root, &["add", "f"]);
        git(&root, &["update-index", "--split-index"]);
        let evil = program.to_str().unwrap();
        git(&root.join("sub"), &["config", "core.fsmonitor", evil]);
        assert!(status_runs(&root, &marker), "the attack works");
        let mut scan = scan_of(&root);
        let (c, _) = scan.check();
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, root.join("sub/.git/config"));

        // `--chmod` writes a replacement (a nameless entry) into the split index; its mode
        // becomes a gitlink's, and `f` a repository.
        git(&root, &["update-index", "--chmod=+x", "f"]);
        let index = root.join(".git/index");
        let mut data = std::fs::read(&index).unwrap();
        assert_eq!(&data[36..40], &0o100755u32.to_be_bytes(), "f is replaced");
        data[36..40].copy_from_slice(&0o160000u32.to_be_bytes());
        std::fs::write(&index, &data).unwrap();
        let shared = parse_gitlinks(&data, 20).unwrap().shared;
        assert_eq!(shared.len(), 1);
        assert_eq!(shared[0].1, vec![0], "f is the shared index's first entry");
        std::fs::remove_file(root.join("f")).unwrap();
        std::fs::create_dir(root.join("f")).unwrap();
        git(&root.join("f"), &["init", "-q"]);
        git(&root.join("f"), &["config", "core.fsmonitor", evil]);
        assert!(status_runs(&root, &marker), "the attack works");
        let (c, _) = scan.check();
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, root.join("f/.git/config"));
        assert!(!status_runs(&root, &marker));
    }

    /// Git reads an index with an entry offset table block by block (`index.threads`), each
    /// block's first name without the previous one: an index whose blocks read differently
    /// from its entries in order is read both ways.
    #[test]
    fn an_index_is_also_read_block_by_block_as_threaded_git_reads_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap().join("wt");
        let (program, marker) = marker_program(root.parent().unwrap());
        std::fs::create_dir_all(root.join("aaa")).unwrap();
        gitlinked(&root);
        std::fs::write(root.join("aaa/x"), "x").unwrap();
        git(&root, &["add", "aaa/x"]);
        // Three: git keeps one of them for the extensions, and two read the entries.
        git(&root, &["config", "index.threads", "3"]);
        let index = root.join(".git/index");
        let mut data = index_with_offset_table(&root);
        let (_, blocks) = entry_offsets(&IndexBytes::whole(&data), 20).expect("an offset table");
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        // The second block starts at `sub`: its prefix length is made 0, so that read in
        // order its name would be `aaa/x` + `sub`, longer than its flags say (git dies so).
        let strip_at = blocks[1].0 + 40 + 20 + 2;
        assert_eq!(data[strip_at], 5, "strips `aaa/x`");
        data[strip_at] = 0;
        std::fs::write(&index, &data).unwrap();
        let evil = program.to_str().unwrap();
        git(&root.join("sub"), &["config", "core.fsmonitor", evil]);
        assert!(status_runs(&root, &marker), "the attack works");
        assert_eq!(
            parse_gitlinks(&data, 20).unwrap().gitlinks,
            vec![PathBuf::from("sub")]
        );
        let (c, _) = scan_of(&root).check();
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert!(!status_runs(&root, &marker));
    }

    /// A nested repository's hook runs from the host's `git status` with no configuration at
    /// all (`post-index-change`, when it refreshes a stat-dirty index): its `hooks/` is moved
    /// aside, unless it holds only git's samples.
    #[test]
    fn a_nested_hook_is_moved_aside() {
        let (_tmp, root, program, marker) = gitlinked_scene();
        let sub = root.join("sub");
        std::fs::write(sub.join("f"), "a").unwrap();
        git(&sub, &["add", "f"]);
        std::fs::write(sub.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        let mut scan = scan_of(&root);
        let (c, _) = scan.check();
        assert!(c.quarantined.is_empty(), "samples only: {c:?}");
        std::fs::copy(&program, sub.join(".git/hooks/post-index-change")).unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30);
        let f = std::fs::File::options()
            .write(true)
            .open(sub.join("f"))
            .unwrap();
        f.set_modified(old).unwrap();
        assert!(status_runs(&root, &marker), "the attack works");
        let (c, _) = scan.check();
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, sub.join(".git/hooks"));
        assert_eq!(c.quarantined[0].key, "hooks/post-index-change");
        f.set_modified(old).unwrap();
        assert!(!status_runs(&root, &marker));
    }

    /// Git joins a line ending in a backslash to the next one and skips a byte-order mark: a
    /// key hidden so from a line-by-line reading is found all the same.
    #[test]
    fn a_key_hidden_by_git_s_grammar_is_found() {
        let (_tmp, root, program, marker) = gitlinked_scene();
        let config = root.join("sub/.git/config");
        let p = program.display();
        for text in [
            format!("[core]\n\tfsmonitor = \\\n{p}\n"),
            format!("[core]\n\tx = a\\\n[foo]\n\tfsmonitor = {p}\n"),
            format!("\u{feff}[core]\n\tfsmonitor = {p}\n"),
            format!("[core] fsmonitor = {p}\n"),
        ] {
            std::fs::write(&config, &text).unwrap();
            assert!(status_runs(&root, &marker), "the attack works: {text:?}");
            let (c, _) = scan_of(&root).check();
            assert_eq!(c.quarantined.len(), 1, "{text:?}: {c:?}");
            assert!(!status_runs(&root, &marker), "{text:?}");
            std::fs::remove_file(&c.quarantined[0].moved_to).unwrap();
        }
        for fine in ["[core]\n\tbare = false\n", "[core]\n\tbare\n"] {
            std::fs::write(&config, fine).unwrap();
            assert!(scan_of(&root).check().0.quarantined.is_empty(), "{fine:?}");
        }
    }

    /// Two gitlinks whose `.git` name the same gitdir: git runs in each directory, and the
    /// shared index's gitlinks are followed from both.
    #[test]
    fn a_gitdir_shared_by_two_gitlinks_is_followed_from_both() {
        let (_tmp, root, program, marker) = gitlinked_scene();
        let commit = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        let link = format!("160000,{commit},x");
        git(
            &root.join("sub"),
            &["update-index", "--add", "--cacheinfo", &link],
        );
        std::fs::create_dir_all(root.join("z/x")).unwrap();
        std::fs::write(root.join("z/.git"), "gitdir: ../sub/.git\n").unwrap();
        let z = format!("160000,{commit},z");
        git(&root, &["update-index", "--add", "--cacheinfo", &z]);
        git(&root.join("z/x"), &["init", "-q"]);
        names_program(&root.join("z/x"), &program);
        moved_aside_stops_it(&root, &marker, &root.join("z/x/.git/config"));
    }

    /// One configuration behind two gitdirs (hard links) is read once, and its
    /// `core.worktree` still counts for the second: git in `l2` runs in `q/w`.
    #[test]
    fn a_configuration_read_once_still_names_its_worktree() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap().join("wt");
        let (program, marker) = marker_program(root.parent().unwrap());
        std::fs::create_dir(&root).unwrap();
        git(&root, &["init", "-q"]);
        let (p, q) = (root.join("p"), root.join("q"));
        std::fs::create_dir_all(q.join("w/x")).unwrap();
        git(&q.join("w"), &["init", "-q"]);
        std::fs::rename(q.join("w/.git"), q.join("g")).unwrap();
        git(&q.join("g"), &["config", "core.worktree", "../w"]);
        let commit = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        let x = format!("160000,{commit},x");
        git(
            &q.join("w"),
            &["--git-dir=../g", "update-index", "--add", "--cacheinfo", &x],
        );
        std::fs::create_dir_all(p.join("w")).unwrap();
        let mut copy = Command::new("cp");
        copy.arg("-r").arg(q.join("g")).arg(p.join("g"));
        assert!(copy.status().unwrap().success());
        std::fs::remove_file(p.join("g/config")).unwrap();
        std::fs::hard_link(q.join("g/config"), p.join("g/config")).unwrap();
        for (l, g) in [("l1", "../p/g"), ("l2", "../q/g")] {
            std::fs::create_dir(root.join(l)).unwrap();
            std::fs::write(root.join(l).join(".git"), format!("gitdir: {g}\n")).unwrap();
            let link = format!("160000,{commit},{l}");
            git(&root, &["update-index", "--add", "--cacheinfo", &link]);
        }
        git(&q.join("w/x"), &["init", "-q"]);
        names_program(&q.join("w/x"), &program);
        moved_aside_stops_it(&root, &marker, &q.join("w/x/.git/config"));
    }

    /// `/proc/self/cwd` in a pointer is the top worktree for the host's outer git and the
    /// gitlink's directory for the git it runs there: such a pointer is moved aside.
    #[test]
    fn a_pointer_through_proc_is_moved_aside() {
        let (_tmp, root, program, marker) = gitlinked_scene();
        let sub = root.join("sub");
        std::fs::rename(sub.join(".git"), sub.join("evil")).unwrap();
        git(
            &sub,
            &[
                "--git-dir=evil",
                "config",
                "core.fsmonitor",
                program.to_str().unwrap(),
            ],
        );
        std::fs::write(sub.join(".git"), "gitdir: /proc/self/cwd/evil\n").unwrap();
        git(&root, &["init", "-q", "--bare", "evil"]);
        moved_aside_stops_it(&root, &marker, &sub.join(".git"));
    }

    /// Git skips an extension it does not know, however large: padding one past the bytes the
    /// check reads into memory hides no gitlink (the headers past them are read from the
    /// file, the bodies skipped).
    #[test]
    fn an_index_padded_past_the_bound_is_still_read() {
        use sha1::Digest as _;
        let (_tmp, root, program, marker) = gitlinked_scene();
        names_program(&root.join("sub"), &program);
        let index = root.join(".git/index");
        let data = std::fs::read(&index).unwrap();
        let pad = 4 << 20;
        let mut padded = data[..data.len() - 20].to_vec();
        padded.extend_from_slice(b"Zpad");
        padded.extend_from_slice(&(pad as u32).to_be_bytes());
        padded.resize(padded.len() + pad, 0);
        let sum = sha1::Sha1::digest(&padded);
        padded.extend_from_slice(&sum);
        std::fs::write(&index, &padded).unwrap();
        assert!(status_runs(&root, &marker), "the attack works");
        let mut buf = Vec::new();
        let (links, read) = index_gitlinks(&index, &[20], 1 << 20, &mut buf).unwrap();
        assert_eq!(links, vec![PathBuf::from("sub")]);
        assert!(read <= (1 << 20) + 64, "the padding is not read: {read}");
    }

    /// A version 4 index whose entries all reuse one long name is read in time linear in its
    /// size: each entry's name is not searched again from its start.
    #[test]
    fn a_long_shared_name_is_read_in_linear_time() {
        let mut data = b"DIRC\0\0\0\x04".to_vec();
        let entries: usize = 100_000;
        data.extend_from_slice(&(entries as u32 + 1).to_be_bytes());
        let entry = |data: &mut Vec<u8>, strip: u8, name: &[u8]| {
            data.extend_from_slice(&[0; 24]);
            data.extend_from_slice(&0o100644u32.to_be_bytes());
            data.extend_from_slice(&[0; 12 + 20]);
            data.extend_from_slice(&0x0FFFu16.to_be_bytes());
            data.push(strip);
            data.extend_from_slice(name);
            data.push(0);
        };
        entry(&mut data, 0, &[b'x'; 1 << 20]);
        for _ in 0..entries {
            entry(&mut data, 0, b"");
        }
        data.extend_from_slice(&[0; 20]);
        let found = within_10s(move || parse_gitlinks(&data, 20));
        assert_eq!(found, Some(IndexLinks::default()));
    }

    /// An index that is a symlink through `/proc/self/cwd` is another file for each git
    /// process (the host's git in the worktree reads `wt/idx`): not checkable, a failure.
    #[test]
    fn an_index_through_proc_is_a_failure() {
        let (_tmp, root, program, marker) = gitlinked_scene();
        names_program(&root.join("sub"), &program);
        std::fs::rename(root.join(".git/index"), root.join("idx")).unwrap();
        std::os::unix::fs::symlink("/proc/self/cwd/idx", root.join(".git/index")).unwrap();
        assert!(status_runs(&root, &marker), "the attack works");
        let (c, _) = scan_of(&root).check();
        assert_eq!(c.failed.len(), 1, "{c:?}");
        assert!(c.failed[0].1.contains("/proc"), "{c:?}");
    }

    /// A gitlink's directory reached through a magic link (`/proc/self/root/…`) is another
    /// directory for us: nothing there is renamed (git enters no gitlink behind a symlink).
    #[test]
    fn nothing_is_renamed_through_a_magic_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap().join("wt");
        std::fs::create_dir_all(root.join("victim")).unwrap();
        mkfifo(&root.join("victim/.git"));
        gitlinked(&root);
        let through = Path::new("/proc/self/root").join(root.strip_prefix("/").unwrap());
        std::os::unix::fs::symlink(through.join("victim"), root.join("l")).unwrap();
        add_gitlink(&root, "l");
        let r = root.clone();
        let (c, _) = within_10s(move || scan_of(&r).check());
        assert!(c.quarantined.is_empty(), "{c:?}");
        assert!(root.join("victim/.git").exists());
    }

    /// What lies outside the writable set is never moved, even reached through a symlink in
    /// the worktree.
    #[test]
    fn nothing_outside_the_writable_set_is_moved() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap().join("wt");
        let outside = root.with_file_name("outside");
        std::fs::create_dir_all(outside.join("proj")).unwrap();
        mkfifo(&outside.join("proj/.git"));
        std::fs::create_dir(&root).unwrap();
        gitlinked(&root);
        std::os::unix::fs::symlink(outside.join("proj"), root.join("l")).unwrap();
        add_gitlink(&root, "l");
        let (c, _) = within_10s(move || scan_of(&root).check());
        assert!(c.quarantined.is_empty(), "{c:?}");
        assert!(outside.join("proj/.git").exists());
    }

    /// An offset table git would not read whole is refused at once: blocks asking for more
    /// entries than the index holds (repeated, they make the reading cost blocks × entries),
    /// and a block that cannot be read (past the end: git may read what we cannot).
    #[test]
    fn an_offset_table_that_cannot_be_read_whole_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        gitlinked(&root);
        std::fs::write(root.join("f"), "f").unwrap();
        git(&root, &["add", "f"]);
        let data = index_with_offset_table(&root);
        assert!(parse_gitlinks(&data, 20).is_some());
        // IEOT: signature, size, version, then offset and count of each block.
        let at = data.windows(4).position(|w| w == b"IEOT").unwrap();
        let mut forged = data.clone();
        let count = forged[8..12].to_vec();
        forged[at + 16..at + 20].copy_from_slice(&count);
        assert_eq!(
            parse_gitlinks(&forged, 20),
            None,
            "more entries than the header's"
        );
        let mut forged = data.clone();
        let past = (data.len() as u32 + 100).to_be_bytes();
        forged[at + 20..at + 24].copy_from_slice(&past);
        assert_eq!(parse_gitlinks(&forged, 20), None, "a block past the end");
    }
}
