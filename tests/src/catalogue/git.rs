//! Host side — git metadata: writes the host's next git run would trust.

use super::{describe, need_git, need_git_sh, Case, Scope};
use crate::attacks::Attack;
use crate::runner::{chown_all, clip, diff, Cmd, Ctx, Outcome, Run, Sb, World};
use shofer_core::policy::Protection;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// This family's cases, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "git-linked-worktree-works",
            "field 2: add, commit, checkout -b, stash list in a linked worktree",
            Some(Protection::RenameInside),
            git_works,
            needs = need_git_sh
        ),
        case!(
            "git-common-config",
            "field 2: git config core.fsmonitor / a write to the common config",
            None,
            git_common_config,
            needs = need_git
        ),
        case!(
            "git-hooks",
            "field 2: a file into the common hooks/",
            None,
            git_hooks,
            needs = need_git
        ),
        case!(
            "git-packed-refs",
            "write packed-refs, rename a file over it from objects/ (refused), git pack-refs through the supervisor (nothing else of the common dir changes)",
            None,
            git_packed_refs,
            needs = need_git
        ),
        case!(
            "git-objects",
            "commit, then rewrite, delete and chmod every existing object and pack of the store (read-only on the namespace backends; named and exit 125 on Landlock); the new commit reaches the store",
            None,
            git_objects,
            needs = need_git_sh
        ),
        case!(
            "git-freshen",
            "utime(NULL) every existing object and pack through objects/ and the alternate, and a worktree file named like an object; write a blob the store has (git freshens it instead): contents and modes unchanged, the store's blob refreshed",
            None,
            git_freshen,
            needs = need_git_sh
        ),
        case!(
            "git-info",
            "write the common info/exclude and info/attributes",
            None,
            git_info,
            needs = need_git
        ),
        case!(
            "git-worktree-config",
            "extensions.worktreeConfig on: write <gitdir>/config.worktree (read by the host's git)",
            None,
            git_worktree_config,
            needs = need_git
        ),
        case!(
            "git-tampered-gitfile-next-run",
            "rewrite wt/.git to another repo's gitdir, then write into it on the next run",
            None,
            |c| git_tamper(c, Tamper::GitFile),
            needs = need_git
        ),
        case!(
            "git-tampered-commondir-next-run",
            "rewrite <gitdir>/commondir to another repo, then write into it on the next run",
            None,
            |c| git_tamper(c, Tamper::CommonDir),
            needs = need_git
        ),
        case!("git-tampered-gitfile-sibling-next-run", "point wt/.git at a sibling linked worktree's gitdir, then write into it on the next run", None, |c| git_tamper(c, Tamper::Sibling), needs = need_git),
        case!("git-commondir-redirect-host", "rewrite <gitdir>/commondir to a common dir inside wt with core.fsmonitor; the host's next git status runs it", None, git_commondir_host, needs = need_git_sh),
        case!("git-main-worktree-hooks", "a main worktree (.git is a directory inside wt): write .git/config core.fsmonitor; the host's next git status runs it", None, git_main_worktree, needs = need_git_sh),
        case!("git-main-worktree-hooks-unwritable", "a main worktree: swap .git/hooks for a directory holding a hook and directories of mode 0500 (nothing moves out of them until their mode is restored); the guard must still put hooks/ back", None, git_main_worktree_unwritable, needs = need_git_sh),
        case!(
            "git-pointer-redirect-host",
            "rewrite wt/.git to `gitdir: .evil`, a repo inside wt whose config sets core.fsmonitor; the host's git status runs it",
            None,
            |c| git_host_script(c, "pointer", "git init -q .evilwt && mv .evilwt/.git .evil && printf '%s' \"$PAYLOAD_CONFIG\" > .evil/config && printf 'gitdir: .evil\\n' > .git"),
            needs = need_git_sh
        ),
        case!(
            "git-nested-gitlink-host",
            "a nested repo registered as a gitlink (git add sub) whose config sets core.fsmonitor; the host's git status recurses into it",
            None,
            |c| git_host_script(c, "gitlink", "mkdir sub && git -C sub init -q && git -C sub commit -q --allow-empty -m s && printf '%s' \"$PAYLOAD_CONFIG\" > sub/.git/config && git add sub && echo SHOFER-SETUP-OK"),
            needs = need_git_sh
        ),
        case!(
            "git-nested-in-nested-gitlink-host",
            "a repo registered as a gitlink inside a repo registered as a gitlink (a/b), b's config setting core.fsmonitor; the host's git status recurses into a, whose status recurses into b",
            None,
            |c| git_host_script(c, "nested-gitlink", "mkdir -p a/b && git -C a init -q && git -C a/b init -q && git -C a/b commit -q --allow-empty -m b && git -C a add b && git -C a commit -q -m a && printf '%s' \"$PAYLOAD_CONFIG\" > a/b/.git/config && git add a && echo SHOFER-SETUP-OK"),
            needs = need_git_sh
        ),
        case!(
            "git-nested-hook-host",
            "a nested repo registered as a gitlink with a post-index-change hook and a stat-dirty tracked file: the host's git status refreshes the nested index and runs the hook (no configuration needed)",
            None,
            |c| git_host_script(c, "nested-hook", "mkdir sub && git -C sub init -q && echo a > sub/f && git -C sub add f && git -C sub commit -q -m s && printf '#!/bin/sh\\ntouch %s\\n' \"$PAYLOAD\" > sub/.git/hooks/post-index-change && chmod +x sub/.git/hooks/post-index-change && touch -d 2020-01-01 sub/f && git add sub && echo SHOFER-SETUP-OK"),
            needs = need_git_sh
        ),
        case!(
            "git-split-index-gitlink-host",
            "a nested repo whose config sets core.fsmonitor, registered as a gitlink in a copy of the index (GIT_INDEX_FILE) that is then split (update-index --split-index) and moved over the index: the gitlink is only in sharedindex.<id>, which the host's git status reads with the index",
            None,
            |c| git_host_script(c, "split-index", "mkdir sub .x && git -C sub init -q && git -C sub commit -q --allow-empty -m s && printf '%s' \"$PAYLOAD_CONFIG\" > sub/.git/config && g=$(git rev-parse --absolute-git-dir) && cp \"$g/index\" .x/index && GIT_INDEX_FILE=$PWD/.x/index git add sub && GIT_INDEX_FILE=$PWD/.x/index git update-index --split-index && mv .x/index \"$g/index\" && echo SHOFER-SETUP-OK"),
            needs = need_git_sh
        ),
        case!(
            "git-ref-deletion-works",
            "issue 11: branch/tag delete, update-ref -d, stash clear, cherry-pick in a linked worktree (packed-refs.lock)",
            Some(Protection::RenameInside),
            git_ref_deletion,
            needs = need_git_sh
        ),
        case!(
            "git-auto-maintenance-leaves-no-lock",
            "issue 11: commits in a linked worktree start no detached maintenance (it would be stopped midway at the end of the run) and leave no *.lock file",
            None,
            git_auto_maintenance,
            needs = need_git_sh
        ),
        case!(
            "git-index-stops-the-supervisor",
            "replace the worktree's index with a symlink to /dev/zero, then with a FIFO: the supervisor reads the index for gitlinks (during the run and at its end); an unbounded read would fill its memory, a FIFO would stop it for ever",
            None,
            git_index_not_a_file,
            needs = need_git_sh
        ),
        case!(
            "git-repo-inside-tmp-moved",
            "a repository inside /tmp: move the directory holding it and the worktree away, build a repository with core.fsmonitor at the worktree's path; the host's git status there runs it",
            None,
            git_inside_tmp_moved,
            needs = need_git_sh
        ),
        case!(
            "git-fake-layout-next-run",
            "a fake common dir in wt with symlinks to another repo, then write on the next run",
            None,
            |c| git_tamper(c, Tamper::FakeLayout),
            needs = need_git
        ),
    ]
}

struct Repo {
    common: PathBuf,
    gitdir: PathBuf,
    victim: PathBuf,
    env: Vec<(String, String)>,
}

pub(super) fn git(
    w: &World,
    env: &[(String, String)],
    dir: &Path,
    args: &[&str],
) -> Result<String, String> {
    let git = w.git.as_ref().ok_or("no git")?;
    let out = Command::new(git)
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", &w.path_env)
        .envs(env.iter().cloned())
        .output()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(super) fn git_env(dir: &Path) -> Vec<(String, String)> {
    [
        ("HOME", dir.join("home").display().to_string()),
        ("GIT_CONFIG_NOSYSTEM", "1".into()),
        ("GIT_AUTHOR_NAME", "shofer".into()),
        ("GIT_AUTHOR_EMAIL", "shofer@example.invalid".into()),
        ("GIT_COMMITTER_NAME", "shofer".into()),
        ("GIT_COMMITTER_EMAIL", "shofer@example.invalid".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Makes `dir/repo` with one commit and `wt` a linked worktree of it (branch `agent`), plus
/// an unrelated repository `dir/victim`; everything owned by the cell's user.
fn make_repo(c: &Ctx) -> Result<Repo, String> {
    let env = git_env(&c.dir);
    let repo = c.dir.join("repo");
    let victim = c.dir.join("victim");
    let _ = std::fs::create_dir_all(c.dir.join("home"));
    for r in [&repo, &victim] {
        std::fs::create_dir_all(r).map_err(|e| e.to_string())?;
        git(c.w, &env, r, &["init", "-q", "-b", "main"])?;
        std::fs::write(r.join("README"), b"hello\n").map_err(|e| e.to_string())?;
        git(c.w, &env, r, &["add", "README"])?;
        git(c.w, &env, r, &["commit", "-qm", "init"])?;
        git(c.w, &env, r, &["pack-refs", "--all"])?;
    }
    std::fs::remove_dir_all(&c.wt).map_err(|e| e.to_string())?;
    git(
        c.w,
        &env,
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "agent",
            &c.wt.display().to_string(),
        ],
    )?;
    let common = repo.join(".git");
    let gitdir = common
        .join("worktrees")
        .join(c.wt.file_name().unwrap_or_default());
    std::fs::create_dir_all(common.join("hooks")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(common.join("info")).map_err(|e| e.to_string())?;
    let (u, g) = c.cell.user.ids();
    chown_all(&c.dir, u, g);
    Ok(Repo {
        common: common.canonicalize().unwrap_or(common),
        gitdir,
        victim,
        env,
    })
}

fn snap_paths(paths: &[PathBuf]) -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    for p in paths {
        let mut s = BTreeMap::new();
        snapshot_into(p, p, &mut s);
        for (k, v) in s {
            all.insert(format!("{}/{k}", p.display()), v);
        }
    }
    all
}

fn snapshot_into(root: &Path, p: &Path, m: &mut BTreeMap<String, String>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return;
    };
    let rel = p
        .strip_prefix(root)
        .map(|r| r.display().to_string())
        .unwrap_or_default();
    let mut d = format!(
        "mode={:o} size={} mtime={}.{}",
        md.mode(),
        md.size(),
        md.mtime(),
        md.mtime_nsec()
    );
    if md.is_file() {
        d.push_str(&format!(
            " content={:?}",
            std::fs::read(p).map(|c| c.len()).unwrap_or(0)
        ));
    }
    m.insert(rel, d);
    if md.is_dir() {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                snapshot_into(root, &e.path(), m);
            }
        }
    }
}

/// The read-only parts of the common dir: config, hooks/, info/, packed-refs (top level
/// files of the common dir too, so new files there show up).
fn common_ro(r: &Repo) -> Vec<PathBuf> {
    let mut v = vec![r.common.join("hooks"), r.common.join("info")];
    if let Ok(rd) = std::fs::read_dir(&r.common) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_file()).unwrap_or(false) {
                v.push(e.path());
            }
        }
    }
    v.push(r.common.clone());
    v
}

fn fs_snapshot_common(r: &Repo) -> BTreeMap<String, String> {
    // Only top-level entries of the common dir (objects/refs/logs are writable by design).
    let mut m = snap_paths(&common_ro(r)[..common_ro(r).len() - 1]);
    if let Ok(rd) = std::fs::read_dir(&r.common) {
        let mut names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        m.insert("common-entries".into(), names.join(","));
    }
    m
}

/// An object file of a store: its bytes, mode and modification time (seconds).
struct ObjectFile {
    bytes: Vec<u8>,
    mode: u32,
    mtime: i64,
}

/// Each file of the store `objects` (not `info/`), by its path there.
fn object_files(objects: &Path) -> BTreeMap<String, ObjectFile> {
    use std::os::unix::fs::MetadataExt;
    fn walk(dir: &Path, rel: &str, m: &mut BTreeMap<String, ObjectFile>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = format!("{rel}{}", e.file_name().to_string_lossy());
            match std::fs::symlink_metadata(e.path()) {
                Ok(_) if name == "info" => {}
                Ok(md) if md.is_dir() => walk(&e.path(), &format!("{name}/"), m),
                Ok(md) => {
                    let bytes = std::fs::read(e.path()).unwrap_or_default();
                    let (mode, mtime) = (md.mode(), md.mtime());
                    m.insert(name, ObjectFile { bytes, mode, mtime });
                }
                Err(_) => {}
            }
        }
    }
    let mut m = BTreeMap::new();
    walk(objects, "", &mut m);
    m
}

/// Existing objects: the namespace backends' store is read-only (the object quarantine), so
/// every write fails and the command's new commit reaches the store when the run ends; on
/// Landlock each destroyed object is named and the run fails (exit status 125).
fn git_objects(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let objects = r.common.join("objects");
    let before = object_files(&objects);
    // The attack reaches the store by its path and, under a quarantine, by the alternate:
    // each existing object file is appended to, made writable and removed.
    let old: Vec<&str> = before.keys().map(String::as_str).collect();
    let script = format!(
        "git commit -q --allow-empty -m new && git rev-parse HEAD && {SETUP_OK}; \
         A=$(cat \"$COMMON/objects/info/alternates\" 2>/dev/null); \
         for d in \"$COMMON/objects\" $A; do for f in $OLD; do \
           chmod u+w \"$d/$f\"; printf forged >> \"$d/$f\"; rm -f \"$d/$f\"; \
         done; done"
    );
    let mut spec = Sb::new(Cmd::Shell(format!("{script}; true")));
    spec.env = r.env.clone();
    spec.env
        .push(("COMMON".into(), r.common.display().to_string()));
    spec.env.push(("OLD".into(), old.join(" ")));
    let run = c.sb(spec);
    if !run.stdout.contains("SHOFER-SETUP-OK") {
        return Outcome::Broken(format!("git commit failed: {}", run.how()));
    }
    let new = run.stdout.lines().next().unwrap_or("").trim().to_string();
    let after = object_files(&objects);
    let changed: Vec<&String> = before
        .iter()
        .filter(|(k, v)| after.get(*k).map(|a| &a.bytes) != Some(&v.bytes))
        .map(|(k, _)| k)
        .collect();
    let repo = r.common.parent().unwrap_or(&r.common);
    let host_sees_new = git(c.w, &r.env, repo, &["cat-file", "-e", &new]).is_ok();
    if c.cell.backend == "landlock" && !changed.is_empty() {
        if run.code != Some(125) || !run.stderr.contains("destroyed or changed git object") {
            return Outcome::Escaped(format!(
                "{} existing object files destroyed and not named: {}",
                changed.len(),
                run.how()
            ));
        }
        return Outcome::Blocked(format!(
            "not prevented on Landlock: {} object files destroyed, named, exit 125",
            changed.len()
        ));
    }
    if !changed.is_empty() {
        return Outcome::Escaped(format!(
            "existing objects changed or deleted: {}",
            clip(&format!("{changed:?}"), 200)
        ));
    }
    if !host_sees_new {
        return Outcome::Broken(format!(
            "the command's commit {new} did not reach the store: {}",
            run.how()
        ));
    }
    Outcome::Blocked(format!(
        "{} existing object files unchanged (read-only store); the new commit was moved into the store",
        before.len()
    ))
}

/// Whether git works in a private view in this cell (the namespace backends): the command's
/// writes to the control files land in its own copy, and what counts is the repository after
/// the run (shofer-sandbox's `git::view`).
fn private_view(c: &Ctx) -> bool {
    c.cell.backend != "landlock"
}

/// In a private view, a write the command could make (`run`) is contained: called once the
/// repository's common dir was found unchanged after it.
fn held_by_view(c: &Ctx, run: &Run) -> Option<Outcome> {
    private_view(c).then(|| {
        Outcome::Blocked(format!(
            "written in the run's private view (exit {:?}); the repository's common dir is unchanged after the run",
            run.code
        ))
    })
}

fn deny(c: &Ctx, env: &[(String, String)], wt: Option<PathBuf>, paths: &[PathBuf]) -> Run {
    let mut spec = Sb::new(Cmd::AttackRaw(
        Attack::DenyWrite,
        paths.iter().map(|p| p.display().to_string()).collect(),
    ));
    spec.env = env.to_vec();
    spec.wt = wt;
    c.sb(spec)
}

fn git_works(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let before = fs_snapshot_common(&r);
    let mut spec = Sb::new(Cmd::Shell(
        "echo x > f && git add f && git commit -qm t && git checkout -q -b t2 && git stash list && echo 'SHOFER-CONTAINMENT: ok done'".into(),
    ));
    spec.env = r.env.clone();
    let run = c.sb(spec);
    let after = fs_snapshot_common(&r);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("the read-only part of the common dir changed: {d}"));
    }
    if run.code != Some(0) {
        return Outcome::Broken(format!("git in the linked worktree failed: {}", run.how()));
    }
    let log = git(c.w, &r.env, &c.wt, &["log", "-1", "--format=%s"]).unwrap_or_default();
    let reflog = r.gitdir.join("logs/HEAD");
    if log.trim() != "t" || !reflog.exists() {
        return Outcome::Broken(format!(
            "commit not visible from outside (log {:?}, reflog exists {})",
            log.trim(),
            reflog.exists()
        ));
    }
    Outcome::Works("add, commit (with reflog), checkout -b, stash list worked; config/hooks/info/packed-refs untouched".into())
}

/// Runs `git status` in `dir` the way the host would after the sandboxed run: as the cell's
/// user, outside any sandbox, with no safe.directory override. Returns git's stderr.
fn host_git_status(c: &Ctx, dir: &Path) -> String {
    let Some(gitb) = c.w.git.as_ref() else {
        return String::new();
    };
    let mut cmd = Command::new(gitb);
    cmd.args(["status", "--short"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", &c.w.path_env)
        .envs(git_env(&c.dir));
    if let crate::runner::User::Unpriv(u) = c.cell.user {
        use std::os::unix::process::CommandExt;
        cmd.uid(u).gid(u);
    }
    cmd.output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default()
}

fn payload_config(payload: &Path) -> String {
    format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = \"touch {}\"\n",
        payload.display()
    )
}

fn git_commondir_host(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let payload = c.out.join("pwned-by-commondir");
    let evil = c.wt.join("evilcommon");
    // Run 1 (inside): a common dir of our own inside the worktree, and commondir pointing at it.
    let files = [
        (evil.join("config"), payload_config(&payload)),
        (evil.join("HEAD"), "ref: refs/heads/agent\n".to_string()),
        (evil.join("refs/heads/.keep"), String::new()),
        (evil.join("objects/.keep"), String::new()),
        (r.gitdir.join("commondir"), format!("{}\n", evil.display())),
    ];
    // Directories inside the worktree (attacker-owned anyway) are made from outside; the
    // files, including <gitdir>/commondir, are written by the sandboxed command.
    for d in [evil.join("refs/heads"), evil.join("objects")] {
        let _ = std::fs::create_dir_all(d);
    }
    let (u, g) = c.cell.user.ids();
    chown_all(&c.wt, u, g);
    for (path, content) in files {
        let run = put(c, &r, path.clone(), &content);
        if !matches!(run.outcome(), Outcome::Works(_)) {
            return Outcome::Blocked(format!(
                "writing {} failed: {}",
                path.display(),
                describe(&run.outcome())
            ));
        }
    }
    let err = host_git_status(c, &c.wt);
    if payload.exists() {
        let _ = std::fs::remove_file(&payload);
        return Outcome::Escaped(format!(
            "the host's next `git status` ran attacker code: <gitdir>/commondir (writable) redirected git to a common dir inside the worktree whose config sets core.fsmonitor{}",
            if err.trim().is_empty() { String::new() } else { format!(" (git: {})", clip(err.trim(), 120)) }
        ));
    }
    Outcome::Blocked(format!(
        "host git status did not run the payload ({})",
        clip(err.trim(), 160)
    ))
}

/// Runs `script` in the worktree inside the sandbox (with `$PAYLOAD_CONFIG`: a git config
/// whose core.fsmonitor creates the payload), then the host's `git status`: the payload must
/// not appear.
/// What a [`git_host_script`] set-up that must succeed prints last.
/// git's freshen of an object it finds in the store (`utime(path, NULL)`): on the namespace
/// backends the gate performs it on the read-only store (docs/GIT.md "Objects"), and nothing but
/// the times of the store's files can change through it; on Landlock the store is writable.
fn git_freshen(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let objects = r.common.join("objects");
    // Each existing object file, set to an old time first.
    const OLD: i64 = 1_000_000_000;
    let before = object_files(&objects);
    for name in before.keys() {
        let _ = crate::sys::utime(objects.join(name), OLD);
    }
    let blob = "ce013625030ba8dba906f756967f9e9ca394464a"; // "hello\n", the README
    let fake = format!("fake/{}/{}", &blob[..2], &blob[2..]);
    let script = format!(
        "mkdir -p fake/{fan} && : > {fake} && touch -d @{OLD} {fake} && {SETUP_OK}; \
         A=$(cat \"$COMMON/objects/info/alternates\" 2>/dev/null); \
         for d in \"$COMMON/objects\" $A; do for f in $FILES; do touch -c \"$d/$f\"; done; done; \
         touch -c {fake}; stat -c %Y {fake}; \
         printf 'hello\\n' | git hash-object -w --stdin",
        fan = &blob[..2]
    );
    let mut spec = Sb::new(Cmd::Shell(format!("{script}; true")));
    spec.env = r.env.clone();
    spec.env
        .push(("COMMON".into(), r.common.display().to_string()));
    let names: Vec<&str> = before.keys().map(String::as_str).collect();
    spec.env.push(("FILES".into(), names.join(" ")));
    let run = c.sb(spec);
    if !run.stdout.contains("SHOFER-SETUP-OK") {
        return Outcome::Broken(format!("setup failed: {}", run.how()));
    }
    let after = object_files(&objects);
    let changed: Vec<&String> = before
        .iter()
        .filter(|(k, b)| {
            after
                .get(*k)
                .is_none_or(|a| a.bytes != b.bytes || a.mode != b.mode)
        })
        .map(|(k, _)| k)
        .collect();
    if !changed.is_empty() {
        return Outcome::Escaped(format!(
            "existing object files changed in content or mode: {}",
            clip(&format!("{changed:?}"), 200)
        ));
    }
    let fake_touched = run
        .stdout
        .lines()
        .any(|l| l.trim().parse::<i64>().is_ok_and(|t| t > OLD + 86_400));
    let stored = format!("{}/{}", &blob[..2], &blob[2..]);
    let refreshed = after.get(&stored).is_some_and(|a| a.mtime > OLD + 86_400);
    if !fake_touched || !refreshed {
        return Outcome::Broken(format!(
            "utime(NULL) not performed (worktree file: {fake_touched}, the store's blob: {refreshed}): {}",
            run.how()
        ));
    }
    Outcome::Blocked(format!(
        "{} existing object files unchanged in content and mode; the store's blob freshened, the worktree's file touched",
        before.len()
    ))
}

const SETUP_OK: &str = "echo SHOFER-SETUP-OK";

fn git_host_script(c: &Ctx, what: &str, script: &str) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let payload = c.out.join(format!("pwned-by-{what}"));
    let mut spec = Sb::new(Cmd::Shell(format!("{script}; true")));
    spec.env = r.env.clone();
    spec.env
        .push(("PAYLOAD_CONFIG".into(), payload_config(&payload)));
    spec.env
        .push(("PAYLOAD".into(), payload.display().to_string()));
    let run = c.sb(spec);
    // A set-up that must succeed on every backend says so: without it the case could not fail.
    if script.ends_with(SETUP_OK) && !run.stdout.contains("SHOFER-SETUP-OK") {
        return Outcome::Error(format!(
            "harness: the attack's set-up failed: {}",
            run.how()
        ));
    }
    let err = host_git_status(c, &c.wt);
    if payload.exists() {
        let _ = std::fs::remove_file(&payload);
        return Outcome::Escaped(format!(
            "the host's `git status` ran the command's program ({what})"
        ));
    }
    Outcome::Blocked(format!(
        "host git status did not run the payload (sandbox: {}; git: {})",
        clip(run.stderr.trim(), 160),
        clip(err.trim(), 80)
    ))
}

/// Ref deletion goes through `<common>/packed-refs.lock`, which the command cannot make in the
/// common dir on any backend: the supervisor performs git's lock protocol for it (docs/GIT.md,
/// "Git").
fn git_ref_deletion(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let mut spec = Sb::new(Cmd::Shell(
        "set -e; echo x > f; git add f; git commit -qm one; git branch topic; git tag v1; \
         git branch -D topic; git tag -d v1; git update-ref refs/heads/t HEAD; \
         git update-ref -d refs/heads/t; echo y > f; git stash push -q; git stash clear; \
         git switch -q -c side; echo z > g; git add g; git commit -qm side; git switch -q agent; \
         git cherry-pick side >/dev/null; echo 'SHOFER-CONTAINMENT: ok done'"
            .into(),
    ));
    spec.env = r.env.clone();
    let run = c.sb(spec);
    let errors: Vec<&str> = run
        .stderr
        .lines()
        // Also none from `git branch -D`'s rewrite of the unchanged, read-only config (README,
        // "Git": the supervisor answers it).
        .filter(|l| l.starts_with("error:") || l.starts_with("fatal:"))
        .collect();
    if run.code != Some(0) || !errors.is_empty() {
        return Outcome::Broken(format!(
            "ref deletion in the linked worktree failed: {}",
            run.how()
        ));
    }
    Outcome::Works(
        "branch -D, tag -d, update-ref -d, stash clear, cherry-pick: exit 0, no error line".into(),
    )
}

fn git_auto_maintenance(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    // Every commit asks for maintenance (`gc.auto = 1`: two loose objects in `objects/17`
    // are enough), as a repository with many loose objects does.
    if let Err(e) = git(c.w, &r.env, &r.common, &["config", "gc.auto", "1"]) {
        return Outcome::Error(format!("harness: {e}"));
    }
    let mut spec = Sb::new(Cmd::Shell(
        "set -e; for i in 1 2 3 4 5 6; do echo $i > f; git add f; GIT_TRACE=2 git commit -qm $i; done; \
         echo 'SHOFER-CONTAINMENT: ok done'"
            .into(),
    ));
    spec.env = r.env.clone();
    let run = c.sb(spec);
    let errors = run
        .stderr
        .lines()
        .any(|l| l.starts_with("error:") || l.starts_with("fatal:"));
    let detached = run
        .stderr
        .lines()
        .any(|l| l.contains("run_command:") && l.contains("--detach"));
    let locks = Command::new("find")
        .arg(&r.common)
        .args(["-name", "*.lock"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    // In a private view maintenance runs on the command's copy (what a stopped one leaves is
    // the view's).
    let detached = detached && !private_view(c);
    if run.code != Some(0) || errors || detached || !locks.is_empty() {
        return Outcome::Broken(format!(
            "commits with maintenance due: detached maintenance {detached}, lock files [{}]: {}",
            clip(&locks, 200),
            run.how()
        ));
    }
    Outcome::Works(
        "six commits: exit 0, no error line, no detached maintenance, no lock file left".into(),
    )
}

/// The index replaced by a symlink to `/dev/zero` (by the command, while it runs: the
/// watcher's check) and by a FIFO (left before the run, as a killed earlier run could: the
/// first check and the one at exit).
fn git_index_not_a_file(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let index = r.gitdir.join("index");
    let mut seen = Vec::new();
    for what in ["a symlink to /dev/zero", "a FIFO"] {
        let _ = std::fs::remove_file(&index);
        let script = if what == "a FIFO" {
            if let Err(e) = crate::sys::mknod(&index, libc::S_IFIFO | 0o644, 0) {
                return Outcome::Error(format!("harness: mkfifo {}: {e}", index.display()));
            }
            "echo 'SHOFER-CONTAINMENT: ok planted'".to_string()
        } else {
            format!(
                "ln -s /dev/zero '{}' && echo 'SHOFER-CONTAINMENT: ok planted'",
                index.display()
            )
        };
        let mut spec = Sb::new(Cmd::Shell(script));
        spec.env = r.env.clone();
        let run = c.sb(spec);
        if run.timed_out {
            return Outcome::Escaped(format!(
                "index replaced by {what}: the sandbox did not end: {}",
                run.how()
            ));
        }
        if !run.stdout.contains("ok planted") {
            return Outcome::Error(format!("harness: {what} not planted: {}", run.how()));
        }
        // In a private view the index the command replaces is the view's: dropped and named,
        // the run goes on (one left in the repository before the run still fails it).
        let status = if private_view(c) && what != "a FIFO" {
            Some(0)
        } else {
            Some(125)
        };
        if run.code != status || !run.stderr.contains("not a regular file") {
            return Outcome::Escaped(format!(
                "index replaced by {what}: not refused and named (exit 125): {}",
                run.how()
            ));
        }
        seen.push(format!("{what}: refused, named, exit {status:?}"));
    }
    Outcome::Blocked(seen.join("; "))
}

/// A main worktree at the cell's `wt` (`.git` a directory inside it), owned by the cell's
/// user; its git environment.
fn main_worktree(c: &Ctx) -> Result<Vec<(String, String)>, Outcome> {
    let env = git_env(&c.dir);
    let _ = std::fs::create_dir_all(c.dir.join("home"));
    if let Err(e) = git(c.w, &env, &c.wt, &["init", "-q", "-b", "main"]) {
        return Err(Outcome::Error(format!("harness: {e}")));
    }
    let (u, g) = c.cell.user.ids();
    chown_all(&c.dir, u, g);
    Ok(env)
}

fn git_main_worktree(c: &Ctx) -> Outcome {
    let env = match main_worktree(c) {
        Ok(env) => env,
        Err(o) => return o,
    };
    let payload = c.out.join("pwned-by-main-worktree");
    let r = Repo {
        common: c.wt.join(".git"),
        gitdir: c.wt.join(".git"),
        victim: c.dir.join("none"),
        env,
    };
    let config_before = std::fs::read(c.wt.join(".git/config")).unwrap_or_default();
    let run = put(c, &r, c.wt.join(".git/config"), &payload_config(&payload));
    let run2 = put(
        c,
        &r,
        c.wt.join(".git/hooks/post-checkout"),
        "#!/bin/sh\ntouch /dev/null\n",
    );
    let err = host_git_status(c, &c.wt);
    if payload.exists() {
        let _ = std::fs::remove_file(&payload);
        return Outcome::Escaped(
            "the host's next `git status` in this main worktree ran attacker code: .git/config (inside the writable worktree) set core.fsmonitor".into(),
        );
    }
    // .git is inside the writable worktree, so the writes themselves succeed; what must hold
    // is the host's view after the run (shofer-sandbox's git guard puts both back).
    let config_after = std::fs::read(c.wt.join(".git/config")).unwrap_or_default();
    if config_after != config_before || c.wt.join(".git/hooks/post-checkout").exists() {
        return Outcome::Escaped(format!(
            "a main worktree's .git/config or .git/hooks stayed changed after the run (host git: {})",
            clip(err.trim(), 120)
        ));
    }
    match (run.outcome(), run2.outcome()) {
        (Outcome::Works(_), _) | (_, Outcome::Works(_)) => Outcome::Blocked(
            "written during the run, restored by the supervisor's git guard when it ended".into(),
        ),
        (a, _) => Outcome::Blocked(describe(&a)),
    }
}

/// `git-main-worktree-hooks-unwritable`: the guard's restore of a main worktree's `.git/hooks`
/// when the command swapped in a tree it made hard to remove. As the tree's owner (uid 65534)
/// the restore once spent 18 s on it and gave up, the hook in place (exit 125). The namespace
/// backends keep `.git/hooks` read-only: the swap is refused.
fn git_main_worktree_unwritable(c: &Ctx) -> Outcome {
    let env = match main_worktree(c) {
        Ok(env) => env,
        Err(o) => return o,
    };
    let hooks = c.wt.join(".git/hooks");
    let names = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let before = names(&hooks);
    let mut spec = Sb::new(Cmd::AttackRaw(
        Attack::GitSwapUnwritable,
        vec![c.wt.display().to_string(), hooks.display().to_string()],
    ));
    spec.env = env;
    let run = c.sb(spec);
    let after = names(&hooks);
    if after != before {
        return Outcome::Escaped(format!(
            "a main worktree's .git/hooks stayed changed after the run: {:?} (exit {:?})",
            after
                .iter()
                .filter(|n| !before.contains(n))
                .collect::<Vec<_>>(),
            run.code
        ));
    }
    match run.outcome() {
        Outcome::Works(_) if run.code == Some(0) => Outcome::Blocked(
            "swapped in during the run, put back by the supervisor's git guard".into(),
        ),
        Outcome::Works(_) => {
            Outcome::Escaped(format!("hooks/ is back, but the run failed: {}", run.how()))
        }
        other => other,
    }
}

fn git_common_config(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let before = fs_snapshot_common(&r);
    let git_bin =
        c.w.git
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
    let mut spec = Sb::new(Cmd::Argv(vec![
        git_bin,
        "config".into(),
        "core.fsmonitor".into(),
        "touch /tmp/pwned".into(),
    ]));
    spec.env = r.env.clone();
    let run1 = c.sb(spec);
    let run2 = deny(c, &r.env, None, &[r.common.join("config")]);
    let after = fs_snapshot_common(&r);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("common dir changed: {d}"));
    }
    if let Some(o) = held_by_view(c, &run1) {
        return o;
    }
    if run1.code == Some(0) {
        return Outcome::Escaped("git config core.fsmonitor exited 0".into());
    }
    match run2.outcome() {
        Outcome::Blocked(d) => Outcome::Blocked(format!(
            "git config failed ({}); {d}",
            clip(run1.stderr.trim(), 120)
        )),
        o => o,
    }
}

fn git_hooks(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let before = fs_snapshot_common(&r);
    let run = deny(
        c,
        &r.env,
        None,
        &[
            r.common.join("hooks/post-checkout"),
            r.common.join("hooks/pre-commit"),
        ],
    );
    let after = fs_snapshot_common(&r);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("common dir changed: {d}"));
    }
    held_by_view(c, &run).unwrap_or_else(|| run.outcome())
}

fn git_info(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let before = fs_snapshot_common(&r);
    let run = deny(
        c,
        &r.env,
        None,
        &[
            r.common.join("info/exclude"),
            r.common.join("info/attributes"),
        ],
    );
    let after = fs_snapshot_common(&r);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("common dir changed: {d}"));
    }
    held_by_view(c, &run).unwrap_or_else(|| run.outcome())
}

fn git_packed_refs(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    // The common dir's top level is outside the command's reach (Landlock: outside the
    // writable set; the namespace backends: a read-only bind): the supervisor performs git's
    // own lock protocol on packed-refs for the command and nothing else, so a direct write and
    // a rename from objects/ stay refused.
    {
        let packed = r.common.join("packed-refs");
        let before = std::fs::read(&packed).ok();
        let run1 = deny(c, &r.env, None, std::slice::from_ref(&packed));
        let mut spec = Sb::new(Cmd::AttackRaw(
            Attack::GitWrite,
            vec![
                "rename-over".into(),
                r.common.join("objects").display().to_string(),
                packed.display().to_string(),
            ],
        ));
        spec.env = r.env.clone();
        let run2 = c.sb(spec);
        if std::fs::read(&packed).ok() != before {
            return Outcome::Escaped(
                "packed-refs changed by a direct write or a rename from objects/".into(),
            );
        }
        if let Some(o) = held_by_view(c, &run1) {
            return o;
        }
        match (run1.outcome(), run2.outcome()) {
            (Outcome::Blocked(_), Outcome::Blocked(_)) => {}
            (Outcome::Blocked(_), o) | (o, _) => return o,
        }
    }
    git_packed_refs_writable(c, &r)
}

/// packed-refs may be replaced through the supervisor's lock protocol, nothing else of the
/// common dir may change, and `git pack-refs` works.
fn git_packed_refs_writable(c: &Ctx, r: &Repo) -> Outcome {
    let packed = r.common.join("packed-refs").display().to_string();
    let without_packed = |m: BTreeMap<String, String>| -> BTreeMap<String, String> {
        m.into_iter()
            .filter(|(k, _)| !k.starts_with(&packed))
            .collect()
    };
    let before = without_packed(fs_snapshot_common(r));
    let git_bin =
        c.w.git
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
    let mut spec = Sb::new(Cmd::Argv(vec![git_bin, "pack-refs".into(), "--all".into()]));
    spec.env = r.env.clone();
    let run = c.sb(spec);
    let after = without_packed(fs_snapshot_common(r));
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!("common dir changed beyond packed-refs: {d}"));
    }
    if run.code != Some(0) {
        return Outcome::Broken(format!("git pack-refs failed: {}", run.how()));
    }
    Outcome::Blocked(
        "a direct write and a rename from objects/ refused; git pack-refs worked through the supervisor's packed-refs.lock protocol, nothing else of the common dir changed".into(),
    )
}

fn git_worktree_config(c: &Ctx) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    // The repository owner enabled per-worktree config (git sparse-checkout does this).
    if let Err(e) = git(
        c.w,
        &r.env,
        &c.dir.join("repo"),
        &["config", "extensions.worktreeConfig", "true"],
    ) {
        return Outcome::Error(format!("harness: {e}"));
    }
    let (u, g) = c.cell.user.ids();
    chown_all(&c.dir, u, g);
    let target = r.gitdir.join("config.worktree");
    let run = deny(c, &r.env, None, std::slice::from_ref(&target));
    // Judged by the host's view after the run: Landlock cannot keep one file of the writable
    // gitdir read-only, so shofer-sandbox's git guard puts it back when the command ends.
    if target.exists() {
        let seen =
            git(c.w, &r.env, &c.wt, &["config", "--get", "core.fsmonitor"]).unwrap_or_default();
        let _ = std::fs::remove_file(&target);
        return Outcome::Escaped(format!(
            "wrote {} (the host's next git in this worktree reads it; core.fsmonitor/hooksPath there run code{})",
            target.display(),
            if seen.is_empty() { String::new() } else { format!("; git sees {:?}", seen.trim()) }
        ));
    }
    match run.outcome() {
        Outcome::Works(_) | Outcome::Escaped(_) => Outcome::Blocked(
            "written during the run, removed by the supervisor's git guard when it ended".into(),
        ),
        other => other,
    }
}

enum Tamper {
    Sibling,
    GitFile,
    CommonDir,
    FakeLayout,
}

fn git_tamper(c: &Ctx, how: Tamper) -> Outcome {
    let r = match make_repo(c) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("harness: git setup: {e}")),
    };
    let vgit = r
        .victim
        .join(".git")
        .canonicalize()
        .unwrap_or(r.victim.join(".git"));
    // Run 1 (inside the sandbox): tamper with what the next run will read.
    let sibling = c.dir.join("wt2");
    let sibling_gitdir = r.common.join("worktrees/wt2");
    if matches!(how, Tamper::Sibling) {
        if let Err(e) = git(
            c.w,
            &r.env,
            &c.dir.join("repo"),
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                "other",
                &sibling.display().to_string(),
            ],
        ) {
            return Outcome::Error(format!("harness: {e}"));
        }
        let (u, g) = c.cell.user.ids();
        chown_all(&c.dir, u, g);
    }
    let step1 = match how {
        Tamper::Sibling => put(
            c,
            &r,
            c.wt.join(".git"),
            &format!("gitdir: {}\n", sibling_gitdir.display()),
        ),
        Tamper::GitFile => put(
            c,
            &r,
            c.wt.join(".git"),
            &format!("gitdir: {}\n", vgit.display()),
        ),
        Tamper::CommonDir => put(
            c,
            &r,
            r.gitdir.join("commondir"),
            &format!("{}\n", vgit.display()),
        ),
        Tamper::FakeLayout => {
            let mut spec = Sb::new(Cmd::AttackRaw(
                Attack::GitFakeLayout,
                vec![c.wt.display().to_string(), vgit.display().to_string()],
            ));
            spec.env = r.env.clone();
            c.sb(spec)
        }
    };
    match step1.outcome() {
        Outcome::Works(_) => {}
        // The namespace backends bind the control files read-only: the tampering itself fails.
        Outcome::Broken(why) if c.cell.backend != "landlock" && why.contains("EROFS") => {
            return Outcome::Blocked(format!("the tampering itself was refused: {why}"))
        }
        o => {
            return Outcome::Error(format!(
                "harness: tampering inside the worktree failed: {}",
                describe(&o)
            ))
        }
    }
    // Run 2: the next run on the tampered worktree must give no reach into the victim.
    let targets = [
        sibling_gitdir.join("HEAD"),
        sibling_gitdir.join("evil"),
        sibling.join("evil"),
        vgit.join("config"),
        vgit.join("hooks/pre-commit"),
        vgit.join("objects/evil"),
        vgit.join("refs/heads/evil"),
        vgit.join("logs/evil"),
        vgit.join("packed-refs"),
        r.common.join("config"),
        r.common.join("objects/../config"),
    ];
    let watched = [vgit.clone(), sibling_gitdir.clone(), sibling.clone()];
    let before = snap_paths(&watched);
    let before_c = fs_snapshot_common(&r);
    let run = deny(c, &r.env, None, &targets);
    let after = snap_paths(&watched);
    if let Some(d) = diff(&before, &after) {
        return Outcome::Escaped(format!(
            "next run wrote into the other repository: {}",
            clip(&d, 300)
        ));
    }
    if let Some(d) = diff(&before_c, &fs_snapshot_common(&r)) {
        return Outcome::Escaped(format!("next run changed the common dir: {d}"));
    }
    if run.code == Some(125) {
        return Outcome::Blocked(format!(
            "the sandbox refused the tampered layout: {}",
            clip(run.stderr.trim(), 200)
        ));
    }
    if let Some(o) = held_by_view(c, &run) {
        return o;
    }
    let writable = run
        .report
        .as_ref()
        .map(|r| r["writable"].to_string())
        .unwrap_or_default();
    if writable.contains(&r.victim.display().to_string()) {
        return Outcome::Escaped(format!(
            "the next run's report lists the other repository as writable: {}",
            clip(&writable, 300)
        ));
    }
    run.outcome()
}

fn put(c: &Ctx, r: &Repo, path: PathBuf, content: &str) -> Run {
    let mut spec = Sb::new(Cmd::AttackRaw(
        Attack::Put,
        vec![path.display().to_string(), content.to_string()],
    ));
    spec.env = r.env.clone();
    c.sb(spec)
}

/// A repository inside a writable root (`/tmp`): nothing stops the command writing beside it,
/// so it tries to move the directory holding the repository and the worktree away and to put
/// a repository of its own (core.fsmonitor) at the worktree's path, where an editor's git runs.
/// The namespace backends pin that directory (a bind over itself); Landlock cannot, and must
/// say so when it starts (`hardening not enforced (git_location)`) and fail the run when it ends: a skip
/// there, with that reason, and an escape if it stays silent.
fn git_inside_tmp_moved(c: &Ctx) -> Outcome {
    let cell_dir: Vec<String> = c
        .dir
        .components()
        .rev()
        .take(2)
        .map(|x| x.as_os_str().to_string_lossy().into_owned())
        .collect();
    let top = PathBuf::from(format!(
        "/tmp/shofer-containment-{}-{}",
        std::process::id(),
        cell_dir.join("-")
    ));
    let _ = std::fs::remove_dir_all(&top);
    let r = top.join("r");
    let (repo, wt) = (r.join("repo"), r.join("wt"));
    let env = git_env(&c.dir);
    let setup = || -> Result<(), String> {
        std::fs::create_dir_all(&repo).map_err(|e| e.to_string())?;
        git(c.w, &env, &repo, &["init", "-q", "-b", "main"])?;
        git(
            c.w,
            &env,
            &repo,
            &["commit", "-q", "--allow-empty", "-m", "init"],
        )?;
        git(
            c.w,
            &env,
            &repo,
            &["worktree", "add", "-q", "-b", "agent", "../wt"],
        )?;
        let (u, g) = c.cell.user.ids();
        chown_all(&top, u, g);
        std::fs::create_dir_all(c.dir.join("home")).map_err(|e| e.to_string())?;
        chown_all(&c.dir.join("home"), u, g);
        Ok(())
    };
    if let Err(e) = setup() {
        let _ = std::fs::remove_dir_all(&top);
        return Outcome::Error(format!("harness: git setup: {e}"));
    }
    let payload = c.out.join("pwned-by-moved-repo");
    let mut spec = Sb::new(Cmd::Shell(format!(
        "mv '{r}' '{r}-moved' && mkdir -p '{wt}' && cd '{wt}' && git init -q && printf '%s' \"$PAYLOAD_CONFIG\" > .git/config; true",
        r = r.display(),
        wt = wt.display()
    )));
    spec.env = env.clone();
    spec.env
        .push(("PAYLOAD_CONFIG".into(), payload_config(&payload)));
    spec.env
        .push(("PAYLOAD".into(), payload.display().to_string()));
    // The journal a failed run keeps goes beside `out`, not into the user's state directory.
    spec.env.push((
        "XDG_STATE_HOME".into(),
        c.dir.join("home/.local/state").display().to_string(),
    ));
    spec.wt = Some(wt.clone());
    let run = c.sb(spec);
    let moved = top.join("r-moved").exists();
    let err = host_git_status(c, &wt);
    let ran = payload.exists();
    let _ = std::fs::remove_file(&payload);
    let _ = std::fs::remove_dir_all(&top);
    if !moved {
        return Outcome::Blocked(format!(
            "the repository could not be moved ({})",
            clip(run.stderr.trim(), 160)
        ));
    }
    if run.stderr.contains("hardening not enforced (git_location)") && run.stderr.contains("away") {
        return Outcome::Skip(format!(
            "Landlock cannot keep the repository from being moved: named at start and at exit (status {:?}){}",
            run.code,
            if ran { "; the host's git then ran the command's core.fsmonitor" } else { "" }
        ));
    }
    Outcome::Escaped(format!(
        "the repository was moved away unnoticed{} (git: {})",
        if ran {
            " and the host's git status ran the command's core.fsmonitor"
        } else {
            ""
        },
        clip(err.trim(), 80)
    ))
}
