//! Dropping every capability before exec (DESIGN §2.2), for a command run as root or with
//! file capabilities. See capabilities(7).
//!
//! Order matters: the bounding set first (dropping from it needs `CAP_SETPCAP` in the
//! effective set), then ambient and inheritable, then effective before permitted (`capset`
//! refuses an effective set larger than the permitted one). With the bounding set empty and
//! `no_new_privs` set, exec of a setuid-root or file-capability program gains nothing.

use std::io;

use caps::CapSet;

/// Whether this process holds any permitted capability (root usually holds all).
pub fn holds_any() -> bool {
    caps::read(None, CapSet::Permitted)
        .map(|set| !set.is_empty())
        .unwrap_or(true)
}

/// Clears the bounding, ambient, inheritable, effective and permitted sets.
///
/// # Errors
/// The first `prctl`/`capset` failure; the caller must not exec after one.
pub fn drop_all() -> io::Result<()> {
    let to_io = |e: caps::errors::CapsError| io::Error::other(e.to_string());
    // Every number the kernel may know, including ones newer than the caps crate:
    // PR_CAPBSET_READ answers EINVAL past CAP_LAST_CAP.
    for cap in 0..64 {
        // Already out of the bounding set (a sandbox inside a sandbox, root without
        // capabilities): dropping it again would need CAP_SETPCAP, which is gone too.
        // Safety: prctl with integer arguments.
        match unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } {
            0 => continue,
            1 => {}
            _ => break, // EINVAL: past the kernel's last capability
        }
        // Safety: prctl with integer arguments.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if ret != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            // No CAP_SETPCAP (root inside bubblewrap, which keeps only the bounding set):
            // under no_new_privs exec cannot gain anything from the bounding set (the new
            // permitted set is capped by the old one), so it may stay.
            let nnp = || {
                // Safety: prctl with integer arguments only reads a flag.
                unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 }
            };
            if err.raw_os_error() == Some(libc::EPERM) && nnp() {
                break;
            }
            return Err(err);
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(to_io)?;
    caps::clear(None, CapSet::Inheritable).map_err(to_io)?;
    caps::clear(None, CapSet::Effective).map_err(to_io)?;
    caps::clear(None, CapSet::Permitted).map_err(to_io)?;
    if holds_any() {
        return Err(io::Error::other("capabilities remain after dropping them"));
    }
    Ok(())
}
