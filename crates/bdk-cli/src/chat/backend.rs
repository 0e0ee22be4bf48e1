//! Where `bdk chat` sends its messages: the agent's host in this process,
//! or a running server's HTTP API. Both offer the same few operations
//! (send, follow the events, stop, answer an approval, read the events),
//! so the conversation above is written once.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, anyhow};
use bdk_core::host::{FollowUp, Host, HostError, StartSession};
use bdk_events::{Envelope, SessionId, SessionMode};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};

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

    fn of_body(body: &Value) -> Refusal {
        Refusal {
            code: body["error"].as_str().unwrap_or("error").to_owned(),
            message: body["message"]
                .as_str()
                .unwrap_or("the server gave no reason")
                .to_owned(),
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
                let answer = remote.get("/v1/info").await?;
                if answer.status != 200 {
                    let refusal = Refusal::of_body(&answer.body);
                    return Err(anyhow!(
                        "no agent answers at {} (GET /v1/info: {} {}: {})",
                        remote.base(),
                        answer.status,
                        refusal.code,
                        refusal.message
                    ));
                }
                Ok(format!(
                    "{} ({}) at {}",
                    answer.body["name"].as_str().unwrap_or("agent"),
                    answer.body["model"].as_str().unwrap_or("default model"),
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
                let answer = match session {
                    Some(id) => {
                        remote
                            .post(&format!("/v1/session/{id}"), &json!({"message": message}))
                            .await?
                    }
                    None => {
                        remote
                            .post("/v1/session", &json!({"message": message}))
                            .await?
                    }
                };
                if !(200..300).contains(&answer.status) {
                    return Ok(Err(Refusal::of_body(&answer.body)));
                }
                let Some(session) = answer.body["sessionId"].as_str() else {
                    return Err(anyhow!(
                        "the server's answer names no session: {}",
                        answer.body
                    ));
                };
                Ok(Ok(Accepted {
                    session: session.to_owned(),
                    turn: answer.body["turnId"].as_str().map(str::to_owned),
                    index: None,
                }))
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
            Backend::Remote { remote, .. } => remote.follow(session, from).await,
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
                remote.stop(session).await;
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
                let mut body = json!({"decision": if approved { "approve" } else { "deny" }});
                if let Some(reason) = reason {
                    body["reason"] = json!(reason);
                }
                let answer = remote
                    .post(&format!("/v1/session/{session}/approvals/{call_id}"), &body)
                    .await?;
                if (200..300).contains(&answer.status) {
                    Ok(Ok(()))
                } else {
                    Ok(Err(Refusal::of_body(&answer.body)))
                }
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
                let answer = remote
                    .get(&format!("/v1/session/{id}/events?format=json"))
                    .await?;
                if !(200..300).contains(&answer.status) {
                    return Ok(Err(Refusal::of_body(&answer.body)));
                }
                let events = serde_json::from_value(answer.body["events"].clone())
                    .map_err(|e| anyhow!("the server's events do not read as events: {e}"))?;
                Ok(Ok(events))
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
            } => Ok(format!("{}/v1/session/{session}/events", remote.base())),
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
