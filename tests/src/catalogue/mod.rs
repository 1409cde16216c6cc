//! The attack catalogue: every case, what it needs, how it runs and which protection of the
//! sandbox's report explains it when it gets through.
//!
//! Cases marked `field N` reproduce sandbox case N of `shared/field-cases.md`.
//!
//! One file per family, each with its table of cases (`cases()`) and the host side of them:
//! [`fs`] files, [`proc`] processes and /proc, [`tty`] terminals, [`net`] sockets, [`caps`]
//! privileges and mounts, [`tree`] the process tree, [`limits`] the run's process and memory
//! limits, [`git`] git metadata, [`secrets`] the
//! secret locations, [`machine`] the
//! machine-level cases run once per suite. What runs inside the sandbox is in
//! [`crate::attacks`], named by [`crate::attacks::Attack`] variant.

use crate::runner::{marked, Ctx, Outcome, World};
use crate::sys;
use shofer_core::policy::Protection;
use std::os::fd::OwnedFd;

/// Where a case runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// In every backend × ABI × user cell.
    Cell,
    /// Once per suite, with `--backend auto` (machine-level behaviour).
    Global,
}

/// One catalogue case.
pub struct Case {
    /// Stable name (used in rows and in the expected-gap list).
    pub name: &'static str,
    /// One line on what it tries.
    pub what: &'static str,
    /// The report's protection that explains a gap, if any (none = never a gap).
    pub protection: Option<Protection>,
    /// Or the run's limit (`procs`, `memory`: the report's `limits` section) that does.
    pub limit: Option<&'static str>,
    /// Only meaningful as root (capability use).
    pub root_only: bool,
    /// Cell or global.
    pub scope: Scope,
    /// `Some(reason)` when a prerequisite is missing (→ `skip`).
    pub needs: fn(&World) -> Option<String>,
    /// Runs the case.
    pub run: fn(&Ctx) -> Outcome,
}

fn nothing(_: &World) -> Option<String> {
    None
}
fn need_git(w: &World) -> Option<String> {
    w.git.is_none().then(|| "git not installed".to_string())
}
fn need_git_sh(w: &World) -> Option<String> {
    need_git(w).or_else(|| (!w.sh).then(|| "/bin/sh not present".to_string()))
}
fn need_python(w: &World) -> Option<String> {
    w.python
        .is_none()
        .then(|| "python3 not installed".to_string())
}
fn need_xattr(w: &World) -> Option<String> {
    (!w.xattr).then(|| "user xattrs unsupported on the scratch filesystem".to_string())
}
fn need_suid(w: &World) -> Option<String> {
    w.suid
        .is_none()
        .then(|| "cannot make a setuid-root copy (harness not root)".to_string())
}
fn need_core(_: &World) -> Option<String> {
    let p = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let p = p.trim();
    (p.starts_with('|') || p.starts_with('/') || p.is_empty())
        .then(|| format!("core_pattern {p:?} does not dump into the cwd"))
}
fn need_sh_stty(w: &World) -> Option<String> {
    if !w.sh {
        return Some("/bin/sh not present".into());
    }
    crate::runner::which("stty")
        .is_none()
        .then(|| "stty not installed".into())
}

macro_rules! case {
    ($name:literal, $what:literal, $prot:expr, $run:expr) => {
        Case {
            name: $name,
            what: $what,
            protection: $prot,
            limit: None,
            root_only: false,
            scope: Scope::Cell,
            needs: nothing,
            run: $run,
        }
    };
    ($name:literal, $what:literal, $prot:expr, $run:expr, needs = $needs:expr) => {
        Case {
            name: $name,
            what: $what,
            protection: $prot,
            limit: None,
            root_only: false,
            scope: Scope::Cell,
            needs: $needs,
            run: $run,
        }
    };
}

mod caps;
mod fs;
mod git;
mod limits;
mod machine;
mod net;
mod proc;
mod secrets;
mod tree;
mod tty;

// The protections most cases name, short so a table row stays one line.
const W: Option<Protection> = Some(Protection::WriteOutside);
const T: Option<Protection> = Some(Protection::Truncate);
const R: Option<Protection> = Some(Protection::RenameLinkAcross);
const M: Option<Protection> = Some(Protection::MetadataOutside);

/// The whole catalogue, in report order: family by family.
pub fn all() -> Vec<Case> {
    [
        fs::cases(),
        proc::cases(),
        tty::cases(),
        net::cases(),
        caps::cases(),
        tree::cases(),
        limits::cases(),
        git::cases(),
        secrets::cases(),
        machine::cases(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn fd_of(r: Result<OwnedFd, sys::Errno>, what: &str) -> Result<OwnedFd, Outcome> {
    r.map_err(|e| Outcome::Error(format!("harness: open {what}: {e}")))
}

fn describe(o: &Outcome) -> String {
    match o {
        Outcome::Blocked(d)
        | Outcome::Escaped(d)
        | Outcome::Works(d)
        | Outcome::Broken(d)
        | Outcome::Skip(d)
        | Outcome::Error(d)
        | Outcome::Fail(d) => d.clone(),
    }
}

/// Kills (by pid) leftovers carrying `marker` and reports them.
fn reap_marked(marker: &str) -> Vec<i32> {
    let left = marked(marker);
    for &p in &left {
        let _ = sys::kill(p, libc::SIGKILL);
    }
    left
}

fn python_bin(w: &World) -> String {
    w.python
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// For `--list`: every case name and what it does.
pub fn describe_all() -> String {
    all()
        .iter()
        .map(|c| {
            format!(
                "{:32} {}{}\n",
                c.name,
                c.what,
                if c.scope == Scope::Global {
                    " [global]"
                } else {
                    ""
                }
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_has_at_least_forty_uniquely_named_cases() {
        let cases = all();
        assert!(cases.len() >= 40, "{}", cases.len());
        let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), cases.len(), "duplicate case names");
    }

    #[test]
    fn every_sandbox_field_case_has_a_catalogue_case() {
        let text: String = all().iter().map(|c| c.what).collect::<Vec<_>>().join("\n");
        for n in 1..=10 {
            assert!(
                text.contains(&format!("field {n}:")),
                "field case {n} has no catalogue case"
            );
        }
    }

    #[test]
    fn readme_lists_every_case() {
        for c in all() {
            assert!(
                crate::gaps::README.contains(&format!("\n{} ", c.name)),
                "tests/README.md does not list {} (paste `shofer-containment --list`)",
                c.name
            );
        }
    }
}
