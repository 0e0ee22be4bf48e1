//! MCP for BDK, on `rmcp`: the client side (an agent's `mcp-connections/`,
//! over stdio and streamable HTTP; module [`client`]) and the server side
//! (the `/v1/mcp` and `/v1/mcp/tools` surfaces and `bdk mcp` over stdio;
//! module [`server`]), and OAuth sign-in for HTTP connections that need it
//! (module [`oauth`]). It must stay the only crate that knows `rmcp`.

pub mod client;
pub mod oauth;
pub mod server;
