//! Reading and writing agents' configuration files: [`read`] (absent is not an error) and
//! [`write_atomic`] (a temporary file in the same directory renamed over the original, whose
//! mode is kept, so a reader never sees half a file).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The file's text, or `None` when it does not exist.
///
/// # Errors
/// A message naming the file when it exists but cannot be read or is not UTF-8.
pub fn read(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| format!("{}: not UTF-8 text; left untouched", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: cannot read: {e}", path.display())),
    }
}

/// Replaces `path` with `text` atomically, keeping the original's mode (new files get 0600:
/// agents' files may hold tokens). Creates missing parent directories (mode 0700).
///
/// # Errors
/// A message naming the file; the original is untouched.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), String> {
    let err = |what: &str, e: std::io::Error| format!("{}: cannot {what}: {e}", path.display());
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| err("create its directory", e))?;
    }
    let mode = match std::fs::metadata(path) {
        Ok(m) => m.permissions().mode() & 0o7777,
        Err(_) => 0o600,
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".shofer-init-")
        .tempfile_in(dir)
        .map_err(|e| err("create a temporary file beside it", e))?;
    tmp.write_all(text.as_bytes())
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| err("write", e))?;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode))
        .map_err(|e| err("set the mode", e))?;
    tmp.persist(path).map_err(|e| err("replace", e.error))?;
    Ok(())
}

/// Removes `path` (init created it and undo emptied it).
///
/// # Errors
/// A message naming the file.
pub fn remove(path: &Path) -> Result<(), String> {
    std::fs::remove_file(path).map_err(|e| format!("{}: cannot remove: {e}", path.display()))
}

use std::os::unix::fs::DirBuilderExt;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_keeps_the_mode_and_replaces_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&p, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        // Only the file itself is left: the temporary file was renamed.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        let fresh = d.path().join("sub/b.json");
        write_atomic(&fresh, "x").unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
