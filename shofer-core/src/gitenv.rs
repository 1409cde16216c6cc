//! Git configuration given to a command through its environment: `GIT_CONFIG_COUNT`,
//! `GIT_CONFIG_KEY_<n>`, `GIT_CONFIG_VALUE_<n>` (git-config(1), "ENVIRONMENT"; git 2.31 on;
//! older git ignores them). It beats every configuration file, and it is a list the caller may
//! already use: ours is appended after the caller's entries, and a key the caller sets there
//! is left as the caller set it.
//!
//! ```
//! use shofer_core::gitenv::append;
//! let vars = append(&[("gc.autoDetach", "false")], |k| (k == "GIT_CONFIG_COUNT").then(|| "1".to_string()));
//! assert_eq!(vars[0], ("GIT_CONFIG_KEY_1".to_string(), "gc.autoDetach".to_string()));
//! assert_eq!(vars[2], ("GIT_CONFIG_COUNT".to_string(), "2".to_string()));
//! ```

/// The variables to set so that git also reads `settings` (`(key, value)` pairs), given the
/// environment `env` would hand the command: `GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>` from
/// the caller's count on, then the new `GIT_CONFIG_COUNT`. Keys compare case-insensitively,
/// as git's section and variable names do. A `GIT_CONFIG_COUNT` that is not a number (git
/// itself refuses it) is left alone: nothing is returned.
pub fn append(
    settings: &[(&str, &str)],
    env: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let count = match env("GIT_CONFIG_COUNT") {
        None => 0,
        // git reads it with strtoul: empty is 0.
        Some(c) if c.trim().is_empty() => 0,
        Some(c) => match c.trim().parse::<usize>() {
            Ok(n) => n,
            Err(_) => return Vec::new(),
        },
    };
    let callers: Vec<String> = (0..count)
        .filter_map(|i| env(&format!("GIT_CONFIG_KEY_{i}")))
        .map(|k| k.to_ascii_lowercase())
        .collect();
    let mut out = Vec::new();
    let mut n = count;
    for (key, value) in settings {
        if callers.contains(&key.to_ascii_lowercase()) {
            continue;
        }
        out.push((format!("GIT_CONFIG_KEY_{n}"), key.to_string()));
        out.push((format!("GIT_CONFIG_VALUE_{n}"), value.to_string()));
        n += 1;
    }
    if n > count {
        out.push(("GIT_CONFIG_COUNT".into(), n.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn appended(settings: &[(&str, &str)], vars: &[(&str, &str)]) -> Vec<(String, String)> {
        append(settings, |k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        })
    }

    fn s(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn settings_append_to_the_callers_list_and_leave_its_keys() {
        let ours = [("maintenance.auto", "false"), ("gc.auto", "0")];
        assert_eq!(
            appended(&ours, &[]),
            vec![
                s("GIT_CONFIG_KEY_0", "maintenance.auto"),
                s("GIT_CONFIG_VALUE_0", "false"),
                s("GIT_CONFIG_KEY_1", "gc.auto"),
                s("GIT_CONFIG_VALUE_1", "0"),
                s("GIT_CONFIG_COUNT", "2"),
            ]
        );
        assert_eq!(
            appended(
                &ours,
                &[
                    ("GIT_CONFIG_COUNT", "2"),
                    ("GIT_CONFIG_KEY_0", "user.name"),
                    ("GIT_CONFIG_VALUE_0", "x"),
                    ("GIT_CONFIG_KEY_1", "GC.Auto"),
                    ("GIT_CONFIG_VALUE_1", "100"),
                ]
            ),
            vec![
                s("GIT_CONFIG_KEY_2", "maintenance.auto"),
                s("GIT_CONFIG_VALUE_2", "false"),
                s("GIT_CONFIG_COUNT", "3"),
            ]
        );
        assert_eq!(appended(&ours, &[("GIT_CONFIG_COUNT", "two")]), vec![]);
        assert_eq!(
            appended(&ours, &[("GIT_CONFIG_COUNT", "")]),
            appended(&ours, &[])
        );
        assert_eq!(
            appended(
                &[("gc.auto", "0")],
                &[("GIT_CONFIG_COUNT", "1"), ("GIT_CONFIG_KEY_0", "gc.auto")]
            ),
            vec![]
        );
    }
}
