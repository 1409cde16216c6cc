//! Inside the sandbox — processes outside the sandbox and /proc: environ, fd and cwd re-opens,
//! signals, ptrace, process_vm_readv, inherited and passed descriptors, the supervisor itself.

use super::tree::spawn_sleeper;
use super::{arg, contain, p, write_via, Seen};
use crate::sys::{self};
use std::os::fd::AsRawFd;

/// `proc-self-fd-reopen`: reopen a read-only outside fd via /proc/self/fd for writing.
pub(crate) fn proc_self_fd_reopen(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    let fd = match sys::open(&ex, libc::O_RDONLY, 0) {
        Ok(fd) => fd,
        Err(e) => return Seen::Broken(format!("open(outside/existing, O_RDONLY) -> {e}")),
    };
    contain(
        "reopen /proc/self/fd/N (read-only outside file) O_WRONLY+write",
        write_via(
            &p(&format!("/proc/self/fd/{}", fd.as_raw_fd())),
            libc::O_WRONLY | libc::O_APPEND,
        ),
    )
}

/// `proc-self-cwd`: create via /proc/self/cwd with the cwd outside.
pub(crate) fn proc_self_cwd(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    if let Err(e) = sys::chdir(&out) {
        return Seen::Broken(format!("chdir(outside) -> {e}"));
    }
    contain(
        "open(/proc/self/cwd/new5, O_CREAT) with cwd outside",
        sys::open("/proc/self/cwd/new5", libc::O_WRONLY | libc::O_CREAT, 0o644),
    )
}

/// `proc-environ`: read an outside process's /proc/<pid>/environ.
pub(crate) fn proc_environ(a: &[String]) -> Seen {
    let secret = arg(a, 3);
    match std::fs::read(format!("/proc/{}/environ", arg(a, 2))) {
        Ok(v) if !secret.is_empty() && contains(&v, secret.as_bytes()) => {
            Seen::Escaped("read the outside process's environment (secret seen)".into())
        }
        Ok(v) => Seen::Escaped(format!("read /proc/<outside>/environ ({} bytes)", v.len())),
        Err(e) => Seen::Blocked(format!("read /proc/<outside>/environ -> {e}")),
    }
}

/// `proc-pid-root`: create outside via /proc/<outside pid>/root.
pub(crate) fn proc_pid_root(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let path = format!("/proc/{}/root{}", arg(a, 2), out.join("new6").display());
    contain(
        "open(/proc/<outside pid>/root/<outside>/new6, O_CREAT)",
        sys::open(&path, libc::O_WRONLY | libc::O_CREAT, 0o644),
    )
}

/// `proc-sys-write`: open /proc/sys/kernel/core_pattern for writing (nothing written).
pub(crate) fn proc_sys_write(_: &[String]) -> Seen {
    // Host-wide knobs a root process could abuse (core_pattern = code execution as
    // root on the next crash). Opened for writing only; nothing is ever written.
    let mut opened = Vec::new();
    let mut why = Vec::new();
    for t in [
        "/proc/sys/kernel/core_pattern",
        "/proc/sysrq-trigger",
        "/proc/sys/vm/drop_caches",
        "/proc/sys/kernel/modprobe",
    ] {
        match sys::open(t, libc::O_WRONLY, 0) {
            Ok(_) => opened.push(t),
            Err(e) => why.push(format!("{t} -> {e}")),
        }
    }
    if opened.is_empty() {
        Seen::Blocked(format!(
            "open(O_WRONLY), nothing written: {}",
            why.join("; ")
        ))
    } else {
        Seen::Escaped(format!(
            "opened for writing (nothing written): {}",
            opened.join(", ")
        ))
    }
}

/// `signal-outside`: kill(SIGTERM) a process outside the sandbox.
pub(crate) fn signal_outside(a: &[String]) -> Seen {
    let pid: i32 = arg(a, 2).parse().unwrap_or(0);
    contain(
        "kill(<outside pid>, SIGTERM)",
        sys::kill(pid, libc::SIGTERM),
    )
}

/// `ptrace-outside`: PTRACE_ATTACH to a process outside.
pub(crate) fn ptrace_outside(a: &[String]) -> Seen {
    let pid: i32 = arg(a, 2).parse().unwrap_or(0);
    // Safety: PTRACE_ATTACH takes a pid and ignores addr/data.
    let r = sys::check(unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0usize, 0usize) });
    if r.is_ok() {
        // Safety: as above; detach at once so the victim keeps running.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0usize, 0usize) };
    }
    contain("ptrace(PTRACE_ATTACH, <outside pid>)", r)
}

/// `process-vm-readv`: process_vm_readv of a process outside.
pub(crate) fn process_vm_readv(a: &[String]) -> Seen {
    let pid: i32 = arg(a, 2).parse().unwrap_or(0);
    let mut buf = [0u8; 8];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: 0x1000 as *mut libc::c_void,
        iov_len: 8,
    };
    // Safety: the iovecs point at a live local buffer and a remote address the kernel
    // checks (EFAULT if unmapped).
    let r = sys::check(
        unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) } as libc::c_long,
    );
    match r {
        Err(e) if e.0 == libc::EFAULT => {
            Seen::Escaped("process_vm_readv passed the access check (EFAULT on the address)".into())
        }
        r => contain("process_vm_readv(<outside pid>)", r),
    }
}

/// `passed-dirfd-openat`: --pass-fd of an O_PATH outside dir, then openat(O_CREAT)/mkdirat.
pub(crate) fn passed_dirfd_openat(a: &[String]) -> Seen {
    let fd: i32 = arg(a, 2).parse().unwrap_or(-1);
    if !sys::fd_is_open(fd) {
        return Seen::Broken(format!("fd {fd} given with --pass-fd is not open"));
    }
    let r1 = sys::openat(fd, "new7", libc::O_WRONLY | libc::O_CREAT, 0o644);
    let r2 = {
        let c = sys::cstr("newdir7");
        // Safety: valid C string; dirfd checked by the kernel.
        sys::check(unsafe { libc::mkdirat(fd, c.as_ptr(), 0o755) } as libc::c_long)
    };
    match (r1, r2) {
        (Err(e1), Err(e2)) => Seen::Blocked(format!(
            "openat(passed O_PATH dir fd, new7, O_CREAT) -> {e1}; mkdirat -> {e2}"
        )),
        _ => Seen::Escaped("created an entry outside through the passed directory fd".into()),
    }
}

/// `passed-fd-reopen`: --pass-fd of a read-only outside file, then write / reopen for writing.
pub(crate) fn passed_fd_reopen(a: &[String]) -> Seen {
    let fd: i32 = arg(a, 2).parse().unwrap_or(-1);
    if !sys::fd_is_open(fd) {
        return Seen::Broken(format!("fd {fd} given with --pass-fd is not open"));
    }
    let w = sys::write(fd, b"x");
    let r = write_via(
        &p(&format!("/proc/self/fd/{fd}")),
        libc::O_WRONLY | libc::O_APPEND,
    );
    match (w, r) {
        (Err(_), Err(e)) => {
            Seen::Blocked(format!("reopen of the passed read-only fd O_WRONLY -> {e}"))
        }
        (Ok(_), _) => Seen::Escaped("write(2) on a read-only passed fd succeeded".into()),
        (_, Ok(())) => Seen::Escaped("reopened a passed read-only fd for writing".into()),
    }
}

/// `kill-supervisor`: SIGKILL the shofer-sandbox supervisor (our parent) after leaving a setsid()
/// child.
pub(crate) fn kill_supervisor(a: &[String]) -> Seen {
    // Leave a setsid() survivor, then SIGKILL our parent (the supervisor).
    let ppid = match supervisor_pid(arg(a, 4), arg(a, 5)) {
        Ok(p) => p,
        Err(s) => return s,
    };
    let _ = spawn_sleeper(arg(a, 2), arg(a, 3), true, false);
    contain(
        &format!("kill(supervisor pid {ppid}, SIGKILL)"),
        sys::kill(ppid, libc::SIGKILL),
    )
}

/// `ptrace-supervisor`: PTRACE_ATTACH / open /proc/<pid>/mem of the supervisor.
pub(crate) fn ptrace_supervisor(a: &[String]) -> Seen {
    let ppid = match supervisor_pid(arg(a, 2), arg(a, 3)) {
        Ok(p) => p,
        Err(s) => return s,
    };
    // Safety: PTRACE_ATTACH takes a pid and ignores addr/data.
    let r = sys::check(unsafe { libc::ptrace(libc::PTRACE_ATTACH, ppid, 0usize, 0usize) });
    if r.is_ok() {
        // Safety: detach at once.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, ppid, 0usize, 0usize) };
        return Seen::Escaped(format!(
            "PTRACE_ATTACH to the supervisor (pid {ppid}) succeeded"
        ));
    }
    match sys::open(format!("/proc/{ppid}/mem"), libc::O_RDWR, 0) {
        Ok(_) => Seen::Escaped("opened the supervisor's /proc/<pid>/mem read-write".into()),
        Err(e) => Seen::Blocked(format!(
            "PTRACE_ATTACH(supervisor) -> {}; open /proc/<ppid>/mem O_RDWR -> {e}",
            r.err().map(|e| e.name()).unwrap_or_default()
        )),
    }
}

/// `proc-supervisor-fds`: reopen for writing the outside files the supervisor holds, via
/// /proc/<ppid>/fd.
pub(crate) fn proc_supervisor_fds(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    // Reopen, for writing, whatever files the supervisor holds (nothing is written).
    let ppid = match supervisor_pid(arg(a, 2), arg(a, 3)) {
        Ok(p) => p,
        Err(s) => return s,
    };
    let mut opened = Vec::new();
    let mut seen = Vec::new();
    match std::fs::read_dir(format!("/proc/{ppid}/fd")) {
        Err(e) => return Seen::Blocked(format!("list /proc/<supervisor>/fd -> {e}")),
        Ok(rd) => {
            for e in rd.flatten() {
                let target = std::fs::read_link(e.path())
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                if !target.starts_with('/')
                    || target.starts_with("/dev/")
                    || target.starts_with(&wt.display().to_string())
                    || target.starts_with("/tmp")
                {
                    continue;
                }
                seen.push(target.clone());
                if sys::open(e.path(), libc::O_WRONLY | libc::O_APPEND, 0).is_ok() {
                    opened.push(target);
                }
            }
        }
    }
    if opened.is_empty() {
        Seen::Blocked(format!(
            "no supervisor fd reopened for writing (outside files it holds: {seen:?})"
        ))
    } else {
        Seen::Escaped(format!(
            "reopened for writing via /proc/<supervisor>/fd: {opened:?}"
        ))
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// `inherited-fds`: fds 7 (O_RDWR outside file) and 8 (O_PATH outside dir) were inherited without
/// --pass-fd: both must be closed, and nothing else above 2 open.
pub(crate) fn inherited_fds(a: &[String]) -> Seen {
    // The harness started the sandbox with fds 7 (O_RDWR outside file) and 8 (O_PATH outside
    // dir) open and not close-on-exec, without --pass-fd: both must be closed.
    let mut open_fds = Vec::new();
    let mut did = Vec::new();
    for fd in [7, 8] {
        if sys::fd_is_open(fd) {
            open_fds.push(fd);
        }
    }
    if sys::fd_is_open(7) && sys::write(7, b"PWNED via inherited fd\n").is_ok() {
        did.push("wrote via inherited fd 7");
    }
    if sys::fd_is_open(8) && sys::openat(8, "new8", libc::O_WRONLY | libc::O_CREAT, 0o644).is_ok() {
        did.push("created outside/new8 via inherited dir fd 8");
    }
    // Anything else above 2 that the sandbox left open.
    let mut extra = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc/self/fd") {
        for e in rd.flatten() {
            if let Ok(n) = e.file_name().to_string_lossy().parse::<i32>() {
                if n > 2 && n != 7 && n != 8 {
                    let target = std::fs::read_link(e.path())
                        .map(|t| t.display().to_string())
                        .unwrap_or_default();
                    // The read_dir's own fd shows up too.
                    if !target.starts_with("/proc/") {
                        extra.push(format!("{n}->{target}"));
                    }
                }
            }
        }
    }
    let _ = a;
    if open_fds.is_empty() && extra.is_empty() {
        Seen::Blocked("fds 7 and 8 are closed (EBADF); no other fd above 2".into())
    } else {
        Seen::Escaped(format!(
            "inherited fds open: {open_fds:?} extra: [{}]; {}",
            extra.join(", "),
            did.join("; ")
        ))
    }
}

/// Our parent, if it is a supervisor: never the harness itself (pid `harness`) or init — a
/// command started directly by the harness has no supervisor, which is itself a failure.
///
/// In a private PID namespace (`harness_pidns` differs from ours) the supervisor is outside
/// it and invisible: parent 1 is the namespace's init, which the kernel protects from
/// signals sent from inside; that is `Blocked`.
fn supervisor_pid(harness: &str, harness_pidns: &str) -> Result<i32, Seen> {
    // Safety: getppid never fails.
    let ppid = unsafe { libc::getppid() };
    let my_ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    if harness.parse::<i32>().ok() == Some(ppid) {
        return Err(Seen::Escaped(format!(
            "no supervisor: the command's parent is the harness (pid {ppid})"
        )));
    }
    if ppid <= 1 {
        if !harness_pidns.is_empty() && my_ns != harness_pidns {
            return Err(Seen::Blocked(format!(
                "private PID namespace: the supervisor is invisible (parent {ppid} is the namespace init)"
            )));
        }
        return Err(Seen::Escaped(format!(
            "no supervisor: the command was orphaned (parent {ppid})"
        )));
    }
    Ok(ppid)
}

/// `i386-keyctl <key id>` (issue 29 F6): a 64-bit static program calls `keyctl` through the
/// i386 entry point (`int $0x80`, number 288) with buffers below 4 GiB: `KEYCTL_READ` of a key
/// of the session keyring it inherited, then `KEYCTL_UPDATE` of it. In a child, so a seccomp
/// kill (SIGSYS) is observable. A payload read is printed (`read <payload>`), so the harness
/// sees it in the output even if the attack lied.
pub(crate) fn i386_keyctl(a: &[String]) -> Seen {
    #[cfg(target_arch = "x86_64")]
    {
        i386_keyctl_x86_64(arg(a, 2).parse().unwrap_or(0))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = a;
        Seen::Skip("the i386 entry point (int $0x80) is x86_64's".into())
    }
}

/// One i386 system call through `int $0x80`: `eax` = number, `ebx, ecx, edx, esi` = arguments.
#[cfg(target_arch = "x86_64")]
fn int80(nr: u32, b: u32, c: u32, d: u32, s: u32) -> i32 {
    let ret: i32;
    // Safety: the int 0x80 ABI; rbx is reserved by LLVM, so it is swapped in and out around
    // the trap; r8-r11 are declared clobbered (kernels before 4.17 did not preserve them).
    // The pointers passed are the caller's, valid for what the call reads or writes.
    unsafe {
        std::arch::asm!(
            "xchg rbx, {b}",
            "int 0x80",
            "xchg rbx, {b}",
            b = inout(reg) u64::from(b) => _,
            inout("eax") nr as i32 => ret,
            in("ecx") c,
            in("edx") d,
            in("esi") s,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
        );
    }
    ret
}

#[cfg(target_arch = "x86_64")]
fn i386_keyctl_x86_64(id: u32) -> Seen {
    const NR_KEYCTL_I386: u32 = 288;
    const KEYCTL_UPDATE: u32 = 2;
    const KEYCTL_READ: u32 = 11;
    const NEW: &[u8] = b"changed-through-int-0x80";
    match sys::fork() {
        Err(e) => Seen::Broken(format!("fork -> {e}")),
        Ok(0) => {
            // Safety: a fresh anonymous page in the low 2 GiB; the child exits right after.
            let page = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_32BIT,
                    -1,
                    0,
                )
            };
            if page == libc::MAP_FAILED {
                sys::exit_now(3);
            }
            let addr = page as usize as u32;
            let n = int80(NR_KEYCTL_I386, KEYCTL_READ, id, addr, 4096);
            if n >= 0 {
                // Safety: the kernel wrote min(n, 4096) bytes into the page.
                let got = unsafe {
                    std::slice::from_raw_parts(page as *const u8, (n as usize).min(4096))
                };
                println!("read {}", String::from_utf8_lossy(got));
            }
            // Safety: the page is writable and larger than NEW.
            unsafe { std::ptr::copy_nonoverlapping(NEW.as_ptr(), page.cast::<u8>(), NEW.len()) };
            let u = int80(NR_KEYCTL_I386, KEYCTL_UPDATE, id, addr, NEW.len() as u32);
            sys::exit_now(match (n >= 0, u == 0) {
                (true, true) => 0,
                (true, false) => 1,
                (false, true) => 2,
                // Both failed: 10 + the read's errno.
                (false, false) => 10 + (-n).clamp(0, 200),
            })
        }
        Ok(pid) => {
            let mut st = 0;
            // Safety: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            if libc::WIFSIGNALED(st) {
                let sig = libc::WTERMSIG(st);
                return Seen::Blocked(format!(
                    "i386 keyctl (int $0x80, nr 288): killed by signal {sig}{}",
                    if sig == libc::SIGSYS {
                        " (SIGSYS: the seccomp filter refuses a non-native ABI)"
                    } else {
                        ""
                    }
                ));
            }
            match libc::WEXITSTATUS(st) {
                0 => Seen::Escaped("i386 keyctl READ and UPDATE of a session key succeeded".into()),
                1 => Seen::Escaped("i386 keyctl READ of a session key succeeded".into()),
                2 => Seen::Escaped("i386 keyctl UPDATE of a session key succeeded".into()),
                3 => Seen::Broken("mmap(MAP_32BIT) failed".into()),
                c => Seen::Blocked(format!(
                    "i386 keyctl READ and UPDATE failed (READ -> {})",
                    sys::Errno(c - 10)
                )),
            }
        }
    }
}

/// `signal-calls-outside <pid1> <pid2> <pid3> <pid4>`: `tkill`, `tgkill`, `rt_sigqueueinfo`
/// and `rt_tgsigqueueinfo` (SIGTERM), one at each outside process.
pub(crate) fn signal_calls_outside(a: &[String]) -> Seen {
    let pid = |i: usize| -> i32 { arg(a, i).parse().unwrap_or(0) };
    let sig = libc::SIGTERM;
    let tries = [
        ("tkill(<outside pid>, SIGTERM)", sys::tkill(pid(2), sig)),
        (
            "tgkill(<outside pid>, SIGTERM)",
            sys::tgkill(pid(3), pid(3), sig),
        ),
        (
            "rt_sigqueueinfo(<outside pid>, SIGTERM)",
            sys::rt_sigqueueinfo(pid(4), sig),
        ),
        (
            "rt_tgsigqueueinfo(<outside pid>, SIGTERM)",
            sys::rt_tgsigqueueinfo(pid(5), pid(5), sig),
        ),
    ];
    all_refused(&tries)
}

/// `Blocked` when every call failed, else `Escaped` naming those that succeeded.
fn all_refused(tries: &[(&str, Result<(), sys::Errno>)]) -> Seen {
    let ok: Vec<&str> = tries
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(w, _)| *w)
        .collect();
    if !ok.is_empty() {
        return Seen::Escaped(format!("{} succeeded", ok.join(", ")));
    }
    Seen::Blocked(
        tries
            .iter()
            .map(|(w, r)| {
                format!(
                    "{w} -> {}",
                    r.as_ref().err().map(|e| e.to_string()).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// `pidfd-signal-outside <pid1> <pid2>`: `pidfd_open` + `pidfd_send_signal(SIGTERM)` at one
/// outside process, and `pidfd_send_signal` through an `open("/proc/<pid>")` directory at the
/// other (the kernel takes either as a pidfd).
pub(crate) fn pidfd_signal_outside(a: &[String]) -> Seen {
    let (p1, p2) = (arg(a, 2), arg(a, 3));
    let send = |fd: Result<std::os::fd::OwnedFd, sys::Errno>| {
        fd.and_then(|fd| sys::pidfd_send_signal(fd.as_raw_fd(), libc::SIGTERM))
    };
    let tries = [
        (
            "pidfd_open(<outside pid>) + pidfd_send_signal(SIGTERM)",
            send(sys::pidfd_open(p1.parse().unwrap_or(0))),
        ),
        (
            "open(/proc/<outside pid>) + pidfd_send_signal(SIGTERM)",
            send(sys::open(
                format!("/proc/{p2}"),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                0,
            )),
        ),
    ];
    all_refused(&tries)
}

/// `fsetown-outside <pid1> <pid2> <pgid3>`: makes an outside process the owner of a pipe's
/// read end — `F_SETOWN` of a PID, `F_SETOWN_EX` (`F_OWNER_PID`), `F_SETOWN` of a process
/// group (`-pgid`) — with `O_ASYNC` set, then writes into the pipe: the kernel sends `SIGIO`
/// (default action: terminate) to the owner. The victims judge: Landlock's signal scope
/// (ABI 6) lets the owner be set and stops the signal itself.
pub(crate) fn fsetown_outside(a: &[String]) -> Seen {
    let num = |i: usize| -> i32 { arg(a, i).parse().unwrap_or(0) };
    let mut said = Vec::new();
    for (what, target) in [
        ("F_SETOWN <outside pid>", num(2)),
        ("F_SETOWN_EX F_OWNER_PID <outside pid>", num(3)),
        ("F_SETOWN -<outside pgid>", -num(4)),
    ] {
        let (r, w) = match sys::pipe(libc::O_CLOEXEC | libc::O_NONBLOCK) {
            Ok(p) => p,
            Err(e) => return Seen::Broken(format!("pipe2 -> {e}")),
        };
        let fd = r.as_raw_fd();
        let ex = what.contains("_EX");
        let set = if ex {
            sys::fcntl_own_ex(fd, Some((sys::F_OWNER_PID, target))).map(|_| ())
        } else {
            sys::fcntl_int(fd, libc::F_SETOWN, target.into()).map(|_| ())
        };
        // F_GETOWN answers a group as a negative number, which reads as an errno.
        let owner = sys::fcntl_own_ex(fd, None).map(|(ty, p)| if ty == 2 { -p } else { p });
        let flags = sys::fcntl_int(fd, libc::F_GETFL, 0).unwrap_or(0);
        let async_set =
            sys::fcntl_int(fd, libc::F_SETFL, flags | libc::c_long::from(libc::O_ASYNC));
        let wrote = sys::write(w.as_raw_fd(), b"x");
        let show = |r: Result<libc::c_long, sys::Errno>| match r {
            Ok(_) => "ok".to_string(),
            Err(e) => e.to_string(),
        };
        said.push(match set {
            Ok(()) => format!(
                "{what} -> ok, owner read back {}, O_ASYNC -> {}, write -> {}",
                owner.map_or_else(|e| e.to_string(), |o| o.to_string()),
                show(async_set),
                show(wrote.map(|n| n as libc::c_long))
            ),
            Err(e) => format!("{what} -> {e}"),
        });
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Seen::Blocked(format!("{}; the outside victims judge", said.join("; ")))
}

/// `kill-group-outside <pgid>`: `kill(-pgid, SIGTERM)` at a process group outside (its only
/// member the outside process leading it).
pub(crate) fn kill_group_outside(a: &[String]) -> Seen {
    let pgid: i32 = arg(a, 2).parse().unwrap_or(0);
    contain(
        "kill(-<outside pgid>, SIGTERM)",
        sys::kill(-pgid.max(1), libc::SIGTERM),
    )
}

/// `kill-all`: `kill(-1, SIGURG)` — every process the caller may signal, on a build without
/// the protection. `SIGURG` is ignored by default, so nothing but the harness's catcher
/// victim reacts; the call's own result says nothing (inside, it may reach the run's own
/// processes), the victim is the judge.
pub(crate) fn kill_all(_: &[String]) -> Seen {
    let r = sys::kill(-1, libc::SIGURG);
    Seen::Blocked(format!(
        "kill(-1, SIGURG) -> {}; the outside victim judges",
        match r {
            Ok(()) => "0".to_string(),
            Err(e) => e.to_string(),
        }
    ))
}
