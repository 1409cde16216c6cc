//! Choosing a backend (DESIGN §2.4): the strongest that enforces the whole policy, or a clear
//! refusal naming each mechanism and why it failed. Never a silent downgrade.

use shofer_core::policy::{degradations, Backend, NetPolicy, Protection};
use shofer_core::rights::NEWEST_PINNED_ABI;

use crate::cli::BackendChoice;
use crate::sys::{self, LandlockAbsence};

/// What the kernel offers, probed once per run. Slower probes (user namespaces, bubblewrap)
/// are only run when a decision needs them.
#[derive(Debug, Clone)]
pub struct Facts {
    /// `uname -r`.
    pub kernel: String,
    /// The kernel's Landlock ABI, or why there is none.
    pub landlock: Result<u32, LandlockAbsence>,
}

impl Facts {
    /// Probes the running kernel.
    pub fn probe() -> Facts {
        Facts {
            kernel: sys::kernel_release(),
            landlock: sys::landlock_abi(),
        }
    }

    /// The Landlock ABI to use: the kernel's, capped by `--max-abi` and by the newest ABI
    /// whose rights are pinned. 0 when there is no Landlock.
    pub fn effective_abi(&self, max_abi: Option<u32>) -> u32 {
        let kernel = self.landlock.unwrap_or(0);
        kernel
            .min(max_abi.unwrap_or(u32::MAX))
            .min(NEWEST_PINNED_ABI)
    }

    /// Why Landlock is unusable at `abi`, as one clause (e.g. "not in this kernel (ENOSYS)").
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
}

/// Chooses the backend for `request`.
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
    let landlock = || -> Result<Choice, String> {
        if abi == 0 {
            return Err(format!("Landlock: {}", facts.landlock_absence(max_abi)));
        }
        let degraded = degradations(Backend::Landlock, abi, net);
        if degraded.is_empty() {
            return Ok(Choice {
                backend: Backend::Landlock,
                abi,
                degraded,
                reason: format!("Landlock ABI {abi} enforces the whole policy"),
            });
        }
        let what = degraded
            .iter()
            .map(|(_, why)| why.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        if allow_degraded {
            return Ok(Choice {
                backend: Backend::Landlock,
                abi,
                degraded,
                reason: format!("Landlock ABI {abi}, degraded as allowed: {what}"),
            });
        }
        Err(format!(
            "Landlock: ABI {abi} is partial ({what}; pass --allow-degraded to accept)"
        ))
    };
    match request {
        BackendChoice::Forced(Backend::Landlock) => landlock(),
        BackendChoice::Forced(other) => Err(format!(
            "{other}: this backend is not available in this build"
        )),
        BackendChoice::Auto => landlock().map_err(|ll| {
            format!(
                "no sandbox backend can enforce the policy: {ll}; user namespaces: backend not available in this build; bwrap: backend not available in this build"
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(landlock: Result<u32, LandlockAbsence>) -> Facts {
        Facts {
            kernel: "test".into(),
            landlock,
        }
    }

    #[test]
    fn auto_picks_landlock_from_abi_3_and_refuses_below_without_allow_degraded() {
        let f = facts(Ok(7));
        let c = choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).unwrap();
        assert_eq!((c.backend, c.abi), (Backend::Landlock, 7));
        assert!(choose(BackendChoice::Auto, &f, Some(3), NetPolicy::Allow, false).is_ok());
        let err = choose(BackendChoice::Auto, &f, Some(2), NetPolicy::Allow, false).unwrap_err();
        assert!(err.contains("truncate"), "{err}");
        let c = choose(BackendChoice::Auto, &f, Some(2), NetPolicy::Allow, true).unwrap();
        assert_eq!(c.degraded.len(), 1);
    }

    #[test]
    fn net_deny_needs_abi_4() {
        let f = facts(Ok(3));
        assert!(choose(BackendChoice::Auto, &f, None, NetPolicy::Deny, false).is_err());
        assert!(choose(BackendChoice::Auto, &f, None, NetPolicy::Allow, false).is_ok());
    }

    #[test]
    fn refusal_names_the_landlock_errno() {
        let err = choose(
            BackendChoice::Auto,
            &facts(Err(LandlockAbsence::NotBuilt)),
            None,
            NetPolicy::Allow,
            false,
        )
        .unwrap_err();
        assert!(err.contains("ENOSYS"), "{err}");
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
    fn max_abi_zero_disables_landlock() {
        let f = facts(Ok(7));
        assert_eq!(f.effective_abi(Some(0)), 0);
        assert!(choose(BackendChoice::Auto, &f, Some(0), NetPolicy::Allow, true).is_err());
    }
}
