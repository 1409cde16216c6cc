//! The policy files on disk, and the effective policy as `shofer-sandbox` flags: the I/O
//! around [`shofer_core::policyfile`], which holds the model.
//!
//! - [`user_file`]: where the user's file is (`$XDG_CONFIG_HOME/shofer/config.toml`, else
//!   `~/.config/shofer/config.toml`).
//! - [`effective`]: the user's file, the worktree's `.shofer/config.toml` (read without
//!   trusting it: the command may write it, and it may only narrow), and the flags' layer.
//! - [`sandbox_args`]: the effective policy as the `shofer-sandbox` options that say it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use shofer_core::limits::{self, Setting};
use shofer_core::policyfile::{self, parse, Layer};

/// The project's file, beneath a worktree.
pub const PROJECT_FILE: &str = ".shofer/config.toml";

/// The user's policy file: `$XDG_CONFIG_HOME/shofer/config.toml`, else
/// `$HOME/.config/shofer/config.toml`; `None` without either variable.
pub fn user_file() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("XDG_CONFIG_HOME")
        .filter(|d| d.is_absolute())
        .or_else(|| var("HOME").map(|h| h.join(".config")))
        .map(|d| d.join("shofer/config.toml"))
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The user's file parsed, `None` when there is none.
///
/// # Errors
/// A message naming the file, the line and what is valid.
pub fn load_user() -> Result<Option<parse::UserFile>, String> {
    let Some(path) = user_file() else {
        return Ok(None);
    };
    let text = match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
        Ok(m) if !m.is_file() => return Err(format!("{}: not a regular file", path.display())),
        Ok(m) if m.len() > parse::MAX_BYTES => {
            return Err(format!(
                "{}: {} bytes (a policy file holds at most {})",
                path.display(),
                m.len(),
                parse::MAX_BYTES
            ))
        }
        Ok(_) => std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?,
    };
    parse::user(&text, &path, home().as_deref())
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The worktree's file parsed, `None` when there is none.
///
/// # Errors
/// A message naming the file: not a regular file (never read), unreadable, or invalid.
pub fn load_project(worktree: &Path) -> Result<Option<parse::ProjectFile>, String> {
    let path = worktree.join(PROJECT_FILE);
    let text =
        shofer_sys::projectfile::read(worktree, c"config.toml", parse::MAX_BYTES).map_err(|e| {
            format!(
                "{}: {e}; no command runs until it is fixed or removed",
                path.display()
            )
        })?;
    let Some(text) = text else { return Ok(None) };
    parse::project(&text, &path, home().as_deref())
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The effective policy: the user's file, `worktree`'s project file (sandboxed runs only),
/// the profile `--profile` names, then `flags`.
///
/// # Errors
/// A message for the first file that cannot be used (the run does not start).
pub fn effective(
    worktree: Option<&Path>,
    profile: Option<&str>,
    flags: Layer,
) -> Result<Layer, String> {
    let user = load_user()?;
    let project = match worktree {
        Some(w) => load_project(w)?,
        None => None,
    };
    policyfile::resolve(
        user.as_ref(),
        project.as_ref(),
        profile,
        flags,
        shofer_sys::proc::mem_total(),
    )
    .map_err(|e| e.to_string())
}

/// The `shofer-sandbox` options that say `eff`'s sandbox settings.
pub fn sandbox_args(eff: &Layer) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut pair = |flag: &str, value: OsString| {
        args.push(flag.into());
        args.push(value);
    };
    if let Some(b) = &eff.backend {
        pair("--backend", b.value.map_or("auto", |b| b.as_str()).into());
    }
    for (flag, list) in [
        ("--allow-write", &eff.allow_write),
        ("--allow-unix", &eff.allow_unix),
        ("--allow-read", &eff.allow_read),
        ("--hide", &eff.hide),
    ] {
        for v in list.iter().flatten() {
            pair(flag, v.value.clone().into_os_string());
        }
    }
    for v in eff.keep_env.iter().flatten() {
        pair("--keep-env", v.value.clone().into());
    }
    let net = eff.net();
    if let Some(n) = &eff.net {
        pair("--net", n.value.as_str().into());
    }
    // The allow-list only means something under the proxy (the sandbox refuses it otherwise).
    if net == shofer_core::policy::NetPolicy::Proxy {
        for v in eff.allow_domains.iter().flatten() {
            pair("--allow-domain", v.value.display().into());
        }
    }
    let number: fn(u64) -> String = |n| n.to_string();
    for (flag, setting, show) in [
        ("--limit-procs", &eff.limit_procs, number),
        ("--limit-memory", &eff.limit_memory, limits::show_size),
        ("--limit-cpu", &eff.limit_cpu, number),
    ] {
        match setting.as_ref().map(|v| v.value) {
            Some(Setting::Off) => pair(flag, "off".into()),
            Some(Setting::Value(n)) => pair(flag, show(n).into()),
            Some(Setting::Default) | None => {}
        }
    }
    if net == shofer_core::policy::NetPolicy::Proxy
        && eff.default_domains.as_ref().is_some_and(|v| !v.value)
    {
        args.push("--no-default-domains".into());
    }
    if eff.package_caches.as_ref().is_some_and(|v| !v.value) {
        args.push("--no-package-caches".into());
    }
    if eff.allow_degraded.as_ref().is_some_and(|v| v.value) {
        args.push("--allow-degraded".into());
    }
    args
}
