//! A thread that starts on another CPU than its creator's: [`Beside::start`] and
//! [`Beside::join`]; [`Pending`], the same work done here instead when no thread can be
//! started; [`handoff`], a value such a thread hands over before its work is done.
//!
//! Work meant to overlap the caller's (a supervisor's set-up step beside the next one) gains
//! nothing when the scheduler queues the new thread on its creator's CPU: there it waits until
//! the creator blocks, with the other CPU idle (half the starts measured on these 2-CPU
//! machines). Moving itself once it runs is too late and can take longer than the work. So the
//! thread is created with its affinity already set (`pthread_attr_setaffinity_np`: glibc sets
//! it before the thread first runs, and its first wake-up places it), through raw `libc`
//! because neither `std` nor `rustix` creates a thread with attributes. Once it runs, it widens
//! its affinity back to its creator's: pinned, it would wait behind whatever else takes its
//! CPU while its creator's idles (its creator waiting for its result). It blocks every
//! signal, as the helper threads of `process::spawn_signals_blocked` do, set as an attribute
//! too (no mask changes in the creator).

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};

extern "C" {
    /// glibc 2.32 (the `libc` crate does not declare it): the new thread's signal mask.
    fn pthread_attr_setsigmask_np(
        attr: *mut libc::pthread_attr_t,
        sigmask: *const libc::sigset_t,
    ) -> libc::c_int;
}

/// Work for a thread.
type Work<T> = Box<dyn FnOnce() -> T + Send>;

/// The work and, once done, its result (`None` while running or after a panic).
struct Shared<T> {
    work: Option<Work<T>>,
    /// The CPUs the thread may use once it runs: its creator's (it was created away from the
    /// creator's own CPU; should its CPU be busy later, the creator's may take it).
    widen_to: Option<rustix::thread::CpuSet>,
    result: Option<std::thread::Result<T>>,
}

/// A thread running beside its creator, on another CPU when the process may use one.
pub struct Beside<T> {
    thread: libc::pthread_t,
    /// Owned by the thread until [`Beside::join`] joins it; then read here.
    shared: *mut Shared<T>,
    joined: bool,
}

// Safety: the raw pointer is only dereferenced by the thread until it ends and by `join` after
// `pthread_join` returned, never by both; `T` and the work are `Send`.
unsafe impl<T: Send> Send for Beside<T> {}

extern "C" fn run<T>(arg: *mut libc::c_void) -> *mut libc::c_void {
    // Safety: `arg` is the `Shared<T>` `start` leaked for this thread; the creator does not
    // touch it until `pthread_join` returns.
    let shared = unsafe { &mut *arg.cast::<Shared<T>>() };
    if let Some(cpus) = shared.widen_to.take() {
        let _ = rustix::thread::sched_setaffinity(None, &cpus); // else it stays where it is
    }
    if let Some(work) = shared.work.take() {
        // A panic must not unwind through this `extern "C"` frame (that aborts).
        shared.result = Some(catch_unwind(AssertUnwindSafe(work)));
    }
    std::ptr::null_mut()
}

impl<T: Send + 'static> Beside<T> {
    /// Starts `work` on a new thread created to run on a CPU this thread may use but its
    /// current one (on that one when it is the only one); once running, it may use them all.
    ///
    /// # Errors
    /// `sched_getaffinity`'s or `pthread_create`'s.
    pub fn start(work: impl FnOnce() -> T + Send + 'static) -> io::Result<Beside<T>> {
        Beside::start_boxed(Box::new(work)).map_err(|(e, _)| e)
    }

    /// [`Beside::start`], which gives the work back when no thread started.
    fn start_boxed(work: Work<T>) -> Result<Beside<T>, (io::Error, Work<T>)> {
        let mut cpus = match rustix::thread::sched_getaffinity(None) {
            Ok(cpus) => cpus,
            Err(e) => return Err((e.into(), work)),
        };
        // Raw libc: glibc reads the CPU from its rseq area, where rustix's static build asks
        // the kernel for the auxiliary vector first (a `prctl` on this path).
        // Safety: no arguments, no memory.
        let here = unsafe { libc::sched_getcpu() };
        let widen_to = cpus;
        if let Ok(here) = usize::try_from(here) {
            if cpus.count() > 1 && cpus.is_set(here) {
                cpus.unset(here);
            }
        }
        // Safety: an all-zero cpu_set_t is the empty set; CPU_SET writes inside it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for cpu in 0..rustix::thread::CpuSet::MAX_CPU {
            if cpus.is_set(cpu) {
                // Safety: `cpu` < CPU_SETSIZE.
                unsafe { libc::CPU_SET(cpu, &mut set) };
            }
        }
        let shared = Box::into_raw(Box::new(Shared {
            work: Some(work),
            widen_to: Some(widen_to),
            result: None,
        }));
        // The work back out of `shared` when no thread started, with the error.
        let give_back = |shared: *mut Shared<T>, r: libc::c_int| {
            // Safety: called only when pthread_create failed: no thread ran, nothing but this
            // function holds `shared`, and it is freed here once.
            let mut shared = unsafe { Box::from_raw(shared) };
            let work = shared
                .work
                .take()
                .unwrap_or_else(|| Box::new(|| unreachable!()));
            (io::Error::from_raw_os_error(r), work)
        };
        // Safety: `attr` is initialised before use and destroyed once; `set` outlives the
        // call; the signal sets are plain data that sigfillset and pthread_sigmask fill, and
        // the old mask is put back; `run::<T>` receives the leaked `shared`, which is freed
        // below on failure or in `join`/`drop` after the thread ended.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            let r = libc::pthread_attr_init(&mut attr);
            if r != 0 {
                return Err(give_back(shared, r));
            }
            // Without the affinity (an attribute this glibc refuses) it still runs, wherever.
            libc::pthread_attr_setaffinity_np(&mut attr, std::mem::size_of_val(&set), &set);
            // Every signal blocked in the new thread: signals are the caller's to take. As an
            // attribute (glibc 2.32), glibc sets the mask within the blocking it does around
            // `clone` anyway; else the thread inherits it from this one, blocked meanwhile.
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let inherit = pthread_attr_setsigmask_np(&mut attr, &all) != 0;
            let mut old: libc::sigset_t = std::mem::zeroed();
            if inherit {
                libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            }
            let mut thread: libc::pthread_t = 0;
            let r = libc::pthread_create(&mut thread, &attr, run::<T>, shared.cast());
            if inherit {
                libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            }
            libc::pthread_attr_destroy(&mut attr);
            if r != 0 {
                return Err(give_back(shared, r));
            }
            Ok(Beside {
                thread,
                shared,
                joined: false,
            })
        }
    }

    /// Waits for the thread; its work's result, or the payload of its panic.
    ///
    /// # Errors
    /// The work panicked.
    pub fn join(mut self) -> std::thread::Result<T> {
        self.wait();
        // Safety: the thread has ended (joined); nobody else holds `shared`.
        let shared = unsafe { Box::from_raw(self.shared) };
        self.shared = std::ptr::null_mut();
        shared
            .result
            .unwrap_or_else(|| Err(Box::new("the thread ended without a result")))
    }

    fn wait(&mut self) {
        if !self.joined {
            // Safety: a thread this value created and nobody joined or detached.
            unsafe { libc::pthread_join(self.thread, std::ptr::null_mut()) };
            self.joined = true;
        }
    }
}

impl<T> Drop for Beside<T> {
    fn drop(&mut self) {
        if self.shared.is_null() {
            return;
        }
        // Not joined: wait for the work (it owns resources its result hands back on drop),
        // then free what it shared.
        if !self.joined {
            // Safety: as in `wait`.
            unsafe { libc::pthread_join(self.thread, std::ptr::null_mut()) };
        }
        // Safety: the thread has ended; nobody else holds `shared`.
        drop(unsafe { Box::from_raw(self.shared) });
    }
}

/// Work started beside the caller ([`Beside`]), or done already: here, when no thread could be
/// started, or because there was nothing to start one for.
pub enum Pending<T> {
    /// The result, computed by the caller.
    Done(T),
    /// The thread computing it.
    Beside(Beside<T>),
}

impl<T: Send + 'static> Pending<T> {
    /// Starts `work` beside this thread ([`Beside::start`]); does it here, now, when no thread
    /// can be started.
    pub fn start(work: impl FnOnce() -> T + Send + 'static) -> Pending<T> {
        match Beside::start_boxed(Box::new(work)) {
            Ok(thread) => Pending::Beside(thread),
            Err((_, work)) => Pending::Done(work()),
        }
    }

    /// The result, once the work is done.
    ///
    /// # Errors
    /// The work panicked on its thread (the payload).
    pub fn join(self) -> std::thread::Result<T> {
        match self {
            Pending::Done(result) => Ok(result),
            Pending::Beside(thread) => thread.join(),
        }
    }
}

/// The sending end of a [`handoff`].
pub struct Give<T>(std::sync::Arc<Slot<T>>);

/// The receiving end of a [`handoff`].
pub struct Take<T>(std::sync::Arc<Slot<T>>);

/// A handoff's one value: `None` while none was given, `Some(None)` once the giver was
/// dropped without giving.
struct Slot<T> {
    value: std::sync::Mutex<Option<Option<T>>>,
    ready: std::sync::Condvar,
}

/// One value handed from one thread to another, once: std's `mpsc` channel does that too, for
/// 20 KB more of a static binary.
pub fn handoff<T>() -> (Give<T>, Take<T>) {
    let slot = std::sync::Arc::new(Slot {
        value: std::sync::Mutex::new(None),
        ready: std::sync::Condvar::new(),
    });
    (Give(slot.clone()), Take(slot))
}

impl<T> Slot<T> {
    fn put(&self, value: Option<T>) {
        let mut v = self
            .value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if v.is_none() {
            *v = Some(value);
            self.ready.notify_one();
        }
    }
}

impl<T> Give<T> {
    /// Hands `value` over.
    pub fn give(self, value: T) {
        self.0.put(Some(value));
    }
}

impl<T> Drop for Give<T> {
    fn drop(&mut self) {
        self.0.put(None); // (nothing once given)
    }
}

impl<T> Take<T> {
    /// The value, once given; `None` when the giver was dropped without giving (its thread
    /// panicked before).
    pub fn take(self) -> Option<T> {
        let mut v = self
            .0
            .value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(value) = v.take() {
                return value;
            }
            v = self
                .0
                .ready
                .wait(v)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_runs_once_and_its_result_comes_back() {
        let t = Beside::start(|| (1..=10).sum::<u32>()).unwrap();
        assert_eq!(t.join().unwrap(), 55);
        let p = Pending::start(|| (1..=10).sum::<u32>());
        assert!(matches!(p, Pending::Beside(_)));
        assert_eq!(p.join().unwrap(), 55);
    }

    #[test]
    fn a_handoff_gives_its_value_before_the_work_ends_or_none_when_dropped() {
        let (give, take) = handoff();
        let (done, wait) = handoff::<()>();
        let t = Beside::start(move || {
            give.give(7);
            wait.take(); // the value was taken while this work was still running
            8
        })
        .unwrap();
        assert_eq!(take.take(), Some(7));
        done.give(());
        assert_eq!(t.join().unwrap(), 8);
        let (give, take) = handoff::<u8>();
        let t = Beside::start(move || drop(give)).unwrap();
        assert_eq!(take.take(), None);
        t.join().unwrap();
    }

    #[test]
    fn once_it_runs_it_may_use_every_cpu_of_its_creator() {
        use rustix::thread::{sched_getaffinity, CpuSet};
        let mine = sched_getaffinity(None).unwrap();
        let theirs = Beside::start(|| sched_getaffinity(None).unwrap())
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(theirs.count(), mine.count());
        assert!((0..CpuSet::MAX_CPU).all(|c| theirs.is_set(c) == mine.is_set(c)));
    }

    #[test]
    fn the_thread_blocks_every_signal_and_its_creator_keeps_its_mask() {
        fn blocked(sig: i32) -> bool {
            // Safety: plain data; a null new set only reads the mask.
            unsafe {
                let mut cur: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur);
                libc::sigismember(&cur, sig) == 1
            }
        }
        let before = blocked(libc::SIGUSR2);
        let theirs = Beside::start(|| [libc::SIGTERM, libc::SIGCHLD, libc::SIGUSR2].map(blocked))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(theirs, [true; 3]);
        assert_eq!(blocked(libc::SIGUSR2), before);
    }

    #[test]
    fn a_panic_in_the_work_comes_back_as_an_error() {
        let t = Beside::start(|| -> u32 { panic!("on purpose") });
        assert!(t.unwrap().join().is_err());
    }

    #[test]
    fn dropping_it_unjoined_waits_for_the_work() {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        drop(
            Beside::start(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                d.store(true, std::sync::atomic::Ordering::SeqCst);
            })
            .unwrap(),
        );
        assert!(done.load(std::sync::atomic::Ordering::SeqCst));
    }
}
