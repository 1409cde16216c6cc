//! git's "freshen" of an object in the read-only store of an object quarantine
//! ([`crate::git::quarantine`]), performed by the supervisor.
//!
//! Before git writes an object it asks whether the store has it, and refreshes the modification
//! time of the file that holds it (`utime(path, NULL)` on the loose object or on the `.pack`,
//! git's object-file.c `freshen_file`), so that a `git gc` does not prune it while it is
//! referred to again. In the quarantine the store is a read-only bind (`objects/info/store`):
//! the `utime` fails with `EROFS`, git takes the object for absent and writes it again into the
//! quarantine — every tree and blob that recurs (a revert, `stash pop`, a file set back to an
//! earlier content), each deflated, written and verified at exit for nothing.
//!
//! The gate traps `utimensat(AT_FDCWD, path, NULL, 0)` (what glibc's and musl's `utime` and
//! `utimes(path, NULL)` make; [`crate::gate::filter::Traps::touches`]). When `path`, resolved as the
//! caller sees it ([`crate::gate::resolve`]), names a loose object or a pack of the store — its
//! directory is the store's fan-out directory or `pack/` by device and inode, its name an
//! object's or a pack's — the supervisor sets the times of the store's file of that name to
//! now, as git would have (`AT_SYMLINK_NOFOLLOW`; with the caller's credentials when the gate
//! keeps its own). Nothing else can happen to it: the file's content and mode stay out of reach,
//! and a fresher time is what git itself gives every object it finds. Every other trapped call
//! is continued (the kernel performs it as the command asked).

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::gate::resolve;

/// The store of a run's object quarantine, as the supervisor holds it.
#[derive(Debug)]
pub struct Store {
    /// `O_PATH` descriptor of the store (`<common>/objects` on the host).
    dir: OwnedFd,
    /// Hex digits of an object name (40 for SHA-1, 64 for SHA-256).
    hexlen: usize,
}

impl Store {
    /// Opens the store `objects` (`O_PATH`, no symlink followed); `sha256`: its object
    /// format.
    ///
    /// # Errors
    /// open(2).
    pub fn open(objects: &Path, sha256: bool) -> std::io::Result<Store> {
        Ok(Store {
            dir: crate::paths::open_dir_at_path(objects)?,
            hexlen: if sha256 { 64 } else { 40 },
        })
    }
}

/// A file of the store to freshen: its directory (`O_PATH`) and name.
pub struct Target {
    dir: OwnedFd,
    name: CString,
}

fn is_hex(s: &[u8]) -> bool {
    s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The directory of the store the last two components of `path` name — `(<fan-out>, <rest of
/// the object name>)` or `("pack", "pack-<hex>.pack")` — if they name a loose object or a pack.
fn store_name(path: &[u8], hexlen: usize) -> Option<(&[u8], &[u8])> {
    let mut parts = path.rsplit(|&b| b == b'/');
    let name = parts.next()?;
    let dir = parts.next()?;
    let loose = dir.len() == 2 && is_hex(dir) && name.len() == hexlen - 2 && is_hex(name);
    let pack = dir == b"pack"
        && name
            .strip_prefix(b"pack-")
            .and_then(|n| n.strip_suffix(b".pack"))
            .is_some_and(|h| h.len() >= 40 && is_hex(h));
    (loose || pack).then_some((dir, name))
}

/// What the trapped `utimensat` of process `pid` (arguments `args`) freshens: `Some` when it is
/// `utimensat(AT_FDCWD, path, NULL, 0)` and `path`, resolved as the caller sees it, is a file of
/// `store`. Reads the caller's memory: check the notification with `ID_VALID` after this and
/// before acting.
pub fn decide(pid: libc::pid_t, args: &[u64; 6], store: &Store) -> Option<Target> {
    if args[0] as i32 != libc::AT_FDCWD || args[2] != 0 || args[3] as i32 != 0 {
        return None;
    }
    let path = crate::gate::notify::read_path(pid, args[1]).ok()?;
    let (dir, name) = store_name(&path, store.hexlen)?;
    let theirs = resolve::resolve(pid, &path, false).ok()?;
    let dir = crate::paths::openat_path(&store.dir, Path::new(OsStr::from_bytes(dir))).ok()?;
    (resolve::ident(theirs.parent.as_raw_fd()).ok()? == resolve::ident(dir.as_raw_fd()).ok()?)
        .then_some(())?;
    Some(Target {
        dir,
        name: CString::new(name).ok()?,
    })
}

/// Sets the access and modification times of `target` to now (utimensat(2), times `NULL`,
/// `AT_SYMLINK_NOFOLLOW`): the trapped call's result. A refusal (a store the caller may not
/// write) is `EROFS`, what the kernel answers first on the read-only bind the caller sees.
pub fn perform(target: &Target) -> Result<i64, i32> {
    use rustix::fs::{Timespec, Timestamps, UTIME_NOW};
    // Both times UTIME_NOW: the same as NULL times (utimensat(2)), with the same permission
    // check.
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: UTIME_NOW,
    };
    let times = Timestamps {
        last_access: now,
        last_modification: now,
    };
    let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
    match rustix::fs::utimensat(&target.dir, &target.name, &times, flags) {
        Ok(()) => Ok(0),
        Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => Err(libc::EROFS),
        Err(e) => Err(e.raw_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loose_object_and_pack_names_match() {
        let sha1 = "a".repeat(38);
        let loose = format!("/r/.git/objects/info/store/ab/{sha1}");
        assert_eq!(
            store_name(loose.as_bytes(), 40),
            Some((&b"ab"[..], sha1.as_bytes()))
        );
        let pack = format!("objects/info/store/pack/pack-{}.pack", "0".repeat(40));
        assert!(store_name(pack.as_bytes(), 40).is_some());
        for no in [
            format!("/x/ab/{}", "a".repeat(37)),
            format!("/x/AB/{sha1}"),
            format!("/x/pack/pack-{}.idx", "0".repeat(40)),
            format!("/x/pack/pack-{}.pack", "0".repeat(39)),
            format!("/x/abc/{}", "a".repeat(37)),
            sha1.clone(),
        ] {
            assert_eq!(store_name(no.as_bytes(), 40), None, "{no}");
        }
        assert_eq!(store_name(loose.as_bytes(), 64), None);
    }
}
