//! Helpers shared by the integration tests: unique markers, a `/proc` survivor scan, and
//! [`skip`] for a missing prerequisite (a failure under `CI`), and [`sandbox_binary`].
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

static N: AtomicU32 = AtomicU32::new(0);

/// A marker unique to this test process and call, usable as a `sleep` duration
/// (`sleep <marker>` sleeps ~1000 s) and as `$0` of `sh -c`, so it shows in `/proc/*/cmdline`.
pub fn marker() -> String {
    let n = N.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("1000.{}{:04}{:09}", std::process::id(), n, nanos)
}

/// Live (non-zombie) processes whose command line contains `marker`.
pub fn survivors(marker: &str) -> Vec<i32> {
    shofer_sys::proc::live_with_cmdline(|c| String::from_utf8_lossy(c).contains(marker))
        .iter()
        .map(|p| p.pid)
        .collect()
}

/// Polls until `marker` has at least `n` live processes (or 10 s pass).
pub fn wait_for_processes(marker: &str, n: usize) -> usize {
    let start = std::time::Instant::now();
    loop {
        let k = survivors(marker).len();
        if k >= n || start.elapsed() > std::time::Duration::from_secs(10) {
            return k;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Kills leftovers of a failed test so one failure does not leak processes.
pub fn kill_leftovers(marker: &str) {
    for pid in survivors(marker) {
        // Safety: plain kill(2) of a pid found by its unique marker.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Is this process root?
pub fn is_root() -> bool {
    // Safety: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this is a CI run: `CI` is set and not empty (CI sets `CI=true`).
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// A prerequisite of `test` is missing here (`why` says which). Outside CI it prints
/// `SKIP <test>: <why>` and the caller returns, so the test passes. Under `CI` it panics
/// instead: CI installs everything the tests need (`scripts/ci`), so a missing prerequisite
/// there is a broken setup that must not pass as green.
pub fn skip(test: &str, why: &str) {
    if in_ci() {
        panic!("{test}: {why} (CI is set: a missing prerequisite fails the test; scripts/ci must provide it)");
    }
    eprintln!("SKIP {test}: {why}");
}

/// Live `sleep` processes (argv[0] is `sleep`) whose command line contains `marker`.
pub fn sleepers(marker: &str) -> usize {
    survivors(marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
        })
        .count()
}

/// The workspace's `shofer-sandbox` binary, brought up to date once per test run (it is another
/// package's binary, so cargo does not build it for this test on its own).
pub fn sandbox_binary() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let shofer = std::path::PathBuf::from(env!("CARGO_BIN_EXE_shofer"));
            let bin = shofer.with_file_name("shofer-sandbox");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
            let mut build = std::process::Command::new(cargo);
            build
                .args(["build", "-p", "shofer-sandbox", "--manifest-path"])
                .arg(manifest);
            if shofer
                .parent()
                .and_then(std::path::Path::file_name)
                .is_some_and(|d| d == "release")
            {
                build.arg("--release");
            }
            let st = build.status().unwrap();
            assert!(st.success(), "building shofer-sandbox failed");
            assert!(bin.exists(), "{} missing", bin.display());
            bin
        })
        .clone()
}
