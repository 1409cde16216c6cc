//! The raw kernel interface the harness and its attacks use, in one place (STYLE §6).
//!
//! What is not the attacks' own (errno names, the Landlock ABI probe, the open-descriptor
//! check, `/proc` scans) comes from `shofer-sys`, shared with the sandbox and the engine.
//!
//! Thin wrappers over `libc` that turn `-1`/`errno` into `Result<_, Errno>` and paths into C
//! strings. Nothing here calls into NSS (no `getpwnam`): the binary must run in a busybox VM
//! as a static executable, so users are numeric ids only.

use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// An `errno` value from a failed system call.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current `errno`.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// The symbolic name (`EACCES`), or `errno N` for the uncommon ones.
    pub fn name(self) -> String {
        shofer_sys::errno::name_or_number(self.0)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Result of a raw call.
pub type SysResult<T> = Result<T, Errno>;

/// Turns a path into a C string (paths with NUL bytes cannot reach the kernel; they map to
/// an empty string, which every call refuses with `ENOENT`).
pub fn cstr(p: impl AsRef<Path>) -> CString {
    CString::new(p.as_ref().as_os_str().as_bytes()).unwrap_or_default()
}

/// Maps a `-1` return to the current errno.
pub fn check(r: libc::c_long) -> SysResult<libc::c_long> {
    if r == -1 {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

fn check_i(r: libc::c_int) -> SysResult<libc::c_int> {
    if r == -1 {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

/// `open(2)` with `O_CLOEXEC` added unless `inherit` flags ask otherwise.
pub fn open(p: impl AsRef<Path>, flags: i32, mode: u32) -> SysResult<OwnedFd> {
    let c = cstr(p);
    // Safety: `c` is a valid NUL-terminated string for the duration of the call.
    let fd = check_i(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    // Safety: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(2)` relative to `dirfd`.
pub fn openat(dirfd: RawFd, p: impl AsRef<Path>, flags: i32, mode: u32) -> SysResult<OwnedFd> {
    let c = cstr(p);
    // Safety: `c` outlives the call; a bad `dirfd` is reported by the kernel as EBADF.
    let fd = check_i(unsafe { libc::openat(dirfd, c.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    // Safety: fresh descriptor from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `write(2)` of the whole buffer once (short writes count as success).
pub fn write(fd: RawFd, buf: &[u8]) -> SysResult<usize> {
    // Safety: `buf` is valid for `buf.len()` bytes.
    check(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) as libc::c_long })
        .map(|n| n as usize)
}

/// `read(2)` into `buf`.
pub fn read(fd: RawFd, buf: &mut [u8]) -> SysResult<usize> {
    // Safety: `buf` is valid and writable for `buf.len()` bytes.
    check(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) as libc::c_long })
        .map(|n| n as usize)
}

macro_rules! path_call {
    ($(#[$m:meta])* $name:ident($($arg:ident: $t:ty),*) => $body:expr) => {
        $(#[$m])*
        pub fn $name(p: impl AsRef<Path>, $($arg: $t),*) -> SysResult<()> {
            let c = cstr(p);
            let c = c.as_ptr();
            // Safety: `c` is a valid C string for the duration of the call; the other
            // arguments are plain integers or pointers to live locals.
            check_i(unsafe { $body(c, $($arg),*) }).map(|_| ())
        }
    };
}

path_call!(/// `unlink(2)`.
    unlink() => libc::unlink);
path_call!(/// `rmdir(2)`.
    rmdir() => libc::rmdir);
path_call!(/// `mkdir(2)`.
    mkdir(mode: u32) => libc::mkdir);
path_call!(/// `chmod(2)`.
    chmod(mode: u32) => libc::chmod);
path_call!(/// `chdir(2)`.
    chdir() => libc::chdir);
path_call!(/// `truncate(2)`.
    truncate(len: i64) => libc::truncate);
path_call!(/// `lchown(2)` (never follows a final symlink).
    lchown(uid: u32, gid: u32) => libc::lchown);
path_call!(/// `chown(2)`.
    chown(uid: u32, gid: u32) => libc::chown);
path_call!(/// `mknod(2)`.
    mknod(mode: u32, dev: u64) => libc::mknod);

/// `rename(2)`.
pub fn rename(a: impl AsRef<Path>, b: impl AsRef<Path>) -> SysResult<()> {
    let (a, b) = (cstr(a), cstr(b));
    // Safety: both strings live across the call.
    check_i(unsafe { libc::rename(a.as_ptr(), b.as_ptr()) }).map(|_| ())
}

/// `renameat2(2)` with `flags` (e.g. `RENAME_EXCHANGE`).
pub fn renameat2(a: impl AsRef<Path>, b: impl AsRef<Path>, flags: u32) -> SysResult<()> {
    let (a, b) = (cstr(a), cstr(b));
    // Safety: both strings live across the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    })
    .map(|_| ())
}

/// `link(2)`.
pub fn link(a: impl AsRef<Path>, b: impl AsRef<Path>) -> SysResult<()> {
    let (a, b) = (cstr(a), cstr(b));
    // Safety: both strings live across the call.
    check_i(unsafe { libc::link(a.as_ptr(), b.as_ptr()) }).map(|_| ())
}

/// `linkat(2)` from `a` (followed when `AT_SYMLINK_FOLLOW`) to `b`.
pub fn linkat_follow(a: impl AsRef<Path>, b: impl AsRef<Path>) -> SysResult<()> {
    let (a, b) = (cstr(a), cstr(b));
    // Safety: both strings live across the call.
    check_i(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(|_| ())
}

/// `symlink(2)`: creates `link` pointing at `target`.
pub fn symlink(target: impl AsRef<Path>, link: impl AsRef<Path>) -> SysResult<()> {
    let (t, l) = (cstr(target), cstr(link));
    // Safety: both strings live across the call.
    check_i(unsafe { libc::symlink(t.as_ptr(), l.as_ptr()) }).map(|_| ())
}

/// `setxattr(2)` of a `user.` attribute.
pub fn setxattr(p: impl AsRef<Path>, name: &str, value: &[u8]) -> SysResult<()> {
    let c = cstr(p);
    let n = CString::new(name).unwrap_or_default();
    // Safety: strings and `value` live across the call; the length matches.
    check_i(unsafe {
        libc::setxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
    .map(|_| ())
}

/// `getxattr(2)`: the attribute's size, or the error (e.g. `ENODATA`).
pub fn getxattr_len(p: impl AsRef<Path>, name: &str) -> SysResult<usize> {
    let c = cstr(p);
    let n = CString::new(name).unwrap_or_default();
    // Safety: a NULL buffer with size 0 asks only for the length.
    check(unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) as i64 })
        .map(|n| n as usize)
}

/// `utimensat(2)` setting both times to `secs` (seconds since the epoch).
pub fn utime(p: impl AsRef<Path>, secs: i64) -> SysResult<()> {
    let c = cstr(p);
    let t = libc::timespec {
        tv_sec: secs,
        tv_nsec: 0,
    };
    let times = [t, t];
    // Safety: `times` is a two-element array as the call requires.
    check_i(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) }).map(|_| ())
}

/// `ioctl(2)` with a pointer argument.
pub fn ioctl_ptr<T>(fd: RawFd, req: libc::c_ulong, arg: *mut T) -> SysResult<i32> {
    // Safety: the caller passes a pointer valid for what `req` reads or writes.
    check_i(unsafe { libc::ioctl(fd, req, arg) })
}

/// The raw `ioctl` system call with a full 64-bit request word (to test filters that compare
/// all 64 bits while the kernel only looks at the low 32).
pub fn ioctl_raw64(fd: RawFd, req: u64, arg: *const u8) -> SysResult<i64> {
    // Safety: the argument points at a live byte; the kernel reads at most one.
    check(unsafe { libc::syscall(libc::SYS_ioctl, fd as libc::c_long, req, arg) })
}

/// A new pseudo-terminal: `(master, slave, slave path)`, both ends `O_CLOEXEC`. Done with
/// raw ioctls on `/dev/ptmx` so no `libutil` is needed in a static binary.
pub fn openpty() -> SysResult<(OwnedFd, OwnedFd, String)> {
    let master = open("/dev/ptmx", libc::O_RDWR | libc::O_NOCTTY, 0)?;
    let mut unlock: libc::c_int = 0;
    ioctl_ptr(master.as_raw_fd(), libc::TIOCSPTLCK, &mut unlock)?;
    let mut n: libc::c_uint = 0;
    ioctl_ptr(master.as_raw_fd(), libc::TIOCGPTN as libc::c_ulong, &mut n)?;
    let path = format!("/dev/pts/{n}");
    let slave = open(&path, libc::O_RDWR | libc::O_NOCTTY, 0)?;
    Ok((master, slave, path))
}

/// Puts a terminal into non-canonical, no-echo mode so injected bytes are readable at once.
pub fn tty_raw(fd: RawFd) -> SysResult<()> {
    // Safety: zeroed termios is a valid out-parameter.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // Safety: `t` is a valid termios to fill.
    check_i(unsafe { libc::tcgetattr(fd, &mut t) })?;
    t.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ECHOE | libc::ECHOK | libc::ECHONL);
    t.c_cc[libc::VMIN] = 0;
    t.c_cc[libc::VTIME] = 0;
    // Safety: `t` is a valid termios.
    check_i(unsafe { libc::tcsetattr(fd, libc::TCSANOW, &t) }).map(|_| ())
}

/// Sets or clears `O_NONBLOCK`.
pub fn set_nonblock(fd: RawFd) -> SysResult<()> {
    // Safety: F_GETFL/F_SETFL take and return plain integers.
    let fl = check_i(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // Safety: as above.
    check_i(unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) }).map(|_| ())
}

/// Reads whatever is available without blocking (the fd must be non-blocking).
pub fn drain(fd: RawFd) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = read(fd, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

pub use shofer_sys::fd::fd_is_open;

/// A socket address for an abstract unix name (`name` without the leading NUL) or a path.
pub fn sockaddr_un(name: &[u8], is_abstract: bool) -> (libc::sockaddr_un, libc::socklen_t) {
    // Safety: an all-zero sockaddr_un is valid.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let off = usize::from(is_abstract);
    let n = name.len().min(a.sun_path.len() - 1 - off);
    for (i, b) in name[..n].iter().enumerate() {
        a.sun_path[i + off] = *b as libc::c_char;
    }
    let base = std::mem::size_of::<libc::sa_family_t>();
    let len = if is_abstract {
        base + 1 + n
    } else {
        base + n + 1
    };
    (a, len as libc::socklen_t)
}

/// A new socket (`O_CLOEXEC`).
pub fn socket(domain: i32, ty: i32) -> SysResult<OwnedFd> {
    // Safety: plain integer arguments.
    let fd = check_i(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) })?;
    // Safety: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `connect(2)` of a unix socket to an abstract name or a path.
pub fn unix_connect(name: &[u8], is_abstract: bool) -> SysResult<OwnedFd> {
    let s = socket(libc::AF_UNIX, libc::SOCK_STREAM)?;
    let (a, len) = sockaddr_un(name, is_abstract);
    // Safety: `a` is a valid sockaddr_un of length `len`.
    check_i(unsafe { libc::connect(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    Ok(s)
}

/// `bind(2)` + `listen(2)` of a unix socket (non-blocking, so a later `accept` never hangs).
pub fn unix_listen(name: &[u8], is_abstract: bool) -> SysResult<OwnedFd> {
    let s = socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK)?;
    let (a, len) = sockaddr_un(name, is_abstract);
    // Safety: `a` is a valid sockaddr_un of length `len`.
    check_i(unsafe { libc::bind(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    // Safety: plain integers.
    check_i(unsafe { libc::listen(s.as_raw_fd(), 16) })?;
    Ok(s)
}

fn sockaddr_in(port: u16) -> libc::sockaddr_in {
    // Safety: an all-zero sockaddr_in is valid.
    let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    a.sin_family = libc::AF_INET as libc::sa_family_t;
    a.sin_port = port.to_be();
    a.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
    a
}

/// `connect(2)` to 127.0.0.1:`port`.
pub fn tcp_connect(port: u16) -> SysResult<OwnedFd> {
    let s = socket(libc::AF_INET, libc::SOCK_STREAM)?;
    let a = sockaddr_in(port);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // Safety: `a` is a valid sockaddr_in.
    check_i(unsafe { libc::connect(s.as_raw_fd(), (&a as *const libc::sockaddr_in).cast(), len) })?;
    Ok(s)
}

/// A UDP socket bound to 127.0.0.1 on a free port, non-blocking: the socket and its port.
pub fn udp_bind() -> SysResult<(OwnedFd, u16)> {
    let s = socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK)?;
    let a = sockaddr_in(0);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // Safety: `a` is a valid sockaddr_in.
    check_i(unsafe { libc::bind(s.as_raw_fd(), (&a as *const libc::sockaddr_in).cast(), len) })?;
    let port = bound_port(&s)?;
    Ok((s, port))
}

/// The port an inet socket is bound to (`getsockname(2)`).
fn bound_port(s: &OwnedFd) -> SysResult<u16> {
    let mut got = sockaddr_in(0);
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // Safety: `got` and `len` are valid out-parameters.
    check_i(unsafe {
        libc::getsockname(
            s.as_raw_fd(),
            (&mut got as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    })?;
    Ok(u16::from_be(got.sin_port))
}

/// `socket(AF_INET, SOCK_DGRAM)` and `sendto(2)` of one datagram to 127.0.0.1:`port`.
pub fn udp_send(port: u16) -> SysResult<()> {
    let s = socket(libc::AF_INET, libc::SOCK_DGRAM)?;
    let a = sockaddr_in(port);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let msg = b"shofer-containment datagram";
    // Safety: `msg` and `a` are valid for the lengths given.
    check(unsafe {
        libc::sendto(
            s.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&a as *const libc::sockaddr_in).cast(),
            len,
        )
    } as libc::c_long)
    .map(drop)
}

/// `listen(2)` on a TCP socket never bound (the kernel binds it): the socket and its port.
pub fn tcp_listen_unbound() -> SysResult<(OwnedFd, u16)> {
    let s = socket(libc::AF_INET, libc::SOCK_STREAM)?;
    // Safety: a plain call on our socket.
    check_i(unsafe { libc::listen(s.as_raw_fd(), 1) })?;
    let port = bound_port(&s)?;
    Ok((s, port))
}

/// Whether a datagram waits on the non-blocking socket `s`.
pub fn datagram_arrived(s: &OwnedFd) -> bool {
    let mut buf = [0u8; 64];
    // Safety: a non-blocking receive into our buffer.
    unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) >= 0 }
}

/// `bind(2)` to 127.0.0.1:`port` (0 = any free port) and, if `listen`, `listen(2)`
/// non-blocking. Returns the socket and the bound port.
pub fn tcp_bind(port: u16, listen: bool) -> SysResult<(OwnedFd, u16)> {
    let s = socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK)?;
    let one: libc::c_int = 1;
    // Safety: `one` is a live c_int of the size given.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            4,
        )
    };
    let a = sockaddr_in(port);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // Safety: `a` is a valid sockaddr_in.
    check_i(unsafe { libc::bind(s.as_raw_fd(), (&a as *const libc::sockaddr_in).cast(), len) })?;
    if listen {
        // Safety: plain integers.
        check_i(unsafe { libc::listen(s.as_raw_fd(), 16) })?;
    }
    let port = bound_port(&s)?;
    Ok((s, port))
}

/// Non-blocking `accept(2)`: how many connections are queued on a listener (each accepted
/// and closed).
pub fn accept_all(listener: RawFd) -> usize {
    let mut n = 0;
    loop {
        // Safety: NULL address pointers are allowed.
        let fd = unsafe {
            libc::accept4(
                listener,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            return n;
        }
        // Safety: we own the accepted descriptor.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        n += 1;
    }
}

/// `kill(2)`.
pub fn kill(pid: i32, sig: i32) -> SysResult<()> {
    // Safety: plain integers.
    check_i(unsafe { libc::kill(pid, sig) }).map(|_| ())
}

/// `fork(2)`. The child must only call async-signal-safe functions or `exec`/`_exit`
/// (the attacks are single-threaded, so in practice it may do more).
pub fn fork() -> SysResult<i32> {
    // Safety: the callers are single-threaded attack processes.
    check_i(unsafe { libc::fork() })
}

/// `_exit(2)`.
pub fn exit_now(code: i32) -> ! {
    // Safety: ends the process without running destructors (a forked child).
    unsafe { libc::_exit(code) }
}

/// The `(uid, gid)` of this process.
pub fn ids() -> (u32, u32) {
    // Safety: these never fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// `execv(2)` of `prog` with `args` (argv[0] included). Returns only on failure.
pub fn execv(prog: &Path, args: &[String]) -> Errno {
    let p = cstr(prog);
    let cargs: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.as_bytes()).unwrap_or_default())
        .collect();
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // Safety: NULL-terminated argv of live C strings.
    unsafe { libc::execv(p.as_ptr(), ptrs.as_ptr()) };
    Errno::last()
}

/// `connect(2)` of an existing unix socket `fd` to an abstract name or a path.
pub fn unix_connect_fd(fd: RawFd, name: &[u8], is_abstract: bool) -> SysResult<()> {
    let (a, len) = sockaddr_un(name, is_abstract);
    // Safety: `a` is a valid sockaddr_un of length `len`.
    check_i(unsafe { libc::connect(fd, (&a as *const libc::sockaddr_un).cast(), len) }).map(|_| ())
}

/// `sendto(2)` of `data` with `MSG_FASTOPEN` to 127.0.0.1:`port` on a new TCP socket: the
/// connection is made by the send itself (TCP Fast Open), never by a `connect(2)`. Returns
/// the connected socket.
pub fn tcp_fastopen_sendto(port: u16, data: &[u8]) -> SysResult<OwnedFd> {
    let s = socket(libc::AF_INET, libc::SOCK_STREAM)?;
    let a = sockaddr_in(port);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // Safety: `data` and `a` live across the call; the lengths match.
    check(unsafe {
        libc::sendto(
            s.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_FASTOPEN,
            (&a as *const libc::sockaddr_in).cast(),
            len,
        ) as libc::c_long
    })?;
    Ok(s)
}

// Keyrings (keyctl(2), add_key(2)): numbers from <linux/keyctl.h>.
const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
const KEYCTL_READ: libc::c_long = 11;
const KEYCTL_INVALIDATE: libc::c_long = 21;

/// `keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)`: the calling thread gets a new anonymous
/// session keyring, which the processes it starts inherit (across a uid change too). Returns
/// its serial.
pub fn join_new_session_keyring() -> SysResult<i32> {
    // Safety: a NULL name asks for an anonymous keyring; no memory is passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    })
    .map(|n| n as i32)
}

/// `add_key("user", desc, payload, KEY_SPEC_SESSION_KEYRING)`: a key in the caller's session
/// keyring (possessed by every process that inherits that keyring). Returns its serial.
pub fn add_user_key(desc: &str, payload: &[u8]) -> SysResult<i32> {
    let ty = CString::new("user").unwrap_or_default();
    let d = CString::new(desc).unwrap_or_default();
    // Safety: the strings and `payload` live across the call; the length matches.
    check(unsafe {
        libc::syscall(
            libc::SYS_add_key,
            ty.as_ptr(),
            d.as_ptr(),
            payload.as_ptr(),
            payload.len(),
            KEY_SPEC_SESSION_KEYRING,
        )
    })
    .map(|n| n as i32)
}

/// `keyctl(KEYCTL_READ)`: a key's payload (at most 4096 bytes).
pub fn read_key(id: i32) -> SysResult<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    // Safety: `buf` is writable for its length.
    let n = check(unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_READ,
            libc::c_long::from(id),
            buf.as_mut_ptr(),
            buf.len(),
        )
    })?;
    buf.truncate((n as usize).min(4096));
    Ok(buf)
}

/// `keyctl(KEYCTL_INVALIDATE)`: the key is gone at once (and garbage-collected).
pub fn invalidate_key(id: i32) -> SysResult<()> {
    // Safety: plain integers.
    check(unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_INVALIDATE, libc::c_long::from(id)) })
        .map(|_| ())
}

/// A raw system call with up to four integer arguments, checked.
fn syscall4(
    nr: libc::c_long,
    a: libc::c_long,
    b: libc::c_long,
    c: libc::c_long,
    d: libc::c_long,
) -> SysResult<libc::c_long> {
    // Safety: callers pass integers, or pointers to live locals the call only reads.
    check(unsafe { libc::syscall(nr, a, b, c, d) })
}

/// `tkill(2)`.
pub fn tkill(tid: i32, sig: i32) -> SysResult<()> {
    syscall4(libc::SYS_tkill, tid.into(), sig.into(), 0, 0).map(|_| ())
}

/// `tgkill(2)`.
pub fn tgkill(tgid: i32, tid: i32, sig: i32) -> SysResult<()> {
    syscall4(libc::SYS_tgkill, tgid.into(), tid.into(), sig.into(), 0).map(|_| ())
}

/// A `siginfo_t` for `rt_sigqueueinfo` as `sigqueue(3)` fills it (`si_code = SI_QUEUE`: the
/// kernel refuses other codes from a process to another).
fn queue_info(sig: i32) -> libc::siginfo_t {
    // Safety: siginfo_t is plain data; all-zero is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    info.si_signo = sig;
    info.si_code = -1; // SI_QUEUE
    info
}

/// `rt_sigqueueinfo(2)`.
pub fn rt_sigqueueinfo(pid: i32, sig: i32) -> SysResult<()> {
    let info = queue_info(sig);
    let p = std::ptr::addr_of!(info) as libc::c_long;
    syscall4(libc::SYS_rt_sigqueueinfo, pid.into(), sig.into(), p, 0).map(|_| ())
}

/// `rt_tgsigqueueinfo(2)`.
pub fn rt_tgsigqueueinfo(tgid: i32, tid: i32, sig: i32) -> SysResult<()> {
    let info = queue_info(sig);
    let p = std::ptr::addr_of!(info) as libc::c_long;
    syscall4(
        libc::SYS_rt_tgsigqueueinfo,
        tgid.into(),
        tid.into(),
        sig.into(),
        p,
    )
    .map(|_| ())
}

/// `pidfd_open(2)`.
pub fn pidfd_open(pid: i32) -> SysResult<OwnedFd> {
    let fd = syscall4(libc::SYS_pidfd_open, pid.into(), 0, 0, 0)?;
    // Safety: a new descriptor the call returned, owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `pidfd_send_signal(2)` (no siginfo, no flags).
pub fn pidfd_send_signal(fd: RawFd, sig: i32) -> SysResult<()> {
    syscall4(libc::SYS_pidfd_send_signal, fd.into(), sig.into(), 0, 0).map(|_| ())
}

/// `fcntl(2)` with an integer argument.
pub fn fcntl_int(fd: RawFd, cmd: i32, arg: libc::c_long) -> SysResult<libc::c_long> {
    syscall4(libc::SYS_fcntl, fd.into(), cmd.into(), arg, 0)
}

/// `F_OWNER_PID` of `struct f_owner_ex` (fcntl(2); not in every libc target).
pub const F_OWNER_PID: i32 = 1;
const F_SETOWN_EX: i32 = 15;
const F_GETOWN_EX: i32 = 16;

/// `fcntl(F_SETOWN_EX)` / `fcntl(F_GETOWN_EX)`: `(type, pid)`.
pub fn fcntl_own_ex(fd: RawFd, set: Option<(i32, i32)>) -> SysResult<(i32, i32)> {
    #[repr(C)]
    struct FOwnerEx {
        ty: i32,
        pid: i32,
    }
    let (cmd, mut own) = match set {
        Some((ty, pid)) => (F_SETOWN_EX, FOwnerEx { ty, pid }),
        None => (F_GETOWN_EX, FOwnerEx { ty: 0, pid: 0 }),
    };
    let p = std::ptr::addr_of_mut!(own) as libc::c_long;
    syscall4(libc::SYS_fcntl, fd.into(), cmd.into(), p, 0)?;
    Ok((own.ty, own.pid))
}

/// `pipe2(2)`: `(read end, write end)`.
pub fn pipe(flags: i32) -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // Safety: `fds` is a live array of two ints.
    check_i(unsafe { libc::pipe2(fds.as_mut_ptr(), flags) })?;
    // Safety: two new descriptors the call returned.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `fchmod(2)`.
pub fn fchmod(fd: RawFd, mode: u32) -> SysResult<()> {
    // Safety: plain integers.
    check_i(unsafe { libc::fchmod(fd, mode) }).map(|_| ())
}

/// `fchmodat(AT_FDCWD, p, mode, 0)`.
pub fn fchmodat(p: impl AsRef<Path>, mode: u32) -> SysResult<()> {
    let c = cstr(p);
    // Safety: `c` is a valid C string for the duration of the call.
    check_i(unsafe { libc::fchmodat(libc::AT_FDCWD, c.as_ptr(), mode, 0) }).map(|_| ())
}

/// `creat(2)`, the system call itself (libc makes it an `openat`).
pub fn creat(p: impl AsRef<Path>, mode: u32) -> SysResult<OwnedFd> {
    let c = cstr(p);
    let fd = syscall4(
        libc::SYS_creat,
        c.as_ptr() as libc::c_long,
        mode.into(),
        0,
        0,
    )?;
    // Safety: a new descriptor the call returned, owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}
