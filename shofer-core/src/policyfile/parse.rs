//! A policy file's text to a [`Layer`]: `serde` + `toml`, every key known (an unknown one is
//! an error that lists the valid ones), every value checked with the parser its flag uses.
//!
//! ```toml
//! profile = "offline"              # the profile used without --profile (user's file)
//! [sandbox]
//! backend = "auto"                 # auto, layered, userns, bwrap, landlock
//! allow_degraded = false
//! allow_write = ["~/.cache/ccache"]
//! allow_unix = ["/run/user/1000/ssh-agent.socket"]
//! allow_read = []                  # secret locations readable after all
//! hide = ["~/work/secrets"]        # more secret locations
//! keep_env = ["GH_TOKEN"]          # secret variables passed on anyway
//! package_caches = true            # private copy-on-write views of npm's, pip's, cargo's …
//! [network]
//! mode = "proxy"                   # allow, deny, proxy
//! allow_domains = ["git.example.com:443"]
//! default_domains = true
//! [limits]
//! procs = 4096                     # or "off"
//! memory = "8G"
//! cpu = 200                        # percent of one CPU
//! [timeouts]
//! soft = 30                        # seconds (shofer run)
//! hard = 600
//! [profiles.offline.network]       # a profile: the same tables, over the ones above
//! mode = "deny"
//! ```

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::{expand_home, FileError, Layer, Origin, Val};
use crate::egress::Rule;
use crate::limits::{self, Setting};
use crate::policy::{Backend, NetPolicy};

/// The user's file: its base tables, the profile it selects, and its profiles.
#[derive(Clone, Debug, PartialEq)]
pub struct UserFile {
    /// The file.
    pub path: PathBuf,
    /// The settings outside `[profiles]`.
    pub base: Layer,
    /// `profile = "…"`: the profile used when `--profile` is not given.
    pub profile: Option<Val<String>>,
    /// `[profiles.NAME]`.
    pub profiles: BTreeMap<String, Layer>,
}

/// A project's file: settings that may only narrow the user's.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectFile {
    /// The file.
    pub path: PathBuf,
    /// Its settings.
    pub layer: Layer,
    /// `profile = "…"`: one of the user's profiles, under this file's settings.
    pub profile: Option<Val<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Doc {
    profile: Option<Spanned<String>>,
    #[serde(default)]
    sandbox: SandboxTable,
    #[serde(default)]
    network: NetworkTable,
    #[serde(default)]
    limits: LimitsTable,
    #[serde(default)]
    timeouts: TimeoutsTable,
    profiles: Option<Spanned<BTreeMap<String, Tables>>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Tables {
    #[serde(default)]
    sandbox: SandboxTable,
    #[serde(default)]
    network: NetworkTable,
    #[serde(default)]
    limits: LimitsTable,
    #[serde(default)]
    timeouts: TimeoutsTable,
}

type Strings = Option<Spanned<Vec<Spanned<String>>>>;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SandboxTable {
    backend: Option<Spanned<String>>,
    allow_degraded: Option<Spanned<bool>>,
    allow_write: Strings,
    allow_unix: Strings,
    allow_read: Strings,
    hide: Strings,
    keep_env: Strings,
    package_caches: Option<Spanned<bool>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct NetworkTable {
    mode: Option<Spanned<String>>,
    allow_domains: Strings,
    default_domains: Option<Spanned<bool>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LimitsTable {
    procs: Option<Spanned<toml::Value>>,
    memory: Option<Spanned<toml::Value>>,
    cpu: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TimeoutsTable {
    soft: Option<Spanned<toml::Value>>,
    hard: Option<Spanned<toml::Value>>,
}

/// Most bytes a policy file may hold.
pub const MAX_BYTES: u64 = 1 << 20;

/// Parses the user's file `path` holding `text`; `home` expands `~`.
///
/// # Errors
/// The first problem: file, line, what is valid.
pub fn user(text: &str, path: &Path, home: Option<&Path>) -> Result<UserFile, FileError> {
    let cx = Cx { text, path, home };
    let doc = cx.doc()?;
    let mut profiles = BTreeMap::new();
    if let Some(ps) = doc.profiles {
        for (name, tables) in ps.into_inner() {
            if !valid_profile_name(&name) {
                return Err(cx.error(
                    None,
                    format!("profile name {name:?}: expected letters, digits, '-' and '_'"),
                ));
            }
            let layer = cx.layer(tables, Some(&name))?;
            profiles.insert(name, layer);
        }
    }
    let base = cx.layer(
        Tables {
            sandbox: doc.sandbox,
            network: doc.network,
            limits: doc.limits,
            timeouts: doc.timeouts,
        },
        None,
    )?;
    Ok(UserFile {
        path: path.to_path_buf(),
        base,
        profile: doc.profile.map(|p| cx.val(p, None)),
        profiles,
    })
}

/// Parses a project's file `path` holding `text`; `home` expands `~`.
///
/// # Errors
/// The first problem: file, line, what is valid (`[profiles]` is the user's file's).
pub fn project(text: &str, path: &Path, home: Option<&Path>) -> Result<ProjectFile, FileError> {
    let cx = Cx { text, path, home };
    let doc = cx.doc()?;
    if let Some(ps) = &doc.profiles {
        return Err(cx.error(
            Some(ps.span()),
            "[profiles] belongs in the user's policy file; a project's file may name one with profile = \"NAME\"".into(),
        ));
    }
    let layer = cx.layer(
        Tables {
            sandbox: doc.sandbox,
            network: doc.network,
            limits: doc.limits,
            timeouts: doc.timeouts,
        },
        None,
    )?;
    Ok(ProjectFile {
        path: path.to_path_buf(),
        layer,
        profile: doc.profile.map(|p| cx.val(p, None)),
    })
}

fn valid_profile_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

struct Cx<'a> {
    text: &'a str,
    path: &'a Path,
    home: Option<&'a Path>,
}

impl Cx<'_> {
    fn line(&self, at: usize) -> usize {
        let at = at.min(self.text.len());
        self.text.as_bytes()[..at]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn error(&self, span: Option<Range<usize>>, message: String) -> FileError {
        FileError {
            path: self.path.to_path_buf(),
            line: span.map(|s| self.line(s.start)),
            message,
        }
    }

    fn doc(&self) -> Result<Doc, FileError> {
        toml::from_str::<Doc>(self.text).map_err(|e| {
            let message = e.message().trim_end().to_string();
            self.error(e.span(), message)
        })
    }

    fn origin(&self, span: Range<usize>, profile: Option<&str>) -> Origin {
        Origin::File {
            path: self.path.to_path_buf(),
            line: self.line(span.start),
            profile: profile.map(str::to_string),
        }
    }

    fn val<T>(&self, s: Spanned<T>, profile: Option<&str>) -> Val<T> {
        let origin = self.origin(s.span(), profile);
        Val {
            value: s.into_inner(),
            origin,
        }
    }

    /// `s` through `check`, whose message is prefixed with `key`.
    fn checked<T, U>(
        &self,
        key: &str,
        s: Option<Spanned<T>>,
        profile: Option<&str>,
        check: impl Fn(T) -> Result<U, String>,
    ) -> Result<Option<Val<U>>, FileError> {
        let Some(s) = s else { return Ok(None) };
        let span = s.span();
        match check(s.into_inner()) {
            Ok(value) => Ok(Some(Val {
                value,
                origin: self.origin(span, profile),
            })),
            Err(m) => Err(self.error(Some(span), format!("{key}: {m}"))),
        }
    }

    fn list<U>(
        &self,
        key: &str,
        s: Strings,
        profile: Option<&str>,
        check: impl Fn(&str) -> Result<U, String>,
    ) -> Result<Option<Vec<Val<U>>>, FileError> {
        let Some(s) = s else { return Ok(None) };
        let mut out = Vec::new();
        for item in s.into_inner() {
            out.push(
                self.checked(key, Some(item), profile, |t: String| check(&t))?
                    .expect("given"),
            );
        }
        Ok(Some(out))
    }

    /// An absolute path, or one starting with `~/` (what a relative one is relative to would
    /// depend on where shofer was started).
    fn path(&self, text: &str) -> Result<PathBuf, String> {
        if text.is_empty() || text.contains('\0') {
            return Err(format!("{text:?}: expected a path"));
        }
        let p = expand_home(text, self.home)
            .ok_or_else(|| format!("{text:?}: ~ needs HOME, which is not set"))?;
        if p.is_absolute() {
            Ok(p)
        } else {
            Err(format!(
                "{text:?}: expected an absolute path or one starting with ~/"
            ))
        }
    }

    fn layer(&self, t: Tables, profile: Option<&str>) -> Result<Layer, FileError> {
        let p = profile;
        let abs = |s: &str| self.path(s);
        let s = t.sandbox;
        let n = t.network;
        let l = t.limits;
        let tm = t.timeouts;
        Ok(Layer {
            backend: self.checked("sandbox.backend", s.backend, p, |v: String| {
                Backend::parse_choice(&v)
            })?,
            allow_degraded: s.allow_degraded.map(|v| self.val(v, p)),
            allow_write: self.list("sandbox.allow_write", s.allow_write, p, abs)?,
            allow_unix: self.list("sandbox.allow_unix", s.allow_unix, p, abs)?,
            allow_read: self.list("sandbox.allow_read", s.allow_read, p, abs)?,
            hide: self.list("sandbox.hide", s.hide, p, abs)?,
            keep_env: self.list("sandbox.keep_env", s.keep_env, p, |s| {
                if s.is_empty() || s.contains('=') || s.contains('\0') {
                    Err(format!("{s:?}: expected a variable name (globs with *)"))
                } else {
                    Ok(s.to_string())
                }
            })?,
            package_caches: s.package_caches.map(|v| self.val(v, p)),
            net: self.checked("network.mode", n.mode, p, |v: String| NetPolicy::parse(&v))?,
            allow_domains: self.list("network.allow_domains", n.allow_domains, p, |s| {
                Rule::parse(s).map_err(|m| m.replacen("--allow-domain ", "", 1))
            })?,
            default_domains: n.default_domains.map(|v| self.val(v, p)),
            limit_procs: self.checked("limits.procs", l.procs, p, |v| {
                limit(v, limits::parse_count)
            })?,
            limit_memory: self.checked("limits.memory", l.memory, p, |v| {
                limit(v, limits::parse_size)
            })?,
            limit_cpu: self.checked("limits.cpu", l.cpu, p, |v| limit(v, limits::parse_percent))?,
            soft_timeout: self.checked("timeouts.soft", tm.soft, p, seconds)?,
            hard_timeout: self.checked("timeouts.hard", tm.hard, p, seconds)?,
        })
    }
}

/// A limit: a number, a string its flag would take, or `"off"`.
fn limit(v: toml::Value, parse: fn(&str) -> Result<u64, String>) -> Result<Setting, String> {
    match v {
        toml::Value::Integer(n) => limits::setting(&n.to_string(), parse),
        toml::Value::String(s) => limits::setting(&s, parse),
        other => Err(format!(
            "a {}: expected a number or a string such as \"8G\", or \"off\"",
            other.type_str()
        )),
    }
}

/// Seconds: a number above 0.
fn seconds(v: toml::Value) -> Result<f64, String> {
    let s = match v {
        toml::Value::Integer(n) => n as f64,
        toml::Value::Float(f) => f,
        other => {
            return Err(format!(
                "a {}: expected seconds, a number above 0",
                other.type_str()
            ))
        }
    };
    if s.is_finite() && s > 0.0 {
        Ok(s)
    } else {
        Err(format!("{s}: expected seconds, a number above 0"))
    }
}
