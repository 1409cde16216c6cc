//! The `bwrap` backend (ARCHITECTURE §2.4): the system's bubblewrap with `--new-session
//! --die-with-parent --unshare-pid --proc /proc --dev /dev`, the root bound read-only and the
//! writable set bound read-write, under shofer's supervisor.
//!
//! A too-old bubblewrap is detected by its `--version`, not by a crash halfway through: the
//! options used here all exist since [`MIN_VERSION`]. Arguments go through `--args FD` (a
//! memfd), so thousands of writable paths never hit the kernel's argument-size limit.

use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use shofer_core::policy::{NetPolicy, RuleOrigin};

use crate::error::{PlanError, SetupError};
use crate::path_search;
use crate::secretpaths::Resolved;
use crate::spec::{CapPolicy, ExecSpec};
use crate::writable::OpenedPolicy;

/// The oldest bubblewrap whose options we rely on (`--args`, `--die-with-parent`,
/// `--new-session`, `--dev`, `--proc`, `--unshare-net`).
pub const MIN_VERSION: (u32, u32, u32) = (0, 4, 0);

/// A bubblewrap found on `PATH`.
#[derive(Clone, Debug)]
pub struct Bwrap {
    /// Its path.
    pub path: PathBuf,
    /// Its version, as reported by `bwrap --version`.
    pub version: String,
    /// Whether it is installed setuid root (then shofer sets no `no_new_privs` before it).
    pub setuid: bool,
}

/// Finds `bwrap` on `PATH` and checks its version.
///
/// # Errors
/// A clause for the refusal message: "not installed", "too old (0.1.7 < 0.4.0)", …
pub fn find() -> Result<Bwrap, String> {
    let path = crate::path_search::resolve(c"bwrap")
        .map(|p| PathBuf::from(OsStr::from_bytes(p.as_bytes())))
        .map_err(|_| "not installed (no bwrap on PATH)".to_string())?;
    let out = Command::new(&path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .nth(1)
        .filter(|_| out.status.success())
        .ok_or_else(|| format!("{} --version gave no version", path.display()))?
        .to_string();
    let parsed = parse_version(&version).ok_or_else(|| {
        format!(
            "{} reports an unreadable version '{version}'",
            path.display()
        )
    })?;
    if parsed < MIN_VERSION {
        let (a, b, c) = MIN_VERSION;
        return Err(format!(
            "{} is too old ({version} < {a}.{b}.{c}; it lacks options shofer needs)",
            path.display()
        ));
    }
    let setuid = std::fs::metadata(&path)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o4000 != 0)
        .unwrap_or(false);
    Ok(Bwrap {
        path,
        version,
        setuid,
    })
}

/// `"0.8.0"` → `(0, 8, 0)`; a missing patch number is 0.
pub fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    let a = it.next()??;
    let b = it.next()??;
    let c = it.next().unwrap_or(Some(0))?;
    Some((a, b, c))
}

/// Runs a trivial sandbox to see whether this bubblewrap works here.
///
/// # Errors
/// Its first line of stderr, with the AppArmor hint when that is the cause.
pub fn check_usable(b: &Bwrap) -> Result<(), String> {
    let out = Command::new(&b.path)
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--die-with-parent",
            "--new-session",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or("failed").trim().to_string();
    if std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
        .map(|s| s.trim() == "1")
        .unwrap_or(false)
    {
        return Err(format!(
            "{first} (AppArmor restricts unprivileged user namespaces: install an AppArmor profile for bwrap, or set kernel.apparmor_restrict_unprivileged_userns=0)"
        ));
    }
    Err(first)
}

/// The `bwrap` backend's part of the plan: bubblewrap's command line, and the descriptors it
/// reads (its arguments) and writes (its info record) while it starts the command. Owned here
/// until [`Launch::command_pid`] closes them.
pub(crate) struct Launch {
    /// `bwrap --args FD -- command…`, the command resolved on `$PATH` beforehand.
    pub argv: Vec<CString>,
    /// bubblewrap does not drop privileges it gets from being setuid: no `no_new_privs` (and
    /// hence no seccomp filter) in front of it.
    pub setuid: bool,
    /// The memfd with bubblewrap's arguments (`--args`).
    args: OwnedFd,
    /// bubblewrap's `--info-fd` pipe.
    info_read: OwnedFd,
    info_write: Option<OwnedFd>,
    /// `--net proxy`: bubblewrap's `--block-fd` pipe: its child waits, namespaces made,
    /// until the supervisor has made the proxy's listener there ([`Launch::proxy_listener`]).
    block: Option<(OwnedFd, OwnedFd)>,
    /// The command's PID once read from the info pipe.
    pid: Option<Option<libc::pid_t>>,
}

impl Launch {
    /// The descriptors bubblewrap must inherit: its arguments, the info pipe's write end and
    /// the block pipe's read end.
    pub fn inherited_fds(&self) -> Vec<RawFd> {
        let mut fds = vec![self.args.as_raw_fd()];
        fds.extend(self.info_write.as_ref().map(AsRawFd::as_raw_fd));
        fds.extend(self.block.as_ref().map(|(read, _)| read.as_raw_fd()));
        fds
    }

    /// After bubblewrap has exec'd: the command's PID (bubblewrap's child, in our PID
    /// namespace) from the info pipe, read once; `None` if bubblewrap exited before starting
    /// it. Without a block pipe, also waits for the pipe's end of file: the command has then
    /// been exec'd (in its own session, where forwarded signals reach it).
    pub fn command_pid(&mut self) -> Option<libc::pid_t> {
        if self.pid.is_none() {
            // Our copy of the write end goes, so a bubblewrap that fails means end of file.
            self.info_write = None;
            self.pid = Some(child_pid(&self.info_read));
            if self.block.is_none() {
                drain(&self.info_read);
            }
        }
        self.pid.flatten()
    }

    /// `--net proxy`: the proxy's listener, made in the network namespace of bubblewrap's
    /// child, which then goes on to run the command. `None` (and bubblewrap killed with the
    /// run) when it cannot be made.
    pub fn proxy_listener(&mut self) -> Option<OwnedFd> {
        let pid = self.command_pid()?;
        let listener = crate::egress::listener_in(pid)?;
        let (_, write) = self.block.take()?;
        rustix::io::write(&write, b"1").ok()?;
        // The command has been exec'd at the info pipe's end of file.
        drain(&self.info_read);
        Some(listener)
    }
}

/// The `bwrap` backend's plan for `spec` under `opened`: resolves the command on `$PATH`
/// (bubblewrap reports every exec failure as exit 1, so the shell's 126/127 must be decided
/// here), writes bubblewrap's arguments and opens its info pipe.
///
/// # Errors
/// [`PlanError::NotRunnable`] for a command that cannot run; [`SetupError`] for
/// `--keep-descendants` (bubblewrap's init kills descendants) and failed syscalls.
pub(crate) fn plan(
    b: &Bwrap,
    opened: &OpenedPolicy,
    spec: &ExecSpec,
    layers: &crate::spec::Layers,
    secrets: &Resolved,
) -> Result<Launch, PlanError> {
    if spec.keep_descendants {
        return Err(SetupError::KeepDescendantsWithBwrap.into());
    }
    let resolved = path_search::resolve(&spec.argv[0]).map_err(|why| PlanError::NotRunnable {
        code: why.exit_code(),
        message: why.message(&spec.argv[0].to_string_lossy()),
    })?;
    let mut command = spec.argv.clone();
    command[0] = resolved;
    let (info_read, info_write) =
        shofer_sys::fd::pipe_cloexec().map_err(|source| SetupError::Syscall {
            op: "pipe2",
            source,
        })?;
    let block = if opened.policy.net == NetPolicy::Proxy {
        Some(
            shofer_sys::fd::pipe_cloexec().map_err(|source| SetupError::Syscall {
                op: "pipe2",
                source,
            })?,
        )
    } else {
        None
    };
    let drop_caps = spec.caps == CapPolicy::Drop;
    // With --keep-caps, root's command keeps CAP_SYS_ADMIN and could unmount what hides them
    // (the report says so: `crate::backend::Choice::with_keep_caps`).
    let hide = if drop_caps || !rustix::process::geteuid().is_root() {
        hiding(secrets, parse_version(&b.version).unwrap_or(MIN_VERSION))
    } else {
        Vec::new()
    };
    let (args, argv) = argv(
        b,
        opened,
        &command,
        drop_caps,
        (
            info_write.as_raw_fd(),
            block.as_ref().map(|(read, _)| read.as_raw_fd()),
        ),
        layers,
        &hide,
    )
    .map_err(|source| SetupError::Syscall {
        op: "preparing the bubblewrap arguments",
        source,
    })?;
    Ok(Launch {
        argv,
        setuid: b.setuid,
        args,
        info_read,
        info_write: Some(info_write),
        block,
        pid: None,
    })
}

/// Writes bubblewrap's arguments for `opened` into a memfd and returns it with the argv that
/// runs `command` (`bwrap --args FD -- command…`). The memfd must survive exec. With
/// `drop_caps` (no `--keep-caps`), bubblewrap drops every capability of the command
/// (`--cap-drop ALL`); it keeps them for root otherwise. bubblewrap writes
/// `{"child-pid": N}` to the info descriptor of `(info_fd, block_fd)` (which must survive
/// exec too) once the command runs: see [`child_pid`]; with a block descriptor, it holds the
/// command until a byte arrives there.
///
/// # Errors
/// `memfd_create` or write failures.
fn argv(
    b: &Bwrap,
    opened: &OpenedPolicy,
    command: &[CString],
    drop_caps: bool,
    (info_fd, block_fd): (RawFd, Option<RawFd>),
    layers: &crate::spec::Layers,
    hide: &[Vec<u8>],
) -> std::io::Result<(OwnedFd, Vec<CString>)> {
    let info = info_fd.to_string();
    let mut args: Vec<&[u8]> = vec![
        b"--info-fd",
        info.as_bytes(),
        b"--die-with-parent",
        b"--new-session",
        b"--unshare-pid",
        b"--unshare-ipc",
        b"--ro-bind",
        b"/",
        b"/",
        b"--dev",
        b"/dev",
        b"--proc",
        b"/proc",
        // A fresh /proc lets uid 0 (a root caller: bubblewrap makes no user namespace then)
        // write sysctls and sysrq-trigger, which need no capability: keep them read-only, as
        // the userns backend does.
        b"--ro-bind-try",
        b"/proc/sys",
        b"/proc/sys",
        b"--ro-bind-try",
        b"/proc/sysrq-trigger",
        b"/proc/sysrq-trigger",
        b"--ro-bind-try",
        b"/proc/irq",
        b"/proc/irq",
        b"--ro-bind-try",
        b"/proc/bus",
        b"/proc/bus",
    ];
    if opened.policy.net.own_namespace() {
        args.push(b"--unshare-net");
    }
    let block = block_fd.map(|fd| fd.to_string());
    if let Some(fd) = &block {
        args.extend_from_slice(&[b"--block-fd", fd.as_bytes()]);
    }
    let mut owned: Vec<(&[u8], Vec<u8>)> = Vec::new();
    if drop_caps {
        args.extend_from_slice(&[b"--cap-drop", b"ALL"]);
    }
    // /dev comes from --dev (its own null, zero, full, tty, ptmx, pts and shm). The layers'
    // pins (git's: the directories above the worktree and the common dir inside a writable
    // root) are bound over themselves too, so they cannot be renamed away. bubblewrap binds from
    // the host's tree, so a later bind would cover the earlier ones beneath it: shallowest
    // first.
    let mut writable: Vec<&std::path::Path> = opened
        .policy
        .writable
        .iter()
        .filter(|rule| {
            !matches!(
                rule.origin,
                RuleOrigin::Device | RuleOrigin::Terminal | RuleOrigin::SharedMemory
            )
        })
        .map(|rule| rule.path.as_path())
        .chain(layers.pins.iter().map(PathBuf::as_path))
        .collect();
    writable.sort_by_key(|p| p.components().count());
    for p in writable {
        let p = p.as_os_str().as_bytes();
        args.extend_from_slice(&[b"--bind", p, p]);
    }
    // The layers' binds (git's: writable layers and read-only binds over control files), in
    // order. Absent read-only paths are skipped (git's had no placeholder: git does not read
    // them).
    for (path, writable) in &layers.binds {
        let flag: &[u8] = if *writable {
            b"--bind"
        } else {
            b"--ro-bind-try"
        };
        owned.push((flag, path.as_os_str().as_bytes().to_vec()));
    }
    for (flag, p) in &owned {
        args.extend_from_slice(&[flag, p, p]);
    }
    // The redirect (git's object quarantine): bubblewrap takes bind sources from the host's
    // tree, so the original's read-only bind still finds it, and binds it on the mount point
    // inside the replacement, now beneath the original's path (objects/info/store).
    let q_paths = layers.redirect.as_ref().map(|r| {
        let inside = r.over.join(
            r.original_at
                .strip_prefix(&r.by)
                .unwrap_or(std::path::Path::new("")),
        );
        (
            r.by.as_os_str().as_bytes().to_vec(),
            r.over.as_os_str().as_bytes().to_vec(),
            inside.as_os_str().as_bytes().to_vec(),
        )
    });
    // The replacement (git's private view) first, the redirect inside it.
    let replace = layers.replace.as_ref().map(|(over, by)| {
        (
            by.as_os_str().as_bytes().to_vec(),
            over.as_os_str().as_bytes().to_vec(),
        )
    });
    if let Some((by, over)) = &replace {
        args.extend_from_slice(&[b"--bind", by, over]);
    }
    if let Some((dir, objects, inside)) = &q_paths {
        args.extend_from_slice(&[b"--bind", dir, objects, b"--ro-bind", objects, inside]);
    }
    // Last, over everything else: the secret locations (none is inside the writable set).
    args.extend(hide.iter().map(Vec::as_slice));
    let fd = rustix::fs::memfd_create(c"shofer-bwrap-args", rustix::fs::MemfdFlags::empty())?;
    let mut file = std::fs::File::from(fd.try_clone()?);
    for a in &args {
        file.write_all(a)?;
        file.write_all(b"\0")?;
    }
    // bwrap reads from the current offset.
    let _ = rustix::fs::seek(&fd, rustix::fs::SeekFrom::Start(0));
    let mut argv = vec![
        CString::new(b.path.as_os_str().as_bytes()).map_err(std::io::Error::other)?,
        CString::new("--args").expect("no NUL"),
        CString::new(fd.as_raw_fd().to_string()).expect("no NUL"),
        CString::new("--").expect("no NUL"),
    ];
    argv.extend(command.iter().cloned());
    Ok((fd, argv))
}

/// bubblewrap's arguments that hide the secret locations of `secrets` by mounts
/// ([`crate::secretpaths::Cover`]) for a bubblewrap of `version`. bubblewrap remounts a
/// read-only bind `nodev`, so `--ro-bind /dev/null` is the file's cover; before 0.5 it lacks
/// `--chmod`, and a directory's tmpfs keeps its default mode (an empty directory).
fn hiding(secrets: &Resolved, version: (u32, u32, u32)) -> Vec<Vec<u8>> {
    use crate::secretpaths::Cover;
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut push = |words: &[&[u8]]| out.extend(words.iter().map(|w| w.to_vec()));
    for step in secrets.covers() {
        match &step {
            Cover::File(p) => push(&[b"--ro-bind", b"/dev/null", p.as_os_str().as_bytes()]),
            Cover::Dir { path, .. } => push(&[b"--tmpfs", path.as_os_str().as_bytes()]),
            Cover::Reveal(p) => {
                let p = p.as_os_str().as_bytes();
                push(&[b"--ro-bind", p, p]);
            }
            Cover::Seal { path, mode } => {
                let p = path.as_os_str().as_bytes();
                if version >= (0, 5, 0) {
                    push(&[b"--chmod", format!("{mode:04o}").as_bytes(), p]);
                }
                push(&[b"--remount-ro", p]);
            }
        }
    }
    out
}

/// Reads `fd` to its end of file.
fn drain(fd: &OwnedFd) {
    let mut chunk = [0u8; 512];
    while shofer_sys::fd::read(fd, &mut chunk).is_ok_and(|n| n > 0) {}
}

/// Reads bubblewrap's `--info-fd` record until it is a whole JSON object (bubblewrap keeps the
/// pipe open in its child until the command runs, which `--block-fd` holds up) or EOF, and
/// returns the command's PID (in our PID namespace). `None` if bubblewrap exited before
/// starting the command.
fn child_pid(info: &OwnedFd) -> Option<libc::pid_t> {
    let mut text = Vec::new();
    let mut chunk = [0u8; 512];
    let v: serde_json::Value = loop {
        let n = shofer_sys::fd::read(info, &mut chunk).ok()?;
        if n == 0 || text.len() > 1 << 16 {
            return None;
        }
        text.extend_from_slice(chunk.get(..n)?);
        if let Ok(v) = serde_json::from_slice(&text) {
            break v;
        }
    };
    v.get("child-pid")?.as_i64().map(|p| p as libc::pid_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(parse_version("0.8.0"), Some((0, 8, 0)));
        assert_eq!(parse_version("0.10"), Some((0, 10, 0)));
        assert!(parse_version("0.1.7").unwrap() < MIN_VERSION);
        assert!(parse_version("0.10.0").unwrap() > MIN_VERSION);
        assert_eq!(parse_version("x"), None);
    }
}
