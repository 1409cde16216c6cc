//! How the command's resource limits ([`shofer_core::limits::Limits`]) are enforced here,
//! by what the kernel offers this caller:
//!
//! - a **cgroup** of the run's own where the caller may make one: cgroup v2 where its own
//!   cgroup delegates the controllers (`cgroup.subtree_control`) or, as in a systemd
//!   session's leaf scope, the nearest ancestor does and is the caller's to write, with no
//!   limit stricter than the run's left below it ([`shofer_sys::proc::cgroup2_delegating`]),
//!   else the cgroup v1
//!   hierarchies of `pids`, `memory` and `cpu` (root); every limit holds there. The
//!   command's first process moves itself in before anything else (a write of `0` to each
//!   v1 `tasks` or v2 `cgroup.procs` file the supervisor opened: [`Enforced::procs_fds`];
//!   [`entry_name`] says why `tasks`); the supervisor stays outside. Once the tree is gone
//!   [`Enforced::finish`] reads what the limits stopped and hands the cgroups back;
//! - otherwise the process limit as `RLIMIT_NPROC` in the run's own user namespace (the
//!   namespace backends): since Linux 5.14 the kernel counts a user's processes per user
//!   namespace, so the host's processes of the same user do not count (host root is exempt,
//!   hence the cgroup first). Memory and CPU have no such fallback: not enforced, and said so.
//!
//! The cgroupfs calls run on a thread beside the supervisor's steps 4 and 5, after the secret
//! lookups ([`Preparing`]), joined before the command starts.
//!
//! # A cgroup's life
//! Making and removing a v1 memory cgroup costs 80-185 µs a run on these machines, a pids one
//! about 35 µs; a rename 7-18 µs. So each v1 parent keeps a small pool of spare cgroups
//! ([`pool`]): a run *claims* a spare by renaming it to its own name
//! (`shofer-<pid>-<random>`), or makes one when there is none; it writes every limit file of
//! the controller on every claim (`pids.max`, `memory.limit_in_bytes`, `cpu.cfs_period_us` and
//! `cpu.cfs_quota_us`), so no earlier run's value stays; it reads the cumulative counters
//! (`pids.events` `max`, `memory.oom_control` `oom_kill`) when it claims a spare and reports
//! the difference. After the run, once the tree is gone, an empty cgroup goes back to the pool
//! by a rename (at most [`pool::SPARES`] per parent; beyond that it is removed), and a cgroup
//! that still holds a process is left under the run's name. A v2 cgroup cannot be renamed
//! (`EPERM`), so a v2 run makes and removes its own. Runs that find the pool empty, and one
//! run in sixteen besides, sweep their parents at the end (off the start path): the cgroups
//! of runs whose supervisor is gone (a SIGKILLed sandbox hands nothing back) go to the pool
//! when empty, or away (only away from outside the initial PID namespace, where a cgroup's
//! task list hides the tasks of other namespaces: `pool::sweep`).
//!
//! # Security
//! The command can never write these files: cgroupfs is under the read-only root of the
//! namespace backends and bubblewrap, and outside Landlock's writable set (the files belong to
//! root, so the capability drop alone would not be enough). Only the caller (root, or the
//! user a v2 parent is delegated to) can make or rename cgroups in the parent. A cgroup goes
//! into the pool only when its `tasks` (v2 `cgroup.procs`) reads empty, and the pool renames
//! only its own names: `shofer-spare-<slot>`, and run names of the exact format
//! `pool::run_pid` checks. (Landlock alone does not control utime: the command may set its
//! cgroup directory's times, which only moves when the sweep may take the cgroup once the run
//! is over.)
//!
//! # Caveats
//! - A reused memory cgroup still holds the page cache charged to earlier runs (files they
//!   wrote); it counts toward the limit, and the kernel reclaims it before killing anything.
//!   Should a spare refuse a limit below what it holds, the run makes a new cgroup instead.
//!   Shared memory (tmpfs, `/dev/shm`) cannot be reclaimed without swap: a cgroup charged
//!   with any is removed rather than pooled (`pool::give_back`).
//! - The spares stay in the caller's cgroup; a manager that removes that cgroup without
//!   removing its children first (systemd and runc remove them) finds it busy.
//! - Before Linux 5.14 a write to `tasks` takes the global lock too, and so does every v2
//!   move (`CLONE_INTO_CGROUP` would avoid it there: not done).

mod pool;

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use shofer_core::limits::{show_size, Limits};

/// How one limit is enforced on this run, or why not.
pub(crate) struct Row {
    /// `procs`, `memory`, `cpu`.
    pub key: &'static str,
    /// The value, as the user would write it.
    pub value: String,
    /// How, or why not.
    pub how: Result<String, String>,
    /// The run's cgroup that holds it, if one does.
    pub cgroup: Option<PathBuf>,
}

/// One cgroup of the run's.
struct Group {
    /// Where it is (for the report and messages).
    path: PathBuf,
    /// Its parent, and its name there (the run's: `pool::run_name`).
    parent: OwnedFd,
    name: String,
    /// Its v1 `tasks` or v2 `cgroup.procs`, open for reading and writing: the command's first
    /// process writes `0` to it ([`entry_name`]), [`Enforced::finish`] reads it empty.
    entry: Option<OwnedFd>,
    /// The controller of its v1 hierarchy; `None` for the v2 cgroup (every controller).
    controller: Option<&'static str>,
}

impl Group {
    /// Whether it goes back to the pool (v1: renames work there).
    fn pooled(&self) -> bool {
        self.controller.is_some()
    }

    /// `file` of the cgroup, relative to its parent.
    fn file(&self, file: &str) -> String {
        format!("{}/{file}", self.name)
    }

    /// Touches the cgroup when `reused` (`pool::touch`), writes `writes` there and opens its
    /// entry.
    fn set_up(&mut self, reused: bool, writes: &[(&str, String)]) -> Result<(), String> {
        if reused {
            pool::touch(self.parent.as_fd(), &self.name);
        }
        for (file, value) in writes {
            rustix::fs::openat(
                &self.parent,
                self.file(file),
                OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .and_then(|f| rustix::io::write(f, value.as_bytes()))
            .map(drop)
            .or_else(|e| match e {
                // A kernel without swap accounting has no `memory.swap.max`: swap then
                // stays outside the limit, as it does in cgroup v1's `memory.limit_in_bytes`.
                rustix::io::Errno::NOENT if file.ends_with(".swap.max") => Ok(()),
                e => Err(format!("{}: {e}", self.path.join(file).display())),
            })?;
        }
        self.entry = Some(
            rustix::fs::openat(
                &self.parent,
                self.file(entry_name(self.pooled())),
                OFlags::RDWR | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| format!("{}: {e}", self.path.display()))?,
        );
        Ok(())
    }

    /// A cumulative counter of the cgroup ([`Counter`]).
    fn counter(&self, file: &str, key: &'static str, reused: bool) -> Option<Counter> {
        let file = rustix::fs::openat(
            &self.parent,
            self.file(file),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let mut c = Counter { file, key, base: 0 };
        // A new cgroup counts from 0.
        if reused {
            c.base = c.read();
        }
        Some(c)
    }

    /// Hands it back: into the pool (v1) or removed when it holds no process; else left under
    /// the run's name for the sweep.
    fn hand_back(&mut self) {
        // Without an entry no process was sent in (and it was empty when claimed).
        let empty = self
            .entry
            .take()
            .is_none_or(|e| pool::lists_none(e.as_fd()));
        if empty {
            pool::give_back(self.parent.as_fd(), &self.name, self.pooled());
        }
    }
}

/// A cumulative counter of a cgroup (`key N` lines), open, and its value when the run claimed
/// the cgroup.
struct Counter {
    file: OwnedFd,
    key: &'static str,
    base: u64,
}

impl Counter {
    fn read(&self) -> u64 {
        let mut buf = [0u8; 512];
        let n = rustix::io::pread(&self.file, &mut buf, 0).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n])
            .lines()
            .find_map(|l| l.strip_prefix(self.key))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    }

    /// What the counter rose by during the run.
    fn delta(&self) -> u64 {
        self.read().saturating_sub(self.base)
    }
}

/// The run's limits as enforced.
pub(crate) struct Enforced {
    pub limits: Limits,
    groups: Vec<Group>,
    /// `RLIMIT_NPROC` for the command (set in its user namespace).
    pub nproc: Option<u64>,
    pub rows: Vec<Row>,
    /// The memory controller's kills (v1 `memory.oom_control`, v2 `memory.events`), and the
    /// forks the pids controller refused (`pids.events`).
    oom_kills: Option<Counter>,
    refused_forks: Option<Counter>,
    /// Whether [`Enforced::finish`] sweeps the parents ([`pool::sweep`]).
    sweep: bool,
}

const CGROUP_SUPER_MAGIC: i64 = 0x27e0eb;

fn fd_magic(fd: &OwnedFd) -> Option<i64> {
    // `f_type`'s width differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::fstatfs(fd).ok().map(|s| s.f_type as i64)
}

/// The file of a cgroup that the command's first process writes `0` to: v1 `tasks` (it moves
/// the writing thread alone, which is the whole process: one thread before `exec`), v2
/// `cgroup.procs`.
///
/// Why `tasks`: moving a whole thread group takes the kernel's global
/// `cgroup_threadgroup_rwsem` for writing, and that waits for an RCU grace period once the lock
/// has been idle a while — 2-23 ms a run measured here on a loaded 2-core machine (writes of
/// `0` to `cgroup.procs` 50 ms apart), against about 20 µs for the same move through `tasks`,
/// which skips the lock for the writing thread itself (Linux 5.14, "cgroup: Optimize single
/// thread migration"; older kernels take it either way). A domain cgroup v2 refuses
/// `cgroup.threads`, so v2 pays the lock.
fn entry_name(v1: bool) -> &'static str {
    if v1 {
        "tasks"
    } else {
        "cgroup.procs"
    }
}

/// [`Enforced::prepare`] on a thread of its own, while the supervisor goes on with the next
/// steps: its cgroupfs calls are about 120 µs of a run's start, which the supervisor's steps 4
/// and 5 (git's among them, 300 µs and more) then hide. The thread starts on another CPU
/// ([`shofer_sys::thread::Pending`]), does other set-up work first when given some (the secret
/// lookups: one thread, one creation, for both), and reads and sets no environment variable.
pub(crate) struct Preparing {
    /// Whether it prepares for a command in a user namespace of its own.
    userns: bool,
    work: shofer_sys::thread::Pending<Enforced>,
}

impl Preparing {
    /// Starts `first`, then preparing `limits` for a run as [`Enforced::prepare`] says, on a
    /// thread beside the caller; all of it here and now when no thread can be started.
    pub(crate) fn start(
        first: impl FnOnce() + Send + 'static,
        limits: Limits,
        userns: bool,
        root: bool,
    ) -> Preparing {
        Preparing {
            userns,
            work: shofer_sys::thread::Pending::start(move || {
                first();
                Enforced::prepare(limits, userns, root)
            }),
        }
    }

    /// Whether it prepares for a command in a user namespace of its own (another backend
    /// needs other limits: `RLIMIT_NPROC` holds only there).
    pub(crate) fn userns(&self) -> bool {
        self.userns
    }

    /// The limits as enforced, once the thread is done.
    ///
    /// # Errors
    /// The thread panicked (its message was printed; its cgroups were handed back as it
    /// unwound).
    pub(crate) fn join(self) -> Result<Enforced, String> {
        self.work
            .join()
            .map_err(|_| "the thread that sets the limits up panicked".into())
    }
}

impl Enforced {
    /// Enforces `limits` for a run whose command gets its own user namespace (`userns`) or
    /// not, started by root (`root`) or not.
    pub(crate) fn prepare(limits: Limits, userns: bool, root: bool) -> Enforced {
        let name = pool::run_name();
        let mut out = Enforced {
            limits,
            groups: Vec::new(),
            nproc: None,
            rows: Vec::new(),
            oom_kills: None,
            refused_forks: None,
            // One run in sixteen (the name's random last digit) sweeps even when the pool
            // served it: a parent whose pool never runs dry still loses what dead runs left.
            sweep: name.ends_with('0'),
        };
        let wanted =
            limits.procs.is_some() || limits.memory.is_some() || limits.cpu_percent.is_some();
        let cgroup = if wanted {
            out.cgroup_v2(&name)
                .or_else(|v2| out.cgroup_v1(&name).map_err(|v1| format!("{v2}; {v1}")))
        } else {
            Ok(())
        };
        let why = cgroup.err();
        if let Some(p) = limits.procs {
            let how = match &why {
                None => Ok(out.how("pids")),
                Some(w) if userns && !root && !counts_per_userns() => Err(format!(
                    "no cgroup ({w}); before Linux 5.14 RLIMIT_NPROC counts the user's processes on the whole host"
                )),
                Some(_) if userns && !root => {
                    // Not above the hard limit the caller already has (raising it needs
                    // CAP_SYS_RESOURCE): that one is the stricter.
                    let hard = rustix::process::getrlimit(rustix::process::Resource::Nproc)
                        .maximum
                        .unwrap_or(u64::MAX);
                    out.nproc = Some(p.min(hard));
                    Ok(
                        "RLIMIT_NPROC in the run's user namespace (counted there since Linux 5.14)"
                            .into(),
                    )
                }
                Some(w) if root => Err(format!("no cgroup ({w}); RLIMIT_NPROC does not bind root")),
                Some(w) => Err(format!(
                    "no cgroup ({w}); no user namespace of the run's to count in"
                )),
            };
            let cgroup = out.dir_of("pids");
            out.rows.push(Row {
                key: "procs",
                value: p.to_string(),
                how,
                cgroup,
            });
        }
        // Memory and CPU hold through a cgroup only.
        for (key, controller, value) in [
            ("memory", "memory", limits.memory.map(show_size)),
            ("cpu", "cpu", limits.cpu_percent.map(|c| format!("{c}%"))),
        ] {
            if let Some(value) = value {
                let how = match &why {
                    None => Ok(out.how(controller)),
                    Some(w) => Err(format!("no cgroup ({w})")),
                };
                let cgroup = out.dir_of(controller);
                out.rows.push(Row {
                    key,
                    value,
                    how,
                    cgroup,
                });
            }
        }
        out
    }

    fn how(&self, controller: &str) -> String {
        let v2 = self.groups.iter().any(|g| g.controller.is_none());
        format!(
            "cgroup {} {controller} controller",
            if v2 { "v2" } else { "v1" }
        )
    }

    /// The run's cgroup that holds `controller`.
    fn dir_of(&self, controller: &str) -> Option<PathBuf> {
        self.groups
            .iter()
            .find(|g| g.controller.is_none_or(|c| c == controller))
            .map(|g| g.path.clone())
    }

    /// Joins the cgroup `name` in the parent cgroup at `parent` (a spare of its pool for a v1
    /// `controller`) with `writes`; returns whether it is a reused spare. Every step after
    /// the parent is relative to its descriptor: path walks down cgroupfs are the dear part of
    /// each call.
    fn join(
        &mut self,
        parent: &Path,
        name: &str,
        controller: Option<&'static str>,
        writes: &[(&str, String)],
    ) -> Result<bool, String> {
        let failed = |e: rustix::io::Errno| format!("{}: {e}", parent.display());
        let parent_fd = rustix::fs::open(
            parent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(failed)?;
        if let Some(c) = controller {
            if fd_magic(&parent_fd) != Some(CGROUP_SUPER_MAGIC) {
                return Err(format!(
                    "{} is not in a cgroup v1 {c} hierarchy",
                    parent.display()
                ));
            }
        }
        let mut reused =
            pool::claim(parent_fd.as_fd(), name, controller.is_some()).map_err(failed)?;
        // From here the cgroup is the run's: handed back on every way out.
        self.groups.push(Group {
            path: parent.join(name),
            parent: parent_fd,
            name: name.to_string(),
            entry: None,
            controller,
        });
        let g = self.groups.last_mut().expect("just pushed");
        let mut set_up = g.set_up(reused, writes);
        if set_up.is_err() && reused {
            // A spare that refuses a value (a memory limit below the page cache it still
            // holds): removed, and a new cgroup instead.
            pool::give_back(g.parent.as_fd(), name, false);
            reused = pool::claim(g.parent.as_fd(), name, false).map_err(failed)?;
            set_up = g.set_up(false, writes);
        }
        set_up?;
        // The pool ran dry (or this is v2): the sweep refills it from what dead runs left.
        self.sweep |= !reused;
        Ok(reused)
    }

    /// A cgroup v2 child of our own cgroup where it delegates every controller needed, else of
    /// the nearest ancestor that does ([`shofer_sys::proc::cgroup2_delegating`]).
    fn cgroup_v2(&mut self, name: &str) -> Result<(), String> {
        // Per limit: its controller, what the files of a cgroup the run's may be made beside
        // say of it (`bounds`), and what the run's cgroup is given (`writes`).
        let (mut wanted, mut bounds, mut writes) = (Vec::new(), Vec::new(), Vec::new());
        if let Some(p) = self.limits.procs {
            wanted.push("pids");
            bounds.push(("pids.max", p));
            writes.push(("pids.max", p.to_string()));
        }
        if let Some(m) = self.limits.memory {
            wanted.push("memory");
            bounds.extend([("memory.max", m), ("memory.high", m)]);
            writes.extend([
                ("memory.max", m.to_string()),
                ("memory.swap.max", "0".into()),
            ]);
        }
        if let Some(c) = self.limits.cpu_percent {
            wanted.push("cpu");
            bounds.push(("cpu.max", c * 1000));
            writes.push(("cpu.max", format!("{} 100000", c * 1000)));
        }
        let parent = shofer_sys::proc::cgroup2_delegating(&wanted, &bounds)?;
        let result = self.join(&parent, name, None, &writes);
        let reused = match result {
            Ok(r) => r,
            Err(e) => {
                self.remove();
                return Err(e);
            }
        };
        if self.limits.procs.is_some() {
            self.refused_forks = self.groups[0].counter("pids.events", "max ", reused);
        }
        if self.limits.memory.is_some() {
            self.oom_kills = self.groups[0].counter("memory.events", "oom_kill ", reused);
        }
        Ok(())
    }

    /// Cgroup v1 children of our own cgroups in the `pids`, `memory` and `cpu` hierarchies.
    fn cgroup_v1(&mut self, name: &str) -> Result<(), String> {
        let own = shofer_sys::proc::own_cgroups();
        let mut plan = Vec::new();
        if let Some(p) = self.limits.procs {
            plan.push(("pids", vec![("pids.max", p.to_string())]));
        }
        if let Some(m) = self.limits.memory {
            plan.push(("memory", vec![("memory.limit_in_bytes", m.to_string())]));
        }
        if let Some(c) = self.limits.cpu_percent {
            plan.push((
                "cpu",
                vec![
                    ("cpu.cfs_period_us", "100000".into()),
                    ("cpu.cfs_quota_us", (c * 1000).to_string()),
                ],
            ));
        }
        let result = (|| {
            for (controller, writes) in &plan {
                let mount = Path::new("/sys/fs/cgroup").join(controller);
                let path = own
                    .iter()
                    .find(|(c, _)| c.split(',').any(|x| x == *controller))
                    .map(|(_, p)| p.clone())
                    .ok_or_else(|| format!("no {controller} line in /proc/self/cgroup"))?;
                // (Collected again: `join("")` would end the root cgroup's path with `/`.)
                let parent: PathBuf = mount
                    .join(path.trim_start_matches('/'))
                    .components()
                    .collect();
                let reused = self.join(&parent, name, Some(controller), writes)?;
                let g = self.groups.last().expect("joined");
                match *controller {
                    "memory" => {
                        self.oom_kills = g.counter("memory.oom_control", "oom_kill ", reused)
                    }
                    "pids" => self.refused_forks = g.counter("pids.events", "max ", reused),
                    _ => {}
                }
            }
            Ok(())
        })();
        if result.is_err() {
            self.remove();
        }
        result
    }

    /// The descriptors the command's first process writes `0` to (each cgroup's `tasks` or
    /// `cgroup.procs`: [`entry_name`]).
    pub(crate) fn procs_fds(&self) -> Vec<RawFd> {
        self.groups
            .iter()
            .filter_map(|g| g.entry.as_ref().map(AsRawFd::as_raw_fd))
            .collect()
    }

    /// Once the tree is gone: hands the cgroups back (to the pool, or removed), and sweeps
    /// their parents when due. Returns the lines naming the limits that stopped something:
    /// processes the memory limit killed, forks the process limit refused, during this run.
    pub(crate) fn finish(mut self) -> Vec<String> {
        let killed = self.oom_kills.take().map_or(0, |c| c.delta());
        let refused = self.refused_forks.take().map_or(0, |c| c.delta());
        for g in self.groups.iter_mut().rev() {
            g.hand_back();
        }
        if self.sweep {
            for g in &self.groups {
                if let Some(parent) = g.path.parent() {
                    pool::sweep(g.parent.as_fd(), parent, g.pooled());
                }
            }
        }
        self.groups.clear();
        let mut lines = Vec::new();
        if killed > 0 {
            lines.push(format!(
                "shofer-sandbox: the memory limit stopped the command: {killed} process{} killed at --limit-memory {}",
                if killed == 1 { "" } else { "es" },
                self.limits.memory.map(show_size).unwrap_or_default()
            ));
        }
        if refused > 0 {
            lines.push(format!(
                "shofer-sandbox: the process limit refused {refused} fork{} at --limit-procs {}",
                if refused == 1 { "" } else { "s" },
                self.limits.procs.unwrap_or_default()
            ));
        }
        lines
    }

    /// Hands every cgroup back ([`Group::hand_back`]). Empty once the tree is gone: a task
    /// leaves its cgroups when it exits.
    fn remove(&mut self) {
        for mut g in self.groups.drain(..).rev() {
            g.hand_back();
        }
    }
}

impl Drop for Enforced {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Whether this kernel counts `RLIMIT_NPROC` per user namespace (Linux 5.14).
fn counts_per_userns() -> bool {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy();
    let mut n = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|x| x.parse::<u32>().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0)) >= (5, 14)
}
