//! What an eval talks to: the agent in this process ([`HostTarget`]) or a
//! running `bdk serve` over HTTP ([`HttpTarget`]). Both mark every session
//! they open with purpose `eval`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bdk_core::host::{FollowUp, Host, StartSession};
use bdk_events::{Envelope, SessionId, SessionMode, TurnId};
use futures::StreamExt;
use serde_json::{Value, json};

/// The purpose every eval session carries.
pub const EVAL_PURPOSE: &str = "eval";

/// A failure talking to the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TargetError(pub String);

/// A session opened by a target, with the token its follow-ups need.
#[derive(Clone, Debug)]
pub struct Opened {
    /// The session.
    pub session_id: SessionId,
    /// The current continuation token.
    pub token: String,
    /// The turn the message started.
    pub turn_id: TurnId,
}

/// Where a turn stands when a wait for it returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The turn ended (completed or failed).
    Ended,
    /// The turn waits for a decision on a `needs_approval` call (its
    /// `action.approval_requested` is recorded).
    Parked,
}

/// True when `env` ends `turn` or parks it on an approval.
fn settles(env_turn: Option<&str>, kind: &str, turn: &TurnId) -> Option<Settled> {
    if env_turn != Some(turn.as_str()) {
        return None;
    }
    match kind {
        "turn.completed" | "turn.failed" => Some(Settled::Ended),
        "action.approval_requested" => Some(Settled::Parked),
        _ => None,
    }
}

/// Where eval turns run.
#[async_trait]
pub trait Target: Send + Sync + 'static {
    /// Opens a session with a first message (purpose `eval`).
    async fn start(
        &self,
        title: &str,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError>;
    /// Like [`Target::start`], with the session pinned to A/B arms
    /// (experiment -> arm). The default can pin none and refuses any.
    async fn start_pinned(
        &self,
        title: &str,
        message: &str,
        files: &BTreeMap<String, String>,
        arms: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        if !arms.is_empty() {
            return Err(TargetError(
                "this eval target cannot pin A/B arms; run the evals in process (`bdk evals` without --url)".into(),
            ));
        }
        self.start(title, message, files).await
    }
    /// Sends a follow-up into an open session.
    async fn follow_up(
        &self,
        session: &Opened,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError>;
    /// Waits until the turn ended (completed or failed).
    async fn wait_turn(&self, session: &SessionId, turn: &TurnId) -> Result<(), TargetError>;
    /// Every recorded event of the session.
    async fn events(&self, session: &SessionId) -> Result<Vec<Envelope>, TargetError>;
    /// Stops the running turn (on timeout or cancellation); best effort.
    async fn stop(&self, session: &SessionId);
    /// Waits until `turn` ends or, looking at events from index `from` on,
    /// parks a call for approval. The default knows no approvals and waits
    /// for the end.
    async fn wait_settled(
        &self,
        session: &SessionId,
        turn: &TurnId,
        from: u64,
    ) -> Result<Settled, TargetError> {
        let _ = from;
        self.wait_turn(session, turn).await.map(|()| Settled::Ended)
    }
    /// Approves or denies the parked call `call_id`.
    async fn resolve_approval(
        &self,
        session: &SessionId,
        call_id: &str,
        approved: bool,
        reason: Option<&str>,
    ) -> Result<(), TargetError> {
        let _ = (session, call_id, approved, reason);
        Err(TargetError(
            "this eval target cannot resolve approvals".to_owned(),
        ))
    }
}

/// The agent in this process.
#[derive(Clone)]
pub struct HostTarget {
    host: Host,
    principal: Option<String>,
}

impl HostTarget {
    /// Runs evals against `host`.
    pub fn new(host: Host) -> HostTarget {
        HostTarget {
            host,
            principal: None,
        }
    }

    /// Opens eval sessions as `principal` (so that caller sees them in its
    /// session list).
    pub fn with_principal(mut self, principal: impl Into<String>) -> HostTarget {
        self.principal = Some(principal.into());
        self
    }

    /// The host.
    pub fn host(&self) -> &Host {
        &self.host
    }
}

fn host_err(e: impl std::fmt::Display) -> TargetError {
    TargetError(e.to_string())
}

#[async_trait]
impl Target for HostTarget {
    async fn start(
        &self,
        title: &str,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        self.start_pinned(title, message, files, &BTreeMap::new())
            .await
    }

    async fn start_pinned(
        &self,
        title: &str,
        message: &str,
        files: &BTreeMap<String, String>,
        arms: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        let started = self
            .host
            .start_session(StartSession {
                arms: arms.clone(),
                message: Some(message.to_owned()),
                mode: SessionMode::Chat,
                channel: "eval".into(),
                title: Some(title.to_owned()),
                purpose: Some(EVAL_PURPOSE.into()),
                workspace_files: files.clone(),
                principal: self.principal.clone(),
                ..StartSession::default()
            })
            .await
            .map_err(host_err)?;
        let turn_id = started
            .turn_id
            .ok_or_else(|| TargetError("the session started without a turn".into()))?;
        Ok(Opened {
            session_id: started.session_id,
            token: started.continuation_token,
            turn_id,
        })
    }

    async fn follow_up(
        &self,
        session: &Opened,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        let sent = self
            .host
            .send(
                &session.session_id,
                FollowUp {
                    message: message.to_owned(),
                    continuation_token: Some(session.token.clone()),
                    workspace_files: files.clone(),
                    principal: self.principal.clone(),
                    ..FollowUp::default()
                },
            )
            .await
            .map_err(host_err)?;
        let turn_id = sent.turn_id.ok_or_else(|| {
            TargetError("the follow-up was queued instead of starting a turn".into())
        })?;
        Ok(Opened {
            session_id: sent.session_id,
            token: sent.continuation_token,
            turn_id,
        })
    }

    async fn wait_turn(&self, session: &SessionId, turn: &TurnId) -> Result<(), TargetError> {
        self.host.wait_turn(session, turn).await.map_err(host_err)?;
        self.host.wait_idle(session).await;
        Ok(())
    }

    async fn events(&self, session: &SessionId) -> Result<Vec<Envelope>, TargetError> {
        self.host.store().read(session, 0).await.map_err(host_err)
    }

    async fn stop(&self, session: &SessionId) {
        if let Err(e) = self.host.stop(session, None).await {
            tracing::debug!(session_id = %session, error = %e, "failed to stop an eval turn");
        }
    }

    async fn wait_settled(
        &self,
        session: &SessionId,
        turn: &TurnId,
        from: u64,
    ) -> Result<Settled, TargetError> {
        let mut events = self
            .host
            .subscribe(session, from, self.principal.as_deref())
            .await
            .map_err(host_err)?;
        while let Some(env) = events.next().await {
            let env = env.map_err(host_err)?;
            match settles(env.turn_id.as_ref().map(TurnId::as_str), env.kind(), turn) {
                Some(Settled::Ended) => {
                    drop(events);
                    self.wait_turn(session, turn).await?;
                    return Ok(Settled::Ended);
                }
                // The host parks a call before it records the request, so
                // the call can be resolved from here on.
                Some(Settled::Parked) => return Ok(Settled::Parked),
                None => {}
            }
        }
        Err(TargetError(
            "the session's events ended before the turn finished".into(),
        ))
    }

    async fn resolve_approval(
        &self,
        session: &SessionId,
        call_id: &str,
        approved: bool,
        reason: Option<&str>,
    ) -> Result<(), TargetError> {
        self.host
            .resolve_approval(
                session,
                call_id,
                approved,
                reason.map(str::to_owned),
                self.principal.as_deref(),
            )
            .await
            .map_err(host_err)
    }
}

/// A running `bdk serve`, reached over its public session API.
#[derive(Clone)]
pub struct HttpTarget {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl HttpTarget {
    /// `base` is the agent's base URL (`http://127.0.0.1:3000/weather`, or
    /// the server root in single mode); `token` a bearer token, if the
    /// server wants one.
    pub fn new(base: &str, token: Option<String>) -> Result<HttpTarget, TargetError> {
        let client = bdk_models::net::http_client().map_err(host_err)?;
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(TargetError(format!(
                "--url must start with http:// or https://, got {base}"
            )));
        }
        Ok(HttpTarget {
            client,
            base,
            token,
        })
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn post_json(&self, path: &str, body: Value) -> Result<Value, TargetError> {
        let resp = self
            .req(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .map_err(|e| TargetError(format!("POST {}{path} failed: {e}", self.base)))?;
        let status = resp.status();
        let value: Value = resp.json().await.map_err(|e| {
            TargetError(format!("POST {}{path}: unreadable answer: {e}", self.base))
        })?;
        if !status.is_success() {
            return Err(TargetError(format!(
                "POST {}{path} answered {status}: {}",
                self.base,
                value
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            )));
        }
        Ok(value)
    }

    /// Follows the session's stream from `from` until `turn` ends or (with
    /// `parks`) parks a call for approval.
    async fn follow(
        &self,
        session: &SessionId,
        turn: &TurnId,
        from: u64,
        parks: bool,
    ) -> Result<Settled, TargetError> {
        let path = format!("/v1/session/{session}/stream?startIndex={from}");
        let resp = self
            .req(reqwest::Method::GET, &path)
            .send()
            .await
            .map_err(|e| TargetError(format!("GET {}{path} failed: {e}", self.base)))?;
        if !resp.status().is_success() {
            return Err(TargetError(format!(
                "GET {}{path} answered {}",
                self.base,
                resp.status()
            )));
        }
        let mut body = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| TargetError(format!("the event stream broke: {e}")))?;
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                    continue; // heartbeats and blank lines
                };
                let ty = v.get("type").and_then(Value::as_str).unwrap_or_default();
                match settles(v.get("turnId").and_then(Value::as_str), ty, turn) {
                    Some(Settled::Ended) => return Ok(Settled::Ended),
                    Some(Settled::Parked) if parks => return Ok(Settled::Parked),
                    _ => {}
                }
            }
        }
        Err(TargetError(
            "the event stream ended before the turn finished".into(),
        ))
    }

    fn opened(value: &Value) -> Result<Opened, TargetError> {
        let field = |k: &str| {
            value
                .get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| TargetError(format!("the server's answer has no {k}")))
        };
        Ok(Opened {
            session_id: SessionId::from_string(field("sessionId")?),
            token: field("continuationToken")?,
            turn_id: TurnId::from_string(field("turnId")?),
        })
    }
}

#[async_trait]
impl Target for HttpTarget {
    async fn start(
        &self,
        title: &str,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        let v = self
            .post_json(
                "/v1/session",
                json!({"message": message, "title": title, "purpose": EVAL_PURPOSE, "workspaceFiles": files}),
            )
            .await?;
        Self::opened(&v)
    }

    async fn follow_up(
        &self,
        session: &Opened,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        let v = self
            .post_json(
                &format!("/v1/session/{}", session.session_id),
                json!({"message": message, "continuationToken": session.token, "workspaceFiles": files}),
            )
            .await?;
        Self::opened(&v)
    }

    async fn wait_turn(&self, session: &SessionId, turn: &TurnId) -> Result<(), TargetError> {
        self.follow(session, turn, 0, false).await.map(|_| ())
    }

    async fn wait_settled(
        &self,
        session: &SessionId,
        turn: &TurnId,
        from: u64,
    ) -> Result<Settled, TargetError> {
        self.follow(session, turn, from, true).await
    }

    async fn resolve_approval(
        &self,
        session: &SessionId,
        call_id: &str,
        approved: bool,
        reason: Option<&str>,
    ) -> Result<(), TargetError> {
        let decision = if approved { "approve" } else { "deny" };
        self.post_json(
            &format!("/v1/session/{session}/approvals/{call_id}"),
            json!({"decision": decision, "reason": reason}),
        )
        .await
        .map(|_| ())
    }

    async fn events(&self, session: &SessionId) -> Result<Vec<Envelope>, TargetError> {
        let path = format!("/v1/session/{session}/events?format=json");
        let resp = self
            .req(reqwest::Method::GET, &path)
            .send()
            .await
            .map_err(|e| TargetError(format!("GET {}{path} failed: {e}", self.base)))?;
        if !resp.status().is_success() {
            return Err(TargetError(format!(
                "GET {}{path} answered {}",
                self.base,
                resp.status()
            )));
        }
        let mut v: Value = resp
            .json()
            .await
            .map_err(|e| TargetError(format!("unreadable events: {e}")))?;
        serde_json::from_value(v.get_mut("events").map(Value::take).unwrap_or(Value::Null))
            .map_err(|e| TargetError(format!("unreadable events: {e}")))
    }

    async fn stop(&self, session: &SessionId) {
        let path = format!("/v1/session/{session}/stop");
        if let Err(e) = self.req(reqwest::Method::POST, &path).send().await {
            tracing::debug!(session_id = %session, error = %e, "failed to stop an eval turn");
        }
    }
}
