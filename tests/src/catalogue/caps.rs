//! Host side — privileges and mounts: capability sets, no_new_privs, setuid programs,
//! open_by_handle_at, namespaces, mounts and pivot_root.

use super::{need_suid, nothing, Case, Scope};
use crate::attacks::Attack;
use crate::runner::{attack_checked, Ctx, Outcome};
use crate::sys;
use shofer_core::policy::Protection;

/// This family's cases, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case!("open-tree-clone", "unshare, open_tree(CLONE) the outside tree, clear RDONLY, write through the detached mount", None, |c| attack_checked(c, Attack::OpenTreeClone, &[])),
        case!(
            "mount-bind-outside",
            "bind-mount an outside dir into the worktree and write",
            None,
            |c| {
                let ns = c.w.mntns.clone();
                attack_checked(c, Attack::MountBindOutside, &[ns])
            }
        ),
        case!(
            "unshare-remount",
            "unshare(user+mount ns), bind+remount rw an outside dir, write",
            None,
            |c| attack_checked(c, Attack::UnshareRemount, &[])
        ),
        case!(
            "pivot-root",
            "unshare, pivot_root into the worktree, write outside via the old root",
            None,
            |c| attack_checked(c, Attack::PivotRoot, &[])
        ),
        case!(
            "setuid-exec",
            "exec a setuid-root program: no euid 0, no capabilities (no_new_privs)",
            None,
            |c| {
                let s =
                    c.w.suid
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default();
                attack_checked(c, Attack::SuidExec, &[s])
            },
            needs = need_suid
        ),
        case!(
            "setid-file",
            "issue 34: set-ID files in the worktree: chmod u+s/g+s, fchmod, fchmodat, open/creat/mknod 04755",
            Some(Protection::SetidFiles),
            |c| setid_file(c, false)
        ),
        case!(
            "setid-file-tmp",
            "issue 34: the same in a new directory of /tmp",
            Some(Protection::SetidFiles),
            |c| setid_file(c, true)
        ),
        case!(
            "caps-and-nnp",
            "no capabilities in any set, NoNewPrivs=1",
            Some(Protection::Capabilities),
            |c| {
                let who = if c.cell.user.is_root() {
                    "root"
                } else {
                    "unpriv"
                };
                attack_checked(c, Attack::CapsAndNnp, &[who.to_string()])
            }
        ),
        Case {
            root_only: true,
            ..case!(
                "root-chown-foreign",
                "as root: chown a file owned by uid 4242 outside (CAP_CHOWN)",
                None,
                root_chown
            )
        },
        Case {
            root_only: true,
            ..case!(
                "root-dac-read",
                "as root: read a 0600 file of uid 4242 (CAP_DAC_OVERRIDE)",
                None,
                root_dac_read
            )
        },
        Case {
            root_only: true,
            ..case!(
                "root-open-by-handle",
                "as root: open_by_handle_at (CAP_DAC_READ_SEARCH)",
                None,
                |c| attack_checked(c, Attack::OpenByHandle, &[])
            )
        },
        case!(
            "sethostname-private-uts",
            "unshare(CLONE_NEWUTS) + sethostname (only in the private namespace)",
            None,
            |c| attack_checked(c, Attack::SethostnameUts, &[])
        ),
    ]
}

fn root_chown(c: &Ctx) -> Outcome {
    let f = c.out.join("foreign");
    if std::fs::write(&f, b"foreign\n").is_err() || sys::chown(&f, 4242, 4242).is_err() {
        return Outcome::Error("harness: cannot make a uid-4242 file".into());
    }
    attack_checked(c, Attack::RootChownForeign, &[])
}

fn root_dac_read(c: &Ctx) -> Outcome {
    let f = c.out.join("secret");
    if std::fs::write(&f, b"secret\n").is_err()
        || sys::chown(&f, 4242, 4242).is_err()
        || sys::chmod(&f, 0o600).is_err()
    {
        return Outcome::Error("harness: cannot make a uid-4242 0600 file".into());
    }
    attack_checked(c, Attack::RootDacRead, &[])
}

/// The attack in the worktree or in a fresh directory of `/tmp`, then the host's own look at
/// what it left there (a `/tmp` private to the run leaves nothing on the host; the attack's
/// own look inside is its verdict then).
fn setid_file(c: &Ctx, tmp: bool) -> Outcome {
    let dir = if tmp {
        std::path::PathBuf::from(format!("/tmp/{}-setid", c.w.marker()))
    } else {
        c.wt.clone()
    };
    let o = attack_checked(c, Attack::SetidFile, &[dir.display().to_string()]);
    let left = crate::attacks::setid_left(&dir);
    if tmp {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if !left.is_empty() {
        return Outcome::Escaped(format!(
            "{} holds {} ({})",
            dir.display(),
            left.join(", "),
            super::describe(&o)
        ));
    }
    o
}
