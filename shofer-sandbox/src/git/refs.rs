//! git's refs as a map, read from a directory in the files format: the loose refs under
//! `refs/` over `packed-refs`. The private view ([`crate::git::view`]) reads the host's
//! common dir before a run and the command's copy after it; the command wrote the second, so
//! every byte is attacker-controlled: safe Rust, bounded (entries, depth, sizes), nothing
//! followed (a symlink or special file is not a ref here), and a name git would refuse
//! ([`valid_name`]) is no ref either.
//!
//! - [`parse_value`], [`parse_packed`]: the two formats, pure (fuzzed: `crate::fuzzing`);
//! - [`read`]: the map of a directory;
//! - [`packed_without`]: a `packed-refs` without one ref, for a view's start.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::FileType;

use crate::paths;

/// A ref's value: an object name (lowercase hex) or another ref's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Oid(String),
    Symbolic(String),
}

impl Value {
    /// The bytes git writes for it in a loose ref.
    pub fn loose_bytes(&self) -> Vec<u8> {
        match self {
            Value::Oid(h) => format!("{h}\n").into_bytes(),
            Value::Symbolic(n) => format!("ref: {n}\n").into_bytes(),
        }
    }
}

/// Refs by name.
pub type Refs = BTreeMap<String, Value>;

/// The most refs one directory may hold here; beyond, reading fails.
const MAX_REFS: usize = 500_000;
/// The deepest `refs/` hierarchy read.
const MAX_DEPTH: usize = 32;
/// The largest loose ref file.
const MAX_LOOSE: usize = 4096;
/// The largest `packed-refs`.
const MAX_PACKED: usize = 512 << 20;

/// Whether `s` is an object name of `hex_len` lowercase hex digits.
fn is_oid(s: &str, hex_len: usize) -> bool {
    s.len() == hex_len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` is a ref name git accepts (git-check-ref-format(1), the rules for a full
/// name under `refs/`), conservatively: anything doubtful is refused.
pub fn valid_name(name: &str) -> bool {
    if !name.starts_with("refs/") || name.len() > 1024 || name.ends_with('/') {
        return false;
    }
    if name.ends_with('.') || name.contains("..") || name.contains("@{") || name.contains("//") {
        return false;
    }
    let bad = |b: u8| b < 0x20 || b == 0x7f || b" ~^:?*[\\".contains(&b);
    if name.bytes().any(bad) {
        return false;
    }
    // A leading `-` too: git's own commands refuse such branches, and a script handing
    // names to git would pass an option.
    name.split('/').all(|c| {
        !c.is_empty()
            && !c.starts_with('.')
            && !c.starts_with('-')
            && !c.ends_with(".lock")
            && c != "@"
    })
}

/// A loose ref's contents: `<oid>\n` or `ref: <name>\n` (`hex_len`: 40 or 64).
pub fn parse_value(bytes: &[u8], hex_len: usize) -> Option<Value> {
    let text = std::str::from_utf8(bytes).ok()?;
    let line = text.strip_suffix('\n').unwrap_or(text);
    if let Some(target) = line.strip_prefix("ref: ") {
        let target = target.trim_end();
        return valid_name(target).then(|| Value::Symbolic(target.to_string()));
    }
    is_oid(line, hex_len).then(|| Value::Oid(line.to_string()))
}

/// `packed-refs`: a `# pack-refs with:` header, `<oid> <name>` lines, and `^<oid>` lines
/// peeling the line before. Any other line (or an invalid name) is an error, as it is for
/// git.
pub fn parse_packed(bytes: &[u8], hex_len: usize) -> Result<Refs, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "packed-refs is not UTF-8".to_string())?;
    let mut out = Refs::new();
    let mut last_was_ref = false;
    for (n, line) in text.lines().enumerate() {
        if n == 0 && line.starts_with("# pack-refs with:") {
            continue;
        }
        if let Some(peeled) = line.strip_prefix('^') {
            if !last_was_ref || !is_oid(peeled, hex_len) {
                return Err(format!(
                    "packed-refs line {}: unexpected peeled line",
                    n + 1
                ));
            }
            last_was_ref = false;
            continue;
        }
        let (oid, name) = line
            .split_once(' ')
            .filter(|(o, name)| is_oid(o, hex_len) && valid_name(name))
            .ok_or_else(|| format!("packed-refs line {}: not `<oid> <ref>`", n + 1))?;
        if out.len() >= MAX_REFS {
            return Err(format!("more than {MAX_REFS} refs"));
        }
        out.insert(name.to_string(), Value::Oid(oid.to_string()));
        last_was_ref = true;
    }
    Ok(out)
}

/// The refs of the git directory `dir` (opened as a directory): `packed-refs`, then every
/// loose ref under `refs/` over it. A loose file that is no ref (`*.lock`, a symlink, a FIFO,
/// a name git refuses, bytes that are no value) is skipped, as git skips what it cannot
/// read.
///
/// # Errors
/// An unreadable or malformed `packed-refs`, more than [`MAX_REFS`] refs, or a directory that
/// cannot be listed.
pub fn read(dir: &OwnedFd, hex_len: usize) -> Result<Refs, String> {
    let mut out = match paths::read_small_file(dir, "packed-refs", MAX_PACKED) {
        Ok(bytes) => parse_packed(&bytes, hex_len)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Refs::new(),
        Err(e) => return Err(format!("packed-refs: {e}")),
    };
    let refs = match paths::openat_dir(dir, Path::new("refs")) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(format!("refs/: {e}")),
    };
    // Depth first without recursion: (directory, its ref-name prefix, depth).
    let mut todo = vec![(refs, "refs".to_string(), 0usize)];
    let mut seen = 0usize;
    while let Some((fd, prefix, depth)) = todo.pop() {
        let names = paths::entries(&fd).map_err(|e| format!("{prefix}/: {e}"))?;
        for (os_name, ft) in names {
            seen += 1;
            if seen > MAX_REFS {
                return Err(format!("more than {MAX_REFS} entries under refs/"));
            }
            let Some(name) = os_name.to_str() else {
                continue;
            };
            let full = format!("{prefix}/{name}");
            let ft = match ft {
                FileType::Unknown => match paths::stat_at(&fd, name) {
                    Ok(st) => FileType::from_raw_mode(st.st_mode),
                    Err(_) => continue,
                },
                ft => ft,
            };
            match ft {
                FileType::Directory if depth < MAX_DEPTH => {
                    if let Ok(sub) = paths::openat_dir(&fd, Path::new(name)) {
                        todo.push((sub, full, depth + 1));
                    }
                }
                // Only what the directory lists as a regular file is opened (no device node
                // is), and only as one.
                FileType::RegularFile if valid_name(&full) => {
                    let value = paths::read_at(&fd, &os_name, MAX_LOOSE as u64)
                        .ok()
                        .flatten()
                        .and_then(|(b, _)| parse_value(&b, hex_len));
                    if let Some(v) = value {
                        out.insert(full, v);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

/// `packed-refs` text `text` without the ref `name`'s line (and the peeled line after it);
/// `None` when it has no such line.
pub fn packed_without(text: &[u8], name: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut dropping = false;
    for line in text.split_inclusive(|&b| b == b'\n') {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        if body.starts_with(b"^") && dropping {
            continue;
        }
        dropping = body
            .split(|&b| b == b' ')
            .nth(1)
            .is_some_and(|n| n == name.as_bytes());
        if !dropping {
            out.extend_from_slice(line);
        }
    }
    (out.len() != text.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn names_git_refuses_are_no_refs() {
        for bad in [
            "HEAD",
            "refs/heads/",
            "refs/heads/a..b",
            "refs/heads/.x",
            "refs/heads/x.lock",
            "refs/heads/a b",
            "refs/heads/a@{1}",
            "refs/heads/a\nrefs/heads/b",
            "refs//x",
            "refs/heads/x.",
            "refs/heads/@",
            "refs/heads/--output=x",
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        for good in [
            "refs/heads/main",
            "refs/tags/v1.0",
            "refs/stash",
            "refs/heads/a/b-c_d",
        ] {
            assert!(valid_name(good), "{good:?}");
        }
    }

    #[test]
    fn values_and_packed_refs_parse_as_git_writes_them() {
        assert_eq!(
            parse_value(format!("{A}\n").as_bytes(), 40),
            Some(Value::Oid(A.into()))
        );
        assert_eq!(
            parse_value(b"ref: refs/heads/main\n", 40),
            Some(Value::Symbolic("refs/heads/main".into()))
        );
        assert_eq!(parse_value(b"ref: HEAD\n", 40), None);
        assert_eq!(parse_value(A.to_uppercase().as_bytes(), 40), None);
        let packed = format!(
            "# pack-refs with: peeled fully-peeled sorted \n{A} refs/heads/main\n{A} refs/tags/v1\n^{A}\n"
        );
        let refs = parse_packed(packed.as_bytes(), 40).unwrap();
        assert_eq!(refs.len(), 2);
        assert!(parse_packed(format!("^{A}\n").as_bytes(), 40).is_err());
        assert!(parse_packed(format!("{A} refs/heads/a b\n").as_bytes(), 40).is_err());
    }

    #[test]
    fn a_removed_ref_leaves_packed_refs_without_its_lines() {
        let packed =
            format!("# pack-refs with: peeled\n{A} refs/tags/v1\n^{A}\n{A} refs/heads/main\n");
        let left = packed_without(packed.as_bytes(), "refs/tags/v1").unwrap();
        assert_eq!(
            String::from_utf8(left).unwrap(),
            format!("# pack-refs with: peeled\n{A} refs/heads/main\n")
        );
        assert_eq!(packed_without(packed.as_bytes(), "refs/tags/v2"), None);
    }
}
