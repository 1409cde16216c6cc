//! The `--probe --json` object and the `--report FD` record (ARCHITECTURE §2.5).
//!
//! Both come from the same function, so what a real run reports and what the probe predicts
//! cannot drift apart. Known kernel limits are listed as not enforced, never left out.

use serde_json::{json, Map, Value};
use shofer_core::policy::{Backend, NetPolicy, Verdict};

use crate::backend::{Choice, Facts};
use crate::error::SetupError;
use crate::writable::OpenedPolicy;
use shofer_sys::errno;
use shofer_sys::landlock::LandlockAbsence;

fn landlock_json(facts: &Facts) -> Value {
    let (abi, status, errno) = match facts.landlock {
        Ok(abi) => (abi, "available", Value::Null),
        Err(LandlockAbsence::NotBuilt) => (0, "not-built", json!("ENOSYS")),
        Err(LandlockAbsence::Disabled) => (0, "disabled", json!("EOPNOTSUPP")),
        Err(LandlockAbsence::Other(e)) => (0, "error", json!(errno::name_or_number(e))),
    };
    json!({"abi": abi, "status": status, "errno": errno})
}

fn protections_json(facts: &Facts, backend: Backend, abi: u32, net: NetPolicy) -> Value {
    let mut map = Map::new();
    for (p, v) in facts.protections(backend, abi, net) {
        let tier = p.tier(net).as_str();
        let entry = match v {
            Verdict::Enforced(by) => json!({"enforced": true, "by": by, "tier": tier}),
            Verdict::NotEnforced(reason) => {
                json!({"enforced": false, "reason": reason, "tier": tier})
            }
            Verdict::NotRequested => json!({"enforced": false, "requested": false, "tier": tier}),
        };
        map.insert(p.key().to_string(), entry);
    }
    Value::Object(map)
}

/// The probe object: kernel facts, the backend `auto` would pick (or why none), and what that
/// backend enforces.
pub fn probe(facts: &Facts, choice: &Result<Choice, SetupError>, net: NetPolicy) -> Value {
    let mut obj = json!({
        "kernel": facts.kernel,
        "landlock": landlock_json(facts),
        "user_namespaces": match facts.userns_if_probed() {
            None => json!({"usable": null, "reason": "not probed (not needed for this decision)"}),
            Some(Ok(())) => json!({"usable": true, "reason": null}),
            Some(Err(why)) => json!({"usable": false, "reason": why}),
        },
        "bwrap": match facts.bwrap_if_probed() {
            None => json!({"path": null, "version": null, "usable": null, "reason": "not probed (not needed for this decision)"}),
            Some(Ok(b)) => json!({"path": b.path, "version": b.version, "usable": true, "reason": null}),
            Some(Err(why)) => json!({"path": null, "version": null, "usable": false, "reason": why}),
        },
    });
    let map = obj.as_object_mut().expect("object literal");
    match choice {
        Ok(c) => {
            map.insert("backend".into(), json!(c.backend.as_str()));
            map.insert("backend_reason".into(), json!(c.reason));
            map.insert("effective_abi".into(), json!(c.abi));
            // Every protection this run lacks, required (accepted with --allow-degraded) and
            // hardening; each row's `tier` says which.
            map.insert(
                "degraded".into(),
                json!(c
                    .degraded
                    .iter()
                    .chain(&c.hardening)
                    .map(|(p, _)| p.key())
                    .collect::<Vec<_>>()),
            );
            map.insert(
                "protections".into(),
                protections_json(facts, c.backend, c.abi, net),
            );
        }
        Err(why) => {
            map.insert("backend".into(), Value::Null);
            map.insert("backend_reason".into(), json!(why.to_string()));
            map.insert("effective_abi".into(), json!(0));
            map.insert("degraded".into(), json!([]));
            map.insert("protections".into(), json!({}));
        }
    }
    obj
}

/// The record of a real run: the probe object for the chosen backend, plus the worktree,
/// the writable set, the `--allow-unix` paths and what was found of the worktree's git
/// metadata.
pub fn run(
    facts: &Facts,
    choice: &Choice,
    opened: &OpenedPolicy,
    git_run: &crate::git::run::GitRun,
    allow_unix: &[std::path::PathBuf],
    packed_refs_by_gate: bool,
) -> Value {
    let mut obj = probe(facts, &Ok(choice.clone()), opened.policy.net);
    let map = obj.as_object_mut().expect("object literal");
    map.insert("worktree".into(), json!(opened.policy.worktree));
    map.insert("allow_unix".into(), json!(allow_unix));
    map.insert(
        "writable".into(),
        Value::Array(
            opened
                .policy
                .writable
                .iter()
                .map(|r| json!({"path": r.path, "origin": r.origin.as_str(), "dir": r.is_dir}))
                .collect(),
        ),
    );
    let git = match &opened.git {
        crate::git::layout::GitLayout::None => json!({"layout": "none"}),
        crate::git::layout::GitLayout::MainWorktree => json!({"layout": "main-worktree",
            "note": "the .git directory is inside the worktree and therefore writable"}),
        crate::git::layout::GitLayout::Linked { gitdir, common } => {
            json!({"layout": "linked", "gitdir": gitdir, "common": common})
        }
        crate::git::layout::GitLayout::Rejected(why) => {
            json!({"layout": "rejected", "reason": why})
        }
    };
    let mut git = git;
    git["protected"] = git_protected(opened, git_run, packed_refs_by_gate);
    let (guarded, unguarded) = git_run.guarded();
    git["guarded"] = json!(guarded);
    git["unguarded"] = json!(unguarded);
    let mut notes = opened.controls.notes.clone();
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
            "journal": git_run.journal,
            "journal_missing": git_run.journal_missing,
        })
    };
    git["not_enforced"] = json!([
        {"what": "hard links", "reason": "a hard link the command can reach that points to a file outside the worktree (a local clone's objects, a pnpm/uv store) is the same inode: writes through it change the outside file; path-based rules (Landlock, bind mounts) cannot tell. Avoid: `git clone --no-hardlinks`, pnpm `package-import-method=copy`, uv `--link-mode=copy`"},
        {"what": "nested repositories", "reason": "a repository the command creates inside the worktree (with its own config) is run by a host git only through a gitlink the command adds to the index; shofer does not remove it: review `git status` for new submodules before committing"},
        {"what": "nested repositories during the run", "key": "nested_repositories_during_run", "reason": crate::git::guard::NESTED_GAP},
        {"what": "in-tree scripts run by hooks", "reason": "hooks that run files of the worktree (lefthook.yml, npm scripts, Makefiles) run what the command wrote"},
    ]);
    map.insert("git".into(), git);
    obj
}

/// Each protected path with how it is protected on this run.
fn git_protected(
    opened: &OpenedPolicy,
    git_run: &crate::git::run::GitRun,
    packed_refs_by_gate: bool,
) -> Value {
    let c = &opened.controls;
    let how_ro = if git_run.remountable {
        "read-only bind mount, remountable by the command (--keep-caps under bubblewrap); checked at exit"
    } else if git_run.structural {
        "read-only bind mount"
    } else {
        "guard (restored at once)"
    };
    let mut out: Vec<Value> = c
        .read_only
        .iter()
        .map(|r| json!({"path": r.path.to_string_lossy(), "what": r.what, "how": how_ro}))
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
        for (p, root) in opened.repository_inside_writable() {
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

/// Human-readable form of the probe, for `--probe` without `--json`.
pub fn probe_text(v: &Value) -> String {
    let mut out = String::new();
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    out += &format!("kernel:        {}\n", s(&v["kernel"]));
    out += &format!(
        "landlock:      {} (ABI {})\n",
        s(&v["landlock"]["status"]),
        s(&v["landlock"]["abi"])
    );
    out += &format!(
        "auto backend:  {} — {}\n",
        s(&v["backend"]),
        s(&v["backend_reason"])
    );
    if let Some(p) = v["protections"].as_object() {
        for (k, e) in p {
            let state = if e["enforced"] == json!(true) {
                format!("enforced by {}", s(&e["by"]))
            } else if e["requested"] == json!(false) {
                "not requested".to_string()
            } else {
                format!("NOT enforced: {}", s(&e["reason"]))
            };
            out += &format!("  {k:<24} {state}\n");
        }
    }
    out
}

/// The second `--report` record, written when the command has ended and the unix-socket gate
/// refused something: `{"unix_refused": [paths, in order, each once]}`.
pub fn unix_refused(paths: &[String]) -> Value {
    json!({ "unix_refused": paths })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiocsti(tiocsti_filter: bool) -> Value {
        let mut facts = Facts::fixed(Ok(7), Err("test".into()), Err("test".into()));
        facts.tiocsti_filter = tiocsti_filter;
        let choice = crate::backend::choose(
            crate::cli::BackendChoice::Auto,
            &facts,
            None,
            NetPolicy::Allow,
            true,
        );
        probe(&facts, &choice, NetPolicy::Allow)["protections"]["tiocsti"].clone()
    }

    #[test]
    fn tiocsti_is_reported_enforced_only_where_the_filter_exists() {
        assert_eq!(
            tiocsti(true),
            json!({"enforced": true, "by": "seccomp", "tier": "required"})
        );
        let without = tiocsti(false);
        assert_eq!(without["enforced"], json!(false), "{without}");
        assert!(
            without["reason"].as_str().unwrap().contains("x86-64"),
            "{without}"
        );
        // This build's own answer follows its architecture.
        assert_eq!(Facts::probe().tiocsti_filter, cfg!(target_arch = "x86_64"));
    }
}
