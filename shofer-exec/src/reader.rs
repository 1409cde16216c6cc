//! `read_command_output` (DESIGN §3.4): read an artifact page by page, or search it.
//!
//! Both modes work on one open file descriptor, so an artifact removed while it is being read
//! is still read to the end (Linux keeps the inode while it is open); an artifact truncated
//! while it is being read ends early, and the header says which bytes were shown.
//!
//! **Read mode** returns at most `limit` bytes (and never more than [`MAX_READ`]) from
//! `offset`, numbered from the line that holds `offset`; the newlines before it are counted in
//! 1 MiB chunks.
//!
//! The read-mode header is `[Command Output: <id>]`, `Total size: <size> | Showing bytes
//! <a>-<b> | TRUNCATED|COMPLETE`, then a blank line (as the original host documents it), then
//! `<n> | <line>` with the numbers right-aligned to the widest; a final newline does not make an
//! extra empty numbered line.
//!
//! **Search mode** streams the file in 1 MiB chunks and runs the case-insensitive regex over
//! each chunk at once (the regex engine's literal prefilters do the scanning, as in ripgrep),
//! then checks each candidate line on its own, so results are per line. A pattern that is not a
//! valid regex is searched as a literal. Memory stays bounded even for one huge line: past
//! [`MAX_LINE`] bytes without a newline, the line is searched in windows that overlap by
//! [`WINDOW_OVERLAP`] bytes (a match longer than that across a window edge can be missed), and
//! lines longer than [`MAX_SHOWN_LINE`] are shown as an excerpt around their first match.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use regex::bytes::{Regex, RegexBuilder};
use shofer_core::artifact::{ArtifactId, InvalidArtifactId};
use shofer_core::text;

/// Default `limit`: 40960 bytes.
pub const DEFAULT_LIMIT: i64 = 40960;
/// Most bytes one read-mode call returns, whatever the `limit` (1 MiB).
pub const MAX_READ: u64 = 1 << 20;
/// Search: a line longer than this (1 MiB) is searched in overlapping windows.
pub const MAX_LINE: usize = 1 << 20;
/// Search: overlap between windows of an over-long line (4 KiB).
pub const WINDOW_OVERLAP: usize = 4096;
/// Search: matched lines longer than this (2000 bytes) are shown as an excerpt.
pub const MAX_SHOWN_LINE: usize = 2000;
const CHUNK: usize = 1 << 20;

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
/// [`ReadError`]: a bad id, a missing or empty artifact, an offset outside the file, a
/// non-positive limit, or an I/O error.
pub fn read_output(dir: &Path, req: &ReadRequest<'_>) -> Result<String, ReadError> {
    let id = ArtifactId::parse(req.artifact_id).map_err(ReadError::InvalidId)?;
    let path = dir.join(id.as_str());
    let file = match File::open(&path) {
        Ok(f) => f,
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
    if !meta.is_file() {
        return Err(ReadError::NotFound(id.to_string()));
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
        Some(pattern) => search(&file, id.as_str(), pattern, req.limit as u64).map_err(io_err),
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
    let mut line = 1u64;
    let mut chunk = vec![0u8; CHUNK.min(offset as usize).max(1)];
    let mut pos = 0u64;
    while pos < offset {
        let n = ((offset - pos) as usize).min(chunk.len());
        let got = pread_full(file, &mut chunk[..n], pos)?;
        if got == 0 {
            break;
        }
        line += count_newlines(&chunk[..got]);
        pos += got as u64;
    }
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

fn build_regex(pattern: &str) -> Regex {
    let build = |p: &str| {
        RegexBuilder::new(p)
            .case_insensitive(true)
            .multi_line(true)
            .size_limit(1 << 24)
            .build()
    };
    build(pattern).unwrap_or_else(|_| {
        build(&regex::escape(pattern)).expect("an escaped literal is a valid regex")
    })
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

fn search(file: &File, id: &str, pattern: &str, limit: u64) -> io::Result<String> {
    let re = build_regex(pattern);
    let mut m = Matches {
        limit,
        total: 0,
        shown_bytes: 0,
        cut: false,
        lines: String::new(),
    };
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + MAX_LINE);
    let mut file_pos = 0u64;
    let mut line_no = 1u64; // line number of buf[0]
                            // For an over-long line searched in windows: whether it already matched.
    let mut long_line_matched: Option<bool> = None;
    loop {
        let old = buf.len();
        buf.resize(old + CHUNK, 0);
        let n = pread_full(file, &mut buf[old..], file_pos)?;
        buf.truncate(old + n);
        file_pos += n as u64;
        let eof = n == 0;
        let end = if eof {
            buf.len()
        } else {
            memchr::memrchr(b'\n', &buf).map_or(0, |i| i + 1)
        };
        if end == 0 && !eof {
            // No newline yet: one line longer than the buffer so far.
            if buf.len() >= MAX_LINE {
                let cut = buf.len() - WINDOW_OVERLAP;
                if long_line_matched != Some(true) {
                    if let Some(found) = re.find(&buf) {
                        m.add(line_no, &buf, found.start());
                        long_line_matched = Some(true);
                    } else {
                        long_line_matched = Some(false);
                    }
                }
                buf.drain(..cut);
            }
            continue;
        }
        let mut region_start = 0;
        if let Some(matched) = long_line_matched.take() {
            // The rest of an over-long line: search it only if no window matched.
            let first_end = memchr::memchr(b'\n', &buf[..end]).unwrap_or(end);
            if !matched {
                if let Some(found) = re.find(&buf[..first_end]) {
                    m.add(line_no, &buf[..first_end], found.start());
                }
            }
            if first_end < end {
                line_no += 1;
            }
            region_start = (first_end + 1).min(end);
        }
        line_no = search_region(&re, &buf[region_start..end], line_no, &mut m);
        buf.drain(..end);
        if eof {
            break;
        }
    }
    Ok(format_search(id, pattern, &m))
}

/// Searches whole lines in `region`, whose first line is number `line_no`; returns the
/// number of the line after the region.
fn search_region(re: &Regex, region: &[u8], mut line_no: u64, m: &mut Matches) -> u64 {
    let mut pos = 0;
    let mut counted_to = 0;
    while pos < region.len() {
        let Some(found) = re.find_at(region, pos) else {
            break;
        };
        let start = found.start().min(region.len());
        let ls = memchr::memrchr(b'\n', &region[pos..start]).map_or(pos, |i| pos + i + 1);
        let le = memchr::memchr(b'\n', &region[start..]).map_or(region.len(), |i| start + i);
        line_no += count_newlines(&region[counted_to..ls]);
        counted_to = ls;
        let line = &region[ls..le];
        if found.end() <= le {
            m.add(line_no, line, start - ls);
        } else if let Some(f) = re.find(line) {
            // The match ran across a newline; the line may still match on its own.
            m.add(line_no, line, f.start());
        }
        pos = le + 1;
    }
    line_no + count_newlines(&region[counted_to.min(region.len())..])
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
        let re = build_regex("a(b");
        assert!(re.is_match(b"xA(By"));
        assert!(!re.is_match(b"ab"));
    }
}
