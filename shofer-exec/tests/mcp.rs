//! `shofer serve` driven by a real MCP client: the official Python SDK (`mcp` package) runs
//! `tests/mcp/client.py` against the `shofer` binary over stdio (see that script for the
//! checks: handshake, tools, soft timeout, list, read/search, terminate, shoferignore, error
//! texts, stdin close and SIGTERM with no process left, artifact cleanup).
//!
//! The Python environment comes from `scripts/mcp-venv` (default `target/mcp-venv`), or
//! `SHOFER_MCP_PYTHON=/path/to/python` naming an interpreter that has `mcp`. Without it the
//! test prints SKIP, and fails when `CI` is set (CI must run it; `common::skip`).

mod common;
use common::sandbox_binary;

use std::path::PathBuf;
use std::process::Command;

fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SHOFER_MCP_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/mcp-venv/bin/python");
    venv.exists().then_some(venv)
}

#[test]
fn real_mcp_client_session() {
    let Some(python) = python() else {
        let how = "create it with `scripts/mcp-venv` (python3 -m venv target/mcp-venv && target/mcp-venv/bin/pip install 'mcp>=2.3,<3'), or set SHOFER_MCP_PYTHON";
        common::skip(
            "real_mcp_client_session",
            &format!("no MCP client venv; {how}"),
        );
        return;
    };
    let probe = Command::new(&python)
        .args(["-c", "import mcp.client.stdio"])
        .output()
        .expect("run the venv's python");
    assert!(
        probe.status.success(),
        "{} cannot import mcp: {}; run scripts/mcp-venv",
        python.display(),
        String::from_utf8_lossy(&probe.stderr)
    );
    let scratch = tempfile::tempdir().unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    // The transcript of the session, for the README (kept when SHOFER_MCP_TRANSCRIPT is set).
    let transcript = std::env::var_os("SHOFER_MCP_TRANSCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| scratch.path().join("transcript.jsonl"));
    // The worktree phase: a directory under $HOME (outside /tmp, which the sandbox policy
    // leaves writable), so a write next to it must fail.
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    let wt_root = tempfile::Builder::new()
        .prefix("shofer-mcp-wt-")
        .tempdir_in(&home)
        .unwrap();
    let wt = wt_root.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    assert!(sandbox_binary().exists());
    let out = Command::new(&python)
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_shofer"))
        .arg(scratch.path())
        .arg(&transcript)
        .arg(&wt)
        .env_remove("SHOFER_SANDBOX")
        .output()
        .expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "the MCP client session failed ({}):\n{}\n{stderr}",
        out.status,
        stdout
            .lines()
            .filter(|l| l.starts_with("FAIL"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        stdout.contains("\n0 failed"),
        "the client did not finish: {stdout}"
    );
    assert!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count() >= 40,
        "fewer checks ran than expected"
    );
}

/// `shofer serve`'s exit codes when no session happens (no MCP client needed).
#[test]
fn serve_exit_codes_without_a_session() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shofer"))
            .arg("serve")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // stdin closed before `initialize`: the session failed.
    let (code, err) = run(&[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("MCP session did not start"), "{err}");
    // A task directory that does not exist: nothing started.
    let (code, err) = run(&["--cwd", "/nonexistent-shofer-dir"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(
        err.contains("--cwd /nonexistent-shofer-dir: not a directory"),
        "{err}"
    );
    // Usage errors.
    let (code, err) = run(&["--hard-timeout", "1e300"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run(&["--preview", "huge"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run(&["--hard-timeout", "-1"]);
    assert_eq!(code, Some(2), "{err}");
}
