//! What git's fsck finds wrong in a tree, commit or tag on its own, for the loose objects a
//! run adds ([`crate::git::objects`]): an object git cannot parse makes every walk and `git gc`
//! fail on the host ("unable to parse object"), and a tree can check out into `.git` or
//! carry a `.gitmodules` git refuses.
//!
//! Ported from git's fsck.c (`verify_headers`, `fsck_commit`, `fsck_tag_standalone`,
//! `fsck_tree`, `verify_ordered`), tag.c (`parse_tag_buffer`) and path.c (`is_hfs_dotgit`,
//! `is_ntfs_dotgit` and their `.gitmodules` and `.gitattributes` forms); stricter where git
//! only warns about a name that could reach `.git` (git's checkout refuses those names).
//! Within one object, an id named both as a directory and as a file or symlink, or a commit
//! whose parent is its own tree, is refused: one of the two is the wrong type, and `git gc`
//! fails on it.
//!
//! Not checked: what an author, committer or tagger line holds (name, email, date, time
//! zone). git's fsck calls a malformed one an error, but git itself fetches such commits
//! (`fetch.fsckObjects` is off by default) and real histories hold them; refusing one here
//! would leave the ref the fetch wrote pointing at a missing object. Nor what needs more than
//! the object: that a named object exists and has the type it says, the content of a blob
//! named `.gitmodules` or `.gitattributes`, the depth of a chain of trees.

use std::collections::HashSet;
use std::io;

/// Checks `content`, an object of type `kind` (`tree`, `commit` or `tag`; other types pass)
/// whose object ids are `raw` bytes (20 for SHA-1, 32 for SHA-256).
///
/// # Errors
/// `InvalidData` saying what is wrong, as git's fsck would.
pub(crate) fn check(kind: &[u8], content: &[u8], raw: usize) -> io::Result<()> {
    match kind {
        b"tree" => tree(content, raw),
        b"commit" => commit(content, raw),
        b"tag" => tag(content, raw),
        _ => Ok(()),
    }
}

/// A tree: entries `<octal mode> <name>\0<id>`, sorted as git sorts them (a directory's name
/// compared as if it ended in `/`), no name twice (even apart: `a`, `a-`, directory `a`),
/// none empty, holding `/`, or naming `.`, `..` or `.git` (any case, and the forms HFS+ and
/// NTFS read as `.git`, also after a `\`); `.gitmodules` only a file, `.gitattributes` a file
/// or a symlink; no id both a directory's and a file's or symlink's.
fn tree(content: &[u8], raw: usize) -> io::Result<()> {
    let mut rest = content;
    let mut previous: Option<(&[u8], bool)> = None;
    let mut names: HashSet<&[u8]> = HashSet::new();
    let (mut dirs, mut files): (HashSet<&[u8]>, HashSet<&[u8]>) = Default::default();
    while !rest.is_empty() {
        let sp = rest.iter().position(|&b| b == b' ');
        let nul = rest.iter().position(|&b| b == 0);
        let (Some(sp), Some(nul)) = (sp, nul) else {
            return Err(invalid("a tree entry without a mode or a name"));
        };
        let digits = &rest[..sp];
        if sp == 0 || sp > nul || !digits.iter().all(|b| (b'0'..=b'7').contains(b)) {
            return Err(invalid("a tree entry whose mode is not octal digits"));
        }
        if nul == sp + 1 || rest.len() < nul + 1 + raw {
            return Err(invalid("a tree entry git cannot parse"));
        }
        let mode = digits
            .iter()
            .fold(0u64, |m, d| (m << 3 | u64::from(d - b'0')) & 0xffff_ffff);
        let name = &rest[sp + 1..nul];
        if name.contains(&b'/') || name == b"." || name == b".." {
            return Err(invalid("a tree entry named '.' or '..' or holding a '/'"));
        }
        let kind = mode & 0o170000;
        // Each `\`-separated part too: NTFS reads `\` as a separator (git's fsck_tree).
        for (i, part) in name.split(|&b| b == b'\\').enumerate() {
            let hfs = |needle: &[u8]| i == 0 && is_hfs_dot(part, needle);
            if hfs(b"git") || is_ntfs_dotgit(part) {
                return Err(invalid("a tree entry git would check out as '.git'"));
            }
            if kind != 0o100000
                && (hfs(b"gitmodules") || is_ntfs_dot(part, b"gitmodules", b"gi7eba"))
            {
                return Err(invalid("a tree whose '.gitmodules' is not a file"));
            }
            let attributes =
                hfs(b"gitattributes") || is_ntfs_dot(part, b"gitattributes", b"gi7d29");
            if !matches!(kind, 0o100000 | 0o120000) && attributes {
                return Err(invalid("a tree whose '.gitattributes' is not a file"));
            }
        }
        let dir = kind == 0o040000;
        let id = &rest[nul + 1..nul + 1 + raw];
        let clash = match kind {
            0o040000 => {
                dirs.insert(id);
                files.contains(id)
            }
            0o100000 | 0o120000 => {
                files.insert(id);
                dirs.contains(id)
            }
            _ => false,
        };
        if clash {
            return Err(invalid(
                "a tree that names one id as a directory and as a file",
            ));
        }
        if let Some((before, before_dir)) = previous {
            if sort_key(before, before_dir)
                .cmp(sort_key(name, dir))
                .is_ge()
            {
                return Err(invalid("a tree whose entries are not sorted"));
            }
        }
        if !names.insert(name) {
            return Err(invalid("a tree that holds a name twice"));
        }
        previous = Some((name, dir));
        rest = &rest[nul + 1 + raw..];
    }
    Ok(())
}

/// The bytes git sorts a tree entry by: its name, and `/` after a directory's.
fn sort_key(name: &[u8], dir: bool) -> impl Iterator<Item = u8> + '_ {
    name.iter().copied().chain(dir.then_some(b'/'))
}

/// A commit: `tree <id>`, any `parent <id>` lines (none its tree), `author` and `committer`
/// lines, in that order; headers as [`headers`] needs.
fn commit(content: &[u8], raw: usize) -> io::Result<()> {
    headers(content)?;
    let mut rest = id_line(content, b"tree ", raw)
        .ok_or_else(|| invalid("a commit that does not start with its tree"))?;
    let tree = &content[5..5 + 2 * raw];
    while rest.starts_with(b"parent ") {
        let after = id_line(rest, b"parent ", raw)
            .ok_or_else(|| invalid("a commit with a parent line git cannot parse"))?;
        if rest[7..7 + 2 * raw].eq_ignore_ascii_case(tree) {
            return Err(invalid("a commit whose parent is its own tree"));
        }
        rest = after;
    }
    let mut authors = 0;
    while let Some(person) = rest.strip_prefix(b"author ") {
        authors += 1;
        rest = after_line(person);
    }
    if authors == 0 || !rest.starts_with(b"committer ") {
        return Err(invalid("a commit without its author and committer lines"));
    }
    Ok(())
}

/// A tag: `object <id>`, `type <blob|tree|commit|tag>`, `tag <name>` lines, at least as long
/// as git's `parse_tag_buffer` needs (the id's hex digits and 24 bytes); headers as
/// [`headers`] needs.
fn tag(content: &[u8], raw: usize) -> io::Result<()> {
    headers(content)?;
    if content.len() < 2 * raw + 24 {
        return Err(invalid("a tag shorter than git reads one"));
    }
    let rest = id_line(content, b"object ", raw)
        .ok_or_else(|| invalid("a tag that does not start with its object"))?;
    let (kind, rest) =
        value_line(rest, b"type ").ok_or_else(|| invalid("a tag without its type line"))?;
    if !matches!(kind, b"blob" | b"tree" | b"commit" | b"tag") {
        return Err(invalid("a tag of a type git does not know"));
    }
    value_line(rest, b"tag ").ok_or_else(|| invalid("a tag without its name line"))?;
    Ok(())
}

/// git's `verify_headers`: no NUL before the blank line that ends the headers, and without
/// a blank line (no message) the last header still ends in a newline.
fn headers(content: &[u8]) -> io::Result<()> {
    let end = content
        .windows(2)
        .position(|w| w == b"\n\n")
        .unwrap_or(content.len());
    if content[..end].contains(&0) {
        return Err(invalid("a NUL byte in its headers"));
    }
    if end == content.len() && content.last() != Some(&b'\n') {
        return Err(invalid("its last header line does not end"));
    }
    Ok(())
}

/// `<key><hex id of raw bytes>\n` at the start of `rest`: what follows it.
fn id_line<'a>(rest: &'a [u8], key: &[u8], raw: usize) -> Option<&'a [u8]> {
    let body = rest.strip_prefix(key)?;
    let ok = body.len() > 2 * raw
        && body[..2 * raw].iter().all(u8::is_ascii_hexdigit)
        && body[2 * raw] == b'\n';
    ok.then(|| &body[2 * raw + 1..])
}

/// `<key><value>\n` at the start of `rest`: the value and what follows the line.
fn value_line<'a>(rest: &'a [u8], key: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    let body = rest.strip_prefix(key)?;
    let nl = body.iter().position(|&b| b == b'\n')?;
    Some((&body[..nl], &body[nl + 1..]))
}

/// What follows the first newline of `rest` (nothing without one).
fn after_line(rest: &[u8]) -> &[u8] {
    rest.iter()
        .position(|&b| b == b'\n')
        .map_or(&[][..], |nl| &rest[nl + 1..])
}

/// git's `is_hfs_dot_generic`: `name` is `.` and `needle` (lowercase ASCII) in any case, with
/// the code points HFS+ ignores (zero-width and direction marks) anywhere, and nothing after
/// but, as git reads it, bytes that are not UTF-8.
fn is_hfs_dot(name: &[u8], needle: &[u8]) -> bool {
    let text = match std::str::from_utf8(name) {
        Ok(s) => s,
        // git's reader stops at the first malformed sequence, as at the end.
        Err(e) => std::str::from_utf8(&name[..e.valid_up_to()]).unwrap_or_default(),
    };
    let ignored = |c: &char| matches!(*c as u32, 0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff);
    let mut chars = text.chars().filter(|c| !ignored(c));
    if chars.next() != Some('.') {
        return false;
    }
    for &want in needle {
        match chars.next() {
            Some(c) if c.is_ascii() && c.to_ascii_lowercase() as u8 == want => {}
            _ => return false,
        }
    }
    matches!(chars.next(), None | Some('/'))
}

/// git's `is_ntfs_dotgit`: `.git` or its short name `git~1`, in any case, followed only by
/// spaces and periods (which NTFS drops) up to the end, a `\` or a `:` (a stream name).
fn is_ntfs_dotgit(name: &[u8]) -> bool {
    let lower = name.to_ascii_lowercase();
    let rest = lower
        .strip_prefix(b".git")
        .or_else(|| lower.strip_prefix(b"git~1"));
    rest.is_some_and(only_spaces_and_periods)
}

/// git's `is_ntfs_dot_generic`: `.` and `needle` (lowercase ASCII) in any case; or its
/// short names, the first six bytes and `~1` to `~4`, or `short` (git's hash-based prefix)
/// shortened with `~` and digits to eight bytes; each followed only by spaces and periods.
fn is_ntfs_dot(name: &[u8], needle: &[u8], short: &[u8]) -> bool {
    let lower = name.to_ascii_lowercase();
    if let Some(rest) = lower
        .strip_prefix(b".")
        .and_then(|r| r.strip_prefix(needle))
    {
        return only_spaces_and_periods(rest);
    }
    let regular = lower.len() > 7
        && lower[..6] == needle[..6]
        && lower[6] == b'~'
        && (b'1'..=b'4').contains(&lower[7]);
    if regular {
        return only_spaces_and_periods(&lower[8..]);
    }
    // The fall-back short name: up to six bytes of `short`, `~`, a digit 1-9, then digits to
    // eight bytes (git reads a `~` at the eighth byte with the digit after it).
    let (mut i, mut saw_tilde) = (0, false);
    while i < 8 {
        let Some(&c) = lower.get(i) else {
            return false;
        };
        if saw_tilde {
            if !c.is_ascii_digit() {
                return false;
            }
        } else if c == b'~' {
            i += 1;
            if !lower.get(i).is_some_and(|d| (b'1'..=b'9').contains(d)) {
                return false;
            }
            saw_tilde = true;
        } else if i >= 6 || c != short[i] {
            return false;
        }
        i += 1;
    }
    only_spaces_and_periods(&lower[i..])
}

/// Whether `rest` is spaces and periods up to its end, a `\` or a `:`.
fn only_spaces_and_periods(rest: &[u8]) -> bool {
    rest.iter()
        .find(|&&b| b != b' ' && b != b'.')
        .is_none_or(|&b| b == b'\\' || b == b':')
}

/// An `InvalidData` error saying `why`.
fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: [u8; 20] = [0x11; 20];

    /// A tree of `entries`, each with its own id.
    fn tree_of(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut t = Vec::new();
        for (i, (mode, name)) in entries.iter().enumerate() {
            t.extend(format!("{mode} {name}\0").as_bytes());
            let mut id = ID;
            id[19] = i as u8;
            t.extend(id);
        }
        t
    }

    /// A tree of `entries`, all with the same id.
    fn tree_same_id(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut t = Vec::new();
        for (mode, name) in entries {
            t.extend(format!("{mode} {name}\0").as_bytes());
            t.extend(ID);
        }
        t
    }

    /// Trees git writes pass; trees git's fsck calls broken, or that check out into `.git`,
    /// are refused (an attack pass found several accepted and the host's `git gc` failing).
    #[test]
    fn trees_git_would_call_broken_are_refused() {
        let ok = [
            vec![("100644", "a"), ("100644", "b")],
            // "a.c" sorts before the directory "a" ("a/"), which sorts before "a0".
            vec![("100644", "a.c"), ("40000", "a"), ("100644", "a0")],
            // A directory mode git does not write is still a directory for the order.
            vec![("100644", "a.c"), ("40755", "a"), ("100644", "a0")],
            vec![("120000", "link"), ("160000", "sub")],
            vec![("100644", ".gitmodules"), ("120000", "gitmod")],
            vec![("100644", "git~1x"), ("100644", "git~2")],
        ];
        for t in ok {
            check(b"tree", &tree_of(&t), 20).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        }
        let bad = [
            vec![("100644", "b"), ("100644", "a")],
            vec![("100644", "a"), ("100644", "a")],
            vec![("100644", "a"), ("40000", "a")],
            vec![("40000", "a"), ("100644", "a.c")],
            vec![("40755", "a"), ("100644", "a.c")],
            // The same name apart: git's verify_ordered keeps a stack for these.
            vec![("100644", "a"), ("100644", "a-"), ("40000", "a")],
            vec![("100644", ".git")],
            vec![("40000", ".GIT")],
            vec![("40000", ".git. . ")],
            vec![("40000", "GIT~1")],
            vec![("40000", "x\\.git")],
            vec![("40000", ".g\u{200c}it")],
            vec![("100644", "..")],
            vec![("100644", ".")],
            vec![("100644", "a/b")],
            vec![("10064x", "a")],
            vec![("120000", ".gitmodules")],
            vec![("120000", ".GitModules ")],
            vec![("120000", "gitmod~1")],
            vec![("120000", "gi7eba~9")],
            vec![("120000", ".\u{feff}gitmodules")],
            vec![("120000", "x\\.gitmodules")],
            // git's fsck: gitmodulesBlob, gitattributesBlob.
            vec![("40000", ".gitmodules")],
            vec![("160000", ".gitmodules")],
            vec![("40000", ".gitattributes")],
            vec![("160000", "GI7D29~1")],
        ];
        for t in bad {
            assert!(check(b"tree", &tree_of(&t), 20).is_err(), "{t:?}");
        }
        // One id as a file (or symlink) and as a directory: `git gc` fails on it.
        for t in [
            vec![("100644", "a"), ("40000", "b")],
            vec![("40000", "a"), ("120000", "b")],
        ] {
            assert!(check(b"tree", &tree_same_id(&t), 20).is_err(), "{t:?}");
        }
        for t in [
            vec![("100644", "a"), ("100755", "b"), ("120000", "c")],
            vec![("40000", "a"), ("40000", "b"), ("160000", "c")],
            vec![("120000", ".gitattributes")],
        ] {
            check(b"tree", &tree_same_id(&t), 20).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        }
        let mut short = tree_of(&[("100644", "a")]);
        short.pop();
        assert!(check(b"tree", &short, 20).is_err(), "an id cut short");
    }

    /// Commits and tags whose headers or identities git's fsck calls broken are refused;
    /// what git writes passes.
    #[test]
    fn commits_and_tags_git_would_call_broken_are_refused() {
        let (hex, other) = ("1".repeat(40), "2".repeat(40));
        let commit = |author: &str, committer: &str, rest: &str| {
            format!("tree {hex}\nparent {other}\nauthor {author}\ncommitter {committer}\n{rest}")
        };
        let good = "A U Thor <a@example.com> 1700000000 +0100";
        for c in [
            commit(good, good, "\nmessage\n"),
            commit(good, good, ""),
            commit("a <> 0 -0000", good, "gpgsig x\n y\n\n"),
            commit(" <a> 9223372036854775807 +0000", good, "\n"),
            format!("tree {hex}\nauthor {good}\nauthor {good}\ncommitter {good}\n"),
        ] {
            check(b"commit", c.as_bytes(), 20).unwrap_or_else(|e| panic!("{c}: {e}"));
        }
        // What an identity line holds is not checked: git fetches such commits (an attack pass
        // showed a refused one leaving the fetched ref pointing at a missing object).
        for p in [
            "<a@b> 1 +0000",
            "a a@b 1 +0000",
            "a <a@b> 01 +0000",
            "a <a@b> 9223372036854775808 +0000",
            "a <a@b> 1 +05",
        ] {
            for c in [commit(p, good, "\n"), commit(good, p, "\n")] {
                check(b"commit", c.as_bytes(), 20).unwrap_or_else(|e| panic!("{c}: {e}"));
            }
        }
        for c in [
            format!("tree {hex}\ncommitter {good}\n\nm\n"),
            format!("tree {hex}\nauthor {good}\n\nm\n"),
            format!("parent {hex}\ntree {hex}\nauthor {good}\ncommitter {good}\n"),
            format!("tree {hex}\nparent {other}\nparent {hex}\nauthor {good}\ncommitter {good}\n"),
            format!("tree {hex}\nauthor {good}\ncommitter {good}"), // unterminatedHeader
            format!("tree {hex}\nauthor {good}\ncommitter {good}\nx\0y\n\nm"), // nulInHeader
            "\nm\n".to_string(),
        ] {
            assert!(check(b"commit", c.as_bytes(), 20).is_err(), "{c:?}");
        }
        // A NUL in the message is git's to allow.
        check(b"commit", commit(good, good, "\nm\0\n").as_bytes(), 20).unwrap();

        let tag = |rest: &str| format!("object {hex}\ntype commit\n{rest}");
        for t in [
            tag(&format!("tag v1\ntagger {good}\n\nm\n")),
            tag("tag v1\ntagger a <a@b> 01 +0000\n"),
            tag("tag version-1\n"),
            tag("tag v1\n\nm\n"),
        ] {
            check(b"tag", t.as_bytes(), 20).unwrap_or_else(|e| panic!("{t}: {e}"));
        }
        for t in [
            tag(&format!("tagger {good}\n\nm\n")),
            tag("tag v1"), // the name line does not end: git's parse_tag_buffer fails
            format!("object {hex}\ntype commits\ntag v1\n"),
            format!("object {hex}\ntag v1\n"),
            format!("type commit\nobject {hex}\ntag v1\n"),
            tag("tag v\0\n"),
            // Shorter than parse_tag_buffer reads (hex digits + 24 bytes): 63 bytes.
            format!("object {hex}\ntype tag\ntag a\n"),
        ] {
            assert!(check(b"tag", t.as_bytes(), 20).is_err(), "{t:?}");
        }
    }
}
