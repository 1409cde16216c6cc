//! Secret locations cannot be read (issue 32, deliverables 1, 2 and 4): on every backend (at
//! any Landlock ABI but Landlock alone's 0), as root and as uid 65534, with a
//! scratch `$HOME` full of fake credentials (the real home is never touched), opening a hidden
//! file fails with `EACCES` by every path (its own, a symlink in the worktree,
//! `/proc/self/root`, `..`, a hidden location that is itself a symlink), names stay listable,
//! `--allow-read` opens exactly what it names, `--hide` adds a location, a secret the host
//! writes beside one (or renames) during the run stays unreadable, mounting from inside (a
//! nested user namespace) reveals nothing, root keeping `CAP_DAC_OVERRIDE` still cannot read
//! them, and `--report` lists what is hidden. Backends but Landlock alone hide them by mounts:
//! a hidden directory cannot be listed there, and a location the host makes or replaces during
//! the run is not covered; bubblewrap with `--keep-caps` as root says they stay readable.

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

/// Secret files of the scratch home: (path under the home, content that must never leak).
const SECRETS: &[(&str, &str)] = &[
    (".ssh/id_ed25519", "ssh-key-secret-0a1b"),
    (".aws/credentials", "aws-secret-2c3d"),
    (".netrc", "netrc-secret-4e5f"),
    (".config/gh/hosts.yml", "gh-token-secret-6a7b"),
    (".claude/.credentials.json", "claude-secret-8c9d"),
    (".git-credentials", "git-cred-secret-1a2b"),
    (".bash_history", "history-secret-3c4d"),
    // The target of ~/.gnupg, a symlink (a dotfiles repository).
    ("dotfiles/gnupg/private.key", "gpg-secret-5e6f"),
    // Not a default location: only --hide hides it.
    ("extra/mine.txt", "extra-secret-7a8b"),
];

/// Readable files: ordinary settings beside the secrets.
const ORDINARY: &[(&str, &str)] = &[
    (".npmrc", "registry=ordinary-npmrc-9c0d"),
    (".config/gh/config.yml", "ordinary-gh-config-1e2f"),
    (".claude/settings.json", "ordinary-claude-settings-3a4b"),
];

/// The backends that hide the secret locations, usable here: Landlock's read rights on
/// Landlock alone, mounts on the others.
fn hiding_backends() -> Vec<&'static str> {
    backends()
        .into_iter()
        .filter(|b| *b != "landlock" || landlock_abi() > 0)
        .collect()
}

/// The uids each test runs as: root (CI) and 65534.
fn uids() -> Vec<Option<u32>> {
    if is_root() {
        vec![None, Some(UNPRIV)]
    } else {
        vec![None]
    }
}

/// A scratch tree: `home/` with the fake credentials, `wt/` the worktree with a symlink to a
/// hidden file.
struct Home {
    scratch: Scratch,
    home: PathBuf,
    wt: PathBuf,
}

impl Home {
    fn new(owner: Option<u32>) -> Home {
        let scratch = Scratch::new();
        let home = scratch.path().join("home");
        let wt = scratch.path().join("wt");
        std::fs::create_dir_all(&wt).unwrap();
        for (path, content) in SECRETS.iter().chain(ORDINARY) {
            let p = home.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content).unwrap();
        }
        std::fs::create_dir_all(home.join("extra/dir")).unwrap();
        std::fs::write(home.join("extra/dir/inside"), "extra-dir-secret-5c6d").unwrap();
        symlink(home.join("dotfiles/gnupg"), home.join(".gnupg")).unwrap();
        symlink(home.join(".netrc"), wt.join("netrc-link")).unwrap();
        if let Some(uid) = owner {
            scratch.chown_all(uid);
        }
        Home { scratch, home, wt }
    }

    /// A run on `backend` as `uid`, with `$HOME` and the XDG directories in the scratch home.
    fn run(&self, backend: &str, uid: Option<u32>) -> Run {
        let mut r = Run::new(&self.wt)
            .backend(backend)
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("XDG_DATA_HOME", self.home.join(".local/share"))
            .env_remove("XDG_RUNTIME_DIR");
        if let Some(uid) = uid {
            r = r.with_uid(uid);
        }
        r
    }
}

/// The first `--report` record written to `path`.
fn first_record(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// No secret content anywhere in `out`, except the markers in `allowed`.
fn assert_no_leak(out: &Output, allowed: &[&str], cell: &str) {
    let all = text(out);
    for (_, secret) in SECRETS {
        if !allowed.contains(secret) {
            assert!(!all.contains(secret), "{cell}: {secret} leaked:\n{all}");
        }
    }
    assert!(!all.contains("extra-dir-secret-5c6d") || allowed.contains(&"extra-dir-secret-5c6d"));
}

/// `cat PATH` failed with EACCES, as `cat` says it.
fn assert_denied(out: &Output, path: &Path, cell: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = format!("{}: Permission denied", path.display());
    assert!(
        err.contains(&line),
        "{cell}: no '{line}' in:\n{}",
        show(out)
    );
}

#[test]
fn hidden_files_and_directories_refuse_every_open() {
    for b in hiding_backends() {
        for uid in uids() {
            let cell = format!("{b} as {uid:?}");
            let h = Home::new(uid);
            let home = &h.home;
            let mut script = String::new();
            for (path, _) in &SECRETS[..SECRETS.len() - 1] {
                script += &format!("cat '{}'; ", home.join(path).display());
            }
            // A symlink in the worktree, /proc/self/root, `..`, the symlinked location's name;
            // the hidden directories' names are listable, a hard link is refused.
            script += &format!(
                "cat netrc-link; cat '/proc/self/root{h}/.netrc'; cat '{h}/.config/../.netrc'; \
                 cat '{h}/.gnupg/private.key'; ls '{h}/.ssh'; ln '{h}/.netrc' hard-link; \
                 cat hard-link; ",
                h = home.display()
            );
            for (path, _) in ORDINARY {
                script += &format!("cat '{}'; echo; ", home.join(path).display());
            }
            script += "echo done";
            let out = h.run(b, uid).sh(&script).output();
            assert_eq!(out.status.code(), Some(0), "{cell}: {}", show(&out));
            assert_no_leak(&out, &[], &cell);
            for (path, _) in &SECRETS[..SECRETS.len() - 1] {
                assert_denied(&out, &home.join(path), &cell);
            }
            assert_denied(&out, Path::new("netrc-link"), &cell);
            assert_denied(
                &out,
                &Path::new("/proc/self/root").join(home.strip_prefix("/").unwrap().join(".netrc")),
                &cell,
            );
            assert_denied(&out, &home.join(".config/../.netrc"), &cell);
            assert_denied(&out, &home.join(".gnupg/private.key"), &cell);
            let stdout = String::from_utf8_lossy(&out.stdout);
            if b != "landlock" {
                // An empty tmpfs of mode 0 covers the directory.
                let line = format!(
                    "cannot open directory '{}': Permission denied",
                    home.join(".ssh").display()
                );
                assert!(text(&out).contains(&line), "{cell}: {}", show(&out));
            } else {
                assert!(
                    stdout.contains("id_ed25519"),
                    "{cell}: names listable: {}",
                    show(&out)
                );
            }
            assert!(!h.wt.join("hard-link").exists(), "{cell}: {}", show(&out));
            for (_, content) in ORDINARY {
                assert!(
                    stdout.contains(content),
                    "{cell}: {content} unreadable:\n{}",
                    show(&out)
                );
            }
            assert!(stdout.contains("done"));
        }
    }
}

#[test]
fn allow_read_opens_exactly_that_one_and_hide_adds_one() {
    for b in hiding_backends() {
        for uid in uids() {
            let cell = format!("{b} as {uid:?}");
            let h = Home::new(uid);
            let home = &h.home;
            let out = h
                .run(b, uid)
                .arg("--allow-read")
                .arg(home.join(".netrc"))
                .arg("--allow-read")
                .arg(home.join(".gnupg"))
                .arg("--hide")
                .arg(home.join("extra/mine.txt"))
                .arg("--hide")
                .arg(home.join("extra/dir"))
                .sh(&format!(
                    "cat '{h}/.netrc'; echo; cat netrc-link; echo; cat '{h}/.gnupg/private.key'; echo; \
                     cat '{h}/.git-credentials'; cat '{h}/extra/mine.txt'; ls '{h}/extra/dir'; \
                     cat '{h}/extra/dir/inside'; true",
                    h = home.display()
                ))
                .output();
            assert_eq!(out.status.code(), Some(0), "{cell}: {}", show(&out));
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                stdout.matches("netrc-secret-4e5f").count(),
                2,
                "{cell}: {}",
                show(&out)
            );
            // The symlinked location, allowed by its name, is readable at both names.
            assert!(stdout.contains("gpg-secret-5e6f"), "{cell}: {}", show(&out));
            assert_no_leak(&out, &["netrc-secret-4e5f", "gpg-secret-5e6f"], &cell);
            assert_denied(&out, &home.join(".git-credentials"), &cell);
            assert_denied(&out, &home.join("extra/mine.txt"), &cell);
            assert_denied(&out, &home.join("extra/dir/inside"), &cell);
        }
    }
}

#[test]
fn allow_read_inside_a_hidden_directory_opens_only_that_file() {
    for b in hiding_backends() {
        let h = Home::new(None);
        std::fs::write(h.home.join(".ssh/known_hosts"), "known-hosts-ordinary-2b3c").unwrap();
        let out = h
            .run(b, None)
            .arg("--allow-read")
            .arg(h.home.join(".ssh/known_hosts"))
            .sh(&format!(
                "cat '{h}/.ssh/known_hosts'; echo; cat '{h}/.ssh/id_ed25519'; true",
                h = h.home.display()
            ))
            .output();
        assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("known-hosts-ordinary-2b3c"),
            "{b}: {}",
            show(&out)
        );
        assert_no_leak(&out, &[], b);
        assert_denied(&out, &h.home.join(".ssh/id_ed25519"), b);
    }
}

#[test]
fn a_secret_the_host_writes_or_renames_during_the_run_stays_hidden() {
    for b in hiding_backends() {
        for uid in uids() {
            let cell = format!("{b} as {uid:?}");
            let h = Home::new(uid);
            let go = h.wt.join("go");
            let script = format!(
                "while [ ! -e '{go}' ]; do sleep 0.02; done; \
                 cat '{h}/.new-token'; cat '{h}/.ssh-old/id_ed25519'; cat '{h}/.ssh/id_ed25519'; \
                 cat '{h}/.npmrc'; echo; echo done",
                go = go.display(),
                h = h.home.display()
            );
            let (child, _copy) = h.run(b, uid).sh(&script).spawn();
            std::thread::sleep(std::time::Duration::from_millis(300));
            std::fs::write(h.home.join(".new-token"), "new-token-secret-9d0e").unwrap();
            std::fs::rename(h.home.join(".ssh"), h.home.join(".ssh-old")).unwrap();
            std::fs::create_dir(h.home.join(".ssh")).unwrap();
            std::fs::write(h.home.join(".ssh/id_ed25519"), "new-key-secret-1f2a").unwrap();
            std::fs::write(&go, "").unwrap();
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{cell}: {}", show(&out));
            if b != "landlock" {
                // Mounts cover the objects of the start: the renamed directory stays covered;
                // what the host makes or puts in place afterwards is not (ARCHITECTURE §2.1).
                assert_denied(&out, &h.home.join(".ssh-old/id_ed25519"), &cell);
                assert!(
                    !text(&out).contains("ssh-key-secret-0a1b"),
                    "{cell}: {}",
                    show(&out)
                );
                continue;
            }
            let all = text(&out);
            for leak in ["new-token-secret-9d0e", "new-key-secret-1f2a"] {
                assert!(!all.contains(leak), "{cell}: {leak} leaked:\n{all}");
            }
            assert_no_leak(&out, &[], &cell);
            assert_denied(&out, &h.home.join(".new-token"), &cell);
            assert_denied(&out, &h.home.join(".ssh-old/id_ed25519"), &cell);
            assert_denied(&out, &h.home.join(".ssh/id_ed25519"), &cell);
            assert!(
                text(&out).contains("ordinary-npmrc-9c0d"),
                "{cell}: {}",
                show(&out)
            );
        }
    }
}

#[test]
fn unmounting_or_binding_from_inside_reveals_nothing() {
    let mut nested_ran = Vec::new();
    for b in hiding_backends() {
        for uid in uids() {
            let cell = format!("{b} as {uid:?}");
            let h = Home::new(uid);
            let script = format!(
                "umount '{h}/.netrc'; umount -l '{h}/.ssh'; cat '{h}/.netrc'; ls '{h}/.ssh'; \
                 unshare -rm sh -c ' \
                   echo NESTED-USERNS; \
                   umount {h}/.netrc; umount -l {h}/.ssh; umount -l {h}/.ssh/id_ed25519; \
                   cat {h}/.netrc; cat {h}/.ssh/id_ed25519; ls {h}/.ssh; \
                   d=$(mktemp -d); \
                   mount --bind {h} $d && cat $d/.netrc; ls $d/.ssh; \
                   mount --rbind {h} $d && cat $d/.netrc; cat $d/.ssh/id_ed25519; \
                   mount -t tmpfs none {h}/.ssh && ls {h}/.ssh; \
                   true'; \
                 cat '{h}/.netrc'; cat '{h}/.ssh/id_ed25519'; true",
                h = h.home.display()
            );
            let out = h.run(b, uid).sh(&script).output();
            assert_eq!(out.status.code(), Some(0), "{cell}: {}", show(&out));
            assert_no_leak(&out, &[], &cell);
            // After everything, still refused.
            assert_denied(&out, &h.home.join(".ssh/id_ed25519"), &cell);
            if String::from_utf8_lossy(&out.stdout).contains("NESTED-USERNS") {
                nested_ran.push(cell);
            }
        }
    }
    // Where a nested user namespace was made, its mounts revealed nothing (above); where none
    // could be (Landlock refuses the uid_map write and any mount), the route is closed earlier.
    eprintln!("a nested user namespace was made in: {nested_ran:?}");
}

#[test]
fn root_with_capabilities_cannot_read_hidden_files() {
    if skip_unless_root("root_with_capabilities_cannot_read_hidden_files") {
        return;
    }
    // A worktree owned by another uid: the namespace backends keep CAP_DAC_OVERRIDE.
    for b in hiding_backends() {
        let cell = format!("{b} over a uid-1000 worktree");
        let h = Home::new(None);
        let status = std::process::Command::new("chown")
            .args(["-R", "1000:1000"])
            .arg(&h.wt)
            .status()
            .unwrap();
        assert!(status.success());
        let out = h
            .run(b, None)
            .sh(&format!(
                "grep CapEff /proc/self/status; cat '{h}/.netrc'; cat '{h}/.ssh/id_ed25519'; ls -a '{h}/.ssh'; \
                 cat netrc-link; true",
                h = h.home.display()
            ))
            .output();
        assert_eq!(out.status.code(), Some(0), "{cell}: {}", show(&out));
        assert_no_leak(&out, &[], &cell);
        assert_denied(&out, &h.home.join(".netrc"), &cell);
        assert_denied(&out, Path::new("netrc-link"), &cell);
        assert_denied(&out, &h.home.join(".ssh/id_ed25519"), &cell);
        if b == "userns" || b == "layered" {
            // The run does hold CAP_DAC_OVERRIDE (bit 1): the refusal is not a mode bit's.
            let caps = String::from_utf8_lossy(&out.stdout);
            let eff = caps
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:\t"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap();
            assert_ne!(eff & 0b10, 0, "{cell}: {caps}");
        }
    }
    // --keep-caps: every capability (of the user namespace on the namespace backends): Landlock
    // refuses the reads whatever the capabilities. bubblewrap would leave root CAP_SYS_ADMIN,
    // which unmounts anything: it says the locations stay readable instead.
    for b in hiding_backends() {
        let cell = format!("{b} --keep-caps");
        let h = Home::new(None);
        let report = h.scratch.path().join("report.json");
        let out = h
            .run(b, None)
            .arg("--keep-caps")
            .arg("--report")
            .arg("9")
            .fd9(std::fs::File::create(&report).unwrap())
            .sh(&format!(
                "cat '{h}/.netrc'; cat '{h}/.ssh/id_ed25519'; ls -a '{h}/.ssh'; true",
                h = h.home.display()
            ))
            .output();
        assert_eq!(out.status.code(), Some(0), "{cell}: {}", show(&out));
        let v = first_record(&report);
        let enforced = v["protections"]["secrets_hidden"]["enforced"]
            .as_bool()
            .unwrap();
        if b == "bwrap" {
            assert!(!enforced, "{cell}: {v}");
            assert!(
                text(&out).contains("hardening not enforced (secrets_hidden): with --keep-caps"),
                "{cell}: {}",
                show(&out)
            );
            assert_eq!(v["secrets"]["hidden"], serde_json::json!([]), "{cell}: {v}");
            continue;
        }
        assert_no_leak(&out, &[], &cell);
        assert_denied(&out, &h.home.join(".netrc"), &cell);
        assert_denied(&out, &h.home.join(".ssh/id_ed25519"), &cell);
        assert!(enforced, "{cell}: {v}");
    }
}

#[test]
fn report_lists_the_hidden_locations_that_exist() {
    for b in backends() {
        let h = Home::new(None);
        let report = h.scratch.path().join("report.json");
        let out = h
            .run(b, None)
            .arg("--report")
            .arg("9")
            .arg("--hide")
            .arg(h.wt.join("in-worktree"))
            .fd9(std::fs::File::create(&report).unwrap())
            .sh("true")
            .output();
        assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
        let v = first_record(&report);
        let hidden: Vec<PathBuf> = v["secrets"]["hidden"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| PathBuf::from(p.as_str().unwrap()))
            .collect();
        let row = &v["protections"]["secrets_hidden"];
        assert_eq!(row["tier"], "hardening", "{b}: {v}");
        let err = String::from_utf8_lossy(&out.stderr);
        if b == "landlock" && landlock_abi() == 0 {
            assert_eq!(row["enforced"], false, "{b}: {v}");
            assert!(
                err.contains("hardening not enforced (secrets_hidden)"),
                "{b}: {err}"
            );
            continue;
        }
        assert_eq!(row["enforced"], true, "{b}: {v}");
        assert!(!err.contains("(secrets_hidden)"), "{b}: {err}");
        for want in [
            ".ssh",
            ".aws",
            ".netrc",
            ".git-credentials",
            ".config/gh/hosts.yml",
            "dotfiles/gnupg",
        ] {
            assert!(
                hidden.contains(&h.home.join(want)),
                "{b}: {want} not in {hidden:?}"
            );
        }
        // Missing locations and ordinary files are not listed; a symlinked one by its target.
        for not in [".kube", ".npmrc", ".gnupg", ".config/gh/config.yml"] {
            assert!(
                !hidden.contains(&h.home.join(not)),
                "{b}: {not} in {hidden:?}"
            );
        }
    }
}

#[test]
fn the_worktree_wins_over_a_secret_location_inside_it() {
    for b in hiding_backends() {
        let h = Home::new(None);
        std::fs::write(h.wt.join("in-worktree"), "worktree-file-7e8f").unwrap();
        let report = h.scratch.path().join("report.json");
        let out = h
            .run(b, None)
            .arg("--hide")
            .arg(h.wt.join("in-worktree"))
            .arg("--report")
            .arg("9")
            .fd9(std::fs::File::create(&report).unwrap())
            .sh("cat in-worktree")
            .output();
        assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("worktree-file-7e8f"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("it lies inside the worktree"), "{b}: {err}");
        let v = std::fs::read_to_string(&report).unwrap();
        assert!(v.contains("\"left_readable\":[{\"path\""), "{b}: {v}");
    }
}

/// Root's command runs as uid 0 on Landlock alone: the disks under /dev would hand it every
/// file, hidden ones included. A bind mount of the home elsewhere shows the secrets by another
/// path: that alias is hidden too, also at a path that is not UTF-8 (and a writable alias
/// leaves them readable, said so).
#[test]
fn block_devices_and_bind_mount_aliases_do_not_reveal_secrets() {
    use std::os::unix::ffi::OsStrExt;
    if skip_unless_root("block_devices_and_bind_mount_aliases_do_not_reveal_secrets") {
        return;
    }
    let h = Home::new(None);
    let alias = h.scratch.path().join("alias");
    let odd = h
        .scratch
        .path()
        .join(std::ffi::OsStr::from_bytes(b"alias\xff"));
    std::fs::create_dir(&alias).unwrap();
    std::fs::create_dir(&odd).unwrap();
    let disk = h.scratch.path().join("disk.img");
    std::fs::write(&disk, "disk-bytes-secret-3f4a".repeat(64)).unwrap();
    let ok = |c: &mut std::process::Command| c.status().is_ok_and(|s| s.success());
    for a in [&alias, &odd] {
        assert!(ok(std::process::Command::new("mount")
            .arg("--bind")
            .arg(&h.home)
            .arg(a)));
    }
    let out = std::process::Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&disk)
        .output()
        .unwrap();
    let loopdev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let result = std::panic::catch_unwind(|| {
        assert!(loopdev.starts_with("/dev/loop"), "losetup: {}", show(&out));
        for b in hiding_backends() {
            let out = h
                .run(b, None)
                .env("ODD", &odd)
                .sh(&format!(
                    "cat '{a}/.netrc' '{a}/.ssh/id_ed25519' \"$ODD/.netrc\"; head -c 100 {loopdev}; true",
                    a = alias.display()
                ))
                .output();
            assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
            assert_no_leak(&out, &[], b);
            assert!(
                !text(&out).contains("disk-bytes-secret-3f4a"),
                "{b}: {}",
                show(&out)
            );
            assert_denied(&out, &alias.join(".netrc"), b);
            // `cat` quotes a name that is not UTF-8 (`'...alias'$'\377''/.netrc'`).
            assert!(
                String::from_utf8_lossy(&out.stderr)
                    .contains("$'\\377''/.netrc': Permission denied"),
                "{b}: {}",
                show(&out)
            );
        }
        // Writable through the alias: readable, and the report says why.
        let report = h.scratch.path().join("report.json");
        let out = h
            .run("landlock", None)
            .arg("--allow-write")
            .arg(&alias)
            .arg("--report")
            .arg("9")
            .fd9(std::fs::File::create(&report).unwrap())
            .sh("true")
            .output();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        let v = std::fs::read_to_string(&report).unwrap();
        assert!(v.contains("it lies inside an --allow-write path"), "{v}");
    });
    for a in [&alias, &odd] {
        let _ = std::process::Command::new("umount").arg(a).status();
    }
    let _ = std::process::Command::new("losetup")
        .args(["-d", &loopdev])
        .status();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// Real tools over real credentials in the scratch home: `ssh-keygen -y` (derives the public
/// key, so it must read the private one), `ssh -i`, `gpg --list-secret-keys` and `git
/// credential fill` with the store helper find nothing inside, on every backend that hides,
/// as root and as uid 65534.
#[test]
fn ssh_gpg_and_git_credential_find_nothing() {
    let test = "ssh_gpg_and_git_credential_find_nothing";
    for tool in ["ssh-keygen", "ssh", "gpg", "git"] {
        if which(tool).is_none() {
            skip(test, &format!("{tool} not installed"));
            return;
        }
    }
    for b in hiding_backends() {
        for uid in uids() {
            let cell = format!("{b} as {uid:?}");
            let scratch = Scratch::new();
            let home = scratch.path().join("home");
            let wt = scratch.path().join("wt");
            std::fs::create_dir_all(home.join(".ssh")).unwrap();
            std::fs::create_dir_all(&wt).unwrap();
            let host = |prog: &str, args: &[&str]| {
                let out = std::process::Command::new(prog)
                    .args(args)
                    .env("HOME", &home)
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{prog} {args:?}: {}", show(&out));
            };
            let key = home.join(".ssh/id_ed25519");
            host(
                "ssh-keygen",
                &["-q", "-t", "ed25519", "-N", "", "-f", key.to_str().unwrap()],
            );
            let gnupg = home.join(".gnupg");
            std::fs::create_dir_all(&gnupg).unwrap();
            host(
                "gpg",
                &[
                    "--batch",
                    "--homedir",
                    gnupg.to_str().unwrap(),
                    "--passphrase",
                    "",
                    "--quick-gen-key",
                    "secret-owner@shofer.invalid",
                    "ed25519",
                ],
            );
            let _ = std::process::Command::new("gpgconf")
                .args(["--homedir", gnupg.to_str().unwrap(), "--kill", "all"])
                .status();
            std::fs::write(
                home.join(".git-credentials"),
                "https://agent:git-store-secret-6b7c@forge.invalid\n",
            )
            .unwrap();
            // `aws configure list` shows the last four characters of a key it can read.
            std::fs::create_dir_all(home.join(".aws")).unwrap();
            std::fs::write(
                home.join(".aws/credentials"),
                "[default]\naws_access_key_id = AKIAEXAMPLEKEYQ7Z9\naws_secret_access_key = aws-secret-8d9e\n",
            )
            .unwrap();
            // Where installed (issue 32): a pyenv install under root's home is root's only.
            let aws = which("aws").filter(|_| uid.is_none());
            if let Some(u) = uid {
                scratch.chown_all(u);
            }
            let mut run = Run::new(&wt)
                .backend(b)
                .env("HOME", &home)
                .env("GIT_TERMINAL_PROMPT", "0")
                .env_remove("XDG_RUNTIME_DIR");
            if let Some(u) = uid {
                run = run.with_uid(u);
            }
            let out = run
                .sh(&format!(
                    "ssh-keygen -y -f '{k}'; echo ssh-keygen=$?; \
                     ssh -i '{k}' -o BatchMode=yes -o ConnectTimeout=1 -p 1 127.0.0.1 true; \
                     gpg --batch --list-secret-keys; echo gpg=$?; \
                     printf 'protocol=https\\nhost=forge.invalid\\n\\n' | \
                       git -c credential.helper=store credential fill; echo git=$?; {aws}",
                    k = key.display(),
                    aws = aws
                        .as_ref()
                        .map(|a| format!("'{}' configure list; echo aws=$?", a.display()))
                        .unwrap_or_default()
                ))
                .output();
            let all = text(&out);
            assert!(
                all.contains("ssh-keygen=255") || all.contains("ssh-keygen=1"),
                "{cell}: {all}"
            );
            assert!(
                !all.contains("ssh-ed25519 "),
                "{cell}: the public key was derived:\n{all}"
            );
            assert!(all.contains("Permission denied"), "{cell}: {all}");
            assert!(
                !all.contains("secret-owner@shofer.invalid"),
                "{cell}: gpg listed the key:\n{all}"
            );
            assert!(!all.contains("git-store-secret-6b7c"), "{cell}: {all}");
            assert!(
                !all.contains("git=0"),
                "{cell}: git found a credential:\n{all}"
            );
            if aws.is_some() {
                assert!(all.contains("aws="), "{cell}: aws did not run:\n{all}");
                assert!(!all.contains("Q7Z9"), "{cell}: aws read the key:\n{all}");
            }
        }
    }
}

/// `prog` on `PATH`.
fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(prog))
            .find(|c| c.is_file())
    })
}

/// The second attack's host mounts: a bind of one key file and of a directory inside a hidden
/// location, a bind of `/` placed below it, a bind of a parent inside itself, and a mount point
/// that is not UTF-8 (which once made the mount table unreadable, and every alias readable).
#[test]
fn host_binds_inside_above_and_beside_a_hidden_location_reveal_nothing() {
    use std::os::unix::ffi::OsStrExt;
    if skip_unless_root("host_binds_inside_above_and_beside_a_hidden_location_reveal_nothing") {
        return;
    }
    let h = Home::new(None);
    std::fs::create_dir_all(h.home.join(".ssh/sub")).unwrap();
    std::fs::write(h.home.join(".ssh/sub/k"), "ssh-key-secret-0a1b in sub").unwrap();
    let top = h.scratch.path().to_path_buf();
    let pubd = top.join("pub");
    let in_tmp = PathBuf::from(format!("/tmp/shofer-secret-inner-{}", std::process::id()));
    std::fs::create_dir_all(&in_tmp).unwrap();
    let odd = pubd.join(std::ffi::OsStr::from_bytes(b"x\xff"));
    for d in ["subd", "rootb", "plain", "par", "alias2"] {
        std::fs::create_dir_all(pubd.join(d)).unwrap();
    }
    std::fs::create_dir_all(&odd).unwrap();
    std::fs::write(pubd.join("keyfile"), "").unwrap();
    let mounts: Vec<(Vec<&str>, PathBuf, PathBuf)> = vec![
        (
            vec!["--bind"],
            h.home.join(".ssh/id_ed25519"),
            pubd.join("keyfile"),
        ),
        (vec!["--bind"], h.home.join(".ssh/sub"), pubd.join("subd")),
        (vec!["--bind"], PathBuf::from("/"), pubd.join("rootb")),
        (vec!["-t", "tmpfs"], PathBuf::from("none"), odd.clone()),
        (vec!["--bind"], h.home.clone(), pubd.join("plain")),
        (vec!["--bind"], top.clone(), pubd.join("par")),
        // A filesystem mounted inside a hidden location, and again elsewhere: also in /tmp,
        // writable, which leaves that filesystem readable there but not the location.
        (
            vec!["-t", "tmpfs"],
            PathBuf::from("none"),
            h.home.join(".ssh/inner"),
        ),
        (
            vec!["--bind"],
            h.home.join(".ssh/inner"),
            pubd.join("alias2"),
        ),
        (vec!["--bind"], h.home.join(".ssh/inner"), in_tmp.clone()),
    ];
    std::fs::create_dir_all(h.home.join(".ssh/inner")).unwrap();
    let mut done = Vec::new();
    for (opts, src, dst) in &mounts {
        let ok = std::process::Command::new("mount")
            .args(opts)
            .arg(src)
            .arg(dst)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            done.push(dst.clone());
        }
    }
    let result = std::panic::catch_unwind(|| {
        assert_eq!(done.len(), mounts.len(), "mounts made: {done:?}");
        std::fs::write(
            h.home.join(".ssh/inner/k2"),
            "ssh-key-secret-0a1b in a tmpfs",
        )
        .unwrap();
        let home_rel = h.home.strip_prefix("/").unwrap();
        let paths = [
            pubd.join("keyfile"),
            pubd.join("subd/k"),
            pubd.join("rootb").join(home_rel).join(".netrc"),
            pubd.join("plain/.netrc"),
            pubd.join("par/pub/plain/.netrc"),
            pubd.join("alias2/k2"),
            h.home.join(".ssh/inner/k2"),
            h.home.join(".ssh/id_ed25519"),
            h.home.join(".netrc"),
        ];
        for b in hiding_backends() {
            let script: String = paths
                .iter()
                .map(|p| format!("cat '{}'; ", p.display()))
                .collect();
            let out = h
                .run(b, None)
                .sh(&format!("{script}ls / >/dev/null && echo ls-ok"))
                .output();
            assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
            assert_no_leak(&out, &[], b);
            assert!(text(&out).contains("ls-ok"), "{b}: {}", show(&out));
        }
    });
    // The bind of `/` is a peer of the root mount, so the later mounts propagate into it and
    // a plain umount of one can find it busy: detach each whole, then check none is left.
    for dst in done.iter().rev() {
        let _ = std::process::Command::new("umount")
            .args(["--recursive", "--lazy"])
            .arg(dst)
            .status();
    }
    let table = std::fs::read("/proc/self/mountinfo").unwrap();
    let table = String::from_utf8_lossy(&table);
    let left =
        table.contains(&*top.to_string_lossy()) || table.contains(&*in_tmp.to_string_lossy());
    let _ = std::fs::remove_dir(&in_tmp);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(!left, "mounts left under {}", top.display());
}

/// Issue 32's "done when": git, npm, pip, python and cargo keep working inside with the
/// user's ordinary configuration beside hidden credentials (an `.npmrc` without tokens, pip's
/// and cargo's settings, `~/.gitconfig`), on every backend, as root and as uid 65534 (cargo,
/// whose toolchain lives in root's home, as root only).
#[test]
fn ordinary_tools_read_their_settings_beside_hidden_credentials() {
    let test = "ordinary_tools_read_their_settings_beside_hidden_credentials";
    for tool in ["git", "npm", "python3"] {
        if which(tool).is_none() {
            skip(test, &format!("{tool} not installed"));
            return;
        }
    }
    let cargo = which("cargo");
    for b in hiding_backends() {
        for uid in uids() {
            let cell = format!("{b} as {uid:?}");
            let h = Home::new(None);
            let files: &[(&str, &str)] = &[
                (".gitconfig", "[user]\n\tname = ordinary-git-user\n"),
                (".npmrc", "registry=http://registry.invalid/ordinary-npm/\n"),
                (
                    ".config/pip/pip.conf",
                    "[global]\nindex-url = http://pypi.invalid/ordinary-pip/simple\n",
                ),
                (
                    ".cargo/config.toml",
                    "[alias]\nordinary-cargo-alias = \"version\"\n",
                ),
                (
                    ".cargo/credentials.toml",
                    "[registry]\ntoken = \"cargo-secret-5b6c\"\n",
                ),
                (".pypirc", "[pypi]\npassword = pypi-secret-7d8e\n"),
            ];
            for (path, content) in files {
                let p = h.home.join(path);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, content).unwrap();
            }
            if let Some(u) = uid {
                h.scratch.chown_all(u);
            }
            let mut script = String::from(
                "git config --global user.name; \
                 npm config get registry; \
                 python3 -m pip config list; \
                 python3 -c 'print(\"python-ran\")'; \
                 cat ~/.cargo/credentials.toml ~/.pypirc; ",
            );
            let mut run = h.run(b, uid);
            if let (Some(cargo), None) = (&cargo, uid) {
                // rustup's proxy finds its toolchains by RUSTUP_HOME; cargo reads the scratch
                // home's settings through CARGO_HOME.
                let rustup = std::env::var("RUSTUP_HOME")
                    .unwrap_or_else(|_| format!("{}/.rustup", std::env::var("HOME").unwrap()));
                run = run
                    .env("RUSTUP_HOME", rustup)
                    .env("CARGO_HOME", h.home.join(".cargo"));
                script += &format!("'{}' ordinary-cargo-alias; ", cargo.display());
            }
            let out = run.sh(&(script + "true")).output();
            assert_eq!(out.status.code(), Some(0), "{cell}: {}", show(&out));
            let stdout = String::from_utf8_lossy(&out.stdout);
            for want in [
                "ordinary-git-user",
                "http://registry.invalid/ordinary-npm/",
                "http://pypi.invalid/ordinary-pip/simple",
                "python-ran",
            ] {
                assert!(stdout.contains(want), "{cell}: no {want}:\n{}", show(&out));
            }
            if cargo.is_some() && uid.is_none() {
                assert!(stdout.contains("cargo "), "{cell}: cargo:\n{}", show(&out));
            }
            assert_denied(&out, &h.home.join(".cargo/credentials.toml"), &cell);
            assert_denied(&out, &h.home.join(".pypirc"), &cell);
            assert!(
                !text(&out).contains("secret-"),
                "{cell}: a secret leaked:\n{}",
                show(&out)
            );
        }
    }
}

/// The attack pass's first leak: a working directory inside a hidden directory (the MCP
/// tool's `cwd`) left the namespace backends' command in the host's directory beneath the
/// cover. Every backend refuses such a run before it starts, naming the location; so it does
/// a nameless working directory, and a directory at or above a location given as stdin.
#[test]
fn a_working_directory_inside_a_hidden_location_is_refused() {
    for b in backends() {
        let h = Home::new(None);
        let sub = h.home.join(".ssh/sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("k"), "ssh-key-secret-0a1b in sub").unwrap();
        let mut cmd = h.run(b, None).sh("cat ./k; cat ../id_ed25519").command();
        cmd.current_dir(&sub);
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{b}: {}", show(&out));
        assert_no_leak(&out, &[], b);
        let err = String::from_utf8_lossy(&out.stderr);
        let want = format!(
            "lies in {}, a secret location the sandbox hides",
            h.home.join(".ssh").display()
        );
        assert!(err.contains(&want), "{b}: {err}");
        // The third attack pass: a working directory deleted beneath it has no name to judge,
        // and `..` from it reached the host's directory beneath the cover.
        let gone = sub.join("gone");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "mkdir '{g}' && cd '{g}' && rmdir '{g}' && exec '{SANDBOX}' --backend {b} '{wt}' -- \
                 sh -c 'cat ../k; cat ../../id_ed25519'",
                g = gone.display(),
                wt = h.wt.display()
            ))
            .env("HOME", &h.home)
            .env("XDG_CONFIG_HOME", h.home.join(".config"))
            .env("XDG_DATA_HOME", h.home.join(".local/share"))
            .env_remove("XDG_RUNTIME_DIR")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{b}: {}", show(&out));
        assert_no_leak(&out, &[], b);
        assert!(
            text(&out).contains("the working directory has no name"),
            "{b}: {}",
            show(&out)
        );
        // The fourth: a directory given as a descriptor (`< ~/.ssh`, `< ~`) walks the host's
        // tree through /proc/self/fd, beneath the covers.
        for dir in [h.home.join(".ssh"), h.home.clone()] {
            let mut cmd = h
                .run(b, None)
                .sh("cat /proc/self/fd/0/id_ed25519 /proc/self/fd/0/.ssh/id_ed25519")
                .command();
            cmd.stdin(std::fs::File::open(&dir).unwrap());
            let out = cmd.output().unwrap();
            assert_eq!(out.status.code(), Some(125), "{b}: {}", show(&out));
            assert_no_leak(&out, &[], b);
            assert!(
                text(&out).contains("descriptor 0 is the directory"),
                "{b}: {}",
                show(&out)
            );
        }
    }
}

/// A symlink inside a hidden directory that leads out of it (a dotfiles repository's key)
/// hides its target too, on every backend: by the target's own path and through the link.
#[test]
fn a_link_out_of_a_hidden_directory_hides_its_target() {
    for b in hiding_backends() {
        for uid in uids() {
            let cell = format!("{b} as {uid:?}");
            let h = Home::new(None);
            let dot = h.home.join("dotfiles-keys");
            std::fs::create_dir_all(&dot).unwrap();
            std::fs::write(dot.join("id_rsa"), "ssh-key-secret-0a1b behind a link").unwrap();
            std::fs::write(dot.join("README"), "ordinary-dotfiles-readme-5c6d").unwrap();
            symlink("../dotfiles-keys/id_rsa", h.home.join(".ssh/id_rsa")).unwrap();
            if let Some(u) = uid {
                h.scratch.chown_all(u);
            }
            let out = h
                .run(b, uid)
                .sh(&format!(
                    "cat '{d}/id_rsa'; cat '{h}/.ssh/id_rsa'; cat '{d}/README'; true",
                    d = dot.display(),
                    h = h.home.display()
                ))
                .output();
            assert_eq!(out.status.code(), Some(0), "{cell}: {}", show(&out));
            assert_no_leak(&out, &[], &cell);
            assert_denied(&out, &dot.join("id_rsa"), &cell);
            assert!(
                text(&out).contains("ordinary-dotfiles-readme-5c6d"),
                "{cell}: {}",
                show(&out)
            );
        }
    }
}

/// A home on a file system whose listing disagrees with its lookups (`listing_fuse.py`, a FUSE
/// server): a listing that ends early (`ENOENT`, taken for the end) or fails (`EIO`) after
/// `.ssh`, one that fails before it (every location of the home is then looked up), one that
/// leaves out a name a lookup still finds (`cfg`, the `XDG_CONFIG_HOME`: every base is listed
/// on its own), and a case-insensitive home whose `.ssh` is stored as `.SSH`. On every hiding
/// backend, as root and as uid 65534.
#[test]
fn a_home_whose_listing_fails_or_omits_a_name_still_hides_what_lookups_reach() {
    let test = "a_home_whose_listing_fails_or_omits_a_name_still_hides_what_lookups_reach";
    if skip_unless_root(test) {
        return;
    }
    if !Path::new("/dev/fuse").exists() {
        skip(test, "no /dev/fuse");
        return;
    }
    let scratch = Scratch::new();
    let dir = scratch.path();
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/listing_fuse.py");
    let (home, wt) = (dir.join("home"), dir.join("wt"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&wt).unwrap();
    scratch.chown_all(UNPRIV);
    let files = ["/.ssh/id", "/.config/gcloud/c", "/cfg/gcloud/c"]
        .map(|f| format!("{}{f}", home.display()));
    // (ERR, AT, HIDE, CASE): listing_fuse.py's variants.
    let variants = [
        ("2", "3", "", ""),
        ("5", "3", "", ""),
        ("5", "2", "", ""),
        ("0", "3", "cfg", ""),
        ("0", "3", "", "1"),
    ];
    for (err, at, hide, case) in variants {
        for backend in hiding_backends() {
            for uid in uids() {
                let cell =
                    format!("{backend} ERR={err} AT={at} HIDE={hide} CASE={case} uid {uid:?}");
                let user = match uid {
                    Some(u) => format!("setpriv --reuid {u} --regid {u} --clear-groups"),
                    None => String::new(),
                };
                let script = format!(
                    "python3 {server} {home} & \
                     for i in $(seq 100); do mountpoint -q {home} && break; sleep 0.05; done; \
                     mountpoint -q {home} || {{ echo 'no FUSE mount' >&2; exit 90; }}; \
                     HOME={home} XDG_CONFIG_HOME={home}/cfg {user} {SANDBOX} --backend {backend} \
                       {wt} -- cat {files}; \
                     umount {home}; wait",
                    server = server.display(),
                    home = home.display(),
                    wt = wt.display(),
                    files = files.join(" "),
                );
                let out = std::process::Command::new("unshare")
                    .args(["-m", "--propagation", "private", "sh", "-c", &script])
                    .env("ERR", err)
                    .env("AT", at)
                    .env("HIDE", hide)
                    .env("CASE", case)
                    .output()
                    .unwrap();
                let all = text(&out);
                assert!(!all.contains("no FUSE mount"), "{cell}:\n{all}");
                assert!(
                    !all.contains("KEY") && !all.contains("TOKEN"),
                    "{cell}: read:\n{all}"
                );
                for f in &files {
                    assert_denied(&out, Path::new(f), &cell);
                }
            }
        }
    }
}

/// A home the caller cannot list (mode 0711, another user's) whose `.ssh` the caller can read:
/// listing it fails, so every location of the home is looked up instead, and `.ssh` is hidden
/// on every backend. Before, the mount backends found nothing to hide there. As uid 65534,
/// the home root's.
#[test]
fn a_home_the_caller_cannot_list_still_hides_what_lookups_reach() {
    let test = "a_home_the_caller_cannot_list_still_hides_what_lookups_reach";
    if skip_unless_root(test) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    let dir = scratch.path();
    let (home, wt) = (dir.join("home"), dir.join("wt"));
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id"), "KEY\n").unwrap();
    std::fs::create_dir_all(&wt).unwrap();
    scratch.chown_all(UNPRIV);
    std::process::Command::new("chown")
        .args(["-R", "0:0"])
        .arg(&home)
        .status()
        .unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o711)).unwrap();
    let key = home.join(".ssh/id");
    for backend in hiding_backends() {
        let cell = format!("{backend} uid {UNPRIV}");
        let out = Run::new(&wt)
            .backend(backend)
            .env("HOME", &home)
            .with_uid(UNPRIV)
            .args(["--", "cat"])
            .arg(&key)
            .output();
        assert!(!text(&out).contains("KEY"), "{cell}: read:\n{}", show(&out));
        assert_denied(&out, &key, &cell);
    }
}

/// A `..` in `HOME`: the kernel reads `~/.ssh` through the component before it (a symlink
/// there leads elsewhere), Go's `filepath.Join` and Python's `normpath` drop both; both
/// readings are hidden, on every hiding backend, as root and as uid 65534.
#[test]
fn a_home_with_dot_dot_hides_both_readings() {
    let scratch = Scratch::new();
    let dir = scratch.path();
    let (wt, real) = (dir.join("wt"), dir.join("elsewhere/inner"));
    std::fs::create_dir_all(&wt).unwrap();
    std::fs::create_dir_all(&real).unwrap();
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::os::unix::fs::symlink(&real, dir.join("home/link")).unwrap();
    // The kernel's reading: `home/link/..` is `elsewhere`; the lexical one: `home`.
    let keys = [dir.join("elsewhere/.ssh/id"), dir.join("home/.ssh/id")];
    for k in &keys {
        std::fs::create_dir_all(k.parent().unwrap()).unwrap();
        std::fs::write(k, "KEY\n").unwrap();
    }
    assert_unreadable(&scratch, &wt, &keys, |run| {
        run.env("HOME", dir.join("home/link/.."))
    });
}

/// `--hide` with a `..` hides both readings too: the kernel's (through the symlink before it)
/// and the lexical one. Before, only the lexical one was hidden.
#[test]
fn a_hide_path_with_dot_dot_hides_both_readings() {
    let scratch = Scratch::new();
    let dir = scratch.path();
    let wt = dir.join("wt");
    std::fs::create_dir_all(&wt).unwrap();
    std::fs::create_dir_all(dir.join("other/sub")).unwrap();
    std::fs::create_dir_all(dir.join("h")).unwrap();
    std::os::unix::fs::symlink(dir.join("other/sub"), dir.join("h/link")).unwrap();
    let files = [dir.join("other/sec"), dir.join("h/sec")];
    for f in &files {
        std::fs::write(f, "KEY\n").unwrap();
    }
    assert_unreadable(&scratch, &wt, &files, |run| {
        run.arg("--hide").arg(dir.join("h/link/../sec"))
    });
}

/// `cat FILES` in `wt`, the run as `with` makes it, on every hiding backend, as root and as
/// uid 65534 (the scratch tree then given to that uid): every file refused, none read.
fn assert_unreadable(scratch: &Scratch, wt: &Path, files: &[PathBuf], with: impl Fn(Run) -> Run) {
    for uid in uids() {
        if let Some(u) = uid {
            scratch.chown_all(u);
        }
        for backend in hiding_backends() {
            let cell = format!("{backend} uid {uid:?}");
            let mut run = with(Run::new(wt).backend(backend));
            if let Some(u) = uid {
                run = run.with_uid(u);
            }
            let out = run.args(["--", "cat"]).args(files).output();
            assert!(!text(&out).contains("KEY"), "{cell}: read:\n{}", show(&out));
            for f in files {
                assert_denied(&out, f, &cell);
            }
        }
    }
}
