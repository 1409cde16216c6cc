//! Nested repositories the host's git would enter through a gitlink.
//!
//! `git status` recurses into every gitlink (a submodule entry, mode 160000) of the index
//! whose directory holds a repository, and runs git there: that repository's `config` is read,
//! so a `core.fsmonitor` naming a program runs it on the host. The command can create such a
//! repository inside the worktree and register it (`git add sub`), since the index is
//! writable. Registered submodules normally keep their gitdir in `<common>/modules/`, which
//! is protected ([`crate::gitprotect`]); a repository whose gitdir lies inside the worktree is
//! the command's to write.
//!
//! [`NestedScan::check`] reads the index (format: git's Documentation/gitformat-index.txt,
//! versions 2-4), follows each gitlink to its gitdir and common dir, and *quarantines* every
//! configuration file inside the worktree that sets a key naming a program: it is renamed to
//! `<name>.shofer-quarantined-<random>` (kept, never deleted), so the host's git reads no
//! configuration there. It runs whenever the index or a nested config changes (the watcher of
//! [`crate::gitguard`]) and when the command ends; between the command's write and the check
//! a host git could still read the file (the same window as the guard's).

use std::io;
use std::path::{Path, PathBuf};

/// Largest index read (bytes); a bigger one is not scanned and the run says so.
const MAX_INDEX: usize = 256 << 20;
/// Largest nested configuration checked (bytes); a bigger one is moved aside unread.
const MAX_CONFIG: usize = 4 << 20;
/// Largest `.git` or `commondir` pointer file followed (bytes; git refuses a larger `.git`).
const MAX_POINTER: usize = 1 << 20;
/// Most gitlinks followed per check.
const MAX_GITLINKS: usize = 4096;

/// Configuration keys whose value git runs as a program (git-config(1)). `core.fsmonitor`
/// counts only when it is not a boolean (`true` is the built-in daemon).
fn runs_a_program(section: &str, key: &str, value: &str) -> bool {
    let section = section.to_ascii_lowercase();
    let base = section.split('.').next().unwrap_or("");
    match (base, key) {
        ("core", "fsmonitor") => !matches!(
            value.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0" | ""
        ),
        ("core", "hookspath" | "sshcommand" | "editor" | "pager" | "askpass" | "gitproxy") => true,
        ("diff", "external" | "command" | "textconv") => true,
        ("filter", "clean" | "smudge" | "process") => true,
        ("merge", "driver") => true,
        ("credential", "helper") => true,
        ("gpg", "program") | ("sequence", "editor") | ("uploadpack", "packobjectshook") => true,
        ("include", "path") => true,
        _ => base.starts_with("includeif") || key == "command" || key.ends_with("cmd"),
    }
}

/// One configuration file taken out of the host's reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// Where it was.
    pub path: PathBuf,
    /// Where it is now.
    pub moved_to: PathBuf,
    /// The key that named a program.
    pub key: String,
}

/// What one check did.
#[derive(Debug, Default)]
pub struct Checked {
    /// Files moved aside.
    pub quarantined: Vec<Quarantined>,
    /// Files that should have been moved aside but could not be, with why.
    pub failed: Vec<(PathBuf, String)>,
}

/// The index to read, the worktree it belongs to and the writable set.
#[derive(Debug, Clone)]
pub struct NestedScan {
    worktree: PathBuf,
    /// The writable set's roots (canonical): a nested repository's configuration beneath one
    /// is the command's to write.
    writable: Vec<PathBuf>,
    /// The index file (`<gitdir>/index`).
    pub index: PathBuf,
    hash_len: usize,
    /// The index's bytes, read again into the same buffer at every check (a fresh buffer of a
    /// large index costs a page fault per page each time).
    buf: Vec<u8>,
}

impl NestedScan {
    /// A scan for the worktree whose gitdir is `gitdir` (`sha256`: the repository's
    /// `extensions.objectFormat`), with the writable set's roots `writable` (canonical; the
    /// worktree is one).
    pub fn new(worktree: &Path, gitdir: &Path, sha256: bool, writable: &[PathBuf]) -> NestedScan {
        NestedScan {
            worktree: worktree.to_path_buf(),
            writable: writable.to_vec(),
            index: gitdir.join("index"),
            hash_len: if sha256 { 32 } else { 20 },
            buf: Vec::new(),
        }
    }

    /// Reads the index and quarantines every program-naming configuration of a nested
    /// repository (inside the worktree) that a gitlink leads the host's git to.
    /// Also returns how many gitlinks the index has.
    pub fn check(&mut self) -> (Checked, usize) {
        let mut out = Checked::default();
        let links = match self.gitlinks() {
            Ok(l) => l,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return (out, 0),
            Err(e) => {
                out.failed
                    .push((self.index.clone(), format!("reading the index: {e}")));
                return (out, 0);
            }
        };
        let count = links.len();
        if count > MAX_GITLINKS {
            out.failed.push((
                self.index.clone(),
                format!("{count} gitlinks: only the first {MAX_GITLINKS} are checked"),
            ));
        }
        for rel in links.into_iter().take(MAX_GITLINKS) {
            let dir = self.worktree.join(&rel);
            for (config, unreadable) in self.configs_of(&dir) {
                // Git follows a symlink there and reads any bytes: what cannot be read as a
                // regular file of bounded size is moved aside too, and so is a pointer file
                // shofer cannot follow.
                let key = match unreadable {
                    Some(why) => format!("(not checkable: {why})"),
                    None => match crate::paths::read_regular(&config, MAX_CONFIG) {
                        Ok(bytes) => match dangerous_key(&String::from_utf8_lossy(&bytes)) {
                            Some(key) => key,
                            None => continue,
                        },
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => format!("(not checkable: {e})"),
                    },
                };
                // Built from the path's bytes: `display()` would replace a non-UTF-8 byte.
                let mut moved_to = config.clone().into_os_string();
                moved_to.push(format!(
                    ".shofer-quarantined-{}",
                    crate::gitguard::random_suffix()
                ));
                let moved_to = PathBuf::from(moved_to);
                match rename_noreplace(&config, &moved_to) {
                    Ok(()) => out.quarantined.push(Quarantined {
                        path: config,
                        moved_to,
                        key,
                    }),
                    Err(e) => out.failed.push((config, e.to_string())),
                }
            }
        }
        (out, count)
    }

    /// The configuration files git would read for the repository at `dir` (whatever is at
    /// their path: a symlink or FIFO too), restricted to those beneath a writable root (the
    /// command's to write), each with `None`; or a pointer file (`.git`, `commondir`) that
    /// shofer cannot follow, with why (it is moved aside). `dir/.git` is followed as git
    /// follows it (`read_gitfile_gently` and `get_common_dir_noenv` in git's setup.c): a
    /// symlink to a directory is a gitdir; a file of at most 1 MiB starting `gitdir: ` names
    /// one, up to its first NUL, without its trailing newlines and carriage returns (any
    /// other byte, a space too, is part of the path); `commondir` the same, without prefix.
    fn configs_of(&self, dir: &Path) -> Vec<(PathBuf, Option<String>)> {
        use std::os::unix::ffi::OsStrExt;
        let pointer = |bytes: &[u8]| -> PathBuf {
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            let mut b = &bytes[..end];
            while let [rest @ .., b'\n' | b'\r'] = b {
                b = rest;
            }
            PathBuf::from(std::ffi::OsStr::from_bytes(b))
        };
        let dot_path = dir.join(".git");
        let Ok(dot) = std::fs::canonicalize(&dot_path) else {
            return Vec::new();
        };
        let gitdir = if dot.is_dir() {
            dot
        } else {
            match crate::paths::read_regular(&dot, MAX_POINTER) {
                Ok(bytes) => match bytes.strip_prefix(b"gitdir: ") {
                    Some(rest) => dir.join(pointer(rest)),
                    None => return Vec::new(), // git: not a repository
                },
                Err(e) => return vec![(dot_path, Some(e.to_string()))],
            }
        };
        let Ok(gitdir) = std::fs::canonicalize(&gitdir) else {
            return Vec::new();
        };
        let writable = |p: &Path| self.writable.iter().any(|w| p.starts_with(w));
        let mut out = Vec::new();
        let mut dirs = vec![gitdir.clone()];
        let commondir = gitdir.join("commondir");
        match crate::paths::read_regular(&commondir, MAX_POINTER) {
            Ok(bytes) => {
                if let Ok(common) = std::fs::canonicalize(gitdir.join(pointer(&bytes))) {
                    dirs.push(common);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if writable(&commondir) => out.push((commondir, Some(e.to_string()))),
            Err(_) => {}
        }
        for d in dirs {
            if !writable(&d) {
                continue;
            }
            for name in ["config", "config.worktree"] {
                let p = d.join(name);
                if std::fs::symlink_metadata(&p).is_ok() {
                    out.push((p, None));
                }
            }
        }
        out
    }

    /// The paths of the index's gitlink entries (the index read as a regular file of at
    /// most [`MAX_INDEX`] bytes: the command can put a FIFO or a symlink to `/dev/zero` there).
    fn gitlinks(&mut self) -> io::Result<Vec<PathBuf>> {
        crate::paths::read_regular_into(&self.index, MAX_INDEX, &mut self.buf)?;
        parse_gitlinks(&self.buf, self.hash_len).ok_or_else(|| io::Error::other("malformed index"))
    }
}

/// The first key of `text` (a git config file) that names a program, as `section.key`.
fn dangerous_key(text: &str) -> Option<String> {
    crate::gitprotect::config_entries(text)
        .into_iter()
        .find(|(s, k, v)| runs_a_program(s, k, v))
        .map(|(s, k, _)| format!("{s}.{k}"))
}

fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let f = std::ffi::CString::new(from.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let t = std::ffi::CString::new(to.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // Safety: NUL-terminated paths; RENAME_NOREPLACE never overwrites what is at `to`.
    let ret = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Gitlink paths (mode 160000) of an index file (gitformat-index(5), versions 2-4). `None`
/// when it is malformed. Runs at every index change while the command runs and at its exit,
/// so it allocates only for gitlinks: versions 2 and 3 take a name's length from the entry's
/// flags (12 bits; the NUL is looked for only past 0xFFF), version 4 rebuilds each
/// prefix-compressed name in one buffer.
pub fn parse_gitlinks(data: &[u8], hash_len: usize) -> Option<Vec<PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    let be32 = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
    };
    let nul_from =
        |at: usize| -> Option<usize> { Some(at + data.get(at..)?.iter().position(|&b| b == 0)?) };
    if data.get(0..4)? != b"DIRC" {
        return None;
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(8)? as usize;
    let mut pos = 12;
    let mut name: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for _ in 0..count {
        let start = pos;
        let gitlink = be32(pos + 24)? & 0o170000 == 0o160000;
        pos += 40 + hash_len;
        let flags = u16::from_be_bytes(data.get(pos..pos + 2)?.try_into().ok()?);
        pos += 2;
        if version >= 3 && flags & 0x4000 != 0 {
            pos += 2;
        }
        let path = if version == 4 {
            // Prefix compression: strip N bytes of the previous name, append the suffix.
            let mut c = *data.get(pos)?;
            pos += 1;
            let mut strip = (c & 127) as usize;
            while c & 128 != 0 {
                c = *data.get(pos)?;
                pos += 1;
                strip = ((strip + 1) << 7) | (c & 127) as usize;
            }
            let end = nul_from(pos)?;
            name.truncate(name.len().checked_sub(strip)?);
            name.extend_from_slice(&data[pos..end]);
            pos = end + 1;
            &name[..]
        } else {
            let short = (flags & 0xFFF) as usize;
            let end = if short < 0xFFF {
                (*data.get(pos + short)? == 0).then_some(pos + short)?
            } else {
                nul_from(pos + short)?
            };
            let path = &data[pos..end];
            // 1-8 NULs pad the entry to a multiple of eight bytes.
            pos = start + (end + 1 - start).div_ceil(8) * 8;
            path
        };
        if gitlink {
            out.push(PathBuf::from(std::ffi::OsStr::from_bytes(path)));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(ok.status.success(), "{args:?}: {ok:?}");
    }

    #[test]
    fn gitlinks_are_found_in_every_index_version() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        git(&root, &["init", "-q"]);
        std::fs::write(root.join("a-file"), "x").unwrap();
        for sub in ["sub", "deeper/sub2"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
            git(&root.join(sub), &["init", "-q"]);
            git(
                &root.join(sub),
                &["commit", "-q", "--allow-empty", "-m", "s"],
            );
        }
        git(&root, &["add", "a-file", "sub", "deeper/sub2"]);
        // A name longer than the flags' 12 bits (0xFFF means "look for the NUL"), and a
        // gitlink after it: its offset depends on the long name being skipped right.
        let long = format!("{}file", format!("{}/", "x".repeat(200)).repeat(21));
        let blob = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"; // the empty blob
        let commit = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"; // any id will do
        for (mode, id, path) in [("100644", blob, long.as_str()), ("160000", commit, "zz")] {
            git(
                &root,
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("{mode},{id},{path}"),
                ],
            );
        }
        for v in ["2", "3", "4"] {
            git(&root, &["update-index", "--index-version", v]);
            let data = std::fs::read(root.join(".git/index")).unwrap();
            assert_eq!(
                parse_gitlinks(&data, 20).unwrap(),
                vec![
                    PathBuf::from("deeper/sub2"),
                    PathBuf::from("sub"),
                    PathBuf::from("zz")
                ],
                "index v{v}"
            );
            // A cut inside the entries is malformed, never a panic or a shorter list.
            let last = data.windows(3).rposition(|w| w == b"zz\0").unwrap();
            for cut in [13, data.len() / 2, last + 2] {
                assert_eq!(parse_gitlinks(&data[..cut], 20), None, "v{v} cut at {cut}");
            }
        }
    }

    #[test]
    fn a_gitlinked_repository_naming_a_program_is_quarantined() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        git(&root, &["init", "-q"]);
        std::fs::create_dir(root.join("sub")).unwrap();
        git(&root.join("sub"), &["init", "-q"]);
        git(
            &root.join("sub"),
            &["commit", "-q", "--allow-empty", "-m", "s"],
        );
        git(&root, &["add", "sub"]);
        let mut scan = scan_of(&root);
        assert!(scan.check().0.quarantined.is_empty());
        git(&root.join("sub"), &["config", "core.fsmonitor", "true"]);
        assert!(
            scan.check().0.quarantined.is_empty(),
            "the built-in monitor"
        );
        git(
            &root.join("sub"),
            &["config", "core.fsmonitor", "/bin/evil"],
        );
        let (c, links) = scan.check();
        assert_eq!(links, 1);
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, root.join("sub/.git/config"));
        assert_eq!(c.quarantined[0].key, "core.fsmonitor");
        assert!(!root.join("sub/.git/config").exists());
        assert!(c.quarantined[0].moved_to.exists());
    }

    /// The scan of the repository at `root`, whose worktree is the only writable root.
    fn scan_of(root: &Path) -> NestedScan {
        NestedScan::new(root, &root.join(".git"), false, &[root.to_path_buf()])
    }

    /// A repository at `root/sub` registered as a gitlink of `root`.
    fn gitlinked(root: &Path) {
        git(root, &["init", "-q"]);
        std::fs::create_dir(root.join("sub")).unwrap();
        git(&root.join("sub"), &["init", "-q"]);
        git(
            &root.join("sub"),
            &["commit", "-q", "--allow-empty", "-m", "s"],
        );
        git(root, &["add", "sub"]);
    }

    /// `f` on another thread, or a failure after 10 s (a hang must not hang the suite).
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the check returns")
    }

    fn mkfifo(path: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // Safety: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn a_nested_config_git_would_read_is_moved_aside_whatever_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let other = tempfile::tempdir().unwrap(); // another writable root (as /tmp is)
        let other = std::fs::canonicalize(other.path()).unwrap();
        gitlinked(&root);
        let config = root.join("sub/.git/config");
        let evil = b"[core]\n\tfsmonitor = /bin/evil\n";
        type Plant<'a> = Box<dyn Fn() + 'a>;
        let cases: Vec<(&str, Plant)> = vec![
            // git reads any bytes; a Rust string cannot hold this one
            (
                "not UTF-8",
                Box::new(|| {
                    std::fs::write(&config, [b"# \xff\n".as_slice(), evil].concat()).unwrap()
                }),
            ),
            // git follows the symlink
            (
                "a symlink",
                Box::new(|| {
                    std::fs::write(root.join("evil-config"), evil).unwrap();
                    std::os::unix::fs::symlink(root.join("evil-config"), &config).unwrap();
                }),
            ),
            // a FIFO would stop the supervisor's read
            ("a FIFO", Box::new(|| mkfifo(&config))),
        ];
        for (what, plant) in cases {
            let _ = std::fs::remove_file(&config);
            plant();
            let mut scan = scan_of(&root);
            let (c, _) = within_10s(move || scan.check());
            assert_eq!(c.quarantined.len(), 1, "{what}: {c:?}");
            assert_eq!(c.quarantined[0].path, config, "{what}");
            assert!(std::fs::symlink_metadata(&config).is_err(), "{what}");
        }
        // The nested repository's gitdir in another writable root, through a `.git` file and
        // through a `.git` symlink: both are followed, as git follows them.
        git(&other, &["init", "-q", "--bare", "elsewhere.git"]);
        let elsewhere = other.join("elsewhere.git");
        git(&elsewhere, &["config", "core.fsmonitor", "/bin/evil"]);
        for pointer in ["file", "symlink"] {
            std::fs::remove_dir_all(root.join("sub/.git")).ok();
            std::fs::remove_file(root.join("sub/.git")).ok();
            if pointer == "file" {
                let text = format!("gitdir: {}\n", elsewhere.display());
                std::fs::write(root.join("sub/.git"), text).unwrap();
            } else {
                std::os::unix::fs::symlink(&elsewhere, root.join("sub/.git")).unwrap();
            }
            let mut outside_only = scan_of(&root);
            assert!(
                outside_only.check().0.quarantined.is_empty(),
                "{pointer}: not the command's"
            );
            let mut scan = NestedScan::new(
                &root,
                &root.join(".git"),
                false,
                &[root.clone(), other.clone()],
            );
            let (c, _) = scan.check();
            assert_eq!(c.quarantined.len(), 1, "{pointer}: {c:?}");
            assert_eq!(c.quarantined[0].path, elsewhere.join("config"), "{pointer}");
            let back = "[core]\n\tbare = true\n\tfsmonitor = /bin/evil\n";
            std::fs::write(elsewhere.join("config"), back).unwrap();
        }
    }

    /// `.git` and `commondir` read as git reads them: trailing newlines of any number, a
    /// leading space that is part of the path, bytes that are not UTF-8.
    #[test]
    fn pointer_files_are_followed_as_git_follows_them() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        gitlinked(&root);
        let sub = root.join("sub");
        let cases: [(&str, &[u8], &[u8]); 3] = [
            ("5,000 newlines", b"gd", &[b'\n'; 5000]),
            ("a leading space", b" gd", b"\n"),
            ("not UTF-8", b"gd\xff", b"\r\n"),
        ];
        for (what, name, tail) in cases {
            let gd = sub.join(std::ffi::OsStr::from_bytes(name));
            std::fs::rename(sub.join(".git"), &gd).unwrap();
            std::fs::write(
                sub.join(".git"),
                [b"gitdir: ".as_slice(), name, tail].concat(),
            )
            .unwrap();
            git(&sub, &["config", "core.fsmonitor", "/bin/evil"]);
            let mut scan = scan_of(&root);
            let (c, _) = scan.check();
            assert_eq!(c.quarantined.len(), 1, "{what}: {c:?}");
            assert_eq!(c.quarantined[0].path, gd.join("config"), "{what}");
            std::fs::rename(&c.quarantined[0].moved_to, gd.join("config")).unwrap();
            git(&sub, &["config", "--unset", "core.fsmonitor"]);
            std::fs::remove_file(sub.join(".git")).unwrap();
            std::fs::rename(&gd, sub.join(".git")).unwrap();
        }
        // A pointer too large to follow is moved aside itself.
        std::fs::rename(sub.join(".git"), sub.join("gd")).unwrap();
        let big = [b"gitdir: gd".as_slice(), &vec![b'\n'; MAX_POINTER]].concat();
        std::fs::write(sub.join(".git"), big).unwrap();
        let mut scan = scan_of(&root);
        let (c, _) = scan.check();
        assert_eq!(c.quarantined.len(), 1, "{c:?}");
        assert_eq!(c.quarantined[0].path, sub.join(".git"));
    }

    /// More gitlinks than one check follows fail the check (the run exits 125).
    #[test]
    fn more_gitlinks_than_are_checked_is_a_failure() {
        use std::io::Write;
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        gitlinked(&root);
        let commit = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        let mut info = String::new();
        for i in 0..=MAX_GITLINKS {
            info.push_str(&format!("160000 {commit}\ta{i:05}\n"));
        }
        let mut child = std::process::Command::new("git")
            .args(["update-index", "--index-info"])
            .current_dir(&root)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(info.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success());
        let mut scan = scan_of(&root);
        let (c, links) = scan.check();
        assert_eq!(links, MAX_GITLINKS + 2);
        assert_eq!(c.failed.len(), 1, "{c:?}");
        assert!(c.failed[0].1.contains("only the first"), "{c:?}");
    }

    #[test]
    fn an_index_that_is_not_a_regular_file_fails_the_check_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        gitlinked(&root);
        let index = root.join(".git/index");
        for what in ["a FIFO", "a symlink to /dev/zero"] {
            std::fs::remove_file(&index).unwrap();
            if what == "a FIFO" {
                mkfifo(&index);
            } else {
                std::os::unix::fs::symlink("/dev/zero", &index).unwrap();
            }
            let mut scan = scan_of(&root);
            let (c, links) = within_10s(move || scan.check());
            assert_eq!(links, 0, "{what}");
            assert_eq!(c.failed.len(), 1, "{what}: {c:?}");
            assert!(
                c.failed[0].1.starts_with("reading the index"),
                "{what}: {c:?}"
            );
        }
    }

    #[test]
    fn program_keys_are_recognised() {
        assert!(runs_a_program("core", "fsmonitor", "/x"));
        assert!(!runs_a_program("core", "fsmonitor", "TRUE"));
        assert!(runs_a_program("filter.lfs", "smudge", "x"));
        assert!(runs_a_program("includeIf.gitdir:/x", "path", "x"));
        assert!(!runs_a_program("user", "name", "x"));
    }
}
