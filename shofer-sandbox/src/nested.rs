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
const MAX_INDEX: u64 = 256 << 20;
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

/// The index to read and the worktree it belongs to.
#[derive(Debug, Clone)]
pub struct NestedScan {
    worktree: PathBuf,
    /// The index file (`<gitdir>/index`).
    pub index: PathBuf,
    hash_len: usize,
}

impl NestedScan {
    /// A scan for the worktree whose gitdir is `gitdir` (`object_format`: the repository's
    /// `extensions.objectFormat`, `sha1` when unset).
    pub fn new(worktree: &Path, gitdir: &Path, sha256: bool) -> NestedScan {
        NestedScan {
            worktree: worktree.to_path_buf(),
            index: gitdir.join("index"),
            hash_len: if sha256 { 32 } else { 20 },
        }
    }

    /// Reads the index and quarantines every program-naming configuration of a nested
    /// repository (inside the worktree) that a gitlink leads the host's git to.
    /// Also returns how many gitlinks the index has.
    pub fn check(&self) -> (Checked, usize) {
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
        for rel in links.into_iter().take(MAX_GITLINKS) {
            let dir = self.worktree.join(&rel);
            for config in self.configs_of(&dir) {
                let Ok(text) = std::fs::read_to_string(&config) else {
                    continue;
                };
                let Some(key) = dangerous_key(&text) else {
                    continue;
                };
                let moved_to = PathBuf::from(format!(
                    "{}.shofer-quarantined-{}",
                    config.display(),
                    crate::gitguard::random_suffix()
                ));
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

    /// The configuration files git would read for the repository at `dir`, restricted to
    /// those inside the worktree (the command's to write).
    fn configs_of(&self, dir: &Path) -> Vec<PathBuf> {
        let dot = dir.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot) else {
            return Vec::new();
        };
        let gitdir = if meta.is_dir() {
            dot
        } else if meta.is_file() {
            let Ok(text) = std::fs::read_to_string(&dot) else {
                return Vec::new();
            };
            let Some(target) = text.lines().next().and_then(|l| l.strip_prefix("gitdir:")) else {
                return Vec::new();
            };
            dir.join(target.trim())
        } else {
            return Vec::new();
        };
        let Ok(gitdir) = std::fs::canonicalize(&gitdir) else {
            return Vec::new();
        };
        let mut dirs = vec![gitdir.clone()];
        if let Ok(c) = std::fs::read_to_string(gitdir.join("commondir")) {
            if let Ok(common) = std::fs::canonicalize(gitdir.join(c.trim())) {
                dirs.push(common);
            }
        }
        let mut out = Vec::new();
        for d in dirs {
            if !d.starts_with(&self.worktree) {
                continue;
            }
            for name in ["config", "config.worktree"] {
                let p = d.join(name);
                if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// The paths of the index's gitlink entries.
    fn gitlinks(&self) -> io::Result<Vec<PathBuf>> {
        let meta = std::fs::metadata(&self.index)?;
        if meta.len() > MAX_INDEX {
            return Err(io::Error::other(format!(
                "larger than {} MiB",
                MAX_INDEX >> 20
            )));
        }
        let data = std::fs::read(&self.index)?;
        parse_gitlinks(&data, self.hash_len).ok_or_else(|| io::Error::other("malformed index"))
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

/// Gitlink paths (mode 160000) of an index file. `None` when it is malformed.
pub fn parse_gitlinks(data: &[u8], hash_len: usize) -> Option<Vec<PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    let be32 = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
    };
    if data.get(0..4)? != b"DIRC" {
        return None;
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(8)? as usize;
    let mut pos = 12;
    let mut prev: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for _ in 0..count {
        let start = pos;
        let mode = be32(pos + 24)?;
        pos += 40 + hash_len;
        let flags = u16::from_be_bytes(data.get(pos..pos + 2)?.try_into().ok()?);
        pos += 2;
        if version >= 3 && flags & 0x4000 != 0 {
            pos += 2;
        }
        let path = if version == 4 {
            // Prefix compression: strip N bytes of the previous path, append the suffix.
            let mut c = *data.get(pos)?;
            pos += 1;
            let mut strip = (c & 127) as usize;
            while c & 128 != 0 {
                c = *data.get(pos)?;
                pos += 1;
                strip = ((strip + 1) << 7) | (c & 127) as usize;
            }
            let end = pos + data.get(pos..)?.iter().position(|&b| b == 0)?;
            let keep = prev.len().checked_sub(strip)?;
            let mut p = prev[..keep].to_vec();
            p.extend_from_slice(&data[pos..end]);
            pos = end + 1;
            p
        } else {
            let end = pos + data.get(pos..)?.iter().position(|&b| b == 0)?;
            let p = data[pos..end].to_vec();
            // 1-8 NULs pad the entry to a multiple of eight bytes.
            let len = end + 1 - start;
            pos = start + len.div_ceil(8) * 8;
            p
        };
        if mode & 0o170000 == 0o160000 {
            out.push(PathBuf::from(std::ffi::OsStr::from_bytes(&path)));
        }
        prev = path;
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
        for v in ["2", "3", "4"] {
            git(&root, &["update-index", "--index-version", v]);
            let data = std::fs::read(root.join(".git/index")).unwrap();
            assert_eq!(
                parse_gitlinks(&data, 20).unwrap(),
                vec![PathBuf::from("deeper/sub2"), PathBuf::from("sub")],
                "index v{v}"
            );
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
        let scan = NestedScan::new(&root, &root.join(".git"), false);
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

    #[test]
    fn program_keys_are_recognised() {
        assert!(runs_a_program("core", "fsmonitor", "/x"));
        assert!(!runs_a_program("core", "fsmonitor", "TRUE"));
        assert!(runs_a_program("filter.lfs", "smudge", "x"));
        assert!(runs_a_program("includeIf.gitdir:/x", "path", "x"));
        assert!(!runs_a_program("user", "name", "x"));
    }
}
