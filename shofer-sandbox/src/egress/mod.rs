//! `--net proxy` (docs/ARCHITECTURE.md, "egress"): the command's network namespace holds
//! loopback only, and one listener on it that the supervisor serves from outside, an HTTP
//! CONNECT / plain-HTTP / SOCKS5 proxy that opens a connection only to a destination of the
//! allow-list ([`shofer_core::egress`]). No helper binary runs in the namespace, and nothing
//! inside can reach the host's network another way: there is no route. On Landlock alone the
//! listener is on the host's loopback ([`host_listener`]) and the gate keeps every other inet
//! address out of reach instead (`crate::gate::inet`).
//!
//! # Map
//! - this file: the listener, made inside the command's network namespace with loopback
//!   brought up first: by process A of the namespace backends itself ([`make_listener`], sent
//!   to the supervisor), or for bubblewrap's child by a forked child of the supervisor
//!   ([`listener_in`]); [`host_listener`] on Landlock
//!   alone, on the host's loopback, where the gate admits inet connects to it and to the run's
//!   own loopback servers only, `crate::gate::inet`) and the command's proxy variables
//!   ([`set_environment`]);
//! - [`head`]: what a client asks for, from the first bytes of its connection (HTTP with
//!   `httparse`, SOCKS5), bounded;
//! - [`sni`]: the server name of a TLS ClientHello, checked against the CONNECT name;
//! - [`dns`]: the names, resolved on the host (`/etc/hosts`, then the resolvers of
//!   `/etc/resolv.conf` over UDP: the static binary makes no NSS call);
//! - [`decide`]: the allow-list applied to the name and to every address it resolves to;
//! - [`relay`]: the bytes, copied with `splice(2)` both ways, idle connections closed;
//! - [`serve`]: the accepting thread, a thread per connection, the refusals (stderr, report).
//!
//! Every parser of the command's bytes is safe Rust with a fuzz target (`proxy_head`,
//! `tls_client_hello`, `dns_reply`), and none can panic: the supervisor aborts on panic.

pub mod decide;
pub mod dns;
pub mod head;
mod relay;
pub mod serve;
pub mod sni;

use std::os::fd::{AsFd, OwnedFd};

use rustix::net::{AddressFamily, SocketAddrV4, SocketFlags, SocketType};

/// The proxy's port on the command's loopback (its own network namespace: nothing else can
/// hold the port before the listener does).
pub const PORT: u16 = 3128;

/// The variables the command's tools read for a proxy, set to the listener (the caller's
/// own values are replaced: no other way out exists). `NO_PROXY` keeps the command's own
/// loopback direct; Node.js from 22.21/24.5 needs `NODE_USE_ENV_PROXY`, npm its own names.
pub fn variables(port: u16) -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let mut vars = Vec::new();
    for name in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "npm_config_proxy",
        "npm_config_https_proxy",
    ] {
        vars.push((name, url.clone()));
    }
    for name in ["no_proxy", "NO_PROXY"] {
        vars.push((name, "localhost,127.0.0.1,::1".to_string()));
    }
    vars.push(("NODE_USE_ENV_PROXY", "1".to_string()));
    vars
}

/// Puts [`variables`] for the proxy at `127.0.0.1:port` into this process's environment,
/// which the command inherits. Must run while no other thread reads the environment but
/// through std's lock (setenv(3) is not thread-safe), like `crate::git::set_git_settings`.
pub fn set_environment(port: u16) {
    for (k, v) in variables(port) {
        std::env::set_var(k, v);
    }
}

/// `--net proxy` on Landlock alone: the proxy's listener on the host's loopback,
/// `127.0.0.1` and a port the kernel picks, and that port.
///
/// # Errors
/// The socket could not be made.
pub(crate) fn host_listener() -> std::io::Result<(OwnedFd, u16)> {
    let l = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
    let port = l.local_addr()?.port();
    Ok((OwnedFd::from(l), port))
}

/// The proxy's listener, made in the network namespace of bubblewrap's child `pid` by
/// [`crate::gate::netns::socket_in`]: a TCP socket bound to `127.0.0.1:`[`PORT`],
/// listening. bubblewrap brings loopback up itself, at a moment of its own: the socket is
/// bound with `IP_FREEBIND`, so it need not be up yet. `None` when it cannot be made.
pub(crate) fn listener_in(pid: libc::pid_t) -> Option<OwnedFd> {
    crate::gate::netns::socket_in(pid, || make_listener(false)).filter(is_listener)
}

/// Whether `fd` is a listening TCP socket: what came back from another process must be,
/// whoever sent it.
pub(crate) fn is_listener(fd: &OwnedFd) -> bool {
    rustix::net::sockopt::socket_domain(fd) == Ok(AddressFamily::INET)
        && rustix::net::sockopt::socket_type(fd) == Ok(SocketType::STREAM)
        && rustix::net::sockopt::socket_acceptconn(fd) == Ok(true)
}

/// The listener, made inside the namespace (by process A, or by the forked child of
/// [`listener_in`]), `loopback` brought up first: raw system calls only (no allocation).
pub(crate) fn make_listener(loopback: bool) -> rustix::io::Result<OwnedFd> {
    if loopback {
        loopback_up()?;
    }
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::sockopt::set_ip_freebind(&sock, true)?;
    let addr = SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, PORT);
    rustix::net::bind(&sock, &addr)?;
    rustix::net::listen(&sock, 128)?;
    Ok(sock)
}

/// `lo` up (`SIOCSIFFLAGS`), as bubblewrap does for `--unshare-net`: a new network
/// namespace's loopback starts down.
fn loopback_up() -> rustix::io::Result<()> {
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // Raw libc: rustix has no interface-flag ioctls.
    // Safety: `ifreq` is plain data, zeroed, its name a NUL-terminated "lo"; both ioctls read
    // and write only that struct, which outlives them.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&sock.as_fd());
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(rustix::io::Errno::from_raw_os_error(errno()));
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(rustix::io::Errno::from_raw_os_error(errno()));
        }
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
