//! Detached commands: `shofer run --timeout S` keeps its promise that the command goes on
//! running after the soft timeout, in a supervisor process detached from the CLI, and later
//! invocations (`shofer list`, `shofer status ID`, `shofer kill ID|--all`, `shofer read`) reach
//! it through state files.
//!
//! # Shape
//! - [`fork_supervisor`] forks twice (the middle process calls `setsid` and exits at once), so
//!   the supervisor is in a session of its own, is no child of the CLI, holds none of the
//!   caller's descriptors (stdin/stdout/stderr are `/dev/null`; everything above 2 is closed
//!   but the result pipe), and is not hit by a signal to the caller's process group.
//! - The supervisor runs an [`crate::Engine`] (child subreaper, background processes stopped
//!   when the main process exits) and sends the first result (finished, or still running at
//!   the soft timeout) to the CLI as one JSON line on the pipe. From the soft timeout on it
//!   keeps a state file `<artifacts>/jobs/<id>.json` ([`JobState`]): written when it goes to
//!   the background, rewritten with the final result when the command ends, and then it exits
//!   (killing what the command left behind). `--hard-timeout` still bounds the command.
//! - SIGTERM or SIGINT to the supervisor terminates the command (its whole tree) and records
//!   that; [`kill`] sends it after checking the supervisor's identity (pid and start time), so
//!   a recycled pid is never signalled.
//! - A running job's output is read from its artifact, which holds every byte so far
//!   ([`running_text`] builds the still-running text from it).

use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shofer_core::preview::HeadTail;
use shofer_core::text;

use crate::engine::{Outcome, Status};

/// The state of one detached command, as stored in `<artifacts>/jobs/<id>.json`: what the
/// engine told of it ([`Outcome`]) and who supervises it.
///
/// The record is a flat JSON object: the outcome's fields but `artifact_path` and
/// `total_bytes` (the artifact is found by its id, [`running_text`] reads its size), then the
/// supervisor's (see [`JobState`]'s `Serialize`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct JobState {
    /// The command as the engine last told of it: `status` `running`, `exited`, `terminated`
    /// or `timed_out`; `background` the processes stopped when it ended; `text` the final
    /// result text (empty while running: [`running_text`] builds that from the artifact).
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The supervisor's pid.
    pub supervisor_pid: i32,
    /// The supervisor's start time (clock ticks after boot): with the pid, its identity.
    pub supervisor_start: u64,
    /// The preview budget in bytes (for the still-running text).
    pub preview_budget: usize,
}

impl Serialize for JobState {
    /// The record's fields, in this order (the on-disk format, unchanged since records were
    /// first written).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let o = &self.outcome;
        let mut r = s.serialize_struct("JobState", 12)?;
        r.serialize_field("id", &o.id)?;
        r.serialize_field("command", &o.command)?;
        r.serialize_field("cwd", &o.cwd)?;
        r.serialize_field("status", &o.status)?;
        r.serialize_field("exit_code", &o.exit_code)?;
        r.serialize_field("signal", &o.signal)?;
        r.serialize_field("artifact_id", &o.artifact_id)?;
        r.serialize_field("background", &o.background)?;
        r.serialize_field("text", &o.text)?;
        r.serialize_field("supervisor_pid", &self.supervisor_pid)?;
        r.serialize_field("supervisor_start", &self.supervisor_start)?;
        r.serialize_field("preview_budget", &self.preview_budget)?;
        r.end()
    }
}

/// Where the state files of detached commands live: `<artifacts>/jobs`.
pub fn jobs_dir(artifacts: &Path) -> PathBuf {
    artifacts.join("jobs")
}

/// Largest job record read (16 MiB: the final result text is bounded by the preview).
const MAX_RECORD: u64 = 16 << 20;

/// `dir` after the state-directory check ([`shofer_sys::statedir::check`]: ours, writable by
/// no one else, no symlink on its path): every read of a record or artifact goes through it.
fn checked(dir: &Path) -> io::Result<shofer_sys::statedir::StateDir> {
    shofer_sys::statedir::check(dir, &[]).map_err(|e| match e {
        shofer_sys::statedir::StateDirError::Open { source, .. }
            if source.kind() == io::ErrorKind::NotFound =>
        {
            source
        }
        e => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{e}; job records are read only from a directory of this user's that only it can write"),
        ),
    })
}

impl JobState {
    /// The state of `o`, run by this process as supervisor.
    pub fn of(o: &Outcome, preview_budget: usize) -> Self {
        let me = shofer_sys::process::getpid();
        // What the record holds (see the type's docs).
        let mut outcome = o.clone();
        outcome.artifact_path = None;
        outcome.total_bytes = 0;
        if outcome.status == Status::Running {
            outcome.text = String::new();
        }
        JobState {
            outcome,
            supervisor_pid: me,
            supervisor_start: shofer_sys::proc::read(me).map_or(0, |p| p.start),
            preview_budget,
        }
    }

    /// Writes the state file atomically (a temporary file renamed over it).
    ///
    /// # Errors
    /// Creating the directory, writing or renaming failed.
    pub fn save(&self, artifacts: &Path) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = shofer_sys::statedir::create(&jobs_dir(artifacts), &[])
            .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()))?
            .path;
        // A name of ours alone, made new (a symlink planted there is never followed).
        let tmp = dir.join(format!(
            ".{}.json.{}.tmp",
            self.outcome.id,
            std::process::id()
        ));
        let _ = fs::remove_file(&tmp);
        let json = serde_json::to_vec(self).map_err(io::Error::other)?;
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?
            .write_all(&json)?;
        fs::rename(&tmp, dir.join(format!("{}.json", self.outcome.id)))
    }

    /// Reads the state of job `id`. Nothing in it is trusted because shofer wrote it: the
    /// directory and the file are checked ([`shofer_sys::statedir`]; at most 16 MiB), and the
    /// record must be job `id`'s, naming its own artifact or none.
    ///
    /// # Errors
    /// No such job (`NotFound`), a directory or file that fails the check, or a record that
    /// is not job `id`'s (`InvalidData`).
    pub fn load(artifacts: &Path, id: u64) -> io::Result<Self> {
        let dir = checked(&jobs_dir(artifacts))?;
        let raw = shofer_sys::statedir::read_file(&dir.fd, &format!("{id}.json"), MAX_RECORD)?;
        let mut job: JobState = serde_json::from_slice(&raw).map_err(io::Error::other)?;
        // Not part of a record: a planted one's are dropped.
        job.outcome.artifact_path = None;
        job.outcome.total_bytes = 0;
        // Used to size a buffer: never more than the largest preview.
        job.preview_budget = job
            .preview_budget
            .min(shofer_core::preview::PreviewSize::Large.budget());
        let own = shofer_core::artifact::ArtifactId::for_execution(id);
        if job.outcome.id != id
            || job
                .outcome
                .artifact_id
                .as_deref()
                .is_some_and(|a| a != own.as_str())
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{id}.json is not the record of command {id}"),
            ));
        }
        Ok(job)
    }

    /// Whether the supervisor process still runs: same pid and start time, and a `shofer`
    /// process (a planted record naming another of the user's processes is not one).
    pub fn supervisor_alive(&self) -> bool {
        shofer_sys::proc::read(self.supervisor_pid).is_some_and(|p| {
            p.start == self.supervisor_start && !p.is_dead() && p.comm.as_bytes() == b"shofer"
        })
    }

    /// `running` while the supervisor lives; a job whose supervisor vanished without a final
    /// state (it was SIGKILLed) is reported as `lost`.
    pub fn status_word(&self) -> &'static str {
        match self.outcome.status {
            Status::Running if self.supervisor_alive() => "running",
            Status::Running => "lost",
            Status::Exited => "exited",
            Status::Terminated => "terminated",
            Status::TimedOut => "timed out",
        }
    }
}

/// Every job's state, oldest first.
///
/// # Errors
/// A `jobs/` directory that fails the state-directory check (none at all is no job).
pub fn list(artifacts: &Path) -> io::Result<Vec<JobState>> {
    let names = match checked(&jobs_dir(artifacts)) {
        Ok(d) => shofer_sys::statedir::list(&d.fd)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut jobs: Vec<JobState> = names
        .iter()
        .filter_map(|name| {
            let id = name.to_str()?.strip_suffix(".json")?.parse::<u64>().ok()?;
            JobState::load(artifacts, id).ok()
        })
        .collect();
    jobs.sort_by_key(|j| j.outcome.id);
    Ok(jobs)
}

/// The text `shofer status` prints: the final result, or for a running job the still-running
/// text with the preview built from its artifact (which holds every byte so far).
pub fn status_text(artifacts: &Path, job: &JobState) -> String {
    match job.status_word() {
        "running" => running_text(artifacts, job),
        "lost" => format!(
            "Command {} ({}) lost its supervisor (it was killed without a chance to record the end); its output so far is in {}.",
            job.outcome.id,
            job.outcome.command,
            job.outcome.artifact_id.as_deref().unwrap_or("no artifact")
        ),
        _ => job.outcome.text.clone(),
    }
}

/// The still-running text of a job, its preview read from the artifact.
pub fn running_text(artifacts: &Path, job: &JobState) -> String {
    let Some(aid) = &job.outcome.artifact_id else {
        return text::running_result(&job.outcome.cwd, "");
    };
    let mut buf = HeadTail::new(job.preview_budget);
    // The artifact as `shofer read` opens it: checked, never through a symlink or a FIFO.
    let opened = checked(artifacts).and_then(|d| shofer_sys::statedir::open_file(&d.fd, aid));
    let size = opened.and_then(|f| {
        let size = f.metadata()?.len();
        let budget = job.preview_budget as u64;
        let head = read_range(&f, 0, size.min(budget))?;
        buf.push(&head);
        if size > budget {
            buf.skip(size - budget);
            let want = buf.tail_wanted() as u64;
            buf.resync_tail(&read_range(&f, size - want, want)?);
        }
        Ok(size)
    });
    let p = buf.preview();
    let so_far = if p.omitted == 0 {
        text::compress_output(&p.text)
    } else {
        p.text
    };
    let note = match size {
        Ok(size) => format!(
            "{} It runs detached from shofer run: `shofer status {id}` shows it, `shofer kill {id}` stops it.",
            text::running_artifact_note(aid, size),
            id = job.outcome.id
        ),
        Err(e) => format!("Its artifact {aid} cannot be read: {e}."),
    };
    text::running_result_noted(&job.outcome.cwd, &so_far, &note)
}

fn read_range(f: &fs::File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut v = vec![0u8; len as usize];
    let mut done = 0;
    while done < v.len() {
        match f.read_at(&mut v[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    v.truncate(done);
    Ok(v)
}

/// Asks job `id`'s supervisor to terminate the command (SIGTERM, after checking its
/// identity) and waits up to `wait` for the final state. Returns the state then.
///
/// # Errors
/// No such job; or the supervisor is gone without a final state.
pub fn kill(artifacts: &Path, id: u64, wait: Duration) -> io::Result<JobState> {
    let job = JobState::load(artifacts, id)?;
    if job.outcome.status != Status::Running {
        return Ok(job);
    }
    if !job.supervisor_alive() {
        return Err(io::Error::other(format!(
            "job {id}'s supervisor (pid {}) is gone",
            job.supervisor_pid
        )));
    }
    // Signalled through a pidfd opened before its identity (pid and start time) is checked
    // again, so a recycled pid is never signalled.
    let proc_dir = shofer_sys::proc::ProcDir::open()?;
    let sent = shofer_sys::proc::read(job.supervisor_pid)
        .filter(|p| p.start == job.supervisor_start)
        .is_some_and(|p| {
            shofer_sys::pidfd::signal_if_same(&proc_dir, &p, rustix::process::Signal::TERM)
        });
    if !sent {
        return Err(io::Error::other(format!(
            "job {id}'s supervisor (pid {}) is gone",
            job.supervisor_pid
        )));
    }
    let start = Instant::now();
    loop {
        let now = JobState::load(artifacts, id)?;
        if now.outcome.status != Status::Running || !now.supervisor_alive() {
            return Ok(now);
        }
        if start.elapsed() > wait {
            return Ok(now);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Which side of [`fork_supervisor`] this process is on.
#[derive(Debug)]
pub enum Forked {
    /// The CLI: read the first result from this pipe.
    Cli(fs::File),
    /// The detached supervisor: write the first result to this pipe.
    Supervisor(fs::File),
}

/// Forks the detached supervisor (see the module docs). Must be called while the process has
/// one thread (before any runtime starts): only the calling thread survives `fork`.
///
/// # Errors
/// `pipe`/`fork` failed (nothing was started).
pub fn fork_supervisor() -> io::Result<Forked> {
    let (r, w) = shofer_sys::fd::pipe_cloexec()?;
    // Safety: the process is single-threaded here (documented precondition), so the child
    // is a full copy with no lock held by a vanished thread.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        drop(w);
        // The middle process exits at once; reap it.
        let mut st = 0;
        // Safety: waitpid on our own child with a valid status pointer.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        return Ok(Forked::Cli(fs::File::from(r)));
    }
    // The middle process: a new session, then the supervisor's fork.
    drop(r);
    // Safety: setsid and fork in a single-threaded child; _exit skips destructors and atexit
    // handlers that belong to the parent.
    unsafe {
        libc::setsid();
        match libc::fork() {
            0 => {}
            _ => libc::_exit(0),
        }
    }
    detach_descriptors(w.as_raw_fd())?;
    Ok(Forked::Supervisor(fs::File::from(w)))
}

/// stdin/stdout/stderr to `/dev/null`, every other descriptor but `keep` closed.
fn detach_descriptors(keep: RawFd) -> io::Result<()> {
    let null = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for fd in 0..3 {
        // Safety: dup2 onto the standard descriptors of this process.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    drop(null);
    let entries: Vec<RawFd> = fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in entries {
        if fd > 2 && fd != keep {
            // Safety: closes a descriptor inherited from the CLI that nothing in this fresh
            // process owns (raw close: the listing's own, already closed descriptor is among
            // them, and EBADF is harmless here).
            unsafe { libc::close(fd) };
        }
    }
    Ok(())
}

/// Sends the first result to the CLI: one JSON line, then the pipe closes.
pub fn send_result(mut pipe: fs::File, o: &Outcome) {
    if let Ok(mut line) = serde_json::to_vec(o) {
        line.push(b'\n');
        // The CLI may be gone (killed): nothing to do about it.
        let _ = pipe.write_all(&line);
    }
}

/// What the CLI got from the supervisor: the first result (all fields of [`Outcome`]).
pub fn parse_result(line: &[u8]) -> Option<serde_json::Value> {
    serde_json::from_slice(line).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record is written byte for byte as before the state became an [`Outcome`] plus its
    /// supervisor, and reads back as what was written.
    #[test]
    fn the_record_format_is_unchanged_and_reads_back() {
        let o = Outcome {
            id: 17,
            command: "make".into(),
            cwd: "/w".into(),
            status: Status::Exited,
            exit_code: Some(2),
            signal: None,
            artifact_id: Some("cmd-17.txt".into()),
            artifact_path: Some("/a/cmd-17.txt".into()),
            total_bytes: 99,
            background: vec!["sleep".into()],
            text: "done".into(),
        };
        let job = JobState {
            supervisor_pid: 42,
            supervisor_start: 7,
            ..JobState::of(&o, 10240)
        };
        let json = serde_json::to_string(&job).unwrap();
        assert_eq!(
            json,
            r#"{"id":17,"command":"make","cwd":"/w","status":"exited","exit_code":2,"signal":null,"artifact_id":"cmd-17.txt","background":["sleep"],"text":"done","supervisor_pid":42,"supervisor_start":7,"preview_budget":10240}"#
        );
        assert_eq!(serde_json::from_str::<JobState>(&json).unwrap(), job);
        let running = JobState::of(
            &Outcome {
                status: Status::Running,
                ..o
            },
            10240,
        );
        assert_eq!(running.outcome.text, "");
    }
}
