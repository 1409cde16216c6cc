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
