//! Progress, replies and approval cards: one follower per thread session
//! reads the session's events and shows them in the thread.
//!
//! - `turn.started`: a placeholder message in the thread (unless the
//!   channel sets none).
//! - tool calls: the placeholder says what the agent is doing (at most one
//!   edit every few seconds).
//! - `action.approval_requested`: an Approve/Deny card in the thread;
//!   `action.approval_resolved` replaces its buttons with the outcome.
//! - `turn.completed`: the reply, converted to mrkdwn and cut at Slack's
//!   limits, replaces the placeholder (the rest follows as more messages);
//!   files the turn tagged as artifacts and the reply names are uploaded
//!   into the thread.
//! - `turn.failed`: the placeholder says the turn stopped or failed.
//!
//! Every call that fails (after the client's bounded retries) is logged and
//! recorded in the session as `channel.outbound` with `ok: false`; a posted
//! reply is recorded too. Nothing here can fail a turn: the follower only
//! reads the session.
//!
//! A durable cursor per session (namespace [`PROGRESS_NAMESPACE`], key
//! `<channel>/<sessionId>`) holds the next event, the last turn whose
//! reply was posted, the placeholder and the open cards, so a restart
//! resumes without posting a reply twice. The cursor and the reading loop
//! are `bdk_core::follow`'s, shared with the GitHub pack and channel event
//! delivery.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bdk_core::follow::{Cursor, Handled, SessionFollower};
use bdk_events::{ChannelOutbound, Envelope, Event, FailStatus, SessionId};
use bdk_store::{NewEvent, Store};
use serde_json::{Map, Value, json};

use crate::api::{ApiError, SlackClient};
use crate::blocks;
use crate::mrkdwn;
use crate::pack::Pack;

/// The key-value namespace of progress cursors.
pub const PROGRESS_NAMESPACE: &str = "slack-progress";

/// The fewest seconds between two placeholder edits while a turn runs.
const UPDATE_EVERY: Duration = Duration::from_secs(3);

/// The most of a parked call's input shown on its card, in characters.
const INPUT_PREVIEW: usize = 1_500;

/// What a button's value carries: the session and the parked call.
pub(crate) fn button_value(session: &SessionId, call_id: &str, approve: bool) -> String {
    json!({"session": session.to_string(), "call": call_id, "approve": approve}).to_string()
}

/// The follower of one thread session.
pub(crate) struct Follower {
    pack: Arc<Pack>,
    store: Arc<dyn Store>,
    id: SessionId,
    conversation: String,
    thread_ts: String,
}

/// What the follower keeps; `replied`, `placeholder` and `cards` are saved
/// with the cursor.
#[derive(Default)]
struct State {
    replied: Option<String>,
    placeholder: Option<String>,
    /// Open approval cards: call id -> message ts.
    cards: BTreeMap<String, String>,
    turn: Option<String>,
    tools: Vec<String>,
    last_update: Option<Instant>,
    started: Option<Instant>,
    /// Artifacts tagged during the turn: id -> workspace path.
    artifacts: Vec<(String, Option<String>)>,
}

impl State {
    /// What the cursor keeps: the last turn whose reply was posted, the
    /// placeholder and the open cards.
    fn saved(&self) -> Map<String, Value> {
        let mut saved = Map::new();
        saved.insert("replied".into(), json!(self.replied));
        saved.insert("placeholder".into(), json!(self.placeholder));
        saved.insert("cards".into(), json!(self.cards));
        saved
    }

    fn restore(&mut self, saved: &Map<String, Value>) {
        let text = |k: &str| saved.get(k).and_then(Value::as_str).map(str::to_owned);
        self.replied = text("replied");
        self.placeholder = text("placeholder");
        self.cards = saved
            .get("cards")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, ts)| Some((k.clone(), ts.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
    }
}

/// A follower with its thread's state: what [`follow::run`] drives.
pub(crate) struct Progress {
    follower: Follower,
    state: State,
}

impl Progress {
    pub(crate) fn new(follower: Follower) -> Self {
        Progress {
            follower,
            state: State::default(),
        }
    }
}

#[async_trait]
impl SessionFollower for Progress {
    fn restore(&mut self, saved: &Map<String, Value>) {
        self.state.restore(saved);
    }

    fn state(&self) -> Map<String, Value> {
        self.state.saved()
    }

    async fn on_event(&mut self, env: &Envelope, _cursor: &Cursor) -> Handled {
        if self.follower.on_event(env, &mut self.state).await {
            Handled::Acted
        } else {
            Handled::Passed
        }
    }
}

impl Follower {
    pub(crate) fn new(
        pack: Arc<Pack>,
        store: Arc<dyn Store>,
        id: SessionId,
        conversation: String,
        thread_ts: String,
    ) -> Self {
        Self {
            pack,
            store,
            id,
            conversation,
            thread_ts,
        }
    }

    /// Shows one event in the thread; true when the saved state changed.
    async fn on_event(&self, env: &Envelope, state: &mut State) -> bool {
        let client = match self.pack.client() {
            Ok(c) => c,
            Err(e) => {
                if matches!(
                    env.event,
                    Event::TurnCompleted(_) | Event::TurnFailed(_) | Event::TurnStarted(_)
                ) {
                    self.failed(env, "client", &e).await;
                }
                return false;
            }
        };
        match &env.event {
            Event::TurnStarted(_) => {
                state.turn = env.turn_id.as_ref().map(ToString::to_string);
                state.tools.clear();
                state.artifacts.clear();
                state.started = Some(Instant::now());
                state.placeholder = None;
                if let Some(text) = &self.pack.settings.placeholder {
                    match self.post(&client, text, None).await {
                        Ok(ts) => state.placeholder = Some(ts),
                        Err(e) => self.failed(env, "placeholder", &e).await,
                    }
                    state.last_update = Some(Instant::now());
                }
                true
            }
            Event::ActionsRequested(a) => {
                state.tools.extend(a.actions.iter().map(|c| c.name.clone()));
                let due = state
                    .last_update
                    .is_none_or(|at| at.elapsed() >= UPDATE_EVERY);
                if let (true, Some(ts), Some(base), Some(tool)) = (
                    due,
                    state.placeholder.clone(),
                    self.pack.settings.placeholder.as_deref(),
                    state.tools.last(),
                ) {
                    let text = format!("{base} (`{}`)", escape(tool));
                    if let Err(e) = self.update(&client, &ts, &text, None).await {
                        tracing::debug!(channel = %self.pack.name, error = %e, "cannot update the Slack placeholder");
                    }
                    state.last_update = Some(Instant::now());
                }
                false
            }
            Event::ArtifactTagged(a) => {
                state
                    .artifacts
                    .push((a.artifact_id.clone(), a.path.clone()));
                false
            }
            Event::ActionApprovalRequested(r) => {
                let input = serde_json::to_string_pretty(&r.input).unwrap_or_default();
                let card = blocks::approval_card(
                    &r.name,
                    &self.approvers_line(),
                    &cut(&input, INPUT_PREVIEW),
                    &button_value(&self.id, &r.call_id, true),
                    &button_value(&self.id, &r.call_id, false),
                );
                let text = format!("Approval needed: the agent wants to run `{}`", r.name);
                match self.post(&client, &text, Some(card)).await {
                    Ok(ts) => {
                        state.cards.insert(r.call_id.clone(), ts);
                    }
                    Err(e) => self.failed(env, "approval", &e).await,
                }
                true
            }
            Event::ActionApprovalResolved(r) => {
                let Some(ts) = state.cards.remove(&r.call_id) else {
                    return false;
                };
                let by =
                    r.by.as_deref()
                        .map(|b| b.strip_prefix("slack:").unwrap_or(b).to_owned())
                        .unwrap_or_else(|| "someone".to_owned());
                let outcome =
                    blocks::approval_outcome(&r.name, r.approved, &by, r.reason.as_deref());
                let word = if r.approved { "Approved" } else { "Denied" };
                let text = format!("{word}: `{}`", r.name);
                if let Err(e) = self.update(&client, &ts, &text, Some(outcome)).await {
                    self.failed(env, "approval", &e).await;
                }
                true
            }
            Event::TurnCompleted(done) => {
                let turn = env
                    .turn_id
                    .as_ref()
                    .map(ToString::to_string)
                    .or_else(|| state.turn.clone())
                    .unwrap_or_default();
                if state.replied.as_deref() == Some(turn.as_str()) {
                    return false;
                }
                let reply = if done.reply.trim().is_empty() {
                    "(no reply)".to_owned()
                } else {
                    done.reply.clone()
                };
                self.reply(env, &client, state, &turn, &reply).await;
                state.replied = Some(turn);
                state.placeholder = None;
                true
            }
            Event::TurnFailed(failed) => {
                let text = match failed.status {
                    FailStatus::Cancelled => "⏹️ Stopped.".to_owned(),
                    FailStatus::Interrupted => {
                        "⏸️ Interrupted; I will pick this up again.".to_owned()
                    }
                    FailStatus::Failed => {
                        format!(
                            "❌ Something went wrong: {}",
                            escape(&one_line(&failed.message))
                        )
                    }
                };
                let shown = match state.placeholder.take() {
                    Some(ts) => self.update(&client, &ts, &text, None).await,
                    None => self.post(&client, &text, None).await.map(|_| ()),
                };
                if let Err(e) = shown {
                    self.failed(env, "failure", &e).await;
                }
                true
            }
            _ => false,
        }
    }

    /// Who may decide, for the card.
    fn approvers_line(&self) -> String {
        let approvers = &self.pack.settings.approvers;
        if approvers.is_empty() {
            "The person who started this thread can approve or deny it.".to_owned()
        } else {
            let names: Vec<String> = approvers.iter().map(|u| format!("<@{u}>")).collect();
            format!("{} can approve or deny it.", names.join(", "))
        }
    }

    async fn reply(
        &self,
        env: &Envelope,
        client: &SlackClient,
        state: &mut State,
        turn: &str,
        reply: &str,
    ) {
        let converted = mrkdwn::to_mrkdwn(reply);
        let parts = mrkdwn::split(&converted, mrkdwn::TEXT_LIMIT);
        let mut first_ts = None;
        let mut error = None;
        for (i, part) in parts.iter().enumerate() {
            let sent = match (i, state.placeholder.clone()) {
                (0, Some(ts)) => self.update(client, &ts, part, None).await.map(|()| ts),
                _ => self.post(client, part, None).await,
            };
            match sent {
                Ok(ts) => {
                    first_ts.get_or_insert(ts);
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        match error {
            None => {
                self.record(ChannelOutbound {
                    channel: self.pack.name.clone(),
                    action: "reply".to_owned(),
                    ok: true,
                    for_turn: Some(turn.to_owned()),
                    url: first_ts.map(|ts| format!("slack://{}/{ts}", self.conversation)),
                    code: None,
                    error: None,
                })
                .await;
            }
            Some(e) => self.failed(env, "reply", &e).await,
        }
        // Files the reply names.
        for (id, path) in std::mem::take(&mut state.artifacts) {
            let Ok(Some(record)) = self.store.artifact_get(&id).await else {
                continue;
            };
            let named =
                reply.contains(&record.name) || path.as_deref().is_some_and(|p| reply.contains(p));
            if !named {
                continue;
            }
            let Ok(Some(bytes)) = self.store.artifact_content(&id).await else {
                continue;
            };
            match self.upload(client, &record.name, bytes).await {
                Ok(()) => {
                    self.record(ChannelOutbound {
                        channel: self.pack.name.clone(),
                        action: "file".to_owned(),
                        ok: true,
                        for_turn: Some(turn.to_owned()),
                        url: None,
                        code: None,
                        error: None,
                    })
                    .await;
                }
                Err(e) => self.failed(env, "file", &e).await,
            }
        }
    }

    /// `files.getUploadURLExternal`, the upload, then
    /// `files.completeUploadExternal` into the thread.
    async fn upload(
        &self,
        client: &SlackClient,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), ApiError> {
        let slot = client
            .call(
                "files.getUploadURLExternal",
                json!({"filename": name, "length": bytes.len()}),
            )
            .await?;
        let (Some(url), Some(file_id)) = (
            slot.get("upload_url").and_then(Value::as_str),
            slot.get("file_id").and_then(Value::as_str),
        ) else {
            return Err(ApiError::Decode(
                "files.getUploadURLExternal answered without upload_url or file_id".into(),
            ));
        };
        client.upload(url, bytes).await?;
        client
            .call(
                "files.completeUploadExternal",
                json!({
                    "files": [{"id": file_id, "title": name}],
                    "channel_id": self.conversation,
                    "thread_ts": self.thread_ts,
                }),
            )
            .await?;
        Ok(())
    }

    async fn post(
        &self,
        client: &SlackClient,
        text: &str,
        blocks: Option<Value>,
    ) -> Result<String, ApiError> {
        let answer = client
            .call(
                "chat.postMessage",
                json!({
                    "channel": self.conversation,
                    "thread_ts": self.thread_ts,
                    "text": text,
                    "blocks": blocks,
                    "unfurl_links": false,
                }),
            )
            .await?;
        answer
            .get("ts")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ApiError::Decode("chat.postMessage answered without ts".into()))
    }

    async fn update(
        &self,
        client: &SlackClient,
        ts: &str,
        text: &str,
        blocks: Option<Value>,
    ) -> Result<(), ApiError> {
        // Without blocks, an empty list clears a card's buttons.
        let blocks = blocks.unwrap_or_else(|| json!([]));
        client
            .call(
                "chat.update",
                json!({"channel": self.conversation, "ts": ts, "text": text, "blocks": blocks}),
            )
            .await
            .map(|_| ())
    }

    async fn failed(&self, env: &Envelope, action: &str, e: &ApiError) {
        tracing::warn!(channel = %self.pack.name, session_id = %self.id, action, error = %e, "a Slack call failed");
        self.record(ChannelOutbound {
            channel: self.pack.name.clone(),
            action: action.to_owned(),
            ok: false,
            for_turn: env.turn_id.as_ref().map(ToString::to_string),
            url: None,
            code: Some(e.code()),
            error: Some(one_line(&e.to_string())),
        })
        .await;
    }

    async fn record(&self, outbound: ChannelOutbound) {
        let event = NewEvent::session(Event::ChannelOutbound(outbound));
        if let Err(e) = self.store.append(&self.id, vec![event]).await {
            tracing::warn!(channel = %self.pack.name, session_id = %self.id, error = %e, "cannot record a Slack call in the session");
        }
    }
}

/// `&`, `<` and `>` escaped as Slack's text requires.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn one_line(text: &str) -> String {
    cut(&text.split_whitespace().collect::<Vec<_>>().join(" "), 300)
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
