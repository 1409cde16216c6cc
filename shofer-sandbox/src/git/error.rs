//! What git's part of a run can fail with. Each one refuses the run (exit 125, the
//! sandbox's `SetupError`, through `From`): a protection the run needs cannot be set up.

use std::fmt;
use std::path::PathBuf;

/// A git protection that cannot be set up.
#[derive(Debug)]
pub(crate) enum Error {
    /// A protected control file is a symlink or special file, or its placeholder cannot be
    /// made (the namespace backends).
    ControlFile {
        /// The control file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A restore that a killed run left still fails: a control file may hold that command's
    /// version.
    UnfinishedRestore {
        /// The file that could not be restored.
        path: PathBuf,
        /// Why.
        error: String,
        /// The worktree, for the `--repair` hint.
        worktree: PathBuf,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ControlFile { path, why } => {
                write!(f, "git control file '{}' {why}", path.display())
            }
            Error::UnfinishedRestore {
                path,
                error,
                worktree,
            } => write!(
                f,
                "a killed run left {} changed and it cannot be restored ({error}); fix it by hand, then run `shofer-sandbox --repair {}`",
                path.display(),
                worktree.display()
            ),
        }
    }
}

impl From<Error> for crate::error::SetupError {
    fn from(e: Error) -> Self {
        crate::error::SetupError::Usage(e.to_string())
    }
}
