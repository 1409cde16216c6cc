//! What a client of the proxy asks for, from the first bytes of its connection: an HTTP
//! request head (`httparse`): `CONNECT host:port`, or a plain request with an absolute
//! `http://` URI, forwarded with an origin-form request line; or a SOCKS5 greeting and
//! `CONNECT` request (RFC 1928, no authentication). Pure functions over the bytes read so far,
//! bounded by [`MAX_HEAD`]; none panics (fuzz target `proxy_head`).

use std::net::IpAddr;

/// The most bytes a request head may take.
pub const MAX_HEAD: usize = 16 * 1024;

/// A destination as the client named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// A host name (valid, lower case, no trailing dot).
    Name(String),
    /// An IP literal.
    Address(IpAddr),
}

impl Host {
    /// How the destination reads in a message.
    pub fn display(&self, port: u16) -> String {
        match self {
            Host::Name(n) => format!("{n}:{port}"),
            Host::Address(IpAddr::V6(a)) => format!("[{a}]:{port}"),
            Host::Address(a) => format!("{a}:{port}"),
        }
    }
}

/// One step of reading a head.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<T> {
    /// The bytes so far are the start of a valid head.
    NeedMore,
    /// Done: what was asked, and how many bytes the head took.
    Done(T, usize),
    /// Not a request the proxy serves, with the reason for the client.
    Bad(String),
}

/// An HTTP request to the proxy.
#[derive(Debug, PartialEq, Eq)]
pub struct Ask {
    /// The destination.
    pub host: Host,
    /// Its port.
    pub port: u16,
    /// `CONNECT` (a tunnel) rather than a request to forward.
    pub connect: bool,
    /// For a forwarded request: its head as the server gets it (origin-form request line,
    /// `Host` from the URI, no `Proxy-*` or hop-by-hop headers, `Connection: close`).
    pub forward: Vec<u8>,
    /// For a forwarded request: how its body is framed (what is forwarded after the head;
    /// nothing after the body is).
    pub body: Body,
}

/// How a forwarded request's body ends (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// No body.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Reads an HTTP request head from `buf`.
pub fn http(buf: &[u8]) -> Step<Ask> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Step::NeedMore,
        Ok(httparse::Status::Partial) => return bad("the request head is over 16 KiB"),
        Err(e) => return bad(&format!("not an HTTP request ({e})")),
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return bad("an incomplete request line");
    };
    let mut hosts = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    let host_header = hosts.next().map(|h| h.value);
    if hosts.next().is_some() {
        return bad("two Host headers");
    }
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let (authority, path) = if connect {
        (target, "")
    } else {
        let Some(rest) = strip_prefix_ignore_case(target, "http://") else {
            return bad(&format!(
                "{method} {target}: a proxy request names an absolute http:// URI (use CONNECT for https)"
            ));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        rest.split_at(end)
    };
    let Some((host, port)) = authority_of(authority, if connect { None } else { Some(80) }) else {
        return bad(&format!("{authority}: not a host and port"));
    };
    if let Some(value) = host_header {
        let same = std::str::from_utf8(value)
            .ok()
            .and_then(|v| authority_of(v.trim(), Some(port)))
            .is_some_and(|(h, p)| h == host && p == port);
        if !same {
            return bad(&format!(
                "the Host header ({}) differs from the destination ({})",
                String::from_utf8_lossy(value),
                host.display(port)
            ));
        }
    }
    let body = match body_of(req.headers) {
        Ok(b) => b,
        Err(why) => return bad(why),
    };
    let forward = if connect {
        Vec::new()
    } else {
        let path = match path.split('#').next().unwrap_or("") {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        let mut out = format!("{method} {path} HTTP/1.{version}\r\nHost: {authority}\r\n");
        for h in req.headers.iter() {
            let n = h.name.to_ascii_lowercase();
            let hop = matches!(
                n.as_str(),
                "host" | "connection" | "keep-alive" | "te" | "trailer" | "upgrade"
            ) || n.starts_with("proxy-");
            // The body's framing stays as read: `Transfer-Encoding` is only ever "chunked".
            if !hop {
                out.push_str(h.name);
                out.push_str(": ");
                out.push_str(&String::from_utf8_lossy(h.value));
                out.push_str("\r\n");
            }
        }
        out.push_str("Connection: close\r\n\r\n");
        out.into_bytes()
    };
    Step::Done(
        Ask {
            host,
            port,
            connect,
            forward,
            body,
        },
        len,
    )
}

/// The body framing of a request's `headers`: one `Content-Length` (every copy the same
/// number) or `Transfer-Encoding: chunked` alone; both, or any other coding, is refused (the
/// server might frame the body otherwise than the proxy does).
fn body_of(headers: &[httparse::Header<'_>]) -> Result<Body, &'static str> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in headers {
        let value = std::str::from_utf8(h.value).map_err(|_| "a framing header is not text")?;
        if h.name.eq_ignore_ascii_case("content-length") {
            for v in value.split(',') {
                let v = v.trim();
                let n = (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| v.parse::<u64>().ok())
                    .flatten()
                    .ok_or("a Content-Length that is not a number")?;
                if length.is_some_and(|l| l != n) {
                    return Err("two different Content-Length values");
                }
                length = Some(n);
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if chunked || !value.trim().eq_ignore_ascii_case("chunked") {
                return Err("a Transfer-Encoding other than one \"chunked\"");
            }
            chunked = true;
        }
    }
    match (length, chunked) {
        (Some(_), true) => Err("both Content-Length and Transfer-Encoding"),
        (Some(n), false) => Ok(Body::Length(n)),
        (None, true) => Ok(Body::Chunked),
        (None, false) => Ok(Body::None),
    }
}

fn bad<T>(why: &str) -> Step<T> {
    Step::Bad(why.to_string())
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| s.get(prefix.len()..))
        .flatten()
}

/// `host:port`, `[v6]:port`, or a bare host when `default` gives the port. No user info.
pub fn authority_of(s: &str, default: Option<u16>) -> Option<(Host, u16)> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        let addr: std::net::Ipv6Addr = addr.parse().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (Host::Address(IpAddr::V6(addr)), port)
    } else {
        let (h, p) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        let host = match h.parse::<std::net::Ipv4Addr>() {
            Ok(a) => Host::Address(IpAddr::V4(a)),
            Err(_) => Host::Name(shofer_core::egress::valid_name(h)?),
        };
        (host, p)
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0)?,
        None => default?,
    };
    Some((host, port))
}

/// Whether `buf` starts a SOCKS5 greeting rather than an HTTP request.
pub fn is_socks(buf: &[u8]) -> bool {
    buf.first() == Some(&5)
}

/// A SOCKS5 greeting: the version and the methods offered; done when "no authentication"
/// (0) is among them.
pub fn socks_greeting(buf: &[u8]) -> Step<()> {
    let Some(&n) = buf.get(1) else {
        return Step::NeedMore;
    };
    let end = 2 + usize::from(n);
    let Some(methods) = buf.get(2..end) else {
        return Step::NeedMore;
    };
    if methods.contains(&0) {
        Step::Done((), end)
    } else {
        bad("SOCKS5 without \"no authentication\" among the methods")
    }
}

/// The SOCKS5 reply code for a request this proxy does not serve, with the reason.
pub const SOCKS_NOT_SUPPORTED: u8 = 7;

/// A SOCKS5 request: `CONNECT` to a host name or an address.
pub fn socks_request(buf: &[u8]) -> Step<(Host, u16)> {
    let Some(head) = buf.get(..4) else {
        return Step::NeedMore;
    };
    if head[0] != 5 || head[2] != 0 {
        return bad("not a SOCKS5 request");
    }
    if head[1] != 1 {
        return bad("only SOCKS5 CONNECT is served (no BIND, no UDP ASSOCIATE)");
    }
    let (host, at) = match head[3] {
        1 => {
            let Some(b) = buf.get(4..8) else {
                return Step::NeedMore;
            };
            let b: [u8; 4] = [b[0], b[1], b[2], b[3]];
            (Host::Address(IpAddr::from(b)), 8)
        }
        4 => {
            let Some(b) = buf.get(4..20) else {
                return Step::NeedMore;
            };
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            (Host::Address(IpAddr::from(a)), 20)
        }
        3 => {
            let Some(&n) = buf.get(4) else {
                return Step::NeedMore;
            };
            let end = 5 + usize::from(n);
            let Some(name) = buf.get(5..end) else {
                return Step::NeedMore;
            };
            let name = std::str::from_utf8(name).ok();
            let host = match name.and_then(|n| n.parse::<IpAddr>().ok()) {
                Some(a) => Host::Address(a),
                None => match name.and_then(shofer_core::egress::valid_name) {
                    Some(n) => Host::Name(n),
                    None => return bad("the SOCKS5 host name is not a valid domain name"),
                },
            };
            (host, end)
        }
        _ => return bad("an unknown SOCKS5 address type"),
    };
    let Some(p) = buf.get(at..at + 2) else {
        return Step::NeedMore;
    };
    match u16::from_be_bytes([p[0], p[1]]) {
        0 => bad("SOCKS5 port 0"),
        port => Step::Done((host, port), at + 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(step: Step<Ask>) -> Ask {
        match step {
            Step::Done(a, _) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn connect_and_absolute_uris_name_their_destination() {
        let a = done(http(
            b"CONNECT Reg.Test:443 HTTP/1.1\r\nHost: reg.test:443\r\n\r\n",
        ));
        assert_eq!(
            (a.host, a.port, a.connect),
            (Host::Name("reg.test".into()), 443, true)
        );
        let a = done(http(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n"));
        assert_eq!(a.host, Host::Address("::1".parse().unwrap()));
        let a = done(http(
            b"GET http://a.test:8080/x?y HTTP/1.1\r\nHost: a.test:8080\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        ));
        assert_eq!((a.port, a.connect), (8080, false));
        assert_eq!(
            String::from_utf8(a.forward).unwrap(),
            "GET /x?y HTTP/1.1\r\nHost: a.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let a = done(http(
            b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n",
        ));
        assert_eq!(a.body, Body::Length(5));
        assert!(String::from_utf8(a.forward)
            .unwrap()
            .contains("Content-Length: 5\r\n"));
        let a = done(http(
            b"PUT http://a.test/ HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n",
        ));
        assert_eq!(a.body, Body::Chunked);
        let a = done(http(b"GET http://a.test?q HTTP/1.0\r\n\r\n"));
        assert!(a
            .forward
            .starts_with(b"GET /?q HTTP/1.0\r\nHost: a.test\r\n"));
        assert_eq!(http(b"CONNECT a.test:443 HTTP/1.1\r\nHo"), Step::NeedMore);
    }

    #[test]
    fn odd_requests_are_refused_with_a_reason() {
        for (req, why) in [
            (
                &b"CONNECT a.test:443 HTTP/1.1\r\nHost: b.test\r\n\r\n"[..],
                "differs",
            ),
            (
                b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:444\r\n\r\n",
                "differs",
            ),
            (
                b"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
                "differs",
            ),
            (
                b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test\r\nHost: a.test\r\n\r\n",
                "two Host",
            ),
            (b"GET https://a.test/ HTTP/1.1\r\n\r\n", "CONNECT"),
            (b"GET /x HTTP/1.1\r\n\r\n", "absolute"),
            (b"CONNECT a.test HTTP/1.1\r\n\r\n", "not a host and port"),
            (
                b"GET http://u@a.test/ HTTP/1.1\r\n\r\n",
                "not a host and port",
            ),
            (b"\x16\x03\x01", "not an HTTP request"),
            (b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", "both"),
            (b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", "two different"),
            (b"POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "Transfer-Encoding"),
            (b"POST http://a.test/ HTTP/1.1\r\nContent-Length: +3\r\n\r\n", "not a number"),
        ] {
            match http(req) {
                Step::Bad(w) => assert!(w.contains(why), "{w}"),
                other => panic!("{other:?}"),
            }
        }
        let big = [b'a'; MAX_HEAD];
        assert!(matches!(http(&big), Step::Bad(_)));
    }

    #[test]
    fn socks5_names_a_host_or_an_address() {
        assert_eq!(socks_greeting(&[5, 2, 2, 0]), Step::Done((), 4));
        assert!(matches!(socks_greeting(&[5, 1, 2]), Step::Bad(_)));
        let mut req = vec![5, 1, 0, 3, 6];
        req.extend_from_slice(b"a.test");
        req.extend_from_slice(&443u16.to_be_bytes());
        assert_eq!(
            socks_request(&req),
            Step::Done((Host::Name("a.test".into()), 443), req.len())
        );
        for n in 0..req.len() {
            assert_eq!(socks_request(&req[..n]), Step::NeedMore);
        }
        assert_eq!(
            socks_request(&[5, 1, 0, 1, 127, 0, 0, 1, 0, 80]),
            Step::Done((Host::Address("127.0.0.1".parse().unwrap()), 80), 10)
        );
        assert!(matches!(socks_request(&[5, 3, 0, 1]), Step::Bad(w) if w.contains("UDP")));
    }
}
