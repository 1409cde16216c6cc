//! `shofer completions` and `shofer man` (the release's completions and man pages) cannot
//! drift from the programs: every option `shofer-sandbox`'s parser accepts (read from
//! `shofer-sandbox/src/cli.rs`) and every subcommand `shofer --help` lists is in them, and
//! groff renders both pages without a warning. `scripts/test-install` checks the installed
//! files in the shells and `man`.

mod common;
use common::sandbox_binary;

use std::path::Path;
use std::process::Command;

/// `shofer ARGS` with this workspace's `shofer-sandbox`: its stdout (it must succeed).
fn shofer(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_shofer"))
        .args(args)
        .env("SHOFER_SANDBOX", sandbox_binary())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "shofer {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The long options (`Long("name")`, `Long(flag @ ("a" | "b"))`) and short ones
/// (`Short('c')`) that `shofer-sandbox`'s parser matches.
fn sandbox_parser_options() -> (Vec<String>, Vec<char>) {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shofer-sandbox/src/cli.rs"),
    )
    .unwrap();
    let (mut long, mut short) = (Vec::new(), Vec::new());
    for line in src.lines() {
        let Some(pattern) = line
            .split_once("=>")
            .map(|(p, _)| p)
            .filter(|p| p.contains("Long(") || p.contains("Short("))
        else {
            continue;
        };
        for part in pattern.split("Long(").skip(1) {
            long.extend(part.split('"').skip(1).step_by(2).map(str::to_string));
        }
        for part in pattern.split("Short('").skip(1) {
            short.extend(part.chars().next());
        }
    }
    assert!(
        long.len() > 20,
        "too few options read from cli.rs: {long:?}"
    );
    (long, short)
}

#[test]
fn every_option_shofer_sandbox_parses_is_in_its_completions_and_man_page() {
    let (long, short) = sandbox_parser_options();
    let fish = shofer(&["completions", "fish", "shofer-sandbox"]);
    let bash = shofer(&["completions", "bash", "shofer-sandbox"]);
    let zsh = shofer(&["completions", "zsh", "shofer-sandbox"]);
    let man = shofer(&["man", "shofer-sandbox"]);
    let bash_opts: Vec<&str> = bash
        .lines()
        .filter_map(|l| l.trim().strip_prefix("opts=\""))
        .flat_map(|l| l.trim_end_matches('"').split_whitespace())
        .collect();
    for l in &long {
        assert!(
            fish.lines()
                .any(|c| c.contains(&format!(" -l {l} ")) || c.ends_with(&format!(" -l {l}"))),
            "--{l} is not in the fish completions:\n{fish}"
        );
        assert!(
            bash_opts.contains(&format!("--{l}").as_str()),
            "--{l} is not in the bash completions"
        );
        // `'--probe[help]'`, `'*--allow-write=[help]:PATH:_files'`.
        assert!(
            zsh.lines().any(|z| z
                .trim_start()
                .trim_start_matches(['\'', '*'])
                .strip_prefix(&format!("--{l}"))
                .is_some_and(|rest| rest.starts_with(['[', '=']))),
            "--{l} is not in the zsh completions"
        );
        // roff writes every dash as `\-`.
        let roff = format!("--{l}").replace('-', "\\-");
        assert!(man.contains(&roff), "--{l} is not in shofer-sandbox.1");
    }
    for s in &short {
        assert!(
            bash_opts.contains(&format!("-{s}").as_str()),
            "-{s} is not in the bash completions"
        );
        assert!(
            fish.contains(&format!(" -s {s} ")),
            "-{s} is not in the fish completions"
        );
        assert!(
            man.contains(&format!("\\-{s}")),
            "-{s} is not in shofer-sandbox.1"
        );
    }
}

/// The subcommands `shofer --help` lists (its `Commands:` block), less `help`.
fn shofer_subcommands() -> Vec<String> {
    let help = shofer(&["--help"]);
    let block = help.split("Commands:").nth(1).expect("a Commands: block");
    let names: Vec<String> = block
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    assert!(names.iter().any(|n| n == "run"), "{help}");
    names
}

#[test]
fn every_subcommand_of_shofer_is_in_its_completions_and_man_page() {
    let man = shofer(&["man"]);
    let fish = shofer(&["completions", "fish"]);
    let bash = shofer(&["completions", "bash"]);
    for sub in shofer_subcommands() {
        assert!(
            man.contains(&format!(".SH \"SHOFER {}\"", sub.to_uppercase())),
            "no section for {sub} in shofer.1"
        );
        assert!(
            fish.contains(&format!("-a \"{sub}\"")),
            "{sub} not in the fish completions"
        );
        assert!(
            bash.contains(&format!("shofer,{sub})")),
            "{sub} not in the bash completions"
        );
    }
    // An option of a subcommand, with its value name.
    assert!(man.contains("\\-\\-worktree"), "--worktree not in shofer.1");
}

#[test]
fn groff_renders_both_pages_without_a_warning() {
    if Command::new("groff").arg("--version").output().is_err() {
        return common::skip("groff_renders_both_pages_without_a_warning", "no groff");
    }
    let dir = tempfile::tempdir().unwrap();
    for program in ["shofer", "shofer-sandbox"] {
        let page = dir.path().join(format!("{program}.1"));
        std::fs::write(&page, shofer(&["man", program])).unwrap();
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&page)
            .output()
            .unwrap();
        assert!(out.status.success(), "groff failed on {program}.1");
        assert!(
            out.stderr.is_empty(),
            "groff warns about {program}.1: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_missing_shofer_sandbox_is_an_error_naming_where_it_was_looked_for() {
    let out = Command::new(env!("CARGO_BIN_EXE_shofer"))
        .args(["man", "shofer-sandbox"])
        .env("SHOFER_SANDBOX", "/nonexistent/shofer-sandbox")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/shofer-sandbox"), "{err}");
}
