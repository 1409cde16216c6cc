//! The descriptor limit: the sandbox holds one descriptor per writable path (thousands of
//! `--allow-write` paths are supported) besides its pipes, so it raises its own soft
//! `RLIMIT_NOFILE`, and the command gets the caller's limit back before exec (a raised limit
//! would break programs that `select(2)` on descriptors).

/// The caller's `RLIMIT_NOFILE`, when [`raise`] raised ours.
static CALLER_NOFILE: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit: the sandbox holds one
/// descriptor per writable path (thousands of `--allow-write` paths are supported) besides
/// its pipes. The command gets the caller's limit back ([`restore`]).
pub(crate) fn raise() {
    // Safety: an all-zero rlimit is a valid out-parameter.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // Safety: getrlimit into a local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0
        || lim.rlim_cur >= lim.rlim_max
    {
        return;
    }
    let up = libc::rlimit {
        rlim_cur: lim.rlim_max,
        rlim_max: lim.rlim_max,
    };
    // Safety: setrlimit on this process with a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &up) } == 0 {
        let _ = CALLER_NOFILE.set(lim);
    }
}

/// Puts back the caller's `RLIMIT_NOFILE` (in the child, before exec). Async-signal-safe.
pub(crate) fn restore() {
    if let Some(lim) = CALLER_NOFILE.get() {
        // Safety: setrlimit with a valid struct; lowering below the open descriptors is
        // allowed.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, lim) };
    }
}
