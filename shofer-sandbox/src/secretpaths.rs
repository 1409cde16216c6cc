//! Which secret locations this run hides, and how: Landlock's read rules on Landlock alone,
//! mounts over them elsewhere (ARCHITECTURE §2.1): the reader around
//! [`shofer_core::secretpaths`].
//!
//! - Entry points: [`find`], once per run, on a thread beside steps 2-4 (`crate::run`): reads
//!   `$HOME`, the caller's `/etc/passwd` home, the XDG variables and (for a root caller) every
//!   passwd home, applies `--allow-read` and `--hide`, and looks the locations up (canonical,
//!   with their mount-table aliases); then [`Found::resolve`] in step 4 keeps those the
//!   writable set does not hold.
//! - [`Resolved::covers`]: the mounts over them ([`Cover`]), for bubblewrap's arguments
//!   (`crate::bwrap`) and the namespace backends' process A (`crate::namespaces`), where a
//!   command without a capability over file modes runs: a few mounts per run, whatever the
//!   home holds.
//! - [`Resolved::read_rules`]: the [`ReadRules`] that the Landlock ruleset grants
//!   (`crate::ruleset::create`): on Landlock alone, and layered on the namespaces for a command
//!   that keeps `CAP_DAC_OVERRIDE` (a foreign-owned worktree, `--keep-caps`), which a mode-0
//!   directory would not stop.
//! - [`note`] names the existing locations left readable (the writable set holds them);
//!   [`Resolved::check_cwd`] refuses a working directory inside a hidden location.
//! - Also hidden: the targets of the symlinks among a hidden directory's entries that lead out
//!   of it (one level), and every other mount of a filesystem mounted inside a location.
//! - Never: hide the worktree, anything inside it, an `--allow-write` path or git's metadata,
//!   or a directory that holds one of them (the writable set, which the user chose, wins).
//!
//! # The read rules: by construction, on the objects the kernel reaches
//! When at least one location exists, the ruleset handles `READ_FILE` and `READ_DIR`, which
//! Landlock then refuses everywhere but beneath a rule. Every directory that holds a hidden
//! location (each ancestor, from `/` down) gets `READ_DIR` (listing); each entry of such a
//! directory gets `READ_FILE` (and `READ_DIR` for a directory) except the hidden locations and
//! the ancestors themselves, which their own level handles. The writable rules grant reading
//! too. So:
//! - a hidden location is unreadable (`EACCES`) by any name: `..`, `/proc/self/root/…`, a
//!   symlink the command plants, a bind mount — Landlock walks the real path of the object;
//! - the rules are on inodes, not names: a hidden directory renamed by the host stays
//!   unreadable under its new name, and an entry the host creates (or renames into place) in
//!   a directory that holds a hidden location after the start is unreadable too (it has no
//!   rule), which keeps a secret written during the run (`ssh-keygen`, `aws configure`) from
//!   the command;
//! - names stay listable: `ls ~/.ssh` works, `cat ~/.ssh/id_ed25519` fails (`READ_DIR` on an
//!   ancestor covers what is beneath it, and listing `/` or `~` must keep working);
//! - a location that is a symlink (a dotfiles repository's link) is hidden at its target;
//! - a hard link the host made to a hidden file from a readable place stays readable through
//!   that place (Landlock reads paths); the command cannot make one (Landlock refuses a link
//!   that would gain a right, and one across directories before ABI 2);
//! - a bind mount that shows a hidden location elsewhere (a home mounted twice, one key file
//!   bound somewhere) is found in the mount table and hidden at that path too, if it reaches
//!   the same inode; entries are compared with the hidden locations and their ancestors by
//!   inode as well as by name (a bind of `/` placed below the home shows them again); an alias
//!   in the writable set leaves the location readable (named as such);
//! - where the caller can read a block device under `/dev` (root), `/dev` is granted entry by
//!   entry without block devices (a disk would hand uid 0 every file).
//!
//! Open bypasses, each needing a mount or a node the host made (ARCHITECTURE §2.1): an
//! overlayfs over a hidden location (another device), a bind made during the run (Landlock
//! alone), a block device node outside `/dev`.
//!
//! Limits, by the same construction: a location that does not exist at the start is not
//! watched (one created during the run in a directory that held no hidden location — `gh auth
//! login` in another terminal — is readable); a file the host replaces by rename during the run
//! in a directory that holds one (`git config --global` rewriting `~/.gitconfig`) becomes
//! unreadable until the next run; a directory that holds one but that the caller cannot list
//! (mode 0711) gets no entry rules, so its other entries are unreadable; a relative `$HOME`
//! counts for nothing (the passwd home still does).
//!
//! With nothing to hide, reading is not handled at all: the run pays nothing.
//!
//! The mounts' properties and limits are [`Cover`]'s: by every path too (a mount covers the
//! object wherever the walk reaches it, and the aliases are covered as well), but what the
//! host creates or puts in place during the run is not covered.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use shofer_core::policy::RuleOrigin;
use shofer_core::secretpaths;

use crate::error::SetupError;
use crate::writable::OpenedPolicy;

/// What [`Found::resolve`] decided.
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    /// The hidden locations (they exist), canonical.
    pub hidden: Vec<PathBuf>,
    /// Existing locations left readable because of the writable set: (path, why).
    pub not_hidden: Vec<(PathBuf, &'static str)>,
    /// `--allow-read` paths inside hidden locations (they exist): each opens exactly itself.
    pub allowed_inside: Vec<PathBuf>,
}

impl Resolved {
    /// The Landlock read rules that hide [`Resolved::hidden`], opened now: one rule per entry
    /// of every directory that holds a hidden location (empty when nothing is hidden).
    pub fn read_rules(&self) -> ReadRules {
        read_rules(&self.hidden, &self.allowed_inside)
    }

    /// Refuses a working directory inside a hidden location: the command's relative paths
    /// would start from what the run hides (beneath a mount's cover, the namespace backends'
    /// process A could not even enter it again). One without a name (deleted, or beneath a
    /// mount that is gone) cannot be judged, and is refused too.
    ///
    /// # Errors
    /// [`SetupError::CwdHidden`] naming the location; [`SetupError::CwdUnnamed`].
    pub fn check_cwd(&self) -> Result<(), SetupError> {
        let cwd = std::env::current_dir().map_err(SetupError::CwdUnnamed)?;
        let inside = |h: &&PathBuf| {
            cwd.starts_with(h) && !self.allowed_inside.iter().any(|a| cwd.starts_with(a))
        };
        match self.hidden.iter().find(inside) {
            Some(location) => Err(SetupError::CwdHidden {
                cwd: cwd.clone(),
                location: location.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Refuses a descriptor the command gets (`fds`: 0-2 and `--pass-fd`) that is a directory at,
    /// inside or above a hidden location (`< ~`): a walk from it through `/proc/self/fd/N`
    /// starts in the host's tree, beneath the mounts that cover the location. Files are the
    /// caller's to give (`< ~/.netrc` hands over that content on purpose).
    ///
    /// # Errors
    /// [`SetupError::FdHidden`] naming the descriptor and the location.
    pub fn check_fds(&self, fds: impl IntoIterator<Item = i32>) -> Result<(), SetupError> {
        if self.hidden.is_empty() {
            return Ok(()); // nothing to reach
        }
        for fd in fds {
            let dir = std::fs::metadata(format!("/proc/self/fd/{fd}")).is_ok_and(|m| m.is_dir());
            if !dir {
                continue;
            }
            let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
                continue;
            };
            let reaches = |h: &&PathBuf| {
                (h.starts_with(&path) || path.starts_with(h))
                    && !self.allowed_inside.iter().any(|a| path.starts_with(a))
            };
            if let Some(location) = self.hidden.iter().find(reaches) {
                return Err(SetupError::FdHidden {
                    fd,
                    path,
                    location: location.clone(),
                });
            }
        }
        Ok(())
    }

    /// The mounts that hide [`Resolved::hidden`] instead, in order ([`Cover`]): for
    /// bubblewrap's arguments and the namespace backends' process A.
    pub fn covers(&self) -> Vec<Cover> {
        let mut hidden: Vec<&PathBuf> = self.hidden.iter().collect();
        hidden.sort_by_key(|p| p.components().count());
        let allowed: Vec<&Path> = self.allowed_inside.iter().map(PathBuf::as_path).collect();
        let mut out = Vec::new();
        for h in hidden {
            cover(h, &allowed, &mut out);
        }
        out
    }
}

/// One step of hiding the secret locations by mounts, where no Landlock read rule does
/// (bubblewrap, and the namespace backends for a command without a capability over file
/// modes): the steps of [`Resolved::covers`], in order.
///
/// - A file (anything but a directory) gets `/dev/null` bound over it, read-only and `nodev`:
///   opening it fails with `EACCES` whoever asks (the kernel refuses a device on a `nodev`
///   mount before any permission check).
/// - A directory gets an empty tmpfs, mode 0000 and read-only (its owner cannot `chmod` it
///   back): listing or reading beneath fails with `EACCES` for a command without
///   `CAP_DAC_OVERRIDE`, and nothing of what lies beneath is there to read for one with it.
///   When an `--allow-read` path lies inside, the directory is *mirrored*: its entries are
///   covered one by one (directories on the way to that path mirrored too, mode 0555) and
///   that path bound back from the host's view.
///
/// A mount cannot be undone from inside: without capabilities the command can only unshare a
/// nested user namespace, where the kernel locks these mounts (no unmount, no bind of a tree
/// holding one); Landlock forbids mount changes where it is layered. Mounts cover the objects
/// of the start: a location the host creates, or puts in place by rename, during the run is
/// readable (Landlock's rules, on Landlock alone, leave such entries unreadable instead).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cover {
    /// `/dev/null` over this file, read-only and `nodev`.
    File(PathBuf),
    /// An empty tmpfs over this directory; the steps up to its [`Cover::Seal`] fill it when
    /// `mirrored`.
    Dir { path: PathBuf, mirrored: bool },
    /// This `--allow-read` path (inside a mirrored directory) bound back, read-only.
    Reveal(PathBuf),
    /// The tmpfs over this directory is complete: `mode`, then read-only.
    Seal { path: PathBuf, mode: u32 },
}

/// Appends the [`Cover`] steps for `path`, leaving the `allowed` paths beneath it readable.
fn cover(path: &Path, allowed: &[&Path], out: &mut Vec<Cover>) {
    let allowed: Vec<&Path> = allowed
        .iter()
        .copied()
        .filter(|a| a.starts_with(path) && *a != path)
        .collect();
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return; // gone since step 4: nothing to read there
    };
    if meta.file_type().is_symlink() {
        return; // only inside a mirrored directory: left out, its target judged on its own
    }
    if !meta.is_dir() {
        out.push(Cover::File(path.to_path_buf()));
        return;
    }
    let mirrored = !allowed.is_empty();
    out.push(Cover::Dir {
        path: path.to_path_buf(),
        mirrored,
    });
    if mirrored {
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            let child = entry.path();
            if allowed.contains(&child.as_path()) {
                out.push(Cover::Reveal(child));
            } else {
                cover(&child, &allowed, out);
            }
        }
    }
    out.push(Cover::Seal {
        path: path.to_path_buf(),
        mode: if mirrored { 0o555 } else { 0 },
    });
}

/// A Landlock ruleset begun on the set-up thread for the locations it expected to hide
/// ([`Found::ahead`]).
pub(crate) struct Ahead {
    hidden: Vec<PathBuf>,
    allowed_inside: Vec<PathBuf>,
    abi: u32,
    net: shofer_core::policy::NetPolicy,
    /// Reading is handled (something is hidden).
    reading: bool,
    ruleset: landlock::RulesetCreated,
}

impl Ahead {
    /// The ruleset, and whether reading is handled, when it was begun for what `secrets`
    /// hides at `abi` with `net` (else `None`: the writable set kept a location readable, and
    /// the ruleset is made again).
    pub(crate) fn fits(
        self,
        secrets: &Resolved,
        abi: u32,
        net: shofer_core::policy::NetPolicy,
    ) -> Option<(landlock::RulesetCreated, bool)> {
        (self.hidden == secrets.hidden
            && self.allowed_inside == secrets.allowed_inside
            && self.abi == abi
            && self.net == net)
            .then_some((self.ruleset, self.reading))
    }
}

/// The Landlock read rules of [`Found::resolve`]: open `O_PATH` descriptors.
#[derive(Debug, Default)]
pub(crate) struct ReadRules {
    /// Directories that hold a hidden location: `READ_DIR` beneath.
    pub listable: Vec<OwnedFd>,
    /// Their other entries, and `--allow-read` paths inside hidden locations: (descriptor,
    /// is a directory): `READ_FILE` (and `READ_DIR` for a directory) beneath.
    pub readable: Vec<(OwnedFd, bool)>,
    /// The host's `/dev`, an entry of `/`: see [`ReadRules::host_dev`].
    pub dev: Option<OwnedFd>,
}

impl ReadRules {
    /// Whether reading is handled at all (something is hidden).
    pub fn active(&self) -> bool {
        !self.listable.is_empty()
    }

    /// The read rules for the host's `/dev`, for a command that sees it (Landlock alone; the
    /// namespace backends mount a private `/dev` without disks, which process A grants): the
    /// whole directory, or — when the caller can read a block device there (root: a disk
    /// would hand it every file, hidden ones included) — entry by entry without block devices.
    pub fn host_dev(&self) -> Vec<(OwnedFd, bool)> {
        let Some(dev) = &self.dev else {
            return Vec::new();
        };
        if !a_block_device_is_readable(Path::new("/dev")) {
            return dev.try_clone().map(|d| vec![(d, true)]).unwrap_or_default();
        }
        let mut out = Vec::new();
        device_rules(Path::new("/dev"), 0, &mut out);
        out
    }
}

/// Whether the caller (its effective ids) may read a block device in `dir` or below it (4
/// levels, as [`device_rules`] walks).
fn a_block_device_is_readable(dir: &Path) -> bool {
    fn walk(dir: &Path, depth: u32) -> bool {
        use std::os::unix::fs::FileTypeExt;
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let Ok(k) = e.file_type() else {
                    return false;
                };
                if k.is_dir() {
                    return depth < 4 && walk(&e.path(), depth + 1);
                }
                k.is_block_device()
                    && rustix::fs::accessat(
                        rustix::fs::CWD,
                        e.path(),
                        rustix::fs::Access::READ_OK,
                        rustix::fs::AtFlags::EACCESS,
                    )
                    .is_ok()
            })
    }
    walk(dir, 0)
}

/// The bytes of `name` with ASCII letters in lower case, for comparing.
fn folded(name: &(impl AsRef<std::ffi::OsStr> + ?Sized)) -> impl Iterator<Item = u8> + '_ {
    name.as_ref()
        .as_encoded_bytes()
        .iter()
        .map(u8::to_ascii_lowercase)
}

/// `path` made absolute against `cwd` and cleaned lexically (`.` dropped, `..` pops).
fn absolute(path: &Path, cwd: &Path) -> PathBuf {
    shofer_core::lexical::clean(&cwd.join(path))
}

/// What [`find`] looked up, before the writable set is consulted ([`Found::resolve`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Found {
    /// The default set's locations and `--hide`'s, after `--allow-read`, in order.
    wanted: Vec<PathBuf>,
    /// Each location looked at (the wanted ones, and the symlinks' targets), with what it is.
    probes: Vec<(PathBuf, Probe)>,
    /// The `--allow-read` paths (as written and canonical) that exist.
    allowed_existing: Vec<PathBuf>,
}

/// One location as [`find`] found it.
#[derive(Clone, Debug, Default)]
struct Probe {
    /// Its canonical path; `None` when missing or a dangling symlink (nothing to read behind).
    canonical: Option<PathBuf>,
    /// An `--allow-read` path opens it (and no `--hide` names it): nothing more looked at.
    allowed: bool,
    /// Every other path at which the mount table shows it ([`aliases_of`]).
    aliases: Vec<PathBuf>,
    /// The other paths of filesystems mounted inside it ([`inner_aliases`]).
    inner: Vec<PathBuf>,
    /// The targets of its symlinks that lead out ([`links_out`]), when looked at.
    links: Option<Vec<PathBuf>>,
}

/// The locations this run would hide, found without the writable set: everything
/// [`Found::resolve`] needs from the file system, the mount table and the environment (`env`,
/// a copy of it), so it can run beside step 4's other work (`crate::run`): it reads, opens
/// nothing it keeps, and changes nothing.
///
/// Cost: each base directory (a home, its XDG directories, each also cleaned of `..`) is
/// listed once, and only the locations whose first component is listed there (ASCII case
/// folded) are looked up; a base that cannot be listed to its end (mode 0711 and another
/// user's, an error partway) has every location looked up. As root, a passwd home counts
/// only when its user owns it (system accounts name shared directories such as `/bin` or
/// `/var/www`, or none).
///
/// Left: a file system whose listing ends early without an error or leaves out a name its
/// lookup finds (a misbehaving FUSE or network file system) hides that location on Landlock
/// alone only (an entry not listed gets no read rule there); on a directory that folds case
/// beyond ASCII (casefolded ext4: `ſ` is `s`, the Kelvin sign `k`), a location the host named
/// so (`.ſsh`) is found by no backend (it is listed, under a name that is no location).
pub(crate) fn find(
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    allow_read: &[PathBuf],
    hide: &[PathBuf],
) -> Found {
    use std::os::unix::fs::MetadataExt;
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let passwd = shofer_sys::proc::read_whole("/etc/passwd").unwrap_or_default();
    let passwd = String::from_utf8_lossy(&passwd);
    let users = secretpaths::users(
        // The first entry of a name, as getenv(3) reads it.
        |n| {
            env.iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| PathBuf::from(v))
        },
        rustix::process::getuid().as_raw(),
        rustix::process::geteuid().is_root(),
        &passwd,
        |uid, home| std::fs::metadata(home).is_ok_and(|m| m.is_dir() && m.uid() == uid),
    );
    // Each base listed once; a location is looked at only when its first component is there,
    // compared as bytes with ASCII case folded (on a case-insensitive directory `.SSH` is what
    // a lookup of `.ssh` reaches). A base that cannot be listed whole (mode 0711 and another
    // owner's, an error partway) gets every location looked up (`None`).
    let mut listed: Vec<(PathBuf, Option<Vec<std::ffi::OsString>>)> = Vec::new();
    let mut set: Vec<PathBuf> = Vec::new();
    for dirs in &users {
        // Every base is listed, even one that a base listed already seems not to hold
        // (`~/.config` in `~`): a lookup can find a name that the listing does not show (a
        // FUSE or network file system).
        for (base, paths) in secretpaths::pieces(dirs) {
            let i = match listed
                .iter()
                .position(|(b, _)| b.as_os_str() == base.as_os_str())
            {
                Some(i) => i,
                None => {
                    let names = match crate::paths::entries_of(&base) {
                        Ok((entries, true)) => {
                            let mut names: Vec<std::ffi::OsString> =
                                entries.into_iter().map(|(name, _)| name).collect();
                            names.sort_unstable_by(|a, b| folded(a).cmp(folded(b)));
                            Some(names)
                        }
                        Ok((_, false)) => None,
                        // Nothing there, or no directory: nothing to look up.
                        Err(e)
                            if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) =>
                        {
                            Some(Vec::new())
                        }
                        Err(_) => None,
                    };
                    listed.push((base, names));
                    listed.len() - 1
                }
            };
            let (base, names) = &listed[i];
            for path in paths {
                let first = path.split('/').next().unwrap_or(path);
                if let Some(names) = names {
                    if names
                        .binary_search_by(|n| folded(n).cmp(folded(first)))
                        .is_err()
                    {
                        continue;
                    }
                }
                let candidate = base.join(path);
                if !set.iter().any(|s| s.as_os_str() == candidate.as_os_str()) {
                    set.push(candidate);
                }
            }
        }
    }
    // An --allow-read names a location by either of its names: as written and canonical.
    let mut allow: Vec<PathBuf> = Vec::new();
    for a in allow_read {
        let a = absolute(a, &cwd);
        if let Ok(c) = std::fs::canonicalize(&a) {
            allow.push(c);
        }
        allow.push(a);
    }
    // A --hide path with a `..` is hidden as the kernel reads it (through a symlink before
    // the `..`) and as cleaned lexically, as `HOME` is.
    let hide: Vec<PathBuf> = hide
        .iter()
        .flat_map(|h| {
            let raw = cwd.join(h);
            let clean = absolute(h, &cwd);
            (raw != clean).then_some(raw).into_iter().chain([clean])
        })
        .collect();
    let mut found = Found {
        wanted: secretpaths::adjust(set, &allow, &hide),
        ..Found::default()
    };
    // The mount table, read only once a location exists.
    let mut mounts: Option<Vec<shofer_sys::proc::Mount>> = None;
    // (location, whether its symlinks are looked at): as `Found::resolve` walks them, each
    // symlink followed whether or not the writable set will let its location be hidden.
    let mut queue: Vec<(PathBuf, bool)> = found
        .wanted
        .iter()
        .rev()
        .map(|w| (w.clone(), true))
        .collect();
    while let Some((loc, look_at_links)) = queue.pop() {
        let i = match found.probes.iter().position(|(l, _)| *l == loc) {
            Some(i) => i,
            None => {
                let mut probe = Probe::default();
                if let Ok(canonical) = shofer_sys::fd::canonicalize(&loc) {
                    let mounts = mounts
                        .get_or_insert_with(|| shofer_sys::proc::mounts().unwrap_or_default());
                    probe.allowed =
                        allow.iter().any(|a| canonical.starts_with(a)) && !hide.contains(&loc);
                    if !probe.allowed {
                        probe.aliases = aliases_of(&canonical, mounts);
                        probe.inner = inner_aliases(&canonical, mounts);
                    }
                    probe.canonical = Some(canonical);
                }
                found.probes.push((loc, probe));
                found.probes.len() - 1
            }
        };
        let probe = &mut found.probes[i].1;
        if look_at_links && probe.links.is_none() && !probe.allowed {
            if let Some(canonical) = &probe.canonical {
                let links = links_out(canonical);
                queue.extend(links.iter().map(|t| (t.clone(), false)));
                probe.links = Some(links);
            }
        }
    }
    found.allowed_existing = allow
        .into_iter()
        .filter(|a| std::fs::symlink_metadata(a).is_ok())
        .collect();
    found
}

impl Found {
    /// The locations this run hides, the existing ones it leaves readable because the writable
    /// set `opened` holds them, and the `--allow-read` paths inside hidden ones.
    pub(crate) fn resolve(&self, opened: &OpenedPolicy) -> Resolved {
        self.resolve_with(|path| conflict(opened, path))
    }

    /// Landlock's ruleset begun for what [`Found::resolve`] will hide if the writable set
    /// holds none of the locations (the usual case), with the read rules: on the set-up thread,
    /// at ABI `abi` with `net`, for Landlock alone (which sees the host's `/dev`). `None` when
    /// the kernel refused it (step 5 then meets the refusal itself).
    pub(crate) fn ahead(&self, abi: u32, net: shofer_core::policy::NetPolicy) -> Option<Ahead> {
        let expected = self.resolve_with(|_| None);
        let reads = read_rules(&expected.hidden, &expected.allowed_inside);
        let ruleset = crate::ruleset::begin(&reads, true, abi, net).ok()?;
        Some(Ahead {
            hidden: expected.hidden,
            allowed_inside: expected.allowed_inside,
            abi,
            net,
            reading: reads.active(),
            ruleset,
        })
    }

    /// [`Found::resolve`], with `conflict` saying why the writable set keeps a path readable.
    fn resolve_with(&self, conflict: impl Fn(&Path) -> Option<&'static str>) -> Resolved {
        let mut out = Resolved::default();
        // (location, whether its symlinks are looked at): the default set's and --hide's,
        // then the targets of the symlinks found in them.
        let mut queue: Vec<(&Path, bool)> = self
            .wanted
            .iter()
            .rev()
            .map(|w| (w.as_path(), true))
            .collect();
        while let Some((loc, look_at_links)) = queue.pop() {
            let Some((_, probe)) = self.probes.iter().find(|(l, _)| l == loc) else {
                continue; // (`find` looked at every location this walk reaches)
            };
            let Some(canonical) = &probe.canonical else {
                continue; // missing, or a dangling symlink: nothing to read behind it
            };
            if probe.allowed {
                continue;
            }
            let mut names: Vec<&PathBuf> =
                std::iter::once(canonical).chain(&probe.aliases).collect();
            if let Some(why) = names.iter().find_map(|n| conflict(n)) {
                out.not_hidden.push((canonical.clone(), why));
                continue;
            }
            // An inner filesystem's alias the writable set holds leaves that filesystem
            // readable there (named), not the whole location.
            for inner in &probe.inner {
                match conflict(inner) {
                    Some(why) => out.not_hidden.push((inner.clone(), why)),
                    None => names.push(inner),
                }
            }
            if look_at_links {
                queue.extend(probe.links.iter().flatten().map(|t| (t.as_path(), false)));
            }
            for n in names {
                if n != Path::new("/") && !out.hidden.contains(n) {
                    out.hidden.push(n.clone());
                }
            }
        }
        // A location inside another is hidden with it.
        let all = out.hidden.clone();
        out.hidden
            .retain(|h| !all.iter().any(|o| o != h && h.starts_with(o)));
        // An --allow-read inside a hidden location opens exactly what it names.
        out.allowed_inside = self
            .allowed_existing
            .iter()
            .filter(|a| out.hidden.iter().any(|h| a.starts_with(h) && *a != h))
            .cloned()
            .collect();
        out.allowed_inside.sort();
        out.allowed_inside.dedup();
        out
    }
}

/// The rules that leave `hidden` (canonical, none inside another) unreadable and everything
/// else readable, plus a read rule on each of `also` (paths inside hidden locations).
fn read_rules(hidden: &[PathBuf], also: &[PathBuf]) -> ReadRules {
    let mut rules = ReadRules::default();
    if hidden.is_empty() {
        return rules;
    }
    // Every ancestor of a hidden location, `/` first.
    let mut ancestors: Vec<PathBuf> = Vec::new();
    for h in hidden {
        for a in h.ancestors().skip(1) {
            if !ancestors.iter().any(|x| x == a) {
                ancestors.push(a.to_path_buf());
            }
        }
    }
    ancestors.sort_by_key(|a| a.components().count());
    // The same objects by inode: a bind of a parent placed inside it shows an ancestor (or a
    // hidden location) under another name, which must not get a rule either.
    let ids: Vec<(u64, u64)> = ancestors
        .iter()
        .chain(hidden)
        .filter_map(|p| std::fs::symlink_metadata(p).ok())
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        })
        .collect();
    for dir in &ancestors {
        let Ok(fd) = open_path(rustix::fs::CWD, dir, true) else {
            continue; // gone or unreachable: nothing beneath it is readable either
        };
        let dir_dev = rustix::fs::fstat(&fd).map_or(0, |st| st.st_dev);
        // Listed by path (the directory was just opened by it; an entry swapped in between
        // only gets a rule if it is not a symlink, and never a hidden location's).
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let child = dir.join(&name);
            if hidden.contains(&child) || ancestors.contains(&child) {
                continue;
            }
            {
                use std::os::unix::fs::DirEntryExt;
                // d_ino: the entry's own inode (for a mount point, the covered one).
                if ids.contains(&(dir_dev, entry.ino())) {
                    continue;
                }
            }
            // A symlink needs no rule: the walk reaches its target by the target's own path.
            let kind = entry.file_type().ok();
            if kind.is_some_and(|k| k.is_symlink()) {
                continue;
            }
            if child == Path::new("/dev") {
                // Its rules depend on the backend ([`ReadRules::host_dev`]).
                rules.dev = open_path(&fd, Path::new(&name), true).ok();
                continue;
            }
            if let Ok(opened) = open_path(&fd, Path::new(&name), false) {
                let is_dir = match kind {
                    Some(k) if k.is_dir() || k.is_file() => Some(k.is_dir()),
                    _ => rule_kind(&opened),
                };
                if let Some(is_dir) = is_dir {
                    rules.readable.push((opened, is_dir));
                }
            }
        }
        rules.listable.push(fd);
    }
    for a in also {
        if let Ok(fd) = open_path(rustix::fs::CWD, a, false) {
            if let Some(is_dir) = rule_kind(&fd) {
                rules.readable.push((fd, is_dir));
            }
        }
    }
    rules
}

/// Read rules for what `dir` (under `/dev`) holds, leaving out block devices: root's command
/// runs as uid 0 on Landlock alone, and a disk (`root:disk 0660`) would hand it every file of
/// the filesystem, hidden ones included. A directory without a block device beneath it gets
/// one rule; one with any is walked (4 levels at most; deeper ones stay unreadable), so a
/// device that appears later is unreadable too. Returns whether a block device was found.
fn device_rules(dir: &Path, depth: u32, out: &mut Vec<(OwnedFd, bool)>) -> bool {
    let mut mine = Vec::new();
    let mut block = false;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        use std::os::unix::fs::FileTypeExt;
        if kind.is_symlink() {
            continue;
        }
        if kind.is_block_device() {
            block = true;
            continue;
        }
        let path = entry.path();
        if kind.is_dir() {
            let mut below = Vec::new();
            if depth < 4 && !device_rules(&path, depth + 1, &mut below) {
                if let Ok(fd) = open_path(rustix::fs::CWD, &path, true) {
                    mine.push((fd, true));
                }
            } else {
                block = true;
                mine.append(&mut below);
            }
            continue;
        }
        if let Ok(fd) = open_path(rustix::fs::CWD, &path, false) {
            mine.push((fd, false));
        }
    }
    if !block && depth > 0 {
        // The caller gives the whole directory one rule instead.
        return false;
    }
    out.append(&mut mine);
    block
}

/// The targets outside the directory `dir` of the symlinks among its entries (a dotfiles
/// repository's `~/.ssh/id_ed25519 -> ~/dotfiles/ssh/id_ed25519`): the key is there, and the
/// link would lead to it. One level: links deeper inside are not looked at.
fn links_out(dir: &Path) -> Vec<PathBuf> {
    let Ok((entries, _)) = crate::paths::entries_of(dir) else {
        return Vec::new(); // a file, or unreadable to the caller as well
    };
    entries
        .into_iter()
        .map(|(name, kind)| (dir.join(name), kind))
        // A file system that does not give the type in the listing: asked per entry.
        .filter(|(path, kind)| match kind {
            rustix::fs::FileType::Unknown => {
                std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
            }
            kind => *kind == rustix::fs::FileType::Symlink,
        })
        .filter_map(|(path, _)| shofer_sys::fd::canonicalize(&path).ok())
        .filter(|t| !t.starts_with(dir))
        .collect()
}

/// The other paths at which the mount table shows a filesystem mounted inside `path`: each
/// shows part of what lies inside `path`, and no more.
fn inner_aliases(path: &Path, mounts: &[shofer_sys::proc::Mount]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for inner in mounts.iter().map(|m| Path::new(&m.point)) {
        if inner == path || !inner.starts_with(path) {
            continue;
        }
        for a in aliases_of(inner, mounts) {
            if !a.starts_with(path) && !out.contains(&a) {
                out.push(a);
            }
        }
    }
    out
}

/// Every other path at which the mount table shows the object at `path` (a bind mount of a
/// home elsewhere, a filesystem mounted twice): Landlock walks a bind mount's path up from its
/// mount point, so each such alias must be hidden too. Only aliases that reach the same inode
/// are kept (a mount stacked over one shows something else).
fn aliases_of(path: &Path, mounts: &[shofer_sys::proc::Mount]) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let Ok(me) = std::fs::symlink_metadata(path) else {
        return Vec::new();
    };
    // The mount that shows `path`: the deepest mount point above it, the last one mounted.
    let Some(own) = mounts
        .iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| Path::new(&m.point).components().count())
    else {
        return Vec::new();
    };
    let Ok(rest) = path.strip_prefix(&own.point) else {
        return Vec::new();
    };
    let in_fs = Path::new(&own.root).join(rest);
    let mut out: Vec<PathBuf> = Vec::new();
    for m in mounts.iter().filter(|m| m.dev == own.dev) {
        // The mount shows the location or a directory above it: the alias is below its point.
        if let Ok(below) = in_fs.strip_prefix(&m.root) {
            let alias = Path::new(&m.point).join(below);
            // (The mount that shows `path` names it again: no call for that one.)
            let same = || {
                std::fs::symlink_metadata(&alias)
                    .is_ok_and(|a| (a.dev(), a.ino()) == (me.dev(), me.ino()))
            };
            if alias != path && !out.contains(&alias) && same() {
                out.push(alias);
            }
            continue;
        }
        // The mount shows something inside the location (a bind of one key file): its point
        // is hidden whole, if it reaches the object at that place inside.
        if let Ok(inside) = Path::new(&m.root).strip_prefix(&in_fs) {
            let point = PathBuf::from(&m.point);
            let target = std::fs::symlink_metadata(path.join(inside));
            let same = std::fs::symlink_metadata(&point).is_ok_and(|a| {
                target
                    .as_ref()
                    .is_ok_and(|t| (a.dev(), a.ino()) == (t.dev(), t.ino()))
            });
            if same && point != path && !out.contains(&point) {
                out.push(point);
            }
        }
    }
    out
}

/// `O_PATH` descriptor of `path` relative to `dir`, without following a final symlink
/// (`dir_only`: it must be a directory).
fn open_path(dir: impl AsFd, path: &Path, dir_only: bool) -> rustix::io::Result<OwnedFd> {
    let mut flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if dir_only {
        flags |= OFlags::DIRECTORY;
    }
    rustix::fs::openat(dir, path, flags, Mode::empty())
}

/// Whether `fd` takes a rule, and as a directory: `None` for a symlink.
fn rule_kind(fd: &OwnedFd) -> Option<bool> {
    let st = rustix::fs::fstat(fd).ok()?;
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::Symlink => None,
        rustix::fs::FileType::Directory => Some(true),
        _ => Some(false),
    }
}

/// Why `path` may not be hidden in this run, if it may not: it is, lies inside or holds the
/// worktree, an `--allow-write` path or git's metadata, or holds any other writable path (a
/// writable rule grants reading beneath it).
fn conflict(opened: &OpenedPolicy, path: &Path) -> Option<&'static str> {
    for rule in &opened.policy.writable {
        if rule.path.starts_with(path) {
            return Some(match rule.origin {
                RuleOrigin::Worktree => "it holds the worktree",
                RuleOrigin::AllowWrite => "it holds an --allow-write path",
                RuleOrigin::GitMetadata => "it holds the worktree's git metadata",
                _ => "it holds a writable path",
            });
        }
        if path.starts_with(&rule.path) {
            return Some(match rule.origin {
                RuleOrigin::Worktree => "it lies inside the worktree",
                RuleOrigin::AllowWrite => "it lies inside an --allow-write path",
                RuleOrigin::GitMetadata => "it lies inside the worktree's git metadata",
                _ => "it lies inside a writable path",
            });
        }
    }
    None
}

/// The stderr line naming the existing secret locations left readable, or `None`.
pub(crate) fn note(not_hidden: &[(PathBuf, &'static str)]) -> Option<String> {
    (!not_hidden.is_empty()).then(|| {
        let list: Vec<String> = not_hidden
            .iter()
            .map(|(p, why)| format!("{} ({why})", p.display()))
            .collect();
        format!(
            "shofer-sandbox: note: secret locations left readable because the writable set holds them: {}",
            list.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_are_cleaned_lexically() {
        let cwd = Path::new("/w/d");
        assert_eq!(absolute(Path::new("x/../y"), cwd), PathBuf::from("/w/d/y"));
        assert_eq!(absolute(Path::new("/a/./b/"), cwd), PathBuf::from("/a/b"));
        assert_eq!(absolute(Path::new("../../.."), cwd), PathBuf::from("/"));
    }

    #[test]
    fn note_names_each_location_with_its_reason() {
        assert_eq!(note(&[]), None);
        let n = note(&[(PathBuf::from("/h/wt/.netrc"), "it lies inside the worktree")]).unwrap();
        assert!(
            n.contains("/h/wt/.netrc (it lies inside the worktree)"),
            "{n}"
        );
    }

    #[test]
    fn read_rules_skip_hidden_entries_and_ancestors_and_list_each_ancestor() {
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        let home = t.path().join("home");
        for d in [".ssh", ".config/gh", ".config/other", "src"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join(".bashrc"), "").unwrap();
        std::os::unix::fs::symlink("src", home.join("link")).unwrap();
        let hidden = [home.join(".ssh"), home.join(".config/gh")];
        let rules = read_rules(&hidden, &[]);
        let name = |fd: &OwnedFd| {
            std::fs::read_link(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(fd)
            ))
            .unwrap()
        };
        let readable: Vec<PathBuf> = rules.readable.iter().map(|(f, _)| name(f)).collect();
        let listable: Vec<PathBuf> = rules.listable.iter().map(name).collect();
        for r in [
            home.join(".bashrc"),
            home.join("src"),
            home.join(".config/other"),
        ] {
            assert!(readable.contains(&r), "{r:?} in {readable:?}");
        }
        for h in &hidden {
            assert!(
                !readable.iter().any(|r| r.starts_with(h)),
                "{h:?} in {readable:?}"
            );
        }
        assert!(!readable.contains(&home), "{readable:?}");
        assert!(
            !readable.contains(&home.join("link")),
            "symlinks take no rule"
        );
        assert!(listable.contains(&home) && listable.contains(&home.join(".config")));
        assert!(listable.contains(&PathBuf::from("/")));
    }
}
