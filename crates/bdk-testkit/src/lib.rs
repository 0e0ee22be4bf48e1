//! What the test suites of the workspace share, written once: agent folders
//! on disk ([`folder`]), hosts over a file store ([`host`]), scripted-rule
//! presets and their native tools ([`rules`]), a fake of GitHub's REST API
//! ([`github`]), a fake of Slack's Web API with the payloads Slack sends an
//! app ([`slack`]), starting sessions and waiting
//! for their turns ([`session`]), waiters driven by the store's
//! event subscription ([`wait`]) with a bounded poll only for what no event
//! announces ([`poll`]), and the redaction that makes event sequences
//! snapshot-able ([`snapshot`]).
//!
//! A dev-only crate: any crate may name it as a dev-dependency and none as a
//! normal or build dependency (`xtask/src/edges.rs` enforces both). It
//! depends on the runtime and below, never on a surface crate, so crates
//! above the runtime use it as much as the runtime's own integration tests
//! do. Its helpers panic with a message instead of returning errors: a
//! failed helper is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a failure is a panic that names what went wrong"
)]

pub mod endpoint;
pub mod folder;
pub mod github;
pub mod host;
pub mod poll;
pub mod rules;
pub mod session;
pub mod slack;
pub mod snapshot;
pub mod wait;

pub use folder::{AgentFolder, write_files};
pub use host::{TestHost, host_over};
pub use poll::PATIENCE;
