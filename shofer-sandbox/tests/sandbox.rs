//! End-to-end tests of the `shofer-sandbox` binary: real Landlock, real git worktrees, real
//! processes. A test whose prerequisite is missing (root, python3, a Landlock ABI) prints `SKIP`,
//! or fails under `CI` (see `common::skip`).

mod common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn scratch_with_wt() -> (Scratch, std::path::PathBuf) {
    let s = Scratch::new();
    let wt = s.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    (s, wt)
}

#[test]
fn writes_inside_tmp_and_devices_succeed_and_outside_fail() {
    for b in backends() {
        let (s, wt) = scratch_with_wt();
        let outside = s.path().join("outside");
        let out = Run::new(&wt).backend(b)
            .sh(&format!(
                "echo in > inside && echo t > /tmp/shofer-test-$$ && rm /tmp/shofer-test-$$ \
                 && echo x > /dev/null && head -c1 /dev/zero >/dev/null && mkdir -p a/b && ln -s a l \
                 && echo no > '{}'",
                outside.display()
            ))
            .output();
        assert_ne!(out.status.code(), Some(0), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("Permission denied") || err.contains("Read-only file system"),
            "{b}: {err}"
        );
        assert_eq!(std::fs::read_to_string(wt.join("inside")).unwrap(), "in\n");
        assert!(wt.join("a/b").is_dir() && wt.join("l").is_symlink());
        assert!(!outside.exists());
    }
}

#[test]
fn truncate_and_hard_link_of_an_outside_file_are_denied() {
    for b in backends() {
        let (s, wt) = scratch_with_wt();
        let outside = s.path().join("victim");
        std::fs::write(&outside, "keep me\n").unwrap();
        let v = outside.display();
        for script in [
            format!("truncate -s 0 '{v}'"),
            format!(": > '{v}'"),
            format!("ln '{v}' hard"),
            format!("mv '{v}' stolen"),
            format!("rm -f '{v}'"),
            format!("ln -s x '{}/sym'", s.path().display()),
        ] {
            let out = Run::new(&wt).backend(b).sh(&script).output();
            assert_ne!(out.status.code(), Some(0), "{script}: {}", show(&out));
        }
        assert_eq!(
            std::fs::read_to_string(&outside).unwrap(),
            "keep me\n",
            "{b}"
        );
        // A copy (mv falls back to one on EXDEV) is a read, which is allowed; a second link
        // to the outside inode would be a write path to it.
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&outside).unwrap().nlink(), 1, "{b}");
    }
}

#[test]
fn renames_across_directories_inside_the_worktree_work() {
    for b in backends() {
        // Field case 8.
        let (_s, wt) = scratch_with_wt();
        let out = Run::new(&wt)
            .backend(b)
            .sh("mkdir d && touch f && mv f d/ && mkdir e && mv d e/ && ln e/d/f g && echo ok")
            .output();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        assert!(wt.join("e/d/f").exists() && wt.join("g").exists());
    }
}

#[test]
fn python_multiprocessing_lock_works_via_dev_shm() {
    for b in backends() {
        // Field case 1.
        let (_s, wt) = scratch_with_wt();
        if !Path::new("/usr/bin/python3").exists() {
            skip(
                "python_multiprocessing_lock_works_via_dev_shm",
                "no /usr/bin/python3",
            );
            return;
        }
        let out = Run::new(&wt)
            .backend(b)
            .args([
                "--",
                "/usr/bin/python3",
                "-c",
                "import multiprocessing as m; m.Lock(); print('ok')",
            ])
            .output();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    }
}

#[test]
fn git_works_in_a_linked_worktree_and_the_repository_stays_as_it_was() {
    for b in backends() {
        // Field case 2.
        let s = Scratch::new();
        let (repo, wt) = linked_worktree(&s);
        let config_before = std::fs::read(repo.join(".git/config")).unwrap();
        let description_before = std::fs::read(repo.join(".git/description")).ok();
        let out = Run::new(&wt).backend(b)
            .sh("echo x > f && git add f && git commit -qm t && git checkout -q -b t2 && git stash list && git log --oneline -1 && git reflog -1")
            .output();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains(" t"));
        // packed-refs is writable on the namespace backends, by design (git deletes refs
        // through packed-refs.lock); everything else of the common dir stays read-only.
        let packed_refs = if b == "landlock" {
            Some("echo x >> ../repo/.git/packed-refs")
        } else {
            None
        };
        for attack in [
            "git config core.fsmonitor 'touch /var/tmp/pwned'",
            "echo evil > ../repo/.git/hooks/pre-commit",
            "mkdir ../repo/.git/info/x",
            "echo x > ../repo/.git/config",
            "echo x > ../repo/.git/description",
            "mkdir ../repo/.git/worktrees/evil",
        ]
        .into_iter()
        .chain(packed_refs)
        {
            let out = Run::new(&wt).backend(b).sh(attack).output();
            // The namespace backends: the write lands in the run's private view (named kept
            // private); Landlock refuses it. Either way the repository stays as it was.
            if b == "landlock" {
                assert_ne!(out.status.code(), Some(0), "{attack}: {}", show(&out));
            }
        }
        assert_eq!(
            std::fs::read(repo.join(".git/config")).unwrap(),
            config_before
        );
        assert!(!repo.join(".git/hooks/pre-commit").exists());
        assert!(!repo.join(".git/info/x").exists());
        assert!(!repo.join(".git/worktrees/evil").exists());
        assert_eq!(
            std::fs::read(repo.join(".git/description")).ok(),
            description_before
        );
    }
}

#[test]
fn a_tampered_dot_git_yields_no_extra_reach() {
    for b in backends() {
        let s = Scratch::new();
        let (repo, wt) = linked_worktree(&s);
        // The sandbox cannot rewrite .git any more (read-only bind, or restored at once)...
        let tamper = format!("printf 'gitdir: {}\\n' > .git", repo.join(".git").display());
        let _ = Run::new(&wt).backend(b).sh(&tamper).output();
        assert!(std::fs::read_to_string(wt.join(".git"))
            .unwrap()
            .contains("worktrees/wt"));
        // ...but a layout tampered with some other way (here: on the host) gives no reach:
        // on the next run the common dir must still be read-only.
        std::fs::write(
            wt.join(".git"),
            format!("gitdir: {}\n", repo.join(".git").display()),
        )
        .unwrap();
        let out = Run::new(&wt)
            .backend(b)
            .sh("echo x > ../repo/.git/config.evil")
            .output();
        assert_ne!(out.status.code(), Some(0), "{}", show(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("git metadata not made writable"));
        assert!(!repo.join(".git/config.evil").exists());
        // A gitdir whose back-link is forged inside the worktree is rejected too.
        std::fs::create_dir_all(wt.join("fake/worktrees/x")).unwrap();
        std::fs::write(
            wt.join("fake/worktrees/x/gitdir"),
            format!("{}/.git\n", wt.display()),
        )
        .unwrap();
        std::fs::write(wt.join(".git"), "gitdir: fake/worktrees/x\n").unwrap();
        let out = Run::new(&wt)
            .backend(b)
            .sh("echo x > ../repo/.git/objects/evil")
            .output();
        assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    }
}

#[test]
fn three_hundred_linked_worktrees_and_a_thousand_allow_write_paths() {
    for b in backends() {
        // Field case 9.
        let s = Scratch::new();
        let (repo, wt) = linked_worktree(&s);
        for i in 0..300 {
            git(
                &repo,
                &["worktree", "add", "-q", "--detach", &format!("../w{i}")],
            );
        }
        let extra = s.path().join("extra");
        let mut run = Run::new(&wt).backend(b);
        for i in 0..1000 {
            let p = extra.join(format!("dir {i}"));
            std::fs::create_dir_all(&p).unwrap();
            run = run.arg("--allow-write").arg(p);
        }
        let out = run
            .sh("echo y > f && git add f && git commit -qm y && echo z > '../extra/dir 999/z'")
            .output();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        assert!(extra.join("dir 999/z").exists());
    }
}

#[test]
fn exit_codes_follow_the_contract() {
    for b in backends() {
        let (s, wt) = scratch_with_wt();
        let code = |run: Run| run.output().status.code();
        assert_eq!(code(Run::new(&wt).backend(b).sh("exit 3")), Some(3));
        // The sandbox dies by the command's signal (a shell sees 128+N); bubblewrap turns a
        // death by signal N into exit status 128+N, which is passed on.
        for (script, expected, sig) in [("kill -9 $$", 137, 9), ("kill -TERM $$", 143, 15)] {
            let out = Run::new(&wt).backend(b).sh(script).output();
            use std::os::unix::process::ExitStatusExt;
            if b == "bwrap" {
                assert_eq!(out.status.code(), Some(expected), "{b}: {script}");
            } else {
                assert_eq!(out.status.signal(), Some(sig), "{b}: {script}");
            }
        }

        assert_eq!(
            code(Run::new(&wt).backend(b).args(["--", "no-such-command-xyz"])),
            Some(127)
        );
        let plain = s.path().join("plain");
        std::fs::write(&plain, "echo hi\n").unwrap();
        assert_eq!(
            code(Run::new(&wt).backend(b).arg("--").arg(&plain)),
            Some(126)
        );
        assert_eq!(code(Run::new(&wt).backend(b).args(["--", "/"])), Some(126));
        let missing = s.path().join("missing");
        assert_eq!(code(Run::new(&missing).backend(b).arg("true")), Some(125));
        let file = s.path().join("file");
        std::fs::write(&file, "").unwrap();
        let out = Run::new(&file).backend(b).arg("true").output();
        assert_eq!(out.status.code(), Some(125));
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("shofer-sandbox: worktree"));
    }
}

#[test]
fn bad_input_is_refused_with_125_and_a_named_reason() {
    let (_s, wt) = scratch_with_wt();
    for (args, needle) in [
        (vec![], "missing <WORKTREE>"),
        (vec![wt.to_str().unwrap()], "missing <COMMAND>"),
        (vec![wt.to_str().unwrap(), "--"], "missing <COMMAND>"),
        (vec![wt.to_str().unwrap(), "--", ""], "empty string"),
        (
            vec!["--backend", "nope", wt.to_str().unwrap(), "true"],
            "--backend nope",
        ),
        (
            vec!["--pass-fd", "77", wt.to_str().unwrap(), "true"],
            "77 is not open",
        ),
        (
            vec![
                "--allow-write",
                "/no/such/dir",
                wt.to_str().unwrap(),
                "true",
            ],
            "--allow-write '/no/such/dir'",
        ),
    ] {
        let out = Command::new(SANDBOX).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("shofer-sandbox: "), "{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn paths_with_spaces_unicode_and_newlines_work() {
    for b in backends() {
        let s = Scratch::new();
        let wt = s.path().join("a b ü\nnew line");
        let extra = s.path().join("ex tra\tü");
        std::fs::create_dir(&wt).unwrap();
        std::fs::create_dir(&extra).unwrap();
        let out = Run::new(&wt)
            .backend(b)
            .arg("--allow-write")
            .arg(&extra)
            .args([
                "--",
                "sh",
                "-c",
                "echo 1 > \"$1/f\" && echo 2 > \"$2/g\"",
                "sh",
            ])
            .arg(&wt)
            .arg(&extra)
            .output();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        assert!(wt.join("f").exists() && extra.join("g").exists());
    }
}

#[test]
fn inherited_descriptors_are_closed_unless_passed() {
    let (s, wt) = scratch_with_wt();
    let target = s.path().join("leak");
    std::fs::write(&target, "").unwrap();
    let t = target.display();
    let w = wt.display();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 7>>'{t}'; exec '{SANDBOX}' '{w}' -c 'echo pwned >&7'"
        ))
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 7>>'{t}'; exec '{SANDBOX}' --pass-fd 7 '{w}' -c 'echo passed >&7'"
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "passed\n");
}

#[test]
fn an_inherited_directory_fd_cannot_create_outside() {
    let (s, wt) = scratch_with_wt();
    let dir = s.path().join("dir");
    std::fs::create_dir(&dir).unwrap();
    if !Path::new("/usr/bin/python3").exists() {
        skip(
            "an_inherited_directory_fd_cannot_create_outside",
            "no /usr/bin/python3",
        );
        return;
    }
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 8<'{}'; exec '{SANDBOX}' --pass-fd 8 '{}' -- /usr/bin/python3 -c \
             'import os; os.open(\"x\", os.O_CREAT|os.O_WRONLY, dir_fd=8)'",
            dir.display(),
            wt.display()
        ))
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    assert!(!dir.join("x").exists());
}

#[test]
fn signals_and_abstract_sockets_to_outside_processes_are_denied_from_abi_6() {
    let (_s, wt) = scratch_with_wt();
    if landlock_abi() < 6 || !Path::new("/usr/bin/python3").exists() {
        skip(
            "signals_and_abstract_sockets_to_outside_processes_are_denied_from_abi_6",
            "needs Landlock ABI 6 (Linux 6.12) and /usr/bin/python3",
        );
        return;
    }
    let marker = unique_sleep(1);
    let mut victim = Command::new("sleep").arg(&marker).spawn().unwrap();
    let out = Run::new(&wt)
        .sh(&format!("kill -TERM {}", victim.id()))
        .output();
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the victim was killed"
    );
    victim.kill().unwrap();
    victim.wait().unwrap();

    let name = format!("shofer-test-{}", std::process::id());
    let mut listener = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(format!(
            "import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind('\\0{name}'); s.listen(); print('ready', flush=True); s.accept()"
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 6];
    listener
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    let out = Run::new(&wt)
        .args([
            "--",
            "/usr/bin/python3",
            "-c",
            &format!("import socket; socket.socket(socket.AF_UNIX).connect('\\0{name}')"),
        ])
        .output();
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PermissionError"));
    listener.kill().unwrap();
    listener.wait().unwrap();
}

#[test]
fn no_process_is_left_after_the_command_exits() {
    for b in backends() {
        let (_s, wt) = scratch_with_wt();
        let (x, y, z) = (unique_sleep(2), unique_sleep(3), unique_sleep(4));
        let out = Run::new(&wt)
            .backend(b)
            .sh(&format!(
                "sleep {x} & setsid sleep {y} & (sh -c 'sleep {z}' &) ; echo started"
            ))
            .output();
        assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
        for m in [&x, &y, &z] {
            assert!(processes_with(m).is_empty(), "survivor sleep {m}");
        }
    }
}

#[test]
fn keep_descendants_waits_for_them() {
    for b in backends().into_iter().filter(|b| *b != "bwrap") {
        let (_s, wt) = scratch_with_wt();
        let out = Run::new(&wt)
            .backend(b)
            .arg("--keep-descendants")
            .sh("(sleep 0.3; echo late > late) & echo early")
            .output();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        assert!(wt.join("late").exists(), "the descendant was killed");
    }
}

/// Spawns the sandbox running `script`, waits until it created `ready` in the worktree.
fn spawn_ready(wt: &Path, backend: &str, script: &str) -> std::process::Child {
    let _ = std::fs::remove_file(wt.join("ready"));
    let mut child = Run::new(wt)
        .backend(backend)
        .sh(script)
        .command()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !wt.join("ready").exists() {
        assert!(Instant::now() < deadline, "the command never became ready");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the sandbox exited early"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

#[test]
fn sigint_to_the_wrapper_reaches_the_command() {
    for b in backends() {
        let (_s, wt) = scratch_with_wt();
        let mut child = spawn_ready(
            &wt,
            b,
            "trap 'echo got-int; exit 7' INT; touch ready; while :; do sleep 0.05; done",
        );
        // Safety: signalling the child we spawned and have not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let status = child.wait().unwrap();
        let mut out = String::new();
        child.stdout.unwrap().read_to_string(&mut out).unwrap();
        assert_eq!(status.code(), Some(7), "{b}: {out}");
        assert!(out.contains("got-int"), "{b}");
    }
}

#[test]
fn sigterm_to_the_wrapper_kills_the_whole_tree() {
    for backend in backends() {
        let (_s, wt) = scratch_with_wt();
        let (a, b) = (unique_sleep(5), unique_sleep(6));
        let mut child = spawn_ready(
        &wt,
        backend,
        &format!("trap '' TERM; setsid sleep {a} & (sleep {b} &); touch ready; while :; do sleep 0.05; done"),
    );
        // Safety: as above.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        // Told to stop by SIGTERM, the sandbox ends the tree and dies by that signal.
        assert_eq!(
            status.signal(),
            Some(libc::SIGTERM),
            "{backend}: {status:?}"
        );
        for m in [&a, &b] {
            assert!(
                processes_with(m).is_empty(),
                "{backend}: survivor sleep {m}"
            );
        }
    }
}

#[test]
fn probe_json_reports_every_protection_and_never_hides_a_limit() {
    let out = Command::new(SANDBOX)
        .args(["--probe", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "write_outside",
        "truncate",
        "rename_link_across",
        "chmod_chown_utime_xattr",
        "signals_out",
        "abstract_unix_sockets",
        "pathname_unix_sockets",
        "tcp",
        "tiocsti",
        "inherited_fds",
    ] {
        assert!(v["protections"].get(key).is_some(), "{key} missing: {v}");
    }
    // Landlock alone does not mediate metadata changes: its probe must say so.
    let out = Command::new(SANDBOX)
        .args(["--probe", "--json", "--backend", "landlock"])
        .output()
        .unwrap();
    let landlock: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    if landlock["backend"] == "landlock" {
        assert_eq!(
            landlock["protections"]["chmod_chown_utime_xattr"]["enforced"],
            false
        );
    }
    // Below ABI 9 the seccomp gate enforces it (tests/unix_gate.rs proves it does).
    let by = if v["landlock"]["abi"].as_u64().unwrap() < 9 {
        "seccomp gate"
    } else {
        "landlock"
    };
    assert_eq!(v["protections"]["pathname_unix_sockets"]["by"], by, "{v}");
}

#[test]
fn report_fd_describes_the_run() {
    let s = Scratch::new();
    let (_repo, wt) = linked_worktree(&s);
    let report = s.path().join("report.json");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 9>'{}'; exec '{SANDBOX}' --report 9 '{}' -c 'ls /proc/self/fd/9 2>/dev/null && exit 1; exit 0'",
            report.display(),
            wt.display()
        ))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "the report fd leaked: {}",
        show(&out)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["worktree"], wt.to_str().unwrap());
    assert_eq!(v["git"]["layout"], "linked");
    let writable: Vec<&str> = v["writable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert!(writable.iter().any(|p| p.ends_with("/repo/.git/objects")));
    assert!(!writable.iter().any(|p| p.ends_with("/repo/.git")));
}

#[test]
fn max_abi_below_3_is_refused_unless_degraded_is_allowed() {
    let (_s, wt) = scratch_with_wt();
    if landlock_abi() < 3 {
        skip(
            "max_abi_below_3_is_refused_unless_degraded_is_allowed",
            "the kernel itself is below Landlock ABI 3 (Linux 6.2)",
        );
        return;
    }
    let out = Run::new(&wt)
        .args(["--max-abi", "2", "--backend", "landlock", "--", "true"])
        .output();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("truncate"));
    let out = Run::new(&wt)
        .args([
            "--max-abi",
            "1",
            "--backend",
            "landlock",
            "--allow-degraded",
        ])
        .sh("mkdir d && touch f && /usr/bin/python3 -c 'import os; os.rename(\"f\", \"d/f\")'")
        .output();
    // (mv would hide it by falling back to copy and unlink on EXDEV.)
    assert_ne!(
        out.status.code(),
        Some(0),
        "ABI 1 cannot rename across directories"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("degraded"));
}

#[test]
fn root_capabilities_are_dropped() {
    for b in backends() {
        if skip_unless_root("root_capabilities_are_dropped") {
            return;
        }
        let (s, wt) = scratch_with_wt();
        let owned = s.path().join("owned");
        std::fs::write(&owned, "").unwrap();
        let out = Run::new(&wt)
            .backend(b)
            .sh("grep -E '^(Cap(Prm|Eff|Bnd|Amb|Inh)|NoNewPrivs)' /proc/self/status")
            .output();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("NoNewPrivs:\t1"), "{b}: {text}");
        for line in text.lines().filter(|l| l.starts_with("Cap")) {
            // bubblewrap clears every set but the bounding one; no_new_privs keeps an exec
            // from regaining anything from it (docs/ENFORCEMENT.md, backends).
            if b == "bwrap" && line.starts_with("CapBnd") {
                continue;
            }
            assert!(line.ends_with("0000000000000000"), "{b}: {line}");
        }
        let out = Run::new(&wt)
            .backend(b)
            .arg("--keep-caps")
            .sh("grep CapEff /proc/self/status")
            .output();
        assert!(!String::from_utf8_lossy(&out.stdout).contains("0000000000000000"));
    }
}

#[test]
fn unprivileged_runs_confine_writes_and_keep_exit_codes() {
    for b in backends() {
        if skip_unless_root("unprivileged_runs_confine_writes_and_keep_exit_codes") {
            return;
        }
        let (s, wt) = scratch_with_wt();
        s.chown_all(UNPRIV);
        let outside = s.path().join("outside");
        let out = Run::new(&wt)
            .backend(b)
            .with_uid(UNPRIV)
            .sh("echo in > inside")
            .output();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        let out = Run::new(&wt)
            .backend(b)
            .with_uid(UNPRIV)
            .sh(&format!("echo no > '{}'", outside.display()))
            .output();
        assert_ne!(out.status.code(), Some(0));
        assert!(!outside.exists());
        let out = Run::new(&wt)
            .backend(b)
            .with_uid(UNPRIV)
            .sh("exit 9")
            .output();
        assert_eq!(out.status.code(), Some(9));
        let out = Run::new(&wt)
            .backend(b)
            .with_uid(UNPRIV)
            .args(["--", "nope-xyz"])
            .output();
        assert_eq!(out.status.code(), Some(127));
    }
}

#[test]
fn net_deny_refuses_tcp_and_net_allow_does_not() {
    if !Path::new("/usr/bin/python3").exists() {
        skip(
            "net_deny_refuses_tcp_and_net_allow_does_not",
            "no /usr/bin/python3",
        );
        return;
    }
    let mut listener = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg("import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8); print(s.getsockname()[1], flush=True)\nwhile True: s.accept()[0].close()")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    {
        use std::io::BufRead;
        let mut reader = std::io::BufReader::new(listener.stdout.as_mut().unwrap());
        reader.read_line(&mut port).unwrap();
    }
    let port = port.trim().to_string();
    let connect = format!(
        "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')"
    );
    let abi = landlock_abi();
    for b in backends() {
        if b == "landlock" && abi < 4 {
            skip(
                "net_deny_refuses_tcp_and_net_allow_does_not under landlock",
                &format!("Landlock ABI {abi} < 4 (TCP rules arrive in Linux 6.7)"),
            );
            continue;
        }
        let (_s, wt) = scratch_with_wt();
        let denied = Run::new(&wt)
            .backend(b)
            .args(["--net", "deny", "--", "/usr/bin/python3", "-c", &connect])
            .output();
        assert_ne!(denied.status.code(), Some(0), "{b}: {}", show(&denied));
        if b != "userns" && b != "layered" && b != "bwrap" {
            // Landlock's refusal; in a new network namespace the loopback is simply absent.
            assert!(
                String::from_utf8_lossy(&denied.stderr).contains("PermissionError"),
                "{b}: {}",
                show(&denied)
            );
        }
        let allowed = Run::new(&wt)
            .backend(b)
            .args(["--", "/usr/bin/python3", "-c", &connect])
            .output();
        assert_eq!(allowed.status.code(), Some(0), "{b}: {}", show(&allowed));
    }
    listener.kill().unwrap();
    listener.wait().unwrap();
}

#[test]
fn help_and_version_exit_zero() {
    for flag in ["--help", "-h", "--version", "-V"] {
        let out = Command::new(SANDBOX).arg(flag).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert!(!out.stdout.is_empty());
    }
}
