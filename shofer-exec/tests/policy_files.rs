//! The policy files through the real `shofer` binary and real sandboxed runs: the user's file
//! and a project's file apply, a project's file only narrows, flags win, and a file that
//! cannot be used stops the run before anything starts — also one the command planted.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::sandbox_binary;

const SHOFER: &str = env!("CARGO_BIN_EXE_shofer");

/// A scratch HOME with the user's policy file, and a worktree beside it (outside /tmp, which
/// sandboxed commands may write).
struct Scratch {
    _root: tempfile::TempDir,
    home: PathBuf,
    wt: PathBuf,
    artifacts: PathBuf,
}

impl Scratch {
    fn new(user_file: &str) -> Scratch {
        sandbox_binary();
        let root = tempfile::Builder::new()
            .prefix("shofer-policy-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let home = root.path().join("home");
        let wt = root.path().join("wt");
        let artifacts = root.path().join("artifacts");
        std::fs::create_dir_all(home.join(".config/shofer")).unwrap();
        std::fs::create_dir_all(wt.join(".shofer")).unwrap();
        std::fs::create_dir(&artifacts).unwrap();
        std::fs::write(home.join(".config/shofer/config.toml"), user_file).unwrap();
        Scratch {
            _root: root,
            home,
            wt,
            artifacts,
        }
    }

    fn project(&self, text: &str) -> PathBuf {
        let p = self.wt.join(".shofer/config.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    fn shofer(&self, args: &[&str]) -> Output {
        Command::new(SHOFER)
            .args(args)
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .unwrap()
    }

    /// `shofer run --worktree WT [flags] -- command`.
    fn run(&self, flags: &[&str], command: &str) -> Output {
        let mut args = vec!["run", "--worktree", self.wt.to_str().unwrap()];
        args.extend(["--artifacts", self.artifacts.to_str().unwrap()]);
        args.extend(flags);
        args.extend(["--", command]);
        self.shofer(&args)
    }
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_files_apply_a_project_narrows_and_flags_win() {
    let s = Scratch::new("[network]\nmode = \"proxy\"\n");
    std::fs::write(s.home.join("secret.txt"), "s3cret\n").unwrap();
    // The user's proxy: the proxy's variables are set.
    let o = s.run(&[], "echo \"proxy=$http_proxy\"; cat ~/secret.txt");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        out.contains("proxy=http://127.0.0.1:3128") && out.contains("s3cret"),
        "{out}"
    );
    // The project closes the network and hides a file of its own.
    s.project("[network]\nmode = \"deny\"\n[sandbox]\nhide = [\"~/secret.txt\"]\n");
    let o = s.run(&[], "echo \"proxy=$http_proxy\"; cat ~/secret.txt");
    let (out, err) = text(&o);
    assert!(
        out.contains("proxy=\n") || out.contains("proxy=\r\n"),
        "{out}{err}"
    );
    assert!(!out.contains("s3cret"), "the hidden file was read: {out}");
    assert!(out.contains("Permission denied"), "{out}");
    // A flag wins over both files.
    let o = s.run(&["--net", "proxy"], "echo \"proxy=$http_proxy\"");
    assert!(
        text(&o).0.contains("proxy=http://127.0.0.1:3128"),
        "{:?}",
        text(&o)
    );
}

#[test]
fn a_project_file_that_widens_stops_the_run_before_it_starts() {
    let s = Scratch::new("[network]\nmode = \"deny\"\n[limits]\nprocs = 100\n");
    let p = s.project("[limits]\nprocs = 200\n\n[network]\nmode = \"allow\"\n");
    let o = s.run(&[], "touch ran");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains(&format!("{}:2: limits.procs 200", p.display())),
        "{err}"
    );
    assert!(
        err.contains(&format!("{}:5: network.mode allow", p.display())),
        "{err}"
    );
    assert!(!s.wt.join("ran").exists(), "the command ran");
}

#[test]
fn a_bad_user_file_names_the_file_the_line_and_what_is_valid() {
    let s = Scratch::new("[network]\nmode = \"proxy\"\n[limits]\nmemroy = \"8G\"\n");
    let o = s.run(&[], "touch ran");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    let file = s.home.join(".config/shofer/config.toml");
    assert!(err.contains(&format!("{}:4:", file.display())), "{err}");
    assert!(err.contains("memroy") && err.contains("`memory`"), "{err}");
    assert!(!s.wt.join("ran").exists());
    // An unsandboxed run reads the user's file too.
    let o = s.shofer(&[
        "run",
        "--artifacts",
        s.artifacts.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(125), "{:?}", text(&o));
}

#[test]
fn a_planted_project_file_is_not_read() {
    let s = Scratch::new("");
    let secret = s.home.join("token");
    std::fs::write(&secret, "TOPSECRET = 1\n").unwrap();
    let p = s.wt.join(".shofer/config.toml");
    std::os::unix::fs::symlink(&secret, &p).unwrap();
    let o = s.run(&[], "touch ran");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(
        !err.contains("TOPSECRET") && !out.contains("TOPSECRET"),
        "{err}"
    );
    // A FIFO would stop a reader that opened it: it is refused at once.
    std::fs::remove_file(&p).unwrap();
    let st = Command::new("mkfifo").arg(&p).status().unwrap();
    assert!(st.success());
    let t = Instant::now();
    let o = s.run(&[], "touch ran");
    assert!(t.elapsed() < Duration::from_secs(20));
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(err.contains("FIFO"), "{err}");
    assert!(!s.wt.join("ran").exists());
}

#[test]
fn config_show_names_where_each_value_came_from() {
    let s = Scratch::new(
        "profile = \"ci\"\n[network]\nmode = \"proxy\"\n[profiles.ci.limits]\ncpu = 150\n",
    );
    s.project("[sandbox]\nhide = [\"~/notes\"]\n");
    let wt = s.wt.to_str().unwrap();
    let o = s.shofer(&[
        "config",
        "show",
        "--worktree",
        wt,
        "--allow-write",
        "/srv/out",
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let user = s.home.join(".config/shofer/config.toml");
    let row = |key: &str| {
        out.lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in {out}"))
            .to_string()
    };
    assert!(
        row("network.mode").ends_with(&format!("{}:3", user.display())),
        "{out}"
    );
    assert!(
        row("limits.cpu").ends_with(&format!("{}:5 (profile ci)", user.display())),
        "{out}"
    );
    assert!(
        row("sandbox.hide").contains(&format!("{}/notes", s.home.display())),
        "{out}"
    );
    assert!(
        row("sandbox.allow_write").ends_with("flag --allow-write"),
        "{out}"
    );
    assert!(row("limits.procs").ends_with("default"), "{out}");
    let o = s.shofer(&["config", "show", "--worktree", wt, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["settings"]["network.mode"]["value"], "proxy");
    // The same policy as shofer-sandbox options, for scripts that run it directly.
    let o = s.shofer(&[
        "config",
        "show",
        "--worktree",
        wt,
        "--args",
        "--allow-write",
        "/srv/a b",
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let hide = s.home.join("notes");
    assert_eq!(
        out.trim_end(),
        format!(
            "--allow-write '/srv/a b' --hide {} --net proxy --limit-cpu 150",
            hide.display()
        )
    );
    // An unknown profile is an error naming the defined ones.
    let o = s.shofer(&["config", "show", "--profile", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("defined: ci"), "{:?}", text(&o));
}
