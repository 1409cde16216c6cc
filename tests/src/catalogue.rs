//! The attack catalogue: every case, what it needs, how it runs and which protection of the
//! sandbox's report explains it when it gets through.
//!
//! Cases marked `field N` reproduce sandbox case N of `shared/field-cases.md`.

use crate::runner::{
    attack_checked, attack_spec_checked, chown_all, clip, diff, marked, Cmd, Ctx, Outcome, Run, Sb,
    World,
};
use crate::sys;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where a case runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// In every backend × ABI × user cell.
    Cell,
    /// Once per suite, with `--backend auto` (machine-level behaviour).
    Global,
}

/// One catalogue case.
pub struct Case {
    /// Stable name (used in rows and in the expected-gap list).
    pub name: &'static str,
    /// One line on what it tries.
    pub what: &'static str,
    /// The report's protection key that explains a gap, if any (none = never a gap).
    pub protection: Option<&'static str>,
    /// Only meaningful as root (capability use).
    pub root_only: bool,
    /// Cell or global.
    pub scope: Scope,
    /// `Some(reason)` when a prerequisite is missing (→ `skip`).
    pub needs: fn(&World) -> Option<String>,
    /// Runs the case.
    pub run: fn(&Ctx) -> Outcome,
}

fn nothing(_: &World) -> Option<String> {
    None
}
fn need_git(w: &World) -> Option<String> {
    w.git.is_none().then(|| "git not installed".to_string())
}
fn need_git_sh(w: &World) -> Option<String> {
    need_git(w).or_else(|| (!w.sh).then(|| "/bin/sh not present".to_string()))
}
fn need_python(w: &World) -> Option<String> {
    w.python
        .is_none()
        .then(|| "python3 not installed".to_string())
}
fn need_xattr(w: &World) -> Option<String> {
    (!w.xattr).then(|| "user xattrs unsupported on the scratch filesystem".to_string())
}
fn need_suid(w: &World) -> Option<String> {
    w.suid
        .is_none()
        .then(|| "cannot make a setuid-root copy (harness not root)".to_string())
}
fn need_core(_: &World) -> Option<String> {
    let p = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let p = p.trim();
    (p.starts_with('|') || p.starts_with('/') || p.is_empty())
        .then(|| format!("core_pattern {p:?} does not dump into the cwd"))
}
fn need_sh_stty(w: &World) -> Option<String> {
    if !w.sh {
        return Some("/bin/sh not present".into());
    }
    crate::runner::which("stty")
        .is_none()
        .then(|| "stty not installed".into())
}

macro_rules! case {
    ($name:literal, $what:literal, $prot:expr, $run:expr) => {
        Case {
            name: $name,
            what: $what,
            protection: $prot,
            root_only: false,
            scope: Scope::Cell,
            needs: nothing,
            run: $run,
        }
    };
    ($name:literal, $what:literal, $prot:expr, $run:expr, needs = $needs:expr) => {
        Case {
            name: $name,
            what: $what,
            protection: $prot,
            root_only: false,
            scope: Scope::Cell,
            needs: $needs,
            run: $run,
        }
    };
}

const W: Option<&str> = Some("write_outside");
const T: Option<&str> = Some("truncate");
const R: Option<&str> = Some("rename_link_across");
const M: Option<&str> = Some("chmod_chown_utime_xattr");

/// The whole catalogue, in report order.
pub fn all() -> Vec<Case> {
    let mut v = vec![
        // --- direct writes, create/delete/rename/link across the boundary ---
        case!(
            "create-outside",
            "open(O_CREAT) a new file outside the worktree",
            W,
            |c| attack_checked(c, "create-outside", &[])
        ),
        case!(
            "write-outside",
            "open an existing outside file O_WRONLY and write",
            W,
            |c| attack_checked(c, "write-outside", &[])
        ),
        case!(
            "append-outside",
            "open an existing outside file O_APPEND and write",
            W,
            |c| attack_checked(c, "append-outside", &[])
        ),
        case!(
            "truncate-path",
            "truncate(2) an outside file by path",
            T,
            |c| attack_checked(c, "truncate-path", &[])
        ),
        case!(
            "truncate-rdonly-otrunc",
            "open(O_RDONLY|O_TRUNC) an outside file",
            T,
            |c| attack_checked(c, "truncate-rdonly-otrunc", &[])
        ),
        case!("unlink-outside", "unlink an outside file", W, |c| {
            attack_checked(c, "unlink-outside", &[])
        }),
        case!("rmdir-outside", "rmdir an outside directory", W, |c| {
            attack_checked(c, "rmdir-outside", &[])
        }),
        case!("mkdir-outside", "mkdir outside", W, |c| attack_checked(
            c,
            "mkdir-outside",
            &[]
        )),
        case!("symlink-outside", "create a symlink outside", W, |c| {
            attack_checked(c, "symlink-outside", &[])
        }),
        case!("mkfifo-outside", "mknod a FIFO outside", W, |c| {
            attack_checked(c, "mkfifo-outside", &[])
        }),
        case!(
            "bind-socket-outside",
            "bind a unix socket file outside",
            W,
            |c| attack_checked(c, "bind-socket-outside", &[])
        ),
        case!("rename-out", "rename a worktree file to outside", R, |c| {
            attack_checked(c, "rename-out", &[])
        }),
        case!(
            "rename-in",
            "rename an outside file into the worktree",
            R,
            |c| attack_checked(c, "rename-in", &[])
        ),
        case!(
            "rename-exchange",
            "renameat2(RENAME_EXCHANGE) a worktree file with an outside one",
            R,
            |c| attack_checked(c, "rename-exchange", &[])
        ),
        case!(
            "rename-dir-out",
            "rename a worktree directory to outside",
            R,
            |c| attack_checked(c, "rename-dir-out", &[])
        ),
        case!("rename-worktree", "rename the worktree itself", W, |c| {
            let o = attack_checked(c, "rename-worktree", &[]);
            if c.wt.exists() {
                o
            } else {
                Outcome::Escaped("the worktree was renamed away".into())
            }
        }),
        case!(
            "link-in",
            "hard-link an outside file into the worktree and write through it",
            R,
            |c| attack_checked(c, "link-in", &[])
        ),
        case!("link-out", "hard-link a worktree file to outside", R, |c| {
            attack_checked(c, "link-out", &[])
        }),
        case!(
            "linkat-procfd-in",
            "linkat(/proc/self/fd/N) of a read-only outside fd into the worktree",
            R,
            |c| attack_checked(c, "linkat-procfd-in", &[])
        ),
        case!(
            "otmpfile-link-out",
            "O_TMPFILE in the worktree, then link it outside",
            W,
            |c| attack_checked(c, "otmpfile-link-out", &[])
        ),
        // --- symlinks and .. ---
        case!(
            "symlink-write-through",
            "a worktree symlink to an outside file, written through",
            W,
            |c| attack_checked(c, "symlink-write-through", &[])
        ),
        case!(
            "symlink-dir-through",
            "a worktree symlink to an outside dir, create through it",
            W,
            |c| attack_checked(c, "symlink-dir-through", &[])
        ),
        case!(
            "dotdot-absolute",
            "open(wt/../outside/new, O_CREAT)",
            W,
            |c| attack_checked(c, "dotdot-absolute", &[])
        ),
        case!(
            "dotdot-relative",
            "chdir(wt); open(../outside/new, O_CREAT)",
            W,
            |c| attack_checked(c, "dotdot-relative", &[])
        ),
        case!(
            "tmp-symlink-out",
            "a /tmp symlink (writable place) to an outside file, written through",
            W,
            |c| {
                let m = c.w.marker();
                attack_checked(c, "tmp-symlink-out", &[m])
            }
        ),
        // --- metadata ---
        case!("chmod-outside", "chmod an outside file", M, |c| {
            attack_checked(c, "chmod-outside", &[])
        }),
        case!(
            "chown-outside",
            "chown an outside file (to its own owner)",
            M,
            |c| attack_checked(c, "chown-outside", &[])
        ),
        case!("utime-outside", "utimensat an outside file", M, |c| {
            attack_checked(c, "utime-outside", &[])
        }),
        case!(
            "xattr-outside",
            "setxattr user.* on an outside file",
            M,
            |c| attack_checked(c, "xattr-outside", &[]),
            needs = need_xattr
        ),
        // --- devices ---
        case!("dev-create", "create a file in /dev", W, |c| {
            let m = c.w.marker();
            let o = attack_checked(c, "dev-create", std::slice::from_ref(&m));
            let left = Path::new("/dev").join(&m);
            if left.exists() {
                let _ = std::fs::remove_file(&left);
                return Outcome::Escaped(format!("/dev/{m} was created"));
            }
            match o {
                // Judged by the host's /dev: a private /dev (namespace backends) may take it.
                Outcome::Escaped(d) => Outcome::Blocked(format!(
                    "{d} inside, but only in a private /dev: the host's /dev is untouched"
                )),
                o => o,
            }
        }),
        case!("sys-write", "open a /sys knob for writing (nothing written)", W, |c| attack_checked(c, "sys-write", &[])),
        case!("link-into-tmp", "hard-link an outside file into /tmp (writable) and write through it", R, |c| {
            let m = c.w.marker();
            let o = attack_checked(c, "link-into-tmp", std::slice::from_ref(&m));
            let _ = std::fs::remove_file(Path::new("/tmp").join(&m));
            o
        }),
        case!(
            "dev-kmsg-open-write",
            "open /dev/kmsg for writing (nothing written)",
            W,
            |c| attack_checked(c, "dev-kmsg-open-write", &[])
        ),
        case!(
            "mknod-device",
            "mknod a character device (1:3) in the worktree",
            None,
            |c| attack_checked(c, "mknod-device", &[])
        ),
        case!(
            "devices-usable",
            "/dev/null, /dev/zero, /dev/full still work",
            None,
            |c| attack_checked(c, "devices-usable", &[])
        ),
        case!(
            "dev-shm",
            "field 1: a POSIX semaphore file in /dev/shm (create, size, map, unlink)",
            None,
            |c| {
                let m = c.w.marker();
                attack_checked(c, "dev-shm", &[m])
            }
        ),
        case!(
            "python-multiprocessing-lock",
            "field 1: python3 multiprocessing.Lock()",
            None,
            python_lock,
            needs = need_python
        ),
        case!("tmp-writable", "/tmp stays writable", None, |c| {
            let m = c.w.marker();
            attack_checked(c, "tmp-writable", &[m])
        }),
        case!(
            "worktree-writable",
            "ordinary work inside the worktree",
            None,
            |c| attack_checked(c, "worktree-writable", &[])
        ),
        case!(
            "rename-inside",
            "field 8: mkdir d && touch f && mv f d/ (and a link) inside",
            Some("rename_inside"),
            |c| attack_checked(c, "rename-inside", &[])
        ),
        // --- /proc ---
        case!(
            "proc-environ",
            "read an outside process's /proc/<pid>/environ",
            None,
            |c| with_victim(c, "proc-environ")
        ),
        case!(
            "proc-self-fd-reopen",
            "reopen a read-only outside fd via /proc/self/fd for writing",
            W,
            |c| attack_checked(c, "proc-self-fd-reopen", &[])
        ),
        case!(
            "proc-self-cwd",
            "create via /proc/self/cwd with the cwd outside",
            W,
            |c| attack_checked(c, "proc-self-cwd", &[])
        ),
        case!(
            "proc-pid-root",
            "create outside via /proc/<outside pid>/root",
            W,
            |c| with_victim(c, "proc-pid-root")
        ),
        case!(
            "proc-sys-write",
            "open /proc/sys/kernel/core_pattern for writing (nothing written)",
            W,
            |c| attack_checked(c, "proc-sys-write", &[])
        ),
        // --- inherited fds ---
        case!(
            "inherited-fds-closed",
            "fds 7 (O_RDWR outside file) and 8 (O_PATH outside dir) inherited without --pass-fd",
            Some("inherited_fds"),
            inherited_fds
        ),
        case!(
            "passed-dirfd-openat",
            "--pass-fd of an O_PATH outside dir, then openat(O_CREAT)/mkdirat",
            Some("inherited_fds"),
            passed_dirfd
        ),
        case!(
            "passed-fd-reopen",
            "--pass-fd of a read-only outside file, then write / reopen for writing",
            Some("inherited_fds"),
            passed_fd_reopen
        ),
        // --- terminals ---
        case!(
            "tiocsti",
            "field 4: TIOCSTI into the controlling pty (stdin and /dev/tty)",
            Some("tiocsti"),
            |c| pty_case(c, "tiocsti")
        ),
        case!(
            "tiocsti-high-bits",
            "TIOCSTI with bits set above 32 in the request word (filter bypass)",
            Some("tiocsti"),
            |c| pty_case(c, "tiocsti-high-bits")
        ),
        case!(
            "tioclinux",
            "TIOCLINUX(PASTESEL) on the controlling pty must be refused by the filter",
            Some("tiocsti"),
            |c| pty_case(c, "tioclinux")
        ),
        case!("tiocsti-ia32", "TIOCSTI through the i386 entry point (int 0x80)", Some("tiocsti"), |c| pty_case(c, "tiocsti-ia32")),
        case!("tiocsti-x32", "TIOCSTI through the x32 system call number", Some("tiocsti"), |c| pty_case(c, "tiocsti-x32")),
        case!("tiocsti-foreign-pty", "non-interactive run: open a pty that is nobody's terminal, make it ours, TIOCSTI", Some("tiocsti"), tiocsti_foreign),
        Case { root_only: true, ..case!("dev-uinput", "as root: open /dev/uinput (a fake keyboard) for writing", W, |c| attack_checked(c, "dev-uinput", &[])) },
        case!(
            "python-tiocsti",
            "field 4: python3 fcntl.ioctl(0, TIOCSTI) under a pty",
            Some("tiocsti"),
            python_tiocsti,
            needs = need_python
        ),
        case!(
            "terminal-programs",
            "field 3: /dev/tty winsize+termios, /dev/stdout, /dev/stderr, openpty under a pty",
            Some("terminal_programs"),
            |c| pty_case(c, "terminal-programs")
        ),
        case!(
            "shell-terminal-programs",
            "field 3: stty size </dev/tty; echo a >/dev/stdout; echo b >/dev/stderr",
            Some("terminal_programs"),
            shell_terminal,
            needs = need_sh_stty
        ),
        // --- processes ---
        case!(
            "signal-outside",
            "kill(SIGTERM) a process outside the sandbox",
            Some("signals_out"),
            |c| with_victim(c, "signal-outside")
        ),
        case!(
            "ptrace-outside",
            "PTRACE_ATTACH to a process outside",
            None,
            |c| with_victim(c, "ptrace-outside")
        ),
        case!(
            "process-vm-readv",
            "process_vm_readv of a process outside",
            None,
            |c| with_victim(c, "process-vm-readv")
        ),
        case!("kill-supervisor", "SIGKILL the shofer-sandbox supervisor (our parent) after leaving a setsid() child", Some("signals_out"), kill_supervisor),
        case!("ptrace-supervisor", "PTRACE_ATTACH / open /proc/<pid>/mem of the supervisor", None, |c| attack_checked(c, "ptrace-supervisor", &harness_ids(c))),
        case!("proc-supervisor-fds", "reopen for writing the outside files the supervisor holds, via /proc/<ppid>/fd", W, |c| attack_checked(c, "proc-supervisor-fds", &harness_ids(c))),
        // --- sockets and network ---
        case!(
            "abstract-unix-connect",
            "connect to an outside abstract unix socket",
            Some("abstract_unix_sockets"),
            abstract_unix
        ),
        case!(
            "pathname-unix-connect",
            "field 10: connect to an outside pathname unix socket",
            Some("pathname_unix_sockets"),
            pathname_unix
        ),
        case!(
            "tcp-connect-net-deny",
            "--net deny: connect to a 127.0.0.1 listener outside",
            Some("tcp"),
            tcp_connect_deny
        ),
        case!(
            "tcp-bind-net-deny",
            "--net deny: bind 127.0.0.1:<port>",
            Some("tcp"),
            tcp_bind_deny
        ),
        case!(
            "tcp-connect-net-allow",
            "--net allow (default): connecting works",
            None,
            tcp_connect_allow
        ),
        // --- mounts and namespaces ---
        case!("open-tree-clone", "unshare, open_tree(CLONE) the outside tree, clear RDONLY, write through the detached mount", None, |c| attack_checked(c, "open-tree-clone", &[])),
        case!(
            "mount-bind-outside",
            "bind-mount an outside dir into the worktree and write",
            None,
            |c| {
                let ns = c.w.mntns.clone();
                attack_checked(c, "mount-bind-outside", &[ns])
            }
        ),
        case!(
            "unshare-remount",
            "unshare(user+mount ns), bind+remount rw an outside dir, write",
            None,
            |c| attack_checked(c, "unshare-remount", &[])
        ),
        case!(
            "pivot-root",
            "unshare, pivot_root into the worktree, write outside via the old root",
            None,
            |c| attack_checked(c, "pivot-root", &[])
        ),
        // --- privileges ---
        case!(
            "setuid-exec",
            "exec a setuid-root program: no euid 0, no capabilities (no_new_privs)",
            None,
            |c| {
                let s =
                    c.w.suid
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default();
                attack_checked(c, "suid-exec", &[s])
            },
            needs = need_suid
        ),
        case!(
            "caps-and-nnp",
            "no capabilities in any set, NoNewPrivs=1",
            Some("capabilities"),
            |c| {
                let who = if c.cell.user.is_root() {
                    "root"
                } else {
                    "unpriv"
                };
                attack_checked(c, "caps-and-nnp", &[who.to_string()])
            }
        ),
        Case {
            root_only: true,
            ..case!(
                "root-chown-foreign",
                "as root: chown a file owned by uid 4242 outside (CAP_CHOWN)",
                None,
                root_chown
            )
        },
        Case {
            root_only: true,
            ..case!(
                "root-dac-read",
                "as root: read a 0600 file of uid 4242 (CAP_DAC_OVERRIDE)",
                None,
                root_dac_read
            )
        },
        Case {
            root_only: true,
            ..case!(
                "root-open-by-handle",
                "as root: open_by_handle_at (CAP_DAC_READ_SEARCH)",
                None,
                |c| attack_checked(c, "open-by-handle", &[])
            )
        },
        case!(
            "sethostname-private-uts",
            "unshare(CLONE_NEWUTS) + sethostname (only in the private namespace)",
            None,
            |c| attack_checked(c, "sethostname-uts", &[])
        ),
        case!(
            "core-dump-outside",
            "crash with the cwd outside: no core file there",
            W,
            |c| attack_checked(c, "core-dump", &[]),
            needs = need_core
        ),
        // --- process tree ---
        case!(
            "setsid-escape",
            "a setsid() child outlives the command",
            None,
            |c| tree_case(c, "setsid-escape")
        ),
        case!(
            "double-fork-escape",
            "a double-forked grandchild outlives the command",
            None,
            |c| tree_case(c, "double-fork-escape")
        ),
        case!(
            "sigterm-ignoring-descendant",
            "a descendant ignoring SIGTERM/SIGHUP outlives the command",
            None,
            |c| tree_case(c, "sigterm-ignoring-descendant")
        ),
        case!("respawn-on-sigterm", "a descendant that forks a fresh copy of itself on every SIGTERM/SIGHUP", None, |c| tree_spawn(c, &["respawn"])),
        case!("deep-tree-escape", "a chain of 5 setsid()/SIGTERM-ignoring processes, each the parent of the next", None, |c| tree_spawn(c, &["deep", "5"])),
        case!(
            "supervisor-sigterm",
            "SIGTERM to shofer-sandbox kills the whole tree",
            None,
            supervisor_sigterm
        ),
        case!(
            "parent-death",
            "the caller of shofer-sandbox is SIGKILLed: the tree dies too",
            None,
            parent_death
        ),
        // --- git (field 2) ---
        case!(
            "git-linked-worktree-works",
            "field 2: add, commit, checkout -b, stash list in a linked worktree",
            Some("rename_inside"),
            git_works,
            needs = need_git_sh
        ),
        case!(
            "git-common-config",
            "field 2: git config core.fsmonitor / a write to the common config",
            None,
            git_common_config,
            needs = need_git
        ),
        case!(
            "git-hooks",
            "field 2: a file into the common hooks/",
            None,
            git_hooks,
            needs = need_git
        ),
        case!(
            "git-packed-refs",
            "write packed-refs, rename a file over it from objects/, git pack-refs",
            None,
            git_packed_refs,
            needs = need_git
        ),
        case!(
            "git-info",
            "write the common info/exclude and info/attributes",
            None,
            git_info,
            needs = need_git
        ),
        case!(
            "git-worktree-config",
            "extensions.worktreeConfig on: write <gitdir>/config.worktree (read by the host's git)",
            None,
            git_worktree_config,
            needs = need_git
        ),
        case!(
            "git-tampered-gitfile-next-run",
            "rewrite wt/.git to another repo's gitdir, then write into it on the next run",
            None,
            |c| git_tamper(c, Tamper::GitFile),
            needs = need_git
        ),
        case!(
            "git-tampered-commondir-next-run",
            "rewrite <gitdir>/commondir to another repo, then write into it on the next run",
            None,
            |c| git_tamper(c, Tamper::CommonDir),
            needs = need_git
        ),
        case!("git-tampered-gitfile-sibling-next-run", "point wt/.git at a sibling linked worktree's gitdir, then write into it on the next run", None, |c| git_tamper(c, Tamper::Sibling), needs = need_git),
        case!("allow-write-symlink-next-run", "plant wt/cache -> outside, then a run with --allow-write wt/cache writes through it", None, allow_write_symlink),
        case!("git-commondir-redirect-host", "rewrite <gitdir>/commondir to a common dir inside wt with core.fsmonitor; the host's next git status runs it", None, git_commondir_host, needs = need_git_sh),
        case!("git-main-worktree-hooks", "a main worktree (.git is a directory inside wt): write .git/config core.fsmonitor; the host's next git status runs it", None, git_main_worktree, needs = need_git_sh),
        case!(
            "git-fake-layout-next-run",
            "a fake common dir in wt with symlinks to another repo, then write on the next run",
            None,
            |c| git_tamper(c, Tamper::FakeLayout),
            needs = need_git
        ),
    ];
    // --- machine-level cases (once, --backend auto) ---
    v.extend([
        Case { scope: Scope::Global, ..case!("probe-matches-kernel", "field 5: --probe tells Landlock available / disabled (EOPNOTSUPP) / not built (ENOSYS) apart", None, probe_matches) },
        Case { scope: Scope::Global, root_only: true, ..case!("userns-blocked-reason", "field 6: user.max_user_namespaces=0: userns fails with a one-line reason; auto still runs", None, userns_blocked) },
        Case { scope: Scope::Global, ..case!("old-bwrap-detected", "field 7: an old bwrap (0.3.0) on PATH is refused by version, never run", None, old_bwrap) },
        Case { scope: Scope::Global, ..case!("many-allow-write", "field 9: 1,000 --allow-write paths", None, many_allow_write) },
        Case { scope: Scope::Global, ..case!("many-linked-worktrees", "field 9: 300 linked worktrees in one repository", None, many_worktrees, needs = need_git) },
    ]);
    v
}

fn fd_of(r: Result<OwnedFd, sys::Errno>, what: &str) -> Result<OwnedFd, Outcome> {
    r.map_err(|e| Outcome::Error(format!("harness: open {what}: {e}")))
}

fn with_victim(c: &Ctx, attack: &'static str) -> Outcome {
    let secret = format!("{}-secret", c.w.marker());
    let Some(mut v) = c.victim(&secret) else {
        return Outcome::Error("harness: could not start the outside victim".into());
    };
    let pid = v.pid().to_string();
    let o = attack_checked(c, attack, &[pid.clone(), secret]);
    std::thread::sleep(Duration::from_millis(20));
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim().chars().next().unwrap_or('?'))
        });
    if !v.alive() {
        return Outcome::Escaped(format!("the outside victim died ({})", describe(&o)));
    }
    if state == Some('t') || state == Some('T') {
        return Outcome::Escaped("the outside victim is stopped/traced".into());
    }
    o
}

fn describe(o: &Outcome) -> String {
    match o {
        Outcome::Blocked(d)
        | Outcome::Escaped(d)
        | Outcome::Works(d)
        | Outcome::Broken(d)
        | Outcome::Skip(d)
        | Outcome::Error(d)
        | Outcome::Fail(d) => d.clone(),
    }
}

fn inherited_fds(c: &Ctx) -> Outcome {
    let f = match fd_of(
        sys::open(c.out.join("existing"), libc::O_RDWR, 0),
        "outside/existing",
    ) {
        Ok(f) => f,
        Err(o) => return o,
    };
    let d = match fd_of(
        sys::open(&c.out, libc::O_PATH | libc::O_DIRECTORY, 0),
        "outside dir",
    ) {
        Ok(f) => f,
        Err(o) => return o,
    };
    let mut spec = Sb::new(Cmd::Attack("inherited-fds", vec![]));
    spec.fds = vec![(7, f.as_raw_fd()), (8, d.as_raw_fd())];
    attack_spec_checked(c, spec)
}

fn passed_dirfd(c: &Ctx) -> Outcome {
    let d = match fd_of(
        sys::open(&c.out, libc::O_PATH | libc::O_DIRECTORY, 0),
        "outside dir",
    ) {
        Ok(f) => f,
        Err(o) => return o,
    };
    let mut spec = Sb::new(Cmd::Attack("passed-dirfd-openat", vec!["8".into()]));
    spec.fds = vec![(8, d.as_raw_fd())];
    spec.extra = vec!["--pass-fd".into(), "8".into()];
    attack_spec_checked(c, spec)
}

fn passed_fd_reopen(c: &Ctx) -> Outcome {
    let f = match fd_of(
        sys::open(c.out.join("existing"), libc::O_RDONLY, 0),
        "outside/existing",
    ) {
        Ok(f) => f,
        Err(o) => return o,
    };
    let mut spec = Sb::new(Cmd::Attack("passed-fd-reopen", vec!["7".into()]));
    spec.fds = vec![(7, f.as_raw_fd())];
    spec.extra = vec!["--pass-fd".into(), "7".into()];
    attack_spec_checked(c, spec)
}

/// Runs `cmd` on a fresh pty that is the sandbox's controlling terminal, then reads the
/// slave's input queue: any byte there was injected (nobody else writes to the master).
fn on_pty(c: &Ctx, cmd: Cmd) -> Result<(Run, Vec<u8>), Outcome> {
    let (master, slave, slave_path) =
        sys::openpty().map_err(|e| Outcome::Error(format!("harness: openpty: {e}")))?;
    // Like a login terminal: owned by the user who runs the command.
    let (u, g) = c.cell.user.ids();
    let _ = sys::chown(&slave_path, u, g);
    sys::tty_raw(slave.as_raw_fd())
        .map_err(|e| Outcome::Error(format!("harness: raw mode: {e}")))?;
    let _ = sys::set_nonblock(master.as_raw_fd());
    let mut spec = Sb::new(cmd);
    spec.pty = Some(slave.as_raw_fd());
    spec.pty_master = Some(master.as_raw_fd());
    spec.timeout = Duration::from_secs(20);
    let run = c.sb(spec);
    let _ = sys::set_nonblock(slave.as_raw_fd());
    let injected = sys::drain(slave.as_raw_fd());
    Ok((run, injected))
}

fn pty_case(c: &Ctx, attack: &'static str) -> Outcome {
    let (run, injected) = match on_pty(c, Cmd::Attack(attack, vec![])) {
        Ok(x) => x,
        Err(o) => return o,
    };
    if !injected.is_empty() {
        return Outcome::Escaped(format!(
            "{:?} reached the terminal's input queue ({})",
            String::from_utf8_lossy(&injected),
            describe(&run.outcome())
        ));
    }
    run.outcome()
}

fn python_bin(w: &World) -> String {
    w.python
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn python_tiocsti(c: &Ctx) -> Outcome {
    let py = python_bin(c.w);
    let code = "import fcntl,termios\ntry:\n fcntl.ioctl(0, termios.TIOCSTI, b'x')\n print('SHOFER-CONTAINMENT: escaped TIOCSTI succeeded')\nexcept OSError as e:\n print('SHOFER-CONTAINMENT: blocked TIOCSTI ->', e)\n";
    let (run, injected) = match on_pty(c, Cmd::Argv(vec![py, "-c".into(), code.into()])) {
        Ok(x) => x,
        Err(o) => return o,
    };
    if !injected.is_empty() {
        return Outcome::Escaped(format!(
            "{:?} reached the terminal's input queue",
            String::from_utf8_lossy(&injected)
        ));
    }
    run.outcome()
}

fn shell_terminal(c: &Ctx) -> Outcome {
    let script = "stty size </dev/tty && echo a >/dev/stdout && echo b >/dev/stderr && echo 'SHOFER-CONTAINMENT: ok stty size, /dev/stdout, /dev/stderr'";
    let (run, _) = match on_pty(c, Cmd::Shell(script.into())) {
        Ok(x) => x,
        Err(o) => return o,
    };
    match run.verdict() {
        Some((v, d)) if v == "ok" => Outcome::Works(d),
        _ => Outcome::Broken(format!(
            "terminal commands failed: {} {}",
            clip(run.stdout.trim(), 200),
            run.how()
        )),
    }
}

fn python_lock(c: &Ctx) -> Outcome {
    let py = python_bin(c.w);
    let run = c.sb(Sb::new(Cmd::Argv(vec![
        py,
        "-c".into(),
        "import multiprocessing as m; m.Lock(); print('ok')".into(),
    ])));
    if run.code == Some(0) && run.stdout.lines().any(|l| l.trim() == "ok") {
        Outcome::Works("multiprocessing.Lock() printed ok".into())
    } else {
        Outcome::Broken(format!("python3 multiprocessing.Lock(): {}", run.how()))
    }
}

fn abstract_unix(c: &Ctx) -> Outcome {
    let name = c.w.marker();
    let l = match sys::unix_listen(name.as_bytes(), true) {
        Ok(l) => l,
        Err(e) => return Outcome::Error(format!("harness: abstract listener: {e}")),
    };
    let o = attack_checked(c, "abstract-unix-connect", &[name]);
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!("the outside listener got {n} connection(s)"));
    }
    o
}

fn pathname_unix(c: &Ctx) -> Outcome {
    let path = c.out.join("listen.sock");
    let l = match sys::unix_listen(path.as_os_str().as_encoded_bytes(), false) {
        Ok(l) => l,
        Err(e) => return Outcome::Error(format!("harness: pathname listener: {e}")),
    };
    let (u, g) = c.cell.user.ids();
    let _ = sys::lchown(&path, u, g);
    let _ = sys::chmod(&path, 0o777);
    let o = attack_checked(c, "pathname-unix-connect", &[path.display().to_string()]);
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!("the outside listener got {n} connection(s)"));
    }
    o
}

fn tcp_connect_deny(c: &Ctx) -> Outcome {
    let (l, port) = match sys::tcp_bind(0, true) {
        Ok(x) => x,
        Err(e) => return Outcome::Error(format!("harness: tcp listener: {e}")),
    };
    let mut spec = Sb::new(Cmd::Attack("tcp-connect", vec![port.to_string()]));
    spec.extra = vec!["--net".into(), "deny".into()];
    let o = attack_spec_checked(c, spec);
    if let Some(f) = silent_net_downgrade(c) {
        return f;
    }
    let n = sys::accept_all(l.as_raw_fd());
    if n > 0 {
        return Outcome::Escaped(format!(
            "the outside 127.0.0.1:{port} listener got {n} connection(s)"
        ));
    }
    o
}

fn tcp_bind_deny(c: &Ctx) -> Outcome {
    let port = match sys::tcp_bind(0, false) {
        Ok((_, p)) => p,
        Err(e) => return Outcome::Error(format!("harness: free port: {e}")),
    };
    let mut spec = Sb::new(Cmd::Attack(
        "tcp-bind",
        vec![port.to_string(), c.w.netns.clone()],
    ));
    spec.extra = vec!["--net".into(), "deny".into()];
    let o = attack_spec_checked(c, spec);
    silent_net_downgrade(c).unwrap_or(o)
}

/// `--net deny` that the report says is not enforced must have been refused without
/// `--allow-degraded` (never a silent downgrade).
fn silent_net_downgrade(c: &Ctx) -> Option<Outcome> {
    let rep = c.report.borrow();
    let tcp = &rep.as_ref()?["protections"]["tcp"];
    let unenforced = tcp["enforced"].as_bool() == Some(false);
    let flagged = c.cell.degraded || c.last_needed_degraded.get();
    (unenforced && !flagged).then(|| {
        Outcome::Fail(format!(
            "--net deny ran without --allow-degraded although the report says TCP is not enforced ({})",
            tcp["reason"]
        ))
    })
}

fn tcp_connect_allow(c: &Ctx) -> Outcome {
    let (l, port) = match sys::tcp_bind(0, true) {
        Ok(x) => x,
        Err(e) => return Outcome::Error(format!("harness: tcp listener: {e}")),
    };
    let o = attack_checked(c, "tcp-connect", &[port.to_string(), "expect-ok".into()]);
    let _ = sys::accept_all(l.as_raw_fd());
    o
}

/// `[harness pid, harness pid namespace]` for the supervisor attacks.
fn harness_ids(c: &Ctx) -> Vec<String> {
    vec![std::process::id().to_string(), c.w.pidns.clone()]
}

fn kill_supervisor(c: &Ctx) -> Outcome {
    let marker = c.w.marker();
    let me = c.w.me.display().to_string();
    let run = c.sb(Sb::new(Cmd::Attack(
        "kill-supervisor",
        [vec![me, marker.clone()], harness_ids(c)].concat(),
    )));
    std::thread::sleep(Duration::from_millis(100));
    let left = reap_marked(&marker);
    let o = run.outcome();
    match (&o, left.is_empty()) {
        (_, false) => Outcome::Escaped(format!(
            "{}; the setsid() child (pids {left:?}) outlived the killed supervisor",
            describe(&o)
        )),
        // The supervisor is what died: shofer-sandbox itself ended by SIGKILL.
        (_, true) if run.signal == Some(libc::SIGKILL) => Outcome::Escaped(format!(
            "shofer-sandbox was SIGKILLed from inside ({})",
            describe(&o)
        )),
        (Outcome::Escaped(d), true) if d.starts_with("no supervisor") => o,
        (Outcome::Escaped(d), true) => Outcome::Blocked(format!(
            "{d}, but shofer-sandbox survived and nothing was left behind ({})",
            run.how()
        )),
        _ => o,
    }
}

fn tiocsti_foreign(c: &Ctx) -> Outcome {
    let (_master, slave, slave_path) = match sys::openpty() {
        Ok(x) => x,
        Err(e) => return Outcome::Error(format!("harness: openpty: {e}")),
    };
    let _ = sys::tty_raw(slave.as_raw_fd());
    let (u, g) = c.cell.user.ids();
    let _ = sys::chown(&slave_path, u, g);
    let run = c.sb(Sb::new(Cmd::Attack(
        "tiocsti-foreign-pty",
        vec![slave_path],
    )));
    let _ = sys::set_nonblock(slave.as_raw_fd());
    let injected = sys::drain(slave.as_raw_fd());
    if !injected.is_empty() {
        return Outcome::Escaped(format!(
            "{:?} reached a foreign pty's input queue ({})",
            String::from_utf8_lossy(&injected),
            describe(&run.outcome())
        ));
    }
    run.outcome()
}

fn allow_write_symlink(c: &Ctx) -> Outcome {
    // Run 1 (inside): plant the symlink in the worktree — allowed, the worktree is writable.
    let link = c.wt.join("cache");
    let run1 = c.sb(Sb::new(Cmd::AttackRaw(
        "plant-symlink",
        vec![c.out.display().to_string(), link.display().to_string()],
    )));
    if !matches!(run1.outcome(), Outcome::Works(_)) {
        return Outcome::Error(format!(
            "harness: planting the symlink failed: {}",
            describe(&run1.outcome())
        ));
    }
    // Run 2: the caller allows a cache path inside the worktree (harmless-looking).
    let mut spec = Sb::new(Cmd::AttackRaw(
        "deny-write",
        vec![
            link.join("new9").display().to_string(),
            c.out.join("new10").display().to_string(),
        ],
    ));
    spec.extra = vec!["--allow-write".into(), link.display().to_string()];
    let before = c.snapshot();
    let run2 = c.sb(spec);
    let after = c.snapshot();
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!(
            "--allow-write <wt>/cache followed an attacker-planted symlink to outside: {d}"
        ));
    }
    if run2.code == Some(125) {
        return Outcome::Blocked(format!("refused: {}", clip(run2.stderr.trim(), 200)));
    }
    run2.outcome()
}

fn root_chown(c: &Ctx) -> Outcome {
    let f = c.out.join("foreign");
    if std::fs::write(&f, b"foreign\n").is_err() || sys::chown(&f, 4242, 4242).is_err() {
        return Outcome::Error("harness: cannot make a uid-4242 file".into());
    }
    attack_checked(c, "root-chown-foreign", &[])
}

fn root_dac_read(c: &Ctx) -> Outcome {
    let f = c.out.join("secret");
    if std::fs::write(&f, b"secret\n").is_err()
        || sys::chown(&f, 4242, 4242).is_err()
        || sys::chmod(&f, 0o600).is_err()
    {
        return Outcome::Error("harness: cannot make a uid-4242 0600 file".into());
    }
    attack_checked(c, "root-dac-read", &[])
}

/// Kills (by pid) leftovers carrying `marker` and reports them.
fn reap_marked(marker: &str) -> Vec<i32> {
    let left = marked(marker);
    for &p in &left {
        let _ = sys::kill(p, libc::SIGKILL);
    }
    left
}

fn tree_case(c: &Ctx, attack: &'static str) -> Outcome {
    let marker = c.w.marker();
    let me = c.w.me.display().to_string();
    let run = c.sb(Sb::new(Cmd::Attack(attack, vec![me, marker.clone()])));
    let left = reap_marked(&marker);
    if !left.is_empty() {
        return Outcome::Escaped(format!(
            "after shofer-sandbox exited, pids {left:?} with the marker were still alive ({})",
            run.how()
        ));
    }
    match run.outcome() {
        Outcome::Works(d) => Outcome::Blocked(format!(
            "{d}; nothing with the marker alive after the sandbox exited"
        )),
        o => o,
    }
}

fn tree_spawn(c: &Ctx, mode: &[&str]) -> Outcome {
    let marker = c.w.marker();
    let mut args = vec![c.w.me.display().to_string(), marker.clone()];
    args.extend(mode.iter().map(|s| s.to_string()));
    let run = c.sb(Sb::new(Cmd::Attack("spawn-then-exit", args)));
    // Give a respawned copy the chance to show up.
    std::thread::sleep(Duration::from_millis(150));
    let left = reap_marked(&marker);
    if !left.is_empty() {
        // Respawners keep forking: sweep a few more times.
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(20));
            reap_marked(&marker);
        }
        return Outcome::Escaped(format!(
            "after shofer-sandbox exited, pids {left:?} with the marker were alive ({})",
            run.how()
        ));
    }
    match run.outcome() {
        Outcome::Works(d) => Outcome::Blocked(format!(
            "{d}; nothing with the marker alive after the sandbox exited"
        )),
        o => o,
    }
}

fn supervisor_sigterm(c: &Ctx) -> Outcome {
    let marker = c.w.marker();
    let me = c.w.me.display().to_string();
    let mut spec = Sb::new(Cmd::Attack("tree-then-wait", vec![me, marker.clone()]));
    spec.timeout = Duration::from_secs(15);
    spec.during = Some(Box::new(|pid| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            let _ = sys::kill(pid, libc::SIGTERM);
        });
    }));
    let run = c.sb(spec);
    let left = reap_marked(&marker);
    if !left.is_empty() {
        return Outcome::Escaped(format!(
            "after SIGTERM to shofer-sandbox, pids {left:?} were still alive ({})",
            run.how()
        ));
    }
    if run.timed_out {
        return Outcome::Escaped("shofer-sandbox did not stop on SIGTERM".into());
    }
    Outcome::Blocked(format!("the tree is gone after SIGTERM ({})", run.how()))
}

fn parent_death(c: &Ctx) -> Outcome {
    // run-wrapped: an intermediate process runs the sandbox and is SIGKILLed.
    let marker = c.w.marker();
    let me = c.w.me.display().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut spec = Sb::new(Cmd::Attack("tree-then-wait", vec![me, marker.clone()]));
    spec.timeout = Duration::from_secs(10);
    spec.env
        .push(("SHOFER_CONTAINMENT_WRAP".into(), "1".into()));
    spec.during = Some(Box::new(move |pid| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = tx.send(());
        });
    }));
    let _run = c.sb(spec);
    let _ = rx.recv_timeout(Duration::from_secs(2));
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if marked(&marker).is_empty() {
            return Outcome::Blocked(format!(
                "the tree died {} ms after its caller was killed",
                start.elapsed().as_millis()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = reap_marked(&marker);
    Outcome::Escaped(format!(
        "5 s after the caller was SIGKILLed, pids {left:?} (sandbox or tree) were alive"
    ))
}

// ---------------------------------------------------------------- git

struct Repo {
    common: PathBuf,
    gitdir: PathBuf,
    victim: PathBuf,
    env: Vec<(String, String)>,
}

fn git(w: &World, env: &[(String, String)], dir: &Path, args: &[&str]) -> Result<String, String> {
    let git = w.git.as_ref().ok_or("no git")?;
    let out = Command::new(git)
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", &w.path_env)
        .envs(env.iter().cloned())
        .output()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn git_env(dir: &Path) -> Vec<(String, String)> {
    [
        ("HOME", dir.join("home").display().to_string()),
        ("GIT_CONFIG_NOSYSTEM", "1".into()),
        ("GIT_AUTHOR_NAME", "shofer".into()),
        ("GIT_AUTHOR_EMAIL", "shofer@example.invalid".into()),
        ("GIT_COMMITTER_NAME", "shofer".into()),
        ("GIT_COMMITTER_EMAIL", "shofer@example.invalid".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Makes `dir/repo` with one commit and `wt` a linked worktree of it (branch `agent`), plus
/// an unrelated repository `dir/victim`; everything owned by the cell's user.
fn make_repo(c: &Ctx) -> Result<Repo, String> {
    let env = git_env(&c.dir);
    let repo = c.dir.join("repo");
    let victim = c.dir.join("victim");
    let _ = std::fs::create_dir_all(c.dir.join("home"));
    for r in [&repo, &victim] {
        std::fs::create_dir_all(r).map_err(|e| e.to_string())?;
        git(c.w, &env, r, &["init", "-q", "-b", "main"])?;
        std::fs::write(r.join("README"), b"hello\n").map_err(|e| e.to_string())?;
        git(c.w, &env, r, &["add", "README"])?;
        git(c.w, &env, r, &["commit", "-qm", "init"])?;
        git(c.w, &env, r, &["pack-refs", "--all"])?;
    }
    std::fs::remove_dir_all(&c.wt).map_err(|e| e.to_string())?;
    git(
        c.w,
        &env,
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "agent",
            &c.wt.display().to_string(),
        ],
    )?;
    let common = repo.join(".git");
    let gitdir = common
        .join("worktrees")
        .join(c.wt.file_name().unwrap_or_default());
    std::fs::create_dir_all(common.join("hooks")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(common.join("info")).map_err(|e| e.to_string())?;
    let (u, g) = c.cell.user.ids();
    chown_all(&c.dir, u, g);
    Ok(Repo {
        common: common.canonicalize().unwrap_or(common),
        gitdir,
        victim,
        env,
    })
}

fn snap_paths(paths: &[PathBuf]) -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    for p in paths {
        let mut s = BTreeMap::new();
        snapshot_into(p, p, &mut s);
        for (k, v) in s {
            all.insert(format!("{}/{k}", p.display()), v);
        }
    }
    all
}

fn snapshot_into(root: &Path, p: &Path, m: &mut BTreeMap<String, String>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return;
    };
    let rel = p
        .strip_prefix(root)
        .map(|r| r.display().to_string())
        .unwrap_or_default();
    let mut d = format!(
        "mode={:o} size={} mtime={}.{}",
        md.mode(),
        md.size(),
        md.mtime(),
        md.mtime_nsec()
    );
    if md.is_file() {
        d.push_str(&format!(
            " content={:?}",
            std::fs::read(p).map(|c| c.len()).unwrap_or(0)
        ));
    }
    m.insert(rel, d);
    if md.is_dir() {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                snapshot_into(root, &e.path(), m);
            }
        }
    }
}

/// The read-only parts of the common dir: config, hooks/, info/, packed-refs (top level
/// files of the common dir too, so new files there show up).
fn common_ro(r: &Repo) -> Vec<PathBuf> {
    let mut v = vec![r.common.join("hooks"), r.common.join("info")];
    if let Ok(rd) = std::fs::read_dir(&r.common) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_file()).unwrap_or(false) {
                v.push(e.path());
            }
        }
    }
    v.push(r.common.clone());
    v
}

fn fs_snapshot_common(r: &Repo) -> BTreeMap<String, String> {
    // Only top-level entries of the common dir (objects/refs/logs are writable by design).
    let mut m = snap_paths(&common_ro(r)[..common_ro(r).len() - 1]);
    if let Ok(rd) = std::fs::read_dir(&r.common) {
        let mut names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        m.insert("common-entries".into(), names.join(","));
    }
    m
}

fn deny(c: &Ctx, env: &[(String, String)], wt: Option<PathBuf>, paths: &[PathBuf]) -> Run {
    let mut spec = Sb::new(Cmd::AttackRaw(
        "deny-write",
        paths.iter().map(|p| p.display().to_string()).collect(),
    ));
    spec.env = env.to_vec();
    spec.wt = wt;
    c.sb(spec)
}

fn git_works(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let before = fs_snapshot_common(&r);
    let mut spec = Sb::new(Cmd::Shell(
        "echo x > f && git add f && git commit -qm t && git checkout -q -b t2 && git stash list && echo 'SHOFER-CONTAINMENT: ok done'".into(),
    ));
    spec.env = r.env.clone();
    let run = c.sb(spec);
    let after = fs_snapshot_common(&r);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("the read-only part of the common dir changed: {d}"));
    }
    if run.code != Some(0) {
        return Outcome::Broken(format!("git in the linked worktree failed: {}", run.how()));
    }
    let log = git(c.w, &r.env, &c.wt, &["log", "-1", "--format=%s"]).unwrap_or_default();
    let reflog = r.gitdir.join("logs/HEAD");
    if log.trim() != "t" || !reflog.exists() {
        return Outcome::Broken(format!(
            "commit not visible from outside (log {:?}, reflog exists {})",
            log.trim(),
            reflog.exists()
        ));
    }
    Outcome::Works("add, commit (with reflog), checkout -b, stash list worked; config/hooks/info/packed-refs untouched".into())
}

/// Runs `git status` in `dir` the way the host would after the sandboxed run: as the cell's
/// user, outside any sandbox, with no safe.directory override. Returns git's stderr.
fn host_git_status(c: &Ctx, dir: &Path) -> String {
    let Some(gitb) = c.w.git.as_ref() else {
        return String::new();
    };
    let mut cmd = Command::new(gitb);
    cmd.args(["status", "--short"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", &c.w.path_env)
        .envs(git_env(&c.dir));
    if let crate::runner::User::Unpriv(u) = c.cell.user {
        use std::os::unix::process::CommandExt;
        cmd.uid(u).gid(u);
    }
    cmd.output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default()
}

fn payload_config(payload: &Path) -> String {
    format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = \"touch {}\"\n",
        payload.display()
    )
}

fn git_commondir_host(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let payload = c.out.join("pwned-by-commondir");
    let evil = c.wt.join("evilcommon");
    // Run 1 (inside): a common dir of our own inside the worktree, and commondir pointing at it.
    let files = [
        (evil.join("config"), payload_config(&payload)),
        (evil.join("HEAD"), "ref: refs/heads/agent\n".to_string()),
        (evil.join("refs/heads/.keep"), String::new()),
        (evil.join("objects/.keep"), String::new()),
        (r.gitdir.join("commondir"), format!("{}\n", evil.display())),
    ];
    // Directories inside the worktree (attacker-owned anyway) are made from outside; the
    // files, including <gitdir>/commondir, are written by the sandboxed command.
    for d in [evil.join("refs/heads"), evil.join("objects")] {
        let _ = std::fs::create_dir_all(d);
    }
    let (u, g) = c.cell.user.ids();
    chown_all(&c.wt, u, g);
    for (path, content) in files {
        let run = put(c, &r, path.clone(), &content);
        if !matches!(run.outcome(), Outcome::Works(_)) {
            return Outcome::Blocked(format!(
                "writing {} failed: {}",
                path.display(),
                describe(&run.outcome())
            ));
        }
    }
    let err = host_git_status(c, &c.wt);
    if payload.exists() {
        let _ = std::fs::remove_file(&payload);
        return Outcome::Escaped(format!(
            "the host's next `git status` ran attacker code: <gitdir>/commondir (writable) redirected git to a common dir inside the worktree whose config sets core.fsmonitor{}",
            if err.trim().is_empty() { String::new() } else { format!(" (git: {})", clip(err.trim(), 120)) }
        ));
    }
    Outcome::Blocked(format!(
        "host git status did not run the payload ({})",
        clip(err.trim(), 160)
    ))
}

fn git_main_worktree(c: &Ctx) -> Outcome {
    let env = git_env(&c.dir);
    let _ = std::fs::create_dir_all(c.dir.join("home"));
    if let Err(e) = git(c.w, &env, &c.wt, &["init", "-q", "-b", "main"]) {
        return Outcome::Error(format!("harness: {e}"));
    }
    let (u, g) = c.cell.user.ids();
    chown_all(&c.dir, u, g);
    let payload = c.out.join("pwned-by-main-worktree");
    let r = Repo {
        common: c.wt.join(".git"),
        gitdir: c.wt.join(".git"),
        victim: c.dir.join("none"),
        env,
    };
    let config_before = std::fs::read(c.wt.join(".git/config")).unwrap_or_default();
    let run = put(c, &r, c.wt.join(".git/config"), &payload_config(&payload));
    let run2 = put(
        c,
        &r,
        c.wt.join(".git/hooks/post-checkout"),
        "#!/bin/sh\ntouch /dev/null\n",
    );
    let err = host_git_status(c, &c.wt);
    if payload.exists() {
        let _ = std::fs::remove_file(&payload);
        return Outcome::Escaped(
            "the host's next `git status` in this main worktree ran attacker code: .git/config (inside the writable worktree) set core.fsmonitor".into(),
        );
    }
    // .git is inside the writable worktree, so the writes themselves succeed; what must hold
    // is the host's view after the run (shofer-sandbox's git guard puts both back).
    let config_after = std::fs::read(c.wt.join(".git/config")).unwrap_or_default();
    if config_after != config_before || c.wt.join(".git/hooks/post-checkout").exists() {
        return Outcome::Escaped(format!(
            "a main worktree's .git/config or .git/hooks stayed changed after the run (host git: {})",
            clip(err.trim(), 120)
        ));
    }
    match (run.outcome(), run2.outcome()) {
        (Outcome::Works(_), _) | (_, Outcome::Works(_)) => Outcome::Blocked(
            "written during the run, restored by the supervisor's git guard when it ended".into(),
        ),
        (a, _) => Outcome::Blocked(describe(&a)),
    }
}

fn git_common_config(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let before = fs_snapshot_common(&r);
    let git_bin =
        c.w.git
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
    let mut spec = Sb::new(Cmd::Argv(vec![
        git_bin,
        "config".into(),
        "core.fsmonitor".into(),
        "touch /tmp/pwned".into(),
    ]));
    spec.env = r.env.clone();
    let run1 = c.sb(spec);
    let run2 = deny(c, &r.env, None, &[r.common.join("config")]);
    let after = fs_snapshot_common(&r);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("common dir changed: {d}"));
    }
    if run1.code == Some(0) {
        return Outcome::Escaped("git config core.fsmonitor exited 0".into());
    }
    match run2.outcome() {
        Outcome::Blocked(d) => Outcome::Blocked(format!(
            "git config failed ({}); {d}",
            clip(run1.stderr.trim(), 120)
        )),
        o => o,
    }
}

fn git_hooks(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let before = fs_snapshot_common(&r);
    let run = deny(
        c,
        &r.env,
        None,
        &[
            r.common.join("hooks/post-checkout"),
            r.common.join("hooks/pre-commit"),
        ],
    );
    let after = fs_snapshot_common(&r);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("common dir changed: {d}"));
    }
    run.outcome()
}

fn git_info(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let before = fs_snapshot_common(&r);
    let run = deny(
        c,
        &r.env,
        None,
        &[
            r.common.join("info/exclude"),
            r.common.join("info/attributes"),
        ],
    );
    let after = fs_snapshot_common(&r);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("common dir changed: {d}"));
    }
    run.outcome()
}

fn git_packed_refs(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    // The namespace backends make packed-refs writable (git deletes refs through
    // packed-refs.lock), with everything else of the common dir read-only on top: there the
    // case checks that the rest stays unchanged.
    if c.cell.backend != "landlock" {
        return git_packed_refs_writable(c, &r);
    }
    let before = fs_snapshot_common(&r);
    let run1 = deny(c, &r.env, None, &[r.common.join("packed-refs")]);
    let mut spec = Sb::new(Cmd::AttackRaw(
        "git-write",
        vec![
            "rename-over".into(),
            r.common.join("objects").display().to_string(),
            r.common.join("packed-refs").display().to_string(),
        ],
    ));
    spec.env = r.env.clone();
    let run2 = c.sb(spec);
    let git_bin =
        c.w.git
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
    let mut spec = Sb::new(Cmd::Argv(vec![git_bin, "pack-refs".into(), "--all".into()]));
    spec.env = r.env.clone();
    let _run3 = c.sb(spec);
    let after = fs_snapshot_common(&r);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("common dir changed: {d}"));
    }
    match (run1.outcome(), run2.outcome()) {
        (Outcome::Blocked(a), Outcome::Blocked(b)) => {
            Outcome::Blocked(format!("{a}; {b}; git pack-refs left packed-refs alone"))
        }
        (Outcome::Blocked(_), o) => o,
        (o, _) => o,
    }
}

/// Namespace backends: packed-refs may be replaced (by design), nothing else of the common
/// dir may change, and `git pack-refs` works.
fn git_packed_refs_writable(c: &Ctx, r: &Repo) -> Outcome {
    let packed = r.common.join("packed-refs").display().to_string();
    let without_packed = |m: BTreeMap<String, String>| -> BTreeMap<String, String> {
        m.into_iter()
            .filter(|(k, _)| !k.starts_with(&packed))
            .collect()
    };
    let before = without_packed(fs_snapshot_common(r));
    let git_bin =
        c.w.git
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
    let mut spec = Sb::new(Cmd::Argv(vec![git_bin, "pack-refs".into(), "--all".into()]));
    spec.env = r.env.clone();
    let run = c.sb(spec);
    let after = without_packed(fs_snapshot_common(r));
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("common dir changed beyond packed-refs: {d}"));
    }
    if run.code != Some(0) {
        return Outcome::Broken(format!("git pack-refs failed: {}", run.how()));
    }
    Outcome::Blocked(
        "packed-refs writable by design (read-only binds keep config, hooks, info and the rest of the common dir); git pack-refs worked".into(),
    )
}

fn git_worktree_config(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    // The repository owner enabled per-worktree config (git sparse-checkout does this).
    if let Err(e) = git(
        c.w,
        &r.env,
        &c.dir.join("repo"),
        &["config", "extensions.worktreeConfig", "true"],
    ) {
        return Outcome::Error(format!("harness: {e}"));
    }
    let (u, g) = c.cell.user.ids();
    chown_all(&c.dir, u, g);
    let target = r.gitdir.join("config.worktree");
    let run = deny(c, &r.env, None, std::slice::from_ref(&target));
    // Judged by the host's view after the run: Landlock cannot keep one file of the writable
    // gitdir read-only, so shofer-sandbox's git guard puts it back when the command ends.
    if target.exists() {
        let seen =
            git(c.w, &r.env, &c.wt, &["config", "--get", "core.fsmonitor"]).unwrap_or_default();
        let _ = std::fs::remove_file(&target);
        return Outcome::Escaped(format!(
            "wrote {} (the host's next git in this worktree reads it; core.fsmonitor/hooksPath there run code{})",
            target.display(),
            if seen.is_empty() { String::new() } else { format!("; git sees {:?}", seen.trim()) }
        ));
    }
    match run.outcome() {
        Outcome::Works(_) | Outcome::Escaped(_) => Outcome::Blocked(
            "written during the run, removed by the supervisor's git guard when it ended".into(),
        ),
        other => other,
    }
}

enum Tamper {
    Sibling,
    GitFile,
    CommonDir,
    FakeLayout,
}

fn git_tamper(c: &Ctx, how: Tamper) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let vgit = r
        .victim
        .join(".git")
        .canonicalize()
        .unwrap_or(r.victim.join(".git"));
    // Run 1 (inside the sandbox): tamper with what the next run will read.
    let sibling = c.dir.join("wt2");
    let sibling_gitdir = r.common.join("worktrees/wt2");
    if matches!(how, Tamper::Sibling) {
        if let Err(e) = git(
            c.w,
            &r.env,
            &c.dir.join("repo"),
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                "other",
                &sibling.display().to_string(),
            ],
        ) {
            return Outcome::Error(format!("harness: {e}"));
        }
        let (u, g) = c.cell.user.ids();
        chown_all(&c.dir, u, g);
    }
    let step1 = match how {
        Tamper::Sibling => put(
            c,
            &r,
            c.wt.join(".git"),
            &format!("gitdir: {}\n", sibling_gitdir.display()),
        ),
        Tamper::GitFile => put(
            c,
            &r,
            c.wt.join(".git"),
            &format!("gitdir: {}\n", vgit.display()),
        ),
        Tamper::CommonDir => put(
            c,
            &r,
            r.gitdir.join("commondir"),
            &format!("{}\n", vgit.display()),
        ),
        Tamper::FakeLayout => {
            let mut spec = Sb::new(Cmd::AttackRaw(
                "git-fake-layout",
                vec![c.wt.display().to_string(), vgit.display().to_string()],
            ));
            spec.env = r.env.clone();
            c.sb(spec)
        }
    };
    match step1.outcome() {
        Outcome::Works(_) => {}
        // The namespace backends bind the control files read-only: the tampering itself fails.
        Outcome::Broken(why) if c.cell.backend != "landlock" && why.contains("EROFS") => {
            return Outcome::Blocked(format!("the tampering itself was refused: {why}"))
        }
        o => {
            return Outcome::Error(format!(
                "harness: tampering inside the worktree failed: {}",
                describe(&o)
            ))
        }
    }
    // Run 2: the next run on the tampered worktree must give no reach into the victim.
    let targets = [
        sibling_gitdir.join("HEAD"),
        sibling_gitdir.join("evil"),
        sibling.join("evil"),
        vgit.join("config"),
        vgit.join("hooks/pre-commit"),
        vgit.join("objects/evil"),
        vgit.join("refs/heads/evil"),
        vgit.join("logs/evil"),
        vgit.join("packed-refs"),
        r.common.join("config"),
        r.common.join("objects/../config"),
    ];
    let watched = [vgit.clone(), sibling_gitdir.clone(), sibling.clone()];
    let before = snap_paths(&watched);
    let before_c = fs_snapshot_common(&r);
    let run = deny(c, &r.env, None, &targets);
    let after = snap_paths(&watched);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!(
            "next run wrote into the other repository: {}",
            clip(&d, 300)
        ));
    }
    if let Some(d) = diff(&before_c, &fs_snapshot_common(&r)) {
        return Outcome::Escaped(format!("next run changed the common dir: {d}"));
    }
    if run.code == Some(125) {
        return Outcome::Blocked(format!(
            "the sandbox refused the tampered layout: {}",
            clip(run.stderr.trim(), 200)
        ));
    }
    let writable = run
        .report
        .as_ref()
        .map(|r| r["writable"].to_string())
        .unwrap_or_default();
    if writable.contains(&r.victim.display().to_string()) {
        return Outcome::Escaped(format!(
            "the next run's report lists the other repository as writable: {}",
            clip(&writable, 300)
        ));
    }
    run.outcome()
}

fn put(c: &Ctx, r: &Repo, path: PathBuf, content: &str) -> Run {
    let mut spec = Sb::new(Cmd::AttackRaw(
        "put",
        vec![path.display().to_string(), content.to_string()],
    ));
    spec.env = r.env.clone();
    c.sb(spec)
}

// ---------------------------------------------------------------- global cases

fn probe_matches(c: &Ctx) -> Outcome {
    let Some(p) = &c.w.probe else {
        return Outcome::Broken("--probe --json printed no JSON".into());
    };
    let mut bad = Vec::new();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if p["kernel"].as_str() != Some(kernel.trim()) {
        bad.push(format!("kernel {} != {}", p["kernel"], kernel.trim()));
    }
    let ll = &p["landlock"];
    let (status, errno, abi) = match sys::landlock_abi() {
        Ok(n) => ("available", None, n),
        Err(e) if e.0 == libc::EOPNOTSUPP => ("disabled", Some("EOPNOTSUPP"), 0),
        Err(_) => ("not-built", Some("ENOSYS"), 0),
    };
    if ll["status"].as_str() != Some(status) {
        bad.push(format!("landlock.status {} != {status}", ll["status"]));
    }
    if ll["abi"].as_u64() != Some(u64::from(abi)) {
        bad.push(format!("landlock.abi {} != {abi}", ll["abi"]));
    }
    if ll["errno"].as_str() != errno {
        bad.push(format!("landlock.errno {} != {errno:?}", ll["errno"]));
    }
    if abi == 0 {
        let mut spec = Sb::new(Cmd::Attack("noop", vec![]));
        spec.raw_opts = true;
        spec.extra = vec!["--backend".into(), "landlock".into()];
        let run = c.sb(spec);
        if run.code != Some(125) || !run.stderr.starts_with("shofer-sandbox: ") {
            bad.push(format!(
                "--backend landlock without Landlock: {}",
                run.how()
            ));
        }
    }
    if bad.is_empty() {
        Outcome::Works(format!(
            "probe agrees with the kernel: landlock {status}, ABI {abi}"
        ))
    } else {
        Outcome::Broken(bad.join("; "))
    }
}

fn userns_blocked(c: &Ctx) -> Outcome {
    if let Some(p) = &c.w.probe {
        if p["user_namespaces"]["usable"].as_bool() == Some(false) {
            return Outcome::Skip(format!(
                "the sandbox's probe says the userns backend is not usable here ({}); field case 6 needs it",
                p["user_namespaces"]["reason"]
            ));
        }
    }
    // In a child user namespace with max_user_namespaces=0 (set only there).
    let mut spec = Sb::new(Cmd::Attack("noop", vec![]));
    spec.raw_opts = true;
    spec.extra = vec!["--backend".into(), "userns".into()];
    spec.env
        .push(("SHOFER_CONTAINMENT_NOUSERNS".into(), "1".into()));
    let run = c.sb(spec);
    let err = run.stderr.trim().to_string();
    if err.contains("harness-nouserns:") {
        return Outcome::Skip(format!(
            "cannot build the test namespace: {}",
            clip(&err, 200)
        ));
    }
    let mut bad = Vec::new();
    if run.code != Some(125) {
        bad.push(format!(
            "--backend userns exited {:?}, expected 125",
            run.code
        ));
    }
    let lines: Vec<&str> = err.lines().collect();
    if lines.len() != 1 || !err.starts_with("shofer-sandbox: ") {
        bad.push(format!(
            "expected one 'shofer-sandbox: ' line, got {:?}",
            clip(&err, 300)
        ));
    }
    let low = err.to_lowercase();
    if !(low.contains("max_user_namespaces") || low.contains("user namespace")) {
        bad.push(format!(
            "the message does not name the cause: {}",
            clip(&err, 200)
        ));
    }
    if low.contains("uid_map") && !low.contains("max_user_namespaces") {
        bad.push("raw uid_map error".into());
    }
    if c.w.host_abi >= 3 {
        let mut spec = Sb::new(Cmd::Attack("noop", vec![]));
        spec.raw_opts = true;
        spec.env
            .push(("SHOFER_CONTAINMENT_NOUSERNS".into(), "1".into()));
        let auto = c.sb(spec);
        if auto.code != Some(0) {
            bad.push(format!(
                "--backend auto with Landlock available failed there: {}",
                auto.how()
            ));
        }
    }
    if bad.is_empty() {
        Outcome::Works(format!(
            "userns refused with {err:?}; auto still runs on Landlock"
        ))
    } else if err.contains("unknown")
        || err.contains("not implemented")
        || err.contains("invalid value")
    {
        Outcome::Skip(format!(
            "userns backend not implemented yet: {}",
            clip(&err, 200)
        ))
    } else {
        Outcome::Broken(bad.join("; "))
    }
}

fn old_bwrap(c: &Ctx) -> Outcome {
    let real =
        c.w.probe
            .as_ref()
            .map(|p| p["bwrap"]["version"].clone())
            .unwrap_or_default();
    if real.is_null() {
        return Outcome::Skip("the sandbox's probe reports no bwrap at all (bwrap backend not built yet, or none installed)".into());
    }
    let fake = c.dir.join("fakebin");
    let _ = std::fs::create_dir_all(&fake);
    let bw = fake.join("bwrap");
    if std::fs::copy(&c.w.me, &bw).is_err() {
        return Outcome::Error("harness: copy fake bwrap".into());
    }
    let _ = std::fs::set_permissions(&bw, std::fs::Permissions::from_mode(0o755));
    let _ = std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o777));
    let path = format!("{}:{}", fake.display(), c.w.path_env);
    let probe = Command::new(&c.w.sandbox)
        .args(["--probe", "--json"])
        .env_clear()
        .env("PATH", &path)
        .output();
    let probe: serde_json::Value = probe
        .ok()
        .and_then(|o| serde_json::from_slice(&o.stdout).ok())
        .unwrap_or_default();
    let mut bad = Vec::new();
    let bw = &probe["bwrap"];
    if bw["version"].as_str() != Some("0.3.0")
        && !bw["reason"].as_str().unwrap_or("").contains("0.3.0")
    {
        bad.push(format!(
            "probe did not read the fake's version: {}",
            probe["bwrap"]
        ));
    }
    if probe["bwrap"]["usable"].as_bool() != Some(false) {
        bad.push("probe calls bwrap 0.3.0 usable".into());
    }
    let mut spec = Sb::new(Cmd::Attack("noop", vec![]));
    spec.raw_opts = true;
    spec.extra = vec!["--backend".into(), "bwrap".into()];
    spec.env.push(("PATH".into(), path));
    let run = c.sb(spec);
    if run.code != Some(125) {
        bad.push(format!("--backend bwrap with bwrap 0.3.0: {}", run.how()));
    }
    let log = std::fs::read_to_string(fake.join("bwrap.log")).unwrap_or_default();
    if log.lines().any(|l| l.contains("attack")) {
        bad.push(format!(
            "the old bwrap was run with the command: {}",
            clip(&log, 200)
        ));
    }
    if bad.is_empty() {
        Outcome::Works(format!(
            "refused by version: {}",
            clip(run.stderr.trim(), 200)
        ))
    } else {
        Outcome::Broken(bad.join("; "))
    }
}

fn many_allow_write(c: &Ctx) -> Outcome {
    let base = c.dir.join("many");
    let mut extra = Vec::new();
    for i in 0..1000 {
        let d = base.join(format!("d{i:04}"));
        if std::fs::create_dir_all(&d).is_err() {
            return Outcome::Error("harness: mkdir".into());
        }
        extra.push("--allow-write".into());
        extra.push(d.display().to_string());
    }
    let (u, g) = c.cell.user.ids();
    chown_all(&base, u, g);
    let last = base.join("d0999/written");
    let mut spec = Sb::new(Cmd::AttackRaw(
        "write-file",
        vec![last.display().to_string()],
    ));
    spec.raw_opts = true;
    spec.extra = extra.clone();
    let run = c.sb(spec);
    if !last.exists() {
        return Outcome::Broken(format!(
            "write into the 1,000th --allow-write dir failed: {}",
            run.how()
        ));
    }
    let mut spec = Sb::new(Cmd::AttackRaw(
        "deny-write",
        vec![base.join("not-listed").display().to_string()],
    ));
    spec.raw_opts = true;
    spec.extra = extra;
    match c.sb(spec).outcome() {
        Outcome::Blocked(_) => Outcome::Works(
            "1,000 --allow-write paths: the last is writable, their parent is not".into(),
        ),
        Outcome::Escaped(d) => Outcome::Escaped(format!(
            "with 1,000 --allow-write paths their parent became writable: {d}"
        )),
        o => o,
    }
}

fn many_worktrees(c: &Ctx) -> Outcome {
    let env = git_env(&c.dir);
    let repo = c.dir.join("repo");
    let _ = std::fs::create_dir_all(c.dir.join("home"));
    let setup = || -> Result<PathBuf, String> {
        std::fs::create_dir_all(&repo).map_err(|e| e.to_string())?;
        git(c.w, &env, &repo, &["init", "-q", "-b", "main"])?;
        std::fs::write(repo.join("README"), b"x\n").map_err(|e| e.to_string())?;
        git(c.w, &env, &repo, &["add", "README"])?;
        git(c.w, &env, &repo, &["commit", "-qm", "init"])?;
        let mut last = PathBuf::new();
        for i in 0..300 {
            last = c.dir.join(format!("w{i:03}"));
            git(
                c.w,
                &env,
                &repo,
                &[
                    "worktree",
                    "add",
                    "-q",
                    "--detach",
                    &last.display().to_string(),
                ],
            )?;
        }
        Ok(last)
    };
    let last = match setup() {
        Ok(l) => l,
        Err(e) => return Outcome::Error(format!("harness: 300 worktrees: {e}")),
    };
    let git_bin =
        c.w.git
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
    let mut spec = Sb::new(Cmd::Argv(vec![
        git_bin,
        "-C".into(),
        last.display().to_string(),
        "commit".into(),
        "-q".into(),
        "--allow-empty".into(),
        "-m".into(),
        "in 300th".into(),
    ]));
    spec.raw_opts = true;
    spec.wt = Some(last.clone());
    spec.env = env.clone();
    let run = c.sb(spec);
    if run.code == Some(0) {
        Outcome::Works("git commit in the 300th linked worktree worked".into())
    } else {
        Outcome::Broken(format!(
            "git commit in the 300th linked worktree: {}",
            run.how()
        ))
    }
}

/// For `--list`: every case name and what it does.
pub fn describe_all() -> String {
    all()
        .iter()
        .map(|c| {
            format!(
                "{:32} {}{}\n",
                c.name,
                c.what,
                if c.scope == Scope::Global {
                    " [global]"
                } else {
                    ""
                }
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_has_at_least_forty_uniquely_named_cases() {
        let cases = all();
        assert!(cases.len() >= 40, "{}", cases.len());
        let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), cases.len(), "duplicate case names");
    }

    #[test]
    fn every_sandbox_field_case_has_a_catalogue_case() {
        let text: String = all().iter().map(|c| c.what).collect::<Vec<_>>().join("\n");
        for n in 1..=10 {
            assert!(
                text.contains(&format!("field {n}:")),
                "field case {n} has no catalogue case"
            );
        }
    }

    #[test]
    fn readme_lists_every_case() {
        for c in all() {
            assert!(
                crate::gaps::README.contains(&format!("\n{} ", c.name)),
                "tests/README.md does not list {} (paste `shofer-containment --list`)",
                c.name
            );
        }
    }

    #[test]
    fn protections_named_by_cases_are_report_keys() {
        let keys = [
            "write_outside",
            "truncate",
            "rename_link_across",
            "rename_inside",
            "chmod_chown_utime_xattr",
            "signals_out",
            "abstract_unix_sockets",
            "pathname_unix_sockets",
            "tcp",
            "tiocsti",
            "inherited_fds",
            "terminal_programs",
            "capabilities",
        ];
        for c in all() {
            if let Some(p) = c.protection {
                assert!(keys.contains(&p), "{}: {p}", c.name);
            }
        }
    }
}
