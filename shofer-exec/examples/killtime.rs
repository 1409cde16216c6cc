//! Times a tree kill of N SIGTERM-ignoring sleepers: `cargo run --release --example killtime -- 500`.
use std::time::{Duration, Instant};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    shofer_exec::tree::enable_subreaper().unwrap();
    let mark = format!("1000.{}", std::process::id());
    let script = format!(
        "trap '' TERM; i=0; while [ $i -lt {n} ]; do sleep {mark} & i=$((i+1)); done; wait"
    );
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", &script]).env("SHOFER_EXEC_TAG", "bench");
    // Safety: setsid is async-signal-safe; as the engine spawns its commands.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let tree = shofer_exec::tree::Tree::new(child.id() as i32, "bench".into());
    while tree.members().len() < n + 1 {
        std::thread::sleep(Duration::from_millis(20));
    }
    scan_cost();
    let t = Instant::now();
    let report = shofer_exec::tree::kill_trees(&[&tree], Duration::from_millis(250));
    let took = t.elapsed();
    let _ = child.wait();
    println!(
        "killed {} processes in {took:?} (grace 250 ms); survivors {:?}",
        report.signalled, report.survivors
    );
}

fn scan_cost() {
    let t = Instant::now();
    let v = shofer_sys::ProcTable::scan();
    println!("scan of {} processes: {:?}", v.procs().len(), t.elapsed());
}
