//! The sandbox policy model (ARCHITECTURE §2.1) and what each backend enforces of it (§2.4, §2.5).
//!
//! A [`Policy`] is the writable set plus the network choice; it holds no file descriptors and
//! makes no syscalls. [`default_writable`] is the one definition of the places every command
//! may write (`/tmp`, `$TMPDIR`, devices, terminals, `/dev/shm`). [`protections`] answers, for a backend at a Landlock ABI, which of the
//! [`Protection`]s hold — the single source of truth behind `--probe`, `--report` and `auto`.

use std::fmt;
use std::path::{Path, PathBuf};

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
    /// The per-worktree gitdir or the common dir's `objects/`, `refs/`, `logs/` (ARCHITECTURE §2.3).
    GitMetadata,
    /// A `--allow-write PATH`.
    AllowWrite,
    /// A package manager's private cache directory (in shofer's state directory), when a
    /// variable points the tool at it.
    PackageCache,
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
            RuleOrigin::PackageCache => "package-cache",
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

/// `/tmp`: writable by every command.
pub const TMP: &str = "/tmp";
/// Device files writable by every command.
pub const DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];
/// Terminal devices: write and, from Landlock ABI 5, device ioctls.
pub const TERMINALS: [&str; 3] = ["/dev/tty", "/dev/ptmx", "/dev/pts"];
/// POSIX shared memory and semaphores.
pub const SHARED_MEMORY: &str = "/dev/shm";

/// The default writable set of ARCHITECTURE §2.1 besides the worktree, its git metadata and
/// `--allow-write` paths — the one definition the sandbox builds its rules from and the engine
/// explains denials with. In order: `/tmp`, `tmpdir` (the command's `$TMPDIR`), the
/// [`DEVICES`], the [`TERMINALS`] and then `caller_terminals` (the caller's own terminal
/// devices, e.g. `/dev/tty1`), `/dev/shm`.
///
/// Paths as named: the sandbox canonicalises `/tmp` and `$TMPDIR` (a relative `$TMPDIR`
/// against its working directory) and skips what does not exist.
pub fn default_writable(
    tmpdir: Option<&Path>,
    caller_terminals: &[PathBuf],
) -> Vec<(PathBuf, RuleOrigin)> {
    let mut set = vec![(PathBuf::from(TMP), RuleOrigin::Tmp)];
    set.extend(tmpdir.map(|t| (t.to_path_buf(), RuleOrigin::Tmp)));
    set.extend(
        DEVICES
            .iter()
            .map(|d| (PathBuf::from(d), RuleOrigin::Device)),
    );
    set.extend(
        TERMINALS
            .iter()
            .map(PathBuf::from)
            .chain(caller_terminals.iter().cloned())
            .map(|t| (t, RuleOrigin::Terminal)),
    );
    set.push((PathBuf::from(SHARED_MEMORY), RuleOrigin::SharedMemory));
    set
}

/// The directories of [`default_writable`] a command's files can go to — `/tmp`, `tmpdir`
/// when absolute, `/dev/shm`; no device or terminal: what a denial hint names as writable
/// and what a private state directory must stay out of.
pub fn default_writable_dirs(tmpdir: Option<&Path>) -> Vec<PathBuf> {
    default_writable(tmpdir, &[])
        .into_iter()
        .filter(|(p, origin)| {
            matches!(origin, RuleOrigin::Tmp | RuleOrigin::SharedMemory) && p.is_absolute()
        })
        .map(|(p, _)| p)
        .collect()
}

/// Network policy: `--net allow` (default), `--net deny` (no network) or `--net proxy` (only
/// the supervisor's proxy, to the allow-list of [`crate::egress`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NetPolicy {
    /// No network restriction.
    #[default]
    Allow,
    /// Deny TCP `bind()` and `connect()` (Landlock ABI 4+, or a new network namespace).
    Deny,
    /// A new network namespace with loopback only, where a listener the supervisor serves is
    /// the one way out: an HTTP CONNECT / SOCKS5 proxy to the allow-list's destinations.
    Proxy,
}

impl NetPolicy {
    /// The name `--net` takes and the report shows.
    pub fn as_str(self) -> &'static str {
        match self {
            NetPolicy::Allow => "allow",
            NetPolicy::Deny => "deny",
            NetPolicy::Proxy => "proxy",
        }
    }

    /// Whether the namespace backends give the command a network namespace of its own.
    pub fn own_namespace(self) -> bool {
        self != NetPolicy::Allow
    }

    /// The policy `text` names (`--net`, the policy file's `network.mode`).
    ///
    /// # Errors
    /// What `text` should have been.
    pub fn parse(text: &str) -> Result<NetPolicy, String> {
        match text {
            "allow" => Ok(NetPolicy::Allow),
            "deny" => Ok(NetPolicy::Deny),
            "proxy" => Ok(NetPolicy::Proxy),
            _ => Err(format!("{text}: expected allow, deny or proxy")),
        }
    }

    /// How much of the network the policy opens: `deny` < `proxy` < `allow` (a project's
    /// policy file may only ask for less than the user's).
    pub fn openness(self) -> u8 {
        match self {
            NetPolicy::Deny => 0,
            NetPolicy::Proxy => 1,
            NetPolicy::Allow => 2,
        }
    }
}

/// A sandbox backend (ARCHITECTURE §2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A Landlock ruleset on the command and its children.
    Landlock,
    /// Built-in user, mount and PID namespaces with a read-only root; Landlock layered on top
    /// when the kernel has it.
    Userns,
    /// The system's bubblewrap.
    Bwrap,
    /// User, mount, PID and IPC namespaces with Landlock and the seccomp filters on top: the
    /// first choice of `auto` wherever unprivileged user namespaces work.
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

    /// The backend `--backend` names: `None` for `auto` (the strongest that enforces the whole
    /// policy).
    ///
    /// # Errors
    /// What `text` should have been.
    pub fn parse_choice(text: &str) -> Result<Option<Backend>, String> {
        match text {
            "auto" => Ok(None),
            "landlock" => Ok(Some(Backend::Landlock)),
            "userns" => Ok(Some(Backend::Userns)),
            "bwrap" => Ok(Some(Backend::Bwrap)),
            "layered" => Ok(Some(Backend::Layered)),
            _ => Err(format!(
                "{text}: expected auto, landlock, userns, bwrap or layered"
            )),
        }
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

/// A protection the report speaks about (ARCHITECTURE §2.5).
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
    /// `ptrace` (and `/proc/PID/mem`, `environ`, …) of processes outside the sandbox.
    PtraceOut,
    /// A SIGKILL of the sandbox takes every descendant with it (nothing outlives it).
    SigkillKillsTree,
    /// System V shared memory, message queues and semaphores of outside processes.
    SysvIpc,
    /// The caller's keyrings (`add_key`, `keyctl`, `request_key`).
    Keyrings,
    /// The user's other terminals (`/dev/pts/N` other than the caller's own).
    OtherTerminals,
    /// The secret locations ([`crate::secretpaths`]) cannot be read.
    SecretsHidden,
    /// No file is made set-user-ID or set-group-ID (it would run with its owner's rights for
    /// whoever executes it later).
    SetidFiles,
}

/// How much a protection matters (the two tiers of docs/ARCHITECTURE.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Missing: exit 125 naming the mechanism, unless `--allow-degraded`.
    Required,
    /// Missing: one stderr line per run and a `degraded` entry in the report.
    Hardening,
    /// A property of the run shown in the report, not a protection against the command.
    Info,
}

impl Tier {
    /// Stable lower-case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Required => "required",
            Tier::Hardening => "hardening",
            Tier::Info => "info",
        }
    }
}

impl Protection {
    /// Every protection, in report order.
    pub const ALL: [Protection; 20] = [
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
        Protection::PtraceOut,
        Protection::SigkillKillsTree,
        Protection::SysvIpc,
        Protection::Keyrings,
        Protection::OtherTerminals,
        Protection::SecretsHidden,
        Protection::SetidFiles,
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
            Protection::PtraceOut => "ptrace_out",
            Protection::SigkillKillsTree => "sigkill_kills_tree",
            Protection::SysvIpc => "sysv_ipc",
            Protection::Keyrings => "keyrings",
            Protection::OtherTerminals => "other_terminals",
            Protection::SecretsHidden => "secrets_hidden",
            Protection::SetidFiles => "setid_files",
        }
    }

    /// The tier of this protection under network policy `net` (docs/ARCHITECTURE.md): *required*
    /// ones (writes outside, terminal injection, TCP with `--net deny`) make `auto` refuse
    /// when missing; *hardening* ones are named on stderr and in the report's `degraded`;
    /// *info* rows describe the run.
    pub fn tier(self, net: NetPolicy) -> Tier {
        match self {
            Protection::WriteOutside
            | Protection::Truncate
            | Protection::RenameLinkAcross
            | Protection::RenameInside
            | Protection::PathnameSockets
            | Protection::Tiocsti => Tier::Required,
            Protection::Tcp if net != NetPolicy::Allow => Tier::Required,
            Protection::Tcp => Tier::Info,
            Protection::MetadataOutside
            | Protection::SignalsOut
            | Protection::PtraceOut
            | Protection::SigkillKillsTree
            | Protection::SysvIpc
            | Protection::Keyrings
            | Protection::OtherTerminals
            | Protection::SecretsHidden
            | Protection::SetidFiles
            | Protection::AbstractSockets => Tier::Hardening,
            // Descriptors the caller hands over on purpose (0-2, --pass-fd), whether terminal
            // programs work, and the capability drop describe the run.
            Protection::InheritedFds | Protection::TerminalPrograms | Protection::Capabilities => {
                Tier::Info
            }
        }
    }

    /// Whether losing this protection is a *degradation* that `auto` refuses without
    /// `--allow-degraded` ([`Tier::Required`]).
    pub fn is_required(self, net: NetPolicy) -> bool {
        self.tier(net) == Tier::Required
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
/// x86-64 only). `unix_gate` says whether shofer-sandbox's seccomp gate on unix-socket
/// connects runs.
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
    unix_gate: bool,
) -> Vec<(Protection, Verdict)> {
    Protection::ALL
        .iter()
        .map(|&p| (p, verdict(p, backend, abi, net, tiocsti_filter, unix_gate)))
        .collect()
}

fn verdict(
    p: Protection,
    backend: Backend,
    abi: u32,
    net: NetPolicy,
    tiocsti_filter: bool,
    gate: bool,
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
            } else if gate {
                Enforced("seccomp gate (signals, pidfd_open and SIGIO owners outside the run's processes refused; the rest sent through pidfds)")
            } else {
                NotEnforced(format!("Landlock scopes signals only from ABI 6 (ABI {abi} here) and the seccomp gate cannot run here: the command can signal every process of its user"))
            }
        }
        Protection::PtraceOut => {
            if backend.has_pid_namespace() {
                Enforced("pid namespace")
            } else if abi >= 1 {
                Enforced("landlock (ptrace only within the sandbox's domain)")
            } else {
                no("without Landlock or a PID namespace, processes of the same user can be traced")
            }
        }
        Protection::SigkillKillsTree => {
            if backend == Backend::Bwrap {
                no("bubblewrap's --die-with-parent does not always take its PID namespace's init along: SIGKILLs of the sandbox at random moments left the command running")
            } else if backend.has_pid_namespace() {
                Enforced("pid namespace (its init's death kills every process in it)")
            } else if abi >= 6 {
                Enforced("guardian (a subreaper parent that kills the tree when the supervisor dies) and landlock scope")
            } else if gate {
                Enforced("guardian (a subreaper parent that kills the tree when the supervisor dies) and the seccomp gate (no signal reaches either)")
            } else {
                NotEnforced(format!("Landlock scopes signals only from ABI 6 (ABI {abi} here) and the seccomp gate cannot run here: the command can SIGKILL the guardian and the supervisor together"))
            }
        }
        Protection::SysvIpc => {
            if backend.has_pid_namespace() {
                Enforced("ipc namespace")
            } else {
                no("without an IPC namespace, System V shared memory, message queues and semaphores of outside processes stay reachable (Landlock does not scope them)")
            }
        }
        Protection::Keyrings if tiocsti_filter => {
            Enforced("seccomp (add_key, request_key, keyctl refused)")
        }
        Protection::Keyrings => no("the seccomp filters exist only for x86-64: the command may use the caller's keyrings"),
        // The host filter refuses the modes (shofer-sandbox's hostfilter); with --keep-caps it
        // does not (`Choice::with_keep_caps`).
        Protection::SetidFiles if tiocsti_filter => {
            Enforced("seccomp (chmod-family calls and file creation with S_ISUID or S_ISGID refused)")
        }
        Protection::SetidFiles => no("the seccomp filters exist only for x86-64: the command may make set-user-ID and set-group-ID files"),
        Protection::OtherTerminals => {
            if backend.has_pid_namespace() {
                Enforced("private devpts")
            } else {
                no("Landlock grants /dev/pts whole (new ptys need it): the user's other terminals stay writable")
            }
        }
        // Landlock handling the read rights on Landlock alone, granted on every entry of each
        // directory that holds a secret location but on those locations; mounts over them
        // elsewhere (shofer-sandbox's secretpaths), with the read rules layered too for a
        // command that keeps a capability over file modes. With --keep-caps, bubblewrap and
        // unlayered namespaces leave CAP_SYS_ADMIN, which unmounts (shofer-sandbox's
        // `Choice::with_keep_caps`).
        Protection::SecretsHidden => match backend {
            Backend::Landlock if abi >= 1 => Enforced("landlock read rights"),
            Backend::Landlock => no("no Landlock on this kernel: the secret locations stay readable"),
            _ => Enforced("mounts (/dev/null bound nodev over each file, an empty read-only tmpfs of mode 0 over each directory)"),
        },
        Protection::AbstractSockets => {
            if abi >= 6 {
                Enforced("landlock scope")
            } else if gate {
                Enforced("seccomp gate")
            } else if backend.has_pid_namespace() && net.own_namespace() {
                Enforced("network namespace")
            } else if backend == Backend::Bwrap {
                no("bubblewrap keeps the host's network namespace without --net deny, and abstract unix sockets belong to it")
            } else {
                no("Landlock scopes abstract unix sockets only from ABI 6")
            }
        }
        // Landlock's RESOLVE_UNIX (ABI 9) grants by path: a host socket linked or moved
        // beneath a granted directory passes it, so only the gate, which decides on the
        // listener's own record of its bind, enforces this at any ABI.
        Protection::PathnameSockets => {
            if gate {
                Enforced("seccomp gate")
            } else if abi >= 9 && backend != Backend::Bwrap {
                no("Landlock's RESOLVE_UNIX grants by path (a host socket linked or moved beneath the worktree or an --allow-unix directory passes), and the seccomp gate cannot run here")
            } else if backend == Backend::Bwrap {
                no("bubblewrap binds the host's root: connect() to its pathname unix sockets is not stopped")
            } else {
                no("Landlock before ABI 9 cannot stop connect() to a pathname unix socket, and the seccomp gate cannot run here")
            }
        }
        // Landlock alone keeps the host's network namespace: its rules name TCP ports, so the
        // host filter refuses every other network socket (shofer-sandbox's hostfilter).
        Protection::Tcp => match net {
            NetPolicy::Allow => Verdict::NotRequested,
            NetPolicy::Proxy if backend == Backend::Landlock && !tiocsti_filter => no("--net proxy on Landlock alone needs the seccomp filters, which exist only for x86-64 (Landlock's network rules name ports, not addresses)"),
            NetPolicy::Proxy if backend == Backend::Landlock && gate => Enforced("the seccomp gate (inet connect and send only to the proxy on the host's loopback and to the run's own loopback listeners, made by the gate's helper; bind to loopback only) and seccomp (TCP stream sockets only: no UDP, raw, MPTCP or Fast Open)"),
            NetPolicy::Proxy if backend == Backend::Landlock => no("--net proxy on Landlock alone needs the seccomp gate to judge inet connects (Landlock's network rules name ports, not addresses), and the gate does not run here"),
            NetPolicy::Proxy => Enforced("network namespace with loopback only: the supervisor's proxy is the one way out, to the allow-list"),
            NetPolicy::Deny if backend == Backend::Landlock && abi >= 4 && !tiocsti_filter => no("Landlock refuses TCP only, and the seccomp filter that refuses UDP and other network sockets exists only for x86-64"),
            NetPolicy::Deny if backend == Backend::Landlock && abi >= 4 && gate => {
                Enforced("landlock (TCP connect and bind), the seccomp gate (listen on inet sockets) and seccomp (no UDP, raw, SCTP or other network socket)")
            }
            NetPolicy::Deny if backend == Backend::Landlock && abi >= 4 => no("listen() on an unbound TCP socket takes a port Landlock's bind rule does not check, and the seccomp gate that refuses it does not run here"),
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
    unix_gate: bool,
) -> Vec<(Protection, String)> {
    protections(backend, abi, net, tiocsti_filter, unix_gate)
        .into_iter()
        .filter(|(p, _)| p.is_required(net))
        .filter_map(|(p, v)| match v {
            Verdict::NotEnforced(reason) => Some((p, reason)),
            _ => None,
        })
        .collect()
}

/// The hardening protections (see [`Tier::Hardening`]) that do not hold, with why: each is one
/// stderr line per run and a `degraded` entry of the report.
pub fn hardening_gaps(
    backend: Backend,
    abi: u32,
    net: NetPolicy,
    seccomp_filters: bool,
    unix_gate: bool,
) -> Vec<(Protection, String)> {
    protections(backend, abi, net, seccomp_filters, unix_gate)
        .into_iter()
        .filter(|(p, _)| p.tier(net) == Tier::Hardening)
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
    fn default_writable_set_and_its_directories() {
        let tmpdir = Path::new("/var/tmp/me");
        let tty = PathBuf::from("/dev/tty1");
        let set = default_writable(Some(tmpdir), std::slice::from_ref(&tty));
        let paths: Vec<&Path> = set.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(
            paths,
            [
                "/tmp",
                "/var/tmp/me",
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/dev/tty",
                "/dev/ptmx",
                "/dev/pts",
                "/dev/tty1",
                "/dev/shm"
            ]
            .map(Path::new)
        );
        assert_eq!(set[1].1, RuleOrigin::Tmp);
        assert_eq!(set[8].1, RuleOrigin::Terminal);
        assert_eq!(set[9].1, RuleOrigin::SharedMemory);
        assert_eq!(
            default_writable_dirs(Some(tmpdir)),
            ["/tmp", "/var/tmp/me", "/dev/shm"].map(PathBuf::from)
        );
        // A relative $TMPDIR names no place the engine could judge a path against.
        assert_eq!(
            default_writable_dirs(Some(Path::new("tmp"))),
            ["/tmp", "/dev/shm"].map(PathBuf::from)
        );
        assert_eq!(default_writable_dirs(None).len(), 2);
    }

    #[test]
    fn pathname_sockets_are_required_and_enforced_by_the_gate_at_every_abi() {
        let get = |b, abi, gate| {
            protections(b, abi, NetPolicy::Allow, true, gate)
                .into_iter()
                .find(|(p, _)| *p == Protection::PathnameSockets)
                .unwrap()
                .1
        };
        assert!(!get(Backend::Landlock, 9, false).is_enforced());
        assert_eq!(
            get(Backend::Landlock, 9, true),
            Verdict::Enforced("seccomp gate")
        );
        assert_eq!(
            get(Backend::Landlock, 7, true),
            Verdict::Enforced("seccomp gate")
        );
        assert_eq!(
            get(Backend::Bwrap, 0, true),
            Verdict::Enforced("seccomp gate")
        );
        assert!(!get(Backend::Landlock, 7, false).is_enforced());
        assert_eq!(
            degradations(Backend::Landlock, 7, NetPolicy::Allow, true, false)[0].0,
            Protection::PathnameSockets
        );
        assert!(degradations(Backend::Landlock, 7, NetPolicy::Allow, true, true).is_empty());
    }

    #[test]
    fn landlock_abi3_is_complete_without_net_deny() {
        assert!(degradations(Backend::Landlock, 3, NetPolicy::Allow, true, true).is_empty());
        assert_eq!(
            degradations(Backend::Landlock, 3, NetPolicy::Deny, true, true)[0].0,
            Protection::Tcp
        );
        assert!(degradations(Backend::Landlock, 4, NetPolicy::Deny, true, true).is_empty());
    }

    /// `--net proxy` on Landlock alone holds at any ABI with the gate and the seccomp
    /// filters, and is a required loss without either.
    #[test]
    fn landlock_proxy_needs_the_gate_and_seccomp() {
        for abi in [3, 4, 7] {
            assert!(degradations(Backend::Landlock, abi, NetPolicy::Proxy, true, true).is_empty());
            for (tiocsti, gate) in [(true, false), (false, true)] {
                let d = degradations(Backend::Landlock, abi, NetPolicy::Proxy, tiocsti, gate);
                assert!(d.iter().any(|(p, _)| *p == Protection::Tcp), "{d:?}");
            }
        }
        let tcp = |gate| {
            protections(Backend::Landlock, 7, NetPolicy::Proxy, true, gate)
                .into_iter()
                .find(|(p, _)| *p == Protection::Tcp)
                .unwrap()
                .1
        };
        assert!(matches!(tcp(true), Verdict::Enforced(by) if by.contains("seccomp gate")));
        assert!(matches!(tcp(false), Verdict::NotEnforced(why) if why.contains("gate")));
    }

    #[test]
    fn landlock_abi1_and_2_are_degraded() {
        let d1: Vec<_> = degradations(Backend::Landlock, 1, NetPolicy::Allow, true, true)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(d1, vec![Protection::Truncate, Protection::RenameInside]);
        let d2: Vec<_> = degradations(Backend::Landlock, 2, NetPolicy::Allow, true, true)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(d2, vec![Protection::Truncate]);
        assert!(!degradations(Backend::Landlock, 0, NetPolicy::Allow, true, true).is_empty());
    }

    #[test]
    fn metadata_and_pathname_sockets_are_listed_never_hidden() {
        let all = protections(Backend::Landlock, 7, NetPolicy::Deny, true, false);
        let get = |p| all.iter().find(|(q, _)| *q == p).unwrap().1.clone();
        assert!(!get(Protection::MetadataOutside).is_enforced());
        assert!(!get(Protection::PathnameSockets).is_enforced());
        assert!(get(Protection::SignalsOut).is_enforced());
        let layered = protections(Backend::Layered, 7, NetPolicy::Allow, true, true);
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
            let with = protections(backend, 7, NetPolicy::Allow, true, true);
            let without = protections(backend, 7, NetPolicy::Allow, false, true);
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
                degradations(backend, 7, NetPolicy::Allow, false, true)
                    .iter()
                    .map(|(p, _)| *p)
                    .collect::<Vec<_>>(),
                [Protection::Tiocsti]
            );
        }
    }

    #[test]
    fn layered_closes_every_hardening_gap_and_landlock_alone_names_its() {
        let keys = |v: Vec<(Protection, String)>| v.into_iter().map(|(p, _)| p).collect::<Vec<_>>();
        // Pathname sockets are required (the seccomp gate below ABI 9), not a hardening gap.
        assert!(keys(hardening_gaps(
            Backend::Layered,
            7,
            NetPolicy::Allow,
            true,
            true
        ))
        .is_empty());
        assert_eq!(
            keys(hardening_gaps(
                Backend::Landlock,
                7,
                NetPolicy::Allow,
                true,
                true
            )),
            vec![
                Protection::MetadataOutside,
                Protection::SysvIpc,
                Protection::OtherTerminals,
            ]
        );
        // ABI 4-5: no signal scoping; the gate keeps signals in the run, and without it the
        // report must say so.
        for abi in [4, 5] {
            let gaps = |gate| {
                keys(hardening_gaps(
                    Backend::Landlock,
                    abi,
                    NetPolicy::Allow,
                    true,
                    gate,
                ))
            };
            assert!(!gaps(true).contains(&Protection::SignalsOut));
            assert!(gaps(false).contains(&Protection::SignalsOut));
            // Without the gate the command could kill the guardian and the supervisor together.
            assert!(!gaps(true).contains(&Protection::SigkillKillsTree));
            assert!(gaps(false).contains(&Protection::SigkillKillsTree));
        }
    }

    #[test]
    fn bwrap_rows_never_blame_landlock() {
        for (p, v) in protections(Backend::Bwrap, 0, NetPolicy::Allow, true, false) {
            if let Verdict::NotEnforced(why) = v {
                assert!(!why.contains("Landlock before ABI"), "{p:?}: {why}");
            }
        }
    }
}
