//! JSON configuration files edited in their own key order: [`Json`] (objects as `IndexMap`s),
//! [`Doc`] (a file's top-level object with its indentation and final newline, so a file
//! written by the agent — `JSON.stringify(v, null, 2)` — comes back byte for byte), and the
//! edits `init` makes ([`Doc::add`], [`Doc::remove`], [`Doc::find`]).
//!
//! An ordered type of our own rather than `serde_json`'s `preserve_order` feature: that
//! feature would be unified into the static `shofer-sandbox` build, which shares
//! `serde_json`, and change its size and its reports' key order.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::init::Outcome;
use super::Entry;

/// A JSON value whose objects keep their key order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Json {
    /// An object, in file order.
    Object(IndexMap<String, Json>),
    /// An array.
    Array(Vec<Json>),
    /// A string, number, boolean or null.
    Scalar(serde_json::Value),
}

impl Json {
    /// A string.
    pub fn str(s: impl Into<String>) -> Json {
        Json::Scalar(serde_json::Value::String(s.into()))
    }

    /// An object with `pairs` in this order.
    pub fn obj(pairs: Vec<(&str, Json)>) -> Json {
        Json::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    /// An array of strings.
    pub fn strs(items: &[String]) -> Json {
        Json::Array(items.iter().map(|s| Json::str(s.clone())).collect())
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Scalar(serde_json::Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// The member `key`, if this is an object holding it.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(m) => m.get(key),
            _ => None,
        }
    }

    /// Compact JSON text (for messages).
    pub fn compact(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Every string inside this value, depth first.
    fn strings<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Json::Object(m) => m.values().for_each(|v| v.strings(out)),
            Json::Array(a) => a.iter().for_each(|v| v.strings(out)),
            Json::Scalar(serde_json::Value::String(s)) => out.push(s),
            Json::Scalar(_) => {}
        }
    }
}

/// A JSON configuration file: its top-level object and how it was laid out.
#[derive(Debug, Clone)]
pub struct Doc {
    root: IndexMap<String, Json>,
    indent: String,
    final_newline: bool,
}

impl Doc {
    /// Parses `text` (`None`: the file does not exist, an empty document).
    ///
    /// # Errors
    /// A message naming `name`, the line and column of a syntax error, or that the top level
    /// is not an object.
    pub fn parse(name: &str, text: Option<&str>) -> Result<Doc, String> {
        let text = text.unwrap_or("");
        if text.trim().is_empty() {
            return Ok(Doc {
                root: IndexMap::new(),
                indent: "  ".into(),
                final_newline: true,
            });
        }
        let root = match serde_json::from_str::<Json>(text) {
            Ok(Json::Object(m)) => m,
            Ok(_) => {
                return Err(format!(
                    "{name}: the top level is not a JSON object; left untouched"
                ))
            }
            Err(e) => {
                // Some agents read their settings with comments allowed (JSONC); writing such
                // a file back would drop them.
                let comments = text.lines().any(|l| {
                    let l = l.trim_start();
                    l.starts_with("//") || l.starts_with("/*")
                });
                let hint = if comments {
                    ": comments are not supported here; remove them, or add the entry by hand (shofer init --dry-run prints it)"
                } else {
                    ""
                };
                return Err(format!(
                    "{name}: not valid JSON ({e}){hint}; left untouched"
                ));
            }
        };
        Ok(Doc {
            root,
            indent: detect_indent(text),
            final_newline: text.ends_with('\n'),
        })
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(self.indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        let _ = self.root.serialize(&mut ser);
        let mut s = String::from_utf8(out).unwrap_or_default();
        if self.final_newline {
            s.push('\n');
        }
        s
    }

    /// Whether the top-level object is empty.
    pub fn is_empty(&self) -> bool {
        self.root.is_empty()
    }

    /// Adds `entry` unless it is there already; a different value under the same name (or a
    /// changed group holding the same hook command) is left alone and reported.
    ///
    /// # Errors
    /// A message when a container on the entry's path is not of the expected kind.
    pub fn add(&mut self, entry: &Entry) -> Result<Outcome, String> {
        let (at, value) = match entry {
            Entry::Server { at, value, .. } | Entry::Hook { at, value, .. } => (at, value),
        };
        let Json::Object(_) = value else {
            unreachable!("entries are objects")
        };
        match self.find(entry) {
            Found::Same => return Ok(Outcome::AlreadyThere),
            Found::Differs(v) => return Ok(Outcome::Differs(v.compact())),
            Found::Absent => {}
        }
        let mut cur = &mut self.root;
        let (last, parents) = at.split_last().expect("a non-empty path");
        for key in parents {
            let slot = cur
                .entry(key.to_string())
                .or_insert_with(|| Json::Object(IndexMap::new()));
            cur = match slot {
                Json::Object(m) => m,
                _ => return Err(format!("\"{key}\" is not an object")),
            };
        }
        match entry {
            Entry::Server { key, .. } => {
                let slot = cur
                    .entry(last.to_string())
                    .or_insert_with(|| Json::Object(IndexMap::new()));
                let Json::Object(m) = slot else {
                    return Err(format!("\"{last}\" is not an object"));
                };
                m.insert(key.to_string(), value.clone());
            }
            Entry::Hook { .. } => {
                let slot = cur
                    .entry(last.to_string())
                    .or_insert_with(|| Json::Array(Vec::new()));
                let Json::Array(a) = slot else {
                    return Err(format!("\"{last}\" is not an array"));
                };
                a.push(value.clone());
            }
        }
        Ok(Outcome::Added)
    }

    /// Removes `entry` if it is exactly what `init` writes. The objects and arrays holding it
    /// stay, even when left empty: nothing says whether `init` or the user made them (a file
    /// that is wholly `init`'s goes as a whole: see [`super::init`]).
    pub fn remove(&mut self, entry: &Entry) -> Outcome {
        match self.find(entry) {
            Found::Absent => return Outcome::Absent,
            Found::Differs(v) => return Outcome::Differs(v.compact()),
            Found::Same => {}
        }
        let at = match entry {
            Entry::Server { at, .. } | Entry::Hook { at, .. } => at,
        };
        remove_at(&mut self.root, at, entry);
        Outcome::Removed
    }

    /// Whether `entry` is there as `init` writes it, there changed, or absent.
    pub fn find(&self, entry: &Entry) -> Found {
        let (at, value) = match entry {
            Entry::Server { at, value, .. } | Entry::Hook { at, value, .. } => (at, value),
        };
        let mut cur = &self.root;
        let (last, parents) = at.split_last().expect("a non-empty path");
        for key in parents {
            match cur.get(*key) {
                Some(Json::Object(m)) => cur = m,
                _ => return Found::Absent,
            }
        }
        match entry {
            Entry::Server { key, .. } => match cur.get(*last).and_then(|m| m.get(key)) {
                None => Found::Absent,
                Some(v) if v == value => Found::Same,
                Some(v) => Found::Differs(v.clone()),
            },
            Entry::Hook { command, .. } => {
                let Some(Json::Array(groups)) = cur.get(*last) else {
                    return Found::Absent;
                };
                if groups.iter().any(|g| g == value) {
                    return Found::Same;
                }
                match groups.iter().find(|g| holds_hook(g, command)) {
                    Some(g) => Found::Differs(g.clone()),
                    None => Found::Absent,
                }
            }
        }
    }

    /// The server entry `key` in the object at `at`, whatever it holds (for `doctor`).
    pub fn server(&self, at: &[&str], key: &str) -> Option<&Json> {
        let mut cur = &self.root;
        for k in at {
            let Some(Json::Object(m)) = cur.get(*k) else {
                return None;
            };
            cur = m;
        }
        cur.get(key)
    }

    /// Every hook command string in the array at `at` that runs `shofer hook <agent>`, with or
    /// without a pinned `--worktree` (for `doctor`: `suffix` is ` hook <agent>`).
    pub fn hook_commands(&self, at: &[&str], suffix: &str) -> Vec<String> {
        let mut cur = &self.root;
        let (last, parents) = match at.split_last() {
            Some(x) => x,
            None => return Vec::new(),
        };
        for k in parents {
            let Some(Json::Object(m)) = cur.get(*k) else {
                return Vec::new();
            };
            cur = m;
        }
        let mut out = Vec::new();
        if let Some(v) = cur.get(*last) {
            v.strings(&mut out);
        }
        let pinned = format!("{suffix} --worktree ");
        out.into_iter()
            .filter(|s| s.ends_with(suffix) || s.contains(&pinned))
            .map(str::to_string)
            .collect()
    }
}

/// Whether an entry is there as `init` writes it.
#[derive(Debug, Clone)]
pub enum Found {
    /// Not there.
    Absent,
    /// There, exactly.
    Same,
    /// There under the same name (or holding the same hook command), but different.
    Differs(Json),
}

/// Whether the hook group `g` runs `command` among its hooks.
fn holds_hook(g: &Json, command: &str) -> bool {
    let mut s = Vec::new();
    g.strings(&mut s);
    s.contains(&command)
}

/// Removes `entry` below `at`; the containers on the way stay.
fn remove_at(obj: &mut IndexMap<String, Json>, at: &[&str], entry: &Entry) {
    let Some((first, rest)) = at.split_first() else {
        return;
    };
    match obj.get_mut(*first) {
        Some(Json::Object(m)) if !rest.is_empty() => remove_at(m, rest, entry),
        Some(Json::Object(m)) => {
            if let Entry::Server { key, .. } = entry {
                m.shift_remove(*key);
            }
        }
        Some(Json::Array(a)) => {
            if let Entry::Hook { value, .. } = entry {
                a.retain(|g| g != value);
            }
        }
        _ => {}
    }
}

/// The indentation of the first indented line (two spaces when there is none).
fn detect_indent(text: &str) -> String {
    text.lines()
        .skip(1)
        .find_map(|l| {
            let ws: String = l.chars().take_while(|c| *c == ' ' || *c == '\t').collect();
            (!ws.is_empty()).then_some(ws)
        })
        .unwrap_or_else(|| "  ".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Entry {
        Entry::Server {
            at: vec!["mcpServers"],
            key: "shofer",
            value: Json::obj(vec![
                ("command", Json::str("/bin/shofer")),
                ("args", Json::strs(&["serve".into()])),
            ]),
        }
    }

    #[test]
    fn round_trips_order_indent_and_newline() {
        for text in [
            "{\n  \"z\": 1,\n  \"a\": [\n    1.5,\n    \"x\"\n  ],\n  \"m\": {}\n}\n",
            "{\n    \"z\": true,\n    \"a\": null\n}",
            "{\n\t\"b\": \"é\",\n\t\"a\": {\n\t\t\"k\": -3\n\t}\n}\n",
        ] {
            assert_eq!(Doc::parse("f", Some(text)).unwrap().render(), text);
        }
    }

    #[test]
    fn add_then_remove_is_the_original() {
        let text = "{\n  \"theme\": \"dark\",\n  \"mcpServers\": {\n    \"other\": {\n      \"command\": \"x\"\n    }\n  }\n}\n";
        let mut d = Doc::parse("f", Some(text)).unwrap();
        assert_eq!(d.add(&server()).unwrap(), Outcome::Added);
        assert_eq!(d.add(&server()).unwrap(), Outcome::AlreadyThere);
        assert!(d.render().contains("\"shofer\""));
        assert_eq!(d.remove(&server()), Outcome::Removed);
        assert_eq!(d.render(), text);
        // The container stays: it may have been the user's.
        let mut empty = Doc::parse("f", None).unwrap();
        empty.add(&server()).unwrap();
        empty.remove(&server());
        assert_eq!(empty.render(), "{\n  \"mcpServers\": {}\n}\n");
    }

    #[test]
    fn a_changed_entry_is_left_alone() {
        let text = "{\"mcpServers\": {\"shofer\": {\"command\": \"mine\"}}}";
        let mut d = Doc::parse("f", Some(text)).unwrap();
        assert!(matches!(d.add(&server()).unwrap(), Outcome::Differs(_)));
        assert!(matches!(d.remove(&server()), Outcome::Differs(_)));
        assert!(d.render().contains("mine"));
    }

    #[test]
    fn bad_json_names_the_file_and_place() {
        let e = Doc::parse("/h/.claude.json", Some("{\"a\": ,}")).unwrap_err();
        assert!(e.contains("/h/.claude.json") && e.contains("line 1"), "{e}");
        let e = Doc::parse("f", Some("[1]")).unwrap_err();
        assert!(e.contains("not a JSON object"), "{e}");
    }
}
