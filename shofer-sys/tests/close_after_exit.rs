//! `process::close_after_exit` and `close_deferred`: the one child that takes over the
//! descriptors' last close holds those descriptors and its wait pipe only, does not carry this
//! process's command line, and stays until this process exits. (One test: the list is the
//! process's, and the child is its last fork.)

use std::os::fd::{AsRawFd, OwnedFd};

use shofer_sys::proc::ProcTable;

/// The tests count this process's children: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_closing_child_holds_only_the_descriptor_and_not_our_command_line() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

/// Where `close_range(2)` fails (before Linux 5.9, or refused by a seccomp filter, as here),
/// the closing child still closes everything it does not keep: the caller's pipe reaches end
/// of file once this process has exited. (It held every descriptor, its own wait pipe's write
/// end among them, and never exited.)
#[test]
fn without_close_range_the_closing_child_still_lets_go() {
    const AS_CHILD: &str = "SHOFER_TEST_CLOSER_WITHOUT_CLOSE_RANGE";
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if std::env::var_os(AS_CHILD).is_some() {
        refuse_close_range();
        let (read, _write): (OwnedFd, OwnedFd) = shofer_sys::fd::pipe_cloexec().unwrap();
        shofer_sys::process::close_after_exit(read);
        shofer_sys::process::close_deferred();
        println!("handed over");
        std::process::exit(0);
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "without_close_range_the_closing_child_still_lets_go",
            "--exact",
            "--nocapture",
        ])
        .env(AS_CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
        let _ = tx.send(out);
    });
    let out = rx.recv_timeout(std::time::Duration::from_secs(20));
    let status = child.wait().unwrap();
    let out = out.expect("the caller's pipe never reached end of file: the closer holds it");
    assert!(
        status.success() && out.contains("handed over"),
        "{status}: {out}"
    );
}

/// A seccomp filter on this process: `close_range` fails with `ENOSYS`, everything else runs.
fn refuse_close_range() {
    let filter = [
        // The system call's number.
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_close_range as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // Safety: prctl with a filter program that lives until the call returns (the kernel
    // copies it).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0
        );
    }
}
