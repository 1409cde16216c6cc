//! Paths cleaned by their text alone, as `filepath.Clean` (Go) and `os.path.normpath`
//! (Python) do: [`clean`]. The kernel reads `a/b/..` through `b` (a symlink there leads
//! elsewhere); a tool that cleans first reaches `a`. Callers that must cover both readings
//! take both.

use std::path::{Component, Path, PathBuf};

/// `path` with `.` components dropped and each `..` removing the component before it (never
/// above the root; a leading one of a relative path goes); no filesystem is consulted.
///
/// ```
/// use shofer_core::lexical::clean;
/// use std::path::Path;
/// assert_eq!(clean(Path::new("/home/u/x/../.ssh")), Path::new("/home/u/.ssh"));
/// assert_eq!(clean(Path::new("/../a/./b")), Path::new("/a/b"));
/// ```
pub fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
