//! The namespace backends, `layered` (auto's first choice) and `userns` (docs/ARCHITECTURE.md):
//! new user, mount, PID and IPC namespaces (and a new network namespace with `--net deny`),
//! the root read-only, the writable set bound read-write, a minimal `/dev` with a private
//! devpts, `/dev/shm` and `/dev/mqueue`, and a fresh `/proc`.
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

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::path::Path;
use std::path::PathBuf;

use landlock::RulesetCreated;
use shofer_core::policy::{NetPolicy, RuleOrigin};

use crate::error::SetupError;
use crate::paths;
use crate::spawn::{report_failure, ChildArgs, Stage};
use crate::supervise::FORWARDED;
use crate::writable::OpenedPolicy;
use shofer_sys::process::sigset;

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
    /// layers' pins, then their binds ([`crate::plan::Layers`]).
    pub layers: Vec<(PathBuf, bool)>,
    /// The layers' redirect: bound after them.
    pub redirect: Option<crate::plan::Redirect>,
    /// Also unshare the network namespace (`--net deny`).
    pub net_deny: bool,
    /// Landlock layered on the namespaces.
    pub landlock: Option<Layered>,
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
    abi: u32,
    layers: crate::plan::Layers,
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
        let mut ruleset = crate::ruleset::create(opened, unix, abi)?;
        // The mounts decide what of these is writable; Landlock must allow what they allow.
        for dir in &layers.landlock_dirs {
            ruleset = crate::ruleset::add_dir(ruleset, dir, abi)?;
        }
        Some(Layered { ruleset, abi })
    } else {
        None
    };
    // Safety: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
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
        redirect: layers.redirect,
        net_deny: opened.policy.net == NetPolicy::Deny,
        landlock,
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

/// Where setting up the namespace failed, for the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NsStep {
    /// Writing `/proc/self/uid_map`, `gid_map` or `setgroups`.
    IdMaps,
    /// A mount operation.
    Mounts,
}

/// The host `/dev` entries bound into the minimal `/dev`, with whether each is writable.
fn standard_devices() -> Vec<(String, bool)> {
    DEV_NODES
        .iter()
        .map(|(name, writable)| (name.to_string(), *writable))
        .collect()
}

fn cstr(p: impl AsRef<[u8]>) -> io::Result<CString> {
    CString::new(p.as_ref().to_vec()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `mount(2)`; on failure says which target failed on stderr (the caller's, as every
/// shofer-sandbox message) before returning the raw error.
pub(crate) fn mount(
    src: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let src = src.map(cstr).transpose()?;
    let target_c = cstr(target)?;
    let fstype = fstype.map(cstr).transpose()?;
    let data = data.map(cstr).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // Safety: every pointer is NULL or a NUL-terminated string alive for the call.
    let ret = unsafe {
        libc::mount(
            ptr(&src),
            target_c.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if ret != 0 {
        let e = io::Error::last_os_error();
        if flags & libc::MS_REMOUNT == 0
            || !matches!(e.raw_os_error(), Some(libc::EACCES | libc::ENOENT))
        {
            eprintln!("shofer-sandbox: mount {target}: {e}");
        }
        return Err(e);
    }
    Ok(())
}

fn write_file(path: &str, content: &str) -> io::Result<()> {
    std::fs::write(path, content)
}

fn fd_path(fd: RawFd) -> String {
    format!("/proc/self/fd/{fd}")
}

/// Steps 1-6 of the module docs, run by process A. Returns the step that failed.
fn build(plan: &Setup<'_>) -> Result<(), (NsStep, io::Error)> {
    let maps = || -> io::Result<()> {
        write_file("/proc/self/setgroups", "deny")?;
        write_file("/proc/self/uid_map", &format!("{0} {0} 1", plan.uid))?;
        write_file("/proc/self/gid_map", &format!("{0} {0} 1", plan.gid))
    };
    if !plan.full_map {
        maps().map_err(|e| (NsStep::IdMaps, e))?;
    }
    let cwd = std::env::current_dir();
    mounts(plan).map_err(|e| (NsStep::Mounts, e))?;
    // The working directory still points into the mount as it was before the binds:
    // resolve it again so relative paths see the new (read-write or read-only) mounts.
    if let Ok(cwd) = cwd {
        let _ = std::env::set_current_dir(cwd);
    }
    Ok(())
}

fn mounts(plan: &Setup<'_>) -> io::Result<()> {
    mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;

    // Step 4 first: while the host's /proc is still fully visible, the kernel allows a new
    // proc mount in this user namespace.
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    for sub in ["sys", "sysrq-trigger", "irq", "bus"] {
        let p = format!("/proc/{sub}");
        if Path::new(&p).exists() {
            mount(Some(&p), &p, None, libc::MS_BIND | libc::MS_REC, None)?;
        }
    }

    // Step 3: the minimal /dev. Descriptors opened before the clone name mounts of the
    // host's mount namespace, which cannot be bind sources here: open the nodes again in
    // this namespace while the host's /dev is still visible.
    let terminal = crate::devpts::caller_terminal();
    let mut devices = Vec::new();
    for (name, writable) in &plan.devices {
        if let Ok(fd) = paths::open_following(Path::new(&format!("/dev/{name}"))) {
            devices.push((name.clone(), fd, *writable));
        }
    }
    mount(
        Some("tmpfs"),
        "/dev",
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755"),
    )?;
    for (name, fd, _) in &devices {
        let target = format!("/dev/{name}");
        if paths::kind(fd)? == paths::Kind::Dir {
            std::fs::create_dir(&target)?;
        } else {
            std::fs::File::create(&target)?;
        }
        mount(
            Some(&fd_path(fd.as_raw_fd())),
            &target,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )?;
    }
    // A new devpts instance, as bubblewrap's --dev does: the host's /dev/ptmx cannot find its
    // devpts from a bind mount (the kernel looks for "pts" beside the ptmx node), so new ptys
    // come from here, and the caller's own terminal keeps its name (see devpts).
    std::fs::create_dir("/dev/pts")?;
    // Kept open by process A for the whole run: it exits (or execs nothing) with them.
    std::mem::forget(crate::devpts::mount_private(terminal)?);
    std::fs::create_dir("/dev/shm")?;
    mount(
        Some("tmpfs"),
        "/dev/shm",
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=1777"),
    )?;
    // The IPC namespace's own POSIX message queues (mq_overview(7)).
    std::fs::create_dir("/dev/mqueue")?;
    mount(
        Some("mqueue"),
        "/dev/mqueue",
        Some("mqueue"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, format!("/dev/{link}"))?;
    }

    // Step 5: writable binds, source and target pinned by descriptor.
    let mut keep_rw: Vec<String> = vec![
        "/proc".into(),
        "/dev/shm".into(),
        "/dev/mqueue".into(),
        "/dev/pts".into(),
    ];
    for (name, _, writable) in &devices {
        if *writable {
            keep_rw.push(format!("/dev/{name}"));
        }
    }
    for bind in &plan.binds {
        // Re-opened in this namespace without following symlinks, and checked to be the very
        // object opened before the clone: a swap in between fails closed.
        let fd = paths::open_nofollow(bind.path)?;
        if crate::paths::identity(&fd)? != crate::paths::identity(&bind.fd.try_clone_to_owned()?)? {
            eprintln!(
                "shofer-sandbox: {} changed while the sandbox was set up",
                bind.path.display()
            );
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
        let p = fd_path(fd.as_raw_fd());
        mount(Some(&p), &p, None, libc::MS_BIND | libc::MS_REC, None)?;
        keep_rw.push(bind.path.to_string_lossy().into_owned());
    }

    // Step 5b: the layers (crate::plan::Layers; git's: a main worktree's `.git`, pinned so it
    // cannot be renamed away; a linked worktree's common dir, for packed-refs; read-only binds
    // over control files on top). A mount point can be neither written (step 6 makes it
    // read-only), nor replaced by a rename, nor removed (EBUSY). Opened again here without
    // following symlinks: a path swapped for a symlink fails closed.
    for (path, writable) in &plan.layers {
        let fd = match paths::open_nofollow(path) {
            Ok(fd) => fd,
            // Absent read-only: nothing there to keep (git's: no placeholder, git does not
            // read it).
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && !writable => continue,
            Err(e) => {
                eprintln!("shofer-sandbox: {}: {e}", path.display());
                return Err(e);
            }
        };
        let p = fd_path(fd.as_raw_fd());
        mount(Some(&p), &p, None, libc::MS_BIND | libc::MS_REC, None)?;
        if *writable {
            keep_rw.push(path.to_string_lossy().into_owned());
        }
    }

    // Step 5c: the redirect (git's object quarantine, crate::git::quarantine). All three opened
    // before any mount and checked to be directories; the original's bind is read-only in
    // step 6.
    if let Some(crate::plan::Redirect {
        over: objects,
        by: dir,
        original_at: store_mount,
    }) = &plan.redirect
    {
        let store = paths::open_nofollow(objects)?;
        let q = paths::open_nofollow(dir)?;
        let mount_point = paths::open_nofollow(store_mount)?;
        for (fd, path) in [(&store, objects), (&q, dir), (&mount_point, store_mount)] {
            if paths::kind(fd)? != paths::Kind::Dir {
                eprintln!("shofer-sandbox: {} is not a directory", path.display());
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
        }
        // Targets by descriptor too (the store's descriptor keeps naming the store itself
        // once the quarantine covers its path). The store on the mount point first, then the
        // quarantine with it (recursive: that bind is the only mount under the quarantine).
        let (q, store, mount_point) = (
            fd_path(q.as_raw_fd()),
            fd_path(store.as_raw_fd()),
            fd_path(mount_point.as_raw_fd()),
        );
        mount(Some(&store), &mount_point, None, libc::MS_BIND, None)?;
        mount(Some(&q), &store, None, libc::MS_BIND | libc::MS_REC, None)?;
        keep_rw.push(objects.to_string_lossy().into_owned());
    }

    // Step 6: everything else read-only: the whole tree at once, then the writable set back.
    if readonly_tree(&keep_rw)? {
        return Ok(());
    }
    // Before Linux 5.12: one remount per mount point.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut done: Vec<String> = Vec::new();
    for (point, flags) in parse_mountinfo(&mountinfo) {
        if keep_rw.contains(&point) || done.contains(&point) {
            continue;
        }
        done.push(point.clone());
        match mount(
            None,
            &point,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            None,
        ) {
            Ok(()) => {}
            // A mount point we cannot even look up is not reachable by the command either
            // (bubblewrap makes the same call).
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::ENOENT)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// mount_setattr(2) (Linux 5.12) on `path` with `flags` (`AT_RECURSIVE`…), setting or
/// clearing `MOUNT_ATTR_RDONLY`. Raw syscall: neither libc nor rustix wraps it in the
/// versions we use.
fn set_readonly(path: &str, flags: libc::c_uint, readonly: bool) -> io::Result<()> {
    let path = cstr(path)?;
    let attr = MountAttr {
        attr_set: if readonly { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: if readonly { 0 } else { MOUNT_ATTR_RDONLY },
        propagation: 0,
        userns_fd: 0,
    };
    // Safety: a NUL-terminated path and a mount_attr of the size we pass, alive for the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes every mount read-only with one `mount_setattr(AT_RECURSIVE)` on `/`, then the
/// mounts at `keep_rw` (the top one at each path, not their submounts) read-write again.
/// Returns false, changing nothing, on a kernel without mount_setattr (before 5.12).
///
/// Locked flags are no obstacle: setting read-only only adds a restriction, and clearing it
/// is refused (`EPERM`) only where the host made the mount read-only, which then stays so.
fn readonly_tree(keep_rw: &[String]) -> io::Result<bool> {
    match set_readonly("/", libc::AT_RECURSIVE as libc::c_uint, true) {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) => {
            return Ok(false)
        }
        Err(e) => {
            eprintln!("shofer-sandbox: mount_setattr /: {e}");
            return Err(e);
        }
    }
    for path in keep_rw {
        match set_readonly(path, libc::AT_SYMLINK_NOFOLLOW as libc::c_uint, false) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => {
                eprintln!("shofer-sandbox: mount_setattr {path}: {e}");
                return Err(e);
            }
        }
    }
    Ok(true)
}

/// (mount point, flags to keep) for each line of `/proc/self/mountinfo`, in order. Mount
/// points are unescaped (`\040` is a space); the kept flags are the per-mount options the
/// kernel may have locked.
fn parse_mountinfo(text: &str) -> Vec<(String, libc::c_ulong)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let point = fields.nth(4)?;
            let opts = fields.next()?;
            let mut flags = 0;
            for opt in opts.split(',') {
                flags |= match opt {
                    "nosuid" => libc::MS_NOSUID,
                    "nodev" => libc::MS_NODEV,
                    "noexec" => libc::MS_NOEXEC,
                    "noatime" => libc::MS_NOATIME,
                    "nodiratime" => libc::MS_NODIRATIME,
                    "relatime" => libc::MS_RELATIME,
                    "strictatime" => libc::MS_STRICTATIME,
                    _ => 0,
                };
            }
            Some((unescape(point), flags))
        })
        .collect()
}

/// Undoes the octal escapes of mountinfo (`\040` space, `\011` tab, `\012` newline, `\134`
/// backslash).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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

/// Process A (step 7 of the module docs): PID 1 of the new namespaces. Builds them, forks the
/// command (B), then reaps and forwards signals until B exits, and exits with its status (the
/// kernel then kills whatever is left in the namespace). With `keep_descendants` it waits for
/// every process of the namespace first, and writes B's raw wait status to `main_exit` (if
/// given) the moment B exits.
pub(crate) fn init(
    args: &ChildArgs<'_>,
    setup: &Setup<'_>,
    keep_descendants: bool,
    main_exit: Option<RawFd>,
    maps_ready: Option<(RawFd, RawFd)>,
) -> ! {
    let err = args.err;
    let fail = |stage: Stage, e: io::Error| -> ! { report_failure(err, stage, e) };
    // Safety: prctl with integer arguments. SIGKILL for PID 1 takes the namespace with it.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if let Some((read, write)) = maps_ready {
        let mut byte = 0u8;
        // Safety: closing our copy of the write end (so a supervisor that gives up means
        // EOF), then a one-byte read from the pipe it writes once the maps are in.
        let n = unsafe {
            libc::close(write);
            libc::read(read, (&mut byte as *mut u8).cast(), 1)
        };
        if n != 1 {
            fail(Stage::IdMaps, io::Error::from_raw_os_error(libc::EPERM));
        }
    }
    if let Err((step, e)) = build(setup) {
        let stage = match step {
            NsStep::IdMaps => Stage::IdMaps,
            NsStep::Mounts => Stage::Mounts,
        };
        fail(stage, e);
    }
    // The private /dev/shm and the new devpts are new inodes: Landlock needs rules for them.
    let extended = setup.landlock.as_ref().map(|layered| {
        let mut ruleset = match layered.ruleset.try_clone() {
            Ok(r) => r,
            Err(e) => fail(Stage::Landlock, e),
        };
        for dir in ["/dev/shm", "/dev/pts"] {
            let rule = paths::open_following(Path::new(dir)).map(|fd| {
                // Not RESOLVE_UNIX: only the worktree and --allow-unix paths get it.
                let rights = shofer_core::rights::fs_write_rights(layered.abi)
                    & !landlock::AccessFs::ResolveUnix;
                landlock::PathBeneath::new(fd, rights)
            });
            match rule.map(|r| landlock::RulesetCreatedAttr::add_rule(ruleset, r)) {
                Ok(Ok(r)) => ruleset = r,
                Ok(Err(e)) => fail(Stage::Landlock, io::Error::other(e.to_string())),
                Err(e) => fail(Stage::Landlock, e),
            }
        }
        ruleset
    });
    let mut steps = args.steps.clone();
    if extended.is_some() {
        steps.landlock = extended.as_ref();
    }
    let interactive = steps.interactive;
    let mut command_status = None;
    // The command starts as the supervisor's child does (no page tables copied); A is
    // suspended until it has exec'd.
    let child = ChildArgs {
        steps: &steps,
        supervisor: 1,
        old_mask: args.old_mask,
        err,
        gate_pipe: None,
        helper_fds: [None, None],
    };
    let command = match crate::spawn::spawn_child(&child) {
        Ok(pid) => pid,
        Err(_) => fail(Stage::Fork, io::Error::last_os_error()),
    };
    // Safety: closing our copy of the error pipe, so the supervisor sees EOF at exec.
    unsafe { libc::close(err) };
    // The unix-socket gate (crate::gate): the command installed it in the table we share
    // until its exec; we hold the listener for the supervisor as long as the run lasts. Our
    // copies of both ends of the helper's link go: the helper reads EOF when the supervisor
    // lets go, and the supervisor when the helper ends.
    if let Some(pipe) = args.gate_pipe {
        if let Err(e) = crate::gate::relay_listener(pipe) {
            fail(Stage::Seccomp, e);
        }
    }
    for fd in args.helper_fds.iter().flatten() {
        // Safety: closing our copies of the supervisor's descriptors.
        unsafe { libc::close(*fd) };
    }

    let mut handled = vec![libc::SIGCHLD, libc::SIGTERM];
    handled.extend(FORWARDED);
    let set = sigset(&handled);
    loop {
        // Safety: siginfo_t is plain data filled by sigwaitinfo.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // Safety: the set holds signals blocked in this process (inherited mask).
        let sig = unsafe { libc::sigwaitinfo(&set, &mut info) };
        if sig == libc::SIGCHLD {
            loop {
                let mut status = 0;
                // Safety: reaping any child of init, non-blocking.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if pid == command {
                    command_status = Some(status);
                    // The supervisor takes the command's raw status from here (to report it
                    // early with --keep-descendants, and to die by its signal).
                    if let Some(fd) = main_exit {
                        let bytes = status.to_ne_bytes();
                        // Safety: writing 4 bytes from a live buffer to our pipe; a pipe
                        // write this small is atomic.
                        unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
                    }
                }
                let none_left = pid < 0;
                if let Some(status) = command_status {
                    if !keep_descendants || none_left {
                        // Safety: exiting PID 1; the kernel kills the rest of the namespace.
                        unsafe { libc::_exit(crate::wait_status_to_exit(status)) };
                    }
                }
                if pid <= 0 {
                    break;
                }
            }
        } else if sig > 0
            && command_status.is_none()
            && !(interactive && info.si_code == libc::SI_KERNEL)
        {
            let target = if interactive { command } else { -command };
            // Safety: signalling our own, unreaped child (or its process group).
            unsafe { libc::kill(target, sig) };
        }
    }
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
    // Safety: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
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
    // Safety: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
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
            // Safety: leaving the probe child without running the parent's destructors.
            unsafe { libc::_exit(code(e)) };
        }
        let mounted = mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)
            .and_then(|()| mount(Some("tmpfs"), "/tmp", Some("tmpfs"), 0, None));
        let status = match mounted {
            Ok(()) => 0,
            Err(e) => 128 + code(e),
        };
        // Safety: as above.
        unsafe { libc::_exit(status) };
    }
    let mut status = 0;
    // Safety: reaping the child we just cloned.
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(()),
        (true, c) if c > 128 => Err(failure_reason("mount", c - 128)),
        (true, c) => Err(failure_reason("writing uid_map/gid_map", c)),
        _ => Err("the probe child was killed".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_points_are_unescaped_and_locked_flags_kept() {
        let text = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                    28 27 0:25 / /mnt/a\\040b ro,nosuid,nodev,relatime - tmpfs x ro\n";
        let parsed = parse_mountinfo(text);
        assert_eq!(parsed[0], ("/".to_string(), libc::MS_RELATIME));
        assert_eq!(parsed[1].0, "/mnt/a b");
        assert_eq!(
            parsed[1].1,
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RELATIME
        );
    }

    #[test]
    fn unescape_leaves_plain_text_and_short_escapes() {
        assert_eq!(unescape("/a\\134b\\011"), "/a\\b\t");
        assert_eq!(unescape("/x\\04"), "/x\\04");
    }
}
