//! The Slack pack: a Slack helper is an agent folder with a Slack channel
//! (`agent/channels/<name>.toml` with `kind = "slack"`), a bot token and a
//! signing secret.
//!
//! - [`ingress`]: Slack's request signature, the shapes of its requests
//!   (the URL check, events, button clicks) and whether an event engages
//!   the bot (a mention, a direct message, a reply in a thread it is in,
//!   a watched conversation's alert, or a stop word).
//! - [`api`]: the Web API client (bounded retries that honour 429s).
//! - [`mrkdwn`] and [`blocks`]: the model's Markdown as Slack's mrkdwn,
//!   cut at Slack's limits, and the Block Kit of approval cards.
//! - [`thread`]: the threads the bot is in, and who started each.
//! - `pack`: one Slack channel's settings, client and bot identity, and
//!   the state the other parts share.
//! - `progress`: one follower per thread session: the placeholder updated
//!   in place, the reply, files, and Approve/Deny cards.
//! - `ops`: the `slack.*` host-endpoint operations.
//!
//! [`Slack`] ties them together as a host extension
//! (`bdk_core::extension::HostExtension`): `bdk serve` adds it when the
//! project has a Slack channel, and `bdk-http` hands it each request after
//! checking the signature over the raw body. Events are deduped durably by
//! `event_id` (namespace [`EVENTS_NAMESPACE`]).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use bdk_core::extension::{HostExtension, OperationCall, OperationError, RuntimeLink};
use bdk_core::follow::{Cursor, FollowStart, Following};
use bdk_core::host::HostResult;
use bdk_core::project::{Project, SlackChannel};
use bdk_events::{Admission, SessionId};
use chrono::Utc;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub mod api;
pub mod blocks;
pub mod ingress;
pub mod manifest;
pub mod mrkdwn;
mod ops;
mod pack;
mod progress;
pub mod thread;

pub use ingress::{Classified, Engage, Request, Via};
use pack::{Inner, Pack};
pub use pack::{Secrets, SlackOptions, env_secrets};
pub use progress::PROGRESS_NAMESPACE;
pub use thread::{THREADS_NAMESPACE, Thread};

/// The key-value namespace of event claims (`<channel>/<event_id>`).
pub const EVENTS_NAMESPACE: &str = "slack-events";

/// The key-value namespaces the pack keeps its state in (event claims,
/// thread records, progress cursors), which the host endpoint refuses to
/// tools and handlers: a planted claim would swallow an event, a planted
/// thread record would engage the bot in a thread and pick its approver.
pub const NAMESPACES: &[&str] = &[EVENTS_NAMESPACE, THREADS_NAMESPACE, PROGRESS_NAMESPACE];

/// The answer to a request, for the HTTP layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ingress {
    /// `url_verification`: echo the challenge.
    Challenge(String),
    /// Nothing to do, and why.
    Ignored(String),
    /// An event already taken (Slack's retry): acknowledged, not run again.
    Duplicate {
        /// The session it reached, when it did.
        session_id: Option<String>,
    },
    /// A message for the thread's session: hand it to the channel, then
    /// call [`Slack::woke`] (or [`Slack::release`] when that failed).
    Engage {
        /// The message and its thread.
        engage: Engage,
        /// The event id (the delivery id of the message).
        event_id: String,
        /// How it joins a busy session.
        admission: Admission,
    },
    /// A stop word: stop the session's running turn (and its queued
    /// follow-ups).
    Stop {
        /// The thread's session; `None` when the thread has none.
        session_id: Option<SessionId>,
        /// Who asked.
        user: String,
    },
    /// An Approve or Deny click by someone who may decide.
    Decision {
        /// The session of the parked call.
        session_id: SessionId,
        /// The parked call.
        call_id: String,
        /// Approve or deny.
        approved: bool,
        /// The principal that decided (`slack:<user id>`).
        principal: String,
    },
    /// A click by someone who may not decide (they are told so in Slack).
    Refused(String),
}

/// Why a request could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptError {
    /// No Slack channel of that name.
    #[error("no Slack channel named `{0}`")]
    UnknownChannel(String),
    /// The bot's identity could not be learned (`auth.test` failed): the
    /// request cannot be classified; Slack retries it.
    #[error("cannot learn who the bot is from Slack: {0}")]
    Identity(#[from] api::ApiError),
    /// The store failed.
    #[error("the store failed: {0}")]
    Store(#[from] bdk_store::StoreError),
}

/// The Slack pack of one agent: a host extension. Cheap to clone.
#[derive(Clone)]
pub struct Slack {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Slack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slack")
            .field("channels", &self.channels())
            .finish_non_exhaustive()
    }
}

impl Slack {
    /// The pack for `project`'s Slack channels; `None` when it has none.
    pub fn from_project(project: &Project, options: SlackOptions) -> Option<Self> {
        let packs: BTreeMap<String, Arc<Pack>> = project
            .channels
            .iter()
            .filter_map(|c| {
                let settings = c.slack.clone()?;
                Some((
                    c.name.clone(),
                    Arc::new(Pack::new(c.name.clone(), settings, &options)),
                ))
            })
            .collect();
        if packs.is_empty() {
            return None;
        }
        Some(Self {
            inner: Arc::new(Inner {
                packs,
                runtime: OnceLock::new(),
                shutdown: OnceLock::new(),
                following: Following::default(),
            }),
        })
    }

    /// The names of the Slack channels.
    pub fn channels(&self) -> Vec<String> {
        self.inner.packs.keys().cloned().collect()
    }

    /// The settings of Slack channel `channel`.
    pub fn settings(&self, channel: &str) -> Option<&SlackChannel> {
        self.inner.packs.get(channel).map(|p| &p.settings)
    }

    /// The signing secret of `channel`, when its variable is set.
    pub fn signing_secret(&self, channel: &str) -> Option<String> {
        self.inner.packs.get(channel)?.signing_secret()
    }

    /// The Web API client of `channel`, with its current token.
    pub fn client(&self, channel: &str) -> Result<api::SlackClient, api::ApiError> {
        let pack =
            self.inner.packs.get(channel).ok_or_else(|| {
                api::ApiError::Config(format!("no Slack channel named `{channel}`"))
            })?;
        pack.client()
    }

    /// Decides what a (signature-checked) request to `channel` means. An
    /// event that engages the bot or stops a turn claims its `event_id`
    /// durably: the same id again (Slack's retry) is
    /// [`Ingress::Duplicate`]. An [`Ingress::Engage`] must be followed by
    /// [`Slack::woke`] or [`Slack::release`].
    pub async fn accept(&self, channel: &str, request: Request) -> Result<Ingress, AcceptError> {
        let pack = self
            .inner
            .packs
            .get(channel)
            .ok_or_else(|| AcceptError::UnknownChannel(channel.to_owned()))?;
        match request {
            Request::UrlVerification { challenge } => Ok(Ingress::Challenge(challenge)),
            Request::Other(kind) => Ok(Ingress::Ignored(format!(
                "`{kind}` requests need no action"
            ))),
            Request::Interaction(payload) => self.interaction(pack, payload).await,
            Request::Event {
                event_id, event, ..
            } => {
                let bot = pack.bot().await?;
                let classified = ingress::classify(&pack.settings, &bot, &event);
                let store = self.store()?;
                match classified {
                    Classified::Ignored(reason) => Ok(Ingress::Ignored(reason)),
                    Classified::Stop { key, user } => {
                        if let Some(dup) = self.claim(store.as_ref(), channel, &event_id).await? {
                            return Ok(dup);
                        }
                        let thread = thread::load(store.as_ref(), channel, &key).await?;
                        self.done(
                            store.as_ref(),
                            channel,
                            &event_id,
                            thread.as_ref().map(|t| t.session_id.as_str()),
                        )
                        .await;
                        Ok(Ingress::Stop {
                            session_id: thread.and_then(|t| SessionId::parse(&t.session_id)),
                            user,
                        })
                    }
                    Classified::Engage(engage) => {
                        if engage.via == Via::Thread
                            && thread::load(store.as_ref(), channel, &engage.key())
                                .await?
                                .is_none()
                        {
                            return Ok(Ingress::Ignored(
                                "a reply in a thread the bot is not in".to_owned(),
                            ));
                        }
                        if let Some(dup) = self.claim(store.as_ref(), channel, &event_id).await? {
                            return Ok(dup);
                        }
                        Ok(Ingress::Engage {
                            engage,
                            event_id,
                            admission: pack.settings.admission,
                        })
                    }
                }
            }
        }
    }

    fn store(&self) -> Result<Arc<dyn bdk_store::Store>, AcceptError> {
        self.inner.store().ok_or_else(|| {
            AcceptError::Store(bdk_store::StoreError::Io(std::io::Error::other(
                "the host is shutting down",
            )))
        })
    }

    /// Claims `event_id`; `Some(Duplicate)` when it was claimed before
    /// (and the claim is not stale).
    async fn claim(
        &self,
        store: &dyn bdk_store::Store,
        channel: &str,
        event_id: &str,
    ) -> Result<Option<Ingress>, AcceptError> {
        let claimed =
            bdk_core::claims::claim(store, EVENTS_NAMESPACE, channel, event_id, Utc::now()).await?;
        Ok(match claimed {
            bdk_core::claims::Claim::Taken => None,
            bdk_core::claims::Claim::Duplicate { session } => Some(Ingress::Duplicate {
                session_id: session,
            }),
        })
    }

    async fn done(
        &self,
        store: &dyn bdk_store::Store,
        channel: &str,
        event_id: &str,
        session: Option<&str>,
    ) {
        bdk_core::claims::done(
            store,
            EVENTS_NAMESPACE,
            channel,
            event_id,
            session,
            Utc::now(),
        )
        .await;
    }

    /// Records that `engage` reached `session`, remembers the thread, and
    /// follows the session's progress (from its first event when
    /// `created`).
    pub async fn woke(
        &self,
        channel: &str,
        engage: &Engage,
        event_id: &str,
        session: &SessionId,
        created: bool,
    ) {
        if let Some(store) = self.inner.store() {
            self.done(store.as_ref(), channel, event_id, Some(session.as_ref()))
                .await;
            let record = Thread {
                conversation: engage.conversation.clone(),
                thread_ts: engage.thread_ts.clone(),
                session_id: session.to_string(),
                starter: engage.user.clone(),
            };
            if let Err(e) = thread::save_new(store.as_ref(), channel, &record).await {
                tracing::warn!(channel, error = %e, "cannot record a Slack thread");
            }
        }
        let start = if created {
            FollowStart::New
        } else {
            FollowStart::Resume
        };
        self.follow(
            channel,
            session,
            &engage.conversation,
            &engage.thread_ts,
            start,
        )
        .await;
    }

    /// Gives back the claim of an event whose session could not be woken,
    /// so Slack's retry runs it.
    pub async fn release(&self, channel: &str, event_id: &str) {
        if let Some(store) = self.inner.store() {
            bdk_core::claims::release(store.as_ref(), EVENTS_NAMESPACE, channel, event_id).await;
        }
    }

    /// A button click: an Approve or Deny on one of the pack's cards.
    async fn interaction(&self, pack: &Pack, payload: Value) -> Result<Ingress, AcceptError> {
        let kind = payload.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "block_actions" {
            return Ok(Ingress::Ignored(format!(
                "`{kind}` interactions are not acted on"
            )));
        }
        let Some(action) = payload
            .get("actions")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        else {
            return Ok(Ingress::Ignored("a click without an action".to_owned()));
        };
        let action_id = action
            .get("action_id")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !matches!(action_id, "bdk_approve" | "bdk_deny") {
            return Ok(Ingress::Ignored(format!(
                "`{action_id}` is not one of the pack's buttons"
            )));
        }
        let value: Value = action
            .get("value")
            .and_then(Value::as_str)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or(Value::Null);
        let (Some(session), Some(call), Some(approve)) = (
            value.get("session").and_then(Value::as_str),
            value.get("call").and_then(Value::as_str),
            value.get("approve").and_then(Value::as_bool),
        ) else {
            return Ok(Ingress::Ignored(
                "a button value the pack did not write".to_owned(),
            ));
        };
        if approve != (action_id == "bdk_approve") {
            return Ok(Ingress::Ignored(
                "a button whose value contradicts it".to_owned(),
            ));
        }
        let Some(user) = payload.pointer("/user/id").and_then(Value::as_str) else {
            return Ok(Ingress::Ignored("a click by nobody".to_owned()));
        };
        let conversation = payload
            .pointer("/container/channel_id")
            .or_else(|| payload.pointer("/channel/id"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let thread_ts = payload
            .pointer("/container/thread_ts")
            .or_else(|| payload.pointer("/message/thread_ts"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let store = self.store()?;
        let key = ingress::thread_key(conversation, thread_ts);
        let thread = thread::load(store.as_ref(), &pack.name, &key).await?;
        // The card must sit in the thread of the session it names.
        let Some(thread) = thread.filter(|t| t.session_id == session) else {
            return Ok(Ingress::Ignored(
                "a card that is not in its session's thread".to_owned(),
            ));
        };
        let allowed = if pack.settings.approvers.is_empty() {
            thread.starter == user
        } else {
            pack.settings.approvers.iter().any(|a| a == user)
        };
        if !allowed {
            let who = if pack.settings.approvers.is_empty() {
                format!("<@{}>, who started this thread,", thread.starter)
            } else {
                "the approvers this agent names".to_owned()
            };
            let text = format!("Only {who} can approve or deny this call.");
            if let Ok(client) = pack.client() {
                let args = json!({"channel": conversation, "user": user, "text": text, "thread_ts": thread_ts});
                tokio::spawn(async move {
                    if let Err(e) = client.call("chat.postEphemeral", args).await {
                        tracing::debug!(error = %e, "cannot tell a user they may not approve");
                    }
                });
            }
            return Ok(Ingress::Refused(format!(
                "{user} may not approve calls in this thread"
            )));
        }
        let Some(session_id) = SessionId::parse(session) else {
            return Ok(Ingress::Ignored("a button naming no session".to_owned()));
        };
        Ok(Ingress::Decision {
            session_id,
            call_id: call.to_owned(),
            approved: approve,
            principal: format!("slack:{user}"),
        })
    }

    async fn follow(
        &self,
        channel: &str,
        session: &SessionId,
        conversation: &str,
        thread_ts: &str,
        start: FollowStart,
    ) {
        let (Some(pack), Some(store), Some(shutdown)) = (
            self.inner.packs.get(channel),
            self.inner.store(),
            self.inner.shutdown.get(),
        ) else {
            return;
        };
        let cursor = Cursor::new(
            Arc::clone(&store),
            PROGRESS_NAMESPACE,
            "Slack progress",
            &pack.name,
            session,
        );
        let follower = progress::Follower::new(
            Arc::clone(pack),
            store,
            session.clone(),
            conversation.to_owned(),
            thread_ts.to_owned(),
        );
        self.inner
            .following
            .spawn(
                cursor,
                start,
                shutdown.clone(),
                progress::Progress::new(follower),
            )
            .await;
    }

    /// Follows the existing sessions of the Slack channels (after a
    /// restart), from where each follower stopped.
    async fn resume(&self) {
        let Some(store) = self.inner.store() else {
            return;
        };
        let sessions = match store.list_sessions().await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot list sessions; Slack progress does not resume for existing sessions");
                return;
            }
        };
        for record in sessions {
            if !self.inner.packs.contains_key(&record.channel) {
                continue;
            }
            let Some((conversation, thread_ts)) = record
                .continuation_token
                .strip_prefix(&format!("{}:", record.channel))
                .and_then(thread::parse_key)
                .map(|(c, t)| (c.to_owned(), t.to_owned()))
            else {
                continue;
            };
            self.follow(
                &record.channel,
                &record.id,
                &conversation,
                &thread_ts,
                FollowStart::Resume,
            )
            .await;
        }
    }
}

#[async_trait]
impl HostExtension for Slack {
    fn name(&self) -> &'static str {
        "slack"
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }

    fn operations(&self) -> &'static [&'static str] {
        ops::OPERATIONS
    }

    fn reserved_namespaces(&self) -> &'static [&'static str] {
        NAMESPACES
    }

    async fn operation(&self, call: OperationCall<'_>) -> Result<Value, OperationError> {
        ops::operation(&self.inner, call).await
    }

    async fn start(&self, runtime: RuntimeLink, shutdown: CancellationToken) -> HostResult<()> {
        let _ = self.inner.runtime.set(runtime);
        let _ = self.inner.shutdown.set(shutdown);
        let me = self.clone();
        tokio::spawn(async move { me.resume().await });
        if let Some(store) = self.inner.store()
            && let Some(shutdown) = self.inner.shutdown.get().cloned()
        {
            tokio::spawn(bdk_core::claims::keep_pruned(
                store,
                EVENTS_NAMESPACE,
                shutdown,
            ));
        }
        Ok(())
    }
}
