//! Finding a command's whole process tree; killing it with [`shofer_sys::kill`].
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
//! Killing is [`shofer_sys::kill::kill`] with the trees as its targets ([`kill_trees`]):
//! SIGTERM to every member (whole process groups in one call where a group can only hold the
//! command's processes: its session is one our commands were started in), SIGCONT to stopped
//! ones, one grace period shared by all the trees, then SIGKILL until a scan finds none. Every
//! signal re-checks the process's start time after opening a pidfd, so a pid recycled between
//! the scan and the signal is never hit.
//!
//! Zombies are not members (they are already dead). Orphaned zombies reparented to us are
//! reaped when they can be attributed to a command (group id, or seen in its tree), so that a
//! library user's own children are never reaped behind its back.
//!
//! # Not guaranteed
//! - Processes of another user (a setuid program) cannot be signalled (`EPERM`); they are
//!   reported as survivors.
//! - An orphan that was never seen in a scan, changed its session and cleared its
//!   environment (`setsid env -i daemon &`, then the parent exits) is not attributed to any
//!   command. With the subreaper it is still our descendant: the `shofer` binary, which owns
//!   its process, sweeps every descendant when it ends ([`kill_everything_below_us`]).
//! - A process in another pid namespace is seen with our pid numbers, which is all we need.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::os::fd::OwnedFd;

use rustix::process::Signal;
use shofer_sys::kill::{self, Descendants, KillReport, Targets};
use shofer_sys::proc::{ProcInfo, ProcTable};
use shofer_sys::process;

use crate::TAG_VAR;

static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Makes this process a child subreaper (see the module docs) and restricts tree scans to our
/// own descendants. Idempotent. The `shofer` binary calls it first thing; a library user calls
/// it (or sets [`crate::EngineConfig::subreaper`]) when it owns its process.
///
/// # Errors
/// As `prctl(PR_SET_CHILD_SUBREAPER)` (Linux 3.4).
pub fn enable_subreaper() -> std::io::Result<()> {
    process::set_child_subreaper()?;
    SUBREAPER.store(true, Ordering::SeqCst);
    Ok(())
}

/// The [`TAG_VAR`] value in `/proc/<pid>/environ`: `Some(None)` when the process has none,
/// `None` when its environment cannot be told yet — unreadable, or empty, as it reads in the
/// middle of `execve` (the new image's environment is set up after a vfork parent resumes),
/// so the answer must not be remembered.
fn tag_of(pid: i32) -> Option<Option<Box<[u8]>>> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    if env.is_empty() {
        return None;
    }
    let prefix = [TAG_VAR.as_bytes(), b"="].concat();
    Some(
        env.split(|&b| b == 0)
            .find_map(|e| e.strip_prefix(prefix.as_slice()))
            .map(Box::from),
    )
}

/// The tag value of every process looked at so far, by identity: a process's initial
/// environment does not change, so each is read once however many trees are matched against
/// it. Pruned to the live processes when it grows.
static TAGS: Mutex<Option<TagCache>> = Mutex::new(None);

/// Process identity → its tag value (`None`: it has none).
type TagCache = HashMap<(i32, u64), Option<Box<[u8]>>>;

/// A command's process tree, as the engine knows it (see the module docs for how members are
/// found). Cheap to share; the scans update its memory of members under a lock.
#[derive(Debug)]
pub struct Tree {
    root: (i32, u64),
    pgid: i32,
    sid: i32,
    tag: Box<[u8]>,
    known: Mutex<HashSet<(i32, u64)>>,
}

impl Tree {
    /// The tree of a command whose main process is `root_pid` (the leader of a new session
    /// and process group, spawned by us and not yet reaped, so its start time can be read
    /// reliably) and whose environment carries [`TAG_VAR`]`=tag`.
    pub fn new(root_pid: i32, tag: String) -> Self {
        let start = shofer_sys::proc::read(root_pid).map_or(0, |p| p.start);
        Tree {
            root: (root_pid, start),
            pgid: root_pid,
            sid: root_pid,
            tag: tag.into_bytes().into(),
            known: Mutex::new(HashSet::from([(root_pid, start)])),
        }
    }

    /// The main process's pid.
    pub fn root_pid(&self) -> i32 {
        self.root.0
    }

    /// The live members of this tree, from a scan at most [`SHARED_SCAN_AGE`] old.
    pub fn members(&self) -> Vec<ProcInfo> {
        members_of(&[self], &shared_scan())
            .pop()
            .unwrap_or_default()
    }

    /// The live members of this tree from a fresh scan: for a decision that must see a
    /// process forked a moment ago (what a command left running when its main process
    /// exited), which a shared scan up to [`SHARED_SCAN_AGE`] old can miss.
    pub fn members_now(&self) -> Vec<ProcInfo> {
        members_of(&[self], &ProcTable::scan())
            .pop()
            .unwrap_or_default()
    }
}

/// How old a scan [`Tree::members`] may reuse: every command that left background processes
/// polls its tree, and a server with hundreds of them would otherwise scan `/proc` hundreds of
/// times at once (which starves, among others, a kill of all of them). The killer always scans
/// afresh.
pub const SHARED_SCAN_AGE: Duration = Duration::from_millis(100);

/// One scan shared by the callers of [`Tree::members`] (see [`SHARED_SCAN_AGE`]); concurrent
/// callers wait for the one scan in progress instead of starting their own.
fn shared_scan() -> Arc<ProcTable> {
    static LAST: Mutex<Option<(Instant, Arc<ProcTable>)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((at, table)) = &*last {
        if at.elapsed() < SHARED_SCAN_AGE {
            return Arc::clone(table);
        }
    }
    let table = Arc::new(ProcTable::scan());
    *last = Some((Instant::now(), Arc::clone(&table)));
    table
}

/// Splits one scan into the live members of each tree; remembers members, reaps attributable
/// orphaned zombies. A process belongs to the first tree that claims it by identity, group,
/// session or tag; its descendants follow it unless another tree claims them.
fn members_of(trees: &[&Tree], table: &ProcTable) -> Vec<Vec<ProcInfo>> {
    let me = process::getpid();
    let procs = table.procs();
    // In subreaper mode only our descendants are candidates.
    let candidate: Vec<bool> = if SUBREAPER.load(Ordering::Relaxed) {
        let mut c = vec![false; procs.len()];
        for i in table.descendants(me) {
            c[i] = true;
        }
        c
    } else {
        vec![true; procs.len()]
    };
    let mut by_id: HashMap<(i32, u64), usize> = HashMap::new();
    let mut by_group: HashMap<i32, usize> = HashMap::new();
    let mut by_session: HashMap<i32, usize> = HashMap::new();
    let mut by_tag: HashMap<&[u8], usize> = HashMap::new();
    let mut known: Vec<_> = trees
        .iter()
        .map(|t| t.known.lock().unwrap_or_else(|e| e.into_inner()))
        .collect();
    for (ti, t) in trees.iter().enumerate().rev() {
        for k in known[ti].iter() {
            by_id.insert(*k, ti);
        }
        by_group.insert(t.pgid, ti);
        by_session.insert(t.sid, ti);
        by_tag.insert(&t.tag, ti);
    }
    let mut tags = TAGS.lock().unwrap_or_else(|e| e.into_inner());
    let tags = tags.get_or_insert_with(HashMap::new);
    let mut owner: Vec<Option<usize>> = vec![None; procs.len()];
    let mut stack = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        if !candidate[i] {
            continue;
        }
        let hit = by_id
            .get(&p.identity())
            .or_else(|| by_group.get(&p.pgid))
            .or_else(|| by_session.get(&p.sid))
            .copied()
            .or_else(|| {
                if p.is_dead() {
                    return None;
                }
                let tag = match tags.get(&p.identity()) {
                    Some(t) => t.clone(),
                    None => {
                        let t = tag_of(p.pid)?;
                        tags.insert(p.identity(), t.clone());
                        t
                    }
                };
                tag.as_deref().and_then(|t| by_tag.get(t).copied())
            });
        if let Some(ti) = hit {
            owner[i] = Some(ti);
            stack.push(i);
        }
    }
    while let Some(i) = stack.pop() {
        for &c in table.children(procs[i].pid) {
            if owner[c].is_none() {
                owner[c] = owner[i];
                stack.push(c);
            }
        }
    }
    let mut result = vec![Vec::new(); trees.len()];
    for (i, p) in procs.iter().enumerate() {
        let Some(ti) = owner[i] else { continue };
        if p.is_dead() {
            // An orphaned zombie of this tree reparented to us: reap it (never the root,
            // which tokio waits on).
            if p.ppid == me && p.identity() != trees[ti].root {
                process::reap(p.pid);
            }
            continue;
        }
        known[ti].insert(p.identity());
        result[ti].push(*p);
    }
    // Forget identities that no longer exist, so the memories stay small.
    let alive = || -> HashSet<(i32, u64)> { procs.iter().map(ProcInfo::identity).collect() };
    for (ti, k) in known.iter_mut().enumerate() {
        if k.len() > 4 * result[ti].len() + 64 {
            let alive = alive();
            k.retain(|id| alive.contains(id) || *id == trees[ti].root);
        }
    }
    if tags.len() > 2 * procs.len() + 64 {
        let alive = alive();
        tags.retain(|id, _| alive.contains(id));
    }
    result
}

/// The trees as the killer's targets; their sessions hold only their processes.
struct TreeSet<'a> {
    trees: &'a [&'a Tree],
    sessions: HashSet<i32>,
}

impl Targets for TreeSet<'_> {
    fn select(&mut self, table: &ProcTable) -> Vec<ProcInfo> {
        members_of(self.trees, table)
            .into_iter()
            .flatten()
            .collect()
    }

    fn owns_session(&self, sid: i32) -> bool {
        self.sessions.contains(&sid)
    }
}

/// How long [`kill_trees`] keeps sending SIGKILL before it reports survivors.
pub const KILL_GIVE_UP: Duration = kill::GIVE_UP;

/// Kills every member of every tree at once: SIGTERM to all (+ SIGCONT to stopped ones), one
/// grace period (ended early when all are gone), then SIGKILL until a scan finds none.
/// Blocking; takes at most `grace` + [`KILL_GIVE_UP`]. See the module docs.
pub fn kill_trees(trees: &[&Tree], grace: Duration) -> KillReport {
    if trees.is_empty() {
        return KillReport::default();
    }
    let mut targets = TreeSet {
        trees,
        sessions: trees.iter().map(|t| t.sid).collect(),
    };
    kill::kill(&mut targets, grace)
}

/// Kills every descendant of this process, attributed to a command or not (see "Not
/// guaranteed" in the module docs), as [`kill_trees`] does. Only for a program that owns its
/// process and has enabled the subreaper — the `shofer` binary at its end — since it also
/// kills children this module did not start.
pub fn kill_everything_below_us(grace: Duration) -> KillReport {
    kill::kill(&mut Descendants::of_self(), grace)
}

/// The names of this process's live descendants (their `comm`), sorted, repeats kept: what
/// [`kill_everything_below_us`] is about to stop, for the record.
pub fn names_below_us() -> Vec<String> {
    let table = shofer_sys::proc::ProcTable::scan();
    let procs = table.procs();
    let mut names: Vec<String> = table
        .descendants(shofer_sys::process::getpid())
        .into_iter()
        .map(|i| procs[i])
        .filter(|p| !p.is_dead())
        .map(|p| String::from_utf8_lossy(p.comm.as_bytes()).into_owned())
        .collect();
    names.sort();
    names
}

/// Signals each process group held by `groups` (pidfds of their leaders, opened while those
/// were unreaped children: the kernel keeps such a group's id from being reused while any
/// member lives, so no other process can be hit) in one call per group
/// ([`shofer_sys::pidfd::send_signal_group`], Linux 6.9). Returns how many groups got it;
/// on older kernels none (the caller's scan-based kill does the work).
pub fn signal_groups(groups: &[OwnedFd], sig: Signal) -> usize {
    groups
        .iter()
        .filter(|fd| shofer_sys::pidfd::send_signal_group(fd, sig).unwrap_or(false))
        .count()
}

/// For a server's end (see [`kill_everything_below_us`] for who may call it). `groups` are
/// the commands' process groups (see [`signal_groups`]) and `sessions` their session ids,
/// sorted.
/// 1. SIGTERM (and SIGCONT) to every group at once;
/// 2. during the grace period, one walk of `/proc`: SIGTERM to the descendants outside those
///    sessions (they left them with `setsid`);
/// 3. SIGKILL to every group at once, and a wait (bounded) for the groups' leaders to exit;
/// 4. SIGKILL to every descendant until a walk finds none ([`kill::kill`] without a grace:
///    every process that existed in step 2 has had SIGTERM and the grace period).
///
/// A thousand background commands, half ignoring SIGTERM, cost three thousand group signals
/// and two or three walks of `/proc`, instead of a pidfd and a `/proc/<pid>/stat` read per
/// process and round. Without group signals (Linux < 6.9) it is [`kill_everything_below_us`].
pub fn kill_groups_then_everything_below_us(
    groups: &[OwnedFd],
    sessions: &[i32],
    grace: Duration,
) -> KillReport {
    let start = Instant::now();
    if signal_groups(groups, Signal::TERM) == 0 {
        return kill_everything_below_us(grace);
    }
    // Stopped members act on SIGTERM only when continued.
    signal_groups(groups, Signal::CONT);
    if let Ok(dir) = shofer_sys::proc::ProcDir::open() {
        let table = ProcTable::new(dir.scan());
        let procs = table.procs();
        for i in table.descendants(process::getpid()) {
            let p = &procs[i];
            if !p.is_dead() && sessions.binary_search(&p.sid).is_err() {
                shofer_sys::pidfd::signal_if_same(&dir, p, Signal::TERM);
                if p.is_stopped() {
                    shofer_sys::pidfd::signal_if_same(&dir, p, Signal::CONT);
                }
            }
        }
    }
    std::thread::sleep(grace.saturating_sub(start.elapsed()));
    signal_groups(groups, Signal::KILL);
    // Let the groups' members die before the sweep walks /proc: signalling thousands of dying
    // processes one by one only slows their teardown.
    shofer_sys::pidfd::wait_exited(groups, KILL_SETTLE);
    let report = kill_everything_below_us(Duration::ZERO);
    if report.survivors.is_empty() {
        SWEPT.store(true, Ordering::SeqCst);
    }
    report
}

/// How long [`kill_groups_then_everything_below_us`] waits for the killed groups' leaders to
/// exit before its sweep.
const KILL_SETTLE: Duration = Duration::from_millis(200);

static SWEPT: AtomicBool = AtomicBool::new(false);

/// Whether [`kill_groups_then_everything_below_us`] has left no process below us: a program
/// that starts no more children afterwards need not walk `/proc` once more at its end.
pub fn everything_below_us_killed() -> bool {
    SWEPT.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tag_of` once the child's `execve` has set up its environment (spawn can return
    /// before: a vfork parent resumes when the old image is released).
    fn settled_tag_of(pid: i32) -> Option<Option<Box<[u8]>>> {
        let t = std::time::Instant::now();
        loop {
            match tag_of(pid) {
                None if t.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                other => return other,
            }
        }
    }

    #[test]
    fn the_tag_is_read_from_the_environment() {
        let mut c = std::process::Command::new("/bin/sleep")
            .arg("5")
            .env(TAG_VAR, "42-7")
            .spawn()
            .unwrap();
        let tag = settled_tag_of(c.id() as i32);
        let _ = c.kill();
        let _ = c.wait();
        assert_eq!(tag, Some(Some(Box::from(&b"42-7"[..]))));
        let mut c = std::process::Command::new("/bin/sleep")
            .arg("5")
            .env_clear()
            .env("NOT_THE_TAG", format!("{TAG_VAR}=1"))
            .spawn()
            .unwrap();
        let tag = settled_tag_of(c.id() as i32);
        let _ = c.kill();
        let _ = c.wait();
        assert_eq!(tag, Some(None));
    }
}
