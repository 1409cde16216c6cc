//! Host side — the secret locations (issue 32): a scratch home with fake credentials
//! ([`crate::attacks::secrets::FILES`], each holding its mark) and an ordinary `~/.gitconfig`,
//! owned by the cell's user, with `$HOME` pointing at it and a symlink to `~/.netrc` planted in
//! the worktree; the attacks then read, link and mount their way to the secrets. The report's
//! `secrets_hidden` row explains a gap (a kernel without Landlock, `userns` at ABI 1).

use super::{nothing, Case, Scope};
use crate::attacks::secrets::{FILES, MARK};
use crate::attacks::Attack;
use crate::runner::{attack_spec_checked, chown_all, Cmd, Ctx, Outcome, Sb};
use shofer_core::policy::Protection;

const S: Option<Protection> = Some(Protection::SecretsHidden);

/// This family's cases, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "secret-read",
            "read a hidden credential by its path, a worktree symlink, /proc/self/root, .., openat",
            S,
            |c| with_home(c, Attack::SecretRead)
        ),
        case!(
            "secret-link",
            "hard-link a hidden credential into the worktree and read the link",
            S,
            |c| with_home(c, Attack::SecretLink)
        ),
        case!(
            "secret-mount",
            "bind-mount the home into the worktree from a nested user namespace and read",
            S,
            |c| with_home(c, Attack::SecretMount)
        ),
    ]
}

/// Makes the scratch home and runs `attack` with `$HOME` there.
fn with_home(c: &Ctx, attack: Attack) -> Outcome {
    let home = c.dir.join("home");
    let made = (|| -> std::io::Result<()> {
        for f in FILES {
            let path = home.join(f);
            std::fs::create_dir_all(path.parent().unwrap_or(&home))?;
            std::fs::write(&path, format!("{MARK} in {f}\n"))?;
        }
        std::fs::write(home.join(".gitconfig"), "[user]\n\tname = ordinary\n")?;
        std::os::unix::fs::symlink(home.join(".netrc"), c.wt.join("netrc-link"))
    })();
    if let Err(e) = made {
        return Outcome::Error(format!("scratch home: {e}"));
    }
    let (u, g) = c.cell.user.ids();
    chown_all(&home, u, g);
    let mut spec = Sb::new(Cmd::Attack(attack, vec![home.display().to_string()]));
    spec.env.push(("HOME".into(), home.display().to_string()));
    attack_spec_checked(c, spec)
}
