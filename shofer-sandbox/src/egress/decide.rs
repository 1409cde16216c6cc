//! The allow-list applied to one destination: the name must be listed (or the address named
//! itself), and the connection goes only to an address the name resolved to that is public,
//! not one of the host's own, or named by the allow-list: the decision is on the address the
//! proxy then connects to, not on the name.

use std::net::{IpAddr, SocketAddr};

use shofer_core::egress::{special, AllowList};

use super::head::Host;

/// A refused destination: what the client named and why, with the flag that would allow it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `name:port` as asked.
    pub destination: String,
    /// One line: why, and what would allow it.
    pub reason: String,
}

/// Where the proxy may connect for `host`:`port`: the checked addresses, in the resolver's
/// order; `resolve` gives a name's addresses, `local` says whether one is the host's own.
///
/// # Errors
/// The [`Refusal`] when no address may be reached.
pub fn destination(
    allow: &AllowList,
    host: &Host,
    port: u16,
    local: impl Fn(IpAddr) -> bool,
    resolve: impl Fn(&str) -> Vec<IpAddr>,
) -> Result<Vec<SocketAddr>, Refusal> {
    let destination = host.display(port);
    let refuse = |reason: String| Refusal {
        destination: destination.clone(),
        reason,
    };
    let name = match host {
        Host::Address(a) => {
            return if allow.names_address(*a, port) {
                Ok(vec![SocketAddr::new(*a, port)])
            } else {
                Err(refuse(format!(
                    "an IP address is reached only when the allow-list names it (--allow-domain {destination}); name the host instead"
                )))
            };
        }
        Host::Name(n) => n,
    };
    if !allow.permits_name(name, port) {
        return Err(refuse(format!(
            "not in the allow-list (--allow-domain {destination} would allow it)"
        )));
    }
    let addrs = resolve(name);
    if addrs.is_empty() {
        return Err(refuse(format!("{name} does not resolve on the host")));
    }
    let mut why_not = None;
    let reachable: Vec<SocketAddr> = addrs
        .iter()
        .filter(|&&a| {
            let a = shofer_core::egress::canonical(a);
            let class = special(a).or_else(|| local(a).then_some("an address of the host itself"));
            match class {
                Some(c) if !allow.names_address(a, port) => {
                    why_not.get_or_insert((a, c));
                    false
                }
                _ => true,
            }
        })
        .map(|&a| SocketAddr::new(shofer_core::egress::canonical(a), port))
        .collect();
    match (reachable.is_empty(), why_not) {
        (true, Some((a, class))) => {
            let shown = SocketAddr::new(a, port);
            Err(refuse(format!(
                "{name} resolves to {shown} ({class}), which the proxy reaches only when the allow-list names it (--allow-domain {shown})"
            )))
        }
        _ => Ok(reachable),
    }
}

/// Whether `addr` is one of the host's own, as the kernel sees it now: a UDP socket can be
/// bound to it (every address of the local routing table, AnyIP routes and addresses added
/// since the run began included), in the supervisor's network namespace. Only the kernel's
/// "not a local address" answer says no: any other failure (no descriptor left) counts as
/// local, so the proxy refuses rather than guesses.
pub fn is_local(addr: IpAddr) -> bool {
    match std::net::UdpSocket::bind(SocketAddr::new(addr, 0)) {
        Ok(_) => true,
        Err(e) => e.raw_os_error() != Some(libc::EADDRNOTAVAIL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shofer_core::egress::Rule;

    fn list(rules: &[&str]) -> AllowList {
        AllowList::new(
            true,
            rules.iter().map(|r| Rule::parse(r).unwrap()).collect(),
        )
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_name_and_every_address_it_reaches_are_checked() {
        let allow = list(&["a.test", "local.test:8080", "127.0.0.1:8080"]);
        let own = |a: IpAddr| a == ip("203.0.113.9");
        let public = |_: &str| vec![ip("93.184.216.34")];
        let name = |n: &str| Host::Name(n.into());
        assert_eq!(
            destination(&allow, &name("a.test"), 443, own, public).unwrap(),
            ["93.184.216.34:443".parse().unwrap()]
        );
        let e = destination(&allow, &name("b.test"), 443, own, public).unwrap_err();
        assert!(e.reason.contains("--allow-domain b.test:443"), "{e:?}");
        let e = destination(&allow, &name("a.test"), 8443, own, public).unwrap_err();
        assert!(e.reason.contains("not in the allow-list"));
        let meta = |_: &str| vec![ip("169.254.169.254")];
        let e = destination(&allow, &name("a.test"), 443, own, meta).unwrap_err();
        assert!(e.reason.contains("link-local"), "{e:?}");
        let own_addr = |_: &str| vec![ip("203.0.113.9")];
        let e = destination(&allow, &name("a.test"), 443, own, own_addr).unwrap_err();
        assert!(e.reason.contains("the host itself"), "{e:?}");
        // A special address is skipped when a public one is there too.
        let mixed = |_: &str| vec![ip("127.0.0.1"), ip("93.184.216.34")];
        assert_eq!(
            destination(&allow, &name("a.test"), 443, own, mixed)
                .unwrap()
                .len(),
            1
        );
        // Loopback named by the allow-list, by name or as a literal.
        let lo = |_: &str| vec![ip("127.0.0.1")];
        assert!(destination(&allow, &name("local.test"), 8080, own, lo).is_ok());
        let literal = Host::Address(ip("127.0.0.1"));
        assert!(destination(&allow, &literal, 8080, own, lo).is_ok());
        let e = destination(&allow, &literal, 80, own, lo).unwrap_err();
        assert!(e.reason.contains("IP address"));
        let none = |_: &str| Vec::new();
        assert!(destination(&allow, &name("a.test"), 443, own, none).is_err());
    }

    #[test]
    fn the_hosts_own_addresses_are_local() {
        assert!(is_local(ip("127.0.0.1")));
        assert!(
            is_local(ip("127.0.0.2")),
            "the whole loopback route is local"
        );
        assert!(!is_local(ip("93.184.216.34")));
    }
}
