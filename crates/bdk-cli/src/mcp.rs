//! `bdk mcp`: the agent as an MCP server over stdio, so that desktop MCP
//! clients can launch it directly. It serves `ask`, `check` and the agent's
//! server tools as principal `local`; stdout carries only MCP messages and
//! every log line goes to stderr.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use bdk_mcp::server::{McpServer, Principal, Surface};

use crate::support::{OK, open_host};

pub(crate) mod login;

/// How long running turns get to finish once the client has gone.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves until the client closes stdin.
pub(crate) async fn run(dir: &Path, state_root: &Path) -> Result<u8> {
    let (host, _lock) = match open_host(dir, state_root, None).await? {
        Ok(h) => h,
        Err(code) => return Ok(code),
    };
    tracing::info!(agent = %host.project().name, "serving MCP over stdio");
    let served = McpServer::new(host.clone(), Principal::local(), Surface::Local)
        .serve_stdio()
        .await
        .context("the MCP session over stdio failed");
    host.shutdown(SHUTDOWN_GRACE).await;
    served?;
    Ok(OK)
}
