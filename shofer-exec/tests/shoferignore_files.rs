//! `shofer serve` and a `.shofer/shoferignore` a command planted (issue 29, F9): a FIFO there
//! made every later `execute_command` hang (the agent could not even remove it: that command
//! is checked first), a symlink to `/dev/zero` made the server read until memory ran out.
//! Driven over raw JSON-RPC lines on stdio (no MCP library needed).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// One `shofer serve --cwd DIR`, initialised.
struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next_id: u64,
}

impl Server {
    fn start(cwd: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shofer"))
            .args(["serve", "--cwd"])
            .arg(cwd)
            .env("TMPDIR", cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start shofer serve");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Server {
            child,
            stdin,
            lines,
            next_id: 0,
        };
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}),
            Duration::from_secs(20),
        );
        assert!(init.get("result").is_some(), "{init}");
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request and waits at most `limit` for its answer.
    fn request(&mut self, method: &str, params: Value, limit: Duration) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let v: Value = serde_json::from_str(&line).unwrap();
                    if v["id"] == json!(id) {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no answer to {method} within {limit:?}: the server hangs")
                }
                Err(RecvTimeoutError::Disconnected) => panic!("the server ended"),
            }
        }
    }

    /// `execute_command`'s text, answered within 15 s.
    fn execute(&mut self, command: &str) -> String {
        let r = self.request(
            "tools/call",
            json!({"name": "execute_command",
                   "arguments": {"command": command, "cwd": null, "timeout": null}}),
            Duration::from_secs(15),
        );
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text in {r}"))
            .to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // Safety: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A FIFO, a symlink to `/dev/zero` and a file over 1 MiB at `.shofer/shoferignore`: each call
/// is answered at once, says the file was not applied and what is valid, and the agent's
/// command that removes it runs.
#[test]
fn a_planted_shoferignore_neither_hangs_nor_fills_the_server() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    std::fs::create_dir(dir.join(".shofer")).unwrap();
    let ignore = dir.join(".shofer/shoferignore");
    let mut server = Server::start(dir);
    let plants: [(&str, &dyn Fn()); 3] = [
        ("it is a FIFO", &|| mkfifo(&ignore)),
        ("it is a symbolic link", &|| {
            std::os::unix::fs::symlink("/dev/zero", &ignore).unwrap()
        }),
        ("it holds 2097152 bytes", &|| {
            std::fs::write(&ignore, vec![b'#'; 2 << 20]).unwrap()
        }),
    ];
    for (why, plant) in plants {
        plant();
        let t0 = Instant::now();
        let t = server.execute("echo still-served");
        assert!(t0.elapsed() < Duration::from_secs(10), "{why}: {t}");
        assert!(
            t.contains("still-served")
                && t.contains("was not applied to this command")
                && t.contains(why)
                && t.contains("expected a regular file of at most 1048576 bytes"),
            "{why}: {t}"
        );
        let t = server.execute("rm .shofer/shoferignore && echo removed");
        assert!(
            t.contains("removed") && t.contains("Exit code: 0"),
            "{why}: {t}"
        );
        assert!(std::fs::symlink_metadata(&ignore).is_err(), "{why}");
    }
    // A `.shofer` that is a symlink is not followed either.
    std::fs::remove_dir(dir.join(".shofer")).unwrap();
    std::os::unix::fs::symlink("/dev", dir.join(".shofer")).unwrap();
    let t = server.execute("echo again");
    assert!(
        t.contains("again") && t.contains(".shofer is a symlink"),
        "{t}"
    );
    std::fs::remove_file(dir.join(".shofer")).unwrap();
    // A real one still refuses what it lists.
    std::fs::create_dir(dir.join(".shofer")).unwrap();
    std::fs::write(&ignore, "secret.txt\n").unwrap();
    std::fs::write(dir.join("secret.txt"), "s3cret\n").unwrap();
    let r = server.request(
        "tools/call",
        json!({"name": "execute_command",
               "arguments": {"command": "cat secret.txt", "cwd": null, "timeout": null}}),
        Duration::from_secs(15),
    );
    let t = r["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(t.contains("access_denied") && !t.contains("s3cret"), "{r}");
}
