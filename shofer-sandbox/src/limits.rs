//! How the command's resource limits ([`shofer_core::limits::Limits`]) are enforced here,
//! by what the kernel offers this caller:
//!
//! - a **cgroup** of the run's own where the caller may make one: cgroup v2 where its own
//!   cgroup delegates the controllers (`cgroup.subtree_control`), else the cgroup v1
//!   hierarchies of `pids`, `memory` and `cpu` (root); every limit holds there. The
//!   command's first process moves itself in before anything else (a write of `0` to each
//!   `cgroup.procs` the supervisor opened: [`Enforced::procs_fds`]); the supervisor stays
//!   outside; the cgroups are removed once the tree is gone ([`Enforced::finish`]), which
//!   also tells whether the memory limit killed a process;
//! - otherwise the process limit as `RLIMIT_NPROC` in the run's own user namespace (the
//!   namespace backends): since Linux 5.14 the kernel counts a user's processes per user
//!   namespace, so the host's processes of the same user do not count (host root is exempt,
//!   hence the cgroup first). Memory and CPU have no such fallback: not enforced, and said so.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use shofer_core::limits::{show_size, Limits};

/// How one limit is enforced on this run, or why not.
pub(crate) struct Row {
    /// `procs`, `memory`, `cpu`.
    pub key: &'static str,
    /// The value, as the user would write it.
    pub value: String,
    /// How, or why not.
    pub how: Result<String, String>,
}

/// The run's limits as enforced.
pub(crate) struct Enforced {
    pub limits: Limits,
    cgroups: Vec<PathBuf>,
    procs: Vec<OwnedFd>,
    /// `RLIMIT_NPROC` for the command (set in its user namespace).
    pub nproc: Option<u64>,
    pub rows: Vec<Row>,
    /// Where the memory controller's counters are (v1 `memory.oom_control`, v2
    /// `memory.events`), and the pids controller's (`pids.events`).
    oom_file: Option<PathBuf>,
    pids_file: Option<PathBuf>,
}

const CGROUP_SUPER_MAGIC: i64 = 0x27e0eb;
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

fn fs_magic(path: &Path) -> Option<i64> {
    // `f_type`'s width differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::statfs(path).ok().map(|s| s.f_type as i64)
}

/// A new cgroup `name` under the directory `parent`, after removing the empty ones runs left
/// there whose supervisor is gone (a SIGKILLed sandbox removes nothing).
fn make(parent: &Path, name: &str) -> io::Result<PathBuf> {
    if let Ok(entries) = fs::read_dir(parent) {
        for e in entries.flatten() {
            let n = e.file_name();
            let pid = n
                .to_str()
                .and_then(|n| n.strip_prefix("shofer-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<i32>().ok());
            // A minute old at least: a supervisor in another PID namespace names its cgroup
            // by a PID this one may not see, and has one empty until its command enters.
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|d| d.as_secs() > 60));
            if let (Some(pid), true) = (pid, old) {
                if shofer_sys::proc::read(pid).is_none() {
                    // Fails on one that still holds a process: left alone.
                    let _ = fs::remove_dir(e.path());
                }
            }
        }
    }
    let dir = parent.join(name);
    fs::create_dir(&dir)?;
    Ok(dir)
}

fn open_procs(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    Ok(fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(dir.join("cgroup.procs"))?
        .into())
}

impl Enforced {
    /// Enforces `limits` for a run whose command gets its own user namespace (`userns`) or
    /// not, started by root (`root`) or not.
    pub(crate) fn prepare(limits: Limits, userns: bool, root: bool) -> Enforced {
        let mut out = Enforced {
            limits,
            cgroups: Vec::new(),
            procs: Vec::new(),
            nproc: None,
            rows: Vec::new(),
            oom_file: None,
            pids_file: None,
        };
        let wanted =
            limits.procs.is_some() || limits.memory.is_some() || limits.cpu_percent.is_some();
        let name = format!(
            "shofer-{}-{}",
            std::process::id(),
            shofer_sys::statedir::random_suffix()
        );
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
            out.rows.push(Row {
                key: "procs",
                value: p.to_string(),
                how,
            });
        }
        // Memory and CPU hold through a cgroup only.
        for (key, value) in [
            ("memory", limits.memory.map(show_size)),
            ("cpu", limits.cpu_percent.map(|c| format!("{c}%"))),
        ] {
            if let Some(value) = value {
                let how = match &why {
                    None => Ok(out.how(key)),
                    Some(w) => Err(format!("no cgroup ({w})")),
                };
                out.rows.push(Row { key, value, how });
            }
        }
        out
    }

    fn how(&self, controller: &str) -> String {
        let v2 = self.cgroups.len() == 1 && fs_magic(&self.cgroups[0]) == Some(CGROUP2_SUPER_MAGIC);
        format!(
            "cgroup {} {controller} controller",
            if v2 { "v2" } else { "v1" }
        )
    }

    /// A cgroup v2 child of our own cgroup, where it delegates every controller needed.
    fn cgroup_v2(&mut self, name: &str) -> Result<(), String> {
        let root = Path::new("/sys/fs/cgroup");
        if fs_magic(root) != Some(CGROUP2_SUPER_MAGIC) {
            return Err("cgroup v2 is not mounted on /sys/fs/cgroup".into());
        }
        let own = shofer_sys::proc::own_cgroups()
            .into_iter()
            .find(|(c, _)| c.is_empty())
            .map(|(_, p)| p)
            .ok_or("no cgroup v2 line in /proc/self/cgroup")?;
        let parent = root.join(own.trim_start_matches('/'));
        let enabled = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
        let enabled: Vec<&str> = enabled.split_whitespace().collect();
        for (c, on) in [
            ("pids", self.limits.procs.is_some()),
            ("memory", self.limits.memory.is_some()),
            ("cpu", self.limits.cpu_percent.is_some()),
        ] {
            if on && !enabled.contains(&c) {
                return Err(format!(
                    "{} does not delegate the {c} controller",
                    parent.display()
                ));
            }
        }
        let dir = make(&parent, name).map_err(|e| format!("{}: {e}", parent.display()))?;
        self.cgroups.push(dir.clone());
        let mut writes = Vec::new();
        if let Some(p) = self.limits.procs {
            writes.push(("pids.max", p.to_string()));
            self.pids_file = Some(dir.join("pids.events"));
        }
        if let Some(m) = self.limits.memory {
            writes.push(("memory.max", m.to_string()));
            writes.push(("memory.swap.max", "0".into()));
            self.oom_file = Some(dir.join("memory.events"));
        }
        if let Some(c) = self.limits.cpu_percent {
            writes.push(("cpu.max", format!("{} 100000", c * 1000)));
        }
        self.write_all(&dir, &writes)?;
        self.procs
            .push(open_procs(&dir).map_err(|e| format!("{}: {e}", dir.display()))?);
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
                if fs_magic(&mount) != Some(CGROUP_SUPER_MAGIC) {
                    return Err(format!(
                        "no cgroup v1 {controller} hierarchy on {}",
                        mount.display()
                    ));
                }
                let path = own
                    .iter()
                    .find(|(c, _)| c.split(',').any(|x| x == *controller))
                    .map(|(_, p)| p.clone())
                    .ok_or_else(|| format!("no {controller} line in /proc/self/cgroup"))?;
                let parent = mount.join(path.trim_start_matches('/'));
                let dir = make(&parent, name).map_err(|e| format!("{}: {e}", parent.display()))?;
                self.cgroups.push(dir.clone());
                self.write_all(&dir, writes)?;
                match *controller {
                    "memory" => self.oom_file = Some(dir.join("memory.oom_control")),
                    "pids" => self.pids_file = Some(dir.join("pids.events")),
                    _ => {}
                }
                self.procs
                    .push(open_procs(&dir).map_err(|e| format!("{}: {e}", dir.display()))?);
            }
            Ok(())
        })();
        if result.is_err() {
            self.remove();
        }
        result
    }

    fn write_all(&self, dir: &Path, writes: &[(&str, String)]) -> Result<(), String> {
        for (file, value) in writes {
            fs::write(dir.join(file), value)
                .map_err(|e| format!("{}: {e}", dir.join(file).display()))?;
        }
        Ok(())
    }

    /// The `cgroup.procs` descriptors the command's first process writes `0` to.
    pub(crate) fn procs_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// Once the tree is gone: removes the cgroups. Returns the lines naming the limits that
    /// stopped something: processes the memory limit killed, forks the process limit refused.
    pub(crate) fn finish(mut self) -> Vec<String> {
        let counter = |file: &Option<PathBuf>, key: &str| {
            file.as_ref()
                .and_then(|f| fs::read_to_string(f).ok())
                .and_then(|t| {
                    t.lines()
                        .find_map(|l| l.strip_prefix(key))
                        .and_then(|n| n.trim().parse::<u64>().ok())
                })
                .unwrap_or(0)
        };
        let killed = counter(&self.oom_file, "oom_kill ");
        let refused = counter(&self.pids_file, "max ");
        self.procs.clear();
        self.remove();
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

    fn remove(&mut self) {
        // Empty once the tree is gone: a task leaves its cgroups when it exits.
        for dir in self.cgroups.drain(..).rev() {
            let _ = fs::remove_dir(&dir);
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
