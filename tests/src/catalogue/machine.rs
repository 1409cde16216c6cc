//! Host side — machine-level cases, run once per suite with `--backend auto`: the probe, a blocked
//! user namespace, an old bubblewrap, many rules, many worktrees.

use super::git::{git, git_env};
use super::{need_git, nothing, Case, Scope};
use crate::attacks::Attack;
use crate::runner::{chown_all, clip, unknown_protections, Cmd, Ctx, Outcome, Sb};
use shofer_core::policy::Protection;
use shofer_sys::landlock::LandlockAbsence;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

/// This family's cases, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        Case { scope: Scope::Global, ..case!("probe-matches-kernel", "field 5: --probe tells Landlock available / disabled (EOPNOTSUPP) / not built (ENOSYS) apart; it lists exactly the protections shofer-core knows", None, probe_matches) },
        Case { scope: Scope::Global, root_only: true, ..case!("userns-blocked-reason", "field 6: user.max_user_namespaces=0: userns fails with a one-line reason; auto still runs", None, userns_blocked) },
        Case { scope: Scope::Global, ..case!("old-bwrap-detected", "field 7: an old bwrap (0.3.0) on PATH is refused by version, never run", None, old_bwrap) },
        Case { scope: Scope::Global, ..case!("many-allow-write", "field 9: 1,000 --allow-write paths", None, many_allow_write) },
        Case { scope: Scope::Global, ..case!("many-linked-worktrees", "field 9: 300 linked worktrees in one repository", None, many_worktrees, needs = need_git) },
    ]
}

fn probe_matches(c: &Ctx) -> Outcome {
    let Some(p) = &c.w.probe else {
        return Outcome::Broken("--probe --json printed no JSON".into());
    };
    let mut bad = Vec::new();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if p["kernel"].as_str() != Some(kernel.trim()) {
        bad.push(format!("kernel {} != {}", p["kernel"], kernel.trim()));
    }
    bad.extend(unknown_protections(p));
    for key in Protection::ALL.map(Protection::key) {
        if !p["protections"][key]["enforced"].is_boolean() {
            bad.push(format!("protection {key} missing from --probe --json"));
        }
    }
    let ll = &p["landlock"];
    let (status, errno, abi) = match shofer_sys::landlock::abi() {
        Ok(n) => ("available", None, n),
        Err(LandlockAbsence::Disabled) => ("disabled", Some("EOPNOTSUPP"), 0),
        Err(_) => ("not-built", Some("ENOSYS"), 0),
    };
    if ll["status"].as_str() != Some(status) {
        bad.push(format!("landlock.status {} != {status}", ll["status"]));
    }
    if ll["abi"].as_u64() != Some(u64::from(abi)) {
        bad.push(format!("landlock.abi {} != {abi}", ll["abi"]));
    }
    if ll["errno"].as_str() != errno {
        bad.push(format!("landlock.errno {} != {errno:?}", ll["errno"]));
    }
    if abi == 0 {
        let mut spec = Sb::new(Cmd::Attack(Attack::Noop, vec![]));
        spec.raw_opts = true;
        spec.extra = vec!["--backend".into(), "landlock".into()];
        let run = c.sb(spec);
        if run.code != Some(125) || !run.stderr.starts_with("shofer-sandbox: ") {
            bad.push(format!(
                "--backend landlock without Landlock: {}",
                run.how()
            ));
        }
    }
    if bad.is_empty() {
        Outcome::Works(format!(
            "probe agrees with the kernel: landlock {status}, ABI {abi}"
        ))
    } else {
        Outcome::Broken(bad.join("; "))
    }
}

fn userns_blocked(c: &Ctx) -> Outcome {
    if let Some(p) = &c.w.probe {
        if p["user_namespaces"]["usable"].as_bool() == Some(false) {
            return Outcome::Skip(format!(
                "the sandbox's probe says the userns backend is not usable here ({}); field case 6 needs it",
                p["user_namespaces"]["reason"]
            ));
        }
    }
    // In a child user namespace with max_user_namespaces=0 (set only there).
    let mut spec = Sb::new(Cmd::Attack(Attack::Noop, vec![]));
    spec.raw_opts = true;
    spec.extra = vec!["--backend".into(), "userns".into()];
    spec.env
        .push(("SHOFER_CONTAINMENT_NOUSERNS".into(), "1".into()));
    let run = c.sb(spec);
    let err = run.stderr.trim().to_string();
    if err.contains("harness-nouserns:") {
        return Outcome::Skip(format!(
            "cannot build the test namespace: {}",
            clip(&err, 200)
        ));
    }
    let mut bad = Vec::new();
    if run.code != Some(125) {
        bad.push(format!(
            "--backend userns exited {:?}, expected 125",
            run.code
        ));
    }
    let lines: Vec<&str> = err.lines().collect();
    if lines.len() != 1 || !err.starts_with("shofer-sandbox: ") {
        bad.push(format!(
            "expected one 'shofer-sandbox: ' line, got {:?}",
            clip(&err, 300)
        ));
    }
    let low = err.to_lowercase();
    if !(low.contains("max_user_namespaces") || low.contains("user namespace")) {
        bad.push(format!(
            "the message does not name the cause: {}",
            clip(&err, 200)
        ));
    }
    if low.contains("uid_map") && !low.contains("max_user_namespaces") {
        bad.push("raw uid_map error".into());
    }
    if c.w.host_abi >= 3 {
        let mut spec = Sb::new(Cmd::Attack(Attack::Noop, vec![]));
        spec.raw_opts = true;
        spec.env
            .push(("SHOFER_CONTAINMENT_NOUSERNS".into(), "1".into()));
        let auto = c.sb(spec);
        if auto.code != Some(0) {
            bad.push(format!(
                "--backend auto with Landlock available failed there: {}",
                auto.how()
            ));
        }
    }
    if bad.is_empty() {
        Outcome::Works(format!(
            "userns refused with {err:?}; auto still runs on Landlock"
        ))
    } else if err.contains("unknown")
        || err.contains("not implemented")
        || err.contains("invalid value")
    {
        Outcome::Skip(format!(
            "userns backend not implemented yet: {}",
            clip(&err, 200)
        ))
    } else {
        Outcome::Broken(bad.join("; "))
    }
}

fn old_bwrap(c: &Ctx) -> Outcome {
    let real =
        c.w.probe
            .as_ref()
            .map(|p| p["bwrap"]["version"].clone())
            .unwrap_or_default();
    if real.is_null() {
        return Outcome::Skip("the sandbox's probe reports no bwrap at all (bwrap backend not built yet, or none installed)".into());
    }
    let fake = c.dir.join("fakebin");
    let _ = std::fs::create_dir_all(&fake);
    let bw = fake.join("bwrap");
    if std::fs::copy(&c.w.me, &bw).is_err() {
        return Outcome::Error("harness: copy fake bwrap".into());
    }
    let _ = std::fs::set_permissions(&bw, std::fs::Permissions::from_mode(0o755));
    let _ = std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o777));
    let path = format!("{}:{}", fake.display(), c.w.path_env);
    let probe = Command::new(&c.w.sandbox)
        .args(["--probe", "--json"])
        .env_clear()
        .env("PATH", &path)
        .output();
    let probe: serde_json::Value = probe
        .ok()
        .and_then(|o| serde_json::from_slice(&o.stdout).ok())
        .unwrap_or_default();
    let mut bad = Vec::new();
    let bw = &probe["bwrap"];
    if bw["version"].as_str() != Some("0.3.0")
        && !bw["reason"].as_str().unwrap_or("").contains("0.3.0")
    {
        bad.push(format!(
            "probe did not read the fake's version: {}",
            probe["bwrap"]
        ));
    }
    if probe["bwrap"]["usable"].as_bool() != Some(false) {
        bad.push("probe calls bwrap 0.3.0 usable".into());
    }
    let mut spec = Sb::new(Cmd::Attack(Attack::Noop, vec![]));
    spec.raw_opts = true;
    spec.extra = vec!["--backend".into(), "bwrap".into()];
    spec.env.push(("PATH".into(), path));
    let run = c.sb(spec);
    if run.code != Some(125) {
        bad.push(format!("--backend bwrap with bwrap 0.3.0: {}", run.how()));
    }
    let log = std::fs::read_to_string(fake.join("bwrap.log")).unwrap_or_default();
    if log.lines().any(|l| l.contains("attack")) {
        bad.push(format!(
            "the old bwrap was run with the command: {}",
            clip(&log, 200)
        ));
    }
    if bad.is_empty() {
        Outcome::Works(format!(
            "refused by version: {}",
            clip(run.stderr.trim(), 200)
        ))
    } else {
        Outcome::Broken(bad.join("; "))
    }
}

fn many_allow_write(c: &Ctx) -> Outcome {
    let base = c.dir.join("many");
    let mut extra = Vec::new();
    for i in 0..1000 {
        let d = base.join(format!("d{i:04}"));
        if std::fs::create_dir_all(&d).is_err() {
            return Outcome::Error("harness: mkdir".into());
        }
        extra.push("--allow-write".into());
        extra.push(d.display().to_string());
    }
    let (u, g) = c.cell.user.ids();
    chown_all(&base, u, g);
    let last = base.join("d0999/written");
    let mut spec = Sb::new(Cmd::AttackRaw(
        Attack::WriteFile,
        vec![last.display().to_string()],
    ));
    spec.raw_opts = true;
    spec.extra = extra.clone();
    let run = c.sb(spec);
    if !last.exists() {
        return Outcome::Broken(format!(
            "write into the 1,000th --allow-write dir failed: {}",
            run.how()
        ));
    }
    let mut spec = Sb::new(Cmd::AttackRaw(
        Attack::DenyWrite,
        vec![base.join("not-listed").display().to_string()],
    ));
    spec.raw_opts = true;
    spec.extra = extra;
    match c.sb(spec).outcome() {
        Outcome::Blocked(_) => Outcome::Works(
            "1,000 --allow-write paths: the last is writable, their parent is not".into(),
        ),
        Outcome::Escaped(d) => Outcome::Escaped(format!(
            "with 1,000 --allow-write paths their parent became writable: {d}"
        )),
        o => o,
    }
}

fn many_worktrees(c: &Ctx) -> Outcome {
    let env = git_env(&c.dir);
    let repo = c.dir.join("repo");
    let _ = std::fs::create_dir_all(c.dir.join("home"));
    let setup = || -> Result<PathBuf, String> {
        std::fs::create_dir_all(&repo).map_err(|e| e.to_string())?;
        git(c.w, &env, &repo, &["init", "-q", "-b", "main"])?;
        std::fs::write(repo.join("README"), b"x\n").map_err(|e| e.to_string())?;
        git(c.w, &env, &repo, &["add", "README"])?;
        git(c.w, &env, &repo, &["commit", "-qm", "init"])?;
        let mut last = PathBuf::new();
        for i in 0..300 {
            last = c.dir.join(format!("w{i:03}"));
            git(
                c.w,
                &env,
                &repo,
                &[
                    "worktree",
                    "add",
                    "-q",
                    "--detach",
                    &last.display().to_string(),
                ],
            )?;
        }
        Ok(last)
    };
    let last = match setup() {
        Ok(l) => l,
        Err(e) => return Outcome::Error(format!("harness: 300 worktrees: {e}")),
    };
    let git_bin =
        c.w.git
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
    let mut spec = Sb::new(Cmd::Argv(vec![
        git_bin,
        "-C".into(),
        last.display().to_string(),
        "commit".into(),
        "-q".into(),
        "--allow-empty".into(),
        "-m".into(),
        "in 300th".into(),
    ]));
    spec.raw_opts = true;
    spec.wt = Some(last.clone());
    spec.env = env.clone();
    let run = c.sb(spec);
    if run.code == Some(0) {
        Outcome::Works("git commit in the 300th linked worktree worked".into())
    } else {
        Outcome::Broken(format!(
            "git commit in the 300th linked worktree: {}",
            run.how()
        ))
    }
}
