//! The namespace backends, `layered` (auto's first choice) and `userns` (docs/ARCHITECTURE.md):
//! new user, mount, PID and IPC namespaces (and a new network namespace with `--net deny` or
//! `--net proxy`),
//! the root read-only, the writable set bound read-write, a minimal `/dev` with a private
//! devpts, `/dev/shm` and `/dev/mqueue`, and a fresh `/proc`.
//!
//! # Map
//! - this file: the plan ([`plan`], giving [`Setup`] with its [`Bind`]s and [`Layered`]
//!   Landlock) and whether user namespaces work here at all ([`probe`],
//!   [`blocked_by_sysctl`], [`failure_reason`]);
//! - [`mounts`]: steps 1-6 below, run by process A in the new namespaces ([`mounts::build`]);
//! - [`init`]: process A itself, the namespaces' PID 1 ([`init::run`], step 7);
//! - [`sys`]: the `mount(2)` call with its message, shared with [`crate::devpts`].
//!
//! Never: mount anything in the caller's mount namespace. Every mount happens after the
//! clone, in process A (or in the probe's throw-away child), and every bind source and
//! target is addressed through a descriptor opened without following symlinks.
//!
//! # Order of operations, and why
//! The supervisor clones process A with `CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID |
//! CLONE_NEWIPC` (the IPC namespace keeps System V objects and POSIX message queues of outside
//! processes out of reach). A is PID 1 of the new PID namespace and holds every capability
//! *in the new user namespace* (none over the host). A:
//! 1. writes its uid/gid maps: a single identity mapping of the caller's uid and gid
//!    (`setgroups` denied first, as user_namespaces(7) requires for an unprivileged gid map),
//!    so files created in the worktree belong to the caller. A root caller over a worktree
//!    owned by another uid gets every id mapped to itself instead ([`Setup::full_map`]),
//!    written by the supervisor, which alone holds `CAP_SETUID` over the parent namespace;
//! 2. makes every mount private (`MS_REC | MS_PRIVATE`), so nothing propagates to the host;
//! 3. replaces `/dev` with a tmpfs holding bind mounts of the host's `null`, `zero`, `full`,
//!    `random`, `urandom` and `tty`, a new devpts instance with `ptmx` (as bubblewrap's
//!    `--dev`): the host's other device nodes (disks…) and the user's other terminals stay out
//!    of reach even for a root caller, whose uid owns them; the caller's own terminal keeps
//!    its real name there ([`crate::devpts`]); mounts `/dev/shm` as a private tmpfs and
//!    `/dev/mqueue` for the IPC namespace;
//! 4. mounts a fresh `/proc` for the new PID namespace, with `sys`, `sysrq-trigger`, `irq` and
//!    `bus` bound read-only over themselves (as bubblewrap does);
//! 5. binds each writable path onto itself, addressing both source and target through
//!    `/proc/self/fd/N` of the descriptor opened (without following symlinks) before the clone,
//!    so a path swapped for a symlink since cannot redirect the mount;
//!    5d. hides the secret locations (`crate::secretpaths::Cover`): `/dev/null` bound over each
//!    file and remounted `nodev`, an empty tmpfs of mode 0 over each directory (the host's
//!    entries bound back where an `--allow-read` path lies inside, opened before any cover);
//! 6. makes the whole tree read-only with one `mount_setattr(AT_RECURSIVE)` (Linux 5.12) and
//!    the writable set read-write again; before 5.12 it walks `/proc/self/mountinfo` and
//!    remounts every other mount point read-only, keeping its existing
//!    `nosuid`/`nodev`/`noexec`/atime flags (the kernel refuses to clear flags locked by a
//!    more privileged namespace);
//! 7. starts B, the command (`clone(CLONE_VM | CLONE_VFORK)`, as the supervisor starts its
//!    child), and becomes its init: it forwards signals to B, reaps orphans, hands B's raw
//!    wait status to the supervisor over a pipe (so the sandbox can die by B's signal, which
//!    PID 1 itself cannot) and exits. When A exits the kernel kills everything left in the namespace,
//!    so no descendant survives the command, and A's death signal (SIGKILL when the supervisor
//!    dies) takes the whole namespace with it.
//!
//! B then runs the same per-exec steps as the Landlock backend (new session, descriptors,
//! `no_new_privs`, capability drop, seccomp, and Landlock layered on top when available).
//!
//! # Limits
//! Submounts inside a writable path stay read-only. chmod/chown/utime/xattr outside the
//! writable set fail with `EROFS`. Abstract unix sockets are per network namespace: without
//! `--net deny` (and before Landlock ABI 6) they stay reachable.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use landlock::RulesetCreated;
use rustix::process::{getgid, getuid, WaitOptions};
use shofer_core::policy::{NetPolicy, RuleOrigin};
use shofer_sys::signal::exit_now;

use crate::error::SetupError;
use crate::writable::OpenedPolicy;
use sys::{mount, write_file};

pub(crate) mod init;
mod mounts;
pub(crate) mod sys;

/// One writable path with its descriptor (opened before the clone).
pub(crate) struct Bind<'a> {
    /// The path (canonical for the worktree and `--allow-write`).
    pub path: &'a Path,
    /// `O_PATH` descriptor of it, owned by the opened policy.
    pub fd: BorrowedFd<'a>,
}

/// The namespace backends' part of the plan: what process A needs to build the namespaces,
/// and the Landlock ruleset layered on top (the `layered` backend, and `userns` where the
/// kernel has Landlock from ABI 2).
pub(crate) struct Setup<'a> {
    /// Writable binds (devices and `/dev/shm` are handled by the minimal `/dev`).
    pub binds: Vec<Bind<'a>>,
    /// The caller's uid and gid, mapped to themselves.
    pub uid: u32,
    /// See `uid`.
    pub gid: u32,
    /// Host device nodes to bind into the new `/dev`: (name under /dev, writable).
    pub devices: Vec<(String, bool)>,
    /// Binds after the writable ones, in order: (path, writable), each over itself: the
    /// layers' pins, then their binds ([`crate::spec::Layers`]).
    pub layers: Vec<(PathBuf, bool)>,
    /// The layers' replacement, then their redirect: bound after them.
    pub replace: Option<(PathBuf, PathBuf)>,
    pub redirect: Option<crate::spec::Redirect>,
    /// Copy-on-write views over host directories, mounted after the redirect (step 5c);
    /// process A adds a Landlock rule for each (a new mount: no host rule reaches it).
    pub overlays: Vec<crate::spec::Overlay>,
    /// Also unshare the network namespace (`--net deny`, `--net proxy`).
    pub own_net: bool,
    /// `--net proxy`: the supervisor makes the proxy's listener in the new network namespace
    /// (`crate::egress::listener_in`) before process A goes on.
    pub proxy: bool,
    /// Landlock layered on the namespaces.
    pub landlock: Option<Layered>,
    /// The mounts that hide the secret locations (step 5d), in order.
    pub covers: Vec<crate::secretpaths::Cover>,
    /// Every id mapped to itself instead of only the caller's, written by the supervisor
    /// (only a process with `CAP_SETUID` over the parent namespace may): a root caller over a
    /// worktree owned by another uid, whose kept capabilities must apply to that owner's
    /// files (capabilities in a user namespace cover only inodes with mapped owners).
    pub full_map: bool,
}

/// The map of every id to itself, for [`Setup::full_map`].
pub(crate) const FULL_MAP: &str = "0 0 4294967295";

/// A Landlock ruleset layered on the namespaces.
pub(crate) struct Layered {
    /// Created; process A adds the private `/dev/shm` and devpts, the command applies it.
    pub ruleset: RulesetCreated,
    /// Its ABI (for the rights of the rules A adds).
    pub abi: u32,
    /// Whether the ruleset handles reading (a secret location is hidden): process A then
    /// grants it on the namespace's own `/proc` and `/dev`, new inodes no host rule reaches.
    pub reads: bool,
}

/// The namespace backends' plan for `opened`, with Landlock at `abi` layered on top when
/// `abi > 0`: every writable path becomes a bind, except the device nodes and `/dev/shm`,
/// which the minimal `/dev` provides (plus any other terminal the caller sits on).
///
/// # Errors
/// [`SetupError::Landlock`] when the kernel refuses the layered ruleset.
pub(crate) fn plan<'a>(
    opened: &'a OpenedPolicy,
    unix: &crate::gate::AllowUnix,
    reads: &crate::secretpaths::ReadRules,
    abi: u32,
    layers: crate::spec::Layers,
) -> Result<Setup<'a>, SetupError> {
    let mut devices = standard_devices();
    let mut binds = Vec::new();
    for (rule, fd) in opened.policy.writable.iter().zip(&opened.fds) {
        match rule.origin {
            RuleOrigin::Device | RuleOrigin::SharedMemory => {}
            RuleOrigin::Terminal => {
                let name = rule.path.strip_prefix("/dev").ok().and_then(|p| p.to_str());
                if let Some(name) = name {
                    // ptmx and pts come from the namespace's own devpts instance.
                    let covered = devices.iter().any(|(d, _)| name == d)
                        || name == "ptmx"
                        || name == "pts"
                        || name.starts_with("pts/");
                    if !covered && !name.contains('/') {
                        devices.push((name.to_string(), true));
                    }
                }
            }
            _ => binds.push(Bind {
                path: &rule.path,
                fd: fd.as_fd(),
            }),
        }
    }
    let landlock = if abi > 0 {
        let mut ruleset = crate::ruleset::create(opened, unix, reads, false, abi)?;
        // The mounts decide what of these is writable; Landlock must allow what they allow.
        for dir in &layers.landlock_dirs {
            ruleset = crate::ruleset::add_dir(ruleset, dir, reads, abi)?;
        }
        Some(Layered {
            ruleset,
            abi,
            reads: reads.active(),
        })
    } else {
        None
    };
    let (uid, gid) = (getuid().as_raw(), getgid().as_raw());
    Ok(Setup {
        binds,
        uid,
        gid,
        devices,
        // The pins first: a recursive bind over itself keeps the binds beneath it.
        layers: layers
            .pins
            .into_iter()
            .map(|p| (p, true))
            .chain(layers.binds)
            .collect(),
        replace: layers.replace,
        redirect: layers.redirect,
        overlays: layers.overlays,
        own_net: opened.policy.net.own_namespace(),
        proxy: opened.policy.net == NetPolicy::Proxy,
        landlock,
        covers: Vec::new(),
        full_map: false,
    })
}

/// Host `/dev` entries bound into the minimal `/dev`: name and whether writable.
const DEV_NODES: [(&str, bool); 6] = [
    ("null", true),
    ("zero", true),
    ("full", true),
    ("random", false),
    ("urandom", false),
    ("tty", true),
];

/// The host `/dev` entries bound into the minimal `/dev`, with whether each is writable.
fn standard_devices() -> Vec<(String, bool)> {
    DEV_NODES
        .iter()
        .map(|(name, writable)| (name.to_string(), *writable))
        .collect()
}

/// One line explaining why user namespaces failed at `step` with `errno`, naming the cause and
/// the fix where the kernel's configuration tells it.
pub(crate) fn failure_reason(step: &str, errno: i32) -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1")
        && matches!(errno, libc::EPERM | libc::EACCES)
    {
        return format!(
            "blocked (AppArmor restricts unprivileged user namespaces: install the profile from `shofer-sandbox --print-apparmor-profile` ({}), or set kernel.apparmor_restrict_unprivileged_userns=0)",
            crate::apparmor::install_hint()
        );
    }
    if errno == libc::ENOSPC {
        return "blocked (user.max_user_namespaces is 0 or exhausted for this user: raise it with sysctl)".into();
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return "blocked (kernel.unprivileged_userns_clone=0: set it to 1)".into();
    }
    if errno == libc::EINVAL || errno == libc::ENOSYS {
        return "not supported by this kernel".into();
    }
    format!(
        "failed at {step} ({}: {})",
        shofer_sys::errno::name_or_number(errno),
        shofer_sys::errno::strerror(errno)
    )
}

/// Why user namespaces cannot work here, when a sysctl already says so (no clone needed):
/// `user.max_user_namespaces=0`, or Debian's `kernel.unprivileged_userns_clone=0` for a
/// caller without `CAP_SYS_ADMIN`. `None` means "try": AppArmor's restriction, for one,
/// may be lifted for this binary by a profile, which only the clone tells.
pub fn blocked_by_sysctl() -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    if read("/proc/sys/user/max_user_namespaces")
        .as_deref()
        .map(str::trim)
        == Some("0")
    {
        return Some(failure_reason("clone", libc::ENOSPC));
    }
    let root = rustix::process::geteuid().is_root();
    if !root
        && read("/proc/sys/kernel/unprivileged_userns_clone")
            .as_deref()
            .map(str::trim)
            == Some("0")
    {
        return Some(failure_reason("clone", libc::EPERM));
    }
    None
}

/// Whether an unprivileged user namespace with its own mounts works here: clones a child into
/// new user and mount namespaces that writes its id maps and mounts a tmpfs (in its private
/// mount namespace, invisible to the host), and reports how far it got.
///
/// # Errors
/// The [`failure_reason`] of the first step that failed.
pub(crate) fn probe() -> Result<(), String> {
    let (uid, gid) = (getuid().as_raw(), getgid().as_raw());
    // Raw syscall: rustix has no clone(2) (and libc's wrapper needs a stack).
    // Safety: a fork-like clone (no new stack, no CLONE_VM) of this single-threaded process;
    // the child only makes syscalls and exits.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::SIGCHLD,
            0,
            0,
            0,
            0,
        )
    };
    if pid < 0 {
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return Err(failure_reason("clone(CLONE_NEWUSER)", errno));
    }
    if pid == 0 {
        let code = |e: io::Error| e.raw_os_error().unwrap_or(libc::EIO).clamp(1, 127);
        let maps = (|| -> io::Result<()> {
            write_file("/proc/self/setgroups", "deny")?;
            write_file("/proc/self/uid_map", &format!("{uid} {uid} 1"))?;
            write_file("/proc/self/gid_map", &format!("{gid} {gid} 1"))
        })();
        if let Err(e) = maps {
            // Leaving the probe child without running the parent's destructors.
            exit_now(code(e));
        }
        let mounted = mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)
            .and_then(|()| mount(Some("tmpfs"), "/tmp", Some("tmpfs"), 0, None));
        let status = match mounted {
            Ok(()) => 0,
            Err(e) => 128 + code(e),
        };
        exit_now(status);
    }
    // Reaping the child we just cloned.
    let status = shofer_sys::process::pid(pid as libc::pid_t)
        .and_then(|pid| rustix::process::waitpid(Some(pid), WaitOptions::empty()).ok())
        .flatten()
        .map_or(0, |(_, status)| status.as_raw());
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(()),
        (true, c) if c > 128 => Err(failure_reason("mount", c - 128)),
        (true, c) => Err(failure_reason("writing uid_map/gid_map", c)),
        _ => Err("the probe child was killed".into()),
    }
}
