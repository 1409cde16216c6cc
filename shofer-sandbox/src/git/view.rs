//! The private view: on the namespace backends the command's git works on a copy of the
//! repository's control files, bound over the common dir, and what it may change is carried
//! back with git's own tools when it ends (docs/ARCHITECTURE.md, "The private view").
//!
//! - [`View::take`]: before the run, in the supervisor's state directory (an entry per
//!   worktree, `flock`ed): the copy (`view/`, kept from run to run) brought up to date with the
//!   common dir's control files — not `objects/` (the quarantine is bound there), not other
//!   worktrees' indexes and logs — writing only what differs ([`crate::git::mirror`]), with
//!   what earlier runs of this worktree kept private laid over it (`private/`);
//! - [`View::finish`]: after the whole tree is gone and the quarantine migrated: reads the
//!   copy's refs ([`crate::git::refs`]), moves the refs this worktree may move in the real
//!   repository with `git update-ref --stdin` (compare-and-swap against the values the run
//!   started from; hooks off), puts the worktree's own `HEAD`, index (after the nested check)
//!   and `logs/HEAD` in place, keeps everything else changed for the next run (`private/`)
//!   and names it once; the copy stays for the next run, which brings it up to date again
//!   (a copy is made anew only after a failure).
//!
//! The host's git never reads a byte the command wrote during the run; after it, only refs
//! git itself checked (names, object existence), the worktree's `HEAD` (parsed), its index
//! (checked for gitlinks into repositories that name programs) and its reflog.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::mirror::{self, fingerprint, Budget};
use super::nested::NestedScan;
use super::refs::{self, Refs, Value};
use crate::paths;

/// The state directory's leaf.
const LEAF: &str = "views";
/// The copy's name in a worktree's entry, kept from run to run.
const COPY: &str = "view";
/// The entry's file naming the worktree's gitdir.
const WHOSE: &str = "gitdir";
/// What the worktree's own gitdir gives back to the real one, besides its refs.
const OWN_FILES: [&str; 4] = ["HEAD", "index", "ORIG_HEAD", "logs/HEAD"];
/// The most a run may keep private (bytes, files); beyond, the rest is dropped and named.
const PRIVATE_BYTES: u64 = 64 << 20;
const PRIVATE_FILES: usize = 20_000;
/// The most refs a run may keep private, and the bytes of their names.
const PRIVATE_REFS: usize = 10_000;
const PRIVATE_REF_BYTES: usize = 1 << 20;
/// The most the copy of the control files may take (bytes, entries): a repository beyond
/// keeps the guarded mechanisms.
const COPY_BYTES: u64 = 256 << 20;
const COPY_ENTRIES: usize = 200_000;
/// The largest file read back from the view (an index), and the largest reflog.
const MAX_FILE: usize = 256 << 20;
const MAX_LOG: usize = 64 << 20;

/// What a copy holds after a run ([`View::private_files`]): bytes of its files, entries, and
/// of them what is kept private; `over` when something was beyond a view's bounds.
#[derive(Default)]
struct Weight {
    bytes: u64,
    entries: usize,
    kept: u64,
    kept_entries: usize,
    over: bool,
}

/// What a copy may hold beyond the repository's files and what is kept private (a grown
/// index, git's transient files) and still stay for the next run.
const SLACK_BYTES: u64 = 16 << 20;
const SLACK_ENTRIES: usize = 4096;

impl Weight {
    /// Whether the copy holds more than the `mirrored` (bytes, entries) of the repository,
    /// what is kept private and the slack.
    fn heavier_than(&self, (bytes, entries): (u64, usize)) -> bool {
        self.over
            || self.bytes > bytes + self.kept + SLACK_BYTES
            || self.entries > entries + self.kept_entries + SLACK_ENTRIES
    }
}

/// A file kept private: its path relative to the common dir, bytes and mode.
type PrivateFile = (PathBuf, Vec<u8>, u32);

/// One run's private view of a repository's control files.
pub struct View {
    /// The entry in the state directory.
    entry: PathBuf,
    /// The entry's `flock` (one run of a worktree at a time uses its view).
    _lock: OwnedFd,
    /// The copy, bound over [`View::over`].
    pub dir: PathBuf,
    /// The real common dir.
    pub over: PathBuf,
    /// The worktree's gitdir relative to the common dir (`""` for the main worktree).
    gitdir_rel: PathBuf,
    /// The worktree's real gitdir.
    gitdir: PathBuf,
    /// The worktree, and the writable set (for the nested check).
    worktree: PathBuf,
    writable: Vec<PathBuf>,
    hex_len: usize,
    /// The host's refs when the run started.
    host_refs: Refs,
    /// The view's refs when the run started (the host's, what earlier runs kept private over
    /// them).
    view_refs: Refs,
    /// Each copied file's fingerprint, by its path relative to the common dir, as the host
    /// had it.
    copied: HashMap<PathBuf, u64>,
    /// The branch the worktree had checked out at the start.
    own_branch: Option<String>,
    /// Refs runs of this worktree created, with the object each last carried: they may
    /// move them while the repository still has exactly that (a ref the user deleted,
    /// re-made or moved is theirs again).
    created: BTreeMap<String, String>,
    /// The host's `HEAD` of the worktree at the start.
    head: Option<Vec<u8>>,
    /// The worktree's index as the repository had it at the start.
    start_index: Option<Vec<u8>>,
    /// What the copy took from the repository at the start: bytes, entries.
    mirrored: (u64, usize),
    /// What earlier runs kept private, as the start read it: `private/refs`, its files,
    /// `created` (unchanged, they are not written again).
    loaded: (Vec<u8>, Vec<PrivateFile>, Vec<u8>),
}

/// What [`View::finish`] did.
#[derive(Default)]
pub struct Carried {
    /// Refs moved in the real repository.
    pub refs: Vec<String>,
    /// What stays in the view for the next run, named.
    pub kept_private: Vec<String>,
    /// What went wrong (the run fails).
    pub failed: Vec<String>,
}

/// Why the view cannot serve `common` (the guarded mechanisms do), or `None`.
pub fn unsupported(common: &Path) -> Option<&'static str> {
    if common.join("reftable").exists() {
        return Some("its refs are in the reftable format");
    }
    if common.join("modules").exists() {
        return Some("it has submodules (modules/)");
    }
    if common.join("lfs").exists() {
        return Some("it has git-lfs objects (lfs/)");
    }
    None
}

impl View {
    /// Makes the view of `common` for the worktree whose gitdir is `gitdir` (`common` itself
    /// for the main worktree), in the supervisor's state directory outside the writable set
    /// (`writable`, for the nested check; `state_writable`, canonical, for the directory's).
    ///
    /// # Errors
    /// No state directory, another run of this worktree holds its view, or the copy fails.
    pub fn take(
        common: &Path,
        gitdir: &Path,
        worktree: &Path,
        sha256: bool,
        writable: &[PathBuf],
        state_writable: &shofer_sys::statedir::Writable,
    ) -> Result<View, String> {
        let root = super::guard::state_dir(LEAF, state_writable)
            .ok_or("no directory of the supervisor's own outside the writable set")?;
        let gitdir_rel = gitdir
            .strip_prefix(common)
            .unwrap_or(Path::new(""))
            .to_path_buf();
        let name = gitdir_rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let key =
            super::quarantine::owned_prefix(&common.join("objects"), name.as_deref().unwrap_or(""));
        let entry = root.join(key.trim_end_matches('.'));
        let new = match fs::DirBuilder::new().mode(0o700).create(&entry) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(format!("{}: {e}", entry.display()))
            }
            made => made.is_ok(),
        };
        let lock = super::quarantine::lock(&entry).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock => "another run of this worktree is using its view".into(),
            _ => format!("{}: {e}", entry.display()),
        })?;
        // Whose entry this is: the worktree's gitdir and its identity, for the sweep of
        // entries whose worktree is gone, and so that a worktree made again under the same
        // name (or a repository cloned again at the same path) does not inherit what the
        // old one's runs kept private (written when missing: entries of earlier versions have
        // none).
        let whose = entry.join(WHOSE);
        let recorded = fs::read(&whose).ok();
        let now = whose_record(gitdir);
        match &recorded {
            Some(r) if *r == now => {}
            // An entry of this version without an identity yet: named, kept.
            Some(r) if r.as_slice() == gitdir.as_os_str().as_bytes() => {}
            Some(_) => {
                for name in ["private", COPY] {
                    remove_tree(&entry, &entry.join(name));
                }
                let _ = fs::remove_file(entry.join("created"));
            }
            None => {}
        }
        if recorded.as_deref() != Some(now.as_slice()) {
            fs::write(&whose, &now).map_err(|e| format!("{}: {e}", whose.display()))?;
        }
        if new || shofer_sys::statedir::random_suffix().ends_with('0') {
            // A worktree appears (and one run in sixteen): the copies of those gone go.
            forget_gone(&root, &entry);
        }
        // What a killed run left (and the per-run copies of earlier versions).
        discard_views(&entry);
        let dir = entry.join(COPY);
        match fs::DirBuilder::new().mode(0o755).create(&dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(format!("{}: {e}", dir.display()))
            }
            _ => {}
        }
        let mut view = View {
            entry,
            _lock: lock,
            dir,
            over: common.to_path_buf(),
            gitdir: gitdir.to_path_buf(),
            worktree: worktree.to_path_buf(),
            writable: writable.to_vec(),
            gitdir_rel,
            hex_len: if sha256 { 64 } else { 40 },
            host_refs: Refs::new(),
            view_refs: Refs::new(),
            copied: HashMap::new(),
            own_branch: None,
            created: BTreeMap::new(),
            head: None,
            start_index: None,
            mirrored: (0, 0),
            loaded: Default::default(),
        };
        if let Err(e) = view.fill() {
            view.remove();
            return Err(e);
        }
        Ok(view)
    }

    /// Copies the control files and lays what was kept private over them.
    fn fill(&mut self) -> Result<(), String> {
        let common_fd = paths::open_nofollow(&self.over).map_err(|e| e.to_string())?;
        let common_fd = paths::openat_dir(&common_fd, Path::new(".")).map_err(|e| e.to_string())?;
        self.host_refs = refs::read(&common_fd, self.hex_len)?;
        self.head = fs::read(self.gitdir.join("HEAD")).ok();
        self.own_branch = self
            .head
            .as_deref()
            .and_then(|h| refs::parse_value(h, self.hex_len))
            .and_then(|v| match v {
                Value::Symbolic(n) => Some(n),
                Value::Oid(_) => None,
            });
        let mut budget = Budget {
            bytes: COPY_BYTES,
            entries: COPY_ENTRIES,
        };
        let own = self.gitdir_rel.clone();
        let skip = |rel: &Path| -> bool {
            if rel == Path::new("objects") {
                return true;
            }
            // Other worktrees: what git reads of them (HEAD, gitdir, locked, rebase and
            // bisect state), not their indexes and logs.
            if let Ok(rest) = rel.strip_prefix("worktrees") {
                let mut c = rest.components();
                if let Some(first) = c.next() {
                    let mine =
                        own.strip_prefix("worktrees").ok() == Some(Path::new(first.as_os_str()));
                    if !mine {
                        let second = c.next().map(|s| s.as_os_str().as_bytes().to_vec());
                        return matches!(second.as_deref(), Some(b"index" | b"logs"));
                    }
                }
            }
            false
        };
        let view = self
            .open_copy()
            .map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let index = self.gitdir_rel.join("index");
        let (copied, start_index) = (&mut self.copied, &mut self.start_index);
        let mut seen = |rel: PathBuf, bytes: &[u8]| {
            if rel == index {
                *start_index = Some(bytes.to_vec());
            }
            copied.insert(rel, fingerprint(bytes));
        };
        mirror::mirror(
            &common_fd,
            &view,
            &skip,
            &["objects"],
            &mut seen,
            &mut budget,
        )
        .map_err(|e| format!("copying {}: {e}", self.over.display()))?;
        self.mirrored = (COPY_BYTES - budget.bytes, COPY_ENTRIES - budget.entries);
        // `objects/` is empty: the quarantine is bound over it.
        mirror::dir_at(&view, Path::new("objects")).map_err(|e| format!("objects/: {e}"))?;
        mirror::empty(&view, Path::new("objects")).map_err(|e| format!("objects/: {e}"))?;
        // Earlier runs' private files, then their private refs.
        let private = self.entry.join("private");
        let files = read_private_files(&private.join("files"))
            .map_err(|e| format!("{}: {e}", private.display()))?;
        for (rel, bytes, mode) in &files {
            mirror::put(&view, rel, bytes, *mode).map_err(|e| format!("{}: {e}", rel.display()))?;
        }
        let refs_text = fs::read(private.join("refs")).unwrap_or_default();
        self.view_refs = self.host_refs.clone();
        let mut laid = false;
        for (name, value) in parse_private_refs(&refs_text, self.hex_len) {
            // A private ref whose path holds a ref of the repository's, or lies under one
            // (`topic` against the user's new `topic/x`): laying it would take theirs out of
            // the view. The repository's wins; the private one is dropped.
            if clashes(&self.host_refs, &name) {
                continue;
            }
            match &value {
                Some(v) => mirror::put(&view, Path::new(&name), &v.loose_bytes(), 0o644),
                None => remove_ref(&view, &name),
            }
            .map_err(|e| format!("{name}: {e}"))?;
            laid = true;
        }
        if laid {
            // What the command's git sees at the start, read back: the run's changes are
            // measured from it, never from names merged by hand.
            self.view_refs = refs::read(&view, self.hex_len)?;
        }
        let created_text = fs::read(self.entry.join("created")).unwrap_or_default();
        self.loaded = (refs_text, files, created_text);
        let host = &self.host_refs;
        self.created = String::from_utf8_lossy(&self.loaded.2)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(oid, name)| host.get(*name) == Some(&Value::Oid(oid.to_string())))
            .map(|(oid, name)| (name.to_string(), oid.to_string()))
            .collect();
        Ok(())
    }

    /// The copy, opened through the entry without following a symlink.
    fn open_copy(&self) -> io::Result<OwnedFd> {
        let entry = paths::open_nofollow(&self.entry)?;
        paths::openat_dir(&entry, Path::new(COPY))
    }

    /// The nested check ([`crate::git::nested`]) of the index in `gitdir`.
    fn nested_scan(&self, gitdir: &Path) -> NestedScan {
        NestedScan::new(&self.worktree, gitdir, self.hex_len == 64, &self.writable)
    }

    /// After the run (every process gone, the objects migrated): carries back what this
    /// worktree may change, keeps the rest private, removes the copy. `check_index` is the
    /// nested check of a gitdir holding the view's index: whether it may reach the host.
    pub fn finish(self, check_index: &dyn Fn(NestedScan) -> bool) -> Carried {
        let mut out = Carried::default();
        let view_fd =
            paths::open_nofollow(&self.dir).and_then(|fd| paths::openat_dir(&fd, Path::new(".")));
        let end = match view_fd
            .as_ref()
            .map_err(|e| e.to_string())
            .and_then(|fd| refs::read(fd, self.hex_len))
        {
            Ok(r) => r,
            Err(e) => {
                out.failed.push(format!(
                    "the command's refs cannot be read ({e}): nothing is carried back"
                ));
                self.remove();
                return out;
            }
        };
        let elsewhere = self.checked_out_elsewhere();
        // The view's gitdir, each component opened without following a symlink.
        let gitdir_fd = view_fd.as_ref().ok().and_then(|fd| {
            self.gitdir_rel
                .components()
                .try_fold(paths::openat_dir(fd, Path::new(".")).ok()?, |d, c| {
                    paths::openat_dir(&d, Path::new(c.as_os_str())).ok()
                })
        });
        let mut created = self.created.clone();
        let mut changes = Vec::new();
        let shadowed = shadowed_names(&self.host_refs);
        let mut new_refs = 0usize;
        let names: BTreeSet<&String> = self.view_refs.keys().chain(end.keys()).collect();
        for name in names {
            let (before, after) = (self.view_refs.get(name), end.get(name));
            if before == after {
                continue;
            }
            // New branches, tags and remote-tracking refs only: a new `refs/replace/` ref
            // would change what every existing object means to the host's git, a note what
            // it shows.
            // Nor one whose short name another ref already answers to (`git log main`
            // would find a new tag `main` first), and not too many.
            let new_here = !self.host_refs.contains_key(name)
                && after.is_some()
                && short_name(name).is_some_and(|n| !shadowed.contains(n))
                && new_refs < MAX_NEW_REFS;
            new_refs += usize::from(new_here);
            let owned =
                self.own_branch.as_ref() == Some(name) || created.contains_key(name) || new_here;
            let plain = matches!(after, None | Some(Value::Oid(_)))
                && matches!(self.host_refs.get(name), None | Some(Value::Oid(_)));
            // Compared and swapped against what the run started from (its view's value): a
            // ref that the repository has moved since, or that an earlier run kept private
            // when the repository had moved it, stays private rather than drop the
            // repository's commits.
            // Never the deletion of the branch the worktree has checked out: its HEAD would
            // name a branch that is gone.
            let checked_out_gone = after.is_none() && self.own_branch.as_ref() == Some(name);
            if owned
                && plain
                && name != "refs/stash"
                && !elsewhere.contains(name)
                && !checked_out_gone
            {
                changes.push((name.clone(), before.cloned(), after.cloned()));
            }
        }
        // The worktree's branch, HEAD and index go back together: an index that cannot (it
        // fails a check, or the repository's changed meanwhile) keeps the branch's move
        // private too — a branch moved under an index left behind stages the undoing of the
        // run's commit.
        let index_refused = self.index_refused(gitdir_fd.as_ref(), check_index);
        let pending: BTreeMap<String, String> = changes
            .iter()
            .filter_map(|(n, _, new)| match new {
                Some(Value::Oid(o)) => Some((n.clone(), o.clone())),
                _ => None,
            })
            .chain(created.iter().map(|(n, o)| (n.clone(), o.clone())))
            .collect();
        let head_refused = self.head_refused(gitdir_fd.as_ref(), &elsewhere, &pending);
        // The worktree's own branch when it is kept private with its HEAD and index (named
        // once, with why).
        let mut kept_own = None;
        if let (Some(why), Some(own)) = (
            index_refused.as_ref().or(head_refused.as_ref()),
            &self.own_branch,
        ) {
            if let Some(at) = changes.iter().position(|(n, _, _)| n == own) {
                changes.remove(at);
                kept_own = Some(own.clone());
                out.kept_private.push(format!(
                    "{own} (with the worktree's HEAD and index, which cannot go back: {why})"
                ));
            }
        }
        let carried = self.update_refs(&changes, &mut out);
        let mut host_after = self.host_refs.clone();
        for (name, _, new) in &changes {
            if !carried.contains(name) {
                continue;
            }
            // Recorded only once carried (a creation the repository refused is not ours).
            match new {
                Some(Value::Oid(o)) if self.own_branch.as_ref() != Some(name) => {
                    created.insert(name.clone(), o.clone());
                }
                _ => {
                    created.remove(name);
                }
            }
            match new {
                Some(v) => host_after.insert(name.clone(), v.clone()),
                None => host_after.remove(name),
            };
            out.refs.push(name.clone());
        }
        // The worktree's own HEAD, index, ORIG_HEAD and reflog; its index only with the move
        // of its branch (when the run moved it).
        let branch_kept = self
            .own_branch
            .as_ref()
            .is_some_and(|b| changes.iter().any(|(n, _, _)| n == b) && !carried.contains(b));
        let own_changed = self.carry_own_files(
            gitdir_fd.as_ref(),
            &elsewhere,
            &created,
            branch_kept,
            (head_refused, index_refused),
            &mut out,
        );
        // Everything else that differs from the host stays private.
        let mut private_refs: BTreeMap<String, Option<Value>> = host_after
            .keys()
            .chain(end.keys())
            .filter(|n| host_after.get(*n) != end.get(*n))
            .map(|n| (n.clone(), end.get(n).cloned()))
            .collect();
        // Bounded as the private files are: the rest is dropped (the next run starts from the
        // repository's) and counted.
        let mut names_left = PRIVATE_REF_BYTES;
        let over: Vec<String> = private_refs
            .keys()
            .enumerate()
            .filter(|(i, n)| {
                names_left = names_left.saturating_sub(n.len() + 1);
                *i >= PRIVATE_REFS || names_left == 0
            })
            .map(|(_, n)| n.clone())
            .collect();
        for n in &over {
            private_refs.remove(n);
        }
        if !over.is_empty() {
            out.kept_private.push(format!(
                "{} more refs dropped (beyond what a view keeps)",
                over.len()
            ));
        }
        for (n, v) in private_refs
            .iter()
            .filter(|(n, _)| kept_own.as_ref() != Some(*n))
        {
            out.kept_private.push(match v {
                None => format!("{n} deletion"),
                Some(_) if self.host_refs.contains_key(n) => n.clone(),
                Some(_) => format!("{n} (new)"),
            });
        }
        let carried_logs: BTreeSet<PathBuf> =
            out.refs.iter().map(|r| Path::new("logs").join(r)).collect();
        let (files, weight) =
            self.private_files(view_fd.as_ref().ok(), &own_changed, &carried_logs, &mut out);
        self.save_private(&private_refs, &files, &created, &mut out);
        // What the command left beyond the repository's files and what is kept: the copy
        // goes (the next run makes it anew) rather than stay in the state directory.
        if weight.heavier_than(self.mirrored) {
            self.remove();
        }
        out
    }

    /// The branches other worktrees have checked out in the real repository now.
    fn checked_out_elsewhere(&self) -> BTreeSet<String> {
        let mut heads = vec![self.over.join("HEAD")];
        if let Ok(dir) = fs::read_dir(self.over.join("worktrees")) {
            heads.extend(dir.flatten().map(|e| e.path().join("HEAD")));
        }
        let own = self.gitdir.join("HEAD");
        heads
            .iter()
            .filter_map(|h| Some((h, paths::read_regular(h, 4096).ok()?)))
            .filter_map(|(h, b)| match refs::parse_value(&b, self.hex_len) {
                Some(Value::Symbolic(n)) => Some((h, n)),
                _ => None,
            })
            // This worktree's own HEAD counts when the user checked out another branch in it
            // during the run: that branch is theirs now, as one checked out elsewhere is.
            .filter(|(h, n)| **h != own || self.own_branch.as_ref() != Some(n))
            .map(|(_, n)| n)
            .collect()
    }

    /// `git update-ref --stdin` in the real repository, with the old values as they were at
    /// the start: all in one transaction, or each alone when that fails. Returns the refs
    /// moved; a ref that was not is named as kept private.
    fn update_refs(
        &self,
        changes: &[(String, Option<Value>, Option<Value>)],
        out: &mut Carried,
    ) -> BTreeSet<String> {
        let zero = "0".repeat(self.hex_len);
        let line = |(name, old, new): &(String, Option<Value>, Option<Value>)| {
            let hex = |v: &Option<Value>| match v {
                Some(Value::Oid(h)) => h.clone(),
                _ => zero.clone(),
            };
            match new {
                Some(_) => format!("update {name} {} {}\n", hex(new), hex(old)),
                None => format!("delete {name} {}\n", hex(old)),
            }
        };
        if changes.is_empty() {
            return BTreeSet::new();
        }
        let all: String = changes.iter().map(line).collect();
        if self.git_update_ref(&all).is_ok() {
            return changes.iter().map(|c| c.0.clone()).collect();
        }
        let mut done = BTreeSet::new();
        for c in changes {
            match self.git_update_ref(&line(c)) {
                Ok(()) => {
                    done.insert(c.0.clone());
                }
                Err(why) => out
                    .kept_private
                    .push(format!("{} (the repository's changed: {why})", c.0)),
            }
        }
        done
    }

    /// One `git update-ref --stdin` in the real common dir: the repository's own
    /// configuration, hooks off, none of the caller's `GIT_*` variables, bounded.
    fn git_update_ref(&self, input: &str) -> Result<(), String> {
        let mut cmd = git_command(&self.over);
        cmd.args([
            "update-ref",
            "--stdin",
            "-m",
            "shofer: carried back from a sandboxed run",
        ]);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("git: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input.as_bytes());
        }
        let o = child.wait_with_output().map_err(|e| format!("git: {e}"))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&o.stderr)
                .trim()
                .replace('\n', "; "))
        }
    }

    /// Puts the view's `HEAD` (parsed; not a branch another worktree has checked out),
    /// `index` (when `check_index` passes it, on a copy of the supervisor's), `ORIG_HEAD`
    /// (parsed) and `logs/HEAD` in the real gitdir when they changed. Returns those it
    /// handled (relative to the common dir), carried or named.
    fn carry_own_files(
        &self,
        gitdir: Option<&OwnedFd>,
        elsewhere: &BTreeSet<String>,
        created: &BTreeMap<String, String>,
        branch_kept: bool,
        (head_refused, index_refused): (Option<String>, Option<String>),
        out: &mut Carried,
    ) -> BTreeSet<PathBuf> {
        let handled: BTreeSet<PathBuf> =
            OWN_FILES.iter().map(|n| self.gitdir_rel.join(n)).collect();
        let Some(gitdir) = gitdir else { return handled };
        let logs = paths::openat_dir(gitdir, Path::new("logs")).ok();
        // Whether the run's HEAD stays private (the index for it must not go back alone).
        let mut head_kept = false;
        let (mut head_refused, mut index_refused) = (head_refused, index_refused);
        for name in OWN_FILES {
            let rel = self.gitdir_rel.join(name);
            let read = match name.strip_prefix("logs/") {
                Some(n) => logs.as_ref().map(|l| paths::read_small_file(l, n, MAX_LOG)),
                None => Some(paths::read_small_file(gitdir, name, MAX_FILE)),
            };
            // What is not carried back is dropped, never kept: the next run starts from the
            // host's.
            let bytes = match read {
                Some(Ok(b)) => b,
                Some(Err(e)) if e.kind() != io::ErrorKind::NotFound => {
                    out.kept_private
                        .push(format!("{} (dropped: {e})", rel.display()));
                    continue;
                }
                _ => continue,
            };
            if self.copied.get(&rel) == Some(&fingerprint(&bytes)) {
                continue;
            }
            let refused =
                match name {
                    // Judged before the refs moved ([`View::head_refused`], with the refs about to
                    // move counted as the worktree's): a branch it names must have moved since.
                    "HEAD" => head_refused.take().or_else(|| {
                        match refs::parse_value(&bytes, self.hex_len) {
                            None => Some("not a ref value".to_string()),
                            Some(Value::Symbolic(b))
                                if self.own_branch.as_ref() != Some(&b)
                                    && !created.contains_key(&b) =>
                            {
                                Some(format!("{b} did not reach the repository"))
                            }
                            Some(_) => None,
                        }
                    }),
                    "ORIG_HEAD" => self.head_value_refused(name, &bytes, elsewhere, created),
                    "index" => index_refused.take(),
                    _ => None,
                };
            // HEAD, ORIG_HEAD and the index as the run started from them: one the repository's
            // git changed meanwhile (a checkout, a commit in the worktree) stays the
            // repository's — for the index, unless only its stat data changed (`git status`
            // refreshes it). The index goes with the branch: not when the branch's move stays
            // private (it would stage the undoing of the repository's commit).
            let refused = refused.or_else(|| match name {
                "logs/HEAD" => None,
                // Checked before the refs moved ([`View::index_refused`]).
                "index" if branch_kept => {
                    Some("the branch's move it goes with stays private".into())
                }
                "index" if head_kept => Some("the HEAD it goes with stays private".into()),
                "index" => None,
                _ => {
                    let host_now = fs::read(self.gitdir.join(name)).ok();
                    (host_now.as_deref().map(fingerprint) != self.copied.get(&rel).copied())
                        .then(|| "the repository's changed it meanwhile".to_string())
                }
            });
            if let Some(why) = refused {
                head_kept |= name == "HEAD";
                out.kept_private
                    .push(format!("{} (dropped: {why})", rel.display()));
                continue;
            }
            // The reflog only grows: the host's entries (the way back to commits nothing
            // else names) stay, the run's new ones are added after them (a `gc` in the view
            // expires entries there, not here).
            let bytes = match name {
                "logs/HEAD" => {
                    let host = fs::read(self.gitdir.join(name)).unwrap_or_default();
                    let merged = grown_reflog(&host, &bytes);
                    if merged == host {
                        continue;
                    }
                    merged
                }
                _ => bytes,
            };
            if let Err(e) = replace_file(&self.gitdir.join(name), &bytes) {
                out.failed
                    .push(format!("{}: {e}", self.gitdir.join(name).display()));
            }
        }
        handled
    }

    /// Why the view's `name` (`HEAD`, `ORIG_HEAD`) holding `bytes` cannot go back: it must
    /// name a branch of this worktree's (checked out at the start, or in `created`: made by
    /// its runs) that no other worktree has checked out, or a commit the repository has.
    fn head_value_refused(
        &self,
        name: &str,
        bytes: &[u8],
        elsewhere: &BTreeSet<String>,
        created: &BTreeMap<String, String>,
    ) -> Option<String> {
        match refs::parse_value(bytes, self.hex_len) {
            None => Some("not a ref value".to_string()),
            Some(Value::Symbolic(b)) if name == "ORIG_HEAD" || !b.starts_with("refs/heads/") => {
                Some(format!("{b} is no branch"))
            }
            Some(Value::Symbolic(b)) if elsewhere.contains(&b) => {
                Some(format!("{b} is checked out in another worktree"))
            }
            Some(Value::Symbolic(b))
                if self.own_branch.as_ref() != Some(&b) && !created.contains_key(&b) =>
            {
                Some(format!("{b} is a branch this worktree did not create"))
            }
            Some(Value::Oid(o)) if !self.has_commit(&o) => {
                Some(format!("{o} is no commit of the repository"))
            }
            Some(_) => None,
        }
    }

    /// Why the view's `HEAD` cannot go back, when the run changed it ([`Self::head_value_refused`],
    /// with the refs this run is about to move counted as its own; and the repository's `HEAD`
    /// must still be what the run started from). Taken before the refs move: a branch must
    /// not move under a `HEAD` and index that stay behind.
    fn head_refused(
        &self,
        gitdir: Option<&OwnedFd>,
        elsewhere: &BTreeSet<String>,
        pending: &BTreeMap<String, String>,
    ) -> Option<String> {
        // Read as the carry-back reads it.
        let bytes = match paths::read_small_file(gitdir?, "HEAD", MAX_FILE) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => return Some(e.to_string()),
        };
        let rel = self.gitdir_rel.join("HEAD");
        if self.copied.get(&rel) == Some(&fingerprint(&bytes)) {
            return None;
        }
        self.head_value_refused("HEAD", &bytes, elsewhere, pending)
            .or_else(|| {
                let host_now = fs::read(self.gitdir.join("HEAD")).ok();
                (host_now.as_deref().map(fingerprint) != self.copied.get(&rel).copied())
                    .then(|| "the repository's changed it meanwhile".to_string())
            })
    }

    /// Why the view's index cannot go back to the repository, when the run changed it: it
    /// fails [`View::index_checks`], or the repository's index no longer has the entries the
    /// run started from (its stat data aside: `git status` rewrites that). `None` when it may
    /// (or did not change).
    fn index_refused(
        &self,
        gitdir: Option<&OwnedFd>,
        check_index: &dyn Fn(NestedScan) -> bool,
    ) -> Option<String> {
        let gitdir = gitdir?;
        let rel = self.gitdir_rel.join("index");
        let bytes = match paths::read_small_file(gitdir, "index", MAX_FILE) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => return Some(e.to_string()),
        };
        if self.copied.get(&rel) == Some(&fingerprint(&bytes)) {
            return None;
        }
        if let Err(why) = self.index_checks(&bytes, check_index) {
            return Some(why);
        }
        let host_now = fs::read(self.gitdir.join("index")).ok();
        let same = host_now.as_deref().map(fingerprint) == self.copied.get(&rel).copied()
            || matches!((&host_now, &self.start_index), (Some(now), Some(then))
                if super::nested::same_entries(now, then, self.hex_len / 2));
        (!same).then(|| "the repository's changed it meanwhile".to_string())
    }

    /// Whether the index `bytes` may reach the host: fit for it
    /// ([`super::nested::index_fit_for_host`]), and passed by `check_index`, written to a
    /// gitdir of the supervisor's own first (the view's could change between the check and
    /// the copy).
    fn index_checks(
        &self,
        bytes: &[u8],
        check_index: &dyn Fn(NestedScan) -> bool,
    ) -> Result<(), String> {
        super::nested::index_fit_for_host(bytes, self.hex_len / 2)?;
        let stage = self
            .entry
            .join(format!("stage.{}", shofer_sys::statedir::random_suffix()));
        let ok = fs::DirBuilder::new().mode(0o700).create(&stage).is_ok()
            && fs::write(stage.join("index"), bytes).is_ok()
            && check_index(self.nested_scan(&stage));
        remove_tree(&self.entry, &stage);
        ok.then_some(())
            .ok_or_else(|| "a nested repository it leads to could not be checked".into())
    }

    /// Whether `oid` is a commit of the real repository (after the migration): not a tag
    /// that leads to one.
    fn has_commit(&self, oid: &str) -> bool {
        let mut cmd = git_command(&self.over);
        cmd.args(["cat-file", "-t", oid])
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        cmd.output()
            .is_ok_and(|o| o.status.success() && o.stdout == b"commit\n")
    }

    /// The view's files (outside `objects/`, refs, and the files carried back) that are not
    /// what the host had: new ones, changed ones. Also weighs the whole copy
    /// ([`Weight`]).
    fn private_files(
        &self,
        view: Option<&OwnedFd>,
        own: &BTreeSet<PathBuf>,
        carried_logs: &BTreeSet<PathBuf>,
        out: &mut Carried,
    ) -> (Vec<PrivateFile>, Weight) {
        let mut files = Vec::new();
        let mut weight = Weight::default();
        let Some(view) = view else {
            return (files, weight);
        };
        let (mut bytes_left, mut files_left) = (PRIVATE_BYTES, PRIVATE_FILES);
        let mut dropped = 0usize;
        // (directory, its path, depth, whether it is only weighed)
        let mut todo: Vec<(OwnedFd, PathBuf, usize, bool)> =
            match paths::openat_dir(view, Path::new(".")) {
                Ok(fd) => vec![(fd, PathBuf::new(), 0, false)],
                Err(_) => {
                    weight.over = true;
                    return (files, weight);
                }
            };
        let mut named = BTreeSet::new();
        while let Some((fd, rel, depth, only_weighed)) = todo.pop() {
            // What cannot be listed, opened or looked at cannot be weighed: the copy goes.
            let Ok(names) = paths::entries(&fd) else {
                weight.over = true;
                continue;
            };
            let size_of = |name: &std::ffi::OsStr| {
                rustix::fs::statat(&fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            };
            for (name, ft) in names {
                weight.entries += 1;
                if weight.entries > COPY_ENTRIES {
                    weight.over = true;
                    dropped += 1;
                    continue;
                }
                let path = rel.join(&name);
                if path == Path::new("objects") {
                    continue;
                }
                let ft = match ft {
                    rustix::fs::FileType::Unknown => match size_of(&name) {
                        Ok(st) => rustix::fs::FileType::from_raw_mode(st.st_mode),
                        Err(_) => {
                            weight.over = true;
                            continue;
                        }
                    },
                    ft => ft,
                };
                // A name that is not UTF-8 is weighed, never kept: git names none such.
                let weighed_only = only_weighed
                    || name.to_str().is_none()
                    || transient(&path)
                    || path == Path::new("packed-refs")
                    || path.starts_with("refs")
                    || own.contains(&path)
                    || carried_logs.contains(&path);
                match ft {
                    rustix::fs::FileType::Directory if depth < 32 => {
                        match paths::openat_dir(&fd, Path::new(&name)) {
                            Ok(sub) => todo.push((sub, path, depth + 1, weighed_only)),
                            Err(_) => weight.over = true,
                        }
                    }
                    rustix::fs::FileType::Directory => weight.over = true,
                    rustix::fs::FileType::RegularFile if weighed_only => match size_of(&name) {
                        Ok(st) => weight.bytes += st.st_size as u64,
                        Err(_) => weight.over = true,
                    },
                    rustix::fs::FileType::RegularFile => {
                        if files_left == 0 {
                            dropped += 1;
                            continue;
                        }
                        // The copy holds no device node: the command makes it from a user
                        // namespace.
                        let (bytes, mode) = match paths::read_at(&fd, &name, bytes_left) {
                            Ok(Some(read)) => read,
                            Ok(None) => continue,
                            Err(e) => {
                                weight.over = true;
                                dropped += usize::from(e.kind() == io::ErrorKind::InvalidData);
                                continue;
                            }
                        };
                        weight.bytes += bytes.len() as u64;
                        if self.copied.get(&path) == Some(&fingerprint(&bytes)) {
                            continue;
                        }
                        bytes_left -= bytes.len() as u64;
                        files_left -= 1;
                        // Named by their top-level place: `config`, `hooks/`, `logs/refs/stash`.
                        let shown = if path.starts_with("logs") {
                            path.display().to_string()
                        } else {
                            let mut c = path.components();
                            let top = c
                                .next()
                                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                                .unwrap_or_default();
                            if c.next().is_some() {
                                format!("{top}/")
                            } else {
                                top
                            }
                        };
                        if !path.starts_with("logs") {
                            named.insert(shown);
                        }
                        files.push((path, bytes, mode & 0o777));
                    }
                    _ => {}
                }
            }
        }
        out.kept_private.extend(named);
        if dropped > 0 {
            out.kept_private.push(format!(
                "{dropped} more files dropped (beyond what a view keeps)"
            ));
        }
        weight.kept = files.iter().map(|f| f.1.len() as u64).sum::<u64>();
        weight.kept_entries = files.len();
        (files, weight)
    }

    /// Replaces `private/` with these refs and files, and records the created refs.
    fn save_private(
        &self,
        private_refs: &BTreeMap<String, Option<Value>>,
        files: &[PrivateFile],
        created: &BTreeMap<String, String>,
        out: &mut Carried,
    ) {
        let mut text = String::new();
        for (name, v) in private_refs {
            match v {
                Some(Value::Oid(h)) => text.push_str(&format!("{h} {name}\n")),
                Some(Value::Symbolic(t)) => text.push_str(&format!("ref:{t} {name}\n")),
                None => text.push_str(&format!("- {name}\n")),
            }
        }
        let names: String = created.iter().map(|(n, o)| format!("{o} {n}\n")).collect();
        let mut sorted: Vec<&PrivateFile> = files.iter().collect();
        sorted.sort();
        let (refs_then, files_then, created_then) = &self.loaded;
        if text.as_bytes() == refs_then.as_slice()
            && names.as_bytes() == created_then.as_slice()
            && sorted.len() == files_then.len()
            && sorted.iter().zip(files_then).all(|(a, b)| *a == b)
        {
            // As the start found it: nothing to write.
            return;
        }
        let new = self
            .entry
            .join(format!("private.{}", shofer_sys::statedir::random_suffix()));
        let result = (|| -> io::Result<()> {
            fs::DirBuilder::new().mode(0o700).create(&new)?;
            fs::write(new.join("refs"), text)?;
            for (rel, bytes, mode) in files {
                let path = new.join("files").join(rel);
                if let Some(p) = path.parent() {
                    fs::create_dir_all(p)?;
                }
                fs::write(&path, bytes)?;
                fs::set_permissions(&path, fs::Permissions::from_mode(mode & 0o777))?;
            }
            fs::write(self.entry.join("created.new"), names)?;
            fs::rename(self.entry.join("created.new"), self.entry.join("created"))?;
            let old = self.entry.join("private");
            if old.exists() {
                let trash = self
                    .entry
                    .join(format!("trash.{}", shofer_sys::statedir::random_suffix()));
                fs::rename(&old, &trash)?;
                remove_tree(&self.entry, &trash);
            }
            fs::rename(&new, &old)
        })();
        if let Err(e) = result {
            out.failed.push(format!(
                "keeping the view's private state in {}: {e}",
                self.entry.display()
            ));
            remove_tree(&self.entry, &new);
        }
    }

    /// Removes the copy.
    fn remove(&self) {
        remove_tree(&self.entry, &self.dir);
    }
}

/// The reflog `host` with the lines of `view` it lacks added after it, in `view`'s order.
fn grown_reflog(host: &[u8], view: &[u8]) -> Vec<u8> {
    let known: std::collections::HashSet<&[u8]> = host.split(|&b| b == b'\n').collect();
    let mut out = host.to_vec();
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    for line in view
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && !known.contains(l))
    {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out
}

/// The most new refs one run carries back; the rest stay private.
const MAX_NEW_REFS: usize = 1000;

/// A new ref's short name, for the namespaces a run may create refs in (branches, tags,
/// remote-tracking refs).
fn short_name(name: &str) -> Option<&str> {
    ["refs/heads/", "refs/tags/", "refs/remotes/"]
        .iter()
        .find_map(|p| name.strip_prefix(p))
}

/// The short names the repository's refs answer to (`main`, `v1.0`, `origin/main`, a
/// remote's name `origin`), and `HEAD` and its kin: a new ref of one of these names would
/// change what a name the user types means (git looks up tags before branches before
/// remote-tracking refs).
fn shadowed_names(host: &Refs) -> BTreeSet<&str> {
    let mut out: BTreeSet<&str> = ["HEAD", "FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD", "stash"]
        .into_iter()
        .collect();
    for name in host.keys() {
        if let Some(short) = short_name(name) {
            out.insert(short);
        }
        if let Some(remote) = name
            .strip_prefix("refs/remotes/")
            .and_then(|r| r.split('/').next())
        {
            out.insert(remote);
        }
    }
    out
}

/// Whether the ref `name` and a ref of `refs` lie one under the other (`a` and `a/b`): the
/// two cannot both be loose refs.
fn clashes(refs: &Refs, name: &str) -> bool {
    let under = format!("{name}/");
    let above = name
        .match_indices('/')
        .any(|(i, _)| refs.contains_key(&name[..i]));
    above
        || refs
            .range(under.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&under))
}

/// Files git makes anew whenever it needs them, which a view does not keep: the last commit
/// message, what `gc` writes for dumb HTTP servers, its pid file and log, lock files.
fn transient(rel: &Path) -> bool {
    let name = rel.file_name().unwrap_or_default().as_bytes();
    name == b"COMMIT_EDITMSG"
        || name.ends_with(b".lock")
        || [
            Path::new("info/refs"),
            Path::new("gc.pid"),
            Path::new("gc.log"),
        ]
        .contains(&rel)
}

/// Removes `path`, a tree in the state directory `entry` (the command may have built it).
fn remove_tree(entry: &Path, path: &Path) {
    let Ok(dir) = paths::open_nofollow(entry) else {
        return;
    };
    let Ok(dir) = paths::openat_dir(&dir, Path::new(".")) else {
        return;
    };
    if let Some(name) = path.file_name() {
        let mut budget = super::remove::BUDGET;
        let _ = super::remove::take_apart(&dir, name, &mut budget, &|| false);
    }
}

/// What an entry's [`WHOSE`] holds for `gitdir`: its path, and on a second line its device,
/// inode and birth time (as statx gives them; 0 where it does not) — a worktree removed and
/// added again under the same name gets a new directory.
fn whose_record(gitdir: &Path) -> Vec<u8> {
    let mut out = gitdir.as_os_str().as_bytes().to_vec();
    if let Ok(st) = rustix::fs::statx(
        rustix::fs::CWD,
        gitdir,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        rustix::fs::StatxFlags::BASIC_STATS | rustix::fs::StatxFlags::BTIME,
    ) {
        let btime = if st.stx_mask & rustix::fs::StatxFlags::BTIME.bits() != 0 {
            (st.stx_btime.tv_sec, st.stx_btime.tv_nsec)
        } else {
            (0, 0)
        };
        out.extend_from_slice(
            format!(
                "\n{}:{} {} {}.{}",
                st.stx_dev_major, st.stx_dev_minor, st.stx_ino, btime.0, btime.1
            )
            .as_bytes(),
        );
    }
    out
}

/// Removes the entries in `root` (but `mine`) whose worktree's gitdir, as their [`WHOSE`]
/// names it, no longer exists — the worktree was removed, or its repository — and that no run
/// holds: their copy and what their runs kept private. (An entry of an earlier version, which
/// names none, stays until its worktree's next run names it.) Every step is relative to a
/// descriptor opened without following a symlink.
fn forget_gone(root: &Path, mine: &Path) {
    let Ok(root_fd) =
        paths::open_nofollow(root).and_then(|fd| paths::openat_dir(&fd, Path::new(".")))
    else {
        return;
    };
    let Ok(list) = paths::entries(&root_fd) else {
        return;
    };
    for (name, ft) in list {
        let maybe_dir = matches!(
            ft,
            rustix::fs::FileType::Directory | rustix::fs::FileType::Unknown
        );
        if !maybe_dir || root.join(&name) == mine {
            continue;
        }
        let Ok(entry) = paths::openat_dir(&root_fd, Path::new(&name)) else {
            continue;
        };
        let Ok(Some((gitdir, _))) = paths::read_at(&entry, std::ffi::OsStr::new(WHOSE), 4096)
        else {
            continue;
        };
        let path = gitdir.split(|&b| b == b'\n').next().unwrap_or_default();
        let gone = fs::symlink_metadata(Path::new(std::ffi::OsStr::from_bytes(path)))
            .is_err_and(|e| e.kind() == io::ErrorKind::NotFound);
        if !gone
            || rustix::fs::flock(&entry, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                .is_err()
        {
            continue;
        }
        let Ok(inside) = paths::entries(&entry) else {
            continue;
        };
        let mut budget = super::remove::BUDGET;
        let emptied = inside.iter().all(|(n, _)| {
            super::remove::take_apart(&entry, n, &mut budget, &|| false)
                .is_ok_and(|r| r == super::remove::Removal::Gone)
        });
        if emptied {
            let _ = paths::unlink_at(&root_fd, &name, libc::AT_REMOVEDIR);
        }
    }
}

/// Removes the copies and half-written private states a killed run left in `entry`.
fn discard_views(entry: &Path) {
    let Ok(list) = fs::read_dir(entry) else {
        return;
    };
    for e in list.flatten() {
        let n = e.file_name();
        let b = n.as_bytes();
        if b.starts_with(b"v.")
            || b.starts_with(b"stage.")
            || b.starts_with(b"private.")
            || b.starts_with(b"trash.")
        {
            remove_tree(entry, &e.path());
        }
    }
}

/// The private refs an earlier run recorded (`private/refs`): `<oid> <name>`,
/// `ref:<name> <name>`, `- <name>`.
fn parse_private_refs(text: &[u8], hex_len: usize) -> Vec<(String, Option<Value>)> {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|l| {
            let (v, name) = l.split_once(' ')?;
            if !refs::valid_name(name) {
                return None;
            }
            let value = match v {
                "-" => None,
                _ => Some(match v.strip_prefix("ref:") {
                    Some(t) => refs::parse_value(format!("ref: {t}").as_bytes(), hex_len)?,
                    None => refs::parse_value(v.as_bytes(), hex_len)?,
                }),
            };
            Some((name.to_string(), value))
        })
        .collect()
}

/// The files an earlier run kept private (`private/files`, the supervisor's own): each
/// regular file's path relative to it, bytes and mode, within what a view keeps.
///
/// # Errors
/// Listing or reading fails, or there is more than a view keeps.
fn read_private_files(top: &Path) -> io::Result<Vec<PrivateFile>> {
    let mut out = Vec::new();
    let (mut bytes, mut files) = (PRIVATE_BYTES, PRIVATE_FILES);
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let list = match fs::read_dir(top.join(&rel)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && rel.as_os_str().is_empty() => {
                return Ok(out)
            }
            list => list?,
        };
        for e in list {
            let rel = rel.join(e?.file_name());
            let meta = fs::symlink_metadata(top.join(&rel))?;
            if meta.is_dir() {
                todo.push(rel);
            } else if meta.is_file() {
                files = files
                    .checked_sub(1)
                    .ok_or_else(|| io::Error::other("too many files"))?;
                bytes = bytes
                    .checked_sub(meta.len())
                    .ok_or_else(|| io::Error::other("too large"))?;
                let b = paths::read_regular(&top.join(&rel), meta.len() as usize + 1)?;
                out.push((rel, b, meta.permissions().mode() & 0o777));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Removes the ref `name` from the view's copy `view`: its loose file, and its lines from
/// `packed-refs`.
fn remove_ref(view: &OwnedFd, name: &str) -> io::Result<()> {
    mirror::remove(view, Path::new(name))?;
    let packed = match paths::read_small_file(view, "packed-refs", MAX_FILE) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    match refs::packed_without(&packed, name) {
        Some(left) => {
            let mode = paths::stat_at(view, "packed-refs").map_or(0o644, |st| st.st_mode & 0o777);
            mirror::put(view, Path::new("packed-refs"), &left, mode)
        }
        None => Ok(()),
    }
}

/// git for the real repository `git_dir`: its own configuration, hooks off, none of the
/// caller's `GIT_*` variables, CPU-bounded, dying with the supervisor.
fn git_command(git_dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    for (k, _) in std::env::vars_os() {
        if k.as_bytes().starts_with(b"GIT_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(["-c", "core.hooksPath=/dev/null", "-c", "safe.directory=*"])
        .env("GIT_DIR", git_dir)
        .current_dir(git_dir);
    // Safety: setrlimit(2) and prctl(2) are async-signal-safe; nothing else runs between fork
    // and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 60,
                rlim_max: 60,
            };
            if libc::setrlimit(libc::RLIMIT_CPU, &limit) != 0
                || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Writes `bytes` to a new file beside `path` and renames it over `path`, owned as `path`'s
/// directory is.
fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(
        ".{}.shofer-{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        shofer_sys::statedir::random_suffix()
    ));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    let written = f.write_all(bytes).and_then(|()| {
        let st = fs::metadata(parent)?;
        if rustix::process::geteuid().is_root() {
            use std::os::unix::fs::MetadataExt;
            std::os::unix::fs::fchown(&f, Some(st.uid()), Some(st.gid()))?;
        }
        fs::rename(&tmp, path)
    });
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Says on stderr what the run's end did with the view: the refs moved, what stays private
/// (once), what failed.
pub fn announce(c: &Carried) {
    if !c.kept_private.is_empty() {
        // One line, of a bounded length: the first names and how many more.
        const SHOWN: usize = 20;
        let mut shown = c.kept_private[..c.kept_private.len().min(SHOWN)].join(", ");
        if c.kept_private.len() > SHOWN {
            shown.push_str(&format!(" and {} more", c.kept_private.len() - SHOWN));
        }
        eprintln!(
            "shofer-sandbox: note: kept private to this worktree's runs, not in the repository: {shown}"
        );
    }
    for f in &c.failed {
        eprintln!("shofer-sandbox: error: git: {f}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reflog_only_grows() {
        let host = b"a b one\nb c two\n";
        assert_eq!(grown_reflog(host, b""), host.to_vec());
        assert_eq!(grown_reflog(host, b"b c two\n"), host.to_vec());
        assert_eq!(
            grown_reflog(host, b"b c two\nc d three\n"),
            b"a b one\nb c two\nc d three\n".to_vec()
        );
        assert_eq!(grown_reflog(b"x", b"y\n"), b"x\ny\n".to_vec());
    }
}
