//! The gate's supervisor side: one thread answering every trapped syscall of the run.
//!
//! For `connect`, `sendto` with an address, `sendmsg` and `sendmmsg` the thread reads the
//! caller's arguments (`process_vm_readv`), takes its socket (`pidfd_getfd`), checks with
//! `SECCOMP_IOCTL_NOTIF_ID_VALID` that the caller is still the one waiting, and decides; the
//! call is then performed on the caller's socket by the gate's [`helper`], a process inside
//! the command's own confinement (its Landlock domain, namespaces and credentials), whose
//! result answers the call. The gate itself never performs a socket call: the kernel checks
//! the helper's call as it would have checked the command's, and the gate only narrows that.
//! A pathname unix address is resolved in the caller's view and pinned ([`super::resolve`]);
//! the call goes to `/proc/self/fd/<pin>`, so what was checked is what is reached. No socket
//! call is ever answered with `SECCOMP_USER_NOTIF_FLAG_CONTINUE` after reading the caller's
//! memory.
//!
//! What is reachable is decided on the object the kernel would reach, never on a name the
//! command can re-point: a pathname socket when it is an `--allow-unix` socket file (its
//! inode), when a socket of this run is bound to it, or when it lies beneath the worktree or
//! an `--allow-unix` directory *and* its listener bound it there (the kernel's record of the
//! listener's own `bind`, which a link or rename of the socket file into the directory does
//! not change); an abstract name when a socket of this run bound it in the network namespace
//! of the socket that connects.
//!
//! Every other trapped call goes to the handler that registered it ([`super::handler`]); a
//! handler continues what it does not recognise, which is safe because continuing grants
//! nothing — the kernel runs it under the caller's own confinement, whatever the caller
//! changed meanwhile.
//!
//! `bind` is the exception, answered with CONTINUE without reading anything: the kernel binds
//! under the caller's own confinement (Landlock, read-only mounts); the gate only notes the
//! socket (its socket inode) so that a later connect to the file it gets bound to is allowed
//! (rule (a), "created by this run"), which [`super::diag`] confirms with the kernel. With
//! `--net proxy` on Landlock alone an inet address is decided by [`super::inet`] instead: a
//! connect or send only to the proxy or a loopback listener of the run, a bind (made by the
//! gate on its copy, never continued) only to loopback, a `listen` only on a socket bound there.
//!
//! The helper finishes calls that may block (a blocking socket's TCP connect, a send into a
//! full buffer) on a thread of its own, so one slow peer does not stall the whole run; a
//! caller without effective capabilities has its call made without any.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use rustix::fs::Stat;

use super::answer::answer;
use super::diag::{self, Lookup};
use super::filter::{NR_BIND, NR_CONNECT, NR_LISTEN, NR_SENDMMSG, NR_SENDMSG, NR_SENDTO};
use super::handler::{Gatekeeper, Handler, Installer, Performed, Reply};
use super::helper::{self, Link, Msg, Pending, Request};
use super::notify::{self, AddFd, Notif};
use super::resolve::{self, Ident};
use super::wire::{self, MAX_PAYLOAD};

/// `sizeof(struct sockaddr_storage)`: the kernel refuses longer addresses with `EINVAL`.
const MAX_ADDR: u32 = 128;
/// `UIO_MAXIOV`.
const MAX_IOV: u64 = 1024;
/// Most socket files of this run held open at once (beyond, the cache starts over).
const MAX_OWN_FILES: usize = 4096;
/// Most ancillary data (the kernel's default `optmem_max` is 20 KiB).
const MAX_CONTROL: u64 = 64 << 10;

/// What the gate lets through besides the run's own sockets.
pub struct Rules {
    /// Directories (device, inode) beneath which any socket may be reached: the worktree and
    /// every `--allow-unix` directory.
    pub dirs: Vec<Ident>,
    /// The same directories' canonical paths, in the same order: a listener's own record of
    /// where it bound must lie beneath one of them.
    pub dir_paths: Vec<Vec<u8>>,
    /// Socket files given to `--allow-unix` itself.
    pub files: Vec<Ident>,
    /// The command runs without capabilities: the gate's thread drops its own. When false
    /// (bubblewrap, which needs its privileges for its own set-up; a command switched to the
    /// worktree's owner; `--keep-caps`), calls of a caller without effective capabilities are
    /// performed on a thread that takes the caller's uid, gid and groups and no capabilities.
    pub drop_caps: bool,
    /// `--net proxy` on Landlock alone: the inet addresses admitted ([`super::inet`]).
    pub inet: Option<super::inet::Inet>,
}

/// Paths the gate refused, in order, each once.
pub type Refused = Arc<Mutex<Vec<String>>>;

/// A socket call for the helper, with the caller's send flags.
#[derive(Clone, Copy)]
enum Call {
    Connect,
    Send(i32),
    SendMany(i32),
}

/// What a socket is bound to: its socket file (kernel `dev_t`, inode) for a pathname socket,
/// its address bytes, and which of the gate's sock_diag sockets (network namespaces) found it.
type Binding = (Option<(u32, u32)>, Option<Vec<u8>>, usize);

/// A socket bound by this run, as far as the gate knows it.
struct Own {
    /// Socket inodes noted at `bind`, not yet seen bound.
    pending: Vec<u32>,
    /// Bound sockets: socket inode → what it is bound to.
    bound: HashMap<u32, Binding>,
}

struct Gate {
    listener: Arc<OwnedFd>,
    /// The process that performs the socket calls the gate lets through.
    helper: Option<Link>,
    rules: Rules,
    /// The other protections' handlers ([`super::handler`]).
    handlers: Vec<Box<dyn Handler>>,
    diag: Vec<OwnedFd>,
    pidfds: HashMap<libc::pid_t, OwnedFd>,
    own: Own,
    /// Socket files known to be reachable (bound by this run, or bound by their listener
    /// beneath a granted directory), held open: (device, inode) → `O_PATH`.
    own_files: HashMap<Ident, OwnedFd>,
    refused: Refused,
    shown: HashSet<String>,
    /// Whether the kernel answers sock_diag(7) for unix sockets (asked at the first refusal).
    diag_works: Option<bool>,
    /// How a created file reaches the caller (asked of the listener at start).
    addfd: AddFd,
    /// Network namespaces (inode of `/proc/PID/ns/net`) a sock_diag socket was sought in.
    netns_tried: HashSet<u64>,
    /// Inodes of the inet sockets that listened through the gate (`--net proxy` on Landlock
    /// alone): the run's own servers.
    own_inet: HashSet<u64>,
    /// `--net proxy` on Landlock alone: the inodes of the inet sockets the gate bound to
    /// loopback; only these may listen (a socket's local address then cannot change).
    bound_inet: HashSet<u64>,
}

/// Starts the gate thread on `listener`, with `helper` (the supervisor's end of the socket
/// pair of the gate's [`helper`] process) when the socket calls are trapped. `diag` are
/// `NETLINK_SOCK_DIAG` sockets, one per network namespace the run's sockets may live in;
/// `refused` is filled with refused paths while the run lasts.
///
/// # Errors
/// Thread creation failure.
pub fn spawn(
    listener: OwnedFd,
    helper: Option<OwnedFd>,
    rules: Rules,
    handlers: Vec<Box<dyn Handler>>,
    diag: Vec<OwnedFd>,
    refused: Refused,
) -> std::io::Result<()> {
    let listener = Arc::new(listener);
    let helper = match helper {
        Some(sock) => Some(Link::start(sock, listener.clone())?),
        None => None,
    };
    let mut gate = Gate {
        listener,
        helper,
        rules,
        handlers,
        diag,
        pidfds: HashMap::new(),
        own: Own {
            pending: Vec::new(),
            bound: HashMap::new(),
        },
        own_files: HashMap::new(),
        refused: refused.clone(),
        shown: HashSet::new(),
        diag_works: None,
        addfd: AddFd::Missing,
        netns_tried: HashSet::new(),
        own_inet: HashSet::new(),
        bound_inet: HashSet::new(),
    };
    std::thread::Builder::new()
        .name("shofer-gate".into())
        .stack_size(256 * 1024)
        .spawn(move || gate.serve())?;
    Ok(())
}

/// Who a caller without capabilities is, to act as it: effective uid and gid and the
/// supplementary groups (`/proc/PID/status`, in the supervisor's user namespace).
#[derive(Clone)]
struct Caller {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

/// The identity of thread `pid` when it runs without effective capabilities; `None` when it
/// holds some (or cannot be read: then the call is refused).
fn unprivileged_caller(pid: libc::pid_t) -> Option<Caller> {
    let status = shofer_sys::proc::Status::read(pid)?;
    if !status.first("CapEff")?.chars().all(|c| c == '0') {
        return None;
    }
    Some(Caller {
        uid: status.field("Uid")?.get(1)?.parse().ok()?,
        gid: status.field("Gid")?.get(1)?.parse().ok()?,
        groups: status
            .field("Groups")?
            .iter()
            .filter_map(|g| g.parse().ok())
            .collect(),
    })
}

/// Makes the calling thread `caller`: groups, gid, uid, then no capabilities. rustix's
/// `thread` calls: the kernel changes credentials per thread (the C library's wrappers would
/// change every thread of the supervisor).
fn become_caller(caller: &Caller) -> bool {
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid, Gid, Uid};
    let ids = (rustix::process::geteuid(), rustix::process::getegid());
    if (ids.0.as_raw(), ids.1.as_raw()) == (caller.uid, caller.gid) {
        return helper::drop_thread_caps(); // the same user: only the capabilities differ
    }
    let groups: Vec<Gid> = caller
        .groups
        .iter()
        .map(|&g| Gid::from_raw_unchecked(g))
        .collect();
    let (uid, gid) = (
        Uid::from_raw_unchecked(caller.uid),
        Gid::from_raw_unchecked(caller.gid),
    );
    let ok = set_thread_groups(&groups).is_ok()
        && set_thread_res_gid(gid, gid, gid).is_ok()
        && set_thread_res_uid(uid, uid, uid).is_ok();
    ok && helper::drop_thread_caps()
}

/// A pidfd for the calling *thread* `tid` (notifications name threads): `PIDFD_THREAD`
/// (Linux 6.9), else the thread group's leader, whose descriptor table the threads share.
fn thread_pidfd(tid: libc::pid_t) -> Result<OwnedFd, i32> {
    use rustix::process::{pidfd_open, PidfdFlags};
    // rustix names no PIDFD_THREAD (it is O_EXCL).
    const PIDFD_THREAD: libc::c_int = libc::O_EXCL;
    let open = |pid: libc::pid_t, flags: libc::c_int| {
        // pidfd_open(2) refuses a pid that is not positive with EINVAL.
        let pid = shofer_sys::process::pid(pid).ok_or(libc::EINVAL)?;
        pidfd_open(pid, PidfdFlags::from_bits_retain(flags as _)).map_err(|e| e.raw_os_error())
    };
    // A thread that is not the leader: EINVAL before Linux 6.9, ENOENT after.
    match open(tid, 0) {
        Err(libc::EINVAL | libc::ENOENT) => {}
        other => return other,
    }
    match open(tid, PIDFD_THREAD) {
        Err(libc::EINVAL) => {}
        other => return other,
    }
    open(shofer_sys::proc::Status::tgid(tid).ok_or(libc::ESRCH)?, 0)
}

/// Where a call goes, decided.
enum Target {
    /// No address.
    None,
    /// An address the kernel may use as it is (not a pathname unix one).
    Raw(Vec<u8>),
    /// A pinned pathname socket, kept open until the call is done.
    Pinned { pin: OwnedFd },
}

/// A prepared message: payload, ancillary data with our descriptor numbers, and the
/// descriptors themselves (kept open until sent).
struct Message {
    data: Vec<u8>,
    control: Vec<u8>,
    fds: Vec<OwnedFd>,
    target: Target,
}

impl Message {
    /// The message as the helper takes it.
    fn into_msg(self) -> Msg {
        let (addr, pin) = match self.target {
            Target::None => (Vec::new(), None),
            Target::Raw(a) => (a, None),
            Target::Pinned { pin, .. } => (Vec::new(), Some(pin)),
        };
        Msg {
            addr,
            pin,
            control: self.control,
            fds: self.fds,
            data: self.data,
        }
    }
}

impl Gate {
    fn serve(&mut self) {
        // Per-thread state: nothing the gate does may change the supervisor's (or be done
        // with more privilege than the command has).
        // Without dropping we would act with more than the command has: stop answering (the
        // listener closes with the process; every gated call of the command then blocks until
        // the run is stopped).
        if self.rules.drop_caps && !helper::drop_thread_caps() {
            return;
        }
        let fd = self.listener.as_raw_fd();
        notify::sync_wake_up(fd);
        if !self.handlers.is_empty() {
            self.addfd = notify::addfd_support(fd);
            let installer = self.installer();
            for h in &mut self.handlers {
                h.started(&installer);
            }
        }
        loop {
            let n = match notify::recv(fd) {
                Ok(n) => n,
                // ENOENT: the caller died before we read its call — or no process uses the
                // filter any more, which RECV reports at once, again and again: wait on the
                // listener and end when it says so (POLLHUP), instead of spinning.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    let listener = self.listener.as_fd();
                    match shofer_sys::fd::wait_readable(listener) {
                        Ok(true) => continue,
                        _ => return,
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(_) => return,
            };
            match self.handle(&n) {
                Reply::Now(r) => answer(fd, n.id, r),
                Reply::Continue => notify::continue_(fd, n.id),
                Reply::Later => {}
            }
        }
    }

    fn valid(&self, n: &Notif) -> bool {
        notify::still_valid(self.listener.as_raw_fd(), n.id)
    }

    fn handle(&mut self, n: &Notif) -> Reply {
        let r = match n.nr {
            NR_CONNECT => self.connect(n),
            NR_SENDTO => self.sendto(n),
            NR_SENDMSG => self.sendmsg(n),
            NR_SENDMMSG => self.sendmmsg(n),
            NR_BIND => return self.bind(n),
            NR_LISTEN => return self.listen(n),
            nr => return self.by_handler(nr, n),
        };
        match r {
            Ok(reply) => reply,
            Err(e) => Reply::Now(Err(e)),
        }
    }

    /// The caller's descriptor `fd` as ours.
    fn socket_of(&mut self, pid: libc::pid_t, fd: u64) -> Result<OwnedFd, i32> {
        let fd = fd as i32;
        for _ in 0..2 {
            if !self.pidfds.contains_key(&pid) {
                if self.pidfds.len() > 4096 {
                    self.pidfds.clear();
                }
                let p = thread_pidfd(pid)?;
                self.pidfds.insert(pid, p);
            }
            match notify::getfd(&self.pidfds[&pid], fd) {
                Ok(s) => return Ok(s),
                // A cached pidfd of a process that exited (its PID now reused): reopen.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    self.pidfds.remove(&pid);
                }
                Err(e) => return Err(e.raw_os_error().unwrap_or(libc::EBADF)),
            }
        }
        Err(libc::ESRCH)
    }

    fn read_addr(pid: libc::pid_t, ptr: u64, len: u64) -> Result<Vec<u8>, i32> {
        let len = len as u32;
        if len as i32 <= 0 || ptr == 0 {
            return Ok(Vec::new());
        }
        if len > MAX_ADDR {
            return Err(libc::EINVAL);
        }
        notify::read_mem(pid, ptr, len as usize)
    }

    fn refuse(&mut self, verb: &str, shown: String, why: &str) -> i32 {
        if self.shown.insert(shown.clone()) {
            let blind = !*self
                .diag_works
                .get_or_insert_with(|| diag_answers(&self.diag));
            let blind = if blind {
                "; the kernel does not answer sock_diag for unix sockets (module unix_diag not \
                 loaded?), so sockets this sandbox created are refused too"
            } else {
                ""
            };
            // The path is the command's bytes: escaped, so it cannot end the line or carry a
            // terminal control into the sandbox's own voice.
            eprintln!(
                "shofer-sandbox: {verb} to {} refused: {why}{blind}",
                shown.escape_debug()
            );
            if let Ok(mut r) = self.refused.lock() {
                r.push(shown);
            }
        }
        libc::EACCES
    }

    /// Decides where a call with address `addr` on socket `sock` may go.
    fn target(
        &mut self,
        pid: libc::pid_t,
        sock: BorrowedFd<'_>,
        addr: Vec<u8>,
        verb: &str,
    ) -> Result<Target, i32> {
        if addr.is_empty() {
            return Ok(Target::None);
        }
        if self.rules.inet.is_some() {
            if let Some(a) = super::inet::parse(&addr)? {
                return self.inet_target(a, addr);
            }
        }
        let family = u16::from_ne_bytes([addr[0], *addr.get(1).unwrap_or(&0)]);
        if !helper::is_unix(sock) || family != libc::AF_UNIX as u16 || addr.len() <= 2 {
            return Ok(Target::Raw(addr));
        }
        let path = &addr[2..];
        if path[0] == 0 {
            // The run's own only in the network namespace it was bound in: the same name
            // bound by the command in a namespace of its own does not make a socket of the
            // supervisor's namespace reach the host's service of that name.
            let name = path.to_vec();
            let netns = resolve::stat_fd(sock)
                .ok()
                .and_then(|st| self.lookup(st.st_ino as u32).1);
            if netns.is_some() && self.is_own(|_, n, ns| n == Some(&name[..]) && Some(ns) == netns)
            {
                return Ok(Target::Raw(addr));
            }
            let shown = format!("@{}", resolve::show(&name[1..]));
            return Err(self.refuse(
                verb,
                shown,
                "an abstract socket not created in this sandbox (in this network namespace)",
            ));
        }
        let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
        let path = &path[..end];
        let r = resolve::resolve(pid, path, true)?;
        let Some(pin) = r.target else {
            return Err(libc::ENOENT);
        };
        let st = resolve::stat_fd(&pin)?;
        let id = (st.st_dev, st.st_ino);
        let socket = st.st_mode & libc::S_IFMT == libc::S_IFSOCK;
        // Cheapest first: an allowed socket file, a socket file seen reachable before (its
        // inode held open, so the number cannot have been reused), the kernel's word that a
        // socket of this run is bound to it, and beneath an allowed directory the kernel's
        // word that its listener bound it there. Anything else beneath an allowed directory
        // that is not a socket reaches nothing (the kernel answers ECONNREFUSED).
        let dirs = std::mem::take(&mut self.rules.dirs);
        let beneath = resolve::beneath(&r.parent, &dirs, Some(r.root));
        self.rules.dirs = dirs;
        let allowed = self.rules.files.contains(&id)
            || (socket && self.own_files.contains_key(&id))
            || (socket && self.own_file(&pin, &st))
            || (!socket && beneath)
            || (socket && beneath && self.bound_beneath_a_grant(&pin, &st));
        if !allowed {
            let why = if socket && beneath {
                "its listener did not bind it here (a socket linked or moved into an allowed \
                 directory; allow the socket itself with --allow-unix)"
            } else {
                "a host socket (allow with --allow-unix)"
            };
            return Err(self.refuse(verb, resolve::show(path), why));
        }
        Ok(Target::Pinned { pin })
    }

    /// `--net proxy` on Landlock alone: the proxy, or a listener of this run on loopback;
    /// anything else refused and reported in `net_refused` ([`super::inet`]).
    fn inet_target(&mut self, a: std::net::SocketAddr, addr: Vec<u8>) -> Result<Target, i32> {
        let Some(inet) = &self.rules.inet else {
            return Ok(Target::Raw(addr));
        };
        let at = super::inet::canonical(a);
        if super::inet::reachable(at)
            && (at == inet.proxy || super::inet::listening(&self.own_inet, at))
        {
            return Ok(Target::Raw(addr));
        }
        crate::egress::serve::record(
            &inet.refused,
            crate::egress::decide::Refusal {
                destination: at.to_string(),
                reason: "--net proxy: the command reaches only the proxy (http_proxy) and servers this run started on loopback".into(),
            },
        );
        Err(libc::EACCES)
    }

    /// Remembers the socket file `pin` (with `st`) as reachable, held open (a bounded number
    /// of them).
    fn remember(&mut self, pin: &OwnedFd, st: &Stat) {
        if self.own_files.len() >= MAX_OWN_FILES {
            self.own_files.clear();
        }
        if let Ok(held) = pin.try_clone() {
            self.own_files.insert((st.st_dev, st.st_ino), held);
        }
    }

    /// Whether the socket file `pin` (with `st`) is bound by a socket of this run; if so it
    /// is remembered.
    fn own_file(&mut self, pin: &OwnedFd, st: &Stat) -> bool {
        let vfs = (diag::kernel_dev(st.st_dev), st.st_ino as u32);
        if !self.is_own(|v, _, _| v == Some(vfs)) {
            return false;
        }
        self.remember(pin, st);
        true
    }

    /// Whether the socket bound to the socket file `pin` (with `st`) recorded, when its
    /// listener bound it, a path beneath the worktree or an `--allow-unix` directory: a socket
    /// linked or renamed into such a directory keeps its listener's own record of where it
    /// was bound. If so it is remembered.
    fn bound_beneath_a_grant(&mut self, pin: &OwnedFd, st: &Stat) -> bool {
        let vfs = (diag::kernel_dev(st.st_dev), st.st_ino as u32);
        let bound = self.diag.iter().find_map(|d| diag::bound_name_of(d, vfs));
        let Some(mut name) = bound else {
            return false;
        };
        while name.last() == Some(&0) {
            name.pop();
        }
        let granted = self.rules.dir_paths.iter().any(|dir| {
            name.strip_prefix(&dir[..])
                .is_some_and(|rest| rest.first() == Some(&b'/') || dir.ends_with(b"/"))
        });
        if granted {
            self.remember(pin, st);
        }
        granted
    }

    /// Whether a socket of this run matches `want(vfs, name, netns)` (`netns`: which of our
    /// sock_diag sockets sees it): known bound sockets first (confirmed alive), then sockets
    /// noted at bind that may have been bound since.
    fn is_own(&mut self, want: impl Fn(Option<(u32, u32)>, Option<&[u8]>, usize) -> bool) -> bool {
        let hits: Vec<u32> = self
            .own
            .bound
            .iter()
            .filter(|(_, (v, n, ns))| want(*v, n.as_deref(), *ns))
            .map(|(i, _)| *i)
            .collect();
        for ino in hits {
            match self.lookup(ino) {
                (Lookup::Found { vfs, name }, Some(ns)) if want(vfs, name.as_deref(), ns) => {
                    return true
                }
                (Lookup::Gone, _) => {
                    self.own.bound.remove(&ino);
                }
                _ => {}
            }
        }
        let pending = std::mem::take(&mut self.own.pending);
        let mut found = false;
        for ino in pending {
            match self.lookup(ino) {
                (Lookup::Gone, _) => {}
                (
                    Lookup::Found {
                        vfs,
                        name: Some(name),
                    },
                    Some(ns),
                ) => {
                    found |= want(vfs, Some(&name), ns);
                    self.own.bound.insert(ino, (vfs, Some(name), ns));
                }
                _ => self.own.pending.push(ino),
            }
        }
        found
    }

    /// What the kernel says of the unix socket with inode `ino`, and which of our sock_diag
    /// sockets (network namespaces) it lives in.
    fn lookup(&self, ino: u32) -> (Lookup, Option<usize>) {
        let mut last = Lookup::Gone;
        for (i, d) in self.diag.iter().enumerate() {
            match diag::lookup(d, ino) {
                Lookup::Gone => {}
                found @ Lookup::Found { .. } => return (found, Some(i)),
                Lookup::Unknown => last = Lookup::Unknown,
            }
        }
        (last, None)
    }

    /// Whether calls of `pid` must be made as it, without the capabilities this thread still
    /// has (the caller's identity), or may be made here (`None`).
    fn needs_unprivileged(&self, pid: libc::pid_t) -> Option<Option<Caller>> {
        if self.rules.drop_caps {
            return None;
        }
        // Unreadable: refused (Some(None)) rather than made with our privileges.
        match unprivileged_caller(pid) {
            Some(c) => Some(Some(c)),
            None if std::fs::metadata(format!("/proc/{pid}")).is_ok() => None,
            None => Some(None),
        }
    }

    /// Runs `op` on a helper thread (without capabilities, as the caller, when `as_caller`
    /// says so) which answers the notification with its result; an `op` returning `None` has
    /// answered it itself.
    fn later_answered(
        &self,
        id: u64,
        as_caller: Option<Option<Caller>>,
        op: impl FnOnce() -> Option<Result<i64, i32>> + Send + 'static,
    ) -> Reply {
        let listener = self.listener.clone();
        let spawned = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let r = match as_caller {
                    None => op(),
                    Some(Some(caller)) if become_caller(&caller) => op(),
                    Some(_) => Some(Err(libc::EPERM)),
                };
                if let Some(r) = r {
                    answer(listener.as_raw_fd(), id, r)
                }
            });
        match spawned {
            Ok(_) => Reply::Later,
            Err(_) => Reply::Now(Err(libc::EAGAIN)),
        }
    }

    /// A trapped call of a registered handler ([`super::handler`]); `ENOSYS` for a call no
    /// handler registered (the filter traps nothing else).
    fn by_handler(&mut self, nr: u32, n: &Notif) -> Reply {
        let mut handlers = std::mem::take(&mut self.handlers);
        let reply = match handlers.iter_mut().find(|h| h.traps().covers(nr)) {
            Some(h) => h.handle(self, n),
            None => Reply::Now(Err(libc::ENOSYS)),
        };
        self.handlers = handlers;
        reply
    }

    fn connect(&mut self, n: &Notif) -> Result<Reply, i32> {
        let sock = self.socket_of(n.pid, n.args[0])?;
        let addr = Self::read_addr(n.pid, n.args[1], n.args[2])?;
        let target = self.target(n.pid, sock.as_fd(), addr, "connect")?;
        if !self.valid(n) {
            return Ok(Reply::Later); // /proc/PID may have named another process meanwhile
        }
        let m = Message {
            data: Vec::new(),
            control: Vec::new(),
            fds: Vec::new(),
            target,
        };
        self.perform(n, sock, Call::Connect, vec![m])
    }

    /// Has the gate's helper perform the call on `sock` with `msgs`, as the caller: without
    /// capabilities when the caller holds no effective one. Its result answers the call.
    fn perform(
        &self,
        n: &Notif,
        sock: OwnedFd,
        call: Call,
        msgs: Vec<Message>,
    ) -> Result<Reply, i32> {
        let Some(helper) = &self.helper else {
            return Err(libc::EACCES);
        };
        let drop_caps = match self.needs_unprivileged(n.pid) {
            None => false,
            Some(Some(_)) => true,
            Some(None) => return Err(libc::EPERM),
        };
        let (flags, mmsg_base) = match call {
            Call::Connect => (0, None),
            Call::Send(flags) => (flags, None),
            Call::SendMany(flags) => (flags, Some(n.args[1])),
        };
        let request = Request {
            id: n.id,
            connect: matches!(call, Call::Connect),
            many: mmsg_base.is_some(),
            flags,
            drop_caps,
            socket: sock,
            msgs: msgs.into_iter().map(Message::into_msg).collect(),
        };
        let pending = Pending {
            tid: n.pid,
            sigpipe: !request.connect && flags & libc::MSG_NOSIGNAL == 0,
            mmsg_base,
        };
        helper.submit(request, pending)?;
        Ok(Reply::Later)
    }

    fn sendto(&mut self, n: &Notif) -> Result<Reply, i32> {
        let sock = self.socket_of(n.pid, n.args[0])?;
        let len = (n.args[2] as usize).min(MAX_PAYLOAD);
        let data = if len == 0 {
            Vec::new()
        } else {
            notify::read_mem(n.pid, n.args[1], len)?
        };
        let addr = Self::read_addr(n.pid, n.args[4], n.args[5])?;
        let target = self.target(n.pid, sock.as_fd(), addr, "send")?;
        if !self.valid(n) {
            return Ok(Reply::Later); // /proc/PID may have named another process meanwhile
        }
        let m = Message {
            data,
            control: Vec::new(),
            fds: Vec::new(),
            target,
        };
        self.perform(n, sock, Call::Send(n.args[3] as i32), vec![m])
    }

    /// Reads the `msghdr` at `ptr` and everything it points to, translating `SCM_RIGHTS`
    /// descriptors into ours. The target is decided later, after the validity check.
    fn read_message(&mut self, pid: libc::pid_t, ptr: u64) -> Result<(Message, Vec<u8>), i32> {
        // Every length below is the command's: decoded and walked by `wire`, checked.
        let h = wire::msghdr(&notify::read_mem(pid, ptr, wire::MSGHDR_SIZE)?)?;
        let (name, namelen) = (h.name, u64::from(h.namelen));
        if h.iovlen > MAX_IOV {
            return Err(libc::EMSGSIZE);
        }
        if h.controllen > MAX_CONTROL {
            return Err(libc::ENOBUFS);
        }
        let mut data = Vec::new();
        if h.iovlen > 0 {
            let len = wire::iov_array_len(h.iovlen).ok_or(libc::EMSGSIZE)?;
            for (base, len) in wire::iovecs(&notify::read_mem(pid, h.iov, len)?) {
                let len = usize::try_from(len)
                    .unwrap_or(usize::MAX)
                    .min(MAX_PAYLOAD.saturating_sub(data.len()));
                if len > 0 {
                    data.extend(notify::read_mem(pid, base, len)?);
                }
            }
        }
        let mut control = if h.controllen > 0 && h.control != 0 {
            notify::read_mem(pid, h.control, h.controllen as usize)?
        } else {
            Vec::new()
        };
        let mut fds = Vec::new();
        wire::replace_rights(&mut control, |theirs| {
            let ours = self.socket_of(pid, u64::from(theirs as u32))?;
            let n = ours.as_raw_fd();
            fds.push(ours);
            Ok::<_, i32>(n)
        })?;
        let addr = Self::read_addr(pid, name, namelen)?;
        Ok((
            Message {
                data,
                control,
                fds,
                target: Target::None,
            },
            addr,
        ))
    }

    fn sendmsg(&mut self, n: &Notif) -> Result<Reply, i32> {
        let sock = self.socket_of(n.pid, n.args[0])?;
        let (mut m, addr) = self.read_message(n.pid, n.args[1])?;
        m.target = self.target(n.pid, sock.as_fd(), addr, "send")?;
        if !self.valid(n) {
            return Ok(Reply::Later); // /proc/PID may have named another process meanwhile
        }
        self.perform(n, sock, Call::Send(n.args[2] as i32), vec![m])
    }

    fn sendmmsg(&mut self, n: &Notif) -> Result<Reply, i32> {
        let sock = self.socket_of(n.pid, n.args[0])?;
        let vlen = (n.args[2] as u32).min(MAX_IOV as u32) as u64;
        let mut msgs = Vec::new();
        for i in 0..vlen {
            let at = wire::mmsghdr_at(n.args[1], i).ok_or(libc::EFAULT)?;
            msgs.push(self.read_message(n.pid, at)?);
        }
        let mut ready = Vec::new();
        for (mut m, addr) in msgs {
            m.target = self.target(n.pid, sock.as_fd(), addr, "send")?;
            ready.push(m);
        }
        if !self.valid(n) {
            return Ok(Reply::Later); // /proc/PID may have named another process meanwhile
        }
        self.perform(n, sock, Call::SendMany(n.args[3] as i32), ready)
    }

    /// Notes the socket (if it is an unbound unix one) and lets the kernel bind it under the
    /// caller's own confinement. Landlock-denied TCP binds are refused here as there.
    fn bind(&mut self, n: &Notif) -> Reply {
        let Ok(sock) = self.socket_of(n.pid, n.args[0]) else {
            return Reply::Continue; // the kernel reports EBADF/ENOTSOCK itself
        };
        if self.rules.inet.is_some() && is_inet(&sock) {
            return self.bind_inet(n, sock);
        }
        if helper::is_unix(&sock) && !is_bound(&sock) {
            if let Ok(st) = resolve::stat_fd(&sock) {
                let ino = st.st_ino as u32;
                if !self.own.pending.contains(&ino) && !self.own.bound.contains_key(&ino) {
                    if self.own.pending.len() > 65536 {
                        let _ = self.is_own(|_, _, _| false); // settles and prunes the list
                    }
                    self.own.pending.push(ino);
                }
                if self.lookup(ino).0 == Lookup::Gone {
                    self.reach_netns_of(n.pid);
                }
            }
        }
        Reply::Continue
    }

    /// `--net proxy` on Landlock alone: an inet socket is bound by the gate, on its own copy
    /// of the socket with its own copy of the address, and only to loopback (never
    /// continued: the command could rewrite the address after the check).
    fn bind_inet(&mut self, n: &Notif, sock: OwnedFd) -> Reply {
        let addr = match Self::read_addr(n.pid, n.args[1], n.args[2]) {
            Ok(a) if !a.is_empty() => a,
            Ok(_) => return Reply::Now(Err(libc::EINVAL)),
            Err(e) => return Reply::Now(Err(e)),
        };
        match super::inet::parse(&addr) {
            Ok(Some(a)) if super::inet::binds_loopback(a) => {}
            Err(e) => return Reply::Now(Err(e)),
            _ => {
                if self.shown.insert("bind beyond loopback".into()) {
                    eprintln!("shofer-sandbox: bind() of an inet socket beyond loopback refused: --net proxy (bind to 127.0.0.1 or ::1)");
                }
                return Reply::Now(Err(libc::EACCES));
            }
        }
        if !self.valid(n) {
            return Reply::Later; // /proc/PID may have named another process meanwhile
        }
        // No SO_REUSEPORT: with it, the bind would join a host service's group on the same
        // port (same uid), and connects the gate admits as the run's own would reach it.
        if rustix::net::sockopt::set_socket_reuseport(&sock, false).is_err() {
            return Reply::Now(Err(libc::EACCES));
        }
        // Remembered before the bind: one that fails leaves the socket unbound, and listen
        // checks the address too.
        if let Ok(st) = resolve::stat_fd(&sock) {
            if self.bound_inet.len() >= 65536 {
                self.bound_inet.clear();
            }
            self.bound_inet.insert(st.st_ino);
        }
        self.perform_as_caller(
            n,
            Box::new(move || {
                // Raw libc: rustix binds only typed addresses; these are the checked bytes.
                // Safety: `addr` is a live buffer of the length passed.
                let r = unsafe {
                    libc::bind(
                        sock.as_raw_fd(),
                        addr.as_ptr().cast::<libc::sockaddr>(),
                        addr.len() as libc::socklen_t,
                    )
                };
                Some(if r == 0 {
                    Ok(0)
                } else {
                    Err(std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EINVAL))
                })
            }),
        )
    }

    /// `listen` (trapped only with `--net deny` on Landlock alone): refused on any socket but a
    /// unix one. Landlock refuses every TCP `bind`, so an inet socket that gets this far is
    /// unbound, and the kernel would bind it itself to a port of its choosing on every
    /// interface, unchecked: a server the outside could reach. With `--net proxy` there (also
    /// trapped): allowed on an inet socket bound to loopback, whose inode then counts as one of
    /// the run's listeners ([`super::inet::listening`]).
    ///
    /// Never continued: the kernel would look the descriptor up again, and another thread of
    /// the command can have swapped an inet socket in since (`dup2`). The gate listens on its
    /// own copy of the very socket it judged, or refuses — also when it cannot take the
    /// caller's descriptor at all (a non-dumpable caller: `pidfd_getfd` gives `EPERM`).
    fn listen(&mut self, n: &Notif) -> Reply {
        let sock = match self.socket_of(n.pid, n.args[0]) {
            Ok(sock) => sock,
            Err(libc::EBADF) => return Reply::Now(Err(libc::EBADF)),
            Err(_) => return Reply::Now(Err(libc::EACCES)),
        };
        if !self.valid(n) {
            return Reply::Later; // /proc/PID may have named another process meanwhile
        }
        match rustix::net::sockopt::socket_domain(&sock) {
            Ok(rustix::net::AddressFamily::UNIX) => {
                // An int: the low half is what the kernel reads.
                let backlog = n.args[1] as i32;
                return Reply::Now(
                    rustix::net::listen(&sock, backlog)
                        .map(|()| 0)
                        .map_err(|e| e.raw_os_error()),
                );
            }
            Err(e) => return Reply::Now(Err(e.raw_os_error())), // ENOTSOCK
            Ok(_) => {}
        }
        if self.rules.inet.is_some() {
            // --net proxy: on a socket the gate bound to loopback; its inode is the run's.
            let local = rustix::net::getsockname(&sock).ok().and_then(|a| {
                let a: Option<std::net::SocketAddr> = a.try_into().ok();
                a
            });
            // SO_REUSEPORT set since the bind would let the listen join a host group.
            let shared = rustix::net::sockopt::socket_reuseport(&sock).unwrap_or(true);
            let ino = resolve::stat_fd(&sock).ok().map(|st| st.st_ino);
            let gate_bound = ino.is_some_and(|i| self.bound_inet.contains(&i));
            if gate_bound && local.is_some_and(super::inet::binds_loopback) && !shared {
                if let Some(ino) = ino {
                    if self.own_inet.len() < 65536 {
                        self.own_inet.insert(ino);
                    }
                }
                let backlog = n.args[1] as i32;
                return Reply::Now(
                    rustix::net::listen(&sock, backlog)
                        .map(|()| 0)
                        .map_err(|e| e.raw_os_error()),
                );
            }
            if self.shown.insert("listen on an inet socket".into()) {
                eprintln!("shofer-sandbox: listen() on an inet socket not bound to loopback refused: --net proxy (bind to 127.0.0.1 or ::1 first)");
            }
            return Reply::Now(Err(libc::EACCES));
        }
        if self.shown.insert("listen on an inet socket".into()) {
            eprintln!(
                "shofer-sandbox: listen() on an inet socket refused: --net deny (the kernel would pick a port for it that Landlock does not check)"
            );
        }
        Reply::Now(Err(libc::EACCES))
    }

    /// The socket being bound is in a network namespace none of our sock_diag sockets sees
    /// (bubblewrap's `--unshare-net`, or one the command made): get one there, once per
    /// namespace, where the kernel answers sock_diag at all.
    fn reach_netns_of(&mut self, pid: libc::pid_t) {
        let Some(id) = super::netns::ns_id(&pid.to_string(), "net") else {
            return;
        };
        if !self.netns_tried.insert(id) || self.netns_tried.len() > 64 {
            return;
        }
        if !*self
            .diag_works
            .get_or_insert_with(|| diag_answers(&self.diag))
        {
            return;
        }
        if let Some(d) = super::netns::diag_of(pid) {
            self.diag.push(d);
        }
    }
}

impl Gatekeeper for Gate {
    fn caller_fd(&mut self, pid: libc::pid_t, fd: u64) -> Result<OwnedFd, i32> {
        self.socket_of(pid, fd)
    }

    fn still_valid(&self, n: &Notif) -> bool {
        self.valid(n)
    }

    fn installer(&self) -> Installer {
        Installer::new(self.listener.clone(), self.addfd)
    }

    fn perform_as_caller(&self, n: &Notif, op: Performed) -> Reply {
        match self.needs_unprivileged(n.pid) {
            None => match op() {
                Some(r) => Reply::Now(r),
                None => Reply::Later,
            },
            as_caller => self.later_answered(n.id, as_caller, op),
        }
    }
}

fn is_inet(sock: &OwnedFd) -> bool {
    matches!(
        rustix::net::sockopt::socket_domain(sock),
        Ok(rustix::net::AddressFamily::INET | rustix::net::AddressFamily::INET6)
    )
}

fn is_bound(sock: &OwnedFd) -> bool {
    rustix::net::getsockname(sock)
        .is_ok_and(|a| a.addr_len() as usize > std::mem::size_of::<libc::sa_family_t>())
}

/// Whether the kernel answers a sock_diag lookup of a unix socket that certainly exists (one
/// of a socket pair made for the question) — it does not without the `unix_diag` module.
fn diag_answers(diag: &[OwnedFd]) -> bool {
    let Some(d) = diag.first() else {
        return false;
    };
    let Ok((a, _b)) = helper::pair(rustix::net::SocketType::STREAM) else {
        return true; // cannot ask: say nothing
    };
    match resolve::stat_fd(&a) {
        Ok(st) => matches!(diag::lookup(d, st.st_ino as u32), Lookup::Found { .. }),
        Err(_) => true,
    }
}
