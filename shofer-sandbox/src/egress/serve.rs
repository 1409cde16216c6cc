//! The proxy's threads: one accepts on the listener inside the command's network namespace,
//! one per connection reads what the client asks ([`super::head`]), decides
//! ([`super::decide`]), connects from the host and relays ([`super::relay`]). A refused
//! destination gets an answer naming it and the flag that would allow it (HTTP 403, SOCKS5
//! "not allowed by ruleset"), one stderr line per destination, and a place in the report's
//! `net_refused`.
//!
//! Bounds: [`MAX_CONNECTIONS`] at once (fewer when the descriptor limit would not hold them:
//! [`connections_allowed`]), a head of [`super::head::MAX_HEAD`] bytes arriving
//! within [`HEAD_TIME`] (a client that trickles it is closed), [`CONNECT_TIME`] to reach the
//! server, and [`super::relay::IDLE`].

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shofer_core::egress::AllowList;

use super::decide::{self, Refusal};
use super::head::{self, Host, Step};
use super::sni::{self, Hello};

/// Connections served at once; more wait in the listener's backlog.
pub const MAX_CONNECTIONS: usize = 256;
/// Descriptors one relayed connection holds: both sockets, a clone of each, two pipes.
const FDS_PER_CONNECTION: u64 = 8;
/// Descriptors kept for the rest of the supervisor (the gate's calls, the resolver, git).
const FDS_KEPT: u64 = 256;

/// How many connections the supervisor's descriptor limit holds alongside its other work, at
/// most [`MAX_CONNECTIONS`], at least 4.
pub fn connections_allowed() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let room = limit.saturating_sub(FDS_KEPT) / FDS_PER_CONNECTION;
    usize::try_from(room)
        .unwrap_or(usize::MAX)
        .clamp(4, MAX_CONNECTIONS)
}
/// How long a client has to send its whole request head.
pub const HEAD_TIME: Duration = Duration::from_secs(10);
/// How long the proxy tries to reach a server.
pub const CONNECT_TIME: Duration = Duration::from_secs(10);
/// Refusals listed (stderr, report) at most; the rest are counted.
pub const MAX_LISTED: usize = 100;

/// The refused destinations, each once, in order: filled by the proxy's threads, read for
/// the report when the run ends.
pub type Refused = Arc<Mutex<Vec<Refusal>>>;

struct Shared {
    allow: AllowList,
    max: usize,
    refused: Refused,
    active: AtomicUsize,
}

/// Serves `listener` (a listening TCP socket) on a thread of its own for the rest of this
/// process's life, admitting the destinations of `allow`, recording refusals in `refused`.
///
/// # Errors
/// The thread could not be started.
pub fn start(listener: OwnedFd, allow: AllowList, refused: &Refused) -> std::io::Result<()> {
    let shared = Arc::new(Shared {
        allow,
        max: connections_allowed(),
        refused: refused.clone(),
        active: AtomicUsize::new(0),
    });
    let listener = TcpListener::from(listener);
    std::thread::Builder::new()
        .name("proxy".into())
        .stack_size(128 * 1024)
        .spawn(move || accept_loop(&listener, &shared))?;
    Ok(())
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    loop {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(_) => {
                // EMFILE and the like: give the open connections time to end.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shared.active.load(Ordering::Relaxed) >= shared.max {
            continue; // dropped: the client sees the connection closed
        }
        shared.active.fetch_add(1, Ordering::Relaxed);
        let shared2 = shared.clone();
        let spawned = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                serve(client, &shared2);
                shared2.active.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            shared.active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Reads more of the head into `buf` (at most `max` bytes in all) before `deadline`; false
/// at end of file, on error, or past the deadline.
fn read_more(client: &TcpStream, buf: &mut Vec<u8>, max: usize, deadline: Instant) -> bool {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() || buf.len() >= max {
        return false;
    }
    let _ = client.set_read_timeout(Some(left.max(Duration::from_millis(10))));
    let mut chunk = vec![0u8; max - buf.len()];
    match (&*client).read(&mut chunk) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(chunk.get(..n).unwrap_or(&[]));
            true
        }
    }
}

fn serve(client: TcpStream, shared: &Shared) {
    let _ = client.set_nodelay(true);
    let deadline = Instant::now() + HEAD_TIME;
    let mut buf = Vec::with_capacity(1024);
    if !read_more(&client, &mut buf, head::MAX_HEAD, deadline) {
        return;
    }
    if head::is_socks(&buf) {
        return socks(client, buf, deadline, shared);
    }
    let (ask, len) = loop {
        match head::http(&buf) {
            Step::Done(ask, len) => break (ask, len),
            Step::Bad(why) => return answer(&client, 400, "Bad Request", &why),
            Step::NeedMore => {
                if !read_more(&client, &mut buf, head::MAX_HEAD, deadline) {
                    let why = "the request head did not arrive in time";
                    return answer(&client, 408, "Request Timeout", why);
                }
            }
        }
    };
    let server = match reach(shared, &ask.host, ask.port) {
        Ok(s) => s,
        Err((code, why)) => {
            let text = if code == 403 {
                "Forbidden"
            } else {
                "Bad Gateway"
            };
            return answer(&client, code, text, &why);
        }
    };
    let early = buf.get(len..).unwrap_or(&[]).to_vec();
    if ask.connect {
        let ok = b"HTTP/1.1 200 Connection established\r\n\r\n";
        if (&client).write_all(ok).is_ok() {
            tunnel(client, server, early, &ask.host, ask.port, shared);
        }
    } else if (&server).write_all(&ask.forward).is_ok() {
        super::relay::one_request(client, server, &early, ask.body);
    }
}

fn socks(client: TcpStream, mut buf: Vec<u8>, deadline: Instant, shared: &Shared) {
    const MAX: usize = 600;
    let used = loop {
        match head::socks_greeting(&buf) {
            Step::Done((), used) => break used,
            Step::Bad(_) => {
                let _ = (&client).write_all(&[5, 0xff]);
                return;
            }
            Step::NeedMore if read_more(&client, &mut buf, MAX, deadline) => {}
            Step::NeedMore => return,
        }
    };
    buf.drain(..used.min(buf.len()));
    if (&client).write_all(&[5, 0]).is_err() {
        return;
    }
    let reply = |code: u8| [5, code, 0, 1, 0, 0, 0, 0, 0, 0];
    let ((host, port), used) = loop {
        if !buf.is_empty() {
            match head::socks_request(&buf) {
                Step::Done(asked, used) => break (asked, used),
                Step::Bad(_) => {
                    let _ = (&client).write_all(&reply(head::SOCKS_NOT_SUPPORTED));
                    return;
                }
                Step::NeedMore => {}
            }
        }
        if !read_more(&client, &mut buf, MAX, deadline) {
            return;
        }
    };
    let server = match reach(shared, &host, port) {
        Ok(s) => s,
        // 2: connection not allowed by ruleset; 5: connection refused.
        Err((code, _)) => {
            let _ = (&client).write_all(&reply(if code == 403 { 2 } else { 5 }));
            return;
        }
    };
    if (&client).write_all(&reply(0)).is_ok() {
        let early = buf.get(used..).unwrap_or(&[]).to_vec();
        tunnel(client, server, early, &host, port, shared);
    }
}

/// Decides on `host`:`port` and connects; the HTTP status and the reason when it cannot.
fn reach(shared: &Shared, host: &Host, port: u16) -> Result<TcpStream, (u16, String)> {
    let addrs = decide::destination(
        &shared.allow,
        host,
        port,
        decide::is_local,
        super::dns::resolve,
    )
    .map_err(|r| {
        let why = format!("shofer: {} refused: {}", r.destination, r.reason);
        refuse(shared, r);
        (403, why)
    })?;
    let mut last = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, CONNECT_TIME) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some((*addr, e)),
        }
    }
    let why = match last {
        Some((a, e)) => format!("shofer: cannot connect to {a}: {e}"),
        None => "shofer: no address to connect to".to_string(),
    };
    Err((502, why))
}

/// A tunnel. To a host name, it must carry TLS naming that host: the client's first bytes,
/// arriving within [`HEAD_TIME`], must be a ClientHello whose server name is the one the
/// tunnel was opened to; anything else (plain bytes a server behind the name would route by
/// their own `Host`, TLS without a name or with another) is refused, so a tunnel to an
/// allowed name cannot reach another name served from the same address. To an address the
/// allow-list names itself, the bytes pass unchecked.
fn tunnel(
    client: TcpStream,
    server: TcpStream,
    mut early: Vec<u8>,
    host: &Host,
    port: u16,
    shared: &Shared,
) {
    let Host::Name(name) = host else {
        return super::relay::both_ways(client, server, &early);
    };
    let limit = 5 + 16384 + 2048;
    let deadline = Instant::now() + HEAD_TIME;
    let why = loop {
        match sni::client_hello(&early) {
            Hello::NeedMore => {
                if !read_more(&client, &mut early, limit, deadline) {
                    return;
                }
            }
            Hello::Name(sni) if &sni == name => {
                return super::relay::both_ways(client, server, &early);
            }
            Hello::Name(sni) => {
                break format!(
                    "the TLS server name {sni} differs from the name the tunnel was opened to"
                );
            }
            Hello::NoName => break "a TLS ClientHello without a server name".to_string(),
            Hello::NotTls => {
                break "a tunnel to a name carries TLS naming it (plain HTTP goes through the proxy as http://, not CONNECT)".to_string();
            }
            Hello::Unreadable => {
                break "a TLS ClientHello this proxy cannot read (split over records or malformed)"
                    .to_string();
            }
        }
    };
    refuse(
        shared,
        Refusal {
            destination: host.display(port),
            reason: why,
        },
    );
}

/// Records `r` (once per destination and reason, [`MAX_LISTED`] at most) and says so on
/// stderr; past the bound, one line says the rest go unlisted.
fn refuse(shared: &Shared, r: Refusal) {
    record(&shared.refused, r);
}

/// Records `r` in `refused` (once per destination and reason, [`MAX_LISTED`] at most) and
/// says so on stderr: the proxy's refusals and the gate's (`--net proxy` on Landlock alone).
pub(crate) fn record(refused: &Refused, r: Refusal) {
    let Ok(mut list) = refused.lock() else {
        return;
    };
    if list.iter().any(|x| x == &r) {
        return;
    }
    match list.len() {
        n if n < MAX_LISTED => {
            eprintln!(
                "shofer-sandbox: net refused: {}: {}",
                r.destination, r.reason
            );
            list.push(r);
        }
        MAX_LISTED => {
            eprintln!("shofer-sandbox: net refused: more destinations than {MAX_LISTED}; the rest are not listed");
            list.push(Refusal {
                destination: "...".into(),
                reason: format!("more than {MAX_LISTED} refusals; the rest are not listed"),
            });
        }
        _ => {}
    }
}

/// An HTTP answer with a one-line reason, and the end of the connection.
fn answer(client: &TcpStream, code: u16, text: &str, why: &str) {
    let body = format!("{why}\n");
    let head = format!(
        "HTTP/1.1 {code} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = (&*client).write_all(head.as_bytes());
    let _ = (&*client).write_all(body.as_bytes());
}
