//! Errors of setting up a sandbox. Every variant maps to exit status 125
//! (docs/ARCHITECTURE.md) and renders as one line naming the input and what
//! would be valid.

use std::fmt;
use std::path::PathBuf;

use shofer_core::policy::{Backend, Protection};

use shofer_sys::errno;
use shofer_sys::landlock::LandlockAbsence;

/// Why a sandbox could not be set up. The command never runs after one of these.
#[derive(Debug)]
#[non_exhaustive]
pub enum SetupError {
    /// The command line is malformed (the message names the argument and what is valid).
    Usage(String),
    /// The caller's limits cannot hold a run (the message names the limit and what it needs).
    Limit(String),
    /// A descriptor given on the command line is not open.
    FdNotOpen {
        /// The descriptor.
        fd: i32,
        /// The options it may have come from, as shown in the message.
        given_to: &'static str,
    },
    /// The command contains a NUL byte.
    NulInCommand,
    /// `--keep-descendants` with the bwrap backend.
    KeepDescendantsWithBwrap,
    /// The caller exited before the command started.
    CallerExited,
    /// The worktree does not exist, is not a directory, or cannot be opened.
    Worktree {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An `--allow-write` path does not exist or cannot be opened.
    AllowWrite {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The working directory lies in a hidden secret location: relative paths would name what
    /// the run hides (and the namespace backends could not enter it at all).
    CwdHidden {
        /// The working directory.
        cwd: PathBuf,
        /// The hidden location that holds it.
        location: PathBuf,
    },
    /// A descriptor the command gets is a directory at, inside or above a hidden location: its
    /// `/proc/self/fd/N` walks the host's tree, beneath every mount that hides the location.
    FdHidden {
        /// The descriptor.
        fd: i32,
        /// The directory it names.
        path: PathBuf,
        /// The hidden location.
        location: PathBuf,
    },
    /// The working directory has no name (deleted, or beneath a mount gone): it cannot be
    /// checked against the hidden locations, nor entered again beneath the namespaces' mounts.
    CwdUnnamed(std::io::Error),
    /// The requested (or chosen) backend cannot enforce the policy here.
    Unusable(Unusable),
    /// `auto`: no backend can enforce the policy; each mechanism tried and why not, in order.
    NoBackend(Vec<Unusable>),
    /// A syscall of the setup failed (`landlock_create_ruleset`, `clone`, `pipe2`, …).
    Syscall {
        /// The operation, named as the syscall or library call.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// Building the Landlock ruleset failed.
    Landlock {
        /// The writable path whose rule the kernel refused; `None` for the ruleset itself.
        rule: Option<PathBuf>,
        /// The error.
        source: landlock::RulesetError,
    },
}

/// Why Landlock cannot be used at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LandlockOff {
    /// The kernel has none (see [`LandlockAbsence`]).
    Kernel(LandlockAbsence),
    /// `--max-abi 0`.
    CappedToZero,
}

/// Why one mechanism cannot enforce the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unusable {
    /// Landlock cannot be used.
    Landlock(LandlockOff),
    /// Landlock at `abi` lacks required protections (`--allow-degraded` accepts it).
    LandlockPartial {
        /// The effective ABI.
        abi: u32,
        /// Each required protection it lacks, and why.
        degraded: Vec<(Protection, String)>,
    },
    /// User namespaces do not work here (the reason names the cause and the fix).
    Userns(String),
    /// `layered` without Landlock.
    LayeredWithoutLandlock(LandlockOff),
    /// A namespace backend at Landlock ABI `abi` lacks required protections.
    NamespacesPartial {
        /// `userns` or `layered`.
        backend: Backend,
        /// The Landlock ABI layered on top.
        abi: u32,
        /// Each required protection it lacks, and why.
        degraded: Vec<(Protection, String)>,
    },
    /// No usable bubblewrap (the reason: not installed, too old, refused by AppArmor…).
    Bwrap(String),
}

impl Unusable {
    /// The required protections this mechanism lacks, if that is why it is unusable.
    #[cfg(test)]
    pub fn degraded(&self) -> &[(Protection, String)] {
        match self {
            Unusable::LandlockPartial { degraded, .. }
            | Unusable::NamespacesPartial { degraded, .. } => degraded,
            _ => &[],
        }
    }
}

impl SetupError {
    /// A [`SetupError::Syscall`] from the current `errno`.
    pub fn last_os(op: &'static str) -> Self {
        SetupError::Syscall {
            op,
            source: std::io::Error::last_os_error(),
        }
    }
}

/// What can stop a backend from building its plan: a setup error, or a command that cannot
/// run at all (found out before the spawn, as the bwrap backend must).
#[derive(Debug)]
pub(crate) enum PlanError {
    /// The sandbox cannot be set up.
    Setup(SetupError),
    /// The command cannot be executed: the exit status (126 or 127) and the message.
    NotRunnable {
        /// 126 or 127.
        code: i32,
        /// As a shell says it.
        message: String,
    },
}

impl From<SetupError> for PlanError {
    fn from(e: SetupError) -> Self {
        PlanError::Setup(e)
    }
}

impl fmt::Display for LandlockOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LandlockOff::Kernel(LandlockAbsence::NotBuilt) => {
                write!(f, "not in this kernel (ENOSYS)")
            }
            LandlockOff::Kernel(LandlockAbsence::Disabled) => write!(
                f,
                "built in but disabled at boot (EOPNOTSUPP; add landlock to lsm=)"
            ),
            LandlockOff::Kernel(LandlockAbsence::Other(e)) => {
                write!(
                    f,
                    "landlock_create_ruleset failed ({})",
                    errno::name_or_number(*e)
                )
            }
            LandlockOff::CappedToZero => write!(f, "disabled by --max-abi 0"),
        }
    }
}

/// The reasons of `degraded`, joined by "; ".
pub(crate) fn whys(degraded: &[(Protection, String)]) -> String {
    degraded
        .iter()
        .map(|(_, why)| why.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unusable::Landlock(off) => write!(f, "Landlock: {off}"),
            Unusable::LandlockPartial { abi, degraded } => write!(
                f,
                "Landlock: ABI {abi} is partial ({}; pass --allow-degraded to accept)",
                whys(degraded)
            ),
            Unusable::Userns(why) => write!(f, "user namespaces: {why}"),
            Unusable::LayeredWithoutLandlock(off) => {
                write!(f, "layered: needs Landlock, which is unusable: {off}")
            }
            Unusable::NamespacesPartial {
                backend,
                abi,
                degraded,
            } => write!(
                f,
                "{backend}: partial at Landlock ABI {abi} ({}; pass --allow-degraded to accept)",
                whys(degraded)
            ),
            Unusable::Bwrap(why) => write!(f, "bwrap: {why}"),
        }
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::Usage(msg) | SetupError::Limit(msg) => write!(f, "{msg}"),
            SetupError::FdNotOpen { fd, given_to } => {
                write!(f, "file descriptor {fd} is not open (given to {given_to})")
            }
            SetupError::NulInCommand => write!(f, "the command contains a NUL byte"),
            SetupError::KeepDescendantsWithBwrap => write!(
                f,
                "--keep-descendants is not available with the bwrap backend (bubblewrap's init kills them when the command exits); use landlock or userns"
            ),
            SetupError::CallerExited => write!(f, "the caller exited before the command started"),
            SetupError::Worktree { path, reason } => write!(
                f,
                "worktree '{}': {reason} (expected an existing directory)",
                path.display()
            ),
            SetupError::AllowWrite { path, reason } => {
                write!(f, "--allow-write '{}': {reason}", path.display())
            }
            SetupError::CwdHidden { cwd, location } => write!(
                f,
                "the working directory {} lies in {}, a secret location the sandbox hides: run from another directory (a human may allow it with --allow-read {})",
                cwd.display(),
                location.display(),
                location.display()
            ),
            SetupError::FdHidden { fd, path, location } => write!(
                f,
                "descriptor {fd} is the directory {}, which reaches {}, a secret location the sandbox hides (through /proc/self/fd/{fd}): give the command another one (a human may allow the location with --allow-read {})",
                path.display(),
                location.display(),
                location.display()
            ),
            SetupError::CwdUnnamed(e) => write!(
                f,
                "the working directory has no name ({e}: deleted, or beneath a mount that is gone): run from an existing directory"
            ),
            SetupError::Unusable(u) => write!(f, "{u}"),
            SetupError::NoBackend(tried) => {
                let tried: Vec<String> = tried.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "no sandbox backend can enforce the policy: {}",
                    tried.join("; ")
                )
            }
            SetupError::Syscall { op, source } => write!(f, "{op}: {source}"),
            SetupError::Landlock { rule: None, source } => write!(f, "Landlock: {source}"),
            SetupError::Landlock {
                rule: Some(path),
                source,
            } => write!(f, "Landlock: rule {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for SetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SetupError::Syscall { source, .. } => Some(source),
            SetupError::Landlock { source, .. } => Some(source),
            _ => None,
        }
    }
}
