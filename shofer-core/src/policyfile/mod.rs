//! The policy files — the user's `~/.config/shofer/config.toml` and a project's
//! `.shofer/config.toml` — and the flags, as one model: a [`Layer`] of settings, each value
//! with its [`Origin`]. Pure: the caller reads the files and passes their text.
//!
//! - [`Layer`]: every setting a flag or a file can give, unset by default.
//! - [`parse`]: a file's text to a [`parse::UserFile`] or [`parse::ProjectFile`] (`serde` +
//!   `toml`; an unknown key or a bad value is a [`FileError`] naming the file, the line and what
//!   is valid).
//! - [`narrow`]: a project's layer checked against the user's (it may only narrow) and merged.
//! - [`resolve`]: user file, profile, project file and flags to the effective layer; flags win
//!   (single values replace, lists add up).
//! - [`Layer::rows`]: the effective policy as `config show` prints it, value and origin.
//!
//! ```
//! use shofer_core::policyfile::{parse, resolve, Layer};
//! let user = parse::user("[network]\nmode = \"proxy\"\n", "/u/config.toml".as_ref(), None).unwrap();
//! let project = parse::project("[network]\nmode = \"deny\"\n", "/p/.shofer/config.toml".as_ref(), None).unwrap();
//! let eff = resolve(Some(&user), Some(&project), None, Layer::default(), None).unwrap();
//! assert_eq!(eff.net.unwrap().value, shofer_core::policy::NetPolicy::Deny);
//! // A project cannot open the network the user's file closed.
//! let wider = parse::project("[network]\nmode = \"allow\"\n", "/p/.shofer/config.toml".as_ref(), None).unwrap();
//! assert!(resolve(Some(&user), Some(&wider), None, Layer::default(), None).is_err());
//! ```

pub mod narrow;
pub mod parse;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::egress::Rule;
use crate::limits::{self, Setting};
use crate::policy::{Backend, NetPolicy};

/// Where a value came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    /// A line of a policy file, within a profile's table when `profile` is set.
    File {
        /// The file.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// The profile whose table held the value.
        profile: Option<String>,
    },
    /// A command-line flag.
    Flag(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File {
                path,
                line,
                profile: None,
            } => write!(f, "{}:{line}", path.display()),
            Origin::File {
                path,
                line,
                profile: Some(p),
            } => write!(f, "{}:{line} (profile {p})", path.display()),
            Origin::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Val<T> {
    /// The value.
    pub value: T,
    /// Its origin.
    pub origin: Origin,
}

impl<T> Val<T> {
    /// `value` given by `flag`.
    pub fn flag(value: T, flag: &'static str) -> Val<T> {
        Val {
            value,
            origin: Origin::Flag(flag),
        }
    }
}

/// A list setting: `None` when not given.
pub type List<T> = Option<Vec<Val<T>>>;

/// Every setting the flags and the files can give; `None` means not given here (the layer
/// below, or the default, applies).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Layer {
    /// `sandbox.backend` / `--backend`: `None` inside is `auto`.
    pub backend: Option<Val<Option<Backend>>>,
    /// `sandbox.allow_degraded` / `--allow-degraded`.
    pub allow_degraded: Option<Val<bool>>,
    /// `sandbox.allow_write` / `--allow-write`.
    pub allow_write: List<PathBuf>,
    /// `sandbox.allow_unix` / `--allow-unix`.
    pub allow_unix: List<PathBuf>,
    /// `sandbox.allow_read` / `--allow-read`: secret locations readable after all.
    pub allow_read: List<PathBuf>,
    /// `sandbox.hide` / `--hide`: more secret locations.
    pub hide: List<PathBuf>,
    /// `sandbox.keep_env` / `--keep-env`: secret variables passed on anyway.
    pub keep_env: List<String>,
    /// `network.mode` / `--net`.
    pub net: Option<Val<NetPolicy>>,
    /// `network.allow_domains` / `--allow-domain`.
    pub allow_domains: List<Rule>,
    /// `network.default_domains` / `--no-default-domains` (false).
    pub default_domains: Option<Val<bool>>,
    /// `limits.procs` / `--limit-procs`.
    pub limit_procs: Option<Val<Setting>>,
    /// `limits.memory` / `--limit-memory`.
    pub limit_memory: Option<Val<Setting>>,
    /// `limits.cpu` / `--limit-cpu`.
    pub limit_cpu: Option<Val<Setting>>,
    /// `sandbox.package_caches` / `--no-package-caches` (false): private copy-on-write views
    /// of package managers' caches.
    pub package_caches: Option<Val<bool>>,
    /// `timeouts.soft` / `shofer run --timeout`: seconds.
    pub soft_timeout: Option<Val<f64>>,
    /// `timeouts.hard` / `--hard-timeout`: seconds.
    pub hard_timeout: Option<Val<f64>>,
}

impl Layer {
    /// `self` with every value `top` gives replacing its own (a profile over the file's base
    /// tables; lists replace too).
    pub fn overlay(mut self, top: Layer) -> Layer {
        macro_rules! take {
            ($($f:ident),*) => { $( if top.$f.is_some() { self.$f = top.$f; } )* };
        }
        take!(
            backend,
            allow_degraded,
            allow_write,
            allow_unix,
            allow_read,
            hide,
            keep_env,
            net,
            allow_domains,
            default_domains,
            limit_procs,
            limit_memory,
            limit_cpu,
            package_caches,
            soft_timeout,
            hard_timeout
        );
        self
    }

    /// `self` with the flags' values: single values replace, lists add up (an item already
    /// there is not repeated).
    pub fn with_flags(mut self, flags: Layer) -> Layer {
        macro_rules! add {
            ($($f:ident),*) => { $(
                if let Some(items) = flags.$f {
                    let list = self.$f.get_or_insert_with(Vec::new);
                    for item in items {
                        if !list.iter().any(|v| v.value == item.value) {
                            list.push(item);
                        }
                    }
                }
            )* };
        }
        add!(
            allow_write,
            allow_unix,
            allow_read,
            hide,
            keep_env,
            allow_domains
        );
        self.overlay(Layer {
            allow_write: None,
            allow_unix: None,
            allow_read: None,
            hide: None,
            keep_env: None,
            allow_domains: None,
            ..flags
        })
    }

    /// The network policy (`allow` when not given).
    pub fn net(&self) -> NetPolicy {
        self.net.as_ref().map(|v| v.value).unwrap_or_default()
    }

    /// Whether any sandbox setting is given (they apply only to a sandboxed run).
    pub fn has_sandbox_settings(&self) -> bool {
        let plain = Layer {
            soft_timeout: self.soft_timeout.clone(),
            hard_timeout: self.hard_timeout.clone(),
            ..Layer::default()
        };
        *self != plain
    }

    /// The rows `shofer config show` prints: key, value, origin (`default` when not given).
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        let mut one = |key: &'static str, value: Option<(String, String)>, default: &str| {
            let (value, origin) = value.unwrap_or_else(|| (default.to_string(), "default".into()));
            rows.push(Row { key, value, origin });
        };
        let single = |v: Option<(String, &Origin)>| v.map(|(s, o)| (s, o.to_string()));
        one(
            "sandbox.backend",
            single(self.backend.as_ref().map(|v| {
                (
                    v.value.map_or("auto", Backend::as_str).to_string(),
                    &v.origin,
                )
            })),
            "auto",
        );
        one(
            "sandbox.allow_degraded",
            single(
                self.allow_degraded
                    .as_ref()
                    .map(|v| (v.value.to_string(), &v.origin)),
            ),
            "false",
        );
        fn list<T>(items: &List<T>, show: impl Fn(&T) -> String) -> Option<(String, String)> {
            let items = items.as_ref()?;
            let values: Vec<String> = items.iter().map(|v| show(&v.value)).collect();
            let mut origins: Vec<String> = Vec::new();
            for v in items {
                let o = v.origin.to_string();
                if !origins.contains(&o) {
                    origins.push(o);
                }
            }
            Some((format!("[{}]", values.join(", ")), origins.join("; ")))
        }
        let path = |p: &PathBuf| p.display().to_string();
        one("sandbox.allow_write", list(&self.allow_write, path), "[]");
        one("sandbox.allow_unix", list(&self.allow_unix, path), "[]");
        one("sandbox.allow_read", list(&self.allow_read, path), "[]");
        one("sandbox.hide", list(&self.hide, path), "[]");
        one(
            "sandbox.keep_env",
            list(&self.keep_env, String::clone),
            "[]",
        );
        one(
            "network.mode",
            single(
                self.net
                    .as_ref()
                    .map(|v| (v.value.as_str().to_string(), &v.origin)),
            ),
            "allow",
        );
        one(
            "network.allow_domains",
            list(&self.allow_domains, Rule::display),
            "[]",
        );
        one(
            "network.default_domains",
            single(
                self.default_domains
                    .as_ref()
                    .map(|v| (v.value.to_string(), &v.origin)),
            ),
            "true",
        );
        let setting = |v: &Option<Val<Setting>>, show: fn(u64) -> String| {
            single(v.as_ref().map(|v| {
                let s = match v.value {
                    Setting::Default => "default".to_string(),
                    Setting::Off => "off".to_string(),
                    Setting::Value(n) => show(n),
                };
                (s, &v.origin)
            }))
        };
        one(
            "limits.procs",
            setting(&self.limit_procs, |n| n.to_string()),
            "4096",
        );
        one(
            "limits.memory",
            setting(&self.limit_memory, limits::show_size),
            "three quarters of the machine's",
        );
        one(
            "limits.cpu",
            setting(&self.limit_cpu, |n| n.to_string()),
            "off",
        );
        let secs =
            |v: &Option<Val<f64>>| single(v.as_ref().map(|v| (v.value.to_string(), &v.origin)));
        one("timeouts.soft", secs(&self.soft_timeout), "none");
        one("timeouts.hard", secs(&self.hard_timeout), "none");
        rows
    }
}

/// One row of [`Layer::rows`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The file's key (`network.mode`).
    pub key: &'static str,
    /// The value as the file would write it.
    pub value: String,
    /// `default`, `FILE:LINE` or `flag --net`.
    pub origin: String,
}

/// A policy file that cannot be used: the run does not start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileError {
    /// The file.
    pub path: PathBuf,
    /// The line, when the error has one.
    pub line: Option<usize>,
    /// What is wrong and what would be valid.
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for FileError {}

/// The effective policy: the user's file (its base tables, then the profile `--profile` or
/// its `profile` key selects) and the flags, narrowed by the project's file
/// ([`narrow::within`]: checked against the user's file *and* the flags, so that no flag
/// gives meaning to a setting of the project's — an allow-list under `--net proxy`), then the
/// flags again (they win). `mem_total` is the machine's memory (the default memory limit, for
/// the project's check).
///
/// # Errors
/// An unknown profile, or every way the project's file widens the user's policy.
pub fn resolve(
    user: Option<&parse::UserFile>,
    project: Option<&parse::ProjectFile>,
    profile_flag: Option<&str>,
    flags: Layer,
    mem_total: Option<u64>,
) -> Result<Layer, FileError> {
    let pick = |name: &str, by: &dyn fmt::Display| -> Result<Layer, FileError> {
        let Some(user) = user else {
            return Err(FileError {
                path: PathBuf::from("(no user policy file)"),
                line: None,
                message: format!(
                    "profile {name:?} ({by}) is not defined: there is no user policy file to define it"
                ),
            });
        };
        user.profiles.get(name).cloned().ok_or_else(|| FileError {
            path: user.path.clone(),
            line: None,
            message: format!(
                "profile {name:?} ({by}) is not defined here; defined: {}",
                defined(user)
            ),
        })
    };
    let mut mine = user.map(|u| u.base.clone()).unwrap_or_default();
    let chosen = match (profile_flag, user.and_then(|u| u.profile.as_ref())) {
        (Some(name), _) => Some(pick(name, &"flag --profile")?),
        (None, Some(v)) => Some(pick(&v.value, &v.origin)?),
        (None, None) => None,
    };
    if let Some(p) = chosen {
        mine = mine.overlay(p);
    }
    if let Some(project) = project {
        let mut theirs = Layer::default();
        if let (None, Some(v)) = (profile_flag, &project.profile) {
            theirs = pick(&v.value, &v.origin)?;
        }
        theirs = theirs.overlay(project.layer.clone());
        mine = mine.with_flags(flags.clone());
        mine = narrow::within(mine, theirs, mem_total).map_err(|problems| FileError {
            path: project.path.clone(),
            line: None,
            message: format!(
                "a project's policy file may only narrow the user's policy, and this one widens it:\n  {}",
                problems.join("\n  ")
            ),
        })?;
    }
    Ok(mine.with_flags(flags))
}

fn defined(user: &parse::UserFile) -> String {
    if user.profiles.is_empty() {
        "none".into()
    } else {
        user.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// A project's file of arbitrary bytes, parsed and narrowed against a user's file that grants
/// a little of everything: the `cargo fuzz` target `policy_file` and a proptest (no input may
/// panic; the file lies in the worktree, which the command writes).
pub fn fuzz_project_file(data: &[u8]) {
    const USER: &str = "[sandbox]\nallow_write = [\"/srv/a\"]\nkeep_env = [\"K\"]\n\
        [network]\nmode = \"proxy\"\nallow_domains = [\"a.example\"]\n\
        [limits]\nprocs = 100\n[timeouts]\nsoft = 5\nhard = 60\n\
        [profiles.p.network]\nmode = \"deny\"\n";
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let home = Some(Path::new("/home/u"));
    let user = parse::user(USER, Path::new("/u.toml"), home).ok();
    if let Ok(project) = parse::project(text, Path::new("/p.toml"), home) {
        let _ = resolve(
            user.as_ref(),
            Some(&project),
            None,
            Layer::default(),
            Some(1 << 34),
        );
        let _ = resolve(None, Some(&project), Some("p"), Layer::default(), None);
    }
}

/// `~` and `~/…` in a policy file's path, against `home`.
fn expand_home(text: &str, home: Option<&Path>) -> Option<PathBuf> {
    match text.strip_prefix('~') {
        Some("") => home.map(Path::to_path_buf),
        Some(rest) if rest.starts_with('/') => home.map(|h| h.join(&rest[1..])),
        _ => Some(PathBuf::from(text)),
    }
}

#[cfg(test)]
mod tests;
