//! Inside the sandbox — the secret locations (issue 32): reading a hidden file by every route,
//! linking it into the worktree, and mounting it elsewhere from a nested user namespace. The
//! host side ([`crate::catalogue`]'s secrets family) makes a scratch home whose files hold
//! [`MARK`] and points `$HOME` at it.

use super::{arg, p, Seen};
use crate::sys::{self, Errno};
use std::os::fd::AsRawFd;
use std::path::Path;

/// What every fake secret file holds: seen in anything read means a leak.
pub(crate) const MARK: &str = "SHOFER-FAKE-SECRET";

/// The fake secret files under the scratch home, relative.
pub(crate) const FILES: [&str; 3] = [".ssh/id_ed25519", ".netrc", ".aws/credentials"];

/// Reads `path` whole: `Ok(true)` when the content holds [`MARK`].
fn leaks(path: &Path) -> Result<bool, Errno> {
    let fd = sys::open(path, libc::O_RDONLY, 0)?;
    let mut buf = [0u8; 256];
    let n = sys::read(fd.as_raw_fd(), &mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).contains(MARK))
}

/// Every attempt in `tries`: an escape when one read the mark, else blocked (with each errno).
fn judge(tries: Vec<(String, Result<bool, Errno>)>) -> Seen {
    let mut seen = Vec::new();
    for (what, r) in tries {
        match r {
            Ok(true) => return Seen::Escaped(format!("read {what}: the secret")),
            Ok(false) => seen.push(format!("{what} -> read, no secret in it")),
            Err(e) => seen.push(format!("{what} -> {e}")),
        }
    }
    Seen::Blocked(seen.join("; "))
}

/// `secret-read <wt> <out> <home>`: each fake secret by its path, through the worktree's
/// symlink `netrc-link`, `/proc/self/root`, `..` and `openat` on the home; then the ordinary
/// `~/.gitconfig` beside them must still read.
pub(crate) fn secret_read(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let home = p(arg(a, 2));
    let mut tries: Vec<(String, Result<bool, Errno>)> = FILES
        .iter()
        .map(|f| (format!("~/{f}"), leaks(&home.join(f))))
        .collect();
    tries.push(("wt/netrc-link".into(), leaks(&wt.join("netrc-link"))));
    let via_root =
        Path::new("/proc/self/root").join(home.join(".netrc").strip_prefix("/").unwrap_or(&home));
    tries.push(("/proc/self/root/~/.netrc".into(), leaks(&via_root)));
    tries.push((
        "~/.aws/../.netrc".into(),
        leaks(&home.join(".aws/../.netrc")),
    ));
    let at = sys::open(&home, libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .or_else(|_| sys::open(&home, libc::O_PATH | libc::O_DIRECTORY, 0))
        .and_then(|d| {
            let f = sys::openat(d.as_raw_fd(), ".netrc", libc::O_RDONLY, 0)?;
            let mut buf = [0u8; 256];
            let n = sys::read(f.as_raw_fd(), &mut buf)?;
            Ok(String::from_utf8_lossy(&buf[..n]).contains(MARK))
        });
    tries.push(("openat(~, .netrc)".into(), at));
    let verdict = judge(tries);
    if let Seen::Blocked(d) = &verdict {
        if let Err(e) = std::fs::read_to_string(home.join(".gitconfig")) {
            return Seen::Broken(format!(
                "the ordinary ~/.gitconfig is unreadable: {e} ({d})"
            ));
        }
    }
    verdict
}

/// `secret-link <wt> <out> <home>`: hard-link `~/.netrc` into the worktree and read the link.
pub(crate) fn secret_link(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let home = p(arg(a, 2));
    let stolen = wt.join("stolen-netrc");
    match sys::link(home.join(".netrc"), &stolen) {
        Err(e) => Seen::Blocked(format!("link(~/.netrc, wt/stolen-netrc) -> {e}")),
        Ok(()) => judge(vec![(
            "the hard link wt/stolen-netrc".into(),
            leaks(&stolen),
        )]),
    }
}

/// `secret-mount <wt> <out> <home>`: in a nested user and mount namespace, bind-mount the home
/// into the worktree and read the secrets through the bind.
pub(crate) fn secret_mount(a: &[String]) -> Seen {
    let wt = p(arg(a, 0));
    let home = p(arg(a, 2));
    if let Err(e) = super::caps::enter_userns() {
        return Seen::Blocked(format!("no nested user namespace: {e}"));
    }
    let mnt = wt.join("home-bind");
    let _ = sys::mkdir(&mnt, 0o755);
    let (s, t) = (sys::cstr(&home), sys::cstr(&mnt));
    // Safety: valid C strings; NULL fstype and data are allowed with MS_BIND.
    let r = unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Seen::Blocked(format!(
            "mount(~, wt/home-bind, MS_BIND) -> {}",
            Errno::last()
        ));
    }
    judge(
        FILES
            .iter()
            .map(|f| (format!("wt/home-bind/{f}"), leaks(&mnt.join(f))))
            .collect(),
    )
}
