//! Git behind one door: everything shofer does so that a command run in a git worktree leaves
//! the repository as the host's git trusts it (docs/ARCHITECTURE.md, "Linked git worktrees").
//!
//! The rest of the sandbox sees only this module's entry points and git-agnostic values:
//! - [`Repo::discover`]: once the writable set is opened, finds the repository and adds a
//!   linked worktree's metadata to the writable set;
//! - [`Run::prepare`]: before the command, for the chosen backend — placeholders, the object
//!   quarantine, the guard's snapshot and journal — yielding the filesystem layers the
//!   namespace backends bind ([`Run::layers`], a [`crate::spec::Layers`]), the gate handlers
//!   it registers ([`Run::handlers`]) and the report's `git` section ([`Run::report`]);
//! - [`Run::start`] just before the command, [`Run::finish`] once the whole tree is gone;
//! - [`repair_before_run`], [`repair_command`] (`--repair`) and [`set_git_settings`];
//! - [`Error`]: what it can fail with (each refuses the run).
//!
//! Inside: [`layout`] and [`repo`] (where the metadata is), [`protect`] (what the host's git
//! trusts), [`run`] (the run's lifecycle), [`guard`] (snapshot, journal, watcher, restore),
//! [`quarantine`] and [`objects`] (the object store), [`nested`] and [`nestedconfig`]
//! (repositories the command makes), [`fsck`], [`remove`], and the gate handlers [`gate`],
//! [`packed_refs`] and [`freshen`].
//!
//! It must never let the command change what the host's git trusts without putting it back,
//! nor act for the command outside the command's confinement beyond the exact git steps its
//! handlers recognise.
mod error;
mod freshen;
mod fsck;
mod gate;
mod guard;
mod layout;
mod mirror;
mod nested;
pub mod nestedconfig;
mod objects;
mod packed_refs;
mod protect;
mod quarantine;
mod refs;
mod remove;
mod repo;
mod report;
mod run;
mod view;

/// git's parsers of bytes the command controls, for the fuzz entry points
/// (`crate::fuzzing`).
pub(crate) mod parsers {
    pub(crate) use super::fsck::check as fsck_check;
    pub(crate) use super::layout::parse_pointer;
    pub(crate) use super::nested::{index_fit_for_host, parse_index_bytes};
    pub(crate) use super::objects::{loose_object_id_of, loose_object_size, object_header};
    pub(crate) use super::protect::config_entries;
    pub(crate) use super::refs::{parse_packed, parse_value};
}

use shofer_core::policy::Backend;

use crate::gate::handler::Handler;
use crate::spec::{Layers, Redirect};
use crate::writable::OpenedPolicy;
pub(crate) use error::Error;
use layout::GitLayout;
pub(crate) use repo::Repo;
pub(crate) use run::{repair_before_run, repair_command, set_git_settings};

/// What git needs of the run's choice.
pub(crate) struct Choice {
    /// The chosen backend.
    pub backend: Backend,
    /// `--keep-caps`.
    pub keep_caps: bool,
    /// Whether the gate can answer calls beside this backend, or why not.
    pub gate: Result<(), String>,
}

/// Git's part of one run.
pub(crate) struct Run<'a> {
    repo: &'a Repo,
    inner: run::GitRun,
    handlers: Vec<Box<dyn Handler>>,
    /// The gate performs git's whole `packed-refs` lock protocol (reported).
    packed_refs_by_gate: bool,
}

impl<'a> Run<'a> {
    /// Before the command: what `choice` needs for `repo` ([`run::GitRun::prepare`]) and the
    /// gate handlers. Notes for the user go to `tell`.
    ///
    /// A linked worktree's common dir is outside what the command may change at its top level
    /// (Landlock: outside the writable set; the namespace backends: a read-only bind,
    /// [`protect::CommonLayer`]): the gate performs git's lock protocol on `packed-refs` there
    /// ([`packed_refs`]) — unless, on Landlock, the common dir lies inside a writable root
    /// anyway (a repository under /tmp), where git needs no help. A main worktree's `.git` is
    /// the command's, but the namespace backends bind its `config` read-only: the gate answers
    /// git's rename of an unchanged `config.lock` onto it (`git branch -d` rewrites it always).
    ///
    /// # Errors
    /// As [`run::GitRun::prepare`].
    pub(crate) fn prepare(
        opened: &OpenedPolicy,
        repo: &'a Repo,
        choice: &Choice,
        tell: &mut dyn FnMut(String),
    ) -> Result<Run<'a>, Error> {
        let open = |dir: &std::path::Path| {
            choice.gate.clone().and_then(|()| {
                packed_refs::CommonDir::open(dir).map_err(|e| format!("{}: {e}", dir.display()))
            })
        };
        let namespaces = choice.backend != Backend::Landlock;
        let mut handlers: Vec<Box<dyn Handler>> = Vec::new();
        let mut packed_refs_by_gate = false;
        let inner = run::GitRun::prepare(opened, repo, choice.backend, choice.keep_caps)?;
        // The private view is the command's own: git needs no help there.
        let guarded = if inner.view.is_some() {
            &GitLayout::None
        } else {
            &repo.layout
        };
        match (guarded, namespaces) {
            (GitLayout::Linked { .. }, false) if repo.controls.common_beneath.is_some() => {}
            (GitLayout::Linked { common, .. }, _) => match open(common) {
                // The namespace backends' common dir is a read-only bind: git's `chmod` of the
                // `config.lock` the gate made there would fail with EROFS.
                Ok(dir) => {
                    handlers.push(Box::new(gate::LockProtocol::whole(dir, namespaces)));
                    packed_refs_by_gate = true;
                }
                Err(why) => tell(format!(
                    "shofer-sandbox: note: git cannot delete refs here (packed-refs.lock cannot be made in the common dir; the supervisor cannot create it for the command: {why})"
                )),
            },
            (GitLayout::MainWorktree, true) => {
                if let Ok(dir) = open(&opened.policy.worktree.join(".git")) {
                    handlers.push(Box::new(gate::LockProtocol::config_renames(dir)));
                }
            }
            _ => {}
        }
        // git's freshen of an object in the quarantine's read-only store, performed by the
        // gate ([`freshen`]); without it git writes every object it finds there again.
        if let (Some(q), Ok(())) = (&inner.quarantine, &choice.gate) {
            match freshen::Store::open(&q.objects, q.sha256) {
                Ok(store) => handlers.push(Box::new(gate::Freshen(store))),
                Err(e) => tell(format!(
                    "shofer-sandbox: note: git rewrites the objects it finds in the store ({}: {e})",
                    q.objects.display()
                )),
            }
        }
        Ok(Run {
            repo,
            inner,
            handlers,
            packed_refs_by_gate,
        })
    }

    /// The gate handlers git registers (taken: the gate owns them from here).
    pub(crate) fn handlers(&mut self) -> Vec<Box<dyn Handler>> {
        std::mem::take(&mut self.handlers)
    }

    /// What the namespace backends bind for git: the pins above the repository, the layers
    /// over control files ([`protect::ControlSet::layers`]; with a quarantine, not the pack
    /// binds: the whole store is read-only), the object quarantine, and the common dir that
    /// a layered Landlock ruleset must allow.
    pub(crate) fn layers(&self) -> Layers {
        let c = &self.repo.controls;
        let q = self.inner.quarantine.as_ref();
        let view = self.inner.view.as_ref();
        Layers {
            pins: c.ancestors.iter().map(|(p, _)| p.clone()).collect(),
            // The view covers every control file of the common dir these binds keep
            // read-only (not the worktree's `.git`).
            binds: c
                .layers()
                .into_iter()
                .filter(|(p, _)| q.is_none_or(|q| !p.starts_with(&q.objects)))
                .filter(|(p, _)| view.is_none_or(|v| !p.starts_with(&v.over)))
                .collect(),
            replace: view.map(|v| (v.over.clone(), v.dir.clone())),
            redirect: q.map(|q| Redirect {
                over: q.objects.clone(),
                by: q.dir.clone(),
                original_at: q.store_mount.clone(),
            }),
            // Landlock does not look at a covered mount point: the view is a rule of its own.
            landlock_dirs: c
                .common
                .iter()
                .map(|l| l.common.clone())
                .chain(view.map(|v| v.dir.clone()))
                .collect(),
            ..Layers::default()
        }
    }

    /// The `--report` record's `git` section.
    pub(crate) fn report(&self) -> serde_json::Value {
        report::section(self.repo, &self.inner, self.packed_refs_by_gate)
    }

    /// Just before the command starts ([`run::GitRun::start`]).
    pub(crate) fn start(&mut self) -> Option<std::os::fd::RawFd> {
        self.inner.start()
    }

    /// The run's last step ([`run::GitRun::finish`]). Returns true when a restore failed or
    /// an object was destroyed.
    pub(crate) fn finish(self, report: Option<&mut std::fs::File>) -> bool {
        self.inner.finish(report)
    }
}
