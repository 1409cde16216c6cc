//! Git behind one door: everything shofer does so that a command run in a git worktree leaves
//! the host's repository as the host's git trusts it.
pub(crate) mod freshen;
pub(crate) mod fsck;
pub(crate) mod guard;
pub(crate) mod layout;
pub(crate) mod nested;
pub mod nestedconfig;
pub(crate) mod objects;
pub(crate) mod packed_refs;
pub(crate) mod protect;
pub(crate) mod quarantine;
pub(crate) mod remove;
pub(crate) mod run;
