//! Host side — processes outside the sandbox and /proc: environ, fd and cwd re-opens, signals,
//! ptrace, process_vm_readv, inherited and passed descriptors, the supervisor itself.

use super::{describe, fd_of, nothing, reap_marked, Case, Scope, W};
use crate::attacks::Attack;
use crate::runner::{attack_checked, attack_spec_checked, Cmd, Ctx, Outcome, Sb};
use crate::sys;
use shofer_core::policy::Protection;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// This family's cases, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "proc-environ",
            "read an outside process's /proc/<pid>/environ",
            None,
            |c| with_victim(c, Attack::ProcEnviron)
        ),
        case!(
            "proc-self-fd-reopen",
            "reopen a read-only outside fd via /proc/self/fd for writing",
            W,
            |c| attack_checked(c, Attack::ProcSelfFdReopen, &[])
        ),
        case!(
            "proc-self-cwd",
            "create via /proc/self/cwd with the cwd outside",
            W,
            |c| attack_checked(c, Attack::ProcSelfCwd, &[])
        ),
        case!(
            "proc-pid-root",
            "create outside via /proc/<outside pid>/root",
            W,
            |c| with_victim(c, Attack::ProcPidRoot)
        ),
        case!(
            "proc-sys-write",
            "open /proc/sys/kernel/core_pattern for writing (nothing written)",
            W,
            |c| attack_checked(c, Attack::ProcSysWrite, &[])
        ),
        case!(
            "inherited-fds-closed",
            "fds 7 (O_RDWR outside file) and 8 (O_PATH outside dir) inherited without --pass-fd",
            Some(Protection::InheritedFds),
            inherited_fds
        ),
        case!(
            "passed-dirfd-openat",
            "--pass-fd of an O_PATH outside dir, then openat(O_CREAT)/mkdirat",
            Some(Protection::InheritedFds),
            passed_dirfd
        ),
        case!(
            "passed-fd-reopen",
            "--pass-fd of a read-only outside file, then write / reopen for writing",
            Some(Protection::InheritedFds),
            passed_fd_reopen
        ),
        case!(
            "signal-outside",
            "kill(SIGTERM) a process outside the sandbox",
            Some(Protection::SignalsOut),
            |c| with_victim(c, Attack::SignalOutside)
        ),
        case!(
            "signal-calls-outside",
            "issue 34: tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo (SIGTERM) at outside processes",
            Some(Protection::SignalsOut),
            |c| with_victims(c, Attack::SignalCallsOutside, &[PLAIN; 4])
        ),
        case!(
            "pidfd-signal-outside",
            "issue 34: pidfd_send_signal through pidfd_open and through open(/proc/<pid>) of outside processes",
            Some(Protection::SignalsOut),
            |c| with_victims(c, Attack::PidfdSignalOutside, &[PLAIN; 2])
        ),
        case!(
            "fsetown-sigio-outside",
            "issue 34: F_SETOWN / F_SETOWN_EX / F_SETOWN -pgid of outside processes on an O_ASYNC pipe, then SIGIO",
            Some(Protection::SignalsOut),
            |c| with_victims(c, Attack::FsetownOutside, &[PLAIN, PLAIN, GROUP])
        ),
        case!(
            "kill-group-outside",
            "issue 34: kill(-pgid, SIGTERM) of an outside process group",
            Some(Protection::SignalsOut),
            |c| with_victims(c, Attack::KillGroupOutside, &[GROUP])
        ),
        case!(
            "kill-all-outside",
            "issue 34: kill(-1, SIGURG) as an unprivileged uid; an outside process of that uid catches SIGURG",
            Some(Protection::SignalsOut),
            kill_all
        ),
        case!(
            "ptrace-outside",
            "PTRACE_ATTACH to a process outside",
            None,
            |c| with_victim(c, Attack::PtraceOutside)
        ),
        case!(
            "process-vm-readv",
            "process_vm_readv of a process outside",
            None,
            |c| with_victim(c, Attack::ProcessVmReadv)
        ),
        case!(
            "kill-supervisor",
            "SIGKILL the shofer-sandbox supervisor (our parent) after leaving a setsid() child",
            Some(Protection::SignalsOut),
            kill_supervisor
        ),
        case!(
            "ptrace-supervisor",
            "PTRACE_ATTACH / open /proc/<pid>/mem of the supervisor",
            None,
            |c| attack_checked(c, Attack::PtraceSupervisor, &harness_ids(c))
        ),
        case!(
            "proc-supervisor-fds",
            "reopen for writing the outside files the supervisor holds, via /proc/<ppid>/fd",
            W,
            |c| attack_checked(c, Attack::ProcSupervisorFds, &harness_ids(c))
        ),
        case!(
            "i386-keyctl",
            "issue 29 F6: a 64-bit program's int $0x80 keyctl (i386 nr 288) READ and UPDATE of a session key",
            Some(Protection::Keyrings),
            i386_keyctl
        ),
    ]
}

fn with_victim(c: &Ctx, attack: Attack) -> Outcome {
    let secret = format!("{}-secret", c.w.marker());
    let Some(mut v) = c.victim(&secret) else {
        return Outcome::Error("harness: could not start the outside victim".into());
    };
    let pid = v.pid().to_string();
    let o = attack_checked(c, attack, &[pid.clone(), secret]);
    std::thread::sleep(Duration::from_millis(20));
    let stopped = shofer_sys::proc::read(v.pid()).is_some_and(|p| p.is_stopped());
    if !v.alive() {
        return Outcome::Escaped(format!("the outside victim died ({})", describe(&o)));
    }
    if stopped {
        return Outcome::Escaped("the outside victim is stopped/traced".into());
    }
    o
}

/// How an outside victim is started: `(leads its own process group, exits on SIGURG)`.
type VictimKind = (bool, bool);
const PLAIN: VictimKind = (false, false);
const GROUP: VictimKind = (true, false);
const URG: VictimKind = (false, true);

/// Starts one outside victim (same uid as the sandbox) per entry of `kinds`, runs `attack`
/// with their PIDs (a group leader's PID is its group's ID), and judges by the victims: any
/// that died or stopped is an escape, whatever the attack says.
fn with_victims(c: &Ctx, attack: Attack, kinds: &[VictimKind]) -> Outcome {
    let secret = format!("{}-secret", c.w.marker());
    let mut victims = Vec::new();
    for &(group, urg) in kinds {
        match c.victim_with(&secret, group, urg) {
            Some(v) => victims.push(v),
            None => return Outcome::Error("harness: could not start an outside victim".into()),
        }
    }
    let pids: Vec<String> = victims.iter().map(|v| v.pid().to_string()).collect();
    let o = attack_checked(c, attack, &pids);
    // SIGIO and queued signals are delivered asynchronously.
    std::thread::sleep(Duration::from_millis(50));
    let mut hit = Vec::new();
    for v in &mut victims {
        let pid = v.pid();
        if !v.alive() {
            hit.push(format!("{pid} died"));
        } else if shofer_sys::proc::read(pid).is_some_and(|p| p.is_stopped()) {
            hit.push(format!("{pid} is stopped"));
        }
    }
    if !hit.is_empty() {
        return Outcome::Escaped(format!(
            "outside victims {} ({})",
            hit.join(", "),
            describe(&o)
        ));
    }
    match o {
        Outcome::Blocked(d) => Outcome::Blocked(format!("{d}; every outside victim alive")),
        o => o,
    }
}

/// `kill(-1)` reaches every process the caller may signal on a build without the protection:
/// only as an unprivileged uid (as root, every process of the machine), and with `SIGURG`,
/// which every process but the catcher victim ignores (or, as Go's runtime, tolerates).
fn kill_all(c: &Ctx) -> Outcome {
    if c.cell.user.is_root() {
        return Outcome::Skip(
            "kill(-1) runs as the unprivileged uid only: as root it would reach every process of the machine".into(),
        );
    }
    with_victims(c, Attack::KillAll, &[URG])
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
    let mut spec = Sb::new(Cmd::Attack(Attack::InheritedFds, vec![]));
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
    let mut spec = Sb::new(Cmd::Attack(Attack::PassedDirfdOpenat, vec!["8".into()]));
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
    let mut spec = Sb::new(Cmd::Attack(Attack::PassedFdReopen, vec!["7".into()]));
    spec.fds = vec![(7, f.as_raw_fd())];
    spec.extra = vec!["--pass-fd".into(), "7".into()];
    attack_spec_checked(c, spec)
}

/// `[harness pid, harness pid namespace]` for the supervisor attacks.
fn harness_ids(c: &Ctx) -> Vec<String> {
    vec![std::process::id().to_string(), c.w.pidns.clone()]
}

fn kill_supervisor(c: &Ctx) -> Outcome {
    let marker = c.w.marker();
    let me = c.w.me.display().to_string();
    let run = c.sb(Sb::new(Cmd::Attack(
        Attack::KillSupervisor,
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

/// Issue 29 F6: no protection depends on one ABI's system call numbers. The harness joins a
/// fresh session keyring (its processes, the sandbox included, inherit it, across the switch
/// to the cell's uid too) holding two keys: one the attack reads and replaces outside the
/// sandbox (the attack is real here), one it attacks inside. Escaped if that key changed or
/// its payload reached the command's output.
fn i386_keyctl(c: &Ctx) -> Outcome {
    if !cfg!(target_arch = "x86_64") {
        return Outcome::Skip("the i386 entry point (int $0x80) is x86_64's".into());
    }
    if let Err(e) = sys::join_new_session_keyring() {
        return Outcome::Error(format!("harness: join a new session keyring: {e}"));
    }
    let payload = format!("{}-key-payload", c.w.marker());
    let add = |desc: &str| {
        sys::add_user_key(desc, payload.as_bytes())
            .map_err(|e| Outcome::Error(format!("harness: add_key(user, {desc}): {e}")))
    };
    let (control, key) = match (
        add("shofer-containment-i386-control"),
        add("shofer-containment-i386"),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(o), _) | (_, Err(o)) => return o,
    };
    let o = i386_keyctl_judge(c, control, key, &payload);
    let _ = sys::invalidate_key(control);
    let _ = sys::invalidate_key(key);
    o
}

fn i386_keyctl_judge(c: &Ctx, control: i32, key: i32, payload: &str) -> Outcome {
    let mut bare = std::process::Command::new(&c.w.me);
    bare.args(["attack", Attack::I386Keyctl.name()])
        .arg(&c.wt)
        .arg(&c.out)
        .arg(control.to_string())
        .env_clear()
        .stdin(std::process::Stdio::null());
    if let crate::runner::User::Unpriv(u) = c.cell.user {
        use std::os::unix::process::CommandExt;
        bare.uid(u).gid(u);
    }
    let bare = match bare.output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => return Outcome::Error(format!("harness: run the attack unsandboxed: {e}")),
    };
    match sys::read_key(control) {
        Ok(v) if v != payload.as_bytes() && bare.contains(payload) => {}
        _ => {
            return Outcome::Skip(format!(
                "the attack does not read and replace a session key outside the sandbox here: {}",
                crate::runner::clip(bare.trim(), 200)
            ))
        }
    }
    let run = c.sb(Sb::new(Cmd::Attack(
        Attack::I386Keyctl,
        vec![key.to_string()],
    )));
    let o = run.outcome();
    match sys::read_key(key) {
        Ok(v) if v == payload.as_bytes() => {}
        Ok(v) => {
            return Outcome::Escaped(format!(
                "the session key now holds {:?} ({})",
                String::from_utf8_lossy(&v),
                describe(&o)
            ))
        }
        Err(e) => {
            return Outcome::Escaped(format!(
                "the session key can no longer be read: {e} ({})",
                describe(&o)
            ))
        }
    }
    if run.stdout.contains(payload) {
        return Outcome::Escaped(format!(
            "the session key's payload reached the command's output ({})",
            describe(&o)
        ));
    }
    o
}
