//! Inside the sandbox — files: writes, deletes, renames and links across the worktree boundary,
//! symlinks, `..`, metadata, devices, /tmp and /dev/shm, ordinary work inside.

use super::{arg, attempt, contain, p, write_via, Seen};
use crate::sys::{self, Errno};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// `create-outside`: open(O_CREAT) a new file outside the worktree.
pub(crate) fn create_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    contain(
        "open(outside/new, O_CREAT)",
        sys::open(
            out.join("new"),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o644,
        ),
    )
}

/// `write-outside`: open an existing outside file O_WRONLY and write.
pub(crate) fn write_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    contain(
        "open(outside/existing, O_WRONLY)+write",
        write_via(&ex, libc::O_WRONLY),
    )
}

/// `append-outside`: open an existing outside file O_APPEND and write.
pub(crate) fn append_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    contain(
        "open(outside/existing, O_APPEND)+write",
        write_via(&ex, libc::O_WRONLY | libc::O_APPEND),
    )
}

/// `truncate-path`: truncate(2) an outside file by path.
pub(crate) fn truncate_path(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    contain("truncate(outside/existing, 0)", sys::truncate(&ex, 0))
}

/// `truncate-rdonly-otrunc`: open(O_RDONLY|O_TRUNC) an outside file.
pub(crate) fn truncate_rdonly_otrunc(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    contain(
        "open(outside/existing, O_RDONLY|O_TRUNC)",
        sys::open(&ex, libc::O_RDONLY | libc::O_TRUNC, 0),
    )
}

/// `unlink-outside`: unlink an outside file.
pub(crate) fn unlink_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    contain("unlink(outside/existing)", sys::unlink(&ex))
}

/// `rmdir-outside`: rmdir an outside directory.
pub(crate) fn rmdir_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    contain("rmdir(outside/emptydir)", sys::rmdir(out.join("emptydir")))
}

/// `mkdir-outside`: mkdir outside.
pub(crate) fn mkdir_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    contain(
        "mkdir(outside/newdir)",
        sys::mkdir(out.join("newdir"), 0o755),
    )
}

/// `symlink-outside`: create a symlink outside.
pub(crate) fn symlink_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    contain(
        "symlink(x, outside/newlink)",
        sys::symlink("x", out.join("newlink")),
    )
}

/// `mkfifo-outside`: mknod a FIFO outside.
pub(crate) fn mkfifo_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    contain(
        "mknod(outside/fifo, S_IFIFO)",
        sys::mknod(out.join("fifo"), libc::S_IFIFO | 0o644, 0),
    )
}

/// `bind-socket-outside`: bind a unix socket file outside.
pub(crate) fn bind_socket_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let path = out.join("bound.sock");
    let r = sys::unix_listen(path.as_os_str().as_encoded_bytes(), false);
    contain("bind(AF_UNIX, outside/bound.sock)", r)
}

/// `rename-out`: rename a worktree file to outside.
pub(crate) fn rename_out(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    contain(
        "rename(wt/f, outside/moved)",
        sys::rename(wt.join("f"), out.join("moved")),
    )
}

/// `rename-in`: rename an outside file into the worktree.
pub(crate) fn rename_in(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    contain(
        "rename(outside/existing, wt/stolen)",
        sys::rename(&ex, wt.join("stolen")),
    )
}

/// `rename-exchange`: renameat2(RENAME_EXCHANGE) a worktree file with an outside one.
pub(crate) fn rename_exchange(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    contain(
        "renameat2(wt/f, outside/existing, RENAME_EXCHANGE)",
        sys::renameat2(wt.join("f"), &ex, libc::RENAME_EXCHANGE),
    )
}

/// `rename-dir-out`: rename a worktree directory to outside.
pub(crate) fn rename_dir_out(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    contain(
        "rename(wt/sub, outside/sub)",
        sys::rename(wt.join("sub"), out.join("sub")),
    )
}

/// `rename-worktree`: rename the worktree itself.
pub(crate) fn rename_worktree(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let parent = wt.parent().unwrap_or(Path::new("/")).join("wt-renamed");
    contain("rename(wt, ../wt-renamed)", sys::rename(&wt, parent))
}

/// `link-in`: hard-link an outside file into the worktree and write through it.
pub(crate) fn link_in(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    match attempt(
        "link(outside/existing, wt/hl)",
        sys::link(&ex, wt.join("hl")),
    ) {
        Err(d) => Seen::Blocked(d),
        Ok(()) => match write_via(&wt.join("hl"), libc::O_WRONLY | libc::O_APPEND) {
            Ok(()) => Seen::Escaped("hard link into wt, written through it".into()),
            Err(e) => Seen::Escaped(format!("hard link into wt created (write -> {e})")),
        },
    }
}

/// `link-out`: hard-link a worktree file to outside.
pub(crate) fn link_out(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    contain(
        "link(wt/f, outside/hl)",
        sys::link(wt.join("f"), out.join("hl")),
    )
}

/// `linkat-procfd-in`: linkat(/proc/self/fd/N) of a read-only outside fd into the worktree.
pub(crate) fn linkat_procfd_in(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    let fd = match sys::open(&ex, libc::O_RDONLY, 0) {
        Ok(fd) => fd,
        Err(e) => return Seen::Broken(format!("open(outside/existing, O_RDONLY) -> {e}")),
    };
    let src = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match attempt(
        "linkat(/proc/self/fd/N, wt/hl2, AT_SYMLINK_FOLLOW)",
        sys::linkat_follow(&src, wt.join("hl2")),
    ) {
        Err(d) => Seen::Blocked(d),
        Ok(()) => match write_via(&wt.join("hl2"), libc::O_WRONLY | libc::O_APPEND) {
            Ok(()) => Seen::Escaped("linked an outside file into wt and wrote it".into()),
            Err(e) => Seen::Escaped(format!("linked an outside file into wt (write -> {e})")),
        },
    }
}

/// `otmpfile-link-out`: O_TMPFILE in the worktree, then link it outside.
pub(crate) fn otmpfile_link_out(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    let fd = match sys::open(&wt, libc::O_TMPFILE | libc::O_WRONLY, 0o644) {
        Ok(fd) => fd,
        Err(e) => return Seen::Skip(format!("O_TMPFILE in wt -> {e}")),
    };
    let _ = sys::write(fd.as_raw_fd(), b"tmpfile\n");
    let src = format!("/proc/self/fd/{}", fd.as_raw_fd());
    contain(
        "linkat(O_TMPFILE fd, outside/tmplinked)",
        sys::linkat_follow(&src, out.join("tmplinked")),
    )
}

/// `symlink-write-through`: a worktree symlink to an outside file, written through.
pub(crate) fn symlink_write_through(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    if let Err(e) = sys::symlink(&ex, wt.join("sl")) {
        return Seen::Broken(format!("symlink inside wt -> {e}"));
    }
    contain(
        "open(wt/sl -> outside/existing, O_APPEND)+write",
        write_via(&wt.join("sl"), libc::O_WRONLY | libc::O_APPEND),
    )
}

/// `symlink-dir-through`: a worktree symlink to an outside dir, create through it.
pub(crate) fn symlink_dir_through(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    if let Err(e) = sys::symlink(&out, wt.join("sd")) {
        return Seen::Broken(format!("symlink inside wt -> {e}"));
    }
    contain(
        "open(wt/sd/new2 [sd -> outside], O_CREAT)",
        sys::open(wt.join("sd/new2"), libc::O_WRONLY | libc::O_CREAT, 0o644),
    )
}

/// `dotdot-absolute`: open(wt/../outside/new, O_CREAT).
pub(crate) fn dotdot_absolute(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    contain(
        "open(wt/../<outside>/new3, O_CREAT)",
        sys::open(
            wt.join("..").join(name).join("new3"),
            libc::O_WRONLY | libc::O_CREAT,
            0o644,
        ),
    )
}

/// `dotdot-relative`: chdir(wt); open(../outside/new, O_CREAT).
pub(crate) fn dotdot_relative(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    if let Err(e) = sys::chdir(&wt) {
        return Seen::Broken(format!("chdir(wt) -> {e}"));
    }
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    contain(
        "open(../<outside>/new4, O_CREAT) from wt",
        sys::open(
            format!("../{name}/new4"),
            libc::O_WRONLY | libc::O_CREAT,
            0o644,
        ),
    )
}

/// `tmp-symlink-out`: a /tmp symlink (writable place) to an outside file, written through.
pub(crate) fn tmp_symlink_out(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    let l = PathBuf::from(format!("/tmp/{}", arg(a, 2)));
    let _ = sys::unlink(&l);
    if let Err(e) = sys::symlink(&ex, &l) {
        return Seen::Broken(format!("symlink in /tmp -> {e}"));
    }
    let r = write_via(&l, libc::O_WRONLY | libc::O_APPEND);
    let _ = sys::unlink(&l);
    contain("open(/tmp/link -> outside/existing)+write", r)
}

/// `chmod-outside`: chmod an outside file.
pub(crate) fn chmod_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    contain("chmod(outside/existing, 0777)", sys::chmod(&ex, 0o777))
}

/// `chown-outside`: chown an outside file (to its own owner).
pub(crate) fn chown_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    let (u, g) = sys::ids();
    contain(
        "chown(outside/existing, own uid, own gid)",
        sys::chown(&ex, u, g),
    )
}

/// `utime-outside`: utimensat an outside file.
pub(crate) fn utime_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    contain(
        "utimensat(outside/existing, 1000000000)",
        sys::utime(&ex, 1_000_000_000),
    )
}

/// `xattr-outside`: setxattr user.* on an outside file.
pub(crate) fn xattr_outside(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    contain(
        "setxattr(outside/existing, user.shofer)",
        sys::setxattr(&ex, "user.shofer", b"x"),
    )
}

/// `dev-create`: create a file in /dev.
pub(crate) fn dev_create(a: &[String]) -> Seen {
    let path = format!("/dev/{}", arg(a, 2));
    let r = sys::open(&path, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600);
    if r.is_ok() {
        let _ = sys::unlink(&path);
    }
    contain("open(/dev/<new>, O_CREAT)", r)
}

/// `dev-kmsg-open-write`: open /dev/kmsg for writing (nothing written).
pub(crate) fn dev_kmsg_open_write(_: &[String]) -> Seen {
    contain(
        "open(/dev/kmsg, O_WRONLY) (nothing written)",
        sys::open("/dev/kmsg", libc::O_WRONLY, 0),
    )
}

/// `tmp-writable`: /tmp stays writable.
pub(crate) fn tmp_writable(a: &[String]) -> Seen {
    let path = format!("/tmp/{}", arg(a, 2));
    match write_via(Path::new(&path), libc::O_WRONLY | libc::O_CREAT) {
        Ok(()) => {
            let _ = sys::unlink(&path);
            Seen::Ok("created, wrote and removed a file in /tmp".into())
        }
        Err(e) => Seen::Broken(format!("create in /tmp -> {e}")),
    }
}

/// `mknod-device`: mknod a character device (1:3) in the worktree.
pub(crate) fn mknod_device(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    contain(
        "mknod(wt/nulldev, S_IFCHR 1:3)",
        sys::mknod(
            wt.join("nulldev"),
            libc::S_IFCHR | 0o666,
            libc::makedev(1, 3),
        ),
    )
}

/// `link-into-tmp`: hard-link an outside file into /tmp (writable) and write through it.
pub(crate) fn link_into_tmp(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    let ex = out.join("existing");
    let l = PathBuf::from(format!("/tmp/{}", arg(a, 2)));
    match attempt("link(outside/existing, /tmp/x)", sys::link(&ex, &l)) {
        Err(d) => Seen::Blocked(d),
        Ok(()) => {
            let w = write_via(&l, libc::O_WRONLY | libc::O_APPEND);
            let _ = sys::unlink(&l);
            match w {
                Ok(()) => {
                    Seen::Escaped("hard-linked an outside file into /tmp and wrote it".into())
                }
                Err(e) => Seen::Escaped(format!(
                    "hard-linked an outside file into /tmp (write -> {e})"
                )),
            }
        }
    }
}

/// `sys-write`: open a /sys knob for writing (nothing written).
pub(crate) fn sys_write(_: &[String]) -> Seen {
    let cands = [
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/kernel/mm/ksm/run",
        "/sys/power/state",
        "/sys/kernel/uevent_helper",
    ];
    match cands.iter().find(|p| Path::new(p).exists()) {
        None => Seen::Skip("none of the probed /sys files exist".into()),
        Some(p) => contain(
            &format!("open({p}, O_WRONLY) (nothing written)"),
            sys::open(p, libc::O_WRONLY, 0),
        ),
    }
}

/// `plant-symlink <target> <link>`: creates a symlink (a setup step inside the worktree).
pub(crate) fn plant_symlink(a: &[String]) -> Seen {
    match sys::symlink(arg(a, 0), arg(a, 1)) {
        Ok(()) => Seen::Ok("planted".into()),
        Err(e) => Seen::Broken(format!("symlink -> {e}")),
    }
}

/// `put <path> <content>`: replaces a file inside the worktree (O_TRUNC).
pub(crate) fn put(a: &[String]) -> Seen {
    let fd = sys::open(
        arg(a, 0),
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        0o644,
    );
    match fd.and_then(|fd| sys::write(fd.as_raw_fd(), arg(a, 1).as_bytes())) {
        Ok(_) => Seen::Ok(format!("wrote {}", arg(a, 0))),
        Err(e) => Seen::Broken(format!("put {} -> {e}", arg(a, 0))),
    }
}

/// `write-file <path>`: a plain create+write, for paths a rule grants.
pub(crate) fn write_file(a: &[String]) -> Seen {
    let path = p(arg(a, 0));
    match write_via(&path, libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND) {
        Ok(()) => Seen::Ok(format!("wrote {}", path.display())),
        Err(e) => Seen::Broken(format!("write {} -> {e}", path.display())),
    }
}

/// `deny-write <path>...`: every create+write must fail.
pub(crate) fn deny_write(a: &[String]) -> Seen {
    let mut escaped = Vec::new();
    let mut why = Vec::new();
    for path in a {
        let r = write_via(
            Path::new(path),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        );
        match r {
            Ok(()) => escaped.push(path.clone()),
            Err(e) => why.push(format!("{path} -> {e}")),
        }
    }
    if escaped.is_empty() {
        Seen::Blocked(why.join("; "))
    } else {
        Seen::Escaped(format!("wrote {}", escaped.join(", ")))
    }
}

/// `devices-usable`: /dev/null, /dev/zero, /dev/full still work.
pub(crate) fn devices_usable(_: &[String]) -> Seen {
    let mut bad = Vec::new();
    match sys::open("/dev/null", libc::O_WRONLY, 0) {
        Ok(fd) => {
            if let Err(e) = sys::write(fd.as_raw_fd(), b"x") {
                bad.push(format!("write /dev/null -> {e}"));
            }
        }
        Err(e) => bad.push(format!("open /dev/null O_WRONLY -> {e}")),
    }
    match sys::open("/dev/zero", libc::O_RDWR, 0) {
        Ok(fd) => {
            let mut b = [1u8; 4];
            if sys::read(fd.as_raw_fd(), &mut b).is_err() || b != [0; 4] {
                bad.push("read /dev/zero".into());
            }
        }
        Err(e) => bad.push(format!("open /dev/zero O_RDWR -> {e}")),
    }
    match sys::open("/dev/full", libc::O_WRONLY, 0) {
        Ok(fd) => match sys::write(fd.as_raw_fd(), b"x") {
            Err(e) if e.0 == libc::ENOSPC => {}
            r => bad.push(format!("write /dev/full gave {r:?}, expected ENOSPC")),
        },
        Err(e) => bad.push(format!("open /dev/full O_WRONLY -> {e}")),
    }
    if bad.is_empty() {
        Seen::Ok("/dev/null, /dev/zero, /dev/full usable".into())
    } else {
        Seen::Broken(bad.join("; "))
    }
}

/// `dev-shm`: field 1: a POSIX semaphore file in /dev/shm (create, size, map, unlink).
pub(crate) fn dev_shm(a: &[String]) -> Seen {
    let marker = arg(a, 2);
    // What sem_open(3) does: create, size, map and unlink a file in /dev/shm.
    let path = format!("/dev/shm/sem.{marker}");
    let fd = match sys::open(&path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600) {
        Ok(fd) => fd,
        Err(e) => return Seen::Broken(format!("open(/dev/shm/sem.*, O_CREAT) -> {e}")),
    };
    // Safety: fd is ours; 32 bytes is a sem_t.
    let r = unsafe { libc::ftruncate(fd.as_raw_fd(), 32) };
    let res = if r != 0 {
        Seen::Broken(format!("ftruncate(/dev/shm file) -> {}", Errno::last()))
    } else {
        // Safety: mapping 32 bytes of a file we just sized; unmapped at once.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                32,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if m == libc::MAP_FAILED {
            Seen::Broken(format!("mmap(/dev/shm file) -> {}", Errno::last()))
        } else {
            // Safety: `m` is the live 32-byte mapping from above.
            unsafe { libc::munmap(m, 32) };
            Seen::Ok("created, sized, mapped and removed a /dev/shm semaphore file".into())
        }
    };
    if let Err(e) = sys::unlink(&path) {
        return Seen::Broken(format!("unlink(/dev/shm/sem.*) -> {e}"));
    }
    res
}

/// `worktree-writable`: ordinary work inside the worktree.
pub(crate) fn worktree_writable(a: &[String]) -> Seen {
    let wt = &p(arg(a, 0));
    let f = wt.join("w1");
    let steps: Vec<(&str, Result<(), Errno>)> = vec![
        (
            "create+write",
            write_via(&f, libc::O_WRONLY | libc::O_CREAT),
        ),
        (
            "O_TRUNC",
            sys::open(&f, libc::O_WRONLY | libc::O_TRUNC, 0).map(|_| ()),
        ),
        ("truncate", sys::truncate(&f, 0)),
        ("chmod", sys::chmod(&f, 0o600)),
        ("mkdir", sys::mkdir(wt.join("d1"), 0o755)),
        ("symlink", sys::symlink("w1", wt.join("s1"))),
        ("rename same dir", sys::rename(wt.join("s1"), wt.join("s2"))),
        ("unlink", sys::unlink(wt.join("s2"))),
        ("rmdir", sys::rmdir(wt.join("d1"))),
        (
            "mkfifo",
            sys::mknod(wt.join("fifo1"), libc::S_IFIFO | 0o644, 0),
        ),
        ("unlink", sys::unlink(&f)),
    ];
    let bad: Vec<String> = steps
        .into_iter()
        .filter_map(|(w, r)| r.err().map(|e| format!("{w} -> {e}")))
        .collect();
    if bad.is_empty() {
        Seen::Ok(
            "create, O_TRUNC, truncate, chmod, mkdir, symlink, rename, unlink, rmdir, mkfifo in wt"
                .into(),
        )
    } else {
        Seen::Broken(bad.join("; "))
    }
}

/// `rename-inside`: field 8: mkdir d && touch f && mv f d/ (and a link) inside.
pub(crate) fn rename_inside(a: &[String]) -> Seen {
    let wt = &p(arg(a, 0));
    // Field case 8: `mkdir d && touch f && mv f d/` inside the worktree.
    let steps: Vec<(&str, Result<(), Errno>)> = vec![
        ("mkdir d", sys::mkdir(wt.join("d"), 0o755)),
        (
            "touch f2",
            write_via(&wt.join("f2"), libc::O_WRONLY | libc::O_CREAT),
        ),
        ("mv f2 d/", sys::rename(wt.join("f2"), wt.join("d/f2"))),
        ("ln d/f2 f3", sys::link(wt.join("d/f2"), wt.join("f3"))),
        ("mv d/f2 f4", sys::rename(wt.join("d/f2"), wt.join("f4"))),
    ];
    let bad: Vec<String> = steps
        .into_iter()
        .filter_map(|(w, r)| r.err().map(|e| format!("{w} -> {e}")))
        .collect();
    if bad.is_empty() {
        Seen::Ok("renames and links across directories inside wt work".into())
    } else {
        Seen::Broken(bad.join("; "))
    }
}

/// `core-dump`: crash with the cwd outside: no core file there.
pub(crate) fn core_dump(a: &[String]) -> Seen {
    let out = &p(arg(a, 1));
    if let Err(e) = sys::chdir(out) {
        return Seen::Broken(format!("chdir(outside) -> {e}"));
    }
    match sys::fork() {
        Err(e) => Seen::Broken(format!("fork -> {e}")),
        Ok(0) => {
            let lim = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            // Safety: plain calls in a forked single-threaded child that then crashes.
            unsafe {
                libc::setrlimit(libc::RLIMIT_CORE, &lim);
                libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
                libc::signal(libc::SIGSEGV, libc::SIG_DFL);
                libc::raise(libc::SIGSEGV);
            }
            sys::exit_now(0)
        }
        Ok(pid) => {
            let mut st = 0;
            // Safety: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            let dumped = libc::WIFSIGNALED(st) && libc::WCOREDUMP(st);
            if dumped {
                Seen::Escaped("a crash with cwd outside dumped core".into())
            } else {
                Seen::Blocked(
                    "a crash with cwd outside left no core (checked from outside too)".into(),
                )
            }
        }
    }
}
