//! Host side — files: writes, deletes, renames and links across the worktree boundary, symlinks,
//! `..`, metadata, devices, /tmp and /dev/shm, ordinary work inside. Also a symlink planted for a
//! later `--allow-write`.

use super::{
    describe, need_core, need_python, need_xattr, nothing, python_bin, Case, Scope, M, R, T, W,
};
use crate::attacks::Attack;
use crate::runner::{attack_checked, clip, diff, Cmd, Ctx, Outcome, Sb};
use shofer_core::policy::Protection;
use std::path::Path;

/// This family's cases, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "create-outside",
            "open(O_CREAT) a new file outside the worktree",
            W,
            |c| attack_checked(c, Attack::CreateOutside, &[])
        ),
        case!(
            "write-outside",
            "open an existing outside file O_WRONLY and write",
            W,
            |c| attack_checked(c, Attack::WriteOutside, &[])
        ),
        case!(
            "append-outside",
            "open an existing outside file O_APPEND and write",
            W,
            |c| attack_checked(c, Attack::AppendOutside, &[])
        ),
        case!(
            "truncate-path",
            "truncate(2) an outside file by path",
            T,
            |c| attack_checked(c, Attack::TruncatePath, &[])
        ),
        case!(
            "truncate-rdonly-otrunc",
            "open(O_RDONLY|O_TRUNC) an outside file",
            T,
            |c| attack_checked(c, Attack::TruncateRdonlyOtrunc, &[])
        ),
        case!("unlink-outside", "unlink an outside file", W, |c| {
            attack_checked(c, Attack::UnlinkOutside, &[])
        }),
        case!("rmdir-outside", "rmdir an outside directory", W, |c| {
            attack_checked(c, Attack::RmdirOutside, &[])
        }),
        case!("mkdir-outside", "mkdir outside", W, |c| attack_checked(
            c,
            Attack::MkdirOutside,
            &[]
        )),
        case!("symlink-outside", "create a symlink outside", W, |c| {
            attack_checked(c, Attack::SymlinkOutside, &[])
        }),
        case!("mkfifo-outside", "mknod a FIFO outside", W, |c| {
            attack_checked(c, Attack::MkfifoOutside, &[])
        }),
        case!(
            "bind-socket-outside",
            "bind a unix socket file outside",
            W,
            |c| attack_checked(c, Attack::BindSocketOutside, &[])
        ),
        case!("rename-out", "rename a worktree file to outside", R, |c| {
            attack_checked(c, Attack::RenameOut, &[])
        }),
        case!(
            "rename-in",
            "rename an outside file into the worktree",
            R,
            |c| attack_checked(c, Attack::RenameIn, &[])
        ),
        case!(
            "rename-exchange",
            "renameat2(RENAME_EXCHANGE) a worktree file with an outside one",
            R,
            |c| attack_checked(c, Attack::RenameExchange, &[])
        ),
        case!(
            "rename-dir-out",
            "rename a worktree directory to outside",
            R,
            |c| attack_checked(c, Attack::RenameDirOut, &[])
        ),
        case!("rename-worktree", "rename the worktree itself", W, |c| {
            let o = attack_checked(c, Attack::RenameWorktree, &[]);
            if c.wt.exists() {
                o
            } else {
                Outcome::Escaped("the worktree was renamed away".into())
            }
        }),
        case!(
            "link-in",
            "hard-link an outside file into the worktree and write through it",
            R,
            |c| attack_checked(c, Attack::LinkIn, &[])
        ),
        case!("link-out", "hard-link a worktree file to outside", R, |c| {
            attack_checked(c, Attack::LinkOut, &[])
        }),
        case!(
            "linkat-procfd-in",
            "linkat(/proc/self/fd/N) of a read-only outside fd into the worktree",
            R,
            |c| attack_checked(c, Attack::LinkatProcfdIn, &[])
        ),
        case!(
            "otmpfile-link-out",
            "O_TMPFILE in the worktree, then link it outside",
            W,
            |c| attack_checked(c, Attack::OtmpfileLinkOut, &[])
        ),
        case!(
            "symlink-write-through",
            "a worktree symlink to an outside file, written through",
            W,
            |c| attack_checked(c, Attack::SymlinkWriteThrough, &[])
        ),
        case!(
            "symlink-dir-through",
            "a worktree symlink to an outside dir, create through it",
            W,
            |c| attack_checked(c, Attack::SymlinkDirThrough, &[])
        ),
        case!(
            "dotdot-absolute",
            "open(wt/../outside/new, O_CREAT)",
            W,
            |c| attack_checked(c, Attack::DotdotAbsolute, &[])
        ),
        case!(
            "dotdot-relative",
            "chdir(wt); open(../outside/new, O_CREAT)",
            W,
            |c| attack_checked(c, Attack::DotdotRelative, &[])
        ),
        case!(
            "tmp-symlink-out",
            "a /tmp symlink (writable place) to an outside file, written through",
            W,
            |c| {
                let m = c.w.marker();
                attack_checked(c, Attack::TmpSymlinkOut, &[m])
            }
        ),
        case!("chmod-outside", "chmod an outside file", M, |c| {
            attack_checked(c, Attack::ChmodOutside, &[])
        }),
        case!(
            "chown-outside",
            "chown an outside file (to its own owner)",
            M,
            |c| attack_checked(c, Attack::ChownOutside, &[])
        ),
        case!("utime-outside", "utimensat an outside file", M, |c| {
            attack_checked(c, Attack::UtimeOutside, &[])
        }),
        case!(
            "xattr-outside",
            "setxattr user.* on an outside file",
            M,
            |c| attack_checked(c, Attack::XattrOutside, &[]),
            needs = need_xattr
        ),
        case!("dev-create", "create a file in /dev", W, |c| {
            let m = c.w.marker();
            let o = attack_checked(c, Attack::DevCreate, std::slice::from_ref(&m));
            let left = Path::new("/dev").join(&m);
            if left.exists() {
                let _ = std::fs::remove_file(&left);
                return Outcome::Escaped(format!("/dev/{m} was created"));
            }
            match o {
                // Judged by the host's /dev: a private /dev (namespace backends) may take it.
                Outcome::Escaped(d) => Outcome::Blocked(format!(
                    "{d} inside, but only in a private /dev: the host's /dev is untouched"
                )),
                o => o,
            }
        }),
        case!(
            "sys-write",
            "open a /sys knob for writing (nothing written)",
            W,
            |c| attack_checked(c, Attack::SysWrite, &[])
        ),
        case!(
            "link-into-tmp",
            "hard-link an outside file into /tmp (writable) and write through it",
            R,
            |c| {
                let m = c.w.marker();
                let o = attack_checked(c, Attack::LinkIntoTmp, std::slice::from_ref(&m));
                let _ = std::fs::remove_file(Path::new("/tmp").join(&m));
                o
            }
        ),
        case!(
            "dev-kmsg-open-write",
            "open /dev/kmsg for writing (nothing written)",
            W,
            |c| attack_checked(c, Attack::DevKmsgOpenWrite, &[])
        ),
        case!(
            "mknod-device",
            "mknod a character device (1:3) in the worktree",
            None,
            |c| attack_checked(c, Attack::MknodDevice, &[])
        ),
        case!(
            "devices-usable",
            "/dev/null, /dev/zero, /dev/full still work",
            None,
            |c| attack_checked(c, Attack::DevicesUsable, &[])
        ),
        case!(
            "dev-shm",
            "field 1: a POSIX semaphore file in /dev/shm (create, size, map, unlink)",
            None,
            |c| {
                let m = c.w.marker();
                attack_checked(c, Attack::DevShm, &[m])
            }
        ),
        case!(
            "python-multiprocessing-lock",
            "field 1: python3 multiprocessing.Lock()",
            None,
            python_lock,
            needs = need_python
        ),
        case!("tmp-writable", "/tmp stays writable", None, |c| {
            let m = c.w.marker();
            attack_checked(c, Attack::TmpWritable, &[m])
        }),
        case!(
            "worktree-writable",
            "ordinary work inside the worktree",
            None,
            |c| attack_checked(c, Attack::WorktreeWritable, &[])
        ),
        case!(
            "rename-inside",
            "field 8: mkdir d && touch f && mv f d/ (and a link) inside",
            Some(Protection::RenameInside),
            |c| attack_checked(c, Attack::RenameInside, &[])
        ),
        case!(
            "core-dump-outside",
            "crash with the cwd outside: no core file there",
            W,
            |c| attack_checked(c, Attack::CoreDump, &[]),
            needs = need_core
        ),
        case!(
            "allow-write-symlink-next-run",
            "plant wt/cache -> outside, then a run with --allow-write wt/cache writes through it",
            None,
            allow_write_symlink
        ),
    ]
}

fn python_lock(c: &Ctx) -> Outcome {
    let py = python_bin(c.w);
    let run = c.sb(Sb::new(Cmd::Argv(vec![
        py,
        "-c".into(),
        "import multiprocessing as m; m.Lock(); print('ok')".into(),
    ])));
    if run.code == Some(0) && run.stdout.lines().any(|l| l.trim() == "ok") {
        Outcome::Works("multiprocessing.Lock() printed ok".into())
    } else {
        Outcome::Broken(format!("python3 multiprocessing.Lock(): {}", run.how()))
    }
}

fn allow_write_symlink(c: &Ctx) -> Outcome {
    // Run 1 (inside): plant the symlink in the worktree — allowed, the worktree is writable.
    let link = c.wt.join("cache");
    let run1 = c.sb(Sb::new(Cmd::AttackRaw(
        Attack::PlantSymlink,
        vec![c.out.display().to_string(), link.display().to_string()],
    )));
    if !matches!(run1.outcome(), Outcome::Works(_)) {
        return Outcome::Error(format!(
            "harness: planting the symlink failed: {}",
            describe(&run1.outcome())
        ));
    }
    // Run 2: the caller allows a cache path inside the worktree (harmless-looking).
    let mut spec = Sb::new(Cmd::AttackRaw(
        Attack::DenyWrite,
        vec![
            link.join("new9").display().to_string(),
            c.out.join("new10").display().to_string(),
        ],
    ));
    spec.extra = vec!["--allow-write".into(), link.display().to_string()];
    let before = c.snapshot();
    let run2 = c.sb(spec);
    let after = c.snapshot();
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!(
            "--allow-write <wt>/cache followed an attacker-planted symlink to outside: {d}"
        ));
    }
    if run2.code == Some(125) {
        return Outcome::Blocked(format!("refused: {}", clip(run2.stderr.trim(), 200)));
    }
    run2.outcome()
}
