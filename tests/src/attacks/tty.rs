//! Inside the sandbox — terminals: TIOCSTI and TIOCLINUX injection through every entry point,
//! terminal programs that must keep working, /dev/uinput.

use super::{arg, contain, write_via, Seen};
use crate::sys::{self, Errno};
use std::os::fd::AsRawFd;
use std::path::Path;

/// `tiocsti`: field 4: TIOCSTI into the controlling pty (stdin and /dev/tty).
pub(crate) fn tiocsti(_: &[String]) -> Seen {
    tiocsti_on_stdin_and_tty(false)
}

/// `tiocsti-high-bits`: TIOCSTI with bits set above 32 in the request word (filter bypass).
pub(crate) fn tiocsti_high_bits(_: &[String]) -> Seen {
    tiocsti_on_stdin_and_tty(true)
}

/// `tioclinux`: TIOCLINUX(PASTESEL) on the controlling pty must be refused by the filter.
pub(crate) fn tioclinux(_: &[String]) -> Seen {
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

/// `tiocsti-foreign-pty`: non-interactive run: open a pty that is nobody's terminal, make it ours,
/// TIOCSTI.
pub(crate) fn tiocsti_foreign_pty(a: &[String]) -> Seen {
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

/// `tiocsti-x32`: TIOCSTI through the x32 system call number.
pub(crate) fn tiocsti_x32(_: &[String]) -> Seen {
    let b = b'#';
    // Safety: an x32 system call number; the kernel answers ENOSYS if x32 is off.
    let r =
        sys::check(unsafe { libc::syscall(0x4000_0000 | 514, 0, libc::TIOCSTI, &b as *const u8) });
    match r {
        Err(e) if e.0 == libc::ENOSYS => {
            Seen::Blocked("x32 ioctl -> ENOSYS (no x32 ABI in this kernel)".into())
        }
        r => contain("x32 ioctl(0, TIOCSTI)", r),
    }
}

/// `dev-uinput`: as root: open /dev/uinput (a fake keyboard) for writing.
pub(crate) fn dev_uinput(_: &[String]) -> Seen {
    match sys::open("/dev/uinput", libc::O_WRONLY, 0) {
        Err(e) if e.0 == libc::ENOENT => Seen::Skip("no /dev/uinput".into()),
        r => contain("open(/dev/uinput, O_WRONLY) (fake keyboard)", r),
    }
}

/// `tiocsti-ia32`: TIOCSTI through the i386 entry point (int 0x80).
pub(crate) fn tiocsti_ia32(_: &[String]) -> Seen {
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

/// `terminal-programs`: field 3: /dev/tty winsize+termios, /dev/stdout, /dev/stderr, openpty under
/// a pty.
pub(crate) fn terminal_programs(_: &[String]) -> Seen {
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

fn tiocsti_on_stdin_and_tty(high_bits: bool) -> Seen {
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
