//! A second seccomp filter, for what the command could do to the host's state through its
//! own credentials (the hardening tier, docs/ARCHITECTURE.md):
//!
//! - **keyrings**: `add_key`, `request_key` and `keyctl` fail with `EPERM`. The command
//!   inherits the caller's session keyring, so it *possesses* the user's keys and could read,
//!   update or revoke them (keyrings(7)); neither Landlock nor the namespaces scope keys. The
//!   same three calls are refused by Docker's and Podman's default profiles.
//! - **identities**: `setuid`, `setgid`, `setreuid`, `setregid`, `setresuid` and `setresgid`
//!   with an id other than the caller's own (or -1, "unchanged") fail with `EPERM`. With every
//!   capability dropped the kernel refuses them anyway, but in a user namespace it answers
//!   `EINVAL` for an id outside the map (credentials(7)), which programs read as a bug rather
//!   than as "not permitted".
//! - **other processes' limits** (the Landlock backend, which has no PID namespace):
//!   `prlimit64` setting a limit of a process other than the caller (`pid != 0`) fails with
//!   `EPERM`. Landlock does not control it, and a command could starve its own supervisor or
//!   guardian (`RLIMIT_NOFILE` of 0: they could no longer find and kill the tree). Reading
//!   another process's limits, and setting one's own (`setrlimit`, `prlimit(0, …)`), work.
//! - **set-user-ID and set-group-ID files**: `chmod`, `fchmod`, `fchmodat`, `fchmodat2` with
//!   `S_ISUID` or `S_ISGID` in the mode, and `open`, `openat`, `creat`, `mknod`, `mknodat`
//!   creating a file with either, fail with `EPERM` (the mode is a value: decided on what the
//!   kernel would use, with no window). `openat2` fails with `ENOSYS` (its mode lies in a
//!   structure the filter cannot read; callers fall back to `openat`), and so does
//!   `io_uring_setup` (`IORING_OP_OPENAT` would create without a call). A set-ID file the
//!   command left in the worktree or `/tmp` would run with its owner's (or group's) rights for
//!   whoever executes it later: root's, for a root caller. `tar xp` restores owners then, not
//!   these bits, and says so.
//! - **MPTCP** (`--net deny`): `socket(…, IPPROTO_MPTCP)` fails with `EPROTONOSUPPORT`, as on
//!   a kernel without MPTCP, so programs fall back to TCP. Landlock's TCP rules cover
//!   `IPPROTO_TCP` sockets only.
//! - **every other network socket** (`--net deny` on Landlock alone, which keeps the host's
//!   network namespace and whose rules name TCP ports only): `socket(2)` is an allow-list —
//!   `AF_UNIX` (the gate judges its connects), `AF_NETLINK` (the kernel's own information:
//!   `getaddrinfo` asks it for the interfaces) and `AF_INET`/`AF_INET6` `SOCK_STREAM` with TCP
//!   (which Landlock refuses at `connect` and `bind`). A UDP, raw, ICMP, SCTP or other inet
//!   socket fails with `EACCES`; any other family (packet, vsock, TIPC, Bluetooth…) with
//!   `EAFNOSUPPORT`, as on a kernel without it. `io_uring_setup` fails with `ENOSYS`: its
//!   `IORING_OP_SOCKET` would make a socket without a `socket(2)` call.
//! - **TCP Fast Open** (`--net proxy` on Landlock alone): `sendto`, `sendmsg` and `sendmmsg`
//!   with `MSG_FASTOPEN` in their flags, and `setsockopt(IPPROTO_TCP, TCP_FASTOPEN_CONNECT)`,
//!   fail with `EACCES`: Fast Open sends data with the SYN, a connection made without the
//!   `connect` the gate judges.
//!
//! x86-64 only. It starts with [`crate::seccomp::NATIVE_ONLY`], as every filter of this
//! crate: an i386 call (`int $0x80`) kills the process and an x32 call fails with `ENOSYS`,
//! so the numbers below are the only ones that reach these calls.
//!
//! Installed wherever the terminal-injection filter is ([`crate::seccomp::FILTER_AVAILABLE`]).

#[cfg(target_arch = "x86_64")]
pub use x86_64::install;

/// What the host filter refuses besides the keyring calls.
#[derive(Clone, Copy, Debug, Default)]
pub struct Refuse {
    /// `set*id` to ids other than the caller's own.
    pub id_changes: bool,
    /// Files made set-user-ID or set-group-ID.
    pub setid_files: bool,
    /// MPTCP sockets.
    pub mptcp: bool,
    /// Every socket but unix, netlink and TCP ones (and `io_uring`).
    pub other_sockets: bool,
    /// `prlimit64` setting another process's limits.
    pub foreign_prlimit: bool,
    /// TCP Fast Open: `MSG_FASTOPEN` sends and `TCP_FASTOPEN_CONNECT`.
    pub fastopen: bool,
}

#[cfg(target_arch = "x86_64")]
mod x86_64 {
    use std::io;

    /// Offset of `args[i]`'s low 32 bits (little-endian): uid_t and gid_t are 32 bits and the
    /// kernel truncates the argument to them.
    const fn off_arg_lo(i: u32) -> u32 {
        16 + 8 * i
    }

    const NR_ADD_KEY: u32 = 248;
    const NR_REQUEST_KEY: u32 = 249;
    const NR_KEYCTL: u32 = 250;
    const NR_SOCKET: u32 = 41;
    const NR_PRLIMIT64: u32 = 302;
    const IPPROTO_MPTCP: u32 = 262;
    const NR_IO_URING_SETUP: u32 = 425;
    /// (syscall, the argument holding the flags) of the sends that take `MSG_FASTOPEN`.
    const SEND_CALLS: [(u32, u32); 3] = [
        (44, 3),  // sendto
        (46, 2),  // sendmsg
        (307, 3), // sendmmsg
    ];
    const NR_SETSOCKOPT: u32 = 54;
    const MSG_FASTOPEN: u32 = 0x2000_0000;
    const TCP_FASTOPEN_CONNECT: u32 = 30;
    /// (syscall, the argument holding the mode) of the chmod family and of `creat`, `mknod`,
    /// `mknodat`.
    const MODE_CALLS: [(u32, u32); 7] = [
        (90, 1),  // chmod
        (91, 1),  // fchmod
        (268, 2), // fchmodat
        (452, 2), // fchmodat2
        (85, 1),  // creat
        (133, 1), // mknod
        (259, 2), // mknodat
    ];
    /// (syscall, flags argument, mode argument) of the opens that may create.
    const OPEN_CALLS: [(u32, u32, u32); 2] = [
        (2, 1, 2),   // open
        (257, 2, 3), // openat
    ];
    const NR_OPENAT2: u32 = 437;
    /// `S_ISUID | S_ISGID`.
    const SETID_BITS: u32 = 0o6000;
    /// `O_CREAT | __O_TMPFILE`: the flags with which an open makes a file.
    const CREATING: u32 = 0o100 | 0o20000000;
    /// `socket(2)`'s type argument: the type is its low 4 bits (`SOCK_NONBLOCK`,
    /// `SOCK_CLOEXEC` above them).
    const SOCK_TYPE_MASK: u32 = 0xf;
    /// (syscall, how many id arguments, uid or gid)
    const ID_CALLS: [(u32, u32, bool); 6] = [
        (105, 1, true),  // setuid
        (106, 1, false), // setgid
        (113, 2, true),  // setreuid
        (114, 2, false), // setregid
        (117, 3, true),  // setresuid
        (119, 3, false), // setresgid
    ];
    const UNCHANGED: u32 = u32::MAX;

    const DENY: usize = 0;
    const ALLOW: usize = 1;
    const NO_PROTOCOL: usize = 2;
    const SOCKET: usize = 3;
    const PRLIMIT: usize = 4;
    const NO_FAMILY: usize = 5;
    const REFUSED: usize = 6;
    const INET: usize = 7;
    const NO_SYSCALL: usize = 8;
    const SETSOCKOPT: usize = 9;

    /// The program: [`crate::seccomp::NATIVE_ONLY`] (which leaves the syscall number
    /// loaded), keyrings refused, and with `ids = Some((uid, gid))` identity changes to other
    /// ids too; MPTCP sockets and other processes' limits as `refuse` says.
    pub(super) fn program(
        ids: Option<(u32, u32)>,
        refuse: super::Refuse,
    ) -> Vec<libc::sock_filter> {
        let mut out = crate::seccomp::NATIVE_ONLY.to_vec();
        out.extend(body(ids, refuse));
        out
    }

    fn body(ids: Option<(u32, u32)>, refuse: super::Refuse) -> Vec<libc::sock_filter> {
        use crate::seccomp::{assemble, Insn::*};
        let mut p = vec![
            Jeq(NR_ADD_KEY, Some(DENY), None),
            Jeq(NR_REQUEST_KEY, Some(DENY), None),
            Jeq(NR_KEYCTL, Some(DENY), None),
        ];
        if refuse.mptcp || refuse.other_sockets {
            p.push(Jeq(NR_SOCKET, Some(SOCKET), None));
        }
        if refuse.other_sockets || refuse.setid_files {
            p.push(Jeq(NR_IO_URING_SETUP, Some(NO_SYSCALL), None));
        }
        if refuse.setid_files {
            p.push(Jeq(NR_OPENAT2, Some(NO_SYSCALL), None));
            for (i, (nr, _)) in MODE_CALLS.iter().enumerate() {
                p.push(Jeq(*nr, Some(30 + i), None));
            }
            for (i, (nr, _, _)) in OPEN_CALLS.iter().enumerate() {
                p.push(Jeq(*nr, Some(40 + i), None));
            }
        }
        if refuse.foreign_prlimit {
            p.push(Jeq(NR_PRLIMIT64, Some(PRLIMIT), None));
        }
        if refuse.fastopen {
            for (i, (nr, _)) in SEND_CALLS.iter().enumerate() {
                p.push(Jeq(*nr, Some(50 + i), None));
            }
            p.push(Jeq(NR_SETSOCKOPT, Some(SETSOCKOPT), None));
        }
        if ids.is_some() {
            for (i, (nr, _, _)) in ID_CALLS.iter().enumerate() {
                p.push(Jeq(*nr, Some(10 + i), None));
            }
        }
        p.push(Ret(libc::SECCOMP_RET_ALLOW));
        // socket(domain, type, protocol): ints, whose low halves the kernel reads.
        if refuse.other_sockets {
            let (unix, netlink) = (libc::AF_UNIX as u32, libc::AF_NETLINK as u32);
            let (inet, inet6) = (libc::AF_INET as u32, libc::AF_INET6 as u32);
            p.extend([
                Label(SOCKET),
                Load(off_arg_lo(0)),
                Jeq(unix, Some(ALLOW), None),
                Jeq(netlink, Some(ALLOW), None),
                Jeq(inet, Some(INET), None),
                Jeq(inet6, Some(INET), Some(NO_FAMILY)),
                Label(INET),
                Load(off_arg_lo(1)),
                And(SOCK_TYPE_MASK),
                Jeq(libc::SOCK_STREAM as u32, None, Some(REFUSED)),
                Load(off_arg_lo(2)),
                Jeq(0, Some(ALLOW), None),
                Jeq(libc::IPPROTO_TCP as u32, Some(ALLOW), None),
                Jeq(IPPROTO_MPTCP, Some(NO_PROTOCOL), Some(REFUSED)),
            ]);
        } else if refuse.mptcp {
            p.extend([
                Label(SOCKET),
                Load(off_arg_lo(2)),
                Jeq(IPPROTO_MPTCP, Some(NO_PROTOCOL), Some(ALLOW)),
            ]);
        }
        if refuse.foreign_prlimit {
            // prlimit64(pid, resource, new, old): pid 0 is the caller; a NULL `new` only reads.
            p.extend([
                Label(PRLIMIT),
                Load(off_arg_lo(0)),
                Jeq(0, Some(ALLOW), None),
                Load(off_arg_lo(2)),
                Jeq(0, None, Some(DENY)),
                Load(off_arg_lo(2) + 4),
                Jeq(0, Some(ALLOW), Some(DENY)),
            ]);
        }
        if refuse.fastopen {
            // Flags, level and option name are ints: their low halves are what the kernel reads.
            for (i, (_, arg)) in SEND_CALLS.iter().enumerate() {
                p.extend([
                    Label(50 + i),
                    Load(off_arg_lo(*arg)),
                    Jset(MSG_FASTOPEN, Some(REFUSED), Some(ALLOW)),
                ]);
            }
            p.extend([
                Label(SETSOCKOPT),
                Load(off_arg_lo(1)),
                Jeq(libc::IPPROTO_TCP as u32, None, Some(ALLOW)),
                Load(off_arg_lo(2)),
                Jeq(TCP_FASTOPEN_CONNECT, Some(REFUSED), Some(ALLOW)),
            ]);
        }
        if refuse.setid_files {
            // The mode is a umode_t: its low half is what the kernel reads.
            for (i, (_, arg)) in MODE_CALLS.iter().enumerate() {
                p.extend([
                    Label(30 + i),
                    Load(off_arg_lo(*arg)),
                    Jset(SETID_BITS, Some(DENY), Some(ALLOW)),
                ]);
            }
            for (i, (_, flags, mode)) in OPEN_CALLS.iter().enumerate() {
                p.extend([
                    Label(40 + i),
                    Load(off_arg_lo(*flags)),
                    Jset(CREATING, None, Some(ALLOW)),
                    Load(off_arg_lo(*mode)),
                    Jset(SETID_BITS, Some(DENY), Some(ALLOW)),
                ]);
            }
        }
        let (uid, gid) = ids.unwrap_or((0, 0));
        for (i, (_, args, is_uid)) in ID_CALLS.iter().enumerate().filter(|_| ids.is_some()) {
            let own = if *is_uid { uid } else { gid };
            p.push(Label(10 + i));
            for a in 0..*args {
                let next = 100 + 10 * i + a as usize;
                p.push(Load(off_arg_lo(a)));
                p.push(Jeq(own, Some(next), None));
                p.push(Jeq(UNCHANGED, None, Some(DENY)));
                p.push(Label(next));
            }
            p.push(Ret(libc::SECCOMP_RET_ALLOW));
        }
        p.push(Label(DENY));
        p.push(Ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
        p.push(Label(ALLOW));
        p.push(Ret(libc::SECCOMP_RET_ALLOW));
        p.push(Label(NO_PROTOCOL));
        p.push(Ret(libc::SECCOMP_RET_ERRNO | libc::EPROTONOSUPPORT as u32));
        p.push(Label(NO_FAMILY));
        p.push(Ret(libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32));
        p.push(Label(REFUSED));
        p.push(Ret(libc::SECCOMP_RET_ERRNO | libc::EACCES as u32));
        p.push(Label(NO_SYSCALL));
        p.push(Ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
        assemble(&p)
    }

    /// Installs the filter on the calling thread (inherited by children, kept across exec):
    /// keyrings refused, and with `refuse.id_changes` every set*id call to an id other than
    /// the thread's own real uid/gid (leave it off when capabilities are kept on purpose,
    /// `--keep-caps`); MPTCP sockets and other processes' limits as `refuse` says. Requires
    /// `no_new_privs` or `CAP_SYS_ADMIN`.
    ///
    /// # Errors
    /// The seccomp(2) error.
    pub fn install(refuse: super::Refuse) -> io::Result<()> {
        let ids = refuse.id_changes.then(|| {
            (
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            )
        });
        let filter = program(ids, refuse);
        crate::seccomp::install(&filter, 0).map(drop)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        use crate::seccomp::verdict;

        const X86: u32 = 0xC000_003E;
        const I386: u32 = 0x4000_0003;
        const X32_SYSCALL_BIT: u32 = 0x4000_0000;

        fn decide(prog: &[libc::sock_filter], arch: u32, nr: u32, ids: &[u32]) -> u32 {
            let mut args = [0u64; 6];
            for (a, v) in args.iter_mut().zip(ids) {
                *a = u64::from(*v);
            }
            verdict(prog, arch, nr, args)
        }

        fn call(prog: &[libc::sock_filter], nr: u32, ids: &[u32]) -> u32 {
            decide(prog, X86, nr, ids)
        }

        const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        const OK: u32 = libc::SECCOMP_RET_ALLOW;

        #[test]
        fn keyring_calls_are_refused_and_no_other_abi_reaches_them() {
            let p = program(None, super::super::Refuse::default());
            for nr in [NR_ADD_KEY, NR_REQUEST_KEY, NR_KEYCTL] {
                assert_eq!(call(&p, nr, &[]), EPERM);
                assert_eq!(
                    call(&p, nr | X32_SYSCALL_BIT, &[]),
                    libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
                );
            }
            // i386 keyctl (288) and add_key (286), as `int $0x80` from a 64-bit program.
            for nr in [286, 287, 288] {
                assert_eq!(decide(&p, I386, nr, &[]), libc::SECCOMP_RET_KILL_PROCESS);
            }
            assert_eq!(call(&p, 0, &[]), OK); // read
        }

        #[test]
        fn fast_open_is_refused_when_asked_and_nothing_else_of_the_sends() {
            let on = super::super::Refuse {
                fastopen: true,
                ..super::super::Refuse::default()
            };
            let p = program(None, on);
            let off = program(None, super::super::Refuse::default());
            let refused = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
            let fo = MSG_FASTOPEN | libc::MSG_NOSIGNAL as u32;
            for (nr, arg) in SEND_CALLS {
                let mut args = [0u32; 4];
                args[arg as usize] = fo;
                assert_eq!(call(&p, nr, &args), refused, "nr {nr}");
                assert_eq!(call(&off, nr, &args), OK, "nr {nr}");
                args[arg as usize] = libc::MSG_NOSIGNAL as u32;
                assert_eq!(call(&p, nr, &args), OK, "nr {nr}");
            }
            let tcp = libc::IPPROTO_TCP as u32;
            let sol = libc::SOL_SOCKET as u32;
            assert_eq!(
                call(&p, NR_SETSOCKOPT, &[3, tcp, TCP_FASTOPEN_CONNECT]),
                refused
            );
            assert_eq!(
                call(&off, NR_SETSOCKOPT, &[3, tcp, TCP_FASTOPEN_CONNECT]),
                OK
            );
            assert_eq!(
                call(&p, NR_SETSOCKOPT, &[3, tcp, libc::TCP_NODELAY as u32]),
                OK
            );
            assert_eq!(call(&p, NR_SETSOCKOPT, &[3, sol, TCP_FASTOPEN_CONNECT]), OK);
        }

        #[test]
        fn mptcp_and_other_processes_limits_are_refused_when_asked() {
            let on = super::super::Refuse {
                id_changes: false,
                setid_files: false,
                mptcp: true,
                other_sockets: false,
                foreign_prlimit: true,
                fastopen: false,
            };
            let p = program(None, on);
            let off = program(None, super::super::Refuse::default());
            let noproto = libc::SECCOMP_RET_ERRNO | libc::EPROTONOSUPPORT as u32;
            let socket = |proto: u32| [libc::AF_INET as u32, libc::SOCK_STREAM as u32, proto];
            assert_eq!(call(&p, NR_SOCKET, &socket(IPPROTO_MPTCP)), noproto);
            assert_eq!(call(&off, NR_SOCKET, &socket(IPPROTO_MPTCP)), OK);
            assert_eq!(call(&p, NR_SOCKET, &socket(libc::IPPROTO_TCP as u32)), OK);
            assert_eq!(call(&p, NR_SOCKET, &socket(0)), OK);
            // prlimit64(pid, resource, new, old)
            let prlimit = |prog: &[libc::sock_filter], pid: u64, new: u64| {
                verdict(prog, X86, NR_PRLIMIT64, [pid, 7, new, 0, 0, 0])
            };
            assert_eq!(prlimit(&p, 1234, 0x7fff_0000), EPERM);
            assert_eq!(prlimit(&p, 1234, 1 << 40), EPERM);
            assert_eq!(prlimit(&p, 0, 0x7fff_0000), OK);
            assert_eq!(prlimit(&p, 1234, 0), OK); // reading only
            assert_eq!(prlimit(&off, 1234, 0x7fff_0000), OK);
            // With the id rules too, the same decisions.
            let both = program(
                Some((1000, 100)),
                super::super::Refuse {
                    id_changes: true,
                    ..on
                },
            );
            assert_eq!(prlimit(&both, 1234, 0x7fff_0000), EPERM);
            assert_eq!(call(&both, 105, &[0]), EPERM);
            assert_eq!(call(&both, NR_SOCKET, &socket(IPPROTO_MPTCP)), noproto);
        }

        #[test]
        fn other_sockets_allow_only_unix_netlink_and_tcp() {
            let p = program(
                None,
                super::super::Refuse {
                    mptcp: true,
                    other_sockets: true,
                    ..Default::default()
                },
            );
            let off = program(None, super::super::Refuse::default());
            let err = |e: i32| libc::SECCOMP_RET_ERRNO | e as u32;
            let socket = |prog: &[libc::sock_filter], domain: i32, ty: i32, proto: i32| {
                // High halves set: the kernel reads ints, so they must not matter.
                let wide = |v: i32| u64::from(v as u32) | 0xdead_0000_0000_0000;
                verdict(
                    prog,
                    X86,
                    NR_SOCKET,
                    [wide(domain), wide(ty), wide(proto), 0, 0, 0],
                )
            };
            let (inet, inet6) = (libc::AF_INET, libc::AF_INET6);
            let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
            for (domain, ty, proto, want) in [
                (inet, libc::SOCK_STREAM, 0, OK),
                (inet6, libc::SOCK_STREAM | flags, libc::IPPROTO_TCP, OK),
                (libc::AF_UNIX, libc::SOCK_DGRAM, 0, OK),
                (libc::AF_UNIX, libc::SOCK_SEQPACKET | flags, 0, OK),
                (libc::AF_NETLINK, libc::SOCK_RAW | flags, 0, OK),
                (inet, libc::SOCK_DGRAM, 0, err(libc::EACCES)),
                (
                    inet6,
                    libc::SOCK_DGRAM | flags,
                    libc::IPPROTO_UDP,
                    err(libc::EACCES),
                ),
                (
                    inet,
                    libc::SOCK_DGRAM,
                    libc::IPPROTO_ICMP,
                    err(libc::EACCES),
                ),
                (inet, libc::SOCK_RAW, libc::IPPROTO_RAW, err(libc::EACCES)),
                (
                    inet,
                    libc::SOCK_STREAM,
                    libc::IPPROTO_SCTP,
                    err(libc::EACCES),
                ),
                (
                    inet6,
                    libc::SOCK_SEQPACKET,
                    libc::IPPROTO_SCTP,
                    err(libc::EACCES),
                ),
                (
                    inet,
                    libc::SOCK_STREAM,
                    IPPROTO_MPTCP as i32,
                    err(libc::EPROTONOSUPPORT),
                ),
                (
                    libc::AF_PACKET,
                    libc::SOCK_RAW,
                    0x0300,
                    err(libc::EAFNOSUPPORT),
                ),
                (
                    libc::AF_VSOCK,
                    libc::SOCK_STREAM,
                    0,
                    err(libc::EAFNOSUPPORT),
                ),
                (libc::AF_TIPC, libc::SOCK_RDM, 0, err(libc::EAFNOSUPPORT)),
            ] {
                assert_eq!(socket(&p, domain, ty, proto), want, "{domain} {ty} {proto}");
                assert_eq!(socket(&off, domain, ty, proto), OK);
            }
            assert_eq!(call(&p, NR_IO_URING_SETUP, &[]), err(libc::ENOSYS));
            assert_eq!(call(&off, NR_IO_URING_SETUP, &[]), OK);
        }

        #[test]
        fn set_id_bits_are_refused_in_modes_and_creating_opens_only() {
            let p = program(
                None,
                super::super::Refuse {
                    setid_files: true,
                    ..Default::default()
                },
            );
            let off = program(None, super::super::Refuse::default());
            let at =
                |prog: &[libc::sock_filter], nr: u32, args: [u64; 6]| verdict(prog, X86, nr, args);
            let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
            // High halves set: the kernel reads umode_t and int, so they must not matter.
            let hi = 0xdead_0000_0000_0000u64;
            for (nr, arg) in MODE_CALLS {
                for (mode, want) in [
                    (0o4755, EPERM),
                    (0o2755, EPERM),
                    (0o6755, EPERM),
                    (0o755, OK),
                    (0o1777, OK),
                ] {
                    let mut args = [hi; 6];
                    args[arg as usize] = hi | mode;
                    assert_eq!(at(&p, nr, args), want, "{nr} {mode:o}");
                    assert_eq!(at(&off, nr, args), OK);
                }
            }
            let creat = u64::from(libc::O_CREAT as u32 | libc::O_WRONLY as u32);
            let tmpfile = u64::from(libc::O_TMPFILE as u32 | libc::O_RDWR as u32);
            let read = u64::from(libc::O_RDONLY as u32);
            for (nr, flags, mode) in OPEN_CALLS {
                for (f, m, want) in [
                    (creat, 0o4755, EPERM),
                    (tmpfile, 0o2700, EPERM),
                    (creat, 0o644, OK),
                    // Without O_CREAT the mode argument is not read (often garbage).
                    (read, 0o6777, OK),
                ] {
                    let mut args = [hi; 6];
                    args[flags as usize] = hi | f;
                    args[mode as usize] = hi | m;
                    assert_eq!(at(&p, nr, args), want, "{nr} {f:o} {m:o}");
                }
            }
            assert_eq!(call(&p, NR_OPENAT2, &[]), enosys);
            assert_eq!(call(&p, NR_IO_URING_SETUP, &[]), enosys);
            assert_eq!(call(&off, NR_OPENAT2, &[]), OK);
        }

        #[test]
        fn only_own_or_unchanged_ids_pass() {
            let p = program(Some((1000, 100)), super::super::Refuse::default());
            assert_eq!(call(&p, 105, &[1000]), OK);
            assert_eq!(call(&p, 105, &[0]), EPERM);
            assert_eq!(call(&p, 106, &[100]), OK);
            assert_eq!(call(&p, 106, &[1000]), EPERM);
            assert_eq!(call(&p, 117, &[UNCHANGED, 1000, UNCHANGED]), OK);
            assert_eq!(call(&p, 117, &[UNCHANGED, 1000, 5]), EPERM);
            assert_eq!(call(&p, 113, &[5, UNCHANGED]), EPERM);
            assert_eq!(call(&p, 119, &[100, 100, 100]), OK);
            assert_eq!(
                decide(&p, I386, 213, &[0]), // i386 setuid32
                libc::SECCOMP_RET_KILL_PROCESS
            );
        }
    }
}
