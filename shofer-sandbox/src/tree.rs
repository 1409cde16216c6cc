//! Stopping a process tree: every descendant of the supervisor, found through `/proc/*/stat`
//! and signalled through pidfds (Linux 5.3), re-checking the parent after opening, so a
//! recycled PID is never signalled. (To be replaced by the shared `shofer-sys` tree killer.)

use crate::sys;

/// Every descendant of this process, from `/proc/*/stat`.
fn descendants() -> Vec<(libc::pid_t, libc::pid_t)> {
    // Safety: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let mut procs: Vec<(libc::pid_t, libc::pid_t)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if let Some(ppid) = parent_of(pid) {
                procs.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![me];
    let mut found = Vec::new();
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for &(pid, ppid) in &procs {
            if ppid == parent && pid != me {
                tree.push(pid);
                found.push((pid, ppid));
            }
        }
        i += 1;
    }
    found
}

/// The parent PID from `/proc/<pid>/stat` (the field after the `)` that ends `comm`).
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Sends `sig` to every descendant through a pidfd, after checking that the process behind
/// the pidfd still has the parent we saw (so a recycled PID is left alone).
pub(crate) fn signal_descendants(sig: libc::c_int) {
    for (pid, ppid) in descendants() {
        match sys::pidfd_open(pid) {
            Ok(pidfd) => {
                if parent_of(pid) == Some(ppid) {
                    let _ = sys::pidfd_send_signal(&pidfd, sig);
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                // Before Linux 5.3: plain kill, racing PID reuse as every tool did then.
                // Safety: kill with a PID we just saw below us.
                unsafe { libc::kill(pid, sig) };
            }
            Err(_) => {} // already gone
        }
    }
}
