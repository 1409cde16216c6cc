//! `NETLINK_SOCK_DIAG` for unix sockets (sock_diag(7)): what a socket of this run is bound to,
//! straight from the kernel (a path can be swapped; the socket's binding cannot).

use std::os::fd::OwnedFd;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const UDIAG_SHOW_NAME: u32 = 0x1;
const UDIAG_SHOW_VFS: u32 = 0x2;
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_VFS: u16 = 1;

/// What the kernel says about one unix socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No such socket (closed), or not in the diag socket's network namespace.
    Gone,
    /// The socket exists; its bound file (kernel `dev_t`, inode) and its address.
    Found {
        /// The socket file, for a pathname socket.
        vfs: Option<(u32, u32)>,
        /// The address's `sun_path` bytes (a leading NUL for abstract); `None` unbound.
        name: Option<Vec<u8>>,
    },
    /// The kernel did not answer usefully (treated as not ours).
    Unknown,
}

/// A `NETLINK_SOCK_DIAG` socket in the supervisor's network namespace.
pub fn open() -> Option<OwnedFd> {
    socket().ok()
}

/// `socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)`: allocation-free (also
/// called in the forked child of [`super::netns::diag_of`]).
pub(super) fn socket() -> rustix::io::Result<OwnedFd> {
    use rustix::net::{netlink, AddressFamily, SocketFlags, SocketType};
    rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )
}

/// Looks up the unix socket with socket inode `sock_ino` (`st_ino` of the socket): the file it
/// is bound to (device in the kernel's `MAJOR<<20|MINOR` encoding, inode) and its name.
pub fn lookup(diag: &OwnedFd, sock_ino: u32) -> Lookup {
    let mut req = Vec::with_capacity(40);
    req.extend_from_slice(&40u32.to_ne_bytes()); // nlmsg_len
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // seq
    req.extend_from_slice(&0u32.to_ne_bytes()); // pid
    req.push(libc::AF_UNIX as u8); // sdiag_family
    req.push(0); // sdiag_protocol
    req.extend_from_slice(&[0, 0]); // pad
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // udiag_states: all
    req.extend_from_slice(&sock_ino.to_ne_bytes());
    req.extend_from_slice(&(UDIAG_SHOW_VFS | UDIAG_SHOW_NAME).to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // SOCK_DIAG_NOCOOKIE
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    // To the kernel: no address needed for a netlink socket sending to pid 0.
    if send(diag, &req).is_err() {
        return Lookup::Unknown;
    }
    let mut buf = vec![0u8; 8192];
    let n = match recv(diag, &mut buf) {
        Ok(n) if n >= 16 => n,
        _ => return Lookup::Unknown,
    };
    parse_reply(buf.get(..n).unwrap_or_default(), sock_ino)
}

/// The answer in `buf`, the kernel's reply to [`lookup`] of `sock_ino`: an `NLMSG_ERROR`, or
/// an `nlmsghdr` (16 bytes), a `unix_diag_msg` (16) and its attributes aligned to 4. The
/// framing is the kernel's, but a name attribute holds what the command bound: every read is
/// checked, and anything malformed is [`Lookup::Unknown`].
pub fn parse_reply(buf: &[u8], sock_ino: u32) -> Lookup {
    let at = |o: usize, n: usize| buf.get(o..o.checked_add(n)?);
    let u32_at = |o: usize| Some(u32::from_ne_bytes(at(o, 4)?.try_into().ok()?));
    let u16_at = |o: usize| Some(u16::from_ne_bytes(at(o, 2)?.try_into().ok()?));
    let (Some(len), Some(kind)) = (u32_at(0), u16_at(4)) else {
        return Lookup::Unknown;
    };
    let len = len as usize;
    if kind == NLMSG_ERROR && len >= 20 {
        return match u32_at(16) {
            Some(e) if (e as i32).checked_neg() == Some(libc::ENOENT) => Lookup::Gone,
            _ => Lookup::Unknown,
        };
    }
    if len > buf.len() || len < 32 || u32_at(16 + 4) != Some(sock_ino) {
        return Lookup::Unknown;
    }
    let (mut vfs, mut name) = (None, None);
    let mut off = 32usize;
    while off.saturating_add(4) <= len {
        let (Some(alen), Some(atype)) = (u16_at(off), u16_at(off + 2)) else {
            break;
        };
        let alen = usize::from(alen);
        let Some(end) = off.checked_add(alen).filter(|&e| alen >= 4 && e <= len) else {
            break;
        };
        if atype == UNIX_DIAG_VFS && alen >= 12 {
            vfs = u32_at(off + 8).zip(u32_at(off + 4));
        } else if atype == UNIX_DIAG_NAME {
            name = buf.get(off + 4..end).map(<[u8]>::to_vec);
        }
        off = off.saturating_add((alen + 3) & !3);
    }
    Lookup::Found { vfs, name }
}

/// `st_dev` (glibc encoding) to the kernel's internal `dev_t` (`MAJOR<<20 | MINOR`), as
/// `unix_diag_vfs.udiag_vfs_dev` reports it.
pub fn kernel_dev(st_dev: u64) -> u32 {
    let major = rustix::fs::major(st_dev);
    let minor = rustix::fs::minor(st_dev);
    (major << 20) | minor
}

/// The path a listener recorded when it bound the socket file `vfs` (kernel `dev_t`,
/// inode), from a dump of this network namespace's unix sockets: where the socket's own
/// process put it, which a link or rename of the file does not change. `None` when no
/// socket here is bound to that file, or the kernel does not answer.
pub fn bound_name_of(diag: &OwnedFd, vfs: (u32, u32)) -> Option<Vec<u8>> {
    const NLM_F_DUMP: u16 = 0x300;
    const NLMSG_DONE: u16 = 3;
    let mut req = Vec::with_capacity(40);
    req.extend_from_slice(&40u32.to_ne_bytes()); // nlmsg_len
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req.extend_from_slice(&2u32.to_ne_bytes()); // seq
    req.extend_from_slice(&0u32.to_ne_bytes()); // pid
    req.push(libc::AF_UNIX as u8);
    req.push(0);
    req.extend_from_slice(&[0, 0]);
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    req.extend_from_slice(&0u32.to_ne_bytes()); // any inode
    req.extend_from_slice(&(UDIAG_SHOW_VFS | UDIAG_SHOW_NAME).to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    if send(diag, &req).is_err() {
        return None;
    }
    let mut buf = vec![0u8; 32 << 10];
    let mut found = None;
    // A dump ends with NLMSG_DONE; a bound on the parts read keeps a misbehaving answer finite.
    for _ in 0..100_000 {
        let Ok(n) = recv(diag, &mut buf) else {
            return None;
        };
        let mut msgs = &buf[..n];
        while let Some((ty, body, rest)) = netlink_message(msgs) {
            msgs = rest;
            match ty {
                NLMSG_DONE => return found,
                NLMSG_ERROR => return None,
                SOCK_DIAG_BY_FAMILY if found.is_none() => {
                    let (v, name) = unix_attributes(body);
                    if v == Some(vfs) {
                        found = name;
                    }
                }
                _ => {}
            }
        }
        if n == 0 {
            return found;
        }
    }
    None
}

/// One request to the kernel on `diag`.
fn send(diag: &OwnedFd, req: &[u8]) -> rustix::io::Result<usize> {
    rustix::net::send(diag, req, rustix::net::SendFlags::empty())
}

/// One answer from the kernel on `diag` into `buf`: the bytes received (at most `buf.len()`).
fn recv(diag: &OwnedFd, buf: &mut [u8]) -> rustix::io::Result<usize> {
    rustix::net::recv(diag, buf, rustix::net::RecvFlags::empty()).map(|(n, _)| n)
}

/// The first netlink message of `b`: its type, its body after the 16-byte header, and the
/// rest (4-aligned); `None` when `b` holds no whole message.
fn netlink_message(b: &[u8]) -> Option<(u16, &[u8], &[u8])> {
    let len = u32::from_ne_bytes(b.get(0..4)?.try_into().ok()?) as usize;
    let ty = u16::from_ne_bytes(b.get(4..6)?.try_into().ok()?);
    let body = b.get(16..len)?;
    let next = len.checked_add(3)? & !3;
    Some((ty, body, b.get(next..).unwrap_or(&[])))
}

/// The socket file and name attributes of a `unix_diag_msg` body (16 bytes, then
/// 4-aligned attributes).
fn unix_attributes(body: &[u8]) -> (Option<(u32, u32)>, Option<Vec<u8>>) {
    let (mut vfs, mut name) = (None, None);
    let mut attrs = body.get(16..).unwrap_or(&[]);
    while let Some(head) = attrs.get(0..4) {
        let alen = u16::from_ne_bytes([head[0], head[1]]) as usize;
        let atype = u16::from_ne_bytes([head[2], head[3]]);
        let Some(value) = attrs.get(4..alen.max(4)) else {
            break;
        };
        let word = |o: usize| {
            value
                .get(o..o + 4)
                .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
        };
        if atype == UNIX_DIAG_VFS {
            if let (Some(ino), Some(dev)) = (word(0), word(4)) {
                vfs = Some((dev, ino));
            }
        } else if atype == UNIX_DIAG_NAME {
            name = Some(value.to_vec());
        }
        if alen < 4 {
            break;
        }
        attrs = attrs.get((alen + 3) & !3..).unwrap_or(&[]);
    }
    (vfs, name)
}
