//! The texts the agent reads (ARCHITECTURE §3.3, §3.4, Appendix A).
//!
//! These are a contract: they are the original agent host's templates, kept so a host can swap
//! its engine for shofer's without retraining its prompts. Every function here is pure; the
//! engine in `shofer-exec` fills them in.
//!
//! ```
//! use shofer_core::text::{format_size, inline_result, ExitStatus};
//! assert_eq!(format_size(1536), "1.5KB");
//! assert_eq!(
//!     inline_result("/w", &ExitStatus::Code(0), "hi\n"),
//!     "Command executed in terminal within working directory '/w'. Exit code: 0\nOutput:\nhi\n"
//! );
//! ```

/// Size for the result text: `<n>B` below 1 KiB, else `<x.x>KB` or `<x.x>MB` (1 KiB = 1024
/// bytes), one decimal rounded half up. A value that rounds to 1024.0KB is shown as `1.0MB`.
pub fn format_size(bytes: u64) -> String {
    scaled(bytes, "B")
}

/// Size for read_command_output headers: like [`format_size`] but `<n> bytes` below 1 KiB.
pub fn format_read_size(bytes: u64) -> String {
    scaled(bytes, " bytes")
}

fn scaled(bytes: u64, small_suffix: &str) -> String {
    if bytes < 1024 {
        return format!("{bytes}{small_suffix}");
    }
    // Tenths, rounded half up, in integer arithmetic (no float rounding surprises).
    let tenths_kb = (u128::from(bytes) * 10 + 512) / 1024;
    if tenths_kb < 10240 {
        return format!("{}.{}KB", tenths_kb / 10, tenths_kb % 10);
    }
    let tenths_mb = (u128::from(bytes) * 10 + 524_288) / 1_048_576;
    format!("{}.{}MB", tenths_mb / 10, tenths_mb % 10)
}

/// How a command ended, as far as the result text is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal {
        /// The signal number (Linux numbering).
        signal: i32,
        /// The kernel reported a core dump, or the signal's default action dumps core.
        core_dump_possible: bool,
    },
}

impl ExitStatus {
    /// A signal death, with `core_dump_possible` set when the kernel reported a core dump or
    /// the signal's default action is to dump core (SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGBUS,
    /// SIGFPE, SIGSEGV, SIGXCPU, SIGXFSZ, SIGSYS).
    pub fn from_signal(signal: i32, core_dumped: bool) -> Self {
        let core_default = matches!(signal, 3 | 4 | 5 | 6 | 7 | 8 | 11 | 24 | 25 | 31);
        ExitStatus::Signal {
            signal,
            core_dump_possible: core_dumped || core_default,
        }
    }

    /// The shell convention for a status as one number: the code, or 128 + the signal.
    pub fn shell_code(&self) -> i32 {
        match *self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal { signal, .. } => 128 + signal,
        }
    }

    /// The status line(s) of the result text: `Exit code: 0`; for a non-zero code
    /// `Command execution was not successful, inspect the cause and adjust as needed.\nExit code: <n>`;
    /// for a signal `Process terminated by signal <NAME>` plus ` - core dump possible`.
    pub fn text(&self) -> String {
        match *self {
            ExitStatus::Code(0) => "Exit code: 0".to_string(),
            ExitStatus::Code(c) => format!(
                "Command execution was not successful, inspect the cause and adjust as needed.\nExit code: {c}"
            ),
            ExitStatus::Signal { signal, core_dump_possible } => {
                let mut s = format!("Process terminated by signal {}", signal_name(signal));
                if core_dump_possible {
                    s.push_str(" - core dump possible");
                }
                s
            }
        }
    }
}

/// The name of a Linux (x86-64/arm64 numbering) signal, e.g. `SIGKILL`; real-time signals as
/// `SIGRTMIN+n`; unknown numbers as `SIG<n>`.
pub fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 32] = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match signal {
        1..=31 => NAMES[signal as usize].to_string(),
        34..=64 => format!("SIGRTMIN+{}", signal - 34),
        n => format!("SIG{n}"),
    }
}

/// Inline compression limits (the original host's): at most this many lines ...
pub const INLINE_LINE_LIMIT: usize = 500;
/// ... and at most this many characters.
pub const INLINE_CHAR_LIMIT: usize = 50_000;

/// Compresses inline output: runs of identical consecutive lines become the first line plus
/// `<previous line repeated N additional times>` (only when that is shorter), then more than
/// 50,000 characters keep the first 20% and last 80% around
/// `\n[...N characters omitted...]\n`, else more than 500 lines keep the first 100 and the
/// last 400 around `\n[...N lines omitted...]\n\n`.
pub fn compress_output(output: &str) -> String {
    truncate_output(
        &collapse_repeats(output),
        INLINE_LINE_LIMIT,
        INLINE_CHAR_LIMIT,
    )
}

fn collapse_repeats(content: &str) -> String {
    let mut out = String::with_capacity(content.len());
    let mut prev: Option<&str> = None;
    let mut repeats = 0usize;
    let flush = |out: &mut String, line: &str, repeats: usize| {
        if repeats == 0 {
            out.push_str(line);
            return;
        }
        let desc = format!("<previous line repeated {repeats} additional times>\n");
        if desc.len() < line.len() * (repeats + 1) {
            out.push_str(line);
            out.push_str(&desc);
        } else {
            for _ in 0..=repeats {
                out.push_str(line);
            }
        }
    };
    for line in content.split_inclusive('\n') {
        match prev {
            Some(p) if p == line => repeats += 1,
            Some(p) => {
                flush(&mut out, p, repeats);
                repeats = 0;
                prev = Some(line);
            }
            None => prev = Some(line),
        }
    }
    if let Some(p) = prev {
        flush(&mut out, p, repeats);
    }
    out
}

fn truncate_output(content: &str, line_limit: usize, char_limit: usize) -> String {
    let chars = content.chars().count();
    if chars > char_limit {
        let before = char_limit / 5;
        let after = char_limit - before;
        let start: String = content.chars().take(before).collect();
        let end_at = content
            .char_indices()
            .nth(chars - after)
            .map_or(content.len(), |(i, _)| i);
        return format!(
            "{start}\n[...{} characters omitted...]\n{}",
            chars - char_limit,
            &content[end_at..]
        );
    }
    let lines: Vec<&str> = content.split_inclusive('\n').collect();
    if lines.len() <= line_limit {
        return content.to_string();
    }
    let before = line_limit / 5;
    let after = line_limit - before;
    let head: String = lines[..before].concat();
    let tail: String = lines[lines.len() - after..].concat();
    format!(
        "{head}\n[...{} lines omitted...]\n\n{tail}",
        lines.len() - line_limit
    )
}

/// The inline result: `Command executed in terminal within working directory '<cwd>'. <exit status>\nOutput:\n<output>`,
/// the output compressed with [`compress_output`].
pub fn inline_result(cwd: &str, status: &ExitStatus, output: &str) -> String {
    inline_result_noted(cwd, status, "", output)
}

/// [`inline_result`] with `note` (e.g. a [`background_note`]) right after the exit status.
pub fn inline_result_noted(cwd: &str, status: &ExitStatus, note: &str, output: &str) -> String {
    format!(
        "Command executed in terminal within working directory '{cwd}'. {}{note}\nOutput:\n{}",
        status.text(),
        compress_output(output)
    )
}

/// `; K background process(es) still running (names)` when `still_running`, else
/// `; K background process(es) were stopped when shofer run ended (names)`: what became of
/// the descendants a command left behind when its main process exited. Names are the
/// processes' `comm`, at most 8 listed.
pub fn background_note(names: &[String], still_running: bool) -> String {
    if names.is_empty() {
        return String::new();
    }
    // A process's name is the command's choice (prctl(PR_SET_NAME)): escaped, so no newline
    // or terminal control reaches the engine's own words (issue 29).
    let mut list: Vec<String> = names
        .iter()
        .take(8)
        .map(|n| n.escape_debug().to_string())
        .collect();
    let more = names.len().saturating_sub(8);
    let more = if more > 0 {
        format!(", {more} more")
    } else {
        String::new()
    };
    list.dedup();
    let what = if still_running {
        "still running"
    } else {
        "were stopped when shofer run ended"
    };
    format!(
        "; {} background process(es) {what} ({}{more})",
        names.len(),
        list.join(", ")
    )
}

/// `; their output keeps going to artifact <id> (terminate_command <execution id> stops them)`:
/// appended to a [`background_note`] of processes still running.
pub fn background_artifact_note(artifact_id: &str, execution_id: u64) -> String {
    format!("; their output keeps going to artifact {artifact_id} (terminate_command {execution_id} stops them)")
}

/// The note on a command in the background whose artifact reached its size cap, so that its
/// output is read throttled from then on (issue 34): it names the command and
/// `terminate_command` as the way to stop it. `command` is cut to 80 characters.
pub fn throttled_note(execution_id: u64, command: &str, cap: u64) -> String {
    let cut: String = command.chars().take(80).collect();
    let mut shown = cut.escape_debug().to_string();
    if cut.len() < command.len() {
        shown.push_str("...");
    }
    format!(
        "Note: command {execution_id} (`{shown}`) keeps writing output in the background and its artifact reached the size cap of {} ({cap} bytes): the rest is counted, not stored, and its output is now read slowly, so its processes wait whenever they write. If it is not needed, stop it with terminate_command (execution_id {execution_id}).",
        format_size(cap)
    )
}

/// Where spilled output went, for [`persisted_result`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Persisted<'a> {
    /// The whole output is in this artifact.
    Complete {
        /// The artifact id, `cmd-<id>.txt`.
        artifact_id: &'a str,
    },
    /// Writing the artifact failed. `artifact_id` is set when a partial artifact of
    /// `written` bytes exists.
    Failed {
        /// The partial artifact, if one was created.
        artifact_id: Option<&'a str>,
        /// Bytes that made it to the artifact.
        written: u64,
        /// What went wrong (e.g. `No space left on device (os error 28)`).
        error: &'a str,
    },
}

/// The persisted result, for output over the preview budget:
/// `Command executed in '<cwd>'. <exit status>`, blank line,
/// `Output (<size>) persisted. Artifact ID: cmd-<id>.txt`, blank line, `Preview:`, the preview,
/// blank line, `Use read_command_output tool to view full output if needed.`
///
/// When the artifact could not be written, the `Output` line says so instead (naming the error
/// and how many bytes the partial artifact holds), the preview is kept, and the last line is
/// only given when a partial artifact exists.
pub fn persisted_result(
    cwd: &str,
    status: &ExitStatus,
    total: u64,
    persisted: &Persisted<'_>,
    preview: &str,
) -> String {
    persisted_result_noted(cwd, status, "", total, persisted, preview)
}

/// [`persisted_result`] with `note` right after the exit status.
pub fn persisted_result_noted(
    cwd: &str,
    status: &ExitStatus,
    note: &str,
    total: u64,
    persisted: &Persisted<'_>,
    preview: &str,
) -> String {
    format!(
        "Command executed in '{cwd}'. {}{note}\n\n{}",
        status.text(),
        persisted_block(total, persisted, preview)
    )
}

/// The part of [`persisted_result`] after the first line and the blank line: the `Output`
/// line, blank line, `Preview:`, the preview, and (when an artifact exists) blank line and
/// `Use read_command_output tool to view full output if needed.`
pub fn persisted_block(total: u64, persisted: &Persisted<'_>, preview: &str) -> String {
    let mut lines = Vec::new();
    let mut readable = true;
    match persisted {
        Persisted::Complete { artifact_id } => {
            lines.push(format!("Output ({}) persisted. Artifact ID: {artifact_id}", format_size(total)));
        }
        Persisted::Failed { artifact_id: Some(id), written, error } => lines.push(format!(
            "Output ({}) could not be fully persisted: {error}. Artifact ID: {id} holds only the first {} of it.",
            format_size(total),
            format_size(*written)
        )),
        Persisted::Failed { artifact_id: None, error, .. } => {
            readable = false;
            lines.push(format!("Output ({}) could not be persisted: {error}. Only the preview below is available.", format_size(total)));
        }
    }
    lines.push(String::new());
    lines.push("Preview:".to_string());
    lines.push(preview.to_string());
    if readable {
        lines.push(String::new());
        lines.push("Use read_command_output tool to view full output if needed.".to_string());
    }
    lines.join("\n")
}

/// The result of a command the engine killed (hard timeout, abort): `headline` (the fixed
/// text, e.g. [`hard_timeout_text`]), then what it printed: a blank line and
/// `Output:\n<output>` (compressed as inline output) when it fits the preview, `No output.` when
/// there was none, else a blank line and the [`persisted_block`].
pub fn killed_result(headline: &str, output: KilledOutput<'_>) -> String {
    match output {
        KilledOutput::Inline("") => headline.to_string(),
        KilledOutput::Inline(o) => format!("{headline}\n\nOutput:\n{}", compress_output(o)),
        KilledOutput::Persisted {
            total,
            persisted,
            preview,
        } => format!(
            "{headline}\n\n{}",
            persisted_block(total, &persisted, preview)
        ),
    }
}

/// What a killed command printed, for [`killed_result`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KilledOutput<'a> {
    /// The whole output (it fits the preview).
    Inline(&'a str),
    /// Spilled output.
    Persisted {
        /// Bytes of output.
        total: u64,
        /// Where it went.
        persisted: Persisted<'a>,
        /// The preview.
        preview: &'a str,
    },
}

/// The line a still-running result adds when the output so far is in an artifact (also
/// below the preview size): `Output so far (<size>) is in artifact <id>; read_command_output
/// reads it while the command runs.`
pub fn running_artifact_note(artifact_id: &str, total: u64) -> String {
    format!(
        "Output so far ({}) is in artifact {artifact_id}; read_command_output reads it while the command runs.",
        format_size(total)
    )
}

/// The still-running result (the soft timeout fired):
/// `Command is still running in terminal from '<cwd>'.`, then `Here's the output so far:\n<output>\n`
/// (or an empty line when there is none yet), then
/// `You will be updated on the terminal status and new output in the future.`
pub fn running_result(cwd: &str, output_so_far: &str) -> String {
    running_result_noted(cwd, output_so_far, "")
}

/// [`running_result`] with `note` (e.g. a [`running_artifact_note`]) as a line before the
/// last sentence.
pub fn running_result_noted(cwd: &str, output_so_far: &str, note: &str) -> String {
    let middle = if output_so_far.is_empty() {
        "\n".to_string()
    } else {
        format!("Here's the output so far:\n{output_so_far}\n")
    };
    let mut parts = vec![
        format!("Command is still running in terminal from '{cwd}'."),
        middle,
    ];
    if !note.is_empty() {
        parts.push(note.to_string());
    }
    parts.push(
        "You will be updated on the terminal status and new output in the future.".to_string(),
    );
    parts.join("\n")
}

/// The hard (user) timeout text, with the timeout in seconds as configured (e.g. `5s`, `0.5s`).
pub fn hard_timeout_text(seconds: f64) -> String {
    format!(
        "The command was terminated after exceeding a user-configured {}s timeout. Do not try to re-run the command.",
        format_seconds(seconds)
    )
}

/// Seconds without a useless fraction: `5`, `0.5`, `2.25`.
pub fn format_seconds(seconds: f64) -> String {
    if seconds.fract() == 0.0 && seconds.abs() < 1e15 {
        format!("{}", seconds as i64)
    } else {
        format!("{seconds}")
    }
}

/// The abort text.
pub const ABORTED_TEXT: &str = "Command execution was aborted by the user.";

/// The missing working directory text, naming the resolved directory.
pub fn missing_cwd_text(dir: &str) -> String {
    format!("Working directory '{dir}' does not exist.")
}

/// read_command_output: the artifact does not exist.
pub fn artifact_not_found_text(id: &str) -> String {
    format!(
        "Artifact not found: \"{id}\". Please verify the artifact_id from the command output message. Available artifacts are created when command output exceeds the preview size."
    )
}

/// read_command_output: the offset is outside the file (`size` > 0).
pub fn invalid_offset_text(offset: i64, size: u64) -> String {
    format!(
        "Invalid offset: {offset}. File size is {size} bytes. Offset must be between 0 and {}.",
        size.saturating_sub(1)
    )
}

/// read_command_output: the artifact exists but holds no bytes, so no offset is valid.
pub fn empty_artifact_text(id: &str) -> String {
    format!("Artifact \"{id}\" is empty (0 bytes): there is no output to read.")
}

/// read_command_output: the limit is not a positive number of bytes.
pub fn invalid_limit_text(limit: i64) -> String {
    format!("Invalid limit: {limit}. Limit must be a positive number of bytes (default 40960).")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29: a process named `a\nNote: ok\x1b]0` forged a line of the engine's own.
    #[test]
    fn background_names_are_escaped() {
        let note = super::background_note(&["a\nNote: ok\x1b]0\u{9b}".to_string()], true);
        assert!(!note.contains('\n') && !note.contains('\x1b') && !note.contains('\u{9b}'));
        assert!(note.contains("a\\nNote: ok\\u{1b}]0"), "{note}");
    }

    #[test]
    fn sizes_round_half_up() {
        assert_eq!(format_size(0), "0B");
        assert_eq!(format_size(1023), "1023B");
        assert_eq!(format_size(1024), "1.0KB");
        // 1.05 KiB = 1075.2 bytes: 1076 rounds to 1.1, 1075 to 1.0 (1.0498).
        assert_eq!(format_size(1075), "1.0KB");
        assert_eq!(format_size(1076), "1.1KB");
        // Exactly half a tenth: 1024 * 1.25 = 1280 -> 1.3 (half up).
        assert_eq!(format_size(1280), "1.3KB");
        assert_eq!(format_size(1_048_575), "1.0MB");
        assert_eq!(format_size(1_572_864), "1.5MB");
        assert_eq!(format_size(1 << 30), "1024.0MB");
        assert_eq!(format_read_size(5), "5 bytes");
        assert_eq!(format_read_size(53_248), "52.0KB");
    }

    #[test]
    fn exit_status_texts() {
        assert_eq!(ExitStatus::Code(0).text(), "Exit code: 0");
        assert_eq!(
            ExitStatus::Code(2).text(),
            "Command execution was not successful, inspect the cause and adjust as needed.\nExit code: 2"
        );
        assert_eq!(
            ExitStatus::from_signal(9, false).text(),
            "Process terminated by signal SIGKILL"
        );
        assert_eq!(
            ExitStatus::from_signal(11, false).text(),
            "Process terminated by signal SIGSEGV - core dump possible"
        );
        assert_eq!(
            ExitStatus::from_signal(15, true).text(),
            "Process terminated by signal SIGTERM - core dump possible"
        );
        assert_eq!(signal_name(34), "SIGRTMIN+0");
        assert_eq!(ExitStatus::from_signal(9, false).shell_code(), 137);
    }

    #[test]
    fn persisted_template_is_exact() {
        let t = persisted_result(
            "/w",
            &ExitStatus::Code(0),
            1_572_864,
            &Persisted::Complete {
                artifact_id: "cmd-1.txt",
            },
            "P",
        );
        assert_eq!(
            t,
            "Command executed in '/w'. Exit code: 0\n\nOutput (1.5MB) persisted. Artifact ID: cmd-1.txt\n\nPreview:\nP\n\nUse read_command_output tool to view full output if needed."
        );
    }

    #[test]
    fn running_template_is_exact() {
        assert_eq!(
            running_result("/w", "abc"),
            "Command is still running in terminal from '/w'.\nHere's the output so far:\nabc\n\nYou will be updated on the terminal status and new output in the future."
        );
        assert_eq!(
            running_result("/w", ""),
            "Command is still running in terminal from '/w'.\n\n\nYou will be updated on the terminal status and new output in the future."
        );
    }

    #[test]
    fn repeats_collapse_only_when_shorter() {
        let s = "progress line that is long enough\n".repeat(10) + "done\n";
        let c = compress_output(&s);
        assert_eq!(c, "progress line that is long enough\n<previous line repeated 9 additional times>\ndone\n");
        assert_eq!(compress_output("a\na\nb\n"), "a\na\nb\n");
    }

    #[test]
    fn lines_over_500_keep_first_100_and_last_400() {
        let s: String = (1..=600).map(|i| format!("l{i}\n")).collect();
        let c = compress_output(&s);
        assert!(c.starts_with("l1\n"));
        assert!(
            c.contains("l100\n\n[...100 lines omitted...]\n\nl201\n"),
            "{}",
            &c[..400]
        );
        assert!(c.ends_with("l600\n"));
        assert!(!c.contains("l101\n") && !c.contains("l200\n"));
    }

    #[test]
    fn chars_over_50000_keep_20_and_80_percent() {
        let s: String = (0..60_000)
            .map(|i| if i % 7 == 0 { 'é' } else { 'x' })
            .collect();
        let c = compress_output(&s);
        assert!(c.contains("\n[...10000 characters omitted...]\n"));
        let start: String = s.chars().take(10_000).collect();
        let end: String = s.chars().skip(20_000).collect();
        assert_eq!(
            c,
            format!("{start}\n[...10000 characters omitted...]\n{end}")
        );
    }

    #[test]
    fn fixed_texts() {
        assert_eq!(
            hard_timeout_text(5.0),
            "The command was terminated after exceeding a user-configured 5s timeout. Do not try to re-run the command."
        );
        assert_eq!(format_seconds(0.5), "0.5");
        assert_eq!(
            missing_cwd_text("/x"),
            "Working directory '/x' does not exist."
        );
        assert_eq!(
            invalid_offset_text(-1, 10),
            "Invalid offset: -1. File size is 10 bytes. Offset must be between 0 and 9."
        );
    }
}
