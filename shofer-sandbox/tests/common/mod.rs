//! Shared helpers for the shofer-sandbox integration tests: scratch trees outside `/tmp`
//! (which is writable by policy and would hide failures), real linked git worktrees, and
//! running the real binary, optionally as an unprivileged uid (from a [`ReachableCopy`], so a
//! build tree that uid cannot enter does not matter), and [`skip`] for a missing prerequisite.
#![allow(dead_code)]

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The binary under test.
pub const SANDBOX: &str = env!("CARGO_BIN_EXE_shofer-sandbox");

/// The unprivileged uid/gid used for unprivileged runs (nobody on Debian).
pub const UNPRIV: u32 = 65534;

/// Whether the tests run as root (CI does).
pub fn is_root() -> bool {
    // Safety: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this is a CI run: `CI` is set and not empty (CI sets `CI=true`).
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// A prerequisite of `test` is missing here (`why` says which). Outside CI it prints
/// `SKIP <test>: <why>` and the caller returns, so the test passes. Under `CI` it panics
/// instead: CI installs everything the tests need (`scripts/ci`), so a missing prerequisite
/// there is a broken setup that must not pass as green.
pub fn skip(test: &str, why: &str) {
    if in_ci() {
        panic!("{test}: {why} (CI is set: a missing prerequisite fails the test; scripts/ci must provide it)");
    }
    eprintln!("SKIP {test}: {why}");
}

/// Not root: [`skip`]s `test` and returns true (the caller returns).
pub fn skip_unless_root(test: &str) -> bool {
    if !is_root() {
        skip(test, "needs root (CI runs as root)");
        return true;
    }
    false
}

/// The kernel's Landlock ABI (0 if none), as the binary's probe reports it.
pub fn landlock_abi() -> u32 {
    let out = Command::new(SANDBOX)
        .args(["--probe", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["landlock"]["abi"].as_u64().unwrap() as u32
}

/// A scratch directory under `/var/tmp` (outside the writable set), removed on drop.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch::new_in("/var/tmp")
    }

    /// A scratch directory in `parent` (`/tmp`: inside the sandbox's writable set).
    pub fn new_in(parent: &str) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("shofer-sandbox-test-")
            .tempdir_in(parent)
            .unwrap();
        Scratch { dir }
    }

    pub fn path(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).unwrap()
    }

    /// Makes the tree owned by `uid` (for unprivileged runs).
    pub fn chown_all(&self, uid: u32) {
        let status = Command::new("chown")
            .args(["-R", &format!("{uid}:{uid}")])
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// Runs a git command in `dir`, panicking on failure.
pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .envs(git_env())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Identity for commits, so no global config is needed.
pub fn git_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("GIT_AUTHOR_NAME", "shofer test"),
        ("GIT_AUTHOR_EMAIL", "test@shofer.invalid"),
        ("GIT_COMMITTER_NAME", "shofer test"),
        ("GIT_COMMITTER_EMAIL", "test@shofer.invalid"),
        ("GIT_CONFIG_NOSYSTEM", "1"),
    ]
}

/// A repository `repo/` with one commit and a linked worktree `wt/`, inside `scratch`.
/// Returns (repo, worktree).
pub fn linked_worktree(scratch: &Scratch) -> (PathBuf, PathBuf) {
    let root = scratch.path();
    let repo = root.join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "hello\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-qm", "init"]);
    std::fs::create_dir_all(repo.join(".git/hooks")).unwrap();
    git(&repo, &["worktree", "add", "-q", "../wt"]);
    (repo, root.join("wt"))
}

/// Builder for one sandbox run.
pub struct Run {
    args: Vec<OsString>,
    dir: Option<PathBuf>,
    uid: Option<u32>,
    envs: Vec<(OsString, Option<OsString>)>,
    fd9: Option<std::fs::File>,
    stdin: Option<std::fs::File>,
}

impl Run {
    pub fn new(worktree: &Path) -> Run {
        Run {
            args: vec![worktree.into()],
            dir: worktree.is_dir().then(|| worktree.to_path_buf()),
            uid: None,
            envs: Vec::new(),
            fd9: None,
            stdin: None,
        }
    }

    /// Adds an argument (options may follow the worktree).
    pub fn arg(mut self, a: impl AsRef<std::ffi::OsStr>) -> Run {
        self.args.push(a.as_ref().to_os_string());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Sets the variable `name` in the sandbox's environment.
    pub fn env(
        mut self,
        name: impl AsRef<std::ffi::OsStr>,
        value: impl AsRef<std::ffi::OsStr>,
    ) -> Run {
        self.envs.push((
            name.as_ref().to_os_string(),
            Some(value.as_ref().to_os_string()),
        ));
        self
    }

    /// Removes the variable `name` from the sandbox's environment.
    pub fn env_remove(mut self, name: impl AsRef<std::ffi::OsStr>) -> Run {
        self.envs.push((name.as_ref().to_os_string(), None));
        self
    }

    /// Gives the sandbox `file` (opened close-on-exec) as descriptor 9, e.g. for `--report 9`.
    /// The command's standard input (else `/dev/null`), for [`Run::output`].
    pub fn stdin(mut self, file: std::fs::File) -> Run {
        self.stdin = Some(file);
        self
    }

    pub fn fd9(mut self, file: std::fs::File) -> Run {
        self.fd9 = Some(file);
        self
    }

    /// `-c SCRIPT`.
    pub fn sh(self, script: &str) -> Run {
        self.arg("-c").arg(script)
    }

    /// Runs as `uid` (gid = uid, no supplementary groups), from a [`ReachableCopy`] of the
    /// binary.
    pub fn with_uid(mut self, uid: u32) -> Run {
        self.uid = Some(uid);
        self
    }

    /// The command as root, to spawn by hand (a run as another uid goes through
    /// [`Run::output`], which keeps the binary's copy alive for the run).
    pub fn command(self) -> Command {
        assert!(
            self.uid.is_none(),
            "Run::command with_uid: use Run::output (the reachable copy must outlive the run)"
        );
        self.build(Path::new(SANDBOX))
    }

    fn build(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        if let Some(d) = &self.dir {
            cmd.current_dir(d);
        }
        cmd.envs(git_env()).args(&self.args);
        for (name, value) in &self.envs {
            match value {
                Some(v) => cmd.env(name, v),
                None => cmd.env_remove(name),
            };
        }
        if let Some(file) = &self.fd9 {
            use std::os::fd::AsRawFd;
            let fd = file.as_raw_fd();
            // Safety: dup2 is async-signal-safe; the new descriptor is not close-on-exec.
            unsafe {
                cmd.pre_exec(move || {
                    // dup2 onto itself would leave close-on-exec set.
                    let ok = if fd == 9 {
                        libc::fcntl(9, libc::F_SETFD, 0) == 0
                    } else {
                        libc::dup2(fd, 9) == 9
                    };
                    if !ok {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if let Some(uid) = self.uid {
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
        cmd
    }

    /// Starts the run with its output piped; keep the returned copy (a run as another uid)
    /// until the child has been waited for.
    pub fn spawn(self) -> (std::process::Child, Option<ReachableCopy>) {
        let copy = self
            .uid
            .map(|uid| ReachableCopy::new(Path::new(SANDBOX), uid));
        let program = copy.as_ref().map_or(Path::new(SANDBOX), |c| c.path());
        let child = self
            .build(program)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
        (child, copy)
    }

    pub fn output(mut self) -> Output {
        let copy = self
            .uid
            .map(|uid| ReachableCopy::new(Path::new(SANDBOX), uid));
        let program = copy.as_ref().map_or(Path::new(SANDBOX), |c| c.path());
        let stdin = self.stdin.take().map_or_else(Stdio::null, Stdio::from);
        self.build(program)
            .stdin(stdin)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", program.display()))
    }
}

/// A copy of a binary that `uid` can execute, for tests that run something as another user.
///
/// The build tree may be where that user cannot go: in a clone under root's home (mode 0700),
/// uid 65534 cannot even start `target/debug/shofer-sandbox` (exec fails with `EACCES`). The
/// copy lives in a fresh root-owned 0755 directory under `/var/tmp`, removed on drop.
pub struct ReachableCopy {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl ReachableCopy {
    /// Copies `bin`.
    ///
    /// # Panics
    /// When the copy fails, or `uid` still cannot reach it: the message names the directory
    /// that stops it.
    pub fn new(bin: &Path, uid: u32) -> ReachableCopy {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("shofer-test-bin-")
            .tempdir_in("/var/tmp")
            .unwrap_or_else(|e| panic!("a directory for a copy of {}: {e}", bin.display()));
        let name = bin.file_name().expect("a binary's file name");
        let path = dir.path().join(name);
        // Copied by a `cp` process, not here: a write descriptor for the copy in this
        // (multi-threaded) test process would be inherited by another test thread's fork until
        // that child execs, and executing the copy meanwhile fails with ETXTBSY.
        let status = Command::new("cp")
            .arg("--")
            .arg(bin)
            .arg(&path)
            .status()
            .unwrap_or_else(|e| panic!("cp {} {}: {e}", bin.display(), path.display()));
        assert!(
            status.success(),
            "cp {} {}: {status}",
            bin.display(),
            path.display()
        );
        for (p, mode) in [(dir.path(), 0o755), (path.as_path(), 0o755)] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        if let Some(stop) = untraversable_ancestor(&path, uid) {
            panic!(
                "uid {uid} cannot reach {} (no search permission on {}): a test that runs as another user needs a scratch directory that user can traverse",
                path.display(),
                stop.display()
            );
        }
        ReachableCopy { _dir: dir, path }
    }

    /// The copy.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The first directory above `path` that `uid` (with gid = uid and no other groups) may not
/// search, by its mode bits (path_resolution(7)).
pub fn untraversable_ancestor(path: &Path, uid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    path.ancestors().skip(1).find_map(|d| {
        let m = std::fs::metadata(d).ok()?;
        let bit = if m.uid() == uid {
            0o100
        } else if m.gid() == uid {
            0o010
        } else {
            0o001
        };
        (m.mode() & bit == 0).then(|| d.to_path_buf())
    })
}

/// Pretty failure text for an output.
pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// PIDs of live processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    shofer_sys::proc::live_with_cmdline(|c| {
        String::from_utf8_lossy(c)
            .replace('\0', " ")
            .contains(marker)
    })
    .iter()
    .map(|p| p.pid)
    .collect()
}

/// A marker number unique to this test process and call site, for `sleep <marker>`.
pub fn unique_sleep(tag: u32) -> String {
    format!("{}.{:05}{}", 86000 + tag, std::process::id() % 100000, tag)
}

/// Every backend the tests exercise.
pub const ALL_BACKENDS: [&str; 4] = ["landlock", "userns", "layered", "bwrap"];

/// The backends that can run here (each tried once per test binary); the others are listed
/// once on stderr with why they are skipped.
pub fn backends() -> Vec<&'static str> {
    static USABLE: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    USABLE
        .get_or_init(|| {
            let s = Scratch::new();
            let out = Command::new(SANDBOX)
                .args(["--probe", "--json"])
                .output()
                .unwrap();
            let probe: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            ALL_BACKENDS
                .into_iter()
                .filter(|b| {
                    let out = Command::new(SANDBOX)
                        .args(["--backend", b])
                        .arg(s.path())
                        .args(["--", "true"])
                        .output()
                        .unwrap();
                    if !out.status.success() {
                        // Skipping is only honest when the probe agrees the mechanism is
                        // missing here; otherwise the backend is broken and the tests fail.
                        let mechanism = match *b {
                            "landlock" => probe["landlock"]["abi"].as_u64() >= Some(3),
                            "userns" => probe["user_namespaces"]["usable"] == true,
                            "layered" => {
                                probe["user_namespaces"]["usable"] == true
                                    && probe["landlock"]["abi"].as_u64() >= Some(1)
                            }
                            _ => probe["bwrap"]["usable"] == true,
                        };
                        assert!(
                            !mechanism,
                            "backend {b} should work here (probe: {probe}) but: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        skip(
                            &format!("every test on backend {b}"),
                            String::from_utf8_lossy(&out.stderr).trim(),
                        );
                    }
                    out.status.success()
                })
                .collect()
        })
        .clone()
}

impl Run {
    /// `--backend NAME`.
    pub fn backend(self, name: &str) -> Run {
        self.arg("--backend").arg(name)
    }
}
