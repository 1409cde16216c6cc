//! The `shofer serve` session's own artifact directory (`shofer-serve-XXXXXX`) outlives a
//! server that cannot run its shutdown — the server and its guardian SIGKILLed together, the
//! machine's OOM killer, a power cut of `$XDG_STATE_HOME` — so each one carries its owner, and
//! the next server that starts removes the directories of owners that are gone (issue 34).
//!
//! - [`claim`]: writes the owner record [`OWNER_FILE`] into a fresh session directory: the
//!   server's pid and start time (its identity, [`shofer_sys::proc`]), the boot id and the pid
//!   namespace those are valid in.
//! - [`sweep`]: in one base directory, removes every `shofer-serve-*` directory whose owner is
//!   gone and returns what it removed and what it could not.
//!
//! # How an owner is judged
//! Only the server process writes its directory (its pumps write the artifacts; sandboxed
//! commands cannot reach it), so once that process is gone, the directory is dead, whatever
//! its commands still do. The owner is gone when the record's boot id is not this boot's, or
//! when, in the same pid namespace, its pid is free, a zombie, or another process (a different
//! start time). A record from another pid namespace of this boot (a container sharing the
//! directory) cannot be judged from here: that directory is kept, as is one without a readable
//! record (a server still creating it, or one of a version before records).
//!
//! # What is trusted
//! Nothing is followed or believed without the checks every state directory gets
//! ([`shofer_sys::statedir`]): the session directory must not be a symlink or lie behind one,
//! must be this user's and writable by no one else; the record is read relative to it, without
//! following a symlink, only as a regular file of this user's with one link, at most
//! [`MAX_OWNER_RECORD`] bytes. Removal is `unlinkat` of the directory's entries relative to
//! that descriptor (never following anything), then `rmdir`: a subdirectory someone put there
//! makes the `rmdir` fail, and the directory is reported, not walked.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The owner record's name in a session directory (not an artifact name: `read_command_output`
/// never serves it, and [`crate::intercept::cleanup`] leaves it).
pub const OWNER_FILE: &str = "owner";

/// The prefix of a session directory's name.
pub const PREFIX: &str = "shofer-serve-";

/// Largest owner record read.
pub const MAX_OWNER_RECORD: u64 = 4096;

/// Who owns a session directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The server's pid.
    pub pid: i32,
    /// The server's start time (clock ticks after boot): with the pid, its identity.
    pub start: u64,
    /// `/proc/sys/kernel/random/boot_id`: pid and start time mean something only in this boot.
    pub boot_id: String,
    /// The inode of `/proc/self/ns/pid`: the pid namespace the pid is valid in.
    pub pid_ns: u64,
}

/// Whether a session directory's owner still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The owner process runs.
    Alive,
    /// The owner process is gone: the directory may be removed.
    Gone,
    /// It cannot be told from here (another pid namespace, no boot id): kept.
    Unknown,
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn pid_ns() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

impl Owner {
    /// This process as an owner; `None` when `/proc` does not tell its identity.
    pub fn of_self() -> Option<Owner> {
        let pid = shofer_sys::process::getpid();
        Some(Owner {
            pid,
            start: shofer_sys::proc::read(pid)?.start,
            boot_id: boot_id()?,
            pid_ns: pid_ns()?,
        })
    }

    /// Whether this owner still runs, judged from this process (see the module docs).
    pub fn liveness(&self) -> Liveness {
        match boot_id() {
            Some(b) if b != self.boot_id => return Liveness::Gone,
            Some(_) => {}
            None => return Liveness::Unknown,
        }
        if pid_ns() != Some(self.pid_ns) {
            return Liveness::Unknown;
        }
        match shofer_sys::proc::read(self.pid) {
            Some(p) if p.start == self.start && !p.is_dead() => Liveness::Alive,
            _ => Liveness::Gone,
        }
    }
}

/// Writes this process's [`Owner`] record into the fresh session directory `dir` (created by
/// this process, mode 0700): to a temporary name first, then renamed, so a concurrent
/// [`sweep`] reads a whole record or none.
///
/// # Errors
/// The directory fails the state-directory check, `/proc` does not tell this process's
/// identity, or writing fails.
pub fn claim(dir: &Path) -> io::Result<()> {
    let owner = Owner::of_self()
        .ok_or_else(|| io::Error::other("/proc does not tell this process's identity"))?;
    let checked = shofer_sys::statedir::check(dir, &[]).map_err(io::Error::other)?;
    let tmp = format!(".{OWNER_FILE}-{}", shofer_sys::statedir::random_suffix());
    let fd = rustix::fs::openat(
        &checked.fd,
        tmp.as_str(),
        rustix::fs::OFlags::WRONLY
            | rustix::fs::OFlags::CREATE
            | rustix::fs::OFlags::EXCL
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::from_raw_mode(0o600),
    )?;
    let mut f = std::fs::File::from(fd);
    let json = serde_json::to_string(&owner).map_err(io::Error::other)?;
    let written = writeln!(f, "{json}").and_then(|()| f.sync_data());
    drop(f);
    let renamed = written.and_then(|()| {
        rustix::fs::renameat(&checked.fd, tmp.as_str(), &checked.fd, OWNER_FILE)
            .map_err(io::Error::from)
    });
    if renamed.is_err() {
        let _ = rustix::fs::unlinkat(&checked.fd, tmp.as_str(), rustix::fs::AtFlags::empty());
    }
    renamed
}

/// The owner recorded in the checked session directory `dir`, if it holds a valid record.
fn read_owner(dir: &OwnedFd) -> Option<Owner> {
    let bytes = shofer_sys::statedir::read_file(dir, OWNER_FILE, MAX_OWNER_RECORD).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// What a [`sweep`] did.
#[derive(Debug, Default)]
pub struct Swept {
    /// The session directories removed.
    pub removed: Vec<PathBuf>,
    /// Directories of gone owners that could not be removed, with why.
    pub failed: Vec<(PathBuf, String)>,
}

/// Removes, in `base`, every `shofer-serve-*` directory of this user's whose owner is gone
/// (see the module docs for the rule and the checks). A missing or unreadable `base` sweeps
/// nothing. Never fails: what could not be removed is in [`Swept::failed`].
pub fn sweep(base: &Path) -> Swept {
    let mut out = Swept::default();
    let Ok(entries) = std::fs::read_dir(base) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(n) = name.to_str() else { continue };
        if !n.starts_with(PREFIX) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = base.join(n);
        // Ours, writable by no one else, no symlink: else not ours to judge.
        let Ok(dir) = shofer_sys::statedir::check(&path, &[]) else {
            continue;
        };
        let Some(owner) = read_owner(&dir.fd) else {
            continue;
        };
        if owner.liveness() != Liveness::Gone {
            continue;
        }
        match remove(&dir) {
            Ok(()) => out.removed.push(dir.path),
            Err(e) => out.failed.push((dir.path, e.to_string())),
        }
    }
    out
}

/// Unlinks every entry of the checked directory relative to its descriptor, then removes the
/// directory itself (a subdirectory inside makes that fail: nothing is walked).
fn remove(dir: &shofer_sys::statedir::StateDir) -> io::Result<()> {
    use rustix::fs::AtFlags;
    for name in shofer_sys::statedir::list(&dir.fd)? {
        match rustix::fs::unlinkat(&dir.fd, name.as_os_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::ISDIR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match rustix::fs::unlinkat(rustix::fs::CWD, &dir.path, AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};

    fn session(base: &Path, name: &str) -> PathBuf {
        let d = base.join(format!("{PREFIX}{name}"));
        std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
        std::fs::write(d.join("cmd-1.txt"), "output").unwrap();
        d
    }

    fn record(dir: &Path, o: &Owner) {
        std::fs::write(dir.join(OWNER_FILE), serde_json::to_string(o).unwrap()).unwrap();
        std::fs::set_permissions(dir.join(OWNER_FILE), std::fs::Permissions::from_mode(0o600))
            .unwrap();
    }

    #[test]
    fn sweep_removes_only_directories_of_owners_known_gone() {
        let base = tempfile::tempdir().unwrap();
        let me = Owner::of_self().unwrap();
        // A process that is gone: our own pid with another start time.
        let gone = Owner {
            start: me.start + 1,
            ..me.clone()
        };
        let other_boot = Owner {
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            ..me.clone()
        };
        let other_ns = Owner {
            pid_ns: me.pid_ns + 1,
            ..gone.clone()
        };
        let live = session(base.path(), "live");
        record(&live, &me);
        let dead = session(base.path(), "dead");
        record(&dead, &gone);
        let rebooted = session(base.path(), "rebooted");
        record(&rebooted, &other_boot);
        let foreign_ns = session(base.path(), "ns");
        record(&foreign_ns, &other_ns);
        let unclaimed = session(base.path(), "unclaimed");
        // A record planted as a symlink to a gone owner's record is not followed.
        let planted = session(base.path(), "planted");
        std::os::unix::fs::symlink(dead.join(OWNER_FILE), planted.join(OWNER_FILE)).unwrap();
        // A group-writable directory is not ours to judge.
        let shared = session(base.path(), "shared");
        record(&shared, &gone);
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o770)).unwrap();
        // Not a session directory by name.
        let other = base.path().join("other");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&other)
            .unwrap();
        std::fs::write(other.join("cmd-1.txt"), "output").unwrap();
        record(&other, &gone);

        let swept = sweep(base.path());
        assert!(swept.failed.is_empty(), "{swept:?}");
        let mut removed: Vec<_> = swept
            .removed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        removed.sort();
        assert_eq!(
            removed,
            [format!("{PREFIX}dead"), format!("{PREFIX}rebooted")]
        );
        assert!(!dead.exists() && !rebooted.exists());
        for kept in [&live, &foreign_ns, &unclaimed, &planted, &shared, &other] {
            assert!(kept.join("cmd-1.txt").exists(), "{}", kept.display());
        }
    }

    #[test]
    fn claim_writes_a_record_that_says_alive() {
        let base = tempfile::tempdir().unwrap();
        let d = session(base.path(), "mine");
        claim(&d).unwrap();
        let checked = shofer_sys::statedir::check(&d, &[]).unwrap();
        let o = read_owner(&checked.fd).unwrap();
        assert_eq!(o.liveness(), Liveness::Alive);
        assert_eq!(Some(o), Owner::of_self());
        assert!(sweep(base.path()).removed.is_empty());
        assert!(d.exists());
    }

    #[test]
    fn a_stray_subdirectory_is_reported_not_walked() {
        let base = tempfile::tempdir().unwrap();
        let me = Owner::of_self().unwrap();
        let d = session(base.path(), "sub");
        record(
            &d,
            &Owner {
                start: me.start + 1,
                ..me
            },
        );
        std::fs::create_dir(d.join("inner")).unwrap();
        std::fs::write(d.join("inner/keep"), "x").unwrap();
        let swept = sweep(base.path());
        assert_eq!(swept.failed.len(), 1, "{swept:?}");
        assert!(d.join("inner/keep").exists());
        assert!(!d.join("cmd-1.txt").exists());
    }
}
