//! Issue 33, `--net proxy`: real clients (curl, Python) inside the sandbox reach only the
//! allow-list's destinations through the supervisor's proxy, on every backend, as root and as
//! uid 65534. On Landlock alone (the host's network namespace: here the world's) the gate's own
//! checks run too (`tests/egress/landlock.py`): a host loopback service, UDP, MPTCP, TCP Fast
//! Open, binds beyond loopback refused; the run's own loopback server reached; a sockaddr
//! rewritten while its connect is trapped never reaching anything but the proxy. Without the
//! gate the mode is refused unless degraded runs are allowed.
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

/// The checks of `landlock.py`, on Landlock alone.
const LANDLOCK: [&str; 18] = [
    "ll-host-service",
    "ll-direct-out",
    "ll-ipv6-mapped",
    "ll-udp",
    "ll-mptcp",
    "ll-msg-fastopen",
    "ll-fastopen-connect",
    "ll-own-server",
    "ll-own-server-v6",
    "ll-bind-any",
    "ll-listen-unbound",
    "ll-unspecified-v6",
    "ll-unspecified-v4",
    "ll-reuseport",
    "ll-closed-server",
    "ll-race",
    // Of checks.sh, refused by the gate or by seccomp here rather than by having no route.
    "tcp-host-loopback",
    "udp-host-loopback",
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
fn only_the_allow_list_is_reached_through_the_proxy_on_every_backend() {
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
    let mut landlock = false;
    for b in backends() {
        landlock |= b == "landlock";
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
            if b != "landlock" {
                // The proxy's port in a network namespace of the command's own.
                cmd.env("EXPECT_PROXY_PORT", "3128");
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
                .env("LANDLOCK_CHECKS", if b == "landlock" { "1" } else { "0" })
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
            let landlock_checks = if b == "landlock" { &LANDLOCK[..] } else { &[] };
            for name in EXPECTED.iter().chain(landlock_checks) {
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
            // The gate's refusals join the proxy's in the report.
            if b == "landlock" && !listed.to_string().contains("127.0.0.1:8765") {
                failures.push(format!(
                    "{cell}: net_refused lacks the gate's refusal: {listed}"
                ));
            }
        }
    }
    assert!(cells >= 2, "no backend ran");
    assert!(landlock || !in_ci(), "CI: the landlock backend did not run");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn landlock_alone_without_the_gate_refuses_the_proxy_mode_unless_degraded() {
    let s = Scratch::new();
    let out = Run::new(&s.path())
        .backend("landlock")
        .args(["--net", "proxy", "--no-unix-gate", "--", "true"])
        .output();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--net proxy on Landlock alone needs the seccomp gate"),
        "{err}"
    );
    let out = Run::new(&s.path())
        .backend("landlock")
        .args(["--net", "proxy", "--no-unix-gate", "--allow-degraded"])
        .args(["--", "/bin/sh", "-c", "echo $http_proxy"])
        .output();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: degraded (tcp): --net proxy on Landlock alone"),
        "{err}"
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("http://127.0.0.1:"), "{said}");
}
