//! Execution ids and artifact ids (ARCHITECTURE §3.2, §3.4).
//!
//! Every command run gets an *execution id*: a Unix time in milliseconds, made unique within
//! the process by [`next_unique`] (a later command never gets an id at or below an earlier
//! one). Its spilled output lives in the artifact file `cmd-<executionId>.txt`, and that file
//! name is the *artifact id* the agent passes to `read_command_output`.
//!
//! [`ArtifactId::parse`] is the only way from agent input to a file name, and it accepts exactly
//! `^cmd-\d+\.txt$` (ASCII digits), so no path separator, `..` or other file can get through.
//!
//! ```
//! use shofer_core::artifact::ArtifactId;
//! assert_eq!(ArtifactId::parse("cmd-1706119234567.txt").unwrap().execution_id(), 1706119234567);
//! assert!(ArtifactId::parse("../../etc/passwd").is_err());
//! ```

use std::fmt;

/// The next execution id after `last`, given the clock reading `now_ms` (milliseconds since the
/// Unix epoch): `now_ms` if it is later than `last`, else `last + 1`. Ids are therefore
/// strictly increasing even when two commands start within the same millisecond or the clock
/// steps back.
pub fn next_unique(now_ms: u64, last: u64) -> u64 {
    if now_ms > last {
        now_ms
    } else {
        last.saturating_add(1)
    }
}

/// A validated artifact id: `cmd-<digits>.txt`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArtifactId {
    name: String,
    id: u64,
}

/// An artifact id that does not have the form `cmd-<digits>.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidArtifactId(pub String);

impl fmt::Display for InvalidArtifactId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Invalid artifact_id format: \"{}\". Expected format: cmd-{{timestamp}}.txt (e.g., \"cmd-1706119234567.txt\")",
            self.0
        )
    }
}

impl std::error::Error for InvalidArtifactId {}

impl ArtifactId {
    /// The artifact id of execution `id`: `cmd-<id>.txt`.
    pub fn for_execution(id: u64) -> Self {
        ArtifactId {
            name: format!("cmd-{id}.txt"),
            id,
        }
    }

    /// Validates agent input against `^cmd-\d+\.txt$` (ASCII digits only).
    ///
    /// # Errors
    /// [`InvalidArtifactId`], whose text is the original host's message, when the input has any
    /// other form, or when the digits do not fit a `u64` (no execution id is that large).
    pub fn parse(s: &str) -> Result<Self, InvalidArtifactId> {
        let bad = || InvalidArtifactId(s.to_string());
        let digits = s
            .strip_prefix("cmd-")
            .and_then(|r| r.strip_suffix(".txt"))
            .ok_or_else(bad)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let id = digits.parse::<u64>().map_err(|_| bad())?;
        Ok(ArtifactId {
            name: s.to_string(),
            id,
        })
    }

    /// The file name, `cmd-<digits>.txt`, exactly as given (leading zeros kept).
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The execution id the digits spell.
    pub fn execution_id(&self) -> u64 {
        self.id
    }
}

impl fmt::Display for ArtifactId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// True for file names that `cleanup` removes: every name starting with `cmd-` (the original
/// host's `cmd-*` rule, which also catches partial or foreign artifacts).
pub fn is_cleanup_candidate(file_name: &str) -> bool {
    file_name.starts_with("cmd-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_only_cmd_digits_txt() {
        for ok in ["cmd-1.txt", "cmd-1706119234567.txt", "cmd-007.txt"] {
            assert!(ArtifactId::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "../../etc/passwd",
            "cmd-1.txt/../x",
            "cmd-.txt",
            "cmd-1.txt\n",
            "cmd-1.TXT",
            "cmd--1.txt",
            "cmd-1a.txt",
            "cmd-１.txt",
            "/tmp/cmd-1.txt",
            "cmd-99999999999999999999999.txt",
            "",
        ] {
            let e = ArtifactId::parse(bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("Invalid artifact_id format: \"{bad}\". Expected format: cmd-{{timestamp}}.txt (e.g., \"cmd-1706119234567.txt\")")
            );
        }
    }

    #[test]
    fn next_unique_is_strictly_increasing() {
        assert_eq!(next_unique(100, 50), 100);
        assert_eq!(next_unique(100, 100), 101);
        assert_eq!(next_unique(90, 100), 101);
    }

    #[test]
    fn for_execution_round_trips() {
        let a = ArtifactId::for_execution(42);
        assert_eq!(a.as_str(), "cmd-42.txt");
        assert_eq!(ArtifactId::parse(a.as_str()).unwrap(), a);
    }
}
