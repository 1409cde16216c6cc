//! Signals stay inside the run on Landlock alone below ABI 6 (which does not scope them, and
//! there is no PID namespace): a gate handler ([`crate::gate::handler`]) for every call that
//! names a process to signal or to receive `SIGIO` (issue 34; the filter's
//! [`Traps::signals`]).
//!
//! The run's processes are the supervisor's descendants (it is their child subreaper, so an
//! orphan comes back to it): a process is the run's when its chain of parents reaches the
//! supervisor. The decision is made on a pidfd the supervisor opened on the target, and the
//! signal is sent through that pidfd — never by continuing the call with a PID that could
//! name another process by then:
//! - `kill(pid)`, `rt_sigqueueinfo(pid)`, `tgkill`/`rt_tgsigqueueinfo` to another process,
//!   `tkill` of a thread outside the caller: sent through the pidfd when the target is the
//!   run's (to the process: a thread of another process is reached as its process), else
//!   `EPERM`, as for a process the caller may not signal;
//! - `kill(0)`, `kill(-pgid)`, `kill(-1)`: emulated over the run's processes of that group
//!   (every one but the caller for `-1`), each through a pidfd checked against its start
//!   time ([`shofer_sys::pidfd::signal_if_same`]); `ESRCH` when there is none;
//! - a signal to the caller itself continues (it cannot be reused while it waits); one to a
//!   thread of its own by `tkill` is sent as `tgkill(caller, tid)` (the thread could end and
//!   its ID be reused); `pidfd_send_signal` on a pidfd (or `/proc/<pid>` directory) naming
//!   one of the run's processes is performed on the supervisor's copy of that descriptor;
//! - `pidfd_open` of one of the run's processes gets the supervisor's pidfd installed
//!   (`SECCOMP_IOCTL_NOTIF_ADDFD`), any other `ESRCH`;
//! - `fcntl(F_SETOWN)`, `F_SETOWN_EX`, `FIOSETOWN`, `SIOCSPGRP` (an owner for `SIGIO`) are
//!   allowed when the owner names one of the run's processes or a group of the run's
//!   processes only, else `EPERM`; they, `F_SETFL` with `O_ASYNC` and `FIOASYNC` are performed
//!   on the supervisor's copy of the caller's descriptor (the same open file) with what was
//!   read once. The owner's processes are pinned by pidfds across the call: should the pinned
//!   process be reaped (or the group's pinned members be gone from it) by the time the owner
//!   is set, its number may have named another, and the owner is cleared (`ESRCH`); the
//!   kernel keeps the owner as a `struct pid`, so a number reused later does not inherit it.
//!   A thread's ID as the owner (`F_OWNER_TID`, or `F_SETOWN` of a thread) is checked by its
//!   process, pinned, and the ID found still its once set. `O_ASYNC` (`F_SETFL`, `FIOASYNC`)
//!   arms the owner the descriptor already has — one set outside the run on an open file it
//!   inherited may be outside — so that owner is checked and pinned as if it were being set.
//!   `O_ASYNC` is never set on a terminal, which names its foreground group as the owner
//!   itself; `TIOCSPGRP` is refused (moving the caller's job, and the supervisor, to the
//!   background stops them); `TIOCSWINSZ` (`SIGWINCH` to the foreground group) only on a
//!   terminal whose foreground group is the run's.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use shofer_sys::proc::{self, ProcDir, ProcTable};

use crate::gate::filter::{
    Traps, FIOASYNC, F_SETFL, F_SETOWN, F_SETOWN_EX, NR_FCNTL, NR_IOCTL, NR_KILL, NR_PIDFD_OPEN,
    NR_PIDFD_SEND_SIGNAL, NR_RT_SIGQUEUEINFO, NR_RT_TGSIGQUEUEINFO, NR_TGKILL, NR_TKILL, TIOCSPGRP,
    TIOCSWINSZ,
};
use crate::gate::handler::{Gatekeeper, Handler, Reply};
use crate::gate::notify::{self, Notif};

/// The handler: the supervisor's PID (the run's processes are its descendants).
pub(crate) struct SignalGate {
    supervisor: i32,
}

impl SignalGate {
    /// Made before the guardian forks the supervisor off (`crate::guardian`): the
    /// supervisor's PID is taken when the gate starts serving, in the supervisor.
    pub(crate) fn new() -> SignalGate {
        SignalGate { supervisor: 0 }
    }

    /// Whether `pid` is one of the run's processes now: its parents lead to the supervisor.
    fn is_runs(&self, pid: i32) -> bool {
        let mut p = pid;
        for _ in 0..4096 {
            if p == self.supervisor {
                return p != pid;
            }
            match proc::read(p) {
                Some(info) if info.ppid > 0 => p = info.ppid,
                _ => return false,
            }
        }
        false
    }

    /// A pidfd on `pid` when it is one of the run's processes (checked after opening it, and
    /// the process still alive after the check), else the errno to answer.
    fn runs_pidfd(&self, pid: i32, outside: i32) -> Result<OwnedFd, i32> {
        if pid <= 0 {
            return Err(libc::ESRCH);
        }
        let fd = match shofer_sys::pidfd::open(pid) {
            Ok(Some(fd)) => fd,
            Ok(None) => return Err(libc::ENOSYS),
            Err(e) => return Err(e.raw_os_error().unwrap_or(libc::ESRCH)),
        };
        if !self.is_runs(pid) {
            return Err(outside);
        }
        // Still the process the check read (a reaped one's pid may name another by now).
        send(&fd, 0, None).map_err(|_| libc::ESRCH)?;
        Ok(fd)
    }

    /// `sig` (with the caller's `siginfo` at `info`, if any) to `pid`, one of the run's.
    fn to_process(&self, n: &Notif, pid: i32, sig: i32, info: u64) -> Reply {
        let fd = match self.runs_pidfd(pid, libc::EPERM) {
            Ok(fd) => fd,
            Err(e) => return Reply::Now(Err(e)),
        };
        let info = if info == 0 {
            None
        } else {
            match notify::read_mem(n.pid, info, SIGINFO_SIZE) {
                Ok(b) => Some(b),
                Err(e) => return Reply::Now(Err(e)),
            }
        };
        Reply::Now(send(&fd, sig, info.as_deref()).map(|()| 0))
    }

    /// `kill(0)`, `kill(-pgid)`, `kill(-1)` over the run's processes.
    fn to_group(&self, caller: i32, pid: i32, sig: i32) -> Reply {
        let Ok(dir) = ProcDir::open() else {
            return Reply::Now(Err(libc::EAGAIN));
        };
        let table = ProcTable::scan();
        let runs: Vec<&proc::ProcInfo> = table
            .descendants(self.supervisor)
            .into_iter()
            .map(|i| &table.procs()[i])
            .collect();
        let group = match pid {
            0 => match proc::read(caller) {
                Some(info) => Some(info.pgid),
                None => return Reply::Now(Err(libc::ESRCH)),
            },
            -1 => None,
            p => match p.checked_neg() {
                Some(g) => Some(g),
                None => return Reply::Now(Err(libc::ESRCH)),
            },
        };
        let targets: Vec<&proc::ProcInfo> = runs
            .into_iter()
            .filter(|p| match group {
                Some(g) => p.pgid == g,
                None => p.pid != caller,
            })
            .collect();
        if targets.is_empty() {
            return Reply::Now(Err(libc::ESRCH));
        }
        let Some(signal) = (sig != 0)
            .then(|| rustix::process::Signal::from_named_raw(sig))
            .flatten()
        else {
            // Signal 0 (is anyone there?), or no signal rustix knows by name: answered.
            return Reply::Now(if sig == 0 { Ok(0) } else { Err(libc::EINVAL) });
        };
        let sent = targets
            .iter()
            .filter(|p| shofer_sys::pidfd::signal_if_same(&dir, p, signal))
            .count();
        Reply::Now(if sent > 0 { Ok(0) } else { Err(libc::ESRCH) })
    }

    /// The caller's `siginfo_t` at `addr`, read once (`None` for NULL).
    fn siginfo(&self, n: &Notif, addr: u64) -> Result<Option<Vec<u8>>, i32> {
        if addr == 0 {
            return Ok(None);
        }
        notify::read_mem(n.pid, addr, SIGINFO_SIZE).map(Some)
    }

    /// `fcntl(F_SETOWN_EX/F_SETFL)` or `ioctl(FIOSETOWN/SIOCSPGRP/FIOASYNC/TIOCSWINSZ)` of
    /// notification `n`, performed on `fd` (the caller's descriptor, ours), or refused
    /// (`TIOCSPGRP`; an owner, or a terminal's foreground group, that is not the run's;
    /// `O_ASYNC` on a terminal, which names its foreground group as the owner itself).
    fn on_copy(&self, n: &Notif, caller: i32, fd: &OwnedFd) -> Result<i64, i32> {
        let a = n.args;
        let raw = fd.as_raw_fd();
        let int_at = |addr: u64| -> Result<i32, i32> {
            let b = notify::read_mem(n.pid, addr, 4)?;
            Ok(i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        };
        let tty = rustix::termios::isatty(fd);
        // The owner the call sets, pinned while it is set (`Owner`).
        let mut owner = Owner::Unpinned;
        // Raw libc below: rustix wraps none of these commands.
        let r = match (n.nr, a[1] as u32) {
            (NR_FCNTL, F_SETOWN) => {
                owner = self.pin_owner(caller, a[2] as i32)?;
                // Safety: our descriptor; an int argument.
                unsafe { libc::fcntl(raw, libc::F_SETOWN, a[2] as libc::c_int) }
            }
            (NR_FCNTL, F_SETOWN_EX) => {
                let b = notify::read_mem(n.pid, a[2], 8)?;
                let (kind, pid) = (
                    i32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
                    i32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
                );
                // F_OWNER_PGRP is 2: a process group.
                owner = self.pin_owner(
                    caller,
                    if kind == 2 {
                        pid.checked_neg().ok_or(libc::EINVAL)?
                    } else {
                        pid
                    },
                )?;
                // struct f_owner_ex { int type; pid_t pid; } (libc names neither).
                let ox: [i32; 2] = [kind, pid];
                // Safety: our descriptor; the kernel reads the two ints of `ox`.
                unsafe { libc::fcntl(raw, F_SETOWN_EX as libc::c_int, ox.as_ptr()) }
            }
            (NR_FCNTL, F_SETFL) if tty => return Err(libc::EPERM),
            (NR_FCNTL, F_SETFL) => {
                // O_ASYNC arms the owner the descriptor already has: one set before the run,
                // or by a process outside it sharing the open file, may be outside.
                if a[2] as libc::c_int & libc::O_ASYNC != 0 {
                    owner = self.pin_owner(caller, current_owner(raw)?)?;
                }
                // Safety: our descriptor; an int argument.
                unsafe { libc::fcntl(raw, libc::F_SETFL, a[2] as libc::c_int) }
            }
            (NR_IOCTL, FIOASYNC) => {
                let on = int_at(a[2])?;
                if on != 0 && tty {
                    return Err(libc::EPERM);
                }
                if on != 0 {
                    owner = self.pin_owner(caller, current_owner(raw)?)?;
                }
                // Safety: our descriptor; the kernel reads the int `on`.
                unsafe { libc::ioctl(raw, libc::FIOASYNC, &on) }
            }
            // Which group a terminal's signals go to: moving the caller's job (and the
            // supervisor) to the background stops it at its next terminal call, and done by
            // the supervisor on its own terminal it stops the supervisor (SIGTTOU).
            (NR_IOCTL, TIOCSPGRP) => return Err(libc::EPERM),
            // SIGWINCH to the terminal's foreground group: the run's only.
            (NR_IOCTL, TIOCSWINSZ) => {
                let size = notify::read_mem(n.pid, a[2], 8)?;
                let fg = rustix::termios::tcgetpgrp(fd).map_err(|e| e.raw_os_error())?;
                if !self.owner_is_runs(-fg.as_raw_nonzero().get()) {
                    return Err(libc::EPERM);
                }
                // Safety: our descriptor; the kernel reads the 8 bytes of `size`.
                unsafe { libc::ioctl(raw, libc::TIOCSWINSZ, size.as_ptr()) }
            }
            // FIOSETOWN, SIOCSPGRP: F_SETOWN's convention, through a pointer.
            (NR_IOCTL, req) => {
                let o = int_at(a[2])?;
                owner = self.pin_owner(caller, o)?;
                // Safety: our descriptor; the kernel reads the int `o`.
                unsafe { libc::ioctl(raw, libc::c_ulong::from(req), &o) }
            }
            _ => return Err(libc::EINVAL),
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL));
        }
        if !self.still_named(&owner) {
            // The number may have named another process when it was set: no owner then.
            // Safety: our descriptor; an int argument.
            unsafe { libc::fcntl(raw, libc::F_SETOWN, 0) };
            return Err(libc::ESRCH);
        }
        Ok(i64::from(r))
    }

    /// `owner` (`F_SETOWN`'s convention: a PID, a process group as a negative number, 0 for
    /// none) pinned when it names the run's processes only, else `EPERM`. The caller and 0
    /// need no pin: the caller's ID cannot be reused while it waits.
    fn pin_owner(&self, caller: i32, owner: i32) -> Result<Owner, i32> {
        match owner {
            0 => Ok(Owner::Unpinned),
            o if o == caller => Ok(Owner::Unpinned),
            // A thread other than a process's first has no pidfd (without PIDFD_THREAD): its
            // process is pinned, and the thread's ID checked to be still its once set.
            p if p > 0 => match proc::Status::tgid(p) {
                Some(t) if t == caller && t != p => Ok(Owner::Thread(t, p, None)),
                Some(t) if t != p => self
                    .runs_pidfd(t, libc::EPERM)
                    .map(|fd| Owner::Thread(t, p, Some(fd))),
                _ => self.runs_pidfd(p, libc::EPERM).map(Owner::Process),
            },
            g => {
                let g = g.checked_neg().ok_or(libc::EPERM)?;
                let table = ProcTable::scan();
                let members: Vec<i32> = table
                    .procs()
                    .iter()
                    .filter(|p| p.pgid == g)
                    .map(|p| p.pid)
                    .collect();
                if members.is_empty() || !members.iter().all(|&p| self.is_runs(p)) {
                    return Err(libc::EPERM);
                }
                let pinned: Vec<(i32, OwnedFd)> = members
                    .into_iter()
                    .filter_map(|p| self.runs_pidfd(p, libc::EPERM).ok().map(|fd| (p, fd)))
                    .collect();
                if pinned.is_empty() {
                    return Err(libc::ESRCH);
                }
                Ok(Owner::Group(g, pinned))
            }
        }
    }

    /// Whether the owner's number still named what was checked once it was set: the pinned
    /// process not yet reaped (its PID then cannot have been reused in between), or a pinned
    /// member of the group still alive and in it.
    fn still_named(&self, owner: &Owner) -> bool {
        match owner {
            Owner::Unpinned => true,
            Owner::Process(fd) => send(fd, 0, None).is_ok(),
            Owner::Thread(tgid, tid, fd) => {
                fd.as_ref().is_none_or(|fd| send(fd, 0, None).is_ok())
                    && proc::Status::tgid(*tid) == Some(*tgid)
            }
            Owner::Group(g, members) => members.iter().any(|(pid, fd)| {
                send(fd, 0, None).is_ok()
                    && proc::read(*pid).is_some_and(|p| p.pgid == *g)
                    && send(fd, 0, None).is_ok()
            }),
        }
    }

    /// Whether `owner` (a PID, or a process group as a negative number) names the run's
    /// processes only (`F_SETOWN`'s convention; 0 clears the owner).
    fn owner_is_runs(&self, owner: i32) -> bool {
        match owner {
            0 => true,
            p if p > 0 => self.is_runs(p),
            g => {
                let Some(g) = g.checked_neg() else {
                    return false;
                };
                let table = ProcTable::scan();
                let members: Vec<&proc::ProcInfo> =
                    table.procs().iter().filter(|p| p.pgid == g).collect();
                !members.is_empty() && members.iter().all(|p| self.is_runs(p.pid))
            }
        }
    }
}

/// A descriptor's owner while it is set: pidfds on what its number named when checked.
enum Owner {
    /// None, or the caller.
    Unpinned,
    /// One of the run's processes.
    Process(OwnedFd),
    /// A thread (its process, its ID) of the caller's (no pidfd: the caller waits) or of
    /// another of the run's processes (pinned).
    Thread(i32, i32, Option<OwnedFd>),
    /// A group of the run's processes, and its members.
    Group(i32, Vec<(i32, OwnedFd)>),
}

/// The owner `fd` has now, in `F_SETOWN`'s convention (a group as a negative number; a
/// thread's ID as it is), from `F_GETOWN_EX` (whose answer `F_GETOWN` cannot give for a
/// group on some architectures).
fn current_owner(fd: libc::c_int) -> Result<i32, i32> {
    // struct f_owner_ex { int type; pid_t pid; }; F_GETOWN_EX is 16.
    let mut ox: [i32; 2] = [0, 0];
    // Safety: our descriptor; the kernel writes the two ints of `ox`.
    if unsafe { libc::fcntl(fd, 16, ox.as_mut_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL));
    }
    // F_OWNER_PGRP is 2.
    Ok(if ox[0] == 2 {
        ox[1].checked_neg().ok_or(libc::EPERM)?
    } else {
        ox[1]
    })
}

/// `tgkill(tgid, tid, sig)`. Raw: rustix has no `tgkill`.
fn tgkill(tgid: i32, tid: i32, sig: i32) -> Result<(), i32> {
    // Safety: three integers.
    zero_or_errno(unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, sig) })
}

/// A raw call's answer: `Ok` for 0, else its errno.
fn zero_or_errno(r: libc::c_long) -> Result<(), i32> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EPERM))
    }
}

/// The size of `siginfo_t`.
const SIGINFO_SIZE: usize = 128;

/// `pidfd_send_signal(fd, sig, info, 0)`. Raw: rustix's takes no `siginfo`, and signal 0
/// (the liveness check) is no `Signal` of its.
fn send(fd: &OwnedFd, sig: i32, info: Option<&[u8]>) -> Result<(), i32> {
    send_flags(fd, sig, info, 0)
}

/// `pidfd_send_signal(fd, sig, info, flags)` (see [`send`]).
fn send_flags(fd: &OwnedFd, sig: i32, info: Option<&[u8]>, flags: u32) -> Result<(), i32> {
    let info = info.map_or(std::ptr::null(), <[u8]>::as_ptr);
    // Safety: a pidfd we own, and either NULL or a buffer of SIGINFO_SIZE bytes the kernel
    // only reads.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_fd().as_raw_fd(),
            sig,
            info,
            flags,
        )
    };
    zero_or_errno(r)
}

/// The PID a pidfd (or a `/proc/<pid>` directory descriptor) names: its fdinfo's `Pid:`, or
/// the directory's name.
fn pid_of_fd(fd: &OwnedFd) -> Option<i32> {
    let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    if let Some(pid) = fdinfo.lines().find_map(|l| l.strip_prefix("Pid:")) {
        return pid.trim().parse().ok();
    }
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    link.strip_prefix("/proc").ok()?.to_str()?.parse().ok()
}

impl Handler for SignalGate {
    fn traps(&self) -> Traps {
        Traps {
            signals: true,
            ..Traps::NONE
        }
    }

    fn started(&mut self, _installer: &crate::gate::handler::Installer) {
        self.supervisor = std::process::id() as i32;
    }

    fn handle(&mut self, gate: &mut dyn Gatekeeper, n: &Notif) -> Reply {
        if self.supervisor <= 1 {
            return Reply::Now(Err(libc::EPERM));
        }
        let Some(caller) = proc::Status::tgid(n.pid) else {
            return Reply::Now(Err(libc::ESRCH));
        };
        let a = n.args;
        let int = |i: usize| a[i] as i32;
        let reply = match n.nr {
            NR_KILL if int(0) == caller => Reply::Continue,
            NR_KILL if int(0) > 0 => self.to_process(n, int(0), int(1), 0),
            NR_KILL => self.to_group(caller, int(0), int(1)),
            // A thread of the caller's own — sent as `tgkill(caller, tid)`, which reaches no
            // thread outside the caller, whose ID cannot be reused while it waits (a tid it
            // checked could be, once that thread ended) — or else a process.
            NR_TKILL if proc::Status::tgid(int(0)) == Some(caller) => {
                // The caller still waits (so its ID names it) right before the send.
                if gate.still_valid(n) {
                    Reply::Now(tgkill(caller, int(0), int(1)).map(|()| 0))
                } else {
                    Reply::Later
                }
            }
            NR_TKILL => self.to_process(n, int(0), int(1), 0),
            NR_TGKILL if int(0) == caller => Reply::Continue,
            NR_TGKILL => self.to_process(n, int(0), int(2), 0),
            NR_RT_SIGQUEUEINFO if int(0) == caller => Reply::Continue,
            NR_RT_SIGQUEUEINFO => self.to_process(n, int(0), int(1), a[2]),
            NR_RT_TGSIGQUEUEINFO if int(0) == caller => Reply::Continue,
            NR_RT_TGSIGQUEUEINFO => self.to_process(n, int(0), int(2), a[3]),
            // Performed on the supervisor's copy of the caller's descriptor — the object
            // checked — never continued: the caller's table could name another by then.
            NR_PIDFD_SEND_SIGNAL => match gate.caller_fd(n.pid, a[0]) {
                Ok(fd) => match pid_of_fd(&fd) {
                    Some(pid) if pid == caller || self.is_runs(pid) => {
                        match self.siginfo(n, a[2]) {
                            Ok(info) => Reply::Now(
                                send_flags(&fd, int(1), info.as_deref(), a[3] as u32).map(|()| 0),
                            ),
                            Err(e) => Reply::Now(Err(e)),
                        }
                    }
                    Some(_) => Reply::Now(Err(libc::EPERM)),
                    // Not a process's descriptor.
                    None => Reply::Now(Err(libc::EBADF)),
                },
                Err(e) => Reply::Now(Err(e)),
            },
            NR_PIDFD_OPEN => match self.runs_pidfd(int(0), libc::ESRCH) {
                Ok(fd) if int(0) == caller || gate.installer().available() => {
                    let cloexec = true; // pidfd_open(2): always close-on-exec
                    match gate.installer().install(n.id, fd.as_raw_fd(), cloexec) {
                        Ok(_) => Reply::Later,
                        Err(e) => Reply::Now(Err(e)),
                    }
                }
                Ok(_) => Reply::Now(Err(libc::ENOSYS)),
                Err(e) => Reply::Now(Err(e)),
            },
            // Each names memory or a descriptor the kernel would read again, or an owner that
            // could name another process by the time the call went on: performed on the
            // supervisor's copy of the caller's descriptor (the same open file), with what was
            // read once.
            NR_FCNTL | NR_IOCTL => match gate.caller_fd(n.pid, a[0]) {
                Ok(fd) => Reply::Now(self.on_copy(n, caller, &fd)),
                Err(e) => Reply::Now(Err(e)),
            },
            _ => Reply::Continue,
        };
        // What /proc said was about the caller only while its call waits.
        match reply {
            Reply::Continue if !gate.still_valid(n) => Reply::Later,
            r => r,
        }
    }
}
