//! Commands next to a running `bdk serve`.
//!
//! While `bdk serve` runs on a project it holds the state root's lock (see
//! `lock.rs`), and a second process must not append to the same store. The
//! server records its agent's base URL in the lock file, so `bdk run`,
//! `bdk call` and `bdk evals` send their work through that server's public
//! API instead of failing, and say so on stderr. A server that wants a
//! bearer token gets the one in `BDK_TOKEN`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bdk_events::Envelope;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;

use crate::lock::{self, Acquired, StateLock};

/// The environment variable holding the bearer token for a running server.
pub const TOKEN_ENV: &str = "BDK_TOKEN";

/// How a command reaches the agent's state.
pub enum Access {
    /// The state root is ours: run in this process.
    Local(StateLock),
    /// A server holds it and said where it listens.
    Remote(Remote),
}

/// Takes the state root, or finds the server holding it. A root held by a
/// process that is not a server (another `bdk run`) is an error, as before.
pub fn access(state_root: &Path) -> Result<Access> {
    match lock::try_acquire(state_root)? {
        Acquired::Locked(lock) => Ok(Access::Local(lock)),
        Acquired::Held(holder) => match &holder.url {
            Some(url) => {
                let remote = Remote::new(url, std::env::var(TOKEN_ENV).ok())?;
                errln!(
                    "note: bdk serve{} holds {}; going through its API at {url}",
                    holder
                        .pid
                        .map(|p| format!(" (pid {p})"))
                        .unwrap_or_default(),
                    state_root.display()
                );
                Ok(Access::Remote(remote))
            }
            None => bail!("{}", lock::held_message(state_root, &holder)),
        },
    }
}

/// An agent's base URL on a running server.
#[derive(Clone)]
pub struct Remote {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// A server's answer: its status and JSON body.
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Remote {
    fn new(base: &str, token: Option<String>) -> Result<Remote> {
        let client = bdk_models::net::http_client().map_err(|e| anyhow!("{e}"))?;
        Ok(Remote {
            client,
            base: base.trim_end_matches('/').to_owned(),
            token: token.filter(|t| !t.trim().is_empty()),
        })
    }

    /// The agent served at `url`, its base URL as `bdk serve` prints it
    /// (`http://127.0.0.1:3000/weather`), with the bearer token in
    /// `BDK_TOKEN` when that is set.
    pub fn connect(url: &str) -> Result<Remote> {
        let parsed = reqwest::Url::parse(url)
            .with_context(|| format!("`{url}` is not a URL (expected http://HOST:PORT/AGENT)"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            bail!("`{url}` is not an http:// or https:// URL");
        }
        Remote::new(url, std::env::var(TOKEN_ENV).ok())
    }

    /// The agent's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn answer(&self, what: &str, resp: reqwest::Response) -> Result<Answer> {
        let status = resp.status().as_u16();
        let body: Value = resp
            .json()
            .await
            .with_context(|| format!("{what}: the server's answer is not JSON"))?;
        if status == 401 {
            bail!(
                "{what}: the server at {} wants a bearer token: set {TOKEN_ENV}",
                self.base
            );
        }
        Ok(Answer { status, body })
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Answer> {
        let what = format!("POST {}{path}", self.base);
        let resp = self
            .request(reqwest::Method::POST, path)
            .json(body)
            .send()
            .await
            .with_context(|| format!("{what} failed; is the server still running?"))?;
        self.answer(&what, resp).await
    }

    /// `GET path`, read as JSON.
    pub async fn get(&self, path: &str) -> Result<Answer> {
        let what = format!("GET {}{path}", self.base);
        let resp = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .with_context(|| format!("{what} failed; is the server still running?"))?;
        self.answer(&what, resp).await
    }

    /// The session's events from index `from` on, then each new one as it
    /// is recorded, until the server ends the stream. A refusal (no such
    /// session, not the caller's) is the error, with the server's message.
    pub async fn follow(
        &self,
        session: &str,
        from: u64,
    ) -> Result<BoxStream<'static, Result<Envelope>>> {
        let path = format!("/v1/session/{session}/stream?startIndex={from}");
        let what = format!("GET {}{path}", self.base);
        let resp = self
            .request(reqwest::Method::GET, &path)
            .send()
            .await
            .with_context(|| format!("{what} failed; is the server still running?"))?;
        if !resp.status().is_success() {
            let answer = self.answer(&what, resp).await?;
            let message = answer.body["message"].as_str().unwrap_or("no message");
            bail!("{what} answered {}: {message}", answer.status);
        }
        struct Reading<S> {
            body: S,
            buf: Vec<u8>,
            what: String,
            done: bool,
        }
        let state = Reading {
            body: resp.bytes_stream(),
            buf: Vec::new(),
            what,
            done: false,
        };
        let events = futures::stream::unfold(state, |mut r| async move {
            if r.done {
                return None;
            }
            loop {
                if let Some(nl) = r.buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = r.buf.drain(..=nl).collect();
                    // Heartbeats are blank lines.
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let event = serde_json::from_slice::<Envelope>(&line)
                        .map_err(|e| anyhow!("{}: a line is not an event: {e}", r.what));
                    r.done = event.is_err();
                    return Some((event, r));
                }
                match r.body.next().await {
                    Some(Ok(chunk)) => r.buf.extend_from_slice(&chunk),
                    Some(Err(e)) => {
                        r.done = true;
                        let broke = anyhow!("{}: the event stream broke: {e}", r.what);
                        return Some((Err(broke), r));
                    }
                    None => return None,
                }
            }
        });
        Ok(events.boxed())
    }

    /// Follows the session's stream until `turn` has ended and the session
    /// rests again.
    pub async fn wait_turn(&self, session: &str, turn: &str) -> Result<()> {
        let path = format!("/v1/session/{session}/stream?startIndex=0");
        let what = format!("GET {}{path}", self.base);
        let resp = self
            .request(reqwest::Method::GET, &path)
            .send()
            .await
            .with_context(|| format!("{what} failed"))?;
        if !resp.status().is_success() {
            bail!("{what} answered {}", resp.status());
        }
        let mut body = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let mut ended = false;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.with_context(|| format!("{what}: the event stream broke"))?;
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                    continue; // heartbeats and blank lines
                };
                let ty = v.get("type").and_then(Value::as_str).unwrap_or_default();
                let of_turn = v.get("turnId").and_then(Value::as_str) == Some(turn);
                if of_turn && matches!(ty, "turn.completed" | "turn.failed") {
                    ended = true;
                }
                if ended
                    && matches!(
                        ty,
                        "session.waiting" | "session.completed" | "session.failed"
                    )
                {
                    return Ok(());
                }
            }
        }
        if ended {
            return Ok(());
        }
        bail!("{what}: the event stream ended before the turn finished")
    }

    /// Stops the session's running turn (Ctrl-C during `bdk run`).
    pub async fn stop(&self, session: &str) {
        let path = format!("/v1/session/{session}/stop");
        let sent = self
            .request(reqwest::Method::POST, &path)
            .json(&serde_json::json!({}))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        if let Err(e) = sent {
            errln!("warning: could not stop the turn on the server: {e}");
        }
    }

    /// Every event of the session.
    pub async fn events(&self, session: &str) -> Result<Vec<Envelope>> {
        let path = format!("/v1/session/{session}/events");
        let what = format!("GET {}{path}", self.base);
        let resp = self
            .request(reqwest::Method::GET, &path)
            .send()
            .await
            .with_context(|| format!("{what} failed"))?;
        if !resp.status().is_success() {
            bail!("{what} answered {}", resp.status());
        }
        let bytes = resp
            .bytes()
            .await
            .with_context(|| format!("{what} failed"))?;
        let scan = bdk_events::ndjson::scan(&bytes).map_err(|e| anyhow!("{what}: {e}"))?;
        Ok(scan.events)
    }
}
