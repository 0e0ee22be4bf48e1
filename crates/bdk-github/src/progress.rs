//! Progress and delivery: one follower per thread session reads the
//! session's events and shows them on GitHub.
//!
//! - `turn.started`: a `pending` commit status on the pull request's head
//!   commit (linking to the session's trace) and the sticky banner comment,
//!   created once per thread and edited in place from then on.
//! - tool calls: the banner says what the agent is doing (at most one edit
//!   every few seconds).
//! - `turn.completed`: the banner's final word, a `success` status, then
//!   the reply as a comment or a review.
//! - `turn.failed`: the banner says why, and the status is `failure` (or
//!   `error` for a stopped or interrupted turn).
//!
//! Every call that fails (after the client's bounded retries) is logged and
//! recorded in the session as `channel.outbound` with `ok: false`; a posted
//! reply is recorded with its URL. Nothing here can fail a turn: the
//! follower only reads the session.
//!
//! A durable cursor per session (namespace [`PROGRESS_NAMESPACE`], key
//! `<channel>/<sessionId>`) holds the next event to look at and the last
//! turn whose reply was posted, so a restart resumes without posting a
//! reply twice. The cursor and the reading loop are `bdk_core::follow`'s,
//! shared with the Slack pack and channel event delivery.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bdk_api::paths;
use bdk_core::follow::{Cursor, Handled, SessionFollower};
use bdk_core::project::GithubReply;
use bdk_events::{ChannelOutbound, Envelope, Event, FailStatus, SessionId};
use bdk_store::{NewEvent, Store};
use serde_json::{Map, Value, json};

use crate::api::{ApiError, Method};
use crate::ingress::MARKER;
use crate::pack::{Inner, Pack};
use crate::thread::{self, Thread};

/// The key-value namespace of progress cursors.
pub const PROGRESS_NAMESPACE: &str = "github-progress";

/// The fewest seconds between two banner edits while a turn runs (the
/// turn's end is always shown).
const BANNER_EVERY: Duration = Duration::from_secs(5);

/// GitHub's limit on a commit status description.
const STATUS_DESCRIPTION_MAX: usize = 140;

/// GitHub's limit on a comment body, in characters.
const COMMENT_MAX: usize = 65_536;

/// The follower of one thread session.
pub(crate) struct Follower {
    inner: Arc<Inner>,
    pack: Arc<Pack>,
    store: Arc<dyn Store>,
    id: SessionId,
    key: String,
}

/// What the follower keeps about the running turn.
#[derive(Default)]
struct Turn {
    /// The last turn whose reply was posted (kept across turns and saved
    /// with the cursor).
    replied: Option<String>,
    id: Option<String>,
    /// The commit its statuses go to.
    sha: Option<String>,
    started: Option<Instant>,
    step: u32,
    tools: Vec<String>,
    last_banner: Option<Instant>,
}

impl Turn {
    /// What the cursor keeps: the last turn whose reply was posted.
    fn state(&self) -> Map<String, Value> {
        let mut state = Map::new();
        state.insert("replied".into(), json!(self.replied));
        state
    }
}

/// A follower with the state of its session's running turn: what
/// [`follow::run`] drives.
pub(crate) struct Progress {
    follower: Follower,
    turn: Turn,
}

impl Progress {
    pub(crate) fn new(follower: Follower) -> Self {
        Progress {
            follower,
            turn: Turn::default(),
        }
    }
}

#[async_trait]
impl SessionFollower for Progress {
    fn restore(&mut self, saved: &Map<String, Value>) {
        self.turn.replied = saved
            .get("replied")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }

    fn state(&self) -> Map<String, Value> {
        self.turn.state()
    }

    async fn on_event(&mut self, env: &Envelope, cursor: &Cursor) -> Handled {
        if self.follower.on_event(env, &mut self.turn, cursor).await {
            Handled::Acted
        } else {
            Handled::Passed
        }
    }
}

impl Follower {
    pub(crate) fn new(
        inner: Arc<Inner>,
        pack: Arc<Pack>,
        store: Arc<dyn Store>,
        id: SessionId,
        key: String,
    ) -> Self {
        Self {
            inner,
            pack,
            store,
            id,
            key,
        }
    }

    /// Forgets the finished turn, keeping what outlives it.
    fn reset(turn: &mut Turn) {
        *turn = Turn {
            replied: turn.replied.take(),
            ..Turn::default()
        };
    }

    /// Shows one event on GitHub; true when it was one the follower acts on.
    async fn on_event(&self, env: &Envelope, turn: &mut Turn, cursor: &Cursor) -> bool {
        match &env.event {
            Event::TurnStarted(_) => {
                Self::reset(turn);
                turn.id = env.turn_id.as_ref().map(ToString::to_string);
                turn.started = Some(Instant::now());
                let Some(mut thread) = self.thread().await else {
                    return true;
                };
                turn.sha = self.head_sha(&mut thread).await;
                self.status(&thread, turn, "pending", "Working on it").await;
                let body = format!("⏳ {} is working on this…", self.who());
                self.banner(&mut thread, turn, &body).await;
                turn.last_banner = Some(Instant::now());
                true
            }
            Event::StepStarted(s) => {
                turn.step = s.step;
                false
            }
            Event::ActionsRequested(a) => {
                turn.tools.extend(a.actions.iter().map(|c| c.name.clone()));
                let due = turn
                    .last_banner
                    .is_none_or(|at| at.elapsed() >= BANNER_EVERY);
                if !due {
                    return false;
                }
                let Some(mut thread) = self.thread().await else {
                    return false;
                };
                let doing = turn
                    .tools
                    .last()
                    .map_or_else(String::new, |t| format!(" (step {}: `{t}`)", turn.step));
                let body = format!("⏳ {} is working on this…{doing}", self.who());
                self.banner(&mut thread, turn, &body).await;
                turn.last_banner = Some(Instant::now());
                false
            }
            Event::TurnCompleted(done) => {
                let Some(mut thread) = self.thread().await else {
                    return true;
                };
                if turn.id.is_none() {
                    turn.id = env.turn_id.as_ref().map(ToString::to_string);
                }
                if turn.sha.is_none() {
                    turn.sha = self.head_sha(&mut thread).await;
                }
                let took = turn
                    .started
                    .map(|s| format!(" in {:.1} s", s.elapsed().as_secs_f64()))
                    .unwrap_or_default();
                let tools = match turn.tools.len() {
                    0 => String::new(),
                    1 => " · 1 tool call".to_owned(),
                    n => format!(" · {n} tool calls"),
                };
                let link = self
                    .trace_url(&thread)
                    .map(|u| format!(" · [trace]({u})"))
                    .unwrap_or_default();
                let body = format!("✅ {} finished{took}{tools}{link}", self.who());
                self.banner(&mut thread, turn, &body).await;
                self.status(&thread, turn, "success", &format!("Done{took}"))
                    .await;
                let turn_id = turn.id.clone().unwrap_or_default();
                if !done.reply.trim().is_empty() && turn.replied.as_deref() != Some(&turn_id) {
                    self.reply(&thread, turn, &done.reply).await;
                    // Saved at once: a restart must not post it again.
                    turn.replied = Some(turn_id);
                    cursor.save(env.index + 1, turn.state()).await;
                }
                Self::reset(turn);
                true
            }
            Event::TurnFailed(failed) => {
                let Some(mut thread) = self.thread().await else {
                    return true;
                };
                if turn.id.is_none() {
                    turn.id = env.turn_id.as_ref().map(ToString::to_string);
                }
                if turn.sha.is_none() {
                    turn.sha = self.head_sha(&mut thread).await;
                }
                let (icon, state, what) = match failed.status {
                    FailStatus::Failed => ("❌", "failure", "failed"),
                    FailStatus::Cancelled => ("⏹️", "error", "was stopped"),
                    FailStatus::Interrupted => ("⏸️", "error", "was interrupted"),
                };
                let link = self
                    .trace_url(&thread)
                    .map(|u| format!(" · [trace]({u})"))
                    .unwrap_or_default();
                let body = format!(
                    "{icon} {}'s turn {what}: {}{link}",
                    self.who(),
                    one_line(&failed.message)
                );
                self.banner(&mut thread, turn, &body).await;
                self.status(&thread, turn, state, &format!("The turn {what}"))
                    .await;
                Self::reset(turn);
                true
            }
            _ => false,
        }
    }

    /// The bot's name as the banner shows it.
    fn who(&self) -> String {
        self.pack
            .settings
            .bot
            .clone()
            .unwrap_or_else(|| "The agent".to_owned())
    }

    async fn thread(&self) -> Option<Thread> {
        match thread::load(self.store.as_ref(), &self.pack.name, &self.key).await {
            Ok(Some(t)) => Some(t),
            Ok(None) => {
                let (repo, number) = thread::parse_key(&self.key)?;
                Some(Thread {
                    repo,
                    number,
                    ..Thread::default()
                })
            }
            Err(e) => {
                tracing::warn!(channel = %self.pack.name, session_id = %self.id, error = %e, "cannot read the GitHub thread record");
                None
            }
        }
    }

    /// The pull request's head commit: the last delivery's, else asked
    /// from the API (a comment event names none) and remembered.
    async fn head_sha(&self, thread: &mut Thread) -> Option<String> {
        if !thread.pull {
            return None;
        }
        if let Some(sha) = &thread.head_sha {
            return Some(sha.clone());
        }
        let path = format!("/repos/{}/pulls/{}", thread.repo, thread.number);
        let client = match self.pack.client() {
            Ok(c) => c,
            Err(e) => {
                self.failed("status", None, &e).await;
                return None;
            }
        };
        match client.get(&path, Some(&thread.repo)).await {
            Ok(pr) => {
                let sha = pr
                    .pointer("/head/sha")
                    .and_then(Value::as_str)
                    .map(str::to_owned)?;
                let _one = self.inner.threads.lock().await;
                if let Ok(Some(mut stored)) =
                    thread::load(self.store.as_ref(), &self.pack.name, &self.key).await
                {
                    stored.head_sha.get_or_insert_with(|| sha.clone());
                    let _ = thread::save(self.store.as_ref(), &self.pack.name, &stored).await;
                }
                thread.head_sha = Some(sha.clone());
                Some(sha)
            }
            Err(e) => {
                self.failed("status", None, &e).await;
                None
            }
        }
    }

    /// The session's event stream, as a link people can open.
    fn trace_url(&self, thread: &Thread) -> Option<String> {
        let origin = self
            .pack
            .settings
            .public_url
            .clone()
            .or_else(|| (self.inner.secrets)("BDK_PUBLIC_URL"))
            .or_else(|| thread.origin.clone())?;
        let events = paths::fill(paths::SESSION_EVENTS, &[self.id.as_str()]);
        Some(format!(
            "{}{}{events}",
            origin.trim_end_matches('/'),
            self.inner.base_path,
        ))
    }

    async fn status(&self, thread: &Thread, turn: &Turn, state: &str, description: &str) {
        let Some(context) = &self.pack.settings.status_context else {
            return;
        };
        let Some(sha) = &turn.sha else {
            return;
        };
        let mut body = json!({
            "state": state,
            "context": context,
            "description": truncate_chars(description, STATUS_DESCRIPTION_MAX),
        });
        if let Some(url) = self.trace_url(thread) {
            body["target_url"] = Value::String(url);
        }
        let path = format!("/repos/{}/statuses/{sha}", thread.repo);
        if let Err(e) = self.call(Method::Post, &path, body, &thread.repo).await {
            self.failed("status", turn.id.as_deref(), &e).await;
        }
    }

    /// Creates the banner comment or edits it in place.
    async fn banner(&self, thread: &mut Thread, turn: &Turn, text: &str) {
        if !self.pack.settings.banner {
            return;
        }
        let body = format!("{MARKER} banner -->\n{text}");
        if let Some(id) = thread.banner_id {
            let path = format!("/repos/{}/issues/comments/{id}", thread.repo);
            match self
                .call(Method::Patch, &path, json!({"body": body}), &thread.repo)
                .await
            {
                Ok(_) => return,
                // Someone deleted it: write a new one below.
                Err(e) if e.status() == Some(404) => {}
                Err(e) => {
                    self.failed("banner", turn.id.as_deref(), &e).await;
                    return;
                }
            }
        }
        let path = format!("/repos/{}/issues/{}/comments", thread.repo, thread.number);
        match self
            .call(Method::Post, &path, json!({"body": body}), &thread.repo)
            .await
        {
            Ok(comment) => {
                let Some(id) = comment.get("id").and_then(Value::as_u64) else {
                    return;
                };
                thread.banner_id = Some(id);
                let _one = self.inner.threads.lock().await;
                let stored = thread::load(self.store.as_ref(), &self.pack.name, &self.key)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| thread.clone());
                let updated = Thread {
                    banner_id: Some(id),
                    ..stored
                };
                if let Err(e) = thread::save(self.store.as_ref(), &self.pack.name, &updated).await {
                    tracing::warn!(channel = %self.pack.name, error = %e, "cannot remember the banner comment");
                }
            }
            Err(e) => self.failed("banner", turn.id.as_deref(), &e).await,
        }
    }

    /// Posts the turn's reply as a comment or a review.
    async fn reply(&self, thread: &Thread, turn: &Turn, text: &str) {
        let turn_id = turn.id.as_deref().unwrap_or("");
        let footer = format!("\n\n{MARKER} reply {turn_id} -->");
        let room = COMMENT_MAX.saturating_sub(footer.chars().count() + 40);
        let mut body = truncate_chars(text, room);
        if body.len() < text.len() {
            body.push_str("\n\n…(the reply was cut at GitHub's comment limit)");
        }
        body.push_str(&footer);
        let review = self.pack.settings.reply == GithubReply::Review && thread.pull;
        let result = match self.pack.settings.reply {
            GithubReply::None => return,
            _ if review => {
                let path = format!("/repos/{}/pulls/{}/reviews", thread.repo, thread.number);
                let mut req = json!({"body": body, "event": "COMMENT"});
                if let Some(sha) = &turn.sha {
                    req["commit_id"] = Value::String(sha.clone());
                }
                self.call(Method::Post, &path, req, &thread.repo).await
            }
            _ => {
                let path = format!("/repos/{}/issues/{}/comments", thread.repo, thread.number);
                self.call(Method::Post, &path, json!({"body": body}), &thread.repo)
                    .await
            }
        };
        match result {
            Ok(posted) => {
                let url = posted
                    .get("html_url")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.record(ChannelOutbound {
                    channel: self.pack.name.clone(),
                    action: if review { "review" } else { "reply" }.to_owned(),
                    ok: true,
                    for_turn: turn.id.clone(),
                    url,
                    code: None,
                    error: None,
                })
                .await;
            }
            Err(e) => {
                self.failed(
                    if review { "review" } else { "reply" },
                    turn.id.as_deref(),
                    &e,
                )
                .await;
            }
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Value,
        repo: &str,
    ) -> Result<Value, ApiError> {
        let client = self.pack.client()?;
        client.send(method, path, body, Some(repo)).await
    }

    async fn failed(&self, action: &str, turn: Option<&str>, e: &ApiError) {
        tracing::warn!(channel = %self.pack.name, session_id = %self.id, action, code = e.code(), error = %e, "a GitHub call failed");
        self.record(ChannelOutbound {
            channel: self.pack.name.clone(),
            action: action.to_owned(),
            ok: false,
            for_turn: turn.map(str::to_owned),
            url: None,
            code: Some(e.code().to_owned()),
            error: Some(e.to_string()),
        })
        .await;
    }

    async fn record(&self, outbound: ChannelOutbound) {
        let event = NewEvent::session(Event::ChannelOutbound(outbound));
        if let Err(e) = self.store.append(&self.id, vec![event]).await {
            tracing::warn!(channel = %self.pack.name, session_id = %self.id, error = %e, "cannot record a GitHub call in the session");
        }
    }
}

fn one_line(text: &str) -> String {
    truncate_chars(&text.split_whitespace().collect::<Vec<_>>().join(" "), 300)
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => text[..at].to_owned(),
        None => text.to_owned(),
    }
}
