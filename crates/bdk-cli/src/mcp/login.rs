//! `bdk mcp login NAME`: signs in to an HTTP MCP connection that declares
//! `[oauth]`, through the authorization-code flow with PKCE and a loopback
//! redirect (see `bdk_mcp::oauth`), and stores the tokens under the state
//! root, where the connection reads them (refreshing them as they expire).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use bdk_core::project::McpTransport;
use bdk_mcp::oauth::{self, TokenStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{FAILED, OK, UNUSABLE};

/// How long the command waits for the browser to come back.
const SIGN_IN_PATIENCE: Duration = Duration::from_secs(300);
/// The most of a redirect request that is read.
const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// Signs in to connection `name` of the project at `dir`.
pub(crate) async fn run(
    dir: &Path,
    state_root: &Path,
    name: &str,
    open_browser: bool,
) -> Result<u8> {
    let project = match crate::support::load(dir) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let Some(conn) = project.mcp_connections.iter().find(|c| c.name == name) else {
        let names: Vec<&str> = project
            .mcp_connections
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        errln!(
            "error: the agent has no MCP connection `{name}` (it has: {})",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        );
        return Ok(UNUSABLE);
    };
    let (url, settings) = match &conn.transport {
        McpTransport::Http {
            url,
            oauth: Some(settings),
            ..
        } => (url.clone(), settings.clone()),
        _ => {
            errln!(
                "error: connection `{name}` does not sign in with OAuth; add an `[oauth]` table to {} (an HTTP connection only)",
                conn.path.display()
            );
            return Ok(UNUSABLE);
        }
    };
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen on loopback for the sign-in redirect")?;
    let redirect_uri = format!("http://{}/callback", listener.local_addr()?);
    let client = bdk_models::net::http_client().map_err(|e| anyhow::anyhow!("{e}"))?;
    let pending = match oauth::begin(&client, &url, &settings, &redirect_uri).await {
        Ok(p) => p,
        Err(e) => {
            errln!("error: {e}");
            return Ok(FAILED);
        }
    };
    outln!("Open this URL in a browser to sign in to `{name}`:");
    outln!("{}", pending.authorize_url);
    if open_browser {
        open_in_browser(&pending.authorize_url);
    }
    let redirect = match tokio::time::timeout(SIGN_IN_PATIENCE, wait_for_redirect(&listener)).await
    {
        Ok(r) => r?,
        Err(_) => {
            errln!(
                "error: no sign-in came back within {} minutes; run the command again",
                SIGN_IN_PATIENCE.as_secs() / 60
            );
            return Ok(FAILED);
        }
    };
    if redirect.state.as_deref() != Some(pending.state.as_str()) {
        errln!("error: the redirect's `state` does not match this sign-in; nothing was stored");
        return Ok(FAILED);
    }
    let code = match (redirect.code, redirect.error) {
        (Some(code), None) => code,
        (_, Some(error)) => {
            errln!("error: the authorization server refused the sign-in: {error}");
            return Ok(FAILED);
        }
        (None, None) => {
            errln!("error: the redirect carried no code");
            return Ok(FAILED);
        }
    };
    let tokens = match oauth::finish(&client, &pending, &code).await {
        Ok(t) => t,
        Err(e) => {
            errln!("error: {e}");
            return Ok(FAILED);
        }
    };
    let path = TokenStore::under(state_root)
        .save(name, &tokens)
        .context("cannot store the tokens")?;
    let expiry = tokens
        .expires_at
        .map(|at| format!(", access token valid until {}", at.to_rfc3339()))
        .unwrap_or_default();
    let renew = if tokens.refresh_token.is_some() {
        "; it is refreshed as it expires"
    } else {
        ""
    };
    outln!(
        "Signed in to `{name}`; the token is stored in {}{expiry}{renew}.",
        path.display()
    );
    Ok(OK)
}

/// What the authorization server's redirect carried.
#[derive(Debug, Default, PartialEq)]
struct Redirect {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// Serves the loopback redirect: the first `GET /callback` is the answer;
/// anything else (a browser asking for a favicon) gets a 404 and the wait
/// goes on.
async fn wait_for_redirect(listener: &TcpListener) -> Result<Redirect> {
    loop {
        let (mut socket, _) = listener.accept().await?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 2048];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST_BYTES {
            match tokio::time::timeout(Duration::from_secs(10), socket.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let head = String::from_utf8_lossy(&buf);
        let target = head
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split(' ').next())
            .unwrap_or_default();
        let Some(query) = target.strip_prefix("/callback") else {
            let _ = socket
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            continue;
        };
        let redirect = parse_redirect(query.trim_start_matches('?'));
        let page = if redirect.code.is_some() {
            "Signed in. You can close this tab and go back to the terminal."
        } else {
            "The sign-in did not complete; the terminal says why."
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = socket.write_all(response.as_bytes()).await;
        let _ = socket.shutdown().await;
        return Ok(redirect);
    }
}

fn parse_redirect(query: &str) -> Redirect {
    let mut out = Redirect::default();
    let Ok(url) = reqwest::Url::parse(&format!("http://x/?{query}")) else {
        return out;
    };
    for (k, v) in url.query_pairs() {
        match k.as_ref() {
            "code" => out.code = Some(v.into_owned()),
            "state" => out.state = Some(v.into_owned()),
            "error" => out.error = Some(v.into_owned()),
            "error_description" => {
                if let Some(e) = &mut out.error {
                    e.push_str(": ");
                    e.push_str(&v);
                }
            }
            _ => {}
        }
    }
    out
}

/// Opens `url` with the desktop's opener, quietly; the URL is printed
/// either way.
fn open_in_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if spawned.is_err() {
        errln!("note: could not start `{opener}`; open the URL above yourself");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_are_read_from_the_query() {
        assert_eq!(
            parse_redirect("code=abc%2Fd&state=xyz"),
            Redirect {
                code: Some("abc/d".into()),
                state: Some("xyz".into()),
                error: None
            }
        );
        assert_eq!(
            parse_redirect("error=access_denied&error_description=no%20thanks&state=s").error,
            Some("access_denied: no thanks".into())
        );
        assert_eq!(parse_redirect(""), Redirect::default());
    }
}
