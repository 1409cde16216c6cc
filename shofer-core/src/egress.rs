//! The egress allow-list of `--net proxy` (ARCHITECTURE §2.1): which destinations the
//! supervisor's proxy may open a connection to.
//!
//! - [`Rule`]: one `--allow-domain NAME[:PORT[,PORT…]]` (a name, a `*.suffix` wildcard or an
//!   IP address, with its ports: 443 and 80 when none is given), [`Rule::parse`].
//! - [`AllowList`]: the rules of a run: [`DEFAULT_DOMAINS`] (the documented default list,
//!   `shofer-core/default-domains.txt`) unless `--no-default-domains`, then the flags;
//!   [`AllowList::permits_name`] for a host name, [`AllowList::names_address`] for an address
//!   (an IP literal, or a special address a name resolved to, passes only when named).
//! - [`special`]: why an address is not the public internet (loopback, link-local, private…).
//!
//! Names are compared in lower case without a trailing dot; a wildcard `*.example.com` covers
//! every name below `example.com`, not `example.com` itself.

use std::net::IpAddr;

/// The default allow-list: public package registries and source hosts (one rule per line,
/// `#` comments), kept in one file so it is reviewed as a whole.
pub const DEFAULT_DOMAINS: &str = include_str!("../default-domains.txt");

/// The ports of a rule that names none.
pub const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// What a rule names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// One host name, lower case, no trailing dot.
    Name(String),
    /// Every name strictly below this suffix (`*.example.com` holds `example.com`).
    Below(String),
    /// One address.
    Address(IpAddr),
}

/// One allow-list entry: a host and the ports it may be reached on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The host.
    pub host: Host,
    /// The ports (never empty).
    pub ports: Vec<u16>,
}

impl Rule {
    /// Parses `NAME[:PORT[,PORT…]]`, `*.SUFFIX[:…]`, an IPv4 address or `[IPv6][:…]`.
    ///
    /// # Errors
    /// A message naming `text` and what would be valid.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let bad = |why: &str| {
            format!("--allow-domain {text}: {why} (expected NAME, *.SUFFIX or an IP address, optionally :PORT[,PORT…])")
        };
        let (host, ports) = if let Some(rest) = text.strip_prefix('[') {
            let (addr, after) = rest.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| bad("not an IPv6 address in [ ]"))?;
            let ports = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("expected ':' after ']'"))?,
                ),
            };
            (Host::Address(addr), ports)
        } else if let Ok(addr) = text.parse::<IpAddr>() {
            (Host::Address(addr), None)
        } else {
            let (name, ports) = match text.split_once(':') {
                Some((n, p)) => (n, Some(p)),
                None => (text, None),
            };
            let host = if let Ok(addr) = name.parse::<IpAddr>() {
                Host::Address(addr)
            } else if let Some(suffix) = name.strip_prefix("*.") {
                Host::Below(valid_name(suffix).ok_or_else(|| bad("not a valid domain name"))?)
            } else {
                Host::Name(valid_name(name).ok_or_else(|| bad("not a valid domain name"))?)
            };
            (host, ports)
        };
        let ports = match ports {
            None => DEFAULT_PORTS.to_vec(),
            Some(list) => list
                .split(',')
                .map(|p| p.parse::<u16>().ok().filter(|&p| p != 0))
                .collect::<Option<Vec<u16>>>()
                .ok_or_else(|| bad("a port is a number from 1 to 65535"))?,
        };
        Ok(Rule { host, ports })
    }

    /// How the rule reads on the command line.
    pub fn display(&self) -> String {
        let host = match &self.host {
            Host::Name(n) => n.clone(),
            Host::Below(s) => format!("*.{s}"),
            Host::Address(IpAddr::V6(a)) => format!("[{a}]"),
            Host::Address(a) => a.to_string(),
        };
        if self.ports == DEFAULT_PORTS {
            host
        } else {
            let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
            format!("{host}:{}", ports.join(","))
        }
    }
}

/// `name` in lower case without a trailing dot when it is a host name: labels of letters,
/// digits, `-` and `_`, 1 to 63 bytes, not starting or ending with `-`, 253 bytes at most.
pub fn valid_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    ok.then_some(name)
}

/// The allow-list of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowList {
    /// The rules, defaults first.
    pub rules: Vec<Rule>,
}

impl AllowList {
    /// The default rules (unless `no_defaults`) followed by `extra`.
    ///
    /// # Panics
    /// Never for the shipped [`DEFAULT_DOMAINS`] (a unit test parses every line).
    pub fn new(no_defaults: bool, extra: Vec<Rule>) -> AllowList {
        let mut rules = if no_defaults {
            Vec::new()
        } else {
            default_rules()
        };
        rules.extend(extra);
        AllowList { rules }
    }

    /// Whether host name `name` (already valid, lower case) may be reached on `port`.
    pub fn permits_name(&self, name: &str, port: u16) -> bool {
        self.rules.iter().any(|r| {
            r.ports.contains(&port)
                && match &r.host {
                    Host::Name(n) => n == name,
                    Host::Below(s) => name
                        .strip_suffix(s.as_str())
                        .is_some_and(|head| head.ends_with('.') && head.len() > 1),
                    Host::Address(_) => false,
                }
        })
    }

    /// Whether a rule names address `addr` on `port` itself: what lets an IP literal, or a name
    /// that resolves to a [`special`] address, through.
    pub fn names_address(&self, addr: IpAddr, port: u16) -> bool {
        let addr = canonical(addr);
        self.rules
            .iter()
            .any(|r| r.ports.contains(&port) && r.host == Host::Address(addr))
    }
}

/// The rules of [`DEFAULT_DOMAINS`].
pub fn default_rules() -> Vec<Rule> {
    DEFAULT_DOMAINS
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .filter_map(|l| Rule::parse(l).ok())
        .collect()
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Why `addr` is not a public internet address, or `None` when it is one: what the proxy
/// refuses unless the allow-list names the address.
pub fn special(addr: IpAddr) -> Option<&'static str> {
    match canonical(addr) {
        IpAddr::V4(a) => {
            let [b0, b1, ..] = a.octets();
            if a.is_loopback() {
                Some("loopback")
            } else if a.is_link_local() {
                Some("link-local: the cloud metadata service lives there")
            } else if a.is_private() {
                Some("private")
            } else if a.is_unspecified() || b0 == 0 {
                Some("this network (0.0.0.0/8)")
            } else if b0 == 100 && (64..128).contains(&b1) {
                Some("shared address space (100.64.0.0/10)")
            } else if a.is_multicast() || b0 >= 240 {
                Some("multicast or reserved")
            } else if b0 == 192 && b1 == 0 && a.octets()[2] == 0 {
                Some("IETF protocol assignments (192.0.0.0/24)")
            } else if b0 == 198 && (b1 == 18 || b1 == 19) {
                Some("benchmarking (198.18.0.0/15)")
            } else {
                None
            }
        }
        IpAddr::V6(a) => {
            let s0 = a.segments()[0];
            if a.is_loopback() {
                Some("loopback")
            } else if a.is_unspecified() {
                Some("unspecified")
            } else if s0 & 0xffc0 == 0xfe80 {
                Some("link-local: the cloud metadata service lives there")
            } else if s0 & 0xfe00 == 0xfc00 {
                Some("private (unique local)")
            } else if s0 & 0xffc0 == 0xfec0 {
                Some("private (site-local)")
            } else if a.is_multicast() {
                Some("multicast")
            } else if s0 == 0x0064 && a.segments()[1] == 0xff9b {
                Some("NAT64 (64:ff9b::/96 reaches IPv4 addresses)")
            } else if s0 == 0x2002 || (s0 == 0x2001 && a.segments()[1] == 0) {
                Some("a tunnel to IPv4 (6to4, Teredo)")
            } else if s0 == 0 {
                Some("reserved (::/16, IPv4-compatible)")
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_line_parses() {
        for l in DEFAULT_DOMAINS.lines() {
            let l = l.split('#').next().unwrap().trim();
            if !l.is_empty() {
                assert!(Rule::parse(l).is_ok(), "{l}");
            }
        }
        assert!(default_rules().len() > 20);
    }

    #[test]
    fn rules_parse_ports_and_wildcards() {
        let r = Rule::parse("Registry.NPMJS.org").unwrap();
        assert_eq!(r.host, Host::Name("registry.npmjs.org".into()));
        assert_eq!(r.ports, DEFAULT_PORTS);
        let r = Rule::parse("*.example.com:8443,9000").unwrap();
        assert_eq!(r.host, Host::Below("example.com".into()));
        assert_eq!(r.ports, [8443, 9000]);
        let r = Rule::parse("127.0.0.1:8080").unwrap();
        assert_eq!(r.host, Host::Address("127.0.0.1".parse().unwrap()));
        let r = Rule::parse("[::1]:80").unwrap();
        assert_eq!(r.host, Host::Address("::1".parse().unwrap()));
        assert_eq!(Rule::parse("::1").unwrap().ports, DEFAULT_PORTS);
        for bad in [
            "", "a:0", "a:x", "a..b", "-a.com", "*.", "[::1", "a b", "x:70000",
        ] {
            let e = Rule::parse(bad).unwrap_err();
            assert!(e.contains("--allow-domain"), "{e}");
        }
        assert_eq!(Rule::parse("*.a.com:1,2").unwrap().display(), "*.a.com:1,2");
    }

    #[test]
    fn names_match_exactly_or_strictly_below_a_wildcard() {
        let list = AllowList::new(
            true,
            vec![
                Rule::parse("a.com").unwrap(),
                Rule::parse("*.b.org:22").unwrap(),
                Rule::parse("10.0.0.1:80").unwrap(),
            ],
        );
        assert!(list.permits_name("a.com", 443));
        assert!(!list.permits_name("x.a.com", 443));
        assert!(!list.permits_name("a.com", 22));
        assert!(list.permits_name("x.b.org", 22));
        assert!(list.permits_name("y.x.b.org", 22));
        assert!(!list.permits_name("b.org", 22));
        assert!(!list.permits_name("evilb.org", 22));
        assert!(!list.permits_name("10.0.0.1", 80));
        assert!(list.names_address("10.0.0.1".parse().unwrap(), 80));
        assert!(list.names_address("::ffff:10.0.0.1".parse().unwrap(), 80));
        assert!(!list.names_address("10.0.0.1".parse().unwrap(), 443));
    }

    #[test]
    fn special_addresses_are_named() {
        for a in [
            "127.0.0.1",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "0.0.0.0",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "fec0::1",
            "::ffff:127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "::127.0.0.1",
        ] {
            assert!(special(a.parse().unwrap()).is_some(), "{a}");
        }
        for a in ["93.184.216.34", "140.82.112.3", "2606:4700::1111"] {
            assert!(special(a.parse().unwrap()).is_none(), "{a}");
        }
    }
}
