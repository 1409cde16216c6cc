//! Issue 33, `--net proxy`: real clients (curl, Python) inside the sandbox reach only the
//! allow-list's destinations through the supervisor's proxy, on every backend with a network
//! namespace, as root and as uid 65534; Landlock alone refuses the mode.
//!
//! Every run happens in a world of its own (`tests/egress/world.sh`): network and mount
//! namespaces the test creates, with a second namespace behind a veth pair for "the internet"
//! (the metadata and private addresses included) and `/etc/hosts` naming it, so no packet
//! leaves the machine whatever the build under test does. The checks themselves are
//! `tests/egress/checks.sh`, one `ok`/`FAIL` line each.
mod common;

use std::path::Path;
use std::process::Command;

use common::*;

const WORLD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/egress/world.sh");
const CHECKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/egress/checks.sh");

/// Every check of `checks.sh`, which must each print `ok NAME`.
const EXPECTED: [&str; 25] = [
    "http",
    "git-clone-http",
    "git-clone-smart-https",
    "pip-local-index",
    "connect-tls",
    "socks5-hostname",
    "named-address",
    "unlisted-name",
    "ip-literal",
    "resolves-to-loopback",
    "resolves-to-metadata",
    "unlisted-port",
    "host-header",
    "sni",
    "plain-tunnel",
    "socks5-refused",
    "udp-host-loopback",
    "dns-out",
    "udp-out",
    "tcp-direct",
    "tcp-host-loopback",
    "tcp-metadata-direct",
    "raw",
    "slow-loris",
    "proxy-variables",
];

fn tools_present() -> bool {
    [
        "ip",
        "openssl",
        "curl",
        "nsenter",
        "unshare",
        "ss",
        "/usr/bin/python3",
    ]
    .iter()
    .all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn only_the_allow_list_is_reached_through_the_proxy_on_every_namespace_backend() {
    if skip_unless_root("only_the_allow_list_is_reached_through_the_proxy") {
        return;
    }
    if !tools_present() {
        assert!(
            !in_ci(),
            "CI: ip, openssl, curl, nsenter, ss or python3 missing"
        );
        skip(
            "only_the_allow_list_is_reached_through_the_proxy",
            "a tool is missing",
        );
        return;
    }
    let mut failures = Vec::new();
    let mut cells = 0;
    for b in backends().into_iter().filter(|b| *b != "landlock") {
        for uid in [None, Some(UNPRIV)] {
            cells += 1;
            let cell = format!("{b} / uid {uid:?}");
            let s = Scratch::new();
            if let Some(u) = uid {
                s.chown_all(u);
            }
            let copy = uid.map(|u| ReachableCopy::new(Path::new(SANDBOX), u));
            let program = copy.as_ref().map_or(Path::new(SANDBOX), |c| c.path());
            let report = s.path().join("report.json");
            let mut cmd = Command::new("unshare");
            cmd.args(["-n", "-m", "--propagation", "private", WORLD]);
            if let Some(u) = uid {
                let u = u.to_string();
                cmd.args(["setpriv", "--reuid", &u, "--regid", &u, "--clear-groups"]);
            }
            cmd.arg(program)
                .args(["--backend", b, "--net", "proxy", "--no-default-domains"])
                .args([
                    "--allow-domain",
                    "reg.test",
                    "--allow-domain",
                    "reg.test:8080,9443",
                ])
                .args(["--allow-domain", "local.test:8765"])
                .args([
                    "--allow-domain",
                    "metadata.test",
                    "--allow-domain",
                    "private.test",
                ])
                .args(["--allow-domain", "10.9.9.9:80", "--report", "9"])
                .arg(s.path())
                .args(["--", "/bin/sh", "-c"])
                .arg(format!("/bin/sh {CHECKS} 9>&-"))
                .env("HOME", s.path())
                .env("XDG_STATE_HOME", s.path().join("state"))
                .current_dir(s.path());
            let file = std::fs::File::create(&report).unwrap();
            if let Some(u) = uid {
                let _ = std::os::unix::fs::chown(&report, Some(u), Some(u));
            }
            // The report on descriptor 9 of the sandbox (the world script passes it through).
            use std::os::fd::AsRawFd;
            use std::os::unix::process::CommandExt;
            let fd = file.as_raw_fd();
            // Safety: dup2 is async-signal-safe.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::dup2(fd, 9) != 9 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let out = cmd.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            println!("{cell}:\n{stdout}");
            for name in EXPECTED {
                if !stdout.lines().any(|l| l == format!("ok {name}")) {
                    failures.push(format!("{cell}: check {name} did not pass"));
                }
            }
            for l in stdout.lines().filter(|l| l.starts_with("FAIL")) {
                failures.push(format!("{cell}: {l}"));
            }
            for refused in ["unlisted.test:80: not in the allow-list (--allow-domain unlisted.test:80 would allow it)", "metadata.test:80: metadata.test resolves to 169.254.169.254:80"] {
                if !stderr.contains(&format!("shofer-sandbox: net refused: {refused}")) {
                    failures.push(format!("{cell}: stderr does not name {refused}:\n{stderr}"));
                }
            }
            let text = std::fs::read_to_string(&report).unwrap_or_default();
            let records: Vec<serde_json::Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            let tcp = &records.first().cloned().unwrap_or_default()["protections"]["tcp"];
            if tcp["enforced"] != true {
                failures.push(format!("{cell}: the report's tcp row is {tcp}"));
            }
            let listed = records
                .iter()
                .find_map(|r| r.get("net_refused").cloned())
                .unwrap_or_default();
            if !listed.to_string().contains("unlisted.test:80") {
                failures.push(format!("{cell}: net_refused is {listed}"));
            }
        }
    }
    assert!(cells >= 2, "no namespace backend ran");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn landlock_alone_refuses_the_proxy_mode_even_when_degraded_runs_are_allowed() {
    let s = Scratch::new();
    for extra in [&[][..], &["--allow-degraded"][..]] {
        let out = Run::new(&s.path())
            .backend("landlock")
            .args(["--net", "proxy"])
            .args(extra)
            .args(["--", "true"])
            .output();
        assert_eq!(out.status.code(), Some(125), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--net proxy needs a network namespace"),
            "{err}"
        );
    }
}
