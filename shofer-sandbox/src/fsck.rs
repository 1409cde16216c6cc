//! What git's fsck finds wrong in a tree, commit or tag on its own, for the loose objects a
//! run adds ([`crate::objects`]): an object git cannot parse makes every walk and `git gc`
//! fail on the host ("unable to parse object"), and one its fsck calls an error makes every
//! push to a server that checks (`receive.fsckObjects`) fail.
//!
//! Ported from git's fsck.c (`verify_headers`, `fsck_ident`, `fsck_commit`,
//! `fsck_tag_standalone`, `fsck_tree`, `verify_ordered`) and path.c (`is_hfs_dotgit`,
//! `is_ntfs_dotgit` and their `.gitmodules` forms); stricter where git only warns about a
//! name that could reach `.git` (git's checkout refuses those names). Not checked, because
//! it needs more than the object: that a named object exists and has the type it says, and
//! the content of a blob named `.gitmodules` or `.gitattributes`.

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
/// none empty, holding `/`, or naming `.`, `..` or `.git` (any case, and
/// the forms HFS+ and NTFS read as `.git`, also after a `\`); no `.gitmodules` symlink.
fn tree(content: &[u8], raw: usize) -> io::Result<()> {
    let mut rest = content;
    let mut previous: Option<(&[u8], bool)> = None;
    let mut names: HashSet<&[u8]> = HashSet::new();
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
        // Each `\`-separated part too: NTFS reads `\` as a separator (git's fsck_tree).
        let mut parts = name.split(|&b| b == b'\\');
        if let Some(first) = parts.next() {
            if is_hfs_dot(first, b"git") || is_ntfs_dotgit(first) {
                return Err(invalid("a tree entry git would check out as '.git'"));
            }
            if mode & 0o170000 == 0o120000 && is_gitmodules(first) {
                return Err(invalid("a tree whose '.gitmodules' is a symbolic link"));
            }
        }
        for part in parts {
            if is_ntfs_dotgit(part) {
                return Err(invalid("a tree entry git would check out as '.git'"));
            }
            if mode & 0o170000 == 0o120000 && is_ntfs_dot(part, b"gitmodules", b"gi7eba") {
                return Err(invalid("a tree whose '.gitmodules' is a symbolic link"));
            }
        }
        let dir = mode & 0o170000 == 0o040000;
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

/// A commit: `tree <id>`, any `parent <id>` lines, one `author` and a `committer` line that
/// [`ident`] accepts, in that order; headers as [`headers`] needs.
fn commit(content: &[u8], raw: usize) -> io::Result<()> {
    headers(content)?;
    let mut rest = id_line(content, b"tree ", raw)
        .ok_or_else(|| invalid("a commit that does not start with its tree"))?;
    while rest.starts_with(b"parent ") {
        rest = id_line(rest, b"parent ", raw)
            .ok_or_else(|| invalid("a commit with a parent line git cannot parse"))?;
    }
    let mut authors = 0;
    while let Some(person) = rest.strip_prefix(b"author ") {
        authors += 1;
        rest = ident(person)?;
    }
    if authors != 1 {
        return Err(invalid(format!(
            "a commit with {authors} author lines (one is needed)"
        )));
    }
    let person = rest
        .strip_prefix(b"committer ")
        .ok_or_else(|| invalid("a commit without a committer line after its author"))?;
    ident(person).map(drop)
}

/// A tag: `object <id>`, `type <blob|tree|commit|tag>`, `tag <name>`, then an optional
/// `tagger` line that [`ident`] accepts; headers as [`headers`] needs.
fn tag(content: &[u8], raw: usize) -> io::Result<()> {
    headers(content)?;
    let rest = id_line(content, b"object ", raw)
        .ok_or_else(|| invalid("a tag that does not start with its object"))?;
    let (kind, rest) =
        value_line(rest, b"type ").ok_or_else(|| invalid("a tag without its type line"))?;
    if !matches!(kind, b"blob" | b"tree" | b"commit" | b"tag") {
        return Err(invalid("a tag of a type git does not know"));
    }
    let (_, rest) =
        value_line(rest, b"tag ").ok_or_else(|| invalid("a tag without its name line"))?;
    match rest.strip_prefix(b"tagger ") {
        Some(person) => ident(person).map(drop),
        None => Ok(()),
    }
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

/// git's `fsck_ident` on what follows `author `, `committer ` or `tagger `: `<name> <<email>>
/// <seconds> <+|-><hhmm>\n`, a name (possibly empty after its first byte) with no `<` or `>`,
/// an email with neither, seconds in decimal without leading zero that fit a signed 64-bit
/// time, a four-digit time zone. Stricter than git in one way: the seconds are digits only
/// (git's `strtoumax` also skips blanks and takes a sign, which no git writes). Returns what
/// follows the line.
fn ident(line: &[u8]) -> io::Result<&[u8]> {
    let bad = |what: &str| {
        Err(invalid(format!(
            "an author, committer or tagger line {what}"
        )))
    };
    let nl = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    let (p, after) = (&line[..nl], line.get(nl + 1..).unwrap_or(&[]));
    if p.first() == Some(&b'<') {
        return bad("without a name before its email");
    }
    let Some(open) = p.iter().position(|&b| b == b'<' || b == b'>') else {
        return bad("without an email");
    };
    if p[open] == b'>' {
        return bad("whose name holds '>'");
    }
    if open == 0 || p[open - 1] != b' ' {
        return bad("without a space before its email");
    }
    let email = &p[open + 1..];
    let Some(close) = email.iter().position(|&b| b == b'<' || b == b'>') else {
        return bad("whose email does not end");
    };
    if email[close] != b'>' {
        return bad("whose email holds '<'");
    }
    let Some(date) = email[close + 1..].strip_prefix(b" ") else {
        return bad("without a space before its date");
    };
    let digits = date.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits > 1 && date[0] == b'0' {
        return bad("whose date has a leading zero");
    }
    let seconds = std::str::from_utf8(&date[..digits]).ok();
    if digits > 0 && seconds.and_then(|s| s.parse::<i64>().ok()).is_none() {
        return bad("whose date does not fit 64 bits");
    }
    let Some(zone) = date[digits..].strip_prefix(b" ").filter(|_| digits > 0) else {
        return bad("without a date");
    };
    let zone_ok = zone.len() == 5
        && matches!(zone[0], b'+' | b'-')
        && zone[1..].iter().all(u8::is_ascii_digit);
    if !zone_ok || nl == line.len() {
        return bad("without a time zone +hhmm or -hhmm ending the line");
    }
    Ok(after)
}

/// Whether `name` is `.gitmodules` as git's checkout on HFS+ or NTFS would read it.
fn is_gitmodules(name: &[u8]) -> bool {
    is_hfs_dot(name, b"gitmodules") || is_ntfs_dot(name, b"gitmodules", b"gi7eba")
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

    fn tree_of(entries: &[(&str, &str)]) -> Vec<u8> {
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
        ];
        for t in bad {
            assert!(check(b"tree", &tree_of(&t), 20).is_err(), "{t:?}");
        }
        let mut short = tree_of(&[("100644", "a")]);
        short.pop();
        assert!(check(b"tree", &short, 20).is_err(), "an id cut short");
    }

    /// Commits and tags whose headers or identities git's fsck calls broken are refused;
    /// what git writes passes.
    #[test]
    fn commits_and_tags_git_would_call_broken_are_refused() {
        let hex = "1".repeat(40);
        let commit = |author: &str, committer: &str, rest: &str| {
            format!("tree {hex}\nparent {hex}\nauthor {author}\ncommitter {committer}\n{rest}")
        };
        let good = "A U Thor <a@example.com> 1700000000 +0100";
        for c in [
            commit(good, good, "\nmessage\n"),
            commit(good, good, ""),
            commit("a <> 0 -0000", good, "gpgsig x\n y\n\n"),
            commit(" <a> 9223372036854775807 +0000", good, "\n"),
        ] {
            check(b"commit", c.as_bytes(), 20).unwrap_or_else(|e| panic!("{c}: {e}"));
        }
        let bad_people = [
            "<a@b> 1 +0000",                     // missingNameBeforeEmail
            "a > <a@b> 1 +0000",                 // badName
            "a a@b 1 +0000",                     // missingEmail
            "a<a@b> 1 +0000",                    // missingSpaceBeforeEmail
            "a <a@b 1 +0000",                    // badEmail
            "a <a<b> 1 +0000",                   // badEmail
            "a <a@b>1 +0000",                    // missingSpaceBeforeDate
            "a <a@b> 01 +0000",                  // zeroPaddedDate
            "a <a@b> x +0000",                   // badDate
            "a <a@b>  +0000",                    // badDate
            "a <a@b> 1+0000",                    // badDate
            "a <a@b> 9223372036854775808 +0000", // badDateOverflow
            "a <a@b> 1 0000",                    // badTimezone
            "a <a@b> 1 +000",                    // badTimezone
            "a <a@b> 1 +0000 ",                  // badTimezone
        ];
        for p in bad_people {
            for c in [commit(p, good, "\n"), commit(good, p, "\n")] {
                assert!(check(b"commit", c.as_bytes(), 20).is_err(), "{c}");
            }
        }
        for c in [
            format!("tree {hex}\ncommitter {good}\n\nm\n"),
            format!("tree {hex}\nauthor {good}\n\nm\n"),
            format!("tree {hex}\nauthor {good}\nauthor {good}\ncommitter {good}\n"),
            format!("parent {hex}\ntree {hex}\nauthor {good}\ncommitter {good}\n"),
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
            tag("tag v1\n"),
            tag("tag v1\n\nm\n"),
        ] {
            check(b"tag", t.as_bytes(), 20).unwrap_or_else(|e| panic!("{t}: {e}"));
        }
        for t in [
            tag(&format!("tagger {good}\n\nm\n")),
            tag("tag v1"), // the name line does not end: git's parse_tag_buffer fails
            tag("tag v1\ntagger a <a@b> 01 +0000\n"),
            format!("object {hex}\ntype commits\ntag v1\n"),
            format!("object {hex}\ntag v1\n"),
            format!("type commit\nobject {hex}\ntag v1\n"),
            tag("tag v\0\n"),
        ] {
            assert!(check(b"tag", t.as_bytes(), 20).is_err(), "{t:?}");
        }
    }
}
