//! shofer-core: the pure logic of shofer — no processes, no async, no syscalls.
//!
//! - [`policy`]: the sandbox [`policy::Policy`] (the writable set and the network choice), the
//!   [`policy::Backend`]s, and which [`policy::Protection`]s each backend enforces at a
//!   Landlock ABI. `shofer-sandbox` builds a policy from the command line and the filesystem,
//!   then asks [`policy::protections`] what to report and [`policy::degradations`] whether to
//!   refuse.
//! - [`policyfile`]: the policy files and the flags as one model, merged (a project's file only
//!   narrows), with each value's origin.
//! - [`rights`]: the pinned Landlock access-right sets, one per ABI.
//! - [`preview`]: the head/tail preview buffer of a command's output ([`preview::HeadTail`]).
//! - [`text`]: the result texts the agent reads (templates, sizes, exit status, fixed messages).
//! - [`artifact`]: execution ids and the validated artifact id `cmd-<digits>.txt`.
//! - [`denial`]: the hint line that tells a sandbox denial from a bug.
//! - [`egress`]: the allow-list of `--net proxy` and which addresses are not the public internet.
//! - [`strip`]: the streaming filter that removes terminal control bytes from output.
//! - [`gitenv`]: git configuration handed to a command through `GIT_CONFIG_COUNT`.
//! - [`lexical`]: paths cleaned by their text alone (`..`, `.`), as many tools read them.
//! - [`secretenv`]: the secret environment variables a command does not inherit.
//! - [`secretpaths`]: the secret locations (credential files and directories) a command cannot read.
//!
//! ```
//! use shofer_core::policy::{degradations, Backend, NetPolicy};
//! // Landlock ABI 2 cannot deny truncate(2): running there is a degradation.
//! assert!(!degradations(Backend::Landlock, 2, NetPolicy::Allow, true, true).is_empty());
//! assert!(degradations(Backend::Landlock, 3, NetPolicy::Allow, true, true).is_empty());
//! ```
#![deny(missing_docs)]

pub mod artifact;
pub mod denial;
pub mod egress;
pub mod gitenv;
pub mod lexical;
pub mod limits;
pub mod policy;
pub mod policyfile;
pub mod preview;
pub mod rights;
pub mod secretenv;
pub mod secretpaths;
pub mod strip;
pub mod text;
