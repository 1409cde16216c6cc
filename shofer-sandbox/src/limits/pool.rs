//! The pool of spare cgroups: each cgroup v1 parent keeps up to [`SPARES`] empty cgroups of
//! finished runs, named `shofer-spare-<slot>`, so a run pays two renames instead of a `mkdir`
//! and an `rmdir` (the memory controller's set-up and teardown are the dear part: about
//! 80-185 µs a pair here, against 7-18 µs a rename).
//!
//! Entry points: [`claim`] (a spare renamed to the run's name, else a new cgroup), [`give_back`]
//! (the run's empty cgroup renamed into a free slot, else removed), [`sweep`] (dead runs' empty
//! cgroups into the pool or away). It never touches a cgroup whose name is not `shofer-spare-N`
//! or a run's name of our format ([`run_pid`]), and never puts a cgroup that holds a process
//! into the pool.
//!
//! # How
//! - **Atomic claims and returns, no listing.** `rename(2)` in cgroupfs is atomic and refuses an
//!   existing target (`EEXIST`, kernfs), so the slots are fixed names: a claim renames slot 0,
//!   1, … to the run's name and a concurrent run that loses gets `ENOENT` and tries the next; a
//!   return renames to the first slot that does not exist. The bound holds without a lock and
//!   without a `read_dir` of the parent on the start path (a listing of a memory cgroup's
//!   directory costs 10-40 µs here: it lists every control file).
//! - **Cgroup v1 only**: cgroup v2 has no rename (`EPERM`: its kernfs operations implement
//!   `mkdir` and `rmdir` only), so a v2 run makes and removes its cgroup as before.
//! - **Ages stay true**: a rename keeps the directory's times, so a claim touches the reused
//!   directory; [`sweep`]'s "a minute old at least" then means a minute since the run began.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

/// Spares kept per parent cgroup; a return beyond that removes the cgroup.
pub(super) const SPARES: usize = 4;

const SPARE_PREFIX: &str = "shofer-spare-";

/// The name of spare slot `slot`.
pub(super) fn spare_name(slot: usize) -> String {
    format!("{SPARE_PREFIX}{slot}")
}

/// The supervisor's PID when `name` is a run's cgroup name of our format,
/// `shofer-<pid>-<16 lowercase hex digits>` (the name [`run_name`] makes).
pub(super) fn run_pid(name: &str) -> Option<i32> {
    let (pid, suffix) = name.strip_prefix("shofer-")?.split_once('-')?;
    let digits = |s: &str, ok: fn(&u8) -> bool| !s.is_empty() && s.bytes().all(|b| ok(&b));
    if !digits(pid, u8::is_ascii_digit)
        || suffix.len() != 16
        || !digits(suffix, |b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0)
}

/// A run's cgroup name: our PID and a random suffix.
pub(super) fn run_name() -> String {
    format!(
        "shofer-{}-{}",
        std::process::id(),
        shofer_sys::statedir::random_suffix()
    )
}

/// Makes the cgroup `name` in the parent cgroup `parent`: a spare renamed to it when `pooled`
/// and one is there (then returns `true`: the cgroup has served earlier runs, its cumulative
/// counters start where they left off and its limit files hold the last run's values), else a
/// new one.
///
/// # Errors
/// `mkdirat`'s, when there is no spare.
pub(super) fn claim(parent: BorrowedFd<'_>, name: &str, pooled: bool) -> rustix::io::Result<bool> {
    if pooled {
        for slot in 0..SPARES {
            if rustix::fs::renameat(parent, spare_name(slot), parent, name).is_ok() {
                return Ok(true);
            }
        }
    }
    rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755))?;
    Ok(false)
}

/// Keeps the sweep's age rule true for a claimed spare `name` in `parent` (a rename keeps
/// the times).
pub(super) fn touch(parent: BorrowedFd<'_>, name: &str) {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    let _ = rustix::fs::utimensat(
        parent,
        name,
        &rustix::fs::Timestamps {
            last_access: now,
            last_modification: now,
        },
        AtFlags::SYMLINK_NOFOLLOW,
    );
}

/// Whether the cgroup file `file` (`tasks`, `cgroup.procs`: one task id a line) lists no task.
pub(super) fn lists_none(file: BorrowedFd<'_>) -> bool {
    let mut buf = [0u8; 64];
    rustix::io::pread(file, &mut buf, 0).is_ok_and(|n| buf[..n].iter().all(u8::is_ascii_whitespace))
}

/// Once a run's tree is gone: its cgroup `name` in `parent`, empty (the caller checked), into
/// a free slot of the pool when `pooled`, else removed.
///
/// A memory cgroup still charged with shared memory (`memory.stat` `shmem`: files the run
/// left in `/dev/shm` or another tmpfs) is removed instead: without swap the kernel cannot
/// reclaim those pages, so the next run to claim it would have that much less than its
/// limit, and a command could make a later run's allocations fail. Removed, the charge
/// moves to the parent.
pub(super) fn give_back(parent: BorrowedFd<'_>, name: &str, pooled: bool) {
    if pooled && !holds_shmem(parent, name) {
        for slot in 0..SPARES {
            match rustix::fs::renameat(parent, name, parent, spare_name(slot)) {
                Ok(()) => return,
                // The slot is taken (kernfs refuses an existing target).
                Err(rustix::io::Errno::EXIST | rustix::io::Errno::NOTEMPTY) => {}
                Err(_) => break,
            }
        }
    }
    let _ = rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR);
}

/// The cgroups in `parent` (at `path`) that runs left behind, their supervisor gone (a
/// SIGKILLed sandbox returns nothing): each empty one into the pool (when `pooled`) or
/// removed; one that holds a process is left alone.
///
/// "Empty" is what `cgroup.procs` lists, and it lists only the tasks of the reader's PID
/// namespace and those below it: read from a child PID namespace (a sandbox started in a
/// container that shares the hierarchy), a live run's cgroup of the host reads empty, and
/// a rename would put it, processes and all, into the pool for the next run to claim. So
/// outside the initial PID namespace the sweep only removes, which the kernel refuses for
/// a cgroup that holds a task of any namespace (`EBUSY`).
pub(super) fn sweep(parent: BorrowedFd<'_>, path: &Path, pooled: bool) {
    let pooled = pooled && sees_every_task();
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let Some(pid) = run_pid(name) else {
            continue;
        };
        // A minute old at least: a supervisor in another PID namespace names its cgroup by a
        // PID this one may not see, and has one empty until its command enters.
        // `st_mtime`'s width differs between architectures.
        #[allow(clippy::unnecessary_cast)]
        let old = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            now - st.st_mtime as i64 > 60
        });
        if !old || shofer_sys::proc::read(pid).is_some() {
            continue;
        }
        let empty = rustix::fs::openat(
            parent,
            format!("{name}/cgroup.procs"),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .is_ok_and(|f| lists_none(f.as_fd()));
        if empty {
            give_back(parent, name, pooled);
        }
    }
}

/// Whether the cgroup `name` in `parent` is a memory cgroup charged with shared memory
/// (v1 `memory.stat`'s own `shmem`, in bytes). Not one of the memory controller: no.
fn holds_shmem(parent: BorrowedFd<'_>, name: &str) -> bool {
    let Ok(file) = rustix::fs::openat(
        parent,
        format!("{name}/memory.stat"),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    ) else {
        return false;
    };
    // `shmem` comes early in the file (after cache, rss, rss_huge).
    let mut buf = [0u8; 512];
    let n = rustix::io::pread(&file, &mut buf, 0).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .find_map(|l| l.strip_prefix("shmem "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|v| v > 0)
}

/// Whether this process is in the initial PID namespace, where `cgroup.procs` lists every
/// task: its `/proc/self/ns/pid` is the kernel's fixed `PROC_PID_INIT_INO`. Without `/proc`,
/// no.
fn sees_every_task() -> bool {
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    // `st_ino`'s width differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::stat("/proc/self/ns/pid").is_ok_and(|st| st.st_ino as u64 == PROC_PID_INIT_INO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_are_recognised_and_nothing_else() {
        assert_eq!(run_pid("shofer-1234-0123456789abcdef"), Some(1234));
        assert_eq!(
            run_pid(&format!("shofer-{}-{}", 7, "f".repeat(16))),
            Some(7)
        );
        let name = run_name();
        assert_eq!(run_pid(&name), Some(std::process::id() as i32), "{name}");
        for other in [
            "shofer-spare-0",
            "shofer-test-1234",
            "shofer-1234",
            "shofer-1234-",
            "shofer--0123456789abcdef",
            "shofer-0-0123456789abcdef",
            "shofer-1234-0123456789ABCDEF",
            "shofer-1234-0123456789abcde",
            "shofer-1234-0123456789abcdef0",
            "shofer-1234-0123456789abcdeg",
            "shofer-12a4-0123456789abcdef",
            "shofer-+12-0123456789abcdef",
            "xshofer-1234-0123456789abcdef",
            "user.slice",
        ] {
            assert_eq!(run_pid(other), None, "{other}");
        }
    }

    #[test]
    fn spare_names_are_never_run_names() {
        for slot in 0..SPARES {
            assert_eq!(run_pid(&spare_name(slot)), None);
            assert!(spare_name(slot).starts_with(SPARE_PREFIX));
        }
    }
}
