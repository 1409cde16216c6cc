//! The Landlock backend: turning an [`OpenedPolicy`] into a created (not yet applied) ruleset.
//!
//! Handled rights are the pinned set of [`shofer_core::rights`] for the effective ABI; the same
//! set is granted on every writable directory (including `REFER` from ABI 2, so renames inside
//! the writable set work) and its file subset on writable files. From ABI 6 signals and
//! abstract unix sockets are scoped to the sandbox's domain; with `--net deny`, from ABI 4,
//! TCP bind and connect are handled with no port allowed. The compatibility level is
//! `HardRequirement`: a right the kernel does not know fails creation rather than being
//! dropped (we already capped the ABI to what the kernel reports).
//!
//! From ABI 9, `RESOLVE_UNIX` (connecting to a pathname unix socket) is granted only beneath
//! the worktree and the `--allow-unix` paths — not on `/tmp` or the other writable paths — so
//! the kernel lets the command reach its own sockets (created in its domain) and those, and
//! nothing else.
//!
//! When a secret location is hidden ([`crate::secretpaths`]), `READ_FILE` and `READ_DIR` are
//! handled too: granted on every writable rule and on the [`ReadRules`], refused elsewhere.
//!
//! Kernel doc: <https://docs.kernel.org/userspace-api/landlock.html>.
//!
//! The backend's plan ([`plan`]) is the ruleset alone; the namespace backends layer the same
//! ruleset on their mounts ([`crate::namespaces::plan`]).

use landlock::{
    AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr,
};
use shofer_core::policy::{NetPolicy, RuleOrigin};
use shofer_core::rights;

use std::os::fd::{AsFd, AsRawFd};

use crate::capabilities;
use crate::error::SetupError;
use crate::secretpaths::ReadRules;
use crate::writable::OpenedPolicy;

/// Creates the ruleset for `opened`, the `--allow-unix` paths `unix` and the secret
/// locations' read rules `reads` (with the host's `/dev` when the command sees it,
/// `host_dev`) at Landlock ABI `abi` (1..=10): [`begin`], then [`finish`]. The rule
/// descriptors are only borrowed (the namespace backends bind-mount them too). Apply the
/// result with `RulesetCreated::restrict_self` in the child, last before exec.
///
/// # Errors
/// [`SetupError::Landlock`] when the kernel refuses the ruleset or a rule.
pub(crate) fn create(
    opened: &OpenedPolicy,
    unix: &crate::gate::AllowUnix,
    reads: &ReadRules,
    host_dev: bool,
    abi: u32,
) -> Result<RulesetCreated, SetupError> {
    finish(
        begin(reads, host_dev, abi, opened.policy.net)?,
        opened,
        unix,
        reads.active(),
        abi,
    )
}

/// The part of [`create`] that needs no writable set, so it can be made beside the
/// supervisor's steps (`crate::secretpaths::Ahead`): the ruleset with its handled rights
/// (reading too when `reads` hides anything, the network with `--net deny`, the scopes)
/// and the secret locations' read rules.
///
/// # Errors
/// [`SetupError::Landlock`] when the kernel refuses the ruleset or a rule.
pub(crate) fn begin(
    reads: &ReadRules,
    host_dev: bool,
    abi: u32,
    net: NetPolicy,
) -> Result<RulesetCreated, SetupError> {
    let err = |source| SetupError::Landlock { rule: None, source };
    let read = read_rights(reads.active());
    let fs = rights::fs_write_rights(abi) | read;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(fs)
        .map_err(err)?;
    let net_rights = rights::net_rights(abi);
    if net == NetPolicy::Deny && !net_rights.is_empty() {
        ruleset = ruleset.handle_access(net_rights).map_err(err)?;
    }
    let scopes = rights::scopes(abi);
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scopes).map_err(err)?;
    }
    let created = ruleset.create().map_err(err)?;
    if !reads.active() {
        return Ok(created);
    }
    // The secret locations (crate::secretpaths): reading allowed everywhere else, a rule per
    // entry of each directory that holds one.
    let secret_err = |source| SetupError::Syscall {
        op: "landlock_add_rule: a read rule beside a secret location",
        source,
    };
    let ruleset_fd = created
        .try_clone()
        .ok()
        .and_then(Option::<std::os::fd::OwnedFd>::from)
        .ok_or_else(|| secret_err(std::io::Error::from_raw_os_error(libc::EBADF)))?;
    for fd in &reads.listable {
        add_read_rule(&ruleset_fd, fd, AccessFs::ReadDir.into()).map_err(secret_err)?;
    }
    let dev = if host_dev {
        reads.host_dev()
    } else {
        Vec::new()
    };
    for (fd, is_dir) in reads.readable.iter().chain(&dev) {
        let file = read & AccessFs::ReadFile;
        match add_read_rule(&ruleset_fd, fd, if *is_dir { read } else { file }) {
            // Listed as a directory, a file by now (swapped since): a file's rights.
            Err(e) if *is_dir && e.raw_os_error() == Some(libc::EINVAL) => {
                add_read_rule(&ruleset_fd, fd, file).map_err(secret_err)?;
            }
            r => r.map_err(secret_err)?,
        }
    }
    Ok(created)
}

/// `landlock_add_rule(2)`'s `struct landlock_path_beneath_attr`.
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Adds a rule granting `access` (read rights, which every ABI knows, handled by the ruleset)
/// beneath `fd` to the ruleset `ruleset`: the raw call, since the landlock crate's `add_rule`
/// first asks `fstat` whether the descriptor is a directory, and a dense home's read rules
/// are hundreds (the caller knows the kind from the listing).
fn add_read_rule(
    ruleset: &impl AsFd,
    fd: &impl AsFd,
    access: BitFlags<AccessFs>,
) -> std::io::Result<()> {
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    let attr = PathBeneathAttr {
        allowed_access: access.bits(),
        parent_fd: fd.as_fd().as_raw_fd(),
    };
    // Safety: both descriptors are open for the call (borrowed); `attr` is the kernel's
    // packed layout, read during the call only; flags must be 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_fd().as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            std::ptr::addr_of!(attr),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Adds to `created` (from [`begin`], whose `reads` hid something when `reading`) the rules
/// of the writable set `opened` and of the `--allow-unix` paths `unix`, at ABI `abi`.
///
/// # Errors
/// [`SetupError::Landlock`] when the kernel refuses a rule.
pub(crate) fn finish(
    mut created: RulesetCreated,
    opened: &OpenedPolicy,
    unix: &crate::gate::AllowUnix,
    reading: bool,
    abi: u32,
) -> Result<RulesetCreated, SetupError> {
    let read = read_rights(reading);
    let fs = rights::fs_write_rights(abi) | read;
    let file = rights::fs_file_rights(abi) | (read & AccessFs::ReadFile);
    for (rule, fd) in opened.policy.writable.iter().zip(&opened.fds) {
        let mut access = if rule.is_dir { fs } else { file };
        if rule.origin != RuleOrigin::Worktree {
            access &= !AccessFs::ResolveUnix;
        }
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|source| SetupError::Landlock {
                rule: Some(rule.path.clone()),
                source,
            })?;
    }
    if fs.contains(AccessFs::ResolveUnix) {
        for (path, fd) in unix.paths.iter().zip(&unix.fds) {
            created = created
                .add_rule(PathBeneath::new(fd, AccessFs::ResolveUnix))
                .map_err(|source| SetupError::Landlock {
                    rule: Some(path.clone()),
                    source,
                })?;
        }
    }
    Ok(created)
}

/// The `landlock` backend's plan: the ruleset for `opened` and the secret locations
/// `secrets` at `abi` (begun beside the supervisor's steps, `ahead`, when that one fits),
/// and whether the caller holds capabilities to drop (root, or file capabilities).
///
/// # Errors
/// As [`create`].
pub(crate) fn plan(
    opened: &OpenedPolicy,
    unix: &crate::gate::AllowUnix,
    secrets: &crate::secretpaths::Resolved,
    ahead: Option<crate::secretpaths::Ahead>,
    abi: u32,
) -> Result<LandlockPlan, SetupError> {
    // Safety: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let ruleset = match ahead.and_then(|a| a.fits(secrets, abi, opened.policy.net)) {
        Some((created, reading)) => finish(created, opened, unix, reading, abi)?,
        None => create(opened, unix, &secrets.read_rules(), true, abi)?,
    };
    Ok(LandlockPlan {
        ruleset,
        caller_privileged: root || capabilities::holds_any(),
        abi,
    })
}

/// Adds a writable directory to `created` at ABI `abi`: a linked worktree's common dir on the
/// namespace backends, where read-only bind mounts keep everything but `packed-refs`,
/// `objects/`, `refs/` and `logs/` from the command (`crate::git::protect::CommonLayer`).
///
/// # Errors
/// [`SetupError::Syscall`] when the path cannot be opened, [`SetupError::Landlock`] when the
/// kernel refuses the rule.
pub(crate) fn add_dir(
    created: RulesetCreated,
    path: &std::path::Path,
    reads: &ReadRules,
    abi: u32,
) -> Result<RulesetCreated, SetupError> {
    let fd = crate::paths::open_nofollow(path).map_err(|source| SetupError::Syscall {
        op: "opening the git common dir for its Landlock rule",
        source,
    })?;
    // Like every writable rule but the worktree's: no unix-socket connects (ABI 9), so the
    // command cannot reach a host daemon listening there (git's fsmonitor--daemon.ipc).
    created
        .add_rule(PathBeneath::new(
            &fd,
            (rights::fs_write_rights(abi) | read_rights(reads.active())) & !AccessFs::ResolveUnix,
        ))
        .map_err(|source| SetupError::Landlock {
            rule: Some(path.to_path_buf()),
            source,
        })
}

/// The read rights the ruleset handles: both when a secret location is hidden, else none
/// (reading is not Landlock's business then, and the run pays nothing for it).
fn read_rights(hiding: bool) -> BitFlags<AccessFs> {
    if hiding {
        AccessFs::ReadFile | AccessFs::ReadDir
    } else {
        BitFlags::EMPTY
    }
}

/// The `landlock` backend's part of the plan.
pub(crate) struct LandlockPlan {
    /// Created, applied by the child last before exec.
    pub ruleset: RulesetCreated,
    /// The caller holds capabilities (root, or file capabilities): only then is there
    /// anything to drop (and the right to drop it).
    pub caller_privileged: bool,
    /// The ABI the ruleset is made for.
    pub abi: u32,
}
