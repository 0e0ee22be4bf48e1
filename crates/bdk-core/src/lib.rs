//! The BDK agent runtime: project discovery and diagnostics, the model port
//! and the scripted provider, tools, the agent loop (turns and steps), the
//! session runtime ("host"), and hooks.
//!
//! It builds on `bdk-events` (the wire format) and `bdk-store` (the storage
//! port) and never names a crate above it: HTTP, MCP, the scheduler and the
//! CLI reach the runtime through [`host::Host`]. Outbound HTTP happens only in
//! model providers, `url` tools and `url` hooks.

pub mod agent;
pub mod clock;
pub mod containment;
pub mod context;
pub mod cron;
pub mod endpoint;
pub mod hooks;
pub mod host;
pub mod mcp;
pub mod model;
pub mod net;
pub mod project;
pub mod reminders;
pub mod replica;
pub mod tool;
pub mod trajectory;
pub mod workspace;

pub use project::{Diagnostic, Discovery, Project, Severity, discover};
