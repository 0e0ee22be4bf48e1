//! The trees the server shares with the programs it runs: session
//! workspaces, the scratch workspaces of direct tool calls
//! (`tool-calls/<callId>/`), and anything else a contained program may
//! write. This module owns every file operation the server does in them.
//!
//! **Invariant:** the server never opens a path in a tree a tool can write
//! by checking it first and opening it after. A tool can swap a file for a
//! symlink (or a FIFO) between the two, and the server, often root, would
//! then read or write whatever the link names. Every operation opens its
//! path beneath a directory handle of the tree's root instead ([`Tree`]:
//! `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` through
//! cap-std), judges the descriptor it opened (only regular files are read
//! or written; FIFOs, sockets and devices are refused by name, without
//! blocking), and runs on the blocking pool behind its tree's small gate
//! ([`Trees`], [`TreeRoot`]), so one session's stuck or slow file work never
//! starves the others. `cargo xtask tree-fs` (a step of `cargo xtask lint`
//! and `test`) refuses `std::fs`/`tokio::fs` path operations in the modules
//! that handle such trees, outside `tree.rs` and `owner.rs` and the lines
//! its allowlist (`xtask/tree-fs-allowlist.txt`) gives a reason for.
//!
//! The files:
//! - `path.rs`: the front door, [`resolve`] and [`Rel`]: a relative path
//!   from outside (the model, a `workspaceFiles` send, an MCP URI, a
//!   manifest) checked lexically, with the messages callers show;
//! - `tree.rs`: [`Tree`], the open tree and its operations (read, write,
//!   create directories, list, delete, inspect), and [`Folder`] for walks;
//! - `trees.rs`: [`Trees`], a host's registry of per-tree gates and the
//!   owner new files get, and [`TreeRoot`], one tree's async entry point;
//! - `owner.rs`: [`Owner`], given every file and directory a tree creates
//!   when set, and [`adopt`], which hands an existing tree to an owner;
//! - `files.rs`: a send's `workspaceFiles` ([`check_files`],
//!   [`write_files`]);
//! - `seed.rs`: [`materialize`], what a project contributes to a new
//!   workspace (skills, agent-tool scripts and their `AGENTS.md` catalog,
//!   sandbox seed files), exactly once;
//! - `error.rs`: [`WorkspaceError`].
//!
//! Instructions are deliberately not written here: they reach the model as
//! its system prompt.

mod error;
mod files;
mod owner;
mod path;
mod seed;
mod tree;
pub mod trees;

pub use error::{Access, SpecialKind, WorkspaceError};
pub use files::{check_files, write_files};
pub use owner::{ADOPT_MAX_DEPTH, Adopted, Owner, adopt};
pub use path::{Rel, resolve};
pub use seed::{MATERIALIZED_MARKER, SKILLS_DIR, materialize};
pub use tree::{Entry, Folder, Kind, Tree};
pub use trees::{FILE_OPS_PER_TREE, TreeRoot, Trees};
