//! shoferignore: refuse commands that read files the user excluded (ARCHITECTURE §3.5).
//!
//! The user lists files the agent must not read in `<task cwd>/.shofer/shoferignore`, in
//! gitignore syntax (matched with the `ignore` crate's gitignore matcher; patterns are relative
//! to the task cwd, not to `.shofer/`). Before a command runs, [`ShoferIgnore::denied_path`]
//! looks at the command line the way `/bin/sh` would split it and returns the first path it
//! would read that the file ignores; the server then answers with [`access_denied_json`].
//!
//! What is looked at ([`candidates`]):
//! - every simple command of a pipeline or list (`|`, `|&`, `&&`, `||`, `;`, `&`, newlines,
//!   subshells and `{ …; }` groups, `if`/`while`/`for` bodies), not only the first word;
//! - words after quote removal (`'…'`, `"…"`, `\x`, `$'…'`), `~/` and `$VAR`/`${VAR}`
//!   (from assignments earlier in the same line, else from the server's environment);
//! - every operand of a command (options are skipped, `--opt=value` gives `value`), the
//!   command word itself when it contains a `/`, and the targets of input redirections
//!   (`< f`, `<> f`); output redirections are writes and are not checked;
//! - wrappers skipped to find the real command: `sudo`, `doas`, `env`, `nice`, `nohup`,
//!   `timeout`, `time`, `command`, `exec`, `builtin`, `setsid`, `stdbuf`, `ionice`, `chrt`,
//!   `taskset`, `xargs`, `busybox`, `unbuffer`, with their option arguments;
//! - scripts inside `sh -c '…'` (also `bash`, `dash`, `zsh`, `ksh`, `ash`, `-lc` clusters,
//!   `su -c`), `eval …`, `$(…)`, backticks and `<(…)` are analysed the same way, recursively;
//! - `cd DIR` / `pushd DIR` moves the directory later relative paths of the same line are
//!   resolved against; unquoted globs (`*`, `?`, `[`) are expanded on the file system;
//!   symlinks are also checked by their target.
//!
//! Limits (this is a guard against reading excluded files by accident, not a sandbox): a
//! program can still open a file whose name is not on its command line (`find -exec`, a script
//! that opens it, `python -c`, a name built at run time). Operands that only look like paths
//! (`echo .env`) are refused too: when in doubt, refuse.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// Where the ignore file lives, relative to the task cwd.
pub const IGNORE_FILE: &str = ".shofer/shoferignore";

/// Nesting limit for `sh -c`, `eval` and command substitutions: deeper input is refused.
const MAX_DEPTH: usize = 16;

/// Directory entries the glob expansions of one command may look at, together, before giving
/// up (see [`ShoferIgnore::denied_path`]).
const GLOB_ENTRY_BUDGET: usize = 100_000;

/// How long the check of one command may take; past it the command is refused (fail closed).
/// Commands are at most 128 KiB (the kernel's `MAX_ARG_STRLEN`, checked by the server before
/// this), which bounds the parse; the file-system work (globs, symlinks) is what this bounds.
pub const CHECK_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// The `access_denied` result of Appendix A for `path`, one line of JSON.
pub fn access_denied_json(path: &str) -> String {
    // Built by hand: the field order is part of the contract (serde_json sorts object keys).
    let path = serde_json::Value::from(path);
    format!(
        r#"{{"status":"error","type":"access_denied","message":"Access blocked by shoferignore","path":{path},"suggestion":"Try to continue without this file, or ask the user to update the shoferignore file"}}"#
    )
}

/// A path a command may read, as found on its command line (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The word after quote removal and expansion (what is reported in `access_denied`).
    pub word: String,
    /// A glob pattern (quoted parts escaped) when the word had unquoted `*`, `?` or `[`.
    pub glob: Option<String>,
    /// The directory `cd` moved to before this command, relative to the command's cwd
    /// (empty when none; absolute after `cd /x`).
    pub dir: PathBuf,
}

/// The input was nested more than 16 levels deep (`sh -c`, `eval`, `$(…)`); it is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooDeep;

/// Every path `script` may read, in order (see the module docs for what counts).
///
/// # Errors
/// [`TooDeep`] for input nested more than 16 levels deep. Never panics, whatever the input
/// (unterminated quotes end at the end of the input).
pub fn candidates(script: &str) -> Result<Vec<Candidate>, TooDeep> {
    let mut a = Analyzer {
        vars: HashMap::new(),
        dir: PathBuf::new(),
        out: Vec::new(),
    };
    a.script(script, 0)?;
    Ok(a.out)
}

// ---------------------------------------------------------------------------------------------
// Lexer

/// A piece of a word.
#[derive(Debug, Clone, PartialEq)]
enum Seg {
    /// Literal text; `quoted` when it came from quotes or a backslash (no globbing).
    Lit { text: String, quoted: bool },
    /// `$NAME` / `${NAME…}`.
    Var(String),
    /// `$(…)`, `` `…` ``, `<(…)`: a script whose output is substituted.
    Subst(String),
    /// A leading `~` (home directory).
    Tilde,
}

type Word = Vec<Seg>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redir {
    /// `<`, `<>`: reads the target.
    Read,
    /// `>`, `>>`, `>|`, `&>`, `&>>`: writes the target.
    Write,
    /// `<&`, `>&`: fd duplication (or a write for `>&file`).
    Dup,
    /// `<<`, `<<-`: the target is the delimiter.
    Heredoc,
    /// `<<<`: the target is a string.
    HereString,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(Word),
    /// A control operator or newline: ends a simple command.
    Sep,
    Redir(Redir),
}

struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
    /// Heredoc delimiters waiting for the next newline: (delimiter, strip leading tabs).
    pending_heredocs: Vec<(String, bool)>,
}

fn is_meta(c: u8) -> bool {
    matches!(
        c,
        b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>'
    )
}

impl<'a> Lexer<'a> {
    fn new(s: &'a str) -> Self {
        Lexer {
            s: s.as_bytes(),
            i: 0,
            pending_heredocs: Vec::new(),
        }
    }

    fn peek(&self, k: usize) -> Option<u8> {
        self.s.get(self.i + k).copied()
    }

    fn starts(&self, p: &[u8]) -> bool {
        self.s.get(self.i..).is_some_and(|r| r.starts_with(p))
    }

    /// Text of `s[a..b]` (byte indices on char boundaries by construction: we only ever stop
    /// at ASCII bytes).
    fn text(&self, a: usize, b: usize) -> String {
        String::from_utf8_lossy(&self.s[a..b.min(self.s.len())]).into_owned()
    }

    fn tokens(mut self) -> Vec<Tok> {
        let mut out = Vec::new();
        loop {
            // Blanks and line continuations.
            while let Some(c) = self.peek(0) {
                if c == b' ' || c == b'\t' || c == b'\r' {
                    self.i += 1;
                } else if c == b'\\' && self.peek(1) == Some(b'\n') {
                    self.i += 2;
                } else {
                    break;
                }
            }
            let Some(c) = self.peek(0) else { break };
            match c {
                b'#' => {
                    while self.peek(0).is_some_and(|c| c != b'\n') {
                        self.i += 1;
                    }
                }
                b'\n' => {
                    self.i += 1;
                    out.push(Tok::Sep);
                    self.heredoc_bodies();
                }
                b';' | b'(' | b')' => {
                    self.i += 1;
                    out.push(Tok::Sep);
                }
                b'|' => {
                    self.i += if matches!(self.peek(1), Some(b'|' | b'&')) {
                        2
                    } else {
                        1
                    };
                    out.push(Tok::Sep);
                }
                b'&' => {
                    if self.starts(b"&>>") {
                        self.i += 3;
                        out.push(Tok::Redir(Redir::Write));
                    } else if self.starts(b"&>") {
                        self.i += 2;
                        out.push(Tok::Redir(Redir::Write));
                    } else {
                        self.i += if self.peek(1) == Some(b'&') { 2 } else { 1 };
                        out.push(Tok::Sep);
                    }
                }
                b'<' | b'>' if self.peek(1) == Some(b'(') => {
                    // Process substitution: a script.
                    self.i += 2;
                    let body = self.balanced_parens();
                    out.push(Tok::Word(vec![Seg::Subst(body)]));
                }
                b'<' => {
                    let (len, r) = if self.starts(b"<<<") {
                        (3, Redir::HereString)
                    } else if self.starts(b"<<-") {
                        (3, Redir::Heredoc)
                    } else if self.starts(b"<<") {
                        (2, Redir::Heredoc)
                    } else if self.starts(b"<>") {
                        (2, Redir::Read)
                    } else if self.starts(b"<&") {
                        (2, Redir::Dup)
                    } else {
                        (1, Redir::Read)
                    };
                    let strip = self.starts(b"<<-");
                    self.i += len;
                    out.push(Tok::Redir(r));
                    if r == Redir::Heredoc {
                        self.heredoc_delimiter(strip, &mut out);
                    }
                }
                b'>' => {
                    let (len, r) = if self.starts(b">>") || self.starts(b">|") {
                        (2, Redir::Write)
                    } else if self.starts(b">&") {
                        (2, Redir::Dup)
                    } else {
                        (1, Redir::Write)
                    };
                    self.i += len;
                    out.push(Tok::Redir(r));
                }
                _ => {
                    let start = self.i;
                    let w = self.word();
                    // An IO number (`2>`, `0<`) is part of the redirection, not a word.
                    let io_number = self
                        .s
                        .get(start..self.i)
                        .is_some_and(|w| w.iter().all(u8::is_ascii_digit))
                        && matches!(self.peek(0), Some(b'<' | b'>'));
                    if !io_number && self.i > start {
                        out.push(Tok::Word(w));
                    } else if self.i == start {
                        // Not reachable (a metacharacter was handled above); never loop.
                        self.i += 1;
                    }
                }
            }
        }
        out
    }

    /// After `<<`: the delimiter word (kept as a word token) and its body at the next newline.
    fn heredoc_delimiter(&mut self, strip: bool, out: &mut Vec<Tok>) {
        while matches!(self.peek(0), Some(b' ' | b'\t')) {
            self.i += 1;
        }
        if self.peek(0).is_none_or(is_meta) {
            return;
        }
        let w = self.word();
        let delim: String = w
            .iter()
            .map(|s| match s {
                Seg::Lit { text, .. } => text.as_str(),
                _ => "",
            })
            .collect();
        self.pending_heredocs.push((delim, strip));
        out.push(Tok::Word(w));
    }

    /// Skips the bodies of pending heredocs (we are just after a newline).
    fn heredoc_bodies(&mut self) {
        for (delim, strip) in std::mem::take(&mut self.pending_heredocs) {
            while self.i < self.s.len() {
                let end = self.s[self.i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(self.s.len(), |p| self.i + p);
                let line = self.text(self.i, end);
                self.i = (end + 1).min(self.s.len());
                let line = if strip {
                    line.trim_start_matches('\t')
                } else {
                    &line
                };
                if line == delim {
                    break;
                }
            }
        }
    }

    /// A word up to the next unquoted metacharacter.
    fn word(&mut self) -> Word {
        let mut segs = Vec::new();
        let mut lit = String::new();
        if self.peek(0) == Some(b'~') && self.peek(1).is_none_or(|c| c == b'/' || is_meta(c)) {
            segs.push(Seg::Tilde);
            self.i += 1;
        }
        let flush = |lit: &mut String, segs: &mut Word, quoted: bool| {
            if !lit.is_empty() {
                segs.push(Seg::Lit {
                    text: std::mem::take(lit),
                    quoted,
                });
            }
        };
        while let Some(c) = self.peek(0) {
            if is_meta(c) {
                break;
            }
            match c {
                b'\\' => {
                    flush(&mut lit, &mut segs, false);
                    self.i += 1;
                    match self.peek(0) {
                        Some(b'\n') => self.i += 1,
                        Some(_) => {
                            let t = self.one_char();
                            segs.push(Seg::Lit {
                                text: t,
                                quoted: true,
                            });
                        }
                        None => {}
                    }
                }
                b'\'' => {
                    flush(&mut lit, &mut segs, false);
                    self.i += 1;
                    let a = self.i;
                    while self.peek(0).is_some_and(|c| c != b'\'') {
                        self.i += 1;
                    }
                    let t = self.text(a, self.i);
                    self.i = (self.i + 1).min(self.s.len());
                    segs.push(Seg::Lit {
                        text: t,
                        quoted: true,
                    });
                }
                b'"' => {
                    flush(&mut lit, &mut segs, false);
                    self.i += 1;
                    self.double_quoted(&mut segs);
                }
                b'`' => {
                    flush(&mut lit, &mut segs, false);
                    self.i += 1;
                    let body = self.backticks();
                    segs.push(Seg::Subst(body));
                }
                b'$' => {
                    flush(&mut lit, &mut segs, false);
                    self.dollar(&mut segs, false);
                }
                _ => lit.push_str(&self.one_char()),
            }
        }
        flush(&mut lit, &mut segs, false);
        segs
    }

    /// One UTF-8 character (or one byte of invalid input) as text.
    fn one_char(&mut self) -> String {
        let a = self.i;
        self.i += 1;
        while self.peek(0).is_some_and(|c| (c & 0xC0) == 0x80) {
            self.i += 1;
        }
        self.text(a, self.i)
    }

    /// Inside `"…"` (the opening quote consumed).
    fn double_quoted(&mut self, segs: &mut Word) {
        let mut lit = String::new();
        while let Some(c) = self.peek(0) {
            match c {
                b'"' => {
                    self.i += 1;
                    break;
                }
                b'\\' => {
                    self.i += 1;
                    match self.peek(0) {
                        Some(b'$' | b'`' | b'"' | b'\\') => lit.push_str(&self.one_char()),
                        Some(b'\n') => self.i += 1,
                        _ => lit.push('\\'),
                    }
                }
                b'$' => {
                    if !lit.is_empty() {
                        segs.push(Seg::Lit {
                            text: std::mem::take(&mut lit),
                            quoted: true,
                        });
                    }
                    self.dollar(segs, true);
                }
                b'`' => {
                    if !lit.is_empty() {
                        segs.push(Seg::Lit {
                            text: std::mem::take(&mut lit),
                            quoted: true,
                        });
                    }
                    self.i += 1;
                    let body = self.backticks();
                    segs.push(Seg::Subst(body));
                }
                _ => lit.push_str(&self.one_char()),
            }
        }
        // `""` is an empty word, not no word: keep a quoted empty literal.
        segs.push(Seg::Lit {
            text: lit,
            quoted: true,
        });
    }

    /// At a `$`.
    fn dollar(&mut self, segs: &mut Word, in_dquote: bool) {
        self.i += 1;
        match self.peek(0) {
            Some(b'(') => {
                self.i += 1;
                let body = self.balanced_parens();
                segs.push(Seg::Subst(body));
            }
            Some(b'{') => {
                self.i += 1;
                let a = self.i;
                let mut depth = 1usize;
                while let Some(c) = self.peek(0) {
                    self.i += 1;
                    match c {
                        b'{' => depth += 1,
                        b'}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let inner = self.text(a, self.i.saturating_sub(1).max(a));
                let name: String = inner
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                segs.push(Seg::Var(name));
            }
            Some(b'\'') if !in_dquote => {
                // $'…' ANSI-C quoting.
                self.i += 1;
                let mut t = String::new();
                while let Some(c) = self.peek(0) {
                    match c {
                        b'\'' => {
                            self.i += 1;
                            break;
                        }
                        b'\\' => {
                            self.i += 1;
                            match self.peek(0) {
                                Some(b'n') => {
                                    t.push('\n');
                                    self.i += 1;
                                }
                                Some(b't') => {
                                    t.push('\t');
                                    self.i += 1;
                                }
                                Some(b'x') => {
                                    self.i += 1;
                                    let v = self.radix_digits(16, 2);
                                    t.push(char::from(v.unwrap_or(b'x')));
                                }
                                Some(b'0'..=b'7') => {
                                    let v = self.radix_digits(8, 3);
                                    t.push(char::from(v.unwrap_or(b'0')));
                                }
                                Some(_) => t.push_str(&self.one_char()),
                                None => {}
                            }
                        }
                        _ => t.push_str(&self.one_char()),
                    }
                }
                segs.push(Seg::Lit {
                    text: t,
                    quoted: true,
                });
            }
            Some(b'"') if !in_dquote => {
                self.i += 1;
                self.double_quoted(segs);
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let a = self.i;
                while self
                    .peek(0)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    self.i += 1;
                }
                segs.push(Seg::Var(self.text(a, self.i)));
            }
            Some(c) if c.is_ascii_digit() || b"@*#?$!-".contains(&c) => {
                // Positional and special parameters: unknown here, expand to nothing.
                self.i += 1;
                segs.push(Seg::Var(String::new()));
            }
            _ => segs.push(Seg::Lit {
                text: "$".into(),
                quoted: true,
            }),
        }
    }

    /// Up to `max` digits in `radix` as one byte (`$'\x41'`, `$'\101'`); `None` for none.
    fn radix_digits(&mut self, radix: u32, max: usize) -> Option<u8> {
        let mut v: u32 = 0;
        let mut n = 0;
        while n < max {
            match self.peek(0).and_then(|c| char::from(c).to_digit(radix)) {
                Some(d) => {
                    v = v * radix + d;
                    self.i += 1;
                    n += 1;
                }
                None => break,
            }
        }
        (n > 0).then_some((v & 0xFF) as u8)
    }

    /// After `$(` or `<(`: the text up to the matching `)`, quote-aware.
    fn balanced_parens(&mut self) -> String {
        let a = self.i;
        let mut depth = 1usize;
        while let Some(c) = self.peek(0) {
            match c {
                b'\\' => self.i += 2,
                b'\'' => {
                    self.i += 1;
                    while self.peek(0).is_some_and(|c| c != b'\'') {
                        self.i += 1;
                    }
                    self.i += 1;
                }
                b'"' => {
                    self.i += 1;
                    while let Some(c) = self.peek(0) {
                        if c == b'\\' {
                            self.i += 2;
                        } else {
                            self.i += 1;
                            if c == b'"' {
                                break;
                            }
                        }
                    }
                }
                b'(' => {
                    depth += 1;
                    self.i += 1;
                }
                b')' => {
                    depth -= 1;
                    self.i += 1;
                    if depth == 0 {
                        return self.text(a, self.i - 1);
                    }
                }
                _ => self.i += 1,
            }
        }
        self.i = self.i.min(self.s.len());
        self.text(a, self.s.len())
    }

    /// After an opening backtick: the script up to the closing one, `\`` unescaped.
    fn backticks(&mut self) -> String {
        let mut t = Vec::new();
        while let Some(c) = self.peek(0) {
            self.i += 1;
            match c {
                b'`' => break,
                b'\\' => {
                    if let Some(n) = self.peek(0) {
                        if !matches!(n, b'`' | b'\\' | b'$') {
                            t.push(b'\\');
                        }
                        t.push(n);
                        self.i += 1;
                    }
                }
                _ => t.push(c),
            }
        }
        String::from_utf8_lossy(&t).into_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// Simple commands

#[derive(Debug, Default)]
struct Simple {
    words: Vec<Word>,
    /// Targets of `<` and `<>`.
    reads: Vec<Word>,
    /// Every other word (redirection targets, heredoc delimiters): only their substitutions
    /// are analysed.
    other: Vec<Word>,
}

fn simple_commands(toks: Vec<Tok>) -> Vec<Simple> {
    let mut out = Vec::new();
    let mut cur = Simple::default();
    let mut redir: Option<Redir> = None;
    for t in toks {
        match t {
            Tok::Word(w) => match redir.take() {
                Some(Redir::Read) => cur.reads.push(w),
                Some(_) => cur.other.push(w),
                None => cur.words.push(w),
            },
            Tok::Redir(r) => redir = Some(r),
            Tok::Sep => {
                redir = None;
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    out.push(cur);
    out
}

// ---------------------------------------------------------------------------------------------
// Analysis

struct Analyzer {
    vars: HashMap<String, String>,
    dir: PathBuf,
    out: Vec<Candidate>,
}

/// A word after expansion.
struct Expanded {
    text: String,
    glob: Option<String>,
    substs: Vec<String>,
}

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

fn is_assignment(s: &str) -> bool {
    match s.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh",
];

/// Reserved words that may open a simple command and are not the command.
const RESERVED: &[&str] = &[
    "!", "{", "}", "then", "else", "elif", "do", "done", "fi", "if", "while", "until", "esac",
    "function",
];

impl Analyzer {
    fn script(&mut self, src: &str, depth: usize) -> Result<(), TooDeep> {
        if depth > MAX_DEPTH {
            return Err(TooDeep);
        }
        let toks = Lexer::new(src).tokens();
        for cmd in simple_commands(toks) {
            self.simple(&cmd, depth)?;
        }
        Ok(())
    }

    fn expand(&self, w: &Word) -> Expanded {
        let mut text = String::new();
        let mut pat = String::new();
        let mut globby = false;
        let mut substs = Vec::new();
        for s in w {
            match s {
                Seg::Lit { text: t, quoted } => {
                    text.push_str(t);
                    if *quoted {
                        pat.push_str(&glob::Pattern::escape(t));
                    } else {
                        globby |= t.contains(['*', '?', '[']);
                        pat.push_str(t);
                    }
                }
                Seg::Var(name) => {
                    let v = self
                        .vars
                        .get(name)
                        .cloned()
                        .or_else(|| {
                            (!name.is_empty())
                                .then(|| std::env::var(name).ok())
                                .flatten()
                        })
                        .unwrap_or_default();
                    pat.push_str(&glob::Pattern::escape(&v));
                    text.push_str(&v);
                }
                Seg::Subst(body) => substs.push(body.clone()),
                Seg::Tilde => {
                    let h = std::env::var("HOME").unwrap_or_else(|_| "~".into());
                    pat.push_str(&glob::Pattern::escape(&h));
                    text.push_str(&h);
                }
            }
        }
        Expanded {
            text,
            glob: globby.then_some(pat),
            substs,
        }
    }

    fn push(&mut self, e: &Expanded) {
        if e.text.is_empty() && e.glob.is_none() {
            return;
        }
        self.out.push(Candidate {
            word: e.text.clone(),
            glob: e.glob.clone(),
            dir: self.dir.clone(),
        });
        // bash's brace expansion (`cat {.env,x}`): the alternatives are candidates too (also
        // under dash, where it does not happen: a refusal too many, never one too few).
        let alts = brace_alternatives(&e.text);
        if alts.len() > 1 {
            for a in alts {
                let glob = (e.glob.is_some() && a.contains(['*', '?', '['])).then(|| a.clone());
                self.out.push(Candidate {
                    word: a,
                    glob,
                    dir: self.dir.clone(),
                });
            }
        }
    }

    fn simple(&mut self, cmd: &Simple, depth: usize) -> Result<(), TooDeep> {
        let words: Vec<Expanded> = cmd.words.iter().map(|w| self.expand(w)).collect();
        // Substitutions anywhere run first.
        let substs: Vec<String> = words
            .iter()
            .flat_map(|e| e.substs.iter().cloned())
            .chain(
                cmd.reads
                    .iter()
                    .chain(&cmd.other)
                    .flat_map(|w| self.expand(w).substs),
            )
            .collect();
        for s in &substs {
            self.script(s, depth + 1)?;
        }
        for r in &cmd.reads {
            let e = self.expand(r);
            self.push(&e);
        }
        let mut i = 0;
        // Leading assignments and reserved words.
        while let Some(w) = words.get(i) {
            if is_assignment(&w.text) && w.glob.is_none() {
                if let Some((k, v)) = w.text.split_once('=') {
                    self.vars.insert(k.to_string(), v.to_string());
                }
                i += 1;
            } else if RESERVED.contains(&w.text.as_str()) {
                i += 1;
            } else if w.text == "for" || w.text == "case" || w.text == "select" {
                // `for NAME in words…`: the words are checked as operands below.
                i += 2;
                if words.get(i).is_some_and(|w| w.text == "in") {
                    i += 1;
                }
                for e in words.get(i..).unwrap_or_default() {
                    self.push(e);
                }
                return Ok(());
            } else {
                break;
            }
        }
        let first = i;
        let i = skip_wrappers(&words, i);
        // Option arguments of wrappers may be files too (`xargs -a FILE`, `sudo -C …`): check
        // every non-option word of the wrappers but their names.
        for w in words.get(first..i).unwrap_or_default() {
            let t = w.text.as_str();
            if !t.starts_with('-') && !is_assignment(t) && !WRAPPERS.contains(&basename(t)) {
                self.push(w);
            }
        }
        let Some(cmd_word) = words.get(i) else {
            return Ok(());
        };
        let name = basename(&cmd_word.text).to_string();
        if cmd_word.text.contains('/') {
            self.push(cmd_word);
        }
        let args = &words[i + 1..];
        match name.as_str() {
            "cd" | "pushd" => {
                if let Some(d) = args.iter().find(|a| !a.text.starts_with('-')) {
                    self.push(d);
                    self.dir = self.dir.join(&d.text);
                }
                return Ok(());
            }
            "eval" => {
                let s: Vec<&str> = args.iter().map(|a| a.text.as_str()).collect();
                return self.script(&s.join(" "), depth + 1);
            }
            n if SHELLS.contains(&n) || n == "su" => {
                if let Some(script) = shell_c_script(args) {
                    return self.script(&script, depth + 1);
                }
            }
            _ => {}
        }
        for a in args {
            if let Some(rest) = a.text.strip_prefix("--") {
                if let Some((_, v)) = rest.split_once('=') {
                    self.push(&Expanded {
                        text: v.to_string(),
                        glob: None,
                        substs: Vec::new(),
                    });
                }
            } else if a.text.starts_with('-') && a.text.len() > 1 {
                // An option.
            } else if a.text != "-" {
                self.push(a);
            }
        }
        Ok(())
    }
}

/// Brace expansion of `s` (`a{b,c}d` → `abd`, `acd`; nested and repeated groups), capped at
/// 256 alternatives; `[s]` when it has no group with a comma.
fn brace_alternatives(s: &str) -> Vec<String> {
    brace_alternatives_at(s, 0)
}

fn brace_alternatives_at(s: &str, level: usize) -> Vec<String> {
    const CAP: usize = 256;
    if level > 8 {
        return vec![s.to_string()];
    }
    let mut out = vec![String::new()];
    let mut rest = s;
    let mut rounds = 0;
    while let Some(open) = rest.find('{') {
        rounds += 1;
        // The matching close brace and the top-level commas inside.
        let bytes = rest.as_bytes();
        let (mut depth, mut close, mut commas) = (0usize, None, Vec::new());
        for (k, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(k);
                        break;
                    }
                }
                b',' if depth == 1 => commas.push(k),
                _ => {}
            }
        }
        let (Some(close), false, true) = (close, commas.is_empty(), rounds < 32) else {
            // No group here: keep the brace literally and go on after it.
            for o in &mut out {
                o.push_str(&rest[..=open]);
            }
            rest = &rest[open + 1..];
            continue;
        };
        let mut parts = Vec::new();
        let mut a = open + 1;
        for &c in commas.iter().chain(std::iter::once(&close)) {
            parts.extend(brace_alternatives_at(&rest[a..c], level + 1));
            parts.truncate(CAP);
            a = c + 1;
        }
        let prefix = &rest[..open];
        let mut next = Vec::new();
        for o in &out {
            for p in &parts {
                if next.len() < CAP {
                    next.push(format!("{o}{prefix}{p}"));
                }
            }
        }
        out = next;
        rest = &rest[close + 1..];
    }
    for o in &mut out {
        o.push_str(rest);
    }
    out
}

/// The script of `sh [-opts] -c SCRIPT` (also `-lc`, `su user -c SCRIPT`, `--command=`).
fn shell_c_script(args: &[Expanded]) -> Option<String> {
    let mut has_c = false;
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if let Some(v) = t.strip_prefix("--command=") {
            return Some(v.to_string());
        }
        if t == "--command" {
            return args.get(i + 1).map(|a| a.text.clone());
        }
        if t == "-o" || t == "+o" || t == "-O" || t == "+O" || t == "--rcfile" || t == "--init-file"
        {
            i += 2;
            continue;
        }
        if t.starts_with('-') && !t.starts_with("--") && t.len() > 1 {
            if t.contains('c') {
                has_c = true;
            }
        } else if t.starts_with('+') || t.starts_with("--") {
            // +x, --login, --norc …
        } else if has_c {
            return Some(t.to_string());
        }
        i += 1;
    }
    None
}

/// Commands that run another command given as their operands.
const WRAPPERS: &[&str] = &[
    "sudo", "doas", "env", "nice", "nohup", "timeout", "time", "command", "exec", "builtin",
    "setsid", "stdbuf", "ionice", "chrt", "taskset", "xargs", "busybox", "unbuffer",
];

/// Index of the real command after wrappers like `sudo -u x env A=b nice -n 5`.
fn skip_wrappers(words: &[Expanded], mut i: usize) -> usize {
    // Options that take a separate argument, per wrapper.
    fn takes_arg(wrapper: &str, opt: &str) -> bool {
        let list: &[&str] = match wrapper {
            "sudo" => &[
                "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "-R",
            ],
            "doas" => &["-u", "-C"],
            "env" => &["-u", "-C", "-S", "--unset", "--chdir", "--split-string"],
            "nice" => &["-n", "--adjustment"],
            "timeout" => &["-s", "-k", "--signal", "--kill-after"],
            "exec" => &["-a"],
            "stdbuf" => &["-i", "-o", "-e"],
            "ionice" => &["-c", "-n", "-p", "-P", "-u"],
            "xargs" => &[
                "-I",
                "-n",
                "-d",
                "-a",
                "-E",
                "-L",
                "-P",
                "-s",
                "--arg-file",
                "--delimiter",
            ],
            "chrt" | "taskset" => &["-p"],
            _ => &[],
        };
        list.contains(&opt)
    }
    // Wrappers followed by one positional argument before the command.
    fn positional(wrapper: &str) -> usize {
        match wrapper {
            "timeout" | "taskset" | "chrt" => 1,
            _ => 0,
        }
    }
    loop {
        let Some(w) = words.get(i) else { return i };
        let name = basename(&w.text);
        if !WRAPPERS.contains(&name) {
            return i;
        }
        let wrapper = name.to_string();
        i += 1;
        let mut positional_left = positional(&wrapper);
        while let Some(w) = words.get(i) {
            let t = w.text.as_str();
            if t == "--" {
                i += 1;
                break;
            } else if t.starts_with('-') && t.len() > 1 {
                i += if takes_arg(&wrapper, t) { 2 } else { 1 };
            } else if matches!(wrapper.as_str(), "env" | "sudo" | "doas") && is_assignment(t) {
                i += 1;
            } else if positional_left > 0 {
                positional_left -= 1;
                i += 1;
            } else {
                break;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Matching

/// A loaded `.shofer/shoferignore`.
#[derive(Debug)]
pub struct ShoferIgnore {
    root: PathBuf,
    canonical_root: Option<PathBuf>,
    matcher: Gitignore,
}

/// Largest `.shofer/shoferignore` read (1 MiB).
pub const MAX_IGNORE_BYTES: u64 = 1 << 20;

/// `.shofer/shoferignore` exists but cannot be used.
#[derive(Debug)]
pub struct IgnoreFileError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong (the read error, or the first bad pattern).
    pub reason: String,
    /// Which kind of wrong: what the caller does about it.
    pub kind: IgnoreFileErrorKind,
}

/// What [`IgnoreFileError`] means for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IgnoreFileErrorKind {
    /// A regular file that cannot be read or holds a bad pattern: commands are refused until
    /// it is fixed (fail closed).
    Invalid,
    /// Not a regular file of at most [`MAX_IGNORE_BYTES`] (a symlink, a FIFO, a device, a
    /// directory, a huge file): no user writes that, a command can (the file lies in the task's
    /// directory). It is not read — a FIFO would stop the server, `/dev/zero` fill its
    /// memory — and not applied, and the call says so: a command can remove or replace it.
    NotAFile,
}

impl std::fmt::Display for IgnoreFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            IgnoreFileErrorKind::NotAFile => write!(
                f,
                "The shoferignore file {} was not applied to this command: {} (expected a regular file of at most {} bytes; remove or replace it).",
                self.path.display(),
                self.reason,
                MAX_IGNORE_BYTES
            ),
            _ => write!(
                f,
                "The shoferignore file {} cannot be used ({}); no command runs until the user fixes it.",
                self.path.display(),
                self.reason
            ),
        }
    }
}

/// Reads the ignore file `path` (`<dir>/.shofer/shoferignore`) without trusting what is
/// there ([`shofer_sys::projectfile::read`]). `Ok(None)`: no file.
fn read_ignore_file(dir: &Path, path: &Path) -> Result<Option<String>, IgnoreFileError> {
    use shofer_sys::projectfile::ReadError;
    shofer_sys::projectfile::read(dir, c"shoferignore", MAX_IGNORE_BYTES).map_err(|e| {
        let kind = match e {
            ReadError::NotAFile(_) => IgnoreFileErrorKind::NotAFile,
            ReadError::Unreadable(_) => IgnoreFileErrorKind::Invalid,
        };
        IgnoreFileError {
            path: path.to_path_buf(),
            reason: e.to_string(),
            kind,
        }
    })
}

impl std::error::Error for IgnoreFileError {}

/// Removes `.` and resolves `..` lexically (`/a/b/../c` → `/a/c`).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// A glob needed more than [`GLOB_ENTRY_BUDGET`] directory entries; `fixed` is the directory
/// before its first wildcard component.
struct GlobTooBig {
    fixed: PathBuf,
}

/// Expands `pattern` (a shell glob, quoted parts escaped as by `glob::Pattern::escape`) against
/// the file system, relative to `base`, with the shell's rules: a wildcard does not match a
/// leading dot, `/` is only matched literally, `**` is `*` (POSIX sh, bash without globstar).
/// Walks component by component with `read_dir`, counting entries against `budget`, so a
/// pattern like `/*/*/*/*` cannot stall the server.
fn expand_glob(base: &Path, pattern: &str, budget: &mut usize) -> Result<Vec<PathBuf>, GlobTooBig> {
    let opts = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: true,
    };
    let start = if pattern.starts_with('/') {
        PathBuf::from("/")
    } else {
        base.to_path_buf()
    };
    let comps: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let mut cur = vec![start];
    let mut fixed: Option<PathBuf> = None;
    for (k, comp) in comps.iter().enumerate() {
        let last = k + 1 == comps.len();
        if !comp.contains(['*', '?', '[']) {
            for p in &mut cur {
                p.push(comp);
            }
            continue;
        }
        if fixed.is_none() {
            fixed = cur.first().map(|p| normalize(p));
        }
        let Ok(pat) = glob::Pattern::new(&comp.replace("**", "*")) else {
            return Ok(Vec::new());
        };
        let mut next = Vec::new();
        for dir in &cur {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in rd.flatten() {
                if *budget == 0 {
                    return Err(GlobTooBig {
                        fixed: fixed.clone().unwrap_or_default(),
                    });
                }
                *budget -= 1;
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                if pat.matches_with(name, opts) && (last || e.path().is_dir()) {
                    next.push(e.path());
                }
            }
        }
        next.sort();
        cur = next;
    }
    Ok(cur)
}

impl ShoferIgnore {
    /// Loads `<task_cwd>/.shofer/shoferignore`. `Ok(None)` when the file does not exist
    /// (nothing is ignored). Patterns are relative to `task_cwd`.
    ///
    /// # Errors
    /// [`IgnoreFileError`] when the file exists but cannot be used: read errors and invalid
    /// patterns are [`IgnoreFileErrorKind::Invalid`] (the caller refuses commands rather than
    /// run them unchecked: fail closed); anything but a regular file of at most
    /// [`MAX_IGNORE_BYTES`] is [`IgnoreFileErrorKind::NotAFile`] and never read.
    pub fn load(task_cwd: &Path) -> Result<Option<ShoferIgnore>, IgnoreFileError> {
        let path = task_cwd.join(IGNORE_FILE);
        let Some(text) = read_ignore_file(task_cwd, &path)? else {
            return Ok(None);
        };
        let invalid = |reason: String| IgnoreFileError {
            path: path.clone(),
            reason,
            kind: IgnoreFileErrorKind::Invalid,
        };
        let root = normalize(task_cwd);
        let mut b = GitignoreBuilder::new(&root);
        for (n, line) in text.lines().enumerate() {
            b.add_line(None, line)
                .map_err(|e| invalid(format!("line {}: {e}", n + 1)))?;
        }
        let matcher = b.build().map_err(|e| invalid(e.to_string()))?;
        Ok(Some(ShoferIgnore {
            canonical_root: std::fs::canonicalize(&root).ok(),
            root,
            matcher,
        }))
    }

    /// The first path `command`, run in `cwd`, would read that the file ignores (as written
    /// on the command line, or a glob match relative to `cwd`); `None` when it may run.
    pub fn denied_path(&self, command: &str, cwd: &Path) -> Option<String> {
        if self.is_ignored(cwd) {
            let shown = cwd.strip_prefix(&self.root).unwrap_or(cwd);
            return Some(shown.display().to_string());
        }
        let cands = match candidates(command) {
            Ok(c) => c,
            Err(TooDeep) => {
                return Some(format!(
                    "(a command nested more than {MAX_DEPTH} levels deep cannot be checked)"
                ))
            }
        };
        let deadline = std::time::Instant::now() + CHECK_BUDGET;
        let mut budget = GLOB_ENTRY_BUDGET;
        for (i, c) in cands.into_iter().enumerate() {
            if i % 64 == 0 && std::time::Instant::now() >= deadline {
                return Some(format!(
                    "(the command is too large to check within {}s; split it into smaller commands)",
                    CHECK_BUDGET.as_secs()
                ));
            }
            let base = cwd.join(&c.dir);
            if let Some(pat) = &c.glob {
                match expand_glob(&base, pat, &mut budget) {
                    Ok(paths) => {
                        for p in paths {
                            if self.is_ignored(&p) {
                                let shown = p.strip_prefix(cwd).unwrap_or(&p);
                                return Some(shown.display().to_string());
                            }
                        }
                    }
                    // Too many entries to look at: refuse when the pattern can reach into the
                    // task tree (fail closed), else it cannot match an ignored path by name.
                    Err(GlobTooBig { fixed }) => {
                        if fixed.starts_with(&self.root) || self.root.starts_with(&fixed) {
                            return Some(c.word);
                        }
                    }
                }
            }
            if self.is_ignored(&base.join(&c.word)) {
                return Some(c.word);
            }
        }
        None
    }

    /// Whether `path` (absolute, or relative to the process cwd) is ignored, by its own name
    /// or, for a symlink, by its target's.
    pub fn is_ignored(&self, path: &Path) -> bool {
        let is_dir = path.is_dir() || path.as_os_str().to_string_lossy().ends_with('/');
        if self.ignored_under(&self.root, &normalize(path), is_dir) {
            return true;
        }
        if let (Some(croot), Ok(real)) = (&self.canonical_root, std::fs::canonicalize(path)) {
            if self.ignored_under(croot, &real, is_dir) {
                return true;
            }
        }
        false
    }

    fn ignored_under(&self, root: &Path, p: &Path, is_dir: bool) -> bool {
        let Ok(rel) = p.strip_prefix(root) else {
            return false;
        };
        if rel.as_os_str().is_empty() || rel.has_root() {
            return false;
        }
        self.matcher
            .matched_path_or_any_parents(rel, is_dir)
            .is_ignore()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        candidates(s).unwrap().into_iter().map(|c| c.word).collect()
    }

    #[test]
    fn pipelines_and_lists() {
        assert_eq!(
            words("cat secrets/creds.json | grep password"),
            ["secrets/creds.json", "password"]
        );
        assert_eq!(words("echo x && cat .env"), ["x", ".env"]);
        assert_eq!(words("a;b||c&d\ne |& f"), Vec::<String>::new());
        assert_eq!(
            words("a x;b y||c z&d w\ne v |& f u"),
            ["x", "y", "z", "w", "v", "u"]
        );
        assert_eq!(words("(cat a); { cat b; }"), ["a", "b"]);
        assert_eq!(
            words("if cat a; then cat b; else cat c; fi"),
            ["a", "b", "c"]
        );
        assert_eq!(
            words("while read l; do cat d; done < in.txt"),
            ["l", "d", "in.txt"]
        );
    }

    #[test]
    fn quotes_are_removed() {
        assert_eq!(
            words(r#"cat ".env" '.e'nv \.env $'.\x65nv'"#)[..3],
            [".env", ".env", ".env"]
        );
        assert_eq!(words(r#"cat ".e""nv""#), [".env"]);
        assert_eq!(words(r#"grep "a b" 'c d'"#), ["a b", "c d"]);
        assert_eq!(words(r#"echo "it's" \"q\""#), ["it's", "\"q\""]);
    }

    #[test]
    fn options_and_operands() {
        assert_eq!(
            words("head -n 5 app.log secrets/keys.json"),
            ["5", "app.log", "secrets/keys.json"]
        );
        assert_eq!(words("grep --file=.env x -"), [".env", "x"]);
        assert_eq!(words("./secrets/run.sh arg"), ["./secrets/run.sh", "arg"]);
        assert_eq!(words("ls"), Vec::<String>::new());
        assert_eq!(words("git status"), ["status"]);
    }

    #[test]
    fn wrappers_are_skipped() {
        assert_eq!(words("sudo cat .env"), [".env"]);
        assert_eq!(
            words("sudo -u root -E bash -c 'cat .env'"),
            ["root", ".env"]
        );
        assert_eq!(
            words("env -u X A=1 B=2 nice -n 5 timeout -s KILL 10 cat f"),
            ["X", "5", "KILL", "10", "f"]
        );
        assert_eq!(words("xargs -a .env cat"), [".env"]);
        assert_eq!(
            words("nohup stdbuf -o L xargs -n 1 sh -c 'cat $0 y' x"),
            ["L", "1", "y"]
        );
        assert_eq!(words("/usr/bin/sudo /bin/cat .env"), ["/bin/cat", ".env"]);
    }

    #[test]
    fn nested_scripts() {
        assert_eq!(words("bash -c 'cat .env'"), [".env"]);
        assert_eq!(words("sh -lc \"cat .env | wc -l\""), [".env"]);
        assert_eq!(words("bash -o pipefail -ec 'cat a'"), ["a"]);
        assert_eq!(words("su root -c 'cat a'"), ["a"]);
        assert_eq!(words("eval 'cat' .env"), [".env"]);
        assert_eq!(words("echo $(cat .env) `cat b`"), [".env", "b"]);
        assert_eq!(words("diff <(cat a) b"), ["a", "b"]);
        assert_eq!(words("echo \"$(cat \"x y\")\""), ["x y"]);
        assert_eq!(words("sh -c \"sh -c 'cat deep'\""), ["deep"]);
    }

    #[test]
    fn ansi_c_quotes_and_braces() {
        assert_eq!(words(r"cat $'.\x65nv' $'\056env'"), [".env", ".env"]);
        assert_eq!(brace_alternatives("a{b,c}d"), ["abd", "acd"]);
        assert_eq!(brace_alternatives("{.env,x{1,2}}"), [".env", "x1", "x2"]);
        assert_eq!(brace_alternatives("{a}{,b}"), ["{a}", "{a}b"]);
        assert_eq!(brace_alternatives("x{"), ["x{"]);
        assert_eq!(brace_alternatives("a}b{c"), ["a}b{c"]);
        let deep = format!("{}x,y{}", "{".repeat(5000), "}".repeat(5000));
        assert!(!brace_alternatives(&deep).is_empty());
        let wide = "{a,b}".repeat(40);
        assert_eq!(brace_alternatives(&wide).len(), 256);
        assert_eq!(
            words("cat {.env,README}"),
            ["{.env,README}", ".env", "README"]
        );
    }

    #[test]
    fn redirections() {
        assert_eq!(words("wc -l < .env"), [".env"]);
        assert_eq!(words("wc -l<.env"), [".env"]);
        assert_eq!(words("cat 0<.env 2>/dev/null >out"), [".env"]);
        assert_eq!(words("cat a >> b 2>&1 &> c"), ["a"]);
        assert_eq!(words("cat <<EOF\n.env secret\nEOF\ncat x"), ["x"]);
        assert_eq!(words("cat <<-'E'\n\tcat y\n\tE\ncat z"), ["z"]);
        assert_eq!(words("grep x <<< .env"), ["x"]);
    }

    #[test]
    fn variables_tilde_cd() {
        assert_eq!(words("F=.env; cat $F \"${F}\""), [".env", ".env"]);
        std::env::set_var("SHOFER_TEST_VAR_X", "zz");
        assert_eq!(words("cat $SHOFER_TEST_VAR_X/a"), ["zz/a"]);
        let home = std::env::var("HOME").unwrap_or_default();
        if !home.is_empty() {
            assert_eq!(words("cat ~/x"), [format!("{home}/x")]);
            assert_eq!(words("cat '~/x'"), ["~/x"]);
        }
        let c = candidates("cd sub && cat a; cd .. ; cat b").unwrap();
        assert_eq!(c[0].word, "sub");
        assert_eq!(
            (c[1].word.as_str(), c[1].dir.as_path()),
            ("a", Path::new("sub"))
        );
        assert_eq!(
            (c[3].word.as_str(), c[3].dir.as_path()),
            ("b", Path::new("sub/.."))
        );
    }

    #[test]
    fn globs_keep_quoted_parts_literal() {
        let c = candidates("cat *.json 'a*' \"b\"?").unwrap();
        assert_eq!(c[0].glob.as_deref(), Some("*.json"));
        assert_eq!(c[1].glob, None);
        assert_eq!(c[2].glob.as_deref(), Some("b?"));
    }

    #[test]
    fn too_deep_is_refused() {
        let mut s = "cat x".to_string();
        for _ in 0..20 {
            s = format!("echo $({s})");
        }
        assert_eq!(candidates(&s), Err(TooDeep));
    }

    #[test]
    fn access_denied_text() {
        assert_eq!(
            access_denied_json(".env"),
            r#"{"status":"error","type":"access_denied","message":"Access blocked by shoferignore","path":".env","suggestion":"Try to continue without this file, or ask the user to update the shoferignore file"}"#
        );
    }

    #[test]
    fn matcher_on_a_real_tree() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join(".shofer")).unwrap();
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(
            root.join(".shofer/shoferignore"),
            "secrets/\n.env\n/.git/config\n*.pem\n!public.pem\n",
        )
        .unwrap();
        for f in [
            "secrets/creds.json",
            "secrets/keys.json",
            ".env",
            "sub/.env",
            ".git/config",
            "app.log",
            "k.pem",
            "public.pem",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink(root.join(".env"), root.join("innocent")).unwrap();
        let ig = ShoferIgnore::load(root).unwrap().unwrap();
        let d = |c: &str| ig.denied_path(c, root);
        assert_eq!(
            d("cat secrets/creds.json | grep password").as_deref(),
            Some("secrets/creds.json")
        );
        assert_eq!(
            d("grep pattern .git/config").as_deref(),
            Some(".git/config")
        );
        assert_eq!(
            d("head -n 5 app.log secrets/keys.json").as_deref(),
            Some("secrets/keys.json")
        );
        assert_eq!(d("echo x && cat .env").as_deref(), Some(".env"));
        assert_eq!(d("sudo cat .env").as_deref(), Some(".env"));
        assert_eq!(d("bash -c 'cat .env'").as_deref(), Some(".env"));
        assert_eq!(d("cat sub/.env").as_deref(), Some("sub/.env"));
        assert_eq!(d("cd sub && cat .env").as_deref(), Some(".env"));
        assert_eq!(
            d("cat ./secrets/../.env").as_deref(),
            Some("./secrets/../.env")
        );
        assert_eq!(
            d(&format!("cat {}/.env", root.display())).map(|_| ()),
            Some(())
        );
        assert_eq!(d("cat secrets").as_deref(), Some("secrets"));
        assert_eq!(d("cat sec*/*.json").as_deref(), Some("secrets/creds.json"));
        assert_eq!(d("cat *.pem").as_deref(), Some("k.pem"));
        // `*` does not match a leading dot, as in the shell; `.e*` does.
        assert_eq!(ig.denied_path("cat *", &root.join("sub")), None);
        assert_eq!(d("cat .e*").as_deref(), Some(".env"));
        assert_eq!(d("cat ./s*/../.e??").as_deref(), Some("secrets/../.env"));
        // A glob too big to expand: refused when it reaches into the task tree.
        let mut budget = 3;
        assert!(expand_glob(root, "*/*", &mut budget).is_err());
        assert_eq!(d("cat innocent").as_deref(), Some("innocent"));
        assert_eq!(d("wc -l < .env").as_deref(), Some(".env"));
        assert_eq!(d("bash -c 'cat {x,.env}'").as_deref(), Some(".env"));
        assert_eq!(
            ig.denied_path("ls", &root.join("secrets")).as_deref(),
            Some("secrets")
        );
        assert_eq!(d("ls"), None);
        assert_eq!(d("git status"), None);
        assert_eq!(d("ps -ef | grep node"), None);
        assert_eq!(d("cat app.log public.pem sub/x"), None);
        assert_eq!(d("cat 'sec*/*.json'"), None);
        assert_eq!(d("cat /etc/hostname"), None);
        // sub/.git/config is not /.git/config (anchored pattern).
        assert_eq!(ig.denied_path("cat .git/config", &root.join("sub")), None);
        assert_eq!(
            ig.denied_path("cat ../.git/config", &root.join("sub"))
                .as_deref(),
            Some("../.git/config")
        );
    }

    #[test]
    fn missing_and_broken_ignore_files() {
        let t = tempfile::tempdir().unwrap();
        assert!(ShoferIgnore::load(t.path()).unwrap().is_none());
        std::fs::create_dir_all(t.path().join(".shofer/shoferignore")).unwrap();
        let e = ShoferIgnore::load(t.path()).unwrap_err();
        assert_eq!(e.kind, IgnoreFileErrorKind::NotAFile, "{e}");
        assert!(e.to_string().contains("it is a directory"), "{e}");
        std::fs::remove_dir(t.path().join(".shofer/shoferignore")).unwrap();
        // A regular file that cannot be used: commands are refused until it is fixed.
        std::fs::write(t.path().join(".shofer/shoferignore"), b"ok\n\xff\n").unwrap();
        let e = ShoferIgnore::load(t.path()).unwrap_err();
        assert_eq!(e.kind, IgnoreFileErrorKind::Invalid, "{e}");
        assert!(
            e.to_string().contains("cannot be used") && e.to_string().contains("not UTF-8"),
            "{e}"
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = candidates(&s);
        }

        #[test]
        fn never_panics_on_shell_soup(v in proptest::collection::vec(proptest::sample::select(vec![
            "'", "\"", "\\", "$", "(", ")", "`", "<", ">", "<<", "|", "&", ";", "\n", "{", "}",
            "$(", "${", "<(", "cat", "sh", "-c", "sudo", "env", "a=b", "~", "*", "é", " ", "#", "\t",
            "$'", "\\x", "{a,", ",", "}",
        ]), 0..40)) {
            let _ = candidates(&v.concat());
        }
    }
}
