//! A typed async client for an agent's API (feature `client`).
//!
//! One [`Client`] talks to one agent's base URL. Each route is one method
//! that sends the typed request body and reads the typed answer; a refusal
//! is [`ClientError::Refused`] with the server's [`ErrorAnswer`]. The event
//! stream ([`Client::stream`]) reconnects after a dropped connection and
//! resumes from the last event it gave out.
//!
//! The client does not build its own `reqwest::Client`: TLS setup is the
//! program's choice (a rustls crypto provider, proxies, timeouts), so the
//! program passes the one it configured.

use std::collections::VecDeque;
use std::time::Duration;

use bdk_events::{Envelope, SessionId};
use futures_util::stream::{BoxStream, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ErrorAnswer;
use crate::paths;
use crate::sessions::{
    ApprovalDecision, ApprovalsResponse, DeleteSessionResponse, EventsResponse, FollowUpRequest,
    FollowUpResponse, OkResponse, SessionsResponse, StartSessionRequest, StartSessionResponse,
    StopResponse,
};
use crate::stream::{BadLine, EnvelopeReader};
use crate::{ErrorCode, sessions};

/// What a call through the [`Client`] can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The base URL is not an `http://` or `https://` URL.
    #[error("`{0}` is not an http:// or https:// URL")]
    BadUrl(String),
    /// The request did not complete: no connection, a reset, a timeout.
    #[error("{what} failed: {source}")]
    Transport {
        /// The method and URL.
        what: String,
        /// What reqwest reported.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with an error code.
    #[error("{what} answered {status} {}: {}", answer.error, answer.message)]
    Refused {
        /// The method and URL.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The error body (boxed: it is most of the error's size).
        answer: Box<ErrorAnswer>,
    },
    /// The answer is not what this route sends.
    #[error("{what}: the answer does not read as expected: {detail}")]
    Unreadable {
        /// The method and URL.
        what: String,
        /// Why.
        detail: String,
    },
    /// A line of the event stream is not an event.
    #[error("{what}: {source}")]
    BadEvent {
        /// The method and URL.
        what: String,
        /// The line and why it does not read.
        #[source]
        source: BadLine,
    },
}

impl ClientError {
    /// The error code, when the server refused with one this version knows.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Refused { answer, .. } => answer.code(),
            _ => None,
        }
    }

    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// How [`Client::stream`] reconnects after a dropped connection.
#[derive(Clone, Copy, Debug)]
pub struct Resume {
    /// Reconnections in a row that may fail (no connection, or a
    /// connection that ends before giving an event) before the stream
    /// gives up with the last error; with 0 it gives up at the first.
    pub attempts: u32,
    /// The wait before the first reconnection; it doubles each time, to at
    /// most 5 s, and starts over once events flow again.
    pub delay: Duration,
}

impl Default for Resume {
    fn default() -> Self {
        Resume {
            attempts: 5,
            delay: Duration::from_millis(200),
        }
    }
}

/// One agent's API.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    resume: Resume,
}

impl Client {
    /// The agent at `base_url` (`http://127.0.0.1:3000/weather`, or the
    /// server root when it serves one agent), reached through `http`.
    pub fn new(base_url: &str, http: reqwest::Client) -> Result<Client, ClientError> {
        let base = base_url.trim_end_matches('/');
        match reqwest::Url::parse(base) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {}
            _ => return Err(ClientError::BadUrl(base_url.to_owned())),
        }
        Ok(Client {
            http,
            base: base.to_owned(),
            token: None,
            resume: Resume::default(),
        })
    }

    /// Sends `token` as a bearer token on every request (a blank one is
    /// ignored).
    pub fn bearer(mut self, token: Option<String>) -> Client {
        self.token = token.filter(|t| !t.trim().is_empty());
        self
    }

    /// How the event stream reconnects.
    pub fn resume(mut self, resume: Resume) -> Client {
        self.resume = resume;
        self
    }

    /// The agent's base URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/session`.
    pub async fn start_session(
        &self,
        body: &StartSessionRequest,
    ) -> Result<StartSessionResponse, ClientError> {
        self.send(reqwest::Method::POST, paths::SESSION.to_owned(), Some(body))
            .await
    }

    /// `POST /v1/session/{sessionId}`: a follow-up message.
    pub async fn follow_up(
        &self,
        session: &SessionId,
        body: &FollowUpRequest,
    ) -> Result<FollowUpResponse, ClientError> {
        let path = paths::fill(paths::SESSION_ID, &[session.as_str()]);
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    /// `GET /v1/session/{sessionId}/events`: every recorded event.
    pub async fn events(&self, session: &SessionId) -> Result<Vec<Envelope>, ClientError> {
        let path = paths::fill(paths::SESSION_EVENTS, &[session.as_str()]) + "?format=json";
        let answer: EventsResponse = self.send::<(), _>(reqwest::Method::GET, path, None).await?;
        Ok(answer.events)
    }

    /// `POST /v1/session/{sessionId}/stop`: stops the running turn.
    pub async fn stop(&self, session: &SessionId) -> Result<StopResponse, ClientError> {
        let path = paths::fill(paths::SESSION_STOP, &[session.as_str()]);
        self.send(reqwest::Method::POST, path, Some(&serde_json::json!({})))
            .await
    }

    /// `DELETE /v1/session/{sessionId}`.
    pub async fn delete_session(
        &self,
        session: &SessionId,
    ) -> Result<DeleteSessionResponse, ClientError> {
        let path = paths::fill(paths::SESSION_ID, &[session.as_str()]);
        self.send::<(), _>(reqwest::Method::DELETE, path, None)
            .await
    }

    /// `GET /v1/sessions`: the caller's sessions, newest first.
    pub async fn sessions(&self) -> Result<SessionsResponse, ClientError> {
        self.send::<(), _>(reqwest::Method::GET, paths::SESSIONS.to_owned(), None)
            .await
    }

    /// `GET /v1/session/{sessionId}/approvals`: the calls waiting for a
    /// decision.
    pub async fn approvals(&self, session: &SessionId) -> Result<ApprovalsResponse, ClientError> {
        let path = paths::fill(paths::SESSION_APPROVALS, &[session.as_str()]);
        self.send::<(), _>(reqwest::Method::GET, path, None).await
    }

    /// `POST /v1/session/{sessionId}/approvals/{callId}`.
    pub async fn decide(
        &self,
        session: &SessionId,
        call_id: &str,
        decision: sessions::Decision,
        reason: Option<String>,
    ) -> Result<OkResponse, ClientError> {
        let path = paths::fill(paths::SESSION_APPROVAL, &[session.as_str(), call_id]);
        let body = ApprovalDecision::new(decision, reason);
        self.send(reqwest::Method::POST, path, Some(&body)).await
    }

    /// `GET path` (a route of [`paths`], filled in), read as `T`: for
    /// routes whose bodies this crate does not type yet.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.send::<(), _>(reqwest::Method::GET, path.to_owned(), None)
            .await
    }

    /// `POST path` with a JSON body, read as `T`.
    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.send(reqwest::Method::POST, path.to_owned(), Some(body))
            .await
    }

    /// The session's events from `start_index` on, then each new one as it
    /// is recorded. After a dropped connection (or a server that restarted)
    /// the stream reconnects and goes on from the event after the last one
    /// it gave out, so no event is missed or repeated. It ends when the
    /// session is deleted, and with an error when the server refuses it
    /// (no such session, not the caller's) or stays unreachable for
    /// [`Resume::attempts`] tries.
    pub fn stream(
        &self,
        session: &SessionId,
        start_index: u64,
    ) -> BoxStream<'static, Result<Envelope, ClientError>> {
        let state = Following {
            client: self.clone(),
            session: session.clone(),
            reader: EnvelopeReader::new(start_index),
            body: None,
            ready: VecDeque::new(),
            failures: 0,
            connected: false,
            index_at_connect: start_index,
            done: false,
        };
        futures_util::stream::unfold(state, |mut f| async move {
            let item = f.next().await?;
            Some((item, f))
        })
        .boxed()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, self.url(path));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn send<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: String,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let what = format!("{method} {}", self.url(&path));
        let mut request = self.request(method, &path);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|source| ClientError::Transport {
                what: what.clone(),
                source,
            })?;
        read(what, response).await
    }
}

/// Reads an answer: the typed body on success, the error body otherwise.
async fn read<T: DeserializeOwned>(
    what: String,
    response: reqwest::Response,
) -> Result<T, ClientError> {
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|source| ClientError::Transport {
            what: what.clone(),
            source,
        })?;
    if status.is_success() {
        return serde_json::from_slice(&bytes).map_err(|e| ClientError::Unreadable {
            what,
            detail: e.to_string(),
        });
    }
    Err(refusal(what, status.as_u16(), &bytes))
}

fn refusal(what: String, status: u16, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorAnswer>(bytes) {
        Ok(answer) => ClientError::Refused {
            what,
            status,
            answer: Box::new(answer),
        },
        Err(_) => ClientError::Unreadable {
            what,
            detail: format!(
                "status {status} with a body that is not an error answer: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ),
        },
    }
}

/// The state of one [`Client::stream`].
struct Following {
    client: Client,
    session: SessionId,
    reader: EnvelopeReader,
    body: Option<BoxStream<'static, reqwest::Result<bytes::Bytes>>>,
    ready: VecDeque<Result<Envelope, ClientError>>,
    /// Failed connections in a row.
    failures: u32,
    /// Whether a connection was ever made (a 404 after one means the
    /// session was deleted meanwhile).
    connected: bool,
    /// The reader's next index when the current connection opened.
    index_at_connect: u64,
    done: bool,
}

impl Following {
    fn what(&self) -> String {
        let path = paths::fill(paths::SESSION_STREAM, &[self.session.as_str()]);
        format!("GET {}{path}", self.client.base)
    }

    /// The next item: an event, or the error that ends the stream.
    async fn next(&mut self) -> Option<Result<Envelope, ClientError>> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            match self.reader.next_event() {
                Some(Ok(env)) => {
                    self.failures = 0;
                    return Some(Ok(env));
                }
                Some(Err(source)) => {
                    // A line that is not an event: the stream is not one
                    // this client can follow.
                    self.done = true;
                    return Some(Err(ClientError::BadEvent {
                        what: self.what(),
                        source,
                    }));
                }
                None => {}
            }
            let Some(body) = self.body.as_mut() else {
                self.connect().await;
                continue;
            };
            match body.next().await {
                Some(Ok(chunk)) => self.reader.push(&chunk),
                // A reset, or a clean end (the server shut down, or the
                // session was deleted): ask again from where we are; a
                // deleted session then answers 404 and ends the stream.
                Some(Err(_)) | None => {
                    self.body = None;
                    self.reader.reset_line();
                    if self.reader.next_index() == self.index_at_connect {
                        // Nothing came over that connection: back off
                        // before the next one, and give up eventually.
                        self.failures += 1;
                        if self.failures > self.client.resume.attempts {
                            self.done = true;
                            return Some(Err(ClientError::Unreadable {
                                what: self.what(),
                                detail: format!(
                                    "the stream ended {} times in a row without an event",
                                    self.failures
                                ),
                            }));
                        }
                    }
                }
            }
        }
    }

    /// Opens (or reopens) the stream from the reader's next index; on
    /// failure, waits and counts, or gives up with the error.
    async fn connect(&mut self) {
        if self.failures > 0 {
            let factor = 1u32 << (self.failures - 1).min(5);
            let wait = (self.client.resume.delay * factor).min(Duration::from_secs(5));
            tokio::time::sleep(wait).await;
        }
        let path = paths::fill(paths::SESSION_STREAM, &[self.session.as_str()])
            + &format!("?startIndex={}", self.reader.next_index());
        let what = self.what();
        let sent = self
            .client
            .request(reqwest::Method::GET, &path)
            .send()
            .await;
        let error = match sent {
            Ok(response) if response.status().is_success() => {
                self.connected = true;
                self.index_at_connect = self.reader.next_index();
                self.body = Some(response.bytes_stream().boxed());
                return;
            }
            Ok(response) => {
                let status = response.status().as_u16();
                let bytes = response.bytes().await.unwrap_or_default();
                let refused = refusal(what, status, &bytes);
                self.done = true;
                // A session deleted while it was followed ends the stream;
                // any other refusal (and a first 404) is the caller's to see.
                if self.connected && refused.code() == Some(ErrorCode::SessionNotFound) {
                    return;
                }
                self.ready.push_back(Err(refused));
                return;
            }
            Err(source) => ClientError::Transport { what, source },
        };
        self.failures += 1;
        if self.failures > self.client.resume.attempts {
            self.done = true;
            self.ready.push_back(Err(error));
        }
    }
}
