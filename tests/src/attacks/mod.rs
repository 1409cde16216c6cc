//! The attacks: small functions that run *inside* the sandbox.
//!
//! The harness re-invokes its own binary under `shofer-sandbox` as
//! `shofer-containment attack <name> <args...>`, so no attack needs an external tool. Each
//! attack prints exactly one line `SHOFER-CONTAINMENT: <verdict> <detail>` on stdout, where the
//! verdict is what the attack saw from the inside:
//!
//! - `blocked`: every attempt failed (the detail names the call and its errno);
//! - `escaped`: an attempt succeeded that the sandbox must stop;
//! - `ok` / `broken`: a legitimate operation worked / failed (functionality cases);
//! - `skip`: the attack could not be attempted here (the detail says why).
//!
//! The harness never trusts `blocked` alone: it also checks the outside state (was the file
//! changed, is the victim alive, was a connection queued) from outside the sandbox.

mod caps;
mod fs;
mod git;
mod limits;
mod net;
mod proc;
pub(crate) mod secrets;
mod tree;
mod tty;

pub(crate) use caps::setid_left;
pub use tree::sleeper;

use crate::sys::{self, Errno};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The marker line prefix of an attack's verdict.
pub const RESULT_PREFIX: &str = "SHOFER-CONTAINMENT: ";

/// What an attack saw from the inside.
pub enum Seen {
    /// Every attempt failed.
    Blocked(String),
    /// Something the sandbox must stop succeeded.
    Escaped(String),
    /// A legitimate operation worked.
    Ok(String),
    /// A legitimate operation failed.
    Broken(String),
    /// Could not be attempted.
    Skip(String),
}

impl Seen {
    fn line(&self) -> String {
        let (v, d) = match self {
            Seen::Blocked(d) => ("blocked", d),
            Seen::Escaped(d) => ("escaped", d),
            Seen::Ok(d) => ("ok", d),
            Seen::Broken(d) => ("broken", d),
            Seen::Skip(d) => ("skip", d),
        };
        format!("{RESULT_PREFIX}{v} {}", d.replace('\n', " "))
    }
}

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

/// One attempt: `Ok` = the call succeeded (an escape for containment attacks).
fn attempt<T>(what: &str, r: Result<T, Errno>) -> Result<T, String> {
    r.map_err(|e| format!("{what} -> {e}"))
}

/// A containment verdict from one call.
fn contain<T>(what: &str, r: Result<T, Errno>) -> Seen {
    match r {
        Ok(_) => Seen::Escaped(format!("{what} succeeded")),
        Err(e) => Seen::Blocked(format!("{what} -> {e}")),
    }
}

fn write_via(path: &Path, flags: i32) -> Result<(), Errno> {
    let fd = sys::open(path, flags, 0o644)?;
    sys::write(fd.as_raw_fd(), b"PWNED by shofer-containment\n").map(|_| ())
}

fn arg(a: &[String], i: usize) -> &str {
    a.get(i).map(String::as_str).unwrap_or("")
}

/// Declares the attacks: one row per attack, `Variant = "name" => function`. This table is the
/// one place an attack's name is written. The catalogue names attacks by variant, so a typo
/// does not compile; the `attack <name>` command line inside the sandbox is parsed back
/// through the same table.
macro_rules! attacks {
    ($($variant:ident = $name:literal => $run:path,)*) => {
        /// An attack that runs inside the sandbox (`shofer-containment attack <name> <args>`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Attack {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Attack {
            /// Every attack, in table order.
            #[cfg(test)]
            pub const ALL: &'static [Attack] = &[$(Attack::$variant,)*];

            /// The name on the `attack <name>` command line.
            pub fn name(self) -> &'static str {
                match self {
                    $(Attack::$variant => $name,)*
                }
            }

            /// The attack called `name` on the command line, if there is one.
            pub fn parse(name: &str) -> Option<Attack> {
                match name {
                    $($name => Some(Attack::$variant),)*
                    _ => None,
                }
            }

            /// Runs it with the arguments after its name: for [`crate::runner::Cmd::Attack`]
            /// `<wt> <out> <extra...>`, for [`crate::runner::Cmd::AttackRaw`] only the extras.
            fn run(self, args: &[String]) -> Seen {
                match self {
                    $(Attack::$variant => $run(args),)*
                }
            }
        }
    };
}

attacks! {
    // --- harness plumbing
    Noop = "noop" => noop,
    // --- files
    CreateOutside = "create-outside" => fs::create_outside,
    WriteOutside = "write-outside" => fs::write_outside,
    AppendOutside = "append-outside" => fs::append_outside,
    TruncatePath = "truncate-path" => fs::truncate_path,
    TruncateRdonlyOtrunc = "truncate-rdonly-otrunc" => fs::truncate_rdonly_otrunc,
    UnlinkOutside = "unlink-outside" => fs::unlink_outside,
    RmdirOutside = "rmdir-outside" => fs::rmdir_outside,
    MkdirOutside = "mkdir-outside" => fs::mkdir_outside,
    SymlinkOutside = "symlink-outside" => fs::symlink_outside,
    MkfifoOutside = "mkfifo-outside" => fs::mkfifo_outside,
    BindSocketOutside = "bind-socket-outside" => fs::bind_socket_outside,
    RenameOut = "rename-out" => fs::rename_out,
    RenameIn = "rename-in" => fs::rename_in,
    RenameExchange = "rename-exchange" => fs::rename_exchange,
    RenameDirOut = "rename-dir-out" => fs::rename_dir_out,
    RenameWorktree = "rename-worktree" => fs::rename_worktree,
    LinkIn = "link-in" => fs::link_in,
    LinkOut = "link-out" => fs::link_out,
    LinkatProcfdIn = "linkat-procfd-in" => fs::linkat_procfd_in,
    OtmpfileLinkOut = "otmpfile-link-out" => fs::otmpfile_link_out,
    SymlinkWriteThrough = "symlink-write-through" => fs::symlink_write_through,
    SymlinkDirThrough = "symlink-dir-through" => fs::symlink_dir_through,
    DotdotAbsolute = "dotdot-absolute" => fs::dotdot_absolute,
    DotdotRelative = "dotdot-relative" => fs::dotdot_relative,
    TmpSymlinkOut = "tmp-symlink-out" => fs::tmp_symlink_out,
    ChmodOutside = "chmod-outside" => fs::chmod_outside,
    ChownOutside = "chown-outside" => fs::chown_outside,
    UtimeOutside = "utime-outside" => fs::utime_outside,
    XattrOutside = "xattr-outside" => fs::xattr_outside,
    DevCreate = "dev-create" => fs::dev_create,
    DevKmsgOpenWrite = "dev-kmsg-open-write" => fs::dev_kmsg_open_write,
    DevicesUsable = "devices-usable" => fs::devices_usable,
    DevShm = "dev-shm" => fs::dev_shm,
    TmpWritable = "tmp-writable" => fs::tmp_writable,
    WorktreeWritable = "worktree-writable" => fs::worktree_writable,
    RenameInside = "rename-inside" => fs::rename_inside,
    MknodDevice = "mknod-device" => fs::mknod_device,
    CoreDump = "core-dump" => fs::core_dump,
    LinkIntoTmp = "link-into-tmp" => fs::link_into_tmp,
    SysWrite = "sys-write" => fs::sys_write,
    PlantSymlink = "plant-symlink" => fs::plant_symlink,
    Put = "put" => fs::put,
    GitSwapUnwritable = "git-swap-unwritable" => git::git_swap_unwritable,
    WriteFile = "write-file" => fs::write_file,
    DenyWrite = "deny-write" => fs::deny_write,
    // --- processes and /proc
    ProcSelfFdReopen = "proc-self-fd-reopen" => proc::proc_self_fd_reopen,
    ProcSelfCwd = "proc-self-cwd" => proc::proc_self_cwd,
    ProcEnviron = "proc-environ" => proc::proc_environ,
    ProcPidRoot = "proc-pid-root" => proc::proc_pid_root,
    ProcSysWrite = "proc-sys-write" => proc::proc_sys_write,
    SignalOutside = "signal-outside" => proc::signal_outside,
    SignalCallsOutside = "signal-calls-outside" => proc::signal_calls_outside,
    PidfdSignalOutside = "pidfd-signal-outside" => proc::pidfd_signal_outside,
    FsetownOutside = "fsetown-outside" => proc::fsetown_outside,
    KillGroupOutside = "kill-group-outside" => proc::kill_group_outside,
    KillAll = "kill-all" => proc::kill_all,
    PtraceOutside = "ptrace-outside" => proc::ptrace_outside,
    ProcessVmReadv = "process-vm-readv" => proc::process_vm_readv,
    InheritedFds = "inherited-fds" => proc::inherited_fds,
    PassedDirfdOpenat = "passed-dirfd-openat" => proc::passed_dirfd_openat,
    PassedFdReopen = "passed-fd-reopen" => proc::passed_fd_reopen,
    KillSupervisor = "kill-supervisor" => proc::kill_supervisor,
    PtraceSupervisor = "ptrace-supervisor" => proc::ptrace_supervisor,
    ProcSupervisorFds = "proc-supervisor-fds" => proc::proc_supervisor_fds,
    I386Keyctl = "i386-keyctl" => proc::i386_keyctl,
    // --- terminals
    Tiocsti = "tiocsti" => tty::tiocsti,
    TiocstiHighBits = "tiocsti-high-bits" => tty::tiocsti_high_bits,
    Tioclinux = "tioclinux" => tty::tioclinux,
    TerminalPrograms = "terminal-programs" => tty::terminal_programs,
    TiocstiForeignPty = "tiocsti-foreign-pty" => tty::tiocsti_foreign_pty,
    TiocstiIa32 = "tiocsti-ia32" => tty::tiocsti_ia32,
    TiocstiX32 = "tiocsti-x32" => tty::tiocsti_x32,
    DevUinput = "dev-uinput" => tty::dev_uinput,
    // --- sockets
    AbstractUnixConnect = "abstract-unix-connect" => net::abstract_unix_connect,
    PathnameUnixConnect = "pathname-unix-connect" => net::pathname_unix_connect,
    PathnameUnixRoutes = "pathname-unix-routes" => net::pathname_unix_routes,
    PathnameUnixDatagram = "pathname-unix-datagram" => net::pathname_unix_datagram,
    OwnUnixSocket = "own-unix-socket" => net::own_unix_socket,
    TcpConnect = "tcp-connect" => net::tcp_connect,
    TcpBind = "tcp-bind" => net::tcp_bind,
    AbstractUnixTwin = "abstract-unix-twin" => net::abstract_unix_twin,
    PathnameUnixMovedIn = "pathname-unix-moved-in" => net::pathname_unix_moved_in,
    TcpFastopen = "tcp-fastopen" => net::tcp_fastopen,
    UdpSend = "udp-send" => net::udp_send,
    TcpListen = "tcp-listen" => net::tcp_listen,
    CmsgLenWrap = "cmsg-len-wrap" => net::cmsg_len_wrap,
    ProxyConnect = "proxy-connect" => net::proxy_connect,
    // --- privileges and mounts
    MountBindOutside = "mount-bind-outside" => caps::mount_bind_outside,
    UnshareRemount = "unshare-remount" => caps::unshare_remount,
    PivotRoot = "pivot-root" => caps::pivot_root,
    ReportCreds = "report-creds" => caps::report_creds,
    SuidExec = "suid-exec" => caps::suid_exec,
    CapsAndNnp = "caps-and-nnp" => caps::caps_and_nnp,
    SetidFile = "setid-file" => caps::setid_file,
    RootChownForeign = "root-chown-foreign" => caps::root_chown_foreign,
    RootDacRead = "root-dac-read" => caps::root_dac_read,
    SethostnameUts = "sethostname-uts" => caps::sethostname_uts,
    OpenByHandle = "open-by-handle" => caps::open_by_handle,
    OpenTreeClone = "open-tree-clone" => caps::open_tree_clone,
    // --- the process tree
    SetsidEscape = "setsid-escape" => tree::setsid_escape,
    DoubleForkEscape = "double-fork-escape" => tree::double_fork_escape,
    SigtermIgnoringDescendant = "sigterm-ignoring-descendant" => tree::sigterm_ignoring_descendant,
    TreeThenWait = "tree-then-wait" => tree::tree_then_wait,
    SpawnThenExit = "spawn-then-exit" => tree::spawn_then_exit,
    // --- the run's limits
    ForkBomb = "fork-bomb" => limits::fork_bomb,
    Alloc = "alloc" => limits::alloc,
    // --- secret locations
    SecretRead = "secret-read" => secrets::secret_read,
    SecretLink = "secret-link" => secrets::secret_link,
    SecretMount = "secret-mount" => secrets::secret_mount,
    // --- git metadata
    GitWrite = "git-write" => git::git_write,
    GitFakeLayout = "git-fake-layout" => git::git_fake_layout,
}

/// `shofer-containment attack <name> <args...>`: runs the attack and prints its verdict line;
/// returns the exit status (always 0: the verdict is the line).
pub fn run(name: &str, args: &[String]) -> i32 {
    let seen = match Attack::parse(name) {
        Some(a) => a.run(args),
        None => Seen::Broken(format!("unknown attack {name:?}")),
    };
    println!("{}", seen.line());
    0
}

fn noop(_: &[String]) -> Seen {
    Seen::Ok("ran".into())
}

#[cfg(test)]
mod tests {
    use super::Attack;

    #[test]
    fn every_attack_name_parses_back_to_its_variant() {
        for a in Attack::ALL {
            assert_eq!(Attack::parse(a.name()), Some(*a), "{}", a.name());
        }
        assert_eq!(Attack::parse("no-such-attack"), None);
    }
}
