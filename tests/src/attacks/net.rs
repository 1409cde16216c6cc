//! Inside the sandbox — sockets: abstract and pathname unix sockets of outside listeners, TCP with
//! `--net deny` / `--net allow`.

use super::{arg, contain, p, Seen};
use crate::sys::{self};

/// `abstract-unix-connect`: connect to an outside abstract unix socket.
pub(crate) fn abstract_unix_connect(a: &[String]) -> Seen {
    contain(
        "connect(abstract unix socket of an outside listener)",
        sys::unix_connect(arg(a, 2).as_bytes(), true),
    )
}

/// `pathname-unix-connect`: field 10: connect to an outside pathname unix socket.
pub(crate) fn pathname_unix_connect(a: &[String]) -> Seen {
    contain(
        "connect(outside/listen.sock)",
        sys::unix_connect(arg(a, 2).as_bytes(), false),
    )
}

/// `tcp-connect <port> [expect-ok]`: connect to 127.0.0.1:<port>.
pub(crate) fn tcp_connect(a: &[String]) -> Seen {
    let port: u16 = arg(a, 2).parse().unwrap_or(0);
    let r = sys::tcp_connect(port);
    if arg(a, 3) == "expect-ok" {
        match r {
            Ok(_) => Seen::Ok("connected to 127.0.0.1 with --net allow".into()),
            Err(e) => Seen::Broken(format!("connect(127.0.0.1) with --net allow -> {e}")),
        }
    } else {
        contain("connect(127.0.0.1:<listener>)", r)
    }
}

/// `proxy-connect <port> expect-ok|expect-refused`: issue 33: `CONNECT 127.0.0.1:<port>`
/// through the run's proxy (`127.0.0.1:3128` in its network namespace, `--net proxy`).
pub(crate) fn proxy_connect(a: &[String]) -> Seen {
    use std::io::{Read, Write};
    let port = arg(a, 2);
    let want_ok = arg(a, 3) == "expect-ok";
    let status = (|| -> std::io::Result<String> {
        // The proxy the sandbox named (its own port on Landlock alone, 3128 in a namespace).
        let proxy = std::env::var("http_proxy").unwrap_or_default();
        let proxy_port = proxy
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(3128);
        let mut s = std::net::TcpStream::connect(("127.0.0.1", proxy_port))?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(15)))?;
        write!(
            s,
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        )?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf)?;
        let head = String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).to_string();
        Ok(head.lines().next().unwrap_or("").to_string())
    })();
    let opened = |l: &str| l.starts_with("HTTP/1.1 200");
    match (status, want_ok) {
        (Ok(l), true) if opened(&l) => Seen::Ok(format!("the proxy opened the tunnel: {l}")),
        (Ok(l), false) if opened(&l) => Seen::Escaped(format!(
            "the proxy opened a tunnel to the unlisted 127.0.0.1:{port}: {l}"
        )),
        (Ok(l), false) => Seen::Blocked(format!("the proxy answered {l}")),
        (Err(e), false) => Seen::Blocked(format!("CONNECT through the proxy -> {e}")),
        (r, true) => Seen::Broken(format!(
            "CONNECT to an address the allow-list names, through the proxy: {r:?}"
        )),
    }
}

/// `tcp-bind <port> <host netns>`: bind 127.0.0.1:<port> (blocked if the listener would be
/// reachable from the host).
pub(crate) fn tcp_bind(a: &[String]) -> Seen {
    let port: u16 = arg(a, 2).parse().unwrap_or(0);
    let r = sys::tcp_bind(port, true);
    let my_net = std::fs::read_link("/proc/self/ns/net")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    match r {
        // A listener in a private network namespace is unreachable from outside.
        Ok(_) if !arg(a, 3).is_empty() && my_net != arg(a, 3) => Seen::Blocked(
            "bind worked inside a private network namespace (unreachable from the host)".into(),
        ),
        r => contain("bind(127.0.0.1:<free port>)", r),
    }
}

/// `udp-send <port> <host netns>`: issue 33: a datagram to an outside UDP socket on
/// 127.0.0.1:<port> (what DNS to a local resolver is too).
pub(crate) fn udp_send(a: &[String]) -> Seen {
    let port: u16 = arg(a, 2).parse().unwrap_or(0);
    let my_net = std::fs::read_link("/proc/self/ns/net")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    match sys::udp_send(port) {
        // The outside socket is not in a private network namespace: the host side checks
        // that nothing arrived.
        Ok(()) if !arg(a, 3).is_empty() && my_net != arg(a, 3) => Seen::Blocked(
            "sent inside a private network namespace (the outside socket is not there)".into(),
        ),
        r => contain("sendto(127.0.0.1:<outside UDP socket>)", r),
    }
}

/// `tcp-listen <host netns>`: the second attack pass: `listen` on an unbound TCP socket, which
/// the kernel binds itself (on every interface, to a port of its choosing); prints the port.
/// The third pass: again once non-dumpable (the gate cannot take such a caller's descriptor,
/// and once let the kernel run the call then).
pub(crate) fn tcp_listen(a: &[String]) -> Seen {
    let first = match tcp_listen_once(a) {
        Seen::Blocked(d) => d,
        other => return other,
    };
    // Safety: prctl with integer arguments, on this process only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    match tcp_listen_once(a) {
        Seen::Blocked(d) => Seen::Blocked(format!("{first}; non-dumpable: {d}")),
        other => other,
    }
}

fn tcp_listen_once(a: &[String]) -> Seen {
    let my_net = std::fs::read_link("/proc/self/ns/net")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    match sys::tcp_listen_unbound() {
        Ok(_) if !arg(a, 2).is_empty() && my_net != arg(a, 2) => Seen::Blocked(
            "listen worked inside a private network namespace (unreachable from the host)".into(),
        ),
        Ok((s, port)) => {
            // Held open while the host side looks (it reads the port from this line).
            let seen = Seen::Escaped(format!("listen() on an unbound TCP socket got port {port}"));
            std::mem::forget(s);
            seen
        }
        Err(e) => Seen::Blocked(format!("listen(unbound TCP socket) -> {e}")),
    }
}

/// One unix connect by `path` (as given: relative paths resolve from the cwd).
fn connect_path(path: &[u8]) -> Result<std::os::fd::OwnedFd, sys::Errno> {
    sys::unix_connect(path, false)
}

/// `pathname-unix-routes <socket> <wt>`: every indirect way to an outside pathname socket:
/// a symlink in the worktree, a relative path after `chdir`, a `..` path, a hard link of it
/// into /tmp (where the write policy allows links between writable dirs).
pub(crate) fn pathname_unix_routes(a: &[String]) -> Seen {
    use std::os::unix::ffi::OsStrExt;
    let target = std::path::PathBuf::from(arg(a, 2));
    let wt = std::path::PathBuf::from(arg(a, 3));
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Seen::Skip("no socket path given".into());
    };
    let mut seen = Vec::new();
    let link = wt.join("link.sock");
    if let Err(e) = std::os::unix::fs::symlink(&target, &link) {
        return Seen::Broken(format!("symlink inside wt -> {e}"));
    }
    let mut tries: Vec<(String, Vec<u8>)> = vec![
        (
            "symlink in the worktree".into(),
            link.as_os_str().as_bytes().to_vec(),
        ),
        ("relative symlink".into(), b"link.sock".to_vec()),
    ];
    let hard = std::path::PathBuf::from(format!("/tmp/{}-hard", name.to_string_lossy()));
    if std::fs::hard_link(&target, &hard).is_ok() {
        tries.push((
            "hard link in /tmp".into(),
            hard.as_os_str().as_bytes().to_vec(),
        ));
    }
    for (what, path) in &tries {
        if std::env::set_current_dir(&wt).is_err() {
            return Seen::Broken("chdir(wt)".into());
        }
        match connect_path(path) {
            Ok(_) => return Seen::Escaped(format!("connect by {what} succeeded")),
            Err(e) => seen.push(format!("{what} -> {e}")),
        }
    }
    if std::env::set_current_dir(dir).is_ok() {
        for (what, path) in [
            ("relative path after chdir", name.as_bytes().to_vec()),
            (
                "`..` path",
                [
                    b"../".as_slice(),
                    dir.file_name().map_or(b"".as_slice(), |d| d.as_bytes()),
                    b"/",
                    name.as_bytes(),
                ]
                .concat(),
            ),
        ] {
            match connect_path(&path) {
                Ok(_) => return Seen::Escaped(format!("connect by {what} succeeded")),
                Err(e) => seen.push(format!("{what} -> {e}")),
            }
        }
    }
    let _ = std::fs::remove_file(&hard);
    Seen::Blocked(seen.join("; "))
}

/// `pathname-unix-datagram <socket>`: `sendto()` and `sendmsg()` with the address of an
/// outside datagram socket.
pub(crate) fn pathname_unix_datagram(a: &[String]) -> Seen {
    use std::os::fd::AsRawFd;
    let s = match sys::socket(libc::AF_UNIX, libc::SOCK_DGRAM) {
        Ok(s) => s,
        Err(e) => return Seen::Broken(format!("socket -> {e}")),
    };
    let (addr, len) = sys::sockaddr_un(arg(a, 2).as_bytes(), false);
    let msg = b"PWNED by shofer-containment";
    let ptr = (&addr as *const libc::sockaddr_un).cast::<libc::sockaddr>();
    // Safety: `msg` and `addr` outlive the call.
    let r = unsafe { libc::sendto(s.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0, ptr, len) };
    if r >= 0 {
        return Seen::Escaped("sendto(outside datagram socket) succeeded".into());
    }
    let sendto = std::io::Error::last_os_error();
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // Safety: an all-zero msghdr is valid; the fields point at live locals.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_name = ptr as *mut libc::c_void;
    h.msg_namelen = len;
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    // Safety: as above.
    if unsafe { libc::sendmsg(s.as_raw_fd(), &h, 0) } >= 0 {
        return Seen::Escaped("sendmsg(outside datagram socket) succeeded".into());
    }
    Seen::Blocked(format!(
        "sendto -> {sendto}; sendmsg -> {}",
        std::io::Error::last_os_error()
    ))
}

/// `own-unix-socket`: a socket the command creates under /tmp (not granted to host sockets)
/// is reachable, by connect and by a datagram sendto.
pub(crate) fn own_unix_socket(_: &[String]) -> Seen {
    let dir = std::path::PathBuf::from(format!(
        "/tmp/shofer-containment-own-{}",
        std::process::id()
    ));
    let _ = std::fs::create_dir(&dir);
    let path = dir.join("s");
    let path = path.to_string_lossy().into_owned();
    let r = sys::unix_listen(path.as_bytes(), false)
        .and_then(|_l| sys::unix_connect(path.as_bytes(), false).map(|_| ()));
    let _ = std::fs::remove_dir_all(&dir);
    match r {
        Ok(()) => Seen::Ok("connect to a socket of this run under /tmp".into()),
        Err(e) => Seen::Broken(format!("own socket under /tmp -> {e}")),
    }
}

/// `abstract-unix-twin <name>` (issue 29 F1): a unix socket made in the sandbox's network
/// namespace, then `unshare(CLONE_NEWUSER | CLONE_NEWNET)`, a twin bound to `@name` in the
/// new namespace, and the first socket connected to `@name`. The first socket's namespace
/// is the one it was made in, where `@name` is the outside listener's: a gate that calls the
/// name the run's own because the twin bound it would connect the command to the host's
/// service.
pub(crate) fn abstract_unix_twin(a: &[String]) -> Seen {
    use std::os::fd::AsRawFd;
    let name = arg(a, 2).as_bytes();
    let first = match sys::socket(libc::AF_UNIX, libc::SOCK_STREAM) {
        Ok(s) => s,
        Err(e) => return Seen::Broken(format!("socket(AF_UNIX) -> {e}")),
    };
    // Safety: plain flags; the attack is single-threaded, as CLONE_NEWUSER requires.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
        return Seen::Blocked(format!(
            "unshare(CLONE_NEWUSER|CLONE_NEWNET) -> {}: no namespace of its own to bind the twin in",
            sys::Errno::last()
        ));
    }
    let twin = match sys::unix_listen(name, true) {
        Ok(t) => format!("twin bound in the new namespace ({})", t.as_raw_fd()),
        Err(e) => format!("binding the twin in the new namespace -> {e}"),
    };
    match sys::unix_connect_fd(first.as_raw_fd(), name, true) {
        Ok(()) => Seen::Escaped(format!(
            "{twin}; connect of the socket made before unshare to @name succeeded"
        )),
        Err(e) => Seen::Blocked(format!(
            "{twin}; connect of the socket made before unshare -> {e}"
        )),
    }
}

/// `pathname-unix-moved-in <from> <grant> <tmpdir>` (issue 29 F2): host sockets moved into
/// places whose sockets the run may reach: `<from>/wt.sock` (under /tmp) and
/// `<tmpdir>/wt.sock` (`$TMPDIR`, on the worktree's filesystem) into the worktree,
/// `<from>/grant.sock` into the `--allow-unix` directory `<grant>`; each by `rename(2)`, or
/// `link(2)` where the rename fails, then connected. `<grant>/bound-here`, a socket its
/// listener bound in the granted directory, must stay reachable (the grant works).
pub(crate) fn pathname_unix_moved_in(a: &[String]) -> Seen {
    use std::os::unix::ffi::OsStrExt;
    let (wt, from, grant, tmpdir) = (p(arg(a, 0)), p(arg(a, 2)), p(arg(a, 3)), p(arg(a, 4)));
    let moves = [
        (
            from.join("wt.sock"),
            wt.join("moved-from-tmp.sock"),
            "/tmp -> worktree",
        ),
        (
            from.join("grant.sock"),
            grant.join("moved.sock"),
            "/tmp -> --allow-unix dir",
        ),
        (
            tmpdir.join("wt.sock"),
            wt.join("moved-from-tmpdir.sock"),
            "$TMPDIR -> worktree",
        ),
    ];
    let mut seen = Vec::new();
    for (src, dst, what) in &moves {
        let how = match sys::rename(src, dst) {
            Ok(()) => "renamed".to_string(),
            Err(re) => match sys::link(src, dst) {
                Ok(()) => format!("linked (rename -> {re})"),
                Err(le) => {
                    seen.push(format!("{what}: rename -> {re}, link -> {le}"));
                    continue;
                }
            },
        };
        match sys::unix_connect(dst.as_os_str().as_bytes(), false) {
            Ok(_) => {
                return Seen::Escaped(format!(
                    "{what}: the host socket {how}, then connect succeeded"
                ))
            }
            Err(e) => seen.push(format!("{what}: {how}, connect -> {e}")),
        }
    }
    let own = grant.join("bound-here");
    if let Err(e) = sys::unix_connect(own.as_os_str().as_bytes(), false) {
        return Seen::Broken(format!(
            "connect to a socket bound in the --allow-unix directory -> {e} ({})",
            seen.join("; ")
        ));
    }
    Seen::Blocked(format!(
        "{}; a socket bound in the granted directory is reached",
        seen.join("; ")
    ))
}

/// `tcp-fastopen <port>` (issue 29 F3): `sendto(MSG_FASTOPEN)` to 127.0.0.1:<port> on a TCP
/// socket, a connection made without `connect(2)`; then a plain `send`.
pub(crate) fn tcp_fastopen(a: &[String]) -> Seen {
    use std::os::fd::AsRawFd;
    let port: u16 = arg(a, 2).parse().unwrap_or(0);
    match sys::tcp_fastopen_sendto(port, b"GET / HTTP/1.0\r\n\r\n") {
        Ok(s) => {
            let sent = sys::write(s.as_raw_fd(), b"exfiltrated");
            Seen::Escaped(format!(
                "sendto(MSG_FASTOPEN, 127.0.0.1:<listener>) connected; a send after it -> {}",
                sent.map_or_else(|e| e.to_string(), |n| format!("{n} bytes"))
            ))
        }
        Err(e) => Seen::Blocked(format!("sendto(MSG_FASTOPEN, 127.0.0.1:<listener>) -> {e}")),
    }
}

/// A control buffer, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control<const N: usize>([u8; N]);

/// One `sendmsg` of a byte to the unix datagram socket `addr` (so the gate traps it) with
/// `control` as the control buffer.
fn send_control(fd: i32, addr: &[u8], control: &mut [u8]) -> Result<(), sys::Errno> {
    let (mut a, alen) = sys::sockaddr_un(addr, false);
    let mut byte = *b"x";
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Safety: an all-zero msghdr is valid; every pointer set below is to a live local.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_name = (&mut a as *mut libc::sockaddr_un).cast();
    h.msg_namelen = alen;
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = control.as_mut_ptr().cast();
    h.msg_controllen = control.len();
    // Safety: `h` describes live buffers of the lengths given.
    sys::check(unsafe { libc::sendmsg(fd, &h, 0) } as libc::c_long).map(|_| ())
}

/// The header of one cmsg at `at` in `buf`: `cmsg_len` (a `size_t`), level, type.
fn put_cmsg(buf: &mut [u8], at: usize, len: u64, level: i32, ty: i32) {
    buf[at..at + 8].copy_from_slice(&len.to_ne_bytes());
    buf[at + 8..at + 12].copy_from_slice(&level.to_ne_bytes());
    buf[at + 12..at + 16].copy_from_slice(&ty.to_ne_bytes());
}

/// `cmsg-len-wrap` (issue 29 F7): `sendmsg` to a unix datagram socket with a control buffer
/// whose second cmsg declares `cmsg_len = 2^64-16`, an offset that wraps a bounds check
/// done with unchecked arithmetic. The kernel answers `EINVAL`, and so must the gate; then a
/// valid `SCM_RIGHTS` passes a pipe's write end (the gate still serves). The harness checks
/// the command's own exit status came back (a supervisor that aborted exits 134).
pub(crate) fn cmsg_len_wrap(a: &[String]) -> Seen {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let path = p(arg(a, 0)).join(format!("f7-{}.sock", std::process::id()));
    let addr = path.as_os_str().as_bytes();
    let r = match sys::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK) {
        Ok(r) => r,
        Err(e) => return Seen::Broken(format!("socket -> {e}")),
    };
    let (ra, rlen) = sys::sockaddr_un(addr, false);
    // Safety: `ra` is a valid sockaddr_un of length `rlen`.
    if unsafe {
        libc::bind(
            r.as_raw_fd(),
            (&ra as *const libc::sockaddr_un).cast(),
            rlen,
        )
    } != 0
    {
        return Seen::Broken(format!("bind(wt/f7.sock) -> {}", sys::Errno::last()));
    }
    let s = match sys::socket(libc::AF_UNIX, libc::SOCK_DGRAM) {
        Ok(s) => s,
        Err(e) => return Seen::Broken(format!("socket -> {e}")),
    };
    let verdict = (|| {
        // A valid SCM_RIGHTS (20 bytes, padded to 24) naming fd 1, then one declaring
        // 2^64-16 bytes.
        let mut evil = Control([0u8; 48]);
        put_cmsg(&mut evil.0, 0, 20, libc::SOL_SOCKET, libc::SCM_RIGHTS);
        evil.0[16..20].copy_from_slice(&1i32.to_ne_bytes());
        put_cmsg(
            &mut evil.0,
            24,
            u64::MAX - 15,
            libc::SOL_SOCKET,
            libc::SCM_RIGHTS,
        );
        evil.0[40..44].copy_from_slice(&1i32.to_ne_bytes());
        evil.0[44..48].copy_from_slice(&2i32.to_ne_bytes());
        match send_control(s.as_raw_fd(), addr, &mut evil.0) {
            Err(e) if e.0 == libc::EINVAL => {}
            Err(e) => return Seen::Broken(format!("malicious sendmsg -> {e}, not EINVAL")),
            Ok(()) => return Seen::Broken("malicious sendmsg was sent, not EINVAL".into()),
        }
        // The gate still serves: a pipe's write end passed with a valid SCM_RIGHTS.
        let mut fds = [0i32; 2];
        // Safety: `fds` has room for two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Seen::Broken(format!("pipe -> {}", sys::Errno::last()));
        }
        // Safety: both are fresh descriptors we own.
        let (rd, wr) = unsafe {
            use std::os::fd::FromRawFd;
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        let mut ok = Control([0u8; 24]);
        put_cmsg(&mut ok.0, 0, 20, libc::SOL_SOCKET, libc::SCM_RIGHTS);
        ok.0[16..20].copy_from_slice(&wr.as_raw_fd().to_ne_bytes());
        if let Err(e) = send_control(s.as_raw_fd(), addr, &mut ok.0) {
            return Seen::Broken(format!(
                "malicious sendmsg -> EINVAL; a valid SCM_RIGHTS after it -> {e}"
            ));
        }
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut back = Control([0u8; 24]);
        // Safety: an all-zero msghdr is valid; the pointers are to live locals.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = back.0.as_mut_ptr().cast();
        h.msg_controllen = back.0.len();
        // Safety: `h` describes live buffers.
        let n = unsafe { libc::recvmsg(r.as_raw_fd(), &mut h, libc::MSG_DONTWAIT) };
        if n != 1 || h.msg_controllen < 20 {
            return Seen::Broken(format!(
                "the valid SCM_RIGHTS did not arrive (recvmsg -> {n}, {})",
                sys::Errno::last()
            ));
        }
        let got = i32::from_ne_bytes([back.0[16], back.0[17], back.0[18], back.0[19]]);
        // Safety: the kernel just installed this descriptor for us.
        let got = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(got) };
        let mut buf = [0u8; 2];
        if sys::write(got.as_raw_fd(), b"ok").ok() != Some(2)
            || sys::read(rd.as_raw_fd(), &mut buf).ok() != Some(2)
            || &buf != b"ok"
        {
            return Seen::Broken("the passed descriptor is not the pipe's write end".into());
        }
        Seen::Ok(
            "malicious sendmsg -> EINVAL (the kernel's answer); a valid SCM_RIGHTS after it passed a descriptor"
                .into(),
        )
    })();
    let _ = std::fs::remove_file(&path);
    verdict
}
