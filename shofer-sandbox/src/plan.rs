//! The plan of one run: what to execute ([`ExecSpec`], the same for every backend) and how it
//! is confined ([`Confinement`], one variant per backend, built by that backend's module:
//! [`crate::ruleset::plan`], [`crate::namespaces::plan`], [`crate::bwrap::plan`]).
//!
//! Whatever the child does differently per backend (no_new_privs, capability drop, seccomp,
//! which ruleset, which argv) follows from the variant in one place,
//! [`crate::exec::Steps::of`]; a combination no backend uses cannot be written down.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::Duration;

use landlock::RulesetCreated;

use crate::{bwrap, namespaces};

/// What runs, whatever the backend.
pub(crate) struct ExecSpec {
    /// `argv`; `argv[0]` is looked up on `$PATH` at exec as by `execvp(3)`.
    pub argv: Vec<CString>,
    /// Descriptors above 2 that survive exec (`--pass-fd`).
    pub pass_fds: Vec<RawFd>,
    /// A terminal is on stdin, stdout or stderr: keep the session (job control, SIGWINCH).
    pub interactive: bool,
    /// What happens to the caller's capabilities.
    pub caps: CapPolicy,
    /// Time between SIGTERM and SIGKILL when the tree is stopped.
    pub grace: Duration,
    /// Wait for descendants after the main process exits instead of killing them.
    pub keep_descendants: bool,
    /// A root caller dropping capabilities over a worktree owned by this (uid, gid): the
    /// namespace backends keep [`crate::capabilities::FOREIGN_WORKTREE`] with every id mapped,
    /// Landlock alone runs the command as the owner.
    pub foreign_owner: Option<(u32, u32)>,
    /// `--net deny`: TCP is refused, so MPTCP sockets (which Landlock's TCP rules do not
    /// cover) cannot be made.
    pub net_deny: bool,
}

/// What a protection adds to the command's filesystem view beyond the writable set, for the
/// namespace backends (git's, built by `crate::git`). The backends read only this value: they
/// never name what it protects.
#[derive(Default)]
pub(crate) struct Layers {
    /// Directories bound over themselves, writable, so they cannot be renamed away or removed
    /// (directories above the worktree inside a writable root): before [`Layers::binds`];
    /// bubblewrap orders them with the writable set, shallowest first.
    pub pins: Vec<PathBuf>,
    /// Binds over themselves after the writable set, in order: (path, writable). A
    /// read-only path that is absent is skipped.
    pub binds: Vec<(PathBuf, bool)>,
    /// A directory replaced by another, after the binds.
    pub redirect: Option<Redirect>,
    /// Directories the Landlock ruleset layered on the namespaces must allow writes in (the
    /// binds decide what of them is writable).
    pub landlock_dirs: Vec<PathBuf>,
}

/// A directory (`over`) whose contents are replaced by another directory (`by`, bound
/// writable over it), the original kept read-only at `original_at` (a mount point inside
/// `by`).
pub(crate) struct Redirect {
    /// The directory replaced.
    pub over: PathBuf,
    /// What replaces it.
    pub by: PathBuf,
    /// Where the original is bound read-only, inside `by`.
    pub original_at: PathBuf,
}

/// Capabilities of the command (capabilities(7)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CapPolicy {
    /// Drop every capability the command would hold (the default).
    Drop,
    /// `--keep-caps`: leave them.
    Keep,
}

/// How the command is confined: one variant per backend.
pub(crate) enum Confinement<'a> {
    /// The `landlock` backend: a ruleset applied last before exec.
    Landlock(LandlockPlan),
    /// The `userns` and `layered` backends: process A builds the namespaces, then the command
    /// runs under an optional Landlock ruleset.
    Namespaces(namespaces::Setup<'a>),
    /// The `bwrap` backend: bubblewrap runs the command; its arguments and info pipe are
    /// owned here until the command runs.
    Bwrap(bwrap::Launch),
}

/// The `landlock` backend's part of the plan.
pub(crate) struct LandlockPlan {
    /// Created, applied by the child last before exec.
    pub ruleset: RulesetCreated,
    /// The caller holds capabilities (root, or file capabilities): only then is there
    /// anything to drop (and the right to drop it).
    pub caller_privileged: bool,
    /// The ABI the ruleset is made for.
    pub abi: u32,
}

/// A run's plan: built by the chosen backend, consumed by spawning and supervising.
pub(crate) struct Plan<'a> {
    /// What runs.
    pub exec: ExecSpec,
    /// How it is confined.
    pub confinement: Confinement<'a>,
    /// Written to (one byte) once the command's process exists: a watcher that must not run
    /// during a fork-like clone (git's, `crate::git::guard::Watcher`).
    pub spawned_gate: Option<RawFd>,
}
