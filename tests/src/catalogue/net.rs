//! Host side — sockets: abstract and pathname unix sockets of outside listeners, TCP with `--net
//! deny` / `--net allow`, and `--net proxy`'s way out (issue 33).

use super::{nothing, Case, Scope};
use crate::attacks::Attack;
use crate::runner::{attack_checked, attack_spec_checked, Cmd, Ctx, Outcome, Sb};
use crate::sys;
use shofer_core::policy::Protection;
use std::os::fd::AsRawFd;

/// This family's cases, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "abstract-unix-connect",
            "connect to an outside abstract unix socket",
            Some(Protection::AbstractSockets),
            abstract_unix
        ),
        case!(
            "abstract-unix-twin",
            "issue 29 F1: a socket made before unshare(user+net) connects to @NAME, which a twin bound in the new namespace",
            Some(Protection::AbstractSockets),
            abstract_unix_twin
        ),
        case!(
            "pathname-unix-connect",
            "field 10: connect to an outside pathname unix socket",
            Some(Protection::PathnameSockets),
            pathname_unix
        ),
        case!(
            "pathname-unix-routes",
            "issue 10: reach an outside socket by a worktree symlink, a relative or `..` path, a hard link in /tmp",
            Some(Protection::PathnameSockets),
            pathname_unix_routes
        ),
        case!(
            "pathname-unix-datagram",
            "issue 10: sendto()/sendmsg() with the address of an outside datagram socket",
            Some(Protection::PathnameSockets),
            pathname_unix_datagram
        ),
        case!(
            "pathname-unix-under-tmp",
            "issue 10: connect to an outside listener under /tmp (writable, but not granted)",
            Some(Protection::PathnameSockets),
            pathname_unix_under_tmp
        ),
        case!(
            "pathname-unix-moved-in",
            "issue 29 F2: rename/link an outside listener's socket from /tmp or $TMPDIR into the worktree and an --allow-unix dir, connect",
            Some(Protection::PathnameSockets),
            pathname_unix_moved_in
        ),
        case!(
            "own-unix-socket",
            "issue 10: a socket the command creates under /tmp stays reachable",
            None,
            own_unix_socket
        ),
        case!(
            "cmsg-len-wrap",
            "issue 29 F7: sendmsg with a second cmsg of cmsg_len 2^64-16: EINVAL, the supervisor lives, the command's status comes back",
            None,
            cmsg_len_wrap
        ),
        case!(
            "tcp-connect-net-deny",
            "--net deny: connect to a 127.0.0.1 listener outside",
            Some(Protection::Tcp),
            |c| tcp_deny_listener(c, Attack::TcpConnect, "deny")
        ),
        case!(
            "tcp-fastopen-net-deny",
            "issue 29 F3: --net deny: sendto(MSG_FASTOPEN) to a 127.0.0.1 listener outside",
            Some(Protection::Tcp),
            |c| tcp_deny_listener(c, Attack::TcpFastopen, "deny")
        ),
        case!(
            "tcp-bind-net-deny",
            "--net deny: bind 127.0.0.1:<port>",
            Some(Protection::Tcp),
            tcp_bind_deny
        ),
        case!(
            "udp-send-net-deny",
            "issue 33: --net deny: a datagram to an outside 127.0.0.1 UDP socket",
            Some(Protection::Tcp),
            udp_send_deny
        ),
        case!(
            "tcp-listen-net-deny",
            "--net deny: listen() on an unbound TCP socket (the kernel picks the port)",
            Some(Protection::Tcp),
            tcp_listen_deny
        ),
        case!(
            "tcp-connect-net-proxy",
            "issue 33: --net proxy: connect straight to a 127.0.0.1 listener outside (landlock: the gate refuses it)",
            Some(Protection::Tcp),
            |c| tcp_deny_listener(c, Attack::TcpConnect, "proxy")
        ),
        case!(
            "tcp-fastopen-net-proxy",
            "issue 33: --net proxy: sendto(MSG_FASTOPEN) to a 127.0.0.1 listener outside (landlock: seccomp refuses Fast Open)",
            Some(Protection::Tcp),
            |c| tcp_deny_listener(c, Attack::TcpFastopen, "proxy")
        ),
        case!(
            "proxy-unlisted-refused",
            "issue 33: --net proxy: CONNECT through the proxy to a 127.0.0.1 listener outside that the allow-list does not name",
            Some(Protection::Tcp),
            |c| proxy_connect(c, false)
        ),
        case!(
            "proxy-named-reached",
            "issue 33: --net proxy --allow-domain 127.0.0.1:PORT: CONNECT through the proxy reaches that listener",
            None,
            |c| proxy_connect(c, true)
        ),
        case!(
            "tcp-connect-net-allow",
            "--net allow (default): connecting works",
            None,
            tcp_connect_allow
        ),
    ]
}

fn abstract_unix(c: &Ctx) -> Outcome {
    let name = c.w.marker();
    let l = match sys::unix_listen(name.as_bytes(), true) {
        Ok(l) => l,
        Err(e) => return Outcome::Error(format!("harness: abstract listener: {e}")),
    };
    let o = attack_checked(c, Attack::AbstractUnixConnect, &[name]);
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!("the outside listener got {n} connection(s)"));
    }
    o
}

fn pathname_unix(c: &Ctx) -> Outcome {
    let path = c.out.join("listen.sock");
    let l = match sys::unix_listen(path.as_os_str().as_encoded_bytes(), false) {
        Ok(l) => l,
        Err(e) => return Outcome::Error(format!("harness: pathname listener: {e}")),
    };
    let (u, g) = c.cell.user.ids();
    let _ = sys::lchown(&path, u, g);
    let _ = sys::chmod(&path, 0o777);
    let o = attack_checked(
        c,
        Attack::PathnameUnixConnect,
        &[path.display().to_string()],
    );
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!("the outside listener got {n} connection(s)"));
    }
    o
}

/// An outside stream listener at `path`, reachable by the cell's user as far as permissions
/// go (only the sandbox may stop the connect).
fn outside_listener(c: &Ctx, path: &std::path::Path) -> Result<std::os::fd::OwnedFd, Outcome> {
    let l = sys::unix_listen(path.as_os_str().as_encoded_bytes(), false)
        .map_err(|e| Outcome::Error(format!("harness: pathname listener: {e}")))?;
    let (u, g) = c.cell.user.ids();
    let _ = sys::lchown(path, u, g);
    let _ = sys::chmod(path, 0o777);
    Ok(l)
}

fn pathname_unix_routes(c: &Ctx) -> Outcome {
    let path = c.out.join("routes.sock");
    let l = match outside_listener(c, &path) {
        Ok(l) => l,
        Err(o) => return o,
    };
    let o = attack_checked(
        c,
        Attack::PathnameUnixRoutes,
        &[path.display().to_string(), c.wt.display().to_string()],
    );
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!("the outside listener got {n} connection(s)"));
    }
    o
}

fn pathname_unix_datagram(c: &Ctx) -> Outcome {
    let path = c.out.join("dgram.sock");
    let s = match sys::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK) {
        Ok(s) => s,
        Err(e) => return Outcome::Error(format!("harness: datagram socket: {e}")),
    };
    let (a, len) = sys::sockaddr_un(path.as_os_str().as_encoded_bytes(), false);
    // Safety: `a` is a valid sockaddr_un of length `len`.
    if unsafe { libc::bind(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) } != 0 {
        return Outcome::Error("harness: binding the datagram socket".into());
    }
    let (u, g) = c.cell.user.ids();
    let _ = sys::lchown(&path, u, g);
    let _ = sys::chmod(&path, 0o777);
    let o = attack_checked(
        c,
        Attack::PathnameUnixDatagram,
        &[path.display().to_string()],
    );
    let mut buf = [0u8; 64];
    // Safety: a non-blocking receive into our buffer.
    let got = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if got >= 0 {
        return Outcome::Escaped("the outside datagram socket received a message".into());
    }
    o
}

fn pathname_unix_under_tmp(c: &Ctx) -> Outcome {
    let dir = std::path::PathBuf::from(format!("/tmp/{}", c.w.marker()));
    if let Err(e) = std::fs::create_dir(&dir) {
        return Outcome::Error(format!("harness: {}: {e}", dir.display()));
    }
    let _ = sys::chmod(&dir, 0o777);
    let path = dir.join("s");
    let o = match outside_listener(c, &path) {
        Ok(l) => {
            let o = attack_checked(
                c,
                Attack::PathnameUnixConnect,
                &[path.display().to_string()],
            );
            let n = sys::accept_all(l.as_raw_fd());
            if n > 0 {
                Outcome::Escaped(format!("the listener under /tmp got {n} connection(s)"))
            } else {
                o
            }
        }
        Err(o) => o,
    };
    let _ = std::fs::remove_dir_all(&dir);
    o
}

fn own_unix_socket(c: &Ctx) -> Outcome {
    attack_checked(c, Attack::OwnUnixSocket, &[])
}

/// `--net deny`, and `attack` reaches for an outside 127.0.0.1 listener: escaped if the
/// listener has a connection.
/// `attack` against a listener outside, under `--net <mode>` (deny, proxy).
fn tcp_deny_listener(c: &Ctx, attack: Attack, mode: &str) -> Outcome {
    let (l, port) = match sys::tcp_bind(0, true) {
        Ok(x) => x,
        Err(e) => return Outcome::Error(format!("harness: tcp listener: {e}")),
    };
    let mut spec = Sb::new(Cmd::Attack(attack, vec![port.to_string()]));
    spec.extra = vec!["--net".into(), mode.into()];
    let o = attack_spec_checked(c, spec);
    if let Some(f) = silent_net_downgrade(c) {
        return f;
    }
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!(
            "the outside 127.0.0.1:{port} listener got {n} connection(s)"
        ));
    }
    o
}

/// `--net proxy` through the proxy to an outside listener: refused unless `named` (then
/// `--allow-domain 127.0.0.1:PORT` names it and the tunnel must open).
fn proxy_connect(c: &Ctx, named: bool) -> Outcome {
    let (l, port) = match sys::tcp_bind(0, true) {
        Ok(x) => x,
        Err(e) => return Outcome::Error(format!("harness: tcp listener: {e}")),
    };
    let expect = if named { "expect-ok" } else { "expect-refused" };
    let mut spec = Sb::new(Cmd::Attack(
        Attack::ProxyConnect,
        vec![port.to_string(), expect.into()],
    ));
    spec.extra = vec![
        "--net".into(),
        "proxy".into(),
        "--no-default-domains".into(),
    ];
    if named {
        spec.extra.push("--allow-domain".into());
        spec.extra.push(format!("127.0.0.1:{port}"));
    }
    let o = attack_spec_checked(c, spec);
    let n = sys::accept_all(l.as_raw_fd());
    if !named && n > 0 {
        return Outcome::Escaped(format!(
            "the outside 127.0.0.1:{port} listener got {n} connection(s) through the proxy"
        ));
    }
    o
}

fn tcp_bind_deny(c: &Ctx) -> Outcome {
    let port = match sys::tcp_bind(0, false) {
        Ok((_, p)) => p,
        Err(e) => return Outcome::Error(format!("harness: free port: {e}")),
    };
    let mut spec = Sb::new(Cmd::Attack(
        Attack::TcpBind,
        vec![port.to_string(), c.w.netns.clone()],
    ));
    spec.extra = vec!["--net".into(), "deny".into()];
    let o = attack_spec_checked(c, spec);
    silent_net_downgrade(c).unwrap_or(o)
}

/// `--net deny` that the report says is not enforced must have been refused without
/// `--allow-degraded` (never a silent downgrade).
fn silent_net_downgrade(c: &Ctx) -> Option<Outcome> {
    let rep = c.report.borrow();
    let tcp = &rep.as_ref()?["protections"]["tcp"];
    let unenforced = tcp["enforced"].as_bool() == Some(false);
    let flagged = c.cell.degraded || c.last_needed_degraded.get();
    (unenforced && !flagged).then(|| {
        Outcome::Fail(format!(
            "--net deny/proxy ran without --allow-degraded although the report says TCP is not enforced ({})",
            tcp["reason"]
        ))
    })
}

fn udp_send_deny(c: &Ctx) -> Outcome {
    let (s, port) = match sys::udp_bind() {
        Ok(x) => x,
        Err(e) => return Outcome::Error(format!("harness: udp socket: {e}")),
    };
    let mut spec = Sb::new(Cmd::Attack(
        Attack::UdpSend,
        vec![port.to_string(), c.w.netns.clone()],
    ));
    spec.extra = vec!["--net".into(), "deny".into()];
    let o = attack_spec_checked(c, spec);
    if let Some(f) = silent_net_downgrade(c) {
        return f;
    }
    if sys::datagram_arrived(&s) {
        return Outcome::Escaped(format!(
            "the outside 127.0.0.1:{port} UDP socket got a datagram"
        ));
    }
    o
}

fn tcp_listen_deny(c: &Ctx) -> Outcome {
    let mut spec = Sb::new(Cmd::Attack(Attack::TcpListen, vec![c.w.netns.clone()]));
    spec.extra = vec!["--net".into(), "deny".into()];
    let o = attack_spec_checked(c, spec);
    silent_net_downgrade(c).unwrap_or(o)
}

fn tcp_connect_allow(c: &Ctx) -> Outcome {
    let (l, port) = match sys::tcp_bind(0, true) {
        Ok(x) => x,
        Err(e) => return Outcome::Error(format!("harness: tcp listener: {e}")),
    };
    let o = attack_checked(
        c,
        Attack::TcpConnect,
        &[port.to_string(), "expect-ok".into()],
    );
    let _ = sys::accept_all(l.as_raw_fd());
    o
}

/// Issue 29 F1: an abstract name is the run's own only in the network namespace it was bound
/// in; a twin bound in a namespace of the command's own does not open the outside `@NAME`.
fn abstract_unix_twin(c: &Ctx) -> Outcome {
    let name = c.w.marker();
    let l = match sys::unix_listen(name.as_bytes(), true) {
        Ok(l) => l,
        Err(e) => return Outcome::Error(format!("harness: abstract listener: {e}")),
    };
    let o = attack_checked(c, Attack::AbstractUnixTwin, &[name]);
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!(
            "the outside @NAME listener got {n} connection(s) ({})",
            super::describe(&o)
        ));
    }
    o
}

/// Issue 29 F2: "bound beneath the worktree or an `--allow-unix` directory" is where the
/// listener bound the socket, not where its file is now. Outside listeners bound under /tmp
/// and under `$TMPDIR` (a directory beside the worktree, on its filesystem, so a rename into
/// the worktree is possible on Landlock even where /tmp is another filesystem); the command
/// moves them into the worktree and into an `--allow-unix` directory under /tmp and
/// connects. A listener the harness bound in the granted directory must stay reachable.
fn pathname_unix_moved_in(c: &Ctx) -> Outcome {
    let base = std::path::PathBuf::from(format!("/tmp/{}", c.w.marker()));
    let (from, grant, tmpdir) = (base.join("from"), base.join("grant"), c.dir.join("tmpdir"));
    for d in [&base, &from, &grant, &tmpdir] {
        if let Err(e) = std::fs::create_dir_all(d) {
            let _ = std::fs::remove_dir_all(&base);
            return Outcome::Error(format!("harness: {}: {e}", d.display()));
        }
        let _ = sys::chmod(d, 0o777);
    }
    let o = (|| {
        let mut moved = Vec::new();
        for (dir, name) in [
            (&from, "wt.sock"),
            (&from, "grant.sock"),
            (&tmpdir, "wt.sock"),
        ] {
            let path = dir.join(name);
            moved.push((outside_listener(c, &path)?, path));
        }
        let _granted = outside_listener(c, &grant.join("bound-here"))?;
        let mut spec = Sb::new(Cmd::Attack(
            Attack::PathnameUnixMovedIn,
            [&from, &grant, &tmpdir]
                .map(|p| p.display().to_string())
                .to_vec(),
        ));
        spec.extra = vec!["--allow-unix".into(), grant.display().to_string()];
        spec.env = vec![("TMPDIR".into(), tmpdir.display().to_string())];
        let o = attack_spec_checked(c, spec);
        let reached: Vec<String> = moved
            .iter()
            .filter_map(|(l, path)| {
                let n = sys::accept_all(l.as_raw_fd());
                (n > 0).then(|| format!("{} ({n})", path.display()))
            })
            .collect();
        if !reached.is_empty() {
            return Err(Outcome::Escaped(format!(
                "outside listeners got connections: {} ({})",
                reached.join(", "),
                super::describe(&o)
            )));
        }
        Ok(o)
    })()
    .unwrap_or_else(|o| o);
    let _ = std::fs::remove_dir_all(&base);
    o
}

/// Issue 29 F7: no byte the command controls stops the supervisor. The command's own exit
/// status (0) must come back: a supervisor that aborted exits 134, one that stopped serving
/// leaves the command waiting in `sendmsg` until the harness kills it.
fn cmsg_len_wrap(c: &Ctx) -> Outcome {
    let mut spec = Sb::new(Cmd::Attack(Attack::CmsgLenWrap, vec![]));
    spec.timeout = std::time::Duration::from_secs(20);
    let run = c.sb(spec);
    let panicked = run.stderr.contains("panicked");
    if run.timed_out || run.code != Some(0) || panicked {
        return Outcome::Fail(format!(
            "the command's own exit status (0) did not come back{}: {} ({})",
            if panicked {
                ", the supervisor panicked"
            } else {
                ""
            },
            run.how(),
            super::describe(&run.outcome())
        ));
    }
    run.outcome()
}
