//! The head/tail preview of a command's output (ARCHITECTURE §3.2).
//!
//! A command may print gigabytes; the agent sees at most a *budget* of bytes: the first half of
//! the budget (the head) and the last half (the tail), joined by the marker
//! `\n[...N bytes omitted...]\n`. [`HeadTail`] keeps exactly those bytes while the output streams
//! through it, so its memory is bounded by the budget whatever the output size, and it gives the
//! same answer however the stream was cut into chunks.
//!
//! Cuts fall on UTF-8 character boundaries: a character split by the head's end is left out of
//! the head, a character split by the tail's start is left out of the tail, and the bytes left
//! out are counted in `N`, so `head + N + tail` always equals the total byte count. Bytes that are
//! not UTF-8 at all are shown as U+FFFD; the preview is always valid UTF-8.
//!
//! ```
//! use shofer_core::preview::{HeadTail, PreviewSize};
//! let mut buf = HeadTail::new(PreviewSize::Small.budget());
//! buf.push(&[b'x'; 6000]);
//! assert!(buf.exceeded());
//! let p = buf.preview();
//! assert_eq!(p.omitted, 880);
//! assert!(p.text.contains("\n[...880 bytes omitted...]\n"));
//! ```

/// The preview budget setting: how many bytes of output the agent sees inline.
///
/// The names and sizes are the original host's `terminalOutputPreviewSize` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum PreviewSize {
    /// 5120 bytes (5 KiB).
    Small,
    /// 10240 bytes (10 KiB), the default.
    #[default]
    Medium,
    /// 20480 bytes (20 KiB).
    Large,
}

impl PreviewSize {
    /// The budget in bytes: 5120, 10240 or 20480. Output of at most this many bytes is shown
    /// whole; one byte more and it is spilled to an artifact and previewed as head + tail.
    pub const fn budget(self) -> usize {
        match self {
            PreviewSize::Small => 5120,
            PreviewSize::Medium => 10240,
            PreviewSize::Large => 20480,
        }
    }

    /// Parses `small`, `medium` or `large` (exactly, lower case).
    ///
    /// # Errors
    /// Any other string: the error text names the input and the valid values.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "small" => Ok(PreviewSize::Small),
            "medium" => Ok(PreviewSize::Medium),
            "large" => Ok(PreviewSize::Large),
            other => Err(format!(
                "invalid preview size {other:?}: expected small (5120 bytes), medium (10240) or large (20480)"
            )),
        }
    }

    /// The setting's name: `small`, `medium` or `large`.
    pub const fn name(self) -> &'static str {
        match self {
            PreviewSize::Small => "small",
            PreviewSize::Medium => "medium",
            PreviewSize::Large => "large",
        }
    }
}

/// The omission marker placed between head and tail: `\n[...N bytes omitted...]\n`.
pub fn omission_marker(omitted: u64) -> String {
    format!("\n[...{omitted} bytes omitted...]\n")
}

/// A streaming head/tail buffer with a fixed byte budget.
///
/// Memory: at most `budget` bytes (the head holds `budget / 2`, the tail ring the rest),
/// allocated up front.
#[derive(Debug, Clone)]
pub struct HeadTail {
    budget: usize,
    head_cap: usize,
    head: Vec<u8>,
    /// Ring of the last `tail_cap` bytes pushed after the head filled up.
    tail: Vec<u8>,
    tail_cap: usize,
    /// Next write position in `tail` once it is full (the oldest byte).
    tail_pos: usize,
    total: u64,
}

/// A rendered preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The text: the whole output when it fits the budget, else head + marker + tail.
    /// Always valid UTF-8 (invalid bytes become U+FFFD).
    pub text: String,
    /// Bytes of output the text leaves out (0 when the output fits the budget).
    pub omitted: u64,
    /// Bytes kept from the start of the output.
    pub head_bytes: usize,
    /// Bytes kept from the end of the output.
    pub tail_bytes: usize,
    /// Total bytes of output seen.
    pub total: u64,
}

impl HeadTail {
    /// A buffer for `budget` bytes (see [`PreviewSize::budget`]); the head gets `budget / 2`,
    /// the tail the remaining `budget - budget / 2`. A budget of 0 keeps nothing and treats any
    /// output as exceeding it.
    pub fn new(budget: usize) -> Self {
        let head_cap = budget / 2;
        let tail_cap = budget - head_cap;
        HeadTail {
            budget,
            head_cap,
            head: Vec::with_capacity(head_cap),
            tail: Vec::with_capacity(tail_cap),
            tail_cap,
            tail_pos: 0,
            total: 0,
        }
    }

    /// The budget in bytes this buffer was made with.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Total bytes pushed so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// True once more than `budget` bytes were pushed: the output no longer fits inline.
    pub fn exceeded(&self) -> bool {
        self.total > self.budget as u64
    }

    /// Feeds the next bytes of the stream.
    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.head.len() < self.head_cap {
            let n = (self.head_cap - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.is_empty() || self.tail_cap == 0 {
            return;
        }
        if data.len() >= self.tail_cap {
            // The chunk alone fills the ring: keep its last tail_cap bytes, in order.
            self.tail.clear();
            self.tail
                .extend_from_slice(&data[data.len() - self.tail_cap..]);
            self.tail_pos = 0;
            return;
        }
        if self.tail.len() < self.tail_cap {
            let n = (self.tail_cap - self.tail.len()).min(data.len());
            self.tail.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        // The ring is full: overwrite the oldest bytes, wrapping around.
        while !data.is_empty() {
            let n = (self.tail_cap - self.tail_pos).min(data.len());
            self.tail[self.tail_pos..self.tail_pos + n].copy_from_slice(&data[..n]);
            self.tail_pos = (self.tail_pos + n) % self.tail_cap;
            data = &data[n..];
        }
    }

    /// Counts `n` bytes of the stream that bypassed the buffer (the engine moves them from
    /// the pipe straight into the artifact with `splice(2)`). Only meaningful once the head is
    /// full (the output exceeded the budget); the tail is stale until [`HeadTail::resync_tail`]
    /// gives it the stream's last bytes.
    pub fn skip(&mut self, n: u64) {
        self.total += n;
    }

    /// Sets the tail from `last`, the final bytes of the stream so far (as many as are
    /// available; the tail keeps at most its capacity, and never bytes the head holds).
    pub fn resync_tail(&mut self, last: &[u8]) {
        let after_head = self.total - self.head.len() as u64;
        let want = (self.tail_cap as u64).min(after_head) as usize;
        let take = want.min(last.len());
        self.tail.clear();
        self.tail.extend_from_slice(&last[last.len() - take..]);
        self.tail_pos = 0;
    }

    /// How many final bytes of the stream [`HeadTail::resync_tail`] wants.
    pub fn tail_wanted(&self) -> usize {
        (self.tail_cap as u64).min(self.total - self.head.len() as u64) as usize
    }

    /// Every byte kept, in stream order: the head then the tail ring unrolled. When the output
    /// fits the budget this is the whole output.
    pub fn kept_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.len() + self.tail.len());
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&self.tail[self.tail_pos..]);
        out.extend_from_slice(&self.tail[..self.tail_pos]);
        out
    }

    /// Renders the preview of everything pushed so far.
    pub fn preview(&self) -> Preview {
        let kept = self.kept_bytes();
        if !self.exceeded() {
            return Preview {
                text: String::from_utf8_lossy(&kept).into_owned(),
                omitted: 0,
                head_bytes: kept.len(),
                tail_bytes: 0,
                total: self.total,
            };
        }
        let (head, tail) = kept.split_at(self.head.len());
        let head = &head[..utf8_complete_prefix(head)];
        let tail = &tail[utf8_tail_start(tail)..];
        let omitted = self.total - head.len() as u64 - tail.len() as u64;
        let mut text = String::with_capacity(self.budget + 40);
        text.push_str(&String::from_utf8_lossy(head));
        text.push_str(&omission_marker(omitted));
        text.push_str(&String::from_utf8_lossy(tail));
        Preview {
            text,
            omitted,
            head_bytes: head.len(),
            tail_bytes: tail.len(),
            total: self.total,
        }
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// The length of `bytes` without a trailing incomplete UTF-8 sequence: a character whose
/// lead byte is among the last bytes but whose continuation bytes are cut off. Used for the
/// head, whose end is a cut. Bytes that are not UTF-8 at all are kept (and shown as U+FFFD).
pub fn utf8_complete_prefix(bytes: &[u8]) -> usize {
    let n = bytes.len();
    for back in 1..=n.min(4) {
        let b = bytes[n - back];
        if is_continuation(b) {
            continue;
        }
        let need = match b {
            0xF0..=0xFF => 4,
            0xE0..=0xEF => 3,
            0xC0..=0xDF => 2,
            _ => 1,
        };
        return if back < need { n - back } else { n };
    }
    n
}

/// The number of leading bytes of `bytes` to drop so that it starts on a character boundary:
/// the continuation bytes (at most 3) of a character whose lead byte was cut off. Used for the
/// tail, whose start is a cut.
pub fn utf8_tail_start(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|&&b| is_continuation(b))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn push_all(budget: usize, data: &[u8]) -> HeadTail {
        let mut b = HeadTail::new(budget);
        b.push(data);
        b
    }

    #[test]
    fn budgets_exactly_at_limit_do_not_exceed_one_more_does() {
        for size in [PreviewSize::Small, PreviewSize::Medium, PreviewSize::Large] {
            let n = size.budget();
            let b = push_all(n, &vec![b'a'; n]);
            assert!(!b.exceeded(), "{n}");
            assert_eq!(b.preview().text.len(), n);
            let b = push_all(n, &vec![b'a'; n + 1]);
            assert!(b.exceeded(), "{n}+1");
            assert_eq!(b.preview().omitted, 1);
        }
    }

    #[test]
    fn six_thousand_x_small_omits_880() {
        let b = push_all(5120, &[b'x'; 6000]);
        let p = b.preview();
        let expected = format!(
            "{}\n[...880 bytes omitted...]\n{}",
            "x".repeat(2560),
            "x".repeat(2560)
        );
        assert_eq!(p.text, expected);
    }

    #[test]
    fn abc_blocks_small_omit_exactly_the_b_block() {
        let mut data = vec![b'A'; 2560];
        data.extend(vec![b'B'; 4000]);
        data.extend(vec![b'C'; 2560]);
        let p = push_all(5120, &data).preview();
        assert_eq!(
            p.text,
            format!(
                "{}\n[...4000 bytes omitted...]\n{}",
                "A".repeat(2560),
                "C".repeat(2560)
            )
        );
    }

    #[test]
    fn multibyte_at_cut_is_dropped_and_counted() {
        // 'é' is 2 bytes; 20,000 of them = 40,000 bytes; head cap 2560 falls on a boundary,
        // so use an odd offset to force a split.
        let mut data = b"x".to_vec();
        data.extend("é".repeat(20_000).as_bytes());
        let p = push_all(5120, &data).preview();
        assert_eq!(p.head_bytes, 2559);
        assert_eq!(p.tail_bytes, 2560);
        assert_eq!(p.omitted, data.len() as u64 - 2559 - 2560);
        assert!(!p.text.contains('\u{FFFD}'));
        let p = push_all(5120, "━".repeat(20_000).as_bytes()).preview();
        assert!(!p.text.contains('\u{FFFD}'));
        assert_eq!(
            p.head_bytes as u64 + p.tail_bytes as u64 + p.omitted,
            60_000
        );
    }

    #[test]
    fn skip_and_resync_equal_pushing() {
        let data: Vec<u8> = (0..30_000u32).map(|i| (i % 251) as u8).collect();
        let whole = push_all(5120, &data).preview();
        let mut b = HeadTail::new(5120);
        b.push(&data[..6000]);
        b.skip(20_000);
        b.resync_tail(&data[..26_000]);
        b.push(&data[26_000..]);
        assert_eq!(b.preview(), whole);
        let mut b = HeadTail::new(5120);
        b.push(&data[..6000]);
        b.skip(24_000);
        assert_eq!(b.tail_wanted(), 2560);
        b.resync_tail(&data[30_000 - b.tail_wanted()..]);
        assert_eq!(b.preview(), whole);
    }

    #[test]
    fn parse_names_and_rejects_others() {
        assert_eq!(PreviewSize::parse("large"), Ok(PreviewSize::Large));
        let e = PreviewSize::parse("huge").unwrap_err();
        assert!(e.contains("\"huge\"") && e.contains("small"), "{e}");
    }

    fn chunked(data: &[u8], cuts: &[usize], budget: usize) -> HeadTail {
        let mut b = HeadTail::new(budget);
        let mut pos = 0;
        for &c in cuts {
            let end = (pos + c).min(data.len());
            b.push(&data[pos..end]);
            pos = end;
        }
        b.push(&data[pos..]);
        b
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_preview(
            data in proptest::collection::vec(any::<u8>(), 0..30_000),
            cuts in proptest::collection::vec(0usize..7000, 0..20),
            budget in prop_oneof![Just(5120usize), Just(10240), Just(20480), 0usize..64],
        ) {
            let whole = push_all(budget, &data).preview();
            let parts = chunked(&data, &cuts, budget).preview();
            prop_assert_eq!(&whole, &parts);
            prop_assert_eq!(whole.head_bytes as u64 + whole.tail_bytes as u64 + whole.omitted, data.len() as u64);
        }

        #[test]
        fn utf8_text_previews_are_lossless_utf8(
            s in "\\PC{0,12000}",
            cuts in proptest::collection::vec(0usize..5000, 0..10),
        ) {
            let p = chunked(s.as_bytes(), &cuts, 5120).preview();
            let repl = char::REPLACEMENT_CHARACTER;
            prop_assert!(!p.text.contains(repl) || s.contains(repl));
            if p.omitted == 0 {
                prop_assert_eq!(&p.text, &s);
            } else {
                let head = &s.as_bytes()[..p.head_bytes];
                let tail = &s.as_bytes()[s.len() - p.tail_bytes..];
                prop_assert!(std::str::from_utf8(head).is_ok());
                prop_assert!(std::str::from_utf8(tail).is_ok());
                prop_assert!(p.head_bytes + 3 >= 2560 && p.head_bytes <= 2560);
                prop_assert!(p.tail_bytes + 3 >= 2560 && p.tail_bytes <= 2560);
            }
        }
    }
}
