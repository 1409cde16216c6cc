//! The bytes of an admitted connection, both ways: `splice(2)` from one socket into a pipe
//! and from the pipe into the other socket (the data never crosses user space), one thread per
//! direction. A direction that reaches end of file shuts the other socket's writing side (a
//! half-close passes through); a connection idle both ways for [`IDLE`] is closed.

use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::pipe::SpliceFlags;

/// How long a connection may carry nothing either way before it is closed.
pub const IDLE: Duration = Duration::from_secs(600);

/// How often a blocked direction wakes to look at the other's activity.
const TICK: Duration = Duration::from_secs(30);

/// Copies between `client` and `server` until both directions end (or the connection idles
/// out, or fails). `early`: bytes already read from the client, sent to the server first.
pub fn both_ways(client: TcpStream, server: TcpStream, early: &[u8]) {
    use std::io::Write;
    if !early.is_empty() && (&server).write_all(early).is_err() {
        return;
    }
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    for s in [&client, &server] {
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
    one_way(&client, &server, start, &last);
    if let Ok(back) = back {
        let _ = back.join();
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
