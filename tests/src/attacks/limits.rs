//! Inside the sandbox — the run's limits: a fork bomb and a runaway allocation. Neither
//! attack's verdict is the judgement: the harness counts the bomb's processes from outside
//! and reads how the allocation ended.

use super::{arg, Seen};
use crate::sys;
use std::time::{Duration, Instant};

/// `fork-bomb <wt> <out> <millis>`: every process forks as fast as it can until `millis`
/// have passed (backing off 5 ms after a refused fork), then exits; the first waits for its
/// children and reports what it saw.
pub(crate) fn fork_bomb(a: &[String]) -> Seen {
    let ms: u64 = arg(a, 2).parse().unwrap_or(1500);
    let first = std::process::id();
    let deadline = Instant::now() + Duration::from_millis(ms);
    let (mut made, mut refused, mut last) = (0u64, 0u64, None);
    while Instant::now() < deadline {
        match sys::fork() {
            Ok(0) => (made, refused) = (0, 0),
            Ok(_) => made += 1,
            Err(e) => {
                refused += 1;
                last = Some(e);
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    if std::process::id() != first {
        sys::exit_now(0);
    }
    // Safety: waiting for our own children; a null status pointer is allowed.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0 {}
    Seen::Blocked(format!(
        "the first process forked {made} times, {refused} refused (last: {}); the host's count judges",
        last.map_or("none".into(), |e| e.to_string())
    ))
}

/// `alloc <wt> <out> <bytes>`: allocates `bytes` and writes to every page of it (memory the
/// kernel must charge). Escaped once every page is touched; a memory limit kills it first.
pub(crate) fn alloc(a: &[String]) -> Seen {
    let n: usize = arg(a, 2).parse().unwrap_or(128 << 20);
    let mut v = vec![0u8; n];
    v.iter_mut().step_by(4096).for_each(|b| *b = 1);
    let touched = std::hint::black_box(&v).iter().step_by(4096).count();
    Seen::Escaped(format!(
        "allocated {n} bytes and wrote to all {touched} pages"
    ))
}
