//! Host side — sockets: abstract and pathname unix sockets of outside listeners, TCP with `--net
//! deny` / `--net allow`.

use super::{nothing, Case, Scope};
use crate::attacks::Attack;
use crate::runner::{attack_checked, attack_spec_checked, Cmd, Ctx, Outcome, Sb};
use crate::sys;
use shofer_core::policy::Protection;
use std::os::fd::AsRawFd;

/// This family's cases, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "abstract-unix-connect",
            "connect to an outside abstract unix socket",
            Some(Protection::AbstractSockets),
            abstract_unix
        ),
        case!(
            "pathname-unix-connect",
            "field 10: connect to an outside pathname unix socket",
            Some(Protection::PathnameSockets),
            pathname_unix
        ),
        case!(
            "tcp-connect-net-deny",
            "--net deny: connect to a 127.0.0.1 listener outside",
            Some(Protection::Tcp),
            tcp_connect_deny
        ),
        case!(
            "tcp-bind-net-deny",
            "--net deny: bind 127.0.0.1:<port>",
            Some(Protection::Tcp),
            tcp_bind_deny
        ),
        case!(
            "tcp-connect-net-allow",
            "--net allow (default): connecting works",
            None,
            tcp_connect_allow
        ),
    ]
}

fn abstract_unix(c: &Ctx) -> Outcome {
    let name = c.w.marker();
    let l = match sys::unix_listen(name.as_bytes(), true) {
        Ok(l) => l,
        Err(e) => return Outcome::Error(format!("harness: abstract listener: {e}")),
    };
    let o = attack_checked(c, Attack::AbstractUnixConnect, &[name]);
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!("the outside listener got {n} connection(s)"));
    }
    o
}

fn pathname_unix(c: &Ctx) -> Outcome {
    let path = c.out.join("listen.sock");
    let l = match sys::unix_listen(path.as_os_str().as_encoded_bytes(), false) {
        Ok(l) => l,
        Err(e) => return Outcome::Error(format!("harness: pathname listener: {e}")),
    };
    let (u, g) = c.cell.user.ids();
    let _ = sys::lchown(&path, u, g);
    let _ = sys::chmod(&path, 0o777);
    let o = attack_checked(
        c,
        Attack::PathnameUnixConnect,
        &[path.display().to_string()],
    );
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!("the outside listener got {n} connection(s)"));
    }
    o
}

fn tcp_connect_deny(c: &Ctx) -> Outcome {
    let (l, port) = match sys::tcp_bind(0, true) {
        Ok(x) => x,
        Err(e) => return Outcome::Error(format!("harness: tcp listener: {e}")),
    };
    let mut spec = Sb::new(Cmd::Attack(Attack::TcpConnect, vec![port.to_string()]));
    spec.extra = vec!["--net".into(), "deny".into()];
    let o = attack_spec_checked(c, spec);
    if let Some(f) = silent_net_downgrade(c) {
        return f;
    }
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!(
            "the outside 127.0.0.1:{port} listener got {n} connection(s)"
        ));
    }
    o
}

fn tcp_bind_deny(c: &Ctx) -> Outcome {
    let port = match sys::tcp_bind(0, false) {
        Ok((_, p)) => p,
        Err(e) => return Outcome::Error(format!("harness: free port: {e}")),
    };
    let mut spec = Sb::new(Cmd::Attack(
        Attack::TcpBind,
        vec![port.to_string(), c.w.netns.clone()],
    ));
    spec.extra = vec!["--net".into(), "deny".into()];
    let o = attack_spec_checked(c, spec);
    silent_net_downgrade(c).unwrap_or(o)
}

/// `--net deny` that the report says is not enforced must have been refused without
/// `--allow-degraded` (never a silent downgrade).
fn silent_net_downgrade(c: &Ctx) -> Option<Outcome> {
    let rep = c.report.borrow();
    let tcp = &rep.as_ref()?["protections"]["tcp"];
    let unenforced = tcp["enforced"].as_bool() == Some(false);
    let flagged = c.cell.degraded || c.last_needed_degraded.get();
    (unenforced && !flagged).then(|| {
        Outcome::Fail(format!(
            "--net deny ran without --allow-degraded although the report says TCP is not enforced ({})",
            tcp["reason"]
        ))
    })
}

fn tcp_connect_allow(c: &Ctx) -> Outcome {
    let (l, port) = match sys::tcp_bind(0, true) {
        Ok(x) => x,
        Err(e) => return Outcome::Error(format!("harness: tcp listener: {e}")),
    };
    let o = attack_checked(
        c,
        Attack::TcpConnect,
        &[port.to_string(), "expect-ok".into()],
    );
    let _ = sys::accept_all(l.as_raw_fd());
    o
}
