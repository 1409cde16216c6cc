//! Backend choice and the namespace backends' own promises (issue 3): `auto` at capped ABIs,
//! field cases 5-7, metadata changes under `layered`, file ownership under `userns`.

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use common::*;

fn probe_backend(extra: &[&str]) -> serde_json::Value {
    let out = Command::new(SANDBOX)
        .args(["--probe", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn have(backend: &str) -> bool {
    let ok = backends().contains(&backend);
    if !ok {
        skip(
            &format!("the {backend} test"),
            &format!("backend {backend} is not usable here"),
        );
    }
    ok
}

#[test]
fn auto_picks_layered_from_abi_2_and_userns_below() {
    if !have("userns") {
        return;
    }
    for abi in 2..=landlock_abi() {
        let v = probe_backend(&["--max-abi", &abi.to_string()]);
        assert_eq!(v["backend"], "layered", "--max-abi {abi}: {v}");
        assert_eq!(v["effective_abi"], abi, "--max-abi {abi}");
    }
    for abi in ["0", "1"] {
        let v = probe_backend(&["--max-abi", abi]);
        assert_eq!(v["backend"], "userns", "--max-abi {abi}: {v}");
        // Landlock ABI 1 would break renames inside: userns does not layer it.
        assert_eq!(v["effective_abi"], 0, "--max-abi {abi}");
        let required: Vec<_> = v["degraded"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| v["protections"][k.as_str().unwrap()]["tier"] == "required")
            .collect();
        assert!(required.is_empty(), "--max-abi {abi}: {v}");
    }
    // --net deny needs ABI 4 for Landlock alone; the namespaces' network namespace does it.
    let v = probe_backend(&["--max-abi", "3", "--net", "deny"]);
    assert_eq!(v["backend"], "layered");
    assert_eq!(v["protections"]["tcp"]["enforced"], true);
}

#[test]
fn a_run_at_a_capped_abi_uses_the_namespace_backend_and_says_so() {
    if !have("userns") {
        return;
    }
    let s = Scratch::new();
    let report = s.path().join("r.json");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd '{w}' && exec 9>'{}' && exec '{SANDBOX}' --max-abi 2 --report 9 '{w}' -c 'echo x > f && mkdir d && mv f d/ && truncate -s0 d/f'",
            report.display(),
            w = s.path().display()
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["backend"], "layered", "{v}");
    assert_eq!(v["effective_abi"], 2, "{v}");
}

#[test]
fn metadata_changes_outside_fail_under_layered_and_are_a_known_gap_under_landlock() {
    let s = Scratch::new();
    let wt = s.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    let victim = s.path().join("victim");
    let attacks = |v: &Path| {
        let v = v.display();
        vec![
            format!("chmod 777 '{v}'"),
            format!("touch -d 2001-01-01 '{v}'"),
            format!("chown {UNPRIV} '{v}'"),
            format!("setfattr -n user.x -v y '{v}'"),
        ]
    };
    let have_setfattr = Path::new("/usr/bin/setfattr").exists();
    for b in backends() {
        for attack in attacks(&victim) {
            if attack.starts_with("setfattr") && !have_setfattr {
                skip("the setfattr case", "attr (setfattr) is not installed");
                continue;
            }
            std::fs::write(&victim, "x").unwrap();
            let before = std::fs::metadata(&victim).unwrap();
            let out = Run::new(&wt).backend(b).sh(&attack).output();
            let after = std::fs::metadata(&victim).unwrap();
            use std::os::unix::fs::MetadataExt;
            let changed = before.mode() != after.mode()
                || before.mtime() != after.mtime()
                || before.uid() != after.uid()
                || xattr_set(&victim);
            if b == "landlock" {
                // Pinned limit: Landlock does not control these (probe says so).
                if out.status.success() {
                    assert!(changed, "{b}: {attack} succeeded but changed nothing");
                }
            } else {
                assert!(!out.status.success(), "{b}: {attack}: {}", show(&out));
                assert!(!changed, "{b}: {attack} changed the file");
            }
            std::fs::remove_file(&victim).unwrap();
        }
    }
}

fn xattr_set(p: &Path) -> bool {
    Command::new("getfattr")
        .args(["-n", "user.x"])
        .arg(p)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A build tree another user cannot enter (a clone in root's 0700 home): runs as that user go
/// through a copy it can reach. Before `ReachableCopy`, exec of the binary failed with EACCES.
#[test]
fn runs_as_another_uid_work_from_a_build_tree_that_uid_cannot_enter() {
    if skip_unless_root("runs_as_another_uid_work_from_a_build_tree_that_uid_cannot_enter") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let private = Scratch::new();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let bin = private.path().join("shofer-sandbox");
    std::fs::copy(SANDBOX, &bin).unwrap();
    assert_eq!(
        untraversable_ancestor(&bin, UNPRIV),
        Some(private.path()),
        "the 0700 directory must stop uid {UNPRIV}"
    );
    let direct = Command::new(&bin)
        .arg("--probe")
        .uid(UNPRIV)
        .gid(UNPRIV)
        .output();
    assert_eq!(
        direct.map_err(|e| e.raw_os_error()).err(),
        Some(Some(libc::EACCES)),
        "uid {UNPRIV} should not be able to start a binary in a 0700 root directory"
    );
    let copy = ReachableCopy::new(&bin, UNPRIV);
    assert_eq!(untraversable_ancestor(copy.path(), UNPRIV), None);
    let out = Command::new(copy.path())
        .arg("--probe")
        .uid(UNPRIV)
        .gid(UNPRIV)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
}

#[test]
fn userns_files_created_in_the_worktree_belong_to_the_caller() {
    if skip_unless_root("userns_files_created_in_the_worktree_belong_to_the_caller") {
        return;
    }
    for b in ["userns", "layered"] {
        if !have(b) {
            continue;
        }
        let s = Scratch::new();
        s.chown_all(UNPRIV);
        let wt = s.path();
        let out = Run::new(&wt)
            .backend(b)
            .with_uid(UNPRIV)
            .sh("echo x > mine && mkdir dir && id -u")
            .output();
        assert_eq!(out.status.code(), Some(0), "{b}: {}", show(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            UNPRIV.to_string()
        );
        use std::os::unix::fs::MetadataExt;
        for f in ["mine", "dir"] {
            let m = std::fs::metadata(wt.join(f)).unwrap();
            assert_eq!((m.uid(), m.gid()), (UNPRIV, UNPRIV), "{b}: {f}");
        }
    }
}

#[test]
fn blocked_user_namespaces_give_a_one_line_reason_and_auto_keeps_landlock() {
    // Field case 6: user.max_user_namespaces=0, set inside a child user namespace so the host
    // is untouched.
    if !Path::new("/usr/bin/unshare").exists() {
        skip(
            "blocked_user_namespaces_give_a_one_line_reason_and_auto_keeps_landlock",
            "unshare(1) (util-linux) not installed",
        );
        return;
    }
    if !have("userns") {
        return;
    }
    let s = Scratch::new();
    let script = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces || exit 99; \
         '{SANDBOX}' --backend userns '{w}' -- true; echo \"userns=$?\"; \
         '{SANDBOX}' '{w}' -- true; echo \"auto=$?\"",
        w = s.path().display()
    );
    let out = Command::new("unshare")
        .args(["-U", "-r", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("userns=125"), "{}", show(&out));
    let line = stderr
        .lines()
        .find(|l| l.contains("user namespaces"))
        .expect("a reason line");
    assert!(line.contains("max_user_namespaces"), "{line}");
    assert!(
        !stderr.contains("uid_map"),
        "raw uid_map error leaked: {stderr}"
    );
    if landlock_abi() >= 3 {
        assert!(stdout.contains("auto=0"), "{}", show(&out));
    }
}

#[test]
fn a_missing_or_old_bwrap_is_named_not_crashed_into() {
    // Field case 7.
    let s = Scratch::new();
    let bin = s.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for tool in ["sh", "true"] {
        std::os::unix::fs::symlink(format!("/bin/{tool}"), bin.join(tool)).unwrap();
    }
    let run = |path: &Path| {
        Command::new(SANDBOX)
            .env("PATH", path)
            .args(["--backend", "bwrap"])
            .arg(s.path())
            .args(["--", "true"])
            .output()
            .unwrap()
    };
    let out = run(&bin);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bwrap: not installed"));

    let fake = bin.join("bwrap");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'bubblewrap 0.1.7'; exit 0; }\necho 'bwrap: Unknown option --args' >&2; exit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(&bin);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("too old (0.1.7 < 0.4.0"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn keep_descendants_is_refused_with_bwrap() {
    if !have("bwrap") {
        return;
    }
    let s = Scratch::new();
    let out = Run::new(&s.path())
        .backend("bwrap")
        .arg("--keep-descendants")
        .arg("true")
        .output();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--keep-descendants"));
}
