//! Where a run's time goes, for the benchmarks (`scripts/bench-phases`): with
//! `SHOFER_SANDBOX_PHASES=1` in its environment the supervisor notes the time at the end of each
//! step ([`mark`]) and prints the marks on stderr once the run is over ([`print`]), as one line:
//! `shofer-sandbox: phases: facts=41 chosen=80 … end=5120` (µs since [`start`]); the namespace
//! backends' process A prints its own (`phases in A: maps=… mounts=…`), on the same clock,
//! before it exits. Otherwise it costs one environment lookup a run and an uncontended lock a
//! mark.
//!
//! Wall-clock differences between whole runs cannot resolve 100 µs on these shared 2-core
//! machines (runs of 4-9 ms vary by a millisecond); marks inside the run can. On the Landlock
//! backend the marks after `guardian` are the supervisor's, in the guardian's child.

use std::sync::Mutex;
use std::time::Instant;

/// When the run began, and the marks so far (each step's name and µs since then).
type Marks = (Instant, Vec<(&'static str, u128)>);

/// `None` when not asked for.
static MARKS: Mutex<Option<Marks>> = Mutex::new(None);

/// Starts the clock if `SHOFER_SANDBOX_PHASES=1`.
pub(crate) fn start() {
    if std::env::var_os("SHOFER_SANDBOX_PHASES").is_some_and(|v| v == "1") {
        if let Ok(mut m) = MARKS.lock() {
            *m = Some((Instant::now(), Vec::with_capacity(24)));
        }
    }
}

/// Notes that the step `name` ended now.
pub(crate) fn mark(name: &'static str) {
    if let Ok(mut m) = MARKS.lock() {
        if let Some((t0, marks)) = m.as_mut() {
            marks.push((name, t0.elapsed().as_micros()));
        }
    }
}

/// In a process cloned from the supervisor (the namespace backends' process A): forgets the
/// supervisor's marks, keeps its clock.
pub(crate) fn forget_marks() {
    if let Ok(mut m) = MARKS.lock() {
        if let Some((_, marks)) = m.as_mut() {
            marks.clear();
        }
    }
}

/// Prints the marks (and `end`, now), if any were taken: `shofer-sandbox: phases{of}: …`.
pub(crate) fn print(of: &str) {
    mark("end");
    let Ok(m) = MARKS.lock() else { return };
    if let Some((_, marks)) = m.as_ref() {
        let line: Vec<String> = marks.iter().map(|(n, us)| format!("{n}={us}")).collect();
        eprintln!("shofer-sandbox: phases{of}: {}", line.join(" "));
    }
}
