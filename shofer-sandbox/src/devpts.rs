//! The namespace backends' private devpts, with the caller's terminal under its real name.
//!
//! A new devpts instance (`newinstance`, as bubblewrap's `--dev`) on `/dev/pts` keeps the
//! user's other terminals out of reach (no writing fake output into another shell's
//! terminal, no `TIOCSWINSZ` on it) while the command still gets new ptys from `/dev/ptmx`.
//! But the caller's own terminal, the one on the command's descriptors 0-2, then has no
//! name: `ttyname(3)` finds no `/dev/pts/N` with its device and inode, so `tty` says "not a
//! tty", `os.ttyname(0)` fails with `ENODEV` and `GPG_TTY=$(tty)` breaks. bubblewrap binds it
//! at `/dev/console`; here it appears at its real path instead:
//!
//! 1. open the new instance's `ptmx` until the pty with the caller's index `N` exists (new
//!    ptys take the lowest free index, so that is `N + 1` opens; the masters below `N` are
//!    closed again);
//! 2. bind the caller's terminal (the host's node, opened before `/dev` was replaced) over
//!    the instance's `/dev/pts/N`; the master of that placeholder stays open in process A
//!    (the namespace's init) for the whole run, so the node under the bind never goes away.
//!
//! `ttyname` then resolves `/proc/self/fd/0` to `/dev/pts/N` and finds the same device and
//! inode there. A terminal index above [`MAX_INDEX`] is left without a name (the run goes on,
//! as before).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use crate::paths;

/// Highest terminal index given its real name (each index below costs one pty open).
pub const MAX_INDEX: u32 = 255;

/// Major numbers of Unix98 pty slaves (`UNIX98_PTY_SLAVE_MAJOR` to `+ 7`, Documentation/
/// admin-guide/devices.txt); the index is `(major - 136) * 256 + minor`.
const PTY_SLAVE_MAJOR: u32 = 136;

/// The caller's terminal on descriptors 0-2 that lives in `/dev/pts`: its index and an
/// `O_PATH` descriptor of its node, opened in the current mount namespace (call it in process
/// A before `/dev` is replaced). `None` when none of 0-2 is a pty.
pub fn caller_terminal() -> Option<(u32, OwnedFd)> {
    use rustix::stdio::{stderr, stdin, stdout};
    for fd in [stdin(), stdout(), stderr()] {
        if !rustix::termios::isatty(fd) {
            continue;
        }
        let Ok(st) = rustix::fs::fstat(fd) else {
            continue;
        };
        let (major, minor) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
        if !(PTY_SLAVE_MAJOR..PTY_SLAVE_MAJOR + 8).contains(&major) {
            continue;
        }
        let index = (major - PTY_SLAVE_MAJOR) * 256 + minor;
        let path = format!("/dev/pts/{index}");
        // Only the host's main devpts instance has it at this path; check it is the very node.
        let Ok(node) = paths::open_following(Path::new(&path)) else {
            continue;
        };
        let same = rustix::fs::fstat(&node).is_ok_and(|there| {
            there.st_rdev == st.st_rdev && there.st_ino == st.st_ino && there.st_dev == st.st_dev
        });
        if same {
            return Some((index, node));
        }
    }
    None
}

/// Mounts a new devpts instance on `/dev/pts` (which must exist) with `/dev/ptmx` pointing
/// into it, and binds `terminal` (from [`caller_terminal`]) at `/dev/pts/N`. Returns the
/// descriptors process A must keep open for the run.
///
/// # Errors
/// The failing mount or open. A terminal index above [`MAX_INDEX`] is not an error.
pub fn mount_private(terminal: Option<(u32, OwnedFd)>) -> io::Result<Vec<OwnedFd>> {
    crate::namespaces::sys::mount(
        Some("devpts"),
        "/dev/pts",
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )?;
    std::os::unix::fs::symlink("pts/ptmx", "/dev/ptmx")?;
    let Some((index, node)) = terminal else {
        return Ok(Vec::new());
    };
    if index > MAX_INDEX {
        return Ok(Vec::new());
    }
    let mut masters = Vec::with_capacity(index as usize + 1);
    loop {
        let master = rustix::fs::open(
            c"/dev/pts/ptmx",
            OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let n = pty_index(&master)?;
        masters.push(master);
        if n >= index {
            if n != index {
                return Ok(Vec::new()); // the index was not free: leave the terminal nameless
            }
            break;
        }
    }
    let placeholder = masters.pop().expect("the loop pushed the wanted master");
    drop(masters);
    let target = format!("/dev/pts/{index}");
    crate::namespaces::sys::mount(
        Some(&format!("/proc/self/fd/{}", node.as_raw_fd())),
        &target,
        None,
        libc::MS_BIND,
        None,
    )?;
    Ok(vec![placeholder])
}

/// The index of the pty whose master is `master` (`TIOCGPTN`), through rustix's `ptsname`,
/// which is that ioctl spelled as `/dev/pts/N`.
fn pty_index(master: &OwnedFd) -> io::Result<u32> {
    let name = rustix::pty::ptsname(master, Vec::new())?;
    name.to_bytes()
        .strip_prefix(b"/dev/pts/")
        .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EIO))
}
