//! A running `bdk serve`, reached over its public session API.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bdk_events::{Envelope, SessionId, TurnId};
use futures::StreamExt;
use serde_json::{Value, json};

use super::{EVAL_PURPOSE, Opened, Settled, Target, TargetError, host_err, settles};

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
