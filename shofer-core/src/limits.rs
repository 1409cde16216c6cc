//! The command's resource limits, as the user asks for them: processes, memory, CPU
//! (`--limit-procs`, `--limit-memory`, `--limit-cpu`; the same for `shofer run`/`serve`).
//! Pure values and their parsing; how each is enforced is the sandbox's (`limits` there).
//!
//! The defaults let `make -j`, `cargo build` and a test suite run, and stop a fork bomb and a
//! runaway allocation before the host suffers: [`Limits::DEFAULT_PROCS`] tasks, three
//! quarters of the machine's memory, no CPU cap. No address-space limit (`RLIMIT_AS` breaks
//! V8, Go and sanitizers, which reserve far more than they use).

/// What one limit is set to on the command line: the default, off, or a value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Setting {
    /// Not given: the default.
    #[default]
    Default,
    /// `off`: no limit.
    Off,
    /// A value.
    Value(u64),
}

/// The limits a run asks for, each `None` when off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Tasks (processes and threads) at once.
    pub procs: Option<u64>,
    /// Memory in bytes (what the kernel charges: anonymous memory, page cache, kernel).
    pub memory: Option<u64>,
    /// CPU time as a percentage of one CPU (200: two CPUs' worth).
    pub cpu_percent: Option<u64>,
}

impl Limits {
    /// Tasks at once by default: far above a build's or a test suite's, far below what
    /// exhausts a host (`kernel.pid_max` is 4,194,304 on 64-bit, 32,768 on many).
    pub const DEFAULT_PROCS: u64 = 4096;

    /// The limits `procs`, `memory` and `cpu` ask for on a machine with `mem_total` bytes
    /// of memory (`None`: unknown, then no default memory limit).
    pub fn resolve(
        procs: Setting,
        memory: Setting,
        cpu: Setting,
        mem_total: Option<u64>,
    ) -> Limits {
        let pick = |s: Setting, default: Option<u64>| match s {
            Setting::Default => default,
            Setting::Off => None,
            Setting::Value(v) => Some(v),
        };
        Limits {
            procs: pick(procs, Some(Self::DEFAULT_PROCS)),
            memory: pick(memory, mem_total.map(|m| (m / 4 * 3) & !((1 << 20) - 1))),
            cpu_percent: pick(cpu, None),
        }
    }
}

/// `off`, or what `value` parses to.
pub fn setting(text: &str, value: impl Fn(&str) -> Result<u64, String>) -> Result<Setting, String> {
    match text {
        "off" => Ok(Setting::Off),
        t => value(t).map(Setting::Value),
    }
}

/// A count of at least 1 (`--limit-procs`).
pub fn parse_count(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{text:?}: expected a whole number of at least 1, or off"
        )),
    }
}

/// A size in bytes with an optional binary suffix `K`, `M`, `G`, `T` (`--limit-memory 8G`),
/// at least 1 MiB.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || {
        format!("{text:?}: expected a size such as 512M or 8G (K, M, G, T: powers of 1024), at least 1M, or off")
    };
    let (digits, shift) = match text.as_bytes().last() {
        Some(b'K' | b'k') => (&text[..text.len() - 1], 10),
        Some(b'M' | b'm') => (&text[..text.len() - 1], 20),
        Some(b'G' | b'g') => (&text[..text.len() - 1], 30),
        Some(b'T' | b't') => (&text[..text.len() - 1], 40),
        _ => (text, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let bytes = n.checked_mul(1u64 << shift).ok_or_else(bad)?;
    if bytes < 1 << 20 {
        return Err(bad());
    }
    Ok(bytes)
}

/// A CPU share in percent of one CPU, 1 to 100 × 1024 (`--limit-cpu 150`).
pub fn parse_percent(text: &str) -> Result<u64, String> {
    match text.trim_end_matches('%').parse::<u64>() {
        Ok(n) if (1..=102_400).contains(&n) => Ok(n),
        _ => Err(format!("{text:?}: expected a percentage of one CPU (100 is one CPU, 250 two and a half), or off")),
    }
}

/// `bytes` as the user would write it (`8G`, `1536M`, `4096K`, or bytes).
pub fn show_size(bytes: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_counts_and_percentages_parse_or_say_what_is_valid() {
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert!(parse_size("1K").unwrap_err().contains("at least 1M"));
        assert!(parse_size("8X").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(parse_count("64"), Ok(64));
        assert!(parse_count("0").is_err());
        assert_eq!(parse_percent("150%"), Ok(150));
        assert!(parse_percent("0").is_err());
        assert_eq!(setting("off", parse_count), Ok(Setting::Off));
        assert_eq!(show_size(8 << 30), "8G");
        assert_eq!(show_size(1536 << 20), "1536M");
    }

    #[test]
    fn defaults_are_procs_and_three_quarters_of_memory() {
        let l = Limits::resolve(
            Setting::Default,
            Setting::Default,
            Setting::Default,
            Some(16 << 30),
        );
        assert_eq!(l.procs, Some(Limits::DEFAULT_PROCS));
        assert_eq!(l.memory, Some(12 << 30));
        assert_eq!(l.cpu_percent, None);
        let l = Limits::resolve(
            Setting::Off,
            Setting::Value(1 << 30),
            Setting::Value(50),
            None,
        );
        assert_eq!(
            (l.procs, l.memory, l.cpu_percent),
            (None, Some(1 << 30), Some(50))
        );
    }
}
