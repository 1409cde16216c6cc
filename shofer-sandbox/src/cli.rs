//! Command-line parsing, stage one: flags to a typed [`Invocation`], with no syscalls.
//!
//! Grammar (ARCHITECTURE §2):
//! ```text
//! shofer-sandbox [OPTIONS] <WORKTREE> [--] <COMMAND> [ARGS...]
//! shofer-sandbox [OPTIONS] <WORKTREE> -c <SHELL-STRING> [ARG0 ARGS...]
//! shofer-sandbox --probe [--json]
//! ```
//! Options may appear before or after the worktree; the first argument after the worktree that
//! is not an option starts the command, and everything from there on belongs to it. `lexopt`
//! is used instead of clap to keep the static binary small and start-up fast.

use std::ffi::OsString;
use std::path::PathBuf;

use shofer_core::egress::{AllowList, Rule};
use shofer_core::limits::{self, Setting};
use shofer_core::policy::NetPolicy;

use crate::error::SetupError;

/// Which backend to use (`--backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// Pick the strongest that enforces the whole policy (ARCHITECTURE §2.4).
    Auto,
    /// Force one backend.
    Forced(shofer_core::policy::Backend),
}

/// A fully parsed `run` request.
#[derive(Debug)]
pub struct RunArgs {
    /// The worktree as given (canonicalised later).
    pub worktree: PathBuf,
    /// `argv` of the command (never empty; `argv[0]` is non-empty).
    pub command: Vec<OsString>,
    /// `--allow-write` paths, in order.
    pub allow_write: Vec<PathBuf>,
    /// `--allow-read` paths, in order: secret locations (`shofer_core::secretpaths`) the
    /// command may read after all (each unhides the default locations at or beneath it).
    pub allow_read: Vec<PathBuf>,
    /// `--hide` paths, in order: more secret locations.
    pub hide: Vec<PathBuf>,
    /// `--allow-unix` paths (sockets or directories), in order: reachable unix sockets besides
    /// the worktree's and the run's own.
    pub allow_unix: Vec<PathBuf>,
    /// `--no-unix-gate`: do not run the seccomp unix-socket gate (a degradation at every
    /// Landlock ABI, so it needs `--allow-degraded`).
    pub no_unix_gate: bool,
    /// `--backend`, default `auto`.
    pub backend: BackendChoice,
    /// `--max-abi`: cap on the Landlock ABI used.
    pub max_abi: Option<u32>,
    /// `--net`, default `allow`.
    pub net: NetPolicy,
    /// With `--net proxy`: the destinations the proxy opens (the default list unless
    /// `--no-default-domains`, then every `--allow-domain`).
    pub allow_domains: AllowList,
    /// `--allow-degraded`: accept a backend that cannot enforce every required protection.
    pub allow_degraded: bool,
    /// `--pass-fd`: descriptors above 2 to keep open across exec.
    pub pass_fds: Vec<i32>,
    /// `--keep-caps`: do not drop capabilities when run as root.
    pub keep_caps: bool,
    /// `--keep-env`: names (globs with `*`, compared exactly) of secret variables to pass to
    /// the command anyway; the others are withheld (`shofer_core::secretenv`).
    pub keep_env: Vec<OsString>,
    /// `--keep-descendants`: wait for descendants after the main process exits instead of
    /// killing them.
    pub keep_descendants: bool,
    /// `--no-package-caches`: no private views of the package managers' caches
    /// (`crate::caches`).
    pub no_package_caches: bool,
    /// `--report FD`: write the JSON report of this run to this descriptor.
    pub report_fd: Option<i32>,
    /// `--status-fd FD`: write the command's PID and exit status to this descriptor as JSON
    /// lines (see the `status` module).
    pub status_fd: Option<i32>,
    /// `--limit-procs`, `--limit-memory`, `--limit-cpu` ([`shofer_core::limits`]).
    pub limits: [Setting; 3],
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Invocation {
    /// Run a command in a sandbox.
    Run(Box<RunArgs>),
    /// `--probe [--json]`.
    Probe {
        /// Print JSON instead of text.
        json: bool,
        /// `--backend` given alongside: describe that backend.
        backend: BackendChoice,
        /// `--max-abi` given alongside.
        max_abi: Option<u32>,
        /// `--net` given alongside.
        net: NetPolicy,
        /// `--limit-procs`, `--limit-memory`, `--limit-cpu` given alongside.
        limits: [Setting; 3],
    },
    /// `--print-apparmor-profile`: the AppArmor profile that lets this binary create user
    /// namespaces (Ubuntu's `kernel.apparmor_restrict_unprivileged_userns`).
    PrintAppArmorProfile,
    /// `--help`.
    Help,
    /// `--version`.
    Version,
    /// `--repair WORKTREE`: finish the git control-file restores a killed run left, and move
    /// its new git objects into the repository.
    Repair(PathBuf),
}

/// The `--help` text.
pub const HELP: &str = "\
shofer-sandbox: run a command that may read everything but write only to its worktree

Usage:
  shofer-sandbox [OPTIONS] <WORKTREE> [--] <COMMAND> [ARGS...]
  shofer-sandbox [OPTIONS] <WORKTREE> -c <SHELL-STRING>
  shofer-sandbox --probe [--json] [--backend NAME]
  shofer-sandbox --repair <WORKTREE>
  shofer-sandbox --print-apparmor-profile

Writable: the worktree, /tmp and $TMPDIR, /dev/null, /dev/zero, /dev/full, terminals
(/dev/tty, /dev/pts/*, /dev/ptmx), /dev/shm, a linked worktree's git metadata, and every
--allow-write path. Everything else is read-only.

Secrets: the user's credential locations (~/.ssh, ~/.gnupg, ~/.aws, ~/.azure, gcloud's,
~/.kube, registry logins, ~/.netrc, git credential stores, token files of npm's peers,
password stores, keyrings, browser profiles, shell histories, agents' credential files;
every user's when run as root) that exist when the run starts cannot be read: opening one
fails with EACCES, and so does any entry the host makes beside one during the run; names stay
listable (Landlock read rights: every backend but bwrap, on kernels with Landlock).
--allow-read and --hide adjust the set.

Unix sockets: the command may connect to (or send to) a pathname unix socket only if a
process of this run created it, --allow-unix names it, or its listener bound it beneath the
worktree or an --allow-unix directory; anything else fails with EACCES (a seccomp gate in
the supervisor; a helper inside the command's confinement performs what it allows).

Options:
  -c <SHELL-STRING>        run /bin/sh -c <SHELL-STRING>
  --allow-write <PATH>     also make PATH writable (repeatable)
  --allow-read <PATH>      let the command read the secret location PATH after all, and
                           any default one beneath it, or just PATH inside one
                           (repeatable)
  --hide <PATH>            also hide PATH, a file or directory, like the secret
                           locations (repeatable)
  --allow-unix <PATH>      also allow connecting to the unix socket PATH, or to any
                           socket bound beneath the directory PATH (repeatable)
  --backend <NAME>         auto (default), landlock, userns, bwrap or layered
  --max-abi <N>            use at most Landlock ABI N (to test older kernels)
  --net <allow|deny|proxy> allow (default): the host's network; deny: none (a network
                           namespace of loopback only; Landlock alone: TCP refused from
                           ABI 4, other network sockets by seccomp); proxy: only
                           through the supervisor's HTTP/SOCKS5 proxy, to the
                           allow-list (Landlock alone: through the seccomp gate;
                           http_proxy and the like are set for the command)
  --allow-domain <NAME[:PORT[,PORT...]]>
                           with --net proxy: also allow NAME (*.SUFFIX: every name
                           below it; an IP address: that address, the only way to
                           reach a loopback, private or link-local one) on PORT
                           (default 443 and 80) (repeatable)
  --no-default-domains     with --net proxy: start from an empty allow-list instead of
                           the public package registries and source hosts
  --allow-degraded         accept a backend that cannot enforce the whole policy
  --no-unix-gate           do not mediate unix-socket connects with the seccomp gate
                           (a degradation: needs --allow-degraded)
  --pass-fd <N>            keep descriptor N (> 2) open in the command (repeatable)
  --keep-caps              as root, keep capabilities (they are dropped by default)
  --keep-env <NAME>        pass the secret variable NAME to the command anyway; a glob
                           with * keeps every secret it matches (repeatable). Secret
                           variables (*TOKEN*, *SECRET*, *PASSWORD*, *API_KEY*, cloud
                           keys, ...) are withheld by default and named on stderr
  --keep-descendants       after the command exits, wait for its descendants
                           instead of killing them
  --no-package-caches      do not give package managers (npm, pip and pip --user,
                           cargo, go, uv, pnpm) a private, persistent copy-on-write view
                           of their caches (by default an overlay over the host's cache
                           on layered/userns; elsewhere, and for a cache absent on the
                           host, the tool's variable, e.g. npm_config_cache, points at a
                           private directory; see the report's package_caches)
  --limit-procs <N|off>    at most N processes and threads at once (default 4096)
  --limit-memory <SIZE|off>
                           at most SIZE of memory (512M, 8G; default three quarters
                           of the machine's); a process past it is killed (137)
  --limit-cpu <PCT|off>    at most PCT percent of one CPU (150: one and a half);
                           default off. Limits hold through a cgroup of the run's
                           (root, or a delegated cgroup v2); the process limit also
                           through RLIMIT_NPROC in the run's user namespace
  --report <FD>            write a JSON report of what is enforced to descriptor FD
  --status-fd <FD>         write JSON lines to descriptor FD: {\"child-pid\": N} when the
                           command has started, {\"exit-status\": N} as soon as it exits
                           (before its descendants with --keep-descendants)
  --probe                  print what this kernel can enforce (--json for JSON),
                           with the backend auto picks or the one --backend names
  --print-apparmor-profile print an AppArmor profile that lets this binary create
                           user namespaces (Ubuntu 23.10+ restricts them)
  --repair <WORKTREE>      finish restoring git control files that a killed run left
                           changed, move its new git objects into the repository
                           (the next run on the worktree does it too)
  -h, --help               print this help
  -V, --version            print the version

Exit status: 125 the sandbox could not be set up, or a git control file the command changed
could not be restored, or its new git objects could not all be moved into the repository;
126 the command is not executable; 127 the command was not found; otherwise the command's
status (signal N: 128+N). --repair: 0 nothing is left to do, 1 something still is.
";

fn usage(msg: impl Into<String>) -> SetupError {
    SetupError::Usage(format!("{} (see 'shofer-sandbox --help')", msg.into()))
}

fn parse_number<T: std::str::FromStr>(
    flag: &str,
    value: OsString,
    what: &str,
) -> Result<T, SetupError> {
    value.to_str().and_then(|s| s.parse().ok()).ok_or_else(|| {
        usage(format!(
            "{flag} {}: expected {what}",
            value.to_string_lossy()
        ))
    })
}

/// Parses `args` (without `argv[0]`).
///
/// # Errors
/// [`SetupError::Usage`] naming the offending argument and what would be valid.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, SetupError> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let mut worktree: Option<PathBuf> = None;
    let mut command: Vec<OsString> = Vec::new();
    let mut shell: Option<OsString> = None;
    let mut allow_write = Vec::new();
    let mut allow_unix = Vec::new();
    let mut allow_read = Vec::new();
    let mut hide = Vec::new();
    let mut no_unix_gate = false;
    let mut backend = BackendChoice::Auto;
    let mut max_abi = None;
    let mut net = NetPolicy::Allow;
    let mut allow_domain = Vec::new();
    let mut no_default_domains = false;
    let mut allow_degraded = false;
    let mut pass_fds = Vec::new();
    let mut keep_caps = false;
    let mut keep_env = Vec::new();
    let mut keep_descendants = false;
    let mut no_package_caches = false;
    let mut limits = [Setting::Default; 3];
    let mut report_fd = None;
    let mut status_fd = None;
    let mut probe = false;
    let mut json = false;
    let mut apparmor = false;

    let err = |e: lexopt::Error| usage(e.to_string());
    while let Some(arg) = parser.next().map_err(err)? {
        match arg {
            Short('h') | Long("help") => return Ok(Invocation::Help),
            Short('V') | Long("version") => return Ok(Invocation::Version),
            Long("probe") => probe = true,
            Long("repair") => {
                return Ok(Invocation::Repair(PathBuf::from(
                    parser.value().map_err(err)?,
                )))
            }
            Long("print-apparmor-profile") => apparmor = true,
            Long("json") => json = true,
            Short('c') => {
                if worktree.is_none() {
                    return Err(usage("-c must follow the worktree"));
                }
                shell = Some(parser.value().map_err(err)?);
                command.extend(parser.raw_args().map_err(err)?);
                break;
            }
            Long("allow-write") => allow_write.push(PathBuf::from(parser.value().map_err(err)?)),
            Long("allow-unix") => allow_unix.push(PathBuf::from(parser.value().map_err(err)?)),
            Long("allow-read") => allow_read.push(PathBuf::from(parser.value().map_err(err)?)),
            Long("hide") => hide.push(PathBuf::from(parser.value().map_err(err)?)),
            Long("no-unix-gate") => no_unix_gate = true,
            Long("backend") => {
                let v = parser.value().map_err(err)?;
                let choice = shofer_core::policy::Backend::parse_choice(&v.to_string_lossy())
                    .map_err(|e| usage(format!("--backend {e}")))?;
                backend = choice.map_or(BackendChoice::Auto, BackendChoice::Forced);
            }
            Long("max-abi") => {
                max_abi = Some(parse_number(
                    "--max-abi",
                    parser.value().map_err(err)?,
                    "a Landlock ABI number (0 or more)",
                )?)
            }
            Long("net") => {
                let v = parser.value().map_err(err)?;
                net = NetPolicy::parse(&v.to_string_lossy())
                    .map_err(|e| usage(format!("--net {e}")))?;
            }
            Long("allow-domain") => {
                let v = parser.value().map_err(err)?;
                allow_domain.push(Rule::parse(&v.to_string_lossy()).map_err(usage)?);
            }
            Long("no-default-domains") => no_default_domains = true,
            Long("allow-degraded") => allow_degraded = true,
            Long("pass-fd") => {
                let fd: i32 = parse_number(
                    "--pass-fd",
                    parser.value().map_err(err)?,
                    "a file descriptor number above 2",
                )?;
                if fd <= 2 {
                    return Err(usage(format!(
                        "--pass-fd {fd}: expected a file descriptor number above 2 (0-2 are always kept)"
                    )));
                }
                pass_fds.push(fd);
            }
            Long("keep-caps") => keep_caps = true,
            Long("keep-env") => {
                let v = parser.value().map_err(err)?;
                if v.is_empty() || v.as_encoded_bytes().contains(&b'=') {
                    return Err(usage(format!(
                        "--keep-env {}: expected a variable name or a glob with * (no '=')",
                        v.to_string_lossy()
                    )));
                }
                keep_env.push(v);
            }
            Long("keep-descendants") => keep_descendants = true,
            Long("no-package-caches") => no_package_caches = true,
            Long(flag @ ("limit-procs" | "limit-memory" | "limit-cpu")) => {
                let flag = flag.to_string();
                type Parse = fn(&str) -> Result<u64, String>;
                let (at, parse): (usize, Parse) = match flag.as_str() {
                    "limit-procs" => (0, limits::parse_count),
                    "limit-memory" => (1, limits::parse_size),
                    _ => (2, limits::parse_percent),
                };
                let v = parser.value().map_err(err)?;
                limits[at] = limits::setting(&v.to_string_lossy(), parse)
                    .map_err(|e| usage(format!("--{flag} {e}")))?;
            }
            Long("report") => {
                report_fd = Some(parse_number(
                    "--report",
                    parser.value().map_err(err)?,
                    "a file descriptor number",
                )?)
            }
            Long("status-fd") => {
                status_fd = Some(parse_number(
                    "--status-fd",
                    parser.value().map_err(err)?,
                    "a file descriptor number",
                )?)
            }
            Value(v) if worktree.is_none() => worktree = Some(PathBuf::from(v)),
            Value(v) => {
                command.push(v);
                command.extend(parser.raw_args().map_err(err)?);
                break;
            }
            _ => return Err(err(arg.unexpected())),
        }
        // `--` ends option parsing: lexopt yields the rest as values; take them verbatim.
        if worktree.is_some() {
            if let Some(rest) = take_after_double_dash(&mut parser) {
                command.extend(rest);
                break;
            }
        }
    }

    if apparmor {
        if probe || json || worktree.is_some() {
            return Err(usage(
                "--print-apparmor-profile takes no other option, worktree or command",
            ));
        }
        return Ok(Invocation::PrintAppArmorProfile);
    }
    if probe {
        if worktree.is_some() {
            return Err(usage("--probe takes no worktree or command"));
        }
        return Ok(Invocation::Probe {
            json,
            backend,
            max_abi,
            net,
            limits,
        });
    }
    if json {
        return Err(usage("--json only goes with --probe"));
    }
    if net != NetPolicy::Proxy && (!allow_domain.is_empty() || no_default_domains) {
        let flag = if no_default_domains {
            "--no-default-domains"
        } else {
            "--allow-domain"
        };
        return Err(usage(format!(
            "{flag} needs --net proxy (--net {} has no allow-list)",
            net.as_str()
        )));
    }
    let worktree = worktree.ok_or_else(|| usage("missing <WORKTREE> and <COMMAND>"))?;
    if worktree.as_os_str().is_empty() {
        return Err(usage(
            "the worktree is an empty string; expected a directory",
        ));
    }
    let command = match shell {
        Some(s) => {
            let mut argv = vec![OsString::from("/bin/sh"), OsString::from("-c"), s];
            argv.extend(command);
            argv
        }
        None => command,
    };
    match command.first() {
        None => return Err(usage("missing <COMMAND> after the worktree")),
        Some(c) if c.is_empty() => {
            return Err(usage(
                "the command is an empty string; expected a program name",
            ))
        }
        Some(_) => {}
    }
    Ok(Invocation::Run(Box::new(RunArgs {
        worktree,
        command,
        allow_write,
        allow_read,
        hide,
        allow_unix,
        no_unix_gate,
        backend,
        max_abi,
        net,
        allow_domains: AllowList::new(no_default_domains, allow_domain),
        allow_degraded,
        pass_fds,
        keep_caps,
        keep_env,
        keep_descendants,
        no_package_caches,
        report_fd,
        status_fd,
        limits,
    })))
}

/// If the next raw argument is `--`, consumes it and returns everything after it.
fn take_after_double_dash(parser: &mut lexopt::Parser) -> Option<Vec<OsString>> {
    let mut raw = parser.try_raw_args()?;
    if raw.peek() == Some("--".as_ref()) {
        raw.next();
        return Some(raw.collect());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> RunArgs {
        match parse(args.iter().map(OsString::from)).unwrap() {
            Invocation::Run(r) => *r,
            other => panic!("expected run, got {other:?}"),
        }
    }

    fn fails(args: &[&str]) -> String {
        parse(args.iter().map(OsString::from))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_original_positional_form_works_with_and_without_double_dash() {
        assert_eq!(run(&["/wt", "--", "ls", "-l"]).command, ["ls", "-l"]);
        assert_eq!(
            run(&["/wt", "ls", "-l", "--", "x"]).command,
            ["ls", "-l", "--", "x"]
        );
        assert_eq!(
            run(&["/wt", "--", "--weird", "-x"]).command,
            ["--weird", "-x"]
        );
    }

    #[test]
    fn dash_c_runs_the_shell() {
        let r = run(&["--net", "deny", "/wt", "-c", "echo hi", "zero"]);
        assert_eq!(r.command, ["/bin/sh", "-c", "echo hi", "zero"]);
        assert_eq!(r.net, NetPolicy::Deny);
    }

    #[test]
    fn the_proxy_takes_an_allow_list_and_only_it_does() {
        let r = run(&[
            "--net",
            "proxy",
            "--allow-domain",
            "a.test:8080",
            "/wt",
            "true",
        ]);
        assert_eq!(r.net, NetPolicy::Proxy);
        assert!(r.allow_domains.permits_name("a.test", 8080));
        assert!(r.allow_domains.permits_name("registry.npmjs.org", 443));
        let r = run(&["--net", "proxy", "--no-default-domains", "/wt", "true"]);
        assert!(r.allow_domains.rules.is_empty());
        assert!(fails(&["--allow-domain", "a.test", "/wt", "true"]).contains("needs --net proxy"));
        assert!(
            fails(&["--net", "proxy", "--allow-domain", "a:b", "/wt", "true"])
                .contains("--allow-domain a:b: a port is a number")
        );
    }

    #[test]
    fn options_may_follow_the_worktree() {
        let r = run(&[
            "/wt",
            "--allow-write",
            "/a b",
            "--allow-unix",
            "/run/s",
            "--allow-unix",
            "/run/d",
            "--max-abi",
            "2",
            "--",
            "true",
        ]);
        assert_eq!(r.allow_write, [PathBuf::from("/a b")]);
        assert_eq!(
            r.allow_unix,
            [PathBuf::from("/run/s"), PathBuf::from("/run/d")]
        );
        assert_eq!(r.max_abi, Some(2));
    }

    #[test]
    fn bad_input_names_the_argument_and_what_is_valid() {
        assert!(fails(&["/wt"]).contains("missing <COMMAND>"));
        assert!(fails(&["/wt", "--"]).contains("missing <COMMAND>"));
        assert!(fails(&[]).contains("missing <WORKTREE>"));
        assert!(fails(&["/wt", "--", ""]).contains("empty string"));
        assert!(fails(&["--backend", "docker", "/wt", "ls"]).contains("expected auto, landlock"));
        assert!(fails(&["--max-abi", "x", "/wt", "ls"]).contains("expected a Landlock ABI"));
        assert!(fails(&["--pass-fd", "1", "/wt", "ls"]).contains("above 2"));
        assert!(fails(&["--net", "maybe", "/wt", "ls"]).contains("allow, deny or proxy"));
        assert!(fails(&["--bogus", "/wt", "ls"]).contains("--bogus"));
        assert!(fails(&["", "ls"]).contains("empty string"));
    }

    #[test]
    fn print_apparmor_profile_stands_alone() {
        assert!(matches!(
            parse(["--print-apparmor-profile"].map(OsString::from)).unwrap(),
            Invocation::PrintAppArmorProfile
        ));
        assert!(fails(&["--print-apparmor-profile", "/wt", "ls"]).contains("takes no other"));
    }

    #[test]
    fn allow_read_and_hide_repeat() {
        let r = run(&[
            "--allow-read",
            "/h/.ssh",
            "/wt",
            "--hide",
            "/h/.npmrc",
            "--allow-read",
            "/h/.aws",
            "true",
        ]);
        assert_eq!(
            r.allow_read,
            [PathBuf::from("/h/.ssh"), PathBuf::from("/h/.aws")]
        );
        assert_eq!(r.hide, [PathBuf::from("/h/.npmrc")]);
        assert!(run(&["/wt", "true"]).allow_read.is_empty());
    }

    #[test]
    fn keep_env_repeats_and_takes_names_or_globs() {
        let r = run(&[
            "--keep-env",
            "GITHUB_TOKEN",
            "/wt",
            "--keep-env",
            "NPM_*",
            "true",
        ]);
        assert_eq!(r.keep_env, ["GITHUB_TOKEN", "NPM_*"]);
        assert!(run(&["/wt", "true"]).keep_env.is_empty());
        assert!(fails(&["--keep-env", "", "/wt", "true"]).contains("expected a variable name"));
        assert!(fails(&["--keep-env", "A=b", "/wt", "true"]).contains("no '='"));
    }

    #[test]
    fn status_fd_takes_a_number() {
        assert_eq!(run(&["--status-fd", "7", "/wt", "true"]).status_fd, Some(7));
        assert!(fails(&["--status-fd", "x", "/wt", "true"]).contains("--status-fd x"));
    }

    #[test]
    fn probe_takes_json() {
        assert!(matches!(
            parse(["--probe", "--json"].map(OsString::from)).unwrap(),
            Invocation::Probe { json: true, .. }
        ));
    }
}
