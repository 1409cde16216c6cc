//! `/proc` scanning and parsing: one [`ProcInfo`] per process, one scan ([`ProcTable`]), one
//! descendant walk; a task's `status` fields ([`Status`]); the mount table ([`mounts`]); this
//! process's cgroups ([`own_cgroups`]) and where it may make a cgroup v2
//! ([`cgroup2_delegating`]); the machine's memory ([`mem_total`]).
//!
//! The fields come from `/proc/<pid>/stat` (proc(5)). The command name (`comm`, field 2) is
//! written between parentheses and may itself hold spaces and `)`; the kernel does not escape
//! it, so the fields are counted after the *last* `)` of the line.
//!
//! A process is identified by its pid *and* its start time (field 22, clock ticks after boot):
//! a pid can be recycled once its process is reaped, a (pid, start time) pair cannot within
//! one boot (two processes with the same pid would have to start in the same tick, which
//! needs 2^22 forks in 10 ms).

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use rustix::fs::{Mode, OFlags};

/// The longest command name `/proc/<pid>/stat` shows: `TASK_COMM_LEN` (16) for ordinary
/// processes, up to 64 bytes for kernel workqueue workers (`proc_task_name` in
/// `fs/proc/array.c`). Longer names are cut here.
pub const COMM_MAX: usize = 64;

/// A command name (`comm`) as the kernel reports it: raw bytes, not necessarily UTF-8.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Comm {
    len: u8,
    buf: [u8; COMM_MAX],
}

impl Comm {
    fn new(b: &[u8]) -> Comm {
        let n = b.len().min(COMM_MAX);
        let mut buf = [0; COMM_MAX];
        buf[..n].copy_from_slice(&b[..n]);
        Comm { len: n as u8, buf }
    }

    /// The name's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// One process, from its `/proc/<pid>/stat` line (the fields shofer uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcInfo {
    /// Process id (field 1).
    pub pid: i32,
    /// Parent's pid (field 4); 0 for the pid namespace's init seen from inside.
    pub ppid: i32,
    /// Process group id (field 5).
    pub pgid: i32,
    /// Session id (field 6).
    pub sid: i32,
    /// State letter (field 3): `R`, `S`, `D`, `T` (stopped), `t` (traced), `Z` (zombie), ...
    pub state: u8,
    /// Start time in clock ticks after boot (field 22): with `pid`, the process's identity.
    pub start: u64,
    /// The command name (field 2, without the parentheses).
    pub comm: Comm,
}

impl ProcInfo {
    /// Exited (a zombie waiting to be reaped, or being torn down): no signal reaches it.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }

    /// Stopped by a signal or a tracer: it acts on SIGTERM only after SIGCONT.
    pub fn is_stopped(&self) -> bool {
        matches!(self.state, b'T' | b't')
    }

    /// `(pid, start time)`: names this process and no later one that reuses the pid.
    pub fn identity(&self) -> (i32, u64) {
        (self.pid, self.start)
    }
}

/// Parses the contents of `/proc/<pid>/stat`. `None` when the line is not one (truncated,
/// not numeric where numbers belong).
pub fn parse_stat(buf: &[u8]) -> Option<ProcInfo> {
    let open = memchr::memchr(b'(', buf)?;
    let close = memchr::memrchr(b')', buf)?;
    if close < open {
        return None;
    }
    let pid = std::str::from_utf8(buf[..open].trim_ascii_end())
        .ok()?
        .parse()
        .ok()?;
    let comm = Comm::new(&buf[open + 1..close]);
    let rest = std::str::from_utf8(buf.get(close + 2..)?).ok()?;
    let mut it = rest.split(' ');
    let state = it.next()?.bytes().next()?;
    let ppid = it.next()?.parse().ok()?;
    let pgid = it.next()?.parse().ok()?;
    let sid = it.next()?.parse().ok()?;
    // After session: tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime
    // cstime priority nice num_threads itrealvalue starttime (field 22).
    let start = it.nth(15)?.trim_ascii_end().parse().ok()?;
    Some(ProcInfo {
        pid,
        ppid,
        pgid,
        sid,
        state,
        start,
        comm,
    })
}

/// An open `/proc` directory: stat files are opened relative to it (`openat`), which keeps a
/// scan of 1,000 processes at a few milliseconds.
#[derive(Debug)]
pub struct ProcDir {
    fd: OwnedFd,
}

impl ProcDir {
    /// Opens `/proc`.
    ///
    /// # Errors
    /// As `open(2)`: `/proc` is not mounted or not readable.
    pub fn open() -> io::Result<ProcDir> {
        let fd = rustix::fs::open(
            "/proc",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(ProcDir { fd })
    }

    /// The process `pid` now, or `None` when there is none (or `/proc` refuses).
    pub fn stat(&self, pid: i32) -> Option<ProcInfo> {
        let mut path = [0u8; 24];
        let path = stat_path(&mut path, pid.to_string().as_bytes())?;
        self.stat_at(path)
    }

    fn stat_at(&self, path: &CStr) -> Option<ProcInfo> {
        let fd = rustix::fs::openat(
            &self.fd,
            path,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        // 1 KiB holds any stat line: 52 numbers of at most 20 digits and a 64-byte name.
        let mut buf = [0u8; 1536];
        let n = loop {
            match rustix::io::read(&fd, &mut buf) {
                Err(rustix::io::Errno::INTR) => continue,
                r => break r.ok()?,
            }
        };
        parse_stat(&buf[..n])
    }

    /// Every process in `/proc` right now (threads are not listed separately). Processes
    /// that exit during the scan are left out.
    pub fn scan(&self) -> Vec<ProcInfo> {
        let mut out = Vec::with_capacity(512);
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return out;
        };
        let mut path = [0u8; 24];
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.as_encoded_bytes();
            if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
                continue;
            }
            if let Some(p) = stat_path(&mut path, name).and_then(|c| self.stat_at(c)) {
                out.push(p);
            }
        }
        out
    }
}

/// `<pid>/stat\0` in `buf`.
fn stat_path<'a>(buf: &'a mut [u8; 24], pid: &[u8]) -> Option<&'a CStr> {
    const SUFFIX: &[u8] = b"/stat\0";
    let n = pid.len() + SUFFIX.len();
    if n > buf.len() {
        return None;
    }
    buf[..pid.len()].copy_from_slice(pid);
    buf[pid.len()..n].copy_from_slice(SUFFIX);
    CStr::from_bytes_with_nul(&buf[..n]).ok()
}

/// Where this process's command line lives in its memory: `arg_start`, `arg_end` of
/// `/proc/self/stat` (fields 48 and 49, proc(5)); `None` when they cannot be read (a kernel
/// hiding them shows 0).
pub fn own_command_line_region() -> Option<(usize, usize)> {
    own_stat_region(48)
}

/// Where this process's original environment block lives in its memory (what
/// `/proc/<pid>/environ` shows): `env_start`, `env_end` of `/proc/self/stat` (fields 50 and
/// 51, proc(5)); `None` when they cannot be read.
pub fn own_environment_region() -> Option<(usize, usize)> {
    own_stat_region(50)
}

/// Fields `first` and `first + 1` of `/proc/self/stat`, a start and an end address.
fn own_stat_region(first: usize) -> Option<(usize, usize)> {
    let buf = std::fs::read("/proc/self/stat").ok()?;
    let close = memchr::memrchr(b')', &buf)?;
    let rest = std::str::from_utf8(buf.get(close + 2..)?).ok()?;
    // `rest` starts at field 3 (state): field N is at index N - 3.
    let mut it = rest.split(' ');
    let start: usize = it.nth(first - 3)?.parse().ok()?;
    let end: usize = it.next()?.trim_end().parse().ok()?;
    (start != 0 && end > start).then_some((start, end))
}

/// The process `pid` now (one read of its stat file), or `None` when there is none.
pub fn read(pid: i32) -> Option<ProcInfo> {
    parse_stat(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// A task's `/proc/<pid>/status` (proc(5)): `Name:\tvalue` lines, read once.
#[derive(Debug, Clone)]
pub struct Status(String);

impl Status {
    /// The status of task `pid` now, or `None` when there is none.
    pub fn read(pid: i32) -> Option<Status> {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .map(Status)
    }

    /// The whitespace-separated words of the field `name` (`"Uid"`: real, effective, saved
    /// and filesystem uid), or `None` without such a line.
    pub fn field(&self, name: &str) -> Option<Vec<&str>> {
        self.0.lines().find_map(|l| {
            let value = l.strip_prefix(name)?.strip_prefix(':')?;
            Some(value.split_whitespace().collect())
        })
    }

    /// The first word of the field `name`.
    pub fn first(&self, name: &str) -> Option<&str> {
        self.field(name)?.first().copied()
    }

    /// The thread group (process) of thread `tid`, from its `Tgid:` line.
    pub fn tgid(tid: i32) -> Option<i32> {
        Status::read(tid)?.first("Tgid")?.parse().ok()
    }
}

/// The live processes (this one excepted) whose command line (`/proc/<pid>/cmdline`: the
/// arguments, each ended by a NUL) satisfies `matches`: how tests find what a command left
/// behind by a unique marker in its arguments.
pub fn live_with_cmdline(matches: impl Fn(&[u8]) -> bool) -> Vec<ProcInfo> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    ProcTable::scan()
        .procs
        .into_iter()
        .filter(|p| p.pid != me && !p.is_dead())
        .filter(|p| std::fs::read(format!("/proc/{}/cmdline", p.pid)).is_ok_and(|c| matches(&c)))
        .collect()
}

/// One scan of every process, indexed by parent.
#[derive(Debug, Default)]
pub struct ProcTable {
    procs: Vec<ProcInfo>,
    /// Indices into `procs`, ordered by parent pid (a sorted list rather than a hash map:
    /// less code in the static sandbox binary, same speed for a few thousand processes).
    by_parent: Vec<usize>,
}

impl ProcTable {
    /// A table of `procs` (e.g. a scan, or a hand-made list in tests).
    pub fn new(procs: Vec<ProcInfo>) -> ProcTable {
        let mut by_parent: Vec<usize> = (0..procs.len()).collect();
        by_parent.sort_by_key(|&i| procs[i].ppid);
        ProcTable { procs, by_parent }
    }

    /// Every process now (see [`ProcDir::scan`]); empty when `/proc` cannot be read.
    pub fn scan() -> ProcTable {
        ProcTable::new(ProcDir::open().map(|d| d.scan()).unwrap_or_default())
    }

    /// The processes, in scan order.
    pub fn procs(&self) -> &[ProcInfo] {
        &self.procs
    }

    /// Indices (into [`ProcTable::procs`]) of `pid`'s children, zombies included.
    pub fn children(&self, pid: i32) -> &[usize] {
        let lo = self
            .by_parent
            .partition_point(|&i| self.procs[i].ppid < pid);
        let hi = self
            .by_parent
            .partition_point(|&i| self.procs[i].ppid <= pid);
        &self.by_parent[lo..hi]
    }

    /// Indices of every descendant of `pid` (children, their children, ...; zombies
    /// included; not `pid` itself), parents before their children.
    pub fn descendants(&self, pid: i32) -> Vec<usize> {
        let mut out: Vec<usize> = self.children(pid).to_vec();
        let mut i = 0;
        while i < out.len() {
            let p = self.procs[out[i]].pid;
            // pid 0 is "no parent" (init seen from inside its namespace): never walk below it
            // from a real process, and never loop on a table that claims a process is its own
            // ancestor.
            if p != pid && p != 0 {
                out.extend_from_slice(self.children(p));
            }
            i += 1;
            if out.len() > self.procs.len() {
                break;
            }
        }
        out
    }
}

/// One line of `/proc/<pid>/mountinfo` (proc(5)), the fields shofer uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The device (`major:minor` of the filesystem).
    pub dev: (u32, u32),
    /// The directory of the filesystem this mount shows (`/` for a whole filesystem, deeper
    /// for a bind mount), unescaped, as bytes (a path need not be UTF-8).
    pub root: PathBuf,
    /// Where it is mounted, unescaped, as bytes.
    pub point: PathBuf,
    /// The per-mount options (`rw,nosuid,relatime`, …).
    pub options: String,
}

/// The mounts of a `mountinfo` text, in order; malformed lines are skipped. Paths are
/// unescaped (`\040` is a space) and kept as bytes: one that is not UTF-8 is a path all the
/// same, and nothing else in a line is cut short by it.
pub fn parse_mountinfo(text: &[u8]) -> Vec<Mount> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| {
            let mut fields = line.split(|&b| b == b' ');
            let dev = std::str::from_utf8(fields.nth(2)?).ok()?;
            let (major, minor) = dev.split_once(':')?;
            let dev = (major.parse().ok()?, minor.parse().ok()?);
            let root = unescape(fields.next()?);
            let point = unescape(fields.next()?);
            let options = String::from_utf8_lossy(fields.next()?).into_owned();
            Some(Mount {
                dev,
                root,
                point,
                options,
            })
        })
        .collect()
}

/// This process's mounts (`/proc/self/mountinfo`).
///
/// # Errors
/// Reading the file.
pub fn mounts() -> io::Result<Vec<Mount>> {
    Ok(parse_mountinfo(&read_whole("/proc/self/mountinfo")?))
}

/// The whole of a small file, above all one the kernel generates as it is read (`/proc`),
/// whose `stat` says 0 bytes: read into 16 KiB at once, grown only when that fills.
/// `std::fs::read` sizes its buffer by `stat`, so it starts at 32 bytes there and doubles:
/// eight reads for a 5 KiB mountinfo, on the start path of every run that hides a secret.
///
/// # Errors
/// Opening or reading `path`.
pub fn read_whole(path: &str) -> io::Result<Vec<u8>> {
    let file = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(2 * len, 0);
        }
        match rustix::io::read(&file, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// Undoes the octal escapes of mountinfo (`\040` space, `\011` tab, `\012` newline, `\134`
/// backslash).
fn unescape(b: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// `/proc/self/cgroup`: (controllers, path) per line (cgroups(7)).
pub fn own_cgroups() -> Vec<(String, String)> {
    // On every run's start path with limits: one read of the whole file (a dozen lines).
    let buf = read_whole("/proc/self/cgroup").unwrap_or_default();
    String::from_utf8_lossy(&buf)
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let _id = f.next()?;
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect()
}

/// The cgroup v2 directory a process of this one's may make a child cgroup in with every
/// controller of `controllers`: its own cgroup when that delegates them all (its
/// `cgroup.subtree_control` lists them: the root cgroup, a container's), else the nearest
/// ancestor that does — where a systemd session puts its processes, in a leaf scope whose
/// slice (`user@UID.service/app.slice`, delegated to the user) delegates the controllers —
/// provided no cgroup left below it has a limit of its own (`pids.max`, `memory.max`,
/// `memory.high`, `cpu.max`) looser than none or below the new cgroup's own, `bounds` (each
/// file's value there: a number; `cpu.max` as the quota per 100,000 µs): the new cgroup is
/// outside that limit, so its own must be at least as strict (systemd gives every scope a
/// `pids.max`, 15 % of the PIDs, by default). The
/// kernel's "no internal processes" rule keeps a delegating cgroup other than the root free of
/// processes, so the new cgroup is a sibling of a cgroup on the way up, and moving into it
/// needs write access to the ancestor's `cgroup.procs` (cgroup v2's delegation rules): that is
/// checked too, so the caller learns it here rather than when the command's first process
/// moves.
///
/// # Errors
/// Why not: no unified hierarchy on `/sys/fs/cgroup`, no v2 line in `/proc/self/cgroup` (or
/// one outside the cgroup namespace), no cgroup on the way up delegates them before one with a
/// limit of its own stricter than `bounds`, or the one that does is not the caller's to write.
pub fn cgroup2_delegating(
    controllers: &[&str],
    bounds: &[(&str, u64)],
) -> Result<std::path::PathBuf, String> {
    let root = std::path::Path::new("/sys/fs/cgroup");
    // CGROUP2_SUPER_MAGIC; `f_type`'s width differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    if rustix::fs::statfs(root).map(|s| s.f_type as i64).ok() != Some(0x6367_7270) {
        return Err("cgroup v2 is not mounted on /sys/fs/cgroup".into());
    }
    let own = own_cgroups()
        .into_iter()
        .find(|(c, _)| c.is_empty())
        .map(|(_, p)| p)
        .ok_or("no cgroup v2 line in /proc/self/cgroup")?;
    // Outside its cgroup namespace's root the path climbs (`/../..`): not one to join.
    if own.split('/').any(|c| c == "..") {
        return Err(format!(
            "this process's cgroup {own} is outside its cgroup namespace"
        ));
    }
    let own: std::path::PathBuf = root
        .join(own.trim_start_matches('/'))
        .components()
        .collect();
    let wanted = format!(
        "the {} controller{}",
        controllers.join(", "),
        if controllers.len() == 1 { "" } else { "s" }
    );
    let mut dir = own.as_path();
    loop {
        let on = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
        let on: Vec<&str> = on.split_whitespace().collect();
        if controllers.iter().all(|c| on.contains(c)) {
            let procs = dir.join("cgroup.procs");
            return match rustix::fs::access(&procs, rustix::fs::Access::WRITE_OK) {
                Ok(()) => Ok(dir.to_path_buf()),
                Err(e) => Err(format!(
                    "{} delegates {wanted}, but moving out of {} needs {}: {e}",
                    dir.display(),
                    own.display(),
                    procs.display()
                )),
            };
        }
        // Going up leaves `dir` behind: a cgroup made above it would escape a limit of its
        // (a scope or service started with one), so not past one stricter than its own.
        for file in ["pids.max", "memory.max", "memory.high", "cpu.max"] {
            let Ok(v) = std::fs::read_to_string(dir.join(file)) else {
                continue;
            };
            let mut words = v.split_whitespace();
            let first = words.next().unwrap_or("max");
            if first == "max" {
                continue;
            }
            let limit = first.parse::<u64>().ok().map(|n| match words.next() {
                // cpu.max: "QUOTA PERIOD".
                Some(period) => period
                    .parse::<u64>()
                    .map_or(0, |p| n.saturating_mul(100_000) / p.max(1)),
                None => n,
            });
            let own = bounds.iter().find(|(f, _)| *f == file).map(|(_, b)| *b);
            if !matches!((own, limit), (Some(own), Some(limit)) if own <= limit) {
                return Err(format!(
                    "{} has a limit of its own ({file} {}){}, which a cgroup beside it would escape, and does not delegate {wanted}",
                    dir.display(),
                    v.trim(),
                    own.map_or(String::new(), |o| format!(" below the run's {o}")),
                ));
            }
        }
        match dir.parent() {
            Some(up) if dir != root => dir = up,
            _ => {
                return Err(format!(
                    "no cgroup from {} up delegates {wanted}",
                    own.display()
                ))
            }
        }
    }
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`, from `sysinfo(2)`: one call
/// on every run's start path instead of a `/proc` file).
pub fn mem_total() -> Option<u64> {
    let info = rustix::system::sysinfo();
    info.totalram.checked_mul(u64::from(info.mem_unit.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    #[test]
    fn read_whole_reads_a_generated_file_and_one_past_its_first_buffer() {
        // /proc/self/status names this process; its size says 0.
        let status = String::from_utf8(read_whole("/proc/self/status").unwrap()).unwrap();
        assert!(status.contains(&format!("\nPid:\t{}\n", std::process::id())));
        let big: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let path = std::env::temp_dir().join(format!("shofer-read-whole-{}", std::process::id()));
        std::fs::write(&path, &big).unwrap();
        let got = read_whole(path.to_str().unwrap());
        std::fs::remove_file(&path).unwrap();
        assert_eq!(got.unwrap(), big);
        assert!(read_whole("/nonexistent/shofer").is_err());
    }

    #[test]
    fn the_machines_memory_is_meminfos_total() {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap();
        let kib = text
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .unwrap();
        let kib: u64 = kib.trim().trim_end_matches("kB").trim().parse().unwrap();
        assert_eq!(mem_total(), Some(kib * 1024));
    }

    #[test]
    fn status_fields_are_found_by_whole_name() {
        let s =
            Status("Name:\tsh\nUmask:\t0022\nTgid:\t41\nUid:\t0\t1000\t0\t0\nGroups:\t\n".into());
        assert_eq!(s.first("Tgid"), Some("41"));
        assert_eq!(s.field("Uid"), Some(vec!["0", "1000", "0", "0"]));
        assert_eq!(s.field("Groups"), Some(vec![]));
        assert_eq!(s.first("Umask"), Some("0022"));
        assert_eq!(s.first("Ui"), None); // a prefix is not the field
        let me = crate::process::getpid();
        let pid = me.to_string();
        assert_eq!(Status::read(me).unwrap().first("Tgid"), Some(pid.as_str()));
    }

    proptest::proptest! {
        /// The command names its processes (`comm`, up to 15 bytes: any but NUL): no stat
        /// line panics the parser, and a real one round-trips whatever the name (issue 29).
        #[test]
        fn any_stat_bytes_parse_without_panic_and_any_comm_round_trips(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            comm in proptest::collection::vec(1u8..=255, 0..16),
            pid in 1i32..=i32::MAX,
            start in proptest::prelude::any::<u64>(),
        ) {
            let _ = parse_stat(&junk);
            let mut line = format!("{pid} (").into_bytes();
            line.extend_from_slice(&comm);
            line.extend_from_slice(
                format!(") S 1 {pid} 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1 2\n").as_bytes(),
            );
            let p = parse_stat(&line).unwrap();
            proptest::prop_assert_eq!((p.pid, p.ppid, p.pgid, p.sid, p.start), (pid, 1, pid, 7, start));
            proptest::prop_assert_eq!(p.comm.as_bytes(), &comm[..]);
        }
    }

    #[test]
    fn comm_with_spaces_and_parentheses_is_kept_whole() {
        let line = b"4242 (a) b (c)) S 1 4242 4240 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10\n";
        let p = parse_stat(line).unwrap();
        assert_eq!(
            (p.pid, p.ppid, p.pgid, p.sid, p.state, p.start),
            (4242, 1, 4242, 4240, b'S', 987654)
        );
        assert_eq!(p.comm.as_bytes(), b"a) b (c)");
    }

    #[test]
    fn truncated_or_garbled_lines_are_refused() {
        assert!(parse_stat(b"").is_none());
        assert!(parse_stat(b"12 (x) S 1 2").is_none());
        assert!(parse_stat(b"x (y) S 1 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5").is_none());
        assert!(parse_stat(b"12 )x( S 1 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5").is_none());
    }

    #[test]
    fn a_real_process_with_a_hostile_name_parses() {
        // A program named like a stat line: the parser must count from the last ')'.
        let dir = std::env::temp_dir().join(format!("shofer-sys-comm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("x) R 1 1 1 (y");
        std::fs::copy("/bin/sleep", &exe).unwrap();
        let mut child = std::process::Command::new(&exe).arg("5").spawn().unwrap();
        let pid = child.id() as i32;
        let p = read(pid).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(p.pid, pid);
        assert_eq!(p.ppid, std::process::id() as i32);
        // comm is cut at 15 bytes by the kernel.
        assert_eq!(p.comm.as_bytes(), &b"x) R 1 1 1 (y"[..]);
    }

    #[test]
    fn scan_and_stat_agree_on_ourselves() {
        let me = std::process::id() as i32;
        let dir = ProcDir::open().unwrap();
        let mine = dir.stat(me).unwrap();
        assert_eq!(mine.pid, me);
        assert!(mine.start > 0);
        assert!(dir.scan().iter().any(|p| p.identity() == mine.identity()));
        assert_eq!(read(me).unwrap().identity(), mine.identity());
        assert!(dir.stat(-1).is_none());
    }

    #[test]
    fn descendants_walk_the_whole_subtree_only() {
        let p = |pid, ppid| ProcInfo {
            pid,
            ppid,
            pgid: pid,
            sid: pid,
            state: b'S',
            start: 1,
            comm: Comm::new(b"t"),
        };
        let t = ProcTable::new(vec![
            p(1, 0),
            p(10, 1),
            p(11, 10),
            p(12, 11),
            p(20, 1),
            p(13, 10),
        ]);
        let mut d: Vec<i32> = t
            .descendants(10)
            .iter()
            .map(|&i| t.procs()[i].pid)
            .collect();
        d.sort_unstable();
        assert_eq!(d, vec![11, 12, 13]);
        assert!(t.descendants(12).is_empty());
    }

    #[test]
    fn mountinfo_lines_give_device_root_point_and_options() {
        let text = b"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                    28 27 0:25 /sub/dir /mnt/a\\040b ro,nosuid,nodev,relatime - tmpfs x ro\n\
                    29 27 0:26 / /mnt/\xff\\011 rw - tmpfs x rw\n\
                    garbage\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(
            (m[0].dev, m[0].root.as_path(), m[0].point.as_path()),
            ((254, 0), Path::new("/"), Path::new("/"))
        );
        assert_eq!(m[1].root, Path::new("/sub/dir"));
        assert_eq!(m[1].point, Path::new("/mnt/a b"));
        assert_eq!(m[1].options, "ro,nosuid,nodev,relatime");
        assert_eq!(m[2].point.as_os_str().as_bytes(), b"/mnt/\xff\t");
    }

    #[test]
    fn unescape_leaves_plain_text_and_short_escapes() {
        assert_eq!(unescape(b"/a\\134b\\011"), Path::new("/a\\b\t"));
        assert_eq!(unescape(b"/x\\04"), Path::new("/x\\04"));
    }
}
