//! Which directory is "the project": the git worktree around a directory, found by walking up
//! to the first `.git` entry ourselves, and never a directory holding the home directory, `/`,
//! or one below `/tmp`, `$TMPDIR` or `/dev/shm`.
//!
//! - [`worktree_of`]: the walk ([`find_top`]) then the checks ([`check_worktree`]).
//! - [`homes`]: the home directory from `$HOME` and from the password database.
//!
//! An agent starts a user-scope MCP server, and runs its hooks, in whatever directory the
//! user started it in — Claude Code in the directory it was launched from, its desktop app in
//! `$HOME`. Making that directory writable would make the whole home writable when the agent
//! starts there, so the sandbox's worktree is the git worktree around it instead.
//!
//! Why not `git rev-parse --show-toplevel`: git honours `core.worktree` (and `GIT_DIR`,
//! `GIT_WORK_TREE`) of whatever `.git` it finds, and a sandboxed command can create a `.git`
//! anywhere it may write — a repository below the agent's directory whose `core.worktree`
//! names `~/.config` would make the next command's worktree `~/.config`. The walk here reads
//! no git configuration and runs no git: the project is the directory itself or its nearest
//! ancestor holding a `.git` directory or a `.git` file starting `gitdir:` (a linked worktree,
//! a submodule). A `.git` planted below the real project only narrows the worktree to a part
//! of it. One planted where any command may write — `/tmp`, `$TMPDIR`, `/dev/shm` — could
//! capture sessions started there later, so worktrees there are refused; so is any directory
//! that holds the home directory (a `/home/.git` would make the whole home writable), the
//! home directory taken from the password database as well as `$HOME`, and `/`.

use std::path::{Path, PathBuf};

/// The git worktree containing `dir` (canonical), checked by [`check_worktree`].
///
/// # Errors
/// A message when `dir` cannot be resolved, is not inside a git worktree, or the worktree is
/// refused.
pub fn worktree_of(dir: &Path, home: Option<&Path>) -> Result<PathBuf, String> {
    let real = std::fs::canonicalize(dir)
        .map_err(|e| format!("cannot resolve the directory {}: {e}", dir.display()))?;
    let top = find_top(&real).ok_or_else(|| {
        format!(
            "{} is not inside a git worktree, so there is no project to confine commands to: start the agent inside a repository, or give the directory with --worktree DIR",
            dir.display()
        )
    })?;
    check_worktree(&top, home)?;
    Ok(top)
}

/// `dir` or its nearest ancestor holding a `.git` directory or a `.git` file that starts with
/// `gitdir:`; `dir` should be canonical (the walk is lexical).
pub fn find_top(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| has_git_entry(d))
        .map(Path::to_path_buf)
}

/// Whether `dir` holds a `.git` directory, or a `.git` file pointing at one (`gitdir: …`).
/// A `.git` symlink does not count (the walk goes on up; a `.git` found higher up is never
/// a narrower worktree than the user's own).
fn has_git_entry(dir: &Path) -> bool {
    let git = dir.join(".git");
    match std::fs::symlink_metadata(&git) {
        Ok(m) if m.is_dir() => true,
        Ok(m) if m.is_file() => shofer_sys::projectfile::read_beneath(dir, Path::new(".git"), 4096)
            .ok()
            .flatten()
            .is_some_and(|t| t.starts_with("gitdir:")),
        _ => false,
    }
}

/// Refuses `dir` (canonical) as a worktree found around a directory when it is `/`, holds a
/// home directory ([`homes`]), or lies below a world-writable directory, `/tmp`, `$TMPDIR` or
/// `/dev/shm`.
///
/// # Errors
/// A message naming the directory, why, and what to do instead.
pub fn check_worktree(dir: &Path, home: Option<&Path>) -> Result<(), String> {
    if dir == Path::new("/") {
        return Err("refusing / as the worktree: every file would be writable".into());
    }
    let homes = homes(home);
    if homes.is_empty() {
        return Err(format!(
            "refusing {} as the worktree: the home directory is unknown (HOME is unset or relative and the password database has no entry for this user), so it cannot be checked that the worktree does not hold it; set HOME",
            dir.display()
        ));
    }
    for h in &homes {
        if dir == h {
            return Err(format!(
                "refusing the home directory {} as the worktree: every file in it (shell start-up files, other projects) would be writable; use a repository below it",
                dir.display()
            ));
        }
        if h.starts_with(dir) {
            return Err(format!(
                "refusing {} as the worktree: it holds the home directory {}, so every file in the home (shell start-up files, other projects) would be writable; use a repository below the home directory",
                dir.display(),
                h.display()
            ));
        }
    }
    // Any world-writable directory on the way (/var/tmp, a shared scratch area): another
    // user, or a command, could have made the repository there.
    for a in dir.ancestors() {
        use std::os::unix::fs::PermissionsExt;
        if std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o002 != 0) {
            return Err(format!(
                "refusing {} as the worktree: {} is writable by every user, so anyone could have made the repository there; use a repository elsewhere, or name the directory yourself with --worktree DIR",
                dir.display(),
                a.display()
            ));
        }
    }
    for t in temp_dirs() {
        if dir.starts_with(&t) {
            return Err(format!(
                "refusing {} as the worktree: it is below {}, where any command (a sandboxed one too) can create a repository; use a repository elsewhere, or name the directory yourself with --worktree DIR",
                dir.display(),
                t.display()
            ));
        }
    }
    Ok(())
}

/// The home directories to protect, canonical where they exist: `home` (normally `$HOME`)
/// when absolute, and the password database's entry for this user.
pub fn homes(home: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for h in [home.map(Path::to_path_buf), passwd_home()]
        .into_iter()
        .flatten()
        .filter(|h| h.is_absolute())
    {
        let h = std::fs::canonicalize(&h).unwrap_or(h);
        if !out.contains(&h) {
            out.push(h);
        }
    }
    out
}

/// `/tmp`, `$TMPDIR` (when absolute) and `/dev/shm`, canonical where they exist.
fn temp_dirs() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = vec!["/tmp".into(), "/dev/shm".into()];
    if let Some(t) = std::env::var_os("TMPDIR").map(PathBuf::from) {
        if t.is_absolute() && t != Path::new("/") {
            out.push(t);
        }
    }
    out.into_iter()
        .map(|t| std::fs::canonicalize(&t).unwrap_or(t))
        .collect()
}

/// This user's home directory from the password database (`getpwuid_r`), whatever `$HOME`
/// says. Raw `libc`: neither `rustix` nor the standard library reads the password database.
pub fn passwd_home() -> Option<PathBuf> {
    use std::ffi::CStr;
    use std::os::unix::ffi::OsStrExt;
    let uid = rustix::process::getuid().as_raw();
    let mut buf = vec![0u8; 4096];
    loop {
        // Safety: `pwd` is plain old data filled in by getpwuid_r; all-zero is a valid value.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // Safety: every pointer is valid for the call, `buf` for `buf.len()` bytes; the
        // strings in `pwd` point into `buf`, which outlives their use below.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        // Safety: getpwuid_r succeeded, so `pw_dir` is a NUL-terminated string inside `buf`.
        let dir = unsafe { CStr::from_ptr(pwd.pw_dir) };
        let p = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
        return (!p.as_os_str().is_empty()).then_some(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_git_entry_is_the_project() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let repo = root.join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("a/b")).unwrap();
        assert_eq!(find_top(&repo.join("a/b")), Some(repo.clone()));
        // A linked worktree's `.git` file counts; any other file does not.
        std::fs::write(repo.join("a/.git"), "gitdir: /x/.git/worktrees/a\n").unwrap();
        assert_eq!(find_top(&repo.join("a/b")), Some(repo.join("a")));
        std::fs::write(repo.join("a/.git"), "not a pointer").unwrap();
        assert_eq!(find_top(&repo.join("a/b")), Some(repo.clone()));
        // Its git configuration is never read: core.worktree elsewhere changes nothing.
        std::fs::write(repo.join(".git/config"), "[core]\n\tworktree = /etc\n").unwrap();
        assert_eq!(find_top(&repo.join("a/b")), Some(repo.clone()));
    }

    #[test]
    fn home_its_ancestors_root_and_temporary_directories_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(d.path()).unwrap().join("home/u");
        std::fs::create_dir_all(home.join("proj")).unwrap();
        let e = check_worktree(&home, Some(&home)).unwrap_err();
        assert!(e.contains("refusing the home directory"), "{e}");
        let e = check_worktree(home.parent().unwrap(), Some(&home)).unwrap_err();
        assert!(e.contains("holds the home directory"), "{e}");
        assert!(check_worktree(Path::new("/"), Some(&home)).is_err());
        // Below /tmp (world-writable): refused whatever HOME is.
        let e = check_worktree(&home.join("proj"), Some(&home)).unwrap_err();
        assert!(e.contains("/tmp is writable by every user"), "{e}");
        // Below any world-writable directory, /var/tmp or a shared scratch area.
        let shared = tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).unwrap();
        let shared = std::fs::canonicalize(shared.path()).unwrap();
        std::fs::create_dir(shared.join("repo")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let open_above = shared
            .ancestors()
            .any(|a| std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o002 != 0));
        if !open_above {
            assert!(check_worktree(&shared.join("repo"), Some(&home)).is_ok());
        }
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = check_worktree(&shared.join("repo"), Some(&home)).unwrap_err();
        assert!(e.contains("writable by every user"), "{e}");
        // The password database's home counts even when HOME says otherwise.
        if let Some(pw) = passwd_home() {
            let pw = std::fs::canonicalize(&pw).unwrap_or(pw);
            if pw != Path::new("/") {
                let e = check_worktree(&pw, Some(Path::new("/nonexistent/h"))).unwrap_err();
                assert!(e.contains("home directory"), "{e}");
            }
        }
    }

    #[test]
    fn passwd_home_agrees_with_getent() {
        let uid = rustix::process::getuid().as_raw().to_string();
        let out = std::process::Command::new("getent")
            .args(["passwd", &uid])
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout);
        let want = line.trim_end().split(':').nth(5).map(PathBuf::from);
        assert!(want.is_some(), "getent passwd {uid}: {line:?}");
        assert_eq!(passwd_home(), want);
    }
}
