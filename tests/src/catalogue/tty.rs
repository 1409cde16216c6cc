//! Host side — terminals: TIOCSTI and TIOCLINUX injection through every entry point, terminal
//! programs that must keep working, /dev/uinput.

use super::{describe, need_python, need_sh_stty, nothing, python_bin, Case, Scope, W};
use crate::attacks::Attack;
use crate::runner::{attack_checked, clip, Cmd, Ctx, Outcome, Run, Sb};
use crate::sys;
use shofer_core::policy::Protection;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// This family's cases, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "tiocsti",
            "field 4: TIOCSTI into the controlling pty (stdin and /dev/tty)",
            Some(Protection::Tiocsti),
            |c| pty_case(c, Attack::Tiocsti)
        ),
        case!(
            "tiocsti-high-bits",
            "TIOCSTI with bits set above 32 in the request word (filter bypass)",
            Some(Protection::Tiocsti),
            |c| pty_case(c, Attack::TiocstiHighBits)
        ),
        case!(
            "tioclinux",
            "TIOCLINUX(PASTESEL) on the controlling pty must be refused by the filter",
            Some(Protection::Tiocsti),
            |c| pty_case(c, Attack::Tioclinux)
        ),
        case!(
            "tiocsti-ia32",
            "TIOCSTI through the i386 entry point (int 0x80)",
            Some(Protection::Tiocsti),
            |c| pty_case(c, Attack::TiocstiIa32)
        ),
        case!(
            "tiocsti-x32",
            "TIOCSTI through the x32 system call number",
            Some(Protection::Tiocsti),
            |c| pty_case(c, Attack::TiocstiX32)
        ),
        case!(
            "tiocsti-foreign-pty",
            "non-interactive run: open a pty that is nobody's terminal, make it ours, TIOCSTI",
            Some(Protection::Tiocsti),
            tiocsti_foreign
        ),
        Case {
            root_only: true,
            ..case!(
                "dev-uinput",
                "as root: open /dev/uinput (a fake keyboard) for writing",
                W,
                |c| attack_checked(c, Attack::DevUinput, &[])
            )
        },
        case!(
            "python-tiocsti",
            "field 4: python3 fcntl.ioctl(0, TIOCSTI) under a pty",
            Some(Protection::Tiocsti),
            python_tiocsti,
            needs = need_python
        ),
        case!(
            "terminal-programs",
            "field 3: /dev/tty winsize+termios, /dev/stdout, /dev/stderr, openpty under a pty",
            Some(Protection::TerminalPrograms),
            |c| pty_case(c, Attack::TerminalPrograms)
        ),
        case!(
            "shell-terminal-programs",
            "field 3: stty size </dev/tty; echo a >/dev/stdout; echo b >/dev/stderr",
            Some(Protection::TerminalPrograms),
            shell_terminal,
            needs = need_sh_stty
        ),
    ]
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

fn pty_case(c: &Ctx, attack: Attack) -> Outcome {
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

fn tiocsti_foreign(c: &Ctx) -> Outcome {
    let (_master, slave, slave_path) = match sys::openpty() {
        Ok(x) => x,
        Err(e) => return Outcome::Error(format!("harness: openpty: {e}")),
    };
    let _ = sys::tty_raw(slave.as_raw_fd());
    let (u, g) = c.cell.user.ids();
    let _ = sys::chown(&slave_path, u, g);
    let run = c.sb(Sb::new(Cmd::Attack(
        Attack::TiocstiForeignPty,
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
