//! Terminal control bytes out of a command's output: what the model reads is what a terminal
//! would finally show, as plain text.
//!
//! [`Stripper`] is a streaming filter (state kept across chunk boundaries, so any chunking of
//! a stream gives the same result). It removes:
//! - escape sequences (ECMA-48): CSI `ESC [ … final` (colours, cursor moves, erase), OSC
//!   `ESC ] … BEL|ESC \` (titles, hyperlinks), DCS/SOS/PM/APC `ESC P|X|^|_ … ESC \`, and the
//!   short `ESC <intermediates> final` ones (`ESC ( B`, `ESC =`, `ESC 7`);
//! - BEL, and backspace together with the character it backs over (`a\bb` shows `b`);
//! - carriage-return rewrites: text after a `\r` replaces the line so far (a progress bar
//!   `10%\r50%\r100%\n` becomes `100%\n`); `\r\n` is a plain line end, and a `\r` at the end of
//!   the stream keeps the line before it.
//!
//! - every other control but newline and tab ([`Controls`]): the C0 controls (NUL, VT, FF, …)
//!   and DEL, and the C1 controls U+0080..U+009F, as UTF-8 (`C2 80`..`C2 9F`) and as raw bytes
//!   that are no part of a UTF-8 character, with the sequences a C1 control starts: CSI
//!   (U+009B) up to its final byte, and OSC (U+009D), DCS (U+0090), SOS, PM and APC up to ST
//!   (U+009C) or the end of the line — a terminal would act on them as on their `ESC` forms
//!   (an OSC 52 clipboard write, a cursor move).
//!
//! Everything else passes unchanged (text, invalid UTF-8 bytes from 0xA0 up).
//!
//! Memory is bounded: the current line is held back (so that a later `\r` can still drop it)
//! only up to [`HOLD`] bytes; older bytes of a longer line are emitted, and a rewrite of such a
//! line keeps them. A string sequence (OSC, DCS, …) longer than [`MAX_STRING`] without its
//! terminator is not one: its bytes are emitted as text (without the `ESC`).
//!
//! Fast path: one pass finds the next `ESC`, `\r`, `\b` or BEL and the last newline before it
//! (64 bytes per step, AVX2 detected at run time, else a block fold the compiler vectorizes and
//! `memrchr`); text up to there is emitted as slices of the input, not copied. Between two of
//! `\r`, `\b`, BEL (found with `memchr3`), text interrupted only by complete CSI sequences
//! (colours) is gathered into one run with the sequences cut out, and that run goes through
//! the line logic once. The gathering takes 64 bytes per step: their `ESC`, `[`, parameter and
//! final bytes as bit masks, every complete CSI sequence's extent from one addition (a start's
//! carry runs through its parameter bytes), and the text packed with byte shuffles (AVX2 and
//! SSSE3, detected at run time; else SSE2 masks and a copy per run of text). The last bytes
//! before a `\r`, and a sequence a block cuts, are parsed one at a time (a short CSI from one
//! 8-byte word). Tests check every path byte for byte against the state machine under any
//! chunking.
//!
//! ```
//! use shofer_core::strip::strip_all;
//! assert_eq!(strip_all(b"\x1b[31m FAIL \x1b[39m x\n"), b" FAIL  x\n");
//! assert_eq!(strip_all(b"10%\r50%\r100%\ndone\r\n"), b"100%\ndone\n");
//! ```

/// Most bytes of the current line held back for a possible `\r` rewrite (8 KiB).
pub const HOLD: usize = 8 * 1024;
/// Longest string sequence (OSC, DCS, SOS, PM, APC) body taken as one (16 KiB).
pub const MAX_STRING: usize = 16 * 1024;
/// Longest CSI sequence taken as one (256 bytes); a longer one is dropped up to there.
const MAX_CSI: usize = 256;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const BS: u8 = 0x08;
const CR: u8 = b'\r';

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    /// After `ESC`.
    Esc,
    /// `ESC` then intermediates (0x20–0x2F).
    EscInter,
    /// Inside `ESC [`.
    Csi,
    /// Inside a string sequence (OSC, DCS, SOS, PM, APC).
    Str,
    /// `ESC` inside a string sequence: `\` ends it.
    StrEsc,
}

/// The streaming filter (see the module docs).
#[derive(Debug, Clone)]
pub struct Stripper {
    state: State,
    /// Bytes of the current CSI so far (only counted).
    csi_len: usize,
    /// The body of the current string sequence (for the unterminated case).
    string: Vec<u8>,
    /// The held-back end of the current line.
    line: Vec<u8>,
    /// A `\r` was seen and not yet resolved: a following `\n` ends the line normally, any
    /// other text replaces the line.
    cr: bool,
    /// [`HOLD`], smaller in tests.
    hold: usize,
    /// Text with CSI sequences cut out, gathered by the fast path.
    gathered: Vec<u8>,
    /// The fast path is on (off only in tests, where the byte-by-byte path is its oracle).
    fast: bool,
    /// The CPU has AVX2 and POPCNT: the fast path scans with AVX2 and packs text with byte
    /// shuffles (off in tests of the portable paths).
    shuffle: bool,
    /// The other controls' filter, applied to every run of text.
    controls: Controls,
}

impl Default for Stripper {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn is_special(b: u8) -> bool {
    b == ESC || b == CR || b == BS || b == BEL
}

/// The index of the first `ESC`, `\r`, `\b` or BEL in `h`. Whole 64-byte blocks are tested
/// with a branch-free fold (vectorized by the compiler), so plain text costs a fraction of a
/// memory copy.
#[inline]
fn find_special(h: &[u8]) -> Option<usize> {
    const BLOCK: usize = 64;
    let mut blocks = h.chunks_exact(BLOCK);
    let mut base = 0;
    for blk in &mut blocks {
        let hit = blk.iter().fold(0u8, |acc, &b| {
            acc | u8::from(b == ESC) | u8::from(b == CR) | u8::from(b.wrapping_sub(BEL) < 2)
        });
        if hit != 0 {
            return blk.iter().position(|&b| is_special(b)).map(|p| base + p);
        }
        base += BLOCK;
    }
    blocks
        .remainder()
        .iter()
        .position(|&b| is_special(b))
        .map(|p| base + p)
}

impl Stripper {
    /// A filter at the start of a stream.
    pub fn new() -> Self {
        Stripper {
            state: State::Ground,
            csi_len: 0,
            string: Vec::new(),
            line: Vec::new(),
            cr: false,
            hold: HOLD,
            gathered: Vec::new(),
            fast: true,
            shuffle: shuffle_available(),
            controls: Controls::default(),
        }
    }

    /// The bytes held back so far (the current line's end): not emitted yet, but what a
    /// terminal shows now. A preview of a running command appends them.
    pub fn pending(&self) -> &[u8] {
        &self.line
    }

    /// Filters the next chunk; `emit` gets the stripped bytes that are final, in order (slices
    /// of `input` where possible).
    pub fn feed(&mut self, input: &[u8], emit: &mut impl FnMut(&[u8])) {
        let mut i = 0;
        // The next `\r`, `\b` or BEL at or after the first `ESC` the fast path met
        // (input.len() when none); `None` until then.
        let mut hard: Option<usize> = None;
        while i < input.len() {
            if self.state == State::Ground && self.fast {
                // One pass finds the next special and the run's last newline: plain text
                // costs one read of each byte.
                let (s, nl) = scan_specials(&input[i..], self.shuffle);
                let s = i + s;
                if s == input.len() || input[s] != ESC {
                    if s > i {
                        self.text_nl(&input[i..s], nl, emit);
                    }
                    i = s;
                } else {
                    let h = match hard {
                        Some(h) if h >= s => h,
                        _ => {
                            memchr::memchr3(CR, BS, BEL, &input[s..]).map_or(input.len(), |p| s + p)
                        }
                    };
                    hard = Some(h);
                    i = self.gather_colours(input, i, h, emit);
                }
                if i == input.len() {
                    break;
                }
            }
            if self.state == State::Ground {
                let run_end = find_special(&input[i..]).map_or(input.len(), |p| i + p);
                if run_end > i {
                    self.text(&input[i..run_end], emit);
                }
                i = run_end;
                if i == input.len() {
                    break;
                }
                if input[i] != ESC {
                    // A character cut short by a line control is no character: its bytes
                    // are given to the line first, as raw bytes.
                    self.break_controls(emit);
                }
                match input[i] {
                    CR => self.cr = true,
                    BS => self.backspace(),
                    ESC => {
                        // Fast path: a whole CSI sequence (colours) in this chunk is skipped
                        // in one tight loop; anything else goes through the state machine.
                        if let Some(end) = csi_end(&input[i..]) {
                            i += end;
                            continue;
                        }
                        self.state = State::Esc;
                    }
                    _ => {} // BEL
                }
                i += 1;
                continue;
            }
            let b = input[i];
            i += 1;
            if let Some(redo) = self.escape_byte(b, emit) {
                // The byte ended a sequence without being part of it: it is text or a
                // control of its own.
                if redo {
                    i -= 1;
                }
            }
        }
    }

    /// The fast path in the ground state: from `i` up to `hard` (the next `\r`, `\b` or BEL),
    /// text and complete CSI sequences; the text goes through [`Stripper::text`] as one run.
    /// Returns where it stopped: `hard`, or an `ESC` that does not start a complete CSI
    /// sequence (left to the state machine).
    fn gather_colours(
        &mut self,
        input: &[u8],
        i: usize,
        hard: usize,
        emit: &mut impl FnMut(&[u8]),
    ) -> usize {
        let Some(p) = memchr::memchr(ESC, &input[i..hard]) else {
            // No escape at all: the run is emitted as slices of the input.
            if hard > i {
                self.text(&input[i..hard], emit);
            }
            return hard;
        };
        let src = &input[..hard];
        let mut r = i + p;
        let mut gathered = std::mem::take(&mut self.gathered);
        // Room for the text plus what the fixed-size copies below may write past it.
        let need = hard - i + BLOCK + GATHER_ALIGN;
        if gathered.len() < need {
            gathered = vec![0; need];
        }
        // Cache-line aligned: the artifact write copies from here (see the pump's buffer).
        let g0 = gathered
            .as_ptr()
            .align_offset(GATHER_ALIGN)
            .min(GATHER_ALIGN - 1);
        let dst = &mut gathered[g0..];
        let mut w = r - i;
        dst[..w].copy_from_slice(&input[i..r]);
        (r, w) = gather_blocks(input, hard, r, dst, w, self.shuffle);
        // The rest, one sequence at a time.
        loop {
            let e = memchr::memchr(ESC, &src[r..]).map_or(hard, |p| r + p);
            dst[w..w + (e - r)].copy_from_slice(&src[r..e]);
            w += e - r;
            r = e;
            if r == hard {
                break;
            }
            let Some(n) = csi_len(src, r) else {
                break;
            };
            r += n;
        }
        if w > 0 {
            self.text(&gathered[g0..g0 + w], emit);
        }
        self.gathered = gathered;
        r
    }

    /// One byte while inside an escape sequence. Returns `Some(true)` when the byte must be
    /// processed again in the ground state.
    fn escape_byte(&mut self, b: u8, emit: &mut impl FnMut(&[u8])) -> Option<bool> {
        match self.state {
            State::Ground => unreachable!("ground bytes are handled by feed"),
            State::Esc => match b {
                b'[' => {
                    self.state = State::Csi;
                    self.csi_len = 0;
                }
                b']' | b'P' | b'X' | b'^' | b'_' => {
                    self.state = State::Str;
                    self.string.clear();
                }
                0x20..=0x2f => self.state = State::EscInter,
                0x30..=0x7e => self.state = State::Ground,
                ESC => {}
                _ => {
                    self.state = State::Ground;
                    return Some(true);
                }
            },
            State::EscInter => match b {
                0x20..=0x2f => {}
                0x30..=0x7e => self.state = State::Ground,
                ESC => self.state = State::Esc,
                _ => {
                    self.state = State::Ground;
                    return Some(true);
                }
            },
            State::Csi => match b {
                0x20..=0x3f => {
                    self.csi_len += 1;
                    if self.csi_len > MAX_CSI {
                        self.state = State::Ground;
                    }
                }
                0x40..=0x7e => self.state = State::Ground,
                ESC => self.state = State::Esc,
                _ => {
                    self.state = State::Ground;
                    return Some(true);
                }
            },
            State::Str => match b {
                BEL | 0x18 | 0x1a => self.state = State::Ground,
                ESC => self.state = State::StrEsc,
                _ => {
                    self.string.push(b);
                    if self.string.len() > MAX_STRING {
                        // Not a terminal string after all: give its bytes back as text.
                        self.state = State::Ground;
                        let body = std::mem::take(&mut self.string);
                        self.feed(&body, emit);
                    }
                }
            },
            State::StrEsc => {
                if b == b'\\' {
                    self.state = State::Ground;
                } else {
                    // ESC ends the string and starts a new sequence.
                    self.state = State::Esc;
                    return Some(true);
                }
            }
        }
        None
    }

    fn backspace(&mut self) {
        // Drop the last character (a UTF-8 lead byte and its continuation bytes).
        while let Some(b) = self.line.pop() {
            if b & 0xc0 != 0x80 {
                break;
            }
        }
    }

    /// A run of text without specials, in the ground state.
    fn text(&mut self, run: &[u8], emit: &mut impl FnMut(&[u8])) {
        self.text_nl(run, memchr::memrchr(b'\n', run), emit);
    }

    /// [`Stripper::text`] with the run's last newline already known (`nl`, an index in `run`):
    /// its controls removed ([`Controls`]), then the line logic.
    fn text_nl(&mut self, run: &[u8], nl: Option<usize>, emit: &mut impl FnMut(&[u8])) {
        let mut ctl = std::mem::take(&mut self.controls);
        match ctl.filter(run) {
            None => self.line_text(run, nl, emit),
            Some(kept) => self.line_text(kept, memchr::memrchr(b'\n', kept), emit),
        }
        self.controls = ctl;
    }

    /// A line control (`\r`, `\b`, BEL) or the end: what [`Controls`] holds back is text now.
    fn break_controls(&mut self, emit: &mut impl FnMut(&[u8])) {
        if !self.controls.holds() {
            return;
        }
        let mut ctl = std::mem::take(&mut self.controls);
        let kept = ctl.flush();
        self.line_text(kept, memchr::memrchr(b'\n', kept), emit);
        self.controls = ctl;
    }

    /// Text without controls into the current line.
    fn line_text(&mut self, run: &[u8], nl: Option<usize>, emit: &mut impl FnMut(&[u8])) {
        if run.is_empty() {
            return;
        }
        let mut run = run;
        if self.cr {
            self.cr = false;
            if run[0] != b'\n' {
                // A carriage return then text: the line is rewritten.
                self.line.clear();
            }
        }
        if let Some(nl) = nl {
            if !self.line.is_empty() {
                emit(&self.line);
                self.line.clear();
            }
            emit(&run[..=nl]);
            run = &run[nl + 1..];
        }
        let total = self.line.len() + run.len();
        if total <= self.hold {
            self.line.extend_from_slice(run);
            return;
        }
        // Too long to hold: emit all but the line's last `hold` bytes (the same bytes
        // whatever the chunking).
        // Cut before a character, not inside one: a rewrite would drop its end and leave a
        // lead byte before bytes 0x80..0x9F of the next line (a C1 control to a terminal).
        let at = |k: usize| match k.checked_sub(self.line.len()) {
            None => self.line[k],
            Some(r) => run[r],
        };
        let mut excess = total - self.hold;
        if at(excess) & 0xc0 == 0x80 {
            for back in 1..=excess.min(3) {
                let lead = at(excess - back);
                if lead & 0xc0 == 0x80 {
                    continue;
                }
                // The character `lead` starts reaches past the cut: cut before it.
                if lead >= 0xc0 && (lead.leading_ones() as usize) > back {
                    excess -= back;
                }
                break;
            }
        }
        if excess >= self.line.len() {
            let from_run = excess - self.line.len();
            if !self.line.is_empty() {
                emit(&self.line);
                self.line.clear();
            }
            emit(&run[..from_run]);
            self.line.extend_from_slice(&run[from_run..]);
        } else {
            emit(&self.line[..excess]);
            self.line.drain(..excess);
            self.line.extend_from_slice(run);
        }
    }

    /// The end of the stream: emits what is held back (an unterminated escape sequence is
    /// dropped, except a string sequence's body, which is not one).
    pub fn finish(&mut self, emit: &mut impl FnMut(&[u8])) {
        if self.state == State::Str || self.state == State::StrEsc {
            let body = std::mem::take(&mut self.string);
            self.state = State::Ground;
            self.feed(&body, emit);
        }
        self.state = State::Ground;
        self.break_controls(emit);
        self.cr = false;
        if !self.line.is_empty() {
            emit(&self.line);
            self.line.clear();
        }
    }
}

/// A C1 sequence being removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Seq {
    #[default]
    None,
    /// After CSI (U+009B): parameters and intermediates up to a final byte.
    Csi,
    /// After OSC, DCS, SOS, PM or APC: up to ST (U+009C) or a newline.
    Str,
}

/// Removes from text (the runs between the escape sequences and line controls [`Stripper`]
/// handles) every C0 control but `\n` and `\t`, DEL, and the C1 controls with the sequences
/// they start (see the module docs). A C1 control is U+0080..U+009F as UTF-8, or a byte
/// 0x80..0x9F that is no part of a well-formed UTF-8 character (as `std::str::from_utf8`
/// sees it); the bytes of a character a run cuts short are held until the next run.
#[derive(Debug, Clone, Default)]
struct Controls {
    /// The start of a UTF-8 character the last run ended in (at most 3 bytes).
    tail: Vec<u8>,
    seq: Seq,
    /// Bytes of the current sequence so far.
    seq_len: usize,
    /// The kept bytes of a run that lost some.
    out: Vec<u8>,
    /// The held tail and the next run, joined.
    joined: Vec<u8>,
}

impl Controls {
    /// Whether anything is held back or a sequence is open.
    fn holds(&self) -> bool {
        !self.tail.is_empty() || self.seq != Seq::None
    }

    /// `run` without its controls: `None` when that is `run` itself (the common case: no
    /// byte is copied).
    fn filter<'a>(&'a mut self, run: &'a [u8]) -> Option<&'a [u8]> {
        if !self.holds() {
            match clean(run) {
                Some(n) if n == run.len() => return None,
                Some(n) => {
                    // Clean up to a character the run cuts short (a read ends inside it).
                    self.tail.extend_from_slice(&run[n..]);
                    return Some(&run[..n]);
                }
                None => {}
            }
        }
        self.out.clear();
        let mut rest = run;
        if !self.tail.is_empty() && self.seq == Seq::None {
            // The character the last run cut short, finished with this run's continuation
            // bytes; then the rest is usually clean and copied as it is.
            let need = (self.tail[0].leading_ones() as usize).clamp(2, 4) - self.tail.len();
            let k = rest
                .iter()
                .take(need)
                .take_while(|&&b| b & 0xc0 == 0x80)
                .count();
            let mut piece = std::mem::take(&mut self.joined);
            piece.clear();
            piece.append(&mut self.tail);
            piece.extend_from_slice(&rest[..k]);
            rest = &rest[k..];
            // Cut short again only when the run ended inside it.
            self.decode(&piece, !rest.is_empty() || k == need);
            self.joined = piece;
            if let Some(n) = clean(rest).filter(|_| !self.holds()) {
                self.out.extend_from_slice(&rest[..n]);
                self.tail.extend_from_slice(&rest[n..]);
                return Some(&self.out);
            }
        }
        let mut joined = std::mem::take(&mut self.joined);
        joined.clear();
        joined.append(&mut self.tail);
        joined.extend_from_slice(rest);
        self.decode(&joined, false);
        self.joined = joined;
        Some(&self.out)
    }

    /// Decodes `bytes` into [`Self::out`]; a character cut short at their end is held in
    /// [`Self::tail`], or with `last` taken as raw bytes.
    fn decode(&mut self, bytes: &[u8], last: bool) {
        let mut rest = bytes;
        loop {
            match std::str::from_utf8(rest) {
                Ok(_) => {
                    self.valid(rest);
                    return;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    self.valid(valid);
                    let n = match e.error_len() {
                        Some(n) => n,
                        None if last => after.len(),
                        None => {
                            // A character cut short by the end of the run.
                            self.tail.extend_from_slice(after);
                            return;
                        }
                    };
                    for &b in &after[..n] {
                        self.raw(b);
                    }
                    rest = &after[n..];
                }
            }
        }
    }

    /// The end of a line of controls or of the stream: a held character start is raw bytes,
    /// a CSI ends. Returns the kept bytes.
    fn flush(&mut self) -> &[u8] {
        self.out.clear();
        for b in std::mem::take(&mut self.tail) {
            self.raw(b);
        }
        if self.seq == Seq::Csi {
            self.seq = Seq::None;
        }
        &self.out
    }

    /// Well-formed UTF-8: a C1 control is `C2 80`..`C2 9F`.
    fn valid(&mut self, text: &[u8]) {
        let mut i = 0;
        while i < text.len() {
            let b = text[i];
            if b == 0xc2 && matches!(text.get(i + 1), Some(0x80..=0x9f)) {
                self.control(text[i + 1]);
                i += 2;
                continue;
            }
            self.byte(b);
            i += 1;
        }
    }

    /// A byte that is no part of a UTF-8 character.
    fn raw(&mut self, b: u8) {
        if (0x80..=0x9f).contains(&b) {
            self.control(b);
        } else {
            self.byte(b);
        }
    }

    fn control(&mut self, c: u8) {
        match c {
            0x9b => (self.seq, self.seq_len) = (Seq::Csi, 0),
            0x90 | 0x98 | 0x9d | 0x9e | 0x9f => (self.seq, self.seq_len) = (Seq::Str, 0),
            // ST ends a string; any C1 control ends a CSI.
            _ if self.seq == Seq::Csi || c == 0x9c => self.seq = Seq::None,
            _ => {}
        }
    }

    /// A byte of text that is no C1 control.
    fn byte(&mut self, b: u8) {
        match self.seq {
            Seq::Csi => {
                if (0x20..=0x3f).contains(&b) {
                    self.seq_len += 1;
                    if self.seq_len > MAX_CSI {
                        self.seq = Seq::None;
                    }
                    return;
                }
                self.seq = Seq::None;
                if (0x40..=0x7e).contains(&b) {
                    return;
                }
            }
            Seq::Str => {
                if b != b'\n' {
                    self.seq_len += 1;
                    if self.seq_len > MAX_STRING {
                        self.seq = Seq::None;
                    }
                    return;
                }
                self.seq = Seq::None;
            }
            Seq::None => {}
        }
        if !is_c0_or_del(b) {
            self.out.push(b);
        }
    }
}

/// A C0 control other than `\n` and `\t`, or DEL.
#[inline]
fn is_c0_or_del(b: u8) -> bool {
    (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f
}

/// `Some(n)` when `run` holds no control [`Controls`] removes up to `n`, and after `n` the
/// start of a character the run cuts short (`n == run.len()`: none); `None` when it must be
/// decoded. Text without C0 controls, DEL, bytes 0x80..0x9F and 0xC2 (ASCII, most Latin text)
/// is decided 64 bytes at a time (a fold the compiler vectorizes): without a byte 0x80..0x9F
/// it cannot hold a C1 control, well-formed or not. Other text is checked as UTF-8.
#[inline]
fn clean(run: &[u8]) -> Option<usize> {
    const BLOCK: usize = 64;
    // Branch-free, so that the fold vectorizes.
    let odd = |b: u8| {
        (u8::from(b < 0x20) & u8::from(b != b'\n') & u8::from(b != b'\t'))
            | u8::from(b == 0x7f)
            | u8::from(b.wrapping_sub(0x80) < 0x20)
            | u8::from(b == 0xc2)
    };
    let mut blocks = run.chunks_exact(BLOCK);
    let mut plain = true;
    for blk in &mut blocks {
        if blk.iter().fold(0u8, |acc, &b| acc | odd(b)) != 0 {
            plain = false;
            break;
        }
    }
    if plain && blocks.remainder().iter().all(|&b| odd(b) == 0) {
        // A character cut short at the end: its lead byte and the continuations so far.
        let back = run
            .iter()
            .rev()
            .take(3)
            .take_while(|&&b| b & 0xc0 == 0x80)
            .count();
        let n = run.len() - back;
        return match run.get(n.wrapping_sub(1)) {
            Some(&lead) if n > 0 && lead >= 0xc0 && lead.leading_ones() as usize > back + 1 => {
                Some(n - 1)
            }
            _ => Some(run.len()),
        };
    }
    let n = match std::str::from_utf8(run) {
        Ok(_) => run.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => return None,
    };
    let text = &run[..n];
    let controls = text.iter().any(|&b| is_c0_or_del(b))
        || memchr::memchr_iter(0xc2, text).any(|i| matches!(text.get(i + 1), Some(0x80..=0x9f)));
    (!controls).then_some(n)
}

/// Alignment of the fast path's gathered text (one cache line).
const GATHER_ALIGN: usize = 64;
const ONES: u64 = 0x0101_0101_0101_0101;
const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `v` that is not zero (exact, no carries between bytes).
#[inline]
fn nonzero_bytes(v: u64) -> u64 {
    (((v & LOW7) + LOW7) | v) & HIGH
}

/// The block step of [`Stripper::gather_colours`]: from `r` (reading `input`, writing the
/// text to `dst` from `w`), 64 bytes at a time while a whole block before `hard` and the 64
/// bytes after it can be read. Returns the new `(r, w)`: `r` is where the rest (fewer than
/// 64 bytes before `hard`, or an `ESC` that is not a complete CSI sequence) begins.
/// `shuffle`: [`shuffle_available`] said yes.
#[inline]
fn gather_blocks(
    input: &[u8],
    hard: usize,
    r: usize,
    dst: &mut [u8],
    w: usize,
    shuffle: bool,
) -> (usize, usize) {
    #[cfg(target_arch = "x86_64")]
    if shuffle {
        // Safety: the CPU has AVX2 and POPCNT (`shuffle_available`).
        return unsafe { gather_blocks_avx2(input, hard, r, dst, w) };
    }
    let _ = shuffle;
    block_loop::<false>(input, hard, r, dst, w)
}

/// The CPU has what [`gather_blocks_avx2`] is compiled for: AVX2 (which implies SSSE3) and
/// POPCNT (x86-64-v3 has both; the x86-64 baseline, and QEMU's default CPU, have neither).
fn shuffle_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn gather_blocks_avx2(
    input: &[u8],
    hard: usize,
    r: usize,
    dst: &mut [u8],
    w: usize,
) -> (usize, usize) {
    block_loop::<true>(input, hard, r, dst, w)
}

/// [`gather_blocks`]'s loop; `PACK`: the bytes are classified 32 at a time (AVX2) and the kept
/// ones moved with byte shuffles (SSSE3), only called so from a function compiled for AVX2;
/// else SSE2 and a kept run at a time.
#[inline(always)]
fn block_loop<const PACK: bool>(
    input: &[u8],
    hard: usize,
    mut r: usize,
    dst: &mut [u8],
    mut w: usize,
) -> (usize, usize) {
    let src = &input[..hard];
    while r + BLOCK <= hard && r + 2 * BLOCK <= input.len() {
        let block: &[u8; BLOCK] = input[r..r + BLOCK].try_into().expect("64 bytes");
        let classes = if PACK {
            #[cfg(target_arch = "x86_64")]
            // Safety: PACK is only set by `gather_blocks_avx2`, for a CPU with AVX2.
            unsafe {
                byte_classes_avx2(block)
            }
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!("PACK is x86-64 only")
        } else {
            byte_classes(block)
        };
        let (cut, keep) = csi_block(classes);
        if keep == u64::MAX {
            dst[w..w + BLOCK].copy_from_slice(block);
            w += BLOCK;
        } else if PACK {
            #[cfg(target_arch = "x86_64")]
            {
                // Safety: as above (AVX2 implies SSSE3).
                w = unsafe { pack_kept_ssse3(block, keep, dst, w) };
            }
        } else {
            let mut k = keep;
            while k != 0 {
                let a = k.trailing_zeros() as usize;
                let run = (!(k >> a)).trailing_zeros() as usize;
                let from: &[u8; BLOCK] = input[r + a..r + a + BLOCK].try_into().expect("64 bytes");
                dst[w..w + BLOCK].copy_from_slice(from);
                w += run;
                k = if a + run >= BLOCK {
                    0
                } else {
                    k & (u64::MAX << (a + run))
                };
            }
        }
        r += cut;
        if cut == 0 {
            // An `ESC` whose sequence is not a complete CSI within the block.
            match csi_len(src, r) {
                Some(n) => r += n,
                None => break,
            }
        }
    }
    (r, w)
}

/// For each 8-bit keep mask: the indices of its set bits, in order, one per byte (the rest 0).
const PACK_INDEX: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut m = 0;
    while m < 256 {
        let (mut k, mut n) = (0, 0);
        while k < 8 {
            if m & (1 << k) != 0 {
                t[m] |= (k as u64) << (8 * n);
                n += 1;
            }
            k += 1;
        }
        m += 1;
    }
    t
};

/// Writes the bytes of `block` whose bit is set in `keep` to `dst` from `w`, in order (16
/// bytes at a time: one shuffle packs each 8-byte half), and returns the new `w`. Writes up
/// to 64 bytes past the new `w`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3,popcnt")]
#[inline]
unsafe fn pack_kept_ssse3(block: &[u8; BLOCK], keep: u64, dst: &mut [u8], mut w: usize) -> usize {
    use std::arch::x86_64::{
        _mm_loadu_si128, _mm_set_epi64x, _mm_shuffle_epi8, _mm_storel_epi64, _mm_unpackhi_epi64,
    };
    assert!(w + BLOCK <= dst.len());
    for (q, bytes) in block.chunks_exact(16).enumerate() {
        let lo = (keep >> (16 * q)) as u8;
        let hi = (keep >> (16 * q + 8)) as u8;
        // Safety: the load reads the 16 bytes of `bytes`; each store writes 8 bytes at `w`,
        // and `w` + 8 <= `dst.len()` (asserted above: `w` grows by at most 16 a step).
        unsafe {
            let ctl = _mm_set_epi64x(
                (PACK_INDEX[hi as usize] + 0x0808_0808_0808_0808) as i64,
                PACK_INDEX[lo as usize] as i64,
            );
            let packed = _mm_shuffle_epi8(_mm_loadu_si128(bytes.as_ptr().cast()), ctl);
            _mm_storel_epi64(dst.as_mut_ptr().add(w).cast(), packed);
            w += lo.count_ones() as usize;
            _mm_storel_epi64(
                dst.as_mut_ptr().add(w).cast(),
                _mm_unpackhi_epi64(packed, packed),
            );
            w += hi.count_ones() as usize;
        }
    }
    w
}

/// Bytes taken at once by the fast path's block step.
const BLOCK: usize = 64;

/// The bytes of a 64-byte block that are of interest to [`csi_block`], as bit masks (bit `k`
/// for byte `k`): `ESC`, `[`, CSI parameter and intermediate bytes (0x20-0x3F), final bytes
/// (0x40-0x7E).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ByteClasses {
    esc: u64,
    open: u64,
    param: u64,
    fin: u64,
}

#[inline(always)]
fn byte_classes(b: &[u8; BLOCK]) -> ByteClasses {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            _mm_add_epi8, _mm_and_si128, _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128,
            _mm_movemask_epi8, _mm_set1_epi8, _mm_xor_si128,
        };
        let mut c = ByteClasses {
            esc: 0,
            open: 0,
            param: 0,
            fin: 0,
        };
        for (lane, bytes) in b.chunks_exact(16).enumerate() {
            // Safety: SSE2 is part of the x86_64 baseline, so every CPU this runs on has these
            // instructions; the unaligned load reads exactly the 16 bytes of `bytes`. (The
            // intrinsics are safe to call from Rust 1.87 on; the workspace builds with 1.85.)
            let (esc, open, param, fin) = unsafe {
                let v = _mm_loadu_si128(bytes.as_ptr().cast());
                let esc = _mm_cmpeq_epi8(v, _mm_set1_epi8(ESC as i8));
                let open = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'[' as i8));
                let param = _mm_cmpeq_epi8(
                    _mm_and_si128(v, _mm_set1_epi8(0xe0u8 as i8)),
                    _mm_set1_epi8(0x20),
                );
                // 0x40 <= b <= 0x7E, as an unsigned compare (b - 0x40 < 0x3F) done signed.
                let fin = _mm_cmplt_epi8(
                    _mm_xor_si128(_mm_add_epi8(v, _mm_set1_epi8(-0x40)), _mm_set1_epi8(-128)),
                    _mm_set1_epi8((0x3f ^ 0x80u8) as i8),
                );
                (
                    _mm_movemask_epi8(esc) as u16,
                    _mm_movemask_epi8(open) as u16,
                    _mm_movemask_epi8(param) as u16,
                    _mm_movemask_epi8(fin) as u16,
                )
            };
            let at = 16 * lane;
            c.esc |= u64::from(esc) << at;
            c.open |= u64::from(open) << at;
            c.param |= u64::from(param) << at;
            c.fin |= u64::from(fin) << at;
        }
        c
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        byte_classes_scalar(b)
    }
}

/// [`byte_classes`] 32 bytes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn byte_classes_avx2(b: &[u8; BLOCK]) -> ByteClasses {
    use std::arch::x86_64::{
        _mm256_add_epi8, _mm256_and_si256, _mm256_cmpeq_epi8, _mm256_cmpgt_epi8,
        _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_set1_epi8, _mm256_xor_si256,
    };
    let mut c = ByteClasses {
        esc: 0,
        open: 0,
        param: 0,
        fin: 0,
    };
    for (lane, bytes) in b.chunks_exact(32).enumerate() {
        // Safety: the load reads exactly the 32 bytes of `bytes`.
        let (esc, open, param, fin) = unsafe {
            let v = _mm256_loadu_si256(bytes.as_ptr().cast());
            let esc = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(ESC as i8));
            let open = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'[' as i8));
            let param = _mm256_cmpeq_epi8(
                _mm256_and_si256(v, _mm256_set1_epi8(0xe0u8 as i8)),
                _mm256_set1_epi8(0x20),
            );
            // As in `byte_classes`: b - 0x40 < 0x3F unsigned, done signed.
            let fin = _mm256_cmpgt_epi8(
                _mm256_set1_epi8((0x3f ^ 0x80u8) as i8),
                _mm256_xor_si256(
                    _mm256_add_epi8(v, _mm256_set1_epi8(-0x40)),
                    _mm256_set1_epi8(-128),
                ),
            );
            (
                _mm256_movemask_epi8(esc) as u32,
                _mm256_movemask_epi8(open) as u32,
                _mm256_movemask_epi8(param) as u32,
                _mm256_movemask_epi8(fin) as u32,
            )
        };
        let at = 32 * lane;
        c.esc |= u64::from(esc) << at;
        c.open |= u64::from(open) << at;
        c.param |= u64::from(param) << at;
        c.fin |= u64::from(fin) << at;
    }
    c
}

/// [`byte_classes`] a byte at a time (other targets, and the oracle of the SSE2 version).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn byte_classes_scalar(b: &[u8; BLOCK]) -> ByteClasses {
    let mask = |f: fn(u8) -> bool| {
        b.iter()
            .enumerate()
            .fold(0u64, |m, (k, &c)| m | (u64::from(f(c)) << k))
    };
    ByteClasses {
        esc: mask(|c| c == ESC),
        open: mask(|c| c == b'['),
        param: mask(|c| (0x20..=0x3f).contains(&c)),
        fin: mask(|c| (0x40..=0x7e).contains(&c)),
    }
}

/// One 64-byte block of the fast path, given its [`ByteClasses`]: `(cut, keep)`, where the block's first `cut` bytes are
/// text and complete CSI sequences, and `keep` has the bits of the text among them. `cut` is
/// 64 when the whole block is, else the offset of an `ESC`: one that is not a complete CSI
/// sequence within the block (the last one, cut off by the block's end, or any other).
///
/// Branch-free for the common block: the sequences' ends are found with one addition (a
/// start's carry runs through its parameter bytes and stops at the byte after them), and the
/// bytes to drop are the difference of the ends and the starts.
#[inline(always)]
fn csi_block(c: ByteClasses) -> (usize, u64) {
    // `ESC [` at k, parameters from k + 2.
    let starts = c.esc & (c.open >> 1);
    let (sum, carry) = c.param.overflowing_add(starts << 2);
    let ends = sum & !c.param;
    // Bits [s, e] of each sequence: the sum of 2^(e+1) - 2^s, wrapping at the top.
    let drop = |below: u64| (((ends & below) << 1).wrapping_sub(starts & below)) & below;
    // Every `ESC` starts a CSI sequence whose end is in the block (none starts at 62 or 63,
    // no carry ran off the top), and each end is a final byte.
    if c.esc == starts && starts >> 62 == 0 && !carry && ends & !c.fin == 0 {
        return (BLOCK, !drop(u64::MAX));
    }
    // The same below the last `ESC`: the sequences before it cannot reach past it, and one
    // that ends on it is not complete.
    let last = 63 - c.esc.leading_zeros() as usize;
    let below = (1u64 << last) - 1;
    if c.esc & below == starts & below && ends & (below | 1 << last) & !c.fin == 0 {
        return (last, !drop(below) & below);
    }
    let first = c.esc.trailing_zeros() as usize;
    (first, (1u64 << first) - 1)
}

/// [`csi_end`] at `h[r]` (an `ESC`), with the common short sequence (`ESC [` + at most six
/// parameter bytes + final, as in `ESC[38;5;1m`) read as one word.
#[inline(always)]
fn csi_len(h: &[u8], r: usize) -> Option<usize> {
    if let Some(bytes) = h.get(r + 1..r + 9) {
        let v = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
        if v as u8 != b'[' {
            return None;
        }
        // Parameter and intermediate bytes are 0x20-0x3F: `b & 0xE0 == 0x20`.
        let outside = nonzero_bytes((v & (ONES * 0xe0)) ^ (ONES * 0x20)) & !0xff;
        if outside != 0 {
            let j = (outside.trailing_zeros() / 8) as usize;
            let fin = (v >> (8 * j)) as u8;
            return (0x40..=0x7e).contains(&fin).then_some(j + 2);
        }
    }
    csi_end_cold(&h[r..])
}

/// [`csi_end`] for the rare long or cut-off sequence, out of the fast path's loop.
#[cold]
#[inline(never)]
fn csi_end_cold(h: &[u8]) -> Option<usize> {
    csi_end(h)
}

/// The length of the complete CSI sequence `ESC [ params final` at the start of `h`, when it
/// is all there and no longer than the state machine takes as one.
#[inline]
fn csi_end(h: &[u8]) -> Option<usize> {
    if h.get(1) != Some(&b'[') {
        return None;
    }
    let body = h.get(2..)?;
    let n = body
        .iter()
        .take(MAX_CSI + 1)
        .position(|&b| !(0x20..=0x3f).contains(&b))?;
    if n > MAX_CSI {
        return None;
    }
    (0x40..=0x7e).contains(&body[n]).then_some(n + 3)
}

/// The index of the first `ESC`, `\r`, `\b` or BEL in `h` (`h.len()` when none), and the last
/// newline before it. `wide`: the CPU has AVX2 ([`shuffle_available`]).
#[inline]
fn scan_specials(h: &[u8], wide: bool) -> (usize, Option<usize>) {
    #[cfg(target_arch = "x86_64")]
    if wide {
        // Safety: the CPU has AVX2 (`shuffle_available`).
        return unsafe { scan_specials_avx2(h) };
    }
    let _ = wide;
    scan_specials_portable(h)
}

/// [`scan_specials`] in two passes: the specials' fold, then `memrchr` back from there.
fn scan_specials_portable(h: &[u8]) -> (usize, Option<usize>) {
    let s = find_special(h).unwrap_or(h.len());
    (s, memchr::memrchr(b'\n', &h[..s]))
}

/// [`scan_specials`] in one pass, 64 bytes per step: the specials' mask ends the loop; of the
/// newlines only the last block that had one is remembered (its mask is recomputed at the
/// end), so the loop has no other branch.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scan_specials_avx2(h: &[u8]) -> (usize, Option<usize>) {
    use std::arch::x86_64::{
        _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_or_si256,
        _mm256_set1_epi8,
    };
    // The specials' and the newlines' masks of the 64 bytes at `block`.
    let masks = |block: &[u8]| {
        let (mut special, mut newline) = (0u64, 0u64);
        for (lane, bytes) in block.chunks_exact(32).enumerate() {
            // Safety: the load reads exactly the 32 bytes of `bytes`; the CPU has AVX2.
            let (s, n) = unsafe {
                let v = _mm256_loadu_si256(bytes.as_ptr().cast());
                let eq = |b: u8| _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b as i8));
                let s = _mm256_or_si256(
                    _mm256_or_si256(eq(ESC), eq(CR)),
                    _mm256_or_si256(eq(BS), eq(BEL)),
                );
                (
                    _mm256_movemask_epi8(s) as u32,
                    _mm256_movemask_epi8(eq(b'\n')) as u32,
                )
            };
            special |= u64::from(s) << (32 * lane);
            newline |= u64::from(n) << (32 * lane);
        }
        (special, newline)
    };
    let mut at = 0;
    // The start of the last block with a newline before the current one.
    let mut nl_block: Option<usize> = None;
    let earlier_newline = |nl_block: Option<usize>| {
        nl_block.and_then(|b| memchr::memrchr(b'\n', &h[b..b + 64]).map(|q| b + q))
    };
    while at + 64 <= h.len() {
        let (special, newline) = masks(&h[at..at + 64]);
        if special != 0 {
            let s = at + special.trailing_zeros() as usize;
            let before = newline & ((1u64 << (s - at)) - 1);
            if before != 0 {
                return (s, Some(at + 63 - before.leading_zeros() as usize));
            }
            return (s, earlier_newline(nl_block));
        }
        if newline != 0 {
            nl_block = Some(at);
        }
        at += 64;
    }
    // The rest, fewer than 64 bytes.
    let (s, nl) = scan_specials_portable(&h[at..]);
    (
        at + s,
        nl.map(|q| at + q).or_else(|| earlier_newline(nl_block)),
    )
}

/// Strips a whole buffer (a convenience for tests and short texts).
pub fn strip_all(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut s = Stripper::new();
    let mut emit = |b: &[u8]| out.extend_from_slice(b);
    s.feed(input, &mut emit);
    s.finish(&mut emit);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(b: &[u8]) -> String {
        String::from_utf8_lossy(&strip_all(b)).into_owned()
    }

    #[test]
    fn colours_and_cursor_moves_go() {
        assert_eq!(
            s(b"\x1b[31m FAIL \x1b[39m src/a.test.ts\n"),
            " FAIL  src/a.test.ts\n"
        );
        assert_eq!(
            s(b"\x1b[1;38;5;196mred\x1b[0m\x1b[2K\x1b[1G ok\n"),
            "red ok\n"
        );
        assert_eq!(s(b"\x1b[?25l\x1b[?25hx"), "x");
        assert_eq!(s(b"\x1b(B\x1b=\x1b7a\x1b8"), "a");
    }

    #[test]
    fn osc_titles_and_hyperlinks_go() {
        assert_eq!(s(b"\x1b]0;title\x07after"), "after");
        assert_eq!(
            s(b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ end"),
            "link end"
        );
        assert_eq!(s(b"\x1bPq#0;2;0;0;0\x1b\\x"), "x");
    }

    #[test]
    fn carriage_return_rewrites_keep_the_final_line() {
        assert_eq!(s(b"10%\r50%\r100%\ndone\n"), "100%\ndone\n");
        assert_eq!(s(b"a\r\nb\r\n"), "a\nb\n");
        assert_eq!(s(b"working...\r"), "working...");
        assert_eq!(s(b"1/3\r\x1b[K2/3\r\x1b[K3/3\n"), "3/3\n");
        assert_eq!(s(b"keep\nx\ry"), "keep\ny");
    }

    #[test]
    fn backspace_and_bell() {
        assert_eq!(s(b"ab\x08c\x07"), "ac");
        assert_eq!(s("é\x08e".as_bytes()), "e");
        assert_eq!(s(b"\x08x"), "x");
    }

    #[test]
    fn text_and_invalid_utf8_from_0xa0_pass() {
        let text = "plain\ttext, é, ─ ├ 日本 🦀, NBSP\u{a0}, £\n";
        assert_eq!(s(text.as_bytes()), text);
        let high: Vec<u8> = (0xa0u8..=0xff).collect();
        assert_eq!(strip_all(&high), high);
    }

    /// Issue 29 (F11): NUL, VT, FF, DEL and the other C0 controls went through, and so did
    /// the C1 controls as UTF-8 (an OSC 52 clipboard write, a CSI cursor move).
    #[test]
    fn c0_and_c1_controls_go_with_the_sequences_they_start() {
        assert_eq!(s(b"a\x00b\x0bc\x0cd\x7fe\x01\x1f\x0e\n"), "abcde\n");
        assert_eq!(strip_all(&[0u8; 100_000]), b"");
        // OSC 52 (set the clipboard) as UTF-8 C1: U+009D ... U+009C.
        assert_eq!(
            s("x\u{9d}52;c;Y3VybCBldmlsIHwgc2g=\u{9c}y\n".as_bytes()),
            "xy\n"
        );
        // CSI (U+009B) with its parameters and final byte; DCS (U+0090) up to ST.
        assert_eq!(
            s("a\u{9b}2J\u{9b}1;31mb\u{90}q#0;2\u{9c}c\n".as_bytes()),
            "abc\n"
        );
        // An unterminated string ends with its line.
        assert_eq!(s("a\u{9d}0;title\nnext\n".as_bytes()), "a\nnext\n");
        // Raw C1 bytes (no part of a UTF-8 character), the same.
        assert_eq!(s(b"a\x9b31mb\x9d0;t\x9cc\x85d\n"), "abcd\n");
        // A C1 control split across reads.
        let mut st = Stripper::new();
        let mut out = Vec::new();
        let mut emit = |b: &[u8]| out.extend_from_slice(b);
        st.feed(b"a\xc2", &mut emit);
        st.feed(b"\x9b2Jb\n", &mut emit);
        st.finish(&mut emit);
        assert_eq!(out, b"ab\n");
        // Carriage returns keep their documented meaning.
        assert_eq!(s(b"1\x00%\r100%\n"), "100%\n");
        assert_eq!(s(b"a\xc2\rb\n"), "b\n");
        // A character cut short is raw bytes: its lead byte stays, a 0x80..0x9F after it is a
        // C1 control.
        assert_eq!(strip_all(b"x\xc2"), b"x\xc2");
        assert_eq!(strip_all(b"x\xe2\x94"), b"x\xe2");
        assert_eq!(strip_all(b"x\xe2\xa0"), b"x\xe2\xa0");
    }

    #[test]
    fn unterminated_string_sequence_is_text() {
        let mut data = b"\x1b]".to_vec();
        data.extend(vec![b'z'; MAX_STRING + 10]);
        data.extend(b"\nend\n");
        let out = strip_all(&data);
        assert_eq!(out.len(), MAX_STRING + 10 + 5);
        assert!(out.ends_with(b"z\nend\n"));
        assert_eq!(s(b"\x1b]0;short"), "0;short");
    }

    #[test]
    fn long_lines_are_held_back_only_up_to_hold() {
        let mut emitted = 0usize;
        let mut st = Stripper::new();
        st.feed(&vec![b'x'; 10 * HOLD], &mut |b: &[u8]| emitted += b.len());
        assert_eq!(emitted, 9 * HOLD);
        assert_eq!(st.pending().len(), HOLD);
        // A rewrite of a long line keeps what was already emitted.
        let out = strip_all(&[vec![b'x'; 2 * HOLD], b"\rnew\n".to_vec()].concat());
        assert_eq!(out, [vec![b'x'; HOLD], b"new\n".to_vec()].concat());
    }

    fn chunked(data: &[u8], cuts: &[usize], hold: usize) -> Vec<u8> {
        chunked_with(data, cuts, hold, true)
    }

    /// `fast: false` is the byte-by-byte state machine, the oracle of the fast path.
    fn chunked_with(data: &[u8], cuts: &[usize], hold: usize, fast: bool) -> Vec<u8> {
        chunked_on(data, cuts, hold, fast, shuffle_available())
    }

    /// `shuffle: false` is the portable block step (the one of CPUs without SSSE3).
    fn chunked_on(data: &[u8], cuts: &[usize], hold: usize, fast: bool, shuffle: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut st = Stripper::new();
        st.hold = hold;
        st.fast = fast;
        st.shuffle = shuffle;
        let mut emit = |b: &[u8]| out.extend_from_slice(b);
        let mut pos = 0;
        for &c in cuts {
            let end = (pos + c).min(data.len());
            st.feed(&data[pos..end], &mut emit);
            pos = end;
        }
        st.feed(&data[pos..], &mut emit);
        st.finish(&mut emit);
        out
    }

    /// Bytes rich in the interesting ones.
    fn noisy() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                4 => any::<u8>(),
                2 => Just(ESC),
                2 => Just(CR),
                1 => Just(b'['),
                1 => Just(b']'),
                1 => Just(b'\n'),
                1 => Just(BS),
                1 => Just(BEL),
                1 => Just(b'\\'),
                1 => Just(b'm'),
            ],
            0..1500,
        )
    }

    /// A log line as test runners print it: text, CSI colours (some malformed or cut short),
    /// now and then other sequences, progress rewrites and backspaces.
    fn coloured_line() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            6 => "[ -~]{0,12}".prop_map(String::into_bytes),
            4 => "\x1b\\[[0-9;?]{0,5}[@-~]".prop_map(String::into_bytes),
            1 => "\x1b\\[[0-9; ]{6,12}[@-~\x7f]".prop_map(String::into_bytes),
            1 => "\x1b\\[[0-9;]{0,4}".prop_map(String::into_bytes),
            1 => "\x1b[()][AB0]".prop_map(String::into_bytes),
            1 => "\x1b\\][0-9];[a-z]{0,6}(\x07|\x1b\\\\)?".prop_map(String::into_bytes),
            1 => prop_oneof![Just(b"\r".to_vec()), Just(b"\x08".to_vec()), Just(b"\x07".to_vec()), Just(b"\r\n".to_vec())],
        ];
        proptest::collection::vec(piece, 0..12).prop_map(|p| [p.concat(), b"\n".to_vec()].concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn any_chunking_gives_the_same_output(data in noisy(), cuts in proptest::collection::vec(0usize..300, 0..30), hold in 1usize..40) {
            prop_assert_eq!(strip_all(&data), chunked(&data, &cuts, HOLD));
            prop_assert_eq!(chunked(&data, &[], hold), chunked(&data, &cuts, hold));
        }

        #[test]
        fn fast_path_matches_the_state_machine(data in noisy(), cuts in proptest::collection::vec(0usize..300, 0..30), hold in 1usize..40) {
            prop_assert_eq!(chunked_with(&data, &[], HOLD, false), chunked_with(&data, &cuts, HOLD, true));
            prop_assert_eq!(chunked_with(&data, &cuts, hold, false), chunked_with(&data, &cuts, hold, true));
        }

        #[test]
        fn fast_path_matches_on_coloured_lines(lines in proptest::collection::vec(coloured_line(), 0..60), cuts in proptest::collection::vec(0usize..200, 0..30), hold in 1usize..200) {
            let data = lines.concat();
            prop_assert_eq!(chunked_with(&data, &cuts, HOLD, false), chunked_with(&data, &cuts, HOLD, true));
            prop_assert_eq!(chunked_with(&data, &cuts, hold, false), chunked_with(&data, &cuts, hold, true));
        }

        /// Long runs of coloured lines fed in large chunks: the 64-byte block step, with and
        /// without byte shuffles, against the state machine.
        #[test]
        fn block_step_matches_the_state_machine(lines in proptest::collection::vec(coloured_line(), 0..200), cuts in proptest::collection::vec(0usize..4000, 0..6), lead in 0usize..64) {
            let data = [vec![b'x'; lead], lines.concat()].concat();
            let oracle = chunked_on(&data, &[], HOLD, false, false);
            prop_assert_eq!(&oracle, &chunked_on(&data, &cuts, HOLD, true, false));
            prop_assert_eq!(&oracle, &chunked_on(&data, &cuts, HOLD, true, shuffle_available()));
        }

        #[test]
        fn byte_classes_agree_with_the_scalar_ones(block in proptest::array::uniform32(any::<u8>()), block2 in proptest::array::uniform32(any::<u8>())) {
            let b: [u8; BLOCK] = [block, block2].concat().try_into().unwrap();
            prop_assert_eq!(byte_classes(&b), byte_classes_scalar(&b));
            #[cfg(target_arch = "x86_64")]
            if shuffle_available() {
                // Safety: the CPU has AVX2.
                prop_assert_eq!(unsafe { byte_classes_avx2(&b) }, byte_classes_scalar(&b));
            }
        }

        /// The one-pass scan against the two-pass one, on bytes dense and sparse in specials
        /// and newlines, from every offset of a block.
        #[test]
        fn scan_specials_agrees_with_the_two_pass_scan(data in proptest::collection::vec(prop_oneof![8 => 0x20u8..0x7f, 1 => Just(b'\n'), 1 => Just(ESC), 1 => Just(CR), 1 => Just(BS), 1 => Just(BEL)], 0..600), sparse in 1usize..400, from in 0usize..64) {
            // Keep every `sparse`-th special: long plain stretches cross whole blocks.
            let data: Vec<u8> = data.iter().enumerate().map(|(k, &b)| if is_special(b) && k % sparse != 0 { b'x' } else { b }).collect();
            let h = &data[from.min(data.len())..];
            let expect = scan_specials_portable(h);
            prop_assert_eq!(scan_specials(h, false), expect);
            prop_assert_eq!(scan_specials(h, shuffle_available()), expect);
        }

        #[test]
        fn csi_len_agrees_with_csi_end(tail in proptest::collection::vec(prop_oneof![0x20u8..0x40, 0x40u8..0x80, any::<u8>()], 0..14)) {
            let h = [b"\x1b[".to_vec(), tail].concat();
            prop_assert_eq!(csi_len(&h, 0), csi_end(&h));
            let other = [b"\x1b".to_vec(), h[2..].to_vec()].concat();
            prop_assert_eq!(csi_len(&other, 0), csi_end(&other));
        }

        #[test]
        fn output_has_no_control_bytes(data in noisy()) {
            let out = strip_all(&data);
            prop_assert!(!out.iter().any(|&b| b == ESC || b == CR || b == BS || b == BEL));
            prop_assert!(out.len() <= data.len());
        }

        /// Issue 29 (F11): over arbitrary bytes, chunked anyhow, the output holds no C0 or C1
        /// control and no DEL but `\n` and `\t` — not as a UTF-8 character, not as a byte
        /// outside one.
        #[test]
        fn output_has_no_c0_c1_or_del(pieces in proptest::collection::vec(prop_oneof![
                6 => any::<u8>().prop_map(|b| vec![b]),
                2 => prop_oneof![Just(0xc2u8), Just(0x9b), Just(0x9d), Just(0x9c), Just(0x90), Just(0x85)].prop_map(|b| vec![b]),
                1 => Just(vec![ESC]), 1 => Just(vec![CR]), 1 => Just(vec![b'\n']),
                2 => "[ -~é─├🦀\u{9b}\u{9d}\u{9c}]{1,4}".prop_map(String::into_bytes),
            ], 0..600), cuts in proptest::collection::vec(0usize..300, 0..30), hold in 1usize..40) {
            let data = pieces.concat();
            for fast in [true, false] {
                let out = chunked_with(&data, &cuts, hold, fast);
                prop_assert_eq!(&out, &chunked_with(&data, &[], hold, false));
                let mut rest = &out[..];
                loop {
                    let (valid, bad) = match std::str::from_utf8(rest) {
                        Ok(v) => (v, None),
                        Err(e) => (std::str::from_utf8(&rest[..e.valid_up_to()]).unwrap(), Some(e)),
                    };
                    let c = valid.chars().find(|&c| c.is_control() && c != '\n' && c != '\t');
                    prop_assert!(c.is_none(), "{:?} in {:?}", c, out);
                    let Some(e) = bad else { break };
                    let n = e.error_len().unwrap_or(rest.len() - e.valid_up_to());
                    let raw = &rest[e.valid_up_to()..e.valid_up_to() + n];
                    prop_assert!(raw.iter().all(|&b| b >= 0xa0), "raw {:x?} in {:?}", raw, out);
                    rest = &rest[e.valid_up_to() + n..];
                }
            }
        }

        #[test]
        fn text_without_controls_is_unchanged(text in "[^\\p{Cc}]{0,3000}") {
            let data = text.into_bytes();
            prop_assert_eq!(strip_all(&data), data);
        }

        #[test]
        fn coloured_lines_lose_only_their_escapes(words in proptest::collection::vec("[a-z ]{0,20}", 0..50)) {
            let mut coloured = Vec::new();
            let mut plain = Vec::new();
            for (n, w) in words.iter().enumerate() {
                coloured.extend(format!("\x1b[{}m{w}\x1b[0m\n", 30 + n % 8).bytes());
                plain.extend(format!("{w}\n").bytes());
            }
            prop_assert_eq!(strip_all(&coloured), plain);
        }
    }
}
