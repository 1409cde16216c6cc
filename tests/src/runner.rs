//! Running the catalogue: scratch trees, cells, sandbox invocations, judgement.
//!
//! A *cell* is one backend × Landlock ABI level × user. For each cell the harness first runs a
//! no-op through the sandbox (the preflight): exit 125 means the backend is not available here
//! (a `skip` row with the sandbox's own reason), or that the cell is degraded and needs
//! `--allow-degraded` (then it retries with the flag, and that refusal is itself checked).
//! Then every case gets a fresh scratch tree `<scratch>/c/<cell>/<case>/{wt,out}` — `wt` is the
//! worktree, `out` a sibling directory outside it owned by the same user, so only the sandbox
//! (never plain file permissions) stands between the attack and `out`.
//!
//! Judgement (see [`judge`]): an attack that was stopped is `pass`; one that got through is a
//! `gap` only if the run's `--report` says that protection is not enforced **and** the
//! expected-gap list in `tests/README.md` names the case for this backend and ABI; otherwise
//! it is a `FAIL`. Outside state is checked from outside (a snapshot of `out` before and
//! after), so an attack that lies about its result cannot hide a change.

use crate::attacks::{Attack, RESULT_PREFIX};
use crate::catalogue::{Case, Scope};
use crate::gaps::{self, GapRule};
use crate::sys;
use serde_json::Value;
use shofer_core::policy::Protection;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Parsed command line of a suite run.
#[derive(Debug, Clone)]
pub struct Opts {
    /// The `shofer-sandbox` binary under test.
    pub sandbox: PathBuf,
    /// Print JSON instead of the table.
    pub json: bool,
    /// Backends to try (default: landlock, userns, bwrap, layered).
    pub backends: Vec<String>,
    /// Landlock ABI levels (default: 1..=host); empty on a kernel without Landlock.
    pub abis: Option<Vec<u32>>,
    /// Users: `root` and/or `unpriv`.
    pub users: Vec<String>,
    /// Only cases whose name contains this.
    pub only: Option<String>,
    /// The uid (and gid) used for `unpriv` (default 65534).
    pub unpriv_uid: u32,
    /// Parent of the scratch tree (default /var/tmp; must not be under /tmp).
    pub scratch_parent: PathBuf,
    /// Keep the scratch tree for inspection.
    pub keep: bool,
}

/// One result row.
#[derive(Debug, Clone)]
pub struct Row {
    /// Case name.
    pub case: String,
    /// Backend.
    pub backend: String,
    /// ABI level (`host` for the auto cell, `-` when not applicable).
    pub abi: String,
    /// `root` or `unpriv`.
    pub user: String,
    /// `pass`, `FAIL`, `gap` or `skip`.
    pub result: &'static str,
    /// What happened.
    pub detail: String,
}

/// Who runs the sandbox in a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    /// uid 0.
    Root,
    /// A numeric uid (= gid), switched to with setgroups([]) + setgid + setuid.
    Unpriv(u32),
    /// Not root and cannot switch: the current ids.
    Current(u32, u32),
}

impl User {
    /// Label for rows.
    pub fn label(self) -> &'static str {
        match self {
            User::Root => "root",
            _ => "unpriv",
        }
    }

    /// The (uid, gid) owning the scratch tree.
    pub fn ids(self) -> (u32, u32) {
        match self {
            User::Root => (0, 0),
            User::Unpriv(u) => (u, u),
            User::Current(u, g) => (u, g),
        }
    }

    /// Whether it is root.
    pub fn is_root(self) -> bool {
        matches!(self, User::Root)
    }
}

/// One backend × ABI × user.
#[derive(Debug, Clone)]
pub struct Cell {
    /// `landlock`, `userns`, `bwrap`, `layered`, or `auto` for the global cases.
    pub backend: String,
    /// `--max-abi` value, or `None` for the host's.
    pub abi: Option<u32>,
    /// The user.
    pub user: User,
    /// Whether `--allow-degraded` is needed in this cell.
    pub degraded: bool,
}

impl Cell {
    fn id(&self) -> String {
        format!(
            "{}-{}-{}",
            self.backend,
            self.abi.map_or("host".to_string(), |a| a.to_string()),
            self.user.label()
        )
    }

    fn abi_label(&self) -> String {
        self.abi.map_or("host".to_string(), |a| a.to_string())
    }
}

/// Facts about this machine and the binaries, shared by every case.
pub struct World {
    /// Options.
    pub opts: Opts,
    /// Scratch root (canonical).
    pub scratch: PathBuf,
    /// Copy of the sandbox binary (mode 0755, root-owned, outside every worktree).
    pub sandbox: PathBuf,
    /// Copy of this binary, the attack runner.
    pub me: PathBuf,
    /// A setuid-root copy of this binary, if it could be made.
    pub suid: Option<PathBuf>,
    /// The host's Landlock ABI (0 if none).
    pub host_abi: u32,
    /// `--probe --json` of the sandbox.
    pub probe: Option<Value>,
    /// The expected-gap list.
    pub gaps: Vec<GapRule>,
    /// `git`, if present.
    pub git: Option<PathBuf>,
    /// `python3`, if present.
    pub python: Option<PathBuf>,
    /// `/bin/sh`, if present.
    pub sh: bool,
    /// Whether `user.` xattrs work on the scratch filesystem.
    pub xattr: bool,
    /// `/proc/self/ns/mnt` of the harness.
    pub mntns: String,
    /// `/proc/self/ns/pid` of the harness.
    pub pidns: String,
    /// `/proc/self/ns/net` of the harness.
    pub netns: String,
    /// PATH handed to sandboxed commands.
    pub path_env: String,
    /// Marker counter.
    seq: RefCell<u32>,
}

/// The first directory above `path` that `uid` (gid = uid, no other groups) may not search,
/// by its mode bits (path_resolution(7)).
pub fn untraversable_ancestor(path: &Path, uid: u32) -> Option<PathBuf> {
    path.ancestors().skip(1).find_map(|d| {
        let m = std::fs::metadata(d).ok()?;
        let bit = if m.uid() == uid {
            0o100
        } else if m.gid() == uid {
            0o010
        } else {
            0o001
        };
        (m.mode() & bit == 0).then(|| d.to_path_buf())
    })
}

/// Finds an executable on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    path.split(':').map(|d| Path::new(d).join(name)).find(|p| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

impl World {
    /// Prepares the scratch tree and copies of the binaries.
    ///
    /// # Errors
    /// A message naming the path that could not be prepared.
    pub fn new(opts: Opts) -> Result<World, String> {
        let gaps = gaps::parse(gaps::README)?;
        let parent = &opts.scratch_parent;
        std::fs::create_dir_all(parent).map_err(|e| format!("create {}: {e}", parent.display()))?;
        let parent = parent
            .canonicalize()
            .map_err(|e| format!("{}: {e}", parent.display()))?;
        if parent.starts_with("/tmp") {
            return Err(format!(
                "scratch parent {} is under /tmp, which the sandbox allows writing: use --scratch with a path outside /tmp",
                parent.display()
            ));
        }
        // Safety: getpid never fails.
        let scratch = parent.join(format!("shofer-containment-{}", unsafe { libc::getpid() }));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(scratch.join("bin"))
            .map_err(|e| format!("create {}: {e}", scratch.display()))?;
        for d in [&scratch, &scratch.join("bin")] {
            let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755));
        }
        let name = opts
            .sandbox
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_else(|| "shofer-sandbox".into());
        let sandbox = scratch.join("bin").join(name);
        std::fs::copy(&opts.sandbox, &sandbox)
            .map_err(|e| format!("copy {}: {e}", opts.sandbox.display()))?;
        let me_src =
            std::fs::read_link("/proc/self/exe").map_err(|e| format!("/proc/self/exe: {e}"))?;
        let me = scratch.join("bin/shofer-containment");
        std::fs::copy(&me_src, &me).map_err(|e| format!("copy {}: {e}", me_src.display()))?;
        for b in [&sandbox, &me] {
            let _ = std::fs::set_permissions(b, std::fs::Permissions::from_mode(0o755));
        }
        let suid = if sys::ids().0 == 0 {
            let s = scratch.join("bin/suid-containment");
            std::fs::copy(&me_src, &s).ok().and_then(|_| {
                sys::chown(&s, 0, 0).ok()?;
                sys::chmod(&s, 0o4755).ok()?;
                Some(s)
            })
        } else {
            None
        };
        // The unprivileged cells run these copies (never the build tree, which may be in a home
        // that user cannot enter): the whole path must be searchable by that uid.
        if sys::ids().0 == 0 && opts.users.iter().any(|u| u == "unpriv") {
            for b in [&sandbox, &me] {
                if let Some(stop) = untraversable_ancestor(b, opts.unpriv_uid) {
                    let _ = std::fs::remove_dir_all(&scratch);
                    return Err(format!(
                        "uid {} (--users unpriv) cannot reach {}: no search permission on {}; use --scratch with a directory every user can traverse",
                        opts.unpriv_uid,
                        b.display(),
                        stop.display()
                    ));
                }
            }
        }
        let host_abi = shofer_sys::landlock::abi().unwrap_or(0);
        let xattr = {
            let f = scratch.join("xattr-probe");
            std::fs::write(&f, b"").is_ok() && sys::setxattr(&f, "user.shofer", b"1").is_ok()
        };
        let ns = |n: &str| {
            std::fs::read_link(format!("/proc/self/ns/{n}"))
                .map(|l| l.display().to_string())
                .unwrap_or_default()
        };
        let (pidns, netns) = (ns("pid"), ns("net"));
        let mntns = std::fs::read_link("/proc/self/ns/mnt")
            .map(|l| l.display().to_string())
            .unwrap_or_default();
        let path_env = std::env::var("PATH").unwrap_or_else(|_| {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
        });
        let mut w = World {
            probe: None,
            gaps,
            git: which("git"),
            python: ["/usr/bin/python3", "/bin/python3", "/usr/local/bin/python3"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
                .or_else(|| which("python3")),
            sh: Path::new("/bin/sh").exists(),
            xattr,
            mntns,
            pidns,
            netns,
            path_env,
            seq: RefCell::new(0),
            opts,
            scratch,
            sandbox,
            me,
            suid,
            host_abi,
        };
        w.probe = w.run_probe();
        Ok(w)
    }

    fn run_probe(&self) -> Option<Value> {
        let out = Command::new(&self.sandbox)
            .args(["--probe", "--json"])
            .stdin(Stdio::null())
            .output()
            .ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }

    /// A unique marker for process scans.
    pub fn marker(&self) -> String {
        let mut s = self.seq.borrow_mut();
        *s += 1;
        // Safety: getpid never fails.
        format!("shofer-containment-m{}-{}", unsafe { libc::getpid() }, *s)
    }

    /// Removes the scratch tree (unless `--keep`).
    pub fn cleanup(&self) {
        if !self.opts.keep {
            let _ = std::fs::remove_dir_all(&self.scratch);
        }
    }
}

/// What a case observed, before judgement.
pub enum Outcome {
    /// The attack was stopped.
    Blocked(String),
    /// The attack got through.
    Escaped(String),
    /// The legitimate operation worked.
    Works(String),
    /// The legitimate operation failed.
    Broken(String),
    /// Not attempted here.
    Skip(String),
    /// The harness could not run the case (a FAIL: fail closed).
    Error(String),
    /// A failure that no report can excuse (e.g. a silent downgrade).
    Fail(String),
}

/// One finished sandbox run.
#[derive(Debug, Default)]
pub struct Run {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Terminating signal, if killed.
    pub signal: Option<i32>,
    /// Captured stdout (or pty output).
    pub stdout: String,
    /// Captured stderr.
    pub stderr: String,
    /// Whether the harness had to kill it.
    pub timed_out: bool,
    /// The `--report` JSON.
    pub report: Option<Value>,
    /// Whether `--allow-degraded` had to be added for this run.
    pub needed_degraded: bool,
}

impl Run {
    /// The attack's verdict line: `(verdict, detail)`.
    pub fn verdict(&self) -> Option<(String, String)> {
        self.stdout.lines().rev().find_map(|l| {
            let l = l.trim_end_matches('\r');
            let rest = l.strip_prefix(RESULT_PREFIX)?;
            let (v, d) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((v.to_string(), d.to_string()))
        })
    }

    /// A short description of how it ended.
    pub fn how(&self) -> String {
        let mut s = match (self.code, self.signal) {
            (Some(c), _) => format!("exit {c}"),
            (_, Some(n)) => format!("signal {n}"),
            _ => "?".into(),
        };
        if self.timed_out {
            s.push_str(" (timed out, killed)");
        }
        let err = self.stderr.trim();
        if !err.is_empty() {
            let _ = write!(s, "; stderr: {}", clip_ends(err, 300, 600));
        }
        s
    }

    /// Maps the verdict line to an outcome (no outside checks).
    pub fn outcome(&self) -> Outcome {
        match self.verdict() {
            Some((v, d)) => match v.as_str() {
                "blocked" => Outcome::Blocked(d),
                "escaped" => Outcome::Escaped(d),
                "ok" => Outcome::Works(d),
                "broken" => Outcome::Broken(d),
                "skip" => Outcome::Skip(d),
                _ => Outcome::Error(format!("unknown verdict {v}")),
            },
            None => Outcome::Error(format!("no verdict from the attack ({})", self.how())),
        }
    }
}

/// Clips a string to `n` chars.
pub fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// `s` cut to its first `head` and last `tail` characters: a panic message or a child's
/// failure comes last, after the run's notes.
pub fn clip_ends(s: &str, head: usize, tail: usize) -> String {
    let n = s.chars().count();
    if n <= head + tail {
        return s.to_string();
    }
    let end: String = s.chars().skip(n - tail).collect();
    format!("{} … {end}", clip(s, head))
}

/// What to run inside the sandbox.
pub enum Cmd {
    /// `shofer-containment attack <name> <wt> <out> <extra...>`.
    Attack(Attack, Vec<String>),
    /// `shofer-containment attack <name> <args...>` without the wt/out prefix.
    AttackRaw(Attack, Vec<String>),
    /// An argv.
    Argv(Vec<String>),
    /// `-c <string>`.
    Shell(String),
}

/// One sandbox invocation.
pub struct Sb {
    /// Options before the worktree (beyond the cell's own).
    pub extra: Vec<String>,
    /// Worktree (default: the case's `wt`).
    pub wt: Option<PathBuf>,
    /// Command.
    pub cmd: Cmd,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// (target fd, source fd) pairs to plant in the sandbox process, not close-on-exec.
    pub fds: Vec<(RawFd, RawFd)>,
    /// A pty slave to use as stdio and controlling terminal.
    pub pty: Option<RawFd>,
    /// The pty master, drained into `stdout`.
    pub pty_master: Option<RawFd>,
    /// Kill after this long.
    pub timeout: Duration,
    /// Skip the cell's backend/ABI options (for global cases choosing their own).
    pub raw_opts: bool,
    /// Called with the sandbox's pid right after it starts (e.g. to signal it later).
    pub during: Option<Box<dyn FnOnce(i32)>>,
    /// A bound of the harness's own around the whole run (a fork bomb's): the `cgroup.procs`
    /// file of a cgroup to start it in, and/or an `RLIMIT_NPROC` to start it with.
    pub cgroup_procs: Option<PathBuf>,
    /// See `cgroup_procs`.
    pub nproc: Option<u64>,
}

impl Sb {
    /// A plain invocation of `cmd`.
    pub fn new(cmd: Cmd) -> Sb {
        Sb {
            extra: Vec::new(),
            wt: None,
            cmd,
            env: Vec::new(),
            fds: Vec::new(),
            pty: None,
            pty_master: None,
            timeout: Duration::from_secs(30),
            raw_opts: false,
            during: None,
            cgroup_procs: None,
            nproc: None,
        }
    }
}

/// The per-case context handed to a case's `run` function.
pub struct Ctx<'w> {
    /// Shared facts.
    pub w: &'w World,
    /// The cell.
    pub cell: Cell,
    /// The case directory.
    pub dir: PathBuf,
    /// The worktree.
    pub wt: PathBuf,
    /// The outside directory.
    pub out: PathBuf,
    /// The report of the most recent run.
    pub report: RefCell<Option<Value>>,
    /// Whether the most recent run had to add `--allow-degraded` itself.
    pub last_needed_degraded: std::cell::Cell<bool>,
    runs: RefCell<u32>,
}

impl<'w> Ctx<'w> {
    fn new(w: &'w World, cell: &Cell, case: &'static str) -> Result<Ctx<'w>, String> {
        let dir = w.scratch.join("c").join(cell.id()).join(case);
        let _ = std::fs::remove_dir_all(&dir);
        let wt = dir.join("wt");
        let out = dir.join("out");
        let mk = |p: &Path| {
            std::fs::create_dir_all(p).map_err(|e| format!("create {}: {e}", p.display()))
        };
        mk(&wt.join("sub"))?;
        mk(&out.join("emptydir"))?;
        mk(&out.join("d"))?;
        std::fs::write(wt.join("f"), b"inside\n").map_err(|e| e.to_string())?;
        std::fs::write(wt.join("sub/g"), b"inside too\n").map_err(|e| e.to_string())?;
        std::fs::write(out.join("existing"), b"original\n").map_err(|e| e.to_string())?;
        let _ = sys::utime(out.join("existing"), 1_500_000_000);
        let (u, g) = cell.user.ids();
        chown_tree(&dir, u, g);
        // The parents up to the scratch root must be traversable by the user.
        let mut p = dir.parent();
        while let Some(d) = p {
            if !d.starts_with(&w.scratch) {
                break;
            }
            let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755));
            p = d.parent();
        }
        Ok(Ctx {
            w,
            cell: cell.clone(),
            wt: wt.canonicalize().unwrap_or(wt),
            out: out.canonicalize().unwrap_or(out),
            dir,
            report: RefCell::new(None),
            last_needed_degraded: std::cell::Cell::new(false),
            runs: RefCell::new(0),
        })
    }

    /// Runs one sandbox invocation and waits for it.
    pub fn sb(&self, mut spec: Sb) -> Run {
        let mut run = self.sb_once(&mut spec, self.cell.degraded);
        if run.code == Some(125)
            && !self.cell.degraded
            && run.stderr.to_lowercase().contains("degrad")
        {
            // This invocation's own options (e.g. --net deny below ABI 4) make it degraded:
            // measure the gap, and remember that the refusal happened.
            run = self.sb_once(&mut spec, true);
            run.needed_degraded = true;
        }
        *self.report.borrow_mut() = run.report.clone();
        self.last_needed_degraded.set(run.needed_degraded);
        run
    }

    fn sb_once(&self, spec: &mut Sb, degraded: bool) -> Run {
        let n = {
            let mut r = self.runs.borrow_mut();
            *r += 1;
            *r
        };
        let logs = self.dir.with_extension(format!("log{n}"));
        let _ = std::fs::create_dir_all(&logs);
        let report_path = logs.join("report.json");
        let mut args: Vec<String> = Vec::new();
        if !spec.raw_opts {
            args.push("--backend".into());
            args.push(self.cell.backend.clone());
            if let Some(a) = self.cell.abi {
                args.push("--max-abi".into());
                args.push(a.to_string());
            }
        }
        if degraded {
            args.push("--allow-degraded".into());
        }
        args.push("--report".into());
        args.push("9".into());
        args.extend(spec.extra.iter().cloned());
        let wt = spec.wt.clone().unwrap_or_else(|| self.wt.clone());
        args.push(wt.display().to_string());
        let me = self.w.me.display().to_string();
        match &spec.cmd {
            Cmd::Attack(name, extra) => {
                args.extend(["--".into(), me, "attack".into(), name.name().to_string()]);
                args.push(self.wt.display().to_string());
                args.push(self.out.display().to_string());
                args.extend(extra.iter().cloned());
            }
            Cmd::AttackRaw(name, extra) => {
                args.extend(["--".into(), me, "attack".into(), name.name().to_string()]);
                args.extend(extra.iter().cloned());
            }
            Cmd::Argv(v) => {
                args.push("--".into());
                args.extend(v.iter().cloned());
            }
            Cmd::Shell(s) => {
                args.push("-c".into());
                args.push(s.clone());
            }
        }
        let report_fd = match sys::open(
            &report_path,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            0o600,
        ) {
            Ok(fd) => fd,
            Err(e) => {
                return Run {
                    stderr: format!("harness: open report file: {e}"),
                    ..Run::default()
                }
            }
        };
        let mut fds: Vec<(RawFd, RawFd)> = spec.fds.clone();
        fds.push((9, report_fd.as_raw_fd()));
        let out_path = logs.join("stdout");
        let err_path = logs.join("stderr");
        let (Ok(outf), Ok(errf)) = (
            std::fs::File::create(&out_path),
            std::fs::File::create(&err_path),
        ) else {
            return Run {
                stderr: "harness: cannot create log files".into(),
                ..Run::default()
            };
        };
        let wrap = spec.env.iter().find_map(|(k, _)| match k.as_str() {
            "SHOFER_CONTAINMENT_WRAP" => Some("run-wrapped"),
            "SHOFER_CONTAINMENT_NOUSERNS" => Some("nouserns-exec"),
            _ => None,
        });
        let mut cmd = match wrap {
            Some(mode) => {
                let mut c = Command::new(&self.w.me);
                c.arg(mode).arg(&self.w.sandbox);
                c
            }
            None => Command::new(&self.w.sandbox),
        };
        cmd.args(&args)
            .env_clear()
            .env("PATH", &self.w.path_env)
            .current_dir(&wt);
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        let pty = spec.pty;
        if let Some(slave) = pty {
            let dup = |fd: RawFd| -> Stdio {
                // Safety: F_DUPFD_CLOEXEC returns a new descriptor we own.
                let n = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
                // Safety: `n` is a fresh fd owned by this Stdio.
                Stdio::from(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(n) })
            };
            // All three on the terminal, as under script(1): /dev/stderr must be the pty.
            cmd.stdin(dup(slave)).stdout(dup(slave)).stderr(dup(slave));
            drop(errf);
            drop(outf);
        } else {
            cmd.stdin(Stdio::null()).stdout(outf).stderr(errf);
            cmd.process_group(0);
        }
        match self.cell.user {
            User::Unpriv(u) => {
                cmd.uid(u).gid(u);
            }
            User::Root | User::Current(..) => {}
        }
        let cgroup_procs = spec
            .cgroup_procs
            .as_ref()
            .map(|p| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap_or_default());
        let nproc = spec.nproc;
        // Safety: only async-signal-safe calls (fcntl, dup2, setsid, ioctl, open, write,
        // setrlimit) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // After the switch to the cell's uid (std does it first): a bound only lowers.
                if let Some(n) = nproc {
                    let l = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NPROC, &l) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(p) = &cgroup_procs {
                    let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                }
                // Move every source above the targets first, so a target number that is also
                // a source is not clobbered before it is copied.
                let mut moved = Vec::new();
                for (t, s) in &fds {
                    let hi = libc::fcntl(*s, libc::F_DUPFD_CLOEXEC, 100);
                    if hi < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    moved.push((*t, hi));
                }
                for (t, hi) in moved {
                    if libc::dup2(hi, t) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if pty.is_some() {
                    libc::setsid();
                    libc::ioctl(0, libc::TIOCSCTTY, 0);
                }
                Ok(())
            });
        }
        let started = Instant::now();
        let mut child: Child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Run {
                    stderr: format!("harness: spawn {}: {e}", self.w.sandbox.display()),
                    ..Run::default()
                }
            }
        };
        drop(report_fd);
        if let Some(f) = spec.during.take() {
            f(child.id() as i32);
        }
        let mut run = Run::default();
        let mut master_out = Vec::new();
        loop {
            if let Some(m) = spec.pty_master {
                master_out.extend(sys::drain(m));
            }
            match child.try_wait() {
                Ok(Some(st)) => {
                    use std::os::unix::process::ExitStatusExt;
                    run.code = st.code();
                    run.signal = st.signal();
                    break;
                }
                Ok(None) => {}
                Err(_) => break,
            }
            if started.elapsed() > spec.timeout {
                run.timed_out = true;
                let pid = child.id() as i32;
                if pty.is_some() {
                    let _ = sys::kill(pid, libc::SIGKILL);
                } else {
                    let _ = sys::kill(-pid, libc::SIGKILL);
                }
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(m) = spec.pty_master {
            std::thread::sleep(Duration::from_millis(20));
            master_out.extend(sys::drain(m));
            run.stdout = String::from_utf8_lossy(&master_out).into_owned();
        } else {
            run.stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        }
        run.stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let rep = std::fs::read_to_string(&report_path).unwrap_or_default();
        run.report = serde_json::from_str(&rep).ok();
        run
    }

    /// Snapshot of everything under `out` (names, types, modes, owners, sizes, times, nlink,
    /// contents, the `user.shofer` xattr).
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        snapshot(&self.out)
    }

    /// Spawns a victim process *outside* the sandbox, as the cell's user, with a secret in its
    /// environment. Killed and reaped when the returned guard drops.
    pub fn victim(&self, secret: &str) -> Option<Victim> {
        self.victim_with(secret, false, false)
    }

    /// Like [`Ctx::victim`]; `own_group`: it leads a process group of its own (a target for
    /// `kill(-pgid)`); `catch_urg`: it exits on `SIGURG`, a signal every other process ignores
    /// (a harmless probe for `kill(-1)`).
    pub fn victim_with(&self, secret: &str, own_group: bool, catch_urg: bool) -> Option<Victim> {
        let marker = self.w.marker();
        let mut cmd = Command::new(&self.w.me);
        cmd.args(["sleeper", &marker, "60"]);
        if catch_urg {
            cmd.arg("urg");
        }
        if own_group {
            cmd.process_group(0);
        }
        cmd.env_clear()
            .env("SHOFER_SECRET", secret)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let User::Unpriv(u) = self.cell.user {
            cmd.uid(u).gid(u);
        }
        let child = cmd.spawn().ok()?;
        // Let it reach its sleep (and its environ settle).
        std::thread::sleep(Duration::from_millis(30));
        Some(Victim { child })
    }
}

/// A process started outside the sandbox as a target.
pub struct Victim {
    /// The process.
    pub child: Child,
}

impl Victim {
    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Processes (by pid) whose command line has an argument equal to `marker`.
pub fn marked(marker: &str) -> Vec<i32> {
    shofer_sys::proc::live_with_cmdline(|cl| cl.split(|b| *b == 0).any(|a| a == marker.as_bytes()))
        .iter()
        .map(|p| p.pid)
        .collect()
}

fn chown_tree(p: &Path, u: u32, g: u32) {
    let _ = sys::lchown(p, u, g);
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let path = e.path();
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                chown_tree(&path, u, g);
            } else {
                let _ = sys::lchown(&path, u, g);
            }
        }
    }
}

/// Recursive chown (public for cases that build extra trees).
pub fn chown_all(p: &Path, u: u32, g: u32) {
    chown_tree(p, u, g);
}

fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    fn walk(root: &Path, p: &Path, m: &mut BTreeMap<String, String>) {
        let Ok(md) = std::fs::symlink_metadata(p) else {
            return;
        };
        let rel = p
            .strip_prefix(root)
            .map(|r| r.display().to_string())
            .unwrap_or_default();
        let mut d = format!(
            "type={:o} mode={:o} uid={} gid={} size={} nlink={} mtime={}.{} ctime={}.{}",
            md.mode() & 0o170000,
            md.mode() & 0o7777,
            md.uid(),
            md.gid(),
            md.size(),
            md.nlink(),
            md.mtime(),
            md.mtime_nsec(),
            md.ctime(),
            md.ctime_nsec()
        );
        if md.is_file() {
            if let Ok(c) = std::fs::read(p) {
                let _ = write!(
                    d,
                    " content={:?}",
                    String::from_utf8_lossy(&c[..c.len().min(64)])
                );
            }
            if sys::getxattr_len(p, "user.shofer").is_ok() {
                d.push_str(" xattr=user.shofer");
            }
        }
        m.insert(if rel.is_empty() { ".".into() } else { rel }, d);
        if md.is_dir() {
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    walk(root, &e.path(), m);
                }
            }
        }
    }
    walk(root, root, &mut m);
    m
}

/// Differences between two snapshots, described briefly.
pub fn diff(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Option<String> {
    let mut d = Vec::new();
    for (k, v) in b {
        match a.get(k) {
            None => d.push(format!("created {k}")),
            Some(old) if old != v => {
                let what: Vec<&str> = v
                    .split(' ')
                    .zip(old.split(' '))
                    .filter(|(x, y)| x != y)
                    .map(|(x, _)| x.split('=').next().unwrap_or(""))
                    .collect();
                d.push(format!("changed {k} ({})", what.join(",")));
            }
            _ => {}
        }
    }
    for k in a.keys() {
        if !b.contains_key(k) {
            d.push(format!("removed {k}"));
        }
    }
    (!d.is_empty()).then(|| d.join("; "))
}

/// Runs an attack and decides from its verdict *and* the outside snapshot.
pub fn attack_checked(c: &Ctx, attack: Attack, extra: &[String]) -> Outcome {
    attack_spec_checked(c, Sb::new(Cmd::Attack(attack, extra.to_vec())))
}

/// Like [`attack_checked`] with a full invocation spec.
pub fn attack_spec_checked(c: &Ctx, spec: Sb) -> Outcome {
    let before = c.snapshot();
    let run = c.sb(spec);
    let after = c.snapshot();
    let changed = diff(&before, &after);
    let o = run.outcome();
    match (o, changed) {
        (Outcome::Escaped(d), Some(ch)) => Outcome::Escaped(format!("{d}; outside: {ch}")),
        (Outcome::Escaped(d), None) => Outcome::Escaped(d),
        (Outcome::Error(d), Some(ch)) => Outcome::Escaped(format!("outside changed: {ch} ({d})")),
        (_, Some(ch)) => Outcome::Escaped(format!("outside changed: {ch}")),
        (o, None) => o,
    }
}

/// Turns a case's outcome into a row, consulting the run's report and the gap list.
pub fn judge(w: &World, case: &Case, cell: &Cell, o: Outcome, report: Option<&Value>) -> Row {
    let row = |result: &'static str, detail: String| Row {
        case: case.name.to_string(),
        backend: cell.backend.clone(),
        abi: cell.abi_label(),
        user: cell.user.label().to_string(),
        result,
        detail,
    };
    let bad = match o {
        Outcome::Blocked(d) | Outcome::Works(d) => return row("pass", d),
        Outcome::Skip(d) => return row("skip", d),
        Outcome::Error(d) => return row("FAIL", format!("harness could not run the case: {d}")),
        Outcome::Fail(d) => return row("FAIL", d),
        Outcome::Escaped(d) => format!("escaped: {d}"),
        Outcome::Broken(d) => format!("broken: {d}"),
    };
    // The report's row that may explain it: a protection, or one of the run's limits.
    let (key, limit) = match (case.protection, case.limit) {
        (Some(p), _) => (p.key().to_string(), None),
        (None, Some(l)) => (format!("limit_{l}"), Some(l)),
        (None, None) => return row("FAIL", bad),
    };
    let Some(rep) = report else {
        return row("FAIL", format!("{bad}; and no --report explains it"));
    };
    let (p, not_enforced) = match limit {
        None => {
            let p = &rep["protections"][key.as_str()];
            (p, p["enforced"].as_bool() == Some(false))
        }
        Some(l) => {
            let p = &rep["limits"][l];
            (p, p["status"].as_str() == Some("not_enforced"))
        }
    };
    if !not_enforced {
        let by = p["by"].as_str().or(p["how"].as_str()).unwrap_or("?");
        return row(
            "FAIL",
            format!("{bad}; the report claims {key} is enforced (by {by})"),
        );
    }
    let reason = p["reason"]
        .as_str()
        .unwrap_or("no reason given")
        .to_string();
    let abi = rep["effective_abi"]
        .as_u64()
        .map(|a| a as u32)
        .or(cell.abi)
        .unwrap_or(w.host_abi);
    // `auto` has the gaps of the backend it picked (the report says which).
    let backend = match (cell.backend.as_str(), rep["backend"].as_str()) {
        ("auto", Some(picked)) => picked,
        (b, _) => b,
    };
    match gaps::allowed(&w.gaps, case.name, backend, abi) {
        Some(_) => row("gap", format!("{reason} [{bad}]")),
        None => row(
            "FAIL",
            format!("{bad}; the report admits {key} is not enforced ({reason}) but tests/README.md lists no such gap for {} at ABI {abi}", cell.backend),
        ),
    }
}

/// Runs one case in one cell.
pub fn run_case(w: &World, case: &Case, cell: &Cell) -> Row {
    let skip = |why: String| Row {
        case: case.name.to_string(),
        backend: cell.backend.clone(),
        abi: cell.abi_label(),
        user: cell.user.label().to_string(),
        result: "skip",
        detail: why,
    };
    if case.root_only && !cell.user.is_root() {
        return skip("root-only case (capability use)".into());
    }
    if let Some(why) = (case.needs)(w) {
        return skip(why);
    }
    let ctx = match Ctx::new(w, cell, case.name) {
        Ok(c) => c,
        Err(e) => return judge(w, case, cell, Outcome::Error(e), None),
    };
    let o = (case.run)(&ctx);
    let rep = ctx.report.borrow().clone();
    let row = judge(w, case, cell, o, rep.as_ref());
    if !w.opts.keep {
        // Keep disk use bounded (git cases make whole repositories): drop the case's tree
        // and its run logs now rather than at the end.
        let _ = std::fs::remove_dir_all(&ctx.dir);
        for n in 1..=*ctx.runs.borrow() {
            let _ = std::fs::remove_dir_all(ctx.dir.with_extension(format!("log{n}")));
        }
    }
    row
}

/// Preflight of a cell: returns the rows it produced and whether cases may run.
pub fn preflight(w: &World, cell: &mut Cell) -> (Vec<Row>, bool) {
    let mut rows = Vec::new();
    let mk = |case: &str, result: &'static str, detail: String, cell: &Cell| Row {
        case: case.to_string(),
        backend: cell.backend.clone(),
        abi: cell.abi_label(),
        user: cell.user.label().to_string(),
        result,
        detail,
    };
    let ctx = match Ctx::new(w, cell, "preflight") {
        Ok(c) => c,
        Err(e) => {
            rows.push(mk("(cell)", "FAIL", format!("scratch tree: {e}"), cell));
            return (rows, false);
        }
    };
    let mut probe_cell = cell.clone();
    probe_cell.degraded = false;
    let pctx = Ctx {
        cell: probe_cell,
        ..ctx
    };
    let first = pctx.sb_once(&mut Sb::new(Cmd::Attack(Attack::Noop, vec![])), false);
    if first.code == Some(125) {
        let msg = clip(first.stderr.trim(), 300);
        if msg.to_lowercase().contains("degrad") {
            let second = pctx.sb_once(&mut Sb::new(Cmd::Attack(Attack::Noop, vec![])), true);
            if second.code == Some(0) {
                cell.degraded = true;
                let listed = second
                    .report
                    .as_ref()
                    .map(required_degraded)
                    .unwrap_or(Value::Null);
                let ok = listed.as_array().is_some_and(|a| !a.is_empty());
                rows.push(mk(
                    "no-silent-downgrade",
                    if ok { "pass" } else { "FAIL" },
                    if ok {
                        format!("refused without --allow-degraded ({msg}); with it the report lists degraded {listed}")
                    } else {
                        format!("refused as degraded but the --allow-degraded report lists no degradation ({listed})")
                    },
                    cell,
                ));
                rows.push(report_row(w, cell, &second, &pctx.wt));
                return (rows, true);
            }
            // Refused again (125): not available. Anything else is a broken run, which a
            // skip row would hide.
            let (result, detail) = if second.code == Some(125) {
                (
                    "skip",
                    format!(
                        "not available even with --allow-degraded: {}",
                        clip_ends(second.stderr.trim(), 300, 600)
                    ),
                )
            } else {
                (
                    "FAIL",
                    format!("a no-op with --allow-degraded failed: {}", second.how()),
                )
            };
            rows.push(mk("(cell)", result, detail, cell));
            return (rows, false);
        }
        if let Some(why) = probe_says_usable(w, &cell.backend) {
            rows.push(mk(
                "(cell)",
                "FAIL",
                format!(
                    "--probe says {} is usable ({why}) but a no-op through it exits 125: {msg}",
                    cell.backend
                ),
                cell,
            ));
            return (rows, false);
        }
        rows.push(mk(
            "(cell)",
            "skip",
            format!("backend not available here (exit 125): {msg}"),
            cell,
        ));
        return (rows, false);
    }
    if first.code != Some(0) || first.verdict().map(|v| v.0) != Some("ok".into()) {
        rows.push(mk(
            "(cell)",
            "FAIL",
            format!("a no-op through the sandbox failed: {}", first.how()),
            cell,
        ));
        return (rows, false);
    }
    // It ran without --allow-degraded: then nothing required may be degraded (hardening gaps
    // are listed too, each row's `tier` says which).
    let listed = first
        .report
        .as_ref()
        .map(required_degraded)
        .unwrap_or(Value::Null);
    let expected_degraded = cell.backend == "landlock" && cell.abi.unwrap_or(w.host_abi) < 3;
    let ok = listed.as_array().is_some_and(|a| a.is_empty()) && !expected_degraded;
    rows.push(mk(
        "no-silent-downgrade",
        if ok { "pass" } else { "FAIL" },
        if ok {
            "ran without --allow-degraded and the report lists no degradation".into()
        } else {
            format!("ran without --allow-degraded although degraded (report degraded: {listed}; landlock below ABI 3 cannot deny truncate)")
        },
        cell,
    ));
    rows.push(report_row(w, cell, &first, &pctx.wt));
    (rows, true)
}

/// `Some(evidence)` when the sandbox's own probe says `backend` can run here.
fn probe_says_usable(w: &World, backend: &str) -> Option<String> {
    let p = w.probe.as_ref()?;
    let ll = p["landlock"]["status"].as_str() == Some("available");
    let userns = p["user_namespaces"]["usable"].as_bool() == Some(true);
    let bwrap = p["bwrap"]["usable"].as_bool() == Some(true);
    let ok = match backend {
        "landlock" => ll,
        "userns" => userns,
        "layered" => userns && ll,
        "bwrap" => bwrap,
        _ => false,
    };
    ok.then(|| {
        format!(
            "landlock {}, user_namespaces.usable {userns}, bwrap.usable {bwrap}",
            p["landlock"]["status"]
        )
    })
}

/// Protection keys in a `--report` / `--probe --json` document that `shofer_core`'s
/// [`Protection`] does not know: each one is a row the harness could never judge as a gap, so
/// it is a finding, not something to skip. (Known keys that are missing are reported by the
/// caller, which also checks their shape.)
pub fn unknown_protections(report: &Value) -> Vec<String> {
    let known = Protection::ALL.map(Protection::key);
    match report["protections"].as_object() {
        None => vec![format!(
            "no protections object ({})",
            clip(&report["protections"].to_string(), 80)
        )],
        Some(m) => m
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .map(|k| {
                format!("unknown protection {k} (shofer_core::policy::Protection has no such key)")
            })
            .collect(),
    }
}

fn report_row(w: &World, cell: &Cell, run: &Run, wt: &Path) -> Row {
    let mut bad = Vec::new();
    match &run.report {
        None => bad.push("no JSON written to --report 9".to_string()),
        Some(r) => {
            if r["worktree"].as_str() != Some(&wt.display().to_string()) {
                bad.push(format!(
                    "worktree {} != canonical {}",
                    r["worktree"],
                    wt.display()
                ));
            }
            if cell.backend == "landlock" {
                let want = cell.abi.unwrap_or(w.host_abi).min(w.host_abi);
                if r["effective_abi"].as_u64() != Some(u64::from(want)) {
                    bad.push(format!("effective_abi {} != {want}", r["effective_abi"]));
                }
            }
            bad.extend(unknown_protections(r));
            for key in Protection::ALL.map(Protection::key) {
                let p = &r["protections"][key];
                if !p["enforced"].is_boolean() {
                    bad.push(format!("protection {key} missing"));
                } else if p["enforced"] == Value::Bool(false)
                    && key != "tcp"
                    && !p["reason"].is_string()
                {
                    bad.push(format!("{key} not enforced without a reason"));
                }
            }
            if !r["writable"].is_array() {
                bad.push("no writable list".into());
            }
        }
    }
    Row {
        case: "report-consistent".into(),
        backend: cell.backend.clone(),
        abi: cell.abi_label(),
        user: cell.user.label().into(),
        result: if bad.is_empty() { "pass" } else { "FAIL" },
        detail: if bad.is_empty() {
            "report names the canonical worktree, the ABI and every protection".into()
        } else {
            bad.join("; ")
        },
    }
}

/// Whether the case applies to this scope.
pub fn in_scope(case: &Case, global: bool) -> bool {
    matches!(
        (case.scope, global),
        (Scope::Cell, false) | (Scope::Global, true)
    )
}

/// The report's `degraded` keys whose protection row is of the required tier (the others are
/// hardening gaps, which a run may have without `--allow-degraded`).
fn required_degraded(report: &Value) -> Value {
    let keys = report["degraded"].as_array().cloned().unwrap_or_default();
    Value::Array(
        keys.into_iter()
            .filter(|k| {
                let tier = &report["protections"][k.as_str().unwrap_or("")]["tier"];
                // Reports before the tiers listed only required protections.
                tier.is_null() || tier == "required"
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_directory_stops_another_uid() {
        let d = tempfile_dir();
        let inner = d.join("private/bin");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::set_permissions(d.join("private"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        let (me, _) = sys::ids();
        let other = if me == 4242 { 4243 } else { 4242 };
        assert_eq!(
            untraversable_ancestor(&inner.join("x"), other),
            Some(d.join("private"))
        );
        assert_eq!(untraversable_ancestor(&d.join("x"), other), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    fn tempfile_dir() -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("shofer-containment-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    #[test]
    fn unknown_protections_names_keys_shofer_core_does_not_know() {
        let mut prot = serde_json::Map::new();
        for k in Protection::ALL.map(Protection::key) {
            prot.insert(k.into(), serde_json::json!({"enforced": true}));
        }
        let known = serde_json::json!({ "protections": prot.clone() });
        assert!(unknown_protections(&known).is_empty());
        prot.insert("teleport".into(), serde_json::json!({"enforced": true}));
        let found = unknown_protections(&serde_json::json!({ "protections": prot }));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("teleport"), "{found:?}");
        assert_eq!(unknown_protections(&serde_json::json!({})).len(), 1);
    }
}
