//! The integration tests of this crate, as one test binary (one link of
//! the dependency graph instead of one per file): each module is the
//! former test file of the same name.

mod builtin_tools;
mod context;
mod discovery;
mod endpoint;
mod experiments;
mod follow;
mod gates;
mod host;
mod mcp_hub;
mod native_tools;
mod providers;
mod reload;
mod replay;
mod replicas;
mod schedule_discovery;
mod session_for_key;
mod subprocess_tools;
mod tool_clock;
mod workspace;
