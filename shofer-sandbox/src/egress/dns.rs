//! Names to addresses, on the host, for the proxy: `/etc/hosts` first, then an `A` and an
//! `AAAA` query over UDP to each `nameserver` of `/etc/resolv.conf` in turn (as the C
//! library's stub resolver does, without its NSS modules: the static binary cannot load
//! them). [`parse_reply`] reads what a resolver sent: safe Rust, every length checked
//! (fuzz target `dns_reply`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

/// How long one resolver gets for one question.
const TIMEOUT: Duration = Duration::from_secs(3);

/// The addresses of `name` (valid, lower case: `shofer_core::egress::valid_name`), the hosts
/// file's when it names it, else the resolvers'. Empty when nothing answers.
pub fn resolve(name: &str) -> Vec<IpAddr> {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let listed = from_hosts(&hosts, name);
    if !listed.is_empty() {
        return listed;
    }
    let conf = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    for server in nameservers(&conf) {
        let mut found = Vec::new();
        let mut answered = false;
        for qtype in [1u16, 28] {
            if let Some(addrs) = ask(server, name, qtype) {
                answered = true;
                found.extend(addrs);
            }
        }
        if answered {
            return found;
        }
    }
    Vec::new()
}

/// The addresses `hosts` (an `/etc/hosts` text) gives `name`.
pub fn from_hosts(hosts: &str, name: &str) -> Vec<IpAddr> {
    hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let addr: IpAddr = words.next()?.parse().ok()?;
            words
                .any(|w| w.trim_end_matches('.').eq_ignore_ascii_case(name))
                .then_some(addr)
        })
        .collect()
}

/// The `nameserver` addresses of a `resolv.conf` text (127.0.0.53 and the like included:
/// the host's own resolver answers for the host).
pub fn nameservers(conf: &str) -> Vec<SocketAddr> {
    let servers: Vec<SocketAddr> = conf
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "nameserver").then_some(())?;
            let addr: IpAddr = w.next()?.split('%').next()?.parse().ok()?;
            Some(SocketAddr::new(addr, 53))
        })
        .take(3)
        .collect();
    if servers.is_empty() {
        vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53)]
    } else {
        servers
    }
}

/// One question (`qtype` 1: A, 28: AAAA) to `server`; `None` when it does not answer in
/// time or answers with an error other than "no such name".
fn ask(server: SocketAddr, name: &str, qtype: u16) -> Option<Vec<IpAddr>> {
    let bind: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(bind).ok()?;
    sock.connect(server).ok()?;
    sock.set_read_timeout(Some(TIMEOUT)).ok()?;
    let mut id = [0u8; 2];
    rustix::rand::getrandom(&mut id, rustix::rand::GetRandomFlags::empty()).ok()?;
    let id = u16::from_ne_bytes(id);
    let query = build_query(id, name, qtype)?;
    sock.send(&query).ok()?;
    let mut buf = [0u8; 1500];
    // Replies to other questions (a late one of an earlier attempt) are skipped.
    for _ in 0..4 {
        let n = sock.recv(&mut buf).ok()?;
        match parse_reply(buf.get(..n)?, id, qtype) {
            Reply::Other => continue,
            Reply::Addresses(a) => return Some(a),
            Reply::Failed => return None,
        }
    }
    None
}

/// A standard query for `name`, recursion desired; `None` for a name DNS cannot carry.
pub fn build_query(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        let len = u8::try_from(label.len())
            .ok()
            .filter(|&l| (1..64).contains(&l))?;
        q.push(len);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    Some(q)
}

/// What a resolver's datagram says.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Not the answer to our question (another id, not a response, truncated beyond use).
    Other,
    /// The addresses of the answer section of the type asked (none for "no such name").
    Addresses(Vec<IpAddr>),
    /// The resolver failed (SERVFAIL, REFUSED…).
    Failed,
}

/// Reads a reply to question `id` of type `qtype`. Never panics, whatever the bytes.
pub fn parse_reply(msg: &[u8], id: u16, qtype: u16) -> Reply {
    let mut c = Cursor { msg, at: 0 };
    let (Some(got_id), Some(flags), Some(qd), Some(an)) = (c.u16(), c.u16(), c.u16(), c.u16())
    else {
        return Reply::Other;
    };
    if got_id != id || flags & 0x8000 == 0 {
        return Reply::Other;
    }
    match flags & 0x000f {
        0 | 3 => {}
        _ => return Reply::Failed,
    }
    c.at = 12;
    for _ in 0..qd {
        if c.skip_name().is_none() || c.take(4).is_none() {
            return Reply::Other;
        }
    }
    let mut addrs = Vec::new();
    for _ in 0..an.min(64) {
        let Some(()) = c.skip_name() else { break };
        let (Some(ty), Some(_class), Some(_ttl), Some(len)) = (c.u16(), c.u16(), c.u32(), c.u16())
        else {
            break;
        };
        let Some(data) = c.take(usize::from(len)) else {
            break;
        };
        match (ty, data.len()) {
            (1, 4) if qtype == 1 => {
                let b: [u8; 4] = data.try_into().unwrap_or([0; 4]);
                addrs.push(IpAddr::V4(Ipv4Addr::from(b)));
            }
            (28, 16) if qtype == 28 => {
                let b: [u8; 16] = data.try_into().unwrap_or([0; 16]);
                addrs.push(IpAddr::V6(Ipv6Addr::from(b)));
            }
            _ => {}
        }
    }
    Reply::Addresses(addrs)
}

/// A read position in a message; every read checked.
struct Cursor<'a> {
    msg: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let got = self.msg.get(self.at..end)?;
        self.at = end;
        Some(got)
    }

    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from(self.u16()?) << 16 | u32::from(self.u16()?))
    }

    /// Past a name: labels up to a zero byte, or a compression pointer (two bytes, which ends
    /// the name where it stands: its target is not read).
    fn skip_name(&mut self) -> Option<()> {
        for _ in 0..128 {
            let len = *self.take(1)?.first()?;
            match len {
                0 => return Some(()),
                l if l & 0xc0 == 0xc0 => {
                    self.take(1)?;
                    return Some(());
                }
                l if l < 64 => {
                    self.take(usize::from(l))?;
                }
                _ => return None,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_resolv_conf_are_read_as_the_c_library_reads_them() {
        let hosts = "127.0.0.1 localhost\n# 1.2.3.4 x.test\n10.0.0.7  a.test  B.test. # c.test\n";
        assert_eq!(
            from_hosts(hosts, "b.test"),
            ["10.0.0.7".parse::<IpAddr>().unwrap()]
        );
        assert!(from_hosts(hosts, "x.test").is_empty());
        assert!(from_hosts(hosts, "c.test").is_empty());
        let conf = "search x\nnameserver 10.1.1.1\nnameserver fe80::1%eth0\noptions ndots:1\n";
        assert_eq!(
            nameservers(conf),
            [
                "10.1.1.1:53".parse().unwrap(),
                "[fe80::1]:53".parse().unwrap()
            ]
        );
        assert_eq!(nameservers(""), ["127.0.0.1:53".parse().unwrap()]);
    }

    #[test]
    fn a_reply_gives_the_addresses_of_the_type_asked() {
        let mut msg = build_query(7, "a.test", 1).unwrap();
        msg[2] = 0x81;
        msg[3] = 0x80;
        msg[7] = 2; // two answers: a CNAME by pointer, then an A
        msg.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 9, 0, 2, 0xc0, 12]);
        msg.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 9, 0, 4, 93, 184, 216, 34]);
        assert_eq!(
            parse_reply(&msg, 7, 1),
            Reply::Addresses(vec!["93.184.216.34".parse().unwrap()])
        );
        assert_eq!(parse_reply(&msg, 8, 1), Reply::Other);
        assert_eq!(parse_reply(&msg, 7, 28), Reply::Addresses(vec![]));
        msg[3] = 0x82;
        assert_eq!(parse_reply(&msg, 7, 1), Reply::Failed);
        for n in 0..msg.len() {
            let _ = parse_reply(&msg[..n], 7, 1);
        }
        assert!(build_query(1, &"a".repeat(64), 1).is_none());
    }
}
