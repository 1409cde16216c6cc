//! Secret locations: the files and directories of the user's credentials that the command must
//! not read.
//!
//! - Owns the default list, [`SECRET_LOCATIONS`] (a plain table: where each location is, relative
//!   to which base directory, and what it holds), and what it leaves out on purpose,
//!   [`NOT_SECRET_LOCATIONS`].
//! - Entry points: [`for_user`] (the default set of one user, from their home and XDG
//!   directories), [`passwd_homes`] (every user's home, from `/etc/passwd`'s text, for a root
//!   caller), [`users`] (whose locations a run hides), [`default_set`] (theirs together),
//!   [`pieces`] (one user's set as base and path,
//!   for a reader that lists each base once) and [`adjust`] (`--hide` and `--allow-read`).
//! - Pure functions over given paths and text: it never touches the filesystem or the
//!   environment (`shofer-sandbox` reads those, checks which locations exist and hides them).
//!
//! ```
//! use shofer_core::secretpaths::{for_user, UserDirs};
//! use std::path::{Path, PathBuf};
//! let set = for_user(&UserDirs::defaults(Path::new("/home/me"), 1000));
//! assert!(set.contains(&PathBuf::from("/home/me/.ssh")));
//! assert!(set.contains(&PathBuf::from("/home/me/.config/gh/hosts.yml")));
//! assert!(!set.contains(&PathBuf::from("/home/me/.npmrc"))); // settings too: not hidden
//! ```
//!
//! # What is in the set, and what is not
//! A location is in the set when what it holds is a credential (a key, a token, a password, a
//! session cookie) or as good as one (a shell history, which holds pasted tokens). A file that
//! also holds ordinary settings, which tools inside the sandbox must keep reading, is *not*
//! hidden: `~/.npmrc` (registry, proxy and cache settings beside `_authToken` lines),
//! `~/.gitconfig`, `~/.config/gh/config.yml`, `~/.config/pip/pip.conf`; see
//! [`NOT_SECRET_LOCATIONS`]. A token written into one of them is readable: keep tokens in
//! the files that hold only tokens (or in a secret variable, which is withheld), or hide the
//! file with `--hide`.
//!
//! Whole directories are hidden where the tool keeps only credentials and state about them
//! there (`~/.ssh`, `~/.gnupg`, `~/.aws`, `~/.azure`, gcloud's, `~/.kube`, password stores,
//! keyrings, browser profiles). `~/.ssh` goes whole, as the peers do (Codex, sandbox-runtime),
//! although `known_hosts` and `config` are not secret: its keys may have any name
//! (`IdentityFile` picks them), so no file list would be complete. What that breaks: `ssh` and
//! `git` over ssh inside the sandbox cannot verify host keys or find keys; a human who wants
//! them allows one file (`--allow-read ~/.ssh/known_hosts`, which exposes that file only), the
//! directory (`--allow-read ~/.ssh`, which exposes the keys) or uses https remotes.
//!
//! # Paths
//! Each entry is relative to a [`Base`]: the home directory, `$XDG_CONFIG_HOME`,
//! `$XDG_DATA_HOME` or `$XDG_RUNTIME_DIR`. An XDG entry is expanded under the variable's value
//! *and* under its default (`~/.config`, `~/.local/share`, `/run/user/<uid>`) when they
//! differ: tools disagree on whether they honour the variable. Relative XDG values are
//! ignored, as the XDG Base Directory specification says. When the caller is root, every home
//! of `/etc/passwd` its user owns gets the same set with the default XDG directories
//! ([`users`]).
//! A location that does not exist costs nothing: the sandbox skips it.

use std::path::{Path, PathBuf};

/// The directory an entry of [`SECRET_LOCATIONS`] is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// The user's home (`$HOME` for the caller, the `/etc/passwd` home for others).
    Home,
    /// `$XDG_CONFIG_HOME`, default `~/.config`.
    ConfigHome,
    /// `$XDG_DATA_HOME`, default `~/.local/share`.
    DataHome,
    /// `$XDG_RUNTIME_DIR`, default `/run/user/<uid>`.
    RuntimeDir,
}

/// One secret location: where it is. What it holds is the comment above its entry in the
/// tables (text, not data: the static sandbox binary carries only the paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// What `path` is relative to.
    pub base: Base,
    /// The path under `base` (relative, no `..`).
    pub path: &'static str,
}

const fn home(path: &'static str) -> Location {
    Location {
        base: Base::Home,
        path,
    }
}

const fn config(path: &'static str) -> Location {
    Location {
        base: Base::ConfigHome,
        path,
    }
}

const fn data(path: &'static str) -> Location {
    Location {
        base: Base::DataHome,
        path,
    }
}

const fn runtime(path: &'static str) -> Location {
    Location {
        base: Base::RuntimeDir,
        path,
    }
}

/// The default secret locations: unreadable to the command (`EACCES`) unless `--allow-read`
/// names one.
pub const SECRET_LOCATIONS: &[Location] = &[
    // Keys.
    // SSH: private keys (any name, IdentityFile), plus known_hosts and config (see the module docs)
    home(".ssh"),
    // GnuPG: private keys (private-keys-v1.d), trust database, agent sockets
    home(".gnupg"),
    // Cloud CLIs.
    // AWS CLI and SDKs: credentials (access keys), config, sso/cache and cli/cache tokens
    home(".aws"),
    // Azure CLI: msal_token_cache.json, service principal entries, accessTokens.json
    home(".azure"),
    // Google Cloud SDK: credentials.db, access_tokens.db, application_default_credentials.json, legacy_credentials
    config("gcloud"),
    // Kubernetes: kubeconfig (client keys, bearer tokens, exec credentials), http cache
    home(".kube"),
    // Container registries.
    // Docker: registry logins (`auths`, base64 user:password or identity tokens)
    home(".docker/config.json"),
    // Podman, Buildah, Skopeo: registry logins (podman login's default)
    runtime("containers/auth.json"),
    // Podman, Buildah, Skopeo: registry logins (persistent location)
    config("containers/auth.json"),
    // Git and HTTP credentials.
    // curl, git, ftp, pip: machine/login/password lines
    home(".netrc"),
    // git credential-store: https://user:token@host lines
    home(".git-credentials"),
    // git credential-store: its XDG location
    config("git/credentials"),
    // GitHub CLI: oauth_token per host (config.yml, ordinary settings, stays readable)
    config("gh/hosts.yml"),
    // GitHub Copilot (editors, CLI): hosts.json and apps.json with OAuth tokens
    config("github-copilot"),
    // hub (GitHub's older CLI): oauth_token
    config("hub"),
    // Package registries' token files (files that hold only credentials).
    // PyPI uploads (twine): repository passwords and API tokens (pip does not read it)
    home(".pypirc"),
    // cargo: registry tokens (cargo login)
    home(".cargo/credentials.toml"),
    // cargo: registry tokens, the name before Rust 1.39
    home(".cargo/credentials"),
    // RubyGems: API keys (gem push)
    home(".gem/credentials"),
    // Terraform: HCP Terraform / registry API tokens (terraform login)
    home(".terraform.d/credentials.tfrc.json"),
    // HashiCorp Vault CLI: the login token
    home(".vault-token"),
    // PostgreSQL clients: passwords
    home(".pgpass"),
    // Password stores and keyrings.
    // pass: GPG-encrypted passwords and their names
    home(".password-store"),
    // GNOME Keyring: the login keyring (passwords, tokens, Wi-Fi keys)
    data("keyrings"),
    // KDE Wallet: the wallets
    data("kwalletd"),
    // Browser profiles: cookies, saved passwords, session tokens.
    // Firefox: profiles (cookies.sqlite, logins.json, key4.db)
    home(".mozilla"),
    // Google Chrome: profiles (Cookies, Login Data)
    config("google-chrome"),
    // Chromium: profiles (Cookies, Login Data)
    config("chromium"),
    // Brave: profiles (Cookies, Login Data)
    config("BraveSoftware"),
    // Microsoft Edge: profiles (Cookies, Login Data)
    config("microsoft-edge"),
    // Shell and REPL histories: pasted tokens, passwords on command lines.
    // bash: command history
    home(".bash_history"),
    // zsh: command history
    home(".zsh_history"),
    // fish: command history
    data("fish/fish_history"),
    // Python REPL: history
    home(".python_history"),
    // Node.js REPL: history
    home(".node_repl_history"),
    // psql: history (ALTER ROLE ... PASSWORD)
    home(".psql_history"),
    // mysql client: history (passwords in statements)
    home(".mysql_history"),
    // Agents' own credentials.
    // Claude Code on Linux: the claude.ai OAuth tokens (CLAUDE_CONFIG_DIR moves it)
    home(".claude/.credentials.json"),
    // Claude Code: settings and project state, and `primaryApiKey` after a Console login
    home(".claude.json"),
    // Codex CLI: OPENAI_API_KEY or the ChatGPT login's tokens
    home(".codex/auth.json"),
    // Gemini CLI: the Google login's OAuth tokens
    home(".gemini/oauth_creds.json"),
    // Gemini CLI: MCP servers' OAuth tokens
    home(".gemini/mcp-oauth-tokens.json"),
    // opencode: providers' API keys and OAuth tokens
    data("opencode/auth.json"),
];

/// Files that may hold a credential but also hold ordinary settings that tools inside the
/// sandbox need: *not* hidden (hide one with `--hide`). Listed so the decision is written down.
pub const NOT_SECRET_LOCATIONS: &[Location] = &[
    // npm, pnpm, yarn 1: registry, proxy, cache settings; `//host/:_authToken=` lines too. npm must keep working with an .npmrc without tokens; tokens belong in NPM_TOKEN (withheld) referenced as ${NPM_TOKEN}
    home(".npmrc"),
    // yarn 2+: settings; npmAuthToken entries too (same decision as .npmrc)
    home(".yarnrc.yml"),
    // git: settings (credential helpers are named, not stored)
    home(".gitconfig"),
    // git: settings, XDG location
    config("git/config"),
    // GitHub CLI: settings and aliases
    config("gh/config.yml"),
    // pip: index settings (a URL with a password is possible)
    config("pip/pip.conf"),
    // Docker: only config.json (in the set) holds logins; contexts, buildx and CLI plugins must stay readable
    home(".docker"),
    // Claude Code: settings, agents, commands that a nested run reads; only .credentials.json is hidden
    home(".claude"),
    // cargo: config.toml, the registry cache and installed binaries
    home(".cargo"),
];

/// Where one user's [`Base`] directories are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserDirs {
    /// The home directory (absolute).
    pub home: PathBuf,
    /// `$XDG_CONFIG_HOME` when set to an absolute path.
    pub config_home: Option<PathBuf>,
    /// `$XDG_DATA_HOME` when set to an absolute path.
    pub data_home: Option<PathBuf>,
    /// `$XDG_RUNTIME_DIR` when set to an absolute path.
    pub runtime_dir: Option<PathBuf>,
    /// The user's uid (for the default runtime directory, `/run/user/<uid>`).
    pub uid: u32,
}

impl UserDirs {
    /// A user with only the XDG defaults (another user's home, seen by root).
    pub fn defaults(home: &Path, uid: u32) -> UserDirs {
        UserDirs {
            home: home.to_path_buf(),
            config_home: None,
            data_home: None,
            runtime_dir: None,
            uid,
        }
    }

    /// The directories `base` names for this user: the variable's value (when absolute) and
    /// the default, each also cleaned lexically where that differs (a `..` in `HOME` or an XDG
    /// variable: the kernel reads the path through the component before it, Go's and
    /// Python's path joins drop both: [`crate::lexical`]), without repeats.
    pub fn bases(&self, base: Base) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for b in self.named(base) {
            for p in [b.clone(), crate::lexical::clean(&b)] {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// The directories `base` names, as named: the variable's value (when absolute) and the
    /// default.
    fn named(&self, base: Base) -> Vec<PathBuf> {
        let absolute = |p: &Option<PathBuf>| p.clone().filter(|p| p.is_absolute());
        let (set, default) = match base {
            Base::Home => return vec![self.home.clone()],
            Base::ConfigHome => (absolute(&self.config_home), self.home.join(".config")),
            Base::DataHome => (absolute(&self.data_home), self.home.join(".local/share")),
            Base::RuntimeDir => (
                absolute(&self.runtime_dir),
                PathBuf::from(format!("/run/user/{}", self.uid)),
            ),
        };
        let mut out: Vec<PathBuf> = set.into_iter().collect();
        if !out.contains(&default) {
            out.push(default);
        }
        out
    }
}

/// The default set of one user: every [`SECRET_LOCATIONS`] entry under each of its bases, in
/// table order, without repeats. A relative home yields nothing (no location could be named).
pub fn for_user(dirs: &UserDirs) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if !dirs.home.is_absolute() {
        return out;
    }
    for loc in SECRET_LOCATIONS {
        for base in dirs.bases(loc.base) {
            push_new(&mut out, base.join(loc.path));
        }
    }
    out
}

/// [`for_user`] grouped by base directory: `(base, paths under it)`, each base once, the paths
/// in table order: a reader can list each base once and look only at the entries whose first
/// component is there.
pub fn pieces(dirs: &UserDirs) -> Vec<(PathBuf, Vec<&'static str>)> {
    let mut out: Vec<(PathBuf, Vec<&'static str>)> = Vec::new();
    if !dirs.home.is_absolute() {
        return out;
    }
    let kinds = [
        Base::Home,
        Base::ConfigHome,
        Base::DataHome,
        Base::RuntimeDir,
    ];
    let bases: Vec<(Base, Vec<PathBuf>)> = kinds.iter().map(|&k| (k, dirs.bases(k))).collect();
    for loc in SECRET_LOCATIONS {
        let Some((_, of_kind)) = bases.iter().find(|(k, _)| *k == loc.base) else {
            continue;
        };
        for base in of_kind {
            match out
                .iter_mut()
                .find(|(b, _)| b.as_os_str() == base.as_os_str())
            {
                Some((_, paths)) => paths.push(loc.path),
                None => out.push((base.clone(), vec![loc.path])),
            }
        }
    }
    out
}

/// `(uid, home)` of every entry of `/etc/passwd`'s text whose home is absolute and not `/`
/// (a home of `/` would make `/.ssh` and such secret locations of everyone's root, which the
/// caller's own set already names when the caller's home is `/`). Malformed lines are skipped.
pub fn passwd_homes(passwd: &str) -> Vec<(u32, PathBuf)> {
    let mut out: Vec<(u32, PathBuf)> = Vec::new();
    for line in passwd.lines() {
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() < 7 {
            continue;
        }
        let Ok(uid) = fields[2].parse::<u32>() else {
            continue;
        };
        let home = Path::new(fields[5]);
        if !home.is_absolute() || home == Path::new("/") {
            continue;
        }
        if !out.iter().any(|(_, h)| h == home) {
            out.push((uid, home.to_path_buf()));
        }
    }
    out
}

/// The users whose locations a run hides, in order: the caller's own directories (`var` reads
/// `HOME` and the XDG variables) and the passwd home of the caller's `uid` when it differs, or
/// when `$HOME` is unset or relative (a changed `$HOME` must not leave the real home
/// readable); then, for a root caller (`root`), every other passwd home, with the default XDG
/// directories, that `owns(uid, home)` accepts (a reader checks the user owns it: system
/// accounts name shared directories such as `/bin` or `/var/www`, or none).
pub fn users(
    var: impl Fn(&str) -> Option<PathBuf>,
    uid: u32,
    root: bool,
    passwd: &str,
    owns: impl Fn(u32, &Path) -> bool,
) -> Vec<UserDirs> {
    let mut out = Vec::new();
    if let Some(home) = var("HOME").filter(|h| h.is_absolute()) {
        out.push(UserDirs {
            home,
            config_home: var("XDG_CONFIG_HOME"),
            data_home: var("XDG_DATA_HOME"),
            runtime_dir: var("XDG_RUNTIME_DIR"),
            uid,
        });
    }
    let homes = passwd_homes(passwd);
    let own = homes.iter().filter(|(u, _)| *u == uid);
    let others = homes
        .iter()
        .filter(|(u, home)| root && *u != uid && owns(*u, home));
    for (u, home) in own.chain(others) {
        if !out.iter().any(|d| d.home == *home) {
            out.push(UserDirs::defaults(home, *u));
        }
    }
    out
}

/// The default set of `users` ([`users`]): each one's [`for_user`], without repeats.
pub fn default_set(users: &[UserDirs]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in users.iter().flat_map(for_user) {
        push_new(&mut out, p);
    }
    out
}

/// The set after the flags: `set` without the locations an `allow_read` path names (the
/// location itself, or one beneath it), plus every `hide` path not already there. Paths compare
/// component-wise as given (the caller makes them absolute and lexically clean).
pub fn adjust(set: Vec<PathBuf>, allow_read: &[PathBuf], hide: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = set
        .into_iter()
        .filter(|loc| !allow_read.iter().any(|a| loc.starts_with(a)))
        .collect();
    for h in hide {
        push_new(&mut out, h.clone());
    }
    out
}

fn push_new(out: &mut Vec<PathBuf>, p: PathBuf) {
    if !out.contains(&p) {
        out.push(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn every_entry_is_relative_clean_and_has_a_reason() {
        for loc in SECRET_LOCATIONS.iter().chain(NOT_SECRET_LOCATIONS) {
            assert!(!loc.path.is_empty(), "{loc:?}");
            let path = Path::new(loc.path);
            assert!(path.is_relative(), "{loc:?}");
            assert!(
                path.components()
                    .all(|c| matches!(c, std::path::Component::Normal(_))),
                "{loc:?}"
            );
        }
        // Nothing is both hidden and kept readable.
        for keep in NOT_SECRET_LOCATIONS {
            assert!(
                !SECRET_LOCATIONS
                    .iter()
                    .any(|s| s.base == keep.base && s.path == keep.path),
                "{keep:?}"
            );
        }
    }

    #[test]
    fn for_user_expands_the_home_and_xdg_defaults() {
        let set = for_user(&UserDirs::defaults(Path::new("/home/me"), 1000));
        for want in [
            "/home/me/.ssh",
            "/home/me/.gnupg",
            "/home/me/.aws",
            "/home/me/.azure",
            "/home/me/.config/gcloud",
            "/home/me/.kube",
            "/home/me/.docker/config.json",
            "/run/user/1000/containers/auth.json",
            "/home/me/.config/containers/auth.json",
            "/home/me/.netrc",
            "/home/me/.git-credentials",
            "/home/me/.config/git/credentials",
            "/home/me/.pypirc",
            "/home/me/.cargo/credentials.toml",
            "/home/me/.cargo/credentials",
            "/home/me/.gem/credentials",
            "/home/me/.config/gh/hosts.yml",
            "/home/me/.password-store",
            "/home/me/.local/share/keyrings",
            "/home/me/.mozilla",
            "/home/me/.config/google-chrome",
            "/home/me/.config/chromium",
            "/home/me/.bash_history",
            "/home/me/.zsh_history",
            "/home/me/.local/share/fish/fish_history",
            "/home/me/.python_history",
            "/home/me/.claude/.credentials.json",
            "/home/me/.claude.json",
            "/home/me/.codex/auth.json",
            "/home/me/.gemini/oauth_creds.json",
        ] {
            assert!(set.contains(&p(want)), "{want} missing from {set:?}");
        }
        for not in [
            "/home/me/.npmrc",
            "/home/me/.gitconfig",
            "/home/me/.config/gh/config.yml",
            "/home/me/.claude",
            "/home/me/.docker",
            "/home/me/.cargo",
            "/home/me",
        ] {
            assert!(!set.contains(&p(not)), "{not} must stay readable");
        }
        let mut sorted = set.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), set.len(), "no repeats");
    }

    #[test]
    fn xdg_values_add_to_the_defaults_and_relative_ones_are_ignored() {
        let dirs = UserDirs {
            home: p("/home/me"),
            config_home: Some(p("/cfg")),
            data_home: Some(p("relative/data")),
            runtime_dir: Some(p("/run/user/1000")),
            uid: 1000,
        };
        let set = for_user(&dirs);
        assert!(set.contains(&p("/cfg/gcloud")));
        assert!(set.contains(&p("/home/me/.config/gcloud")));
        assert!(set.contains(&p("/home/me/.local/share/keyrings")));
        assert!(!set.iter().any(|l| l.starts_with("relative")));
        assert_eq!(
            set.iter()
                .filter(|l| l.ends_with("containers/auth.json") && l.starts_with("/run"))
                .count(),
            1
        );
        assert!(for_user(&UserDirs::defaults(Path::new("home"), 1)).is_empty());
    }

    #[test]
    fn passwd_homes_reads_every_absolute_home_once() {
        let text = "root:x:0:0:root:/root:/bin/bash\n\
                    # a comment\n\
                    daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
                    me:x:1000:1000:Me,,,:/home/me:/bin/bash\n\
                    twin:x:1001:1001::/home/me:/bin/sh\n\
                    slash:x:5:5::/:/bin/sh\n\
                    rel:x:6:6::home/rel:/bin/sh\n\
                    bad:x:notanumber:1::/home/bad:/bin/sh\n\
                    short:x:7\n";
        assert_eq!(
            passwd_homes(text),
            [(0, p("/root")), (1, p("/usr/sbin")), (1000, p("/home/me"))]
        );
    }

    #[test]
    fn users_are_the_caller_its_passwd_home_and_for_root_every_owned_home() {
        let passwd = "root:x:0:0:root:/root:/bin/sh\nme:x:1000:1000::/home/me:/bin/sh\n\
                      bin:x:2:2::/bin:/usr/sbin/nologin\n";
        let env = |home: &'static str| {
            move |n: &str| match n {
                "HOME" => Some(p(home)),
                "XDG_CONFIG_HOME" => Some(p("/elsewhere/cfg")),
                _ => None,
            }
        };
        let owned = |_: u32, h: &Path| h != Path::new("/bin");
        // A changed $HOME keeps the real one (the passwd home) too; others only for root.
        let me = users(env("/tmp/h"), 1000, false, passwd, owned);
        let homes: Vec<&Path> = me.iter().map(|d| d.home.as_path()).collect();
        assert_eq!(homes, [Path::new("/tmp/h"), Path::new("/home/me")]);
        assert_eq!(me[0].config_home, Some(p("/elsewhere/cfg")));
        assert_eq!(me[1].config_home, None);
        let root = users(env("/root"), 0, true, passwd, owned);
        let homes: Vec<&Path> = root.iter().map(|d| d.home.as_path()).collect();
        assert_eq!(homes, [Path::new("/root"), Path::new("/home/me")]);
        // A relative $HOME counts for nothing; the passwd home still does.
        let rel = users(env("rel"), 1000, false, passwd, owned);
        assert_eq!(rel.len(), 1);
        assert_eq!(rel[0].home, p("/home/me"));
    }

    #[test]
    fn default_set_adds_other_homes_with_default_xdg_dirs() {
        let caller = UserDirs {
            home: p("/root"),
            config_home: Some(p("/root/cfg")),
            data_home: None,
            runtime_dir: None,
            uid: 0,
        };
        let users = [
            caller,
            UserDirs::defaults(&p("/root"), 0),
            UserDirs::defaults(&p("/home/me"), 1000),
        ];
        let set = default_set(&users);
        assert!(set.contains(&p("/root/.ssh")));
        assert!(set.contains(&p("/root/cfg/gcloud")));
        assert!(set.contains(&p("/home/me/.ssh")));
        assert!(set.contains(&p("/home/me/.config/gcloud")));
        assert!(set.contains(&p("/run/user/1000/containers/auth.json")));
        assert_eq!(set.iter().filter(|l| **l == p("/root/.ssh")).count(), 1);
    }

    #[test]
    fn adjust_unhides_exact_or_beneath_and_adds_hidden() {
        let set = vec![p("/h/.ssh"), p("/h/.aws"), p("/h/.config/gh/hosts.yml")];
        let out = adjust(
            set.clone(),
            &[p("/h/.ssh"), p("/h/.config")],
            &[p("/h/.npmrc"), p("/h/.aws")],
        );
        assert_eq!(out, [p("/h/.aws"), p("/h/.npmrc")]);
        // A sibling with a common prefix is not beneath.
        let out = adjust(set.clone(), &[p("/h/.ss")], &[]);
        assert_eq!(out, set);
    }
}
