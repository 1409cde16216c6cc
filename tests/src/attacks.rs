//! The attacks: small functions that run *inside* the sandbox.
//!
//! The harness re-invokes its own binary under `shofer-sandbox` as
//! `shofer-containment attack <name> <args...>`, so no attack needs an external tool. Each
//! attack prints exactly one line `SHOFER-CONTAINMENT: <verdict> <detail>` on stdout, where the
//! verdict is what the attack saw from the inside:
//!
//! - `blocked`: every attempt failed (the detail names the call and its errno);
//! - `escaped`: an attempt succeeded that the sandbox must stop;
//! - `ok` / `broken`: a legitimate operation worked / failed (functionality cases);
//! - `skip`: the attack could not be attempted here (the detail says why).
//!
//! The harness never trusts `blocked` alone: it also checks the outside state (was the file
//! changed, is the victim alive, was a connection queued) from outside the sandbox.

use crate::sys::{self, Errno};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The marker line prefix of an attack's verdict.
pub const RESULT_PREFIX: &str = "SHOFER-CONTAINMENT: ";

/// What an attack saw from the inside.
pub enum Seen {
    /// Every attempt failed.
    Blocked(String),
    /// Something the sandbox must stop succeeded.
    Escaped(String),
    /// A legitimate operation worked.
    Ok(String),
    /// A legitimate operation failed.
    Broken(String),
    /// Could not be attempted.
    Skip(String),
}

impl Seen {
    fn line(&self) -> String {
        let (v, d) = match self {
            Seen::Blocked(d) => ("blocked", d),
            Seen::Escaped(d) => ("escaped", d),
            Seen::Ok(d) => ("ok", d),
            Seen::Broken(d) => ("broken", d),
            Seen::Skip(d) => ("skip", d),
        };
        format!("{RESULT_PREFIX}{v} {}", d.replace('\n', " "))
    }
}

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

/// One attempt: `Ok` = the call succeeded (an escape for containment attacks).
fn attempt<T>(what: &str, r: Result<T, Errno>) -> Result<T, String> {
    r.map_err(|e| format!("{what} -> {e}"))
}

/// A containment verdict from one call.
fn contain<T>(what: &str, r: Result<T, Errno>) -> Seen {
    match r {
        Ok(_) => Seen::Escaped(format!("{what} succeeded")),
        Err(e) => Seen::Blocked(format!("{what} -> {e}")),
    }
}

fn write_via(path: &Path, flags: i32) -> Result<(), Errno> {
    let fd = sys::open(path, flags, 0o644)?;
    sys::write(fd.as_raw_fd(), b"PWNED by shofer-containment\n").map(|_| ())
}

fn arg(a: &[String], i: usize) -> &str {
    a.get(i).map(String::as_str).unwrap_or("")
}

/// Runs the attack `name` with `args` and prints its verdict line; returns the exit status.
pub fn run(name: &str, args: &[String]) -> i32 {
    let seen = dispatch(name, args);
    println!("{}", seen.line());
    0
}

fn dispatch(name: &str, a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    match name {
        "noop" => Seen::Ok("ran".into()),
        "create-outside" => contain(
            "open(outside/new, O_CREAT)",
            sys::open(
                out.join("new"),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o644,
            ),
        ),
        "write-outside" => contain(
            "open(outside/existing, O_WRONLY)+write",
            write_via(&ex, libc::O_WRONLY),
        ),
        "append-outside" => contain(
            "open(outside/existing, O_APPEND)+write",
            write_via(&ex, libc::O_WRONLY | libc::O_APPEND),
        ),
        "truncate-path" => contain("truncate(outside/existing, 0)", sys::truncate(&ex, 0)),
        "truncate-rdonly-otrunc" => contain(
            "open(outside/existing, O_RDONLY|O_TRUNC)",
            sys::open(&ex, libc::O_RDONLY | libc::O_TRUNC, 0),
        ),
        "unlink-outside" => contain("unlink(outside/existing)", sys::unlink(&ex)),
        "rmdir-outside" => contain("rmdir(outside/emptydir)", sys::rmdir(out.join("emptydir"))),
        "mkdir-outside" => contain(
            "mkdir(outside/newdir)",
            sys::mkdir(out.join("newdir"), 0o755),
        ),
        "symlink-outside" => contain(
            "symlink(x, outside/newlink)",
            sys::symlink("x", out.join("newlink")),
        ),
        "mkfifo-outside" => contain(
            "mknod(outside/fifo, S_IFIFO)",
            sys::mknod(out.join("fifo"), libc::S_IFIFO | 0o644, 0),
        ),
        "bind-socket-outside" => {
            let path = out.join("bound.sock");
            let r = sys::unix_listen(path.as_os_str().as_encoded_bytes(), false);
            contain("bind(AF_UNIX, outside/bound.sock)", r)
        }
        "rename-out" => contain(
            "rename(wt/f, outside/moved)",
            sys::rename(wt.join("f"), out.join("moved")),
        ),
        "rename-in" => contain(
            "rename(outside/existing, wt/stolen)",
            sys::rename(&ex, wt.join("stolen")),
        ),
        "rename-exchange" => contain(
            "renameat2(wt/f, outside/existing, RENAME_EXCHANGE)",
            sys::renameat2(wt.join("f"), &ex, libc::RENAME_EXCHANGE),
        ),
        "rename-dir-out" => contain(
            "rename(wt/sub, outside/sub)",
            sys::rename(wt.join("sub"), out.join("sub")),
        ),
        "rename-worktree" => {
            let parent = wt.parent().unwrap_or(Path::new("/")).join("wt-renamed");
            contain("rename(wt, ../wt-renamed)", sys::rename(&wt, parent))
        }
        "link-in" => match attempt(
            "link(outside/existing, wt/hl)",
            sys::link(&ex, wt.join("hl")),
        ) {
            Err(d) => Seen::Blocked(d),
            Ok(()) => match write_via(&wt.join("hl"), libc::O_WRONLY | libc::O_APPEND) {
                Ok(()) => Seen::Escaped("hard link into wt, written through it".into()),
                Err(e) => Seen::Escaped(format!("hard link into wt created (write -> {e})")),
            },
        },
        "link-out" => contain(
            "link(wt/f, outside/hl)",
            sys::link(wt.join("f"), out.join("hl")),
        ),
        "linkat-procfd-in" => {
            let fd = match sys::open(&ex, libc::O_RDONLY, 0) {
                Ok(fd) => fd,
                Err(e) => return Seen::Broken(format!("open(outside/existing, O_RDONLY) -> {e}")),
            };
            let src = format!("/proc/self/fd/{}", fd.as_raw_fd());
            match attempt(
                "linkat(/proc/self/fd/N, wt/hl2, AT_SYMLINK_FOLLOW)",
                sys::linkat_follow(&src, wt.join("hl2")),
            ) {
                Err(d) => Seen::Blocked(d),
                Ok(()) => match write_via(&wt.join("hl2"), libc::O_WRONLY | libc::O_APPEND) {
                    Ok(()) => Seen::Escaped("linked an outside file into wt and wrote it".into()),
                    Err(e) => {
                        Seen::Escaped(format!("linked an outside file into wt (write -> {e})"))
                    }
                },
            }
        }
        "otmpfile-link-out" => {
            let fd = match sys::open(&wt, libc::O_TMPFILE | libc::O_WRONLY, 0o644) {
                Ok(fd) => fd,
                Err(e) => return Seen::Skip(format!("O_TMPFILE in wt -> {e}")),
            };
            let _ = sys::write(fd.as_raw_fd(), b"tmpfile\n");
            let src = format!("/proc/self/fd/{}", fd.as_raw_fd());
            contain(
                "linkat(O_TMPFILE fd, outside/tmplinked)",
                sys::linkat_follow(&src, out.join("tmplinked")),
            )
        }
        "symlink-write-through" => {
            if let Err(e) = sys::symlink(&ex, wt.join("sl")) {
                return Seen::Broken(format!("symlink inside wt -> {e}"));
            }
            contain(
                "open(wt/sl -> outside/existing, O_APPEND)+write",
                write_via(&wt.join("sl"), libc::O_WRONLY | libc::O_APPEND),
            )
        }
        "symlink-dir-through" => {
            if let Err(e) = sys::symlink(&out, wt.join("sd")) {
                return Seen::Broken(format!("symlink inside wt -> {e}"));
            }
            contain(
                "open(wt/sd/new2 [sd -> outside], O_CREAT)",
                sys::open(wt.join("sd/new2"), libc::O_WRONLY | libc::O_CREAT, 0o644),
            )
        }
        "dotdot-absolute" => {
            let name = out
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            contain(
                "open(wt/../<outside>/new3, O_CREAT)",
                sys::open(
                    wt.join("..").join(name).join("new3"),
                    libc::O_WRONLY | libc::O_CREAT,
                    0o644,
                ),
            )
        }
        "dotdot-relative" => {
            if let Err(e) = sys::chdir(&wt) {
                return Seen::Broken(format!("chdir(wt) -> {e}"));
            }
            let name = out
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            contain(
                "open(../<outside>/new4, O_CREAT) from wt",
                sys::open(
                    format!("../{name}/new4"),
                    libc::O_WRONLY | libc::O_CREAT,
                    0o644,
                ),
            )
        }
        "tmp-symlink-out" => {
            let l = PathBuf::from(format!("/tmp/{}", arg(a, 2)));
            let _ = sys::unlink(&l);
            if let Err(e) = sys::symlink(&ex, &l) {
                return Seen::Broken(format!("symlink in /tmp -> {e}"));
            }
            let r = write_via(&l, libc::O_WRONLY | libc::O_APPEND);
            let _ = sys::unlink(&l);
            contain("open(/tmp/link -> outside/existing)+write", r)
        }
        "proc-self-fd-reopen" => {
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
        "proc-self-cwd" => {
            if let Err(e) = sys::chdir(&out) {
                return Seen::Broken(format!("chdir(outside) -> {e}"));
            }
            contain(
                "open(/proc/self/cwd/new5, O_CREAT) with cwd outside",
                sys::open("/proc/self/cwd/new5", libc::O_WRONLY | libc::O_CREAT, 0o644),
            )
        }
        "chmod-outside" => contain("chmod(outside/existing, 0777)", sys::chmod(&ex, 0o777)),
        "chown-outside" => {
            let (u, g) = sys::ids();
            contain(
                "chown(outside/existing, own uid, own gid)",
                sys::chown(&ex, u, g),
            )
        }
        "utime-outside" => contain(
            "utimensat(outside/existing, 1000000000)",
            sys::utime(&ex, 1_000_000_000),
        ),
        "xattr-outside" => contain(
            "setxattr(outside/existing, user.shofer)",
            sys::setxattr(&ex, "user.shofer", b"x"),
        ),
        "dev-create" => {
            let path = format!("/dev/{}", arg(a, 2));
            let r = sys::open(&path, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600);
            if r.is_ok() {
                let _ = sys::unlink(&path);
            }
            contain("open(/dev/<new>, O_CREAT)", r)
        }
        "dev-kmsg-open-write" => contain(
            "open(/dev/kmsg, O_WRONLY) (nothing written)",
            sys::open("/dev/kmsg", libc::O_WRONLY, 0),
        ),
        "devices-usable" => devices_usable(),
        "dev-shm" => dev_shm(arg(a, 2)),
        "tmp-writable" => {
            let path = format!("/tmp/{}", arg(a, 2));
            match write_via(Path::new(&path), libc::O_WRONLY | libc::O_CREAT) {
                Ok(()) => {
                    let _ = sys::unlink(&path);
                    Seen::Ok("created, wrote and removed a file in /tmp".into())
                }
                Err(e) => Seen::Broken(format!("create in /tmp -> {e}")),
            }
        }
        "worktree-writable" => worktree_writable(&wt),
        "rename-inside" => rename_inside(&wt),
        "mknod-device" => contain(
            "mknod(wt/nulldev, S_IFCHR 1:3)",
            sys::mknod(
                wt.join("nulldev"),
                libc::S_IFCHR | 0o666,
                libc::makedev(1, 3),
            ),
        ),
        "proc-environ" => {
            let secret = arg(a, 3);
            match std::fs::read(format!("/proc/{}/environ", arg(a, 2))) {
                Ok(v) if !secret.is_empty() && contains(&v, secret.as_bytes()) => {
                    Seen::Escaped("read the outside process's environment (secret seen)".into())
                }
                Ok(v) => Seen::Escaped(format!("read /proc/<outside>/environ ({} bytes)", v.len())),
                Err(e) => Seen::Blocked(format!("read /proc/<outside>/environ -> {e}")),
            }
        }
        "proc-pid-root" => {
            let path = format!("/proc/{}/root{}", arg(a, 2), out.join("new6").display());
            contain(
                "open(/proc/<outside pid>/root/<outside>/new6, O_CREAT)",
                sys::open(&path, libc::O_WRONLY | libc::O_CREAT, 0o644),
            )
        }
        "proc-sys-write" => {
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
        "signal-outside" => {
            let pid: i32 = arg(a, 2).parse().unwrap_or(0);
            contain(
                "kill(<outside pid>, SIGTERM)",
                sys::kill(pid, libc::SIGTERM),
            )
        }
        "ptrace-outside" => {
            let pid: i32 = arg(a, 2).parse().unwrap_or(0);
            // Safety: PTRACE_ATTACH takes a pid and ignores addr/data.
            let r = sys::check(unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0usize, 0usize) });
            if r.is_ok() {
                // Safety: as above; detach at once so the victim keeps running.
                unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0usize, 0usize) };
            }
            contain("ptrace(PTRACE_ATTACH, <outside pid>)", r)
        }
        "process-vm-readv" => {
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
                Err(e) if e.0 == libc::EFAULT => Seen::Escaped(
                    "process_vm_readv passed the access check (EFAULT on the address)".into(),
                ),
                r => contain("process_vm_readv(<outside pid>)", r),
            }
        }
        "inherited-fds" => inherited_fds(a),
        "passed-dirfd-openat" => {
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
                _ => {
                    Seen::Escaped("created an entry outside through the passed directory fd".into())
                }
            }
        }
        "passed-fd-reopen" => {
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
        "tiocsti" => tiocsti(false),
        "tiocsti-high-bits" => tiocsti(true),
        "tioclinux" => {
            let mut sub = [3u8, 0, 0, 0]; // TIOCL_PASTESEL: paste the selection as input
            match sys::ioctl_ptr(0, libc::TIOCLINUX as libc::c_ulong, sub.as_mut_ptr()) {
                Ok(_) => Seen::Escaped("ioctl(TIOCLINUX, PASTESEL) succeeded".into()),
                Err(e) if e.0 == libc::EPERM || e.0 == libc::EACCES => Seen::Blocked(format!(
                    "ioctl(0, TIOCLINUX) -> {e} (refused before the driver)"
                )),
                Err(e) => Seen::Escaped(format!(
                    "ioctl(0, TIOCLINUX) reached the tty driver ({e}): no filter refused it"
                )),
            }
        }
        "terminal-programs" => terminal_programs(),
        "abstract-unix-connect" => contain(
            "connect(abstract unix socket of an outside listener)",
            sys::unix_connect(arg(a, 2).as_bytes(), true),
        ),
        "pathname-unix-connect" => contain(
            "connect(outside/listen.sock)",
            sys::unix_connect(arg(a, 2).as_bytes(), false),
        ),
        "tcp-connect" => {
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
        "tcp-bind" => {
            let port: u16 = arg(a, 2).parse().unwrap_or(0);
            let r = sys::tcp_bind(port, true);
            let my_net = std::fs::read_link("/proc/self/ns/net")
                .map(|l| l.display().to_string())
                .unwrap_or_default();
            match r {
                // A listener in a private network namespace is unreachable from outside.
                Ok(_) if !arg(a, 3).is_empty() && my_net != arg(a, 3) => Seen::Blocked(
                    "bind worked inside a private network namespace (unreachable from the host)"
                        .into(),
                ),
                r => contain("bind(127.0.0.1:<free port>)", r),
            }
        }
        "mount-bind-outside" => mount_bind(&wt, &out, arg(a, 2)),
        "unshare-remount" => unshare_remount(&out),
        "pivot-root" => pivot_root(&wt, &out),
        "report-creds" => report_creds(),
        "suid-exec" => suid_exec(arg(a, 2)),
        "caps-and-nnp" => caps_and_nnp(arg(a, 2) == "root"),
        "root-chown-foreign" => contain(
            "chown(outside/foreign [uid 4242], 0, 0)",
            sys::chown(out.join("foreign"), 0, 0),
        ),
        "root-dac-read" => contain(
            "open(outside/secret [uid 4242, 0600], O_RDONLY)",
            sys::open(out.join("secret"), libc::O_RDONLY, 0),
        ),
        "sethostname-uts" => {
            // Only inside a fresh UTS namespace, and only if creating it worked.
            // Safety: plain flag argument.
            match sys::check(unsafe { libc::unshare(libc::CLONE_NEWUTS) } as libc::c_long) {
                Err(e) => Seen::Blocked(format!(
                    "unshare(CLONE_NEWUTS) -> {e} (sethostname not tried)"
                )),
                Ok(_) => {
                    let name = b"shofer-containment";
                    // Safety: `name` is valid for its length; this namespace is private.
                    let r =
                        sys::check(
                            unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }
                                as libc::c_long,
                        );
                    match r {
                        Ok(_) => Seen::Escaped("unshare(CLONE_NEWUTS) and sethostname succeeded: CAP_SYS_ADMIN kept".into()),
                        Err(e) => Seen::Escaped(format!("unshare(CLONE_NEWUTS) succeeded (CAP_SYS_ADMIN kept); sethostname -> {e}")),
                    }
                }
            }
        }
        "open-by-handle" => open_by_handle(&ex),
        "core-dump" => core_dump(&out),
        "setsid-escape" => setsid_escape(arg(a, 2), arg(a, 3)),
        "double-fork-escape" => double_fork(arg(a, 2), arg(a, 3), false),
        "sigterm-ignoring-descendant" => double_fork(arg(a, 2), arg(a, 3), true),
        "tree-then-wait" => {
            // A grandchild with the marker, then wait to be stopped from outside.
            let _ = spawn_sleeper(arg(a, 2), arg(a, 3), false, false);
            std::thread::sleep(std::time::Duration::from_secs(30));
            Seen::Ok("slept".into())
        }
        "kill-supervisor" => {
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
        "ptrace-supervisor" => {
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
        "proc-supervisor-fds" => {
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
        "tiocsti-foreign-pty" => {
            // A pty that is nobody's controlling terminal: open it (as a session leader without
            // one it becomes ours), then inject. Must be refused in non-interactive runs too.
            let path = arg(a, 2);
            // Safety: setsid takes no arguments (fails harmlessly if already a leader).
            unsafe { libc::setsid() };
            let fd = match sys::open(path, libc::O_RDWR, 0) {
                Ok(fd) => fd,
                Err(e) => return Seen::Blocked(format!("open(foreign pty) -> {e}")),
            };
            // Safety: TIOCSCTTY with arg 0 (no stealing).
            unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSCTTY, 0) };
            let b = b'#';
            contain(
                "TIOCSTI on a foreign pty made our controlling terminal",
                sys::ioctl_raw64(fd.as_raw_fd(), libc::TIOCSTI, &b),
            )
        }
        "tiocsti-ia32" => tiocsti_ia32(),
        "tiocsti-x32" => {
            let b = b'#';
            // Safety: an x32 system call number; the kernel answers ENOSYS if x32 is off.
            let r = sys::check(unsafe {
                libc::syscall(0x4000_0000 | 514, 0, libc::TIOCSTI, &b as *const u8)
            });
            match r {
                Err(e) if e.0 == libc::ENOSYS => {
                    Seen::Blocked("x32 ioctl -> ENOSYS (no x32 ABI in this kernel)".into())
                }
                r => contain("x32 ioctl(0, TIOCSTI)", r),
            }
        }
        "dev-uinput" => match sys::open("/dev/uinput", libc::O_WRONLY, 0) {
            Err(e) if e.0 == libc::ENOENT => Seen::Skip("no /dev/uinput".into()),
            r => contain("open(/dev/uinput, O_WRONLY) (fake keyboard)", r),
        },
        "spawn-then-exit" => {
            // spawn-then-exit <me> <marker> <mode...>: start `sleeper <marker> 30 <mode...>` in
            // a new session and exit at once.
            let me = arg(a, 2);
            let mut argv = vec![
                me.to_string(),
                "sleeper".into(),
                arg(a, 3).to_string(),
                "30".into(),
            ];
            argv.extend(a.iter().skip(4).cloned());
            match sys::fork() {
                Err(e) => Seen::Broken(format!("fork -> {e}")),
                Ok(0) => {
                    // Safety: new session in the child before exec.
                    unsafe { libc::setsid() };
                    let e = sys::execv(Path::new(me), &argv);
                    eprintln!("exec -> {e}");
                    sys::exit_now(127)
                }
                Ok(_) => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    Seen::Ok("left a process tree behind and exited".into())
                }
            }
        }
        "link-into-tmp" => {
            let l = PathBuf::from(format!("/tmp/{}", arg(a, 2)));
            match attempt("link(outside/existing, /tmp/x)", sys::link(&ex, &l)) {
                Err(d) => Seen::Blocked(d),
                Ok(()) => {
                    let w = write_via(&l, libc::O_WRONLY | libc::O_APPEND);
                    let _ = sys::unlink(&l);
                    match w {
                        Ok(()) => Seen::Escaped(
                            "hard-linked an outside file into /tmp and wrote it".into(),
                        ),
                        Err(e) => Seen::Escaped(format!(
                            "hard-linked an outside file into /tmp (write -> {e})"
                        )),
                    }
                }
            }
        }
        "open-tree-clone" => open_tree_clone(&out),
        "sys-write" => {
            let cands = [
                "/sys/kernel/mm/transparent_hugepage/enabled",
                "/sys/kernel/mm/ksm/run",
                "/sys/power/state",
                "/sys/kernel/uevent_helper",
            ];
            match cands.iter().find(|p| Path::new(p).exists()) {
                None => Seen::Skip("none of the probed /sys files exist".into()),
                Some(p) => contain(
                    &format!("open({p}, O_WRONLY) (nothing written)"),
                    sys::open(p, libc::O_WRONLY, 0),
                ),
            }
        }
        "git-write" => git_write(a),
        "plant-symlink" => match sys::symlink(arg(a, 0), arg(a, 1)) {
            Ok(()) => Seen::Ok("planted".into()),
            Err(e) => Seen::Broken(format!("symlink -> {e}")),
        },
        "put" => {
            // put <path> <content>: replace a file inside the worktree (O_TRUNC).
            let fd = sys::open(
                arg(a, 0),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                0o644,
            );
            match fd.and_then(|fd| sys::write(fd.as_raw_fd(), arg(a, 1).as_bytes())) {
                Ok(_) => Seen::Ok(format!("wrote {}", arg(a, 0))),
                Err(e) => Seen::Broken(format!("put {} -> {e}", arg(a, 0))),
            }
        }
        "git-fake-layout" => git_fake_layout(&wt, Path::new(arg(a, 1))),
        "write-file" => {
            // write-file <path> : a plain create+write (for paths granted by a rule).
            let path = p(arg(a, 0));
            match write_via(&path, libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND) {
                Ok(()) => Seen::Ok(format!("wrote {}", path.display())),
                Err(e) => Seen::Broken(format!("write {} -> {e}", path.display())),
            }
        }
        "deny-write" => {
            // deny-write <path>... : every create+write must fail.
            let mut escaped = Vec::new();
            let mut why = Vec::new();
            for path in a {
                let r = write_via(
                    Path::new(path),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
                );
                match r {
                    Ok(()) => escaped.push(path.clone()),
                    Err(e) => why.push(format!("{path} -> {e}")),
                }
            }
            if escaped.is_empty() {
                Seen::Blocked(why.join("; "))
            } else {
                Seen::Escaped(format!("wrote {}", escaped.join(", ")))
            }
        }
        other => Seen::Broken(format!("unknown attack {other:?}")),
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

fn devices_usable() -> Seen {
    let mut bad = Vec::new();
    match sys::open("/dev/null", libc::O_WRONLY, 0) {
        Ok(fd) => {
            if let Err(e) = sys::write(fd.as_raw_fd(), b"x") {
                bad.push(format!("write /dev/null -> {e}"));
            }
        }
        Err(e) => bad.push(format!("open /dev/null O_WRONLY -> {e}")),
    }
    match sys::open("/dev/zero", libc::O_RDWR, 0) {
        Ok(fd) => {
            let mut b = [1u8; 4];
            if sys::read(fd.as_raw_fd(), &mut b).is_err() || b != [0; 4] {
                bad.push("read /dev/zero".into());
            }
        }
        Err(e) => bad.push(format!("open /dev/zero O_RDWR -> {e}")),
    }
    match sys::open("/dev/full", libc::O_WRONLY, 0) {
        Ok(fd) => match sys::write(fd.as_raw_fd(), b"x") {
            Err(e) if e.0 == libc::ENOSPC => {}
            r => bad.push(format!("write /dev/full gave {r:?}, expected ENOSPC")),
        },
        Err(e) => bad.push(format!("open /dev/full O_WRONLY -> {e}")),
    }
    if bad.is_empty() {
        Seen::Ok("/dev/null, /dev/zero, /dev/full usable".into())
    } else {
        Seen::Broken(bad.join("; "))
    }
}

fn dev_shm(marker: &str) -> Seen {
    // What sem_open(3) does: create, size, map and unlink a file in /dev/shm.
    let path = format!("/dev/shm/sem.{marker}");
    let fd = match sys::open(&path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600) {
        Ok(fd) => fd,
        Err(e) => return Seen::Broken(format!("open(/dev/shm/sem.*, O_CREAT) -> {e}")),
    };
    // Safety: fd is ours; 32 bytes is a sem_t.
    let r = unsafe { libc::ftruncate(fd.as_raw_fd(), 32) };
    let res = if r != 0 {
        Seen::Broken(format!("ftruncate(/dev/shm file) -> {}", Errno::last()))
    } else {
        // Safety: mapping 32 bytes of a file we just sized; unmapped at once.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                32,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if m == libc::MAP_FAILED {
            Seen::Broken(format!("mmap(/dev/shm file) -> {}", Errno::last()))
        } else {
            // Safety: `m` is the live 32-byte mapping from above.
            unsafe { libc::munmap(m, 32) };
            Seen::Ok("created, sized, mapped and removed a /dev/shm semaphore file".into())
        }
    };
    if let Err(e) = sys::unlink(&path) {
        return Seen::Broken(format!("unlink(/dev/shm/sem.*) -> {e}"));
    }
    res
}

fn worktree_writable(wt: &Path) -> Seen {
    let f = wt.join("w1");
    let steps: Vec<(&str, Result<(), Errno>)> = vec![
        (
            "create+write",
            write_via(&f, libc::O_WRONLY | libc::O_CREAT),
        ),
        (
            "O_TRUNC",
            sys::open(&f, libc::O_WRONLY | libc::O_TRUNC, 0).map(|_| ()),
        ),
        ("truncate", sys::truncate(&f, 0)),
        ("chmod", sys::chmod(&f, 0o600)),
        ("mkdir", sys::mkdir(wt.join("d1"), 0o755)),
        ("symlink", sys::symlink("w1", wt.join("s1"))),
        ("rename same dir", sys::rename(wt.join("s1"), wt.join("s2"))),
        ("unlink", sys::unlink(wt.join("s2"))),
        ("rmdir", sys::rmdir(wt.join("d1"))),
        (
            "mkfifo",
            sys::mknod(wt.join("fifo1"), libc::S_IFIFO | 0o644, 0),
        ),
        ("unlink", sys::unlink(&f)),
    ];
    let bad: Vec<String> = steps
        .into_iter()
        .filter_map(|(w, r)| r.err().map(|e| format!("{w} -> {e}")))
        .collect();
    if bad.is_empty() {
        Seen::Ok(
            "create, O_TRUNC, truncate, chmod, mkdir, symlink, rename, unlink, rmdir, mkfifo in wt"
                .into(),
        )
    } else {
        Seen::Broken(bad.join("; "))
    }
}

fn rename_inside(wt: &Path) -> Seen {
    // Field case 8: `mkdir d && touch f && mv f d/` inside the worktree.
    let steps: Vec<(&str, Result<(), Errno>)> = vec![
        ("mkdir d", sys::mkdir(wt.join("d"), 0o755)),
        (
            "touch f2",
            write_via(&wt.join("f2"), libc::O_WRONLY | libc::O_CREAT),
        ),
        ("mv f2 d/", sys::rename(wt.join("f2"), wt.join("d/f2"))),
        ("ln d/f2 f3", sys::link(wt.join("d/f2"), wt.join("f3"))),
        ("mv d/f2 f4", sys::rename(wt.join("d/f2"), wt.join("f4"))),
    ];
    let bad: Vec<String> = steps
        .into_iter()
        .filter_map(|(w, r)| r.err().map(|e| format!("{w} -> {e}")))
        .collect();
    if bad.is_empty() {
        Seen::Ok("renames and links across directories inside wt work".into())
    } else {
        Seen::Broken(bad.join("; "))
    }
}

fn inherited_fds(a: &[String]) -> Seen {
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

fn tiocsti(high_bits: bool) -> Seen {
    let byte = b'#';
    let mut results = Vec::new();
    let mut escaped = false;
    let req = libc::TIOCSTI | if high_bits { 0x1_0000_0000 } else { 0 };
    let tty = sys::open("/dev/tty", libc::O_RDWR, 0);
    let mut fds = vec![(0, "stdin")];
    if let Ok(t) = &tty {
        fds.push((t.as_raw_fd(), "/dev/tty"));
    }
    for (fd, what) in fds {
        match sys::ioctl_raw64(fd, req, &byte) {
            Ok(_) => {
                escaped = true;
                results.push(format!("TIOCSTI on {what} succeeded"));
            }
            Err(e) => results.push(format!("TIOCSTI on {what} -> {e}")),
        }
    }
    if escaped {
        Seen::Escaped(results.join("; "))
    } else {
        Seen::Blocked(results.join("; "))
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

fn open_tree_clone(out: &Path) -> Seen {
    // A detached clone of the outside tree (new mount API), written through its fd.
    let mut steps = Vec::new();
    match enter_userns() {
        Ok(()) => steps.push("new user+mount namespace".to_string()),
        Err(e) => steps.push(e),
    }
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let c = sys::cstr(out);
    // Safety: valid C string; flags as documented in open_tree(2).
    let fd = unsafe {
        libc::syscall(
            428,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if fd < 0 {
        let e = Errno::last();
        steps.push(format!("open_tree(outside, CLONE) -> {e}"));
        return match write_via(&out.join("existing"), libc::O_WRONLY | libc::O_APPEND) {
            Ok(()) => Seen::Escaped(format!("{}; but wrote outside/existing", steps.join("; "))),
            Err(w) => Seen::Blocked(format!(
                "{}; write outside/existing -> {w}",
                steps.join("; ")
            )),
        };
    }
    let fd = fd as i32;
    steps.push("open_tree(outside, CLONE) ok".into());
    // Try to clear a read-only attribute on the clone (mount_setattr, Linux 5.12).
    #[repr(C)]
    struct MountAttr {
        set: u64,
        clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let attr = MountAttr {
        set: 0,
        clr: 1,
        propagation: 0,
        userns_fd: 0,
    };
    let empty = sys::cstr("");
    // Safety: `attr` is a valid mount_attr of the size passed; AT_EMPTY_PATH on our fd.
    let r = unsafe {
        libc::syscall(
            442,
            fd,
            empty.as_ptr(),
            libc::AT_EMPTY_PATH | AT_RECURSIVE as i32,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    steps.push(format!(
        "mount_setattr(clear RDONLY) -> {}",
        if r == 0 {
            "ok".into()
        } else {
            Errno::last().name()
        }
    ));
    let w = sys::openat(fd, "existing", libc::O_WRONLY | libc::O_APPEND, 0)
        .and_then(|f| sys::write(f.as_raw_fd(), b"PWNED via open_tree\n"));
    let c2 = sys::openat(fd, "new11", libc::O_WRONLY | libc::O_CREAT, 0o644);
    // Safety: closing our own descriptor.
    unsafe { libc::close(fd) };
    match (w, c2) {
        (Err(e1), Err(e2)) => Seen::Blocked(format!(
            "{}; write through the clone -> {e1}; create -> {e2}",
            steps.join("; ")
        )),
        _ => Seen::Escaped(format!(
            "{}; wrote outside through a detached mount clone",
            steps.join("; ")
        )),
    }
}

fn tiocsti_ia32() -> Seen {
    // The i386 entry point (int 0x80, ioctl = 54) with a pointer below 4 GiB; in a child, so
    // a seccomp kill (SIGSYS) is observable.
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
            // Safety: `page` is a writable mapping.
            unsafe { *(page as *mut u8) = b'#' };
            let ret: i32;
            // Safety: the int 0x80 ABI: eax = syscall number (ioctl = 54), ebx/ecx/edx = args;
            // rbx is reserved by LLVM, so it is swapped in and out around the trap.
            unsafe {
                std::arch::asm!(
                    "xchg rbx, {b}",
                    "int 0x80",
                    "xchg rbx, {b}",
                    b = inout(reg) 0u64 => _,
                    inout("eax") 54i32 => ret,
                    in("ecx") libc::TIOCSTI as u32,
                    in("edx") page as usize as u32,
                );
            }
            // 0 = injected; -errno otherwise; 100+errno encodes the error.
            sys::exit_now(if ret == 0 { 0 } else { 100 + (-ret).min(150) })
        }
        Ok(pid) => {
            let mut st = 0;
            // Safety: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            if libc::WIFSIGNALED(st) {
                Seen::Blocked(format!(
                    "i386 ioctl(TIOCSTI): killed by signal {}",
                    libc::WTERMSIG(st)
                ))
            } else {
                match libc::WEXITSTATUS(st) {
                    0 => Seen::Escaped("i386 int 0x80 ioctl(0, TIOCSTI) succeeded".into()),
                    3 => Seen::Skip("mmap(MAP_32BIT) failed".into()),
                    n if n >= 100 => {
                        let e = Errno(i32::from(n as u8) - 100);
                        if e.0 == libc::ENOSYS {
                            Seen::Blocked("i386 syscalls disabled (ENOSYS)".into())
                        } else {
                            Seen::Blocked(format!("i386 int 0x80 ioctl(0, TIOCSTI) -> {e}"))
                        }
                    }
                    n => Seen::Broken(format!("child exited {n}")),
                }
            }
        }
    }
}

fn terminal_programs() -> Seen {
    // Field case 3: what `stty size </dev/tty`, `echo >/dev/stdout`, `echo >/dev/stderr` and
    // `pty.openpty()` do, as system calls.
    let mut bad = Vec::new();
    match sys::open("/dev/tty", libc::O_RDWR, 0) {
        Ok(t) => {
            // Safety: a zeroed winsize is a valid out-parameter.
            let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
            if let Err(e) = sys::ioctl_ptr(t.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) {
                bad.push(format!("TIOCGWINSZ on /dev/tty -> {e}"));
            }
            // Safety: a zeroed termios is a valid out-parameter.
            let mut tio: libc::termios = unsafe { std::mem::zeroed() };
            // Safety: `tio` is valid to fill.
            if unsafe { libc::tcgetattr(t.as_raw_fd(), &mut tio) } != 0 {
                bad.push(format!("tcgetattr(/dev/tty) -> {}", Errno::last()));
            // Safety: `tio` came from tcgetattr.
            } else if unsafe { libc::tcsetattr(t.as_raw_fd(), libc::TCSANOW, &tio) } != 0 {
                bad.push(format!("tcsetattr(/dev/tty) -> {}", Errno::last()));
            }
        }
        Err(e) => bad.push(format!("open /dev/tty -> {e}")),
    }
    for dev in ["/dev/stdout", "/dev/stderr"] {
        if let Err(e) = write_via(Path::new(dev), libc::O_WRONLY) {
            bad.push(format!("write {dev} -> {e}"));
        }
    }
    match sys::openpty() {
        Ok((m, s, _)) => {
            // Safety: a zeroed termios is a valid out-parameter.
            let mut tio: libc::termios = unsafe { std::mem::zeroed() };
            // Safety: `tio` is valid to fill.
            if unsafe { libc::tcgetattr(s.as_raw_fd(), &mut tio) } != 0 {
                bad.push(format!("tcgetattr(new pty) -> {}", Errno::last()));
            }
            drop((m, s));
        }
        Err(e) => bad.push(format!("openpty via /dev/ptmx -> {e}")),
    }
    if bad.is_empty() {
        Seen::Ok("/dev/tty winsize and termios, /dev/stdout, /dev/stderr, openpty work".into())
    } else {
        Seen::Broken(bad.join("; "))
    }
}

fn mount_bind(wt: &Path, out: &Path, host_mntns: &str) -> Seen {
    let mnt = wt.join("mnt");
    let _ = sys::mkdir(&mnt, 0o755);
    let (s, t) = (sys::cstr(out), sys::cstr(&mnt));
    // Safety: valid C strings; NULL fstype and data are allowed with MS_BIND.
    let r = unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Seen::Blocked(format!(
            "mount(outside, wt/mnt, MS_BIND) -> {}",
            Errno::last()
        ));
    }
    let my_ns = std::fs::read_link("/proc/self/ns/mnt")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    let w = write_via(&mnt.join("existing"), libc::O_WRONLY | libc::O_APPEND);
    // Safety: valid C string.
    unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    if my_ns == host_mntns {
        return Seen::Escaped("bind mount succeeded in the host's mount namespace".into());
    }
    match w {
        Ok(()) => Seen::Escaped("bind-mounted outside into wt and wrote through it".into()),
        Err(e) => Seen::Blocked(format!(
            "bind mount in a private mount namespace worked, write through it -> {e}"
        )),
    }
}

/// Becomes root of a new user namespace with a mount namespace (uid/gid maps written).
fn enter_userns() -> Result<(), String> {
    let (u, g) = sys::ids();
    // Safety: plain flags.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Err(format!(
            "unshare(CLONE_NEWUSER|CLONE_NEWNS) -> {}",
            Errno::last()
        ));
    }
    let _ = std::fs::write("/proc/self/setgroups", "deny");
    std::fs::write("/proc/self/uid_map", format!("0 {u} 1"))
        .map_err(|e| format!("uid_map -> {e}"))?;
    std::fs::write("/proc/self/gid_map", format!("0 {g} 1"))
        .map_err(|e| format!("gid_map -> {e}"))?;
    let root = sys::cstr("/");
    // Safety: valid C string; propagation change only.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(format!("make / private -> {}", Errno::last()));
    }
    Ok(())
}

fn unshare_remount(out: &Path) -> Seen {
    let mut steps = Vec::new();
    match enter_userns() {
        Err(e) => steps.push(e),
        Ok(()) => {
            steps.push("new user+mount namespace".into());
            let o = sys::cstr(out);
            // Safety: valid C strings; bind then remount read-write.
            let r = unsafe {
                libc::mount(
                    o.as_ptr(),
                    o.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                )
            };
            steps.push(format!(
                "bind outside on itself -> {}",
                if r == 0 {
                    "ok".into()
                } else {
                    Errno::last().name()
                }
            ));
            // Safety: as above.
            let r = unsafe {
                libc::mount(
                    std::ptr::null(),
                    o.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REMOUNT,
                    std::ptr::null(),
                )
            };
            steps.push(format!(
                "remount rw -> {}",
                if r == 0 {
                    "ok".into()
                } else {
                    Errno::last().name()
                }
            ));
        }
    }
    match write_via(&out.join("existing"), libc::O_WRONLY | libc::O_APPEND) {
        Ok(()) => Seen::Escaped(format!("{}; wrote outside/existing", steps.join("; "))),
        Err(e) => Seen::Blocked(format!(
            "{}; write outside/existing -> {e}",
            steps.join("; ")
        )),
    }
}

fn pivot_root(wt: &Path, out: &Path) -> Seen {
    if let Err(e) = enter_userns() {
        return match write_via(&out.join("existing"), libc::O_WRONLY | libc::O_APPEND) {
            Ok(()) => Seen::Escaped(format!("{e}; but wrote outside/existing")),
            Err(w) => Seen::Blocked(format!("{e}; write outside -> {w}")),
        };
    }
    let newroot = wt.join("newroot");
    let _ = sys::mkdir(&newroot, 0o755);
    let n = sys::cstr(&newroot);
    // Safety: valid C strings.
    if unsafe {
        libc::mount(
            n.as_ptr(),
            n.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    } != 0
    {
        return Seen::Blocked(format!(
            "in a new userns: bind newroot -> {} (pivot_root not reached)",
            Errno::last()
        ));
    }
    let _ = sys::mkdir(newroot.join("old"), 0o755);
    let o = sys::cstr(newroot.join("old"));
    // Safety: valid C strings for new_root and put_old.
    let r = sys::check(unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) });
    if let Err(e) = r {
        return Seen::Blocked(format!("pivot_root(wt/newroot, wt/newroot/old) -> {e}"));
    }
    let _ = sys::chdir("/");
    let via_old = PathBuf::from("/old")
        .join(out.strip_prefix("/").unwrap_or(out))
        .join("existing");
    match write_via(&via_old, libc::O_WRONLY | libc::O_APPEND) {
        Ok(()) => {
            Seen::Escaped("pivot_root worked and outside/existing was written through /old".into())
        }
        Err(e) => Seen::Blocked(format!(
            "pivot_root worked (private namespace); write via /old -> {e}"
        )),
    }
}

fn status_field(name: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{name}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

fn report_creds() -> Seen {
    let (u, _) = sys::ids();
    Seen::Ok(format!(
        "euid={u} CapEff={} CapPrm={}",
        status_field("CapEff"),
        status_field("CapPrm")
    ))
}

fn suid_exec(prog: &str) -> Seen {
    let out = std::process::Command::new(prog)
        .args(["attack", "report-creds"])
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => return Seen::Broken(format!("exec {prog} -> {e}")),
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{RESULT_PREFIX}ok ")))
        .unwrap_or("")
        .to_string();
    if line.is_empty() {
        return Seen::Broken(format!("setuid program printed nothing usable: {text:?}"));
    }
    let (my_uid, _) = sys::ids();
    let euid_zero = line.contains("euid=0 ");
    let caps = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("CapEff="))
        .unwrap_or("");
    let caps_set = caps.chars().any(|c| c != '0');
    if (my_uid != 0 && euid_zero) || caps_set {
        Seen::Escaped(format!("setuid-root program ran with {line}"))
    } else {
        Seen::Blocked(format!("setuid-root program ran with {line}"))
    }
}

fn caps_and_nnp(root: bool) -> Seen {
    let mut bad = Vec::new();
    let sets: &[&str] = if root {
        &["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
    } else {
        &["CapInh", "CapPrm", "CapEff", "CapAmb"]
    };
    for set in sets {
        let v = status_field(set);
        if v.chars().any(|c| c != '0') {
            bad.push(format!("{set}={v}"));
        }
    }
    let nnp = status_field("NoNewPrivs");
    if nnp != "1" {
        bad.push(format!("NoNewPrivs={nnp}"));
    }
    if bad.is_empty() {
        Seen::Blocked(format!(
            "capability sets {} are empty; NoNewPrivs=1",
            sets.join("/")
        ))
    } else {
        Seen::Escaped(bad.join(" "))
    }
}

fn open_by_handle(ex: &Path) -> Seen {
    #[repr(C)]
    struct Handle {
        bytes: u32,
        ty: i32,
        f: [u8; 128],
    }
    let mut h = Handle {
        bytes: 128,
        ty: 0,
        f: [0; 128],
    };
    let mut mount_id: libc::c_int = 0;
    let c = sys::cstr(ex);
    // Safety: `h` has room for 128 handle bytes as announced in `bytes`.
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            (&mut h as *mut Handle).cast(),
            &mut mount_id,
            0,
        )
    };
    if r != 0 {
        return Seen::Skip(format!("name_to_handle_at -> {}", Errno::last()));
    }
    let root = match sys::open("/", libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(fd) => fd,
        Err(e) => return Seen::Broken(format!("open / -> {e}")),
    };
    // Safety: `h` is the handle the kernel just filled.
    let fd = unsafe {
        libc::open_by_handle_at(
            root.as_raw_fd(),
            (&mut h as *mut Handle).cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd >= 0 {
        // Safety: we own the returned fd.
        drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
        Seen::Escaped("open_by_handle_at succeeded: CAP_DAC_READ_SEARCH kept".into())
    } else {
        Seen::Blocked(format!("open_by_handle_at -> {}", Errno::last()))
    }
}

fn core_dump(out: &Path) -> Seen {
    if let Err(e) = sys::chdir(out) {
        return Seen::Broken(format!("chdir(outside) -> {e}"));
    }
    match sys::fork() {
        Err(e) => Seen::Broken(format!("fork -> {e}")),
        Ok(0) => {
            let lim = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            // Safety: plain calls in a forked single-threaded child that then crashes.
            unsafe {
                libc::setrlimit(libc::RLIMIT_CORE, &lim);
                libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
                libc::signal(libc::SIGSEGV, libc::SIG_DFL);
                libc::raise(libc::SIGSEGV);
            }
            sys::exit_now(0)
        }
        Ok(pid) => {
            let mut st = 0;
            // Safety: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            let dumped = libc::WIFSIGNALED(st) && libc::WCOREDUMP(st);
            if dumped {
                Seen::Escaped("a crash with cwd outside dumped core".into())
            } else {
                Seen::Blocked(
                    "a crash with cwd outside left no core (checked from outside too)".into(),
                )
            }
        }
    }
}

/// Forks a child that becomes `shofer-containment attack sleeper <marker>` (found later by
/// the marker in its command line). `setsid` and `ignore_term` shape how it tries to survive.
fn spawn_sleeper(me: &str, marker: &str, setsid: bool, ignore_term: bool) -> Result<i32, Errno> {
    let pid = sys::fork()?;
    if pid == 0 {
        // Safety: plain calls in the forked child before exec.
        unsafe {
            if setsid {
                libc::setsid();
            }
            if ignore_term {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                libc::signal(libc::SIGINT, libc::SIG_IGN);
            }
        }
        let e = sys::execv(
            Path::new(me),
            &[me.to_string(), "sleeper".into(), marker.into(), "30".into()],
        );
        eprintln!("exec sleeper -> {e}");
        sys::exit_now(127);
    }
    Ok(pid)
}

fn setsid_escape(me: &str, marker: &str) -> Seen {
    match spawn_sleeper(me, marker, true, false) {
        Ok(_) => Seen::Ok("left a setsid() child behind and exited".into()),
        Err(e) => Seen::Broken(format!("fork -> {e}")),
    }
}

fn double_fork(me: &str, marker: &str, ignore_term: bool) -> Seen {
    match sys::fork() {
        Err(e) => Seen::Broken(format!("fork -> {e}")),
        Ok(0) => {
            let _ = spawn_sleeper(me, marker, ignore_term, ignore_term);
            sys::exit_now(0)
        }
        Ok(pid) => {
            let mut st = 0;
            // Safety: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            Seen::Ok("left a double-forked grandchild behind and exited".into())
        }
    }
}

fn git_write(a: &[String]) -> Seen {
    // git-write <mode> <paths...>: `deny` = every write must fail (escape otherwise);
    // `rename-over <src-dir> <target>`: create a file in a writable dir then rename it over a
    // read-only target.
    match arg(a, 0) {
        "rename-over" => {
            let tmp = Path::new(arg(a, 1)).join("tmp-shofer-containment");
            if let Err(e) = write_via(&tmp, libc::O_WRONLY | libc::O_CREAT) {
                return Seen::Broken(format!("create in writable {} -> {e}", arg(a, 1)));
            }
            let r = sys::rename(&tmp, arg(a, 2));
            let _ = sys::unlink(&tmp);
            contain("rename(objects/tmp, <common>/packed-refs)", r)
        }
        _ => Seen::Broken("git-write: unknown mode".into()),
    }
}

fn git_fake_layout(wt: &Path, victim_git: &Path) -> Seen {
    // A well-formed-looking linked-worktree layout *inside* the worktree whose common dir's
    // objects/, refs/ and logs/ are symlinks into another repository.
    let fake = wt.join("fakecommon");
    let x = fake.join("worktrees/x");
    let mut bad = Vec::new();
    let mut step = |what: &str, r: Result<(), Errno>| {
        if let Err(e) = r {
            bad.push(format!("{what} -> {e}"));
        }
    };
    step(
        "mkdir",
        std::fs::create_dir_all(&x).map_err(|e| Errno(e.raw_os_error().unwrap_or(0))),
    );
    let put = |p: PathBuf, s: String| {
        std::fs::write(p, s).map_err(|e| Errno(e.raw_os_error().unwrap_or(0)))
    };
    step(
        "gitdir",
        put(x.join("gitdir"), format!("{}\n", wt.join(".git").display())),
    );
    step("commondir", put(x.join("commondir"), "../..\n".into()));
    step("HEAD", put(x.join("HEAD"), "ref: refs/heads/main\n".into()));
    step(
        "config",
        put(
            fake.join("config"),
            "[core]\n\trepositoryformatversion = 0\n".into(),
        ),
    );
    step(
        "HEAD",
        put(fake.join("HEAD"), "ref: refs/heads/main\n".into()),
    );
    for d in ["objects", "refs", "logs", "hooks"] {
        step(d, sys::symlink(victim_git.join(d), fake.join(d)));
    }
    step(
        ".git",
        put(wt.join(".git"), format!("gitdir: {}\n", x.display())),
    );
    if bad.is_empty() {
        Seen::Ok("fake common dir with symlinks into another repository planted".into())
    } else {
        Seen::Broken(bad.join("; "))
    }
}

/// `shofer-containment sleeper <marker> <secs>`: sleeps (the marker is only for finding it).
///
/// `sleeper <marker> <secs> respawn`: on SIGTERM, SIGHUP or SIGINT it forks a fresh copy of
/// itself (new session, same marker) and exits, so a supervisor that signals once and stops
/// looking leaves a process behind. `sleeper <marker> <secs> deep <n>`: a chain of `n`
/// processes each ignoring SIGTERM/SIGHUP, each the parent of the next.
pub fn sleeper(args: &[String]) -> i32 {
    let marker = arg(args, 0).to_string();
    let secs: u64 = arg(args, 1).parse().unwrap_or(30);
    match arg(args, 2) {
        "respawn" => respawner(&marker, secs),
        "deep" => {
            let n: u32 = arg(args, 3).parse().unwrap_or(0);
            // Safety: ignoring signals in this single-threaded process.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
            }
            if n > 0 {
                let me = std::fs::read_link("/proc/self/exe").unwrap_or_default();
                if let Ok(0) = sys::fork() {
                    // Safety: a new session for the next link of the chain.
                    unsafe { libc::setsid() };
                    let e = sys::execv(
                        &me,
                        &[
                            me.display().to_string(),
                            "sleeper".into(),
                            marker.clone(),
                            secs.to_string(),
                            "deep".into(),
                            (n - 1).to_string(),
                        ],
                    );
                    eprintln!("exec -> {e}");
                    sys::exit_now(127);
                }
            }
            std::thread::sleep(std::time::Duration::from_secs(secs));
            0
        }
        _ => {
            std::thread::sleep(std::time::Duration::from_secs(secs));
            0
        }
    }
}

static RESPAWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    RESPAWN.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn respawner(marker: &str, secs: u64) -> i32 {
    let me = std::fs::read_link("/proc/self/exe").unwrap_or_default();
    // Safety: an async-signal-safe handler that only stores to an atomic.
    unsafe {
        for s in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
            libc::signal(s, on_term as *const () as libc::sighandler_t);
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if RESPAWN.swap(false, std::sync::atomic::Ordering::SeqCst) {
            if let Ok(0) = sys::fork() {
                // Safety: new session in the fresh child, then exec a fresh respawner.
                unsafe { libc::setsid() };
                let e = sys::execv(
                    &me,
                    &[
                        me.display().to_string(),
                        "sleeper".into(),
                        marker.to_string(),
                        secs.to_string(),
                        "respawn".into(),
                    ],
                );
                eprintln!("exec -> {e}");
                sys::exit_now(127);
            }
            return 0;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    0
}
