//! `--net proxy` on Landlock alone: which inet addresses the gate admits. The command keeps
//! the host's network namespace, so its inet `connect`, `sendto`/`sendmsg` with an address and
//! `bind` go through the gate ([`super::serve`]), which admits only
//! - a connect (or send) to the supervisor's proxy ([`Inet::proxy`], on the host's loopback);
//! - a connect (or send) to a loopback address where a socket of this run listens: one that
//!   listened through the gate ([`super::serve`] notes its inode), found listening there now in
//!   `/proc/net/tcp` / `tcp6` (the kernel's word, so a port the run's server gave up and a host
//!   service took since is not reached);
//! - a bind to a loopback address (any port): a server the command starts for its own tests
//!   is reachable from the run only.
//!
//! Everything else fails with `EACCES` and joins the report's `net_refused`. The address
//! decided is the gate's own copy, which the helper (connect) or the gate (bind) then uses:
//! the command cannot rewrite it after the check.
//!
//! # Map
//! - [`Inet`]: the rules; [`parse`] and [`canonical`]: an address the kernel would use;
//! - [`listening`]: whether a socket of a set of inodes listens on an address.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::egress::serve::Refused;

/// The inet rules of a `--net proxy` run on Landlock alone.
pub struct Inet {
    /// The proxy's address (`127.0.0.1`, the port the supervisor bound).
    pub proxy: SocketAddr,
    /// The report's `net_refused`, shared with the proxy.
    pub refused: Refused,
}

/// The inet address in `addr` (a `sockaddr` as the command passed it); `None` for another
/// family.
///
/// # Errors
/// `EINVAL` for an inet address shorter than its family's `sockaddr`.
pub fn parse(addr: &[u8]) -> Result<Option<SocketAddr>, i32> {
    let family = u16::from_ne_bytes([addr[0], *addr.get(1).unwrap_or(&0)]);
    let port = |a: &[u8]| u16::from_be_bytes([a[2], a[3]]);
    match i32::from(family) {
        libc::AF_INET => {
            let a = addr.get(..16).ok_or(libc::EINVAL)?;
            let ip = Ipv4Addr::new(a[4], a[5], a[6], a[7]);
            Ok(Some(SocketAddr::new(IpAddr::V4(ip), port(a))))
        }
        libc::AF_INET6 => {
            let a = addr.get(..28).ok_or(libc::EINVAL)?;
            let mut b = [0u8; 16];
            b.copy_from_slice(&a[8..24]);
            Ok(Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(b)),
                port(a),
            )))
        }
        _ => Ok(None),
    }
}

/// `a` with an IPv4-mapped IPv6 address as its IPv4 one. The unspecified address stays what
/// it is: where the kernel sends a connect to `0.0.0.0` or `::` depends on the socket's own
/// bound address (its source becomes the destination; a v4-mapped source takes `::` to IPv4),
/// so no decision about it holds — [`reachable`] refuses it.
pub fn canonical(a: SocketAddr) -> SocketAddr {
    let ip = match a.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    SocketAddr::new(ip, a.port())
}

/// Whether a destination (canonical) names one place whatever the socket is bound to: never
/// the unspecified address.
pub fn reachable(a: SocketAddr) -> bool {
    !a.ip().is_unspecified()
}

/// Whether a bind to `a` stays on loopback (`127.0.0.0/8`, `::1`, or an IPv4-mapped loopback
/// address; never the unspecified address, which is every interface).
pub fn binds_loopback(a: SocketAddr) -> bool {
    match a.ip() {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|m| m.is_loopback()),
    }
}

/// `TCP_LISTEN` in `/proc/net/tcp`'s `st` column.
const LISTEN: &str = "0A";

/// Whether a socket whose inode is in `own` listens on `a` (canonical) now, by
/// `/proc/net/tcp` and `/proc/net/tcp6` of this process's network namespace (the command's,
/// on Landlock alone).
pub fn listening(own: &HashSet<u64>, a: SocketAddr) -> bool {
    if own.is_empty() {
        return false;
    }
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|file| {
        std::fs::read_to_string(file).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                f.len() > 9
                    && f[3] == LISTEN
                    && f[9].parse::<u64>().is_ok_and(|ino| own.contains(&ino))
                    && local(f[1]).is_some_and(|l| canonical(l) == a)
            })
        })
    })
}

/// A `local_address` of `/proc/net/tcp{,6}`: the address as the kernel's `%08X` words of its
/// bytes in memory order, then `:` and the port in hex.
fn local(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for i in (0..ip.len()).step_by(8) {
        let word = u32::from_str_radix(ip.get(i..i + 8)?, 16).ok()?;
        bytes.extend(word.to_ne_bytes());
    }
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut a = vec![0u8; 16];
        a[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        a[2..4].copy_from_slice(&port.to_be_bytes());
        a[4..8].copy_from_slice(&ip);
        a
    }

    #[test]
    fn addresses_parse_and_map_to_what_the_kernel_reaches() {
        let a = parse(&v4([127, 0, 0, 1], 8080)).unwrap().unwrap();
        assert_eq!(a, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(parse(&v4([1, 2, 3, 4], 1)[..8]), Err(libc::EINVAL));
        assert_eq!(parse(&[1, 0, b'/', 0]), Ok(None));
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:80".parse().unwrap();
        assert_eq!(canonical(mapped), "10.0.0.1:80".parse().unwrap());
        // The unspecified address goes where the socket's own address says: never admitted.
        for a in ["0.0.0.0:9", "[::]:9", "[::ffff:0.0.0.0]:9"] {
            assert!(!reachable(canonical(a.parse().unwrap())), "{a}");
        }
        assert!(reachable("127.0.0.1:9".parse().unwrap()));
        assert!(binds_loopback("127.0.0.2:0".parse().unwrap()));
        assert!(binds_loopback("[::ffff:127.0.0.1]:0".parse().unwrap()));
        assert!(binds_loopback("[::1]:0".parse().unwrap()));
        assert!(!binds_loopback("0.0.0.0:0".parse().unwrap()));
        assert!(!binds_loopback("[::]:0".parse().unwrap()));
        assert!(!binds_loopback("10.0.0.1:0".parse().unwrap()));
    }

    #[test]
    fn a_listener_of_the_set_is_found_and_no_other() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        use std::os::fd::AsFd;
        let ino = rustix::fs::fstat(l.as_fd()).unwrap().st_ino;
        assert!(listening(&HashSet::from([ino]), at));
        assert!(!listening(&HashSet::from([ino + 1]), at));
        let other = SocketAddr::new(at.ip(), at.port().wrapping_add(1));
        assert!(!listening(&HashSet::from([ino]), other));
        assert_eq!(
            local("0100007F:1F90"),
            Some("127.0.0.1:8080".parse().unwrap())
        );
    }
}
