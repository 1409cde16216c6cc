//! The server name a TLS client asks for (RFC 8446 §4.1.2, RFC 6066 §3), read from the first
//! bytes the command sends through a tunnel, so a tunnel opened to an allowed name cannot be
//! used to ask the server there for another. Safe Rust, every length checked, never panics
//! (fuzz target `tls_client_hello`).

/// What the first bytes of a tunnel are.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// Not enough bytes yet to tell.
    NeedMore,
    /// Not a TLS handshake (plain bytes: nothing to check).
    NotTls,
    /// A ClientHello without a server name.
    NoName,
    /// A ClientHello naming this host (lower case, no trailing dot).
    Name(String),
    /// A ClientHello that does not fit its first record, or is malformed: refused, since the
    /// server might read a name from it that this reader did not.
    Unreadable,
}

/// Reads the ClientHello at the start of `bytes`.
pub fn client_hello(bytes: &[u8]) -> Hello {
    let Some(&first) = bytes.first() else {
        return Hello::NeedMore;
    };
    if first != 0x16 {
        return Hello::NotTls;
    }
    let Some(head) = bytes.get(..5) else {
        return Hello::NeedMore;
    };
    if head[1] != 3 {
        return Hello::NotTls;
    }
    if !(1..=4).contains(&head[2]) {
        return Hello::Unreadable; // SSL 3.0, or a version no client sends
    }
    let len = usize::from(u16::from_be_bytes([head[3], head[4]]));
    let Some(record) = bytes.get(5..5 + len) else {
        return if len > 16384 + 2048 {
            Hello::Unreadable
        } else {
            Hello::NeedMore
        };
    };
    parse_hello(record).unwrap_or(Hello::Unreadable)
}

/// The `encrypted_client_hello` extension (RFC draft-ietf-tls-esni): the outer name is a
/// decoy for the server's front end, which routes by the encrypted inner one.
const ECH: u16 = 0xfe0d;

fn parse_hello(record: &[u8]) -> Option<Hello> {
    let mut c = Cursor(record);
    if c.u8()? != 1 {
        return None; // not a ClientHello
    }
    let len = usize::try_from(c.u24()?).ok()?;
    let mut body = Cursor(c.take(len)?); // a hello longer than its record: None
    if !c.0.is_empty() {
        return None; // more after the hello in its record (a second hello?)
    }
    body.take(2 + 32)?; // version, random
    let sid = usize::from(body.u8()?);
    body.take(sid)?;
    let suites = usize::from(body.u16()?);
    body.take(suites)?;
    let methods = usize::from(body.u8()?);
    body.take(methods)?;
    if body.0.is_empty() {
        return Some(Hello::NoName);
    }
    let ext_len = usize::from(body.u16()?);
    let mut exts = Cursor(body.take(ext_len)?);
    let mut name = None;
    while !exts.0.is_empty() {
        let ty = exts.u16()?;
        let len = usize::from(exts.u16()?);
        let data = exts.take(len)?;
        if ty == ECH {
            return None; // the real server name travels encrypted inside
        }
        if ty != 0 {
            continue;
        }
        if name.is_some() {
            return None; // two server_name extensions
        }
        let mut list = Cursor(data);
        let list_len = usize::from(list.u16()?);
        let mut entries = Cursor(list.take(list_len)?);
        while !entries.0.is_empty() {
            let kind = entries.u8()?;
            let len = usize::from(entries.u16()?);
            let host = entries.take(len)?;
            if kind != 0 || name.is_some() {
                return None; // a name of another kind, or two host names
            }
            let host = std::str::from_utf8(host).ok()?;
            name = Some(shofer_core::egress::valid_name(host)?);
        }
    }
    Some(name.map_or(Hello::NoName, Hello::Name))
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (got, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(got)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }

    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
    }

    fn u24(&mut self) -> Option<u32> {
        let b = self.take(3)?;
        Some(u32::from(*b.first()?) << 16 | u32::from(*b.get(1)?) << 8 | u32::from(*b.get(2)?))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ClientHello naming `name` (or none), in one record.
    pub(crate) fn hello(name: Option<&str>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[1, 0]); // null compression
        let mut exts = Vec::new();
        if let Some(n) = name {
            let mut entry = vec![0];
            entry.extend_from_slice(&(n.len() as u16).to_be_bytes());
            entry.extend_from_slice(n.as_bytes());
            let mut sni = (entry.len() as u16).to_be_bytes().to_vec();
            sni.extend_from_slice(&entry);
            exts.extend_from_slice(&[0, 0]);
            exts.extend_from_slice(&(sni.len() as u16).to_be_bytes());
            exts.extend_from_slice(&sni);
        }
        exts.extend_from_slice(&[0, 43, 0, 3, 2, 3, 4]); // supported_versions
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn the_server_name_is_read_and_anything_odd_refused() {
        let h = hello(Some("Registry.NPMJS.org"));
        assert_eq!(client_hello(&h), Hello::Name("registry.npmjs.org".into()));
        assert_eq!(client_hello(&hello(None)), Hello::NoName);
        for n in 0..h.len() {
            assert_eq!(client_hello(&h[..n]), Hello::NeedMore, "{n}");
        }
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        // The handshake says it is longer than its record.
        let mut long = h.clone();
        long[7] = 0xff;
        assert_eq!(client_hello(&long), Hello::Unreadable);
        assert_eq!(client_hello(&hello(Some("a b"))), Hello::Unreadable);
        // SSL 3.0 records; a second hello after the first in its record.
        let mut ssl3 = h.clone();
        ssl3[2] = 0;
        assert_eq!(client_hello(&ssl3), Hello::Unreadable);
        let mut two = h.clone();
        let inner = h[5..].to_vec();
        two.extend_from_slice(&inner);
        let len = (two.len() - 5) as u16;
        two[3..5].copy_from_slice(&len.to_be_bytes());
        assert_eq!(client_hello(&two), Hello::Unreadable);
    }
}
