//! `shofer-containment`: the containment harness for `shofer-sandbox` (ARCHITECTURE §4).
//!
//! ```text
//! shofer-containment <path-to-shofer-sandbox> [--json] [--backends LIST] [--abis LIST]
//!                    [--users root,unpriv] [--only SUBSTRING[,SUBSTRING...]] [--unpriv-uid N]
//!                    [--scratch DIR] [--keep]
//! shofer-containment --list
//! ```
//!
//! Runs the attack catalogue ([`catalogue`]) against the given sandbox binary in every cell
//! (backend × Landlock ABI via `--max-abi` × user) and prints one row per case and cell:
//! `pass`, `FAIL` (what happened), `gap` (a documented kernel limit, with the reason the
//! sandbox's own report gives, allowed by the list in `tests/README.md`) or `skip` (a
//! prerequisite such as git is missing, or the backend is not available here).
//!
//! Internal modes (the binary re-invokes itself, so attacks need no external tools):
//! `attack <name> <args>` runs one attack inside the sandbox; `sleeper <marker> <secs>` is a
//! victim or a would-be survivor; `run-wrapped` / `nouserns-exec` are intermediaries for the
//! parent-death and user-namespace cases. Named `bwrap`, the binary is a fake old bubblewrap;
//! named `null-sandbox`, it is a "sandbox" that confines nothing (for the self-test showing the
//! harness does catch escapes).
//!
//! Exit status: 0 when no row is `FAIL`; 1 when any row is `FAIL`; 2 on a usage error or when
//! the harness cannot set up (scratch tree, binaries).

mod attacks;
mod catalogue;
mod gaps;
mod runner;
mod sys;

use runner::{Cell, Opts, Row, User, World};
use shofer_core::policy::Protection;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let argv0 = args
        .first()
        .map(|a| {
            Path::new(a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    if argv0 == "bwrap" {
        return ExitCode::from(fake_bwrap(&args[1..]));
    }
    if argv0 == "null-sandbox" {
        return ExitCode::from(null_sandbox(&args[1..]));
    }
    match args.get(1).map(String::as_str) {
        Some("attack") => {
            let name = args.get(2).cloned().unwrap_or_default();
            return ExitCode::from(attacks::run(&name, &args[3.min(args.len())..]) as u8);
        }
        Some("sleeper") => {
            return ExitCode::from(attacks::sleeper(&args[2.min(args.len())..]) as u8)
        }
        Some("run-wrapped") => return ExitCode::from(run_wrapped(&args[2..])),
        Some("nouserns-exec") => return ExitCode::from(nouserns_exec(&args[2..])),
        Some("--list") => {
            print!("{}", catalogue::describe_all());
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let opts = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("shofer-containment: {e}");
            eprintln!("usage: shofer-containment <path-to-shofer-sandbox> [--json] [--backends LIST] [--abis LIST] [--users root,unpriv] [--only SUBSTRING[,SUBSTRING...]] [--unpriv-uid N] [--scratch DIR] [--keep]");
            return ExitCode::from(2);
        }
    };
    match suite(opts) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("shofer-containment: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse_opts() -> Result<Opts, String> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_env();
    let mut sandbox = None;
    let mut o = Opts {
        sandbox: PathBuf::new(),
        json: false,
        backends: ["landlock", "userns", "bwrap", "layered"]
            .map(String::from)
            .to_vec(),
        abis: None,
        users: vec!["root".into(), "unpriv".into()],
        only: None,
        unpriv_uid: 65534,
        scratch_parent: PathBuf::from("/var/tmp"),
        keep: false,
    };
    let list = |v: std::ffi::OsString| -> Vec<String> {
        v.to_string_lossy()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Long("json") => o.json = true,
            Long("keep") => o.keep = true,
            Long("backends") => {
                o.backends = list(p.value().map_err(|e| e.to_string())?);
                for b in &o.backends {
                    if !["landlock", "userns", "bwrap", "layered", "auto"].contains(&b.as_str()) {
                        return Err(format!("--backends: unknown backend {b:?} (valid: landlock, userns, bwrap, layered, auto)"));
                    }
                }
            }
            Long("abis") => {
                let mut v = Vec::new();
                for a in list(p.value().map_err(|e| e.to_string())?) {
                    v.push(
                        a.parse::<u32>()
                            .ok()
                            .filter(|n| (1..=64).contains(n))
                            .ok_or_else(|| {
                                format!("--abis: {a:?} is not an ABI number (1, 2, ...)")
                            })?,
                    );
                }
                o.abis = Some(v);
            }
            Long("users") => {
                o.users = list(p.value().map_err(|e| e.to_string())?);
                for u in &o.users {
                    if u != "root" && u != "unpriv" {
                        return Err(format!("--users: unknown user {u:?} (valid: root, unpriv)"));
                    }
                }
            }
            Long("only") => {
                o.only = Some(
                    p.value()
                        .map_err(|e| e.to_string())?
                        .to_string_lossy()
                        .into_owned(),
                )
            }
            Long("unpriv-uid") => {
                let v = p
                    .value()
                    .map_err(|e| e.to_string())?
                    .to_string_lossy()
                    .into_owned();
                o.unpriv_uid =
                    v.parse().ok().filter(|n| *n != 0).ok_or_else(|| {
                        format!("--unpriv-uid: {v:?} is not a non-zero numeric uid")
                    })?;
            }
            Long("scratch") => {
                o.scratch_parent = PathBuf::from(p.value().map_err(|e| e.to_string())?)
            }
            Value(v) if sandbox.is_none() => sandbox = Some(PathBuf::from(v)),
            other => return Err(other.unexpected().to_string()),
        }
    }
    o.sandbox = sandbox.ok_or("missing the path of the shofer-sandbox binary")?;
    if !o.sandbox.is_file() {
        return Err(format!(
            "{}: not a file (give the path of a shofer-sandbox binary)",
            o.sandbox.display()
        ));
    }
    Ok(o)
}

fn print_row(r: &Row) {
    println!(
        "{:5} {:32} {:8} abi={:4} {:6} {}",
        r.result, r.case, r.backend, r.abi, r.user, r.detail
    );
}

fn suite(opts: Opts) -> Result<bool, String> {
    let json = opts.json;
    let w = World::new(opts)?;
    let (uid, gid) = sys::ids();
    let users: Vec<User> = if uid == 0 {
        w.opts
            .users
            .iter()
            .map(|u| {
                if u == "root" {
                    User::Root
                } else {
                    User::Unpriv(w.opts.unpriv_uid)
                }
            })
            .collect()
    } else {
        if !json {
            println!("# not root: running every cell as the current uid {uid} (no user switching)");
        }
        vec![User::Current(uid, gid)]
    };
    let abis: Vec<Option<u32>> = match &w.opts.abis {
        Some(v) => v.iter().map(|a| Some(*a)).collect(),
        None if w.host_abi == 0 => vec![None],
        None => (1..=w.host_abi).map(Some).collect(),
    };
    if !json {
        println!(
            "# shofer-containment: sandbox {} | kernel {} | Landlock ABI {} | auto backend {} | git {} | python3 {} | scratch {}",
            w.opts.sandbox.display(),
            std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
            w.host_abi,
            w.probe.as_ref().map(|p| p["backend"].to_string()).unwrap_or_else(|| "(no --probe JSON)".into()),
            if w.git.is_some() { "yes" } else { "no" },
            if w.python.is_some() { "yes" } else { "no" },
            w.scratch.display()
        );
    }
    let cases = catalogue::all();
    let wanted = |name: &str| {
        w.opts
            .only
            .as_ref()
            .is_none_or(|o| o.split(',').any(|part| name.contains(part)))
    };
    let mut rows: Vec<Row> = Vec::new();
    let emit = |r: Row, rows: &mut Vec<Row>| {
        if !json {
            print_row(&r);
        }
        rows.push(r);
    };
    // Machine-level cases, once.
    let global_user = users.first().copied().unwrap_or(User::Root);
    let global = Cell {
        backend: "auto".into(),
        abi: None,
        user: if uid == 0 { User::Root } else { global_user },
        degraded: false,
    };
    for case in cases
        .iter()
        .filter(|c| runner::in_scope(c, true) && wanted(c.name))
    {
        let r = runner::run_case(&w, case, &global);
        emit(r, &mut rows);
    }
    for backend in &w.opts.backends {
        for abi in &abis {
            for user in &users {
                let cell_cases: Vec<&catalogue::Case> = cases
                    .iter()
                    .filter(|c| runner::in_scope(c, false) && wanted(c.name))
                    .collect();
                if cell_cases.is_empty()
                    && !wanted("no-silent-downgrade")
                    && !wanted("report-consistent")
                {
                    continue;
                }
                let mut cell = Cell {
                    backend: backend.clone(),
                    abi: *abi,
                    user: *user,
                    degraded: false,
                };
                let (pre, go) = runner::preflight(&w, &mut cell);
                for r in pre {
                    if wanted(&r.case) || r.case == "(cell)" {
                        emit(r, &mut rows);
                    }
                }
                if !go {
                    continue;
                }
                for case in cell_cases {
                    let r = runner::run_case(&w, case, &cell);
                    emit(r, &mut rows);
                }
            }
        }
    }
    let count = |k: &str| rows.iter().filter(|r| r.result == k).count();
    let (pass, fail, gap, skip) = (count("pass"), count("FAIL"), count("gap"), count("skip"));
    let ncases = {
        let mut n: Vec<&str> = rows
            .iter()
            .map(|r| r.case.as_str())
            .filter(|c| *c != "(cell)")
            .collect();
        n.sort();
        n.dedup();
        n.len()
    };
    let ncells = {
        let mut n: Vec<String> = rows
            .iter()
            .map(|r| format!("{}/{}/{}", r.backend, r.abi, r.user))
            .collect();
        n.sort();
        n.dedup();
        n.len()
    };
    if json {
        let v = serde_json::json!({
            "rows": rows.iter().map(|r| serde_json::json!({
                "case": r.case, "backend": r.backend, "abi": r.abi, "user": r.user,
                "result": r.result, "detail": r.detail,
            })).collect::<Vec<_>>(),
            "summary": {"pass": pass, "FAIL": fail, "gap": gap, "skip": skip, "cases": ncases, "cells": ncells, "rows": rows.len()},
        });
        println!("{v}");
    } else {
        println!("# summary: {} rows ({ncases} cases x {ncells} cells): {pass} pass, {fail} FAIL, {gap} gap, {skip} skip", rows.len());
    }
    w.cleanup();
    Ok(fail == 0)
}

/// `run-wrapped <prog> <args...>`: runs the program as a child and waits (the parent-death
/// case SIGKILLs this process).
fn run_wrapped(args: &[String]) -> u8 {
    let Some(prog) = args.first() else { return 2 };
    match std::process::Command::new(prog).args(&args[1..]).status() {
        Ok(s) => s.code().unwrap_or(1) as u8,
        Err(e) => {
            eprintln!("harness-wrap: {prog}: {e}");
            125
        }
    }
}

/// `nouserns-exec <prog> <args...>`: enters a new user namespace (root mapped to root), sets
/// `user.max_user_namespaces=0` *inside it only*, then execs the program. Field case 6.
fn nouserns_exec(args: &[String]) -> u8 {
    let Some(prog) = args.first() else { return 2 };
    // Safety: plain flag argument.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
        eprintln!(
            "harness-nouserns: unshare(CLONE_NEWUSER) -> {}",
            sys::Errno::last()
        );
        return 125;
    }
    let steps = [
        ("/proc/self/setgroups", "deny"),
        ("/proc/self/uid_map", "0 0 1"),
        ("/proc/self/gid_map", "0 0 1"),
        ("/proc/sys/user/max_user_namespaces", "0"),
    ];
    for (p, v) in steps {
        if let Err(e) = std::fs::write(p, v) {
            eprintln!("harness-nouserns: write {v:?} to {p}: {e}");
            return 125;
        }
    }
    let e = sys::execv(Path::new(prog), args);
    eprintln!("harness-nouserns: exec {prog}: {e}");
    127
}

/// A fake, old bubblewrap (0.3.0): answers `--version`, logs any other call next to itself
/// and fails, so a sandbox that runs it anyway is caught.
fn fake_bwrap(args: &[String]) -> u8 {
    if args.iter().any(|a| a == "--version") {
        println!("bubblewrap 0.3.0");
        return 0;
    }
    if args.iter().any(|a| a == "--help") {
        println!("usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]\n    --bind SRC DEST\n    --ro-bind SRC DEST\n    --dev DEST\n    --proc DEST");
        return 0;
    }
    if let Ok(me) = std::fs::read_link("/proc/self/exe") {
        let log = me.with_extension("log");
        let mut prev = std::fs::read_to_string(&log).unwrap_or_default();
        prev.push_str(&args.join(" "));
        prev.push('\n');
        let _ = std::fs::write(&log, prev);
    }
    eprintln!("bwrap: Unknown option");
    1
}

/// A "sandbox" that confines nothing but speaks the CLI: for the self-test that shows the
/// harness catches escapes. Its report claims everything is enforced.
fn null_sandbox(args: &[String]) -> u8 {
    let mut i = 0;
    let mut report_fd: Option<i32> = None;
    let mut abi = shofer_sys::landlock::abi().unwrap_or(0);
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "--probe" => {
                println!("{}", null_report("", abi));
                return 0;
            }
            "--json" | "--allow-degraded" | "--keep-caps" | "--keep-descendants" => i += 1,
            "--report" => {
                report_fd = args.get(i + 1).and_then(|v| v.parse().ok());
                i += 2;
            }
            "--max-abi" => {
                abi = args
                    .get(i + 1)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(abi)
                    .min(abi);
                i += 2;
            }
            "--allow-write" | "--allow-unix" | "--backend" | "--net" | "--pass-fd"
            | "--limit-procs" | "--limit-memory" | "--limit-cpu" => i += 2,
            _ => break,
        }
    }
    let Some(wt) = args.get(i) else { return 125 };
    let rest = &args[i + 1..];
    if let Some(fd) = report_fd {
        let _ = sys::write(fd, null_report(wt, abi).as_bytes());
        // Safety: closing the report descriptor we were handed.
        unsafe { libc::close(fd) };
    }
    let argv: Vec<String> = match rest.first().map(String::as_str) {
        Some("-c") => vec![
            "/bin/sh".into(),
            "-c".into(),
            rest.get(1).cloned().unwrap_or_default(),
        ],
        Some("--") => rest[1..].to_vec(),
        _ => rest.to_vec(),
    };
    let Some(prog) = argv.first() else { return 125 };
    let path = if prog.contains('/') {
        PathBuf::from(prog)
    } else {
        runner::which(prog).unwrap_or_else(|| PathBuf::from(prog))
    };
    let e = sys::execv(&path, &argv);
    eprintln!("null-sandbox: exec {prog}: {e}");
    127
}

fn null_report(wt: &str, abi: u32) -> String {
    let prot: serde_json::Map<String, serde_json::Value> = Protection::ALL
        .map(Protection::key)
        .iter()
        .map(|k| (k.to_string(), serde_json::json!({"enforced": true, "by": "nothing (null-sandbox)", "reason": null})))
        .collect();
    let wt = std::fs::canonicalize(wt)
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    serde_json::json!({
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "landlock": {"abi": shofer_sys::landlock::abi().unwrap_or(0), "status": "available", "errno": null},
        "user_namespaces": {"usable": true, "reason": null},
        "bwrap": {"path": null, "version": null, "usable": false, "reason": "null"},
        "backend": "landlock", "backend_reason": "null-sandbox",
        "effective_abi": abi, "degraded": [],
        "worktree": wt, "writable": [wt],
        "protections": prot,
        "limits": {
            "procs": {"value": "?", "status": "enforced", "how": "nothing (null-sandbox)"},
            "memory": {"value": "?", "status": "enforced", "how": "nothing (null-sandbox)"},
        },
    })
    .to_string()
}
