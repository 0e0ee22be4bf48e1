//! Commands next to a running `bdk serve`.
//!
//! While `bdk serve` runs on a project it holds the state root's lock (see
//! `lock.rs`), and a second process must not append to the same store. The
//! server records its agent's base URL in the lock file, so `bdk run`,
//! `bdk call` and `bdk evals` send their work through that server's public
//! API (bdk-api's client) instead of failing, and say so on stderr. A
//! server that wants a bearer token gets the one in `BDK_TOKEN`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use bdk_api::{Client, ClientError, ErrorAnswer};
use bdk_events::{Envelope, SessionId, TurnId};
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::lock::{self, Acquired, StateLock};

/// The environment variable holding the bearer token for a running server.
pub const TOKEN_ENV: &str = "BDK_TOKEN";

/// How long stopping a turn on the server may take before `bdk run` gives
/// up on it (Ctrl-C should not hang).
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

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

/// A call's outcome: what was asked for, or the server's refusal (its
/// error body, for the command to print and map to an exit code).
pub type Reply<T> = std::result::Result<T, ErrorAnswer>;

/// An agent's base URL on a running server.
#[derive(Clone)]
pub struct Remote {
    client: Client,
}

impl Remote {
    fn new(base: &str, token: Option<String>) -> Result<Remote> {
        let http = bdk_models::net::http_client().map_err(|e| anyhow!("{e}"))?;
        let client = Client::new(base, http)
            .map_err(|_| {
                anyhow!(
                    "`{base}` is not an http:// or https:// URL (expected http://HOST:PORT/AGENT)"
                )
            })?
            .bearer(token);
        Ok(Remote { client })
    }

    /// The agent served at `url`, its base URL as `bdk serve` prints it
    /// (`http://127.0.0.1:3000/weather`), with the bearer token in
    /// `BDK_TOKEN` when that is set.
    pub fn connect(url: &str) -> Result<Remote> {
        Remote::new(url, std::env::var(TOKEN_ENV).ok())
    }

    /// The agent's base URL.
    pub fn base(&self) -> &str {
        self.client.base()
    }

    /// The typed client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A call's result as a command reads it: the server's refusal is a
    /// [`Reply`] to print; a missing bearer token and a server that cannot
    /// be reached are errors, with what to do about them.
    pub fn reply<T>(&self, result: std::result::Result<T, ClientError>) -> Result<Reply<T>> {
        match result {
            Ok(v) => Ok(Ok(v)),
            Err(ClientError::Refused {
                status: 401, what, ..
            }) => bail!(
                "{what}: the server at {} wants a bearer token: set {TOKEN_ENV}",
                self.base()
            ),
            Err(ClientError::Refused { answer, .. }) => Ok(Err(*answer)),
            Err(e @ ClientError::Transport { .. }) => {
                Err(anyhow!("{e}; is the server still running?"))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The session's events from index `from` on, then each new one as it
    /// is recorded; the client reconnects after a dropped connection. A
    /// refusal (no such session, not the caller's) is the stream's error.
    pub fn follow(&self, session: &SessionId, from: u64) -> BoxStream<'static, Result<Envelope>> {
        self.client
            .stream(session, from)
            .map(|e| e.map_err(anyhow::Error::from))
            .boxed()
    }

    /// Follows the session's stream until `turn` has ended and the session
    /// rests again.
    pub async fn wait_turn(&self, session: &SessionId, turn: &TurnId) -> Result<()> {
        let mut events = self.client.stream(session, 0);
        let mut ended = false;
        while let Some(env) = events.next().await {
            let env = env?;
            let kind = env.kind();
            if env.turn_id.as_ref() == Some(turn)
                && matches!(kind, "turn.completed" | "turn.failed")
            {
                ended = true;
            }
            if ended
                && matches!(
                    kind,
                    "session.waiting" | "session.completed" | "session.failed"
                )
            {
                return Ok(());
            }
        }
        if ended {
            return Ok(());
        }
        bail!("the event stream of {session} ended before the turn finished")
    }

    /// Stops the session's running turn (Ctrl-C during `bdk run`).
    pub async fn stop(&self, session: &SessionId) {
        match tokio::time::timeout(STOP_TIMEOUT, self.client.stop(session)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => errln!("warning: could not stop the turn on the server: {e}"),
            Err(_) => errln!("warning: the server did not confirm the stop in time"),
        }
    }

    /// Every event of the session.
    pub async fn events(&self, session: &SessionId) -> Result<Vec<Envelope>> {
        Ok(self.client.events(session).await?)
    }
}
