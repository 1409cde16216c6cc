//! The engine against real processes: output, texts, timeouts, abort, the registry, tree kill
//! and field cases 11–16 of `shared/field-cases.md`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{kill_leftovers, marker, sleepers, survivors, wait_for_processes};
use shofer_core::preview::PreviewSize;
use shofer_exec::{CancellationToken, Engine, EngineConfig, ExecRequest, Outcome, Status};

fn engine_in(dir: &Path, f: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut c = EngineConfig::new(dir, dir.join("artifacts"));
    c.subreaper = true;
    f(&mut c);
    Engine::new(c).unwrap()
}

async fn run(engine: &Engine, command: &str) -> Outcome {
    engine
        .execute(ExecRequest {
            command: command.into(),
            ..Default::default()
        })
        .await
        .unwrap()
}

/// Polls [`Engine::status`] until `done` holds (at most 20 s, for loaded machines).
async fn poll_status(e: &Engine, id: u64, done: impl Fn(&Outcome) -> bool) -> Outcome {
    let start = Instant::now();
    loop {
        let o = e.status(id).unwrap();
        if done(&o) || start.elapsed() > Duration::from_secs(20) {
            return o;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `n` `sleep` processes carry `m` (at most 10 s).
fn wait_sleepers(m: &str, n: usize) -> usize {
    let start = Instant::now();
    loop {
        let k = sleepers(m);
        if k >= n || start.elapsed() > Duration::from_secs(10) {
            return k;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn artifact(o: &Outcome) -> Vec<u8> {
    std::fs::read(o.artifact_path.as_ref().expect("an artifact")).unwrap()
}

/// The preview part of a persisted result text.
fn preview_of(text: &str) -> &str {
    let start = text.find("\nPreview:\n").unwrap() + "\nPreview:\n".len();
    let end = text.rfind("\n\nUse read_command_output tool").unwrap();
    &text[start..end]
}

#[tokio::test]
async fn output_merges_stdout_and_stderr_in_arrival_order() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |_| {});
    let o = run(&e, "echo a; echo b >&2; echo c; printf d >&2").await;
    assert_eq!(o.status, Status::Exited);
    assert_eq!(o.text, format!("Command executed in terminal within working directory '{}'. Exit code: 0\nOutput:\na\nb\nc\nd", d.path().display()));
}

#[tokio::test]
async fn environment_is_utf8_stdin_is_dev_null_and_nonzero_exit_is_worded() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |_| {});
    let o = run(
        &e,
        "echo $LANG $LC_ALL; readlink /proc/self/fd/0; cat; exit 7",
    )
    .await;
    assert_eq!(o.exit_code, Some(7));
    assert!(o.text.ends_with(
        ". Command execution was not successful, inspect the cause and adjust as needed.\nExit code: 7\nOutput:\nC.UTF-8 C.UTF-8\n/dev/null\n"
    ), "{}", o.text);
}

#[tokio::test]
async fn signal_death_names_the_signal() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |_| {});
    let o = run(&e, "kill -SEGV $$").await;
    assert_eq!(o.signal, Some(11));
    assert!(
        o.text
            .contains("'. Process terminated by signal SIGSEGV - core dump possible\nOutput:\n"),
        "{}",
        o.text
    );
    let o = run(&e, "kill -USR1 $$").await;
    assert!(
        o.text
            .contains("'. Process terminated by signal SIGUSR1\nOutput:\n"),
        "{}",
        o.text
    );
}

#[tokio::test]
async fn cwd_resolves_relative_and_missing_is_an_error_before_spawning() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    let e = engine_in(d.path(), |_| {});
    let o = e
        .execute(ExecRequest {
            command: "pwd".into(),
            cwd: Some("sub".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        o.text
            .ends_with(&format!("Output:\n{}/sub\n", d.path().display())),
        "{}",
        o.text
    );
    let err = e
        .execute(ExecRequest {
            command: "touch created".into(),
            cwd: Some("nope".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Working directory '{}/nope' does not exist.",
            d.path().display()
        )
    );
    assert!(!d.path().join("created").exists() && !d.path().join("nope").exists());
    assert!(e.list().iter().all(|o| o.command != "touch created"));
}

#[tokio::test]
async fn exact_budgets_do_not_spill_and_one_more_byte_does() {
    let d = tempfile::tempdir().unwrap();
    for size in [PreviewSize::Small, PreviewSize::Medium, PreviewSize::Large] {
        let e = engine_in(d.path(), |c| c.preview = size);
        let n = size.budget();
        let o = run(&e, &format!("head -c {n} /dev/zero | tr '\\0' a")).await;
        assert!(o.artifact_id.is_none(), "{n} bytes spilled");
        assert!(
            o.text.ends_with(&format!("Output:\n{}", "a".repeat(n)))
                || o.text.contains("<previous line")
        );
        let o = run(&e, &format!("head -c {} /dev/zero | tr '\\0' a", n + 1)).await;
        assert_eq!(artifact(&o).len(), n + 1);
        assert!(
            o.text.contains("\n[...1 bytes omitted...]\n"),
            "{}",
            &o.text[..200]
        );
    }
}

#[tokio::test]
async fn original_host_numbers_six_thousand_x_and_abc_blocks() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |c| c.preview = PreviewSize::Small);
    let o = run(&e, "head -c 6000 /dev/zero | tr '\\0' x").await;
    assert_eq!(
        preview_of(&o.text),
        format!(
            "{}\n[...880 bytes omitted...]\n{}",
            "x".repeat(2560),
            "x".repeat(2560)
        )
    );
    assert_eq!(o.total_bytes, 6000);
    assert!(o
        .text
        .contains("Output (5.9KB) persisted. Artifact ID: cmd-"));
    let o = run(&e, "head -c 2560 /dev/zero | tr '\\0' A; head -c 4000 /dev/zero | tr '\\0' B; head -c 2560 /dev/zero | tr '\\0' C").await;
    assert_eq!(
        preview_of(&o.text),
        format!(
            "{}\n[...4000 bytes omitted...]\n{}",
            "A".repeat(2560),
            "C".repeat(2560)
        )
    );
}

#[tokio::test]
async fn writes_of_2k_4k_6k_spill_on_the_third() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |_| {});
    // The third write waits for the test's go-ahead, so the check in between is not a race.
    let cmd = "head -c 2048 /dev/zero | tr '\\0' a; head -c 4096 /dev/zero | tr '\\0' b; \
               while [ ! -e go ]; do sleep 0.02; done; head -c 6144 /dev/zero | tr '\\0' c";
    let o = e
        .execute(ExecRequest {
            command: cmd.into(),
            timeout: Some(0.1),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(o.status, Status::Running);
    let o = poll_status(&e, o.id, |o| o.total_bytes >= 6144).await;
    assert_eq!(o.total_bytes, 6144);
    // Below the preview size the running command's artifact exists already (field case 9).
    assert_eq!(o.artifact_id, Some(format!("cmd-{}.txt", o.id)));
    assert!(d
        .path()
        .join("artifacts")
        .join(format!("cmd-{}.txt", o.id))
        .exists());
    assert!(
        o.text.contains(&format!(
            "Output so far (6.0KB) is in artifact cmd-{}.txt",
            o.id
        )),
        "{}",
        o.text
    );
    std::fs::write(d.path().join("go"), b"").unwrap();
    let o = e.wait(o.id).await.unwrap();
    assert_eq!(o.artifact_id, Some(format!("cmd-{}.txt", o.id)));
    let a = artifact(&o);
    assert_eq!(a.len(), 12288);
    assert!(a[..2048].iter().all(|&b| b == b'a') && a[6144..].iter().all(|&b| b == b'c'));
}

#[tokio::test]
async fn field_case_11_background_grandchild_holding_the_pipe_does_not_hang() {
    let d = tempfile::tempdir().unwrap();
    let m = marker();
    let e = engine_in(d.path(), |_| {});
    let t = Instant::now();
    // (The loop waits until the forked child has exec'd `sleep`, so its name is fixed.)
    let o = run(
        &e,
        &format!(
            "sleep {m} & until [ \"$(cat /proc/$!/comm)\" = sleep ]; do :; done; echo started"
        ),
    )
    .await;
    let took = t.elapsed();
    assert!(took < Duration::from_millis(2700), "took {took:?}");
    assert!(o.text.ends_with("Output:\nstarted\n"), "{}", o.text);
    assert!(
        o.text.contains(&format!("Exit code: 0; 1 background process(es) still running (sleep); their output keeps going to artifact cmd-{}.txt (terminate_command {} stops them)\n", o.id, o.id)),
        "{}",
        o.text
    );
    assert_eq!(o.background, ["sleep"]);
    assert_eq!(
        sleepers(&m),
        1,
        "the background sleep keeps running while the engine lives"
    );
    drop(e);
    assert!(
        survivors(&m).is_empty(),
        "dropping the engine kills leftovers"
    );
}

async fn assert_no_survivor_after(kind: &str, script: &str, m: &str, expect_at_least: usize) {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |c| {
        if kind == "hard" {
            c.hard_timeout = Some(Duration::from_millis(1500));
        }
    });
    let abort = CancellationToken::new();
    let req = ExecRequest {
        command: script.into(),
        abort: Some(abort.clone()),
        ..Default::default()
    };
    let m2 = m.to_string();
    let watcher = tokio::task::spawn_blocking(move || wait_for_processes(&m2, expect_at_least));
    if kind == "abort" {
        let a = abort.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            a.cancel();
        });
    }
    let o = e.execute(req).await.unwrap();
    let seen = watcher.await.unwrap();
    let left = survivors(m);
    kill_leftovers(m);
    assert!(
        seen >= expect_at_least,
        "{kind}: only {seen} processes were ever seen for {script}"
    );
    assert!(left.is_empty(), "{kind}: survivors {left:?} of {script}");
    match kind {
        "hard" => {
            assert_eq!(o.status, Status::TimedOut);
            assert!(o.text.starts_with("The command was terminated after exceeding a user-configured 1.5s timeout. Do not try to re-run the command."), "{}", o.text);
        }
        _ => {
            assert_eq!(o.status, Status::Terminated);
            assert!(
                o.text
                    .starts_with("Command execution was aborted by the user."),
                "{}",
                o.text
            );
        }
    }
}

#[tokio::test]
async fn field_case_12_setsid_and_double_fork_die_on_hard_timeout_and_abort() {
    for kind in ["hard", "abort"] {
        let (a, b, c) = (marker(), marker(), marker());
        let script = format!("setsid sleep {a} & (nohup sleep {b} >/dev/null 2>&1 &); sleep {c}");
        assert_no_survivor_after(kind, &script, &a, 1).await;
        assert!(survivors(&b).is_empty() && survivors(&c).is_empty());
    }
}

#[tokio::test]
async fn kill_leaves_no_plain_children_or_background_jobs() {
    for kind in ["hard", "abort"] {
        let m = marker();
        let script = format!("sleep {m} & sleep {m} & sh -c 'sleep {m}; :' & sleep {m}");
        assert_no_survivor_after(kind, &script, &m, 4).await;
    }
}

#[tokio::test]
async fn kill_gets_a_sigterm_ignoring_loop() {
    for kind in ["hard", "abort"] {
        let m = marker();
        let script = format!("sh -c 'trap \"\" TERM; while :; do sleep 0.05; done' {m} & trap '' TERM; sh -c 'trap \"\" TERM; while :; do sleep 0.05; done' {m}");
        assert_no_survivor_after(kind, &script, &m, 2).await;
    }
}

#[tokio::test]
async fn kill_gets_stopped_processes_and_term_handlers_see_sigterm() {
    for kind in ["hard", "abort"] {
        let (m, n) = (marker(), marker());
        let flag_dir = tempfile::tempdir().unwrap();
        let flag = flag_dir.path().join("got-term");
        // A stopped sleeper, and a shell that notes SIGTERM and exits: the tree kill must send
        // SIGTERM first (and let the grace run), not only SIGKILL. The handler writes the flag
        // with a redirection, not `touch`: a fork and exec could outlast the grace period on a
        // loaded machine (CI saw it once).
        let script = format!(
            "sleep {m} & kill -STOP $!; sh -c 'trap \": > {}; exit 0\" TERM; while :; do sleep 0.05; done' {n} & sleep {m}",
            flag.display()
        );
        assert_no_survivor_after(kind, &script, &m, 2).await;
        assert!(survivors(&n).is_empty());
        assert!(flag.exists(), "{kind}: the TERM handler never ran");
    }
}

#[tokio::test]
async fn kill_converges_on_a_bounded_fork_loop() {
    for kind in ["hard", "abort"] {
        let m = marker();
        // Forks sleepers as fast as it can (bounded at 3000), still forking when the kill comes.
        let script = format!(
            "sh -c 'i=0; while [ $i -lt 3000 ]; do sleep {m} & i=$((i+1)); done; wait' {m}"
        );
        assert_no_survivor_after(kind, &script, &m, 50).await;
    }
}

#[tokio::test]
async fn process_group_kill_misses_setsid_daemon_that_the_tree_kill_gets() {
    // STYLE 25: the known limit of a plain group kill, and the tree kill fixing it.
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (marker(), marker());
    let e = engine_in(d.path(), |_| {});
    let o = e
        .execute(ExecRequest {
            command: format!("setsid sleep {a} & sleep {b}"),
            timeout: Some(0.5),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(o.status, Status::Running);
    assert!(wait_for_processes(&a, 1) >= 1);
    assert_eq!(sleepers(&a), 1);
    let pgid = survivors(&b)[0];
    // Safety: kill(2) of a process group we created.
    unsafe { libc::kill(-pgid_of(pgid), libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(200));
    assert!(survivors(&b).is_empty());
    assert_eq!(sleepers(&a), 1, "the setsid sleep escaped the group kill");
    e.terminate(o.id).await.unwrap();
    let left = survivors(&a);
    kill_leftovers(&a);
    assert!(left.is_empty(), "tree kill left {left:?}");
}

fn pgid_of(pid: i32) -> i32 {
    shofer_sys::proc::read(pid).unwrap().pgid
}

#[tokio::test]
async fn soft_timeout_returns_output_so_far_and_keeps_the_command_registered_and_killable() {
    let d = tempfile::tempdir().unwrap();
    let m = marker();
    let e = engine_in(d.path(), |_| {});
    let o = e
        .execute(ExecRequest {
            command: format!("echo serving; exec sleep {m}"),
            timeout: Some(0.5),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(o.status, Status::Running);
    // On a loaded machine the echo may come after the soft timeout: the registry's status
    // gives the same still-running text once it is there.
    let o = if o.total_bytes == 0 {
        poll_status(&e, o.id, |o| o.total_bytes > 0).await
    } else {
        o
    };
    assert_eq!(
        o.text,
        format!(
            "Command is still running in terminal from '{}'.\nHere's the output so far:\nserving\n\n\nOutput so far (8B) is in artifact cmd-{}.txt; read_command_output reads it while the command runs.\nYou will be updated on the terminal status and new output in the future.",
            d.path().display(),
            o.id
        )
    );
    assert_eq!(wait_sleepers(&m, 1), 1);
    let listed = e.list();
    assert!(listed
        .iter()
        .any(|l| l.id == o.id && l.status == Status::Running));
    let t = e.terminate(o.id).await.unwrap();
    assert_eq!(t.status, Status::Terminated);
    assert_eq!(t.signal, Some(libc::SIGTERM));
    assert!(survivors(&m).is_empty());
    let done = run(&e, "true").await;
    let l = e.list();
    assert_eq!(
        l.iter().find(|x| x.id == o.id).unwrap().status,
        Status::Terminated
    );
    assert_eq!(
        l.iter().find(|x| x.id == done.id).unwrap().status,
        Status::Exited
    );
    assert!(e.terminate(12345).await.is_none());
}

#[tokio::test]
async fn hard_timeout_still_applies_after_a_soft_timeout_and_allowlist_exempts() {
    let d = tempfile::tempdir().unwrap();
    let m = marker();
    let e = engine_in(d.path(), |c| {
        c.hard_timeout = Some(Duration::from_millis(800));
        c.hard_timeout_allowlist = vec!["sleep 0.9; echo".into()];
    });
    let o = e
        .execute(ExecRequest {
            command: format!("sleep {m}"),
            timeout: Some(0.2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(o.status, Status::Running);
    let fin = e.wait(o.id).await.unwrap();
    assert_eq!(fin.status, Status::TimedOut);
    assert!(survivors(&m).is_empty());
    let o = run(&e, "sleep 0.9; echo exempt").await;
    assert_eq!(o.status, Status::Exited);
    assert!(o.text.ends_with("Output:\nexempt\n"));
    assert_eq!(
        run(&e, "  sleep 0.9; echo exempt").await.status,
        Status::Exited
    );
}

#[tokio::test]
async fn field_case_13_multibyte_characters_at_the_cut() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |_| {});
    for (ch, bytes) in [("é", 2usize), ("━", 3)] {
        let o = run(
            &e,
            &format!("i=0; while [ $i -lt 20000 ]; do printf '{ch}'; i=$((i+1)); done"),
        )
        .await;
        assert_eq!(o.total_bytes as usize, 20_000 * bytes);
        assert_eq!(artifact(&o), ch.repeat(20_000).as_bytes());
        let p = preview_of(&o.text);
        let (head, rest) = p.split_once("\n[...").unwrap();
        let (omitted, tail) = rest.split_once(" bytes omitted...]\n").unwrap();
        assert!(
            head.chars().all(|c| c.to_string() == ch) && tail.chars().all(|c| c.to_string() == ch)
        );
        assert_eq!(
            head.len() + tail.len() + omitted.parse::<usize>().unwrap(),
            20_000 * bytes
        );
    }
}

#[tokio::test]
async fn field_case_14_progress_bars_tail_ends_with_done() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |_| {});
    // Carriage-return rewrites keep only the final line (issue 13, case 5).
    let o = run(&e, "i=0; while [ $i -lt 50000 ]; do printf '%5d%%\\r' $((i % 100)); i=$((i+1)); done; echo done").await;
    assert!(o.text.ends_with("Output:\ndone\n"), "{}", o.text);
    assert_eq!(o.total_bytes, 5);
    // A line rewritten into a long output: the artifact holds what the preview counts.
    let o = run(&e, "seq 1 3000; i=0; while [ $i -lt 200 ]; do printf '%5d%%\\r' $i; i=$((i+1)); done; echo done").await;
    let p = preview_of(&o.text);
    assert!(p.ends_with("3000\ndone\n"), "{:?}", &p[p.len() - 30..]);
    assert_eq!(artifact(&o).len() as u64, o.total_bytes);
    assert!(!artifact(&o).contains(&b'\r'));
}

#[tokio::test]
async fn field_case_16_last_line_without_newline_is_kept() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |_| {});
    let o = run(&e, "printf 'a%.0s' $(seq 1 30000); printf 'END'").await;
    let a = artifact(&o);
    assert_eq!(a.len(), 30_003);
    assert!(a.ends_with(b"aEND"));
    assert!(preview_of(&o.text).ends_with("aEND"));
}

#[tokio::test]
async fn engine_read_and_search_an_artifact() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |_| {});
    let o = run(&e, "seq 1 20000").await;
    let id = o.artifact_id.clone().unwrap();
    let r = e
        .read(id.clone(), Some("^1999[0-9]$".into()), None, None)
        .await
        .unwrap();
    assert!(r.starts_with(&format!("[Command Output: {id}] (search: \"^1999[0-9]$\")\nTotal matches: 10 | Showing first 10\n\n19990 | 19990\n")), "{r}");
    let r = e.read(id.clone(), None, Some(6), Some(4)).await.unwrap();
    assert!(r.ends_with("\n\n4 | 4\n5 | 5"), "{r}");
    let err = e
        .read("cmd-1.txt".into(), None, None, None)
        .await
        .unwrap_err();
    assert!(err
        .to_string()
        .starts_with("Artifact not found: \"cmd-1.txt\"."));
}

#[tokio::test]
async fn dropping_the_engine_kills_background_commands() {
    let d = tempfile::tempdir().unwrap();
    let m = marker();
    let e = engine_in(d.path(), |_| {});
    let o = e
        .execute(ExecRequest {
            command: format!("sleep {m}"),
            timeout: Some(0.2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(o.status, Status::Running);
    assert_eq!(wait_sleepers(&m, 1), 1);
    drop(e);
    let left = survivors(&m);
    kill_leftovers(&m);
    assert!(left.is_empty());
}

#[tokio::test]
async fn execution_ids_are_unique_and_increasing() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |_| {});
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(run(&e, "true").await.id);
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

#[tokio::test]
async fn cleanup_artifacts_by_ids_then_all() {
    let d = tempfile::tempdir().unwrap();
    let e = engine_in(d.path(), |c| c.preview = PreviewSize::Small);
    let a = run(&e, "seq 1 5000").await;
    let b = run(&e, "seq 1 5000").await;
    assert_eq!(e.cleanup_artifacts(Some(&[b.id])).unwrap(), 1);
    assert!(
        !a.artifact_path.as_ref().unwrap().exists() && b.artifact_path.as_ref().unwrap().exists()
    );
    assert_eq!(e.cleanup_artifacts(None).unwrap(), 1);
    assert!(!b.artifact_path.unwrap().exists());
}

#[tokio::test]
async fn exited_background_leftovers_are_reaped_when_they_finish() {
    // With the subreaper, an orphaned `cmd &` becomes our child; when it exits it must not stay
    // a zombie for the engine's whole life (a long-lived `shofer serve`).
    let d = tempfile::tempdir().unwrap();
    let m = marker();
    let e = engine_in(d.path(), |_| {});
    let o = run(&e, &format!("sh -c 'sleep 0.6' {m} & echo started")).await;
    assert!(o.text.ends_with("Output:\nstarted\n"), "{}", o.text);
    let pids = survivors(&m);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let p = shofer_sys::proc::read(pids[0]).unwrap();
    assert_eq!(p.ppid, std::process::id() as i32, "reparented to us: {p:?}");
    let gone = Instant::now();
    while Path::new(&format!("/proc/{}", pids[0])).exists()
        && gone.elapsed() < Duration::from_secs(8)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !Path::new(&format!("/proc/{}", pids[0])).exists(),
        "left a zombie: {:?}",
        shofer_sys::proc::read(pids[0])
    );
}

/// The engine explains a sandboxed command's refused write with the sandbox's own default
/// writable set (`shofer_core::policy::default_writable`): `$TMPDIR` — the command's, here set
/// by the caller's `env` — and `/dev/shm` are writable places, not denials to explain, and the
/// note lists them. (The engine's copy of the set used to lack both.) The sandbox is a stand-in
/// that runs what follows `--`: only the engine's reading of the output is under test.
#[tokio::test]
async fn denial_hints_see_tmpdir_and_dev_shm_as_the_sandbox_does() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let fake = d.path().join("fake-sandbox");
    std::fs::write(
        &fake,
        "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done\nshift\nexec \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let wt = d.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    // Outside /tmp and the worktree: only $TMPDIR makes it writable.
    let tmpdir = format!("/var/tmp/shofer-engine-tmpdir-{}", std::process::id());
    let e = engine_in(d.path(), |c| {
        c.sandbox = Some(shofer_exec::Sandbox {
            binary: fake.clone(),
            worktree: wt.clone(),
            extra_args: Vec::new(),
        });
        c.background = shofer_exec::Background::Stop;
        c.env = vec![("TMPDIR".into(), tmpdir.clone().into())];
    });
    for inside in ["$TMPDIR/cache/x", "/dev/shm/sem.x", "/tmp/x"] {
        let o = run(
            &e,
            &format!("echo \"touch: cannot touch '{inside}': Permission denied\"; exit 1"),
        )
        .await;
        // The command's $TMPDIR is the caller's.
        assert!(
            !inside.starts_with('$') || o.text.contains(&format!("'{tmpdir}/")),
            "{}",
            o.text
        );
        assert!(!o.text.contains("Note: the"), "{inside}: {}", o.text);
    }
    let o = run(
        &e,
        "echo \"touch: cannot touch '/root/.shofer-outside/x': Permission denied\"; exit 1",
    )
    .await;
    let note = o.text.trim_end().lines().last().unwrap();
    assert!(
        note.contains(&format!(
            "only {}, /tmp, {tmpdir}, /dev/shm (and a few devices) are writable",
            wt.display()
        )),
        "{}",
        o.text
    );
}
