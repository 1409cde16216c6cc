//! read_command_output edge cases (ARCHITECTURE §3.4) against real files.

use std::path::Path;

use shofer_exec::reader::{self, read_output, ReadError, ReadRequest, DEFAULT_LIMIT};

fn setup(content: &[u8]) -> (tempfile::TempDir, &'static str) {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("cmd-42.txt"), content).unwrap();
    (d, "cmd-42.txt")
}

fn read(
    dir: &Path,
    id: &str,
    search: Option<&str>,
    offset: i64,
    limit: i64,
) -> Result<String, ReadError> {
    read_output(
        dir,
        &ReadRequest {
            artifact_id: id,
            search,
            offset,
            limit,
        },
    )
}

const TEXT: &[u8] = b"line1\nline2\nline3\n";

#[test]
fn read_from_offset_zero_numbers_from_one() {
    let (d, id) = setup(TEXT);
    assert_eq!(
        read(d.path(), id, None, 0, DEFAULT_LIMIT).unwrap(),
        "[Command Output: cmd-42.txt]\nTotal size: 18 bytes | Showing bytes 0-18 | COMPLETE\n\n1 | line1\n2 | line2\n3 | line3"
    );
}

#[test]
fn read_mid_line_numbers_from_the_line_holding_the_offset() {
    let (d, id) = setup(TEXT);
    assert_eq!(
        read(d.path(), id, None, 8, 5).unwrap(),
        "[Command Output: cmd-42.txt]\nTotal size: 18 bytes | Showing bytes 8-13 | TRUNCATED\n\n2 | ne2\n3 | l"
    );
}

#[test]
fn read_last_byte_and_offsets_outside_the_file() {
    let (d, id) = setup(TEXT);
    assert!(read(d.path(), id, None, 17, DEFAULT_LIMIT)
        .unwrap()
        .ends_with("Showing bytes 17-18 | COMPLETE\n\n3 | "));
    for bad in [18i64, 19, -1, i64::MIN] {
        assert_eq!(
            read(d.path(), id, None, bad, DEFAULT_LIMIT)
                .unwrap_err()
                .to_string(),
            format!(
                "Invalid offset: {bad}. File size is 18 bytes. Offset must be between 0 and 17."
            )
        );
    }
}

#[test]
fn limits_zero_negative_and_huge() {
    let (d, id) = setup(TEXT);
    for bad in [0i64, -5] {
        assert_eq!(
            read(d.path(), id, None, 0, bad).unwrap_err().to_string(),
            format!(
                "Invalid limit: {bad}. Limit must be a positive number of bytes (default 40960)."
            )
        );
    }
    assert!(read(d.path(), id, None, 3, i64::MAX)
        .unwrap()
        .contains("Showing bytes 3-18 | COMPLETE\n\n1 | e1\n"));
    assert!(read(d.path(), id, Some("line"), 0, i64::MAX)
        .unwrap()
        .contains("Total matches: 3 | Showing first 3"));
}

#[test]
fn huge_limit_on_a_large_artifact_is_capped_at_one_mib() {
    let (d, id) = setup(&vec![b'z'; 3 << 20]);
    let r = read(d.path(), id, None, 0, i64::MAX).unwrap();
    assert!(
        r.contains("Total size: 3.0MB | Showing bytes 0-1048576 | TRUNCATED"),
        "{}",
        &r[..120]
    );
}

#[test]
fn ids_that_are_not_cmd_digits_txt_are_refused() {
    let (d, _) = setup(TEXT);
    std::fs::create_dir(d.path().join("cmd-1.txt")).unwrap();
    for bad in [
        "../../etc/passwd",
        "cmd-1.txt/../x",
        "cmd-.txt",
        "cmd-42.txt ",
        "/etc/passwd",
    ] {
        assert_eq!(
            read(d.path(), bad, None, 0, DEFAULT_LIMIT).unwrap_err().to_string(),
            format!("Invalid artifact_id format: \"{bad}\". Expected format: cmd-{{timestamp}}.txt (e.g., \"cmd-1706119234567.txt\")")
        );
    }
    // A well-formed id that is a directory, or missing, is "not found".
    for missing in ["cmd-1.txt", "cmd-7.txt"] {
        assert_eq!(
            read(d.path(), missing, None, 0, DEFAULT_LIMIT).unwrap_err().to_string(),
            format!("Artifact not found: \"{missing}\". Please verify the artifact_id from the command output message. Available artifacts are created when command output exceeds the preview size.")
        );
    }
}

#[test]
fn empty_artifact_says_it_is_empty() {
    let (d, id) = setup(b"");
    assert_eq!(
        read(d.path(), id, None, 0, DEFAULT_LIMIT)
            .unwrap_err()
            .to_string(),
        "Artifact \"cmd-42.txt\" is empty (0 bytes): there is no output to read."
    );
}

#[test]
fn search_is_case_insensitive_padded_and_literal_when_invalid() {
    let (d, id) = setup(b"ok\nERROR: a(b\nfine\nerror again\n");
    assert_eq!(
        read(d.path(), id, Some("error"), 0, DEFAULT_LIMIT).unwrap(),
        "[Command Output: cmd-42.txt] (search: \"error\")\nTotal matches: 2 | Showing first 2\n\n    2 | ERROR: a(b\n    4 | error again"
    );
    assert!(read(d.path(), id, Some("A(B"), 0, DEFAULT_LIMIT)
        .unwrap()
        .ends_with("\n\n    2 | ERROR: a(b"));
    assert_eq!(
        read(d.path(), id, Some("^fine$|nomatch"), 0, DEFAULT_LIMIT).unwrap(),
        "[Command Output: cmd-42.txt] (search: \"^fine$|nomatch\")\nTotal matches: 1 | Showing first 1\n\n    3 | fine"
    );
    assert_eq!(
        read(d.path(), id, Some("zzz"), 0, DEFAULT_LIMIT).unwrap(),
        "[Command Output: cmd-42.txt] (search: \"zzz\")\n\nNo matches found for the search pattern."
    );
    // A match that would run across a newline does not join lines.
    assert!(read(d.path(), id, Some("ok\\nerror"), 0, DEFAULT_LIMIT)
        .unwrap()
        .ends_with("No matches found for the search pattern."));
}

#[test]
fn search_limit_cut_is_visible() {
    let content: String = (1..=100).map(|i| format!("match {i:03}\n")).collect();
    let (d, id) = setup(content.as_bytes());
    let r = read(d.path(), id, Some("match"), 0, 30).unwrap();
    assert!(r.contains("Total matches: 100 | Showing first 3\n\n    1 | match 001\n    2 | match 002\n    3 | match 003\n\n[Showing 3 of 100 matching lines: the limit of 30 bytes was reached."), "{r}");
}

#[test]
fn search_counts_lines_across_chunk_boundaries_and_long_lines() {
    // 3 MiB of short lines, then a 3 MiB line with a match in the middle, then more lines.
    let mut content = Vec::new();
    for i in 0..300_000 {
        content.extend_from_slice(format!("row {i:06}\n").as_bytes());
    }
    let mut long = vec![b'q'; 3 << 20];
    long[(3 << 20) / 2..(3 << 20) / 2 + 6].copy_from_slice(b"NEEDLE");
    content.extend_from_slice(&long);
    content.extend_from_slice(b"\nrow 299999 again\nneedle last\n");
    let (d, id) = setup(&content);
    let r = read(d.path(), id, Some("needle"), 0, DEFAULT_LIMIT).unwrap();
    assert!(
        r.contains("Total matches: 2 | Showing first 2\n\n300001 | [..."),
        "{}",
        &r[..200]
    );
    assert!(
        r.contains("NEEDLE") && r.ends_with("300003 | needle last"),
        "{}",
        &r[r.len() - 100..]
    );
    let r = read(d.path(), id, Some("row 299999"), 0, DEFAULT_LIMIT).unwrap();
    assert!(
        r.ends_with("300000 | row 299999\n300002 | row 299999 again"),
        "{r}"
    );
    // Read mode numbers lines after the long one correctly.
    let off = content.len() as i64 - 12;
    assert!(read(d.path(), id, None, off, DEFAULT_LIMIT)
        .unwrap()
        .ends_with("\n\n300003 | needle last"));
}

#[test]
fn artifact_removed_or_truncated_while_reading() {
    let mut content = Vec::new();
    for i in 0..400_000 {
        content.extend_from_slice(format!("l{i} hit\n").as_bytes());
    }
    let (d, id) = setup(&content);
    let path = d.path().join(id);
    // Removed while a search streams it: the open descriptor still reads it whole.
    let dir = d.path().to_path_buf();
    let t = std::thread::spawn(move || read(&dir, "cmd-42.txt", Some("hit"), 0, 100));
    std::thread::sleep(std::time::Duration::from_millis(5));
    std::fs::remove_file(&path).unwrap();
    match t.join().unwrap() {
        Ok(r) => assert!(
            r.contains("Total matches: 400000 | Showing first"),
            "{}",
            &r[..100]
        ),
        Err(ReadError::NotFound(_)) => {}
        Err(e) => panic!("{e}"),
    }
    assert!(matches!(
        read(d.path(), id, None, 0, 10),
        Err(ReadError::NotFound(_))
    ));
    // Truncated while reading: no panic, and an honest header.
    std::fs::write(&path, &content).unwrap();
    let dir = d.path().to_path_buf();
    let t =
        std::thread::spawn(move || read(&dir, "cmd-42.txt", None, content.len() as i64 - 5, 100));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(10)
        .unwrap();
    match t.join().unwrap() {
        Ok(r) => assert!(r.contains("Showing bytes"), "{r}"),
        Err(ReadError::InvalidOffset { size: 10, .. }) => {}
        Err(e) => panic!("{e}"),
    }
}

/// A line per 100 bytes or so, like a build log: no quotes, an `error` now and then.
fn log_lines(bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes + 200);
    let mut i = 0u64;
    while out.len() < bytes {
        let word = if i % 1000 == 7 { "Error" } else { "info" };
        out.extend_from_slice(
            format!("2026-12-01T15:00:00Z {word} worker-{i}: processed batch {i} in 12 ms, queue depth 3, ok\n").as_bytes(),
        );
        i += 1;
    }
    out
}

fn timed(dir: &Path, id: &str, pattern: &str) -> (String, std::time::Duration) {
    let t = std::time::Instant::now();
    let r = read(dir, id, Some(pattern), 0, DEFAULT_LIMIT).unwrap();
    (r, t.elapsed())
}

/// Past the budget a search must be back with what it has; the slack covers one window.
const BUDGET_SLACK: std::time::Duration = std::time::Duration::from_secs(3);

#[test]
fn catastrophic_patterns_are_linear_or_stop_within_the_budget() {
    // `[^"]*error` once re-scanned from every line start (~24 s per MiB): now one pass.
    let content = log_lines(16 << 20);
    let expected = content
        .split(|&b| b == b'\n')
        .filter(|l| l.windows(5).any(|w| w.eq_ignore_ascii_case(b"error")))
        .count();
    let (d, id) = setup(&content);
    let (r, took) = timed(d.path(), id, r#"[^"]*error"#);
    assert!(
        r.contains(&format!("Total matches: {expected} |")) && !r.contains("Search stopped"),
        "{took:?} {}",
        &r[..200.min(r.len())]
    );
    // `(a{1,100}){1,100}b` (102 s on a 1 MB line before) is over the automaton limit: refused
    // at once with a message saying why.
    let (d, id) = setup(&vec![b'a'; 1 << 20]);
    let (r, took) = timed(d.path(), id, "(a{1,100}){1,100}b");
    assert!(
        r.starts_with("Search pattern too complex (20205 automaton states; at most 10000"),
        "{took:?} {r}"
    );
    // `(a{1,30}){1,30}b`, under the limit, on a 1 MiB line and on 16 MiB of such lines: back
    // within the budget, complete or saying where it stopped.
    for (lines, len) in [(1usize, 1usize << 20), (16, 1 << 20)] {
        let mut content = Vec::new();
        for _ in 0..lines {
            content.extend(std::iter::repeat_n(b'a', len));
            content.push(b'\n');
        }
        let (d, id) = setup(&content);
        let (r, took) = timed(d.path(), id, "(a{1,30}){1,30}b");
        assert!(
            took <= reader::SEARCH_BUDGET + BUDGET_SLACK,
            "{lines} x {len}: {took:?}"
        );
        assert!(
            r.contains("No matches found") || r.contains("Search stopped: the time budget of 10s"),
            "{r}"
        );
    }
}

#[test]
fn search_stopped_by_the_budget_says_where_and_offset_continues() {
    // Cancellation and the budget share one check; a pre-set cancel flag stops at once.
    let content = log_lines(4 << 20);
    let (d, id) = setup(&content);
    let cancel = std::sync::atomic::AtomicBool::new(true);
    let r = reader::read_output_cancellable(
        d.path(),
        &ReadRequest {
            artifact_id: id,
            search: Some("error"),
            offset: 0,
            limit: DEFAULT_LIMIT,
        },
        &cancel,
    )
    .unwrap();
    assert!(r.contains("[Search cancelled after byte 0.]"), "{r}");
    // Search mode honours offset: line numbers count from the file's start.
    let second_half = (content.len() / 2) as i64;
    let all = read(d.path(), id, Some("worker-30007:"), 0, DEFAULT_LIMIT).unwrap();
    let from = read(
        d.path(),
        id,
        Some("worker-30007:"),
        second_half,
        DEFAULT_LIMIT,
    )
    .unwrap();
    assert!(all.contains("30008 | "), "{all}");
    assert_eq!(all, from);
}

#[test]
fn anchors_mean_line_start_and_end_never_a_window_edge() {
    // One 3.5 MiB line of `z` with `ERR` planted at and around the internal window edges.
    let w = reader::WINDOW;
    let mut line = vec![b'z'; 3 * w + w / 2];
    for at in [
        w - 4096,
        w - 3,
        w,
        2 * w - 4096,
        2 * w - 3,
        2 * w,
        3 * w - 3,
    ] {
        line[at..at + 3].copy_from_slice(b"ERR");
    }
    let mut content = line.clone();
    content.extend_from_slice(b"\nERR at the start\nat the end ERR\n");
    let (d, id) = setup(&content);
    let (r, _) = timed(d.path(), id, "^err");
    assert!(
        r.contains("Total matches: 1 |") && r.contains("    2 | ERR at the start"),
        "{r}"
    );
    let (r, _) = timed(d.path(), id, "err$");
    assert!(
        r.contains("Total matches: 1 |") && r.contains("    3 | at the end ERR"),
        "{r}"
    );
    // The long line does match an unanchored pattern, once.
    let (r, _) = timed(d.path(), id, "zERRz");
    assert!(
        r.contains("Total matches: 1 |") && r.contains("    1 | [..."),
        "{r}"
    );
    // No pattern crosses a newline.
    let (r, _) = timed(d.path(), id, r"start\sat|start.at|start[^x]at");
    assert!(r.contains("No matches found"), "{r}");
}
