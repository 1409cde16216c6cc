//! The `--report` record's `git` section: the repository's layout, each protected path with
//! how it is protected on this run, the guard and the object store's protection, and what is
//! not enforced. Reads the run's decisions ([`super::Run`]); decides nothing.

use serde_json::{json, Value};

use crate::report;

use super::layout::GitLayout;
use super::repo::Repo;
use super::run::GitRun;

/// The `git` section of the `--report` record for `repo` on this run.
pub(super) fn section(repo: &Repo, git_run: &GitRun, packed_refs_by_gate: bool) -> Value {
    let git = match &repo.layout {
        GitLayout::None => json!({"layout": "none"}),
        GitLayout::MainWorktree => json!({"layout": "main-worktree",
            "note": "the .git directory is inside the worktree and therefore writable"}),
        GitLayout::Linked { gitdir, common } => {
            json!({"layout": "linked", "gitdir": report::path(gitdir), "common": report::path(common)})
        }
        GitLayout::Rejected(why) => {
            json!({"layout": "rejected", "reason": why})
        }
    };
    let mut git = git;
    git["protected"] = protected(repo, git_run, packed_refs_by_gate);
    let (guarded, unguarded) = git_run.guarded();
    git["guarded"] = report::paths(&guarded);
    git["unguarded"] = json!(unguarded);
    let mut notes = repo.controls.notes.clone();
    notes.extend(git_run.objects_note().map(str::to_string));
    git["notes"] = json!(notes);
    git["objects"] = if let Some(q) = &git_run.quarantine {
        json!(format!("read-only: the store is bound read-only (a deletion or rewrite fails); the command's git writes new objects to a quarantine outside the repository, {}, bound over objects/ with the store as its alternate; when the run ends each new loose object is re-hashed (git's header, exact size) and copied into the store by the supervisor, each new pack written into the store by git index-pack --stdin --fsck-objects (its own index), and only what verifies enters the store (never over an existing object, never a file of the command's); while it runs, loose objects up to 4 MiB are copied into the store every 200 ms (verified copies), larger objects and packs are not visible to the host's git until it ends", q.dir.display()))
    } else if git_run.remountable {
        json!("existing packs: read-only bind mounts, which the command can remount read-write (bubblewrap keeps CAP_SYS_ADMIN for --keep-caps); loose objects: recorded before the run (inode, size, ctime) and re-hashed after it when touched; a deleted or rewritten object is named, on stderr and in a closing git_restore record, and the run exits 125")
    } else if git_run.structural {
        json!("existing packs: read-only bind mounts; loose objects: recorded before the run (inode, size, ctime) and re-hashed after it when touched; a deleted or rewritten object is named, on stderr and in a closing git_restore record, and the run exits 125")
    } else {
        json!("recorded before the run (loose objects: inode, size, ctime; packs: checksums, the old index kept open) and checked after it: a deleted or rewritten object is named, on stderr and in a closing git_restore record, and the run exits 125; not prevented while the command runs")
    };
    git["guard"] = if git_run.remountable {
        json!("read-only bind mounts, which the command can remount read-write (bubblewrap keeps CAP_SYS_ADMIN for --keep-caps): checked by the guard at exit only")
    } else if git_run.structural {
        json!("read-only bind mounts: the command can neither write, replace, rename nor remove a protected path, during the run or after it; the guard still checks them at exit")
    } else {
        json!({
            "how": "restored at once when changed (inotify watcher), again when the command ends; unpredictable O_EXCL temporary names; a journal outside the writable set lets the next run or `shofer-sandbox --repair WT` finish a restore a killed supervisor left; a failed restore is an error on stderr, a closing `git_restore` record here and exit status 125",
            "window": "between the command's write and the restore (the inotify latency plus one restore, usually well under a millisecond; up to 200 ms for a write through a shared memory mapping, which raises no inotify event) a host git can read the command's version; a command that rewrites in a loop keeps that window recurring",
            "journal": git_run.journal.as_deref().map_or(Value::Null, report::path),
            "journal_missing": git_run.journal_missing,
        })
    };
    if let Some(v) = &git_run.view {
        git["view"] = json!({
            "how": "private view: the command's git works on a copy of the control files (config, hooks/, info/, HEAD, refs, packed-refs, logs/, the worktrees' state) bound over the common dir, with the object quarantine inside it; the host's git reads none of it during the run; when the command ends, refs this worktree may move (its branch, refs its runs created; never a branch another worktree has checked out, never refs/stash) are moved with git update-ref --stdin against the values the run started from, hooks off; its HEAD, index (after the nested check) and reflog are put in place; everything else stays private to this worktree's runs and is named",
            "dir": report::path(&v.dir),
        });
    }
    git["not_enforced"] = json!([
        {"what": "hard links", "reason": "a hard link the command can reach that points to a file outside the worktree (a local clone's objects, a pnpm/uv store) is the same inode: writes through it change the outside file; path-based rules (Landlock, bind mounts) cannot tell. Avoid: `git clone --no-hardlinks`, pnpm `package-import-method=copy`, uv `--link-mode=copy`"},
        {"what": "nested repositories", "reason": "a repository the command creates inside the worktree (with its own config) is run by a host git only through a gitlink the command adds to the index; shofer does not remove it: review `git status` for new submodules before committing"},
        {"what": "in-tree scripts run by hooks", "reason": "hooks that run files of the worktree (lefthook.yml, npm scripts, Makefiles) run what the command wrote"},
    ]);
    // With the private view the host's index gains no gitlink during the run: only those it
    // listed before are exposed.
    let reason = match &git_run.view {
        Some(_) => format!("{} (private view: only through gitlinks the repository's index listed before the run; the command's own reach the host's index when the run has ended and been checked)", super::guard::NESTED_GAP),
        None => super::guard::NESTED_GAP.to_string(),
    };
    if let Some(rows) = git["not_enforced"].as_array_mut() {
        rows.push(json!({"what": "nested repositories during the run", "key": "nested_repositories_during_run", "reason": reason}));
    }
    git
}

/// Each protected path with how it is protected on this run.
fn protected(repo: &Repo, git_run: &GitRun, packed_refs_by_gate: bool) -> Value {
    let c = &repo.controls;
    let how_ro = if git_run.remountable {
        "read-only bind mount, remountable by the command (--keep-caps under bubblewrap); checked at exit"
    } else if git_run.structural {
        "read-only bind mount"
    } else {
        "guard (restored at once)"
    };
    // An absent name without a placeholder has no bind to cover it (protect::HOST_TOOL_FILES).
    let absent = "absent: what the command makes here is removed as soon as the guard's watcher sees it, and when the command ends";
    let mut out: Vec<Value> = c
        .read_only
        .iter()
        .map(|r| {
            let how = if git_run.structural
                && r.placeholder.is_none()
                && std::fs::symlink_metadata(&r.path).is_err()
            {
                absent
            } else {
                how_ro
            };
            json!({"path": r.path.to_string_lossy(), "what": r.what, "how": how})
        })
        .collect();
    for p in &c.pinned {
        out.push(json!({"path": p.to_string_lossy(), "what": ".git directory (must stay where it is)",
            "how": if git_run.structural { "bind mount (cannot be renamed or removed)" } else { "guard (moved back)" }}));
    }
    match (&c.common, git_run.structural) {
        (Some(layer), true) => {
            for r in &layer.read_only {
                out.push(json!({"path": r.path.to_string_lossy(), "what": r.what, "how": how_ro}));
            }
            out.push(json!({"path": layer.common.to_string_lossy(), "what": "the common dir's top level (config, hooks/, info/, the main worktree's state)",
                "how": format!("{how_ro} (objects/, refs/ and logs/ writable beneath it)")}));
            out.push(json!({"path": layer.common.join("packed-refs").to_string_lossy(), "what": "packed-refs",
                "how": "replaced only through git's lock protocol, performed by the supervisor"}));
        }
        (_, false) if c.common_beneath.is_some() => {
            let root = c
                .common_beneath
                .as_deref()
                .unwrap_or(std::path::Path::new("/"));
            for (p, what) in &c.outside {
                let how = if p.file_name() == Some("packed-refs".as_ref()) {
                    format!(
                        "writable: the common dir lies inside the writable path {}",
                        root.display()
                    )
                } else {
                    format!(
                        "guard (restored at once): the common dir lies inside the writable path {}",
                        root.display()
                    )
                };
                out.push(json!({"path": p.to_string_lossy(), "what": what, "how": how}));
            }
        }
        _ => {
            for (p, what) in &c.outside {
                let how = if packed_refs_by_gate && p.file_name() == Some("packed-refs".as_ref()) {
                    "outside the writable set; the supervisor performs git's lock protocol for the command (seccomp user notification): only packed-refs.lock and packed-refs.new created with O_EXCL in this directory, renamed onto packed-refs, or removed; config.lock created the same way, and its rename onto config answered only when the bytes are unchanged (the lock is removed, config stays)"
                } else {
                    "outside the writable set"
                };
                out.push(json!({"path": p.to_string_lossy(), "what": what, "how": how}));
            }
        }
    }
    if git_run.structural {
        for (p, root) in &c.ancestors {
            out.push(json!({"path": p.to_string_lossy(),
                "what": format!("a directory above the worktree or the repository, inside the writable path {}", root.display()),
                "how": "bind mount (cannot be renamed or removed)"}));
        }
    } else {
        for (p, root) in repo.inside_writable(git_run.worktree()) {
            out.push(json!({"path": p.to_string_lossy(),
                "what": format!("where the repository is: inside the writable path {}", root.display()),
                "how": "not enforced (Landlock cannot keep it, or a directory above it, from being renamed): checked when the command ends"}));
        }
    }
    if git_run.structural {
        for p in &c.packs {
            out.push(json!({"path": p.to_string_lossy(), "what": "an existing pack", "how": "read-only bind mount"}));
        }
    }
    Value::Array(out)
}
