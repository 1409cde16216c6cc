//! A socket inside another process's network namespace: a `NETLINK_SOCK_DIAG` socket for the
//! run's own sockets in a namespace the supervisor did not create (bubblewrap's
//! `--unshare-net`, or one the command made itself: a netlink socket answers for the namespace
//! it was created in), and the listener of `--net proxy` ([`crate::egress`]); no system call
//! creates a socket in a namespace by descriptor.
//!
//! A forked child enters the process's user namespace and then its network namespace
//! (setns(2): a user namespace owned by this uid grants its owner every capability there, so
//! an unprivileged supervisor can enter what its own run created), creates the socket and
//! sends it back over a socket pair (`SCM_RIGHTS`), and exits. It makes itself non-dumpable
//! first: inside the command's user namespace the command may hold `CAP_SYS_PTRACE`, and a
//! non-dumpable process can only be traced with that capability in the initial namespace,
//! so the command cannot take it over and hand back a socket of its choosing. The socket
//! received is checked to be the kind asked for.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use rustix::net::{
    netlink, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketType,
};

fn open_ns(pid: libc::pid_t, ns: &str) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    rustix::fs::open(format!("/proc/{pid}/ns/{ns}"), flags, Mode::empty()).ok()
}

/// The user namespace that owns the namespace `ns`: `NS_GET_USERNS`, ioctl_ns(2).
fn owning_userns(ns: &OwnedFd) -> Option<OwnedFd> {
    // _IO(0xb7, 0x1)
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    // Raw syscall: rustix has no NS_GET_USERNS.
    // Safety: the ioctl takes no argument and returns a new descriptor (or -1), which nothing
    // else owns: it is owned right here.
    unsafe {
        let fd = libc::ioctl(ns.as_raw_fd(), NS_GET_USERNS);
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd))
    }
}

/// The inode of `/proc/WHO/ns/NS` (which namespace it is; WHO a pid), `None` when unreadable.
pub fn ns_id(who: &str, ns: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{who}/ns/{ns}"))
        .ok()
        .map(|m| m.ino())
}

/// A sock_diag socket in the network namespace of process `pid`; `None` when it cannot be
/// made (the namespace belongs to a user namespace this uid does not own, the process is
/// gone, a system call failed).
pub fn diag_of(pid: libc::pid_t) -> Option<OwnedFd> {
    let got = socket_in(pid, super::diag::socket)?;
    (rustix::net::sockopt::socket_domain(&got) == Ok(AddressFamily::NETLINK)
        && rustix::net::sockopt::socket_protocol(&got) == Ok(Some(netlink::SOCK_DIAG)))
    .then_some(got)
}

/// The socket `make` returns when called in the network namespace of process `pid` (and the
/// user namespace that owns it); `None` when it cannot be made. `make` runs in a forked child
/// of this (threaded) process: it must make raw system calls only, no allocation. The caller
/// checks what came back is the kind of socket it asked for.
pub(crate) fn socket_in(
    pid: libc::pid_t,
    make: fn() -> rustix::io::Result<OwnedFd>,
) -> Option<OwnedFd> {
    let net = open_ns(pid, "net")?;
    // The user namespace that owns the network namespace (not necessarily the process's: a
    // user namespace nested inside it has no capability over it).
    let owner = owning_userns(&net)?;
    let user = {
        use std::os::unix::fs::MetadataExt;
        let theirs = super::resolve::stat_fd(&owner).ok().map(|st| st.st_ino);
        let ours = std::fs::metadata("/proc/self/ns/user")
            .ok()
            .map(|m| m.ino());
        // setns into one's own user namespace fails (EINVAL): stay.
        (theirs.is_none() || theirs != ours).then_some(owner)
    };
    let (ours, theirs) = super::helper::pair(SocketType::SEQPACKET).ok()?;
    // Raw syscall: rustix has no fork (only in its unstable runtime API). The child (of a
    // threaded process) makes only raw system calls and exits.
    // Safety: see above; nothing in the child touches a lock, the allocator or Rust state.
    let child = unsafe { libc::fork() };
    if child == 0 {
        let code = match in_child(user.as_ref(), &net, &theirs, make) {
            Ok(()) => 0,
            Err(_) => 1,
        };
        // Raw syscall: rustix's `_exit` (`exit_group`) is only in its unstable runtime API.
        // Safety: `_exit` ends the forked child without running anything of its parent's.
        unsafe { libc::_exit(code) };
    }
    drop(theirs);
    let child = shofer_sys::process::pid(child)?; // fork failed (-1)
    let got = recv_fd(&ours);
    let _ = rustix::process::waitpid(Some(child), rustix::process::WaitOptions::empty());
    got
}

/// The forked child of [`socket_in`]: non-dumpable, into `user` (when given) and `net`, and
/// the socket `make` returns there sent back on `sock`. Raw syscalls only: no allocation.
fn in_child(
    user: Option<&OwnedFd>,
    net: &OwnedFd,
    sock: &OwnedFd,
    make: fn() -> rustix::io::Result<OwnedFd>,
) -> rustix::io::Result<()> {
    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    if let Some(user) = user {
        move_into_link_name_space(user.as_fd(), Some(LinkNameSpaceType::User))?;
    }
    move_into_link_name_space(net.as_fd(), Some(LinkNameSpaceType::Network))?;
    let made = make()?;
    send_fd(sock, &made)
}

/// Sends descriptor `fd` over the unix socket `sock` (one byte plus `SCM_RIGHTS`).
/// Async-signal-safe (called in a forked child): no allocation.
pub(crate) fn send_fd(sock: &OwnedFd, fd: &OwnedFd) -> rustix::io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd.as_fd()];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let byte = [0u8; 1];
    rustix::net::sendmsg(
        sock,
        &[IoSlice::new(&byte)],
        &mut control,
        SendFlags::empty(),
    )
    .map(|_| ())
}

/// Receives one descriptor sent by [`send_fd`]; `None` at end of file (the child failed).
pub(crate) fn recv_fd(sock: &OwnedFd) -> Option<OwnedFd> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let iov = &mut [IoSliceMut::new(&mut byte)];
    let got = rustix::net::recvmsg(sock, iov, &mut control, RecvFlags::CMSG_CLOEXEC).ok()?;
    if got.bytes == 0 {
        return None;
    }
    let fd = match control.drain().next()? {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    };
    fd
}
