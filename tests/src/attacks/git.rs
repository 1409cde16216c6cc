//! Inside the sandbox — git metadata: writes the host's next git run would trust.

use super::{arg, contain, p, write_via, Seen};
use crate::sys::{self, Errno};
use std::path::{Path, PathBuf};

/// `git-write rename-over <writable dir> <target>`: create a file in a writable dir, then rename it
/// over a read-only target.
pub(crate) fn git_write(a: &[String]) -> Seen {
    // git-write <mode> <paths...>: `deny` = every write must fail (escape otherwise);
    // `rename-over <src-dir> <target>`: create a file in a writable dir then rename it over a
    // read-only target.
    match arg(a, 0) {
        "rename-over" => {
            let tmp = Path::new(arg(a, 1)).join("tmp-shofer-containment");
            if let Err(e) = write_via(&tmp, libc::O_WRONLY | libc::O_CREAT) {
                return Seen::Broken(format!("create in writable {} -> {e}", arg(a, 1)));
            }
            let r = sys::rename(&tmp, arg(a, 2));
            let _ = sys::unlink(&tmp);
            contain("rename(objects/tmp, <common>/packed-refs)", r)
        }
        _ => Seen::Broken("git-write: unknown mode".into()),
    }
}

/// `git-fake-layout`: plants a fake common dir in the worktree whose objects/, refs/, logs/ and
/// hooks/ are symlinks into another repository.
pub(crate) fn git_fake_layout(a: &[String]) -> Seen {
    let (wt, victim_git) = (&p(arg(a, 0)), Path::new(arg(a, 1)));
    // A well-formed-looking linked-worktree layout *inside* the worktree whose common dir's
    // objects/, refs/ and logs/ are symlinks into another repository.
    let fake = wt.join("fakecommon");
    let x = fake.join("worktrees/x");
    let mut bad = Vec::new();
    let mut step = |what: &str, r: Result<(), Errno>| {
        if let Err(e) = r {
            bad.push(format!("{what} -> {e}"));
        }
    };
    step(
        "mkdir",
        std::fs::create_dir_all(&x).map_err(|e| Errno(e.raw_os_error().unwrap_or(0))),
    );
    let put = |p: PathBuf, s: String| {
        std::fs::write(p, s).map_err(|e| Errno(e.raw_os_error().unwrap_or(0)))
    };
    step(
        "gitdir",
        put(x.join("gitdir"), format!("{}\n", wt.join(".git").display())),
    );
    step("commondir", put(x.join("commondir"), "../..\n".into()));
    step("HEAD", put(x.join("HEAD"), "ref: refs/heads/main\n".into()));
    step(
        "config",
        put(
            fake.join("config"),
            "[core]\n\trepositoryformatversion = 0\n".into(),
        ),
    );
    step(
        "HEAD",
        put(fake.join("HEAD"), "ref: refs/heads/main\n".into()),
    );
    for d in ["objects", "refs", "logs", "hooks"] {
        step(d, sys::symlink(victim_git.join(d), fake.join(d)));
    }
    step(
        ".git",
        put(wt.join(".git"), format!("gitdir: {}\n", x.display())),
    );
    if bad.is_empty() {
        Seen::Ok("fake common dir with symlinks into another repository planted".into())
    } else {
        Seen::Broken(bad.join("; "))
    }
}

/// `git-swap-unwritable <beside> <dir>`: builds, in the writable `<beside>`, a directory holding
/// a `post-checkout` hook and a tree of directories of mode 0500 (nothing can be moved out of
/// them, not even by their owner, until the mode is restored), then swaps it with `<dir>` (a
/// main worktree's `.git/hooks`) in one `renameat2(RENAME_EXCHANGE)`: no restore can come
/// between the parts. `ok` when the swap happened (the guard must then put `<dir>` back).
pub(crate) fn git_swap_unwritable(a: &[String]) -> Seen {
    use std::os::unix::fs::PermissionsExt;
    let planted = Path::new(arg(a, 0)).join("planted-hooks");
    let build = || -> std::io::Result<()> {
        std::fs::create_dir_all(planted.join("x/y/z"))?;
        std::fs::write(
            planted.join("post-checkout"),
            "#!/bin/sh\ntouch /dev/null\n",
        )?;
        std::fs::set_permissions(
            planted.join("post-checkout"),
            std::fs::Permissions::from_mode(0o755),
        )?;
        for d in ["x/y", "x"] {
            std::fs::set_permissions(planted.join(d), std::fs::Permissions::from_mode(0o500))?;
        }
        Ok(())
    };
    if let Err(e) = build() {
        return Seen::Broken(format!("building {} -> {e}", planted.display()));
    }
    match sys::renameat2(&planted, arg(a, 1), libc::RENAME_EXCHANGE) {
        Ok(()) => Seen::Ok(format!("{} swapped in", arg(a, 1))),
        Err(e) => Seen::Blocked(format!("renameat2(RENAME_EXCHANGE, {}) -> {e}", arg(a, 1))),
    }
}
