//! A `NETLINK_SOCK_DIAG` socket inside another process's network namespace, for the run's own
//! sockets in a namespace the supervisor did not create (bubblewrap's `--unshare-net`, or one
//! the command made itself): a netlink socket answers for the namespace it was created in, and
//! no system call creates a socket in a namespace by descriptor.
//!
//! A forked child enters the process's user namespace and then its network namespace
//! (setns(2): a user namespace owned by this uid grants its owner every capability there, so
//! an unprivileged supervisor can enter what its own run created), creates the socket and
//! sends it back over a socket pair (`SCM_RIGHTS`), and exits. It makes itself non-dumpable
//! first: inside the command's user namespace the command may hold `CAP_SYS_PTRACE`, and a
//! non-dumpable process can only be traced with that capability in the initial namespace,
//! so the command cannot take it over and hand back a socket of its choosing. The socket
//! received is checked to be a `NETLINK_SOCK_DIAG` socket.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn open_ns(pid: libc::pid_t, ns: &str) -> Option<OwnedFd> {
    let path = std::ffi::CString::new(format!("/proc/{pid}/ns/{ns}")).ok()?;
    // Safety: open(2) of a NUL-terminated path; the descriptor is owned right below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    // Safety: the kernel just returned it.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
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
    let net = open_ns(pid, "net")?;
    // The user namespace that owns the network namespace (not necessarily the process's: a
    // user namespace nested inside it has no capability over it): `NS_GET_USERNS`, ioctl_ns(2).
    // _IO(0xb7, 0x1)
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    // Safety: the ioctl returns a new descriptor (or -1); owned right below.
    let owner = unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS) };
    if owner < 0 {
        return None;
    }
    // Safety: the kernel just returned it.
    let owner = unsafe { OwnedFd::from_raw_fd(owner) };
    let user = {
        use std::os::unix::fs::MetadataExt;
        let theirs = super::resolve::stat_fd(owner.as_raw_fd())
            .ok()
            .map(|st| st.st_ino);
        let ours = std::fs::metadata("/proc/self/ns/user")
            .ok()
            .map(|m| m.ino());
        // setns into one's own user namespace fails (EINVAL): stay.
        (theirs.is_none() || theirs != ours).then_some(owner)
    };
    let (ours, theirs) = super::helper::pair(libc::SOCK_SEQPACKET).ok()?;
    let user_fd = user.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    // Raw fork: the child (of a threaded process) makes only raw system calls and exits.
    // Safety: see above; nothing in the child touches a lock, the allocator or Rust state.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // Safety: system calls on descriptors the child inherited; `_exit` never returns.
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0);
            if (user_fd >= 0 && libc::setns(user_fd, libc::CLONE_NEWUSER) != 0)
                || libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET) != 0
            {
                libc::_exit(1);
            }
            let s = libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            );
            if s < 0 {
                libc::_exit(1);
            }
            send_fd(theirs.as_raw_fd(), s);
            libc::_exit(0);
        }
    }
    drop(theirs);
    if child < 0 {
        return None;
    }
    let got = recv_fd(ours.as_raw_fd());
    let mut status = 0;
    // Safety: reaping the child we forked.
    unsafe { libc::waitpid(child, &mut status, 0) };
    let got = got?;
    let fd = got.as_raw_fd();
    (super::helper::sockopt(fd, libc::SO_DOMAIN) == libc::AF_NETLINK
        && super::helper::sockopt(fd, libc::SO_PROTOCOL) == libc::NETLINK_SOCK_DIAG)
        .then_some(got)
}

/// Sends descriptor `fd` over the unix socket `sock` (one byte plus `SCM_RIGHTS`).
///
/// # Safety
/// Async-signal-safe (called in a forked child): no allocation.
unsafe fn send_fd(sock: RawFd, fd: RawFd) {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // CMSG_SPACE(sizeof(int)) = 24 bytes, 8-aligned.
    let mut cbuf = [0u64; 4];
    // Safety: plain-data message header pointing at our buffers; the CMSG macros walk `cbuf`,
    // which is large enough for one descriptor.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        libc::sendmsg(sock, &msg, 0);
    }
}

/// Receives one descriptor sent by [`send_fd`]; `None` at end of file (the child failed).
fn recv_fd(sock: RawFd) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cbuf = [0u64; 4];
    // Safety: an all-zero msghdr is valid; filled with pointers to our buffers below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // Safety: recvmsg(2) into our buffers; MSG_CMSG_CLOEXEC for the received descriptor.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n <= 0 {
        return None;
    }
    // Safety: walking the control buffer the kernel filled.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS
        {
            return None;
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd))
    }
}
