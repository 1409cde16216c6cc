//! `read_command_output` (ARCHITECTURE §3.4): read an artifact page by page, or search it.
//!
//! Both modes work on one open file descriptor, so an artifact removed while it is being read
//! is still read to the end (Linux keeps the inode while it is open); an artifact truncated
//! while it is being read ends early, and the header says which bytes were shown.
//!
//! **Read mode** returns at most `limit` bytes (and never more than [`MAX_READ`]) from
//! `offset`, numbered from the line that holds `offset`; the newlines before it are counted in
//! page-aligned 256 KiB chunks (as fast as `wc -l`: see `pagebuf` for why the alignment).
//!
//! The read-mode header is `[Command Output: <id>]`, `Total size: <size> | Showing bytes
//! <a>-<b> | TRUNCATED|COMPLETE`, then a blank line (as the original host documents it), then
//! `<n> | <line>` with the numbers right-aligned to the widest; a final newline does not make an
//! extra empty numbered line.
//!
//! **Search mode** is per line: a line matches when the case-insensitive pattern matches
//! inside it; `^` and `$` are its start and end. The pattern is compiled so that nothing in it
//! can match a newline ([`build_matcher`]), which lets the matcher (`regex-automata`: finite
//! automata, no backtracking, literal prefilters as in ripgrep) run over up to [`WINDOW`]
//! bytes of whole lines at once, in time linear in the file; each match moves the scan to the
//! next line. A pattern that is not a valid regex is searched as a literal; one longer than
//! [`MAX_PATTERN`] bytes, or whose automaton would exceed [`MAX_PATTERN_NFA`] bytes or
//! [`MAX_PATTERN_STATES`] states, is refused.
//! A line longer than [`WINDOW`] is searched in windows that overlap by [`WINDOW_OVERLAP`]
//! bytes (a match longer than that across a window edge can be missed; `^`/`$` see the real
//! line, never a window edge). Lines longer than [`MAX_SHOWN_LINE`] are shown as an excerpt
//! around their first match. Each call has a time budget ([`SEARCH_BUDGET`]): past it the
//! matches so far are returned with a note saying where the search stopped (search again with
//! that `offset` to go on); a cancelled call stops as soon (see [`read_output_cancellable`]).
//!
//! **Opening an artifact** trusts nothing in the directory: `O_NOFOLLOW | O_NONBLOCK` (a
//! symlink is refused, a FIFO does not block), then the open file must be a regular file owned
//! by this user with one link (a hard link to some other file has two). Anything else is
//! refused with [`ReadError::NotAnArtifact`].

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use regex_automata::nfa::thompson;
use regex_automata::{meta, Input};
use regex_syntax::hir::{
    Capture, Class, ClassBytes, ClassBytesRange, ClassUnicode, ClassUnicodeRange, Hir, HirKind,
    Literal, Repetition,
};
use shofer_core::artifact::{ArtifactId, InvalidArtifactId};
use shofer_core::text;

use crate::pagebuf::PageBuf;

/// Default `limit`: 40960 bytes.
pub const DEFAULT_LIMIT: i64 = 40960;
/// Most bytes one read-mode call returns, whatever the `limit` (1 MiB).
pub const MAX_READ: u64 = 1 << 20;
/// Search: the matcher runs over at most this many bytes (1 MiB) of whole lines at once; a
/// longer line is searched in windows of this size.
pub const WINDOW: usize = 1 << 20;
/// Search: the longest pattern accepted, in bytes (4 KiB).
pub const MAX_PATTERN: usize = 4096;
/// Search: the largest automaton a pattern may compile to, in bytes (2 MiB; e.g.
/// `\w{1000}\w{1000}` is over it).
pub const MAX_PATTERN_NFA: usize = 2 << 20;
/// Search: the work one matcher call may do, in automaton states times bytes. When the lazy
/// DFA gives up on a pattern with many states, the matcher falls back to simulating the NFA,
/// whose cost per byte is its number of states: the windows of such a pattern are made small
/// (down to [`MIN_WINDOW`]) so that the budget and cancellation are checked often.
const WORK_PER_CALL: usize = 1 << 23;
/// Search: the most NFA states a pattern may have (10,000: `\p{L}{20}` has ~6,000,
/// `(a{1,100}){1,100}b` ~20,000). Simulating an NFA costs its states per byte, so this with
/// [`MIN_WINDOW`] bounds one matcher call.
pub const MAX_PATTERN_STATES: usize = 10_000;
/// Search: the smallest window (1 KiB).
pub const MIN_WINDOW: usize = 1 << 10;
/// Search: the time one call may take (10 s); past it the matches so far are returned.
pub const SEARCH_BUDGET: Duration = Duration::from_secs(10);
/// Search: overlap between windows of an over-long line (4 KiB).
pub const WINDOW_OVERLAP: usize = 4096;
/// Search: matched lines longer than this (2000 bytes) are shown as an excerpt.
pub const MAX_SHOWN_LINE: usize = 2000;
const CHUNK: usize = 1 << 20;
/// Read mode: the newlines before the offset are counted in chunks of this size (256 KiB).
const COUNT_CHUNK: usize = 256 << 10;

/// Why a read failed. `Display` gives the message for the model.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReadError {
    /// The id is not `cmd-<digits>.txt`.
    InvalidId(InvalidArtifactId),
    /// No such artifact in the directory.
    NotFound(String),
    /// The artifact has no bytes.
    Empty(String),
    /// The offset is outside the file.
    InvalidOffset {
        /// The offset asked for.
        offset: i64,
        /// The file's size.
        size: u64,
    },
    /// The limit is not positive.
    InvalidLimit(i64),
    /// The name is there but is not an artifact this server wrote: a symlink, a FIFO or
    /// another special file, a file with other links, or one owned by another user.
    NotAnArtifact {
        /// The artifact id.
        id: String,
        /// What was found instead.
        found: String,
    },
    /// Reading failed (`pread`/`open` other than not found).
    Io {
        /// The artifact.
        id: String,
        /// The error.
        source: io::Error,
    },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::InvalidId(e) => e.fmt(f),
            ReadError::NotFound(id) => f.write_str(&text::artifact_not_found_text(id)),
            ReadError::Empty(id) => f.write_str(&text::empty_artifact_text(id)),
            ReadError::InvalidOffset { offset, size } => {
                f.write_str(&text::invalid_offset_text(*offset, *size))
            }
            ReadError::InvalidLimit(l) => f.write_str(&text::invalid_limit_text(*l)),
            ReadError::NotAnArtifact { id, found } => write!(
                f,
                "Refusing to read \"{id}\": it is {found}, not an output artifact written by this server. Only artifact ids from command results can be read."
            ),
            ReadError::Io { id, source } => {
                write!(f, "Error reading command output {id}: {source}")
            }
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io { source, .. } => Some(source),
            ReadError::InvalidId(e) => Some(e),
            _ => None,
        }
    }
}

/// A read_command_output request.
#[derive(Debug, Clone)]
pub struct ReadRequest<'a> {
    /// The artifact id (validated here).
    pub artifact_id: &'a str,
    /// Search pattern; `None` or empty = read mode.
    pub search: Option<&'a str>,
    /// Byte offset (read mode), default 0.
    pub offset: i64,
    /// Byte limit, default [`DEFAULT_LIMIT`].
    pub limit: i64,
}

impl<'a> ReadRequest<'a> {
    /// Read mode from offset 0 with the default limit.
    pub fn new(artifact_id: &'a str) -> Self {
        ReadRequest {
            artifact_id,
            search: None,
            offset: 0,
            limit: DEFAULT_LIMIT,
        }
    }
}

/// Serves one read_command_output call against the artifacts in `dir`.
///
/// # Errors
/// [`ReadError`]: a bad id, a missing or empty artifact, something else planted under the
/// artifact's name, an offset outside the file, a non-positive limit, or an I/O error.
pub fn read_output(dir: &Path, req: &ReadRequest<'_>) -> Result<String, ReadError> {
    read_output_cancellable(dir, req, &AtomicBool::new(false))
}

/// [`read_output`] that a search abandons (returning what it found so far) once `cancel` is
/// set, e.g. by another thread when the client cancelled the call.
///
/// # Errors
/// As [`read_output`].
pub fn read_output_cancellable(
    dir: &Path,
    req: &ReadRequest<'_>,
    cancel: &AtomicBool,
) -> Result<String, ReadError> {
    let id = ArtifactId::parse(req.artifact_id).map_err(ReadError::InvalidId)?;
    let path = dir.join(id.as_str());
    // O_NOFOLLOW: a planted symlink fails with ELOOP; O_NONBLOCK: opening a planted FIFO
    // returns at once instead of waiting for a writer (reads of a regular file ignore it).
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(&path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(ReadError::NotAnArtifact {
                id: id.to_string(),
                found: "a symbolic link".into(),
            });
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Err(ReadError::NotFound(id.to_string()));
        }
        Err(source) => {
            return Err(ReadError::Io {
                id: id.to_string(),
                source,
            })
        }
    };
    let io_err = |source| ReadError::Io {
        id: id.to_string(),
        source,
    };
    let meta = file.metadata().map_err(io_err)?;
    if meta.is_dir() {
        return Err(ReadError::NotFound(id.to_string()));
    }
    if let Some(found) = not_an_artifact(&meta) {
        return Err(ReadError::NotAnArtifact {
            id: id.to_string(),
            found,
        });
    }
    let size = meta.len();
    if size == 0 {
        return Err(ReadError::Empty(id.to_string()));
    }
    if req.offset < 0 || req.offset as u64 >= size {
        return Err(ReadError::InvalidOffset {
            offset: req.offset,
            size,
        });
    }
    if req.limit <= 0 {
        return Err(ReadError::InvalidLimit(req.limit));
    }
    match req.search.filter(|s| !s.is_empty()) {
        Some(pattern) => search(
            &file,
            id.as_str(),
            pattern,
            req.offset as u64,
            req.limit as u64,
            cancel,
        )
        .map_err(io_err),
        None => read_range(
            &file,
            id.as_str(),
            size,
            req.offset as u64,
            req.limit as u64,
        )
        .map_err(io_err),
    }
}

/// What the opened file is when it is not an artifact this server could have written.
fn not_an_artifact(meta: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if !t.is_file() {
        let kind = if t.is_fifo() {
            "a FIFO"
        } else if t.is_dir() {
            "a directory"
        } else if t.is_socket() {
            "a socket"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Some(kind.into());
    }
    if meta.nlink() != 1 {
        return Some(format!("a file with {} hard links", meta.nlink()));
    }
    // Safety: geteuid(2) has no arguments and always succeeds (no wrapper crate is a
    // dependency here for one call).
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Some(format!("a file owned by uid {} (not {me})", meta.uid()));
    }
    None
}

/// Counts `\n` bytes (SIMD, chosen at run time: AVX2 where the CPU has it).
fn count_newlines(buf: &[u8]) -> u64 {
    bytecount::count(buf, b'\n') as u64
}

fn pread_full(file: &File, buf: &mut [u8], mut offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn read_range(file: &File, id: &str, size: u64, offset: u64, limit: u64) -> io::Result<String> {
    let want = limit.min(size - offset).min(MAX_READ) as usize;
    let mut data = vec![0u8; want];
    let got = pread_full(file, &mut data, offset)?;
    data.truncate(got);
    // The line holding `offset`: 1 + the newlines before it.
    let line = 1 + newlines_before(file, offset)?;
    let end = offset + data.len() as u64;
    let status = if end < size { "TRUNCATED" } else { "COMPLETE" };
    let content = String::from_utf8_lossy(&data);
    let mut lines: Vec<&str> = content.split('\n').collect();
    if lines.len() > 1 && lines.last() == Some(&"") {
        lines.pop();
    }
    let width = (line + lines.len() as u64 - 1).to_string().len();
    let mut out = format!(
        "[Command Output: {id}]\nTotal size: {} | Showing bytes {offset}-{end} | {status}\n\n",
        text::format_read_size(size)
    );
    for (i, l) in lines.iter().enumerate() {
        out.push_str(&format!("{:>width$} | {l}\n", line + i as u64));
    }
    out.pop();
    Ok(out)
}

/// Why a search pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// Longer than [`MAX_PATTERN`] bytes (the length).
    TooLong(usize),
    /// Its automaton would exceed [`MAX_PATTERN_NFA`] bytes or [`MAX_PATTERN_STATES`] states.
    TooComplex(String),
}

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatternError::TooLong(n) => write!(
                f,
                "Search pattern too long: {n} bytes; at most {MAX_PATTERN} bytes are accepted. Use a shorter pattern."
            ),
            PatternError::TooComplex(e) => write!(
                f,
                "Search pattern too complex ({e}); simplify it (fewer or smaller counted repetitions like {{1,100}}, fewer alternatives)."
            ),
        }
    }
}

/// Compiles `pattern` for per-line search: case-insensitive, `^`/`$` at line start and end,
/// and nothing in it can match a newline (`\n` is taken out of every class, a literal
/// newline never matches), so no match crosses a line and the matcher can run over many
/// lines at once. A pattern that is not a valid regex is searched as a literal.
///
/// # Errors
/// [`PatternError`] past the size limits.
pub fn build_matcher(pattern: &str) -> Result<meta::Regex, PatternError> {
    build(pattern).map(|(re, _)| re)
}

/// The matcher and its number of NFA states.
fn build(pattern: &str) -> Result<(meta::Regex, usize), PatternError> {
    if pattern.len() > MAX_PATTERN {
        return Err(PatternError::TooLong(pattern.len()));
    }
    let parse = |p: &str| {
        regex_syntax::ParserBuilder::new()
            .case_insensitive(true)
            .multi_line(true)
            .build()
            .parse(p)
            .map_err(|e| e.to_string())
    };
    let hir = match parse(pattern) {
        Ok(h) => h,
        Err(_) => parse(&regex_syntax::escape(pattern)).map_err(PatternError::TooComplex)?,
    };
    let hir = without_newline(hir);
    let too_complex = |e: &dyn std::fmt::Display| PatternError::TooComplex(e.to_string());
    let states = thompson::Compiler::new()
        .configure(
            thompson::Config::new()
                .nfa_size_limit(Some(MAX_PATTERN_NFA))
                .shrink(false),
        )
        .build_from_hir(&hir)
        .map_err(|e| too_complex(&e))?
        .states()
        .len();
    if states > MAX_PATTERN_STATES {
        return Err(PatternError::TooComplex(format!(
            "{states} automaton states; at most {MAX_PATTERN_STATES} are searched"
        )));
    }
    let re = meta::Builder::new()
        .configure(
            meta::Config::new()
                .nfa_size_limit(Some(MAX_PATTERN_NFA))
                .dfa_size_limit(Some(MAX_PATTERN_NFA)),
        )
        .build_from_hir(&hir)
        .map_err(|e| too_complex(&e))?;
    Ok((re, states))
}

/// `hir` with `\n` removed from everything it can match (as ripgrep does for line search).
fn without_newline(hir: Hir) -> Hir {
    match hir.into_kind() {
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(Literal(bytes)) if bytes.contains(&b'\n') => Hir::fail(),
        HirKind::Literal(Literal(bytes)) => Hir::literal(bytes),
        HirKind::Class(Class::Unicode(mut c)) => {
            c.difference(&ClassUnicode::new([ClassUnicodeRange::new('\n', '\n')]));
            Hir::class(Class::Unicode(c))
        }
        HirKind::Class(Class::Bytes(mut c)) => {
            c.difference(&ClassBytes::new([ClassBytesRange::new(b'\n', b'\n')]));
            Hir::class(Class::Bytes(c))
        }
        HirKind::Look(l) => Hir::look(l),
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            sub: Box::new(without_newline(*r.sub)),
            ..r
        }),
        HirKind::Capture(c) => Hir::capture(Capture {
            sub: Box::new(without_newline(*c.sub)),
            ..c
        }),
        HirKind::Concat(v) => Hir::concat(v.into_iter().map(without_newline).collect()),
        HirKind::Alternation(v) => Hir::alternation(v.into_iter().map(without_newline).collect()),
    }
}

struct Matches {
    limit: u64,
    total: u64,
    shown_bytes: u64,
    cut: bool,
    lines: String,
}

impl Matches {
    fn add(&mut self, line_no: u64, line: &[u8], match_start: usize) {
        self.total += 1;
        if self.cut {
            return;
        }
        let shown = excerpt(line, match_start);
        if self.shown_bytes + shown.len() as u64 > self.limit {
            self.cut = true;
            return;
        }
        self.shown_bytes += shown.len() as u64;
        self.lines.push_str(&format!("{line_no:>5} | {shown}\n"));
    }
}

/// The line itself, or for a line over [`MAX_SHOWN_LINE`] bytes an excerpt around the match:
/// `[...a bytes...]<excerpt>[...b bytes...]`.
fn excerpt(line: &[u8], match_start: usize) -> String {
    if line.len() <= MAX_SHOWN_LINE {
        return String::from_utf8_lossy(line).into_owned();
    }
    let mut a = match_start.saturating_sub(MAX_SHOWN_LINE / 4);
    let mut b = (a + MAX_SHOWN_LINE).min(line.len());
    a = b.saturating_sub(MAX_SHOWN_LINE).min(a);
    while a > 0 && line[a] & 0xC0 == 0x80 {
        a -= 1;
    }
    while b < line.len() && line[b] & 0xC0 == 0x80 {
        b += 1;
    }
    let mut s = String::new();
    if a > 0 {
        s.push_str(&format!("[...{a} bytes...]"));
    }
    s.push_str(&String::from_utf8_lossy(&line[a..b]));
    if b < line.len() {
        s.push_str(&format!("[...{} bytes...]", line.len() - b));
    }
    s
}

/// When a search must stop early.
struct Stop<'a> {
    deadline: Instant,
    cancel: &'a AtomicBool,
}

/// Why a search ended before the end of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    Budget,
    Cancelled,
}

impl Stop<'_> {
    fn check(&self) -> Option<Stopped> {
        if self.cancel.load(Ordering::Relaxed) {
            Some(Stopped::Cancelled)
        } else if Instant::now() >= self.deadline {
            Some(Stopped::Budget)
        } else {
            None
        }
    }
}

/// The search's scanner: the matcher, its cache and the matches so far.
struct Scan<'a> {
    re: &'a meta::Regex,
    cache: meta::Cache,
    m: Matches,
    stop: Stop<'a>,
}

impl Scan<'_> {
    /// The first match in `hay[from..to]` (the bytes around the span are context for `^`,
    /// `$` and `\b`).
    fn find(&mut self, hay: &[u8], from: usize, to: usize) -> Option<(usize, usize)> {
        self.re
            .search_with(&mut self.cache, &Input::new(hay).span(from..to))
            .map(|m| (m.start(), m.end()))
    }

    /// Searches the whole lines `hay[from..to]` (`to` just after a newline or at the end of
    /// the file), whose first line is number `line_no`; returns the number of the line after
    /// them, or where it stopped.
    fn lines(
        &mut self,
        hay: &[u8],
        from: usize,
        to: usize,
        mut line_no: u64,
    ) -> Result<u64, Stopped> {
        let mut pos = from;
        let mut counted_to = from;
        let mut n = 0u32;
        while pos < to {
            // The clock is read every 64 matching lines: a match costs well under a µs.
            n = n.wrapping_add(1);
            if n % 64 == 0 {
                if let Some(s) = self.stop.check() {
                    return Err(s);
                }
            }
            let Some((start, end)) = self.find(hay, pos, to) else {
                break;
            };
            let ls = memchr::memrchr(b'\n', &hay[pos..start]).map_or(pos, |i| pos + i + 1);
            let le = memchr::memchr(b'\n', &hay[end..to]).map_or(to, |i| end + i);
            line_no += count_newlines(&hay[counted_to..ls]);
            counted_to = ls;
            self.m.add(line_no, &hay[ls..le], start - ls);
            pos = le + 1;
        }
        Ok(line_no + count_newlines(&hay[counted_to.min(to)..to]))
    }
}

fn search(
    file: &File,
    id: &str,
    pattern: &str,
    offset: u64,
    limit: u64,
    cancel: &AtomicBool,
) -> io::Result<String> {
    let (re, states) = match build(pattern) {
        Ok(b) => b,
        Err(e) => return Ok(e.to_string()),
    };
    let win = (WORK_PER_CALL / states.max(1)).clamp(MIN_WINDOW, WINDOW);
    let overlap = WINDOW_OVERLAP.min(win / 4);
    let started = Instant::now();
    let mut scan = Scan {
        cache: re.create_cache(),
        re: &re,
        m: Matches {
            limit,
            total: 0,
            shown_bytes: 0,
            cut: false,
            lines: String::new(),
        },
        stop: Stop {
            deadline: started + SEARCH_BUDGET,
            cancel,
        },
    };
    let mut line_no = 1 + newlines_before(file, offset)?;
    // `buf[start..]` is unsearched; bytes before `start` are kept only as context.
    // Zeroed once: refills read into it in place (no per-chunk zeroing or reallocation).
    let mut buf: Vec<u8> = vec![0u8; 2 * CHUNK + WINDOW + WINDOW_OVERLAP + 1];
    let mut len = 0usize;
    let mut start = 0usize;
    let mut file_pos = offset;
    let mut eof = false;
    // Inside a line longer than a window: bytes of it already searched, and whether it matched.
    let mut long: Option<(usize, bool)> = None;
    let stopped = loop {
        if !eof && len - start <= win {
            // Keep the context a long line's next window needs, drop the rest, refill.
            let keep = long.map_or(0, |(seen, _)| seen.min(overlap + 1));
            buf.copy_within(start - keep..len, 0);
            len -= start - keep;
            start = keep;
            while !eof && len - start <= win {
                if buf.len() < len + CHUNK {
                    buf.resize(len + CHUNK, 0);
                }
                let n = pread_full(file, &mut buf[len..len + CHUNK], file_pos)?;
                len += n;
                file_pos += n as u64;
                eof = n == 0;
            }
        }
        let buf = &buf[..len];
        if len == start {
            break None;
        }
        if let Some(s) = scan.stop.check() {
            break Some(s);
        }
        let avail = (len - start).min(win);
        let nl = memchr::memchr(b'\n', &buf[start..start + avail]).map(|i| start + i);
        match long {
            Some((seen, matched)) => {
                // The window may reach back into the part already searched (overlap), so a
                // match across the window edge is found if it is shorter than the overlap.
                let back = seen.min(overlap);
                let (to, line_ends) = match nl {
                    Some(i) => (i, true),
                    None if eof && len - start <= win => (len, true),
                    None => (start + win, false),
                };
                let mut found = matched;
                if !matched {
                    if let Some((s, _)) = scan.find(buf, start - back, to) {
                        scan.m
                            .add(line_no, &buf[start - back..to], s - (start - back));
                        found = true;
                    }
                }
                if line_ends {
                    line_no += 1;
                    start = (to + 1).min(len);
                    long = None;
                } else {
                    start = to;
                    long = Some((seen + win, found));
                }
            }
            None => {
                let last_nl = memchr::memrchr(b'\n', &buf[start..start + avail]).map(|i| start + i);
                match last_nl {
                    Some(i) => {
                        match scan.lines(buf, start, i + 1, line_no) {
                            Ok(n) => line_no = n,
                            Err(s) => break Some(s),
                        }
                        start = i + 1;
                    }
                    None if eof && len - start <= win => {
                        // A last line without a newline.
                        let end = len;
                        if let Err(s) = scan.lines(buf, start, end, line_no) {
                            break Some(s);
                        }
                        start = end;
                    }
                    None => {
                        // A line longer than a window: its first window.
                        let to = start + win;
                        let mut found = false;
                        if let Some((s, _)) = scan.find(buf, start, to) {
                            scan.m.add(line_no, &buf[start..to], s - start);
                            found = true;
                        }
                        start = to;
                        long = Some((win, found));
                    }
                }
            }
        }
    };
    let searched_to = file_pos - (len - start) as u64;
    let mut out = format_search(id, pattern, &scan.m);
    match stopped {
        None => {}
        Some(Stopped::Budget) => out.push_str(&format!(
            "\n\n[Search stopped: the time budget of {}s per call ran out after byte {searched_to} (line {line_no}); the matches above are those found before it. Search again with offset {searched_to} to continue, or use a simpler pattern.]",
            SEARCH_BUDGET.as_secs()
        )),
        Some(Stopped::Cancelled) => out.push_str(&format!(
            "\n\n[Search cancelled after byte {searched_to}.]"
        )),
    }
    Ok(out)
}

/// Newlines in the file before `offset` (1 MiB reads, SIMD count).
fn newlines_before(file: &File, offset: u64) -> io::Result<u64> {
    let mut n = 0;
    // Page-aligned and small enough to stay in the L2 cache between the kernel's copy and the
    // count (see `pagebuf`): as fast as `wc -l`.
    let mut page = PageBuf::new(COUNT_CHUNK.min(offset as usize).max(1));
    let chunk = page.whole();
    let mut pos = 0u64;
    while pos < offset {
        let want = ((offset - pos) as usize).min(chunk.len());
        let got = pread_full(file, &mut chunk[..want], pos)?;
        if got == 0 {
            break;
        }
        n += count_newlines(&chunk[..got]);
        pos += got as u64;
    }
    Ok(n)
}

fn format_search(id: &str, pattern: &str, m: &Matches) -> String {
    let header = format!("[Command Output: {id}] (search: \"{pattern}\")");
    if m.total == 0 {
        return format!("{header}\n\nNo matches found for the search pattern.");
    }
    let shown = m.lines.matches('\n').count();
    let mut out = format!(
        "{header}\nTotal matches: {} | Showing first {shown}\n\n{}",
        m.total, m.lines
    );
    out.pop();
    if m.cut {
        out.push_str(&format!(
            "\n\n[Showing {shown} of {} matching lines: the limit of {} bytes was reached. Narrow the search or raise the limit to see more.]",
            m.total, m.limit
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_keeps_short_lines_and_cuts_long_ones() {
        assert_eq!(excerpt(b"abc", 1), "abc");
        let long = vec![b'a'; 10_000];
        let e = excerpt(&long, 5000);
        assert!(
            e.starts_with("[...4500 bytes...]") && e.ends_with("[...3500 bytes...]"),
            "{}",
            &e[..40]
        );
    }

    #[test]
    fn invalid_regex_is_literal() {
        let re = build_matcher("a(b").unwrap();
        assert!(re.is_match(b"xA(By"));
        assert!(!re.is_match(b"ab"));
    }

    #[test]
    fn nothing_matches_a_newline() {
        for p in [r"a[^x]b", r"a\sb", r"a\nb", r"a(?s:.)b", r"a\Wb", "a\nb"] {
            let re = build_matcher(p).unwrap();
            assert!(!re.is_match(b"a\nb"), "{p}");
        }
        assert!(build_matcher(r"a[^x]b").unwrap().is_match(b"a-b"));
        let re = build_matcher("^b$").unwrap();
        assert!(re.is_match(b"a\nb\nc"));
    }

    #[test]
    fn pattern_limits() {
        assert_eq!(
            build_matcher(&"a".repeat(MAX_PATTERN + 1)).unwrap_err(),
            PatternError::TooLong(MAX_PATTERN + 1)
        );
        for p in [r"\w{1000}\w{1000}", "(a{1,100}){1,100}b"] {
            assert!(
                matches!(build_matcher(p), Err(PatternError::TooComplex(_))),
                "{p}"
            );
        }
        assert!(build_matcher(r"\p{L}{20}").is_ok());
    }
}
