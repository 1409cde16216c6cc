//! Starting the command's process and its exec-time sequence.
//!
//! - Owns [`Steps`] (what the child does, derived from the plan), [`ChildArgs`] and
//!   [`spawn_child`], the `posix_spawn`-like `clone(CLONE_VM | CLONE_VFORK)` used by the
//!   supervisor ([`crate::spawn`]) and by the namespaces' init ([`crate::namespaces::init`]).
//! - Entry point of the child: [`run`]. Between `clone` and `execve` it shares the memory of
//!   its suspended parent: it only reads the plan, never returns and never runs the parent's
//!   destructors; it leaves by `execve`, or by `_exit` through [`crate::childfail`].
//!
//! What the child does between `clone` and `execve`, in this order, each step reported back
//! as a [`Stage`] if it fails:
//!
//! 1. default signal dispositions and the caller's signal mask;
//! 2. a new session unless interactive (no controlling terminal, one process group to
//!    signal);
//! 3. its death signal (SIGKILL), and a check that the expected parent is still there;
//! 4. every descriptor above 2 marked close-on-exec except the passed ones;
//! 5. `no_new_privs` (seccomp and Landlock need it without `CAP_SYS_ADMIN`, and it keeps a
//!    setuid program from regaining what is dropped next);
//! 6. the capability drop (keeping [`capabilities::FOREIGN_WORKTREE`], or switching to the
//!    worktree's owner, for a root caller over someone else's worktree);
//! 7. the [`seccomp`] filter against terminal injection, and [`crate::hostfilter`] (keyrings,
//!    set*id to other ids);
//! 8. the Landlock ruleset;
//! 9. the gate's helper ([`crate::gate::helper`]), forked into that very domain, then one
//!    more Landlock layer for the command alone;
//! 10. **the seccomp user-notification gate's filter** (see below);
//! 11. `execve` through the `$PATH` search of [`path_search::exec`].
//!
//! # Where a seccomp user-notification gate plugs in
//! A gate (issue 10: mediate `connect()` to pathname unix sockets below Landlock ABI 9) needs
//! two pieces, and both places are marked `HOOK(seccomp-notify)` in the code:
//! - **child side**, step 10 in [`run`]: after Landlock and the helper (which must not be
//!   under it: its calls would trap), install a filter with
//!   `SECCOMP_FILTER_FLAG_NEW_LISTENER`; the listener stays in the descriptor table this child
//!   shares with the supervisor until `execve` (`CLONE_FILES`; an `SCM_RIGHTS` send would
//!   itself be trapped, with nobody to answer it yet). A failure is [`Stage::Seccomp`].
//! - **supervisor side**, in [`crate::spawn`] right after the spawn succeeded
//!   ([`crate::gate::take_listener`]), then served on a thread ([`crate::gate::Setup::start`]).
//!
//! For the namespace backends the command's first process installs it the same way in the
//! table it shares with process A, which passes its number on; the supervisor takes it from A
//! with `pidfd_getfd`.

use std::ffi::CString;
use std::io;
use std::os::fd::{BorrowedFd, RawFd};

use landlock::RulesetCreated;
use rustix::process::{Gid, Uid};
use shofer_sys::signal;

use crate::childfail::{report_failure, Stage};
use crate::error::SetupError;
use crate::plan::Confinement;
use crate::signals::FORWARDED;
use crate::spec::{CapPolicy, ExecSpec};
use crate::{capabilities, path_search, seccomp};

/// What the child does, derived from the plan by [`Steps::of`] (before `clone`, so the child
/// only reads it).
#[derive(Clone)]
pub(crate) struct Steps<'a> {
    /// What `execve` runs (the command, or bubblewrap in front of it).
    pub argv: &'a [CString],
    /// Descriptors above 2 that survive exec.
    pub keep_fds: Vec<RawFd>,
    /// Keep the caller's session.
    pub interactive: bool,
    /// Set `no_new_privs` (off only in front of a setuid bubblewrap).
    pub no_new_privs: bool,
    /// Drop every capability (but `kept_caps`).
    pub drop_caps: bool,
    /// With `drop_caps`: the capabilities kept.
    pub kept_caps: &'static [caps::Capability],
    /// With `drop_caps`: run the command as this (uid, gid).
    pub run_as: Option<(u32, u32)>,
    /// With `seccomp`: refuse set*id calls to ids other than the command's own, and files
    /// made set-user-ID or set-group-ID.
    pub refuse_id_changes: bool,
    /// With `seccomp`: refuse MPTCP sockets (`--net deny`) and `prlimit` on another process
    /// (where the supervisor is in reach: no PID namespace) ([`crate::hostfilter`]).
    pub refuse_mptcp: bool,
    pub refuse_foreign_prlimit: bool,
    /// With `seccomp`: refuse every socket but unix, netlink and TCP (`--net deny` on Landlock
    /// alone, in the host's network namespace) ([`crate::hostfilter`]).
    pub refuse_other_sockets: bool,
    /// With `seccomp`: refuse TCP Fast Open (`--net proxy` on Landlock alone, whose gate
    /// judges `connect`) ([`crate::hostfilter`]).
    pub refuse_fastopen: bool,
    /// Install the TIOCSTI/TIOCLINUX filter (needs `no_new_privs` unless privileged).
    pub seccomp: bool,
    /// The Landlock ruleset, and the ABI it is made for.
    pub landlock: Option<&'a RulesetCreated>,
    pub landlock_abi: u32,
    /// The gate's helper to start after Landlock, before the gate's filter
    /// ([`crate::gate::helper`]).
    pub gate_helper: Option<&'a crate::gate::helper::Spawn>,
    /// Install the unix-socket gate ([`crate::gate`]) here: `Some(-1)`, the listener left in
    /// the descriptor table this `CLONE_FILES` child shares with the supervisor (or with the
    /// namespaces' process A, which passes it on).
    pub gate: Option<RawFd>,
    /// What the gate's filter traps (wherever it is installed).
    pub gate_traps: crate::gate::filter::Traps,
    /// The run's cgroups' v1 `tasks` or v2 `cgroup.procs` (written `0`: the child moves itself
    /// in; it is single-threaded here, so `tasks` moves it whole), and
    /// `RLIMIT_NPROC` ([`crate::limits`]).
    pub cgroup_procs: &'a [RawFd],
    pub nproc: Option<u64>,
    /// The environment `execve` passes, NULL-terminated ([`command_env`]); `None`: this
    /// process's own.
    pub envp: Option<&'a [*const libc::c_char]>,
}

/// The command's environment: this process's, with `extra` set over it, as `NAME=value`
/// strings; `None` when `extra` is empty (the environment is passed as it is).
pub(crate) fn command_env(extra: &[(&'static str, std::ffi::OsString)]) -> Option<Vec<CString>> {
    use std::os::unix::ffi::OsStrExt;
    if extra.is_empty() {
        return None;
    }
    let entry = |k: &[u8], v: &[u8]| CString::new([k, b"=", v].concat()).ok();
    let own = std::env::vars_os()
        .filter(|(k, _)| !extra.iter().any(|(e, _)| k.as_bytes() == e.as_bytes()))
        .filter_map(|(k, v)| entry(k.as_bytes(), v.as_bytes()));
    let set = extra
        .iter()
        .filter_map(|(k, v)| entry(k.as_bytes(), v.as_bytes()));
    Some(own.chain(set).collect())
}

impl<'a> Steps<'a> {
    /// The one place where a backend's variant decides the child's sequence.
    pub fn of(spec: &'a ExecSpec, confinement: &'a Confinement<'_>) -> Steps<'a> {
        let drop = spec.caps == CapPolicy::Drop;
        let mut steps = Steps {
            argv: &spec.argv,
            keep_fds: spec.pass_fds.clone(),
            interactive: spec.interactive,
            no_new_privs: true,
            drop_caps: drop,
            kept_caps: &[],
            run_as: None,
            refuse_id_changes: drop,
            refuse_mptcp: spec.net_deny || spec.net_proxy,
            refuse_foreign_prlimit: false,
            refuse_other_sockets: false,
            refuse_fastopen: false,
            seccomp: seccomp::FILTER_AVAILABLE,
            landlock: None,
            landlock_abi: 0,
            gate_helper: None,
            gate: None,
            gate_traps: crate::gate::filter::Traps::SOCKETS,
            cgroup_procs: &spec.cgroup_procs,
            nproc: None,
            envp: None,
        };
        match confinement {
            Confinement::Landlock(l) => {
                steps.drop_caps = drop && l.caller_privileged;
                steps.landlock = Some(&l.ruleset);
                steps.landlock_abi = l.abi;
                // Landlock alone has no read-only root to keep CAP_FOWNER or CAP_CHOWN from
                // reaching files outside: the command becomes the worktree's owner instead.
                steps.run_as = spec.foreign_owner.filter(|_| steps.drop_caps);
                // No PID namespace: the supervisor and the guardian are the command's to name.
                steps.refuse_foreign_prlimit = true;
                // No network namespace: Landlock's rules name TCP ports only.
                steps.refuse_other_sockets = spec.net_deny || spec.net_proxy;
                // --net proxy: the gate judges connect; Fast Open would connect without it.
                steps.refuse_fastopen = spec.net_proxy;
            }
            // In a user namespace the command holds capabilities there until exec: drop them
            // whoever the caller is.
            Confinement::Namespaces(ns) => {
                // Counted in the run's user namespace (Linux 5.14).
                steps.nproc = spec.nproc;
                steps.landlock = ns.landlock.as_ref().map(|l| &l.ruleset);
                steps.landlock_abi = ns.landlock.as_ref().map_or(0, |l| l.abi);
                if ns.full_map && drop {
                    steps.kept_caps = &capabilities::FOREIGN_WORKTREE;
                }
            }
            // bubblewrap needs its privileges to build the sandbox and drops the command's
            // itself (`--cap-drop ALL`); a setuid one must not run under no_new_privs.
            Confinement::Bwrap(b) => {
                steps.argv = &b.argv;
                steps.keep_fds.extend(b.inherited_fds());
                steps.drop_caps = false;
                steps.no_new_privs = !b.setuid;
                steps.seccomp &= !b.setuid;
            }
        }
        steps
    }
}

/// What the child needs; lives on the supervisor's stack while the child runs.
pub(crate) struct ChildArgs<'a> {
    /// The exec-time sequence.
    pub steps: &'a Steps<'a>,
    /// Our PID, which the child checks its parent against.
    pub supervisor: libc::pid_t,
    /// The caller's signal mask, restored before exec.
    pub old_mask: libc::sigset_t,
    /// The failure pipe's write end.
    pub err: BorrowedFd<'a>,
    /// Process A writes the number of the unix-socket gate's listener here.
    pub gate_pipe: Option<RawFd>,
    /// Both ends of the gate helper's link, for process A to close once the command runs.
    pub helper_fds: [Option<RawFd>; 2],
}

/// Size of the child's own stack while it shares our memory (bytes).
const CHILD_STACK: usize = 256 * 1024;

/// Starts the child with `clone(CLONE_VM | CLONE_VFORK)`, as glibc's `posix_spawn` does: no
/// page tables are copied and no copy-on-write faults are taken (on these VMs a plain `fork`
/// costs more than everything else the supervisor does). The supervisor stays suspended until
/// the child has exec'd or exited, so the child may use the shared heap without racing it;
/// the child runs on its own stack, and everything it changes (signal mask and dispositions,
/// session, credentials, seccomp, Landlock) is per task, not per address space. The child
/// only reads the plan: everything it owns stays the supervisor's.
pub(crate) fn spawn_child(args: &ChildArgs<'_>) -> Result<libc::pid_t, SetupError> {
    use rustix::mm::{MapFlags, ProtFlags};
    // Safety: a new anonymous private mapping, placed by the kernel: no memory we use moves.
    let stack = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            CHILD_STACK,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::STACK,
        )
    }
    .map_err(|e| SetupError::Syscall {
        op: "mmap",
        source: e.into(),
    })?;
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // Safety: `arg` is the `ChildArgs` below, alive while the parent is suspended.
        let args = unsafe { &*(arg as *const ChildArgs<'_>) };
        run(args.steps, args.supervisor, &args.old_mask, args.err)
    }
    // With the gate, the child shares our descriptor table until exec, to leave us the
    // listener (close-on-exec, so the command does not keep it).
    let files = if args.steps.gate.is_some() {
        libc::CLONE_FILES
    } else {
        0
    };
    // Raw libc: rustix has no clone(2) with a new stack.
    // Safety: the stack grows down from the top of our mapping; `args` outlives the child's
    // use of it because CLONE_VFORK suspends us until the child execs or exits.
    let pid = unsafe {
        libc::clone(
            entry,
            (stack as *mut u8).add(CHILD_STACK).cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | files | libc::SIGCHLD,
            (args as *const ChildArgs<'_>).cast_mut().cast(),
        )
    };
    let clone_err = io::Error::last_os_error();
    // Safety: unmapping the stack we mapped; the child no longer runs on it.
    let _ = unsafe { rustix::mm::munmap(stack, CHILD_STACK) };
    if pid < 0 {
        return Err(SetupError::Syscall {
            op: "clone",
            source: clone_err,
        });
    }
    Ok(pid)
}

/// The child between `clone` and `execve`. Never returns: it execs or exits 125 after
/// writing the failed [`Stage`] to `err`.
pub(crate) fn run(
    steps: &Steps<'_>,
    expected_parent: libc::pid_t,
    old_mask: &libc::sigset_t,
    err: BorrowedFd<'_>,
) -> ! {
    let fail = |stage: Stage, e: io::Error| -> ! { report_failure(err, stage, e) };
    let check = |stage: Stage, ret: rustix::io::Result<()>| {
        if let Err(e) = ret {
            fail(stage, e.into());
        }
    };

    // Default dispositions and the caller's signal mask.
    for s in [libc::SIGPIPE, libc::SIGCHLD, libc::SIGTERM]
        .into_iter()
        .chain(FORWARDED)
    {
        signal::set_default(s);
    }
    let _ = signal::process_mask(signal::How::Set, old_mask);
    if !steps.interactive {
        // A new session: no controlling terminal, and a process group we can signal whole.
        if let Err(e) = rustix::process::setsid() {
            fail(Stage::Session, e.into());
        }
    }
    check(
        Stage::DeathSignal,
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL)),
    );
    if rustix::process::Pid::as_raw(rustix::process::getppid()) != expected_parent {
        signal::exit_now(125);
    }
    // The run's limits (crate::limits), before anything that could fork.
    for &fd in steps.cgroup_procs {
        // Safety: the supervisor opened it and keeps it open until this child has exec'd.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        if let Err(e) = rustix::io::write(fd, b"0") {
            fail(Stage::Limits, e.into());
        }
    }
    if let Some(n) = steps.nproc {
        let limit = rustix::process::Rlimit {
            current: Some(n),
            maximum: Some(n),
        };
        check(
            Stage::Limits,
            rustix::process::setrlimit(rustix::process::Resource::Nproc, limit),
        );
    }
    if let Err(e) = shofer_sys::fd::cloexec_from_3(&steps.keep_fds) {
        fail(Stage::Descriptors, e);
    }
    if steps.no_new_privs {
        check(Stage::NoNewPrivs, rustix::thread::set_no_new_privs(true));
    }
    if steps.drop_caps {
        if let Err(e) = capabilities::drop_bounding(steps.kept_caps) {
            fail(Stage::Capabilities, e);
        }
        if let Some((uid, gid)) = steps.run_as {
            // The raw calls change this single-threaded process's credentials; glibc's
            // wrappers act on every thread glibc knows of, here the supervisor's.
            let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
            let switched = rustix::thread::set_thread_groups(&[gid])
                .and_then(|()| rustix::thread::set_thread_res_gid(gid, gid, gid))
                .and_then(|()| rustix::thread::set_thread_res_uid(uid, uid, uid));
            if let Err(e) = switched {
                fail(Stage::Identity, e.into());
            }
        }
        if let Err(e) = capabilities::clear_sets(steps.kept_caps) {
            fail(Stage::Capabilities, e);
        }
    }
    if steps.seccomp {
        // Only x86-64 has the filters; elsewhere `steps.seccomp` is always false.
        #[cfg(target_arch = "x86_64")]
        if let Err(e) = seccomp::refuse_terminal_injection().and_then(|()| {
            crate::hostfilter::install(crate::hostfilter::Refuse {
                id_changes: steps.refuse_id_changes,
                setid_files: steps.refuse_id_changes,
                mptcp: steps.refuse_mptcp,
                other_sockets: steps.refuse_other_sockets,
                foreign_prlimit: steps.refuse_foreign_prlimit,
                fastopen: steps.refuse_fastopen,
            })
        }) {
            fail(Stage::Seccomp, e);
        }
    }
    if let Some(ruleset) = steps.landlock {
        // A duplicate of the descriptor: the plan stays the supervisor's, in its memory.
        let applied = ruleset
            .try_clone()
            .map_err(|e| io::Error::other(e.to_string()))
            .and_then(|r| {
                r.restrict_self()
                    .map_err(|e| io::Error::other(e.to_string()))
            });
        match applied {
            Ok(status) if status.ruleset == landlock::RulesetStatus::FullyEnforced => {}
            Ok(_) => fail(
                Stage::Landlock,
                io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            ),
            Err(e) => fail(Stage::Landlock, e),
        }
    }
    // The gate's helper, in this very Landlock domain; then one more layer for the command,
    // which keeps it from ptracing (and from ABI 6 signalling) the helper.
    if let Some(helper) = steps.gate_helper {
        if let Err(e) = crate::gate::helper::start_in_child(helper, &steps.keep_fds) {
            fail(Stage::Seccomp, e);
        }
        if steps.landlock.is_some() {
            if let Err(e) = crate::gate::helper::restrict_further(steps.landlock_abi) {
                fail(Stage::Landlock, e);
            }
        }
    }
    // The unix-socket gate (crate::gate), after Landlock and the helper: the listener goes
    // back through the shared table.
    if steps.gate.is_some() {
        if let Err(e) = crate::gate::install_in_child(steps.gate_traps) {
            fail(Stage::Seccomp, e);
        }
    }
    // Last: the steps above may still open descriptors (Landlock duplicates its ruleset).
    crate::nofile::restore();
    let e = path_search::exec(steps.argv, steps.envp);
    fail(Stage::Exec, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{PlanError, SetupError};
    use crate::ruleset::LandlockPlan;
    use crate::{bwrap, namespaces, ruleset, writable};
    use shofer_core::policy::NetPolicy;

    fn spec(caps: CapPolicy, command: &str) -> ExecSpec {
        ExecSpec {
            argv: vec![CString::new(command).unwrap()],
            pass_fds: vec![7],
            interactive: false,
            caps,
            grace: std::time::Duration::from_millis(1),
            keep_descendants: false,
            foreign_owner: None,
            net_deny: false,
            net_proxy: false,
            cgroup_procs: Vec::new(),
            nproc: None,
            env: Vec::new(),
        }
    }

    fn opened() -> (tempfile::TempDir, writable::OpenedPolicy) {
        let dir = tempfile::tempdir().unwrap();
        let opened = writable::build(dir.path(), &[], NetPolicy::Allow).unwrap();
        (dir, opened)
    }

    #[test]
    fn namespaces_drop_capabilities_whoever_the_caller_is() {
        let ns = Confinement::Namespaces(Box::new(namespaces::Setup {
            binds: Vec::new(),
            uid: 0,
            gid: 0,
            devices: Vec::new(),
            layers: Vec::new(),
            replace: None,
            redirect: None,
            overlays: Vec::new(),
            own_net: false,
            proxy: false,
            landlock: None,
            covers: Vec::new(),
            full_map: false,
        }));
        let drop = spec(CapPolicy::Drop, "true");
        let s = Steps::of(&drop, &ns);
        assert!(s.drop_caps && s.no_new_privs && s.landlock.is_none());
        assert_eq!(s.seccomp, seccomp::FILTER_AVAILABLE);
        assert_eq!((s.argv, &s.keep_fds[..]), (&drop.argv[..], &[7][..]));
        assert!(!Steps::of(&spec(CapPolicy::Keep, "true"), &ns).drop_caps);
    }

    #[test]
    fn landlock_drops_capabilities_only_where_the_caller_holds_some() {
        let abi = match shofer_sys::landlock::abi() {
            Ok(abi) => abi.min(shofer_core::rights::NEWEST_PINNED_ABI),
            Err(e) => {
                assert_ne!(
                    std::env::var("CI").as_deref(),
                    Ok("true"),
                    "no Landlock: {e:?}"
                );
                eprintln!("SKIP landlock_drops_capabilities…: no Landlock here ({e:?})");
                return;
            }
        };
        let (_dir, opened) = opened();
        for privileged in [false, true] {
            let ll = Confinement::Landlock(LandlockPlan {
                ruleset: ruleset::create(
                    &opened,
                    &crate::gate::AllowUnix::none(),
                    &Default::default(),
                    true,
                    abi,
                )
                .unwrap(),
                caller_privileged: privileged,
                abi,
            });
            let drop = spec(CapPolicy::Drop, "true");
            let s = Steps::of(&drop, &ll);
            assert_eq!(s.drop_caps, privileged);
            assert!(s.no_new_privs && s.landlock.is_some());
            assert!(!Steps::of(&spec(CapPolicy::Keep, "true"), &ll).drop_caps);
        }
    }

    #[test]
    fn bwrap_runs_in_front_of_the_resolved_command_and_setuid_gets_no_no_new_privs() {
        let (_dir, opened) = opened();
        for setuid in [false, true] {
            let b = bwrap::Bwrap {
                path: "/usr/bin/bwrap".into(),
                version: "0.8.0".into(),
                setuid,
            };
            let drop = spec(CapPolicy::Drop, "sh");
            let launch =
                match bwrap::plan(&b, &opened, &drop, &Default::default(), &Default::default()) {
                    Ok(l) => l,
                    Err(e) => panic!("{e:?}"),
                };
            let inherited = launch.inherited_fds();
            let confinement = Confinement::Bwrap(launch);
            let s = Steps::of(&drop, &confinement);
            assert_eq!(s.argv[0].to_bytes(), b"/usr/bin/bwrap");
            assert!(s.argv.last().unwrap().to_bytes().ends_with(b"/sh"));
            assert_eq!(s.keep_fds, [7, inherited[0], inherited[1]]);
            // bubblewrap drops the command's capabilities itself (--cap-drop ALL).
            assert!(!s.drop_caps && s.landlock.is_none());
            assert_eq!(s.no_new_privs, !setuid);
            assert_eq!(s.seccomp, seccomp::FILTER_AVAILABLE && !setuid);
        }
        let b = bwrap::Bwrap {
            path: "/usr/bin/bwrap".into(),
            version: "0.8.0".into(),
            setuid: false,
        };
        let missing = spec(CapPolicy::Drop, "shofer-no-such-command-4711");
        assert!(matches!(
            bwrap::plan(
                &b,
                &opened,
                &missing,
                &Default::default(),
                &Default::default()
            ),
            Err(PlanError::NotRunnable { code: 127, .. })
        ));
        let mut keep = spec(CapPolicy::Drop, "sh");
        keep.keep_descendants = true;
        assert!(matches!(
            bwrap::plan(&b, &opened, &keep, &Default::default(), &Default::default()),
            Err(PlanError::Setup(SetupError::KeepDescendantsWithBwrap))
        ));
    }
}
