//! The git control files the *host's* git trusts, and which of them a run must keep from the
//! command (docs/ARCHITECTURE.md, "Linked git worktrees").
//!
//! A host git process in the worktree (an editor's `git status`, a shell prompt, the agent
//! host's checkpoint commit) reads the repository's location from the worktree's `.git`, its
//! configuration from the common `config`, the gitdir's `config.worktree` and `commondir`, and
//! runs hooks from `hooks/` or `core.hooksPath`. Any of these written by the command is code
//! execution on the host (`core.fsmonitor`, a hook).
//!
//! [`control_set`] lists them for a worktree layout. The namespace backends bind each one
//! read-only over itself; a path that does not exist yet gets a harmless *placeholder* first
//! (an empty directory, an empty `config.worktree`, a `commondir` of `.`, which names the
//! directory it is in — what git assumes without one), because a mount needs something to
//! cover and a covered name cannot be created, renamed over or removed (`EBUSY`). The
//! Landlock backend cannot make files inside a writable tree read-only: it relies on
//! [`crate::git::guard`].
//!
//! [`add_host_tool_files`] adds the agents' and editors' project files at the worktree's top
//! ([`HOST_TOOL_FILES`]) to the same list: other host programs that run what a file names.

use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::git::layout::GitLayout;
use crate::paths::{self, Kind};

/// What to create before the run when a protected path is absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placeholder {
    /// An empty directory (`hooks/`, `info/`, an in-tree hooks directory).
    EmptyDir,
    /// A file with this content (`""` for `config.worktree`, `".\n"` for `commondir`).
    File(String),
    /// The loose ref of a packed branch another worktree has checked out, holding the object
    /// name `packed-refs` records for it. Kept after the run: a loose ref shadows
    /// `packed-refs`, which the command can rewrite (removed, it let a rewritten line move
    /// the branch once the run had ended).
    Ref(String),
}

/// One protected path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    /// Absolute path.
    pub path: PathBuf,
    /// What the host's git (or agent host, or editor) reads there (for the report).
    pub what: &'static str,
    /// Created before the run if absent, so a read-only bind can cover the name.
    pub placeholder: Option<Placeholder>,
}

/// The protected paths of one worktree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControlSet {
    /// Inside the writable set: bound read-only over themselves on the namespace backends,
    /// guarded on Landlock.
    pub read_only: Vec<Control>,
    /// Writable directories bound over themselves so they cannot be renamed away and replaced
    /// (a main worktree's `.git`).
    pub pinned: Vec<PathBuf>,
    /// Protected because they are outside the writable set: (path, what).
    pub outside: Vec<(PathBuf, &'static str)>,
    /// A linked worktree's common dir, which the namespace backends bind read-write so that
    /// `packed-refs` can be replaced through `packed-refs.lock` (git deletes refs that way):
    /// every other entry of it is bound read-only on top ([`CommonLayer`]).
    pub common: Option<CommonLayer>,
    /// Directories between a writable root and the worktree or the common dir, each with
    /// that root, shallowest first (set by [`crate::writable`]): the namespace backends bind
    /// each over itself (writable; a mount point cannot be renamed or removed) before the
    /// writable set's binds beneath it; Landlock cannot, and says so.
    pub ancestors: Vec<(PathBuf, PathBuf)>,
    /// The writable root a linked worktree's common dir lies beneath (a repository under
    /// `/tmp`), if any: its `config`, `hooks/`, `info/`, `worktrees/` and `modules/` are then
    /// not outside the writable set, and the Landlock backend guards them
    /// ([`crate::git::guard`]) as it does a main worktree's.
    pub common_beneath: Option<PathBuf>,
    /// The writable root the worktree of a repository lies beneath, if any: on Landlock the
    /// command can rename the worktree (or the common dir) away ([`crate::git::run`]).
    pub worktree_beneath: Option<PathBuf>,
    /// Facts the report states (paths git does not read in this configuration, limits).
    pub notes: Vec<String>,
    /// The existing pack files (`objects/pack/*`), bound read-only over themselves on the
    /// namespace backends so they can be neither changed nor deleted.
    pub packs: Vec<PathBuf>,
}

/// Most pack files bound read-only; the rest are covered by the check at exit
/// ([`crate::git::objects`]).
const MAX_PACK_BINDS: usize = 512;
/// Largest configuration file read (bytes).
const MAX_CONFIG: usize = 4 << 20;
/// Largest `packed-refs` read (bytes).
const MAX_PACKED_REFS: usize = 256 << 20;
/// Largest `HEAD` read (bytes).
const MAX_SMALL: usize = 4096;

/// The files of `objects/pack` that hold existing objects.
fn pack_files(objects: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(objects.join("pack")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| {
                ["pack", "idx", "rev", "bitmap", "mtimes"].contains(&x.to_str().unwrap_or(""))
            })
        })
        .collect();
    out.sort();
    out
}

/// The namespace backends' layout of a linked worktree's common dir: the directory itself
/// read-only (so nothing can be created, renamed or removed at its top level: `config`,
/// `hooks/`, the main worktree's `HEAD`, `index`, `MERGE_HEAD`, …), its `objects/`, `refs/`
/// and `logs/` read-write again, read-only binds over the branches other worktrees have
/// checked out and their reflogs, then the worktree's own gitdir read-write (it lies under
/// the read-only `worktrees/`). `packed-refs` is replaced, and an unchanged `config` kept,
/// through git's lock protocol performed by the supervisor (`gate::packed_refs`), as on
/// Landlock: a writable top level let the command plant names there, and removing the new
/// names at exit removed the host's own (a merge or rebase in progress in the main
/// worktree).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommonLayer {
    /// The common dir.
    pub common: PathBuf,
    /// Its subdirectories bound read-write again ([`COMMON_WRITABLE`]; an absent one gets an
    /// empty directory first, since the top level cannot take a new one during the run).
    pub writable: Vec<Control>,
    /// The directories between `refs/` or `logs/` and each of [`Self::read_only`], shallowest
    /// first, bound over themselves read-write: a mount point cannot be renamed, so a
    /// protected ref cannot be moved away with its directory (`mv refs/heads refs/x` and a new
    /// `refs/heads/main` moved the branch the main worktree has checked out).
    pub pinned: Vec<PathBuf>,
    /// Bound read-only over themselves, in order.
    pub read_only: Vec<Control>,
    /// The worktree's gitdir, bound read-write after them.
    pub gitdir: PathBuf,
}

/// Subdirectories of the common dir that stay writable on the namespace backends.
const COMMON_WRITABLE: [&str; 3] = ["objects", "refs", "logs"];

/// The common-dir layer for a linked worktree whose gitdir is `gitdir`.
fn common_layer(common: &Path, gitdir: &Path) -> CommonLayer {
    let writable = COMMON_WRITABLE
        .iter()
        .map(|n| Control {
            path: common.join(n),
            what: "where git writes objects, refs and reflogs",
            placeholder: Some(Placeholder::EmptyDir),
        })
        .collect();
    let mut ro = Vec::new();
    // Branches checked out in other worktrees, and their reflogs.
    let mut heads = vec![common.join("HEAD")];
    if let Ok(rd) = std::fs::read_dir(common.join("worktrees")) {
        for e in rd.flatten() {
            if e.path() != gitdir {
                heads.push(e.path().join("HEAD"));
            }
        }
    }
    let packed = paths::read_regular(&common.join("packed-refs"), MAX_PACKED_REFS)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    for head in heads {
        let Ok(text) = paths::read_regular_text(&head, MAX_SMALL) else {
            continue;
        };
        let Some(refname) = text.trim().strip_prefix("ref: ") else {
            continue;
        };
        if !refname.starts_with("refs/heads/")
            || refname
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            continue;
        }
        let loose = common.join(refname);
        let placeholder = if exists(&loose) {
            None
        } else {
            match packed_oid(&packed, refname) {
                Some(oid) => Some(Placeholder::Ref(format!("{oid}\n"))),
                None => continue, // unborn
            }
        };
        ro.push(Control {
            path: loose,
            what: "a branch another worktree has checked out",
            placeholder,
        });
        let log = common.join("logs").join(refname);
        if exists(&log) {
            ro.push(Control {
                path: log,
                what: "the reflog of a branch another worktree has checked out",
                placeholder: None,
            });
        }
    }
    if exists(&common.join("logs/HEAD")) {
        ro.push(Control {
            path: common.join("logs/HEAD"),
            what: "the main worktree's HEAD reflog",
            placeholder: None,
        });
    }
    let mut pinned: Vec<PathBuf> = Vec::new();
    for c in &ro {
        let Some(top) = COMMON_WRITABLE
            .iter()
            .map(|n| common.join(n))
            .find(|top| c.path.starts_with(top))
        else {
            continue;
        };
        for d in paths::dirs_between(&top, &c.path) {
            if !pinned.iter().any(|p| p == d) {
                pinned.push(d.to_path_buf());
            }
        }
    }
    pinned.sort_by_key(|d| d.components().count());
    CommonLayer {
        common: common.to_path_buf(),
        writable,
        pinned,
        read_only: ro,
        gitdir: gitdir.to_path_buf(),
    }
}

/// The object name `packed-refs` records for `refname`.
fn packed_oid<'a>(packed: &'a str, refname: &str) -> Option<&'a str> {
    packed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .find_map(|l| {
            let (oid, name) = l.split_once(' ')?;
            (name == refname).then_some(oid)
        })
}

impl ControlSet {
    /// The namespace backends' git binds, in the order they are made: `(path, writable)`.
    /// Each is a bind of the path over itself, after the writable set's binds.
    pub fn layers(&self) -> Vec<(PathBuf, bool)> {
        let mut out: Vec<(PathBuf, bool)> = self.pinned.iter().map(|p| (p.clone(), true)).collect();
        if let Some(l) = &self.common {
            out.push((l.common.clone(), false));
            out.extend(l.writable.iter().map(|c| (c.path.clone(), true)));
            out.extend(l.pinned.iter().map(|p| (p.clone(), true)));
            out.extend(l.read_only.iter().map(|c| (c.path.clone(), false)));
            out.push((l.gitdir.clone(), true));
        }
        out.extend(self.read_only.iter().map(|c| (c.path.clone(), false)));
        out.extend(self.packs.iter().map(|p| (p.clone(), false)));
        out
    }
}

const CONFIG_WORKTREE: &str =
    "config.worktree (per-worktree configuration, read with extensions.worktreeConfig)";

/// The protected paths for `layout` of `worktree` (canonical). Reads the repository's
/// configuration (common `config`, global config) for `core.hooksPath` and
/// `extensions.worktreeConfig`; `include.path` directives are not followed (stated in
/// `notes` when present).
pub fn control_set(layout: &GitLayout, worktree: &Path) -> ControlSet {
    let mut set = ControlSet::default();
    let ro = |set: &mut ControlSet, path: PathBuf, what, placeholder| {
        set.read_only.push(Control {
            path,
            what,
            placeholder,
        })
    };
    let (gitdir, common) = match layout {
        GitLayout::Linked { gitdir, common } => (gitdir.clone(), common.clone()),
        GitLayout::MainWorktree => (worktree.join(".git"), worktree.join(".git")),
        GitLayout::None | GitLayout::Rejected(_) => return set,
    };
    let config = Config::load(&common.join("config"), &mut set.notes);
    set.packs = pack_files(&common.join("objects"));
    if set.packs.len() > MAX_PACK_BINDS {
        set.notes.push(format!(
            "{} pack files: only the first {MAX_PACK_BINDS} are bound read-only; the rest are checked when the command ends",
            set.packs.len()
        ));
        set.packs.truncate(MAX_PACK_BINDS);
    }
    let worktree_config = config.bool("extensions", "worktreeconfig");
    match layout {
        GitLayout::Linked { .. } => {
            ro(
                &mut set,
                worktree.join(".git"),
                ".git (the pointer to the gitdir)",
                None,
            );
            ro(
                &mut set,
                gitdir.join("commondir"),
                "commondir (where the repository's config and hooks are)",
                None,
            );
            ro(
                &mut set,
                gitdir.join("gitdir"),
                "gitdir (the back-link to this worktree)",
                None,
            );
            set.common = Some(common_layer(&common, &gitdir));
            for (name, what) in [
                ("config", "config (the repository's configuration)"),
                ("hooks", "hooks/"),
                ("info", "info/ (attributes, excludes)"),
                ("worktrees", "other worktrees' control files"),
                ("modules", "modules/ (submodules' config and hooks)"),
                ("packed-refs", "packed-refs"),
                ("HEAD", "the main worktree's HEAD"),
            ] {
                set.outside.push((common.join(name), what));
            }
        }
        _ => {
            set.pinned.push(gitdir.clone());
            ro(
                &mut set,
                gitdir.join("config"),
                "config (the repository's configuration)",
                None,
            );
            ro(
                &mut set,
                gitdir.join("hooks"),
                "hooks/",
                Some(Placeholder::EmptyDir),
            );
            ro(
                &mut set,
                gitdir.join("info"),
                "info/ (attributes, excludes)",
                Some(Placeholder::EmptyDir),
            );
            ro(
                &mut set,
                gitdir.join("commondir"),
                "commondir (where the repository's config and hooks are; '.' is the default)",
                Some(Placeholder::File(".\n".into())),
            );
            for (name, what) in [
                ("worktrees", "worktrees/ (other worktrees' control files)"),
                ("modules", "modules/ (submodules' config and hooks)"),
            ] {
                if exists(&gitdir.join(name)) {
                    ro(&mut set, gitdir.join(name), what, None);
                }
            }
        }
    }
    let cw = gitdir.join("config.worktree");
    if exists(&cw) {
        ro(&mut set, cw, CONFIG_WORKTREE, None);
    } else if worktree_config {
        ro(
            &mut set,
            cw,
            CONFIG_WORKTREE,
            Some(Placeholder::File(String::new())),
        );
    } else {
        set.notes.push(format!(
            "{}: not read by git (extensions.worktreeConfig is off in the protected common config)",
            cw.display()
        ));
    }
    let mut hooks_path = config.get("core", "hookspath");
    if hooks_path.is_none() {
        for global in global_configs() {
            if let Some(v) = Config::load(&global, &mut Vec::new()).get("core", "hookspath") {
                hooks_path = Some(v);
            }
        }
    }
    if let Some(hp) = hooks_path {
        if let Some(dir) = in_tree(&hp, worktree) {
            // husky installs `core.hooksPath=.husky/_`, whose shims run `.husky/<hook>`.
            let dir = if dir.file_name() == Some("_".as_ref()) {
                dir.parent().map(Path::to_path_buf).unwrap_or(dir)
            } else {
                dir
            };
            set.read_only.push(Control {
                path: dir,
                what: "the in-tree core.hooksPath (hooks the host's git runs)",
                placeholder: Some(Placeholder::EmptyDir),
            });
        }
    }
    set
}

/// Names at the worktree's top from which a host program other than git runs something: agent
/// hosts and editors read them when they start in (or watch) the project, and run the hooks,
/// servers, tasks and tools they name without asking again. A command that writes one has
/// the host act for it, as with a git hook. One that exists is a read-only bind on the
/// namespace backends; an absent one gets no placeholder (a mount point at the worktree's top
/// made `git stash -u` and `git clean -d` fail): the guard removes what the command makes
/// there ([`crate::git::guard::GitGuard::restore_absent`]), and on Landlock restores them all.
/// A list of names, not an allow-list: the programs that read a project's files are
/// open-ended; these are the documented ones (docs/SANDBOX.md, "Agents' and editors' project
/// files").
pub const HOST_TOOL_FILES: [(&str, &str); 8] = [
    (
        ".claude",
        "Claude Code's project settings (hooks, status line, MCP servers, commands, agents, skills)",
    ),
    (".mcp.json", "Claude Code's project MCP servers (programs it starts)"),
    (
        ".gemini",
        "Gemini CLI's project settings (hooks, MCP servers, commands)",
    ),
    (
        ".codex",
        "Codex's project configuration (MCP servers, notify program)",
    ),
    (".cursor", "Cursor's project MCP servers, hooks and rules"),
    (
        ".vscode",
        "VS Code's tasks (run on folder open), launch configurations, MCP servers and settings naming programs",
    ),
    (
        ".idea",
        "JetBrains IDEs' run configurations and external tools",
    ),
    (
        ".zed",
        "Zed's tasks and settings naming language servers",
    ),
];

/// Adds [`HOST_TOOL_FILES`] at the top of `worktree` to `set.read_only`, but for those an
/// `--allow-write` names, or names a path inside (`granted`: the user's explicit choice; a
/// grant of a directory above the worktree is not one). A symlink or special file is left out
/// and noted (a bind cannot cover it safely; the run goes on: this is a hardening protection).
pub fn add_host_tool_files(set: &mut ControlSet, worktree: &Path, granted: &[&Path]) {
    for (name, what) in HOST_TOOL_FILES {
        let path = worktree.join(name);
        if granted.iter().any(|g| g.starts_with(&path)) {
            set.notes.push(format!(
                "{}: writable by --allow-write, not protected",
                path.display()
            ));
            continue;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() || m.is_file() => {}
            // Absent: guarded, not bound (see HOST_TOOL_FILES).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(_) => {
                set.notes.push(format!(
                    "{}: a symlink or special file, not protected (the command can replace it)",
                    path.display()
                ));
                continue;
            }
            Err(e) => {
                set.notes
                    .push(format!("{}: not protected: {e}", path.display()));
                continue;
            }
        }
        set.read_only.push(Control {
            path,
            what,
            placeholder: None,
        });
    }
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// The user's global git configuration files, as git finds them (git-config(1), FILES).
fn global_configs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")));
    if let Some(x) = xdg {
        out.push(x.join("git/config"));
    }
    if let Some(h) = std::env::var_os("HOME") {
        out.push(Path::new(&h).join(".gitconfig"));
    }
    out
}

/// `core.hooksPath` value `hp` resolved as git does (relative to the worktree root, `~/` to
/// `$HOME`), if it lies inside `worktree`.
fn in_tree(hp: &str, worktree: &Path) -> Option<PathBuf> {
    let raw = if let Some(rest) = hp.strip_prefix("~/") {
        Path::new(&std::env::var_os("HOME")?).join(rest)
    } else {
        worktree.join(hp)
    };
    let out = shofer_core::lexical::clean(&raw);
    (out.starts_with(worktree) && out != worktree).then_some(out)
}

/// A git config file, parsed just enough for the few keys shofer needs (git-config(1),
/// CONFIGURATION FILE: sections, `key = value`, comments, quotes).
#[derive(Default)]
struct Config {
    /// (section lowercased, key lowercased, value) in file order.
    entries: Vec<(String, String, String)>,
}

impl Config {
    fn load(path: &Path, notes: &mut Vec<String>) -> Config {
        // Git reads any bytes (a Latin-1 user.name must not hide a core.hooksPath).
        let Ok(bytes) = paths::read_regular(path, MAX_CONFIG) else {
            return Config::default();
        };
        let config = Config::parse(&String::from_utf8_lossy(&bytes));
        if config
            .entries
            .iter()
            .any(|(s, k, _)| s == "include" && k == "path")
            || config
                .entries
                .iter()
                .any(|(s, _, _)| s.starts_with("includeif"))
        {
            notes.push(format!(
                "{}: include directives are not followed when looking for core.hooksPath",
                path.display()
            ));
        }
        config
    }

    fn parse(text: &str) -> Config {
        let mut entries = Vec::new();
        let mut section = String::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            let mut rest = line;
            if let Some(after) = rest.strip_prefix('[') {
                let Some(end) = after.find(']') else { continue };
                let head = &after[..end];
                section = match head.split_once(char::is_whitespace) {
                    Some((name, sub)) => {
                        format!("{}.{}", name.to_lowercase(), sub.trim().trim_matches('"'))
                    }
                    None => head.to_lowercase(),
                };
                rest = after[end + 1..].trim();
                if rest.is_empty() {
                    continue;
                }
            }
            let (key, value) = match rest.split_once('=') {
                Some((k, v)) => (k.trim(), unquote(v)),
                None => (rest, "true".to_string()),
            };
            entries.push((section.clone(), key.to_lowercase(), value));
        }
        Config { entries }
    }

    fn get(&self, section: &str, key: &str) -> Option<String> {
        self.entries
            .iter()
            .rev()
            .find(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.clone())
    }

    fn bool(&self, section: &str, key: &str) -> bool {
        matches!(
            self.get(section, key).map(|v| v.to_lowercase()).as_deref(),
            Some("true" | "yes" | "on" | "1")
        )
    }
}

/// The (section, key, value) entries of a git config file, sections and keys lowercased,
/// subsections as `section.sub`.
pub(crate) fn config_entries(text: &str) -> Vec<(String, String, String)> {
    Config::parse(text).entries
}

/// Whether the repository whose common dir is `common` uses SHA-256 object names
/// (`extensions.objectFormat = sha256`).
pub(crate) fn uses_sha256(common: &Path) -> bool {
    Config::load(&common.join("config"), &mut Vec::new())
        .get("extensions", "objectformat")
        .is_some_and(|v| v.eq_ignore_ascii_case("sha256"))
}

/// A config value without its comment and quotes.
fn unquote(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = v.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push(match n {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                }
            }
            '#' | ';' if !quoted => break,
            other => out.push(other),
        }
    }
    out.trim().to_string()
}

/// A placeholder this run created, removed again after the run if still as created.
#[derive(Debug)]
pub struct Created {
    /// The directory it was made in (an `O_PATH` descriptor: its path can be swapped for a
    /// symlink by whoever can write the common dir, and the removal must not follow one).
    dir: std::os::fd::OwnedFd,
    name: std::ffi::OsString,
    /// (st_dev, st_ino) of the placeholder when made.
    identity: (u64, u64),
    placeholder: Placeholder,
}

/// Checks every read-only path and creates the missing placeholders (namespace backends and
/// bwrap, before the sandbox is built). Placeholders are created without following symlinks,
/// owned like their directory.
///
/// # Errors
/// `(path, reason)` when a protected path is a symlink or special file (a bind cannot cover
/// it safely: the run is refused) or a placeholder cannot be created.
pub fn prepare(set: &ControlSet) -> Result<Vec<Created>, (PathBuf, String)> {
    let mut created = Vec::new();
    let layer = set
        .common
        .iter()
        .flat_map(|l| l.writable.iter().chain(&l.read_only));
    for c in layer.chain(&set.read_only) {
        let parent = c.path.parent().unwrap_or(Path::new("/"));
        let name = c.path.file_name().unwrap_or_default();
        if c.placeholder.is_some() && !exists(parent) {
            // A branch known only from packed-refs: its loose ref's directory.
            make_dirs(parent).map_err(|e| (c.path.clone(), e.to_string()))?;
        }
        let dir = paths::open_nofollow(parent).map_err(|e| (c.path.clone(), e.to_string()))?;
        match paths::openat_path(&dir, Path::new(name)) {
            Ok(fd) => match paths::kind(&fd) {
                Ok(Kind::Dir | Kind::File) => {}
                Ok(_) => {
                    return Err((
                        c.path.clone(),
                        "is a symlink or special file; git control files must be regular files or directories (restore it, then run again)".into(),
                    ))
                }
                Err(e) => return Err((c.path.clone(), e.to_string())),
            },
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let Some(ph) = c.placeholder.clone() else {
                    continue;
                };
                let identity = create(&dir, name, &ph)
                    .and_then(|made| paths::identity(&made))
                    .map_err(|e| (c.path.clone(), e.to_string()))?;
                created.push(Created {
                    dir,
                    name: name.to_os_string(),
                    identity,
                    placeholder: ph,
                });
            }
            Err(e) => return Err((c.path.clone(), e.to_string())),
        }
    }
    Ok(created)
}

/// Makes the placeholder `ph` as `name` in `dir` and returns a descriptor of what it made
/// (`O_PATH` for a directory): its owner and identity are taken through it, never by name.
fn create(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::OsStr,
    ph: &Placeholder,
) -> io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    // The directory is reached through its O_PATH descriptor's /proc path (the `*at` calls
    // below need a real directory descriptor).
    let real = std::fs::File::open(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
    let made = match ph {
        Placeholder::EmptyDir => {
            // mkdirat never follows a symlink.
            rustix::fs::mkdirat(&real, name, Mode::from_bits_retain(0o755))?;
            paths::openat_dir_path(dir, Path::new(name))?
        }
        Placeholder::File(text) | Placeholder::Ref(text) => {
            // O_EXCL|O_NOFOLLOW only ever creates a new file.
            let flags =
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(&real, name, flags, Mode::from_bits_retain(0o644))?;
            let mut f = std::fs::File::from(fd);
            io::Write::write_all(&mut f, text.as_bytes())?;
            std::os::fd::OwnedFd::from(f)
        }
    };
    // A root caller over another user's checkout: the placeholder belongs to the directory's
    // owner, like the rest of it (an unprivileged caller owns it already: EPERM changes
    // nothing).
    let meta = real.metadata()?;
    let _ = paths::chown_pinned(
        &made,
        std::os::unix::fs::MetadataExt::uid(&meta),
        std::os::unix::fs::MetadataExt::gid(&meta),
    );
    Ok(made)
}

/// The locks git would take on the branches other worktrees have checked out
/// (`refs/heads/<branch>.lock`) that do not exist before the run: one the command leaves
/// stops the host's git from moving that branch ("cannot lock ref") until it is removed by
/// hand, so [`remove_ref_locks`] removes it after the run.
pub fn absent_ref_locks(set: &ControlSet) -> Vec<PathBuf> {
    let Some(l) = &set.common else {
        return Vec::new();
    };
    let refs = l.common.join("refs");
    l.read_only
        .iter()
        .filter(|c| c.path.starts_with(&refs))
        .map(|c| {
            let mut lock = c.path.clone().into_os_string();
            lock.push(".lock");
            PathBuf::from(lock)
        })
        .filter(|p| std::fs::symlink_metadata(p).is_err())
        .collect()
}

/// After the run: removes each of `locks` ([`absent_ref_locks`]) that is there now, when it
/// is a file or a symlink (never followed), through a descriptor of its directory; returns
/// those removed. A host git holding one at that very moment fails its update with an error
/// (its commit is kept; nothing is lost).
pub fn remove_ref_locks(locks: &[PathBuf]) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for lock in locks {
        let (Some(dir), Some(name)) = (lock.parent(), lock.file_name()) else {
            continue;
        };
        let Ok(dir) = paths::open_nofollow(dir) else {
            continue;
        };
        let is_file = paths::openat_path(&dir, Path::new(name))
            .and_then(|fd| paths::kind(&fd))
            .is_ok_and(|k| k != Kind::Dir);
        if is_file && paths::unlink_at(&dir, name, 0).is_ok() {
            removed.push(lock.clone());
        }
    }
    removed
}

/// After the run: removes each placeholder but a [`Placeholder::Ref`] still as it was
/// created (the same inode, in the directory it was made in: an empty directory, a file with
/// the placeholder's content),
/// through descriptors only (an audit had a root supervisor delete a host file through a
/// ref directory swapped for a symlink).
pub fn remove_placeholders(created: &[Created]) {
    for c in created {
        let name = c.name.to_string_lossy();
        let Ok(st) = paths::stat_at(&c.dir, &name) else {
            continue;
        };
        if (st.st_dev, st.st_ino) != c.identity {
            continue;
        }
        let flags = match &c.placeholder {
            Placeholder::Ref(_) => continue,
            Placeholder::EmptyDir => libc::AT_REMOVEDIR, // fails unless empty
            Placeholder::File(text) => {
                let same = paths::read_small_file(&c.dir, &name, text.len())
                    .is_ok_and(|d| d == text.as_bytes());
                if !same {
                    continue;
                }
                0
            }
        };
        let _ = paths::unlink_at(&c.dir, &c.name, flags);
    }
}

/// `path` and its missing parents made as directories, each with `mkdirat` in its parent
/// opened without following a symlink (the common dir's `refs/` can be written by others;
/// `create_dir_all` followed a symlink planted there).
fn make_dirs(path: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = path;
    let mut dir = loop {
        match paths::open_nofollow(at) {
            Ok(fd) => break fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                missing.push(at.file_name().ok_or(e)?.to_os_string());
                at = at
                    .parent()
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
            }
            Err(e) => return Err(e),
        }
    };
    for name in missing.iter().rev() {
        // mkdirat never follows a symlink at the name.
        match rustix::fs::mkdirat(&dir, name, rustix::fs::Mode::from_bits_retain(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        dir = paths::openat_dir_path(&dir, Path::new(name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whoever can write the common dir swaps a placeholder's directory for a symlink to a
    /// directory holding a file of the same name and content: that file stays, and the
    /// placeholder, where it was moved, goes (an audit had a root supervisor delete a host
    /// file this way, through the path).
    #[test]
    fn a_placeholder_is_removed_where_it_was_made_never_through_a_swapped_path() {
        let s = tempfile::tempdir().unwrap();
        let (x, target) = (s.path().join("x"), s.path().join("target"));
        std::fs::create_dir(&x).unwrap();
        std::fs::create_dir(&target).unwrap();
        let dir = paths::open_nofollow(&x).unwrap();
        let ph = Placeholder::File("1234\n".into());
        let identity = paths::identity(&create(&dir, "b".as_ref(), &ph).unwrap()).unwrap();
        let made = Created {
            dir,
            name: "b".into(),
            identity,
            placeholder: ph,
        };
        std::fs::write(target.join("b"), "1234\n").unwrap();
        std::fs::rename(&x, s.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&target, &x).unwrap();
        remove_placeholders(&[made]);
        assert!(
            target.join("b").exists(),
            "the file the symlink leads to was removed"
        );
        assert!(!s.path().join("moved/b").exists(), "the placeholder stays");
    }

    /// Root over another user's checkout: each kind of placeholder belongs to the owner of
    /// the directory it is made in, and the identity `create` returns is the one made there.
    #[test]
    fn a_placeholder_belongs_to_its_directory_s_owner() {
        if !rustix::process::geteuid().is_root() {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI runs as root"
            );
            eprintln!("SKIP a_placeholder_belongs_to…: needs root (chown)");
            return;
        }
        let s = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(s.path(), Some(65534), Some(65534)).unwrap();
        let dir = paths::open_nofollow(s.path()).unwrap();
        for (name, ph) in [
            ("d", Placeholder::EmptyDir),
            ("f", Placeholder::File("x\n".into())),
        ] {
            let made = create(&dir, name.as_ref(), &ph).unwrap();
            let st = paths::stat_at(&dir, name).unwrap();
            assert_eq!((st.st_uid, st.st_gid), (65534, 65534), "{name}");
            assert_eq!(paths::identity(&made).unwrap(), (st.st_dev, st.st_ino));
        }
    }

    #[test]
    fn config_keys_are_found_case_insensitively_with_the_last_value_winning() {
        let c = Config::parse(
            "[core]\n\thooksPath = .githooks ; comment\n[extensions]\n  worktreeConfig\n[core]\nHOOKSPATH = \"a b\"\n",
        );
        assert_eq!(c.get("core", "hookspath").as_deref(), Some("a b"));
        assert!(c.bool("extensions", "worktreeconfig"));
        assert!(!c.bool("extensions", "other"));
    }

    #[test]
    fn hooks_paths_inside_the_worktree_are_recognised() {
        let wt = Path::new("/w/t");
        assert_eq!(
            in_tree(".githooks", wt),
            Some(PathBuf::from("/w/t/.githooks"))
        );
        assert_eq!(in_tree("a/../b", wt), Some(PathBuf::from("/w/t/b")));
        assert_eq!(in_tree("../x", wt), None);
        assert_eq!(in_tree("/etc/hooks", wt), None);
        assert_eq!(in_tree(".", wt), None);
    }

    /// A linked worktree's common dir is bound read-only, `objects/`, `refs/` and `logs/`
    /// writable beneath it (made if absent), then the other worktrees' branches read-only,
    /// then this worktree's gitdir writable: a top level the command could add names to had
    /// them removed at exit, the host's own among them.
    #[test]
    fn a_common_dir_is_read_only_but_for_objects_refs_and_logs() {
        let tmp = tempfile::tempdir().unwrap();
        let common = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(common.join("refs/heads")).unwrap();
        std::fs::write(common.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(
            common.join("refs/heads/main"),
            format!("{}\n", "1".repeat(40)),
        )
        .unwrap();
        let gitdir = common.join("worktrees/wt");
        let set = ControlSet {
            common: Some(common_layer(&common, &gitdir)),
            ..Default::default()
        };
        let layers = set.layers();
        let at = |p: &Path| layers.iter().position(|(l, _)| l == p).unwrap();
        assert_eq!(layers[at(&common)], (common.clone(), false));
        for sub in ["objects", "refs", "logs"] {
            assert!(layers[at(&common.join(sub))].1, "{sub}: {layers:?}");
            assert!(at(&common.join(sub)) > at(&common));
        }
        let branch = common.join("refs/heads/main");
        assert!(!layers[at(&branch)].1);
        assert!(at(&branch) > at(&common.join("refs")));
        // Its directory is a mount point too (it cannot be renamed away with the branch).
        let heads = common.join("refs/heads");
        assert!(layers[at(&heads)].1);
        assert!(at(&common.join("refs")) < at(&heads) && at(&heads) < at(&branch));
        assert_eq!(layers.last(), Some(&(gitdir, true)));
        let absent = &set.common.as_ref().unwrap().writable;
        assert!(absent
            .iter()
            .all(|c| c.placeholder == Some(Placeholder::EmptyDir)));
    }

    #[test]
    fn a_main_worktree_protects_config_hooks_and_an_absent_commondir() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(wt.join(".git/hooks")).unwrap();
        std::fs::write(
            wt.join(".git/config"),
            "[core]\nhooksPath = .husky/_\n[extensions]\nworktreeConfig = true\n",
        )
        .unwrap();
        let set = control_set(&GitLayout::MainWorktree, &wt);
        let paths: Vec<&Path> = set.read_only.iter().map(|c| c.path.as_path()).collect();
        for p in [
            ".git/config",
            ".git/hooks",
            ".git/info",
            ".git/commondir",
            ".git/config.worktree",
            ".husky",
        ] {
            assert!(paths.contains(&wt.join(p).as_path()), "{p} in {paths:?}");
        }
        assert_eq!(set.pinned, vec![wt.join(".git")]);
        let created = prepare(&set).unwrap();
        assert_eq!(
            std::fs::read_to_string(wt.join(".git/commondir")).unwrap(),
            ".\n"
        );
        assert!(wt.join(".husky").is_dir());
        remove_placeholders(&created);
        assert!(!wt.join(".git/commondir").exists());
        assert!(!wt.join(".husky").exists());
        assert!(wt.join(".git/hooks").is_dir());
    }

    #[test]
    fn a_symlinked_control_path_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(wt.join(".git")).unwrap();
        std::fs::write(wt.join(".git/config"), "").unwrap();
        std::os::unix::fs::symlink("/etc", wt.join(".git/hooks")).unwrap();
        let set = control_set(&GitLayout::MainWorktree, &wt);
        let (path, _) = prepare(&set).unwrap_err();
        assert_eq!(path, wt.join(".git/hooks"));
    }
}
