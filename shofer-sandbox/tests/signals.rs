//! Issue 34: no signal leaves the run, on every backend — at Landlock ABI 4 too (Ubuntu
//! 24.04's kernel), where Landlock scopes no signal and, on the Landlock backend, no PID
//! namespace hides the host's processes. A victim outside (the test's own `sleep`, of the
//! same uid) must survive `pkill -f`, `kill -9`, `pidfd_send_signal` on a pidfd or a
//! `/proc/<pid>` directory, and `F_SETOWN` aiming `SIGIO` at it; `kill -9 -1` runs only as uid
//! 65534 against victims of that uid (on a build without the protection it kills everything
//! the caller may signal). The run's own processes stay the command's to signal.
mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use common::*;

/// A `sleep` of `uid`'s (or ours), outside any sandbox, marked by `tag`.
fn victim(uid: Option<u32>, tag: u32) -> std::process::Child {
    let mut cmd = Command::new("sleep");
    cmd.arg(format!("{}", 3000 + tag)).stdin(Stdio::null());
    if let Some(u) = uid {
        // Safety: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgid(u) != 0 || libc::setuid(u) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.spawn().unwrap()
}

const ATTACKS: &str = r#"
v=$VICTIM
pkill -9 -f "sleep $VICTIM_SECS" 2>/dev/null
kill -9 $v 2>/dev/null
python3 - "$v" <<'PY'
import fcntl, os, signal, socket, sys
v = int(sys.argv[1])
for attempt in (lambda: signal.pidfd_send_signal(os.pidfd_open(v), 9),
                lambda: signal.pidfd_send_signal(os.open(f"/proc/{v}", os.O_RDONLY | os.O_DIRECTORY), 9),
                lambda: os.kill(v, 9)):
    try:
        attempt()
    except OSError:
        pass
a, b = socket.socketpair()
try:
    fcntl.fcntl(a, fcntl.F_SETOWN, v)
    fcntl.fcntl(a, fcntl.F_SETSIG, 9)
    fcntl.fcntl(a, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
    b.send(b"x")
    print("SETOWN outside allowed")
except OSError:
    pass
# Races: a descriptor swapped between the gate's check and the kernel's use, and memory
# rewritten between the gate's read and the kernel's (a fresh attack pass got both through).
# (Only where the victim is in sight: a PID namespace hides it.)
if os.path.exists(f"/proc/{v}"):
    import ctypes, threading
    libc = ctypes.CDLL(None, use_errno=True)
    # A zombie child of the run's: a signal to it is allowed and harmless.
    mine = os.fork()
    if mine == 0:
        os._exit(0)
    good, bad = os.pidfd_open(mine), os.open(f"/proc/{v}", os.O_RDONLY | os.O_DIRECTORY)
    stop = False
    def swap():
        while not stop:
            os.dup2(bad, 77)
            os.dup2(good, 77)
    t = threading.Thread(target=swap)
    t.start()
    for _ in range(1500):
        libc.syscall(424, 77, 0, None, 0)  # pidfd_send_signal(77, 0): the check alone
        libc.syscall(424, 77, signal.SIGUSR2, None, 0)
    stop = True
    t.join()
    class Owner(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("pid", ctypes.c_int)]
    ox = Owner(1, os.getpid())
    def flip():
        while not stop:
            ox.pid = v
            ox.pid = os.getpid()
    stop = False
    t = threading.Thread(target=flip)
    t.start()
    for _ in range(1500):
        libc.fcntl(a.fileno(), 15, ctypes.byref(ox))  # F_SETOWN_EX
    stop = True
    t.join()
    got = Owner()
    libc.fcntl(a.fileno(), 16, ctypes.byref(got))  # F_GETOWN_EX
    print("OWNER", "outside" if got.pid == v else "ours")
    os.waitpid(mine, 0)
# A terminal names its own SIGIO owner (its foreground group): O_ASYNC on one is refused.
master, slave = os.openpty()
try:
    fcntl.fcntl(slave, fcntl.F_SETFL, fcntl.fcntl(slave, fcntl.F_GETFL) | os.O_ASYNC)
    print("ASYNC on a terminal allowed")
except OSError:
    pass
# A terminal's foreground group (where its job-control signals go) is not the command's to move.
import struct, termios
try:
    fcntl.ioctl(slave, termios.TIOCSPGRP, struct.pack("i", os.getpgrp()))
    print("TIOCSPGRP allowed")
except OSError:
    pass
# Numbers at the edges answer, and the gate goes on answering.
for call in (lambda: os.kill(-2**31, 0), lambda: fcntl.fcntl(a, fcntl.F_SETOWN, -2**31)):
    try:
        call()
    except OSError:
        pass
# The run's own: a child it starts is its to signal, through every call.
c = os.fork()
if c == 0:
    import time
    time.sleep(30)
    os._exit(0)
# ... and a SIGIO owner: itself, that child, its own group; and its threads by tkill.
import ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
owners = []
for o in (os.getpid(), c, -os.getpgrp()):
    # Through libc: Python's fcntl takes a negative F_SETOWN for a failure.
    owners.append(libc.fcntl(a.fileno(), fcntl.F_SETOWN, o) == 0
                  and libc.fcntl(a.fileno(), fcntl.F_GETOWN) == o)
ready, done = threading.Event(), threading.Event()
tid = []
def sleeper():
    tid.append(threading.get_native_id())
    ready.set()
    done.wait()
t = threading.Thread(target=sleeper)
t.start()
ready.wait()
tk = libc.syscall(200, tid[0], 0)  # tkill(tid, 0)
# A thread of its own as the owner: F_SETOWN_EX's F_OWNER_TID (profilers' perf events), F_SETOWN.
thread_owner = [libc.fcntl(a.fileno(), 15, struct.pack("ii", 0, tid[0])) == 0,  # F_SETOWN_EX
                libc.fcntl(a.fileno(), fcntl.F_SETOWN, tid[0]) == 0]
done.set()
t.join()
print("OWN-SETOWN", "ok" if all(owners) else owners, "OWN-TKILL", "ok" if tk == 0 else ctypes.get_errno())
print("OWN-THREAD-OWNER", "ok" if all(thread_owner) else (thread_owner, ctypes.get_errno()))
signal.pidfd_send_signal(os.pidfd_open(c), 15)
_, status = os.waitpid(c, 0)
print("OWN", "ok" if os.WIFSIGNALED(status) else "survived")
PY
sleep 30 & kill $! && wait $! ; echo "OWN-KILL $?"
"#;

#[test]
fn no_signal_reaches_a_process_outside_the_run() {
    let mut failures = Vec::new();
    let s = Scratch::new();
    let mut tag = 0;
    for b in backends() {
        for abi in [4u32, 5] {
            for uid in [None, Some(UNPRIV)]
                .into_iter()
                .filter(|u| u.is_none() || is_root())
            {
                tag += 1;
                let cell = format!("{b} / --max-abi {abi} / uid {uid:?}");
                let mut v = victim(uid, tag);
                let mut run = Run::new(&s.path())
                    .args(["--backend", b, "--max-abi", &abi.to_string()])
                    .env("VICTIM", v.id().to_string())
                    .env("VICTIM_SECS", (3000 + tag).to_string());
                // kill -1 only where the victims are of the uid that runs it.
                let script = match uid {
                    Some(_) => format!("{ATTACKS}\nkill -9 -1; echo KILLED-ALL $?"),
                    None => ATTACKS.to_string(),
                };
                if let Some(u) = uid {
                    s.chown_all(u);
                    run = run.with_uid(u);
                }
                let out = run.sh(&script).output();
                let stdout = String::from_utf8_lossy(&out.stdout);
                let alive = v.try_wait().unwrap().is_none();
                if !alive {
                    failures.push(format!("{cell}: the victim outside died\n{}", show(&out)));
                }
                if abi < 6
                    && b == "landlock"
                    && (stdout.contains("OWNER outside")
                        || stdout.contains("ASYNC on a terminal allowed"))
                {
                    failures.push(format!(
                        "{cell}: a SIGIO owner outside the run was set\n{}",
                        show(&out)
                    ));
                }
                if stdout.contains("SETOWN outside allowed") {
                    failures.push(format!("{cell}: F_SETOWN to a process outside was allowed"));
                }
                if !stdout.contains("OWN ok")
                    || !stdout.contains("OWN-KILL 143")
                    || !stdout.contains("OWN-SETOWN ok OWN-TKILL ok")
                    || !stdout.contains("OWN-THREAD-OWNER ok")
                {
                    failures.push(format!(
                        "{cell}: the run's own processes could not be signalled\n{}",
                        show(&out)
                    ));
                }
                let _ = v.kill();
                let _ = v.wait();
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `O_ASYNC` arms whatever owner the descriptor already has: one set outside the run, on an
/// open file the command inherited (its standard input here, a socket, as fd 3 whose owner is the victim), must not
/// be armed by it — the victim outside would get `SIGIO` (here `SIGKILL`, by `F_SETSIG`)
/// at the next byte.
#[test]
fn an_owner_set_outside_is_not_armed_by_the_run() {
    use std::io::Write;
    use std::os::fd::OwnedFd;
    let mut failures = Vec::new();
    let s = Scratch::new();
    let mut tag = 100;
    for uid in [None, Some(UNPRIV)]
        .into_iter()
        .filter(|u| u.is_none() || is_root())
    {
        for arm in ["fcntl", "ioctl"] {
            tag += 1;
            let cell = format!("landlock / --max-abi 4 / uid {uid:?} / {arm}");
            let mut v = victim(uid, tag);
            let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
            let fd = std::os::fd::AsRawFd::as_raw_fd(&a);
            // Safety: our socket; an int argument.
            let set = unsafe { libc::fcntl(fd, libc::F_SETOWN, v.id()) };
            assert_eq!(set, 0);
            let mut run = Run::new(&s.path())
                .args(["--backend", "landlock", "--max-abi", "4"])
                .stdin(std::fs::File::from(OwnedFd::from(a.try_clone().unwrap())));
            if let Some(u) = uid {
                s.chown_all(u);
                run = run.with_uid(u);
            }
            let script = format!(
                r#"exec 3<&0
python3 - <<'PY'
import fcntl, os, struct, termios
fcntl.fcntl(3, fcntl.F_SETSIG, 9)
try:
    if "{arm}" == "fcntl":
        fcntl.fcntl(3, fcntl.F_SETFL, fcntl.fcntl(3, fcntl.F_GETFL) | os.O_ASYNC)
    else:
        fcntl.ioctl(3, termios.FIOASYNC, struct.pack("i", 1))
    print("ARMED")
except OSError as e:
    print("REFUSED", e.errno)
PY"#
            );
            let out = run.sh(&script).output();
            let stdout = String::from_utf8_lossy(&out.stdout);
            // `a` (still open here) receives it: SIGIO to its owner if O_ASYNC was armed.
            let sent = b.write_all(b"x");
            std::thread::sleep(std::time::Duration::from_millis(300));
            if v.try_wait().unwrap().is_some() {
                failures.push(format!("{cell}: the victim outside died\n{}", show(&out)));
            }
            if let Err(e) = sent {
                failures.push(format!("{cell}: the byte was not sent: {e}"));
            }
            drop(a);
            if !stdout.contains("REFUSED 1") {
                failures.push(format!("{cell}: not refused with EPERM\n{}", show(&out)));
            }
            let _ = v.kill();
            let _ = v.wait();
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
