//! The output interceptor (DESIGN §3.2): a [`HeadTail`] preview plus, once the output exceeds
//! the budget, the artifact file `<dir>/cmd-<executionId>.txt` holding every byte from the
//! first.
//!
//! Until the budget is exceeded nothing touches the disk (the preview buffer holds the whole
//! output). The chunk that crosses the budget opens the artifact (`O_CREAT|O_EXCL`, mode 0600,
//! no symlink followed) and writes the bytes held so far, then that chunk; every later chunk is
//! appended. Memory stays at the budget plus the caller's read buffer.
//!
//! Once the artifact is open, the output pump moves later chunks with `splice(2)`
//! ([`Interceptor::splice_from`]): pipe to file with no copy through user space. Those bytes
//! are only counted by the preview buffer, whose tail is then re-read from the end of the
//! artifact whenever a preview is needed (and before any byte is pushed again), so the preview
//! is the same as if every byte had gone through memory. A filesystem that cannot take spliced
//! data (`EINVAL`) turns splicing off and the pump goes back to `read`/`write`.
//!
//! Disk errors never stop the command or lose the preview: the first error (ENOSPC, a removed
//! directory, EEXIST from a foreign file) is recorded with the number of bytes that did reach
//! the file, writing stops, and [`Interceptor::finish`] reports it so the result text can say
//! so.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use shofer_core::artifact::{is_cleanup_candidate, ArtifactId};
use shofer_core::preview::{HeadTail, Preview};

/// Where the interceptor stands with the artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spill {
    /// The output still fits the preview budget; no artifact exists.
    Inline,
    /// Every byte so far is in the artifact.
    Complete(ArtifactId),
    /// Writing the artifact failed.
    Failed {
        /// The partial artifact, if the file was created.
        artifact: Option<ArtifactId>,
        /// Bytes that reached the file.
        written: u64,
        /// The error, as `io::Error` displays it.
        error: String,
    },
}

/// A snapshot of the intercepted output: its preview and where the bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intercepted {
    /// The preview of everything so far (the whole output when [`Spill::Inline`]).
    pub preview: Preview,
    /// The artifact state.
    pub spill: Spill,
}

/// Intercepts one command's output stream.
#[derive(Debug)]
pub struct Interceptor {
    buf: HeadTail,
    dir: PathBuf,
    id: ArtifactId,
    file: Option<File>,
    spill: Spill,
    written: u64,
    /// Bytes were spliced past the preview buffer: its tail must be re-read from the file.
    tail_stale: bool,
    /// `splice(2)` into the artifact works (until it fails with EINVAL and the like).
    splice_ok: bool,
}

impl Interceptor {
    /// An interceptor for execution `execution_id` with a preview budget of `budget` bytes
    /// (see [`shofer_core::preview::PreviewSize::budget`]), spilling into `dir` (created with
    /// mode 0700 on first spill if missing).
    pub fn new(dir: &Path, execution_id: u64, budget: usize) -> Self {
        Interceptor {
            buf: HeadTail::new(budget),
            dir: dir.to_path_buf(),
            id: ArtifactId::for_execution(execution_id),
            file: None,
            spill: Spill::Inline,
            written: 0,
            tail_stale: false,
            splice_ok: true,
        }
    }

    /// The artifact file's path (it exists only once the output spilled).
    pub fn artifact_path(&self) -> PathBuf {
        self.dir.join(self.id.as_str())
    }

    /// Total bytes seen.
    pub fn total(&self) -> u64 {
        self.buf.total()
    }

    /// Feeds the next chunk of output. Never fails: disk errors are recorded (see the module
    /// docs).
    pub fn write(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.tail_stale {
            self.resync_tail();
        }
        match self.spill {
            Spill::Inline => {
                if self.buf.total() + data.len() as u64 <= self.buf.budget() as u64 {
                    self.buf.push(data);
                    return;
                }
                // This chunk crosses the budget: everything so far is still in the buffer.
                let prior = self.buf.kept_bytes();
                self.buf.push(data);
                match self.open() {
                    Ok(f) => {
                        self.file = Some(f);
                        self.spill = Spill::Complete(self.id.clone());
                        self.append(&prior);
                        self.append(data);
                    }
                    Err(e) => {
                        self.spill = Spill::Failed {
                            artifact: None,
                            written: 0,
                            error: e.to_string(),
                        }
                    }
                }
            }
            Spill::Complete(_) => {
                self.buf.push(data);
                self.append(data);
            }
            Spill::Failed { .. } => self.buf.push(data),
        }
    }

    fn open(&self) -> io::Result<File> {
        if !self.dir.is_dir() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)?;
        }
        // Readable too: the tail is read back after spliced writes.
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.artifact_path())
    }

    fn append(&mut self, mut data: &[u8]) {
        let Some(f) = self.file.as_mut() else { return };
        while !data.is_empty() {
            match f.write(data) {
                Ok(0) => {
                    self.fail(io::Error::from(io::ErrorKind::WriteZero));
                    return;
                }
                Ok(n) => {
                    self.written += n as u64;
                    data = &data[n..];
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(e);
                    return;
                }
            }
        }
    }

    /// Moves up to `max` bytes from the pipe `fd` into the artifact with `splice(2)`.
    ///
    /// Returns `None` when splicing is not possible right now: the output has not spilled yet,
    /// the artifact failed, the filesystem does not support splice, or this call hit a write
    /// error (recorded as with [`Interceptor::write`]). The caller then reads the data and
    /// passes it to [`Interceptor::write`] instead. `Some(0)` is the pipe's end of file.
    pub fn splice_from(&mut self, pipe: BorrowedFd<'_>, max: usize) -> Option<usize> {
        if !self.splice_ok || !matches!(self.spill, Spill::Complete(_)) {
            return None;
        }
        match shofer_sys::fd::splice(pipe, self.file.as_ref()?, max) {
            Ok(n) => {
                self.written += n as u64;
                self.buf.skip(n as u64);
                self.tail_stale |= n > 0;
                Some(n)
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | libc::EAGAIN)
                ) =>
            {
                self.splice_ok = false;
                None
            }
            Err(e) => {
                self.resync_tail();
                self.fail(e);
                None
            }
        }
    }

    /// The stream's last bytes, read back from the artifact (every byte so far is in it while
    /// the spill is complete).
    fn file_tail(&self) -> Option<Vec<u8>> {
        let f = self.file.as_ref()?;
        let want = self.buf.tail_wanted();
        let mut tail = vec![0u8; want];
        let mut done = 0;
        while done < want {
            match f.read_at(&mut tail[done..], self.written - (want - done) as u64) {
                Ok(0) => return None,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        Some(tail)
    }

    fn resync_tail(&mut self) {
        if let Some(t) = self.file_tail() {
            self.buf.resync_tail(&t);
        }
        self.tail_stale = false;
    }

    fn fail(&mut self, e: io::Error) {
        self.file = None;
        self.spill = Spill::Failed {
            artifact: Some(self.id.clone()),
            written: self.written,
            error: e.to_string(),
        };
    }

    /// The preview and artifact state so far (e.g. for a soft timeout).
    pub fn snapshot(&self) -> Intercepted {
        let preview = match self.tail_stale.then(|| self.file_tail()).flatten() {
            Some(t) => {
                let mut b = self.buf.clone();
                b.resync_tail(&t);
                b.preview()
            }
            None => self.buf.preview(),
        };
        Intercepted {
            preview,
            spill: self.spill.clone(),
        }
    }

    /// Closes the artifact (a close error counts as a disk error) and returns the final state.
    pub fn finish(&mut self) -> Intercepted {
        if self.tail_stale {
            self.resync_tail();
        }
        if let Some(f) = self.file.take() {
            // Surface delayed write errors (e.g. on network filesystems) before advertising
            // the artifact; data already in the page cache is readable either way.
            if let Err(e) = f.sync_data() {
                if e.raw_os_error() != Some(libc::EINVAL) {
                    self.fail(e);
                }
            }
        }
        self.snapshot()
    }
}

/// Removes every `cmd-*` file in `dir` (the original host's `cleanup`). A missing `dir` is not
/// an error. Returns how many files were removed.
///
/// # Errors
/// Reading `dir` or removing a file failed (other than it being gone already).
pub fn cleanup(dir: &Path) -> io::Result<usize> {
    remove_where(dir, is_cleanup_candidate)
}

/// Removes the artifacts `cmd-<digits>.txt` in `dir` whose execution id is not in `keep`
/// (the original host's `cleanupByIds`); other files are left alone.
///
/// # Errors
/// As [`cleanup`].
pub fn cleanup_by_ids(dir: &Path, keep: &[u64]) -> io::Result<usize> {
    remove_where(dir, |name| {
        ArtifactId::parse(name).is_ok_and(|id| !keep.contains(&id.execution_id()))
    })
}

fn remove_where(dir: &Path, pred: impl Fn(&str) -> bool) -> io::Result<usize> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut n = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !pred(name) || entry.file_type()?.is_dir() {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => n += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::fd::AsFd;

    fn run(budget: usize, chunks: &[&[u8]]) -> (tempfile::TempDir, Interceptor, Intercepted) {
        let dir = tempfile::tempdir().unwrap();
        let mut i = Interceptor::new(dir.path(), 7, budget);
        for c in chunks {
            i.write(c);
        }
        let out = i.finish();
        (dir, i, out)
    }

    #[test]
    fn exactly_budget_does_not_spill_one_more_does() {
        for budget in [5120usize, 10240, 20480] {
            let data = vec![b'z'; budget];
            let (dir, _, out) = run(budget, &[&data]);
            assert_eq!(out.spill, Spill::Inline);
            assert!(!dir.path().join("cmd-7.txt").exists());
            let data = vec![b'z'; budget + 1];
            let (dir, _, out) = run(budget, &[&data]);
            assert_eq!(out.spill, Spill::Complete(ArtifactId::for_execution(7)));
            assert_eq!(fs::read(dir.path().join("cmd-7.txt")).unwrap(), data);
        }
    }

    #[test]
    fn writes_2k_4k_6k_spill_on_the_third() {
        let dir = tempfile::tempdir().unwrap();
        let mut i = Interceptor::new(dir.path(), 9, 10240);
        let (a, b, c) = (vec![b'a'; 2048], vec![b'b'; 4096], vec![b'c'; 6144]);
        i.write(&a);
        assert_eq!(i.snapshot().spill, Spill::Inline);
        i.write(&b);
        assert_eq!(i.snapshot().spill, Spill::Inline);
        assert!(!i.artifact_path().exists());
        i.write(&c);
        assert!(matches!(i.snapshot().spill, Spill::Complete(_)));
        let out = i.finish();
        assert_eq!(fs::read(i.artifact_path()).unwrap(), [a, b, c].concat());
        assert_eq!(out.preview.omitted, 12288 - 10240);
    }

    #[test]
    fn removed_dir_is_reported_and_preview_survives() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("sub");
        fs::create_dir(&gone).unwrap();
        let mut i = Interceptor::new(&gone, 1, 5120);
        fs::remove_dir(&gone).unwrap();
        // Make re-creation impossible: a file where the directory was.
        fs::write(&gone, b"").unwrap();
        i.write(&[b'q'; 6000]);
        let out = i.finish();
        assert!(
            matches!(&out.spill, Spill::Failed { artifact: None, .. }),
            "{:?}",
            out.spill
        );
        assert_eq!(out.preview.omitted, 880);
    }

    #[test]
    fn cleanup_removes_cmd_files_and_by_ids_keeps_listed() {
        let dir = tempfile::tempdir().unwrap();
        for n in [
            "cmd-1.txt",
            "cmd-2.txt",
            "cmd-3.txt",
            "cmd-x.part",
            "other.txt",
        ] {
            fs::write(dir.path().join(n), b"x").unwrap();
        }
        assert_eq!(cleanup_by_ids(dir.path(), &[2]).unwrap(), 2);
        assert!(dir.path().join("cmd-2.txt").exists());
        assert!(dir.path().join("cmd-x.part").exists());
        assert_eq!(cleanup(dir.path()).unwrap(), 2);
        assert!(dir.path().join("other.txt").exists());
        assert_eq!(cleanup(&dir.path().join("missing")).unwrap(), 0);
    }

    #[test]
    fn spliced_stream_gives_the_same_preview_and_artifact() {
        let data: Vec<u8> = (0..3_000_000u32)
            .map(|i| b"ab\xc3\xa9\n"[(i % 5) as usize])
            .collect();
        let (plain_dir, _, plain) = run(5120, &[&data]);
        let dir = tempfile::tempdir().unwrap();
        let mut i = Interceptor::new(dir.path(), 7, 5120);
        let (r, w) = shofer_sys::fd::pipe_large().unwrap();
        let feed = data.clone();
        let writer = std::thread::spawn(move || {
            let mut f = File::from(w);
            f.write_all(&feed).unwrap();
        });
        let mut buf = vec![0u8; 7000];
        let mut spliced = 0;
        let mut checked_mid = false;
        loop {
            if let Some(n) = i.splice_from(r.as_fd(), 65536) {
                if n == 0 {
                    break;
                }
                spliced += n;
                if spliced > 1_000_000 && !checked_mid {
                    checked_mid = true;
                    // A soft-timeout snapshot in the middle must see the right tail.
                    let mut expected = HeadTail::new(5120);
                    expected.push(&data[..i.total() as usize]);
                    assert_eq!(i.snapshot().preview, expected.preview());
                }
                continue;
            }
            let n = shofer_sys::fd::read(&r, &mut buf).unwrap();
            if n == 0 {
                break;
            }
            i.write(&buf[..n]);
        }
        writer.join().unwrap();
        assert!(spliced > 0 && checked_mid, "splice was never used");
        let out = i.finish();
        assert_eq!(out, plain);
        assert_eq!(
            fs::read(i.artifact_path()).unwrap(),
            fs::read(plain_dir.path().join("cmd-7.txt")).unwrap()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_chunking_gives_same_preview_and_artifact(
            data in proptest::collection::vec(any::<u8>(), 0..25_000),
            cuts in proptest::collection::vec(1usize..9000, 0..12),
        ) {
            let whole = run(5120, &[&data]);
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut pos = 0;
            for c in cuts {
                let end = (pos + c).min(data.len());
                chunks.push(&data[pos..end]);
                pos = end;
            }
            chunks.push(&data[pos..]);
            let parts = run(5120, &chunks);
            prop_assert_eq!(&whole.2, &parts.2);
            let a = fs::read(whole.0.path().join("cmd-7.txt")).ok();
            let b = fs::read(parts.0.path().join("cmd-7.txt")).ok();
            prop_assert_eq!(&a, &b);
            if data.len() > 5120 {
                prop_assert_eq!(a.unwrap(), data);
            } else {
                prop_assert!(a.is_none());
            }
            prop_assert!(std::str::from_utf8(whole.2.preview.text.as_bytes()).is_ok());
        }
    }
}
