//! Running programs for BDK: tools, processes, containment, scratch
//! directories and session workspaces, the host endpoint's grant, handler
//! programs and result gates.
//!
//! Everything an agent declares that runs as code runs through here: the
//! [`tool::Tool`] port and its kinds (command tools over stdin/stdout,
//! native Rust tools, the built-ins), every process they start with its
//! timeouts, output caps and process-tree cleanup, the host's
//! [`containment::Containment`] over a `bdk_sandbox::Sandbox`, the
//! beneath-a-handle file operations of [`workspace`], the
//! [`handler`] runner and the [`gate`] port the turn loop judges replies
//! with.
//!
//! It reads the agent folder's data from `bdk-project` and knows nothing
//! of sessions, the turn loop or the host: `bdk-core` builds those on top
//! of it and re-exports its modules under their old paths
//! (`bdk_core::tool`, `bdk_core::workspace`, ...).
//!
//! A program run once under a host's containment (here without a sandbox,
//! so uncontained: an embedder passes a `bdk_sandbox::Sandbox` to
//! [`containment::Containment::new`] to confine it):
//!
//! ```
//! use std::time::Duration;
//!
//! use bdk_exec::containment::{Containment, Program, ProgramEnd};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let state = tempfile::tempdir().unwrap();
//! let program = Program {
//!     argv: vec!["sh".into(), "-c".into(), "tr a-z A-Z".into()],
//!     cwd: state.path().to_path_buf(),
//!     read: Vec::new(),
//!     stdin: b"hello".to_vec(),
//!     env: Vec::new(),
//!     max_stdout: 1024,
//!     timeout: Duration::from_secs(10),
//! };
//! let end = Containment::default()
//!     .run(program, state.path(), &CancellationToken::new())
//!     .await;
//! let ProgramEnd::Exited { status, stdout, .. } = end else {
//!     panic!("{end:?}");
//! };
//! assert!(status.success());
//! assert_eq!(stdout, b"HELLO");
//! # }
//! ```
//!
//! Architecture invariant: no module here names a session store, the host
//! or HTTP; a port that needs the host ([`tool::ToolServices`],
//! [`tool::McpHub`]) is a trait the host implements.

pub mod containment;
pub mod gate;
pub mod grant;
pub mod handler;
mod json_schema;
mod process;
mod scratch;
pub mod tool;
pub mod workspace;
