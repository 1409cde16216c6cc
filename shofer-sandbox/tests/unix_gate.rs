//! The unix-socket contract (issue 10), end to end with real host servers: a sandboxed
//! command reaches a pathname unix socket only if a process of its run created it or it lies
//! beneath the worktree or an `--allow-unix` path. Every backend the helpers find usable, as
//! root and as an unprivileged uid.
//!
//! The host servers are real and would act if reached: an "exec" service (stream and
//! datagram) that runs what it receives through `sh`, a tmux server, a `dbus-daemon
//! --session`. Each records any contact in a file: a test fails on contact, not only on a
//! successful command.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The system Python: the one on `$PATH` may live under /root, out of reach of uid 65534.
const PY: &str = "/usr/bin/python3";

/// `CI=true` turns a missing prerequisite into a failure.
fn require(tool: &str) -> bool {
    if Path::new(tool).exists() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{tool} is missing (CI installs it: scripts/ci)"
    );
    eprintln!("SKIP: {tool} is not installed");
    false
}

/// Who the sandbox runs as: root, then (as root) the unprivileged uid.
fn users() -> Vec<Option<u32>> {
    if is_root() {
        vec![None, Some(UNPRIV)]
    } else {
        vec![None]
    }
}

/// Whether the running kernel is older than `major.minor`.
fn kernel_before(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (v.next().unwrap_or(0), v.next().unwrap_or(0)) < (major, minor)
}

/// A scratch tree whose directories others may traverse (the host sockets must be reachable
/// by the unprivileged uid as far as file permissions go: only the gate may stop it), with a
/// worktree owned by the user the sandbox runs as.
struct Tree {
    scratch: Scratch,
    wt: PathBuf,
    host: PathBuf,
}

impl Tree {
    fn new(uid: Option<u32>) -> Tree {
        let scratch = Scratch::new();
        let root = scratch.path();
        let wt = root.join("wt");
        let host = root.join("host");
        std::fs::create_dir(&wt).unwrap();
        std::fs::create_dir(&host).unwrap();
        if let Some(uid) = uid {
            scratch.chown_all(uid);
        }
        for d in [&root, &host] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        Tree { scratch, wt, host }
    }

    fn run(&self, backend: &str, uid: Option<u32>) -> Run {
        let r = Run::new(&self.wt).backend(backend);
        match uid {
            Some(u) => r.with_uid(u),
            None => r,
        }
    }
}

/// The host service every attack aims at: binds `path`, records each contact in
/// `path.contact`, and runs whatever it receives with `sh` (as a careless daemon would).
const SERVICE: &str = r#"
import ctypes, os, socket, struct, subprocess, sys
kind, path = sys.argv[1], sys.argv[2]
if os.path.lexists(path):
    os.unlink(path)
t = socket.SOCK_STREAM if kind == "stream" else socket.SOCK_DGRAM
s = socket.socket(socket.AF_UNIX, t)
# A 108-byte path has no room for a NUL: Python refuses it, the kernel does not.
addr = struct.pack("H", socket.AF_UNIX) + path.encode()
assert ctypes.CDLL(None).bind(s.fileno(), addr, len(addr)) == 0
os.chmod(path, 0o777)
if kind == "stream":
    s.listen(64)
open(path + ".ready", "w").close()
while True:
    if kind == "stream":
        c, _ = s.accept()
        c.settimeout(1)
        try:
            data = c.recv(4096)
        except OSError:
            data = b""
        c.close()
    else:
        data = s.recv(4096)
    with open(path + ".contact", "a") as f:
        f.write("contact\n")
    if data:
        subprocess.run(["sh", "-c", data.decode(errors="replace")])
"#;

/// A host process, killed (by its PID) and reaped on drop.
struct Host {
    child: Child,
    contact: PathBuf,
}

impl Host {
    fn service(kind: &str, path: &Path) -> Host {
        let child = Command::new(PY)
            .args(["-c", SERVICE, kind])
            .arg(path)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        wait_for(&PathBuf::from(format!("{}.ready", path.display())));
        Host {
            child,
            contact: PathBuf::from(format!("{}.contact", path.display())),
        }
    }

    fn contacts(&self) -> usize {
        std::fs::read_to_string(&self.contact)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(p: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every way in from inside, against `target` (a socket of `kind`). Prints one line per
/// attempt: `name ERR errno` or `name SENT`.
const ATTACKS: &str = r#"
import os, socket, sys
target, kind, wt = sys.argv[1], sys.argv[2], sys.argv[3]
t = socket.SOCK_STREAM if kind == "stream" else socket.SOCK_DGRAM
payload = b"touch " + target.encode() + b".pwned\n"
def attempt(name, f):
    try:
        f()
        print(name, "SENT", flush=True)
    except OSError as e:
        print(name, "ERR", e.errno, flush=True)
def conn(path):
    s = socket.socket(socket.AF_UNIX, t)
    s.connect(path)
    s.send(payload)
def sendto(path):
    s = socket.socket(socket.AF_UNIX, t)
    s.sendto(payload, path)
def sendmsg(path):
    s = socket.socket(socket.AF_UNIX, t)
    s.sendmsg([payload], [], 0, path)
attempt("connect", lambda: conn(target))
attempt("sendto", lambda: sendto(target))
attempt("sendmsg", lambda: sendmsg(target))
os.chdir(os.path.dirname(target))
attempt("relative", lambda: conn(os.path.basename(target)))
attempt("dotdot", lambda: conn("../" + os.path.basename(os.path.dirname(target)) + "/" + os.path.basename(target)))
os.chdir(wt)
link = os.path.join(wt, "link.sock")
if os.path.lexists(link):
    os.unlink(link)
os.symlink(target, link)
attempt("symlink-in-worktree", lambda: conn(link))
attempt("symlink-relative", lambda: conn("link.sock"))
hard = "/tmp/shofer-ug-hard-%d" % os.getpid()
try:
    os.link(target, hard)
    attempt("hardlink-into-tmp", lambda: conn(hard))
    os.unlink(hard)
except OSError as e:
    print("hardlink-into-tmp LINKERR", e.errno, flush=True)
"#;

fn assert_refused(out: &std::process::Output, what: &str) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("SENT"), "{what}: {}", show(out));
    assert!(text.contains("connect ERR 13"), "{what}: {}", show(out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused: a host socket (allow with --allow-unix)"),
        "{what}: {}",
        show(out)
    );
}

#[test]
fn host_exec_services_cannot_be_reached_by_any_route() {
    for uid in users() {
        for b in backends() {
            let tree = Tree::new(uid);
            for kind in ["stream", "dgram"] {
                let sock = tree.host.join(format!("{kind}.sock"));
                let host = Host::service(kind, &sock);
                let out = tree
                    .run(b, uid)
                    .args([PY, "-c", ATTACKS])
                    .arg(&sock)
                    .arg(kind)
                    .arg(&tree.wt)
                    .output();
                let what = format!("{b} uid {uid:?} {kind}");
                assert_refused(&out, &what);
                let text = String::from_utf8_lossy(&out.stdout);
                for line in text.lines() {
                    // Every route fails with EACCES (a stream sendto with an address fails
                    // earlier in the kernel; the hard link may be refused by the write policy).
                    assert!(
                        line.contains("ERR 13")
                            || line.contains("LINKERR")
                            || (kind == "stream" && line.starts_with("send")),
                        "{what}: {line}\n{}",
                        show(&out)
                    );
                }
                assert_eq!(host.contacts(), 0, "{what}: the host service was reached");
                assert!(!PathBuf::from(format!("{}.pwned", sock.display())).exists());
            }
            drop(tree.scratch);
        }
    }
}

#[test]
fn a_socket_under_tmp_that_the_run_did_not_create_is_refused() {
    // /tmp is writable but not granted: a host socket there (like tmux's) stays out of reach.
    for uid in users() {
        for b in backends() {
            let tree = Tree::new(uid);
            let dir = tempfile::Builder::new()
                .prefix("shofer-ug-host-")
                .tempdir_in("/tmp")
                .unwrap();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
            let sock = dir.path().join("s");
            let host = Host::service("stream", &sock);
            let out = tree
                .run(b, uid)
                .args([PY, "-c", ATTACKS])
                .arg(&sock)
                .arg("stream")
                .arg(&tree.wt)
                .output();
            assert_refused(&out, &format!("{b} {uid:?}"));
            assert_eq!(host.contacts(), 0, "{b} {uid:?}: reached");
        }
    }
}

/// The command's own sockets, everywhere it may create them, keep working.
const OWN: &str = r#"
import array, os, socket, sys, tempfile, threading
wt = sys.argv[1]
res = {}
made = []
def mkdtemp(**kw):
    made.append(tempfile.mkdtemp(prefix="shofer-ug-", **kw))
    return made[-1]
def stream(path):
    if path[0] != "\0" and os.path.lexists(path):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(5)
    def serve():
        c, _ = s.accept()
        c.sendall(b"own")
        c.close()
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    got = c.recv(3)
    th.join()
    return got
def stream_raw(path):
    # Exactly 108 bytes, no NUL: through libc, as Python refuses such paths.
    import ctypes, struct
    libc = ctypes.CDLL(None, use_errno=True)
    a = struct.pack("H", socket.AF_UNIX) + path.encode()
    s = socket.socket(socket.AF_UNIX)
    assert libc.bind(s.fileno(), a, len(a)) == 0, ctypes.get_errno()
    s.listen(5)
    c = socket.socket(socket.AF_UNIX)
    if libc.connect(c.fileno(), a, len(a)) != 0:
        return b"errno %d" % ctypes.get_errno()
    return s.accept()[0] and b"own"
tmp = mkdtemp(dir="/tmp")
res["tmp"] = stream(tmp + "/s")
res["tmpdir"] = stream(mkdtemp() + "/s")
res["worktree"] = stream(wt + "/own.sock")
res["abstract"] = stream("\0shofer-ug-own-%d" % os.getpid())
os.chdir(tmp)
res["relative"] = stream("rel.sock")
long107 = tmp + "/" + "a" * (107 - len(tmp) - 1)
assert len(long107) == 107
res["107"] = stream(long107)
long108 = tmp + "/" + "b" * (108 - len(tmp) - 1)
assert len(long108) == 108
res["108"] = stream_raw(long108)
r = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
r.bind(tmp + "/dg")
w = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
w.sendto(b"dgram", tmp + "/dg")
res["dgram"] = r.recv(10)
fd = os.open("/etc/hostname", os.O_RDONLY)
w.sendmsg([b"rights"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))], 0, tmp + "/dg")
msg, anc, _, _ = r.recvmsg(10, socket.CMSG_SPACE(4))
got = array.array("i")
got.frombytes(anc[0][2])
res["scm_rights"] = msg if os.fstat(got[0]).st_ino == os.fstat(fd).st_ino else b"wrong fd"
a, b = socket.socketpair()
a.sendmsg([b"pair"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
res["socketpair"] = b.recvmsg(4, 64)[0]
w.connect(tmp + "/dg")
w.send(b"connected")
res["connected-send"] = r.recv(20)
# From a thread other than the main one (seccomp names the thread, not the process).
out = {}
def from_thread():
    out["v"] = stream(mkdtemp(dir="/tmp") + "/t")
th = threading.Thread(target=from_thread)
th.start()
th.join()
res["thread"] = out["v"]
print(sorted((k, v.decode()) for k, v in res.items()))
import shutil
for d in made:
    shutil.rmtree(d, ignore_errors=True)
"#;

/// With `--net deny` too: the command's sockets then live in a network namespace of their
/// own, which on bwrap the supervisor did not create (a sock_diag socket is fetched from
/// inside it; before, every own socket outside the worktree was refused there).
#[test]
fn the_commands_own_sockets_keep_working() {
    let nets: [&[&str]; 2] = [&[], &["--net", "deny"]];
    for uid in users() {
        for (b, net) in backends().into_iter().flat_map(|b| nets.map(|n| (b, n))) {
            let tree = Tree::new(uid);
            let out = tree
                .run(b, uid)
                .args(net)
                .args([PY, "-c", OWN])
                .arg(&tree.wt)
                .output();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{b} {net:?} {uid:?}: {}",
                show(&out)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            for key in [
                "('tmp', 'own')",
                "('tmpdir', 'own')",
                "('worktree', 'own')",
                "('abstract', 'own')",
                "('relative', 'own')",
                "('107', 'own')",
                "('108', 'own')",
                "('dgram', 'dgram')",
                "('scm_rights', 'rights')",
                "('socketpair', 'pair')",
                "('connected-send', 'connected')",
                "('thread', 'own')",
            ] {
                assert!(text.contains(key), "{b} {uid:?}: {key} in {}", show(&out));
            }
            assert!(
                !String::from_utf8_lossy(&out.stderr).contains("refused"),
                "{}",
                show(&out)
            );
        }
    }
}

/// `connect()` through libc with the exact address length (no NUL for 108 bytes).
const RAW_CONNECT: &str = r#"
import ctypes, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
a = struct.pack("H", socket.AF_UNIX) + sys.argv[1].encode()
s = socket.socket(socket.AF_UNIX)
print("connect", libc.connect(s.fileno(), a, len(a)), ctypes.get_errno())
"#;

#[test]
fn host_sockets_of_107_and_108_bytes_are_refused() {
    for b in backends() {
        let tree = Tree::new(None);
        for len in [107usize, 108] {
            let base = tree.host.display().to_string();
            let sock = PathBuf::from(format!("{base}/{}", "h".repeat(len - base.len() - 1)));
            assert_eq!(sock.as_os_str().len(), len);
            let host = Host::service("stream", &sock);
            let out = tree
                .run(b, None)
                .args([PY, "-c", RAW_CONNECT])
                .arg(&sock)
                .output();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "connect -1 13",
                "{b} {len}: {}",
                show(&out)
            );
            assert_eq!(host.contacts(), 0, "{b} {len}");
        }
    }
}

/// Connects thousands of times to one name while another thread swaps what the name is: the
/// command's own socket, or a symlink to the host's, by rename (atomic) in a tight loop.
const RACE: &str = r#"
import os, socket, sys, threading
host, n = sys.argv[1], int(sys.argv[2])
import tempfile
d = tempfile.mkdtemp(prefix="shofer-ug-race-", dir="/tmp")
own = d + "/own"
s = socket.socket(socket.AF_UNIX)
s.bind(own)
s.listen(4096)
def accept():
    while True:
        c, _ = s.accept()
        c.close()
threading.Thread(target=accept, daemon=True).start()
os.symlink(host, d + "/evil")
os.link(own, d + "/own2")
stop = False
def swap():
    while not stop:
        os.rename(d + "/own2", d + "/t") if not os.path.lexists(d + "/t") else None
        try:
            os.rename(d + "/evil", d + "/t2")
            os.rename(d + "/t2", d + "/t")
            os.symlink(host, d + "/evil")
        except OSError:
            pass
        try:
            os.link(own, d + "/own2")
        except OSError:
            pass
        try:
            os.rename(d + "/own2", d + "/t")
        except OSError:
            pass
th = threading.Thread(target=swap)
th.start()
ok = refused = other = 0
for i in range(n):
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(d + "/t")
        ok += 1
    except PermissionError:
        refused += 1
    except OSError:
        other += 1
    c.close()
stop = True
th.join()
print("ok", ok, "refused", refused, "other", other)
import shutil
shutil.rmtree(d, ignore_errors=True)
"#;

#[test]
fn a_swap_race_between_an_own_and_a_host_socket_never_reaches_the_host() {
    for b in backends() {
        let tree = Tree::new(None);
        let sock = tree.host.join("race.sock");
        let host = Host::service("stream", &sock);
        let out = tree
            .run(b, None)
            .args([PY, "-c", RACE])
            .arg(&sock)
            .arg("3000")
            .output();
        assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        let nums: Vec<usize> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(nums.len(), 3, "{b}: {}", show(&out));
        // Both sides of the race were hit, and the host never was.
        assert!(nums[0] > 0 && nums[1] > 0, "{b}: {text}");
        assert_eq!(host.contacts(), 0, "{b}: the host was reached ({text})");
    }
}

#[test]
fn allow_unix_opens_exactly_the_given_socket_or_directory() {
    for uid in users() {
        for b in backends() {
            let tree = Tree::new(uid);
            let sock = tree.host.join("agent.sock");
            let host = Host::service("stream", &sock);
            let connect = format!(
                "import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); s.send(b'true'); print('reached')",
                sock.display()
            );
            for allow in [sock.clone(), tree.host.clone()] {
                let before = host.contacts();
                let out = tree
                    .run(b, uid)
                    .arg("--allow-unix")
                    .arg(&allow)
                    .args([PY, "-c", &connect])
                    .output();
                assert_eq!(out.status.code(), Some(0), "{b} {uid:?}: {}", show(&out));
                let deadline = Instant::now() + Duration::from_secs(5);
                while host.contacts() == before && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                assert_eq!(
                    host.contacts(),
                    before + 1,
                    "{b} {uid:?} {}",
                    allow.display()
                );
            }
            let out = tree
                .run(b, uid)
                .arg("--allow-unix")
                .arg(tree.scratch.path().join("missing"))
                .arg("true")
                .output();
            assert_eq!(out.status.code(), Some(125), "{}", show(&out));
            assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-unix"));
        }
    }
}

#[test]
fn a_host_tmux_server_cannot_be_driven_but_one_started_inside_works() {
    if !require("/usr/bin/tmux") {
        return;
    }
    for b in backends() {
        let tree = Tree::new(None);
        let tmp = tempfile::Builder::new()
            .prefix("shofer-ug-tmux-")
            .tempdir_in("/tmp")
            .unwrap();
        for sock in [tmp.path().join("default"), tree.host.join("tmux")] {
            let marker = tree.host.join("tmux-pwned");
            let status = Command::new("tmux")
                .arg("-S")
                .arg(&sock)
                .args(["new-session", "-d", "-s", "shofer-ug", "sh"])
                .env_remove("TMUX")
                .status()
                .unwrap();
            assert!(status.success());
            let out = tree
                .run(b, None)
                .sh(&format!(
                    "tmux -S '{}' send-keys -t shofer-ug 'touch {}' Enter",
                    sock.display(),
                    marker.display()
                ))
                .output();
            std::thread::sleep(Duration::from_millis(300));
            let _ = Command::new("tmux")
                .arg("-S")
                .arg(&sock)
                .arg("kill-server")
                .status();
            assert_ne!(out.status.code(), Some(0), "{b}: {}", show(&out));
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("refused: a host socket"),
                "{b}: {}",
                show(&out)
            );
            assert!(!marker.exists(), "{b}: the host's tmux ran the command");
        }
        let out = tree
            .run(b, None)
            .sh("d=$(mktemp -d) && trap 'rm -rf $d' EXIT && tmux -S $d/s new-session -d -s in 'sleep 30' && tmux -S $d/s list-sessions && tmux -S $d/s kill-server")
            .output();
        assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("in:"),
            "{b}: {}",
            show(&out)
        );
    }
}

/// A gated call the gate has performed must not be performed again by the command: a signal
/// that arrives while the gate completes a blocking `sendmsg` (the receiver is slow) would,
/// without `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (Linux 5.19), interrupt the call, and the
/// restarted call sends the bytes a second time — a corrupted stream (a tmux server started
/// inside the sandbox died of it under load: "server exited unexpectedly").
#[test]
fn a_signal_during_a_gated_send_does_not_repeat_it() {
    const SCRIPT: &str = r#"
import signal, socket, threading, time
N = 1 << 20
a, b = socket.socketpair()
got = []
def read():
    time.sleep(0.5)
    n = 0
    while True:
        d = b.recv(1 << 16)
        if not d:
            break
        n += len(d)
    got.append(n)
signal.signal(signal.SIGUSR1, lambda *_: None)
main = threading.get_ident()
def poke():
    for _ in range(5):
        time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGUSR1)
r = threading.Thread(target=read)
r.start()
threading.Thread(target=poke).start()
sent = a.sendmsg([b"x" * N])
a.close()
r.join()
print("sent", sent, "received", got[0])
"#;
    for b in backends() {
        let tree = Tree::new(None);
        std::fs::write(tree.wt.join("send.py"), SCRIPT).unwrap();
        let out = tree.run(b, None).args([PY, "send.py"]).output();
        assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
        if kernel_before(5, 19) {
            // The repeat cannot be prevented there: it must be said.
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("performs it again"),
                "{b}: {}",
                show(&out)
            );
            continue;
        }
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "sent 1048576 received 1048576",
            "{b}: {}",
            show(&out)
        );
    }
}

#[test]
fn a_host_dbus_session_bus_is_unreachable() {
    if !require("/usr/bin/dbus-daemon") {
        return;
    }
    for b in backends() {
        let tree = Tree::new(None);
        let bus = tree.host.join("bus");
        let mut daemon = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--nopidfile"])
            .arg(format!("--address=unix:path={}", bus.display()))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        wait_for(&bus);
        let address = format!("unix:path={}", bus.display());
        let call = format!(
            "dbus-send --bus={address} --print-reply --dest=org.freedesktop.DBus / org.freedesktop.DBus.ListNames"
        );
        // The call works from the host (the bus is real), and fails from inside.
        let host = Command::new("sh").args(["-c", &call]).output().unwrap();
        let inside = tree.run(b, None).sh(&call).output();
        let _ = daemon.kill();
        let _ = daemon.wait();
        assert!(host.status.success(), "{}", show(&host));
        assert_ne!(inside.status.code(), Some(0), "{b}: {}", show(&inside));
        assert!(
            String::from_utf8_lossy(&inside.stderr).contains("refused: a host socket"),
            "{b}: {}",
            show(&inside)
        );
    }
}

#[test]
fn http_over_a_unix_socket_inside_the_sandbox_works() {
    let client = if Path::new("/usr/bin/curl").exists() {
        "curl -s --unix-socket \"$d/http.sock\" http://sandbox/ping.txt"
    } else {
        "/usr/bin/python3 -c \"import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.send(b'GET /ping.txt HTTP/1.0\\r\\n\\r\\n'); print(s.recv(4096).decode().split('\\r\\n\\r\\n')[1])\" \"$d/http.sock\""
    };
    let server = "import http.server, socketserver, sys\nclass H(http.server.SimpleHTTPRequestHandler):\n    def address_string(self): return 'unix'\nsocketserver.UnixStreamServer(sys.argv[1], H).serve_forever()";
    for b in backends() {
        let tree = Tree::new(None);
        std::fs::write(tree.wt.join("ping.txt"), "pong\n").unwrap();
        let script = format!(
            "d=$(mktemp -d); /usr/bin/python3 -c \"$SERVER\" \"$d/http.sock\" 2>/dev/null & \
             for i in $(seq 100); do [ -S \"$d/http.sock\" ] && break; sleep 0.05; done; {client}; kill $!; rm -rf \"$d\""
        );
        let out = tree.run(b, None).sh(&script).command();
        let mut cmd = out;
        cmd.env("SERVER", server);
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("pong"),
            "{b}: {}",
            show(&out)
        );
    }
}

#[test]
fn io_uring_is_refused_with_enosys() {
    let script = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nparams = ctypes.create_string_buffer(120)\nr = libc.syscall(425, 4, params)\nprint(r, ctypes.get_errno())";
    for b in backends() {
        let tree = Tree::new(None);
        let out = tree.run(b, None).args([PY, "-c", script]).output();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("-1 {}", libc::ENOSYS),
            "{b}: {}",
            show(&out)
        );
    }
}

#[test]
fn a_program_installing_its_own_seccomp_filter_keeps_working_and_stays_gated() {
    // Its own filter (allow everything) stacks on ours: the gate still answers.
    let script = r#"
import ctypes, os, socket, struct, sys, tempfile
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
insn = struct.pack("<HBBI", 0x06, 0, 0, 0x7FFF0000)  # BPF_RET|BPF_K, SECCOMP_RET_ALLOW
buf = ctypes.create_string_buffer(insn)
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
prog = Prog(1, ctypes.addressof(buf))
assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0, ctypes.get_errno()  # PR_SET_SECCOMP
d = tempfile.mkdtemp(prefix="shofer-ug-", dir="/tmp")
s = socket.socket(socket.AF_UNIX); s.bind(d + "/s"); s.listen(1)
c = socket.socket(socket.AF_UNIX); c.connect(d + "/s"); print("own ok")
try:
    socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print("host REACHED")
except PermissionError:
    print("host refused")
import shutil
shutil.rmtree(d, ignore_errors=True)
"#;
    for b in backends() {
        let tree = Tree::new(None);
        let sock = tree.host.join("s");
        let host = Host::service("stream", &sock);
        let out = tree
            .run(b, None)
            .args([PY, "-c", script])
            .arg(&sock)
            .output();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("own ok") && text.contains("host refused"),
            "{b}: {}",
            show(&out)
        );
        assert_eq!(host.contacts(), 0);
    }
}

#[test]
fn a_sandbox_inside_the_sandbox_says_the_outer_gate_applies_and_runs_when_allowed_degraded() {
    for b in backends() {
        let tree = Tree::new(None);
        let sock = tree.host.join("s");
        let host = Host::service("stream", &sock);
        let inner_wt = tree.wt.join("inner");
        std::fs::create_dir(&inner_wt).unwrap();
        let connect = format!(
            "/usr/bin/python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('{}')\"",
            sock.display()
        );
        // Without --allow-degraded the inner one refuses, saying why.
        let out = tree
            .run(b, None)
            .args([SANDBOX, "--backend", "landlock"])
            .arg(&inner_wt)
            .args(["-c", &connect])
            .output();
        assert_eq!(out.status.code(), Some(125), "{b}: {}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("pathname unix socket"), "{b}: {err}");
        // With it, the inner sandbox runs; the outer gate still refuses the host socket.
        let out = tree
            .run(b, None)
            .args([SANDBOX, "--allow-degraded", "--backend", "landlock"])
            .arg(&inner_wt)
            .args(["-c", &format!("{connect} || echo refused-inside")])
            .output();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("the outer gate still applies"),
            "{b}: {}",
            show(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("refused-inside"),
            "{b}: {}",
            show(&out)
        );
        assert!(
            err.contains("refused: a host socket"),
            "{b}: {}",
            show(&out)
        );
        assert_eq!(host.contacts(), 0, "{b}");
    }
}

#[test]
fn the_report_names_the_gate_and_lists_refused_paths_at_exit() {
    for b in backends() {
        let tree = Tree::new(None);
        let sock = tree.host.join("s");
        let _host = Host::service("stream", &sock);
        let report = tree.scratch.path().join("report.json");
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "exec '{SANDBOX}' --report 3 --backend {b} '{}' /usr/bin/python3 -c \"import socket\nfor i in range(3):\n  try: socket.socket(socket.AF_UNIX).connect('{}')\n  except OSError: pass\" 3>'{}'",
                tree.wt.display(),
                sock.display(),
                report.display()
            ))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.matches("refused").count(),
            1,
            "one line per path: {err}"
        );
        let text = std::fs::read_to_string(&report).unwrap();
        let mut lines = text.lines();
        let first: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        let p = &first["protections"]["pathname_unix_sockets"];
        assert_eq!(p["enforced"], true, "{b}: {first}");
        let by = if landlock_abi() >= 9 && b != "bwrap" {
            "landlock"
        } else {
            "seccomp gate"
        };
        assert_eq!(p["by"], by, "{b}: {first}");
        let last: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(
            last["unix_refused"],
            serde_json::json!([sock]),
            "{b}: {last}"
        );
    }
}

#[test]
fn syslog_to_dev_log_is_refused_with_a_clear_line() {
    // /dev/log is a host socket (journald or rsyslog). Only the Landlock backend sees the
    // host's /dev (the namespace backends build a minimal one without it). Where no logger
    // runs, a stand-in host server takes its place for the test.
    if !backends().contains(&"landlock") {
        return;
    }
    let log = Path::new("/dev/log");
    let _standin = if log.exists() {
        None
    } else {
        Some(Host::service("dgram", log))
    };
    let tree = Tree::new(None);
    let out = tree
        .run("landlock", None)
        .args([
            PY,
            "-c",
            "import syslog; syslog.syslog('shofer-ug test line')",
        ])
        .output();
    if _standin.is_some() {
        let _ = std::fs::remove_file(log);
        let _ = std::fs::remove_file("/dev/log.ready");
        let _ = std::fs::remove_file("/dev/log.contact");
    }
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "shofer-sandbox: send to /dev/log refused: a host socket (allow with --allow-unix)"
        ) || String::from_utf8_lossy(&out.stderr).contains(
            "shofer-sandbox: connect to /dev/log refused: a host socket (allow with --allow-unix)"
        ),
        "{}",
        show(&out)
    );
}

#[test]
fn no_unix_gate_is_a_degradation_that_must_be_accepted_and_is_reported() {
    if landlock_abi() >= 9 {
        return; // Landlock enforces it itself: the flag changes nothing there.
    }
    let script = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.syscall(425, 4, ctypes.create_string_buffer(120)))";
    for b in backends() {
        let tree = Tree::new(None);
        let out = tree.run(b, None).arg("--no-unix-gate").arg("true").output();
        assert_eq!(out.status.code(), Some(125), "{b}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--allow-degraded"),
            "{b}: {}",
            show(&out)
        );
        let report = tree.scratch.path().join("report.json");
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "exec '{SANDBOX}' --report 3 --no-unix-gate --allow-degraded --backend {b} '{}' {PY} -c '{script}' 3>'{}'",
                tree.wt.display(),
                report.display()
            ))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("degraded (pathname_unix_sockets)"),
            "{b}: {err}"
        );
        assert!(err.contains("disabled by --no-unix-gate"), "{b}: {err}");
        // Without the gate, io_uring stays refused all the same: the host filter's set-ID
        // rule cannot see the mode of IORING_OP_OPENAT (hostfilter).
        let fd: i64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        assert_eq!(fd, -1, "{b}: {}", show(&out));
        let text = std::fs::read_to_string(&report).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(
            first["protections"]["pathname_unix_sockets"]["enforced"], false,
            "{b}: {first}"
        );
    }
}

/// A listener that never accepts (its backlog full) must not hold up the run's other gated
/// calls; a large `sendmsg()` on a blocking stream socket is sent whole, as without the gate.
const SLOW_PEERS: &str = r#"
import os, socket, tempfile, threading, time
d = tempfile.mkdtemp(prefix="shofer-ug-", dir="/tmp")
stuck = socket.socket(socket.AF_UNIX)
stuck.bind(d + "/stuck")
stuck.listen(0)
def client():
    c = socket.socket(socket.AF_UNIX)
    c.connect(d + "/stuck")
    time.sleep(60)
for _ in range(4):
    threading.Thread(target=client, daemon=True).start()
time.sleep(0.5)
ok = socket.socket(socket.AF_UNIX)
ok.bind(d + "/ok")
ok.listen(5)
t0 = time.time()
c = socket.socket(socket.AF_UNIX)
c.connect(d + "/ok")
print("other connect", "fast" if time.time() - t0 < 5 else "slow")
a, b = socket.socketpair()
big = b"x" * (4 << 20)
got = []
def reader():
    n = 0
    while n < len(big):
        n += len(b.recv(1 << 20))
    got.append(n)
r = threading.Thread(target=reader)
r.start()
sent = a.sendmsg([big])
r.join()
print("sendmsg", sent == len(big) and got[0] == len(big))
import shutil
shutil.rmtree(d, ignore_errors=True)
os._exit(0)
"#;

#[test]
fn slow_peers_do_not_stall_the_gate_and_large_sends_are_whole() {
    for b in backends() {
        let tree = Tree::new(None);
        // A stalled gate hangs the command: `timeout` turns that into a failure.
        let out = tree
            .run(b, None)
            .args(["/usr/bin/timeout", "30", PY, "-c", SLOW_PEERS])
            .output();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("other connect fast"), "{b}: {}", show(&out));
        assert!(text.contains("sendmsg True"), "{b}: {}", show(&out));
    }
}

#[test]
fn a_command_run_as_the_worktrees_owner_is_gated_and_keeps_its_own_sockets() {
    // Root over a worktree another uid owns: the command runs as that uid (or keeps some
    // capabilities in its user namespace); the gate acts as the caller, not as root.
    if !is_root() {
        return;
    }
    for b in backends() {
        let tree = Tree::new(Some(UNPRIV));
        let sock = tree.host.join("s");
        let host = Host::service("stream", &sock);
        let script = format!(
            "import socket, tempfile\nd = tempfile.mkdtemp(prefix='shofer-ug-', dir='/tmp')\ns = socket.socket(socket.AF_UNIX)\ns.bind(d + '/s')\ns.listen(1)\nsocket.socket(socket.AF_UNIX).connect(d + '/s')\nprint('own ok')\ntry:\n    socket.socket(socket.AF_UNIX).connect('{}')\n    print('host REACHED')\nexcept PermissionError:\n    print('host refused')\nimport shutil\nshutil.rmtree(d, ignore_errors=True)",
            sock.display()
        );
        let out = tree.run(b, None).args([PY, "-c", &script]).output();
        let text = String::from_utf8_lossy(&out.stdout);
        if b == "bwrap" && out.status.code() == Some(125) {
            continue; // bubblewrap over a foreign worktree: its own refusal, not the gate's
        }
        assert!(
            text.contains("own ok") && text.contains("host refused"),
            "{b}: {}",
            show(&out)
        );
        assert_eq!(host.contacts(), 0, "{b}");
    }
}

/// Issue 29, F7: the command sends, on a unix socket of its own, a control buffer whose
/// second cmsg declares `cmsg_len = 2^64-16`. The gate walked it with unchecked offsets: the
/// length wrapped past its bounds check, it read past the buffer and the supervisor aborted
/// (exit 134; in a debug build the gate thread died and the command waited forever). Now the
/// call fails with `EINVAL`, as the kernel fails it, and the gate goes on serving: a valid
/// `SCM_RIGHTS` right after passes a descriptor.
const F7_PROGRAM: &str = r#"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int send_control(int s, struct sockaddr_un *a, void *ctl, size_t len) {
    char byte = 'x';
    struct iovec iov = {&byte, 1};
    struct msghdr m = {0};
    m.msg_name = a;
    m.msg_namelen = sizeof *a;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = len;
    return sendmsg(s, &m, 0) < 0 ? errno : 0;
}

int main(void) {
    alarm(20); /* a gate that stopped answering leaves sendmsg waiting: SIGALRM ends it */
    setvbuf(stdout, NULL, _IONBF, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strcpy(a.sun_path, "f7.sock");
    unlink(a.sun_path);
    int r = socket(AF_UNIX, SOCK_DGRAM, 0), s = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (r < 0 || s < 0 || bind(r, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("setup");
        return 2;
    }
    /* A valid SCM_RIGHTS (20 bytes, padded to 24), then one declaring 2^64-16 bytes. */
    union { uint64_t align; unsigned char b[48]; } ctl = {0};
    uint64_t len1 = 20, len2 = UINT64_MAX - 15;
    int32_t lt[2] = {SOL_SOCKET, SCM_RIGHTS}, fds[2] = {1, 2};
    memcpy(ctl.b, &len1, 8);
    memcpy(ctl.b + 8, lt, 8);
    memcpy(ctl.b + 16, &fds[0], 4);
    memcpy(ctl.b + 24, &len2, 8);
    memcpy(ctl.b + 32, lt, 8);
    memcpy(ctl.b + 40, fds, 8);
    int e = send_control(s, &a, ctl.b, sizeof ctl.b);
    printf("malicious sendmsg: %s\n", e ? strerror(e) : "sent");
    /* The gate still serves: a pipe's write end passed with a valid SCM_RIGHTS. */
    int p[2];
    if (pipe(p) != 0)
        return 3;
    union { struct cmsghdr h; unsigned char b[CMSG_SPACE(sizeof(int))]; } ok, in;
    memset(&ok, 0, sizeof ok);
    memset(&in, 0, sizeof in);
    ok.h.cmsg_len = CMSG_LEN(sizeof(int));
    ok.h.cmsg_level = SOL_SOCKET;
    ok.h.cmsg_type = SCM_RIGHTS;
    memcpy(CMSG_DATA(&ok.h), &p[1], sizeof(int));
    e = send_control(s, &a, ok.b, sizeof ok.b);
    char byte;
    struct iovec iov = {&byte, 1};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = in.b;
    m.msg_controllen = sizeof in.b;
    /* The malicious datagram was never sent: the first one queued is the valid one. */
    if (e != 0 || recvmsg(r, &m, MSG_DONTWAIT) != 1 || m.msg_controllen < CMSG_LEN(sizeof(int))) {
        printf("valid sendmsg failed: %s\n", strerror(e ? e : errno));
        return 4;
    }
    int got;
    memcpy(&got, CMSG_DATA(&in.h), sizeof got);
    char buf[2];
    if (write(got, "ok", 2) != 2 || read(p[0], buf, 2) != 2 || memcmp(buf, "ok", 2) != 0)
        return 5;
    printf("descriptor passed\n");
    unlink(a.sun_path);
    return 7;
}
"#;

#[test]
fn a_cmsg_len_that_wraps_is_einval_and_the_supervisor_lives_issue_29_f7() {
    if !require("/usr/bin/gcc") {
        return;
    }
    // Built once, where the unprivileged uid can execute it.
    let bin = Scratch::new();
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = bin.path().join("f7.c");
    let exe = bin.path().join("f7");
    std::fs::write(&src, F7_PROGRAM).unwrap();
    let cc = Command::new("/usr/bin/gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(cc.status.success(), "gcc: {}", show(&cc));
    for uid in users() {
        for b in backends() {
            let tree = Tree::new(uid);
            let out = tree.run(b, uid).arg(&exe).output();
            let text = String::from_utf8_lossy(&out.stdout);
            let who = uid.map_or("root".to_string(), |u| format!("uid {u}"));
            // The program's own status: not the supervisor's abort (134), not SIGALRM (142).
            assert_eq!(out.status.code(), Some(7), "{b} as {who}: {}", show(&out));
            assert!(
                text.contains("malicious sendmsg: Invalid argument")
                    && text.contains("descriptor passed"),
                "{b} as {who}: {}",
                show(&out)
            );
            assert!(
                !String::from_utf8_lossy(&out.stderr).contains("panicked"),
                "{b} as {who}: {}",
                show(&out)
            );
        }
    }
}

/// Issue 29 F2: a directory grant is about where a socket's listener bound it, not about
/// the socket file's parent. A host socket moved (or linked) into the worktree or an
/// `--allow-unix` directory stays out of reach; one its listener bound there is reached.
const MOVED_IN: &str = r#"
import os, socket, sys
moved, direct = sys.argv[1], sys.argv[2]
def conn(path):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.send(b"touch " + path.encode() + b".pwned\n")
        print(os.path.basename(path), "SENT", flush=True)
    except OSError as e:
        print(os.path.basename(path), "ERR", e.errno, flush=True)
conn(moved)
if direct:
    conn(direct)
"#;

/// `rename(2)` of argv[1] to argv[2]: fails rather than copies.
const RENAME: &str = "import os, sys; os.rename(sys.argv[1], sys.argv[2])";

#[test]
fn a_host_socket_moved_into_a_granted_directory_is_refused() {
    for uid in users() {
        for b in backends() {
            let tree = Tree::new(uid);
            // Everything under /tmp, one filesystem without a mount between on every
            // backend: the command can rename a host socket from one directory to the other.
            let dirs = tempfile::Builder::new()
                .prefix("shofer-ug-f2-")
                .tempdir_in("/tmp")
                .unwrap();
            let (from, grant) = (dirs.path().join("from"), dirs.path().join("grant"));
            for d in [dirs.path(), &from, &grant] {
                std::fs::create_dir_all(d).unwrap();
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
            }
            let host = Host::service("stream", &from.join("s"));
            let granted = Host::service("stream", &grant.join("bound-here"));
            // The command renames the host socket into the granted directory, then connects.
            let (moved, direct) = (grant.join("s"), grant.join("bound-here"));
            // rename(2), never a copy (`mv` copies on EXDEV, which would make a new socket
            // file no listener bound, refused for another reason).
            let script = format!(
                "{PY} -c '{RENAME}' '{}' '{}' && {PY} -c '{}' '{}' '{}'",
                from.join("s").display(),
                moved.display(),
                MOVED_IN.replace('\'', "'\\''"),
                moved.display(),
                direct.display()
            );
            let out = tree
                .run(b, uid)
                .arg("--allow-unix")
                .arg(&grant)
                .args(["/bin/sh", "-c", &script])
                .output();
            let what = format!("{b} uid {uid:?}");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("s ERR 13"), "{what}: {}", show(&out));
            assert!(text.contains("bound-here SENT"), "{what}: {}", show(&out));
            assert_eq!(
                host.contacts(),
                0,
                "{what}: the moved host socket was reached"
            );
            assert!(granted.contacts() <= 1, "{what}");
            // The worktree is a granted directory too.
            let back = tree.wt.join("s");
            let script = format!(
                "{PY} -c '{RENAME}' '{}' '{}' && {PY} -c '{}' '{}' ''",
                moved.display(),
                back.display(),
                MOVED_IN.replace('\'', "'\\''"),
                back.display()
            );
            let out = tree.run(b, uid).args(["/bin/sh", "-c", &script]).output();
            let text = String::from_utf8_lossy(&out.stdout);
            let err = String::from_utf8_lossy(&out.stderr);
            // The namespace backends bind the worktree and /tmp separately: no rename between
            // them (EXDEV). On Landlock alone it works, and the gate must refuse.
            let separate_mounts = b != "landlock" && err.contains("Invalid cross-device link");
            assert!(
                text.contains("s ERR 13") || separate_mounts,
                "{what} worktree: {}",
                show(&out)
            );
            assert_eq!(host.contacts(), 0, "{what}: reached from the worktree");
        }
    }
}

/// Issue 29 F1: an abstract name is the run's own only in the network namespace it was bound
/// in. The command makes a socket, enters a user and network namespace of its own, binds the
/// host service's abstract name there, then connects the first socket (still in the
/// original namespace) to that name: the host's service must not be reached.
const ABSTRACT_TWIN: &str = r#"
import ctypes, os, socket, sys
name = b"\0" + sys.argv[1].encode()
first = socket.socket(socket.AF_UNIX)
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
    print("UNSHARE", ctypes.get_errno(), flush=True)
    sys.exit(3)
twin = socket.socket(socket.AF_UNIX)
twin.bind(name)
twin.listen(1)
try:
    first.connect(name)
    first.send(b"touch /tmp/shofer-f1-pwned\n")
    print("SENT", flush=True)
except OSError as e:
    print("ERR", e.errno, flush=True)
"#;

/// A host service on an abstract name: records each contact in `contact`.
const ABSTRACT_SERVICE: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(b"\0" + sys.argv[1].encode())
s.listen(8)
open(sys.argv[2] + ".ready", "w").close()
while True:
    c, _ = s.accept()
    with open(sys.argv[2], "a") as f:
        f.write("contact\n")
    c.close()
"#;

#[test]
fn an_abstract_name_bound_in_another_network_namespace_is_not_the_runs_own() {
    for uid in users() {
        for b in backends() {
            let tree = Tree::new(uid);
            let name = format!("shofer-f1-{}-{b}", std::process::id());
            let contact = tree.host.join("abstract.contact");
            let mut service = Command::new(PY)
                .args(["-c", ABSTRACT_SERVICE, &name])
                .arg(&contact)
                .stdin(Stdio::null())
                .spawn()
                .unwrap();
            wait_for(&PathBuf::from(format!("{}.ready", contact.display())));
            let out = tree
                .run(b, uid)
                .args([PY, "-c", ABSTRACT_TWIN, &name])
                .output();
            let contacts = std::fs::read_to_string(&contact).map_or(0, |s| s.lines().count());
            let _ = service.kill();
            let _ = service.wait();
            let what = format!("{b} uid {uid:?}");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(!text.contains("UNSHARE"), "{what}: {}", show(&out));
            assert!(text.contains("ERR"), "{what}: {}", show(&out));
            assert_eq!(
                contacts, 0,
                "{what}: the host's abstract service was reached"
            );
        }
    }
}

/// Issue 29 F3: under `--net deny`, a TCP Fast Open `sendto` (a connect in disguise) reaches
/// nothing: the gate's helper performs it inside the command's Landlock domain, which refuses
/// it as it refuses `connect`; the namespace backends have no network at all. MPTCP, which
/// Landlock's TCP rules do not cover, cannot be made (`EPROTONOSUPPORT`, the host filter).
const FASTOPEN: &str = r#"
import socket, sys
port = int(sys.argv[1])
MSG_FASTOPEN = 0x20000000
IPPROTO_MPTCP = 262
def attempt(name, f):
    try:
        f()
        print(name, "SENT", flush=True)
    except OSError as e:
        print(name, "ERR", e.errno, flush=True)
def fastopen(proto):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
    s.sendto(b"GET / HTTP/1.0\r\n\r\n", MSG_FASTOPEN, ("127.0.0.1", port))
    s.send(b"exfiltrated")
def connect(proto):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
    s.connect(("127.0.0.1", port))
    s.send(b"exfiltrated")
attempt("fastopen", lambda: fastopen(0))
attempt("mptcp-connect", lambda: connect(IPPROTO_MPTCP))
attempt("mptcp-fastopen", lambda: fastopen(IPPROTO_MPTCP))
"#;

#[test]
fn tcp_fast_open_and_mptcp_under_net_deny_reach_nothing() {
    for uid in users() {
        for b in backends() {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let port = listener.local_addr().unwrap().port().to_string();
            let tree = Tree::new(uid);
            let out = tree
                .run(b, uid)
                .args(["--net", "deny", PY, "-c", FASTOPEN, &port])
                .output();
            let what = format!("{b} uid {uid:?}");
            let text = String::from_utf8_lossy(&out.stdout);
            assert_eq!(text.matches(" ERR ").count(), 3, "{what}: {}", show(&out));
            assert!(
                listener.accept().is_err(),
                "{what}: a connection reached the host's listener"
            );
        }
    }
}
