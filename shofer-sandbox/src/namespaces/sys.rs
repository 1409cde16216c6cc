//! The `mount(2)` call of the namespace backends, with its message.
//!
//! - Entry point: [`mount`] (plus [`cstr`] and [`write_file`] for the callers' paths and
//!   `/proc/self/*_map` files).
//! - A leaf: used by [`super::mounts`], [`super::probe`] and [`crate::devpts`], it imports
//!   none of them (devpts is itself used by the mount steps).
//! - Never called in the caller's own mount namespace: only after the clone (see
//!   [`super`]).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `path` as a C string; `EINVAL` for an interior NUL.
pub(crate) fn cstr(p: impl AsRef<[u8]>) -> io::Result<CString> {
    CString::new(p.as_ref().to_vec()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `mount(2)`; on failure says which target failed on stderr (the caller's, as every
/// shofer-sandbox message) before returning the raw error.
pub(crate) fn mount(
    src: Option<&str>,
    target: impl AsRef<Path>,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    use rustix::mount::{MountFlags, MountPropagationFlags};
    let target = target.as_ref();
    let src = src.map(cstr).transpose()?;
    let target_c = cstr(target.as_os_str().as_bytes())?;
    let fstype = fstype.map(cstr).transpose()?;
    let data = data.map(cstr).transpose()?;
    // Every MS_* flag fits the 32 bits of mount(2)'s `unsigned long` that the kernel reads.
    let bits = flags as libc::c_uint;
    let only_bind = flags & !libc::MS_REC == libc::MS_BIND;
    // rustix's `mount` takes a source and a type; the calls that pass NULL (binds, remounts,
    // propagation changes) have their own functions, which pass NULL as we did.
    let ret = match (&src, &fstype) {
        (Some(src), Some(fstype)) => rustix::mount::mount(
            src.as_c_str(),
            target_c.as_c_str(),
            fstype.as_c_str(),
            MountFlags::from_bits_retain(bits),
            data.as_deref(),
        ),
        (Some(src), None) if only_bind && data.is_none() => {
            if flags & libc::MS_REC != 0 {
                rustix::mount::mount_bind_recursive(src.as_c_str(), target_c.as_c_str())
            } else {
                rustix::mount::mount_bind(src.as_c_str(), target_c.as_c_str())
            }
        }
        // The data of a bind remount is not read: "" stands for NULL.
        (None, None) if flags & libc::MS_REMOUNT != 0 => rustix::mount::mount_remount(
            target_c.as_c_str(),
            MountFlags::from_bits_retain(bits & !(libc::MS_REMOUNT as libc::c_uint)),
            data.as_deref().unwrap_or(c""),
        ),
        (None, None) if data.is_none() => rustix::mount::mount_change(
            target_c.as_c_str(),
            MountPropagationFlags::from_bits_retain(bits),
        ),
        // No caller makes another combination.
        _ => Err(rustix::io::Errno::INVAL),
    };
    if let Err(e) = ret {
        let e = io::Error::from(e);
        if flags & libc::MS_REMOUNT == 0
            || !matches!(e.raw_os_error(), Some(libc::EACCES | libc::ENOENT))
        {
            eprintln!("shofer-sandbox: mount {}: {e}", target.display());
        }
        return Err(e);
    }
    Ok(())
}

/// Writes `content` to `path` (the `/proc/self` id-map files).
pub(crate) fn write_file(path: &str, content: &str) -> io::Result<()> {
    std::fs::write(path, content)
}
