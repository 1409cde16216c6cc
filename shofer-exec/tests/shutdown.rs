//! The end of a session: every command's tree stops at once (issue 15 case 4).

mod common;

use std::time::{Duration, Instant};

use common::{kill_leftovers, marker, survivors, wait_for_processes};
use shofer_exec::{Engine, EngineConfig, ExecRequest, Status};

#[tokio::test]
async fn terminate_all_stops_every_background_command_term_ignoring_ones_included() {
    let d = tempfile::tempdir().unwrap();
    let m = marker();
    let mut c = EngineConfig::new(d.path(), d.path().join("artifacts"));
    c.subreaper = true;
    let e = Engine::new(c).unwrap();
    // 100 background commands of 4 processes each; half ignore SIGTERM.
    for i in 0..100 {
        let trap = if i % 2 == 0 { "trap '' TERM; " } else { "" };
        let o = e
            .execute(ExecRequest {
                command: format!("{trap}sleep {m} & sleep {m} & sleep {m} & exec sleep {m}"),
                timeout: Some(0.01),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(
            matches!(o.status, Status::Running | Status::Exited),
            "{o:?}"
        );
    }
    assert!(wait_for_processes(&m, 400) >= 400);
    let t = Instant::now();
    let running = e.terminate_all().await;
    let took = t.elapsed();
    let left = survivors(&m);
    kill_leftovers(&m);
    assert!(left.is_empty(), "survivors: {left:?}");
    assert_eq!(running, 100);
    assert!(e.list().iter().all(|o| o.status != Status::Running));
    // One grace period for all (250 ms): one command after another would take 50 × 250 ms
    // for the TERM-ignoring half alone.
    assert!(took < Duration::from_secs(10), "{took:?}");
    println!("400 processes of 100 commands stopped in {took:?}");
}

/// Starts `shofer serve --cwd DIR` over raw JSON-RPC lines and runs `command` in the
/// background (a 0.3 s soft timeout); returns the process the client started.
fn serve_with_background(dir: &std::path::Path, command: &str) -> std::process::Child {
    use std::io::{BufRead, BufReader, Write};
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_shofer"))
        .args(["serve", "--cwd"])
        .arg(dir)
        // The server's own artifact directory goes there too (the test kills servers).
        .env("TMPDIR", dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    writeln!(stdin, "{init}").unwrap();
    stdout.read_line(&mut line).unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "execute_command", "arguments": {"command": command, "timeout": 0.3}}});
    writeln!(stdin, "{call}").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("still running"), "{line}");
    // Keep the pipes open (the server must die by the signal, not by end of file).
    std::mem::forget(stdin);
    std::mem::forget(stdout);
    server
}

/// Without `--worktree` a command has no sandbox supervisor: a SIGKILLed server used to leave
/// its background processes (double-forked, `setsid` ones too) running under init. Killing
/// the process the client started, or the server process below it, now leaves nothing.
#[test]
fn a_sigkilled_server_leaves_no_process_behind() {
    for kill_inner in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let m = marker();
        let mut client_started = serve_with_background(
            d.path(),
            &format!("sleep {m} & setsid sleep {m} & (sleep {m} &) ; exec sleep {m}"),
        );
        assert!(wait_for_processes(&m, 4) >= 4);
        let pid = client_started.id() as i32;
        let target = if kill_inner {
            // The server is the guardian's only child.
            let children =
                std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
            children.split_whitespace().next().unwrap().parse().unwrap()
        } else {
            pid
        };
        // Safety: kill(2) of a process this test started (or its child).
        unsafe { libc::kill(target, libc::SIGKILL) };
        let _ = client_started.wait();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !survivors(&m).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let left = survivors(&m);
        kill_leftovers(&m);
        assert!(
            left.is_empty(),
            "kill_inner={kill_inner}: survivors {left:?}"
        );
    }
}

/// The `shofer-serve-*` session directories in `base`.
fn sessions(base: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(base)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("shofer-serve-"))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// Issue 34: the server and its guardian SIGKILLed together (both stopped first, so that
/// neither runs another instruction: no shutdown, no sweep by the guardian) leave their
/// artifact directory behind; the next server started on the same base removes it (its owner
/// record names a process that is gone), and keeps its own until its own clean end.
#[test]
fn a_server_killed_with_its_guardian_leaves_a_directory_the_next_server_removes() {
    let d = tempfile::tempdir().unwrap();
    let m = marker();
    let mut first = serve_with_background(d.path(), &format!("seq 1 100000; sleep {m}"));
    let guardian = first.id() as i32;
    let children =
        std::fs::read_to_string(format!("/proc/{guardian}/task/{guardian}/children")).unwrap();
    let server: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
    let old = sessions(d.path());
    assert_eq!(old.len(), 1, "{old:?}");
    let old = old[0].clone();
    let names: Vec<String> = std::fs::read_dir(&old)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("cmd-")) && names.iter().any(|n| n == "owner"),
        "{names:?}"
    );
    // Safety: kill(2) of the processes this test started (the guardian and its child).
    unsafe {
        libc::kill(guardian, libc::SIGSTOP);
        libc::kill(server, libc::SIGSTOP);
        libc::kill(server, libc::SIGKILL);
        libc::kill(guardian, libc::SIGKILL);
    }
    let _ = first.wait();
    // With no server and no guardian left, the command's sleep went to init (the known limit
    // of a double SIGKILL without a sandbox): this test's to clean up.
    let deadline = Instant::now() + Duration::from_secs(5);
    while shofer_sys::proc::read(server).is_some_and(|p| !p.is_dead()) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_leftovers(&m);
    assert!(old.join("owner").exists(), "nothing ran to clean it");

    let m2 = marker();
    let mut second = serve_with_background(d.path(), &format!("sleep {m2}"));
    let now = sessions(d.path());
    assert!(
        !old.exists(),
        "the dead server's directory is still there: {now:?}"
    );
    assert_eq!(now.len(), 1, "{now:?}");
    assert!(now[0].join("owner").exists());
    // Safety: kill(2) of the guardian this test started; its server shuts down cleanly.
    unsafe { libc::kill(second.id() as i32, libc::SIGTERM) };
    let _ = second.wait();
    let left = sessions(d.path());
    kill_leftovers(&m2);
    assert!(left.is_empty(), "a clean end removes its own: {left:?}");
}
