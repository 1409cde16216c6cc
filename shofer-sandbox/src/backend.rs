//! Choosing a backend (DESIGN §2.4): the strongest that enforces the whole policy, or a clear
//! refusal naming each mechanism and why it failed. Never a silent downgrade.

use shofer_core::policy::{degradations, needs_unix_gate, Backend, NetPolicy, Protection};
use shofer_core::rights::NEWEST_PINNED_ABI;

use std::cell::OnceCell;

use crate::bwrap::{self, Bwrap};
use crate::cli::BackendChoice;
use crate::namespaces;
use crate::sys::{self, LandlockAbsence};

/// What the kernel offers, probed once per run. The slower probes (user namespaces: a clone
/// and a mount; bubblewrap: running it) happen only when a decision or a report needs them.
#[derive(Debug, Clone)]
pub struct Facts {
    /// `uname -r`.
    pub kernel: String,
    /// The kernel's Landlock ABI, or why there is none.
    pub landlock: Result<u32, LandlockAbsence>,
    userns: OnceCell<Result<(), String>>,
    bwrap: OnceCell<Result<Bwrap, String>>,
    unix_gate: OnceCell<Result<(), String>>,
}

impl Facts {
    /// Probes the running kernel's Landlock ABI (the cheap probe).
    pub fn probe() -> Facts {
        Facts {
            kernel: sys::kernel_release(),
            landlock: sys::landlock_abi(),
            userns: OnceCell::new(),
            bwrap: OnceCell::new(),
            unix_gate: OnceCell::new(),
        }
    }

    /// Facts with fixed answers (tests, and `--probe` of a hypothetical kernel).
    pub fn fixed(
        landlock: Result<u32, LandlockAbsence>,
        userns: Result<(), String>,
        bwrap: Result<Bwrap, String>,
    ) -> Facts {
        Facts {
            kernel: "fixed".into(),
            landlock,
            userns: OnceCell::from(userns),
            bwrap: OnceCell::from(bwrap),
            unix_gate: OnceCell::from(Ok(())),
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
    /// on first call).
    pub fn unix_gate(&self) -> &Result<(), String> {
        self.unix_gate.get_or_init(crate::gate::available)
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

    /// Why Landlock is unusable, as one clause (e.g. "not in this kernel (ENOSYS)").
    pub fn landlock_absence(&self, max_abi: Option<u32>) -> String {
        match self.landlock {
            Err(LandlockAbsence::NotBuilt) => "not in this kernel (ENOSYS)".into(),
            Err(LandlockAbsence::Disabled) => {
                "built in but disabled at boot (EOPNOTSUPP; add landlock to lsm=)".into()
            }
            Err(LandlockAbsence::Other(e)) => {
                format!("landlock_create_ruleset failed ({})", sys::errno_name(e))
            }
            Ok(_) if max_abi == Some(0) => "disabled by --max-abi 0".into(),
            Ok(abi) => format!("ABI {abi}"),
        }
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
    /// Why this backend was chosen, in one sentence.
    pub reason: String,
    /// The bubblewrap to run, for the `bwrap` backend.
    pub bwrap: Option<Bwrap>,
    /// The seccomp unix-socket gate runs (Landlock below ABI 9, or bubblewrap).
    pub unix_gate: bool,
}

/// Chooses the backend for `request` (DESIGN §2.4): `auto` takes Landlock when it enforces
/// the whole required policy, else `userns` (Landlock layered at whatever ABI the kernel has),
/// else `bwrap`, else a partial Landlock with `--allow-degraded`, else a refusal naming each
/// mechanism and why it failed.
///
/// # Errors
/// One line naming each mechanism tried and why it failed (exit 125).
pub fn choose(
    request: BackendChoice,
    facts: &Facts,
    max_abi: Option<u32>,
    net: NetPolicy,
    allow_degraded: bool,
) -> Result<Choice, String> {
    let abi = facts.effective_abi(max_abi);
    // Whether `backend` at `abi` gets the unix-socket gate: needed below Landlock ABI 9 and
    // able to run (a setuid bubblewrap cannot run under no_new_privs, so no filter).
    let gate = |backend: Backend, abi: u32, setuid_bwrap: bool| {
        needs_unix_gate(backend, abi) && !setuid_bwrap && facts.unix_gate().is_ok()
    };
    let landlock_gate = abi > 0 && gate(Backend::Landlock, abi, false);
    let landlock_degraded = degradations(Backend::Landlock, abi, net, landlock_gate);
    let landlock_what = || {
        landlock_degraded
            .iter()
            .map(|(_, why)| why.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let landlock = |accept_partial: bool| -> Result<Choice, String> {
        if abi == 0 {
            return Err(format!("Landlock: {}", facts.landlock_absence(max_abi)));
        }
        if landlock_degraded.is_empty() {
            return Ok(Choice {
                backend: Backend::Landlock,
                abi,
                degraded: Vec::new(),
                reason: format!("Landlock ABI {abi} enforces the whole policy"),
                bwrap: None,
                unix_gate: landlock_gate,
            });
        }
        if accept_partial {
            return Ok(Choice {
                backend: Backend::Landlock,
                abi,
                degraded: landlock_degraded.clone(),
                reason: format!(
                    "Landlock ABI {abi}, degraded as allowed: {}",
                    landlock_what()
                ),
                bwrap: None,
                unix_gate: landlock_gate,
            });
        }
        Err(format!(
            "Landlock: ABI {abi} is partial ({}; pass --allow-degraded to accept)",
            landlock_what()
        ))
    };
    // `probe` asks first (auto must know before it commits to a backend); a forced backend
    // skips the trial clone: its own set-up fails with the same one-line reason.
    let userns = |backend: Backend, probe: bool| -> Result<Choice, String> {
        if probe {
            if let Err(why) = facts.userns() {
                return Err(format!("user namespaces: {why}"));
            }
        }
        // Landlock ABI 1 refuses every cross-directory rename, even inside the worktree; the
        // read-only mounts already do its job, so plain userns does not layer it.
        let abi = if backend == Backend::Userns && abi == 1 {
            0
        } else {
            abi
        };
        if backend == Backend::Layered && abi == 0 {
            return Err(format!(
                "layered: needs Landlock, which is unusable: {}",
                facts.landlock_absence(max_abi)
            ));
        }
        let layered = if abi > 0 {
            format!(", Landlock ABI {abi} layered on top")
        } else {
            String::from(", no Landlock layered")
        };
        let unix_gate = gate(backend, abi, false);
        let degraded = degradations(backend, abi, net, unix_gate);
        if !degraded.is_empty() && !allow_degraded {
            let what: Vec<&str> = degraded.iter().map(|(_, why)| why.as_str()).collect();
            return Err(format!(
                "{backend}: partial at Landlock ABI {abi} ({}; pass --allow-degraded to accept)",
                what.join("; ")
            ));
        }
        Ok(Choice {
            backend,
            abi,
            degraded,
            reason: format!("user, mount and PID namespaces with a read-only root{layered}"),
            bwrap: None,
            unix_gate,
        })
    };
    let bwrap = || -> Result<Choice, String> {
        match facts.bwrap() {
            Ok(b) => {
                let unix_gate = gate(Backend::Bwrap, 0, b.setuid);
                let degraded = degradations(Backend::Bwrap, 0, net, unix_gate);
                if !degraded.is_empty() && !allow_degraded {
                    let what: Vec<&str> = degraded.iter().map(|(_, why)| why.as_str()).collect();
                    return Err(format!(
                        "bwrap: partial ({}; pass --allow-degraded to accept)",
                        what.join("; ")
                    ));
                }
                Ok(Choice {
                    backend: Backend::Bwrap,
                    abi: 0,
                    degraded,
                    reason: format!("bubblewrap {} at {}", b.version, b.path.display()),
                    bwrap: Some(b.clone()),
                    unix_gate,
                })
            }
            Err(why) => Err(format!("bwrap: {why}")),
        }
    };
    match request {
        BackendChoice::Forced(Backend::Landlock) => landlock(allow_degraded),
        BackendChoice::Forced(b @ (Backend::Userns | Backend::Layered)) => userns(b, false),
        BackendChoice::Forced(Backend::Bwrap) => bwrap(),
        BackendChoice::Auto => {
            let mut why = Vec::new();
            for attempt in [
                &(|| landlock(false)) as &dyn Fn() -> Result<Choice, String>,
                &|| userns(Backend::Userns, true),
                &bwrap,
            ] {
                match attempt() {
                    Ok(c) => {
                        return Ok(Choice {
                            reason: if why.is_empty() {
                                c.reason.clone()
                            } else {
                                format!("{} (because {})", c.reason, why.join("; "))
                            },
                            ..c
                        })
                    }
                    Err(e) => why.push(e),
                }
            }
            if allow_degraded && abi > 0 {
                return landlock(true);
            }
            Err(format!(
                "no sandbox backend can enforce the policy: {}",
                why.join("; ")
            ))
        }
    }
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

    #[test]
    fn auto_picks_landlock_from_abi_3_and_refuses_below_without_allow_degraded() {
        let f = facts(Ok(7));
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap();
        assert_eq!((c.backend, c.abi), (Backend::Landlock, 7));
        assert!(choose(BackendChoice::Auto, &f, Some(3), NetPolicy::Allow, false).is_ok());
        let err = choose(BackendChoice::Auto, &f, Some(2), NetPolicy::Allow, false).unwrap_err();
        assert!(err.contains("truncate"), "{err}");
        assert!(err.contains("user namespaces: blocked"), "{err}");
        assert!(err.contains("bwrap: not installed"), "{err}");
        let c = choose(BackendChoice::Auto, &f, Some(2), NetPolicy::Allow, true).unwrap();
        assert_eq!(c.degraded.len(), 1);
    }

    #[test]
    fn auto_falls_back_to_userns_then_bwrap() {
        let f = Facts::fixed(Ok(2), Ok(()), no_bwrap());
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap();
        assert_eq!((c.backend, c.abi), (Backend::Userns, 2));
        assert!(c.degraded.is_empty());
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
    fn with_landlock_complete_auto_never_probes_namespaces() {
        let f = Facts {
            kernel: "t".into(),
            landlock: Ok(6),
            userns: OnceCell::new(),
            bwrap: OnceCell::new(),
            unix_gate: OnceCell::from(Ok(())),
        };
        choose(BackendChoice::Auto, &f, None, NetPolicy::Deny, false).unwrap();
        assert!(f.userns.get().is_none() && f.bwrap.get().is_none());
    }

    #[test]
    fn net_deny_needs_abi_4() {
        let f = facts(Ok(3));
        assert!(choose(BackendChoice::Auto, &f, None, NetPolicy::Deny, false).is_err());
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
        )
        .unwrap_err();
        assert!(
            err.contains("Landlock: not in this kernel (ENOSYS)"),
            "{err}"
        );
        assert!(
            err.contains("user namespaces") && err.contains("bwrap"),
            "{err}"
        );
        let err = choose(
            BackendChoice::Forced(Backend::Landlock),
            &facts(Err(LandlockAbsence::Disabled)),
            None,
            NetPolicy::Allow,
            true,
        )
        .unwrap_err();
        assert!(err.contains("EOPNOTSUPP"), "{err}");
    }

    #[test]
    fn layered_needs_landlock_and_userns() {
        let f = Facts::fixed(Err(LandlockAbsence::NotBuilt), Ok(()), no_bwrap());
        let err = choose(
            BackendChoice::Forced(Backend::Layered),
            &f,
            None,
            NetPolicy::Allow,
            false,
        )
        .unwrap_err();
        assert!(err.contains("needs Landlock"), "{err}");
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
        let err = choose(
            BackendChoice::Forced(Backend::Layered),
            &f,
            None,
            NetPolicy::Allow,
            false,
        )
        .unwrap_err();
        assert!(err.contains("rename"), "{err}");
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
    fn without_the_gate_below_abi_9_auto_refuses_unless_degraded_is_allowed() {
        let f = facts(Ok(7)).with_unix_gate(Err("outer listener (test)".into()));
        let err = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap_err();
        assert!(err.contains("pathname unix socket"), "{err}");
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, true).unwrap();
        assert!(!c.unix_gate);
        assert_eq!(c.degraded[0].0, Protection::PathnameSockets);
        let c = choose(
            BackendChoice::Auto,
            &facts(Ok(7)),
            None,
            NetPolicy::Allow,
            false,
        )
        .unwrap();
        assert!(c.unix_gate && c.degraded.is_empty());
        let c = choose(
            BackendChoice::Auto,
            &facts(Ok(9)),
            None,
            NetPolicy::Allow,
            false,
        )
        .unwrap();
        assert!(!c.unix_gate, "ABI 9 needs no gate");
    }

    #[test]
    fn max_abi_zero_disables_landlock() {
        let f = facts(Ok(7));
        assert_eq!(f.effective_abi(Some(0)), 0);
        assert!(choose(BackendChoice::Auto, &f, Some(0), NetPolicy::Allow, true).is_err());
    }
}
