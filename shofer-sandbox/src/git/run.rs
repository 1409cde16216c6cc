//! The git control files around one run: what each backend does before the command starts,
//! while it runs and after it ends (docs/ARCHITECTURE.md, "Linked git worktrees").
//!
//! - namespace backends (`userns`, `layered`, `bwrap`): placeholders for absent protected
//!   paths ([`crate::git::protect::prepare`]) and the object quarantine
//!   ([`crate::git::quarantine`]), then read-only binds built by the backend; the guard's snapshot
//!   and exit check run as well, as a second line;
//! - `landlock`: the guard ([`crate::git::guard`]): snapshot, journal outside the writable set,
//!   the watcher thread that restores at once, the restore at exit.
//!
//! A journal left by a killed run is finished before the next run on the same worktree
//! ([`repair_before_run`]) or by `shofer-sandbox --repair WT` ([`repair_command`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use shofer_core::policy::Backend;

use super::repo::Repo;
use crate::git::guard::{self, GitGuard, Restored, Watcher};
use crate::git::layout::GitLayout;
use crate::git::objects::ObjectStore;
use crate::git::protect::{self, Created};
use crate::git::quarantine::{self, Migrated, Quarantine};
use crate::git::view::{self, View};
use crate::paths;
use crate::writable::OpenedPolicy;

/// How the git control files are kept on this run.
pub struct GitRun {
    /// Descriptors held back for [`GitRun::finish`] (`crate::nofile::Reserve`).
    reserve: crate::nofile::Reserve,
    guard: Arc<Mutex<GitGuard>>,
    /// The repository's objects before the run ([`crate::git::objects`]), where no quarantine
    /// keeps them.
    objects: Option<ObjectStore>,
    /// The namespace backends' object quarantine ([`crate::git::quarantine`]).
    pub quarantine: Option<Quarantine>,
    /// The namespace backends' private view of the control files ([`crate::git::view`]).
    pub view: Option<View>,
    /// Copies the quarantine's new objects into the store while the run lasts.
    copier: Option<quarantine::Copier>,
    worktree: PathBuf,
    /// The guard's journal directory, when one is written.
    pub journal: Option<PathBuf>,
    /// Protected structurally (read-only binds) rather than by the guard.
    pub structural: bool,
    /// Those binds can be undone by the command: bubblewrap keeps `CAP_SYS_ADMIN` for
    /// `--keep-caps` (as root), and a remount makes a read-only bind writable.
    pub remountable: bool,
    /// Why no journal could be written (reported).
    pub journal_missing: Option<String>,
    placeholders: Vec<Created>,
    /// Locks on branches other worktrees have checked out that were absent before the run
    /// ([`protect::absent_ref_locks`]).
    ref_locks: Vec<PathBuf>,
    /// The worktree's and the common dir's paths and identities before the run, when the
    /// Landlock backend cannot keep them from being moved ([`GitRun::moved`]).
    locations: Vec<(PathBuf, Option<(u64, u64)>)>,
    watcher: Option<Watcher>,
    watch: bool,
    /// What the watcher could not start with, if anything.
    pub watch_error: Option<String>,
}

impl GitRun {
    /// Before the command: placeholders (namespace backends), the object quarantine (namespace
    /// backends, not under bubblewrap with `keep_caps`), the snapshot, and on the Landlock
    /// backend the journal.
    ///
    /// # Errors
    /// A protected path that is a symlink or special file, or a placeholder that cannot be
    /// created (namespace backends): the run is refused.
    pub fn prepare(
        opened: &OpenedPolicy,
        repo: &Repo,
        backend: Backend,
        keep_caps: bool,
    ) -> Result<GitRun, super::Error> {
        let reserve = crate::nofile::Reserve::hold();
        let structural = backend != Backend::Landlock;
        let remountable = structural && keep_caps && backend == Backend::Bwrap;
        let view = if structural && !remountable {
            take_view(opened, repo)
        } else {
            None
        };
        // (Placeholders also serve the binds outside the view: an in-tree hooks path.)
        let placeholders = if structural {
            protect::prepare(&repo.controls)
                .map_err(|(path, why)| super::Error::ControlFile { path, why })?
        } else {
            Vec::new()
        };
        // The repository's common dir, and the worktree's name there ("" for the main one).
        let common = match &repo.layout {
            GitLayout::Linked { common, gitdir } => Some((
                common.clone(),
                gitdir
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            )),
            GitLayout::MainWorktree => Some((opened.policy.worktree.join(".git"), String::new())),
            _ => None,
        };
        let writable = writable_paths(opened);
        let state_writable = opened.state_writable();
        let mut objects = None;
        let mut object_quarantine = None;
        if let Some((common, name)) = common {
            let sha256 = protect::uses_sha256(&common);
            // A killed run's, or what a run's migration had no budget left for.
            let earlier = "of an earlier run";
            if remountable {
                // bubblewrap keeps CAP_SYS_ADMIN for --keep-caps as root: the command could
                // remount the store's read-only bind read-write.
                eprintln!(
                    "shofer-sandbox: note: no object quarantine under bubblewrap with --keep-caps (the command could remount the store read-write): existing objects are checked when the command ends instead"
                );
            } else if structural {
                match Quarantine::take(&common, sha256, &name, state_writable) {
                    Ok((q, settled)) => {
                        announce_migrated(&settled, earlier, &opened.policy.worktree);
                        object_quarantine = Some(q);
                    }
                    Err(e) => eprintln!(
                        "shofer-sandbox: note: no object quarantine in {} ({e}): existing objects are checked when the command ends instead",
                        common.display()
                    ),
                }
            } else {
                let settled = quarantine::sweep(&common, sha256, state_writable);
                announce_migrated(&settled, earlier, &opened.policy.worktree);
            }
            if object_quarantine.is_none() {
                objects = Some(ObjectStore::snapshot(&common.join("objects"), sha256));
            }
        }
        // The view's `objects/` is empty: without a quarantine bound over it the command's
        // git would see no object (and write where nothing checks it).
        let view = match view {
            Some(v) if object_quarantine.is_none() => {
                eprintln!(
                    "shofer-sandbox: note: git works in the repository itself, guarded, not in a private view (no object quarantine)"
                );
                drop(v);
                None
            }
            view => view,
        };
        let mut guard = GitGuard::snapshot(
            &repo.layout,
            &opened.policy.worktree,
            &repo.controls,
            &writable,
        );
        // The namespace backends bind the common dir read-only (protect::CommonLayer) and
        // Landlock keeps it outside the writable set, unless it lies beneath a writable root.
        guard.set_common_top_writable(
            remountable || (!structural && repo.controls.common_beneath.is_some()),
        );
        let mut journal = None;
        let mut journal_missing = None;
        let has_entries = !guard.paths().is_empty();
        // The namespace backends bind every guarded entry that exists; what the command makes
        // at an absent name is removed by the watcher — and after a SIGKILL of this
        // supervisor, by the next run from the journal (else that run would take it for the
        // user's).
        if (!structural && has_entries) || (structural && guard.has_absent()) {
            match guard::journal_dir(state_writable) {
                Some(dir) => match guard.write_journal(&dir, &opened.policy.worktree, structural) {
                    Ok(()) => journal = Some(dir),
                    Err(e) => journal_missing = Some(format!("{}: {e}", dir.display())),
                },
                None => {
                    journal_missing = Some(
                        "no journal directory outside the writable set ($XDG_STATE_HOME or ~/.local/state)".into(),
                    )
                }
            }
            if let Some(why) = &journal_missing {
                eprintln!(
                    "shofer-sandbox: warning: degraded (git_guard_journal): {why}; if this supervisor is killed, git control files the command changed stay changed"
                );
            }
        }
        let mut locations = Vec::new();
        if !structural {
            for (path, root) in repo.inside_writable(&opened.policy.worktree) {
                eprintln!(
                    "shofer-sandbox: hardening not enforced (git_location): {} lies inside the writable path {}: Landlock cannot keep the command from renaming it away and building another repository at its path, which the host's git would then use; checked when the command ends (a namespace backend pins it)",
                    path.display(),
                    root.display()
                );
                locations.push((path.to_path_buf(), paths::dir_identity(path)));
            }
        }
        Ok(GitRun {
            reserve,
            guard: Arc::new(Mutex::new(guard)),
            objects,
            quarantine: object_quarantine,
            ref_locks: if view.is_none() {
                protect::absent_ref_locks(&repo.controls)
            } else {
                Vec::new()
            },
            view,
            copier: None,
            worktree: opened.policy.worktree.clone(),
            journal,
            structural,
            remountable,
            journal_missing,
            placeholders,
            locations,
            watcher: None,
            watch: has_entries,
            watch_error: None,
        })
    }

    /// The worktree.
    pub fn worktree(&self) -> &Path {
        &self.worktree
    }

    /// A note for the report when the loose object store was too big to record whole.
    pub fn objects_note(&self) -> Option<&'static str> {
        self.objects
            .as_ref()
            .filter(|o| o.loose_truncated())
            .map(|_| "more loose objects than shofer records: the ones beyond were not checked (run git gc)")
    }

    /// The guarded paths and those that could not be snapshotted.
    pub fn guarded(&self) -> (Vec<PathBuf>, Vec<String>) {
        self.guard
            .lock()
            .map(|g| (g.paths(), g.unguarded()))
            .unwrap_or_default()
    }

    /// Just before the command starts: the watcher ([`Watcher`]). Returns the descriptor the
    /// supervisor writes to once the sandbox's processes exist (the watcher's gate).
    pub fn start(&mut self) -> Option<std::os::fd::RawFd> {
        if let Some(q) = &self.quarantine {
            match q.start_copier() {
                Ok(c) => self.copier = Some(c),
                Err(e) => eprintln!(
                    "shofer-sandbox: note: new git objects reach the repository only when the command ends ({e})"
                ),
            }
        }
        if !self.watch {
            return None;
        }
        match Watcher::start(Arc::clone(&self.guard), !self.structural) {
            Ok(w) => {
                let gate = w.gate_fd();
                self.watcher = Some(w);
                Some(gate)
            }
            Err(e) => {
                eprintln!(
                    "shofer-sandbox: warning: degraded (git_guard_watch): inotify: {e}; git control files are restored only when the command ends"
                );
                self.watch_error = Some(e.to_string());
                None
            }
        }
    }

    /// The recorded locations whose path no longer names the same directory.
    fn moved(&self) -> Vec<PathBuf> {
        self.locations
            .iter()
            .filter(|(p, id)| paths::dir_identity(p) != *id)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// The run's last step (the process exits next), after the whole tree is gone: stops the
    /// watcher, restores what changed, says so on
    /// stderr and (if anything happened) in a closing `--report` record, clears the journal
    /// and the placeholders. Returns true when a restore failed.
    pub fn finish(mut self, report: Option<&mut std::fs::File>) -> bool {
        // A run that ran out of descriptors still puts back what the command changed.
        drop(std::mem::take(&mut self.reserve));
        let mut all = self.watcher.take().map(Watcher::stop).unwrap_or_default();
        let last = match self.guard.lock() {
            Ok(g) => {
                let mut r = g.restore();
                let (c, _) = g.check_nested();
                r.quarantined.extend(c.quarantined);
                r.failed.extend(c.failed);
                r
            }
            Err(_) => Restored {
                failed: vec![guard::poisoned("the restore")],
                ..Restored::default()
            },
        };
        guard::announce(&last, "restored");
        guard::report_asides();
        if let Some(c) = self.copier.take() {
            c.stop();
        }
        let migrated = self
            .quarantine
            .take()
            .map(Quarantine::migrate)
            .unwrap_or_default();
        announce_migrated(&migrated, "of this run", &self.worktree);
        let carried = self.view.take().map(|v| {
            let check_index = |mut scan: crate::git::nested::NestedScan| {
                let (checked, _) = scan.check();
                let clean = checked.failed.is_empty();
                guard::announce(
                    &Restored {
                        quarantined: checked.quarantined,
                        failed: checked.failed,
                        ..Restored::default()
                    },
                    "restored",
                );
                clean
            };
            v.finish(&check_index)
        });
        if let Some(c) = &carried {
            view::announce(c);
        }
        let view_failed = carried.as_ref().is_some_and(|c| !c.failed.is_empty());
        let damage = self
            .objects
            .as_ref()
            .map(ObjectStore::check)
            .unwrap_or_default();
        for d in &damage {
            eprintln!(
                "shofer-sandbox: error: the command destroyed or changed git object {}: {}",
                d.what, d.how
            );
        }
        let moved = self.moved();
        for p in &moved {
            eprintln!(
                "shofer-sandbox: error: the command moved {} away (another directory or nothing is at its path now): a host git there would not use this repository",
                p.display()
            );
        }
        let failed_now = view_failed
            || !last.failed.is_empty()
            || !damage.is_empty()
            || !moved.is_empty()
            || !migrated.failed.is_empty();
        all.merge(last);
        // A failure during the run that the last pass fixed is not a failure any more.
        let failed = failed_now;
        if let Some(file) = report {
            if !all.restored.is_empty()
                || !moved.is_empty()
                || !all.failed.is_empty()
                || !all.quarantined.is_empty()
                || !damage.is_empty()
                || !migrated.rejected.is_empty()
                || migrated.rejected_more > 0
                || !migrated.failed.is_empty()
            {
                let record = serde_json::json!({"git_restore": {
                    "moved": moved,
                    "objects_damaged": damage.iter().map(|d| serde_json::json!({"object": d.what, "how": d.how})).collect::<Vec<_>>(),
                    "objects_rejected": migrated.rejected.iter().map(|(o, why)| serde_json::json!({"object": o, "why": why})).collect::<Vec<_>>(),
                    "objects_rejected_more": migrated.rejected_more,
                    "objects_not_moved": migrated.failed.iter().map(|(p, e)| serde_json::json!({"path": crate::report::path(p), "error": e})).collect::<Vec<_>>(),
                    "restored": crate::report::paths(&all.restored),
                    "quarantined": all.quarantined.iter().map(|q| serde_json::json!({"path": crate::report::path(&q.path), "moved_to": crate::report::path(&q.moved_to), "key": q.key})).collect::<Vec<_>>(),
                    "failed": all.failed.iter().map(|(p, e)| serde_json::json!({"path": crate::report::path(p), "error": e})).collect::<Vec<_>>(),
                    "complete": !failed,
                }});
                let _ = writeln!(file, "{record}");
            }
        }
        if !failed {
            if let Ok(g) = self.guard.lock() {
                g.clear_journal();
            }
        } else if self.journal.is_some() {
            eprintln!(
                "shofer-sandbox: the journal is kept: `shofer-sandbox --repair <WORKTREE>` or the next run on this worktree retries the restore"
            );
        }
        protect::remove_placeholders(&self.placeholders);
        for lock in protect::remove_ref_locks(&self.ref_locks) {
            eprintln!(
                "shofer-sandbox: warning: removed {}, a lock the command left on a branch another worktree has checked out",
                lock.display()
            );
        }
        failed
    }
}

/// Settings the command's git gets through its environment ([`shofer_core::gitenv`]): no automatic
/// maintenance (`git maintenance run --auto`, `git gc --auto`, started by commit, merge,
/// fetch, …), and an explicit one in the foreground. In a linked worktree a gc expires every
/// worktree's reflogs and prunes objects, which the sandbox refuses (it prints errors on
/// every commit once the repository needs one); and a detached one outlives the git command
/// that started it and is stopped with everything else when the run ends — midway through
/// rewriting refs, which leaves `*.lock` files that make every later git command on the
/// repository fail. The host's next git command does the maintenance.
const GIT_SETTINGS: [(&str, &str); 5] = [
    ("maintenance.auto", "false"),
    ("gc.auto", "0"),
    ("maintenance.autoDetach", "false"),
    ("gc.autoDetach", "false"),
    // `info/refs` (for dumb HTTP servers) is in the read-only common dir: a repack's update
    // of it fails with an `error:` line. The host's next repack writes it.
    ("repack.updateServerInfo", "false"),
];

/// Adds [`GIT_SETTINGS`] to this process's environment, which the command inherits (the
/// caller's own keys win). Must run while no other thread reads the environment but through
/// std's lock (setenv(3) is not thread-safe; the set-up thread reads it under that lock).
pub fn set_git_settings() {
    for (k, v) in shofer_core::gitenv::append(&GIT_SETTINGS, |k| std::env::var(k).ok()) {
        std::env::set_var(k, v);
    }
}

/// The private view of `repo`'s control files ([`View::take`]), where it serves; a note on
/// stderr where it cannot.
fn take_view(opened: &OpenedPolicy, repo: &Repo) -> Option<View> {
    let (common, gitdir) = match &repo.layout {
        GitLayout::Linked { common, gitdir } => (common.clone(), gitdir.clone()),
        GitLayout::MainWorktree => {
            let dot = opened.policy.worktree.join(".git");
            (dot.clone(), dot)
        }
        _ => return None,
    };
    let why = match view::unsupported(&common) {
        Some(why) => why.to_string(),
        None => match View::take(
            &common,
            &gitdir,
            &opened.policy.worktree,
            protect::uses_sha256(&common),
            &writable_paths(opened),
            opened.state_writable(),
        ) {
            Ok(v) => return Some(v),
            Err(e) => e,
        },
    };
    eprintln!(
        "shofer-sandbox: note: git works in the repository itself, guarded, not in a private view ({}: {why})",
        common.display()
    );
    None
}

/// Says on stderr what a migration of the object quarantine ([`crate::git::quarantine`]) `whose`
/// could not do.
fn announce_migrated(m: &Migrated, whose: &str, worktree: &Path) {
    for (o, why) in &m.rejected {
        eprintln!(
            "shofer-sandbox: warning: git object or pack {o} written by the command {whose} was not added to the repository: {why}"
        );
    }
    if m.rejected_more > 0 {
        eprintln!(
            "shofer-sandbox: warning: {} more git objects or packs written by the command {whose} were not added to the repository",
            m.rejected_more
        );
    }
    for (p, e) in &m.failed {
        eprintln!(
            "shofer-sandbox: error: new git objects {whose} could not be moved into the repository ({}: {e}); they stay where they are until `shofer-sandbox --repair {}` or the next run moves them",
            p.display(),
            worktree.display()
        );
    }
}

/// Finishes the restores of the journals in the state directories that pass the check
/// against `writable` (the paths a sandboxed command may write: a journal there could be the
/// command's).
fn repair(worktree: &Path, writable: &shofer_sys::statedir::Writable) -> Option<Restored> {
    let wt = std::fs::canonicalize(worktree).ok()?;
    let mut out = Restored::default();
    let mut any = false;
    for dir in guard::checked_state_dirs(guard::JOURNAL_LEAF, writable) {
        any = true;
        let r = guard::repair(&dir, &wt);
        out.restored.extend(r.restored);
        out.failed.extend(r.failed);
    }
    any.then_some(out)
}

/// The paths of `opened`'s writable set.
fn writable_paths(opened: &OpenedPolicy) -> Vec<PathBuf> {
    opened
        .policy
        .writable
        .iter()
        .map(|r| r.path.clone())
        .collect()
}

/// Before a run: finishes the restores a killed run on `worktree` left behind, reading only
/// journals outside the writable set of this run (`opened`, built before the restore).
/// Returns whether anything was put back (the writable set is then built again).
///
/// # Errors
/// A restore that still fails: the run is refused (a control file may hold the command's
/// version).
pub fn repair_before_run(worktree: &Path, opened: &OpenedPolicy) -> Result<bool, super::Error> {
    let Some(r) = repair(worktree, opened.state_writable()) else {
        return Ok(false);
    };
    guard::announce(&r, "restored from the journal of a run that was killed");
    guard::report_asides();
    if let Some((p, e)) = r.failed.first() {
        return Err(super::Error::UnfinishedRestore {
            path: p.clone(),
            error: e.clone(),
            worktree: worktree.to_path_buf(),
        });
    }
    Ok(!r.restored.is_empty())
}

/// `shofer-sandbox --repair WT`: finishes pending restores and moves what earlier runs left in
/// their quarantines (killed, or past a migration's budget) into the store. Exit status 0 when
/// nothing is left to do, 1 when a restore or a move failed, 125 when `WT` cannot be resolved
/// (ARCHITECTURE §2.6: a bad worktree).
pub fn repair_command(worktree: &Path) -> i32 {
    // The quarantines are found by the store's canonical path: `--repair .` must find them.
    let worktree = match std::fs::canonicalize(worktree) {
        Ok(wt) => wt,
        Err(e) => {
            eprintln!(
                "shofer-sandbox: --repair {}: {e} (expected a worktree's path)",
                worktree.display()
            );
            return 125;
        }
    };
    let worktree = worktree.as_path();
    // No run, so no --allow-write: the writable set every run on this worktree has.
    let writable = crate::writable::build(worktree, &[], shofer_core::policy::NetPolicy::Allow)
        .map(|mut o| {
            Repo::discover(&mut o);
            writable_paths(&o)
        })
        .unwrap_or_else(|_| vec![worktree.to_path_buf()]);
    let state_writable = shofer_sys::statedir::Writable::canonical(&writable);
    let r = repair(worktree, &state_writable).unwrap_or_default();
    let common = paths::open_nofollow(worktree).ok().and_then(|fd| {
        match crate::git::layout::discover(worktree, &fd) {
            GitLayout::Linked { common, .. } => Some(common),
            GitLayout::MainWorktree => Some(worktree.join(".git")),
            _ => None,
        }
    });
    let m = common
        .map(|c| quarantine::sweep(&c, protect::uses_sha256(&c), &state_writable))
        .unwrap_or_default();
    // Said once, by announce_migrated: they are objects, not control files.
    announce_migrated(&m, "of an earlier run", worktree);
    if m.busy > 0 {
        eprintln!(
            "shofer-sandbox: {} object quarantines of this repository are in use (a sandbox running or exiting): run --repair again when it has ended",
            m.busy
        );
    }
    if m.moved > 0 {
        eprintln!(
            "shofer-sandbox: moved {} new git objects or packs of earlier runs into the repository",
            m.moved
        );
    }
    guard::announce(&r, "restored from the journal of a run that was killed");
    guard::report_asides();
    if r.failed.is_empty() && m.failed.is_empty() {
        if r.restored.is_empty() && m.moved == 0 && m.busy == 0 {
            eprintln!("shofer-sandbox: {}: nothing to repair", worktree.display());
        }
        0
    } else {
        1
    }
}
