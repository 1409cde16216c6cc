//! Steps 1-6 of the namespace backends ([`super`]'s module docs), run by process A inside
//! the new namespaces: the id maps, private propagation, the fresh `/proc`, the minimal
//! `/dev` (with [`crate::devpts`]), the writable binds, the layers ([`crate::spec::Layers`]), and the
//! read-only remount of everything else.
//!
//! - Entry point: [`build`], which says which [`NsStep`] failed.
//! - Never: follow a symlink to a mount source or target (each is re-opened here without
//!   following symlinks and checked against the descriptor opened before the clone), or leave
//!   a mount of the writable set read-only / one outside it read-write without failing.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::sys::{cstr, mount, write_file};
use super::Setup;
use crate::paths;
use crate::secretpaths::Cover;

/// Where setting up the namespace failed, for the message, and whether `auto` may choose
/// again without namespaces: only the namespaces' own making ([`NsStep::IdMaps`],
/// [`NsStep::Namespace`]) may say "user namespaces unusable". Every later mount
/// ([`NsStep::Mounts`]) addresses paths the caller or the command chose (the writable set,
/// git's layers, the package caches): a failure there fails the run, never changes its
/// backend (a command that can make it fail would otherwise turn every later run into
/// Landlock alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NsStep {
    /// Writing `/proc/self/uid_map`, `gid_map` or `setgroups`.
    IdMaps,
    /// Steps 2-4: private propagation, the namespace's own `/proc` and `/dev`.
    Namespace,
    /// Steps 5-6: the writable binds, the layers, the overlays, the covers, the read-only
    /// remount, entering the working directory again.
    Mounts,
}

fn fd_path(fd: RawFd) -> String {
    format!("/proc/self/fd/{fd}")
}

/// Steps 1-6 of the module docs, run by process A. Returns the step that failed.
pub(super) fn build(plan: &Setup<'_>) -> Result<(), (NsStep, io::Error)> {
    let maps = || -> io::Result<()> {
        write_file("/proc/self/setgroups", "deny")?;
        write_file("/proc/self/uid_map", &format!("{0} {0} 1", plan.uid))?;
        write_file("/proc/self/gid_map", &format!("{0} {0} 1", plan.gid))
    };
    if !plan.full_map {
        maps().map_err(|e| (NsStep::IdMaps, e))?;
    }
    crate::phases::mark("maps");
    // Without a name it could not be entered again (the supervisor refuses such a run first).
    // A failure here is the run's, not the namespaces': a process of an earlier run can
    // remove the directory at will, and must not make `auto` choose a weaker backend.
    let cwd = std::env::current_dir().map_err(|e| (NsStep::Mounts, e))?;
    let keep_rw = namespace_mounts(plan).map_err(|e| (NsStep::Namespace, e))?;
    crate::phases::mark("proc_dev");
    mounts(plan, keep_rw).map_err(|e| (NsStep::Mounts, e))?;
    // The working directory still points into the mount as it was before the binds:
    // resolve it again so relative paths see the new (read-write or read-only) mounts. One
    // that cannot be entered now must not be kept: it is the host's directory beneath a mount
    // that replaced it (a secret location's cover, the host's /dev under the new one), and
    // relative paths would read what the mount hides.
    if let Err(e) = std::env::set_current_dir(&cwd) {
        eprintln!(
            "shofer-sandbox: the working directory {} cannot be entered inside the sandbox ({e}): it lies in a hidden secret location or a directory the sandbox replaces; run from another directory",
            cwd.display()
        );
        return Err((NsStep::Mounts, e));
    }
    Ok(())
}

/// Steps 2-4: what makes the namespaces usable at all, on paths nobody but the host chose.
/// Returns the mount points to keep writable so far.
fn namespace_mounts(plan: &Setup<'_>) -> io::Result<Vec<PathBuf>> {
    mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;

    // Step 4 first: while the host's /proc is still fully visible, the kernel allows a new
    // proc mount in this user namespace.
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    for sub in ["sys", "sysrq-trigger", "irq", "bus"] {
        let p = format!("/proc/{sub}");
        if Path::new(&p).exists() {
            mount(Some(&p), &p, None, libc::MS_BIND | libc::MS_REC, None)?;
        }
    }

    // Step 3: the minimal /dev. Descriptors opened before the clone name mounts of the
    // host's mount namespace, which cannot be bind sources here: open the nodes again in
    // this namespace while the host's /dev is still visible.
    let terminal = crate::devpts::caller_terminal();
    let mut devices = Vec::new();
    for (name, writable) in &plan.devices {
        if let Ok(fd) = paths::open_following(Path::new(&format!("/dev/{name}"))) {
            devices.push((name.clone(), fd, *writable));
        }
    }
    mount(
        Some("tmpfs"),
        "/dev",
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755"),
    )?;
    for (name, fd, _) in &devices {
        let target = format!("/dev/{name}");
        if paths::kind(fd)? == paths::Kind::Dir {
            std::fs::create_dir(&target)?;
        } else {
            std::fs::File::create(&target)?;
        }
        mount(
            Some(&fd_path(fd.as_raw_fd())),
            &target,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )?;
    }
    // A new devpts instance, as bubblewrap's --dev does: the host's /dev/ptmx cannot find its
    // devpts from a bind mount (the kernel looks for "pts" beside the ptmx node), so new ptys
    // come from here, and the caller's own terminal keeps its name (see devpts).
    std::fs::create_dir("/dev/pts")?;
    // Kept open by process A for the whole run: it exits (or execs nothing) with them.
    std::mem::forget(crate::devpts::mount_private(terminal)?);
    std::fs::create_dir("/dev/shm")?;
    mount(
        Some("tmpfs"),
        "/dev/shm",
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=1777"),
    )?;
    // The IPC namespace's own POSIX message queues (mq_overview(7)).
    std::fs::create_dir("/dev/mqueue")?;
    mount(
        Some("mqueue"),
        "/dev/mqueue",
        Some("mqueue"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, format!("/dev/{link}"))?;
    }
    let mut keep_rw: Vec<PathBuf> = ["/proc", "/dev/shm", "/dev/mqueue", "/dev/pts"]
        .map(PathBuf::from)
        .into();
    for (name, _, writable) in &devices {
        if *writable {
            keep_rw.push(Path::new("/dev").join(name));
        }
    }
    Ok(keep_rw)
}

/// Steps 5-6: the writable binds (source and target pinned by descriptor), the layers, the
/// overlays, the covers, then everything else read-only except `keep_rw`.
fn mounts(plan: &Setup<'_>, mut keep_rw: Vec<PathBuf>) -> io::Result<()> {
    for bind in &plan.binds {
        // Re-opened in this namespace without following symlinks, and checked to be the very
        // object opened before the clone: a swap in between fails closed.
        let fd = paths::open_nofollow(bind.path)?;
        if crate::paths::identity(&fd)? != crate::paths::identity(&bind.fd.try_clone_to_owned()?)? {
            eprintln!(
                "shofer-sandbox: {} changed while the sandbox was set up",
                bind.path.display()
            );
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
        let p = fd_path(fd.as_raw_fd());
        mount(Some(&p), &p, None, libc::MS_BIND | libc::MS_REC, None)?;
        keep_rw.push(bind.path.to_path_buf());
    }
    crate::phases::mark("binds");

    // Step 5b: the layers (crate::spec::Layers; git's: a main worktree's `.git`, pinned so it
    // cannot be renamed away; a linked worktree's common dir, for packed-refs; read-only binds
    // over control files on top). A mount point can be neither written (step 6 makes it
    // read-only), nor replaced by a rename, nor removed (EBUSY). Opened again here without
    // following symlinks: a path swapped for a symlink fails closed.
    for (path, writable) in &plan.layers {
        let fd = match paths::open_nofollow(path) {
            Ok(fd) => fd,
            // Absent read-only: nothing there to keep (git's: no placeholder, git does not
            // read it).
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && !writable => continue,
            Err(e) => {
                eprintln!("shofer-sandbox: {}: {e}", path.display());
                return Err(e);
            }
        };
        let p = fd_path(fd.as_raw_fd());
        mount(Some(&p), &p, None, libc::MS_BIND | libc::MS_REC, None)?;
        if *writable {
            keep_rw.push(path.to_path_buf());
        }
    }

    // Step 5c: the replacement (git's private view, crate::git::view), then the redirect
    // (git's object quarantine, crate::git::quarantine), inside the replacement when it lies
    // there. Every source opened before any mount, and checked to be a directory; the
    // original's bind is read-only in step 6.
    let store = match &plan.redirect {
        Some(r) => Some(paths::open_nofollow(&r.over)?),
        None => None,
    };
    if let Some((over, by)) = &plan.replace {
        let target = paths::open_nofollow(over)?;
        let source = paths::open_nofollow(by)?;
        for (fd, path) in [(&target, over), (&source, by)] {
            if paths::kind(fd)? != paths::Kind::Dir {
                eprintln!("shofer-sandbox: {} is not a directory", path.display());
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
        }
        let (source, target) = (fd_path(source.as_raw_fd()), fd_path(target.as_raw_fd()));
        mount(Some(&source), &target, None, libc::MS_BIND, None)?;
        // The binds beneath it (a linked worktree's gitdir) are out of reach now.
        keep_rw.retain(|p| !p.starts_with(over));
        keep_rw.push(over.to_path_buf());
    }
    if let (
        Some(store),
        Some(crate::spec::Redirect {
            over: objects,
            by: dir,
            original_at: store_mount,
        }),
    ) = (store, &plan.redirect)
    {
        let q = paths::open_nofollow(dir)?;
        let mount_point = paths::open_nofollow(store_mount)?;
        for (fd, path) in [(&store, objects), (&q, dir), (&mount_point, store_mount)] {
            if paths::kind(fd)? != paths::Kind::Dir {
                eprintln!("shofer-sandbox: {} is not a directory", path.display());
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
        }
        // Targets by descriptor too (the store's descriptor keeps naming the store itself
        // once the quarantine covers its path). The store on the mount point first, then the
        // quarantine with it (recursive: that bind is the only mount under the quarantine)
        // over what is at the store's path now (the replacement's directory, if any).
        let (q, store, mount_point) = (
            fd_path(q.as_raw_fd()),
            fd_path(store.as_raw_fd()),
            fd_path(mount_point.as_raw_fd()),
        );
        mount(Some(&store), &mount_point, None, libc::MS_BIND, None)?;
        let inside = match plan.replace {
            Some(_) => Some(paths::open_nofollow(objects)?),
            None => None,
        };
        let target = inside.as_ref().map_or(store, |fd| fd_path(fd.as_raw_fd()));
        mount(Some(&q), &target, None, libc::MS_BIND | libc::MS_REC, None)?;
        keep_rw.push(objects.to_path_buf());
    }

    crate::phases::mark("layers");
    // Step 5c': the overlays (the package caches', crate::caches), writable.
    for overlay in &plan.overlays {
        overlay_mount(overlay)?;
        keep_rw.push(overlay.target.clone());
    }
    crate::phases::mark("overlays");

    // Step 5d: the secret locations' covers; step 6 makes them read-only with the rest.
    covers(&plan.covers)?;
    crate::phases::mark("covers");

    // Step 6: everything else read-only: the whole tree at once, then the writable set back.
    if readonly_tree(&keep_rw)? {
        return Ok(());
    }
    // Before Linux 5.12: one remount per mount point (as bytes: a mount point misread would
    // stay writable).
    let mountinfo = shofer_sys::proc::read_whole("/proc/self/mountinfo")?;
    let mut done: Vec<PathBuf> = Vec::new();
    for (point, flags) in parse_mountinfo(&mountinfo) {
        if keep_rw.contains(&point) || done.contains(&point) {
            continue;
        }
        done.push(point.clone());
        match mount(
            None,
            &point,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            None,
        ) {
            Ok(()) => {}
            // A mount point we cannot even look up is not reachable by the command either
            // (bubblewrap makes the same call).
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::ENOENT)) => {}
            // Beneath the replacement, a path that is no mount point any more: the mount
            // there is covered, out of reach.
            Err(e)
                if e.raw_os_error() == Some(libc::EINVAL)
                    && plan
                        .replace
                        .as_ref()
                        .is_some_and(|(over, _)| point.starts_with(over)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Step 5d: performs `steps` in order ([`Cover`]). Each target is opened without following
/// symlinks (a location swapped for one fails closed); one inside a mirrored directory's
/// tmpfs is made there first; what [`Cover::Reveal`] brings back is opened before any cover,
/// while the host's entry is still in view.
fn covers(steps: &[Cover]) -> io::Result<()> {
    if steps.is_empty() {
        return Ok(());
    }
    let mut revealed = Vec::new();
    for step in steps {
        if let Cover::Reveal(p) = step {
            revealed.push((p, paths::open_nofollow(p)?));
        }
    }
    // Step 3's node: the host's /dev/null, bound. The first file's cover (made `nodev`) and the
    // first empty directory's tmpfs are the sources of the others: a bind copies its source's
    // flags, and shares its superblock (one tmpfs, however many directories; fewer mounts to
    // make, and to tear down when the run ends).
    let null = paths::open_following(Path::new("/dev/null"))?;
    let mut file_cover: Option<std::os::fd::OwnedFd> = None;
    let mut empty_dir: Option<std::os::fd::OwnedFd> = None;
    let mut filling: Vec<&Path> = Vec::new();
    let made_here = |p: &Path, filling: &[&Path]| p.parent().is_some_and(|d| filling.contains(&d));
    let file_point = |p: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p)
            .map(drop)
    };
    for step in steps {
        match step {
            Cover::File(p) => {
                if made_here(p, &filling) {
                    file_point(p)?;
                }
                let target = paths::open_nofollow(p)?;
                bind(file_cover.as_ref().unwrap_or(&null), &target, libc::MS_BIND)?;
                if file_cover.is_none() {
                    // The new mount (the descriptor above still names what it covers).
                    let cover = paths::open_nofollow(p)?;
                    remount_nodev(&fd_path(cover.as_raw_fd()), &cover)?;
                    file_cover = Some(cover);
                }
            }
            Cover::Dir { path, mirrored } => {
                if made_here(path, &filling) {
                    std::fs::create_dir(path)?;
                }
                let target = paths::open_nofollow(path)?;
                if paths::kind(&target)? != paths::Kind::Dir {
                    return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
                }
                if let (Some(empty), false) = (&empty_dir, *mirrored) {
                    bind(empty, &target, libc::MS_BIND)?;
                    continue;
                }
                // Its final mode at once, unless entries are to be made in it (the seal's).
                mount(
                    Some("tmpfs"),
                    fd_path(target.as_raw_fd()),
                    Some("tmpfs"),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    Some(if *mirrored { "mode=0700" } else { "mode=0000" }),
                )?;
                if *mirrored {
                    filling.push(path);
                } else {
                    empty_dir = Some(paths::open_nofollow(path)?);
                }
            }
            Cover::Reveal(p) => {
                let Some((_, source)) = revealed.iter().find(|(r, _)| *r == p) else {
                    continue;
                };
                if paths::kind(source)? == paths::Kind::Dir {
                    std::fs::create_dir(p)?;
                } else {
                    file_point(p)?;
                }
                bind(
                    source,
                    &paths::open_nofollow(p)?,
                    libc::MS_BIND | libc::MS_REC,
                )?;
            }
            Cover::Seal { path, mode } if filling.contains(&path.as_path()) => {
                paths::chmod_pinned(&paths::open_nofollow(path)?, *mode)?;
                filling.retain(|f| f != path);
            }
            Cover::Seal { .. } => {}
        }
    }
    Ok(())
}

/// Mounts `o` ([`crate::spec::Overlay`]): every layer opened in this namespace without
/// following a symlink (a path swapped for one fails closed) and named to overlayfs through
/// its descriptor, so neither a swap after the check nor a `,` or `:` in a path changes what
/// is mounted; the mount point is the lower layer's descriptor too.
fn overlay_mount(o: &crate::spec::Overlay) -> io::Result<()> {
    // Held open until the mount is made (closed when this returns).
    let mut held = Vec::new();
    let mut fds = Vec::new();
    for path in [&o.target, &o.upper, &o.work] {
        let fd = paths::open_nofollow(path)?;
        if paths::kind(&fd)? != paths::Kind::Dir {
            eprintln!("shofer-sandbox: {} is not a directory", path.display());
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        fds.push(fd_path(fd.as_raw_fd()));
        held.push(fd);
    }
    // `userxattr`: overlayfs keeps its own attributes under `user.overlay.` and refuses the
    // command's setting any (without it, they would be stored in the upper as the command
    // wrote them, for a later option to interpret); the features that read them stay off,
    // explicitly (Linux 5.11+ accepts these in a user namespace; `redirect_dir=off`
    // conflicts with `userxattr`, `nofollow` is its only companion).
    let options = format!(
        "lowerdir={},upperdir={},workdir={},userxattr,redirect_dir=nofollow,metacopy=off,index=off",
        fds[0], fds[1], fds[2]
    );
    let made = mount(
        Some("overlay"),
        &fds[0],
        Some("overlay"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&options),
    );
    if let Err(e) = &made {
        eprintln!(
            "shofer-sandbox: the package cache overlay over {} (upper {}): {e} (--no-package-caches runs without it)",
            o.target.display(),
            o.upper.display()
        );
    }
    made
}

/// Binds the object `source` names over the one `target` names, both addressed through their
/// descriptors; `flags` is `MS_BIND`, with `MS_REC` or not.
fn bind(
    source: &std::os::fd::OwnedFd,
    target: &std::os::fd::OwnedFd,
    flags: libc::c_ulong,
) -> io::Result<()> {
    mount(
        Some(&fd_path(source.as_raw_fd())),
        fd_path(target.as_raw_fd()),
        None,
        flags,
        None,
    )
}

/// Remounts the bind mount at `target` (`fd` its root) read-only, `nodev`, `nosuid` and
/// `noexec`, keeping its atime flags (the kernel refuses to change flags a more privileged
/// namespace locked, and keeps those it set as they are).
fn remount_nodev(target: &str, fd: &std::os::fd::OwnedFd) -> io::Result<()> {
    use rustix::fs::StatVfsMountFlags as F;
    let have = rustix::fs::fstatvfs(fd)?.f_flag;
    let mut flags = libc::MS_REMOUNT
        | libc::MS_BIND
        | libc::MS_RDONLY
        | libc::MS_NODEV
        | libc::MS_NOSUID
        | libc::MS_NOEXEC;
    for (f, ms) in [
        (F::NOATIME, libc::MS_NOATIME),
        (F::NODIRATIME, libc::MS_NODIRATIME),
        (F::RELATIME, libc::MS_RELATIME),
    ] {
        if have.contains(f) {
            flags |= ms;
        }
    }
    mount(None, target, None, flags, None)
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// mount_setattr(2) (Linux 5.12) on `path` with `flags` (`AT_RECURSIVE`…), setting or
/// clearing `MOUNT_ATTR_RDONLY`. Raw syscall: neither libc nor rustix wraps it in the
/// versions we use.
fn set_readonly(path: &Path, flags: libc::c_uint, readonly: bool) -> io::Result<()> {
    let path = cstr(path.as_os_str().as_bytes())?;
    let attr = MountAttr {
        attr_set: if readonly { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: if readonly { 0 } else { MOUNT_ATTR_RDONLY },
        propagation: 0,
        userns_fd: 0,
    };
    // Raw syscall: rustix lists mount_setattr as not implemented.
    // Safety: a NUL-terminated path and a mount_attr of the size we pass, alive for the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes every mount read-only with one `mount_setattr(AT_RECURSIVE)` on `/`, then the
/// mounts at `keep_rw` (the top one at each path, not their submounts) read-write again.
/// Returns false, changing nothing, on a kernel without mount_setattr (before 5.12).
///
/// Locked flags are no obstacle: setting read-only only adds a restriction, and clearing it
/// is refused (`EPERM`) only where the host made the mount read-only, which then stays so.
fn readonly_tree(keep_rw: &[PathBuf]) -> io::Result<bool> {
    match set_readonly(Path::new("/"), libc::AT_RECURSIVE as libc::c_uint, true) {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) => {
            return Ok(false)
        }
        Err(e) => {
            eprintln!("shofer-sandbox: mount_setattr /: {e}");
            return Err(e);
        }
    }
    for path in keep_rw {
        match set_readonly(path, libc::AT_SYMLINK_NOFOLLOW as libc::c_uint, false) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => {
                eprintln!("shofer-sandbox: mount_setattr {}: {e}", path.display());
                return Err(e);
            }
        }
    }
    Ok(true)
}

/// (mount point, flags to keep) for each line of `/proc/self/mountinfo`, in order; the kept
/// flags are the per-mount options the kernel may have locked.
fn parse_mountinfo(text: &[u8]) -> Vec<(PathBuf, libc::c_ulong)> {
    shofer_sys::proc::parse_mountinfo(text)
        .into_iter()
        .map(|m| {
            let mut flags = 0;
            for opt in m.options.split(',') {
                flags |= match opt {
                    "nosuid" => libc::MS_NOSUID,
                    "nodev" => libc::MS_NODEV,
                    "noexec" => libc::MS_NOEXEC,
                    "noatime" => libc::MS_NOATIME,
                    "nodiratime" => libc::MS_NODIRATIME,
                    "relatime" => libc::MS_RELATIME,
                    "strictatime" => libc::MS_STRICTATIME,
                    _ => 0,
                };
            }
            (m.point, flags)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_points_are_unescaped_and_locked_flags_kept() {
        let text = b"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                    28 27 0:25 / /mnt/a\\040b ro,nosuid,nodev,relatime - tmpfs x ro\n";
        let parsed = parse_mountinfo(text);
        assert_eq!(parsed[0], (PathBuf::from("/"), libc::MS_RELATIME));
        assert_eq!(parsed[1].0, Path::new("/mnt/a b"));
        assert_eq!(
            parsed[1].1,
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RELATIME
        );
    }
}
