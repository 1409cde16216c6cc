//! This process's place in the process tree: the child-subreaper flag, reaping, its pid.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use rustix::process::{Pid, WaitOptions};

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`, Linux 3.4, prctl(2)):
/// orphaned descendants — a `setsid` or double-forked daemon whose parent exited — are
/// re-parented to us instead of to init, so they stay below us and findable by
/// [`crate::ProcTable::descendants`].
///
/// # Errors
/// As `prctl(2)`.
pub fn set_child_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Pid::from_raw(1)).map_err(Into::into)
}

/// Whether this process is a child subreaper (`PR_GET_CHILD_SUBREAPER`); false when the
/// kernel cannot say.
pub fn is_child_subreaper() -> bool {
    rustix::process::child_subreaper().is_ok_and(|p| p.is_some())
}

/// Reaps the child `pid` if it has exited (`waitpid(pid, WNOHANG)`). For orphans re-parented
/// to us, never for a child someone else waits on (tokio, `std::process::Child`).
pub fn reap(pid: i32) {
    if let Some(pid) = self::pid(pid) {
        let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
    }
}

/// `raw` as a rustix [`Pid`], `None` unless positive (rustix asserts a pid is not negative;
/// 0 and negative numbers name groups or "any" in kill(2)/waitpid(2), never one process).
pub fn pid(raw: i32) -> Option<Pid> {
    if raw > 0 {
        Pid::from_raw(raw)
    } else {
        None
    }
}

/// This process's pid.
pub fn getpid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}

/// This process's session id: 0 when the session's leader lives in an ancestor PID
/// namespace (run under `unshare --pid --fork`, or a container whose init did not start a
/// session), which getsid(2) reports as 0.
pub fn session_id() -> i32 {
    // Raw libc: rustix's getsid makes a non-zero `Pid` of the answer unchecked, and 0 is a
    // valid answer here (debug builds abort on it, release builds would hold an invalid Pid).
    // Safety: getsid(0) asks about this process; it has no memory argument.
    unsafe { libc::getsid(0) }
}

/// The descriptors [`close_after_exit`] was handed, for [`close_deferred`].
static AFTER_EXIT: std::sync::Mutex<Vec<OwnedFd>> = std::sync::Mutex::new(Vec::new());

/// At most this many descriptors go to the closing child (the rest close at once).
const AFTER_EXIT_MAX: usize = 8;

/// Hands `fd` to the child [`close_deferred`] starts, which closes it after this process has
/// exited: for a descriptor whose last close waits in the kernel — an inotify instance's waits
/// until its marks are freed after an SRCU grace period (`fsnotify_destroy_group`,
/// fs/notify/group.c; 5-25 ms measured on 6.18) — so that neither this process's remaining
/// work nor its exit, which its parent waits for, pays the wait. Without a [`close_deferred`]
/// the descriptor closes when this process exits.
pub fn close_after_exit(fd: OwnedFd) {
    if let Ok(mut held) = AFTER_EXIT.lock() {
        if held.len() < AFTER_EXIT_MAX {
            held.push(fd);
        }
    }
}

/// Starts the child that holds every descriptor handed to [`close_after_exit`] until this
/// process has exited, then closes them and exits; call it once, just before exiting. One
/// `clone` ([`pid_of_closer`]), none when nothing was handed over; if it fails the
/// descriptors close here.
///
/// The child keeps only those descriptors (at their numbers) and the read end of a pipe whose
/// write end this process holds until it exits; the command line is blanked before the clone
/// (so that the child is never taken for this process by a search for a marker in
/// `/proc/*/cmdline`); the child waits for end of file on the pipe, closes everything and
/// exits. It is reaped by whoever inherits it (a subreaper above,
/// or init). Until this process exits the child lives, and a process forked later would hand
/// it the pipe's write end.
pub fn close_deferred() {
    let held = match AFTER_EXIT.lock() {
        Ok(mut held) => std::mem::take(&mut *held),
        Err(_) => return,
    };
    if held.is_empty() {
        return;
    }
    let Ok((wait_read, wait_write)) = crate::fd::pipe_cloexec() else {
        return;
    };
    let mut fds = [-1; AFTER_EXIT_MAX + 1];
    for (slot, fd) in fds.iter_mut().zip(held.iter().chain([&wait_read])) {
        *slot = fd.as_raw_fd();
    }
    let count = held.len() + 1;
    // The command line is blanked here, before the clone, so the child never shows this
    // process's (it shares this memory, or a copy of it before Linux 5.9): blanked in the
    // child, a child not yet scheduled on a busy machine was seen with it (and a marker in it)
    // after this process had exited. This process is about to exit; nothing reads its command
    // line any more.
    if let Some((start, end)) = crate::proc::own_command_line_region() {
        let line = b"shofer (closing)\0";
        // Safety: the region is this process's own argument area (from /proc/self/stat's
        // arg_start..arg_end), writable memory of its stack; std's saved argv points into it
        // and is read only by `env::args_os`, which nothing calls once a process is exiting.
        unsafe {
            std::ptr::write_bytes(start as *mut u8, 0, end - start);
            let n = line.len().min(end - start);
            std::ptr::copy_nonoverlapping(line.as_ptr(), start as *mut u8, n);
        }
    }
    if pid_of_closer(&fds[..count]).is_some() {
        // The write end stays open until this process exits (then the child reads EOF).
        std::mem::forget(wait_write);
    }
    // The descriptors and the read end close here: the child's copies are the last ones.
}

/// What the closing child needs, on memory nobody else touches after the clone: the
/// descriptors it keeps, sorted, and among them its wait pipe's read end.
#[repr(C)]
struct Closer {
    keep: [libc::c_uint; AFTER_EXIT_MAX + 1],
    count: usize,
    wait: libc::c_int,
    /// Past the highest descriptor open at the clone: where `close_range(2)` fails (missing
    /// before Linux 5.9, or refused by a seccomp filter), each number below it is closed.
    end: libc::c_uint,
}

/// The closing child's stack (it makes a handful of system calls).
const CLOSER_STACK: usize = 16 * 1024;

/// Starts the closing child keeping `fds` (the last one its wait pipe); its PID. A `clone`
/// with `CLONE_VM`: no page tables copied, and this process's exit does not free its memory
/// either (the child holds it until it exits) — about 0.2-0.4 ms a run off the caller's wait
/// against a fork here. Where `close_range(2)` is missing (before Linux 5.9), a fork.
fn pid_of_closer(fds: &[RawFd]) -> Option<i32> {
    let wait = *fds.last()?;
    let mut keep = [libc::c_uint::MAX; AFTER_EXIT_MAX + 1];
    for (slot, &fd) in keep.iter_mut().zip(fds) {
        *slot = libc::c_uint::try_from(fd).ok()?;
    }
    keep[..fds.len()].sort_unstable();
    // Raw syscall: rustix has no close_range. A range past every descriptor closes nothing:
    // 0 where the call exists.
    // Safety: closes nothing (no descriptor is that high); no memory is passed.
    let has_close_range = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            libc::c_uint::MAX,
            libc::c_uint::MAX,
            0,
        )
    } == 0;
    // The fallback's bound: where close_range answered, every number the soft limit allows
    // (only a filter refusing real ranges brings the child to the fallback then); else the
    // highest descriptor open now, with room for a few another thread opens before the clone
    // (the listing is paid only on this path).
    let soft_limit = || {
        rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .map_or(1 << 20, |n| n.min(1 << 20)) as libc::c_uint
    };
    let highest = if has_close_range {
        soft_limit()
    } else {
        std::fs::read_dir("/proc/self/fd")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<libc::c_uint>().ok())
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or_else(|_| soft_limit())
    };
    let closer = Box::leak(Box::new(Closer {
        keep,
        count: fds.len(),
        wait,
        end: highest.saturating_add(64),
    }));
    if has_close_range {
        let stack: &'static mut [u8] = Vec::leak(vec![0u8; CLOSER_STACK]);
        // The stack grows down from its end, 16-byte aligned.
        let top = (stack.as_mut_ptr() as usize + CLOSER_STACK) & !15;
        // Raw clone: std and rustix have no clone with a new stack. CLONE_VM without
        // CLONE_THREAD: a process of its own on this memory; this process's exit leaves it.
        // Safety: `closer_main` touches only the leaked `Closer` and its own leaked stack and
        // makes raw system calls that write no errno in practice (see there); nothing else
        // frees or writes either.
        let pid = unsafe {
            libc::clone(
                closer_main,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::SIGCHLD,
                (closer as *mut Closer).cast(),
            )
        };
        return (pid > 0).then_some(pid);
    }
    // Raw fork: std has none; the child makes only raw system calls (async-signal-safe,
    // fork(2) in a threaded process) and never returns.
    // Safety: see above; the child touches no lock, allocator or Rust-owned state.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        closer_main((closer as *mut Closer).cast());
    }
    (pid > 0).then_some(pid)
}

/// The closing child: every signal blocked, every descriptor closed but those it keeps, then
/// it waits for end of file on its wait pipe (this process has exited) and exits, closing the
/// rest. Raw `libc::syscall` throughout: on this memory shared with a running process
/// (`CLONE_VM`) only calls that touch nothing but their arguments; `syscall` writes `errno`
/// on failure only, and none of these fails here (signals are blocked: no `EINTR`).
extern "C" fn closer_main(arg: *mut libc::c_void) -> libc::c_int {
    // Safety: `arg` is the leaked `Closer`, read only.
    let c = unsafe { &*(arg as *const Closer) };
    // Safety: raw system calls on this process's own signal mask and descriptor table; the
    // buffers are this function's locals.
    unsafe {
        let all: u64 = !0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &all as *const u64,
            std::ptr::null_mut::<u64>(),
            8,
        );
        let kept = &c.keep[..c.count];
        let mut first: libc::c_uint = 0;
        let mut ranges_closed = true;
        for &k in kept.iter().chain([&libc::c_uint::MAX]) {
            if k > first {
                let last = if k == libc::c_uint::MAX { k } else { k - 1 };
                ranges_closed &= libc::syscall(libc::SYS_close_range, first, last, 0) == 0;
            }
            first = k.saturating_add(1);
        }
        if !ranges_closed {
            // One by one, below the bound taken before the clone. The fork path's errno is
            // its own; the CLONE_VM path was taken because close_range answered the probe, so
            // only a filter that allows the probe and refuses ranges brings it here, and then
            // `EBADF` lands in the errno of the supervisor's thread that is exiting.
            for fd in 0..c.end {
                if !kept.contains(&fd) {
                    libc::syscall(libc::SYS_close, fd);
                }
            }
        }
        let mut b = 0u8;
        while libc::syscall(libc::SYS_read, c.wait, &mut b as *mut u8, 1) > 0 {}
        libc::syscall(libc::SYS_exit, 0);
    }
    0
}

/// A signal set holding `signals` (sigsetops(3)), for `sigprocmask`, `sigwaitinfo` and
/// `signalfd`. Allocates nothing: callable between fork and exec.
pub fn sigset(signals: &[libc::c_int]) -> libc::sigset_t {
    // Safety: sigemptyset initialises the plain-data set; sigaddset with valid signal numbers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Spawns a thread named `name` with every signal blocked (pthread_sigmask(3): a new thread
/// inherits the creating thread's mask, which is set for the spawn and restored after it).
/// A helper thread of the supervisor must never take a process-directed signal meant for the
/// main thread's `sigwaitinfo` (SIGCHLD, the forwarded ones, the gate's SIGIO) — whose default
/// action would kill the whole process.
///
/// # Errors
/// The thread cannot be created (`std::thread::Builder::spawn`).
pub fn spawn_signals_blocked<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<T>> {
    // Safety: an all-zero sigset_t is valid plain data (filled below).
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // Safety: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // Safety: sigfillset initialises the set; pthread_sigmask changes only this thread's mask.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let thread = std::thread::Builder::new().name(name.into()).spawn(f);
    // Safety: restoring the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    thread
}
