//! Pinned Landlock access-right sets, one per ABI.
//!
//! shofer never asks for "every right this build knows": each ABI maps to the exact set of
//! write-class rights that was reviewed for it, so a newer `landlock` crate can never widen or
//! narrow the policy behind our back (see the `ABI` warning in the `landlock` crate and
//! <https://docs.kernel.org/userspace-api/landlock.html#compatibility>).
//!
//! Reads (`ReadFile`, `ReadDir`) and `Execute` are never handled: the policy lets a command
//! read and run anything.

use landlock::{make_bitflags, AccessFs, AccessNet, BitFlags, Scope, ABI};

/// The newest Landlock ABI whose rights are pinned here. A kernel reporting a newer ABI is
/// used at this level (its extra rights are not handled, and the report says so).
pub const NEWEST_PINNED_ABI: u32 = 10;

/// Turns an ABI number (1..=10) into the `landlock` crate's enum; 0 and negatives are
/// `Unsupported`, numbers above [`NEWEST_PINNED_ABI`] are capped to it.
pub fn abi_from_number(n: u32) -> ABI {
    ABI::from(n.min(NEWEST_PINNED_ABI) as i32)
}

/// The filesystem rights shofer handles (and therefore denies outside the writable set) at
/// Landlock ABI `abi` (1..=10). Empty for 0.
///
/// - ABI 1 (Linux 5.13): write, remove and make rights. Renames and links across directories
///   are always denied at this level (`REFER` is implicitly handled and cannot be granted).
/// - ABI 2 (5.19): + `REFER`, granted inside the writable set so cross-directory renames work.
/// - ABI 3 (6.2): + `TRUNCATE`.
/// - ABI 5 (6.10): + `IOCTL_DEV`, granted on the terminal devices.
/// - ABI 9 (7.1): + `RESOLVE_UNIX`: `connect()` to pathname unix sockets outside the writable set.
pub fn fs_write_rights(abi: u32) -> BitFlags<AccessFs> {
    let v1 = make_bitflags!(AccessFs::{
        WriteFile | RemoveDir | RemoveFile | MakeChar | MakeDir | MakeReg | MakeSock
            | MakeFifo | MakeBlock | MakeSym
    });
    match abi {
        0 => BitFlags::EMPTY,
        1 => v1,
        2 => v1 | AccessFs::Refer,
        3 | 4 => v1 | AccessFs::Refer | AccessFs::Truncate,
        5..=8 => v1 | AccessFs::Refer | AccessFs::Truncate | AccessFs::IoctlDev,
        _ => v1 | AccessFs::Refer | AccessFs::Truncate | AccessFs::IoctlDev | AccessFs::ResolveUnix,
    }
}

/// The rights granted on a writable *file* rule (as opposed to a directory): Landlock refuses
/// directory-only rights on a non-directory.
pub fn fs_file_rights(abi: u32) -> BitFlags<AccessFs> {
    fs_write_rights(abi)
        & make_bitflags!(AccessFs::{ WriteFile | Truncate | IoctlDev | ResolveUnix })
}

/// The network rights handled with `--net deny` at ABI `abi`: TCP bind and connect from ABI 4
/// (Linux 6.7); nothing before.
pub fn net_rights(abi: u32) -> BitFlags<AccessNet> {
    if abi >= 4 {
        AccessNet::BindTcp | AccessNet::ConnectTcp
    } else {
        BitFlags::EMPTY
    }
}

/// The IPC scopes at ABI `abi`: signals and abstract unix sockets to processes outside the
/// sandbox's domain, from ABI 6 (Linux 6.12).
pub fn scopes(abi: u32) -> BitFlags<Scope> {
    if abi >= 6 {
        Scope::Signal | Scope::AbstractUnixSocket
    } else {
        BitFlags::EMPTY
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use landlock::Access;

    #[test]
    fn pinned_sets_match_the_crate_reviewed_write_sets() {
        // If the crate ever changes what it calls "write" for an ABI, this fails and the
        // difference gets reviewed instead of silently shipping.
        for n in 1..=NEWEST_PINNED_ABI {
            assert_eq!(
                fs_write_rights(n),
                AccessFs::from_write(abi_from_number(n)),
                "ABI {n}"
            );
        }
    }

    #[test]
    fn reads_and_execute_are_never_handled() {
        for n in 0..=NEWEST_PINNED_ABI {
            let rights = fs_write_rights(n);
            assert!(!rights.contains(AccessFs::ReadFile));
            assert!(!rights.contains(AccessFs::ReadDir));
            assert!(!rights.contains(AccessFs::Execute));
        }
    }

    #[test]
    fn file_rights_are_a_subset_legal_on_files() {
        for n in 1..=NEWEST_PINNED_ABI {
            let file = fs_file_rights(n);
            assert!(fs_write_rights(n).contains(file));
            assert_eq!(
                file & !AccessFs::from_file(abi_from_number(n)),
                BitFlags::EMPTY
            );
        }
    }

    #[test]
    fn net_and_scopes_start_at_their_abi() {
        assert!(net_rights(3).is_empty());
        assert_eq!(net_rights(4), AccessNet::BindTcp | AccessNet::ConnectTcp);
        assert!(scopes(5).is_empty());
        assert_eq!(scopes(6), Scope::from_all(ABI::V6));
    }

    #[test]
    fn abi_numbers_above_the_pinned_one_are_capped() {
        assert_eq!(abi_from_number(42), ABI::V10);
        assert_eq!(abi_from_number(0), ABI::Unsupported);
    }
}
