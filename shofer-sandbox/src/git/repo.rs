//! The worktree's repository as this run finds it: where its git metadata is
//! ([`super::layout`]), what of it the host's git trusts and the agents' and editors' files at
//! the worktree's top ([`super::protect::ControlSet`]), and
//! where it lies relative to the writable set.
//!
//! Entry point: [`Repo::discover`], once the writable set is opened; it adds a linked
//! worktree's metadata to that set (the only git paths the command may write at their top).

use std::path::{Path, PathBuf};

use shofer_core::policy::{Backend, RuleOrigin, WritableRule};

use super::layout::{self, GitLayout};
use super::protect::{self, ControlSet};
use crate::writable::OpenedPolicy;

/// The worktree's repository for one run.
#[derive(Debug)]
pub(crate) struct Repo {
    /// What the worktree's git metadata looked like.
    pub layout: GitLayout,
    /// The git control files kept from the command.
    pub controls: ControlSet,
}

impl Repo {
    /// Inspects the worktree of `opened`, adds a validated linked worktree's metadata
    /// directories to its writable set, and lists what the host's git, agents and editors
    /// trust there.
    pub(crate) fn discover(opened: &mut OpenedPolicy) -> Repo {
        let wt = opened.policy.worktree.clone();
        let layout = layout::discover(&wt, opened.worktree_fd());
        // Derived from attacker-writable files: opened strictly, skipped when that fails.
        opened.insert_derived(layout.writable_dirs(), RuleOrigin::GitMetadata);
        let mut controls = protect::control_set(&layout, &wt);
        let granted: Vec<&Path> = opened
            .policy
            .writable
            .iter()
            .filter(|r| r.origin == RuleOrigin::AllowWrite)
            .map(|r| r.path.as_path())
            .collect();
        protect::add_host_tool_files(&mut controls, &wt, &granted);
        // Where the host's git finds the repository by path: the worktree and a linked
        // worktree's common dir. Without a repository there is nothing it trusts to move away
        // (the command can make the worktree a repository of its own in place anyway).
        let common = match &layout {
            GitLayout::Linked { common, .. } => Some(common.as_path()),
            _ => None,
        };
        if !matches!(layout, GitLayout::None | GitLayout::Rejected(_)) {
            let rules = &opened.policy.writable;
            let root_around = |p: &Path| {
                rules
                    .iter()
                    .filter(|r| may_hold_a_repository(r.origin))
                    .find(|r| p.starts_with(&r.path) && p != r.path)
                    .map(|r| r.path.clone())
            };
            let anchors: Vec<&Path> = std::iter::once(wt.as_path()).chain(common).collect();
            controls.ancestors = writable_ancestors(&anchors, rules);
            controls.worktree_beneath = root_around(&wt);
            controls.common_beneath = common.and_then(root_around);
        }
        Repo { layout, controls }
    }

    /// What to tell the user about the repository before the run, if anything (metadata
    /// found but not made writable).
    pub(crate) fn note(&self) -> Option<String> {
        match &self.layout {
            GitLayout::Rejected(why) => Some(format!(
                "shofer-sandbox: note: git metadata not made writable: {why}"
            )),
            _ => None,
        }
    }

    /// Whether git will work in a private view on `backend` ([`crate::git::view`]): the
    /// namespace backends, unless bubblewrap keeps `CAP_SYS_ADMIN` (`keep_caps`), for a
    /// repository the view serves. (Taking it can still fail: then git works guarded.)
    pub(crate) fn private_view_likely(
        &self,
        backend: Backend,
        keep_caps: bool,
        worktree: &Path,
    ) -> bool {
        let common = match &self.layout {
            GitLayout::Linked { common, .. } => common.clone(),
            GitLayout::MainWorktree => worktree.join(".git"),
            _ => return false,
        };
        backend != Backend::Landlock
            && !(backend == Backend::Bwrap && keep_caps)
            && super::view::unsupported(&common).is_none()
    }

    /// The linked worktree's common dir.
    pub(crate) fn common(&self) -> Option<&Path> {
        match &self.layout {
            GitLayout::Linked { common, .. } => Some(common.as_path()),
            _ => None,
        }
    }

    /// The worktree (at `worktree`) and the common dir, each with the writable root it lies
    /// inside, where it does (a repository under `/tmp`): what Landlock cannot keep from being
    /// moved away.
    pub(crate) fn inside_writable<'a>(&'a self, worktree: &'a Path) -> Vec<(&'a Path, &'a Path)> {
        [
            (Some(worktree), &self.controls.worktree_beneath),
            (self.common(), &self.controls.common_beneath),
        ]
        .into_iter()
        .filter_map(|(path, root)| Some((path?, root.as_deref()?)))
        .collect()
    }
}

/// The directories between a writable root and one of `anchors` (the worktree, the
/// repository's common dir; a repository under `/tmp`): `(directory, the root it lies in)`,
/// shallowest first. The command could rename one of them away and build another repository
/// at the old path, which the host's git would then run
/// ([`crate::git::protect::ControlSet::ancestors`]).
fn writable_ancestors(anchors: &[&Path], rules: &[WritableRule]) -> Vec<(PathBuf, PathBuf)> {
    let mut out: Vec<(PathBuf, PathBuf)> = Vec::new();
    for rule in rules.iter().filter(|r| may_hold_a_repository(r.origin)) {
        for anchor in anchors {
            for d in crate::paths::dirs_between(&rule.path, anchor) {
                if !out.iter().any(|(p, _)| p == d) {
                    out.push((d.to_path_buf(), rule.path.clone()));
                }
            }
        }
    }
    out.sort_by_key(|(p, _)| p.components().count());
    out
}

/// Whether a writable root of this origin can hold a repository (devices cannot; the git
/// metadata roots lie inside the repository).
fn may_hold_a_repository(origin: RuleOrigin) -> bool {
    !matches!(
        origin,
        RuleOrigin::Device | RuleOrigin::Terminal | RuleOrigin::GitMetadata
    )
}
