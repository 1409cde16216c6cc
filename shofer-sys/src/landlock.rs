//! The Landlock ABI probe (landlock(7)).

/// `LANDLOCK_CREATE_RULESET_VERSION` (`include/uapi/linux/landlock.h`, Linux 5.13).
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// Why the kernel has no usable Landlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LandlockAbsence {
    /// `ENOSYS`: not built into this kernel (e.g. Linux 5.10).
    NotBuilt,
    /// `EOPNOTSUPP`: built but not enabled at boot (`lsm=` without `landlock`).
    Disabled,
    /// Any other errno (e.g. a seccomp filter refusing the syscall).
    Other(i32),
}

/// The Landlock ABI version of the running kernel (`landlock_create_ruleset(NULL, 0,
/// LANDLOCK_CREATE_RULESET_VERSION)`), or why there is none. Asks the kernel on every call
/// (one syscall); it never changes while the system runs.
pub fn abi() -> Result<u32, LandlockAbsence> {
    // Raw syscall: neither rustix nor libc wraps landlock_create_ruleset.
    // Safety: with a NULL attribute pointer, size 0 and the VERSION flag the kernel reads and
    // writes no memory; it only returns a number.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret >= 0 {
        return Ok(ret as u32);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) => Err(LandlockAbsence::NotBuilt),
        Some(libc::EOPNOTSUPP) => Err(LandlockAbsence::Disabled),
        Some(e) => Err(LandlockAbsence::Other(e)),
        None => Err(LandlockAbsence::Other(0)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_probe_agrees_with_sysfs() {
        // /sys/kernel/security/lsm lists landlock exactly when it is enabled at boot.
        let lsm = std::fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
        match super::abi() {
            Ok(v) => assert!(v >= 1),
            Err(super::LandlockAbsence::Disabled | super::LandlockAbsence::NotBuilt) => {
                assert!(!lsm.split(',').any(|m| m.trim() == "landlock"), "{lsm}")
            }
            Err(e) => panic!("unexpected: {e:?}"),
        }
    }
}
