//! MCP for BDK: the client side (an agent's `mcp-connections/`, over stdio and
//! streamable HTTP) and the server side (the `/v1/mcp` and `/v1/mcp/tools`
//! surfaces), built on `rmcp`.
//!
//! Not built yet: this crate is reserved for the MCP issue. Today it exports
//! nothing, and the core reports MCP connection manifests it parses (see
//! `bdk_core::project`) without connecting to them. It must stay the only crate
//! that knows `rmcp`.
