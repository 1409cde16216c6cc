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

/// `path` as a C string; `EINVAL` for an interior NUL.
pub(crate) fn cstr(p: impl AsRef<[u8]>) -> io::Result<CString> {
    CString::new(p.as_ref().to_vec()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `mount(2)`; on failure says which target failed on stderr (the caller's, as every
/// shofer-sandbox message) before returning the raw error.
pub(crate) fn mount(
    src: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let src = src.map(cstr).transpose()?;
    let target_c = cstr(target)?;
    let fstype = fstype.map(cstr).transpose()?;
    let data = data.map(cstr).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // Safety: every pointer is NULL or a NUL-terminated string alive for the call.
    let ret = unsafe {
        libc::mount(
            ptr(&src),
            target_c.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if ret != 0 {
        let e = io::Error::last_os_error();
        if flags & libc::MS_REMOUNT == 0
            || !matches!(e.raw_os_error(), Some(libc::EACCES | libc::ENOENT))
        {
            eprintln!("shofer-sandbox: mount {target}: {e}");
        }
        return Err(e);
    }
    Ok(())
}

/// Writes `content` to `path` (the `/proc/self` id-map files).
pub(crate) fn write_file(path: &str, content: &str) -> io::Result<()> {
    std::fs::write(path, content)
}
