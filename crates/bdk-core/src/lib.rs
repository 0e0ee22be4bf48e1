//! The BDK agent runtime: which model
//! each agent runs ([`models`]), tools, the agent loop (turns and steps), the
//! session runtime ("host"), hooks, result gates ([`gate`]), A/B experiments
//! ([`ab`]), and the port through which crates above add to a host
//! ([`extension`]: `bdk-scheduler`'s reminders).
//!
//! It builds on `bdk-events` (the wire format), `bdk-project` (the agent
//! folder as data, re-exported as [`project`] and [`cron`]), `bdk-store`
//! (the storage port) and `bdk-models` (the model port and its providers),
//! and never names
//! a crate above it: HTTP, MCP, the scheduler and the CLI reach the runtime
//! through [`host::Host`]. Its own outbound HTTP is `url` tools and `url`
//! hooks, through `bdk_models::net`'s shared client.

pub mod ab;
pub mod agent;
pub mod claims;
pub mod clock;
pub use bdk_exec::containment;
pub use bdk_project::cron;
pub mod endpoint;
pub mod extension;
pub mod follow;
pub use bdk_exec::gate;
pub use bdk_exec::handler;
pub mod hooks;
pub mod host;
mod json_schema;
pub mod mcp;
pub mod models;
pub use bdk_project as project;
pub mod replica;
pub use bdk_exec::tool;
pub mod trajectory;
pub use bdk_exec::workspace;

pub use project::{Diagnostic, Discovery, Project, Severity, discover};
