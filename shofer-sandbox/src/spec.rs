//! What a run asks for, whatever the backend: what runs ([`ExecSpec`], [`CapPolicy`]) and what
//! a protection lays over the command's filesystem view beyond the writable set ([`Layers`],
//! [`Redirect`]; git's, built by `crate::git`). The backends read these values; they sit
//! below every backend and import none.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::Duration;

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
    /// `--net proxy`: on Landlock alone, only TCP stream sockets, no MPTCP, no Fast Open.
    pub net_proxy: bool,
    /// The run's cgroups' v1 `tasks` or v2 `cgroup.procs`, which the command's first process
    /// writes `0` to, and `RLIMIT_NPROC` in the run's user namespace ([`crate::limits`]).
    pub cgroup_procs: Vec<RawFd>,
    pub nproc: Option<u64>,
    /// Variables for the command only, over the environment it inherits (the package
    /// caches', `crate::caches`): `(name, value)`. The supervisor's own environment, which
    /// its host-side helpers (git) inherit, never holds them.
    pub env: Vec<(&'static str, std::ffi::OsString)>,
}

/// Capabilities of the command (capabilities(7)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CapPolicy {
    /// Drop every capability the command would hold (the default).
    Drop,
    /// `--keep-caps`: leave them.
    Keep,
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
    /// A directory whose contents are replaced by another directory, bound writable over it
    /// after the binds (git's private view: (the common dir, its copy)).
    pub replace: Option<(PathBuf, PathBuf)>,
    /// A directory replaced by another, after the binds and the replacement (inside it, if
    /// it lies there; the original's path is the host's).
    pub redirect: Option<Redirect>,
    /// Directories the Landlock ruleset layered on the namespaces must allow writes in (the
    /// binds decide what of them is writable).
    pub landlock_dirs: Vec<PathBuf>,
    /// Copy-on-write views mounted after the redirect (the package caches'), each writable.
    pub overlays: Vec<Overlay>,
}

/// An overlay over a host directory (`target`, also its lower layer, read-only), its writes
/// going to `upper` (with overlayfs's `work` next to it): the command sees the host's
/// directory plus its own changes, and the host's never changes.
#[derive(Clone, Debug)]
pub(crate) struct Overlay {
    /// The host's directory, canonical: lower layer and mount point.
    pub target: PathBuf,
    /// The upper layer (private, written by the command).
    pub upper: PathBuf,
    /// overlayfs's work directory, on the same filesystem as `upper`.
    pub work: PathBuf,
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
