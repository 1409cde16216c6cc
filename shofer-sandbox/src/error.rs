//! Errors of setting up a sandbox. Every variant maps to exit status 125 (DESIGN §2.6) and
//! renders as one line naming the input and what would be valid.

use std::fmt;
use std::path::PathBuf;

/// Why a sandbox could not be set up. The command never runs after one of these.
#[derive(Debug)]
#[non_exhaustive]
pub enum SetupError {
    /// The command line is malformed.
    Usage(String),
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
    /// No backend can enforce the policy (each mechanism and why), or the forced one cannot.
    NoBackend(String),
    /// A syscall of the setup failed (`landlock_create_ruleset`, `fork`, `pipe2`, …).
    Syscall {
        /// The operation, named as the syscall or library call.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// Building or applying the Landlock ruleset failed.
    Landlock(String),
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

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::Usage(msg) => write!(f, "{msg}"),
            SetupError::Worktree { path, reason } => write!(
                f,
                "worktree '{}': {reason} (expected an existing directory)",
                path.display()
            ),
            SetupError::AllowWrite { path, reason } => {
                write!(f, "--allow-write '{}': {reason}", path.display())
            }
            SetupError::NoBackend(msg) => write!(f, "{msg}"),
            SetupError::Syscall { op, source } => write!(f, "{op}: {source}"),
            SetupError::Landlock(msg) => write!(f, "Landlock: {msg}"),
        }
    }
}

impl std::error::Error for SetupError {}
