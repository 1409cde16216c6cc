//! The expected-gap list: which `(case, backend, ABI)` cells may report `gap`.
//!
//! The list lives in `tests/README.md` between `<!-- expected-gaps:begin -->` and
//! `<!-- expected-gaps:end -->` as a Markdown table `| case | backend | abi-range | reason |`
//! and is compiled into the binary (so it travels into a busybox VM). A gap the sandbox's
//! report admits but this list does not name is a `FAIL`: a new gap must be reviewed and
//! written down before the suite accepts it.

/// The README the list is read from, embedded at build time.
pub const README: &str = include_str!("../README.md");

/// One row of the expected-gap table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapRule {
    /// Case name, or `*`.
    pub case: String,
    /// Backend name, or `*`.
    pub backend: String,
    /// Inclusive ABI range; `u32::MAX` as the upper end means "and every later ABI".
    pub abi: (u32, u32),
    /// Why this is a kernel limit rather than a bug.
    pub reason: String,
}

/// Parses the table between the markers of `text`.
///
/// # Errors
/// A line that is a table row but whose ABI range is not `*`, `N`, `N-` or `N-M` is reported
/// with its line number: a typo in the list must not silently allow nothing (or everything).
pub fn parse(text: &str) -> Result<Vec<GapRule>, String> {
    let mut rules = Vec::new();
    let mut inside = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.contains("expected-gaps:begin") {
            inside = true;
            continue;
        }
        if t.contains("expected-gaps:end") {
            break;
        }
        if !inside || !t.starts_with('|') {
            continue;
        }
        let cols: Vec<&str> = t.trim_matches('|').split('|').map(str::trim).collect();
        if cols.len() < 4 || cols[0] == "case" || cols[0].starts_with("---") {
            continue;
        }
        let abi = parse_range(cols[2]).ok_or_else(|| {
            format!(
                "tests/README.md line {}: bad abi-range {:?} (valid: *, N, N-, N-M)",
                i + 1,
                cols[2]
            )
        })?;
        rules.push(GapRule {
            case: cols[0].trim_matches('`').to_string(),
            backend: cols[1].trim_matches('`').to_string(),
            abi,
            reason: cols[3].to_string(),
        });
    }
    if !inside {
        return Err("tests/README.md has no <!-- expected-gaps:begin --> section".into());
    }
    Ok(rules)
}

fn parse_range(s: &str) -> Option<(u32, u32)> {
    let s = s.trim();
    if s == "*" {
        return Some((0, u32::MAX));
    }
    match s.split_once('-') {
        None => s.parse().ok().map(|n| (n, n)),
        Some((a, "")) => a.trim().parse().ok().map(|n| (n, u32::MAX)),
        Some((a, b)) => {
            let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            (a <= b).then_some((a, b))
        }
    }
}

/// The rule that allows a gap for `case` under `backend` at effective ABI `abi`, if any.
pub fn allowed<'a>(
    rules: &'a [GapRule],
    case: &str,
    backend: &str,
    abi: u32,
) -> Option<&'a GapRule> {
    rules.iter().find(|r| {
        (r.case == "*" || r.case == case)
            && (r.backend == "*" || r.backend == backend)
            && r.abi.0 <= abi
            && abi <= r.abi.1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_readme_list_parses_and_names_known_cases() {
        let rules = parse(README).expect("README gap table parses");
        assert!(!rules.is_empty());
        let names: Vec<&str> = crate::catalogue::all().iter().map(|c| c.name).collect();
        for r in &rules {
            assert!(
                r.case == "*" || names.contains(&r.case.as_str()),
                "gap rule names unknown case {}",
                r.case
            );
        }
    }

    #[test]
    fn ranges_cover_open_and_closed_forms() {
        assert_eq!(parse_range("*"), Some((0, u32::MAX)));
        assert_eq!(parse_range("3"), Some((3, 3)));
        assert_eq!(parse_range("1-8"), Some((1, 8)));
        assert_eq!(parse_range("6-"), Some((6, u32::MAX)));
        assert_eq!(parse_range("8-1"), None);
        assert_eq!(parse_range("x"), None);
    }

    #[test]
    fn a_bad_range_in_the_list_is_an_error_not_a_silent_allow() {
        let text = "<!-- expected-gaps:begin -->\n| case | backend | abi-range | reason |\n| a | landlock | one | r |\n<!-- expected-gaps:end -->";
        assert!(parse(text).unwrap_err().contains("line 3"));
    }

    #[test]
    fn allowed_matches_backend_and_abi() {
        let text = "<!-- expected-gaps:begin -->\n| truncate-path | landlock | 1-2 | r |\n<!-- expected-gaps:end -->";
        let rules = parse(text).unwrap();
        assert!(allowed(&rules, "truncate-path", "landlock", 2).is_some());
        assert!(allowed(&rules, "truncate-path", "landlock", 3).is_none());
        assert!(allowed(&rules, "truncate-path", "userns", 1).is_none());
        assert!(allowed(&rules, "write-outside", "landlock", 1).is_none());
    }
}
