//! The descriptor limit: the sandbox holds one descriptor per writable path (thousands of
//! `--allow-write` paths are supported) besides its pipes, so it raises its own soft
//! `RLIMIT_NOFILE`, and the command gets the caller's limit back before exec (a raised limit
//! would break programs that `select(2)` on descriptors).

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// The caller's `RLIMIT_NOFILE`, when [`raise`] raised ours.
static CALLER_NOFILE: std::sync::OnceLock<Rlimit> = std::sync::OnceLock::new();

/// The fewest descriptors a run is started with: below this, some step runs out (a run of
/// `true` in a git repository needs about 70 at once on the namespace backends, more with
/// `--allow-write` paths and a linked worktree's view).
pub(crate) const MIN: u64 = 256;

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit: the sandbox holds one
/// descriptor per writable path (thousands of `--allow-write` paths are supported) besides
/// its pipes. The command gets the caller's limit back ([`restore`]).
///
/// # Errors
/// The hard limit is below [`MIN`] (a step would run out, somewhere): the run is refused
/// before anything starts, with the number.
pub(crate) fn raise() -> Result<(), String> {
    let lim = getrlimit(Resource::Nofile);
    // None: RLIM_INFINITY, above every number.
    let raw = |v: Option<u64>| v.unwrap_or(u64::MAX);
    if raw(lim.maximum) < MIN {
        return Err(format!(
            "the descriptor limit (ulimit -n) is {}: a run needs at least {MIN}",
            raw(lim.maximum)
        ));
    }
    if raw(lim.current) >= raw(lim.maximum) {
        return Ok(());
    }
    let up = Rlimit {
        current: lim.maximum,
        maximum: lim.maximum,
    };
    if setrlimit(Resource::Nofile, up).is_ok() {
        let _ = CALLER_NOFILE.set(lim);
    }
    Ok(())
}

/// How many descriptors [`make_room`] makes room for.
const ROOM: u64 = 4096;

/// Grows this process's descriptor table to hold [`ROOM`] descriptors (or the soft limit),
/// while one thread runs: the kernel grows a table shared by threads only after an RCU grace
/// period (`expand_fdtable`'s `synchronize_rcu`), which cost the set-up thread 8-17 ms at its
/// 256th descriptor (a dense home's Landlock read rules); one thread pays nothing for it, and
/// a table never shrinks. One `open`, one `dup` to the top, two `close`s. Best effort.
pub(crate) fn make_room() {
    use rustix::fs::{Mode, OFlags};
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    let Ok(top) = i32::try_from(soft.min(ROOM).saturating_sub(1)) else {
        return;
    };
    if let Ok(fd) = rustix::fs::open("/", OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) {
        let _ = rustix::io::fcntl_dupfd_cloexec(&fd, top);
    }
}

/// Descriptors held from the start of a run for its end: a run that runs out of them at a
/// later step still has these to put back what the command changed (the git restores), once
/// [`Reserve`] is dropped.
#[derive(Debug, Default)]
pub(crate) struct Reserve {
    /// Open until dropped.
    _held: Vec<std::os::fd::OwnedFd>,
}

impl Reserve {
    /// How many a run holds back.
    const HELD: usize = 16;

    /// Holds [`Self::HELD`] descriptors (one `open` of `/`, the rest `dup`s of it); fewer
    /// when the limit is near already.
    pub(crate) fn hold() -> Reserve {
        use rustix::fs::{Mode, OFlags};
        let Ok(first) = rustix::fs::open("/", OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) else {
            return Reserve::default();
        };
        let mut held = Vec::with_capacity(Self::HELD);
        while held.len() + 1 < Self::HELD {
            match rustix::io::fcntl_dupfd_cloexec(&first, 0) {
                Ok(fd) => held.push(fd),
                Err(_) => break,
            }
        }
        held.push(first);
        Reserve { _held: held }
    }
}

/// Puts back the caller's `RLIMIT_NOFILE` (in the child, before exec). Async-signal-safe.
pub(crate) fn restore() {
    if let Some(lim) = CALLER_NOFILE.get() {
        // Lowering below the open descriptors is allowed.
        let _ = setrlimit(Resource::Nofile, *lim);
    }
}
