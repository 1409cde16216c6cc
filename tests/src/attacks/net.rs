//! Inside the sandbox — sockets: abstract and pathname unix sockets of outside listeners, TCP with
//! `--net deny` / `--net allow`.

use super::{arg, contain, Seen};
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
