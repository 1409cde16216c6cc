//! Package managers' caches inside the sandbox (issue 35): npm, pip (also `--user`), cargo,
//! go, uv and pnpm work by default, and the command cannot change the host's caches (a
//! poisoned cache would run the command's code in the host's next build).
//!
//! # Map
//! - [`TOOLS`]: each cache, the variable that names it and where it is by default;
//! - [`prepare`]: step 4 of a run: resolves every cache from the
//!   command's environment, makes its private, persistent directories in the state directory
//!   (`$XDG_STATE_HOME/shofer/package-caches/layout-2/<worktree key>/<cache>/`, each checked with
//!   [`shofer_sys::statedir`]) and decides, per cache, one of:
//!   - **overlay** (the namespace backends, Linux 5.11+): process A mounts an overlay at the
//!     host's path, lower the host's directory, upper and work private, a pair no other
//!     run of the worktree holds ([`claim_slot`]) (`crate::namespaces::mounts`): the command
//!     sees the host's cache plus its own writes;
//!     only at a literal path with no symlink on it, clear of the writable set, the state
//!     directory and the other overlays ([`overlayable`]), else environment mode;
//!   - **environment** (Landlock alone, bubblewrap, older kernels, and a cache absent on the
//!     host): the tool's variable points at a private directory (`env/`), added to the
//!     writable set; nothing is made on the host;
//!   - **caller**: the caller set the variable itself; it is respected (its own writability
//!     decides).
//! - [`Plan::report`]: the `package_caches` section of the `--report` record.
//!
//! # Trust
//! Everything under a private directory is written by the command: the supervisor never reads
//! it. It only makes the directories (each level checked: ours, mode 0700, no symlink, outside
//! the writable set) and, in `env/` of cargo, replaces `config.toml` by the host's (a
//! `renameat` over whatever is there, which never follows a planted symlink). The worktree key
//! keeps one worktree's private caches out of every other's view. A symlink the command
//! plants in an overlay is served as a symlink: it resolves in the command's own view, where
//! every cache path is the overlay again and everything else is read-only.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::Digest;

use crate::report;
use crate::spec::Overlay;

/// The state directory's leaf for the private caches.
pub(crate) const LEAF: &str = "package-caches";

/// The layout of the private directories, a level under [`LEAF`]: a private directory made
/// before (uppers of overlays mounted without `userxattr`, which may hold attributes a later
/// overlayfs option would interpret) is never used again.
const LAYOUT: &str = "layout-2";

/// How the package caches are provided in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Overlays over the host's caches (a cache absent on the host: its variable).
    Overlay,
    /// The tools' variables, pointing at private directories.
    Environment,
    /// `--no-package-caches`, or no usable state directory.
    Off,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Overlay => "overlay",
            Mode::Environment => "environment",
            Mode::Off => "off",
        }
    }
}

/// One cache: its name, the variable that names it, and where it is by default.
pub(crate) struct Tool {
    /// The name in the report and of its private directory.
    pub name: &'static str,
    /// The variable the tool reads (set in environment mode).
    pub var: &'static str,
    /// Where the cache is when the variable is unset, from the environment.
    pub default: fn(&Env) -> Option<PathBuf>,
    /// Only when this program is on `$PATH` (npm warns about a variable it does not know).
    pub only_with: Option<&'static str>,
}

/// A lookup of one variable.
type Lookup = Box<dyn Fn(&str) -> Option<OsString>>;

/// The command's environment, as the tools read it.
pub(crate) struct Env {
    get: Lookup,
}

impl Env {
    /// This process's environment (the command inherits it).
    fn current() -> Env {
        Env {
            get: Box::new(|k| std::env::var_os(k).filter(|v| !v.is_empty())),
        }
    }

    fn path(&self, var: &str) -> Option<PathBuf> {
        (self.get)(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    }

    fn home(&self, rel: &str) -> Option<PathBuf> {
        self.path("HOME").map(|h| h.join(rel))
    }

    /// `$XDG_CACHE_HOME/rel`, else `~/.cache/rel`.
    fn cache(&self, rel: &str) -> Option<PathBuf> {
        self.path("XDG_CACHE_HOME")
            .map(|c| c.join(rel))
            .or_else(|| self.home(&format!(".cache/{rel}")))
    }
}

/// The caches, in the order they are mounted and reported.
pub(crate) const TOOLS: [Tool; 9] = [
    Tool {
        name: "npm",
        var: "npm_config_cache",
        default: |e| e.home(".npm"),
        only_with: None,
    },
    Tool {
        name: "pip",
        var: "PIP_CACHE_DIR",
        default: |e| e.cache("pip"),
        only_with: None,
    },
    // `pip install --user`: the user base (`~/.local`) holds more than Python's (and
    // shofer's own state directory): never overlaid, always a private base.
    Tool {
        name: "pip-user",
        var: "PYTHONUSERBASE",
        default: |_| None,
        only_with: None,
    },
    // The whole of CARGO_HOME: cargo locks `.package-cache` and keeps `.global-cache` there,
    // next to `registry/` and `git/`.
    Tool {
        name: "cargo",
        var: "CARGO_HOME",
        default: |e| e.home(".cargo"),
        only_with: None,
    },
    Tool {
        name: "go-mod",
        var: "GOMODCACHE",
        default: |e| {
            let gopath = e.path("GOPATH").and_then(|p| {
                let first = p.to_str()?.split(':').next()?.to_string();
                Some(PathBuf::from(first))
            });
            gopath.or_else(|| e.home("go")).map(|g| g.join("pkg/mod"))
        },
        only_with: None,
    },
    Tool {
        name: "go-build",
        var: "GOCACHE",
        default: |e| e.cache("go-build"),
        only_with: None,
    },
    Tool {
        name: "uv",
        var: "UV_CACHE_DIR",
        default: |e| e.cache("uv"),
        only_with: None,
    },
    Tool {
        name: "pnpm-store",
        var: "npm_config_store_dir",
        default: |e| {
            e.path("XDG_DATA_HOME")
                .map(|d| d.join("pnpm/store"))
                .or_else(|| e.home(".local/share/pnpm/store"))
        },
        only_with: Some("pnpm"),
    },
    Tool {
        name: "pnpm-cache",
        var: "npm_config_cache_dir",
        default: |e| e.cache("pnpm"),
        only_with: Some("pnpm"),
    },
];

/// What one cache gets in a run.
#[derive(Debug)]
pub(crate) struct Entry {
    /// [`Tool::name`].
    pub tool: &'static str,
    /// [`Tool::var`].
    pub var: &'static str,
    /// The cache's path on the host (`None`: no default, e.g. pip's user base).
    pub host: Option<PathBuf>,
    /// `overlay`, `environment`, `caller`, or `unavailable`.
    pub how: &'static str,
    /// The private directory (upper for an overlay), or why none.
    pub private: Result<Option<PathBuf>, String>,
    /// Why a cache that could have been an overlay is not ([`overlayable`]).
    pub note: Option<String>,
}

/// The package caches of one run.
#[derive(Debug)]
pub(crate) struct Plan {
    /// How, overall.
    pub mode: Mode,
    /// Why `Off`, or why environment mode rather than overlays.
    pub reason: Option<String>,
    /// The per-worktree state directory.
    pub dir: Option<PathBuf>,
    /// Each cache.
    pub entries: Vec<Entry>,
    /// The overlays for process A.
    pub overlays: Vec<Overlay>,
    /// The variables set in the command's environment only (`ExecSpec::env`): never in
    /// the supervisor's, whose host-side helpers (git) would inherit them.
    pub env_set: Vec<(&'static str, PathBuf)>,
    /// Private directories the command must be able to write (added to the writable set).
    pub writable: Vec<PathBuf>,
    /// The locks of the overlays' slots ([`claim_slot`]), held while the run lasts.
    pub held: Vec<OwnedFd>,
}

impl Plan {
    /// The plan with nothing done, and why.
    fn off(reason: String) -> Plan {
        Plan {
            mode: Mode::Off,
            reason: Some(reason),
            dir: None,
            entries: Vec::new(),
            overlays: Vec::new(),
            env_set: Vec::new(),
            writable: Vec::new(),
            held: Vec::new(),
        }
    }

    /// The report's `package_caches` section. Never says "enforced": it says how.
    pub(crate) fn report(&self) -> Value {
        let caches: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                let (private, error) = match &e.private {
                    Ok(p) => (p.as_deref().map_or(Value::Null, report::path), Value::Null),
                    Err(why) => (Value::Null, json!(why)),
                };
                json!({"cache": e.tool, "variable": e.var,
                       "host": e.host.as_deref().map_or(Value::Null, report::path), "how": e.how,
                       "private": private, "error": error, "note": e.note})
            })
            .collect();
        let env: serde_json::Map<String, Value> = self
            .env_set
            .iter()
            .map(|(k, v)| (k.to_string(), report::path(v)))
            .collect();
        json!({
            "mode": self.mode.as_str(),
            "reason": self.reason,
            "state_dir": self.dir.as_deref().map_or(Value::Null, report::path),
            "caches": caches,
            "env_set": env,
        })
    }
}

/// Whether the running kernel lets a user namespace mount overlayfs (Linux 5.11).
pub(crate) fn kernel_overlays_in_userns(release: &str) -> bool {
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let (major, minor) = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
    (major, minor) >= (5, 11)
}

/// Step 4: the package caches of a run over `worktree` (canonical), with
/// overlays when `overlays` (a namespace backend on Linux 5.11+) else the environment;
/// `writable`: the run's writable set (the state directory must lie outside it; canonical in
/// `state_writable`). The
/// variables of [`Plan::env_set`] are for the command only (never set here). `Off` when `enabled` is
/// false (`--no-package-caches`) or no state directory can be used (the reason says why).
pub(crate) fn prepare(
    worktree: &Path,
    writable: &[PathBuf],
    state_writable: &shofer_sys::statedir::Writable,
    overlays: Result<(), String>,
    enabled: bool,
) -> Plan {
    if !enabled {
        return Plan::off("--no-package-caches".into());
    }
    let env = Env::current();
    let Some(root) = state_root(&env) else {
        return Plan::off(
            "no state directory: neither XDG_STATE_HOME nor HOME is an absolute path".into(),
        );
    };
    let key = worktree_key(worktree);
    let dir = root.join(&key);
    let state = match shofer_sys::statedir::create_in(&dir, state_writable) {
        Ok(s) => s,
        Err(e) => return Plan::off(format!("the state directory cannot be used: {e}")),
    };
    let mode = if overlays.is_ok() {
        Mode::Overlay
    } else {
        Mode::Environment
    };
    let mut plan = Plan {
        mode,
        reason: overlays.err(),
        dir: Some(dir.clone()),
        entries: Vec::new(),
        overlays: Vec::new(),
        env_set: Vec::new(),
        writable: Vec::new(),
        held: Vec::new(),
    };
    // Each program looked up once (pnpm's two caches ask for the same one).
    let mut found: Vec<(&str, bool)> = Vec::new();
    for tool in &TOOLS {
        if let Some(p) = tool.only_with {
            let on = match found.iter().find(|(q, _)| *q == p) {
                Some(&(_, on)) => on,
                None => {
                    let on = on_path(p);
                    found.push((p, on));
                    on
                }
            };
            if !on {
                continue;
            }
        }
        let entry = plan_one(tool, &env, &state, writable, mode, &mut plan);
        plan.entries.push(entry);
    }
    plan
}

/// One cache's entry, adding its overlay (and its slot's lock), variable or writable
/// directory to `plan`; its private directories go below the checked state directory `state`.
fn plan_one(
    tool: &Tool,
    env: &Env,
    state: &shofer_sys::statedir::StateDir,
    writable: &[PathBuf],
    mode: Mode,
    plan: &mut Plan,
) -> Entry {
    let set_by_caller = env.path(tool.var);
    let host = set_by_caller.clone().or_else(|| (tool.default)(env));
    let mut entry = Entry {
        tool: tool.name,
        var: tool.var,
        host: host.clone(),
        how: "caller",
        private: Ok(None),
        note: None,
    };
    let inside_overlay = |p: &Path| plan.overlays.iter().any(|o| p.starts_with(&o.target));
    // The host's directory, if it can be overlaid (else the variable, below).
    let existing = match (mode, host.as_deref()) {
        (Mode::Overlay, Some(h)) => match overlayable(h, &state.path, writable, &plan.overlays) {
            Ok(p) => Some(p),
            Err(why) => {
                entry.note = why;
                None
            }
        },
        _ => None,
    };
    let private = Path::new(tool.name);
    if let (Mode::Overlay, Some(host_dir)) = (mode, existing) {
        if inside_overlay(&host_dir) {
            entry.how = "overlay";
            return entry;
        }
        match claim_slot(state, private) {
            Ok(Some(slot)) => {
                entry.how = "overlay";
                entry.private = Ok(Some(slot.upper.clone()));
                plan.overlays.push(Overlay {
                    target: host_dir,
                    upper: slot.upper,
                    work: slot.work,
                });
                plan.held.push(slot.lock);
                return entry;
            }
            Ok(None) => {
                entry.note = Some(format!(
                    "not overlaid: its {SLOTS} private views are in use by concurrent runs of this worktree"
                ));
            }
            Err(e) => {
                entry.how = "unavailable";
                entry.private = Err(e);
                return entry;
            }
        }
    }
    // Explicitly set by the caller: respected.
    if set_by_caller.is_some() {
        return entry;
    }
    match make_dir(state, &private.join("env")) {
        Ok(p) => {
            if tool.name == "cargo" {
                copy_cargo_config(host.as_deref(), &p);
            }
            entry.how = "environment";
            entry.private = Ok(Some(p.clone()));
            plan.env_set.push((tool.var, p.clone()));
            plan.writable.push(p);
        }
        Err(e) => {
            entry.how = "unavailable";
            entry.private = Err(e);
        }
    }
    entry
}

/// `host` (absolute, from the command's environment) if an overlay may be mounted over it;
/// else why not (`None`: absent, nothing to say; the variable is used instead). Only a
/// directory whose canonical path is the literal one (no symlink on it: one the command
/// planted where the path runs through a place it writes would move the mount anywhere),
/// that neither lies in nor holds a path of `writable` (the command could swap it, or the
/// mount would cover the writable set) or the state directory `dir`'s tree (the mount
/// would cover the private directories), nor holds an earlier overlay.
fn overlayable(
    host: &Path,
    dir: &Path,
    writable: &[PathBuf],
    overlays: &[Overlay],
) -> Result<PathBuf, Option<String>> {
    let literal: PathBuf = host.components().collect();
    let canonical = shofer_sys::fd::canonicalize(host).map_err(|_| None)?;
    if !canonical.is_dir() {
        return Err(None);
    }
    if canonical != literal {
        return Err(Some(format!(
            "not overlaid: {} leads to {} through a symlink",
            host.display(),
            canonical.display()
        )));
    }
    let overlaps = |p: &Path| canonical.starts_with(p) || p.starts_with(&canonical);
    if let Some(w) = writable.iter().find(|w| overlaps(w)) {
        return Err(Some(format!(
            "not overlaid: {} overlaps the writable path {}",
            canonical.display(),
            w.display()
        )));
    }
    // `<state>/shofer/package-caches/<layout>/<key>`: the whole of `package-caches`.
    let state = dir.ancestors().nth(2).unwrap_or(dir);
    if overlaps(state) {
        return Err(Some(format!(
            "not overlaid: {} overlaps the state directory {}",
            canonical.display(),
            state.display()
        )));
    }
    if let Some(o) = overlays.iter().find(|o| o.target.starts_with(&canonical)) {
        if o.target != canonical {
            return Err(Some(format!(
                "not overlaid: {} holds the overlay over {}",
                canonical.display(),
                o.target.display()
            )));
        }
    }
    Ok(canonical)
}

/// `$XDG_STATE_HOME/shofer/package-caches/<layout>`, else under `~/.local/state`.
fn state_root(env: &Env) -> Option<PathBuf> {
    env.path("XDG_STATE_HOME")
        .or_else(|| env.home(".local/state"))
        .map(|s| s.join("shofer").join(LEAF).join(LAYOUT))
}

/// The directory name of `worktree`'s private caches: a hash of its canonical path and of
/// the identity of the directory there ([`identity`]), so another directory made at the
/// same path later (a different repository cloned where an old one was removed) never
/// gets the old one's caches, which its commands may have poisoned.
pub(crate) fn worktree_key(worktree: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut hash = sha2::Sha256::new();
    hash.update(worktree.as_os_str().as_bytes());
    hash.update([0]);
    hash.update(identity(worktree));
    let digest = hash.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The identity of the directory at `path`: device, inode and, where the filesystem keeps
/// it, birth time (an inode number alone is soon reused after a removal); empty when it
/// cannot be read (the path alone then names the caches).
fn identity(path: &Path) -> Vec<u8> {
    use rustix::fs::{AtFlags, StatxFlags};
    let Ok(st) = rustix::fs::statx(
        rustix::fs::CWD,
        path,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    ) else {
        return Vec::new();
    };
    let mut id = Vec::with_capacity(36);
    id.extend(st.stx_dev_major.to_le_bytes());
    id.extend(st.stx_dev_minor.to_le_bytes());
    id.extend(st.stx_ino.to_le_bytes());
    if StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::BTIME) {
        id.extend(st.stx_btime.tv_sec.to_le_bytes());
        id.extend(st.stx_btime.tv_nsec.to_le_bytes());
    }
    id
}

/// How many runs of one worktree at a time each get their own overlay of a cache.
const SLOTS: usize = 32;

/// One overlay's private layers, claimed for a run.
struct Slot {
    upper: PathBuf,
    work: PathBuf,
    /// The work directory, open, its `flock` taken.
    lock: OwnedFd,
}

/// The first free slot of the cache whose private directory is `private` (`upper` and
/// `work`, then `upper.1` and `work.1`, ...): its work directory made and locked without
/// waiting (`flock`), so no two mounts ever share an upper or a work directory (overlayfs
/// clears its work directory at each mount, under a concurrent one's copy-ups). The lock
/// goes with the run's last descriptor of it; the kernel drops a crashed run's. `None`
/// when all [`SLOTS`] are taken.
fn claim_slot(
    state: &shofer_sys::statedir::StateDir,
    private: &Path,
) -> Result<Option<Slot>, String> {
    use rustix::fs::{FlockOperation, Mode as M, OFlags};
    for n in 0..SLOTS {
        let leaf = |name: &str| match n {
            0 => private.join(name),
            n => private.join(format!("{name}.{n}")),
        };
        let work =
            shofer_sys::statedir::create_below(state, &leaf("work")).map_err(|e| e.to_string())?;
        let lock = rustix::fs::openat(
            &work.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            M::empty(),
        )
        .map_err(|e| format!("{}: {e}", work.path.display()))?;
        match rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => continue,
            Err(e) => return Err(format!("{}: flock: {e}", work.path.display())),
        }
        let upper = make_dir(state, &leaf("upper"))?;
        return Ok(Some(Slot {
            upper,
            work: work.path,
            lock,
        }));
    }
    Ok(None)
}

/// Makes (mode 0700) and checks the private directory `rel` below the state directory
/// `state`: ours, no symlink on its path, not writable by group or others (outside the
/// writable set as `state` is: [`shofer_sys::statedir::create_below`]). Its path, or why not.
fn make_dir(state: &shofer_sys::statedir::StateDir, rel: &Path) -> Result<PathBuf, String> {
    shofer_sys::statedir::create_below(state, rel)
        .map(|d| d.path)
        .map_err(|e| e.to_string())
}

/// Whether `program` is found on `$PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| d.is_absolute() && d.join(program).is_file())
    })
}

/// Cargo's configuration (not its credentials) from the host's `CARGO_HOME` into the private
/// one: `config.toml` and `config`, each replacing whatever the command left there (a
/// temporary file made in the directory, renamed over the name: a planted symlink is
/// replaced, never followed). What cannot be copied is left out.
fn copy_cargo_config(host: Option<&Path>, private: &Path) {
    let Some(host) = host else { return };
    let Ok(dir) = crate::paths::open_nofollow(private) else {
        return;
    };
    for name in ["config.toml", "config"] {
        let Ok(bytes) = crate::paths::read_regular(&host.join(name), 1 << 20) else {
            continue;
        };
        let _ = write_replacing(&dir, name, &bytes);
    }
}

/// Writes `bytes` to `name` in `dir` through a fresh temporary file and a rename.
fn write_replacing(dir: &OwnedFd, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use rustix::fs::{Mode as M, OFlags};
    // The directory as opened (O_PATH): a real descriptor of it for the calls below.
    let dir = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        M::empty(),
    )?;
    let tmp = format!(".{name}.shofer-{}", shofer_sys::statedir::random_suffix());
    let fd = rustix::fs::openat(
        &dir,
        &tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        M::from_raw_mode(0o600),
    )?;
    let mut file = std::fs::File::from(fd);
    let written = std::io::Write::write_all(&mut file, bytes);
    drop(file);
    let done = written
        .and_then(|()| rustix::fs::renameat(&dir, &tmp, &dir, name).map_err(std::io::Error::from));
    if done.is_err() {
        let _ = rustix::fs::unlinkat(dir.as_fd(), &tmp, rustix::fs::AtFlags::empty());
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlays_in_user_namespaces_from_linux_5_11() {
        assert!(kernel_overlays_in_userns("6.18.44-fc-v1300"));
        assert!(kernel_overlays_in_userns("5.11.0"));
        assert!(!kernel_overlays_in_userns("5.10.209-1"));
        assert!(!kernel_overlays_in_userns("4.19"));
        assert!(!kernel_overlays_in_userns("garbage"));
    }

    #[test]
    fn defaults_follow_the_tools_documented_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| Env {
            get: Box::new(move |k| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }),
        };
        let e = env(&[
            ("HOME", "/h"),
            ("XDG_CACHE_HOME", "/c"),
            ("GOPATH", "/g1:/g2"),
        ]);
        let find = |n: &str| TOOLS.iter().find(|t| t.name == n).unwrap();
        assert_eq!((find("npm").default)(&e), Some(PathBuf::from("/h/.npm")));
        assert_eq!((find("pip").default)(&e), Some(PathBuf::from("/c/pip")));
        assert_eq!(
            (find("go-mod").default)(&e),
            Some(PathBuf::from("/g1/pkg/mod"))
        );
        assert_eq!(
            (find("cargo").default)(&e),
            Some(PathBuf::from("/h/.cargo"))
        );
        let bare = env(&[("HOME", "/h")]);
        assert_eq!(
            (find("uv").default)(&bare),
            Some(PathBuf::from("/h/.cache/uv"))
        );
        assert_eq!(
            (find("go-mod").default)(&bare),
            Some(PathBuf::from("/h/go/pkg/mod"))
        );
        let relative = env(&[("HOME", "h")]);
        assert_eq!((find("npm").default)(&relative), None);
    }

    #[test]
    fn worktree_keys_differ_per_worktree_and_per_directory_at_one_path() {
        let a = worktree_key(Path::new("/w/a"));
        assert_eq!(a.len(), 32);
        assert_ne!(a, worktree_key(Path::new("/w/b")));
        assert_eq!(a, worktree_key(Path::new("/w/a")));
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let wt = dir.path().join("wt");
        std::fs::create_dir(&wt).unwrap();
        let first = worktree_key(&wt);
        assert_eq!(first, worktree_key(&wt));
        std::fs::remove_dir(&wt).unwrap();
        std::fs::create_dir(&wt).unwrap();
        assert_ne!(first, worktree_key(&wt), "a new directory at the same path");
    }
}
