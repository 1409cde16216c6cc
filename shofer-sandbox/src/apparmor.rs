//! `--print-apparmor-profile`: an AppArmor profile that lets the installed binary create user
//! namespaces where `kernel.apparmor_restrict_unprivileged_userns=1` (Ubuntu 23.10 and later)
//! refuses them to unconfined programs.
//!
//! The profile has the shape Ubuntu ships for programs that need user namespaces (see
//! `/etc/apparmor.d/` on Ubuntu 24.04, e.g. the profiles of browsers): unconfined, attached to
//! the binary's real path, granting only the `userns` rule (AppArmor 4.0). It confines nothing
//! else: the sandbox's own mechanisms do that.

use std::path::Path;

/// Where the profile is meant to be installed.
pub const INSTALL_PATH: &str = "/etc/apparmor.d/shofer-sandbox";

/// The shell commands that install the printed profile, for messages.
pub fn install_hint() -> String {
    format!(
        "shofer-sandbox --print-apparmor-profile | sudo tee {INSTALL_PATH} && sudo apparmor_parser -r {INSTALL_PATH}"
    )
}

/// The profile for the binary at `exe` (its real path: AppArmor attaches profiles by the path
/// the kernel resolved, so a symlink's name would never match).
pub fn profile(exe: &Path) -> String {
    format!(
        "# AppArmor profile letting shofer-sandbox create user namespaces (its layered backend)\n\
         # on kernels with kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu 23.10+).\n\
         # Install: {hint}\n\
         # It must name the binary's real path: print it again after moving the binary.\n\
         abi <abi/4.0>,\n\
         include <tunables/global>\n\
         \n\
         profile shofer-sandbox {path} flags=(unconfined) {{\n\
         \x20 userns,\n\
         \n\
         \x20 # Site-specific additions and overrides.\n\
         \x20 include if exists <local/shofer-sandbox>\n\
         }}\n",
        hint = install_hint(),
        path = quote(exe),
    )
}

/// `exe` as an AppArmor attachment path: double-quoted, with the pattern characters of
/// apparmor.d(5) (`* ? [ ] { } ^ "` and `\`) escaped, so a path is matched literally.
fn quote(exe: &Path) -> String {
    let text = exe.to_string_lossy();
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '^' | '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_attaches_to_the_quoted_real_path_and_grants_userns() {
        let p = profile(Path::new("/opt/my tools/shofer-sandbox"));
        assert!(p.contains(
            "profile shofer-sandbox \"/opt/my tools/shofer-sandbox\" flags=(unconfined) {"
        ));
        assert!(p.contains("\n  userns,\n"));
        assert!(p.starts_with('#'));
    }

    #[test]
    fn pattern_characters_are_escaped() {
        assert_eq!(quote(Path::new("/a*b/[x]{y}")), r#""/a\*b/\[x\]\{y\}""#);
    }
}
