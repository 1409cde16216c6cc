//! `shofer init <agent> [--scope user|project] [--dry-run] [--undo] [--no-hook]`: writes (or,
//! with `--dry-run`, prints) the agent's MCP server entry and command hook, or with `--undo`
//! removes exactly what it wrote.
//!
//! Every file is parsed before any is written: one that does not parse is an error naming it
//! and nothing is changed. An entry is `init`'s when it is exactly what `init` would write now
//! (same name, same content); one the user changed is left alone with a message, by both
//! `init` and `--undo`. Files are replaced atomically with their mode kept, nothing planted
//! in a project followed, a user's symlinked file written through ([`super::files`]).
//!
//! What `--undo` removes, with no record kept of what `init` did: the entries that are exactly
//! `init`'s; the whole file only when its text is byte for byte what `init` writes into a file
//! that does not exist (those entries in an otherwise empty document: `init` created it);
//! otherwise the objects, arrays and tables that held the entries stay, even when left empty,
//! since the user may have made them (`{"mcpServers": {}}` before `init` is kept). The one
//! exception is TOML's implicit `[mcp_servers]` parent, which `toml_edit` marks as not
//! written by anyone. A file the user wrote with exactly `init`'s text is indistinguishable
//! and goes too.

use std::fmt::Write as _;
use std::path::Path;

use super::{files, json, project, toml, Agent, Context, Entry, Format, Scope, Target};

/// What an edit did (or would do) to one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Written now.
    Added,
    /// Already there exactly: nothing to do.
    AlreadyThere,
    /// Removed now.
    Removed,
    /// Not there: nothing to undo.
    Absent,
    /// There under the same name but different (the user's): left alone. Holds what is there.
    Differs(String),
}

/// `shofer init`'s options.
#[derive(Debug, Clone)]
pub struct Options {
    /// The agent.
    pub agent: Agent,
    /// User or project files.
    pub scope: Scope,
    /// Print instead of writing.
    pub dry_run: bool,
    /// Remove what `init` wrote.
    pub undo: bool,
    /// Write the command hook where the agent has one.
    pub hook: bool,
}

/// A parsed file.
enum Doc {
    Json(json::Doc),
    Toml(toml::Doc),
}

impl Doc {
    fn render(&self) -> String {
        match self {
            Doc::Json(d) => d.render(),
            Doc::Toml(d) => d.render(),
        }
    }
    fn is_empty(&self) -> bool {
        match self {
            Doc::Json(d) => d.is_empty(),
            Doc::Toml(d) => d.is_empty(),
        }
    }
}

/// Parses `target`'s file (`None` text: absent).
///
/// # Errors
/// The parse error, naming the file.
pub fn parse(target: &Target, text: Option<&str>) -> Result<DocRef, String> {
    let name = target.path.display().to_string();
    Ok(DocRef(match target.format {
        Format::Json => Doc::Json(json::Doc::parse(&name, text)?),
        Format::Toml => Doc::Toml(toml::Doc::parse(&name, text)?),
    }))
}

/// A parsed configuration file, for `doctor`.
pub struct DocRef(Doc);

impl DocRef {
    /// Whether `entry` is there as `init` writes it, changed, or absent.
    pub fn find(&self, entry: &Entry) -> json::Found {
        match &self.0 {
            Doc::Json(d) => d.find(entry),
            Doc::Toml(d) => d.find(entry),
        }
    }

    /// The MCP server `key` below `at`, whatever it holds.
    pub fn server(&self, at: &[&str], key: &str) -> Option<json::Json> {
        match &self.0 {
            Doc::Json(d) => d.server(at, key).cloned(),
            Doc::Toml(d) => d.server(at, key),
        }
    }

    /// The hook commands below `at` ending in `suffix`.
    pub fn hook_commands(&self, at: &[&str], suffix: &str) -> Vec<String> {
        match &self.0 {
            Doc::Json(d) => d.hook_commands(at, suffix),
            Doc::Toml(_) => Vec::new(),
        }
    }
}

/// The context `init` and `doctor` compute targets from.
///
/// # Errors
/// No `HOME`, no path of this executable, or (project scope) no project around the current
/// directory.
pub fn context(scope: Scope, hook: bool) -> Result<Context, String> {
    let home = super::home()?;
    let exe = super::current_exe()?;
    let project = match scope {
        Scope::User => None,
        Scope::Project => {
            let here = std::env::current_dir()
                .map_err(|e| format!("cannot read the current directory: {e}"))?;
            Some(project::worktree_of(&here, Some(&home))?)
        }
    };
    Ok(Context {
        home,
        scope,
        project,
        exe,
        hook,
    })
}

/// Runs `shofer init` and returns its exit code: 0 when everything asked for is done (or would
/// be), 1 on an error or when an entry of the user's was left alone by `init`.
pub fn main(opts: &Options) -> u8 {
    let ctx = match context(opts.scope, opts.hook) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shofer init: {e}");
            return 1;
        }
    };
    match run(opts, &ctx) {
        Ok((text, ok)) => {
            print!("{text}");
            u8::from(!ok)
        }
        Err(e) => {
            eprintln!("shofer init: {e}");
            1
        }
    }
}

/// Applies (or with `dry_run` describes) `opts` for `ctx`; returns the report and whether
/// everything asked for is in place.
///
/// # Errors
/// A file that cannot be read or parsed (nothing is written then), or a write that failed.
pub fn run(opts: &Options, ctx: &Context) -> Result<(String, bool), String> {
    let targets = opts.agent.targets(ctx);
    // Stage 1: read and parse every file; an error leaves all of them untouched.
    let mut parsed = Vec::new();
    for t in &targets {
        let loc = files::locate(&t.path, ctx)?;
        let text = files::read(&loc)?;
        let doc = parse(t, text.as_deref())?.0;
        parsed.push((t, loc, text, doc));
    }
    // Stage 2: edit in memory, then write (or print) what changed.
    let mut out = String::new();
    let mut ok = true;
    let mut changed = false;
    for (t, loc, before, mut doc) in parsed {
        let shown = shown(&t.path, &ctx.home);
        let mut removed = Vec::new();
        for e in &t.entries {
            let what = e.describe();
            let outcome = match (&mut doc, opts.undo) {
                (Doc::Json(d), false) => d.add(e).map_err(|m| format!("{shown}: {m}"))?,
                (Doc::Toml(d), false) => d.add(e).map_err(|m| format!("{shown}: {m}"))?,
                (Doc::Json(d), true) => d.remove(e),
                (Doc::Toml(d), true) => d.remove(e),
            };
            let verb = |done: &str, would: &str| {
                if opts.dry_run {
                    would.to_string()
                } else {
                    done.to_string()
                }
            };
            if outcome == Outcome::Removed {
                removed.push(e.clone());
            }
            let line = match &outcome {
                Outcome::Added => format!("{}: {} {what}", shown, verb("added", "would add")),
                Outcome::Removed => {
                    format!("{}: {} {what}", shown, verb("removed", "would remove"))
                }
                Outcome::AlreadyThere => format!("{shown}: {what} is already in place"),
                Outcome::Absent => format!("{shown}: nothing to remove ({what} is not there)"),
                Outcome::Differs(found) => {
                    if !opts.undo {
                        ok = false;
                    }
                    format!(
                        "{shown}: left alone: {what} exists but differs from what shofer init writes ({found}); edit or remove it yourself{}",
                        if opts.undo { "" } else { ", then run shofer init again" }
                    )
                }
            };
            let _ = writeln!(out, "{line}");
        }
        let after = doc.render();
        let remove_file = opts.undo
            && !removed.is_empty()
            && before.is_some()
            && before == created_from_nothing(t, &removed);
        if before.as_deref() == Some(after.as_str()) || (before.is_none() && doc.is_empty()) {
            continue;
        }
        if let (Some(b), Doc::Json(_)) = (&before, &doc) {
            if parse(t, Some(b)).map(|d| d.0.render()).as_deref() != Ok(b.as_str()) {
                let _ = writeln!(
                    out,
                    "note: {shown} is written back in the standard JSON layout (its own line breaks inside arrays and objects are not kept)"
                );
            }
        }
        if opts.dry_run {
            if remove_file {
                let _ = writeln!(
                    out,
                    "would remove {} (it holds nothing but what shofer init creates)",
                    t.path.display()
                );
            } else {
                let _ = writeln!(
                    out,
                    "--- {} would become:\n{after}{}",
                    t.path.display(),
                    if after.ends_with('\n') { "" } else { "\n" }
                );
            }
        } else if remove_file {
            files::remove(&loc)?;
            changed = true;
        } else {
            files::write_atomic(&loc, &after)?;
            changed = true;
        }
        if loc.via.is_some() {
            let _ = writeln!(
                out,
                "note: {} is a symlink: {} {} instead, and the symlink stays",
                shown,
                if opts.dry_run { "would write" } else { "wrote" },
                loc.path().display()
            );
        }
    }
    if let Some(why) = opts.agent.no_hook_reason() {
        if !opts.undo {
            let _ = writeln!(out, "no command hook: {why}");
        }
    } else if !opts.hook && !opts.undo {
        let _ = writeln!(
            out,
            "no command hook (--no-hook): the agent's own shell tool stays unsandboxed"
        );
    }
    if opts.dry_run {
        // The lines above say what would change.
    } else if changed {
        let _ = writeln!(
            out,
            "Restart the agent to load the change; `shofer doctor` checks the wiring."
        );
    } else {
        let _ = writeln!(out, "Nothing changed.");
    }
    Ok((out, ok))
}

/// The text `init` writes for `entries` into `t`'s file when it does not exist (`None` if that
/// cannot be made).
fn created_from_nothing(t: &Target, entries: &[Entry]) -> Option<String> {
    let mut doc = parse(t, None).ok()?.0;
    for e in entries {
        match &mut doc {
            Doc::Json(d) => d.add(e).ok()?,
            Doc::Toml(d) => d.add(e).ok()?,
        };
    }
    Some(doc.render())
}

/// `path` with the home directory shown as `~`.
fn shown(path: &Path, home: &Path) -> String {
    match path.strip_prefix(home) {
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => path.display().to_string(),
    }
}
