//! A project's policy file may only narrow the user's: [`within`] checks every setting it
//! gives against the user's effective policy and merges it, or lists every way it widens.
//!
//! | setting | the project may |
//! |---|---|
//! | `sandbox.backend` | name the user's own choice only (any other may be weaker) |
//! | `sandbox.allow_degraded` | say `false` |
//! | `sandbox.allow_write`, `allow_unix`, `allow_read`, `keep_env` | keep a subset of the user's |
//! | `sandbox.hide` | add locations (they join the user's) |
//! | `sandbox.package_caches` | either (private views never reach the host's caches) |
//! | `network.mode` | close it further: `deny` < `proxy` < `allow` |
//! | `network.allow_domains`, `default_domains` | under the user's `proxy`: a subset |
//! | `limits.*` | ask for at most the user's (the default counts as the user's) |
//! | `timeouts.hard` | ask for at most the user's (any, when the user has none) |
//! | `timeouts.soft` | shorten the user's (none, when the user has none: it detaches commands) |

use std::path::PathBuf;

use super::{Layer, List, Origin, Val};
use crate::egress::Rule;
use crate::limits::{Limits, Setting};
use crate::policy::NetPolicy;

/// `user` narrowed by `project`; `mem_total` resolves the default memory limit.
///
/// # Errors
/// One line per setting of `project` that would widen `user`, naming where it is written.
pub fn within(user: Layer, project: Layer, mem_total: Option<u64>) -> Result<Layer, Vec<String>> {
    let mut problems = Problems::default();
    let mut merged = user.clone();
    let path = |p: &PathBuf| p.display().to_string();

    if let Some(b) = &project.backend {
        let mine = user.backend.as_ref().and_then(|v| v.value);
        if b.value != mine {
            let asked = b.value.map_or("auto", |b| b.as_str());
            problems.add(
                &b.origin,
                format!("sandbox.backend {asked}: only the user's file or --backend chooses the backend (another may enforce less)"),
            );
        }
    }
    if let Some(d) = &project.allow_degraded {
        let mine = user.allow_degraded.as_ref().is_some_and(|v| v.value);
        if d.value && !mine {
            problems.add(
                &d.origin,
                "sandbox.allow_degraded = true: only the user's file or --allow-degraded accepts a degraded run".into(),
            );
        } else {
            merged.allow_degraded = Some(d.clone());
        }
    }
    subset(
        "sandbox.allow_write",
        &user.allow_write,
        &project.allow_write,
        &mut merged.allow_write,
        &mut problems,
        path,
    );
    subset(
        "sandbox.allow_unix",
        &user.allow_unix,
        &project.allow_unix,
        &mut merged.allow_unix,
        &mut problems,
        path,
    );
    subset(
        "sandbox.allow_read",
        &user.allow_read,
        &project.allow_read,
        &mut merged.allow_read,
        &mut problems,
        path,
    );
    subset(
        "sandbox.keep_env",
        &user.keep_env,
        &project.keep_env,
        &mut merged.keep_env,
        &mut problems,
        String::clone,
    );
    if project.package_caches.is_some() {
        merged.package_caches = project.package_caches.clone();
    }
    if let Some(more) = &project.hide {
        merged
            .hide
            .get_or_insert_with(Vec::new)
            .extend(more.iter().cloned());
    }

    let mine = user.net();
    if let Some(n) = &project.net {
        if n.value.openness() > mine.openness() {
            let (asked, mine) = (n.value.as_str(), mine.as_str());
            problems.add(
                &n.origin,
                format!("network.mode {asked}: the user's policy is {mine} (a project may only close the network further: deny < proxy < allow)"),
            );
        } else {
            merged.net = Some(n.clone());
        }
    }
    // The allow-list narrows only under the user's proxy; under `allow` anything the project
    // lists is less than everything, under `deny` it is unused.
    if mine == NetPolicy::Proxy {
        subset(
            "network.allow_domains",
            &user.allow_domains,
            &project.allow_domains,
            &mut merged.allow_domains,
            &mut problems,
            Rule::display,
        );
        if let Some(d) = &project.default_domains {
            let user_default = user.default_domains.as_ref().is_none_or(|v| v.value);
            if d.value && !user_default {
                problems.add(
                    &d.origin,
                    "network.default_domains = true: the user's policy leaves the default list out"
                        .into(),
                );
            } else {
                merged.default_domains = Some(d.clone());
            }
        }
    } else {
        if project.allow_domains.is_some() {
            merged.allow_domains = project.allow_domains.clone();
        }
        if project.default_domains.is_some() {
            merged.default_domains = project.default_domains.clone();
        }
    }

    let setting = |v: &Option<Val<Setting>>| v.as_ref().map_or(Setting::Default, |v| v.value);
    let limits = Limits::resolve(
        setting(&user.limit_procs),
        setting(&user.limit_memory),
        setting(&user.limit_cpu),
        mem_total,
    );
    for (key, theirs, mine, slot) in [
        (
            "limits.procs",
            &project.limit_procs,
            limits.procs,
            &mut merged.limit_procs,
        ),
        (
            "limits.memory",
            &project.limit_memory,
            limits.memory,
            &mut merged.limit_memory,
        ),
        (
            "limits.cpu",
            &project.limit_cpu,
            limits.cpu_percent,
            &mut merged.limit_cpu,
        ),
    ] {
        let Some(t) = theirs else { continue };
        let asked = match t.value {
            Setting::Value(v) => Some(v),
            _ => None,
        };
        if at_most(asked, mine) {
            *slot = Some(t.clone());
        } else {
            let shown = |v: Option<u64>| match v {
                None => "off".to_string(),
                Some(n) if key == "limits.memory" => crate::limits::show_size(n),
                Some(n) => n.to_string(),
            };
            problems.add(
                &t.origin,
                format!(
                    "{key} {}: more than the user's {}",
                    shown(asked),
                    shown(mine)
                ),
            );
        }
    }
    // A hard timeout only ends a command sooner. A soft one sends it to the background, where
    // it outlives `shofer run`: a project may only shorten the user's.
    for (key, theirs, slot, none_is_infinite) in [
        (
            "timeouts.soft",
            &project.soft_timeout,
            &mut merged.soft_timeout,
            false,
        ),
        (
            "timeouts.hard",
            &project.hard_timeout,
            &mut merged.hard_timeout,
            true,
        ),
    ] {
        let Some(t) = theirs else { continue };
        let mine = slot.as_ref().map(|v| v.value);
        if mine.map_or(none_is_infinite, |m| t.value <= m) {
            *slot = Some(t.clone());
        } else {
            let what = match mine {
                Some(m) => format!("{key} {}: longer than the user's {m}", t.value),
                None => format!(
                    "{key} {}: the user's policy has none (a soft timeout leaves the command running after shofer returns)",
                    t.value
                ),
            };
            problems.add(&t.origin, what);
        }
    }
    if problems.0.is_empty() {
        Ok(merged)
    } else {
        Err(problems.in_file_order())
    }
}

/// The ways a project's file widens the user's policy, each with the line it is written on.
#[derive(Default)]
struct Problems(Vec<(usize, String)>);

impl Problems {
    /// `what` is wrong with the setting written at `at`.
    fn add(&mut self, at: &Origin, what: String) {
        let line = match at {
            Origin::File { line, .. } => *line,
            Origin::Flag(_) => usize::MAX,
        };
        self.0.push((line, format!("{at}: {what}")));
    }

    /// The lines, in the file's order.
    fn in_file_order(mut self) -> Vec<String> {
        self.0.sort_by_key(|(line, _)| *line);
        self.0.into_iter().map(|(_, p)| p).collect()
    }
}

/// Whether `asked` (`None`: no limit) is at most `mine` (`None`: no limit).
fn at_most(asked: Option<u64>, mine: Option<u64>) -> bool {
    match (asked, mine) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(a), Some(m)) => a <= m,
    }
}

/// The project's list `theirs` replaces `slot` when each item is one of `mine`'s.
fn subset<T: PartialEq + Clone>(
    key: &str,
    mine: &List<T>,
    theirs: &List<T>,
    slot: &mut List<T>,
    problems: &mut Problems,
    show: impl Fn(&T) -> String,
) {
    let Some(theirs) = theirs else { return };
    let mut ok = true;
    for v in theirs {
        let known = mine
            .as_ref()
            .is_some_and(|m| m.iter().any(|u| u.value == v.value));
        if !known {
            ok = false;
            problems.add(
                &v.origin,
                format!(
                    "{key} {}: not in the user's {key} (only the user's file or a flag can add it)",
                    show(&v.value)
                ),
            );
        }
    }
    if ok {
        *slot = Some(theirs.clone());
    }
}
