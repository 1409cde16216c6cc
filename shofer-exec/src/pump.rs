//! The output pump: a thread that moves a command's merged stdout+stderr from the pipe into
//! its [`Interceptor`], in arrival order.
//!
//! Completion is *not* pipe EOF: a background grandchild (`sleep 600 &`) keeps the write end
//! open for as long as it lives. The engine tells the pump when the main process exited
//! ([`PumpCtl::begin_drain`]); from then on the pump reads what is still coming until EOF, or
//! until the pipe stays silent for the idle time, or until the drain deadline (at most ~2 s),
//! whichever is first. Then it closes its read end; a process that writes to the pipe later
//! gets `EPIPE`/SIGPIPE, as with any closed pipe.
//!
//! # Past the artifact cap, in the background
//! A command no call waits on any more ([`PumpCtl::set_background`]: its soft timeout returned,
//! or its main process exited leaving background processes in `shofer serve`) whose artifact
//! reached its size cap ([`Interceptor::capped`]) is a runaway writer (`yes &`): its output is
//! only counted, and reading it at full speed would burn a core in the writer and one in the
//! pump for nothing. From then on the pump is *throttled*: it reads at most [`THROTTLE_CHUNK`]
//! bytes per [`THROTTLE_PERIOD`] (256 KiB/s), so the pipe fills and the writers block in
//! write(2), using next to no CPU, while the pump still sees the pipe's end when they exit or
//! are killed. It says so once ([`PumpCtl::throttled`]); the engine tells the agent, naming
//! `terminate_command`. A drain (the main process exited, or the tree was killed) reads at full
//! speed again: it is bounded by its deadline.
//!
//! A plain thread with blocking `poll`/`read` is used rather than tokio's async pipe: the hot
//! path (a command printing gigabytes) is one `read` per 512 KiB and one `write` into the
//! artifact, with no task wakeups or buffer copies in between.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::intercept::Interceptor;
use crate::pagebuf::PageBuf;
use shofer_sys::fd as sys;

const BUF_SIZE: usize = 512 * 1024;
const BATCH_MIN: usize = 64 * 1024;
const BATCH_WAIT: std::time::Duration = std::time::Duration::from_micros(200);

/// While throttled, the pump reads at most this many bytes ...
pub const THROTTLE_CHUNK: usize = 64 * 1024;
/// ... per this period (see the module docs).
pub const THROTTLE_PERIOD: Duration = Duration::from_millis(250);

#[derive(Debug, Default)]
struct Ctl {
    drain: Option<(Instant, Duration)>,
    stop: bool,
    /// No call waits on the output any more: past the artifact cap, throttle.
    background: bool,
    /// The pump throttled its reading (see the module docs).
    throttled: bool,
    /// The eventfd that wakes the pump; `None` once the pump stopped (it closes it then).
    wake: Option<OwnedFd>,
}

/// The handle that steers a running pump. Steering a pump that already stopped does nothing.
#[derive(Debug)]
pub struct PumpCtl {
    ctl: Mutex<Ctl>,
}

impl PumpCtl {
    fn lock(&self) -> std::sync::MutexGuard<'_, Ctl> {
        self.ctl.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The main process exited: read until EOF, `idle` of silence, or `max` from now.
    pub fn begin_drain(&self, max: Duration, idle: Duration) {
        let mut c = self.lock();
        c.drain = Some((Instant::now() + max, idle));
        if let Some(w) = &c.wake {
            sys::eventfd_signal(w);
        }
    }

    /// No call waits on this command's output any more: once its artifact is at its cap (now
    /// or later), read it throttled (see the module docs).
    pub fn set_background(&self) {
        let mut c = self.lock();
        c.background = true;
        if let Some(w) = &c.wake {
            sys::eventfd_signal(w);
        }
    }

    /// Whether the pump throttled its reading: the command is in the background and its
    /// artifact reached its cap.
    pub fn throttled(&self) -> bool {
        self.lock().throttled
    }

    /// Stop reading now.
    pub fn stop(&self) {
        let mut c = self.lock();
        c.stop = true;
        if let Some(w) = &c.wake {
            sys::eventfd_signal(w);
        }
    }
}

/// Starts the pump thread on `pipe` (the read end). The returned receiver fires when the pump
/// has stopped and every byte it read is in the interceptor.
///
/// # Errors
/// Creating the eventfd or the thread failed.
pub fn start(
    pipe: OwnedFd,
    sink: Arc<Mutex<Interceptor>>,
) -> std::io::Result<(Arc<PumpCtl>, oneshot::Receiver<()>)> {
    let wake = sys::eventfd()?;
    let wake_fd = wake.as_raw_fd();
    let ctl = Arc::new(PumpCtl {
        ctl: Mutex::new(Ctl {
            wake: Some(wake),
            ..Ctl::default()
        }),
    });
    let (tx, rx) = oneshot::channel();
    let c = Arc::clone(&ctl);
    let spawned = std::thread::Builder::new()
        .name("shofer-pump".into())
        .spawn(move || {
            run(&pipe, wake_fd, &sink, &c);
            drop(pipe);
            // Only this thread closes the eventfd, so `wake_fd` stayed valid while it ran.
            drop(c.lock().wake.take());
            let _ = tx.send(());
        });
    if let Err(e) = spawned {
        drop(ctl.lock().wake.take());
        return Err(e);
    }
    Ok((ctl, rx))
}

fn run(pipe: &OwnedFd, wake_fd: RawFd, sink: &Mutex<Interceptor>, ctl: &PumpCtl) {
    // Page-aligned: the kernel's copy out of the pipe is much slower into a misaligned buffer
    // (see `pagebuf`).
    let mut page = PageBuf::new(BUF_SIZE);
    let buf = page.whole();
    // Safety: only the pump thread closes the eventfd, after `run` returns (see `start`), so
    // `wake_fd` stays open for as long as this borrow lives.
    let wake = unsafe { BorrowedFd::borrow_raw(wake_fd) };
    let fds = [pipe.as_fd(), wake];
    let mut drain: Option<(Instant, Duration)> = None;
    let mut background = false;
    let mut throttled = false;
    loop {
        if !throttled && drain.is_none() && background && capped(sink) {
            throttled = true;
            ctl.lock().throttled = true;
        }
        if throttled && drain.is_none() {
            // Wait a period (or a word from the engine), then move one small chunk.
            let Ok(ready) = sys::poll_readable(&fds[1..], THROTTLE_PERIOD.as_millis() as i32)
            else {
                return;
            };
            if ready[0] {
                let Some((d, _)) = woken(ctl) else { return };
                drain = d;
                continue;
            }
            match sys::poll_readable(&fds[..1], 0) {
                Ok(r) if r[0] => match sys::read(pipe, &mut buf[..THROTTLE_CHUNK]) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => sink
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .write(&buf[..n]),
                },
                Ok(_) => {}
                Err(_) => return,
            }
            continue;
        }
        let timeout_ms = match drain {
            None => -1,
            Some((deadline, idle)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                left.min(idle).as_millis().clamp(1, i32::MAX as u128) as i32
            }
        };
        let Ok(ready) = sys::poll_readable(&fds, timeout_ms) else {
            return;
        };
        if ready[1] {
            let Some((d, b)) = woken(ctl) else { return };
            (drain, background) = (d, b);
        }
        if ready[0] {
            // Every byte goes through the interceptor: it strips terminal control bytes
            // before anything is stored, so the pipe cannot be spliced into the artifact.
            let moved = match sys::read(pipe, buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    sink.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .write(&buf[..n]);
                    n
                }
            };
            // A fast writer outpaced by us leaves a few KiB per wakeup; let the pipe fill a
            // little before the next call (at 4 GB/s, 200 µs is 800 KB: the 1 MiB pipe never
            // fills up, and a slow writer's output is 200 µs later).
            if moved < BATCH_MIN && drain.is_none() {
                std::thread::sleep(BATCH_WAIT);
            }
        } else if !ready[1] && drain.is_some() {
            // Silent for the idle time (or the deadline passed) after the main process exited.
            return;
        }
    }
}

/// The engine's word after a wake-up: `None` to stop now, else the drain deadline and whether
/// the command is in the background.
fn woken(ctl: &PumpCtl) -> Option<(Option<(Instant, Duration)>, bool)> {
    let c = ctl.lock();
    if let Some(w) = &c.wake {
        sys::eventfd_drain(w);
    }
    (!c.stop).then_some((c.drain, c.background))
}

fn capped(sink: &Mutex<Interceptor>) -> bool {
    sink.lock().unwrap_or_else(|e| e.into_inner()).capped()
}
