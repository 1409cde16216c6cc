//! Issue 35: package managers work inside by default, through private, persistent,
//! per-worktree views of their caches, and the host's caches stay byte-identical.
//!
//! Real tools, real runs on every backend available here: `npm install` of a tarball made
//! with `npm pack`, `pip install --user` of a local wheel, `cargo build` of a crate with a
//! new git dependency from a local bare repository; each run twice (the second sees the
//! first's cache entry), the host's home hashed before and after. An attack test plants
//! entries and symlinks in the cache paths: the host's caches do not change and another
//! worktree's runs do not see them. go, uv and pnpm are not installed here (not tested).

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// A scratch home with caches, fixtures and two worktrees.
struct World {
    _scratch: Scratch,
    home: PathBuf,
    fixtures: PathBuf,
    wt: [PathBuf; 2],
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn sh(dir: &Path, script: &str) {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .envs(git_env())
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", show(&out));
}

impl World {
    fn new() -> World {
        let scratch = Scratch::new();
        let root = scratch.path();
        let home = root.join("home");
        let fixtures = root.join("fixtures");
        // The host's caches, with something in each, and the state directory's parent.
        for d in [".npm", ".cargo", ".cache/pip", ".local/state"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join(".npm/host-marker"), "host").unwrap();
        std::fs::write(home.join(".cargo/config.toml"), "[net]\nretry = 1\n").unwrap();
        std::fs::create_dir_all(fixtures.join("pkg")).unwrap();
        std::fs::write(
            fixtures.join("pkg/package.json"),
            r#"{"name":"tinypkg","version":"1.0.0","main":"index.js"}"#,
        )
        .unwrap();
        std::fs::write(fixtures.join("pkg/index.js"), "module.exports = 42;\n").unwrap();
        let wt = [root.join("wt1"), root.join("wt2")];
        for w in &wt {
            std::fs::create_dir_all(w).unwrap();
            std::fs::write(
                w.join("package.json"),
                r#"{"name":"app","version":"1.0.0"}"#,
            )
            .unwrap();
        }
        World {
            _scratch: scratch,
            home,
            fixtures,
            wt,
        }
    }

    fn npm_tarball(&self) -> PathBuf {
        sh(&self.fixtures.join("pkg"), "npm pack --silent >/dev/null");
        self.fixtures.join("pkg/tinypkg-1.0.0.tgz")
    }

    /// A wheel of `tinypy` in `fixtures/wheels` (written as pip reads it).
    fn wheel_dir(&self) -> PathBuf {
        let dir = self.fixtures.join("wheels");
        std::fs::create_dir_all(&dir).unwrap();
        let script = format!(
            r#"import zipfile
with zipfile.ZipFile("{}/tinypy-1.0-py3-none-any.whl", "w") as z:
    z.writestr("tinypy.py", "V = 5\n")
    z.writestr("tinypy-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypy\nVersion: 1.0\n")
    z.writestr("tinypy-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("tinypy-1.0.dist-info/RECORD", "")
"#,
            dir.display()
        );
        let out = Command::new("python3")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
        dir
    }

    /// A bare repository of the crate `tinydep`, and a crate in worktree `i` depending on
    /// it through `git = "file://..."`.
    fn cargo_project(&self, i: usize) {
        let dep = self.fixtures.join("dep");
        if !self.fixtures.join("dep.git").exists() {
            std::fs::create_dir_all(dep.join("src")).unwrap();
            std::fs::write(
                dep.join("Cargo.toml"),
                "[package]\nname = \"tinydep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            )
            .unwrap();
            std::fs::write(dep.join("src/lib.rs"), "pub fn v() -> u32 { 7 }\n").unwrap();
            sh(&dep, "git init -q . && git add -A && git commit -qm dep");
            sh(&self.fixtures, "git clone -q --bare dep dep.git");
        }
        let w = &self.wt[i];
        std::fs::create_dir_all(w.join("src")).unwrap();
        std::fs::write(
            w.join("Cargo.toml"),
            format!(
                "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\ntinydep = {{ git = \"file://{}\" }}\n",
                self.fixtures.join("dep.git").display()
            ),
        )
        .unwrap();
        std::fs::write(
            w.join("src/main.rs"),
            "fn main() { println!(\"v={}\", tinydep::v()); }\n",
        )
        .unwrap();
    }

    /// Runs `script` in worktree `i` on `backend` with this home (every cache at its
    /// default place); returns (status, stdout+stderr).
    fn run(&self, backend: &str, i: usize, uid: Option<u32>, script: &str) -> (bool, String) {
        let out = self.run_with(Some(backend), i, uid, &[], script);
        (out.status.success(), show(&out))
    }

    /// Runs `script` in worktree `i` on `backend` (`None`: auto, as `shofer run` calls it)
    /// with this home and `vars` set on top.
    fn run_with(
        &self,
        backend: Option<&str>,
        i: usize,
        uid: Option<u32>,
        vars: &[(&str, &Path)],
        script: &str,
    ) -> std::process::Output {
        self.runner(backend, i, uid, vars, script, None).output()
    }

    /// The `package_caches` section of the report of a run of `true` (as [`World::run_with`]).
    fn report(
        &self,
        backend: &str,
        i: usize,
        uid: Option<u32>,
        vars: &[(&str, &Path)],
    ) -> serde_json::Value {
        let file = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
        let out = self
            .runner(
                Some(backend),
                i,
                uid,
                vars,
                "true",
                Some(file.reopen().unwrap()),
            )
            .output();
        assert!(out.status.success(), "{backend} {uid:?}: {}", show(&out));
        let text = std::fs::read_to_string(file.path()).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        v["package_caches"].clone()
    }

    /// A run of `script` as [`World::run_with`] builds it (with `--report 9` to `report`),
    /// not started.
    fn runner(
        &self,
        backend: Option<&str>,
        i: usize,
        uid: Option<u32>,
        vars: &[(&str, &Path)],
        script: &str,
        report: Option<std::fs::File>,
    ) -> Run {
        let mut r = Run::new(&self.wt[i]);
        if let Some(f) = report {
            r = r.arg("--report").arg("9").fd9(f);
        }
        if let Some(b) = backend {
            r = r.backend(b);
        }
        r = r.env("HOME", &self.home).env("RUSTUP_HOME", rustup_home());
        for v in [
            "XDG_STATE_HOME",
            "XDG_CACHE_HOME",
            "XDG_DATA_HOME",
            "CARGO_HOME",
            "CARGO_NET_OFFLINE",
            "npm_config_cache",
            "NPM_CONFIG_CACHE",
            "PIP_CACHE_DIR",
            "PYTHONUSERBASE",
            "PIP_FIND_LINKS",
        ] {
            r = r.env_remove(v);
        }
        for (k, v) in vars {
            r = r.env(k, v);
        }
        if let Some(u) = uid {
            r = r.with_uid(u);
        }
        r.args(["--", "sh"]).sh(script)
    }

    /// Gives the whole scratch tree to `uid` (`None`: left as it is).
    fn chown(&self, uid: Option<u32>) {
        if let Some(u) = uid {
            chown_tree(self.home.parent().unwrap(), u);
        }
    }

    /// The hash of the host's home, the state directory left out: names, modes, contents,
    /// symlink targets.
    fn host_hash(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.home, &self.home, &mut out);
        out.sort();
        out
    }
}

fn chown_tree(path: &Path, uid: u32) {
    let status = Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// The uids to run as: ours, and an unprivileged one when we are root.
fn uids() -> Vec<Option<u32>> {
    let mut uids = vec![None];
    if is_root() {
        uids.push(Some(UNPRIV));
    }
    uids
}

/// The namespace backends usable here.
fn namespace_backends() -> Vec<&'static str> {
    backends()
        .into_iter()
        .filter(|b| matches!(*b, "layered" | "userns"))
        .collect()
}

/// The entry of `cache` in a report's `package_caches`.
fn cache_entry<'a>(caches: &'a serde_json::Value, cache: &str) -> &'a serde_json::Value {
    caches["caches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cache"] == cache)
        .unwrap_or_else(|| panic!("no {cache} in {caches}"))
}

fn rustup_home() -> PathBuf {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".rustup")
        })
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let rel = p.strip_prefix(root).unwrap().to_path_buf();
        if rel == Path::new(".local/state") {
            continue;
        }
        let m = std::fs::symlink_metadata(&p).unwrap();
        let what = if m.file_type().is_symlink() {
            format!("-> {}", std::fs::read_link(&p).unwrap().display())
        } else if m.is_dir() {
            walk(root, &p, out);
            "dir".into()
        } else {
            format!("{:?}", std::fs::read(&p).unwrap())
        };
        out.push(format!("{} {:o} {}", rel.display(), m.mode(), what));
    }
}

#[test]
fn npm_install_works_persists_and_leaves_the_host_cache_alone() {
    if !have("npm") {
        return skip("npm_install", "npm is not installed");
    }
    for b in backends() {
        let mut uids = vec![None];
        if is_root() {
            uids.push(Some(UNPRIV));
        }
        for uid in uids {
            let w = World::new();
            let tgz = w.npm_tarball();
            if let Some(u) = uid {
                let status = Command::new("chown")
                    .args(["-R", &format!("{u}:{u}")])
                    .arg(w.home.parent().unwrap())
                    .status()
                    .unwrap();
                assert!(status.success());
            }
            let before = w.host_hash();
            let install = format!(
                "npm install --no-audit --no-fund --no-update-notifier {} && node -e 'process.exit(require(\"tinypkg\") === 42 ? 0 : 1)'",
                tgz.display()
            );
            let (ok, out) = w.run(b, 0, uid, &install);
            assert!(ok, "{b} {uid:?}: {out}");
            // The second run sees the first's cache entry (and, over an overlay, the host's).
            let overlay = matches!(b, "layered" | "userns");
            let check = format!(
                "c=$(npm config get cache) && test -d \"$c/_cacache/content-v2\" {}",
                if overlay {
                    "&& test -f ~/.npm/host-marker"
                } else {
                    ""
                }
            );
            let (ok, out) = w.run(b, 0, uid, &check);
            assert!(ok, "{b} {uid:?}: the cache did not persist: {out}");
            assert_eq!(
                before,
                w.host_hash(),
                "{b} {uid:?}: the host's home changed"
            );
        }
    }
}

#[test]
fn pip_install_user_works_and_persists() {
    if !have("python3")
        || !Command::new("python3")
            .args(["-m", "pip", "--version"])
            .output()
            .is_ok_and(|o| o.status.success())
    {
        return skip("pip_install_user", "python3 -m pip is not available");
    }
    // The interpreter itself, not a version manager's shim (pyenv's rehashes after pip and
    // fails on its read-only shims directory, whatever the caches).
    let python = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8(python.stdout).unwrap().trim().to_string();
    for b in backends() {
        let w = World::new();
        let wheels = w.wheel_dir();
        let before = w.host_hash();
        let (ok, out) = w.run(
            b,
            0,
            None,
            &format!(
                "{python} -m pip install -q --user --no-index --find-links {} tinypy",
                wheels.display()
            ),
        );
        assert!(ok, "{b}: {out}");
        let (ok, out) = w.run(
            b,
            0,
            None,
            &format!("{python} -c 'import tinypy, sys; sys.exit(0 if tinypy.V == 5 else 1)'"),
        );
        assert!(ok, "{b}: the user install did not persist: {out}");
        assert_eq!(before, w.host_hash(), "{b}: the host's home changed");
    }
}

#[test]
fn cargo_build_with_a_new_git_dependency_works_offline_the_second_time() {
    if !have("cargo") || !is_root() {
        // The toolchain lives in root's home here.
        return skip("cargo_build", "cargo (root's toolchain) is not available");
    }
    for b in backends() {
        let w = World::new();
        w.cargo_project(0);
        let before = w.host_hash();
        let (ok, out) = w.run(b, 0, None, "cargo build -q && ./target/debug/app");
        assert!(ok && out.contains("v=7"), "{b}: {out}");
        // The git checkout is in the private cache now: an offline build finds it.
        let (ok, out) = w.run(
            b,
            0,
            None,
            "rm -rf target && cargo build -q --offline && ./target/debug/app",
        );
        assert!(ok && out.contains("v=7"), "{b}: not persistent: {out}");
        assert_eq!(before, w.host_hash(), "{b}: the host's home changed");
    }
}

#[test]
fn a_poisoned_cache_stays_in_its_worktree_and_off_the_host() {
    for b in backends() {
        let w = World::new();
        let before = w.host_hash();
        let poison = "for d in ~/.npm \"$npm_config_cache\" \"$CARGO_HOME\" ~/.cargo; do \
             [ -n \"$d\" ] || continue; mkdir -p \"$d\" 2>/dev/null; \
             echo evil > \"$d/poison\" 2>/dev/null; \
             ln -s ~/.npm \"$d/escape\" 2>/dev/null; echo evil > \"$d/escape/poison2\" 2>/dev/null; \
             ln -s /etc/passwd \"$d/passwd\" 2>/dev/null; done; \
             test -f \"${npm_config_cache:-$HOME/.npm}/poison\"";
        let (ok, out) = w.run(b, 0, None, poison);
        assert!(ok, "{b}: the cache was not writable: {out}");
        assert_eq!(before, w.host_hash(), "{b}: the host's caches changed");
        // The same worktree sees its own writes again; another worktree does not.
        let seen = "test -f \"${npm_config_cache:-$HOME/.npm}/poison\"";
        let (ok, out) = w.run(b, 0, None, seen);
        assert!(ok, "{b}: not persistent: {out}");
        let (ok, out) = w.run(
            b,
            1,
            None,
            "for d in ~/.npm \"$npm_config_cache\" \"$CARGO_HOME\" ~/.cargo; do \
             [ -n \"$d\" ] || continue; \
             if [ -e \"$d/poison\" ] || [ -L \"$d/escape\" ] || [ -L \"$d/passwd\" ]; then echo seen $d; exit 1; fi; done",
        );
        assert!(ok, "{b}: another worktree sees the poison: {out}");
        assert_eq!(before, w.host_hash(), "{b}: the host's caches changed");
    }
}

#[test]
fn no_package_caches_leaves_the_environment_and_reports_off() {
    for b in backends() {
        let w = World::new();
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let report = dir.path().join("r.json");
        let out = Run::new(&w.wt[0])
            .backend(b)
            .arg("--no-package-caches")
            .env("HOME", &w.home)
            .env_remove("npm_config_cache")
            .env_remove("XDG_STATE_HOME")
            .args(["--report", "9", "--", "sh"])
            .sh("test -z \"$npm_config_cache\" && ! touch ~/.npm/x 2>/dev/null")
            .fd9(std::fs::File::create(&report).unwrap())
            .output();
        assert!(out.status.success(), "{b}: {}", show(&out));
        let text = std::fs::read_to_string(&report).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(v["package_caches"]["mode"], "off", "{b}: {v}");
        // And on by default, saying how.
        let out = Run::new(&w.wt[0])
            .backend(b)
            .env("HOME", &w.home)
            .env_remove("npm_config_cache")
            .env_remove("XDG_STATE_HOME")
            .args(["--report", "9", "--", "true"])
            .fd9(std::fs::File::create(&report).unwrap())
            .output();
        assert!(out.status.success(), "{b}: {}", show(&out));
        let text = std::fs::read_to_string(&report).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        let want = if matches!(b, "layered" | "userns") {
            "overlay"
        } else {
            "environment"
        };
        assert_eq!(v["package_caches"]["mode"], want, "{b}: {v}");
        let npm = v["package_caches"]["caches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["cache"] == "npm")
            .unwrap();
        assert_eq!(npm["how"], want, "{b}: {v}");
    }
}

/// Attack F1: a command plants a symlink where the caller's cache path runs through `/tmp`
/// (to the state directory, so the next run's overlay lies over the other caches' uppers
/// and their mounts fail). The next run, `auto` without `--report` as `shofer run` calls it,
/// must not fall back to Landlock alone: it runs in its namespaces or fails (125) naming
/// the cache, never with the host's PID namespace.
#[test]
fn a_cache_mount_the_command_breaks_never_drops_the_namespaces() {
    if !backends().contains(&"layered") {
        return skip("overlay_failure", "the layered backend is not usable here");
    }
    let host_init = std::fs::read_to_string("/proc/1/comm").unwrap();
    for uid in uids() {
        let w = World::new();
        w.chown(uid);
        let tmp = Scratch::new_in("/tmp");
        if let Some(u) = uid {
            tmp.chown_all(u);
        }
        let cache = tmp.path().join("npm");
        let npm: &[(&str, &Path)] = &[("npm_config_cache", &cache)];
        let plant = format!(
            "ln -s {} {}",
            w.home.join(".local/state").display(),
            cache.display()
        );
        let out = w.run_with(None, 0, uid, npm, &plant);
        assert!(out.status.success(), "{uid:?}: {}", show(&out));
        for _ in 0..2 {
            let out = w.run_with(None, 0, uid, npm, "cat /proc/1/comm");
            let text = show(&out);
            assert!(!text.contains("Landlock alone"), "{uid:?}: {text}");
            if out.status.success() {
                assert_ne!(
                    String::from_utf8_lossy(&out.stdout),
                    host_init,
                    "{uid:?}: the command sees the host's PID namespace: {text}"
                );
            } else {
                assert_eq!(out.status.code(), Some(125), "{uid:?}: {text}");
                assert!(text.contains("--no-package-caches"), "{uid:?}: {text}");
            }
        }
    }
}

/// Attack F2: where a cache's path runs through a place the command writes (`/tmp`, the
/// worktree), the command plants a symlink to `$HOME` there; the next run must not mount a
/// writable overlay over the whole home (nor over anything the symlink leads to): `~/.bashrc`
/// stays unwritable inside, and the report says the cache is not overlaid.
#[test]
fn a_symlink_the_command_plants_never_moves_an_overlay() {
    for b in namespace_backends() {
        for uid in uids() {
            let w = World::new();
            let tmp = Scratch::new_in("/tmp");
            if let Some(u) = uid {
                tmp.chown_all(u);
            }
            w.chown(uid);
            for xdg in [tmp.path().join("cache"), w.wt[0].join(".cache")] {
                let npm = xdg.join("npm");
                let vars: &[(&str, &Path)] =
                    &[("XDG_CACHE_HOME", &xdg), ("npm_config_cache", &npm)];
                let plant = format!(
                    "mkdir -p {x} && ln -s \"$HOME\" {x}/pip && ln -s \"$HOME\" {x}/npm",
                    x = xdg.display()
                );
                let out = w.run_with(Some(b), 0, uid, vars, &plant);
                assert!(out.status.success(), "{b} {uid:?}: {}", show(&out));
                let before = w.host_hash();
                let out = w.run_with(
                    Some(b),
                    0,
                    uid,
                    vars,
                    "if echo evil > ~/.bashrc; then echo WROTE; fi; cat ~/.bashrc; true",
                );
                let text = show(&out);
                assert!(out.status.success(), "{b} {uid:?}: {text}");
                assert!(
                    !text.contains("WROTE") && !text.contains("evil"),
                    "{b} {uid:?} {}: the home is writable inside: {text}",
                    xdg.display()
                );
                assert_eq!(
                    before,
                    w.host_hash(),
                    "{b} {uid:?}: the host's home changed"
                );
                let caches = w.report(b, 0, uid, vars);
                for cache in ["pip", "npm"] {
                    let e = cache_entry(&caches, cache);
                    assert_ne!(e["how"], "overlay", "{b} {uid:?}: {caches}");
                }
                assert_eq!(
                    cache_entry(&caches, "pip")["how"],
                    "environment",
                    "{caches}"
                );
                assert!(
                    cache_entry(&caches, "pip")["note"]
                        .as_str()
                        .is_some_and(|n| n.contains("symlink")),
                    "{caches}"
                );
            }
        }
    }
}

/// Attack F3: project A's command poisons its caches (the npm cache, pip's `--user` base);
/// A's worktree is removed and another project is made at the same path: its runs must not
/// get A's private caches.
#[test]
fn a_new_project_at_a_reused_path_gets_fresh_caches() {
    let poison = "echo evil > \"${npm_config_cache:-$HOME/.npm}/poison\" && \
                  mkdir -p \"$PYTHONUSERBASE\" && echo evil > \"$PYTHONUSERBASE/poison\"";
    let seen =
        "for f in \"${npm_config_cache:-$HOME/.npm}/poison\" \"$PYTHONUSERBASE/poison\"; do \
                if [ -e \"$f\" ]; then echo SEEN $f; exit 1; fi; done";
    for b in backends() {
        for uid in uids() {
            let w = World::new();
            w.chown(uid);
            let (ok, out) = w.run(b, 0, uid, poison);
            assert!(ok, "{b} {uid:?}: {out}");
            // The same project sees its own writes again.
            let (ok, _) = w.run(b, 0, uid, seen);
            assert!(!ok, "{b} {uid:?}: not persistent");
            std::fs::remove_dir_all(&w.wt[0]).unwrap();
            std::fs::create_dir(&w.wt[0]).unwrap();
            std::fs::write(w.wt[0].join("package.json"), r#"{"name":"b"}"#).unwrap();
            w.chown(uid);
            let (ok, out) = w.run(b, 0, uid, seen);
            assert!(
                ok,
                "{b} {uid:?}: the new project got the old one's caches: {out}"
            );
        }
    }
}

/// Attack F4: overlayfs's own attributes (`user.overlay.*`, what a later option such as
/// `redirect_dir=on` would follow) set by the command must never reach the upper.
#[test]
fn overlayfs_attributes_the_command_sets_never_reach_the_upper() {
    if namespace_backends().is_empty() || !have("setfattr") || !have("getfattr") {
        return skip(
            "overlay_xattrs",
            "no namespace backend, or setfattr/getfattr (attr) missing",
        );
    }
    for b in namespace_backends() {
        for uid in uids() {
            let w = World::new();
            w.chown(uid);
            let (ok, out) = w.run(
                b,
                0,
                uid,
                "touch ~/.npm/r && setfattr -n user.overlay.redirect -v /x ~/.npm/r; \
                 setfattr -n user.overlay.opaque -v y ~/.npm; test -f ~/.npm/r",
            );
            assert!(ok, "{b} {uid:?}: {out}");
            let caches = w.report(b, 0, uid, &[]);
            let npm = cache_entry(&caches, "npm");
            assert_eq!(npm["how"], "overlay", "{b}: {caches}");
            let upper = PathBuf::from(npm["private"].as_str().unwrap());
            for p in [upper.join("r"), upper.clone()] {
                let out = Command::new("getfattr")
                    .args(["-d", "-m", "-", "-h"])
                    .arg(&p)
                    .output()
                    .unwrap();
                // Linux 6.7+ keeps the command's as escaped names (`user.overlay.overlay.*`,
                // plain attributes to overlayfs); before, it refuses them.
                let attrs = String::from_utf8_lossy(&out.stdout);
                assert!(
                    !attrs.contains("user.overlay.redirect=")
                        && !attrs.contains("user.overlay.opaque="),
                    "{b} {uid:?}: {} holds {attrs}",
                    p.display()
                );
            }
        }
    }
}

/// Runs of one worktree at a time never share an overlay's upper or work directory
/// (overlayfs clears its work directory at each mount): a run holds its overlay while others
/// start and end, then still copies up a directory of the host's cache; each sees its own
/// writes; the next run gets the first run's view back; the host's cache stays as it was.
#[test]
fn concurrent_runs_of_one_worktree_each_keep_a_working_overlay() {
    use std::io::{BufRead, Write};
    let backends = namespace_backends();
    if backends.is_empty() {
        return skip("concurrent_overlays", "no namespace backend is usable here");
    }
    for b in backends {
        for uid in uids() {
            let w = World::new();
            std::fs::create_dir(w.home.join(".npm/hostdir")).unwrap();
            std::fs::write(w.home.join(".npm/hostdir/f"), "host").unwrap();
            let go = w.wt[0].join("go.fifo");
            let made = Command::new("mkfifo").arg(&go).status().unwrap();
            assert!(made.success());
            w.chown(uid);
            let before = w.host_hash();
            let copy_up = |who: &str| {
                format!(
                    "echo {who} > ~/.npm/{who} && echo {who} > ~/.npm/hostdir/{who} && \
                     rm ~/.npm/host-marker && cat ~/.npm/{who} ~/.npm/hostdir/{who}"
                )
            };
            let first = format!("echo up && read x < go.fifo && {}", copy_up("a"));
            let mut r = w.runner(Some(b), 0, None, &[], &first, None);
            if let Some(u) = uid {
                r = r.with_uid(u);
            }
            let (mut a, _copy) = r.spawn();
            let mut line = String::new();
            std::io::BufReader::new(a.stdout.as_mut().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert_eq!(line, "up\n", "{b} {uid:?}: the first run did not start");
            let (w, copy_up) = (&w, &copy_up);
            std::thread::scope(|s| {
                let others: Vec<_> = (0..4)
                    .map(|i| s.spawn(move || w.run(b, 0, uid, &copy_up(&format!("b{i}")))))
                    .collect();
                for (i, o) in others.into_iter().enumerate() {
                    let (ok, out) = o.join().unwrap();
                    assert!(ok, "{b} {uid:?}: concurrent run {i}: {out}");
                    assert!(out.contains(&format!("b{i}\nb{i}")), "{b} {uid:?}: {out}");
                }
            });
            // Held open until the first run ends: its `read` finds the line whenever it opens.
            let mut release = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&go)
                .unwrap();
            release.write_all(b"go\n").unwrap();
            let out = a.wait_with_output().unwrap();
            drop(release);
            let text = show(&out);
            assert!(out.status.success(), "{b} {uid:?}: the first run: {text}");
            assert!(text.contains("a\na"), "{b} {uid:?}: {text}");
            let (ok, out) = w.run(b, 0, uid, "cat ~/.npm/a ~/.npm/hostdir/a");
            assert!(ok, "{b} {uid:?}: the first run's view is not back: {out}");
            assert_eq!(
                w.host_hash(),
                before,
                "{b} {uid:?}: the host's cache changed"
            );
        }
    }
}

/// Attack F5: the caches' variables are the command's only. The supervisor's host-side git
/// (`git update-ref` carrying a commit back from a linked worktree's private view) runs with
/// the caller's environment, without `PYTHONUSERBASE` and the others: seen through a `git`
/// first on `$PATH` that logs its environment (only host-side calls can write the log, which
/// lies outside the writable set) and runs the real one.
#[test]
fn host_side_helpers_never_get_the_caches_variables() {
    if namespace_backends().is_empty() {
        return skip("helpers_env", "no namespace backend is usable here");
    }
    let real = Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    for b in namespace_backends() {
        let w = World::new();
        let scratch = Scratch::new();
        let (_repo, wt) = linked_worktree(&scratch);
        let bin = scratch.path().join("bin");
        let log = scratch.path().join("env.log");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(
            bin.join("git"),
            format!(
                "#!/bin/sh\nenv >> {} 2>/dev/null\nexec {real} \"$@\"\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            bin.join("git"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        let out = Run::new(&wt)
            .backend(b)
            .env("HOME", &w.home)
            .env("PATH", &path)
            .env_remove("XDG_STATE_HOME")
            .env_remove("PYTHONUSERBASE")
            .args(["--", "sh", "-c"])
            .arg("test -n \"$PYTHONUSERBASE\" && git commit -q --allow-empty -m inside")
            .output();
        assert!(out.status.success(), "{b}: {}", show(&out));
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            logged.contains("PATH="),
            "{b}: no host-side git ran: {}",
            show(&out)
        );
        assert!(
            !logged.contains("PYTHONUSERBASE="),
            "{b}: a host-side git got the caches' variables: {logged}"
        );
    }
}
