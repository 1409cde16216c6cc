//! Page-aligned byte buffers for the bulk copies of output (pipe → buffer → artifact,
//! artifact → buffer).
//!
//! Why: the kernel copies between user buffers and pipe or page-cache pages with `rep movsb`,
//! which on the AMD EPYC machines this runs on costs ~1.7x when the destination is not
//! cache-line aligned. A heap buffer of a few hundred KiB comes from `mmap` with the
//! allocator's 16-byte header in front, so it is misaligned by exactly that: measured on
//! 512 MiB through a pipe into tmpfs, 0.45 s of CPU aligned vs 0.80 s at +16 bytes (see
//! BENCHMARKS.md, engine section). `cat` and `dd` align their buffers for the same reason.

/// The alignment: one page (a multiple of every cache line size).
const ALIGN: usize = 4096;

/// A zero-filled buffer of a fixed length whose first byte is page-aligned, with a fill
/// level for use as an append buffer ([`PageBuf::extend`], [`PageBuf::filled`]).
#[derive(Debug)]
pub struct PageBuf {
    mem: Box<[u8]>,
    start: usize,
    cap: usize,
    len: usize,
}

impl PageBuf {
    /// A buffer of `cap` bytes (over-allocated by one page to place the start).
    pub fn new(cap: usize) -> Self {
        if cap == 0 {
            // Nothing at all: a finished command's record keeps an empty one (1,000 records
            // of one page each were 4 MB of a long session's RSS).
            return PageBuf {
                mem: Box::default(),
                start: 0,
                cap: 0,
                len: 0,
            };
        }
        let mem = vec![0u8; cap + ALIGN].into_boxed_slice();
        // `align_offset` may answer "impossible" (usize::MAX); then the buffer is simply
        // unaligned, which is only slower.
        let start = match mem.as_ptr().align_offset(ALIGN) {
            n if n < ALIGN => n,
            _ => 0,
        };
        PageBuf {
            mem,
            start,
            cap,
            len: 0,
        }
    }

    /// The whole buffer (all `cap` bytes), e.g. to read into.
    pub fn whole(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + self.cap]
    }

    /// The appended bytes.
    pub fn filled(&self) -> &[u8] {
        &self.mem[self.start..self.start + self.len]
    }

    /// Bytes appended so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Room left for [`PageBuf::extend`].
    pub fn room(&self) -> usize {
        self.cap - self.len
    }

    /// Appends `data`, which must fit ([`PageBuf::room`]); panics otherwise.
    pub fn extend(&mut self, data: &[u8]) {
        let at = self.start + self.len;
        self.mem[at..at + data.len()].copy_from_slice(data);
        self.len += data.len();
    }

    /// Empties the append buffer.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_is_page_aligned_and_appends_keep_order() {
        for cap in [1usize, 4096, 300_000] {
            let mut b = PageBuf::new(cap);
            assert_eq!(b.whole().as_ptr() as usize % ALIGN, 0);
            assert_eq!(b.whole().len(), cap);
            assert_eq!(b.room(), cap);
        }
        let mut b = PageBuf::new(10);
        b.extend(b"abc");
        b.extend(b"defg");
        assert_eq!(b.filled(), b"abcdefg");
        assert_eq!((b.len(), b.room()), (7, 3));
        b.clear();
        assert_eq!(b.filled(), b"");
    }
}
