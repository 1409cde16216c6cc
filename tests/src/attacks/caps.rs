//! Inside the sandbox — privileges and mounts: capability sets, no_new_privs, setuid programs,
//! open_by_handle_at, namespaces, mounts and pivot_root.

use super::{arg, contain, p, write_via, Seen, RESULT_PREFIX};
use crate::sys::{self, Errno};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// `mount-bind-outside`: bind-mount an outside dir into the worktree and write.
pub(crate) fn mount_bind_outside(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let out = p(arg(a, 1));
    mount_bind(&wt, &out, arg(a, 2))
}

/// `root-chown-foreign`: as root: chown a file owned by uid 4242 outside (CAP_CHOWN).
pub(crate) fn root_chown_foreign(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    contain(
        "chown(outside/foreign [uid 4242], 0, 0)",
        sys::chown(out.join("foreign"), 0, 0),
    )
}

/// `root-dac-read`: as root: read a 0600 file of uid 4242 (CAP_DAC_OVERRIDE).
pub(crate) fn root_dac_read(a: &[String]) -> Seen {
    let out = p(arg(a, 1));
    contain(
        "open(outside/secret [uid 4242, 0600], O_RDONLY)",
        sys::open(out.join("secret"), libc::O_RDONLY, 0),
    )
}

/// `sethostname-uts`: unshare(CLONE_NEWUTS), then sethostname in that private namespace.
pub(crate) fn sethostname_uts(_: &[String]) -> Seen {
    // Only inside a fresh UTS namespace, and only if creating it worked.
    // Safety: plain flag argument.
    match sys::check(unsafe { libc::unshare(libc::CLONE_NEWUTS) } as libc::c_long) {
        Err(e) => Seen::Blocked(format!(
            "unshare(CLONE_NEWUTS) -> {e} (sethostname not tried)"
        )),
        Ok(_) => {
            let name = b"shofer-containment";
            // Safety: `name` is valid for its length; this namespace is private.
            let r = sys::check(
                unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) } as libc::c_long,
            );
            match r {
                Ok(_) => Seen::Escaped(
                    "unshare(CLONE_NEWUTS) and sethostname succeeded: CAP_SYS_ADMIN kept".into(),
                ),
                Err(e) => Seen::Escaped(format!(
                    "unshare(CLONE_NEWUTS) succeeded (CAP_SYS_ADMIN kept); sethostname -> {e}"
                )),
            }
        }
    }
}

/// `open-tree-clone`: unshare, open_tree(CLONE) the outside tree, clear RDONLY, write through the
/// detached mount.
pub(crate) fn open_tree_clone(a: &[String]) -> Seen {
    let out = &p(arg(a, 1));
    // A detached clone of the outside tree (new mount API), written through its fd.
    let mut steps = Vec::new();
    match enter_userns() {
        Ok(()) => steps.push("new user+mount namespace".to_string()),
        Err(e) => steps.push(e),
    }
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let c = sys::cstr(out);
    // Safety: valid C string; flags as documented in open_tree(2).
    let fd = unsafe {
        libc::syscall(
            428,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if fd < 0 {
        let e = Errno::last();
        steps.push(format!("open_tree(outside, CLONE) -> {e}"));
        return match write_via(&out.join("existing"), libc::O_WRONLY | libc::O_APPEND) {
            Ok(()) => Seen::Escaped(format!("{}; but wrote outside/existing", steps.join("; "))),
            Err(w) => Seen::Blocked(format!(
                "{}; write outside/existing -> {w}",
                steps.join("; ")
            )),
        };
    }
    let fd = fd as i32;
    steps.push("open_tree(outside, CLONE) ok".into());
    // Try to clear a read-only attribute on the clone (mount_setattr, Linux 5.12).
    #[repr(C)]
    struct MountAttr {
        set: u64,
        clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let attr = MountAttr {
        set: 0,
        clr: 1,
        propagation: 0,
        userns_fd: 0,
    };
    let empty = sys::cstr("");
    // Safety: `attr` is a valid mount_attr of the size passed; AT_EMPTY_PATH on our fd.
    let r = unsafe {
        libc::syscall(
            442,
            fd,
            empty.as_ptr(),
            libc::AT_EMPTY_PATH | AT_RECURSIVE as i32,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    steps.push(format!(
        "mount_setattr(clear RDONLY) -> {}",
        if r == 0 {
            "ok".into()
        } else {
            Errno::last().name()
        }
    ));
    let w = sys::openat(fd, "existing", libc::O_WRONLY | libc::O_APPEND, 0)
        .and_then(|f| sys::write(f.as_raw_fd(), b"PWNED via open_tree\n"));
    let c2 = sys::openat(fd, "new11", libc::O_WRONLY | libc::O_CREAT, 0o644);
    // Safety: closing our own descriptor.
    unsafe { libc::close(fd) };
    match (w, c2) {
        (Err(e1), Err(e2)) => Seen::Blocked(format!(
            "{}; write through the clone -> {e1}; create -> {e2}",
            steps.join("; ")
        )),
        _ => Seen::Escaped(format!(
            "{}; wrote outside through a detached mount clone",
            steps.join("; ")
        )),
    }
}

fn mount_bind(wt: &Path, out: &Path, host_mntns: &str) -> Seen {
    let mnt = wt.join("mnt");
    let _ = sys::mkdir(&mnt, 0o755);
    let (s, t) = (sys::cstr(out), sys::cstr(&mnt));
    // Safety: valid C strings; NULL fstype and data are allowed with MS_BIND.
    let r = unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Seen::Blocked(format!(
            "mount(outside, wt/mnt, MS_BIND) -> {}",
            Errno::last()
        ));
    }
    let my_ns = std::fs::read_link("/proc/self/ns/mnt")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    let w = write_via(&mnt.join("existing"), libc::O_WRONLY | libc::O_APPEND);
    // Safety: valid C string.
    unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    if my_ns == host_mntns {
        return Seen::Escaped("bind mount succeeded in the host's mount namespace".into());
    }
    match w {
        Ok(()) => Seen::Escaped("bind-mounted outside into wt and wrote through it".into()),
        Err(e) => Seen::Blocked(format!(
            "bind mount in a private mount namespace worked, write through it -> {e}"
        )),
    }
}

/// Becomes root of a new user namespace with a mount namespace (uid/gid maps written).
pub(super) fn enter_userns() -> Result<(), String> {
    let (u, g) = sys::ids();
    // Safety: plain flags.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Err(format!(
            "unshare(CLONE_NEWUSER|CLONE_NEWNS) -> {}",
            Errno::last()
        ));
    }
    let _ = std::fs::write("/proc/self/setgroups", "deny");
    std::fs::write("/proc/self/uid_map", format!("0 {u} 1"))
        .map_err(|e| format!("uid_map -> {e}"))?;
    std::fs::write("/proc/self/gid_map", format!("0 {g} 1"))
        .map_err(|e| format!("gid_map -> {e}"))?;
    let root = sys::cstr("/");
    // Safety: valid C string; propagation change only.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(format!("make / private -> {}", Errno::last()));
    }
    Ok(())
}

/// `unshare-remount`: unshare(user+mount ns), bind+remount rw an outside dir, write.
pub(crate) fn unshare_remount(a: &[String]) -> Seen {
    let out = &p(arg(a, 1));
    let mut steps = Vec::new();
    match enter_userns() {
        Err(e) => steps.push(e),
        Ok(()) => {
            steps.push("new user+mount namespace".into());
            let o = sys::cstr(out);
            // Safety: valid C strings; bind then remount read-write.
            let r = unsafe {
                libc::mount(
                    o.as_ptr(),
                    o.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                )
            };
            steps.push(format!(
                "bind outside on itself -> {}",
                if r == 0 {
                    "ok".into()
                } else {
                    Errno::last().name()
                }
            ));
            // Safety: as above.
            let r = unsafe {
                libc::mount(
                    std::ptr::null(),
                    o.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REMOUNT,
                    std::ptr::null(),
                )
            };
            steps.push(format!(
                "remount rw -> {}",
                if r == 0 {
                    "ok".into()
                } else {
                    Errno::last().name()
                }
            ));
        }
    }
    match write_via(&out.join("existing"), libc::O_WRONLY | libc::O_APPEND) {
        Ok(()) => Seen::Escaped(format!("{}; wrote outside/existing", steps.join("; "))),
        Err(e) => Seen::Blocked(format!(
            "{}; write outside/existing -> {e}",
            steps.join("; ")
        )),
    }
}

/// `pivot-root`: unshare, pivot_root into the worktree, write outside via the old root.
pub(crate) fn pivot_root(a: &[String]) -> Seen {
    let (wt, out) = (&p(arg(a, 0)), &p(arg(a, 1)));
    if let Err(e) = enter_userns() {
        return match write_via(&out.join("existing"), libc::O_WRONLY | libc::O_APPEND) {
            Ok(()) => Seen::Escaped(format!("{e}; but wrote outside/existing")),
            Err(w) => Seen::Blocked(format!("{e}; write outside -> {w}")),
        };
    }
    let newroot = wt.join("newroot");
    let _ = sys::mkdir(&newroot, 0o755);
    let n = sys::cstr(&newroot);
    // Safety: valid C strings.
    if unsafe {
        libc::mount(
            n.as_ptr(),
            n.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    } != 0
    {
        return Seen::Blocked(format!(
            "in a new userns: bind newroot -> {} (pivot_root not reached)",
            Errno::last()
        ));
    }
    let _ = sys::mkdir(newroot.join("old"), 0o755);
    let o = sys::cstr(newroot.join("old"));
    // Safety: valid C strings for new_root and put_old.
    let r = sys::check(unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) });
    if let Err(e) = r {
        return Seen::Blocked(format!("pivot_root(wt/newroot, wt/newroot/old) -> {e}"));
    }
    let _ = sys::chdir("/");
    let via_old = PathBuf::from("/old")
        .join(out.strip_prefix("/").unwrap_or(out))
        .join("existing");
    match write_via(&via_old, libc::O_WRONLY | libc::O_APPEND) {
        Ok(()) => {
            Seen::Escaped("pivot_root worked and outside/existing was written through /old".into())
        }
        Err(e) => Seen::Blocked(format!(
            "pivot_root worked (private namespace); write via /old -> {e}"
        )),
    }
}

fn status_field(name: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{name}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// `report-creds`: prints the effective uid and capability sets (run through the setuid copy by
/// `suid-exec`).
pub(crate) fn report_creds(_: &[String]) -> Seen {
    let (u, _) = sys::ids();
    Seen::Ok(format!(
        "euid={u} CapEff={} CapPrm={}",
        status_field("CapEff"),
        status_field("CapPrm")
    ))
}

/// `setid-file <wt> <out> <dir>`: in `dir` (the worktree when empty; made if missing), every
/// way to leave a set-user-ID or set-group-ID file — `chmod` u+s and g+s, `fchmod`,
/// `fchmodat`, `open(O_CREAT)` with mode 04755 / 02755, `creat` with 04755, `mknod(S_IFREG|04755)` —
/// then a look at what was left. Escaped if any file there has either bit.
pub(crate) fn setid_file(a: &[String]) -> Seen {
    let dir = match arg(a, 2) {
        "" => p(arg(a, 0)),
        d => p(d),
    };
    // Safety: plain integer; no umask hides a bit the kernel would have set.
    unsafe { libc::umask(0) };
    if let Err(e) = sys::mkdir(&dir, 0o755) {
        if e.0 != libc::EEXIST {
            return Seen::Broken(format!("mkdir({}) -> {e}", dir.display()));
        }
    }
    let plain = |name: &str| -> Result<OwnedFd, String> {
        sys::open(
            dir.join(name),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o755,
        )
        .map_err(|e| format!("open({name}, O_CREAT, 0755) -> {e}"))
    };
    let mut tries: Vec<(String, Result<(), Errno>)> = Vec::new();
    for (name, mode) in [("chmod-u", 0o4755), ("chmod-g", 0o2755)] {
        if let Err(e) = plain(name) {
            return Seen::Broken(e);
        }
        tries.push((
            format!("chmod({name}, {mode:o})"),
            sys::chmod(dir.join(name), mode),
        ));
    }
    match plain("fchmod-u") {
        Ok(fd) => tries.push((
            "fchmod(fchmod-u, 4755)".into(),
            sys::fchmod(fd.as_raw_fd(), 0o4755),
        )),
        Err(e) => return Seen::Broken(e),
    }
    if let Err(e) = plain("fchmodat-g") {
        return Seen::Broken(e);
    }
    tries.push((
        "fchmodat(fchmodat-g, 2755)".into(),
        sys::fchmodat(dir.join("fchmodat-g"), 0o2755),
    ));
    for (name, flags, mode) in [
        ("open-u", libc::O_CREAT | libc::O_WRONLY, 0o4755),
        ("open-g", libc::O_CREAT | libc::O_WRONLY, 0o2755),
    ] {
        tries.push((
            format!("open({name}, O_CREAT, {mode:o})"),
            sys::open(dir.join(name), flags | libc::O_CLOEXEC, mode).map(|_| ()),
        ));
    }
    tries.push((
        "creat(creat-u, 4755)".into(),
        sys::creat(dir.join("creat-u"), 0o4755).map(|_| ()),
    ));
    tries.push((
        "mknod(mknod-u, S_IFREG|4755)".into(),
        sys::mknod(dir.join("mknod-u"), libc::S_IFREG | 0o4755, 0),
    ));
    let left = setid_left(&dir);
    let said: Vec<String> = tries
        .iter()
        .map(|(w, r)| match r {
            Ok(()) => format!("{w} ok"),
            Err(e) => format!("{w} -> {e}"),
        })
        .collect();
    if left.is_empty() {
        Seen::Blocked(format!(
            "no set-ID file in {}: {}",
            dir.display(),
            said.join("; ")
        ))
    } else {
        Seen::Escaped(format!("{} ({})", left.join(", "), said.join("; ")))
    }
}

/// The files in `dir` with `S_ISUID` or `S_ISGID`, as `name mode`.
pub(crate) fn setid_left(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut left: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let m = e.path().symlink_metadata().ok()?;
            let mode = m.permissions().mode();
            (m.is_file() && mode & 0o6000 != 0)
                .then(|| format!("{} {mode:o}", e.file_name().to_string_lossy()))
        })
        .collect();
    left.sort();
    left
}

/// `suid-exec`: execs the setuid-root copy of the harness: no euid 0, no capabilities.
pub(crate) fn suid_exec(a: &[String]) -> Seen {
    let prog = arg(a, 2);
    let out = std::process::Command::new(prog)
        .args(["attack", "report-creds"])
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => return Seen::Broken(format!("exec {prog} -> {e}")),
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{RESULT_PREFIX}ok ")))
        .unwrap_or("")
        .to_string();
    if line.is_empty() {
        return Seen::Broken(format!("setuid program printed nothing usable: {text:?}"));
    }
    let (my_uid, _) = sys::ids();
    let euid_zero = line.contains("euid=0 ");
    let caps = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("CapEff="))
        .unwrap_or("");
    let caps_set = caps.chars().any(|c| c != '0');
    if (my_uid != 0 && euid_zero) || caps_set {
        Seen::Escaped(format!("setuid-root program ran with {line}"))
    } else {
        Seen::Blocked(format!("setuid-root program ran with {line}"))
    }
}

/// `caps-and-nnp`: no capabilities in any set, NoNewPrivs=1.
pub(crate) fn caps_and_nnp(a: &[String]) -> Seen {
    let root = arg(a, 2) == "root";
    let mut bad = Vec::new();
    let sets: &[&str] = if root {
        &["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
    } else {
        &["CapInh", "CapPrm", "CapEff", "CapAmb"]
    };
    for set in sets {
        let v = status_field(set);
        if v.chars().any(|c| c != '0') {
            bad.push(format!("{set}={v}"));
        }
    }
    let nnp = status_field("NoNewPrivs");
    if nnp != "1" {
        bad.push(format!("NoNewPrivs={nnp}"));
    }
    if bad.is_empty() {
        Seen::Blocked(format!(
            "capability sets {} are empty; NoNewPrivs=1",
            sets.join("/")
        ))
    } else {
        Seen::Escaped(bad.join(" "))
    }
}

/// `open-by-handle`: open_by_handle_at on an outside file (needs CAP_DAC_READ_SEARCH).
pub(crate) fn open_by_handle(a: &[String]) -> Seen {
    let ex = &p(arg(a, 1)).join("existing");
    #[repr(C)]
    struct Handle {
        bytes: u32,
        ty: i32,
        f: [u8; 128],
    }
    let mut h = Handle {
        bytes: 128,
        ty: 0,
        f: [0; 128],
    };
    let mut mount_id: libc::c_int = 0;
    let c = sys::cstr(ex);
    // Safety: `h` has room for 128 handle bytes as announced in `bytes`.
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            (&mut h as *mut Handle).cast(),
            &mut mount_id,
            0,
        )
    };
    if r != 0 {
        return Seen::Skip(format!("name_to_handle_at -> {}", Errno::last()));
    }
    let root = match sys::open("/", libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(fd) => fd,
        Err(e) => return Seen::Broken(format!("open / -> {e}")),
    };
    // Safety: `h` is the handle the kernel just filled.
    let fd = unsafe {
        libc::open_by_handle_at(
            root.as_raw_fd(),
            (&mut h as *mut Handle).cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd >= 0 {
        // Safety: we own the returned fd.
        drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
        Seen::Escaped("open_by_handle_at succeeded: CAP_DAC_READ_SEARCH kept".into())
    } else {
        Seen::Blocked(format!("open_by_handle_at -> {}", Errno::last()))
    }
}
