//! Which configurations of a nested repository may stay where the host's git reads them: an
//! allow-list (issue 29, F5).
//!
//! A nested repository the host's git enters through a gitlink runs with that repository's
//! own `config` (and `config.worktree`), which the command wrote. Git grows keys that name a
//! program, a path to run or a file to include with every release (`core.fsmonitor`,
//! `submodule.<name>.update = !cmd`, `interactive.diffFilter`, `pager.<cmd>`,
//! `browser.<tool>.path`, `imap.tunnel`, `lfs.customtransfer.<x>.path`, …), so a list of
//! dangerous keys is always behind. [`judge`] instead keeps a configuration only when
//!
//! - it is written in a strict subset of git's grammar (one `[section]` or
//!   `[section "subsection"]` header or one `key = value` per line, `#`/`;` comments, quoted
//!   values with git's five escapes): anything git reads in a way a line reader could get
//!   wrong — a backslash-newline continuation, a byte-order mark, a key after a header on the
//!   same line, the old `[section.sub]` form, a carriage return, a NUL, bytes that are not
//!   UTF-8 — is refused, so the keys judged are exactly the keys git sees; and
//! - every key is on [`ALLOWED`], each with the values it may take.
//!
//! Anything else is refused, and the caller ([`crate::git::nested`]) moves the file aside. The
//! entry point is a pure function over bytes (fuzzed, and a property test feeds it arbitrary
//! bytes): it never panics and allocates at most a copy of its input.

/// Why a configuration is refused: the first key not on the list, or what in its grammar
/// is outside the subset read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `section[.subsection].key`: a key not on the allow-list (or a value it may not take).
    Key(String),
    /// Line (1-based) and what is wrong with it.
    Syntax(usize, &'static str),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Key(k) => write!(f, "{k} (not on the list of keys kept)"),
            Refusal::Syntax(line, why) => write!(f, "line {line}: {why} (not read as git may)"),
        }
    }
}

/// One `key = value` of a configuration, as git sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Section name, lowercased (git compares it so).
    pub section: String,
    /// Subsection, as written (git compares it case-sensitively).
    pub subsection: Option<String>,
    /// Key, lowercased.
    pub key: String,
    /// Value without quotes and comment; `None` for a bare key (boolean true).
    pub value: Option<String>,
}

/// The values a key may take.
#[derive(Clone, Copy)]
enum Value {
    /// One of git's boolean words, or none (a bare key).
    Bool,
    /// An integer, with git's `k`/`m`/`g` suffixes.
    Int,
    /// A boolean or one of these words (lowercase).
    BoolOr(&'static [&'static str]),
    /// One of these words (lowercase).
    OneOf(&'static [&'static str]),
    /// Text git never runs, opens or includes for this key (a name, a refspec, a time).
    Text,
    /// A repository URL whose transport is git's own ([`safe_url`]).
    Url,
}

/// Keys (section, subsection present, key) a nested repository's configuration may hold,
/// with their values. Each is there because git reads it as data: a setting, a name, a
/// refspec. Left out on purpose, among others: every key naming a program or hook
/// (`core.fsmonitor` too, even `true`: the built-in daemon is a host process started for the
/// command's repository), a path git opens (`core.excludesFile`, `core.attributesFile`,
/// `core.hooksPath`, `include*`), `remote.*.uploadpack`/`receivepack`/`vcs`/`proxy`,
/// `remote.*.promisor`, `extensions.partialClone` (a lazy fetch runs from `git status`),
/// `url.*.insteadOf`, `protocol.*`, `user.signingKey`, and every section not named here.
const ALLOWED: &[(&str, bool, &str, Value)] = &[
    // What `git init` and `git clone` write.
    ("core", false, "repositoryformatversion", Value::Int),
    ("core", false, "filemode", Value::Bool),
    ("core", false, "bare", Value::Bool),
    (
        "core",
        false,
        "logallrefupdates",
        Value::BoolOr(&["always"]),
    ),
    ("core", false, "ignorecase", Value::Bool),
    ("core", false, "precomposeunicode", Value::Bool),
    ("core", false, "symlinks", Value::Bool),
    ("core", false, "autocrlf", Value::BoolOr(&["input"])),
    (
        "core",
        false,
        "eol",
        Value::OneOf(&["lf", "crlf", "native"]),
    ),
    ("core", false, "safecrlf", Value::BoolOr(&["warn"])),
    ("core", false, "quotepath", Value::Bool),
    ("core", false, "trustctime", Value::Bool),
    (
        "core",
        false,
        "checkstat",
        Value::OneOf(&["default", "minimal"]),
    ),
    ("core", false, "splitindex", Value::Bool),
    ("core", false, "untrackedcache", Value::BoolOr(&["keep"])),
    ("core", false, "sparsecheckout", Value::Bool),
    ("core", false, "sparsecheckoutcone", Value::Bool),
    ("core", false, "abbrev", Value::OneOf(&[])),
    ("core", false, "compression", Value::Int),
    ("core", false, "loosecompression", Value::Int),
    // A directory git runs in (not a program); `crate::git::nested` follows it as git does and
    // moves aside one through /proc or /dev.
    ("core", false, "worktree", Value::Text),
    (
        "extensions",
        false,
        "objectformat",
        Value::OneOf(&["sha1", "sha256"]),
    ),
    ("extensions", false, "worktreeconfig", Value::Bool),
    ("index", false, "version", Value::Int),
    ("index", false, "skiphash", Value::Bool),
    ("index", false, "sparse", Value::Bool),
    ("init", false, "defaultbranch", Value::Text),
    ("user", false, "name", Value::Text),
    ("user", false, "email", Value::Text),
    // Remotes: names, refspecs, and a URL of git's own transports only (`ext::cmd` runs
    // cmd, `<helper>::` runs git-remote-<helper>, `fd::` reads descriptors).
    ("remote", true, "url", Value::Url),
    ("remote", true, "pushurl", Value::Url),
    ("remote", true, "fetch", Value::Text),
    ("remote", true, "push", Value::Text),
    (
        "remote",
        true,
        "tagopt",
        Value::OneOf(&["--no-tags", "--tags"]),
    ),
    ("remote", true, "prune", Value::Bool),
    ("remote", true, "prunetags", Value::Bool),
    ("remote", true, "mirror", Value::Bool),
    ("remote", true, "skipdefaultupdate", Value::Bool),
    ("remote", true, "skipfetchall", Value::Bool),
    ("branch", true, "remote", Value::Text),
    ("branch", true, "pushremote", Value::Text),
    ("branch", true, "merge", Value::Text),
    ("branch", true, "description", Value::Text),
    // `interactive` would open an editor at a pull.
    ("branch", true, "rebase", Value::BoolOr(&["merges"])),
    ("pull", false, "rebase", Value::BoolOr(&["merges"])),
    ("pull", false, "ff", Value::BoolOr(&["only"])),
    ("fetch", false, "prune", Value::Bool),
    ("fetch", false, "prunetags", Value::Bool),
    ("fetch", false, "writecommitgraph", Value::Bool),
    // Submodules: `update` only as one of git's own strategies (`!cmd` runs cmd), a URL as
    // for remotes.
    ("submodule", true, "url", Value::Url),
    ("submodule", true, "active", Value::Bool),
    (
        "submodule",
        true,
        "update",
        Value::OneOf(&["checkout", "rebase", "merge", "none"]),
    ),
    ("submodule", true, "branch", Value::Text),
    (
        "submodule",
        true,
        "ignore",
        Value::OneOf(&["none", "untracked", "dirty", "all"]),
    ),
    ("submodule", true, "shallow", Value::Bool),
    (
        "submodule",
        true,
        "fetchrecursesubmodules",
        Value::BoolOr(&["on-demand"]),
    ),
    ("submodule", false, "recurse", Value::Bool),
    ("submodule", false, "active", Value::Text),
    ("gc", false, "auto", Value::Int),
    ("gc", false, "autopacklimit", Value::Int),
    ("gc", false, "autodetach", Value::Bool),
    ("gc", false, "packrefs", Value::BoolOr(&["notbare"])),
    ("gc", false, "reflogexpire", Value::Text),
    ("gc", false, "reflogexpireunreachable", Value::Text),
    ("gc", false, "pruneexpire", Value::Text),
    ("gc", false, "worktreepruneexpire", Value::Text),
    ("gc", false, "writecommitgraph", Value::Bool),
    ("maintenance", false, "auto", Value::Bool),
    // What git-lfs writes into a clone's config (a format number).
    ("lfs", false, "repositoryformatversion", Value::Int),
];

/// Whether a configuration file's bytes may stay where a host git reads them: its entries
/// when every one is on the allow-list, else why not.
///
/// # Errors
/// [`Refusal`] for the first key not allowed, or for grammar outside the subset read.
pub fn judge(bytes: &[u8]) -> Result<Vec<Entry>, Refusal> {
    let entries = parse(bytes)?;
    for e in &entries {
        if !allowed(e) {
            let mut name = e.section.clone();
            if let Some(sub) = &e.subsection {
                name.push('.');
                name.push_str(sub);
            }
            name.push('.');
            name.push_str(&e.key);
            return Err(Refusal::Key(name));
        }
    }
    Ok(entries)
}

/// Whether `e` is on [`ALLOWED`] with a value it may take.
fn allowed(e: &Entry) -> bool {
    ALLOWED.iter().any(|&(section, sub, key, value)| {
        section == e.section
            && sub == e.subsection.is_some()
            && key == e.key
            && value_fits(value, e.value.as_deref())
    })
}

fn value_fits(kind: Value, value: Option<&str>) -> bool {
    let Some(v) = value else {
        return matches!(kind, Value::Bool | Value::BoolOr(_));
    };
    let lower = v.to_ascii_lowercase();
    let boolean = matches!(
        lower.as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0" | ""
    );
    match kind {
        Value::Bool => boolean,
        Value::BoolOr(words) => boolean || words.contains(&lower.as_str()),
        Value::OneOf(words) => {
            // `core.abbrev`: a number or `auto`/`no`.
            words.contains(&lower.as_str())
                || (words.is_empty() && (int(v) || matches!(lower.as_str(), "auto" | "no")))
        }
        Value::Int => int(v),
        Value::Text => true,
        Value::Url => safe_url(v),
    }
}

/// Git's integer: optional sign, digits, an optional `k`/`m`/`g` unit.
fn int(v: &str) -> bool {
    let v = v.strip_prefix(['-', '+']).unwrap_or(v);
    let v = v.strip_suffix(['k', 'K', 'm', 'M', 'g', 'G']).unwrap_or(v);
    !v.is_empty() && v.len() <= 20 && v.bytes().all(|b| b.is_ascii_digit())
}

/// A URL whose transport git carries out itself: `https://`, `http://`, `git://`, `ssh://`,
/// `file://`, or a local path (absolute, or `./`/`../`). Refused: `<helper>::` (git runs
/// `git-remote-<helper>`; `ext::` runs any command), an scp-like `host:path` (a `host` that
/// is a helper's name reads as one), and anything with a control character or a space.
fn safe_url(v: &str) -> bool {
    const SCHEMES: [&str; 5] = ["https://", "http://", "git://", "ssh://", "file://"];
    let lower = v.to_ascii_lowercase();
    let shaped = SCHEMES.iter().any(|s| lower.starts_with(s))
        || v.starts_with('/')
        || v.starts_with("./")
        || v.starts_with("../");
    shaped && !v.contains("::") && !v.chars().any(|c| c.is_control() || c == ' ')
}

/// The entries of `bytes`, read in the strict subset of git's grammar described in the
/// module docs.
///
/// # Errors
/// [`Refusal::Syntax`] at the first line outside it.
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry>, Refusal> {
    let text = std::str::from_utf8(bytes).map_err(|_| Refusal::Syntax(0, "not UTF-8"))?;
    if text.starts_with('\u{feff}') {
        return Err(Refusal::Syntax(1, "a byte-order mark"));
    }
    let mut entries = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    for (i, line) in text.split('\n').enumerate() {
        let n = i + 1;
        if line
            .bytes()
            .any(|b| b == b'\r' || b == 0 || b == 0x0b || b == 0x0c)
        {
            return Err(Refusal::Syntax(n, "a carriage return or control byte"));
        }
        let line = line.trim_matches([' ', '\t']);
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            section = Some(header(rest).ok_or(Refusal::Syntax(n, "a section header"))?);
            continue;
        }
        let Some((name, sub)) = &section else {
            return Err(Refusal::Syntax(n, "a key before any section"));
        };
        let (key, value) = key_value(line).ok_or(Refusal::Syntax(n, "a key or its value"))?;
        entries.push(Entry {
            section: name.clone(),
            subsection: sub.clone(),
            key,
            value,
        });
    }
    Ok(entries)
}

/// A section header after its `[`: `name]` or `name "sub"]`, then at most a comment.
fn header(rest: &str) -> Option<(String, Option<String>)> {
    let name_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(rest.len());
    let (name, mut rest) = rest.split_at(name_end);
    if name.is_empty() {
        return None;
    }
    let mut sub = None;
    if let Some(quoted) = rest.strip_prefix(" \"") {
        let mut s = String::new();
        let mut chars = quoted.char_indices();
        let end = loop {
            match chars.next()? {
                (at, '"') => break at,
                (_, '\\') => s.push(match chars.next()?.1 {
                    c @ ('"' | '\\') => c,
                    _ => return None,
                }),
                (_, c) => s.push(c),
            }
        };
        sub = Some(s);
        rest = &quoted[end + 1..];
    }
    let after = rest.strip_prefix(']')?.trim_start_matches([' ', '\t']);
    (after.is_empty() || after.starts_with(['#', ';'])).then(|| (name.to_ascii_lowercase(), sub))
}

/// `key`, or `key = value` (git's value grammar, config.c `parse_value`: quotes, the escapes
/// `\n \t \b \" \\`, a comment outside quotes, blanks outside quotes kept only between
/// characters of the value). A backslash ending the line (a
/// continuation) or any other escape is refused.
fn key_value(line: &str) -> Option<(String, Option<String>)> {
    let key_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(line.len());
    let (key, rest) = line.split_at(key_end);
    if !key.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let rest = rest.trim_start_matches([' ', '\t']);
    if rest.is_empty() {
        return Some((key.to_ascii_lowercase(), None));
    }
    // (Git refuses a key followed by anything but `=`, a comment too.)
    let raw = rest.strip_prefix('=')?;
    // Git's parse_value: blanks outside quotes count only between characters of the value.
    let mut value = String::new();
    let mut blanks = 0;
    let mut quoted = false;
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if !quoted && matches!(c, ' ' | '\t') {
            if !value.is_empty() {
                blanks += 1;
            }
            continue;
        }
        if !quoted && matches!(c, '#' | ';') {
            break;
        }
        value.extend(std::iter::repeat_n(' ', blanks));
        blanks = 0;
        match c {
            '\\' => value.push(match chars.next()? {
                'n' => '\n',
                't' => '\t',
                'b' => '\u{8}',
                c @ ('"' | '\\') => c,
                _ => return None,
            }),
            '"' => quoted = !quoted,
            c => value.push(c),
        }
    }
    if quoted {
        return None;
    }
    Some((key.to_ascii_lowercase(), Some(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `git init` and `git clone` write, and a registered submodule's settings, stay.
    #[test]
    fn what_git_writes_is_kept() {
        let clone = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://h/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n[submodule \"lib\"]\n\turl = ../lib.git\n\tactive = true\n\tupdate = rebase\n[user]\n\tname = \"A. N. Other\" ; a comment\n";
        let entries = judge(clone.as_bytes()).expect("kept");
        assert_eq!(entries.len(), 12);
        let name = entries.iter().find(|e| e.key == "name").unwrap();
        assert_eq!(name.value.as_deref(), Some("A. N. Other"));
        assert_eq!(judge(b""), Ok(Vec::new()));
    }

    /// The keys issue 29 found missing from the old list of program keys, and others: none
    /// is on the allow-list.
    #[test]
    fn keys_that_run_something_are_refused() {
        for text in [
            "[submodule \"x\"]\n\tupdate = !touch /tmp/m\n",
            "[interactive]\n\tdiffFilter = /e\n",
            "[pager]\n\tlog = /e\n",
            "[browser \"x\"]\n\tpath = /e\n",
            "[imap]\n\ttunnel = /e\n",
            "[lfs \"customtransfer.x\"]\n\tpath = /e\n",
            "[sendemail]\n\tsmtpServer = /e\n",
            "[core]\n\tfsmonitor = /e\n",
            "[core]\n\tfsmonitor = true\n",
            "[core]\n\thooksPath = .\n",
            "[include]\n\tpath = x\n",
            "[includeIf \"gitdir:/\"]\n\tpath = x\n",
            "[remote \"o\"]\n\turl = ext::sh -c x\n",
            "[remote \"o\"]\n\turl = foo::bar\n",
            "[remote \"o\"]\n\turl = host:path\n",
            "[remote \"o\"]\n\tuploadpack = /e\n",
            "[submodule \"x\"]\n\turl = ext::sh\n",
            "[url \"ext::sh\"]\n\tinsteadOf = https://\n",
            "[core]\n\tbare = maybe\n",
            "[somethingNew]\n\tx = 1\n",
        ] {
            assert!(
                matches!(judge(text.as_bytes()), Err(Refusal::Key(_))),
                "{text:?}"
            );
        }
    }

    /// What a line reader could read otherwise than git is refused, whatever the keys.
    #[test]
    fn grammar_outside_the_subset_is_refused() {
        for text in [
            "[core]\n\tbare = \\\nfalse\n",
            "\u{feff}[core]\n\tbare = false\n",
            "[core] bare = false\n",
            "[core.sub]\n\tbare = false\n",
            "[core]\r\n\tbare = false\r\n",
            "bare = false\n",
            "[core]\n\tbare = \"false\n",
            "[core]\n\tbare = \\q\n",
            "[core\n",
            "[remote \"a\\b\"]\n\turl = /x\n",
        ] {
            assert!(
                matches!(judge(text.as_bytes()), Err(Refusal::Syntax(..))),
                "{text:?}: {:?}",
                judge(text.as_bytes())
            );
        }
        assert!(judge(b"[core]\n\tbare = \xff\n").is_err());
    }

    /// Values are read as git reads them: quotes, escapes, comments, blanks.
    #[test]
    fn values_are_read_as_git_reads_them() {
        let e = parse(b"[s \"Sub \\\"q\\\"\"]\n k = \" a \"  b ; c\n flag\n").unwrap();
        assert_eq!(e[0].subsection.as_deref(), Some("Sub \"q\""));
        assert_eq!(e[0].value.as_deref(), Some(" a   b"));
        assert_eq!(e[1].value, None);
        let e = parse(b"[s]\n k = \"\"  !x \n").unwrap();
        assert_eq!(e[0].value.as_deref(), Some("!x"));
    }

    proptest::proptest! {
        /// Arbitrary bytes never make it panic (the supervisor aborts on a panic).
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = judge(&bytes);
        }

        /// Nor do lines made of the grammar's own characters, which reach deeper.
        #[test]
        fn config_like_text_never_panics(text in "([\\[\\]\" \t=#;\\\\a-z\n.!:/-]){0,200}") {
            let _ = judge(text.as_bytes());
        }
    }
}
