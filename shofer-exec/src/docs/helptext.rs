//! `shofer-sandbox --help` read into a `clap::Command`, for its completions and man page.
//!
//! - [`command_from_binary`]: runs `<binary> --help` and `--version`, then
//!   [`command_from_help`].
//! - [`command_from_help`]: the text's shape (`cli::HELP` in `shofer-sandbox/src/cli.rs`):
//!   `NAME: about`, a `Usage:` block of forms, paragraphs (the description), an `Options:`
//!   block of `  -s, --long <VALUE>  help` entries whose help continues on indented lines,
//!   then closing paragraphs (the exit status). Options named only in a usage form (`--json`)
//!   are described by that form.
//!
//! The command only describes: nothing parses arguments with it. A text in another shape is
//! an error naming what was missing, never a page without options.

use std::path::Path;
use std::process::Command as Process;

use clap::{Arg, ArgAction, Command, ValueHint};

/// The `Command` described by `binary --help` (and its `--version`).
///
/// # Errors
/// The binary could not be run, failed, or printed a help text [`command_from_help`] rejects.
pub fn command_from_binary(binary: &Path) -> Result<Command, String> {
    let run = |flag: &str| -> Result<String, String> {
        let out = Process::new(binary)
            .arg(flag)
            .output()
            .map_err(|e| format!("running {} {flag} failed: {e}", binary.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} {flag} failed ({}): {}",
                binary.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        String::from_utf8(out.stdout)
            .map_err(|_| format!("{} {flag} printed text that is not UTF-8", binary.display()))
    };
    let help = run("--help")?;
    let version = run("--version")?;
    let name = binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "shofer-sandbox".into());
    // `shofer-sandbox 0.1.0`: the last word.
    let version = version.split_whitespace().last().map(str::to_string);
    command_from_help(&name, &help, version.as_deref())
        .map_err(|e| format!("{} --help: {e}", binary.display()))
}

/// One `Options:` entry.
#[derive(Debug, Default, PartialEq)]
struct Entry {
    short: Option<char>,
    long: Option<String>,
    value: Option<String>,
    help: Vec<String>,
}

/// The `Command` a help text describes (see the module docs for the shape read).
///
/// # Errors
/// A text without its `NAME: about` line, its `Usage:` forms or its `Options:` entries, or an
/// entry that names no option.
pub fn command_from_help(name: &str, help: &str, version: Option<&str>) -> Result<Command, String> {
    let mut lines = help.lines().peekable();
    let about = lines
        .next()
        .and_then(|l| l.strip_prefix(name)?.strip_prefix(": "))
        .ok_or_else(|| format!("the first line is not \"{name}: <what it does>\""))?
        .to_string();
    while lines.next_if(|l| l.trim().is_empty()).is_some() {}
    if lines.next().map(str::trim) != Some("Usage:") {
        return Err("no \"Usage:\" line after the first".into());
    }
    let mut usage = Vec::new();
    while let Some(l) = lines.next_if(|l| !l.trim().is_empty()) {
        usage.push(l.trim().to_string());
    }
    if usage.is_empty() {
        return Err("no usage forms under \"Usage:\"".into());
    }
    let mut description = Vec::new();
    while let Some(l) = lines.next_if(|l| l.trim() != "Options:") {
        description.push(l);
    }
    if lines.next().is_none() {
        return Err("no \"Options:\" line".into());
    }
    let mut entries: Vec<Entry> = Vec::new();
    while let Some(l) = lines.next_if(|l| !l.trim().is_empty()) {
        let indent = l.len() - l.trim_start().len();
        let text = l.trim();
        if indent <= 4 && text.starts_with('-') {
            let (mut entry, rest) = parse_spec(text)?;
            if !rest.is_empty() {
                entry.help.push(rest.to_string());
            }
            entries.push(entry);
        } else {
            match entries.last_mut() {
                Some(e) => e.help.push(text.to_string()),
                None => return Err(format!("the line {text:?} under \"Options:\" is no option")),
            }
        }
    }
    if entries.is_empty() {
        return Err("no options under \"Options:\"".into());
    }
    let after: Vec<&str> = lines.collect();

    let mut cmd = Command::new(name.to_string())
        .about(about)
        .long_about(paragraphs(&description))
        .override_usage(usage.join("\n"))
        .after_long_help(paragraphs(&after))
        .disable_help_flag(true)
        .disable_version_flag(true);
    if let Some(v) = version {
        cmd = cmd.version(v.to_string());
    }
    let mut known: Vec<String> = Vec::new();
    for e in entries {
        known.extend(e.long.clone());
        cmd = cmd.arg(arg_of(e));
    }
    // Options only a usage form names, e.g. `--probe [--json]`.
    for form in &usage {
        for word in form.split(|c: char| c.is_whitespace() || c == '[' || c == ']') {
            let Some(long) = word.strip_prefix("--").filter(|l| is_option_name(l)) else {
                continue;
            };
            if !known.iter().any(|k| k == long) {
                known.push(long.to_string());
                cmd = cmd.arg(
                    Arg::new(long.to_string())
                        .long(long.to_string())
                        .action(ArgAction::SetTrue)
                        .help(format!("as in: {form}")),
                );
            }
        }
    }
    Ok(cmd
        .arg(
            Arg::new("WORKTREE")
                .value_hint(ValueHint::DirPath)
                .help("the directory the command may write to"),
        )
        .arg(
            Arg::new("COMMAND")
                .num_args(1..)
                .trailing_var_arg(true)
                .value_hint(ValueHint::CommandWithArguments)
                .help("the command and its arguments"),
        ))
}

/// `--name` words: lower-case letters, digits and dashes.
fn is_option_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `-c <V>  help`, `--long <V> help`, `-h, --help  help`: the entry and the help on its line.
fn parse_spec(line: &str) -> Result<(Entry, &str), String> {
    let mut entry = Entry::default();
    let mut rest = line;
    loop {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let word = rest[..end].trim_end_matches(',');
        if let Some(long) = word.strip_prefix("--").filter(|l| is_option_name(l)) {
            entry.long = Some(long.to_string());
        } else if let Some(s) = word
            .strip_prefix('-')
            .filter(|s| s.len() == 1 && s.chars().all(|c| c.is_ascii_alphanumeric()))
        {
            entry.short = s.chars().next();
        } else if let Some(v) = word.strip_prefix('<').and_then(|w| w.strip_suffix('>')) {
            if entry.value.is_some() {
                return Err(format!("the option line {line:?} has two <VALUE>s"));
            }
            entry.value = Some(v.to_string());
        } else {
            break;
        }
        rest = &rest[end..];
    }
    if entry.short.is_none() && entry.long.is_none() {
        return Err(format!(
            "the option line {line:?} names no -x or --name option"
        ));
    }
    Ok((entry, rest.trim()))
}

/// The clap argument an entry describes.
fn arg_of(e: Entry) -> Arg {
    let help = e.help.join(" ");
    let id = e
        .long
        .clone()
        .or_else(|| e.short.map(String::from))
        .unwrap_or_default();
    let mut arg = Arg::new(id).help(help.clone());
    if let Some(l) = e.long {
        arg = arg.long(l);
    }
    if let Some(s) = e.short {
        arg = arg.short(s);
    }
    let Some(value) = e.value else {
        return arg.action(ArgAction::SetTrue);
    };
    let choices: Vec<&str> = value.split('|').collect();
    arg = arg
        .value_name(value.clone())
        .action(if help.contains("(repeatable)") {
            ArgAction::Append
        } else {
            ArgAction::Set
        });
    if choices.len() > 1 && choices.iter().all(|c| is_option_name(c)) {
        // `<allow|deny|proxy>`: the values themselves.
        let choices: Vec<String> = choices.iter().map(|c| c.to_string()).collect();
        arg = arg
            .value_parser(clap::builder::PossibleValuesParser::new(choices))
            .hide_possible_values(true);
    } else if value == "PATH" || value == "WORKTREE" {
        arg = arg.value_hint(if value == "WORKTREE" {
            ValueHint::DirPath
        } else {
            ValueHint::AnyPath
        });
    }
    arg
}

/// Lines joined into paragraphs: a blank line ends one.
fn paragraphs(lines: &[&str]) -> String {
    lines
        .split(|l| l.trim().is_empty())
        .filter(|p| !p.is_empty())
        .map(|p| p.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELP: &str = "\
tool: do a thing

Usage:
  tool [OPTIONS] <WORKTREE> [--] <COMMAND>
  tool --probe [--json]

Writes here.
And there.

Second paragraph.

Options:
  -c <SHELL-STRING>        run it
  --allow-write <PATH>     also PATH
                           (repeatable)
  --net <allow|deny|proxy> which
                           network
  --allow-domain <NAME[:PORT]>
                           a name
  --probe                  print what is enforced
  -h, --help               print this help

Exit status: 125 setup failed.
";

    fn find<'a>(cmd: &'a Command, long: &str) -> &'a Arg {
        cmd.get_arguments()
            .find(|a| a.get_long() == Some(long))
            .unwrap_or_else(|| panic!("--{long} missing"))
    }

    #[test]
    fn reads_every_option_with_its_value_and_help() {
        let cmd = command_from_help("tool", HELP, Some("1.2.3")).unwrap();
        assert_eq!(cmd.get_about().unwrap().to_string(), "do a thing");
        assert_eq!(
            cmd.get_long_about().unwrap().to_string(),
            "Writes here. And there.\n\nSecond paragraph."
        );
        assert_eq!(
            cmd.get_after_long_help().unwrap().to_string(),
            "Exit status: 125 setup failed."
        );
        let c = cmd
            .get_arguments()
            .find(|a| a.get_short() == Some('c'))
            .unwrap();
        assert_eq!(c.get_value_names().unwrap()[0], "SHELL-STRING");
        let w = find(&cmd, "allow-write");
        assert_eq!(w.get_help().unwrap().to_string(), "also PATH (repeatable)");
        assert!(matches!(w.get_action(), ArgAction::Append));
        assert_eq!(w.get_value_hint(), ValueHint::AnyPath);
        let net: Vec<String> = find(&cmd, "net")
            .get_possible_values()
            .iter()
            .map(|v| v.get_name().to_string())
            .collect();
        assert_eq!(net, ["allow", "deny", "proxy"]);
        assert_eq!(
            find(&cmd, "net").get_help().unwrap().to_string(),
            "which network"
        );
        assert_eq!(
            find(&cmd, "allow-domain").get_help().unwrap().to_string(),
            "a name"
        );
        assert_eq!(find(&cmd, "help").get_short(), Some('h'));
        // Only in a usage form.
        assert!(find(&cmd, "json")
            .get_help()
            .unwrap()
            .to_string()
            .contains("--probe [--json]"));
    }

    #[test]
    fn a_text_of_another_shape_is_an_error_naming_what_is_missing() {
        let e = |t: &str| command_from_help("tool", t, None).unwrap_err();
        assert!(e("other: x\n").contains("tool: <what it does>"));
        assert!(e("tool: x\n\nOptions:\n").contains("Usage:"));
        assert!(e("tool: x\n\nUsage:\n  tool x\n").contains("Options:"));
        assert!(e("tool: x\n\nUsage:\n  tool x\n\nOptions:\n\nmore\n").contains("no options"));
        assert!(e("tool: x\n\nUsage:\n  tool x\n\nOptions:\n  -xy  bad\n").contains("-xy"));
        assert!(
            e("tool: x\n\nUsage:\n  tool x\n\nOptions:\n  --a <V> <W>  bad\n")
                .contains("two <VALUE>s")
        );
    }
}
