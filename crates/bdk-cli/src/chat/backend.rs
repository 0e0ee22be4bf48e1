//! Where `bdk chat` sends its messages: the agent's host in this process,
//! or a running server's HTTP API. Both offer the same few operations
//! (send, follow the events, stop, answer an approval, read the events),
//! so the conversation above is written once.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, anyhow};
use bdk_api::sessions::{Decision, FollowUpRequest, StartSessionRequest};
use bdk_api::{ErrorAnswer, paths};
use bdk_core::host::{FollowUp, Host, HostError, StartSession};
use bdk_events::{Envelope, SessionId, SessionMode};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;

use crate::lock::StateLock;
use crate::remote::Remote;

/// How long leaving waits for a turn that is still running to settle.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The agent a chat talks to.
pub(crate) enum Backend {
    /// The host runs here, holding the state root.
    Local { host: Host, _lock: StateLock },
    /// A server runs it; `traces` is where `/trace` writes the events when
    /// there is a local state root to write them to.
    Remote {
        remote: Remote,
        traces: Option<PathBuf>,
    },
}

/// A message the agent took.
#[derive(Clone, Debug)]
pub(crate) struct Accepted {
    pub(crate) session: String,
    /// The turn it started; `None` when it was queued behind another.
    pub(crate) turn: Option<String>,
    /// The stream index of the turn's `message.received`, when known.
    pub(crate) index: Option<u64>,
}

/// A request the agent refused: its error code and message, as the HTTP API
/// would answer them.
#[derive(Clone, Debug)]
pub(crate) struct Refusal {
    pub(crate) code: String,
    pub(crate) message: String,
}

impl Refusal {
    fn of_host(e: &HostError) -> Refusal {
        Refusal {
            code: e.code().to_owned(),
            message: e.to_string(),
        }
    }

    fn of_answer(answer: ErrorAnswer) -> Refusal {
        let message = if answer.message.is_empty() {
            "the server gave no reason".to_owned()
        } else {
            answer.message
        };
        Refusal {
            code: answer.error,
            message,
        }
    }
}

/// A refusal, or the thing asked for.
pub(crate) type Answer<T> = std::result::Result<T, Refusal>;

fn session_id(id: &str) -> Answer<SessionId> {
    SessionId::parse(id).ok_or_else(|| Refusal {
        code: "invalid_session_id".into(),
        message: format!("`{id}` is not a session id (expected ses_...)"),
    })
}

impl Backend {
    /// Who answers, for the banner: the agent's name and model. Through
    /// `--url` this is also the check that a server answers there and
    /// admits the caller, before anything is typed.
    pub(crate) async fn describe(&self) -> Result<String> {
        match self {
            Backend::Local { host, .. } => {
                Ok(format!("{} ({})", host.project().name, host.model_id()))
            }
            Backend::Remote { remote, .. } => {
                let info = match remote.reply(remote.client().get::<Value>(paths::INFO).await)? {
                    Ok(info) => info,
                    Err(refusal) => {
                        return Err(anyhow!(
                            "no agent answers at {} (GET {}: {}: {})",
                            remote.base(),
                            paths::INFO,
                            refusal.error,
                            refusal.message
                        ));
                    }
                };
                Ok(format!(
                    "{} ({}) at {}",
                    info["name"].as_str().unwrap_or("agent"),
                    info["model"].as_str().unwrap_or("default model"),
                    remote.base()
                ))
            }
        }
    }

    /// Sends `message`: to `session`, or as the first message of a new chat
    /// session.
    pub(crate) async fn send(
        &self,
        session: Option<&str>,
        message: &str,
    ) -> Result<Answer<Accepted>> {
        match self {
            Backend::Local { host, .. } => {
                let result = match session {
                    Some(id) => {
                        let id = match session_id(id) {
                            Ok(id) => id,
                            Err(refusal) => return Ok(Err(refusal)),
                        };
                        let follow_up = FollowUp {
                            message: message.to_owned(),
                            ..FollowUp::default()
                        };
                        host.send(&id, follow_up).await.map(|s| Accepted {
                            session: s.session_id.to_string(),
                            turn: s.turn_id.map(|t| t.to_string()),
                            index: s.index,
                        })
                    }
                    None => host
                        .start_session(StartSession {
                            message: Some(message.to_owned()),
                            mode: SessionMode::Chat,
                            channel: "cli".into(),
                            ..StartSession::default()
                        })
                        .await
                        .map(|s| Accepted {
                            session: s.session_id.to_string(),
                            turn: s.turn_id.map(|t| t.to_string()),
                            index: s.index,
                        }),
                };
                Ok(result.map_err(|e| Refusal::of_host(&e)))
            }
            Backend::Remote { remote, .. } => {
                let client = remote.client();
                let sent = match session {
                    Some(id) => {
                        let id = match session_id(id) {
                            Ok(id) => id,
                            Err(refusal) => return Ok(Err(refusal)),
                        };
                        let body = FollowUpRequest::message(message, None);
                        remote
                            .reply(client.follow_up(&id, &body).await)?
                            .map(|a| (a.session_id, a.turn_id))
                    }
                    None => remote
                        .reply(
                            client
                                .start_session(&StartSessionRequest::message(message))
                                .await,
                        )?
                        .map(|a| (a.session_id, a.turn_id)),
                };
                Ok(sent
                    .map(|(session, turn)| Accepted {
                        session: session.to_string(),
                        turn: turn.map(|t| t.to_string()),
                        index: None,
                    })
                    .map_err(Refusal::of_answer))
            }
        }
    }

    /// The session's events from index `from` on, then live ones.
    pub(crate) async fn follow(
        &self,
        session: &str,
        from: u64,
    ) -> Result<BoxStream<'static, Result<Envelope>>> {
        match self {
            Backend::Local { host, .. } => {
                let id = session_id(session).map_err(|r| anyhow!(r.message))?;
                let events = host.subscribe(&id, from, None).await?;
                Ok(events.map(|e| e.map_err(anyhow::Error::from)).boxed())
            }
            Backend::Remote { remote, .. } => {
                let id = session_id(session).map_err(|r| anyhow!(r.message))?;
                Ok(remote.follow(&id, from))
            }
        }
    }

    /// Stops the session's running turn and waits until it has settled.
    pub(crate) async fn stop(&self, session: &str) -> Result<()> {
        match self {
            Backend::Local { host, .. } => {
                let id = session_id(session).map_err(|r| anyhow!(r.message))?;
                host.stop(&id, None).await?;
                Ok(())
            }
            Backend::Remote { remote, .. } => {
                let id = session_id(session).map_err(|r| anyhow!(r.message))?;
                remote.stop(&id).await;
                Ok(())
            }
        }
    }

    /// Approves or denies a parked call.
    pub(crate) async fn decide(
        &self,
        session: &str,
        call_id: &str,
        approved: bool,
        reason: Option<&str>,
    ) -> Result<Answer<()>> {
        match self {
            Backend::Local { host, .. } => {
                let id = match session_id(session) {
                    Ok(id) => id,
                    Err(refusal) => return Ok(Err(refusal)),
                };
                let decided = host
                    .resolve_approval(&id, call_id, approved, reason.map(str::to_owned), None)
                    .await;
                Ok(decided.map_err(|e| Refusal::of_host(&e)))
            }
            Backend::Remote { remote, .. } => {
                let id = match session_id(session) {
                    Ok(id) => id,
                    Err(refusal) => return Ok(Err(refusal)),
                };
                let decision = if approved {
                    Decision::Approve
                } else {
                    Decision::Deny
                };
                let decided = remote
                    .client()
                    .decide(&id, call_id, decision, reason.map(str::to_owned))
                    .await;
                Ok(remote
                    .reply(decided)?
                    .map(|_| ())
                    .map_err(Refusal::of_answer))
            }
        }
    }

    /// Every recorded event of the session, or why it cannot be read (it
    /// does not exist, it is not the caller's, it is damaged).
    pub(crate) async fn events(&self, session: &str) -> Result<Answer<Vec<Envelope>>> {
        let id = match session_id(session) {
            Ok(id) => id,
            Err(refusal) => return Ok(Err(refusal)),
        };
        match self {
            Backend::Local { host, .. } => Ok(host
                .events(&id, 0, None)
                .await
                .map_err(|e| Refusal::of_host(&e))),
            Backend::Remote { remote, .. } => {
                let events = remote.client().events(&id).await;
                Ok(remote.reply(events)?.map_err(Refusal::of_answer))
            }
        }
    }

    /// Writes the session's events where `bdk run` writes its traces, when
    /// there is such a place here; the file, or where the server serves them.
    pub(crate) async fn write_trace(&self, session: &str, events: &[Envelope]) -> Result<String> {
        match self {
            Backend::Local { host, .. } => {
                let id = session_id(session).map_err(|r| anyhow!(r.message))?;
                let path = crate::trace::write_trace(host.store().as_ref(), &id, events).await?;
                Ok(path.display().to_string())
            }
            Backend::Remote {
                traces: Some(dir), ..
            } => {
                let path = crate::trace::write_trace_to(dir, session, events).await?;
                Ok(path.display().to_string())
            }
            Backend::Remote {
                remote,
                traces: None,
            } => Ok(format!(
                "{}{}",
                remote.base(),
                paths::fill(paths::SESSION_EVENTS, &[session])
            )),
        }
    }

    /// Leaves: a turn still running here is recorded as it ends on
    /// shutdown, and hooks get every event before the process exits.
    pub(crate) async fn close(self) {
        if let Backend::Local { host, _lock } = self {
            host.shutdown(SHUTDOWN_GRACE).await;
            crate::hooks::drain(&host).await;
        }
    }
}
