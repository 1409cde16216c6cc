//! The unix-socket gate: on every backend and Landlock ABI, a sandboxed command reaches a
//! pathname unix socket only if **(a)** a process of this run bound it, **(b)** `--allow-unix`
//! names that socket, or **(c)** its listener bound it beneath the worktree or an
//! `--allow-unix` directory (the listener's own record, which a link or rename of the socket
//! file does not change; `LANDLOCK_ACCESS_FS_RESOLVE_UNIX`, ABI 9, grants by path and would let
//! a linked socket pass); anything else fails with `EACCES`. Abstract sockets: only those
//! bound by this run, in the network namespace of the socket that connects.
//!
//! How (see `docs/ARCHITECTURE.md`, "unix sockets"):
//! 1. [`filter`]: before exec, the command's first process installs a seccomp filter with
//!    `SECCOMP_FILTER_FLAG_NEW_LISTENER` that sends `connect`, `bind`, `sendmsg`,
//!    `sendmmsg` and `sendto` with an address to the supervisor, and fails `io_uring_setup`
//!    with `ENOSYS`. The listener cannot travel by `SCM_RIGHTS` (the `sendmsg` would itself
//!    be trapped, with nobody yet to answer it): the `CLONE_VFORK` child shares the
//!    supervisor's descriptor table until exec (`CLONE_FILES`, [`install_in_child`]); on the
//!    namespace backends it shares process A's, and A, which lives as long as the run, gives
//!    its number to the supervisor ([`relay_listener`]), which takes it with `pidfd_getfd`
//!    ([`take_listener`]). Just before, the same process forks the gate's [`helper`] into its
//!    Landlock domain.
//! 2. [`serve`]: a supervisor thread reads each call's arguments, resolves the path in the
//!    caller's view ([`resolve`]), pins the inode and decides; the [`helper`], inside the
//!    command's confinement, performs the call on the caller's socket against the pinned
//!    inode; its result is the syscall's result.
//! 3. [`diag`]: which sockets of the run are bound to what, from the kernel.
//!
//! 4. [`handler`]: other protections register the calls they need answered (git's lock-file
//!    protocol and freshen, `crate::git::gate`); the filter traps the union of their
//!    [`filter::Traps`], and [`serve`] hands each such call to the handler that registered it.
//!
//! Known limits: the peer of a connection made through the gate sees the [`helper`]'s PID in
//! `SO_PEERCRED` (the command's uid and gid); a caller that added a Landlock layer of its own
//! is checked against the run's domain, not its own; a unix stream connect to a listener whose backlog is full
//! holds up the run's other gated calls until it is accepted; x86_64 only, and only its native
//! entry point ([`crate::seccomp::NATIVE_ONLY`]).

mod answer;
pub mod diag;
pub mod filter;
pub(crate) mod handler;
pub mod helper;
pub mod inet;
pub mod netns;
pub(crate) mod notify;
pub mod resolve;
pub mod serve;
pub mod wire;

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

pub use serve::Refused;

/// Whether the gate can run for a command started by this process: x86_64, seccomp user
/// notification (Linux 5.0), `pidfd_getfd` (5.6), and no outer filter already owning a
/// listener (a shofer-sandbox inside a shofer-sandbox: the kernel allows one per filter chain,
/// `EBUSY`). The last check forks a short-lived process only when this process is already
/// under a seccomp filter.
///
/// # Errors
/// Why not, in one clause.
pub fn available() -> Result<(), String> {
    if !cfg!(target_arch = "x86_64") {
        return Err("the unix socket gate is built for x86_64 only".into());
    }
    if !notify::getfd_known() {
        return Err("pidfd_getfd is missing (Linux 5.6)".into());
    }
    let filters = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Seccomp_filters:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
        .unwrap_or(0);
    if filters == 0 {
        if !notify::notifications_known() {
            return Err("no seccomp user notification (Linux 5.0)".into());
        }
        return Ok(());
    }
    // Try it in a child: an outer listener makes the install fail with EBUSY.
    // Raw syscall: rustix has no fork (only in its unstable runtime API).
    // Safety: the child only makes raw syscalls and _exits; this process is single-threaded
    // at this point (before the supervisor starts any thread).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed while probing the seccomp listener".into());
    }
    if pid == 0 {
        let _ = rustix::thread::set_no_new_privs(true);
        let code = match filter::install(filter::Traps::SOCKETS) {
            Ok(_) => 0,
            Err(e) => e.raw_os_error().unwrap_or(1).clamp(1, 255),
        };
        // Raw syscall: rustix's `_exit` (`exit_group`) is only in its unstable runtime API.
        // Safety: `_exit` ends the forked child without running anything of its parent's.
        unsafe { libc::_exit(code) }
    }
    let child = shofer_sys::process::pid(pid);
    let status = rustix::process::waitpid(child, rustix::process::WaitOptions::empty())
        .ok()
        .flatten()
        .map_or(0, |(_, st)| st.as_raw());
    match libc::WEXITSTATUS(status) {
        0 => Ok(()),
        libc::EBUSY => Err("an outer seccomp filter already owns the listener (a sandbox inside a sandbox: the outer gate still applies)".into()),
        e => Err(format!(
            "installing the seccomp listener failed ({})",
            shofer_sys::errno::name_or_number(e)
        )),
    }
}

/// `--allow-unix` paths, opened at start (without following a final symlink, as for
/// `--allow-write`), with their identities.
pub struct AllowUnix {
    /// The paths as given, canonical.
    pub paths: Vec<PathBuf>,
    /// Open `O_PATH` descriptors, for the Landlock ABI 9 rule.
    pub fds: Vec<OwnedFd>,
    /// (device, inode, is a directory) of each.
    pub ids: Vec<(resolve::Ident, bool)>,
}

impl AllowUnix {
    /// No `--allow-unix` path (tests).
    #[cfg(test)]
    pub fn none() -> AllowUnix {
        AllowUnix {
            paths: Vec::new(),
            fds: Vec::new(),
            ids: Vec::new(),
        }
    }

    /// Opens every `--allow-unix` path.
    ///
    /// # Errors
    /// A usage error naming the path when it does not exist or cannot be opened.
    pub fn open(paths: &[PathBuf]) -> Result<AllowUnix, crate::error::SetupError> {
        let mut out = AllowUnix {
            paths: Vec::new(),
            fds: Vec::new(),
            ids: Vec::new(),
        };
        for p in paths {
            let bad = |e: std::io::Error| {
                crate::error::SetupError::Usage(format!(
                    "--allow-unix {}: {} (expected an existing socket or directory)",
                    p.display(),
                    shofer_sys::errno::strerror(e.raw_os_error().unwrap_or(libc::EINVAL))
                ))
            };
            let canon = std::fs::canonicalize(p).map_err(bad)?;
            let fd = crate::paths::open_following(&canon).map_err(bad)?;
            let st =
                resolve::stat_fd(&fd).map_err(|e| bad(std::io::Error::from_raw_os_error(e)))?;
            let kind = st.st_mode & libc::S_IFMT;
            if kind != libc::S_IFDIR && kind != libc::S_IFSOCK {
                return Err(crate::error::SetupError::Usage(format!(
                    "--allow-unix {}: not a socket or a directory",
                    p.display()
                )));
            }
            out.ids
                .push(((st.st_dev, st.st_ino), kind == libc::S_IFDIR));
            out.paths.push(canon);
            out.fds.push(fd);
        }
        Ok(out)
    }
}

/// What the supervisor needs to run the gate for one command.
pub struct Setup {
    /// What is reachable besides the run's own sockets.
    pub rules: serve::Rules,
    /// The registered handlers of the other trapped calls.
    pub handlers: Vec<Box<dyn handler::Handler>>,
    /// Which calls the filter traps.
    pub traps: filter::Traps,
    /// Filled with refused paths while the run lasts.
    pub refused: Refused,
    /// The supervisor's end of the socket pair to the gate's [`helper`], when the socket
    /// calls are trapped.
    pub helper: Option<OwnedFd>,
    /// The helper's end, until the command's first process has started it.
    pub helper_end: Option<OwnedFd>,
}

impl Setup {
    /// The gate's rules for a run: with `sockets`, the unix-socket calls trapped and the
    /// worktree and `allow` reachable, and with `listens` too `listen` on inet sockets refused;
    /// `handlers` answer the calls they register. The filter traps exactly the union of all.
    pub fn new(
        worktree: &OwnedFd,
        allow: &AllowUnix,
        drop_caps: bool,
        (sockets, listens): (bool, bool),
        handlers: Vec<Box<dyn handler::Handler>>,
    ) -> std::io::Result<Setup> {
        let own = filter::Traps {
            sockets,
            listens,
            ..filter::Traps::NONE
        };
        let traps = handlers.iter().fold(own, |t, h| t.union(h.traps()));
        use std::os::unix::ffi::OsStrExt;
        let mut dirs =
            vec![resolve::ident(worktree.as_raw_fd()).map_err(std::io::Error::from_raw_os_error)?];
        let worktree_path = std::fs::read_link(format!("/proc/self/fd/{}", worktree.as_raw_fd()))?;
        let mut dir_paths = vec![worktree_path.as_os_str().as_bytes().to_vec()];
        let mut files = Vec::new();
        for ((id, dir), path) in allow.ids.iter().zip(&allow.paths) {
            if *dir {
                dirs.push(*id);
                dir_paths.push(path.as_os_str().as_bytes().to_vec());
            } else {
                files.push(*id);
            }
        }
        let (helper, helper_end) = if traps.sockets {
            let (ours, theirs) = helper::pair(rustix::net::SocketType::SEQPACKET)?;
            (Some(ours), Some(theirs))
        } else {
            (None, None)
        };
        Ok(Setup {
            rules: serve::Rules {
                dirs,
                dir_paths,
                files,
                drop_caps,
                inet: None,
            },
            handlers,
            traps,
            refused: Refused::default(),
            helper,
            helper_end,
        })
    }

    /// `--net proxy` on Landlock alone: inet calls admitted by `inet` only, and `listen`
    /// trapped (an unbound inet socket would get a port on every interface).
    #[must_use]
    pub fn with_inet(mut self, inet: inet::Inet) -> Setup {
        self.rules.inet = Some(inet);
        self.traps.listens = true;
        self
    }

    /// Starts serving `listener`; `extra_diag` is a `NETLINK_SOCK_DIAG` socket in the
    /// command's network namespace when it has its own.
    ///
    /// # Errors
    /// Thread creation failure (nobody then answers the command's gated calls: the caller
    /// stops the run).
    pub fn start(self, listener: OwnedFd, extra_diag: Option<OwnedFd>) -> std::io::Result<()> {
        let mut diags: Vec<OwnedFd> = diag::open().into_iter().collect();
        diags.extend(extra_diag);
        serve::spawn(
            listener,
            self.helper,
            self.rules,
            self.handlers,
            diags,
            self.refused,
        )
    }
}

/// The listener the `CLONE_VM | CLONE_FILES` child installed: it shares our memory and
/// descriptor table until exec, so the number it stores here is valid for us.
static SHARED_LISTENER: AtomicI32 = AtomicI32::new(-1);

/// Child side, in the command's first process: installs the gate filter and leaves the
/// listener in the descriptor table it shares (`CLONE_FILES`, and `CLONE_VM` for this number)
/// with the supervisor or with the namespaces' process A.
///
/// # Errors
/// The `seccomp(2)` error.
pub(crate) fn install_in_child(traps: filter::Traps) -> std::io::Result<()> {
    let listener = filter::install(traps)?.into_raw_fd();
    SHARED_LISTENER.store(listener, Ordering::SeqCst);
    Ok(())
}

/// Process A of the namespace backends, once the command has exec'd: writes the number of
/// the listener the command's first process left in their shared table, and a sock_diag
/// socket of this network namespace, to `pipe` for the supervisor. Nothing when the command
/// failed before installing it (the supervisor reads EOF).
///
/// # Errors
/// The `write(2)` error.
pub(crate) fn relay_listener(pipe: RawFd) -> std::io::Result<()> {
    let listener = SHARED_LISTENER.swap(-1, Ordering::SeqCst);
    if listener < 0 {
        return Ok(());
    }
    let diag = diag::open().map_or(-1, IntoRawFd::into_raw_fd);
    let mut rec = [0u8; 8];
    rec[..4].copy_from_slice(&listener.to_ne_bytes());
    rec[4..].copy_from_slice(&diag.to_ne_bytes());
    // Safety: the caller holds `pipe` open across this call; the borrow ends with it.
    let pipe = unsafe { std::os::fd::BorrowedFd::borrow_raw(pipe) };
    // One write, atomic below PIPE_BUF.
    if rustix::io::write(pipe, &rec)? != rec.len() {
        return Err(std::io::ErrorKind::WriteZero.into());
    }
    Ok(())
}

/// Supervisor side, once the child has exec'd: the listener (and the namespace's sock_diag
/// socket) from the shared table (`pipe` `None`) or from process `child` by `pidfd_getfd`.
/// `None` when the child failed before installing it (its error comes on the exec-error
/// pipe) — then nothing runs under the filter.
pub(crate) fn take_listener(
    child: libc::pid_t,
    pipe: Option<OwnedFd>,
) -> Option<(OwnedFd, Option<OwnedFd>)> {
    let Some(pipe) = pipe else {
        let fd = SHARED_LISTENER.swap(-1, Ordering::SeqCst);
        // Safety: the child put this descriptor in our shared table for us; we own it now.
        return (fd >= 0).then(|| (unsafe { OwnedFd::from_raw_fd(fd) }, None));
    };
    let mut rec = [0u8; 8];
    // EOF (0) means the child failed first.
    if rustix::io::read(&pipe, &mut rec).ok()? != rec.len() {
        return None;
    }
    let pidfd = shofer_sys::pidfd::open(child).ok().flatten()?;
    let number = |b: &[u8]| i32::from_ne_bytes(b.try_into().expect("4 bytes"));
    let listener = notify::getfd(&pidfd, number(&rec[..4])).ok()?;
    let d = number(&rec[4..]);
    let diag = if d >= 0 {
        notify::getfd(&pidfd, d).ok()
    } else {
        None
    };
    Some((listener, diag))
}
