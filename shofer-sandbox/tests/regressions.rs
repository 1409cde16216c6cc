//! Regressions found by the containment harness (issue 5's first run); each failed before its
//! fix.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Runs `git status` on the host (outside any sandbox) in `wt`.
fn host_git_status(wt: &Path) {
    let _ = Command::new("git")
        .args(["status", "--short"])
        .current_dir(wt)
        .envs(git_env())
        .output()
        .unwrap();
}

/// The namespace backends keep the write in the run's private view (named kept private) or
/// refuse it (a read-only bind); Landlock restores at once. The callers check the host's files.
fn assert_refused_or_restored(backend: &str, out: &std::process::Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    if backend == "landlock" {
        assert!(
            err.contains(what) && err.contains("restored"),
            "{backend}: {}",
            show(out)
        );
    } else {
        assert!(
            (err.contains("Read-only file system") || err.contains("kept private"))
                && !err.contains("restored"),
            "{backend}: {}",
            show(out)
        );
    }
}

#[test]
fn a_redirected_commondir_is_restored_before_the_host_runs_git() {
    for b in backends() {
        let s = Scratch::new();
        let (repo, wt) = linked_worktree(&s);
        let pwned = s.path().join("PWNED");
        let evil = wt.join("evil");
        let script = format!(
            "mkdir -p '{e}/refs/heads' '{e}/objects' && \
             printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch {p}\"\\n' > '{e}/config' && \
             echo 'ref: refs/heads/main' > '{e}/HEAD' && \
             echo '{e}' > '{c}'",
            e = evil.display(),
            p = pwned.display(),
            c = repo.join(".git/worktrees/wt/commondir").display()
        );
        let out = Run::new(&wt).backend(b).sh(&script).output();
        assert_refused_or_restored(b, &out, "commondir");
        assert_eq!(
            std::fs::read_to_string(repo.join(".git/worktrees/wt/commondir")).unwrap(),
            "../..\n",
            "{b}"
        );
        host_git_status(&wt);
        assert!(
            !pwned.exists(),
            "{b}: the host's git ran the planted fsmonitor"
        );
    }
}

#[test]
fn a_planted_config_worktree_is_removed() {
    for b in backends() {
        let s = Scratch::new();
        let (repo, wt) = linked_worktree(&s);
        git(&repo, &["config", "extensions.worktreeConfig", "true"]);
        let pwned = s.path().join("PWNED2");
        let cfg = repo.join(".git/worktrees/wt/config.worktree");
        let out = Run::new(&wt)
            .backend(b)
            .sh(&format!(
                "printf '[core]\\n\\tfsmonitor = \"touch {}\"\\n' > '{}'",
                pwned.display(),
                cfg.display()
            ))
            .output();
        assert_refused_or_restored(b, &out, "config.worktree");
        assert!(!cfg.exists(), "{b}");
        host_git_status(&wt);
        assert!(
            !pwned.exists(),
            "{b}: the host's git ran the planted fsmonitor"
        );
    }
}

#[test]
fn a_main_worktrees_hooks_and_config_are_read_only_or_restored() {
    for b in backends() {
        let s = Scratch::new();
        let wt = s.path().join("main");
        std::fs::create_dir(&wt).unwrap();
        git(&wt, &["init", "-q", "-b", "main"]);
        std::fs::create_dir_all(wt.join(".git/hooks")).unwrap();
        let config = std::fs::read(wt.join(".git/config")).unwrap();
        let pwned = s.path().join("PWNED3");
        let out = Run::new(&wt)
            .backend(b)
            .sh(&format!(
                "printf '#!/bin/sh\\ntouch {p}\\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout && \
                 git config core.fsmonitor 'touch {p}'",
                p = pwned.display()
            ))
            .output();
        assert_refused_or_restored(b, &out, "hooks");
        assert_eq!(
            std::fs::read(wt.join(".git/config")).unwrap(),
            config,
            "{b}"
        );
        assert!(!wt.join(".git/hooks/post-checkout").exists(), "{b}");
        host_git_status(&wt);
        assert!(!pwned.exists(), "{b}");
    }
}

/// One run (with `plant_args`) links `link` to `target`; the next, given `--allow-write
/// link`, must be refused (125, the symlink named) and `target` stay untouched.
fn assert_planted_allow_write_refused(wt: &Path, plant_args: &[&Path], link: &Path, target: &Path) {
    let mut plant = Run::new(wt);
    for a in plant_args {
        plant = plant.arg("--allow-write").arg(a);
    }
    let out = plant
        .args(["--", "ln", "-s"])
        .arg(target)
        .arg(link)
        .output();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = Run::new(wt)
        .arg("--allow-write")
        .arg(link)
        .args(["--", "touch"])
        .arg(target.join("x"))
        .output();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("through a symlink"),
        "{}",
        show(&out)
    );
    assert!(!target.join("x").exists());
}

/// Scratch directories `names` under a new [`Scratch`] (kept alive by the caller).
fn scratch_dirs<const N: usize>(s: &Scratch, names: [&str; N]) -> [std::path::PathBuf; N] {
    names.map(|n| {
        let d = s.path().join(n);
        std::fs::create_dir(&d).unwrap();
        d
    })
}

#[test]
fn allow_write_through_a_symlink_planted_in_the_worktree_is_refused() {
    let s = Scratch::new();
    let [wt, outside] = scratch_dirs(&s, ["wt", "outside"]);
    assert_planted_allow_write_refused(&wt, &[], &wt.join("cache"), &outside);
    // A real directory inside the worktree is still fine (and redundant).
    std::fs::create_dir(wt.join("real")).unwrap();
    let out = Run::new(&wt)
        .arg("--allow-write")
        .arg(wt.join("real"))
        .args(["--", "true"])
        .output();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
}

/// The same through /tmp, which every run may write: one run replaces a directory the user
/// allowed (`--allow-write /tmp/cache`, or a policy file's `allow_write`) with a symlink to
/// the user's home, and the next run would be given the home.
#[test]
fn allow_write_through_a_symlink_planted_in_tmp_is_refused() {
    let s = Scratch::new();
    let [wt, outside] = scratch_dirs(&s, ["wt", "outside"]);
    let tmp = tempfile::Builder::new()
        .prefix("shofer-allow-write-")
        .tempdir_in("/tmp")
        .unwrap();
    assert_planted_allow_write_refused(&wt, &[], &tmp.path().join("cache"), &outside);
}

/// And through every other place a command can write: another `--allow-write` directory
/// (one run links `shared/out` to a directory of the user's; the next is given
/// `--allow-write shared/out`).
#[test]
fn allow_write_through_a_symlink_in_another_allowed_directory_is_refused() {
    let s = Scratch::new();
    let [wt, shared, victim] = scratch_dirs(&s, ["wt", "shared", "victim"]);
    assert_planted_allow_write_refused(&wt, &[&shared], &shared.join("out"), &victim);
}

/// A command that uses up the user's namespaces (each held open by a descriptor of a process
/// it leaves behind) must not make the next runs fall back to Landlock alone: with the limit
/// above 0, ENOSPC refuses the run. Made here inside a user namespace of the test's own whose
/// limit is 1 and taken.
#[test]
fn used_up_user_namespaces_refuse_the_run_instead_of_falling_back() {
    if Command::new("unshare")
        .args(["-Ur", "true"])
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        return skip("used_up_user_namespaces", "unshare -Ur does not work here");
    }
    let s = Scratch::new();
    let wt = s.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    let script = format!(
        "echo 1 > /proc/sys/user/max_user_namespaces && unshare -U sleep 5 & sleep 0.5; \
         cd {wt} && {sb} {wt} -c 'echo RAN'; echo rc=$?",
        wt = wt.display(),
        sb = SANDBOX
    );
    let out = Command::new("unshare")
        .args(["-Ur", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains("RAN"), "{stdout}{stderr}");
    assert!(stdout.contains("rc=125"), "{stdout}{stderr}");
    assert!(stderr.contains("used up"), "{stderr}");
}

#[test]
fn bwrap_keeps_proc_sys_read_only_for_root() {
    if skip_unless_root("bwrap_keeps_proc_sys_read_only_for_root") || !backends().contains(&"bwrap")
    {
        return;
    }
    let s = Scratch::new();
    let out = Run::new(&s.path())
        .backend("bwrap")
        .sh("exec 3>>/proc/sys/kernel/core_pattern && echo OPENED")
        .output();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("OPENED"),
        "{}",
        show(&out)
    );
}

#[test]
fn namespace_backends_at_landlock_abi_1_keep_renames_working_or_refuse() {
    if landlock_abi() < 1 || !backends().contains(&"userns") {
        skip(
            "namespace_backends_at_landlock_abi_1_keep_renames_working_or_refuse",
            "needs Landlock and the userns backend",
        );
        return;
    }
    let s = Scratch::new();
    let rename = "mkdir d && touch f && /usr/bin/python3 -c 'import os; os.rename(\"f\", \"d/f\")'";
    let out = Run::new(&s.path())
        .backend("userns")
        .args(["--max-abi", "1"])
        .sh(rename)
        .output();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = Run::new(&s.path())
        .backend("layered")
        .args(["--max-abi", "1", "--", "true"])
        .output();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rename"));
}

/// Below a PID namespace whose session leader lives outside it (`unshare --pid --fork`, a
/// container whose init started no session), getsid(2) answers 0. The Landlock guardian took
/// that for a pid and aborted (CI runs in such a namespace): every backend must run there.
#[test]
fn every_backend_runs_where_the_session_leader_is_outside_the_pid_namespace() {
    let test = "every_backend_runs_where_the_session_leader_is_outside_the_pid_namespace";
    if skip_unless_root(test) {
        return;
    }
    let s = Scratch::new();
    for b in backends() {
        let out = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", SANDBOX, "--backend", b])
            .arg(s.path())
            .args([
                "--",
                "sh",
                "-c",
                "echo sid=$(cut -d' ' -f6 /proc/self/stat)",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("sid="),
            "{b}: {}",
            show(&out)
        );
    }
}

/// A caller that ignores SIGCHLD (SIG_IGN survives exec) made the kernel reap the sandbox's
/// children itself: the Landlock guardian waited for a SIGCHLD that never came, for ever.
#[test]
fn every_backend_ends_when_the_caller_ignores_sigchld() {
    use std::os::unix::process::CommandExt;
    let s = Scratch::new();
    for b in backends() {
        let mut cmd = Command::new(SANDBOX);
        cmd.args(["--backend", b])
            .arg(s.path())
            .args(["--", "true"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // Safety: signal(2) is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGCHLD, libc::SIG_IGN);
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{b}: hung or failed with SIGCHLD ignored"
        );
    }
}

/// A fresh attack (2026-12-07): `$TMPDIR` in a place runs write (here the worktree), swapped by
/// one run for a symlink to a directory outside (a Landlock run can: no mount point there),
/// was writable through that symlink in the next run on every backend: the set followed it.
/// A `$TMPDIR` with a symlink on its path stays out of the writable set, with a note, as a
/// symlinked `--allow-write` is refused.
#[test]
fn a_tmpdir_swapped_for_a_symlink_does_not_hand_over_its_target() {
    for b in backends() {
        let s = Scratch::new();
        let wt = s.path().join("wt");
        let victim = s.path().join("victim");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::create_dir(&victim).unwrap();
        let tmpdir = wt.join(".tmp");
        // What the earlier run left.
        std::os::unix::fs::symlink(&victim, &tmpdir).unwrap();
        let out = Run::new(&wt)
            .backend(b)
            .env("TMPDIR", &tmpdir)
            .sh("echo x > \"$TMPDIR/pwned\"")
            .output();
        assert!(
            !victim.join("pwned").exists(),
            "{b}: written through the planted symlink: {}",
            show(&out)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("$TMPDIR") && err.contains("through a symlink"),
            "{b}: not said: {}",
            show(&out)
        );
    }
}

/// The same attack on the worktree (two fresh attacks): a worktree named through a symlink an
/// earlier run could swap — under `/tmp`, through the user's own link into `/tmp` (a chain),
/// behind a `..`, in another worktree — would make the symlink's target the worktree. Any
/// symlink on the worktree's path is refused, naming the target, as for `--allow-write`; the
/// target named itself works.
#[test]
fn a_worktree_named_through_a_symlink_is_refused() {
    for b in backends() {
        let s = Scratch::new();
        let victim = s.path().join("victim");
        std::fs::create_dir_all(victim.join("sub")).unwrap();
        let tmp = Scratch::new_in("/tmp");
        let in_tmp = tmp.path().join("wt");
        std::os::unix::fs::symlink(&victim, &in_tmp).unwrap();
        // The user's own link to the one in /tmp.
        let chain = s.path().join("own");
        std::os::unix::fs::symlink(&in_tmp, &chain).unwrap();
        let sub = tmp.path().join("sub");
        std::os::unix::fs::symlink(victim.join("sub"), &sub).unwrap();
        for named in [in_tmp.clone(), chain.clone(), sub.join("..")] {
            let out = Run::new(&named).backend(b).sh("echo x > pwned").output();
            assert_eq!(
                out.status.code(),
                Some(125),
                "{b} {named:?}: {}",
                show(&out)
            );
            assert!(
                !victim.join("pwned").exists(),
                "{b} {named:?}: {}",
                show(&out)
            );
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("through a symlink"),
                "{b} {named:?}: {}",
                show(&out)
            );
        }
        let out = Run::new(&victim).backend(b).sh("echo x > mine").output();
        assert!(out.status.success(), "{b}: {}", show(&out));
        assert!(victim.join("mine").exists(), "{b}");
    }
}

/// Paths that are not UTF-8 — the worktree, the home, a name the command makes — neither stop
/// a namespace backend's mounts nor the `--report` record. Before, the writable set went
/// back to read-write through a lossy string (exit 125 on layered and userns), and every
/// backend's report panicked on such a path (exit 134).
#[test]
fn paths_that_are_not_utf8_run_hide_and_are_reported_on_every_backend() {
    use std::os::unix::ffi::OsStrExt;
    let name = |n: &[u8]| std::ffi::OsStr::from_bytes(n).to_os_string();
    let uids = [None].into_iter().chain(is_root().then_some(Some(UNPRIV)));
    for uid in uids {
        for b in backends() {
            let s = Scratch::new();
            let wt = s.path().join(name(b"wt\xff"));
            let home = s.path().join(name(b"home\xfe"));
            std::fs::create_dir_all(&wt).unwrap();
            std::fs::create_dir_all(home.join(".ssh")).unwrap();
            std::fs::write(home.join(".ssh/id"), "key").unwrap();
            git(&wt, &["init", "-q"]);
            if let Some(u) = uid {
                s.chown_all(u);
            }
            let report = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
            let mut r = Run::new(&wt)
                .backend(b)
                .arg("--report")
                .arg("9")
                .fd9(report.reopen().unwrap())
                .env("HOME", &home)
                .env_remove("XDG_STATE_HOME");
            if let Some(u) = uid {
                r = r.with_uid(u);
            }
            let out = r
                .args(["--", "sh"])
                .sh("printf made > \"$(printf 'f\\375')\" && ! cat ~/.ssh/id")
                .output();
            assert!(out.status.success(), "{b} {uid:?}: {}", show(&out));
            assert_eq!(
                std::fs::read(wt.join(name(b"f\xfd"))).unwrap(),
                b"made",
                "{b} {uid:?}"
            );
            let text = std::fs::read_to_string(report.path()).unwrap();
            let record: serde_json::Value =
                serde_json::from_str(text.lines().next().unwrap()).unwrap();
            assert_eq!(record["worktree"], *wt.to_string_lossy(), "{b} {uid:?}");
            let ssh = home.join(".ssh");
            assert!(
                record["secrets"]["hidden"]
                    .as_array()
                    .unwrap()
                    .contains(&serde_json::json!(ssh.to_string_lossy())),
                "{b} {uid:?}: {}",
                record["secrets"]
            );
        }
    }
}

/// The sandbox run with `args` (split by the shell) under `ulimit -n limit`.
fn under_nofile(limit: u32, args: &str) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {limit} && exec {SANDBOX} {args}"))
        .output()
        .unwrap()
}

/// A descriptor limit too low for any run (`ulimit -n 24`) is refused up front with exit 125
/// and one line naming it. Before, the git guard's snapshot panicked (exit 134), and a few
/// descriptors more made `auto` give up the namespaces ("failed at mount: EMFILE").
#[test]
fn a_descriptor_limit_too_low_is_refused_with_its_number() {
    let s = Scratch::new();
    let wt = s.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    git(&wt, &["init", "-q"]);
    for b in backends() {
        let out = under_nofile(24, &format!("--backend {b} {} -- true", wt.display()));
        assert_eq!(out.status.code(), Some(125), "{b}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("the descriptor limit (ulimit -n) is 24: a run needs at least 256"),
            "{b}: {}",
            show(&out)
        );
    }
}

/// Running out of descriptors at any step of a run never changes the repository: under
/// `ulimit -n 256`, runs with ever more `--allow-write` paths fail at one step after another
/// (exit 125), and the `.git` files (hooks, `info/exclude`, no `commondir` left behind, no
/// `.shofer-removed-*`) stay as they were. Before, a run that failed after the git guard's
/// snapshot "restored" hooks and `info/exclude` it could not read by moving them aside, and
/// left a placeholder `commondir`.
#[test]
fn running_out_of_descriptors_never_changes_the_repository() {
    let s = Scratch::new();
    let wt = s.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    git(&wt, &["init", "-q"]);
    git(&wt, &["commit", "-q", "--allow-empty", "-m", "x"]);
    git(&wt, &["worktree", "add", "-q", "../wt2"]);
    let dirs: Vec<_> = (0..260)
        .map(|i| s.path().join(format!("aw/d{i}")))
        .collect();
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    let listing = |dir: &Path| {
        let out = Command::new("sh")
            .arg("-c")
            .arg("find . -path ./objects -prune -o -path ./logs -prune -o -print | sort | \
                  while read -r f; do if [ -f \"$f\" ]; then echo \"$f $(md5sum < \"$f\")\"; else echo \"$f\"; fi; done")
            .current_dir(dir)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = listing(&wt.join(".git"));
    assert!(
        before.contains("./hooks/") && before.contains("./info/exclude"),
        "{before}"
    );
    for b in backends() {
        let mut refused = 0;
        for n in (120..=260).step_by(4) {
            let args: String = dirs[..n]
                .iter()
                .map(|d| format!(" --allow-write {}", d.display()))
                .collect();
            let out = under_nofile(
                256,
                &format!("--backend {b}{args} {} -- echo INSIDE", wt.display()),
            );
            let ran = String::from_utf8_lossy(&out.stdout).contains("INSIDE");
            if !ran {
                refused += 1;
                assert_eq!(out.status.code(), Some(125), "{b} {n}: {}", show(&out));
            }
            assert_eq!(
                listing(&wt.join(".git")),
                before,
                "{b} with {n} --allow-write paths changed the repository: {}",
                show(&out)
            );
        }
        assert!(refused > 0, "{b}: no run ran out of descriptors");
    }
}
