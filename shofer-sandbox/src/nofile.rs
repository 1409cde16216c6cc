//! The descriptor limit: the sandbox holds one descriptor per writable path (thousands of
//! `--allow-write` paths are supported) besides its pipes, so it raises its own soft
//! `RLIMIT_NOFILE`, and the command gets the caller's limit back before exec (a raised limit
//! would break programs that `select(2)` on descriptors).

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// The caller's `RLIMIT_NOFILE`, when [`raise`] raised ours.
static CALLER_NOFILE: std::sync::OnceLock<Rlimit> = std::sync::OnceLock::new();

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit: the sandbox holds one
/// descriptor per writable path (thousands of `--allow-write` paths are supported) besides
/// its pipes. The command gets the caller's limit back ([`restore`]).
pub(crate) fn raise() {
    let lim = getrlimit(Resource::Nofile);
    // None: RLIM_INFINITY, above every number.
    let raw = |v: Option<u64>| v.unwrap_or(u64::MAX);
    if raw(lim.current) >= raw(lim.maximum) {
        return;
    }
    let up = Rlimit {
        current: lim.maximum,
        maximum: lim.maximum,
    };
    if setrlimit(Resource::Nofile, up).is_ok() {
        let _ = CALLER_NOFILE.set(lim);
    }
}

/// Puts back the caller's `RLIMIT_NOFILE` (in the child, before exec). Async-signal-safe.
pub(crate) fn restore() {
    if let Some(lim) = CALLER_NOFILE.get() {
        // Lowering below the open descriptors is allowed.
        let _ = setrlimit(Resource::Nofile, *lim);
    }
}
