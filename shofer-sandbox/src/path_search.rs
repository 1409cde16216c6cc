//! Finding a command on `$PATH`, once, the way `execvp(3)` and shells do it: the exec-time
//! sequence ([`exec`]) and the bubblewrap backend's pre-resolution ([`resolve`]) walk the
//! same [`candidates`], so they cannot disagree about which file runs or which error a
//! missing or unexecutable command gets (126 or 127, as POSIX shells report them).

use std::ffi::{CStr, CString};
use std::io;

use shofer_sys::errno;

/// The search list when `$PATH` is unset (glibc's `execvp` default without the current
/// directory).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Why a command cannot be run, as a shell reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotRunnable {
    /// No file of that name on `$PATH` (or at the given path): exit status 127.
    NotFound,
    /// A matching regular file (or a directory named by path) exists but cannot be
    /// executed: exit status 126.
    NotExecutable,
}

impl NotRunnable {
    /// The shell's exit status for it: 127 or 126.
    pub fn exit_code(self) -> i32 {
        match self {
            NotRunnable::NotFound => 127,
            NotRunnable::NotExecutable => 126,
        }
    }

    /// The shell's message for `name`: `name: command not found` or
    /// `name: Permission denied`.
    pub fn message(self, name: &str) -> String {
        match self {
            NotRunnable::NotFound => format!("{name}: command not found"),
            NotRunnable::NotExecutable => format!("{name}: {}", errno::strerror(libc::EACCES)),
        }
    }
}

/// `<dir>/<name>` for each directory of `$PATH` in order (an empty entry is `.`; no `$PATH`
/// means `/usr/local/bin:/usr/bin:/bin`), as `execvp(3)` searches them.
pub fn candidates(name: &CStr) -> Vec<CString> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())
        .split(|&b| b == b':')
        .filter_map(|dir| {
            let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
            let mut candidate = dir.to_vec();
            candidate.push(b'/');
            candidate.extend_from_slice(name.to_bytes());
            CString::new(candidate).ok()
        })
        .collect()
}

/// `execvp(3)` with a shell's choice of error: `$PATH` is searched in order, directories we
/// cannot search or that lack the name are skipped, and the error is `EACCES` (126) only when
/// a matching regular file exists but cannot be executed, else `ENOENT` (127). A file the
/// kernel cannot execute (`ENOEXEC`) is run by `/bin/sh`, as `execvp` and shells do.
/// Returns only on failure. It allocates: between `clone(CLONE_VM)` and `execve` that is
/// sound only because the supervisor is suspended meanwhile (see [`crate::spawn`]).
pub fn exec(argv: &[CString], envp: Option<&[*const libc::c_char]>) -> io::Error {
    if argv[0].as_bytes().contains(&b'/') {
        return exec_one(&argv[0], argv, envp);
    }
    let mut denied = false;
    for candidate in candidates(&argv[0]) {
        let err = exec_one(&candidate, argv, envp);
        match err.raw_os_error() {
            Some(libc::EACCES) => denied |= is_regular_file(&candidate),
            Some(
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ELOOP | libc::ENAMETOOLONG,
            ) => {}
            _ => return err,
        }
    }
    io::Error::from_raw_os_error(if denied { libc::EACCES } else { libc::ENOENT })
}

/// Where [`exec`] would find `name`, without executing anything: for bubblewrap, which
/// reports every exec failure as exit 1, and for finding `bwrap` itself. The sandbox sees the
/// host's root read-only, so the host's answer is the sandbox's.
///
/// # Errors
/// [`NotRunnable`] as a failed exec would be reported.
pub fn resolve(name: &CStr) -> Result<CString, NotRunnable> {
    let executable =
        |p: &CStr| is_regular_file(p) && rustix::fs::access(p, rustix::fs::Access::EXEC_OK).is_ok();
    if name.to_bytes().contains(&b'/') {
        if executable(name) {
            return Ok(name.to_owned());
        }
        let shown = name.to_string_lossy();
        if is_regular_file(name) || std::path::Path::new(&*shown).is_dir() {
            return Err(NotRunnable::NotExecutable);
        }
        return Err(NotRunnable::NotFound);
    }
    let mut denied = false;
    for candidate in candidates(name) {
        if executable(&candidate) {
            return Ok(candidate);
        }
        denied |= is_regular_file(&candidate);
    }
    Err(if denied {
        NotRunnable::NotExecutable
    } else {
        NotRunnable::NotFound
    })
}

/// `execve` of `path` with `envp` (NULL-terminated), or `execv` (this process's environment).
fn exec_env(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: Option<&[*const libc::c_char]>,
) {
    // Raw libc: rustix has execve only in its experimental runtime API.
    // Safety: NULL-terminated arrays of NUL-terminated strings that outlive the call.
    unsafe {
        match envp {
            Some(envp) => libc::execve(path, argv, envp.as_ptr()),
            None => libc::execv(path, argv),
        }
    };
}

fn exec_one(path: &CString, argv: &[CString], envp: Option<&[*const libc::c_char]>) -> io::Error {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    exec_env(path.as_ptr(), ptrs.as_ptr(), envp);
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::ENOEXEC) {
        return err;
    }
    let sh = c"/bin/sh";
    let mut script: Vec<*const libc::c_char> = vec![sh.as_ptr(), path.as_ptr()];
    script.extend(argv[1..].iter().map(|a| a.as_ptr()));
    script.push(std::ptr::null());
    exec_env(sh.as_ptr(), script.as_ptr(), envp);
    io::Error::last_os_error()
}

fn is_regular_file(path: &CStr) -> bool {
    rustix::fs::stat(path).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_finds_sh_and_names_what_is_missing_or_not_executable() {
        assert!(resolve(c"sh").unwrap().to_bytes().ends_with(b"/sh"));
        assert_eq!(
            resolve(c"shofer-no-such-command-4711"),
            Err(NotRunnable::NotFound)
        );
        assert_eq!(resolve(c"/"), Err(NotRunnable::NotExecutable));
        assert_eq!(
            NotRunnable::NotFound.message("x"),
            "x: command not found".to_string()
        );
        assert_eq!(NotRunnable::NotExecutable.exit_code(), 126);
    }
}
