//! The plan of one run: what to execute ([`crate::spec::ExecSpec`], the same for every
//! backend) and how it is confined ([`Confinement`], one variant per backend, built by that
//! backend's module: [`crate::ruleset::plan`], [`crate::namespaces::plan`],
//! [`crate::bwrap::plan`]).
//!
//! Whatever the child does differently per backend (no_new_privs, capability drop, seccomp,
//! which ruleset, which argv) follows from the variant in one place,
//! [`crate::exec::Steps::of`]; a combination no backend uses cannot be written down.

use std::os::fd::RawFd;

use crate::spec::ExecSpec;
use crate::{bwrap, namespaces, ruleset};

/// How the command is confined: one variant per backend.
pub(crate) enum Confinement<'a> {
    /// The `landlock` backend: a ruleset applied last before exec.
    Landlock(ruleset::LandlockPlan),
    /// The `userns` and `layered` backends: process A builds the namespaces, then the command
    /// runs under an optional Landlock ruleset.
    Namespaces(namespaces::Setup<'a>),
    /// The `bwrap` backend: bubblewrap runs the command; its arguments and info pipe are
    /// owned here until the command runs.
    Bwrap(bwrap::Launch),
}

/// A run's plan: built by the chosen backend, consumed by spawning and supervising.
pub(crate) struct Plan<'a> {
    /// What runs.
    pub exec: ExecSpec,
    /// How it is confined.
    pub confinement: Confinement<'a>,
    /// Written to (one byte) once the command's process exists: a watcher that must not run
    /// during a fork-like clone (git's, `crate::git::guard::Watcher`).
    pub spawned_gate: Option<RawFd>,
}
