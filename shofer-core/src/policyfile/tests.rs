//! The policy files' parsing, narrowing and merging, on file texts as users write them.

use std::path::{Path, PathBuf};

use super::parse::{self, ProjectFile, UserFile};
use super::{resolve, Layer, Origin, Val};
use crate::limits::Setting;
use crate::policy::{Backend, NetPolicy};

const HOME: &str = "/home/u";
const USER: &str = "/home/u/.config/shofer/config.toml";
const PROJECT: &str = "/w/.shofer/config.toml";

fn user(text: &str) -> UserFile {
    parse::user(text, Path::new(USER), Some(Path::new(HOME))).unwrap()
}

fn project(text: &str) -> ProjectFile {
    parse::project(text, Path::new(PROJECT), Some(Path::new(HOME))).unwrap()
}

fn user_err(text: &str) -> String {
    parse::user(text, Path::new(USER), Some(Path::new(HOME)))
        .unwrap_err()
        .to_string()
}

const USER_FILE: &str = r#"
profile = "work"
[sandbox]
allow_write = ["~/.cache/ccache"]
allow_unix = ["/run/user/1000/ssh.sock"]
allow_read = ["~/.aws"]
keep_env = ["GH_TOKEN"]
[network]
mode = "proxy"
allow_domains = ["git.example.com", "10.0.0.7:8080"]
[limits]
procs = 2000
memory = "8G"
[timeouts]
hard = 600

[profiles.work.limits]
cpu = 200

[profiles.open.network]
mode = "allow"
"#;

#[test]
fn a_user_file_gives_every_setting_with_its_line() {
    let u = user(USER_FILE);
    assert_eq!(
        u.base.allow_write.as_ref().unwrap()[0].value,
        PathBuf::from("/home/u/.cache/ccache")
    );
    let net = u.base.net.clone().unwrap();
    assert_eq!(net.value, NetPolicy::Proxy);
    assert_eq!(
        net.origin,
        Origin::File {
            path: USER.into(),
            line: 9,
            profile: None
        }
    );
    assert_eq!(
        u.base.limit_memory.as_ref().unwrap().value,
        Setting::Value(8 << 30)
    );
    assert_eq!(u.profiles.len(), 2);
    // The profile the file selects applies without --profile.
    let eff = resolve(Some(&u), None, None, Layer::default(), None).unwrap();
    assert_eq!(eff.limit_cpu.unwrap().value, Setting::Value(200));
    let eff = resolve(Some(&u), None, Some("open"), Layer::default(), None).unwrap();
    assert_eq!(eff.net(), NetPolicy::Allow);
    assert!(eff.limit_cpu.is_none());
}

#[test]
fn unknown_keys_and_bad_values_name_the_file_the_line_and_what_is_valid() {
    let e = user_err("[sandbox]\nallow_writes = []\n");
    assert!(e.starts_with(&format!("{USER}:2: ")), "{e}");
    assert!(
        e.contains("allow_writes") && e.contains("allow_write"),
        "{e}"
    );
    let e = user_err("[network]\n\nmode = \"open\"\n");
    assert!(e.starts_with(&format!("{USER}:3: network.mode")), "{e}");
    assert!(e.contains("expected allow, deny or proxy"), "{e}");
    let e = user_err("[limits]\nmemory = \"8X\"\n");
    assert!(
        e.contains(":2: limits.memory") && e.contains("512M or 8G"),
        "{e}"
    );
    let e = user_err("[limits]\nprocs = true\n");
    assert!(e.contains("limits.procs: a boolean"), "{e}");
    let e = user_err("[timeouts]\nhard = -1\n");
    assert!(e.contains("timeouts.hard") && e.contains("above 0"), "{e}");
    let e = user_err("[sandbox]\nallow_write = [\"relative/dir\"]\n");
    assert!(e.contains("absolute path or one starting with ~/"), "{e}");
    let e = user_err("[network]\nallow_domains = [\"a b\"]\n");
    assert!(
        e.contains("network.allow_domains") && !e.contains("--allow-domain"),
        "{e}"
    );
    let e = user_err("[sandbox]\nbackend = \"docker\"\n");
    assert!(
        e.contains("auto, landlock, userns, bwrap or layered"),
        "{e}"
    );
    let e = user_err("[profiles.\"a b\"]\n");
    assert!(e.contains("profile name"), "{e}");
    let e = user_err("sandbox = 3\n");
    assert!(e.starts_with(&format!("{USER}:1: ")), "{e}");
    let e = user_err("[sandbox\n");
    assert!(e.starts_with(&format!("{USER}:1: ")), "{e}");
}

#[test]
fn an_unknown_profile_lists_the_defined_ones() {
    let u = user(USER_FILE);
    let e = resolve(Some(&u), None, Some("nope"), Layer::default(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"nope\"") && e.contains("open, work"), "{e}");
    let e = resolve(None, None, Some("x"), Layer::default(), None).unwrap_err();
    assert!(e.to_string().contains("no user policy file"), "{e}");
}

#[test]
fn a_project_file_may_narrow() {
    let u = user(USER_FILE);
    let p = project(
        r#"
[sandbox]
hide = ["/srv/secrets", "~/notes"]
keep_env = []
allow_write = ["~/.cache/ccache"]
[network]
mode = "proxy"
allow_domains = ["git.example.com"]
default_domains = false
[limits]
procs = 100
memory = "1G"
cpu = 50
[timeouts]
hard = 60
"#,
    );
    let eff = resolve(Some(&u), Some(&p), None, Layer::default(), None).unwrap();
    let hide: Vec<_> = eff.hide.unwrap().into_iter().map(|v| v.value).collect();
    assert_eq!(
        hide,
        [
            PathBuf::from("/srv/secrets"),
            PathBuf::from("/home/u/notes")
        ]
    );
    assert!(eff.keep_env.unwrap().is_empty());
    assert_eq!(eff.allow_domains.unwrap().len(), 1);
    assert_eq!(eff.limit_procs.unwrap().value, Setting::Value(100));
    assert_eq!(eff.hard_timeout.unwrap().value, 60.0);
    // deny is narrower than the user's proxy.
    let p = project("[network]\nmode = \"deny\"\n");
    let eff = resolve(Some(&u), Some(&p), None, Layer::default(), None).unwrap();
    assert_eq!(eff.net(), NetPolicy::Deny);
    // Without a user file, the defaults are the user's: lower limits and less network pass.
    let p = project("[network]\nmode = \"proxy\"\n[limits]\nprocs = 10\nmemory = \"1G\"\n");
    let eff = resolve(None, Some(&p), None, Layer::default(), Some(16 << 30)).unwrap();
    assert_eq!(eff.net(), NetPolicy::Proxy);
}

#[test]
fn a_project_file_cannot_widen_anything() {
    let u = user(USER_FILE);
    let widen = |text: &str, needle: &str| {
        let p = project(text);
        let e = resolve(Some(&u), Some(&p), None, Layer::default(), Some(16 << 30))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(PROJECT) && e.contains("may only narrow"),
            "{e}"
        );
        assert!(e.contains(needle), "{text}: {e}");
    };
    // A writable path outside the worktree, a unix socket, a secret unhidden or kept.
    widen(
        "[sandbox]\nallow_write = [\"/etc\"]\n",
        "/w/.shofer/config.toml:2: sandbox.allow_write /etc",
    );
    widen(
        "[sandbox]\nallow_unix = [\"/run/docker.sock\"]\n",
        "sandbox.allow_unix /run/docker.sock",
    );
    widen(
        "[sandbox]\nallow_read = [\"~/.ssh\"]\n",
        "sandbox.allow_read /home/u/.ssh",
    );
    widen(
        "[sandbox]\nkeep_env = [\"AWS_SECRET_ACCESS_KEY\"]\n",
        "sandbox.keep_env AWS_SECRET_ACCESS_KEY",
    );
    // The network opened, or the allow-list widened.
    widen("[network]\nmode = \"allow\"\n", "network.mode allow");
    widen(
        "[network]\nallow_domains = [\"evil.example\"]\n",
        "network.allow_domains evil.example",
    );
    let no_defaults = user("[network]\nmode = \"proxy\"\ndefault_domains = false\n");
    let p = project("[network]\ndefault_domains = true\n");
    assert!(resolve(Some(&no_defaults), Some(&p), None, Layer::default(), None).is_err());
    // A limit widened or lifted, a timeout lengthened.
    widen(
        "[limits]\nprocs = 5000\n",
        "limits.procs 5000: more than the user's 2000",
    );
    widen("[limits]\nmemory = \"off\"\n", "limits.memory off");
    widen("[limits]\nmemory = \"1T\"\n", "limits.memory");
    widen("[timeouts]\nhard = 601\n", "timeouts.hard 601");
    // A soft timeout detaches commands: without the user's, a project cannot set one.
    widen(
        "[timeouts]\nsoft = 0.001\n",
        "timeouts.soft 0.001: the user's policy has none",
    );
    // A weaker backend, degraded runs, a wider profile.
    widen(
        "[sandbox]\nbackend = \"landlock\"\n",
        "sandbox.backend landlock",
    );
    widen(
        "[sandbox]\nallow_degraded = true\n",
        "sandbox.allow_degraded",
    );
    widen("profile = \"open\"\n", "network.mode allow");
    // Every problem is listed, not only the first.
    let p = project("[network]\nmode = \"allow\"\n[limits]\nprocs = 5000\n");
    let e = resolve(Some(&u), Some(&p), None, Layer::default(), None).unwrap_err();
    assert!(
        e.message.contains("network.mode") && e.message.contains("limits.procs"),
        "{e}"
    );
    // The default limits count as the user's.
    let p = project("[limits]\nprocs = 5000\n");
    assert!(resolve(None, Some(&p), None, Layer::default(), None).is_err());
    let p = project("[limits]\ncpu = \"off\"\n");
    assert!(resolve(None, Some(&p), None, Layer::default(), None).is_ok());
}

#[test]
fn a_project_file_has_no_profiles_of_its_own() {
    let e = parse::project(
        "[profiles.x.network]\nmode = \"allow\"\n",
        Path::new(PROJECT),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("[profiles] belongs in the user's policy file"),
        "{e}"
    );
}

#[test]
fn flags_win_single_values_replace_lists_add_up() {
    let u = user(USER_FILE);
    let flags = Layer {
        net: Some(Val::flag(NetPolicy::Deny, "--net")),
        allow_write: Some(vec![Val::flag(PathBuf::from("/srv/out"), "--allow-write")]),
        backend: Some(Val::flag(Some(Backend::Bwrap), "--backend")),
        ..Layer::default()
    };
    let eff = resolve(Some(&u), None, None, flags, None).unwrap();
    assert_eq!(eff.net(), NetPolicy::Deny);
    assert_eq!(eff.allow_write.as_ref().unwrap().len(), 2);
    let rows = eff.rows();
    let row = |k: &str| rows.iter().find(|r| r.key == k).unwrap().clone();
    assert_eq!(row("network.mode").origin, "flag --net");
    assert_eq!(row("sandbox.backend").value, "bwrap");
    assert!(row("sandbox.allow_write").origin.contains(USER));
    assert!(row("sandbox.allow_write")
        .origin
        .contains("flag --allow-write"));
    assert_eq!(
        row("limits.cpu").origin,
        format!("{USER}:18 (profile work)")
    );
    assert_eq!(row("timeouts.soft").origin, "default");
}

#[test]
fn a_flag_gives_no_meaning_to_a_project_setting() {
    // The user's file says nothing of the network; a flag asks for the proxy with one name.
    // The project's allow-list must not join it (an exfiltration channel).
    let flags = || Layer {
        net: Some(Val::flag(NetPolicy::Proxy, "--net")),
        default_domains: Some(Val::flag(false, "--no-default-domains")),
        allow_domains: Some(vec![Val::flag(
            crate::egress::Rule::parse("api.github.com").unwrap(),
            "--allow-domain",
        )]),
        ..Layer::default()
    };
    let p =
        project("[network]\nallow_domains = [\"evil.example.net:22,443\", \"*.attacker.io\"]\n");
    let e = resolve(None, Some(&p), None, flags(), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("network.allow_domains evil.example.net:22,443"),
        "{e}"
    );
    let p = project("[network]\ndefault_domains = true\n");
    assert!(resolve(None, Some(&p), None, flags(), None).is_err());
    // A subset of the flags' list narrows, and the flags still win.
    let p = project("[network]\nallow_domains = [\"api.github.com\"]\nmode = \"deny\"\n");
    let eff = resolve(None, Some(&p), None, flags(), None).unwrap();
    assert_eq!(eff.net(), NetPolicy::Proxy);
    assert_eq!(eff.allow_domains.unwrap().len(), 1);
    // A soft timeout only shortens the user's (here the flag's, which wins again).
    let mut f = flags();
    f.soft_timeout = Some(Val::flag(30.0, "--timeout"));
    let p = project("[timeouts]\nsoft = 5\n");
    let eff = resolve(None, Some(&p), None, f, None).unwrap();
    assert_eq!(eff.soft_timeout.unwrap().value, 30.0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Arbitrary bytes, and TOML-looking text, as a project's file: never a panic.
    #[test]
    fn no_project_file_panics(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
                              text in "(\\[[a-z.]{1,20}\\]\n|[a-z_]{1,14} = (\"[^\"]{0,12}\"|[0-9.e+-]{1,8}|true|\\[\"[~/a-z:*.]{0,12}\"\\])\n){0,8}") {
        super::fuzz_project_file(&data);
        super::fuzz_project_file(text.as_bytes());
    }
}
