//! Which directory is "the project": the git worktree around a directory
//! (`git rev-parse --show-toplevel`), never `$HOME` or `/`.
//!
//! An agent starts a user-scope MCP server, and runs its hooks, in whatever directory the
//! user started it in — Claude Code in the directory it was launched from, its desktop app in
//! `$HOME`. Making that directory writable would make the whole home writable when the agent
//! starts there, so the sandbox's worktree is the git worktree around it instead, and
//! `$HOME` and `/` are refused (fail closed, with a message saying what to do).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The git worktree containing `dir`, canonical.
///
/// # Errors
/// A message when `dir` is not inside a git worktree, git cannot be run, or the worktree is
/// `$HOME` (`home`) or `/`.
pub fn worktree_of(dir: &Path, home: Option<&Path>) -> Result<PathBuf, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--show-toplevel"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "cannot run git to find the project around {}: {e}",
                dir.display()
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "{} is not inside a git worktree, so there is no project to confine commands to: start the agent inside a repository, or give the directory with --worktree DIR",
            dir.display()
        ));
    }
    let top = String::from_utf8_lossy(&out.stdout)
        .trim_end_matches('\n')
        .to_string();
    let top = std::fs::canonicalize(&top).unwrap_or_else(|_| PathBuf::from(top));
    check_not_home_or_root(&top, home)?;
    Ok(top)
}

/// Refuses `/` and the home directory as a worktree.
///
/// # Errors
/// A message naming the directory and why.
pub fn check_not_home_or_root(dir: &Path, home: Option<&Path>) -> Result<(), String> {
    if dir == Path::new("/") {
        return Err("refusing / as the worktree: every file would be writable".into());
    }
    if let Some(h) = home {
        let h = std::fs::canonicalize(h).unwrap_or_else(|_| h.to_path_buf());
        if dir == h {
            return Err(format!(
                "refusing the home directory {} as the worktree: every file in it (shell start-up files, other projects) would be writable; use a repository below it",
                dir.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_is_found_and_home_refused() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir_all(repo.join("sub")).unwrap();
        let ok = Command::new("git")
            .args(["init", "-q"])
            .arg(&repo)
            .status()
            .unwrap();
        assert!(ok.success());
        let top = worktree_of(&repo.join("sub"), None).unwrap();
        assert_eq!(top, std::fs::canonicalize(&repo).unwrap());
        let e = worktree_of(&repo, Some(&repo)).unwrap_err();
        assert!(e.contains("home directory"), "{e}");
        let e = worktree_of(d.path(), None).unwrap_err();
        assert!(e.contains("not inside a git worktree"), "{e}");
        assert!(check_not_home_or_root(Path::new("/"), None).is_err());
    }
}
