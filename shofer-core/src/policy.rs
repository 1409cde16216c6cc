//! The sandbox policy model (DESIGN §2.1) and what each backend enforces of it (§2.4, §2.5).
//!
//! A [`Policy`] is the writable set plus the network choice; it holds no file descriptors and
//! makes no syscalls. [`protections`] answers, for a backend at a Landlock ABI, which of the
//! [`Protection`]s hold — the single source of truth behind `--probe`, `--report` and `auto`.

use std::fmt;
use std::path::PathBuf;

/// Why a path is in the writable set. Shown in reports; decides the rights granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleOrigin {
    /// The worktree itself (canonical path).
    Worktree,
    /// `/tmp` or `$TMPDIR`.
    Tmp,
    /// `/dev/null`, `/dev/zero`, `/dev/full`.
    Device,
    /// `/dev/tty`, `/dev/ptmx`, `/dev/pts`: write and, from Landlock ABI 5, device ioctls.
    Terminal,
    /// `/dev/shm` (POSIX shared memory and semaphores).
    SharedMemory,
    /// The per-worktree gitdir or the common dir's `objects/`, `refs/`, `logs/` (DESIGN §2.3).
    GitMetadata,
    /// A `--allow-write PATH`.
    AllowWrite,
}

impl RuleOrigin {
    /// Stable lower-case name used in JSON reports.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleOrigin::Worktree => "worktree",
            RuleOrigin::Tmp => "tmp",
            RuleOrigin::Device => "device",
            RuleOrigin::Terminal => "terminal",
            RuleOrigin::SharedMemory => "shared-memory",
            RuleOrigin::GitMetadata => "git-metadata",
            RuleOrigin::AllowWrite => "allow-write",
        }
    }
}

/// One entry of the writable set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WritableRule {
    /// Absolute path as it was opened (without following symlinks on any component).
    pub path: PathBuf,
    /// Why it is writable.
    pub origin: RuleOrigin,
    /// Whether the path is a directory (its whole hierarchy is writable) or a single file.
    pub is_dir: bool,
}

/// Network policy: `--net allow` (default) or `--net deny` (TCP bind/connect denied).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NetPolicy {
    /// No network restriction.
    #[default]
    Allow,
    /// Deny TCP `bind()` and `connect()` (Landlock ABI 4+, or a new network namespace).
    Deny,
}

/// A sandbox backend (DESIGN §2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A Landlock ruleset on the command and its children.
    Landlock,
    /// Built-in user, mount and PID namespaces with a read-only root; Landlock layered on top
    /// when the kernel has it.
    Userns,
    /// The system's bubblewrap.
    Bwrap,
    /// `userns` plus full Landlock (only when asked).
    Layered,
}

impl Backend {
    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Landlock => "landlock",
            Backend::Userns => "userns",
            Backend::Bwrap => "bwrap",
            Backend::Layered => "layered",
        }
    }

    /// Whether this backend mounts the root read-only (so chmod, chown, utime and xattr
    /// changes outside the writable set fail with `EROFS`).
    pub fn has_readonly_root(self) -> bool {
        !matches!(self, Backend::Landlock)
    }

    /// Whether the command runs in a new PID namespace (outside processes are invisible).
    pub fn has_pid_namespace(self) -> bool {
        !matches!(self, Backend::Landlock)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The policy of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Canonical path of the worktree.
    pub worktree: PathBuf,
    /// Every writable path, the worktree included.
    pub writable: Vec<WritableRule>,
    /// Network choice.
    pub net: NetPolicy,
}

/// A protection the report speaks about (DESIGN §2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// Creating, writing, deleting or renaming files outside the writable set.
    WriteOutside,
    /// `truncate(2)` / `O_TRUNC` of a file outside the writable set.
    Truncate,
    /// Renaming or hard-linking files across the writable-set boundary.
    RenameLinkAcross,
    /// Renames across directories *inside* the writable set keep working.
    RenameInside,
    /// chmod, chown, utime and xattr changes outside the writable set.
    MetadataOutside,
    /// Signals to processes outside the sandbox.
    SignalsOut,
    /// Connecting to abstract unix sockets of outside processes.
    AbstractSockets,
    /// Connecting to pathname unix sockets outside the writable set.
    PathnameSockets,
    /// TCP bind/connect (only asked for with `--net deny`).
    Tcp,
    /// Terminal injection through TIOCSTI / TIOCLINUX.
    Tiocsti,
    /// File descriptors inherited from the caller (above 2).
    InheritedFds,
    /// Terminal programs keep working (controlling terminal, /dev/tty).
    TerminalPrograms,
    /// No capability in any set (root callers), `no_new_privs` set.
    Capabilities,
}

impl Protection {
    /// Every protection, in report order.
    pub const ALL: [Protection; 13] = [
        Protection::WriteOutside,
        Protection::Truncate,
        Protection::RenameLinkAcross,
        Protection::RenameInside,
        Protection::MetadataOutside,
        Protection::SignalsOut,
        Protection::AbstractSockets,
        Protection::PathnameSockets,
        Protection::Tcp,
        Protection::Tiocsti,
        Protection::InheritedFds,
        Protection::TerminalPrograms,
        Protection::Capabilities,
    ];

    /// Stable snake-case key used in JSON.
    pub fn key(self) -> &'static str {
        match self {
            Protection::WriteOutside => "write_outside",
            Protection::Truncate => "truncate",
            Protection::RenameLinkAcross => "rename_link_across",
            Protection::RenameInside => "rename_inside",
            Protection::MetadataOutside => "chmod_chown_utime_xattr",
            Protection::SignalsOut => "signals_out",
            Protection::AbstractSockets => "abstract_unix_sockets",
            Protection::PathnameSockets => "pathname_unix_sockets",
            Protection::Tcp => "tcp",
            Protection::Tiocsti => "tiocsti",
            Protection::InheritedFds => "inherited_fds",
            Protection::TerminalPrograms => "terminal_programs",
            Protection::Capabilities => "capabilities",
        }
    }

    /// Whether losing this protection is a *degradation* that `auto` refuses without
    /// `--allow-degraded`. The others are documented kernel limits: listed as not enforced,
    /// never hidden, but not a reason to refuse (DESIGN §2.1, §2.4).
    pub fn is_required(self, net: NetPolicy) -> bool {
        match self {
            Protection::WriteOutside
            | Protection::Truncate
            | Protection::RenameLinkAcross
            | Protection::RenameInside
            | Protection::Tiocsti => true,
            Protection::Tcp => net == NetPolicy::Deny,
            // Descriptors the caller hands over on purpose (0-2, --pass-fd) are a limit of
            // the namespace backends without Landlock, listed but not a reason to refuse.
            Protection::InheritedFds
            | Protection::TerminalPrograms
            | Protection::Capabilities
            | Protection::MetadataOutside
            | Protection::SignalsOut
            | Protection::AbstractSockets
            | Protection::PathnameSockets => false,
        }
    }
}

/// Whether one protection holds, and by what mechanism or why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Enforced by the named mechanism.
    Enforced(&'static str),
    /// Not enforced, with the reason (a kernel limit or a missing feature).
    NotEnforced(String),
    /// Not asked for by this policy (TCP with `--net allow`).
    NotRequested,
}

impl Verdict {
    /// True for [`Verdict::Enforced`].
    pub fn is_enforced(&self) -> bool {
        matches!(self, Verdict::Enforced(_))
    }
}

/// What `backend` enforces with an effective Landlock ABI `abi` (0 = no Landlock layered) and
/// network policy `net`, for every [`Protection`] in [`Protection::ALL`] order.
/// `tiocsti_filter` says whether the sandbox has its TIOCSTI/TIOCLINUX seccomp filter for the
/// machine's architecture (a fact of the build, not of the kernel: the filter is written for
/// x86-64 only).
///
/// The kernel facts come from the Landlock documentation
/// (<https://docs.kernel.org/userspace-api/landlock.html>): `REFER` from ABI 2, `TRUNCATE`
/// from ABI 3, TCP from ABI 4, `IOCTL_DEV` from ABI 5, scopes from ABI 6, `RESOLVE_UNIX`
/// from ABI 9; Landlock never covers chmod, chown, utime or xattr changes.
pub fn protections(
    backend: Backend,
    abi: u32,
    net: NetPolicy,
    tiocsti_filter: bool,
) -> Vec<(Protection, Verdict)> {
    Protection::ALL
        .iter()
        .map(|&p| (p, verdict(p, backend, abi, net, tiocsti_filter)))
        .collect()
}

fn verdict(
    p: Protection,
    backend: Backend,
    abi: u32,
    net: NetPolicy,
    tiocsti_filter: bool,
) -> Verdict {
    use Verdict::{Enforced, NotEnforced};
    let mounts = backend.has_readonly_root();
    let no = |s: &str| NotEnforced(s.to_string());
    match p {
        Protection::WriteOutside | Protection::RenameLinkAcross => {
            if mounts {
                Enforced("read-only mounts")
            } else if abi >= 1 {
                Enforced("landlock")
            } else {
                no("no Landlock on this kernel")
            }
        }
        Protection::Truncate => {
            if mounts {
                Enforced("read-only mounts")
            } else if abi >= 3 {
                Enforced("landlock")
            } else {
                no("Landlock before ABI 3 cannot deny truncate(2)")
            }
        }
        Protection::RenameInside => {
            // Landlock ABI 1 refuses cross-directory renames whatever else is in place.
            if abi >= 2 || (mounts && abi == 0) {
                Enforced("landlock refer right")
            } else {
                no("Landlock ABI 1 refuses every rename or link across directories, even inside the worktree")
            }
        }
        Protection::MetadataOutside => {
            if mounts {
                Enforced("read-only mounts")
            } else {
                no("Landlock does not control chmod, chown, utime or xattr changes (use --backend layered)")
            }
        }
        Protection::SignalsOut => {
            if abi >= 6 {
                Enforced("landlock scope")
            } else if backend.has_pid_namespace() {
                Enforced("pid namespace")
            } else {
                no("Landlock scopes signals only from ABI 6")
            }
        }
        Protection::AbstractSockets => {
            if abi >= 6 {
                Enforced("landlock scope")
            } else if backend.has_pid_namespace() && net == NetPolicy::Deny {
                Enforced("network namespace")
            } else {
                no("Landlock scopes abstract unix sockets only from ABI 6")
            }
        }
        Protection::PathnameSockets => {
            if abi >= 9 {
                Enforced("landlock")
            } else {
                no("Landlock before ABI 9 cannot stop connect() to a pathname unix socket")
            }
        }
        Protection::Tcp => match net {
            NetPolicy::Allow => Verdict::NotRequested,
            NetPolicy::Deny if abi >= 4 => Enforced("landlock"),
            NetPolicy::Deny if backend.has_readonly_root() => Enforced("network namespace"),
            NetPolicy::Deny => no("Landlock controls TCP only from ABI 4"),
        },
        Protection::Tiocsti if tiocsti_filter => Enforced("seccomp"),
        Protection::Tiocsti => no("the seccomp filter against TIOCSTI/TIOCLINUX exists only for x86-64; none is installed on this architecture"),
        Protection::TerminalPrograms => {
            if backend == Backend::Bwrap {
                no("bubblewrap's --new-session leaves the command without a controlling terminal (/dev/tty: ENXIO)")
            } else {
                Enforced("terminal devices writable, controlling terminal kept when interactive")
            }
        }
        Protection::Capabilities => {
            if backend == Backend::Bwrap {
                no("as root, bubblewrap clears every capability set but the bounding one; no_new_privs keeps exec from regaining any")
            } else {
                Enforced("dropped from every set, no_new_privs")
            }
        }
        Protection::InheritedFds => {
            if abi == 0 && mounts {
                no("descriptors above 2 are closed, but 0-2 and --pass-fd ones name the host's mounts: without Landlock they can be re-opened for writing through /proc/self/fd")
            } else {
                Enforced("closed before exec; Landlock checks re-opens")
            }
        }
    }
}

/// The required protections (see [`Protection::is_required`]) that do not hold: a non-empty
/// list means the run would be degraded. Arguments as for [`protections`].
pub fn degradations(
    backend: Backend,
    abi: u32,
    net: NetPolicy,
    tiocsti_filter: bool,
) -> Vec<(Protection, String)> {
    protections(backend, abi, net, tiocsti_filter)
        .into_iter()
        .filter(|(p, _)| p.is_required(net))
        .filter_map(|(p, v)| match v {
            Verdict::NotEnforced(reason) => Some((p, reason)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn landlock_abi3_is_complete_without_net_deny() {
        assert!(degradations(Backend::Landlock, 3, NetPolicy::Allow, true).is_empty());
        assert_eq!(
            degradations(Backend::Landlock, 3, NetPolicy::Deny, true)[0].0,
            Protection::Tcp
        );
        assert!(degradations(Backend::Landlock, 4, NetPolicy::Deny, true).is_empty());
    }

    #[test]
    fn landlock_abi1_and_2_are_degraded() {
        let d1: Vec<_> = degradations(Backend::Landlock, 1, NetPolicy::Allow, true)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(d1, vec![Protection::Truncate, Protection::RenameInside]);
        let d2: Vec<_> = degradations(Backend::Landlock, 2, NetPolicy::Allow, true)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(d2, vec![Protection::Truncate]);
        assert!(!degradations(Backend::Landlock, 0, NetPolicy::Allow, true).is_empty());
    }

    #[test]
    fn metadata_and_pathname_sockets_are_listed_never_hidden() {
        let all = protections(Backend::Landlock, 7, NetPolicy::Deny, true);
        let get = |p| all.iter().find(|(q, _)| *q == p).unwrap().1.clone();
        assert!(!get(Protection::MetadataOutside).is_enforced());
        assert!(!get(Protection::PathnameSockets).is_enforced());
        assert!(get(Protection::SignalsOut).is_enforced());
        let layered = protections(Backend::Layered, 7, NetPolicy::Allow, true);
        assert!(layered[4].1.is_enforced());
    }

    #[test]
    fn tiocsti_is_enforced_only_with_the_filter() {
        for backend in [
            Backend::Landlock,
            Backend::Userns,
            Backend::Layered,
            Backend::Bwrap,
        ] {
            let with = protections(backend, 7, NetPolicy::Allow, true);
            let without = protections(backend, 7, NetPolicy::Allow, false);
            let tiocsti = |all: &[(Protection, Verdict)]| {
                all.iter()
                    .find(|(p, _)| *p == Protection::Tiocsti)
                    .unwrap()
                    .1
                    .clone()
            };
            assert_eq!(tiocsti(&with), Verdict::Enforced("seccomp"));
            assert!(!tiocsti(&without).is_enforced());
            assert_eq!(
                degradations(backend, 7, NetPolicy::Allow, false)
                    .iter()
                    .map(|(p, _)| *p)
                    .collect::<Vec<_>>(),
                [Protection::Tiocsti]
            );
        }
    }
}
