//! The integration tests of this crate, as one test binary (one link of
//! the dependency graph instead of one per file): each module is the
//! former test file of the same name.

mod chat;
mod cli;
mod common;
mod connections;
mod conventions;
mod cost_replay;
mod dev;
mod evals_approvals;
mod evals_cli;
mod experiments;
mod gates;
mod github;
mod github_cli;
mod handlers;
mod hooks;
mod local_model;
mod logs;
mod mcp_connections;
mod mcp_oauth;
mod mcp_peers;
mod otel;
mod playground;
mod reminders_serve;
mod replicas;
mod sandbox;
mod serve;
mod slack;
mod slack_cli;
mod stream_delete;
mod walkthrough;
