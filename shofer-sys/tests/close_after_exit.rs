//! `process::close_after_exit` and `close_deferred`: the one child that takes over the
//! descriptors' last close holds those descriptors and its wait pipe only, does not carry this
//! process's command line, and stays until this process exits. (One test: the list is the
//! process's, and the child is its last fork.)

use std::os::fd::{AsRawFd, OwnedFd};

use shofer_sys::proc::ProcTable;

#[test]
fn the_closing_child_holds_only_the_descriptor_and_not_our_command_line() {
    let me = shofer_sys::process::getpid();
    let children_of_me = || {
        let table = ProcTable::scan();
        let pids: Vec<i32> = table
            .children(me)
            .iter()
            .map(|&i| table.procs()[i].pid)
            .collect();
        pids
    };
    let before = children_of_me();
    let ours = std::fs::read("/proc/self/cmdline").unwrap();
    let (read, write): (OwnedFd, OwnedFd) = shofer_sys::fd::pipe_cloexec().unwrap();
    let read_ino = std::fs::metadata(format!("/proc/self/fd/{}", read.as_raw_fd()))
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();
    let (other, _other_write): (OwnedFd, OwnedFd) = shofer_sys::fd::pipe_cloexec().unwrap();
    let other_ino = std::fs::metadata(format!("/proc/self/fd/{}", other.as_raw_fd()))
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();
    shofer_sys::process::close_after_exit(read);
    shofer_sys::process::close_after_exit(other);
    // Handed over, not forked yet.
    assert_eq!(children_of_me(), before);
    shofer_sys::process::close_deferred();
    let children: Vec<i32> = children_of_me()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(children.len(), 1, "one closing child: {children:?}");
    let child = children[0];
    // The child closes the rest right after fork: wait until it has (fork(2) returns to us
    // first).
    let settled =
        |child: i32| std::fs::read_dir(format!("/proc/{child}/fd")).is_ok_and(|d| d.count() == 3);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !settled(child) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Its command line is not ours (a marker search must not find it): blanked before the
    // fork, so ours (this process is exiting) reads the same from then on.
    let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap();
    assert_ne!(cmdline, ours);
    assert!(cmdline.starts_with(b"shofer (closing)"), "{cmdline:?}");
    let now = std::fs::read("/proc/self/cmdline").unwrap();
    assert!(now.starts_with(b"shofer (closing)"), "{now:?}");
    // Exactly three descriptors: the two handed over, and its wait pipe.
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{child}/fd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(fds.len(), 3, "the child holds nothing else: {fds:?}");
    let held: Vec<u64> = fds
        .iter()
        .map(|n| {
            std::fs::metadata(format!("/proc/{child}/fd/{n}"))
                .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
                .unwrap()
        })
        .collect();
    assert!(held.contains(&read_ino), "the first descriptor handed over");
    assert!(held.contains(&other_ino), "the second");
    // It waits for this process: still there a moment later, and our write end has no reader
    // but it (a write succeeds).
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(std::path::Path::new(&format!("/proc/{child}")).exists());
    assert_eq!(rustix::io::write(&write, b"x").unwrap(), 1);
}
