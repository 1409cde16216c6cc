//! Secret variables are not passed to the command (issue 32, deliverable 3): on every backend,
//! as root and as uid 65534, `env` inside shows none of them, `--keep-env` keeps exactly what
//! it names, the stderr note and the `--report` record name them, never a value, and ordinary
//! variables pass unchanged.

mod common;

use std::collections::BTreeMap;

use common::*;

/// The uids each test runs as: root (CI) and 65534.
fn uids() -> Vec<Option<u32>> {
    if is_root() {
        vec![None, Some(UNPRIV)]
    } else {
        vec![None]
    }
}

/// Secret variables set for every run, with values that must never show up outside.
const SECRETS: &[(&str, &str)] = &[
    ("GITHUB_TOKEN", "value-of-github-token-1f2e"),
    ("github_token", "value-of-lowercase-github-token-77aa"),
    ("NPM_TOKEN", "value-of-npm-token-3c4d"),
    ("AWS_ACCESS_KEY_ID", "value-of-aws-key-id-5e6f"),
    ("AWS_SECRET_ACCESS_KEY", "value-of-aws-secret-7a8b"),
    ("OPENAI_API_KEY", "value-of-openai-key-9c0d"),
    ("MY_DB_PASSWORD", "value-of-db-password-2b3c"),
    (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "/value/of/gcp/key-4d5e.json",
    ),
];

/// Ordinary variables set for every run: they must arrive unchanged.
const ORDINARY: &[(&str, &str)] = &[
    ("FOO", "bar"),
    ("LANG", "C.UTF-8"),
    // A socket path and a program, not secrets.
    ("SSH_AUTH_SOCK", "/run/user/1000/ssh-agent.socket"),
    ("GIT_ASKPASS", "/bin/false"),
    // The documented false positive of *TOKEN*.
    ("TOKENIZERS_PARALLELISM", "false"),
];

/// One run's results.
struct Seen {
    /// The command's environment, from `env -0`.
    env: BTreeMap<String, String>,
    stdout: String,
    stderr: String,
    /// The `--report` record (its first line).
    report: serde_json::Value,
    /// The `--report` file as written.
    report_text: String,
}

/// Runs `env -0` with `extra` options on backend `b` as `uid`, with [`SECRETS`] and
/// [`ORDINARY`] in its environment and a `--report`.
fn run_env(b: &str, uid: Option<u32>, extra: &[&str]) -> Seen {
    let s = Scratch::new();
    let wt = s.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    if let Some(u) = uid {
        s.chown_all(u);
    }
    let report_path = s.path().join("report.json");
    let report = std::fs::File::create(&report_path).unwrap();
    let mut r = Run::new(&wt).backend(b).args(["--report", "9"]).args(extra);
    if let Some(u) = uid {
        r = r.with_uid(u);
    }
    // Secrets the test itself inherited (a CI token) are not part of the experiment.
    for (k, _) in std::env::vars_os() {
        if shofer_core::secretenv::secret_rule(k.as_encoded_bytes()).is_some() {
            r = r.env_remove(k);
        }
    }
    for (k, v) in SECRETS.iter().chain(ORDINARY) {
        r = r.env(k, v);
    }
    let out = r.fd9(report).args(["--", "env", "-0"]).output();
    assert_eq!(out.status.code(), Some(0), "{b} {uid:?}: {}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let env = stdout
        .split('\0')
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (k, v) = e.split_once('=').unwrap_or((e, ""));
            (k.to_string(), v.to_string())
        })
        .collect();
    let report_text = std::fs::read_to_string(&report_path).unwrap();
    let report = serde_json::from_str(report_text.lines().next().unwrap()).unwrap();
    Seen {
        env,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        report,
        report_text,
    }
}

/// The note's line on stderr (exactly one).
fn note_line(seen: &Seen) -> &str {
    let lines: Vec<&str> = seen
        .stderr
        .lines()
        .filter(|l| l.contains("secret variables withheld"))
        .collect();
    assert_eq!(lines.len(), 1, "one note: {}", seen.stderr);
    assert!(
        lines[0].starts_with("shofer-sandbox: note: secret variables withheld from the command: ")
            && lines[0].ends_with(" (keep one with --keep-env NAME)"),
        "{}",
        lines[0]
    );
    lines[0]
}

/// The names the note lists.
fn noted(seen: &Seen) -> Vec<String> {
    let line = note_line(seen);
    let list = line
        .trim_start_matches("shofer-sandbox: note: secret variables withheld from the command: ")
        .trim_end_matches(" (keep one with --keep-env NAME)");
    list.split(", ").map(String::from).collect()
}

/// Checks one run where exactly `kept` of [`SECRETS`] are kept.
fn check(seen: &Seen, kept: &[&str], what: &str) {
    // The command's environment: ordinary variables unchanged, kept secrets with their value,
    // every other secret gone — and nothing else that looks like one.
    for (k, v) in ORDINARY {
        assert_eq!(
            seen.env.get(*k).map(String::as_str),
            Some(*v),
            "{what}: {k}"
        );
    }
    for k in ["PATH", "HOME"] {
        assert_eq!(
            seen.env.get(k),
            std::env::var(k).ok().as_ref(),
            "{what}: {k} must pass unchanged"
        );
    }
    for (k, v) in SECRETS {
        if kept.contains(k) {
            assert_eq!(
                seen.env.get(*k).map(String::as_str),
                Some(*v),
                "{what}: {k} kept"
            );
        } else {
            assert!(!seen.env.contains_key(*k), "{what}: {k} must be withheld");
            assert!(!seen.stdout.contains(v), "{what}: the value of {k} leaked");
        }
    }
    for k in seen.env.keys() {
        assert!(
            kept.contains(&k.as_str()) || shofer_core::secretenv::secret_rule(k).is_none(),
            "{what}: the secret variable {k} reached the command"
        );
    }
    // The note and the report: the same names, each withheld secret and only those, sorted;
    // no value anywhere.
    let withheld: Vec<String> = seen.report["env_withheld"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no env_withheld in {}", seen.report))
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    assert_eq!(noted(seen), withheld, "{what}: note and report differ");
    let mut sorted = withheld.clone();
    sorted.sort();
    assert_eq!(sorted, withheld, "{what}: sorted");
    for (k, _) in SECRETS {
        assert_eq!(
            withheld.contains(&k.to_string()),
            !kept.contains(k),
            "{what}: {k} in {withheld:?}"
        );
    }
    for n in &withheld {
        assert!(
            !kept.contains(&n.as_str()) && shofer_core::secretenv::secret_rule(n).is_some(),
            "{what}: {n} is listed but not a withheld secret"
        );
    }
    for (k, v) in SECRETS {
        assert!(
            !seen.stderr.contains(v),
            "{what}: the value of {k} on stderr"
        );
        assert!(
            !seen.report_text.contains(v),
            "{what}: the value of {k} in the report"
        );
    }
}

#[test]
fn env_inside_shows_no_secret_variable_and_ordinary_ones_pass() {
    for b in backends() {
        for uid in uids() {
            let seen = run_env(b, uid, &[]);
            check(&seen, &[], &format!("{b} {uid:?}"));
        }
    }
}

#[test]
fn keep_env_name_keeps_exactly_that_variable() {
    for b in backends() {
        for uid in uids() {
            // Names compare exactly: `github_token` stays withheld.
            let seen = run_env(b, uid, &["--keep-env", "GITHUB_TOKEN"]);
            check(
                &seen,
                &["GITHUB_TOKEN"],
                &format!("{b} {uid:?} GITHUB_TOKEN"),
            );
        }
    }
}

#[test]
fn keep_env_glob_keeps_exactly_what_it_matches() {
    for b in backends() {
        for uid in uids() {
            let seen = run_env(b, uid, &["--keep-env", "AWS_*", "--keep-env", "*_PASSWORD"]);
            check(
                &seen,
                &[
                    "AWS_ACCESS_KEY_ID",
                    "AWS_SECRET_ACCESS_KEY",
                    "MY_DB_PASSWORD",
                ],
                &format!("{b} {uid:?} AWS_* *_PASSWORD"),
            );
        }
    }
}

#[test]
fn no_note_when_nothing_is_withheld_and_the_report_lists_none() {
    let s = Scratch::new();
    let wt = s.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    let report_path = s.path().join("report.json");
    let report = std::fs::File::create(&report_path).unwrap();
    let mut r = Run::new(&wt).args(["--report", "9"]).fd9(report);
    // Nothing secret inherited from the test's own environment.
    for (k, _) in std::env::vars_os() {
        if shofer_core::secretenv::secret_rule(k.as_encoded_bytes()).is_some() {
            r = r.env_remove(k);
        }
    }
    let out = r.args(["--", "true"]).output();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("withheld"),
        "{}",
        show(&out)
    );
    let text = std::fs::read_to_string(&report_path).unwrap();
    let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(v["env_withheld"], serde_json::json!([]), "{v}");
}

#[test]
fn a_variable_the_command_line_sets_is_the_commands_own() {
    // Withholding is about what the command inherits: an assignment in its own command line
    // is not touched.
    let s = Scratch::new();
    let wt = s.path().join("wt");
    std::fs::create_dir(&wt).unwrap();
    let out = Run::new(&wt)
        .env("GITHUB_TOKEN", "inherited-value")
        .sh("echo \"inherited=${GITHUB_TOKEN-unset}\"; env GITHUB_TOKEN=explicit-value env")
        .output();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("inherited=unset\n"), "{}", show(&out));
    assert!(
        stdout.contains("GITHUB_TOKEN=explicit-value\n"),
        "{}",
        show(&out)
    );
    assert!(!stdout.contains("inherited-value"), "{}", show(&out));
}

#[test]
fn keep_env_with_an_equals_sign_is_refused() {
    let s = Scratch::new();
    let out = Run::new(&s.path())
        .args(["--keep-env", "GITHUB_TOKEN=x", "--", "true"])
        .output();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--keep-env"));
}

#[test]
fn a_withheld_value_is_not_left_in_any_process_environment_block() {
    // unsetenv(3) leaves the original strings in memory, where /proc/<pid>/environ shows them;
    // as root with --keep-caps under Landlock alone, the command may read the supervisor's and
    // the guardian's. Every backend, with the capabilities kept where the caller is root.
    let value = format!("withheld-value-{}", std::process::id());
    let scan = format!(
        "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null | grep -q '{value}' && echo \"LEAK $p $(cat $p/comm)\"; done; echo scanned"
    );
    for b in backends() {
        let s = Scratch::new();
        let wt = s.path().join("wt");
        std::fs::create_dir(&wt).unwrap();
        let mut r = Run::new(&wt).backend(b).env("GITHUB_TOKEN", &value);
        if is_root() {
            r = r.args(["--keep-caps"]);
        }
        let out = r.sh(&scan).output();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.ends_with("scanned\n"), "{b}: {}", show(&out));
        assert!(!stdout.contains("LEAK"), "{b}: {}", show(&out));
    }
}
