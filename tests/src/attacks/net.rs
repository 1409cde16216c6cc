//! Inside the sandbox — sockets: abstract and pathname unix sockets of outside listeners, TCP with
//! `--net deny` / `--net allow`.

use super::{arg, contain, Seen};
use crate::sys::{self};

/// `abstract-unix-connect`: connect to an outside abstract unix socket.
pub(crate) fn abstract_unix_connect(a: &[String]) -> Seen {
    contain(
        "connect(abstract unix socket of an outside listener)",
        sys::unix_connect(arg(a, 2).as_bytes(), true),
    )
}

/// `pathname-unix-connect`: field 10: connect to an outside pathname unix socket.
pub(crate) fn pathname_unix_connect(a: &[String]) -> Seen {
    contain(
        "connect(outside/listen.sock)",
        sys::unix_connect(arg(a, 2).as_bytes(), false),
    )
}

/// `tcp-connect <port> [expect-ok]`: connect to 127.0.0.1:<port>.
pub(crate) fn tcp_connect(a: &[String]) -> Seen {
    let port: u16 = arg(a, 2).parse().unwrap_or(0);
    let r = sys::tcp_connect(port);
    if arg(a, 3) == "expect-ok" {
        match r {
            Ok(_) => Seen::Ok("connected to 127.0.0.1 with --net allow".into()),
            Err(e) => Seen::Broken(format!("connect(127.0.0.1) with --net allow -> {e}")),
        }
    } else {
        contain("connect(127.0.0.1:<listener>)", r)
    }
}

/// `tcp-bind <port> <host netns>`: bind 127.0.0.1:<port> (blocked if the listener would be
/// reachable from the host).
pub(crate) fn tcp_bind(a: &[String]) -> Seen {
    let port: u16 = arg(a, 2).parse().unwrap_or(0);
    let r = sys::tcp_bind(port, true);
    let my_net = std::fs::read_link("/proc/self/ns/net")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    match r {
        // A listener in a private network namespace is unreachable from outside.
        Ok(_) if !arg(a, 3).is_empty() && my_net != arg(a, 3) => Seen::Blocked(
            "bind worked inside a private network namespace (unreachable from the host)".into(),
        ),
        r => contain("bind(127.0.0.1:<free port>)", r),
    }
}
