//! Finding and killing a command's whole process tree.
//!
//! # What the kernel gives us, and why the design looks like this
//!
//! A shell command is rarely one process. `make` forks compilers, `npm run dev` forks a server
//! that forks workers, and `setsid sleep 900 &` or `(nohup daemon &)` deliberately leave the
//! process group and the session, and after a double fork their parent is gone too. Killing
//! the process group (what most runners do) misses all of those: see the test
//! `process_group_kill_misses_setsid_daemon`.
//!
//! So a command's tree is the union of what each of these finds, recomputed from `/proc` on
//! every scan:
//! 1. **Parent links** from the command's main process (identified by pid *and* start time, so
//!    a recycled pid never matches) and from every process seen in the tree before.
//! 2. **The session and the process group**: each command is spawned as the leader of a new
//!    session (so also of a new process group), and the kernel never hands out a pid that is
//!    still some process's session or group id, so matching them is safe even after the
//!    leader is gone. A session cannot be joined from outside, so every process in it is the
//!    command's.
//! 3. **An environment tag** `SHOFER_EXEC_TAG=<our pid>-<execution id>` every command inherits;
//!    it survives `setsid`, double forks and reparenting (not `env -i`, which 1 and 4 cover).
//! 4. **The child subreaper** ([`enable_subreaper`]): with `PR_SET_CHILD_SUBREAPER` set on the
//!    engine's process, orphans are reparented to us rather than to init, so an escaped daemon
//!    stays *below us* and 1 keeps finding it through a process seen before. In that mode only
//!    our descendants are ever candidates, so another program's processes cannot match.
//!
//! Signals go through pidfds (`pidfd_open` then `pidfd_send_signal`, Linux 5.3): the pidfd is
//! opened, then the process's start time is read again, and only if it is unchanged is the
//! signal sent, so a pid recycled between the scan and the signal is never hit. Where pidfds
//! are missing (ENOSYS, remembered) the same check guards a plain `kill(2)`, with a window of a
//! few microseconds left open.
//!
//! Where the kernel has `PIDFD_SIGNAL_PROCESS_GROUP` (Linux 6.9), SIGKILL goes to a whole
//! process group in one call, through the pidfd of a member checked as above and still in the
//! command's session: its group can then only hold the command's processes. Elsewhere, and for
//! members in other sessions, each process is signalled on its own.
//!
//! [`kill_trees`] sends SIGTERM (and SIGCONT, so stopped processes see it) to every member,
//! rescanning so that processes forked meanwhile get it too, until the members are gone or the
//! grace period ends; then it sends SIGKILL to every member, rescanning until a scan finds no
//! live member. A fork loop converges because SIGKILL is sent to the forking parent in the same
//! round as its latest children, and every round kills whatever the last one missed.
//!
//! Zombies are not members (they are already dead). Orphaned zombies reparented to us are
//! reaped when they can be attributed to a command (group id, or seen in its tree), so that a
//! library user's own children are never reaped behind its back.
//!
//! # Not guaranteed
//! - Processes of another user (a setuid program) cannot be signalled (`EPERM`); they are
//!   reported as survivors.
//! - Without the subreaper, an orphan that was never seen in a scan, changed group and cleared
//!   its environment is not found.
//! - A process in another pid namespace is seen with our pid numbers, which is all we need.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sys;

static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Makes this process a child subreaper (see the module docs) and restricts tree scans to our
/// own descendants. Idempotent. The `shofer` binary calls it first thing; a library user calls
/// it (or sets [`crate::EngineConfig::subreaper`]) when it owns its process.
///
/// # Errors
/// As `prctl(PR_SET_CHILD_SUBREAPER)` (Linux 3.4).
pub fn enable_subreaper() -> std::io::Result<()> {
    sys::set_child_subreaper()?;
    SUBREAPER.store(true, Ordering::SeqCst);
    Ok(())
}

/// One line of `/proc/<pid>/stat`, the fields we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcInfo {
    /// Process id.
    pub pid: i32,
    /// Parent's pid.
    pub ppid: i32,
    /// Process group id.
    pub pgid: i32,
    /// Session id.
    pub sid: i32,
    /// State letter (`R`, `S`, `Z`, ...).
    pub state: u8,
    /// Start time in clock ticks after boot: with `pid`, a process's identity.
    pub start: u64,
}

impl ProcInfo {
    fn is_dead(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }
    fn key(&self) -> (i32, u64) {
        (self.pid, self.start)
    }
}

/// Parses `/proc/<pid>/stat` contents. The command name may hold spaces and parentheses, so
/// fields are counted after the *last* `)`.
pub fn parse_stat(buf: &[u8]) -> Option<ProcInfo> {
    let close = memchr::memrchr(b')', buf)?;
    let pid = std::str::from_utf8(&buf[..memchr::memchr(b' ', buf)?])
        .ok()?
        .parse()
        .ok()?;
    let rest = std::str::from_utf8(buf.get(close + 2..)?).ok()?;
    let mut it = rest.split(' ');
    let state = it.next()?.bytes().next()?;
    let ppid = it.next()?.parse().ok()?;
    let pgid = it.next()?.parse().ok()?;
    let sid = it.next()?.parse().ok()?;
    // Fields after state: ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    // utime stime cutime cstime priority nice num_threads itrealvalue starttime (field 22).
    let start = it.nth(15)?.parse().ok()?;
    Some(ProcInfo {
        pid,
        ppid,
        pgid,
        sid,
        state,
        start,
    })
}

/// Reads one process's stat line.
pub fn read_proc(pid: i32) -> Option<ProcInfo> {
    let mut buf = [0u8; 1024];
    let mut f = fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let n = f.read(&mut buf).ok()?;
    parse_stat(&buf[..n])
}

/// Every process in `/proc` right now (threads are not listed separately). Each
/// `<pid>/stat` is opened relative to one descriptor of `/proc` (`openat`), which keeps a scan
/// of 500 processes at a few milliseconds.
pub fn scan() -> Vec<ProcInfo> {
    let mut out = Vec::with_capacity(512);
    let Ok(dir) = fs::File::open("/proc") else {
        return out;
    };
    let Ok(entries) = fs::read_dir("/proc") else {
        return out;
    };
    let mut buf = [0u8; 1024];
    let mut path = Vec::with_capacity(32);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.as_encoded_bytes();
        if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
            continue;
        }
        path.clear();
        path.extend_from_slice(name);
        path.extend_from_slice(b"/stat\0");
        let Ok(n) = sys::read_at(&dir, &path, &mut buf) else {
            continue;
        };
        if let Some(p) = parse_stat(&buf[..n]) {
            out.push(p);
        }
    }
    out
}

fn environ_has(pid: i32, needle: &[u8]) -> bool {
    let Ok(env) = fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    memchr::memmem::find_iter(&env, needle)
        .any(|i| (i == 0 || env[i - 1] == 0) && env.get(i + needle.len()).is_none_or(|&b| b == 0))
}

/// A command's process tree, as the engine knows it (see the module docs for how members are
/// found). Cheap to share; the scans update its memory of members under a lock.
#[derive(Debug)]
pub struct Tree {
    root: (i32, u64),
    pgid: i32,
    sid: i32,
    tag: Vec<u8>,
    known: Mutex<HashSet<(i32, u64)>>,
    /// Processes found not to carry the tag (their environment cannot change to carry it).
    not_tagged: Mutex<HashSet<(i32, u64)>>,
}

impl Tree {
    /// The tree of a command whose main process is `root_pid` (the leader of a new session
    /// and process group, spawned by us and not yet reaped, so its start time can be read
    /// reliably) and whose environment carries `tag` (`NAME=value`).
    pub fn new(root_pid: i32, tag: String) -> Self {
        let start = read_proc(root_pid).map_or(0, |p| p.start);
        Tree {
            root: (root_pid, start),
            pgid: root_pid,
            sid: root_pid,
            tag: tag.into_bytes(),
            known: Mutex::new(HashSet::from([(root_pid, start)])),
            not_tagged: Mutex::new(HashSet::new()),
        }
    }

    /// The main process's pid.
    pub fn root_pid(&self) -> i32 {
        self.root.0
    }

    /// The live members of this tree right now (one fresh scan).
    pub fn members(&self) -> Vec<ProcInfo> {
        members_of(&[self], &scan()).pop().unwrap_or_default()
    }
}

/// Splits one scan into the live members of each tree; remembers members, reaps attributable
/// orphaned zombies.
fn members_of(trees: &[&Tree], procs: &[ProcInfo]) -> Vec<Vec<ProcInfo>> {
    let me = sys::getpid();
    let mut children: HashMap<i32, Vec<usize>> = HashMap::new();
    for (i, p) in procs.iter().enumerate() {
        children.entry(p.ppid).or_default().push(i);
    }
    // In subreaper mode only our descendants are candidates.
    let candidates: Option<HashSet<i32>> = SUBREAPER.load(Ordering::Relaxed).then(|| {
        let mut set = HashSet::new();
        let mut stack = vec![me];
        while let Some(pid) = stack.pop() {
            for &i in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
                if set.insert(procs[i].pid) {
                    stack.push(procs[i].pid);
                }
            }
        }
        set
    });
    let mut result = Vec::with_capacity(trees.len());
    for tree in trees {
        let mut known = tree.known.lock().unwrap_or_else(|e| e.into_inner());
        let mut not_tagged = tree.not_tagged.lock().unwrap_or_else(|e| e.into_inner());
        let mut in_tree = vec![false; procs.len()];
        let mut stack = Vec::new();
        for (i, p) in procs.iter().enumerate() {
            if candidates.as_ref().is_some_and(|c| !c.contains(&p.pid)) {
                continue;
            }
            let hit = p.key() == tree.root
                || p.pgid == tree.pgid
                || p.sid == tree.sid
                || known.contains(&p.key())
                || (!p.is_dead() && !not_tagged.contains(&p.key()) && {
                    let tagged = environ_has(p.pid, &tree.tag);
                    if !tagged {
                        not_tagged.insert(p.key());
                    }
                    tagged
                });
            if hit {
                in_tree[i] = true;
                stack.push(i);
            }
        }
        while let Some(i) = stack.pop() {
            for &c in children
                .get(&procs[i].pid)
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                if !in_tree[c] {
                    in_tree[c] = true;
                    stack.push(c);
                }
            }
        }
        let mut live = Vec::new();
        for (i, p) in procs.iter().enumerate() {
            if !in_tree[i] {
                continue;
            }
            if p.is_dead() {
                // An orphaned zombie of this tree reparented to us: reap it (never the root,
                // which tokio waits on).
                if p.ppid == me && p.key() != tree.root {
                    sys::reap(p.pid);
                }
                continue;
            }
            known.insert(p.key());
            live.push(*p);
        }
        // Forget identities that no longer exist, so the sets stay small.
        if known.len() > 4 * live.len() + 64 {
            let alive: HashSet<(i32, u64)> = procs.iter().map(ProcInfo::key).collect();
            known.retain(|k| alive.contains(k) || *k == tree.root);
            not_tagged.retain(|k| alive.contains(k));
        }
        result.push(live);
    }
    result
}

/// Sends `sig` to the process `p` if it is still the same process (same start time).
/// Returns false when it could not be signalled (gone, or not ours).
fn signal(proc_dir: &fs::File, p: &ProcInfo, sig: i32) -> bool {
    let start_now = || {
        let path = format!("{}/stat\0", p.pid);
        let mut buf = [0u8; 1024];
        let n = sys::read_at(proc_dir, path.as_bytes(), &mut buf).ok()?;
        parse_stat(&buf[..n]).map(|q| q.start)
    };
    match sys::pidfd_open(p.pid) {
        Ok(Some(fd)) => {
            // The pidfd pins whatever process holds the pid now; the start time read after
            // opening it tells whether that is the process we scanned.
            start_now() == Some(p.start) && sys::pidfd_send_signal(&fd, sig).is_ok()
        }
        Ok(None) => start_now() == Some(p.start) && sys::kill(p.pid, sig).is_ok(),
        Err(_) => false,
    }
}

/// Remembers that the kernel has no `PIDFD_SIGNAL_PROCESS_GROUP` (before Linux 6.9).
static NO_GROUP_SIGNAL: AtomicBool = AtomicBool::new(false);

/// Sends `sig` to the whole process group of member `p` with one pidfd call, if `p` is still
/// the scanned process, still in the scanned group, and in one of `sessions` (the sessions our
/// commands were started in). Only processes of that command can be in such a session (a
/// session cannot be joined from outside), so every process the signal reaches is ours.
/// Returns false when it did not signal (the caller then signals processes one by one).
fn signal_group(proc_dir: &fs::File, p: &ProcInfo, sessions: &HashSet<i32>, sig: i32) -> bool {
    if NO_GROUP_SIGNAL.load(Ordering::Relaxed) || !sessions.contains(&p.sid) {
        return false;
    }
    let Ok(Some(fd)) = sys::pidfd_open(p.pid) else {
        return false;
    };
    let path = format!("{}/stat\0", p.pid);
    let mut buf = [0u8; 1024];
    let Ok(n) = sys::read_at(proc_dir, path.as_bytes(), &mut buf) else {
        return false;
    };
    match parse_stat(&buf[..n]) {
        Some(q) if q.start == p.start && q.pgid == p.pgid && sessions.contains(&q.sid) => {}
        _ => return false,
    }
    match sys::pidfd_send_signal_group(&fd, sig) {
        Ok(()) => true,
        Err(e) => {
            if e.raw_os_error() == Some(libc::EINVAL) {
                NO_GROUP_SIGNAL.store(true, Ordering::Relaxed);
            }
            false
        }
    }
}

/// What [`kill_trees`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Distinct processes signalled.
    pub signalled: usize,
    /// Processes still alive when it gave up (not ours to kill, or unkillable in time).
    pub survivors: Vec<i32>,
}

/// How long [`kill_trees`] keeps sending SIGKILL before it reports survivors.
pub const KILL_GIVE_UP: Duration = Duration::from_secs(10);

/// Kills every member of every tree: SIGTERM (+ SIGCONT) to all, a grace period (ended early
/// when all are gone), then SIGKILL until a scan finds none. Blocking; takes at most
/// `grace` + [`KILL_GIVE_UP`]. See the module docs.
pub fn kill_trees(trees: &[&Tree], grace: Duration) -> KillReport {
    let mut report = KillReport::default();
    if trees.is_empty() {
        return report;
    }
    let live = || -> Vec<ProcInfo> { members_of(trees, &scan()).into_iter().flatten().collect() };
    let Ok(proc_dir) = fs::File::open("/proc") else {
        report.survivors = live().iter().map(|p| p.pid).collect();
        return report;
    };
    let sessions: HashSet<i32> = trees.iter().map(|t| t.sid).collect();
    let start = Instant::now();
    let mut termed: HashSet<(i32, u64)> = HashSet::new();
    let mut members = live();
    // SIGTERM (and SIGCONT, so stopped processes act on it) to every member, rescanning for
    // processes forked meanwhile, until all are gone or the grace ends.
    while !grace.is_zero() {
        if members.is_empty() {
            report.signalled = termed.len();
            return report;
        }
        for p in &members {
            if termed.insert(p.key()) {
                signal(&proc_dir, p, libc::SIGTERM);
                signal(&proc_dir, p, libc::SIGCONT);
            }
        }
        let left = grace.saturating_sub(start.elapsed());
        std::thread::sleep(left.min(Duration::from_millis(5)));
        members = live();
        if start.elapsed() >= grace {
            break;
        }
    }
    // SIGKILL the latest scan's members at once, then rescan until a scan finds none.
    let kill_start = Instant::now();
    let mut killed: HashSet<(i32, u64)> = HashSet::new();
    while !members.is_empty() {
        if kill_start.elapsed() > KILL_GIVE_UP {
            report.survivors = members.iter().map(|p| p.pid).collect();
            break;
        }
        // One call per process group where the kernel can (Linux 6.9), else one per process;
        // members that left their group meanwhile are found alive by the next scan.
        let mut groups_done: HashSet<i32> = HashSet::new();
        for p in &members {
            killed.insert(p.key());
            if groups_done.contains(&p.pgid) {
                continue;
            }
            if signal_group(&proc_dir, p, &sessions, libc::SIGKILL) {
                groups_done.insert(p.pgid);
            } else {
                signal(&proc_dir, p, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
        members = live();
    }
    report.signalled = termed.union(&killed).count();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_stat_handles_parens_and_spaces_in_name() {
        let line =
            b"4242 (a) b (c)) S 1 4242 4240 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
        let p = parse_stat(line).unwrap();
        assert_eq!(
            (p.pid, p.ppid, p.pgid, p.sid, p.state, p.start),
            (4242, 1, 4242, 4240, b'S', 987654)
        );
    }

    #[test]
    fn scan_finds_ourselves() {
        let me = sys::getpid();
        assert!(scan().iter().any(|p| p.pid == me));
        assert_eq!(read_proc(me).unwrap().pid, me);
    }
}
