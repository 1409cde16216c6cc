//! Shell completions and man pages for `shofer` and `shofer-sandbox` (issue 35's install).
//!
//! - [`CompletionsArgs`], [`ManArgs`], [`Program`], [`Shell`]: `shofer completions <SHELL>
//!   [PROGRAM]` and `shofer man [PROGRAM]`, which `scripts/release` runs to fill the tarball
//!   (and a user of `cargo install` can run too).
//! - [`completions`], [`man`]: the texts, from a `clap::Command` with `clap_complete` and
//!   `clap_mangen`. For `shofer` that is `Cli::command()` itself, so every subcommand appears
//!   without a change here; the man page leaves hidden ones out.
//! - [`helptext`]: `shofer-sandbox` has no clap (its static binary stays small): its `--help`
//!   text, read from the binary the engine would run, is parsed into a `clap::Command` that
//!   only describes it. Made from the binary, the files cannot drift from its options.

pub mod helptext;

use std::path::Path;

use clap::Command;

/// Which program's completions or man page to print.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Program {
    /// `shofer` itself.
    #[default]
    Shofer,
    /// `shofer-sandbox` (the one `shofer run --worktree` would run: `SHOFER_SANDBOX`, beside
    /// `shofer`, else on `PATH`).
    ShoferSandbox,
}

/// `shofer completions <SHELL> [PROGRAM]`, e.g. `shofer completions bash shofer-sandbox`.
#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
    /// The program to complete.
    #[arg(value_enum, default_value_t)]
    pub program: Program,
}

/// `shofer man [PROGRAM]`.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// The program whose man page (roff, section 1) to print.
    #[arg(value_enum, default_value_t)]
    pub program: Program,
}

/// The shells completions are made for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    /// bash (with or without the bash-completion package).
    Bash,
    /// zsh (`_shofer` in a directory of `$fpath`).
    Zsh,
    /// fish (`shofer.fish` in a `vendor_completions.d` or `completions` directory).
    Fish,
}

/// The command a program's texts are made from: `shofer` is `shofer` (the caller passes
/// `Cli::command()`), `shofer-sandbox` is read from its `--help`.
///
/// # Errors
/// No `shofer-sandbox` to read, or its help text not in the expected shape.
fn command_for(program: Program, shofer: Command) -> Result<Command, String> {
    match program {
        Program::Shofer => Ok(shofer),
        Program::ShoferSandbox => {
            let sandbox = crate::Sandbox::locate(Path::new("."))
                .map_err(|e| e.to_string())?
                .binary;
            helptext::command_from_binary(&sandbox)
        }
    }
}

/// The completion script for `args.shell` and `args.program`.
///
/// # Errors
/// As [`man`] for `shofer-sandbox`.
pub fn completions(args: &CompletionsArgs, shofer: Command) -> Result<String, String> {
    let mut cmd = command_for(args.program, shofer)?;
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    match args.shell {
        Shell::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, name, &mut out)
        }
        Shell::Zsh => clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, name, &mut out),
        Shell::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, name, &mut out)
        }
    }
    String::from_utf8(out).map_err(|e| format!("the completion script is not UTF-8: {e}"))
}

/// The man page (roff) of `args.program`: for a program with subcommands one page, each
/// visible subcommand's synopsis, description and options in a section of its own.
///
/// # Errors
/// For `shofer-sandbox`: none found, or its `--help` not in the shape [`helptext`] reads.
pub fn man(args: &ManArgs, shofer: Command) -> Result<String, String> {
    let mut cmd = command_for(args.program, shofer)?.disable_help_subcommand(true);
    cmd.build();
    let io = |e: std::io::Error| format!("rendering the man page failed: {e}");
    let page = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    // `Man::render` less its list of subcommands, which names a page per subcommand
    // (`shofer-run(1)`): here they are sections of this page.
    page.render_title(&mut out).map_err(io)?;
    page.render_name_section(&mut out).map_err(io)?;
    page.render_synopsis_section(&mut out).map_err(io)?;
    page.render_description_section(&mut out).map_err(io)?;
    page.render_options_section(&mut out).map_err(io)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let title = sub.get_bin_name().unwrap_or(sub.get_name()).to_uppercase();
        let mut part = Vec::new();
        let sub_page = clap_mangen::Man::new(sub.clone());
        sub_page.render_synopsis_section(&mut part).map_err(io)?;
        sub_page.render_description_section(&mut part).map_err(io)?;
        if sub.get_arguments().any(|a| !a.is_hide_set()) {
            sub_page.render_options_section(&mut part).map_err(io)?;
        }
        let part = String::from_utf8_lossy(&part);
        out.extend_from_slice(format!(".SH \"{title}\"\n").as_bytes());
        // The subcommand's own sections become subsections of its one.
        for line in part.lines() {
            let line = match line.strip_prefix(".SH ") {
                Some(rest) => format!(".SS {}", title_case(rest)),
                None => line.to_string(),
            };
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    }
    if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
        let mut extra = Vec::new();
        page.render_extra_section(&mut extra).map_err(io)?;
        let extra = String::from_utf8_lossy(&extra);
        // clap_mangen heads it EXTRA; shofer-sandbox's closing text is its exit status.
        let heading = match cmd.get_after_long_help().or(cmd.get_after_help()) {
            Some(t) if t.to_string().starts_with("Exit status") => ".SH \"EXIT STATUS\"",
            _ => ".SH NOTES",
        };
        out.extend_from_slice(extra.replacen(".SH EXTRA", heading, 1).as_bytes());
    }
    page.render_version_section(&mut out).map_err(io)?;
    String::from_utf8(out).map_err(|e| format!("the man page is not UTF-8: {e}"))
}

/// `SYNOPSIS` as `Synopsis` (a subsection's heading).
fn title_case(heading: &str) -> String {
    let mut chars = heading.trim_matches('"').chars();
    match chars.next() {
        Some(c) => c
            .to_uppercase()
            .chain(chars.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}
