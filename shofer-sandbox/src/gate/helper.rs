//! The gate's hands: a process inside the command's confinement that performs the socket
//! calls the gate let through, so the gate never does more than the kernel would let the
//! command do.
//!
//! - [`Spawn`]: what the command's first process needs to start the helper, prepared by the
//!   supervisor before `clone` (its end of a socket pair, our own binary, the argument list).
//! - [`start_in_child`]: in the command's first process, right after its Landlock domain and
//!   before the gate's filter: a `clone(CLONE_PARENT)` that execs `shofer-sandbox
//!   --gate-helper` (raw syscalls, no allocation). The helper is thus in the command's own
//!   Landlock domain — not a copy of it, which would be a sibling domain and fail Landlock's
//!   scoping of the run's own abstract sockets — in its namespaces, with its credentials,
//!   under its other seccomp filters, and outside the gate's (its calls are not trapped).
//! - [`main`]: the helper process: takes requests, performs each on the caller's socket,
//!   answers.
//! - [`Link`]: the supervisor's side: sends requests; a reader thread answers the trapped
//!   calls with the helper's results.
//!
//! The command cannot take the helper over: the command's first process adds one more
//! Landlock layer after the fork ([`restrict_further`]), and a process cannot ptrace one in
//! an enclosing domain (from ABI 6 it cannot signal it either); without Landlock (the
//! `userns` backend) the helper makes itself non-dumpable before the command runs, and
//! behind bubblewrap it is outside the command's PID namespace. The command may still kill
//! its own helper below ABI 6 (same user): its gated calls then fail with `EACCES`, nothing
//! more.
//!
//! Wire format (one `SOCK_SEQPACKET` message each way, native byte order; the helper checks
//! every length, see [`Request::decode`]): a request is a header — notification id (u64),
//! kind (u32: 1 connect, 2 send, 3 send many), send flags (u32), drop-capabilities (u32),
//! message count (u32), data-in-memfd index (i32, -1: inline) — then per message its address
//! length (u32), pin index (i32, -1: none), control length (u32) and data length (u32), then
//! the bytes.
//! Descriptors travel as `SCM_RIGHTS`: index 0 is the caller's socket; a pin is a pathname
//! socket's inode held open by the gate (the helper connects to `/proc/self/fd/<pin>`, what
//! the gate checked); `SCM_RIGHTS` slots in a forwarded control buffer hold indices too. A
//! reply: id (u64), result (i64, `-errno` on failure), count (u32), then per message the bytes
//! sent (u32, `sendmmsg`).

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::net::sockopt::socket_type;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketType,
};
use rustix::process::Signal;

use super::notify;
// What the gate copies of a send at most, and the most descriptors one message passes (the
// kernel's `SCM_MAX_FD`): one request's bounds.
use super::wire::MAX_PAYLOAD;
use super::wire::SCM_MAX_FD as MAX_FDS;

/// Request kinds: `connect`; `sendto`/`sendmsg` (one message, answered with the bytes
/// sent); `sendmmsg` (answered with the messages sent, and the bytes of each).
const CONNECT: u32 = 1;
const SEND: u32 = 2;
const SEND_MANY: u32 = 3;
/// Header and per-message record sizes.
const HEADER: usize = 28;
const RECORD: usize = 16;
/// Largest request message (below the default socket buffer, `wmem_default`, 208 KiB); data
/// beyond [`INLINE_DATA`] goes through a memfd.
const MAX_REQUEST: usize = 192 << 10;
const INLINE_DATA: usize = 64 << 10;
/// Most messages in one request (`UIO_MAXIOV`, as `sendmmsg`).
const MAX_MSGS: usize = 1024;
/// The helper's descriptor for its socket to the supervisor, and for the ready byte.
const LINK_FD: RawFd = 3;
const READY_FD: RawFd = 4;
/// The argument that makes `shofer-sandbox` the helper.
pub const ARG: &str = "--gate-helper";

/// What the command's first process needs to start the helper: everything allocated before
/// `clone`, so [`start_in_child`] allocates nothing.
pub(crate) struct Spawn {
    /// The helper's end of the socket pair (close-on-exec, above 4).
    pub sock: OwnedFd,
    /// Our own binary, `O_PATH` (close-on-exec, above 4).
    pub exe: OwnedFd,
    /// `shofer-sandbox --gate-helper [ready]`.
    argv: Vec<CString>,
    /// Wait for the helper to be non-dumpable before the command runs (no Landlock layer
    /// keeps the command from ptracing it, and it shares the command's PID namespace).
    pub wait_ready: bool,
}

impl Spawn {
    /// Prepares a helper whose other end is `sock`.
    ///
    /// # Errors
    /// Opening our binary or moving a descriptor fails.
    pub(crate) fn new(sock: OwnedFd, wait_ready: bool) -> io::Result<Spawn> {
        let exe = crate::paths::open_following(std::path::Path::new("/proc/self/exe"))?;
        let mut argv = vec![
            CString::new("shofer-sandbox").expect("no NUL"),
            CString::new(ARG).expect("no NUL"),
        ];
        if wait_ready {
            argv.push(CString::new("ready").expect("no NUL"));
        }
        Ok(Spawn {
            sock: above_4(sock)?,
            exe: above_4(exe)?,
            argv,
            wait_ready,
        })
    }
}

/// A unix socket pair of type `ty` (`SOCK_SEQPACKET`: the supervisor's end and the
/// helper's), close-on-exec: the gate's one `socketpair` (the crate has no other socket
/// wrapper).
///
/// # Errors
/// The `socketpair` error.
pub(crate) fn pair(ty: SocketType) -> io::Result<(OwnedFd, OwnedFd)> {
    let flags = rustix::net::SocketFlags::CLOEXEC;
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        ty,
        flags,
        None,
    )?)
}

/// `fd` moved to a number above [`READY_FD`], so the helper's own moves cannot clobber it.
fn above_4(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > READY_FD {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, READY_FD + 1)?)
}

/// Child side, in the command's first process after its Landlock domain and before the gate
/// filter: starts the helper as this process's sibling (`CLONE_PARENT`: the supervisor, or
/// the namespaces' init, reaps it; the command never sees it as a child), closing in it
/// `close` (the passed descriptors). With [`Spawn::wait_ready`], returns once the helper is
/// non-dumpable; without, the helper execs only when the first request arrives (most runs
/// make no gated socket call, and pay only for the fork). Raw syscalls only: this may run in a
/// `CLONE_VM` child of a threaded process.
///
/// # Errors
/// `clone` fails, or the helper ended before saying it is ready.
pub(crate) fn start_in_child(spawn: &Spawn, close: &[RawFd]) -> io::Result<()> {
    let ready_pipe = if spawn.wait_ready {
        Some(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
    } else {
        None
    };
    // The numbers, for the child (which only makes raw syscalls on them).
    let ready = ready_pipe
        .as_ref()
        .map_or([-1; 2], |(r, w)| [r.as_raw_fd(), w.as_raw_fd()]);
    let argv = [
        spawn.argv[0].as_ptr(),
        spawn.argv[1].as_ptr(),
        spawn.argv.get(2).map_or(std::ptr::null(), |a| a.as_ptr()),
        std::ptr::null(),
    ];
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    // Raw syscall: rustix has no clone (a fork-like one only in its unstable runtime API).
    // Safety: a fork-like clone (no CLONE_VM, no new stack): the child runs on a copy of this
    // stack and only makes raw syscalls before execveat or _exit.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::CLONE_PARENT as libc::c_ulong,
            0,
            0,
            0,
            0,
        )
    };
    if pid == 0 {
        let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
        // Raw syscalls where rustix needs owned descriptors (close, dup2 and recv on the
        // inherited numbers) or has none (execveat, `_exit`: only in its unstable runtime API).
        // Safety: raw syscalls on integers and the prepared argument arrays, then exec or
        // _exit; nothing here allocates or returns.
        unsafe {
            for &fd in close {
                libc::close(fd);
            }
            let rdwr = OFlags::RDWR | OFlags::CLOEXEC;
            if let Ok(null) = rustix::fs::open(c"/dev/null", rdwr, Mode::empty()) {
                let _ = rustix::stdio::dup2_stdin(&null);
                let _ = rustix::stdio::dup2_stdout(&null);
            }
            let moved = (!spawn.wait_ready || move_to(ready[1], READY_FD))
                && move_to(spawn.sock.as_raw_fd(), LINK_FD);
            // Most runs make no gated socket call: under a Landlock layer (which keeps the
            // command from ptracing us, dumpable or not) the exec waits for the first request,
            // left in the socket for the helper to read; EOF: the run ended without one. Until
            // then nothing but the link and our binary stays open here (no exec closes the
            // rest: the supervisor's error pipe would never see EOF).
            let mut exe = spawn.exe.as_raw_fd();
            if !spawn.wait_ready {
                let closed = moved && move_to(exe, READY_FD) && {
                    shofer_sys::fd::close_from(READY_FD + 1, shofer_sys::fd::CloseFrom::Close);
                    true
                };
                exe = READY_FD;
                let mut peek = 0u8;
                if !closed
                    || libc::recv(LINK_FD, (&mut peek as *mut u8).cast(), 1, libc::MSG_PEEK) <= 0
                {
                    libc::_exit(0);
                }
            }
            if moved {
                libc::syscall(
                    libc::SYS_execveat,
                    exe,
                    c"".as_ptr(),
                    argv.as_ptr(),
                    envp.as_ptr(),
                    libc::AT_EMPTY_PATH,
                );
            }
            libc::_exit(127)
        }
    }
    let err = io::Error::last_os_error();
    let Some((ready_r, ready_w)) = ready_pipe else {
        return if pid < 0 { Err(err) } else { Ok(()) };
    };
    // Our copy of the write end closed, then one byte from the helper (EOF: it died).
    drop(ready_w);
    let mut b = [0u8; 1];
    let got = (pid >= 0).then(|| rustix::io::read(&ready_r, &mut b));
    drop(ready_r);
    match (pid < 0, got) {
        (true, _) => Err(err),
        (false, Some(Ok(1))) => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::ECHILD)),
    }
}

/// `fd` at number `to`, inherited across exec. Raw syscalls only (in the helper's child,
/// before exec).
fn move_to(fd: RawFd, to: RawFd) -> bool {
    // Raw syscalls: rustix's dup2 and fcntl take owned descriptors, these are numbers.
    // Safety: fcntl/dup2 on integers.
    unsafe {
        if fd == to {
            libc::fcntl(fd, libc::F_SETFD, 0) == 0
        } else {
            libc::dup2(fd, to) == to
        }
    }
}

/// The command's first process, after forking the helper: one more Landlock layer that
/// restricts nothing the command does, so that the helper is in an *enclosing* domain, which
/// the command can neither ptrace nor (ABI 6) signal. It scopes signals from ABI 6 (every
/// process of the command is inside it), handles the creation of block devices, which nothing
/// in a sandbox makes, and from ABI 2 `REFER`, granted beneath `/` (the kernel refuses a hard
/// link across directories under a layer that does not grant `REFER`).
///
/// # Errors
/// The Landlock error.
pub(crate) fn restrict_further(abi: u32) -> io::Result<()> {
    use landlock::{
        AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
    };
    let other = |e: landlock::RulesetError| io::Error::other(e.to_string());
    let mut ruleset = Ruleset::default();
    if abi >= 6 {
        ruleset = ruleset.scope(Scope::Signal).map_err(other)?;
    }
    let handled = if abi >= 2 {
        AccessFs::MakeBlock | AccessFs::Refer
    } else {
        AccessFs::MakeBlock.into()
    };
    let mut created = ruleset
        .handle_access(handled)
        .map_err(other)?
        .create()
        .map_err(other)?;
    if abi >= 2 {
        let root = PathFd::new("/").map_err(|e| io::Error::other(e.to_string()))?;
        created = created
            .add_rule(PathBeneath::new(root, AccessFs::Refer))
            .map_err(other)?;
    }
    created.no_new_privs(false).restrict_self().map_err(other)?;
    Ok(())
}

/// One message of a request, as the supervisor builds it.
pub(super) struct Msg {
    /// The address as the kernel takes it (empty: none); with `pin`, replaced by the helper's
    /// `/proc/self/fd/<pin>`.
    pub addr: Vec<u8>,
    /// A pathname socket's inode, held open: the address the helper connects or sends to.
    pub pin: Option<OwnedFd>,
    /// Ancillary data whose `SCM_RIGHTS` slots hold our descriptor numbers of `fds`.
    pub control: Vec<u8>,
    /// Descriptors the control buffer passes.
    pub fds: Vec<OwnedFd>,
    /// The payload.
    pub data: Vec<u8>,
}

/// A call for the helper to perform.
pub(super) struct Request {
    pub id: u64,
    pub connect: bool,
    /// `sendmmsg`: answered with the count of messages sent and each one's bytes.
    pub many: bool,
    pub flags: i32,
    /// The caller holds no effective capability: the helper performs the call without any.
    pub drop_caps: bool,
    pub socket: OwnedFd,
    pub msgs: Vec<Msg>,
}

/// What the supervisor does with a result besides answering.
pub(super) struct Pending {
    /// The calling thread.
    pub tid: libc::pid_t,
    /// Raise SIGPIPE in the caller on `EPIPE` (no `MSG_NOSIGNAL`).
    pub sigpipe: bool,
    /// `sendmmsg`: where the caller's `mmsghdr` array starts.
    pub mmsg_base: Option<u64>,
}

/// A request's bytes and the descriptors to pass.
type Encoded<'a> = (Vec<u8>, Vec<BorrowedFd<'a>>);

/// Encodes `req` into bytes and the descriptors to pass; `memfd` holds its payloads when
/// [`memfd_for`] made one. Control buffers' `SCM_RIGHTS` numbers become indices into the
/// passed list.
///
/// # Errors
/// `ETOOMANYREFS` past [`MAX_FDS`] descriptors, `EMSGSIZE` past [`MAX_MSGS`] messages.
fn encode<'a>(req: &'a Request, memfd: Option<&'a OwnedFd>) -> Result<Encoded<'a>, i32> {
    if req.msgs.len() > MAX_MSGS {
        return Err(libc::EMSGSIZE);
    }
    let mut fds = vec![req.socket.as_fd()];
    let mut head = Vec::with_capacity(HEADER + RECORD * req.msgs.len());
    head.extend(req.id.to_ne_bytes());
    let kind = match (req.connect, req.many) {
        (true, _) => CONNECT,
        (false, false) => SEND,
        (false, true) => SEND_MANY,
    };
    head.extend(kind.to_ne_bytes());
    head.extend(req.flags.to_ne_bytes());
    head.extend(u32::from(req.drop_caps).to_ne_bytes());
    head.extend((req.msgs.len() as u32).to_ne_bytes());
    let memfd_index = memfd.map_or(-1, |m| {
        fds.push(m.as_fd());
        (fds.len() - 1) as i32
    });
    head.extend(memfd_index.to_ne_bytes());
    let mut body: Vec<u8> = Vec::new();
    for m in &req.msgs {
        let pin = m.pin.as_ref().map_or(-1, |p| {
            fds.push(p.as_fd());
            (fds.len() - 1) as i32
        });
        let mut control = m.control.clone();
        for slot in rights_slots(&control) {
            let ours = i32::from_ne_bytes(
                control
                    .get(slot..slot + 4)
                    .and_then(|b| b.try_into().ok())
                    .ok_or(libc::EINVAL)?,
            );
            let Some(passed) = m.fds.iter().find(|f| f.as_raw_fd() == ours) else {
                return Err(libc::EBADF);
            };
            fds.push(passed.as_fd());
            let index = (fds.len() - 1) as u32;
            control[slot..slot + 4].copy_from_slice(&index.to_ne_bytes());
        }
        let data_len = if memfd.is_some() { 0 } else { m.data.len() };
        head.extend((m.addr.len() as u32).to_ne_bytes());
        head.extend(pin.to_ne_bytes());
        head.extend((control.len() as u32).to_ne_bytes());
        head.extend((m.data.len() as u32).to_ne_bytes());
        body.extend(&m.addr);
        body.extend(&control);
        body.extend(&m.data[..data_len]);
    }
    if fds.len() > MAX_FDS {
        return Err(libc::ETOOMANYREFS);
    }
    head.extend(body);
    if head.len() > MAX_REQUEST {
        return Err(libc::EMSGSIZE);
    }
    Ok((head, fds))
}

/// The memfd [`encode`] refers to when `req`'s payloads are too large to travel inline.
fn memfd_for(req: &Request) -> Result<Option<OwnedFd>, i32> {
    let total: usize = req.msgs.iter().map(|m| m.data.len()).sum();
    // Too many messages: `encode` says so (EMSGSIZE) before anything is made.
    if total > INLINE_DATA && req.msgs.len() <= MAX_MSGS {
        Ok(Some(data_memfd(&req.msgs)?))
    } else {
        Ok(None)
    }
}

/// The messages' payloads, one after the other, in a sealed memfd.
fn data_memfd(msgs: &[Msg]) -> Result<OwnedFd, i32> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    let fd = rustix::fs::memfd_create(c"shofer-gate", flags).map_err(Errno::raw_os_error)?;
    let mut file = std::fs::File::from(fd);
    for m in msgs {
        std::io::Write::write_all(&mut file, &m.data)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    }
    let fd = OwnedFd::from(file);
    let seals = SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
    let _ = rustix::fs::fcntl_add_seals(&fd, seals);
    Ok(fd)
}

/// Sends one datagram with descriptors on `sock`.
fn send_with_fds(sock: &OwnedFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), i32> {
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(libc::ETOOMANYREFS); // not reached: the buffer is sized for them
    }
    let iov = [IoSlice::new(bytes)];
    loop {
        match rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.raw_os_error()),
        }
    }
}

/// The offsets of every descriptor slot (4 bytes each) of the `SCM_RIGHTS` messages in the
/// ancillary buffer `control`, as [`super::wire::cmsgs`] walks it (a malformed header ends the
/// walk).
pub(super) fn rights_slots(control: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    for item in super::wire::cmsgs(control) {
        match item {
            Ok(super::wire::Cmsg::Rights { at, fds }) => {
                out.extend((0..fds.len()).map(|k| at + 4 * k));
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    out
}

/// Receives one datagram and its descriptors (at most [`MAX_FDS`]); `None` at EOF.
fn recv_with_fds(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [IoSliceMut::new(buf)];
    let got = loop {
        match rustix::net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(got) => break got,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    // Every descriptor that came is ours now (closed on return unless kept).
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = msg {
            fds.extend(rights);
        }
    }
    let truncated = got.flags.contains(ReturnFlags::TRUNC);
    if got.bytes == 0 && fds.is_empty() && !truncated {
        return Ok(None);
    }
    if truncated || got.flags.contains(ReturnFlags::CTRUNC) {
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    Ok(Some((got.bytes, fds)))
}

/// The supervisor's side of the helper.
pub(super) struct Link {
    sock: Arc<OwnedFd>,
    pending: Arc<Mutex<HashMap<u64, Pending>>>,
}

impl Link {
    /// Starts the reader thread, which answers `listener`'s notifications with the helper's
    /// results.
    ///
    /// # Errors
    /// Thread creation failure.
    pub(super) fn start(sock: OwnedFd, listener: Arc<OwnedFd>) -> io::Result<Link> {
        let link = Link {
            sock: Arc::new(sock),
            pending: Arc::default(),
        };
        let (sock, pending) = (link.sock.clone(), link.pending.clone());
        std::thread::Builder::new()
            .name("shofer-gate-replies".into())
            .stack_size(128 * 1024)
            .spawn(move || read_replies(&sock, &pending, &listener))?;
        Ok(link)
    }

    /// Sends `req` to the helper; its reply answers the notification later.
    ///
    /// # Errors
    /// The request cannot be encoded, or the helper is gone (`EACCES`, said once).
    pub(super) fn submit(&self, req: Request, pending: Pending) -> Result<(), i32> {
        let memfd = memfd_for(&req)?;
        let (bytes, fds) = encode(&req, memfd.as_ref())?;
        let id = req.id;
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, pending);
        }
        send_with_fds(&self.sock, &bytes, &fds).map_err(|e| {
            if let Ok(mut p) = self.pending.lock() {
                p.remove(&id);
            }
            match e {
                libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN => helper_gone(),
                e => e, // e.g. EMSGSIZE past a small socket buffer: the caller's answer
            }
        })
    }
}

impl Drop for Link {
    /// The helper ends when its link does (it reads EOF), and so does the reader thread.
    fn drop(&mut self) {
        let _ = rustix::net::shutdown(&*self.sock, rustix::net::Shutdown::Both);
    }
}

/// Said once: the helper ended (the command killed it, or it failed), so calls that need it
/// fail with `EACCES`.
fn helper_gone() -> i32 {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("shofer-sandbox: the unix socket gate's helper in the command's confinement has ended: socket calls through the gate fail with EACCES from now on");
    }
    libc::EACCES
}

/// The reader thread: each reply answers its notification.
fn read_replies(sock: &OwnedFd, pending: &Mutex<HashMap<u64, Pending>>, listener: &OwnedFd) {
    let mut buf = vec![0u8; 16 + 4 + 4 + 4 * MAX_MSGS];
    loop {
        let n = match recv_with_fds(sock, &mut buf) {
            Ok(Some((n, _))) => n,
            Ok(None) | Err(_) => break,
        };
        let Some(reply) = Reply::decode(&buf[..n]) else {
            continue;
        };
        let Some(p) = pending.lock().ok().and_then(|mut m| m.remove(&reply.id)) else {
            continue;
        };
        let result = if reply.result < 0 {
            Err(i32::try_from(-reply.result).unwrap_or(libc::EIO))
        } else {
            Ok(reply.result)
        };
        if let (Some(base), Ok(_)) = (p.mmsg_base, result) {
            if notify::still_valid(listener.as_raw_fd(), reply.id) {
                for (i, len) in reply.lens.iter().enumerate() {
                    if let Some(at) = super::wire::mmsg_len_at(base, i as u64) {
                        let _ = notify::write_mem(p.tid, at, &len.to_ne_bytes());
                    }
                }
            }
        }
        if p.sigpipe && result == Err(libc::EPIPE) {
            super::answer::raise_sigpipe(p.tid);
        }
        super::answer::answer(listener.as_raw_fd(), reply.id, result);
    }
    // The helper is gone: every call still waiting fails.
    if let Ok(mut m) = pending.lock() {
        for (id, _) in m.drain() {
            super::answer::answer(listener.as_raw_fd(), id, Err(helper_gone()));
        }
    }
}

/// A reply, decoded.
struct Reply {
    id: u64,
    result: i64,
    lens: Vec<u32>,
}

impl Reply {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(20 + 4 * self.lens.len());
        b.extend(self.id.to_ne_bytes());
        b.extend(self.result.to_ne_bytes());
        b.extend((self.lens.len() as u32).to_ne_bytes());
        for l in &self.lens {
            b.extend(l.to_ne_bytes());
        }
        b
    }

    /// `None` for anything malformed.
    fn decode(b: &[u8]) -> Option<Reply> {
        let mut r = Reader(b);
        let id = r.u64()?;
        let result = r.i64()?;
        let n = r.u32()? as usize;
        if n > MAX_MSGS {
            return None;
        }
        let lens = (0..n).map(|_| r.u32()).collect::<Option<Vec<_>>>()?;
        Some(Reply { id, result, lens })
    }
}

/// A bounds-checked reader over bytes: every read is `None` past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_ne_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_ne_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// A request as the helper decoded it: descriptors are indices into the received list.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    id: u64,
    connect: bool,
    many: bool,
    flags: i32,
    drop_caps: bool,
    memfd: Option<usize>,
    msgs: Vec<DecodedMsg>,
}

#[derive(Debug, PartialEq, Eq)]
struct DecodedMsg {
    addr: Vec<u8>,
    pin: Option<usize>,
    control: Vec<u8>,
    data_len: usize,
    data: Vec<u8>,
}

impl Request {
    /// Decodes a request of `nfds` descriptors; `None` for anything malformed (an index out
    /// of range, a length past the end, too many messages).
    fn decode(b: &[u8], nfds: usize) -> Option<Decoded> {
        let mut r = Reader(b);
        let id = r.u64()?;
        let kind = r.u32()?;
        let flags = r.i32()?;
        let drop_caps = r.u32()? != 0;
        let n = r.u32()? as usize;
        let memfd = index(r.i32()?, nfds)?;
        let one = kind == CONNECT || kind == SEND;
        if n > MAX_MSGS || !(one || kind == SEND_MANY) || (one && n != 1) {
            return None;
        }
        let mut records = Vec::with_capacity(n);
        for _ in 0..n {
            records.push((
                r.u32()? as usize,
                r.i32()?,
                r.u32()? as usize,
                r.u32()? as usize,
            ));
        }
        let mut msgs = Vec::with_capacity(n);
        for (addr_len, pin, ctl_len, data_len) in records {
            let addr = r.take(addr_len)?.to_vec();
            let control = r.take(ctl_len)?.to_vec();
            let data = if memfd.is_some() {
                Vec::new()
            } else {
                r.take(data_len)?.to_vec()
            };
            for slot in rights_slots(&control) {
                let i = control.get(slot..slot + 4)?;
                if u32::from_ne_bytes(i.try_into().ok()?) as usize >= nfds {
                    return None;
                }
            }
            msgs.push(DecodedMsg {
                addr,
                pin: index(pin, nfds)?,
                control,
                data_len,
                data,
            });
        }
        if !r.0.is_empty() || nfds == 0 {
            return None;
        }
        Some(Decoded {
            id,
            connect: kind == CONNECT,
            many: kind == SEND_MANY,
            flags,
            drop_caps,
            memfd,
            msgs,
        })
    }
}

/// -1 → `Some(None)`; an index below `n` → `Some(Some(i))`; anything else → `None`.
fn index(i: i32, n: usize) -> Option<Option<usize>> {
    match i {
        -1 => Some(None),
        i if i >= 0 && (i as usize) < n => Some(Some(i as usize)),
        _ => None,
    }
}

/// The helper process (`shofer-sandbox --gate-helper [ready]`): never returns. It holds
/// what the command's first process held at its fork: in front of bubblewrap, which needs
/// them for its own set-up (its loopback's netlink calls come through the gate too), a root
/// caller's capabilities; calls of a caller without effective capabilities are then made on
/// a thread without any.
pub fn main(args: &[std::ffi::OsString]) -> ! {
    let ready = args.first().is_some_and(|a| a == "ready");
    // No core dump and no ptrace by the command (without a Landlock layer between us).
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    // No death by SIGPIPE. Raw syscall: rustix has no signal disposition outside its unstable
    // runtime API.
    // Safety: SIG_IGN for SIGPIPE: no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    // Safety: `start_in_child` placed the link (and, with `ready`, the ready pipe) at these
    // numbers for us before exec: nothing else in this process owns them.
    let (link, ready_fd) = unsafe {
        let ready_fd = ready.then(|| OwnedFd::from_raw_fd(READY_FD));
        (OwnedFd::from_raw_fd(LINK_FD), ready_fd)
    };
    if let Some(ready_fd) = ready_fd {
        // One byte to the pipe the command's first process waits on, then closed.
        let _ = rustix::io::write(&ready_fd, b"r");
    }
    let holds_caps = crate::capabilities::holds_any();
    let link = Arc::new(link);
    let mut buf = vec![0u8; MAX_REQUEST];
    loop {
        let (n, fds) = match recv_with_fds(&link, &mut buf) {
            Ok(Some(got)) => got,
            Ok(None) => std::process::exit(0),
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => continue,
            Err(_) => std::process::exit(0),
        };
        let Some(req) = Request::decode(&buf[..n], fds.len()) else {
            continue; // nobody to answer: the supervisor never sends this
        };
        let id = req.id;
        let call = Call::new(req, fds);
        let call = match call {
            Ok(c) => c,
            Err(e) => {
                reply(&link, id, Err(e), Vec::new());
                continue;
            }
        };
        if call.drop_caps && holds_caps {
            call.on_thread(&link, true);
        } else {
            call.now_or_on_thread(&link);
        }
    }
}

fn reply(link: &OwnedFd, id: u64, result: Result<i64, i32>, lens: Vec<u32>) {
    let r = Reply {
        id,
        result: match result {
            Ok(v) => v,
            Err(e) => -i64::from(e),
        },
        lens,
    };
    let _ = send_with_fds(link, &r.encode(), &[]);
}

/// A decoded call with its descriptors, ready to perform.
struct Call {
    id: u64,
    connect: bool,
    many: bool,
    flags: i32,
    drop_caps: bool,
    socket: OwnedFd,
    msgs: Vec<Ready>,
    /// Kept open until the call is done: pins and passed descriptors.
    _fds: Vec<OwnedFd>,
}

/// One message with the helper's own descriptor numbers.
struct Ready {
    addr: Vec<u8>,
    control: Vec<u8>,
    data: Vec<u8>,
}

impl Call {
    fn new(req: Decoded, fds: Vec<OwnedFd>) -> Result<Call, i32> {
        let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        let mut data = match req.memfd {
            Some(i) => {
                // Read from the start: the supervisor's writes left the shared offset at the end.
                let total = req
                    .msgs
                    .iter()
                    .try_fold(0usize, |t, m| t.checked_add(m.data_len))
                    .filter(|t| *t <= MAX_PAYLOAD)
                    .ok_or(libc::EMSGSIZE)?;
                let mut all = vec![0u8; total];
                let f = std::fs::File::from(fds[i].try_clone().map_err(|_| libc::EMFILE)?);
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut all, 0)
                    .map_err(|_| libc::EIO)?;
                Some((all, 0usize))
            }
            None => None,
        };
        let mut msgs = Vec::with_capacity(req.msgs.len());
        for m in req.msgs {
            let addr = match m.pin {
                Some(i) => super::resolve::pinned_addr(raw[i]),
                None => m.addr,
            };
            let mut control = m.control;
            for slot in rights_slots(&control) {
                let i = u32::from_ne_bytes(control[slot..slot + 4].try_into().expect("4"));
                control[slot..slot + 4].copy_from_slice(&raw[i as usize].to_ne_bytes());
            }
            let payload = match &mut data {
                Some((all, at)) => {
                    let end = at.checked_add(m.data_len).ok_or(libc::EINVAL)?;
                    let p = all.get(*at..end).ok_or(libc::EINVAL)?.to_vec();
                    *at = end;
                    p
                }
                None => m.data,
            };
            msgs.push(Ready {
                addr,
                control,
                data: payload,
            });
        }
        let mut fds = fds.into_iter();
        let socket = fds.next().ok_or(libc::EBADF)?;
        Ok(Call {
            id: req.id,
            connect: req.connect,
            many: req.many,
            flags: req.flags,
            drop_caps: req.drop_caps,
            socket,
            msgs,
            _fds: fds.collect(),
        })
    }

    /// Performs the call without blocking where that gives the caller's answer, else on a
    /// thread of its own (a blocking connect, a send into a full buffer), so one slow peer
    /// does not hold up the run's other calls.
    fn now_or_on_thread(self, link: &Arc<OwnedFd>) {
        let blocking = !nonblocking(&self.socket);
        if self.connect {
            let addr = &self.msgs[0].addr;
            if !blocking {
                return reply(link, self.id, connect_to(&self.socket, addr), Vec::new());
            }
            if is_unix(&self.socket) {
                // A unix connect blocks only on a full backlog: try without blocking first.
                match connect_nonblocking(&self.socket, addr) {
                    Err(libc::EAGAIN) => {}
                    r => return reply(link, self.id, r, Vec::new()),
                }
            }
            return self.on_thread(link, false);
        }
        let wants_block = blocking && self.flags & libc::MSG_DONTWAIT == 0;
        let (r, lens) = self.send_all(self.flags | libc::MSG_DONTWAIT);
        match r {
            Err(libc::EAGAIN) if wants_block => self.on_thread(link, false),
            Ok(sent)
                if wants_block
                    && !self.many
                    && (sent as usize) < self.msgs[0].data.len()
                    && socket_type(&self.socket) == Ok(SocketType::STREAM) =>
            {
                // A blocking stream send returns when all is sent: the rest follows, blocking.
                let rest = self.msgs[0].data[sent as usize..].to_vec();
                let (link, id, sock, flags) = (link.clone(), self.id, self.socket, self.flags);
                spawn_or_refuse(&link.clone(), id, move || {
                    let m = Ready {
                        addr: Vec::new(),
                        control: Vec::new(),
                        data: rest,
                    };
                    let more = send_one(&sock, &m, flags).unwrap_or(0);
                    reply(&link, id, Ok(sent + more), Vec::new());
                });
            }
            r => reply(link, self.id, r, lens),
        }
    }

    /// Performs the whole call, blocking as the caller asked, on a thread; `drop_caps`: the
    /// thread first gives up its capabilities (they are per thread).
    fn on_thread(self, link: &Arc<OwnedFd>, drop_caps: bool) {
        let (id, l) = (self.id, link.clone());
        spawn_or_refuse(link, id, move || {
            if drop_caps && !drop_thread_caps() {
                return reply(&l, id, Err(libc::EPERM), Vec::new());
            }
            if self.connect {
                let r = connect_to(&self.socket, &self.msgs[0].addr);
                return reply(&l, id, r, Vec::new());
            }
            let (r, lens) = self.send_all(self.flags);
            reply(&l, id, r, lens);
        });
    }

    /// Sends every message (one for `sendto`/`sendmsg`): the count sent for `sendmmsg`, else
    /// the bytes; per message the bytes sent.
    fn send_all(&self, flags: i32) -> (Result<i64, i32>, Vec<u32>) {
        if !self.many {
            let r = send_one(&self.socket, &self.msgs[0], flags);
            return (r, Vec::new());
        }
        let mut lens = Vec::new();
        for m in &self.msgs {
            match send_one(&self.socket, m, flags) {
                Ok(n) => lens.push(n as u32),
                Err(e) if lens.is_empty() => return (Err(e), lens),
                Err(_) => break,
            }
        }
        (Ok(lens.len() as i64), lens)
    }
}

fn spawn_or_refuse(link: &Arc<OwnedFd>, id: u64, f: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new().stack_size(64 * 1024).spawn(f);
    if spawned.is_err() {
        reply(link, id, Err(libc::EAGAIN), Vec::new());
    }
}

/// Drops every capability of the calling thread (capabilities are per thread).
pub(super) fn drop_thread_caps() -> bool {
    [
        caps::CapSet::Ambient,
        caps::CapSet::Inheritable,
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
    ]
    .into_iter()
    .all(|set| caps::clear(None, set).is_ok())
}

fn ret(r: isize) -> Result<i64, i32> {
    if r < 0 {
        Err(shofer_sys::errno::last())
    } else {
        Ok(r as i64)
    }
}

/// Whether `fd` is a unix socket (`SO_DOMAIN`; false when it cannot be read).
pub(super) fn is_unix(fd: impl AsFd) -> bool {
    rustix::net::sockopt::socket_domain(fd) == Ok(AddressFamily::UNIX)
}

/// Whether `fd` has `O_NONBLOCK` (true, as `-1 & O_NONBLOCK` was, when `F_GETFL` fails).
fn nonblocking(fd: &OwnedFd) -> bool {
    rustix::fs::fcntl_getfl(fd).map_or(true, |f| f.contains(OFlags::NONBLOCK))
}

/// `connect(sock, addr)` with the address exactly as the caller (or the gate, for a pin)
/// gave it, byte for byte whatever its family or length, so the kernel judges it and gives
/// the errno it would have given the caller.
fn connect_to(sock: &OwnedFd, addr: &[u8]) -> Result<i64, i32> {
    // Raw syscall: rustix's connect takes a typed address (checked, or copied into its
    // storage); this one is the caller's bytes, unchanged.
    // Safety: `addr` is a readable buffer of the given length for the call.
    let r = unsafe {
        libc::connect(
            sock.as_raw_fd(),
            addr.as_ptr().cast(),
            addr.len() as libc::socklen_t,
        )
    };
    ret(r as isize)
}

/// `connect` with `O_NONBLOCK` set for the call and restored after; `EAGAIN` when it would
/// block (a unix listener's full backlog; the socket is then still unconnected).
fn connect_nonblocking(sock: &OwnedFd, addr: &[u8]) -> Result<i64, i32> {
    let Ok(flags) = rustix::fs::fcntl_getfl(sock) else {
        return connect_to(sock, addr);
    };
    let _ = rustix::fs::fcntl_setfl(sock, flags | OFlags::NONBLOCK);
    let r = connect_to(sock, addr);
    let _ = rustix::fs::fcntl_setfl(sock, flags);
    r
}

/// One `sendmsg` of `m` on `sock`, its address and control buffer exactly as the caller's
/// (descriptor numbers made ours): the kernel judges them as it would have for the caller.
fn send_one(sock: &OwnedFd, m: &Ready, flags: i32) -> Result<i64, i32> {
    let mut iov = libc::iovec {
        iov_base: m.data.as_ptr() as *mut libc::c_void,
        iov_len: m.data.len(),
    };
    // MSG_NOSIGNAL: the supervisor raises SIGPIPE in the caller when it asked for it.
    // Raw syscall: rustix's sendmsg takes a typed address and typed ancillary messages; these
    // are the caller's bytes, unchanged.
    // Safety: an all-zero msghdr is valid; every pointer set in it refers to a buffer of `m`
    // (or `iov`) alive for the call, with its length.
    let r = unsafe {
        let mut h: libc::msghdr = std::mem::zeroed();
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        if !m.addr.is_empty() {
            h.msg_name = m.addr.as_ptr() as *mut libc::c_void;
            h.msg_namelen = m.addr.len() as libc::socklen_t;
        }
        if !m.control.is_empty() {
            h.msg_control = m.control.as_ptr() as *mut libc::c_void;
            h.msg_controllen = m.control.len();
        }
        libc::sendmsg(sock.as_raw_fd(), &h, flags | libc::MSG_NOSIGNAL)
    };
    ret(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A control buffer with one `SCM_RIGHTS` message carrying `fds`.
    fn rights(fds: &[RawFd]) -> Vec<u8> {
        let mut c = ((16 + 4 * fds.len()) as u64).to_ne_bytes().to_vec();
        c.extend(libc::SOL_SOCKET.to_ne_bytes());
        c.extend(libc::SCM_RIGHTS.to_ne_bytes());
        for fd in fds {
            c.extend(fd.to_ne_bytes());
        }
        while c.len() % 8 != 0 {
            c.push(0);
        }
        c
    }

    #[test]
    fn a_request_round_trips_with_descriptors_as_indices() {
        let (a, b) = pair(SocketType::SEQPACKET).unwrap();
        let (c, d) = pair(SocketType::SEQPACKET).unwrap();
        let control = rights(&[c.as_raw_fd(), d.as_raw_fd()]);
        let req = Request {
            id: 7,
            connect: false,
            many: true,
            flags: libc::MSG_DONTWAIT,
            drop_caps: true,
            socket: a,
            msgs: vec![
                Msg {
                    addr: b"\x01\x00/x".to_vec(),
                    pin: None,
                    control,
                    fds: vec![c, d],
                    data: b"one".to_vec(),
                },
                Msg {
                    addr: Vec::new(),
                    pin: Some(b),
                    control: Vec::new(),
                    fds: Vec::new(),
                    data: b"two".to_vec(),
                },
            ],
        };
        let memfd = memfd_for(&req).unwrap();
        assert!(memfd.is_none());
        let (bytes, fds) = encode(&req, memfd.as_ref()).unwrap();
        assert_eq!(fds.len(), 4);
        let got = Request::decode(&bytes, fds.len()).unwrap();
        assert_eq!((got.id, got.connect, got.many), (7, false, true));
        assert_eq!(got.flags, libc::MSG_DONTWAIT);
        assert!(got.drop_caps);
        assert_eq!(got.msgs[0].data, b"one");
        assert_eq!(got.msgs[0].addr, b"\x01\x00/x");
        assert_eq!(got.msgs[1].pin, Some(3));
        let slots = rights_slots(&got.msgs[0].control);
        let idx: Vec<u32> = slots
            .iter()
            .map(|&s| u32::from_ne_bytes(got.msgs[0].control[s..s + 4].try_into().unwrap()))
            .collect();
        assert_eq!(idx, [1, 2]);
        // An index past the descriptors that came is malformed.
        assert!(Request::decode(&bytes, 2).is_none());
    }

    #[test]
    fn a_control_length_that_would_wrap_ends_the_walk() {
        // Issue 29 F7: a valid first message, then one whose cmsg_len is 2^64-16; the old
        // walk computed off + len, wrapped, and read past the buffer.
        let mut control = rights(&[5]);
        let first = rights_slots(&control);
        control.extend((u64::MAX - 15).to_ne_bytes());
        control.extend(libc::SOL_SOCKET.to_ne_bytes());
        control.extend(libc::SCM_RIGHTS.to_ne_bytes());
        control.extend(9i32.to_ne_bytes());
        control.extend([0; 4]);
        assert_eq!(rights_slots(&control), first);
    }

    proptest! {
        #[test]
        fn decoders_never_panic_and_slots_stay_inside(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            nfds in 0usize..8,
        ) {
            let _ = Request::decode(&bytes, nfds);
            let _ = Reply::decode(&bytes);
            for s in rights_slots(&bytes) {
                prop_assert!(s + 4 <= bytes.len());
            }
        }

        #[test]
        fn replies_round_trip(id in any::<u64>(), result in any::<i64>(),
                              lens in proptest::collection::vec(any::<u32>(), 0..16)) {
            let r = Reply { id, result, lens: lens.clone() };
            let back = Reply::decode(&r.encode()).unwrap();
            prop_assert_eq!((back.id, back.result, back.lens), (id, result, lens));
        }
    }
}
