//! Dropping every capability before exec (ARCHITECTURE §2.2), for a command run as root or with
//! file capabilities. See capabilities(7).
//!
//! Order matters: the bounding set first (dropping from it needs `CAP_SETPCAP` in the
//! effective set), then ambient and inheritable, then effective before permitted (`capset`
//! refuses an effective set larger than the permitted one). With the bounding set empty and
//! `no_new_privs` set, exec of a setuid-root or file-capability program gains nothing.

use std::io;

use caps::{CapSet, Capability};
use rustix::io::Errno;
use rustix::thread::CapabilitySet;

/// Whether this process holds any permitted capability (root usually holds all).
pub fn holds_any() -> bool {
    caps::read(None, CapSet::Permitted)
        .map(|set| !set.is_empty())
        .unwrap_or(true)
}

/// What a root caller keeps, in the namespace backends' user namespace only, over a worktree
/// owned by another uid (a container over a bind-mounted checkout): write files whatever their
/// owner and mode, and restore owners and modes (`git`, `tar xp`). Not kept: everything the
/// drop is for (`CAP_SYS_PTRACE`: other processes' memory and environ; `CAP_SYS_ADMIN`:
/// mounts; `CAP_NET_RAW`; `CAP_SYS_MODULE`; `CAP_SETUID`/`CAP_SETGID`; …). The read-only root
/// and Landlock still confine where these apply; under Landlock alone (no read-only root, so
/// `CAP_FOWNER` would reach chmod outside) the command runs as the worktree's owner instead.
pub const FOREIGN_WORKTREE: [Capability; 4] = [
    Capability::CAP_CHOWN,
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_FOWNER,
    Capability::CAP_FSETID,
];

/// Empties the bounding set but for `keep` (needs `CAP_SETPCAP`, so before any id change).
///
/// # Errors
/// The first `prctl` failure.
pub fn drop_bounding(keep: &[Capability]) -> io::Result<()> {
    // Every number the kernel may know, including ones newer than the caps crate: the drop
    // answers EINVAL past CAP_LAST_CAP. Dropped first, asked about only when the drop is
    // refused: one prctl per capability, not two (about 40 fewer calls at every start).
    for cap in 0..64u8 {
        if keep.iter().any(|k| k.index() == cap) {
            continue;
        }
        // A one-bit set names any number, known to rustix or not.
        let bit = CapabilitySet::from_bits_retain(1 << cap);
        match rustix::thread::remove_capability_from_bounding_set(bit) {
            Ok(()) => {}
            Err(Errno::INVAL) => break,
            // No CAP_SETPCAP: fine for one already out of the bounding set (a sandbox inside
            // a sandbox, root without capabilities). Root inside bubblewrap keeps only the
            // bounding set: under no_new_privs exec cannot gain anything from it (the new
            // permitted set is capped by the old one), so it may stay.
            Err(Errno::PERM) => match rustix::thread::capability_is_in_bounding_set(bit) {
                Ok(false) => {}
                Err(_) => break, // EINVAL: past the kernel's last capability
                Ok(true) if rustix::thread::no_new_privs() == Ok(true) => break,
                Ok(true) => return Err(Errno::PERM.into()),
            },
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// Clears the ambient and inheritable sets and leaves exactly `keep` in the effective and
/// permitted ones (after [`drop_bounding`] with the same `keep`).
///
/// # Errors
/// The first `capset` failure, or capabilities beyond `keep` remaining.
pub fn clear_sets(keep: &[Capability]) -> io::Result<()> {
    let to_io = |e: caps::errors::CapsError| io::Error::other(e.to_string());
    let kept: caps::CapsHashSet = keep.iter().copied().collect();
    caps::clear(None, CapSet::Ambient).map_err(to_io)?;
    caps::clear(None, CapSet::Inheritable).map_err(to_io)?;
    caps::set(None, CapSet::Effective, &kept).map_err(to_io)?;
    caps::set(None, CapSet::Permitted, &kept).map_err(to_io)?;
    let left = caps::read(None, CapSet::Permitted).map_err(to_io)?;
    if !left.is_subset(&kept) {
        return Err(io::Error::other("capabilities remain after dropping them"));
    }
    Ok(())
}
