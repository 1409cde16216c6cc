//! shofer-exec: the engine behind an agent's `execute_command` and `read_command_output`
//! tools (ARCHITECTURE §3), and the `shofer` command-line tool.
//!
//! - [`Engine`] runs commands ([`Engine::execute`] with an [`ExecRequest`]), races the soft
//!   timeout, the hard timeout and an abort token, keeps every command in a registry
//!   ([`Engine::list`], [`Engine::status`], [`Engine::wait`], [`Engine::terminate`]) and reads
//!   artifacts ([`Engine::read`]). Its settings are an [`EngineConfig`]; a worktree task adds a
//!   [`Sandbox`] (the `shofer-sandbox` wrapper).
//! - [`sessiondir`]: `shofer serve`'s own artifact directory, its owner record, and the
//!   removal of those whose server is gone.
//! - [`detach`]: `shofer run --timeout`'s detached supervisor and its state files.
//! - [`childenv`]: the non-interactive environment every command gets.
//! - [`intercept`]: the output interceptor (control bytes stripped, preview, `cmd-<id>.txt`), with
//!   [`intercept::cleanup`] and [`intercept::cleanup_by_ids`].
//! - [`tree`]: finding and killing a command's whole process tree (procfs, pidfds, child
//!   subreaper); read its module docs for what is and is not guaranteed.
//! - [`reader`]: read mode and search mode over an artifact.
//! - [`policy`]: the policy files (`config.toml`) and the flags, merged into one effective
//!   policy.
//! - [`setup`]: `shofer init`, `shofer hook` and `shofer doctor` (wiring agents to shofer).
//! - [`docs`]: shell completions and man pages of `shofer` and `shofer-sandbox`.
//!
//! The pure parts (preview buffer, result texts, artifact ids) live in `shofer_core`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), shofer_exec::ExecError> {
//! use shofer_exec::{Engine, EngineConfig, ExecRequest};
//! let engine = Engine::new(EngineConfig::new("/work/task", "/work/task-artifacts"))?;
//! let out = engine.execute(ExecRequest { command: "cargo test".into(), ..Default::default() }).await?;
//! println!("{}", out.text);
//! if let Some(id) = &out.artifact_id {
//!     let hits = engine.read(id.clone(), Some("error".into()), None, None).await;
//!     println!("{}", hits.unwrap_or_else(|e| e.to_string()));
//! }
//! # Ok(()) }
//! ```
//!
//! # Test strategy
//! Unit tests pin the texts and numbers; the integration tests in `tests/` run real processes
//! (`sh`, `sleep`, `setsid`, double forks, fork loops), each with a unique marker in its command
//! line so that the survivor check (a `/proc` scan for the marker) cannot confuse parallel
//! tests. The ENOSPC test mounts a 1 MiB tmpfs inside a private mount namespace and needs root
//! (it prints SKIP otherwise, and fails under `CI`).
#![deny(missing_docs)]

pub mod childenv;
pub mod detach;
pub mod docs;
mod engine;
pub mod guardian;
pub mod intercept;
mod pagebuf;
pub mod policy;
mod pump;
pub mod reader;
pub mod rpc_gate;
pub mod serve;
pub mod sessiondir;
pub mod setup;
pub mod shoferignore;
pub mod tree;

pub use engine::{
    Background, Engine, EngineConfig, ExecError, ExecRequest, Outcome, Sandbox, Status,
    DEFAULT_MAX_ARTIFACT_BYTES, MAX_FINISHED_RECORDS, TAG_VAR,
};
pub use tokio_util::sync::CancellationToken;
