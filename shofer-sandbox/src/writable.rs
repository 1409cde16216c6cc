//! Building the writable set of ARCHITECTURE §2.1 from the command line and the filesystem.
//!
//! Each entry is opened here, once, as an `O_PATH` descriptor; the backends use those
//! descriptors (Landlock rules) or their paths (bind mounts). Paths the caller names (the
//! worktree, `--allow-write`, `/tmp`, devices) are canonicalised first — the caller chose them —
//! and then opened without following symlinks, so a swap after canonicalisation fails instead
//! of redirecting. Paths derived from attacker-writable files (a linked worktree's git
//! metadata, `crate::git`) are added by their owner with [`OpenedPolicy::insert_derived`].

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use shofer_core::policy::{default_writable, NetPolicy, Policy, RuleOrigin, WritableRule};

use crate::error::SetupError;
use crate::paths::{self, Kind};

/// The policy of one run, with every rule path opened.
#[derive(Debug)]
pub struct OpenedPolicy {
    /// The policy (paths, origins, network).
    pub policy: Policy,
    /// One descriptor per `policy.writable` entry, same order.
    pub fds: Vec<OwnedFd>,
    /// [`OpenedPolicy::state_writable`], once asked for (until a path is added).
    state_writable: std::sync::OnceLock<shofer_sys::statedir::Writable>,
}

impl OpenedPolicy {
    /// The writable set as the state directories' checks need it (`shofer_sys::statedir`):
    /// canonical, read from the descriptors held (one `readlink` each, once per set, where
    /// each check would resolve every path again: an `open`, `readlink` and `close` apiece,
    /// three checks a run). A path whose object is gone since counts as written.
    pub fn state_writable(&self) -> &shofer_sys::statedir::Writable {
        self.state_writable.get_or_init(|| {
            shofer_sys::statedir::Writable::of_canonical(
                self.policy
                    .writable
                    .iter()
                    .zip(&self.fds)
                    .map(|(r, fd)| shofer_sys::fd::path_of(fd).unwrap_or_else(|| r.path.clone()))
                    .collect(),
            )
        })
    }

    /// The worktree's `O_PATH` descriptor.
    pub fn worktree_fd(&self) -> &OwnedFd {
        self.policy
            .writable
            .iter()
            .zip(&self.fds)
            .find(|(r, _)| r.origin == RuleOrigin::Worktree)
            .map(|(_, fd)| fd)
            .expect("the writable set holds the worktree")
    }

    /// Adds `dirs`, derived from attacker-writable files, with `origin`: each opened without
    /// following a symlink (one that fails is skipped), placed before the `--allow-write`
    /// paths (a derived path the caller named too keeps the derived origin).
    pub fn insert_derived(&mut self, dirs: Vec<PathBuf>, origin: RuleOrigin) {
        self.state_writable = std::sync::OnceLock::new();
        let mut at = self
            .policy
            .writable
            .iter()
            .position(|r| r.origin == RuleOrigin::AllowWrite)
            .unwrap_or(self.policy.writable.len());
        for dir in dirs {
            let Ok(fd) = paths::open_nofollow(&dir) else {
                continue;
            };
            match self.policy.writable.iter().position(|r| r.path == dir) {
                Some(i) if self.policy.writable[i].origin == RuleOrigin::AllowWrite => {
                    self.policy.writable.remove(i);
                    self.fds.remove(i);
                }
                Some(_) => continue,
                None => {}
            }
            let is_dir = paths::kind(&fd).ok() == Some(Kind::Dir);
            self.policy.writable.insert(
                at,
                WritableRule {
                    path: dir,
                    origin,
                    is_dir,
                },
            );
            self.fds.insert(at, fd);
            at += 1;
        }
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
    let wt = shofer_sys::fd::canonicalize(worktree).map_err(|e| SetupError::Worktree {
        path: worktree.to_path_buf(),
        reason: e.to_string(),
    })?;
    // A symlink anywhere on the path may be one a command planted (under /tmp, in another
    // worktree, in an earlier run) and would make its target the worktree: the path must name
    // the directory itself, as an --allow-write path must. Opened below without following any
    // symlink, so one swapped in after this check fails too.
    if let Some(reason) = through_symlink(worktree, &wt) {
        return Err(SetupError::Worktree {
            path: worktree.to_path_buf(),
            reason,
        });
    }
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
    set.push_opened(wt.clone(), wt_fd, RuleOrigin::Worktree);

    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
    for (path, origin) in default_writable(tmpdir.as_deref(), &caller_terminals()) {
        set.add_system(path, origin);
    }

    for path in allow_write {
        let canon = shofer_sys::fd::canonicalize(path).map_err(|e| SetupError::AllowWrite {
            path: path.clone(),
            reason: format!("{e} (expected an existing file or directory)"),
        })?;
        // A symlink anywhere on the path may be one a command planted — in the worktree, in
        // /tmp, in another --allow-write directory or a package cache's private directory, in
        // an earlier run — and would hand this run wherever it points: the path must name its
        // target itself.
        if let Some(reason) = through_symlink(path, &canon) {
            return Err(SetupError::AllowWrite {
                path: path.clone(),
                reason,
            });
        }
        let fd = paths::open_nofollow(&canon).map_err(|e| SetupError::AllowWrite {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        set.push_opened(canon, fd, RuleOrigin::AllowWrite);
    }

    Ok(OpenedPolicy {
        policy: Policy {
            worktree: wt,
            writable: set.rules,
            net,
        },
        fds: set.fds,
        state_writable: std::sync::OnceLock::new(),
    })
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
    /// attacker-controlled), skipped if absent; `/tmp` is canonicalised so the same directory
    /// is not added twice; device paths are reported as named. `$TMPDIR` is not the machine's:
    /// [`RuleSet::add_tmpdir`].
    fn add_system(&mut self, path: impl AsRef<Path>, origin: RuleOrigin) {
        let path = path.as_ref();
        if origin == RuleOrigin::Tmp && path != Path::new(shofer_core::policy::TMP) {
            self.add_tmpdir(path);
            return;
        }
        let path = if origin == RuleOrigin::Tmp {
            match shofer_sys::fd::canonicalize(path) {
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

impl RuleSet {
    /// `$TMPDIR`: it often lies where runs write (under `/tmp`, in a worktree), and a symlink
    /// a command planted on its path in an earlier run would hand this run wherever it points.
    /// Opened as named, with no symlink followed anywhere (one call: a swap fails it too); one
    /// that leads elsewhere through a symlink stays out of the set, said once on stderr (the
    /// set is built twice a run), as a symlinked `--allow-write` is refused.
    fn add_tmpdir(&mut self, tmpdir: &Path) {
        static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let named = lexical_absolute(tmpdir);
        match paths::open_nofollow(&named) {
            Ok(fd) => self.push_opened(named, fd, RuleOrigin::Tmp),
            Err(_) => {
                let Ok(target) = shofer_sys::fd::canonicalize(tmpdir) else {
                    return; // absent: nothing to add
                };
                if !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    eprintln!(
                        "shofer-sandbox: note: $TMPDIR ({}) leads to {} through a symlink, which a command may have planted: it is not writable in this run (set TMPDIR to {} itself)",
                        tmpdir.display(),
                        target.display(),
                        target.display()
                    );
                }
            }
        }
    }
}

/// Why a caller's `path`, whose canonical path is `canon`, is refused: when a symlink on it
/// leads elsewhere (the worktree's and `--allow-write`'s rule).
fn through_symlink(path: &Path, canon: &Path) -> Option<String> {
    (lexical_absolute(path) != canon).then(|| {
        format!(
            "resolves to {} through a symlink (refused: a command may have planted it; name {} itself)",
            canon.display(),
            canon.display()
        )
    })
}

/// `path` made absolute against the current directory with `.` and `..` removed lexically
/// (no symlink is followed).
fn lexical_absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return shofer_core::lexical::clean(path);
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    shofer_core::lexical::clean(&cwd.join(path))
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
