//! Building the writable set of ARCHITECTURE §2.1 from the command line and the filesystem.
//!
//! Each entry is opened here, once, as an `O_PATH` descriptor; the backends use those
//! descriptors (Landlock rules) or their paths (bind mounts). Paths the caller names (the
//! worktree, `--allow-write`, `/tmp`, devices) are canonicalised first — the caller chose them —
//! and then opened without following symlinks, so a swap after canonicalisation fails instead
//! of redirecting. Paths derived from the worktree's git metadata are attacker-influenced and
//! are handled by [`crate::git`].

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use shofer_core::policy::{default_writable, NetPolicy, Policy, RuleOrigin, WritableRule};

use crate::error::SetupError;
use crate::git::{self, GitLayout};
use crate::paths::{self, Kind};

/// The policy of one run, with every rule path opened.
#[derive(Debug)]
pub struct OpenedPolicy {
    /// The policy (paths, origins, network).
    pub policy: Policy,
    /// One descriptor per `policy.writable` entry, same order.
    pub fds: Vec<OwnedFd>,
    /// What the worktree's git metadata looked like.
    pub git: GitLayout,
    /// The git control files kept from the command ([`crate::gitprotect`]).
    pub controls: crate::gitprotect::ControlSet,
}

impl OpenedPolicy {
    /// The worktree and the common dir, each with the writable root it lies inside, where it
    /// does (a repository under `/tmp`): what Landlock cannot keep from being moved away.
    pub fn repository_inside_writable(&self) -> Vec<(&Path, &Path)> {
        let common = match &self.git {
            GitLayout::Linked { common, .. } => Some(common.as_path()),
            _ => None,
        };
        [
            (
                Some(self.policy.worktree.as_path()),
                &self.controls.worktree_beneath,
            ),
            (common, &self.controls.common_beneath),
        ]
        .into_iter()
        .filter_map(|(path, root)| Some((path?, root.as_deref()?)))
        .collect()
    }
}

/// Builds the writable set for `worktree`.
///
/// # Errors
/// [`SetupError::Worktree`] if the worktree does not exist or is not a directory;
/// [`SetupError::AllowWrite`] if an `--allow-write` path does not exist or cannot be opened.
/// Missing system paths (`/dev/shm`, `/dev/full`, …) are skipped.
pub fn build(
    worktree: &Path,
    allow_write: &[PathBuf],
    net: NetPolicy,
) -> Result<OpenedPolicy, SetupError> {
    let wt = std::fs::canonicalize(worktree).map_err(|e| SetupError::Worktree {
        path: worktree.to_path_buf(),
        reason: e.to_string(),
    })?;
    let wt_fd = paths::open_nofollow(&wt).map_err(|e| SetupError::Worktree {
        path: worktree.to_path_buf(),
        reason: e.to_string(),
    })?;
    if paths::kind(&wt_fd).ok() != Some(Kind::Dir) {
        return Err(SetupError::Worktree {
            path: worktree.to_path_buf(),
            reason: "not a directory".into(),
        });
    }

    let mut set = RuleSet::default();
    let git = git::discover(&wt, &wt_fd);
    set.push_opened(wt.clone(), wt_fd, RuleOrigin::Worktree);

    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
    for (path, origin) in default_writable(tmpdir.as_deref(), &caller_terminals()) {
        set.add_system(path, origin);
    }

    // Derived from attacker-writable files: open strictly, skip what fails.
    for dir in git.writable_dirs() {
        if let Ok(fd) = paths::open_nofollow(&dir) {
            set.push_opened(dir, fd, RuleOrigin::GitMetadata);
        }
    }

    let wt_lexical = lexical_absolute(worktree);
    for path in allow_write {
        let canon = std::fs::canonicalize(path).map_err(|e| SetupError::AllowWrite {
            path: path.clone(),
            reason: format!("{e} (expected an existing file or directory)"),
        })?;
        // A path named inside the worktree that resolves outside it went through a symlink
        // the command could have planted: the worktree is attacker-controlled.
        let lexical = lexical_absolute(path);
        let named_inside = lexical.starts_with(&wt_lexical) || lexical.starts_with(&wt);
        if named_inside && !canon.starts_with(&wt) {
            return Err(SetupError::AllowWrite {
                path: path.clone(),
                reason: format!(
                    "is inside the worktree but resolves to {} through a symlink there (refused: the worktree's contents are untrusted)",
                    canon.display()
                ),
            });
        }
        let fd = paths::open_nofollow(&canon).map_err(|e| SetupError::AllowWrite {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        set.push_opened(canon, fd, RuleOrigin::AllowWrite);
    }

    let mut controls = crate::gitprotect::control_set(&git, &wt);
    // Where the host's git finds the repository by path: the worktree and a linked worktree's
    // common dir. Without a repository there is nothing it trusts to move away (the command
    // can make the worktree a repository of its own in place anyway).
    let common = match &git {
        GitLayout::Linked { common, .. } => Some(common.as_path()),
        _ => None,
    };
    if !matches!(git, GitLayout::None | GitLayout::Rejected(_)) {
        let root_around = |p: &Path| {
            set.rules
                .iter()
                .filter(|r| may_hold_a_repository(r.origin))
                .find(|r| p.starts_with(&r.path) && p != r.path)
                .map(|r| r.path.clone())
        };
        let anchors: Vec<&Path> = std::iter::once(wt.as_path()).chain(common).collect();
        controls.ancestors = writable_ancestors(&anchors, &set.rules);
        controls.worktree_beneath = root_around(&wt);
        controls.common_beneath = common.and_then(root_around);
    }
    Ok(OpenedPolicy {
        policy: Policy {
            worktree: wt,
            writable: set.rules,
            net,
        },
        fds: set.fds,
        controls,
        git,
    })
}

/// The directories between a writable root and one of `anchors` (the worktree, the
/// repository's common dir; a repository under `/tmp`): `(directory, the root it lies in)`,
/// shallowest first. The command could rename one of them away and build another repository
/// at the old path, which the host's git would then run
/// ([`crate::gitprotect::ControlSet::ancestors`]).
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

#[derive(Default)]
struct RuleSet {
    rules: Vec<WritableRule>,
    fds: Vec<OwnedFd>,
}

impl RuleSet {
    fn push_opened(&mut self, path: PathBuf, fd: OwnedFd, origin: RuleOrigin) {
        if self.rules.iter().any(|r| r.path == path) {
            return;
        }
        let is_dir = paths::kind(&fd).ok() == Some(Kind::Dir);
        self.rules.push(WritableRule {
            path,
            origin,
            is_dir,
        });
        self.fds.push(fd);
    }

    /// A system path the caller's machine defines: opened following symlinks (they are not
    /// attacker-controlled), skipped if absent. `/tmp` and `$TMPDIR` are canonicalised so
    /// the same directory is not added twice; device paths are reported as named.
    fn add_system(&mut self, path: impl AsRef<Path>, origin: RuleOrigin) {
        let path = path.as_ref();
        let path = if origin == RuleOrigin::Tmp {
            match std::fs::canonicalize(path) {
                Ok(p) => p,
                Err(_) => return,
            }
        } else {
            path.to_path_buf()
        };
        if let Ok(fd) = paths::open_following(&path) {
            self.push_opened(path, fd, origin);
        }
    }
}

/// `path` made absolute against the current directory with `.` and `..` removed lexically
/// (no symlink is followed).
fn lexical_absolute(path: &Path) -> PathBuf {
    use std::path::Component;
    let base = if path.is_absolute() {
        PathBuf::new()
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
    };
    let mut out = PathBuf::new();
    for comp in base.join(path).components() {
        match comp {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The terminal devices on the caller's stdin, stdout and stderr (e.g. `/dev/tty1` on a
/// console), so `echo > /dev/stdout` keeps working there.
fn caller_terminals() -> Vec<PathBuf> {
    (0..3)
        .filter(|&fd| {
            // Safety: isatty only inspects the descriptor.
            unsafe { libc::isatty(fd) == 1 }
        })
        .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
        .filter(|p| p.starts_with("/dev/"))
        .collect()
}
