//! The environment a command runs with: nothing in it waits for a person, and output comes
//! unbuffered and uncoloured where the runtime allows.
//!
//! An agent's command has no terminal and nobody watching it. An inherited `EDITOR=vim` makes
//! `git commit` start vim on a pipe and hang until a timeout; a pager waits for a key; a
//! credential prompt waits forever; Python buffers its output in a pipe and loses it when
//! killed. So every command gets [`DEFAULTS`], replacing inherited values of those variables,
//! and loses the inherited [`REMOVED`] ones. Variables the caller sets explicitly win over
//! both: [`crate::EngineConfig::env`] (`shofer run|serve --env K=V`), and of course whatever
//! the command line itself sets (`EDITOR=nano git commit`, `export PAGER=less`).
//!
//! The editors are `true`: git then finds the message unchanged and stops with "Aborting
//! commit due to empty commit message." (or, for `git merge`, `git rebase -i`, takes the
//! prepared message or todo list as it is): the agent learns at once to pass `-m`.

use std::ffi::OsString;

/// Set for every command (the caller's explicit variables override them). docs/ENGINE.md's
/// `shofer run` section lists the same.
pub const DEFAULTS: &[(&str, &str)] = &[
    // Editors return at once, leaving the prepared text unchanged.
    ("GIT_EDITOR", "true"),
    ("GIT_SEQUENCE_EDITOR", "true"),
    ("EDITOR", "true"),
    ("VISUAL", "true"),
    // Pagers print everything.
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("MANPAGER", "cat"),
    ("SYSTEMD_PAGER", "cat"),
    // Credential and passphrase prompts fail at once.
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_ASKPASS", "false"),
    ("SSH_ASKPASS", "false"),
    ("SSH_ASKPASS_REQUIRE", "force"),
    ("GCM_INTERACTIVE", "never"),
    // Package managers do not ask.
    ("DEBIAN_FRONTEND", "noninteractive"),
    ("PIP_NO_INPUT", "1"),
    // Output as it happens, without colour.
    ("PYTHONUNBUFFERED", "1"),
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
];

/// Inherited variables removed (unless set explicitly): they force colour on.
pub const REMOVED: &[&str] = &["FORCE_COLOR", "CLICOLOR_FORCE"];

/// Git configuration every command gets ([`shofer_core::gitenv`]; keys the caller's
/// `GIT_CONFIG_*` list already sets win): automatic maintenance (`git maintenance run --auto`
/// after a commit, a merge, a fetch) runs in the foreground. Detached, it would outlive the
/// git command and be stopped with the command's other background processes — midway through
/// rewriting refs, leaving `*.lock` files that make every later git command fail.
pub const GIT_SETTINGS: &[(&str, &str)] = &[
    ("maintenance.autoDetach", "false"),
    ("gc.autoDetach", "false"),
];

/// The changes to apply to the inherited environment, in order: `(name, Some(value))` sets,
/// `(name, None)` removes (also [`crate::guardian::INNER_VAR`], the server's own). `explicit` (the caller's `K=V` pairs) come last and win.
pub fn changes(explicit: &[(OsString, OsString)]) -> Vec<(OsString, Option<OsString>)> {
    let is_explicit = |k: &str| explicit.iter().any(|(e, _)| e == k);
    // The server's marker from its guardian (crate::guardian) is the server's own.
    let mut out: Vec<(OsString, Option<OsString>)> =
        vec![(crate::guardian::INNER_VAR.into(), None)];
    for k in REMOVED {
        if !is_explicit(k) {
            out.push(((*k).into(), None));
        }
    }
    for (k, v) in DEFAULTS {
        if !is_explicit(k) {
            out.push(((*k).into(), Some((*v).into())));
        }
    }
    // Appended to the inherited list; a list the caller sets explicitly is left as it is.
    if !is_explicit("GIT_CONFIG_COUNT") {
        for (k, v) in shofer_core::gitenv::append(GIT_SETTINGS, |k| std::env::var(k).ok()) {
            out.push((k.into(), Some(v.into())));
        }
    }
    for (k, v) in explicit {
        out.push((k.clone(), Some(v.clone())));
    }
    out
}

/// The value of `name` in a command's environment: the last of [`changes`]`(explicit)` that
/// names it, else the inherited one (this process's).
pub fn var(explicit: &[(OsString, OsString)], name: &str) -> Option<OsString> {
    match changes(explicit).into_iter().rev().find(|(k, _)| k == name) {
        Some((_, v)) => v,
        None => std::env::var_os(name),
    }
}

/// Parses a `K=V` option value (`--env`).
///
/// # Errors
/// A message naming the input when there is no `=` or the name is empty or holds a `=`/NUL.
pub fn parse_assignment(s: &str) -> Result<(OsString, OsString), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains('\0') && !v.contains('\0') => {
            Ok((k.into(), v.into()))
        }
        _ => Err(format!(
            "invalid environment assignment {s:?}: expected NAME=VALUE, e.g. EDITOR=nano"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_values_win_and_are_applied_last() {
        let c = changes(&[
            ("EDITOR".into(), "nano".into()),
            ("FORCE_COLOR".into(), "1".into()),
        ]);
        let editor: Vec<_> = c.iter().filter(|(k, _)| k == "EDITOR").collect();
        assert_eq!(editor, [&("EDITOR".into(), Some("nano".into()))]);
        assert!(!c.contains(&("FORCE_COLOR".into(), None)));
        assert!(c.contains(&("PAGER".into(), Some("cat".into()))));
        assert!(c.contains(&("CLICOLOR_FORCE".into(), None)));
    }

    #[test]
    fn git_maintenance_settings_are_added_unless_the_caller_sets_the_list() {
        let count = |c: &[(OsString, Option<OsString>)]| {
            c.iter()
                .rev()
                .find(|(n, _)| n == "GIT_CONFIG_COUNT")
                .and_then(|(_, v)| v.clone())
        };
        // (The test's own environment has no GIT_CONFIG_COUNT.)
        let ours = changes(&[]);
        assert_eq!(count(&ours), Some("2".into()));
        assert!(ours.contains(&(
            "GIT_CONFIG_KEY_0".into(),
            Some("maintenance.autoDetach".into())
        )));
        let theirs = changes(&[
            ("GIT_CONFIG_COUNT".into(), "1".into()),
            ("GIT_CONFIG_KEY_0".into(), "gc.autoDetach".into()),
            ("GIT_CONFIG_VALUE_0".into(), "true".into()),
        ]);
        assert_eq!(count(&theirs), Some("1".into()));
        assert!(!theirs.iter().any(|(n, _)| n == "GIT_CONFIG_KEY_1"));
    }

    #[test]
    fn a_commands_variable_is_the_explicit_one_else_the_default_else_ours() {
        assert_eq!(
            var(&[("TMPDIR".into(), "/x".into())], "TMPDIR"),
            Some("/x".into())
        );
        assert_eq!(var(&[], "PAGER"), Some("cat".into()));
        assert_eq!(var(&[], "FORCE_COLOR"), None);
        assert_eq!(var(&[], "PATH"), std::env::var_os("PATH"));
    }

    #[test]
    fn assignments_parse() {
        assert_eq!(parse_assignment("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert_eq!(parse_assignment("A="), Ok(("A".into(), "".into())));
        assert!(parse_assignment("=x").unwrap_err().contains("\"=x\""));
        assert!(parse_assignment("novalue").is_err());
    }
}
