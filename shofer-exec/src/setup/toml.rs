//! TOML configuration files (Codex's `config.toml`) edited with `toml_edit`, which keeps every
//! comment, blank line and the order of the user's tables: [`Doc::add`] appends a
//! `[mcp_servers.shofer]` table, [`Doc::remove`] takes exactly that table out again (and the
//! implicit `mcp_servers` parent when it added it), so an undo gives back the original bytes.

use toml_edit::{Array, DocumentMut, Item, Table, Value};

use super::init::Outcome;
use super::json::{Found, Json};
use super::Entry;

/// A TOML configuration file.
#[derive(Debug, Clone)]
pub struct Doc {
    doc: DocumentMut,
}

impl Doc {
    /// Parses `text` (`None`: the file does not exist, an empty document).
    ///
    /// # Errors
    /// A message naming `name` and the parse error (with its line and column).
    pub fn parse(name: &str, text: Option<&str>) -> Result<Doc, String> {
        text.unwrap_or("")
            .parse::<DocumentMut>()
            .map(|doc| Doc { doc })
            .map_err(|e| {
                format!(
                    "{name}: not valid TOML ({}); left untouched",
                    e.to_string().trim_end()
                )
            })
    }

    /// The file's text.
    pub fn render(&self) -> String {
        self.doc.to_string()
    }

    /// Whether the document holds nothing.
    pub fn is_empty(&self) -> bool {
        self.doc.as_table().is_empty() && self.doc.to_string().trim().is_empty()
    }

    /// Adds a server entry unless it is there already (a different one is left alone).
    ///
    /// # Errors
    /// A message when `mcp_servers` is not a table, or for a hook entry (none in TOML).
    pub fn add(&mut self, entry: &Entry) -> Result<Outcome, String> {
        let Entry::Server { at, key, value } = entry else {
            return Err("hooks are not written to TOML files".into());
        };
        match self.find(entry) {
            Found::Same => return Ok(Outcome::AlreadyThere),
            Found::Differs(v) => return Ok(Outcome::Differs(v.compact())),
            Found::Absent => {}
        }
        let parent = at.first().copied().unwrap_or("mcp_servers");
        let root = self.doc.as_table_mut();
        if !root.contains_key(parent) {
            let mut t = Table::new();
            t.set_implicit(true);
            root.insert(parent, Item::Table(t));
        }
        let Some(servers) = root.get_mut(parent).and_then(Item::as_table_mut) else {
            return Err(format!("\"{parent}\" is not a table"));
        };
        servers.insert(key, Item::Table(to_table(value)));
        Ok(Outcome::Added)
    }

    /// Removes the server entry if it is exactly what `init` writes.
    pub fn remove(&mut self, entry: &Entry) -> Outcome {
        let Entry::Server { at, key, .. } = entry else {
            return Outcome::Absent;
        };
        match self.find(entry) {
            Found::Absent => return Outcome::Absent,
            Found::Differs(v) => return Outcome::Differs(v.compact()),
            Found::Same => {}
        }
        let parent = at.first().copied().unwrap_or("mcp_servers");
        let root = self.doc.as_table_mut();
        let mut prune = false;
        if let Some(t) = root.get_mut(parent).and_then(Item::as_table_mut) {
            t.remove(key);
            prune = t.is_empty() && t.is_implicit();
        }
        if prune {
            root.remove(parent);
        }
        Outcome::Removed
    }

    /// Whether the entry is there as `init` writes it, changed, or absent.
    pub fn find(&self, entry: &Entry) -> Found {
        let Entry::Server { at, key, value } = entry else {
            return Found::Absent;
        };
        match self.server(at, key) {
            None => Found::Absent,
            Some(v) if &v == value => Found::Same,
            Some(v) => Found::Differs(v),
        }
    }

    /// The server `key` below `at` as JSON, whatever it holds (for `doctor`).
    pub fn server(&self, at: &[&str], key: &str) -> Option<Json> {
        let parent = at.first().copied().unwrap_or("mcp_servers");
        let servers = self.doc.get(parent)?.as_table_like()?;
        item_json(servers.get(key)?)
    }
}

/// The JSON object `v` as a TOML table (strings and arrays of strings: what entries hold).
fn to_table(v: &Json) -> Table {
    let mut t = Table::new();
    if let Json::Object(m) = v {
        for (k, v) in m {
            if let Some(val) = to_value(v) {
                t.insert(k, Item::Value(val));
            }
        }
    }
    t
}

fn to_value(v: &Json) -> Option<Value> {
    match v {
        Json::Scalar(serde_json::Value::String(s)) => Some(Value::from(s.as_str())),
        Json::Scalar(serde_json::Value::Bool(b)) => Some(Value::from(*b)),
        Json::Scalar(serde_json::Value::Number(n)) => n.as_i64().map(Value::from),
        Json::Array(a) => Some(Value::Array(
            a.iter().filter_map(to_value).collect::<Array>(),
        )),
        _ => None,
    }
}

/// A TOML item as JSON (tables as objects in their order); `None` for what has no JSON form.
fn item_json(item: &Item) -> Option<Json> {
    match item {
        Item::Value(v) => value_json(v),
        Item::Table(t) => Some(Json::Object(
            t.iter()
                .filter_map(|(k, v)| Some((k.to_string(), item_json(v)?)))
                .collect(),
        )),
        _ => None,
    }
}

fn value_json(v: &Value) -> Option<Json> {
    Some(match v {
        Value::String(s) => Json::str(s.value().clone()),
        Value::Integer(i) => Json::Scalar((*i.value()).into()),
        Value::Boolean(b) => Json::Scalar((*b.value()).into()),
        Value::Float(f) => Json::Scalar(serde_json::Number::from_f64(*f.value())?.into()),
        Value::Array(a) => Json::Array(a.iter().filter_map(value_json).collect()),
        Value::InlineTable(t) => Json::Object(
            t.iter()
                .filter_map(|(k, v)| Some((k.to_string(), value_json(v)?)))
                .collect(),
        ),
        Value::Datetime(d) => Json::str(d.value().to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Entry {
        Entry::Server {
            at: vec!["mcp_servers"],
            key: "shofer",
            value: Json::obj(vec![
                ("command", Json::str("/bin/shofer")),
                ("args", Json::strs(&["serve".into(), "--project".into()])),
            ]),
        }
    }

    #[test]
    fn add_then_remove_keeps_comments_and_bytes() {
        let text = "# my settings\nmodel = \"o3\" # inline\n\n[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"docs\"]\n\n[mcp_servers.docs.env]\nA = \"1\"\n\n[profiles.fast]\nmodel = \"o4-mini\"\n";
        let mut d = Doc::parse("config.toml", Some(text)).unwrap();
        assert_eq!(d.add(&server()).unwrap(), Outcome::Added);
        let added = d.render();
        assert!(added.contains("[mcp_servers.shofer]"), "{added}");
        assert!(added.starts_with("# my settings\nmodel = \"o3\" # inline\n"));
        let mut again = Doc::parse("config.toml", Some(&added)).unwrap();
        assert_eq!(again.add(&server()).unwrap(), Outcome::AlreadyThere);
        assert_eq!(again.remove(&server()), Outcome::Removed);
        assert_eq!(again.render(), text);
    }

    #[test]
    fn a_fresh_file_gets_a_table_and_undo_empties_it() {
        let mut d = Doc::parse("c", None).unwrap();
        d.add(&server()).unwrap();
        let t = d.render();
        assert!(
            t.contains("[mcp_servers.shofer]\ncommand = \"/bin/shofer\""),
            "{t}"
        );
        let mut d = Doc::parse("c", Some(&t)).unwrap();
        d.remove(&server());
        assert_eq!(d.render(), "");
        assert!(d.is_empty());
    }

    #[test]
    fn bad_toml_names_the_file_and_line() {
        let e = Doc::parse("/h/.codex/config.toml", Some("a = 1\nb = \n")).unwrap_err();
        assert!(
            e.contains("/h/.codex/config.toml") && e.contains("line 2"),
            "{e}"
        );
    }
}
