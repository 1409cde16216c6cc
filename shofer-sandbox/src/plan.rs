//! The plan of one run: what to execute ([`crate::spec::ExecSpec`], the same for every
//! backend) and how it is confined ([`Confinement`], one variant per backend, built by that
//! backend's module: [`crate::ruleset::plan`], [`crate::namespaces::plan`],
//! [`crate::bwrap::plan`]).
//!
//! Whatever the child does differently per backend (no_new_privs, capability drop, seccomp,
//! which ruleset, which argv) follows from the variant in one place,
//! [`crate::exec::Steps::of`]; a combination no backend uses cannot be written down.

use std::os::fd::RawFd;

use shofer_core::policy::Backend;

use crate::backend::Choice;
use crate::error::PlanError;
use crate::gate::AllowUnix;
use crate::secretpaths::{ReadRules, Resolved};
use crate::spec::{CapPolicy, ExecSpec, Layers};
use crate::writable::OpenedPolicy;
use crate::{bwrap, namespaces, ruleset};

/// How the command is confined: one variant per backend.
pub(crate) enum Confinement<'a> {
    /// The `landlock` backend: a ruleset applied last before exec.
    Landlock(ruleset::LandlockPlan),
    /// The `userns` and `layered` backends: process A builds the namespaces, then the command
    /// runs under an optional Landlock ruleset.
    Namespaces(Box<namespaces::Setup<'a>>),
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

impl<'a> Plan<'a> {
    /// Step 5: the chosen backend builds its confinement for `exec` over `opened`, with the
    /// `--allow-unix` paths `unix`, the secret locations to hide `secrets` (Landlock's read
    /// rules, in the ruleset the set-up thread began, `ahead`, when it fits; bubblewrap's
    /// mounts) and the protections' `layers`.
    ///
    /// # Errors
    /// The backend's: a rule the kernel refuses, a command that cannot run (bubblewrap decides
    /// that before it starts).
    pub(crate) fn build(
        choice: &Choice,
        opened: &'a OpenedPolicy,
        unix: &AllowUnix,
        secrets: &Resolved,
        ahead: Option<crate::secretpaths::Ahead>,
        exec: ExecSpec,
        layers: Layers,
    ) -> Result<Plan<'a>, PlanError> {
        let confinement = match choice.backend {
            Backend::Landlock => {
                Confinement::Landlock(ruleset::plan(opened, unix, secrets, ahead, choice.abi)?)
            }
            Backend::Userns | Backend::Layered => {
                // Mounts hide the secrets. A command that keeps a capability over file modes
                // (a foreign-owned worktree, --keep-caps) would see a mode-0 directory's
                // tmpfs empty rather than refused: where Landlock is layered, its read rules
                // refuse the real entries instead (they cost a rule per neighbour).
                let capable = exec.foreign_owner.is_some() || exec.caps == CapPolicy::Keep;
                let by_rules = capable && choice.abi > 0;
                let reads = if by_rules {
                    secrets.read_rules()
                } else {
                    ReadRules::default()
                };
                let mut setup = namespaces::plan(opened, unix, &reads, choice.abi, layers)?;
                setup.full_map = exec.foreign_owner.is_some();
                if !by_rules {
                    setup.covers = secrets.covers();
                }
                Confinement::Namespaces(Box::new(setup))
            }
            Backend::Bwrap => {
                let b = choice
                    .bwrap
                    .as_ref()
                    .expect("bwrap choice carries its binary");
                Confinement::Bwrap(bwrap::plan(b, opened, &exec, &layers, secrets)?)
            }
        };
        Ok(Plan {
            exec,
            confinement,
            spawned_gate: None,
        })
    }
}
