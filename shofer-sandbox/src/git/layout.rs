//! Linked git worktrees (ARCHITECTURE §2.3).
//!
//! A linked worktree's `.git` is a file `gitdir: <common>/worktrees/<name>`. For `git add`,
//! `commit`, `checkout`, `branch` and `stash` to work inside the sandbox, the per-worktree
//! gitdir and the common dir's `objects/`, `refs/` and `logs/` must be writable — and nothing
//! else of the common dir: a writable `config`, `hooks/`, `info/` or `packed-refs` is code
//! execution on the host's next git run.
//!
//! Everything under the worktree is attacker-controlled (a previous sandboxed run may have
//! rewritten `.git`), so the layout is validated and a tampered one yields no extra paths:
//! - `.git` must be a regular file (not a symlink, FIFO or directory we would follow);
//! - the gitdir is resolved to where it really is, and its parent must be named `worktrees`;
//!   the common dir is the parent of that (never read from the attacker-writable `commondir`);
//! - the gitdir's `gitdir` back-link must name this worktree's `.git`;
//! - the rule paths are opened without following symlinks (see [`crate::paths`]).
//!
//! Every path an attacker can make us derive is then inside a directory they could already
//! write, so validation bounds reach, not just correctness.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::paths::{self, Kind};

/// Largest `.git` / `gitdir` file we read (bytes); real ones are one short line.
const MAX_POINTER_FILE: usize = 4096;

/// What the worktree's git metadata looks like.
#[derive(Debug, PartialEq, Eq)]
pub enum GitLayout {
    /// No `.git` entry: not a git worktree.
    None,
    /// `.git` is a directory inside the worktree (a main worktree): nothing to add.
    MainWorktree,
    /// A valid linked worktree: these paths become writable.
    Linked {
        /// The per-worktree gitdir, `<common>/worktrees/<name>`.
        gitdir: PathBuf,
        /// The common dir.
        common: PathBuf,
    },
    /// `.git` exists but failed validation; the reason is reported and nothing is added.
    Rejected(String),
}

impl GitLayout {
    /// The directories to make writable for this layout: the gitdir and the common dir's
    /// `objects`, `refs` and `logs` (those that exist).
    pub fn writable_dirs(&self) -> Vec<PathBuf> {
        match self {
            GitLayout::Linked { gitdir, common } => {
                let mut dirs = vec![gitdir.clone()];
                for sub in ["objects", "refs", "logs"] {
                    let p = common.join(sub);
                    if p.is_dir() {
                        dirs.push(p);
                    }
                }
                dirs
            }
            _ => Vec::new(),
        }
    }
}

/// Inspects `<worktree>/.git`. `worktree` must be canonical and `wt_fd` an `O_PATH`
/// descriptor of it.
pub fn discover(worktree: &Path, wt_fd: &OwnedFd) -> GitLayout {
    let entry = match paths::openat_path(wt_fd, Path::new(".git")) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return GitLayout::None,
        Err(e) => return GitLayout::Rejected(format!(".git: {e}")),
    };
    match paths::kind(&entry) {
        Ok(Kind::Dir) => return GitLayout::MainWorktree,
        Ok(Kind::File) => {}
        Ok(Kind::Symlink) => return GitLayout::Rejected(".git is a symlink".into()),
        Ok(Kind::Special) => return GitLayout::Rejected(".git is not a regular file".into()),
        Err(e) => return GitLayout::Rejected(format!(".git: {e}")),
    }
    match linked(worktree, wt_fd) {
        Ok((gitdir, common)) => GitLayout::Linked { gitdir, common },
        Err(reason) => GitLayout::Rejected(reason),
    }
}

fn linked(worktree: &Path, wt_fd: &OwnedFd) -> Result<(PathBuf, PathBuf), String> {
    let raw = paths::read_small_file(wt_fd, ".git", MAX_POINTER_FILE)
        .map_err(|e| format!(".git: {e}"))?;
    linked_from(worktree, &raw)
}

/// The gitdir and common dir a `.git` pointer file holding `raw` would give the canonical
/// `worktree`, validated as [`discover`] validates the one on disk (a `worktrees` parent, a
/// back-link naming this worktree's `.git`): for a pointer read elsewhere (a journal's).
///
/// # Errors
/// Why the pointer does not lead to a gitdir of this worktree.
pub fn linked_from(worktree: &Path, raw: &[u8]) -> Result<(PathBuf, PathBuf), String> {
    if std::str::from_utf8(raw).is_err() {
        return Err(".git names a path that is not UTF-8 (not supported)".into());
    }
    let target = parse_pointer(raw, "gitdir: ").ok_or(".git does not start with 'gitdir: '")?;
    let target = worktree.join(target); // an absolute target replaces the base
    let gitdir =
        std::fs::canonicalize(&target).map_err(|e| format!("gitdir {}: {e}", target.display()))?;
    let parent = gitdir.parent().ok_or("gitdir has no parent")?.to_path_buf();
    if parent.file_name() != Some("worktrees".as_ref()) {
        return Err(format!(
            "gitdir {} is not inside a 'worktrees' directory",
            gitdir.display()
        ));
    }
    let common = parent
        .parent()
        .ok_or("worktrees directory has no parent")?
        .to_path_buf();

    let gitdir_fd =
        paths::open_nofollow(&gitdir).map_err(|e| format!("gitdir {}: {e}", gitdir.display()))?;
    let back = paths::read_small_file(&gitdir_fd, "gitdir", MAX_POINTER_FILE)
        .map_err(|e| format!("{}/gitdir: {e}", gitdir.display()))?;
    let back = parse_pointer(&back, "").ok_or(if std::str::from_utf8(&back).is_err() {
        "the back-link names a path that is not UTF-8 (not supported)"
    } else {
        "empty back-link"
    })?;
    // git >= 2.48 with worktree.useRelativePaths writes it relative to the gitdir.
    let back_path = gitdir.join(&back); // an absolute back-link replaces the base
    if !names_this_worktree(&back_path, worktree) {
        return Err(format!(
            "{}/gitdir names {back}, not {}/.git",
            gitdir.display(),
            worktree.display()
        ));
    }
    Ok((gitdir, common))
}

/// The first line of `raw` after `prefix`, trimmed; `None` if absent, empty or not UTF-8.
pub(crate) fn parse_pointer(raw: &[u8], prefix: &str) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?;
    let line = text.lines().next()?.strip_prefix(prefix)?.trim();
    if line.is_empty() || line.contains('\0') {
        return None;
    }
    Some(line.to_string())
}

fn names_this_worktree(back: &Path, worktree: &Path) -> bool {
    if back.file_name() != Some(".git".as_ref()) {
        return false;
    }
    match back.parent().map(std::fs::canonicalize) {
        Some(Ok(dir)) => dir == worktree,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_pointer_takes_the_first_trimmed_line() {
        assert_eq!(
            parse_pointer(b"gitdir: /a/b\n", "gitdir: ").as_deref(),
            Some("/a/b")
        );
        assert_eq!(parse_pointer(b"gitdir:/a", "gitdir: "), None);
        assert_eq!(parse_pointer(b"gitdir: \n", "gitdir: "), None);
        assert_eq!(parse_pointer(b"\xff", ""), None);
    }

    fn layout(files: &[(&str, &str)], dirs: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        for d in dirs {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for (f, content) in files {
            std::fs::write(root.join(f), content.replace("$R", root.to_str().unwrap())).unwrap();
        }
        (tmp, root)
    }

    fn discover_in(root: &Path) -> GitLayout {
        let wt = root.join("wt");
        let fd = paths::open_nofollow(&wt).unwrap();
        discover(&wt, &fd)
    }

    #[test]
    fn a_valid_linked_worktree_yields_its_gitdir_and_common_dir() {
        let (_t, root) = layout(
            &[
                ("wt/.git", "gitdir: $R/repo/.git/worktrees/wt\n"),
                ("repo/.git/worktrees/wt/gitdir", "$R/wt/.git\n"),
            ],
            &["wt", "repo/.git/worktrees/wt", "repo/.git/objects"],
        );
        assert_eq!(
            discover_in(&root),
            GitLayout::Linked {
                gitdir: root.join("repo/.git/worktrees/wt"),
                common: root.join("repo/.git"),
            }
        );
    }

    #[test]
    fn relative_links_resolve_against_the_gitdir_and_the_worktree_not_the_cwd() {
        // git >= 2.48 `worktree.useRelativePaths`: both links relative.
        let (_t, root) = layout(
            &[
                ("wt/.git", "gitdir: ../repo/.git/worktrees/wt\n"),
                ("repo/.git/worktrees/wt/gitdir", "../../../../wt/.git\n"),
            ],
            &["wt", "repo/.git/worktrees/wt", "repo/.git/objects"],
        );
        assert_eq!(
            discover_in(&root),
            GitLayout::Linked {
                gitdir: root.join("repo/.git/worktrees/wt"),
                common: root.join("repo/.git"),
            }
        );
    }

    #[test]
    fn a_wrong_back_link_is_rejected() {
        let (_t, root) = layout(
            &[
                ("wt/.git", "gitdir: $R/repo/.git/worktrees/other\n"),
                ("repo/.git/worktrees/other/gitdir", "$R/other/.git\n"),
            ],
            &["wt", "other", "repo/.git/worktrees/other"],
        );
        assert!(matches!(discover_in(&root), GitLayout::Rejected(_)));
    }

    #[test]
    fn a_gitdir_outside_a_worktrees_directory_is_rejected() {
        let (_t, root) = layout(
            &[
                ("wt/.git", "gitdir: $R/home\n"),
                ("home/gitdir", "$R/wt/.git\n"),
            ],
            &["wt", "home"],
        );
        assert!(matches!(discover_in(&root), GitLayout::Rejected(_)));
    }

    #[test]
    fn a_symlinked_dot_git_is_rejected_and_a_directory_is_a_main_worktree() {
        let (_t, root) = layout(&[], &["wt", "x"]);
        std::os::unix::fs::symlink(root.join("x"), root.join("wt/.git")).unwrap();
        assert!(matches!(discover_in(&root), GitLayout::Rejected(_)));
        std::fs::remove_file(root.join("wt/.git")).unwrap();
        assert_eq!(discover_in(&root), GitLayout::None);
        std::fs::create_dir(root.join("wt/.git")).unwrap();
        assert_eq!(discover_in(&root), GitLayout::MainWorktree);
    }
}
