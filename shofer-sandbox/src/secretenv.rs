//! Withholding the caller's secret variables from the command (ARCHITECTURE §2.1).
//!
//! - Owns the one step that takes them out: [`withhold`], run once by [`crate::run`] before
//!   any thread that touches the environment or child exists; the list is
//!   [`shofer_core::secretenv`]'s, `--keep-env` globs keep names back. [`find`] checks the
//!   names beforehand, on a thread beside the set-up's other steps, from a copy.
//! - [`note`] is the stderr line that names what was withheld; the `--report` record lists
//!   the same names (`env_withheld`).
//! - It must never print, store or report a value: names only.
//!
//! # How
//! The variables are removed from this process's own environment, not from an `envp` built
//! for the command: every backend then starts the command with that environment as it is
//! (the exec-time sequence's `execv`, bubblewrap, which passes its environment through, the
//! Landlock guardian's fork), so no backend can forget the filter, and the code between
//! `clone` and `execve` (where nothing may allocate) stays as it is. The supervisor needs none
//! of them itself. `setenv`/`unsetenv` are not thread-safe, hence the one-thread rule, the
//! same as `git::set_git_settings`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use crate::error::SetupError;

/// Which of the variables named in `env` (a copy of this process's environment) are secrets to
/// withhold, with `keep` (`--keep-env` globs): the check [`withhold`] then needs for names only
/// a later change to the environment added. Touches no environment: it runs beside step 4's
/// other work (`crate::run`).
pub(crate) fn find(env: &[(OsString, OsString)], keep: &[OsString]) -> Found {
    let keep: Vec<&[u8]> = keep.iter().map(|k| k.as_bytes()).collect();
    let mut checked: Vec<(OsString, bool)> = env
        .iter()
        .map(|(name, _)| {
            let secret = shofer_core::secretenv::withheld(name.as_bytes(), &keep);
            (name.clone(), secret)
        })
        .collect();
    checked.sort();
    checked.dedup();
    Found { checked }
}

/// What [`find`] decided: each name of the environment it was given, and whether it is
/// withheld (sorted by name).
#[derive(Debug, Default)]
pub(crate) struct Found {
    checked: Vec<(OsString, bool)>,
}

/// Removes every variable that [`shofer_core::secretenv::withheld`] names from this process's
/// environment (which the command inherits), except those a `keep` glob (`--keep-env`)
/// names exactly: as `found` decided for the names it saw, checked here for any other.
/// Returns the removed names, sorted, each once (a name that is not UTF-8 is shown lossily).
///
/// Must run while the process has one thread that may touch the environment (unsetenv(3) is
/// not thread-safe).
///
/// # Errors
/// [`SetupError::Syscall`] (`EINVAL`) when a secret's environment entry cannot be removed: its
/// name holds `=` (an entry such as `=GITHUB_TOKEN=…`, which only a caller that builds its
/// environment by hand makes). The run is refused rather than the entry passed on.
pub(crate) fn withhold(keep: &[OsString], found: &Found) -> Result<Vec<String>, SetupError> {
    let keep: Vec<&[u8]> = keep.iter().map(|k| k.as_bytes()).collect();
    let mut names: Vec<OsString> = std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| {
            match found
                .checked
                .binary_search_by(|(n, _)| n.as_os_str().cmp(name))
            {
                Ok(i) => found.checked[i].1,
                Err(_) => shofer_core::secretenv::withheld(name.as_bytes(), &keep),
            }
        })
        .collect();
    names.sort();
    names.dedup();
    if names.iter().any(|n| n.as_bytes().contains(&b'=')) {
        // std's remove_var would panic on it; unsetenv(3) refuses it.
        return Err(SetupError::Syscall {
            op: "unsetenv of a secret variable whose name holds '='",
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    for name in &names {
        std::env::remove_var(name);
    }
    scrub_original(&names).map_err(|source| SetupError::Syscall {
        op: "overwriting the withheld values in this process's environment block (/proc/self/mem)",
        source,
    })?;
    Ok(names
        .iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect())
}

/// Overwrites with NUL bytes the values of `names` in this process's original environment
/// block, which `unsetenv` leaves in memory and `/proc/<pid>/environ` keeps showing to anyone
/// allowed to read it (a command as root with `--keep-caps` under Landlock alone reads the
/// supervisor's and the guardian's): only the name and its `=` stay. Written through
/// `/proc/self/mem`, never through a pointer; run after [`std::env::remove_var`], so nothing
/// of this process refers to those bytes any more. Processes forked later (the guardian, the
/// command) copy the overwritten block.
///
/// # Errors
/// Reading `/proc/self/stat` or `/proc/self/mem`.
fn scrub_original(names: &[OsString]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    if names.is_empty() {
        return Ok(());
    }
    let Some((start, end)) = shofer_sys::proc::own_environment_region() else {
        return Err(std::io::Error::other(
            "env_start/env_end unreadable in /proc/self/stat",
        ));
    };
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")?;
    let mut block = vec![0u8; end - start];
    mem.read_exact_at(&mut block, start as u64)?;
    for (offset, len) in secret_values(&block, names) {
        mem.write_all_at(&vec![0u8; len], (start + offset) as u64)?;
    }
    Ok(())
}

/// Where the values of `names` lie in an environment block (`NAME=value` entries, each ended
/// by a NUL): (offset, length) of each value.
fn secret_values(block: &[u8], names: &[OsString]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    for entry in block.split(|b| *b == 0) {
        if let Some(eq) = entry.iter().position(|b| *b == b'=') {
            if names.iter().any(|n| n.as_bytes() == &entry[..eq]) && entry.len() > eq + 1 {
                out.push((at + eq + 1, entry.len() - eq - 1));
            }
        }
        at += entry.len() + 1;
    }
    out
}

/// The stderr line naming the withheld variables, or `None` when nothing was withheld.
pub(crate) fn note(withheld: &[String]) -> Option<String> {
    (!withheld.is_empty()).then(|| {
        format!(
            "shofer-sandbox: note: secret variables withheld from the command: {} (keep one with --keep-env NAME)",
            withheld.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_found_where_they_lie_and_nothing_else() {
        let block = b"PATH=/bin\0GITHUB_TOKEN=abc\0X=\0GITHUB_TOKENX=no\0AWS_SECRET_ACCESS_KEY=k\0";
        let names: Vec<OsString> = vec![
            "GITHUB_TOKEN".into(),
            "AWS_SECRET_ACCESS_KEY".into(),
            "X".into(),
        ];
        let found = secret_values(block, &names);
        let values: Vec<&[u8]> = found.iter().map(|&(o, l)| &block[o..o + l]).collect();
        assert_eq!(values, [&b"abc"[..], &b"k"[..]]);
    }

    #[test]
    fn note_names_each_variable_once_and_says_how_to_keep_one() {
        assert_eq!(note(&[]), None);
        assert_eq!(
            note(&["AWS_SECRET_ACCESS_KEY".into(), "GITHUB_TOKEN".into()]).unwrap(),
            "shofer-sandbox: note: secret variables withheld from the command: AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN (keep one with --keep-env NAME)"
        );
    }
}
