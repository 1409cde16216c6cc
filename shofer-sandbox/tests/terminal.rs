//! Terminal behaviour under a real pseudo-terminal (`script(1)` from util-linux): field cases 3
//! (terminal programs keep working, Landlock ABI 5+ device ioctls) and 4 (TIOCSTI injection is
//! refused and nothing reaches the shell that started the sandbox).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

fn have(tool: &str) -> bool {
    Path::new(tool).exists()
}

/// Runs `inner` (a bash script) under a pty; stdin is a pipe kept open for a while so the
/// pty does not see EOF before the script is done.
fn under_pty(inner: &str) -> (Option<i32>, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg("sleep 5 | script -qec \"$0\" /dev/null")
        .arg(format!("bash -c '{}'", inner.replace('\'', "'\\''")))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).replace('\r', ""),
    )
}

#[test]
fn terminal_programs_work_under_a_pty() {
    if !have("/usr/bin/script") || !have("/usr/bin/python3") {
        skip(
            "terminal_programs_work_under_a_pty",
            "needs /usr/bin/script (bsdutils) and /usr/bin/python3",
        );
        return;
    }
    let s = Scratch::new();
    let wt = s.path();
    // bubblewrap's --new-session takes the controlling terminal away by design: /dev/tty
    // cannot work there, so it is not in this list.
    for b in backends().into_iter().filter(|b| *b != "bwrap") {
        let (code, out) = under_pty(&format!(
            "cd '{}' && '{SANDBOX}' --backend {b} . -- sh -c 'stty size </dev/tty && /usr/bin/python3 -c \"import pty; pty.openpty(); print(\\\"pty-ok\\\")\" && echo a >/dev/stdout && echo b >/dev/stderr'; echo rc=$?",
            wt.display()
        ));
        assert_eq!(code, Some(0), "{b}: {out}");
        assert!(out.contains("pty-ok"), "{b}: {out}");
        assert!(out.contains("\na\n") && out.contains("\nb\n"), "{b}: {out}");
        assert!(out.contains("rc=0"), "{b}: {out}");
    }
}

#[test]
fn tiocsti_injection_is_refused_and_nothing_reaches_the_parent_shell() {
    if !have("/usr/bin/script") || !have("/usr/bin/python3") {
        skip(
            "tiocsti_injection_is_refused_and_nothing_reaches_the_parent_shell",
            "needs /usr/bin/script (bsdutils) and /usr/bin/python3",
        );
        return;
    }
    let s = Scratch::new();
    let wt = s.path();
    let inject = s.path().join("inject.py");
    std::fs::write(
        &inject,
        "import fcntl, termios\nfor c in b'echo INJECTED\\n':\n    fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))\n",
    )
    .unwrap();
    let script = |prefix: &str| {
        format!(
            "cd '{}' && {prefix} /usr/bin/python3 '{}'; echo rc=$?; read -t 1 line; echo \"got=[$line]\"",
            wt.display(),
            inject.display()
        )
    };
    // Without the sandbox the injection works on this kernel (legacy TIOCSTI on): the test
    // can tell the difference. If the kernel refuses TIOCSTI itself, say so and go on.
    let (_, bare) = under_pty(&script(""));
    if !bare.contains("got=[echo INJECTED]") {
        eprintln!("note: this kernel refuses TIOCSTI by itself (dev.tty.legacy_tiocsti=0)");
    }
    for b in backends() {
        let (_, boxed) = under_pty(&script(&format!("'{SANDBOX}' --backend {b} . --")));
        assert!(boxed.contains("Operation not permitted"), "{b}: {boxed}");
        assert!(boxed.contains("got=[]"), "{b}: {boxed}");
    }
}
