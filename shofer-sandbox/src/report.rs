//! The `--probe --json` object and the `--report FD` record (ARCHITECTURE §2.5).
//!
//! Both come from the same function, so what a real run reports and what the probe predicts
//! cannot drift apart. Known kernel limits are listed as not enforced, never left out.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use shofer_core::policy::{NetPolicy, Protection, Verdict};

use crate::backend::{Choice, Facts};
use crate::error::SetupError;
use crate::writable::OpenedPolicy;
use shofer_sys::errno;
use shofer_sys::landlock::LandlockAbsence;

/// `p` as a report's text. JSON holds text only: a byte that is not UTF-8 is shown as U+FFFD
/// (`serde_json` refuses such a path; a name the command chose must not stop the record).
pub(crate) fn path(p: &Path) -> Value {
    Value::String(p.to_string_lossy().into_owned())
}

/// [`path`] of each.
pub(crate) fn paths<'a>(ps: impl IntoIterator<Item = &'a PathBuf>) -> Value {
    ps.into_iter().map(|p| path(p)).collect()
}

fn landlock_json(facts: &Facts) -> Value {
    let (abi, status, errno) = match facts.landlock {
        Ok(abi) => (abi, "available", Value::Null),
        Err(LandlockAbsence::NotBuilt) => (0, "not-built", json!("ENOSYS")),
        Err(LandlockAbsence::Disabled) => (0, "disabled", json!("EOPNOTSUPP")),
        Err(LandlockAbsence::Other(e)) => (0, "error", json!(errno::name_or_number(e))),
    };
    json!({"abi": abi, "status": status, "errno": errno})
}

fn protections_json(verdicts: &[(Protection, Verdict)], net: NetPolicy) -> Value {
    let mut map = Map::new();
    for (p, v) in verdicts {
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
            map.insert("protections".into(), protections_json(&c.verdicts, net));
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

/// The report's `limits` section: each limit's value, how it holds or why not, and the run's
/// cgroup that holds it (`cgroup`, when one does).
pub fn limits(rows: &[crate::limits::Row]) -> Value {
    let limits: serde_json::Map<String, Value> = rows
        .iter()
        .map(|r| {
            let mut row = match &r.how {
                Ok(how) => json!({"value": r.value, "status": "enforced", "how": how}),
                Err(why) => json!({"value": r.value, "status": "not_enforced", "reason": why}),
            };
            if let Some(dir) = &r.cgroup {
                row["cgroup"] = path(dir);
            }
            (r.key.to_string(), row)
        })
        .collect();
    Value::Object(limits)
}

/// The record of a real run: the probe object for the chosen backend, plus the worktree,
/// the writable set, the `--allow-unix` paths, `git`, git's section
/// (`crate::git::Run::report`), and `env_withheld`, the names of the secret variables the
/// command does not get (`crate::secretenv`; never a value; `[]` when none).
pub fn run(
    facts: &Facts,
    choice: &Choice,
    opened: &OpenedPolicy,
    git: Value,
    allow_unix: &[std::path::PathBuf],
    env_withheld: &[String],
    secrets: &crate::secretpaths::Resolved,
) -> Value {
    let mut obj = probe(facts, &Ok(choice.clone()), opened.policy.net);
    let map = obj.as_object_mut().expect("object literal");
    map.insert("worktree".into(), path(&opened.policy.worktree));
    map.insert("allow_unix".into(), paths(allow_unix));
    map.insert(
        "writable".into(),
        Value::Array(
            opened
                .policy
                .writable
                .iter()
                .map(|r| json!({"path": path(&r.path), "origin": r.origin.as_str(), "dir": r.is_dir}))
                .collect(),
        ),
    );
    map.insert("git".into(), git);
    map.insert("env_withheld".into(), json!(env_withheld));
    // Where the backend does not hide them (no Landlock layer, bubblewrap with --keep-caps), every location is
    // readable: listed as such, with the row's reason.
    let hiding = choice
        .verdicts
        .iter()
        .any(|(p, v)| *p == shofer_core::policy::Protection::SecretsHidden && v.is_enforced());
    let mut left: Vec<Value> = secrets
        .not_hidden
        .iter()
        .map(|(p, why)| json!({"path": path(p), "why": why}))
        .collect();
    if !hiding {
        left.extend(
            secrets
                .hidden
                .iter()
                .map(|p| json!({"path": path(p), "why": "this backend does not hide secret locations (see protections.secrets_hidden)"})),
        );
    }
    let hidden: &[PathBuf] = if hiding { &secrets.hidden } else { &[] };
    map.insert(
        "secrets".into(),
        json!({"hidden": paths(hidden), "left_readable": left}),
    );
    obj
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
    if let Some(l) = v["limits"].as_object() {
        for (k, e) in l {
            let state = if e["status"] == json!("enforced") {
                format!("enforced by {}", s(&e["how"]))
            } else {
                format!("NOT enforced: {}", s(&e["reason"]))
            };
            out += &format!(
                "  {:<24} {state}\n",
                format!("limit_{k} {}", s(&e["value"]))
            );
        }
    }
    out
}

/// The second `--report` record, written when the command has ended and the unix-socket gate
/// refused something: `{"unix_refused": [paths, in order, each once]}`.
pub fn unix_refused(paths: &[String]) -> Value {
    json!({ "unix_refused": paths })
}

/// The closing record of a `--net proxy` run: the destinations its proxy refused, each once,
/// with the reason.
pub fn net_refused(refused: &[crate::egress::decide::Refusal]) -> Value {
    let list: Vec<Value> = refused
        .iter()
        .map(|r| json!({ "destination": r.destination, "reason": r.reason }))
        .collect();
    json!({ "net_refused": list })
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
