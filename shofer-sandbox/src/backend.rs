//! Choosing a backend (ARCHITECTURE §2.4): the strongest that enforces the whole policy, or a clear
//! refusal naming each mechanism and why it failed. Never a silent downgrade.

use shofer_core::policy::{
    degradations, hardening_gaps, protections, Backend, NetPolicy, Protection, Verdict,
};
use shofer_core::rights::NEWEST_PINNED_ABI;

use std::cell::OnceCell;

use crate::bwrap::{self, Bwrap};
use crate::cli::BackendChoice;
use crate::error::{LandlockOff, SetupError, Unusable};
use crate::namespaces;
use crate::seccomp;
use shofer_sys::landlock::LandlockAbsence;

/// What the kernel offers, probed once per run. The slower probes (user namespaces: a clone
/// and a mount; bubblewrap: running it) happen only when a decision or a report needs them.
#[derive(Debug, Clone)]
pub struct Facts {
    /// `uname -r`.
    pub kernel: String,
    /// The kernel's Landlock ABI, or why there is none.
    pub landlock: Result<u32, LandlockAbsence>,
    /// Whether this build has the TIOCSTI/TIOCLINUX seccomp filter for the machine's
    /// architecture ([`seccomp::FILTER_AVAILABLE`]); without it, terminal injection is not
    /// enforced and the report says so.
    pub tiocsti_filter: bool,
    userns: OnceCell<Result<(), String>>,
    bwrap: OnceCell<Result<Bwrap, String>>,
    /// The gate as this run may use it for unix sockets: `gate_probe`'s answer, or
    /// what `--no-unix-gate` fixed.
    unix_gate: OnceCell<Result<(), String>>,
    /// What [`crate::gate::available`] answered: whatever `--no-unix-gate` says, the
    /// `packed-refs` traps ride on the same listener.
    gate_probe: OnceCell<Result<(), String>>,
}

impl Facts {
    /// Probes the running kernel's Landlock ABI (the cheap probe).
    pub fn probe() -> Facts {
        Facts {
            kernel: shofer_sys::kernel_release(),
            landlock: shofer_sys::landlock::abi(),
            tiocsti_filter: seccomp::FILTER_AVAILABLE,
            userns: OnceCell::new(),
            bwrap: OnceCell::new(),
            unix_gate: OnceCell::new(),
            gate_probe: OnceCell::new(),
        }
    }

    /// Facts with fixed answers (tests).
    #[cfg(test)]
    pub fn fixed(
        landlock: Result<u32, LandlockAbsence>,
        userns: Result<(), String>,
        bwrap: Result<Bwrap, String>,
    ) -> Facts {
        Facts {
            kernel: "fixed".into(),
            landlock,
            tiocsti_filter: seccomp::FILTER_AVAILABLE,
            userns: OnceCell::from(userns),
            bwrap: OnceCell::from(bwrap),
            unix_gate: OnceCell::from(Ok(())),
            gate_probe: OnceCell::from(Ok(())),
        }
    }

    /// The same facts with the unix-socket gate's availability fixed (tests, and
    /// `--no-unix-gate`).
    pub fn with_unix_gate(self, gate: Result<(), String>) -> Facts {
        Facts {
            unix_gate: OnceCell::from(gate),
            ..self
        }
    }

    /// Whether the seccomp unix-socket gate can run here ([`crate::gate::available`]; probed
    /// on first call, once for this and [`Facts::gate_here`]; `--no-unix-gate` fixes it).
    pub fn unix_gate(&self) -> &Result<(), String> {
        self.unix_gate.get_or_init(|| self.gate_here().clone())
    }

    /// Whether the gate can run here at all, for its handlers (git's lock protocol and
    /// freshen) whatever `--no-unix-gate` says ([`crate::gate::available`]; probed once for
    /// both). Installing a descriptor in a caller also needs `SECCOMP_IOCTL_NOTIF_ADDFD`
    /// (Linux 5.9), which every kernel with Landlock (5.13) has; the gate asks its listener at
    /// start all the same and tells its handlers ([`crate::gate::handler::Handler::started`]).
    pub fn gate_here(&self) -> &Result<(), String> {
        self.gate_probe.get_or_init(crate::gate::available)
    }

    /// Whether `backend` runs the unix-socket gate (at every Landlock ABI: ABI 9's
    /// `RESOLVE_UNIX` grants by path), when it can run here — not in front of a setuid
    /// bubblewrap, which cannot run under `no_new_privs`.
    pub fn unix_gate_runs(&self, backend: Backend) -> bool {
        self.gate_runs_beside(backend) && self.unix_gate().is_ok()
    }

    /// Whether a gate can run in front of `backend`: it can run here
    /// ([`Facts::gate_here`]), and the backend is not a setuid bubblewrap, which cannot
    /// run under `no_new_privs`.
    pub fn gate_runs_beside(&self, backend: Backend) -> bool {
        self.gate_beside(backend).is_ok()
    }

    /// As [`Facts::gate_runs_beside`], with the reason when it cannot.
    pub fn gate_beside(&self, backend: Backend) -> Result<(), String> {
        let setuid_bwrap = backend == Backend::Bwrap
            && self
                .bwrap_if_probed()
                .is_some_and(|b| b.as_ref().is_ok_and(|b| b.setuid));
        if setuid_bwrap {
            return Err("a setuid bubblewrap cannot run under the gate's no_new_privs".into());
        }
        self.gate_here().clone()
    }

    /// The user-namespace probe's answer if it already ran.
    pub fn userns_if_probed(&self) -> Option<&Result<(), String>> {
        self.userns.get()
    }

    /// The bubblewrap probe's answer if it already ran.
    pub fn bwrap_if_probed(&self) -> Option<&Result<Bwrap, String>> {
        self.bwrap.get()
    }

    /// Whether unprivileged user namespaces with mounts work here (probed on first call).
    pub fn userns(&self) -> &Result<(), String> {
        self.userns.get_or_init(namespaces::probe)
    }

    /// For a run: takes user namespaces as usable without the trial clone unless a sysctl
    /// already says they are blocked. The run's own clone is the real test; when it fails
    /// before the command starts, [`Facts::userns_failed`] records why and `auto` chooses
    /// again (the trial clone would cost as much as the run's own).
    pub fn assume_userns(&mut self) {
        if self.userns.get().is_none() {
            let _ = self
                .userns
                .set(namespaces::blocked_by_sysctl().map_or(Ok(()), Err));
        }
    }

    /// Records that user namespaces failed with `why` (one clause).
    pub fn userns_failed(&mut self, why: String) {
        self.userns = OnceCell::from(Err(why));
    }

    /// A usable bubblewrap, or why not (probed on first call).
    pub fn bwrap(&self) -> &Result<Bwrap, String> {
        self.bwrap.get_or_init(|| {
            let b = bwrap::find()?;
            bwrap::check_usable(&b)?;
            Ok(b)
        })
    }

    /// The Landlock ABI to use: the kernel's, capped by `--max-abi` and by the newest ABI
    /// whose rights are pinned. 0 when there is no Landlock.
    pub fn effective_abi(&self, max_abi: Option<u32>) -> u32 {
        let kernel = self.landlock.unwrap_or(0);
        kernel
            .min(max_abi.unwrap_or(u32::MAX))
            .min(NEWEST_PINNED_ABI)
    }

    /// Why Landlock is unusable at `max_abi`, if it is.
    pub fn landlock_off(&self, max_abi: Option<u32>) -> Option<LandlockOff> {
        match self.landlock {
            Err(absence) => Some(LandlockOff::Kernel(absence)),
            Ok(_) if max_abi == Some(0) => Some(LandlockOff::CappedToZero),
            Ok(_) => None,
        }
    }

    /// [`protections`] of `backend` at `abi` on this kernel and build.
    pub fn protections(
        &self,
        backend: Backend,
        abi: u32,
        net: NetPolicy,
    ) -> Vec<(Protection, Verdict)> {
        let gate = self.unix_gate_runs(backend);
        protections(backend, abi, net, self.tiocsti_filter, gate)
    }

    /// [`degradations`] of `backend` at `abi` on this kernel and build.
    pub fn degradations(
        &self,
        backend: Backend,
        abi: u32,
        net: NetPolicy,
    ) -> Vec<(Protection, String)> {
        let gate = self.unix_gate_runs(backend);
        degradations(backend, abi, net, self.tiocsti_filter, gate)
    }

    /// [`hardening_gaps`] of `backend` at `abi` on this kernel and build.
    pub fn hardening_gaps(
        &self,
        backend: Backend,
        abi: u32,
        net: NetPolicy,
    ) -> Vec<(Protection, String)> {
        let gate = self.unix_gate_runs(backend);
        hardening_gaps(backend, abi, net, self.tiocsti_filter, gate)
    }
}

/// The decision: which backend, at which Landlock ABI, and what it cannot enforce.
#[derive(Debug, Clone)]
pub struct Choice {
    /// The backend to run.
    pub backend: Backend,
    /// The Landlock ABI used (layered on namespaces for those backends); 0 for none.
    pub abi: u32,
    /// Required protections this choice cannot enforce (non-empty only with
    /// `--allow-degraded`).
    pub degraded: Vec<(Protection, String)>,
    /// Hardening protections this choice cannot enforce (each one stderr line per run).
    pub hardening: Vec<(Protection, String)>,
    /// Every protection's verdict on this choice, decided here once: the report reads it.
    pub verdicts: Vec<(Protection, Verdict)>,
    /// A root caller's command runs over a worktree owned by this (uid, gid)
    /// ([`Choice::with_foreign_owner`]).
    pub foreign_owner: Option<(u32, u32)>,
    /// Whether the gate can answer calls beside this backend, or why not
    /// ([`Facts::gate_beside`]): for the handlers of other protections.
    pub gate: Result<(), String>,
    /// Whether the gate traps the unix-socket calls ([`Facts::unix_gate_runs`]).
    pub unix_gate: bool,
    /// Why this backend was chosen, in one sentence.
    pub reason: String,
    /// The bubblewrap to run, for the `bwrap` backend.
    pub bwrap: Option<Bwrap>,
}

impl Choice {
    /// `backend` at `abi` on these `facts`, with its `degraded` required protections: the
    /// hardening gaps and every verdict are decided here.
    fn new(
        facts: &Facts,
        (backend, abi, net): (Backend, u32, NetPolicy),
        degraded: Vec<(Protection, String)>,
        reason: String,
        bwrap: Option<Bwrap>,
    ) -> Choice {
        Choice {
            backend,
            abi,
            degraded,
            hardening: facts.hardening_gaps(backend, abi, net),
            verdicts: facts.protections(backend, abi, net),
            foreign_owner: None,
            gate: facts.gate_beside(backend),
            unix_gate: facts.unix_gate_runs(backend),
            reason,
            bwrap,
        }
    }

    /// This choice for a caller that asked to keep its capabilities (`keep_caps`): the host
    /// filter then leaves set-ID files alone; and where no Landlock layer forbids mount
    /// changes, the command keeps `CAP_SYS_ADMIN` over its mounts (bubblewrap as root; the
    /// namespace backends without Landlock), which would unmount what hides the secret
    /// locations; bubblewrap then mounts nothing (`crate::bwrap`). Says so.
    #[must_use]
    pub fn with_keep_caps(mut self, keep_caps: bool) -> Choice {
        if !keep_caps {
            return self;
        }
        if self.is_enforced(Protection::SetidFiles) {
            self.hardening_lost(
                Protection::SetidFiles,
                "with --keep-caps the host filter leaves the command its set-ID calls and modes",
            );
        }
        let unmounts = match self.backend {
            Backend::Bwrap => rustix::process::geteuid().is_root(),
            Backend::Userns | Backend::Layered => self.abi == 0,
            Backend::Landlock => false,
        };
        if unmounts {
            self.hardening_lost(Protection::SecretsHidden, "with --keep-caps the command keeps CAP_SYS_ADMIN and no Landlock layer forbids unmounting what hides the secret locations");
        }
        self
    }

    /// Whether this choice enforces `p`.
    fn is_enforced(&self, p: Protection) -> bool {
        self.verdicts
            .iter()
            .any(|(q, v)| *q == p && v.is_enforced())
    }

    /// Sets the verdict of `p` to not enforced for `why`.
    fn set_not_enforced(&mut self, p: Protection, why: &str) {
        for (q, v) in &mut self.verdicts {
            if *q == p {
                *v = Verdict::NotEnforced(why.to_string());
            }
        }
    }

    /// The hardening protection `p` is lost for `why`: its verdict, and one stderr line
    /// ([`Choice::hardening`]).
    fn hardening_lost(&mut self, p: Protection, why: &str) {
        self.set_not_enforced(p, why);
        self.hardening.push((p, why.to_string()));
    }

    /// This choice for a root caller whose command runs over a worktree owned by `owner`
    /// (uid, gid): the capability drop is described as it happens (`crate::spec::ExecSpec`'s
    /// `foreign_owner`).
    #[must_use]
    pub fn with_foreign_owner(mut self, owner: Option<(u32, u32)>) -> Choice {
        self.foreign_owner = owner;
        let Some((uid, gid)) = owner else {
            return self;
        };
        let how = match self.backend {
            Backend::Landlock => format!("dropped; the command runs as the worktree's owner, uid {uid} gid {gid}"),
            Backend::Userns | Backend::Layered => format!("CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER and CAP_FSETID kept inside the user namespace (every id mapped) for a worktree owned by uid {uid}; every other capability dropped, no_new_privs"),
            Backend::Bwrap => return self,
        };
        self.set_not_enforced(Protection::Capabilities, &how);
        self
    }
}

/// Chooses the backend for `request` (docs/ARCHITECTURE.md): `auto` takes `layered` wherever
/// user namespaces work (`userns` below Landlock ABI 2, where Landlock would break renames),
/// else Landlock alone when it enforces every required protection, else `bwrap`, else a
/// partial Landlock with `--allow-degraded`, else a refusal naming each mechanism and why it
/// failed. The degradations of the choice, required and hardening ([`Choice::hardening`]),
/// are computed here and nowhere else.
///
/// # Errors
/// [`SetupError::Unusable`] for a forced backend, [`SetupError::NoBackend`] for `auto`.
pub fn choose(
    request: BackendChoice,
    facts: &Facts,
    max_abi: Option<u32>,
    net: NetPolicy,
    allow_degraded: bool,
) -> Result<Choice, SetupError> {
    let abi = facts.effective_abi(max_abi);
    let landlock = |accept_partial: bool| -> Result<Choice, Unusable> {
        if abi == 0 {
            let off = facts
                .landlock_off(max_abi)
                .unwrap_or(LandlockOff::CappedToZero);
            return Err(Unusable::Landlock(off));
        }
        let degraded = facts.degradations(Backend::Landlock, abi, net);
        if degraded.is_empty() {
            return Ok(Choice::new(
                facts,
                (Backend::Landlock, abi, net),
                degraded,
                format!("Landlock ABI {abi} enforces every required protection"),
                None,
            ));
        }
        if !accept_partial {
            return Err(Unusable::LandlockPartial { abi, degraded });
        }
        let what = crate::error::whys(&degraded);
        Ok(Choice::new(
            facts,
            (Backend::Landlock, abi, net),
            degraded,
            format!("Landlock ABI {abi}, degraded as allowed: {what}"),
            None,
        ))
    };
    // `probe` asks first (`--probe`, and `auto` with `--report`, must know before they commit
    // to a backend); otherwise what is known so far decides (a run assumes user namespaces
    // work, see `Facts::assume_userns`, and its own clone is the test).
    let userns = |backend: Backend, probe: bool| -> Result<Choice, Unusable> {
        let known = if probe {
            Some(facts.userns())
        } else {
            facts.userns_if_probed()
        };
        if let Some(Err(why)) = known {
            return Err(Unusable::Userns(why.clone()));
        }
        // Landlock ABI 1 refuses every cross-directory rename, even inside the worktree; the
        // read-only mounts already do its job, so plain userns does not layer it.
        let abi = if backend == Backend::Userns && abi == 1 {
            0
        } else {
            abi
        };
        if backend == Backend::Layered && abi == 0 {
            let off = facts
                .landlock_off(max_abi)
                .unwrap_or(LandlockOff::CappedToZero);
            return Err(Unusable::LayeredWithoutLandlock(off));
        }
        let layered = if abi > 0 {
            format!(", Landlock ABI {abi} layered on top")
        } else {
            String::from(", no Landlock layered")
        };
        let degraded = facts.degradations(backend, abi, net);
        if !degraded.is_empty() && !allow_degraded {
            return Err(Unusable::NamespacesPartial {
                backend,
                abi,
                degraded,
            });
        }
        Ok(Choice::new(
            facts,
            (backend, abi, net),
            degraded,
            format!("user, mount, PID and IPC namespaces with a read-only root{layered}"),
            None,
        ))
    };
    let bwrap = || -> Result<Choice, Unusable> {
        match facts.bwrap() {
            Ok(b) => {
                let degraded = facts.degradations(Backend::Bwrap, 0, net);
                if !degraded.is_empty() && !allow_degraded {
                    return Err(Unusable::NamespacesPartial {
                        backend: Backend::Bwrap,
                        abi: 0,
                        degraded,
                    });
                }
                Ok(Choice::new(
                    facts,
                    (Backend::Bwrap, 0, net),
                    degraded,
                    format!("bubblewrap {} at {}", b.version, b.path.display()),
                    Some(b.clone()),
                ))
            }
            Err(why) => Err(Unusable::Bwrap(why.clone())),
        }
    };
    let forced = match request {
        BackendChoice::Forced(Backend::Landlock) => landlock(allow_degraded),
        BackendChoice::Forced(b @ (Backend::Userns | Backend::Layered)) => userns(b, false),
        BackendChoice::Forced(Backend::Bwrap) => bwrap(),
        BackendChoice::Auto => {
            let mut why = Vec::new();
            // Layered needs Landlock from ABI 2 (ABI 1 refuses renames across directories).
            let namespaces = if abi >= 2 {
                Backend::Layered
            } else {
                Backend::Userns
            };
            let probe_userns = facts.userns_if_probed().is_none();
            for attempt in [
                &(|| userns(namespaces, probe_userns)) as &dyn Fn() -> Result<Choice, Unusable>,
                &|| landlock(false),
                &bwrap,
            ] {
                match attempt() {
                    Ok(c) => {
                        let reason = if why.is_empty() {
                            c.reason.clone()
                        } else {
                            let why: Vec<String> = why.iter().map(ToString::to_string).collect();
                            format!("{} (because {})", c.reason, why.join("; "))
                        };
                        return Ok(Choice { reason, ..c });
                    }
                    Err(e) => why.push(e),
                }
            }
            if allow_degraded && abi > 0 {
                return landlock(true).map_err(SetupError::Unusable);
            }
            return Err(SetupError::NoBackend(why));
        }
    };
    forced.map_err(SetupError::Unusable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_ns() -> Result<(), String> {
        Err("blocked (test)".into())
    }

    fn no_bwrap() -> Result<Bwrap, String> {
        Err("not installed (test)".into())
    }

    fn facts(landlock: Result<u32, LandlockAbsence>) -> Facts {
        Facts::fixed(landlock, no_ns(), no_bwrap())
    }

    /// What `auto` tried, in order, when it refused.
    fn refused(r: Result<Choice, SetupError>) -> Vec<Unusable> {
        match r {
            Err(SetupError::NoBackend(tried)) => tried,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn unusable(r: Result<Choice, SetupError>) -> Unusable {
        match r {
            Err(SetupError::Unusable(u)) => u,
            other => panic!("expected an unusable backend, got {other:?}"),
        }
    }

    #[test]
    fn auto_picks_landlock_from_abi_3_and_refuses_below_without_allow_degraded() {
        let f = facts(Ok(7));
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap();
        assert_eq!((c.backend, c.abi), (Backend::Landlock, 7));
        assert!(choose(BackendChoice::Auto, &f, Some(3), NetPolicy::Allow, false).is_ok());
        let tried = refused(choose(
            BackendChoice::Auto,
            &f,
            Some(2),
            NetPolicy::Allow,
            false,
        ));
        assert!(
            matches!(&tried[..], [
                Unusable::Userns(ns),
                Unusable::LandlockPartial { abi: 2, degraded },
                Unusable::Bwrap(bwrap),
            ] if degraded[0].0 == Protection::Truncate
                && ns == "blocked (test)"
                && bwrap == "not installed (test)"),
            "{tried:?}"
        );
        let c = choose(BackendChoice::Auto, &f, Some(2), NetPolicy::Allow, true).unwrap();
        assert_eq!(c.degraded.len(), 1);
    }

    #[test]
    fn auto_prefers_layered_then_landlock_then_bwrap() {
        let f = Facts::fixed(Ok(7), Ok(()), no_bwrap());
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap();
        assert_eq!((c.backend, c.abi), (Backend::Layered, 7));
        assert!(c.degraded.is_empty());
        let f = Facts::fixed(Ok(2), Ok(()), no_bwrap());
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap();
        assert_eq!((c.backend, c.abi), (Backend::Layered, 2));
        assert!(c.degraded.is_empty());
        // Without user namespaces, Landlock alone, naming what it lacks.
        let f = Facts::fixed(Ok(7), no_ns(), no_bwrap());
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap();
        assert_eq!(c.backend, Backend::Landlock);
        assert!(c.reason.contains("blocked (test)"), "{}", c.reason);
        assert!(c.hardening.iter().any(|(p, _)| *p == Protection::SysvIpc));
        let b = Bwrap {
            path: "/usr/bin/bwrap".into(),
            version: "0.8.0".into(),
            setuid: false,
        };
        let f = Facts::fixed(Err(LandlockAbsence::NotBuilt), no_ns(), Ok(b));
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Deny, false).unwrap();
        assert_eq!(c.backend, Backend::Bwrap);
        assert!(c.reason.contains("ENOSYS"), "{}", c.reason);
    }

    #[test]
    fn a_run_assumes_user_namespaces_until_its_clone_fails() {
        let mut f = Facts {
            kernel: "t".into(),
            landlock: Ok(6),
            tiocsti_filter: true,
            userns: OnceCell::new(),
            bwrap: OnceCell::new(),
            unix_gate: OnceCell::from(Ok(())),
            gate_probe: OnceCell::from(Ok(())),
        };
        f.assume_userns();
        if namespaces::blocked_by_sysctl().is_none() {
            let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Deny, false).unwrap();
            assert_eq!(c.backend, Backend::Layered);
        }
        assert!(f.bwrap.get().is_none());
        f.userns_failed("blocked (test)".into());
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Deny, false).unwrap();
        assert_eq!(c.backend, Backend::Landlock);
    }

    #[test]
    fn without_the_gate_auto_refuses_unless_degraded_is_allowed_at_every_abi() {
        let f = facts(Ok(7)).with_unix_gate(Err("outer listener (test)".into()));
        let err = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("pathname unix socket"), "{err}");
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, true).unwrap();
        assert!(!f.unix_gate_runs(c.backend));
        assert_eq!(c.degraded[0].0, Protection::PathnameSockets);
        let f = facts(Ok(7));
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap();
        assert!(f.unix_gate_runs(c.backend) && c.degraded.is_empty());
        // ABI 9's RESOLVE_UNIX grants by path: the gate runs there too, and without it the
        // run is degraded.
        let f = facts(Ok(9));
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap();
        assert!(f.unix_gate_runs(c.backend) && c.degraded.is_empty());
        let f = facts(Ok(9)).with_unix_gate(Err("outer listener (test)".into()));
        assert!(choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).is_err());
    }

    #[test]
    fn net_deny_needs_abi_4() {
        let f = facts(Ok(3));
        let tried = refused(choose(
            BackendChoice::Auto,
            &f,
            None,
            NetPolicy::Deny,
            false,
        ));
        assert_eq!(tried[1].degraded()[0].0, Protection::Tcp);
        assert!(choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).is_ok());
    }

    #[test]
    fn refusal_names_each_mechanism() {
        let err = choose(
            BackendChoice::Auto,
            &facts(Err(LandlockAbsence::NotBuilt)),
            None,
            NetPolicy::Allow,
            false,
        );
        let text = err.as_ref().unwrap_err().to_string();
        assert_eq!(
            refused(err),
            [
                Unusable::Userns("blocked (test)".into()),
                Unusable::Landlock(LandlockOff::Kernel(LandlockAbsence::NotBuilt)),
                Unusable::Bwrap("not installed (test)".into()),
            ]
        );
        // The one-line message users and scripts read.
        assert_eq!(
            text,
            "no sandbox backend can enforce the policy: user namespaces: blocked (test); Landlock: not in this kernel (ENOSYS); bwrap: not installed (test)"
        );
        let err = unusable(choose(
            BackendChoice::Forced(Backend::Landlock),
            &facts(Err(LandlockAbsence::Disabled)),
            None,
            NetPolicy::Allow,
            true,
        ));
        assert_eq!(
            err,
            Unusable::Landlock(LandlockOff::Kernel(LandlockAbsence::Disabled))
        );
        assert!(err.to_string().contains("EOPNOTSUPP"), "{err}");
    }

    #[test]
    fn layered_needs_landlock_and_userns() {
        let f = Facts::fixed(Err(LandlockAbsence::NotBuilt), Ok(()), no_bwrap());
        let err = unusable(choose(
            BackendChoice::Forced(Backend::Layered),
            &f,
            None,
            NetPolicy::Allow,
            false,
        ));
        assert_eq!(
            err,
            Unusable::LayeredWithoutLandlock(LandlockOff::Kernel(LandlockAbsence::NotBuilt))
        );
        let f = Facts::fixed(Ok(7), Ok(()), no_bwrap());
        let c = choose(
            BackendChoice::Forced(Backend::Layered),
            &f,
            None,
            NetPolicy::Allow,
            false,
        )
        .unwrap();
        assert_eq!((c.backend, c.abi), (Backend::Layered, 7));
    }

    #[test]
    fn landlock_abi_1_is_not_layered_on_userns_and_makes_layered_degraded() {
        let f = Facts::fixed(Ok(1), Ok(()), no_bwrap());
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap();
        assert_eq!((c.backend, c.abi), (Backend::Userns, 0));
        let err = unusable(choose(
            BackendChoice::Forced(Backend::Layered),
            &f,
            None,
            NetPolicy::Allow,
            false,
        ));
        assert!(
            matches!(&err, Unusable::NamespacesPartial { backend: Backend::Layered, abi: 1, degraded }
                if degraded[0].0 == Protection::RenameInside),
            "{err:?}"
        );
        let c = choose(
            BackendChoice::Forced(Backend::Layered),
            &f,
            None,
            NetPolicy::Allow,
            true,
        )
        .unwrap();
        assert_eq!(c.degraded[0].0, Protection::RenameInside);
    }

    #[test]
    fn max_abi_zero_disables_landlock() {
        let f = facts(Ok(7));
        assert_eq!(f.effective_abi(Some(0)), 0);
        let tried = refused(choose(
            BackendChoice::Auto,
            &f,
            Some(0),
            NetPolicy::Allow,
            true,
        ));
        assert_eq!(tried[1], Unusable::Landlock(LandlockOff::CappedToZero));
    }

    #[test]
    fn without_the_tiocsti_filter_every_backend_is_degraded() {
        let mut f = Facts::fixed(Ok(7), Ok(()), no_bwrap());
        f.tiocsti_filter = false;
        let tried = refused(choose(
            BackendChoice::Auto,
            &f,
            None,
            NetPolicy::Allow,
            false,
        ));
        assert_eq!(tried[0].degraded()[0].0, Protection::Tiocsti);
        assert_eq!(tried[1].degraded()[0].0, Protection::Tiocsti);
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, true).unwrap();
        assert_eq!(c.degraded[0].0, Protection::Tiocsti);
    }
}
