//! The output interceptor (ARCHITECTURE §3.2): terminal control bytes stripped, then a [`HeadTail`]
//! preview plus the artifact file `<dir>/cmd-<executionId>.txt` holding every byte from the
//! first.
//!
//! The stream is filtered by a [`Stripper`] before anything is stored: escape sequences,
//! BEL, backspaces and carriage-return rewrites never reach the preview or the artifact, so
//! the artifact *is* what the model reads, and every size and byte offset it is shown (the
//! `Output (<size>)` line, `[...N bytes omitted...]`, read_command_output's `Showing bytes`)
//! counts the same bytes.
//!
//! The artifact is created when the command starts ([`Interceptor::create`] claims the id with
//! `O_CREAT|O_EXCL`, mode 0600, no symlink followed; an id taken by another process, even one
//! in another `shofer`, moves on to the next), so ids are unique under any concurrency and a
//! running command's output can be read at any size. When a command ends with output that fits
//! the preview, [`Interceptor::finish`] removes the file unless the agent was already told
//! about it ([`Interceptor::keep_artifact`]): the result shows that output whole.
//!
//! The stripper holds back the current line (at most [`shofer_core::strip::HOLD`] bytes) until
//! it ends, so that a `\r` rewrite can still replace it: a running command's artifact gets a
//! partial line when its newline comes (a snapshot's preview shows it at once); `finish`
//! flushes it.
//!
//! Disk errors never stop the command or lose the preview: the first error (ENOSPC, a removed
//! directory) is recorded with the number of bytes that did reach the file, writing stops, and
//! the state says so, so the result text can tell. The same holds for the size cap
//! ([`Interceptor::with_cap`]): past it the output is counted (and previewed) but not stored.
//! An artifact removed or replaced while the command ran is not advertised.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use shofer_core::artifact::{is_cleanup_candidate, ArtifactId};
use shofer_core::preview::{HeadTail, Preview};
use shofer_core::strip::Stripper;

use crate::pagebuf::PageBuf;

/// Where the output stands with respect to the preview budget and the artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spill {
    /// The output still fits the preview budget: the preview is the whole output.
    Inline,
    /// The output exceeds the budget and every byte is in the artifact.
    Complete(ArtifactId),
    /// The output exceeds the budget and writing the artifact failed.
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
    /// The output against the budget and the artifact.
    pub spill: Spill,
    /// The artifact, while it exists and holds every byte so far (also below the budget,
    /// while the command runs).
    pub artifact: Option<ArtifactId>,
}

/// Output bytes are gathered into writes of up to this size (the stripper emits many small
/// pieces for coloured output).
const WRITE_BATCH: usize = 256 * 1024;

/// Intercepts one command's output stream.
#[derive(Debug)]
pub struct Interceptor {
    buf: HeadTail,
    strip: Stripper,
    dir: PathBuf,
    id: ArtifactId,
    file: Option<File>,
    /// The artifact file was removed (finished inline) or never created.
    gone: bool,
    written: u64,
    /// The first write error: (bytes written before it, the error).
    error: Option<String>,
    /// The agent was told the artifact id: never remove it.
    keep: bool,
    /// Stripped bytes gathered for the next write (page-aligned: see `pagebuf`).
    out: PageBuf,
    /// Most bytes stored in the artifact; later output is counted, not stored.
    cap: u64,
    /// The artifact's (device, inode) when it was created: at the end it must still be there.
    created: Option<(u64, u64)>,
}

impl Interceptor {
    /// An interceptor with a preview budget of `budget` bytes (see
    /// [`shofer_core::preview::PreviewSize::budget`]) whose artifact is created now in `dir`
    /// (made with mode 0700 if missing): `cmd-<id>.txt` for the first `id` from `first_id` up
    /// whose file does not exist yet (`O_EXCL`). When the file cannot be created (other than
    /// it existing), the error is recorded, the id stays `first_id`, and the preview still
    /// works. [`Interceptor::execution_id`] tells the id taken.
    pub fn create(dir: &Path, first_id: u64, budget: usize) -> Self {
        let mut i = Interceptor {
            buf: HeadTail::new(budget),
            strip: Stripper::new(),
            dir: dir.to_path_buf(),
            id: ArtifactId::for_execution(first_id),
            file: None,
            gone: true,
            written: 0,
            error: None,
            keep: false,
            out: PageBuf::new(WRITE_BATCH),
            cap: u64::MAX,
            created: None,
        };
        let made = if dir.is_dir() {
            Ok(())
        } else {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
        };
        if let Err(e) = made {
            i.error = Some(e.to_string());
            return i;
        }
        let mut id = first_id;
        // Bounded: another process would have to hold a million consecutive ids.
        for _ in 0..1_000_000 {
            let aid = ArtifactId::for_execution(id);
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(dir.join(aid.as_str()))
            {
                Ok(f) => {
                    use std::os::unix::fs::MetadataExt;
                    i.created = f.metadata().ok().map(|m| (m.dev(), m.ino()));
                    i.id = aid;
                    i.file = Some(f);
                    i.gone = false;
                    return i;
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => id += 1,
                Err(e) => {
                    i.error = Some(e.to_string());
                    return i;
                }
            }
        }
        i.error = Some("no free artifact id".into());
        i
    }

    /// Stores at most `cap` bytes in the artifact; past it the output is counted (and its
    /// preview kept) but not stored, and the result says the artifact holds only the first
    /// `cap` bytes. Default: no cap.
    pub fn with_cap(mut self, cap: u64) -> Self {
        self.cap = cap;
        self
    }

    /// Whether the artifact reached its size cap ([`Interceptor::with_cap`]): output from
    /// then on is counted, not stored.
    pub fn capped(&self) -> bool {
        self.file.is_none() && self.written >= self.cap && self.cap != u64::MAX
    }

    /// The artifact size cap in bytes ([`Interceptor::with_cap`]; `u64::MAX` when none).
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// The execution id whose artifact this is.
    pub fn execution_id(&self) -> u64 {
        self.id.execution_id()
    }

    /// The artifact file's path.
    pub fn artifact_path(&self) -> PathBuf {
        self.dir.join(self.id.as_str())
    }

    /// Total bytes of stripped output so far (held-back bytes of the current line included).
    pub fn total(&self) -> u64 {
        self.buf.total() + self.strip.pending().len() as u64
    }

    /// The agent was given the artifact id (a still-running result): keep the file even if
    /// the output ends up fitting the preview.
    pub fn keep_artifact(&mut self) {
        self.keep = true;
    }

    /// Feeds the next chunk of raw output. Never fails: disk errors are recorded (see the
    /// module docs).
    pub fn write(&mut self, data: &[u8]) {
        let Interceptor {
            buf,
            strip,
            file,
            written,
            error,
            out,
            cap,
            ..
        } = self;
        // Pieces are gathered in `out` and go to the preview and the file together: coloured
        // output comes in many small pieces, and one push and one write per batch is what
        // keeps stripping cheap.
        let mut emit = |seg: &[u8]| gather(buf, file, out, written, error, *cap, seg);
        strip.feed(data, &mut emit);
        flush(buf, file, out, written, error, *cap);
    }

    fn state(&self, preview: Preview) -> Intercepted {
        let artifact = (!self.gone && self.error.is_none()).then(|| self.id.clone());
        let spill = if preview.total <= self.buf.budget() as u64 {
            Spill::Inline
        } else if let Some(e) = &self.error {
            Spill::Failed {
                artifact: (!self.gone).then(|| self.id.clone()),
                written: self.written,
                error: e.clone(),
            }
        } else {
            Spill::Complete(self.id.clone())
        };
        Intercepted {
            preview,
            spill,
            artifact,
        }
    }

    /// The preview and artifact state so far (e.g. for a soft timeout); the current line's
    /// held-back bytes are shown as a terminal shows them now.
    pub fn snapshot(&self) -> Intercepted {
        let pending = self.strip.pending();
        let preview = if pending.is_empty() {
            self.buf.preview()
        } else {
            let mut b = self.buf.clone();
            b.push(pending);
            b.preview()
        };
        self.state(preview)
    }

    /// The end of the stream: emits the held-back bytes, closes the artifact (a close error
    /// counts as a disk error), removes it when the output fits the preview and the agent was
    /// not told about it, and returns the final state.
    pub fn finish(&mut self) -> Intercepted {
        {
            let Interceptor {
                buf,
                strip,
                file,
                written,
                error,
                out,
                cap,
                ..
            } = self;
            strip.finish(&mut |seg: &[u8]| gather(buf, file, out, written, error, *cap, seg));
            flush(buf, file, out, written, error, *cap);
        }
        let kept = self.keep || self.buf.exceeded();
        if let Some(f) = self.file.take().filter(|_| kept) {
            // Surface delayed write errors (e.g. on network filesystems) before advertising
            // the artifact; data already in the page cache is readable either way. (Not for
            // a file about to be removed: a thousand commands ending together would wait for
            // a thousand disk flushes.)
            if let Err(e) = f.sync_data() {
                if e.raw_os_error() != Some(libc::EINVAL) && self.error.is_none() {
                    self.error = Some(e.to_string());
                }
            }
        }
        self.check_still_there();
        if !self.gone && !kept && fs::remove_file(self.artifact_path()).is_ok() {
            self.gone = true;
        }
        self.out = PageBuf::new(0);
        self.state(self.buf.preview())
    }

    /// An artifact removed or replaced while the command ran (its directory deleted, say) is
    /// not advertised: the result then says only the preview is available.
    fn check_still_there(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if self.gone {
            return;
        }
        let now = fs::symlink_metadata(self.artifact_path())
            .ok()
            .filter(|m| m.file_type().is_file())
            .map(|m| (m.dev(), m.ino()));
        if now.is_none() || now != self.created {
            self.gone = true;
            self.error = Some("the artifact file was removed while the command ran".into());
        }
    }

    /// Frees the preview buffer once the final state was taken with [`Interceptor::finish`]
    /// (a finished command's record keeps only its result text). Later snapshots are empty.
    pub fn release_buffers(&mut self) {
        self.buf = HeadTail::new(0);
        self.out = PageBuf::new(0);
    }
}

/// Adds one piece of stripped output: small pieces are gathered in `out`, a piece as large as
/// the batch goes to the preview and the artifact at once.
fn gather(
    buf: &mut HeadTail,
    file: &mut Option<File>,
    out: &mut PageBuf,
    written: &mut u64,
    error: &mut Option<String>,
    cap: u64,
    seg: &[u8],
) {
    if seg.len() > out.room() {
        flush(buf, file, out, written, error, cap);
    }
    if seg.len() >= WRITE_BATCH || seg.len() > out.room() {
        buf.push(seg);
        write_all(file, seg, written, error, cap);
    } else {
        out.extend(seg);
    }
}

/// Moves the gathered bytes to the preview and the artifact.
fn flush(
    buf: &mut HeadTail,
    file: &mut Option<File>,
    out: &mut PageBuf,
    written: &mut u64,
    error: &mut Option<String>,
    cap: u64,
) {
    if out.len() > 0 {
        buf.push(out.filled());
        write_all(file, out.filled(), written, error, cap);
        out.clear();
    }
}

/// Appends to the artifact up to `cap` bytes in all; the first error, or reaching the cap
/// with more to store, stops writing for good (and is recorded).
fn write_all(
    file: &mut Option<File>,
    data: &[u8],
    written: &mut u64,
    error: &mut Option<String>,
    cap: u64,
) {
    let Some(f) = file.as_mut() else { return };
    let room = cap.saturating_sub(*written);
    let over = data.len() as u64 > room;
    let mut data = if over { &data[..room as usize] } else { data };
    while !data.is_empty() {
        match f.write(data) {
            Ok(0) => {
                *error = Some(io::Error::from(io::ErrorKind::WriteZero).to_string());
                *file = None;
                return;
            }
            Ok(n) => {
                *written += n as u64;
                data = &data[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                *error = Some(e.to_string());
                *file = None;
                return;
            }
        }
    }
    if over {
        *error = Some(format!(
            "the artifact size cap of {cap} bytes was reached (the rest was counted, not stored)"
        ));
        *file = None;
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
    use shofer_core::strip::strip_all;

    fn run(budget: usize, chunks: &[&[u8]]) -> (tempfile::TempDir, Interceptor, Intercepted) {
        let dir = tempfile::tempdir().unwrap();
        let mut i = Interceptor::create(dir.path(), 7, budget);
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
            assert_eq!(out.artifact, None);
            assert!(!dir.path().join("cmd-7.txt").exists());
            let data = vec![b'z'; budget + 1];
            let (dir, _, out) = run(budget, &[&data]);
            assert_eq!(out.spill, Spill::Complete(ArtifactId::for_execution(7)));
            assert_eq!(fs::read(dir.path().join("cmd-7.txt")).unwrap(), data);
        }
    }

    #[test]
    fn the_artifact_exists_and_fills_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut i = Interceptor::create(dir.path(), 9, 10240);
        assert_eq!(fs::read(i.artifact_path()).unwrap(), b"");
        let line = |c: u8, n: usize| [vec![c; n - 1], vec![b'\n']].concat();
        let (a, b, c) = (line(b'a', 2048), line(b'b', 4096), line(b'c', 6144));
        i.write(&a);
        assert_eq!(i.snapshot().spill, Spill::Inline);
        assert_eq!(i.snapshot().artifact, Some(ArtifactId::for_execution(9)));
        assert_eq!(fs::read(i.artifact_path()).unwrap(), a);
        i.write(&b);
        assert_eq!(i.snapshot().spill, Spill::Inline);
        i.write(&c);
        assert!(matches!(i.snapshot().spill, Spill::Complete(_)));
        let out = i.finish();
        assert_eq!(fs::read(i.artifact_path()).unwrap(), [a, b, c].concat());
        assert_eq!(out.preview.omitted, 12288 - 10240);
    }

    #[test]
    fn a_small_artifact_the_agent_was_told_about_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut i = Interceptor::create(dir.path(), 3, 5120);
        i.write(b"server listening\n");
        i.keep_artifact();
        let out = i.finish();
        assert_eq!(out.spill, Spill::Inline);
        assert_eq!(out.artifact, Some(ArtifactId::for_execution(3)));
        assert_eq!(fs::read(i.artifact_path()).unwrap(), b"server listening\n");
    }

    #[test]
    fn the_cap_stores_the_first_bytes_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut i = Interceptor::create(dir.path(), 3, 5120).with_cap(10_000);
        for k in 0..10u8 {
            i.write(&[b'0' + k; 3000]);
        }
        let out = i.finish();
        let stored = fs::read(i.artifact_path()).unwrap();
        assert_eq!(stored.len(), 10_000);
        assert_eq!(&stored[9_000..], &[b'3'; 1000][..]);
        assert_eq!(out.preview.total, 30_000);
        assert!(
            out.preview.text.ends_with("9999"),
            "{}",
            &out.preview.text[..40]
        );
        match &out.spill {
            Spill::Failed {
                artifact: Some(_),
                written: 10_000,
                error,
            } => assert!(error.contains("size cap of 10000 bytes"), "{error}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_artifact_removed_before_the_end_is_not_advertised() {
        let dir = tempfile::tempdir().unwrap();
        let mut i = Interceptor::create(dir.path(), 4, 5120);
        i.write(&[b'x'; 6000]);
        fs::remove_file(i.artifact_path()).unwrap();
        i.write(&[b'y'; 100]);
        let out = i.finish();
        assert!(
            matches!(&out.spill, Spill::Failed { artifact: None, error, .. } if error.contains("removed")),
            "{:?}",
            out.spill
        );
        assert_eq!(out.artifact, None);
    }

    #[test]
    fn ids_taken_by_another_process_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("cmd-7.txt"), b"foreign").unwrap();
        fs::write(dir.path().join("cmd-8.txt"), b"foreign").unwrap();
        let i = Interceptor::create(dir.path(), 7, 5120);
        assert_eq!(i.execution_id(), 9);
        assert_eq!(fs::read(dir.path().join("cmd-7.txt")).unwrap(), b"foreign");
    }

    #[test]
    fn removed_dir_is_reported_and_preview_survives() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("sub");
        // Make creation impossible: a file where the directory should be.
        fs::write(&gone, b"").unwrap();
        let mut i = Interceptor::create(&gone, 1, 5120);
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
    fn control_bytes_reach_neither_preview_nor_artifact() {
        let mut data = Vec::new();
        for n in 0..400 {
            data.extend(format!("\x1b[31m FAIL \x1b[39m test {n}\n").bytes());
            data.extend(format!("{n}%\r{}%\r\x1b[Kdone {n}\n", n + 1).bytes());
        }
        let (dir, _, out) = run(5120, &[&data]);
        let art = fs::read(dir.path().join("cmd-7.txt")).unwrap();
        assert_eq!(art, strip_all(&data));
        assert!(!art.contains(&0x1b) && !art.contains(&b'\r'));
        assert!(!out.preview.text.contains('\x1b') && !out.preview.text.contains('\r'));
        assert_eq!(out.preview.total, art.len() as u64);
        assert!(out.preview.text.ends_with(" FAIL  test 399\ndone 399\n"));
    }

    #[test]
    fn a_running_snapshot_shows_the_current_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut i = Interceptor::create(dir.path(), 1, 5120);
        i.write(b"line\nprogress 10%\rprogress 50%");
        assert_eq!(i.snapshot().preview.text, "line\nprogress 50%");
        i.write(b"\rprogress 100%");
        assert_eq!(i.finish().preview.text, "line\nprogress 100%");
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
            let stripped = strip_all(&data);
            if stripped.len() > 5120 {
                prop_assert_eq!(a.unwrap(), stripped);
            } else {
                prop_assert!(a.is_none());
            }
            prop_assert!(std::str::from_utf8(whole.2.preview.text.as_bytes()).is_ok());
        }
    }
}
