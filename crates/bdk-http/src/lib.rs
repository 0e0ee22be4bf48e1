//! The HTTP surface of `bdk serve`: an axum router over the core host
//! (sessions, streams, tools, discovery, MCP, evals, playground, docs).
//!
//! Not built yet: this crate is reserved for the HTTP issue and exports
//! nothing. It must stay the only crate that knows axum.
