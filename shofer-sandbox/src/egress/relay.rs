//! The bytes of an admitted connection, both ways: `splice(2)` from one socket into a pipe
//! and from the pipe into the other socket (the data never crosses user space), one thread per
//! direction. A direction that reaches end of file shuts the other socket's writing side (a
//! half-close passes through); a connection idle both ways for [`IDLE`] is closed.
//! [`one_request`] is the forwarded plain-HTTP form: the request's body as framed, and nothing
//! after it, one way; the reply the other.

use std::io::{BufRead, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::pipe::SpliceFlags;

use super::head::Body;

/// How long a connection may carry nothing either way before it is closed.
pub const IDLE: Duration = Duration::from_secs(600);

/// How often a blocked direction wakes to look at the other's activity.
const TICK: Duration = Duration::from_secs(30);

/// Copies between `client` and `server` until both directions end (or the connection idles
/// out, or fails). `early`: bytes already read from the client, sent to the server first.
pub fn both_ways(client: TcpStream, server: TcpStream, early: &[u8]) {
    if !early.is_empty() && (&server).write_all(early).is_err() {
        return;
    }
    with_reply(&client, &server, |client, server, start, last| {
        one_way(client, server, start, last);
    });
}

/// A forwarded request whose head the server has: its body (`early`, then the client's bytes)
/// as `body` frames it goes to the server, nothing the client sends after it does, and the
/// server's reply goes back whole.
pub fn one_request(client: TcpStream, server: TcpStream, early: &[u8], body: Body) {
    with_reply(&client, &server, |client, server, _, _| {
        let _ = client.set_read_timeout(Some(IDLE));
        let mut from = std::io::BufReader::new(Source { early, client });
        if forward_body(&mut from, &mut &*server, body).is_err() {
            shut_all(client, server);
        }
    });
}

/// The connection's timeouts set, the server's bytes copied to the client on a thread of
/// their own while `forward` sends the client's, until both end.
fn with_reply(
    client: &TcpStream,
    server: &TcpStream,
    forward: impl FnOnce(&TcpStream, &TcpStream, Instant, &AtomicU64),
) {
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    for s in [client, server] {
        let _ = s.set_read_timeout(Some(TICK));
        let _ = s.set_write_timeout(Some(IDLE));
    }
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let back = {
        let last = last.clone();
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || one_way(&s2, &c2, start, &last))
    };
    forward(client, server, start, &last);
    if let Ok(back) = back {
        let _ = back.join();
    }
}

/// The bytes already read, then the client's.
struct Source<'a> {
    early: &'a [u8],
    client: &'a TcpStream,
}

impl Read for Source<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.early.is_empty() {
            return (&*self.client).read(buf);
        }
        let n = self.early.len().min(buf.len());
        let (now, later) = self.early.split_at(n);
        buf.get_mut(..n).unwrap_or_default().copy_from_slice(now);
        self.early = later;
        Ok(n)
    }
}

/// Copies one body framed as `body` from `from` to `to`, and nothing more.
///
/// # Errors
/// The client ended early, a chunk's framing is malformed (a size line over 4 KiB or not hex,
/// a chunk not followed by CRLF), or a write failed.
pub fn forward_body(
    from: &mut impl BufRead,
    to: &mut impl Write,
    body: Body,
) -> std::io::Result<()> {
    let bad = || std::io::Error::from(std::io::ErrorKind::InvalidData);
    let exact = |from: &mut dyn BufRead, to: &mut dyn Write, n: u64| -> std::io::Result<()> {
        if std::io::copy(&mut from.take(n), to)? == n {
            Ok(())
        } else {
            Err(std::io::ErrorKind::UnexpectedEof.into())
        }
    };
    match body {
        Body::None => Ok(()),
        Body::Length(n) => exact(from, to, n),
        Body::Chunked => loop {
            let line = line_of(from)?;
            let size = std::str::from_utf8(&line)
                .ok()
                .and_then(|l| l.trim_end().split(';').next())
                .map(str::trim)
                .filter(|h| !h.is_empty() && h.len() <= 16)
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .ok_or_else(bad)?;
            to.write_all(&line)?;
            if size == 0 {
                // Trailer fields up to the empty line.
                loop {
                    let t = line_of(from)?;
                    to.write_all(&t)?;
                    if t == b"\r\n" {
                        return Ok(());
                    }
                }
            }
            exact(from, to, size)?;
            let mut crlf = [0u8; 2];
            from.read_exact(&mut crlf)?;
            if &crlf != b"\r\n" {
                return Err(bad());
            }
            to.write_all(&crlf)?;
        },
    }
}

/// One CRLF-terminated line of at most 4 KiB, its CRLF included.
fn line_of(from: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    from.take(4096).read_until(b'\n', &mut line)?;
    if line.ends_with(b"\r\n") {
        Ok(line)
    } else {
        Err(std::io::ErrorKind::InvalidData.into())
    }
}

/// `from` to `to` until end of file or failure; then `to`'s writing side shut (end of file)
/// or, on failure or idling out, both sockets shut both ways (the other direction wakes).
fn one_way(from: &TcpStream, to: &TcpStream, start: Instant, last: &AtomicU64) {
    let Ok((pipe_r, pipe_w)) = shofer_sys::fd::pipe_large() else {
        shut_all(from, to);
        return;
    };
    let flags = SpliceFlags::MOVE;
    loop {
        match rustix::pipe::splice(from.as_fd(), None, &pipe_w, None, 1 << 20, flags) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(mut n) => {
                last.store(start.elapsed().as_secs(), Ordering::Relaxed);
                while n > 0 {
                    match rustix::pipe::splice(&pipe_r, None, to.as_fd(), None, n, flags) {
                        Ok(0) => break,
                        Ok(m) => n -= m,
                        Err(Errno::INTR) => {}
                        Err(_) => {
                            shut_all(from, to);
                            return;
                        }
                    }
                }
            }
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => {
                let idle = start
                    .elapsed()
                    .as_secs()
                    .saturating_sub(last.load(Ordering::Relaxed));
                if idle >= IDLE.as_secs() {
                    shut_all(from, to);
                    return;
                }
            }
            Err(_) => {
                shut_all(from, to);
                return;
            }
        }
    }
}

fn shut_all(a: &TcpStream, b: &TcpStream) {
    let _ = a.shutdown(Shutdown::Both);
    let _ = b.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarded(input: &[u8], body: Body) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        forward_body(&mut std::io::BufReader::new(input), &mut out, body).map(|()| out)
    }

    #[test]
    fn a_body_goes_as_framed_and_nothing_after_it() {
        let next = b"GET /smuggled HTTP/1.1\r\nHost: b.test\r\n\r\n";
        let mut input = b"hello".to_vec();
        input.extend_from_slice(next);
        assert_eq!(forwarded(&input, Body::Length(5)).unwrap(), b"hello");
        assert_eq!(forwarded(&input, Body::None).unwrap(), b"");
        let mut chunked = b"5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n".to_vec();
        let whole = chunked.clone();
        chunked.extend_from_slice(next);
        assert_eq!(forwarded(&chunked, Body::Chunked).unwrap(), whole);
        assert!(forwarded(b"hel", Body::Length(5)).is_err());
        for bad in [
            &b"x\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"5\nhello\r\n",
            b"fffffffffffffffff\r\n",
        ] {
            assert!(forwarded(bad, Body::Chunked).is_err(), "{bad:?}");
        }
    }
}
